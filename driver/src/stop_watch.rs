//! Waking an application asleep on a descriptor once its NIC stops.
//!
//! A NIC that stops (a fatal error, or its function reset under the driver) writes no
//! completion and raises no vector. A thread waiting in the driver for a completion looks at
//! the NIC's status now and then ([`crate::Endpoint::cq_sread`]), but an application asleep
//! in poll(2) or epoll_wait(2) on a descriptor its provider armed (`FI_WAIT_FD` and
//! `fi_trywait`) cannot: it would sleep for good. So the provider hands the driver an eventfd
//! of that descriptor's set ([`crate::Endpoint::wake_when_stopped`]), and one thread per NIC
//! reads the NIC's status every [`STOPPED_CHECK_INTERVAL`] while any eventfd handed to it is
//! alive. Once the NIC has stopped, the thread writes each of them once: the application
//! wakes, finds nothing to read, and learns of the stop from its next call.
//!
//! The thread holds each eventfd weakly (the object that owns it closes without asking), runs
//! only while one is alive, and is joined when the NIC closes, before the device is reset.
//! What it costs: one thread per NIC, awake ten times a second for two register reads, from
//! an application's first sleep on a CQ's or counter's descriptor until that object closes.
//! Threads the driver runs itself look at the NIC on their own and need no watch: a wait
//! without end in [`crate::Endpoint::cq_sread`] every [`STOPPED_CHECK_INTERVAL`], a control
//! progress thread at each of its passes ([`crate::cm`]).

use crate::endpoint::STOPPED_CHECK_INTERVAL;
use crate::Device;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use vmm_sys_util::eventfd::EventFd;

