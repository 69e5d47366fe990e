//! The chip child's whole life: [`serve_chip_child`] connects to the parent, brings up a
//! [`ChipWorker`] from the configuration the parent sent, reports READY (or FAILED with the
//! chip's error), then serves requests until Shutdown or the parent's end
//! (`docs/l3-worker.md` §5).
//!
//! A run's host tensors are this child's mappings of the parent's shared memory, lent to the
//! chip in place by `owned_args`: the chip reads its inputs from, and writes its outputs
//! to, the parent's own pages. This module only serves; the mailbox is `child`'s.

use std::collections::HashMap;
use std::process::ExitCode;

use simpler_device::DevicePtr;
use simpler_host::{Bundle, CallableId, ChipWorker};

use crate::memory::{HostMemory, SharedRegion};
use crate::process::child::{Connection, RegionCache};
use crate::process::mailbox::{ChildState, AREA_LEN};
use crate::process::wire::{
    encode, ChipArg, Payload, Request, Response, Start, WireCallable, WireRun,
};
use crate::process::wire_error::{WireError, WireHost};
use crate::tensor::{ChildAllocation, Memory, TaskArg, Tensor};
use crate::{owned_args, CallableKey, WorkerError};

/// The main of a chip child process: everything it needs comes from the environment and
/// the mailbox its parent set up (`docs/l3-worker.md` §5). Returns success after a
/// Shutdown request; 1 when the chip could not be brought up (the parent has the error);
/// 2 when this process was not started as a chip child or its mailbox broke (the reason is
/// on stderr). A child whose parent dies exits at once with
/// [`EXIT_PARENT_GONE`](crate::process::EXIT_PARENT_GONE).
pub fn serve_chip_child() -> ExitCode {
    ExitCode::from(serve_chip_child_status())
}

/// [`serve_chip_child`] returning the exit status as a number, for a binding's child
/// program that exits through its own runtime (Python's `sys.exit(status)`).
pub fn serve_chip_child_status() -> u8 {
    let mut conn = match Connection::connect() {
        Ok(conn) => conn,
        Err(e) => {
            eprintln!("simpler chip child: {e}");
            return 2;
        }
    };
    if conn.role() != "chip" {
        eprintln!(
            "simpler chip child: started as a `{}` child; this program serves chips",
            conn.role()
        );
        return 2;
    }
    // This process is the chip's isolation: its crash reports say so.
    simpler_device::crash::set_isolated_child();
    let (index, config) = match conn.next() {
        Ok(Request::Start(Start::Chip { index, config })) => (index as usize, config),
        Ok(other) => {
            let text = format!("expected a chip start request, got {other:?}");
            conn.set_state(ChildState::Failed);
            conn.respond(&Response::Err(WireError::InvalidState(text)));
            return 2;
        }
        Err(e) => {
            eprintln!("simpler chip child: {e}");
            return 2;
        }
    };
    let worker = config
        .to_config()
        .map_err(WireError::InvalidState)
        .and_then(|c| ChipWorker::new(c).map_err(|e| WireError::Host(WireHost::from(&e))));
    let worker = match worker {
        Ok(worker) => worker,
        Err(e) => {
            conn.set_state(ChildState::Failed);
            conn.respond(&Response::Err(e));
            return 1;
        }
    };
    conn.set_state(ChildState::Ready);
    conn.respond(&Response::Ready {
        device_id: Some(worker.device().device_id()),
        pid: std::process::id(),
    });
    let mut server = ChipServer {
        depth: worker.config().launch_depth.max(1) as usize,
        worker,
        index,
        callables: HashMap::new(),
        windows: HashMap::new(),
    };
    loop {
        let request = match conn.next() {
            Ok(request) => request,
            Err(e) => {
                eprintln!("simpler chip child {index}: {e}");
                return 2;
            }
        };
        if request == Request::Shutdown {
            conn.set_state(ChildState::Exiting);
            let closed = match server.worker.close() {
                Ok(()) => Response::Ok,
                Err(e) => Response::Err(WireError::Host(WireHost::from(&e))),
            };
            conn.respond(&closed);
            return 0;
        }
        let response = match server.serve(request, conn.regions()) {
            Ok(response) => response,
            Err(e) => Response::Err(WireError::from_worker(&e)),
        };
        conn.respond(&response);
    }
}

