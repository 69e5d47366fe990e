//! Command-line tests of the `simpler` binary: `simpler build` on tiny examples written into
//! temporary directories (compiled with the system C compiler against `include/`), and the
//! exit codes and messages of `simpler run`'s argument checking.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::{path_str, simpler, text, write_f32_npy};
use simpler_abi::{CoreType, DataType};
use simpler_host::{ArgDirection, Bundle};

const ORCH_C: &str = r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    (void)ops;
    return args->tensor_count == 2 ? 0 : 1;
}
"#;

const KERNEL_C: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    (void)x;
}
"#;

const MANIFEST: &str = r#"name = "tiny"

[orchestration]
source = "orchestration.c"

[[kernels]]
func_id = 5
core = "aiv"
source = "kernels/copy.c"

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

/// A tiny example directory: manifest, orchestration and one kernel.
fn example() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir(p.join("kernels")).unwrap();
    std::fs::write(p.join("simpler.toml"), MANIFEST).unwrap();
    std::fs::write(p.join("orchestration.c"), ORCH_C).unwrap();
    std::fs::write(p.join("kernels/copy.c"), KERNEL_C).unwrap();
    dir
}

#[test]
fn build_writes_a_valid_bundle_next_to_the_manifest() {
    let ex = example();
    let o = simpler(&["build", path_str(ex.path())], ex.path());
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("orchestration.c") && out.contains("kernels/copy.c"),
        "{out}"
    );
    let path = ex.path().join("tiny.simpler");
    assert!(out.contains(path_str(&path)), "{out}");
    let b = Bundle::read(&path).unwrap();
    assert_eq!(b.name, "tiny");
    assert_eq!(b.orchestration.entry, "aicpu_orchestration_entry");
    assert_eq!(b.kernels.len(), 1);
    assert_eq!(b.kernels[0].func_id, 5);
    assert_eq!(b.kernels[0].core_type, CoreType::Aiv);
    assert_eq!(b.kernels[0].code.entry, "kernel_entry");
    assert!(b.kernels[0].code.image.starts_with(b"\x7fELF"));
    assert_eq!(b.signature.args[1].direction, ArgDirection::Out);
    assert_eq!(b.signature.args[1].dtype, DataType::Float32);
    // Nothing else was left in the example directory.
    let mut names: Vec<String> = std::fs::read_dir(ex.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["kernels", "orchestration.c", "simpler.toml", "tiny.simpler"]
    );
}

