//! Property: reclaiming tasks inside open scopes keeps every program's result equal to
//! sequential execution (`docs/chip-runtime.md`, task life). Random programs over three
//! small u32 buffers run with a 16-slot task window, so every ring wraps many times while
//! its scopes are open:
//!
//! - flat programs (no inner scope) of 50–300 tasks at depth 0, each task reading one or two
//!   1-D views and writing one (INOUT `dst = dst * 3 + src0 (+ src1) + k`, or
//!   OUTPUT_EXISTING `dst = src0 (+ src1) + k`), with `get_tensor_data` reads in between;
//! - scoped programs that also open and close AUTO scopes (up to depth 4, so depths 3 and 4
//!   share ring 3) and, inside them, pass runtime-allocated intermediates between tasks
//!   (`tmp = src + k1` as an OUTPUT, then `dst = dst * 3 + tmp + k2`), which their scope
//!   pins.
//!
//! The final buffers and every value read must equal a sequential execution of the same
//! program. A program is legalised before it runs so that it never asks a scope to pin more
//! than a window's worth of tasks (that is SCOPE_DEADLOCK, tested elsewhere): only tasks
//! with heap outputs are pinned, so only they count.
//!
//! The program travels to the in-process orchestration as the address of a host value (a
//! scalar argument): the sim device shares the host's address space.

use std::sync::Mutex;

use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use simpler_abi::*;
use simpler_host::*;

/// Elements per buffer.
const N: u64 = 256;
/// Task slots per ring.
const WINDOW: u32 = 16;
/// Deepest scope a program opens (depths 3 and 4 share ring 3).
const MAX_DEPTH: usize = 4;
/// Func ids: one and two sources.
const MAD1: i32 = 0;
const MAD2: i32 = 1;

/// A 1-D view of buffer `buf`.
#[derive(Clone, Copy, Debug)]
struct View {
    buf: usize,
    start: u64,
    len: u64,
}

