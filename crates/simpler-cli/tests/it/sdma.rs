//! `simpler run --enable-sdma`: an example whose one kernel copies its input into its
//! output with the SDMA engine passes its `--check` with the flag, and without it fails
//! (exit code 1) with a message naming the missing engine, writing no output.

use simpler_test_support::examples::{write_example, SDMA_COPY};

use crate::common::{path_str, simpler, text, write_f32_npy};

#[test]
fn enable_sdma_provisions_the_engine_a_kernel_copies_with() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    write_example(p, SDMA_COPY);
    let values: Vec<f32> = (0..1024).map(|i| i as f32 * 0.25 - 3.0).collect();
    let src = p.join("src.npy");
    write_f32_npy(&src, &[1024], &values);
    let input = format!("src={}", path_str(&src));
    // The reference is the input itself: the copy must be exact.
    let check = format!("dst={}", path_str(&src));

    let out_with = p.join("with.npy");
    let output = format!("dst={}", path_str(&out_with));
    let args = [
        "run",
        path_str(p),
        "--input",
        &input,
        "--output",
        &output,
        "--check",
        &check,
        "--rtol",
        "0",
        "--atol",
        "0",
    ];
    let mut with = args.to_vec();
    with.push("--enable-sdma");
    let o = simpler(&with, p);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out_with.is_file(), "the output is written");

    let out_without = p.join("without.npy");
    let output = format!("dst={}", path_str(&out_without));
    let mut without = args.to_vec();
    without[5] = &output;
    let o = simpler(&without, p);
    let (stdout, stderr) = text(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.contains("no SDMA engine"), "{stderr}");
    assert!(!out_without.exists(), "a failed run writes no output");
}
