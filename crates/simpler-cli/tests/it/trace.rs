//! `simpler trace summary|svg|convert` on trace files written by simpler-trace, and their
//! refusals: a bad file is named, exits non-zero and leaves no output behind.

use std::path::{Path, PathBuf};

use crate::common::{path_str, simpler, text};
use simpler_trace::sample::{synthetic, SampleSpec};
use simpler_trace::{Format, Trace};

fn sample() -> Trace {
    synthetic(&SampleSpec {
        tasks: 30,
        dropped: 4,
        ..Default::default()
    })
}

fn write_trace(dir: &Path, name: &str, format: Format) -> PathBuf {
    let p = dir.join(name);
    let mut bytes = Vec::new();
    simpler_trace::write(&sample(), format, &mut bytes).unwrap();
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn summary_prints_the_breakdown_of_either_format() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format) in [
        ("t.perfetto-trace", Format::Perfetto),
        ("t.json", Format::Chrome),
    ] {
        let f = write_trace(dir.path(), name, format);
        let o = simpler(&["trace", "summary", path_str(&f)], dir.path());
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        let want = simpler_trace::summary::Summary::of(&sample()).to_string();
        assert_eq!(out, want);
        for s in [
            "Host ",
            "Device ",
            "Orch ",
            "Sched ",
            "Effective ",
            "critical path",
            "gemm_tile",
            "AIV 2",
            "4 events dropped",
        ] {
            assert!(out.contains(s), "{s:?} missing:\n{out}");
        }
    }
}

#[test]
fn svg_and_convert_write_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_trace(dir.path(), "t.perfetto-trace", Format::Perfetto);
    let svg = dir.path().join("out.svg");
    let o = simpler(
        &["trace", "svg", path_str(&f), "-o", path_str(&svg)],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg ") && s.trim_end().ends_with("</svg>"));
    assert!(s.contains("gemm_tile") && s.contains("AICPU 0 (orchestrator)"));

    let json = dir.path().join("out.json");
    let o = simpler(
        &["trace", "convert", path_str(&f), "-o", path_str(&json)],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let bytes = std::fs::read(&json).unwrap();
    assert_eq!(Format::sniff(&bytes), Format::Chrome);
    let back = simpler_trace::read(&bytes).unwrap();
    assert_eq!(
        simpler_trace::summary::Summary::of(&back),
        simpler_trace::summary::Summary::of(&sample())
    );

    let pb = dir.path().join("again.json");
    let o = simpler(
        &[
            "trace",
            "convert",
            path_str(&json),
            "-o",
            path_str(&pb),
            "--format",
            "perfetto",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        Format::sniff(&std::fs::read(&pb).unwrap()),
        Format::Perfetto
    );
}

#[test]
fn a_bad_trace_file_is_named_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.perfetto-trace");
    std::fs::write(&bad, b"this is not a trace, it is prose").unwrap();
    let badjson = dir.path().join("bad.json");
    std::fs::write(&badjson, b"{\"traceEvents\": [{\"ph\": 3}]}").unwrap();
    let missing = dir.path().join("missing.perfetto-trace");
    for f in [&bad, &badjson, &missing] {
        let o = simpler(&["trace", "summary", path_str(f)], dir.path());
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(path_str(f)) && err.starts_with("error: "),
            "{err}"
        );
        assert!(out.is_empty(), "{out}");
        let svg = dir.path().join("x.svg");
        let o = simpler(
            &["trace", "svg", path_str(f), "-o", path_str(&svg)],
            dir.path(),
        );
        assert_eq!(o.status.code(), Some(2));
        assert!(!svg.exists(), "no output for a bad input");
        let conv = dir.path().join("x.json");
        let o = simpler(
            &["trace", "convert", path_str(f), "-o", path_str(&conv)],
            dir.path(),
        );
        assert_eq!(o.status.code(), Some(2));
        assert!(!conv.exists());
    }
    let (_, err) = text(&simpler(
        &["trace", "summary", path_str(&missing)],
        dir.path(),
    ));
    assert!(err.contains("cannot read trace file"), "{err}");
    let (_, err) = text(&simpler(&["trace", "summary", path_str(&bad)], dir.path()));
    assert!(err.contains("cannot decode trace file"), "{err}");
    assert!(err.contains("caused by: not a"), "{err}");
}

#[test]
fn an_unwritable_output_exits_1_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_trace(dir.path(), "t.perfetto-trace", Format::Perfetto);
    let out = dir.path().join("no/such/dir/out.svg");
    let o = simpler(
        &["trace", "svg", path_str(&f), "-o", path_str(&out)],
        dir.path(),
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write") && err.contains("out.svg"),
        "{err}"
    );
    assert!(!dir.path().join("no").exists());
    // A directory in the way is refused, not replaced.
    let d = dir.path().join("d.json");
    std::fs::create_dir(&d).unwrap();
    let o = simpler(
        &["trace", "convert", path_str(&f), "-o", path_str(&d)],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(d.is_dir());
}

#[test]
fn the_input_is_never_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_trace(dir.path(), "t.json", Format::Chrome);
    let before = std::fs::read(&f).unwrap();
    let o = simpler(
        &["trace", "convert", path_str(&f), "-o", "./t.json"],
        dir.path(),
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is the trace file being read"), "{err}");
    assert_eq!(std::fs::read(&f).unwrap(), before);
}

