/*
 * add_scalar.c — AIV kernel: out = x + s, element by element (f32).
 *
 * Arguments: tensor 0 = x (input), tensor 1 = out (written), then one f32 scalar s at
 * argument slot 2 (slot = number of tensors + scalar index). The two views must have the
 * same shape (1-D or 2-D) and dtype f32; they may be strided.
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 */
#define KERNEL_BAD_SHAPE 2  /* operand shapes differ */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 2, 1)) return;
    SimplerView2D x, out;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&x, &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const float s = simpler_arg_f32(args, 2);
    for (uint64_t r = 0; r < out.rows; ++r)
        for (uint64_t c = 0; c < out.cols; ++c)
            SIMPLER_VIEW2D_AT(float, &out, r, c) = SIMPLER_VIEW2D_AT(float, &x, r, c) + s;
}
