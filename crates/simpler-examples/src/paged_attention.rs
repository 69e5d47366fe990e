//! Inputs and the independent reference of `examples/paged_attention` (one decode step of
//! grouped-query attention over a paged KV cache).
//!
//! Layout (row-major, as the example's README): `q [batch, heads, dim]`, `k_cache` and
//! `v_cache [num_blocks, block_size, kv_heads, dim]`, `block_table` `i32 [batch,
//! max_blocks_per_seq]` (-1 where a sequence has no block), `context_lens` `i32 [batch]`,
//! `out [batch, heads, dim]`. The reference gathers each sequence's tokens by its length and
//! computes the full softmax in `f64`; it shares nothing with the C kernels and, like the
//! rest of this crate, must not depend on the runtime.

use rand::{seq::SliceRandom, Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Array;

/// The sizes of one paged-attention problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedShape {
    /// Sequences in the batch.
    pub batch: usize,
    /// Query heads; a multiple of `kv_heads`.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// The longest context (the last sequence's length); the others are uniform in
    /// `1..=max_context`.
    pub max_context: usize,
}

/// One problem's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct PagedInputs {
    /// The sizes.
    pub shape: PagedShape,
    /// `q [batch, heads, dim]`.
    pub q: Array,
    /// `k_cache [num_blocks, block_size, kv_heads, dim]`; NaN in every slot no sequence reads.
    pub k_cache: Array,
    /// `v_cache`, laid out as `k_cache`.
    pub v_cache: Array,
    /// `[batch, max_blocks_per_seq]`, row-major; -1 in unused entries.
    pub block_table: Vec<i32>,
    /// `[batch]`: each sequence's length in tokens.
    pub context_lens: Vec<i32>,
    /// Physical blocks in the cache.
    pub num_blocks: usize,
}

impl PagedInputs {
    /// Entries per row of the block table: `ceil(max_context / block_size)`.
    pub fn max_blocks(&self) -> usize {
        self.shape.max_context.div_ceil(self.shape.block_size)
    }

    /// Tasks the example's orchestration submits: per sequence and KV head, 4 per KV block
    /// of the sequence plus 1.
    pub fn task_count(&self) -> usize {
        let s = &self.shape;
        let blocks: usize = self
            .context_lens
            .iter()
            .map(|&n| (n as usize).div_ceil(s.block_size))
            .sum();
        s.kv_heads * (4 * blocks + s.batch)
    }
}

/// Deterministic inputs for `shape` from `seed`: lengths uniform in `1..=max_context` (the
/// last one `max_context`), each sequence's blocks taken from a shuffled list of the cache's
/// blocks (3 blocks unused), values uniform in `[-1, 1)`, NaN in every cache slot that no
/// sequence reads.
///
/// # Panics
/// If a size is 0 or `heads` is not a multiple of `kv_heads` (a caller bug).
pub fn inputs(shape: PagedShape, seed: u64) -> PagedInputs {
    let s = shape;
    assert!(
        s.batch > 0 && s.kv_heads > 0 && s.head_dim > 0 && s.block_size > 0 && s.max_context > 0,
        "paged_attention::inputs: sizes must be positive: {s:?}"
    );
    assert_eq!(
        s.heads % s.kv_heads,
        0,
        "heads must be a multiple of kv_heads"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut lens: Vec<i32> = (0..s.batch)
        .map(|_| rng.gen_range(1..=s.max_context) as i32)
        .collect();
    lens[s.batch - 1] = s.max_context as i32;
    let used: Vec<usize> = lens
        .iter()
        .map(|&n| (n as usize).div_ceil(s.block_size))
        .collect();
    let num_blocks = used.iter().sum::<usize>() + 3;
    let mut order: Vec<i32> = (0..num_blocks as i32).collect();
    order.shuffle(&mut rng);
    let max_blocks = s.max_context.div_ceil(s.block_size);
    let mut table = vec![-1i32; s.batch * max_blocks];
    let mut next = order.iter();
    for (b, &u) in used.iter().enumerate() {
        for slot in &mut table[b * max_blocks..b * max_blocks + u] {
            *slot = *next.next().expect("enough blocks");
        }
    }
    let mut uniform =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect() };
    let q = uniform(s.batch * s.heads * s.head_dim);
    let token = s.kv_heads * s.head_dim;
    let cache_len = num_blocks * s.block_size * token;
    let mut k = uniform(cache_len);
    let mut v = uniform(cache_len);
    let mut live = vec![false; num_blocks * s.block_size];
    for b in 0..s.batch {
        for t in 0..lens[b] as usize {
            let blk = table[b * max_blocks + t / s.block_size] as usize;
            live[blk * s.block_size + t % s.block_size] = true;
        }
    }
    for (slot, _) in live.iter().enumerate().filter(|(_, l)| !**l) {
        k[slot * token..(slot + 1) * token].fill(f32::NAN);
        v[slot * token..(slot + 1) * token].fill(f32::NAN);
    }
    let cache_shape = vec![
        num_blocks as u64,
        s.block_size as u64,
        s.kv_heads as u64,
        s.head_dim as u64,
    ];
    PagedInputs {
        shape: s,
        q: Array::new(
            "q",
            vec![s.batch as u64, s.heads as u64, s.head_dim as u64],
            q,
        ),
        k_cache: Array::new("k_cache", cache_shape.clone(), k),
        v_cache: Array::new("v_cache", cache_shape, v),
        block_table: table,
        context_lens: lens,
        num_blocks,
    }
}

