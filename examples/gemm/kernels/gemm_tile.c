/*
 * gemm_tile.c — AIC kernel: one tile step of C = A·B.
 *
 * Arguments: tensor 0 = A tile [M, K] (input), tensor 1 = B tile [K, N] (input),
 * tensor 2 = C tile [M, N] (written), then one u64 scalar at slot 3: `accumulate`.
 *   accumulate == 0:  C  = A·B   (first K step; C's old contents are never read)
 *   accumulate != 0:  C += A·B   (later K steps, chained by the INOUT dependency)
 * All three are f32 2-D views into larger row-major matrices, so they are strided:
 * element (r, c) is at data[r*strides[0] + c*strides[1]]. Each output element's dot
 * product over this tile's K is summed in double, then added to C once.
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or not 2-D */
#define KERNEL_BAD_SHAPE 2  /* A [M,K], B [K,N], C [M,N] do not agree */

static int is_f32_matrix(const SimplerChipTensor *t) {
    return t != NULL && t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 2;
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 3, 1)) return;
    const SimplerChipTensor *a = simpler_arg_tensor(args, 0);
    const SimplerChipTensor *b = simpler_arg_tensor(args, 1);
    const SimplerChipTensor *c = simpler_arg_tensor(args, 2);
    if (!is_f32_matrix(a) || !is_f32_matrix(b) || !is_f32_matrix(c)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    const uint64_t m = a->shapes[0], k = a->shapes[1], n = b->shapes[1];
    if (b->shapes[0] != k || c->shapes[0] != m || c->shapes[1] != n) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const int accumulate = simpler_arg_u64(args, 3) != 0;

    const float *ad = SIMPLER_TENSOR_DATA(float, a);
    const float *bd = SIMPLER_TENSOR_DATA(float, b);
    float *cd = SIMPLER_TENSOR_DATA(float, c);
    const uint64_t as0 = a->strides[0], as1 = a->strides[1];
    const uint64_t bs0 = b->strides[0], bs1 = b->strides[1];
    const uint64_t cs0 = c->strides[0], cs1 = c->strides[1];

    for (uint64_t i = 0; i < m; ++i) {
        const float *arow = ad + i * as0;
        float *crow = cd + i * cs0;
        for (uint64_t j = 0; j < n; ++j) {
            const float *bcol = bd + j * bs1;
            double acc = 0.0;
            for (uint64_t p = 0; p < k; ++p) acc += (double)arow[p * as1] * (double)bcol[p * bs0];
            float *cij = crow + j * cs1;
            *cij = accumulate ? (float)((double)*cij + acc) : (float)acc;
        }
    }
}