/// The response to a chip run that succeeded: `Ran` with its task count and its trace. A
/// trace that does not fit the response area is left out with a warning on stderr (the
/// parent forwards it): a trace never changes a run's verdict (`docs/tracing.md` §2).
fn ran(tasks: u64, trace: Option<&simpler_host::trace_model::Trace>) -> Response {
    let json = trace.and_then(|t| serde_json::to_vec(t).ok());
    let response = Response::Ran { tasks, trace: json };
    let len = encode(&response).len();
    if len <= AREA_LEN {
        return response;
    }
    eprintln!(
        "simpler chip child: warning: the run's trace ({len} bytes) does not fit the mailbox's \
         {AREA_LEN}-byte response area; the run's result goes back without it"
    );
    Response::Ran { tasks, trace: None }
}

/// The answer to a `RunBatch` of `responses`, kept inside the response area: traces go
/// first (a trace never changes a run's verdict, `docs/tracing.md` §2), then each error
/// that still does not fit its share of the area crosses as its text, cut to that share
/// (`docs/l3-worker.md` §5).
fn fit_batch(mut responses: Vec<Response>) -> Response {
    let fits = |r: &[Response]| encode(&Response::RanBatch(r.to_vec())).len() <= AREA_LEN;
    if fits(&responses) {
        return Response::RanBatch(responses);
    }
    let mut dropped = 0;
    for r in responses.iter_mut() {
        if let Response::Ran { trace, .. } = r {
            dropped += usize::from(trace.take().is_some());
        }
    }
    if dropped > 0 {
        eprintln!(
            "simpler chip child: warning: a batch of runs does not fit the mailbox's \
             {AREA_LEN}-byte response area with its traces; the results go back without \
             {dropped} trace(s)"
        );
    }
    let share = AREA_LEN / (2 * responses.len().max(1));
    if !fits(&responses) {
        for r in responses.iter_mut() {
            if let Response::Err(e) = r {
                if encode(&*e).len() > share {
                    let text = e.clone().into_worker().to_string();
                    *e = WireError::InvalidState(crate::process::wire_error::cut(text, share));
                }
            }
        }
    }
    Response::RanBatch(responses)
}

/// A chip and the callables registered on it, by the engine's keys.
struct ChipServer {
    worker: ChipWorker,
    /// Runs of a batch in flight at once: the chip's launch depth.
    depth: usize,
    index: usize,
    callables: HashMap<CallableKey, CallableId>,
    /// Comm windows mapped for the parent (`Request::MapWindow`), by base address: a
    /// mapping of their own, never evicted, kept until `UnmapWindow`.
    windows: HashMap<u64, SharedRegion>,
}

