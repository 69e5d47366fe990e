/*
 * simpler/comm.h — kernel-side communication between the chips of a communication domain.
 *
 * A domain of n ranks (1 <= n <= SIMPLER_COMM_MAX_RANKS) is one shared memory region that
 * every member chip maps; each rank owns one window of it and can read and write every
 * peer's window. The host writes the region's header and one SimplerCommContext per rank; a
 * kernel receives the address of its rank's context as a u64 scalar and calls the helpers
 * below: simpler_comm_peer_ptr (the peer's copy of an address in the own window),
 * simpler_comm_notify / simpler_comm_wait (signals: int32 words in the windows) and
 * simpler_comm_barrier (all ranks meet). The rules — who owns which bytes, how the host
 * builds the region, what happens when a member chip dies — are in docs/comm.md.
 *
 * Region layout (offsets from the start of the region; everything else starts zeroed):
 *     0                              SimplerCommWorkspace (SIMPLER_COMM_WORKSPACE_BYTES)
 *     4096 + r * 2048                SimplerCommContext of rank r (simpler_comm_context_offset)
 *     win_base + r * win_stride      window of rank r, where
 *         win_base   = 4096 + round_up(n * 2048, 4096)   (simpler_comm_window_base_offset)
 *         win_stride = round_up(window size, 4096)       (simpler_comm_window_stride)
 *
 * A KERNEL THAT WAITS FOR A PEER must be submitted with require_sync_start
 * (simpler_task_set_blocks(&d, block_num, 1)): the runtime then runs its blocks where a
 * wait cannot hold up other cores (on the sim's pool, a blocking section,
 * docs/sim-device.md §11). Every wait takes a finite, positive timeout in microseconds.
 *
 * Return codes are kernel fatal codes (SIMPLER_COMM_*; distinct from the runtime's codes
 * and the kernels' 1000 + T): a kernel passes a non-zero one to simpler_comm_fail and
 * returns. After SIMPLER_COMM_WAIT_TIMEOUT or SIMPLER_COMM_PEER_FAILED the domain's signals
 * and barrier are inconsistent (some ranks counted arrivals the others never matched): the
 * domain must not be used for another collective; the host frees it with its run
 * (docs/comm.md §3).
 *
 * Include order is free and no feature-test macro is needed: the header works in strict
 * -std=c11 whatever was included before it, and defines no _POSIX_C_SOURCE of its own. The
 * waits back off with C11 <threads.h> (thrd_yield, thrd_sleep) and measure timeouts on a
 * monotonic clock: POSIX clock_gettime(CLOCK_MONOTONIC) when the headers included so far
 * declare it, else on 64-bit Linux that libc function declared here under a private name,
 * else C23 timespec_get(TIME_MONOTONIC); only where none exists, timespec_get(TIME_UTC),
 * whose steps move the deadlines. SIMPLER_COMM_PRIV_CLOCK names the choice. It includes
 * simpler/kernel.h.
 *
 * Mirrors crates/simpler-abi/src/comm.rs byte for byte and call for call;
 * crates/simpler-abi/tests/it/c_comm.rs checks both.
 */
#ifndef SIMPLER_COMM_H
#define SIMPLER_COMM_H

#include <stdint.h>
#include <time.h>

/* C11 threads unless the implementation says it has none (then POSIX sched_yield). */
#if defined(__STDC_NO_THREADS__)
#define SIMPLER_COMM_PRIV_THREADS 0
#elif defined(__has_include)
#if __has_include(<threads.h>)
#define SIMPLER_COMM_PRIV_THREADS 1
#else
#define SIMPLER_COMM_PRIV_THREADS 0
#endif
#else
#define SIMPLER_COMM_PRIV_THREADS 1
#endif
#if SIMPLER_COMM_PRIV_THREADS
#include <threads.h>
#endif

#include "simpler/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layout -------------------------------------------------------------------------- */

#define SIMPLER_COMM_MAX_RANKS 64
#define SIMPLER_COMM_WORKSPACE_BYTES 4096u /* the workspace at offset 0 of the region */
#define SIMPLER_COMM_CONTEXT_STRIDE 2048u  /* bytes from one rank's context to the next */
#define SIMPLER_COMM_WINDOW_ALIGN 4096u    /* window base and stride alignment */
#define SIMPLER_COMM_MAGIC 0x4D4F4353u     /* "SCOM" little-endian */
#define SIMPLER_COMM_VERSION 1u

/* ---- return codes (kernel fatal codes) ------------------------------------------------ */

