//! Collectives over a comm domain for Rust users: allreduce (sum), allgather and
//! reduce-scatter of f32 or i32 vectors, one rank per chip (`docs/comm.md` §4). This module
//! owns building and registering the collective chip callable on a level-3 [`Worker`], the
//! domain a collective runs on ([`CollectiveDomain`]: its `scratch` and `signal` buffers and
//! its round count), the argument rules every collective is checked against before anything
//! is submitted, and the submission of each collective as one group task
//! ([`Orchestrator::submit_next_level_group`]).
//!
//! The chip code is not here: it is the C kernel and orchestration of the Python package,
//! [`SOURCE_DIR`]`/`[`KERNEL_SOURCE`] and [`SOURCE_DIR`]`/`[`ORCHESTRATION_SOURCE`], compiled
//! with the caller's [`Compiler`]; their argument layout and op codes are declared for C
//! users in `include/simpler/collectives.h`. The argument rules live here once
//! ([`check_dtype`], [`check_count`], [`check_timeout`] / [`check_timeout_secs`],
//! [`check_sizes`] / [`check_shapes`], [`domain_layout`], [`rename`]); Python's
//! `simpler.collectives` calls them through its native module.
//!
//! ```no_run
//! # use simpler_worker::{collectives::*, *};
//! # fn demo(w: &Worker, compiler: &simpler_toolchain::build::Compiler,
//! #         x: Vec<Tensor>, y: Vec<Tensor>) -> Result<(), CollectivesError> {
//! let coll = Collectives::new(w, compiler)?; // before or after w.init()
//! w.run(|o| {
//!     let dom = coll.allocate_domain(o, "ar", &[0, 1], 1024, simpler_abi::DataType::Float32)?;
//!     coll.allreduce(o, &dom, &x, &y, &CollectiveOptions::default())?;
//!     Ok(())
//! })?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use simpler_abi::{CoreType, DataType};
use simpler_host::{
    ArgDirection, ArgSpec, CallConfig, CallableSpec, CodeImage, KernelSpec, Signature,
};
use simpler_toolchain::build::{CompileError, Compiler, Target};

use crate::comm::{CommBufferSpec, CommDomain};
use crate::endpoint::Callable;
use crate::tensor::{Tag, TaskArgs, Tensor};
use crate::tensormap::TaskId;
use crate::{CallableHandle, Orchestrator, Worker, WorkerError};

/// The folder holding the collectives' chip code (the Python package's
/// `python/simpler/collectives/`), as it was when this crate was compiled.
pub const SOURCE_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../python/simpler/collectives"
);

/// The AIV kernel's source, relative to [`SOURCE_DIR`].
pub const KERNEL_SOURCE: &str = "kernels/collective.c";

/// The orchestration's source, relative to [`SOURCE_DIR`].
pub const ORCHESTRATION_SOURCE: &str = "orchestration.c";

/// The entry symbol of the kernel.
pub const KERNEL_ENTRY: &str = "kernel_entry";

/// The entry symbol of the orchestration.
pub const ORCHESTRATION_ENTRY: &str = "aicpu_orchestration_entry";

/// int32 words of each rank's `signal` buffer (64 bytes).
pub const SIGNAL_WORDS: u64 = 16;

/// The element types collectives support.
pub const DTYPES: [DataType; 2] = [DataType::Float32, DataType::Int32];

/// The longest wait a collective may ask for: below the chip's default op-execute timeout
/// (45 s), which would otherwise end a rank's kernel first and leave its chip unusable.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(40);

/// The wait limit of a collective when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which collective: its discriminant is the `op` scalar the chip code takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Op {
    /// `outputs[r] = Σ_p inputs[p]`: `count` elements in and out.
    AllReduce = 0,
    /// `outputs[r][p·count ..][..count] = inputs[p]`: `count` in, `n·count` out.
    AllGather = 1,
    /// `outputs[r] = Σ_p inputs[p][r·count ..][..count]`: `n·count` in, `count` out.
    ReduceScatter = 2,
}

impl Op {
    /// Every collective, in `op` code order.
    pub const ALL: [Op; 3] = [Op::AllReduce, Op::AllGather, Op::ReduceScatter];

