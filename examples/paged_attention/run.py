#!/usr/bin/env python3
"""Runs examples/paged_attention on the sim platform and checks it against numpy.

    python examples/paged_attention/run.py --batch 4 --heads 8 --kv-heads 2 --head-dim 32 \
        --block-size 16 --max-context 300 --seed 0 [--dtype f32|f16|bf16]

Builds the callable from this folder's sources (simpler.toml; the signature's q, k_cache and
v_cache dtypes follow --dtype), makes random inputs (pa_data.make_inputs), runs one decode
step, compares ``out`` with the float64 reference (pa_data.reference) at the tolerance of
README.md and prints ``PASS`` with the largest absolute and relative errors (exit 0), or
``FAIL`` (exit 1). bf16 inputs are uint16 arrays of raw bits, passed as bf16 tensors
(``Tensor.from_host(bits, dtype="bf16")``: numpy has no bfloat16).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pa_data  # noqa: E402
from simpler import ChipCallable, CoreCallable, KernelCompiler, Tensor, Worker  # noqa: E402
from simpler.manifest import load_manifest  # noqa: E402


def build_callable(dtype: str, folder: Path = HERE, compiler=None) -> ChipCallable:
    """The example's callable with q, k_cache and v_cache of ``dtype`` in its signature."""
    m = load_manifest(folder)
    kc = compiler or KernelCompiler()
    children = [
        (k.func_id, _core(kc, k.source, k.core, k.entry)) for k in m.kernels
    ]
    float_args = {"q", "k_cache", "v_cache"}
    sig = [
        (a.name, a.direction.name.lower(), dtype if a.name in float_args else a.dtype.short_name)
        for a in m.signature
    ]
    image = kc.compile_orchestration(m.orchestration_source)
    return ChipCallable.build(sig, m.orchestration_entry, image, children, name=m.name)


def _core(kc, source, core, entry):
    return CoreCallable(kc.compile_incore(source, core_type=core), core_type=core, entry=entry)


def stage(array: np.ndarray, dtype: str):
    """A run argument for ``array``: the array itself, or for bf16 (raw bits in uint16) a
    host tensor that says its bits are bf16."""
    return Tensor.from_host(array, dtype="bf16") if dtype == "bf16" else array


def errors(got: np.ndarray, want: np.ndarray):
    """Largest absolute error, and largest relative error over elements with |want| > 1e-3."""
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    big = np.abs(want) > 1e-3
    rel = (diff[big] / np.abs(want[big].astype(np.float64))).max() if big.any() else 0.0
    return float(diff.max()), float(rel)


def check(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """NumPy's allclose rule, NaN never matching."""
    return bool(np.all(np.abs(got.astype(np.float64) - want) <= atol + rtol * np.abs(want)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-context", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=pa_data.DTYPES, default="f32")
    a = p.parse_args(argv)
    for name in ("batch", "heads", "kv_heads", "head_dim", "block_size", "max_context"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.heads % a.kv_heads:
        p.error(f"--heads ({a.heads}) must be a multiple of --kv-heads ({a.kv_heads})")

    x = pa_data.make_inputs(
        a.batch, a.heads, a.kv_heads, a.head_dim, a.block_size, a.max_context, a.seed, a.dtype
    )
    want = pa_data.reference(x)
    out = x.out()
    callable = build_callable(a.dtype)
    with Worker(level=2, platform="sim") as w:
        h = w.register(callable)
        w.init()
        args = [stage(t, a.dtype) for t in (x.q, x.k_cache, x.v_cache)]
        report = w.run(h, args + [x.block_table, x.context_lens, out])
    tol = pa_data.TOLERANCE[a.dtype]
    abs_err, rel_err = errors(out, want)
    tasks = report.tasks  # what the runtime counted; pa_data.task_count predicts it
    print(
        f"paged_attention {a.dtype}: batch {a.batch}, heads {a.heads}/{a.kv_heads} kv, "
        f"head_dim {a.head_dim}, block {a.block_size}, context lengths "
        f"{x.context_lens.tolist()}: {tasks} tasks, device time {report.device_time_s * 1e3:.1f} ms"
    )
    ok = check(out, want, **tol)
    verdict = "PASS" if ok else "FAIL"
    print(
        f"{verdict} out: max abs error {abs_err:.3e}, max rel error {rel_err:.3e} "
        f"(rtol={tol['rtol']:g} atol={tol['atol']:g})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
