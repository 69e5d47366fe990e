"""The host_build_graph runtime from Python: the worker's and the run's runtime, a run's
graph report, recordings replayed on new arrays, the refusals of a replay that does not
match or a stale recording, and the runtime's own failure codes (``docs/python.md`` §6)."""

import shutil

import numpy as np
import pytest
import simpler
from conftest import EXAMPLES, KERNELS
from simpler import (
    ArgSpec,
    CallConfig,
    ChipCallable,
    CoreCallable,
    RuntimeEnv,
    TaskArgs,
    TensorArgType,
    Worker,
    _native,
)

HBG = "host_build_graph"
TMR = "tensormap_and_ringbuffer"


@pytest.fixture(scope="module")
def tensor_data(compiler):
    """x *= alpha in one task, and a get_tensor_data of x[0] before it (`after` 0) or after
    it (`after` 1: it waits for the task)."""
    orch = compiler.compile_orchestration(HBG, KERNELS / "tensor_data_orch.c")
    core = CoreCallable.build(binary=compiler.compile_incore(KERNELS / "scale.c", core_type="aiv"))
    signature = [
        ArgSpec("x", "inout", "f32"),
        ArgSpec("alpha", "scalar", "f32"),
        ArgSpec("after", "scalar", "u64"),
    ]
    return ChipCallable.build(signature, binary=orch, children=[(0, core)], name="tensor_data")


@pytest.fixture(scope="module")
def hbg_worker():
    """A worker whose runs are host_build_graph unless their config says otherwise."""
    with Worker(level=2, runtime=HBG) as w:
        w.init()
        yield w


def vadd_args(seed, n=10_000):
    rng = np.random.default_rng(seed)
    a, b = rng.random((2, n), dtype=np.float32)
    return a, b, np.zeros(n, np.float32)


def test_the_runtime_is_the_runs_else_the_workers(hbg_worker, chip, vadd):
    h = hbg_worker.register(vadd)
    a, b, c = vadd_args(1)
    report = hbg_worker.run(h, [a, b, c])
    np.testing.assert_array_equal(c, a + b)
    graph = report.graph
    assert isinstance(graph, simpler.GraphReport) and not graph.replayed
    assert graph.tasks == report.tasks > 1 and graph.image_bytes > 64
    assert graph.build_time_s > 0 and graph.upload_time_s > 0
    assert hbg_worker.runtime == HBG and hbg_worker._native.config.runtime == HBG
    assert hbg_worker.run(h, [a, b, c], CallConfig(runtime=TMR)).graph is None
    # The worker's default is tensormap_and_ringbuffer; a run may ask for the other.
    h = chip.register(vadd)
    try:
        assert chip.runtime == TMR and chip.run(h, [a, b, c]).graph is None
        c[:] = 0
        assert chip.run(h, [a, b, c], CallConfig(runtime=HBG)).graph.tasks == report.tasks
        np.testing.assert_array_equal(c, a + b)
    finally:
        chip.unregister(h)


def test_a_callables_runtime_comes_between_the_runs_and_the_workers(worker, vadd, tmp_path):
    hbg = ChipCallable.build(
        vadd.signature, binary=vadd.binary, children=vadd.children, name="vadd", runtime=HBG
    )
    assert hbg.runtime == HBG and vadd.runtime is None
    assert ChipCallable.from_bytes(hbg.to_bytes()).runtime == HBG  # the bundle carries it
    h = worker.register(hbg)
    a, b, c = vadd_args(13)
    assert worker.run(h, [a, b, c]).graph is not None  # over the worker's default
    assert worker.run(h, [a, b, c], CallConfig(runtime=TMR)).graph is None  # the run's wins
    np.testing.assert_array_equal(c, a + b)
    # A manifest's runtime key reaches the callable through the toolchain's build.
    shutil.copytree(EXAMPLES / "vector_add", tmp_path / "vadd")
    toml = tmp_path / "vadd" / "simpler.toml"
    text = toml.read_text().replace('name = "vector_add"\n', f'name = "vadd"\nruntime = "{HBG}"\n')
    toml.write_text(text)
    assert ChipCallable.from_example(tmp_path / "vadd").runtime == HBG


