//! A communication domain's shared region: its layout ([`CommWorkspace`] at offset 0, one
//! [`CommContext`] per rank, then one window per rank), the layout arithmetic the host uses
//! to build it, and the kernel-side calls ([`peer_ptr`], [`notify`], [`wait`], [`barrier`])
//! that Rust kernels make on it — the mirror of `include/simpler/comm.h`, byte for byte and
//! call for call (`tests/it/c_comm.rs` checks both). The rules are in `docs/comm.md`.
//!
//! Region of `n` ranks (`1 ..= MAX_RANKS`), zeroed except for what the host writes (the
//! workspace header and every rank's context):
//!
//! | offset | what |
//! |---|---|
//! | 0 | [`CommWorkspace`], [`WORKSPACE_BYTES`] |
//! | [`context_offset`]`(r)` = 4096 + r·2048 | [`CommContext`] of rank `r` |
//! | [`window_base_offset`]`(n)` + r·[`window_stride`]`(w)` | window of rank `r` |
//!
//! A kernel that waits for a peer must be submitted with `require_sync_start`
//! (`simpler_task_set_blocks(&d, n, 1)`), so that the runtime runs it where its wait cannot
//! hold up other cores (on the sim's pool, a blocking section: `docs/sim-device.md` §11).
//!
//! After [`WAIT_TIMEOUT`] or [`PEER_FAILED`] the domain's signals and barrier are
//! inconsistent (some ranks counted arrivals the others never matched): the domain must not
//! be used for another collective; the host frees it with its run (`docs/comm.md` §3).

use std::ffi::c_void;
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{assert_layout, GlobalContext, GLOBAL_CONTEXT_SLOT};

/// Most ranks a domain may have.
pub const MAX_RANKS: usize = 64;
/// Bytes of the [`CommWorkspace`] at offset 0 of the region.
pub const WORKSPACE_BYTES: usize = 4096;
/// Bytes from one rank's [`CommContext`] to the next (the context uses [`CONTEXT_BYTES`]).
pub const CONTEXT_STRIDE: usize = 2048;
/// Bytes of a [`CommContext`].
pub const CONTEXT_BYTES: usize = 1056;
/// Alignment of the first window and of the window stride.
pub const WINDOW_ALIGN: usize = 4096;
/// [`CommWorkspace::magic`]: `"SCOM"` read as a little-endian u32.
pub const MAGIC: u32 = 0x4D4F_4353;
/// [`CommWorkspace::version`] of this layout.
pub const VERSION: u32 = 1;

/// Return code: success.
pub const OK: i32 = 0;
/// Return code (a kernel fatal code): the awaited condition did not hold within the timeout.
pub const WAIT_TIMEOUT: i32 = 120;
/// Return code (a kernel fatal code): the host marked the domain failed (a member chip died;
/// [`CommWorkspace::abort`] is non-zero).
pub const PEER_FAILED: i32 = 121;
/// Return code (a kernel fatal code): a bad context, pointer, peer, op, comparison or timeout.
pub const BAD_ARGUMENT: i32 = 122;

/// The C name of a comm return code that is a kernel fatal code: `"SIMPLER_COMM_WAIT_TIMEOUT"`
/// for [`WAIT_TIMEOUT`], `"SIMPLER_COMM_PEER_FAILED"` for [`PEER_FAILED`],
/// `"SIMPLER_COMM_BAD_ARGUMENT"` for [`BAD_ARGUMENT`]; `None` for any other code ([`OK`]
/// included). Used by the runtime to name a kernel's fatal code in the run's message.
pub const fn code_name(code: i32) -> Option<&'static str> {
    match code {
        WAIT_TIMEOUT => Some("SIMPLER_COMM_WAIT_TIMEOUT"),
        PEER_FAILED => Some("SIMPLER_COMM_PEER_FAILED"),
        BAD_ARGUMENT => Some("SIMPLER_COMM_BAD_ARGUMENT"),
        _ => None,
    }
}

/// [`notify`] op: the peer's signal becomes `value` (release store).
pub const NOTIFY_SET: u32 = 0;
/// [`notify`] op: `value` is added to the peer's signal (seq_cst fetch-add, wrapping).
pub const NOTIFY_ADD: u32 = 1;

