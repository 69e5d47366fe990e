"""The exceptions simpler raises.

Every error has its own class, derived from :class:`SimplerError` *and* from the builtin
exception the upstream project raises for that situation, so ``except ValueError`` keeps
working while ``except simpler.InvalidArgumentError`` can be precise. Each instance carries:

``code``
    A number: the class's stable ``CODE`` (table below), except for :class:`RunFailedError`
    and :class:`KernelTimeoutError`, whose ``code`` is the run's completion code (the negated
    runtime error code, numbered as upstream, e.g. ``-9`` for ``EXPLICIT_ORCH_FATAL``).
``cause``
    The text of the underlying error (an OS or device error, a loader message), or ``None``.
``details``
    A dict of the structured facts (argument name, callable id, expected and actual counts...);
    each is also an attribute (``err.arg``, ``err.expected``...).

The native module (``crates/simpler-py/src/error.rs``) is the only place that turns a Rust
error into one of these; the Python layer raises the same classes for what it checks first.

=====  ========================  ================  =============================================
code   class                     builtin           raised when
=====  ========================  ================  =============================================
1      InvalidConfigError        ValueError        a worker or call configuration is invalid
2      DeviceError               RuntimeError      a device call failed (memory, copies)
3      LoadError                 RuntimeError      a code image cannot be loaded (dlopen, symbol)
4      InvalidCallableError      ValueError        a callable is malformed (func ids, images)
5      SignatureError            ValueError        a signature is malformed
6      UnknownCallableError      KeyError          a callable handle is unknown or foreign
7      RegistryFullError         RuntimeError      every callable slot is taken
8      ArgumentCountError        TypeError         a run got the wrong number of arguments
9      InvalidArgumentError      ValueError        an argument's dtype/shape/layout is wrong
10     RunFailedError            RuntimeError      the run failed on the device (code = its code)
11     DeviceFaultError          RuntimeError      the device faulted with no run result
12     RunTimeoutError           TimeoutError      a run did not complete; the device is unusable
13     DeviceUnusableError       RuntimeError      earlier failures left the device unusable
14     WaitTimeoutError          TimeoutError      ``RunHandle.wait(timeout)`` ran out of time
15     RunUndecidedError         RuntimeError      the run's outcome could not be decided
16     LanePoisonedError         RuntimeError      the run never launched: an earlier one failed;
                                                   or admission is closed at once while a
                                                   partial launch is being drained
17     KernelTimeoutError        TimeoutError,     a kernel ran past the op-execute timeout
                                 RuntimeError      (a ``RunTimeoutError`` and a ``RunFailedError``:
                                                   ``code`` is -112, OP_EXECUTE_TIMEOUT)
18     ReplayMismatchError       ValueError        a replay's argument differs from the recorded
                                                   one (an ``InvalidArgumentError``: ``arg``,
                                                   ``reason``)
19     StaleRecordingError       RuntimeError      a recording's callable was unregistered or
                                                   registered again (a ``WorkerStateError``)
20     ArgumentTypeError         TypeError         an argument has the wrong Python type
21     WorkerStateError          RuntimeError      closed worker, missing ``init()``, double init
22     UnsupportedError          NotImplementedError  a feature this build does not have
23     ExecutionContextRefused   RuntimeError      wrong execution context (forked child, borrowed
                                                   context not current); retry once restored
24     RunPreparationRefused     RuntimeError      the run was refused at preparation and its
                                                   rollback proven (``epoch`` names the run)
25     RegistryBusyError         RuntimeError,     ``register``/``unregister(timeout=...)`` timed
                                 TimeoutError      out waiting for outstanding runs (a
                                                   ``WorkerStateError``: ``outstanding``,
                                                   ``timeout_s``)
26     TraceWriteError           OSError           a trace file could not be written (``path``:
                                                   the path asked for)
30     BundleError               ValueError        a bundle file is malformed
31     BundleIOError             OSError           a bundle file cannot be read or written
40     CompileError              RuntimeError      the C compiler rejected a source
41     CompilerNotFoundError     FileNotFoundError the C compiler cannot be run
50     EndpointFailureError      RuntimeError      a level-3 child process died (``ENDPOINT_FAILURE``)
51     StartupError              RuntimeError      a level-3 child process could not be started
52     TaskFailedError           RuntimeError      a level-3 task failed (a sub callable raised)
53     RingFullError             RuntimeError      the level-3 heap ring could not serve ``alloc``
54     TaskTimeoutError          TimeoutError      a remote level-3 task ran past its timeout
=====  ========================  ================  =============================================

Every error also carries ``code_name``, the engine's name of the error kind
(``"ENDPOINT_FAILURE"``, ``"INVALID_ARGUMENT"``, ...; for a run's failure the run's own code
name, ``"KERNEL_FATAL"``). Errors of a level-3 worker (``Worker(level=3)``) carry the
engine's kind whether the engine or the Python layer refused: by class ``INVALID_ARGUMENT``
(``InvalidArgumentError``, ``ArgumentTypeError``, ``ArgumentCountError``,
``UnsupportedError``), ``INVALID_CONFIG``, ``INVALID_STATE`` (``WorkerStateError``; ``CLOSED``
for a closed worker), ``UNKNOWN_CALLABLE``, ``WAIT_TIMEOUT``, ``ENDPOINT_FAILURE``,
``STARTUP_FAILED``, ``TASK_FAILED``, ``RING_FULL``, ``TASK_TIMEOUT``; a worker id that names no worker (not an
int, negative, unknown) is ``UNKNOWN_WORKER``. Classes only level 2 raises have ``code_name``
``None`` unless the run gave one. A failed level-3 task's error also has ``task``
(``"#3 vector_add"``) and ``worker`` (``"chip 1 (device 1)"``).
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "SimplerError",
    "InvalidConfigError",
    "DeviceError",
    "LoadError",
    "InvalidCallableError",
    "SignatureError",
    "UnknownCallableError",
    "RegistryFullError",
    "ArgumentCountError",
    "InvalidArgumentError",
    "RunFailedError",
    "DeviceFaultError",
    "RunTimeoutError",
    "KernelTimeoutError",
    "DeviceUnusableError",
    "WaitTimeoutError",
    "RunUndecidedError",
    "LanePoisonedError",
    "ReplayMismatchError",
    "StaleRecordingError",
    "ArgumentTypeError",
    "WorkerStateError",
    "UnsupportedError",
    "ExecutionContextRefused",
    "RunPreparationRefused",
    "RegistryBusyError",
    "TraceWriteError",
    "BundleError",
    "BundleIOError",
    "CompileError",
    "CompilerNotFoundError",
    "EndpointFailureError",
    "StartupError",
    "TaskFailedError",
    "RingFullError",
    "TaskTimeoutError",
    "StagingWarning",
]


def _rebuild(cls: type, message: str, code: Any, cause: Any, details: dict) -> "SimplerError":
    return cls(message, code=code, cause=cause, **details)


class SimplerError(Exception):
    """Base class of every simpler error; see the module docs for the attributes."""

    CODE = 0
    CODE_NAME: Optional[str] = None
    """The engine's kind name an error of this class carries when nothing more precise is
    known (``code_name``); ``None`` for the classes only level 2 raises."""

    def __init__(
        self,
        message: str,
        *,
        code: Optional[int] = None,
        cause: Optional[str] = None,
        **details: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = type(self).CODE if code is None else code
        self.cause = cause
        self.details = details
        self.code_name: Optional[str] = type(self).CODE_NAME
        for key, value in details.items():
            setattr(self, key, value)

    @property
    def kind(self) -> str:
        """The error kind: the class name without the ``Error`` suffix."""
        name = type(self).__name__
        return name[: -len("Error")] if name.endswith("Error") else name

    def __str__(self) -> str:  # KeyError would quote the message
        if self.cause and self.cause not in self.message:
            return f"{self.message} (caused by: {self.cause})"
        return self.message

    def __reduce__(self):  # keep code, cause and details across pickling
        return (_rebuild, (type(self), self.message, self.code, self.cause, self.details))


class InvalidConfigError(SimplerError, ValueError):
    """A worker or call configuration is invalid (the message names the field)."""

    CODE = 1
    CODE_NAME = "INVALID_CONFIG"


class DeviceError(SimplerError, RuntimeError):
    """A device call failed; ``context`` says what the host was doing."""

    CODE = 2


class LoadError(SimplerError, RuntimeError):
    """A kernel or orchestration image could not be loaded."""

    CODE = 3


class InvalidCallableError(SimplerError, ValueError):
    """A callable is malformed (duplicate or out-of-range func ids, empty or non-ELF images)."""

    CODE = 4


class SignatureError(SimplerError, ValueError):
    """A signature is malformed (duplicate names, tensors after scalars, bad ranks)."""

    CODE = 5


class UnknownCallableError(SimplerError, KeyError):
    """No callable is registered under this handle on this worker."""

    CODE = 6
    CODE_NAME = "UNKNOWN_CALLABLE"


class RegistryFullError(SimplerError, RuntimeError):
    """Every callable slot of the worker is taken."""

    CODE = 7


class ArgumentCountError(SimplerError, TypeError):
    """A run got more or fewer arguments than the callable's signature declares."""

    CODE = 8
    CODE_NAME = "INVALID_ARGUMENT"


