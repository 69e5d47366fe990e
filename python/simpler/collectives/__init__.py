"""Collectives over a comm domain: allreduce (sum), allgather and reduce-scatter of f32 or
i32 vectors, one rank per chip, as hand-written AIV kernels (``docs/comm.md`` §4).

::

    coll = Collectives(worker)          # before or after worker.init(): builds and registers
    def orch(o, args, cfg):
        with coll.allocate_domain(o, "ar", workers=[0, 1, 2, 3], count=n, dtype=np.float32) as dom:
            coll.allreduce(o, dom, inputs, outputs)   # inputs[r], outputs[r]: rank r's vectors
    worker.run(orch)

Each collective is one group task (``submit_next_level_group``) over the domain's members, so
every rank starts together; its kernels exchange data through the windows, synchronised by
notify/wait on a signal word and a closing barrier (``simpler/comm.h``). The chip code is
``kernels/collective.c`` and ``orchestration.c`` beside this file (their argument layout and
op codes: ``simpler/collectives.h``); this module only builds it and submits the groups.
Rust's ``simpler_worker::collectives`` compiles the same files and applies the same argument
rules, listed once in ``docs/comm.md`` §4.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

import numpy as np

from ..callable import CallableHandle, ChipCallable, CoreCallable
from ..comm import CommBufferSpec, CommDomainHandle
from ..errors import InvalidArgumentError, SimplerError
from ..tensor import TaskArgs
from ..types import DataType
from ..types import TensorArgType as T

if TYPE_CHECKING:  # pragma: no cover
    from ..compiler import KernelCompiler
    from ..config import CallConfig
    from ..orchestrator import Orchestrator

__all__ = ["Collectives", "ALLREDUCE", "ALLGATHER", "REDUCE_SCATTER"]

HERE = Path(__file__).resolve().parent

ALLREDUCE = 0
"""The ``op`` scalar of an allreduce (sum); the op codes are ``SIMPLER_COLLECTIVE_OP_*`` of
``simpler/collectives.h``."""
ALLGATHER = 1
"""The ``op`` scalar of an allgather."""
REDUCE_SCATTER = 2
"""The ``op`` scalar of a reduce-scatter (sum)."""

SIGNAL_WORDS = 16
"""int32 words of each rank's ``signal`` buffer (64 bytes)."""

DTYPES = (DataType.FLOAT32, DataType.INT32)


MAX_TIMEOUT_S = 40.0
"""The longest wait a collective may ask for: below the chip's default op-execute timeout
(45 s), which would otherwise end a rank's kernel first and leave its chip unusable."""

_OP_NAMES = {ALLREDUCE: "allreduce", ALLGATHER: "allgather", REDUCE_SCATTER: "reduce_scatter"}


def _dtype(dtype: Any) -> DataType:
    try:
        dt = DataType.of(dtype)
    except (SimplerError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"dtype: {e}", arg="dtype", reason="not a dtype") from None
    if dt not in DTYPES:
        raise InvalidArgumentError(
            f"dtype: collectives support float32 and int32, not {dt.name}",
            arg="dtype",
            reason="unsupported dtype",
        )
    return dt


def _elements(t: Any) -> int:
    return int(np.prod(t.shape)) if len(t.shape) else 1


def _check_sizes(op: int, args_list: Sequence[TaskArgs], dtype: DataType, scratch: int, n: int) -> None:
    """Every rank's input and output have the domain's dtype, are 1-D, and have the sizes the
    collective needs, the same on every rank: a mismatch would read or write past a peer's
    data silently."""
    name = _OP_NAMES[op]
    count = None
    for i, a in enumerate(args_list):
        x, y = a.tensor(0), a.tensor(1)
        for what, t in (("inputs", x), ("outputs", y)):
            if t.dtype != dtype or len(t.shape) != 1:
                raise InvalidArgumentError(
                    f"{what}[{i}]: {name} on this domain takes 1-D {dtype.name} vectors, got "
                    f"shape {tuple(t.shape)} of {t.dtype.name}",
                    arg=f"{what}[{i}]",
                    reason="wrong dtype or rank",
                )
        nx, ny = _elements(x), _elements(y)
        per_rank = {ALLREDUCE: (nx, nx, nx), ALLGATHER: (nx, nx * n, nx), REDUCE_SCATTER: (ny * n, ny, ny)}
        want_in, want_out, c = per_rank[op]
        if count is not None and c != count:
            side = "outputs" if op == REDUCE_SCATTER else "inputs"
            raise InvalidArgumentError(
                f"{side}[{i}]: rank {i} has {c} elements per rank but rank 0 has {count}; every "
                "rank of a collective takes the same sizes",
                arg=f"{side}[{i}]",
                reason="ranks differ",
            )
        count = c
        if op == REDUCE_SCATTER and nx != want_in:
            raise InvalidArgumentError(
                f"inputs[{i}]: {name} over {n} ranks with {ny}-element outputs needs "
                f"{want_in}-element inputs, got {nx}",
                arg=f"inputs[{i}]",
                reason="size mismatch",
            )
        if ny != want_out:
            raise InvalidArgumentError(
                f"outputs[{i}]: {name} over {n} ranks with {nx}-element inputs needs "
                f"{want_out}-element outputs, got {ny}",
                arg=f"outputs[{i}]",
                reason="size mismatch",
            )
    need = count * (n if op == REDUCE_SCATTER else 1) if count is not None else 0
    if need > scratch:
        raise InvalidArgumentError(
            f"inputs: {name} needs {need} elements of scratch per rank; the domain has {scratch} "
            "(make it with a larger count)",
            arg="inputs",
            reason="domain too small",
        )


