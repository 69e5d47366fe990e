//! # simpler-examples — inputs and independent references for `examples/`
//!
//! For each example folder under `examples/` (see [`EXAMPLES`]) this crate provides
//! deterministic inputs ([`inputs`]) and the expected outputs computed by plain Rust loops
//! ([`reference()`]). The references never call the runtime and never share code with the C
//! kernels, so a run that matches them was computed correctly, not merely consistently.
//! Intermediate sums are carried in `f64` and rounded to `f32` once at the end.
//!
//! An [`Array`] becomes a `.npy` file through [`Array::to_npy`] and
//! [`simpler_toolchain::npy::write`]; results are compared with
//! [`simpler_toolchain::compare`] (NumPy's `allclose`). The `simpler-example-data` binary
//! writes an example's inputs and references as `.npy` files. This crate must not depend on
//! the runtime: the references stay independent of what they check.
//!
//! The shapes and argument names here are those of each example's `simpler.toml`; inputs are
//! named like the `in`/`inout` arguments and references like the `out`/`inout` arguments, in
//! manifest order. An example's scalar arguments have fixed values ([`scalars`]), which its
//! reference uses. The flagship workloads, whose shapes are parameters and whose inputs
//! include `i32` tensors, have modules of their own ([`paged_attention`], [`decoder_layer`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use simpler_toolchain::npy::NpyArray;

pub mod decoder_layer;
pub mod paged_attention;

/// The example names, one folder `examples/<name>/` each.
pub const EXAMPLES: [&str; 5] = ["vector_add", "formula", "gemm", "softmax", "axpy"];

/// Suggested relative tolerance when comparing an example's outputs with [`reference()`]
/// (the upstream scene-test default).
pub const RTOL: f32 = 1e-5;
/// Suggested absolute tolerance when comparing an example's outputs with [`reference()`]
/// (the upstream scene-test default).
pub const ATOL: f32 = 1e-5;

/// A scalar argument's name and value, given to `simpler run` as `--scalar NAME=VALUE`
/// (see [`Scalar::flag_value`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    /// The argument name, as in the example's manifest.
    pub name: String,
    /// The value (every example scalar is an `f32`).
    pub value: f32,
}

impl Scalar {
    /// `NAME=VALUE`, with the shortest decimal that reads back as exactly `value`.
    pub fn flag_value(&self) -> String {
        format!("{}={}", self.name, self.value)
    }
}

/// A named, row-major (C order) `f32` array.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// The argument name, as in the example's manifest.
    pub name: String,
    /// Extent of each dimension.
    pub shape: Vec<u64>,
    /// The elements in row-major order; `data.len()` is the product of `shape`.
    pub data: Vec<f32>,
}

impl Array {
    /// Builds an array.
    ///
    /// # Panics
    /// If `data.len()` is not the product of `shape` (a caller bug).
    pub fn new(name: impl Into<String>, shape: Vec<u64>, data: Vec<f32>) -> Array {
        let numel: u64 = shape.iter().product();
        assert_eq!(
            numel,
            data.len() as u64,
            "shape {shape:?} holds {numel} elements, data has {}",
            data.len()
        );
        Array {
            name: name.into(),
            shape,
            data,
        }
    }

    /// Number of elements (product of the shape).
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The array as an `f32` [`NpyArray`] of the same shape, for
    /// [`simpler_toolchain::npy::write`].
    pub fn to_npy(&self) -> NpyArray {
        NpyArray::from_f32(self.shape.clone(), &self.data)
    }
}

/// Length of the vectors of `vector_add`.
const VECTOR_ADD_LEN: u64 = 1 << 20;
/// Length of the vectors of `formula`.
const FORMULA_LEN: u64 = 16384;
/// `gemm` is `[M, K] · [K, N]`.
const GEMM_M: u64 = 512;
const GEMM_K: u64 = 512;
const GEMM_N: u64 = 512;
/// `softmax` works on `[rows, cols]`.
const SOFTMAX_ROWS: u64 = 1024;
const SOFTMAX_COLS: u64 = 256;
/// `axpy` works on `[rows, cols]`.
const AXPY_ROWS: u64 = 512;
const AXPY_COLS: u64 = 512;
/// `axpy`'s scalar `alpha`.
const AXPY_ALPHA: f32 = 2.5;

