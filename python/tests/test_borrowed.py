"""Borrowed contexts and caller streams from Python (simpler.sim, docs/python.md section 12):
a run launched on a caller's stream is ordered inside the caller's work, the refusals of the
execution-mode latch and of the context check arrive as their Python classes, a refused call
can be retried once the context is current again, and the context outlives its workers."""

import os
import threading
import time

import numpy as np
import pytest
import simpler
import simpler.sim
from simpler import Worker

N = 4096


@pytest.fixture
def ctx():
    c = simpler.sim.Context(clusters=2, aicpu_threads=2)
    yield c
    c.close()


def attach(ctx, **options):
    """A borrowed worker on `ctx`, which must be current on this thread."""
    w = Worker(level=2, **options)
    w.init(borrowed_context_generation=ctx.generation)
    return w


def vadd_args(w, a, b, c):
    return [buf.tensor([N], "f32") for buf in (a, b, c)]


def buffers(w, count=3):
    return [w.malloc(4 * N) for _ in range(count)]


def test_the_context_has_a_nonzero_generation_and_is_current_inside_with(ctx):
    other = simpler.sim.Context(clusters=1, aicpu_threads=2)
    try:
        assert ctx.generation > 0 and other.generation > 0
        assert ctx.generation != other.generation
        assert simpler.sim.current_context() is None
        with ctx:
            assert simpler.sim.current_context() == ctx.generation
            with other:
                assert simpler.sim.current_context() == other.generation
            assert simpler.sim.current_context() == ctx.generation
            with other.make_current() as made:
                assert made.previous == ctx.generation
                assert simpler.sim.current_context() == other.generation
            assert simpler.sim.current_context() == ctx.generation
        assert simpler.sim.current_context() is None
        s = ctx.create_stream()
        assert isinstance(s, int) and s.handle == int(s)
    finally:
        other.close()


def test_the_run_is_ordered_inside_the_callers_stream(ctx, vadd, rng):
    x = rng.random(N, dtype=np.float32)
    y = rng.random(N, dtype=np.float32)
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        a, b, c = buffers(w)
        s = ctx.create_stream()
        gate = threading.Event()
        wrote = threading.Event()

        def earlier():  # the caller's work before the launch: held, then writes the inputs
            assert gate.wait(30)
            ctx.copy_to(a, x)
            ctx.copy_to(b, y)
            wrote.set()

        seen = np.zeros(N, np.float32)
        ctx.launch_host_fn(s, earlier)
        run = w.submit(h, vadd_args(w, a, b, c), caller_stream=s)
        # The caller's work after the launch: reads the output in stream order.
        ctx.launch_host_fn(s, lambda: ctx.copy_from(seen, c))
        time.sleep(0.3)
        assert not run.done, "the run waits for the caller's earlier work"
        assert not wrote.is_set()
        gate.set()
        run.result(timeout=60)
        ctx.synchronize(s, timeout=60)
        np.testing.assert_array_equal(seen, x + y)
        out = np.zeros(N, np.float32)
        w.copy_from(out, c)
        np.testing.assert_array_equal(out, x + y)
        w.close()


def test_a_pipelined_pair_on_one_stream(ctx, vadd, rng):
    x = rng.random(N, dtype=np.float32)
    y = rng.random(N, dtype=np.float32)
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        a, b, c, d = buffers(w, 4)
        w.copy_to(a, x)
        w.copy_to(b, y)
        s = ctx.create_stream()
        first = w.submit(h, vadd_args(w, a, b, c), caller_stream=s)  # c = x + y
        second = w.submit(h, vadd_args(w, c, b, d), caller_stream=s)  # d = c + y
        seen = np.zeros(N, np.float32)
        ctx.launch_host_fn(s, lambda: ctx.copy_from(seen, d))
        first.wait(timeout=60)
        second.wait(timeout=60)
        assert second.epoch != first.epoch
        ctx.synchronize(s, timeout=60)
        np.testing.assert_array_equal(seen, (x + y) + y)
        w.close()


