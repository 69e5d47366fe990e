//! The chip's SDMA engine as the sim plays it: an asynchronous copy engine that kernels
//! submit copies to and that completes them in submission order on a thread of its own
//! (`docs/sim-device.md` §12). A copy is identified by its ticket (1, 2, …); it has landed
//! once [`SdmaEngine::completed`] reaches its ticket. Each completion rings the chip's AICPU
//! doorbells, so a scheduler waiting for it wakes without polling.
//!
//! It copies bytes between device addresses it is given and nothing else: it knows nothing
//! of runs, tasks or which memory belongs to whom (the submitter vouches for the addresses).
//! Its one `unsafe` block is that copy; its thread is registered with the crash reporter, so
//! a copy a kernel got wrong is reported with its addresses (`docs/sim-device.md` §10).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use parking_lot::Mutex;

use crate::Doorbell;

/// What the sim's fault injection decides for one copy, asked just before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdmaFault {
    /// Copy at once.
    None,
    /// Wait this long, then copy (a slow engine).
    Delay(Duration),
    /// Refuse the submission: [`SdmaEngine::submit`] returns `None`.
    Refuse,
}

/// Asked once per submitted copy.
pub type SdmaFaultHook = Box<dyn Fn() -> SdmaFault + Send + Sync>;

struct Job {
    dst: u64,
    src: u64,
    bytes: u64,
    delay: Duration,
    /// [`Inner::aborts`] when it was queued: an abort since then cancels it.
    epoch: u64,
}

struct Inner {
    /// std's lock and condition variable, not parking_lot's: the engine thread sleeps here,
    /// and a sleeper in parking_lot's process-wide table at a fork hangs the child
    /// (`exec::sync::Flag`).
    queue: std::sync::Mutex<Queue>,
    more: std::sync::Condvar,
    /// Aborts so far ([`SdmaEngine::abort`]).
    aborts: AtomicU64,
    /// Held for the whole of each copy, so an abort can wait for the one in progress.
    copying: Mutex<()>,
    /// Tickets issued so far (the last one's number).
    submitted: AtomicU64,
    /// Copies landed so far, in ticket order.
    completed: AtomicU64,
    bells: Box<[Arc<Doorbell>]>,
}

impl Inner {
    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Nothing panics under this lock: a poisoned queue is still consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

/// One chip's SDMA engine (present on a device started with SDMA provisioned).
pub struct SdmaEngine {
    inner: Arc<Inner>,
    faults: SdmaFaultHook,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SdmaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SdmaEngine")
            .field("submitted", &self.submitted())
            .field("completed", &self.completed())
            .finish_non_exhaustive()
    }
}

