//! The messages a parent and a child process exchange through their mailbox, and their
//! codec (postcard over serde; `docs/l3-worker.md` §5). A task's host tensors cross as
//! [`WireTensor`]s — where the child finds the bytes ([`SharedRef`]) and the view — never as
//! bytes; device tensors cross as their address on the child's chip.
//!
//! This module defines the shapes and the conversions of configuration types that have no
//! serde form of their own ([`WorkerConfig`], [`CallConfig`]); errors are `wire_error`'s.
//! It never touches a mailbox or a mapping.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use simpler_abi::DataType;
use simpler_device::sim::{ExecutorKind, Memcheck};
use simpler_device::Topology;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{CallConfig, RingValue, Runtime, RuntimeEnv, WorkerConfig};

use crate::memory::SharedRef;
use crate::process::wire_error::WireError;
use crate::tensor::Tag;
use crate::CallableKey;

/// A host tensor of a task as a child process receives it: `shared` names the bytes of the
/// task's host memory (a span of a shared region the child maps), and the view lies
/// `byte_offset` bytes into that span with `shape` and `strides` (in elements) of `dtype`,
/// used as `tag`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireTensor {
    /// Where the child finds the tensor's memory (the whole host memory object, not just
    /// the view).
    pub shared: SharedRef,
    /// Bytes from the start of `shared`'s span to the view's first element.
    pub byte_offset: u64,
    /// Shape, in elements.
    pub shape: Vec<u64>,
    /// Strides, in elements.
    pub strides: Vec<u64>,
    /// Element type.
    #[serde(with = "dtype_wire")]
    pub dtype: DataType,
    /// How the task uses it.
    pub tag: Tag,
}

/// One argument of a sub task as a sub worker process receives it, in signature order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireArg {
    /// A host tensor over shared memory.
    Tensor(WireTensor),
    /// A scalar's raw 64 bits.
    Scalar(u64),
}

/// One argument of a chip task as a chip process receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ChipArg {
    /// A host tensor over shared memory.
    Host(WireTensor),
    /// A view of device memory of the child's chip: the allocation (`ptr`, `nbytes`) and the
    /// view inside it.
    Device {
        /// The allocation's first byte.
        ptr: u64,
        /// The allocation's length.
        nbytes: u64,
        /// Bytes from `ptr` to the view's first element.
        byte_offset: u64,
        /// Shape, in elements.
        shape: Vec<u64>,
        /// Strides, in elements.
        strides: Vec<u64>,
        /// Element type.
        #[serde(with = "dtype_wire")]
        dtype: DataType,
        /// How the task uses it.
        tag: Tag,
    },
    /// A scalar's raw 64 bits.
    Scalar(u64),
}

/// What a child is started as: the first request every child receives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Start {
    /// Chip `index` with its configuration.
    Chip {
        /// The chip's worker id.
        index: u32,
        /// Its chip's configuration.
        config: WireWorkerConfig,
    },
    /// Sub worker `index`.
    Sub {
        /// The sub worker's id.
        index: u32,
    },
}

/// A callable as it crosses to a child.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WireCallable {
    /// A chip callable: its name and the bytes of the bundle holding its library images and
    /// signature (`docs/bundle-format.md`).
    Chip {
        /// The callable's name.
        name: String,
        /// `Bundle::to_bytes`.
        bundle: Vec<u8>,
    },
    /// A callable a binding serialized.
    Sub {
        /// The function's qualified name.
        name: String,
        /// The serialized function.
        payload: Vec<u8>,
    },
}

/// Bytes a request carries: inline, or in a temporary shared region of the parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Payload {
    /// The bytes themselves.
    Inline(Vec<u8>),
    /// Where the child finds them.
    Staged(SharedRef),
}