/// [`wait`] comparison: `*signal == value`.
pub const CMP_EQ: u32 = 0;
/// [`wait`] comparison: `*signal != value`.
pub const CMP_NE: u32 = 1;
/// [`wait`] comparison: `*signal > value`.
pub const CMP_GT: u32 = 2;
/// [`wait`] comparison: `*signal >= value`.
pub const CMP_GE: u32 = 3;
/// [`wait`] comparison: `*signal < value`.
pub const CMP_LT: u32 = 4;
/// [`wait`] comparison: `*signal <= value`.
pub const CMP_LE: u32 = 5;

/// The domain's shared header at offset 0 of the region, 4096 bytes.
///
/// The host writes `magic`, `version` and `rank_num` before the first kernel runs and sets
/// `abort` non-zero when a member chip died. `barrier_arrive` and `barrier_generation` belong
/// to [`barrier`]; each sits on its own cache line. Kernels access the words atomically.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommWorkspace {
    /// [`MAGIC`].
    pub magic: u32,
    /// [`VERSION`].
    pub version: u32,
    /// Number of ranks of the domain.
    pub rank_num: u32,
    /// 0 while the domain is fine; non-zero: every wait and barrier returns [`PEER_FAILED`].
    pub abort: u32,
    /// Reserved, zero.
    pub reserved0: [u64; 6],
    /// Ranks arrived at the current barrier.
    pub barrier_arrive: u64,
    /// Reserved, zero.
    pub reserved1: [u64; 7],
    /// Barriers completed.
    pub barrier_generation: u64,
    /// Reserved, zero.
    pub reserved2: [u64; 495],
}

assert_layout!(
    CommWorkspace,
    size = WORKSPACE_BYTES,
    magic = 0,
    version = 4,
    rank_num = 8,
    abort = 12,
    barrier_arrive = 64,
    barrier_generation = 128
);

impl CommWorkspace {
    /// The header the host writes for a domain of `rank_num` ranks: magic, version and rank
    /// count set, everything else zero.
    pub const fn new(rank_num: u32) -> CommWorkspace {
        CommWorkspace {
            magic: MAGIC,
            version: VERSION,
            rank_num,
            abort: 0,
            reserved0: [0; 6],
            barrier_arrive: 0,
            reserved1: [0; 7],
            barrier_generation: 0,
            reserved2: [0; 495],
        }
    }
}

/// One rank's view of the domain, 1056 bytes, at [`context_offset`]`(rank_id)` of the region
/// (mirrors upstream's `CommContext`). Addresses are of the process the kernel runs in.
/// Written by the host before the domain's first kernel runs, read-only afterwards.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommContext {
    /// Address of the domain's [`CommWorkspace`].
    pub workspace: u64,
    /// [`WORKSPACE_BYTES`].
    pub workspace_size: u64,
    /// This rank, `0..rank_num`.
    pub rank_id: u32,
    /// Number of ranks of the domain.
    pub rank_num: u32,
    /// Bytes of each window: the requested window size rounded up to [`WINDOW_ALIGN`]
    /// ([`window_stride`]).
    pub win_size: u64,
    /// Base address of rank `p`'s window; 0 for `p >= rank_num`.
    pub windows_in: [u64; MAX_RANKS],
    /// The same addresses as `windows_in` (on the sim).
    pub windows_out: [u64; MAX_RANKS],
}

assert_layout!(
    CommContext,
    size = CONTEXT_BYTES,
    workspace = 0,
    workspace_size = 8,
    rank_id = 16,
    rank_num = 20,
    win_size = 24,
    windows_in = 32,
    windows_out = 544
);

impl CommContext {
    /// The context of rank `rank_id` of a domain of `rank_num` ranks whose region starts at
    /// address `region_base` and has windows of `window_size` requested bytes, laid out as
    /// this module describes. `None` when `rank_num` is 0 or above [`MAX_RANKS`], `rank_id >=
    /// rank_num`, `window_size` is 0, or an address overflows.
    pub fn for_rank(
        region_base: u64,
        rank_id: u32,
        rank_num: u32,
        window_size: usize,
    ) -> Option<CommContext> {
        if rank_id >= rank_num {
            return None;
        }
        let n = rank_num as usize;
        region_base.checked_add(u64::try_from(region_len(n, window_size)?).ok()?)?;
        let base = region_base + window_base_offset(n)? as u64;
        let stride = window_stride(window_size)? as u64;
        let mut windows = [0u64; MAX_RANKS];
        for (p, w) in windows.iter_mut().take(n).enumerate() {
            *w = base + p as u64 * stride;
        }
        Some(CommContext {
            workspace: region_base,
            workspace_size: WORKSPACE_BYTES as u64,
            rank_id,
            rank_num,
            win_size: stride,
            windows_in: windows,
            windows_out: windows,
        })
    }
}

