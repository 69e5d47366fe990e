//! Deferred completion end to end (`docs/chip-runtime.md` §18), through `ChipWorker` on the
//! sim device: a kernel that starts an SDMA copy or waits on a counter returns at once, and
//! its task completes — its consumers start — only once the engine reports. The SDMA engine
//! is slowed by fault injection (`FaultPoint::SdmaCopy`), so a consumer that started at the
//! producer's FIN would read the destination before the copy landed. Also: every refusal
//! (an engine the chip lacks, SDMA without `enable_sdma`, a refused copy, a misaligned
//! counter, a 65th condition, a counter that never arrives) fails the run with its code,
//! naming the task, and the worker runs the next run normally.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{push, submit, task};
use simpler_abi::deferred::*;
use simpler_abi::*;
use simpler_device::sim::{FaultAction, FaultPoint, FaultRule, SimDevice, SimOptions};
use simpler_device::{Device, Topology};
use simpler_host::*;
use TensorArgType::{Input, NoDep, OutputExisting};

/// Elements of the copied tensor (u32).
const N: usize = 4096;

// ---- kernels ------------------------------------------------------------------------------

fn t(args: *mut i64, i: usize) -> ChipTensor {
    // SAFETY: slots [0, T) point to the task's ChipTensors.
    unsafe { *(*args.add(i) as *const ChipTensor) }
}

/// Address of element 0 of a 1-D view (u32 or u64 elements).
fn base(t: &ChipTensor) -> u64 {
    let size = if t.dtype == DataType::Uint64 as u32 {
        8
    } else {
        4
    };
    t.buffer_addr + t.start_offset * size
}

fn scalar(args: *mut i64, slot: usize) -> u64 {
    // SAFETY: the scalars follow the tensors.
    unsafe { *args.add(slot) as u64 }
}

/// Held by every test: the two instants below are shared by all scenarios.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// When the consumer started, and when the counter was set.
static CONSUMER_START: Mutex<Option<Instant>> = Mutex::new(None);
static COUNTER_SET: Mutex<Option<Instant>> = Mutex::new(None);

/// `b = a` by `scalar 0` SDMA copies of equal chunks (tensors a In, b OutputExisting).
unsafe extern "C-unwind" fn sdma_kernel(args: *mut i64) {
    let (a, b) = (t(args, 0), t(args, 1));
    let chunks = scalar(args, 2).max(1);
    let bytes = a.shapes[0] * 4;
    let chunk = bytes.div_ceil(chunks);
    for k in 0..chunks {
        let off = (k * chunk).min(bytes);
        let n = chunk.min(bytes - off);
        // SAFETY: both views are the run's device memory; the run keeps them until the task
        // completes, which waits for the copy.
        let rc = unsafe {
            sdma_copy(
                args,
                (base(&b) + off) as *mut u8,
                (base(&a) + off) as *const u8,
                n,
            )
        };
        if rc != 0 {
            return;
        }
    }
}

/// `c = b + 1` (tensors b In, c OutputExisting); records when it started.
unsafe extern "C-unwind" fn consume_kernel(args: *mut i64) {
    *CONSUMER_START.lock().unwrap() = Some(Instant::now());
    let (b, c) = (t(args, 0), t(args, 1));
    for i in 0..b.shapes[0] {
        // SAFETY: 1-D u32 views of the run's memory.
        unsafe {
            let v = *((base(&b) + 4 * i) as *const u32);
            *((base(&c) + 4 * i) as *mut u32) = v.wrapping_add(1);
        }
    }
}

/// `b = a` at once (tensors a In, flag NoDep, b OutputExisting); returns the flag's address.
fn copy_a_to_b(args: *mut i64) -> u64 {
    let (a, flag, b) = (t(args, 0), t(args, 1), t(args, 2));
    // SAFETY: 1-D u32 views of the run's memory, of a's length.
    unsafe {
        std::ptr::copy_nonoverlapping(
            base(&a) as *const u8,
            base(&b) as *mut u8,
            a.shapes[0] as usize * 4,
        )
    };
    base(&flag)
}

/// `b = a` at once, then defers completion until `flag[0] >= 1` (tensors a In, flag NoDep,
/// b OutputExisting).
unsafe extern "C-unwind" fn wait_counter_kernel(args: *mut i64) {
    let flag = copy_a_to_b(args);
    // SAFETY: the flag is a u64 tensor of the run, 8-byte aligned.
    unsafe { wait_counter(args, flag as *const u64, 1) };
}

