//! A forked child starts a pool of its own (`docs/sim-device.md` §11): the parent's workers
//! do not exist in the child, so a device the child creates must not queue its fibers on the
//! parent's pool. The fork is taken while the parent's workers sleep: they sleep on std's
//! futex-based primitives, because a sleeper in parking_lot's process-wide parking table at
//! a fork left an entry that corrupted the child's table once glibc gave the dead worker's
//! stack to a child thread (about 1 child in 20 hung in its first launch). Run it many times
//! to see it hold: `for i in $(seq 1000); do target/ci/deps/sim_fork-* || break; done`.
//!
//! A test binary of its own, not a module of `it`, and the only test of its process: a fork
//! while other tests run threads would copy their locks.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use simpler_device::sim::{ExecutorKind, SimDevice, SimOptions};
use simpler_device::{AicoreContext, Device, DevicePtr, Topology};

static HITS: AtomicU32 = AtomicU32::new(0);

fn count(_: &AicoreContext<'_>, _: DevicePtr) {
    HITS.fetch_add(1, Ordering::AcqRel);
}

/// Launches `count` on a fresh pool device of one cluster and waits for it; the cores hit.
fn launch_once() -> u32 {
    let dev = SimDevice::with_options(
        Topology {
            clusters: 1,
            aicpu_threads: 2,
        },
        SimOptions {
            executor: ExecutorKind::Pool,
            ..SimOptions::default()
        },
    )
    .unwrap();
    let s = dev.create_stream().unwrap();
    let before = HITS.load(Ordering::Acquire);
    // SAFETY: `count` ignores its argument.
    unsafe { dev.launch_aicore(s, count, DevicePtr::NULL) }.unwrap();
    dev.synchronize_stream(s, Duration::from_secs(20)).unwrap();
    HITS.load(Ordering::Acquire) - before
}

#[test]
fn a_forked_child_runs_kernels_on_a_pool_of_its_own() {
    assert_eq!(launch_once(), 3, "the parent's pool runs");
    // Let the parent's workers fall asleep first: a fork copies whatever lock a thread holds
    // at that instant (parking_lot's own bookkeeping among them), as any fork of a threaded
    // process does.
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: the child only creates a device, runs one launch and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(launch_once).is_ok_and(|n| n == 3);
        // SAFETY: `_exit` ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is this process's child; `status` is a valid place for its status.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: `pid` is this process's child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child's launch did not finish in 60 s (a pool with no workers)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's launch failed: status {status:#x}"
    );
    assert_eq!(launch_once(), 3, "the parent's pool still runs");
}
