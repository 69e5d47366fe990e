"""Per-run configuration: :class:`CallConfig` and its :class:`RuntimeEnv` (upstream's names).

Each run may set its AICPU thread count, its runtime variant (``"tensormap_and_ringbuffer"``
or ``"host_build_graph"``; ``None``: the callable's, else the worker's) and its ring sizing
(task window, heap and dependency pool per ring: one value for all four rings, or four; and
``host_build_graph``'s ready-queue cap); values not given fall back to the ``PTO2_RING_*``
(``PTO2_READY_QUEUE``) environment variables, then to the worker's options. The defaults and
the rules (power-of-two windows, heaps that fit the worker's heap, ...) are the host's
(``simpler._native.CallConfig``); a bad value raises :class:`~simpler.InvalidConfigError`
naming the field. The diagnostics switches exist so upstream code reads the same; turning
one on raises ``UnsupportedError`` at run time. See ``docs/python.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence, Union

from . import _native
from .errors import ArgumentTypeError, InvalidConfigError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Worker

__all__ = ["CallConfig", "RuntimeEnv"]

RingValue = Union[int, Sequence[int], None]

_DEFAULTS = _native.CallConfig()


@dataclass
class RuntimeEnv:
    """Ring sizing: one value for every ring, or four (one per ring); ``None`` = default."""

    ring_task_window: RingValue = None
    ring_heap: RingValue = None
    ring_dep_pool: RingValue = None
    ready_queue: Optional[int] = None
    """``host_build_graph``: the most ready tasks one ready queue holds (``None``:
    ``PTO2_READY_QUEUE``, else 8192); a graph with more ready at launch fails with
    READY_QUEUE_OVERFLOW (``RunFailedError``, ``code`` -104)."""

    def _to_native(self) -> _native.RuntimeEnv:
        """The host's RuntimeEnv (``InvalidConfigError`` for a value that is not one int or
        four)."""
        return _native.RuntimeEnv(
            ring_task_window=self.ring_task_window,
            ring_heap=self.ring_heap,
            ring_dep_pool=self.ring_dep_pool,
            ready_queue=self.ready_queue,
        )

    def validate(self) -> None:
        """Raises :class:`~simpler.InvalidConfigError` for an out-of-range value."""
        _native.CallConfig(runtime_env=self._to_native()).check_fields()


@dataclass
class CallConfig:
    """Options of one run. ``aicpu_thread_num = 0`` means the worker's setting."""

    aicpu_thread_num: int = _DEFAULTS.aicpu_thread_num
    runtime_env: RuntimeEnv = field(default_factory=RuntimeEnv)
    enable_chip_swimlane: Union[bool, int] = 0
    enable_dump_args: int = 0
    enable_pmu: int = 0
    enable_dep_gen: bool = False
    enable_scope_stats: bool = False
    output_prefix: str = ""
    trace_level: Union[str, int] = "off"
    """How much the run records (``"off"``, ``"tasks"``, ``"dispatch"``, ``"scheduler"``,
    ``"orchestrator"`` or 0..4; ``docs/tracing.md``); the report then carries the trace."""
    runtime: Optional[str] = None
    """The run's runtime variant (``"tensormap_and_ringbuffer"`` or ``"host_build_graph"``);
    ``None``: the callable's, else the worker's. Another name raises ``InvalidConfigError``
    listing them."""

    _DIAGNOSTICS = (
        "enable_chip_swimlane",
        "enable_dump_args",
        "enable_pmu",
        "enable_dep_gen",
        "enable_scope_stats",
    )

    def validate(self) -> None:
        """Checks every field (the host's rules that need no worker, and the diagnostics
        fields); raises :class:`~simpler.InvalidConfigError` naming it."""
        self._checked()

    def check_against(self, worker: "Worker") -> None:
        """Validates, then refuses what this worker cannot honour for one run."""
        self._for_worker(worker)

    def _checked(self) -> _native.CallConfig:
        """The host's CallConfig after the checks of :meth:`validate`."""
        if not isinstance(self.runtime_env, RuntimeEnv):
            raise InvalidConfigError(
                f"runtime_env must be a RuntimeEnv, got {type(self.runtime_env).__name__}"
            )
        native = _native.CallConfig(
            aicpu_thread_num=self.aicpu_thread_num,
            runtime_env=self.runtime_env._to_native(),
            trace_level=str(self.trace_level),
            runtime=self.runtime,
        )
        native.check_fields()
        if not isinstance(self.output_prefix, str) or len(self.output_prefix.encode()) > 1023:
            raise InvalidConfigError("output_prefix must be a string of at most 1023 bytes")
        on = [name for name in self._DIAGNOSTICS if getattr(self, name)]
        if on and not self.output_prefix:
            raise InvalidConfigError(f"{on[0]} needs an output_prefix for its files")
        for name in ("enable_dump_args",):
            if not 0 <= int(getattr(self, name)) <= 3:
                raise InvalidConfigError(f"{name} must be in 0..3")
        return native

    def _for_worker(self, worker: "Worker") -> _native.CallConfig:
        """The host's CallConfig for a run on ``worker``, checked against its limits."""
        if not isinstance(self, CallConfig):
            raise ArgumentTypeError(f"config must be a CallConfig, got {type(self).__name__}")
        native = self._checked()
        on = [name for name in self._DIAGNOSTICS if getattr(self, name)]
        if on:
            raise UnsupportedError(f"{on[0]}: run diagnostics are not available in this build")
        native.validate(worker._worker_config())
        return native