/// Offset of rank `rank`'s [`CommContext`] in the region: `4096 + rank * 2048`; `None` when
/// `rank >= MAX_RANKS`.
pub const fn context_offset(rank: usize) -> Option<usize> {
    if rank < MAX_RANKS {
        Some(WORKSPACE_BYTES + rank * CONTEXT_STRIDE)
    } else {
        None
    }
}

/// Offset of rank 0's window in a region of `n` ranks: `4096 + round_up(n * 2048, 4096)`;
/// `None` when `n` is 0 or above [`MAX_RANKS`].
pub const fn window_base_offset(n: usize) -> Option<usize> {
    if n == 0 || n > MAX_RANKS {
        return None;
    }
    Some(WORKSPACE_BYTES + (n * CONTEXT_STRIDE).div_ceil(WINDOW_ALIGN) * WINDOW_ALIGN)
}

/// Bytes from one window to the next — the actual window size, [`CommContext::win_size`] —
/// for a requested window size: `window_size` rounded up to [`WINDOW_ALIGN`]. `None` when
/// `window_size` is 0 or the rounding overflows.
pub const fn window_stride(window_size: usize) -> Option<usize> {
    if window_size == 0 || window_size > usize::MAX - (WINDOW_ALIGN - 1) {
        return None;
    }
    Some(window_size.div_ceil(WINDOW_ALIGN) * WINDOW_ALIGN)
}

/// Bytes of the whole region of `n` ranks with windows of `window_size` requested bytes:
/// [`window_base_offset`]`(n) + n * `[`window_stride`]`(window_size)`. `None` when either is
/// `None` or the sum overflows.
pub const fn region_len(n: usize, window_size: usize) -> Option<usize> {
    let (Some(base), Some(stride)) = (window_base_offset(n), window_stride(window_size)) else {
        return None;
    };
    match n.checked_mul(stride) {
        Some(windows) => base.checked_add(windows),
        None => None,
    }
}

// ---- kernel side ----------------------------------------------------------------------

/// Fails the run with `code` (a non-zero code such as [`WAIT_TIMEOUT`]; 0 becomes 1): stores
/// it into the [`GlobalContext::fatal_code`] that `args` slot [`GLOBAL_CONTEXT_SLOT`] points
/// to, as C's `simpler_comm_fail` / `simpler_kernel_fail` do. The kernel returns after it.
///
/// # Safety
/// `args` is a kernel argument array whose global context slot points to a live
/// [`GlobalContext`] that nothing else accesses meanwhile.
pub unsafe fn fail(args: *mut i64, code: i32) {
    // SAFETY: the caller guarantees slot GLOBAL_CONTEXT_SLOT of `args` holds the address of
    // a live GlobalContext no one else accesses.
    unsafe {
        let global = *args.add(GLOBAL_CONTEXT_SLOT) as usize as *mut GlobalContext;
        (*global).fatal_code = if code != 0 { code } else { 1 };
    }
}

/// The rank's context if it looks consistent (rank count in range, rank inside it).
///
/// # Safety
/// `ctx` is null or points to a readable [`CommContext`].
unsafe fn checked<'a>(ctx: *const CommContext) -> Option<&'a CommContext> {
    // SAFETY: the caller guarantees `ctx` is null or readable; the host never rewrites a
    // context while kernels run, so a shared reference is sound for the call.
    let c = unsafe { ctx.as_ref() }?;
    let n = c.rank_num as usize;
    (n != 0 && n <= MAX_RANKS && c.rank_id < c.rank_num).then_some(c)
}

/// The address in peer `peer`'s window that corresponds to `local` in the own window:
/// `windows_in[peer] + (local - windows_in[rank_id])`. Null when `ctx` is null or
/// inconsistent, `peer >= rank_num`, or `local` is outside
/// `[windows_in[rank_id], + win_size)`.
///
/// # Safety
/// `ctx` is null or points to a readable [`CommContext`]. (`local` is only compared.)
pub unsafe fn peer_ptr(ctx: *const CommContext, local: *const c_void, peer: u32) -> *mut c_void {
    // SAFETY: forwarded from the caller.
    let Some(c) = (unsafe { checked(ctx) }) else {
        return std::ptr::null_mut();
    };
    if peer >= c.rank_num {
        return std::ptr::null_mut();
    }
    let own = c.windows_in[c.rank_id as usize];
    let remote = c.windows_in[peer as usize];
    let addr = local as usize as u64;
    if own == 0 || remote == 0 || addr < own || addr - own >= c.win_size {
        return std::ptr::null_mut();
    }
    (remote + (addr - own)) as usize as *mut c_void
}

