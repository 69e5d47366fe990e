/* Test kernel: tensor 1 = tensor 0 + 1 (f32, contiguous, same length). */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    SimplerChipTensor *y = simpler_arg_tensor(args, 1);
    const float *xs = SIMPLER_TENSOR_DATA(float, x);
    float *ys = SIMPLER_TENSOR_DATA(float, y);
    const uint64_t n = simpler_tensor_numel(x);
    for (uint64_t i = 0; i < n; ++i) ys[i] = xs[i] + 1.0f;
}