/// The seed of an example's input generator: fixed, different per example.
fn seed(example: &str) -> Option<u64> {
    let index = EXAMPLES.iter().position(|e| *e == example)?;
    Some(0x5349_4d50_4c45_5200 + index as u64) // "SIMPLER\0" + index
}

/// Fills one array with values drawn uniformly from `[-1, 1)`.
fn random(rng: &mut ChaCha8Rng, name: &str, shape: &[u64]) -> Array {
    let numel: u64 = shape.iter().product();
    let data = (0..numel).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    Array::new(name, shape.to_vec(), data)
}

/// The inputs of `example`, in manifest order, or `None` for an unknown example.
///
/// Deterministic: a `ChaCha8Rng` seeded per example draws every input in turn (first input
/// first, row-major), each value uniform in `[-1, 1)`.
pub fn inputs(example: &str) -> Option<Vec<Array>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed(example)?);
    let specs: &[(&str, &[u64])] = match example {
        "vector_add" => &[("a", &[VECTOR_ADD_LEN]), ("b", &[VECTOR_ADD_LEN])],
        "formula" => &[("a", &[FORMULA_LEN]), ("b", &[FORMULA_LEN])],
        "gemm" => &[("A", &[GEMM_M, GEMM_K]), ("B", &[GEMM_K, GEMM_N])],
        "softmax" => &[("x", &[SOFTMAX_ROWS, SOFTMAX_COLS])],
        "axpy" => &[
            ("x", &[AXPY_ROWS, AXPY_COLS]),
            ("y", &[AXPY_ROWS, AXPY_COLS]),
        ],
        _ => return None,
    };
    Some(
        specs
            .iter()
            .map(|(name, shape)| random(&mut rng, name, shape))
            .collect(),
    )
}

/// The scalar arguments of `example` with their fixed values, in manifest order (empty for
/// an example without scalars), or `None` for an unknown example.
pub fn scalars(example: &str) -> Option<Vec<Scalar>> {
    seed(example)?;
    let scalar = |name: &str, value: f32| Scalar {
        name: name.into(),
        value,
    };
    Some(match example {
        "axpy" => vec![scalar("alpha", AXPY_ALPHA)],
        _ => vec![],
    })
}

/// Finds the input called `name` with exactly `shape`.
fn input<'a>(inputs: &'a [Array], name: &str, shape: &[u64]) -> Option<&'a Array> {
    inputs.iter().find(|a| {
        a.name == name && a.shape == shape && a.data.len() as u64 == shape.iter().product::<u64>()
    })
}

/// The expected outputs of `example` for `inputs` (and the values of [`scalars`]), named and
/// ordered as the manifest's `out`/`inout` arguments.
///
/// `None` for an unknown example, or when `inputs` lacks an input of the expected name and
/// shape (inputs are found by name, so their order does not matter).
pub fn reference(example: &str, inputs: &[Array]) -> Option<Vec<Array>> {
    match example {
        "vector_add" => {
            let shape = [VECTOR_ADD_LEN];
            let a = input(inputs, "a", &shape)?;
            let b = input(inputs, "b", &shape)?;
            Some(vec![Array::new(
                "c",
                shape.to_vec(),
                vector_add_ref(&a.data, &b.data),
            )])
        }
        "formula" => {
            let shape = [FORMULA_LEN];
            let a = input(inputs, "a", &shape)?;
            let b = input(inputs, "b", &shape)?;
            Some(vec![Array::new(
                "f",
                shape.to_vec(),
                formula_ref(&a.data, &b.data),
            )])
        }
        "gemm" => {
            let a = input(inputs, "A", &[GEMM_M, GEMM_K])?;
            let b = input(inputs, "B", &[GEMM_K, GEMM_N])?;
            let (m, n, k) = (GEMM_M as usize, GEMM_N as usize, GEMM_K as usize);
            Some(vec![Array::new(
                "C",
                vec![GEMM_M, GEMM_N],
                gemm_ref(&a.data, &b.data, m, n, k),
            )])
        }
        "softmax" => {
            let shape = [SOFTMAX_ROWS, SOFTMAX_COLS];
            let x = input(inputs, "x", &shape)?;
            let (rows, cols) = (SOFTMAX_ROWS as usize, SOFTMAX_COLS as usize);
            Some(vec![Array::new(
                "y",
                shape.to_vec(),
                softmax_ref(&x.data, rows, cols),
            )])
        }
        "axpy" => {
            let shape = [AXPY_ROWS, AXPY_COLS];
            let x = input(inputs, "x", &shape)?;
            let y = input(inputs, "y", &shape)?;
            Some(vec![Array::new(
                "y",
                shape.to_vec(),
                axpy_ref(AXPY_ALPHA, &x.data, &y.data),
            )])
        }
        _ => None,
    }
}

