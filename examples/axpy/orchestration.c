/*
 * axpy orchestration: y = alpha * x + y, f32, y updated in place; alpha is a signature
 * scalar.
 *
 * Signature (simpler.toml): x (in) [R, C], y (inout) [R, C], alpha (scalar, f32).
 * Tensors arrive in args->tensors (x, y), scalars in args->scalars as raw 64-bit patterns
 * (alpha's f32 bits, zero-extended): the orchestration passes them on without decoding.
 * Graph: one AIV task per 64 x 128 tile (8 x 4 = 32 tasks for 512 x 512), each running func 0
 * (kernels/axpy.c) on
 *     INPUT x[tile], INOUT y[tile], scalar alpha.
 * The tiles do not overlap, so every task is ready at once. Tile views of a wider matrix are
 * strided (row stride C).
 */
#include <stdio.h>

#include "simpler/orchestration.h"

#define TILE_ROWS 64u
#define TILE_COLS 128u

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static int is_f32_matrix(const SimplerChipTensor *t) {
    return t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 2;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 2 || args->scalar_count != 1) {
        char msg[128];
        snprintf(msg, sizeof msg, "axpy: expected 2 tensors (x, y) and 1 scalar (alpha), got %u and %u",
                 (unsigned)args->tensor_count, (unsigned)args->scalar_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *x = &args->tensors[0];
    const SimplerChipTensor *y = &args->tensors[1];
    const uint64_t alpha_bits = args->scalars[0];
    if (!is_f32_matrix(x) || !is_f32_matrix(y)) {
        return invalid_args(ops, "axpy: x and y must be 2-D f32 tensors");
    }
    const uint64_t rows = x->shapes[0], cols = x->shapes[1];
    if (y->shapes[0] != rows || y->shapes[1] != cols) {
        return invalid_args(ops, "axpy: x and y must have the same shape");
    }

    SimplerTaskDesc d;
    for (uint64_t r0 = 0; r0 < rows; r0 += TILE_ROWS) {
        for (uint64_t c0 = 0; c0 < cols; c0 += TILE_COLS) {
            const uint64_t nr = min_u64(TILE_ROWS, rows - r0), nc = min_u64(TILE_COLS, cols - c0);
            const SimplerChipTensor xt = simpler_view_2d(x, r0, c0, nr, nc);
            const SimplerChipTensor yt = simpler_view_2d(y, r0, c0, nr, nc);
            simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
            simpler_task_add_input(&d, &xt);
            simpler_task_add_inout(&d, &yt);
            simpler_task_add_scalar(&d, alpha_bits);
            const int32_t rc = simpler_submit(ops, &d, NULL);
            if (rc != 0) return rc;
        }
    }
    return 0;
}
