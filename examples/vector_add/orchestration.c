/*
 * vector_add orchestration: c = a + b over f32 vectors, tiled.
 *
 * Signature: a (in), b (in), c (out), all f32 [N] (N = 1048576 in simpler.toml).
 * Graph: ceil(N / 4096) independent AIV tasks (256 for N = 1048576). Task t runs kernel
 * func 0 (kernels/add.c) on
 *     INPUT a[t*4096 .. +4096), INPUT b[same], OUTPUT_EXISTING c[same].
 * The tiles do not overlap, so the runtime discovers no edges between them: every task is
 * ready at once and they spread over all AIV cores.
 */
#include <stdio.h>

#include "simpler/orchestration.h"

#define TILE 4096u

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static int is_f32_vector(const SimplerChipTensor *t) {
    return t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 1;
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 3) {
        char msg[128];
        snprintf(msg, sizeof msg, "vector_add: expected 3 tensors (a, b, c), got %u",
                 (unsigned)args->tensor_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *a = &args->tensors[0];
    const SimplerChipTensor *b = &args->tensors[1];
    const SimplerChipTensor *c = &args->tensors[2];
    if (!is_f32_vector(a) || !is_f32_vector(b) || !is_f32_vector(c)) {
        return invalid_args(ops, "vector_add: a, b and c must be 1-D f32 tensors");
    }
    const uint64_t n = a->shapes[0];
    if (b->shapes[0] != n || c->shapes[0] != n) {
        return invalid_args(ops, "vector_add: a, b and c must have the same length");
    }

    SimplerTaskDesc d;
    for (uint64_t off = 0; off < n; off += TILE) {
        const uint64_t len = n - off < TILE ? n - off : TILE;
        const SimplerChipTensor va = simpler_view_1d(a, off, len);
        const SimplerChipTensor vb = simpler_view_1d(b, off, len);
        const SimplerChipTensor vc = simpler_view_1d(c, off, len);
        simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
        simpler_task_add_input(&d, &va);
        simpler_task_add_input(&d, &vb);
        simpler_task_add_output_existing(&d, &vc);
        const int32_t rc = simpler_submit(ops, &d, NULL);
        if (rc != 0) return rc;
    }
    return 0;
}
