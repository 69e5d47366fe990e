//! Many sim devices share the process's pool instead of starting threads of their own
//! (`docs/sim-device.md` §11).
//!
//! A test binary of its own, not a module of `it`, and the only test of its process, so that
//! the OS thread counts it reads are its own.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use simpler_device::sim::{ExecutorKind, SimDevice, SimOptions};
use simpler_device::{AicoreContext, Device, DevicePtr, Topology};

const LONG: Duration = Duration::from_secs(60);

fn device(clusters: u32) -> SimDevice {
    SimDevice::with_options(
        Topology {
            clusters,
            aicpu_threads: 6,
        },
        SimOptions {
            executor: ExecutorKind::Pool,
            ..SimOptions::default()
        },
    )
    .unwrap()
}

fn os_threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap()
}

static HITS: AtomicU32 = AtomicU32::new(0);

fn count(_: &AicoreContext<'_>, _: DevicePtr) {
    HITS.fetch_add(1, Ordering::AcqRel);
}

#[test]
fn eight_devices_share_the_pool_instead_of_starting_threads() {
    // Start the pool first: its workers are not the devices' threads.
    drop(device(1));
    let before = os_threads();
    let devs: Vec<Arc<SimDevice>> = (0..8).map(|_| Arc::new(device(24))).collect();
    let after_start = os_threads();
    let hits = HITS.load(Ordering::Acquire);
    let runners: Vec<_> = devs
        .iter()
        .map(|d| {
            let d = d.clone();
            std::thread::spawn(move || {
                let s = d.create_stream().unwrap();
                for _ in 0..20 {
                    // SAFETY: `count` ignores its argument.
                    unsafe { d.launch_aicore(s, count, DevicePtr::NULL) }.unwrap();
                }
                d.synchronize_stream(s, LONG).unwrap();
            })
        })
        .collect();
    for r in runners {
        r.join().unwrap();
    }
    assert_eq!(HITS.load(Ordering::Acquire) - hits, 8 * 20 * 72);
    // 8 chips of 72 cores and 6 AICPU threads each: 624 device threads, thread-per-core. On
    // the pool they are fibers; the stall monitor may add a few workers on a loaded host.
    assert!(
        after_start - before <= 2,
        "starting 8 devices added {} OS threads",
        after_start - before
    );
    assert!(
        simpler_device::sim::pool_threads_started() <= simpler_device::sim::pool_threads() + 16,
        "{} pool threads started for a pool of {}",
        simpler_device::sim::pool_threads_started(),
        simpler_device::sim::pool_threads()
    );
}
