//! `simpler run` with a kernel that never returns: the op-execute timeout ends the run, the
//! command prints the error naming the clock, the task and its kernel, and exits with the
//! failed-run code (1) — promptly, and never by a signal, although the kernel's thread is
//! still executing the kernel's library when the process exits.

use std::time::{Duration, Instant};

use simpler_test_support::examples::ONE_TASK_ORCH_C;

use crate::common::{command, path_str, text, write_f32_npy};

const MANIFEST: &str = r#"name = "hung"

[orchestration]
source = "orchestration.c"

[[kernels]]
func_id = 0
core = "aiv"
source = "kernels/hang.c"

[[args]]
name = "x"
direction = "in"
dtype = "f32"
shape = [4]

[[args]]
name = "y"
direction = "out"
dtype = "f32"
shape = [4]
"#;

/// Never returns (sleeping, so the test machine keeps its CPUs).
const HANG_C: &str = r#"#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    (void)args;
    const struct timespec ms = {0, 1000000};
    for (;;) nanosleep(&ms, NULL);
}
"#;

#[test]
fn a_hung_kernel_fails_the_run_with_a_named_error_and_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir(p.join("kernels")).unwrap();
    std::fs::write(p.join("simpler.toml"), MANIFEST).unwrap();
    std::fs::write(p.join("orchestration.c"), ONE_TASK_ORCH_C).unwrap();
    std::fs::write(p.join("kernels/hang.c"), HANG_C).unwrap();
    let x = p.join("x.npy");
    write_f32_npy(&x, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let t = Instant::now();
    let out = command()
        .args([
            "run",
            path_str(p),
            "--input",
            &format!("x={}", path_str(&x)),
        ])
        .env("SIMPLER_OP_EXECUTE_TIMEOUT_US", "1000000")
        .env("SIMPLER_SCHEDULER_TIMEOUT_MS", "300")
        .output()
        .expect("the simpler binary runs");
    let took = t.elapsed();
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed run exits 1, not by a signal: {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    for want in [
        "OP_EXECUTE_TIMEOUT",
        "op-execute clock fired (1000 ms)",
        "submit #1",
        "func 0 aiv",
        "on core ",
    ] {
        assert!(
            stderr.contains(want),
            "{want:?} missing from stderr:\n{stderr}"
        );
    }
    // The build, one op-execute timeout, the host's grace for the run's boundaries and the
    // device's bounded teardown; nowhere near the 50 s stream-sync timeout.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}