/// `simpler build` compiles with the toolchain's one flag set (an `aiv` kernel sees
/// `__DAV_VEC__`) through the kernel cache: a second build of unchanged sources compiles
/// nothing and writes the same bundle; an edited source compiles again.
#[test]
fn build_uses_the_core_defines_and_the_kernel_cache() {
    let ex = example();
    let kernel = ex.path().join("kernels/copy.c");
    let guarded = format!(
        "#ifndef __DAV_VEC__\n#error aiv kernels are built with __DAV_VEC__\n#endif\n\
         #ifdef __DAV_CUBE__\n#error not a cube kernel\n#endif\n{KERNEL_C}"
    );
    std::fs::write(&kernel, &guarded).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let build = || {
        let o = common::command()
            .args(["build", path_str(ex.path())])
            .env("SIMPLER_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
        (out, std::fs::read(ex.path().join("tiny.simpler")).unwrap())
    };
    let (first, bundle) = build();
    assert!(!first.contains("cached"), "{first}");
    assert!(std::fs::read_dir(cache.path()).unwrap().count() >= 2);
    let (second, again) = build();
    assert_eq!(second.matches(", cached)").count(), 2, "{second}");
    assert_eq!(again, bundle);
    std::fs::write(&kernel, format!("{guarded}/* edited */\n")).unwrap();
    let (third, _) = build();
    assert_eq!(third.matches(", cached)").count(), 1, "{third}");
}

#[test]
fn build_honours_dash_o_file_and_directory() {
    let ex = example();
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("custom.bundle");
    let o = simpler(
        &["build", path_str(ex.path()), "-o", path_str(&file)],
        ex.path(),
    );
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(Bundle::read(&file).is_ok());
    let o = simpler(
        &[
            "build",
            path_str(ex.path()),
            "--output",
            path_str(out_dir.path()),
        ],
        ex.path(),
    );
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(Bundle::read(out_dir.path().join("tiny.simpler")).is_ok());
    assert!(!ex.path().join("tiny.simpler").exists());
}

#[test]
fn build_to_a_missing_directory_says_to_create_it() {
    let ex = example();
    let out_dir = tempfile::tempdir().unwrap();
    for out in [
        format!("{}/missing/", path_str(out_dir.path())),
        format!("{}/missing/x.simpler", path_str(out_dir.path())),
    ] {
        let o = simpler(&["build", path_str(ex.path()), "-o", &out], ex.path());
        let (stdout, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("does not exist; create it first"), "{err}");
        assert!(
            !stdout.contains("built `"),
            "compiled before refusing: {stdout}"
        );
    }
    assert!(!out_dir.path().join("missing").exists());
}

#[test]
fn compile_error_shows_file_and_line_and_exits_2() {
    let ex = example();
    std::fs::write(
        ex.path().join("kernels/copy.c"),
        "#include \"simpler/kernel.h\"\n\nSIMPLER_KERNEL void kernel_entry(int64_t *args) {\n    this is not C;\n}\n",
    )
    .unwrap();
    let o = simpler(&["build", path_str(ex.path())], ex.path());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("compiling"), "{err}");
    assert!(
        err.contains("copy.c:4:"),
        "compiler diagnostics with file:line expected:\n{err}"
    );
    // A failed build writes nothing.
    assert!(!ex.path().join("tiny.simpler").exists());
}

/// Every compiled library is loaded at build time: a missing (misspelt, `static`) entry
/// symbol or an undefined reference fails the build with exit 2, naming the symbol, the
/// source and the manifest field, and writes no bundle.
#[test]
fn build_checks_every_entry_symbol_and_that_libraries_load() {
    let cases: [(&str, &str, &str, &[&str]); 4] = [
        (
            "kernels/copy.c",
            "SIMPLER_KERNEL void kernel_entry",
            "SIMPLER_KERNEL void kernel_entyr",
            &[
                "kernel 5 (aiv)",
                "kernels/copy.c` does not export its entry symbol `kernel_entry`",
                "named by `kernels[0].entry` in",
                "simpler.toml",
                "marked SIMPLER_KERNEL",
            ],
        ),
        (
            "kernels/copy.c",
            "SIMPLER_KERNEL void kernel_entry",
            "static void kernel_entry",
            &["does not export its entry symbol `kernel_entry`"],
        ),
        (
            "orchestration.c",
            "SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry",
            "SIMPLER_ORCHESTRATION int32_t orchestration_entry",
            &[
                "orchestration `",
                "orchestration.c` does not export its entry symbol `aicpu_orchestration_entry`",
                "named by `orchestration.entry`",
                "marked SIMPLER_ORCHESTRATION",
            ],
        ),
        (
            "kernels/copy.c",
            "(void)x;",
            "(void)x;\n    extern void simpler_test_undefined(void);\n    simpler_test_undefined();",
            &[
                "the library compiled from",
                "kernels/copy.c` for the kernel 5 (aiv) does not load",
                "undefined symbol: simpler_test_undefined",
            ],
        ),
    ];
    for (file, from, to, needles) in cases {
        let ex = example();
        let path = ex.path().join(file);
        let src = std::fs::read_to_string(&path).unwrap();
        assert_eq!(src.matches(from).count(), 1, "{from:?} in {src}");
        std::fs::write(&path, src.replace(from, to)).unwrap();
        let o = simpler(&["build", path_str(ex.path())], ex.path());
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{to}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        for n in needles {
            assert!(err.contains(n), "{to}: stderr lacks {n:?}:\n{err}");
        }
        assert!(!ex.path().join("tiny.simpler").exists());
    }
    // A manifest `entry` naming a symbol the source does not define.
    let ex = example();
    let m = MANIFEST.replace(
        "source = \"kernels/copy.c\"",
        "source = \"kernels/copy.c\"\nentry = \"copy_entry\"",
    );
    std::fs::write(ex.path().join("simpler.toml"), m).unwrap();
    let o = simpler(&["build", path_str(ex.path())], ex.path());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not export its entry symbol `copy_entry`")
            && err.contains("kernels[0].entry"),
        "{err}"
    );
}