    /// The collective of the chip code's `op` scalar; `None` for an unknown code.
    pub fn from_code(code: u64) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.code() == code)
    }

    /// The `op` scalar of the chip code.
    pub fn code(self) -> u64 {
        self as u64
    }

    /// `allreduce`, `allgather` or `reduce_scatter`.
    pub fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "allreduce",
            Op::AllGather => "allgather",
            Op::ReduceScatter => "reduce_scatter",
        }
    }
}

/// Why the collectives could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CollectivesError {
    /// A chip source did not compile; `source` names it.
    #[error("collectives: compiling `{}`: {error}", path.display())]
    Compile {
        /// The source file.
        path: PathBuf,
        /// The compiler's error.
        error: CompileError,
    },
    /// Registering the callable, or a collective, failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
}

/// Per-call options of a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectiveOptions {
    /// The limit of each of the kernel's waits, in (0, [`MAX_TIMEOUT`]]; a rank that waits
    /// longer for a peer fails the task with `SIMPLER_COMM_WAIT_TIMEOUT` (120).
    pub timeout: Duration,
    /// The chips' run options.
    pub config: CallConfig,
}

impl Default for CollectiveOptions {
    fn default() -> CollectiveOptions {
        CollectiveOptions {
            timeout: DEFAULT_TIMEOUT,
            config: CallConfig::default(),
        }
    }
}

fn bad(arg: impl Into<String>, reason: impl Into<String>) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason: reason.into(),
    }
}

/// `dtype` if collectives support it.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `dtype` for any type but f32 and i32.
pub fn check_dtype(dtype: DataType) -> Result<DataType, WorkerError> {
    if DTYPES.contains(&dtype) {
        Ok(dtype)
    } else {
        Err(bad(
            "dtype",
            format!("collectives support f32 and i32, not {dtype}"),
        ))
    }
}

/// `count` (elements per rank of a domain) if it is at least 1.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `count` for 0.
pub fn check_count(count: u64) -> Result<u64, WorkerError> {
    if count == 0 {
        Err(bad("count", "must be >= 1 (elements per rank), got 0"))
    } else {
        Ok(count)
    }
}

/// The `timeout_us` scalar of a wait limit in (0, [`MAX_TIMEOUT`]] (at least 1 µs).
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `timeout` for zero or more than [`MAX_TIMEOUT`].
pub fn check_timeout(timeout: Duration) -> Result<u64, WorkerError> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(timeout_error(format_args!("{timeout:?}")));
    }
    Ok(timeout_us(timeout))
}

/// The `timeout_us` scalar of a wait limit of `seconds` in (0, [`MAX_TIMEOUT`]] (at least
/// 1 µs), for callers that hold seconds as a float.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `timeout` for zero, a negative number, more than
/// [`MAX_TIMEOUT`], an infinity or NaN.
pub fn check_timeout_secs(seconds: f64) -> Result<u64, WorkerError> {
    // +inf is above the maximum.
    if seconds.is_nan() || seconds <= 0.0 || seconds > MAX_TIMEOUT.as_secs_f64() {
        return Err(timeout_error(format_args!("{seconds} s")));
    }
    Ok(timeout_us(Duration::from_secs_f64(seconds)))
}

fn timeout_us(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn timeout_error(got: std::fmt::Arguments<'_>) -> WorkerError {
    bad(
        "timeout",
        format!(
            "must be a number of seconds in (0, {}], got {got}",
            MAX_TIMEOUT.as_secs()
        ),
    )
}

/// The sizes of a collectives domain over `n` chips for up to `count` elements per rank of
/// `dtype` (as [`Collectives::allocate_domain`] makes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainLayout {
    /// Elements of `dtype` in each rank's `scratch` buffer: `max(n, 1) · count`.
    pub scratch: u64,
    /// Bytes of each rank's window: `scratch` rounded up to 64 bytes, plus 128 bytes (the
    /// `signal` buffer, [`SIGNAL_WORDS`] i32, and its alignment).
    pub window: u64,
}

