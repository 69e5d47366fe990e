//! `include/simpler/comm.h` against `simpler_abi::comm`: a C probe compiled with the system C
//! compiler (`cc`, or `$CC`) in strict `-std=c11`, with the header included first and after
//! other headers, prints every size, offset, constant and layout computation of the header,
//! which must equal Rust's; a C program runs N threads as the ranks of one domain region
//! (N = 2, 4, 8) and checks notify, wait, barrier, timeouts, the abort word and peer
//! pointers, built in each include order, with and without POSIX visible and without
//! `<threads.h>`, and reports the clock the header chose; and the same checks run on the Rust
//! functions with std threads.

use crate::cc;

use std::collections::BTreeMap;
use std::ffi::{c_void, OsStr};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use simpler_abi::comm::{self, CommContext, CommWorkspace};

/// Compiles `source` (strict C11, `-Wall -Wextra -Werror`, the repository's `include/`, then
/// `extra`, after the source so that libraries link) into an executable named `name` and
/// returns its path. The programs link libpthread with `-lpthread`, not `-pthread`, which
/// would define `_REENTRANT` and so make POSIX visible.
fn compile(name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"];
    let extra: Vec<&OsStr> = extra.iter().map(OsStr::new).collect();
    cc::compile(name, source, &flags, &extra)
}

// ---- layout ---------------------------------------------------------------------------

/// Includes with `simpler/comm.h` first.
const COMM_FIRST: &str = r#"
#include "simpler/comm.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
"#;

/// Includes with `simpler/comm.h` last, after libc's headers (which fix the feature set
/// before comm.h is seen) and `simpler/kernel.h`.
const COMM_LAST: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "simpler/kernel.h"
#include "simpler/comm.h"
"#;

/// The probe's body (after [`COMM_FIRST`] or [`COMM_LAST`]).
const PROBE: &str = r#"
#define S(T) printf(#T " %zu\n", sizeof(T))
#define O(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
#define C(k) printf(#k " %lld\n", (long long)(k))
int main(void) {
    S(SimplerCommWorkspace); O(SimplerCommWorkspace, magic); O(SimplerCommWorkspace, version);
    O(SimplerCommWorkspace, rank_num); O(SimplerCommWorkspace, abort);
    O(SimplerCommWorkspace, barrier_arrive); O(SimplerCommWorkspace, barrier_generation);
    S(SimplerCommContext); O(SimplerCommContext, workspace); O(SimplerCommContext, workspace_size);
    O(SimplerCommContext, rank_id); O(SimplerCommContext, rank_num); O(SimplerCommContext, win_size);
    O(SimplerCommContext, windows_in); O(SimplerCommContext, windows_out);
    C(SIMPLER_COMM_MAX_RANKS); C(SIMPLER_COMM_WORKSPACE_BYTES); C(SIMPLER_COMM_CONTEXT_STRIDE);
    C(SIMPLER_COMM_WINDOW_ALIGN); C(SIMPLER_COMM_MAGIC); C(SIMPLER_COMM_VERSION);
    C(SIMPLER_COMM_OK); C(SIMPLER_COMM_WAIT_TIMEOUT); C(SIMPLER_COMM_PEER_FAILED);
    C(SIMPLER_COMM_BAD_ARGUMENT); C(SIMPLER_COMM_NOTIFY_SET); C(SIMPLER_COMM_NOTIFY_ADD);
    C(SIMPLER_COMM_CMP_EQ); C(SIMPLER_COMM_CMP_NE); C(SIMPLER_COMM_CMP_GT);
    C(SIMPLER_COMM_CMP_GE); C(SIMPLER_COMM_CMP_LT); C(SIMPLER_COMM_CMP_LE);
    const unsigned ranks[] = {0, 1, 2, 3, 8, 63, 64, 65};
    const unsigned long long sizes[] = {0, 1, 4095, 4096, 4097, 1048576, 18446744073709551615ull};
    for (unsigned i = 0; i < sizeof ranks / sizeof ranks[0]; ++i) {
        printf("context_offset.%u %llu\n", ranks[i], (unsigned long long)simpler_comm_context_offset(ranks[i]));
        printf("window_base_offset.%u %llu\n", ranks[i], (unsigned long long)simpler_comm_window_base_offset(ranks[i]));
        for (unsigned j = 0; j < sizeof sizes / sizeof sizes[0]; ++j)
            printf("region_len.%u.%llu %llu\n", ranks[i], sizes[j],
                   (unsigned long long)simpler_comm_region_len(ranks[i], sizes[j]));
    }
    for (unsigned j = 0; j < sizeof sizes / sizeof sizes[0]; ++j)
        printf("window_stride.%llu %llu\n", sizes[j], (unsigned long long)simpler_comm_window_stride(sizes[j]));
    return 0;
}
"#;

/// The probe compiled after `prelude`, run: its lines as name → value.
fn probe(name: &str, prelude: &str) -> BTreeMap<String, u64> {
    let exe = compile(name, &format!("{prelude}{PROBE}"), &["-lpthread"]);
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (
                k.to_string(),
                v.parse::<i64>()
                    .map_or_else(|_| v.parse().unwrap(), |v| v as u64),
            )
        })
        .collect()
}