@pytest.mark.parametrize("generation", [0, -3, 1 << 64, True, "1", 1.5, [1]])
def test_the_generation_must_be_a_nonzero_int(generation):
    w = Worker(level=2)
    with pytest.raises(simpler.InvalidConfigError, match="borrowed_context_generation") as e:
        w.init(borrowed_context_generation=generation)
    assert isinstance(e.value, ValueError)
    assert not w.initialized
    w.close()


@pytest.mark.parametrize(
    "option, value",
    [
        ("clusters", 2),
        ("aicpu_threads", 2),
        ("sim_memcheck", True),
        ("sim_executor", "threads"),
        ("device_id", 0),
        ("chip_isolation", "process"),
    ],
)
def test_options_that_configure_the_device_are_refused(ctx, option, value):
    w = Worker(level=2, **{option: value})
    with ctx:
        with pytest.raises(simpler.InvalidConfigError, match=option):
            w.init(borrowed_context_generation=ctx.generation)
    assert not w.initialized
    w.close()


def test_a_context_that_is_not_current_or_not_live_is_refused(ctx):
    w = Worker(level=2)
    with pytest.raises(simpler.ExecutionContextRefused, match="current"):
        w.init(borrowed_context_generation=ctx.generation)
    other = simpler.sim.Context(clusters=1, aicpu_threads=2)
    gone = other.generation
    other.close()
    with ctx:
        with pytest.raises(simpler.ExecutionContextRefused, match=str(gone)):
            w.init(borrowed_context_generation=gone)
    # Nothing was started: the same worker attaches once the context is current.
    with ctx:
        w.init(borrowed_context_generation=ctx.generation)
        assert w.borrowed_context_generation == ctx.generation
        w.close()


def test_caller_stream_on_an_owned_worker_that_ran_a_program_launch(worker, ctx, vadd, rng):
    h = worker.register(vadd)
    a, b = (rng.random(N, dtype=np.float32) for _ in range(2))
    c = np.zeros(N, np.float32)
    worker.run(h, [a, b, c])
    with pytest.raises(simpler.WorkerStateError, match="PROGRAM"):
        worker.submit(h, [a, b, c], caller_stream=ctx.create_stream())
    assert worker.borrowed_context_generation is None
    worker.run(h, [a, b, c])  # still PROGRAM, still usable


def test_program_launch_on_a_borrowed_worker_is_refused(ctx, vadd, rng):
    a, b = (rng.random(N, dtype=np.float32) for _ in range(2))
    c = np.zeros(N, np.float32)
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        with pytest.raises(simpler.WorkerStateError, match="KERNEL"):
            w.run(h, [a, b, c])
        with pytest.raises(simpler.WorkerStateError, match="KERNEL"):
            w.submit(h, [a, b, c])
        assert not c.any()
        # Host arrays follow the usual rules on a caller stream.
        s = ctx.create_stream()
        w.submit(h, [a, b, c], caller_stream=s).wait(timeout=60)
        np.testing.assert_array_equal(c, a + b)
        w.close()


def test_an_unknown_caller_stream_is_refused_naming_it(ctx, vadd):
    other = simpler.sim.Context(clusters=1, aicpu_threads=2)
    try:
        foreign = other.create_stream()
        with ctx:
            w = attach(ctx)
            h = w.register(vadd)
            args = vadd_args(w, *buffers(w))
            for stream in (foreign, 999_999, -1, 1 << 40):
                with pytest.raises(simpler.InvalidArgumentError) as e:
                    w.submit(h, args, caller_stream=stream)
                assert e.value.details["arg"] == "caller_stream", e.value
            with pytest.raises(simpler.ArgumentTypeError, match="caller_stream"):
                w.submit(h, args, caller_stream="stream 1")
            # Still admits a good launch.
            w.submit(h, args, caller_stream=ctx.create_stream()).wait(timeout=60)
            w.close()
    finally:
        other.close()