#define SIMPLER_COMM_OK 0
#define SIMPLER_COMM_WAIT_TIMEOUT 120  /* the awaited condition did not hold within the timeout */
#define SIMPLER_COMM_PEER_FAILED 121   /* the host marked the domain failed (a member chip died) */
#define SIMPLER_COMM_BAD_ARGUMENT 122  /* bad context, pointer, peer, op, comparison or timeout */

/* ---- notify ops and wait comparisons --------------------------------------------------- */

#define SIMPLER_COMM_NOTIFY_SET 0u /* peer's signal = value (release store) */
#define SIMPLER_COMM_NOTIFY_ADD 1u /* peer's signal += value (seq_cst fetch-add, wrapping) */

#define SIMPLER_COMM_CMP_EQ 0u /* *signal == value */
#define SIMPLER_COMM_CMP_NE 1u /* *signal != value */
#define SIMPLER_COMM_CMP_GT 2u /* *signal >  value */
#define SIMPLER_COMM_CMP_GE 3u /* *signal >= value */
#define SIMPLER_COMM_CMP_LT 4u /* *signal <  value */
#define SIMPLER_COMM_CMP_LE 5u /* *signal <= value */

/*
 * The domain's shared header at offset 0, 4096 bytes. The host writes magic, version and
 * rank_num and sets `abort` non-zero when a member chip died; barrier_arrive and
 * barrier_generation belong to simpler_comm_barrier (each on its own cache line).
 */
typedef struct SimplerCommWorkspace {
    uint32_t magic;              /* SIMPLER_COMM_MAGIC */
    uint32_t version;            /* SIMPLER_COMM_VERSION */
    uint32_t rank_num;           /* n */
    uint32_t abort;              /* 0 = fine; non-zero: every wait returns PEER_FAILED */
    uint64_t reserved0[6];
    uint64_t barrier_arrive;     /* ranks arrived at the current barrier */
    uint64_t reserved1[7];
    uint64_t barrier_generation; /* barriers completed */
    uint64_t reserved2[495];
} SimplerCommWorkspace;
_Static_assert(sizeof(SimplerCommWorkspace) == 4096, "CommWorkspace is 4096 bytes");
_Static_assert(offsetof(SimplerCommWorkspace, version) == 4, "CommWorkspace.version");
_Static_assert(offsetof(SimplerCommWorkspace, rank_num) == 8, "CommWorkspace.rank_num");
_Static_assert(offsetof(SimplerCommWorkspace, abort) == 12, "CommWorkspace.abort");
_Static_assert(offsetof(SimplerCommWorkspace, barrier_arrive) == 64, "CommWorkspace.barrier_arrive");
_Static_assert(offsetof(SimplerCommWorkspace, barrier_generation) == 128, "CommWorkspace.barrier_generation");

/*
 * One rank's view of the domain, 1056 bytes (in a 2048-byte slot of the region). Addresses
 * are of the process the kernel runs in. Written by the host before the domain's first
 * kernel runs; read-only afterwards.
 */
typedef struct SimplerCommContext {
    uint64_t workspace;                              /* address of the SimplerCommWorkspace */
    uint64_t workspace_size;                         /* SIMPLER_COMM_WORKSPACE_BYTES */
    uint32_t rank_id;                                /* this rank, 0..rank_num */
    uint32_t rank_num;                               /* n */
    uint64_t win_size;                               /* bytes of each window (the stride) */
    uint64_t windows_in[SIMPLER_COMM_MAX_RANKS];     /* rank p's window base; 0 for p >= n */
    uint64_t windows_out[SIMPLER_COMM_MAX_RANKS];    /* same as windows_in on the sim */
} SimplerCommContext;
_Static_assert(sizeof(SimplerCommContext) == 1056, "CommContext is 1056 bytes");
_Static_assert(offsetof(SimplerCommContext, workspace_size) == 8, "CommContext.workspace_size");
_Static_assert(offsetof(SimplerCommContext, rank_id) == 16, "CommContext.rank_id");
_Static_assert(offsetof(SimplerCommContext, rank_num) == 20, "CommContext.rank_num");
_Static_assert(offsetof(SimplerCommContext, win_size) == 24, "CommContext.win_size");
_Static_assert(offsetof(SimplerCommContext, windows_in) == 32, "CommContext.windows_in");
_Static_assert(offsetof(SimplerCommContext, windows_out) == 544, "CommContext.windows_out");

/* ---- layout arithmetic (0 when out of range) ------------------------------------------- */

