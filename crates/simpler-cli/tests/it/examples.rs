//! End-to-end tests of the `simpler` binary on the repository's examples, each under both
//! runtime variants (`--runtime`), of how the runtime is chosen, and of how `simpler run`
//! fails on bad input and failed runs.
//!
//! Every case spawns the real binary on files in a temporary directory. Inputs and references
//! come from `simpler-examples` (independent of the runtime); outputs are read back with
//! `npyz` (independent of `simpler_toolchain::npy`). Every failure case passes `--output` into an empty
//! `out/` directory and asserts that it is still empty afterwards: no output file and no
//! leftover temporary file.
//!
//! Exit codes: 2 when the input is at fault (arguments, `.npy` files, bundle, code that does
//! not load; nothing ran), 1 when the run or a check failed.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::{path_str, simpler, text, write_f32_npy, write_npy_raw};
use simpler_examples::{Array, Scalar};

// ---- helpers -------------------------------------------------------------------------------

/// `examples/<name>` in the repository.
fn example_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .canonicalize()
        .unwrap_or_else(|e| panic!("examples/{name}: {e}"))
}

/// What one `simpler` invocation did.
struct Outcome {
    /// What the case is about, for failure messages.
    label: String,
    command: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    /// Names the case in failure messages.
    fn labelled(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }

    fn context(&self) -> String {
        format!(
            "{}\n$ simpler {}\nexit code {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.label, self.command, self.code, self.stdout, self.stderr
        )
    }

    /// Asserts exit code 0.
    fn succeeded(&self) -> &Self {
        assert_eq!(self.code, Some(0), "{}", self.context());
        self
    }

    /// Asserts the exit code, an `error: ` message on stderr containing every one of
    /// `needles`, and that no output was reported written.
    fn failed(&self, code: i32, needles: &[&str]) -> &Self {
        assert_eq!(self.code, Some(code), "{}", self.context());
        assert!(self.stderr.contains("error: "), "{}", self.context());
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "stderr lacks {needle:?}\n{}",
                self.context()
            );
        }
        assert!(!self.stdout.contains("wrote "), "{}", self.context());
        self
    }
}

/// Runs `simpler <args>` in `cwd`.
fn run_simpler<S: AsRef<str>>(args: &[S], cwd: &Path) -> Outcome {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    outcome(&args, &simpler(&args, cwd))
}

/// What `simpler <args>`, finished as `o`, did.
fn outcome(args: &[&str], o: &std::process::Output) -> Outcome {
    let (stdout, stderr) = text(o);
    Outcome {
        label: String::new(),
        command: args.join(" "),
        code: o.status.code(),
        stdout,
        stderr,
    }
}

/// Reads an f32 `.npy` file with `npyz`: (shape, data).
fn read_f32_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(f.dtype().descr(), "'<f4'", "{}", path.display());
    assert_eq!(f.order(), npyz::Order::C, "{}", path.display());
    let shape = f.shape().to_vec();
    (shape, f.into_vec::<f32>().unwrap())
}

/// Asserts that `dir` exists and is empty.
fn assert_empty(dir: &Path) {
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(names.is_empty(), "{} holds {names:?}", dir.display());
}

/// Every file name under `dir`, recursively, sorted (to prove a directory was left alone).
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(tree(&p));
        }
        out.push(p);
    }
    out.sort();
    out
}

/// An example's inputs (`<name>.npy`) and reference (`<out>.ref.npy`) written into a fresh
/// temporary directory, with an empty `out/` directory for results, and its scalar values.
struct Workdir {
    dir: tempfile::TempDir,
    example: &'static str,
    inputs: Vec<Array>,
    scalars: Vec<Scalar>,
    reference: Array,
}