def test_every_call_off_context_is_refused_and_a_retry_with_the_same_handle_works(
    ctx, vadd, scale, rng
):
    x = rng.random(N, dtype=np.float32)
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        a, b, c = buffers(w)
        w.copy_to(a, x)
        w.copy_to(b, x)
        s = ctx.create_stream()
        gate = threading.Event()
        ctx.launch_host_fn(s, lambda: gate.wait(30))
        run = w.submit(h, vadd_args(w, a, b, c), caller_stream=s)
    # Not current here: every call refuses and changes nothing.
    refused = simpler.ExecutionContextRefused
    out = np.zeros(N, np.float32)
    calls = [
        lambda: w.register(scale),
        lambda: w.unregister(h),
        lambda: w.malloc(64),
        lambda: w.copy_to(a, x),
        lambda: w.copy_from(out, c),
        lambda: w.free(c),
        lambda: w.submit(h, vadd_args(w, a, b, c), caller_stream=s),
        lambda: run.wait(timeout=1),
        lambda: run.result(),
        lambda: w.close(),
    ]
    for call in calls:
        with pytest.raises(refused) as e:
            call()
        assert e.value.code == 23
    assert not run.done  # poll answers False from the wrong context
    assert not w.closed
    # Another thread, where no context is current, is refused too.
    seen = []
    t = threading.Thread(target=lambda: seen.append(_raises(refused, lambda: run.wait(1))))
    t.start()
    t.join()
    assert seen == [True]
    gate.set()
    # Back in the context: the same handle gives the run's verdict.
    with ctx:
        run.result(timeout=60)
        w.copy_from(out, c)
        np.testing.assert_array_equal(out, x + x)
        # The refused unregister kept the callable; the refused free kept the buffer.
        w.submit(h, vadd_args(w, c, b, a), caller_stream=s).wait(timeout=60)
        w.copy_from(out, a)
        np.testing.assert_array_equal(out, x + x + x)
        w.close()
    assert w.closed
    # A collected handle still refuses from the wrong context, and answers in it.
    with pytest.raises(refused):
        run.wait()
    with ctx:
        run.wait()


def test_counted_registrations_are_refused_off_context_too(ctx, vadd):
    """A register of a callable already registered, and an unregister that only drops one of
    several registrations, touch no native state, yet are refused off context like every
    other call: the count stays what the context's thread left it."""
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        assert w.register(vadd) is h  # two registrations
    refused = simpler.ExecutionContextRefused
    for call in (lambda: w.register(vadd), lambda: w.unregister(h)):
        with pytest.raises(refused) as e:
            call()
        assert e.value.code == 23
        assert "current context" in str(e.value)
    seen = []
    t = threading.Thread(target=lambda: seen.append(_raises(refused, lambda: w.register(vadd))))
    t.start()
    t.join()
    assert seen == [True]
    with ctx:
        w.unregister(h)
        w.unregister(h)  # the last one: still exactly two
        with pytest.raises(simpler.UnknownCallableError):
            w.unregister(h)
        w.close()


@pytest.mark.parametrize("size", [0, -1, 1 << 64, True, 1.5])
def test_a_malloc_size_out_of_range_is_an_invalid_argument_naming_it(ctx, size):
    with ctx:
        w = attach(ctx)
        with pytest.raises(simpler.InvalidArgumentError, match="malloc size"):
            w.malloc(size)
        w.close()


def _raises(cls, fn):
    try:
        fn()
    except cls:
        return True
    return False


def test_closing_a_borrowed_worker_leaves_the_context_usable(ctx, vadd, rng):
    x = rng.random(N, dtype=np.float32)
    with ctx:
        s = ctx.create_stream()
        first = attach(ctx)
        h = first.register(vadd)
        a, b, c = buffers(first)
        first.copy_to(a, x)
        first.copy_to(b, x)
        first.submit(h, vadd_args(first, a, b, c), caller_stream=s).wait(timeout=60)
        first.close()
        # The caller's stream and device are still there...
        ran = threading.Event()
        ctx.launch_host_fn(s, ran.set)
        ctx.synchronize(s, timeout=30)
        assert ran.is_set()
        # ...and a second borrowed worker attaches again.
        second = attach(ctx)
        h = second.register(vadd)
        a, b, c = buffers(second)
        second.copy_to(a, x)
        second.copy_to(b, x)
        second.submit(h, vadd_args(second, a, b, c), caller_stream=s).wait(timeout=60)
        out = np.zeros(N, np.float32)
        second.copy_from(out, c)
        np.testing.assert_array_equal(out, x + x)
        second.close()


