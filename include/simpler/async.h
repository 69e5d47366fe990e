/*
 * simpler/async.h — deferred completion: a kernel hands work to an asynchronous engine and
 * returns; its task completes only when the engine reports (docs/chip-runtime.md §18).
 *
 * Two engines exist on the sim:
 *   COUNTER  simpler_async_wait_counter(args, &counter, value): the task completes once the
 *            64-bit counter (8-byte aligned device memory) reaches value (>=). Whoever writes
 *            it (another kernel, the host, a peer chip) needs no call of ours.
 *            simpler_async_wait_counter32(args, &counter, value): the same for a 32-bit
 *            counter (4-byte aligned) — USE IT for a region's counters (simpler/region.h)
 *            and a comm domain's signals (simpler/comm.h), which are 32-bit: a 64-bit read
 *            there also sees the next counter and may hold early.
 *   SDMA     simpler_sdma_copy(args, dst, src, bytes): starts an asynchronous copy; the task
 *            completes once the copy has landed, so its consumers see dst copied. Only on a
 *            worker started with enable_sdma=True.
 * A dispatch registers at most SIMPLER_ASYNC_MAX_CONDITIONS conditions. The calls return 0,
 * or the code the run will fail with (the kernel need not report it again; the run's
 * message names the task and the cause):
 *   SIMPLER_ASYNC_COMPLETION_INVALID (101)   SDMA without enable_sdma; a null or misaligned
 *                                            counter (simpler_async_register returns 0 here:
 *                                            the scheduler checks its engine kind — ROCE,
 *                                            URMA, CCU exist on no sim chip — and fails the
 *                                            run when it reads it)
 *   SIMPLER_ASYNC_WAIT_OVERFLOW (102)        more than 64 conditions on one dispatch
 *   SIMPLER_ASYNC_REGISTRATION_FAILED (103)  the engine refused the copy (null address,
 *                                            zero bytes, an injected fault)
 * The memory a pending copy reads and writes, and a counter, must stay valid until the task
 * completes. A kernel that also reports a fatal code (simpler_kernel_fail) fails the run
 * with KERNEL_FATAL; its conditions are not waited for, but its copies still land before
 * the run ends (a device reset cancels the copies not yet started instead). The slab's
 * header belongs to the runtime: a kernel must not write it.
 *
 * Mirrors crates/simpler-abi/src/deferred.rs byte for byte and call for call;
 * crates/simpler-abi/tests/it/c_async.rs checks both. Includes simpler/kernel.h.
 */
#ifndef SIMPLER_ASYNC_H
#define SIMPLER_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include "simpler/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMPLER_ASYNC_SLAB_SLOT 52
#define SIMPLER_ASYNC_MAX_CONDITIONS 64

#define SIMPLER_ASYNC_ENGINE_COUNTER 0u
#define SIMPLER_ASYNC_ENGINE_SDMA 1u
#define SIMPLER_ASYNC_ENGINE_ROCE 2u
#define SIMPLER_ASYNC_ENGINE_URMA 3u
#define SIMPLER_ASYNC_ENGINE_CCU 4u

/* SimplerDeferredCondition.flags of a COUNTER condition: a 32-bit counter. */
#define SIMPLER_ASYNC_COUNTER_32 1u

#define SIMPLER_ASYNC_COMPLETION_INVALID 101
#define SIMPLER_ASYNC_WAIT_OVERFLOW 102
#define SIMPLER_ASYNC_REGISTRATION_FAILED 103

/* One completion condition, 24 bytes. */
typedef struct SimplerDeferredCondition {
    uint32_t engine;   /* SIMPLER_ASYNC_ENGINE_* */
    uint32_t flags;    /* COUNTER: SIMPLER_ASYNC_COUNTER_32 for a 32-bit counter, else 0 */
    uint64_t addr;     /* COUNTER: the counter's address; SDMA: the copy's ticket */
    uint64_t value;    /* COUNTER: the value to reach; SDMA: 0 */
} SimplerDeferredCondition;
_Static_assert(sizeof(SimplerDeferredCondition) == 24, "DeferredCondition is 24 bytes");
_Static_assert(offsetof(SimplerDeferredCondition, flags) == 4, "DeferredCondition.flags");
_Static_assert(offsetof(SimplerDeferredCondition, addr) == 8, "DeferredCondition.addr");
_Static_assert(offsetof(SimplerDeferredCondition, value) == 16, "DeferredCondition.value");

/* The SDMA submit call: returns the copy's ticket, 0 when refused. */
typedef uint64_t (*SimplerSdmaSubmit)(uint64_t engine, uint64_t dst, uint64_t src, uint64_t bytes);

