//! `simpler._native.WorkerConfig`, `CallConfig` and `RuntimeEnv`: the host's
//! [`WorkerConfig`], [`CallConfig`] and [`RuntimeEnv`] as Python objects with named getters.
//!
//! Every option left out (`None`) takes the host's default — `WorkerConfig::default()`,
//! `CallConfig::default()` — so the numbers live in one place. Constructing only converts
//! Python values (an integer that does not fit its field, a ring value that is neither one
//! integer nor four, seconds that are not a finite number are `InvalidConfigError`s naming
//! the field); the rules are the host's, applied by [`NativeCallConfig::check_fields`],
//! [`NativeCallConfig::validate`] and when a worker starts (`ChipWorker(config)`). A runtime
//! variant is named as the host names it ([`Runtime`]'s `FromStr`, `docs/chip-runtime.md`
//! §17).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};
use simpler_device::sim::{ExecutorKind, Memcheck};
use simpler_device::Topology;
use simpler_host::{CallConfig, RingValue, Runtime, RuntimeEnv, WorkerConfig};

use crate::error::{self, Raise};

/// An `InvalidConfigError` with `message`.
fn invalid(py: Python<'_>, message: String) -> PyErr {
    Raise::new("InvalidConfigError", message).into_err(py)
}

/// A non-negative integer option of at most `max` (any object with `__index__` but `bool`).
fn uint(py: Python<'_>, field: &str, value: &Bound<'_, PyAny>, max: u64) -> PyResult<u64> {
    let bad = || {
        invalid(
            py,
            format!(
                "{field} must be an int in 0..={max}, got {}",
                value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ),
        )
    };
    if value.is_instance_of::<PyBool>() {
        return Err(bad());
    }
    let v: i128 = value.extract().map_err(|_| bad())?;
    u64::try_from(v).ok().filter(|&v| v <= max).ok_or_else(bad)
}

/// A `u32` option (see [`uint`]).
pub(crate) fn uint32(py: Python<'_>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<u32> {
    uint(py, field, value, u32::MAX.into()).map(|v| v as u32)
}

/// An option in seconds (any real number), as a `Duration`.
fn secs(py: Python<'_>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<std::time::Duration> {
    let v: f64 = match value.extract() {
        Ok(v) if !value.is_instance_of::<PyBool>() && !value.is_instance_of::<PyString>() => v,
        _ => {
            return Err(invalid(
                py,
                format!("{field} must be a number of seconds, got {}", value.repr()?),
            ))
        }
    };
    simpler_host::config::seconds(field, v).map_err(|e| error::host_error(py, e))
}

