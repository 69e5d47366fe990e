/*
 * online_update.c — AIV kernel, paged attention step 4: fold one block into the accumulator.
 *
 * Arguments: tensor 0 = O [g, D] (input, f32: P·V of this block), tensor 1 = state [g, 3]
 * (input, f32: column 2 is alpha from softmax_update.c), tensor 2 = acc [g, D] (f32),
 * scalar slot 3 = first (u64: 1 for a sequence's first block, whose acc is written without
 * being read; 0 for later blocks).
 *   first: acc = O;   otherwise: acc = acc * alpha + O   (per row)
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* not f32, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* O and acc differ, or state is not [g, 3] */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 1)) return;
    SimplerView2D o, st, acc;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &o) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &st) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &acc)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!simpler_view2d_same_shape(&o, &acc) || st.rows != o.rows || st.cols != 3) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const int first = simpler_arg_u64(args, 3) != 0;
    for (uint64_t i = 0; i < o.rows; ++i) {
        const float alpha = SIMPLER_VIEW2D_AT(float, &st, i, 2);
        for (uint64_t d = 0; d < o.cols; ++d) {
            const float v = SIMPLER_VIEW2D_AT(float, &o, i, d);
            float *a = &SIMPLER_VIEW2D_AT(float, &acc, i, d);
            *a = first ? v : *a * alpha + v;
        }
    }
}