impl Workdir {
    fn new(example: &'static str) -> Workdir {
        let inputs = simpler_examples::inputs(example).unwrap();
        let mut refs = simpler_examples::reference(example, &inputs).unwrap();
        assert_eq!(refs.len(), 1, "every example has one output");
        let w = Workdir {
            dir: tempfile::tempdir().unwrap(),
            example,
            inputs,
            scalars: simpler_examples::scalars(example).unwrap(),
            reference: refs.remove(0),
        };
        for a in &w.inputs {
            common::write_array(&w.path(&format!("{}.npy", a.name)), a);
        }
        let r = &w.reference;
        common::write_array(&w.path(&format!("{}.ref.npy", r.name)), r);
        std::fs::create_dir(w.out_dir()).unwrap();
        w
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn out_dir(&self) -> PathBuf {
        self.path("out")
    }

    /// Where `--output` writes the result.
    fn out_file(&self) -> PathBuf {
        self.out_dir().join(format!("{}.npy", self.reference.name))
    }

    fn ref_file(&self) -> PathBuf {
        self.path(&format!("{}.ref.npy", self.reference.name))
    }

    /// `simpler build examples/<example> -o <tmp>/<example>.simpler`, which must succeed.
    fn build(&self) -> PathBuf {
        let bundle = self.path(&format!("{}.simpler", self.example));
        let dir = example_dir(self.example);
        run_simpler(
            &["build", path_str(&dir), "-o", path_str(&bundle)],
            self.dir.path(),
        )
        .succeeded();
        bundle
    }

    /// `--input NAME=FILE` for every input.
    fn input_flags(&self) -> Vec<String> {
        self.inputs
            .iter()
            .flat_map(|a| {
                let file = self.path(&format!("{}.npy", a.name));
                [
                    "--input".to_string(),
                    format!("{}={}", a.name, file.display()),
                ]
            })
            .collect()
    }

    /// `--scalar NAME=VALUE` for every scalar argument.
    fn scalar_flags(&self) -> Vec<String> {
        self.scalars
            .iter()
            .flat_map(|s| ["--scalar".to_string(), s.flag_value()])
            .collect()
    }

    /// `--output NAME=out/NAME.npy`.
    fn output_flag(&self) -> [String; 2] {
        [
            "--output".into(),
            format!("{}={}", self.reference.name, self.out_file().display()),
        ]
    }

    /// `simpler run <target> <flags>` in the temporary directory.
    fn run(&self, target: &Path, flags: &[String]) -> Outcome {
        let mut args = vec!["run".to_string(), path_str(target).to_string()];
        args.extend_from_slice(flags);
        run_simpler(&args, self.dir.path())
    }

    /// Every input and scalar, the output and a check against the true reference.
    fn full_flags(&self) -> Vec<String> {
        let mut flags = self.input_flags();
        flags.extend(self.scalar_flags());
        flags.extend(self.output_flag());
        flags.push("--check".into());
        flags.push(format!(
            "{}={}",
            self.reference.name,
            self.ref_file().display()
        ));
        flags
    }

    /// Asserts a passed run: the PASS line, and the output file read back with `npyz`
    /// matching the reference in shape and values.
    fn assert_passed(&self, o: &Outcome) {
        o.succeeded();
        let r = &self.reference;
        let pass = format!("PASS {}: {} elements match", r.name, r.numel());
        assert!(o.stdout.contains(&pass), "{}", o.context());
        let (shape, data) = read_f32_npy(&self.out_file());
        assert_eq!(shape, r.shape);
        if let Err(m) = common::close(&data, &r.data) {
            panic!("{}: output differs from the reference: {m}", self.example);
        }
    }
}

/// The names `--runtime` takes: every runtime variant.
fn runtimes() -> [&'static str; 2] {
    simpler_host::Runtime::ALL.map(simpler_host::Runtime::name)
}

/// Builds an example into a bundle and, under each runtime variant (`--runtime`), runs it
/// with a check and compares its output file with the reference; the variants' outputs
/// must be the same bits.
fn end_to_end(example: &'static str) {
    let w = Workdir::new(example);
    let bundle = w.build();
    let mut outputs = Vec::new();
    for runtime in runtimes() {
        let mut flags = w.full_flags();
        flags.extend(["--runtime".into(), runtime.into()]);
        let o = w.run(&bundle, &flags).labelled(runtime);
        w.assert_passed(&o);
        assert!(
            o.stdout.contains(&format!("under {runtime}")),
            "{}",
            o.context()
        );
        outputs.push(read_f32_npy(&w.out_file()).1);
        std::fs::remove_file(w.out_file()).unwrap();
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&outputs[0]) == bits(&outputs[1]),
        "{example}: the runtimes' outputs differ"
    );
}

// ---- the examples ----------------------------------------------------------------------------

/// Every example in `simpler_examples::EXAMPLES` has an end-to-end test below.
#[test]
fn every_example_is_covered() {
    let covered = ["vector_add", "formula", "gemm", "softmax", "axpy"];
    assert_eq!(simpler_examples::EXAMPLES, covered);
}

#[test]
fn vector_add_end_to_end() {
    end_to_end("vector_add");
}

#[test]
fn formula_end_to_end() {
    end_to_end("formula");
}

#[test]
fn gemm_end_to_end() {
    end_to_end("gemm");
}

#[test]
fn softmax_end_to_end() {
    end_to_end("softmax");
}

/// `y = alpha * x + y`: an `inout` argument (given with --input, written with --output and
/// checked) and a signature scalar (--scalar alpha=2.5).
#[test]
fn axpy_end_to_end() {
    end_to_end("axpy");
}

/// `--runtime` takes the runtime names only: anything else is a usage error (exit 2) listing
/// them, in `simpler run` and `simpler build`, and nothing runs or is written.
#[test]
fn a_bad_runtime_exits_2_listing_the_runtimes() {
    let w = Workdir::new("formula");
    let bundle = w.build();
    let mut flags = w.full_flags();
    flags.extend(["--runtime".into(), "hbg".into()]);
    let names = runtimes();
    let needles = [
        "invalid value 'hbg' for '--runtime <RUNTIME>'",
        names[0],
        names[1],
    ];
    w.run(&bundle, &flags).failed(2, &needles);
    assert_empty(&w.out_dir());
    let out = w.path("stamped.simpler");
    let dir = example_dir("formula");
    run_simpler(
        &[
            "build",
            path_str(&dir),
            "-o",
            path_str(&out),
            "--runtime",
            "hbg",
        ],
        w.dir.path(),
    )
    .failed(2, &needles);
    assert!(!out.exists());
}