#[test]
fn c_header_agrees_with_rust_layout_and_constants() {
    let c = probe("comm_probe_first", COMM_FIRST);
    assert_eq!(
        probe("comm_probe_last", COMM_LAST),
        c,
        "the include order changed what the header says"
    );
    let mut rust: Vec<(String, u64)> = [
        ("SimplerCommWorkspace", size_of::<CommWorkspace>()),
        (
            "SimplerCommWorkspace.magic",
            offset_of!(CommWorkspace, magic),
        ),
        (
            "SimplerCommWorkspace.version",
            offset_of!(CommWorkspace, version),
        ),
        (
            "SimplerCommWorkspace.rank_num",
            offset_of!(CommWorkspace, rank_num),
        ),
        (
            "SimplerCommWorkspace.abort",
            offset_of!(CommWorkspace, abort),
        ),
        (
            "SimplerCommWorkspace.barrier_arrive",
            offset_of!(CommWorkspace, barrier_arrive),
        ),
        (
            "SimplerCommWorkspace.barrier_generation",
            offset_of!(CommWorkspace, barrier_generation),
        ),
        ("SimplerCommContext", size_of::<CommContext>()),
        (
            "SimplerCommContext.workspace",
            offset_of!(CommContext, workspace),
        ),
        (
            "SimplerCommContext.workspace_size",
            offset_of!(CommContext, workspace_size),
        ),
        (
            "SimplerCommContext.rank_id",
            offset_of!(CommContext, rank_id),
        ),
        (
            "SimplerCommContext.rank_num",
            offset_of!(CommContext, rank_num),
        ),
        (
            "SimplerCommContext.win_size",
            offset_of!(CommContext, win_size),
        ),
        (
            "SimplerCommContext.windows_in",
            offset_of!(CommContext, windows_in),
        ),
        (
            "SimplerCommContext.windows_out",
            offset_of!(CommContext, windows_out),
        ),
        ("SIMPLER_COMM_MAX_RANKS", comm::MAX_RANKS),
        ("SIMPLER_COMM_WORKSPACE_BYTES", comm::WORKSPACE_BYTES),
        ("SIMPLER_COMM_CONTEXT_STRIDE", comm::CONTEXT_STRIDE),
        ("SIMPLER_COMM_WINDOW_ALIGN", comm::WINDOW_ALIGN),
        ("SIMPLER_COMM_MAGIC", comm::MAGIC as usize),
        ("SIMPLER_COMM_VERSION", comm::VERSION as usize),
        ("SIMPLER_COMM_OK", comm::OK as usize),
        ("SIMPLER_COMM_WAIT_TIMEOUT", comm::WAIT_TIMEOUT as usize),
        ("SIMPLER_COMM_PEER_FAILED", comm::PEER_FAILED as usize),
        ("SIMPLER_COMM_BAD_ARGUMENT", comm::BAD_ARGUMENT as usize),
        ("SIMPLER_COMM_NOTIFY_SET", comm::NOTIFY_SET as usize),
        ("SIMPLER_COMM_NOTIFY_ADD", comm::NOTIFY_ADD as usize),
        ("SIMPLER_COMM_CMP_EQ", comm::CMP_EQ as usize),
        ("SIMPLER_COMM_CMP_NE", comm::CMP_NE as usize),
        ("SIMPLER_COMM_CMP_GT", comm::CMP_GT as usize),
        ("SIMPLER_COMM_CMP_GE", comm::CMP_GE as usize),
        ("SIMPLER_COMM_CMP_LT", comm::CMP_LT as usize),
        ("SIMPLER_COMM_CMP_LE", comm::CMP_LE as usize),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v as u64))
    .collect();
    // The C helpers say "out of range" with 0, Rust with None.
    let some = |v: Option<usize>| v.map_or(0, |v| v as u64);
    let sizes: [u64; 7] = [0, 1, 4095, 4096, 4097, 1 << 20, u64::MAX];
    for r in [0usize, 1, 2, 3, 8, 63, 64, 65] {
        rust.push((format!("context_offset.{r}"), some(comm::context_offset(r))));
        rust.push((
            format!("window_base_offset.{r}"),
            some(comm::window_base_offset(r)),
        ));
        for w in sizes {
            let len = comm::region_len(r, w as usize);
            rust.push((format!("region_len.{r}.{w}"), some(len)));
        }
    }
    for w in sizes {
        rust.push((
            format!("window_stride.{w}"),
            some(comm::window_stride(w as usize)),
        ));
    }
    // Spot checks of the arithmetic itself, not only of the two languages agreeing.
    assert_eq!(comm::window_base_offset(3), Some(4096 + 8192));
    assert_eq!(comm::window_base_offset(2), Some(8192));
    assert_eq!(comm::region_len(2, 5000), Some(8192 + 2 * 8192));
    assert_eq!(comm::context_offset(63), Some(4096 + 63 * 2048));
    for (name, value) in &rust {
        assert_eq!(c.get(name), Some(value), "C and Rust disagree on {name}");
    }
    assert_eq!(
        c.len(),
        rust.len(),
        "the probe printed entries this test does not check"
    );
}

#[test]
fn context_for_rank_follows_the_layout() {
    let c = CommContext::for_rank(0x10_0000, 2, 3, 5000).unwrap();
    let base = 0x10_0000 + 4096 + 8192;
    assert_eq!(c.workspace, 0x10_0000);
    assert_eq!(c.workspace_size, 4096);
    assert_eq!((c.rank_id, c.rank_num, c.win_size), (2, 3, 8192));
    assert_eq!(&c.windows_in[..4], &[base, base + 8192, base + 16384, 0]);
    assert_eq!(c.windows_in, c.windows_out);
    assert!(CommContext::for_rank(0, 3, 3, 4096).is_none());
    assert!(CommContext::for_rank(0, 0, 65, 4096).is_none());
    assert!(CommContext::for_rank(0, 0, 2, 0).is_none());
    assert!(CommContext::for_rank(u64::MAX - 4096, 0, 2, 4096).is_none());
    let ws = CommWorkspace::new(5);
    assert_eq!(
        (ws.magic, ws.version, ws.rank_num, ws.abort),
        (comm::MAGIC, 1, 5, 0)
    );
    assert_eq!(&comm::MAGIC.to_le_bytes(), b"SCOM");
}

