/*
 * add.c — AIV kernel: out = x + y, element by element (f32).
 *
 * Arguments: tensor 0 = x (input), tensor 1 = y (input), tensor 2 = out (written); no
 * scalars. The three views must have the same shape (1-D or 2-D) and dtype f32; they may be
 * strided (simpler_view2d in simpler/kernel.h sees each as rows x cols with strides).
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 */
#define KERNEL_BAD_SHAPE 2  /* operand shapes differ */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 0)) return;
    SimplerView2D x, y, out;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &y) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&x, &y) || !simpler_view2d_same_shape(&x, &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const int packed = x.col_stride == 1 && y.col_stride == 1 && out.col_stride == 1;
    for (uint64_t r = 0; r < out.rows; ++r) {
        const float *xr = SIMPLER_VIEW2D_ROW(float, &x, r);
        const float *yr = SIMPLER_VIEW2D_ROW(float, &y, r);
        float *outr = SIMPLER_VIEW2D_ROW(float, &out, r);
        if (packed) { /* the common case, kept simple enough to vectorize */
            for (uint64_t c = 0; c < out.cols; ++c) outr[c] = xr[c] + yr[c];
        } else {
            for (uint64_t c = 0; c < out.cols; ++c)
                outr[c * out.col_stride] = xr[c * x.col_stride] + yr[c * y.col_stride];
        }
    }
}
