//! `FI_EP_MSG` connection management through event queues (`fi_cm(3)`): a passive endpoint
//! gets FI_CONNREQ with the requester's address and param data, accept and reject answer it,
//! both sides see FI_CONNECTED (or the requester FI_ECONNREFUSED), a connected endpoint sends
//! to its peer without naming an fi_addr, and shutdown reaches the peer as FI_SHUTDOWN.

use std::time::{Duration, Instant};
use uet_av::FiErrno;
use uet_driver::{
    DmaPool, Endpoint, EndpointAttr, EpType, EqEventKind, EventQueue, Nic, PassiveEndpoint,
};
use uet_fwif::ReturnCode;
use uet_tests::{
    fabric, forged, job_endpoint, open_av, open_nic, poll_one, wait_error, wait_event,
};

const JOB: u32 = 0xC044;

fn msg_attr() -> EndpointAttr {
    EndpointAttr {
        job_id: JOB,
        ep_type: EpType::Msg,
        ..EndpointAttr::default()
    }
}

fn msg_ep(nic: &Nic) -> (Endpoint, EventQueue) {
    let mut ep = nic.endpoint(msg_attr(), None).unwrap();
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    ep.bind_eq(&eq).unwrap();
    (ep, eq)
}

/// A passive endpoint of the job on `nic`, reporting to `eq`.
fn listen(nic: &Nic, eq: &EventQueue) -> PassiveEndpoint {
    nic.passive_endpoint(
        EndpointAttr {
            job_id: JOB,
            ..EndpointAttr::default()
        },
        eq,
    )
    .unwrap()
}

/// Two NICs of one fabric and a listener of the job on the first (`ns`), reporting to
/// `eq_l`. Fields drop in order: the listener first, the fabric last.
struct Listening {
    pep: PassiveEndpoint,
    eq_l: EventQueue,
    ns: Nic,
    nc: Nic,
    fns: Vec<uet_sim::SimFunction>,
    fabric: uet_sim::Fabric,
}

impl Listening {
    fn new() -> Listening {
        Listening::of(fabric(2))
    }

    /// On NICs of interface minor `minor`.
    fn at_interface(minor: u8) -> Listening {
        Listening::of(uet_tests::fabric_with(2, |cfg| cfg.interface_minor = minor))
    }

    /// A connection request (no parameter) from a new endpoint of the client NIC, as the
    /// listener reads it: the endpoint, its event queue and the request.
    fn request(&self) -> (Endpoint, EventQueue, uet_driver::cm::ConnReq) {
        let (mut client, eq_c) = msg_ep(&self.nc);
        client
            .connect(&self.pep.address().to_bytes().unwrap(), b"")
            .unwrap();
        let req = self.pep.connreq(&wait_event(&self.eq_l)).unwrap();
        (client, eq_c, req)
    }

    /// Whose listener's event queue has `size` entries.
    fn with_eq_size(size: usize) -> Listening {
        Listening::of_eq(fabric(2), size)
    }

    fn of(fns: (uet_sim::Fabric, Vec<uet_sim::SimFunction>)) -> Listening {
        Listening::of_eq(fns, uet_tests::WAITABLE_EQ.size)
    }

    fn of_eq(
        (fabric, fns): (uet_sim::Fabric, Vec<uet_sim::SimFunction>),
        size: usize,
    ) -> Listening {
        let (ns, nc) = (open_nic(&fns[0]), open_nic(&fns[1]));
        let eq_l = EventQueue::open(uet_driver::EqAttr {
            size,
            ..uet_tests::WAITABLE_EQ
        })
        .unwrap();
        let pep = listen(&ns, &eq_l);
        Listening {
            pep,
            eq_l,
            ns,
            nc,
            fns,
            fabric,
        }
    }
}

/// An endpoint of `nic` whose connection request to `pep` (no parameter) times out after
/// `timeout`, and its event queue.
fn request_within(nic: &Nic, pep: &PassiveEndpoint, timeout: Duration) -> (Endpoint, EventQueue) {
    let (mut ep, eq) = msg_ep(nic);
    ep.set_connect_timeout(Some(timeout)).unwrap();
    ep.connect(&pep.address().to_bytes().unwrap(), b"").unwrap();
    (ep, eq)
}

fn send(ep: &mut Endpoint, pool: &DmaPool, data: &[u8]) {
    let b = filled(pool, data);
    ep.send(b, 1, 0).map_err(|(e, _)| e).unwrap();
    let ev = poll_one(ep).expect("send completes");
    assert!(ev.error.is_none(), "{:?}", ev.error);
}

fn recv(ep: &mut Endpoint) -> Vec<u8> {
    let ev = poll_one(ep).expect("a message");
    assert!(ev.error.is_none(), "{:?}", ev.error);
    ev.buffer.unwrap().to_vec().unwrap()
}

/// Whether `ep`'s completion descriptor (its vector, `cq_wait_fd`) polls readable now.
fn completion_raised(ep: &mut Endpoint) -> bool {
    use std::os::fd::AsRawFd;
    let fd = ep.cq_wait_fd().expect("a completion vector").as_raw_fd();
    uet_tests::readable_within(fd, Duration::ZERO)
}

#[test]
fn connect_accept_send_and_shutdown() {
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, eq_c) = msg_ep(nc);
    let pool_c = DmaPool::new(nc, 4096, 8).unwrap();
    let pool_s = DmaPool::new(ns, 4096, 8).unwrap();

    // Nothing can be sent before the connection exists.
    let (e, _) = client.send(pool_c.alloc().unwrap(), 0, 0).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOTCONN, "{e}");

    client
        .connect(&pep.address().to_bytes().unwrap(), b"hello listener")
        .unwrap();
    let e = client.connect(&pep.address().to_bytes().unwrap(), b"again");
    assert_eq!(e.unwrap_err().errno(), FiErrno::FI_EOPBADSTATE);

    let ev = wait_event(eq_l);
    assert_eq!(ev.kind, EqEventKind::ConnReq);
    assert_eq!(ev.fid, pep.fid());
    assert_eq!(ev.cm_data, b"hello listener");
    let req = pep.connreq(&ev).unwrap();
    assert_eq!(req.peer, *client.address(), "the requester's address");

    let (mut server, eq_s) = msg_ep(ns);
    server.post_recv(pool_s.alloc().unwrap(), 10).unwrap();
    client.post_recv(pool_c.alloc().unwrap(), 20).unwrap();
    pep.accept(&req, &mut server, b"welcome").unwrap();
    // The request is answered: a second accept or a reject is an invalid argument, and
    // leaves the other endpoint as it was.
    let (mut other, _eq_o) = msg_ep(ns);
    let e = pep.accept(&req, &mut other, b"").unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
    assert_eq!(
        pep.reject(&req, b"").unwrap_err().errno(),
        FiErrno::FI_EINVAL
    );
    assert!(!other.is_connected());

    let ev = wait_event(&eq_c);
    assert_eq!(
        (ev.kind, ev.fid, ev.cm_data.as_slice()),
        (EqEventKind::Connected, client.fid(), &b"welcome"[..])
    );
    let ev = wait_event(&eq_s);
    assert_eq!((ev.kind, ev.fid), (EqEventKind::Connected, server.fid()));
    assert!(client.is_connected() && server.is_connected());
    // Each side's peer is the other endpoint (the client's is the acceptor, not the listener).
    assert_eq!(client.peer_address().unwrap(), *server.address());
    assert_eq!(server.peer_address().unwrap(), *client.address());

    // Connected: sends name no destination and reach the peer, both ways.
    send(&mut client, &pool_c, b"ping");
    assert_eq!(recv(&mut server), b"ping");
    send(&mut server, &pool_s, b"pong");
    assert_eq!(recv(&mut client), b"pong");
    // Even post_send's fi_addr is ignored: the peer is the only destination.
    let b = filled(&pool_c, b"to the peer");
    server.post_recv(pool_s.alloc().unwrap(), 11).unwrap();
    client.post_send(12345, b, 2, 0).unwrap();
    assert!(poll_one(&mut client).unwrap().error.is_none());
    assert_eq!(recv(&mut server), b"to the peer");

    // Shutdown reaches the peer; neither side can send any more.
    client.shutdown().unwrap();
    let ev = wait_event(&eq_s);
    assert_eq!((ev.kind, ev.fid), (EqEventKind::Shutdown, server.fid()));
    for ep in [&mut client, &mut server] {
        let e = ep.shutdown().unwrap_err();
        assert_eq!(e.errno(), FiErrno::FI_ENOTCONN, "{e}");
    }
    let (e, _) = client.send(pool_c.alloc().unwrap(), 0, 0).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOTCONN);
    let (e, _) = server.send(pool_s.alloc().unwrap(), 0, 0).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOTCONN);
    assert_eq!(
        client.peer_address().unwrap_err().errno(),
        FiErrno::FI_ENOTCONN
    );
    assert_eq!(pep.dropped() + client.cm_dropped() + server.cm_dropped(), 0);
}

