//! The collective library's chip code (`python/simpler/collectives/kernels/collective.c` and
//! `python/simpler/collectives/orchestration.c`) against a fake runtime, compiled with the
//! system C compiler (`cc`, or `$CC`):
//! - the kernel, with a C harness that builds a domain region for N ranks (laid out as
//!   `include/simpler/comm.h` says), fabricates each rank's kernel argument array as the
//!   runtime does (`include/simpler/kernel.h`) and runs one thread per rank, each launching
//!   the kernel for several collectives in a row; outputs are compared bit for bit with a
//!   reference the harness computes, a rank whose peer never arrives must fail with the
//!   timeout code, an aborted domain with the peer-failed code, bad arguments with the
//!   bad-argument code before anything is written. The kernel is reached twice: linked into
//!   the harness, and as a shared library built with the toolchain's flags
//!   (`crates/simpler-toolchain/src/build/mod.rs`) that the harness loads as a run does
//!   (`dlopen` with `RTLD_NOW | RTLD_LOCAL`, so every symbol it needs must resolve);
//! - the orchestration, linked with a fake operations table: one require_sync_start AIV
//!   task with the arguments in order, or SIMPLER_ORCH_INVALID_ARGS naming the argument.

use crate::cc;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Compiles `harness` (C11, `-Wall -Wextra -Werror`, `-pthread`, then `extra`) together
/// with the library source `library`, if any, into an executable named `name`.
fn compile(name: &str, harness: &str, library: Option<&Path>, extra: &[&str]) -> PathBuf {
    let mut flags = vec!["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"];
    flags.extend_from_slice(extra);
    let library: Vec<&OsStr> = library.map(Path::as_os_str).into_iter().collect();
    cc::compile(name, harness, &flags, &library)
}

/// The flags `crates/simpler-toolchain/src/build/mod.rs` compiles an `aiv` kernel with
/// (`BASE_FLAGS`, the core define), then the output and source, then `-lm`.
const TOOLCHAIN_AIV_FLAGS: [&str; 5] = ["-std=c11", "-O2", "-shared", "-fPIC", "-D__DAV_VEC__"];

/// Runs `exe case n` and expects `ok case n`.
fn run(exe: &Path, case: &str, n: u32) {
    let out = Command::new(exe)
        .args([case, &n.to_string()])
        .output()
        .expect("run the harness");
    assert!(
        out.status.success(),
        "{case} with {n} ranks failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ok {case} {n}")
    );
}

// ---- the kernel ---------------------------------------------------------------------------

/// The kernel harness. With `KERNEL_SO` defined (a string: the library's path) it loads the
/// kernel from that library, else the kernel is linked in.
const KERNEL_HARNESS: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "simpler/comm.h"

#ifdef KERNEL_SO
#include <dlfcn.h>
static void (*kernel_entry)(int64_t *args);
/* Loads the kernel as the runtime does; 0 on success. */
static int load_kernel(void) {
    void *lib = dlopen(KERNEL_SO, RTLD_NOW | RTLD_LOCAL);
    void *sym = lib ? dlsym(lib, "kernel_entry") : NULL;
    if (sym == NULL) { fprintf(stderr, "loading %s: %s\n", KERNEL_SO, dlerror()); return 1; }
    memcpy(&kernel_entry, &sym, sizeof sym);
    return 0;
}
#else
SIMPLER_KERNEL void kernel_entry(int64_t *args);
static int load_kernel(void) { return 0; }
#endif

#define MAXN 8u
#define COUNT 301u                                   /* elements per rank */
#define SCRATCH_BYTES ((MAXN * COUNT * 4u + 63u) / 64u * 64u)
#define WINDOW (SCRATCH_BYTES + 64u)                 /* scratch, then 16 int32 signals */
#define OK_TIMEOUT_US 5000000u

