//! `host_build_graph` in the lane (`docs/chip-runtime.md` §17): the host build of a run's
//! graph during preparation, the upload of its image, and recorded graphs — an image kept
//! on the device with the argument shapes it was built for, replayed by later runs without
//! running the orchestration again.
//!
//! An image lives in its own device allocation, freed when the last holder lets go: the
//! run that uploaded it (until it is finalized), a [`RecordedRun`], or the lane when the
//! run was given up on (the device may still read it; kept until teardown).

use std::sync::Arc;
use std::time::{Duration, Instant};

use simpler_abi::{code_name, DataType, OrchArgs, RunLaunchDesc};
use simpler_device::{Device, DevicePtr};
use simpler_runtime::hbg::{BuildFailure, BuiltGraph};

use crate::args::{HostArg, OwnedArg};
use crate::registry::{CallableId, Registered};
use crate::HostError;

/// How a run gets its graph.
#[derive(Clone)]
pub(crate) enum GraphPlan {
    /// `tensormap_and_ringbuffer`: the device orchestrates.
    Device,
    /// `host_build_graph`: built on the host for this run.
    Build,
    /// Built on the host for this run and kept as a [`RecordedRun`].
    Record(CallableId),
    /// A recorded image, replayed.
    Replay(Arc<GraphImage>),
}

/// One graph image on the device.
pub(crate) struct GraphImage {
    device: Arc<dyn Device>,
    pub(crate) ptr: DevicePtr,
    pub(crate) bytes: u64,
    pub(crate) generation: u64,
    /// The generation of the lane (worker) that uploaded it.
    pub(crate) lane: u64,
    pub(crate) tasks: u32,
    /// Where it came from and what it may be replayed with.
    pub(crate) recording: Option<RecordingKey>,
}

impl Drop for GraphImage {
    fn drop(&mut self) {
        // A failed free leaks the image; nothing else can use the memory meanwhile.
        if let Err(e) = self.device.free(self.ptr) {
            tracing::warn!(error = %e, "freeing a graph image");
        }
    }
}

/// What a recording was built for.
#[derive(Clone, Debug)]
pub(crate) struct RecordingKey {
    pub(crate) callable: CallableId,
    pub(crate) name: String,
    /// Per argument, signature order.
    pub(crate) args: Vec<ArgKey>,
    /// Pairs of tensor arguments (indices into `args`) whose host buffers overlapped.
    pub(crate) overlaps: Vec<(usize, usize)>,
}

/// One argument as a recording knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ArgKey {
    Tensor { shape: Vec<u64>, dtype: DataType },
    Scalar(u64),
}

/// A graph recorded by [`ChipWorker::record`](crate::ChipWorker::record): its image stays
/// on the device, and [`ChipWorker::replay`](crate::ChipWorker::replay) runs it again on new
/// arguments of the same shapes and dtypes (and the same scalars), rebinding only the
/// argument addresses: the orchestration does not run. Cloning shares the image; it is freed
/// when the last clone and the last run using it are gone.
#[derive(Clone)]
pub struct RecordedRun {
    pub(crate) image: Arc<GraphImage>,
    pub(crate) stats: GraphReport,
}

impl std::fmt::Debug for RecordedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.image.recording.as_ref();
        f.debug_struct("RecordedRun")
            .field("callable", &key.map(|k| k.name.as_str()))
            .field("generation", &self.image.generation)
            .field("tasks", &self.image.tasks)
            .field("image_bytes", &self.image.bytes)
            .finish()
    }
}

impl RecordedRun {
    /// The callable it was recorded from.
    pub fn callable(&self) -> CallableId {
        self.key().callable
    }

    /// The callable's registration generation it was recorded under (a re-registered
    /// callable has another, and its recordings are refused).
    pub fn generation(&self) -> u64 {
        self.image.generation
    }

    /// Tasks in the graph.
    pub fn tasks(&self) -> u32 {
        self.image.tasks
    }

    /// Bytes of the uploaded image.
    pub fn image_bytes(&self) -> u64 {
        self.image.bytes
    }

    /// What recording it cost: the host build and the upload.
    pub fn build(&self) -> GraphReport {
        self.stats
    }

    /// Where the image lies on the device and its size (for tools and fault-injection
    /// tests that must reach the image itself).
    #[doc(hidden)]
    pub fn image_location(&self) -> (DevicePtr, u64) {
        (self.image.ptr, self.image.bytes)
    }

    pub(crate) fn key(&self) -> &RecordingKey {
        self.image
            .recording
            .as_ref()
            .expect("a RecordedRun's image is a recording")
    }
}

/// What the host did for a `host_build_graph` run's graph
/// ([`RunReport::graph`](crate::RunReport::graph)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphReport {
    /// Running the orchestration on the host and writing the image (0 for a replay).
    pub build_time: Duration,
    /// Allocating the image on the device and copying it there (0 for a replay).
    pub upload_time: Duration,
    /// Tasks in the graph.
    pub tasks: u32,
    /// Bytes of the image.
    pub image_bytes: u64,
    /// Whether the run replayed a recording.
    pub replayed: bool,
}

