//! Contexts: `simpler_context_init` (owned: a sim device of the config's topology and a
//! worker on it), `simpler_context_init_borrowed` (on a caller context,
//! [`ChipWorker::borrowed_sim_context`]), `simpler_context_finalize` (the worker's close)
//! and `simpler_context_destroy` (`docs/c-abi.md` §3). This module converts the
//! config, adds a context to the context table (`context_table`) and takes it out with its
//! runs; the worker decides everything else.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use simpler_device::sim::Memcheck;
use simpler_device::Topology;
use simpler_host::{ChipWorker, HostError, Runtime, WorkerConfig};

use crate::context_table::{context, Context, RunBook, CONTEXTS};
use crate::ffi_guard;
use crate::raw::{self, Out};
use crate::replay::RECORDINGS;
use crate::run::RUNS;
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::{memcheck, runtime, SimplerContext, SimplerContextConfig};

fn ms(v: u64) -> Option<Duration> {
    (v != 0).then(|| Duration::from_millis(v))
}

/// The runtime variant a `SimplerRuntime` field `field` (e.g. `config->runtime`) names:
/// `None` for `SIMPLER_RUNTIME_DEFAULT`.
///
/// # Errors
/// `SIMPLER_STATUS_INVALID_CONFIG` naming `field` for a value that is no `SimplerRuntime`.
pub(crate) fn runtime_field(v: u32, field: &str) -> Result<Option<Runtime>, Failure> {
    match v {
        runtime::DEFAULT => Ok(None),
        runtime::TENSORMAP_AND_RINGBUFFER => Ok(Some(Runtime::TensormapAndRingbuffer)),
        runtime::HOST_BUILD_GRAPH => Ok(Some(Runtime::HostBuildGraph)),
        other => Err(Failure::new(
            SimplerStatus::InvalidConfig,
            format!(
                "`{field}`: {other} is not a SimplerRuntime (0 default, 1 \
                 tensormap_and_ringbuffer, 2 host_build_graph)"
            ),
        )),
    }
}

/// The worker configuration of `c` (`None`: all defaults); `borrowed` refuses the device
/// fields, which belong to the caller's device.
pub(crate) fn worker_config(
    c: Option<SimplerContextConfig>,
    borrowed: bool,
) -> Result<WorkerConfig, Failure> {
    let mut w = WorkerConfig::default();
    let Some(c) = c else { return Ok(w) };
    if borrowed {
        for (field, v) in [
            ("clusters", c.clusters),
            ("aicpu_threads", c.aicpu_threads),
            ("sim_memcheck", c.sim_memcheck),
            ("enable_sdma", c.enable_sdma),
        ] {
            if v != 0 {
                return Err(Failure::invalid(
                    &format!("config->{field}"),
                    format!(
                        "is {v}, but a borrowed context uses the caller's device: its device \
                         options must be 0"
                    ),
                ));
            }
        }
    }
    let default = Topology::default();
    w.topology = Topology {
        clusters: if c.clusters == 0 {
            default.clusters
        } else {
            c.clusters
        },
        aicpu_threads: if c.aicpu_threads == 0 {
            default.aicpu_threads
        } else {
            c.aicpu_threads
        },
    };
    w.sim_memcheck = match c.sim_memcheck {
        memcheck::FROM_ENV => w.sim_memcheck,
        memcheck::OFF => Memcheck::Off,
        memcheck::AFTER => Memcheck::After,
        memcheck::BEFORE => Memcheck::Before,
        other => {
            return Err(Failure::invalid(
                "config->sim_memcheck",
                format!("{other} is not a SimplerMemcheck (0..=3)"),
            ))
        }
    };
    w.enable_sdma = match c.enable_sdma {
        0 => false,
        1 => true,
        other => {
            return Err(Failure::new(
                SimplerStatus::InvalidConfig,
                format!("`config->enable_sdma`: {other} is neither 0 (no SDMA engine) nor 1"),
            ))
        }
    };
    if let Some(r) = runtime_field(c.runtime, "config->runtime")? {
        w.runtime = r;
    }
    w.aicpu_thread_num = c.aicpu_thread_num;
    if c.launch_depth != 0 {
        w.launch_depth = c.launch_depth;
    }
    if c.task_window != 0 {
        w.task_window = c.task_window;
    }
    if c.heap_size != 0 {
        w.heap_size = c.heap_size;
    }
    w.run_timeout = ms(c.run_timeout_ms).unwrap_or(w.run_timeout);
    w.scheduler_timeout = ms(c.scheduler_timeout_ms).unwrap_or(w.scheduler_timeout);
    if c.op_execute_timeout_us != 0 {
        w.op_execute_timeout = Duration::from_micros(c.op_execute_timeout_us);
    }
    w.tensor_data_timeout = ms(c.tensor_data_timeout_ms).unwrap_or(w.tensor_data_timeout);
    Ok(w)
}

