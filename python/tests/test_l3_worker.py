"""Level-3 worker, chips in this process (chip_isolation="thread"): runs over several chips,
chip -> sub -> chip pipelines, sub workers seeing shared memory in place, failures, the
orchestrator's lifetime, runs in flight."""

import os
import signal
import threading
import time

import l3_subs
import numpy as np
import pytest
import simpler
from simpler import CallConfig, TaskArgs, TensorArgType, Worker

IN = TensorArgType.INPUT
OUT = TensorArgType.OUTPUT_EXISTING
INOUT = TensorArgType.INOUT


def vadd_args(a, b, c):
    return TaskArgs().add_tensor(a, IN).add_tensor(b, IN).add_tensor(c, OUT)


@pytest.fixture(scope="module")
def l3():
    """Three chips and two sub workers, shared by the tests that leave them as they were."""
    w = Worker(level=3, platform="sim", device_ids=[0, 1, 2], num_sub_workers=2)
    w.init()
    yield w
    w.close()


def test_level_3_is_the_host_worker(l3):
    assert isinstance(l3, Worker) and isinstance(l3, simpler.HostWorker)
    assert (l3.level, l3.chip_count, l3.sub_worker_count) == (3, 3, 2)
    assert l3.device_ids == (0, 1, 2)
    pids = l3.child_pids()
    assert len(pids) == 2 and all("sub worker" in name for name in pids), pids


def test_blocks_on_three_chips_add_up(l3, vadd, rng):
    add = l3.register(vadd)
    n = 3 * 5000
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    blocks = [slice(i * 5000, (i + 1) * 5000) for i in range(3)]

    def orch(o, args, cfg):
        assert args == "payload" and isinstance(cfg, CallConfig)
        return [
            o.submit_next_level(add, vadd_args(a[s], b[s], c[s]), cfg, worker=i)
            for i, s in enumerate(blocks)
        ]

    report = l3.run(orch, "payload")
    assert report.tasks == 3 and report.run >= 1 and report.total_time_s > 0
    np.testing.assert_array_equal(c, a + b)


def test_a_group_runs_one_member_per_chip(l3, vadd, rng):
    add = l3.register(vadd)
    a = rng.random((2, 4096), dtype=np.float32)
    b = rng.random((2, 4096), dtype=np.float32)
    c = np.zeros_like(a)
    args_list = [vadd_args(a[i], b[i], c[i]) for i in range(2)]
    l3.run(lambda o, _a, cfg: o.submit_next_level_group(add, args_list, cfg, workers=[2, 0]))
    np.testing.assert_array_equal(c, a + b)


def test_chip_then_sub_then_chip_over_shared_memory(l3, vadd, scale, rng):
    add, mul = l3.register(vadd), l3.register(scale)
    double = l3.register(l3_subs.double_into)
    n = 8192
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    d = l3.create_buffer(4 * n).array((n,), np.float32)

    def orch(o, _args, cfg):
        c = o.alloc((n,), "f32")  # an intermediate from the heap ring
        o.submit_next_level(mul, TaskArgs().add_tensor(d, INOUT).add_scalar(0.5), cfg, worker=1)
        o.submit_next_level(add, vadd_args(a, b, c), cfg, worker=0)
        o.submit_sub(double, TaskArgs().add_tensor(c, IN).add_tensor(d, OUT))
        o.submit_next_level(mul, TaskArgs().add_tensor(d, INOUT).add_scalar(3.0), cfg, worker=2)

    l3.run(orch)
    # scale(d, 0.5) ran first on the zeros (WAR before the sub's write), the last one after.
    np.testing.assert_allclose(d, (a + b) * 2 * 3, rtol=1e-6)