/// Builds the graph of a run on the host and uploads it: `desc` is the run's descriptor as
/// it will be published, `orch_args` the orchestration arguments in host memory.
///
/// The orchestration runs on a thread of its own, waited for at most `timeout` (the
/// worker's run timeout): C code cannot be interrupted, so a build that has not returned by
/// then is left running with everything it reads, and the run fails with
/// [`HostError::Timeout`] — the caller must then keep the run's staging (the build may
/// still write it through `set_tensor_data`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_and_upload(
    device: &Arc<dyn Device>,
    desc: &RunLaunchDesc,
    orch_args: &OrchArgs,
    callable: &Arc<Registered>,
    clusters: u32,
    lane: u64,
    recording: Option<RecordingKey>,
    timeout: Duration,
) -> Result<(Arc<GraphImage>, GraphReport), HostError> {
    let start = Instant::now();
    let built = build_bounded(
        *desc,
        Box::new(*orch_args),
        callable.clone(),
        clusters,
        timeout,
    )?;
    let built = built.map_err(|f| HostError::RunFailed {
        code: -f.code,
        name: code_name(f.code),
        message: f.message,
    })?;
    if recording.is_some() && built.tensor_data_calls > 0 {
        return Err(HostError::InvalidArgument {
            arg: "record".into(),
            reason: format!(
                "the orchestration of `{}` called get/set_tensor_data {} times; a replay does not run the orchestration, so it cannot be recorded",
                callable.name, built.tensor_data_calls
            ),
        });
    }
    let build_time = start.elapsed();
    let upload_start = Instant::now();
    let bytes = built.image.len() as u64;
    let ptr = device
        .malloc(bytes)
        .map_err(HostError::device("allocating the graph image"))?;
    let image = Arc::new(GraphImage {
        device: device.clone(),
        ptr,
        bytes,
        generation: callable.generation,
        lane,
        tasks: built.tasks,
        recording,
    });
    device
        .copy_to_device(ptr, &built.image)
        .map_err(HostError::device("uploading the graph image"))?;
    let report = GraphReport {
        build_time,
        upload_time: upload_start.elapsed(),
        tasks: built.tasks,
        image_bytes: bytes,
        replayed: false,
    };
    Ok((image, report))
}

/// Runs the host build of `desc` on a thread that owns what it reads (a copy of the
/// orchestration arguments, the callable), waiting at most `timeout`.
fn build_bounded(
    desc: RunLaunchDesc,
    orch_args: Box<OrchArgs>,
    callable: Arc<Registered>,
    clusters: u32,
    timeout: Duration,
) -> Result<Result<BuiltGraph, BuildFailure>, HostError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("simpler-graph-build".into())
        .spawn(move || {
            // The build reads the host's copies of what the device will be given.
            let host_desc = RunLaunchDesc {
                orch_args_addr: &*orch_args as *const OrchArgs as u64,
                func_table_addr: callable.func_table_bytes.as_ptr() as u64,
                func_core_types_addr: callable.func_type_bytes.as_ptr() as u64,
                ..desc
            };
            // SAFETY: `host_desc` names host memory this thread owns for the whole call:
            // `orch_args`, the callable's two func tables (`func_count` entries each, as
            // published) and the orchestration entry the registry loaded (kept loaded by
            // `callable`); the heap and every tensor in `orch_args` are this run's device
            // memory, which on the sim is host memory the lane keeps (its staging is
            // quarantined if the build outlives the wait) and no running task touches (runs
            // execute in order; this one has not launched).
            let built =
                unsafe { simpler_runtime::hbg::build(&host_desc, clusters, callable.generation) };
            // The waiter may have given up; then nobody reads this.
            let _ = tx.send(built);
        })
        .map_err(|e| HostError::InvalidState(format!("starting the graph build thread: {e}")))?;
    rx.recv_timeout(timeout).map_err(|_| {
        tracing::error!(
            "a host_build_graph orchestration did not return within {timeout:?}; it is left running"
        );
        HostError::Timeout(timeout)
    })
}

/// The key of a recording made with `args`.
pub(crate) fn recording_key(
    callable: CallableId,
    registered: &Registered,
    args: &[OwnedArg],
) -> RecordingKey {
    RecordingKey {
        callable,
        name: registered.name.clone(),
        args: args.iter().map(arg_key).collect(),
        overlaps: overlaps(args),
    }
}

fn arg_key(a: &OwnedArg) -> ArgKey {
    match a {
        OwnedArg::Tensor { shape, dtype, .. }
        | OwnedArg::Input { shape, dtype, .. }
        | OwnedArg::Device { shape, dtype, .. } => ArgKey::Tensor {
            shape: shape.clone(),
            dtype: *dtype,
        },
        OwnedArg::Scalar(v) => ArgKey::Scalar(*v),
    }
}