enum { ALLREDUCE = 0, ALLGATHER = 1, REDUCE_SCATTER = 2 };
/* The collectives every rank runs in a row on one domain: round k is STEPS[k - 1]. */
static const struct { uint64_t op; uint32_t dt; } STEPS[] = {
    {ALLREDUCE, SIMPLER_DT_FLOAT32}, {ALLREDUCE, SIMPLER_DT_INT32}, {ALLGATHER, SIMPLER_DT_FLOAT32},
    {ALLGATHER, SIMPLER_DT_INT32}, {REDUCE_SCATTER, SIMPLER_DT_FLOAT32}, {REDUCE_SCATTER, SIMPLER_DT_INT32},
    {ALLREDUCE, SIMPLER_DT_FLOAT32}, {REDUCE_SCATTER, SIMPLER_DT_INT32}, {ALLGATHER, SIMPLER_DT_FLOAT32},
    {ALLREDUCE, SIMPLER_DT_INT32},
};
#define NSTEPS (uint32_t)(sizeof STEPS / sizeof STEPS[0])

static unsigned char *region;
static uint32_t nranks;
static int failed; /* set by any rank (atomically) */
static int order_matters; /* some f32 reference depends on the rank order (set atomically) */

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %u line %d: ", rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); __atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST); return NULL; } } while (0)

static SimplerCommWorkspace *ws(void) { return (SimplerCommWorkspace *)region; }
static SimplerCommContext *ctx(uint32_t r) { return (SimplerCommContext *)(region + simpler_comm_context_offset(r)); }
static unsigned char *win(uint32_t r) { return (unsigned char *)(uintptr_t)ctx(r)->windows_in[r]; }
static int32_t *sig(uint32_t r) { return (int32_t *)(win(r) + SCRATCH_BYTES); }
static uint64_t now_ns(void) { return simpler_comm_priv_now_ns(); }

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

/* One kernel launch as the runtime sets it up: the 4 tensor views, the argument array with
 * the 4 scalars, the local (SPMD) and global (core) contexts. */
typedef struct Launch {
    SimplerChipTensor t[4];
    int64_t args[SIMPLER_KERNEL_ARG_SLOTS];
    SimplerLocalContext local;
    SimplerGlobalContext global;
} Launch;

static void vector(SimplerChipTensor *t, void *data, uint64_t len, uint32_t dt) {
    memset(t, 0, sizeof *t);
    t->buffer_addr = (uint64_t)(uintptr_t)data;
    t->buffer_size = len * simpler_dtype_size(dt);
    t->shapes[0] = len;
    t->strides[0] = 1;
    t->ndims = 1;
    t->dtype = dt;
    t->owner_task_id = SIMPLER_NO_OWNER_TASK;
    t->flags = SIMPLER_TENSOR_FLAG_CONTIGUOUS;
}

static void prepare(Launch *l, uint32_t rank, uint64_t op, uint32_t dt, void *in, uint64_t in_len, void *out,
                    uint64_t out_len, uint64_t round, uint64_t timeout_us) {
    memset(l, 0, sizeof *l);
    vector(&l->t[0], in, in_len, dt);
    vector(&l->t[1], out, out_len, dt);
    vector(&l->t[2], win(rank), SCRATCH_BYTES / 4u, dt);
    vector(&l->t[3], sig(rank), 16, SIMPLER_DT_INT32);
    for (int i = 0; i < 4; ++i) l->args[i] = (int64_t)(uintptr_t)&l->t[i];
    l->args[4] = (int64_t)(uintptr_t)ctx(rank);
    l->args[5] = (int64_t)op;
    l->args[6] = (int64_t)round;
    l->args[7] = (int64_t)timeout_us;
    l->local.block_idx = 0;
    l->local.block_num = 1;
    l->global.core_id = rank;
    l->global.core_type = SIMPLER_CORE_AIV;
    l->args[SIMPLER_LOCAL_CONTEXT_SLOT] = (int64_t)(uintptr_t)&l->local;
    l->args[SIMPLER_GLOBAL_CONTEXT_SLOT] = (int64_t)(uintptr_t)&l->global;
    l->args[SIMPLER_TENSOR_COUNT_SLOT] = 4;
    l->args[SIMPLER_SCALAR_COUNT_SLOT] = 4;
}

static int32_t launch(Launch *l) {
    kernel_entry(l->args);
    return l->global.fatal_code;
}

