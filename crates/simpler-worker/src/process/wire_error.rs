//! Errors on the wire: a child's failure crosses back to the parent as a [`WireError`] and
//! becomes the same typed error it was in the child — a chip's [`HostError`] (with its
//! [`DeviceError`] or [`LoadError`]) variant by variant, an argument error, a sub callable's
//! text (`docs/l3-worker.md` §5). Texts cut to fit the mailbox's response area keep their
//! head and their tail (a traceback's last lines say the most).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use simpler_device::{DeviceError, EventId, StreamId};
use simpler_host::loader::LoadError;
use simpler_host::HostError;

use crate::WorkerError;

/// The longest text a response carries, in bytes.
pub(crate) const MAX_TEXT: usize = 64 * 1024;

/// `text`, cut to at most [`MAX_TEXT`] bytes: its first 4 KiB, a marker, and its tail.
pub(crate) fn bounded(text: String) -> String {
    cut(text, MAX_TEXT)
}

/// `text`, cut to about `max` bytes (at least 256): its head (up to 4 KiB, a quarter of
/// `max` at most), a marker, and its tail.
pub(crate) fn cut(text: String, max: usize) -> String {
    let max = max.max(256);
    if text.len() <= max {
        return text;
    }
    let head_end = floor_char(&text, 4096.min(max / 4));
    let tail_start = ceil_char(&text, text.len() - (max - head_end - 64));
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A failure in a child, as it crosses to the parent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum WireError {
    /// [`WorkerError::InvalidArgument`].
    InvalidArgument {
        /// The argument.
        arg: String,
        /// What is wrong.
        reason: String,
    },
    /// [`WorkerError::InvalidState`]: a request the child cannot serve in its state (an
    /// unknown callable key, a request of the other role).
    InvalidState(String),
    /// A sub callable failed: [`WorkerError::SubFailed`] with its text.
    Sub(String),
    /// A chip's error.
    Host(WireHost),
}

impl WireError {
    /// The wire form of a child's `e`.
    pub(crate) fn from_worker(e: &WorkerError) -> WireError {
        match e {
            WorkerError::InvalidArgument { arg, reason } => WireError::InvalidArgument {
                arg: arg.clone(),
                reason: bounded(reason.clone()),
            },
            WorkerError::Host(h) => WireError::Host(WireHost::from(h)),
            WorkerError::SubFailed { message } => WireError::Sub(bounded(message.clone())),
            other => WireError::InvalidState(bounded(other.to_string())),
        }
    }

    /// The error the parent returns.
    pub(crate) fn into_worker(self) -> WorkerError {
        match self {
            WireError::InvalidArgument { arg, reason } => {
                WorkerError::InvalidArgument { arg, reason }
            }
            WireError::InvalidState(s) => WorkerError::InvalidState(s),
            WireError::Sub(message) => WorkerError::SubFailed { message },
            WireError::Host(h) => WorkerError::Host(h.into()),
        }
    }
}

/// [`HostError`] on the wire, variant by variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum WireHost {
    InvalidConfig(String),
    Device {
        context: String,
        source: WireDevice,
    },
    Load(WireLoad),
    InvalidCallable {
        name: String,
        reason: String,
    },
    UnknownCallable(u32),
    RegistryFull(usize),
    ArgumentCount {
        callable: String,
        expected: usize,
        got: usize,
    },
    InvalidArgument {
        arg: String,
        reason: String,
    },
    InvalidDevicePointer {
        arg: String,
        ptr: u64,
        bytes: u64,
        reason: String,
    },
    DeviceMemoryInUse {
        ptr: u64,
        runs: usize,
    },
    RunFailed {
        code: i32,
        message: String,
    },
    DeviceFault(WireDevice),
    Timeout(Duration),
    DeviceUnusable(String),
    WaitTimeout(Duration),
    RunUndecided(String),
    LanePoisoned(String),
    WorkerClosed,
    InvalidState(String),
    ExecutionContextRefused(String),
    RunPreparationRefused {
        epoch: u64,
        cause: Box<WireHost>,
    },
    Detached(String),
    CleanupIncomplete(String),
}

