/* Test kernel with a bug: x *= 2 over a contiguous f32 tensor (tensor 0), and one element
 * more, x[n], past its end. Under sim memcheck the extra write faults at once. */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    volatile float *data = SIMPLER_TENSOR_DATA(float, x);
    const uint64_t n = simpler_tensor_numel(x);
    for (uint64_t i = 0; i <= n; ++i) data[i] *= 2.0f;
}