/// The layout of a collectives domain over `n` chips for up to `count` elements per rank of
/// `dtype`.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `count` (0, or too large for a window) or
/// `dtype` (see [`check_dtype`]).
pub fn domain_layout(n: usize, count: u64, dtype: DataType) -> Result<DomainLayout, WorkerError> {
    let count = check_count(count)?;
    let dtype = check_dtype(dtype)?;
    let n = n.max(1) as u64;
    let too_large = || {
        bad(
            "count",
            format!("{count} elements per rank do not fit a window"),
        )
    };
    let scratch = n.checked_mul(count).ok_or_else(too_large)?;
    let window = scratch
        .checked_mul(dtype.size_bytes() as u64)
        .and_then(|b| b.checked_next_multiple_of(64))
        .and_then(|b| b.checked_add(128))
        .ok_or_else(too_large)?;
    Ok(DomainLayout { scratch, window })
}

/// Checks one collective's tensors over `n` ranks on a domain of `dtype` with `scratch`
/// elements of scratch per rank (see [`check_shapes`], which this applies to each tensor's
/// dtype and shape).
///
/// # Errors
/// As [`check_shapes`].
pub fn check_sizes(
    op: Op,
    inputs: &[Tensor],
    outputs: &[Tensor],
    dtype: DataType,
    scratch: u64,
    n: usize,
) -> Result<(), WorkerError> {
    fn described(ts: &[Tensor]) -> Vec<(DataType, &[u64])> {
        ts.iter().map(|t| (t.dtype(), t.shape())).collect()
    }
    check_shapes(
        op,
        &described(inputs),
        &described(outputs),
        dtype,
        scratch,
        n,
    )
}

/// Checks one collective's tensors, each given as its `(dtype, shape)` (shape in elements
/// per dimension), over `n` ranks on a domain of `dtype` with `scratch` elements of scratch
/// per rank: one input and one output per rank, every one a 1-D vector of `dtype`, with the
/// sizes `op` needs, the same on every rank (allreduce `count` → `count`, allgather `count`
/// → `n·count`, reduce-scatter `n·count` → `count`), and the input within the scratch. A
/// mismatch would read or write past a peer's data silently.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `inputs` / `outputs` (not one per rank),
/// `inputs[r]` / `outputs[r]` (dtype, rank, size, or another size than rank 0's) or
/// `inputs` (the domain is too small).
pub fn check_shapes(
    op: Op,
    inputs: &[(DataType, &[u64])],
    outputs: &[(DataType, &[u64])],
    dtype: DataType,
    scratch: u64,
    n: usize,
) -> Result<(), WorkerError> {
    for (what, len) in [("inputs", inputs.len()), ("outputs", outputs.len())] {
        if len != n {
            return Err(bad(
                what,
                format!("{len} for a domain of {n} ranks; give one tensor per rank, in rank order"),
            ));
        }
    }
    let name = op.name();
    let n64 = n as u64;
    let mut count: Option<u64> = None;
    for (i, (x, y)) in inputs.iter().zip(outputs).enumerate() {
        let mut elements = [0u64; 2];
        for (slot, (what, (t_dtype, shape))) in [("inputs", x), ("outputs", y)].iter().enumerate() {
            match shape {
                [len] if *t_dtype == dtype => elements[slot] = *len,
                _ => {
                    return Err(bad(
                        format!("{what}[{i}]"),
                        format!(
                            "{name} on this domain takes 1-D {dtype} vectors, got shape \
                             {shape:?} of {t_dtype}"
                        ),
                    ))
                }
            }
        }
        let [nx, ny] = elements;
        let (want_in, want_out, c) = match op {
            Op::AllReduce => (nx, nx, nx),
            Op::AllGather => (nx, nx.saturating_mul(n64), nx),
            Op::ReduceScatter => (ny.saturating_mul(n64), ny, ny),
        };
        if let Some(first) = count.filter(|first| *first != c) {
            let side = if op == Op::ReduceScatter {
                "outputs"
            } else {
                "inputs"
            };
            return Err(bad(
                format!("{side}[{i}]"),
                format!(
                    "rank {i} has {c} elements per rank but rank 0 has {first}; every rank of \
                     a collective takes the same sizes"
                ),
            ));
        }
        count = Some(c);
        if op == Op::ReduceScatter && nx != want_in {
            return Err(bad(
                format!("inputs[{i}]"),
                format!(
                    "{name} over {n} ranks with {ny}-element outputs needs {want_in}-element \
                     inputs, got {nx}"
                ),
            ));
        }
        if ny != want_out {
            return Err(bad(
                format!("outputs[{i}]"),
                format!(
                    "{name} over {n} ranks with {nx}-element inputs needs {want_out}-element \
                     outputs, got {ny}"
                ),
            ));
        }
    }
    let need = count.map_or(0, |c| {
        if op == Op::ReduceScatter {
            c.saturating_mul(n64)
        } else {
            c
        }
    });
    if need > scratch {
        return Err(bad(
            "inputs",
            format!(
                "{name} needs {need} elements of scratch per rank; the domain has {scratch} \
                 (make it with a larger count)"
            ),
        ));
    }
    Ok(())
}