/// A parent's request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Request {
    /// The child's role (the first request).
    Start(Start),
    /// Make `callable` runnable under `key`.
    Register {
        /// The engine's key.
        key: CallableKey,
        /// The callable.
        callable: WireCallable,
    },
    /// Forget `key`.
    Unregister {
        /// The engine's key.
        key: CallableKey,
    },
    /// Run chip callable `key` on `args`.
    Run {
        /// The engine's key.
        key: CallableKey,
        /// The arguments, in signature order.
        args: Vec<ChipArg>,
        /// The run's options.
        config: WireCallConfig,
    },
    /// Run sub callable `key` on `args`.
    RunSub {
        /// The engine's key.
        key: CallableKey,
        /// The arguments, in signature order.
        args: Vec<WireArg>,
    },
    /// Allocate `nbytes` of zeroed device memory.
    Malloc {
        /// Bytes.
        nbytes: u64,
    },
    /// Free the allocation at `ptr`.
    Free {
        /// Its first byte.
        ptr: u64,
    },
    /// Copy `data` to device memory at `dst`.
    CopyTo {
        /// The destination.
        dst: u64,
        /// The bytes.
        data: Payload,
    },
    /// Copy `nbytes` of device memory at `src` back: into the parent's region `into`, or
    /// inline in the response when `None`.
    CopyFrom {
        /// The source.
        src: u64,
        /// Bytes.
        nbytes: u64,
        /// Where to write them.
        into: Option<SharedRef>,
    },
    /// Map the parent's region `shared` (all of it) as a comm window and import it into the
    /// chip; answered with `Ptr` (its base in the child).
    MapWindow {
        /// The whole region.
        shared: SharedRef,
    },
    /// Release and unmap the window `MapWindow` answered `ptr` for.
    UnmapWindow {
        /// Its base in the child.
        ptr: u64,
    },
    /// Stop and exit.
    Shutdown,
    /// Run chip callables one after another (pipelined on the chip), each as `Run` would:
    /// answered with `RanBatch`, one response per run, in order.
    RunBatch {
        /// The runs.
        runs: Vec<WireRun>,
    },
}

/// One run of a [`Request::RunBatch`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct WireRun {
    /// The engine's key.
    pub(crate) key: CallableKey,
    /// The arguments, in signature order.
    pub(crate) args: Vec<ChipArg>,
    /// The run's options.
    pub(crate) config: WireCallConfig,
}

/// A child's response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Response {
    /// Started: the chip's device id (chips only) and the child's pid.
    Ready {
        /// The chip's device id.
        device_id: Option<u32>,
        /// The child's process id.
        pid: u32,
    },
    /// Done.
    Ok,
    /// A device address (malloc).
    Ptr(u64),
    /// Bytes (copy_from, inline).
    Data(Vec<u8>),
    /// A chip run done: the tasks its orchestration submitted and, for a traced run, its
    /// trace (the trace model as JSON; `None` for an untraced run, or a trace too big for
    /// the response area).
    Ran {
        /// `simpler_host::RunReport::tasks`.
        tasks: u64,
        /// `serde_json` of the run's `simpler_host::trace_model::Trace`.
        trace: Option<Vec<u8>>,
    },
    /// Failed.
    Err(WireError),
    /// The runs of a `RunBatch`, in order: each `Ran` or `Err`.
    RanBatch(Vec<Response>),
}

/// A message's bytes.
pub(crate) fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    postcard::to_allocvec(message).expect("the wire messages always encode")
}

/// A message from its bytes.
///
/// # Errors
/// A text naming what did not decode.
pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| {
        format!(
            "a {what} of {} bytes does not decode ({e}); are parent and child the same build?",
            bytes.len()
        )
    })
}

mod dtype_wire {
    use serde::{Deserialize, Deserializer, Serializer};
    use simpler_abi::DataType;

    pub(super) fn serialize<S: Serializer>(d: &DataType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(*d as u32)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DataType, D::Error> {
        let raw = u32::deserialize(d)?;
        DataType::from_raw(raw)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown dtype code {raw}")))
    }
}

/// [`WorkerConfig`] on the wire: every field, the sim enums by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct WireWorkerConfig {
    clusters: u32,
    aicpu_threads: u32,
    aicpu_thread_num: u32,
    heap_size: u64,
    task_window: u32,
    run_timeout: Duration,
    scheduler_timeout: Duration,
    op_execute_timeout: Duration,
    tensor_data_timeout: Duration,
    launch_depth: u32,
    always_synchronize: bool,
    /// 0 off, 1 after, 2 before.
    sim_memcheck: u8,
    /// 0 pool, 1 one thread per core.
    sim_executor: u8,
    /// 0 tensormap_and_ringbuffer, 1 host_build_graph.
    #[serde(default)]
    runtime: u8,
    #[serde(default)]
    enable_sdma: bool,
}