/// A manifest's `runtime = "host_build_graph"` is honoured, in memory and through the bundle
/// it builds: the run says so, and a task window too small for vector_add's 256 tasks fails
/// the host-built graph at once (FLOW_CONTROL_DEADLOCK naming PTO2_RING_TASK_WINDOW), while
/// `--runtime tensormap_and_ringbuffer` overrides it and the same window suffices (the rings
/// reclaim). `simpler build --runtime` stamps a bundle the same way.
#[test]
fn a_manifest_runtime_is_honoured_and_run_runtime_overrides_it() {
    let w = Workdir::new("vector_add");
    let ex = edited_example(
        w.dir.path(),
        "vector_add",
        "simpler.toml",
        "name = \"vector_add\"\n",
        "name = \"vector_add\"\nruntime = \"host_build_graph\"\n",
    );
    let bundle = w.path("hbg.simpler");
    run_simpler(
        &["build", path_str(&ex), "-o", path_str(&bundle)],
        w.dir.path(),
    )
    .succeeded();
    assert_eq!(
        simpler_host::Bundle::read(&bundle).unwrap().runtime,
        Some(simpler_host::Runtime::HostBuildGraph)
    );
    let hbg = "under host_build_graph (graph of 256 tasks built on the host";
    for target in [&ex, &bundle] {
        let o = w.run(target, &w.full_flags());
        w.assert_passed(&o);
        assert!(o.stdout.contains(hbg), "{}", o.context());
        std::fs::remove_file(w.out_file()).unwrap();
    }
    let small_window = |flags: &[String]| {
        let mut args = vec!["run", path_str(&bundle)];
        args.extend(flags.iter().map(String::as_str));
        let o = common::command()
            .args(&args)
            .env("PTO2_RING_TASK_WINDOW", "64")
            .current_dir(w.dir.path())
            .output()
            .unwrap();
        outcome(&args, &o).labelled("PTO2_RING_TASK_WINDOW=64")
    };
    small_window(&w.full_flags()).failed(
        1,
        &[
            "running `vector_add` failed",
            "FLOW_CONTROL_DEADLOCK",
            "PTO2_RING_TASK_WINDOW",
        ],
    );
    assert_empty(&w.out_dir());
    let mut tmr = w.full_flags();
    tmr.extend(["--runtime".into(), "tensormap_and_ringbuffer".into()]);
    let o = small_window(&tmr);
    w.assert_passed(&o);
    assert!(
        o.stdout.contains("under tensormap_and_ringbuffer"),
        "{}",
        o.context()
    );
    std::fs::remove_file(w.out_file()).unwrap();

    // `simpler build --runtime` over the manifest's, and on an example without one.
    for (example, dir) in [("edited", ex.clone()), ("plain", example_dir("vector_add"))] {
        let stamped = w.path(&format!("{example}.simpler"));
        let o = run_simpler(
            &[
                "build",
                path_str(&dir),
                "-o",
                path_str(&stamped),
                "--runtime",
                "tensormap_and_ringbuffer",
            ],
            w.dir.path(),
        );
        o.succeeded();
        assert!(
            o.stdout.contains("runtime tensormap_and_ringbuffer"),
            "{}",
            o.context()
        );
        assert_eq!(
            simpler_host::Bundle::read(&stamped).unwrap().runtime,
            Some(simpler_host::Runtime::TensormapAndRingbuffer),
            "{example}"
        );
    }
    // Without --runtime or a manifest key the bundle names no runtime.
    assert_eq!(simpler_host::Bundle::read(w.build()).unwrap().runtime, None);
}

/// axpy's scalar is required, parsed as its dtype, and changes the result.
#[test]
fn axpy_scalar_is_required_and_used() {
    let w = Workdir::new("axpy");
    let bundle = w.build();
    let mut flags = w.input_flags();
    flags.extend(w.output_flag());
    w.run(&bundle, &flags)
        .failed(2, &["missing --scalar for `alpha`"]);
    let mut bad = flags.clone();
    bad.extend(["--scalar".into(), "alpha=two".into()]);
    w.run(&bundle, &bad)
        .failed(2, &["--scalar alpha=two", "not a number (f32 expected)"]);
    let mut bad = flags.clone();
    bad.extend([
        "--scalar".into(),
        format!("x={}", w.path("x.npy").display()),
    ]);
    w.run(&bundle, &bad).failed(
        2,
        &["--scalar x: `x` is an `in` argument: use --input, not --scalar"],
    );
    assert_empty(&w.out_dir());
    // Another alpha gives another (correct) result: y = -1 * x + y.
    flags.extend(["--scalar".into(), "alpha=-1".into()]);
    w.run(&bundle, &flags).succeeded();
    let (_, y) = read_f32_npy(&w.out_file());
    let x = &w.inputs[0].data;
    let y0 = &w.inputs[1].data;
    let want = simpler_examples::axpy_ref(-1.0, x, y0);
    assert!(common::close(&y, &want).is_ok());
}

