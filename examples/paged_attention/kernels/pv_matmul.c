/*
 * pv_matmul.c — AIC kernel, paged attention step 3: the block's weighted values.
 *
 * Arguments: tensor 0 = P [g, n] (input, f32: exp(S - m) from softmax_update.c), tensor 1 =
 * V [n, D] (input: the n valid tokens of one KV-cache block for one KV head, a strided view
 * of the cache, f32, f16 or bf16), tensor 2 = O [g, D] (written, f32).
 *   O[i][d] = sum_j P[i][j] * V[j][d]
 * Products are summed in f32 in j order (V widened exactly by simpler_load_f32).
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"
#include "simpler/kernel_math.h"

#define KERNEL_BAD_TENSOR 1 /* P or O not f32, V outside f32/f16/bf16, or not 1-D/2-D */
#define KERNEL_BAD_SHAPE 2  /* P [g, n], V [n, D], O [g, D] do not agree */

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 0)) return;
    const SimplerChipTensor *vt = simpler_arg_tensor(args, 1);
    SimplerView2D p, v, o;
    if (!simpler_is_float_dtype(vt->dtype) ||
        !simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &p) ||
        !simpler_view2d(vt, (SimplerDataType)vt->dtype, &v) ||
        !simpler_view2d(simpler_arg_tensor(args, 2), SIMPLER_DT_FLOAT32, &o)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (v.rows != p.cols || o.rows != p.rows || o.cols != v.cols) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t i = 0; i < p.rows; ++i) {
        for (uint64_t d = 0; d < v.cols; ++d) {
            float acc = 0.0f;
            for (uint64_t j = 0; j < p.cols; ++j)
                acc += SIMPLER_VIEW2D_AT(float, &p, i, j) *
                       simpler_load_f32(v.data, v.dtype, j * v.row_stride + d * v.col_stride);
            SIMPLER_VIEW2D_AT(float, &o, i, d) = acc;
        }
    }
}
