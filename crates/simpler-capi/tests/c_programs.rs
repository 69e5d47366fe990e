//! The C ABI from C: `include/simpler/host.h` and `include/simpler/domain.h` compile as C11
//! and as C++17, their layouts agree with the Rust mirrors, and the C programs in `tests/c/`
//! — linked against the `libsimpler.so` cargo built for this test — pass (`docs/c-abi.md`).
//!
//! The bundles the programs register are built here with the toolchain `simpler build`
//! uses: `examples/gemm`, a one-kernel `sleepy` callable (its kernel sleeps for a scalar
//! number of milliseconds) for the bounded-wait refusal, `sdma_copy` (its kernel copies its
//! input into its output with the SDMA engine) and `readback` (sleepy's kernel, then the
//! orchestration reads the output back with `get_tensor_data`, which only
//! `tensormap_and_ringbuffer` can do).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use simpler::types::{SimplerArg, SimplerContextConfig, SimplerDomainConfig, SimplerRunConfig};
use simpler_test_support::examples::{write_example, SDMA_COPY};
use simpler_toolchain::build;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where cargo put this test's dependencies, the crate's own `libsimpler.so` among them.
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent().expect("the deps directory").to_path_buf()
}

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

const SLEEPY: &[(&str, &str)] = &[
    (
        "simpler.toml",
        r#"name = "sleepy"

[orchestration]
source = "orchestration.c"
entry = "aicpu_orchestration_entry"

[[kernels]]
func_id = 0
core = "aiv"
source = "kernels/sleep.c"
entry = "kernel_entry"

[[args]]
name = "out"
direction = "out"
dtype = "f32"
shape = [16]

[[args]]
name = "ms"
direction = "scalar"
dtype = "u64"
"#,
    ),
    (
        "orchestration.c",
        r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_add_output_existing(&d, &args->tensors[0]);
    simpler_task_add_scalar(&d, args->scalars[0]);
    return simpler_submit(ops, &d, NULL);
}
"#,
    ),
    (
        "kernels/sleep.c",
        r#"#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "simpler/kernel.h"

/* Sleeps `ms` milliseconds (scalar slot 1), then writes 1.0 to every element of tensor 0. */
SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 1, 1)) return;
    const SimplerChipTensor *t = simpler_arg_tensor(args, 0);
    const uint64_t ms = simpler_arg_u64(args, 1);
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    float *out = SIMPLER_TENSOR_DATA(float, t);
    for (uint64_t i = 0; i < t->shapes[0]; ++i) out[i * t->strides[0]] = 1.0f;
}
"#,
    ),
];

/// `readback`: sleepy's manifest and kernel with an orchestration that reads `out` back
/// after its task (`get_tensor_data` waits for the task under `tensormap_and_ringbuffer`
/// and is refused under `host_build_graph`, where no task has run yet); with `ms` = 1 it
/// reads `out` before the task instead (allowed under both, but never in a recording).
fn readback() -> Vec<(&'static str, String)> {
    let mut files: Vec<(&str, String)> = SLEEPY
        .iter()
        .filter(|(f, _)| *f != "orchestration.c")
        .map(|(f, b)| (*f, b.replace("name = \"sleepy\"", "name = \"readback\"")))
        .collect();
    files.push((
        "orchestration.c",
        r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    float back[16];
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_add_output_existing(&d, &args->tensors[0]);
    simpler_task_add_scalar(&d, args->scalars[0]);
    if (args->scalars[0] == 1) {
        /* `out` before any task touched it: read at once under either variant. */
        int32_t rc = simpler_get_tensor_data(ops, &args->tensors[0], back, sizeof back);
        return rc != 0 ? rc : simpler_submit(ops, &d, NULL);
    }
    int32_t rc = simpler_submit(ops, &d, NULL);
    if (rc != 0) return rc;
    rc = simpler_get_tensor_data(ops, &args->tensors[0], back, sizeof back);
    if (rc != 0) return rc;
    return back[0] == 1.0f ? 0 : SIMPLER_ORCH_INVALID_ARGS;
}
"#
        .to_string(),
    ));
    files
}

/// The bundle files.
struct Bundles {
    gemm: PathBuf,
    sleepy: PathBuf,
    sdma_copy: PathBuf,
    readback: PathBuf,
}

/// The bundle files, built once.
fn bundles() -> &'static Bundles {
    static BUNDLES: OnceLock<Bundles> = OnceLock::new();
    BUNDLES.get_or_init(|| {
        let out = tmp().join("capi-bundles");
        std::fs::create_dir_all(&out).unwrap();
        let compiler = build::Compiler::new(
            build::compiler_words(std::env::var_os("CC")).unwrap(),
            vec![build::repository_include_dir()],
            simpler_toolchain::cache::KernelCache::new(tmp().join("capi-kernel-cache")),
        )
        .unwrap();
        let gemm = build::build_example(&build::repository_examples_dir().join("gemm"), &compiler)
            .expect("build examples/gemm");
        let gemm_path = out.join("gemm.simpler");
        gemm.bundle.write(&gemm_path).unwrap();

        let inline = |name: &str, files: &[(&str, String)]| {
            let dir = tempfile::tempdir_in(tmp()).unwrap();
            write_example(dir.path(), files);
            let built = build::build_example(dir.path(), &compiler)
                .unwrap_or_else(|e| panic!("build {name}: {e}"));
            let path = out.join(format!("{name}.simpler"));
            built.bundle.write(&path).unwrap();
            path
        };
        let owned = |files: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
            files.iter().map(|(f, b)| (*f, b.to_string())).collect()
        };
        Bundles {
            gemm: gemm_path,
            sleepy: inline("sleepy", &owned(SLEEPY)),
            sdma_copy: inline("sdma_copy", &owned(SDMA_COPY)),
            readback: inline("readback", &readback()),
        }
    })
}

