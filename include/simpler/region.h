/*
 * simpler/region.h — the chip side of an L3<->L2 region: shared memory between a level-3
 * orchestration on the host and a task running on this chip (docs/comm.md §7).
 *
 * The host makes the region (orch.create_worker_chip_region(worker, payload_bytes,
 * counter_bytes)) and passes its descriptor to the chip task as six u64 scalars, in order:
 *
 *     magic_version, region_id, payload_base, payload_bytes, counter_base, counter_bytes
 *
 * payload_base and counter_base are addresses in this chip's address space. The counters
 * are uint32 words (counter_bytes is a multiple of 4), the first on a 64-byte line after
 * the payload. Rules: one writer per 64-byte line (the host writes what the chip reads and
 * the reverse, never both in one line); a party writes its payload bytes, then notifies a
 * counter; the other waits for the counter, then reads. Every wait has a finite, positive
 * timeout; a kernel that waits must be submitted with require_sync_start (see comm.h).
 * Mirrors crates/simpler-abi/src/region.rs.
 */
#ifndef SIMPLER_REGION_H
#define SIMPLER_REGION_H

#include "simpler/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMPLER_REGION_MAGIC_VERSION ((0x5352474Eull << 32) | 1ull) /* "SRGN", version 1 */
#define SIMPLER_REGION_DESCRIPTOR_WORDS 6
#define SIMPLER_REGION_LINE_BYTES 64u

/* Notify ops and comparisons: the comm ones (SIMPLER_COMM_NOTIFY_*, SIMPLER_COMM_CMP_*),
 * with counters compared as uint32. */

typedef struct SimplerRegion {
    uint64_t magic_version;
    uint64_t region_id;     /* never 0 */
    uint64_t payload_base;  /* address of the payload */
    uint64_t payload_bytes;
    uint64_t counter_base;  /* address of the first counter, 64-byte aligned */
    uint64_t counter_bytes; /* a multiple of 4 */
} SimplerRegion;
_Static_assert(sizeof(SimplerRegion) == 48, "SimplerRegion is 48 bytes");
_Static_assert(offsetof(SimplerRegion, counter_base) == 32, "SimplerRegion.counter_base");

/* Fills *r from the six words w[0..6) and checks them; SIMPLER_COMM_OK, or
 * SIMPLER_COMM_BAD_ARGUMENT for another magic or version, region id 0, a counter area that
 * is not 64-byte aligned or not a positive multiple of 4 bytes, or a NULL base. */
static inline int32_t simpler_region_from_words(const uint64_t *w, SimplerRegion *r) {
    if (w == NULL || r == NULL) return SIMPLER_COMM_BAD_ARGUMENT;
    r->magic_version = w[0];
    r->region_id = w[1];
    r->payload_base = w[2];
    r->payload_bytes = w[3];
    r->counter_base = w[4];
    r->counter_bytes = w[5];
    if (r->magic_version != SIMPLER_REGION_MAGIC_VERSION || r->region_id == 0 || r->payload_base == 0 ||
        r->counter_base == 0 || (r->counter_base % SIMPLER_REGION_LINE_BYTES) != 0 || r->counter_bytes == 0 ||
        (r->counter_bytes % 4u) != 0)
        return SIMPLER_COMM_BAD_ARGUMENT;
    return SIMPLER_COMM_OK;
}

/* The region whose descriptor is a kernel's scalars at argument slots [slot, slot + 6). */
static inline int32_t simpler_region_from_args(int64_t *args, int slot, SimplerRegion *r) {
    uint64_t w[SIMPLER_REGION_DESCRIPTOR_WORDS];
    for (int i = 0; i < SIMPLER_REGION_DESCRIPTOR_WORDS; ++i) w[i] = (uint64_t)args[slot + i];
    return simpler_region_from_words(w, r);
}

