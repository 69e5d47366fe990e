//! Collectives from a C host: `simpler_domain_init`, `simpler_domain_ranks`,
//! `simpler_domain_allreduce`, `simpler_domain_allgather`, `simpler_domain_reduce_scatter`
//! and `simpler_domain_destroy` (`include/simpler/domain.h`, `docs/c-abi.md` §15).
//!
//! A domain is a level-3 [`Worker`] of `ranks` sim chips (configured by the context config
//! conversion every owned context uses) with [`Collectives`] registered on it. Each
//! collective is one run: the caller's inputs are copied into engine-owned host memory,
//! [`Collectives::submit`] puts one group task over every rank on a comm domain made for the
//! run, and the outputs are copied back only when the run succeeded. The argument rules
//! (dtype, count, sizes, timeout) are `simpler_worker::collectives`'; this module converts
//! the C arguments and keeps the domains' table.

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use simpler_abi::DataType;
use simpler_toolchain::build::{self, Compiler};
use simpler_toolchain::cache::KernelCache;
use simpler_worker::collectives::{self, CollectiveOptions, Collectives, CollectivesError, Op};
use simpler_worker::{Memory, Tensor, VecMemory, Worker, WorkerOptions};

use crate::context::worker_config;
use crate::ffi_guard;
use crate::handles::{HandleKind, ProcessTable};
use crate::raw::{self, Out};
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::{
    SimplerContextConfig, SimplerDomain, SimplerDomainConfig, DOMAIN_MAX_RANKS,
    DOMAIN_MAX_TIMEOUT_MS,
};

/// The domains of this process.
pub static DOMAINS: ProcessTable<Domain> = ProcessTable::new(HandleKind::Domain);

/// A live `SimplerDomain`.
pub struct Domain {
    worker: Worker,
    collectives: Collectives,
    ranks: usize,
    /// One collective at a time: each makes and releases its own comm domain.
    busy: Mutex<()>,
}

fn domain_of(domain: *mut SimplerDomain) -> Result<Arc<Domain>, Failure> {
    if domain.is_null() {
        return Err(Failure::null("domain"));
    }
    DOMAINS.get().lookup(domain as usize as u64, "domain")
}

/// The compiler of the chip code: `cc` (else `$CC`, else `cc`), the headers found as
/// `simpler build` finds them, and the kernel cache in `cache_dir` or where the
/// environment says.
fn compiler(cc: Option<&str>, cache_dir: Option<&str>) -> Result<Compiler, Failure> {
    let words = match cc {
        Some(cc) => build::compiler_words(Some(cc.into())),
        None => build::compiler_words(std::env::var_os("CC")),
    }
    .map_err(|e| Failure::invalid("config->cc", e))?;
    let include = build::find_include_dir(
        std::path::Path::new(collectives::SOURCE_DIR),
        std::env::var_os("SIMPLER_INCLUDE_DIR"),
        None,
    )
    .map_err(|e| Failure::new(SimplerStatus::InvalidConfig, e.to_string()))?;
    Compiler::new(
        words,
        vec![include],
        KernelCache::locate(cache_dir.map(PathBuf::from)),
    )
    .map_err(|e| Failure::new(SimplerStatus::InvalidConfig, e.to_string()))
}

fn built(e: CollectivesError) -> Failure {
    match e {
        CollectivesError::Compile { .. } => {
            Failure::new(SimplerStatus::InvalidCallable, e.to_string())
        }
        CollectivesError::Worker(w) => w.into(),
    }
}