#[test]
fn missing_source_file_exits_2() {
    let ex = example();
    std::fs::remove_file(ex.path().join("kernels/copy.c")).unwrap();
    let o = simpler(&["build", path_str(ex.path())], ex.path());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("copy.c` does not exist"), "{err}");
    assert!(err.contains("kernels[0].source"), "{err}");
}

#[test]
fn bad_manifest_names_the_field_and_exits_2() {
    let ex = example();
    std::fs::write(
        ex.path().join("simpler.toml"),
        MANIFEST.replace("core = \"aiv\"", "core = \"aiv\"\nblock_dim = 8"),
    )
    .unwrap();
    let o = simpler(&["build", path_str(ex.path())], ex.path());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("simpler.toml"), "{err}");
    assert!(err.contains("unknown field `block_dim`"), "{err}");
}

#[test]
fn missing_manifest_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(&["build", path_str(dir.path())], dir.path());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("simpler.toml` does not exist"), "{err}");
}

#[test]
fn compiler_that_cannot_start_exits_2() {
    let ex = example();
    let o = common::command()
        .args(["build", path_str(ex.path())])
        .env("CC", "/nonexistent/simpler-test-cc")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot run the C compiler"), "{err}");
}

fn run_err(args: &[&str], cwd: &Path) -> String {
    let o = simpler(args, cwd);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: "), "{err}");
    err
}

