//! The in-process fixtures of the integration tests and of the `lane` bench: a callable
//! `y = x + 1` over four independent tiles whose kernel func is chosen per run
//! (`scalars[0]`): 0 runs at once, a gate's [`Gate::func`] waits for that gate to open.
//!
//! Also the in-process kernel and orchestration helpers: kernel argument access ([`tensor`],
//! [`data`]), task descriptors ([`task`], [`push`], [`submit`]), 1-D views ([`view`]), f32
//! byte views and fault-rule constructors.

use std::sync::Arc;
use std::time::Duration;

use simpler_abi::*;
use simpler_device::sim::{FaultAction, FaultPoint, FaultRule, SimDevice};
use simpler_device::{Device, DevicePtr, Topology};
use simpler_host::*;
use simpler_test_support::gate::add_one_kernels;
pub use simpler_test_support::gate::Gate;
pub use simpler_test_support::kernel::{add_one, data, fatal_42};

pub const N: usize = 1024;
const TILES: usize = 4;

/// Tensor argument `i` of a kernel.
pub fn tensor<'a>(args: *mut i64, i: usize) -> &'a ChipTensor {
    // SAFETY: the kernels of these tests get the runtime's argument arrays, tensors first.
    unsafe { simpler_test_support::kernel::tensor(args, i) }
}

/// A task descriptor with no kernel on any lane, one block and no arguments.
pub fn task_desc() -> Box<TaskDesc> {
    // SAFETY: TaskDesc is plain data; all-zero is a valid starting point.
    let mut d: Box<TaskDesc> = Box::new(unsafe { std::mem::zeroed() });
    d.size = std::mem::size_of::<TaskDesc>() as u32;
    d.kernel_ids = [NO_KERNEL; 3];
    d.block_num = 1;
    d
}

/// A task descriptor running kernel `func` on `lane`.
pub fn task(func: i32, lane: usize) -> Box<TaskDesc> {
    let mut d = task_desc();
    d.kernel_ids[lane] = func;
    d
}

/// Appends tensor `t` with `tag` to the task's arguments.
pub fn push(d: &mut TaskDesc, t: ChipTensor, tag: TensorArgType) {
    d.tensors[d.tensor_count as usize] = t;
    d.tags[d.tensor_count as usize] = tag as u32;
    d.tensor_count += 1;
}

/// A 1-D view of `len` elements at element `off` of a contiguous tensor.
pub fn view(t: &ChipTensor, off: usize, len: usize) -> ChipTensor {
    let mut v = *t;
    v.start_offset = off as u64;
    v.shapes[0] = len as u64;
    v
}

/// Submits `d` through the runtime's table, without asking for its outputs.
///
/// # Safety
/// `ops` is the table the orchestration entry received.
pub unsafe fn submit(ops: *const OrchOps, d: &TaskDesc) -> i32 {
    // SAFETY: the caller passes the table it received.
    unsafe { ((*ops).submit_task)((*ops).runtime, d, std::ptr::null_mut()) }
}

/// The bytes of an f32 slice.
pub fn f32_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: f32 has no invalid bit patterns and no padding.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 4) }
}

/// The bytes of a u32 slice.
pub fn u32_bytes_mut(v: &mut [u32]) -> &mut [u8] {
    // SAFETY: u32 has no invalid bit patterns and no padding.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 4) }
}

/// A 1-D host f32 tensor over `v`.
pub fn host_f32(v: &mut [f32]) -> HostArg<'_> {
    let n = v.len() as u64;
    HostArg::Tensor(HostTensor {
        bytes: f32_bytes_mut(v),
        shape: vec![n],
        dtype: DataType::Float32,
    })
}

/// A fault on the next occurrence of `point` (a `const` [`FaultRule::next`], for tables).
pub const fn next(point: FaultPoint, action: FaultAction) -> FaultRule {
    FaultRule {
        point,
        skip: 0,
        times: 1,
        action,
    }
}

/// A fault on the `n`-th occurrence of `point` (a `const` [`FaultRule::nth`]).
pub const fn nth(point: FaultPoint, n: u64, action: FaultAction) -> FaultRule {
    FaultRule {
        point,
        skip: n - 1,
        times: 1,
        action,
    }
}

/// A fault on every occurrence of `point` (a `const` [`FaultRule::always`]).
pub const fn always(point: FaultPoint, action: FaultAction) -> FaultRule {
    FaultRule {
        point,
        skip: 0,
        times: u64::MAX,
        action,
    }
}

