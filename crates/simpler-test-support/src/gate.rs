//! Gates: kernels that hold their core until a test opens their gate, then run
//! [`add_one`]. A test takes a gate with [`Gate::close`] and runs its kernel (func id
//! [`Gate::func`] of [`add_one_kernels`]); dropping the gate opens it, so a failing test never
//! leaves a kernel waiting.
//!
//! Every gate serves one test for the life of the process: the tests of one binary run
//! concurrently, and a gate handed on could be closed again before a kernel of the test that
//! opened it looked. [`GATES`] bounds how many gates one test process takes in all.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use simpler_abi::KernelEntry;

use crate::kernel::add_one;

/// How many gates one test process can take.
pub const GATES: usize = 16;

static OPEN: [AtomicBool; GATES] = [const { AtomicBool::new(true) }; GATES];
static TAKEN: AtomicUsize = AtomicUsize::new(0);

/// A closed gate of this test; open once [`Gate::open`] is called or it is dropped.
#[derive(Debug)]
pub struct Gate {
    index: usize,
}

impl Gate {
    /// A gate no other test of this process has taken, closed.
    ///
    /// # Panics
    /// When this process has already taken all [`GATES`] gates (raise the constant).
    pub fn close() -> Gate {
        let index = TAKEN.fetch_add(1, Ordering::Relaxed);
        assert!(
            index < GATES,
            "this test process took all {GATES} gates: raise simpler_test_support::gate::GATES"
        );
        OPEN[index].store(false, Ordering::Release);
        Gate { index }
    }

    /// The gate's position in [`GATED`] (`0..GATES`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The func id of this gate's kernel in [`add_one_kernels`]: `1 + index`.
    pub fn func(&self) -> u32 {
        1 + self.index as u32
    }

    /// Opens the gate: its kernels, waiting or still to come, run.
    pub fn open(&self) {
        OPEN[self.index].store(true, Ordering::Release);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// Waits until gate `G` is open, then runs [`add_one`].
///
/// # Safety
/// As [`add_one`].
unsafe extern "C-unwind" fn gated<const G: usize>(args: *mut i64) {
    while !OPEN[G].load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: the same arguments as `add_one`.
    unsafe { add_one(args) }
}

/// The gated kernels: the one at `i` waits for gate `i` to open, then runs [`add_one`].
pub const GATED: [KernelEntry; GATES] = [
    gated::<0>,
    gated::<1>,
    gated::<2>,
    gated::<3>,
    gated::<4>,
    gated::<5>,
    gated::<6>,
    gated::<7>,
    gated::<8>,
    gated::<9>,
    gated::<10>,
    gated::<11>,
    gated::<12>,
    gated::<13>,
    gated::<14>,
    gated::<15>,
];

/// (func id, kernel) of [`add_one`] and the gated kernels: func 0 runs at once, func `1 + i`
/// waits for gate `i` ([`Gate::func`]). `1 + GATES` ids in all.
pub fn add_one_kernels() -> impl Iterator<Item = (u32, KernelEntry)> {
    let gated = GATED
        .into_iter()
        .enumerate()
        .map(|(i, k)| (1 + i as u32, k));
    std::iter::once((0, add_one as KernelEntry)).chain(gated)
}
