//! `simpler._native.IsolatedChipWorker`: one chip in a child process
//! ([`simpler_worker::IsolatedChip`]) behind the same methods as
//! [`ChipWorker`](crate::worker::NativeWorker), for the Python `Worker(level=2,
//! chip_isolation="process")`; and `IsolatedRunHandle`, its submitted run.
//!
//! # State
//!
//! `chip` is `Some` from construction until [`close`](NativeIsolatedWorker::close), then
//! `None` for good; every method clones the `Arc` under the lock and calls the chip
//! detached from the interpreter, so a long call never blocks another thread's.
//!
//! # Arguments of a run
//!
//! Items as `ChipWorker.run` takes them, one per signature entry: a
//! [`HostTensor`](crate::args::NativeHostTensor) becomes a tensor over the array in place
//! (private memory: the run copies it through the child's mailbox, so any C-contiguous array
//! will do), a [`DeviceTensor`](crate::args::NativeDeviceTensor) device memory of `malloc`,
//! a number a scalar. The host's signature check runs here first, with its own exceptions
//! (as level 2's, [`crate::error::arg_error`]); the chip checks the rest. The run keeps
//! the arrays alive until it is over.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use simpler_device::DevicePtr;
use simpler_host::CallConfig;
use simpler_worker::{
    ChildProgram, ChipHealth, IsolatedArg, IsolatedChip, IsolatedOptions, IsolatedRunHandle,
    WorkerError,
};

use crate::args::{scalar_value, NativeDeviceTensor, NativeHostTensor};
use crate::array::ArrayMemory;
use crate::callable::NativeCallable;
use crate::config::{NativeCallConfig, NativeWorkerConfig};
use crate::error::detached;
use crate::error::{self, Raise};
use crate::handle::{wait_in_slices, NativeRunReport, Slice};
use crate::host_memory::private_tensor;
use crate::sync::{drop_detached, lock, take_last};

/// One chip in a child process, driven from Python.
#[pyclass(module = "simpler._native", name = "IsolatedChipWorker", frozen)]
pub struct NativeIsolatedWorker {
    chip: Mutex<Option<Arc<IsolatedChip>>>,
    config: NativeWorkerConfig,
}

impl NativeIsolatedWorker {
    fn live(&self, py: Python<'_>) -> PyResult<Arc<IsolatedChip>> {
        lock(&self.chip).clone().ok_or_else(|| error::closed(py))
    }

