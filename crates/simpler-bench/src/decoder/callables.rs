//! What the decoder-layer bench runs: the layer's callable built from its example folder,
//! the same callable with every kernel replaced by the folder's `bench/empty_kernel.c`
//! (same func ids and core types, same orchestration), and one decode step's arguments from
//! the generators of `simpler-examples` ([`Lengths`]: every sequence `context` long, as
//! `bench.py` runs it, or the ragged lengths of [`simpler_examples::decoder_layer::inputs`]).

use std::path::{Path, PathBuf};

use simpler_abi::DataType;
use simpler_examples::decoder_layer::{self, Model};
use simpler_examples::paged_attention::{self, PagedShape};
use simpler_examples::Array;
use simpler_host::{CallableSpec, HostArg};
use simpler_toolchain::build::{build_example, build_manifest, Compiler};

use super::DecoderBenchError;
use crate::replay::BenchArg;

/// Position of `context_lens` in the signature.
const CONTEXT_LENS: usize = 11;

/// The empty kernel's source, relative to the example folder.
pub const EMPTY_KERNEL: &str = "bench/empty_kernel.c";

/// The layer's callable and its empty-kernel twin.
#[derive(Clone, Debug)]
pub struct LayerCallables {
    /// The layer as its manifest builds it.
    pub real: CallableSpec,
    /// The same orchestration, every kernel [`EMPTY_KERNEL`] (named `<name>_empty`).
    pub empty: CallableSpec,
}

/// Builds both callables from the example folder `dir` with `compiler` (through its kernel
/// cache).
///
/// # Errors
/// [`DecoderBenchError::MissingExample`] when `dir` has no `simpler.toml`;
/// [`DecoderBenchError::MissingEmptyKernel`] when it has no [`EMPTY_KERNEL`];
/// [`DecoderBenchError::Build`] for the manifest's or a compile's error.
pub fn layer_callables(
    dir: &Path,
    compiler: &Compiler,
) -> Result<LayerCallables, DecoderBenchError> {
    let manifest = simpler_toolchain::manifest::manifest_path(dir);
    if !manifest.is_file() {
        return Err(DecoderBenchError::MissingExample { path: manifest });
    }
    let empty_src = dir.join(EMPTY_KERNEL);
    if !empty_src.is_file() {
        return Err(DecoderBenchError::MissingEmptyKernel { path: empty_src });
    }
    let build_error = |source| DecoderBenchError::Build {
        dir: dir.to_path_buf(),
        source: Box::new(source),
    };
    let real = build_example(dir, compiler).map_err(build_error)?;
    let mut loaded = real.manifest.clone();
    // An absolute path: `LoadedManifest::source_path` joins it to the folder unchanged.
    let empty_src: PathBuf = std::path::absolute(&empty_src).unwrap_or(empty_src);
    for k in &mut loaded.manifest.kernels {
        k.source = empty_src.clone();
        k.entry = simpler_abi::DEFAULT_KERNEL_ENTRY.to_string();
    }
    loaded.manifest.name = format!("{}_empty", loaded.manifest.name);
    let empty = build_manifest(loaded, compiler).map_err(build_error)?;
    Ok(LayerCallables {
        real: real.bundle.into_spec(),
        empty: empty.bundle.into_spec(),
    })
}

/// One decode step's arguments in signature order (13 tensors, then `eps`), reused by every
/// step of a row: the caches are `inout`, and a step writes the same new-token slots with the
/// same values each time (its attention reads them after writing them).
#[derive(Clone, Debug)]
pub struct StepArgs {
    args: Vec<BenchArg>,
}