// ---- behaviour, C ----------------------------------------------------------------------

/// Runs `case` with N threads as ranks over one malloc'd domain region; prints `ok` or the
/// failed checks and exits non-zero.
/// The program's body (after [`COMM_FIRST`] or [`COMM_LAST`]); `clock` prints the clock and
/// the threads choice of the header instead.
const RANKS: &str = r#"
#define WINDOW 8192u   /* requested window size */
#define DATA_OFF 256u  /* the windows hold signals at 0..64, data from here */

static unsigned char *region;
static uint32_t nranks;
static int failed; /* set by any rank (atomically) */

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %u line %d: ", rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); __atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST); return NULL; } } while (0)

static SimplerCommWorkspace *ws(void) { return (SimplerCommWorkspace *)region; }
static SimplerCommContext *ctx(uint32_t r) { return (SimplerCommContext *)(region + simpler_comm_context_offset(r)); }
static unsigned char *win(uint32_t r) { return (unsigned char *)(uintptr_t)ctx(r)->windows_in[r]; }
static int32_t *sig(uint32_t r, int i) { return (int32_t *)win(r) + i; }
static double now_ms(void) { return (double)simpler_comm_priv_now_ns() / 1e6; }
/* Sleeps with the header's own back-off (no POSIX or <threads.h> needed here). */
static void sleep_ms(int ms) {
    const uint64_t end = simpler_comm_priv_now_ns() + (uint64_t)ms * 1000000u;
    while (simpler_comm_priv_now_ns() < end) simpler_comm_priv_backoff(UINT32_MAX);
}

static void domain_init(uint32_t n) {
    const uint64_t len = simpler_comm_region_len(n, WINDOW);
    region = aligned_alloc(SIMPLER_COMM_WINDOW_ALIGN, len);
    memset(region, 0, len);
    nranks = n;
    ws()->magic = SIMPLER_COMM_MAGIC; ws()->version = SIMPLER_COMM_VERSION; ws()->rank_num = n;
    for (uint32_t r = 0; r < n; ++r) {
        SimplerCommContext *c = ctx(r);
        c->workspace = (uint64_t)(uintptr_t)region;
        c->workspace_size = SIMPLER_COMM_WORKSPACE_BYTES;
        c->rank_id = r; c->rank_num = n;
        c->win_size = simpler_comm_window_stride(WINDOW);
        for (uint32_t p = 0; p < n; ++p)
            c->windows_in[p] = c->windows_out[p] = (uint64_t)(uintptr_t)region +
                simpler_comm_window_base_offset(n) + p * simpler_comm_window_stride(WINDOW);
    }
}

static void run_ranks(uint32_t first, void *(*fn)(void *)) {
    pthread_t t[SIMPLER_COMM_MAX_RANKS];
    for (uint32_t r = first; r < nranks; ++r) pthread_create(&t[r], NULL, fn, (void *)(uintptr_t)r);
    for (uint32_t r = first; r < nranks; ++r) pthread_join(t[r], NULL);
}

/* SET to the next rank, ADD to every rank, then data through peer pointers. */
static void *notify_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg, n = nranks;
    const SimplerCommContext *c = ctx(rank);
    CHECK(simpler_comm_notify(c, sig(rank, 1), (rank + 1) % n, 1000 + (int32_t)rank, SIMPLER_COMM_NOTIFY_SET) == 0, "set");
    const int32_t from = 1000 + (int32_t)((rank + n - 1) % n);
    CHECK(simpler_comm_wait(c, sig(rank, 1), SIMPLER_COMM_CMP_EQ, from, 5000000) == 0, "wait set");
    for (uint32_t p = 0; p < n; ++p)
        CHECK(simpler_comm_notify(c, sig(rank, 2), p, (int32_t)rank + 1, SIMPLER_COMM_NOTIFY_ADD) == 0, "add");
    const int32_t total = (int32_t)(n * (n + 1) / 2);
    CHECK(simpler_comm_wait(c, sig(rank, 2), SIMPLER_COMM_CMP_EQ, total, 5000000) == 0, "wait add");
    int32_t *data = (int32_t *)(win(rank) + DATA_OFF);
    for (int i = 0; i < 64; ++i) data[i] = (int32_t)rank * 100 + i;
    for (uint32_t p = 0; p < n; ++p)
        if (p != rank) CHECK(simpler_comm_notify(c, sig(rank, 3), p, 1, SIMPLER_COMM_NOTIFY_ADD) == 0, "add data");
    CHECK(simpler_comm_wait(c, sig(rank, 3), SIMPLER_COMM_CMP_GE, (int32_t)n - 1, 5000000) == 0, "wait data");
    for (uint32_t p = 0; p < n; ++p) {
        const int32_t *remote = simpler_comm_peer_ptr(c, data, p);
        CHECK(remote == (const int32_t *)(win(p) + DATA_OFF), "peer_ptr of %u", p);
        for (int i = 0; i < 64; ++i) CHECK(remote[i] == (int32_t)p * 100 + i, "data of %u at %d: %d", p, i, remote[i]);
    }
    CHECK(simpler_comm_barrier(c, 5000000) == 0, "barrier");
    CHECK(__atomic_load_n(sig(rank, 2), __ATOMIC_ACQUIRE) == total, "add total after the barrier");
    CHECK(__atomic_load_n(sig(rank, 3), __ATOMIC_ACQUIRE) == (int32_t)n - 1, "data count after the barrier");
    return NULL;
}

