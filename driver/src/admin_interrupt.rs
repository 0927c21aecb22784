//! The admin completion interrupt (`ADMIN_ARM`, interface 1.15): sleeping until the NIC
//! answers an admin command instead of polling for the answer.
//!
//! Who waits for an admin completion — a reader of an event queue whose AV has an `FI_EVENT`
//! insert in flight (`crate::eq`), without holding the admin queue, or a synchronous command
//! the NIC did not answer within its spin (`AdminQueue::wait_command`), holding it — asks to
//! be woken (`AdminInterrupt::wake_after`) with a [`Waker`] and sleeps. One MSI-X vector of the NIC
//! is the admin ring's, taken the first time someone asks, and one thread per NIC sleeps on
//! its eventfd: when the vector is raised it wakes everyone who asked since the last raise.
//! Each then polls its command as before, and asks again if it is still in flight. The thread
//! holds the vector, the wakers and the device (whose status it reads, below) but nothing
//! else of the NIC, and stops when the NIC goes.
//!
//! ## No wakeup is lost
//!
//! The NIC raises the vector once per arm, for the first completion written after it, or at
//! once when the ring holds one the driver has not consumed (`uet_regs::ADMIN_ARM`). A waiter
//! polled its command (which collects every completion written so far) and read the admin
//! queue's reap count (`AdminQueue::reaped_counter`) under the queue's lock,
//! then found its command in flight. Its completion is then either
//!
//! * not yet written: the arm that `AdminInterrupt::wake_after` makes (or an earlier arm still
//!   in force, whose raise has not reached the thread yet: the waiter is on the list the
//!   thread takes after it) raises the vector when it is;
//! * written and not yet collected: the arm raises the vector at once;
//! * collected by another thread since the waiter's poll, and filed for it: the reap count has
//!   changed, which `wake_after` reads after it armed, and the waiter is woken at once. (A
//!   synchronous command holds the queue while it sleeps: no one else collects.)
//!
//! Wakeups may be spurious (a raise for another command, an arm that finds completions the
//! driver collected but has not reported with `ADMIN_CQ_HEAD` yet): a waiter polls and asks
//! again. A NIC that never answers raises nothing, and a command is given up on only by a
//! poll after its timeout: so each waiter also names when it must poll anyway, and the
//! thread wakes it then if the vector has not. A NIC that stopped with a fatal error, or
//! whose function was reset under the driver (which drops the arm), raises nothing either,
//! and there a poll gives the command up at once (`AdminQueue::poll_command` reads
//! `DEV_STATUS`, and `ADMIN_SQ_BASE`): a waiter that finds the NIC so is not taken (it
//! polls), rather than woken at its timeout. While anyone waits, the thread reads those
//! registers every `STATUS_CHECK_INTERVAL` too, and wakes everyone once the NIC is so: a
//! waiter asleep when the NIC fails learns of it then, not at its timeout.

use crate::device::Device;
use crate::interrupt::{CqSignal, Vector};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uet_regs::{AdminArm, Mmio, RegisterAccess, ADMIN_ARM, ADMIN_SQ_BASE, DEV_STATUS};

/// How often the thread reads `DEV_STATUS` and `ADMIN_SQ_BASE` while anyone waits: a NIC that stops with a fatal error or is reset under the driver
/// raises nothing, and its waiters are woken within this. A synchronous command asleep holds
/// the admin queue, and every other command waits behind it; one that polled learned of a
/// failure within a millisecond. 10 ms keeps that wait short for two register reads a hundred
/// times a second, and only while someone waits.
pub(crate) const STATUS_CHECK_INTERVAL: Duration = Duration::from_millis(10);

/// Whether the NIC behind `bar`, whose admin submission ring is at `sq_base`, will answer
/// nothing: stopped with a fatal error, or reset under the driver (`ADMIN_SQ_BASE` no longer
/// holds the ring: cleared by the reset, or holding the ring of another driver that enabled
/// the function again since). A function merely stopped keeps the ring and the arm, and runs
/// its commands when enabled again. Two register reads.
pub(crate) fn answers_nothing(bar: &dyn Mmio, sq_base: u64) -> bool {
    bar.read(DEV_STATUS).fatal() || bar.read(ADMIN_SQ_BASE) != sq_base
}

