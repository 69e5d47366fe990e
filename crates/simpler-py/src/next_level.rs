//! The next-level children of a Python level-4 worker: [`PyChild`], the engine
//! [`Endpoint`] over a Python object of the protocol `simpler.next_level.NextLevelChild`
//! (a level-3 worker in this process, or one in a Ray actor), and [`children`], which turns
//! those objects into the engine's [`NextLevelChild`]s (`docs/l4-worker.md` §2).
//!
//! Every call attaches to the interpreter on the child's lane thread (the engine calls an
//! endpoint from that thread only) and goes through one function of
//! `simpler.next_level` (`_start`, `_register`, `_unregister`, `_run`, `_shutdown`), which
//! converts and calls the child. A run's tensors reach Python as [`NativeMappedTensor`]s
//! over this process's memory (the engine keeps the task's tensors alive until the call
//! returns). A Python exception becomes the engine's error by its `_endpoint_outcome`
//! attribute: `"died"` ([`EndpointError::Died`]), `"restarted"`
//! ([`WorkerError::EndpointRestarted`]), `"timeout"` ([`WorkerError::TaskTimeout`]);
//! any other exception fails the task with its text and traceback. This module owns no
//! policy: what a child does is the Python object's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use simpler_device::DevicePtr;
use simpler_host::CallConfig;
use simpler_worker::{
    Callable, CallableKey, ChildStart, Endpoint, EndpointError, EndpointKind, KillSwitch, Memory,
    NextLevelChild, TaskArg, WorkerError,
};

use crate::config::NativeCallConfig;
use crate::sub_child::NativeMappedTensor;

/// One child, driven by its lane (see the module docs).
pub(crate) struct PyChild {
    obj: Py<PyAny>,
    describe: String,
    sub_ends: Arc<AtomicU64>,
    kill: KillSwitch,
}

/// The switch `close()` trips for a child still busy past its close timeout: it calls
/// `simpler.next_level._kill(child, reason)` on a thread of its own (the engine trips it
/// under its lock), which stops what the child can stop (a Ray child kills its actor: the
/// call in flight then fails as the child's death).
fn kill_switch(obj: Arc<Py<PyAny>>) -> KillSwitch {
    KillSwitch::with_hook(move |reason: &str| {
        let obj = obj.clone();
        let reason = reason.to_string();
        let spawned = std::thread::Builder::new()
            .name("simpler-child-kill".into())
            .spawn(move || {
                Python::attach(|py| {
                    if let Err(e) = call(py, "_kill", (&*obj, reason)) {
                        eprintln!("simpler: warning: killing a level-4 child failed: {e}");
                    }
                })
            });
        if let Err(e) = spawned {
            eprintln!("simpler: warning: no thread to kill a level-4 child: {e}");
        }
    })
}

/// Calls `simpler.next_level.<func>(child, *args)`.
fn call<'py>(
    py: Python<'py>,
    func: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("simpler.next_level")?.getattr(func)?.call1(args)
}

/// The engine's error for a Python exception raised by a child call (see the module docs).
fn outcome(py: Python<'_>, endpoint: &str, e: PyErr) -> EndpointError {
    let value = e.value(py);
    let text = |name: &str| {
        value
            .getattr(name)
            .and_then(|v| v.str().map(|s| s.to_string()))
            .unwrap_or_default()
    };
    let kind = value
        .getattr("_endpoint_outcome")
        .ok()
        .and_then(|k| k.extract::<String>().ok());
    match kind.as_deref() {
        Some("died") => EndpointError::Died {
            report: text("report"),
        },
        Some("restarted") => EndpointError::Failed(WorkerError::EndpointRestarted {
            endpoint: endpoint.to_string(),
            report: text("report"),
            generation: value
                .getattr("generation")
                .and_then(|g| g.extract::<u64>())
                .unwrap_or(0),
        }),
        Some("timeout") => EndpointError::Failed(WorkerError::TaskTimeout {
            endpoint: endpoint.to_string(),
            after: value
                .getattr("after_s")
                .and_then(|a| a.extract::<f64>())
                .ok()
                .filter(|a| a.is_finite() && *a >= 0.0)
                .map(Duration::from_secs_f64)
                .unwrap_or_default(),
            report: text("report"),
        }),
        _ => EndpointError::Failed(WorkerError::SubFailed {
            message: formatted(py, &e),
        }),
    }
}

/// `e` as Python prints it (traceback, type and message); its bare text if that fails.
fn formatted(py: Python<'_>, e: &PyErr) -> String {
    let printed = py.import("traceback").and_then(|tb| {
        let lines = tb
            .getattr("format_exception")?
            .call1((e.value(py),))?
            .extract::<Vec<String>>()?;
        Ok(lines.concat())
    });
    printed
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| e.to_string())
}

fn no_device_memory(what: &str) -> EndpointError {
    EndpointError::Failed(WorkerError::InvalidArgument {
        arg: "worker".into(),
        reason: format!(
            "{what}: a level-4 worker's next-level workers hold no device memory of its own; \
             allocate chip memory inside a level-3 orchestration"
        ),
    })
}