/* Rank 1 moves rank 0's signal through values; rank 0 waits for each comparison in turn. */
static const struct { uint32_t cmp; int32_t value; int32_t steps[4]; } CASES[] = {
    {SIMPLER_COMM_CMP_EQ, 5, {1, 2, 3, 5}}, {SIMPLER_COMM_CMP_NE, 5, {5, 5, 5, 7}},
    {SIMPLER_COMM_CMP_GT, 5, {3, 4, 5, 6}}, {SIMPLER_COMM_CMP_GE, 5, {2, 3, 4, 5}},
    {SIMPLER_COMM_CMP_LT, -1, {1, 0, -1, -2}}, {SIMPLER_COMM_CMP_LE, -1, {2, 1, 0, -1}},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])
static void *compare_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg;
    const SimplerCommContext *c = ctx(rank);
    if (rank > 1) return NULL;
    for (int k = 0; k < NCASES; ++k) {
        if (rank == 1) {
            CHECK(simpler_comm_wait(c, sig(1, 0), SIMPLER_COMM_CMP_EQ, k + 1, 5000000) == 0, "go %d", k);
            for (int s = 0; s < 4; ++s) {
                sleep_ms(1);
                CHECK(simpler_comm_notify(c, sig(1, 8 + k), 0, CASES[k].steps[s], SIMPLER_COMM_NOTIFY_SET) == 0, "step");
            }
        } else {
            /* Start each signal at a value the comparison rejects. */
            __atomic_store_n(sig(0, 8 + k), CASES[k].cmp == SIMPLER_COMM_CMP_NE ? 5 : 1000 * (CASES[k].value < 0 ? 1 : -1), __ATOMIC_RELEASE);
            CHECK(simpler_comm_notify(c, sig(0, 0), 1, k + 1, SIMPLER_COMM_NOTIFY_SET) == 0, "go");
            CHECK(simpler_comm_wait(c, sig(0, 8 + k), CASES[k].cmp, CASES[k].value, 5000000) == 0, "case %d", k);
            const int32_t v = __atomic_load_n(sig(0, 8 + k), __ATOMIC_ACQUIRE);
            CHECK(v == CASES[k].steps[3], "case %d returned at %d, before the last step", k, v);
        }
    }
    return NULL;
}

/* Comparisons on a value that does not move: the true ones return at once, the false ones
 * time out. */
static void *static_compare(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg;
    const SimplerCommContext *c = ctx(rank);
    int32_t *s = sig(rank, 4);
    *s = 5;
    const uint32_t cmps[] = {SIMPLER_COMM_CMP_EQ, SIMPLER_COMM_CMP_NE, SIMPLER_COMM_CMP_GT,
                             SIMPLER_COMM_CMP_GE, SIMPLER_COMM_CMP_LT, SIMPLER_COMM_CMP_LE};
    const int32_t yes[] = {5, 4, 4, 5, 6, 5}, no[] = {4, 5, 5, 6, 5, 4};
    for (int k = 0; k < 6; ++k) {
        CHECK(simpler_comm_wait(c, s, cmps[k], yes[k], 1000) == 0, "cmp %u %d", cmps[k], yes[k]);
        CHECK(simpler_comm_wait(c, s, cmps[k], no[k], 1000) == SIMPLER_COMM_WAIT_TIMEOUT, "cmp %u %d", cmps[k], no[k]);
    }
    CHECK(simpler_comm_wait(c, s, 6, 5, 1000) == SIMPLER_COMM_BAD_ARGUMENT, "unknown cmp");
    CHECK(simpler_comm_wait(c, s, SIMPLER_COMM_CMP_EQ, 5, 0) == SIMPLER_COMM_BAD_ARGUMENT, "timeout 0");
    CHECK(simpler_comm_wait(c, NULL, SIMPLER_COMM_CMP_EQ, 5, 1000) == SIMPLER_COMM_BAD_ARGUMENT, "NULL signal");
    CHECK(simpler_comm_wait(c, (const int32_t *)((char *)s + 1), SIMPLER_COMM_CMP_EQ, 5, 1000) == SIMPLER_COMM_BAD_ARGUMENT,
          "misaligned signal");
    CHECK(simpler_comm_wait(NULL, s, SIMPLER_COMM_CMP_EQ, 5, 1000) == SIMPLER_COMM_BAD_ARGUMENT, "NULL ctx");
    return NULL;
}

/* A wait and a barrier nobody completes time out in about their timeout. */
static void *timeout_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg;
    const SimplerCommContext *c = ctx(rank);
    double t0 = now_ms();
    CHECK(simpler_comm_wait(c, sig(rank, 5), SIMPLER_COMM_CMP_NE, 0, 50000) == SIMPLER_COMM_WAIT_TIMEOUT, "wait");
    double dt = now_ms() - t0;
    CHECK(dt >= 50.0 && dt < 300.0, "wait timed out after %.1f ms, not about 50", dt);
    if (rank == 0) { /* alone at the barrier */
        t0 = now_ms();
        CHECK(simpler_comm_barrier(c, 30000) == SIMPLER_COMM_WAIT_TIMEOUT, "barrier");
        dt = now_ms() - t0;
        CHECK(dt >= 30.0 && dt < 300.0, "barrier timed out after %.1f ms, not about 30", dt);
    }
    return NULL;
}