/// `out [batch, heads, dim]`: per sequence and query head, `softmax(q·Kᵀ / sqrt(dim)) · V`
/// over the sequence's tokens (token `t` in slot `t % block_size` of block
/// `block_table[b][t / block_size]`), in `f64`, rounded to `f32` at the end.
pub fn reference(x: &PagedInputs) -> Array {
    let s = &x.shape;
    let (dim, group) = (s.head_dim, s.heads / s.kv_heads);
    let max_blocks = x.max_blocks();
    let scale = 1.0 / (dim as f64).sqrt();
    let mut out = Vec::with_capacity(s.batch * s.heads * dim);
    for b in 0..s.batch {
        let len = x.context_lens[b] as usize;
        // The sequence's token rows, gathered in order.
        let rows: Vec<usize> = (0..len)
            .map(|t| {
                let blk = x.block_table[b * max_blocks + t / s.block_size] as usize;
                blk * s.block_size + t % s.block_size
            })
            .collect();
        for h in 0..s.heads {
            let kv = h / group;
            let qv = &x.q.data[(b * s.heads + h) * dim..][..dim];
            let scores: Vec<f64> = rows
                .iter()
                .map(|&r| {
                    let k = head(&x.k_cache, r, s.kv_heads, kv, dim);
                    qv.iter()
                        .zip(k)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut acc = vec![0f64; dim];
            for (&r, w) in rows.iter().zip(&weights) {
                for (a, &vv) in acc.iter_mut().zip(head(&x.v_cache, r, s.kv_heads, kv, dim)) {
                    *a += w * f64::from(vv);
                }
            }
            out.extend(acc.iter().map(|a| (a / total) as f32));
        }
    }
    Array::new("out", vec![s.batch as u64, s.heads as u64, dim as u64], out)
}

/// Head `kv` of cache row `row` (a token slot), `dim` elements.
fn head(cache: &Array, row: usize, kv_heads: usize, kv: usize, dim: usize) -> &[f32] {
    &cache.data[(row * kv_heads + kv) * dim..][..dim]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: PagedShape = PagedShape {
        batch: 3,
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
        block_size: 4,
        max_context: 13,
    };

    #[test]
    fn block_table_covers_every_token_once_and_leaves_spares() {
        let x = inputs(SMALL, 7);
        assert_eq!(x.context_lens[2], 13);
        let mb = x.max_blocks();
        let mut seen = vec![false; x.num_blocks];
        for b in 0..SMALL.batch {
            let used = (x.context_lens[b] as usize).div_ceil(4);
            for j in 0..mb {
                let e = x.block_table[b * mb + j];
                if j < used {
                    assert!(!seen[e as usize], "block {e} handed out twice");
                    seen[e as usize] = true;
                } else {
                    assert_eq!(e, -1);
                }
            }
        }
        assert_eq!(seen.iter().filter(|s| !**s).count(), 3);
        assert!(x.k_cache.data.iter().any(|v| v.is_nan()));
    }

    #[test]
    fn one_token_attends_to_its_own_value() {
        // A single token: softmax weight 1, out = v.
        let shape = PagedShape {
            batch: 1,
            heads: 2,
            kv_heads: 1,
            head_dim: 3,
            block_size: 2,
            max_context: 1,
        };
        let x = inputs(shape, 1);
        let out = reference(&x);
        let blk = x.block_table[0] as usize;
        let v = &x.v_cache.data[blk * 2 * 3..][..3];
        assert_eq!(&out.data[..3], v);
        assert_eq!(&out.data[3..], v);
    }

    #[test]
    fn equal_keys_average_the_values() {
        let shape = PagedShape {
            batch: 1,
            heads: 1,
            kv_heads: 1,
            head_dim: 2,
            block_size: 2,
            max_context: 3,
        };
        let mut x = inputs(shape, 2);
        let mb = x.max_blocks();
        let mut want = [0f64; 2];
        for t in 0..3 {
            let row = x.block_table[t / 2] as usize * 2 + t % 2;
            x.k_cache.data[row * 2..row * 2 + 2].copy_from_slice(&[0.5, 0.5]);
            for (w, &v) in want.iter_mut().zip(&x.v_cache.data[row * 2..row * 2 + 2]) {
                *w += f64::from(v) / 3.0;
            }
        }
        assert_eq!(mb, 2);
        let out = reference(&x);
        for (&o, w) in out.data.iter().zip(want) {
            assert!((f64::from(o) - w).abs() < 1e-6, "{o} vs {w}");
        }
    }

    #[test]
    fn task_count_follows_the_graph() {
        let x = inputs(SMALL, 7);
        let blocks: usize = x
            .context_lens
            .iter()
            .map(|&n| (n as usize).div_ceil(4))
            .sum();
        assert_eq!(x.task_count(), 2 * (4 * blocks + 3));
    }
}
