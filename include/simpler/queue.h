/*
 * simpler/queue.h — the chip side of an L3<->L2 message queue: two single-producer
 * single-consumer queues on one region (simpler/region.h), input (host -> chip) and output
 * (chip -> host), laid out exactly as docs/comm.md §8 says. The host side is
 * WorkerChipQueue (crates/simpler-worker/src/queue.rs); both follow that layout.
 *
 * Payload (offsets from payload_base; depth a power of two, 1 <= depth <= 2^30; each arena a
 * positive multiple of 64 bytes):
 *
 *     0                          SimplerQueueHeader (64 bytes, written by the host)
 *     64                         input ring: depth SimplerQueueSlots of 32 bytes
 *     64 + 32 * depth            output ring: depth slots
 *     64 + 64 * depth            input arena (in_arena_bytes)
 *     + in_arena_bytes           output arena (out_arena_bytes)
 *
 * Counters (u32, wrapping, one 64-byte line each; counter_bytes >= 384): 0 input tail (the
 * host's), 64 input head (this chip's), 128 output tail (this chip's), 192 output head (the
 * host's), 256 host abort, 320 chip abort.
 *
 * Message number seq (counted from 0 per direction) lives in slot seq mod depth; its bytes
 * at slot.payload_offset of its direction's arena. A producer writes the bytes, then the
 * slot, then sets its tail to tail + 1 (release). Arena bytes are a ring without wrap
 * splitting: a message takes its size rounded up to 64 from the write offset w (the end of
 * the previous message; 0 before the first and whenever the queue is empty), or from 0
 * when it does not fit before the arena's end; zero-byte messages take no room (they sit at
 * w). A consumer waits until tail - head > k to look at its k-th unreleased message and
 * releases a FIFO prefix by setting head = head + n.
 *
 * Use from a kernel (submitted with require_sync_start, since it waits; see comm.h):
 *
 *     SimplerQueue q;
 *     int32_t rc = simpler_queue_from_args(args, 0, &q);        six descriptor words
 *     rc = simpler_queue_peek(&q, 0, &op, &data, &n, timeout_us);  input 0, waits
 *     rc = simpler_queue_send(&q, SIMPLER_QUEUE_DATA, reply, bytes, timeout_us);
 *     rc = simpler_queue_release(&q, 1);                          input 0 is done
 *     on an error: simpler_queue_abort(&q); simpler_comm_fail(args, rc);
 *
 * (simpler_queue_reserve + simpler_queue_commit write an output in place, without a copy.)
 *
 * Every call returns SIMPLER_COMM_OK or a kernel fatal code: SIMPLER_COMM_WAIT_TIMEOUT (a
 * wait did not end within its timeout), SIMPLER_COMM_PEER_FAILED (the host abort counter is
 * non-zero: checked first on every waiting call, so a freed queue fails at once),
 * SIMPLER_COMM_BAD_ARGUMENT (bad arguments, a timeout of 0, or a header, counter or slot
 * that breaks the layout). Strict C11; includes simpler/region.h.
 */
#ifndef SIMPLER_QUEUE_H
#define SIMPLER_QUEUE_H

#include "simpler/region.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layout -------------------------------------------------------------------------- */

#define SIMPLER_QUEUE_MAGIC 0x45555153u /* "SQUE" little-endian */
#define SIMPLER_QUEUE_VERSION 1u
#define SIMPLER_QUEUE_HEADER_BYTES 64u
#define SIMPLER_QUEUE_SLOT_BYTES 32u
#define SIMPLER_QUEUE_ALIGN 64u           /* arena sizes are multiples; messages round up to it */
#define SIMPLER_QUEUE_MAX_DEPTH (1u << 30)
#define SIMPLER_QUEUE_COUNTER_BYTES 384u  /* counter bytes the queue uses (at least) */