#[test]
fn reject_and_unreachable_listeners_refuse_the_connection() {
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, eq_c) = msg_ep(nc);
    client
        .connect(&pep.address().to_bytes().unwrap(), b"please")
        .unwrap();
    let ev = wait_event(eq_l);
    let req = pep.connreq(&ev).unwrap();
    pep.reject(&req, b"go away").unwrap();
    assert_eq!(
        pep.reject(&req, b"").unwrap_err().errno(),
        FiErrno::FI_EINVAL
    );
    // Answered, it is no request any more, whichever call names it again.
    assert_eq!(pep.connreq(&ev).unwrap_err().errno(), FiErrno::FI_EINVAL);
    let (mut other, _eq_o) = msg_ep(ns);
    let e = pep.accept(&req, &mut other, b"").unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
    let err = wait_error(&eq_c);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, client.fid()));
    assert!(err.err_data.contains("go away"), "{}", err.err_data);
    assert!(!client.is_connected());

    // No listener at that PIDonFEP: the request is refused by the target NIC.
    let (mut lost, eq_x) = msg_ep(nc);
    let nowhere = forged(pep.address(), |a| a.pid_on_fep += 7);
    lost.connect(&nowhere, b"").unwrap();
    let err = wait_error(&eq_x);
    assert_eq!(err.err, FiErrno::FI_ECONNREFUSED);
    assert_eq!(err.prov_errno, i32::from(ReturnCode::BadPid as u8));
}

#[test]
fn a_listener_named_without_its_initiator_refuses_a_request_it_rejects() {
    // An address in FI_ADDR_STR form names a listener by its Fabric Address and PIDonFEP,
    // with initiator 0 unless it says more: the request reaches the listener, but the NIC
    // finds the sender of its REJECT (the listener's own initiator) in no entry of the
    // requester's AV. It is the listener's all the same, and refuses the request.
    let l = Listening::new();
    let (nc, eq_l, pep) = (&l.nc, &l.eq_l, &l.pep);
    assert_ne!(pep.address().initiator, 0);
    let (mut client, eq_c) = msg_ep(nc);
    client.set_connect_timeout(None).unwrap();
    client
        .connect(&forged(pep.address(), |a| a.initiator = 0), b"")
        .unwrap();
    let req = pep.connreq(&wait_event(eq_l)).unwrap();
    pep.reject(&req, b"no").unwrap();
    let err = wait_error(&eq_c);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, client.fid()));
    assert_eq!(err.cm_data, b"no");
    assert_eq!(client.cm_dropped(), 0);
}

#[test]
fn a_rejected_requester_gets_the_reject_param_byte_for_byte() {
    // fi_cm(3): the data fi_reject sends reaches the requester as err_data of its
    // FI_ECONNREFUSED. An application's reject data need not be text.
    let l = Listening::new();
    let (nc, pep) = (&l.nc, &l.pep);
    let (client, eq_c, req) = l.request();
    let why = [0xFF, 0x00, 0x80, 0xC3, b'"', b'x'];
    pep.reject(&req, &why).unwrap();
    let err = wait_error(&eq_c);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, client.fid()));
    assert_eq!(err.cm_data, why);
    // Other refusals carry none.
    let (mut lost, eq_x) = msg_ep(nc);
    lost.connect(&forged(pep.address(), |a| a.pid_on_fep += 7), b"")
        .unwrap();
    assert!(wait_error(&eq_x).cm_data.is_empty());
}

#[test]
fn misuse_gets_clear_errors() {
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let av = open_av(&nic, JOB, 4, 0);
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let pep = listen(&nic, &eq);
    let listener = pep.address().to_bytes().unwrap();
    // connect, shutdown and bind_eq on an RDM endpoint.
    let mut rdm = job_endpoint(&nic, JOB, &av);
    assert_eq!(
        rdm.connect(&listener, b"").unwrap_err().errno(),
        FiErrno::FI_EOPNOTSUPP
    );
    assert_eq!(rdm.shutdown().unwrap_err().errno(), FiErrno::FI_EOPNOTSUPP);
    assert_eq!(
        rdm.bind_eq(&eq).unwrap_err().errno(),
        FiErrno::FI_EOPNOTSUPP
    );
    // A MSG endpoint takes no AV, needs an EQ, and a short enough param.
    assert_eq!(
        nic.endpoint(msg_attr(), Some(&av)).err().unwrap().errno(),
        FiErrno::FI_EINVAL
    );
    let mut unbound = nic.endpoint(msg_attr(), None).unwrap();
    assert_eq!(
        unbound.connect(&listener, b"").unwrap_err().errno(),
        FiErrno::FI_ENOEQ
    );
    unbound.bind_eq(&eq).unwrap();
    assert_eq!(
        unbound.bind_eq(&eq).unwrap_err().errno(),
        FiErrno::FI_EOPBADSTATE
    );
    let long = vec![0u8; uet_fwif::cm::MAX_CM_DATA + 1];
    assert_eq!(
        unbound.connect(&listener, &long).unwrap_err().errno(),
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        unbound.connect(&[0u8; 7], b"").unwrap_err().errno(),
        FiErrno::FI_EINVAL
    );
    // A closed event queue is FI_EBADF for a listener and for an endpoint, as for any bind.
    let closed = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    closed.clone().close().unwrap();
    let mut fresh = nic.endpoint(msg_attr(), None).unwrap();
    assert_eq!(
        fresh.bind_eq(&closed).unwrap_err().errno(),
        FiErrno::FI_EBADF
    );
    let attr = EndpointAttr {
        job_id: JOB,
        ..EndpointAttr::default()
    };
    assert_eq!(
        nic.passive_endpoint(attr, &closed).err().unwrap().errno(),
        FiErrno::FI_EBADF
    );
    // Shutdown of an endpoint that never connected.
    assert_eq!(
        unbound.shutdown().unwrap_err().errno(),
        FiErrno::FI_ENOTCONN
    );
    assert!(eq.is_empty());
}

#[test]
fn a_connection_request_to_an_endpoint_that_does_not_listen_is_refused() {
    // fi_connect names an active FI_EP_MSG endpoint instead of a passive one: its control
    // channel takes the CONNREQ but no listener is there to answer it. The requester must be
    // refused (FI_ECONNREFUSED), not left connecting forever.
    let (_f, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let (target, eq_t) = msg_ep(&na);
    let (mut client, eq_c) = msg_ep(&nb);
    client
        .connect(&target.address().to_bytes().unwrap(), b"anyone?")
        .unwrap();
    let err = wait_error(&eq_c);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, client.fid()));
    assert!(!client.is_connected());
    // More requests than the target's own AV has entries: each answer's entry goes again.
    for _ in 0..6 {
        let (mut other, eq_o) = msg_ep(&nb);
        other
            .connect(&target.address().to_bytes().unwrap(), b"")
            .unwrap();
        assert_eq!(wait_error(&eq_o).err, FiErrno::FI_ECONNREFUSED);
    }
    // The target is untouched: it still connects to a listener itself.
    let eq_l = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let pep = listen(&nb, &eq_l);
    let (mut server, eq_s) = msg_ep(&nb);
    let mut target = target;
    target
        .connect(&pep.address().to_bytes().unwrap(), b"")
        .unwrap();
    let req = pep.connreq(&wait_event(&eq_l)).unwrap();
    pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_t).kind, EqEventKind::Connected);
    assert!(target.is_connected());
}

