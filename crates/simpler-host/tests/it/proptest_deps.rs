//! Property: dependency discovery (RAW, WAW and WAR on overlapping views) makes any
//! program's result equal to sequential execution. Random programs of 10–60 tasks over three
//! small u32 buffers, each task reading one or two random views (INPUT) and writing one
//! (INOUT: `dst = dst * 3 + src0 (+ src1) + k`, or OUTPUT_EXISTING: `dst = src0 (+ src1) +
//! k`), run on the default chip (8 clusters, 3 schedulers); the final buffers must equal a
//! sequential execution of the same program in submission order.
//!
//! Three view families: 1-D slices; 2-D tiles of 16×16 buffers (unit or every-other-column
//! strides, never running past a row); and 2-D views that may run past the end of a row into
//! the next one (the same strides as a row-major 16-wide layout, any start).
//!
//! The program travels to the in-process orchestration as the address of a host `Vec`
//! (a scalar argument): the sim device shares the host's address space.

use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use simpler_abi::*;
use simpler_host::*;

/// Elements per buffer.
const N: u64 = 256;
/// Row width of the 2-D families.
const W: u64 = 16;
/// Func ids: one and two sources.
const MAD1: i32 = 0;
const MAD2: i32 = 1;

/// A view of buffer `buf`: `start` plus `shape`/`strides` (1 or 2 dimensions).
#[derive(Clone, Debug)]
struct View {
    buf: usize,
    start: u64,
    shape: Vec<u64>,
    strides: Vec<u64>,
}

impl View {
    /// Element offsets, row-major.
    fn offsets(&self) -> Vec<u64> {
        let mut out = vec![self.start];
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            out = out
                .iter()
                .flat_map(|&b| (0..n).map(move |i| b + i * s))
                .collect();
        }
        out
    }
}

#[derive(Clone, Debug)]
struct Op {
    srcs: Vec<View>,
    dst: View,
    /// INOUT (reads dst) or OUTPUT_EXISTING (does not).
    inout: bool,
    k: u32,
}

/// Runs the program sequentially on `bufs`.
fn reference(prog: &[Op], bufs: &mut [Vec<u32>; 3]) {
    for op in prog {
        let srcs: Vec<Vec<u32>> = op
            .srcs
            .iter()
            .map(|v| {
                v.offsets()
                    .iter()
                    .map(|&o| bufs[v.buf][o as usize])
                    .collect()
            })
            .collect();
        for (e, o) in op.dst.offsets().into_iter().enumerate() {
            let d = &mut bufs[op.dst.buf][o as usize];
            let s = srcs.iter().fold(op.k, |a, s| a.wrapping_add(s[e]));
            *d = if op.inout {
                d.wrapping_mul(3).wrapping_add(s)
            } else {
                s
            };
        }
    }
}

// ---- device side ------------------------------------------------------------------------

fn chip_offsets(t: &ChipTensor) -> Vec<u64> {
    View {
        buf: 0,
        start: t.start_offset,
        shape: t.shape().to_vec(),
        strides: t.strides[..t.ndims as usize].to_vec(),
    }
    .offsets()
}

/// Reads a view (its own offsets) of a u32 buffer.
fn load(t: &ChipTensor) -> Vec<u32> {
    chip_offsets(t)
        .into_iter()
        // SAFETY: the runtime checked the view lies inside its live buffer.
        .map(|o| unsafe {
            (t.buffer_addr as *const u32)
                .add(o as usize)
                .read_volatile()
        })
        .collect()
}

