"""C = A·B on four chips of one level-3 worker, checked by a sub worker.

Chip ``i`` computes the row block ``C[128 i : 128 (i + 1), :] = A[128 i : 128 (i + 1), :] · B``
with the gemm example's kernels (this folder's ``simpler.toml`` gives them the 128 × 512 block
signature). The four row blocks do not overlap, so the four chip tasks run at once; then a
sub task — the Python function :func:`check`, run in a sub worker process — reads the
assembled ``C`` and compares it with an independent float64 numpy reference, writing its
verdict into shared memory. The script prints ``PASS`` and exits 0, or ``FAIL`` and exits 1.

Every tensor lives in ``create_buffer`` memory, which every child process maps in place, so
the same script runs with the chips in this process (``--isolation thread``, the default) or
each chip in a child process of its own (``--isolation process``).

Run: ``python examples/l3/multi_chip_gemm/main.py [--isolation thread|process] [--seed N]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from simpler import ChipCallable, SimplerError, TaskArgs, Worker
from simpler import TensorArgType as T

HERE = Path(__file__).resolve().parent
CHIPS = 4
M = K = N = 512
ROWS = M // CHIPS  # the row block of one chip: the 128 of this folder's simpler.toml
RTOL = ATOL = 1e-5  # numpy's allclose rule, as examples/gemm checks


def check(args) -> None:
    """The sub callable: ``args`` = A, B, C (INPUT) and the verdict (OUTPUT_EXISTING, 2 f32;
    simpler's tensors have no f64).

    Computes ``A·B`` in float64 with numpy (independent of the chips' kernels) and writes
    into the verdict the number of elements of ``C`` outside ``atol + rtol·|reference|`` and
    the largest absolute error. NaN in ``C`` counts as a mismatch."""
    a, b, c, verdict = args[0], args[1], args[2], args[3]
    reference = a.astype(np.float64) @ b.astype(np.float64)
    error = np.abs(c.astype(np.float64) - reference)
    bad = ~(error <= ATOL + RTOL * np.abs(reference))
    verdict[0] = float(np.count_nonzero(bad))
    verdict[1] = float(np.nanmax(error)) if np.isfinite(error).any() else float("inf")


def run(isolation: str = "thread", seed: int = 0) -> bool:
    """Runs the example once; True when the sub worker's check passed. Prints what ran."""
    with Worker(
        level=3,
        platform="sim",
        runtime="tensormap_and_ringbuffer",
        device_ids=list(range(CHIPS)),
        num_sub_workers=1,
        chip_isolation=isolation,
    ) as w:
        gemm = w.register(ChipCallable.from_example(HERE))  # the 128 x 512 row-block callable
        verify = w.register(check)  # pickled; runs in the sub worker process
        w.init()

        f32 = np.dtype(np.float32).itemsize
        sizes = (M * K * f32, K * N * f32, M * N * f32, 2 * f32)
        buf = w.create_buffer(sum(sizes))  # shared with every child process
        offsets = np.cumsum((0,) + sizes[:-1])
        A = buf.array((M, K), np.float32, int(offsets[0]))
        B = buf.array((K, N), np.float32, int(offsets[1]))
        C = buf.array((M, N), np.float32, int(offsets[2]))
        verdict = buf.array((2,), np.float32, int(offsets[3]))
        rng = np.random.default_rng(seed)
        A[:] = rng.uniform(-1, 1, (M, K))
        B[:] = rng.uniform(-1, 1, (K, N))
        C[:] = np.nan  # every element must be written by a chip
        verdict[:] = np.nan

        def orch(o, _args, cfg):
            for i in range(CHIPS):
                rows = slice(i * ROWS, (i + 1) * ROWS)
                o.submit_next_level(
                    gemm,
                    TaskArgs()
                    .add_tensor(A[rows], T.INPUT)
                    .add_tensor(B, T.INPUT)
                    .add_tensor(C[rows], T.OUTPUT_EXISTING),
                    cfg,
                    worker=i,
                )
            # Waits for the four chip tasks: C is INPUT here, and each of them wrote a part.
            o.submit_sub(
                verify,
                TaskArgs()
                .add_tensor(A, T.INPUT)
                .add_tensor(B, T.INPUT)
                .add_tensor(C, T.INPUT)
                .add_tensor(verdict, T.OUTPUT_EXISTING),
            )

        report = w.run(orch)
        mismatches, worst = int(verdict[0]), float(verdict[1])

    print(
        f"{CHIPS} chips ({isolation} isolation): C = A·B, {M} x {N} f32, one {ROWS}-row block "
        f"per chip; run {report.run}: {report.tasks} tasks in {report.total_time_s:.2f} s"
    )
    print(
        f"check (sub worker, numpy float64 reference): {mismatches} of {M * N} elements "
        f"differ (rtol = atol = {RTOL:g}), max |error| {worst:.3g}"
    )
    return mismatches == 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--isolation",
        choices=("thread", "process"),
        default="thread",
        help="chips in this process (thread, the default) or each in a child process",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    opts = parser.parse_args(argv)
    try:
        passed = run(opts.isolation, opts.seed)
    except SimplerError as err:
        print(f"FAIL: {type(err).__name__}: {err}")
        return 1
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