/// With neither --output nor --check the run still works, and says its result was dropped.
#[test]
fn a_run_without_output_or_check_says_so() {
    let w = Workdir::new("vector_add");
    let bundle = w.build();
    let o = w.run(&bundle, &w.input_flags());
    o.succeeded();
    assert!(
        o.stdout
            .contains("(no --output or --check given: the result was not saved or checked)"),
        "{}",
        o.context()
    );
    let o = w.run(&bundle, &w.full_flags());
    w.assert_passed(&o);
    assert!(
        !o.stdout.contains("no --output or --check"),
        "{}",
        o.context()
    );
}

/// `simpler run <example dir>` builds in memory and leaves the example directory as it was.
#[test]
fn run_on_an_example_directory_builds_in_memory() {
    let w = Workdir::new("softmax");
    let dir = example_dir("softmax");
    let before = tree(&dir);
    let o = w.run(&dir, &w.full_flags());
    w.assert_passed(&o);
    assert!(
        o.stderr.contains("built `softmax`") && o.stderr.contains("in memory"),
        "{}",
        o.context()
    );
    assert_eq!(tree(&dir), before, "the example directory was written to");
}

// ---- bad input: exit 2, nothing written ----------------------------------------------------

/// Inputs that disagree with `formula`'s signature (a, b: in f32[16384]; f: out f32[16384]),
/// or files that are not usable `.npy` files.
#[test]
fn bad_inputs_exit_2_naming_the_cause_and_write_nothing() {
    let w = Workdir::new("formula");
    let bundle = w.build();
    const N: u64 = 16384;
    let zeros = vec![0u8; 8 * N as usize];
    write_npy_raw(&w.path("i32.npy"), "<i4", &[N], &zeros[..4 * N as usize]);
    write_npy_raw(&w.path("f64.npy"), "<f8", &[N], &zeros);
    write_f32_npy(&w.path("2d.npy"), &[2, N / 2], &vec![0.0; N as usize]);
    write_f32_npy(&w.path("short.npy"), &[100], &[0.0; 100]);
    std::fs::write(
        w.path("garbage.npy"),
        b"these are not the bytes you are looking for",
    )
    .unwrap();
    write_npy_raw(&w.path("cut_data.npy"), "<f4", &[N], &zeros[..400]);
    let valid = std::fs::read(w.path("a.npy")).unwrap();
    std::fs::write(w.path("cut_header.npy"), &valid[..40]).unwrap();
    std::fs::write(w.path("empty.npy"), b"").unwrap();

    let p = |name: &str| w.path(name).display().to_string();
    let (a, b) = (format!("a={}", p("a.npy")), format!("b={}", p("b.npy")));
    let with_a = |file: &str| vec![format!("a={}", p(file)), b.clone()];
    let cases: Vec<(&str, Vec<String>, Vec<&str>)> = vec![
        (
            "missing --input",
            vec![a.clone()],
            vec!["missing --input for `b`"],
        ),
        (
            "an extra input of an unknown name",
            vec![a.clone(), b.clone(), format!("zz={}", p("a.npy"))],
            vec!["--input zz", "no argument `zz`", "`a`, `b`, `f`"],
        ),
        (
            "the output given as an input",
            vec![a.clone(), b.clone(), format!("f={}", p("a.npy"))],
            vec!["--input f: `f` is an `out` argument: use --output (and --check), not --input"],
        ),
        (
            "an unknown name instead of b",
            vec![a.clone(), format!("zz={}", p("b.npy"))],
            vec!["--input zz", "no argument `zz`", "`a`, `b`, `f`"],
        ),
        (
            "wrong shape, same element count",
            with_a("2d.npy"),
            vec!["--input a: wrong shape", "[16384]", "[2, 8192]"],
        ),
        (
            "wrong shape, fewer elements",
            with_a("short.npy"),
            vec!["--input a: wrong shape", "[100]"],
        ),
        (
            "int32 for an f32 argument",
            with_a("i32.npy"),
            vec!["--input a: wrong dtype", "expects f32", "holds i32"],
        ),
        (
            "float64 for an f32 argument",
            with_a("f64.npy"),
            vec!["--input a: wrong dtype", "expects f32", "holds f64"],
        ),
        (
            "a missing file",
            with_a("absent.npy"),
            vec!["--input a", "absent.npy` does not exist"],
        ),
        (
            "garbage bytes",
            with_a("garbage.npy"),
            vec!["--input a", "garbage.npy` is not a .npy file"],
        ),
        (
            "an empty file",
            with_a("empty.npy"),
            vec!["--input a", "empty.npy` is not a .npy file"],
        ),
        (
            "a valid header, truncated data",
            with_a("cut_data.npy"),
            vec![
                "--input a",
                "data length mismatch",
                "needs 65536 bytes, got 400",
            ],
        ),
        (
            "a file cut inside its header",
            with_a("cut_header.npy"),
            vec!["--input a", "cut_header.npy` has a malformed .npy header"],
        ),
    ];
    for (what, inputs, needles) in cases {
        let mut flags: Vec<String> = inputs
            .into_iter()
            .flat_map(|i| ["--input".to_string(), i])
            .collect();
        flags.extend(w.output_flag());
        w.run(&bundle, &flags).labelled(what).failed(2, &needles);
        assert_empty(&w.out_dir());
    }

    // A reference of the wrong shape is refused before anything runs, too.
    let mut flags = w.input_flags();
    flags.extend(w.output_flag());
    flags.extend(["--check".into(), format!("f={}", p("short.npy"))]);
    w.run(&bundle, &flags)
        .failed(2, &["--check f: wrong shape", "[100]"]);
    assert_empty(&w.out_dir());
}