/// The kernel body: tensors `[src.., dst]`, scalars `[k, inout]`.
///
/// # Safety
/// `args` is a kernel argument array with `nsrc + 1` tensors and two scalars.
unsafe fn mad(args: *mut i64, nsrc: usize) {
    // SAFETY: per the contract above.
    let t = |i: usize| unsafe { *(*args.add(i) as *const ChipTensor) };
    // SAFETY: as above; the scalars follow the tensors.
    let (k, inout) = unsafe { (*args.add(nsrc + 1) as u32, *args.add(nsrc + 2) != 0) };
    let srcs: Vec<Vec<u32>> = (0..nsrc).map(|i| load(&t(i))).collect();
    let dst = t(nsrc);
    for (e, o) in chip_offsets(&dst).into_iter().enumerate() {
        // SAFETY: as in `load`.
        let d = unsafe { &mut *(dst.buffer_addr as *mut u32).add(o as usize) };
        let s = srcs.iter().fold(k, |a, s| a.wrapping_add(s[e]));
        *d = if inout {
            d.wrapping_mul(3).wrapping_add(s)
        } else {
            s
        };
    }
}

unsafe extern "C-unwind" fn mad1(args: *mut i64) {
    // SAFETY: submitted with one source.
    unsafe { mad(args, 1) }
}

unsafe extern "C-unwind" fn mad2(args: *mut i64) {
    // SAFETY: submitted with two sources.
    unsafe { mad(args, 2) }
}

/// Submits the program whose address is scalar 0.
unsafe extern "C-unwind" fn orchestration(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes its table and the run's arguments; scalar 0 is the address
    // of a `Vec<Op>` that outlives the run.
    let (ops, args) = unsafe { (&*ops, &*args) };
    // SAFETY: as above.
    let prog = unsafe { &*(args.scalars[0] as *const Vec<Op>) };
    for op in prog {
        let mut d = task(if op.srcs.len() == 1 { MAD1 } else { MAD2 }, LANE_AIV0);
        let view = |v: &View| {
            let mut t = args.tensors[v.buf];
            t.start_offset = v.start;
            t.ndims = v.shape.len() as u32;
            t.shapes = [0; MAX_TENSOR_DIMS];
            t.strides = [0; MAX_TENSOR_DIMS];
            t.shapes[..v.shape.len()].copy_from_slice(&v.shape);
            t.strides[..v.strides.len()].copy_from_slice(&v.strides);
            t.flags = 0;
            t
        };
        let tag = if op.inout {
            TensorArgType::Inout
        } else {
            TensorArgType::OutputExisting
        };
        let tensors = op.srcs.iter().map(|v| (view(v), TensorArgType::Input));
        for (t, tag) in tensors.chain([(view(&op.dst), tag)]) {
            push(&mut d, t, tag);
        }
        d.scalars[0] = u64::from(op.k);
        d.scalars[1] = u64::from(op.inout);
        d.scalar_count = 2;
        // SAFETY: the table the runtime passed.
        let rc = unsafe { submit(ops, &d) };
        if rc != 0 {
            return rc;
        }
    }
    0
}

fn register(w: &ChipWorker) -> CallableId {
    let mut args: Vec<ArgSpec> = ["a", "b", "c"]
        .iter()
        .map(|n| ArgSpec {
            name: (*n).into(),
            direction: ArgDirection::InOut,
            dtype: DataType::Uint32,
            shape: None,
        })
        .collect();
    args.push(ArgSpec {
        name: "program".into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    });
    let kernels = [(MAD1, mad1 as KernelEntry), (MAD2, mad2)]
        .into_iter()
        .map(|(func_id, f)| KernelSpec {
            func_id: func_id as u32,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(f),
            name: None,
        })
        .collect();
    w.register(&CallableSpec {
        name: "random_program".into(),
        signature: Signature::new(args).unwrap(),
        orchestration: CodeImage::Orchestration(orchestration),
        kernels,
        runtime: None,
    })
    .unwrap()
}

// ---- strategies -------------------------------------------------------------------------

/// Every view of one op has `shape`; a family draws where each view starts and how it
/// strides.
#[derive(Clone, Copy, Debug)]
enum Family {
    Flat,
    Tiles,
    WrappingRows,
}

