//! The parent's [`Endpoint`] for a chip in a child process (`chip_isolation = "process"`,
//! `docs/l3-worker.md` §5): each call is one request to the chip child, served by
//! `serve_chip_child` there. Registration sends the callable's code — shared-library images
//! only, as the bytes of a bundle; a run sends its tensors as [`WireTensor`]s over shared
//! memory (never their bytes); device memory calls and copies go over the mailbox, copies
//! bigger than [`INLINE_COPY`] through a temporary shared region.
//!
//! This module maps endpoint calls to messages; the process and the mailbox are `link`'s.

use std::time::Instant;

use simpler_device::DevicePtr;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{Bundle, BundleCode, BundleKernel, CallConfig, CallableSpec, CodeImage};

use crate::endpoint::{
    BatchRun, Callable, CallableKey, Endpoint, EndpointError, EndpointKind, KillSwitch, RunFacts,
};
use crate::memory::{HostMemory, SharedRegion};
use crate::process::link::Link;
use crate::process::wire::{
    ChipArg, Payload, Request, Response, Start, WireCallConfig, WireCallable, WireRun, WireTensor,
};
use crate::process::ChildProgram;
use crate::tensor::{Memory, TaskArg};
use crate::{owned_args, WorkerError};

/// Copies up to this many bytes travel inside the message; bigger ones through a temporary
/// shared region.
pub(crate) const INLINE_COPY: usize = 256 * 1024;

/// Most runs of one `RunBatch` request: one trip through the mailbox for them all, whose
/// answer stays well inside the response area.
pub(crate) const MAX_BATCH: usize = 8;

/// A chip served by a child process.
pub(crate) struct ChipProcess {
    index: usize,
    device_id: u32,
    link: Link,
    /// What the child sent back with the last run's result, until the lane takes it.
    last_run: RunFacts,
}

/// Starts chip `index`, labelled `device_id`, in a child process (see
/// [`crate::process::spawn_chip`]). The device id the child's Ready reports is its
/// device's own (0 for every sim device) and is not used.
pub(crate) fn start(
    index: usize,
    device_id: u32,
    config: &simpler_host::WorkerConfig,
    program: &ChildProgram,
    deadline: Instant,
) -> Result<ChipProcess, WorkerError> {
    let start = Start::Chip {
        index: index as u32,
        config: config.into(),
    };
    let name = format!("chip {index}");
    let (link, _ready) =
        Link::start(&name, "chip", index, program, start, deadline).map_err(|e| match e {
            WorkerError::Startup { reason, .. } => WorkerError::Startup {
                endpoint: format!("chip {index} (device {device_id})"),
                reason,
            },
            other => other,
        })?;
    Ok(ChipProcess {
        index,
        device_id,
        link,
        last_run: RunFacts::default(),
    })
}

/// The response `Ok`, or the child's error.
pub(crate) fn expect_ok(response: Response, what: &str) -> Result<(), EndpointError> {
    match response {
        Response::Ok => Ok(()),
        other => Err(unexpected(other, what)),
    }
}

/// The error for a response that is not the one `what` expects.
pub(crate) fn unexpected(response: Response, what: &str) -> EndpointError {
    match response {
        Response::Err(e) => EndpointError::Failed(e.into_worker()),
        other => EndpointError::Failed(WorkerError::InvalidState(format!(
            "the child answered {what} with {other:?}"
        ))),
    }
}

fn library(name: &str, part: &str, image: &CodeImage) -> Result<BundleCode, WorkerError> {
    match image {
        CodeImage::Library { bytes, entry } => Ok(BundleCode {
            entry: entry.clone(),
            image: bytes.clone(),
        }),
        CodeImage::Kernel(_) | CodeImage::Orchestration(_) => Err(WorkerError::InvalidArgument {
            arg: "callable".into(),
            reason: format!(
                "`{name}` has an in-process function as its {part}; process isolation \
                 (chip_isolation = process) needs a callable whose code is shared-library \
                 images: build it from C sources (simpler-toolchain) or read it from a bundle"
            ),
        }),
    }
}

