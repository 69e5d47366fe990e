//! Fault injection for the sim device: every failure the host's run lane must survive
//! (`docs/lane.md` §5, §11; `docs/sim-device.md` §7),
//! driven by rules of the form "let `skip` calls of kind K through, then fail the next
//! `times` of them this way".
//!
//! Calls are counted per [`FaultPoint`] from the device's start, whether or not a rule is
//! armed, so a test can also assert how often the host touched a call (for example that a
//! recorded success never synchronizes a stream). Rules are checked in the order they were
//! injected; the first armed rule for a point decides.
//!
//! Every kernel fault (an injected fatal status, or a non-zero AICPU kernel return) also
//! raises a fault notice naming the kernel's stream; [`FaultPoint::Notice`] rules decide how
//! each notice is delivered (prompt by default, late, or lost; see [`super::notices`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::notices::{self, NoticeCounters, NoticeDelivery, NoticeStats};
use crate::{FaultNotice, StreamId};

/// A device call (or a kernel's execution) a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// [`Device::create_event`](crate::Device::create_event).
    CreateEvent,
    /// [`Device::record_event`](crate::Device::record_event).
    RecordEvent,
    /// [`Device::query_event`](crate::Device::query_event).
    QueryEvent,
    /// [`Device::synchronize_event`](crate::Device::synchronize_event).
    SynchronizeEvent,
    /// [`Device::stream_wait_event`](crate::Device::stream_wait_event).
    StreamWaitEvent,
    /// [`Device::copy_to_device_async`](crate::Device::copy_to_device_async).
    CopyToDeviceAsync,
    /// [`Device::copy_from_device`](crate::Device::copy_from_device).
    CopyFromDevice,
    /// [`Device::launch_aicore`](crate::Device::launch_aicore) (the submission).
    LaunchAicore,
    /// [`Device::launch_aicpu`](crate::Device::launch_aicpu) (the submission).
    LaunchAicpu,
    /// [`Device::query_stream`](crate::Device::query_stream).
    QueryStream,
    /// [`Device::synchronize_stream`](crate::Device::synchronize_stream).
    SynchronizeStream,
    /// An AICore kernel reaching the head of its stream (its execution).
    AicoreKernel,
    /// An AICPU kernel reaching the head of its stream (its execution).
    AicpuKernel,
    /// [`Device::reset`](crate::Device::reset).
    Reset,
    /// [`Device::malloc`](crate::Device::malloc).
    Malloc,
    /// [`Device::free`](crate::Device::free).
    Free,
    /// [`Device::copy_to_device`](crate::Device::copy_to_device) (the synchronous copy).
    CopyToDevice,
    /// A fault notice on its way to the exception callback: a rule here picks its delivery
    /// ([`FaultAction::DelayNotice`], [`FaultAction::LoseNotice`]); without one it is prompt.
    Notice,
    /// A copy submitted to the SDMA engine ([`crate::sdma`]): [`FaultAction::SlowFinish`]
    /// delays it by its duration before it starts (a slow engine); any other action refuses
    /// the submission.
    SdmaCopy,
}