/// The admin ring's vector, and the thread that wakes whoever waits for it.
pub(crate) struct AdminInterrupt {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Where the thread runs: not in a child forked since ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

/// What the thread and the waiters share.
struct Shared {
    vector: u16,
    /// The admin submission ring's IOVA: `ADMIN_SQ_BASE` holds another once the function
    /// was reset under the driver.
    sq_base: u64,
    state: Mutex<State>,
    /// Makes the thread look at the state again: a waiter due sooner than the thread sleeps
    /// for, or the stop.
    kick: CqSignal,
    /// The thread is running: cleared if it stops on an error, after which no one is woken
    /// and waiters poll (`AdminInterrupt::wake_after` returns false).
    alive: AtomicBool,
}

#[derive(Default)]
struct State {
    /// The ring was armed and its raise has not reached the thread yet.
    armed: bool,
    /// Whom the next raise wakes, each also at its deadline.
    waiting: Vec<(Waker, Instant)>,
    /// The NIC is going: the thread stops.
    stopping: bool,
}

impl AdminInterrupt {
    /// Take `vector` for the admin ring of `device`, whose submission ring is at `sq_base`,
    /// and start the thread that sleeps on it.
    pub(crate) fn start(
        vector: Vector,
        device: Arc<dyn Device>,
        sq_base: u64,
    ) -> std::io::Result<AdminInterrupt> {
        #[cfg(test)]
        if let Some(tried) = tests::START_FAILS.get() {
            tests::START_FAILS.set(Some(tried + 1));
            return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
        }
        let shared = Arc::new(Shared {
            vector: vector.number(),
            sq_base,
            state: Mutex::new(State::default()),
            kick: CqSignal::new()?,
            alive: AtomicBool::new(true),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("uet-admin-irq".into())
                .spawn(move || run(&vector, &*device, &shared))?
        };
        Ok(AdminInterrupt {
            made_in: crate::fork::MadeIn::here(),
            shared,
            thread: Some(thread),
        })
    }

    /// Wake `waker` once a completion the caller has not seen may have been written or
    /// collected — the next raise of the admin vector, or at once when the admin queue's
    /// reap count `reaped` is no longer `seen` (what the caller read when it last polled,
    /// under the queue's lock) — or at `deadline` if neither comes first. Arms the ring
    /// through `bar` unless an arm is in force. False when the thread has stopped, or when
    /// the NIC will answer nothing (stopped with a fatal error, or reset under the driver: a
    /// poll gives the command up at once): then no one wakes the caller, who must poll.
    pub(crate) fn wake_after(
        &self,
        bar: &dyn Mmio,
        reaped: &AtomicU64,
        seen: u64,
        waker: &Waker,
        deadline: Instant,
    ) -> bool {
        if answers_nothing(bar, self.shared.sq_base) {
            return false;
        }
        {
            let mut s = self.shared.lock();
            if !self.shared.alive.load(Ordering::Acquire) || s.stopping {
                return false;
            }
            let soonest = s.waiting.iter().map(|(_, d)| *d).min();
            match s.waiting.iter_mut().find(|(w, _)| w.will_wake(waker)) {
                Some((_, d)) => *d = (*d).min(deadline),
                None => s.waiting.push((waker.clone(), deadline)),
            }
            if soonest.is_none_or(|soonest| deadline < soonest) {
                // The thread sleeps past this deadline, or without one.
                let _ = self.shared.kick.signal();
            }
            if !s.armed {
                bar.write(ADMIN_ARM, AdminArm::new().with_vector(self.shared.vector));
                s.armed = true;
            }
        }
        // Read after the arm: a completion collected before it shows here, one written
        // after it raises the vector. The fence keeps the load after the register write on
        // a CPU that would let a load of memory pass a store to a device.
        fence(Ordering::SeqCst);
        if reaped.load(Ordering::Acquire) != seen {
            waker.wake_by_ref();
        }
        true
    }
}

#[cfg(test)]
impl AdminInterrupt {
    /// The admin ring's vector.
    pub(crate) fn vector(&self) -> u16 {
        self.shared.vector
    }