/// Compiles `tests/c/<name>.c` against the header and `libsimpler.so`.
fn compile(name: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = tmp().join(format!("capi-{name}"));
    let deps = deps_dir();
    assert!(
        deps.join("libsimpler.so").is_file(),
        "cargo did not build {}",
        deps.join("libsimpler.so").display()
    );
    let out = Command::new(cc())
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(repo().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&deps)
        .arg(format!("-Wl,-rpath,{}", deps.display()))
        .args(["-lsimpler", "-lm"])
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{name}.c failed to compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn run_program(exe: &Path, args: &[&Path]) {
    let out = Command::new(exe)
        .args(args)
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.lines().any(|l| l == "PASS"),
        "{} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        exe.display(),
        out.status
    );
    print!("{stdout}");
}

#[test]
fn the_header_compiles_as_c11_and_cpp17_and_its_layouts_match_rust() {
    let probe = tmp().join("capi-header-probe.c");
    std::fs::write(
        &probe,
        "#include <stdio.h>\n#include \"simpler/host.h\"\n#include \"simpler/domain.h\"\n\
         int main(void) { printf(\"%zu %zu %zu %zu %zu\\n\", sizeof(SimplerContextConfig), \
         sizeof(SimplerRunConfig), sizeof(SimplerArg), offsetof(SimplerArg, host_ptr), \
         sizeof(SimplerDomainConfig)); return 0; }\n",
    )
    .unwrap();
    let include = repo().join("include");
    let c = Command::new(cc())
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(&include)
        .arg(&probe)
        .output()
        .unwrap();
    assert!(
        c.status.success(),
        "as C11:\n{}",
        String::from_utf8_lossy(&c.stderr)
    );

    let cxx = ["c++", "g++", "clang++"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    match cxx {
        Some(cxx) => {
            let o = Command::new(cxx)
                .args([
                    "-std=c++17",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-fsyntax-only",
                    "-x",
                    "c++",
                    "-I",
                ])
                .arg(&include)
                .arg(&probe)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "as C++17:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        None => println!("note: no C++ compiler (c++, g++, clang++): the C++17 check is skipped"),
    }

    let exe = tmp().join("capi-header-probe");
    let o = Command::new(cc())
        .args(["-std=c11", "-I"])
        .arg(&include)
        .arg(&probe)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = Command::new(&exe).output().unwrap();
    let want = format!(
        "{} {} {} {} {}\n",
        std::mem::size_of::<SimplerContextConfig>(),
        std::mem::size_of::<SimplerRunConfig>(),
        std::mem::size_of::<SimplerArg>(),
        std::mem::offset_of!(SimplerArg, host_ptr),
        std::mem::size_of::<SimplerDomainConfig>()
    );
    assert_eq!(String::from_utf8_lossy(&printed.stdout), want);
}

#[test]
fn gemm_pipeline_c_program_passes() {
    let b = bundles();
    let exe = compile("gemm_pipeline");
    run_program(&exe, &[&b.gemm]);
}

#[test]
fn refusals_c_program_passes() {
    let b = bundles();
    let exe = compile("refusals");
    run_program(&exe, &[&b.gemm, &b.sleepy]);
}

#[test]
fn sdma_c_program_passes() {
    let b = bundles();
    let exe = compile("sdma");
    run_program(&exe, &[&b.sdma_copy]);
}

#[test]
fn runtime_select_c_program_passes() {
    let b = bundles();
    let exe = compile("runtime_select");
    run_program(&exe, &[&b.readback]);
}

#[test]
fn record_replay_c_program_passes() {
    let b = bundles();
    let exe = compile("record_replay");
    run_program(&exe, &[&b.gemm, &b.sleepy, &b.readback]);
}

#[test]
fn domain_c_program_passes() {
    let exe = compile("domain");
    let cache = tmp().join("capi-domain-kernel-cache");
    run_program(&exe, &[&cache]);
}

#[test]
fn the_static_library_links_with_pthread_dl_and_m() {
    let src = tmp().join("capi-static-probe.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <string.h>\n#include \"simpler/host.h\"\n\
         int main(void) { uint64_t b = 0; int32_t s = simpler_capabilities(&b);\n\
         if (s != 0 || (b & SIMPLER_CAP_PROGRAM_LAUNCH) == 0) return 1;\n\
         if (strcmp(simpler_status_name(SIMPLER_STATUS_TIMEOUT), \"SIMPLER_STATUS_TIMEOUT\")) return 1;\n\
         printf(\"PASS\\n\"); return 0; }\n",
    )
    .unwrap();
    let exe = tmp().join("capi-static-probe");
    let archive = deps_dir().join("libsimpler.a");
    assert!(
        archive.is_file(),
        "cargo did not build {}",
        archive.display()
    );
    let o = Command::new(cc())
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(repo().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(&archive)
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    run_program(&exe, &[]);
}
