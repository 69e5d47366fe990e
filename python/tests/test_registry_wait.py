"""Registration while runs are outstanding (``docs/python.md``, registration): refused at
once by default; with ``timeout=`` it waits for no run to be outstanding, or raises
``RegistryBusyError`` naming how many were; the same for ``unregister``."""

import threading

import numpy as np
import pytest
import simpler


def test_without_a_timeout_a_registration_is_refused_while_a_run_is_outstanding(
    worker, spin, vadd
):
    h = worker.register(spin)
    run = worker.submit(h, [np.zeros(4, np.float32), 1500])
    with pytest.raises(simpler.WorkerStateError) as err:
        worker.register(vadd)
    assert not isinstance(err.value, simpler.RegistryBusyError)
    assert "outstanding" in str(err.value)
    with pytest.raises(simpler.RegistryBusyError) as err:
        worker.register(vadd, timeout=0.05)
    e = err.value
    assert isinstance(e, simpler.WorkerStateError) and isinstance(e, TimeoutError)
    assert e.outstanding == 1 and e.timeout_s == pytest.approx(0.05)
    assert "timed out" in str(e) and "1 run(s)" in str(e)
    with pytest.raises(simpler.RegistryBusyError):
        worker.unregister(h, timeout=0.05)
    run.result()
    # Refused registrations changed nothing: the callable still runs, vadd registers now.
    x = np.zeros(4, np.float32)
    worker.run(h, [x, 0])
    assert x[0] == 1
    worker.unregister(worker.register(vadd, timeout=1.0), timeout=1.0)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_bad_timeout_is_refused_naming_it(worker, vadd, bad):
    with pytest.raises(simpler.InvalidArgumentError) as err:
        worker.register(vadd, timeout=bad)
    assert err.value.arg == "timeout"
    with pytest.raises(simpler.ArgumentTypeError):
        worker.register(vadd, timeout="1")


def test_a_registration_with_a_timeout_succeeds_while_threads_keep_running(worker, vadd, scale):
    h = worker.register(scale)
    stop = threading.Event()
    errors = []

    def runner():
        x = np.ones(256, np.float32)
        try:
            while not stop.is_set():
                x[:] = 1.0
                worker.run(h, [x, 2.0])
                assert np.all(x == 2.0)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=runner) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        handles = [worker.register(vadd, timeout=60.0)]
        worker.unregister(handles[0], timeout=60.0)
        handles = [worker.register(vadd, timeout=60.0) for _ in range(3)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    a, b = np.ones((2, 100), np.float32)
    c = np.zeros(100, np.float32)
    worker.run(handles[0], [a, b, c])
    np.testing.assert_array_equal(c, 2.0)
