"""Allreduce, allgather and reduce-scatter over 2, 4 and 8 chips of one level-3 worker,
each checked against numpy.

One worker of 8 chips; for each group size ``n`` in 2, 4, 8 one run makes a comm domain of
chips ``0 .. n`` (``simpler.collectives``: hand-written AIV kernels that exchange data through
the domain's symmetric windows) and issues, one after the other on that domain:

- allreduce (sum) of f32 vectors of ``COUNT`` elements, then of i32 vectors;
- allgather of ``COUNT`` f32 elements per rank into ``n · COUNT``;
- reduce-scatter of ``n · COUNT`` f32 elements per rank into ``COUNT``.

Inputs and outputs are views of one ``create_buffer`` region, so the script runs with the
chips in this process (``--isolation thread``, the default) or each in a child process
(``--isolation process``). It prints one line per collective and ``PASS`` (exit 0) or
``FAIL`` (exit 1).

Run: ``python examples/l3/allreduce/main.py [--isolation thread|process] [--sizes 2,4,8]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence

import numpy as np
from simpler import SimplerError, Worker
from simpler.collectives import Collectives

CHIPS = 8
COUNT = 4096  # elements per rank
RTOL = 1e-6  # f32 sums of 8 values of magnitude 1 in a fixed order


def _views(w: Worker, shapes: List[tuple], dtype) -> List[np.ndarray]:
    """Arrays of ``shapes`` × ``dtype`` in one shared buffer (children map it in place)."""
    item = np.dtype(dtype).itemsize
    sizes = [int(np.prod(s)) * item for s in shapes]
    offsets = np.cumsum([0] + [(s + 63) // 64 * 64 for s in sizes])
    buf = w.create_buffer(int(offsets[-1]))
    return [buf.array(s, dtype, int(o)) for s, o in zip(shapes, offsets[:-1])]


def run_size(w: Worker, coll: Collectives, n: int, rng: np.random.Generator) -> bool:
    """One run of the four collectives over chips ``0 .. n``; True when all match numpy."""
    f_in = _views(w, [(COUNT,)] * n, np.float32)
    f_out = _views(w, [(COUNT,)] * n, np.float32)
    i_in = _views(w, [(COUNT,)] * n, np.int32)
    i_out = _views(w, [(COUNT,)] * n, np.int32)
    g_out = _views(w, [(n * COUNT,)] * n, np.float32)
    rs_in = _views(w, [(n * COUNT,)] * n, np.float32)
    rs_out = _views(w, [(COUNT,)] * n, np.float32)
    for a in f_in + rs_in:
        a[:] = rng.uniform(-1, 1, a.shape)
    for a in i_in:
        a[:] = rng.integers(-(1 << 30), 1 << 30, a.shape, dtype=np.int32)
    for a in f_out + g_out + rs_out:
        a[:] = np.nan  # every element must be written
    for a in i_out:
        a[:] = 0x7EEEEEEE

    workers = list(range(n))

    def orch(o, _args, _cfg):
        with coll.allocate_domain(o, f"f32x{n}", workers, COUNT, np.float32) as dom:
            coll.allreduce(o, dom, f_in, f_out)
            coll.allgather(o, dom, f_in, g_out)
            coll.reduce_scatter(o, dom, rs_in, rs_out)
        with coll.allocate_domain(o, f"i32x{n}", workers, COUNT, np.int32) as dom:
            coll.allreduce(o, dom, i_in, i_out)

    report = w.run(orch)

    ok = True

    def verdict(what: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray], exact: bool):
        nonlocal ok
        bad = 0
        for g, e in zip(got, want):
            if exact:
                bad += int(np.count_nonzero(g != e))
            else:
                bad += int(np.count_nonzero(~np.isclose(g, e, rtol=RTOL, atol=RTOL)))
        total = sum(g.size for g in got)
        print(f"  {what:<28} {total:>7} elements on {n} ranks: {bad} differ")
        ok = ok and bad == 0

    f_sum = np.sum(np.stack(f_in).astype(np.float64), axis=0)
    verdict("allreduce sum f32", f_out, [f_sum] * n, exact=False)
    gathered = np.concatenate(f_in)
    verdict("allgather f32", g_out, [gathered] * n, exact=True)
    rs_sum = np.sum(np.stack(rs_in).astype(np.float64), axis=0)
    verdict("reduce-scatter sum f32", rs_out, [rs_sum[r * COUNT : (r + 1) * COUNT] for r in range(n)], exact=False)
    i_sum = np.sum(np.stack(i_in).astype(np.int64), axis=0).astype(np.int32)  # wraps like the chips
    verdict("allreduce sum i32 (wrapping)", i_out, [i_sum] * n, exact=True)
    print(f"  run {report.run}: {report.tasks} tasks in {report.total_time_s * 1e3:.1f} ms")
    return ok


def run(isolation: str = "thread", sizes: Sequence[int] = (2, 4, 8), seed: int = 0) -> bool:
    """Runs the example; True when every collective matched numpy."""
    rng = np.random.default_rng(seed)
    with Worker(
        level=3,
        platform="sim",
        runtime="tensormap_and_ringbuffer",
        device_ids=list(range(max(sizes))),
        chip_isolation=isolation,
    ) as w:
        coll = Collectives(w)
        w.init()
        ok = True
        for n in sizes:
            print(f"{n} chips ({isolation} isolation):")
            ok = run_size(w, coll, n, rng) and ok
    return ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isolation", choices=("thread", "process"), default="thread")
    parser.add_argument("--sizes", default="2,4,8", help="comma-separated group sizes (<= 8)")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in opts.sizes.split(",")]
        if not sizes or any(not 1 <= s <= CHIPS for s in sizes):
            raise ValueError
    except ValueError:
        print(f"FAIL: --sizes must be comma-separated ints in 1..{CHIPS}, got {opts.sizes!r}")
        return 1
    try:
        passed = run(opts.isolation, sizes, opts.seed)
    except SimplerError as err:
        print(f"FAIL: {type(err).__name__}: {err}")
        return 1
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