def test_a_sub_task_sees_shared_arrays_in_place_and_scalars_as_ints(l3):
    fill = l3.register(l3_subs.fill_with_scalars)
    buf = l3.create_buffer(4096)
    t = buf.array((16,), np.uint64)
    ro = buf.array((4,), np.int64, byte_offset=1024)
    l3.run(
        lambda o, _a, _c: o.submit_sub(
            fill, TaskArgs().add_tensor(t, OUT).add_tensor(ro, IN).add_scalar(7).add_scalar(-2)
        )
    )
    assert list(t[3:]) == [7] * 13
    assert t[0] == 2**64 - 2, "the scalar's 64 raw bits"
    assert t[1] in l3.child_pids().values(), "written by a sub worker process"
    assert t[2] == 1, "the OUTPUT tensor is writable there, the INPUT one read-only"


def test_a_sub_task_decodes_scalars_by_dtype(l3):
    decode = l3.register(l3_subs.decode_scalars)
    buf = l3.create_buffer(4096)
    out = buf.array((6,), np.float32)  # every expected value is exact in f32
    l3.run(
        lambda o, _a, _c: o.submit_sub(
            decode,
            TaskArgs()
            .add_tensor(out, OUT)
            .add_scalar(0.5)
            .add_scalar(-3)
            .add_scalar(simpler.scalar_to_uint64(-1.5, "f16"))
            .add_scalar(200),
        )
    )
    assert list(out) == [0.5, -3.0, -3.0, 1056964608.0, -1.5, 200.0]
    assert simpler.uint64_to_scalar(simpler.scalar_to_uint64(-3), "i64") == -3
    assert simpler.uint64_to_scalar(simpler.scalar_to_uint64(0.5), np.float32) == 0.5
    assert simpler.uint64_to_scalar(simpler.scalar_to_uint64(0.1, "f64"), "f64") == 0.1
    with pytest.raises(simpler.ArgumentTypeError):
        simpler.uint64_to_scalar(0, "f128")


def test_a_complex_array_is_refused_naming_its_position_and_the_fix():
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(simpler.InvalidArgumentError) as info:
        TaskArgs().add_tensor(a, IN).add_tensor(b, IN).add_tensor(np.zeros(4, np.complex64), OUT)
    text = str(info.value)
    assert "`args[2]`" in text and "complex64" in text, text
    assert ".astype(np.float32)" in text and "float32" in text, text
    assert info.value.arg == "args[2]"


def test_a_strided_view_reaches_the_sub_with_its_strides(l3):
    describe = l3.register(l3_subs.describe)
    buf = l3.create_buffer(8 * 64 + 64 * 4)
    out = buf.array((16,), np.int64)
    m = buf.array((8, 8), np.float32, byte_offset=8 * 64)
    m[...] = np.arange(64, dtype=np.float32).reshape(8, 8)
    cols = m[:, 2:5]  # a strided view: no copy
    l3.run(
        lambda o, _a, _c: o.submit_sub(
            describe, TaskArgs().add_tensor(out, OUT).add_tensor(cols, IN).add_scalar(1)
        )
    )
    assert list(out[:8]) == [2, 8, 3, 8, 1, 4, 2, 1]
    assert out[-1] == int(cols.sum())


def test_a_closure_is_pickled_by_value(l3):
    buf = l3.create_buffer(64)
    t = buf.array((4,), np.float32)
    offset = 41.0
    h = l3.register(lambda args: args[0].__setitem__(slice(None), offset + 1))
    l3.run(lambda o, _a, _c: o.submit_sub(h, TaskArgs().add_tensor(t, OUT)))
    assert list(t) == [42.0] * 4


def test_a_raising_sub_fails_the_run_and_poisons_its_dependents(l3, scale):
    boom, mul = l3.register(l3_subs.divide_by_zero), l3.register(scale)
    buf = l3.create_buffer(64)
    x = buf.array((4,), np.float32)
    x[:] = 1.0
    y = np.ones(4, np.float32)

    def orch(o, _a, cfg):
        o.submit_sub(boom, TaskArgs().add_tensor(x, OUT))
        o.submit_next_level(mul, TaskArgs().add_tensor(x, INOUT).add_scalar(5.0), cfg, worker=0)
        o.submit_next_level(mul, TaskArgs().add_tensor(y, INOUT).add_scalar(5.0), cfg, worker=1)

    with pytest.raises(simpler.TaskFailedError) as info:
        l3.run(orch)
    err = info.value
    assert "ZeroDivisionError" in str(err) and "divide_by_zero" in str(err)
    assert "ZeroDivisionError" in err.traceback
    assert isinstance(err, RuntimeError) and err.code == 52
    assert list(x) == [1.0] * 4, "the poisoned chip task never ran"
    # The worker goes on.
    l3.run(lambda o, _a, cfg: o.submit_next_level(mul, TaskArgs().add_tensor(y, INOUT).add_scalar(2.0), cfg, worker=0))
    assert y[0] in (2.0, 10.0)


