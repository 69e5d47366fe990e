//! Sim streams and events. A stream is an in-order queue served by its own device thread
//! (started with the stream on the device's executor, waiting while the queue is empty). A kernel that
//! ends with a fatal status — returned, injected, or a panic on a device thread — latches it
//! on the stream and raises a fault notice before the stream moves on; a host function
//! ([`Op::HostFn`]) runs on the stream's thread in order, and one that panics is a fault of
//! the stream the same way (the stream thread survives it). An event is a pair of sequence
//! numbers: how many records were requested and how far the streams have reached;
//! re-recording bumps the first, so no reset is ever needed.
//!
//! A forced device reset ([`Stream::abort_queued`], [`Event::force_complete`]) drops every
//! queued operation, completes every event and, once the running operation has ended,
//! clears the stream's sticky fault ([`Stream::finish_reset`]).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::faults::{FaultAction, FaultPoint, KernelKind, KernelSpan, SimFaults};
use super::memory::Memory;
use super::pool::{KernelEnd, Pools, KERNEL_PANIC_STATUS};
use crate::exec::panic_message;
use crate::exec::{DeviceThread, ExecutorKind, Notify};
use crate::{AicoreKernel, AicpuKernel, DeviceError, DevicePtr, EventStatus, StreamId};

/// Shared state of one event.
#[derive(Default)]
pub(crate) struct Event {
    state: Mutex<EventState>,
    cv: Notify,
}

#[derive(Default)]
struct EventState {
    /// Sequence number of the latest record requested (0 = never recorded).
    recorded: u64,
    /// Highest sequence number a stream has reached.
    reached: u64,
}

impl Event {
    /// Requests a new record; returns its sequence number.
    pub(crate) fn begin_record(&self) -> u64 {
        let mut s = self.state.lock();
        s.recorded += 1;
        s.recorded
    }

    /// The sequence number a waiter issued now must reach.
    pub(crate) fn target(&self) -> u64 {
        self.state.lock().recorded
    }

    /// Marks every record made so far as reached (a reset ends the streams that owed them).
    pub(crate) fn force_complete(&self) {
        let mut s = self.state.lock();
        s.reached = s.reached.max(s.recorded);
        drop(s);
        self.cv.notify_all();
    }

    fn reach(&self, seq: u64) {
        let mut s = self.state.lock();
        if seq > s.reached {
            s.reached = seq;
        }
        drop(s);
        self.cv.notify_all();
    }

    pub(crate) fn status(&self) -> EventStatus {
        let s = self.state.lock();
        if s.reached >= s.recorded {
            EventStatus::Complete
        } else {
            EventStatus::Pending
        }
    }

    /// Waits until `target` is reached or `deadline` passes; false on timeout.
    pub(crate) fn wait_until(&self, target: u64, deadline: Option<Instant>) -> bool {
        let mut s = self.state.lock();
        while s.reached < target {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            self.cv.wait(&mut s, deadline);
        }
        true
    }
}

/// One queued stream operation.
pub(crate) enum Op {
    Copy {
        dst: DevicePtr,
        bytes: Vec<u8>,
    },
    Aicore {
        kernel: AicoreKernel,
        arg: DevicePtr,
        /// Lazy activation with this COND value once armed (`None`: every core runs it).
        armed_cond: Option<u64>,
    },
    Aicpu {
        kernel: AicpuKernel,
        arg: DevicePtr,
        threads: u32,
    },
    Record {
        event: Arc<Event>,
        seq: u64,
    },
    Wait {
        event: Arc<Event>,
        seq: u64,
    },
    /// A host function run in stream order (`cudaLaunchHostFunc`, `aclrtLaunchCallback`).
    HostFn(Box<dyn FnOnce() + Send>),
}

/// A fatal status latched on a stream.
#[derive(Clone)]
struct Fault {
    status: i32,
    /// The panic message, when the operation panicked.
    panic: Option<String>,
}

impl Fault {
    fn status(status: i32) -> Fault {
        Fault {
            status,
            panic: None,
        }
    }
}

#[derive(Default)]
struct StreamState {
    queue: VecDeque<Op>,
    /// Operations enqueued and not yet finished (queued + running).
    outstanding: u64,
    /// First fatal status of a kernel on this stream (sticky).
    fault: Option<Fault>,
    /// Set when the stream is being destroyed.
    closing: bool,
    /// Set while a device reset is ending the stream's work.
    aborting: bool,
}

struct Shared {
    state: Mutex<StreamState>,
    work: Notify,
    idle: Notify,
}