#[test]
fn a_connection_request_to_an_endpoint_that_took_a_closed_listeners_address_is_refused() {
    // The listener closed and the NIC gave its PIDonFEP to an active endpoint, which takes
    // the CONNREQ and answers it with a REJECT. The requester's AV holds the listener, not
    // the newcomer (another initiator): the NIC finds the REJECT's sender in no entry. It is
    // still where the request went, and the requester is refused at once, not left
    // connecting until its deadline (without one, for ever).
    let l = Listening::new();
    let gone = *l.pep.address();
    let Listening { pep, ns, nc, .. } = l;
    drop(pep);
    let (newcomer, eq_n) = msg_ep(&ns);
    let at = *newcomer.address();
    assert_eq!(
        (at.pid_on_fep, at.fabric_addr),
        (gone.pid_on_fep, gone.fabric_addr),
        "the NIC gave the PIDonFEP out again"
    );
    assert_ne!(at.initiator, gone.initiator);
    let (mut client, eq_c) = msg_ep(&nc);
    client.set_connect_timeout(None).unwrap();
    client.connect(&gone.to_bytes().unwrap(), b"").unwrap();
    let err = wait_error(&eq_c);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, client.fid()));
    assert_eq!(client.cm_dropped(), 0);
    assert!(eq_n.is_empty(), "the newcomer hears of nothing");
}

#[test]
fn closing_a_listener_refuses_the_requests_it_left_unanswered() {
    // The application closes its passive endpoint with a connection request it neither
    // accepted nor rejected: the requester must learn it was refused, not wait forever.
    // The listener and its queue are this test's own: it closes them.
    let (_f, fns) = fabric(2);
    let (ns, nc) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let eq_l = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let pep = listen(&ns, &eq_l);
    // More requests than the listener's control TX ring holds REJECTs at once.
    let clients: Vec<(Endpoint, EventQueue)> = (0..12)
        .map(|_| {
            let (mut client, eq_c) = msg_ep(&nc);
            client
                .connect(&pep.address().to_bytes().unwrap(), b"")
                .unwrap();
            assert_eq!(wait_event(&eq_l).kind, EqEventKind::ConnReq);
            (client, eq_c)
        })
        .collect();
    drop(pep);
    for (client, eq_c) in &clients {
        let err = wait_error(eq_c);
        assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, client.fid()));
    }
    // The listener's queue is free again.
    eq_l.close().unwrap();
}

#[test]
fn a_request_the_listener_cannot_report_is_refused() {
    // The listener's event queue has no room for the FI_CONNREQ (an application that does
    // not read it): the request is not held, and its requester must be refused rather than
    // left waiting for an answer the application never hears of.
    let l = Listening::with_eq_size(1);
    let (nc, eq_l, pep) = (&l.nc, &l.eq_l, &l.pep);
    let listener = pep.address().to_bytes().unwrap();
    let (mut first, _eq_1) = msg_ep(nc);
    first.connect(&listener, b"").unwrap();
    let (mut second, eq_2) = msg_ep(nc);
    second.connect(&listener, b"").unwrap();
    let err = wait_error(&eq_2);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNREFUSED, second.fid()));
    // The first request was reported and is still the application's to answer.
    let ev = wait_event(eq_l);
    assert_eq!(ev.kind, EqEventKind::ConnReq);
    assert!(pep.connreq(&ev).is_ok());
}

/// `fi_close` of a connected endpoint ends the connection as `fi_shutdown` does: the peer
/// gets `FI_SHUTDOWN` and can no longer send, instead of sending into an endpoint that is
/// gone.
#[test]
fn closing_a_connected_endpoint_shuts_the_connection_down() {
    let l = Listening::new();
    let (fns, ns, pep) = (&l.fns, &l.ns, &l.pep);
    let (client, eq_c, req) = l.request();
    let (mut server, eq_s) = msg_ep(ns);
    pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    let pool_s = DmaPool::new(ns, 4096, 4).unwrap();

    drop(client);
    let ev = wait_event(&eq_s);
    assert_eq!((ev.kind, ev.fid), (EqEventKind::Shutdown, server.fid()));
    assert!(!server.is_connected());
    let (e, _) = server.send(pool_s.alloc().unwrap(), 0, 0).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOTCONN, "{e}");
    // Closing the side already shut down sends nothing more.
    let sent = fns[0].counter(uet_regs::TX_PACKETS);
    drop(server);
    assert_eq!(
        fns[0].counter(uet_regs::TX_PACKETS),
        sent,
        "no second SHUTDOWN"
    );
}

/// Connect `client` to `pep` and answer the request with `server`; the listener's queue is
/// `eq_l`.
fn accept_one(
    pep: &PassiveEndpoint,
    eq_l: &EventQueue,
    client: &mut Endpoint,
    server: &mut Endpoint,
) {
    client
        .connect(&pep.address().to_bytes().unwrap(), b"")
        .unwrap();
    let req = pep.connreq(&wait_event(eq_l)).unwrap();
    pep.accept(&req, server, b"").unwrap();
}

#[test]
fn a_shutdown_right_after_fi_connected_reaches_a_requester_that_has_not_read_its_accept() {
    // The acceptor shuts the connection down as soon as it is connected, which may be before
    // the requester took in the ACCEPT and learned who its peer is: the SHUTDOWN is then the
    // next message of its control channel, and must still end the connection.
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    for _ in 0..8 {
        let (mut client, eq_c) = msg_ep(nc);
        let (mut server, eq_s) = msg_ep(ns);
        accept_one(pep, eq_l, &mut client, &mut server);
        assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
        server.shutdown().unwrap();
        assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
        let ev = wait_event(&eq_c);
        assert_eq!((ev.kind, ev.fid), (EqEventKind::Shutdown, client.fid()));
        assert!(!client.is_connected());
        assert_eq!(client.cm_dropped(), 0);
    }
}

/// The peer's shutdown raises the endpoint's completion vector, as a completion would: what
/// sleeps on its armed ring (`cq_sread`, a descriptor after `cq_trywait`) wakes and finds
/// the connection shut down, its receives to be flushed, without waiting for a completion.
/// The vector is raised before `FI_SHUTDOWN` is posted.
#[test]
fn a_peers_shutdown_raises_the_endpoints_completion_vector() {
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, eq_c) = msg_ep(nc);
    let (mut server, eq_s) = msg_ep(ns);
    accept_one(pep, eq_l, &mut client, &mut server);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    server.cq_trywait().unwrap();
    assert!(!completion_raised(&mut server), "nothing completed yet");
    client.shutdown().unwrap();
    let ev = wait_event(&eq_s);
    assert_eq!((ev.kind, ev.fid), (EqEventKind::Shutdown, server.fid()));
    assert!(server.is_shut_down());
    assert!(
        completion_raised(&mut server),
        "the shutdown raised the vector"
    );
    assert!(poll_one(&mut server).is_none(), "and nothing completed");
    // The side that shut down is not woken: it knows.
    client.cq_trywait().unwrap();
    assert!(!completion_raised(&mut client));
}