/* Element i of rank p's input in round `step` + 1, as bits. f32 values mix magnitudes so
 * that the sum's bits depend on the order of the terms; i32 values overflow when added. */
static uint32_t gen(uint32_t step, uint32_t p, uint64_t i, uint32_t dt) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (p * 0x9E3779B9u) ^ (step * 0x85EBCA6Bu);
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12;
    if (dt == SIMPLER_DT_INT32) return h;
    float f = (float)((int32_t)(h % 2001u) - 1000) * 0.1f;
    if (h & 0x100000u) f *= 65536.0f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}
static float as_f32(uint32_t bits) { float f; memcpy(&f, &bits, sizeof f); return f; }
static uint32_t f32_bits(float f) { uint32_t b; memcpy(&b, &f, sizeof b); return b; }

/* The reference of element j of rank `rank`'s output in round step + 1. */
static uint32_t expect(uint32_t step, uint32_t rank, uint64_t j) {
    const uint64_t op = STEPS[step].op;
    const uint32_t dt = STEPS[step].dt, n = nranks;
    if (op == ALLGATHER) return gen(step, (uint32_t)(j / COUNT), j % COUNT, dt);
    const uint64_t i = op == REDUCE_SCATTER ? rank * COUNT + j : j;
    if (dt == SIMPLER_DT_INT32) {
        uint32_t s = 0;
        for (uint32_t p = 0; p < n; ++p) s += gen(step, p, i, dt);
        return s;
    }
    float s = as_f32(gen(step, 0, i, dt)), back = as_f32(gen(step, n - 1, i, dt));
    for (uint32_t p = 1; p < n; ++p) s += as_f32(gen(step, p, i, dt));
    for (uint32_t p = n - 1; p-- > 0;) back += as_f32(gen(step, p, i, dt));
    if (f32_bits(s) != f32_bits(back)) __atomic_store_n(&order_matters, 1, __ATOMIC_RELAXED);
    return f32_bits(s);
}

static void *rounds_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg, n = nranks;
    uint32_t *in = malloc(MAXN * COUNT * 4u), *out = malloc(MAXN * COUNT * 4u);
    for (uint32_t s = 0; s < NSTEPS && !__atomic_load_n(&failed, __ATOMIC_SEQ_CST); ++s) {
        const uint64_t op = STEPS[s].op;
        const uint32_t dt = STEPS[s].dt;
        const uint64_t in_len = op == REDUCE_SCATTER ? n * COUNT : COUNT, out_len = op == ALLGATHER ? n * COUNT : COUNT;
        for (uint64_t i = 0; i < in_len; ++i) in[i] = gen(s, rank, i, dt);
        memset(out, 0xAB, out_len * 4u);
        Launch l;
        prepare(&l, rank, op, dt, in, in_len, out, out_len, s + 1, OK_TIMEOUT_US);
        const int32_t rc = launch(&l);
        CHECK(rc == 0, "round %u (op %llu, dtype %u) failed with %d", s + 1, (unsigned long long)op, dt, rc);
        for (uint64_t j = 0; j < out_len; ++j) {
            const uint32_t want = expect(s, rank, j);
            CHECK(out[j] == want, "round %u (op %llu, dtype %u): element %llu is %08x, want %08x", s + 1,
                  (unsigned long long)op, dt, (unsigned long long)j, out[j], want);
        }
    }
    free(in);
    free(out);
    return NULL;
}

static int rounds(uint32_t n) {
    pthread_t t[MAXN];
    for (uint32_t r = 0; r < n; ++r) pthread_create(&t[r], NULL, rounds_rank, (void *)(uintptr_t)r);
    for (uint32_t r = 0; r < n; ++r) pthread_join(t[r], NULL);
    if (failed) return 1;
    for (uint32_t r = 0; r < n; ++r)
        if (*sig(r) != (int32_t)(NSTEPS * (n - 1))) { fprintf(stderr, "rank %u: %d arrivals\n", r, *sig(r)); return 1; }
    if (ws()->barrier_arrive != 0 || ws()->barrier_generation != NSTEPS) {
        fprintf(stderr, "barrier: %llu arrived, generation %llu\n", (unsigned long long)ws()->barrier_arrive,
                (unsigned long long)ws()->barrier_generation);
        return 1;
    }
    if (n >= 4 && !order_matters) { fprintf(stderr, "the f32 data does not tell sum orders apart\n"); return 1; }
    return 0;
}

