"""The examples as scene tests; every reference is computed with numpy, in float64. Every
case runs under both runtime variants (a test per case and runtime, ``gemm_512-host_build_graph``:
the pooled worker's ``runtime``).

Run alone with ``pytest python/tests/test_scene_examples.py --rounds 3 --case gemm_512``, or
``python python/tests/test_scene_examples.py -p sim``; ``--runtime host_build_graph`` keeps one
runtime's tests.
"""

import numpy as np
from simpler.testing import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test  # noqa: F401

EX = "../../examples"
BOTH = ("tensormap_and_ringbuffer", "host_build_graph")


def _rng(params):
    return np.random.default_rng(params.get("seed", 0))


@scene_test(level=2, runtime=BOTH)
class TestVectorAdd(SceneTestCase):
    """c = a + b, tiled into independent AIV tasks."""

    CALLABLE = {
        "orchestration": {
            "source": f"{EX}/vector_add/orchestration.c",
            "function_name": "aicpu_orchestration_entry",
            "signature": [("a", "in", "f32"), ("b", "in", "f32"), ("c", "out", "f32")],
        },
        "incores": [
            {"func_id": 0, "source": f"{EX}/vector_add/kernels/add.c", "core_type": "aiv"},
        ],
    }
    CASES = [
        {"name": "vector_add_1m", "platforms": ["sim"], "params": {"n": 1 << 20}},
        {"name": "vector_add_ragged", "params": {"n": 4096 * 3 + 17, "seed": 1}},
    ]

    def generate_args(self, params):
        rng = _rng(params)
        n = params["n"]
        return TaskArgsBuilder(
            TensorArg("a", rng.standard_normal(n).astype(np.float32)),
            TensorArg("b", rng.standard_normal(n).astype(np.float32)),
            TensorArg("c", np.zeros(n, np.float32)),
        )

    def compute_golden(self, args, params):
        args.c[:] = args.a.astype(np.float64) + args.b.astype(np.float64)


@scene_test(level=2, runtime=BOTH)
class TestFormula(SceneTestCase):
    """f = (a + b + 1)(a + b + 2) + (a + b): five tasks in a diamond, a nested scope."""

    CALLABLE = {
        "orchestration": {
            "source": f"{EX}/formula/orchestration.c",
            "signature": [("a", "in", "f32"), ("b", "in", "f32"), ("f", "out", "f32")],
        },
        "incores": [
            {"func_id": 0, "source": f"{EX}/formula/kernels/add.c", "core_type": "aiv"},
            {"func_id": 1, "source": f"{EX}/formula/kernels/add_scalar.c", "core_type": "aiv"},
            {"func_id": 2, "source": f"{EX}/formula/kernels/mul.c", "core_type": "aiv"},
        ],
    }
    CASES = [
        {"name": "formula_16k", "params": {"n": 16384}},
        {"name": "formula_small", "params": {"n": 7, "seed": 3}},
    ]

    def generate_args(self, params):
        rng = _rng(params)
        n = params["n"]
        return TaskArgsBuilder(
            TensorArg("a", rng.uniform(-2, 2, n).astype(np.float32)),
            TensorArg("b", rng.uniform(-2, 2, n).astype(np.float32)),
            TensorArg("f", np.zeros(n, np.float32)),
        )

    def compute_golden(self, args, params):
        s = args.a.astype(np.float64) + args.b.astype(np.float64)
        args.f[:] = (s + 1) * (s + 2) + s


@scene_test(level=2, runtime=BOTH)
class TestGemm(SceneTestCase):
    """C = A·B in 64 x 64 tiles with K-chained accumulation (AIC tasks)."""

    CALLABLE = {"example": f"{EX}/gemm"}  # the manifest fixes 512 x 512

    CASES = [{"name": "gemm_512", "params": {"m": 512, "k": 512, "n": 512}}]

    def generate_args(self, params):
        rng = _rng(params)
        m, k, n = params["m"], params["k"], params["n"]
        return TaskArgsBuilder(
            TensorArg("A", rng.uniform(-1, 1, (m, k)).astype(np.float32)),
            TensorArg("B", rng.uniform(-1, 1, (k, n)).astype(np.float32)),
            TensorArg("C", np.zeros((m, n), np.float32)),
        )

    def compute_golden(self, args, params):
        args.C[:] = args.A.astype(np.float64) @ args.B.astype(np.float64)


@scene_test(level=2, runtime=BOTH)
class TestGemmShapes(TestGemm):
    """The gemm sources with a shape-free signature: ragged tiles in every dimension."""

    CALLABLE = {
        "orchestration": {
            "source": f"{EX}/gemm/orchestration.c",
            "signature": [("A", "in", "f32"), ("B", "in", "f32"), ("C", "out", "f32")],
        },
        "incores": [{"func_id": 0, "source": f"{EX}/gemm/kernels/gemm_tile.c", "core_type": "aic"}],
    }
    CASES = [
        {"name": "gemm_ragged", "params": {"m": 100, "k": 70, "n": 130, "seed": 5}},
        {"name": "gemm_thin", "params": {"m": 1, "k": 200, "n": 65, "seed": 6}},
    ]


@scene_test(level=2, runtime=BOTH)
class TestSoftmax(SceneTestCase):
    """Row-wise softmax: per-block row statistics, then normalisation (32 AIV tasks)."""

    CALLABLE = {
        "orchestration": {
            "source": f"{EX}/softmax/orchestration.c",
            "signature": [("x", "in", "f32"), ("y", "out", "f32")],
        },
        "incores": [
            {"func_id": 0, "source": f"{EX}/softmax/kernels/row_stats.c", "core_type": "aiv"},
            {"func_id": 1, "source": f"{EX}/softmax/kernels/row_normalize.c", "core_type": "aiv"},
        ],
    }
    CASES = [
        {"name": "softmax_1024x256", "params": {"rows": 1024, "cols": 256}},
        {"name": "softmax_ragged", "params": {"rows": 65, "cols": 3, "scale": 30.0, "seed": 2}},
    ]

    def generate_args(self, params):
        rng = _rng(params)
        shape = (params["rows"], params["cols"])
        x = (rng.standard_normal(shape) * params.get("scale", 4.0)).astype(np.float32)
        return TaskArgsBuilder(TensorArg("x", x), TensorArg("y", np.zeros(shape, np.float32)))

    def compute_golden(self, args, params):
        x = args.x.astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        args.y[:] = e / e.sum(axis=1, keepdims=True)


@scene_test(level=2, runtime=BOTH)
class TestAxpy(SceneTestCase):
    """y = alpha * x + y in place (y INOUT, alpha a signature scalar): 32 independent tiles."""

    CALLABLE = {"example": f"{EX}/axpy"}  # the manifest fixes 512 x 512

    CASES = [{"name": "axpy_512", "params": {"alpha": 2.5}}]

    def generate_args(self, params):
        rng = _rng(params)
        return TaskArgsBuilder(
            TensorArg("x", rng.standard_normal((512, 512)).astype(np.float32)),
            TensorArg("y", rng.standard_normal((512, 512)).astype(np.float32)),
            Scalar("alpha", params["alpha"]),
        )

    def compute_golden(self, args, params):
        args.y[:] = params["alpha"] * args.x.astype(np.float64) + args.y.astype(np.float64)


if __name__ == "__main__":
    raise SystemExit(SceneTestCase.run_module(__name__))