/// The bundle of `spec`: its library images and signature.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] (`callable`) for code of in-process functions, or a
/// callable the bundle format refuses.
pub(crate) fn bundle_of(spec: &CallableSpec) -> Result<Bundle, WorkerError> {
    let name = &spec.name;
    let orchestration = library(name, "orchestration", &spec.orchestration)?;
    let kernels = spec
        .kernels
        .iter()
        .map(|k| {
            Ok(BundleKernel {
                func_id: k.func_id,
                core_type: k.core_type,
                name: k.display_name(),
                code: library(name, &format!("kernel func {}", k.func_id), &k.image)?,
            })
        })
        .collect::<Result<Vec<_>, WorkerError>>()?;
    let bundle = Bundle {
        name: name.clone(),
        signature: spec.signature.clone(),
        orchestration,
        kernels,
        runtime: spec.runtime,
    };
    bundle
        .validate()
        .map_err(|e| WorkerError::InvalidArgument {
            arg: "callable".into(),
            reason: format!("`{name}` cannot cross to a chip process: {e}"),
        })?;
    Ok(bundle)
}

/// `args` as a chip child receives them.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `args[i]`: what `owned_args` refuses, or host
/// memory a child process cannot see.
pub(crate) fn chip_args(chip: usize, args: &[TaskArg]) -> Result<Vec<ChipArg>, WorkerError> {
    owned_args(chip, args)?;
    args.iter()
        .enumerate()
        .map(|(i, arg)| {
            let (tensor, tag) = match arg {
                TaskArg::Scalar(v) => return Ok(ChipArg::Scalar(*v)),
                TaskArg::Tensor(t, tag) => (t, *tag),
            };
            match tensor.memory() {
                Memory::Host(m) => Ok(ChipArg::Host(wire_tensor(i, m.as_ref(), tensor, tag)?)),
                Memory::Child(c) => Ok(ChipArg::Device {
                    ptr: c.ptr.addr(),
                    nbytes: c.nbytes,
                    byte_offset: tensor.byte_offset(),
                    shape: tensor.shape().to_vec(),
                    strides: tensor.strides().to_vec(),
                    dtype: tensor.dtype(),
                    tag,
                }),
            }
        })
        .collect()
}

/// `tensor` over host memory `memory` as a child receives it.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `args[i]` when the memory is private to this
/// process.
pub(crate) fn wire_tensor(
    i: usize,
    memory: &dyn HostMemory,
    tensor: &crate::Tensor,
    tag: crate::Tag,
) -> Result<WireTensor, WorkerError> {
    let shared = memory
        .shared()
        .ok_or_else(|| WorkerError::InvalidArgument {
            arg: format!("args[{i}]"),
            reason: "its host memory is private to this process, so a child process cannot see \
                 it; use shared memory: a create_buffer buffer or an orch.alloc tensor (or a \
                 view of one)"
                .into(),
        })?;
    Ok(WireTensor {
        shared,
        byte_offset: tensor.byte_offset(),
        shape: tensor.shape().to_vec(),
        strides: tensor.strides().to_vec(),
        dtype: tensor.dtype(),
        tag,
    })
}

fn staging(len: usize, what: &str) -> Result<SharedRegion, EndpointError> {
    SharedRegion::new(len as u64, what).map_err(|e| {
        EndpointError::Failed(WorkerError::InvalidState(format!(
            "cannot make a {len}-byte staging region for the copy: {e}"
        )))
    })
}

/// What a child's `Ran` says: the task count and the trace, decoded (a trace that does not
/// decode is lost, never the run's result).
fn ran_facts(tasks: u64, trace: Option<Vec<u8>>) -> RunFacts {
    RunFacts {
        tasks: Some(tasks),
        trace: trace.and_then(|json| serde_json::from_slice(&json).ok().map(Box::new)),
    }
}

