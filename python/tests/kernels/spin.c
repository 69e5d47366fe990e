/*
 * Test kernel: busy for `ms` milliseconds (u64 scalar after the one tensor), then sets
 * element 0 of the f32 tensor to 1. Used to have a run in flight long enough to wait on.
 */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "simpler/kernel.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    const double ms = (double)simpler_arg_u64(args, 1);
    const double start = now_ms();
    volatile uint64_t spins = 0;
    while (now_ms() - start < ms) ++spins;
    SIMPLER_TENSOR_DATA(float, x)[0] = 1.0f;
}
