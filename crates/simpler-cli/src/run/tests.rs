//! Tests of `simpler run`'s argument matching, output writing and checks, on a fake
//! callable (nothing is executed).

use super::*;
use simpler_abi::{CoreType, DataType};
use simpler_host::{ArgDirection, ArgSpec, BundleCode, BundleKernel, Signature};
use simpler_toolchain::npy;

fn arg(name: &str, direction: ArgDirection, dtype: DataType, shape: Option<&[u64]>) -> ArgSpec {
    ArgSpec {
        name: name.into(),
        direction,
        dtype,
        shape: shape.map(<[u64]>::to_vec),
    }
}

fn spec() -> CallableSpec {
    use ArgDirection::*;
    Bundle {
        name: "axpy".into(),
        signature: Signature::new(vec![
            arg("x", In, DataType::Float32, Some(&[2, 3])),
            arg("y", InOut, DataType::Float32, None),
            arg("z", Out, DataType::Float32, Some(&[2, 3])),
            arg("w", Out, DataType::Int32, None),
            arg("alpha", Scalar, DataType::Float32, None),
            arg("n", Scalar, DataType::Int64, None),
        ])
        .unwrap(),
        orchestration: BundleCode {
            entry: "o".into(),
            image: b"\x7fELF-fake".to_vec(),
        },
        kernels: vec![BundleKernel {
            func_id: 0,
            core_type: CoreType::Aiv,
            name: "k".into(),
            code: BundleCode {
                entry: "k".into(),
                image: b"\x7fELF-fake".to_vec(),
            },
        }],
        runtime: None,
    }
    .into_spec()
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let f = Files {
            dir: tempfile::tempdir().unwrap(),
        };
        f.put("x.npy", &[2, 3], DataType::Float32);
        f.put("y.npy", &[4], DataType::Float32);
        f.put("w_ref.npy", &[5], DataType::Int32);
        f
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn put(&self, name: &str, shape: &[u64], dtype: DataType) -> PathBuf {
        let n = shape.iter().product::<u64>() as usize * dtype.size_bytes();
        let p = self.path(name);
        npy::write(
            &p,
            &NpyArray {
                shape: shape.to_vec(),
                dtype,
                bytes: vec![1; n],
            },
        )
        .unwrap();
        p
    }
    fn request(&self) -> RunRequest {
        RunRequest {
            target: self.path("unused.simpler"),
            inputs: vec![
                ("x".into(), self.path("x.npy")),
                ("y".into(), self.path("y.npy")),
            ],
            outputs: vec![("z".into(), self.path("z.npy"))],
            checks: vec![("w".into(), self.path("w_ref.npy"))],
            scalars: vec![("alpha".into(), "0.5".into()), ("n".into(), "-3".into())],
            rtol: 1e-5,
            atol: 1e-5,
            trace: Default::default(),
            runtime: None,
            enable_sdma: false,
        }
    }
}

fn err(req: &RunRequest) -> RunError {
    let e = prepare_with(spec(), req).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e:?}");
    e
}