#[test]
fn an_unknown_format_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_trace(dir.path(), "t.json", Format::Chrome);
    let o = simpler(
        &[
            "trace",
            "convert",
            path_str(&f),
            "-o",
            "x.bin",
            "--format",
            "xml",
        ],
        dir.path(),
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("unknown trace format"), "{err}");
    assert!(!dir.path().join("x.bin").exists());
}

/// `simpler trace summary FILE | head -1`: a closed stdout ends the printing, without a
/// panic, and the command still exits 0.
#[test]
fn summary_into_a_closed_pipe_exits_0_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_trace(dir.path(), "t.perfetto-trace", Format::Perfetto);
    let o =
        crate::common::simpler_into_closed_pipe(&["trace", "summary", path_str(&f)], dir.path());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `simpler trace summary` of a device, a FIFO with no writer or a directory is refused at
/// once (exit 2), naming the file and what it is; nothing is read from `/dev/zero`.
#[test]
fn summary_refuses_devices_fifos_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    for (path, kind) in simpler_test_support::files::non_regular(dir.path(), "t.pftrace") {
        let o = simpler(&["trace", "summary", path_str(&path)], dir.path());
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "`{}` is {kind}, not a regular file",
                path.display()
            )),
            "{err}"
        );
    }
}

/// An empty file, an empty Chrome JSON trace and a trace holding only host spans decode, but
/// hold no traced run: every `simpler trace` subcommand refuses them with exit 2, naming the
/// file, and writes nothing.
#[test]
fn a_trace_without_runs_is_named_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.perfetto-trace");
    std::fs::write(&empty, b"").unwrap();
    let json = dir.path().join("empty.json");
    std::fs::write(&json, b"{\"traceEvents\": []}").unwrap();
    let spans_only = dir.path().join("spans.perfetto-trace");
    let host_only = Trace {
        processes: vec![simpler_trace::ProcessTrace {
            pid: 1,
            name: "chip 0 (device 0)".into(),
            host_spans: vec![simpler_trace::HostSpan {
                thread: "host lane".into(),
                name: "prepare".into(),
                epoch: None,
                start_ns: 1_000,
                end_ns: 2_000,
            }],
            ..Default::default()
        }],
    };
    let mut bytes = Vec::new();
    simpler_trace::write(&host_only, Format::Perfetto, &mut bytes).unwrap();
    std::fs::write(&spans_only, bytes).unwrap();
    for f in [&empty, &json, &spans_only] {
        let want = format!("no traced runs in `{}`", f.display());
        let o = simpler(&["trace", "summary", path_str(f)], dir.path());
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.starts_with("error: ") && err.contains(&want), "{err}");
        assert!(out.is_empty(), "{out}");
        let svg = dir.path().join("x.svg");
        let o = simpler(
            &["trace", "svg", path_str(f), "-o", path_str(&svg)],
            dir.path(),
        );
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&want), "{err}");
        assert!(!svg.exists(), "no picture of a run-less trace");
        let conv = dir.path().join("x.json");
        let o = simpler(
            &["trace", "convert", path_str(f), "-o", path_str(&conv)],
            dir.path(),
        );
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&want), "{err}");
        assert!(!conv.exists());
    }
}

/// `simpler trace summary FILE > /dev/full`: a stdout that cannot take the summary fails the
/// command (exit 1) naming stdout, the trace file and the OS error; `svg` and `convert` to
/// `/dev/full` are refused (exit 2) naming it, and none of them panics.
#[test]
fn a_full_stdout_or_output_fails_every_trace_subcommand() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let f = write_trace(dir.path(), "t.perfetto-trace", Format::Perfetto);
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let o = crate::common::command()
        .args(["trace", "summary", path_str(&f)])
        .current_dir(dir.path())
        .stdout(Stdio::from(full()))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: cannot write the summary of `")
            && err.contains("t.perfetto-trace")
            && err.contains("to stdout")
            && err.contains("No space left on device"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // A stderr that fails too: the error cannot be read, but the exit code is still the
    // command's (not a panic's 101); svg still writes its file.
    let o = crate::common::command()
        .args(["trace", "summary", path_str(&f)])
        .current_dir(dir.path())
        .stdout(Stdio::from(full()))
        .stderr(Stdio::from(full()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let svg = dir.path().join("out.svg");
    let o = crate::common::command()
        .args(["trace", "svg", path_str(&f), "-o", path_str(&svg)])
        .current_dir(dir.path())
        .stderr(Stdio::from(full()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(svg.is_file());
    for sub in ["svg", "convert"] {
        let o = crate::common::command()
            .args(["trace", sub, path_str(&f), "-o", "/dev/full"])
            .current_dir(dir.path())
            .stdout(Stdio::from(full()))
            .output()
            .unwrap();
        let (_, err) = text(&o);
        assert_ne!(o.status.code(), Some(0), "{sub}: {err}");
        assert!(err.contains("/dev/full"), "{sub}: {err}");
        assert!(!err.contains("panicked"), "{sub}: {err}");
    }
}