impl View {
    fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

#[derive(Clone, Debug)]
enum Event {
    /// One task: `dst = dst * 3 + Σ srcs + k` (INOUT) or `dst = Σ srcs + k`.
    Op {
        srcs: Vec<View>,
        dst: View,
        inout: bool,
        k: u32,
    },
    /// Two tasks through a runtime-allocated intermediate: `tmp = src + k1`, then
    /// `dst = dst * 3 + tmp + k2`.
    Heap {
        src: View,
        dst: View,
        k1: u32,
        k2: u32,
    },
    /// `get_tensor_data` of a view, recorded.
    Read(View),
    Begin,
    End,
}

/// Sequential execution: the final buffers and the values read, in order.
fn reference(prog: &[Event], bufs: &mut [Vec<u32>; 3]) -> Vec<Vec<u32>> {
    let mut reads = Vec::new();
    for e in prog {
        match e {
            Event::Op {
                srcs,
                dst,
                inout,
                k,
            } => {
                let srcs: Vec<Vec<u32>> = srcs
                    .iter()
                    .map(|v| bufs[v.buf][v.range()].to_vec())
                    .collect();
                for (i, d) in bufs[dst.buf][dst.range()].iter_mut().enumerate() {
                    let s = srcs.iter().fold(*k, |a, s| a.wrapping_add(s[i]));
                    *d = if *inout {
                        d.wrapping_mul(3).wrapping_add(s)
                    } else {
                        s
                    };
                }
            }
            Event::Heap { src, dst, k1, k2 } => {
                let tmp: Vec<u32> = bufs[src.buf][src.range()]
                    .iter()
                    .map(|s| s.wrapping_add(*k1))
                    .collect();
                for (i, d) in bufs[dst.buf][dst.range()].iter_mut().enumerate() {
                    *d = d.wrapping_mul(3).wrapping_add(tmp[i].wrapping_add(*k2));
                }
            }
            Event::Read(v) => reads.push(bufs[v.buf][v.range()].to_vec()),
            Event::Begin | Event::End => {}
        }
    }
    reads
}

/// Drops what would make the program invalid or deadlock: an End with no open inner scope,
/// a Begin past [`MAX_DEPTH`], a Heap pair at depth 0 (the outer scope would pin it for the
/// whole run), and any task that would leave more than `WINDOW - 1` tasks of a ring live
/// behind the oldest task an open scope pins. Closes the scopes left open.
fn legalise(prog: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::with_capacity(prog.len());
    // Per ring: tasks submitted so far, and the pinned tasks' ring indices per open scope.
    let mut next = [0u32; 4];
    let mut pinned: Vec<Vec<(usize, u32)>> = vec![Vec::new()];
    // Room for task `next + extra` of `ring`: fewer than WINDOW − 1 tasks from every pinned
    // one (the oldest binds) up to it.
    let room = |next: &[u32; 4], pinned: &Vec<Vec<(usize, u32)>>, ring: usize, extra: u32| {
        pinned
            .iter()
            .flatten()
            .filter(|(r, _)| *r == ring)
            .all(|&(_, o)| next[ring] + extra - o < WINDOW - 1)
    };
    for e in prog {
        let depth = pinned.len() - 1;
        let ring = depth.min(3);
        match e {
            Event::Begin if depth < MAX_DEPTH => {
                pinned.push(Vec::new());
                out.push(e);
            }
            Event::End if depth > 0 => {
                pinned.pop();
                out.push(e);
            }
            Event::Begin | Event::End => {}
            Event::Op { .. } if room(&next, &pinned, ring, 0) => {
                next[ring] += 1;
                out.push(e);
            }
            Event::Heap { .. } if depth > 0 => {
                // The intermediate's producer is pinned from its own slot on.
                let mut with = pinned.clone();
                with[depth].push((ring, next[ring]));
                if room(&next, &pinned, ring, 0) && room(&next, &with, ring, 1) {
                    pinned = with;
                    next[ring] += 2;
                    out.push(e);
                }
            }
            Event::Op { .. } | Event::Heap { .. } => {}
            Event::Read(_) => out.push(e),
        }
    }
    out.extend((1..pinned.len()).map(|_| Event::End));
    out
}

// ---- device side ------------------------------------------------------------------------

/// The view's elements.
fn load(t: &ChipTensor) -> Vec<u32> {
    (0..t.shapes[0])
        // SAFETY: the runtime checked the view lies inside its live buffer.
        .map(|i| unsafe {
            (t.buffer_addr as *const u32)
                .add((t.start_offset + i) as usize)
                .read_volatile()
        })
        .collect()
}

/// The kernel body: tensors `[src.., dst]`, scalars `[k, inout]`.
///
/// # Safety
/// `args` is a kernel argument array with `nsrc + 1` 1-D u32 tensors and two scalars.
unsafe fn mad(args: *mut i64, nsrc: usize) {
    // SAFETY: per the contract above.
    let t = |i: usize| unsafe { *(*args.add(i) as *const ChipTensor) };
    // SAFETY: as above; the scalars follow the tensors.
    let (k, inout) = unsafe { (*args.add(nsrc + 1) as u32, *args.add(nsrc + 2) != 0) };
    let srcs: Vec<Vec<u32>> = (0..nsrc).map(|i| load(&t(i))).collect();
    let dst = t(nsrc);
    for e in 0..dst.shapes[0] as usize {
        // SAFETY: as in `load`.
        let d = unsafe { &mut *(dst.buffer_addr as *mut u32).add(dst.start_offset as usize + e) };
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

/// What the orchestration reads its program from and writes its reads into.
struct Shared {
    prog: Vec<Event>,
    reads: Mutex<Vec<Vec<u32>>>,
}

/// Submits `d`; returns its outputs.
///
/// # Safety
/// `ops` is the table the orchestration entry received.
unsafe fn submit_out(ops: &OrchOps, d: &TaskDesc) -> Result<TaskOutputs, i32> {
    // SAFETY: TaskOutputs is plain data.
    let mut out: TaskOutputs = unsafe { std::mem::zeroed() };
    // SAFETY: the table's own function and runtime pointer.
    ok(unsafe { (ops.submit_task)(ops.runtime, d, &mut out) })?;
    Ok(out)
}

/// `Err(rc)` for a non-zero return code.
fn ok(rc: i32) -> Result<(), i32> {
    match rc {
        0 => Ok(()),
        rc => Err(rc),
    }
}

/// A MAD task over `tensors` (sources, then the destination with its tag).
fn mad_task(tensors: &[(ChipTensor, TensorArgType)], k: u32, inout: bool) -> Box<TaskDesc> {
    let mut d = task(if tensors.len() == 2 { MAD1 } else { MAD2 }, LANE_AIV0);
    for &(t, tag) in tensors {
        push(&mut d, t, tag);
    }
    d.scalars[0] = u64::from(k);
    d.scalars[1] = u64::from(inout);
    d.scalar_count = 2;
    d
}

/// Runs the program whose [`Shared`] is at scalar 0.
unsafe extern "C-unwind" fn orchestration(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes its table and the run's arguments; scalar 0 is the address
    // of a `Shared` that outlives the run.
    let (ops, args) = unsafe { (&*ops, &*args) };
    // SAFETY: as above.
    let shared = unsafe { &*(args.scalars[0] as *const Shared) };
    let view = |v: &View| {
        let mut t = args.tensors[v.buf];
        t.start_offset = v.start;
        t.shapes[0] = v.len;
        t.flags = 0;
        t
    };
    let run = || -> Result<(), i32> {
        for e in &shared.prog {
            match e {
                Event::Op {
                    srcs,
                    dst,
                    inout,
                    k,
                } => {
                    let tag = if *inout {
                        TensorArgType::Inout
                    } else {
                        TensorArgType::OutputExisting
                    };
                    let mut tensors: Vec<_> = srcs
                        .iter()
                        .map(|v| (view(v), TensorArgType::Input))
                        .collect();
                    tensors.push((view(dst), tag));
                    // SAFETY: the table the runtime passed.
                    unsafe { submit_out(ops, &mad_task(&tensors, *k, *inout)) }?;
                }
                Event::Heap { src, dst, k1, k2 } => {
                    let tmp = ChipTensor::contiguous(0, &[src.len], DataType::Uint32);
                    let first = [
                        (view(src), TensorArgType::Input),
                        (tmp, TensorArgType::Output),
                    ];
                    // SAFETY: the table the runtime passed.
                    let out = unsafe { submit_out(ops, &mad_task(&first, *k1, false)) }?;
                    let second = [
                        (out.tensors[0], TensorArgType::Input),
                        (view(dst), TensorArgType::Inout),
                    ];
                    // SAFETY: as above.
                    unsafe { submit_out(ops, &mad_task(&second, *k2, true)) }?;
                }
                Event::Read(v) => {
                    let mut got = vec![0u32; v.len as usize];
                    let t = view(v);
                    // SAFETY: the table the runtime passed; `got` has room for `4 * len`
                    // bytes.
                    ok(unsafe {
                        (ops.get_tensor_data)(ops.runtime, &t, got.as_mut_ptr().cast(), 4 * v.len)
                    })?;
                    shared.reads.lock().unwrap().push(got);
                }
                Event::Begin => {
                    // SAFETY: the table the runtime passed.
                    ok(unsafe { (ops.scope_begin)(ops.runtime, SCOPE_AUTO) })?
                }
                Event::End => {
                    // SAFETY: the table the runtime passed.
                    ok(unsafe { (ops.scope_end)(ops.runtime) })?
                }
            }
        }
        Ok(())
    };
    run().err().unwrap_or(0)
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
        name: "scoped_program".into(),
        signature: Signature::new(args).unwrap(),
        orchestration: CodeImage::Orchestration(orchestration),
        kernels,
        runtime: None,
    })
    .unwrap()
}

// ---- strategies -------------------------------------------------------------------------

/// `count` views of one random length.
fn views(count: usize) -> impl Strategy<Value = Vec<View>> {
    (1..=32u64).prop_flat_map(move |len| {
        prop::collection::vec(
            (0..3usize, 0..=N - len).prop_map(move |(buf, start)| View { buf, start, len }),
            count,
        )
    })
}

fn op() -> impl Strategy<Value = Event> {
    (1..=2usize)
        .prop_flat_map(|nsrc| (views(nsrc + 1), any::<bool>(), any::<u32>()))
        .prop_map(|(mut v, inout, k)| {
            let dst = v.pop().unwrap();
            Event::Op {
                srcs: v,
                dst,
                inout,
                k,
            }
        })
}

fn heap() -> impl Strategy<Value = Event> {
    (views(2), any::<u32>(), any::<u32>()).prop_map(|(v, k1, k2)| Event::Heap {
        src: v[0],
        dst: v[1],
        k1,
        k2,
    })
}

fn read() -> impl Strategy<Value = Event> {
    views(1).prop_map(|v| Event::Read(v[0]))
}

fn flat_program() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(prop_oneof![8 => op(), 1 => read()], 50..=300)
}