/// The collective callable's signature for `dtype`: tensors `input` (in), `output` (out),
/// `window` (inout, the domain's `scratch`), `signal` (inout, i32), then the u64 scalars
/// `device_ctx`, `op`, `round`, `timeout_us`.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `dtype` (see [`check_dtype`]).
pub fn signature(dtype: DataType) -> Result<Signature, WorkerError> {
    let dtype = check_dtype(dtype)?;
    let arg = |name: &str, direction, dtype| ArgSpec {
        name: name.into(),
        direction,
        dtype,
        shape: None,
    };
    let mut args = vec![
        arg("input", ArgDirection::In, dtype),
        arg("output", ArgDirection::Out, dtype),
        arg("window", ArgDirection::InOut, dtype),
        arg("signal", ArgDirection::InOut, DataType::Int32),
    ];
    for s in ["device_ctx", "op", "round", "timeout_us"] {
        args.push(arg(s, ArgDirection::Scalar, DataType::Uint64));
    }
    Signature::new(args).map_err(|e| bad("dtype", format!("no signature: {e}")))
}

/// The collective chip callable for `dtype` from compiled images: `kernel`, the AIV kernel
/// library of [`KERNEL_SOURCE`], and `orchestration`, the library of
/// [`ORCHESTRATION_SOURCE`]. Named `collective_<dtype>` (`collective_f32`).
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `dtype` (see [`check_dtype`]).
pub fn callable_from_images(
    dtype: DataType,
    kernel: Vec<u8>,
    orchestration: Vec<u8>,
) -> Result<Callable, WorkerError> {
    let signature = signature(dtype)?;
    Ok(Callable::Chip(Arc::new(CallableSpec {
        name: format!("collective_{dtype}"),
        signature,
        orchestration: CodeImage::Library {
            bytes: orchestration,
            entry: ORCHESTRATION_ENTRY.into(),
        },
        kernels: vec![KernelSpec::new(
            0,
            CoreType::Aiv,
            CodeImage::Library {
                bytes: kernel,
                entry: KERNEL_ENTRY.into(),
            },
        )],
        runtime: None,
    })))
}

/// The compiled kernel and orchestration images, from the sources in `dir` (normally
/// [`SOURCE_DIR`]), through `compiler`'s cache.
///
/// # Errors
/// [`CollectivesError::Compile`] naming the source that failed.
pub fn compile_images(
    compiler: &Compiler,
    dir: &Path,
) -> Result<(Vec<u8>, Vec<u8>), CollectivesError> {
    let compile = |rel: &str, target| {
        let path = dir.join(rel);
        compiler
            .compile_target(&path, target)
            .map(|c| c.image)
            .map_err(|error| CollectivesError::Compile { path, error })
    };
    Ok((
        compile(KERNEL_SOURCE, Target::Kernel(CoreType::Aiv))?,
        compile(ORCHESTRATION_SOURCE, Target::Orchestration)?,
    ))
}

/// A comm domain made for collectives by [`Collectives::allocate_domain`]: its `scratch`
/// buffer's dtype and size, and the count of collectives it has served (the `round` the
/// chip code matches arrivals against). Not `Clone`: the round lives once.
#[derive(Debug)]
pub struct CollectiveDomain {
    domain: CommDomain,
    dtype: DataType,
    scratch: u64,
    rounds: AtomicU64,
}