/// A bundle with one byte flipped, cut in half or empty, and a file that is no bundle at all,
/// are refused with their cause.
#[test]
fn damaged_bundles_exit_2_and_write_nothing() {
    let w = Workdir::new("formula");
    let good = std::fs::read(w.build()).unwrap();
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x01;
    let half = good[..good.len() / 2].to_vec();
    let not_a_bundle = std::fs::read(w.path("a.npy")).unwrap();
    let cases: [(&str, Vec<u8>, &[&str]); 4] = [
        (
            "flipped.simpler",
            flipped,
            &["checksum mismatch", "corrupt"],
        ),
        ("half.simpler", half, &["truncated"]),
        ("empty.simpler", Vec::new(), &["truncated"]),
        ("npy.simpler", not_a_bundle, &["not a simpler bundle"]),
    ];
    let mut flags = w.input_flags();
    flags.extend(w.output_flag());
    for (name, bytes, needles) in cases {
        let path = w.path(name);
        std::fs::write(&path, bytes).unwrap();
        let o = w.run(&path, &flags).labelled(name);
        let loading = format!("cannot load bundle `{}`", path.display());
        o.failed(2, &[&loading]).failed(2, needles);
        assert_empty(&w.out_dir());
    }
}

/// A manifest naming an entry symbol its library does not export: `simpler build` and `simpler
/// run <dir>` refuse it at build time (exit 2) naming the symbol, the source and the manifest
/// field; a bundle carrying such an entry (made by hand: the build no longer lets one through)
/// is refused when it is loaded (exit 2) naming the symbol. Nothing is written.
#[test]
fn missing_entry_symbols_exit_2_naming_the_symbol() {
    let cases = [
        (
            "entry = \"kernel_entry\"",
            "entry = \"no_such_symbol\"",
            &[
                "kernel 0 (aiv) `",
                "kernels/add.c` does not export its entry symbol `no_such_symbol`",
                "named by `kernels[0].entry` in `",
                "simpler.toml`",
            ][..],
            "kernel `add` (func 0) image does not export the entry symbol `no_such_symbol`",
        ),
        (
            "entry = \"aicpu_orchestration_entry\"",
            "entry = \"no_such_orchestration\"",
            &[
                "orchestration `",
                "orchestration.c` does not export its entry symbol `no_such_orchestration`",
                "named by `orchestration.entry` in `",
            ][..],
            "orchestration image does not export the entry symbol `no_such_orchestration`",
        ),
    ];
    let w = Workdir::new("vector_add");
    let src = example_dir("vector_add");
    let mut flags = w.input_flags();
    flags.extend(w.output_flag());
    let good = simpler_host::Bundle::read(w.build()).unwrap();
    for (i, (from, to, build_needles, load_needle)) in cases.into_iter().enumerate() {
        // A copy of examples/vector_add with one entry renamed in its manifest.
        let ex = w.path(&format!("example{i}"));
        std::fs::create_dir_all(ex.join("kernels")).unwrap();
        for f in ["orchestration.c", "kernels/add.c"] {
            std::fs::copy(src.join(f), ex.join(f)).unwrap();
        }
        let manifest = std::fs::read_to_string(src.join("simpler.toml")).unwrap();
        assert_eq!(manifest.matches(from).count(), 1, "{manifest}");
        std::fs::write(ex.join("simpler.toml"), manifest.replace(from, to)).unwrap();

        // `simpler build` fails...
        let bundle = w.path(&format!("example{i}.simpler"));
        run_simpler(
            &["build", path_str(&ex), "-o", path_str(&bundle)],
            w.dir.path(),
        )
        .labelled(to)
        .failed(2, build_needles);
        assert!(!bundle.exists());
        // ...and so does `simpler run` on the directory (built in memory).
        w.run(&ex, &flags)
            .labelled(to)
            .failed(2, &["cannot build `"])
            .failed(2, build_needles);
        assert_empty(&w.out_dir());

        // A bundle with the entry renamed is refused when loaded.
        let mut b = good.clone();
        let symbol = to.split('"').nth(1).unwrap().to_string();
        if i == 0 {
            b.kernels[0].code.entry = symbol;
        } else {
            b.orchestration.entry = symbol;
        }
        b.write(&bundle).unwrap();
        w.run(&bundle, &flags)
            .labelled(to)
            .failed(2, &["cannot load `vector_add`", load_needle]);
        assert_empty(&w.out_dir());
    }
}

// ---- failed runs: exit 1, nothing written --------------------------------------------------

