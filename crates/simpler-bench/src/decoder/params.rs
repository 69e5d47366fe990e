//! What the decoder-layer bench runs ([`DecoderParams`], its defaults and its checks).

use simpler_examples::decoder_layer::{Model, DEFAULT_BLOCK_SIZE, DEFAULT_MODEL};

use super::{DecoderBenchError, Lengths};

/// Default batch sizes: the two rows the targets name.
pub const DEFAULT_BATCHES: [usize; 2] = [8, 32];
/// Default context length, tokens.
pub const DEFAULT_CONTEXTS: [usize; 1] = [4096];
/// Default timed steps per row and callable (after one warm-up step each).
pub const DEFAULT_STEPS: u32 = 3;

/// What the bench runs.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderParams {
    /// Batch sizes (sequences per step), each at least 1; rows are batch × context.
    pub batches: Vec<usize>,
    /// Context lengths (the longest sequence, tokens), each at least 1.
    pub contexts: Vec<usize>,
    /// Timed steps per row and callable, at least 1 (after one warm-up step each).
    pub steps: u32,
    /// The model's sizes.
    pub model: Model,
    /// Tokens per KV-cache block, at least 1.
    pub block_size: usize,
    /// Seed of the inputs.
    pub seed: u64,
    /// How long the sequences are.
    pub lengths: Lengths,
}

impl Default for DecoderParams {
    /// Batch 8 and 32 at context 4096, every sequence full length, 3 steps, the example's
    /// default model and block, seed 0.
    fn default() -> Self {
        DecoderParams {
            batches: DEFAULT_BATCHES.to_vec(),
            contexts: DEFAULT_CONTEXTS.to_vec(),
            steps: DEFAULT_STEPS,
            model: DEFAULT_MODEL,
            block_size: DEFAULT_BLOCK_SIZE,
            seed: 0,
            lengths: Lengths::Full,
        }
    }
}

impl DecoderParams {
    /// Checks every field (so the inputs' generator, which panics on bad sizes, never sees
    /// one).
    ///
    /// # Errors
    /// [`DecoderBenchError::InvalidParam`] naming the first bad field.
    pub fn check(&self) -> Result<(), DecoderBenchError> {
        let bad = |name, reason: &str| {
            Err(DecoderBenchError::InvalidParam {
                name,
                reason: reason.to_string(),
            })
        };
        let m = &self.model;
        match () {
            _ if self.batches.is_empty() => bad("batches", "is empty"),
            _ if self.batches.contains(&0) => bad("batches", "holds 0 (each must be at least 1)"),
            _ if self.contexts.is_empty() => bad("contexts", "is empty"),
            _ if self.contexts.contains(&0) => bad("contexts", "holds 0 (each must be at least 1)"),
            _ if self.steps == 0 => bad("steps", "must be at least 1"),
            _ if self.block_size == 0 => bad("block_size", "must be at least 1"),
            _ if m.embed == 0 || m.ffn == 0 => bad("model", "has a zero embed or ffn"),
            _ if m.head_dim == 0 || !m.head_dim.is_multiple_of(2) => {
                bad("model", "needs an even head_dim of at least 2")
            }
            _ if m.kv_heads == 0 || m.heads == 0 || !m.heads.is_multiple_of(m.kv_heads) => {
                bad("model", "needs heads a non-zero multiple of kv_heads")
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_refuse_each_bad_field_by_name() {
        let ok = DecoderParams::default();
        assert!(ok.check().is_ok());
        let name = |p: DecoderParams| match p.check() {
            Err(DecoderBenchError::InvalidParam { name, .. }) => name,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            name(DecoderParams {
                batches: vec![],
                ..ok.clone()
            }),
            "batches"
        );
        assert_eq!(
            name(DecoderParams {
                contexts: vec![4, 0],
                ..ok.clone()
            }),
            "contexts"
        );
        assert_eq!(
            name(DecoderParams {
                steps: 0,
                ..ok.clone()
            }),
            "steps"
        );
        assert_eq!(
            name(DecoderParams {
                block_size: 0,
                ..ok.clone()
            }),
            "block_size"
        );
        let odd = Model {
            head_dim: 3,
            ..DEFAULT_MODEL
        };
        assert_eq!(
            name(DecoderParams {
                model: odd,
                ..ok.clone()
            }),
            "model"
        );
    }
}