impl ChipServer {
    fn serve(
        &mut self,
        request: Request,
        regions: &mut RegionCache,
    ) -> Result<Response, WorkerError> {
        match request {
            Request::Register { key, callable } => self.register(key, callable),
            Request::Unregister { key } => {
                let id = self.id(key)?;
                self.worker.unregister(id)?;
                self.callables.remove(&key);
                Ok(Response::Ok)
            }
            Request::Run { key, args, config } => {
                let started = self.start_run(WireRun { key, args, config }, regions)?;
                ChipServer::finish_run(started)
            }
            Request::RunBatch { runs } => Ok(self.run_batch(runs, regions)),
            Request::Malloc { nbytes } => Ok(Response::Ptr(self.worker.malloc(nbytes)?.addr())),
            Request::Free { ptr } => {
                self.worker.free(DevicePtr::from_raw(ptr))?;
                Ok(Response::Ok)
            }
            Request::CopyTo { dst, data } => {
                let dst = DevicePtr::from_raw(dst);
                match data {
                    Payload::Inline(bytes) => self.worker.copy_to(dst, &bytes)?,
                    Payload::Staged(r) => {
                        let staged = map_staged(regions, &r)?;
                        // SAFETY: `map_staged` checked `offset + len` lies inside the
                        // mapping; the parent leaves the bytes alone until the response.
                        let src = unsafe {
                            std::slice::from_raw_parts(
                                staged.as_ptr().add(r.offset as usize),
                                r.len as usize,
                            )
                        };
                        self.worker.copy_to(dst, src)?;
                    }
                }
                Ok(Response::Ok)
            }
            Request::CopyFrom { src, nbytes, into } => {
                let src = DevicePtr::from_raw(src);
                match into {
                    None => {
                        let mut bytes = vec![0u8; nbytes as usize];
                        self.worker.copy_from(&mut bytes, src)?;
                        Ok(Response::Data(bytes))
                    }
                    Some(r) => {
                        let staged = map_staged(regions, &r)?;
                        // SAFETY: as for CopyTo; the parent reads the bytes only after the
                        // response, so this child is their only user meanwhile.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                staged.as_ptr().add(r.offset as usize),
                                r.len.min(nbytes) as usize,
                            )
                        };
                        self.worker.copy_from(dst, src)?;
                        Ok(Response::Ok)
                    }
                }
            }
            Request::MapWindow { shared } => {
                let region =
                    regions
                        .map_once(&shared)
                        .map_err(|reason| WorkerError::InvalidArgument {
                            arg: "window".into(),
                            reason,
                        })?;
                // SAFETY: `windows` keeps the mapping until the chip released the window.
                let base = unsafe {
                    self.worker
                        .import_window(region.as_ptr(), region.len() as u64)?
                };
                self.windows.insert(base.addr(), region);
                Ok(Response::Ptr(base.addr()))
            }
            Request::UnmapWindow { ptr } => {
                self.worker.release_window(DevicePtr::from_raw(ptr))?;
                self.windows.remove(&ptr);
                Ok(Response::Ok)
            }
            Request::Start(_) => Err(WorkerError::InvalidState(format!(
                "chip {} is started already",
                self.index
            ))),
            Request::RunSub { .. } => Err(WorkerError::InvalidState(format!(
                "chip {} runs chip callables, not sub callables",
                self.index
            ))),
            Request::Shutdown => unreachable!("served by the loop"),
        }
    }

    /// Submits `run` to the chip (it goes on without this thread): its tensors (kept with
    /// the handle: the chip reads and writes their mappings in place) and its handle.
    fn start_run(
        &self,
        run: WireRun,
        regions: &mut RegionCache,
    ) -> Result<(Vec<TaskArg>, simpler_host::RunHandle), WorkerError> {
        let id = self.id(run.key)?;
        let args = run
            .args
            .into_iter()
            .enumerate()
            .map(|(i, a)| self.task_arg(i, a, regions))
            .collect::<Result<Vec<_>, _>>()?;
        let owned = owned_args(self.index, &args)?;
        let handle = self.worker.submit_with(id, owned, &run.config.into())?;
        Ok((args, handle))
    }

    /// Waits for a started run and answers `Ran`: the task count, and a traced run's
    /// trace, go back with the result (`docs/tracing.md`).
    fn finish_run(
        (args, handle): (Vec<TaskArg>, simpler_host::RunHandle),
    ) -> Result<Response, WorkerError> {
        let out = handle.result()?;
        drop(args);
        Ok(ran(
            out.report.tasks,
            out.report.trace.as_deref().map(|t| t.model()),
        ))
    }

    /// Serves a `RunBatch`: the runs pipelined on the chip (up to its launch depth submitted
    /// before the oldest is waited for), one response per run, in order; a run that fails
    /// fails alone. The answer is kept inside the response area ([`fit_batch`]).
    fn run_batch(&self, runs: Vec<WireRun>, regions: &mut RegionCache) -> Response {
        let n = runs.len();
        let mut out = Vec::with_capacity(n);
        let mut pending = std::collections::VecDeque::with_capacity(self.depth);
        let answer = |started: Result<_, WorkerError>| {
            started
                .and_then(ChipServer::finish_run)
                .unwrap_or_else(|e| Response::Err(WireError::from_worker(&e)))
        };
        for run in runs {
            if pending.len() == self.depth {
                out.push(answer(pending.pop_front().expect("a full pipeline")));
            }
            pending.push_back(self.start_run(run, regions));
        }
        out.extend(pending.into_iter().map(answer));
        fit_batch(out)
    }

    fn register(
        &mut self,
        key: CallableKey,
        callable: WireCallable,
    ) -> Result<Response, WorkerError> {
        let (name, bundle) = match callable {
            WireCallable::Chip { name, bundle } => (name, bundle),
            WireCallable::Sub { name, .. } => {
                return Err(WorkerError::InvalidState(format!(
                    "chip {} runs chip callables; `{name}` is a sub callable",
                    self.index
                )))
            }
        };
        if self.callables.contains_key(&key) {
            return Err(WorkerError::InvalidState(format!(
                "chip {}: callable key {key} is registered already",
                self.index
            )));
        }
        let spec = Bundle::from_bytes(&bundle)
            .map_err(|e| simpler_host::HostError::InvalidCallable {
                name: name.clone(),
                reason: format!("its code did not survive the crossing to the chip process: {e}"),
            })?
            .into_spec();
        let id = self.worker.register(&spec)?;
        self.callables.insert(key, id);
        Ok(Response::Ok)
    }

    fn id(&self, key: CallableKey) -> Result<CallableId, WorkerError> {
        self.callables.get(&key).copied().ok_or_else(|| {
            WorkerError::InvalidState(format!(
                "chip {} has no callable under key {key}",
                self.index
            ))
        })
    }

    fn task_arg(
        &self,
        i: usize,
        arg: ChipArg,
        regions: &mut RegionCache,
    ) -> Result<TaskArg, WorkerError> {
        match arg {
            ChipArg::Scalar(v) => Ok(TaskArg::Scalar(v)),
            ChipArg::Host(t) => Ok(TaskArg::Tensor(
                regions.tensor(&format!("args[{i}]"), &t)?,
                t.tag,
            )),
            ChipArg::Device {
                ptr,
                nbytes,
                byte_offset,
                shape,
                strides,
                dtype,
                tag,
            } => {
                let memory = Memory::Child(ChildAllocation {
                    worker: self.index,
                    ptr: DevicePtr::from_raw(ptr),
                    nbytes,
                    generation: 0,
                });
                let tensor = Tensor::view(memory, byte_offset, &shape, &strides, dtype).map_err(
                    |e| match e {
                        WorkerError::InvalidArgument { reason, .. } => {
                            WorkerError::InvalidArgument {
                                arg: format!("args[{i}]"),
                                reason,
                            }
                        }
                        other => other,
                    },
                )?;
                Ok(TaskArg::Tensor(tensor, tag))
            }
        }
    }
}