class InvalidArgumentError(SimplerError, ValueError):
    """One argument does not match the signature (dtype, shape, layout, writability)."""

    CODE = 9
    CODE_NAME = "INVALID_ARGUMENT"


class RunFailedError(SimplerError, RuntimeError):
    """The run executed and failed; ``code`` is its completion code, ``code_name`` its name."""

    CODE = 10


class DeviceFaultError(SimplerError, RuntimeError):
    """The device reported a fault that no run result explains; the worker is unusable."""

    CODE = 11


class RunTimeoutError(SimplerError, TimeoutError):
    """A run's completion could not be established in time; the worker is unusable."""

    CODE = 12


class KernelTimeoutError(RunTimeoutError, RunFailedError):
    """A kernel ran past the op-execute timeout (``SIMPLER_OP_EXECUTE_TIMEOUT_US``): the run
    failed with OP_EXECUTE_TIMEOUT (``code`` -112, ``code_name``; ``device_message`` names the
    task, its kernel, core and block), the kernel's core was abandoned, and the worker refuses
    new runs until a forced reset. Both a ``RunTimeoutError`` and a ``RunFailedError``."""

    CODE = 17


class DeviceUnusableError(SimplerError, RuntimeError):
    """Earlier failures left the device in a state that refuses new work."""

    CODE = 13


