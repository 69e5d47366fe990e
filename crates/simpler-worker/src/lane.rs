//! Lanes: one thread per endpoint, the only caller of that endpoint (`docs/l3-worker.md`
//! §4). A lane takes [`WorkItem`]s from its channel one at a time — task members the
//! scheduler dispatched, and control calls (register, unregister, malloc, free) with a
//! reply channel — runs each to its end, and reports a task member's end to the scheduler
//! as an [`Event`].
//!
//! An endpoint that answers [`EndpointError::Died`] (or panics) is dead: the lane reports
//! it, never calls the endpoint again, and answers every later item with
//! [`WorkerError::EndpointFailure`]. The lane decides nothing about tasks: what a member's
//! end means for the graph is the scheduler's.

use std::panic::AssertUnwindSafe;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simpler_device::DevicePtr;
use simpler_host::CallConfig;

use crate::endpoint::{Callable, CallableKey, Endpoint, EndpointError};
use crate::tensor::{TaskArgs, Tensor};
use crate::tensormap::TaskId;
use crate::WorkerError;

/// What one task member does on a lane.
pub(crate) enum TaskOp {
    /// Runs callable `key`.
    Run {
        key: CallableKey,
        args: TaskArgs,
        config: CallConfig,
    },
    /// Copies host bytes to the chip.
    CopyTo { dst: DevicePtr, src: Tensor },
    /// Copies chip bytes to the host.
    CopyFrom { dst: Tensor, src: DevicePtr },
}

/// A control call.
pub(crate) enum ControlOp {
    Register(CallableKey, Callable),
    Unregister(CallableKey),
    Malloc(u64),
    Free(DevicePtr),
    MapWindow(std::sync::Arc<crate::memory::SharedRegion>),
    UnmapWindow(DevicePtr),
}

/// A control call's answer.
pub(crate) enum ControlReply {
    Done,
    Ptr(DevicePtr),
}

/// An item of a lane's channel.
pub(crate) enum WorkItem {
    /// One member of task `task` of run `run`.
    Task { run: u64, task: TaskId, op: TaskOp },
    /// A control call; the answer goes to `reply` (a dropped receiver is fine).
    Control {
        op: ControlOp,
        reply: Sender<Result<ControlReply, WorkerError>>,
    },
    /// Shuts the endpoint down and ends the lane.
    Shutdown {
        reply: Sender<Result<(), WorkerError>>,
    },
}

/// A traced task member's call on its lane: host clock (`CLOCK_MONOTONIC` ns) around the
/// endpoint's run, and the chip's trace of the run when the endpoint is a chip.
pub(crate) struct MemberTrace {
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) chip: Option<Box<simpler_host::trace_model::Trace>>,
}

/// What lanes (and the engine) tell the scheduler.
pub(crate) enum Event {
    /// A task member ended on `lane`; `result` is the member's cause of failure, if any;
    /// `took` is the wall time of its callable's run (zero for a copy).
    Done {
        lane: usize,
        run: u64,
        task: TaskId,
        result: Result<(), WorkerError>,
        took: Duration,
        /// Set for a traced call (its config's trace level is not Off).
        trace: Option<MemberTrace>,
        /// The tasks a chip run's orchestration submitted (the endpoint's
        /// [`RunFacts::tasks`](crate::endpoint::RunFacts)); `None` for a copy, a sub task,
        /// or a call that failed.
        chip_tasks: Option<u64>,
    },
    /// The endpoint of `lane` died; `report` is what is known.
    Died { lane: usize, report: String },
    /// Something changed (a task became ready, a run closed): dispatch and advance.
    Kick,
    /// Ends the scheduler.
    Stop,
}