/// Sleeps 40 ms, then sets `flag[0] = 1` (tensor flag NoDep).
unsafe extern "C-unwind" fn set_counter_kernel(args: *mut i64) {
    std::thread::sleep(Duration::from_millis(40));
    let flag = t(args, 0);
    *COUNTER_SET.lock().unwrap() = Some(Instant::now());
    // SAFETY: the flag is a u64 tensor of the run, 8-byte aligned.
    unsafe { (*(base(&flag) as *const AtomicU64)).store(1, Ordering::Release) };
}

/// `b = a` at once, then defers completion until the u32 `flag[0]` (the low half of the
/// first u64) reaches 5 (tensors a In, flag NoDep, b OutputExisting).
unsafe extern "C-unwind" fn wait_counter32_kernel(args: *mut i64) {
    let flag = copy_a_to_b(args);
    // SAFETY: the flag's first u32 is 4-byte aligned memory of the run.
    unsafe { wait_counter32(args, flag as *const u32, 5) };
}

/// Sets the u32 next to the awaited one to 1 at once (a 64-bit read of the pair would then
/// hold), then 40 ms later the awaited u32 to 5 (tensor flag NoDep).
unsafe extern "C-unwind" fn set_counter32_kernel(args: *mut i64) {
    let flag = base(&t(args, 0));
    // SAFETY: the flag is a u64 tensor of the run: two aligned u32s at its start.
    unsafe { (*((flag + 4) as *const AtomicU32)).store(1, Ordering::Release) };
    std::thread::sleep(Duration::from_millis(40));
    *COUNTER_SET.lock().unwrap() = Some(Instant::now());
    // SAFETY: as above.
    unsafe { (*(flag as *const AtomicU32)).store(5, Ordering::Release) };
}

/// Registers what mode `scalar 0` names (tensor flag NoDep): 0 a ROCE condition, 1 a
/// misaligned counter, 2 65 counters, 3 a counter that is never set.
unsafe extern "C-unwind" fn bad_kernel(args: *mut i64) {
    let flag = t(args, 0);
    let counter = base(&flag);
    // SAFETY: slot 52 points to the dispatch's slab; the counter is the run's.
    unsafe {
        match scalar(args, 1) {
            0 => {
                register(
                    args,
                    DeferredCondition {
                        engine: ASYNC_ENGINE_ROCE,
                        flags: 0,
                        addr: counter,
                        value: 1,
                    },
                );
            }
            1 => {
                wait_counter(args, (counter + 4) as *const u64, 1);
            }
            2 => {
                for _ in 0..=MAX_DEFERRED_CONDITIONS {
                    wait_counter(args, counter as *const u64, 0);
                }
            }
            _ => {
                wait_counter(args, counter as *const u64, 7);
            }
        }
    }
}

const SDMA: i32 = 0;
const CONSUME: i32 = 1;
const WAIT_COUNTER: i32 = 2;
const SET_COUNTER: i32 = 3;
const BAD: i32 = 4;
const WAIT_COUNTER32: i32 = 5;
const SET_COUNTER32: i32 = 6;

// ---- orchestration ------------------------------------------------------------------------

/// Scenario `scalars[0]` over tensors a, b, c (u32 × N) and flag (u64 × 8):
/// 0 SDMA: `b = a` by `scalars[1]` copies, then `c = b + 1`;
/// 1 COUNTER: `b = a` deferred on `flag[0]`, set by an independent task 40 ms later, then
///   `c = b + 1`;
/// 2 a bad registration (`scalars[1]`: [`bad_kernel`]'s mode);
/// 3 as 1 on a 32-bit counter whose neighbour is set first.
unsafe extern "C-unwind" fn orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let o = &*args;
        let [a, b, c, flag] = [o.tensors[0], o.tensors[1], o.tensors[2], o.tensors[3]];
        let run = |func: i32, tensors: &[(ChipTensor, TensorArgType)], scalars: &[u64]| {
            let mut d = task(func, LANE_AIV0);
            for &(t, tag) in tensors {
                push(&mut d, t, tag);
            }
            for (i, &s) in scalars.iter().enumerate() {
                d.scalars[i] = s;
            }
            d.scalar_count = scalars.len() as u32;
            submit(ops, &d)
        };
        let rc = match o.scalars[0] {
            0 => run(SDMA, &[(a, Input), (b, OutputExisting)], &[o.scalars[1]]),
            1 => {
                let rc = run(
                    WAIT_COUNTER,
                    &[(a, Input), (flag, NoDep), (b, OutputExisting)],
                    &[],
                );
                if rc != 0 {
                    return rc;
                }
                run(SET_COUNTER, &[(flag, NoDep)], &[])
            }
            3 => {
                let rc = run(
                    WAIT_COUNTER32,
                    &[(a, Input), (flag, NoDep), (b, OutputExisting)],
                    &[],
                );
                if rc != 0 {
                    return rc;
                }
                run(SET_COUNTER32, &[(flag, NoDep)], &[])
            }
            _ => return run(BAD, &[(flag, NoDep)], &[o.scalars[1]]),
        };
        if rc != 0 {
            return rc;
        }
        run(CONSUME, &[(b, Input), (c, OutputExisting)], &[])
    }
}

