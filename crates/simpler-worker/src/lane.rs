//! Lanes: one thread per endpoint, the only caller of that endpoint (`docs/l3-worker.md`
//! §4). A lane takes [`WorkItem`]s from its channel — task members dispatched to it, and
//! control calls (register, unregister, malloc, free) with a reply channel — and runs each
//! to its end. The runs waiting in its channel together (a chip lane may have several
//! single tasks dispatched to it) go to the endpoint as one batch
//! ([`Endpoint::run_batch`]: a chip pipelines them); anything else goes alone, in channel
//! order. Each member's end is applied to the engine by the lane itself, under the engine
//! lock, as soon as it is known (`crate::scheduler::apply`), and that dispatches what it
//! made ready.
//!
//! An endpoint that answers [`EndpointError::Died`] (or panics) is dead: the lane records
//! it, never calls the endpoint again, and answers every later item with
//! [`WorkerError::EndpointFailure`]. The lane decides nothing about tasks: what a member's
//! end means for the graph is `crate::scheduler`'s.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simpler_device::DevicePtr;
use simpler_host::trace_model::TraceLevel;
use simpler_host::CallConfig;

use crate::endpoint::{BatchRun, Callable, CallableKey, Endpoint, EndpointError, RunFacts};
use crate::engine::{Engine, CHIP_LANE_DEPTH};
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

/// What a lane applies to the engine (`crate::scheduler::apply`).
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

/// Starts lane `index` of `engine`'s worker over `endpoint`, taking its items from `items`.
///
/// # Errors
/// The thread could not be started.
pub(crate) fn spawn(
    engine: Arc<Engine>,
    index: usize,
    endpoint: Box<dyn Endpoint>,
    items: Receiver<WorkItem>,
) -> std::io::Result<JoinHandle<()>> {
    let name = format!("simpler-lane-{index}");
    std::thread::Builder::new().name(name).spawn(move || {
        LANE_OF.with(|l| l.set(engine.uid));
        Lane {
            index,
            describe: endpoint.describe(),
            endpoint,
            dead: None,
            engine,
        }
        .serve(&items)
    })
}

struct Lane {
    index: usize,
    describe: String,
    endpoint: Box<dyn Endpoint>,
    /// The death report, once dead.
    dead: Option<String>,
    engine: Arc<Engine>,
}

/// A run member taken from the channel, waiting for its batch to go.
struct Member {
    run: u64,
    task: TaskId,
    key: CallableKey,
    args: TaskArgs,
    config: CallConfig,
}

/// An item taken from the channel: a run member, which may join a batch, or anything else.
enum Taken {
    Run(Member),
    Other(WorkItem),
}

/// Takes a run member out of `item`, or gives the item back.
fn run_member(item: WorkItem) -> Taken {
    match item {
        WorkItem::Task {
            run,
            task,
            op: TaskOp::Run { key, args, config },
        } => Taken::Run(Member {
            run,
            task,
            key,
            args,
            config,
        }),
        other => Taken::Other(other),
    }
}