#[test]
fn an_endpoint_whose_accepts_were_aborted_still_accepts() {
    // Each requester closes before its request is accepted: the ACCEPT is not delivered
    // (FI_ECONNABORTED) and the endpoint is idle again, free to accept another request,
    // as many times as that happens.
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut server, eq_s) = msg_ep(ns);
    // An endpoint opened before each requester closes keeps its PIDonFEP from being given
    // out again before the ACCEPT to it fails.
    let mut keep = Vec::new();
    for _ in 0..6 {
        let (mut client, _eq_c) = msg_ep(nc);
        client
            .connect(&pep.address().to_bytes().unwrap(), b"")
            .unwrap();
        let req = pep.connreq(&wait_event(eq_l)).unwrap();
        keep.push(msg_ep(nc));
        drop(client);
        pep.accept(&req, &mut server, b"").unwrap();
        let err = wait_error(&eq_s);
        assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNABORTED, server.fid()));
    }
    let (mut client, eq_c) = msg_ep(nc);
    accept_one(pep, eq_l, &mut client, &mut server);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
}

/// One side of a connection is closed right after `fi_accept`, before it has seen
/// `FI_CONNECTED` (the acceptor), or with the ACCEPT in its control channel still unread (the
/// requester). The other side is connected by the ACCEPT, so it must hear of the close: its
/// `FI_CONNECTED`, then `FI_SHUTDOWN`.
fn closing_one_side_as_it_connects_shuts_the_other_down(close_acceptor: bool) {
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, eq_c) = msg_ep(nc);
    let (mut server, eq_s) = msg_ep(ns);
    accept_one(pep, eq_l, &mut client, &mut server);
    let (other, eq) = if close_acceptor {
        drop(server);
        (client, eq_c)
    } else {
        drop(client);
        (server, eq_s)
    };
    assert_eq!(wait_event(&eq).kind, EqEventKind::Connected);
    let ev = wait_event(&eq);
    assert_eq!((ev.kind, ev.fid), (EqEventKind::Shutdown, other.fid()));
    assert!(!other.is_connected());
}

#[test]
fn closing_the_accepting_endpoint_right_after_fi_accept_shuts_the_connection_down() {
    closing_one_side_as_it_connects_shuts_the_other_down(true);
}

#[test]
fn closing_the_connecting_endpoint_as_its_accept_arrives_shuts_the_connection_down() {
    closing_one_side_as_it_connects_shuts_the_other_down(false);
}

/// The requester is closed by another thread as the listener's application accepts, racing
/// the ACCEPT, on NICs of interface minor `minor`. Either the requester takes the ACCEPT in
/// before it goes (the acceptor gets `FI_CONNECTED`, then `FI_SHUTDOWN`), or the ACCEPT no
/// longer finds its endpoint (`FI_ECONNABORTED`), or it lands in the requester's ring after
/// its last look, and no READY comes (`FI_ETIMEDOUT` at the acceptor's deadline). In no case
/// is the acceptor left connected to nobody. Returns how many rounds ended each way.
fn a_close_racing_an_accept(minor: u8) -> [usize; 3] {
    let l = Listening::at_interface(minor);
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let mut seen = [0usize; 3];
    for round in 0..40 {
        let (mut client, _eq_c) = msg_ep(nc);
        let (mut server, eq_s) = msg_ep(ns);
        server.set_connect_timeout(Some(SHORT)).unwrap();
        client
            .connect(&pep.address().to_bytes().unwrap(), b"")
            .unwrap();
        let req = pep.connreq(&wait_event(eq_l)).unwrap();
        let closer = std::thread::spawn(move || drop(client));
        pep.accept(&req, &mut server, b"").unwrap();
        closer.join().unwrap();
        match eq_s.sread(Some(Duration::from_secs(5)), 0) {
            Ok(ev) => {
                assert_eq!(ev.kind, EqEventKind::Connected, "round {round}");
                let ev = wait_event(&eq_s);
                assert_eq!(ev.kind, EqEventKind::Shutdown, "round {round}");
                seen[0] += 1;
            }
            Err(e) => {
                assert_eq!(e.errno, FiErrno::FI_EAVAIL, "round {round}: {e}");
                match eq_s.readerr().unwrap().err {
                    FiErrno::FI_ECONNABORTED => seen[1] += 1,
                    FiErrno::FI_ETIMEDOUT => seen[2] += 1,
                    other => panic!("round {round}: {other:?}"),
                }
            }
        }
        assert!(!server.is_connected(), "round {round}");
        assert!(eq_s.is_empty(), "round {round}: nothing more");
    }
    eprintln!("interface 1.{minor}: connected then shut down, aborted, timed out: {seen:?}");
    seen
}

#[test]
fn a_requester_closed_as_its_accept_arrives_never_leaves_the_acceptor_connected() {
    // The closed requester's control channel withdrew its receives before it went: an
    // ACCEPT that came after its last look found no buffer and failed at once.
    let seen = a_close_racing_an_accept(uet_regs::INTERFACE_MINOR);
    assert_eq!(seen[2], 0, "no acceptor waited for its deadline");
}

#[test]
fn before_receive_cancel_a_requester_closed_as_its_accept_arrives_leaves_no_acceptor_connected() {
    // Interface 1.13 cannot withdraw receives: an ACCEPT that lands after the requester's
    // last look goes unanswered, and its acceptor hears of it only at its deadline.
    a_close_racing_an_accept(13);
}

/// The requester closes before its request is answered, and `newcomer` (made on the
/// requester's NIC; it returns the endpoint, its address and its event queue) takes the
/// requester's address. The ACCEPT reaches the newcomer, which made no request: the acceptor
/// must not be connected to it (its sends would land there), and gets `FI_ECONNABORTED`, as
/// when an ACCEPT is not delivered at all, and is idle again; the newcomer hears of
/// nothing. Returns the newcomer.
fn an_accept_to_a_newcomer_ends_the_connection<T>(
    newcomer: impl FnOnce(&Nic) -> (T, uet_fwif::address::UetAddress, EventQueue),
) -> T {
    let l = Listening::new();
    let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
    let (client, _eq_c, req) = l.request();
    let gone = *client.address();
    drop(client);
    let (newcomer, at, eq_n) = newcomer(nc);
    assert_eq!(
        (at.pid_on_fep, at.fabric_addr),
        (gone.pid_on_fep, gone.fabric_addr),
        "the NIC gave the PIDonFEP out again"
    );
    let (mut server, eq_s) = msg_ep(ns);
    pep.accept(&req, &mut server, b"").unwrap();
    let err = wait_error(&eq_s);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNABORTED, server.fid()));
    assert!(eq_s.is_empty(), "never FI_CONNECTED");
    assert!(!server.is_connected());
    assert!(
        eq_n.is_empty(),
        "the newcomer made no request and hears of none"
    );
    newcomer
}

#[test]
fn an_accept_that_reaches_a_new_endpoint_at_the_requesters_address_ends_the_connection() {
    let newcomer = an_accept_to_a_newcomer_ends_the_connection(|nic| {
        let (ep, eq) = msg_ep(nic);
        let at = *ep.address();
        (ep, at, eq)
    });
    assert!(!newcomer.is_connected());
}

#[test]
fn an_accept_that_reaches_a_new_listener_at_the_requesters_address_ends_the_connection() {
    // A passive endpoint's control channel takes the ACCEPT, which it never asked for either.
    an_accept_to_a_newcomer_ends_the_connection(|nic| {
        let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
        let pep = listen(nic, &eq);
        let at = *pep.address();
        (pep, at, eq)
    });
}

#[test]
fn an_accept_that_reaches_the_accepting_endpoint_itself_ends_the_connection() {
    // The requester closes before its request is answered, and the endpoint that accepts it
    // is opened after that on the requester's NIC, where it takes the requester's address:
    // its ACCEPT reaches its own control channel. It made no request, and no READY will come:
    // it gets FI_ECONNABORTED and is idle again, rather than waiting for its deadline (with
    // none, for ever).
    let l = Listening::new();
    let (nc, eq_l, pep) = (&l.nc, &l.eq_l, &l.pep);
    let (client, _eq_c, req) = l.request();
    let gone = *client.address();
    drop(client);
    let (mut server, eq_s) = msg_ep(nc);
    let at = *server.address();
    assert_eq!(
        (at.pid_on_fep, at.fabric_addr),
        (gone.pid_on_fep, gone.fabric_addr),
        "the NIC gave the PIDonFEP out again"
    );
    server.set_connect_timeout(None).unwrap();
    pep.accept(&req, &mut server, b"").unwrap();
    let err = wait_error(&eq_s);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNABORTED, server.fid()));
    assert!(eq_s.is_empty(), "never FI_CONNECTED");
    assert!(!server.is_connected());
    // Idle again: it accepts another request.
    let (mut client, eq_c) = msg_ep(nc);
    accept_one(pep, eq_l, &mut client, &mut server);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
}

