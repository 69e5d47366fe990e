/*
 * Test orchestration: b = copy of a (func 0, its scalars are the run's), then c = b + 1
 * (func 1). The second task reads what the first wrote, so the runtime orders them.
 */
#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    if (args->tensor_count != 3) {
        simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, "expected tensors a, b, c");
        return SIMPLER_ORCH_INVALID_ARGS;
    }
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_add_input(&d, &args->tensors[0]);
    simpler_task_add_output_existing(&d, &args->tensors[1]);
    for (uint32_t i = 0; i < args->scalar_count; ++i) simpler_task_add_scalar(&d, args->scalars[i]);
    int32_t rc = simpler_submit(ops, &d, NULL);
    if (rc != 0) return rc;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 1);
    simpler_task_add_input(&d, &args->tensors[1]);
    simpler_task_add_output_existing(&d, &args->tensors[2]);
    return simpler_submit(ops, &d, NULL);
}