fn f32_bytes(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i32_bytes(data: &[i32]) -> Vec<u8> {
    data.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// How long the sequences of a step are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lengths {
    /// Every sequence `context` tokens long (the new one included), as
    /// `examples/decoder_layer/bench.py` runs it (the default).
    #[default]
    Full,
    /// The lengths of [`decoder_layer::inputs`]: uniform in `1..=context`, the last `context`.
    Ragged,
}

/// The cache, block table and lengths of a step in which every sequence is `context` tokens
/// long: per sequence, the one-sequence inputs of [`paged_attention::inputs`] (whose last,
/// here only, sequence has the full length; seed `seed + 1 + b`), their caches concatenated
/// and their block tables shifted to match, the new token's slot NaN as
/// [`decoder_layer::inputs`] leaves it.
fn full_paged(
    model: Model,
    batch: usize,
    context: usize,
    block_size: usize,
    seed: u64,
) -> (Array, Array, Vec<i32>, Vec<i32>) {
    let token = model.kv_heads * model.head_dim;
    let max_blocks = context.div_ceil(block_size);
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let mut table = Vec::with_capacity(batch * max_blocks);
    let mut blocks = 0usize;
    for b in 0..batch {
        let one = paged_attention::inputs(
            PagedShape {
                batch: 1,
                heads: model.heads,
                kv_heads: model.kv_heads,
                head_dim: model.head_dim,
                block_size,
                max_context: context,
            },
            seed.wrapping_add(1 + b as u64),
        );
        let (mut kc, mut vc) = (one.k_cache.data, one.v_cache.data);
        let last = context - 1;
        let row = one.block_table[last / block_size] as usize * block_size + last % block_size;
        kc[row * token..(row + 1) * token].fill(f32::NAN);
        vc[row * token..(row + 1) * token].fill(f32::NAN);
        k.extend_from_slice(&kc);
        v.extend_from_slice(&vc);
        table.extend(one.block_table.iter().map(
            |&blk| {
                if blk < 0 {
                    blk
                } else {
                    blk + blocks as i32
                }
            },
        ));
        blocks += one.num_blocks;
    }
    let shape = vec![
        blocks as u64,
        block_size as u64,
        model.kv_heads as u64,
        model.head_dim as u64,
    ];
    (
        Array::new("k_cache", shape.clone(), k),
        Array::new("v_cache", shape, v),
        table,
        vec![context as i32; batch],
    )
}

impl StepArgs {
    /// The arguments of a step of `model` at `batch` sequences of `lengths` up to `context`
    /// tokens, cache blocks of `block_size`, inputs from `seed` ([`decoder_layer::inputs`]
    /// for the dense arguments, and for the caches under [`Lengths::Ragged`]), a zeroed `out`
    /// and `eps` = [`decoder_layer::EPS`].
    ///
    /// The caller checks the sizes ([`super::DecoderParams::check`]): the generators panic on
    /// a zero size, an odd head_dim or heads not a multiple of kv_heads.
    pub fn new(
        model: Model,
        batch: usize,
        context: usize,
        block_size: usize,
        seed: u64,
        lengths: Lengths,
    ) -> StepArgs {
        let x = decoder_layer::inputs(model, batch, context, block_size, seed);
        let tensor = |bytes, shape: &[u64], dtype| BenchArg::Tensor {
            bytes,
            shape: shape.to_vec(),
            dtype,
        };
        let mut args: Vec<BenchArg> = x
            .dense
            .iter()
            .map(|a| tensor(f32_bytes(&a.data), &a.shape, DataType::Float32))
            .collect();
        let (k_cache, v_cache, table, lens) = match lengths {
            Lengths::Ragged => {
                let p = x.paged;
                (p.k_cache, p.v_cache, p.block_table, p.context_lens)
            }
            Lengths::Full => full_paged(model, batch, context, block_size, seed),
        };
        for cache in [&k_cache, &v_cache] {
            args.push(tensor(
                f32_bytes(&cache.data),
                &cache.shape,
                DataType::Float32,
            ));
        }
        args.push(tensor(
            i32_bytes(&table),
            &[batch as u64, context.div_ceil(block_size) as u64],
            DataType::Int32,
        ));
        args.push(tensor(i32_bytes(&lens), &[batch as u64], DataType::Int32));
        args.push(tensor(
            vec![0; batch * model.embed * 4],
            &[batch as u64, model.embed as u64],
            DataType::Float32,
        ));
        args.push(BenchArg::Scalar(u64::from(decoder_layer::EPS.to_bits())));
        StepArgs { args }
    }

    /// The sequences' lengths (the `context_lens` argument).
    pub fn context_lens(&self) -> Vec<i32> {
        match &self.args[CONTEXT_LENS] {
            BenchArg::Tensor { bytes, .. } => bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            BenchArg::Scalar(_) => Vec::new(),
        }
    }

    /// The run arguments, borrowing the buffers.
    pub fn host_args(&mut self) -> Vec<HostArg<'_>> {
        crate::replay::host_args(&mut self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_examples::decoder_layer::DEFAULT_MODEL;

    fn tensor(a: &StepArgs, i: usize) -> (&[u8], &[u64]) {
        match &a.args[i] {
            BenchArg::Tensor { bytes, shape, .. } => (bytes, shape),
            BenchArg::Scalar(_) => panic!("argument {i} is a scalar"),
        }
    }

    #[test]
    fn full_lengths_give_every_sequence_its_own_blocks_and_a_nan_new_slot() {
        let m = DEFAULT_MODEL;
        let (batch, context, bs) = (3, 37, 16);
        let a = StepArgs::new(m, batch, context, bs, 0, Lengths::Full);
        assert_eq!(a.args.len(), 14);
        assert_eq!(a.context_lens(), vec![37; 3]);
        let (k, k_shape) = tensor(&a, 8);
        let (table, table_shape) = tensor(&a, 10);
        assert_eq!(table_shape, [3, 3]);
        let table: Vec<i32> = table
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        // 3 blocks per sequence, each a block of the cache, none shared.
        let mut used = table.clone();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), 9, "{table:?}");
        assert!(used.iter().all(|&b| b >= 0 && (b as u64) < k_shape[0]));
        let token = m.kv_heads * m.head_dim;
        let at = |row: usize| {
            f32::from_le_bytes(k[row * token * 4..row * token * 4 + 4].try_into().unwrap())
        };
        for b in 0..batch {
            let last = table[b * 3 + 2] as usize * bs + (context - 1) % bs;
            assert!(at(last).is_nan(), "sequence {b}'s new slot");
            let first = table[b * 3] as usize * bs;
            assert!(at(first).is_finite(), "sequence {b}'s first token");
        }
        assert_eq!(tensor(&a, 12).1, [3, m.embed as u64]);
    }

    #[test]
    fn ragged_lengths_are_the_examples_own() {
        let x = decoder_layer::inputs(DEFAULT_MODEL, 4, 50, 16, 7);
        let a = StepArgs::new(DEFAULT_MODEL, 4, 50, 16, 7, Lengths::Ragged);
        assert_eq!(a.context_lens(), x.paged.context_lens);
        assert_eq!(tensor(&a, 8).1, x.paged.k_cache.shape);
    }
}
