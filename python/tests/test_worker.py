"""Worker: lifecycle, registration, runs, device memory, bad input, threads."""

import threading
import time
import warnings

import numpy as np
import pytest
import simpler
from simpler import (
    CallConfig,
    RuntimeEnv,
    TaskArgs,
    TensorArgType,
    Worker,
)


def vadd_args(rng, n=10_000):
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    return a, b, np.zeros(n, np.float32)


# -- lifecycle ----------------------------------------------------------------------------------


def test_register_before_init_then_run(vadd, rng):
    w = Worker(level=2, platform="sim", runtime="tensormap_and_ringbuffer", device_id=0)
    try:
        h = w.register(vadd)
        assert not w.initialized
        w.init()
        a, b, c = vadd_args(rng)
        report = w.run(h, [a, b, c])
        np.testing.assert_array_equal(c, a + b)
        assert report.epoch > 0 and report.total_time_s >= report.device_time_s > 0
    finally:
        w.close()
    assert w.closed


def test_context_manager_closes(vadd):
    with Worker(level=2) as w:
        w.init()
        w.register(vadd)
    assert w.closed
    w.close()  # idempotent


def test_lifecycle_misuse_is_refused(vadd, rng):
    w = Worker(level=2)
    h = w.register(vadd)
    with pytest.raises(simpler.WorkerStateError, match="init"):
        w.run(h, list(vadd_args(rng)))
    w.init()
    with pytest.raises(simpler.WorkerStateError, match="already"):
        w.init()
    w.close()
    for call in (
        lambda: w.run(h, list(vadd_args(rng))),
        lambda: w.register(vadd),
        lambda: w.malloc(64),
        w.init,
    ):
        with pytest.raises(simpler.WorkerStateError, match="closed"):
            call()


def test_unsupported_configurations():
    with pytest.raises(NotImplementedError, match="levels start at 2"):
        Worker(level=1)
    with pytest.raises(NotImplementedError, match="level=3"):
        Worker(level=2, device_ids=[0, 1])
    isolated = Worker(level=2, chip_isolation="process")  # test_l2_process.py runs one
    assert type(isolated).__name__ == "IsolatedWorker" and not isolated.initialized
    isolated.close()
    with pytest.raises(ValueError, match="chip_isolation"):
        Worker(level=2, chip_isolation="fork")
    Worker(level=2, chip_isolation="thread").close()
    with pytest.raises(NotImplementedError, match="platform"):
        Worker(level=2, platform="a2a3")
    with Worker(level=2, runtime="host_build_graph") as hbg:
        assert hbg.runtime == "host_build_graph"
    with pytest.raises(simpler.InvalidConfigError, match="tensormap_and_ringbuffer and host_build_graph"):
        Worker(level=2, runtime="tensormap")
    with pytest.raises(TypeError, match="bogus"):
        Worker(level=2, bogus=1)
    with pytest.raises(ValueError, match="aicpu_thread_num"):
        Worker(level=2, aicpu_thread_num=7).init()
    with pytest.raises(ValueError, match="clusters"):
        Worker(level=2, clusters=0).init()
    Worker(level=2, platform="a2a3sim", startup_timeout_s=5).close()


def test_register_dedups_and_counts(worker, vadd, rng):
    h1 = worker.register(vadd)
    h2 = worker.register(simpler.ChipCallable.from_bytes(vadd.to_bytes()))
    assert h1 is h2
    worker.unregister(h1)
    worker.run(h1, list(vadd_args(rng)))  # one registration left
    worker.unregister(h2)
    with pytest.raises(simpler.UnknownCallableError):
        worker.run(h1, list(vadd_args(rng)))
    with pytest.raises(KeyError):
        worker.unregister(h1)


def test_handles_are_bound_to_their_worker(vadd, rng):
    with Worker(level=2) as w1, Worker(level=2) as w2:
        w1.init()
        w2.init()
        h = w1.register(vadd)
        with pytest.raises(simpler.UnknownCallableError):
            w2.run(h, list(vadd_args(rng)))
        with pytest.raises(TypeError, match="handle"):
            w1.run(vadd, list(vadd_args(rng)))
        with pytest.raises(TypeError):
            w1.register("vector_add")


# -- runs ---------------------------------------------------------------------------------------


def test_run_with_task_args_and_tags(chip, vadd, rng):
    h = chip.register(vadd)
    a, b, c = vadd_args(rng)
    args = TaskArgs()
    args.add_tensor(chip.make_tensor_arg(a), TensorArgType.INPUT)
    args.add_tensor(chip.make_tensor_arg(b), TensorArgType.INPUT)
    args.add_tensor(chip.make_tensor_arg(c), TensorArgType.OUTPUT_EXISTING)
    assert (
        len(args) == 3 and args.tensor_count() == 3 and args.tag(2) is TensorArgType.OUTPUT_EXISTING
    )
    chip.run(h, args, CallConfig())
    np.testing.assert_array_equal(c, a + b)


