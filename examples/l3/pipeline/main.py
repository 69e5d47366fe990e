"""A chip → sub worker → chip pipeline on a level-3 worker, two runs in flight.

Each run is three tasks, ordered by their tensors alone:

1. chip 0, the ``vector_add`` example: ``c = a + b`` over 1,048,576 f32 (``c`` from
   ``orch.alloc``: the worker's heap ring, shared memory);
2. a sub worker, the Python function :func:`pool`: ``x`` = the 2 × 2 mean of ``c`` seen as a
   1024 × 1024 matrix, a 512 × 512 f32 (``x`` from ``orch.alloc`` too);
3. chip 1, the ``axpy`` example: ``y = alpha · x + y`` in place (``y`` a ``create_buffer``
   array).

The script submits two runs with their own inputs and ``alpha`` — the second run's graph is
built while the first executes — then waits for both and checks each ``y`` against numpy
(float64). It prints ``PASS`` and exits 0, or ``FAIL`` and exits 1.

Run: ``python examples/l3/pipeline/main.py [--isolation thread|process] [--seed N]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np
from simpler import ChipCallable, SimplerError, TaskArgs, Worker
from simpler import TensorArgType as T

SIDE = 1024  # c is SIDE x SIDE elements (vector_add's 1,048,576), x and y (SIDE/2)^2 (axpy's)
N = SIDE * SIDE
HALF = SIDE // 2
ALPHAS = (0.5, -2.0)  # one run each
RTOL = ATOL = 1e-5


def pool(args) -> None:
    """The sub stage: ``args`` = c (INPUT, 1-D, SIDE² f32), x (OUTPUT_EXISTING, HALF × HALF
    f32); ``x[i, j]`` = the mean of ``c``'s 2 × 2 block at (2i, 2j), summed in float64."""
    c, x = args[0], args[1]
    x[...] = c.reshape(HALF, 2, HALF, 2).mean(axis=(1, 3), dtype=np.float64)


def reference(a: np.ndarray, b: np.ndarray, y0: np.ndarray, alpha: float) -> np.ndarray:
    """The whole pipeline in float64 numpy: alpha · pool(a + b) + y0."""
    c = a.astype(np.float64) + b.astype(np.float64)
    x = c.reshape(HALF, 2, HALF, 2).mean(axis=(1, 3))
    return np.float64(np.float32(alpha)) * x + y0.astype(np.float64)


def run(isolation: str = "thread", seed: int = 0) -> bool:
    """Runs both pipelines; True when both results match. Prints one line per run."""
    with Worker(
        level=3,
        platform="sim",
        runtime="tensormap_and_ringbuffer",
        device_ids=[0, 1],
        num_sub_workers=1,
        chip_isolation=isolation,
    ) as w:
        add = w.register(ChipCallable.from_example("vector_add"))  # a, b in; c out: [N] f32
        axpy = w.register(ChipCallable.from_example("axpy"))  # x in; y inout: [512, 512]
        mean2x2 = w.register(pool)
        w.init()

        rng = np.random.default_rng(seed)
        inputs: List[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for _ in ALPHAS:
            buf = w.create_buffer(4 * (2 * N + HALF * HALF))  # a, b, y of one run
            a = buf.array((N,), np.float32)
            b = buf.array((N,), np.float32, 4 * N)
            y = buf.array((HALF, HALF), np.float32, 8 * N)
            a[:] = rng.uniform(-1, 1, N)
            b[:] = rng.uniform(-1, 1, N)
            y[:] = rng.uniform(-1, 1, (HALF, HALF))
            inputs.append((a, b, y, y.copy()))

        def pipeline(o, run_inputs, cfg):
            a, b, y, _ = run_inputs[0]
            alpha = run_inputs[1]
            c = o.alloc((N,), np.float32)  # intermediates: reclaimed after the run
            x = o.alloc((HALF, HALF), np.float32)
            o.submit_next_level(
                add,
                TaskArgs()
                .add_tensor(a, T.INPUT)
                .add_tensor(b, T.INPUT)
                .add_tensor(c, T.OUTPUT_EXISTING),
                cfg,
                worker=0,
            )
            o.submit_sub(
                mean2x2, TaskArgs().add_tensor(c, T.INPUT).add_tensor(x, T.OUTPUT_EXISTING)
            )
            o.submit_next_level(
                axpy,
                TaskArgs().add_tensor(x, T.INPUT).add_tensor(y, T.INOUT).add_scalar(alpha),
                cfg,
                worker=1,
            )

        # Two runs in flight: submit returns once the orchestration has built the graph.
        handles = [w.submit(pipeline, (inputs[i], alpha)) for i, alpha in enumerate(ALPHAS)]
        reports = [h.result() for h in handles]

        passed = True
        for (a, b, y, y0), alpha, report in zip(inputs, ALPHAS, reports):
            want = reference(a, b, y0, alpha)
            error = np.abs(y.astype(np.float64) - want)
            bad = int(np.count_nonzero(~(error <= ATOL + RTOL * np.abs(want))))
            passed = passed and bad == 0
            print(
                f"run {report.run} (alpha = {alpha:g}, {isolation} isolation): {report.tasks} "
                f"tasks (vector_add on chip 0 -> 2x2 mean on a sub worker -> axpy on chip 1); "
                f"y: {bad} of {y.size} elements differ from numpy, max |error| {error.max():.3g}"
            )
    return passed


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
