//! Inputs and the independent reference of `examples/decoder_layer` (one pre-norm decoder
//! layer at decode time).
//!
//! Shapes as in the example's README: `x [B, E]`, `w_norm1`/`w_norm2 [E]`, `w_qkv [E, (H +
//! 2 KVH) D]` (q, k, v columns), `w_o [H D, E]`, `w_gate_up [E, 2F]` (gate, up columns),
//! `w_down [F, E]`, `rope [P, D]` (row p: `cos(p θ_i)` for i < D/2, then `sin(p θ_i)`,
//! `θ_i = 10000^(-2i/D)`), the caches, block table and context lengths of
//! [`crate::paged_attention`] (a length counts the new token, at position `len - 1`), and
//! `out [B, E]`. The reference is the layer written out in `f64` loops; it shares nothing
//! with the kernels and must not depend on the runtime.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::paged_attention::{self, PagedInputs, PagedShape};
use crate::Array;

/// RMSNorm's epsilon, the example's `eps` scalar.
pub const EPS: f32 = 1e-6;

/// The example's default model (`dl_data.MODEL` of `examples/decoder_layer`): embed 256,
/// 8 query heads, 2 KV heads, head_dim 32, FFN 512.
pub const DEFAULT_MODEL: Model = Model {
    embed: 256,
    heads: 8,
    kv_heads: 2,
    head_dim: 32,
    ffn: 512,
};

/// The example's default KV-cache block, tokens per block (`dl_data.make_inputs`).
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// The model's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    /// Hidden size E.
    pub embed: usize,
    /// Query heads H (a multiple of `kv_heads`).
    pub heads: usize,
    /// Key/value heads KVH.
    pub kv_heads: usize,
    /// Elements per head D (even).
    pub head_dim: usize,
    /// MLP width F.
    pub ffn: usize,
}

/// One decode step's arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerInputs {
    /// The sizes.
    pub model: Model,
    /// `x [B, E]` and the weights and rope table, named as the manifest's arguments, in
    /// signature order: x, w_norm1, w_qkv, w_o, w_norm2, w_gate_up, w_down, rope.
    pub dense: Vec<Array>,
    /// Caches (the new tokens' slots NaN, as every slot no sequence owns), block table and
    /// lengths.
    pub paged: PagedInputs,
}

/// Deterministic inputs: lengths, block table and caches from
/// [`paged_attention::inputs`] (lengths uniform in `1..=context`, the last `context`), the
/// new tokens' cache slots set to NaN, weights drawn uniformly and scaled by
/// `1/sqrt(fan_in)` (norm gains around 1), `x` uniform in `[-1, 1)`.
///
/// # Panics
/// On sizes [`paged_attention::inputs`] refuses, or an odd `head_dim`.
pub fn inputs(
    model: Model,
    batch: usize,
    context: usize,
    block_size: usize,
    seed: u64,
) -> LayerInputs {
    assert_eq!(model.head_dim % 2, 0, "head_dim must be even");
    let m = model;
    let mut paged = paged_attention::inputs(
        PagedShape {
            batch,
            heads: m.heads,
            kv_heads: m.kv_heads,
            head_dim: m.head_dim,
            block_size,
            max_context: context,
        },
        seed,
    );
    let token = m.kv_heads * m.head_dim;
    for b in 0..batch {
        let row = slot(&paged, b, paged.context_lens[b] as usize - 1);
        paged.k_cache.data[row * token..(row + 1) * token].fill(f32::NAN);
        paged.v_cache.data[row * token..(row + 1) * token].fill(f32::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xdec0_de00);
    let mut draw = |name: &str, shape: &[usize], scale: f32, offset: f32| {
        let n: usize = shape.iter().product();
        let data = (0..n)
            .map(|_| offset + scale * rng.gen_range(-1.0f32..1.0))
            .collect();
        Array::new(name, shape.iter().map(|&d| d as u64).collect(), data)
    };
    let (e, d, f) = (m.embed, m.head_dim, m.ffn);
    let qkv = (m.heads + 2 * m.kv_heads) * d;
    let fan = |n: usize| (3.0 / n as f32).sqrt(); // uniform [-a, a) with variance 1/n
    let dense = vec![
        draw("x", &[batch, e], 1.0, 0.0),
        draw("w_norm1", &[e], 0.1, 1.0),
        draw("w_qkv", &[e, qkv], fan(e), 0.0),
        draw("w_o", &[m.heads * d, e], fan(m.heads * d), 0.0),
        draw("w_norm2", &[e], 0.1, 1.0),
        draw("w_gate_up", &[e, 2 * f], fan(e), 0.0),
        draw("w_down", &[f, e], fan(f), 0.0),
        rope_table(context, d),
    ];
    LayerInputs {
        model,
        dense,
        paged,
    }
}

/// The cache row (block * block_size + offset) of token `t` of sequence `b`.
fn slot(p: &PagedInputs, b: usize, t: usize) -> usize {
    let bs = p.shape.block_size;
    p.block_table[b * p.max_blocks() + t / bs] as usize * bs + t % bs
}

/// `θ_i = 10000^(-2i/dim)`.
fn theta(i: usize, dim: usize) -> f64 {
    10000f64.powf(-2.0 * i as f64 / dim as f64)
}

/// `rope [positions, dim]`: row p holds `cos(p θ_i)` for i < dim/2, then `sin(p θ_i)`.
pub fn rope_table(positions: usize, dim: usize) -> Array {
    let half = dim / 2;
    let mut data = Vec::with_capacity(positions * dim);
    for p in 0..positions {
        data.extend((0..half).map(|i| (p as f64 * theta(i, dim)).cos() as f32));
        data.extend((0..half).map(|i| (p as f64 * theta(i, dim)).sin() as f32));
    }
    Array::new("rope", vec![positions as u64, dim as u64], data)
}

fn rmsnorm(x: &[f64], w: &[f32]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + f64::from(EPS)).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, &g)| v * inv * f64::from(g))
        .collect()
}

