"""Deferred completion from Python (``docs/chip-runtime.md`` §18): on a worker started with
``enable_sdma=True`` a kernel's SDMA copies land before the task's consumer starts, with the
chip in this process and in a child process, at level 2 and 3; a task deferred on a region's
32-bit counter completes only when the host sets that counter (not its neighbour); without
SDMA, and past 64 conditions, the run fails with the scheduler's code naming the cause, and
the worker goes on."""

from __future__ import annotations

import numpy as np
import pytest
import simpler
from simpler import (
    ArgSpec,
    ChipCallable,
    CoreCallable,
    NotifyOp,
    TaskArgs,
    TensorArgType,
    WaitCmp,
    Worker,
)

from conftest import KERNELS

N = 1 << 16
IN, OUTPUT = TensorArgType.INPUT, TensorArgType.OUTPUT_EXISTING


@pytest.fixture(scope="module")
def copy_then_add(compiler):
    orch = compiler.compile_orchestration("tensormap_and_ringbuffer", KERNELS / "copy_then_add_orch.c")
    copy = CoreCallable.build(binary=compiler.compile_incore(KERNELS / "sdma_copy.c", core_type="aiv"))
    add = CoreCallable.build(binary=compiler.compile_incore(KERNELS / "add_one.c", core_type="aiv"))
    signature = [
        ArgSpec("a", "in", "f32"),
        ArgSpec("b", "out", "f32"),
        ArgSpec("c", "out", "f32"),
        ArgSpec("chunks", "scalar", "u64"),
        ArgSpec("never", "scalar", "u64"),
    ]
    return ChipCallable.build(signature, binary=orch, children=[(0, copy), (1, add)], name="copy_then_add")


def run(w, h, chunks, never=0):
    a = np.random.default_rng(chunks).standard_normal(N).astype(np.float32)
    b, c = np.zeros_like(a), np.zeros_like(a)
    w.run(h, [a, b, c, chunks, never])
    return a, b, c


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_sdma_copies_land_before_the_consumer_starts(copy_then_add, isolation):
    with Worker(level=2, enable_sdma=True, chip_isolation=isolation, clusters=2) as w:
        w.init()
        h = w.register(copy_then_add)
        for chunks in (1, 7, 64):
            a, b, c = run(w, h, chunks)
            np.testing.assert_array_equal(b, a)
            np.testing.assert_array_equal(c, a + 1)


def test_refusals_name_their_cause_and_the_worker_goes_on(copy_then_add):
    with Worker(level=2, clusters=2) as w:
        w.init()
        h = w.register(copy_then_add)
        with pytest.raises(simpler.RunFailedError, match=r"no SDMA engine.*enable_sdma=True") as e:
            run(w, h, 1)
        assert e.value.code == -101  # ASYNC_COMPLETION_INVALID
    with Worker(level=2, enable_sdma=True, clusters=2) as w:
        w.init()
        h = w.register(copy_then_add)
        with pytest.raises(simpler.RunFailedError, match="more than 64") as e:
            run(w, h, 65)
        assert e.value.code == -102  # ASYNC_WAIT_OVERFLOW
        a, b, c = run(w, h, 2)
        np.testing.assert_array_equal(c, a + 1)


def test_a_counter_that_never_arrives_ends_the_run(copy_then_add):
    with Worker(level=2, clusters=2, scheduler_timeout_s=0.3) as w:
        w.init()
        h = w.register(copy_then_add)
        with pytest.raises(simpler.RunFailedError, match="RUNNING_STALLED.*func 0.*wait for deferred completion") as e:
            run(w, h, 1, never=1)
        assert e.value.code == -100  # SCHEDULER_TIMEOUT


def test_enable_sdma_takes_a_bool():
    for bad in ("yes", 1, 1.0):
        with pytest.raises(simpler.InvalidConfigError, match="enable_sdma"):
            Worker(level=2, enable_sdma=bad).init()
    assert simpler._native.WorkerConfig(enable_sdma=np.bool_(True)).enable_sdma is True
    assert simpler._native.WorkerConfig(enable_sdma=True).enable_sdma is True
    assert simpler._native.WorkerConfig().enable_sdma is False


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_level_3_worker_provisions_sdma_on_every_chip(copy_then_add, isolation):
    with Worker(level=3, device_ids=[0, 1], chip_isolation=isolation, enable_sdma=True, clusters=2) as w:
        h = w.register(copy_then_add)
        w.init()
        # Shared memory: a child-process chip sees it too.
        a, *rest = [w.create_buffer(4 * N).array((N,), np.float32) for _ in range(5)]
        a[:] = np.arange(N, dtype=np.float32)
        outs = [(rest[0], rest[1]), (rest[2], rest[3])]
        for b, c in outs:
            b[:], c[:] = 0, 0

        def orch(o, _a, cfg):
            for chip, (b, c) in enumerate(outs):
                args = TaskArgs().add_tensor(a, IN).add_tensor(b, OUTPUT).add_tensor(c, OUTPUT)
                o.submit_next_level(h, args.add_scalar(3).add_scalar(0), cfg, worker=chip)

        w.run(orch)
        for b, c in outs:
            np.testing.assert_array_equal(b, a)
            np.testing.assert_array_equal(c, a + 1)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_task_deferred_on_a_region_counter_completes_when_the_host_sets_it(compiler, isolation):
    orch = compiler.compile_orchestration("tensormap_and_ringbuffer", KERNELS / "defer_then_ack_orch.c")
    defer = CoreCallable.build(binary=compiler.compile_incore(KERNELS / "region_defer.c", core_type="aiv"))
    ack = CoreCallable.build(binary=compiler.compile_incore(KERNELS / "region_ack.c", core_type="aiv"))
    names = ("magic", "id", "pbase", "pbytes", "cbase", "cbytes", "off", "value")
    signature = [ArgSpec("x", "inout", "f32")] + [ArgSpec(n, "scalar", "u64") for n in names]
    callable_ = ChipCallable.build(signature, binary=orch, children=[(0, defer), (1, ack)], name="defer_ack")
    with Worker(level=3, device_ids=[0], chip_isolation=isolation) as w:
        h = w.register(callable_)
        w.init()
        x = w.create_buffer(64).array((16,), np.float32)
        seen = {}

        def orch_fn(o, _a, cfg):
            region = o.create_worker_chip_region(0, payload_bytes=64, counter_bytes=128)
            args = region.add_descriptor(TaskArgs().add_tensor(x, TensorArgType.INOUT))
            o.submit_next_level(h, args.add_scalar(0).add_scalar(5), cfg, worker=0)
            # The neighbouring 32-bit counter: a 64-bit read of counter 0 would now hold.
            region.counter(4).notify(1, NotifyOp.SET)
            region.counter(0).notify(4, NotifyOp.SET)
            with pytest.raises(simpler.WaitTimeoutError):
                region.counter(64).wait(42, WaitCmp.EQ, timeout=0.3)
            region.counter(0).notify(1, NotifyOp.ADD)
            seen["ack"] = region.counter(64).wait(42, WaitCmp.EQ, timeout=10.0)

        w.run(orch_fn)
    assert seen["ack"] == 42