/// Writes peer `peer`'s copy of the signal word `local_signal` (an aligned `i32` in the own
/// window): [`NOTIFY_SET`] stores `value` (release), [`NOTIFY_ADD`] adds it (seq_cst,
/// wrapping). Everything this rank wrote before is visible to a peer whose [`wait`] sees the
/// new value. `peer` may be the own rank. Returns [`OK`], or [`BAD_ARGUMENT`] for a bad
/// context, peer or op, or a signal outside the own window or not 4-byte aligned.
///
/// # Safety
/// `ctx` is null or points to a readable [`CommContext`] whose windows are mapped in this
/// process; the peer's signal word is accessed only atomically meanwhile.
pub unsafe fn notify(
    ctx: *const CommContext,
    local_signal: *mut i32,
    peer: u32,
    value: i32,
    op: u32,
) -> i32 {
    if (op != NOTIFY_SET && op != NOTIFY_ADD) || !local_signal.is_aligned() {
        return BAD_ARGUMENT;
    }
    // SAFETY: forwarded from the caller.
    let remote = unsafe { peer_ptr(ctx, local_signal as *const c_void, peer) } as *mut i32;
    if remote.is_null() || !remote.is_aligned() {
        return BAD_ARGUMENT;
    }
    // SAFETY: peer_ptr succeeded, so `ctx` is a readable, consistent context.
    let c = unsafe { &*ctx };
    if local_signal as usize as u64 - c.windows_in[c.rank_id as usize] + 4 > c.win_size {
        return BAD_ARGUMENT; // the word straddles the window's end
    }
    // SAFETY: `remote` is aligned (checked) and inside the peer's window, which the caller
    // guarantees is mapped; the word is only accessed atomically.
    let word = unsafe { AtomicI32::from_ptr(remote) };
    if op == NOTIFY_SET {
        word.store(value, Ordering::Release);
    } else {
        word.fetch_add(value, Ordering::SeqCst);
    }
    OK
}

/// Back-off between poll `polls` and the next: a spin hint for the first few dozen polls,
/// then a yield a few hundred times, then a ~30 µs sleep, so that many ranks waiting on few
/// CPUs leave them to the ranks they wait for.
fn backoff(polls: u32) {
    if polls < 64 {
        std::hint::spin_loop();
    } else if polls < 64 + 512 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(30));
    }
}

/// Polls `done` until it holds ([`OK`]), the workspace's abort word is non-zero
/// ([`PEER_FAILED`]) or `deadline` passes ([`WAIT_TIMEOUT`]), backing off between polls.
fn poll(abort: &AtomicU32, deadline: Option<Instant>, mut done: impl FnMut() -> bool) -> i32 {
    let mut polls = 0u32;
    loop {
        if done() {
            return OK;
        }
        if abort.load(Ordering::Acquire) != 0 {
            return PEER_FAILED;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return WAIT_TIMEOUT;
        }
        backoff(polls);
        polls = polls.saturating_add(1);
    }
}

/// The workspace of a consistent context, as a raw pointer.
///
/// # Safety
/// `ctx` is null or points to a readable [`CommContext`].
unsafe fn workspace<'a>(ctx: *const CommContext) -> Option<(&'a CommContext, *mut CommWorkspace)> {
    // SAFETY: forwarded from the caller.
    let c = unsafe { checked(ctx) }?;
    (c.workspace != 0).then_some((c, c.workspace as usize as *mut CommWorkspace))
}

