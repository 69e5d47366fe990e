"""A submitted run and what it reports, at every level: level 2's :class:`RunHandle`,
:class:`RunReport` and :class:`GraphReport` (what the host did for a ``host_build_graph``
run's graph); level 3's :class:`HostRunHandle` and :class:`HostRunReport`; and the trace a
traced run's report holds (``has_trace``, ``write_trace``, ``trace_summary``;
``docs/tracing.md``).

A handle wraps the native one (``simpler._native.RunHandle``, ``HostRunHandle``,
``IsolatedRunHandle``): waiting is the native wait, which releases the GIL and checks for
signals between short slices. This module only converts the native reports into these
frozen dataclasses; it starts no run (the workers do: ``worker.py``, ``host_worker.py``,
``isolated_worker.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from .errors import ArgumentTypeError

if TYPE_CHECKING:  # pragma: no cover
    from . import _native
    from .worker import Worker

__all__ = ["GraphReport", "HostRunHandle", "HostRunReport", "RunHandle", "RunReport"]

_UNTRACED = "the run was not traced (its trace level was off)"


class _TracedReport:
    """The trace of a run report, level 2's :class:`RunReport` and level 3's
    ``HostRunReport`` alike: ``_native`` is the native report of a traced run (else
    ``None``), which holds the trace (``docs/tracing.md``)."""

    _native: Any

    @property
    def has_trace(self) -> bool:
        """True when the run ran at a trace level other than off."""
        return self._native is not None and bool(self._native.has_trace)

    def write_trace(
        self, path: Union[str, "os.PathLike[str]"], format: Optional[str] = None
    ) -> None:
        """Writes the trace atomically: Perfetto protobuf, or Chrome JSON for a ``.json``
        path or ``format="chrome"``. ``ValueError`` for an untraced run."""
        if self._native is None:
            raise ValueError(_UNTRACED)
        self._native.write_trace(os.fspath(path), format)

    def trace_summary(self) -> str:
        """The timing breakdown ``simpler trace summary`` prints (``docs/tracing.md``);
        ``ValueError`` for an untraced run."""
        if self._native is None:
            raise ValueError(_UNTRACED)
        return str(self._native.trace_summary())


@dataclass(frozen=True)
class GraphReport:
    """What the host did for a ``host_build_graph`` run's graph (``RunReport.graph``)."""

    build_time_s: float
    """Running the orchestration on the host and writing the graph image (0 for a replay)."""
    upload_time_s: float
    """Allocating the image on the device and copying it there (0 for a replay)."""
    tasks: int
    """Tasks in the graph."""
    image_bytes: int
    """Bytes of the graph image."""
    replayed: bool
    """Whether the run replayed a :class:`~simpler.RecordedRun`."""

    @classmethod
    def _of(cls, native: Any) -> Optional["GraphReport"]:
        """The report of a native ``GraphReport`` (``None`` for none)."""
        if native is None:
            return None
        return cls(
            float(native.build_time_s),
            float(native.upload_time_s),
            int(native.tasks),
            int(native.image_bytes),
            bool(native.replayed),
        )


@dataclass(frozen=True)
class RunReport(_TracedReport):
    """What a successful run reports; a traced run's report also holds its trace."""

    epoch: int
    """The run's epoch (process-unique, non-zero)."""
    device_time_s: float
    """From the launch of the first kernel to the proof of completion."""
    total_time_s: float
    """From the call to the return, including staging and copy-back."""
    tasks: Optional[int] = None
    """Tasks the orchestration submitted, allocation-only and other kernel-less tasks
    included (for a chip in a child process, as the child reports them)."""
    graph: Optional[GraphReport] = None
    """A ``host_build_graph`` run's graph: its build and upload times, tasks, image size,
    and whether it was a replay; ``None`` under ``tensormap_and_ringbuffer`` (and for a
    chip in a child process)."""
    _native: Any = field(default=None, repr=False, compare=False)


def _wait_timeout(timeout: Any) -> Optional[float]:
    """A run handle's ``timeout`` as the native wait takes it: ``None`` (wait as long as it
    takes) or seconds as a float. Raises :class:`ArgumentTypeError` for anything but a
    number (a bool included); the native wait refuses a negative or non-finite one."""
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float))
    ):
        raise ArgumentTypeError(f"timeout must be a number of seconds, got {timeout!r}")
    return None if timeout is None else float(timeout)


class RunHandle:
    """A submitted run. ``done`` says whether it finished; ``wait(timeout)`` blocks (raising
    ``TimeoutError`` after ``timeout`` seconds, or the run's own error); ``result()`` waits and
    returns the :class:`RunReport`. Waiting is idempotent: every wait after the run finished
    returns (or raises) the same outcome. The handle keeps its host arrays alive."""

    def __init__(self, native: Any, worker: "Worker") -> None:
        self._native = native
        self._worker = worker

    @property
    def epoch(self) -> int:
        return int(self._native.epoch)

    @property
    def done(self) -> bool:
        """True once the run finished (successfully or not)."""
        return bool(self._native.poll())

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for the run; raises ``WaitTimeoutError`` (a ``TimeoutError``) if it is still
        running after ``timeout`` seconds, or the run's error if it failed."""
        self._native.wait(_wait_timeout(timeout))

    def result(self, timeout: Optional[float] = None) -> RunReport:
        """Waits (see :meth:`wait`) and returns the run's report."""
        self.wait(timeout)
        report = self._native.result()
        traced = report if getattr(report, "has_trace", False) else None
        return RunReport(
            report.epoch,
            report.device_time_s,
            report.total_time_s,
            report.tasks,
            GraphReport._of(report.graph),
            traced,
        )

    def __repr__(self) -> str:
        return f"RunHandle(epoch={self.epoch}, done={self.done})"


@dataclass(frozen=True)
class HostRunReport(_TracedReport):
    """What a successful level-3 run reports. A traced run's report holds its merged trace
    (the "L3 host" process, then one process per chip): ``has_trace``,
    ``write_trace(path, format=None)`` and ``trace_summary()`` as level 2's
    :class:`~simpler.RunReport` (``docs/tracing.md``)."""

    run: int
    """The run's id (per worker, from 1)."""
    tasks: int
    """Tasks the run executed."""
    total_time_s: float
    """From ``submit`` to the run's end."""
    _native: Any = field(default=None, repr=False, compare=False)


class HostRunHandle:
    """A submitted level-3 run. ``done`` says whether it finished; ``wait(timeout)`` blocks
    (``WaitTimeoutError`` after ``timeout`` seconds, or the run's own error); ``result()``
    waits and returns the :class:`HostRunReport`. Waiting is idempotent."""

    def __init__(self, native: "_native.HostRunHandle") -> None:
        self._native = native

    @property
    def run(self) -> int:
        """The run's id."""
        return int(self._native.run)

    @property
    def done(self) -> bool:
        """True once the run finished (successfully or not); never blocks."""
        return bool(self._native.poll())

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for the run; raises ``WaitTimeoutError`` (a ``TimeoutError``) if it is still
        running after ``timeout`` seconds, or the run's error if it failed."""
        self.result(timeout)

    def result(self, timeout: Optional[float] = None) -> HostRunReport:
        """Waits (see :meth:`wait`) and returns the run's report."""
        report = self._native.wait(_wait_timeout(timeout))
        traced = report if report.has_trace else None
        return HostRunReport(
            int(report.run), int(report.tasks), float(report.total_time_s), traced
        )

    def __repr__(self) -> str:
        return f"HostRunHandle(run={self.run}, done={self.done})"
