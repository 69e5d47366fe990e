/*
 * Test kernel: starts an SDMA copy of tensor 0 (f32, contiguous) into tensor 1 in `chunks`
 * (scalar 0) equal pieces, or — with scalar 1 non-zero — defers on a COUNTER that never
 * arrives, and returns at once: the task completes when the copies have landed
 * (simpler/async.h, docs/chip-runtime.md §18).
 */
#include "simpler/async.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *src = simpler_arg_tensor(args, 0);
    SimplerChipTensor *dst = simpler_arg_tensor(args, 1);
    const uint64_t chunks = simpler_arg_u64(args, 2) ? simpler_arg_u64(args, 2) : 1;
    if (simpler_arg_u64(args, 3)) {
        static const uint64_t never = 0;
        (void)simpler_async_wait_counter(args, &never, 1);
        return;
    }
    const uint64_t bytes = simpler_tensor_numel(src) * 4;
    const uint64_t chunk = (bytes + chunks - 1) / chunks;
    unsigned char *d = SIMPLER_TENSOR_DATA(unsigned char, dst);
    const unsigned char *s = SIMPLER_TENSOR_DATA(unsigned char, src);
    for (uint64_t off = 0; off < bytes; off += chunk) {
        const uint64_t n = bytes - off < chunk ? bytes - off : chunk;
        if (simpler_sdma_copy(args, d + off, s + off, n) != 0) return; /* the run fails */
    }
}