/// Where a connection's control progress has no MSI-X vector of its own — the control
/// channels' share of the NIC's vectors taken by other connections — it sleeps on the vector
/// the control channels share beyond it; on a NIC without completion interrupts (interface
/// 1.11) it polls its control channel. Connections come up and go down the same way in every
/// case, and the control channels leave half of the vectors to the application's completion
/// queues.
#[test]
fn connections_without_a_control_vector_of_their_own_still_work() {
    for minor in [uet_regs::INTERFACE_MINOR, 11] {
        let l = Listening::at_interface(minor);
        let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
        // More control channels on the client's NIC than half its vectors: the last ones
        // share one (or, at 1.11, poll).
        let half = usize::from(uet_regs::pci::MSIX_VECTORS) / 2;
        let mut clients: Vec<_> = (0..half + 4).map(|_| msg_ep(nc)).collect();
        let mut app = nc
            .endpoint(
                EndpointAttr {
                    job_id: JOB,
                    ..EndpointAttr::default()
                },
                None,
            )
            .unwrap();
        if minor >= 12 {
            assert_eq!(
                app.cq_trywait(),
                Ok(()),
                "the application's endpoint still gets a vector"
            );
        }
        let mut servers = Vec::new();
        for i in [0, clients.len() - 1] {
            let (client, eq_c) = &mut clients[i];
            let (mut server, eq_s) = msg_ep(ns);
            accept_one(pep, eq_l, client, &mut server);
            assert_eq!(wait_event(eq_c).kind, EqEventKind::Connected, "1.{minor}");
            assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected, "1.{minor}");
            servers.push((server, eq_s));
        }
        for (i, (server, eq_s)) in [0, clients.len() - 1].into_iter().zip(&servers) {
            clients[i].0.shutdown().unwrap();
            let ev = wait_event(eq_s);
            assert_eq!(
                (ev.kind, ev.fid),
                (EqEventKind::Shutdown, server.fid()),
                "1.{minor}"
            );
        }
    }
}

/// The deadline the connection-timeout tests give a request: short, and well under
/// `CM_IDLE_RECHECK` (1 s), so that a progress thread that slept through it (woken only by
/// its idle recheck) is told apart from one that woke for it.
const SHORT: Duration = Duration::from_millis(250);

/// A request no one answers (the listener's application never reads its EQ) ends with an
/// `FI_ETIMEDOUT` error entry of the requester's fid once its deadline passes, and not before;
/// the requester is then left as a refused one is. Checked on a control channel with a
/// vector of its own, on one sharing the vector beyond the control channels' share, and on a
/// NIC without completion interrupts (interface 1.11), whose progress polls.
#[test]
fn a_connection_request_no_one_answers_times_out() {
    for minor in [uet_regs::INTERFACE_MINOR, 11] {
        let l = Listening::at_interface(minor);
        let (nc, eq_l, pep) = (&l.nc, &l.eq_l, &l.pep);
        let listener = pep.address().to_bytes().unwrap();
        // The first client has a vector of its own, the last shares one (at 1.11: polls).
        let half = usize::from(uet_regs::pci::MSIX_VECTORS) / 2;
        let mut clients: Vec<_> = (0..half + 4).map(|_| msg_ep(nc)).collect();
        let last = clients.len() - 1;
        for i in [0, last] {
            let (client, eq_c) = &mut clients[i];
            assert_eq!(
                client.connect_timeout(),
                Some(uet_driver::CM_CONNECT_TIMEOUT)
            );
            client.set_connect_timeout(Some(SHORT)).unwrap();
            // The progress thread is asleep (on its vector, for its idle recheck) when the
            // request is made.
            std::thread::sleep(Duration::from_millis(50));
            let started = Instant::now();
            client.connect(&listener, b"hello?").unwrap();
            std::thread::sleep(SHORT / 2);
            assert!(
                eq_c.is_empty() || started.elapsed() >= SHORT,
                "1.{minor}, client {i}: an event before the deadline"
            );
            let err = wait_error(eq_c);
            let after = started.elapsed();
            assert_eq!(
                (err.err, err.fid),
                (FiErrno::FI_ETIMEDOUT, client.fid()),
                "1.{minor}, client {i}: {}",
                err.err_data
            );
            assert!(
                after >= SHORT && after < SHORT * 3,
                "1.{minor}, client {i}: timed out after {after:?}, the deadline was {SHORT:?}"
            );
            assert!(!client.is_connected());
            assert_eq!(
                client.connect(&listener, b"").unwrap_err().errno(),
                FiErrno::FI_EOPBADSTATE
            );
            assert!(eq_c.is_empty(), "1.{minor}, client {i}: one event only");
        }
        // The listener heard of both requests (its application just never answered).
        for _ in 0..2 {
            assert_eq!(wait_event(eq_l).kind, EqEventKind::ConnReq);
        }
    }
}

/// The listener's application accepts a request after the requester timed out: the
/// requester refuses the ACCEPT, so the accepting endpoint, which the requester never
/// confirmed (READY), gets `FI_ECONNABORTED` instead of being connected to nobody, and is
/// idle again; the requester hears of nothing more and stays refused.
#[test]
fn an_accept_after_the_request_timed_out_leaves_neither_side_connected() {
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, eq_c) = request_within(nc, pep, SHORT);
    let req = pep.connreq(&wait_event(eq_l)).unwrap();
    assert_eq!(wait_error(&eq_c).err, FiErrno::FI_ETIMEDOUT);
    let (mut server, eq_s) = msg_ep(ns);
    pep.accept(&req, &mut server, b"too late").unwrap();
    let err = wait_error(&eq_s);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ECONNABORTED, server.fid()));
    assert!(eq_s.is_empty(), "never FI_CONNECTED");
    assert!(!server.is_connected());
    assert!(!client.is_connected());
    assert!(
        eq_c.is_empty(),
        "the timed-out requester hears of nothing more"
    );
    assert_eq!(
        client
            .connect(&pep.address().to_bytes().unwrap(), b"")
            .unwrap_err()
            .errno(),
        FiErrno::FI_EOPBADSTATE
    );
}

/// A request answered within its deadline connects as any does, and nothing comes of the
/// deadline once it has passed; so with no deadline at all. A zero timeout is refused (no
/// deadline is `None`), and so is a timeout of an endpoint that is not `FI_EP_MSG`.
#[test]
fn a_connection_answered_in_time_outlives_its_deadline() {
    let l = Listening::new();
    let (ns, nc, eq_l, pep) = (&l.ns, &l.nc, &l.eq_l, &l.pep);
    for timeout in [Some(SHORT), None] {
        let (mut client, eq_c) = msg_ep(nc);
        let (mut server, eq_s) = msg_ep(ns);
        client.set_connect_timeout(timeout).unwrap();
        assert_eq!(client.connect_timeout(), timeout);
        accept_one(pep, eq_l, &mut client, &mut server);
        assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
        assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
        std::thread::sleep(SHORT * 2);
        assert!(
            client.is_connected() && server.is_connected(),
            "{timeout:?}"
        );
        assert!(eq_c.is_empty() && eq_s.is_empty(), "{timeout:?}");
    }
    let (mut ep, _eq) = msg_ep(nc);
    assert_eq!(
        ep.set_connect_timeout(Some(Duration::ZERO))
            .unwrap_err()
            .errno(),
        FiErrno::FI_EINVAL
    );
    let mut rdm = nc
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                ..EndpointAttr::default()
            },
            None,
        )
        .unwrap();
    assert_eq!(
        rdm.set_connect_timeout(Some(SHORT)).unwrap_err().errno(),
        FiErrno::FI_EOPNOTSUPP
    );
}