fn publish(worker: ChipWorker, out: &Out<*mut SimplerContext>) {
    let context = Arc::new(Context {
        worker,
        book: Mutex::new(RunBook::default()),
        launching: Mutex::new(()),
    });
    let handle = CONTEXTS.get().insert(context);
    out.set(handle as usize as *mut SimplerContext);
}

/// `simpler_context_init`.
///
/// # Safety
/// `config` is NULL or a valid `SimplerContextConfig` of at least its `size` bytes; `out`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_context_init(
    config: *const SimplerContextConfig,
    out: *mut *mut SimplerContext,
) -> i32 {
    ffi_guard::run("simpler_context_init", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, std::ptr::null_mut(), "out") }?;
        // SAFETY: the header's contract for `config`.
        let config = unsafe { raw::read_versioned(config, "config") }?;
        let worker = ChipWorker::new(worker_config(config, false)?)?;
        publish(worker, &out);
        Ok(())
    })
}

/// `simpler_context_init_borrowed`.
///
/// # Safety
/// As [`simpler_context_init`].
#[no_mangle]
pub unsafe extern "C" fn simpler_context_init_borrowed(
    config: *const SimplerContextConfig,
    borrowed_context_generation: u64,
    out: *mut *mut SimplerContext,
) -> i32 {
    ffi_guard::run("simpler_context_init_borrowed", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, std::ptr::null_mut(), "out") }?;
        let Some(generation) = NonZeroU64::new(borrowed_context_generation) else {
            return Err(Failure::invalid(
                "borrowed_context_generation",
                "must be nonzero: 0 names no caller context",
            ));
        };
        // SAFETY: the header's contract for `config`.
        let config = unsafe { raw::read_versioned(config, "config") }?;
        let worker = ChipWorker::borrowed_sim_context(worker_config(config, true)?, generation)?;
        publish(worker, &out);
        Ok(())
    })
}

/// `simpler_context_finalize`: the worker's `close()`.
///
/// # Safety
/// None beyond the header's: `ctx` is any value.
#[no_mangle]
pub unsafe extern "C" fn simpler_context_finalize(ctx: *mut SimplerContext) -> i32 {
    ffi_guard::run("simpler_context_finalize", || -> Outcome {
        let (_, c) = context(ctx)?;
        c.worker.close()?;
        Ok(())
    })
}

