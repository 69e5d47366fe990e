/*
 * orchestration.c — orchestration of simpler's collective library: one collective
 * (allreduce, allgather or reduce_scatter) of one rank of a communication domain.
 *
 * The argument layout and op codes are declared once in simpler/collectives.h.
 * Signature (order fixed):
 *   tensor 0 input     (in)     1-D contiguous, f32 or i32
 *   tensor 1 output    (out)    1-D contiguous, input's dtype
 *   tensor 2 window    (inout)  the domain buffer "scratch": 1-D contiguous, input's dtype
 *   tensor 3 signal    (inout)  the domain buffer "signal": 1-D contiguous int32
 *   scalar 0 device_ctx (u64)   address of the rank's SimplerCommContext (non-zero)
 *   scalar 1 op         (u64)   0 allreduce, 1 allgather, 2 reduce_scatter
 *   scalar 2 round      (u64)   >= 1: the how-manieth collective on this domain
 *   scalar 3 timeout_us (u64)   > 0: the limit of each of the kernel's waits
 * Shapes, with `count` elements per rank: allreduce input [count] -> output [count];
 * allgather input [count] -> output [n*count]; reduce_scatter input [n*count] -> output
 * [count]; window holds at least as many elements as input. (n is the domain's rank count;
 * the kernel checks the shapes against it.)
 *
 * Graph: ONE AIV task, func 0 (kernels/collective.c), on INPUT input, OUTPUT_EXISTING
 * output, INOUT window, INOUT signal and the four scalars, submitted with require_sync_start
 * (simpler_task_set_blocks(&d, 1, 1)): the kernel waits for the peer chips, so the runtime
 * must run it where such a wait cannot hold up other cores (docs/comm.md,
 * docs/sim-device.md §11). Bad arguments fail the run with SIMPLER_ORCH_INVALID_ARGS and a
 * message naming the argument.
 */
#include <stdio.h>

#include "simpler/collectives.h"
#include "simpler/orchestration.h"

#define OP_ALLREDUCE SIMPLER_COLLECTIVE_OP_ALLREDUCE
#define OP_ALLGATHER SIMPLER_COLLECTIVE_OP_ALLGATHER
#define OP_REDUCE_SCATTER SIMPLER_COLLECTIVE_OP_REDUCE_SCATTER

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

/* 1 if t is a non-empty 1-D contiguous tensor of dtype dt. */
static int is_vector(const SimplerChipTensor *t, uint32_t dt) {
    return t->dtype == dt && t->ndims == 1 && t->strides[0] == 1 && t->shapes[0] > 0;
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops, const SimplerOrchArgs *args) {
    char msg[192];
    if (args->tensor_count != SIMPLER_COLLECTIVE_TENSORS || args->scalar_count != SIMPLER_COLLECTIVE_SCALARS) {
        snprintf(msg, sizeof msg,
                 "collective: expected 4 tensors (input, output, window, signal) and 4 scalars "
                 "(device_ctx, op, round, timeout_us), got %u and %u",
                 (unsigned)args->tensor_count, (unsigned)args->scalar_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *input = &args->tensors[0], *output = &args->tensors[1];
    const SimplerChipTensor *window = &args->tensors[2], *signal = &args->tensors[3];
    const uint32_t dt = input->dtype;
    if (dt != SIMPLER_DT_FLOAT32 && dt != SIMPLER_DT_INT32) return invalid_args(ops, "collective: input must be f32 or i32");
    if (!is_vector(input, dt)) return invalid_args(ops, "collective: input must be a non-empty 1-D contiguous tensor");
    if (!is_vector(output, dt))
        return invalid_args(ops, "collective: output must be a non-empty 1-D contiguous tensor of input's dtype");
    if (!is_vector(window, dt))
        return invalid_args(ops, "collective: window must be a non-empty 1-D contiguous tensor of input's dtype");
    if (!is_vector(signal, SIMPLER_DT_INT32))
        return invalid_args(ops, "collective: signal must be a non-empty 1-D contiguous i32 tensor");
    const uint64_t device_ctx = simpler_orch_scalar_u64(args, 0), op = simpler_orch_scalar_u64(args, 1);
    const uint64_t round = simpler_orch_scalar_u64(args, 2), timeout_us = simpler_orch_scalar_u64(args, 3);
    if (device_ctx == 0) return invalid_args(ops, "collective: device_ctx must be the address of the rank's context, got 0");
    if (op > OP_REDUCE_SCATTER) {
        snprintf(msg, sizeof msg, "collective: op must be 0 (allreduce), 1 (allgather) or 2 (reduce_scatter), got %llu",
                 (unsigned long long)op);
        return invalid_args(ops, msg);
    }
    if (round == 0) return invalid_args(ops, "collective: round must be >= 1");
    if (timeout_us == 0) return invalid_args(ops, "collective: timeout_us must be > 0");
    const uint64_t in = input->shapes[0], out = output->shapes[0];
    if (op == OP_ALLREDUCE && out != in) return invalid_args(ops, "collective: allreduce output must have input's length");
    if (op == OP_ALLGATHER && out % in != 0)
        return invalid_args(ops, "collective: allgather output length must be a multiple of input's (ranks * count)");
    if (op == OP_REDUCE_SCATTER && in % out != 0)
        return invalid_args(ops, "collective: reduce_scatter input length must be a multiple of output's (ranks * count)");
    if (window->shapes[0] < in) {
        snprintf(msg, sizeof msg, "collective: window holds %llu elements, input needs %llu",
                 (unsigned long long)window->shapes[0], (unsigned long long)in);
        return invalid_args(ops, msg);
    }

    SimplerTaskDesc d;
    if (simpler_collective_task(&d, 0, input, output, window, signal, device_ctx, op, round, timeout_us) != 0)
        return invalid_args(ops, "collective: the task descriptor has no room for the arguments");
    return simpler_submit(ops, &d, NULL);
}
