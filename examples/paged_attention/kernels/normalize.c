/*
 * normalize.c — AIV kernel, paged attention step 5: the final normalisation.
 *
 * Arguments: tensor 0 = acc [g, D] (input, f32: sum over blocks of rescaled P·V), tensor 1
 * = state [g, 3] (input, f32: column 1 is l, the softmax denominator), tensor 2 = out
 * [g, D] (written, f32: a strided view of the attention output).
 *   out[i][d] = acc[i][d] / l[i]
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* not f32, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* acc and out differ, or state is not [g, 3] */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 0)) return;
    SimplerView2D acc, st, out;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &acc) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &st) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&acc, &out) || st.rows != acc.rows || st.cols != 3) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t i = 0; i < acc.rows; ++i) {
        const double inv_l = 1.0 / (double)SIMPLER_VIEW2D_AT(float, &st, i, 1);
        for (uint64_t d = 0; d < acc.cols; ++d)
            SIMPLER_VIEW2D_AT(float, &out, i, d) =
                (float)((double)SIMPLER_VIEW2D_AT(float, &acc, i, d) * inv_l);
    }
}