thread_local! {
    /// The worker (by uid) whose lane this thread is; 0 on every other thread.
    static LANE_OF: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// True on the lane threads of worker `uid` — inside its tasks (a sub closure), where a call
/// that waits for the worker's runs or lanes would wait for the task making it.
pub(crate) fn in_lane_of(uid: u64) -> bool {
    LANE_OF.with(|l| l.get() == uid)
}

/// The refusal of `what` called from a task of the worker.
pub(crate) fn from_a_task(what: &str) -> WorkerError {
    WorkerError::InvalidState(format!(
        "{what} cannot be called from a task of this worker: it would wait for that task's \
         own lane or run, which cannot end before the task does"
    ))
}

/// Starts lane `index` of worker `uid` over `endpoint`.
///
/// # Errors
/// The thread could not be started.
pub(crate) fn spawn(
    uid: u64,
    index: usize,
    endpoint: Box<dyn Endpoint>,
    items: Receiver<WorkItem>,
    events: Sender<Event>,
) -> std::io::Result<JoinHandle<()>> {
    let name = format!("simpler-lane-{index}");
    std::thread::Builder::new().name(name).spawn(move || {
        LANE_OF.with(|l| l.set(uid));
        Lane {
            index,
            describe: endpoint.describe(),
            endpoint,
            dead: None,
            events,
        }
        .serve(items)
    })
}

struct Lane {
    index: usize,
    describe: String,
    endpoint: Box<dyn Endpoint>,
    /// The death report, once dead.
    dead: Option<String>,
    events: Sender<Event>,
}

impl Lane {
    fn serve(mut self, items: Receiver<WorkItem>) {
        for item in items {
            match item {
                WorkItem::Task { run, task, op } => {
                    let timed = matches!(op, TaskOp::Run { .. });
                    let traced = matches!(&op, TaskOp::Run { config, .. }
                        if config.trace_level != simpler_host::trace_model::TraceLevel::Off);
                    let start_ns = traced.then(simpler_device::clock::monotonic_ns);
                    let began = Instant::now();
                    let result = self.call(|ep| run_op(ep, op));
                    let took = if timed {
                        began.elapsed()
                    } else {
                        Duration::ZERO
                    };
                    let end_ns = start_ns.map(|_| simpler_device::clock::monotonic_ns());
                    let facts = match self.dead {
                        None if timed => self.endpoint.take_run_facts(),
                        _ => crate::endpoint::RunFacts::default(),
                    };
                    let trace = start_ns.zip(end_ns).map(|(start_ns, end_ns)| MemberTrace {
                        start_ns,
                        end_ns,
                        chip: facts.trace,
                    });
                    let _ = self.events.send(Event::Done {
                        lane: self.index,
                        run,
                        task,
                        result: result.map(|_| ()),
                        took,
                        trace,
                        chip_tasks: facts.tasks,
                    });
                }
                WorkItem::Control { op, reply } => {
                    let answer = self.call(|ep| match op {
                        ControlOp::Register(key, c) => {
                            ep.register(key, &c).map(|_| ControlReply::Done)
                        }
                        ControlOp::Unregister(key) => {
                            ep.unregister(key).map(|_| ControlReply::Done)
                        }
                        ControlOp::Malloc(n) => ep.malloc(n).map(ControlReply::Ptr),
                        ControlOp::Free(p) => ep.free(p).map(|_| ControlReply::Done),
                        ControlOp::MapWindow(r) => ep.map_window(&r).map(ControlReply::Ptr),
                        ControlOp::UnmapWindow(p) => ep.unmap_window(p).map(|_| ControlReply::Done),
                    });
                    let _ = reply.send(answer);
                }
                WorkItem::Shutdown { reply } => {
                    let answer = match self.dead {
                        Some(_) => Ok(()),
                        None => match self.endpoint.shutdown() {
                            Ok(()) => Ok(()),
                            Err(EndpointError::Failed(e)) => Err(e),
                            Err(EndpointError::Died { report }) => {
                                Err(WorkerError::EndpointFailure {
                                    endpoint: self.describe.clone(),
                                    report,
                                })
                            }
                        },
                    };
                    let _ = reply.send(answer);
                    return;
                }
            }
        }
    }

    /// Calls the endpoint unless it is dead; a death (or a panic) marks it dead and is
    /// reported to the scheduler.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Endpoint) -> Result<T, EndpointError>,
    ) -> Result<T, WorkerError> {
        if let Some(report) = &self.dead {
            return Err(self.failure(report.clone()));
        }
        let endpoint = &mut *self.endpoint;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| f(endpoint)));
        let report = match outcome {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(EndpointError::Failed(e))) => return Err(e),
            Ok(Err(EndpointError::Died { report })) => report,
            Err(panic) => format!("the endpoint panicked: {}", panic_text(&*panic)),
        };
        tracing::warn!(lane = self.index, endpoint = %self.describe, %report, "endpoint died");
        self.dead = Some(report.clone());
        let _ = self.events.send(Event::Died {
            lane: self.index,
            report: report.clone(),
        });
        Err(self.failure(report))
    }

    fn failure(&self, report: String) -> WorkerError {
        WorkerError::EndpointFailure {
            endpoint: self.describe.clone(),
            report,
        }
    }
}

fn run_op(ep: &mut dyn Endpoint, op: TaskOp) -> Result<(), EndpointError> {
    match op {
        TaskOp::Run { key, args, config } => ep.run(key, &args.args, &config),
        TaskOp::CopyTo { dst, src } => {
            let bytes = crate::host_view::bytes(&src).map_err(|why| bad("src", why))?;
            ep.copy_to(dst, bytes)
        }
        TaskOp::CopyFrom { dst, src } => {
            // SAFETY: the copy task is the only task touching `dst`'s footprint while it
            // runs (it is recorded as its writer in the tensor map).
            let bytes =
                unsafe { crate::host_view::bytes_mut(&dst) }.map_err(|why| bad("dst", why))?;
            ep.copy_from(bytes, src)
        }
    }
}

fn bad(arg: &str, reason: String) -> EndpointError {
    EndpointError::Failed(WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    })
}

/// The text of a panic payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}