impl CollectiveDomain {
    /// Wraps a domain whose every rank has a 1-D `scratch` buffer of f32 or i32 and a
    /// `signal` buffer of at least one i32, as [`Collectives::allocate_domain`] makes; its
    /// first collective is round 1.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `domain` when a buffer is missing or of
    /// another dtype.
    pub fn new(domain: CommDomain) -> Result<CollectiveDomain, WorkerError> {
        let not_ours = |why: String| {
            bad(
                "domain",
                format!(
                    "domain `{}` {why}; make it with Collectives::allocate_domain",
                    domain.name
                ),
            )
        };
        let first = domain
            .ranks
            .first()
            .ok_or_else(|| not_ours("has no ranks".into()))?;
        let scratch = first
            .buffer("scratch")
            .ok_or_else(|| not_ours("has no `scratch` buffer".into()))?;
        let (dtype, len) = (scratch.dtype(), scratch.numel());
        if !DTYPES.contains(&dtype) {
            return Err(not_ours(format!(
                "has scratch of {dtype}; collectives support f32 and i32"
            )));
        }
        for r in &domain.ranks {
            let ok = r
                .buffer("scratch")
                .is_some_and(|t| t.dtype() == dtype && t.numel() == len)
                && r.buffer("signal")
                    .is_some_and(|t| t.dtype() == DataType::Int32);
            if !ok {
                return Err(not_ours(format!(
                    "rank {} lacks `scratch` of {len} {dtype} or an i32 `signal`",
                    r.domain_rank
                )));
            }
        }
        Ok(CollectiveDomain {
            domain,
            dtype,
            scratch: len,
            rounds: AtomicU64::new(0),
        })
    }

    /// The comm domain.
    pub fn domain(&self) -> &CommDomain {
        &self.domain
    }

    /// The element type of its collectives.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// Elements of scratch per rank.
    pub fn scratch(&self) -> u64 {
        self.scratch
    }

    /// Collectives submitted on it so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Acquire)
    }

    /// Releases the domain (see [`Orchestrator::release_domain`]).
    ///
    /// # Errors
    /// As [`Orchestrator::release_domain`].
    pub fn release(&self, orch: &Orchestrator) -> Result<(), WorkerError> {
        orch.release_domain(&self.domain)
    }
}

/// The collectives of one level-3 worker: the f32 and i32 callables, registered.
#[derive(Clone, Debug)]
pub struct Collectives {
    f32: CallableHandle,
    i32: CallableHandle,
}

impl Collectives {
    /// Builds the f32 and i32 callables from [`SOURCE_DIR`] with `compiler` and registers
    /// them on `worker` (before or after its `init`).
    ///
    /// # Errors
    /// [`CollectivesError::Compile`]; [`CollectivesError::Worker`] from registration.
    pub fn new(worker: &Worker, compiler: &Compiler) -> Result<Collectives, CollectivesError> {
        let (kernel, orch) = compile_images(compiler, Path::new(SOURCE_DIR))?;
        Ok(Collectives::from_images(worker, kernel, orch)?)
    }

    /// Registers the callables of already compiled images (see [`callable_from_images`]).
    ///
    /// # Errors
    /// A [`WorkerError`] from registration.
    pub fn from_images(
        worker: &Worker,
        kernel: Vec<u8>,
        orchestration: Vec<u8>,
    ) -> Result<Collectives, WorkerError> {
        let f32 = worker.register(callable_from_images(
            DataType::Float32,
            kernel.clone(),
            orchestration.clone(),
        )?)?;
        let i32 = worker.register(callable_from_images(
            DataType::Int32,
            kernel,
            orchestration,
        )?)?;
        Ok(Collectives { f32, i32 })
    }