/// `c[i] = a[i] + b[i]`.
///
/// # Panics
/// If the lengths differ.
pub fn vector_add_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "vector_add_ref: a and b differ in length");
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) + f64::from(y)) as f32)
        .collect()
}

/// `f[i] = (s + 1)(s + 2) + s` with `s = a[i] + b[i]`, evaluated in `f64`.
///
/// # Panics
/// If the lengths differ.
pub fn formula_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "formula_ref: a and b differ in length");
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let s = f64::from(x) + f64::from(y);
            ((s + 1.0) * (s + 2.0) + s) as f32
        })
        .collect()
}

/// `C = A · B` for row-major `A [m, k]` and `B [k, n]`; returns row-major `C [m, n]`.
/// Each dot product is summed in `f64`.
///
/// # Panics
/// If `a` or `b` has the wrong length.
pub fn gemm_ref(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    assert_eq!(a.len(), m * k, "gemm_ref: A is not [{m}, {k}]");
    assert_eq!(b.len(), k * n, "gemm_ref: B is not [{k}, {n}]");
    let mut c = vec![0f32; m * n];
    let mut row = vec![0f64; n];
    for i in 0..m {
        row.iter_mut().for_each(|v| *v = 0.0);
        for p in 0..k {
            let aip = f64::from(a[i * k + p]);
            for (acc, &bpj) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *acc += aip * f64::from(bpj);
            }
        }
        for (out, &acc) in c[i * n..(i + 1) * n].iter_mut().zip(&row) {
            *out = acc as f32;
        }
    }
    c
}

/// `alpha * x[i] + y[i]`, evaluated in `f64`.
///
/// # Panics
/// If the lengths differ.
pub fn axpy_ref(alpha: f32, x: &[f32], y: &[f32]) -> Vec<f32> {
    assert_eq!(x.len(), y.len(), "axpy_ref: x and y differ in length");
    let alpha = f64::from(alpha);
    x.iter()
        .zip(y)
        .map(|(&x, &y)| (alpha * f64::from(x) + f64::from(y)) as f32)
        .collect()
}

