"""Traces from Python: Worker(trace=...), run(trace=path), CallConfig.trace_level, the report's
trace, and the scene plugin's --trace-dir DIR (docs/tracing.md); the merged trace of a
level-3 run, and the trace and task count of a level-2 run with its chip in a child process."""

import json
import textwrap

import numpy as np
import pytest
from conftest import KERNELS, run_cli
from simpler import CallConfig, InvalidConfigError, TaskArgs, TensorArgType, Worker


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


def processes(events):
    """Chrome JSON events' process names by pid, and each pid's subtask events."""
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    subtasks = {pid: [] for pid in names}
    for e in events:
        if e.get("cat") == "subtask":
            subtasks[e["pid"]].append(e)
    return names, subtasks


def l3_vadd(add, a, b, c):
    """An orchestration adding halves of a and b into c, one half per chip."""
    half = len(a) // 2
    IN, OUT = TensorArgType.INPUT, TensorArgType.OUTPUT_EXISTING

    def orch(o, _args, cfg):
        for i, s in enumerate((slice(0, half), slice(half, None))):
            args = TaskArgs().add_tensor(a[s], IN).add_tensor(b[s], IN).add_tensor(c[s], OUT)
            o.submit_next_level(add, args, cfg, worker=i)

    return orch


def test_level_3_trace_has_the_host_and_one_process_per_chip(vadd, rng, tmp_path):
    w = Worker(level=3, device_ids=[0, 1])
    w.init()
    try:
        add = w.register(vadd)
        a, b, c = vadd_args(rng, 8192)
        pb = tmp_path / "l3.perfetto-trace"
        report = w.run(l3_vadd(add, a, b, c), trace=pb)
        np.testing.assert_array_equal(c, a + b)
        assert report.has_trace and report.tasks == 2
        js = tmp_path / "l3.json"
        report.write_trace(js)
        # The Perfetto file decodes (`simpler trace convert`) to the same processes.
        back = tmp_path / "l3-back.json"
        run_cli("trace", "convert", pb, "-o", back, "--format", "chrome")
        for path in (js, back):
            events = json.loads(path.read_text())["traceEvents"]
            names, subtasks = processes(events)
            ordered = [names[pid] for pid in sorted(names)]
            assert ordered == ["L3 host", "chip 0 (device 0)", "chip 1 (device 1)"], path
            host = min(names)
            assert not subtasks[host], "the engine runs no subtask itself"
            for pid in sorted(names)[1:]:
                assert subtasks[pid] and all(e["dur"] > 0 for e in subtasks[pid]), names[pid]
            assert any(e.get("cat") == "host" and e["pid"] == host for e in events)
        summary = report.trace_summary()
        assert "chip 0 (device 0)" in summary and "chip 1 (device 1)" in summary
        assert "kernel_entry" in summary, summary

        untraced = w.run(l3_vadd(add, a, b, c))
        assert not untraced.has_trace
        with pytest.raises(ValueError, match="not traced"):
            untraced.write_trace(tmp_path / "none.perfetto-trace")
        with pytest.raises(ValueError, match="not traced"):
            untraced.trace_summary()
        assert not (tmp_path / "none.perfetto-trace").exists()

        # The config's level is the run's; orch_fn gets the config as given.
        seen = []

        def orch(o, args, cfg):
            seen.append(cfg)
            l3_vadd(add, a, b, c)(o, args, cfg)

        cfg = CallConfig(trace_level="dispatch")
        report = w.submit(orch, None, cfg).result()
        assert len(seen) == 1 and seen[0] is cfg and report.has_trace
        report.write_trace(js)
        runs = [e for e in json.loads(js.read_text())["traceEvents"] if e.get("cat") == "run"]
        assert [r["args"]["level"] for r in runs] == ["dispatch", "dispatch"]
    finally:
        w.close()


def test_level_3_worker_trace_level(vadd, rng, tmp_path):
    with pytest.raises(InvalidConfigError, match="trace"):
        Worker(level=3, device_ids=[0], trace="verbose")
    w = Worker(level=3, device_ids=[0, 1], trace="dispatch")
    w.init()
    try:
        add = w.register(vadd)
        a, b, c = vadd_args(rng, 8192)
        report = w.run(l3_vadd(add, a, b, c))
        assert report.has_trace, "the worker's level applies to a run whose config is off"
        js = tmp_path / "w.json"
        report.write_trace(js, format="chrome")
        runs = [e for e in json.loads(js.read_text())["traceEvents"] if e.get("cat") == "run"]
        assert [r["args"]["level"] for r in runs] == ["dispatch", "dispatch"]
    finally:
        w.close()


def test_process_isolated_run_has_its_trace_and_tasks(chip, vadd, rng, tmp_path):
    thread_tasks = chip.run(chip.register(vadd), list(vadd_args(rng))).tasks
    w = Worker(level=2, chip_isolation="process")
    w.init()
    try:
        h = w.register(vadd)
        a, b, c = vadd_args(rng)
        untraced = w.run(h, [a, b, c])
        assert not untraced.has_trace
        assert untraced.tasks == thread_tasks and thread_tasks > 0
        js = tmp_path / "iso.json"
        report = w.run(h, [a, b, c], trace=js)
        np.testing.assert_array_equal(c, a + b)
        assert report.has_trace and report.tasks == thread_tasks
        names, subtasks = processes(json.loads(js.read_text())["traceEvents"])
        chips = [pid for pid, name in names.items() if name.startswith("chip 0 (device 0, pid ")]
        assert len(chips) == 1, names
        assert subtasks[chips[0]], "the chip's subtasks came back from the child"
        assert "kernel_entry" in report.trace_summary()
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
