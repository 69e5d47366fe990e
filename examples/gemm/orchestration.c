/*
 * gemm orchestration: C = A·B, f32, tiled 64 x 64.
 *
 * Signature: A (in) [M, K], B (in) [K, N], C (out) [M, N] (all 512 x 512 in simpler.toml).
 * Graph: one AIC task (func 0, kernels/gemm_tile.c) per output tile (i, j) and K step k:
 *
 *     INPUT A(i, k), INPUT B(k, j), C(i, j) tagged
 *         OUTPUT_EXISTING with scalar accumulate = 0 for k == 0   (C  = A·B)
 *         INOUT           with scalar accumulate = 1 for k  > 0   (C += A·B)
 *
 * 8 x 8 x 8 = 512 tasks for 512 x 512. The runtime chains the K steps of each tile through
 * the overlapping C(i, j) region (WAW/RAW), and the 64 tiles are independent of each other.
 * Tasks are submitted k-major (all k = 0 steps first), so 64 independent tasks are ready
 * from the start instead of one chain at a time.
 */
#include <stdio.h>

#include "simpler/orchestration.h"

#define TILE 64u
#define FUNC_GEMM_TILE 0

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static int is_f32_matrix(const SimplerChipTensor *t) {
    return t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 2;
}

static uint64_t min_u64(uint64_t x, uint64_t y) { return x < y ? x : y; }

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 3) {
        char msg[128];
        snprintf(msg, sizeof msg, "gemm: expected 3 tensors (A, B, C), got %u",
                 (unsigned)args->tensor_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *a = &args->tensors[0];
    const SimplerChipTensor *b = &args->tensors[1];
    const SimplerChipTensor *c = &args->tensors[2];
    if (!is_f32_matrix(a) || !is_f32_matrix(b) || !is_f32_matrix(c)) {
        return invalid_args(ops, "gemm: A, B and C must be 2-D f32 tensors");
    }
    const uint64_t m = a->shapes[0], k = a->shapes[1], n = b->shapes[1];
    if (b->shapes[0] != k || c->shapes[0] != m || c->shapes[1] != n) {
        char msg[192];
        snprintf(msg, sizeof msg,
                 "gemm: shapes do not agree: A [%llu, %llu], B [%llu, %llu], C [%llu, %llu]",
                 (unsigned long long)m, (unsigned long long)k, (unsigned long long)b->shapes[0],
                 (unsigned long long)n, (unsigned long long)c->shapes[0],
                 (unsigned long long)c->shapes[1]);
        return invalid_args(ops, msg);
    }
    if (k == 0) {
        return invalid_args(ops, "gemm: the inner dimension K must not be 0");
    }

    SimplerTaskDesc d;
    for (uint64_t k0 = 0; k0 < k; k0 += TILE) {
        const uint64_t kt = min_u64(TILE, k - k0);
        for (uint64_t i0 = 0; i0 < m; i0 += TILE) {
            const uint64_t mt = min_u64(TILE, m - i0);
            for (uint64_t j0 = 0; j0 < n; j0 += TILE) {
                const uint64_t nt = min_u64(TILE, n - j0);
                const SimplerChipTensor at = simpler_view_2d(a, i0, k0, mt, kt);
                const SimplerChipTensor bt = simpler_view_2d(b, k0, j0, kt, nt);
                const SimplerChipTensor ct = simpler_view_2d(c, i0, j0, mt, nt);
                simpler_task_init(&d, SIMPLER_CORE_AIC, FUNC_GEMM_TILE);
                simpler_task_add_input(&d, &at);
                simpler_task_add_input(&d, &bt);
                if (k0 == 0) {
                    simpler_task_add_output_existing(&d, &ct);
                    simpler_task_add_scalar(&d, 0); /* accumulate = 0: C = A·B */
                } else {
                    simpler_task_add_inout(&d, &ct);
                    simpler_task_add_scalar(&d, 1); /* accumulate = 1: C += A·B */
                }
                const int32_t rc = simpler_submit(ops, &d, NULL);
                if (rc != 0) return rc;
            }
        }
    }
    return 0;
}