impl From<&HostError> for WireHost {
    fn from(e: &HostError) -> WireHost {
        let b = |s: &String| bounded(s.clone());
        match e {
            HostError::InvalidConfig(s) => WireHost::InvalidConfig(b(s)),
            HostError::Device { context, source } => WireHost::Device {
                context: b(context),
                source: source.into(),
            },
            HostError::Load(l) => WireHost::Load(l.as_ref().into()),
            HostError::InvalidCallable { name, reason } => WireHost::InvalidCallable {
                name: name.clone(),
                reason: b(reason),
            },
            // A chip process decodes its callables from validated bundles; a signature
            // error there still reaches the parent as a refused callable.
            HostError::Signature(s) => WireHost::InvalidCallable {
                name: "(signature)".into(),
                reason: s.to_string(),
            },
            HostError::UnknownCallable(id) => WireHost::UnknownCallable(*id),
            HostError::RegistryFull(n) => WireHost::RegistryFull(*n),
            HostError::ArgumentCount {
                callable,
                expected,
                got,
            } => WireHost::ArgumentCount {
                callable: callable.clone(),
                expected: *expected,
                got: *got,
            },
            HostError::InvalidArgument { arg, reason } => WireHost::InvalidArgument {
                arg: arg.clone(),
                reason: b(reason),
            },
            HostError::InvalidDevicePointer {
                arg,
                ptr,
                bytes,
                reason,
            } => WireHost::InvalidDevicePointer {
                arg: arg.clone(),
                ptr: *ptr,
                bytes: *bytes,
                reason: b(reason),
            },
            HostError::DeviceMemoryInUse { ptr, runs } => WireHost::DeviceMemoryInUse {
                ptr: *ptr,
                runs: *runs,
            },
            HostError::RunFailed { code, message, .. } => WireHost::RunFailed {
                code: *code,
                message: b(message),
            },
            HostError::DeviceFault(d) => WireHost::DeviceFault(d.into()),
            HostError::Timeout(t) => WireHost::Timeout(*t),
            HostError::DeviceUnusable(s) => WireHost::DeviceUnusable(b(s)),
            HostError::WaitTimeout(t) => WireHost::WaitTimeout(*t),
            HostError::RunUndecided(s) => WireHost::RunUndecided(b(s)),
            HostError::LanePoisoned(s) => WireHost::LanePoisoned(b(s)),
            HostError::WorkerClosed => WireHost::WorkerClosed,
            HostError::InvalidState(s) => WireHost::InvalidState(b(s)),
            busy @ HostError::RegistryBusy { .. } => WireHost::InvalidState(b(&busy.to_string())),
            HostError::ExecutionContextRefused(s) => WireHost::ExecutionContextRefused(b(s)),
            HostError::RunPreparationRefused { epoch, cause } => WireHost::RunPreparationRefused {
                epoch: *epoch,
                cause: Box::new(cause.as_ref().into()),
            },
            HostError::Detached(s) => WireHost::Detached(b(s)),
            HostError::CleanupIncomplete(s) => WireHost::CleanupIncomplete(b(s)),
            // Recordings live in the parent; a chip process never raises these.
            HostError::ReplayMismatch { arg, reason } => WireHost::InvalidArgument {
                arg: arg.clone(),
                reason: b(reason),
            },
            HostError::StaleRecording { callable, reason } => WireHost::InvalidState(b(&format!(
                "the recording of `{callable}` is stale: {reason}"
            ))),
        }
    }
}

impl From<WireHost> for HostError {
    fn from(e: WireHost) -> HostError {
        match e {
            WireHost::InvalidConfig(s) => HostError::InvalidConfig(s),
            WireHost::Device { context, source } => HostError::Device {
                context,
                source: source.into(),
            },
            WireHost::Load(l) => HostError::Load(Arc::new(l.into())),
            WireHost::InvalidCallable { name, reason } => {
                HostError::InvalidCallable { name, reason }
            }
            WireHost::UnknownCallable(id) => HostError::UnknownCallable(id),
            WireHost::RegistryFull(n) => HostError::RegistryFull(n),
            WireHost::ArgumentCount {
                callable,
                expected,
                got,
            } => HostError::ArgumentCount {
                callable,
                expected,
                got,
            },
            WireHost::InvalidArgument { arg, reason } => HostError::InvalidArgument { arg, reason },
            WireHost::InvalidDevicePointer {
                arg,
                ptr,
                bytes,
                reason,
            } => HostError::InvalidDevicePointer {
                arg,
                ptr,
                bytes,
                reason,
            },
            WireHost::DeviceMemoryInUse { ptr, runs } => HostError::DeviceMemoryInUse { ptr, runs },
            WireHost::RunFailed { code, message } => HostError::RunFailed {
                code,
                name: simpler_abi::code_name(code),
                message,
            },
            WireHost::DeviceFault(d) => HostError::DeviceFault(d.into()),
            WireHost::Timeout(t) => HostError::Timeout(t),
            WireHost::DeviceUnusable(s) => HostError::DeviceUnusable(s),
            WireHost::WaitTimeout(t) => HostError::WaitTimeout(t),
            WireHost::RunUndecided(s) => HostError::RunUndecided(s),
            WireHost::LanePoisoned(s) => HostError::LanePoisoned(s),
            WireHost::WorkerClosed => HostError::WorkerClosed,
            WireHost::InvalidState(s) => HostError::InvalidState(s),
            WireHost::ExecutionContextRefused(s) => HostError::ExecutionContextRefused(s),
            WireHost::RunPreparationRefused { epoch, cause } => HostError::RunPreparationRefused {
                epoch,
                cause: Box::new((*cause).into()),
            },
            WireHost::Detached(s) => HostError::Detached(s),
            WireHost::CleanupIncomplete(s) => HostError::CleanupIncomplete(s),
        }
    }
}

