//! `include/simpler/queue.h` (the chip side of the L3↔L2 message queue, docs/comm.md §8)
//! and `examples/l3/message_queue/kernels/echo.c`, checked with a C program compiled in strict
//! `-std=c11 -Wall -Wextra -Werror`: one thread plays the host side, written here from §8
//! alone (header, input producer, output consumer on a `malloc`'d region: payload, then 384
//! bytes of counters on the next 64-byte line), another runs the echo kernel's
//! `kernel_entry` with a faked argument array (`simpler/kernel.h`: the six descriptor words
//! and the timeout as scalars 0..7, no tensors). The host checks every reply (content, seq,
//! where §8 lets it lie, no overwrite of what it still holds), drives restarts, aborts,
//! timeouts and broken headers, and a probe prints the header's layout numbers, which must
//! be the ones §8 of docs/comm.md states.

use crate::cc;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The host program (C). Modes (argv[1]): probe, echo, stop, api, abort, timeout, bad. It
/// prints `key value...` lines (unsigned decimal) and exits non-zero with a `FAIL` line on
/// stderr when one of its own checks fails.
const HOST: &str = r##"
#include "simpler/queue.h"
#include "examples/l3/message_queue/kernels/echo.c"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf(stderr, "FAIL line %d: ", __LINE__); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

typedef unsigned long long ull;

static uint64_t now_ms(void) { return simpler_comm_priv_now_ns() / 1000000u; }
static void sleep_ms(long ms) {
    const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    (void)thrd_sleep(&t, NULL);
}
static uint64_t round64(uint64_t n) { return (n + 63u) / 64u * 64u; }

/* ---- the host side, from docs/comm.md §8 -------------------------------------------- */

typedef struct Held { uint64_t seq, offset, nbytes, sum; } Held;

typedef struct Host {
    unsigned char *mem, *payload;
    uint32_t *counters;
    uint64_t payload_bytes;
    uint32_t depth;
    uint64_t in_a, out_a;
    SimplerQueueHeader *hdr;
    SimplerQueueSlot *in_ring, *out_ring;
    unsigned char *in_arena, *out_arena;
    uint32_t in_tail;     /* input producer: messages produced */
    uint64_t in_seq, in_w;
    uint32_t out_head;    /* output consumer: messages released */
    uint64_t out_seq, out_prev_end;
    Held held[64];        /* outputs read, not yet released (depth <= 64 here) */
    uint32_t nheld;
    uint64_t out_wraps, in_wraps;
    int64_t args[SIMPLER_KERNEL_ARG_SLOTS];
    SimplerGlobalContext g;
    SimplerLocalContext l;
    pthread_t thread;
} Host;

static uint32_t cload(Host *h, uint32_t off) { return __atomic_load_n(&h->counters[off / 4], __ATOMIC_ACQUIRE); }
static void cstore(Host *h, uint32_t off, uint32_t v) { __atomic_store_n(&h->counters[off / 4], v, __ATOMIC_RELEASE); }

/* Lays out a queue of `depth` slots: payload (header, rings, arenas), then the counters on
 * the next 64-byte line; all four cursors start at `start`. */
static void host_init(Host *h, uint32_t depth, uint64_t in_a, uint64_t out_a, uint32_t start, uint64_t timeout_us) {
    memset(h, 0, sizeof *h);
    CHECK(depth <= 64, "test depth");
    h->depth = depth; h->in_a = in_a; h->out_a = out_a;
    h->payload_bytes = 64 + 32ull * depth + 32ull * depth + in_a + out_a;
    const uint64_t counter_off = round64(h->payload_bytes);
    h->mem = aligned_alloc(64, counter_off + 384);
    CHECK(h->mem != NULL, "alloc");
    memset(h->mem, 0, counter_off + 384);
    h->payload = h->mem;
    h->counters = (uint32_t *)(void *)(h->mem + counter_off);
    h->hdr = (SimplerQueueHeader *)(void *)h->payload;
    h->hdr->magic = 0x45555153u; h->hdr->version = 1; h->hdr->depth = depth;
    h->hdr->in_arena_bytes = in_a; h->hdr->out_arena_bytes = out_a;
    h->hdr->in_ring_offset = 64; h->hdr->out_ring_offset = 64 + 32ull * depth;
    h->hdr->in_arena_offset = 64 + 64ull * depth; h->hdr->out_arena_offset = 64 + 64ull * depth + in_a;
    h->in_ring = (SimplerQueueSlot *)(void *)(h->payload + 64);
    h->out_ring = (SimplerQueueSlot *)(void *)(h->payload + 64 + 32ull * depth);
    h->in_arena = h->payload + 64 + 64ull * depth;
    h->out_arena = h->in_arena + in_a;
    cstore(h, 0, start); cstore(h, 64, start); cstore(h, 128, start); cstore(h, 192, start);
    h->in_tail = start; h->in_seq = start; h->out_head = start; h->out_seq = start;
    h->args[0] = (int64_t)SIMPLER_REGION_MAGIC_VERSION;
    h->args[1] = 7;
    h->args[2] = (int64_t)(uintptr_t)h->payload;
    h->args[3] = (int64_t)h->payload_bytes;
    h->args[4] = (int64_t)(uintptr_t)h->counters;
    h->args[5] = 384;
    h->args[6] = (int64_t)timeout_us;
    h->args[SIMPLER_LOCAL_CONTEXT_SLOT] = (int64_t)(uintptr_t)&h->l;
    h->args[SIMPLER_GLOBAL_CONTEXT_SLOT] = (int64_t)(uintptr_t)&h->g;
    h->args[SIMPLER_TENSOR_COUNT_SLOT] = 0;
    h->args[SIMPLER_SCALAR_COUNT_SLOT] = 7;
}