/// An in-order stream with its device thread.
pub(crate) struct Stream {
    id: StreamId,
    shared: Arc<Shared>,
    worker: Option<DeviceThread>,
}

impl Stream {
    pub(crate) fn start(
        id: StreamId,
        pools: Arc<Pools>,
        memory: Arc<Memory>,
        faults: Arc<SimFaults>,
    ) -> Result<Stream, DeviceError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(StreamState::default()),
            work: Notify::default(),
            idle: Notify::default(),
        });
        let s = shared.clone();
        let kind: ExecutorKind = pools.kind();
        let worker =
            DeviceThread::spawn(kind, format!("sim-stream-{}", id.raw()), true, move || {
                serve(id, &s, &pools, &memory, &faults)
            })
            .map_err(|e| {
                DeviceError::InvalidLaunch(format!("cannot start a stream thread: {e}"))
            })?;
        Ok(Stream {
            id,
            shared,
            worker: Some(worker),
        })
    }

    pub(crate) fn enqueue(&self, op: Op) -> Result<(), DeviceError> {
        let mut st = self.shared.state.lock();
        if st.closing {
            return Err(DeviceError::UnknownStream(self.id));
        }
        st.queue.push_back(op);
        st.outstanding += 1;
        drop(st);
        self.shared.work.notify_all();
        Ok(())
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.shared.state.lock().outstanding == 0
    }

    pub(crate) fn synchronize(&self, timeout: Duration) -> Result<(), DeviceError> {
        let deadline = crate::deadline::deadline(timeout);
        let mut st = self.shared.state.lock();
        while st.outstanding > 0 {
            if Instant::now() >= deadline {
                return Err(DeviceError::Timeout(timeout));
            }
            self.shared.idle.wait(&mut st, Some(deadline));
        }
        match &st.fault {
            Some(f) => Err(DeviceError::KernelFault {
                stream: self.id,
                status: f.status,
                panic: f.panic.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Stream {
    /// Reset, step 1: drops every queued operation and releases a running wait.
    pub(crate) fn abort_queued(&self) {
        let mut st = self.shared.state.lock();
        let dropped = st.queue.len() as u64;
        st.queue.clear();
        st.outstanding -= dropped;
        st.aborting = true;
        let idle = st.outstanding == 0;
        drop(st);
        // A stream thread waiting on an event sees the abort.
        self.shared.work.notify_all();
        if idle {
            self.shared.idle.notify_all();
        }
    }

    /// Reset, step 2: waits until the running operation (if any) has ended.
    pub(crate) fn wait_idle(&self, deadline: Instant) -> bool {
        let mut st = self.shared.state.lock();
        while st.outstanding > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            self.shared.idle.wait(&mut st, Some(deadline));
        }
        true
    }

    /// Reset, step 3: the stream is empty; clears its sticky fault and accepts work again.
    pub(crate) fn finish_reset(&self) {
        let mut st = self.shared.state.lock();
        st.aborting = false;
        st.fault = None;
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.shared.state.lock().closing = true;
        self.shared.work.notify_all();
        if let Some(w) = self.worker.take() {
            w.join();
        }
    }
}

/// What an injected rule does to a kernel reaching the head of its stream.
#[derive(Clone, Copy)]
enum KernelFate {
    /// Runs normally.
    Normal,
    /// Runs normally; the device raises a notice with this code.
    Notice(i32),
    /// Ends with this fatal status; the body runs first when the flag says so.
    Fatal(i32, bool),
    /// Runs normally; finishes only after this extra delay.
    Slow(std::time::Duration),
}

fn kernel_fate(faults: &SimFaults, point: FaultPoint) -> KernelFate {
    match faults.check(point) {
        None => KernelFate::Normal,
        Some(FaultAction::KernelFatal { status, run }) => KernelFate::Fatal(status, run),
        Some(FaultAction::RaiseNotice { code }) => KernelFate::Notice(code),
        Some(FaultAction::SlowFinish(d)) => KernelFate::Slow(d),
        Some(_) => KernelFate::Fatal(-1, false),
    }
}

/// A kernel ended with a fatal status: the device raises a notice naming the stream (unless a
/// reset is terminating the kernel), before the stream moves on. Returns the fault to latch.
fn kernel_fault_notice(id: StreamId, shared: &Shared, faults: &SimFaults, fault: Fault) -> Fault {
    if !shared.state.lock().aborting {
        faults.raise_notice(Some(id), fault.status);
    }
    fault
}

/// Runs one kernel launch as its injected fate says and returns the fault it leaves, if any.
/// `run` executes the kernel's body on the device threads. A panic of the body is the
/// launch's fault whatever the fate (it is the more telling one), with a notice.
fn run_kernel(
    id: StreamId,
    shared: &Shared,
    faults: &SimFaults,
    fate: KernelFate,
    run: impl FnOnce() -> KernelEnd,
) -> Option<Fault> {
    let end = match fate {
        KernelFate::Fatal(_, false) => KernelEnd::default(),
        _ => run(),
    };
    match fate {
        KernelFate::Slow(d) => crate::wait::sleep(d),
        KernelFate::Notice(code) => faults.raise_notice(Some(id), code),
        KernelFate::Normal | KernelFate::Fatal(..) => {}
    }
    if let Some(message) = end.panic {
        let fault = Fault {
            status: KERNEL_PANIC_STATUS,
            panic: Some(message),
        };
        return Some(kernel_fault_notice(id, shared, faults, fault));
    }
    match fate {
        KernelFate::Normal if end.status != 0 => Some(kernel_fault_notice(
            id,
            shared,
            faults,
            Fault::status(end.status),
        )),
        KernelFate::Normal => None,
        // A rule that slows the kernel or raises its own notice leaves a returned status
        // latched without a notice of its own.
        KernelFate::Slow(_) | KernelFate::Notice(_) => {
            (end.status != 0).then(|| Fault::status(end.status))
        }
        KernelFate::Fatal(status, _) => Some(kernel_fault_notice(
            id,
            shared,
            faults,
            Fault::status(status),
        )),
    }
}

fn serve(id: StreamId, shared: &Shared, pools: &Pools, memory: &Memory, faults: &SimFaults) {
    loop {
        let op = {
            let mut st = shared.state.lock();
            loop {
                if let Some(op) = st.queue.pop_front() {
                    break op;
                }
                if st.closing {
                    return;
                }
                shared.work.wait(&mut st, None);
            }
        };
        let kernel = match &op {
            Op::Aicore { arg, .. } => Some((KernelKind::Aicore, *arg, Instant::now())),
            Op::Aicpu { arg, .. } => Some((KernelKind::Aicpu, *arg, Instant::now())),
            _ => None,
        };
        let fault = match op {
            Op::Copy { dst, bytes } => memory.copy_in(dst, &bytes).err().map(|_| Fault::status(-1)),
            Op::Aicore {
                kernel,
                arg,
                armed_cond,
            } => {
                let fate = kernel_fate(faults, FaultPoint::AicoreKernel);
                run_kernel(id, shared, faults, fate, || match armed_cond {
                    Some(cond) => pools.run_aicore_lazy(kernel, arg, cond),
                    None => pools.run_aicore(kernel, arg),
                })
            }
            Op::Aicpu {
                kernel,
                arg,
                threads,
            } => {
                let fate = kernel_fate(faults, FaultPoint::AicpuKernel);
                run_kernel(id, shared, faults, fate, || {
                    pools.run_aicpu(kernel, arg, threads)
                })
            }
            Op::Record { event, seq } => {
                // Retire the record and reach the event under the stream's lock: whoever
                // sees one sees the other (lock order: stream, then event).
                let mut st = shared.state.lock();
                st.outstanding -= 1;
                event.reach(seq);
                let idle = st.outstanding == 0;
                drop(st);
                if idle {
                    shared.idle.notify_all();
                }
                continue;
            }
            Op::Wait { event, seq } => {
                // Bounded slices so that destroying the stream never hangs on a wait whose
                // event will not be recorded any more.
                while !event.wait_until(seq, Some(Instant::now() + Duration::from_millis(100))) {
                    let st = shared.state.lock();
                    if st.closing || st.aborting {
                        break;
                    }
                }
                None
            }
            // A host function is the caller's code: it may block on anything, so it runs
            // as a blocking section (the pool goes on without this worker meanwhile).
            Op::HostFn(f) => match crate::wait::blocking(|| catch_unwind(AssertUnwindSafe(f))) {
                Ok(()) => None,
                Err(payload) => {
                    let fault = Fault {
                        status: KERNEL_PANIC_STATUS,
                        panic: Some(format!("host function: {}", panic_message(&*payload))),
                    };
                    Some(kernel_fault_notice(id, shared, faults, fault))
                }
            },
        };
        if let Some((kind, arg, start)) = kernel {
            faults.record_span(KernelSpan {
                stream: id,
                kind,
                arg,
                start,
                end: Instant::now(),
            });
        }
        let mut st = shared.state.lock();
        if let Some(fault) = fault {
            st.fault.get_or_insert(fault);
        }
        st.outstanding -= 1;
        let idle = st.outstanding == 0;
        drop(st);
        if idle {
            shared.idle.notify_all();
        }
    }
}