class WaitTimeoutError(SimplerError, TimeoutError):
    """``RunHandle.wait(timeout)`` returned before the run completed; the run goes on."""

    CODE = 14
    CODE_NAME = "WAIT_TIMEOUT"


class RunUndecidedError(SimplerError, RuntimeError):
    """The run's evidence decided nothing (no readable record of its own, a failed boundary);
    the message says which. The worker refuses further runs."""

    CODE = 15


class LanePoisonedError(SimplerError, RuntimeError):
    """The run was never launched: an earlier run failed in a way that closed the lane."""

    CODE = 16


class ReplayMismatchError(InvalidArgumentError):
    """A replay of a recorded ``host_build_graph`` graph got an argument that differs from
    the recorded one: ``arg`` names it (the signature's name), ``reason`` says how (another
    shape or dtype, another scalar value, device tensors that overlap differently). Nothing
    ran; replay arguments of the recorded shapes, or record again."""

    CODE = 18


class ArgumentTypeError(SimplerError, TypeError):
    """An argument has a Python type simpler cannot use."""

    CODE = 20
    CODE_NAME = "INVALID_ARGUMENT"


class WorkerStateError(SimplerError, RuntimeError):
    """The worker is closed, not initialised yet, or already initialised."""

    CODE = 21
    CODE_NAME = "INVALID_STATE"


class StaleRecordingError(WorkerStateError):
    """A recording cannot be replayed: its callable (``callable``, the name) was unregistered
    or registered again since it was recorded, or it was recorded by another worker
    (``reason`` says which). Nothing ran; record again on the current registration."""

    CODE = 19


