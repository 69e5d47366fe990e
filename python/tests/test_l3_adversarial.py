"""Attacks on the level-3 worker from Python: ids and shapes past what the engine can count,
tensors and scalars that disagree with the chip signature, unregister refused while a run is
built or in flight, sub functions that never return, exit, raise BaseExceptions or write
their inputs, Ctrl-C through a submit or registration blocked behind hung tasks, close racing
with another thread's orchestration or registration, children killed while idle, a child
that crashes at start, many threads at once, the parent SIGKILLed, and 200 runs over four chip
processes that must not grow this process's descriptors, threads or children (docs/python.md
§11, docs/l3-worker.md §5, §8)."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import l3_subs
import numpy as np
import pytest
import simpler
from simpler import ArgSpec, TaskArgs, TensorArgType, Worker

IN = TensorArgType.INPUT
OUT = TensorArgType.OUTPUT_EXISTING
INOUT = TensorArgType.INOUT


def vadd_args(a, b, c):
    return TaskArgs().add_tensor(a, IN).add_tensor(b, IN).add_tensor(c, OUT)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def gone_within(pid, seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if not alive(pid):
            return True
        time.sleep(0.01)
    return not alive(pid)


def children():
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass
    return pids


@pytest.fixture(scope="module")
def l3():
    """Two chips in this process and two sub workers."""
    w = Worker(level=3, device_ids=[0, 1], num_sub_workers=2)
    w.init()
    yield w
    w.close()


def test_ids_and_shapes_past_64_bits_are_refused_naming_what_was_given(l3, vadd):
    add = l3.register(vadd)
    buf = l3.create_buffer(3 * 256)
    a, b, c = (buf.array((64,), np.float32, byte_offset=i * 256) for i in range(3))

    def orch(o, _a, cfg):
        with pytest.raises(simpler.InvalidArgumentError, match=f"worker id {2**70} names no"):
            o.submit_next_level(add, vadd_args(a, b, c), cfg, worker=2**70)
        with pytest.raises(simpler.InvalidArgumentError, match=rf"`workers\[1\]`: worker id {2**64} names"):
            o.submit_next_level_group(add, [vadd_args(a, b, c)] * 2, cfg, workers=[0, 2**64])
        with pytest.raises(simpler.InvalidArgumentError, match="shape has a dimension of 2\\*\\*64"):
            o.alloc((2**64,), np.float32)
        with pytest.raises(simpler.InvalidArgumentError, match="shape"):
            o.alloc((2**62,), np.float32)
        with pytest.raises(simpler.InvalidArgumentError, match="dimension of 2\\*\\*64"):
            o.alloc_child_tensor(0, (2**65, 1), np.float32)

    assert l3.run(orch).tasks == 0


def test_tensors_a_chip_cannot_take_are_refused_at_submit_naming_the_argument(l3, vadd, spin):
    add, slow = l3.register(vadd), l3.register(spin)
    buf = l3.create_buffer(4 * 256)
    a, b, c = (buf.array((64,), np.float32, byte_offset=i * 256) for i in range(3))
    wide = buf.array((128,), np.float32)

    def orch(o, _a, cfg):
        with pytest.raises(simpler.InvalidArgumentError, match=r"`args\[0\]`.*`a`.*dtype is f16"):
            o.submit_next_level(add, vadd_args(a.view(np.float16)[:64], b, c), cfg, worker=0)
        with pytest.raises(simpler.InvalidArgumentError, match=r"`args\[1\]`.*contiguous"):
            o.submit_next_level(add, vadd_args(a, wide[::2], c), cfg, worker=1)
        # A scalar outside its declared dtype names the argument.
        bad = TaskArgs().add_tensor(c, INOUT).add_scalar(-1)
        with pytest.raises(simpler.InvalidArgumentError, match=r"args scalar 0 \(`ms`\)"):
            o.submit_next_level(slow, bad, cfg, worker=0)
        o.submit_next_level(add, vadd_args(a, b, c), cfg, worker=0)

    a[:] = 1.0
    b[:] = 2.0
    assert l3.run(orch).tasks == 1, "only the good task entered the graph"
    assert (c == 3.0).all()


def test_unregister_refused_while_a_run_is_built_or_in_flight_keeps_the_handle(l3):
    fill = l3.register(l3_subs.slow_fill)
    x = l3.create_buffer(64).array((4,), np.float32)
    args = TaskArgs().add_tensor(x, OUT).add_scalar(200)

    def orch(o, _a, _c):
        with pytest.raises(simpler.WorkerStateError, match="inside an orchestration"):
            l3.unregister(fill)
        o.submit_sub(fill, args)

    l3.run(orch)
    handle = l3.submit(lambda o, _a, _c: o.submit_sub(fill, args))
    with pytest.raises(simpler.WorkerStateError, match="in flight"):
        l3.unregister(fill)
    handle.wait()
    # Still registered, still usable, and unregistered for good once the runs are over.
    l3.run(lambda o, _a, _c: o.submit_sub(fill, TaskArgs().add_tensor(x, OUT).add_scalar(0)))
    l3.unregister(fill)
    with pytest.raises(simpler.UnknownCallableError):
        l3.unregister(fill)
    again = l3.register(l3_subs.slow_fill)
    l3.run(lambda o, _a, _c: o.submit_sub(again, TaskArgs().add_tensor(x, OUT).add_scalar(0)))
    l3.unregister(again)


def test_sub_functions_that_raise_base_exceptions_return_garbage_or_write_inputs(l3):
    buf = l3.create_buffer(256)
    x = buf.array((64,), np.float32)

    def one(fn, tag=IN):
        h = l3.register(fn)
        try:
            return l3.run(lambda o, _a, _c: o.submit_sub(h, TaskArgs().add_tensor(x, tag)))
        finally:
            l3.unregister(h)

    for fn, words in (
        (l3_subs.raise_system_exit, "SystemExit: 3"),
        (l3_subs.raise_keyboard_interrupt, "KeyboardInterrupt"),
        (l3_subs.write_input, "read-only"),
    ):
        with pytest.raises(simpler.TaskFailedError) as info:
            one(fn)
        assert words in str(info.value) and fn.__name__ in str(info.value), info.value
    assert one(l3_subs.return_garbage).tasks == 1
    assert (x == 0).all(), "the INPUT tensor was not written"


def test_a_hung_sub_times_out_its_wait_and_close_kills_it():
    w = Worker(level=3, num_sub_workers=1, close_timeout_s=0.3)
    hang = w.register(l3_subs.hang)
    w.init()
    (pid,) = w.child_pids().values()
    handle = w.submit(lambda o, _a, _c: o.submit_sub(hang))
    with pytest.raises(simpler.WaitTimeoutError):
        handle.wait(0.2)
    assert not handle.done
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 5, "close is bounded by close_timeout_s"
    assert w.closed
    with pytest.raises(simpler.EndpointFailureError) as info:
        handle.wait(5)
    assert "close_timeout" in str(info.value) and "SIGKILL" in str(info.value), info.value
    assert gone_within(pid, 2)


def test_ctrl_c_interrupts_a_submit_or_register_blocked_behind_hung_tasks():
    w = Worker(level=3, num_sub_workers=1, close_timeout_s=0.3)
    hang = w.register(l3_subs.hang)
    w.init()
    first, second = (w.submit(lambda o, _a, _c: o.submit_sub(hang)) for _ in range(2))

    def interrupted(call):
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                call()
        finally:
            timer.cancel()
        assert time.monotonic() - started < 2, "the interrupt was not delivered promptly"

    ran = []
    # Two runs in flight: a third submit waits for a place, and Ctrl-C ends the wait.
    interrupted(lambda: w.submit(lambda o, _a, _c: ran.append(o)))
    assert ran == [], "the interrupted submit never ran its orchestration"
    # The sub worker is busy for good: a registration waits behind its task.
    interrupted(lambda: w.register(l3_subs.add_one))
    w.close()
    for run in (first, second):
        with pytest.raises(simpler.EndpointFailureError):
            run.wait(5)


def test_close_ends_a_registration_of_another_thread_waiting_behind_a_hung_task():
    w = Worker(level=3, num_sub_workers=1, close_timeout_s=0.3)
    hang = w.register(l3_subs.hang)
    w.init()
    began = w.create_buffer(64).array((16,), np.float32)
    began[:] = 0
    run = w.submit(lambda o, _a, _c: o.submit_sub(hang, TaskArgs().add_tensor(began, TensorArgType.OUTPUT_EXISTING)))
    deadline = time.monotonic() + 30
    while began[0] != 1:  # the sub worker has begun the hung task (a loaded box is slow)
        assert time.monotonic() < deadline, "the hung task never started"
        time.sleep(0.01)
    outcome = []

    def register():
        try:
            outcome.append(w.register(l3_subs.add_one))
        except simpler.SimplerError as e:
            outcome.append(e)

    t = threading.Thread(target=register)
    t.start()
    # Close only once the registration is under way: it holds the worker's lock while it
    # waits behind the hung task (a loaded box may start the thread late), and is given a
    # moment more to reach the engine's wait.
    while w._lock.acquire(blocking=False):
        w._lock.release()
        assert time.monotonic() < deadline, "the registration never began"
        time.sleep(0.01)
    time.sleep(0.2)
    started = time.monotonic()
    w.close()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - started < 5, "no deadlock"
    assert isinstance(outcome[0], simpler.EndpointFailureError), outcome
    with pytest.raises(simpler.EndpointFailureError):
        run.wait(5)


def test_sub_workers_that_exit_mid_task_or_die_idle_fail_their_tasks_and_close_ends():
    before = children()
    w = Worker(level=3, num_sub_workers=2)
    exit_now, add_one = w.register(l3_subs.exit_now), w.register(l3_subs.add_one)
    w.init()
    pids = list(w.child_pids().values())
    x = w.create_buffer(64).array((4,), np.float32)
    try:
        with pytest.raises(simpler.EndpointFailureError, match="exited with status 5"):
            w.run(lambda o, _a, _c: o.submit_sub(exit_now, TaskArgs().add_tensor(x, INOUT)))
        w.run(lambda o, _a, _c: o.submit_sub(add_one, TaskArgs().add_tensor(x, INOUT)))
        assert (x == 1).all(), "the sub worker left alive took the task"
        idle = next(p for p in pids if alive(p))
        os.kill(idle, signal.SIGKILL)
        assert gone_within(idle, 2)
        with pytest.raises(simpler.EndpointFailureError, match="SIGKILL") as info:
            w.run(lambda o, _a, _c: o.submit_sub(add_one, TaskArgs().add_tensor(x, INOUT)))
        text = str(info.value)
        failure = text.split("ENDPOINT_FAILURE:", 1)[1]
        assert failure.count(info.value.endpoint) == 1, text
        assert "close this Worker and create a new one to use it again" in text, text
        assert idle not in w.child_pids().values(), "a dead child is not listed"
        assert len(w.child_pids()) == len(pids) - 2
        with pytest.raises(simpler.EndpointFailureError, match="refused"):
            w.run(lambda o, _a, _c: o.submit_sub(add_one, TaskArgs().add_tensor(x, INOUT)))
    finally:
        w.close()
    assert w.closed and children() == before


def test_a_child_that_dies_idle_is_reported_by_close_and_the_worker_is_closed_anyway(vadd):
    before = children()
    w = Worker(level=3, device_ids=[0], chip_isolation="process", num_sub_workers=1)
    w.init()
    for pid in w.child_pids().values():
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(simpler.EndpointFailureError, match="SIGKILL"):
        w.close()
    assert w.closed
    w.close()  # closed: nothing more to report
    with pytest.raises(simpler.WorkerStateError, match="closed"):
        w.register(vadd)
    assert children() == before


def test_a_child_that_crashes_at_start_fails_init_and_a_second_init_is_refused(monkeypatch):
    before = children()
    import simpler.host_worker as host_worker

    monkeypatch.setattr(
        host_worker,
        "child_program",
        lambda: {"child_program": "/bin/sh", "child_args": ["-c", "echo boom >&2; exit 3"]},
    )
    w = Worker(level=3, device_ids=[0], num_sub_workers=2)
    with pytest.raises(simpler.StartupError) as info:
        w.init()
    assert "sub worker 0" in info.value.endpoint
    assert "exited with status 3" in str(info.value) and "boom" in str(info.value)
    assert w.child_pids() == {} and children() == before
    with pytest.raises(simpler.WorkerStateError, match="failed"):
        w.init()
    w.close()


def test_close_waits_for_an_orchestration_of_another_thread_that_registers():
    w = Worker(level=3, num_sub_workers=1)
    fill = w.register(l3_subs.slow_fill)
    w.init()
    x = w.create_buffer(64).array((4,), np.float32)
    entered, outcome = threading.Event(), []

    def orch(o, _a, _c):
        o.submit_sub(fill, TaskArgs().add_tensor(x, OUT).add_scalar(100))
        entered.set()
        time.sleep(0.2)  # close() begins meanwhile, on the init thread
        w.register(l3_subs.add_one)

    def other():
        try:
            w.run(orch)
            outcome.append("ran")
        except simpler.SimplerError as e:
            outcome.append(e)

    t = threading.Thread(target=other)
    t.start()
    assert entered.wait(10)
    started = time.monotonic()
    w.close()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - started < 5, "no deadlock"
    assert isinstance(outcome[0], simpler.WorkerStateError), outcome


def test_threads_submitting_at_once_and_an_orchestration_waiting_on_the_run_before(l3, vadd):
    add, fill = l3.register(vadd), l3.register(l3_subs.slow_fill)
    errors = []

    def worker_thread(t):
        try:
            buf = l3.create_buffer(3 * 256)
            a, b, c = (buf.array((64,), np.float32, byte_offset=i * 256) for i in range(3))
            a[:], b[:] = t, 1.0
            for _ in range(5):
                c[:] = 0

                def orch(o, _a, cfg):
                    mid = o.alloc((64,), np.float32)
                    o.submit_next_level(add, vadd_args(a, b, mid), cfg, worker=t % 2)
                    o.submit_next_level(add, vadd_args(mid, b, c), cfg, worker=1 - t % 2)

                l3.run(orch)
                assert (c == t + 2.0).all(), c
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker_thread, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors

    x = l3.create_buffer(64).array((4,), np.float32)
    first = l3.submit(lambda o, _a, _c: o.submit_sub(fill, TaskArgs().add_tensor(x, OUT).add_scalar(150)))

    def waits_for_first(o, _a, _c):
        first.wait(10)  # the run before is the head: it ends while this one is built
        assert (x == 1).all()
        o.submit_sub(fill, TaskArgs().add_tensor(x, OUT).add_scalar(0))

    assert l3.run(waits_for_first).tasks == 1


PARENT = """
import os, sys, time
import numpy as np
from simpler import Worker
w = Worker(level=3, device_ids=[0], chip_isolation="process", num_sub_workers=1)
w.init()
buf = w.create_buffer(1 << 20)
def orch(o, _a, _c):
    o.alloc((1024,), np.float32)
