"""submit → RunHandle: done, wait(timeout), result, errors, Ctrl-C during wait."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import simpler
from simpler import Worker


def test_submit_then_wait_and_result(chip, vadd, rng):
    h = chip.register(vadd)
    a = rng.random(50_000, dtype=np.float32)
    b = rng.random(50_000, dtype=np.float32)
    c = np.zeros_like(a)
    handle = chip.submit(h, [a, b, c])
    assert isinstance(handle, simpler.RunHandle) and handle.epoch > 0
    report = handle.result()
    assert handle.done
    assert report.epoch == handle.epoch
    np.testing.assert_array_equal(c, a + b)
    handle.wait()  # idempotent
    handle.wait(0)


def test_several_runs_in_flight(chip, scale):
    h = chip.register(scale)
    xs = [np.full(1000, i, np.float32) for i in range(6)]
    handles = [chip.submit(h, [x, 2.0]) for x in xs]
    for i, (x, handle) in enumerate(zip(xs, handles)):
        handle.wait()
        np.testing.assert_array_equal(x, np.full(1000, 2 * i, np.float32))
    epochs = [hd.epoch for hd in handles]
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)


def test_wait_timeout_raises_timeout_error_and_the_run_goes_on(chip, spin):
    h = chip.register(spin)
    x = np.zeros(4, np.float32)
    handle = chip.submit(h, [x, 400])
    with pytest.raises(TimeoutError) as info:
        handle.wait(0.01)
    assert isinstance(info.value, simpler.WaitTimeoutError)
    handle.wait()
    assert handle.done and x[0] == 1.0


def test_wait_rejects_bad_timeouts(chip, scale):
    handle = chip.submit(chip.register(scale), [np.ones(4, np.float32), 1.0])
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            handle.wait(bad)
    with pytest.raises(TypeError):
        handle.wait("soon")
    handle.wait()


def test_a_failed_run_raises_from_every_wait(chip, failing):
    handle = chip.submit(chip.register(failing), [np.ones(4, np.float32), 1.0])
    for _ in range(2):
        with pytest.raises(simpler.RunFailedError) as info:
            handle.wait()
        assert info.value.code_name == "KERNEL_FATAL"
    with pytest.raises(simpler.RunFailedError):
        handle.result()


def test_ctrl_c_during_wait_raises_keyboard_interrupt_and_leaves_the_worker_usable(
    chip, spin, vadd, rng
):
    h = chip.register(spin)
    x = np.zeros(4, np.float32)
    handle = chip.submit(h, [x, 3000])
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
    a = rng.random(1000, dtype=np.float32)
    c = np.zeros_like(a)
    chip.run(chip.register(vadd), [a, a, c])
    np.testing.assert_array_equal(c, a + a)


def test_ctrl_c_during_run_raises_and_the_run_completes(chip, spin, scale):
    h = chip.register(spin)
    x = np.zeros(4, np.float32)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            chip.run(h, [x, 3000])
    finally:
        timer.cancel()
    assert time.monotonic() - started < 2.5
    # The next run queues behind the interrupted one, which completes first.
    y = np.ones(4, np.float32)
    chip.run(chip.register(scale), [y, 2.0])
    assert x[0] == 1.0 and (y == 2.0).all()


def test_close_waits_for_runs_in_flight(vadd, spin, rng):
    w = Worker(level=2)
    w.init()
    x = np.zeros(4, np.float32)
    w.submit(w.register(spin), [x, 200])
    w.close()
    assert x[0] == 1.0


def test_submit_passes_device_buffers_in_place(chip, vadd):
    h = chip.register(vadd)
    buf = chip.malloc(64)
    try:
        chip.copy_to(buf, np.arange(16, dtype=np.float32))
        t = buf.tensor([16], "f32")
        out = np.zeros(16, np.float32)
        chip.submit(h, [t, t, out]).wait(timeout=30)
        np.testing.assert_array_equal(out, 2 * np.arange(16, dtype=np.float32))
    finally:
        chip.free(buf)


def test_submits_sharing_arrays_behave_as_if_in_order(chip, vadd, rng):
    """A run reading (or writing) an array that an earlier, unfinished run writes waits for
    it, so chained submits on the same arrays give the sequential result."""
    h = chip.register(vadd)
    a, b, c = (rng.random(1 << 16, dtype=np.float32) for _ in range(3))
    d, e = np.empty_like(a), np.empty_like(a)
    first = chip.submit(h, [a, b, c])  # c = a + b
    second = chip.submit(h, [c, b, d])  # d = c + b, reads the first run's output
    third = chip.submit(h, [d, a, e])  # e = d + a
    for handle in (first, second, third):
        handle.wait(timeout=30)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    np.testing.assert_allclose(d, (a + b) + b, rtol=1e-6)
    np.testing.assert_allclose(e, ((a + b) + b) + a, rtol=1e-6)


def test_a_read_only_view_of_an_array_an_earlier_run_writes_reads_its_output(
    chip, spin, vadd, rng
):
    """A read-only input is lent, not copied at submit: a run reading a read-only view of
    memory that an earlier, unfinished run writes sees that run's output."""
    hs, hv = chip.register(spin), chip.register(vadd)
    x = np.zeros(1024, np.float32)
    first = chip.submit(hs, [x, 300])  # x[0] = 1 after 300 ms (inout)
    ro = x.view()
    ro.flags.writeable = False
    c = np.full_like(x, -1.0)
    second = chip.submit(hv, [ro, ro, c])  # c = x + x, once x is back
    assert not first.done, "the spin run finished before the test could overlap it"
    second.wait(timeout=30)
    assert first.done
    assert x[0] == 1.0
    np.testing.assert_array_equal(c, x + x)
    # Chained on vector_add: d = (a + b) + b through a read-only view of the first output.
    a, b = (rng.random(1 << 16, dtype=np.float32) for _ in range(2))
    s, d = np.empty_like(a), np.empty_like(a)
    view = s.view()
    view.flags.writeable = False
    handles = [chip.submit(hv, [a, b, s]), chip.submit(hv, [view, b, d])]
    for handle in handles:
        handle.wait(timeout=30)
    np.testing.assert_allclose(d, (a + b) + b, rtol=1e-6)