    /// Waiters registered, for the next raise or their deadline.
    pub(crate) fn waiters(&self) -> usize {
        self.shared.lock().waiting.len()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the state consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The thread: sleep on the vector until it is raised (wake everyone who asked) or the
/// soonest deadline passes (wake whoever it was); while anyone waits, look at the NIC's
/// status every [`STATUS_CHECK_INTERVAL`] (wake everyone once it will answer nothing).
fn run(vector: &Vector, device: &dyn Device, shared: &Shared) {
    let mut status_due = Instant::now();
    loop {
        let soonest = shared.lock().waiting.iter().map(|(_, d)| *d).min();
        let timeout = soonest.map(|d| {
            d.min(status_due)
                .saturating_duration_since(Instant::now())
                .min(STATUS_CHECK_INTERVAL)
        });
        if let Err(e) = vector.wait(timeout, Some(&shared.kick)) {
            tracing::warn!(error = %e, "admin interrupt wait failed: event queues poll");
            break;
        }
        shared.kick.take();
        // Taken before the list: a raise after this wakes the thread again.
        let raised = vector.take();
        let now = Instant::now();
        let failed = soonest.is_some()
            && now >= status_due
            && answers_nothing(device.bar0(), shared.sq_base);
        if now >= status_due {
            status_due = now + STATUS_CHECK_INTERVAL;
        }
        let due: Vec<Waker> = {
            let mut s = shared.lock();
            if s.stopping {
                break;
            }
            if raised || failed {
                // The raise disarmed the ring (a NIC that answers nothing keeps no arm in
                // force either): whoever asks from now on arms it again.
                s.armed = false;
                s.waiting.drain(..).map(|(w, _)| w).collect()
            } else {
                let (due, later) = std::mem::take(&mut s.waiting)
                    .into_iter()
                    .partition(|(_, d)| *d <= now);
                s.waiting = later;
                due.into_iter().map(|(w, _)| w).collect()
            }
        };
        for w in due {
            w.wake();
        }
    }
    shared.alive.store(false, Ordering::Release);
    // Whoever waits now polls.
    let waiting = std::mem::take(&mut shared.lock().waiting);
    for (w, _) in waiting {
        w.wake();
    }
}

impl Drop for AdminInterrupt {
    fn drop(&mut self) {
        if self.made_in.in_forked_child() {
            // No thread to stop, and its lock may be held for good.
            std::mem::forget(self.thread.take());
            return;
        }
        self.shared.lock().stopping = true;
        let _ = self.shared.kick.signal();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::sim::{sim_function_and_nic, sim_nic, SimDevice};
    use crate::eq::{EqAttr, EventQueue};
    use crate::Nic;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use uet_av::{AvAttr, FiErrno, FI_EVENT};
    use uet_regs::{DevCtrl, RegisterAccess, DEV_CTRL};
    use uet_sim::{Fabric, NicConfig};

    std::thread_local! {
        /// While `Some`, each start made on this thread fails, as one the system refuses a
        /// thread would, and is counted here.
        pub(super) static START_FAILS: std::cell::Cell<Option<u32>> =
            const { std::cell::Cell::new(None) };
    }

    /// A NIC of `fabric` at interface 1.`minor`, opened, and the function behind it (for the
    /// simulator's counters).
    fn nic_of_interface(fabric: &Fabric, minor: u8) -> (Nic, uet_sim::SimFunction) {
        let mut config = NicConfig::new("10.0.0.1".parse().expect("address"));
        config.interface_minor = minor;
        let f = fabric.add_nic(config).expect("NIC");
        let nic = Nic::open(Arc::new(SimDevice::new(f.clone()))).expect("open NIC");
        (nic, f)
    }

    /// A start that fails (no thread, or no eventfd: the system is short of them) is not
    /// tried again at each later wait, each warning anew, while waiters poll every
    /// millisecond: the NIC's waiters poll from then on, as with no interrupts.
    #[test]
    fn a_failed_start_is_not_tried_again_at_every_wait() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let irq = nic.inner.interrupts().expect("interrupts").clone();
        let free = irq.free_vectors();
        START_FAILS.set(Some(0));
        for _ in 0..100 {
            assert!(nic.inner.admin_interrupt().is_none(), "the start failed");
        }
        let tried = START_FAILS.replace(None);
        assert_eq!(tried, Some(1), "the failed start was tried {tried:?} times");
        assert_eq!(irq.free_vectors(), free, "the failed start holds no vector");
    }

    /// With the driver's share of the vectors all held at a first wait, the NIC has no admin
    /// interrupt then (its waiters poll), and gets one at a later wait, once a vector is free.
    #[test]
    fn a_wait_with_no_vector_to_spare_polls_and_a_later_one_gets_the_interrupt() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let irq = nic.inner.interrupts().expect("interrupts").clone();
        let mut held = Vec::new();
        while let Some(v) = irq.take() {
            held.push(v);
        }
        assert!(nic.inner.admin_interrupt().is_none(), "no vector was free");
        held.clear();
        let running = nic.inner.admin_interrupt().expect("a vector is free now");
        let again = nic.inner.admin_interrupt().expect("still set up");
        assert!(Arc::ptr_eq(&running, &again), "one admin interrupt per NIC");
        assert_eq!(
            irq.free_vectors(),
            irq.vectors() - 1,
            "the admin interrupt holds one vector"
        );
    }

    /// A reader asleep until the NIC answers an insert it never answers, woken meanwhile by
    /// a raise of the admin vector for another command, polls at the insert's timeout as
    /// counted from when a poll first found it in flight, not a whole admin timeout after
    /// that raise.
    #[test]
    fn a_waiter_woken_by_another_raise_still_polls_at_its_commands_timeout() {
        let fabric = Fabric::new();
        let (nic, f) = nic_of_interface(&fabric, uet_regs::INTERFACE_MINOR);
        let mut av = nic
            .open_av(AvAttr {
                count: 8,
                job_id: 0x42,
                flags: FI_EVENT,
                ..AvAttr::default()
            })
            .expect("AV");
        let eq = EventQueue::open(EqAttr::WAITABLE).expect("event queue");
        av.bind(eq.av_sink(), 0).expect("bound");
        let timeout = Duration::from_secs(1);
        nic.set_admin_timeout(timeout);
        // Stopped: the AV_WRITE waits in the admin queue, unanswered.
        nic.bar0().write(DEV_CTRL, DevCtrl::new());
        let peer = uet_fwif::UetAddress {
            caps: 0,
            mode: uet_fwif::address::AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 5,
            fabric_addr: "10.0.0.2".parse().expect("address"),
            ri_start: 1,
            ri_count: 4,
            initiator: 0x100,
        }
        .to_bytes()
        .expect("address");
        let arms = f.debug_counters().admin_arms;
        let inserted = Instant::now();
        av.with_context(3)
            .insert(&peer, 1, None, 0)
            .expect("insert");
        let reader = {
            let eq = eq.clone();
            std::thread::spawn(move || {
                let r = eq.sread(Some(Duration::from_secs(10)), 0);
                (r, Instant::now())
            })
        };
        while f.debug_counters().admin_arms == arms {
            assert!(
                inserted.elapsed() < Duration::from_secs(10),
                "the reader never armed the admin ring"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Most of the timeout later, the vector is raised (for another command): the reader
        // polls, finds the insert in flight, and sleeps again.
        std::thread::sleep(timeout * 6 / 10);
        let irq = nic.inner.interrupts().expect("interrupts");
        let vector = nic
            .inner
            .admin_interrupt()
            .expect("admin interrupt")
            .vector();
        irq.raise(vector);
        let (r, returned) = reader.join().expect("reader");
        let e = r.expect_err("the insert was answered");
        assert_eq!(e.errno, FiErrno::FI_EAVAIL, "{e}");
        let took = returned - inserted;
        assert!(
            took < timeout * 14 / 10,
            "the insert's timeout of {timeout:?} was reported after {took:?}"
        );
        assert_eq!(eq.readerr().expect("the insert's error").context, 3);
    }

    /// CPU time the calling thread has used.
    fn thread_cpu_time() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call, which
        // writes nothing else; CLOCK_THREAD_CPUTIME_ID is a clock Linux defines.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime");
        Duration::new(
            u64::try_from(ts.tv_sec).expect("seconds"),
            u32::try_from(ts.tv_nsec).expect("nanoseconds"),
        )
    }

    /// Times the calling thread gave up the CPU of its own accord (it blocked: a sleep, a park,
    /// a lock it waited for; not a preemption).
    fn thread_voluntary_switches() -> u64 {
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable rusage for the duration of the call, which
        // writes nothing else; RUSAGE_THREAD is a target Linux defines.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        assert_eq!(rc, 0, "getrusage");
        u64::try_from(usage.ru_nvcsw).expect("switches")
    }

    /// How long [`command_held_by_a_stopped_nic`] keeps the NIC stopped.
    const HELD: Duration = Duration::from_millis(300);

    /// What [`command_held_by_a_stopped_nic`] saw of its command.
    struct Held {
        result: Result<crate::admin::AdminResult, crate::DriverError>,
        /// CPU time the command's thread used in the call.
        cpu: Duration,
        /// Times the command's thread blocked in the call.
        blocked: u64,
        /// From the call to its return.
        waited: Duration,
        /// From the NIC's start to the call's return.
        late: Duration,
    }

    /// Run ENDPOINT_DESTROY of an endpoint that does not exist on another thread while the
    /// NIC is stopped, and start it [`HELD`] after the call went to sleep on the
    /// admin interrupt (at once on a NIC without `ADMIN_ARM`).
    fn command_held_by_a_stopped_nic(nic: &Nic) -> Held {
        command_held_until(nic, |nic| {
            nic.bar0().write(DEV_CTRL, DevCtrl::new().with_enable(true))
        })
    }

    /// [`command_held_by_a_stopped_nic`], with `end` in place of the start: what happens to
    /// the NIC [`HELD`] after the command went to sleep.
    fn command_held_until(nic: &Nic, end: impl FnOnce(&Nic)) -> Held {
        nic.bar0().write(DEV_CTRL, DevCtrl::new());
        let started = Instant::now();
        let command = {
            let nic = nic.clone();
            std::thread::spawn(move || {
                let cpu = thread_cpu_time();
                let blocked = thread_voluntary_switches();
                let result =
                    nic.admin_command(uet_fwif::admin::Command::EndpointDestroy { endpoint: 99 });
                let blocked = thread_voluntary_switches() - blocked;
                (result, thread_cpu_time() - cpu, blocked, Instant::now())
            })
        };
        if nic.identity().interface_minor >= uet_regs::since::ADMIN_ARM {
            let interrupt = nic.inner.admin_interrupt().expect("admin interrupt");
            while interrupt.waiters() == 0 {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the command never went to sleep on the admin interrupt"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(HELD);
        let answered = Instant::now();
        end(nic);
        let (result, cpu, blocked, returned) = command.join().expect("command");
        Held {
            result,
            cpu,
            blocked,
            waited: returned - started,
            late: returned.saturating_duration_since(answered),
        }
    }

    /// Whether `held` is the NIC's answer to [`command_held_by_a_stopped_nic`]'s command, which
    /// waited until the NIC started, and only a small part of it on the CPU, blocked once
    /// rather than woken at intervals (`slept`).
    fn assert_answered(held: &Held, slept: bool) {
        let e = held
            .result
            .as_ref()
            .expect_err("endpoint 99 does not exist");
        assert!(
            matches!(
                e,
                crate::DriverError::AdminStatus {
                    status: uet_fwif::admin::Status::InvalidHandle,
                    ..
                }
            ),
            "{e}"
        );
        let Held {
            cpu,
            blocked,
            waited,
            late,
            ..
        } = *held;
        assert!(
            waited >= HELD,
            "returned after {waited:?}, before the NIC answered"
        );
        assert!(
            late < Duration::from_secs(5),
            "returned {late:?} after the answer"
        );
        if slept {
            assert!(
                cpu < waited / 4,
                "the command took {cpu:?} of CPU in {waited:?}: it did not sleep"
            );
            // Asleep until the answer: it blocks once (and perhaps on a lock or two on the
            // way), where a thread woken at intervals to poll blocks again at each.
            assert!(
                blocked < 8,
                "the command blocked {blocked} times in {waited:?}: it was woken to poll, not \
                 by the NIC's answer"
            );
        }
    }

    /// A synchronous admin command the NIC does not answer at once sleeps on the admin
    /// interrupt once its spin is over, where it yielded between polls until the NIC
    /// answered: the waiting thread takes a small part of a CPU, is not woken to poll in the
    /// meantime, and returns when the NIC answers. A NIC without the interrupt (interface
    /// 1.14) is polled, as before.
    #[test]
    fn a_synchronous_command_sleeps_until_the_nic_answers() {
        for minor in [uet_regs::INTERFACE_MINOR, 14] {
            let fabric = Fabric::new();
            let (nic, f) = nic_of_interface(&fabric, minor);
            nic.set_admin_timeout(Duration::from_secs(30));
            let arms = f.debug_counters().admin_arms;
            let held = command_held_by_a_stopped_nic(&nic);
            let interrupt = minor >= uet_regs::since::ADMIN_ARM;
            assert_answered(&held, interrupt);
            assert_eq!(
                f.debug_counters().admin_arms,
                arms + u64::from(interrupt),
                "one arm at 1.15 (the thread slept through the whole wait), none at 1.14"
            );
        }
    }

    /// A synchronous command on a NIC that will answer nothing — its function reset under the
    /// driver, or stopped with a fatal error (a DMA fault: bus mastering is off) — fails as
    /// before, and sets up no admin interrupt on the way: no MSI-X given to the function
    /// (which a reset took back), no vector taken, no thread started for a NIC that raises
    /// nothing.
    #[test]
    fn a_command_on_a_nic_that_answers_nothing_sets_up_no_admin_interrupt() {
        for reset in [true, false] {
            let fabric = Fabric::new();
            let (f, nic) = sim_function_and_nic(&fabric, "10.0.0.1");
            nic.set_admin_timeout(Duration::from_secs(30));
            if reset {
                f.function_level_reset();
            } else {
                f.set_bus_master(false);
            }
            let e = nic
                .admin_command(uet_fwif::admin::Command::EndpointDestroy { endpoint: 99 })
                .expect_err("the NIC answers nothing");
            assert!(
                matches!(
                    e,
                    crate::DriverError::FunctionReset { .. }
                        | crate::DriverError::AdminDeviceFatal { .. }
                ),
                "reset {reset}: {e}"
            );
            assert_eq!(
                f.msix_control() & uet_regs::pci::MSIX_CONTROL_ENABLE,
                0,
                "reset {reset}: MSI-X was enabled on a function that answers nothing"
            );
            assert!(
                nic.inner.admin_interrupt().is_none(),
                "reset {reset}: an admin interrupt runs for a NIC that raises nothing"
            );
        }
    }

    /// A synchronous command asleep on the admin interrupt when the function is reset under
    /// the driver (which raises nothing and drops the arm) learns of it at the thread's next
    /// look at the NIC's status, and fails with `FunctionReset`: not at its timeout.
    #[test]
    fn a_synchronous_command_asleep_when_the_function_is_reset_learns_of_it_promptly() {
        let fabric = Fabric::new();
        let (nic, _) = nic_of_interface(&fabric, uet_regs::INTERFACE_MINOR);
        nic.set_admin_timeout(Duration::from_secs(30));
        let held = command_held_until(&nic, |nic| {
            nic.bar0().write(
                uet_regs::FUNCTION_RESET,
                uet_regs::FunctionReset::new().with_reset(true),
            )
        });
        let e = held.result.expect_err("the function was reset");
        assert!(matches!(e, crate::DriverError::FunctionReset { .. }), "{e}");
        assert!(
            held.late < Duration::from_secs(5),
            "learned of the reset {:?} after it, with a timeout of 30 s",
            held.late
        );
    }

    /// A command that finds the admin ring full of commands the NIC has not answered sleeps
    /// until a completion makes room, as a command sleeps until its own.
    #[test]
    fn a_command_waiting_for_room_in_the_admin_ring_sleeps() {
        let fabric = Fabric::new();
        let (nic, _) = nic_of_interface(&fabric, uet_regs::INTERFACE_MINOR);
        // Stopped, the ring fills with commands that time out, unanswered.
        nic.set_admin_timeout(Duration::from_millis(1));
        nic.bar0().write(DEV_CTRL, DevCtrl::new());
        let unanswered = uet_fwif::admin::Command::EndpointDestroy { endpoint: 0xFFFF };
        for _ in 0..(1usize << crate::admin::ADMIN_RING_LOG2) - 1 {
            let e = nic.admin_command(unanswered).expect_err("stopped");
            assert!(matches!(e, crate::DriverError::AdminTimeout { .. }), "{e}");
        }
        // They slept until their timeouts: the thread lets them go at those deadlines.
        let interrupt = nic.inner.admin_interrupt().expect("admin interrupt");
        let since = Instant::now();
        while interrupt.waiters() > 0 {
            assert!(since.elapsed() < Duration::from_secs(10), "waiters kept");
            std::thread::sleep(Duration::from_millis(1));
        }
        nic.set_admin_timeout(Duration::from_secs(30));
        let held = command_held_by_a_stopped_nic(&nic);
        assert_answered(&held, true);
    }
}
