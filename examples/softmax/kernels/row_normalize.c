/*
 * row_normalize.c — AIV kernel, softmax phase 2: y = exp(x - max) / sum per row.
 *
 * Arguments: tensor 0 = x block [R, C] (input, f32), tensor 1 = stats [R, 2] (input, f32,
 * from row_stats: max and sum of exp per row), tensor 2 = y block [R, C] (written, f32).
 * x and y are strided views of the full matrices: element (r, c) is at
 * data[r*strides[0] + c*strides[1]] (simpler_view2d).
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 (1-D is one row) */
#define KERNEL_BAD_SHAPE 2  /* x and y differ, or stats is not [R, 2] */

/* exp in double without libm (the kernel library is dlopen'ed into a host process that
 * need not have libm loaded): simpler_exp_d from simpler/kernel_math.h. */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 0)) return;
    SimplerView2D x, stats, y;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &stats) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &y)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&x, &y) || stats.rows != x.rows || stats.cols != 2) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t r = 0; r < x.rows; ++r) {
        const double mx = (double)SIMPLER_VIEW2D_AT(float, &stats, r, 0);
        const double inv_sum = 1.0 / (double)SIMPLER_VIEW2D_AT(float, &stats, r, 1);
        const float *xr = SIMPLER_VIEW2D_ROW(float, &x, r);
        float *yr = SIMPLER_VIEW2D_ROW(float, &y, r);
        for (uint64_t c = 0; c < x.cols; ++c)
            yr[c * y.col_stride] = (float)(simpler_exp_d((double)xr[c * x.col_stride] - mx) * inv_sum);
    }
}
