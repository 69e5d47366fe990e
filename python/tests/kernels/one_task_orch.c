/*
 * Test orchestration: one AIV task running func 0 on the run's arguments.
 *
 * Tensor i of the run becomes tensor i of the task, tagged INOUT (the test callables give
 * each tensor argument the direction its kernel needs); every scalar is passed on as is.
 */
#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    for (uint32_t i = 0; i < args->tensor_count; ++i) {
        if (simpler_task_add_inout(&d, &args->tensors[i]) < 0) {
            simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, "too many tensors for one task");
            return SIMPLER_ORCH_INVALID_ARGS;
        }
    }
    for (uint32_t i = 0; i < args->scalar_count; ++i) {
        if (simpler_task_add_scalar(&d, args->scalars[i]) < 0) {
            simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, "too many scalars for one task");
            return SIMPLER_ORCH_INVALID_ARGS;
        }
    }
    return simpler_submit(ops, &d, NULL);
}