#[test]
fn run_checks_arguments_against_the_signature() {
    let ex = example();
    let p = ex.path();
    write_f32_npy(&p.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    write_f32_npy(&p.join("x_wrong.npy"), &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    // Build once into a bundle and use it for the file-target cases.
    assert!(simpler(&["build", path_str(p)], p).status.success());
    let bundle = p.join("tiny.simpler");
    let b = path_str(&bundle);
    let dir = path_str(p);

    let err = run_err(&["run", b], p);
    assert!(err.contains("missing --input for `x`"), "{err}");
    let err = run_err(&["run", dir, "--input", "q=x.npy"], p);
    assert!(err.contains("no argument `q`"), "{err}");
    let err = run_err(&["run", b, "--input", "x=x_wrong.npy"], p);
    assert!(
        err.contains("wrong shape") && err.contains("[4]") && err.contains("[2, 2]"),
        "{err}"
    );
    let err = run_err(&["run", b, "--input", "x=x.npy", "--input", "y=x.npy"], p);
    assert!(
        err.contains(
            "--input y: `y` is an `out` argument: use --output (and --check), not --input"
        ),
        "{err}"
    );
    let err = run_err(&["run", b, "--input", "x=absent.npy"], p);
    assert!(err.contains("absent.npy` does not exist"), "{err}");
    let err = run_err(&["run", b, "--input", "x"], p);
    assert!(err.contains("NAME=VALUE"), "{err}");
    let err = run_err(&["run", &format!("{b}.missing")], p);
    assert!(
        err.contains("neither a bundle file nor an example directory"),
        "{err}"
    );

    // A corrupt bundle is refused with its cause.
    let mut bytes = std::fs::read(&bundle).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let corrupt: PathBuf = p.join("corrupt.simpler");
    std::fs::write(&corrupt, bytes).unwrap();
    let err = run_err(&["run", path_str(&corrupt), "--input", "x=x.npy"], p);
    assert!(err.contains("checksum mismatch"), "{err}");
}

#[test]
fn help_and_version_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(&["--help"], dir.path());
    assert!(o.status.success());
    assert!(text(&o).0.contains("build") && text(&o).0.contains("run"));
    for var in ["SIMPLER_INCLUDE_DIR", "SIMPLER_ORCH_LOG", "PTO2_RING_HEAP"] {
        assert!(text(&o).0.contains(var), "--help lacks {var}");
    }
    assert!(simpler(&["--version"], dir.path()).status.success());
    // An unknown subcommand is a usage error.
    assert_eq!(simpler(&["frobnicate"], dir.path()).status.code(), Some(2));
}

/// The `formula` example from the repository, run end to end on the sim device against the
/// independent reference of `simpler-examples`.
#[test]
fn run_formula_end_to_end_pass_and_fail() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/formula");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let ins = simpler_examples::inputs("formula").unwrap();
    let refs = simpler_examples::reference("formula", &ins).unwrap();
    for a in &ins {
        write_f32_npy(&p.join(format!("{}.npy", a.name)), &a.shape, &a.data);
    }
    let f = &refs[0];
    assert_eq!(f.name, "f");
    write_f32_npy(&p.join("f.ref.npy"), &f.shape, &f.data);
    let mut wrong = f.data.clone();
    wrong[7] += 1.0;
    write_f32_npy(&p.join("f.wrong.npy"), &f.shape, &wrong);

    let base = [
        "run", example, "--input", "a=a.npy", "--input", "b=b.npy", "--output", "f=f.npy",
    ];
    let mut args = base.to_vec();
    args.extend(["--check", "f=f.ref.npy"]);
    let o = simpler(&args, p);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("PASS f: 16384 elements"), "{out}");
    assert!(!err.contains("submitted no task"), "{err}");
    // The output file holds the result, bit for bit what the reference check accepted.
    let written = std::fs::read(p.join("f.npy")).unwrap();
    let data = &written[written.len() - 4 * f.data.len()..];
    let got: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(common::close(&got, &f.data).is_ok());

    let mut args = base.to_vec();
    args.extend(["--check", "f=f.wrong.npy"]);
    let o = simpler(&args, p);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("FAIL f: 1 of 16384 elements differ"), "{out}");
    assert!(out.contains("first mismatch at [7]"), "{out}");
    assert!(err.contains("error: check failed for `f`"), "{err}");
}

