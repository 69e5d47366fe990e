//! What the process tests share: a chip callable of library images built once from tiny C
//! sources (an affine kernel, a slow one, one that aborts, one that dereferences NULL), the
//! builder of such callables, a small chip configuration, the child program, and checks of
//! this process's children.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use simpler_host::{CallableSpec, WorkerConfig};
use simpler_test_support::c_sources::{self, Kernel, Y};
use simpler_worker::memory::SharedRegion;
use simpler_worker::process::ChildProgram;
use simpler_worker::HostMemory;

/// Elements of the test vectors.
pub const N: usize = 1024;

/// Kernel modes (the callable's `mode` scalar picks the kernel func id).
pub const AFFINE: u64 = 0;
/// Sleeps ~20 s, then as AFFINE.
pub const SLOW: u64 = 1;
/// Prints `c_sources::ABORT_LINE` to stderr, then calls abort().
pub const ABORT: u64 = 2;
/// Writes through a NULL pointer.
pub const SEGV: u64 = 3;

const AFFINE_C: &str = r#"#include "simpler/kernel.h"

SIMPLER_KERNEL void affine(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    SimplerChipTensor *y = simpler_arg_tensor(args, 1);
    const float *xs = (const float *)(uintptr_t)x->buffer_addr;
    float *ys = (float *)(uintptr_t)y->buffer_addr;
    for (uint64_t i = 0; i < y->shapes[0]; ++i) ys[i] = 2.0f * xs[i] + 1.0f;
}
"#;

const SLOW_C: &str = r#"#define _POSIX_C_SOURCE 199309L
#include <time.h>
#include "simpler/kernel.h"

SIMPLER_KERNEL void slow_affine(int64_t *args) {
    struct timespec step = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 2000; ++i) nanosleep(&step, NULL);
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    SimplerChipTensor *y = simpler_arg_tensor(args, 1);
    const float *xs = (const float *)(uintptr_t)x->buffer_addr;
    float *ys = (float *)(uintptr_t)y->buffer_addr;
    for (uint64_t i = 0; i < y->shapes[0]; ++i) ys[i] = 2.0f * xs[i] + 1.0f;
}
"#;

/// The test callable (library images), built once per test process.
pub fn callable() -> Arc<CallableSpec> {
    static SPEC: OnceLock<Arc<CallableSpec>> = OnceLock::new();
    SPEC.get_or_init(|| {
        let k = |func_id, source, entry| Kernel {
            func_id,
            source,
            entry,
        };
        let kernels = [
            k(AFFINE as u32, "affine.c", "affine"),
            k(SLOW as u32, "slow.c", "slow_affine"),
            k(ABORT as u32, "abort.c", "call_abort"),
            k(SEGV as u32, "null.c", "null_deref"),
        ];
        build_callable(&[
            (
                "simpler.toml",
                &c_sources::manifest("l3proc", &kernels, Y::Out, Some(&[N as u64])),
            ),
            ("orchestration.c", &c_sources::orchestration(Y::Out, None)),
            ("affine.c", AFFINE_C),
            ("slow.c", SLOW_C),
            ("abort.c", c_sources::ABORT_C),
            ("null.c", c_sources::NULL_DEREF_C),
        ])
    })
    .clone()
}

/// A chip callable of library images built from `files` (path in the example folder,
/// contents), one of them `simpler.toml`, as `simpler build` builds an example.
pub fn build_callable(files: &[(&str, &str)]) -> Arc<CallableSpec> {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::tempdir_in(&root).unwrap();
    for (file, body) in files {
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    use simpler_toolchain::build;
    let cc = build::compiler_words(std::env::var_os("CC")).unwrap();
    let compiler = build::Compiler::new(
        cc,
        vec![build::repository_include_dir()],
        simpler_toolchain::cache::KernelCache::new(root.join("process-kernel-cache")),
    )
    .unwrap();
    let built = build::build_example(dir.path(), &compiler).unwrap();
    Arc::new(built.bundle.into_spec())
}

/// A small chip: quick to bring up.
pub fn small_chip() -> WorkerConfig {
    WorkerConfig {
        topology: simpler_device::Topology {
            clusters: 1,
            aicpu_threads: 2,
        },
        heap_size: 16 << 20,
        task_window: 64,
        ..WorkerConfig::default()
    }
}

/// The Rust child program cargo built for these tests.
pub fn child_program() -> ChildProgram {
    ChildProgram::new(env!("CARGO_BIN_EXE_simpler-child"))
}

/// A startup deadline generous for a loaded 2-core machine.
pub fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// Serializes the tests that start child processes: they count this process's children.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pids of this process's live children (every thread's).
pub fn children() -> Vec<u32> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(text.split_whitespace().map(|p| p.parse::<u32>().unwrap()));
    }
    pids
}