/// The `sim_memcheck` option: a bool (`True` is `"after"`) or a mode name
/// ([`Memcheck::parse`]: `"off"`, `"after"`, `"before"`, ...).
pub(crate) fn memcheck(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Memcheck> {
    if value.is_instance_of::<PyBool>() {
        return Ok(if value.extract::<bool>()? {
            Memcheck::After
        } else {
            Memcheck::Off
        });
    }
    let bad = |why: String| invalid(py, format!("sim_memcheck: {why}"));
    match value.extract::<String>() {
        Ok(text) => Memcheck::parse(&text).map_err(bad),
        Err(_) => Err(bad(format!(
            "must be a bool or \"off\", \"after\" or \"before\", got {}",
            value.repr()?
        ))),
    }
}

/// An option named by a string, parsed by its type's `FromStr`; anything else is an
/// `InvalidConfigError` naming `field` (with the parser's message, or `expected` — what the
/// option takes — for a value that is not a string).
fn named<T: std::str::FromStr<Err = String>>(
    py: Python<'_>,
    field: &str,
    value: &Bound<'_, PyAny>,
    expected: &str,
) -> PyResult<T> {
    let bad = |why: String| invalid(py, format!("{field}: {why}"));
    match value.extract::<String>() {
        Ok(text) => text.parse().map_err(bad),
        Err(_) => Err(bad(format!("must be {expected}, got {}", value.repr()?))),
    }
}

/// The `sim_executor` option: an executor name ([`ExecutorKind`]'s `FromStr`: `"pool"` or
/// `"threads"`); anything else is an `InvalidConfigError` naming `sim_executor` and the value.
pub(crate) fn executor(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<ExecutorKind> {
    named(py, "sim_executor", value, "\"pool\" or \"threads\"")
}

/// A runtime variant option (`field`: `runtime`) by its name ([`Runtime`]'s `FromStr`);
/// anything else is an `InvalidConfigError` naming the field and listing the names.
pub(crate) fn runtime(py: Python<'_>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<Runtime> {
    named(
        py,
        field,
        value,
        &format!("a runtime name ({})", runtime_names()),
    )
}

/// The runtime variants' names, quoted and comma-separated, for messages.
fn runtime_names() -> String {
    Runtime::ALL
        .iter()
        .map(|r| format!("\"{}\"", r.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The configuration of one chip: the host's [`WorkerConfig`] and the device id.
#[pyclass(module = "simpler._native", name = "WorkerConfig", frozen)]
#[derive(Clone)]
pub struct NativeWorkerConfig {
    pub(crate) config: WorkerConfig,
    pub(crate) device_id: u32,
}

impl NativeWorkerConfig {
    /// The effective configuration of a started worker.
    pub(crate) fn of(config: WorkerConfig, device_id: u32) -> NativeWorkerConfig {
        NativeWorkerConfig { config, device_id }
    }
}

#[pymethods]
impl NativeWorkerConfig {
    /// Options left out take the host's defaults (`WorkerConfig::default()`: 8 clusters,
    /// 4 AICPU threads, all of them per run, 256 MiB of heap, the runtime's task window,
    /// launch depth 2, memcheck off unless `SIMPLER_SIM_MEMCHECK` says otherwise, the pool
    /// executor unless `SIMPLER_SIM_EXECUTOR` says otherwise, and the timeouts of the
    /// `SIMPLER_*_TIMEOUT_*` environment variables or their defaults — read exactly as the
    /// CLI and Rust read them). `heap_size` is in bytes, the timeouts in
    /// seconds: `run_timeout_s` (stream sync), `scheduler_timeout_s` (no progress while nothing
    /// runs), `op_execute_timeout_s` (one kernel dispatch), `tensor_data_timeout_s`
    /// (`get/set_tensor_data`); `sim_memcheck` a bool or `"off"`/`"after"`/`"before"`;
    /// `sim_executor` `"pool"` or `"threads"` (`docs/sim-device.md` §11); `runtime` the
    /// variant of runs whose callable and call configuration name none
    /// (`"tensormap_and_ringbuffer"`, the default, or `"host_build_graph"`; another name is
    /// an `InvalidConfigError` listing them); `enable_sdma` a bool that provisions the
    /// chip's SDMA engine (default `False`; `docs/chip-runtime.md` §18). The values are
    /// checked when a worker starts.
    #[new]
    #[pyo3(signature = (*, device_id=None, clusters=None, aicpu_threads=None,
                        aicpu_thread_num=None, heap_size=None, task_window=None,
                        run_timeout_s=None, launch_depth=None, scheduler_timeout_s=None,
                        op_execute_timeout_s=None, tensor_data_timeout_s=None,
                        sim_memcheck=None, sim_executor=None, runtime=None,
                        enable_sdma=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        device_id: Option<Bound<'_, PyAny>>,
        clusters: Option<Bound<'_, PyAny>>,
        aicpu_threads: Option<Bound<'_, PyAny>>,
        aicpu_thread_num: Option<Bound<'_, PyAny>>,
        heap_size: Option<Bound<'_, PyAny>>,
        task_window: Option<Bound<'_, PyAny>>,
        run_timeout_s: Option<Bound<'_, PyAny>>,
        launch_depth: Option<Bound<'_, PyAny>>,
        scheduler_timeout_s: Option<Bound<'_, PyAny>>,
        op_execute_timeout_s: Option<Bound<'_, PyAny>>,
        tensor_data_timeout_s: Option<Bound<'_, PyAny>>,
        sim_memcheck: Option<Bound<'_, PyAny>>,
        sim_executor: Option<Bound<'_, PyAny>>,
        runtime: Option<Bound<'_, PyAny>>,
        enable_sdma: Option<Bound<'_, PyAny>>,
    ) -> PyResult<NativeWorkerConfig> {
        let d = WorkerConfig::default();
        let secs_or = |field: &str, v: &Option<Bound<'_, PyAny>>, default| match v {
            Some(v) => secs(py, field, v),
            None => Ok(default),
        };
        let u32_or = |field: &str, v: &Option<Bound<'_, PyAny>>, default: u32| match v {
            Some(v) => uint32(py, field, v),
            None => Ok(default),
        };
        let config = WorkerConfig {
            topology: Topology {
                clusters: u32_or("clusters", &clusters, d.topology.clusters)?,
                aicpu_threads: u32_or("aicpu_threads", &aicpu_threads, d.topology.aicpu_threads)?,
            },
            aicpu_thread_num: u32_or("aicpu_thread_num", &aicpu_thread_num, d.aicpu_thread_num)?,
            heap_size: match &heap_size {
                Some(v) => uint(py, "heap_size", v, u64::MAX)?,
                None => d.heap_size,
            },
            task_window: u32_or("task_window", &task_window, d.task_window)?,
            run_timeout: secs_or("run_timeout_s", &run_timeout_s, d.run_timeout)?,
            scheduler_timeout: secs_or(
                "scheduler_timeout_s",
                &scheduler_timeout_s,
                d.scheduler_timeout,
            )?,
            op_execute_timeout: secs_or(
                "op_execute_timeout_s",
                &op_execute_timeout_s,
                d.op_execute_timeout,
            )?,
            tensor_data_timeout: secs_or(
                "tensor_data_timeout_s",
                &tensor_data_timeout_s,
                d.tensor_data_timeout,
            )?,
            launch_depth: u32_or("launch_depth", &launch_depth, d.launch_depth)?,
            sim_memcheck: match &sim_memcheck {
                Some(v) => memcheck(py, v)?,
                None => d.sim_memcheck,
            },
            sim_executor: match &sim_executor {
                Some(v) => executor(py, v)?,
                None => d.sim_executor,
            },
            runtime: match &runtime {
                Some(v) => self::runtime(py, "runtime", v)?,
                None => d.runtime,
            },
            // A bool (numpy's too); not an int or a string.
            enable_sdma: match &enable_sdma {
                Some(v) => v.extract::<bool>().map_err(|_| {
                    let got = v.repr().map(|r| r.to_string()).unwrap_or_default();
                    invalid(py, format!("enable_sdma must be True or False, got {got}"))
                })?,
                None => d.enable_sdma,
            },
            ..d
        };
        Ok(NativeWorkerConfig {
            config,
            device_id: u32_or("device_id", &device_id, 0)?,
        })
    }

    /// Which chip (the sim platform has one; recorded, not used to pick hardware).
    #[getter]
    fn device_id(&self) -> u32 {
        self.device_id
    }

    /// Clusters of the chip (each 1 AIC + 2 AIV cores).
    #[getter]
    fn clusters(&self) -> u32 {
        self.config.topology.clusters
    }

    /// AICPU threads of the chip.
    #[getter]
    fn aicpu_threads(&self) -> u32 {
        self.config.topology.aicpu_threads
    }

    /// AICPU threads a run uses (1 orchestrator + schedulers); 0 means all of them.
    #[getter]
    fn aicpu_thread_num(&self) -> u32 {
        self.config.aicpu_thread_num
    }

    /// AICPU threads a run uses by default: `aicpu_thread_num`, or `aicpu_threads` for 0.
    #[getter]
    fn effective_aicpu_thread_num(&self) -> u32 {
        self.config.effective_aicpu_threads()
    }

    /// Bytes of device heap for runtime-allocated outputs.
    #[getter]
    fn heap_size(&self) -> u64 {
        self.config.heap_size
    }

    /// Task slots per ring (the default ring task window): the most tasks of one ring alive
    /// at once.
    #[getter]
    fn task_window(&self) -> u32 {
        self.config.task_window
    }

    /// Seconds a run may take to complete before the device is declared unusable.
    #[getter]
    fn run_timeout_s(&self) -> f64 {
        self.config.run_timeout.as_secs_f64()
    }

    /// Seconds in which nothing runs and nothing progresses before a run fails with
    /// SCHEDULER_TIMEOUT (`SIMPLER_SCHEDULER_TIMEOUT_MS`).
    #[getter]
    fn scheduler_timeout_s(&self) -> f64 {
        self.config.scheduler_timeout.as_secs_f64()
    }

    /// Seconds one kernel dispatch may run before the run fails with OP_EXECUTE_TIMEOUT
    /// (`SIMPLER_OP_EXECUTE_TIMEOUT_US`).
    #[getter]
    fn op_execute_timeout_s(&self) -> f64 {
        self.config.op_execute_timeout.as_secs_f64()
    }

    /// Seconds `get/set_tensor_data` may wait (`SIMPLER_TENSOR_DATA_TIMEOUT_MS`).
    #[getter]
    fn tensor_data_timeout_s(&self) -> f64 {
        self.config.tensor_data_timeout.as_secs_f64()
    }

    /// Runs on the device at once (1 or 2).
    #[getter]
    fn launch_depth(&self) -> u32 {
        self.config.launch_depth
    }

    /// Sim memcheck: `"off"`, `"after"` (allocations end at a guard page) or `"before"`
    /// (they start after one).
    #[getter]
    fn sim_memcheck(&self) -> &'static str {
        self.config.sim_memcheck.name()
    }

    /// Sim executor: `"pool"` (device threads are fibers on the process's shared pool of
    /// worker threads) or `"threads"` (one OS thread per core, AICPU thread and stream).
    #[getter]
    fn sim_executor(&self) -> &'static str {
        self.config.sim_executor.name()
    }

    /// The runtime variant of runs whose callable and call configuration name none:
    /// `"tensormap_and_ringbuffer"` or `"host_build_graph"`.
    #[getter]
    fn runtime(&self) -> &'static str {
        self.config.runtime.name()
    }

    /// Whether the chip's SDMA engine is provisioned (`enable_sdma`).
    #[getter]
    fn enable_sdma(&self) -> bool {
        self.config.enable_sdma
    }

    fn __repr__(&self) -> String {
        let c = &self.config;
        format!(
            "WorkerConfig(device_id={}, clusters={}, aicpu_threads={}, aicpu_thread_num={}, \
             heap_size={}, task_window={}, run_timeout_s={:?}, launch_depth={}, \
             sim_memcheck='{}', sim_executor='{}', runtime='{}', enable_sdma={})",
            self.device_id,
            c.topology.clusters,
            c.topology.aicpu_threads,
            c.aicpu_thread_num,
            c.heap_size,
            c.task_window,
            c.run_timeout.as_secs_f64(),
            c.launch_depth,
            c.sim_memcheck.name(),
            c.sim_executor.name(),
            c.runtime.name(),
            if c.enable_sdma { "True" } else { "False" }
        )
    }
}