impl SdmaEngine {
    /// Starts the engine of device `device` (the number its crash reports name), whose
    /// completions ring `bells`, asking `faults` about every copy. Its thread is a device
    /// thread for the crash reporter: a copy that faults is reported with its addresses.
    ///
    /// # Errors
    /// The engine's thread could not be started.
    pub fn start(
        device: u32,
        bells: Box<[Arc<Doorbell>]>,
        faults: SdmaFaultHook,
    ) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            queue: std::sync::Mutex::new(Queue::default()),
            more: std::sync::Condvar::new(),
            aborts: AtomicU64::new(0),
            copying: Mutex::new(()),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            bells,
        });
        let worker = inner.clone();
        let thread = std::thread::Builder::new()
            .name("sim-sdma".into())
            .spawn(move || {
                let _crash = crate::crash::DeviceThread::enter(device, crate::crash::Role::Sdma);
                serve(&worker)
            })?;
        Ok(SdmaEngine {
            inner,
            faults,
            thread: Some(thread),
        })
    }

    /// Queues a copy of `bytes` bytes from device address `src` to `dst` and returns its
    /// ticket (≥ 1), or `None` when refused: a null address, zero bytes, or an injected
    /// fault. Never blocks.
    ///
    /// # Safety
    /// `src` and `dst` must be valid device (host) memory of at least `bytes` bytes until
    /// [`completed`](Self::completed) reaches the ticket, and nobody else may write `dst`
    /// meanwhile.
    pub unsafe fn submit(&self, dst: u64, src: u64, bytes: u64) -> Option<u64> {
        if dst == 0 || src == 0 || bytes == 0 {
            return None;
        }
        let delay = match (self.faults)() {
            SdmaFault::Refuse => return None,
            SdmaFault::Delay(d) => d,
            SdmaFault::None => Duration::ZERO,
        };
        let mut q = self.inner.lock_queue();
        if q.closed {
            return None;
        }
        // The ticket is issued under the queue lock, so tickets are queued in order.
        let ticket = self.inner.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        q.jobs.push_back(Job {
            dst,
            src,
            bytes,
            delay,
            epoch: self.inner.aborts.load(Ordering::Acquire),
        });
        self.inner.more.notify_one();
        Some(ticket)
    }

    /// Copies landed so far: ticket `t` has landed once this is ≥ `t` (acquire: the copied
    /// bytes are visible to whoever saw it).
    pub fn completed(&self) -> u64 {
        self.inner.completed.load(Ordering::Acquire)
    }

    /// Tickets issued so far.
    pub fn submitted(&self) -> u64 {
        self.inner.submitted.load(Ordering::Acquire)
    }

    /// Copies queued or in progress.
    pub fn in_flight(&self) -> u64 {
        self.submitted().saturating_sub(self.completed())
    }

    /// Cancels every copy not yet started (they count as landed, without writing) and waits
    /// for the one in progress: once it returns, no copy submitted before it writes memory.
    /// The device calls it on a reset and when it is dropped, before its memory is freed.
    pub fn abort(&self) {
        {
            let mut q = self.inner.lock_queue();
            self.inner.aborts.fetch_add(1, Ordering::AcqRel);
            let cancelled = q.jobs.len() as u64;
            q.jobs.clear();
            self.inner.completed.fetch_add(cancelled, Ordering::AcqRel);
            self.inner.more.notify_all();
        }
        // A copy that began before the abort holds this lock until it has landed; one that
        // had not begun sees the new epoch and is cancelled.
        drop(self.inner.copying.lock());
        for bell in self.inner.bells.iter() {
            bell.ring();
        }
    }
}

