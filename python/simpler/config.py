"""Per-run configuration: :class:`CallConfig` and its :class:`RuntimeEnv` (upstream's names).

Each run may set its AICPU thread count and its ring sizing (task window, heap and
dependency pool per ring: one value for all four rings, or four); values not given fall back
to the ``PTO2_RING_*`` environment variables, then to the worker's options. The host checks
them (power-of-two windows, heaps that fit the worker's heap, ...) and raises
:class:`~simpler.InvalidConfigError` naming the field. The diagnostics switches exist so
upstream code reads the same; turning one on raises ``UnsupportedError`` at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence, Union

from .errors import ArgumentTypeError, InvalidConfigError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Worker

__all__ = ["CallConfig", "RuntimeEnv"]

RingValue = Union[int, Sequence[int], None]


def _ring_values(name: str, value: RingValue) -> Optional[tuple]:
    if value is None:
        return None
    values = (value,) if isinstance(value, int) else tuple(value)
    if len(values) not in (1, 4) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise InvalidConfigError(
            f"runtime_env.{name} must be one int or 4 ints (one per ring), got {value!r}"
        )
    return values


@dataclass
class RuntimeEnv:
    """Ring sizing: one value for every ring, or four (one per ring); ``None`` = default."""

    ring_task_window: RingValue = None
    ring_heap: RingValue = None
    ring_dep_pool: RingValue = None

    def validate(self) -> None:
        """Raises :class:`~simpler.InvalidConfigError` for an out-of-range value."""
        window = _ring_values("ring_task_window", self.ring_task_window)
        heap = _ring_values("ring_heap", self.ring_heap)
        pool = _ring_values("ring_dep_pool", self.ring_dep_pool)
        for v in window or ():
            if v < 4 or v & (v - 1):
                raise InvalidConfigError(
                    f"runtime_env.ring_task_window must be a power of two >= 4, got {v}"
                )
        for v in heap or ():
            if v < 1024:
                raise InvalidConfigError(f"runtime_env.ring_heap must be >= 1024, got {v}")
        for v in pool or ():
            if v < 4:
                raise InvalidConfigError(f"runtime_env.ring_dep_pool must be >= 4, got {v}")


@dataclass
class CallConfig:
    """Options of one run. ``aicpu_thread_num = 0`` means all of the worker's AICPU threads."""

    aicpu_thread_num: int = 0
    runtime_env: RuntimeEnv = field(default_factory=RuntimeEnv)
    enable_chip_swimlane: Union[bool, int] = 0
    enable_dump_args: int = 0
    enable_pmu: int = 0
    enable_dep_gen: bool = False
    enable_scope_stats: bool = False
    output_prefix: str = ""

    _DIAGNOSTICS = (
        "enable_chip_swimlane",
        "enable_dump_args",
        "enable_pmu",
        "enable_dep_gen",
        "enable_scope_stats",
    )

    def validate(self) -> None:
        """Checks every field; raises :class:`~simpler.InvalidConfigError` naming it."""
        n = self.aicpu_thread_num
        if not isinstance(n, int) or isinstance(n, bool):
            raise InvalidConfigError(f"aicpu_thread_num must be an int, got {n!r}")
        if n != 0 and n < 2:
            raise InvalidConfigError(
                f"aicpu_thread_num must be 0 (auto) or at least 2 (1 orchestrator + "
                f"schedulers), got {n}"
            )
        if not isinstance(self.runtime_env, RuntimeEnv):
            raise InvalidConfigError(
                f"runtime_env must be a RuntimeEnv, got {type(self.runtime_env).__name__}"
            )
        self.runtime_env.validate()
        if not isinstance(self.output_prefix, str) or len(self.output_prefix.encode()) > 1023:
            raise InvalidConfigError("output_prefix must be a string of at most 1023 bytes")
        on = [name for name in self._DIAGNOSTICS if getattr(self, name)]
        if on and not self.output_prefix:
            raise InvalidConfigError(f"{on[0]} needs an output_prefix for its files")
        for name in ("enable_dump_args",):
            if not 0 <= int(getattr(self, name)) <= 3:
                raise InvalidConfigError(f"{name} must be in 0..3")

    def check_against(self, worker: "Worker") -> None:
        """Validates, then refuses what this worker cannot honour for one run."""
        if not isinstance(self, CallConfig):
            raise ArgumentTypeError(f"config must be a CallConfig, got {type(self).__name__}")
        self.validate()
        on = [name for name in self._DIAGNOSTICS if getattr(self, name)]
        if on:
            raise UnsupportedError(f"{on[0]}: run diagnostics are not available in this build")
        threads = int(worker._native_options["aicpu_threads"])
        if self.aicpu_thread_num and not 2 <= self.aicpu_thread_num <= threads:
            raise InvalidConfigError(
                f"aicpu_thread_num={self.aicpu_thread_num}: this worker's chip has {threads} AICPU "
                "threads; use 0 (the worker's setting) or 2..that"
            )

    def _native(self) -> tuple:
        """The tuple the native run/submit take: (aicpu_thread_num, window, heap, dep_pool)."""
        env = self.runtime_env
        ring = lambda name, v: None if v is None else list(_ring_values(name, v))  # noqa: E731
        return (
            int(self.aicpu_thread_num),
            ring("ring_task_window", env.ring_task_window),
            ring("ring_heap", env.ring_heap),
            ring("ring_dep_pool", env.ring_dep_pool),
        )
