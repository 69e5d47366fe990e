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
Rust's ``simpler_worker::collectives`` compiles the same files and owns the argument rules
(``docs/comm.md`` §4): this module converts its arguments (numpy dtypes, tensors' shapes) and
calls those rules through the native module, so every refusal is Rust's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

import numpy as np

from .. import _native
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

ALLREDUCE: int = _native.COLLECTIVE_OPS["allreduce"]
"""The ``op`` scalar of an allreduce (sum); the op codes are ``SIMPLER_COLLECTIVE_OP_*`` of
``simpler/collectives.h``."""
ALLGATHER: int = _native.COLLECTIVE_OPS["allgather"]
"""The ``op`` scalar of an allgather."""
REDUCE_SCATTER: int = _native.COLLECTIVE_OPS["reduce_scatter"]
"""The ``op`` scalar of a reduce-scatter (sum)."""

SIGNAL_WORDS: int = _native.COLLECTIVE_SIGNAL_WORDS
"""int32 words of each rank's ``signal`` buffer (64 bytes)."""

DTYPES = tuple(DataType(code) for code in _native.COLLECTIVE_DTYPES)
"""The element types collectives support (f32, i32)."""

MAX_TIMEOUT_S: float = _native.COLLECTIVE_MAX_TIMEOUT_S
"""The longest wait a collective may ask for: below the chip's default op-execute timeout
(45 s), which would otherwise end a rank's kernel first and leave its chip unusable."""

DEFAULT_TIMEOUT_S: float = _native.COLLECTIVE_DEFAULT_TIMEOUT_S
"""The wait limit of a collective when none is given."""


def _dtype(dtype: Any) -> DataType:
    """``dtype`` (anything :meth:`DataType.of` takes) if collectives support it."""
    try:
        dt = DataType.of(dtype)
    except (SimplerError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"dtype: {e}", arg="dtype", reason="not a dtype") from None
    return DataType(_native.collective_check_dtype(int(dt)))


def _described(seq: Sequence[Any]) -> list:
    """Each tensor's ``(dtype wire value, shape)``, as the native rules take them."""
    return [(int(t.dtype), [int(d) for d in t.shape]) for t in seq]


def _renamed(e: Exception) -> Exception:
    """An engine error naming ``args_list[r][i]`` renamed to the collective's own arguments."""
    text = _native.collective_rename(str(e))
    if text == str(e):
        return e
    arg = getattr(e, "arg", None)
    new_arg = _native.collective_rename(arg) if isinstance(arg, str) else arg
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
        _native.collective_check_count(count)
        dt = _dtype(dtype)
        if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence):
            raise InvalidArgumentError(
                f"workers must be a sequence of chip ids, got {type(workers).__name__}",
                arg="workers",
                reason="not a sequence",
            )
        layout = _native.collective_domain_layout(len(workers), count, int(dt))
        scratch, window = layout.scratch, layout.window
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
            if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence):
                raise InvalidArgumentError(
                    f"{what}: a {type(seq).__name__}; give one tensor per rank, in rank order",
                    arg=what,
                    reason="not a sequence",
                )
        timeout_us = _native.collective_timeout_us(timeout_s)
        scratch = ranks[0].buffers.get("scratch") if ranks else None
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
        tensors = {}
        for what, seq, tag in (
            ("inputs", inputs, T.INPUT),
            ("outputs", outputs, T.OUTPUT_EXISTING),
        ):
            args = TaskArgs()
            for i, t in enumerate(seq):
                try:
                    args.add_tensor(t, tag)
                except SimplerError as e:
                    raise type(e)(f"{what}[{i}]: {e}", arg=f"{what}[{i}]", reason=str(e)) from None
            tensors[what] = [args.tensor(i) for i in range(args.tensor_count())]
        xs, ys = tensors["inputs"], tensors["outputs"]
        _native.collective_check(
            op, _described(xs), _described(ys), int(scratch.dtype), scratch.shape[0], n
        )
        round_ = domain._peek_round()
        args_list = [
            TaskArgs()
            .add_tensor(xs[i], T.INPUT)
            .add_tensor(ys[i], T.OUTPUT_EXISTING)
            .add_tensor(ctx.buffers["scratch"], T.INOUT)
            .add_tensor(ctx.buffers["signal"], T.INOUT)
            .add_scalar(ctx.device_ctx)
            .add_scalar(op)
            .add_scalar(round_)
            .add_scalar(timeout_us)
            for i, ctx in enumerate(ranks)
        ]
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
        timeout_s: float = DEFAULT_TIMEOUT_S,
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
        timeout_s: float = DEFAULT_TIMEOUT_S,
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
        timeout_s: float = DEFAULT_TIMEOUT_S,
        config: Optional["CallConfig"] = None,
    ) -> int:
        """``outputs[r] = Σ_p inputs[p][r * count : (r + 1) * count]``: input ``n * count``
        elements per rank, output ``count``."""
        return self._submit(orch, REDUCE_SCATTER, domain, inputs, outputs, timeout_s, config)
