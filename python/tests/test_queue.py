"""The L3↔L2 message queue (``docs/comm.md`` §8): the example's 1,000 messages through a
running chip task in both chip isolations; the layout refusals name their fields; a message
larger than its arena is refused; ERROR messages come back; STOP ends the chip loop; a queue
freed while the chip waits fails the chip task promptly; a host that waits for a reply that
never comes times out."""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest
import simpler
from simpler import QueueOpcode, TaskArgs, Worker

from conftest import EXAMPLES

HERE = EXAMPLES / "l3" / "message_queue"


def _example():
    spec = importlib.util.spec_from_file_location("message_queue_main", HERE / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return _example()


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_the_example_streams_1000_messages(example, isolation, capsys):
    assert example.main(["--isolation", isolation, "--messages", "1000"]) == 0
    out = capsys.readouterr().out
    assert "1000 messages" in out and "0 replies wrong" in out and "PASS" in out


@pytest.fixture(scope="module")
def worker(example):
    with Worker(level=3, device_ids=[0]) as w:
        echo = w.register(example.build())
        w.init()
        yield w, echo


def test_layout_refusals_name_their_fields(worker):
    w, _ = worker

    def orch(o, _a, _c):
        for kw, field in [
            (dict(depth=3, input_arena_bytes=64, output_arena_bytes=64), "depth"),
            (dict(depth=0, input_arena_bytes=64, output_arena_bytes=64), "depth"),
            (dict(depth=(1 << 30) * 2, input_arena_bytes=64, output_arena_bytes=64), "depth"),
            (dict(depth=4, input_arena_bytes=100, output_arena_bytes=64), "input_arena_bytes"),
            (dict(depth=4, input_arena_bytes=64, output_arena_bytes=0), "output_arena_bytes"),
        ]:
            with pytest.raises(simpler.InvalidArgumentError, match=field):
                o.create_worker_chip_queue(0, **kw)
        q = o.create_worker_chip_queue(0, 4, 256, 64)
        assert q.depth == 4 and len(q.descriptor) == 6
        with pytest.raises(simpler.InvalidArgumentError, match="data"):
            q.send(b"x" * 257)  # larger than the input arena
        with pytest.raises(simpler.WaitTimeoutError):
            q.recv(timeout=0.05)  # no chip task: nothing comes
        for _ in range(4):
            q.send(b"x" * 8)  # each takes 64 bytes of the arena: four fit
        with pytest.raises(simpler.WaitTimeoutError):
            q.send(b"x", timeout=0.05)  # four slots taken, nobody reads

    w.run(orch)


def test_errors_come_back_and_stop_ends_the_chip_loop(worker):
    w, echo = worker
    seen = []

    def orch(o, _a, cfg):
        q = o.create_worker_chip_queue(0, 2, 1024, 1024)
        o.submit_next_level(echo, q.add_descriptor(TaskArgs()).add_scalar(10_000_000), cfg, worker=0)
        q.send_error("host-side trouble")
        seen.append(q.recv(timeout=10))
        q.send(np.arange(3, dtype=np.float32))
        seen.append(q.recv(timeout=10))
        q.send(b"")  # an empty DATA message
        seen.append(q.recv(timeout=10))
        q.stop()

    w.run(orch)
    assert seen[0].opcode is QueueOpcode.ERROR and seen[0].data == b"host-side trouble"
    assert seen[1].opcode is QueueOpcode.DATA
    assert list(seen[1].array(np.float32)) == [1.0, 3.0, 5.0]
    assert seen[2].opcode is QueueOpcode.DATA and seen[2].data == b""


def test_a_queue_freed_while_the_chip_waits_fails_the_chip_promptly(worker):
    w, echo = worker

    def orch(o, _a, cfg):
        q = o.create_worker_chip_queue(0, 2, 1024, 1024)
        o.submit_next_level(echo, q.add_descriptor(TaskArgs()).add_scalar(60_000_000), cfg, worker=0)
        q.send(np.ones(2, np.float32))
        q.recv(timeout=10)
        q.free()  # the chip waits for its next message: it sees the host abort
        with pytest.raises(simpler.WorkerStateError):
            q.send(b"late")

    started = time.monotonic()
    with pytest.raises(simpler.SimplerError, match="121"):
        w.run(orch)
    assert time.monotonic() - started < 20, "the chip saw the abort, not its 60 s timeout"