/* Ranks 0..n-2 run an allreduce; rank n-1 never arrives. With `abort_after_ms` > 0 the host
 * sets the abort word then, and the ranks must fail with PEER_FAILED at once; else they must
 * fail with WAIT_TIMEOUT after about the timeout. */
static uint64_t timeout_us, abort_at_ns;
static int32_t want_code;
static void *absent_peer_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg;
    uint32_t in[COUNT], out[COUNT];
    memset(in, 0, sizeof in);
    Launch l;
    prepare(&l, rank, ALLREDUCE, SIMPLER_DT_FLOAT32, in, COUNT, out, COUNT, 1, timeout_us);
    const uint64_t t0 = now_ns();
    const int32_t rc = launch(&l);
    const double ms = (double)(now_ns() - t0) / 1e6;
    CHECK(rc == want_code, "fatal code %d, want %d", rc, want_code);
    if (want_code == SIMPLER_COMM_WAIT_TIMEOUT) {
        CHECK(ms >= (double)timeout_us / 1e3 && ms < (double)timeout_us / 1e3 + 250.0, "timed out after %.1f ms", ms);
    } else {
        const double late = (double)(now_ns() - __atomic_load_n(&abort_at_ns, __ATOMIC_ACQUIRE)) / 1e6;
        CHECK(late < 500.0, "returned %.1f ms after the abort", late);
    }
    return NULL;
}
static int absent_peer(uint32_t n, int abort_after_ms) {
    pthread_t t[MAXN];
    timeout_us = abort_after_ms ? 20000000u : 50000u;
    want_code = abort_after_ms ? SIMPLER_COMM_PEER_FAILED : SIMPLER_COMM_WAIT_TIMEOUT;
    for (uint32_t r = 0; r + 1 < n; ++r) pthread_create(&t[r], NULL, absent_peer_rank, (void *)(uintptr_t)r);
    if (abort_after_ms) {
        const uint64_t until = now_ns() + (uint64_t)abort_after_ms * 1000000u;
        while (now_ns() < until) simpler_comm_priv_backoff(UINT32_MAX);
        __atomic_store_n(&abort_at_ns, now_ns(), __ATOMIC_RELEASE);
        __atomic_store_n(&ws()->abort, 1u, __ATOMIC_RELEASE);
    }
    for (uint32_t r = 0; r + 1 < n; ++r) pthread_join(t[r], NULL);
    return failed;
}