/// A runtime variant on the wire.
fn runtime_code(r: Runtime) -> u8 {
    match r {
        Runtime::TensormapAndRingbuffer => 0,
        Runtime::HostBuildGraph => 1,
    }
}

/// The runtime variant of a wire code.
fn runtime_of(code: u8) -> Result<Runtime, String> {
    match code {
        0 => Ok(Runtime::TensormapAndRingbuffer),
        1 => Ok(Runtime::HostBuildGraph),
        n => Err(format!("unknown runtime code {n}")),
    }
}

impl From<&WorkerConfig> for WireWorkerConfig {
    fn from(c: &WorkerConfig) -> WireWorkerConfig {
        // Destructured whole, so a new field of WorkerConfig fails to compile here.
        let WorkerConfig {
            topology,
            aicpu_thread_num,
            heap_size,
            task_window,
            run_timeout,
            scheduler_timeout,
            op_execute_timeout,
            tensor_data_timeout,
            launch_depth,
            always_synchronize,
            sim_memcheck,
            sim_executor,
            enable_sdma,
            runtime,
        } = c.clone();
        WireWorkerConfig {
            clusters: topology.clusters,
            aicpu_threads: topology.aicpu_threads,
            aicpu_thread_num,
            heap_size,
            task_window,
            run_timeout,
            scheduler_timeout,
            op_execute_timeout,
            tensor_data_timeout,
            launch_depth,
            always_synchronize,
            sim_memcheck: match sim_memcheck {
                Memcheck::Off => 0,
                Memcheck::After => 1,
                Memcheck::Before => 2,
            },
            sim_executor: match sim_executor {
                ExecutorKind::Pool => 0,
                ExecutorKind::ThreadPerCore => 1,
            },
            runtime: runtime_code(runtime),
            enable_sdma,
        }
    }
}

impl WireWorkerConfig {
    /// The configuration (its validation is the chip's, at `ChipWorker::new`).
    ///
    /// # Errors
    /// A text naming an unknown enum code.
    pub(crate) fn to_config(&self) -> Result<WorkerConfig, String> {
        Ok(WorkerConfig {
            topology: Topology {
                clusters: self.clusters,
                aicpu_threads: self.aicpu_threads,
            },
            aicpu_thread_num: self.aicpu_thread_num,
            heap_size: self.heap_size,
            task_window: self.task_window,
            run_timeout: self.run_timeout,
            scheduler_timeout: self.scheduler_timeout,
            op_execute_timeout: self.op_execute_timeout,
            tensor_data_timeout: self.tensor_data_timeout,
            launch_depth: self.launch_depth,
            always_synchronize: self.always_synchronize,
            sim_memcheck: match self.sim_memcheck {
                0 => Memcheck::Off,
                1 => Memcheck::After,
                2 => Memcheck::Before,
                n => return Err(format!("unknown sim_memcheck code {n}")),
            },
            sim_executor: match self.sim_executor {
                0 => ExecutorKind::Pool,
                1 => ExecutorKind::ThreadPerCore,
                n => return Err(format!("unknown sim_executor code {n}")),
            },
            enable_sdma: self.enable_sdma,
            runtime: runtime_of(self.runtime)?,
        })
    }
}

/// [`RingValue`] on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum WireRingValue {
    All(u64),
    PerRing([u64; 4]),
}

impl From<RingValue> for WireRingValue {
    fn from(v: RingValue) -> WireRingValue {
        match v {
            RingValue::All(v) => WireRingValue::All(v),
            RingValue::PerRing(v) => WireRingValue::PerRing(v),
        }
    }
}

impl From<WireRingValue> for RingValue {
    fn from(v: WireRingValue) -> RingValue {
        match v {
            WireRingValue::All(v) => RingValue::All(v),
            WireRingValue::PerRing(v) => RingValue::PerRing(v),
        }
    }
}