#[test]
fn a_complete_request_is_prepared_positionally() {
    let f = Files::new();
    let p = prepare_with(spec(), &f.request()).unwrap();
    assert_eq!(p.args.len(), 6);
    match &p.args[1] {
        ArgValue::Tensor(t) => assert_eq!(t.shape, vec![4]),
        other => panic!("{other:?}"),
    }
    match &p.args[2] {
        ArgValue::Tensor(t) => assert_eq!((t.shape.clone(), t.bytes.len()), (vec![2, 3], 24)),
        other => panic!("{other:?}"),
    }
    // `w` has no shape in the signature and takes its reference's.
    match &p.args[3] {
        ArgValue::Tensor(t) => {
            assert_eq!((t.shape.clone(), t.dtype), (vec![5], DataType::Int32))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.args[4], ArgValue::Scalar(0.5f32.to_bits() as u64));
    assert_eq!(p.args[5], ArgValue::Scalar(-3i64 as u64));
    assert_eq!(p.outputs, vec![(2, f.path("z.npy"))]);
    assert_eq!(p.checks.len(), 1);
    assert_eq!(p.checks[0].0, 3);
}

#[test]
fn missing_input() {
    let f = Files::new();
    let mut r = f.request();
    r.inputs.remove(0);
    let e = err(&r);
    assert!(
        matches!(&e, RunError::Missing { flag: "--input", names } if names == &["x"]),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "missing --input for `x`");
}

#[test]
fn missing_scalar() {
    let f = Files::new();
    let mut r = f.request();
    r.scalars.clear();
    let e = err(&r);
    assert_eq!(e.to_string(), "missing --scalar for `alpha`, `n`");
}

#[test]
fn unknown_name() {
    let f = Files::new();
    let mut r = f.request();
    r.inputs[1].0 = "q".into();
    let e = err(&r);
    assert!(matches!(e, RunError::UnknownArg { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("no argument `q`") && msg.contains("`alpha`"),
        "{msg}"
    );
}

#[test]
fn wrong_kind() {
    let f = Files::new();
    let mut r = f.request();
    r.inputs[1] = ("z".into(), f.path("x.npy"));
    let e = err(&r);
    assert!(matches!(e, RunError::WrongKind { .. }), "{e:?}");
    assert!(e.to_string().contains("`z` is an `out` argument"), "{e}");
    let mut r = f.request();
    r.outputs = vec![("x".into(), f.path("o.npy"))];
    assert!(err(&r).to_string().contains("`x` is an `in` argument"));
    let mut r = f.request();
    r.scalars[0].0 = "x".into();
    assert_eq!(
        err(&r).to_string(),
        "--scalar x: `x` is an `in` argument: use --input, not --scalar"
    );
}

#[test]
fn duplicate_flag() {
    let f = Files::new();
    let mut r = f.request();
    r.inputs[1].0 = "x".into();
    let e = err(&r);
    assert!(matches!(e, RunError::Duplicate { .. }), "{e:?}");
}

/// Every name is checked before anything is counted: an extra value is reported by its
/// name, not as "given N times".
#[test]
fn extra_values_are_named() {
    let f = Files::new();
    let mut r = f.request();
    r.inputs.push(("z".into(), f.path("x.npy")));
    assert_eq!(
        err(&r).to_string(),
        "--input z: `z` is an `out` argument: use --output (and --check), not --input"
    );
    let mut r = f.request();
    r.inputs.push(("q".into(), f.path("x.npy")));
    assert!(
        matches!(&err(&r), RunError::UnknownArg { name, .. } if name == "q"),
        "{r:?}"
    );
    let mut r = f.request();
    r.scalars.push(("n".into(), "1".into()));
    assert_eq!(err(&r).to_string(), "--scalar n is given more than once");
}

#[test]
fn wrong_shape() {
    let f = Files::new();
    f.put("x.npy", &[3, 2], DataType::Float32);
    let e = err(&f.request());
    assert!(matches!(e, RunError::ShapeMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("`x` expects [2, 3]") && msg.contains("has shape [3, 2]"),
        "{msg}"
    );
    // A reference must match the inout input's shape.
    let f = Files::new();
    let mut r = f.request();
    f.put("y_ref.npy", &[5], DataType::Float32);
    r.checks.push(("y".into(), f.path("y_ref.npy")));
    let e = err(&r);
    assert!(e.to_string().contains("--check y: wrong shape"), "{e}");
}

#[test]
fn wrong_rank() {
    let f = Files::new();
    f.put("y.npy", &[1, 1, 1, 1, 1, 2], DataType::Float32);
    let e = err(&f.request());
    assert!(matches!(e, RunError::BadRank { ndims: 6, .. }), "{e:?}");
}

#[test]
fn wrong_dtype() {
    let f = Files::new();
    f.put("y.npy", &[4], DataType::Int32);
    let e = err(&f.request());
    assert!(matches!(e, RunError::DtypeMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("`y` expects f32, but"), "{e}");
    assert!(e.to_string().contains("holds i32"), "{e}");
}

#[test]
fn bf16_takes_raw_u16_files() {
    let s = Bundle {
        name: "b".into(),
        signature: Signature::new(vec![arg("h", ArgDirection::In, DataType::Bfloat16, None)])
            .unwrap(),
        orchestration: BundleCode {
            entry: "o".into(),
            image: b"\x7fELF".to_vec(),
        },
        kernels: vec![],
        runtime: None,
    }
    .into_spec();
    let f = Files::new();
    let p = f.put("h.npy", &[3], DataType::Uint16);
    let r = RunRequest {
        inputs: vec![("h".into(), p)],
        outputs: vec![],
        checks: vec![],
        scalars: vec![],
        ..f.request()
    };
    let prepared = prepare_with(s, &r).unwrap();
    match &prepared.args[0] {
        ArgValue::Tensor(t) => assert_eq!(t.dtype, DataType::Bfloat16),
        other => panic!("{other:?}"),
    }
}

#[test]
fn input_file_errors_name_the_flag_and_file() {
    let f = Files::new();
    std::fs::write(f.path("x.npy"), b"garbage").unwrap();
    let e = err(&f.request());
    let chain = crate::error_chain(&e);
    assert!(
        chain.contains("--input x") && chain.contains("not a .npy file"),
        "{chain}"
    );
    std::fs::remove_file(f.path("x.npy")).unwrap();
    let chain = crate::error_chain(&err(&f.request()));
    assert!(chain.contains("x.npy` does not exist"), "{chain}");
}

#[test]
fn output_shape_must_be_known() {
    let f = Files::new();
    let mut r = f.request();
    r.checks.clear();
    let e = err(&r);
    assert!(matches!(e, RunError::OutputShapeUnknown { .. }), "{e:?}");
    assert!(e.to_string().contains("output `w`"), "{e}");
}

#[test]
fn output_dir_must_exist_and_outputs_must_differ() {
    let f = Files::new();
    let mut r = f.request();
    r.outputs[0].1 = f.path("nope/z.npy");
    assert!(matches!(err(&r), RunError::OutputDir { .. }));
    let mut r = f.request();
    r.outputs.push(("y".into(), f.path("z.npy")));
    assert!(matches!(err(&r), RunError::SameOutput { .. }));
    // The same file by another spelling, or through a hard link.
    let mut r = f.request();
    r.outputs
        .push(("y".into(), f.dir.path().join(".").join("z.npy")));
    assert!(matches!(err(&r), RunError::SameOutput { .. }));
    f.put("z.npy", &[2, 3], DataType::Float32);
    std::fs::hard_link(f.path("z.npy"), f.path("z_link.npy")).unwrap();
    let mut r = f.request();
    r.outputs.push(("y".into(), f.path("z_link.npy")));
    let e = err(&r);
    assert_eq!(
        e.to_string(),
        format!(
            "--output z and --output y both write `{}`",
            f.path("z_link.npy").display()
        )
    );
}

#[test]
fn outputs_never_replace_a_file_the_run_reads() {
    let f = Files::new();
    for (output, what) in [("x.npy", "--input x"), ("w_ref.npy", "--check w")] {
        let mut r = f.request();
        r.outputs[0].1 = f.path(output);
        let e = err(&r);
        assert!(
            matches!(&e, RunError::OutputIsRead { what: w, .. } if w == what),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!(
                "--output z: `{}` is the same file as {what} (`{}`)",
                f.path(output).display(),
                f.path(output).display()
            )),
            "{e}"
        );
    }
    // The bundle too, once it exists.
    std::fs::write(f.path("unused.simpler"), b"bundle").unwrap();
    let mut r = f.request();
    r.outputs[0].1 = f.path("unused.simpler");
    assert!(
        matches!(&err(&r), RunError::OutputIsRead { what, .. } if what == "the bundle"),
        "{r:?}"
    );
}

#[test]
fn an_existing_output_must_be_a_regular_file() {
    let f = Files::new();
    std::fs::create_dir(f.path("z.npy")).unwrap();
    let e = err(&f.request());
    assert!(matches!(e, RunError::OutputNotRegular { .. }), "{e:?}");
    assert!(
        crate::error_chain(&e).contains("it is a directory, not a regular file"),
        "{e:?}"
    );
}

#[test]
fn worker_refusals_are_bad_input_and_run_failures_are_not() {
    use simpler_host::HostError;
    let config = HostError::InvalidConfig("runtime_env.ring_heap[0]".into());
    assert!(refused_before_running(&config));
    assert!(refused_before_running(&HostError::InvalidArgument {
        arg: "x".into(),
        reason: "shape".into(),
    }));
    assert!(refused_before_running(&HostError::RunPreparationRefused {
        epoch: 3,
        cause: Box::new(config),
    }));
    for failed in [
        HostError::RunFailed {
            code: -1,
            name: "X",
            message: String::new(),
        },
        HostError::Timeout(std::time::Duration::from_secs(1)),
        HostError::DeviceUnusable("reset".into()),
        HostError::RunPreparationRefused {
            epoch: 3,
            cause: Box::new(HostError::WorkerClosed),
        },
    ] {
        assert!(!refused_before_running(&failed), "{failed}");
    }
}

#[test]
fn a_run_that_submitted_no_task_gets_a_warning() {
    let f = Files::new();
    let p = prepare_with(spec(), &f.request()).unwrap();
    let w = no_task_warning(&p, 0).unwrap();
    assert!(
        w.starts_with("warning: the orchestration of `axpy` submitted no task"),
        "{w}"
    );
    assert_eq!(no_task_warning(&p, 1), None);
}

#[test]
fn bad_scalar_and_tolerance() {
    let f = Files::new();
    let mut r = f.request();
    r.scalars[1].1 = "1.5".into();
    let e = err(&r);
    assert!(
        e.to_string()
            .contains("--scalar n=1.5: `1.5` is not an integer"),
        "{e}"
    );
    let mut r = f.request();
    r.rtol = -1.0;
    let e = err(&r);
    assert!(
        matches!(
            &e,
            RunError::BadTolerance {
                source: simpler_toolchain::compare::CompareError::BadTolerance {
                    which: "rtol",
                    ..
                }
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "--rtol must be a finite number >= 0, got -1");
    // A finite value beyond the dtype is refused, not passed on as infinity.
    let mut r = f.request();
    r.scalars[0].1 = "1e400".into();
    let e = err(&r);
    assert!(
        e.to_string()
            .starts_with("--scalar alpha=1e400: 1e400 is out of range for f32"),
        "{e}"
    );
}

#[test]
fn a_run_without_output_or_check_gets_a_note() {
    let f = Files::new();
    let p = prepare_with(spec(), &f.request()).unwrap();
    assert_eq!(unused_result_note(&p), None);
    // `w` has no fixed shape and needs its reference; give it one through the signature.
    let mut s = spec();
    s.signature = simpler_host::Signature::new(
        s.signature
            .args
            .iter()
            .filter(|a| a.name != "w")
            .cloned()
            .collect(),
    )
    .unwrap();
    let r = RunRequest {
        outputs: vec![],
        checks: vec![],
        ..f.request()
    };
    let p = prepare_with(s, &r).unwrap();
    assert!(unused_result_note(&p)
        .unwrap()
        .contains("not saved or checked"));
}

#[test]
fn missing_target() {
    let f = Files::new();
    let e = prepare(&f.request()).unwrap_err();
    assert!(matches!(e, RunError::NoTarget { .. }), "{e:?}");
}

#[test]
fn outputs_are_written_and_checks_reported() {
    let f = Files::new();
    let mut p = prepare_with(spec(), &f.request()).unwrap();
    // Pretend the run produced w = the reference exactly and z = twos.
    if let ArgValue::Tensor(t) = &mut p.args[3] {
        t.bytes = vec![1; t.bytes.len()];
    }
    if let ArgValue::Tensor(t) = &mut p.args[2] {
        t.bytes = f32s(&[2.0; 6]);
    }
    let (lines, failed) = write_outputs(&p);
    assert!(failed.is_none(), "{failed:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("wrote ") && lines[0].contains("z.npy"),
        "{lines:?}"
    );
    check(&p).unwrap();
    let z = npy::read(&f.path("z.npy")).unwrap();
    assert_eq!(z.bytes, f32s(&[2.0; 6]));
    // A mismatch fails with exit code 1.
    if let ArgValue::Tensor(t) = &mut p.args[3] {
        t.bytes[7] = 9; // the top byte of element 1
    }
    let e = check(&p).unwrap_err();
    assert!(matches!(e, RunError::CheckFailed { .. }), "{e:?}");
    assert_eq!(e.exit_code(), 1);
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