def _renamed(e: Exception) -> Exception:
    """An engine error naming ``args_list[r][i]`` renamed to the collective's own arguments."""
    import re

    names = {0: "inputs", 1: "outputs", 2: "domain scratch", 3: "domain signal"}

    def sub(m: "re.Match[str]") -> str:
        return f"{names.get(int(m.group(2)), 'args')}[{m.group(1)}]"

    text = re.sub(r"args_list\[(\d+)\]\[(\d+)\]", sub, str(e))
    if text == str(e):
        return e
    arg = getattr(e, "arg", None)
    new_arg = re.sub(r"args_list\[(\d+)\]\[(\d+)\]", sub, arg) if isinstance(arg, str) else arg
    try:
        return type(e)(text, arg=new_arg, reason=getattr(e, "reason", text))
    except TypeError:
        return e


def _signature(dtype: DataType) -> list:
    return [
        ("input", "in", dtype),
        ("output", "out", dtype),
        ("window", "inout", dtype),
        ("signal", "inout", DataType.INT32),
        ("device_ctx", "scalar", DataType.UINT64),
        ("op", "scalar", DataType.UINT64),
        ("round", "scalar", DataType.UINT64),
        ("timeout_us", "scalar", DataType.UINT64),
    ]


def build_callable(dtype: Any, compiler: Optional["KernelCompiler"] = None) -> ChipCallable:
    """The collective chip callable for ``dtype`` (f32 or i32), compiled from this package's
    C sources (cached by the compiler)."""
    from ..compiler import KernelCompiler

    dt = _dtype(dtype)
    kc = compiler or KernelCompiler()
    kernel = kc.compile_incore(HERE / "kernels" / "collective.c", "aiv")
    orch = kc.compile_orchestration("tensormap_and_ringbuffer", HERE / "orchestration.c")
    return ChipCallable.build(
        _signature(dt),
        "aicpu_orchestration_entry",
        orch,
        [(0, CoreCallable(kernel, "aiv"))],
        name=f"collective_{dt.short_name}",
    )