/// A REJECT that arrives after the request timed out changes nothing: the requester already
/// reported the request's end, so the REJECT is dropped and counted, and its EQ gets no
/// second error.
#[test]
fn a_reject_after_the_request_timed_out_is_dropped() {
    let l = Listening::new();
    let (nc, eq_l, pep) = (&l.nc, &l.eq_l, &l.pep);
    let (client, eq_c) = request_within(nc, pep, SHORT);
    let req = pep.connreq(&wait_event(eq_l)).unwrap();
    assert_eq!(wait_error(&eq_c).err, FiErrno::FI_ETIMEDOUT);
    let dropped = client.cm_dropped();
    pep.reject(&req, b"too late").unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while client.cm_dropped() == dropped {
        assert!(
            Instant::now() < until,
            "the late REJECT never reached the requester"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(eq_c.is_empty(), "no second error for one request");
    assert!(!client.is_connected());
}

/// The timeout a request times out after is the one it was made with: setting another
/// while it is pending (for a later `connect`, as the provider does at each `fi_connect`)
/// changes neither its deadline nor what its `FI_ETIMEDOUT` entry says it waited.
#[test]
fn a_timed_out_request_reports_the_timeout_it_was_made_with() {
    let l = Listening::new();
    let (nc, eq_l, pep) = (&l.nc, &l.eq_l, &l.pep);
    for later in [None, Some(Duration::from_secs(3600))] {
        let (mut client, eq_c) = request_within(nc, pep, SHORT);
        client.set_connect_timeout(later).unwrap();
        let err = wait_error(&eq_c);
        assert_eq!(err.err, FiErrno::FI_ETIMEDOUT, "{later:?}");
        assert!(
            err.err_data.contains(&format!("{SHORT:?}")),
            "{later:?}: {}",
            err.err_data
        );
        assert_eq!(wait_event(eq_l).kind, EqEventKind::ConnReq);
    }
}

#[test]
fn closing_an_unconnected_endpoint_on_a_nic_stopped_by_a_fatal_error_waits_for_nothing() {
    let l = Listening::new();
    let (fns, nc, pep) = (&l.fns, &l.nc, &l.pep);
    let listener = pep.address().to_bytes().unwrap();
    let (mut client, _eq) = msg_ep(nc);
    // The client's NIC can do no DMA: the request never leaves, and the NIC stops.
    fns[1].set_bus_master(false);
    client.connect(&listener, b"hello?").unwrap();
    assert!(!client.is_connected());
    stop_with_a_fatal_error(nc);
    assert_closes_at_once(client);
}

/// Stop `nic`, whose function can do no DMA, with a fatal error: its next admin command
/// faults.
fn stop_with_a_fatal_error(nic: &Nic) {
    assert!(nic
        .open_av(uet_av::AvAttr {
            count: 4,
            ..uet_av::AvAttr::default()
        })
        .is_err());
}

/// Closing `ep`, on a stopped NIC, waits for nothing the NIC would have to complete.
fn assert_closes_at_once(ep: Endpoint) {
    let started = Instant::now();
    drop(ep);
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(250),
        "closing took {took:?}: nothing sent on a stopped NIC completes"
    );
}

#[test]
fn closing_a_connected_endpoint_on_a_nic_stopped_by_a_fatal_error_waits_for_nothing() {
    let l = Listening::new();
    let (fns, ns, nc, eq_l, pep) = (&l.fns, &l.ns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, eq_c) = msg_ep(nc);
    let (mut server, eq_s) = msg_ep(ns);
    accept_one(pep, eq_l, &mut client, &mut server);
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    // The client's NIC stops: the SHUTDOWN a close sends would never complete. The
    // connection is still up, or already lost if the progress thread saw the stop.
    fns[1].set_bus_master(false);
    stop_with_a_fatal_error(nc);
    assert_closes_at_once(client);
}

/// The next entry of `eq` (waiting up to 10 s) is an error of `fid` with `FI_EIO`: its NIC
/// stopped.
fn stopped_error(eq: &EventQueue, fid: u64, what: &str) {
    let e = eq
        .sread(Some(Duration::from_secs(10)), 0)
        .expect_err("an error entry");
    assert_eq!(e.errno, FiErrno::FI_EAVAIL, "{what}: {e}");
    let entry = eq.readerr().expect("the error entry");
    assert_eq!((entry.fid, entry.err), (fid, FiErrno::FI_EIO), "{what}");
}

/// A NIC that stops (its function reset under the driver) carries no control message any
/// more: what waits on its control channels ends with an `FI_EIO` error entry on its EQ,
/// within a second, instead of waiting on, without end where it has no deadline. The
/// listener's EQ gets one, which wakes an application asleep on it for requests; the
/// acceptor's connection is lost (its sends are `FI_ENOTCONN`); on the other NIC, a request
/// made without a deadline is refused, and the other side's connection is lost too.
#[test]
fn a_stopped_nic_ends_what_waits_on_its_control_channels_with_eio() {
    let l = Listening::new();
    let (mut client, eq_c, req) = l.request();
    let (mut server, eq_s) = msg_ep(&l.ns);
    l.pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    // A request without a deadline, which the listener reads and leaves unanswered.
    let (mut waiting, eq_w) = msg_ep(&l.nc);
    waiting.set_connect_timeout(None).unwrap();
    waiting
        .connect(&l.pep.address().to_bytes().unwrap(), b"")
        .unwrap();
    assert_eq!(wait_event(&l.eq_l).kind, EqEventKind::ConnReq);

    let started = Instant::now();
    l.fns[0].function_level_reset();
    stopped_error(&l.eq_l, l.pep.fid(), "the listener");
    stopped_error(&eq_s, server.fid(), "the acceptor");
    assert!(!server.is_connected());
    let pool = DmaPool::new(&l.nc, 256, 1).unwrap();
    l.fns[1].function_level_reset();
    stopped_error(&eq_w, waiting.fid(), "the request without a deadline");
    stopped_error(&eq_c, client.fid(), "the requester");
    assert!(!client.is_connected());
    let (e, _) = client.send(pool.alloc().unwrap(), 0, 0).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOTCONN, "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "reported at the progress threads' next looks, not at a deadline: {:?}",
        started.elapsed()
    );
    assert!(eq_w.readerr().is_err() && l.eq_l.readerr().is_err(), "once");
}

/// A listener's queue its requests filled still takes the `FI_EIO` of its NIC's stop (the
/// queue holds an entry past its size for it), beside the requests, instead of being
/// overrun, which would lose the error and make the queue unusable.
#[test]
fn the_eio_of_a_stopped_nic_reaches_a_listeners_queue_its_requests_filled() {
    let l = Listening::with_eq_size(1);
    let (fns, nc, eq_l, pep) = (&l.fns, &l.nc, &l.eq_l, &l.pep);
    let (mut client, _eq_c) = msg_ep(nc);
    client
        .connect(&pep.address().to_bytes().unwrap(), b"")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while eq_l.len() == (0, 0) {
        assert!(Instant::now() < deadline, "the request reaches the queue");
        std::thread::sleep(Duration::from_millis(1));
    }
    fns[0].function_level_reset();
    let deadline = Instant::now() + Duration::from_secs(10);
    while eq_l.len() == (1, 0) {
        assert!(Instant::now() < deadline, "the error is posted");
        std::thread::sleep(Duration::from_millis(1));
    }
    stopped_error(eq_l, pep.fid(), "the listener");
    assert_eq!(eq_l.read(0).unwrap().kind, EqEventKind::ConnReq);
}