def test_unknown_runtime_names_are_refused_listing_the_names():
    for make in (
        lambda: Worker(level=2, runtime="aicpu_build_graph"),
        lambda: Worker(level=3, device_ids=[0], runtime="aicpu_build_graph"),
        lambda: CallConfig(runtime="aicpu_build_graph").validate(),
        lambda: ChipCallable.build([], binary=b"", runtime="aicpu_build_graph"),
    ):
        with pytest.raises(simpler.InvalidConfigError, match="runtime") as err:
            make()
        assert "tensormap_and_ringbuffer and host_build_graph" in str(err.value)
    assert simpler.options.RUNTIMES == (TMR, HBG)
    env = _native.RuntimeEnv(ready_queue=64)
    assert env.ready_queue == 64 and _native.RuntimeEnv().ready_queue is None
    assert _native.CallConfig(runtime=HBG).runtime == HBG and _native.CallConfig().runtime is None


def test_a_recording_replays_on_new_arrays(worker, vadd):
    h = worker.register(vadd)
    a, b, c = vadd_args(2)
    # The worker's runtime is tensormap_and_ringbuffer: record runs host_build_graph anyway.
    rec = worker.record(h, [a, b, c])
    np.testing.assert_array_equal(c, a + b)
    assert rec.tasks == rec.report.tasks > 1 and rec.image_bytes > 64 and rec.generation > 0
    assert rec.report.graph is not None and not rec.report.graph.replayed
    assert rec.build_time_s > 0 and rec.upload_time_s > 0
    assert rec.callable == "vector_add" and "tasks=" in repr(rec) and "vector_add" in repr(rec)
    a2, b2, c2 = vadd_args(3)
    report = worker.replay(rec, [a2, b2, c2])
    np.testing.assert_array_equal(c2, a2 + b2)
    assert report.graph.replayed and report.graph.build_time_s == 0
    assert report.graph.tasks == rec.tasks
    # submit/run take the recording in place of the handle; two replays in flight.
    runs = [vadd_args(seed) for seed in (4, 5)]
    handles = [worker.submit(rec, list(args)) for args in runs]
    for handle, (a3, b3, c3) in zip(handles, runs):
        assert handle.result().graph.replayed
        np.testing.assert_array_equal(c3, a3 + b3)
    task_args = TaskArgs()
    for t, tag in zip(vadd_args(6), ("INPUT", "INPUT", "OUTPUT_EXISTING")):
        task_args.add_tensor(worker.make_tensor_arg(t), TensorArgType[tag])
    assert worker.run(rec, task_args).graph.replayed
    out = task_args.tensor(2).array
    np.testing.assert_array_equal(out, task_args.tensor(0).array + task_args.tensor(1).array)


def test_a_replay_that_differs_from_the_recording_names_the_argument(worker, vadd, scale):
    h = worker.register(vadd)
    rec = worker.record(h, list(vadd_args(7)))
    a, b, c = vadd_args(8, n=5_000)
    with pytest.raises(simpler.ReplayMismatchError) as err:
        worker.replay(rec, [a, b, c])
    assert isinstance(err.value, simpler.InvalidArgumentError) and isinstance(err.value, ValueError)
    assert err.value.arg == "a" and "5000" in err.value.reason
    assert not c.any(), "nothing ran"
    s = worker.register(scale)
    x = np.ones(64, np.float32)
    rec = worker.record(s, [x, 2.0])
    np.testing.assert_array_equal(x, 2.0)
    worker.replay(rec, [x, 2.0])
    np.testing.assert_array_equal(x, 4.0)
    with pytest.raises(simpler.ReplayMismatchError) as err:
        worker.replay(rec, [x, 3.0])
    assert err.value.arg == "alpha"
    np.testing.assert_array_equal(x, 4.0)


def test_a_recording_of_an_unregistered_callable_is_stale(worker, vadd):
    h = worker.register(vadd)
    rec = worker.record(h, list(vadd_args(9)))
    worker.unregister(h)
    with pytest.raises(simpler.StaleRecordingError) as err:
        worker.replay(rec, list(vadd_args(10)))
    assert isinstance(err.value, simpler.WorkerStateError) and isinstance(err.value, RuntimeError)
    assert err.value.callable == "vector_add" and "no longer registered" in err.value.reason
    worker.register(vadd)
    with pytest.raises(simpler.StaleRecordingError, match="registered again"):
        worker.submit(rec, list(vadd_args(10)))


