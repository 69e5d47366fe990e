/*
 * softmax orchestration: row-wise softmax y = exp(x - max_row) / sum_row, f32.
 *
 * Signature: x (in) [R, C], y (out) [R, C] (1024 x 256 in simpler.toml).
 * Graph, in blocks of 64 rows (16 blocks for R = 1024):
 *   phase 1, one AIV task per block (func 0, kernels/row_stats.c):
 *       INPUT x[block], OUTPUT stats [64, 2] (runtime-allocated: max and sum of exp per row)
 *   phase 2, one AIV task per block (func 1, kernels/row_normalize.c):
 *       INPUT x[block], INPUT stats (from phase 1), OUTPUT_EXISTING y[block]
 * 16 + 16 = 32 tasks; each phase-2 task depends (RAW on its stats) on the phase-1 task of
 * the same block only. All of phase 1 is submitted first.
 */
#include <stdio.h>

#include "simpler/orchestration.h"

#define BLOCK_ROWS 64u
#define MAX_BLOCKS 64u /* stats views kept between the phases (8 KiB of stack) */
#define FUNC_ROW_STATS 0
#define FUNC_ROW_NORMALIZE 1

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static int is_f32_matrix(const SimplerChipTensor *t) {
    return t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 2;
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 2) {
        char msg[128];
        snprintf(msg, sizeof msg, "softmax: expected 2 tensors (x, y), got %u",
                 (unsigned)args->tensor_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *x = &args->tensors[0];
    const SimplerChipTensor *y = &args->tensors[1];
    if (!is_f32_matrix(x) || !is_f32_matrix(y)) {
        return invalid_args(ops, "softmax: x and y must be 2-D f32 tensors");
    }
    const uint64_t rows = x->shapes[0], cols = x->shapes[1];
    if (y->shapes[0] != rows || y->shapes[1] != cols) {
        return invalid_args(ops, "softmax: x and y must have the same shape");
    }
    if (cols == 0) {
        return invalid_args(ops, "softmax: rows must not be empty");
    }
    const uint64_t blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    if (blocks > MAX_BLOCKS) {
        char msg[128];
        snprintf(msg, sizeof msg, "softmax: at most %u rows supported, got %llu",
                 MAX_BLOCKS * BLOCK_ROWS, (unsigned long long)rows);
        return invalid_args(ops, msg);
    }

    SimplerChipTensor stats[MAX_BLOCKS];
    SimplerTaskDesc d;
    SimplerTaskOutputs outs;
    int32_t rc;

    /* phase 1: per-row max and sum of exp, one runtime-allocated [rows, 2] tensor per block */
    for (uint64_t blk = 0; blk < blocks; ++blk) {
        const uint64_t r0 = blk * BLOCK_ROWS;
        const uint64_t nr = rows - r0 < BLOCK_ROWS ? rows - r0 : BLOCK_ROWS;
        const SimplerChipTensor xb = simpler_view_2d(x, r0, 0, nr, cols);
        const uint64_t stats_shape[2] = {nr, 2};
        simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ROW_STATS);
        simpler_task_add_input(&d, &xb);
        simpler_task_add_output(&d, stats_shape, 2, SIMPLER_DT_FLOAT32);
        memset(&outs, 0, sizeof outs);
        if ((rc = simpler_submit(ops, &d, &outs)) != 0) return rc;
        if (outs.count != 1) {
            simpler_report_fatal(ops, SIMPLER_ORCH_EXPLICIT_FATAL,
                                 "softmax: submit returned no stats tensor");
            return SIMPLER_ORCH_EXPLICIT_FATAL;
        }
        stats[blk] = outs.tensors[0];
    }

    /* phase 2: y = exp(x - max) / sum */
    for (uint64_t blk = 0; blk < blocks; ++blk) {
        const uint64_t r0 = blk * BLOCK_ROWS;
        const uint64_t nr = rows - r0 < BLOCK_ROWS ? rows - r0 : BLOCK_ROWS;
        const SimplerChipTensor xb = simpler_view_2d(x, r0, 0, nr, cols);
        const SimplerChipTensor yb = simpler_view_2d(y, r0, 0, nr, cols);
        simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ROW_NORMALIZE);
        simpler_task_add_input(&d, &xb);
        simpler_task_add_input(&d, &stats[blk]);
        simpler_task_add_output_existing(&d, &yb);
        if ((rc = simpler_submit(ops, &d, NULL)) != 0) return rc;
    }
    return 0;
}