def test_a_host_function_exception_is_raised_by_synchronize(ctx):
    s = ctx.create_stream()
    after = threading.Event()

    def boom():
        raise KeyError("from the host function")

    ctx.launch_host_fn(s, boom)
    ctx.launch_host_fn(s, after.set)  # the stream goes on
    with pytest.raises(KeyError, match="from the host function"):
        ctx.synchronize(s, timeout=30)
    assert after.is_set()
    ctx.synchronize(s, timeout=30)  # reported once
    with pytest.raises(simpler.ArgumentTypeError):
        ctx.launch_host_fn(s, 42)
    with pytest.raises(simpler.InvalidArgumentError) as e:
        ctx.synchronize(999_999)
    assert e.value.details["arg"] == "stream"
    ctx.destroy_stream(s)
    with pytest.raises(simpler.InvalidArgumentError):
        ctx.launch_host_fn(s, after.set)


def test_a_synchronize_times_out_while_the_stream_is_held(ctx):
    s = ctx.create_stream()
    gate = threading.Event()
    ctx.launch_host_fn(s, lambda: gate.wait(30))
    with pytest.raises(simpler.WaitTimeoutError):
        ctx.synchronize(s, timeout=0.2)
    gate.set()
    ctx.synchronize(s, timeout=30)


def test_a_closed_context_admits_no_new_worker_and_its_workers_go_on(vadd, rng):
    ctx = simpler.sim.Context(clusters=2, aicpu_threads=2)
    x = rng.random(N, dtype=np.float32)
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        s = ctx.create_stream()
        a, b, c = buffers(w)
        w.copy_to(a, x)
        w.copy_to(b, x)
        ctx.close()
        ctx.close()  # idempotent
        assert ctx.closed
        with pytest.raises(simpler.WorkerStateError, match="closed"):
            ctx.create_stream()
        with pytest.raises(simpler.WorkerStateError, match="closed"):
            ctx.make_current()
        # The attached worker keeps the device: still runs on the caller's stream.
        w.submit(h, vadd_args(w, a, b, c), caller_stream=s).wait(timeout=60)
        out = np.zeros(N, np.float32)
        w.copy_from(out, c)
        np.testing.assert_array_equal(out, x + x)
        late = Worker(level=2)
        with pytest.raises(simpler.ExecutionContextRefused, match="no live caller context"):
            late.init(borrowed_context_generation=ctx.generation)
        w.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_is_refused_and_the_parent_continues(ctx, vadd, scale, rng):
    x = rng.random(N, dtype=np.float32)
    with ctx:
        w = attach(ctx)
        h = w.register(vadd)
        a, b, c = buffers(w)
        w.copy_to(a, x)
        w.copy_to(b, x)
        s = ctx.create_stream()
        w.submit(h, vadd_args(w, a, b, c), caller_stream=s).wait(timeout=60)
        pid = os.fork()
        if pid == 0:  # the child (context still current here): leave with a status
            status = 0
            for call in (
                lambda: w.submit(h, vadd_args(w, a, b, c), caller_stream=s),
                lambda: w.register(scale),
                lambda: w.unregister(h),
                lambda: w.malloc(64),
                lambda: ctx.create_stream(),
                lambda: ctx.synchronize(s),
            ):
                try:
                    call()
                    status = 1
                except simpler.ExecutionContextRefused as e:
                    if "forked child" not in str(e):
                        status = 2
                except BaseException:  # noqa: BLE001 - any other outcome fails the test
                    status = 3
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        w.submit(h, vadd_args(w, a, b, c), caller_stream=s).wait(timeout=60)
        ctx.synchronize(s, timeout=30)
        w.close()


def test_a_bad_context_option_is_an_invalid_config_error_naming_it():
    for options, name in (
        ({"aicpu_threads": 1}, "aicpu_threads"),
        ({"clusters": -1}, "clusters"),
        ({"sim_executor": "fibers"}, "sim_executor"),
        ({"sim_memcheck": 3}, "sim_memcheck"),
    ):
        with pytest.raises(simpler.InvalidConfigError, match=name):
            simpler.sim.Context(**options)