/// One ring option: `None`, one integer for all four rings, or four (ring 0..3).
fn ring_value(
    py: Python<'_>,
    field: &str,
    value: Option<Bound<'_, PyAny>>,
) -> PyResult<Option<RingValue>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let bad = |value: &Bound<'_, PyAny>| -> PyErr {
        invalid(
            py,
            format!(
                "runtime_env.{field} must be one int or 4 ints (one per ring), got {}",
                value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ),
        )
    };
    let field = format!("runtime_env.{field}");
    if value.is_none() {
        return Ok(None);
    }
    if value.extract::<i128>().is_ok() || value.is_instance_of::<PyBool>() {
        return Ok(Some(RingValue::All(uint(py, &field, &value, u64::MAX)?)));
    }
    if value.is_instance_of::<PyString>() {
        return Err(bad(&value));
    }
    let items: Vec<Bound<'_, PyAny>> = value.extract().map_err(|_| bad(&value))?;
    let nums = items
        .iter()
        .map(|v| uint(py, &field, v, u64::MAX))
        .collect::<PyResult<Vec<u64>>>()?;
    match nums.as_slice() {
        [one] => Ok(Some(RingValue::All(*one))),
        [a, b, c, d] => Ok(Some(RingValue::PerRing([*a, *b, *c, *d]))),
        _ => Err(bad(&value)),
    }
}

