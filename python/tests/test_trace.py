"""Traces from Python: Worker(trace=...), run(trace=path), CallConfig.trace_level, the report's
trace, and the scene plugin's --trace-dir DIR (docs/tracing.md)."""

import json
import textwrap

import numpy as np
import pytest
from conftest import KERNELS
from simpler import CallConfig, InvalidConfigError, Worker


def vadd_args(rng, n=4096):
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    return a, b, np.zeros(n, np.float32)


def test_run_trace_path_writes_perfetto_and_chrome(chip, vadd, rng, tmp_path):
    h = chip.register(vadd)
    a, b, c = vadd_args(rng)
    pb = tmp_path / "vadd.perfetto-trace"
    report = chip.run(h, [a, b, c], trace=pb)
    np.testing.assert_array_equal(c, a + b)
    assert report.has_trace
    data = pb.read_bytes()
    assert data and data[:1] != b"{"
    js = tmp_path / "vadd.json"
    report.write_trace(js)
    events = json.loads(js.read_text())["traceEvents"]
    subtasks = [e for e in events if e.get("cat") == "subtask"]
    assert subtasks and all(e["dur"] > 0 for e in subtasks)
    assert any(e.get("cat") == "host" and e["name"] == "wait" for e in events)
    summary = report.trace_summary()
    assert "Device" in summary and "Effective" in summary


def test_untraced_runs_have_no_trace(chip, vadd, rng, tmp_path):
    h = chip.register(vadd)
    report = chip.run(h, list(vadd_args(rng)))
    assert not report.has_trace
    with pytest.raises(ValueError, match="not traced"):
        report.write_trace(tmp_path / "x.perfetto-trace")
    assert not (tmp_path / "x.perfetto-trace").exists()


def test_call_config_and_worker_levels(vadd, rng, tmp_path):
    with pytest.raises(InvalidConfigError, match="trace"):
        Worker(level=2, trace="verbose")
    with pytest.raises(InvalidConfigError, match="verbose"):
        CallConfig(trace_level="verbose").validate()
    w = Worker(level=2, trace="dispatch")
    w.init()
    try:
        h = w.register(vadd)
        report = w.run(h, list(vadd_args(rng)))
        assert report.has_trace, "the worker's level applies to a run without a config"
        js = tmp_path / "w.json"
        report.write_trace(js)
        events = json.loads(js.read_text())["traceEvents"]
        runs = [e for e in events if e.get("cat") == "run"]
        assert [r["args"]["level"] for r in runs] == ["dispatch"]
        report = w.run(h, list(vadd_args(rng)), CallConfig(trace_level="tasks"))
        report.write_trace(js)
        runs = [e for e in json.loads(js.read_text())["traceEvents"] if e.get("cat") == "run"]
        assert [r["args"]["level"] for r in runs] == ["tasks"], "the config's own level wins"
    finally:
        w.close()


SCENE = textwrap.dedent(
    """
    import numpy as np
    from simpler.testing import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

    @scene_test(level=2)
    class TestScale(SceneTestCase):
        CALLABLE = {
            "orchestration": {
                "source": "KERNELS/one_task_orch.c",
                "signature": [("x", "inout", "f32"), ("alpha", "scalar", "f32")],
            },
            "incores": [{"func_id": 0, "source": "KERNELS/scale.c", "core_type": "aiv"}],
        }
        CASES = [
            {"name": "double", "params": {"alpha": 2.0}},
            {"name": "half", "params": {"alpha": 0.5}},
        ]

        def generate_args(self, params):
            return TaskArgsBuilder(
                TensorArg("x", np.arange(1, 9, dtype=np.float32)),
                Scalar("alpha", params["alpha"]),
            )

        def compute_golden(self, args, params):
            args.x[:] = args.x * params["alpha"]
    """
).replace("KERNELS", str(KERNELS))


def test_scene_plugin_writes_one_trace_per_case(pytester, tmp_path):
    pytester.makepyfile(test_scene_case=SCENE)
    out = tmp_path / "traces"
    result = pytester.runpytest("-p", "no:cacheprovider", "--trace-dir", str(out))
    result.assert_outcomes(passed=2)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["TestScale.double.perfetto-trace", "TestScale.half.perfetto-trace"]
    assert all((out / n).stat().st_size > 0 for n in names)