impl FaultPoint {
    /// Every point, in declaration order.
    pub const ALL: [FaultPoint; 19] = [
        FaultPoint::CreateEvent,
        FaultPoint::RecordEvent,
        FaultPoint::QueryEvent,
        FaultPoint::SynchronizeEvent,
        FaultPoint::StreamWaitEvent,
        FaultPoint::CopyToDeviceAsync,
        FaultPoint::CopyFromDevice,
        FaultPoint::LaunchAicore,
        FaultPoint::LaunchAicpu,
        FaultPoint::QueryStream,
        FaultPoint::SynchronizeStream,
        FaultPoint::AicoreKernel,
        FaultPoint::AicpuKernel,
        FaultPoint::Reset,
        FaultPoint::Malloc,
        FaultPoint::Free,
        FaultPoint::CopyToDevice,
        FaultPoint::Notice,
        FaultPoint::SdmaCopy,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// The point's name, as it appears in [`DeviceError::Injected`](crate::DeviceError::Injected).
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::CreateEvent => "create_event",
            FaultPoint::RecordEvent => "record_event",
            FaultPoint::QueryEvent => "query_event",
            FaultPoint::SynchronizeEvent => "synchronize_event",
            FaultPoint::StreamWaitEvent => "stream_wait_event",
            FaultPoint::CopyToDeviceAsync => "copy_to_device_async",
            FaultPoint::CopyFromDevice => "copy_from_device",
            FaultPoint::LaunchAicore => "launch_aicore",
            FaultPoint::LaunchAicpu => "launch_aicpu",
            FaultPoint::QueryStream => "query_stream",
            FaultPoint::SynchronizeStream => "synchronize_stream",
            FaultPoint::AicoreKernel => "aicore_kernel",
            FaultPoint::AicpuKernel => "aicpu_kernel",
            FaultPoint::Reset => "reset",
            FaultPoint::Malloc => "malloc",
            FaultPoint::Free => "free",
            FaultPoint::CopyToDevice => "copy_to_device",
            FaultPoint::Notice => "fault_notice",
            FaultPoint::SdmaCopy => "sdma_copy",
        }
    }
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// The call fails with [`DeviceError::Injected`](crate::DeviceError::Injected) and nothing
    /// reaches the device: the submission was refused before the device accepted it.
    Refuse,
    /// The operation is enqueued (the device accepted it), then the call reports
    /// [`DeviceError::Injected`](crate::DeviceError::Injected) — "an attempted record or wait
    /// may be enqueued even when its API reports an error". Applies to the enqueueing calls
    /// (record, stream wait, async copy, both launches); elsewhere it acts as `Refuse`.
    EnqueueThenFail,
    /// A synchronize (event or stream) returns [`DeviceError::Timeout`](crate::DeviceError::Timeout)
    /// at once, whatever the device is doing: the host cannot prove quiescence this way.
    /// Elsewhere it acts as `Refuse`.
    TimeOut,
    /// Kernel points only: the kernel ends with this fatal status, which is sticky on its
    /// stream and seen only by a stream synchronize (events and stream queries stay clean).
    /// With `run`, the kernel executes first (and may publish results); without, it does not
    /// execute at all.
    KernelFatal {
        /// The device status (non-zero).
        status: i32,
        /// Whether the kernel body runs before the status is latched.
        run: bool,
    },
    /// Kernel points only: the kernel runs normally and ends cleanly, and the device raises a
    /// fault notice with `code` naming the kernel's stream — a fault that no run reports.
    RaiseNotice {
        /// The notice's fault code.
        code: i32,
    },
    /// [`FaultPoint::Notice`] only: the notice is delivered from another thread after this
    /// delay. Elsewhere it acts as `Refuse`.
    DelayNotice(std::time::Duration),
    /// [`FaultPoint::Notice`] only: the notice is never delivered. Elsewhere it acts as
    /// `Refuse`.
    LoseNotice,
    /// Kernel points only: the kernel runs normally, then its stream holds it this long
    /// before the kernel counts as finished (a slow kernel tail). Exposes ordering that must
    /// not rely on timing, such as a successor's kernel starting before this one finished.
    SlowFinish(std::time::Duration),
}

/// Which of the two kernels a [`KernelSpan`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// The AICore kernel.
    Aicore,
    /// The AICPU kernel.
    Aicpu,
}

/// When one kernel ran on its stream, as recorded by [`SimDevice::trace_kernels`](super::SimDevice::trace_kernels).
#[derive(Clone, Copy, Debug)]
pub struct KernelSpan {
    /// The stream it ran on.
    pub stream: crate::StreamId,
    /// Which kernel.
    pub kind: KernelKind,
    /// Its launch argument (a run's descriptor address).
    pub arg: crate::DevicePtr,
    /// When the stream started it.
    pub start: std::time::Instant,
    /// When it counted as finished (its stream moved on).
    pub end: std::time::Instant,
}

/// One injection rule: let `skip` calls at `point` pass, then apply `action` to the next
/// `times` calls (`u64::MAX`: every later call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// Where it strikes.
    pub point: FaultPoint,
    /// Calls at `point` to let through first (counted from the injection).
    pub skip: u64,
    /// How many calls fail once it is armed.
    pub times: u64,
    /// What happens to those calls.
    pub action: FaultAction,
}

impl FaultRule {
    /// Fails the next call at `point` with `action`.
    pub fn next(point: FaultPoint, action: FaultAction) -> FaultRule {
        FaultRule {
            point,
            skip: 0,
            times: 1,
            action,
        }
    }

    /// Fails the `n`-th call (1-based, counted from the injection) at `point` with `action`.
    pub fn nth(point: FaultPoint, n: u64, action: FaultAction) -> FaultRule {
        FaultRule {
            point,
            skip: n.saturating_sub(1),
            times: 1,
            action,
        }
    }

    /// Fails every call at `point` from now on with `action`.
    pub fn always(point: FaultPoint, action: FaultAction) -> FaultRule {
        FaultRule {
            point,
            skip: 0,
            times: u64::MAX,
            action,
        }
    }
}

struct Armed {
    rule: FaultRule,
    skipped: u64,
    fired: u64,
}