    /// A domain over the chips `workers` (rank = position) for collectives of up to `count`
    /// elements per rank of `dtype`: buffers `scratch` (`n · count` elements — room for an
    /// allreduce or allgather input of `count` and a reduce-scatter input of `n · count`)
    /// and `signal` ([`SIGNAL_WORDS`] i32).
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `count` (0, or too large for a window) or
    /// `dtype`; the errors of [`Orchestrator::allocate_domain`].
    pub fn allocate_domain(
        &self,
        orch: &Orchestrator,
        name: &str,
        workers: &[usize],
        count: u64,
        dtype: DataType,
    ) -> Result<CollectiveDomain, WorkerError> {
        let DomainLayout { scratch, window } = domain_layout(workers.len(), count, dtype)?;
        let domain = orch.allocate_domain(
            name,
            workers,
            window,
            &[
                CommBufferSpec {
                    name: "scratch".into(),
                    dtype,
                    count: scratch,
                },
                CommBufferSpec {
                    name: "signal".into(),
                    dtype: DataType::Int32,
                    count: SIGNAL_WORDS,
                },
            ],
        )?;
        CollectiveDomain::new(domain)
    }

    /// `outputs[r] = Σ_p inputs[p]` on every rank `r` (`count` elements each; sums in rank
    /// order, so every rank gets the same bits; i32 wraps). One group task; returns its id.
    ///
    /// # Errors
    /// See [`Collectives::submit`].
    pub fn allreduce(
        &self,
        orch: &Orchestrator,
        domain: &CollectiveDomain,
        inputs: &[Tensor],
        outputs: &[Tensor],
        options: &CollectiveOptions,
    ) -> Result<TaskId, WorkerError> {
        self.submit(orch, Op::AllReduce, domain, inputs, outputs, options)
    }

    /// `outputs[r][p·count ..][..count] = inputs[p]` on every rank `r`.
    ///
    /// # Errors
    /// See [`Collectives::submit`].
    pub fn allgather(
        &self,
        orch: &Orchestrator,
        domain: &CollectiveDomain,
        inputs: &[Tensor],
        outputs: &[Tensor],
        options: &CollectiveOptions,
    ) -> Result<TaskId, WorkerError> {
        self.submit(orch, Op::AllGather, domain, inputs, outputs, options)
    }

    /// `outputs[r] = Σ_p inputs[p][r·count ..][..count]`: `n·count` elements in per rank,
    /// `count` out.
    ///
    /// # Errors
    /// See [`Collectives::submit`].
    pub fn reduce_scatter(
        &self,
        orch: &Orchestrator,
        domain: &CollectiveDomain,
        inputs: &[Tensor],
        outputs: &[Tensor],
        options: &CollectiveOptions,
    ) -> Result<TaskId, WorkerError> {
        self.submit(orch, Op::ReduceScatter, domain, inputs, outputs, options)
    }

    /// Submits collective `op` over `domain` as one group task: rank `r` takes `inputs[r]`
    /// (INPUT) and `outputs[r]` (OUTPUT_EXISTING), host or device tensors. Everything is
    /// checked first; a refused call takes no round.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `timeout` ([`check_timeout`]), `inputs`,
    /// `outputs`, `inputs[r]` or `outputs[r]` ([`check_sizes`], and the engine's argument
    /// checks, renamed from `args_list[r][i]`); the other errors of
    /// [`Orchestrator::submit_next_level_group`].
    pub fn submit(
        &self,
        orch: &Orchestrator,
        op: Op,
        domain: &CollectiveDomain,
        inputs: &[Tensor],
        outputs: &[Tensor],
        options: &CollectiveOptions,
    ) -> Result<TaskId, WorkerError> {
        let timeout_us = check_timeout(options.timeout)?;
        let ranks = &domain.domain.ranks;
        check_sizes(
            op,
            inputs,
            outputs,
            domain.dtype,
            domain.scratch,
            ranks.len(),
        )?;
        let handle = if domain.dtype == DataType::Float32 {
            &self.f32
        } else {
            &self.i32
        };
        let round = domain.rounds() + 1;
        let mut args_list = Vec::with_capacity(ranks.len());
        for (i, ctx) in ranks.iter().enumerate() {
            let (Some(scratch), Some(signal)) = (ctx.buffer("scratch"), ctx.buffer("signal"))
            else {
                return Err(bad("domain", "a rank lost its buffers"));
            };
            args_list.push(
                TaskArgs::new()
                    .tensor(inputs[i].clone(), Tag::Input)
                    .tensor(outputs[i].clone(), Tag::OutputExisting)
                    .tensor(scratch.clone(), Tag::InOut)
                    .tensor(signal.clone(), Tag::InOut)
                    .scalar(ctx.device_ctx)
                    .scalar(op.code())
                    .scalar(round)
                    .scalar(timeout_us),
            );
        }
        let task = orch
            .submit_next_level_group(handle, args_list, &options.config, &domain.domain.workers)
            .map_err(renamed)?;
        domain.rounds.store(round, Ordering::Release); // taken only by a submitted collective
        Ok(task)
    }
}