/* Offset of rank r's SimplerCommContext in the region; 0 when r >= SIMPLER_COMM_MAX_RANKS. */
static inline uint64_t simpler_comm_context_offset(uint32_t r) {
    return r < SIMPLER_COMM_MAX_RANKS ? SIMPLER_COMM_WORKSPACE_BYTES + (uint64_t)r * SIMPLER_COMM_CONTEXT_STRIDE : 0;
}
/* Offset of rank 0's window in a region of n ranks; 0 when n is 0 or above the maximum. */
static inline uint64_t simpler_comm_window_base_offset(uint32_t n) {
    if (n == 0 || n > SIMPLER_COMM_MAX_RANKS) return 0;
    const uint64_t ctx = (uint64_t)n * SIMPLER_COMM_CONTEXT_STRIDE;
    return SIMPLER_COMM_WORKSPACE_BYTES + (ctx + SIMPLER_COMM_WINDOW_ALIGN - 1) / SIMPLER_COMM_WINDOW_ALIGN * SIMPLER_COMM_WINDOW_ALIGN;
}
/* Bytes from one window to the next (the actual window size) for a requested window size;
 * 0 when the request is 0 or too large. */
static inline uint64_t simpler_comm_window_stride(uint64_t window_size) {
    if (window_size == 0 || window_size > UINT64_MAX - SIMPLER_COMM_WINDOW_ALIGN) return 0;
    return (window_size + SIMPLER_COMM_WINDOW_ALIGN - 1) / SIMPLER_COMM_WINDOW_ALIGN * SIMPLER_COMM_WINDOW_ALIGN;
}
/* Bytes of the whole region for n ranks and a requested window size; 0 when out of range. */
static inline uint64_t simpler_comm_region_len(uint32_t n, uint64_t window_size) {
    const uint64_t base = simpler_comm_window_base_offset(n), stride = simpler_comm_window_stride(window_size);
    if (base == 0 || stride == 0 || stride > (UINT64_MAX - base) / n) return 0;
    return base + (uint64_t)n * stride;
}

/* ---- kernel-side helpers ------------------------------------------------------------------ */

/* Fails the run with `code` (a SIMPLER_COMM_* code; non-zero) — simpler_kernel_fail. */
static inline void simpler_comm_fail(int64_t *args, int32_t code) { simpler_kernel_fail(args, code); }

/*
 * The address in peer `peer`'s window that corresponds to `local` in the own window:
 * windows_in[peer] + (local - windows_in[rank_id]). NULL when ctx is NULL or inconsistent,
 * peer >= rank_num, or `local` is outside [windows_in[rank_id], + win_size).
 */
static inline void *simpler_comm_peer_ptr(const SimplerCommContext *ctx, const void *local, uint32_t peer) {
    if (ctx == NULL || ctx->rank_num == 0 || ctx->rank_num > SIMPLER_COMM_MAX_RANKS || ctx->rank_id >= ctx->rank_num ||
        peer >= ctx->rank_num)
        return NULL;
    const uint64_t own = ctx->windows_in[ctx->rank_id], addr = (uint64_t)(uintptr_t)local;
    if (own == 0 || ctx->windows_in[peer] == 0 || addr < own || addr - own >= ctx->win_size) return NULL;
    return (void *)(uintptr_t)(ctx->windows_in[peer] + (addr - own));
}

/* Internal: the clock of the timeouts (see the top of this file), and its name. */
#if defined(CLOCK_MONOTONIC)
#define SIMPLER_COMM_PRIV_CLOCK "posix-monotonic"
#define SIMPLER_COMM_PRIV_GETTIME(ts) clock_gettime(CLOCK_MONOTONIC, (ts))
#elif defined(__linux__) && defined(__LP64__)
/* libc's clock_gettime under a name of its own, so that it cannot clash with a declaration
 * <time.h> makes or omits; on 64-bit Linux clockid_t is int, time_t 64-bit and
 * CLOCK_MONOTONIC 1 (kernel ABI). */
extern int simpler_comm_priv_clock_gettime(int clock_id, struct timespec *ts) __asm__("clock_gettime");
#define SIMPLER_COMM_PRIV_CLOCK "linux-monotonic"
#define SIMPLER_COMM_PRIV_GETTIME(ts) simpler_comm_priv_clock_gettime(1, (ts))
#elif defined(TIME_MONOTONIC)
#define SIMPLER_COMM_PRIV_CLOCK "c23-monotonic"
#define SIMPLER_COMM_PRIV_GETTIME(ts) timespec_get((ts), TIME_MONOTONIC)
#else
#define SIMPLER_COMM_PRIV_CLOCK "utc"
#define SIMPLER_COMM_PRIV_GETTIME(ts) timespec_get((ts), TIME_UTC)
#endif

