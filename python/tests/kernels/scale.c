/* Test kernel: x *= alpha over a contiguous f32 tensor (tensor 0), alpha an f32 scalar. */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    if (x->dtype != SIMPLER_DT_FLOAT32) {
        simpler_kernel_fail(args, 1);
        return;
    }
    const float alpha = simpler_arg_f32(args, 1);
    float *data = SIMPLER_TENSOR_DATA(float, x);
    const uint64_t n = simpler_tensor_numel(x);
    for (uint64_t i = 0; i < n; ++i) data[i] *= alpha;
}