/* Produces one input message if the ring and the arena have room now (1), else 0. */
static int host_try_send(Host *h, uint32_t opcode, const void *data, uint64_t n) {
    const uint32_t head = cload(h, 64), used = h->in_tail - head, mask = h->depth - 1;
    CHECK(used <= h->depth, "input head ran past the tail");
    if (used == h->depth) return 0;
    if (used == 0) h->in_w = 0;
    const uint64_t s = round64(n);
    uint64_t p = h->in_w;
    if (s != 0 && h->in_w + s > h->in_a) p = 0;
    for (uint32_t i = 0; i < used && s != 0; ++i) {
        const SimplerQueueSlot *o = &h->in_ring[(head + i) & mask];
        const uint64_t os = round64(o->payload_nbytes);
        if (os != 0 && p < o->payload_offset + os && o->payload_offset < p + s) return 0;
    }
    if (p == 0 && h->in_w != 0 && s != 0) h->in_wraps++;
    if (n) memcpy(h->in_arena + p, data, n);
    SimplerQueueSlot *slot = &h->in_ring[h->in_tail & mask];
    slot->seq = h->in_seq; slot->opcode = opcode; slot->reserved = 0;
    slot->payload_offset = p; slot->payload_nbytes = n;
    h->in_w = p + s; h->in_seq++; h->in_tail++;
    cstore(h, 0, h->in_tail);
    return 1;
}

static uint64_t checksum(const unsigned char *b, uint64_t n) {
    uint64_t x = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; ++i) x = (x ^ b[i]) * 1099511628211ull;
    return x ^ n;
}

/* Checks one output message against what §8 allows and the test expects; the callback
 * checks its content. */
typedef void (*CheckReply)(uint64_t seq, uint32_t opcode, const unsigned char *data, uint64_t n, void *ctx);

/* Reads every output message the chip has produced beyond those held; returns how many. */
static uint32_t host_poll(Host *h, CheckReply check, void *ctx) {
    const uint32_t tail = cload(h, 128), avail = tail - h->out_head, mask = h->depth - 1;
    CHECK(avail <= h->depth, "output tail %u head %u: more than depth", tail, h->out_head);
    uint32_t got = 0;
    while (h->nheld < avail) {
        const uint32_t idx = h->out_head + h->nheld;
        const SimplerQueueSlot *s = &h->out_ring[idx & mask];
        const uint64_t off = s->payload_offset, n = s->payload_nbytes, r = round64(n);
        CHECK(s->seq == h->out_seq, "output seq %llu, expected %llu", (ull)s->seq, (ull)h->out_seq);
        CHECK((uint32_t)s->seq == idx, "output seq low bits");
        CHECK(s->opcode == 1 || s->opcode == 3, "output opcode %u", s->opcode);
        CHECK(s->reserved == 0, "output slot reserved word");
        CHECK(off % 64 == 0 && off <= h->out_a && n <= h->out_a - off, "output span %llu+%llu", (ull)off, (ull)n);
        CHECK(off == h->out_prev_end || off == 0, "output %llu at %llu, previous ended at %llu", (ull)idx,
              (ull)off, (ull)h->out_prev_end);
        if (off == 0 && h->out_prev_end != 0) {
            /* Back at 0 although it fitted at w: only when the queue was empty. */
            if (n == 0 || h->out_prev_end + r <= h->out_a)
                CHECK(h->nheld == 0, "output %llu restarted at 0 with %u held", (ull)idx, h->nheld);
            else h->out_wraps++;
        }
        for (uint32_t i = 0; i < h->nheld && r != 0; ++i) {
            const uint64_t ho = h->held[i].offset, hr = round64(h->held[i].nbytes);
            CHECK(hr == 0 || off + r <= ho || ho + hr <= off, "output %llu overlaps held %llu", (ull)idx,
                  (ull)h->held[i].seq);
        }
        check(s->seq, s->opcode, h->out_arena + off, n, ctx);
        h->held[h->nheld++] = (Held){s->seq, off, n, checksum(h->out_arena + off, n)};
        h->out_prev_end = off + r;
        h->out_seq++;
        got++;
    }
    return got;
}

/* Releases the k oldest held outputs, checking that nobody wrote over them meanwhile. */
static void host_release(Host *h, uint32_t k) {
    CHECK(k <= h->nheld, "release");
    for (uint32_t i = 0; i < k; ++i)
        CHECK(checksum(h->out_arena + h->held[i].offset, h->held[i].nbytes) == h->held[i].sum,
              "held output %llu was overwritten", (ull)h->held[i].seq);
    memmove(h->held, h->held + k, (h->nheld - k) * sizeof(Held));
    h->nheld -= k;
    h->out_head += k;
    cstore(h, 192, h->out_head);
}

static void *kernel_thread(void *p) {
    Host *h = p;
    kernel_entry(h->args);
    return NULL;
}
static void kernel_start(Host *h) {
    memset(&h->g, 0, sizeof h->g);
    h->l.block_idx = 0; h->l.block_num = 1;
    CHECK(pthread_create(&h->thread, NULL, kernel_thread, h) == 0, "pthread_create");
}
static int32_t kernel_join(Host *h) {
    CHECK(pthread_join(h->thread, NULL) == 0, "pthread_join");
    return h->g.fatal_code;
}

/* ---- echo ------------------------------------------------------------------------------- */

/* Message i: every 7th an ERROR text, else DATA of (37 i + 11) mod 301 floats (0..300). */
static uint32_t msg_opcode(uint64_t i) { return i % 7 == 3 ? 3u : 1u; }
static uint64_t msg_build(uint64_t i, unsigned char *buf) {
    if (msg_opcode(i) == 3) return (uint64_t)sprintf((char *)buf, "error %llu%.*s", (ull)i, (int)(i % 50), "................................................................");
    const uint64_t n = (i * 37 + 11) % 301;
    for (uint64_t j = 0; j < n; ++j) {
        const float v = (float)((i * 13 + j) % 1000) * 0.25f - 7.0f;
        memcpy(buf + 4 * j, &v, 4);
    }
    return 4 * n;
}