/// [`LoadError`] on the wire (an I/O error as its text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WireLoad {
    Stage { what: String, source: String },
    Open { what: String, reason: String },
    MissingSymbol { what: String, symbol: String },
    WrongKind { what: String },
}

impl From<&LoadError> for WireLoad {
    fn from(e: &LoadError) -> WireLoad {
        match e {
            LoadError::Stage { what, source } => WireLoad::Stage {
                what: what.clone(),
                source: source.to_string(),
            },
            LoadError::Open { what, reason } => WireLoad::Open {
                what: what.clone(),
                reason: bounded(reason.clone()),
            },
            LoadError::MissingSymbol { what, symbol } => WireLoad::MissingSymbol {
                what: what.clone(),
                symbol: symbol.clone(),
            },
            LoadError::WrongKind { what } => WireLoad::WrongKind { what: what.clone() },
        }
    }
}

impl From<WireLoad> for LoadError {
    fn from(e: WireLoad) -> LoadError {
        match e {
            WireLoad::Stage { what, source } => LoadError::Stage {
                what,
                source: std::io::Error::other(source),
            },
            WireLoad::Open { what, reason } => LoadError::Open { what, reason },
            WireLoad::MissingSymbol { what, symbol } => LoadError::MissingSymbol { what, symbol },
            WireLoad::WrongKind { what } => LoadError::WrongKind { what },
        }
    }
}

/// [`DeviceError`] on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WireDevice {
    InvalidSize(u64),
    OutOfMemory(u64),
    UnknownPointer(u64),
    DoubleFree(u64),
    NotAllocationBase {
        ptr: u64,
        base: u64,
    },
    OutOfRange {
        ptr: u64,
        len: u64,
        base: u64,
        size: u64,
    },
    UnknownStream(u32),
    UnknownEvent(u32),
    Timeout(Duration),
    ZeroTimeout,
    KernelFault {
        stream: u32,
        status: i32,
        panic: Option<String>,
    },
    InvalidLaunch(String),
    ShutDown,
    Injected(String),
    ResetUnconfirmed(String),
}

impl From<&DeviceError> for WireDevice {
    fn from(e: &DeviceError) -> WireDevice {
        match e {
            DeviceError::InvalidSize(n) => WireDevice::InvalidSize(*n),
            DeviceError::OutOfMemory(n) => WireDevice::OutOfMemory(*n),
            DeviceError::UnknownPointer(p) => WireDevice::UnknownPointer(*p),
            DeviceError::DoubleFree(p) => WireDevice::DoubleFree(*p),
            DeviceError::NotAllocationBase { ptr, base } => WireDevice::NotAllocationBase {
                ptr: *ptr,
                base: *base,
            },
            DeviceError::OutOfRange {
                ptr,
                len,
                base,
                size,
            } => WireDevice::OutOfRange {
                ptr: *ptr,
                len: *len,
                base: *base,
                size: *size,
            },
            DeviceError::UnknownStream(s) => WireDevice::UnknownStream(s.raw()),
            DeviceError::UnknownEvent(e) => WireDevice::UnknownEvent(e.raw()),
            DeviceError::Timeout(t) => WireDevice::Timeout(*t),
            DeviceError::ZeroTimeout => WireDevice::ZeroTimeout,
            DeviceError::KernelFault {
                stream,
                status,
                panic,
            } => WireDevice::KernelFault {
                stream: stream.raw(),
                status: *status,
                panic: panic.clone().map(bounded),
            },
            DeviceError::InvalidLaunch(s) => WireDevice::InvalidLaunch(bounded(s.clone())),
            DeviceError::ShutDown => WireDevice::ShutDown,
            DeviceError::Injected(at) => WireDevice::Injected((*at).to_string()),
            DeviceError::ResetUnconfirmed(s) => WireDevice::ResetUnconfirmed(bounded(s.clone())),
        }
    }
}