/// `simpler_context_destroy`: close (unless refused), then free the handle and its runs.
///
/// # Safety
/// None beyond the header's: `ctx` is any value.
#[no_mangle]
pub unsafe extern "C" fn simpler_context_destroy(ctx: *mut SimplerContext) -> i32 {
    ffi_guard::run("simpler_context_destroy", || -> Outcome {
        let (handle, c) = context(ctx)?;
        match c.worker.close() {
            // An incomplete cleanup is retried when the worker is dropped below.
            Ok(()) | Err(HostError::CleanupIncomplete(_)) => {}
            // A refused close changed nothing: the handle stays, so the caller can retry
            // from the right context.
            Err(e) => return Err(e.into()),
        }
        let removed = CONTEXTS.get().remove(handle, "ctx")?;
        let (runs, recordings) = {
            let mut book = removed.book.lock();
            (
                std::mem::take(&mut book.runs),
                std::mem::take(&mut book.recordings),
            )
        };
        for r in runs {
            let _ = RUNS.get().remove(r, "run");
        }
        for r in recordings {
            let _ = RECORDINGS.get().remove(r, "recording");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SimplerContextConfig {
        SimplerContextConfig {
            size: 80,
            version: 1,
            ..Default::default()
        }
    }

    #[test]
    fn zero_fields_keep_the_defaults_and_set_ones_apply() {
        let d = WorkerConfig::default();
        let w = worker_config(Some(config()), false).unwrap();
        assert_eq!(w.topology, d.topology);
        assert_eq!(
            (w.heap_size, w.launch_depth, w.run_timeout),
            (d.heap_size, d.launch_depth, d.run_timeout)
        );
        let w = worker_config(
            Some(SimplerContextConfig {
                clusters: 2,
                aicpu_threads: 3,
                sim_memcheck: memcheck::AFTER,
                launch_depth: 1,
                heap_size: 1 << 20,
                run_timeout_ms: 1500,
                op_execute_timeout_us: 2500,
                ..config()
            }),
            false,
        )
        .unwrap();
        assert_eq!((w.topology.clusters, w.topology.aicpu_threads), (2, 3));
        assert_eq!(w.sim_memcheck, Memcheck::After);
        assert_eq!((w.launch_depth, w.heap_size), (1, 1 << 20));
        assert_eq!(w.run_timeout, Duration::from_millis(1500));
        assert_eq!(w.op_execute_timeout, Duration::from_micros(2500));
    }

    #[test]
    fn sdma_and_runtime_apply_and_bad_values_are_refused_by_name() {
        let d = worker_config(Some(config()), false).unwrap();
        assert!(!d.enable_sdma);
        assert_eq!(d.runtime, Runtime::TensormapAndRingbuffer);
        let w = worker_config(
            Some(SimplerContextConfig {
                enable_sdma: 1,
                runtime: runtime::HOST_BUILD_GRAPH,
                ..config()
            }),
            false,
        )
        .unwrap();
        assert!(w.enable_sdma);
        assert_eq!(w.runtime, Runtime::HostBuildGraph);
        for (field, c) in [
            (
                "config->enable_sdma",
                SimplerContextConfig {
                    enable_sdma: 2,
                    ..config()
                },
            ),
            (
                "config->runtime",
                SimplerContextConfig {
                    runtime: 3,
                    ..config()
                },
            ),
        ] {
            let e = worker_config(Some(c), false).unwrap_err();
            assert_eq!(e.status, SimplerStatus::InvalidConfig, "{}", e.message);
            assert!(e.message.contains(field), "{}", e.message);
        }
        // A borrowed context takes a runtime, but SDMA belongs to the caller's device.
        let e = worker_config(
            Some(SimplerContextConfig {
                enable_sdma: 1,
                ..config()
            }),
            true,
        )
        .unwrap_err();
        assert!(e.message.contains("config->enable_sdma"), "{}", e.message);
    }

    #[test]
    fn a_borrowed_config_refuses_device_options_by_name() {
        for (field, c) in [
            (
                "clusters",
                SimplerContextConfig {
                    clusters: 1,
                    ..config()
                },
            ),
            (
                "aicpu_threads",
                SimplerContextConfig {
                    aicpu_threads: 2,
                    ..config()
                },
            ),
            (
                "sim_memcheck",
                SimplerContextConfig {
                    sim_memcheck: 1,
                    ..config()
                },
            ),
        ] {
            let e = worker_config(Some(c), true).unwrap_err();
            assert_eq!(e.status, SimplerStatus::InvalidArgument);
            assert!(e.message.contains(field), "{}", e.message);
        }
        let e = worker_config(
            Some(SimplerContextConfig {
                sim_memcheck: 7,
                ..config()
            }),
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("SimplerMemcheck"), "{}", e.message);
    }
}