/// `PassiveEndpoint::set_backlog` (`fi_control(FI_BACKLOG)`): a backlog of 1 holds one request
/// and refuses the next; a backlog above `CM_BACKLOG` holds `CM_BACKLOG`; 0 is `FI_EINVAL`
/// and changes nothing. A listener made with a backlog (`fi_listen` after `FI_BACKLOG`) holds
/// it from its first request; one made with 0 is not made.
#[test]
fn a_listeners_backlog_bounds_the_requests_it_holds() {
    let l = Listening::new();
    let e = l.pep.set_backlog(0).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
    assert_eq!(
        l.pep.set_backlog(1 << 20).unwrap(),
        uet_driver::cm::CM_BACKLOG
    );
    assert_eq!(l.pep.set_backlog(1).unwrap(), 1);
    let (_held, _eq_h, _req) = l.request();
    let (mut refused, eq_r) = msg_ep(&l.nc);
    refused
        .connect(&l.pep.address().to_bytes().unwrap(), b"")
        .unwrap();
    assert_eq!(wait_error(&eq_r).err, FiErrno::FI_ECONNREFUSED);

    let attr = EndpointAttr {
        job_id: JOB,
        ..EndpointAttr::default()
    };
    let eq_1 = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    match l.ns.passive_endpoint_with_backlog(attr, &eq_1, 0) {
        Err(e) => assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}"),
        Ok(_) => panic!("a listener with a backlog of 0"),
    }
    let one = l.ns.passive_endpoint_with_backlog(attr, &eq_1, 1).unwrap();
    let to = one.address().to_bytes().unwrap();
    let (mut first, _eq_f) = msg_ep(&l.nc);
    first.connect(&to, b"").unwrap();
    assert_eq!(wait_event(&eq_1).kind, EqEventKind::ConnReq);
    let (mut second, eq_s) = msg_ep(&l.nc);
    second.connect(&to, b"").unwrap();
    assert_eq!(wait_error(&eq_s).err, FiErrno::FI_ECONNREFUSED);
}

/// An RDM endpoint of the job on `nic` with `target`'s address in its AV: the endpoint, its
/// AV and the `fi_addr` of the entry.
fn stranger(nic: &Nic, target: &uet_fwif::address::UetAddress) -> (Endpoint, uet_driver::Av, u64) {
    let mut av = open_av(nic, JOB, 4, 0);
    let ep = job_endpoint(nic, JOB, &av);
    let mut fi = [0u64; 1];
    let n = av
        .insert(&target.to_bytes().unwrap(), 1, Some(&mut fi), 0)
        .unwrap();
    assert_eq!(n, 1);
    (ep, av, fi[0])
}

/// A buffer of `pool` holding `data`.
fn filled(pool: &DmaPool, data: &[u8]) -> uet_driver::DmaBuffer {
    let mut b = pool.alloc().unwrap();
    b.fill(data).unwrap();
    b
}

/// The completion of the one operation `ep` posted.
fn completion(ep: &mut Endpoint) -> uet_driver::CqEvent {
    poll_one(ep).expect("the operation completes")
}

/// The error of an operation a connected endpoint refused for coming from another sender
/// than its peer.
fn assert_refused_as_not_the_peer(ev: &uet_driver::CqEvent) {
    let err = ev.error.as_ref().expect("the operation fails");
    assert_eq!(err.errno, FiErrno::FI_EACCES, "{err}");
    assert_eq!(err.local, uet_fwif::LocalStatus::Remote);
    assert_eq!(err.return_code, Some(ReturnCode::PermViolation));
}

#[test]
fn a_connected_endpoint_takes_data_from_its_peer_only() {
    use uet_driver::{MrAccess, MrMemory};
    use uet_regs::RX_PERM_VIOLATION;
    // fi_endpoint(3), fi_cm(3): a connected endpoint communicates with its peer only. From
    // interface 1.20 the NIC refuses everyone else's data: an RDM endpoint of the job on a
    // third NIC that names the server's address has its sends and writes fail FI_EACCES,
    // before the connection and once it is made, and nothing of them reaches the server.
    let l = Listening::of(fabric(3));
    let (mut client, eq_c, req) = l.request();
    let (mut server, eq_s) = msg_ep(&l.ns);
    let pool_s = DmaPool::new(&l.ns, 4096, 8).unwrap();
    let pool_c = DmaPool::new(&l.nc, 4096, 8).unwrap();
    let nt = open_nic(&l.fns[2]);
    let pool_t = DmaPool::new(&nt, 4096, 8).unwrap();
    let (mut third, _av_t, to_server) = stranger(&nt, server.address());
    let long = uet_tests::pattern(3 * third.mtu() + 1, 9);
    let pool_long = DmaPool::new(&nt, long.len(), 2).unwrap();
    let region = std::sync::Arc::new(l.ns.map_dma(4096).unwrap());
    let _mr = server
        .register_mr(
            MrMemory::Region(region.clone(), 0..4096),
            MrAccess::REMOTE_READ_WRITE,
            0x5EC,
        )
        .unwrap();
    let third_sends = |third: &mut Endpoint, what: &[u8]| {
        let b = filled(&pool_t, what);
        third
            .post_send(to_server, b, 1, 0)
            .map_err(|(e, _)| e)
            .unwrap();
        assert_refused_as_not_the_peer(&completion(third));
        let b = filled(&pool_t, what);
        third
            .post_tsend(to_server, b, 7, 2, 0)
            .map_err(|(e, _)| e)
            .unwrap();
        assert_refused_as_not_the_peer(&completion(third));
        let b = filled(&pool_t, what);
        third
            .post_write(to_server, b, 0, 0x5EC, 3)
            .map_err(|(e, _)| e)
            .unwrap();
        assert_refused_as_not_the_peer(&completion(third));
        // A message of several packets is refused whole.
        let b = filled(&pool_long, &long);
        third
            .post_send(to_server, b, 4, 0)
            .map_err(|(e, _)| e)
            .unwrap();
        assert_refused_as_not_the_peer(&completion(third));
    };

    // Not connected yet: the server takes nobody's data.
    server.post_recv(pool_s.alloc().unwrap(), 10).unwrap();
    third_sends(&mut third, b"before");
    assert!(
        server.poll().unwrap().is_none(),
        "nothing reached the server"
    );

    l.pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);

    // Connected: still nobody's but the peer's.
    third_sends(&mut third, b"intruder");
    assert!(
        server.poll().unwrap().is_none(),
        "nothing reached the server"
    );
    // Once per refused message (a message's later packets get its answer again) and per
    // RMA packet.
    let refused = l.fns[0].counter(RX_PERM_VIOLATION);
    assert_eq!(refused, 8);
    assert_eq!(l.fns[0].debug_counters().rx_not_peer, 8);

    // The peer's data arrives, in the receive posted before, and the server's reaches it.
    send(&mut client, &pool_c, b"from the peer");
    let ev = completion(&mut server);
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!(ev.context, 10);
    assert_ne!(ev.src_addr, uet_fwif::FI_ADDR_NOTAVAIL, "the peer's entry");
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"from the peer");
    client.post_recv(pool_c.alloc().unwrap(), 20).unwrap();
    send(&mut server, &pool_s, b"to the peer");
    assert_eq!(recv(&mut client), b"to the peer");
    // The third endpoint is refused still, and takes nothing from the peer's receives.
    server.post_recv(pool_s.alloc().unwrap(), 11).unwrap();
    third_sends(&mut third, b"again");
    send(&mut client, &pool_c, b"second");
    assert_eq!(recv(&mut server), b"second");
    assert_eq!(l.fns[0].counter(RX_PERM_VIOLATION), refused + 4);
    assert_eq!(pep_and_sides_dropped(&l, &client, &server), 0);
}

fn pep_and_sides_dropped(l: &Listening, client: &Endpoint, server: &Endpoint) -> u64 {
    l.pep.dropped() + client.cm_dropped() + server.cm_dropped()
}

