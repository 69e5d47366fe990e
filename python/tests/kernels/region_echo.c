/*
 * Test kernel: answers `n` messages through an L3<->L2 region (simpler/region.h).
 *
 * Scalars: the region's six descriptor words, then n, then the wait timeout (us). Message i
 * (1..n): waits until counter 0 (the host's) reaches i, reads the u64 at payload byte 0,
 * writes 3 * value + 1 at payload byte 64 and sets counter 64 (its own line) to i. A bad
 * descriptor fails with SIMPLER_COMM_BAD_ARGUMENT, a host that stops sending with
 * SIMPLER_COMM_WAIT_TIMEOUT.
 */
#include "simpler/region.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 0, 8)) return;
    SimplerRegion r;
    int32_t rc = simpler_region_from_args(args, 0, &r);
    const uint64_t n = simpler_arg_u64(args, 6), timeout_us = simpler_arg_u64(args, 7);
    uint64_t *in = (uint64_t *)simpler_region_payload(&r, 0, 8);
    uint64_t *out = (uint64_t *)simpler_region_payload(&r, 64, 8);
    if (rc != SIMPLER_COMM_OK || in == NULL || out == NULL) {
        simpler_comm_fail(args, SIMPLER_COMM_BAD_ARGUMENT);
        return;
    }
    for (uint64_t i = 1; i <= n; ++i) {
        rc = simpler_region_wait(&r, 0, SIMPLER_COMM_CMP_GE, (uint32_t)i, timeout_us, NULL);
        if (rc != SIMPLER_COMM_OK) {
            simpler_comm_fail(args, rc);
            return;
        }
        *out = 3u * *in + 1u;
        simpler_region_notify(&r, 64, (uint32_t)i, SIMPLER_COMM_NOTIFY_SET);
    }
}