fn view(family: Family, shape: Vec<u64>) -> BoxedStrategy<View> {
    match family {
        Family::Flat => {
            let len = shape[0];
            (0..3usize, 0..=N - len)
                .prop_map(move |(buf, start)| View {
                    buf,
                    start,
                    shape: vec![len],
                    strides: vec![1],
                })
                .boxed()
        }
        Family::Tiles => {
            let (rows, cols) = (shape[0], shape[1]);
            // Unit column stride, or every other column when the tile fits that way.
            let steps: Vec<u64> = if 2 * cols - 1 <= W {
                vec![1, 2]
            } else {
                vec![1]
            };
            (0..3usize, prop::sample::select(steps))
                .prop_flat_map(move |(buf, step)| {
                    let span = (cols - 1) * step + 1;
                    (Just(buf), Just(step), 0..=W - rows, 0..=W - span)
                })
                .prop_map(move |(buf, step, r0, c0)| View {
                    buf,
                    start: r0 * W + c0,
                    shape: vec![rows, cols],
                    strides: vec![W, step],
                })
                .boxed()
        }
        Family::WrappingRows => {
            let (rows, cols) = (shape[0], shape[1]);
            let last = (rows - 1) * W + cols;
            (0..3usize, 0..=N - last)
                .prop_map(move |(buf, start)| View {
                    buf,
                    start,
                    shape: vec![rows, cols],
                    strides: vec![W, 1],
                })
                .boxed()
        }
    }
}

fn op(family: Family) -> impl Strategy<Value = Op> {
    let shape: BoxedStrategy<Vec<u64>> = match family {
        Family::Flat => (1..=64u64).prop_map(|n| vec![n]).boxed(),
        Family::Tiles => (1..=6u64, 1..=8u64).prop_map(|(r, c)| vec![r, c]).boxed(),
        Family::WrappingRows => (1..=4u64, 1..=W).prop_map(|(r, c)| vec![r, c]).boxed(),
    };
    shape.prop_flat_map(move |shape| {
        (
            prop::collection::vec(view(family, shape.clone()), 1..=2),
            view(family, shape),
            any::<bool>(),
            any::<u32>(),
        )
            .prop_map(|(srcs, dst, inout, k)| Op {
                srcs,
                dst,
                inout,
                k,
            })
    })
}

fn check_family(family: Family) {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = register(&w);
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let program = prop::collection::vec(op(family), 10..=60);
    let result = runner.run(&program, |prog| {
        let init = |seed: u32| -> Vec<u32> {
            (0..N as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
                .collect()
        };
        let mut want = [init(1), init(2), init(3)];
        reference(&prog, &mut want);
        let [mut a, mut b, mut c] = [init(1), init(2), init(3)];
        fn t(v: &mut [u32]) -> HostTensor<'_> {
            HostTensor {
                bytes: u32_bytes_mut(v),
                shape: vec![N],
                dtype: DataType::Uint32,
            }
        }
        let mut args = [
            HostArg::Tensor(t(&mut a)),
            HostArg::Tensor(t(&mut b)),
            HostArg::Tensor(t(&mut c)),
            HostArg::Scalar(&prog as *const Vec<Op> as u64),
        ];
        w.run(id, &mut args)
            .map_err(|e| TestCaseError::fail(format!("the run failed: {e}")))?;
        drop(args);
        for (name, (got, want)) in ["a", "b", "c"].iter().zip([a, b, c].iter().zip(&want)) {
            if let Some(i) = (0..N as usize).find(|&i| got[i] != want[i]) {
                return Err(TestCaseError::fail(format!(
                    "buffer {name} differs from sequential execution first at element {i}: {} != {}",
                    got[i], want[i]
                )));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{family:?} views: {e}");
    }
}

#[test]
fn random_programs_on_1d_views_match_sequential_execution() {
    check_family(Family::Flat);
}

#[test]
fn random_programs_on_2d_tiles_match_sequential_execution() {
    check_family(Family::Tiles);
}

#[test]
fn random_programs_on_2d_views_running_past_row_ends_match_sequential_execution() {
    check_family(Family::WrappingRows);
}