impl ChipProcess {
    /// Sends untraced `runs` (the batch's runs from `first` on) as one `RunBatch` and
    /// reports each; false when the child died (nothing more is sent).
    fn run_chunk(
        &mut self,
        first: usize,
        runs: &[BatchRun<'_>],
        done: &mut dyn FnMut(usize, Result<RunFacts, EndpointError>),
    ) -> bool {
        // A run whose arguments cannot cross fails here, alone; the others go.
        let mut outcomes: Vec<Option<Result<RunFacts, EndpointError>>> = Vec::new();
        let mut wire = Vec::new();
        for r in runs {
            match chip_args(self.index, r.args) {
                Ok(args) => {
                    wire.push(WireRun {
                        key: r.key,
                        args,
                        config: WireCallConfig::from(r.config),
                    });
                    outcomes.push(None);
                }
                Err(e) => outcomes.push(Some(Err(EndpointError::Failed(e)))),
            }
        }
        let sent = wire.len();
        let mut answers: Vec<Result<RunFacts, EndpointError>> = Vec::with_capacity(sent);
        if sent > 0 {
            match self.link.call(&Request::RunBatch { runs: wire }) {
                Ok(Response::RanBatch(each)) if each.len() == sent => {
                    answers.extend(each.into_iter().map(|r| match r {
                        Response::Ran { tasks, trace } => Ok(ran_facts(tasks, trace)),
                        other => Err(unexpected(other, "run")),
                    }));
                }
                Ok(other) => {
                    let text = format!("{other:?}");
                    answers.extend((0..sent).map(|_| {
                        Err(EndpointError::Failed(WorkerError::InvalidState(format!(
                            "the child answered a batch of {sent} runs with {text}"
                        ))))
                    }));
                }
                Err(died) => {
                    // Reported for the first run sent; the lane fails the rest with it.
                    let at = outcomes
                        .iter()
                        .position(Option::is_none)
                        .expect("one was sent");
                    for (i, o) in outcomes.into_iter().enumerate().take(at) {
                        done(first + i, o.expect("failed here"));
                    }
                    done(first + at, Err(died));
                    return false;
                }
            }
        }
        let mut answers = answers.into_iter();
        for (i, o) in outcomes.into_iter().enumerate() {
            let outcome = o.unwrap_or_else(|| answers.next().expect("one answer each"));
            done(first + i, outcome);
        }
        true
    }
}

impl Endpoint for ChipProcess {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Chip
    }

    fn describe(&self) -> String {
        format!(
            "chip {} (device {}, pid {})",
            self.index,
            self.device_id,
            self.link.pid()
        )
    }

    fn pid(&self) -> Option<u32> {
        Some(self.link.pid())
    }

    fn kill_switch(&self) -> Option<KillSwitch> {
        Some(self.link.kill_switch())
    }

    fn register(&mut self, key: CallableKey, callable: &Callable) -> Result<(), EndpointError> {
        let spec = match callable {
            Callable::Chip(spec) => spec,
            other => {
                return Err(EndpointError::Failed(WorkerError::InvalidArgument {
                    arg: "callable".into(),
                    reason: format!(
                        "`{}` is a sub callable; chips run chip callables",
                        other.name()
                    ),
                }))
            }
        };
        let bundle = bundle_of(spec)?;
        let request = Request::Register {
            key,
            callable: WireCallable::Chip {
                name: spec.name.clone(),
                bundle: bundle.to_bytes(),
            },
        };
        expect_ok(self.link.call(&request)?, "register")
    }

    fn unregister(&mut self, key: CallableKey) -> Result<(), EndpointError> {
        expect_ok(self.link.call(&Request::Unregister { key })?, "unregister")
    }

    fn run(
        &mut self,
        key: CallableKey,
        args: &[TaskArg],
        config: &CallConfig,
    ) -> Result<(), EndpointError> {
        let request = Request::Run {
            key,
            args: chip_args(self.index, args)?,
            config: WireCallConfig::from(config),
        };
        match self.link.call(&request)? {
            // A trace that does not decode is lost, never the run's result.
            Response::Ran { tasks, trace } => {
                self.last_run = ran_facts(tasks, trace);
                Ok(())
            }
            other => Err(unexpected(other, "run")),
        }
    }