fn scoped_program() -> impl Strategy<Value = Vec<Event>> {
    let event = prop_oneof![
        5 => op(),
        3 => heap(),
        1 => read(),
        2 => Just(Event::Begin),
        2 => Just(Event::End),
    ];
    prop::collection::vec(event, 30..=200)
}

fn check(program: impl Strategy<Value = Vec<Event>>, what: &str) {
    let w = ChipWorker::new(WorkerConfig {
        task_window: WINDOW,
        ..WorkerConfig::default()
    })
    .unwrap();
    let id = register(&w);
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&program.prop_map(legalise), |prog| {
        let init = |seed: u32| -> Vec<u32> {
            (0..N as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
                .collect()
        };
        let mut want = [init(1), init(2), init(3)];
        let want_reads = reference(&prog, &mut want);
        let [mut a, mut b, mut c] = [init(1), init(2), init(3)];
        fn t(v: &mut [u32]) -> HostArg<'_> {
            HostArg::Tensor(HostTensor {
                bytes: u32_bytes_mut(v),
                shape: vec![N],
                dtype: DataType::Uint32,
            })
        }
        let shared = Shared {
            prog,
            reads: Mutex::new(Vec::new()),
        };
        let mut args = [
            t(&mut a),
            t(&mut b),
            t(&mut c),
            HostArg::Scalar(&shared as *const Shared as u64),
        ];
        w.run(id, &mut args)
            .map_err(|e| TestCaseError::fail(format!("the run failed: {e}")))?;
        drop(args);
        let reads = shared.reads.into_inner().unwrap();
        prop_assert_eq!(reads.len(), want_reads.len());
        for (i, (got, want)) in reads.iter().zip(&want_reads).enumerate() {
            prop_assert_eq!(got, want, "read {} differs from sequential execution", i);
        }
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
        panic!("{what}: {e}");
    }
}

#[test]
fn flat_programs_longer_than_the_window_match_sequential_execution() {
    check(flat_program(), "flat programs");
}

#[test]
fn programs_with_inner_scopes_and_heap_intermediates_match_sequential_execution() {
    check(scoped_program(), "scoped programs");
}
