//! The sim's executors as device code sees them (`docs/sim-device.md` §11): on the pool, a
//! kernel that waits for other cores outside every device wait — spinning on a flag, or
//! sleeping in a loop — still finishes (the stall monitor replaces the workers it holds), a
//! blocking section lets such a wait proceed at once, many devices share the pool's threads
//! instead of starting their own, a fiber's device waits let the other fibers run, and the
//! thread-per-core executor still runs every kernel (that many devices share the pool's
//! threads is `sim_pool_threads.rs`, a process of its own, so that no other test's threads
//! are counted).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use simpler_device::sim::{ExecutorKind, SimDevice, SimOptions};
use simpler_device::{AicoreContext, Device, DevicePtr, Topology};

const LONG: Duration = Duration::from_secs(60);
/// How long a rendezvousing kernel waits for the others before it gives up (a failure).
const GIVE_UP: Duration = Duration::from_secs(30);

/// A meeting point in device memory: an arrival count and a give-up count.
#[repr(C)]
struct Meeting {
    arrived: AtomicU32,
    gave_up: AtomicU32,
}

fn device(executor: ExecutorKind, clusters: u32) -> SimDevice {
    SimDevice::with_options(
        Topology {
            clusters,
            aicpu_threads: 2,
        },
        SimOptions {
            executor,
            ..SimOptions::default()
        },
    )
    .unwrap()
}

/// Every core arrives, then waits until all `3 × clusters` have, by `wait` (which must
/// return whether the meeting is complete).
fn meet(ctx: &AicoreContext<'_>, arg: DevicePtr, wait: impl Fn(&Meeting, u32) -> bool) {
    let _ = ctx;
    // SAFETY: every launch of these kernels passes the address of a live `Meeting` that
    // outlives the launch, followed by the core count as a u32.
    let (m, parties) = unsafe {
        let m = &*(arg.addr() as *const Meeting);
        let parties = *((arg.addr() as usize + std::mem::size_of::<Meeting>()) as *const u32);
        (m, parties)
    };
    m.arrived.fetch_add(1, Ordering::AcqRel);
    let start = Instant::now();
    while !wait(m, parties) {
        if start.elapsed() > GIVE_UP {
            m.gave_up.fetch_add(1, Ordering::AcqRel);
            return;
        }
    }
}

/// Spins (no device wait) until every core has arrived.
fn spin_meet(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    meet(ctx, arg, |m, n| {
        std::hint::spin_loop();
        m.arrived.load(Ordering::Acquire) >= n
    });
}

/// Sleeps on the OS (no device wait) between looks.
fn sleep_meet(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    meet(ctx, arg, |m, n| {
        std::thread::sleep(Duration::from_micros(100));
        m.arrived.load(Ordering::Acquire) >= n
    });
}

/// Spins inside a blocking section.
fn blocking_meet(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    simpler_device::wait::blocking(|| spin_meet(ctx, arg));
}

/// Waits with the device's fiber-aware sleep.
fn device_sleep_meet(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    meet(ctx, arg, |m, n| {
        simpler_device::wait::sleep(Duration::from_micros(100));
        m.arrived.load(Ordering::Acquire) >= n
    });
}

/// Runs `kernel` on every core of a fresh device of `clusters` clusters and returns how
/// many cores gave up waiting for the others.
fn rendezvous(executor: ExecutorKind, clusters: u32, kernel: simpler_device::AicoreKernel) -> u32 {
    let dev = device(executor, clusters);
    let arg = dev.malloc(64).unwrap();
    let mut bytes = vec![0u8; 64];
    bytes[8..12].copy_from_slice(&(clusters * 3).to_ne_bytes());
    dev.copy_to_device(arg, &bytes).unwrap();
    let s = dev.create_stream().unwrap();
    // SAFETY: `arg` holds a zeroed `Meeting` and the core count, and lives until the device
    // is dropped, after the stream has synchronized.
    unsafe { dev.launch_aicore(s, kernel, arg) }.unwrap();
    dev.synchronize_stream(s, LONG).unwrap();
    let mut out = vec![0u8; 8];
    dev.copy_from_device(&mut out, arg).unwrap();
    let arrived = u32::from_ne_bytes(out[0..4].try_into().unwrap());
    assert_eq!(arrived, clusters * 3, "every core ran the kernel");
    u32::from_ne_bytes(out[4..8].try_into().unwrap())
}

#[test]
fn a_cohort_spinning_outside_device_waits_still_meets_on_the_pool() {
    assert_eq!(rendezvous(ExecutorKind::Pool, 4, spin_meet), 0);
}

#[test]
fn a_cohort_of_more_spinners_than_cpus_still_meets_on_the_pool() {
    // 48 spinning cores on a host of a few CPUs: once the pool has grown past the CPUs, each
    // spinner gets a fraction of a CPU, and must still count as busy.
    assert_eq!(rendezvous(ExecutorKind::Pool, 16, spin_meet), 0);
}

#[test]
fn a_cohort_sleeping_on_the_os_still_meets_on_the_pool() {
    assert_eq!(rendezvous(ExecutorKind::Pool, 8, sleep_meet), 0);
}

#[test]
fn a_cohort_in_blocking_sections_meets_on_the_pool() {
    assert_eq!(rendezvous(ExecutorKind::Pool, 8, blocking_meet), 0);
}

#[test]
fn a_cohort_sleeping_through_the_device_meets_on_the_pool() {
    assert_eq!(rendezvous(ExecutorKind::Pool, 24, device_sleep_meet), 0);
}

#[test]
fn the_thread_per_core_executor_runs_every_core() {
    assert_eq!(rendezvous(ExecutorKind::ThreadPerCore, 4, spin_meet), 0);
    let dev = device(ExecutorKind::ThreadPerCore, 1);
    assert_eq!(dev.executor(), ExecutorKind::ThreadPerCore);
}
