//! End-to-end tests of the flagship workloads through the `simpler` binary:
//! `examples/paged_attention` (and `examples/decoder_layer`) built from their folders, run on
//! the sim platform on small sizes and checked against the independent references of
//! `simpler_examples`; and the orchestration's refusal of a bad block table.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::{path_str, simpler, text, write_npy_raw};
use simpler_examples::paged_attention::{self, PagedInputs, PagedShape};
use simpler_examples::Array;

/// `examples/<name>` in the repository.
fn example_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .canonicalize()
        .unwrap_or_else(|e| panic!("examples/{name}: {e}"))
}

/// Writes an `i32` `.npy` file.
fn write_i32(path: &Path, shape: &[u64], values: &[i32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy_raw(path, "<i4", shape, &bytes);
}

/// Reads an f32 `.npy` file with `npyz`: (shape, data).
fn read_f32(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(f.dtype().descr(), "'<f4'");
    let shape = f.shape().to_vec();
    (shape, f.into_vec::<f32>().unwrap())
}

/// Writes the f32 arrays and the i32 tables of `x` into `dir`; returns the `--input` flags.
fn write_paged(dir: &Path, x: &PagedInputs) -> Vec<String> {
    let mut flags = Vec::new();
    for a in [&x.q, &x.k_cache, &x.v_cache] {
        let p = dir.join(format!("{}.npy", a.name));
        common::write_array(&p, a);
        flags.extend(["--input".into(), format!("{}={}", a.name, p.display())]);
    }
    let s = &x.shape;
    let bt = dir.join("block_table.npy");
    write_i32(
        &bt,
        &[s.batch as u64, x.max_blocks() as u64],
        &x.block_table,
    );
    let cl = dir.join("context_lens.npy");
    write_i32(&cl, &[s.batch as u64], &x.context_lens);
    flags.extend([
        "--input".into(),
        format!("block_table={}", bt.display()),
        "--input".into(),
        format!("context_lens={}", cl.display()),
    ]);
    flags
}

/// `simpler run examples/<example> <flags>` in `dir`: (exit code, stdout, stderr).
fn run(dir: &Path, example: &str, flags: &[String]) -> (Option<i32>, String, String) {
    let ex = example_dir(example);
    let mut args = vec!["run", path_str(&ex)];
    args.extend(flags.iter().map(String::as_str));
    let o = simpler(&args, dir);
    let (out, err) = text(&o);
    (o.status.code(), out, err)
}

/// Largest |got - want| and whether every element is within `atol + rtol * |want|`.
fn within(got: &[f32], want: &[f32], rtol: f64, atol: f64) -> (f64, bool) {
    assert_eq!(got.len(), want.len());
    let mut worst = 0f64;
    let mut ok = true;
    for (&g, &w) in got.iter().zip(want) {
        let d = (f64::from(g) - f64::from(w)).abs();
        ok &= d <= atol + rtol * f64::from(w).abs(); // NaN fails
        worst = worst.max(d);
    }
    (worst, ok)
}

/// The tolerance of examples/paged_attention/README.md ("Checking").
const RTOL: f64 = 1e-4;
const ATOL: f64 = 2e-5;

/// Runs paged attention for `shape` and checks `out` with `simpler run --check` and again
/// here, on the file read back with `npyz`.
fn paged_end_to_end(shape: PagedShape, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let x = paged_attention::inputs(shape, seed);
    let want: Array = paged_attention::reference(&x);
    let mut flags = write_paged(dir.path(), &x);
    let ref_path = dir.path().join("out.ref.npy");
    common::write_array(&ref_path, &want);
    let out_path = dir.path().join("out.npy");
    flags.extend([
        "--output".into(),
        format!("out={}", out_path.display()),
        "--check".into(),
        format!("out={}", ref_path.display()),
        "--rtol".into(),
        RTOL.to_string(),
        "--atol".into(),
        ATOL.to_string(),
    ]);
    let (code, stdout, stderr) = run(dir.path(), "paged_attention", &flags);
    assert_eq!(code, Some(0), "{shape:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("PASS out"), "{stdout}");
    let (got_shape, got) = read_f32(&out_path);
    assert_eq!(got_shape, want.shape);
    let (worst, ok) = within(&got, &want.data, RTOL, ATOL);
    assert!(ok, "{shape:?}: max abs error {worst}");
}

#[test]
fn paged_attention_grouped_heads_ragged_lengths() {
    paged_end_to_end(
        PagedShape {
            batch: 3,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            block_size: 8,
            max_context: 45,
        },
        11,
    );
}

#[test]
fn paged_attention_one_token_blocks_and_one_kv_head() {
    paged_end_to_end(
        PagedShape {
            batch: 2,
            heads: 3,
            kv_heads: 1,
            head_dim: 4,
            block_size: 1,
            max_context: 7,
        },
        12,
    );
}

/// A block-table entry outside the cache and a zero context length are refused by the
/// orchestration (exit 1, its fatal code 5, INVALID_ARGS, and a message naming the entry); no
/// output is written.
#[test]
fn paged_attention_refuses_a_bad_block_table() {
    let shape = PagedShape {
        batch: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        block_size: 4,
        max_context: 9,
    };
    let base = paged_attention::inputs(shape, 13);
    let mb = base.max_blocks();
    let mut bad_block = base.clone();
    bad_block.block_table[mb + 1] = base.num_blocks as i32;
    let mut bad_len = base.clone();
    bad_len.context_lens[0] = 0;
    let cases = [
        (
            bad_block,
            format!("block_table[1][1] = {}", base.num_blocks),
        ),
        (bad_len, "context_lens[0] = 0".to_string()),
    ];
    for (x, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = write_paged(dir.path(), &x);
        let ref_path = dir.path().join("out.ref.npy");
        common::write_array(&ref_path, &paged_attention::reference(&base));
        let out_path = dir.path().join("out.npy");
        flags.extend([
            "--output".into(),
            format!("out={}", out_path.display()),
            "--check".into(),
            format!("out={}", ref_path.display()),
        ]);
        let (code, stdout, stderr) = run(dir.path(), "paged_attention", &flags);
        assert_eq!(code, Some(1), "{needle}\n{stdout}\n{stderr}");
        assert!(
            stderr.contains("fatal error (code 5)") && stderr.contains(&needle),
            "{needle}\n{stderr}"
        );
        assert!(!out_path.exists());
    }
}

// ---- decoder_layer --------------------------------------------------------------------------

use simpler_examples::decoder_layer::{self, Model};

/// The tolerance of examples/decoder_layer/README.md ("Checking").
const LAYER_TOL: f64 = 1e-4;

/// Whether `got` equals `want` within the layer tolerance, NaN matching NaN only.
fn same_cache(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(&g, &w)| {
            (g.is_nan() && w.is_nan())
                || (f64::from(g) - f64::from(w)).abs() <= LAYER_TOL + LAYER_TOL * f64::from(w).abs()
        })
}

/// One decode step of a small decoder layer: `out` checked by `simpler run --check` and here,
/// and both caches (written through `inout`) compared here, their new-token slots included.
#[test]
fn decoder_layer_end_to_end() {
    let model = Model {
        embed: 32,
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
        ffn: 48,
    };
    let x = decoder_layer::inputs(model, 5, 21, 4, 21);
    let (want_out, want_k, want_v) = decoder_layer::reference(&x);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut flags = Vec::new();
    for a in &x.dense {
        let p = d.join(format!("{}.npy", a.name));
        common::write_array(&p, a);
        flags.extend(["--input".into(), format!("{}={}", a.name, p.display())]);
    }
    flags.extend(write_paged(d, &x.paged).into_iter().skip(2)); // no q
    let ref_path = d.join("out.ref.npy");
    common::write_array(&ref_path, &want_out);
    for name in ["out", "k_cache", "v_cache"] {
        flags.extend([
            "--output".into(),
            format!("{name}={}", d.join(format!("{name}.out.npy")).display()),
        ]);
    }
    flags.extend([
        "--check".into(),
        format!("out={}", ref_path.display()),
        "--rtol".into(),
        LAYER_TOL.to_string(),
        "--atol".into(),
        LAYER_TOL.to_string(),
        "--scalar".into(),
        format!("eps={}", decoder_layer::EPS),
    ]);
    let (code, stdout, stderr) = run(d, "decoder_layer", &flags);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("PASS out"), "{stdout}");
    let (_, out) = read_f32(&d.join("out.out.npy"));
    let (worst, ok) = within(&out, &want_out.data, LAYER_TOL, LAYER_TOL);
    assert!(ok, "out: max abs error {worst}");
    for (name, want) in [("k_cache", &want_k), ("v_cache", &want_v)] {
        let (shape, got) = read_f32(&d.join(format!("{name}.out.npy")));
        assert_eq!(shape, want.shape);
        assert!(
            same_cache(&got, &want.data),
            "{name} differs from the reference"
        );
    }
}