/* Counter byte offsets (u32 counters, one 64-byte line each). */
#define SIMPLER_QUEUE_IN_TAIL 0u     /* input messages the host produced */
#define SIMPLER_QUEUE_IN_HEAD 64u    /* input messages this chip released */
#define SIMPLER_QUEUE_OUT_TAIL 128u  /* output messages this chip produced */
#define SIMPLER_QUEUE_OUT_HEAD 192u  /* output messages the host released */
#define SIMPLER_QUEUE_HOST_ABORT 256u /* non-zero: the host gave up (or freed the queue) */
#define SIMPLER_QUEUE_CHIP_ABORT 320u /* non-zero: this chip gave up */

/* Opcodes. */
#define SIMPLER_QUEUE_DATA 1u  /* a message */
#define SIMPLER_QUEUE_STOP 2u  /* input only: the chip's loop ends */
#define SIMPLER_QUEUE_ERROR 3u /* either direction; the payload is a message text */

/* The header at payload offset 0, 64 bytes, written by the host before the chip task runs. */
typedef struct SimplerQueueHeader {
    uint32_t magic;            /* SIMPLER_QUEUE_MAGIC */
    uint32_t version;          /* SIMPLER_QUEUE_VERSION */
    uint32_t depth;            /* slots per ring: a power of two, 1..2^30 */
    uint32_t reserved;         /* 0 */
    uint64_t in_arena_bytes;   /* a positive multiple of 64 */
    uint64_t out_arena_bytes;  /* a positive multiple of 64 */
    uint64_t in_ring_offset;   /* 64 */
    uint64_t out_ring_offset;  /* 64 + 32 * depth */
    uint64_t in_arena_offset;  /* 64 + 64 * depth */
    uint64_t out_arena_offset; /* in_arena_offset + in_arena_bytes */
} SimplerQueueHeader;
_Static_assert(sizeof(SimplerQueueHeader) == 64, "QueueHeader is 64 bytes");
_Static_assert(offsetof(SimplerQueueHeader, version) == 4, "QueueHeader.version");
_Static_assert(offsetof(SimplerQueueHeader, depth) == 8, "QueueHeader.depth");
_Static_assert(offsetof(SimplerQueueHeader, reserved) == 12, "QueueHeader.reserved");
_Static_assert(offsetof(SimplerQueueHeader, in_arena_bytes) == 16, "QueueHeader.in_arena_bytes");
_Static_assert(offsetof(SimplerQueueHeader, out_arena_bytes) == 24, "QueueHeader.out_arena_bytes");
_Static_assert(offsetof(SimplerQueueHeader, in_ring_offset) == 32, "QueueHeader.in_ring_offset");
_Static_assert(offsetof(SimplerQueueHeader, out_ring_offset) == 40, "QueueHeader.out_ring_offset");
_Static_assert(offsetof(SimplerQueueHeader, in_arena_offset) == 48, "QueueHeader.in_arena_offset");
_Static_assert(offsetof(SimplerQueueHeader, out_arena_offset) == 56, "QueueHeader.out_arena_offset");

/* One ring slot, 32 bytes: message `seq` of its direction. */
typedef struct SimplerQueueSlot {
    uint64_t seq;            /* message number, from 0 per direction; its low 32 bits = the tail then */
    uint32_t opcode;         /* SIMPLER_QUEUE_DATA / STOP / ERROR */
    uint32_t reserved;       /* 0 */
    uint64_t payload_offset; /* byte offset of the message in its direction's arena */
    uint64_t payload_nbytes; /* bytes of the message */
} SimplerQueueSlot;
_Static_assert(sizeof(SimplerQueueSlot) == 32, "QueueSlot is 32 bytes");
_Static_assert(offsetof(SimplerQueueSlot, opcode) == 8, "QueueSlot.opcode");
_Static_assert(offsetof(SimplerQueueSlot, reserved) == 12, "QueueSlot.reserved");
_Static_assert(offsetof(SimplerQueueSlot, payload_offset) == 16, "QueueSlot.payload_offset");
_Static_assert(offsetof(SimplerQueueSlot, payload_nbytes) == 24, "QueueSlot.payload_nbytes");

/* ---- layout arithmetic (0 when out of range) ------------------------------------------- */