/// A temporary region the parent named in a request (not cached: it lives for one
/// request), checked to hold the named span.
fn map_staged(
    regions: &RegionCache,
    r: &crate::memory::SharedRef,
) -> Result<SharedRegion, WorkerError> {
    regions
        .map_once(r)
        .map_err(|reason| WorkerError::InvalidArgument {
            arg: "data".into(),
            reason,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::wire::decode;
    use simpler_host::trace_model::{ProcessTrace, Trace};

    fn trace_named(name: String) -> Trace {
        Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name,
                clock: Default::default(),
                runs: Vec::new(),
                host_spans: Vec::new(),
            }],
        }
    }

    #[test]
    fn a_run_answers_its_tasks_and_a_trace_that_fits() {
        let trace = trace_named("chip 0 (device 0)".into());
        let response = ran(7, Some(&trace));
        let back: Response = decode(&encode(&response), "response").unwrap();
        let Response::Ran {
            tasks,
            trace: Some(json),
        } = back
        else {
            panic!("{back:?}")
        };
        assert_eq!(tasks, 7);
        assert_eq!(serde_json::from_slice::<Trace>(&json).unwrap(), trace);
        assert_eq!(
            ran(3, None),
            Response::Ran {
                tasks: 3,
                trace: None
            }
        );
    }

    #[test]
    fn a_batch_answer_stays_inside_the_response_area_traces_first_then_error_texts() {
        let fits = |r: &Response| encode(r).len() <= AREA_LEN;
        // Small: as it is.
        let small = vec![
            ran(1, None),
            Response::Err(WireError::InvalidState("no".into())),
        ];
        assert_eq!(fit_batch(small.clone()), Response::RanBatch(small));
        // Traces that do not fit together go; the results stay.
        let trace = trace_named("t".repeat(AREA_LEN / 3));
        let traced = vec![
            ran(1, Some(&trace)),
            ran(2, Some(&trace)),
            ran(3, Some(&trace)),
        ];
        let answer = fit_batch(traced);
        assert!(fits(&answer));
        let Response::RanBatch(each) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!(
            each,
            (1..=3)
                .map(|tasks| Response::Ran { tasks, trace: None })
                .collect::<Vec<_>>()
        );
        // Errors too big for their share are cut to their text; small ones keep their type.
        let big = |i: usize| {
            Response::Err(WireError::InvalidArgument {
                arg: format!("args[{i}]"),
                reason: format!("HEAD{}TAIL", "r".repeat(60_000)),
            })
        };
        let mut errors: Vec<Response> = (0..30).map(big).collect();
        errors.push(Response::Err(WireError::InvalidState("kept".into())));
        let answer = fit_batch(errors);
        assert!(fits(&answer), "{}", encode(&answer).len());
        let Response::RanBatch(each) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!(each.len(), 31);
        for (i, r) in each[..30].iter().enumerate() {
            let Response::Err(WireError::InvalidState(text)) = r else {
                panic!("{r:?}")
            };
            assert!(
                text.contains(&format!("args[{i}]")) && text.ends_with("TAIL"),
                "{text}"
            );
        }
        assert_eq!(
            each[30],
            Response::Err(WireError::InvalidState("kept".into()))
        );
    }

    #[test]
    fn a_trace_too_big_for_the_response_area_is_left_out_not_the_result() {
        let trace = trace_named("x".repeat(AREA_LEN));
        assert_eq!(
            ran(5, Some(&trace)),
            Response::Ran {
                tasks: 5,
                trace: None
            }
        );
    }
}
