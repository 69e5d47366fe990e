//! Kernel crashes through the `simpler` binary: C kernels that dereference NULL, call
//! `abort()`, call `exit(3)` or write one element past their output tensor, and an
//! orchestration that dereferences NULL. Each `simpler run` is a child process; the tests check the crash
//! report on its stderr and the signal it ended by (README.md, "Kernel crashes").

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;

use crate::common::{command, path_str, text, write_f32_npy};
use simpler_test_support::c_sources::{self, Kernel, Y};

/// y = 2 x, then one more element at y[n]: past the end of the output.
const OVERRUN_C: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void write_past_end(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    SimplerChipTensor *y = simpler_arg_tensor(args, 1);
    const float *xs = (const float *)(uintptr_t)x->buffer_addr;
    volatile float *ys = (volatile float *)(uintptr_t)y->buffer_addr;
    const uint64_t n = y->shapes[0];
    for (uint64_t i = 0; i <= n; ++i) ys[i] = 2.0f * (i < n ? xs[i] : 1.0f);
}
"#;

/// Ends the process from inside the kernel.
const EXIT_C: &str = r#"#include <stdlib.h>
#include "simpler/kernel.h"

SIMPLER_KERNEL void call_exit(int64_t *args) {
    (void)args;
    exit(3);
}
"#;

/// The project, with x.npy written.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir(p.join("kernels")).unwrap();
    let k = |func_id, source, entry| Kernel {
        func_id,
        source,
        entry,
    };
    let kernels = [
        k(0, "kernels/null.c", "null_deref"),
        k(1, "kernels/abort.c", "call_abort"),
        k(2, "kernels/overrun.c", "write_past_end"),
        k(4, "kernels/exit.c", "call_exit"),
    ];
    // Mode 3 crashes in the orchestration instead.
    let manifest = c_sources::manifest("crashy", &kernels, Y::Out, Some(&[1000]));
    let orchestration = c_sources::orchestration(Y::Out, Some(3));
    for (file, body) in [
        ("simpler.toml", manifest.as_str()),
        ("orchestration.c", &orchestration),
        ("kernels/null.c", c_sources::NULL_DEREF_C),
        ("kernels/abort.c", c_sources::ABORT_C),
        ("kernels/overrun.c", OVERRUN_C),
        ("kernels/exit.c", EXIT_C),
    ] {
        std::fs::write(p.join(file), body).unwrap();
    }
    let x: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    write_f32_npy(&p.join("x.npy"), &[1000], &x);
    dir
}

/// `simpler run` of the project in `mode`, with `env` set (memcheck unset otherwise).
fn run(p: &Path, mode: u32, env: &[(&str, &str)]) -> (Output, String) {
    let mode = format!("mode={mode}");
    let mut c = command();
    c.args([
        "run",
        path_str(p),
        "--input",
        "x=x.npy",
        "--output",
        "y=y.npy",
        "--scalar",
        &mode,
    ])
    .current_dir(p)
    .env_remove("SIMPLER_SIM_MEMCHECK")
    .env_remove("SIMPLER_CRASH_REPORT");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("the simpler binary runs");
    let (_, err) = text(&out);
    (out, err)
}

fn assert_has(err: &str, wants: &[&str]) {
    for want in wants {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}

#[test]
fn a_null_dereferencing_kernel_is_reported_and_ends_by_sigsegv() {
    let ex = project();
    let (out, err) = run(ex.path(), 0, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert_has(
        &err,
        &[
            "simpler: crash: SIGSEGV (invalid memory access, address not mapped) on a device thread",
            "(aiv), run epoch ",
            "kernel:  `crashy` kernel `null` (func 0) (entry `null_deref`); func id 0; task 0x0 (ring 0, submit #0); block 0 of 1",
            "address: 0x0, not in any live device allocation",
            "The process now ends by SIGSEGV (exit status 139)",
        ],
    );
    assert!(
        err.contains(", AICore "),
        "the report names the core:\n{err}"
    );
    assert!(!ex.path().join("y.npy").exists());
}

#[test]
fn an_aborting_kernel_is_reported_and_ends_by_sigabrt() {
    let ex = project();
    let (out, err) = run(ex.path(), 1, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{err}");
    assert_has(
        &err,
        &[
            "simpler: crash: SIGABRT (abort) on a device thread",
            "kernel:  `crashy` kernel `abort` (func 1) (entry `call_abort`); func id 1; task 0x0",
            "address: none: the signal was sent",
            "(exit status 134)",
        ],
    );
}

#[test]
fn a_crashing_orchestration_is_named_on_its_aicpu_thread() {
    let ex = project();
    let (out, err) = run(ex.path(), 3, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert_has(
        &err,
        &[
            ", AICPU thread ",
            "orchestration: `crashy` orchestration (entry `aicpu_orchestration_entry`)",
            "address: 0x0, not in any live device allocation",
        ],
    );
}

#[test]
fn sim_memcheck_catches_a_write_one_element_past_the_output() {
    let ex = project();
    let (out, err) = run(ex.path(), 2, &[("SIMPLER_SIM_MEMCHECK", "1")]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert_has(
        &err,
        &[
            "page protected against this access",
            "kernel:  `crashy` kernel `overrun` (func 2) (entry `write_past_end`); func id 2",
            "0 bytes past the end of device allocation #",
            "(4000 bytes at 0x",
            "; offset 4000), in its guard page (memcheck)",
            "tensor:  the allocation is the buffer of the kernel's tensor argument 1\n",
        ],
    );
}

#[test]
fn without_memcheck_the_overrun_goes_unnoticed_as_before() {
    let ex = project();
    let (out, err) = run(ex.path(), 2, &[]);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("simpler: crash"), "{err}");
    let y = std::fs::read(ex.path().join("y.npy")).unwrap();
    let last = &y[y.len() - 4..];
    assert_eq!(f32::from_le_bytes(last.try_into().unwrap()), 2.0 * 999.0);
    // A bad SIMPLER_SIM_MEMCHECK value warns and keeps memcheck off.
    let (out, err) = run(ex.path(), 2, &[("SIMPLER_SIM_MEMCHECK", "sometimes")]);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("SIMPLER_SIM_MEMCHECK: `sometimes` is not a memcheck mode"),
        "{err}"
    );
}

#[test]
fn a_kernel_that_calls_exit_is_named_and_its_status_kept() {
    let ex = project();
    let (out, err) = run(ex.path(), 4, &[]);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(
        &err,
        &[
            "simpler: crash: exit(3) called on a device thread",
            "kernel:  `crashy` kernel `exit` (func 4) (entry `call_exit`); func id 4; task 0x0",
            "The process now ends (exit status 3)",
        ],
    );
    assert!(!ex.path().join("y.npy").exists());
}
