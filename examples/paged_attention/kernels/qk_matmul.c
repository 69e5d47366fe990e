/*
 * qk_matmul.c — AIC kernel, paged attention step 1: scores of one KV block.
 *
 * Arguments: tensor 0 = Q [g, D] (input: the g query heads sharing one KV head, f32, f16 or
 * bf16), tensor 1 = K [n, D] (input: the n valid tokens of one KV-cache block for that KV
 * head, a strided view of the cache, same dtype family), tensor 2 = S [g, n] (written, f32),
 * scalar slot 3 = scale (f32 bits, 1/sqrt(D)).
 *   S[i][j] = scale * sum_d Q[i][d] * K[j][d]
 * Products are summed in f32 in d order (inputs widened exactly by simpler_load_f32).
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* a dtype outside f32/f16/bf16 (S: not f32), or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* Q [g, D], K [n, D], S [g, n] do not agree */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 1)) return;
    const SimplerChipTensor *qt = simpler_arg_tensor(args, 0), *kt = simpler_arg_tensor(args, 1);
    SimplerView2D q, k, s;
    if (!simpler_is_float_dtype(qt->dtype) || !simpler_is_float_dtype(kt->dtype) ||
        !simpler_view2d(qt, (SimplerDataType)qt->dtype, &q) ||
        !simpler_view2d(kt, (SimplerDataType)kt->dtype, &k) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &s)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (k.cols != q.cols || s.rows != q.rows || s.cols != k.rows) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const float scale = simpler_arg_f32(args, 3);
    for (uint64_t i = 0; i < q.rows; ++i) {
        const uint64_t qrow = i * q.row_stride;
        for (uint64_t j = 0; j < k.rows; ++j) {
            const uint64_t krow = j * k.row_stride;
            float acc = 0.0f;
            for (uint64_t d = 0; d < q.cols; ++d)
                acc += simpler_load_f32(q.data, q.dtype, qrow + d * q.col_stride) *
                       simpler_load_f32(k.data, k.dtype, krow + d * k.col_stride);
            SIMPLER_VIEW2D_AT(float, &s, i, j) = scale * acc;
        }
    }
}
