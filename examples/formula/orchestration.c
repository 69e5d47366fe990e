/*
 * formula orchestration: f = (a + b + 1) * (a + b + 2) + (a + b), element-wise f32.
 *
 * Signature: a (in), b (in), f (out), all f32 [N] (N = 16384 in simpler.toml).
 * Graph (5 AIV tasks, a diamond; edges discovered from the tensors):
 *
 *   t0: c = a + b        func 0 add         c runtime-allocated (OUTPUT)   [outer scope]
 *   --- nested scope ---
 *   t1: d = c + 1.0      func 1 add_scalar  d OUTPUT                       [inner scope]
 *   t2: e = c + 2.0      func 1 add_scalar  e OUTPUT                       [inner scope]
 *   t3: g = d * e        func 2 mul         g OUTPUT                       [inner scope]
 *   t4: f = g + c        func 0 add         f OUTPUT_EXISTING (signature)  [inner scope]
 *   --- end scope: d, e, g are released; c lives on in the outer scope ---
 *
 *   Edges: t0->t1, t0->t2, t1->t3, t2->t3, t3->t4, t0->t4.
 */
#include <stdio.h>

#include "simpler/orchestration.h"

#define FUNC_ADD 0
#define FUNC_ADD_SCALAR 1
#define FUNC_MUL 2

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static int is_f32_vector(const SimplerChipTensor *t) {
    return t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 1;
}

/* Submits a task with one runtime-allocated output and copies that output to *out. */
static int32_t submit_with_output(const SimplerOrchOps *ops, const SimplerTaskDesc *d,
                                  SimplerChipTensor *out) {
    SimplerTaskOutputs outs;
    memset(&outs, 0, sizeof outs);
    const int32_t rc = simpler_submit(ops, d, &outs);
    if (rc != 0) return rc;
    if (outs.count != 1) {
        simpler_report_fatal(ops, SIMPLER_ORCH_EXPLICIT_FATAL,
                             "formula: submit returned no runtime-allocated output");
        return SIMPLER_ORCH_EXPLICIT_FATAL;
    }
    *out = outs.tensors[0];
    return 0;
}

/* Builds the four tasks of the nested scope (t1..t4). */
static int32_t inner(const SimplerOrchOps *ops, const SimplerChipTensor *c,
                     const SimplerChipTensor *f, const uint64_t shape[1]) {
    SimplerTaskDesc d;
    SimplerChipTensor dt, et, gt;
    int32_t rc;

    /* t1: d = c + 1 */
    simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ADD_SCALAR);
    simpler_task_add_input(&d, c);
    simpler_task_add_output(&d, shape, 1, SIMPLER_DT_FLOAT32);
    simpler_task_add_scalar_f32(&d, 1.0f);
    if ((rc = submit_with_output(ops, &d, &dt)) != 0) return rc;

    /* t2: e = c + 2 */
    simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ADD_SCALAR);
    simpler_task_add_input(&d, c);
    simpler_task_add_output(&d, shape, 1, SIMPLER_DT_FLOAT32);
    simpler_task_add_scalar_f32(&d, 2.0f);
    if ((rc = submit_with_output(ops, &d, &et)) != 0) return rc;

    /* t3: g = d * e */
    simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_MUL);
    simpler_task_add_input(&d, &dt);
    simpler_task_add_input(&d, &et);
    simpler_task_add_output(&d, shape, 1, SIMPLER_DT_FLOAT32);
    if ((rc = submit_with_output(ops, &d, &gt)) != 0) return rc;

    /* t4: f = g + c, into the signature's f */
    simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ADD);
    simpler_task_add_input(&d, &gt);
    simpler_task_add_input(&d, c);
    simpler_task_add_output_existing(&d, f);
    return simpler_submit(ops, &d, NULL);
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 3) {
        char msg[128];
        snprintf(msg, sizeof msg, "formula: expected 3 tensors (a, b, f), got %u",
                 (unsigned)args->tensor_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *a = &args->tensors[0];
    const SimplerChipTensor *b = &args->tensors[1];
    const SimplerChipTensor *f = &args->tensors[2];
    if (!is_f32_vector(a) || !is_f32_vector(b) || !is_f32_vector(f)) {
        return invalid_args(ops, "formula: a, b and f must be 1-D f32 tensors");
    }
    const uint64_t shape[1] = {a->shapes[0]};
    if (b->shapes[0] != shape[0] || f->shapes[0] != shape[0]) {
        return invalid_args(ops, "formula: a, b and f must have the same length");
    }

    /* t0: c = a + b (runtime-allocated, owned by the outer scope) */
    SimplerTaskDesc d;
    SimplerChipTensor c;
    simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ADD);
    simpler_task_add_input(&d, a);
    simpler_task_add_input(&d, b);
    simpler_task_add_output(&d, shape, 1, SIMPLER_DT_FLOAT32);
    int32_t rc = submit_with_output(ops, &d, &c);
    if (rc != 0) return rc;

    if ((rc = simpler_scope_begin(ops)) != 0) return rc;
    rc = inner(ops, &c, f, shape);
    const int32_t end_rc = simpler_scope_end(ops); /* keep begin/end balanced even on error */
    return rc != 0 ? rc : end_rc;
}
