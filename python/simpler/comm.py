"""Comm domains: chips of one level-3 worker that see each other's windows (``docs/comm.md``).

Inside a level-3 orchestration function::

    with orch.allocate_domain("ar", workers=[0, 1, 2, 3], window_size=1 << 20,
                              buffers=[CommBufferSpec("scratch", np.float32, 4096),
                                       CommBufferSpec("signal", np.int32, 16)]) as dom:
        ctx = dom[2]                # chip 2's view: rank 2 of 4
        ctx.device_ctx              # the address of its SimplerCommContext: a task scalar
        ctx.buffers["scratch"]      # a ChildTensor in its window: a task argument

Every rank's window is zeroed before any kernel can reach it. The domain is released when the
``with`` block ends (or the orchestration returns): tasks submitted afterwards may not name its
buffers. Its memory is freed once the run is over, whether the run succeeded or not. The
engine checks everything (``crates/simpler-worker/src/comm.rs``); this module only converts
arguments and wraps the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Tuple

from .errors import ArgumentTypeError, InvalidArgumentError
from .tensor import ChildTensor
from .types import DataType

if TYPE_CHECKING:  # pragma: no cover
    from .orchestrator import Orchestrator

__all__ = ["ChipDomainContext", "CommBufferSpec", "CommDomainHandle"]


@dataclass(frozen=True)
class CommBufferSpec:
    """A named buffer of every rank's window: ``count`` elements of ``dtype`` (or ``nbytes``
    bytes, a multiple of the element size, when ``count`` is not given). Buffers lie in the
    window in the order given, each 64-byte aligned."""

    name: str
    dtype: Any
    count: Optional[int] = None
    nbytes: Optional[int] = None

    def _wire(self, i: int) -> Tuple[str, int, int]:
        where = f"buffers[{i}]"
        if not isinstance(self.name, str):
            raise ArgumentTypeError(
                f"{where}.name must be a str, got {type(self.name).__name__}",
                arg=f"{where}.name",
                reason="not a str",
            )
        try:
            dtype = DataType.of(self.dtype)
        except (ArgumentTypeError, InvalidArgumentError, TypeError, ValueError) as e:
            raise ArgumentTypeError(
                f"{where}.dtype: {e}", arg=f"{where}.dtype", reason="not a dtype"
            ) from None
        count = self.count
        if count is None:
            if self.nbytes is None:
                raise InvalidArgumentError(
                    f"{where}: give count (elements) or nbytes",
                    arg=f"{where}.count",
                    reason="neither count nor nbytes",
                )
            nbytes = _int(self.nbytes, f"{where}.nbytes")
            if nbytes % dtype.itemsize:
                raise InvalidArgumentError(
                    f"{where}.nbytes = {nbytes} is not a multiple of {dtype.name}'s "
                    f"{dtype.itemsize} bytes",
                    arg=f"{where}.nbytes",
                    reason="not a multiple of the element size",
                )
            count = nbytes // dtype.itemsize
        else:
            count = _int(count, f"{where}.count")
            if self.nbytes is not None and _int(self.nbytes, f"{where}.nbytes") != count * dtype.itemsize:
                raise InvalidArgumentError(
                    f"{where}: nbytes = {self.nbytes} disagrees with count = {count} of "
                    f"{dtype.name}",
                    arg=f"{where}.nbytes",
                    reason="disagrees with count",
                )
        return (self.name, int(dtype), count)


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
            else:
                raise TypeError
        except TypeError:
            raise ArgumentTypeError(
                f"{name} must be an int, got {type(value).__name__}", arg=name, reason="not an int"
            ) from None
    if value < 0 or value >= 1 << 64:
        raise InvalidArgumentError(
            f"{name} = {value} is out of range (0 .. 2**64)", arg=name, reason="out of range"
        )
    return int(value)


@dataclass(frozen=True)
class ChipDomainContext:
    """One member chip's view of a domain."""

    name: str
    """The domain's name."""
    worker: int
    """The chip's worker id."""
    domain_rank: int
    """Its rank: its position in ``workers``."""
    domain_size: int
    """Ranks in the domain."""
    device_ctx: int
    """Device address of its ``SimplerCommContext`` (``simpler/comm.h``): pass it to the chip
    task as a scalar."""
    local_window_base: int
    """Device address of its own window."""
    actual_window_size: int
    """Bytes of each window (``window_size`` rounded up to 4 KiB)."""
    buffers: Mapping[str, ChildTensor] = field(default_factory=dict)
    """The named buffers of its window: device tensors of this chip, task arguments."""


class CommDomainHandle:
    """A domain made by :meth:`Orchestrator.allocate_domain`; ``handle[chip]`` is a
    :class:`ChipDomainContext` (``KeyError`` for a chip that is not a member). A context
    manager: leaving the ``with`` block releases it."""

    def __init__(self, native: Any, orch: "Orchestrator") -> None:
        self._native = native
        self._orch = orch
        self._released = False
        self._round = 0
        self._ranks: Dict[int, ChipDomainContext] = {}
        for worker, rank, size, ctx, base, actual, buffers in native.ranks():
            self._ranks[int(worker)] = ChipDomainContext(
                name=str(native.name),
                worker=int(worker),
                domain_rank=int(rank),
                domain_size=int(size),
                device_ctx=int(ctx),
                local_window_base=int(base),
                actual_window_size=int(actual),
                buffers={n: ChildTensor(t) for n, t in buffers},
            )

    @property
    def name(self) -> str:
        return str(self._native.name)

    @property
    def workers(self) -> List[int]:
        """The member chips, in rank order."""
        return [int(w) for w in self._native.workers]

    @property
    def size(self) -> int:
        """Ranks in the domain."""
        return len(self._ranks)

    @property
    def released(self) -> bool:
        """True once released: by :meth:`release`, its ``with`` block, or the end of its
        orchestration."""
        return self._released or not self._orch.valid

    def __getitem__(self, chip: int) -> ChipDomainContext:
        try:
            if isinstance(chip, bool) or not isinstance(chip, int):
                raise TypeError
            return self._ranks[chip]
        except (KeyError, TypeError):
            raise KeyError(
                f"chip {chip!r} is not a member of domain `{self.name}` (members: {self.workers})"
            ) from None

    def __contains__(self, chip: object) -> bool:
        return chip in self._ranks

    def __iter__(self) -> Iterator[ChipDomainContext]:
        """The members' contexts, in rank order."""
        return iter(sorted(self._ranks.values(), key=lambda c: c.domain_rank))

    def __len__(self) -> int:
        return len(self._ranks)

    def next_round(self) -> int:
        """Counts the collectives issued on this domain: 1 for the first (the number a
        collective's kernels wait for, ``simpler.collectives``)."""
        self._round += 1
        return self._round

    def _peek_round(self) -> int:
        """The round the next collective takes, without taking it."""
        return self._round + 1

    def release(self) -> None:
        """Releases the domain now: later tasks may not name its buffers (those submitted
        already still run). Idempotent; after its orchestration returned (which released
        it) it does nothing."""
        if not self.released:
            self._orch._native.release_domain(self._native)
        self._released = True

    def __enter__(self) -> "CommDomainHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._orch.valid:
            self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "live"
        return f"CommDomainHandle({self.name!r}, workers={self.workers}, {state})"
