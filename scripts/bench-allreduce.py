#!/usr/bin/env python3
"""Allreduce bus bandwidth on the sim: f32 sums over 4 chips of one level-3 worker
(``simpler.collectives``), 4 KiB to 64 MiB per rank, beside the machine's ``memcpy``
bandwidth measured in the same run — the physical limit on the sim, where every window is
host memory and every byte of a collective is a load or a store by a host thread.

For each size one run issues ``1 + iters`` allreduces back to back on one domain, with
inputs and outputs in chip memory (``alloc_child_tensor``: no staging copies); the time per
allreduce is that run's time less a run of one, over ``iters``, so the run's fixed costs
cancel out. Bus bandwidth follows the usual convention:
``algbw = bytes / time``, ``busbw = algbw · 2 (n − 1) / n``. The figure printed beside it is
the ratio to ``memcpy`` (numpy copies of 64 MiB, best of 5).

Run: ``python scripts/bench-allreduce.py [--chips 4] [--iters N] [--max-mib 64]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

import numpy as np
from simpler import Worker
from simpler.collectives import Collectives


def memcpy_gbps(nbytes: int = 64 << 20, rounds: int = 5) -> float:
    """Best of ``rounds`` numpy copies of ``nbytes`` (read + write counted once, as a copy)."""
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def allreduce_seconds(w: Worker, coll: Collectives, n: int, count: int, iters: int) -> float:
    """Seconds per allreduce of ``count`` f32 on chips ``0 .. n``: a run of ``1 + iters``
    allreduces less a run of one, over ``iters`` (the run's fixed costs — its chip memory,
    the domain, the first collective — cancel out)."""
    workers = list(range(n))

    def orch_of(k: int):
        def orch(o, _a, _c):
            ins = [o.alloc_child_tensor(c, (count,), np.float32) for c in workers]
            outs = [o.alloc_child_tensor(c, (count,), np.float32) for c in workers]
            with coll.allocate_domain(o, "bench", workers, count, np.float32) as dom:
                for _ in range(k):
                    coll.allreduce(o, dom, ins, outs)
            for t in ins + outs:
                o.free(t)

        return orch

    def timed(k: int) -> float:
        t0 = time.perf_counter()
        w.run(orch_of(k))
        return time.perf_counter() - t0

    one = min(timed(1) for _ in range(2))
    many = timed(1 + iters)
    return max(many - one, 1e-9) / iters


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chips", type=int, default=4)
    parser.add_argument("--iters", type=int, default=0, help="allreduces per size (0: by size)")
    parser.add_argument("--max-mib", type=int, default=64)
    opts = parser.parse_args(argv)
    n = opts.chips
    copy = memcpy_gbps()
    print(f"memcpy bandwidth (numpy, 64 MiB, best of 5): {copy:.2f} GB/s")
    print(f"allreduce sum f32 over {n} chips (sim), busbw = algbw * 2(n-1)/n:")
    print(f"{'bytes/rank':>12} {'time/op':>11} {'algbw GB/s':>11} {'busbw GB/s':>11} {'busbw/memcpy':>13}")
    with Worker(level=3, device_ids=list(range(n))) as w:
        coll = Collectives(w)
        w.init()
        size = 4 << 10
        while size <= opts.max_mib << 20:
            count = size // 4
            iters = opts.iters or max(2, min(50, (64 << 20) // size // 8))
            t = allreduce_seconds(w, coll, n, count, iters)
            algbw = size / t / 1e9
            busbw = algbw * 2 * (n - 1) / n
            label = f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
            print(f"{label:>12} {t * 1e6:>9.0f}us {algbw:>11.3f} {busbw:>11.3f} {busbw / copy:>12.1%}")
            size *= 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
