/*
 * simpler/collectives.h — the argument layout and op codes of simpler's collective library
 * (allreduce sum, allgather, reduce-scatter of f32 or i32 vectors over a communication
 * domain, one rank per chip; docs/comm.md §4).
 *
 * The library's chip code is one AIV kernel (python/simpler/collectives/kernels/
 * collective.c) and one orchestration (python/simpler/collectives/orchestration.c) that
 * submits it; both include this header. A C orchestration of one's own can submit the same
 * kernel (compiled into its callable under a func id of its choice) with
 * simpler_collective_task below. Every rank of the domain runs the kernel once per
 * collective, all at once: the host (Python's simpler.collectives, Rust's
 * simpler_worker::collectives) submits one group task over the members and counts the
 * rounds. The domain itself (windows, contexts) is made by a level-3 worker's
 * allocate_domain.
 *
 * Task arguments, in this order (the kernel's args[] slots):
 *   0 input       tensor, INPUT            1-D contiguous, f32 or i32
 *   1 output      tensor, OUTPUT_EXISTING  1-D contiguous, input's dtype
 *   2 window      tensor, INOUT            the domain buffer "scratch" of this rank: 1-D
 *                                          contiguous, input's dtype, at least input's length
 *   3 signal      tensor, INOUT            the domain buffer "signal": 1-D contiguous int32
 *                                          (SIMPLER_COLLECTIVE_SIGNAL_WORDS words)
 *   4 device_ctx  scalar u64               address of the rank's SimplerCommContext
 *   5 op          scalar u64               SIMPLER_COLLECTIVE_OP_*
 *   6 round       scalar u64               >= 1: the how-manieth collective on this domain
 *   7 timeout_us  scalar u64               in [1, SIMPLER_COLLECTIVE_MAX_TIMEOUT_US]
 * Shapes with n ranks and `count` elements per rank:
 *   allreduce       input [count],   output [count]
 *   allgather       input [count],   output [n*count]
 *   reduce_scatter  input [n*count], output [count]
 * The task must be a single block with require_sync_start (the kernel waits for its peers).
 * A bad argument fails the task with SIMPLER_COMM_BAD_ARGUMENT (simpler/comm.h); a wait that
 * times out with SIMPLER_COMM_WAIT_TIMEOUT, after which the domain serves no further
 * collective.
 */
#ifndef SIMPLER_COLLECTIVES_H
#define SIMPLER_COLLECTIVES_H

#include <stdint.h>

/* The op scalar. */
#define SIMPLER_COLLECTIVE_OP_ALLREDUCE 0u
#define SIMPLER_COLLECTIVE_OP_ALLGATHER 1u
#define SIMPLER_COLLECTIVE_OP_REDUCE_SCATTER 2u

/* Tensors and scalars of one collective task. */
#define SIMPLER_COLLECTIVE_TENSORS 4u
#define SIMPLER_COLLECTIVE_SCALARS 4u

/* The kernel's args[] slots (tensors first, then scalars). */
#define SIMPLER_COLLECTIVE_ARG_INPUT 0
#define SIMPLER_COLLECTIVE_ARG_OUTPUT 1
#define SIMPLER_COLLECTIVE_ARG_WINDOW 2
#define SIMPLER_COLLECTIVE_ARG_SIGNAL 3
#define SIMPLER_COLLECTIVE_ARG_DEVICE_CTX 4
#define SIMPLER_COLLECTIVE_ARG_OP 5
#define SIMPLER_COLLECTIVE_ARG_ROUND 6
#define SIMPLER_COLLECTIVE_ARG_TIMEOUT_US 7

/* int32 words of a rank's "signal" buffer (64 bytes); the kernel uses word 0. */
#define SIMPLER_COLLECTIVE_SIGNAL_WORDS 16u

/* The longest wait a collective may ask for (40 s): below the chip's default op-execute
 * timeout (45 s), which would otherwise end a rank's kernel first. */
#define SIMPLER_COLLECTIVE_MAX_TIMEOUT_US 40000000ull

#if !defined(__DAV_VEC__) && !defined(__DAV_CUBE__)
#include "simpler/orchestration.h"

/* Fills `d` with the collective task of kernel `func_id` (an AIV kernel built from
 * collective.c): one block, require_sync_start, the four tensors with their tags and the
 * four scalars in the order above. Checks nothing (the kernel does); returns 0, or -1 when
 * the descriptor has no room (it cannot: a fresh descriptor holds them). */
static inline int simpler_collective_task(SimplerTaskDesc *d, int32_t func_id, const SimplerChipTensor *input,
                                          const SimplerChipTensor *output, const SimplerChipTensor *window,
                                          const SimplerChipTensor *signal, uint64_t device_ctx, uint64_t op,
                                          uint64_t round, uint64_t timeout_us) {
    simpler_task_init(d, SIMPLER_CORE_AIV, func_id);
    simpler_task_set_blocks(d, 1, 1);
    if (simpler_task_add_input(d, input) < 0 || simpler_task_add_output_existing(d, output) < 0 ||
        simpler_task_add_inout(d, window) < 0 || simpler_task_add_inout(d, signal) < 0 ||
        simpler_task_add_scalar(d, device_ctx) < 0 || simpler_task_add_scalar(d, op) < 0 ||
        simpler_task_add_scalar(d, round) < 0 || simpler_task_add_scalar(d, timeout_us) < 0)
        return -1;
    return 0;
}
#endif

#endif /* SIMPLER_COLLECTIVES_H */
