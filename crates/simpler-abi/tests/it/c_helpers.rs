//! Compiles a C program that calls the header helpers of `include/simpler/kernel_math.h`
//! (exp, sqrt, f16/bf16 widening) and `orchestration.h` (strided 2-D views, 3-D offsets, the
//! run's f32 scalars) with the system C compiler (`cc`, or `$CC`), without libm, and checks
//! what it prints against Rust's own arithmetic.

use crate::cc;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

const PROBE: &str = r#"
#include <stdio.h>
#include "simpler/kernel_math.h"
#include "simpler/orchestration.h"
static void d(const char *k, double v) { printf("%s %a\n", k, v); }
int main(void) {
    const double xs[] = {-745.0, -100.5, -1.0, -1e-9, 0.0, 0.5, 1.0, 3.25, 88.7, 709.0};
    char key[32];
    for (int i = 0; i < 10; ++i) {
        snprintf(key, sizeof key, "exp%d", i); d(key, simpler_exp_d(xs[i]));
        snprintf(key, sizeof key, "x%d", i); d(key, xs[i]);
    }
    const double ss[] = {1e-300, 2.0, 0.25, 3.0, 1e300, 123456.789};
    for (int i = 0; i < 6; ++i) {
        snprintf(key, sizeof key, "sqrt%d", i); d(key, simpler_sqrt_d(ss[i]));
        snprintf(key, sizeof key, "s%d", i); d(key, ss[i]);
    }
    d("sqrt_neg_is_nan", simpler_sqrt_d(-1.0) != simpler_sqrt_d(-1.0));
    const uint16_t h[] = {0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0x8000, 0x3555};
    for (int i = 0; i < 8; ++i) { snprintf(key, sizeof key, "f16_%04x", h[i]); d(key, simpler_f16_to_f32(h[i])); }
    d("f16_nan", simpler_f16_to_f32(0x7e00) != simpler_f16_to_f32(0x7e00));
    d("bf16_3f80", simpler_bf16_to_f32(0x3f80));
    d("bf16_c049", simpler_bf16_to_f32(0xc049));
    const uint16_t bits[2] = {0x3c00, 0x4000};
    d("load_f16_1", simpler_load_f32(bits, SIMPLER_DT_FLOAT16, 1));
    d("load_bad", simpler_load_f32(bits, SIMPLER_DT_INT32, 0));

    SimplerChipTensor t;
    memset(&t, 0, sizeof t);
    t.ndims = 4; t.start_offset = 7;
    t.shapes[0] = 5; t.shapes[1] = 4; t.shapes[2] = 3; t.shapes[3] = 2;
    t.strides[0] = 24; t.strides[1] = 6; t.strides[2] = 2; t.strides[3] = 1;
    t.flags = SIMPLER_TENSOR_FLAG_CONTIGUOUS;
    const SimplerChipTensor v = simpler_view_strided_2d(&t, 24 * 2 + 2, 4, 2, 6, 1);
    d("view_ndims", v.ndims); d("view_start", (double)v.start_offset);
    d("view_rows", (double)v.shapes[0]); d("view_cols", (double)v.shapes[1]);
    d("view_s0", (double)v.strides[0]); d("view_s1", (double)v.strides[1]);
    d("view_s2", (double)v.strides[2]); d("view_shape2", (double)v.shapes[2]);
    d("view_contig", v.flags & SIMPLER_TENSOR_FLAG_CONTIGUOUS);
    const SimplerChipTensor w = simpler_view_strided_2d(&t, 0, 3, 2, 2, 1);
    d("dense_contig", w.flags & SIMPLER_TENSOR_FLAG_CONTIGUOUS);
    d("off3", (double)simpler_offset_3d(&t, 2, 3, 1));

    static SimplerOrchArgs a;
    const float f = 1e-6f;
    uint32_t fb; memcpy(&fb, &f, sizeof fb);
    a.scalar_count = 1; a.scalars[0] = fb; a.scalars[1] = 0x40490fdb;
    d("scalar0", simpler_orch_scalar_f32(&a, 0));
    d("scalar1_absent", simpler_orch_scalar_f32(&a, 1));
    d("u64_0", (double)simpler_orch_scalar_u64(&a, 0));
    return 0;
}
"#;

