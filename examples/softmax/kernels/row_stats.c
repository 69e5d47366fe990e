/*
 * row_stats.c — AIV kernel, softmax phase 1: per-row statistics of a block of rows.
 *
 * Arguments: tensor 0 = x block [R, C] (input, f32, a strided view of the full matrix),
 * tensor 1 = stats [R, 2] (written, f32): stats[r][0] = max_c x[r][c] and
 * stats[r][1] = sum_c exp(x[r][c] - stats[r][0]) (summed in double).
 * Element (r, c) of a 2-D view is at data[r*strides[0] + c*strides[1]] (simpler_view2d).
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 (1-D is one row) */
#define KERNEL_BAD_SHAPE 2  /* stats is not [R, 2], or C == 0 */

/* exp in double without libm (the kernel library is dlopen'ed into a host process that
 * need not have libm loaded): simpler_exp_d from simpler/kernel_math.h. */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 2, 0)) return;
    SimplerView2D x, stats;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &stats)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (x.cols == 0 || stats.rows != x.rows || stats.cols != 2) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t r = 0; r < x.rows; ++r) {
        const float *xr = SIMPLER_VIEW2D_ROW(float, &x, r);
        float mx = xr[0];
        for (uint64_t c = 1; c < x.cols; ++c) {
            const float v = xr[c * x.col_stride];
            if (v > mx || v != v) mx = v; /* NaN wins, as in numpy */
            if (mx != mx) break;
        }
        double sum = 0.0;
        for (uint64_t c = 0; c < x.cols; ++c) sum += simpler_exp_d((double)xr[c * x.col_stride] - (double)mx);
        SIMPLER_VIEW2D_AT(float, &stats, r, 0) = mx;
        SIMPLER_VIEW2D_AT(float, &stats, r, 1) = (float)sum;
    }
}
