"""Inputs and the independent numpy reference of ``examples/paged_attention``.

Used by ``run.py``, by the scene test (``python/tests/test_scene_flagship.py``) and by
``examples/decoder_layer``. Nothing here calls simpler: the reference never sees the block
structure of the cache except to gather each sequence's tokens, in order, by its real
length, and it computes the full softmax in float64.

Layout (row-major): ``q [batch, heads, dim]``, ``k_cache``/``v_cache [num_blocks,
block_size, kv_heads, dim]``, ``block_table`` int32 ``[batch, max_blocks_per_seq]`` (-1 in
the entries a sequence does not use), ``context_lens`` int32 ``[batch]``,
``out`` f32 ``[batch, heads, dim]``. Query head ``i`` reads KV head ``i // (heads //
kv_heads)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import numpy as np

DTYPES = ("f32", "f16", "bf16")


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (NaN kept NaN)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(x)
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out


def bf16_bits_to_f64(b: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float64, exactly."""
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` (float32) stored as ``dtype``: float32, float16, or bfloat16 bits in uint16."""
    if dtype == "f32":
        return x.astype(np.float32)
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return f32_to_bf16_bits(x)
    raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def widen(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values of an array made by :func:`to_dtype`."""
    return bf16_bits_to_f64(x) if dtype == "bf16" else x.astype(np.float64)


@dataclass
class PagedInputs:
    """One decode step's attention inputs (see the module docs for the layout)."""

    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    block_table: np.ndarray
    context_lens: np.ndarray
    dtype: str

    def out(self) -> np.ndarray:
        """A zeroed output array of the right shape."""
        return np.zeros(self.q.shape, np.float32)


def make_inputs(
    batch: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    block_size: int,
    max_context: int,
    seed: int = 0,
    dtype: str = "f32",
    spare_blocks: int = 3,
    context_lens: "np.ndarray | None" = None,
) -> PagedInputs:
    """Random inputs: context lengths uniform in ``1..=max_context`` (the last sequence gets
    exactly ``max_context``), physical blocks handed out in a shuffled order (so a
    sequence's blocks are scattered through the cache), ``spare_blocks`` blocks nobody uses,
    and NaN in every cache slot no sequence reads (a kernel reading past a sequence's length
    would turn its output into NaN). ``context_lens``, when given, fixes the lengths instead
    (each in ``1..=max_context``)."""
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_context + 1, size=batch).astype(np.int32)
    lens[-1] = max_context
    if context_lens is not None:
        lens = np.asarray(context_lens, np.int32).reshape(batch)
        if lens.min() < 1 or lens.max() > max_context:
            raise ValueError(f"context lengths must lie in 1..={max_context}, got {lens}")
    max_blocks = -(-max_context // block_size)
    used = [-(-int(n) // block_size) for n in lens]
    num_blocks = sum(used) + spare_blocks
    order = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((batch, max_blocks), -1, np.int32)
    nxt = 0
    for b, u in enumerate(used):
        table[b, :u] = order[nxt : nxt + u]
        nxt += u
    q = rng.standard_normal((batch, heads, head_dim)).astype(np.float32)
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k = rng.standard_normal(shape).astype(np.float32)
    v = rng.standard_normal(shape).astype(np.float32)
    live = np.zeros((num_blocks, block_size), bool)
    for b in range(batch):
        for t in range(int(lens[b])):
            live[table[b, t // block_size], t % block_size] = True
    k[~live] = np.nan
    v[~live] = np.nan
    return PagedInputs(
        to_dtype(q, dtype), to_dtype(k, dtype), to_dtype(v, dtype), table, lens, dtype
    )


def gather(cache: np.ndarray, table: np.ndarray, length: int) -> np.ndarray:
    """The first ``length`` tokens of one sequence, ``[length, kv_heads, dim]``: token ``t``
    is slot ``t % block_size`` of physical block ``table[t // block_size]``."""
    block_size = cache.shape[1]
    t = np.arange(length)
    return cache[table[t // block_size], t % block_size]


def reference(x: PagedInputs) -> np.ndarray:
    """``softmax(q·Kᵀ / sqrt(dim)) · V`` per sequence and query head over the sequence's
    gathered tokens, in float64, cast to float32 at the end."""
    q = widen(x.q, x.dtype)
    k_cache, v_cache = widen(x.k_cache, x.dtype), widen(x.v_cache, x.dtype)
    batch, heads, dim = q.shape
    group = heads // k_cache.shape[2]
    out = np.empty((batch, heads, dim), np.float64)
    for b in range(batch):
        n = int(x.context_lens[b])
        k = gather(k_cache, x.block_table[b], n)  # [n, kv_heads, dim]
        v = gather(v_cache, x.block_table[b], n)
        for h in range(heads):
            s = k[:, h // group, :] @ q[b, h] / np.sqrt(dim)  # [n]
            p = np.exp(s - s.max())
            out[b, h] = (p / p.sum()) @ v[:, h // group, :]
    return out.astype(np.float32)


def task_count(context_lens: np.ndarray, kv_heads: int, block_size: int) -> int:
    """Tasks the orchestration submits: 4 per KV block plus 1, per sequence and KV head."""
    blocks = sum(-(-int(n) // block_size) for n in context_lens)
    return kv_heads * (4 * blocks + len(context_lens))


#: The tolerance of a run against :func:`reference` per input dtype (README.md, "Checking").
TOLERANCE: Dict[str, Dict[str, float]] = {
    "f32": {"rtol": 1e-4, "atol": 2e-5},
    "f16": {"rtol": 1e-4, "atol": 2e-5},
    "bf16": {"rtol": 1e-4, "atol": 2e-5},
}