/* Bad arguments fail with BAD_ARGUMENT (or 1000 + T) before anything is written. */
static void *bad_rank(void *arg) {
    const uint32_t rank = (uint32_t)(uintptr_t)arg, n = nranks;
    static uint32_t in[MAXN * COUNT + 1], out[MAXN * COUNT + 1], elsewhere[COUNT];
    uint32_t win_before[64];
    memcpy(win_before, win(rank), sizeof win_before);
    for (int k = 0;; ++k) {
        Launch l;
        uint64_t op = ALLREDUCE, in_len = COUNT, out_len = COUNT;
        uint32_t dt = SIMPLER_DT_FLOAT32;
        int32_t want = SIMPLER_COMM_BAD_ARGUMENT;
        const char *what;
        switch (k) {
        case 0: what = "op 3"; op = 3; break;
        case 1: what = "f16 tensors"; dt = SIMPLER_DT_FLOAT16; break;
        case 2: what = "allgather output of count"; op = ALLGATHER; if (n == 1) continue; break;
        case 3: what = "reduce_scatter input of n*count + 1"; op = REDUCE_SCATTER; in_len = n * COUNT + 1; break;
        case 4: what = "allreduce output of count + 1"; out_len = COUNT + 1; break;
        default: what = NULL;
        }
        if (what == NULL && k < 100) { k = 99; continue; } /* the cases below mutate a good launch */
        if (k >= 100) {
            prepare(&l, rank, op, dt, in, in_len, out, out_len, 1, OK_TIMEOUT_US);
            switch (k) {
            case 100: what = "round 0"; l.args[6] = 0; break;
            case 101: what = "timeout 0"; l.args[7] = 0; break;
            case 102: what = "device_ctx 0"; l.args[4] = 0; break;
            case 103: what = "window outside the own window"; vector(&l.t[2], elsewhere, COUNT, dt); break;
            case 104: what = "window of another rank"; vector(&l.t[2], win((rank + 1) % n), COUNT, dt); if (n == 1) continue; break;
            case 105: what = "window shorter than input"; l.t[2].shapes[0] = COUNT - 1; break;
            case 106: what = "window of another dtype"; l.t[2].dtype = SIMPLER_DT_INT32; break;
            case 107: what = "strided input"; l.t[0].strides[0] = 2; break;
            case 108: what = "2-D output"; l.t[1].ndims = 2; l.t[1].shapes[1] = 1; break;
            case 109: what = "f32 signal"; l.t[3].dtype = SIMPLER_DT_FLOAT32; break;
            case 110: what = "signal outside the own window"; vector(&l.t[3], elsewhere, 16, SIMPLER_DT_INT32); break;
            case 111: what = "two blocks"; l.local.block_num = 2; break;
            case 112: what = "input past its buffer"; l.t[0].start_offset = 1; break;
            case 113: what = "round whose arrivals overflow"; l.args[6] = (int64_t)INT32_MAX + 1; if (n < 2) continue; break;
            case 114: what = "3 tensors"; l.args[SIMPLER_TENSOR_COUNT_SLOT] = 3; want = 1003; break;
            default: what = NULL;
            }
            if (what == NULL) break;
        } else {
            prepare(&l, rank, op, dt, in, in_len, out, out_len, 1, OK_TIMEOUT_US);
        }
        memset(out, 0xAB, sizeof out);
        const int32_t rc = launch(&l);
        CHECK(rc == want, "%s: fatal code %d, want %d", what, rc, want);
        CHECK(out[0] == 0xABABABABu && out[COUNT - 1] == 0xABABABABu, "%s: output written", what);
        CHECK(memcmp(win_before, win(rank), sizeof win_before) == 0, "%s: window written", what);
        for (uint32_t p = 0; p < n; ++p) CHECK(*sig(p) == 0, "%s: signal of %u written", what, p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const uint32_t n = (uint32_t)atoi(argv[2]);
    if (n == 0 || n > MAXN) return 2;
    if (load_kernel() != 0) return 3;
    domain_init(n);
    const char *what = argv[1];
    int bad;
    if (!strcmp(what, "rounds")) bad = rounds(n);
    else if (!strcmp(what, "timeout")) bad = absent_peer(n, 0);
    else if (!strcmp(what, "abort")) bad = absent_peer(n, 20);
    else if (!strcmp(what, "bad")) { bad_rank((void *)(uintptr_t)0); bad = failed; }
    else return 2;
    free(region);
    if (bad) return 1;
    printf("ok %s %u\n", what, n);
    return 0;
}
"#;

/// The kernel's source.
fn kernel_source() -> PathBuf {
    cc::root().join("python/simpler/collectives/kernels/collective.c")
}

/// The kernel harness with the kernel linked in, compiled once for all tests of this file.
fn linked_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        compile(
            "collective_harness",
            KERNEL_HARNESS,
            Some(&kernel_source()),
            &[],
        )
    })
}

/// The kernel harness loading the kernel from a library the toolchain's way, compiled once.
fn loaded_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let so = cc::scratch_dir().join("collective.so");
        let (src, so_arg) = (kernel_source(), so.as_os_str());
        let mut args: Vec<&OsStr> = TOOLCHAIN_AIV_FLAGS.iter().map(OsStr::new).collect();
        args.extend(["-o".as_ref(), so_arg, src.as_os_str(), "-lm".as_ref()]);
        cc::build("collective.so", &args);
        let define = format!("-DKERNEL_SO=\"{}\"", so.display());
        // dlopen is in libc from glibc 2.34 on, in libdl before.
        compile(
            "collective_harness_so",
            KERNEL_HARNESS,
            None,
            &[&define, "-ldl"],
        )
    })
}

