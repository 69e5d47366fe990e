//! Small whole examples (a `simpler.toml`, an orchestration, kernels) that the tests of
//! several crates build: as `(relative path, contents)` file lists, and one way to write
//! them into a folder. How a test builds them (the `simpler` binary, the toolchain as a
//! library) is its own.

use std::path::Path;

/// An orchestration that submits one AIV task of kernel func 0 with tensor 0 as its input
/// and tensor 1 as an existing output.
pub const ONE_TASK_ORCH_C: &str = r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_add_input(&d, &args->tensors[0]);
    simpler_task_add_output_existing(&d, &args->tensors[1]);
    return simpler_submit(ops, &d, NULL);
}
"#;

/// Example `sdma_copy`: `dst` (f32, 1024, out) is `src` (f32, 1024, in), copied by one
/// SDMA copy of its one kernel. Without an SDMA engine the copy is refused and the run
/// fails naming the missing engine.
pub const SDMA_COPY: &[(&str, &str)] = &[
    (
        "simpler.toml",
        r#"name = "sdma_copy"

[orchestration]
source = "orchestration.c"

[[kernels]]
func_id = 0
core = "aiv"
source = "kernels/sdma_copy.c"

[[args]]
name = "src"
direction = "in"
dtype = "f32"
shape = [1024]

[[args]]
name = "dst"
direction = "out"
dtype = "f32"
shape = [1024]
"#,
    ),
    ("orchestration.c", ONE_TASK_ORCH_C),
    (
        "kernels/sdma_copy.c",
        r#"#include "simpler/async.h"

/* Copies tensor 0 (f32, contiguous) into tensor 1 with one SDMA copy; the task completes
 * when the copy lands. */
SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *src = simpler_arg_tensor(args, 0);
    SimplerChipTensor *dst = simpler_arg_tensor(args, 1);
    (void)simpler_sdma_copy(args, SIMPLER_TENSOR_DATA(unsigned char, dst),
                            SIMPLER_TENSOR_DATA(unsigned char, src),
                            simpler_tensor_numel(src) * 4);
}
"#,
    ),
];

/// Writes `files` (relative path, contents) under `dir`, creating their folders.
///
/// # Panics
/// When a file cannot be written (a test fixture: the test fails there).
pub fn write_example<S: AsRef<str>>(dir: &Path, files: &[(&str, S)]) {
    for (file, body) in files {
        let p = dir.join(file);
        std::fs::create_dir_all(p.parent().expect("a file inside the folder"))
            .unwrap_or_else(|e| panic!("create the folder of {}: {e}", p.display()));
        std::fs::write(&p, body.as_ref()).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }
}
