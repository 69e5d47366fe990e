"""The L3↔L2 region (``docs/comm.md`` §7): a host orchestration exchanges 200 messages with a
chip task while it runs (chips in this process and in child processes); the region starts
zeroed and its descriptor is what the chip expects; every refusal names its field; waits
time out with ``WaitTimeoutError``; a handle is refused once freed or once its orchestration
returned; a chip task whose host stops answering fails with the comm timeout code."""

from __future__ import annotations

import struct

import pytest
import simpler
from simpler import ChipCallable, CoreCallable, NotifyOp, TaskArgs, WaitCmp, Worker
from simpler.channel import WorkerChipRegion

from conftest import EXAMPLES, KERNELS

MESSAGES = 200


@pytest.fixture(scope="module")
def echo_callable(compiler):
    orch = compiler.compile_orchestration("tensormap_and_ringbuffer", EXAMPLES / "l3" / "message_queue" / "orchestration.c")
    core = CoreCallable.build(binary=compiler.compile_incore(KERNELS / "region_echo.c", core_type="aiv"))
    scalars = [(n, "scalar", "u64") for n in ("magic", "id", "pbase", "pbytes", "cbase", "cbytes", "n", "timeout_us")]
    return ChipCallable.build(scalars, binary=orch, children=[(0, core)], name="region_echo")


def exchange(w, handle, chip, messages=MESSAGES):
    replies = []

    def orch(o, _a, cfg):
        region = o.create_worker_chip_region(chip, payload_bytes=128, counter_bytes=128)
        assert isinstance(region, WorkerChipRegion) and region.worker == chip
        assert region.payload_read(0, 128) == bytes(128), "the payload starts zeroed"
        assert region.counter(0).test() == 0 and region.counter(124).test() == 0
        o.submit_next_level(
            handle,
            region.add_descriptor(TaskArgs()).add_scalar(messages).add_scalar(20_000_000),
            cfg,
            worker=chip,
        )
        for i in range(1, messages + 1):
            region.payload_write(0, struct.pack("<Q", 1000 + i))
            region.counter(0).notify(i, NotifyOp.SET)
            assert region.counter(64).wait(i, WaitCmp.GE, timeout=20.0) == i
            replies.append(struct.unpack("<Q", region.payload_read(64, 8))[0])

    w.run(orch)
    assert replies == [3 * (1000 + i) + 1 for i in range(1, messages + 1)]


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_host_orchestration_talks_to_a_running_chip_task(echo_callable, isolation):
    with Worker(level=3, device_ids=[0, 1], chip_isolation=isolation) as w:
        handle = w.register(echo_callable)
        w.init()
        exchange(w, handle, 1)
        exchange(w, handle, 0, messages=20)  # a second run, a new region


def test_descriptor_refusals_waits_and_validity(echo_callable):
    with Worker(level=3, device_ids=[0]) as w:
        handle = w.register(echo_callable)
        w.init()
        kept = {}

        def orch(o, _a, cfg):
            for kw, field in [
                (dict(worker_id=1, payload_bytes=8, counter_bytes=8), "1"),
                (dict(worker_id=0, payload_bytes=8, counter_bytes=0), "counter_bytes"),
                (dict(worker_id=0, payload_bytes=8, counter_bytes=6), "counter_bytes"),
                (dict(worker_id=0, payload_bytes=(1 << 30) + 1, counter_bytes=4), "payload_bytes"),
            ]:
                with pytest.raises(simpler.InvalidArgumentError, match=field):
                    o.create_worker_chip_region(**kw)
            with pytest.raises(simpler.InvalidArgumentError, match="payload_bytes"):
                o.create_worker_chip_region(0, -1, 4)
            r = o.create_worker_chip_region(0, payload_bytes=100, counter_bytes=8)
            magic, rid, pbase, pbytes, cbase, cbytes = r.descriptor
            assert magic == (0x5352474E << 32) | 1 and rid != 0
            assert (pbytes, cbytes) == (100, 8) and cbase == pbase + 128 and cbase % 64 == 0
            with pytest.raises(simpler.InvalidArgumentError, match="offset"):
                r.payload_write(96, b"12345")  # past the 100-byte payload
            with pytest.raises(simpler.InvalidArgumentError, match="offset"):
                r.counter(2).test()  # not a multiple of 4
            with pytest.raises(simpler.InvalidArgumentError, match="offset"):
                r.counter(8).notify(1)  # past the counters
            with pytest.raises(simpler.InvalidArgumentError, match="timeout"):
                r.counter(0).wait(1, timeout=0)
            with pytest.raises(simpler.InvalidArgumentError, match="timeout"):
                r.counter(0).wait(1, timeout=float("inf"))
            with pytest.raises(simpler.ArgumentTypeError):
                r.counter(0).notify(-1)
            r.counter(4).notify(5, NotifyOp.SET)
            r.counter(4).notify(0xFFFFFFFF, NotifyOp.ADD)  # wraps: 5 + 2**32 - 1 = 4
            assert r.counter(4).test() == 4
            assert r.counter(4).wait(4, WaitCmp.EQ, timeout=1.0) == 4
            assert r.counter(4).wait(10, WaitCmp.LT, timeout=1.0) == 4
            with pytest.raises(simpler.WaitTimeoutError):
                r.counter(4).wait(5, WaitCmp.GE, timeout=0.05)
            r.free()
            r.free()  # idempotent
            with pytest.raises(simpler.WorkerStateError, match="freed"):
                r.counter(4).test()
            kept["region"] = o.create_worker_chip_region(0, payload_bytes=8, counter_bytes=4)

        w.run(orch)
        r = kept["region"]
        assert not r.is_open
        with pytest.raises(simpler.WorkerStateError, match="orchestration returned"):
            r.payload_read(0, 8)


def test_a_chip_task_whose_host_stops_answering_fails_with_the_comm_timeout(echo_callable):
    with Worker(level=3, device_ids=[0]) as w:
        handle = w.register(echo_callable)
        w.init()

        def orch(o, _a, cfg):
            region = o.create_worker_chip_region(0, payload_bytes=128, counter_bytes=128)
            # The chip waits for message 1, which never comes: 0.2 s later it fails.
            o.submit_next_level(handle, region.add_descriptor(TaskArgs()).add_scalar(1).add_scalar(200_000), cfg, worker=0)

        with pytest.raises(simpler.SimplerError, match="120"):
            w.run(orch)
        exchange(w, handle, 0, messages=5)  # the chip is usable