/* Payload offset of the output ring for `depth` slots. */
static inline uint64_t simpler_queue_out_ring_offset(uint32_t depth) {
    return SIMPLER_QUEUE_HEADER_BYTES + (uint64_t)SIMPLER_QUEUE_SLOT_BYTES * depth;
}
/* Payload offset of the input arena for `depth` slots. */
static inline uint64_t simpler_queue_in_arena_offset(uint32_t depth) {
    return SIMPLER_QUEUE_HEADER_BYTES + 2u * (uint64_t)SIMPLER_QUEUE_SLOT_BYTES * depth;
}
/* Payload bytes a queue of `depth` slots and these arenas needs (header, rings, arenas);
 * 0 when depth is not a power of two in 1..2^30, an arena is not a positive multiple of 64,
 * or the sum overflows. */
static inline uint64_t simpler_queue_payload_bytes(uint32_t depth, uint64_t in_arena_bytes, uint64_t out_arena_bytes) {
    if (depth == 0 || depth > SIMPLER_QUEUE_MAX_DEPTH || (depth & (depth - 1u)) != 0) return 0;
    if (in_arena_bytes == 0 || in_arena_bytes % SIMPLER_QUEUE_ALIGN != 0 || out_arena_bytes == 0 ||
        out_arena_bytes % SIMPLER_QUEUE_ALIGN != 0)
        return 0;
    const uint64_t rings = simpler_queue_in_arena_offset(depth);
    if (in_arena_bytes > UINT64_MAX - rings || out_arena_bytes > UINT64_MAX - rings - in_arena_bytes) return 0;
    return rings + in_arena_bytes + out_arena_bytes;
}

/* Internal: n rounded up to a multiple of 64 (n <= an arena size, so no overflow). */
static inline uint64_t simpler_queue_priv_round(uint64_t n) {
    return (n + SIMPLER_QUEUE_ALIGN - 1u) / SIMPLER_QUEUE_ALIGN * SIMPLER_QUEUE_ALIGN;
}

/* ---- the chip's view --------------------------------------------------------------------- */

/*
 * A chip task's view of one queue, filled by simpler_queue_open: the region, the header's
 * numbers, where the rings and arenas are, and this side's cursors (recovered from the
 * counters and the last output slot, so a new task on the same queue goes on where the
 * last one stopped). Local to the task; not shared memory.
 */
typedef struct SimplerQueue {
    SimplerRegion region;
    uint32_t *counters;          /* the region's counter area; NULL until the region checked out */
    SimplerQueueSlot *in_ring;   /* depth slots, written by the host */
    SimplerQueueSlot *out_ring;  /* depth slots, written by this chip */
    unsigned char *in_arena;
    unsigned char *out_arena;
    uint64_t in_arena_bytes;
    uint64_t out_arena_bytes;
    uint32_t depth;
    uint32_t in_head;            /* input messages released (this chip's IN_HEAD counter) */
    uint32_t in_avail;           /* unreleased inputs known to be there: tail - head last seen */
    uint32_t out_tail;           /* output messages produced (this chip's OUT_TAIL counter) */
    uint64_t out_seq;            /* seq of the next output message */
    uint64_t out_write;          /* w: where the previous output message ended in the output arena */
    uint64_t res_offset;         /* the reservation (simpler_queue_reserve): arena offset */
    uint64_t res_nbytes;         /* and bytes */
    int32_t res_pending;         /* 1 while a reservation waits for simpler_queue_commit */
    int32_t is_open;             /* 1 after a successful simpler_queue_open */
} SimplerQueue;

/* Internal: counter `offset` of an opened (or half-opened) queue. */
static inline uint32_t *simpler_queue_priv_counter(const SimplerQueue *q, uint32_t offset) {
    return q->counters + offset / 4u;
}
static inline uint32_t simpler_queue_priv_load(const SimplerQueue *q, uint32_t offset) {
    return __atomic_load_n(simpler_queue_priv_counter(q, offset), __ATOMIC_ACQUIRE);
}
static inline void simpler_queue_priv_store(const SimplerQueue *q, uint32_t offset, uint32_t value) {
    __atomic_store_n(simpler_queue_priv_counter(q, offset), value, __ATOMIC_RELEASE);
}

