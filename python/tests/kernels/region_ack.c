/*
 * Test kernel: the consumer of region_defer.c's x: sets the region's counter at byte 64 to
 * x[0] (42), telling the host it ran. Same arguments as region_defer.c.
 */
#include "simpler/region.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerRegion r;
    if (simpler_region_from_args(args, 1, &r) != SIMPLER_COMM_OK) {
        simpler_kernel_fail(args, 901);
        return;
    }
    const float x = SIMPLER_TENSOR_DATA(float, simpler_arg_tensor(args, 0))[0];
    simpler_region_notify(&r, 64, (uint32_t)x, SIMPLER_COMM_NOTIFY_SET);
}
