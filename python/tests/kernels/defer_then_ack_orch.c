/*
 * Test orchestration: func 0 on x (INOUT), then func 1 reading x (INPUT), both with every
 * scalar of the run: the second task runs after the first completes.
 */
#include "simpler/orchestration.h"

static int32_t submit(const SimplerOrchOps *ops, const SimplerOrchArgs *args, int32_t func, int inout) {
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, func);
    if (inout) simpler_task_add_inout(&d, &args->tensors[0]);
    else simpler_task_add_input(&d, &args->tensors[0]);
    for (uint32_t i = 0; i < args->scalar_count; ++i) simpler_task_add_scalar(&d, args->scalars[i]);
    return simpler_submit(ops, &d, NULL);
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 1) {
        simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, "expected one tensor x");
        return SIMPLER_ORCH_INVALID_ARGS;
    }
    const int32_t rc = submit(ops, args, 0, 1);
    return rc != 0 ? rc : submit(ops, args, 1, 0);
}