/*
 * Opens the queue on region *r: checks the region (counter_bytes >= 384, payload 8-byte
 * aligned) and the header (magic, version, reserved 0, depth a power of two in 1..2^30,
 * arenas positive multiples of 64, the four offsets exactly as the layout says, everything
 * inside payload_bytes), and that neither ring holds more than depth messages; then
 * recovers the cursors: input head from its counter; output tail from its counter, the
 * next output seq from the last output slot (its seq + 1 when its low 32 bits are tail - 1,
 * else tail), and w from that slot's end (0 when the output queue is empty).
 * Returns SIMPLER_COMM_OK or SIMPLER_COMM_BAD_ARGUMENT. Once the region itself checked out,
 * simpler_queue_abort works on *q even when the header did not.
 */
static inline int32_t simpler_queue_open(SimplerQueue *q, const SimplerRegion *r) {
    if (q == NULL) return SIMPLER_COMM_BAD_ARGUMENT;
    memset(q, 0, sizeof *q);
    if (r == NULL || r->magic_version != SIMPLER_REGION_MAGIC_VERSION || r->region_id == 0 || r->payload_base == 0 ||
        (r->payload_base % 8u) != 0 || r->counter_base == 0 || (r->counter_base % SIMPLER_REGION_LINE_BYTES) != 0 ||
        r->counter_bytes < SIMPLER_QUEUE_COUNTER_BYTES || (r->counter_bytes % 4u) != 0)
        return SIMPLER_COMM_BAD_ARGUMENT;
    q->region = *r;
    q->counters = (uint32_t *)(uintptr_t)r->counter_base;
    const SimplerQueueHeader *h = (const SimplerQueueHeader *)simpler_region_payload(r, 0, sizeof(SimplerQueueHeader));
    if (h == NULL || h->magic != SIMPLER_QUEUE_MAGIC || h->version != SIMPLER_QUEUE_VERSION || h->reserved != 0)
        return SIMPLER_COMM_BAD_ARGUMENT;
    const uint32_t depth = h->depth;
    const uint64_t need = simpler_queue_payload_bytes(depth, h->in_arena_bytes, h->out_arena_bytes);
    if (need == 0 || need > r->payload_bytes || h->in_ring_offset != SIMPLER_QUEUE_HEADER_BYTES ||
        h->out_ring_offset != simpler_queue_out_ring_offset(depth) ||
        h->in_arena_offset != simpler_queue_in_arena_offset(depth) ||
        h->out_arena_offset != h->in_arena_offset + h->in_arena_bytes)
        return SIMPLER_COMM_BAD_ARGUMENT;
    const unsigned char *base = (const unsigned char *)(uintptr_t)r->payload_base;
    SimplerQueueSlot *in_ring = (SimplerQueueSlot *)(uintptr_t)(base + h->in_ring_offset);
    SimplerQueueSlot *out_ring = (SimplerQueueSlot *)(uintptr_t)(base + h->out_ring_offset);
    const uint64_t out_arena_bytes = h->out_arena_bytes;

    const uint32_t in_tail = simpler_queue_priv_load(q, SIMPLER_QUEUE_IN_TAIL);
    const uint32_t in_head = simpler_queue_priv_load(q, SIMPLER_QUEUE_IN_HEAD);
    const uint32_t out_tail = simpler_queue_priv_load(q, SIMPLER_QUEUE_OUT_TAIL);
    const uint32_t out_head = simpler_queue_priv_load(q, SIMPLER_QUEUE_OUT_HEAD);
    if ((uint32_t)(in_tail - in_head) > depth || (uint32_t)(out_tail - out_head) > depth) return SIMPLER_COMM_BAD_ARGUMENT;

    const SimplerQueueSlot *last = &out_ring[(out_tail - 1u) & (depth - 1u)];
    const int last_is_ours = (uint32_t)last->seq == (uint32_t)(out_tail - 1u);
    uint64_t w = 0;
    if (out_tail != out_head) {
        /* Unreleased outputs: the last slot must be the chip's message out_tail - 1. */
        if (!last_is_ours || last->payload_offset % SIMPLER_QUEUE_ALIGN != 0 || last->payload_offset > out_arena_bytes ||
            last->payload_nbytes > out_arena_bytes - last->payload_offset)
            return SIMPLER_COMM_BAD_ARGUMENT;
        w = last->payload_offset + simpler_queue_priv_round(last->payload_nbytes);
    }
    q->in_ring = in_ring;
    q->out_ring = out_ring;
    q->in_arena = (unsigned char *)(uintptr_t)(base + h->in_arena_offset);
    q->out_arena = (unsigned char *)(uintptr_t)(base + h->out_arena_offset);
    q->in_arena_bytes = h->in_arena_bytes;
    q->out_arena_bytes = out_arena_bytes;
    q->depth = depth;
    q->in_head = in_head;
    q->in_avail = 0;
    q->out_tail = out_tail;
    q->out_seq = last_is_ours ? last->seq + 1u : (uint64_t)out_tail;
    q->out_write = w;
    q->is_open = 1;
    return SIMPLER_COMM_OK;
}