def test_inout_and_scalar(chip, scale, rng):
    h = chip.register(scale)
    x = rng.random(1000, dtype=np.float32)
    expected = x * np.float32(2.5)
    chip.run(h, [x, 2.5])
    np.testing.assert_array_equal(x, expected)
    args = TaskArgs().add_tensor(x, TensorArgType.INOUT).add_scalar(np.float32(0.5))
    chip.run(h, args)
    np.testing.assert_array_equal(x, expected * np.float32(0.5))


def test_a_failed_run_raises_with_its_code_and_leaves_outputs_untouched(chip, failing, vadd, rng):
    h = chip.register(failing)
    x = np.arange(16, dtype=np.float32)
    before = x.copy()
    with pytest.raises(simpler.RunFailedError) as info:
        chip.run(h, [x, 1.0])
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.code < 0 and err.code_name == "KERNEL_FATAL"
    np.testing.assert_array_equal(x, before)
    # The worker is still usable.
    a, b, c = vadd_args(rng)
    chip.run(chip.register(vadd), [a, b, c])
    np.testing.assert_array_equal(c, a + b)


def test_call_config_sizes_each_run(chip, vadd, rng):
    h = chip.register(vadd)
    for config in [
        CallConfig(aicpu_thread_num=4, runtime_env=RuntimeEnv(ring_task_window=16384)),
        CallConfig(aicpu_thread_num=3),
        CallConfig(aicpu_thread_num=2, runtime_env=RuntimeEnv(ring_dep_pool=[64, 64, 64, 64])),
        CallConfig(runtime_env=RuntimeEnv(ring_heap=4096, ring_task_window=[1024, 64, 64, 64])),
    ]:
        a, b, c = vadd_args(rng)
        chip.run(h, [a, b, c], config)
        np.testing.assert_array_equal(c, a + b)
        a, b, c = vadd_args(rng)
        chip.submit(h, [a, b, c], config).wait(timeout=30)
        np.testing.assert_array_equal(c, a + b)
    a, b, c = vadd_args(rng)
    for bad, field in [
        (CallConfig(aicpu_thread_num=1), "aicpu_thread_num"),
        (CallConfig(aicpu_thread_num=9), "aicpu_thread_num"),
        (CallConfig(runtime_env=RuntimeEnv(ring_task_window=[64, 64, 48, 64])), "ring_task_window"),
        (CallConfig(runtime_env=RuntimeEnv(ring_heap=1 << 40)), "ring_heap"),
    ]:
        with pytest.raises(ValueError, match=field):
            chip.run(h, [a, b, c], bad)
    with pytest.raises(TypeError):
        chip.run(h, [a, b, c], {"aicpu_thread_num": 4})


def test_worker_options_reach_the_chip(vadd, rng):
    with Worker(level=2, clusters=2, aicpu_threads=3, task_window=64) as w:
        w.init()
        assert w.task_window == 64 and w.effective_aicpu_thread_num == 3
        h = w.register(vadd)
        a, b, c = vadd_args(rng, n=4096 * 8)
        w.run(h, [a, b, c], CallConfig(aicpu_thread_num=3))
        np.testing.assert_array_equal(c, a + b)


def test_the_gil_is_released_while_a_run_executes(chip, spin):
    h = chip.register(spin)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        x = np.zeros(4, np.float32)
        started = time.monotonic()
        chip.run(h, [x, 300])
        finished = time.monotonic()
    finally:
        stop.set()
        t.join()
    assert x[0] == 1.0
    during = [s for s in ticks if started < s < finished]
    assert len(during) >= 5, f"the other thread ran {len(during)} times during a 300 ms run"


# -- device memory ------------------------------------------------------------------------------


def test_malloc_copy_to_copy_from_free(chip, rng):
    buf = chip.malloc(4096)
    assert buf.nbytes == 4096 and buf.address
    src = rng.random(1024, dtype=np.float32)
    chip.copy_to(buf, src)
    dst = np.zeros(1024, np.float32)
    chip.copy_from(dst, buf)
    np.testing.assert_array_equal(dst, src)
    # Any buffer-protocol object works on both sides.
    raw = bytearray(4096)
    chip.copy_from(raw, buf)
    assert bytes(raw) == src.tobytes()
    chip.copy_to(buf, memoryview(bytes(4096)))
    chip.copy_from(dst, buf)
    assert not dst.any()
    chip.free(buf)
    with pytest.raises(simpler.WorkerStateError, match="freed"):
        chip.copy_to(buf, src)
    with pytest.raises(simpler.WorkerStateError):
        chip.free(buf)