/// The fault configuration of one sim device: call counters, armed rules, and the device's
/// fault notices.
pub(crate) struct SimFaults {
    calls: [AtomicU64; FaultPoint::ALL.len()],
    rules: Mutex<Vec<Armed>>,
    /// The device's logical id (what its notices name).
    device: u32,
    notices: Arc<NoticeCounters>,
    /// Kernel spans, recorded while tracing is on.
    trace: Mutex<Option<Vec<KernelSpan>>>,
}

impl Default for SimFaults {
    fn default() -> Self {
        SimFaults::new(0)
    }
}

impl SimFaults {
    pub(crate) fn new(device: u32) -> SimFaults {
        SimFaults {
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            rules: Mutex::new(Vec::new()),
            device,
            notices: Arc::default(),
            trace: Mutex::new(None),
        }
    }

    /// Starts (clearing) or stops recording kernel spans.
    pub(crate) fn set_tracing(&self, on: bool) {
        *self.trace.lock() = on.then(Vec::new);
    }

    /// Records a span if tracing is on.
    pub(crate) fn record_span(&self, span: KernelSpan) {
        if let Some(t) = self.trace.lock().as_mut() {
            t.push(span);
        }
    }

    /// The spans recorded so far.
    pub(crate) fn spans(&self) -> Vec<KernelSpan> {
        self.trace.lock().clone().unwrap_or_default()
    }

    pub(crate) fn device(&self) -> u32 {
        self.device
    }

    pub(crate) fn notice_stats(&self) -> NoticeStats {
        self.notices.stats()
    }

    /// Raises a fault notice from this device, delivered as the [`FaultPoint::Notice`] rules
    /// say (prompt without one).
    pub(crate) fn raise_notice(&self, stream: Option<StreamId>, code: i32) {
        let delivery = match self.check(FaultPoint::Notice) {
            None => NoticeDelivery::Prompt,
            Some(FaultAction::DelayNotice(d)) => NoticeDelivery::Late(d),
            Some(_) => NoticeDelivery::Lost,
        };
        self.raise_notice_with(stream, code, delivery);
    }

    /// Raises a fault notice from this device with an explicit delivery.
    pub(crate) fn raise_notice_with(
        &self,
        stream: Option<StreamId>,
        code: i32,
        delivery: NoticeDelivery,
    ) {
        let notice = FaultNotice {
            device: self.device,
            stream,
            code,
        };
        notices::raise(notice, delivery, &self.notices);
    }

    pub(crate) fn inject(&self, rule: FaultRule) {
        self.rules.lock().push(Armed {
            rule,
            skipped: 0,
            fired: 0,
        });
    }

    pub(crate) fn clear(&self) {
        self.rules.lock().clear();
    }

    pub(crate) fn calls(&self, point: FaultPoint) -> u64 {
        self.calls[point.index()].load(Ordering::Relaxed)
    }

    /// Counts a call at `point` and returns the action of the rule that claims it, if any.
    pub(crate) fn check(&self, point: FaultPoint) -> Option<FaultAction> {
        self.calls[point.index()].fetch_add(1, Ordering::Relaxed);
        let mut rules = self.rules.lock();
        if rules.is_empty() {
            return None;
        }
        let mut hit = None;
        for a in rules.iter_mut().filter(|a| a.rule.point == point) {
            if a.fired >= a.rule.times {
                continue;
            }
            if a.skipped < a.rule.skip {
                a.skipped += 1;
                continue;
            }
            a.fired += 1;
            hit = Some(a.rule.action);
            break;
        }
        rules.retain(|a| a.fired < a.rule.times);
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_skip_then_fire_then_expire() {
        let f = SimFaults::default();
        f.inject(FaultRule::nth(
            FaultPoint::RecordEvent,
            2,
            FaultAction::Refuse,
        ));
        assert_eq!(f.check(FaultPoint::RecordEvent), None);
        assert_eq!(f.check(FaultPoint::QueryEvent), None);
        assert_eq!(f.check(FaultPoint::RecordEvent), Some(FaultAction::Refuse));
        assert_eq!(f.check(FaultPoint::RecordEvent), None);
        assert_eq!(f.calls(FaultPoint::RecordEvent), 3);
        assert_eq!(f.calls(FaultPoint::QueryEvent), 1);
        f.inject(FaultRule::always(
            FaultPoint::QueryEvent,
            FaultAction::TimeOut,
        ));
        for _ in 0..3 {
            assert_eq!(f.check(FaultPoint::QueryEvent), Some(FaultAction::TimeOut));
        }
        f.clear();
        assert_eq!(f.check(FaultPoint::QueryEvent), None);
    }
}
