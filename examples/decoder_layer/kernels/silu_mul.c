/*
 * silu_mul.c — AIV kernel: the SwiGLU activation of a block of rows.
 *
 * Arguments: tensor 0 = gate [R, F] (input, f32), tensor 1 = up [R, F] (input, f32), tensor
 * 2 = act [R, F] (written, f32); no scalars. Views may be strided (gate and up are halves of
 * one gate/up projection).
 *   act = silu(gate) * up,   silu(x) = x / (1 + exp(-x))   (in double, rounded once)
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* not f32, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* the three shapes differ */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 0)) return;
    SimplerView2D g, u, a;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &g) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &u) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &a)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&g, &u) || !simpler_view2d_same_shape(&g, &a)) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t r = 0; r < g.rows; ++r)
        for (uint64_t c = 0; c < g.cols; ++c) {
            const double x = (double)SIMPLER_VIEW2D_AT(float, &g, r, c);
            SIMPLER_VIEW2D_AT(float, &a, r, c) =
                (float)(x / (1.0 + simpler_exp_d(-x)) * (double)SIMPLER_VIEW2D_AT(float, &u, r, c));
        }
}