/// The probe's output, compiled and run once for all tests of this file.
fn probe() -> &'static BTreeMap<String, f64> {
    static OUT: OnceLock<BTreeMap<String, f64>> = OnceLock::new();
    OUT.get_or_init(run_probe)
}

/// Compiles and runs the probe: key -> value (printed with `%a`, read back exactly).
fn run_probe() -> BTreeMap<String, f64> {
    // No -lm: the helpers must not need libm.
    let flags = ["-std=c11", "-O2", "-Wall", "-Werror", "-fno-builtin"];
    let exe = cc::compile("helpers_probe", PROBE, &flags, &[]);
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success());
    // Only this probe's files: the scratch directory is every module's.
    let _ = std::fs::remove_file(exe.with_extension("c"));
    let _ = std::fs::remove_file(&exe);
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), parse_hex_float(v))
        })
        .collect()
}

/// Parses C's `%a` output (`0x1.8p+1`, `-0x0p+0`, `inf`).
fn parse_hex_float(s: &str) -> f64 {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let v = if s == "inf" {
        f64::INFINITY
    } else {
        let s = s.strip_prefix("0x").expect("hex float");
        let (mant, exp) = s.split_once('p').expect("exponent");
        let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
        let mut m = u64::from_str_radix(int, 16).unwrap() as f64;
        for (i, c) in frac.chars().enumerate() {
            m += f64::from(c.to_digit(16).unwrap()) / 16f64.powi(i as i32 + 1);
        }
        m * 2f64.powi(exp.parse().unwrap())
    };
    if neg {
        -v
    } else {
        v
    }
}

#[test]
fn exp_and_sqrt_match_rust_without_libm() {
    let p = probe();
    for i in 0..10 {
        let x = p[&format!("x{i}")];
        let (got, want) = (p[&format!("exp{i}")], x.exp());
        let rel = if want == 0.0 {
            got.abs()
        } else {
            ((got - want) / want).abs()
        };
        // Subnormal results (exp(-745)) keep fewer bits.
        let bound = if want < f64::MIN_POSITIVE {
            1e-1
        } else {
            4e-16
        };
        assert!(
            rel <= bound,
            "exp({x}) = {got:e}, Rust {want:e}, rel {rel:e}"
        );
    }
    for i in 0..6 {
        let s = p[&format!("s{i}")];
        let (got, want) = (p[&format!("sqrt{i}")], s.sqrt());
        assert!(
            ((got - want) / want).abs() <= f64::EPSILON,
            "sqrt({s}) = {got:e}, Rust {want:e}"
        );
    }
    assert_eq!(p["sqrt_neg_is_nan"], 1.0);
}

#[test]
fn f16_and_bf16_widen_exactly() {
    let p = probe();
    let cases = [
        ("f16_3c00", 1.0),
        ("f16_c000", -2.0),
        ("f16_0001", 2f64.powi(-24)),
        ("f16_03ff", 1023.0 * 2f64.powi(-24)),
        ("f16_7bff", 65504.0),
        ("f16_7c00", f64::INFINITY),
        ("f16_8000", 0.0),
        ("bf16_3f80", 1.0),
        ("bf16_c049", -3.140625),
        ("load_f16_1", 2.0),
        ("load_bad", 0.0),
        ("f16_nan", 1.0),
    ];
    for (k, want) in cases {
        assert_eq!(p[k], want, "{k}");
    }
    // 0x3555: exponent 13 - 15, mantissa 0x155: 0.25 * (1 + 341/1024).
    assert_eq!(p["f16_3555"], 0.25 * (1.0 + 341.0 / 1024.0));
}

#[test]
fn strided_views_offsets_and_scalars() {
    let p = probe();
    let cases = [
        ("view_ndims", 2.0),
        ("view_start", 7.0 + 50.0),
        ("view_rows", 4.0),
        ("view_cols", 2.0),
        ("view_s0", 6.0),
        ("view_s1", 1.0),
        ("view_s2", 0.0),
        ("view_shape2", 0.0),
        ("view_contig", 0.0),
        ("dense_contig", 1.0),
        ("off3", 2.0 * 24.0 + 3.0 * 6.0 + 2.0),
        ("scalar0", f64::from(1e-6f32)),
        ("scalar1_absent", 0.0),
        ("u64_0", f64::from(1e-6f32.to_bits())),
    ];
    for (k, want) in cases {
        assert_eq!(p[k], want, "{k}");
    }
}