fn spec() -> CallableSpec {
    let arg = |name: &str, direction, dtype| ArgSpec {
        name: name.into(),
        direction,
        dtype,
        shape: None,
    };
    let k = |func_id: i32, f: KernelEntry| KernelSpec {
        func_id: func_id as u32,
        core_type: CoreType::Aiv,
        image: CodeImage::Kernel(f),
        name: None,
    };
    CallableSpec {
        name: "deferred".into(),
        signature: Signature::new(vec![
            arg("a", ArgDirection::In, DataType::Uint32),
            arg("b", ArgDirection::Out, DataType::Uint32),
            arg("c", ArgDirection::Out, DataType::Uint32),
            arg("flag", ArgDirection::InOut, DataType::Uint64),
            arg("scenario", ArgDirection::Scalar, DataType::Uint64),
            arg("detail", ArgDirection::Scalar, DataType::Uint64),
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: vec![
            k(SDMA, sdma_kernel),
            k(CONSUME, consume_kernel),
            k(WAIT_COUNTER, wait_counter_kernel),
            k(SET_COUNTER, set_counter_kernel),
            k(BAD, bad_kernel),
            k(WAIT_COUNTER32, wait_counter32_kernel),
            k(SET_COUNTER32, set_counter32_kernel),
        ],
        runtime: None,
    }
}

// ---- harness ------------------------------------------------------------------------------

struct Chip {
    dev: Arc<SimDevice>,
    w: ChipWorker,
    id: CallableId,
}

fn chip(sdma: bool, scheduler_timeout: Duration) -> Chip {
    let dev = Arc::new(
        SimDevice::with_options(
            Topology {
                clusters: 2,
                aicpu_threads: 3,
            },
            SimOptions {
                sdma,
                ..SimOptions::default()
            },
        )
        .unwrap(),
    );
    let config = WorkerConfig {
        run_timeout: Duration::from_secs(30),
        scheduler_timeout,
        heap_size: 1 << 20,
        enable_sdma: sdma,
        ..WorkerConfig::default()
    };
    let w = ChipWorker::with_device(config, dev.clone() as Arc<dyn Device>).unwrap();
    let id = w.register(&spec()).unwrap();
    Chip { dev, w, id }
}

/// What a run left: b, c and whether it failed (code, message).
struct Outcome {
    b: Vec<u32>,
    c: Vec<u32>,
    result: Result<(), (i32, String)>,
}

fn u32_bytes(v: &mut [u32]) -> &mut [u8] {
    // SAFETY: u32 has no padding or invalid bit patterns.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 4) }
}

fn u64_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding or invalid bit patterns.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 8) }
}

fn source() -> Vec<u32> {
    (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect()
}

fn run(chip: &Chip, scenario: u64, detail: u64) -> Outcome {
    let (mut a, mut b, mut c, mut flag) = (source(), vec![0u32; N], vec![0u32; N], vec![0u64; 8]);
    let tensor = |bytes, n: usize, dtype| {
        HostArg::Tensor(HostTensor {
            bytes,
            shape: vec![n as u64],
            dtype,
        })
    };
    let mut args = [
        tensor(u32_bytes(&mut a), N, DataType::Uint32),
        tensor(u32_bytes(&mut b), N, DataType::Uint32),
        tensor(u32_bytes(&mut c), N, DataType::Uint32),
        tensor(u64_bytes(&mut flag), 8, DataType::Uint64),
        HostArg::Scalar(scenario),
        HostArg::Scalar(detail),
    ];
    let result = match chip.w.run(chip.id, &mut args) {
        Ok(_) => Ok(()),
        Err(HostError::RunFailed { code, message, .. }) => Err((-code, message)),
        Err(e) => panic!("run {scenario}/{detail}: unexpected error {e}"),
    };
    drop(args);
    Outcome { b, c, result }
}

#[track_caller]
fn expect_ok(o: &Outcome) {
    if let Err((code, message)) = &o.result {
        panic!("run failed with {code}: {message}");
    }
    let a = source();
    same(&o.b, &a, "b is the copy of a");
    let want: Vec<u32> = a.iter().map(|v| v.wrapping_add(1)).collect();
    same(&o.c, &want, "the consumer read b after the copy landed");
}

/// Asserts `got == want`, naming the first element that differs (not the whole vectors).
#[track_caller]
fn same(got: &[u32], want: &[u32], what: &str) {
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: element {i} is {}, want {}", got[i], want[i]);
    }
}

