"""The level-3 examples (examples/l3/*/main.py) run as their READMEs say (the message queue's
in test_queue.py): each prints PASS and
exits 0, with the chips in this process and in child processes; and the gemm example's check
really fails a wrong result."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES

L3 = EXAMPLES / "l3"


def run_example(name, *args):
    return subprocess.run(
        [sys.executable, str(L3 / name / "main.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def passed(done):
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "PASS", done.stdout
    return lines


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_multi_chip_gemm_prints_pass(isolation):
    lines = passed(run_example("multi_chip_gemm", "--isolation", isolation))
    assert lines[0].startswith(f"4 chips ({isolation} isolation): C = A·B, 512 x 512 f32"), lines
    assert "run 1: 5 tasks" in lines[0], lines
    assert "0 of 262144 elements differ" in lines[1], lines


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_pipeline_prints_pass_for_both_runs(isolation):
    lines = passed(run_example("pipeline", "--isolation", isolation, "--seed", "3"))
    runs = [line for line in lines if line.startswith("run ")]
    assert [r.split(" ", 2)[1] for r in runs] == ["1", "2"], lines
    for r in runs:
        assert f"{isolation} isolation): 3 tasks" in r, r
        assert "y: 0 of 262144 elements differ" in r, r


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_allreduce_prints_pass_for_every_collective(isolation):
    sizes = "2,4,8" if isolation == "thread" else "2,4"
    lines = passed(run_example("allreduce", "--isolation", isolation, "--sizes", sizes))
    checks = [line for line in lines if "elements on" in line]
    assert len(checks) == 4 * len(sizes.split(",")), lines
    assert all(line.endswith(": 0 differ") for line in checks), lines


def load_main(name):
    spec = importlib.util.spec_from_file_location(f"l3_example_{name}", L3 / name / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gemm_check_counts_wrong_and_missing_elements():
    gemm = load_main("multi_chip_gemm")
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (8, 16)).astype(np.float32)
    b = rng.uniform(-1, 1, (16, 4)).astype(np.float32)
    c = (a.astype(np.float64) @ b).astype(np.float32)
    verdict = np.zeros(2)
    gemm.check([a, b, c, verdict])
    assert verdict[0] == 0 and verdict[1] < 1e-6
    c[3, 1] += 1e-3
    c[5, 2] = np.nan
    gemm.check([a, b, c, verdict])
    assert verdict[0] == 2
    assert verdict[1] == pytest.approx(1e-3, rel=1e-2)


def test_the_pipeline_reference_is_the_pooled_axpy():
    pipeline = load_main("pipeline")
    n, half = pipeline.N, pipeline.HALF
    a = np.arange(n, dtype=np.float32) / n
    b = np.ones(n, np.float32)
    y0 = np.full((half, half), 2.0, np.float32)
    want = pipeline.reference(a, b, y0, 0.5)
    side = pipeline.SIDE
    c = (a.astype(np.float64) + 1).reshape(side, side)
    assert want[1, 2] == pytest.approx(0.5 * c[2:4, 4:6].mean() + 2.0)
    x = np.empty((half, half), np.float32)
    pipeline.pool([a + b, x])
    np.testing.assert_allclose(0.5 * x + y0, want, rtol=1e-6)
