//! Level 2 in a child process ([`IsolatedChip`]): a gemm over private host memory (inline
//! and staged copies) gives the numbers of a reference; chained submits on the same arrays
//! see each other's results; a failed run leaves its arrays untouched; device memory from
//! `malloc` is used in place; a kernel that segfaults kills only the child, the run fails
//! with ENDPOINT_FAILURE and its crash report, and everything after is refused. Also: the
//! engine's copies to a chip in a child process take private host memory.

use std::sync::Arc;
use std::time::Duration;

use crate::process_common::*;
use simpler_abi::DataType;
use simpler_device::DevicePtr;
use simpler_host::{CallConfig, ScalarValue};
use simpler_test_support::c_sources::{self, Kernel, Y};
use simpler_worker::*;

const ACC: u64 = 0;
/// Sleeps 400 ms, then as ACC.
const NAP: u64 = 1;
/// Writes -1 over y, then fails the run (KERNEL_FATAL, code 7).
const FAIL: u64 = 2;
/// Writes through a NULL pointer.
const SEGV: u64 = 3;

const ACC_C: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void acc(int64_t *args) {
    const float *x = SIMPLER_TENSOR_DATA(float, simpler_arg_tensor(args, 0));
    SimplerChipTensor *yt = simpler_arg_tensor(args, 1);
    float *y = SIMPLER_TENSOR_DATA(float, yt);
    for (uint64_t i = 0; i < simpler_tensor_numel(yt); ++i) y[i] += 2.0f * x[i] + 1.0f;
}
"#;

const NAP_C: &str = r#"#define _POSIX_C_SOURCE 199309L
#include <time.h>
#include "simpler/kernel.h"

SIMPLER_KERNEL void nap_acc(int64_t *args) {
    struct timespec nap = {0, 400 * 1000 * 1000};
    nanosleep(&nap, NULL);
    const float *x = SIMPLER_TENSOR_DATA(float, simpler_arg_tensor(args, 0));
    SimplerChipTensor *yt = simpler_arg_tensor(args, 1);
    float *y = SIMPLER_TENSOR_DATA(float, yt);
    for (uint64_t i = 0; i < simpler_tensor_numel(yt); ++i) y[i] += 2.0f * x[i] + 1.0f;
}
"#;

const FAIL_C: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void scribble_and_fail(int64_t *args) {
    SimplerChipTensor *yt = simpler_arg_tensor(args, 1);
    float *y = SIMPLER_TENSOR_DATA(float, yt);
    for (uint64_t i = 0; i < simpler_tensor_numel(yt); ++i) y[i] = -1.0f;
    simpler_kernel_fail(args, 7);
}
"#;

/// The example's gemm sources (64 x 64 tiles, ragged edges) with a shape-free signature.
const GEMM_MANIFEST: &str = r#"name = "gemm_any"

[orchestration]
source = "orchestration.c"
entry = "aicpu_orchestration_entry"

[[kernels]]
func_id = 0
core = "aic"
source = "kernels/gemm_tile.c"
entry = "kernel_entry"

[[args]]
name = "A"
direction = "in"
dtype = "f32"

[[args]]
name = "B"
direction = "in"
dtype = "f32"

[[args]]
name = "C"
direction = "out"
dtype = "f32"
"#;

/// `y += 2 x + 1` over f32 (x in, y inout, any shape), the kernel chosen by the `mode` scalar.
fn acc_callable() -> Arc<simpler_host::CallableSpec> {
    let k = |mode: u64, source, entry| Kernel {
        func_id: mode as u32,
        source,
        entry,
    };
    let kernels = [
        k(ACC, "acc.c", "acc"),
        k(NAP, "nap.c", "nap_acc"),
        k(FAIL, "fail.c", "scribble_and_fail"),
        k(SEGV, "null.c", "null_deref"),
    ];
    build_callable(&[
        (
            "simpler.toml",
            &c_sources::manifest("l2iso", &kernels, Y::InOut, None),
        ),
        ("orchestration.c", &c_sources::orchestration(Y::InOut, None)),
        ("acc.c", ACC_C),
        ("nap.c", NAP_C),
        ("fail.c", FAIL_C),
        ("null.c", c_sources::NULL_DEREF_C),
    ])
}

