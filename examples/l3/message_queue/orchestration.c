/*
 * message_queue orchestration: one sync-start AIV task running func 0 on the run's
 * arguments — tensor i INOUT, every scalar passed on (here: the queue's region descriptor
 * and the wait timeout). Sync start makes the sim run the kernel in a blocking section, as
 * a kernel that waits on the host (or a peer chip) must be (docs/comm.md §3).
 */
#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_set_blocks(&d, 1, 1);
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