def test_an_exception_in_the_orchestration_is_raised_as_it_is(l3, scale):
    mul = l3.register(scale)
    x = np.ones(16, np.float32)

    class Mine(Exception):
        pass

    mine = Mine("from the orchestration")

    def orch(o, _a, cfg):
        o.submit_next_level(mul, TaskArgs().add_tensor(x, INOUT).add_scalar(2.0), cfg, worker=0)
        raise mine

    with pytest.raises(Mine) as info:
        l3.submit(orch)
    assert info.value is mine
    l3.run(lambda o, _a, cfg: o.submit_next_level(mul, TaskArgs().add_tensor(x, INOUT).add_scalar(2.0), cfg, worker=0))


def test_the_orchestrator_is_dead_after_its_function_returns(l3, scale):
    mul = l3.register(scale)
    kept = []
    l3.run(lambda o, _a, _c: kept.append(o))
    orch = kept[0]
    assert not orch.valid
    x = np.ones(4, np.float32)
    for call in (
        lambda: orch.submit_next_level(mul, TaskArgs().add_tensor(x, INOUT).add_scalar(1.0), worker=0),
        lambda: orch.alloc((4,), "f32"),
        orch.scope_begin,
    ):
        with pytest.raises(simpler.WorkerStateError, match="only inside"):
            call()


def test_two_runs_in_flight(l3, spin):
    h = l3.register(spin)
    xs = [np.zeros(4, np.float32) for _ in range(2)]

    def orch_for(i):
        return lambda o, _a, cfg: o.submit_next_level(
            h, TaskArgs().add_tensor(xs[i], INOUT).add_scalar(200), cfg, worker=i
        )

    first, second = l3.submit(orch_for(0)), l3.submit(orch_for(1))
    assert not first.done, "the first run is still spinning"
    assert second.run == first.run + 1
    with pytest.raises(simpler.WaitTimeoutError):
        first.wait(0.01)
    first.wait()
    report = second.result()
    assert first.done and second.done and report.tasks == 1
    assert xs[0][0] == 1.0 and xs[1][0] == 1.0
    first.wait()  # idempotent


def test_scopes_and_free(l3, scale):
    mul = l3.register(scale)

    def orch(o, _a, cfg):
        with o.scope():
            t = o.alloc((256,), np.float32)
            t[:] = 2.0
            o.submit_next_level(mul, TaskArgs().add_tensor(t, INOUT).add_scalar(4.0), cfg, worker=0)
            o.free(t)
        o.scope_begin()
        o.scope_end()
        with pytest.raises(simpler.WorkerStateError):
            o.scope_end()

    l3.run(orch)


def test_child_tensors_copy_to_and_from(l3, scale):
    mul = l3.register(scale)
    src = np.arange(64, dtype=np.float32)
    dst = np.zeros(64, np.float32)

    def orch(o, _a, cfg):
        dev = o.alloc_child_tensor(1, (64,), "f32")
        assert (dev.worker, dev.shape, dev.dtype) == (1, (64,), simpler.DataType.FLOAT32)
        o.copy_to(dev, src)
        o.submit_next_level(mul, TaskArgs().add_tensor(dev, INOUT).add_scalar(3.0), cfg, worker=1)
        o.copy_from(dst, dev)

    l3.run(orch)
    np.testing.assert_array_equal(dst, src * 3)


