#!/usr/bin/env python3
"""L3↔L2 message queue figures on the sim: round-trip latency (one message in flight, host →
chip → host) and throughput (messages per second with the ring kept full), for 64-byte and
4 KiB messages, through the echo chip task of ``examples/l3/message_queue`` (each reply is
the message's f32 values × 2 + 1), chips in this process.

Run: ``python scripts/bench-queue.py [--messages N] [--isolation thread|process]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from simpler import TaskArgs, Worker

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "l3" / "message_queue" / "main.py"
DEPTH = 64
ARENA = 1 << 20


def _example():
    spec = importlib.util.spec_from_file_location("message_queue_main", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(w: Worker, echo, nbytes: int, count: int) -> tuple:
    """(median round trip in µs, p90 in µs, messages per second streaming)."""
    msg = np.ones(nbytes // 4, np.float32)
    rtts = []
    rate = [0.0]

    def orch(o, _a, cfg):
        q = o.create_worker_chip_queue(0, DEPTH, ARENA, ARENA)
        o.submit_next_level(echo, q.add_descriptor(TaskArgs()).add_scalar(30_000_000), cfg, worker=0)
        for _ in range(count):  # one in flight
            t0 = time.perf_counter()
            q.send(msg)
            q.recv(timeout=30)
            rtts.append(time.perf_counter() - t0)
        sent = received = 0
        t0 = time.perf_counter()
        while received < count:  # the ring kept full
            while sent < count and sent - received < DEPTH:
                q.send(msg)
                sent += 1
            q.recv(timeout=30)
            received += 1
        rate[0] = count / (time.perf_counter() - t0)
        q.stop()

    w.run(orch)
    rtts.sort()
    return statistics.median(rtts) * 1e6, rtts[int(len(rtts) * 0.9)] * 1e6, rate[0]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--isolation", choices=("thread", "process"), default="thread")
    opts = parser.parse_args(argv)
    example = _example()
    print(f"L3<->L2 message queue, depth {DEPTH}, echo chip task ({opts.isolation} isolation), {opts.messages} messages each:")
    print(f"{'message':>9} {'RTT median':>11} {'RTT p90':>9} {'streaming':>14}")
    with Worker(level=3, device_ids=[0], chip_isolation=opts.isolation) as w:
        echo = w.register(example.build())
        w.init()
        for nbytes in (64, 4096):
            med, p90, rate = measure(w, echo, nbytes, opts.messages)
            print(f"{nbytes:>7} B {med:>9.1f}us {p90:>7.1f}us {rate:>9.0f} msg/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