/* The payload byte at `offset` when `len` bytes from there fit, else NULL. */
static inline void *simpler_region_payload(const SimplerRegion *r, uint64_t offset, uint64_t len) {
    if (r == NULL || offset > r->payload_bytes || len > r->payload_bytes - offset) return NULL;
    return (void *)(uintptr_t)(r->payload_base + offset);
}

/* The counter at byte `offset` of the counter area, or NULL (not a multiple of 4, outside). */
static inline uint32_t *simpler_region_counter(const SimplerRegion *r, uint64_t offset) {
    if (r == NULL || (offset % 4u) != 0 || offset >= r->counter_bytes) return NULL;
    return (uint32_t *)(uintptr_t)(r->counter_base + offset);
}

/* Counter `offset` = value (SIMPLER_COMM_NOTIFY_SET, release) or += value (NOTIFY_ADD,
 * seq_cst, wrapping): everything written before is visible to whoever sees the new value. */
static inline int32_t simpler_region_notify(const SimplerRegion *r, uint64_t offset, uint32_t value, uint32_t op) {
    uint32_t *c = simpler_region_counter(r, offset);
    if (c == NULL || (op != SIMPLER_COMM_NOTIFY_SET && op != SIMPLER_COMM_NOTIFY_ADD)) return SIMPLER_COMM_BAD_ARGUMENT;
    if (op == SIMPLER_COMM_NOTIFY_SET) __atomic_store_n(c, value, __ATOMIC_RELEASE);
    else (void)__atomic_fetch_add(c, value, __ATOMIC_SEQ_CST);
    return SIMPLER_COMM_OK;
}

/* The counter's value now (acquire); 0 for a bad offset. */
static inline uint32_t simpler_region_test(const SimplerRegion *r, uint64_t offset) {
    uint32_t *c = simpler_region_counter(r, offset);
    return c == NULL ? 0u : __atomic_load_n(c, __ATOMIC_ACQUIRE);
}

/* Internal: whether `v CMP value` holds, unsigned; -1 for an unknown cmp. */
static inline int simpler_region_priv_holds(uint32_t v, uint32_t cmp, uint32_t value) {
    switch (cmp) {
    case SIMPLER_COMM_CMP_EQ: return v == value;
    case SIMPLER_COMM_CMP_NE: return v != value;
    case SIMPLER_COMM_CMP_GT: return v > value;
    case SIMPLER_COMM_CMP_GE: return v >= value;
    case SIMPLER_COMM_CMP_LT: return v < value;
    case SIMPLER_COMM_CMP_LE: return v <= value;
    default: return -1;
    }
}

/* Waits until counter `offset` CMP value (acquire loads), at most timeout_us (> 0). Returns
 * SIMPLER_COMM_OK (and the value in *seen when seen is not NULL), SIMPLER_COMM_WAIT_TIMEOUT,
 * or SIMPLER_COMM_BAD_ARGUMENT (bad offset or cmp, a timeout of 0). */
static inline int32_t simpler_region_wait(const SimplerRegion *r, uint64_t offset, uint32_t cmp, uint32_t value,
                                          uint64_t timeout_us, uint32_t *seen) {
    uint32_t *c = simpler_region_counter(r, offset);
    if (c == NULL || timeout_us == 0 || simpler_region_priv_holds(0, cmp, 0) < 0) return SIMPLER_COMM_BAD_ARGUMENT;
    const uint64_t deadline = simpler_comm_priv_deadline(timeout_us);
    for (uint32_t polls = 0;; ++polls) {
        const uint32_t v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
        if (simpler_region_priv_holds(v, cmp, value) == 1) {
            if (seen != NULL) *seen = v;
            return SIMPLER_COMM_OK;
        }
        if (simpler_comm_priv_now_ns() >= deadline) return SIMPLER_COMM_WAIT_TIMEOUT;
        simpler_comm_priv_backoff(polls);
    }
}

#ifdef __cplusplus
}
#endif

#endif /* SIMPLER_REGION_H */