typedef struct Echo { uint64_t first_seq, first_msg; } Echo;

static void echo_check(uint64_t seq, uint32_t opcode, const unsigned char *data, uint64_t n, void *ctx) {
    const Echo *e = ctx;
    const uint64_t i = e->first_msg + (seq - e->first_seq);
    static unsigned char want[4096];
    const uint64_t wn = msg_build(i, want);
    CHECK(opcode == msg_opcode(i), "reply %llu opcode %u", (ull)i, opcode);
    CHECK(n == wn, "reply %llu has %llu bytes, want %llu", (ull)i, (ull)n, (ull)wn);
    if (opcode == 1) {
        for (uint64_t j = 0; j < n; j += 4) {
            float v, got;
            memcpy(&v, want + j, 4);
            memcpy(&got, data + j, 4);
            v = v * 2.0f + 1.0f;
            CHECK(memcmp(&v, &got, 4) == 0, "reply %llu value %llu: %g, want %g", (ull)i, (ull)j / 4, got, v);
        }
    } else {
        CHECK(memcmp(data, want, n) == 0, "reply %llu text", (ull)i);
    }
}

static uint64_t lcg = 12345;
static uint32_t rnd(uint32_t n) { lcg = lcg * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(lcg >> 33) % n; }

/* Sends messages first..first+count, then STOP, reading and checking every reply while the
 * kernel runs; holds up to depth replies before releasing some. With keep, the last replies
 * stay held when the kernel ends. */
static void echo_phase(Host *h, Echo *e, uint64_t first, uint64_t count, int keep) {
    static unsigned char buf[4096];
    uint64_t sent = 0, got = 0, idle = 0;
    int stop_sent = 0;
    uint32_t target = 1 + rnd(h->depth);
    const uint64_t deadline = now_ms() + 8000;
    kernel_start(h);
    while (got < count || !stop_sent) {
        int progress = 0;
        if (sent < count) {
            const uint64_t n = msg_build(first + sent, buf);
            if (host_try_send(h, msg_opcode(first + sent), buf, n)) { sent++; progress = 1; }
        } else if (!stop_sent && host_try_send(h, 2, NULL, 0)) {
            stop_sent = 1;
        }
        const uint32_t new = host_poll(h, echo_check, e);
        got += new;
        if (new) progress = 1;
        if (h->nheld > 0 && !(keep && got == count) && (h->nheld >= target || idle > 100)) {
            host_release(h, 1 + rnd(h->nheld));
            target = 1 + rnd(h->depth);
            progress = 1;
        }
        idle = progress ? 0 : idle + 1;
        if (idle > 64) thrd_yield();
        if (now_ms() > deadline) {
            cstore(h, 256, 1);
            (void)kernel_join(h);
            FAIL("echo stuck: sent %llu got %llu of %llu", (ull)sent, (ull)got, (ull)count);
        }
    }
    const int32_t code = kernel_join(h);
    CHECK(code == 0, "echo kernel failed with %d", code);
    CHECK(cload(h, 64) == h->in_tail, "STOP not released: head %u tail %u", cload(h, 64), h->in_tail);
    CHECK(cload(h, 320) == 0, "chip abort set");
    CHECK(h->out_seq - e->first_seq == first + count - e->first_msg, "reply count");
}

static void echo_run(const char *name, uint32_t depth, uint64_t in_a, uint64_t out_a, uint32_t start, uint64_t n1,
                     uint64_t n2) {
    static Host h;
    host_init(&h, depth, in_a, out_a, start, 5000000);
    Echo e = {start, 0};
    echo_phase(&h, &e, 0, n1, n2 != 0);
    if (n2 != 0) {
        CHECK(h.nheld > 0, "nothing held across the restart");
        /* What the next task recovers: where the last reply ended, and the next seq. */
        SimplerQueue q;
        CHECK(simpler_queue_from_args(h.args, 0, &q) == 0, "reopen");
        CHECK(q.out_write == h.out_prev_end, "recovered w %llu, the last reply ended at %llu", (ull)q.out_write,
              (ull)h.out_prev_end);
        CHECK(q.out_seq == h.out_seq, "recovered seq %llu, want %llu", (ull)q.out_seq, (ull)h.out_seq);
        CHECK(q.in_head == h.in_tail && q.out_tail == (uint32_t)h.out_seq, "recovered counters");
        printf("%s_held_across_restart %u\n", name, h.nheld);
        echo_phase(&h, &e, n1, n2, 0);
    }
    host_release(&h, h.nheld);
    printf("%s_replies %llu\n%s_out_wraps %llu\n%s_in_wraps %llu\n%s_out_tail %u\n", name, (ull)(h.out_seq - start), name,
           (ull)h.out_wraps, name, (ull)h.in_wraps, name, cload(&h, 128));
    free(h.mem);
}

/* ---- modes ------------------------------------------------------------------------------- */