def test_worker_ids_are_checked(l3, vadd):
    add = l3.register(vadd)
    a = np.ones(16, np.float32)
    c = np.zeros(16, np.float32)

    def submit(worker):
        return l3.run(lambda o, _a, cfg: o.submit_next_level(add, vadd_args(a, a, c), cfg, worker=worker))

    for bad in (True, 1.0, "0", None):
        with pytest.raises(TypeError, match="worker"):
            submit(bad)
    with pytest.raises(ValueError, match="negative"):
        submit(-1)
    with pytest.raises(ValueError, match=r"worker 7.*3") as info:
        submit(7)
    assert info.value.worker == 7 and info.value.count == 3
    submit(np.int64(2))


def test_group_refusals(l3, vadd):
    add = l3.register(vadd)
    a = np.ones(16, np.float32)
    cs = [np.zeros(16, np.float32) for _ in range(2)]
    args_list = [vadd_args(a, a, c) for c in cs]
    with pytest.raises(ValueError, match="workers"):
        l3.run(lambda o, _a, cfg: o.submit_next_level_group(add, args_list, cfg, workers=[1, 1]))
    with pytest.raises(ValueError, match="args_list"):
        l3.run(lambda o, _a, cfg: o.submit_next_level_group(add, args_list, cfg, workers=[0, 1, 2]))
    with pytest.raises(TypeError, match=r"workers\[1\]"):
        l3.run(lambda o, _a, cfg: o.submit_next_level_group(add, args_list, cfg, workers=[0, 1.0]))
    assert all((c == 0).all() for c in cs)


def test_handle_refusals(l3, vadd):
    add = l3.register(vadd)
    a = np.ones(16, np.float32)
    c = np.zeros(16, np.float32)
    with pytest.raises(TypeError, match="handle"):
        l3.run(lambda o, _a, cfg: o.submit_next_level(vadd, vadd_args(a, a, c), cfg, worker=0))
    other = l3.register(l3_subs.add_one)
    l3.unregister(other)
    with pytest.raises(KeyError):
        l3.run(lambda o, _a, _c: o.submit_sub(other, TaskArgs()))
    with pytest.raises(ValueError, match="handle"):
        l3.run(lambda o, _a, _c: o.submit_sub(add, vadd_args(a, a, c)))
    with pytest.raises(TypeError, match="orchestration function"):
        l3.run(add)


def test_a_private_array_is_refused_for_a_sub_task(l3):
    h = l3.register(l3_subs.add_one)
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"args\[0\]") as info:
        l3.run(lambda o, _a, _c: o.submit_sub(h, TaskArgs().add_tensor(x, INOUT)))
    assert "create_buffer" in str(info.value)
    assert (x == 0).all()


def test_callables_registered_before_init_are_counted_and_run(vadd, rng):
    w = Worker(level=3, device_ids=[3], num_sub_workers=1)
    try:
        add = w.register(vadd)
        inc = w.register(l3_subs.add_one)
        assert w.register(l3_subs.add_one) is inc and inc.kind == "PYTHON_SERIALIZED"
        assert add.kind == "CHIP_CALLABLE" and inc.name == "l3_subs.add_one"
        w.init()
        buf = w.create_buffer(3 * 4 * 1024)
        a = w.make_tensor_arg(buf, (1024,), "f32")
        b, c = buf.array((2, 1024), np.float32, byte_offset=4 * 1024)
        a.array[:] = rng.random(1024, dtype=np.float32)
        b[:] = 1.0

        def orch(o, _a, cfg):
            o.submit_next_level(add, vadd_args(a, b, c), cfg, worker=0)
            o.submit_sub(inc, TaskArgs().add_tensor(c, INOUT))

        w.run(orch)
        np.testing.assert_array_equal(c, a.array + 2)
        assert bytes(buf.buf[:4]) == a.array[:1].tobytes()
        w.unregister(inc)
        w.run(lambda o, _a, _c: o.submit_sub(inc, TaskArgs().add_tensor(c, INOUT)))
        w.unregister(inc)
        with pytest.raises(simpler.UnknownCallableError):
            w.run(lambda o, _a, _c: o.submit_sub(inc, TaskArgs().add_tensor(c, INOUT)))
        np.testing.assert_array_equal(c, a.array + 3)
    finally:
        w.close()