/// Row-wise softmax of row-major `x [rows, cols]`: `y[r][c] = exp(x[r][c] - max_r) / sum_r`,
/// evaluated in `f64`.
///
/// # Panics
/// If `x` has the wrong length.
pub fn softmax_ref(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    assert_eq!(
        x.len(),
        rows * cols,
        "softmax_ref: x is not [{rows}, {cols}]"
    );
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(cols.max(1)).take(rows) {
        let max = row
            .iter()
            .map(|&v| f64::from(v))
            .fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = row.iter().map(|&v| (f64::from(v) - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        y.extend(exps.iter().map(|e| (e / sum) as f32));
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_toolchain::compare::{allclose_f32, Tolerance};

    fn allclose(actual: &[f32], expected: &[f32], rtol: f64, atol: f64) -> bool {
        allclose_f32(actual, expected, Tolerance::new(rtol, atol))
            .unwrap()
            .passed()
    }

    #[test]
    fn arrays_write_as_f32_npy_files_numpy_reads() {
        let dir = tempfile::tempdir().unwrap();
        for (name, shape) in [
            ("one_d", vec![5u64]),
            ("two_d", vec![2, 3]),
            ("scalar", vec![]),
            ("empty", vec![0, 4]),
        ] {
            let n: u64 = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|i| i as f32 * -0.5 + 0.25).collect();
            let a = Array::new(name, shape.clone(), data.clone());
            let path = dir.path().join(format!("{name}.npy"));
            simpler_toolchain::npy::write(&path, &a.to_npy()).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
            assert_eq!(npy.shape(), &shape[..], "{name}");
            assert_eq!(npy.order(), npyz::Order::C);
            assert_eq!(npy.into_vec::<f32>().unwrap(), data, "{name}");
        }
    }

    #[test]
    fn every_example_has_inputs_and_a_reference() {
        for example in EXAMPLES {
            let ins = inputs(example).unwrap_or_else(|| panic!("no inputs for {example}"));
            assert!(!ins.is_empty());
            for a in &ins {
                assert_eq!(a.data.len() as u64, a.shape.iter().product::<u64>());
                assert!(
                    a.data.iter().all(|v| (-1.0..1.0).contains(v)),
                    "{example}/{}: value outside [-1, 1)",
                    a.name
                );
            }
            let outs = reference(example, &ins).unwrap_or_else(|| panic!("no ref for {example}"));
            assert_eq!(outs.len(), 1);
            assert!(outs[0].data.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn names_and_shapes_follow_the_manifests() {
        let names = |v: Vec<Array>| -> Vec<(String, Vec<u64>)> {
            v.into_iter().map(|a| (a.name, a.shape)).collect()
        };
        let io = |e: &str| {
            let i = inputs(e).unwrap();
            let o = reference(e, &i).unwrap();
            (names(i), names(o))
        };
        let s = |n: &str, shape: &[u64]| (n.to_string(), shape.to_vec());
        assert_eq!(
            io("vector_add"),
            (
                vec![s("a", &[1 << 20]), s("b", &[1 << 20])],
                vec![s("c", &[1 << 20])]
            )
        );
        assert_eq!(
            io("formula"),
            (
                vec![s("a", &[16384]), s("b", &[16384])],
                vec![s("f", &[16384])]
            )
        );
        assert_eq!(
            io("gemm"),
            (
                vec![s("A", &[512, 512]), s("B", &[512, 512])],
                vec![s("C", &[512, 512])]
            )
        );
        assert_eq!(
            io("softmax"),
            (vec![s("x", &[1024, 256])], vec![s("y", &[1024, 256])])
        );
        assert_eq!(
            io("axpy"),
            (
                vec![s("x", &[512, 512]), s("y", &[512, 512])],
                vec![s("y", &[512, 512])]
            )
        );
    }

    #[test]
    fn scalars_follow_the_manifests() {
        for example in EXAMPLES {
            let sc = scalars(example).unwrap();
            assert_eq!(sc.is_empty(), example != "axpy", "{example}: {sc:?}");
        }
        let alpha = &scalars("axpy").unwrap()[0];
        assert_eq!(alpha.flag_value(), "alpha=2.5");
        // The flag's text reads back as exactly the value.
        let text = alpha.flag_value();
        let parsed: f32 = text.split_once('=').unwrap().1.parse().unwrap();
        assert_eq!(parsed.to_bits(), alpha.value.to_bits());
        assert!(scalars("nope").is_none());
    }

    #[test]
    fn axpy_by_hand() {
        assert_eq!(
            axpy_ref(2.0, &[1.0, -0.5, 0.0], &[0.5, 1.0, -3.0]),
            vec![2.5, 0.0, -3.0]
        );
        // The reference is alpha * x + y of the generated inputs, y being updated.
        let ins = inputs("axpy").unwrap();
        let y = &reference("axpy", &ins).unwrap()[0];
        let i = 1234;
        let want = 2.5 * f64::from(ins[0].data[i]) + f64::from(ins[1].data[i]);
        assert_eq!(y.data[i], want as f32);
        assert_ne!(y.data, ins[1].data);
    }

    #[test]
    fn unknown_examples_are_none() {
        assert!(inputs("nope").is_none());
        assert!(reference("nope", &[]).is_none());
    }

    #[test]
    fn reference_needs_the_right_inputs() {
        let mut ins = inputs("gemm").unwrap();
        assert!(reference("gemm", &ins[..1]).is_none());
        ins[1].shape = vec![256, 1024];
        assert!(reference("gemm", &ins).is_none());
        // Found by name, not by position.
        let mut ins = inputs("formula").unwrap();
        let expected = reference("formula", &ins).unwrap();
        ins.reverse();
        assert_eq!(reference("formula", &ins).unwrap(), expected);
    }

    #[test]
    fn inputs_are_deterministic_and_differ_between_arrays_and_examples() {
        for example in EXAMPLES {
            assert_eq!(inputs(example), inputs(example));
        }
        let va = inputs("vector_add").unwrap();
        assert_ne!(va[0].data, va[1].data);
        let fo = inputs("formula").unwrap();
        assert_ne!(va[0].data[..16], fo[0].data[..16]);
        // Pin the stream: a change of generator or seed would silently change every golden.
        let first = va[0].data[0];
        assert!((-1.0..1.0).contains(&first));
        assert_eq!(
            inputs("vector_add").unwrap()[0].data[0].to_bits(),
            first.to_bits()
        );
    }

    #[test]
    fn vector_add_by_hand() {
        assert_eq!(
            vector_add_ref(&[1.0, -2.0, 0.5], &[2.0, 2.0, 0.25]),
            vec![3.0, 0.0, 0.75]
        );
    }

    #[test]
    fn formula_by_hand() {
        // s = 0 -> 1*2 + 0 = 2; s = 1 -> 2*3 + 1 = 7; s = -1 -> 0*1 - 1 = -1; s = -2 -> -1*0 - 2 = -2
        assert_eq!(
            formula_ref(&[0.0, 0.5, -0.5, -1.0], &[0.0, 0.5, -0.5, -1.0]),
            vec![2.0, 7.0, -1.0, -2.0]
        );
    }

    #[test]
    fn gemm_by_hand() {
        // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50]
        assert_eq!(
            gemm_ref(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 2, 2, 2),
            vec![19.0, 22.0, 43.0, 50.0]
        );
        // Non-square: [1 2 3] (1x3) · [1; 0; -1] (3x1) = [-2]
        assert_eq!(
            gemm_ref(&[1.0, 2.0, 3.0], &[1.0, 0.0, -1.0], 1, 1, 3),
            vec![-2.0]
        );
        // [2x1] · [1x2] outer product
        assert_eq!(
            gemm_ref(&[1.0, 2.0], &[3.0, 4.0], 2, 2, 1),
            vec![3.0, 4.0, 6.0, 8.0]
        );
    }

    #[test]
    fn softmax_by_hand() {
        // Row [0, 0] -> [1/2, 1/2]; row [ln 3, 0] -> [3/4, 1/4].
        let ln3 = 3f32.ln();
        let y = softmax_ref(&[0.0, 0.0, ln3, 0.0], 2, 2);
        assert!(allclose(&y, &[0.5, 0.5, 0.75, 0.25], 1e-6, 1e-7), "{y:?}");
        // Shift invariance and large values: no overflow thanks to the max subtraction.
        let y = softmax_ref(&[1000.0, 1000.0], 1, 2);
        assert_eq!(y, vec![0.5, 0.5]);
        // Rows sum to 1 on the real input.
        let x = &inputs("softmax").unwrap()[0];
        let y = &reference("softmax", std::slice::from_ref(x)).unwrap()[0];
        for row in y.data.chunks(256) {
            let s: f64 = row.iter().map(|&v| f64::from(v)).sum();
            assert!((s - 1.0).abs() < 1e-5, "row sums to {s}");
        }
    }

    #[test]
    fn gemm_reference_matches_a_naive_triple_loop() {
        let ins = inputs("gemm").unwrap();
        let c = &reference("gemm", &ins).unwrap()[0];
        let (a, b) = (&ins[0].data, &ins[1].data);
        for &(i, j) in &[(0usize, 0usize), (17, 300), (511, 511), (256, 3)] {
            let dot: f64 = (0..512)
                .map(|p| f64::from(a[i * 512 + p]) * f64::from(b[p * 512 + j]))
                .sum();
            assert!((f64::from(c.data[i * 512 + j]) - dot).abs() < 1e-5);
        }
    }

    #[test]
    #[should_panic(expected = "holds 4 elements")]
    fn array_new_checks_the_length() {
        Array::new("x", vec![2, 2], vec![0.0; 3]);
    }
}