/// The device range of an in-place device tensor argument. (Host tensors are staged into
/// buffers of their own, so they never share device memory.)
fn device_range(a: &OwnedArg) -> Option<(u64, u64)> {
    match a {
        OwnedArg::Device { ptr, shape, dtype } => {
            let n = shape
                .iter()
                .fold(dtype.size_bytes() as u64, |a, &d| a.saturating_mul(d));
            Some((ptr.addr(), n))
        }
        _ => None,
    }
}

/// Pairs of device tensor arguments whose memory overlaps (the dependencies the build
/// found between them hold only for the same overlaps).
fn overlaps(args: &[OwnedArg]) -> Vec<(usize, usize)> {
    let ranges: Vec<_> = args.iter().map(device_range).collect();
    let mut out = Vec::new();
    for i in 0..ranges.len() {
        for j in i + 1..ranges.len() {
            if let (Some(a), Some(b)) = (ranges[i], ranges[j]) {
                if a.0 < b.0 + b.1 && b.0 < a.0 + a.1 && a.1 > 0 && b.1 > 0 {
                    out.push((i, j));
                }
            }
        }
    }
    out
}

/// Checks that `recorded` was made by the lane of generation `lane` and is of `current`,
/// the callable now registered under its id (if any), and returns it.
pub(crate) fn check_stale<'a>(
    recorded: &RecordedRun,
    lane: u64,
    current: Option<&'a Arc<Registered>>,
) -> Result<&'a Arc<Registered>, HostError> {
    let key = recorded.key();
    let stale = |reason: String| HostError::StaleRecording {
        callable: key.name.clone(),
        reason,
    };
    if recorded.image.lane != lane {
        return Err(stale(
            "it was recorded by another worker (a recording replays only on its own)".into(),
        ));
    }
    let Some(current) = current else {
        return Err(stale(format!(
            "callable id {} is no longer registered",
            key.callable.0
        )));
    };
    if current.generation != recorded.image.generation {
        return Err(stale(format!(
            "callable id {} was registered again (generation {}, the recording is of generation {})",
            key.callable.0, current.generation, recorded.image.generation
        )));
    }
    Ok(current)
}

/// [`check_args`] for borrowed host arguments (which never share device memory).
pub(crate) fn check_host_args(
    recorded: &RecordedRun,
    current: &Registered,
    args: &[HostArg<'_>],
) -> Result<(), HostError> {
    let keys: Vec<ArgKey> = args
        .iter()
        .map(|a| match a {
            HostArg::Tensor(t) => ArgKey::Tensor {
                shape: t.shape.clone(),
                dtype: t.dtype,
            },
            HostArg::Scalar(v) => ArgKey::Scalar(*v),
        })
        .collect();
    check_keys(recorded, current, &keys, &[])
}

/// Checks that `args` may replay `recorded` of `current` (its callable, checked by
/// [`check_stale`]), before the signature checks (a replay's arguments are named against
/// the recording first).
pub(crate) fn check_args(
    recorded: &RecordedRun,
    current: &Registered,
    args: &[OwnedArg],
) -> Result<(), HostError> {
    let keys: Vec<ArgKey> = args.iter().map(arg_key).collect();
    check_keys(recorded, current, &keys, &overlaps(args))
}

fn check_keys(
    recorded: &RecordedRun,
    current: &Registered,
    args: &[ArgKey],
    now: &[(usize, usize)],
) -> Result<(), HostError> {
    let key = recorded.key();
    let names: Vec<&str> = current
        .signature
        .args
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    if args.len() != key.args.len() {
        return Err(HostError::ReplayMismatch {
            arg: key.name.clone(),
            reason: format!(
                "{} arguments given; the recording has {}",
                args.len(),
                key.args.len()
            ),
        });
    }
    for (i, (got, want)) in args.iter().zip(&key.args).enumerate() {
        if got == want {
            continue;
        }
        let name = names.get(i).copied().unwrap_or("?").to_string();
        let reason = match (want, got) {
            (ArgKey::Scalar(w), ArgKey::Scalar(g)) => format!(
                "scalar {g:#x} differs from the recording's {w:#x} (a scalar can change the graph the orchestration builds: record again for it)"
            ),
            (ArgKey::Tensor { shape: ws, dtype: wd }, ArgKey::Tensor { shape: gs, dtype: gd }) => {
                format!("a {gd:?} tensor of shape {gs:?}; the recording has {wd:?} of shape {ws:?}")
            }
            _ => "a different kind of argument than the recording's".to_string(),
        };
        return Err(HostError::ReplayMismatch { arg: name, reason });
    }
    if now != key.overlaps.as_slice() {
        // Name the first argument of the first pair that changed.
        let changed = now
            .iter()
            .chain(&key.overlaps)
            .find(|p| !(now.contains(p) && key.overlaps.contains(p)))
            .map_or(0, |p| p.0);
        return Err(HostError::ReplayMismatch {
            arg: names.get(changed).copied().unwrap_or("?").to_string(),
            reason: format!(
                "the tensor arguments overlap as {now:?}; the recording's overlapped as {:?} (its dependencies hold only for those)",
                key.overlaps
            ),
        });
    }
    Ok(())
}