def test_ctrl_c_interrupts_a_wait_and_the_run_goes_on(l3, spin):
    h = l3.register(spin)
    x = np.zeros(4, np.float32)
    handle = l3.submit(
        lambda o, _a, cfg: o.submit_next_level(
            h, TaskArgs().add_tensor(x, INOUT).add_scalar(3000), cfg, worker=0
        )
    )
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            handle.wait()
    finally:
        timer.cancel()
    assert time.monotonic() - started < 2.5, "the interrupt was not delivered promptly"
    assert not handle.done
    handle.wait()
    assert x[0] == 1.0


def test_a_python_callable_without_sub_workers_is_refused_at_init():
    w = Worker(level=3, device_ids=[0])
    try:
        w.register(l3_subs.add_one)
        with pytest.raises(ValueError, match=r"l3_subs\.add_one.*no sub workers") as info:
            w.init()
        assert "pass num_sub_workers=1" in str(info.value), info.value
    finally:
        w.close()


def test_a_python_callable_is_refused_at_register_after_init_without_sub_workers():
    with Worker(level=3, device_ids=[0]) as w:
        w.init()
        with pytest.raises(ValueError, match="num_sub_workers=1"):
            w.register(l3_subs.add_one)
        with pytest.raises(TypeError, match="ChipCallable or a Python function"):
            w.register("l3_subs.add_one")


def test_close_is_refused_inside_the_orchestration_and_from_another_thread(vadd):
    w = Worker(level=3, device_ids=[0])
    w.init()
    try:
        with pytest.raises(simpler.WorkerStateError):
            w.run(lambda o, _a, _c: w.close())
        errors = []

        def close_elsewhere():
            try:
                w.close()
            except Exception as e:  # noqa: BLE001 - the test inspects it
                errors.append(e)

        t = threading.Thread(target=close_elsewhere)
        t.start()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], simpler.WorkerStateError), errors
        assert not w.closed
        w.run(lambda o, _a, _c: None)  # still usable
    finally:
        w.close()
    assert w.closed
    w.close()  # idempotent
    with pytest.raises(simpler.WorkerStateError, match="closed"):
        w.run(lambda o, _a, _c: None)


def test_configuration_refusals():
    with pytest.raises(ValueError, match="chip_isolation"):
        Worker(level=3, device_ids=[0], chip_isolation="fiber")
    with pytest.raises(ValueError, match="device_ids"):
        Worker(level=3, device_ids=[0, -1])
    with pytest.raises(ValueError, match="num_sub_workers"):
        Worker(level=3, device_ids=[0], num_sub_workers=True)
    with pytest.raises(TypeError, match="bogus"):
        Worker(level=3, device_ids=[0], bogus=1)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="heap_ring_size"):
            Worker(level=3, device_ids=[0], heap_ring_size=bad)
    with pytest.raises(ValueError, match="heap_ring_size.*1 MiB"):
        Worker(level=3, device_ids=[0], heap_ring_size=4096)
    with pytest.raises(ValueError, match="device 1 appears twice"):
        Worker(level=3, device_ids=[1, 1])
    with pytest.raises(ValueError):
        Worker(level=3)  # neither chips nor sub workers
    with pytest.raises(NotImplementedError, match="malloc"):
        Worker(level=3, device_ids=[0]).malloc(64)


def test_an_allocation_larger_than_a_heap_is_ring_full():
    with Worker(level=3, device_ids=[0], heap_ring_size=1 << 20) as w:
        w.init()
        with pytest.raises(simpler.RingFullError) as info:
            w.run(lambda o, _a, _c: o.alloc((1 << 19,), "f32"))
        err = info.value
        assert err.code == 53 and err.nbytes >= 2 << 20 and err.code_name == "RING_FULL"
        w.run(lambda o, _a, _c: o.alloc((1 << 10,), "f32"))  # a fitting one is served


