/*
 * Test orchestration: one AIV task running func 0 on x (INOUT) with the scalar alpha, and a
 * get_tensor_data of x[0]: before the task when `after` (scalar 1) is 0 (it waits for
 * nothing), after it otherwise (it waits for the task: under host_build_graph the task has
 * not run yet, and the call is refused).
 *
 * Signature: x (inout f32), alpha (scalar f32), after (scalar u64).
 */
#include "simpler/orchestration.h"

static int32_t read_first(const SimplerOrchOps *ops, const SimplerChipTensor *x) {
    const SimplerChipTensor first = simpler_view_1d(x, 0, 1);
    float value;
    return simpler_get_tensor_data(ops, &first, &value, sizeof value);
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    const uint64_t after = simpler_orch_scalar_u64(args, 1);
    int32_t rc;
    if (!after && (rc = read_first(ops, &args->tensors[0])) != 0) return rc;
    SimplerTaskDesc d;
    simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
    simpler_task_add_inout(&d, &args->tensors[0]);
    simpler_task_add_scalar(&d, args->scalars[0]);
    if ((rc = simpler_submit(ops, &d, NULL)) != 0) return rc;
    return after ? read_first(ops, &args->tensors[0]) : 0;
}