/// Runs `case` with each rank count of `ns`, through both kernel harnesses.
fn run_both(case: &str, ns: &[u32]) {
    for exe in [linked_exe(), loaded_exe()] {
        for &n in ns {
            run(exe, case, n);
        }
    }
}

#[test]
fn collectives_match_the_reference_over_rounds_in_a_row() {
    run_both("rounds", &[1, 2, 4, 8]);
}

#[test]
fn collective_whose_peer_never_arrives_fails_with_the_timeout_code() {
    run_both("timeout", &[2, 4]);
}

#[test]
fn collective_on_an_aborted_domain_fails_with_peer_failed() {
    run_both("abort", &[2, 8]);
}

#[test]
fn collective_refuses_bad_arguments_before_writing() {
    run_both("bad", &[1, 2, 4]);
}

// ---- the orchestration ------------------------------------------------------------------

const ORCH_HARNESS: &str = r#"
#include "simpler/orchestration.h"
#include <stdio.h>
#include <string.h>

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops, const SimplerOrchArgs *args);

static int submits;
static SimplerTaskDesc last;
static int32_t fatal_code;
static char fatal_msg[256];

static int32_t fake_submit(void *rt, const SimplerTaskDesc *d, SimplerTaskOutputs *o) {
    (void)rt; (void)o; ++submits; last = *d; return 0;
}
static int32_t fake_scope_begin(void *rt, uint32_t mode) { (void)rt; (void)mode; return 0; }
static int32_t fake_scope_end(void *rt) { (void)rt; return 0; }
static void fake_report_fatal(void *rt, int32_t code, const char *msg) {
    (void)rt; fatal_code = code; snprintf(fatal_msg, sizeof fatal_msg, "%s", msg);
}
static int32_t fake_is_fatal(void *rt) { (void)rt; return fatal_code != 0; }
static void fake_log(void *rt, uint32_t level, const char *msg) { (void)rt; (void)level; (void)msg; }
static uint32_t fake_count(void *rt) { (void)rt; return 24; }