/// A ring option as Python sees it: `None`, `[n]` or `[a, b, c, d]`.
fn ring_list(v: Option<RingValue>) -> Option<Vec<u64>> {
    v.map(|v| match v {
        RingValue::All(n) => vec![n],
        RingValue::PerRing(r) => r.to_vec(),
    })
}

/// Ring sizing of a run: the host's [`RuntimeEnv`].
#[pyclass(module = "simpler._native", name = "RuntimeEnv", frozen)]
#[derive(Clone)]
pub struct NativeRuntimeEnv {
    env: RuntimeEnv,
}

#[pymethods]
impl NativeRuntimeEnv {
    /// Each ring option is `None` (the `PTO2_RING_*` variable, then the worker's default),
    /// one integer for every ring, or four (ring 0..3). Windows count tasks, heaps bytes,
    /// pools dependency entries. `ready_queue` (`host_build_graph` runs) is `None` (the
    /// `PTO2_READY_QUEUE` variable, then 8192) or the most ready tasks one ready queue holds;
    /// the host checks its range (`CallConfig::check_fields`).
    #[new]
    #[pyo3(signature = (*, ring_task_window=None, ring_heap=None, ring_dep_pool=None,
                        ready_queue=None))]
    fn new(
        py: Python<'_>,
        ring_task_window: Option<Bound<'_, PyAny>>,
        ring_heap: Option<Bound<'_, PyAny>>,
        ring_dep_pool: Option<Bound<'_, PyAny>>,
        ready_queue: Option<Bound<'_, PyAny>>,
    ) -> PyResult<NativeRuntimeEnv> {
        Ok(NativeRuntimeEnv {
            env: RuntimeEnv {
                ring_task_window: ring_value(py, "ring_task_window", ring_task_window)?,
                ring_heap: ring_value(py, "ring_heap", ring_heap)?,
                ring_dep_pool: ring_value(py, "ring_dep_pool", ring_dep_pool)?,
                ready_queue: match &ready_queue {
                    Some(v) if !v.is_none() => {
                        Some(uint(py, "runtime_env.ready_queue", v, u64::MAX)?)
                    }
                    _ => None,
                },
            },
        })
    }

    /// The `host_build_graph` ready-queue cap: `None` (the default) or a task count.
    #[getter]
    fn ready_queue(&self) -> Option<u64> {
        self.env.ready_queue
    }

    /// Task window per ring: `None`, `[n]` or four values.
    #[getter]
    fn ring_task_window(&self) -> Option<Vec<u64>> {
        ring_list(self.env.ring_task_window)
    }

    /// Output-heap bytes per ring: `None`, `[n]` or four values.
    #[getter]
    fn ring_heap(&self) -> Option<Vec<u64>> {
        ring_list(self.env.ring_heap)
    }

    /// Dependency-pool entries per ring: `None`, `[n]` or four values.
    #[getter]
    fn ring_dep_pool(&self) -> Option<Vec<u64>> {
        ring_list(self.env.ring_dep_pool)
    }
}

