"""Level 2 with the chip in a child process (Worker(level=2, chip_isolation="process")): the
level-2 API over any numpy array, gemm numerics, chained submits that see each other's
results, a failed run that leaves its arrays untouched, device memory in the child, and a
kernel that segfaults killing only the child: EndpointFailureError with the signal, later
work refused, this process alive."""

import os
import time

import numpy as np
import pytest
import simpler
from conftest import EXAMPLES, KERNELS
from simpler import ArgSpec, ChipCallable, CoreCallable, Worker
from simpler.isolated_worker import IsolatedWorker


def one_task(compiler, name, kernel, signature):
    orch = compiler.compile_orchestration("tensormap_and_ringbuffer", KERNELS / "one_task_orch.c")
    core = CoreCallable.build(binary=compiler.compile_incore(KERNELS / kernel, core_type="aiv"))
    return ChipCallable.build(signature, binary=orch, children=[(0, core)], name=name)


@pytest.fixture(scope="module")
def segv(compiler):
    return one_task(compiler, "segv", "segv.c", [ArgSpec("x", "inout", "f32")])


@pytest.fixture(scope="module")
def scribble_fail(compiler):
    return one_task(
        compiler,
        "scribble_fail",
        "scribble_fail.c",
        [ArgSpec("x", "inout", "f32"), ArgSpec("alpha", "scalar", "f32")],
    )


@pytest.fixture(scope="module")
def gemm(compiler):
    return ChipCallable.from_example(str(EXAMPLES / "gemm"), compiler)


@pytest.fixture(scope="module")
def isolated():
    """One chip in a child process, shared by the tests that leave it healthy."""
    w = Worker(level=2, platform="sim", chip_isolation="process", device_id=2)
    w.init()
    yield w
    w.close()


def test_the_chip_runs_in_a_child_process(isolated):
    assert isinstance(isolated, IsolatedWorker) and isinstance(isolated, Worker)
    pid = isolated.child_pid
    assert pid is not None and pid != os.getpid() and os.path.exists(f"/proc/{pid}")
    assert isolated.health == {"state": "ok"}
    assert "chip_isolation='process'" in repr(isolated)


def test_gemm_on_plain_arrays_matches_numpy_and_fills_the_report(isolated, gemm, rng):
    h = isolated.register(gemm)
    a = rng.random((512, 512), dtype=np.float32)
    b = rng.random((512, 512), dtype=np.float32)
    c = np.full((512, 512), np.nan, np.float32)
    report = isolated.run(h, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    assert report.epoch > 0
    assert 0 < report.device_time_s <= report.total_time_s
    assert report.tasks == 512  # the gemm tile tasks of the chip run, as the child reports them
    again = isolated.run(h, [b, a, c])
    np.testing.assert_allclose(c, b @ a, rtol=1e-4)
    assert again.epoch > report.epoch


def test_chained_submits_on_the_same_array_see_each_others_results(isolated, spin, scale):
    slow, mul = isolated.register(spin), isolated.register(scale)
    x = np.zeros(1024, np.float32)
    isolated.run(mul, [x, 1.0])  # staging memory for this shape, reused below
    first = isolated.submit(slow, [x, 400])  # sets x[0] = 1 after 400 ms
    second = isolated.submit(mul, [x, 3.0])  # reads x when it starts, after `first`
    assert not first.done, "the first run is still running when the second is submitted"
    first.wait(30)
    second.wait(30)
    assert x[0] == 3.0, "the second run scaled what the first one wrote"
    assert (x[1:] == 0).all()


def test_chained_vector_adds(isolated, vadd, rng):
    add = isolated.register(vadd)
    n = 100_000
    a, b = rng.random((2, n), dtype=np.float32)
    c, d = np.zeros(n, np.float32), np.zeros(n, np.float32)
    h1 = isolated.submit(add, [a, b, c])
    h2 = isolated.submit(add, [c, b, d])
    h2.result(), h1.result()
    np.testing.assert_array_equal(d, (a + b) + b)


def test_a_failed_run_leaves_its_array_untouched(isolated, scribble_fail, scale):
    bad, mul = isolated.register(scribble_fail), isolated.register(scale)
    x = np.full(256, 5.0, np.float32)
    with pytest.raises(simpler.RunFailedError) as info:
        isolated.run(bad, [x, 2.0])
    assert "scribble_fail" in str(info.value)
    assert (x == 5.0).all(), "nothing was copied back"
    assert isolated.health == {"state": "ok"}
    isolated.run(mul, [x, 2.0])
    assert (x == 10.0).all()


def test_argument_errors_are_level_2s(isolated, vadd, rng):
    add = isolated.register(vadd)
    a, b = rng.random((2, 64), dtype=np.float32)
    with pytest.raises(simpler.ArgumentCountError):
        isolated.run(add, [a, b])
    with pytest.raises(simpler.InvalidArgumentError, match="`c`"):
        isolated.run(add, [a, b, np.zeros(64, np.int32)])
    with pytest.raises(simpler.InvalidArgumentError, match="`c`"):
        isolated.run(add, [a, b, a])  # the output shares memory with an input


def test_device_memory_lives_in_the_child_and_is_used_in_place(isolated, scale):
    mul = isolated.register(scale)
    n = 300_000  # above the inline limit: staged both ways
    x = np.arange(n, dtype=np.float32)
    buf = isolated.malloc(4 * n)
    isolated.copy_to(buf, x)
    isolated.run(mul, [buf.tensor((n,), np.float32), 2.0])
    y = np.zeros(n, np.float32)
    isolated.copy_from(y, buf)
    np.testing.assert_array_equal(y, 2 * x)
    isolated.free(buf)


def test_a_segfault_kills_only_the_child_and_later_work_is_refused(segv, scale):
    w = Worker(level=2, chip_isolation="process", device_id=3)
    w.init()
    try:
        crash, mul = w.register(segv), w.register(scale)
        pid = w.child_pid
        x = np.ones(64, np.float32)
        with pytest.raises(simpler.EndpointFailureError) as info:
            w.run(crash, [x])
        err = info.value
        assert err.code_name == "ENDPOINT_FAILURE"
        assert err.endpoint == f"chip 0 (device 3, pid {pid})"
        assert "SIGSEGV" in err.report, err.report
        assert (x == 1).all()
        health = w.health
        assert health["state"] == "dead" and "SIGSEGV" in health["report"], health
        for call in (lambda: w.run(mul, [x, 2.0]), lambda: w.malloc(64)):
            with pytest.raises(simpler.EndpointFailureError, match="refuses"):
                call()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{pid}"), "the child is reaped"
    finally:
        w.close()
    assert w.health == {"state": "closed"}