#[track_caller]
fn expect_code(o: &Outcome, code: i32, words: &[&str]) {
    match &o.result {
        Err((got, message)) => {
            assert_eq!(*got, code, "code of {message}");
            for w in words {
                assert!(message.contains(w), "{message:?} does not say {w:?}");
            }
        }
        Ok(()) => panic!("expected a run failing with {code}, but it succeeded"),
    }
}

// ---- tests --------------------------------------------------------------------------------

#[test]
fn a_consumer_never_starts_before_a_slow_sdma_copy_lands() {
    let _serial = serial();
    let chip = chip(true, Duration::from_secs(10));
    for (chunks, delay_ms) in [(1, 80), (4, 40), (MAX_DEFERRED_CONDITIONS as u64, 3)] {
        chip.dev.clear_faults();
        chip.dev.inject(FaultRule::always(
            FaultPoint::SdmaCopy,
            FaultAction::SlowFinish(Duration::from_millis(delay_ms)),
        ));
        let before = chip.dev.calls(FaultPoint::SdmaCopy);
        let started = Instant::now();
        let o = run(&chip, 0, chunks);
        expect_ok(&o);
        assert_eq!(chip.dev.calls(FaultPoint::SdmaCopy) - before, chunks);
        // Every copy is slowed and the engine copies in order.
        let consumer = CONSUMER_START.lock().unwrap().take().unwrap();
        let floor = Duration::from_millis(delay_ms * chunks);
        assert!(
            consumer.duration_since(started) >= floor,
            "the consumer started {:?} into the run, before {chunks} copies of {delay_ms} ms \
             could land",
            consumer.duration_since(started)
        );
    }
}

#[test]
fn sdma_copies_land_without_injected_delay() {
    let _serial = serial();
    let chip = chip(true, Duration::from_secs(10));
    for chunks in [1, 3, 64] {
        expect_ok(&run(&chip, 0, chunks));
    }
}

#[test]
fn a_counter_wait_completes_the_task_only_once_the_counter_is_set() {
    let _serial = serial();
    let chip = chip(false, Duration::from_secs(10));
    // 64-bit, twice; then 32-bit, whose neighbouring u32 is set 40 ms before it.
    for scenario in [1, 1, 3] {
        let o = run(&chip, scenario, 0);
        expect_ok(&o);
        let set = COUNTER_SET.lock().unwrap().take().unwrap();
        let consumer = CONSUMER_START.lock().unwrap().take().unwrap();
        assert!(
            consumer >= set,
            "the consumer started before the counter was set"
        );
    }
}

#[test]
fn refused_registrations_fail_the_run_naming_the_task_and_the_worker_goes_on() {
    let _serial = serial();
    let plain = chip(false, Duration::from_secs(10));
    expect_code(
        &run(&plain, 0, 1),
        SCHED_ASYNC_COMPLETION_INVALID,
        &["func 0", "no SDMA engine", "enable_sdma=True"],
    );
    expect_code(
        &run(&plain, 2, 0),
        SCHED_ASYNC_COMPLETION_INVALID,
        &["func 4", "engine ROCE (2)", "does not exist"],
    );
    expect_code(
        &run(&plain, 2, 1),
        SCHED_ASYNC_COMPLETION_INVALID,
        &["func 4", "8-byte aligned"],
    );
    expect_code(
        &run(&plain, 2, 2),
        SCHED_ASYNC_WAIT_OVERFLOW,
        &["func 4", "more than 64"],
    );
    // The worker runs the next run normally.
    expect_ok(&run(&plain, 1, 0));

    let sdma = chip(true, Duration::from_secs(10));
    sdma.dev
        .inject(FaultRule::next(FaultPoint::SdmaCopy, FaultAction::Refuse));
    expect_code(
        &run(&sdma, 0, 1),
        SCHED_ASYNC_REGISTRATION_FAILED,
        &["func 0", "refused"],
    );
    expect_ok(&run(&sdma, 0, 2));
}

#[test]
fn a_counter_that_never_arrives_fires_the_no_progress_clock() {
    let _serial = serial();
    let chip = chip(false, Duration::from_millis(300));
    let started = Instant::now();
    let o = run(&chip, 2, 3);
    expect_code(
        &o,
        SCHED_TIMEOUT,
        &["RUNNING_STALLED", "func 4", "wait for deferred completion"],
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    expect_ok(&run(&chip, 1, 0));
}