def test_memory_misuse(chip):
    buf = chip.malloc(64)
    with pytest.raises(simpler.InvalidArgumentError, match="64"):
        chip.copy_to(buf, np.zeros(32, np.float32))
    with pytest.raises(simpler.InvalidArgumentError, match="read-only"):
        chip.copy_from(b"\0" * 64, buf)
    with pytest.raises(simpler.InvalidArgumentError, match="contiguous"):
        chip.copy_to(buf, np.zeros((4, 8), np.float32)[:, ::2])
    with pytest.raises(simpler.InvalidArgumentError):
        chip.malloc(0)
    with pytest.raises(TypeError):
        chip.copy_to(12345, np.zeros(4))
    with pytest.raises(simpler.InvalidArgumentError, match="needs"):
        buf.tensor([32], "f32")
    chip.free(buf)


def test_device_buffer_tensors_are_used_in_place(chip, vadd, rng):
    h = chip.register(vadd)
    n = 8192
    a, b, _ = vadd_args(rng, n)
    da, db, dc = (chip.malloc(n * 4) for _ in range(3))
    chip.copy_to(da, a)
    chip.copy_to(db, b)
    args = TaskArgs()
    args.add_tensor(da.tensor([n], simpler.DataType.FLOAT32), TensorArgType.INPUT)
    args.add_tensor(db.tensor([n], "f32"), TensorArgType.INPUT)
    args.add_tensor(dc.tensor([n], "f32"), TensorArgType.OUTPUT_EXISTING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chip.run(h, args)
    assert not caught, [str(w.message) for w in caught]
    out = np.zeros(n, np.float32)
    chip.copy_from(out, dc)
    np.testing.assert_array_equal(out, a + b)
    # submit takes device tensors too, in place.
    chip.copy_to(dc, np.zeros(n, np.float32))
    chip.submit(h, args).wait(timeout=30)
    chip.copy_from(out, dc)
    np.testing.assert_array_equal(out, a + b)
    # A view at an offset, mixed with host arrays.
    half = n // 2
    c = np.zeros(half, np.float32)
    view = da.tensor([half], "f32", byte_offset=half * 4)
    chip.run(h, [view, b[half:], c])
    np.testing.assert_array_equal(c, a[half:] + b[half:])
    with pytest.raises(simpler.InvalidArgumentError, match="contiguous"):
        chip.run(h, [da.tensor([half], "f32", strides=[2]), b[:half], c])
    for buf in (da, db, dc):
        chip.free(buf)
    with pytest.raises(simpler.WorkerStateError, match="freed"):
        chip.run(h, args)


# -- bad input ----------------------------------------------------------------------------------


def test_bad_input_is_refused_before_the_run_and_the_worker_stays_usable(
    chip, vadd, scale, spin, rng
):
    h = chip.register(vadd)
    hs = chip.register(scale)
    hsp = chip.register(spin)
    a, b, c = vadd_args(rng, 256)
    ro = a.copy()
    ro.flags.writeable = False
    cases = [
        (simpler.ArgumentCountError, TypeError, lambda: chip.run(h, [a, b])),
        (simpler.ArgumentCountError, TypeError, lambda: chip.run(h, TaskArgs().add_tensor(a))),
        (simpler.ArgumentTypeError, TypeError, lambda: chip.run(h, [a, b, [1.0] * 256])),
        (simpler.ArgumentTypeError, TypeError, lambda: chip.run(h, [a, b, 3.0])),
        (simpler.ArgumentTypeError, TypeError, lambda: chip.run(h, "abc")),
        (simpler.ArgumentTypeError, TypeError, lambda: chip.run(hs, [a, a])),
        (simpler.ArgumentTypeError, TypeError, lambda: chip.run(hs, [a, "2"])),
        (
            simpler.InvalidArgumentError,
            ValueError,
            lambda: chip.run(h, [a.astype(np.float64), b, c]),
        ),
        (simpler.InvalidArgumentError, ValueError, lambda: chip.run(h, [a, b, c.astype(np.int32)])),
        (
            simpler.InvalidArgumentError,
            ValueError,
            lambda: chip.run(h, [a.reshape(16, 16)[:, ::2], b[:128], c[:128]]),
        ),
        (simpler.InvalidArgumentError, ValueError, lambda: chip.run(h, [a, b, ro])),
        (
            simpler.InvalidArgumentError,
            ValueError,
            lambda: chip.run(h, [a, b, np.zeros(0, np.float32)]),
        ),
        (simpler.InvalidArgumentError, ValueError, lambda: chip.run(h, [a, b, a])),
        (
            simpler.InvalidArgumentError,
            ValueError,
            lambda: chip.run(h, [a, b, a.byteswap().view(a.dtype.newbyteorder())]),
        ),
        (
            simpler.InvalidArgumentError,
            ValueError,
            lambda: chip.run(
                h, TaskArgs().add_tensor(a).add_tensor(b).add_tensor(c, TensorArgType.INPUT)
            ),
        ),
        (simpler.InvalidArgumentError, ValueError, lambda: chip.run(hsp, [c, -1])),
    ]
    for cls, builtin, call in cases:
        c[:] = -1
        with pytest.raises(cls) as info:
            call()
        assert isinstance(info.value, builtin)
        assert (c == -1).all(), f"{cls.__name__}: the output was touched"
    # Named arguments in messages.
    with pytest.raises(simpler.InvalidArgumentError) as info:
        chip.run(h, [a, b, c.astype(np.int32)])
    assert info.value.arg == "c" and "i32" in str(info.value)
    f64_refused = "argument `a`: dtype is f64, the signature declares f32"
    with pytest.raises(simpler.InvalidArgumentError, match=f64_refused):
        chip.run(h, [a.astype(np.float64), b, c])
    # A misaligned array (data not on an element boundary) is refused, naming it.
    misaligned = np.frombuffer(bytes(a.nbytes + 1), dtype=np.float32, offset=1)
    assert misaligned.shape == a.shape and misaligned.ctypes.data % 4 != 0
    with pytest.raises(simpler.InvalidArgumentError, match="not aligned to its 4-byte") as info:
        chip.run(h, [misaligned, b, c])
    assert info.value.arg == "a"
    # Still usable.
    chip.run(h, [a, b, c])
    np.testing.assert_array_equal(c, a + b)


def test_shape_declared_by_the_signature_is_enforced(chip, compiler):
    callable = simpler.ChipCallable.from_example(simpler_examples() / "vector_add", compiler)
    h = chip.register(callable)
    small = np.zeros(16, np.float32)
    with pytest.raises(simpler.InvalidArgumentError, match="shape"):
        chip.run(h, [small, small.copy(), small.copy()])


def test_read_only_inputs_and_input_aliases_are_fine(chip, vadd, rng):
    h = chip.register(vadd)
    a, _, c = vadd_args(rng, 512)
    ro = a.copy()
    ro.flags.writeable = False
    chip.run(h, [ro, a, c])
    np.testing.assert_array_equal(c, ro + a)
    chip.run(h, [a, a, c])  # the same array twice, both only read
    np.testing.assert_array_equal(c, a + a)


def test_tensors_before_scalars_in_task_args():
    args = TaskArgs().add_scalar(1)
    with pytest.raises(simpler.InvalidArgumentError, match="before scalars"):
        args.add_tensor(np.zeros(4, np.float32))
    with pytest.raises(TypeError):
        TaskArgs().add_tensor(np.zeros(4, np.float32), "SIDEWAYS")
    with pytest.raises(TypeError):
        TaskArgs().add_scalar("3")


def simpler_examples():
    from conftest import EXAMPLES

    return EXAMPLES


def test_threads_share_a_worker(chip, vadd, scale):
    hv, hs = chip.register(vadd), chip.register(scale)
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(5):
                a, b, c = vadd_args(rng, 5000)
                chip.run(hv, [a, b, c])
                np.testing.assert_array_equal(c, a + b)
                x = a.copy()
                chip.run(hs, [x, 3.0])
                np.testing.assert_array_equal(x, a * np.float32(3.0))
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_native_errors_arrive_as_their_own_classes(worker, vadd):
    # LoadError: the orchestration image does not export the entry it names.
    missing = simpler.ChipCallable.build(
        vadd.signature, "no_such_entry", vadd.binary, vadd.children, name="missing_entry"
    )
    with pytest.raises(simpler.LoadError) as info:
        worker.register(missing)
    assert isinstance(info.value, RuntimeError) and "no_such_entry" in str(info.value)
    assert info.value.code == 3
    # DeviceError: a device address outside every allocation (through the native layer).
    with pytest.raises(simpler.DeviceError) as info:
        worker._native.copy_to(0x10, np.zeros(4, np.float32))
    assert info.value.context and info.value.cause
    # RegistryFullError: every callable slot taken.
    handles = []
    with pytest.raises(simpler.RegistryFullError) as info:
        for i in range(simpler._native.MAX_CALLABLES + 1):
            renamed = simpler.ChipCallable.build(
                vadd.signature, vadd.func_name, vadd.binary, vadd.children, name=f"copy{i}"
            )
            handles.append(worker.register(renamed))
    assert len(handles) == simpler._native.MAX_CALLABLES
    assert info.value.capacity == simpler._native.MAX_CALLABLES
    for h in handles:
        worker.unregister(h)
    worker.register(vadd)  # slots are free again