/// Waits until `*local_signal CMP value` (acquire loads; `cmp` one of the `CMP_*`).
/// Returns [`OK`] once it holds (at once if it already does); [`PEER_FAILED`] when the
/// workspace's abort word is (or becomes) non-zero first; [`WAIT_TIMEOUT`] when it did not
/// hold within `timeout_us` microseconds; [`BAD_ARGUMENT`] for a bad context, a null or
/// misaligned signal, an unknown `cmp` or a `timeout_us` of 0.
///
/// # Safety
/// `ctx` is null or points to a readable [`CommContext`] whose workspace is mapped in this
/// process; `local_signal` is null or points to a live `i32` accessed only atomically
/// meanwhile.
pub unsafe fn wait(
    ctx: *const CommContext,
    local_signal: *const i32,
    cmp: u32,
    value: i32,
    timeout_us: u64,
) -> i32 {
    // SAFETY: forwarded from the caller.
    let Some((_, ws)) = (unsafe { workspace(ctx) }) else {
        return BAD_ARGUMENT;
    };
    if local_signal.is_null() || !local_signal.is_aligned() || cmp > CMP_LE || timeout_us == 0 {
        return BAD_ARGUMENT;
    }
    let deadline = Instant::now().checked_add(Duration::from_micros(timeout_us));
    // SAFETY: the caller guarantees the signal is a live, aligned i32 accessed atomically.
    let signal = unsafe { AtomicI32::from_ptr(local_signal as *mut i32) };
    // SAFETY: the workspace is mapped (caller) and its abort word is accessed atomically.
    let abort = unsafe { AtomicU32::from_ptr(addr_of_mut!((*ws).abort)) };
    poll(abort, deadline, || {
        let v = signal.load(Ordering::Acquire);
        match cmp {
            CMP_EQ => v == value,
            CMP_NE => v != value,
            CMP_GT => v > value,
            CMP_GE => v >= value,
            CMP_LT => v < value,
            _ => v <= value,
        }
    })
}

/// All `rank_num` ranks of the domain meet: returns once every rank has called it (the
/// k-th call of every rank meets the k-th of the others; reusable any number of times).
/// Writes before it on any rank are visible after it on every rank. Returns [`OK`],
/// [`PEER_FAILED`] (abort word set), [`WAIT_TIMEOUT`] (not all ranks came within
/// `timeout_us` microseconds; the barrier is then unusable) or [`BAD_ARGUMENT`] (bad context,
/// a workspace without [`MAGIC`] or of another rank count, a `timeout_us` of 0).
///
/// # Safety
/// `ctx` is null or points to a readable [`CommContext`] whose workspace is mapped in this
/// process, its barrier words accessed only atomically meanwhile.
pub unsafe fn barrier(ctx: *const CommContext, timeout_us: u64) -> i32 {
    // SAFETY: forwarded from the caller.
    let Some((c, ws)) = (unsafe { workspace(ctx) }) else {
        return BAD_ARGUMENT;
    };
    // SAFETY: the header words are written by the host before kernels run, never after.
    let (magic, rank_num) = unsafe { ((*ws).magic, (*ws).rank_num) };
    if timeout_us == 0 || magic != MAGIC || rank_num != c.rank_num {
        return BAD_ARGUMENT;
    }
    // SAFETY: the workspace is mapped (caller); these words are accessed only atomically.
    let (abort, arrive, generation) = unsafe {
        (
            AtomicU32::from_ptr(addr_of_mut!((*ws).abort)),
            AtomicU64::from_ptr(addr_of_mut!((*ws).barrier_arrive)),
            AtomicU64::from_ptr(addr_of_mut!((*ws).barrier_generation)),
        )
    };
    if abort.load(Ordering::Acquire) != 0 {
        return PEER_FAILED;
    }
    let deadline = Instant::now().checked_add(Duration::from_micros(timeout_us));
    let seen = generation.load(Ordering::Acquire);
    if arrive.fetch_add(1, Ordering::SeqCst) + 1 == u64::from(c.rank_num) {
        // The last to arrive: reset the count for the next barrier, then release the others
        // (a rank that sees the new generation also sees the reset).
        arrive.store(0, Ordering::Relaxed);
        generation.fetch_add(1, Ordering::SeqCst);
        return OK;
    }
    poll(abort, deadline, || {
        generation.load(Ordering::Acquire) != seen
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_name_names_the_three_fatal_codes_only() {
        assert_eq!(code_name(120), Some("SIMPLER_COMM_WAIT_TIMEOUT"));
        assert_eq!(code_name(121), Some("SIMPLER_COMM_PEER_FAILED"));
        assert_eq!(code_name(122), Some("SIMPLER_COMM_BAD_ARGUMENT"));
        for code in [OK, 1, 119, 123, 1000, -120, i32::MIN, i32::MAX] {
            assert_eq!(code_name(code), None, "code {code}");
        }
    }
}
