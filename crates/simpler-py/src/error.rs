//! The one place where Rust errors become Python exceptions.
//!
//! Each [`HostError`] variant (and each [`BundleError`], [`ArgError`], [`ScalarError`],
//! [`CompileError`], level-3 [`WorkerError`], and the few failures the bindings detect
//! themselves) maps to one
//! exception class of `simpler.errors`, where the classes are defined and documented (each
//! derives from `SimplerError` and from the builtin upstream raises). An exception is built
//! as `cls(message, code=..., cause=..., **details)`: `code` is the class's stable number
//! unless given (a failed run passes its completion code), `cause` the text of the
//! underlying error, `details` the variant's fields. The other modules build their
//! exceptions with the same [`Raise`] builder.
//!
//! The classes are looked up once, lazily, from the Python package; if that import fails
//! (the native module used on its own), the builtin base class is raised instead, so an error
//! is never lost.

use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyError, PyNotImplementedError, PyOSError, PyRuntimeError,
    PyTimeoutError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};
use simpler_host::{ArgError, ScalarError};
use simpler_host::{BundleError, HostError};
use simpler_toolchain::build::CompileError;
use simpler_toolchain::error_chain;
use simpler_worker::WorkerError;

/// The `simpler.errors` module, imported on first use.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// One structured fact attached to an exception (`err.<name>` in Python).
pub(crate) enum Detail {
    Str(String),
    Int(i64),
    Float(f64),
    /// The attribute is set, to `None`.
    Null,
}

/// An exception to raise: its class in `simpler.errors`, message, code, cause and details.
pub(crate) struct Raise {
    class: &'static str,
    message: String,
    code: Option<i64>,
    cause: Option<String>,
    details: Vec<(&'static str, Detail)>,
}

impl Raise {
    /// An exception of `class` (a name in `simpler.errors`) with `message`.
    pub(crate) fn new(class: &'static str, message: impl Into<String>) -> Raise {
        Raise {
            class,
            message: message.into(),
            code: None,
            cause: None,
            details: Vec::new(),
        }
    }

    /// Sets `code` (otherwise the class's own number).
    pub(crate) fn code(mut self, code: i64) -> Raise {
        self.code = Some(code);
        self
    }

    /// Sets `cause`, the text of the underlying error (`None`: none).
    pub(crate) fn cause(mut self, cause: Option<String>) -> Raise {
        self.cause = cause;
        self
    }

    /// Replaces the message (a wrapping error's fuller text).
    pub(crate) fn message(mut self, message: impl Into<String>) -> Raise {
        self.message = message.into();
        self
    }

    /// Adds the fact `name` (a string).
    pub(crate) fn detail(mut self, name: &'static str, value: impl Into<String>) -> Raise {
        self.details.push((name, Detail::Str(value.into())));
        self
    }

    /// Adds the fact `name` (an integer).
    pub(crate) fn int(mut self, name: &'static str, value: i64) -> Raise {
        self.details.push((name, Detail::Int(value)));
        self
    }

    /// Adds the fact `name`: an integer, or `None` when it is unknown.
    pub(crate) fn opt_int(mut self, name: &'static str, value: Option<i64>) -> Raise {
        let detail = value.map_or(Detail::Null, Detail::Int);
        self.details.push((name, detail));
        self
    }

    /// Adds the fact `name` (a float).
    pub(crate) fn float(mut self, name: &'static str, value: f64) -> Raise {
        self.details.push((name, Detail::Float(value)));
        self
    }

    /// The Python exception.
    pub(crate) fn into_err(self, py: Python<'_>) -> PyErr {
        match self.build(py) {
            Ok(err) => err,
            // `simpler.errors` is unavailable: keep the message with the builtin base.
            Err(_) => fallback(self.class, self.message),
        }
    }

