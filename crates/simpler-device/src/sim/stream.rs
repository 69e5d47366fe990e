//! Sim streams and events. A stream is an in-order queue served by its own worker thread
//! (started with the stream, parked on a condvar while the queue is empty). An event is a
//! pair of sequence numbers: how many records were requested and how far the streams have
//! reached; re-recording bumps the first, so no reset is ever needed.
//!
//! A forced device reset ([`Stream::abort_queued`], [`Event::force_complete`]) drops every
//! queued operation, completes every event and, once the running operation has ended,
//! clears the stream's sticky fault ([`Stream::finish_reset`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::faults::{FaultAction, FaultPoint, SimFaults};
use super::memory::Memory;
use super::pool::Pools;
use crate::{AicoreKernel, AicpuKernel, DeviceError, DevicePtr, EventStatus, StreamId};

/// Shared state of one event.
#[derive(Default)]
pub(crate) struct Event {
    state: Mutex<EventState>,
    cv: Condvar,
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
        self.cv.notify_all();
    }

    fn reach(&self, seq: u64) {
        let mut s = self.state.lock();
        if seq > s.reached {
            s.reached = seq;
        }
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
            match deadline {
                Some(d) => {
                    if self.cv.wait_until(&mut s, d).timed_out() && s.reached < target {
                        return false;
                    }
                }
                None => self.cv.wait(&mut s),
            }
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
}

#[derive(Default)]
struct StreamState {
    queue: VecDeque<Op>,
    /// Operations enqueued and not yet finished (queued + running).
    outstanding: u64,
    /// First fatal status of a kernel on this stream (sticky).
    fault: Option<i32>,
    /// Set when the stream is being destroyed.
    closing: bool,
    /// Set while a device reset is ending the stream's work.
    aborting: bool,
}

struct Shared {
    state: Mutex<StreamState>,
    work: Condvar,
    idle: Condvar,
}

/// An in-order stream with its worker thread.
pub(crate) struct Stream {
    id: StreamId,
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
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
            work: Condvar::new(),
            idle: Condvar::new(),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("sim-stream-{}", id.0))
            .spawn(move || serve(&s, &pools, &memory, &faults))
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
        self.shared.work.notify_one();
        Ok(())
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.shared.state.lock().outstanding == 0
    }

    pub(crate) fn synchronize(&self, timeout: Duration) -> Result<(), DeviceError> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock();
        while st.outstanding > 0 {
            if self.shared.idle.wait_until(&mut st, deadline).timed_out() && st.outstanding > 0 {
                return Err(DeviceError::Timeout(timeout));
            }
        }
        match st.fault {
            Some(status) => Err(DeviceError::KernelFault {
                stream: self.id,
                status,
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
        if st.outstanding == 0 {
            self.shared.idle.notify_all();
        }
    }

    /// Reset, step 2: waits until the running operation (if any) has ended.
    pub(crate) fn wait_idle(&self, deadline: Instant) -> bool {
        let mut st = self.shared.state.lock();
        while st.outstanding > 0 {
            if self.shared.idle.wait_until(&mut st, deadline).timed_out() && st.outstanding > 0 {
                return false;
            }
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
            let _ = w.join();
        }
    }
}

/// The fatal status an injected kernel fault latches, and whether the kernel body runs.
fn kernel_fault(faults: &SimFaults, point: FaultPoint) -> Option<(i32, bool)> {
    match faults.check(point)? {
        FaultAction::KernelFatal { status, run } => Some((status, run)),
        _ => Some((-1, false)),
    }
}

fn serve(shared: &Shared, pools: &Pools, memory: &Memory, faults: &SimFaults) {
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
                shared.work.wait(&mut st);
            }
        };
        let fault = match op {
            Op::Copy { dst, bytes } => memory.copy_in(dst, &bytes).err().map(|_| -1),
            Op::Aicore { kernel, arg } => match kernel_fault(faults, FaultPoint::AicoreKernel) {
                Some((status, run)) => {
                    if run {
                        pools.run_aicore(kernel, arg);
                    }
                    Some(status)
                }
                None => {
                    pools.run_aicore(kernel, arg);
                    None
                }
            },
            Op::Aicpu {
                kernel,
                arg,
                threads,
            } => match kernel_fault(faults, FaultPoint::AicpuKernel) {
                Some((status, run)) => {
                    if run {
                        pools.run_aicpu(kernel, arg, threads);
                    }
                    Some(status)
                }
                None => Some(pools.run_aicpu(kernel, arg, threads)).filter(|&rc| rc != 0),
            },
            Op::Record { event, seq } => {
                // Retire the record and reach the event under the stream's lock: whoever
                // sees one sees the other (lock order: stream, then event).
                let mut st = shared.state.lock();
                st.outstanding -= 1;
                event.reach(seq);
                if st.outstanding == 0 {
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
        };
        let mut st = shared.state.lock();
        if let Some(status) = fault {
            st.fault.get_or_insert(status);
        }
        st.outstanding -= 1;
        if st.outstanding == 0 {
            shared.idle.notify_all();
        }
    }
}
