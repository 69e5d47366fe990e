/*
 * rope_kv_write.c — AIV kernel: rotary embedding of one token's q and k, and the token's
 * k and v written into its KV-cache slot.
 *
 * Arguments (all f32, 2-D views):
 *   tensor 0 = q_in  [H, D]    (input: the token's query heads, a view of the QKV projection)
 *   tensor 1 = k_in  [KVH, D]  (input: its key heads)
 *   tensor 2 = v_in  [KVH, D]  (input: its value heads)
 *   tensor 3 = rope  [1, D]    (input: cos(p*theta_i) for i < D/2, then sin(p*theta_i), at the
 *                               token's position p)
 *   tensor 4 = q_out [H, D]    (written: rotated queries)
 *   tensor 5 = k_out [KVH, D]  (written: rotated keys, the cache slot of position p)
 *   tensor 6 = v_out [KVH, D]  (written: v_in copied to the cache slot)
 * Rotation by halves (x1 = x[:D/2], x2 = x[D/2:]):
 *   out[:D/2] = x1*cos - x2*sin,   out[D/2:] = x2*cos + x1*sin
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* not f32, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* shapes disagree, or D is odd */

static void rotate(const SimplerView2D *in, const SimplerView2D *rope, SimplerView2D *out) {
    const uint64_t half = in->cols / 2;
    for (uint64_t r = 0; r < in->rows; ++r) {
        for (uint64_t i = 0; i < half; ++i) {
            const float c = SIMPLER_VIEW2D_AT(float, rope, 0, i);
            const float s = SIMPLER_VIEW2D_AT(float, rope, 0, half + i);
            const float x1 = SIMPLER_VIEW2D_AT(float, in, r, i);
            const float x2 = SIMPLER_VIEW2D_AT(float, in, r, half + i);
            SIMPLER_VIEW2D_AT(float, out, r, i) = x1 * c - x2 * s;
            SIMPLER_VIEW2D_AT(float, out, r, half + i) = x2 * c + x1 * s;
        }
    }
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 7, 0)) return;
    SimplerView2D v[7];
    for (int i = 0; i < 7; ++i) {
        if (!simpler_view2d(simpler_arg_tensor(args, i), SIMPLER_DT_FLOAT32, &v[i])) {
            simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
            return;
        }
    }
    const SimplerView2D *q_in = &v[0], *k_in = &v[1], *v_in = &v[2], *rope = &v[3];
    SimplerView2D *q_out = &v[4], *k_out = &v[5], *v_out = &v[6];
    const uint64_t d = q_in->cols;
    if (d % 2 != 0 || k_in->cols != d || !simpler_view2d_same_shape(k_in, v_in) ||
        rope->rows != 1 || rope->cols != d || !simpler_view2d_same_shape(q_in, q_out) ||
        !simpler_view2d_same_shape(k_in, k_out) || !simpler_view2d_same_shape(v_in, v_out)) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    rotate(q_in, rope, q_out);
    rotate(k_in, rope, k_out);
    for (uint64_t r = 0; r < v_in->rows; ++r)
        for (uint64_t c = 0; c < d; ++c)
            SIMPLER_VIEW2D_AT(float, v_out, r, c) = SIMPLER_VIEW2D_AT(float, v_in, r, c);
}