/* Ranks 1.. wait (odd ranks on a signal, even ones at a barrier rank 0 never reaches) with a
 * long timeout; the host sets the abort word; every wait returns PEER_FAILED promptly. */
static uint64_t abort_at_ns;
static void *abort_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg;
    const SimplerCommContext *c = ctx(rank);
    const int32_t rc = rank % 2 ? simpler_comm_wait(c, sig(rank, 6), SIMPLER_COMM_CMP_EQ, 1, 20000000)
                                : simpler_comm_barrier(c, 20000000);
    const double late = (double)(simpler_comm_priv_now_ns() - __atomic_load_n(&abort_at_ns, __ATOMIC_ACQUIRE)) / 1e6;
    CHECK(rc == SIMPLER_COMM_PEER_FAILED, "returned %d, not PEER_FAILED", rc);
    CHECK(late < 500.0, "returned %.1f ms after the abort", late);
    CHECK(simpler_comm_wait(c, sig(rank, 6), SIMPLER_COMM_CMP_EQ, 1, 20000000) == SIMPLER_COMM_PEER_FAILED, "wait after");
    CHECK(simpler_comm_barrier(c, 20000000) == SIMPLER_COMM_PEER_FAILED, "barrier after");
    CHECK(simpler_comm_wait(c, sig(rank, 6), SIMPLER_COMM_CMP_EQ, 0, 20000000) == 0, "a wait that holds still succeeds");
    return NULL;
}

/* 1000 barriers in a row: after barrier k every rank has counted k arrivals, none k + 2. */
static uint64_t arrivals;
static void *barrier_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg, n = nranks;
    const SimplerCommContext *c = ctx(rank);
    for (uint64_t k = 1; k <= 1000; ++k) {
        __atomic_fetch_add(&arrivals, 1, __ATOMIC_SEQ_CST);
        CHECK(simpler_comm_barrier(c, 5000000) == 0, "barrier %llu", (unsigned long long)k);
        const uint64_t a = __atomic_load_n(&arrivals, __ATOMIC_SEQ_CST);
        CHECK(a >= k * n && a <= (k + 1) * n, "after barrier %llu: %llu arrivals", (unsigned long long)k, (unsigned long long)a);
    }
    return NULL;
}

/* Peer pointers and notify refuse what is not in the own window. */
static void *pointer_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg, n = nranks;
    const SimplerCommContext *c = ctx(rank);
    unsigned char *own = win(rank);
    const uint64_t size = c->win_size;
    CHECK(size == 8192, "win_size %llu", (unsigned long long)size);
    for (uint32_t p = 0; p < n; ++p) {
        CHECK(simpler_comm_peer_ptr(c, own, p) == win(p), "base of %u", p);
        CHECK(simpler_comm_peer_ptr(c, own + size - 1, p) == win(p) + size - 1, "last byte of %u", p);
        CHECK(simpler_comm_peer_ptr(c, own + size, p) == NULL, "one past the window");
        CHECK(simpler_comm_peer_ptr(c, own - 1, p) == NULL, "one before the window");
        if (p != rank) CHECK(simpler_comm_peer_ptr(c, win(p), p) == NULL, "a peer's window is not the own");
    }
    CHECK(simpler_comm_peer_ptr(c, own, n) == NULL, "peer n");
    CHECK(simpler_comm_peer_ptr(c, own, UINT32_MAX) == NULL, "peer UINT32_MAX");
    CHECK(simpler_comm_peer_ptr(NULL, own, 0) == NULL, "NULL ctx");
    CHECK(simpler_comm_peer_ptr(c, region, 0) == NULL, "the workspace");
    int32_t outside = 0;
    CHECK(simpler_comm_notify(c, &outside, 0, 1, SIMPLER_COMM_NOTIFY_SET) == SIMPLER_COMM_BAD_ARGUMENT, "outside");
    CHECK(simpler_comm_notify(c, (int32_t *)(own + size), 0, 1, SIMPLER_COMM_NOTIFY_SET) == SIMPLER_COMM_BAD_ARGUMENT, "past");
    CHECK(simpler_comm_notify(c, (int32_t *)(own + 2), 0, 1, SIMPLER_COMM_NOTIFY_SET) == SIMPLER_COMM_BAD_ARGUMENT, "misaligned");
    CHECK(simpler_comm_notify(c, sig(rank, 7), n, 1, SIMPLER_COMM_NOTIFY_SET) == SIMPLER_COMM_BAD_ARGUMENT, "peer n");
    CHECK(simpler_comm_notify(c, sig(rank, 7), 0, 1, 2) == SIMPLER_COMM_BAD_ARGUMENT, "op 2");
    CHECK(simpler_comm_notify(NULL, sig(rank, 7), 0, 1, SIMPLER_COMM_NOTIFY_SET) == SIMPLER_COMM_BAD_ARGUMENT, "NULL ctx");
    CHECK(simpler_comm_barrier(c, 0) == SIMPLER_COMM_BAD_ARGUMENT, "barrier timeout 0");
    SimplerCommContext bad = *c;
    bad.rank_num = n + 1; /* disagrees with the workspace */
    CHECK(simpler_comm_barrier(&bad, 1000) == SIMPLER_COMM_BAD_ARGUMENT, "barrier rank_num");
    bad = *c;
    bad.workspace = 0;
    CHECK(simpler_comm_barrier(&bad, 1000) == SIMPLER_COMM_BAD_ARGUMENT, "barrier workspace 0");
    CHECK(simpler_comm_wait(&bad, sig(rank, 7), SIMPLER_COMM_CMP_EQ, 0, 1000) == SIMPLER_COMM_BAD_ARGUMENT, "wait ws 0");
    bad = *c;
    bad.rank_id = n;
    CHECK(simpler_comm_peer_ptr(&bad, own, 0) == NULL, "rank_id n");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "clock")) {
        printf("%s %d\n", SIMPLER_COMM_PRIV_CLOCK, SIMPLER_COMM_PRIV_THREADS);
        return 0;
    }
    if (argc != 3) return 2;
    const uint32_t n = (uint32_t)atoi(argv[2]);
    domain_init(n);
    const char *what = argv[1];
    if (!strcmp(what, "notify")) run_ranks(0, notify_rank);
    else if (!strcmp(what, "compare")) { run_ranks(0, compare_rank); run_ranks(0, static_compare); }
    else if (!strcmp(what, "timeout")) run_ranks(0, timeout_rank);
    else if (!strcmp(what, "barrier")) run_ranks(0, barrier_rank);
    else if (!strcmp(what, "pointers")) run_ranks(0, pointer_rank);
    else if (!strcmp(what, "abort")) {
        /* Rank 0 is the chip that died: ranks 1.. wait for it; the "host" (this thread)
         * raises the abort word 20 ms in. */
        pthread_t t_ranks[SIMPLER_COMM_MAX_RANKS];
        for (uint32_t r = 1; r < n; ++r) pthread_create(&t_ranks[r], NULL, abort_rank, (void *)(uintptr_t)r);
        sleep_ms(20);
        __atomic_store_n(&abort_at_ns, simpler_comm_priv_now_ns(), __ATOMIC_RELEASE);
        __atomic_store_n(&ws()->abort, 1u, __ATOMIC_RELEASE);
        for (uint32_t r = 1; r < n; ++r) pthread_join(t_ranks[r], NULL);
    } else return 2;
    free(region);
    if (failed) return 1;
    printf("ok %s %u\n", what, n);
    return 0;
}
"#;