impl Drop for SdmaEngine {
    /// Cancels what is queued ([`abort`](Self::abort)), then stops the thread.
    fn drop(&mut self) {
        self.abort();
        self.inner.lock_queue().closed = true;
        self.inner.more.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(inner: &Inner) {
    loop {
        let job = {
            let mut q = inner.lock_queue();
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    break job;
                }
                if q.closed {
                    return;
                }
                q = inner.more.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
        };
        if !job.delay.is_zero() {
            // A slow engine (fault injection); an abort ends the wait.
            let deadline = std::time::Instant::now() + job.delay;
            let mut q = inner.lock_queue();
            while inner.aborts.load(Ordering::Acquire) == job.epoch {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let (next, r) = inner
                    .more
                    .wait_timeout(q, left)
                    .unwrap_or_else(PoisonError::into_inner);
                q = next;
                if r.timed_out() {
                    break;
                }
            }
            drop(q);
        }
        {
            let _copying = inner.copying.lock();
            if inner.aborts.load(Ordering::Acquire) != job.epoch {
                // Cancelled by an abort (which counted only the jobs still queued): it counts
                // as landed, without writing.
                inner.completed.fetch_add(1, Ordering::AcqRel);
                continue;
            }
            let _copy = crate::crash::enter_sdma_copy(job.dst, job.src, job.bytes);
            // SAFETY: `submit`'s caller vouched that both ranges are valid for `bytes` bytes
            // until this copy completes and that nobody else writes `dst` meanwhile; the
            // ranges may overlap (a move). No abort has begun since it was queued (checked
            // under `copying`, which an abort waits for), so the memory is still the run's.
            unsafe {
                std::ptr::copy(job.src as *const u8, job.dst as *mut u8, job.bytes as usize);
            }
        }
        inner.completed.fetch_add(1, Ordering::AcqRel);
        for bell in inner.bells.iter() {
            bell.ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(fault: SdmaFault) -> SdmaEngine {
        SdmaEngine::start(0, Box::new([]), Box::new(move || fault)).unwrap()
    }

    fn wait_for(e: &SdmaEngine, ticket: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while e.completed() < ticket {
            assert!(
                std::time::Instant::now() < deadline,
                "copy {ticket} never landed"
            );
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    #[test]
    fn copies_land_in_ticket_order() {
        let e = engine(SdmaFault::None);
        let src: Vec<u8> = (0..=255).collect();
        let mut dst = [vec![0u8; 256], vec![0u8; 256]];
        // SAFETY: both buffers outlive the copies (waited for below).
        let t1 = unsafe { e.submit(dst[0].as_mut_ptr() as u64, src.as_ptr() as u64, 256) };
        // SAFETY: as above.
        let t2 = unsafe { e.submit(dst[1].as_mut_ptr() as u64, src.as_ptr() as u64 + 128, 128) };
        assert_eq!((t1, t2), (Some(1), Some(2)));
        wait_for(&e, 2);
        assert_eq!(dst[0], src);
        assert_eq!(&dst[1][..128], &src[128..]);
        assert!(dst[1][128..].iter().all(|&b| b == 0));
        assert_eq!(e.in_flight(), 0);
    }

    #[test]
    fn bad_copies_and_injected_refusals_get_no_ticket() {
        let e = engine(SdmaFault::None);
        let mut b = [0u8; 8];
        let p = b.as_mut_ptr() as u64;
        // SAFETY: refused before anything is queued.
        unsafe {
            assert_eq!(e.submit(0, p, 8), None);
            assert_eq!(e.submit(p, 0, 8), None);
            assert_eq!(e.submit(p, p, 0), None);
        }
        let r = engine(SdmaFault::Refuse);
        // SAFETY: refused by the fault hook.
        assert_eq!(unsafe { r.submit(p, p, 8) }, None);
        assert_eq!(r.submitted(), 0);
    }

    #[test]
    fn a_slow_copy_is_in_flight_until_it_lands() {
        let e = engine(SdmaFault::Delay(Duration::from_millis(50)));
        let src = [7u8; 64];
        let mut dst = [0u8; 64];
        // SAFETY: both outlive the copy (waited for below).
        let t = unsafe { e.submit(dst.as_mut_ptr() as u64, src.as_ptr() as u64, 64) }.unwrap();
        assert_eq!(e.in_flight(), 1);
        assert!(e.completed() < t);
        wait_for(&e, t);
        assert_eq!(dst, src);
    }
}

#[cfg(test)]
mod abort_tests {
    use super::*;

    #[test]
    fn an_abort_cancels_queued_and_delayed_copies_without_writing() {
        let e = SdmaEngine::start(
            0,
            Box::new([]),
            Box::new(|| SdmaFault::Delay(Duration::from_secs(30))),
        )
        .unwrap();
        let src = [9u8; 32];
        let mut dst = [[0u8; 32]; 3];
        for d in dst.iter_mut() {
            // SAFETY: the abort below guarantees no copy writes after it returns, and both
            // buffers outlive it.
            unsafe { e.submit(d.as_mut_ptr() as u64, src.as_ptr() as u64, 32) }.unwrap();
        }
        let started = std::time::Instant::now();
        e.abort();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the abort waited out the delay"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while e.in_flight() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "cancelled copies stay in flight"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            dst.iter().all(|d| d.iter().all(|&b| b == 0)),
            "a cancelled copy wrote"
        );
        // Dropping the engine writes nothing either.
        drop(e);
        assert!(dst.iter().all(|d| d.iter().all(|&b| b == 0)));
    }
}