/* The queue whose region descriptor is a kernel's scalars at argument slots [slot, slot + 6):
 * simpler_region_from_args, then simpler_queue_open. */
static inline int32_t simpler_queue_from_args(int64_t *args, int slot, SimplerQueue *q) {
    if (args == NULL || q == NULL || slot < 0) return SIMPLER_COMM_BAD_ARGUMENT;
    SimplerRegion r;
    memset(q, 0, sizeof *q);
    const int32_t rc = simpler_region_from_args(args, slot, &r);
    return rc != SIMPLER_COMM_OK ? rc : simpler_queue_open(q, &r);
}

/* Sets the chip abort counter (release): the host's waits on this queue fail at once. A
 * no-op for NULL or a queue whose region did not check out. */
static inline void simpler_queue_abort(SimplerQueue *q) {
    if (q != NULL && q->counters != NULL) simpler_queue_priv_store(q, SIMPLER_QUEUE_CHIP_ABORT, 1u);
}

/* Whether the host abort counter is non-zero now. */
static inline int simpler_queue_host_aborted(const SimplerQueue *q) {
    return q != NULL && q->counters != NULL && simpler_queue_priv_load(q, SIMPLER_QUEUE_HOST_ABORT) != 0;
}

/* ---- input (host -> chip) -------------------------------------------------------------- */

/*
 * The k-th unreleased input message (k = 0 the oldest), waiting at most timeout_us (> 0)
 * until the host produced it (input tail - head > k). On SIMPLER_COMM_OK fills what is not
 * NULL of *opcode (DATA, STOP or ERROR), *data (its bytes in the input arena, valid until
 * it is released) and *nbytes. Returns SIMPLER_COMM_PEER_FAILED (host abort),
 * SIMPLER_COMM_WAIT_TIMEOUT, or SIMPLER_COMM_BAD_ARGUMENT (queue not open, k >= depth, a
 * timeout of 0, more than depth messages in the ring, or a slot whose seq, opcode or span
 * is wrong).
 */
static inline int32_t simpler_queue_peek(SimplerQueue *q, uint32_t k, uint32_t *opcode, const void **data, uint64_t *nbytes,
                                         uint64_t timeout_us) {
    if (q == NULL || !q->is_open || k >= q->depth || timeout_us == 0) return SIMPLER_COMM_BAD_ARGUMENT;
    const uint64_t deadline = simpler_comm_priv_deadline(timeout_us);
    for (uint32_t polls = 0;; polls += polls < UINT32_MAX) {
        if (simpler_queue_host_aborted(q)) return SIMPLER_COMM_PEER_FAILED;
        if (k < q->in_avail) break;
        const uint32_t avail = simpler_queue_priv_load(q, SIMPLER_QUEUE_IN_TAIL) - q->in_head;
        if (avail > q->depth) return SIMPLER_COMM_BAD_ARGUMENT;
        q->in_avail = avail;
        if (k < avail) break;
        if (simpler_comm_priv_now_ns() >= deadline) return SIMPLER_COMM_WAIT_TIMEOUT;
        simpler_comm_priv_backoff(polls);
    }
    const uint32_t seq = q->in_head + k;
    const SimplerQueueSlot *s = &q->in_ring[seq & (q->depth - 1u)];
    const uint32_t op = s->opcode;
    const uint64_t off = s->payload_offset, n = s->payload_nbytes;
    if ((uint32_t)s->seq != seq || (op != SIMPLER_QUEUE_DATA && op != SIMPLER_QUEUE_STOP && op != SIMPLER_QUEUE_ERROR) ||
        off > q->in_arena_bytes || n > q->in_arena_bytes - off)
        return SIMPLER_COMM_BAD_ARGUMENT;
    if (opcode != NULL) *opcode = op;
    if (data != NULL) *data = q->in_arena + off;
    if (nbytes != NULL) *nbytes = n;
    return SIMPLER_COMM_OK;
}