def test_a_failed_chip_run_keeps_its_class_and_names_the_task(l3, failing, scale):
    bad, mul = l3.register(failing), l3.register(scale)
    x = np.ones(8, np.float32)

    def orch(o, _a, cfg):
        o.submit_next_level(bad, TaskArgs().add_tensor(x, INOUT).add_scalar(1.0), cfg, worker=0)
        o.submit_next_level(mul, TaskArgs().add_tensor(x, INOUT).add_scalar(2.0), cfg, worker=1)

    with pytest.raises(simpler.RunFailedError) as info:
        l3.run(orch)
    err = info.value
    assert err.code < 0 and err.code_name, (err.code, err.details)
    assert err.task.endswith("failing") and err.worker.startswith("chip 0"), err.details
    assert (x == 1).all(), "the dependent scale never ran"


def test_python_raised_level_3_refusals_carry_the_engines_kind(l3, vadd, scale, spin):
    add, mul, sp = l3.register(vadd), l3.register(scale), l3.register(spin)
    a, c = np.ones(16, np.float32), np.zeros(16, np.float32)

    def refusal(orch_fn):
        with pytest.raises(simpler.SimplerError) as info:
            l3.run(orch_fn)
        return info.value.code_name

    for bad in (True, 1.5, "0", -1, 2**70):
        assert refusal(
            lambda o, _a, cfg: o.submit_next_level(add, vadd_args(a, a, c), cfg, worker=bad)
        ) == "UNKNOWN_WORKER", bad
    with pytest.raises(simpler.InvalidArgumentError) as info:
        TaskArgs().add_tensor(np.zeros(4, np.complex64))
    assert info.value.code_name == "INVALID_ARGUMENT"
    bad_tag = TaskArgs().add_tensor(a, IN).add_scalar(1.0)  # x is INOUT
    assert refusal(lambda o, _a, cfg: o.submit_next_level(mul, bad_tag, cfg, worker=0)) == (
        "INVALID_ARGUMENT"
    )
    assert refusal(lambda o, _a, _c: o.alloc((-1,), "f32")) == "INVALID_ARGUMENT"
    assert refusal(lambda o, _a, _c: o.alloc((4,), "f128")) == "INVALID_ARGUMENT"
    kept = []
    l3.run(lambda o, _a, _c: kept.append(o))
    with pytest.raises(simpler.WorkerStateError) as info:
        kept[0].scope_begin()
    assert info.value.code_name == "INVALID_STATE"
    x = np.zeros(4, np.float32)
    run = l3.submit(
        lambda o, _a, cfg: o.submit_next_level(
            sp, TaskArgs().add_tensor(x, INOUT).add_scalar(200), cfg, worker=0
        )
    )
    with pytest.raises(simpler.WaitTimeoutError) as info:
        run.wait(0.01)
    assert info.value.code_name == "WAIT_TIMEOUT"
    with pytest.raises(simpler.ArgumentTypeError) as info:
        run.wait("soon")
    assert info.value.code_name == "INVALID_ARGUMENT"
    run.wait()
    with pytest.raises(simpler.UnsupportedError) as info:
        l3.malloc(16)
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert "alloc_child_tensor(worker, shape, dtype)" in str(info.value)
    w = Worker(level=3, platform="sim", device_ids=[0])
    w.close()
    with pytest.raises(simpler.WorkerStateError) as info:
        w.register(vadd)
    assert info.value.code_name == "CLOSED"


def test_a_sub_function_without_a_file_shows_its_source_in_the_traceback(l3):
    import linecache

    # As a notebook or an interactive session defines it: code whose "file" only this
    # process's linecache knows.
    filename = "<l3-dynamic-test>"
    source = "def explode(args):\n    raise ValueError('from dynamic code')  # the marker\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    space = {}
    exec(compile(source, filename, "exec"), space)
    h = l3.register(space["explode"])
    try:
        with pytest.raises(simpler.TaskFailedError) as info:
            l3.run(lambda o, _a, _c: o.submit_sub(h, TaskArgs()))
        tb = info.value.traceback
        assert f'File "{filename}", line 2' in tb, tb
        assert "raise ValueError('from dynamic code')  # the marker" in tb, tb
    finally:
        l3.unregister(h)
        del linecache.cache[filename]