    fn build(&self, py: Python<'_>) -> PyResult<PyErr> {
        let module = ERRORS.get_or_try_init(py, || {
            PyModule::import(py, "simpler.errors").map(Bound::unbind)
        })?;
        let class = module.bind(py).getattr(self.class)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("code", self.code)?;
        kwargs.set_item("cause", self.cause.as_deref())?;
        for (name, value) in &self.details {
            match value {
                Detail::Str(s) => kwargs.set_item(name, s)?,
                Detail::Int(i) => kwargs.set_item(name, i)?,
                Detail::Float(f) => kwargs.set_item(name, f)?,
                Detail::Null => kwargs.set_item(name, py.None())?,
            }
        }
        let instance = class.call((self.message.as_str(),), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    }
}

/// The builtin an exception class derives from, for when `simpler.errors` cannot be imported.
fn fallback(class: &str, message: String) -> PyErr {
    match class {
        "InvalidConfigError"
        | "InvalidCallableError"
        | "SignatureError"
        | "InvalidArgumentError"
        | "ReplayMismatchError"
        | "BundleError" => PyValueError::new_err(message),
        "UnknownCallableError" => PyKeyError::new_err(message),
        "ArgumentCountError" | "ArgumentTypeError" => PyTypeError::new_err(message),
        "RunTimeoutError" | "WaitTimeoutError" | "KernelTimeoutError" | "RegistryBusyError" => {
            PyTimeoutError::new_err(message)
        }
        "UnsupportedError" => PyNotImplementedError::new_err(message),
        "BundleIOError" | "TraceWriteError" => PyOSError::new_err(message),
        "CompilerNotFoundError" => PyFileNotFoundError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// The messages of `e`'s sources, outermost first, joined with ": "; `None` without any.
fn source_chain(e: &dyn std::error::Error) -> Option<String> {
    let mut parts = Vec::new();
    let mut next = e.source();
    while let Some(s) = next {
        parts.push(s.to_string());
        next = s.source();
    }
    (!parts.is_empty()).then(|| parts.join(": "))
}

/// Describes a [`HostError`] as the exception that stands for its kind.
pub(crate) fn host_raise(e: &HostError) -> Raise {
    let message = e.to_string();
    let cause = source_chain(e);
    let raise = |class| Raise::new(class, message.clone()).cause(cause.clone());
    match e {
        HostError::InvalidConfig(_) => raise("InvalidConfigError"),
        HostError::Device { context, source } => raise("DeviceError")
            .cause(Some(source.to_string()))
            .detail("context", context.as_str()),
        HostError::Load(_) => raise("LoadError"),
        HostError::InvalidCallable { name, reason } => raise("InvalidCallableError")
            .detail("callable", name.as_str())
            .detail("reason", reason.as_str()),
        HostError::Signature(_) => raise("SignatureError"),
        HostError::UnknownCallable(id) => {
            raise("UnknownCallableError").int("callable_id", i64::from(*id))
        }
        HostError::RegistryFull(n) => raise("RegistryFullError").int("capacity", *n as i64),
        HostError::ArgumentCount {
            callable,
            expected,
            got,
        } => raise("ArgumentCountError")
            .detail("callable", callable.as_str())
            .int("expected", *expected as i64)
            .int("got", *got as i64),
        HostError::InvalidArgument { arg, reason } => raise("InvalidArgumentError")
            .detail("arg", arg.as_str())
            .detail("reason", reason.as_str()),
        HostError::RunFailed {
            code,
            name,
            message: device_message,
        } => raise(if *code == -simpler_abi::SCHED_OP_EXECUTE_TIMEOUT {
            "KernelTimeoutError"
        } else {
            "RunFailedError"
        })
        .code(i64::from(*code))
        .detail("code_name", *name)
        .detail("device_message", device_message.as_str()),
        HostError::DeviceFault(source) => raise("DeviceFaultError").cause(Some(source.to_string())),
        HostError::Timeout(after) => {
            raise("RunTimeoutError").float("timeout_s", after.as_secs_f64())
        }
        HostError::DeviceUnusable(_) => raise("DeviceUnusableError"),
        HostError::WaitTimeout(after) => {
            raise("WaitTimeoutError").float("timeout_s", after.as_secs_f64())
        }
        HostError::RunUndecided(_) => raise("RunUndecidedError"),
        HostError::LanePoisoned(_) => raise("LanePoisonedError"),
        HostError::WorkerClosed => raise("WorkerStateError"),
        HostError::InvalidState(_) => raise("WorkerStateError"),
        HostError::RegistryBusy {
            outstanding,
            waited,
        } => raise("RegistryBusyError")
            .int("outstanding", *outstanding as i64)
            .float("timeout_s", waited.as_secs_f64()),
        HostError::ExecutionContextRefused(_) => raise("ExecutionContextRefused"),
        HostError::RunPreparationRefused { epoch, cause } => raise("RunPreparationRefused")
            .cause(Some(cause.to_string()))
            .int("epoch", *epoch as i64),
        HostError::Detached(_) => raise("WorkerStateError"),
        HostError::CleanupIncomplete(_) => raise("WorkerStateError"),
        HostError::InvalidDevicePointer { arg, reason, .. } => raise("InvalidArgumentError")
            .detail("arg", arg.as_str())
            .detail("reason", reason.as_str()),
        HostError::DeviceMemoryInUse { .. } => raise("WorkerStateError"),
        HostError::ReplayMismatch { arg, reason } => raise("ReplayMismatchError")
            .detail("arg", arg.as_str())
            .detail("reason", reason.as_str()),
        HostError::StaleRecording { callable, reason } => raise("StaleRecordingError")
            .detail("callable", callable.as_str())
            .detail("reason", reason.as_str()),
    }
}

/// A failed trace write as `TraceWriteError` naming the caller's `path`: the OS error is
/// described by its code (or kind) alone, so a temporary file the atomic write used never
/// shows (its `cause` and `path` detail hold the same).
pub(crate) fn trace_write_error(path: &std::path::Path, e: &std::io::Error) -> PyErr {
    let why = match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
        None => e.kind().to_string(),
    };
    let shown = path.display().to_string();
    let raise = Raise::new(
        "TraceWriteError",
        format!("cannot write trace `{shown}`: {why}"),
    )
    .cause(Some(why))
    .detail("path", shown);
    Python::attach(|py| raise.into_err(py))
}

/// Converts a [`HostError`] into its Python exception.
pub(crate) fn host_error(py: Python<'_>, e: HostError) -> PyErr {
    host_raise(&e).into_err(py)
}

/// Converts a [`BundleError`] into its Python exception: an I/O failure (a file that is
/// missing, not a regular file or over the size limit included) is a `BundleIOError` (an
/// `OSError`, with `errno` left unset and the OS error as its cause), an
/// invalid signature a `SignatureError`, anything else a `BundleError`.
pub(crate) fn bundle_error(py: Python<'_>, e: BundleError) -> PyErr {
    let message = e.to_string();
    let cause = source_chain(&e);
    let raise = match &e {
        BundleError::Io { path, .. } | BundleError::Read { path, .. } => {
            Raise::new("BundleIOError", message).detail("path", path.display().to_string())
        }
        BundleError::InvalidSignature(_) => Raise::new("SignatureError", message),
        _ => Raise::new("BundleError", message),
    };
    raise.cause(cause).into_err(py)
}

/// Converts the host's argument check failure: a wrong count is an `ArgumentCountError`, a
/// wrong kind of value (tensor for scalar, float for an integer) an `ArgumentTypeError`,
/// anything else an `InvalidArgumentError`; each names the argument (`arg`).
pub(crate) fn arg_error(py: Python<'_>, e: ArgError) -> PyErr {
    let message = e.to_string();
    let raise = match &e {
        ArgError::Count {
            callable,
            arguments,
            got,
        } => Raise::new("ArgumentCountError", message)
            .detail("callable", callable.as_str())
            .int("expected", arguments.len() as i64)
            .int("got", *got as i64),
        _ => {
            let class = if e.is_type_error() {
                "ArgumentTypeError"
            } else {
                "InvalidArgumentError"
            };
            Raise::new(class, message)
                .detail("arg", e.arg().unwrap_or_default())
                .detail("reason", e.reason())
        }
    };
    raise.into_err(py)
}

/// Converts a scalar that cannot be encoded: a float for an integer dtype is an
/// `ArgumentTypeError`, a value out of range an `InvalidArgumentError`.
pub(crate) fn scalar_error(py: Python<'_>, e: ScalarError) -> PyErr {
    match &e {
        ScalarError::FloatForInteger { .. } => Raise::new("ArgumentTypeError", e.to_string()),
        ScalarError::OutOfRange { .. } => Raise::new("InvalidArgumentError", e.to_string())
            .detail("reason", "scalar out of range"),
    }
    .into_err(py)
}

/// Converts a [`CompileError`]: a compiler rejection or a missing source is a `CompileError`
/// (`file`, and for a rejection `line` and `column` of the first located error, or `None`,
/// the compiler's `stderr` and the `command`), a compiler that cannot start a
/// `CompilerNotFoundError` (the OS error as `cause`, the `command`), an empty compiler
/// command or an unusable kernel cache an `InvalidConfigError` (with the cache's `path`).
pub(crate) fn compile_error(py: Python<'_>, e: &CompileError) -> PyErr {
    let raise = match e {
        CompileError::Rejected {
            path,
            stderr,
            diagnostic,
            command,
            ..
        } => {
            let summary = match diagnostic {
                Some(d) => d.to_string(),
                None => stderr
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or("no diagnostics")
                    .to_string(),
            };
            let message = format!(
                "failed to compile {}\n{summary}\n--- compiler output ---\n{}",
                path.display(),
                stderr.trim_end()
            );
            let raise = Raise::new("CompileError", message);
            match diagnostic {
                Some(d) => raise
                    .detail("file", d.file.as_str())
                    .int("line", i64::from(d.line))
                    .opt_int("column", d.column.map(i64::from)),
                None => raise
                    .detail("file", path.display().to_string())
                    .opt_int("line", None)
                    .opt_int("column", None),
            }
            .detail("stderr", stderr.as_str())
            .detail("command", command.as_str())
        }
        CompileError::MissingSource { path } => {
            Raise::new("CompileError", e.to_string()).detail("file", path.display().to_string())
        }
        CompileError::Source(_) => Raise::new("CompileError", e.to_string()),
        CompileError::CompilerNotFound { cc, source } => Raise::new(
            "CompilerNotFoundError",
            format!("cannot run the C compiler `{cc}` (set $CC or pass cc=...)"),
        )
        .cause(Some(source.to_string()))
        .detail("command", cc.as_str()),
        CompileError::EmptyCc => Raise::new(
            "InvalidConfigError",
            "the C compiler command is empty (check $CC)",
        ),
        CompileError::Cache(c) => Raise::new("InvalidConfigError", error_chain(c))
            .detail("path", c.path.display().to_string()),
    };
    raise.into_err(py)
}

/// Describes a level-3 [`WorkerError`] as the exception that stands for its kind.
///
/// A failed task ([`WorkerError::TaskFailed`], possibly a chain: a dependent poisoned by its
/// producer) takes the class of its innermost cause — a chip run's `RunFailedError`, an
/// `EndpointFailureError`, a `TaskFailedError` for a sub callable that raised — with the
/// whole chain as its message and `task`/`worker` naming the outermost task. Every class but
/// a host error's carries `code_name`, the engine's kind name ([`WorkerError::kind`]).
pub(crate) fn worker_raise(e: &WorkerError) -> Raise {
    let message = e.to_string();
    let root = e.root_cause();
    let raise = match root {
        WorkerError::Host(h) => host_raise(h).message(message),
        other => kind_raise(other, message).detail("code_name", other.kind()),
    };
    match e {
        WorkerError::TaskFailed { task, worker, .. } => raise
            .detail("task", task.as_str())
            .detail("worker", worker.as_str()),
        _ => raise,
    }
}

/// The exception of a [`WorkerError`] that is not a host error, with `message`.
fn kind_raise(e: &WorkerError, message: String) -> Raise {
    match e {
        WorkerError::InvalidArgument { arg, reason } => Raise::new("InvalidArgumentError", message)
            .detail("arg", arg.as_str())
            .detail("reason", reason.as_str()),
        WorkerError::UnknownWorker { id, kind, count } => {
            Raise::new("InvalidArgumentError", message)
                .detail("arg", "worker")
                .detail("reason", format!("no {kind} {id}"))
                .int("worker", *id)
                .int("count", *count as i64)
        }
        WorkerError::UnknownCallable(handle) => {
            Raise::new("UnknownCallableError", message).detail("callable", handle.as_str())
        }
        WorkerError::InvalidConfig(_) => Raise::new("InvalidConfigError", message),
        WorkerError::InvalidState(_) | WorkerError::Closed => {
            Raise::new("WorkerStateError", message)
        }
        WorkerError::Startup { endpoint, reason } => Raise::new("StartupError", message)
            .detail("endpoint", endpoint.as_str())
            .detail("reason", reason.as_str()),
        WorkerError::EndpointFailure { endpoint, report } => {
            Raise::new("EndpointFailureError", message)
                .detail("endpoint", endpoint.as_str())
                .detail("report", report.as_str())
        }
        WorkerError::EndpointRestarted {
            endpoint,
            report,
            generation,
        } => Raise::new("EndpointFailureError", message)
            .detail("endpoint", endpoint.as_str())
            .detail("report", report.as_str())
            .int("generation", *generation as i64),
        WorkerError::TaskTimeout {
            endpoint, report, ..
        } => Raise::new("TaskTimeoutError", message)
            .detail("endpoint", endpoint.as_str())
            .detail("report", report.as_str()),
        WorkerError::SubFailed { message: text } => {
            Raise::new("TaskFailedError", message).detail("traceback", text.as_str())
        }
        WorkerError::RingFull {
            ring,
            nbytes,
            reason,
        } => Raise::new("RingFullError", message)
            .int("ring", *ring as i64)
            .int("nbytes", i64::try_from(*nbytes).unwrap_or(i64::MAX))
            .detail("reason", reason.as_str()),
        WorkerError::WaitTimeout(after) => {
            Raise::new("WaitTimeoutError", message).float("timeout_s", after.as_secs_f64())
        }
        WorkerError::Host(h) => host_raise(h).message(message),
        // An orchestration that failed in Rust (a Python one re-raises its own exception); a
        // task chain is described by its root cause, so this arm only sees a bare one.
        WorkerError::Orchestration(_) | WorkerError::TaskFailed { .. } => {
            Raise::new("TaskFailedError", message)
        }
    }
}

/// Converts a level-3 [`WorkerError`] into its Python exception (see [`worker_raise`]).
pub(crate) fn worker_error(py: Python<'_>, e: WorkerError) -> PyErr {
    worker_raise(&e).into_err(py)
}

/// A `WorkerStateError`: the worker was closed.
pub(crate) fn closed(py: Python<'_>) -> PyErr {
    Raise::new("WorkerStateError", "the worker is closed")
        .detail("code_name", "CLOSED")
        .into_err(py)
}

/// An `InvalidArgumentError` about argument `arg`.
pub(crate) fn invalid_argument(py: Python<'_>, arg: &str, reason: impl Into<String>) -> PyErr {
    let reason = reason.into();
    Raise::new(
        "InvalidArgumentError",
        format!("argument `{arg}`: {reason}"),
    )
    .detail("arg", arg)
    .detail("reason", reason)
    .into_err(py)
}

/// An `ArgumentTypeError` with `message`.
pub(crate) fn argument_type(py: Python<'_>, message: impl Into<String>) -> PyErr {
    Raise::new("ArgumentTypeError", message).into_err(py)
}

/// Runs the level-3 engine call `f` detached from the interpreter; its error becomes the
/// matching exception ([`worker_error`]).
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, simpler_worker::WorkerError> + Send,
) -> PyResult<T> {
    py.detach(f).map_err(|e| worker_error(py, e))
}