fn gemm_callable() -> Arc<simpler_host::CallableSpec> {
    build_callable(&[
        ("simpler.toml", GEMM_MANIFEST),
        (
            "orchestration.c",
            include_str!("../../../../examples/gemm/orchestration.c"),
        ),
        (
            "kernels/gemm_tile.c",
            include_str!("../../../../examples/gemm/kernels/gemm_tile.c"),
        ),
    ])
}

fn start(device_id: u32) -> IsolatedChip {
    IsolatedChip::start(IsolatedOptions {
        chip: small_chip(),
        device_id,
        program: Some(child_program()),
        startup_timeout: Duration::from_secs(60),
    })
    .unwrap()
}

/// Private host memory (a plain vector) holding `values`, viewed with `shape`.
fn private(values: &[f32], shape: &[u64]) -> (Arc<VecMemory>, Tensor) {
    let bytes = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let memory = Arc::new(VecMemory::new(bytes));
    let m: Arc<dyn HostMemory> = memory.clone();
    (
        memory,
        Tensor::new(Memory::Host(m), shape, DataType::Float32).unwrap(),
    )
}

fn floats(m: &VecMemory) -> Vec<f32> {
    m.to_vec()
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn acc_args(x: &Tensor, y: &Tensor, mode: u64) -> Vec<IsolatedArg> {
    vec![
        IsolatedArg::Host(x.clone()),
        IsolatedArg::Host(y.clone()),
        IsolatedArg::Scalar(ScalarValue::Int(mode as i128)),
    ]
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[test]
fn a_gemm_on_private_memory_matches_the_reference_and_reports_its_times() {
    let _serial = serial();
    let chip = start(5);
    let pid = chip.pid().unwrap();
    assert_eq!(chip.endpoint(), format!("chip 0 (device 5, pid {pid})"));
    let gemm = chip.register(gemm_callable()).unwrap();
    let cfg = CallConfig::default();
    // 100 x 70 x 90 travels inside the messages; 300 x 300 x 300 through staging regions.
    for (m, k, n) in [(100usize, 70usize, 90usize), (300, 300, 300)] {
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let (_, at) = private(&a, &[m as u64, k as u64]);
        let (_, bt) = private(&b, &[k as u64, n as u64]);
        let (cm, ct) = private(&vec![f32::NAN; m * n], &[m as u64, n as u64]);
        let args = vec![
            IsolatedArg::Host(at),
            IsolatedArg::Host(bt),
            IsolatedArg::Host(ct),
        ];
        let report = chip.run(gemm, args, &cfg).unwrap();
        assert_eq!(
            report.tasks, 4,
            "two copies in, the chip task, one copy back"
        );
        assert!(report.epoch > 0);
        assert!(
            report.device_time > Duration::ZERO && report.device_time <= report.total_time,
            "{report:?}"
        );
        let c = floats(&cm);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
                let got = c[i * n + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                    "C[{i}, {j}] = {got}, want {want} ({m} x {k} x {n})"
                );
            }
        }
    }
    // Runs of the same shapes reuse the staging memory; a run of other shapes keeps the
    // pool to what the last two runs took.
    let (slots, bytes) = chip.staging_held();
    assert!(slots <= 6, "{slots} staging allocations");
    assert!(bytes <= 6 * 360_000 + 6 * 4096, "{bytes} bytes of staging");
    // The host's argument checks, before anything runs.
    let (_, small) = private(&[0.0; 4], &[2, 2]);
    let err = chip
        .run(gemm, vec![IsolatedArg::Host(small.clone())], &cfg)
        .unwrap_err();
    assert!(err.to_string().contains("takes 3 arguments"), "{err}");
    let err = chip
        .run(
            gemm,
            vec![
                IsolatedArg::Host(small.clone()),
                IsolatedArg::Host(small.clone()),
                IsolatedArg::Host(small.clone()),
            ],
            &cfg,
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("argument `C`") && err.to_string().contains("shares memory"),
        "{err}"
    );
    assert_eq!(chip.health(), ChipHealth::Healthy);
    chip.close().unwrap();
    assert_eq!(chip.health(), ChipHealth::Closed);
    assert_eq!(chip.run(gemm, vec![], &cfg).unwrap_err().kind(), "CLOSED");
}

