//! # simpler-py — the native half of the `simpler` Python package
//!
//! Built by maturin as `simpler._native` (an abi3 extension for CPython >= 3.9). It is a
//! thin layer over `simpler-host` and `simpler-worker`: the Python package (`python/simpler/`) owns the public
//! API — `Worker`, `TaskArgs`, `ChipCallable`, the kernel compiler, scene tests — and calls
//! down into these few classes:
//!
//! - [`Callable`](callable::NativeCallable): a callable of shared-library images, the host's
//!   `Bundle` (build, read/write bundle files);
//! - [`ChipWorker`](worker::NativeWorker): one chip — register, run, submit (also on a
//!   caller's stream, for a worker borrowing a caller's context), device memory, close;
//! - [`RunHandle`](handle::NativeRunHandle): a submitted run — poll, wait, result (a
//!   [`RunReport`](handle::NativeRunReport));
//! - [`GraphReport`](graph::NativeGraphReport) and [`RecordedRun`](graph::NativeRecordedRun):
//!   a `host_build_graph` run's graph and a recorded graph to replay; `RUNTIMES`, the
//!   runtime variants' names;
//! - [`WorkerConfig`](config::NativeWorkerConfig), [`CallConfig`](config::NativeCallConfig),
//!   [`RuntimeEnv`](config::NativeRuntimeEnv): the host's option types, with its defaults;
//! - [`HostTensor`](args::NativeHostTensor), [`DeviceTensor`](args::NativeDeviceTensor),
//!   [`RawScalar`](args::NativeRawScalar), `encode_scalar` and `decode_scalar`: a run's
//!   arguments.
//! - [`SimContext`](sim_context::NativeSimContext), `current_context` and
//!   `set_current_context`: a caller-owned device context on the sim platform and the
//!   thread's current context, for borrowed workers and caller streams (`simpler.sim`);
//! - [`collectives`]: the collectives' argument rules and limits for `simpler.collectives`;
//! - [`toolchain`]: the kernel compiler and cache, manifests, example builds, `allclose`
//!   and scalar parsing of `simpler-toolchain`.
//!
//! The level-3 engine (`simpler-worker`, `Worker(level=3, ...)`):
//!
//! - [`HostWorker`](host_worker::NativeHostWorker): chips and sub workers of one host —
//!   register (`HostCallable`), init, submit a Python orchestration, shared buffers, close;
//! - [`Orchestrator`](orchestrator::NativeOrchestrator): valid only while the orchestration
//!   function runs — tasks, scopes, heap-ring allocations, copies;
//! - [`HostRunHandle`](host_handle::NativeHostRunHandle) and its report;
//! - [`HostTaskArgs`](task_args::NativeTaskArgs), [`ChildTensor`](task_args::NativeChildTensor),
//!   [`SharedMemory`](host_memory::NativeSharedMemory): a task's arguments and the memory
//!   they name (numpy arrays in place, shared memory children map);
//! - [`SubChild`](sub_child::NativeSubChild) and `serve_chip_child`: the child side, for
//!   `python -m simpler._child`;
//! - [`IsolatedChipWorker`](isolated::NativeIsolatedWorker) and its
//!   [`IsolatedRunHandle`](isolated::NativeIsolatedRunHandle): one chip in a child process
//!   with the `ChipWorker` methods, for `Worker(level=2, chip_isolation="process")`.
//!
//! Values cross as these classes with named getters, never as positional tuples. The host
//! (`simpler-host`) is the one validator of options and arguments; this crate only converts
//! Python objects, and every Rust error becomes a Python exception in one module, [`error`],
//! with one class per error kind (defined in `simpler/errors.py`). Every call that may block
//! detaches from the interpreter, so other Python threads keep running while a run executes;
//! so does the `Drop` of every class whose teardown may wait (a worker or handle Python
//! drops unclosed: [`sync::drop_detached`]), since what it waits for may need the
//! interpreter.
//! The Python side of this contract is described in `docs/python.md`.
//!
//! Nothing outside this crate imports `pyo3`: the engine crates run without Python.

mod args;
mod array;
mod callable;
mod collectives;
mod config;
mod error;
mod graph;
mod handle;
mod host_callable;
mod host_handle;
mod host_memory;
mod host_worker;
mod isolated;
mod next_level;
mod orchestrator;
mod region;
mod sim_context;
mod sub_child;
mod sync;
mod task_args;
mod toml_value;
mod toolchain;
mod worker;

use pyo3::prelude::*;

/// The `simpler._native` module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<callable::NativeCallable>()?;
    m.add_class::<worker::NativeWorker>()?;
    m.add_class::<handle::NativeRunHandle>()?;
    m.add_class::<handle::NativeRunReport>()?;
    m.add_class::<graph::NativeGraphReport>()?;
    m.add_class::<graph::NativeRecordedRun>()?;
    m.add_class::<config::NativeWorkerConfig>()?;
    m.add_class::<config::NativeCallConfig>()?;
    m.add_class::<config::NativeRuntimeEnv>()?;
    m.add_class::<args::NativeHostTensor>()?;
    m.add_class::<args::NativeDeviceTensor>()?;
    m.add_class::<args::NativeRawScalar>()?;
    m.add_class::<host_memory::NativeSharedMemory>()?;
    m.add_class::<task_args::NativeTaskArgs>()?;
    m.add_class::<task_args::NativeChildTensor>()?;
    m.add_class::<host_worker::NativeHostWorker>()?;
    m.add_class::<host_callable::NativeHostCallable>()?;
    m.add_class::<host_handle::NativeHostRunHandle>()?;
    m.add_class::<host_handle::NativeHostRunReport>()?;
    m.add_class::<isolated::NativeIsolatedWorker>()?;
    m.add_class::<isolated::NativeIsolatedRunHandle>()?;
    m.add_class::<orchestrator::NativeOrchestrator>()?;
    m.add_class::<orchestrator::NativeCommDomain>()?;
    m.add_class::<region::NativeWorkerChipRegion>()?;
    m.add_class::<region::NativeWorkerChipQueue>()?;
    m.add_class::<sim_context::NativeSimContext>()?;
    m.add_function(wrap_pyfunction!(sim_context::current_context, m)?)?;
    m.add_function(wrap_pyfunction!(sim_context::set_current_context, m)?)?;
    m.add_class::<sub_child::NativeSubChild>()?;
    m.add_class::<sub_child::NativeSubRequest>()?;
    m.add_class::<sub_child::NativeMappedTensor>()?;
    m.add_function(wrap_pyfunction!(sub_child::serve_chip_child, m)?)?;
    m.add_function(wrap_pyfunction!(args::encode_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(args::decode_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(toml_value::parse_toml, m)?)?;
    toolchain::register(m)?;
    collectives::register(m)?;
    m.add("MAX_TENSOR_DIMS", simpler_abi::MAX_TENSOR_DIMS)?;
    m.add("MAX_CALLABLES", simpler_host::MAX_CALLABLES)?;
    m.add("MAX_FUNC_ID", simpler_abi::MAX_FUNC_ID)?;
    m.add(
        "RUNTIMES",
        simpler_host::Runtime::ALL.map(simpler_host::Runtime::name),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
