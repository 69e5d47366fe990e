"""A host orchestration streams 1,000 messages into a chip task while it runs, through an
L3↔L2 message queue, and checks every reply.

The chip task (``kernels/echo.c``: a loop over ``simpler/queue.h``) answers each ``DATA``
message of f32 values with the values × 2 + 1, and ends at ``STOP``. The orchestration keeps
up to ``depth`` messages in flight: it sends message ``i`` while fewer than ``depth`` replies
are owed, takes replies as they come, checks each against numpy, and sends ``STOP`` at the
end. Messages are 1 to 256 values long (seeded), so the arenas wrap many times.

Run: ``python examples/l3/message_queue/main.py [--isolation thread|process] [--messages N]``;
it prints the count, the bytes, the rate and ``PASS`` (exit 0) or ``FAIL`` (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
from simpler import ChipCallable, CoreCallable, SimplerError, TaskArgs, Worker
from simpler.channel import QueueOpcode
from simpler.compiler import KernelCompiler

HERE = Path(__file__).resolve().parent
DEPTH = 16
ARENA = 32 << 10  # bytes of each arena: twice what DEPTH messages of 256 values (1 KiB) take
TIMEOUT_US = 30_000_000  # the chip's wait for the next message


def build(compiler: Optional[KernelCompiler] = None) -> ChipCallable:
    """The echo callable: seven u64 scalars (the region's descriptor, the timeout)."""
    kc = compiler or KernelCompiler()
    orch = kc.compile_orchestration("tensormap_and_ringbuffer", HERE / "orchestration.c")
    echo = kc.compile_incore(HERE / "kernels" / "echo.c", "aiv")
    names = ("magic_version", "region_id", "payload_base", "payload_bytes", "counter_base", "counter_bytes")
    signature = [(n, "scalar", "u64") for n in names + ("timeout_us",)]
    return ChipCallable.build(signature, "aicpu_orchestration_entry", orch, [(0, CoreCallable(echo, "aiv"))], name="queue_echo")


def stream(w: Worker, echo, messages: List[np.ndarray]) -> int:
    """Streams ``messages`` through a queue to a chip task; returns how many replies were
    wrong (0 on success)."""
    wrong = 0

    def orch(o, _a, cfg):
        nonlocal wrong
        q = o.create_worker_chip_queue(0, DEPTH, ARENA, ARENA)
        o.submit_next_level(echo, q.add_descriptor(TaskArgs()).add_scalar(TIMEOUT_US), cfg, worker=0)
        sent = received = 0
        while received < len(messages):
            while sent < len(messages) and sent - received < DEPTH:
                q.send(messages[sent])
                sent += 1
            reply = q.recv(timeout=30.0)
            want = messages[received] * 2 + 1
            if reply.opcode is not QueueOpcode.DATA or not np.array_equal(reply.array(np.float32), want):
                wrong += 1
            received += 1
        q.stop()

    w.run(orch)
    return wrong


def run(isolation: str = "thread", count: int = 1000, seed: int = 0) -> bool:
    rng = np.random.default_rng(seed)
    messages = [rng.uniform(-1, 1, int(rng.integers(1, 257))).astype(np.float32) for _ in range(count)]
    with Worker(level=3, device_ids=[0], chip_isolation=isolation) as w:
        echo = w.register(build())
        w.init()
        t0 = time.perf_counter()
        wrong = stream(w, echo, messages)
        took = time.perf_counter() - t0
    nbytes = sum(m.nbytes for m in messages)
    print(
        f"{count} messages ({nbytes} bytes, 1-256 f32 each) through a queue of depth {DEPTH} "
        f"to a running chip task ({isolation} isolation) and back in {took * 1e3:.0f} ms "
        f"({count / took:.0f} msgs/s); {wrong} replies wrong"
    )
    return wrong == 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isolation", choices=("thread", "process"), default="thread")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args(argv)
    if opts.messages < 1:
        print("FAIL: --messages must be at least 1")
        return 1
    try:
        passed = run(opts.isolation, opts.messages, opts.seed)
    except SimplerError as err:
        print(f"FAIL: {type(err).__name__}: {err}")
        return 1
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