static void mode_probe(void) {
#define P(k, v) printf("%s %llu\n", k, (ull)(v))
    P("header_size", sizeof(SimplerQueueHeader));
    P("header_magic", offsetof(SimplerQueueHeader, magic));
    P("header_version", offsetof(SimplerQueueHeader, version));
    P("header_depth", offsetof(SimplerQueueHeader, depth));
    P("header_reserved", offsetof(SimplerQueueHeader, reserved));
    P("header_in_arena_bytes", offsetof(SimplerQueueHeader, in_arena_bytes));
    P("header_out_arena_bytes", offsetof(SimplerQueueHeader, out_arena_bytes));
    P("header_in_ring_offset", offsetof(SimplerQueueHeader, in_ring_offset));
    P("header_out_ring_offset", offsetof(SimplerQueueHeader, out_ring_offset));
    P("header_in_arena_offset", offsetof(SimplerQueueHeader, in_arena_offset));
    P("header_out_arena_offset", offsetof(SimplerQueueHeader, out_arena_offset));
    P("slot_size", sizeof(SimplerQueueSlot));
    P("slot_seq", offsetof(SimplerQueueSlot, seq));
    P("slot_opcode", offsetof(SimplerQueueSlot, opcode));
    P("slot_reserved", offsetof(SimplerQueueSlot, reserved));
    P("slot_payload_offset", offsetof(SimplerQueueSlot, payload_offset));
    P("slot_payload_nbytes", offsetof(SimplerQueueSlot, payload_nbytes));
    P("magic", SIMPLER_QUEUE_MAGIC);
    P("version", SIMPLER_QUEUE_VERSION);
    P("header_bytes", SIMPLER_QUEUE_HEADER_BYTES);
    P("slot_bytes", SIMPLER_QUEUE_SLOT_BYTES);
    P("align", SIMPLER_QUEUE_ALIGN);
    P("max_depth", SIMPLER_QUEUE_MAX_DEPTH);
    P("counter_bytes", SIMPLER_QUEUE_COUNTER_BYTES);
    P("in_tail", SIMPLER_QUEUE_IN_TAIL);
    P("in_head", SIMPLER_QUEUE_IN_HEAD);
    P("out_tail", SIMPLER_QUEUE_OUT_TAIL);
    P("out_head", SIMPLER_QUEUE_OUT_HEAD);
    P("host_abort", SIMPLER_QUEUE_HOST_ABORT);
    P("chip_abort", SIMPLER_QUEUE_CHIP_ABORT);
    P("op_data", SIMPLER_QUEUE_DATA);
    P("op_stop", SIMPLER_QUEUE_STOP);
    P("op_error", SIMPLER_QUEUE_ERROR);
    P("out_ring_offset_8", simpler_queue_out_ring_offset(8));
    P("in_arena_offset_8", simpler_queue_in_arena_offset(8));
    P("payload_bytes_8_1024_2048", simpler_queue_payload_bytes(8, 1024, 2048));
    P("payload_bytes_depth3", simpler_queue_payload_bytes(3, 1024, 1024));
    P("payload_bytes_depth0", simpler_queue_payload_bytes(0, 1024, 1024));
    P("payload_bytes_depth2p31", simpler_queue_payload_bytes(1u << 31, 1024, 1024));
    P("payload_bytes_depth2p30", simpler_queue_payload_bytes(1u << 30, 64, 64));
    P("payload_bytes_arena100", simpler_queue_payload_bytes(4, 100, 1024));
    P("payload_bytes_arena0", simpler_queue_payload_bytes(4, 1024, 0));
#undef P
}

static void mode_echo(void) {
    /* Depth 4, arenas just above the largest message: a restart with replies held. */
    echo_run("a", 4, 1280, 1216, 0, 600, 400);
    /* Depth 1, counters crossing 2^32. */
    echo_run("b", 1, 1216, 1216, 0xFFFFFF80u, 300, 0);
    /* Depth 8, counters crossing 2^32, a larger input arena, a restart after the crossing. */
    echo_run("c", 8, 4096, 1280, 0xFFFFFFFAu, 300, 100);
}

static void mode_stop(void) {
    static Host h;
    host_init(&h, 4, 1024, 1024, 0, 5000000);
    CHECK(host_try_send(&h, 2, NULL, 0), "send STOP");
    const uint64_t t0 = now_ms();
    kernel_start(&h);
    const int32_t code = kernel_join(&h);
    printf("stop_code %d\nstop_ms %llu\nstop_in_head %u\nstop_out_tail %u\nstop_chip_abort %u\n", code,
           (ull)(now_ms() - t0), cload(&h, 64), cload(&h, 128), cload(&h, 320));
    free(h.mem);
}

#define API(name, expr) printf("api_%s %d\n", name, (int)(expr))