/// `simpler_domain_init`: starts the chips and registers the collectives.
///
/// # Safety
/// `config` is NULL or points to a `SimplerDomainConfig` whose non-NULL pointers point to
/// what the header says; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_domain_init(
    config: *const SimplerDomainConfig,
    out: *mut *mut SimplerDomain,
) -> i32 {
    ffi_guard::run("simpler_domain_init", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, std::ptr::null_mut(), "out") }?;
        // SAFETY: the header's contract for `config`.
        let c = unsafe { raw::read_versioned(config, "config") }?.unwrap_or_default();
        if c.reserved != 0 {
            return Err(Failure::new(
                SimplerStatus::InvalidConfig,
                "`config->reserved`: must be 0",
            ));
        }
        let ranks = match c.ranks {
            0 => 2,
            n if n <= DOMAIN_MAX_RANKS => n,
            n => {
                return Err(Failure::new(
                    SimplerStatus::InvalidConfig,
                    format!("`config->ranks`: {n}; a domain has 1..={DOMAIN_MAX_RANKS} ranks"),
                ))
            }
        };
        // SAFETY: the header's contract for `config->chip`.
        let chip = unsafe { raw::read_versioned::<SimplerContextConfig>(c.chip, "config->chip") }?;
        let chip = worker_config(chip, false)?;
        // SAFETY: the header's contract for the strings.
        let cc = (!c.cc.is_null())
            .then(|| unsafe { raw::c_str(c.cc, "config->cc") })
            .transpose()?;
        // SAFETY: as above.
        let cache_dir = (!c.cache_dir.is_null())
            .then(|| unsafe { raw::c_str(c.cache_dir, "config->cache_dir") })
            .transpose()?;
        let compiler = compiler(cc, cache_dir)?;
        let worker = Worker::new(WorkerOptions {
            chips: vec![chip; ranks as usize],
            ..WorkerOptions::default()
        })?;
        let collectives = Collectives::new(&worker, &compiler).map_err(built)?;
        worker.init()?;
        let handle = DOMAINS.get().insert(Arc::new(Domain {
            worker,
            collectives,
            ranks: ranks as usize,
            busy: Mutex::new(()),
        }));
        out.set(handle as usize as *mut SimplerDomain);
        Ok(())
    })
}

/// `simpler_domain_ranks`: the domain's rank count.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_domain_ranks(domain: *mut SimplerDomain, out: *mut u32) -> i32 {
    ffi_guard::run("simpler_domain_ranks", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, 0, "out") }?;
        let d = domain_of(domain)?;
        out.set(d.ranks as u32);
        Ok(())
    })
}

/// `simpler_domain_destroy`: stops the chips (after a collective in flight) and frees the
/// handle.
///
/// # Safety
/// None beyond the header's: `domain` is any value.
#[no_mangle]
pub unsafe extern "C" fn simpler_domain_destroy(domain: *mut SimplerDomain) -> i32 {
    ffi_guard::run("simpler_domain_destroy", || -> Outcome {
        if domain.is_null() {
            return Err(Failure::null("domain"));
        }
        let d = DOMAINS.get().remove(domain as usize as u64, "domain")?;
        // Waits for a collective another thread is running, then stops the chips once the
        // last reference goes (the worker closes on drop from any thread).
        drop(d.busy.lock());
        drop(d);
        Ok(())
    })
}

/// The elements of rank `r`'s input and output for `op` over `n` ranks with `count`
/// elements per rank.
fn extents(op: Op, n: u64, count: u64) -> Result<(u64, u64), Failure> {
    let wide = n
        .checked_mul(count)
        .ok_or_else(|| Failure::invalid("count", format!("{count} × {n} ranks overflows")))?;
    Ok(match op {
        Op::AllReduce => (count, count),
        Op::AllGather => (count, wide),
        Op::ReduceScatter => (wide, count),
    })
}

/// The bytes of `elements` of `dtype`, as a `usize`.
fn byte_len(elements: u64, dtype: DataType) -> Result<usize, Failure> {
    elements
        .checked_mul(dtype.size_bytes() as u64)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|b| *b <= isize::MAX as usize)
        .ok_or_else(|| {
            Failure::invalid(
                "count",
                format!("{elements} elements of {dtype} do not fit in memory"),
            )
        })
}

/// Refuses a pointer not aligned to `dtype`'s elements.
fn aligned(ptr: *const c_void, dtype: DataType, param: &str) -> Outcome {
    let align = dtype.size_bytes();
    if (ptr as usize).is_multiple_of(align) {
        Ok(())
    } else {
        Err(Failure::invalid(
            param,
            format!("{ptr:p} is not aligned to the {align}-byte elements of {dtype}"),
        ))
    }
}