/// `x [k] · w [k, n]`.
fn vecmat(x: &[f64], w: &Array) -> Vec<f64> {
    let n = w.shape[1] as usize;
    let mut out = vec![0f64; n];
    for (i, &xi) in x.iter().enumerate() {
        for (o, &wv) in out.iter_mut().zip(&w.data[i * n..(i + 1) * n]) {
            *o += xi * f64::from(wv);
        }
    }
    out
}

/// Rotation by halves of one head at position `pos`.
fn rope(x: &[f64], pos: usize) -> Vec<f64> {
    let (dim, half) = (x.len(), x.len() / 2);
    let mut out = vec![0f64; dim];
    for i in 0..half {
        let (s, c) = (pos as f64 * theta(i, dim)).sin_cos();
        out[i] = x[i] * c - x[half + i] * s;
        out[half + i] = x[half + i] * c + x[i] * s;
    }
    out
}

/// `(out [B, E], k_cache, v_cache)`: the layer's output and the caches with each new token's
/// rotated k and its v written at its slot.
pub fn reference(x: &LayerInputs) -> (Array, Array, Array) {
    let m = &x.model;
    let p = &x.paged;
    let [xs, w_norm1, w_qkv, w_o, w_norm2, w_gu, w_down, _rope] = &x.dense[..] else {
        panic!("LayerInputs::dense holds 8 arrays");
    };
    let (e, d, batch) = (m.embed, m.head_dim, p.shape.batch);
    let group = m.heads / m.kv_heads;
    let token = m.kv_heads * d;
    let (mut kc, mut vc) = (p.k_cache.clone(), p.v_cache.clone());
    let mut out = Vec::with_capacity(batch * e);
    for b in 0..batch {
        let xb: Vec<f64> = xs.data[b * e..(b + 1) * e]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let qkv = vecmat(&rmsnorm(&xb, &w_norm1.data), w_qkv);
        let len = p.context_lens[b] as usize;
        let pos = len - 1;
        let head = |h: usize| &qkv[h * d..(h + 1) * d];
        let k_new: Vec<Vec<f64>> = (0..m.kv_heads)
            .map(|h| rope(head(m.heads + h), pos))
            .collect();
        let v_new: Vec<&[f64]> = (0..m.kv_heads)
            .map(|h| head(m.heads + m.kv_heads + h))
            .collect();
        let new_row = slot(p, b, pos);
        for h in 0..m.kv_heads {
            for i in 0..d {
                kc.data[new_row * token + h * d + i] = k_new[h][i] as f32;
                vc.data[new_row * token + h * d + i] = v_new[h][i] as f32;
            }
        }
        // History from the input caches in f64, then the new token in f64.
        let key = |t: usize, h: usize, i: usize| {
            if t == pos {
                k_new[h][i]
            } else {
                f64::from(p.k_cache.data[slot(p, b, t) * token + h * d + i])
            }
        };
        let val = |t: usize, h: usize, i: usize| {
            if t == pos {
                v_new[h][i]
            } else {
                f64::from(p.v_cache.data[slot(p, b, t) * token + h * d + i])
            }
        };
        let mut attn = vec![0f64; m.heads * d];
        for qh in 0..m.heads {
            let (kv, q) = (qh / group, rope(head(qh), pos));
            let scores: Vec<f64> = (0..len)
                .map(|t| (0..d).map(|i| q[i] * key(t, kv, i)).sum::<f64>() / (d as f64).sqrt())
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = w.iter().sum();
            for i in 0..d {
                attn[qh * d + i] = (0..len).map(|t| w[t] * val(t, kv, i)).sum::<f64>() / total;
            }
        }
        let hidden: Vec<f64> = xb
            .iter()
            .zip(vecmat(&attn, w_o))
            .map(|(a, o)| a + o)
            .collect();
        let gu = vecmat(&rmsnorm(&hidden, &w_norm2.data), w_gu);
        let act: Vec<f64> = (0..m.ffn)
            .map(|i| {
                let g = gu[i];
                g / (1.0 + (-g).exp()) * gu[m.ffn + i]
            })
            .collect();
        out.extend(
            hidden
                .iter()
                .zip(vecmat(&act, w_down))
                .map(|(h, v)| (h + v) as f32),
        );
    }
    (Array::new("out", vec![batch as u64, e as u64], out), kc, vc)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Model = Model {
        embed: 8,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        ffn: 6,
    };

    #[test]
    fn rope_table_rows_are_cos_then_sin() {
        let r = rope_table(3, 4);
        assert_eq!(&r.data[..4], &[1.0, 1.0, 0.0, 0.0]);
        assert_eq!(r.data[4], 1f32.cos());
        assert_eq!(r.data[6], 1f32.sin());
        assert!((f64::from(r.data[5]) - (0.01f64).cos()).abs() < 1e-7);
    }

    #[test]
    fn rope_keeps_norms_and_position_zero_is_identity() {
        let x = [0.3, -1.2, 0.5, 2.0];
        assert_eq!(rope(&x, 0), x.to_vec());
        let r = rope(&x, 17);
        let n = |v: &[f64]| v.iter().map(|a| a * a).sum::<f64>();
        assert!((n(&r) - n(&x)).abs() < 1e-12);
    }

    #[test]
    fn new_slots_are_nan_before_and_written_after() {
        let x = inputs(TINY, 3, 9, 4, 1);
        let (out, kc, _) = reference(&x);
        assert!(out.data.iter().all(|v| v.is_finite()));
        for b in 0..3 {
            let row = slot(&x.paged, b, x.paged.context_lens[b] as usize - 1);
            assert!(x.paged.k_cache.data[row * 4].is_nan());
            assert!(kc.data[row * 4].is_finite());
        }
    }

    #[test]
    fn a_first_token_attends_to_its_own_value() {
        // context 1: attention returns v itself, so out = h + mlp(h) with h = x + v·W_o.
        let x = inputs(TINY, 1, 1, 2, 2);
        let (out, _, vc) = reference(&x);
        let row = slot(&x.paged, 0, 0);
        let v: Vec<f64> = vc.data[row * 4..row * 4 + 4]
            .iter()
            .map(|&a| f64::from(a))
            .collect();
        // Both query heads read the one KV head: attn = [v, v].
        let attn: Vec<f64> = v.iter().chain(&v).copied().collect();
        let xb: Vec<f64> = x.dense[0].data.iter().map(|&a| f64::from(a)).collect();
        let h: Vec<f64> = xb
            .iter()
            .zip(vecmat(&attn, &x.dense[3]))
            .map(|(a, b)| a + b)
            .collect();
        let gu = vecmat(&rmsnorm(&h, &x.dense[4].data), &x.dense[5]);
        let act: Vec<f64> = (0..6)
            .map(|i| gu[i] / (1.0 + (-gu[i]).exp()) * gu[6 + i])
            .collect();
        let want: Vec<f64> = h
            .iter()
            .zip(vecmat(&act, &x.dense[6]))
            .map(|(a, b)| a + b)
            .collect();
        for (o, w) in out.data.iter().zip(want) {
            assert!((f64::from(*o) - w).abs() < 1e-5, "{o} vs {w}");
        }
    }
}