impl PyChild {
    /// A run's arguments as Python objects: [`NativeMappedTensor`]s and ints.
    fn args<'py>(
        &self,
        py: Python<'py>,
        args: &[TaskArg],
    ) -> Result<Bound<'py, PyList>, EndpointError> {
        let list = PyList::empty(py);
        let py_err = |e: PyErr| {
            EndpointError::Failed(WorkerError::SubFailed {
                message: e.to_string(),
            })
        };
        for (i, a) in args.iter().enumerate() {
            match a {
                TaskArg::Scalar(bits) => list.append(*bits).map_err(py_err)?,
                TaskArg::Tensor(t, tag) => {
                    let Memory::Host(m) = t.memory() else {
                        return Err(EndpointError::Failed(WorkerError::InvalidArgument {
                            arg: format!("tensor {i}"),
                            reason: "device memory (a child tensor) cannot go to a worker of \
                                     the level below; pass host memory"
                                .into(),
                        }));
                    };
                    let (first, end) = t.byte_span().ok_or_else(|| {
                        EndpointError::Failed(WorkerError::InvalidArgument {
                            arg: format!("tensor {i}"),
                            reason: "its byte span overflows".into(),
                        })
                    })?;
                    let mapped = NativeMappedTensor::new(
                        m.as_ptr() as usize + first as usize,
                        (end - first) as usize,
                        t.shape().to_vec(),
                        t.strides().to_vec(),
                        t.dtype(),
                        *tag,
                    );
                    list.append(Py::new(py, mapped).map_err(py_err)?)
                        .map_err(py_err)?;
                }
            }
        }
        Ok(list)
    }
}

impl Endpoint for PyChild {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Chip
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn kill_switch(&self) -> Option<KillSwitch> {
        Some(self.kill.clone())
    }

    fn register(&mut self, key: CallableKey, callable: &Callable) -> Result<(), EndpointError> {
        let Callable::NextLevel { payload, .. } = callable else {
            return Err(EndpointError::Failed(WorkerError::InvalidArgument {
                arg: "callable".into(),
                reason: format!(
                    "`{}` is not a callable for a worker of the level below",
                    callable.name()
                ),
            }));
        };
        Python::attach(|py| {
            call(py, "_register", (&self.obj, key, PyBytes::new(py, payload)))
                .map(|_| ())
                .map_err(|e| match outcome(py, &self.describe, e.clone_ref(py)) {
                    EndpointError::Failed(WorkerError::SubFailed { .. }) => {
                        EndpointError::Failed(WorkerError::InvalidArgument {
                            arg: "callable".into(),
                            reason: format!("{} refused `{}`: {e}", self.describe, callable.name()),
                        })
                    }
                    other => other,
                })
        })
    }

    fn unregister(&mut self, key: CallableKey) -> Result<(), EndpointError> {
        Python::attach(|py| {
            call(py, "_unregister", (&self.obj, key))
                .map(|_| ())
                .map_err(|e| outcome(py, &self.describe, e))
        })
    }

    fn run(
        &mut self,
        key: CallableKey,
        args: &[TaskArg],
        config: &CallConfig,
    ) -> Result<(), EndpointError> {
        Python::attach(|py| {
            let list = self.args(py, args)?;
            let config = NativeCallConfig { config: *config };
            let sub_ends = self.sub_ends.load(Ordering::Acquire);
            call(py, "_run", (&self.obj, key, list, config, sub_ends))
                .map(|_| ())
                .map_err(|e| outcome(py, &self.describe, e))
        })
    }

    fn malloc(&mut self, _nbytes: u64) -> Result<DevicePtr, EndpointError> {
        Err(no_device_memory("malloc"))
    }

    fn free(&mut self, _ptr: DevicePtr) -> Result<(), EndpointError> {
        Err(no_device_memory("free"))
    }

    fn copy_to(&mut self, _dst: DevicePtr, _src: &[u8]) -> Result<(), EndpointError> {
        Err(no_device_memory("copy_to"))
    }

    fn copy_from(&mut self, _dst: &mut [u8], _src: DevicePtr) -> Result<(), EndpointError> {
        Err(no_device_memory("copy_from"))
    }

    fn shutdown(&mut self) -> Result<(), EndpointError> {
        Python::attach(|py| {
            call(py, "_shutdown", (&self.obj,))
                .map(|_| ())
                .map_err(|e| outcome(py, &self.describe, e))
        })
    }
}

/// The engine's children for the Python objects `objs` (child `i` is worker id `i`); each
/// is started by `simpler.next_level._start(obj, seconds_left)` on `init`'s thread.
///
/// # Errors
/// An object whose `describe()` fails or does not return a string.
pub(crate) fn children(py: Python<'_>, objs: Vec<Py<PyAny>>) -> PyResult<Vec<NextLevelChild>> {
    objs.into_iter()
        .map(|obj| {
            let describe: String = obj.bind(py).call_method0("describe")?.extract()?;
            let obj = Arc::new(obj);
            let name = describe.clone();
            let start = move |ctx: ChildStart| -> Result<Box<dyn Endpoint>, WorkerError> {
                let left = ctx.deadline.saturating_duration_since(Instant::now());
                Python::attach(|py| {
                    call(py, "_start", (&*obj, left.as_secs_f64())).map_err(|e| {
                        WorkerError::Startup {
                            endpoint: name.clone(),
                            reason: e.to_string(),
                        }
                    })?;
                    Ok(Box::new(PyChild {
                        obj: obj.clone_ref(py),
                        describe: name.clone(),
                        sub_ends: ctx.sub_ends.clone(),
                        kill: kill_switch(obj.clone()),
                    }) as Box<dyn Endpoint>)
                })
            };
            Ok(NextLevelChild {
                describe,
                start: Arc::new(start),
            })
        })
        .collect()
}