w.run(orch)
print(" ".join(str(p) for p in w.child_pids().values()), flush=True)
time.sleep(60)
"""


def test_children_end_within_2_s_of_their_parent_s_sigkill_leaving_nothing_in_dev_shm():
    shm_before = sorted(os.listdir("/dev/shm"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = parent.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, line
        assert all(alive(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
    for pid in pids:
        assert gone_within(pid, 2), f"child {pid} outlived its parent"
    assert sorted(os.listdir("/dev/shm")) == shm_before


def test_two_hundred_runs_on_four_chip_processes_keep_fds_threads_and_children_flat(vadd):
    before = children()
    w = Worker(level=3, device_ids=[0, 1, 2, 3], chip_isolation="process", num_sub_workers=1)
    add, check = w.register(vadd), w.register(l3_subs.add_one)
    w.init()
    try:
        buf = w.create_buffer(6 * 4096)
        a, b, *outs, tally = (buf.array((1024,), np.float32, byte_offset=i * 4096) for i in range(6))
        a[:], b[:] = 1.0, 2.0

        def orch(o, _a, cfg):
            mid = o.alloc((1024,), np.float32)
            o.submit_next_level(add, vadd_args(a, b, mid), cfg, worker=0)
            for chip, out in zip((1, 2, 3), outs):
                o.submit_next_level(add, vadd_args(mid, b, out), cfg, worker=chip)
            o.submit_sub(check, TaskArgs().add_tensor(tally, INOUT))

        def resources():
            gc.collect()
            return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), len(children())

        for _ in range(10):
            w.run(orch)
        held = resources()
        for _ in range(200):
            assert w.run(orch).tasks == 5
        assert resources() == held, "(descriptors, threads, children) stay flat"
        assert all((out == 5.0).all() for out in outs)
        assert (tally == 210).all()
    finally:
        w.close()
    assert children() == before
