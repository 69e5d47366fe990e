/* Test kernel: writes -1 over its f32 tensor (tensor 0), then fails the run with code 7, so a
 * worker that copied its device memory back after a failed run would be caught. */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    float *data = SIMPLER_TENSOR_DATA(float, x);
    const uint64_t n = simpler_tensor_numel(x);
    for (uint64_t i = 0; i < n; ++i) data[i] = -1.0f;
    simpler_kernel_fail(args, 7);
}