static SimplerOrchArgs args;
static void vector(SimplerChipTensor *t, uint64_t addr, uint64_t len, uint32_t dt) {
    memset(t, 0, sizeof *t);
    t->buffer_addr = addr; t->buffer_size = len * 4; t->shapes[0] = len; t->strides[0] = 1;
    t->ndims = 1; t->dtype = dt; t->owner_task_id = SIMPLER_NO_OWNER_TASK; t->flags = SIMPLER_TENSOR_FLAG_CONTIGUOUS;
}
/* A good call of `op` for 4 ranks of 8 elements each. */
static void good(uint64_t op, uint32_t dt) {
    memset(&args, 0, sizeof args);
    args.tensor_count = 4; args.scalar_count = 4;
    vector(&args.tensors[0], 0x10000, op == 2 ? 32 : 8, dt);
    vector(&args.tensors[1], 0x20000, op == 1 ? 32 : 8, dt);
    vector(&args.tensors[2], 0x30000, 32, dt);
    vector(&args.tensors[3], 0x40000, 16, SIMPLER_DT_INT32);
    args.scalars[0] = 0x50000; args.scalars[1] = op; args.scalars[2] = 3; args.scalars[3] = 1000000;
}

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "line %d: ", __LINE__); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); ++failures; } } while (0)

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const SimplerOrchOps ops = {sizeof ops, SIMPLER_ORCH_OPS_VERSION, NULL, fake_submit, fake_scope_begin, fake_scope_end,
                                fake_report_fatal, fake_is_fatal, fake_log, fake_count, fake_count, NULL, NULL};
    for (uint64_t op = 0; op < 3; ++op) {
        for (int k = 0; k < 2; ++k) {
            const uint32_t dt = k ? SIMPLER_DT_INT32 : SIMPLER_DT_FLOAT32;
            good(op, dt);
            submits = 0; fatal_code = 0;
            const int32_t rc = aicpu_orchestration_entry(&ops, &args);
            CHECK(rc == 0 && submits == 1 && fatal_code == 0, "op %llu dtype %u: rc %d, %d submits, fatal %d (%s)",
                  (unsigned long long)op, dt, rc, submits, fatal_code, fatal_msg);
            CHECK(last.kernel_ids[0] == SIMPLER_NO_KERNEL && last.kernel_ids[1] == 0 && last.kernel_ids[2] == SIMPLER_NO_KERNEL,
                  "one AIV kernel, func 0");
            CHECK(last.block_num == 1 && (last.flags & SIMPLER_TASK_FLAG_REQUIRE_SYNC_START), "one block, sync start");
            CHECK(last.tensor_count == 4 && last.scalar_count == 4 && last.dep_count == 0, "4 tensors, 4 scalars");
            CHECK(last.tags[0] == SIMPLER_INPUT && last.tags[1] == SIMPLER_OUTPUT_EXISTING && last.tags[2] == SIMPLER_INOUT &&
                  last.tags[3] == SIMPLER_INOUT, "tags");
            for (int i = 0; i < 4; ++i) {
                CHECK(memcmp(&last.tensors[i], &args.tensors[i], sizeof last.tensors[i]) == 0, "tensor %d", i);
                CHECK(last.scalars[i] == args.scalars[i], "scalar %d", i);
            }
        }
    }
    /* Each bad call: what to break, and a word its message must contain. */
    for (int k = 0;; ++k) {
        const char *word;
        good(0, SIMPLER_DT_FLOAT32);
        switch (k) {
        case 0: args.tensor_count = 3; word = "4 tensors"; break;
        case 1: args.scalar_count = 5; word = "4 scalars"; break;
        case 2: for (int i = 0; i < 3; ++i) args.tensors[i].dtype = SIMPLER_DT_FLOAT16; word = "input"; break;
        case 3: args.tensors[0].ndims = 2; args.tensors[0].shapes[1] = 1; word = "input"; break;
        case 4: args.tensors[1].dtype = SIMPLER_DT_INT32; word = "output"; break;
        case 5: args.tensors[1].strides[0] = 2; word = "output"; break;
        case 6: args.tensors[2].dtype = SIMPLER_DT_INT32; word = "window"; break;
        case 7: args.tensors[3].dtype = SIMPLER_DT_FLOAT32; word = "signal"; break;
        case 8: args.scalars[0] = 0; word = "device_ctx"; break;
        case 9: args.scalars[1] = 3; word = "op"; break;
        case 10: args.scalars[2] = 0; word = "round"; break;
        case 11: args.scalars[3] = 0; word = "timeout_us"; break;
        case 12: args.tensors[1].shapes[0] = 9; word = "allreduce output"; break;
        case 13: good(1, SIMPLER_DT_FLOAT32); args.tensors[1].shapes[0] = 33; word = "allgather output"; break;
        case 14: good(2, SIMPLER_DT_INT32); args.tensors[0].shapes[0] = 33; word = "reduce_scatter input"; break;
        case 15: good(2, SIMPLER_DT_INT32); args.tensors[2].shapes[0] = 31; word = "window"; break;
        default: word = NULL;
        }
        if (word == NULL) break;
        submits = 0; fatal_code = 0; fatal_msg[0] = 0;
        const int32_t rc = aicpu_orchestration_entry(&ops, &args);
        CHECK(rc == SIMPLER_ORCH_INVALID_ARGS && fatal_code == SIMPLER_ORCH_INVALID_ARGS && submits == 0,
              "case %d: rc %d, fatal %d, %d submits", k, rc, fatal_code, submits);
        CHECK(strstr(fatal_msg, word) != NULL, "case %d: message \"%s\" does not name \"%s\"", k, fatal_msg, word);
    }
    if (failures) return 1;
    printf("ok %s %s\n", argv[1], argv[2]);
    return 0;
}
"#;

#[test]
fn orchestration_submits_one_sync_start_task_or_names_the_bad_argument() {
    let exe = compile(
        "collective_orch_harness",
        ORCH_HARNESS,
        Some(&cc::root().join("python/simpler/collectives/orchestration.c")),
        &[],
    );
    run(&exe, "orchestration", 4);
}
