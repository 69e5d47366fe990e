//! Oversubscription: a chip of 72 simulated cores and 6 AICPU threads —
//! 78 device threads — on a 2-CPU host runs 100 consecutive `gemm` runs (512 tasks each)
//! with no livelock and no false watchdog timeout, every result correct. The upstream sim
//! busy-spins and livelocks or times out falsely here; ours polls briefly, then parks.

use crate::common;

use std::path::Path;

use simpler_abi::DataType;
use simpler_device::Topology;
use simpler_host::{Bundle, ChipWorker, HostArg, HostTensor, WorkerConfig};

fn f32_bytes(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: f32 has no padding and every bit pattern is valid as bytes.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 4) }
}

#[test]
fn hundred_gemm_runs_on_72_cores_and_6_aicpu_threads() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bundle = dir.path().join("gemm.simpler");
    let out = common::simpler(
        &[
            "build",
            root.join("examples/gemm").to_str().unwrap(),
            "-o",
            bundle.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = Bundle::read(&bundle).unwrap().into_spec();

    let inputs = simpler_examples::inputs("gemm").unwrap();
    let reference = simpler_examples::reference("gemm", &inputs).unwrap();
    let worker = ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters: 24,
            aicpu_threads: 6,
        },
        ..WorkerConfig::default()
    })
    .unwrap();
    let id = worker.register(&spec).unwrap();
    let (mut a, mut b) = (inputs[0].data.clone(), inputs[1].data.clone());
    for run in 0..100 {
        let mut c = vec![f32::NAN; 512 * 512];
        let shape = vec![512u64, 512];
        let mut args = [
            HostArg::Tensor(HostTensor {
                bytes: f32_bytes(&mut a),
                shape: shape.clone(),
                dtype: DataType::Float32,
            }),
            HostArg::Tensor(HostTensor {
                bytes: f32_bytes(&mut b),
                shape: shape.clone(),
                dtype: DataType::Float32,
            }),
            HostArg::Tensor(HostTensor {
                bytes: f32_bytes(&mut c),
                shape,
                dtype: DataType::Float32,
            }),
        ];
        worker
            .run(id, &mut args)
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        if let Err(m) = common::close(&c, &reference[0].data) {
            panic!("run {run}: result differs from the reference: {m:?}");
        }
    }
}
