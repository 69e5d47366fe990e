//! The two kernels of a run as a device sees them: the contexts a device thread hands a
//! kernel and the kernel function types, with the contract between the backend that calls a
//! kernel and the kernel that dereferences its argument. What a kernel does belongs to
//! `simpler-runtime`; this module only states the calling contract.

use std::sync::Arc;
use std::time::Duration;

use simpler_abi::CoreType;

use crate::{CoreRegs, DevicePtr, Doorbell, Topology};

/// What an AICore kernel sees when it runs on one core.
pub struct AicoreContext<'a> {
    /// Global core id: `0..clusters` are AIC, `clusters..3*clusters` AIV.
    pub core_id: u32,
    /// Core type.
    pub core_type: CoreType,
    /// Cluster the core belongs to.
    pub cluster_id: u32,
    /// Lane within the cluster among cores of its type (AIV 0 or 1; AIC 0).
    pub sub_block_id: u32,
    /// This core's handshake registers.
    pub regs: &'a CoreRegs,
}

/// What an AICPU kernel sees when it runs on one AICPU thread.
pub struct AicpuContext<'a> {
    /// Index of this thread, `0..thread_num`.
    pub thread_idx: u32,
    /// Number of AICPU threads the kernel was launched on.
    pub thread_num: u32,
    /// The chip's topology.
    pub topology: &'a Topology,
    /// Every core's handshake registers, indexed by core id.
    pub cores: &'a [CoreRegs],
    /// This thread's doorbell: ring it to wake the thread from [`AicpuContext::park`].
    pub doorbell: &'a Arc<Doorbell>,
    /// The chip's SDMA engine, `None` when the device has none (not provisioned). Each of
    /// its completions rings every AICPU doorbell.
    pub sdma: Option<&'a crate::sdma::SdmaEngine>,
}

impl AicpuContext<'_> {
    /// Parks this thread until its doorbell rings or `timeout` passes. Follow the
    /// [`Doorbell`] protocol: [`Doorbell::prepare_park`], re-check for work, then park.
    pub fn park(&self, timeout: Duration) {
        self.doorbell.park(timeout);
    }
}

/// An AICore kernel: runs once on every AICore of the chip with the launch argument.
///
/// A kernel dereferences its [`DevicePtr`] as whatever that kernel documents (the runtime's
/// AICore kernel reads a run's launch descriptor there and the mailboxes it names), and a
/// device cannot check that, so calling one is `unsafe`.
///
/// # Safety
///
/// The caller is the device backend executing a [`Device::launch_aicore`] call. It must:
/// - pass exactly the `arg` of that launch, whose caller promised that it meets this
///   kernel's documented argument contract until the kernel has finished (see the launch's
///   own `# Safety`);
/// - call the kernel once on each AICore of the device, all concurrently (cores of one
///   launch may wait for each other and for the AICPU kernel through the registers), each
///   with a `ctx` that is true for the calling core: its ids and its own [`CoreRegs`]; for
///   a [`Device::launch_aicore_lazy`] call, once on each core whose DMB is written after
///   the launch armed it (from that write on, concurrently with the rest), and on no other;
/// - release no device memory of its own accord while the kernel runs (only
///   [`Device::free`] by the launch's caller releases memory).
///
/// The kernel may then assume that `arg` meets its documented contract for the whole call,
/// and that `ctx` describes the core it runs on. It must not assume anything of `arg` that
/// its own documentation does not require of the launcher.
///
/// [`Device::launch_aicore`]: crate::Device::launch_aicore
/// [`Device::launch_aicore_lazy`]: crate::Device::launch_aicore_lazy
/// [`Device::free`]: crate::Device::free
pub type AicoreKernel = unsafe fn(&AicoreContext<'_>, DevicePtr);

/// An AICPU kernel: runs once on each launched AICPU thread; a non-zero return is a fatal
/// device status (sticky on the stream, seen only by
/// [`Device::synchronize_stream`](crate::Device::synchronize_stream)).
///
/// # Safety
///
/// The caller is the device backend executing a [`Device::launch_aicpu`] call on `threads`
/// threads. It must:
/// - pass exactly the `arg` of that launch, whose caller promised that it meets this
///   kernel's documented argument contract until the kernel has finished (see the launch's
///   own `# Safety`);
/// - call the kernel once on each of the AICPU threads `0..threads`, all concurrently (the
///   threads of one launch share state and wait for each other), each with a `ctx` that is
///   true for the calling thread: `thread_idx`, `thread_num == threads`, the device's
///   topology, every core's registers and the thread's own doorbell;
/// - release no device memory of its own accord while the kernel runs (only
///   [`Device::free`] by the launch's caller releases memory).
///
/// The kernel may then assume that `arg` meets its documented contract for the whole call,
/// and that `ctx` describes the thread it runs on. It must not assume anything of `arg`
/// that its own documentation does not require of the launcher.
///
/// [`Device::launch_aicpu`]: crate::Device::launch_aicpu
/// [`Device::free`]: crate::Device::free
pub type AicpuKernel = unsafe fn(&AicpuContext<'_>, DevicePtr) -> i32;