    /// The chip, the run's options and its arguments for a run of callable `id`.
    fn prepare(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<(Arc<IsolatedChip>, CallConfig, Vec<IsolatedArg>)> {
        let chip = self.live(py)?;
        let (callable, sig) = chip.signature(id).map_err(|e| error::worker_error(py, e))?;
        if !(args.is_instance_of::<PyList>() || args.is_instance_of::<PyTuple>()) {
            return Err(error::argument_type(
                py,
                format!("run arguments are a list, got {}", args.get_type().name()?),
            ));
        }
        let list: Vec<Bound<'_, PyAny>> = args.extract()?;
        let mut items = Vec::with_capacity(list.len());
        for (i, obj) in list.iter().enumerate() {
            let name = sig
                .args
                .get(i)
                .map_or_else(|| format!("#{i}"), |a| a.name.clone());
            let item = if let Ok(t) = obj.cast::<NativeHostTensor>() {
                let t = t.get();
                IsolatedArg::Host(private_tensor(t.array.bind(py), t.dtype, &name)?)
            } else if let Ok(t) = obj.cast::<NativeDeviceTensor>() {
                let t = t.get();
                IsolatedArg::Device {
                    ptr: DevicePtr::from_raw(t.address),
                    shape: t.shape.clone(),
                    dtype: t.dtype,
                }
            } else if let Some(v) = scalar_value(py, &name, obj)? {
                IsolatedArg::Scalar(v)
            } else {
                return Err(error::argument_type(
                    py,
                    format!(
                        "argument `{name}`: expected a HostTensor, DeviceTensor, RawScalar, int \
                         or float, got {}",
                        obj.get_type().name()?
                    ),
                ));
            };
            items.push(item);
        }
        let offers: Vec<_> = items.iter().map(IsolatedArg::offer).collect();
        sig.check_offers(&callable, &offers)
            .map_err(|e| error::arg_error(py, e))?;
        Ok((chip, config.map(|c| c.config).unwrap_or_default(), items))
    }
}

#[pymethods]
impl NativeIsolatedWorker {
    /// Starts the chip configured by `config` in a child process running `child_program`
    /// with `child_args` and `child_env` set in its environment (the engine passes it the rest
    /// in its environment too), and waits until
    /// the chip is up (`startup_timeout_s`, default 300). Raises `StartupError` naming the
    /// chip and why; nothing is left running then.
    #[new]
    #[pyo3(signature = (config, *, child_program, child_args=Vec::new(), child_env=Vec::new(),
                        startup_timeout_s=None))]
    fn new(
        py: Python<'_>,
        config: &NativeWorkerConfig,
        child_program: String,
        child_args: Vec<String>,
        child_env: Vec<(String, String)>,
        startup_timeout_s: Option<f64>,
    ) -> PyResult<NativeIsolatedWorker> {
        let mut options = IsolatedOptions {
            chip: config.config.clone(),
            device_id: config.device_id,
            program: Some(ChildProgram {
                program: child_program.into(),
                args: child_args.into_iter().map(Into::into).collect(),
                env: child_env
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
            }),
            ..IsolatedOptions::default()
        };
        match startup_timeout_s {
            None => {}
            Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => {
                options.startup_timeout = Duration::from_secs_f64(s)
            }
            Some(s) => {
                return Err(Raise::new(
                    "InvalidConfigError",
                    format!("startup_timeout_s must be positive and finite, got {s}"),
                )
                .into_err(py))
            }
        }
        let chip = detached(py, || IsolatedChip::start(options))?;
        Ok(NativeIsolatedWorker {
            chip: Mutex::new(Some(Arc::new(chip))),
            config: config.clone(),
        })
    }

    /// Registers `callable` (sent to the child as its bundle) and returns its id.
    fn register(&self, py: Python<'_>, callable: &NativeCallable) -> PyResult<u32> {
        let chip = self.live(py)?;
        let spec = Arc::new(callable.bundle.clone().into_spec());
        detached(py, || chip.register(spec))
    }

    /// Unregisters the callable `id` (once the runs in flight are over).
    fn unregister(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        let chip = self.live(py)?;
        detached(py, || chip.unregister(id))
    }

    /// Runs callable `id` on `args` (see the module docs) with `config` and waits for it.
    #[pyo3(signature = (id, args, config=None))]
    fn run(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<NativeRunReport> {
        self.submit(py, id, args, config)?.result(py)
    }

    /// Submits a run of callable `id` on `args` and returns its handle once it is queued:
    /// its copies to the chip run when it is dispatched, after every run submitted before it
    /// is over.
    #[pyo3(signature = (id, args, config=None))]
    fn submit(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<NativeIsolatedRunHandle> {
        let (chip, config, items) = self.prepare(py, id, args, config)?;
        let handle = detached(py, || chip.submit(id, items, &config))?;
        Ok(NativeIsolatedRunHandle { handle })
    }

    /// Allocates `size` bytes of zeroed device memory on the chip; returns its address.
    fn malloc(&self, py: Python<'_>, size: u64) -> PyResult<u64> {
        let chip = self.live(py)?;
        detached(py, || chip.malloc(size)).map(|p| p.addr())
    }

    /// Frees device memory from `malloc`.
    fn free(&self, py: Python<'_>, addr: u64) -> PyResult<()> {
        let chip = self.live(py)?;
        detached(py, || chip.free(DevicePtr::from_raw(addr)))
    }

    /// Copies the bytes of `src` (a C-contiguous ndarray) to device address `addr`.
    fn copy_to(&self, py: Python<'_>, addr: u64, src: &Bound<'_, PyAny>) -> PyResult<()> {
        let chip = self.live(py)?;
        let memory = ArrayMemory::borrow(src, "src")?;
        if memory.len() == 0 {
            return Err(error::invalid_argument(
                py,
                "src",
                "the array has no elements",
            ));
        }
        let bytes = memory.bytes();
        detached(py, || chip.copy_to(DevicePtr::from_raw(addr), bytes))
    }

    /// Copies device memory at `addr` into `dst` (a writable, C-contiguous ndarray), as many
    /// bytes as `dst` holds.
    fn copy_from(&self, py: Python<'_>, dst: &Bound<'_, PyAny>, addr: u64) -> PyResult<()> {
        let chip = self.live(py)?;
        let memory = ArrayMemory::borrow(dst, "dst")?;
        if memory.len() == 0 {
            return Err(error::invalid_argument(
                py,
                "dst",
                "the array has no elements",
            ));
        }
        let Some(mut memory) = memory.into_writable() else {
            return Err(error::invalid_argument(
                py,
                "dst",
                "the destination array is read-only",
            ));
        };
        let bytes = memory.bytes_mut();
        detached(py, || chip.copy_from(bytes, DevicePtr::from_raw(addr)))
    }

    /// Waits for the runs in flight, stops the child and reaps it. Idempotent.
    fn close(&self, py: Python<'_>) {
        let chip = lock(&self.chip).take();
        py.detach(move || {
            if let Some(c) = &chip {
                if let Err(e) = c.close() {
                    eprintln!("simpler: warning: closing the worker: {e}");
                }
            }
            drop(chip)
        });
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.chip).is_none()
    }

    /// The worker's configuration (as given; the child checked it when it started).
    #[getter]
    fn config(&self) -> NativeWorkerConfig {
        self.config.clone()
    }

    /// The chip's health: a dict with `state` (`"ok"`, `"dead"` or `"closed"`) and, when
    /// dead, `endpoint` (`"chip 0 (device 0, pid 42)"`) and `report` (how the child ended and
    /// the end of its stderr).
    #[getter]
    fn health<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let health = match lock(&self.chip).clone() {
            Some(chip) => py.detach(|| chip.health()),
            None => ChipHealth::Closed,
        };
        let d = PyDict::new(py);
        match health {
            ChipHealth::Healthy => d.set_item("state", "ok")?,
            ChipHealth::Closed => d.set_item("state", "closed")?,
            ChipHealth::Dead { endpoint, report } => {
                d.set_item("state", "dead")?;
                d.set_item("endpoint", endpoint)?;
                d.set_item("report", report)?;
            }
        }
        Ok(d)
    }

    /// The child's process id (`None` once closed).
    #[getter]
    fn child_pid(&self, py: Python<'_>) -> Option<u32> {
        let chip = lock(&self.chip).clone()?;
        py.detach(|| chip.pid())
    }

    /// How messages name the chip (`"chip 0 (device 0, pid 42)"`).
    #[getter]
    fn endpoint(&self, py: Python<'_>) -> PyResult<String> {
        let chip = self.live(py)?;
        Ok(py.detach(|| chip.endpoint()))
    }
}