/*
 * Releases the n oldest unreleased input messages (a FIFO prefix; n = 0 does nothing): sets
 * the input head counter to head + n (release), after which the host may reuse their slots
 * and bytes (pointers from simpler_queue_peek to them are dead). Does not wait. Returns
 * SIMPLER_COMM_OK, or SIMPLER_COMM_BAD_ARGUMENT (queue not open, n more than the host has
 * produced and this chip not yet released).
 */
static inline int32_t simpler_queue_release(SimplerQueue *q, uint32_t n) {
    if (q == NULL || !q->is_open) return SIMPLER_COMM_BAD_ARGUMENT;
    if (n > q->in_avail) {
        const uint32_t avail = simpler_queue_priv_load(q, SIMPLER_QUEUE_IN_TAIL) - q->in_head;
        if (avail > q->depth) return SIMPLER_COMM_BAD_ARGUMENT;
        q->in_avail = avail;
        if (n > avail) return SIMPLER_COMM_BAD_ARGUMENT;
    }
    if (n == 0) return SIMPLER_COMM_OK;
    q->in_head += n;
    q->in_avail -= n;
    simpler_queue_priv_store(q, SIMPLER_QUEUE_IN_HEAD, q->in_head);
    return SIMPLER_COMM_OK;
}

/* ---- output (chip -> host) ------------------------------------------------------------- */

/*
 * Internal: where an output message of s bytes (rounded, 0 allowed) goes when `used` (< depth)
 * messages from seq tail - used are unreleased; 1 and *at when it fits now, else 0. Empty
 * queue: at 0. Zero bytes: at w. Otherwise o is the offset of the oldest unreleased message
 * with bytes (none: everything is free); occupied runs from o to w, around the ring when
 * w <= o (w == o with such a message means full): at w if it fits before the arena's end
 * (and, when wrapped, before o), else at 0 if it fits before o.
 */
static inline int simpler_queue_priv_place(const SimplerQueue *q, uint32_t used, uint64_t s, uint64_t *at) {
    const uint64_t a = q->out_arena_bytes, w = q->out_write;
    if (used == 0) {
        *at = 0;
        return 1;
    }
    if (s == 0) {
        *at = w;
        return 1;
    }
    const uint32_t mask = q->depth - 1u;
    uint32_t i = 0;
    for (; i < used && q->out_ring[(q->out_tail - used + i) & mask].payload_nbytes == 0; ++i) {}
    if (i == used) { /* only zero-byte messages are unreleased */
        *at = w + s <= a ? w : 0;
        return 1;
    }
    const uint64_t o = q->out_ring[(q->out_tail - used + i) & mask].payload_offset;
    if (w > o) {
        if (w + s <= a) *at = w;
        else if (s <= o) *at = 0;
        else return 0;
        return 1;
    }
    if (w < o && w + s <= o) {
        *at = w;
        return 1;
    }
    return 0;
}

/*
 * Reserves room for an output message of nbytes (<= the output arena): waits at most
 * timeout_us (> 0) until the output ring has a free slot (tail - head < depth) and the
 * arena room (§8's rule, from the output head and the oldest unreleased output slot), then
 * sets *dst to where the bytes go in the output arena (nothing is published yet). Write
 * them, then call simpler_queue_commit. A second reserve replaces the first. Returns
 * SIMPLER_COMM_OK, SIMPLER_COMM_PEER_FAILED (host abort), SIMPLER_COMM_WAIT_TIMEOUT, or
 * SIMPLER_COMM_BAD_ARGUMENT (queue not open, dst NULL, nbytes over the arena, a timeout of
 * 0, more than depth messages in the ring).
 */