/// An engine error naming `args_list[r][i]` renamed to the collective's own arguments
/// (`inputs[r]`, `outputs[r]`, `domain scratch[r]`, `domain signal[r]`).
fn renamed(e: WorkerError) -> WorkerError {
    let WorkerError::InvalidArgument { arg, reason } = e else {
        return e;
    };
    WorkerError::InvalidArgument {
        arg: rename(&arg),
        reason: rename(&reason),
    }
}

/// `text` (an engine error's argument name or reason) with every `args_list[R][I]` replaced
/// by the collective's name of argument `I` of rank `R`: `inputs[R]`, `outputs[R]`,
/// `domain scratch[R]`, `domain signal[R]` (`args[R]` past those).
pub fn rename(text: &str) -> String {
    const PREFIX: &str = "args_list[";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let tail = &rest[at + PREFIX.len()..];
        let parsed = tail.split_once("][").and_then(|(r, after)| {
            let (i, after) = after.split_once(']')?;
            Some((r.parse::<usize>().ok()?, i.parse::<usize>().ok()?, after))
        });
        match parsed {
            Some((r, i, after)) => {
                let name = match i {
                    0 => "inputs",
                    1 => "outputs",
                    2 => "domain scratch",
                    3 => "domain signal",
                    _ => "args",
                };
                out.push_str(&format!("{name}[{r}]"));
                rest = after;
            }
            None => {
                out.push_str(PREFIX);
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_become_the_collectives_names() {
        assert_eq!(
            rename("args_list[2][1]: bad; args_list[0][3] too"),
            "outputs[2]: bad; domain signal[0] too"
        );
        assert_eq!(rename("args_list[x][1]"), "args_list[x][1]");
        assert_eq!(rename("args_list"), "args_list");
    }

    #[test]
    fn timeouts_dtypes_and_counts_follow_one_rule() {
        assert_eq!(check_timeout(Duration::from_secs(40)).unwrap(), 40_000_000);
        assert_eq!(check_timeout(Duration::from_nanos(1)).unwrap(), 1);
        for t in [Duration::ZERO, Duration::from_millis(40_001)] {
            let e = check_timeout(t).unwrap_err();
            assert!(
                matches!(&e, WorkerError::InvalidArgument { arg, .. } if arg == "timeout"),
                "{e}"
            );
        }
        assert!(check_dtype(DataType::Int32).is_ok());
        let e = check_dtype(DataType::Float16).unwrap_err();
        assert!(e.to_string().contains("not f16"), "{e}");
        assert!(
            matches!(check_count(0), Err(WorkerError::InvalidArgument { arg, .. }) if arg == "count")
        );
        assert_eq!(Op::ReduceScatter.code(), 2);
        assert_eq!(Op::from_code(1), Some(Op::AllGather));
        assert_eq!(Op::from_code(3), None);
    }

    #[test]
    fn timeouts_in_seconds_follow_the_duration_rule() {
        assert_eq!(check_timeout_secs(40.0).unwrap(), 40_000_000);
        assert_eq!(check_timeout_secs(1.5).unwrap(), 1_500_000);
        assert_eq!(check_timeout_secs(1e-12).unwrap(), 1);
        for s in [0.0, -1.0, 40.000_001, 41.0, f64::INFINITY, f64::NAN] {
            let e = check_timeout_secs(s).unwrap_err();
            assert!(
                matches!(&e, WorkerError::InvalidArgument { arg, reason }
                    if arg == "timeout" && reason.starts_with("must be a number of seconds in (0, 40]")),
                "{s}: {e}"
            );
        }
        let e = check_timeout(Duration::from_secs(41)).unwrap_err();
        assert!(e.to_string().ends_with("got 41s"), "{e}");
    }

    #[test]
    fn a_domain_layout_is_checked_and_sized() {
        let l = domain_layout(4, 10, DataType::Float32).unwrap();
        assert_eq!(
            l,
            DomainLayout {
                scratch: 40,
                window: 192 + 128
            }
        );
        assert_eq!(domain_layout(0, 1, DataType::Int32).unwrap().scratch, 1);
        let arg_of = |e: WorkerError| match e {
            WorkerError::InvalidArgument { arg, .. } => arg,
            other => panic!("{other}"),
        };
        assert_eq!(
            arg_of(domain_layout(2, 0, DataType::Float32).unwrap_err()),
            "count"
        );
        assert_eq!(
            arg_of(domain_layout(2, u64::MAX, DataType::Float32).unwrap_err()),
            "count"
        );
        assert_eq!(
            arg_of(domain_layout(2, 4, DataType::Float64).unwrap_err()),
            "dtype"
        );
    }

    /// `check_shapes` over plain (dtype, shape) pairs: the argument each refusal names.
    #[test]
    fn shapes_are_checked_per_rank() {
        const F: DataType = DataType::Float32;
        let check = |op, xs: &[&[u64]], ys: &[&[u64]], scratch| {
            let xs: Vec<_> = xs.iter().map(|s| (F, *s)).collect();
            let ys: Vec<_> = ys.iter().map(|s| (F, *s)).collect();
            check_shapes(op, &xs, &ys, F, scratch, 2).map_err(|e| match e {
                WorkerError::InvalidArgument { arg, reason } => (arg, reason),
                other => panic!("{other}"),
            })
        };
        assert!(check(Op::AllReduce, &[&[4], &[4]], &[&[4], &[4]], 8).is_ok());
        assert!(check(Op::AllGather, &[&[4], &[4]], &[&[8], &[8]], 8).is_ok());
        assert!(check(Op::ReduceScatter, &[&[8], &[8]], &[&[4], &[4]], 8).is_ok());
        let arg = |r: Result<(), (String, String)>| r.unwrap_err().0;
        assert_eq!(
            arg(check(Op::AllReduce, &[&[4]], &[&[4], &[4]], 8)),
            "inputs"
        );
        assert_eq!(
            arg(check(Op::AllReduce, &[&[4], &[4]], &[&[4]], 8)),
            "outputs"
        );
        assert_eq!(
            arg(check(Op::AllReduce, &[&[4], &[2, 2]], &[&[4], &[4]], 8)),
            "inputs[1]"
        );
        assert_eq!(
            arg(check(Op::AllReduce, &[&[4], &[4]], &[&[4], &[]], 8)),
            "outputs[1]"
        );
        assert_eq!(
            arg(check(Op::AllReduce, &[&[4], &[3]], &[&[4], &[3]], 8)),
            "inputs[1]"
        );
        assert_eq!(
            arg(check(Op::AllGather, &[&[4], &[4]], &[&[4], &[4]], 8)),
            "outputs[0]"
        );
        assert_eq!(
            arg(check(Op::ReduceScatter, &[&[4], &[4]], &[&[4], &[4]], 8)),
            "inputs[0]"
        );
        assert_eq!(
            arg(check(Op::ReduceScatter, &[&[8], &[6]], &[&[4], &[3]], 8)),
            "outputs[1]"
        );
        assert_eq!(
            arg(check(Op::AllReduce, &[&[9], &[9]], &[&[9], &[9]], 8)),
            "inputs"
        );
        let (_, reason) = check(Op::AllGather, &[&[4], &[4]], &[&[4], &[4]], 8).unwrap_err();
        assert_eq!(
            reason,
            "allgather over 2 ranks with 4-element inputs needs 8-element outputs, got 4"
        );
        let i32s = [(DataType::Int32, &[4u64][..]), (F, &[4][..])];
        let e = check_shapes(Op::AllReduce, &i32s, &i32s, F, 8, 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument `inputs[0]`: allreduce on this domain takes 1-D f32 vectors, got shape [4] of i32"
        );
    }
}