const TINY_MANIFEST: &str = r#"name = "tiny"

[orchestration]
source = "orchestration.c"

[[kernels]]
func_id = 0
core = "aiv"
source = "kernels/double.c"

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

/// One AIV task running func 0 on x (input) and y (written).
const TINY_ORCH: &str = r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_add_input(&d, &args->tensors[0]);
    simpler_task_add_output_existing(&d, &args->tensors[1]);
    int32_t rc = simpler_submit(ops, &d, NULL);
    return rc;
}
"#;

/// y = 2 x.
const TINY_KERNEL: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    const SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    SimplerChipTensor *y = simpler_arg_tensor(args, 1);
    for (uint64_t i = 0; i < x->shapes[0]; ++i)
        SIMPLER_TENSOR_DATA(float, y)[i] = 2.0f * SIMPLER_TENSOR_DATA(float, x)[i];
}
"#;

/// `src` with `from` (which must occur exactly once) replaced by `to`.
fn edit(src: &str, from: &str, to: &str) -> String {
    assert_eq!(src.matches(from).count(), 1, "{from:?} in\n{src}");
    src.replace(from, to)
}

/// The tiny example (manifest, `orch`, `kernel`) in a temporary directory with its input
/// `x.npy` = [1, 2, 3, 4] and an empty `out/`; returns it and the `run` arguments.
fn tiny(orch: &str, kernel: &str) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir(p.join("kernels")).unwrap();
    std::fs::create_dir(p.join("out")).unwrap();
    std::fs::write(p.join("simpler.toml"), TINY_MANIFEST).unwrap();
    std::fs::write(p.join("orchestration.c"), orch).unwrap();
    std::fs::write(p.join("kernels/double.c"), kernel).unwrap();
    write_f32_npy(&p.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    let args = ["run", ".", "--input", "x=x.npy", "--output", "y=out/y.npy"]
        .map(String::from)
        .to_vec();
    (dir, args)
}

/// Runs the tiny example and asserts a failed run: exit 1, `needles` on stderr, no output.
fn tiny_fails(orch: &str, kernel: &str, needles: &[&str]) {
    let (dir, args) = tiny(orch, kernel);
    let o = run_simpler(&args, dir.path());
    o.failed(1, &["error: running `tiny` failed"])
        .failed(1, needles);
    assert_empty(&dir.path().join("out"));
}

/// The control for the failure cases below: unedited, the tiny example works.
#[test]
fn tiny_example_doubles_its_input() {
    let (dir, args) = tiny(TINY_ORCH, TINY_KERNEL);
    run_simpler(&args, dir.path()).succeeded();
    let (shape, y) = read_f32_npy(&dir.path().join("out/y.npy"));
    assert_eq!((shape, y), (vec![4], vec![2.0, 4.0, 6.0, 8.0]));
}

#[test]
fn kernel_fatal_error_exits_1_with_its_code() {
    let kernel = edit(
        TINY_KERNEL,
        "    for (",
        "    simpler_kernel_fail(args, 42);\n    return;\n    for (",
    );
    // The kernel is named by its name (the source's stem), not only by its func id.
    tiny_fails(
        TINY_ORCH,
        &kernel,
        &["KERNEL_FATAL", "kernel `double` (func 0)", "fatal code 42"],
    );
}

/// The orchestration submits its task, then reports a fatal error and returns non-zero.
#[test]
fn orchestration_fatal_error_exits_1_with_its_message() {
    let orch = edit(
        TINY_ORCH,
        "    return rc;",
        "    (void)rc;\n    simpler_report_fatal(ops, SIMPLER_ORCH_EXPLICIT_FATAL, \"boom\");\n    \
         return SIMPLER_ORCH_EXPLICIT_FATAL;",
    );
    tiny_fails(&orch, TINY_KERNEL, &["EXPLICIT_ORCH_FATAL", "boom"]);
}

/// Submits the runtime must refuse: a func id nobody registered, and func 0 (an AIV
/// kernel) on an AIC core.
#[test]
fn invalid_submits_exit_1_naming_the_func_id() {
    let cases = [
        ("SIMPLER_CORE_AIV, 7", &["INVALID_ARGS", "func id 7"][..]),
        (
            "SIMPLER_CORE_AIC, 0",
            &["INVALID_ARGS", "func id 0", "core type"][..],
        ),
    ];
    for (submit, needles) in cases {
        let orch = edit(TINY_ORCH, "SIMPLER_CORE_AIV, 0", submit);
        tiny_fails(&orch, TINY_KERNEL, needles);
    }
}

/// A copy of `examples/<example>` in `dir` with `from` (exactly once in `file`) replaced by
/// `to`.
fn edited_example(dir: &Path, example: &str, file: &str, from: &str, to: &str) -> PathBuf {
    let src = example_dir(example);
    let dst = dir.join(format!("{example}-edited"));
    std::fs::create_dir_all(dst.join("kernels")).unwrap();
    for e in std::fs::read_dir(src.join("kernels")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dst.join("kernels").join(p.file_name().unwrap())).unwrap();
    }
    for f in ["simpler.toml", "orchestration.c"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let text = std::fs::read_to_string(dst.join(file)).unwrap();
    std::fs::write(dst.join(file), edit(&text, from, to)).unwrap();
    dst
}

