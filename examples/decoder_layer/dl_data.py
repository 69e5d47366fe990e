"""Inputs and the independent numpy reference of ``examples/decoder_layer``.

Used by ``run.py``, ``bench.py`` and the scene test (``python/tests/test_scene_flagship.py``).
Nothing here calls simpler. The reference is the layer written directly in float64 numpy:
RMSNorm, QKV projection, rotary embedding by halves at each sequence's new position, the new
k/v appended to the sequence's gathered history, full-softmax grouped-query attention,
output projection, residual, RMSNorm, SwiGLU MLP, residual.

Shapes: ``x [B, E]``, ``w_norm1``/``w_norm2 [E]``, ``w_qkv [E, (H + 2 KVH) D]`` (q columns,
then k, then v), ``w_o [H D, E]``, ``w_gate_up [E, 2F]`` (gate columns, then up),
``w_down [F, E]``, ``rope [P, D]`` (row p: ``cos(p θ_i)`` for i < D/2, then ``sin(p θ_i)``,
``θ_i = 10000^(-2i/D)``), caches, block table and context lengths as in
``examples/paged_attention`` (a length counts the new token, whose position is
``len - 1``), ``out [B, E]``; scalar ``eps``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "paged_attention"))

import pa_data  # noqa: E402

EPS = 1e-6
#: run.py's model: small, with the ratios of a real one (GQA group 4, FFN 2x).
MODEL = dict(embed=256, heads=8, kv_heads=2, head_dim=32, ffn=512)
#: out, k_cache, v_cache against the reference (README.md, "Checking").
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


@dataclass
class LayerInputs:
    """Every argument of one decode step, in signature order (:meth:`args`)."""

    x: np.ndarray
    w_norm1: np.ndarray
    w_qkv: np.ndarray
    w_o: np.ndarray
    w_norm2: np.ndarray
    w_gate_up: np.ndarray
    w_down: np.ndarray
    rope: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    block_table: np.ndarray
    context_lens: np.ndarray
    out: np.ndarray
    eps: float = EPS

    NAMES = (
        "x", "w_norm1", "w_qkv", "w_o", "w_norm2", "w_gate_up", "w_down", "rope",
        "k_cache", "v_cache", "block_table", "context_lens", "out",
    )

    def args(self) -> List[object]:
        """The run arguments in signature order: 13 tensors, then eps."""
        return [getattr(self, n) for n in self.NAMES] + [np.float32(self.eps)]


def rope_table(positions: int, dim: int) -> np.ndarray:
    """``[positions, dim]``: ``cos(p θ_i)`` then ``sin(p θ_i)``, ``θ_i = 10000^(-2i/dim)``."""
    theta = 10000.0 ** (-np.arange(dim // 2, dtype=np.float64) * 2.0 / dim)
    angle = np.arange(positions, dtype=np.float64)[:, None] * theta[None, :]
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=1).astype(np.float32)


def make_inputs(
    batch: int,
    context: int,
    seed: int = 0,
    block_size: int = 16,
    ragged: bool = False,
    embed: int = MODEL["embed"],
    heads: int = MODEL["heads"],
    kv_heads: int = MODEL["kv_heads"],
    head_dim: int = MODEL["head_dim"],
    ffn: int = MODEL["ffn"],
) -> LayerInputs:
    """Random weights and inputs from ``seed``: every sequence ``context`` tokens long
    (the new one included), or with ``ragged`` lengths uniform in ``1..=context`` (the last
    one ``context``). The cache slots of the new tokens hold NaN, like every slot no
    sequence owns: the layer must write them before its attention reads them."""
    lens = None if ragged else np.full(batch, context, np.int32)
    pa = pa_data.make_inputs(
        batch, heads, kv_heads, head_dim, block_size, context, seed, context_lens=lens
    )
    lens = pa.context_lens
    k_cache, v_cache = pa.k_cache.copy(), pa.v_cache.copy()
    for b in range(batch):
        pos = int(lens[b]) - 1
        blk = pa.block_table[b, pos // block_size]
        k_cache[blk, pos % block_size] = np.nan
        v_cache[blk, pos % block_size] = np.nan
    rng = np.random.default_rng(seed + 1)

    def w(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    qkv = (heads + 2 * kv_heads) * head_dim
    return LayerInputs(
        x=w(batch, embed, scale=1.0),
        w_norm1=(1.0 + w(embed, scale=0.1)).astype(np.float32),
        w_qkv=w(embed, qkv, scale=embed**-0.5),
        w_o=w(heads * head_dim, embed, scale=(heads * head_dim) ** -0.5),
        w_norm2=(1.0 + w(embed, scale=0.1)).astype(np.float32),
        w_gate_up=w(embed, 2 * ffn, scale=embed**-0.5),
        w_down=w(ffn, embed, scale=ffn**-0.5),
        rope=rope_table(context, head_dim),
        k_cache=k_cache,
        v_cache=v_cache,
        block_table=pa.block_table,
        context_lens=lens,
        out=np.zeros((batch, embed), np.float32),
    )


def _rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, pos: int, dim: int) -> np.ndarray:
    """Rotation by halves of ``x [heads, dim]`` at position ``pos``, angles in float64."""
    theta = 10000.0 ** (-np.arange(dim // 2, dtype=np.float64) * 2.0 / dim)
    c, s = np.cos(pos * theta), np.sin(pos * theta)
    x1, x2 = x[:, : dim // 2], x[:, dim // 2 :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=1)


def reference(x: LayerInputs) -> Dict[str, np.ndarray]:
    """``{"out", "k_cache", "v_cache"}``: the layer's output (float64, cast to float32) and
    the caches with each new token's k and v written at its slot."""
    f = lambda a: a.astype(np.float64)  # noqa: E731
    batch, embed = x.x.shape
    _, block_size, kv_heads, dim = x.k_cache.shape
    heads = x.w_qkv.shape[1] // dim - 2 * kv_heads
    group = heads // kv_heads
    h1 = _rmsnorm(f(x.x), f(x.w_norm1), x.eps)
    qkv = h1 @ f(x.w_qkv)
    k_cache, v_cache = x.k_cache.copy(), x.v_cache.copy()
    attn = np.empty((batch, heads * dim))
    for b in range(batch):
        n = int(x.context_lens[b])
        pos = n - 1
        q = _rope(qkv[b, : heads * dim].reshape(heads, dim), pos, dim)
        k_cols = qkv[b, heads * dim : (heads + kv_heads) * dim]
        k_new = _rope(k_cols.reshape(kv_heads, dim), pos, dim)
        v_new = qkv[b, (heads + kv_heads) * dim :].reshape(kv_heads, dim)
        k = np.concatenate([pa_data.gather(f(x.k_cache), x.block_table[b], pos), k_new[None]])
        v = np.concatenate([pa_data.gather(f(x.v_cache), x.block_table[b], pos), v_new[None]])
        for h in range(heads):
            s = k[:, h // group, :] @ q[h] / np.sqrt(dim)
            p = np.exp(s - s.max())
            attn[b, h * dim : (h + 1) * dim] = (p / p.sum()) @ v[:, h // group, :]
        blk = x.block_table[b, pos // block_size]
        k_cache[blk, pos % block_size] = k_new.astype(np.float32)
        v_cache[blk, pos % block_size] = v_new.astype(np.float32)
    hidden = f(x.x) + attn @ f(x.w_o)
    n2 = _rmsnorm(hidden, f(x.w_norm2), x.eps)
    gu = n2 @ f(x.w_gate_up)
    ffn = x.w_down.shape[0]
    gate, up = gu[:, :ffn], gu[:, ffn:]
    act = gate / (1.0 + np.exp(-gate)) * up
    out = hidden + act @ f(x.w_down)
    return {"out": out.astype(np.float32), "k_cache": k_cache, "v_cache": v_cache}


def task_count(x: LayerInputs) -> int:
    """Tasks one step submits (the allocation-only task included): see orchestration.c."""
    batch, embed = x.x.shape
    _, block_size, kv_heads, _ = x.k_cache.shape
    qkv, ffn = x.w_qkv.shape[1], x.w_down.shape[0]

    def tiles(n: int, t: int) -> int:
        return -(-n // t)

    def mm(m: int, k: int, n: int) -> int:
        return tiles(m, 64) * tiles(n, 64) * tiles(k, 128)

    rows = tiles(batch, 8)
    matmuls = mm(batch, embed, qkv) + mm(batch, x.w_o.shape[0], embed)
    matmuls += mm(batch, embed, 2 * ffn) + mm(batch, ffn, embed)
    attention = pa_data.task_count(x.context_lens, kv_heads, block_size)
    return 1 + 5 * rows + matmuls + batch + attention


#: The most bytes run.py lets one step's tensors take (1 GiB): making the inputs and the
#: float64 reference holds a few more copies of the caches, so the script stays within a few
#: GiB; larger sizes are refused before anything is allocated (:func:`tensor_bytes`).
MAX_STEP_BYTES = 1 << 30


def tensor_bytes(
    batch: int,
    context: int,
    block_size: int = 16,
    embed: int = MODEL["embed"],
    heads: int = MODEL["heads"],
    kv_heads: int = MODEL["kv_heads"],
    head_dim: int = MODEL["head_dim"],
    ffn: int = MODEL["ffn"],
) -> Dict[str, int]:
    """Bytes of each tensor :func:`make_inputs` would allocate for these sizes, computed
    without allocating anything; ragged lengths need at most this (the caches hold the
    blocks of ``batch`` sequences of ``context`` tokens, plus pa_data's 3 spare blocks).
    Keys: the :class:`LayerInputs` tensor names."""
    f32, i32 = 4, 4
    max_blocks = -(-context // block_size)
    cache = (batch * max_blocks + 3) * block_size * kv_heads * head_dim * f32
    qkv = (heads + 2 * kv_heads) * head_dim
    return {
        "x": batch * embed * f32,
        "w_norm1": embed * f32,
        "w_qkv": embed * qkv * f32,
        "w_o": heads * head_dim * embed * f32,
        "w_norm2": embed * f32,
        "w_gate_up": embed * 2 * ffn * f32,
        "w_down": ffn * embed * f32,
        "rope": context * head_dim * f32,
        "k_cache": cache,
        "v_cache": cache,
        "block_table": batch * max_blocks * i32,
        "context_lens": batch * i32,
        "out": batch * embed * f32,
    }


#: The flags each tensor's size grows with (run.py's names), for the message of a refusal.
TENSOR_FLAGS = {
    "x": ("--batch", "--embed"),
    "out": ("--batch", "--embed"),
    "w_qkv": ("--embed", "--heads", "--kv-heads", "--head-dim"),
    "w_o": ("--heads", "--head-dim", "--embed"),
    "w_gate_up": ("--embed", "--ffn"),
    "w_down": ("--ffn", "--embed"),
    "rope": ("--context", "--head-dim"),
    "k_cache": ("--batch", "--context", "--block-size", "--kv-heads", "--head-dim"),
    "v_cache": ("--batch", "--context", "--block-size", "--kv-heads", "--head-dim"),
    "block_table": ("--batch", "--context", "--block-size"),
}


def too_large(sizes: Dict[str, int], limit: int = MAX_STEP_BYTES) -> "str | None":
    """``None`` when the tensors of ``sizes`` (:func:`tensor_bytes`) total at most ``limit``
    bytes; else one line saying how much they would take, the largest tensor and the flags
    it grows with."""
    total = sum(sizes.values())
    if total <= limit:
        return None
    big = max(sizes, key=sizes.get)
    gib = lambda n: f"{n / (1 << 30):.3g} GiB"  # noqa: E731
    *rest, last = TENSOR_FLAGS.get(big, ("the sizes",))
    flags = f"{', '.join(rest)} or {last}" if rest else last
    return (
        f"these sizes need {gib(total)} ({total} bytes) of tensors, more than the "
        f"{gib(limit)} this script allocates (largest: {big}, {gib(sizes[big])}); "
        f"lower {flags}"
    )


def worst_errors(got: np.ndarray, want: np.ndarray) -> "tuple[float, float]":
    """Largest absolute error, and largest relative error over |want| > 1e-3 (NaN ignored:
    equal NaN positions are checked by :func:`close`)."""
    ok = ~np.isnan(want)
    diff = np.abs(got[ok].astype(np.float64) - want[ok])
    big = np.abs(want[ok]) > 1e-3
    rel = float((diff[big] / np.abs(want[ok][big])).max()) if big.any() else 0.0
    return float(diff.max()) if diff.size else 0.0, rel


def close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """NumPy's allclose rule with NaN matching NaN only."""
    return bool(
        np.allclose(got.astype(np.float64), want.astype(np.float64), rtol, atol, equal_nan=True)
    )


def describe(x: LayerInputs) -> str:
    """One line naming the sizes."""
    batch, embed = x.x.shape
    _, block_size, kv_heads, dim = x.k_cache.shape
    heads = x.w_qkv.shape[1] // dim - 2 * kv_heads
    return (
        f"batch {batch}, embed {embed}, heads {heads}/{kv_heads} kv, head_dim {dim}, "
        f"ffn {x.w_down.shape[0]}, block {block_size}, context lengths "
        f"{_short(x.context_lens.tolist())}"
    )


def _short(v: list, keep: int = 8) -> str:
    return str(v) if len(v) <= keep else f"[{', '.join(map(str, v[:keep]))}, ...]"