@pytest.mark.parametrize(
    "env, code, name",
    [
        (RuntimeEnv(ring_dep_pool=4), -6, "DEPENDENCY_OVERFLOW"),
        (RuntimeEnv(ring_task_window=4), -3, "FLOW_CONTROL_DEADLOCK"),
        (RuntimeEnv(ready_queue=1), -104, "READY_QUEUE_OVERFLOW"),
    ],
)
def test_a_graph_that_does_not_fit_fails_with_the_runtimes_code(hbg_worker, env, code, name):
    """formula: 5 tasks with 6 dependency edges, two of them ready together."""
    h = hbg_worker.register(ChipCallable.from_example(EXAMPLES / "formula"))
    a, b = np.random.default_rng(11).random((2, 16384), dtype=np.float32)
    f = np.zeros(16384, np.float32)
    with pytest.raises(simpler.RunFailedError) as err:
        hbg_worker.run(h, [a, b, f], CallConfig(runtime_env=env))
    assert err.value.code == code and err.value.code_name == name
    assert not f.any()
    hbg_worker.run(h, [a, b, f])  # the worker stays usable
    s = a + b
    np.testing.assert_allclose(f, (s + 1) * (s + 2) + s, rtol=1e-5)


def test_tensor_data_that_would_wait_for_a_task_is_refused(hbg_worker, tensor_data):
    h = hbg_worker.register(tensor_data)
    x = np.ones(16, np.float32)
    with pytest.raises(simpler.RunFailedError) as err:
        hbg_worker.run(h, [x, 2.0, 1])
    assert err.value.code == -5 and "has not run" in str(err.value)
    hbg_worker.run(h, [x, 2.0, 1], CallConfig(runtime=TMR))  # the device orchestration waits
    hbg_worker.run(h, [x, 2.0, 0])  # a read that waits for nothing
    np.testing.assert_array_equal(x, 4.0)
    with pytest.raises(simpler.InvalidArgumentError) as err:
        hbg_worker.record(h, [x, 2.0, 0])  # a replay could not repeat the read
    assert err.value.arg == "record"


def test_workers_that_cannot_record_say_so(hbg_worker, worker, vadd, tensor_data):
    rec = worker.record(worker.register(vadd), list(vadd_args(12)))
    hbg_worker.register(vadd)
    with pytest.raises(simpler.StaleRecordingError, match="another worker"):
        hbg_worker.replay(rec, list(vadd_args(12)))
    with pytest.raises(TypeError):
        worker.replay(rec._handle, list(vadd_args(12)))
    x = np.ones(16, np.float32)
    # The chip in a child process: the worker's and the run's runtime cross to it.
    with Worker(level=2, chip_isolation="process", runtime=HBG) as iso:
        h = iso.register(tensor_data)
        iso.init()
        with pytest.raises(NotImplementedError, match="record"):
            iso.record(h, [x, 2.0, 1])
        with pytest.raises(simpler.RunFailedError) as err:
            iso.run(h, [x, 2.0, 1])
        assert err.value.code == -5
        assert iso.run(h, [x, 2.0, 1], CallConfig(runtime=TMR)).graph is None
        np.testing.assert_array_equal(x, 2.0)
    # Level 3: every chip runs under the worker's runtime, a task's config may override it.
    with Worker(level=3, device_ids=[0], runtime=HBG) as l3:
        h = l3.register(tensor_data)
        l3.init()
        with pytest.raises(NotImplementedError, match="record"):
            l3.record(h, [x, 2.0, 1])

        def orch(o, args, cfg):
            o.submit_next_level(
                h,
                TaskArgs().add_tensor(x, TensorArgType.INOUT).add_scalar(2.0).add_scalar(1),
                cfg,
                worker=0,
            )

        with pytest.raises(simpler.RunFailedError) as err:
            l3.run(orch)
        assert err.value.code == -5
        l3.run(orch, config=CallConfig(runtime=TMR))
        np.testing.assert_array_equal(x, 4.0)