    /// Untraced runs cross in `RunBatch` requests of up to [`MAX_BATCH`] (one mailbox trip
    /// each, pipelined on the chip there); a traced run crosses alone (its trace may need
    /// the whole response area).
    fn run_batch(
        &mut self,
        runs: &[BatchRun<'_>],
        done: &mut dyn FnMut(usize, Result<RunFacts, EndpointError>),
    ) {
        let mut at = 0;
        while at < runs.len() {
            if runs[at].config.trace_level != TraceLevel::Off {
                let r = runs[at];
                let outcome = self
                    .run(r.key, r.args, r.config)
                    .map(|()| self.take_run_facts());
                let died = matches!(outcome, Err(EndpointError::Died { .. }));
                done(at, outcome);
                if died {
                    return;
                }
                at += 1;
                continue;
            }
            let end = (at..runs.len())
                .take(MAX_BATCH)
                .find(|&i| runs[i].config.trace_level != TraceLevel::Off)
                .unwrap_or(runs.len().min(at + MAX_BATCH));
            if !self.run_chunk(at, &runs[at..end], done) {
                return;
            }
            at = end;
        }
    }

    fn take_run_facts(&mut self) -> RunFacts {
        std::mem::take(&mut self.last_run)
    }

    fn malloc(&mut self, nbytes: u64) -> Result<DevicePtr, EndpointError> {
        match self.link.call(&Request::Malloc { nbytes })? {
            Response::Ptr(p) => Ok(DevicePtr::from_raw(p)),
            other => Err(unexpected(other, "malloc")),
        }
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), EndpointError> {
        expect_ok(self.link.call(&Request::Free { ptr: ptr.addr() })?, "free")
    }

    fn map_window(
        &mut self,
        region: &std::sync::Arc<crate::memory::SharedRegion>,
    ) -> Result<DevicePtr, EndpointError> {
        let shared = region.share(0, region.len() as u64);
        match self.link.call(&Request::MapWindow { shared })? {
            Response::Ptr(p) => Ok(DevicePtr::from_raw(p)),
            other => Err(unexpected(other, "map_window")),
        }
    }

    fn unmap_window(&mut self, base: DevicePtr) -> Result<(), EndpointError> {
        let request = Request::UnmapWindow { ptr: base.addr() };
        expect_ok(self.link.call(&request)?, "unmap_window")
    }

    fn copy_to(&mut self, dst: DevicePtr, src: &[u8]) -> Result<(), EndpointError> {
        let mut _staged = None;
        let data = if src.len() <= INLINE_COPY {
            Payload::Inline(src.to_vec())
        } else {
            let region = staging(src.len(), "copy-to")?;
            // SAFETY: the fresh region holds `src.len()` writable bytes nobody else uses yet.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), region.as_ptr(), src.len()) };
            let named = region.share(0, src.len() as u64);
            _staged = Some(region);
            Payload::Staged(named)
        };
        let request = Request::CopyTo {
            dst: dst.addr(),
            data,
        };
        expect_ok(self.link.call(&request)?, "copy_to")
    }

    fn copy_from(&mut self, dst: &mut [u8], src: DevicePtr) -> Result<(), EndpointError> {
        let nbytes = dst.len() as u64;
        if dst.len() <= INLINE_COPY {
            let request = Request::CopyFrom {
                src: src.addr(),
                nbytes,
                into: None,
            };
            return match self.link.call(&request)? {
                Response::Data(bytes) if bytes.len() == dst.len() => {
                    dst.copy_from_slice(&bytes);
                    Ok(())
                }
                other => Err(unexpected(other, "copy_from")),
            };
        }
        let region = staging(dst.len(), "copy-from")?;
        let request = Request::CopyFrom {
            src: src.addr(),
            nbytes,
            into: Some(region.share(0, nbytes)),
        };
        expect_ok(self.link.call(&request)?, "copy_from")?;
        // SAFETY: the region holds `dst.len()` bytes, written by the child before its
        // response; nobody touches them now.
        let bytes = unsafe { std::slice::from_raw_parts(region.as_ptr(), dst.len()) };
        dst.copy_from_slice(bytes);
        Ok(())
    }

    fn shutdown(&mut self) -> Result<(), EndpointError> {
        self.link.shutdown()
    }
}
