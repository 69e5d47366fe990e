/*
 * softmax_update.c — AIV kernel, paged attention step 2: online softmax over one KV block.
 *
 * Arguments: tensor 0 = S [g, n] (input, f32 scores of this block), tensor 1 = state [g, 3]
 * (f32, per query row: m = running max, l = running sum of exp(s - m), alpha = the factor
 * the accumulator must be rescaled by for this block), tensor 2 = P [g, n] (written, f32),
 * scalar slot 3 = first (u64: 1 for a sequence's first block, whose state is written
 * without being read; 0 for later blocks, whose state is read and updated).
 *   m' = max(m, max_j S[i][j]);  P[i][j] = exp(S[i][j] - m');  alpha = exp(m - m')
 *   l' = l * alpha + sum_j P[i][j]          (first block: m = -inf, l = 0, alpha = 0)
 * exp and the row sum are computed in double and rounded to f32 once.
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* not f32, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* S [g, n], state [g, 3], P [g, n] do not agree, or n == 0 */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 1)) return;
    SimplerView2D s, st, p;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &s) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &st) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &p)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (s.cols == 0 || !simpler_view2d_same_shape(&s, &p) || st.rows != s.rows || st.cols != 3) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const int first = simpler_arg_u64(args, 3) != 0;
    for (uint64_t i = 0; i < s.rows; ++i) {
        float m_new = SIMPLER_VIEW2D_AT(float, &s, i, 0);
        for (uint64_t j = 1; j < s.cols; ++j) {
            const float v = SIMPLER_VIEW2D_AT(float, &s, i, j);
            if (v > m_new) m_new = v;
        }
        double l = 0.0, alpha = 0.0;
        if (!first) {
            const float m_old = SIMPLER_VIEW2D_AT(float, &st, i, 0);
            if (m_old > m_new) m_new = m_old;
            alpha = simpler_exp_d((double)m_old - (double)m_new);
            l = (double)SIMPLER_VIEW2D_AT(float, &st, i, 1) * alpha;
        }
        for (uint64_t j = 0; j < s.cols; ++j) {
            const double e = simpler_exp_d((double)SIMPLER_VIEW2D_AT(float, &s, i, j) - (double)m_new);
            SIMPLER_VIEW2D_AT(float, &p, i, j) = (float)e;
            l += e;
        }
        SIMPLER_VIEW2D_AT(float, &st, i, 0) = m_new;
        SIMPLER_VIEW2D_AT(float, &st, i, 1) = (float)l;
        SIMPLER_VIEW2D_AT(float, &st, i, 2) = (float)alpha;
    }
}