#[test]
fn chained_submits_on_the_same_arrays_see_each_others_results() {
    let _serial = serial();
    let chip = start(0);
    let acc = chip.register(acc_callable()).unwrap();
    let cfg = CallConfig::default();
    let n = 4096;
    let (_, x) = private(&values(n, 3), &[n as u64]);
    let (cm, c) = private(&vec![1.0; n], &[n as u64]);
    let (dm, d) = private(&vec![0.5; n], &[n as u64]);
    // A first run of these shapes allocates the staging memory the next ones reuse.
    chip.run(acc, acc_args(&x, &c, ACC), &cfg).unwrap();
    let c1 = floats(&cm);
    // A: C += 2 X + 1, slowly. B: D += 2 C + 1, submitted while A runs: its copy of C to
    // the chip happens when B is dispatched, after A has copied its C back.
    let a = chip.submit(acc, acc_args(&x, &c, NAP), &cfg).unwrap();
    let b = chip.submit(acc, acc_args(&c, &d, ACC), &cfg).unwrap();
    assert!(!a.done(), "A is still running when B is submitted");
    assert!(b.epoch() > a.epoch());
    let (ra, rb) = (a.wait(None).unwrap(), b.wait(None).unwrap());
    assert!(ra.device_time >= Duration::from_millis(400), "{ra:?}");
    assert!(rb.device_time < ra.device_time, "{rb:?}");
    let x0 = values(n, 3);
    let (c2, d2) = (floats(&cm), floats(&dm));
    for i in 0..n {
        let want_c = c1[i] + 2.0 * x0[i] + 1.0;
        assert_eq!(c2[i], want_c, "C[{i}]");
        assert_eq!(d2[i], 0.5 + 2.0 * want_c + 1.0, "D[{i}] used A's C");
    }
    chip.close().unwrap();
}

#[test]
fn a_failed_run_leaves_its_arrays_untouched_and_device_memory_is_used_in_place() {
    let _serial = serial();
    let chip = start(0);
    let acc = chip.register(acc_callable()).unwrap();
    let cfg = CallConfig::default();
    let n = 256;
    let (_, x) = private(&vec![1.0; n], &[n as u64]);
    let (ym, y) = private(&vec![3.0; n], &[n as u64]);
    let err = chip.run(acc, acc_args(&x, &y, FAIL), &cfg).unwrap_err();
    assert_eq!(err.kind(), "TASK_FAILED", "{err}");
    assert!(err.to_string().contains("l2iso"), "{err}");
    assert!(floats(&ym).iter().all(|v| *v == 3.0), "y is untouched");
    assert_eq!(
        chip.health(),
        ChipHealth::Healthy,
        "a failed run is no crash"
    );
    // The chip goes on: y += 2 + 1.
    chip.run(acc, acc_args(&x, &y, ACC), &cfg).unwrap();
    assert!(floats(&ym).iter().all(|v| *v == 6.0));

    // Device memory: filled by copy_to, used in place by a run, read by copy_from.
    let bytes = (n * 4) as u64;
    let dev = chip.malloc(2 * bytes).unwrap();
    let second = DevicePtr::from_raw(dev.addr() + bytes);
    let fours: Vec<u8> = [4.0f32; 256].iter().flat_map(|v| v.to_ne_bytes()).collect();
    chip.copy_to(second, &fours).unwrap();
    let device = |ptr: DevicePtr| IsolatedArg::Device {
        ptr,
        shape: vec![n as u64],
        dtype: DataType::Float32,
    };
    let args = vec![
        IsolatedArg::Host(x.clone()),
        device(second),
        IsolatedArg::Scalar(ScalarValue::Int(ACC as i128)),
    ];
    assert_eq!(
        chip.run(acc, args, &cfg).unwrap().tasks,
        2,
        "one copy in, the chip task"
    );
    let mut back = vec![0u8; bytes as usize];
    chip.copy_from(&mut back, second).unwrap();
    let got: Vec<f32> = back
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert!(got.iter().all(|v| *v == 7.0), "{:?}", &got[..4]);
    let err = chip
        .copy_from(&mut vec![0u8; 3 * bytes as usize], dev)
        .unwrap_err();
    assert!(err.to_string().contains("past the end"), "{err}");
    let err = chip.free(second).unwrap_err();
    assert!(err.to_string().contains("`ptr`"), "{err}");
    chip.free(dev).unwrap();
    let err = chip.run(
        acc,
        vec![
            IsolatedArg::Host(x.clone()),
            device(second),
            IsolatedArg::Scalar(ScalarValue::Int(0)),
        ],
        &cfg,
    );
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("not inside a live malloc allocation"),
        "freed memory is refused"
    );
    chip.close().unwrap();
}