#[test]
fn before_interface_1_20_a_connected_endpoint_takes_anyones_data() {
    // On an older NIC the driver cannot ask for the filter: the third endpoint's send
    // completes and its data lands in the server's receive, with no source.
    let minor = uet_regs::since::CONNECTED_PEER - 1;
    let l = Listening::of(uet_tests::fabric_with(3, |cfg| cfg.interface_minor = minor));
    let (mut client, eq_c, req) = l.request();
    let (mut server, eq_s) = msg_ep(&l.ns);
    let pool_s = DmaPool::new(&l.ns, 4096, 8).unwrap();
    let pool_c = DmaPool::new(&l.nc, 4096, 8).unwrap();
    l.pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    let nt = open_nic(&l.fns[2]);
    let pool_t = DmaPool::new(&nt, 4096, 8).unwrap();
    let (mut third, _av_t, to_server) = stranger(&nt, server.address());
    server.post_recv(pool_s.alloc().unwrap(), 10).unwrap();
    let b = filled(&pool_t, b"intruder");
    third
        .post_send(to_server, b, 1, 0)
        .map_err(|(e, _)| e)
        .unwrap();
    let ev = completion(&mut third);
    assert!(ev.error.is_none(), "{:?}", ev.error);
    let ev = completion(&mut server);
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!(ev.src_addr, uet_fwif::FI_ADDR_NOTAVAIL);
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"intruder");
    // The connection works as ever.
    server.post_recv(pool_s.alloc().unwrap(), 11).unwrap();
    send(&mut client, &pool_c, b"from the peer");
    assert_eq!(recv(&mut server), b"from the peer");
    assert_eq!(l.fns[0].debug_counters().rx_not_peer, 0);
}

#[test]
fn an_accept_given_up_takes_no_ones_data_again() {
    // The acceptor's accept times out before the requester's READY comes (every frame from
    // the requester's NIC is held): it is idle again and names no peer, so the requester,
    // connected by the ACCEPT it took in, has its data refused (FI_EACCES) instead of landing
    // in a receive of an endpoint that is not connected to it.
    let l = Listening::new();
    let (mut client, eq_c, req) = l.request();
    let (mut server, eq_s) = msg_ep(&l.ns);
    server
        .set_connect_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let pool_s = DmaPool::new(&l.ns, 4096, 8).unwrap();
    let pool_c = DmaPool::new(&l.nc, 4096, 8).unwrap();
    server.post_recv(pool_s.alloc().unwrap(), 10).unwrap();
    let std::net::IpAddr::V4(from) = uet_tests::nic_addr(1) else {
        unreachable!("IPv4 fabric addresses")
    };
    // Ethernet (14 bytes), then the IPv4 header, whose source address is at bytes 12-15.
    l.fabric
        .hold_frames(move |f| f.get(26..30) == Some(&from.octets()[..]));
    l.pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    let err = wait_error(&eq_s);
    assert_eq!((err.err, err.fid), (FiErrno::FI_ETIMEDOUT, server.fid()));
    let b = filled(&pool_c, b"after the accept was given up");
    client.send(b, 1, 0).map_err(|(e, _)| e).unwrap();
    assert!(l.fabric.release_held() > 0);
    assert_refused_as_not_the_peer(&completion(&mut client));
    assert!(
        server.poll().unwrap().is_none(),
        "nothing reached the server"
    );
}

/// Hold back the first frame the client NIC (the second of the fabric) sends from now on;
/// the frames after it pass.
fn hold_the_clients_next_frame(l: &Listening) {
    let std::net::IpAddr::V4(from) = uet_tests::nic_addr(1) else {
        unreachable!("IPv4 fabric addresses")
    };
    let mut held = false;
    // Ethernet (14 bytes), then the IPv4 header, whose source address is at bytes 12-15.
    l.fabric.hold_frames(move |f| {
        let hold = !held && f.get(26..30) == Some(&from.octets()[..]);
        held |= hold;
        hold
    });
}

/// A connection of `l`'s listener (the server) to a new endpoint of the client NIC, both
/// sides connected: client, its EQ, server, its EQ.
fn connected(l: &Listening) -> (Endpoint, EventQueue, Endpoint, EventQueue) {
    let (client, eq_c, req) = l.request();
    let (mut server, eq_s) = msg_ep(&l.ns);
    l.pep.accept(&req, &mut server, b"").unwrap();
    assert_eq!(wait_event(&eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Connected);
    (client, eq_c, server, eq_s)
}

/// The client, connected to the server on NICs of interface minor `minor`, takes a message
/// of the server's (acknowledged), then shuts the connection down, its SHUTDOWN held on the
/// wire; the server, not knowing yet, sends again. The completion of that send, once the
/// client read the first message; the server then takes the SHUTDOWN in.
fn a_send_racing_the_peers_shutdown(minor: u8) -> uet_driver::CqEvent {
    let l = Listening::at_interface(minor);
    let (mut client, _eq_c, mut server, eq_s) = connected(&l);
    let pool_s = DmaPool::new(&l.ns, 4096, 8).unwrap();
    let pool_c = DmaPool::new(&l.nc, 4096, 8).unwrap();
    client.post_recv(pool_c.alloc().unwrap(), 20).unwrap();
    send(&mut server, &pool_s, b"before the shutdown");
    hold_the_clients_next_frame(&l);
    client.shutdown().unwrap();
    assert!(server.is_connected(), "the SHUTDOWN is held");
    let b = filled(&pool_s, b"after the shutdown");
    server.send(b, 2, 0).map_err(|(e, _)| e).unwrap();
    let ev = completion(&mut server);
    // What was delivered before the shutdown stays delivered.
    assert_eq!(recv(&mut client), b"before the shutdown");
    assert_eq!(l.fabric.release_held(), 1);
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Shutdown);
    assert_eq!(pep_and_sides_dropped(&l, &client, &server), 0);
    ev
}

#[test]
fn after_a_shutdown_the_peers_data_is_refused_instead_of_completing_unread() {
    // The client shut the connection down (fi_shutdown flushes its receives): it names no
    // peer any more, so the server's send, which raced the SHUTDOWN, fails FI_EACCES
    // instead of completing for data that would wait unread on the client NIC's
    // unexpected list.
    let ev = a_send_racing_the_peers_shutdown(uet_regs::since::CONNECTED_PEER);
    assert_refused_as_not_the_peer(&ev);
}

#[test]
fn before_interface_1_20_data_racing_a_shutdown_still_completes() {
    // An older NIC takes anyone's data: the send completes, its data on the client NIC's
    // unexpected list.
    let ev = a_send_racing_the_peers_shutdown(uet_regs::since::CONNECTED_PEER - 1);
    assert!(ev.error.is_none(), "{:?}", ev.error);
}

#[test]
fn data_a_shutdown_overtook_is_refused_instead_of_completing_unread() {
    // The client's SHUTDOWN (control ring) overtakes its data (data ring), held on the
    // wire: the server takes the SHUTDOWN in first, names no peer any more, and refuses the
    // data that follows, which fails at the client (FI_EACCES) instead of completing with
    // nothing delivered. Nothing lands in the receive the server still has posted.
    let l = Listening::new();
    let (mut client, _eq_c, mut server, eq_s) = connected(&l);
    let pool_s = DmaPool::new(&l.ns, 4096, 8).unwrap();
    let pool_c = DmaPool::new(&l.nc, 4096, 8).unwrap();
    server.post_recv(pool_s.alloc().unwrap(), 10).unwrap();
    hold_the_clients_next_frame(&l);
    let b = filled(&pool_c, b"overtaken");
    client.send(b, 1, 0).map_err(|(e, _)| e).unwrap();
    client.shutdown().unwrap();
    assert_eq!(wait_event(&eq_s).kind, EqEventKind::Shutdown);
    assert_eq!(l.fabric.release_held(), 1, "the data");
    assert_refused_as_not_the_peer(&completion(&mut client));
    assert!(
        server.poll().unwrap().is_none(),
        "nothing reached the server"
    );
    assert_eq!(pep_and_sides_dropped(&l, &client, &server), 0);
}