impl Drop for NativeIsolatedWorker {
    /// A chip Python drops without `close`: dropping its engine closes it — the runs in
    /// flight are waited for, the child stopped and reaped, threads joined. So the reference
    /// goes detached.
    fn drop(&mut self) {
        drop_detached(take_last(&mut self.chip));
    }
}

/// A submitted run of an `IsolatedChipWorker`: the level-2 `RunHandle`'s methods.
#[pyclass(module = "simpler._native", name = "IsolatedRunHandle", frozen)]
pub struct NativeIsolatedRunHandle {
    handle: IsolatedRunHandle,
}

#[pymethods]
impl NativeIsolatedRunHandle {
    /// The run's epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.handle.epoch()
    }

    /// True once the run is terminal; never waits for the run (it takes the run's outcome
    /// lock, detached, as every call here that locks the engine's state).
    fn poll(&self, py: Python<'_>) -> bool {
        let handle = &self.handle;
        py.detach(|| handle.done())
    }

    /// Waits for the run (`timeout` seconds at most; `None`: as long as it takes) in slices
    /// of 50 ms, checking for signals between them. Raises `WaitTimeoutError` when the time
    /// is up, the run's error when it failed.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.wait_report(py, timeout).map(drop)
    }

    /// The report of the finished run (waiting as long as it takes); the run's error if it
    /// failed.
    fn result(&self, py: Python<'_>) -> PyResult<NativeRunReport> {
        self.wait_report(py, None)
    }
}

impl NativeIsolatedRunHandle {
    fn wait_report(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<NativeRunReport> {
        let handle = &self.handle;
        let slice = |d: Duration| match py.detach(|| handle.wait(Some(d))) {
            Ok(r) => Slice::Done(Ok(NativeRunReport::from(r))),
            Err(WorkerError::WaitTimeout(_)) => Slice::Pending,
            Err(e) => Slice::Done(Err(error::worker_error(py, e))),
        };
        wait_in_slices(py, timeout, slice, || {
            Raise::new(
                "WaitTimeoutError",
                format!(
                    "the run (epoch {}) was not finished within {} s; it is still in flight",
                    handle.epoch(),
                    timeout.unwrap_or_default()
                ),
            )
            .float("timeout_s", timeout.unwrap_or_default())
        })
    }
}
