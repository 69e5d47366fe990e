/*
 * rmsnorm.c — AIV kernel: RMSNorm of a block of rows.
 *
 * Arguments: tensor 0 = x [R, C] (input, f32), tensor 1 = w [C] (input, f32 gain), tensor 2
 * = y [R, C] (written, f32), scalar slot 3 = eps (f32 bits).
 *   y[r][c] = x[r][c] / sqrt(mean_c x[r][c]^2 + eps) * w[c]
 * The mean of squares is summed in double; one rounding to f32 per element.
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* not f32, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* x and y differ, w is not one row of C, or C == 0 */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 1)) return;
    SimplerView2D x, w, y;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &w) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &y)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (x.cols == 0 || !simpler_view2d_same_shape(&x, &y) || w.rows != 1 || w.cols != x.cols) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const double eps = (double)simpler_arg_f32(args, 3);
    for (uint64_t r = 0; r < x.rows; ++r) {
        double ss = 0.0;
        for (uint64_t c = 0; c < x.cols; ++c) {
            const double v = (double)SIMPLER_VIEW2D_AT(float, &x, r, c);
            ss += v * v;
        }
        const double inv = 1.0 / simpler_sqrt_d(ss / (double)x.cols + eps);
        for (uint64_t c = 0; c < x.cols; ++c)
            SIMPLER_VIEW2D_AT(float, &y, r, c) = (float)((double)SIMPLER_VIEW2D_AT(float, &x, r, c) *
                                                         inv * (double)SIMPLER_VIEW2D_AT(float, &w, 0, c));
    }
}