/// The example kernels check the argument counts their task was submitted with
/// (`simpler_expect_args`): a task short of a tensor or a scalar fails the run with fatal code
/// 1000 + its tensor count instead of reading a missing argument.
#[test]
fn example_kernels_refuse_tasks_with_missing_arguments() {
    let cases = [
        (
            "vector_add",
            "        simpler_task_add_input(&d, &vb);\n",
            "fatal code 1002",
        ),
        (
            "axpy",
            "            simpler_task_add_scalar(&d, alpha_bits);\n",
            "fatal code 1002",
        ),
    ];
    for (example, drop, code) in cases {
        let w = Workdir::new(example);
        let ex = edited_example(w.dir.path(), example, "orchestration.c", drop, "");
        let o = w.run(&ex, &w.full_flags()).labelled(example);
        o.failed(
            1,
            &[&format!("running `{example}` failed"), "KERNEL_FATAL", code],
        );
        assert_empty(&w.out_dir());
    }
}

// ---- a failed check: exit 1 ----------------------------------------------------------------

/// A reference off by 1.0 at one element of a 2-D output: FAIL names its [row, col]. The run
/// itself succeeded, so the output is written (before the checks) and is correct. A
/// tolerance that covers the difference passes.
#[test]
fn failed_check_exits_1_naming_the_first_mismatch() {
    let w = Workdir::new("softmax");
    let bundle = w.build();
    let r = &w.reference;
    let mut wrong = r.clone();
    wrong.data[3 * 256 + 5] += 1.0;
    let wrong_path = w.path("y.wrong.npy");
    common::write_array(&wrong_path, &wrong);

    let mut flags = w.input_flags();
    flags.extend(w.output_flag());
    flags.extend(["--check".into(), format!("y={}", wrong_path.display())]);
    let o = w.run(&bundle, &flags);
    assert_eq!(o.code, Some(1), "{}", o.context());
    assert!(
        o.stdout.contains("FAIL y: 1 of 262144 elements differ")
            && o.stdout.contains("first mismatch at [3, 5]"),
        "{}",
        o.context()
    );
    assert!(
        o.stderr.contains("error: check failed for `y`"),
        "{}",
        o.context()
    );
    let (_, data) = read_f32_npy(&w.out_file());
    assert!(common::close(&data, &r.data).is_ok());

    flags.extend(["--atol".into(), "1.5".into()]);
    let o = w.run(&bundle, &flags);
    o.succeeded();
    assert!(o.stdout.contains("PASS y"), "{}", o.context());
}

// ---- traces --------------------------------------------------------------------------------

/// softmax's two kernels share the entry symbol `kernel_entry`: the trace, `simpler trace
/// summary` and the SVG tell them apart by their names (their sources' stems).
#[test]
fn kernels_of_one_entry_symbol_get_a_summary_row_each_named_by_their_names() {
    let w = Workdir::new("softmax");
    let bundle = w.build();
    let b = simpler_host::Bundle::read(&bundle).unwrap();
    assert!(b.kernels.iter().all(|k| k.code.entry == "kernel_entry"));
    let trace = w.path("softmax.perfetto-trace");
    let mut flags = w.full_flags();
    flags.extend(["--trace".into(), trace.display().to_string()]);
    w.assert_passed(&w.run(&bundle, &flags));
    let t = simpler_trace::read(&std::fs::read(&trace).unwrap()).unwrap();
    let summary = simpler_trace::summary::Summary::of(&t);
    let rows: Vec<&str> = summary.runs[0]
        .kernels
        .iter()
        .map(|k| k.name.as_str())
        .collect();
    assert_eq!(rows, ["row_normalize", "row_stats"]);
    let o = run_simpler(
        &[
            "trace".into(),
            "summary".into(),
            trace.display().to_string(),
        ],
        w.dir.path(),
    );
    o.succeeded();
    assert!(
        o.stdout.contains("row_stats")
            && o.stdout.contains("row_normalize")
            && !o.stdout.contains("kernel_entry"),
        "{}",
        o.context()
    );
    let svg = w.path("softmax.svg");
    run_simpler(
        &[
            "trace".into(),
            "svg".into(),
            trace.display().to_string(),
            "-o".into(),
            svg.display().to_string(),
        ],
        w.dir.path(),
    )
    .succeeded();
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("row_stats") && svg.contains("row_normalize"),
        "the legend names both kernels"
    );
}