/// A trace level from its name or number (`simpler_trace::TraceLevel`, `docs/tracing.md`
/// §1); `InvalidConfigError` naming `trace_level` for anything else.
pub(crate) fn parse_trace_level(
    py: Python<'_>,
    level: &str,
) -> PyResult<simpler_trace::TraceLevel> {
    level
        .parse()
        .map_err(|e: simpler_trace::ParseTraceLevelError| {
            error::host_error(
                py,
                simpler_host::HostError::InvalidConfig(format!("trace_level: {e}")),
            )
        })
}

/// Options of one run: the host's [`CallConfig`].
#[pyclass(module = "simpler._native", name = "CallConfig", frozen)]
pub struct NativeCallConfig {
    pub(crate) config: CallConfig,
}

#[pymethods]
impl NativeCallConfig {
    /// `aicpu_thread_num` left out takes the host's default (`CallConfig::default()`: 0, the
    /// worker's setting); `runtime_env` left out sizes no ring.
    /// `trace_level` is a level name or number (`simpler_trace::TraceLevel`); a bad one
    /// raises `InvalidConfigError`. `runtime` names the run's variant (`None`: the
    /// callable's, else the worker's); an unknown name raises `InvalidConfigError` listing
    /// the names.
    #[new]
    #[pyo3(signature = (*, aicpu_thread_num=None, runtime_env=None, trace_level=None,
                        runtime=None))]
    fn new(
        py: Python<'_>,
        aicpu_thread_num: Option<Bound<'_, PyAny>>,
        runtime_env: Option<PyRef<'_, NativeRuntimeEnv>>,
        trace_level: Option<&str>,
        runtime: Option<Bound<'_, PyAny>>,
    ) -> PyResult<NativeCallConfig> {
        let d = CallConfig::default();
        let trace_level = match trace_level {
            Some(t) => parse_trace_level(py, t)?,
            None => d.trace_level,
        };
        Ok(NativeCallConfig {
            config: CallConfig {
                aicpu_thread_num: match &aicpu_thread_num {
                    Some(v) => uint32(py, "aicpu_thread_num", v)?,
                    None => d.aicpu_thread_num,
                },
                runtime_env: runtime_env.map_or(d.runtime_env, |e| e.env),
                trace_level,
                runtime: match &runtime {
                    Some(v) if !v.is_none() => Some(self::runtime(py, "runtime", v)?),
                    _ => d.runtime,
                },
                ..d
            },
        })
    }

    /// AICPU threads of the run; 0 = the worker's setting.
    #[getter]
    fn aicpu_thread_num(&self) -> u32 {
        self.config.aicpu_thread_num
    }

    /// The run's trace level name ("off", "tasks", ...).
    #[getter]
    fn trace_level(&self) -> &'static str {
        self.config.trace_level.name()
    }

    /// The run's runtime variant name, or `None` (the callable's, else the worker's).
    #[getter]
    fn runtime(&self) -> Option<&'static str> {
        self.config.runtime.map(Runtime::name)
    }

    /// The ring sizing.
    #[getter]
    fn runtime_env(&self) -> NativeRuntimeEnv {
        NativeRuntimeEnv {
            env: self.config.runtime_env,
        }
    }

    /// Applies the rules that need no worker (`CallConfig::check_fields`); raises
    /// `InvalidConfigError` naming the field and the ring.
    fn check_fields(&self, py: Python<'_>) -> PyResult<()> {
        self.config
            .check_fields()
            .map_err(|e| error::host_error(py, e))
    }

    /// Applies every rule and `worker`'s limits (AICPU threads, heap), as a run on that
    /// worker would; raises `InvalidConfigError` naming the field.
    fn validate(&self, py: Python<'_>, worker: &NativeWorkerConfig) -> PyResult<()> {
        self.config
            .validate(&worker.config)
            .map_err(|e| error::host_error(py, e))
    }
}