/// True while process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    }
}

/// Waits up to `limit` for `pid` to be gone; true when it is.
pub fn gone_within(pid: u32, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !alive(pid)
}

/// `values` written as f32 into `region` at byte `offset`.
pub fn write_f32(region: &SharedRegion, offset: usize, values: &[f32]) {
    assert!(offset + values.len() * 4 <= region.len());
    for (i, v) in values.iter().enumerate() {
        // SAFETY: inside the region (asserted); no task runs on it now.
        unsafe { std::ptr::write_unaligned(region.as_ptr().add(offset + 4 * i).cast::<f32>(), *v) };
    }
}

/// `n` f32 read from `region` at byte `offset`.
pub fn read_f32(region: &SharedRegion, offset: usize, n: usize) -> Vec<f32> {
    assert!(offset + n * 4 <= region.len());
    (0..n)
        // SAFETY: inside the region (asserted); no task runs on it now.
        .map(|i| unsafe {
            std::ptr::read_unaligned(region.as_ptr().add(offset + 4 * i).cast::<f32>())
        })
        .collect()
}

/// Entries of /dev/shm now.
pub fn dev_shm() -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(Path::new("/dev/shm"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// `len` bytes at `offset` of a shared region, as its own host memory (as the engine's heap
/// ring hands out allocations): children see the span, not the region.
pub struct RegionSlice {
    /// The region.
    pub region: Arc<SharedRegion>,
    /// First byte in the region.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

// SAFETY: the span lies inside the region (checked by `new`), which stays mapped while the
// `Arc` lives.
unsafe impl HostMemory for RegionSlice {
    fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `offset` is inside the region (checked by `new`).
        unsafe { self.region.as_ptr().add(self.offset) }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn shared(&self) -> Option<simpler_worker::SharedRef> {
        Some(self.region.share(self.offset as u64, self.len as u64))
    }
}

impl RegionSlice {
    /// The span `[offset, offset + len)` of `region`.
    pub fn new(region: Arc<SharedRegion>, offset: usize, len: usize) -> RegionSlice {
        assert!(offset + len <= region.len());
        RegionSlice {
            region,
            offset,
            len,
        }
    }
}

/// The buffers the chip-process tests run over: `x`, [`N`] f32 in a region of its own, and
/// `y`, [`N`] f32 per chip in a second region (chip `c`'s at byte `c · N · 4`).
pub struct XyBuffers {
    /// The region of `x`, [`N`] f32.
    pub xr: Arc<SharedRegion>,
    /// The region of `y`, 2 × [`N`] f32.
    pub yr: Arc<SharedRegion>,
    /// `x` as a tensor.
    pub x: simpler_worker::Tensor,
}

impl XyBuffers {
    /// Allocates both regions from `w` (zeroed).
    pub fn new(w: &simpler_worker::Worker) -> Self {
        let xr = w.create_buffer((N * 4) as u64).unwrap();
        let yr = w.create_buffer((2 * N * 4) as u64).unwrap();
        let xm: Arc<dyn HostMemory> = xr.clone();
        let x = simpler_worker::Tensor::new(
            simpler_worker::Memory::Host(xm),
            &[N as u64],
            simpler_abi::DataType::Float32,
        )
        .unwrap();
        XyBuffers { xr, yr, x }
    }

    /// Chip `c`'s half of `y` as a tensor.
    pub fn y(&self, c: u64) -> simpler_worker::Tensor {
        let ym: Arc<dyn HostMemory> = self.yr.clone();
        simpler_worker::Tensor::view(
            simpler_worker::Memory::Host(ym),
            c * N as u64 * 4,
            &[N as u64],
            &[1],
            simpler_abi::DataType::Float32,
        )
        .unwrap()
    }
}