/// `simpler run gemm --trace` at level orchestrator: the Perfetto file holds every subtask
/// once with start < end, every edge's consumer starts after its producer ended, the AICPU
/// threads and host spans are there; `--deps` writes dot and JSON; `simpler trace summary` and
/// `svg` read the file.
#[test]
fn gemm_trace_and_deps() {
    let w = Workdir::new("gemm");
    let bundle = w.build();
    let trace = w.path("gemm.perfetto-trace");
    let dot = w.path("gemm.dot");
    let mut flags = w.full_flags();
    flags.extend([
        "--trace".into(),
        trace.display().to_string(),
        "--trace-level".into(),
        "orchestrator".into(),
        "--deps".into(),
        dot.display().to_string(),
    ]);
    let o = w.run(&bundle, &flags);
    w.assert_passed(&o);
    assert!(
        o.stdout.contains("gemm.perfetto-trace (perfetto)"),
        "{}",
        o.context()
    );
    let t = simpler_trace::read(&std::fs::read(&trace).unwrap()).unwrap();
    assert_eq!(t.processes.len(), 1);
    let p = &t.processes[0];
    assert_eq!(p.runs.len(), 1);
    let run = &p.runs[0];
    assert_eq!(run.level, simpler_trace::TraceLevel::Orchestrator);
    assert!(run.dropped.is_empty(), "{:?}", run.dropped);
    assert!(!run.subtasks.is_empty() && !run.tasks.is_empty());
    let mut seen = std::collections::BTreeSet::new();
    for s in &run.subtasks {
        assert!(s.start_ns < s.end_ns, "{s:?}");
        assert!(seen.insert((s.task, s.func_id, s.block)), "twice: {s:?}");
    }
    for task in &run.tasks {
        assert!(
            run.subtasks.iter().any(|s| s.task == task.task),
            "task {} ran nowhere",
            task.task
        );
    }
    for e in &run.edges {
        let end = run
            .subtasks
            .iter()
            .filter(|s| s.task == e.producer)
            .map(|s| s.end_ns)
            .max();
        let start = run
            .subtasks
            .iter()
            .filter(|s| s.task == e.consumer)
            .map(|s| s.start_ns)
            .min();
        assert!(end.unwrap() <= start.unwrap(), "{e:?}");
    }
    assert!(
        run.aicpu.iter().any(|a| a.thread == 0),
        "orchestrator phases recorded"
    );
    assert!(p.host_spans.iter().any(|h| h.name == "wait"));

    let dot_text = std::fs::read_to_string(&dot).unwrap();
    assert!(dot_text.starts_with("digraph "), "{dot_text}");
    for task in &run.tasks {
        assert!(
            dot_text.contains(&format!("  t{} [label=", task.task)),
            "{dot_text}"
        );
    }

    let summary = run_simpler(
        &[
            "trace".into(),
            "summary".into(),
            trace.display().to_string(),
        ],
        w.dir.path(),
    );
    summary.succeeded();
    assert!(
        summary.stdout.contains("Effective"),
        "{}",
        summary.context()
    );
    let svg = w.path("gemm.svg");
    run_simpler(
        &[
            "trace".into(),
            "svg".into(),
            trace.display().to_string(),
            "-o".into(),
            svg.display().to_string(),
        ],
        w.dir.path(),
    )
    .succeeded();
    assert!(std::fs::read_to_string(&svg).unwrap().contains("AIC "));

    // The graph as JSON, and Chrome JSON by --trace-format.
    let json = w.path("gemm-deps.json");
    let chrome = w.path("gemm.trace");
    let mut flags = w.full_flags();
    flags.extend([
        "--deps".into(),
        json.display().to_string(),
        "--trace".into(),
        chrome.display().to_string(),
        "--trace-format".into(),
        "chrome".into(),
    ]);
    w.run(&bundle, &flags).succeeded();
    let g: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(g["callable"], "gemm");
    assert!(!g["tasks"].as_array().unwrap().is_empty());
    let c = simpler_trace::chrome::read(&std::fs::read(&chrome).unwrap()).unwrap();
    assert_eq!(
        c.processes[0].runs[0].level,
        simpler_trace::TraceLevel::Tasks
    );
}

/// `--trace` at level off, or into a missing directory, is refused before the run.
#[test]
fn trace_flags_are_checked_before_the_run() {
    let w = Workdir::new("gemm");
    let bundle = w.build();
    let mut flags = w.full_flags();
    flags.extend([
        "--trace".into(),
        w.path("t.pftrace").display().to_string(),
        "--trace-level".into(),
        "off".into(),
    ]);
    let o = w.run(&bundle, &flags);
    assert_eq!(o.code, Some(2), "{}", o.context());
    assert!(
        o.stderr
            .contains("--trace needs a trace level other than off"),
        "{}",
        o.context()
    );
    assert!(!w.out_file().exists());
    let mut flags = w.full_flags();
    flags.extend([
        "--deps".into(),
        w.path("no/dir/g.dot").display().to_string(),
    ]);
    let o = w.run(&bundle, &flags);
    assert_eq!(o.code, Some(2), "{}", o.context());
    assert!(
        o.stderr.contains("--deps") && o.stderr.contains("does not exist"),
        "{}",
        o.context()
    );
    let mut flags = w.full_flags();
    flags.extend([
        "--trace-level".into(),
        "verbose".into(),
        "--trace".into(),
        "x".into(),
    ]);
    let o = w.run(&bundle, &flags);
    assert_eq!(o.code, Some(2), "{}", o.context());
    assert!(o.stderr.contains("unknown trace level"), "{}", o.context());
}
