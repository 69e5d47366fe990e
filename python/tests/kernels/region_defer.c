/*
 * Test kernel: x[0] = 42, then defers the task's completion until the region's 32-bit
 * counter at byte `off` reaches `value` (simpler_async_wait_counter32).
 * Tensors: 0 x (inout). Scalars: the six region descriptor words, off, value.
 */
#include "simpler/async.h"
#include "simpler/region.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerRegion r;
    if (simpler_region_from_args(args, 1, &r) != SIMPLER_COMM_OK) {
        simpler_kernel_fail(args, 900);
        return;
    }
    const uint32_t *counter = (const uint32_t *)(uintptr_t)(r.counter_base + simpler_arg_u64(args, 7));
    SIMPLER_TENSOR_DATA(float, simpler_arg_tensor(args, 0))[0] = 42.0f;
    (void)simpler_async_wait_counter32(args, counter, (uint32_t)simpler_arg_u64(args, 8));
}
