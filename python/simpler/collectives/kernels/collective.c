/*
 * collective.c — AIV kernel of simpler's collective library: allreduce (sum), allgather and
 * reduce-scatter across the ranks of a communication domain, for f32 and i32 (the dtype is
 * read from the tensors). Every rank of the domain runs this kernel once per collective;
 * the kernel talks to its peers through include/simpler/comm.h (rules: docs/comm.md).
 *
 * Arguments (as python/simpler/collectives/orchestration.c submits them; the layout and op
 * codes are declared once in simpler/collectives.h):
 *   tensor 0 input     1-D contiguous, f32 or i32
 *   tensor 1 output    1-D contiguous, input's dtype (written)
 *   tensor 2 window    the domain buffer "scratch": 1-D contiguous, input's dtype, inside
 *                      the own window (read by the peers)
 *   tensor 3 signal    the domain buffer "signal": 1-D contiguous int32 inside the own
 *                      window; element 0 counts the peers' arrivals over all rounds
 *   scalar 4 device_ctx  address of the rank's SimplerCommContext
 *   scalar 5 op          0 allreduce, 1 allgather, 2 reduce_scatter
 *   scalar 6 round       >= 1: the how-manieth collective on this domain (the host counts)
 *   scalar 7 timeout_us  > 0: the limit of each wait (the arrivals, then the barrier)
 * With n ranks and this rank r, `count` elements per rank:
 *   allreduce       input [count],   output [count]:   output = sum over p of input_p
 *   allgather       input [count],   output [n*count]: output[p*count ..] = input_p
 *   reduce_scatter  input [n*count], output [count]:   output = sum over p of input_p[r*count ..]
 * window holds at least as many elements as input.
 *
 * Protocol of round k: copy input into the own window; add 1 to signal[0] of every peer;
 * wait until the own signal[0] >= k*(n-1) (every peer's window holds its round-k input —
 * no peer can be in round k+1 before this rank passed round k's barrier); read the peers'
 * windows into output; barrier (nobody overwrites its window for round k+1 while a peer
 * still reads it). i32 sums wrap (computed in uint32); f32 sums add in rank order 0..n-1,
 * so every rank gets the same bits.
 *
 * Fails the run (GlobalContext.fatal_code) with SIMPLER_COMM_BAD_ARGUMENT for a bad
 * argument (checked before anything is written), with the code of a failed notify, wait or
 * barrier (SIMPLER_COMM_WAIT_TIMEOUT, SIMPLER_COMM_PEER_FAILED), or with 1000 + T for a task
 * of other argument counts; after a timeout or a peer failure the domain's arrival counts
 * no longer match the rounds, so it serves no further collective (docs/comm.md §3). Must run
 * as a single block of a require_sync_start task.
 */
#include "simpler/collectives.h"
#include "simpler/comm.h"

#define OP_ALLREDUCE SIMPLER_COLLECTIVE_OP_ALLREDUCE
#define OP_ALLGATHER SIMPLER_COLLECTIVE_OP_ALLGATHER
#define OP_REDUCE_SCATTER SIMPLER_COLLECTIVE_OP_REDUCE_SCATTER

/* A 1-D contiguous view of dtype `dt` inside its buffer: its first element and length. */
static int vector_of(const SimplerChipTensor *t, uint32_t dt, void **data, uint64_t *len) {
    if (t == NULL || t->dtype != dt || t->ndims != 1 || t->strides[0] != 1 || t->shapes[0] == 0) return 0;
    const uint64_t esize = simpler_dtype_size(dt);
    if (t->start_offset > t->buffer_size / esize || t->shapes[0] > t->buffer_size / esize - t->start_offset) return 0;
    *data = (unsigned char *)(uintptr_t)t->buffer_addr + t->start_offset * esize;
    *len = t->shapes[0];
    return 1;
}

/* 1 if the `bytes` bytes at p lie in the own window of ctx. */
static int in_own_window(const SimplerCommContext *ctx, const void *p, uint64_t bytes) {
    return simpler_comm_peer_ptr(ctx, p, ctx->rank_id) != NULL &&
           simpler_comm_peer_ptr(ctx, (const unsigned char *)p + bytes - 1, ctx->rank_id) != NULL;
}