/// One collective: checks, copies the inputs in, runs, copies the outputs back.
///
/// # Safety
/// `inputs` and `outputs` are NULL or arrays of the domain's rank count of pointers, each
/// NULL or pointing to the elements the header gives for `op` (inputs readable, outputs
/// writable, for the call).
unsafe fn collective(
    op: Op,
    domain: *mut SimplerDomain,
    dtype: u32,
    inputs: *const *const c_void,
    outputs: *const *mut c_void,
    count: u64,
    timeout_ms: u64,
) -> Outcome {
    let d = domain_of(domain)?;
    let dtype = DataType::from_raw(dtype)
        .ok_or_else(|| Failure::invalid("dtype", format!("{dtype} is not a SimplerDataType")))
        .and_then(|t| Ok(collectives::check_dtype(t)?))?;
    collectives::check_count(count)?;
    let timeout = match timeout_ms {
        0 => collectives::DEFAULT_TIMEOUT,
        t if t <= DOMAIN_MAX_TIMEOUT_MS => Duration::from_millis(t),
        t => {
            return Err(Failure::invalid(
                "timeout_ms",
                format!("{t} ms; a collective waits 1..={DOMAIN_MAX_TIMEOUT_MS} ms (0: 30 s)"),
            ))
        }
    };
    let n = d.ranks;
    let (n_in, n_out) = extents(op, n as u64, count)?;
    let (in_bytes, out_bytes) = (byte_len(n_in, dtype)?, byte_len(n_out, dtype)?);
    // SAFETY: the header's contract: `ranks` pointers each.
    let ins = unsafe { raw::array(inputs, n, "inputs") }?.to_vec();
    // SAFETY: as above.
    let outs = unsafe { raw::array(outputs, n, "outputs") }?.to_vec();
    for (r, (&x, &y)) in ins.iter().zip(&outs).enumerate() {
        aligned(x, dtype, &format!("inputs[{r}]"))?;
        aligned(y.cast_const(), dtype, &format!("outputs[{r}]"))?;
    }
    let _one_at_a_time = d.busy.lock();
    let mut in_tensors = Vec::with_capacity(n);
    let mut out_memory = Vec::with_capacity(n);
    let mut out_tensors = Vec::with_capacity(n);
    for (r, &x) in ins.iter().enumerate() {
        // SAFETY: the header's contract: `n_in` readable elements at `inputs[r]`; the slice
        // is copied at once and dropped before any output is written.
        let bytes = unsafe { raw::bytes(x.cast(), in_bytes, &format!("inputs[{r}]")) }?;
        let memory: Arc<dyn simpler_worker::HostMemory> = Arc::new(VecMemory::new(bytes.to_vec()));
        in_tensors.push(Tensor::new(Memory::Host(memory), &[n_in], dtype)?);
        let out = Arc::new(VecMemory::new(vec![0; out_bytes]));
        let memory: Arc<dyn simpler_worker::HostMemory> = out.clone();
        out_tensors.push(Tensor::new(Memory::Host(memory), &[n_out], dtype)?);
        out_memory.push(out);
    }
    let members: Vec<usize> = (0..n).collect();
    let options = CollectiveOptions {
        timeout,
        ..CollectiveOptions::default()
    };
    d.worker.run(|o| {
        let dom = d
            .collectives
            .allocate_domain(o, op.name(), &members, count, dtype)?;
        d.collectives
            .submit(o, op, &dom, &in_tensors, &out_tensors, &options)?;
        dom.release(o)
    })?;
    for (r, (&y, out)) in outs.iter().zip(&out_memory).enumerate() {
        // SAFETY: the header's contract: `n_out` writable elements at `outputs[r]`; no other
        // slice of the caller's memory is alive.
        let dst = unsafe { raw::bytes_mut(y.cast(), out_bytes, &format!("outputs[{r}]")) }?;
        dst.copy_from_slice(&out.to_vec());
    }
    Ok(())
}

/// Defines the C entry `$name` of collective `$op` (see `include/simpler/domain.h`).
macro_rules! collective_entry {
    ($(#[$doc:meta])* $name:ident, $op:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// See `include/simpler/domain.h`: `inputs`/`outputs` hold the domain's rank count of
        /// pointers to the elements `count` gives for this collective.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            domain: *mut SimplerDomain,
            dtype: u32,
            inputs: *const *const c_void,
            outputs: *const *mut c_void,
            count: u64,
            timeout_ms: u64,
        ) -> i32 {
            ffi_guard::run(stringify!($name), || {
                // SAFETY: the header's contract, passed on.
                unsafe { collective($op, domain, dtype, inputs, outputs, count, timeout_ms) }
            })
        }
    };
}

collective_entry!(
    /// `simpler_domain_allreduce`: `outputs[r] = Σ_p inputs[p]`, `count` elements each.
    simpler_domain_allreduce,
    Op::AllReduce
);
collective_entry!(
    /// `simpler_domain_allgather`: `outputs[r][p·count ..][..count] = inputs[p]`.
    simpler_domain_allgather,
    Op::AllGather
);
collective_entry!(
    /// `simpler_domain_reduce_scatter`: `outputs[r] = Σ_p inputs[p][r·count ..][..count]`.
    simpler_domain_reduce_scatter,
    Op::ReduceScatter
);