static void mode_api(void) {
    static Host h;
    host_init(&h, 4, 1024, 1024, 0, 1000);
    SimplerQueue q, q2;
    uint32_t op = 0;
    const void *data = NULL;
    uint64_t n = 0;
    void *dst = NULL;
    static unsigned char big[2048];
    API("open", simpler_queue_from_args(h.args, 0, &q));
    API("open_null_queue", simpler_queue_open(NULL, &q.region));
    API("open_null_region", simpler_queue_open(&q2, NULL));
    API("from_args_null", simpler_queue_from_args(NULL, 0, &q2));
    API("peek_timeout0", simpler_queue_peek(&q, 0, &op, &data, &n, 0));
    API("peek_k_depth", simpler_queue_peek(&q, 4, &op, &data, &n, 1000));
    API("peek_empty", simpler_queue_peek(&q, 0, &op, &data, &n, 2000));
    API("release_empty", simpler_queue_release(&q, 1));
    API("release_zero", simpler_queue_release(&q, 0));
    API("send_stop", simpler_queue_send(&q, SIMPLER_QUEUE_STOP, NULL, 0, 1000));
    API("send_opcode0", simpler_queue_send(&q, 0, NULL, 0, 1000));
    API("send_too_big", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 1025, 1000));
    API("send_null_data", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, NULL, 4, 1000));
    API("send_timeout0", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 4, 0));
    API("reserve_null_dst", simpler_queue_reserve(&q, 4, NULL, 1000));
    API("commit_none", simpler_queue_commit(&q, SIMPLER_QUEUE_DATA));
    API("out_tail_untouched", cload(&h, 128));

    CHECK(host_try_send(&h, 1, "abcdefgh", 8) && host_try_send(&h, 3, "oops", 4), "host send");
    API("peek1", simpler_queue_peek(&q, 1, &op, &data, &n, 1000));
    API("peek1_opcode", op);
    API("peek1_nbytes", n);
    API("peek1_text", memcmp(data, "oops", 4) == 0);
    API("peek1_at", (const unsigned char *)data - h.in_arena);
    API("peek0", simpler_queue_peek(&q, 0, &op, &data, &n, 1000));
    API("peek0_opcode", op);
    API("peek0_nbytes", n);
    API("peek0_text", memcmp(data, "abcdefgh", 8) == 0);
    API("peek_null_outputs", simpler_queue_peek(&q, 0, NULL, NULL, NULL, 1000));
    API("peek2_timeout", simpler_queue_peek(&q, 2, &op, &data, &n, 1000));
    API("release3", simpler_queue_release(&q, 3));
    API("release2", simpler_queue_release(&q, 2));
    API("in_head", cload(&h, 64));

    /* Outputs: 100 bytes at 0, zero bytes at w = 128, 64 bytes reserved at 128. */
    API("send100", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 100, 1000));
    API("send0", simpler_queue_send(&q, SIMPLER_QUEUE_ERROR, NULL, 0, 1000));
    API("reserve64", simpler_queue_reserve(&q, 64, &dst, 1000));
    API("reserve64_at", (unsigned char *)dst - h.out_arena);
    API("commit_stop", simpler_queue_commit(&q, SIMPLER_QUEUE_STOP));
    API("commit", simpler_queue_commit(&q, SIMPLER_QUEUE_DATA));
    API("commit_again", simpler_queue_commit(&q, SIMPLER_QUEUE_DATA));
    API("out_tail3", cload(&h, 128));
    for (int i = 0; i < 3; ++i) {
        char k[32];
        snprintf(k, sizeof k, "slot%d_seq", i); API(k, h.out_ring[i].seq);
        snprintf(k, sizeof k, "slot%d_opcode", i); API(k, h.out_ring[i].opcode);
        snprintf(k, sizeof k, "slot%d_offset", i); API(k, h.out_ring[i].payload_offset);
        snprintf(k, sizeof k, "slot%d_nbytes", i); API(k, h.out_ring[i].payload_nbytes);
    }
    /* [0, 192) taken, w = 192: 1024 bytes fit nowhere; 832 fill the arena to its end. */
    API("send_no_room", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 1024, 1000));
    API("send832", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 832, 1000));
    API("slot3_offset", h.out_ring[3].payload_offset);
    API("send_no_slot", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, NULL, 0, 1000));
    /* The host releases message 0: the oldest with bytes is at 128, w = 1024, so 128 bytes
     * go to 0 and then w = 128 = the oldest's offset: full. */
    cstore(&h, 192, 1);
    API("send_wrap", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 128, 1000));
    API("slot4_offset", h.out_ring[0].payload_offset);
    cstore(&h, 192, 2); /* message 1 (zero bytes) goes: the oldest with bytes is still at 128 */
    API("send_full", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 64, 1000));
    cstore(&h, 192, 3); /* message 2 goes: the oldest with bytes is at 192, w = 128 */
    API("send_between", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 64, 1000));
    API("slot5_offset", h.out_ring[1].payload_offset);
    cstore(&h, 192, 6); /* everything released: the next message starts at 0 */
    API("send_empty", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 64, 1000));
    API("slot6_offset", h.out_ring[2].payload_offset);
    API("out_tail7", cload(&h, 128));
    /* Only a zero-byte message unreleased: it takes no room, so 64 bytes go at w = 0 (not
     * "w == its offset: full"). */
    cstore(&h, 192, 7);
    API("send_zero_alone", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, NULL, 0, 1000));
    API("slot7_offset", h.out_ring[3].payload_offset);
    API("send_after_zero", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 64, 1000));
    API("slot8_offset", h.out_ring[0].payload_offset);

    /* A new task on the same queue goes on where this one stopped. */
    API("reopen", simpler_queue_from_args(h.args, 0, &q2));
    API("reopen_out_seq", q2.out_seq);
    API("reopen_out_write", q2.out_write);
    API("reopen_in_head", q2.in_head);
    API("reopen_out_tail", q2.out_tail);

    /* Host abort: waits fail at once, even with input ready. */
    CHECK(host_try_send(&h, 1, "x", 1), "host send");
    cstore(&h, 256, 1);
    API("peek_aborted", simpler_queue_peek(&q, 0, &op, &data, &n, 1000000));
    API("send_aborted", simpler_queue_send(&q, SIMPLER_QUEUE_DATA, big, 4, 1000000));
    API("release_aborted", simpler_queue_release(&q, 1));
    simpler_queue_abort(&q);
    API("chip_abort", cload(&h, 320));
    SimplerQueue zero;
    memset(&zero, 0, sizeof zero);
    simpler_queue_abort(&zero);
    simpler_queue_abort(NULL);
    API("not_open_peek", simpler_queue_peek(&zero, 0, &op, &data, &n, 1000));
    API("not_open_send", simpler_queue_send(&zero, SIMPLER_QUEUE_DATA, big, 4, 1000));
    API("not_open_release", simpler_queue_release(&zero, 0));
    free(h.mem);
}

/* Waits (at most 5 s) until counter off of h holds v. */
static void await_counter(Host *h, uint32_t off, uint32_t v) {
    const uint64_t deadline = now_ms() + 5000;
    while (cload(h, off) != v) {
        CHECK(now_ms() < deadline, "counter %u stayed %u, want %u", off, cload(h, off), v);
        sleep_ms(1);
    }
}

/* The kernel waiting for input (peek), an output slot, or output arena room; then either
 * the host aborts after 50 ms (abort) or the kernel's 100 ms timeout runs out. */