/* out[i] = sum over p of src[p][i], i < count, in rank order. */
static void sum_f32(float *out, const float *const *src, uint32_t n, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) out[i] = src[0][i];
    for (uint32_t p = 1; p < n; ++p)
        for (uint64_t i = 0; i < count; ++i) out[i] += src[p][i];
}
static void sum_i32(uint32_t *out, const uint32_t *const *src, uint32_t n, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) out[i] = src[0][i];
    for (uint32_t p = 1; p < n; ++p)
        for (uint64_t i = 0; i < count; ++i) out[i] += src[p][i];
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, SIMPLER_COLLECTIVE_TENSORS, SIMPLER_COLLECTIVE_SCALARS)) return;
    const SimplerCommContext *ctx =
        (const SimplerCommContext *)(uintptr_t)simpler_arg_u64(args, SIMPLER_COLLECTIVE_ARG_DEVICE_CTX);
    const uint64_t op = simpler_arg_u64(args, SIMPLER_COLLECTIVE_ARG_OP);
    const uint64_t round = simpler_arg_u64(args, SIMPLER_COLLECTIVE_ARG_ROUND);
    const uint64_t timeout_us = simpler_arg_u64(args, SIMPLER_COLLECTIVE_ARG_TIMEOUT_US);
    const SimplerChipTensor *in_t = simpler_arg_tensor(args, SIMPLER_COLLECTIVE_ARG_INPUT);
    void *in = NULL, *out = NULL, *win = NULL, *sig = NULL;
    uint64_t in_len = 0, out_len = 0, win_len = 0, sig_len = 0;
    const uint32_t dt = in_t != NULL ? in_t->dtype : UINT32_MAX;
    if (ctx == NULL || ctx->rank_num == 0 || ctx->rank_num > SIMPLER_COMM_MAX_RANKS || ctx->rank_id >= ctx->rank_num ||
        simpler_block_num(args) != 1 || (dt != SIMPLER_DT_FLOAT32 && dt != SIMPLER_DT_INT32) ||
        !vector_of(in_t, dt, &in, &in_len) ||
        !vector_of(simpler_arg_tensor(args, SIMPLER_COLLECTIVE_ARG_OUTPUT), dt, &out, &out_len) ||
        !vector_of(simpler_arg_tensor(args, SIMPLER_COLLECTIVE_ARG_WINDOW), dt, &win, &win_len) ||
        !vector_of(simpler_arg_tensor(args, SIMPLER_COLLECTIVE_ARG_SIGNAL), SIMPLER_DT_INT32, &sig, &sig_len) || round == 0 || timeout_us == 0) {
        simpler_comm_fail(args, SIMPLER_COMM_BAD_ARGUMENT);
        return;
    }
    const uint32_t n = ctx->rank_num, r = ctx->rank_id;
    /* count: elements per rank; shapes must match the op exactly. */
    uint64_t count;
    if (op == OP_ALLREDUCE && out_len == in_len) count = in_len;
    else if (op == OP_ALLGATHER && out_len / n == in_len && out_len % n == 0) count = in_len;
    else if (op == OP_REDUCE_SCATTER && in_len / n == out_len && in_len % n == 0) count = out_len;
    else count = 0;
    /* The arrivals of `round` rounds must fit the int32 signal. */
    if (count == 0 || win_len < in_len || round > (uint64_t)INT32_MAX / (n > 1 ? n - 1 : 1) ||
        !in_own_window(ctx, win, in_len * 4) || !in_own_window(ctx, sig, sizeof(int32_t))) {
        simpler_comm_fail(args, SIMPLER_COMM_BAD_ARGUMENT);
        return;
    }

    memmove(win, in, in_len * 4); /* input may be the window itself */
    int32_t *arrivals = (int32_t *)sig;
    for (uint32_t p = 0; p < n; ++p) {
        if (p == r) continue;
        const int32_t rc = simpler_comm_notify(ctx, arrivals, p, 1, SIMPLER_COMM_NOTIFY_ADD);
        if (rc != SIMPLER_COMM_OK) {
            simpler_comm_fail(args, rc);
            return;
        }
    }
    int32_t rc = simpler_comm_wait(ctx, arrivals, SIMPLER_COMM_CMP_GE, (int32_t)(round * (n - 1)), timeout_us);
    if (rc != SIMPLER_COMM_OK) {
        simpler_comm_fail(args, rc);
        return;
    }

    const void *peer[SIMPLER_COMM_MAX_RANKS];
    for (uint32_t p = 0; p < n; ++p) peer[p] = simpler_comm_peer_ptr(ctx, win, p);
    if (op == OP_ALLGATHER) {
        for (uint32_t p = 0; p < n; ++p) memcpy((unsigned char *)out + (uint64_t)p * count * 4, peer[p], count * 4);
    } else {
        const uint64_t first = op == OP_REDUCE_SCATTER ? (uint64_t)r * count : 0;
        if (dt == SIMPLER_DT_FLOAT32) {
            const float *src[SIMPLER_COMM_MAX_RANKS];
            for (uint32_t p = 0; p < n; ++p) src[p] = (const float *)peer[p] + first;
            sum_f32((float *)out, src, n, count);
        } else {
            const uint32_t *src[SIMPLER_COMM_MAX_RANKS];
            for (uint32_t p = 0; p < n; ++p) src[p] = (const uint32_t *)peer[p] + first;
            sum_i32((uint32_t *)out, src, n, count);
        }
    }

    rc = simpler_comm_barrier(ctx, timeout_us);
    if (rc != SIMPLER_COMM_OK) simpler_comm_fail(args, rc);
}