#[test]
fn a_segfault_kills_only_the_child_and_later_work_is_refused() {
    let _serial = serial();
    let before = children();
    let chip = start(3);
    let pid = chip.pid().unwrap();
    assert_eq!(chip.endpoint(), format!("chip 0 (device 3, pid {pid})"));
    let acc = chip.register(acc_callable()).unwrap();
    let cfg = CallConfig::default();
    let n = 64;
    let (_, x) = private(&vec![1.0; n], &[n as u64]);
    let (ym, y) = private(&vec![2.0; n], &[n as u64]);
    let crashed = chip.submit(acc, acc_args(&x, &y, SEGV), &cfg).unwrap();
    // Submitted behind it: fails too, never runs.
    let behind = chip.submit(acc, acc_args(&x, &y, ACC), &cfg).unwrap();
    let err = crashed.wait(None).unwrap_err();
    eprintln!("crash: {err}");
    let WorkerError::EndpointFailure { endpoint, report } = err.root_cause() else {
        panic!("ENDPOINT_FAILURE expected, got {err}");
    };
    assert_eq!(endpoint, &format!("chip 0 (device 3, pid {pid})"));
    assert!(
        report.contains("was killed by signal SIGSEGV (11)"),
        "{report}"
    );
    assert_eq!(
        behind.wait(None).unwrap_err().root_cause().kind(),
        "ENDPOINT_FAILURE"
    );
    assert!(floats(&ym).iter().all(|v| *v == 2.0), "y is untouched");
    match chip.health() {
        ChipHealth::Dead {
            endpoint: e,
            report: r,
        } => {
            assert_eq!(&e, endpoint);
            assert_eq!(&r, report);
        }
        other => panic!("dead expected, got {other:?}"),
    }
    for refused in [
        chip.run(acc, acc_args(&x, &y, ACC), &cfg).map(drop),
        chip.malloc(64).map(drop),
        chip.copy_to(DevicePtr::from_raw(4096), &[1]).map(drop),
    ] {
        let e = refused.unwrap_err();
        assert_eq!(e.kind(), "ENDPOINT_FAILURE", "{e}");
        assert!(
            e.to_string().contains("SIGSEGV") && e.to_string().contains("refuses"),
            "{e}"
        );
    }
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "the child is gone"
    );
    chip.close().unwrap();
    assert_eq!(children(), before, "no child left");
}

#[test]
fn engine_copies_to_a_chip_in_a_child_process_take_private_host_memory() {
    let _serial = serial();
    let w = Worker::new(WorkerOptions {
        chips: vec![small_chip()],
        chip_isolation: ChipIsolation::Process,
        chip_program: Some(child_program()),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    w.init().unwrap();
    let n = 100_000; // 400 KB: through a staging region both ways
    let (_, src) = private(&values(n, 9), &[n as u64]);
    let (dm, dst) = private(&vec![0.0; n], &[n as u64]);
    let dev = w
        .alloc_child_tensor(0, &[n as u64], DataType::Float32)
        .unwrap();
    let report = w
        .run(|o| {
            o.copy_to(&dev, &src)?;
            o.copy_from(&dst, &dev)?;
            Ok(())
        })
        .unwrap();
    assert_eq!((report.tasks, report.edges), (2, 1));
    assert_eq!(report.chip_time, Duration::ZERO, "copies are not chip time");
    assert_eq!(floats(&dm), values(n, 9));
    w.close().unwrap();
}