class Collectives:
    """The collectives of one level-3 worker: builds the f32 and i32 callables and registers
    them on ``worker`` (before or after its ``init``)."""

    def __init__(self, worker: Any, compiler: Optional["KernelCompiler"] = None) -> None:
        self._handles: Dict[DataType, CallableHandle] = {
            dt: worker.register(build_callable(dt, compiler)) for dt in DTYPES
        }

    def allocate_domain(
        self,
        orch: "Orchestrator",
        name: str,
        workers: Sequence[int],
        count: int,
        dtype: Any,
    ) -> CommDomainHandle:
        """A domain for collectives of up to ``count`` elements per rank of ``dtype`` (f32 or
        i32): buffers ``scratch`` (``len(workers) · count`` elements — room for an allreduce
        or allgather input of ``count`` and a reduce-scatter input of ``n · count``) and
        ``signal`` (16 int32)."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise InvalidArgumentError(
                f"count must be an int >= 1 (elements per rank), got {count!r}",
                arg="count",
                reason="not a positive int",
            )
        dt = _dtype(dtype)
        if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence):
            raise InvalidArgumentError(
                f"workers must be a sequence of chip ids, got {type(workers).__name__}",
                arg="workers",
                reason="not a sequence",
            )
        n = len(workers)
        scratch = max(1, n) * int(count)
        window = (scratch * dt.itemsize + 63) // 64 * 64 + 64 * 2
        return orch.allocate_domain(
            name,
            workers,
            window,
            [CommBufferSpec("scratch", dt, scratch), CommBufferSpec("signal", np.int32, SIGNAL_WORDS)],
        )

    def _submit(
        self,
        orch: "Orchestrator",
        op: int,
        domain: CommDomainHandle,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        timeout_s: float,
        config: Optional["CallConfig"],
    ) -> int:
        if not isinstance(domain, CommDomainHandle):
            raise InvalidArgumentError(
                f"domain must be a CommDomainHandle, got {type(domain).__name__}",
                arg="domain",
                reason="not a domain",
            )
        ranks = list(domain)
        n = len(ranks)
        for what, seq in (("inputs", inputs), ("outputs", outputs)):
            if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence) or len(seq) != n:
                got = len(seq) if isinstance(seq, Sequence) else type(seq).__name__
                raise InvalidArgumentError(
                    f"{what}: {got} for a domain of {n} ranks; give one tensor per rank, in "
                    "rank order",
                    arg=what,
                    reason="one per rank",
                )
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not 0 < timeout_s <= MAX_TIMEOUT_S
        ):
            raise InvalidArgumentError(
                f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got "
                f"{timeout_s!r}",
                arg="timeout_s",
                reason="out of range",
            )
        scratch = ranks[0].buffers.get("scratch")
        if scratch is None or "signal" not in ranks[0].buffers:
            raise InvalidArgumentError(
                f"domain `{domain.name}` has no `scratch` and `signal` buffers; make it with "
                "Collectives.allocate_domain",
                arg="domain",
                reason="not a collectives domain",
            )
        handle = self._handles.get(scratch.dtype)
        if handle is None:
            raise InvalidArgumentError(
                f"domain `{domain.name}`: scratch of {scratch.dtype.name}; collectives support "
                "float32 and int32",
                arg="domain",
                reason="unsupported dtype",
            )
        round_ = domain._peek_round()
        timeout_us = max(1, int(timeout_s * 1e6))
        args_list = []
        for i, ctx in enumerate(ranks):
            args = TaskArgs()
            for what, seq, tag in (("inputs", inputs, T.INPUT), ("outputs", outputs, T.OUTPUT_EXISTING)):
                try:
                    args.add_tensor(seq[i], tag)
                except SimplerError as e:
                    raise type(e)(f"{what}[{i}]: {e}", arg=f"{what}[{i}]", reason=str(e)) from None
            args_list.append(
                args.add_tensor(ctx.buffers["scratch"], T.INOUT)
                .add_tensor(ctx.buffers["signal"], T.INOUT)
                .add_scalar(ctx.device_ctx)
                .add_scalar(op)
                .add_scalar(round_)
                .add_scalar(timeout_us)
            )
        _check_sizes(op, args_list, scratch.dtype, scratch.shape[0], n)
        try:
            task = orch.submit_next_level_group(handle, args_list, config, workers=domain.workers)
        except SimplerError as e:
            raise _renamed(e) from None
        domain.next_round()  # taken only by a collective that was submitted
        return task

    def allreduce(
        self,
        orch: "Orchestrator",
        domain: CommDomainHandle,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        *,
        timeout_s: float = 30.0,
        config: Optional["CallConfig"] = None,
    ) -> int:
        """``outputs[r] = Σ_p inputs[p]`` on every rank ``r`` (``count`` elements each, sums in
        rank order; i32 wraps). One group task; returns its id. A rank that waits longer
        than ``timeout_s`` for a peer fails the task (``SIMPLER_COMM_WAIT_TIMEOUT``, 120)."""
        return self._submit(orch, ALLREDUCE, domain, inputs, outputs, timeout_s, config)

    def allgather(
        self,
        orch: "Orchestrator",
        domain: CommDomainHandle,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        *,
        timeout_s: float = 30.0,
        config: Optional["CallConfig"] = None,
    ) -> int:
        """``outputs[r][p * count : (p + 1) * count] = inputs[p]`` on every rank ``r``."""
        return self._submit(orch, ALLGATHER, domain, inputs, outputs, timeout_s, config)

    def reduce_scatter(
        self,
        orch: "Orchestrator",
        domain: CommDomainHandle,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        *,
        timeout_s: float = 30.0,
        config: Optional["CallConfig"] = None,
    ) -> int:
        """``outputs[r] = Σ_p inputs[p][r * count : (r + 1) * count]``: input ``n * count``
        elements per rank, output ``count``."""
        return self._submit(orch, REDUCE_SCATTER, domain, inputs, outputs, timeout_s, config)
