#!/usr/bin/env python3
"""Dispatch cost of a level-4 worker: a no-op level-3 run through ``Worker(level=4)`` on a
local child, a Ray actor on this node, and a Ray actor on another (fake) node of a local
cluster; prints per-run latency (one run at a time) and per-run cost with runs in flight (the
engine's two pipeline places kept full), beside the anchors measured on the same machine: a
level-3 no-op run called directly, and a bare Ray actor call (synchronous, and pipelined).

Run: ``python scripts/bench-l4.py [--runs N]`` (needs Ray: ``pip install ".[ray]"``). It
starts a local cluster on 127.0.0.1 (head + ``host_a`` + ``host_b``) and stops it at the end.
Figures are medians of ``--rounds`` rounds; the target (150 µs per remote no-op run in
flight) is printed beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable, List

TARGET_US = 150.0


def noop(orch: Any, args: Any, cfg: Any) -> None:
    """A level-3 orchestration function that submits nothing."""


def _median_us(samples: List[float]) -> float:
    return statistics.median(samples) * 1e6


def _sync(run_once: Callable[[], Any], runs: int) -> float:
    """Median seconds of one call, one at a time."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run_once()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _in_flight(w: Any, orch: Callable[..., Any], runs: int, rounds: int) -> float:
    """Median over ``rounds`` of (wall time of ``runs`` runs submitted back to back) / runs."""
    per_run = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        handles = [w.submit(orch) for _ in range(runs)]
        for h in handles:
            h.wait()
        per_run.append((time.perf_counter() - t0) / runs)
    return statistics.median(per_run)


def bench_level4(kind: str, runs: int, rounds: int) -> None:
    from simpler import RemoteWorkerSpec, TaskArgs, Worker

    w = Worker(level=4)
    if kind == "local":
        wid = w.add_worker(Worker(level=3, device_ids=[0]))
    else:
        node = "host_head" if kind == "ray, same node" else "host_a"
        wid = w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], node=node))
    handle = w.register(noop)
    w.init()
    try:

        def orch(o: Any, _args: Any, cfg: Any) -> None:
            o.submit_next_level(handle, TaskArgs(), cfg, worker=wid)

        for _ in range(20):  # warm: the actor's first calls, the worker pools
            w.run(orch)
        latency = min(_sync(lambda: w.run(orch), runs) for _ in range(rounds))
        flight = _in_flight(w, orch, runs, rounds)
    finally:
        w.close()
    mark = "" if kind == "local" else ("  (target met)" if flight * 1e6 <= TARGET_US else "  (target missed)")
    print(
        f"  L4 -> {kind:<16} one at a time {latency * 1e6:8.1f} µs/run   in flight "
        f"{flight * 1e6:8.1f} µs/run{mark}"
    )


def bench_anchors(runs: int, rounds: int) -> None:
    import ray
    from simpler import Worker

    with Worker(level=3, device_ids=[0]) as w3:
        w3.init()
        for _ in range(20):
            w3.run(noop)
        l3 = min(_sync(lambda: w3.run(noop), runs) for _ in range(rounds))
    print(f"  L3 no-op run, called directly       {l3 * 1e6:8.1f} µs/run (upstream's: ~51 µs)")

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self) -> int:
            return 0

    actor = Echo.options(resources={"host_a": 0.001}).remote()
    ray.get(actor.ping.remote())
    for _ in range(50):
        ray.get(actor.ping.remote())
    sync = min(_sync(lambda: ray.get(actor.ping.remote()), runs) for _ in range(rounds))
    pipelined = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ray.get([actor.ping.remote() for _ in range(runs)])
        pipelined.append((time.perf_counter() - t0) / runs)
    ray.kill(actor)
    print(
        f"  bare Ray actor call (other node)    {sync * 1e6:8.1f} µs sync, "
        f"{statistics.median(pipelined) * 1e6:8.1f} µs pipelined (Ray's: ~500 / ~115 µs)"
    )


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians / minima)")
    opts = parser.parse_args(argv)
    from simpler.testing.ray_cluster import get_cluster, stop_cluster

    t0 = time.perf_counter()
    get_cluster()
    print(f"local Ray cluster (3 nodes on 127.0.0.1) up in {time.perf_counter() - t0:.1f} s")
    try:
        print(f"no-op level-3 run through Worker(level=4); {opts.runs} runs x {opts.rounds} rounds")
        for kind in ("local", "ray, same node", "ray, other node"):
            bench_level4(kind, opts.runs, opts.rounds)
        print(f"  target: <= {TARGET_US:.0f} µs per L4 -> remote L3 no-op run in flight")
        print("anchors on this machine")
        bench_anchors(opts.runs, opts.rounds)
        print("  Compiled-Graph path: not built (each run is one Ray actor call)")
    finally:
        stop_cluster()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