/// y = x + 1 in `TILES` independent AIV tasks, with kernel func `scalars[0]`.
pub unsafe extern "C-unwind" fn inc_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        let n = a.tensors[0].shapes[0] as usize;
        let tile = n / TILES;
        for t in 0..TILES {
            let mut d = task(a.scalars[0] as i32, LANE_AIV0);
            for (i, tag) in [
                (0, TensorArgType::Input),
                (1, TensorArgType::OutputExisting),
            ] {
                push(&mut d, view(&a.tensors[i], t * tile, tile), tag);
            }
            let rc = submit(ops, &d);
            if rc != 0 {
                return rc;
            }
        }
    }
    0
}

pub fn spec(name: &str) -> CallableSpec {
    let arg = |name: &str, direction| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Float32,
        shape: None,
    };
    let k = |func_id, f: KernelEntry| KernelSpec {
        func_id,
        core_type: CoreType::Aiv,
        image: CodeImage::Kernel(f),
        name: None,
    };
    CallableSpec {
        name: name.into(),
        signature: Signature::new(vec![
            arg("x", ArgDirection::In),
            arg("y", ArgDirection::Out),
            ArgSpec {
                name: "func".into(),
                direction: ArgDirection::Scalar,
                dtype: DataType::Uint64,
                shape: None,
            },
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(inc_orch),
        kernels: add_one_kernels().map(|(id, f)| k(id, f)).collect(),
        runtime: None,
    }
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

pub fn input(seed: f32) -> Vec<f32> {
    (0..N).map(|i| seed + i as f32).collect()
}

/// Host-tensor arguments; `func` 0 runs at once, a [`Gate::func`] waits for that gate.
pub fn args(seed: f32, func: u64) -> Vec<OwnedArg> {
    vec![
        OwnedArg::Tensor {
            buffer: Box::new(f32_bytes(&input(seed))),
            shape: vec![N as u64],
            dtype: DataType::Float32,
        },
        OwnedArg::Tensor {
            buffer: Box::new(vec![0u8; N * 4]),
            shape: vec![N as u64],
            dtype: DataType::Float32,
        },
        OwnedArg::Scalar(func),
    ]
}

/// Device-tensor arguments (in place).
pub fn device_args(x: DevicePtr, y: DevicePtr, func: u64) -> Vec<OwnedArg> {
    let t = |ptr| OwnedArg::Device {
        ptr,
        shape: vec![N as u64],
        dtype: DataType::Float32,
    };
    vec![t(x), t(y), OwnedArg::Scalar(func)]
}

pub fn check_output(out: RunOutput, seed: f32) {
    let OwnedArg::Tensor { mut buffer, .. } = out.args.into_iter().nth(1).unwrap() else {
        panic!("y is a tensor")
    };
    check_bytes(buffer.bytes_mut(), seed);
}

pub fn check_bytes(bytes: &[u8], seed: f32) {
    for (i, c) in bytes.chunks(4).enumerate() {
        let v = f32::from_ne_bytes(c.try_into().unwrap());
        assert_eq!(v, seed + i as f32 + 1.0, "element {i}");
    }
}

pub fn config() -> WorkerConfig {
    WorkerConfig {
        run_timeout: Duration::from_secs(30),
        heap_size: 1 << 20,
        ..WorkerConfig::default()
    }
}

pub fn small_device() -> Arc<SimDevice> {
    Arc::new(
        SimDevice::new(Topology {
            clusters: 2,
            aicpu_threads: 3,
        })
        .unwrap(),
    )
}

/// An owned worker on a fresh small device, with the callable registered.
pub fn worker() -> (Arc<SimDevice>, ChipWorker, CallableId) {
    let dev = small_device();
    let w = ChipWorker::with_device(config(), dev.clone() as Arc<dyn Device>).unwrap();
    let id = w.register(&spec("inc")).unwrap();
    (dev, w, id)
}

/// Borrowed host-tensor arguments `x`, `y` (`N` f32 each, as bytes) and func 0.
pub fn host_args<'a>(x: &'a mut [u8], y: &'a mut [u8]) -> [HostArg<'a>; 3] {
    let t = |bytes| {
        HostArg::Tensor(HostTensor {
            bytes,
            shape: vec![N as u64],
            dtype: DataType::Float32,
        })
    };
    [t(x), t(y), HostArg::Scalar(0)]
}