static inline int32_t simpler_queue_reserve(SimplerQueue *q, uint64_t nbytes, void **dst, uint64_t timeout_us) {
    if (q == NULL || !q->is_open || dst == NULL || nbytes > q->out_arena_bytes || timeout_us == 0)
        return SIMPLER_COMM_BAD_ARGUMENT;
    q->res_pending = 0;
    const uint64_t s = simpler_queue_priv_round(nbytes);
    const uint64_t deadline = simpler_comm_priv_deadline(timeout_us);
    for (uint32_t polls = 0;; polls += polls < UINT32_MAX) {
        if (simpler_queue_host_aborted(q)) return SIMPLER_COMM_PEER_FAILED;
        const uint32_t used = q->out_tail - simpler_queue_priv_load(q, SIMPLER_QUEUE_OUT_HEAD);
        if (used > q->depth) return SIMPLER_COMM_BAD_ARGUMENT;
        uint64_t at = 0;
        if (used < q->depth && simpler_queue_priv_place(q, used, s, &at)) {
            q->res_offset = at;
            q->res_nbytes = nbytes;
            q->res_pending = 1;
            *dst = q->out_arena + at;
            return SIMPLER_COMM_OK;
        }
        if (simpler_comm_priv_now_ns() >= deadline) return SIMPLER_COMM_WAIT_TIMEOUT;
        simpler_comm_priv_backoff(polls);
    }
}

/*
 * Publishes the reserved output message with `opcode` (DATA or ERROR): writes its slot
 * {seq, opcode, 0, offset, nbytes}, moves w to its end, then sets the output tail counter to
 * tail + 1 (release: the bytes and the slot are visible to a host that sees it). Does not
 * wait. Returns SIMPLER_COMM_OK, or SIMPLER_COMM_BAD_ARGUMENT (queue not open, no
 * reservation, another opcode; the reservation stays).
 */
static inline int32_t simpler_queue_commit(SimplerQueue *q, uint32_t opcode) {
    if (q == NULL || !q->is_open || !q->res_pending || (opcode != SIMPLER_QUEUE_DATA && opcode != SIMPLER_QUEUE_ERROR))
        return SIMPLER_COMM_BAD_ARGUMENT;
    SimplerQueueSlot *s = &q->out_ring[q->out_tail & (q->depth - 1u)];
    s->seq = q->out_seq;
    s->opcode = opcode;
    s->reserved = 0;
    s->payload_offset = q->res_offset;
    s->payload_nbytes = q->res_nbytes;
    q->out_write = q->res_offset + simpler_queue_priv_round(q->res_nbytes);
    q->res_pending = 0;
    q->out_seq += 1u;
    q->out_tail += 1u;
    simpler_queue_priv_store(q, SIMPLER_QUEUE_OUT_TAIL, q->out_tail);
    return SIMPLER_COMM_OK;
}

/*
 * Sends one output message: simpler_queue_reserve(nbytes), a copy of data[0..nbytes), then
 * simpler_queue_commit(opcode). opcode is DATA or ERROR (STOP is input only); data may be
 * NULL only when nbytes is 0. Returns what those return; SIMPLER_COMM_BAD_ARGUMENT also for
 * another opcode or NULL data.
 */
static inline int32_t simpler_queue_send(SimplerQueue *q, uint32_t opcode, const void *data, uint64_t nbytes,
                                         uint64_t timeout_us) {
    if ((opcode != SIMPLER_QUEUE_DATA && opcode != SIMPLER_QUEUE_ERROR) || (data == NULL && nbytes != 0))
        return SIMPLER_COMM_BAD_ARGUMENT;
    void *dst = NULL;
    const int32_t rc = simpler_queue_reserve(q, nbytes, &dst, timeout_us);
    if (rc != SIMPLER_COMM_OK) return rc;
    if (nbytes != 0) memcpy(dst, data, (size_t)nbytes);
    return simpler_queue_commit(q, opcode);
}

#ifdef __cplusplus
}
#endif

#endif /* SIMPLER_QUEUE_H */