/* A dispatch's conditions, 1600 bytes; argument slot 52 points to it. */
typedef struct SimplerDeferredSlab {
    uint32_t count;          /* conditions registered */
    uint32_t error;          /* first registration error, 0 if none */
    uint64_t sdma_submit;    /* SimplerSdmaSubmit, 0 without an SDMA engine */
    uint64_t sdma_engine;    /* its first argument */
    uint64_t reserved[5];
    SimplerDeferredCondition conditions[SIMPLER_ASYNC_MAX_CONDITIONS];
} SimplerDeferredSlab;
_Static_assert(sizeof(SimplerDeferredSlab) == 1600, "DeferredSlab is 1600 bytes");
_Static_assert(offsetof(SimplerDeferredSlab, count) == 0, "DeferredSlab.count");
_Static_assert(offsetof(SimplerDeferredSlab, error) == 4, "DeferredSlab.error");
_Static_assert(offsetof(SimplerDeferredSlab, sdma_submit) == 8, "DeferredSlab.sdma_submit");
_Static_assert(offsetof(SimplerDeferredSlab, sdma_engine) == 16, "DeferredSlab.sdma_engine");
_Static_assert(offsetof(SimplerDeferredSlab, conditions) == 64, "DeferredSlab.conditions");

static inline SimplerDeferredSlab *simpler_async_priv_slab(int64_t *args) {
    return (SimplerDeferredSlab *)(uintptr_t)args[SIMPLER_ASYNC_SLAB_SLOT];
}

static inline void simpler_async_priv_error(SimplerDeferredSlab *s, int32_t code) {
    uint32_t none = 0;
    (void)__atomic_compare_exchange_n(&s->error, &none, (uint32_t)code, 0, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED);
}

static inline int32_t simpler_async_priv_push(SimplerDeferredSlab *s, SimplerDeferredCondition c) {
    uint32_t n = __atomic_load_n(&s->count, __ATOMIC_RELAXED);
    if (n >= SIMPLER_ASYNC_MAX_CONDITIONS) {
        simpler_async_priv_error(s, SIMPLER_ASYNC_WAIT_OVERFLOW);
        return SIMPLER_ASYNC_WAIT_OVERFLOW;
    }
    s->conditions[n] = c;
    __atomic_store_n(&s->count, n + 1, __ATOMIC_RELEASE);
    return 0;
}

static inline int32_t simpler_async_priv_counter(int64_t *args, uint64_t addr, uint32_t flags,
                                                 uint64_t value, uint64_t align) {
    SimplerDeferredCondition c = {SIMPLER_ASYNC_ENGINE_COUNTER, flags, addr, value};
    int32_t rc = simpler_async_priv_push(simpler_async_priv_slab(args), c);
    if (rc != 0) return rc;
    /* Registered anyway: the scheduler names the bad address when it reads it. */
    return addr == 0 || addr % align != 0 ? SIMPLER_ASYNC_COMPLETION_INVALID : 0;
}

/* Defers the task's completion until *counter >= value (COUNTER engine, 64-bit counter). */
static inline int32_t simpler_async_wait_counter(int64_t *args, const uint64_t *counter, uint64_t value) {
    return simpler_async_priv_counter(args, (uint64_t)(uintptr_t)counter, 0, value, 8);
}

/* Defers the task's completion until *counter >= value, for a 32-bit counter (a region's
 * counter, a comm signal). */
static inline int32_t simpler_async_wait_counter32(int64_t *args, const uint32_t *counter, uint32_t value) {
    return simpler_async_priv_counter(args, (uint64_t)(uintptr_t)counter, SIMPLER_ASYNC_COUNTER_32, value, 4);
}

/* Starts an asynchronous copy of `bytes` bytes from src to dst on the SDMA engine and defers
 * the task's completion until it has landed. */
static inline int32_t simpler_sdma_copy(int64_t *args, void *dst, const void *src, uint64_t bytes) {
    SimplerDeferredSlab *s = simpler_async_priv_slab(args);
    if (__atomic_load_n(&s->count, __ATOMIC_RELAXED) >= SIMPLER_ASYNC_MAX_CONDITIONS) {
        simpler_async_priv_error(s, SIMPLER_ASYNC_WAIT_OVERFLOW);
        return SIMPLER_ASYNC_WAIT_OVERFLOW;
    }
    if (s->sdma_submit == 0) {
        /* Registered anyway: the scheduler names the missing engine when it reads it. */
        SimplerDeferredCondition c = {SIMPLER_ASYNC_ENGINE_SDMA, 0, 0, 0};
        (void)simpler_async_priv_push(s, c);
        return SIMPLER_ASYNC_COMPLETION_INVALID;
    }
    uint64_t ticket = ((SimplerSdmaSubmit)(uintptr_t)s->sdma_submit)(
        s->sdma_engine, (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, bytes);
    if (ticket == 0) {
        simpler_async_priv_error(s, SIMPLER_ASYNC_REGISTRATION_FAILED);
        return SIMPLER_ASYNC_REGISTRATION_FAILED;
    }
    SimplerDeferredCondition c = {SIMPLER_ASYNC_ENGINE_SDMA, 0, ticket, 0};
    return simpler_async_priv_push(s, c);
}

/* Defers the task's completion on a condition of any engine kind, as written. Returns 0 once
 * registered (or SIMPLER_ASYNC_WAIT_OVERFLOW): the scheduler refuses the kinds the chip
 * lacks when it reads the slab. */
static inline int32_t simpler_async_register(int64_t *args, SimplerDeferredCondition c) {
    return simpler_async_priv_push(simpler_async_priv_slab(args), c);
}

#ifdef __cplusplus
}
#endif

#endif /* SIMPLER_ASYNC_H */
