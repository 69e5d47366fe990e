"""The level-2 worker with its chip in a child process: ``Worker(level=2,
chip_isolation="process")`` makes an :class:`IsolatedWorker`.

It has the level-2 :class:`~simpler.Worker`'s API and argument rules, on one chip that runs in
a child process (``python -m simpler._child``), so a kernel that crashes kills the child, not
this process. Underneath is the level-3 engine with one chip (``simpler._native.
IsolatedChipWorker``, ``crates/simpler-worker``): a run is one engine run whose tasks copy
each host tensor to persistent device memory of the child (``in``, ``inout``), run the chip
task there, and copy the written ones back (``out``, ``inout``). The copies run when the run
is dispatched, after the runs submitted before it are over, so chained submits on the same
arrays see each other's results; a failed run leaves the arrays untouched (its copies back
never run). Any C-contiguous array will do: the bytes cross through the child's mailbox.

**A crash.** A child that dies (segfault, abort, SIGKILL) fails its run with
``EndpointFailureError`` (``endpoint`` names the chip, ``report`` says how the child ended and
holds the end of its stderr); from then on :attr:`IsolatedWorker.health` says why, and every
run and device call is refused with the same error. Close the worker and make a new one.

**Device memory.** ``malloc``, ``free``, ``copy_to`` and ``copy_from`` reach the child: a
``Buffer`` is device memory of the child's chip, passed to runs in place; ``copy_to`` and
``copy_from`` are runs of their own, ordered after the runs submitted before them.

**Runtimes.** ``runtime`` and ``CallConfig.runtime`` reach the child's chip, so a run there
goes under ``host_build_graph`` as in this process; its report has no ``graph`` (``None``),
and recordings (:meth:`IsolatedWorker.record`) are not available: they raise
``UnsupportedError``.

**Reports.** ``RunReport.epoch`` is process-unique among runs of isolated workers;
``device_time_s`` is the chip task's wall time, measured around its request to the child (the
copies are not in it); ``total_time_s`` runs from the submission to the run's end, copies
included; ``tasks`` is the chip run's task count, as the child reports it. A traced run
(``CallConfig.trace_level``, ``Worker(trace=...)``, ``run(..., trace=path)``) brings the
engine's merged trace back: an "L3 host" process with the staging copies, then the chip's
process with its run (``docs/tracing.md``).

See ``docs/python.md`` section 2 and ``docs/l3-worker.md`` section 9.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from . import _native
from ._launch import child_program
from .config import CallConfig
from .errors import InvalidConfigError, UnsupportedError, WorkerStateError
from .worker import RecordedRun, Worker

__all__ = ["IsolatedWorker"]


class IsolatedWorker(Worker):
    """A level-2 worker whose chip runs in a child process (see the module docs). Options as
    :class:`~simpler.Worker`, plus ``startup_timeout_s`` (how long the child may take to bring
    its chip up, default 300; positive and finite)."""

    @classmethod
    def _serves(cls, level: Any, config: Dict[str, Any]) -> bool:
        """``Worker(level=2, chip_isolation="process", ...)`` makes an isolated worker."""
        return level == 2 and config.get("chip_isolation") == "process"

    def __init__(self, level: int = 2, **config: Any) -> None:
        isolation = config.pop("chip_isolation", "process")
        if isolation != "process":
            raise InvalidConfigError(
                f"an IsolatedWorker has chip_isolation='process', got {isolation!r}"
            )
        startup = config.pop("startup_timeout_s", None)
        if startup is not None and not (
            isinstance(startup, (int, float))
            and not isinstance(startup, bool)
            and 0 < startup < math.inf
        ):
            raise InvalidConfigError(f"startup_timeout_s must be positive and finite, got {startup!r}")
        super().__init__(level, **config)
        self.chip_isolation = "process"
        self._startup_timeout_s = None if startup is None else float(startup)

    @property
    def borrowed_context_generation(self) -> Optional[int]:
        """Always ``None``: a chip in a child process never borrows a caller's context."""
        return None

    def init(
        self,
        prewarm_config: Optional[CallConfig] = None,
        *,
        borrowed_context_generation: Optional[int] = None,
    ) -> None:
        """Starts the chip's child process and waits until its chip is up, then registers
        the callables registered so far. Once only; ``StartupError`` names the chip and why
        when the child cannot start (nothing is left running). A borrowed context
        (``borrowed_context_generation``) is refused with ``InvalidConfigError`` naming
        ``chip_isolation``: the caller's context lives in this process."""
        del prewarm_config  # nothing to pre-warm: callables load at registration
        if borrowed_context_generation is not None:
            raise InvalidConfigError(
                "chip_isolation='process': a worker borrowing a caller's context "
                "(borrowed_context_generation) runs in the caller's process; use "
                "chip_isolation='thread'"
            )
        with self._lock:
            if self._state == "closed":
                raise WorkerStateError("the worker is closed")
            if self._state == "ready":
                raise WorkerStateError("init() was already called")
            native = _native.IsolatedChipWorker(
                self._config, startup_timeout_s=self._startup_timeout_s, **child_program()
            )
            try:
                for handle in self._handles.values():
                    handle._native_id = native.register(handle._callable._native)
            except BaseException:
                native.close()
                for handle in self._handles.values():
                    handle._native_id = None
                raise
            self._native = native  # type: ignore[assignment]
            self._state = "ready"

    def submit(
        self,
        callable: Any,
        args: Any = None,
        config: Optional[CallConfig] = None,
        *,
        caller_stream: Optional[int] = None,
    ) -> Any:
        """As :meth:`Worker.submit`; ``caller_stream`` is refused with ``InvalidConfigError``
        naming ``chip_isolation`` (caller streams belong to a borrowed context in this
        process)."""
        if caller_stream is not None:
            raise InvalidConfigError(
                "chip_isolation='process': caller_stream needs a worker borrowing a caller's "
                "context in this process (chip_isolation='thread')"
            )
        return super().submit(callable, args, config)

    def record(self, callable: Any, args: Any = None, config: Optional[CallConfig] = None) -> Any:
        """Not available with the chip in a child process: ``UnsupportedError``
        (``chip_isolation="thread"`` records)."""
        raise UnsupportedError(
            "record: recordings need the chip in this process (chip_isolation='thread'); "
            "a chip in a child process runs host_build_graph without recording"
        )

    def replay(
        self, recording: RecordedRun, args: Any = None, config: Optional[CallConfig] = None
    ) -> Any:
        """Not available with the chip in a child process (see :meth:`record`)."""
        raise UnsupportedError(
            "replay: recordings need the chip in this process (chip_isolation='thread')"
        )

    @property
    def health(self) -> Dict[str, str]:
        """The chip's health: ``{"state": "ok"}`` while its process runs (also before
        :meth:`init`), ``{"state": "closed"}`` once closed, and ``{"state": "dead", "endpoint":
        "chip 0 (device 0, pid 42)", "report": ...}`` once the child died — ``report`` says
        how it ended (``was killed by signal SIGSEGV (11)``) and holds the end of its stderr."""
        if self._state == "closed":
            return {"state": "closed"}
        if self._native is None:
            return {"state": "ok"}
        return dict(self._native.health)

    @property
    def child_pid(self) -> Optional[int]:
        """The chip's child process id (``None`` before :meth:`init` and once closed)."""
        if self._native is None or self._state == "closed":
            return None
        pid = self._native.child_pid
        return None if pid is None else int(pid)

    def __repr__(self) -> str:
        return (
            f"Worker(level=2, device_id={self.device_id!r}, chip_isolation='process', "
            f"state={self._state})"
        )
