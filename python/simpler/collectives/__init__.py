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
``kernels/collective.c`` and ``orchestration.c`` beside this file; this module only builds it
and submits the groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

import numpy as np

from ..callable import CallableHandle, ChipCallable, CoreCallable
from ..comm import CommBufferSpec, CommDomainHandle
from ..errors import InvalidArgumentError
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
"""The ``op`` scalar of an allreduce (sum)."""
ALLGATHER = 1
"""The ``op`` scalar of an allgather."""
REDUCE_SCATTER = 2
"""The ``op`` scalar of a reduce-scatter (sum)."""

SIGNAL_WORDS = 16
"""int32 words of each rank's ``signal`` buffer (64 bytes)."""

DTYPES = (DataType.FLOAT32, DataType.INT32)


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

    dt = DataType.of(dtype)
    if dt not in DTYPES:
        raise InvalidArgumentError(
            f"dtype: collectives support float32 and int32, not {dt.name}",
            arg="dtype",
            reason="unsupported dtype",
        )
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
        """A domain for collectives of up to ``count`` elements per rank (the reduce-scatter
        output size; allgather inputs and allreduce vectors up to ``len(workers) * count``
        fit too): buffers ``scratch`` (``len(workers) * count`` elements of ``dtype``) and
        ``signal`` (16 int32)."""
        dt = DataType.of(dtype)
        n = len(workers)
        scratch = max(1, n * int(count))
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
        ranks = list(domain)
        for what, seq in (("inputs", inputs), ("outputs", outputs)):
            if len(seq) != len(ranks):
                raise InvalidArgumentError(
                    f"{what}: {len(seq)} tensors for a domain of {len(ranks)} ranks (one per "
                    f"rank, in rank order)",
                    arg=what,
                    reason="one per rank",
                )
        if not (timeout_s > 0):
            raise InvalidArgumentError(
                f"timeout_s must be positive, got {timeout_s!r}", arg="timeout_s", reason="not positive"
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
        round_ = domain.next_round()
        timeout_us = max(1, int(timeout_s * 1e6))
        args_list = [
            TaskArgs()
            .add_tensor(inputs[i], T.INPUT)
            .add_tensor(outputs[i], T.OUTPUT_EXISTING)
            .add_tensor(ctx.buffers["scratch"], T.INOUT)
            .add_tensor(ctx.buffers["signal"], T.INOUT)
            .add_scalar(ctx.device_ctx)
            .add_scalar(op)
            .add_scalar(round_)
            .add_scalar(timeout_us)
            for i, ctx in enumerate(ranks)
        ]
        return orch.submit_next_level_group(handle, args_list, config, workers=domain.workers)

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
