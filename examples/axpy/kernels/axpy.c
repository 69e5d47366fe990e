/*
 * axpy.c — AIV kernel: y = alpha * x + y, element by element (f32), y updated in place.
 *
 * Arguments: tensor 0 = x (input), tensor 1 = y (read and written, INOUT), then one f32
 * scalar alpha at argument slot 2 (slot = number of tensors + scalar index). The two views
 * must have the same shape (1-D or 2-D) and dtype f32; they may be strided. Each element is
 * computed in double and rounded to f32 once.
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 */
#define KERNEL_BAD_SHAPE 2  /* x and y differ in shape */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 2, 1)) return;
    SimplerView2D x, y;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &y)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&x, &y)) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const double alpha = (double)simpler_arg_f32(args, 2);
    for (uint64_t r = 0; r < y.rows; ++r)
        for (uint64_t c = 0; c < y.cols; ++c) {
            float *yrc = &SIMPLER_VIEW2D_AT(float, &y, r, c);
            *yrc = (float)(alpha * (double)SIMPLER_VIEW2D_AT(float, &x, r, c) + (double)*yrc);
        }
}
