"""A level-3 scene test: C = A·B with each of two chips computing half of C's rows, then a sub
worker doubling C into D; the golden result is numpy's, in float64.

Run alone with ``pytest python/tests/test_scene_l3.py --rounds 2 --case gemm_halves``, or
``python python/tests/test_scene_l3.py -p sim``.
"""

import l3_subs
import numpy as np
from simpler import TaskArgs, TensorArgType
from simpler.testing import SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

EX = "../../examples"
IN, OUT = TensorArgType.INPUT, TensorArgType.OUTPUT_EXISTING


def gemm_by_row_halves(orch, callables, args, config):
    """Chip i computes rows [i·m/2, (i+1)·m/2) of C; then D = 2·C on a sub worker."""
    m = args.A.shape[0]
    bounds = (0, m // 2, m)
    for i in range(2):
        rows = slice(bounds[i], bounds[i + 1])
        orch.submit_next_level(
            callables.gemm,
            TaskArgs()
            .add_tensor(args.A[rows], IN)
            .add_tensor(args.B, IN)
            .add_tensor(args.C[rows], OUT),
            config,
            worker=i,
        )
    orch.submit_sub(callables.double, TaskArgs().add_tensor(args.C, IN).add_tensor(args.D, OUT))


@scene_test(level=3, runtime="tensormap_and_ringbuffer")
class TestGemmTwoChips(SceneTestCase):
    """gemm's sources with a shape-free signature, one row half per chip."""

    DEVICE_COUNT = 2
    CALLABLE = {
        "orchestration": gemm_by_row_halves,
        "callables": [
            {
                "name": "gemm",
                "orchestration": {
                    "source": f"{EX}/gemm/orchestration.c",
                    "signature": [("A", "in", "f32"), ("B", "in", "f32"), ("C", "out", "f32")],
                },
                "incores": [
                    {"func_id": 0, "source": f"{EX}/gemm/kernels/gemm_tile.c", "core_type": "aic"}
                ],
            },
            {"name": "double", "callable": l3_subs.double_into},
        ],
    }
    CASES = [
        {"name": "gemm_halves", "params": {"m": 256, "k": 192, "n": 160}},
        {"name": "gemm_halves_ragged", "params": {"m": 131, "k": 70, "n": 65, "seed": 4}},
        {
            "name": "gemm_halves_process",
            "params": {"m": 128, "k": 128, "n": 64, "seed": 9},
            "config": {"chip_isolation": "process"},
        },
    ]

    def generate_args(self, params):
        rng = np.random.default_rng(params.get("seed", 0))
        m, k, n = params["m"], params["k"], params["n"]
        return TaskArgsBuilder(
            TensorArg("A", rng.uniform(-1, 1, (m, k)).astype(np.float32)),
            TensorArg("B", rng.uniform(-1, 1, (k, n)).astype(np.float32)),
            TensorArg("C", np.zeros((m, n), np.float32)),
            TensorArg("D", np.zeros((m, n), np.float32)),
        )

    def compute_golden(self, args, params):
        args.C[:] = args.A.astype(np.float64) @ args.B.astype(np.float64)
        args.D[:] = 2 * (args.A.astype(np.float64) @ args.B.astype(np.float64))


def add_on_chip_0(orch, callables, args, config):
    """c = a + b on chip 0 by vector_add, named by its bare example name."""
    orch.submit_next_level(
        callables.vadd,
        TaskArgs().add_tensor(args.a, IN).add_tensor(args.b, IN).add_tensor(args.c, OUT),
        config,
        worker=0,
    )


@scene_test(level=3, runtime="tensormap_and_ringbuffer")
class TestBareExampleName(SceneTestCase):
    """{"example": "vector_add"} resolves as ChipCallable.from_example("vector_add") does."""

    CALLABLE = {
        "orchestration": add_on_chip_0,
        "callables": [{"name": "vadd", "example": "vector_add"}],
    }
    CASES = [{"name": "bare_example", "params": {}}]

    def generate_args(self, params):
        rng = np.random.default_rng(1)
        n = 1 << 20  # the shape vector_add's manifest declares
        return TaskArgsBuilder(
            TensorArg("a", rng.random(n, dtype=np.float32)),
            TensorArg("b", rng.random(n, dtype=np.float32)),
            TensorArg("c", np.zeros(n, np.float32)),
        )

    def compute_golden(self, args, params):
        args.c[:] = args.a + args.b


if __name__ == "__main__":
    raise SystemExit(SceneTestCase.run_module(__name__))