impl Lane {
    fn serve(mut self, items: &Receiver<WorkItem>) {
        // An item taken while a batch was gathered, served next.
        let mut next: Option<WorkItem> = None;
        loop {
            let item = match next.take() {
                Some(item) => item,
                None => match items.recv() {
                    Ok(item) => item,
                    Err(_) => return,
                },
            };
            let first = match run_member(item) {
                Taken::Run(member) => member,
                Taken::Other(item) => {
                    if self.serve_one(item) {
                        return;
                    }
                    continue;
                }
            };
            // The runs waiting behind it go with it, up to the lane's depth.
            let mut batch = vec![first];
            while batch.len() < CHIP_LANE_DEPTH {
                match items.try_recv().map(run_member) {
                    Ok(Taken::Run(member)) => batch.push(member),
                    Ok(Taken::Other(other)) => {
                        next = Some(other);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.run_batch(batch);
        }
    }

    /// Serves an item that is not a run; true once the lane has shut down.
    fn serve_one(&mut self, item: WorkItem) -> bool {
        match item {
            WorkItem::Task { run, task, op } => {
                // A copy (runs go in batches): untimed, untraced.
                if !crate::scheduler::claim(&self.engine, self.index, &[(run, task)])[0] {
                    return false;
                }
                let result = self.call(|ep| run_op(ep, op));
                self.report(vec![Event::Done {
                    lane: self.index,
                    run,
                    task,
                    result: result.map(|_| ()),
                    took: Duration::ZERO,
                    trace: None,
                    chip_tasks: None,
                }]);
            }
            WorkItem::Control { op, reply } => {
                let answer = self.call(|ep| match op {
                    ControlOp::Register(key, c) => ep.register(key, &c).map(|_| ControlReply::Done),
                    ControlOp::Unregister(key) => ep.unregister(key).map(|_| ControlReply::Done),
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
                        Err(EndpointError::Died { report }) => Err(WorkerError::EndpointFailure {
                            endpoint: self.describe.clone(),
                            report,
                        }),
                    },
                };
                let _ = reply.send(answer);
                return true;
            }
        }
        false
    }

    /// Runs `batch` through the endpoint's [`Endpoint::run_batch`] and applies each
    /// member's end as the endpoint reports it. A member's `took` (and its traced span)
    /// runs from the later of the batch's start and the previous member's end to its own
    /// end, so a pipelined batch's times add up to the lane's wall time, counted once.
    fn run_batch(&mut self, batch: Vec<Member>) {
        let claimed: Vec<(u64, TaskId)> = batch.iter().map(|m| (m.run, m.task)).collect();
        let go = crate::scheduler::claim(&self.engine, self.index, &claimed);
        let batch: Vec<Member> = batch
            .into_iter()
            .zip(go)
            .filter_map(|(m, go)| go.then_some(m))
            .collect();
        if batch.is_empty() {
            return;
        }
        let began = Instant::now();
        let traced = batch
            .iter()
            .any(|m| m.config.trace_level != TraceLevel::Off);
        let began_ns = traced.then(simpler_device::clock::monotonic_ns);
        let mut reported = 0usize;
        if self.dead.is_none() {
            let runs: Vec<BatchRun<'_>> = batch
                .iter()
                .map(|m| BatchRun {
                    key: m.key,
                    args: &m.args.args,
                    config: &m.config,
                })
                .collect();
            let Lane {
                index,
                describe,
                endpoint,
                dead,
                engine,
            } = self;
            let mut last = (began, began_ns);
            let mut done = |i: usize, outcome: Result<RunFacts, EndpointError>| {
                if i != reported || dead.is_some() {
                    return; // out of order, twice, or after the endpoint's death
                }
                reported += 1;
                let m = &batch[i];
                let now = Instant::now();
                let took = now.saturating_duration_since(last.0);
                let end_ns = last.1.map(|_| simpler_device::clock::monotonic_ns());
                let mut events = Vec::with_capacity(2);
                let (result, facts) = match outcome {
                    Ok(facts) => (Ok(()), facts),
                    Err(EndpointError::Failed(e)) => (Err(e), RunFacts::default()),
                    Err(EndpointError::Died { report }) => {
                        died(*index, describe, &report);
                        *dead = Some(report.clone());
                        events.push(Event::Died {
                            lane: *index,
                            report: report.clone(),
                        });
                        let failure = WorkerError::EndpointFailure {
                            endpoint: describe.clone(),
                            report,
                        };
                        (Err(failure), RunFacts::default())
                    }
                };
                let trace = match (m.config.trace_level != TraceLevel::Off, last.1, end_ns) {
                    (true, Some(start_ns), Some(end_ns)) => Some(MemberTrace {
                        start_ns,
                        end_ns,
                        chip: facts.trace,
                    }),
                    _ => None,
                };
                events.push(Event::Done {
                    lane: *index,
                    run: m.run,
                    task: m.task,
                    result,
                    took,
                    trace,
                    chip_tasks: facts.tasks,
                });
                crate::scheduler::apply(engine, events);
                last = (now, end_ns);
            };
            let outcome =
                std::panic::catch_unwind(AssertUnwindSafe(|| endpoint.run_batch(&runs, &mut done)));
            if let Err(panic) = outcome {
                let report = format!("the endpoint panicked: {}", panic_text(&*panic));
                died(*index, describe, &report);
                *dead = Some(report.clone());
                crate::scheduler::apply(
                    engine,
                    [Event::Died {
                        lane: *index,
                        report,
                    }],
                );
            }
        }
        // What the endpoint did not report: a dead endpoint's members, or (a broken
        // endpoint) members it skipped.
        let events: Vec<Event> = batch[reported..]
            .iter()
            .map(|m| Event::Done {
                lane: self.index,
                run: m.run,
                task: m.task,
                result: Err(match &self.dead {
                    Some(report) => self.failure(report.clone()),
                    None => WorkerError::InvalidState(format!(
                        "{} ended a batch of runs without reporting this one",
                        self.describe
                    )),
                }),
                took: Duration::ZERO,
                trace: None,
                chip_tasks: None,
            })
            .collect();
        if !events.is_empty() {
            self.report(events);
        }
    }

    /// Applies `events` to the engine.
    fn report(&self, events: Vec<Event>) {
        crate::scheduler::apply(&self.engine, events);
    }

    /// Calls the endpoint unless it is dead; a death (or a panic) marks it dead and is
    /// applied to the engine.
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
        died(self.index, &self.describe, &report);
        self.dead = Some(report.clone());
        self.report(vec![Event::Died {
            lane: self.index,
            report: report.clone(),
        }]);
        Err(self.failure(report))
    }

    fn failure(&self, report: String) -> WorkerError {
        WorkerError::EndpointFailure {
            endpoint: self.describe.clone(),
            report,
        }
    }
}

/// Logs lane `index`'s endpoint's death.
fn died(index: usize, describe: &str, report: &str) {
    tracing::warn!(lane = index, endpoint = %describe, %report, "endpoint died");
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