impl From<WireDevice> for DeviceError {
    fn from(e: WireDevice) -> DeviceError {
        match e {
            WireDevice::InvalidSize(n) => DeviceError::InvalidSize(n),
            WireDevice::OutOfMemory(n) => DeviceError::OutOfMemory(n),
            WireDevice::UnknownPointer(p) => DeviceError::UnknownPointer(p),
            WireDevice::DoubleFree(p) => DeviceError::DoubleFree(p),
            WireDevice::NotAllocationBase { ptr, base } => {
                DeviceError::NotAllocationBase { ptr, base }
            }
            WireDevice::OutOfRange {
                ptr,
                len,
                base,
                size,
            } => DeviceError::OutOfRange {
                ptr,
                len,
                base,
                size,
            },
            WireDevice::UnknownStream(s) => DeviceError::UnknownStream(StreamId::from_raw(s)),
            WireDevice::UnknownEvent(e) => DeviceError::UnknownEvent(EventId::from_raw(e)),
            WireDevice::Timeout(t) => DeviceError::Timeout(t),
            WireDevice::ZeroTimeout => DeviceError::ZeroTimeout,
            WireDevice::KernelFault {
                stream,
                status,
                panic,
            } => DeviceError::KernelFault {
                stream: StreamId::from_raw(stream),
                status,
                panic,
            },
            WireDevice::InvalidLaunch(s) => DeviceError::InvalidLaunch(s),
            WireDevice::ShutDown => DeviceError::ShutDown,
            WireDevice::Injected(at) => DeviceError::Injected(injection_point(at)),
            WireDevice::ResetUnconfirmed(s) => DeviceError::ResetUnconfirmed(s),
        }
    }
}

/// The `&'static str` of a fault injection point named in a child: each distinct name is
/// kept once for the life of the process (fault injection names a handful of calls).
fn injection_point(at: String) -> &'static str {
    static NAMES: parking_lot::Mutex<Vec<&'static str>> = parking_lot::Mutex::new(Vec::new());
    let mut names = NAMES.lock();
    if let Some(known) = names.iter().find(|n| **n == at) {
        return known;
    }
    let kept: &'static str = Box::leak(at.into_boxed_str());
    names.push(kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: HostError) -> HostError {
        let wire = WireError::from_worker(&WorkerError::Host(e));
        let bytes = crate::process::wire::encode(&wire);
        let back: WireError = crate::process::wire::decode(&bytes, "error").unwrap();
        match back.into_worker() {
            WorkerError::Host(h) => h,
            other => panic!("not a host error: {other:?}"),
        }
    }

    #[test]
    fn host_errors_keep_their_variant_and_text() {
        let cases = vec![
            HostError::RunFailed {
                code: -(simpler_abi::ORCH_INVALID_ARGS),
                name: simpler_abi::code_name(simpler_abi::ORCH_INVALID_ARGS),
                message: "bad shape".into(),
            },
            HostError::Device {
                context: "copying to the device".into(),
                source: DeviceError::OutOfRange {
                    ptr: 4096,
                    len: 8,
                    base: 4000,
                    size: 64,
                },
            },
            HostError::RunPreparationRefused {
                epoch: 7,
                cause: Box::new(HostError::DeviceUnusable("gone".into())),
            },
            HostError::DeviceFault(DeviceError::Injected("launch")),
            LoadError::MissingSymbol {
                what: "kernel 0".into(),
                symbol: "entry".into(),
            }
            .into(),
        ];
        for e in cases {
            let text = e.to_string();
            let back = round_trip(e.clone());
            assert_eq!(back.to_string(), text);
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&e),
                "{text}"
            );
        }
    }

    #[test]
    fn long_texts_keep_head_and_tail() {
        let cut_to = super::cut;
        let text = format!("HEAD{}TAIL", "x".repeat(200_000));
        let cut = bounded(text);
        assert!(cut.len() <= MAX_TEXT, "{}", cut.len());
        assert!(cut.starts_with("HEAD") && cut.ends_with("TAIL"));
        assert!(cut.contains("bytes cut"));
        let short = cut_to(format!("HEAD{}TAIL", "y".repeat(10_000)), 1000);
        assert!(short.len() <= 1000, "{}", short.len());
        assert!(
            short.starts_with("HEAD") && short.ends_with("TAIL"),
            "{short}"
        );
        assert_eq!(cut_to("fits".into(), 1000), "fits");
        let sub = WireError::from_worker(&WorkerError::SubFailed {
            message: "Traceback: boom".into(),
        });
        assert!(matches!(
            sub.into_worker(),
            WorkerError::SubFailed { message } if message == "Traceback: boom"
        ));
    }
}