class RegistryBusyError(WorkerStateError, TimeoutError):
    """``register``/``unregister`` with a ``timeout`` waited it out with runs still
    outstanding (``outstanding``, how many; ``timeout_s``, the timeout); nothing changed."""

    CODE = 25


class TraceWriteError(SimplerError, OSError):
    """A trace file could not be written to ``path`` (the path asked for; ``cause`` holds
    the OS error). Nothing was left at ``path``."""

    CODE = 26


class UnsupportedError(SimplerError, NotImplementedError):
    """A feature of the upstream API that this build does not provide."""

    CODE = 22
    CODE_NAME = "INVALID_ARGUMENT"


class ExecutionContextRefused(SimplerError, RuntimeError):
    """The worker was used from the wrong execution context: a forked child (every handle and
    worker operation refuses there, touching nothing), or a thread whose current borrowed
    context is not the worker's. Nothing changed; a borrowed context can be restored and the
    same call (the same run handle) retried."""

    CODE = 23


class RunPreparationRefused(SimplerError, RuntimeError):
    """The run was refused at preparation and its rollback was proven: everything it took is
    released and its arguments are handed back. ``epoch`` names the run; ``cause`` says why
    preparation failed."""

    CODE = 24


class BundleError(SimplerError, ValueError):
    """A callable bundle is malformed (bad magic, version, checksum, metadata...)."""

    CODE = 30


class BundleIOError(SimplerError, OSError):
    """A callable bundle file could not be read or written."""

    CODE = 31


class CompileError(SimplerError, RuntimeError):
    """The C compiler rejected a source; ``file``, ``line``, ``column`` locate the first error
    and ``stderr`` holds the compiler's whole output."""

    CODE = 40


class CompilerNotFoundError(SimplerError, FileNotFoundError):
    """The C compiler (``$CC`` or ``cc``) could not be run."""

    CODE = 41


class EndpointFailureError(SimplerError, RuntimeError):
    """A child process of a level-3 worker died (crashed, was killed, lost its mailbox), or a
    child of a level-4 worker did (its Ray actor died, its node was removed): ``endpoint``
    names it (``"chip 0 (device 0, pid 4242)"``, ``"worker 1 (ray actor on node ...)"``),
    ``report`` says how it ended (exit status or signal, the tail of its stderr; Ray's error).
    Its in-flight task failed, the tasks depending on it fail too, later tasks to it are
    refused; the other children go on. A level-4 child re-created by its ``max_restarts``
    sets ``generation`` (its new generation) and takes later tasks."""

    CODE = 50
    CODE_NAME = "ENDPOINT_FAILURE"


class StartupError(SimplerError, RuntimeError):
    """A child process of a level-3 worker could not be started (``endpoint``, ``reason``);
    ``init()`` stopped every child it had started."""

    CODE = 51
    CODE_NAME = "STARTUP_FAILED"


class TaskFailedError(SimplerError, RuntimeError):
    """A level-3 task failed for a reason no more precise class names: a sub callable raised
    (``traceback`` holds its formatted traceback, also in the message). ``task`` and
    ``worker`` name the task and where it ran."""

    CODE = 52
    CODE_NAME = "TASK_FAILED"


class RingFullError(SimplerError, RuntimeError):
    """``orch.alloc`` could not be served by the level-3 heap ring (``ring``, ``nbytes``): the
    allocation is larger than a heap, or nothing was reclaimed within the deadlock timeout."""

    CODE = 53
    CODE_NAME = "RING_FULL"


class TaskTimeoutError(SimplerError, TimeoutError):
    """A task on a remote level-3 worker ran past its ``remote_task_timeout_s``: the task
    failed and its actor was stopped (``endpoint`` names it, ``report`` says what was done)."""

    CODE = 54
    CODE_NAME = "TASK_TIMEOUT"


class StagingWarning(UserWarning):
    """A run staged device-buffer tensors through host memory (two extra copies each), because
    the host cannot yet pass device memory to a run in place. Emitted once per worker."""
