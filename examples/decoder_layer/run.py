#!/usr/bin/env python3
"""Runs examples/decoder_layer (one decode step) on the sim platform and checks it.

    python examples/decoder_layer/run.py --batch 4 --context 100 --seed 0 [--ragged]

Builds the callable from simpler.toml, makes random weights and inputs from the seed
(dl_data.make_inputs: the model of dl_data.MODEL unless overridden), runs one step, and
compares ``out`` and the written KV caches with the float64 numpy reference
(dl_data.reference) at the tolerance of README.md; prints ``PASS`` with the largest absolute
and relative errors (exit 0) or ``FAIL`` (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dl_data  # noqa: E402
from simpler import ChipCallable, Worker  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--context", type=int, default=100, help="tokens per sequence, new one included")
    p.add_argument("--ragged", action="store_true", help="lengths uniform in 1..=context")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    for k, v in dl_data.MODEL.items():
        p.add_argument(f"--{k.replace('_', '-')}", type=int, default=v)
    return p


def inputs_from(a: argparse.Namespace) -> dl_data.LayerInputs:
    return dl_data.make_inputs(
        a.batch, a.context, a.seed, a.block_size, a.ragged,
        **{k: getattr(a, k) for k in dl_data.MODEL},
    )


def checked(p: argparse.ArgumentParser, a: argparse.Namespace) -> argparse.Namespace:
    """``a`` when every size is at least 1, the heads group evenly and the step's tensors
    fit in ``dl_data.MAX_STEP_BYTES`` (checked before anything is allocated); else exits 2
    naming the flag (argparse's usage error), as paged_attention/run.py does."""
    for name in ("batch", "context", "block_size", *dl_data.MODEL):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.heads % a.kv_heads:
        p.error(f"--heads ({a.heads}) must be a multiple of --kv-heads ({a.kv_heads})")
    sizes = dl_data.tensor_bytes(
        a.batch, a.context, a.block_size, **{k: getattr(a, k) for k in dl_data.MODEL}
    )
    refusal = dl_data.too_large(sizes)
    if refusal:
        p.error(refusal)
    return a


def main(argv=None) -> int:
    p = parser()
    a = checked(p, p.parse_args(argv))
    x = inputs_from(a)
    want = dl_data.reference(x)
    callable = ChipCallable.from_example(HERE)
    with Worker(level=2, platform="sim") as w:
        h = w.register(callable)
        w.init()
        report = w.run(h, x.args())
    print(
        f"decoder_layer: {dl_data.describe(x)}: {report.tasks} tasks, "
        f"device time {report.device_time_s * 1e3:.1f} ms"
    )
    tol = dl_data.TOLERANCE
    ok = True
    for name in ("out", "k_cache", "v_cache"):
        got = getattr(x, name)
        good = dl_data.close(got, want[name], **tol)
        abs_err, rel_err = dl_data.worst_errors(got, want[name])
        print(
            f"{'PASS' if good else 'FAIL'} {name}: max abs error {abs_err:.3e}, "
            f"max rel error {rel_err:.3e} (rtol={tol['rtol']:g} atol={tol['atol']:g})"
        )
        ok &= good
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