/// One build of the rank program: how the header is reached and what the compiler sees.
struct Variant {
    /// The program's name.
    name: &'static str,
    /// [`COMM_FIRST`] or [`COMM_LAST`].
    prelude: &'static str,
    /// Flags beyond the strict C11 set of [`compile`].
    flags: &'static [&'static str],
    /// `SIMPLER_COMM_PRIV_CLOCK` expected on 64-bit Linux.
    clock: &'static str,
    /// `SIMPLER_COMM_PRIV_THREADS` expected.
    threads: u32,
}

/// Every build of the rank program: strict C11 in both include orders (POSIX invisible, so
/// the header declares libc's clock itself), POSIX visible, and no `<threads.h>`.
const VARIANTS: [Variant; 4] = [
    Variant {
        name: "comm_ranks_c11_first",
        prelude: COMM_FIRST,
        flags: &[],
        clock: "linux-monotonic",
        threads: 1,
    },
    Variant {
        name: "comm_ranks_c11_last",
        prelude: COMM_LAST,
        flags: &[],
        clock: "linux-monotonic",
        threads: 1,
    },
    Variant {
        name: "comm_ranks_posix_last",
        prelude: COMM_LAST,
        flags: &["-D_POSIX_C_SOURCE=200809L"],
        clock: "posix-monotonic",
        threads: 1,
    },
    Variant {
        name: "comm_ranks_no_threads",
        prelude: COMM_FIRST,
        flags: &["-D__STDC_NO_THREADS__"],
        clock: "linux-monotonic",
        threads: 0,
    },
];

/// The rank program of variant `v` (an index into [`VARIANTS`]), compiled once.
fn ranks_exe(v: usize) -> &'static Path {
    static EXES: [OnceLock<PathBuf>; VARIANTS.len()] = [const { OnceLock::new() }; VARIANTS.len()];
    EXES[v].get_or_init(|| {
        let var = &VARIANTS[v];
        let mut flags = vec!["-lpthread"];
        flags.extend_from_slice(var.flags);
        compile(var.name, &format!("{}{RANKS}", var.prelude), &flags)
    })
}

/// Runs the rank program's `case` for 2, 4 and 8 ranks, in every variant.
fn run_c(case: &str) {
    for (v, var) in VARIANTS.iter().enumerate() {
        for n in [2, 4, 8] {
            let out = Command::new(ranks_exe(v))
                .args([case, &n.to_string()])
                .output()
                .expect("run the rank program");
            assert!(
                out.status.success(),
                "{}: {case} with {n} ranks failed ({}):\n{}",
                var.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("ok {case} {n}"),
                "{}",
                var.name
            );
        }
    }
}

#[test]
fn c_header_picks_a_monotonic_clock_in_every_variant() {
    for (v, var) in VARIANTS.iter().enumerate() {
        let out = Command::new(ranks_exe(v))
            .arg("clock")
            .output()
            .expect("run the rank program");
        assert!(out.status.success(), "{}", var.name);
        let out = String::from_utf8(out.stdout).unwrap();
        let (clock, threads) = out.trim().split_once(' ').unwrap();
        assert_eq!(threads, var.threads.to_string(), "{}", var.name);
        if cfg!(all(target_os = "linux", target_pointer_width = "64")) {
            assert_eq!(clock, var.clock, "{}", var.name);
        } else {
            assert_ne!(clock, "utc", "{}: no monotonic clock", var.name);
        }
    }
}

#[test]
fn c_notify_set_add_and_data_through_peer_pointers() {
    run_c("notify");
}

#[test]
fn c_wait_honours_every_comparison() {
    run_c("compare");
}

#[test]
fn c_wait_and_barrier_time_out_in_about_the_timeout() {
    run_c("timeout");
}