static void waiting_case(const char *mode, const char *what, int abort_it) {
    static Host h;
    static unsigned char buf[1200];
    const uint64_t timeout_us = abort_it ? 30000000 : 100000;
    uint32_t want_tail = 0;
    const int slot = strcmp(what, "slot") == 0;
    if (slot) { /* two replies fill the output ring; the third input waits for a slot */
        host_init(&h, 2, 1024, 1024, 0, timeout_us);
        for (int i = 0; i < 2; ++i) CHECK(host_try_send(&h, 1, buf, 4), "send");
        want_tail = 2;
    } else if (strcmp(what, "room") == 0) { /* one 1200-byte reply fills the output arena */
        host_init(&h, 4, 2560, 1216, 0, timeout_us);
        for (int i = 0; i < 2; ++i) CHECK(host_try_send(&h, 1, buf, 1200), "send");
        want_tail = 1;
    } else {
        host_init(&h, 4, 1024, 1024, 0, timeout_us);
    }
    const uint64_t t0 = now_ms();
    kernel_start(&h);
    if (slot) {
        await_counter(&h, 64, 2);
        CHECK(host_try_send(&h, 1, buf, 4), "send");
    }
    await_counter(&h, 128, want_tail);
    uint64_t t1 = now_ms();
    if (abort_it) {
        sleep_ms(50);
        t1 = now_ms();
        cstore(&h, 256, 1);
    }
    const int32_t code = kernel_join(&h);
    const uint64_t t2 = now_ms();
    printf("%s_%s_code %d\n%s_%s_ms_after %llu\n%s_%s_ms_total %llu\n%s_%s_out_tail %u\n%s_%s_in_head %u\n"
           "%s_%s_chip_abort %u\n",
           mode, what, code, mode, what, (ull)(t2 - t1), mode, what, (ull)(t2 - t0), mode, what, cload(&h, 128), mode,
           what, cload(&h, 64), mode, what, cload(&h, 320));
    free(h.mem);
}

/* Broken headers, descriptors, counters and slots: the kernel fails with 122 (1000 for a
 * wrong argument count) without waiting. */
static void bad_case(int which) {
    static const char *names[] = {"magic", "version", "reserved", "depth3", "depth0", "depth2p31",
                                  "in_arena_unaligned", "out_arena_zero", "in_ring_offset", "out_ring_offset",
                                  "in_arena_offset", "out_arena_offset", "payload_short", "counter_short",
                                  "region_magic", "in_overfull", "out_overfull", "out_last_slot", "in_slot_seq",
                                  "in_slot_opcode", "in_slot_span", "data_odd", "arg_count", "payload_unaligned"};
    static Host h;
    host_init(&h, 4, 1024, 1024, 0, 2000000);
    SimplerQueueHeader *hd = h.hdr;
    SimplerQueueSlot *in = h.in_ring;
    switch (which) {
    case 0: hd->magic ^= 1; break;
    case 1: hd->version = 2; break;
    case 2: hd->reserved = 1; break;
    case 3: hd->depth = 3; hd->out_ring_offset = 64 + 96; hd->in_arena_offset = 64 + 192;
            hd->out_arena_offset = 64 + 192 + 1024; break;
    case 4: hd->depth = 0; hd->out_ring_offset = 64; hd->in_arena_offset = 64; hd->out_arena_offset = 64 + 1024; break;
    case 5: hd->depth = 1u << 31; hd->out_ring_offset = 64 + (32ull << 31); hd->in_arena_offset = 64 + (64ull << 31);
            hd->out_arena_offset = hd->in_arena_offset + 1024; break;
    case 6: hd->in_arena_bytes = 1000; hd->out_arena_offset = hd->in_arena_offset + 1000; break;
    case 7: hd->out_arena_bytes = 0; break;
    case 8: hd->in_ring_offset = 128; break;
    case 9: hd->out_ring_offset += 64; break;
    case 10: hd->in_arena_offset += 64; hd->out_arena_offset += 64; break;
    case 11: hd->out_arena_offset += 64; break;
    case 12: h.args[3] -= 64; break;
    case 13: h.args[5] = 320; break;
    case 14: h.args[0] ^= 1; break;
    case 15: cstore(&h, 0, 5); break;
    case 16: cstore(&h, 128, 5); break;
    case 17: h.out_ring[0].seq = 7; h.out_ring[0].opcode = 1; cstore(&h, 128, 1); break;
    case 18: in[0].seq = 5; in[0].opcode = 1; cstore(&h, 0, 1); break;
    case 19: in[0].opcode = 9; cstore(&h, 0, 1); break;
    case 20: in[0].opcode = 1; in[0].payload_offset = 960; in[0].payload_nbytes = 128; cstore(&h, 0, 1); break;
    case 21: CHECK(host_try_send(&h, 1, "abcdef", 6), "send"); break;
    case 22: h.args[SIMPLER_SCALAR_COUNT_SLOT] = 6; break;
    case 23: h.args[2] += 4; h.args[3] -= 4; break;
    default: FAIL("case");
    }
    const uint64_t t0 = now_ms();
    kernel_start(&h);
    const int32_t code = kernel_join(&h);
    printf("bad_%s %d %u %llu\n", names[which], code, cload(&h, 320), (ull)(now_ms() - t0));
    free(h.mem);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: queue_host MODE");
    const char *m = argv[1];
    if (strcmp(m, "probe") == 0) mode_probe();
    else if (strcmp(m, "echo") == 0) mode_echo();
    else if (strcmp(m, "stop") == 0) mode_stop();
    else if (strcmp(m, "api") == 0) mode_api();
    else if (strcmp(m, "abort") == 0 || strcmp(m, "timeout") == 0) {
        waiting_case(m, "peek", m[0] == 'a');
        waiting_case(m, "slot", m[0] == 'a');
        waiting_case(m, "room", m[0] == 'a');
    } else if (strcmp(m, "bad") == 0) {
        for (int i = 0; i < 24; ++i) bad_case(i);
    } else FAIL("unknown mode %s", m);
    return 0;
}
"##;

/// The host program, compiled once for all tests of this file.
fn host_exe() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let root = cc::root();
        let flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"];
        // The repository root on the include path too (for the example kernel); -lpthread,
        // not -pthread (which would define _REENTRANT and make POSIX visible).
        let extra = ["-I".as_ref(), root.as_os_str(), "-lpthread".as_ref()];
        cc::compile("queue_host", HOST, &flags, &extra)
    })
}

