"""Level-3 worker with each chip in its own child process (chip_isolation="process"): shared
memory reaches the chips in place, private arrays are refused, a chip killed mid-run fails
its task with ENDPOINT_FAILURE while the other chips go on; and the child program itself."""

import os
import signal
import subprocess
import sys
import threading
import time

import l3_subs
import numpy as np
import pytest
import simpler
from simpler import TaskArgs, TensorArgType, Worker

IN = TensorArgType.INPUT
OUT = TensorArgType.OUTPUT_EXISTING
INOUT = TensorArgType.INOUT


@pytest.fixture(scope="module")
def isolated():
    """Two chips in child processes and one sub worker."""
    w = Worker(level=3, device_ids=[0, 1], num_sub_workers=1, chip_isolation="process")
    w.init()
    yield w
    w.close()


def chip_pid(worker, chip):
    pids = [pid for name, pid in worker.child_pids().items() if name.startswith(f"chip {chip} ")]
    assert len(pids) == 1, worker.child_pids()
    return pids[0]


def test_chips_run_in_their_own_processes(isolated):
    pids = isolated.child_pids()
    assert len(pids) == 3, pids
    assert os.getpid() not in pids.values()
    for pid in pids.values():
        assert os.path.exists(f"/proc/{pid}")


def test_chips_compute_on_shared_memory_in_place(isolated, vadd, scale, rng):
    add, mul = isolated.register(vadd), isolated.register(scale)
    n = 2 * 4096
    buf = isolated.create_buffer(3 * 4 * n)
    a, b, c = (buf.array((n,), np.float32, byte_offset=i * 4 * n) for i in range(3))
    a[:] = rng.random(n, dtype=np.float32)
    b[:] = rng.random(n, dtype=np.float32)
    halves = [slice(0, n // 2), slice(n // 2, n)]

    def orch(o, _a, cfg):
        for i, s in enumerate(halves):
            o.submit_next_level(
                add, TaskArgs().add_tensor(a[s], IN).add_tensor(b[s], IN).add_tensor(c[s], OUT),
                cfg, worker=i,
            )
        o.submit_next_level(mul, TaskArgs().add_tensor(c, INOUT).add_scalar(2.0), cfg, worker=1)

    isolated.run(orch)
    np.testing.assert_array_equal(c, (a + b) * 2)


def test_chip_sub_chip_pipeline_across_processes(isolated, vadd, scale, rng):
    add, mul = isolated.register(vadd), isolated.register(scale)
    double = isolated.register(l3_subs.double_into)
    n = 4096
    src = isolated.create_buffer(2 * 4 * n)
    a, b = src.array((n,), np.float32), src.array((n,), np.float32, byte_offset=4 * n)
    a[:] = rng.random(n, dtype=np.float32)
    b[:] = rng.random(n, dtype=np.float32)
    d = isolated.create_buffer(4 * n).array((n,), np.float32)

    def orch(o, _a, cfg):
        c = o.alloc((n,), np.float32)
        o.submit_next_level(
            add, TaskArgs().add_tensor(a, IN).add_tensor(b, IN).add_tensor(c, OUT), cfg, worker=0
        )
        o.submit_sub(double, TaskArgs().add_tensor(c, IN).add_tensor(d, OUT))
        o.submit_next_level(mul, TaskArgs().add_tensor(d, INOUT).add_scalar(0.25), cfg, worker=1)

    isolated.run(orch)
    np.testing.assert_array_equal(d, (a + b) * 2 * np.float32(0.25))


def test_a_private_array_is_refused_for_a_chip_process(isolated, scale):
    mul = isolated.register(scale)
    x = np.ones(64, np.float32)
    with pytest.raises(ValueError, match=r"args\[0\]") as info:
        isolated.run(
            lambda o, _a, cfg: o.submit_next_level(
                mul, TaskArgs().add_tensor(x, INOUT).add_scalar(2.0), cfg, worker=0
            )
        )
    assert "create_buffer" in str(info.value)
    assert (x == 1).all()


def test_a_killed_chip_fails_its_task_and_the_others_go_on(vadd, spin, scale):
    w = Worker(level=3, device_ids=[0, 1], chip_isolation="process")
    w.init()
    try:
        slow, mul = w.register(spin), w.register(scale)
        buf = w.create_buffer(4096)
        x, y = buf.array((4,), np.float32), buf.array((4,), np.float32, byte_offset=1024)
        victim = chip_pid(w, 0)
        handle = w.submit(
            lambda o, _a, cfg: o.submit_next_level(
                slow, TaskArgs().add_tensor(x, INOUT).add_scalar(20_000), cfg, worker=0
            )
        )
        time.sleep(0.3)
        assert not handle.done
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(simpler.EndpointFailureError) as info:
            handle.wait(30)
        err = info.value
        assert "chip 0" in str(err) and err.code_name == "ENDPOINT_FAILURE"
        assert "SIGKILL" in err.report or "signal 9" in err.report or "killed" in err.report
        assert isinstance(err, RuntimeError) and err.code == 50
        # Chip 1 goes on; chip 0 refuses work.
        y[:] = 1.0
        w.run(
            lambda o, _a, cfg: o.submit_next_level(
                mul, TaskArgs().add_tensor(y, INOUT).add_scalar(3.0), cfg, worker=1
            )
        )
        assert list(y) == [3.0] * 4
        with pytest.raises(simpler.SimplerError, match="chip 0"):
            w.run(
                lambda o, _a, cfg: o.submit_next_level(
                    mul, TaskArgs().add_tensor(y, INOUT).add_scalar(3.0), cfg, worker=0
                )
            )
    finally:
        w.close()


def test_a_sub_worker_ignores_sigint_and_ctrl_c_interrupts_only_the_wait(isolated):
    slow = isolated.register(l3_subs.slow_fill)
    x = isolated.create_buffer(64).array((4,), np.float32)
    sub = [pid for name, pid in isolated.child_pids().items() if name.startswith("sub worker")]
    handle = isolated.submit(
        lambda o, _a, _c: o.submit_sub(slow, TaskArgs().add_tensor(x, OUT).add_scalar(2000))
    )
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        time.sleep(0.1)
        os.kill(sub[0], signal.SIGINT)  # Ctrl-C reaches the children too: they ignore it
        with pytest.raises(KeyboardInterrupt):
            handle.wait()
    finally:
        timer.cancel()
    assert time.monotonic() - started < 1.5, "the interrupt was not delivered promptly"
    assert not handle.done
    handle.wait()
    assert (x == 1).all(), "the sub worker went on through its SIGINT"


def test_a_child_that_cannot_start_fails_init_and_nothing_is_left(monkeypatch, tmp_path):
    import simpler.host_worker as host_worker

    missing = str(tmp_path / "no-such-python")
    monkeypatch.setattr(
        host_worker, "child_program", lambda: {"child_program": missing, "child_args": []}
    )
    w = Worker(level=3, device_ids=[0], num_sub_workers=2)
    with pytest.raises(simpler.StartupError) as info:
        w.init()
    assert info.value.code == 51 and "sub worker" in info.value.endpoint
    assert missing in str(info.value)
    assert w.child_pids() == {}, "the chip and every started child were stopped"
    w.close()


def test_the_child_program_refuses_to_run_by_hand():
    env = dict(os.environ)
    env.pop("SIMPLER_CHILD_ROLE", None)
    done = subprocess.run(
        [sys.executable, "-m", "simpler._child"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2
    assert "not by hand" in done.stderr