#[test]
fn c_abort_word_fails_waiting_ranks_promptly() {
    run_c("abort");
}

#[test]
fn c_barrier_is_reusable() {
    run_c("barrier");
}

#[test]
fn c_peer_pointers_stay_in_the_own_window() {
    run_c("pointers");
}

// ---- behaviour, Rust --------------------------------------------------------------------

/// A domain region on the heap, laid out as [`comm`] describes, for ranks on std threads.
struct Domain {
    base: *mut u8,
    layout: std::alloc::Layout,
    n: u32,
}

// SAFETY: the region is plain memory that the ranks access through the comm calls
// (atomics) and disjoint plain writes; the pointer is valid until Drop.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

/// Requested window size of the Rust domains.
const WINDOW: usize = 8192;

impl Domain {
    fn new(n: u32) -> Arc<Domain> {
        let len = comm::region_len(n as usize, WINDOW).unwrap();
        let layout = std::alloc::Layout::from_size_align(len, comm::WINDOW_ALIGN).unwrap();
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null());
        // SAFETY: the region holds the workspace at 0 and a context slot per rank, aligned.
        unsafe {
            base.cast::<CommWorkspace>().write(CommWorkspace::new(n));
            for r in 0..n {
                let ctx = CommContext::for_rank(base as u64, r, n, WINDOW).unwrap();
                let off = comm::context_offset(r as usize).unwrap();
                base.add(off).cast::<CommContext>().write(ctx);
            }
        }
        Arc::new(Domain { base, layout, n })
    }

    fn ctx(&self, r: u32) -> *const CommContext {
        // SAFETY: inside the region (context_offset of a rank < n).
        unsafe {
            self.base
                .add(comm::context_offset(r as usize).unwrap())
                .cast()
        }
    }

    /// Signal word `i` of rank `r` (the first 64 bytes of its window).
    fn signal(&self, r: u32, i: usize) -> *mut i32 {
        // SAFETY: the context is initialized; word i < 16 is inside the window.
        unsafe { ((*self.ctx(r)).windows_in[r as usize] as usize as *mut i32).add(i) }
    }

    fn set_abort(&self) {
        // SAFETY: the workspace is at the region's start; its abort word is accessed atomically.
        unsafe {
            AtomicU32::from_ptr(std::ptr::addr_of_mut!(
                (*self.base.cast::<CommWorkspace>()).abort
            ))
        }
        .store(1, Ordering::Release);
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

/// Runs `f(domain, rank)` on one thread per rank in `ranks` and joins them (panics propagate).
fn on_ranks(d: &Arc<Domain>, ranks: std::ops::Range<u32>, f: fn(&Domain, u32)) {
    let threads: Vec<_> = ranks
        .map(|r| {
            let d = Arc::clone(d);
            std::thread::spawn(move || f(&d, r))
        })
        .collect();
    for t in threads {
        t.join().expect("a rank failed");
    }
}

#[test]
fn rust_notify_wait_and_peer_pointers() {
    for n in [2u32, 4, 8] {
        let d = Domain::new(n);
        on_ranks(&d, 0..n, |d, r| {
            let n = d.n;
            let c = d.ctx(r);
            // SAFETY: every pointer comes from the domain; signals are accessed atomically.
            unsafe {
                assert_eq!(
                    comm::notify(
                        c,
                        d.signal(r, 1),
                        (r + 1) % n,
                        7 + r as i32,
                        comm::NOTIFY_SET
                    ),
                    0
                );
                let from = 7 + ((r + n - 1) % n) as i32;
                assert_eq!(
                    comm::wait(c, d.signal(r, 1), comm::CMP_EQ, from, 5_000_000),
                    0
                );
                for p in 0..n {
                    assert_eq!(
                        comm::notify(c, d.signal(r, 2), p, r as i32 + 1, comm::NOTIFY_ADD),
                        0
                    );
                }
                let total = (n * (n + 1) / 2) as i32;
                assert_eq!(
                    comm::wait(c, d.signal(r, 2), comm::CMP_GE, total, 5_000_000),
                    0
                );
                assert_eq!(comm::barrier(c, 5_000_000), 0);
                assert_eq!(*d.signal(r, 2), total);
                let own = (*c).windows_in[r as usize] as usize as *const c_void;
                let size = (*c).win_size as usize;
                for p in 0..n {
                    let peer = (*c).windows_in[p as usize] as usize as *mut c_void;
                    assert_eq!(comm::peer_ptr(c, own, p), peer);
                    assert_eq!(
                        comm::peer_ptr(c, own.byte_add(size - 1), p),
                        peer.byte_add(size - 1)
                    );
                    assert!(comm::peer_ptr(c, own.byte_add(size), p).is_null());
                    assert!(comm::peer_ptr(c, own.byte_sub(1), p).is_null());
                }
                assert!(comm::peer_ptr(c, own, n).is_null());
                let mut outside = 0i32;
                assert_eq!(
                    comm::notify(c, &mut outside, 0, 1, comm::NOTIFY_SET),
                    comm::BAD_ARGUMENT
                );
                assert_eq!(comm::notify(c, d.signal(r, 3), 0, 1, 2), comm::BAD_ARGUMENT);
                assert_eq!(
                    comm::notify(c, d.signal(r, 3).byte_add(1), 0, 1, comm::NOTIFY_SET),
                    comm::BAD_ARGUMENT
                );
                assert_eq!(
                    comm::wait(c, d.signal(r, 3), 6, 0, 1000),
                    comm::BAD_ARGUMENT
                );
                assert_eq!(
                    comm::wait(c, d.signal(r, 3), comm::CMP_EQ, 0, 0),
                    comm::BAD_ARGUMENT
                );
                assert_eq!(comm::barrier(c, 0), comm::BAD_ARGUMENT);
            }
        });
    }
}

#[test]
fn rust_wait_comparisons_and_timeout() {
    let d = Domain::new(2);
    let c = d.ctx(0);
    let s = d.signal(0, 4);
    // SAFETY: pointers from the domain; only this thread touches the signal.
    unsafe {
        *s = 5;
        let cmps = [
            comm::CMP_EQ,
            comm::CMP_NE,
            comm::CMP_GT,
            comm::CMP_GE,
            comm::CMP_LT,
            comm::CMP_LE,
        ];
        let (yes, no) = ([5, 4, 4, 5, 6, 5], [4, 5, 5, 6, 5, 4]);
        for k in 0..6 {
            assert_eq!(
                comm::wait(c, s, cmps[k], yes[k], 1000),
                comm::OK,
                "cmp {} {}",
                cmps[k],
                yes[k]
            );
            assert_eq!(
                comm::wait(c, s, cmps[k], no[k], 1000),
                comm::WAIT_TIMEOUT,
                "cmp {} {}",
                cmps[k],
                no[k]
            );
        }
        let t0 = Instant::now();
        assert_eq!(
            comm::wait(c, s, comm::CMP_EQ, 0, 50_000),
            comm::WAIT_TIMEOUT
        );
        let dt = t0.elapsed();
        assert!(
            dt >= Duration::from_millis(50) && dt < Duration::from_millis(300),
            "{dt:?}"
        );
        let t0 = Instant::now();
        assert_eq!(comm::barrier(c, 30_000), comm::WAIT_TIMEOUT);
        let dt = t0.elapsed();
        assert!(
            dt >= Duration::from_millis(30) && dt < Duration::from_millis(300),
            "{dt:?}"
        );
    }
    // A waiter sees the value another rank moves into range, not an earlier one.
    let d = Domain::new(2);
    let go = Arc::new(Barrier::new(2));
    let mover = {
        let (d, go) = (Arc::clone(&d), Arc::clone(&go));
        std::thread::spawn(move || {
            go.wait();
            for v in [3, 4, 5, 6] {
                std::thread::sleep(Duration::from_millis(1));
                // SAFETY: pointers from the domain.
                let rc = unsafe { comm::notify(d.ctx(1), d.signal(1, 5), 0, v, comm::NOTIFY_SET) };
                assert_eq!(rc, 0);
            }
        })
    };
    go.wait();
    // SAFETY: pointers from the domain.
    unsafe {
        assert_eq!(
            comm::wait(d.ctx(0), d.signal(0, 5), comm::CMP_GT, 5, 5_000_000),
            0
        );
        assert_eq!(*d.signal(0, 5), 6);
    }
    mover.join().unwrap();
}

#[test]
fn rust_barrier_is_reusable() {
    static ARRIVALS: AtomicU64 = AtomicU64::new(0);
    for n in [2u32, 4, 8] {
        ARRIVALS.store(0, Ordering::SeqCst);
        let d = Domain::new(n);
        on_ranks(&d, 0..n, |d, r| {
            let n = u64::from(d.n);
            for k in 1..=1000u64 {
                ARRIVALS.fetch_add(1, Ordering::SeqCst);
                // SAFETY: the context comes from the domain.
                let rc = unsafe { comm::barrier(d.ctx(r), 5_000_000) };
                assert_eq!(rc, 0, "barrier {k}");
                let a = ARRIVALS.load(Ordering::SeqCst);
                assert!(
                    a >= k * n && a <= (k + 1) * n,
                    "after barrier {k}: {a} arrivals"
                );
            }
        });
    }
}

#[test]
fn rust_abort_word_fails_waiting_ranks_promptly() {
    for n in [2u32, 4, 8] {
        let d = Domain::new(n);
        let waiters = {
            let d = Arc::clone(&d);
            std::thread::spawn(move || {
                on_ranks(&d, 1..n, |d, r| {
                    // SAFETY: pointers from the domain.
                    let rc = unsafe {
                        if r % 2 == 1 {
                            comm::wait(d.ctx(r), d.signal(r, 6), comm::CMP_EQ, 1, 20_000_000)
                        } else {
                            comm::barrier(d.ctx(r), 20_000_000)
                        }
                    };
                    assert_eq!(rc, comm::PEER_FAILED);
                    // SAFETY: as above.
                    let again = unsafe { comm::barrier(d.ctx(r), 20_000_000) };
                    assert_eq!(again, comm::PEER_FAILED);
                })
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        d.set_abort();
        waiters.join().expect("a waiting rank failed");
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?} after the abort",
            t0.elapsed()
        );
    }
}

#[test]
fn rust_fail_stores_the_fatal_code() {
    let mut global = simpler_abi::GlobalContext::default();
    let mut args = simpler_abi::KernelArgs::default();
    args.slots[simpler_abi::GLOBAL_CONTEXT_SLOT] = std::ptr::addr_of_mut!(global) as u64;
    let slots = args.slots.as_mut_ptr().cast::<i64>();
    // SAFETY: the global context slot points to `global`, which nothing else touches.
    unsafe { comm::fail(slots, comm::WAIT_TIMEOUT) };
    assert_eq!(global.fatal_code, comm::WAIT_TIMEOUT);
    // SAFETY: as above.
    unsafe { comm::fail(slots, 0) };
    assert_eq!(global.fatal_code, 1, "0 is no failure, so it becomes 1");
}