#[test]
fn outputs_are_written_only_after_a_successful_run() {
    let ex = example();
    let p = ex.path();
    write_f32_npy(&p.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    assert!(simpler(&["build", path_str(p)], p).status.success());
    // The tiny orchestration submits nothing and succeeds: y comes back as allocated.
    let o = simpler(
        &[
            "run",
            "tiny.simpler",
            "--input",
            "x=x.npy",
            "--output",
            "y=y.npy",
        ],
        p,
    );
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let y = std::fs::read(p.join("y.npy")).unwrap();
    assert_eq!(&y[y.len() - 16..], &[0u8; 16]);
    std::fs::remove_file(p.join("y.npy")).unwrap();

    // An orchestration that fails the run: exit 1, no output file.
    std::fs::write(
        p.join("orchestration.c"),
        ORCH_C.replace("args->tensor_count == 2 ? 0 : 1", "7"),
    )
    .unwrap();
    let o = simpler(
        &[
            "run",
            path_str(p),
            "--input",
            "x=x.npy",
            "--output",
            "y=y.npy",
        ],
        p,
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error: running `tiny` failed"), "{err}");
    assert!(!p.join("y.npy").exists());
}

/// A run that fails after `--trace` and `--deps` were accepted writes neither (a failed run
/// brings no trace back) and says so in one line on stderr, naming both files, beside the
/// run's error (exit 1).
#[test]
fn a_failed_run_says_its_trace_was_not_written() {
    let ex = example();
    let p = ex.path();
    write_f32_npy(&p.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    std::fs::write(
        p.join("orchestration.c"),
        ORCH_C.replace("args->tensor_count == 2 ? 0 : 1", "7"),
    )
    .unwrap();
    let o = simpler(
        &[
            "run",
            path_str(p),
            "--input",
            "x=x.npy",
            "--trace",
            "t.json",
            "--deps",
            "d.dot",
        ],
        p,
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error: running `tiny` failed"), "{err}");
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].contains("no trace file written")
            && notes[0].contains("--trace `t.json`")
            && notes[0].contains("--deps `d.dot`")
            && notes[0].contains("the run failed"),
        "{err}"
    );
    assert!(!p.join("t.json").exists() && !p.join("d.dot").exists());
    // Without a trace asked for, no note.
    let o = simpler(&["run", path_str(p), "--input", "x=x.npy"], p);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("no trace file written"), "{err}");
}

/// The line `simpler run` prints once the callable ran.
const RAN: &str = "ran `tiny`";

/// The tiny example, built into `tiny.simpler` next to its input `x.npy`.
fn built_tiny() -> tempfile::TempDir {
    let ex = example();
    let p = ex.path();
    write_f32_npy(&p.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    let o = simpler(&["build", path_str(p)], p);
    assert!(o.status.success(), "{:?}", text(&o));
    ex
}

/// Runs `simpler run tiny.simpler <args>` in `p`, expecting exit code 2 before anything ran;
/// returns stderr.
fn refused_before_running(p: &Path, args: &[&str]) -> String {
    let mut all = vec!["run", "tiny.simpler"];
    all.extend(args);
    let o = simpler(&all, p);
    let (out, err) = text(&o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{all:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(!out.contains(RAN), "{all:?} ran:\n{out}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

/// An `--output` that is the run's input — by the same path, a hard link or a symbolic link
/// (on either side) — or its bundle is refused before the run, and the file is left as it was.
#[test]
fn an_output_that_is_an_input_is_refused_before_the_run() {
    let ex = built_tiny();
    let p = ex.path();
    let x = std::fs::read(p.join("x.npy")).unwrap();
    let bundle = std::fs::read(p.join("tiny.simpler")).unwrap();
    std::fs::hard_link(p.join("x.npy"), p.join("x_hard.npy")).unwrap();
    std::os::unix::fs::symlink(p.join("x.npy"), p.join("x_soft.npy")).unwrap();
    for (input, output) in [
        ("x.npy", "x.npy"),
        ("x.npy", "./x.npy"),
        ("x.npy", "x_hard.npy"),
        ("x.npy", "x_soft.npy"),
        ("x_soft.npy", "x.npy"),
    ] {
        let err = refused_before_running(
            p,
            &[
                "--input",
                &format!("x={input}"),
                "--output",
                &format!("y={output}"),
            ],
        );
        assert!(
            err.contains(&format!(
                "--output y: `{output}` is the same file as --input x (`{input}`)"
            )),
            "{err}"
        );
        assert_eq!(std::fs::read(p.join("x.npy")).unwrap(), x, "{output}");
    }
    let err = refused_before_running(p, &["--input", "x=x.npy", "--output", "y=tiny.simpler"]);
    assert!(err.contains("is the same file as the bundle"), "{err}");
    assert_eq!(std::fs::read(p.join("tiny.simpler")).unwrap(), bundle);
    let manifest = std::fs::read(p.join("simpler.toml")).unwrap();
    let o = simpler(
        &[
            "run",
            path_str(p),
            "--input",
            "x=x.npy",
            "--output",
            "y=simpler.toml",
        ],
        p,
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!out.contains(RAN), "{out}");
    assert!(err.contains("is the same file as the manifest"), "{err}");
    assert_eq!(std::fs::read(p.join("simpler.toml")).unwrap(), manifest);
}

/// An `--output` that is a `--check` reference is refused before the run: the reference is
/// never replaced, and a check never compares with a file the run wrote.
#[test]
fn an_output_that_is_a_check_reference_is_refused_and_the_reference_kept() {
    let ex = built_tiny();
    let p = ex.path();
    // The tiny orchestration leaves y zero: a check against this reference fails.
    write_f32_npy(&p.join("y.ref.npy"), &[4], &[9.0; 4]);
    let reference = std::fs::read(p.join("y.ref.npy")).unwrap();
    std::fs::hard_link(p.join("y.ref.npy"), p.join("y.link.npy")).unwrap();
    for output in ["y.ref.npy", "y.link.npy"] {
        let err = refused_before_running(
            p,
            &[
                "--input",
                "x=x.npy",
                "--output",
                &format!("y={output}"),
                "--check",
                "y=y.ref.npy",
            ],
        );
        assert!(
            err.contains(&format!(
                "`{output}` is the same file as --check y (`y.ref.npy`)"
            )),
            "{err}"
        );
        assert_eq!(std::fs::read(p.join("y.ref.npy")).unwrap(), reference);
    }
    // With the output elsewhere the run goes on, fails its check and keeps the reference.
    let o = simpler(
        &[
            "run",
            "tiny.simpler",
            "--input",
            "x=x.npy",
            "--output",
            "y=y.npy",
            "--check",
            "y=y.ref.npy",
        ],
        p,
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("FAIL y"), "{out}");
    assert_eq!(std::fs::read(p.join("y.ref.npy")).unwrap(), reference);
}

/// An `--output` path holding a directory, a FIFO or a symbolic link is refused before the
/// run, and left as it was.
#[test]
fn an_output_that_is_not_a_regular_file_is_refused_before_the_run() {
    use std::os::unix::fs::FileTypeExt;
    let ex = built_tiny();
    let p = ex.path();
    std::fs::create_dir(p.join("out.npy")).unwrap();
    simpler_test_support::files::mkfifo(&p.join("pipe.npy"));
    std::fs::write(p.join("other.npy"), b"other").unwrap();
    std::os::unix::fs::symlink(p.join("other.npy"), p.join("link.npy")).unwrap();
    for (output, kind) in [
        ("out.npy", "a directory"),
        ("pipe.npy", "a device, FIFO or socket"),
        ("link.npy", "a symbolic link"),
    ] {
        let err = refused_before_running(
            p,
            &["--input", "x=x.npy", "--output", &format!("y={output}")],
        );
        assert!(
            err.contains("error: --output y\n  caused by: refusing to replace")
                && err.contains(&format!("it is {kind}, not a regular file")),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_dir(p.join("out.npy")).unwrap().count(), 0);
    let fifo = std::fs::symlink_metadata(p.join("pipe.npy")).unwrap();
    assert!(fifo.file_type().is_fifo());
    assert!(std::fs::symlink_metadata(p.join("link.npy"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(p.join("other.npy")).unwrap(), b"other");
}

/// A scalar beyond its dtype's range is bad input, not infinity.
#[test]
fn an_out_of_range_scalar_exits_2() {
    let ex = example();
    let p = ex.path();
    let manifest = format!(
        "{MANIFEST}\n[[args]]\nname = \"alpha\"\ndirection = \"scalar\"\ndtype = \"f32\"\n"
    );
    std::fs::write(p.join("simpler.toml"), manifest).unwrap();
    write_f32_npy(&p.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    for (value, why) in [
        ("1e400", "1e400 is out of range for f32"),
        ("-3.5e38", "-3.5e38 is out of range for f32"),
    ] {
        let scalar = format!("alpha={value}");
        let o = simpler(
            &[
                "run",
                path_str(p),
                "--input",
                "x=x.npy",
                "--scalar",
                &scalar,
            ],
            p,
        );
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "stdout:\n{out}\nstderr:\n{err}");
        assert!(err.contains(&format!("--scalar {scalar}: {why}")), "{err}");
        assert!(!out.contains(RAN), "{out}");
    }
}

/// A bad `PTO2_RING_*` value is bad input (exit code 2), refused before anything is built or
/// run, naming the variable; `simpler bench` refuses it with 2 as well.
#[test]
fn bad_ring_environment_exits_2_naming_the_variable() {
    let ex = built_tiny();
    let p = ex.path();
    let cases = [
        (
            "PTO2_RING_TASK_WINDOW",
            "48",
            "environment variable PTO2_RING_TASK_WINDOW=\"48\": runtime_env.ring_task_window[0]: \
             must be a power of two",
        ),
        (
            "PTO2_RING_TASK_WINDOW",
            "64,64",
            "PTO2_RING_TASK_WINDOW=\"64,64\": `64,64` has 2 values; give 1 or 4",
        ),
        (
            "PTO2_RING_HEAP",
            "100",
            "PTO2_RING_HEAP=\"100\": runtime_env.ring_heap[0]: must be at least 1024 bytes",
        ),
        (
            "PTO2_RING_DEP_POOL",
            "pool",
            "PTO2_RING_DEP_POOL=\"pool\": `pool` is not a number",
        ),
    ];
    for (var, value, want) in cases {
        for target in ["tiny.simpler", path_str(p)] {
            let o = common::command()
                .args(["run", target, "--input", "x=x.npy"])
                .env(var, value)
                .current_dir(p)
                .output()
                .unwrap();
            let (out, err) = text(&o);
            assert_eq!(o.status.code(), Some(2), "{var}={value}: {err}");
            assert!(
                err.starts_with("error: environment variable ") && err.contains(want),
                "{err}"
            );
            assert!(!out.contains(RAN) && !err.contains("built `tiny`"), "{err}");
        }
    }
    let o = common::command()
        .args(["bench", "--tasks", "1", "--runs", "1"])
        .env("PTO2_RING_TASK_WINDOW", "48")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ring_task_window[0]: must be a power of two"),
        "{err}"
    );
    let o = simpler(&["bench", "--tasks", "0"], p);
    assert_eq!(o.status.code(), Some(2), "{:?}", text(&o));
}

/// A run whose orchestration submits no task succeeds with a warning on stderr.
#[test]
fn an_orchestration_that_submits_no_task_gets_a_warning() {
    let ex = built_tiny();
    let p = ex.path();
    let o = simpler(&["run", "tiny.simpler", "--input", "x=x.npy"], p);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains(RAN), "{out}");
    assert!(
        err.contains("warning: the orchestration of `tiny` submitted no task, so no kernel ran"),
        "{err}"
    );
}

/// `simpler build -o` naming the manifest or a source of the example (directly or through
/// a link) is refused with exit code 2, and the file is left as it was.
#[test]
fn build_never_writes_over_its_own_sources() {
    let ex = example();
    let p = ex.path();
    std::os::unix::fs::symlink(p.join("kernels/copy.c"), p.join("copy_link.c")).unwrap();
    for (out, what) in [
        ("kernels/copy.c", "the kernel 5 (aiv) source"),
        ("copy_link.c", "the kernel 5 (aiv) source"),
        ("orchestration.c", "the orchestration source"),
        ("simpler.toml", "the manifest"),
    ] {
        let before = std::fs::read(p.join(out)).unwrap();
        let o = simpler(&["build", path_str(p), "-o", out], p);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{out}: {err}");
        assert!(
            err.contains(&format!("error: -o {out}: it is the same file as {what}")),
            "{err}"
        );
        assert_eq!(std::fs::read(p.join(out)).unwrap(), before, "{out}");
    }
}

/// `simpler run … --output y=y.npy | true`: the output is written, a closed stdout ends the
/// printing without a panic, and the exit status is the run's (0, or 1 for a failed check).
#[test]
fn a_closed_stdout_keeps_the_outputs_and_the_exit_status() {
    let ex = built_tiny();
    let p = ex.path();
    let o = common::simpler_into_closed_pipe(
        &[
            "run",
            "tiny.simpler",
            "--input",
            "x=x.npy",
            "--output",
            "y=y.npy",
        ],
        p,
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        p.join("y.npy").is_file(),
        "the output was not written: {err}"
    );
    // A failing check still exits 1.
    write_f32_npy(&p.join("wrong.npy"), &[4], &[9.0; 4]);
    let o = common::simpler_into_closed_pipe(
        &[
            "run",
            "tiny.simpler",
            "--input",
            "x=x.npy",
            "--check",
            "y=wrong.npy",
        ],
        p,
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A trace file that cannot be written after a good run fails the command (exit 1, naming
/// it) but the run's outputs are written all the same; a device such as `/dev/full` is
/// refused as a trace path before the run (exit 2), so nothing a run produced is lost.
#[test]
fn a_failed_trace_write_keeps_the_outputs() {
    let ex = built_tiny();
    let p = ex.path();
    // /proc takes no new files, whoever asks (root included): the write fails after the run.
    let trace = format!("/proc/self/simpler-test-{}.json", std::process::id());
    let o = simpler(
        &[
            "run",
            "tiny.simpler",
            "--input",
            "x=x.npy",
            "--output",
            "y=y.npy",
            "--trace",
            &trace,
        ],
        p,
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains(RAN) && out.contains("wrote "), "{out}");
    assert!(
        err.contains("--trace") && err.contains("simpler-test-"),
        "{err}"
    );
    assert!(p.join("y.npy").is_file(), "the output was dropped: {err}");
    let y = simpler_toolchain::npy::read(&p.join("y.npy")).unwrap();
    assert_eq!(y.shape, vec![4]);
    // /dev/full: refused before anything ran.
    let err = refused_before_running(
        p,
        &[
            "--input",
            "x=x.npy",
            "--output",
            "y=y2.npy",
            "--trace",
            "/dev/full",
        ],
    );
    assert!(err.contains("/dev/full"), "{err}");
}

/// An `--input` that is `/dev/zero`, a FIFO with no writer or a directory is refused at once
/// (exit 2) with the file and what it is named; an `.npy` whose data is longer or shorter
/// than its header declares is refused with both sizes.
#[test]
fn an_input_that_is_not_a_regular_file_or_not_its_declared_size_is_refused() {
    let ex = built_tiny();
    let p = ex.path();
    std::fs::create_dir(p.join("dir")).unwrap();
    for (input, kind) in simpler_test_support::files::non_regular(&p.join("dir"), "pipe.npy") {
        let input = path_str(&input).to_string();
        let err = refused_before_running(p, &["--input", &format!("x={input}")]);
        assert!(
            err.contains(&format!("`{input}` is {kind}, not a regular file")),
            "{err}"
        );
    }
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut longer = data.clone();
    longer.extend_from_slice(&[0; 8]);
    common::write_npy_raw(&p.join("long.npy"), "<f4", &[4], &longer);
    let err = refused_before_running(p, &["--input", "x=long.npy"]);
    assert!(err.contains("needs 16 bytes, got 24"), "{err}");
    common::write_npy_raw(&p.join("short.npy"), "<f4", &[4], &data[..12]);
    let err = refused_before_running(p, &["--input", "x=short.npy"]);
    assert!(err.contains("needs 16 bytes, got 12"), "{err}");
    // A shape whose byte count overflows 64 bits: named with the limit, no saturated count.
    common::write_npy_raw(&p.join("huge.npy"), "<f4", &[1 << 32, 1 << 32], &[]);
    let err = refused_before_running(p, &["--input", "x=huge.npy"]);
    assert!(
        err.contains("huge.npy")
            && err.contains("does not fit in 64 bits")
            && err.contains("at most 4294967296 bytes")
            && !err.contains(&u64::MAX.to_string()),
        "{err}"
    );
}
