#!/usr/bin/env python3
"""Decode-step time of examples/decoder_layer on the sim platform, and the runtime's share.

    python examples/decoder_layer/bench.py                    # batch 1/8/32 x context 512/4096
    python examples/decoder_layer/bench.py --batch 1 --context 512 --steps 2

For every (batch, context) it runs the layer ``--steps`` times after one warm-up step and
prints the median step time, the tasks per step, and an estimate of the share of the step
spent outside kernels. The runtime reports no per-kernel times, so that share is measured the
only honest way it allows: the same orchestration and task graph run again with every kernel
replaced by an empty one (bench/empty_kernel.c); its step time is the runtime's cost for the
graph (orchestration, tensor-map lookups, scheduling, dispatch, completion) with no kernel
work, and ``overhead = empty step / real step``. It is an estimate: with real kernels part of
that cost overlaps kernel execution, and the sim's cores are host threads competing for the
same CPUs as the orchestrator, so on a host with few cores the real step is inflated too.
Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dl_data  # noqa: E402
from simpler import ChipCallable, CoreCallable, KernelCompiler, Worker  # noqa: E402
from simpler.manifest import load_manifest  # noqa: E402


def callables(compiler: KernelCompiler):
    """(the layer, the same layer with every kernel empty)."""
    real = ChipCallable.from_example(HERE)
    m = load_manifest(HERE)
    empty_src = HERE / "bench" / "empty_kernel.c"
    children = [
        (
            k.func_id,
            CoreCallable(compiler.compile_incore(empty_src, core_type=k.core), core_type=k.core),
        )
        for k in m.kernels
    ]
    sig = [(a.name, a.direction.name.lower(), a.dtype.short_name) for a in m.signature]
    image = compiler.compile_orchestration(m.orchestration_source)
    empty = ChipCallable.build(
        sig, m.orchestration_entry, image, children, name="decoder_layer_empty"
    )
    return real, empty


def time_steps(worker: Worker, handle, x: dl_data.LayerInputs, steps: int):
    """Median device time, median wall time of ``steps`` runs after one warm-up run, and the
    tasks of a run (as the runtime counted them)."""
    device, wall = [], []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        r = worker.run(handle, x.args())
        t1 = time.perf_counter()
        if i:
            device.append(r.device_time_s)
            wall.append(t1 - t0)
    return statistics.median(device), statistics.median(wall), r.tasks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--context", type=int, nargs="+", default=[512, 4096])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be at least 1")
    kc = KernelCompiler()
    real, empty = callables(kc)
    m = dl_data.MODEL
    print(
        f"decoder_layer decode step on the sim: embed {m['embed']}, heads {m['heads']}/"
        f"{m['kv_heads']} kv, head_dim {m['head_dim']}, ffn {m['ffn']}, block {a.block_size}; "
        f"median of {a.steps} steps; host CPUs {os.cpu_count()}"
    )
    header = (
        f"{'batch':>5} {'context':>7} {'tasks':>7} {'step ms':>9} {'wall ms':>9} "
        f"{'empty ms':>9} {'outside kernels':>15} {'us/task':>8}"
    )
    print(header)
    with Worker(level=2, platform="sim") as w:
        hr, he = w.register(real), w.register(empty)
        w.init()
        for batch in a.batch:
            for context in a.context:
                x = dl_data.make_inputs(batch, context, a.seed, a.block_size)
                step, wall, tasks = time_steps(w, hr, x, a.steps)
                step_empty, _, _ = time_steps(w, he, x, a.steps)
                print(
                    f"{batch:>5} {context:>7} {tasks:>7} {step * 1e3:>9.2f} {wall * 1e3:>9.2f} "
                    f"{step_empty * 1e3:>9.2f} {min(step_empty / step, 1.0):>15.1%} "
                    f"{step_empty / tasks * 1e6:>8.2f}",
                    flush=True,
                )
    print(
        "step: device time of a real step; wall: the run call, staging and copy-back "
        "included; empty: the same graph with empty kernels; outside kernels = empty / step; "
        "us/task: empty step per task."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