/// Runs the host program in `mode`: key -> the numbers printed after it.
fn run(mode: &str) -> BTreeMap<String, Vec<i64>> {
    let out = Command::new(host_exe())
        .arg(mode)
        .output()
        .expect("run queue_host");
    assert!(
        out.status.success(),
        "queue_host {mode} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let key = words.next().unwrap().to_string();
            let values = words.map(|w| w.parse().unwrap()).collect();
            (key, values)
        })
        .collect()
}

/// The single number printed after `key`.
fn one(map: &BTreeMap<String, Vec<i64>>, key: &str) -> i64 {
    match map.get(key).map(Vec::as_slice) {
        Some([v]) => *v,
        other => panic!("{key}: {other:?}"),
    }
}

/// §8 of docs/comm.md, from its heading to the next one.
fn comm_doc_section_8() -> String {
    let path = cc::root().join("docs/comm.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = doc.find("## 8. ").expect("docs/comm.md has a §8");
    let rest = &doc[start..];
    let end = rest[6..].find("\n## ").map_or(rest.len(), |e| e + 6);
    rest[..end].to_string()
}

#[test]
fn layout_matches_docs_comm_section_8() {
    let p = run("probe");
    let doc = comm_doc_section_8();
    // Header: u32 magic, u32 version, u32 depth, u32 0, then six u64.
    let header = [
        ("header_size", 64),
        ("header_magic", 0),
        ("header_version", 4),
        ("header_depth", 8),
        ("header_reserved", 12),
        ("header_in_arena_bytes", 16),
        ("header_out_arena_bytes", 24),
        ("header_in_ring_offset", 32),
        ("header_out_ring_offset", 40),
        ("header_in_arena_offset", 48),
        ("header_out_arena_offset", 56),
        ("slot_size", 32),
        ("slot_seq", 0),
        ("slot_opcode", 8),
        ("slot_reserved", 12),
        ("slot_payload_offset", 16),
        ("slot_payload_nbytes", 24),
        ("magic", 0x4555_5153),
        ("version", 1),
        ("header_bytes", 64),
        ("slot_bytes", 32),
        ("align", 64),
        ("max_depth", 1 << 30),
        ("counter_bytes", 384),
        ("in_tail", 0),
        ("in_head", 64),
        ("out_tail", 128),
        ("out_head", 192),
        ("host_abort", 256),
        ("chip_abort", 320),
        ("op_data", 1),
        ("op_stop", 2),
        ("op_error", 3),
        ("out_ring_offset_8", 64 + 32 * 8),
        ("in_arena_offset_8", 64 + 64 * 8),
        ("payload_bytes_8_1024_2048", 64 + 64 * 8 + 1024 + 2048),
        ("payload_bytes_depth3", 0),
        ("payload_bytes_depth0", 0),
        ("payload_bytes_depth2p31", 0),
        ("payload_bytes_depth2p30", 64 + (64 << 30) + 128),
        ("payload_bytes_arena100", 0),
        ("payload_bytes_arena0", 0),
    ];
    for (k, want) in header {
        assert_eq!(one(&p, k), want, "{k}");
    }
    // The same numbers as §8 states them.
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    for phrase in [
        "u32 magic `0x45555153` (`SQUE`), u32 version 1, u32 depth, u32 0, u64 in_arena_bytes, \
         u64 out_arena_bytes, u64 in_ring_offset (64), u64 out_ring_offset (64 + 32·depth), u64 \
         in_arena_offset (64 + 64·depth), u64 out_arena_offset (in_arena_offset + in_arena_bytes)",
        "header, 64 bytes",
        "`depth` slots of 32 bytes",
        "`{u64 seq, u32 opcode, u32 0, u64 payload_offset, u64 payload_nbytes}`",
        "`DATA` 1, `STOP` 2",
        "`ERROR` 3",
        "`counter_bytes` = 384",
        "1 ≤ depth ≤ 2³⁰",
        "positive multiple of 64 bytes",
        "rounded up to 64",
    ] {
        assert!(
            flat.contains(phrase),
            "docs/comm.md §8 no longer says: {phrase}"
        );
    }
    for (offset, name) in [
        (0, "input tail"),
        (64, "input head"),
        (128, "output tail"),
        (192, "output head"),
        (256, "host abort"),
        (320, "chip abort"),
    ] {
        let key = name
            .replace(' ', "_")
            .replace("input", "in")
            .replace("output", "out");
        assert_eq!(one(&p, &key), offset, "{name}");
        assert!(
            flat.contains(&format!("{offset} {name}")),
            "docs/comm.md §8 puts the {name} counter elsewhere than {offset}"
        );
    }
}

#[test]
fn echo_thousand_messages_with_wrapping_arenas_and_a_restart() {
    let e = run("echo");
    assert_eq!(one(&e, "a_replies"), 1000);
    assert!(one(&e, "a_held_across_restart") >= 1);
    assert_eq!(one(&e, "a_out_tail"), 1000);
    // With arenas barely above the largest message, both arenas wrap again and again.
    assert!(one(&e, "a_out_wraps") > 50, "{e:?}");
    assert!(one(&e, "a_in_wraps") > 20, "{e:?}");
    assert_eq!(one(&e, "b_replies"), 300);
    assert_eq!(
        one(&e, "b_out_tail"),
        i64::from(0xFFFF_FF80u32.wrapping_add(300))
    );
    assert_eq!(one(&e, "c_replies"), 400);
    assert!(one(&e, "c_held_across_restart") >= 1);
    assert_eq!(
        one(&e, "c_out_tail"),
        i64::from(0xFFFF_FFFAu32.wrapping_add(400))
    );
}

#[test]
fn stop_ends_the_kernel() {
    let s = run("stop");
    assert_eq!(one(&s, "stop_code"), 0);
    assert_eq!(one(&s, "stop_in_head"), 1, "STOP is released");
    assert_eq!(one(&s, "stop_out_tail"), 0, "STOP has no reply");
    assert_eq!(one(&s, "stop_chip_abort"), 0);
    assert!(one(&s, "stop_ms") < 2000);
}

#[test]
fn host_abort_fails_a_waiting_kernel_promptly() {
    let a = run("abort");
    for (what, out_tail, in_head) in [("peek", 0, 0), ("slot", 2, 2), ("room", 1, 1)] {
        assert_eq!(one(&a, &format!("abort_{what}_code")), 121, "{what}");
        // The kernel's own timeout is 30 s; the abort ends it at its next poll.
        assert!(
            one(&a, &format!("abort_{what}_ms_after")) < 2000,
            "{what}: {a:?}"
        );
        assert_eq!(
            one(&a, &format!("abort_{what}_out_tail")),
            out_tail,
            "{what}"
        );
        assert_eq!(one(&a, &format!("abort_{what}_in_head")), in_head, "{what}");
        assert_eq!(one(&a, &format!("abort_{what}_chip_abort")), 1, "{what}");
    }
}

#[test]
fn a_silent_host_makes_the_kernel_time_out() {
    let t = run("timeout");
    for (what, out_tail) in [("peek", 0), ("slot", 2), ("room", 1)] {
        assert_eq!(one(&t, &format!("timeout_{what}_code")), 120, "{what}");
        let ms = one(&t, &format!("timeout_{what}_ms_total"));
        assert!((100..3000).contains(&ms), "{what}: timed out after {ms} ms");
        assert_eq!(
            one(&t, &format!("timeout_{what}_out_tail")),
            out_tail,
            "{what}"
        );
        assert_eq!(one(&t, &format!("timeout_{what}_chip_abort")), 1, "{what}");
    }
}

#[test]
fn bad_headers_descriptors_and_slots_fail_with_bad_argument() {
    let b = run("bad");
    assert_eq!(b.len(), 24, "{b:?}");
    for (name, v) in &b {
        let (code, chip_abort, ms) = (v[0], v[1], v[2]);
        let (want_code, want_abort) = match name.as_str() {
            // The counters cannot be trusted: the kernel leaves them alone.
            "bad_counter_short" | "bad_region_magic" | "bad_payload_unaligned" => (122, 0),
            // simpler_expect_args: 1000 + tensors, before the queue is opened.
            "bad_arg_count" => (1000, 0),
            _ => (122, 1),
        };
        assert_eq!(code, want_code, "{name}");
        assert_eq!(chip_abort, want_abort, "{name}: chip abort");
        assert!(ms < 1000, "{name}: failed only after {ms} ms");
    }
}

#[test]
fn api_arguments_cursors_and_arena_placement() {
    let a = run("api");
    let ok = 0;
    let (timeout, aborted, bad) = (120, 121, 122);
    let want: &[(&str, i64)] = &[
        ("open", ok),
        ("open_null_queue", bad),
        ("open_null_region", bad),
        ("from_args_null", bad),
        ("peek_timeout0", bad),
        ("peek_k_depth", bad),
        ("peek_empty", timeout),
        ("release_empty", bad),
        ("release_zero", ok),
        ("send_stop", bad),
        ("send_opcode0", bad),
        ("send_too_big", bad),
        ("send_null_data", bad),
        ("send_timeout0", bad),
        ("reserve_null_dst", bad),
        ("commit_none", bad),
        ("out_tail_untouched", 0),
        ("peek1", ok),
        ("peek1_opcode", 3),
        ("peek1_nbytes", 4),
        ("peek1_text", 1),
        ("peek1_at", 64),
        ("peek0", ok),
        ("peek0_opcode", 1),
        ("peek0_nbytes", 8),
        ("peek0_text", 1),
        ("peek_null_outputs", ok),
        ("peek2_timeout", timeout),
        ("release3", bad),
        ("release2", ok),
        ("in_head", 2),
        ("send100", ok),
        ("send0", ok),
        ("reserve64", ok),
        ("reserve64_at", 128),
        ("commit_stop", bad),
        ("commit", ok),
        ("commit_again", bad),
        ("out_tail3", 3),
        ("slot0_seq", 0),
        ("slot0_opcode", 1),
        ("slot0_offset", 0),
        ("slot0_nbytes", 100),
        ("slot1_seq", 1),
        ("slot1_opcode", 3),
        ("slot1_offset", 128),
        ("slot1_nbytes", 0),
        ("slot2_seq", 2),
        ("slot2_opcode", 1),
        ("slot2_offset", 128),
        ("slot2_nbytes", 64),
        ("send_no_room", timeout),
        ("send832", ok),
        ("slot3_offset", 192),
        ("send_no_slot", timeout),
        ("send_wrap", ok),
        ("slot4_offset", 0),
        ("send_full", timeout),
        ("send_between", ok),
        ("slot5_offset", 128),
        ("send_empty", ok),
        ("slot6_offset", 0),
        ("out_tail7", 7),
        ("send_zero_alone", ok),
        ("slot7_offset", 0),
        ("send_after_zero", ok),
        ("slot8_offset", 0),
        ("reopen", ok),
        ("reopen_out_seq", 9),
        ("reopen_out_write", 64),
        ("reopen_in_head", 2),
        ("reopen_out_tail", 9),
        ("peek_aborted", aborted),
        ("send_aborted", aborted),
        ("release_aborted", ok),
        ("chip_abort", 1),
        ("not_open_peek", bad),
        ("not_open_send", bad),
        ("not_open_release", bad),
    ];
    for (k, v) in want {
        assert_eq!(one(&a, &format!("api_{k}")), *v, "{k}");
    }
    assert_eq!(a.len(), want.len(), "{a:?}");
}