/// The eventfds to write when a NIC stops, and the thread that watches it for them.
pub(crate) struct StopWatch {
    shared: Arc<Shared>,
    /// The last thread started; joined when the NIC closes.
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Where the threads run: not in a child forked since ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

impl Drop for StopWatch {
    fn drop(&mut self) {
        if self.made_in.in_forked_child() {
            // The handle of a thread of the parent: detaching it would reach whatever thread
            // of this process has that thread's descriptor now.
            let slot = self
                .thread
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::forget(slot.take());
        }
    }
}

impl Default for StopWatch {
    fn default() -> Self {
        StopWatch {
            shared: Arc::default(),
            thread: Mutex::default(),
            made_in: crate::fork::MadeIn::here(),
        }
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the thread for the NIC's close.
    closing: Condvar,
}

#[derive(Default)]
struct State {
    /// What to write once the NIC stops.
    eventfds: Vec<Weak<EventFd>>,
    /// A thread watches: set by whoever starts it, cleared by the thread as it ends.
    running: bool,
    /// The NIC closes: the thread ends, and no other starts.
    closing: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StopWatch {
    /// Write `eventfd` once when the NIC behind `device`, whose admin submission ring is at
    /// `sq_base`, stops: within [`STOPPED_CHECK_INTERVAL`] of the stop, for as long as
    /// `eventfd` is alive. Handed again, it is held once. When no thread can be started the
    /// eventfd is not watched, which is logged: the caller's sleep is then as it was without
    /// the watch.
    pub(crate) fn add(&self, eventfd: &Arc<EventFd>, device: &Arc<dyn Device>, sq_base: u64) {
        let mut state = self.shared.lock();
        if state.closing {
            return;
        }
        let held = Arc::downgrade(eventfd);
        if !state.eventfds.iter().any(|e| e.ptr_eq(&held)) {
            state.eventfds.push(held);
        }
        if state.running {
            return;
        }
        let (shared, device) = (Arc::clone(&self.shared), Arc::clone(device));
        match std::thread::Builder::new()
            .name("uet-stop-watch".into())
            .spawn(move || run(&shared, &*device, sq_base))
        {
            Ok(thread) => {
                state.running = true;
                // Placed before the state's lock is let go, so that a close, which marks the
                // state first, always finds the thread to join. The one before ended (it
                // cleared `running`, and let go of the lock, as it returned): reaped here.
                let mut slot = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(ended) = slot.replace(thread) {
                    let _ = ended.join();
                }
            }
            Err(e) => {
                state.eventfds.clear();
                tracing::warn!(
                    error = %e,
                    "no thread to watch the NIC for a stop: a sleep on a descriptor is not \
                     woken if it stops"
                );
            }
        }
    }

    /// The NIC closes: the thread ends, joined. In a child forked since, which has no thread
    /// (and whose locks the thread may hold for good), nothing is done.
    pub(crate) fn close(&self) {
        if self.made_in.in_forked_child() {
            return;
        }
        self.shared.lock().closing = true;
        self.shared.closing.notify_all();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// Eventfds held (alive or not yet pruned), for tests.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.shared.lock().eventfds.len()
    }

    /// Whether a thread watches, for tests.
    #[cfg(test)]
    fn running(&self) -> bool {
        self.shared.lock().running
    }
}

/// The thread: every [`STOPPED_CHECK_INTERVAL`], the NIC's status (two register reads, made
/// without the lock, so that a slow read delays no [`StopWatch::add`]); once it stopped, each
/// eventfd alive is written once and let go. Ends when none is alive, or the NIC closes.
fn run(shared: &Shared, device: &dyn Device, sq_base: u64) {
    let mut state = shared.lock();
    loop {
        state.eventfds.retain(|e| e.strong_count() > 0);
        if state.closing || state.eventfds.is_empty() {
            state.running = false;
            return;
        }
        state = shared
            .closing
            .wait_timeout(state, STOPPED_CHECK_INTERVAL)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        if state.closing {
            continue;
        }
        drop(state);
        let stopped = crate::admin_interrupt::answers_nothing(device.bar0(), sq_base);
        state = shared.lock();
        if stopped {
            for eventfd in state.eventfds.drain(..).filter_map(|e| e.upgrade()) {
                // An eventfd's count only overflows past 2^64 - 2 writes; a failed write
                // leaves it readable already.
                let _ = eventfd.write(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::sim_function_and_nic;
    use std::time::{Duration, Instant};
    use uet_sim::Fabric;
    use vmm_sys_util::eventfd::{EFD_CLOEXEC, EFD_NONBLOCK};

    fn eventfd() -> Arc<EventFd> {
        Arc::new(EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).expect("eventfd"))
    }

    /// Whether `cond` holds within `limit`, looked at every millisecond.
    fn within(limit: Duration, cond: impl Fn() -> bool) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        cond()
    }

    /// Each eventfd handed to the watch is written once when the NIC stops, a fatal error
    /// (bus mastering off, then a command's DMA faults) or its function reset, and the
    /// thread ends after; while the NIC runs nothing is written.
    /// A process forked while the watch's thread ran has no such thread: its copy of the
    /// NIC, dropped, leaves the handle of the parent's thread alone (detaching it would reach
    /// whatever thread of the child now has that thread's descriptor), so the child's own
    /// threads are joined as ever.
    #[test]
    fn a_forked_childs_copy_of_a_nic_whose_watch_runs_leaves_the_childs_threads_joinable() {
        let fabric = Fabric::new();
        let (_f, nic) = sim_function_and_nic(&fabric, "10.0.0.1");
        let a = eventfd();
        nic.inner.wake_when_stopped(&a);
        assert!(nic.inner.stop_watch.running());
        let mut copy = Some(nic);
        let code = crate::fork::tests::in_child(|| {
            // Threads of the child, which take the stacks the parent's threads left behind.
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let wait = std::sync::Arc::new(std::sync::Mutex::new(wait));
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let wait = wait.clone();
                    std::thread::spawn(move || {
                        let _ = wait.lock().map(|w| w.recv());
                    })
                })
                .collect();
            drop(copy.take());
            drop(go);
            let joined = threads.into_iter().all(|t| t.join().is_ok());
            if joined {
                0
            } else {
                2
            }
        });
        assert_eq!(code, Some(0), "the child joined its threads and ended");
        let nic = copy.expect("the parent's NIC");
        assert!(nic.inner.stop_watch.running());
    }

    #[test]
    fn each_eventfd_is_written_once_when_the_nic_stops() {
        for reset in [true, false] {
            let fabric = Fabric::new();
            let (f, nic) = sim_function_and_nic(&fabric, "10.0.0.1");
            let (a, b) = (eventfd(), eventfd());
            nic.inner.wake_when_stopped(&a);
            nic.inner.wake_when_stopped(&b);
            nic.inner.wake_when_stopped(&a);
            let watch = &nic.inner.stop_watch;
            assert_eq!(watch.held(), 2, "an eventfd handed twice is held once");
            std::thread::sleep(STOPPED_CHECK_INTERVAL * 3);
            assert!(a.read().is_err() && b.read().is_err(), "the NIC runs");
            assert!(watch.running());
            if reset {
                f.function_level_reset();
            } else {
                f.set_bus_master(false);
                assert!(nic
                    .admin_command(uet_fwif::admin::Command::EndpointDestroy { endpoint: 9 })
                    .is_err());
            }
            for e in [&a, &b] {
                assert!(
                    within(STOPPED_CHECK_INTERVAL * 20, || e
                        .read()
                        .is_ok_and(|n| n == 1)),
                    "reset {reset}: written when the NIC stopped"
                );
            }
            assert!(within(STOPPED_CHECK_INTERVAL * 20, || !watch.running()));
            assert_eq!(watch.held(), 0);
            assert!(a.read().is_err() && b.read().is_err(), "written once");
        }
    }

    /// `Nic::stop_watching` ends the thread at once, joined, though an eventfd handed to it
    /// is alive; an eventfd handed afterwards starts none, and a stop is then not watched.
    #[test]
    fn stop_watching_ends_the_thread_for_good() {
        let fabric = Fabric::new();
        let (f, nic) = sim_function_and_nic(&fabric, "10.0.0.1");
        let a = eventfd();
        nic.inner.wake_when_stopped(&a);
        assert!(nic.inner.stop_watch.running());
        let started = Instant::now();
        nic.stop_watching();
        assert!(
            started.elapsed() < STOPPED_CHECK_INTERVAL * 10,
            "joined without its sleep"
        );
        assert!(!nic.inner.stop_watch.running());
        let b = eventfd();
        nic.inner.wake_when_stopped(&b);
        assert!(!nic.inner.stop_watch.running(), "no thread after the end");
        f.function_level_reset();
        std::thread::sleep(STOPPED_CHECK_INTERVAL * 3);
        assert!(a.read().is_err() && b.read().is_err(), "nothing watches");
    }

    /// The thread ends once no eventfd handed to it is alive, and starts again for the next
    /// one; the NIC's close joins it.
    #[test]
    fn the_thread_runs_only_while_an_eventfd_is_alive() {
        let fabric = Fabric::new();
        let nic = crate::backend::sim::sim_nic(&fabric, "10.0.0.1");
        let b = eventfd();
        {
            let watch = &nic.inner.stop_watch;
            let a = eventfd();
            nic.inner.wake_when_stopped(&a);
            assert!(watch.running());
            drop(a);
            assert!(within(STOPPED_CHECK_INTERVAL * 20, || !watch.running()));
            assert_eq!(watch.held(), 0);
            nic.inner.wake_when_stopped(&b);
            assert!(watch.running(), "started again");
        }
        let started = Instant::now();
        drop(nic);
        assert!(
            started.elapsed() < STOPPED_CHECK_INTERVAL * 10,
            "the close joins the thread without waiting out its sleep"
        );
        assert!(b.read().is_err(), "a close is no stop");
    }
}