/// [`CallConfig`] on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WireCallConfig {
    aicpu_thread_num: u32,
    ring_task_window: Option<WireRingValue>,
    ring_heap: Option<WireRingValue>,
    ring_dep_pool: Option<WireRingValue>,
    /// [`CallConfig::trace_level`] as its number (0 off .. 4 orchestrator).
    #[serde(default)]
    trace_level: u8,
    #[serde(default)]
    trace_buffer_records: u32,
    /// [`RuntimeEnv::ready_queue`].
    #[serde(default)]
    ready_queue: Option<u64>,
    /// [`CallConfig::runtime`]: none, or 1 + the variant's code.
    #[serde(default)]
    runtime: u8,
}

impl From<&CallConfig> for WireCallConfig {
    fn from(c: &CallConfig) -> WireCallConfig {
        let CallConfig {
            aicpu_thread_num,
            runtime_env:
                RuntimeEnv {
                    ring_task_window,
                    ring_heap,
                    ring_dep_pool,
                    ready_queue,
                },
            trace_level,
            trace_buffer_records,
            runtime,
        } = *c;
        WireCallConfig {
            aicpu_thread_num,
            ring_task_window: ring_task_window.map(Into::into),
            ring_heap: ring_heap.map(Into::into),
            ring_dep_pool: ring_dep_pool.map(Into::into),
            ready_queue,
            trace_level: trace_level as u8,
            trace_buffer_records,
            runtime: runtime.map_or(0, |r| 1 + runtime_code(r)),
        }
    }
}

impl From<WireCallConfig> for CallConfig {
    fn from(c: WireCallConfig) -> CallConfig {
        CallConfig {
            aicpu_thread_num: c.aicpu_thread_num,
            runtime_env: RuntimeEnv {
                ring_task_window: c.ring_task_window.map(Into::into),
                ring_heap: c.ring_heap.map(Into::into),
                ring_dep_pool: c.ring_dep_pool.map(Into::into),
                ready_queue: c.ready_queue,
            },
            trace_level: TraceLevel::from_u8(c.trace_level).unwrap_or_default(),
            trace_buffer_records: c.trace_buffer_records,
            runtime: c.runtime.checked_sub(1).and_then(|r| runtime_of(r).ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_survive_the_wire() {
        let config = WorkerConfig {
            topology: Topology {
                clusters: 3,
                aicpu_threads: 5,
            },
            aicpu_thread_num: 3,
            heap_size: 1 << 22,
            run_timeout: Duration::from_millis(1234),
            sim_memcheck: Memcheck::Before,
            sim_executor: ExecutorKind::ThreadPerCore,
            launch_depth: 1,
            ..WorkerConfig::default()
        };
        let wire: WireWorkerConfig =
            decode(&encode(&WireWorkerConfig::from(&config)), "config").unwrap();
        let back = wire.to_config().unwrap();
        assert_eq!(format!("{back:?}"), format!("{config:?}"));

        let call = CallConfig {
            aicpu_thread_num: 2,
            runtime_env: RuntimeEnv {
                ring_task_window: Some(RingValue::PerRing([4, 8, 16, 32])),
                ring_heap: Some(RingValue::All(4096)),
                ring_dep_pool: None,
                ready_queue: Some(64),
            },
            trace_level: TraceLevel::Scheduler,
            trace_buffer_records: 64,
            runtime: Some(simpler_host::Runtime::HostBuildGraph),
        };
        let wire: WireCallConfig = decode(&encode(&WireCallConfig::from(&call)), "c").unwrap();
        assert_eq!(CallConfig::from(wire), call);
    }

    #[test]
    fn tensors_keep_their_view_and_bad_bytes_are_named() {
        let t = WireTensor {
            shared: SharedRef {
                region: 9,
                fd: 7,
                region_len: 4096,
                offset: 1024,
                len: 2048,
            },
            byte_offset: 64,
            shape: vec![4, 8],
            strides: vec![16, 1],
            dtype: DataType::Bfloat16,
            tag: Tag::InOut,
        };
        let req = Request::RunSub {
            key: 3,
            args: vec![WireArg::Tensor(t.clone()), WireArg::Scalar(u64::MAX)],
        };
        let back: Request = decode(&encode(&req), "request").unwrap();
        assert_eq!(back, req);
        let err = decode::<Request>(&[200, 1, 2], "request").unwrap_err();
        assert!(
            err.contains("a request of 3 bytes does not decode"),
            "{err}"
        );
    }
}