#if !SIMPLER_COMM_PRIV_THREADS
int sched_yield(void); /* POSIX; the same prototype as <sched.h>'s */
#endif

/* Internal: nanoseconds on SIMPLER_COMM_PRIV_CLOCK. */
static inline uint64_t simpler_comm_priv_now_ns(void) {
    struct timespec ts = {0, 0};
    (void)SIMPLER_COMM_PRIV_GETTIME(&ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Internal: back-off between polls number `polls` and `polls + 1`: a spin hint for the first
 * few dozen, then a yield (thrd_yield) a few hundred times, then a ~30 µs sleep
 * (thrd_sleep), so that many ranks waiting on few CPUs leave them to the ranks they wait
 * for. Without <threads.h>, sched_yield stands in for both. */
static inline void simpler_comm_priv_backoff(uint32_t polls) {
    if (polls < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
        __asm__ __volatile__("yield");
#endif
    } else {
#if SIMPLER_COMM_PRIV_THREADS
        if (polls < 64 + 512) {
            thrd_yield();
        } else {
            const struct timespec nap = {0, 30000};
            (void)thrd_sleep(&nap, NULL);
        }
#else
        (void)sched_yield();
#endif
    }
}

/* Internal: the deadline `timeout_us` from now (saturating). */
static inline uint64_t simpler_comm_priv_deadline(uint64_t timeout_us) {
    const uint64_t now = simpler_comm_priv_now_ns();
    const uint64_t ns = timeout_us > UINT64_MAX / 1000u ? UINT64_MAX : timeout_us * 1000u;
    return ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
}

/* Internal: the workspace of a context that looks valid, else NULL. */
static inline SimplerCommWorkspace *simpler_comm_priv_workspace(const SimplerCommContext *ctx) {
    if (ctx == NULL || ctx->workspace == 0 || ctx->rank_num == 0 || ctx->rank_num > SIMPLER_COMM_MAX_RANKS ||
        ctx->rank_id >= ctx->rank_num)
        return NULL;
    return (SimplerCommWorkspace *)(uintptr_t)ctx->workspace;
}

/* Internal: whether `v CMP value` holds (cmp already checked). */
static inline int simpler_comm_priv_holds(int32_t v, uint32_t cmp, int32_t value) {
    switch (cmp) {
    case SIMPLER_COMM_CMP_EQ: return v == value;
    case SIMPLER_COMM_CMP_NE: return v != value;
    case SIMPLER_COMM_CMP_GT: return v > value;
    case SIMPLER_COMM_CMP_GE: return v >= value;
    case SIMPLER_COMM_CMP_LT: return v < value;
    default: return v <= value;
    }
}

/*
 * Writes peer `peer`'s copy of the signal word `local_signal` (an aligned int32 in the own
 * window): op SIMPLER_COMM_NOTIFY_SET stores `value` (release), SIMPLER_COMM_NOTIFY_ADD adds
 * it (seq_cst, wrapping). Everything this rank wrote before is visible to a peer whose wait
 * sees the new value. peer may be rank_id (the own signal). Returns SIMPLER_COMM_OK, or
 * SIMPLER_COMM_BAD_ARGUMENT for a bad context, peer, op, or a signal outside the own window
 * or not 4-byte aligned.
 */
static inline int32_t simpler_comm_notify(const SimplerCommContext *ctx, int32_t *local_signal, uint32_t peer, int32_t value,
                                          uint32_t op) {
    if (op != SIMPLER_COMM_NOTIFY_SET && op != SIMPLER_COMM_NOTIFY_ADD) return SIMPLER_COMM_BAD_ARGUMENT;
    if (((uintptr_t)local_signal & 3u) != 0) return SIMPLER_COMM_BAD_ARGUMENT;
    int32_t *remote = (int32_t *)simpler_comm_peer_ptr(ctx, local_signal, peer);
    if (remote == NULL || ((uintptr_t)remote & 3u) != 0) return SIMPLER_COMM_BAD_ARGUMENT;
    if ((uint64_t)(uintptr_t)local_signal - ctx->windows_in[ctx->rank_id] + sizeof(int32_t) > ctx->win_size)
        return SIMPLER_COMM_BAD_ARGUMENT; /* the word straddles the window's end */
    if (op == SIMPLER_COMM_NOTIFY_SET) __atomic_store_n(remote, value, __ATOMIC_RELEASE);
    else (void)__atomic_fetch_add(remote, value, __ATOMIC_SEQ_CST);
    return SIMPLER_COMM_OK;
}

/*
 * Waits until `*local_signal CMP value` (acquire loads; cmp one of SIMPLER_COMM_CMP_*).
 * Returns SIMPLER_COMM_OK once it holds (at once if it already does);
 * SIMPLER_COMM_PEER_FAILED when the workspace's abort word is (or becomes) non-zero first;
 * SIMPLER_COMM_WAIT_TIMEOUT when it did not hold within timeout_us microseconds (on the
 * clock SIMPLER_COMM_PRIV_CLOCK names); SIMPLER_COMM_BAD_ARGUMENT for a bad context, a NULL
 * or misaligned signal, an unknown cmp or a timeout_us of 0.
 */
static inline int32_t simpler_comm_wait(const SimplerCommContext *ctx, const int32_t *local_signal, uint32_t cmp, int32_t value,
                                        uint64_t timeout_us) {
    const SimplerCommWorkspace *ws = simpler_comm_priv_workspace(ctx);
    if (ws == NULL || local_signal == NULL || ((uintptr_t)local_signal & 3u) != 0 || cmp > SIMPLER_COMM_CMP_LE ||
        timeout_us == 0)
        return SIMPLER_COMM_BAD_ARGUMENT;
    const uint64_t deadline = simpler_comm_priv_deadline(timeout_us);
    for (uint32_t polls = 0;; polls += polls < UINT32_MAX) {
        if (simpler_comm_priv_holds(__atomic_load_n(local_signal, __ATOMIC_ACQUIRE), cmp, value)) return SIMPLER_COMM_OK;
        if (__atomic_load_n(&ws->abort, __ATOMIC_ACQUIRE) != 0) return SIMPLER_COMM_PEER_FAILED;
        if (simpler_comm_priv_now_ns() >= deadline) return SIMPLER_COMM_WAIT_TIMEOUT;
        simpler_comm_priv_backoff(polls);
    }
}

/*
 * All rank_num ranks of the domain meet: returns once every rank has called it (the n-th
 * call of every rank meets the n-th of the others; reusable any number of times). Writes
 * before it on any rank are visible after it on every rank. Returns SIMPLER_COMM_OK,
 * SIMPLER_COMM_PEER_FAILED (abort word set), SIMPLER_COMM_WAIT_TIMEOUT (not all ranks came
 * within timeout_us; the barrier is then unusable) or SIMPLER_COMM_BAD_ARGUMENT (bad
 * context, a workspace without SIMPLER_COMM_MAGIC or of another rank_num, timeout_us 0).
 */
static inline int32_t simpler_comm_barrier(const SimplerCommContext *ctx, uint64_t timeout_us) {
    SimplerCommWorkspace *ws = simpler_comm_priv_workspace(ctx);
    if (ws == NULL || timeout_us == 0 || ws->magic != SIMPLER_COMM_MAGIC || ws->rank_num != ctx->rank_num)
        return SIMPLER_COMM_BAD_ARGUMENT;
    if (__atomic_load_n(&ws->abort, __ATOMIC_ACQUIRE) != 0) return SIMPLER_COMM_PEER_FAILED;
    const uint64_t deadline = simpler_comm_priv_deadline(timeout_us);
    const uint64_t generation = __atomic_load_n(&ws->barrier_generation, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&ws->barrier_arrive, 1, __ATOMIC_SEQ_CST) == ctx->rank_num) {
        /* The last to arrive: reset the count for the next barrier, then release the others
         * (a rank that sees the new generation also sees the reset). */
        __atomic_store_n(&ws->barrier_arrive, 0, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ws->barrier_generation, 1, __ATOMIC_SEQ_CST);
        return SIMPLER_COMM_OK;
    }
    for (uint32_t polls = 0;; polls += polls < UINT32_MAX) {
        if (__atomic_load_n(&ws->barrier_generation, __ATOMIC_ACQUIRE) != generation) return SIMPLER_COMM_OK;
        if (__atomic_load_n(&ws->abort, __ATOMIC_ACQUIRE) != 0) return SIMPLER_COMM_PEER_FAILED;
        if (simpler_comm_priv_now_ns() >= deadline) return SIMPLER_COMM_WAIT_TIMEOUT;
        simpler_comm_priv_backoff(polls);
    }
}

#ifdef __cplusplus
}
#endif
#endif /* SIMPLER_COMM_H */
