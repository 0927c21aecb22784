//! Idle connections cost no CPU: the control progress of a passive endpoint and of each
//! connected `FI_EP_MSG` endpoint sleeps on its control ring's MSI-X vector (its own, or the
//! one the NIC's control channels share beyond their own) until a control message comes,
//! instead of polling its ring.
//!
//! What idleness costs is counted, not timed: the progress threads' passes over a second of
//! idleness (each thread wakes for its 1 s recheck; a polling one passes 5,000 times a
//! second). The process's CPU time over that second (`getrusage(RUSAGE_SELF)`) is printed
//! beside it, for the record, and asserted nothing of. One test per file, so that nothing
//! else runs in the process.

use std::time::{Duration, Instant};
use uet_driver::{Endpoint, EndpointAttr, EpType, EqEventKind, EventQueue, Nic, PassiveEndpoint};
use uet_tests::{fabric, open_nic, wait_event};

const JOB: u32 = 0x1D1E;
/// Connections held open: a listener and 48 endpoints on one NIC, 48 on the other. More
/// than the NIC's 64 vectors give control channels a vector of their own (31): the others
/// share one.
const CONNECTIONS: usize = 48;

fn msg_ep(nic: &Nic) -> (Endpoint, EventQueue) {
    let attr = EndpointAttr {
        job_id: JOB,
        ep_type: EpType::Msg,
        ..EndpointAttr::default()
    };
    let mut ep = nic.endpoint(attr, None).expect("an FI_EP_MSG endpoint");
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).expect("an event queue");
    ep.bind_eq(&eq).expect("bound");
    (ep, eq)
}

/// Connect `client` to `pep`, accepting with `server`: a CONNREQ, an ACCEPT, and the
/// ACCEPT's send completion, each taken in by a different control progress thread.
fn connect(
    pep: &PassiveEndpoint,
    eq_l: &EventQueue,
    [(c, eq_c), (s, eq_s)]: &mut [(Endpoint, EventQueue); 2],
) {
    c.connect(&pep.address().to_bytes().expect("address"), b"")
        .expect("connect");
    let req = pep.connreq(&wait_event(eq_l)).expect("a request");
    pep.accept(&req, s, b"").expect("accept");
    assert_eq!(wait_event(eq_c).kind, EqEventKind::Connected);
    assert_eq!(wait_event(eq_s).kind, EqEventKind::Connected);
}

/// CPU time (user + system) the process has used.
fn cpu_time() -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the whole call; getrusage writes only it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn idle_connections_use_almost_no_cpu_and_connect_at_once() {
    let (_f, fns) = fabric(2);
    let (ns, nc) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let eq_l = EventQueue::open(uet_tests::WAITABLE_EQ).expect("an event queue");
    let pep = nic_listen(&ns, &eq_l);

    let mut held: Vec<[(Endpoint, EventQueue); 2]> = (0..CONNECTIONS)
        .map(|_| [msg_ep(&nc), msg_ep(&ns)])
        .collect();
    // Setting connections up is not slowed by sleeping progress: each handshake is a few
    // control messages, each waking its receiver at once. A thread that found out about
    // messages only when its sleep ends (`CM_IDLE_RECHECK`, 1 s) would take seconds per
    // handshake.
    let started = Instant::now();
    for pair in &mut held {
        connect(&pep, &eq_l, pair);
    }
    let setup = started.elapsed();
    println!(
        "{CONNECTIONS} handshakes in {setup:?} ({:?} each)",
        setup / CONNECTIONS as u32
    );
    assert!(
        setup < Duration::from_secs(5),
        "{CONNECTIONS} handshakes took {setup:?}"
    );

    // Let the last completions settle, then count what a second of idleness wakes. A
    // thread asleep on its vector wakes only for its 1 s recheck; a polling one would pass
    // 5,000 times a second.
    std::thread::sleep(Duration::from_millis(100));
    let passes = |held: &[[(Endpoint, EventQueue); 2]]| {
        pep.control_passes()
            + held
                .iter()
                .flatten()
                .map(|(e, _)| e.cm_passes())
                .sum::<u64>()
    };
    let threads = 2 * CONNECTIONS as u64 + 1;
    let (passes0, cpu0, wall0) = (passes(&held), cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let (idle_passes, cpu, wall) = (passes(&held) - passes0, cpu_time() - cpu0, wall0.elapsed());
    println!(
        "idle with {CONNECTIONS} connections ({threads} control threads): {idle_passes} \
         progress passes, {cpu:?} CPU in {wall:?} = {:.2}% of one core",
        cpu.as_secs_f64() / wall.as_secs_f64() * 100.0
    );
    // A recheck or two each per second counted (one more allows for a slow start), over the
    // seconds the sleep really took: a loaded machine may oversleep, and each second more
    // is one recheck more per thread, where polling would be thousands.
    let per_thread = (2.0 * wall.as_secs_f64() + 1.0) as u64;
    assert!(
        idle_passes <= per_thread * threads,
        "{threads} idle control threads made {idle_passes} passes in {wall:?}"
    );

    // Still connected, and still woken for what comes: shutdown reaches every peer.
    for [(mut c, _), (s, eq_s)] in held {
        c.shutdown().expect("shutdown");
        assert_eq!(wait_event(&eq_s).kind, EqEventKind::Shutdown);
        assert!(s.is_shut_down());
    }
}

fn nic_listen(nic: &Nic, eq: &EventQueue) -> PassiveEndpoint {
    nic.passive_endpoint(
        EndpointAttr {
            job_id: JOB,
            ..EndpointAttr::default()
        },
        eq,
    )
    .expect("a listener")
}
