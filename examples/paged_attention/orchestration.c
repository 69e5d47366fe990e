/*
 * paged_attention orchestration: one decode step of grouped-query attention over a paged
 * KV cache, f32 output (q, k_cache and v_cache may be f32, f16 or bf16).
 *
 * Signature (README.md has the layout):
 *   q            (in)  [batch, num_heads, head_dim]
 *   k_cache      (in)  [num_blocks, block_size, num_kv_heads, head_dim]
 *   v_cache      (in)  [num_blocks, block_size, num_kv_heads, head_dim]
 *   block_table  (in)  i32 [batch, max_blocks_per_seq]: physical block of each logical block
 *   context_lens (in)  i32 [batch]: tokens of each sequence, 1..=max_blocks_per_seq*block_size
 *   out          (out) f32 [batch, num_heads, head_dim]
 * num_heads = g * num_kv_heads; query heads h*g .. h*g+g-1 share KV head h.
 *
 * Graph, per sequence b and KV head h (one nested scope each, so the intermediates are
 * reclaimed as soon as the pair is done), per KV block j of the sequence (n = the block's
 * valid tokens, block_size except maybe for the last one):
 *   qk_j  AIC func 0  INPUT Q(b,h) [g, D], INPUT K(block, h) [n, D]   -> OUTPUT S [g, n]
 *   sm_j  AIV func 1  INPUT S, state (OUTPUT for j = 0, INOUT after)  -> OUTPUT P [g, n]
 *   pv_j  AIC func 2  INPUT P, INPUT V(block, h) [n, D]               -> OUTPUT O [g, D]
 *   up_j  AIV func 3  INPUT O, INPUT state, acc (OUTPUT for j = 0, INOUT after)
 * then  norm AIV func 4  INPUT acc, INPUT state -> OUTPUT_EXISTING out(b, h) [g, D].
 * 4 * blocks + 1 tasks per (b, h); no explicit dependencies: sm_j waits for qk_j (S), for
 * sm_{j-1} (RAW on state) and for up_{j-1} (WAR: up_{j-1} reads alpha from state);
 * up_j waits for pv_j, sm_j and up_{j-1}. The qk tasks of one (b, h) are independent.
 * The block table and context lengths are read with simpler_get_tensor_data; the graph of
 * one (b, h) is pa_attend in attend.h (shared with examples/decoder_layer).
 */
#include <stdio.h>

#include "simpler/kernel_math.h"
#include "simpler/orchestration.h"

#include "attend.h" /* pa_attend: the graph of one (sequence, KV head) */

#define MAX_BATCH 4096u
#define MAX_BLOCKS_PER_SEQ 16384u

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static int is_float(const SimplerChipTensor *t) { return simpler_is_float_dtype(t->dtype); }

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    char msg[256];
    if (args->tensor_count != 6 || args->scalar_count != 0) {
        snprintf(msg, sizeof msg,
                 "paged_attention: expected 6 tensors (q, k_cache, v_cache, block_table, "
                 "context_lens, out) and no scalar, got %u and %u",
                 (unsigned)args->tensor_count, (unsigned)args->scalar_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *q = &args->tensors[0], *kc = &args->tensors[1];
    const SimplerChipTensor *vc = &args->tensors[2], *bt = &args->tensors[3];
    const SimplerChipTensor *cl = &args->tensors[4], *out = &args->tensors[5];
    if (q->ndims != 3 || !is_float(q) || kc->ndims != 4 || !is_float(kc) || vc->ndims != 4 ||
        !is_float(vc)) {
        return invalid_args(ops, "paged_attention: q must be 3-D and k_cache, v_cache 4-D, "
                                 "each f32, f16 or bf16");
    }
    if (bt->ndims != 2 || bt->dtype != SIMPLER_DT_INT32 || cl->ndims != 1 ||
        cl->dtype != SIMPLER_DT_INT32 || out->ndims != 3 || out->dtype != SIMPLER_DT_FLOAT32) {
        return invalid_args(ops, "paged_attention: block_table must be i32 [batch, max_blocks], "
                                 "context_lens i32 [batch] and out f32 [batch, heads, dim]");
    }
    const uint64_t batch = q->shapes[0], heads = q->shapes[1], dim = q->shapes[2];
    const uint64_t num_blocks = kc->shapes[0], block_size = kc->shapes[1];
    const uint64_t kv_heads = kc->shapes[2], max_blocks = bt->shapes[1];
    int same_cache = 1;
    for (int i = 0; i < 4; ++i) same_cache &= vc->shapes[i] == kc->shapes[i];
    if (!same_cache || kc->shapes[3] != dim || bt->shapes[0] != batch ||
        cl->shapes[0] != batch || out->shapes[0] != batch || out->shapes[1] != heads ||
        out->shapes[2] != dim) {
        snprintf(msg, sizeof msg,
                 "paged_attention: shapes do not agree: q [%llu, %llu, %llu], k_cache [%llu, "
                 "%llu, %llu, %llu], block_table [%llu, %llu], context_lens [%llu]",
                 (unsigned long long)batch, (unsigned long long)heads,
                 (unsigned long long)dim, (unsigned long long)num_blocks,
                 (unsigned long long)block_size, (unsigned long long)kv_heads,
                 (unsigned long long)kc->shapes[3], (unsigned long long)bt->shapes[0],
                 (unsigned long long)max_blocks, (unsigned long long)cl->shapes[0]);
        return invalid_args(ops, msg);
    }
    if (heads % kv_heads != 0) {
        snprintf(msg, sizeof msg,
                 "paged_attention: num_heads %llu is not a multiple of num_kv_heads %llu",
                 (unsigned long long)heads, (unsigned long long)kv_heads);
        return invalid_args(ops, msg);
    }
    if (batch > MAX_BATCH || max_blocks > MAX_BLOCKS_PER_SEQ) {
        snprintf(msg, sizeof msg,
                 "paged_attention: at most %u sequences of %u blocks, got %llu of %llu",
                 MAX_BATCH, MAX_BLOCKS_PER_SEQ, (unsigned long long)batch,
                 (unsigned long long)max_blocks);
        return invalid_args(ops, msg);
    }
    int32_t lens[MAX_BATCH];            /* 16 KiB of stack (the AICPU stack is 2 MiB) */
    int32_t blocks[MAX_BLOCKS_PER_SEQ]; /* 64 KiB */
    int32_t rc = simpler_get_tensor_data(ops, cl, lens, batch * sizeof(int32_t));
    if (rc != 0) return rc;
    const uint64_t g = heads / kv_heads;
    const float scale = (float)(1.0 / simpler_sqrt_d((double)dim));
    for (uint64_t b = 0; b < batch; ++b) {
        if (lens[b] < 1 || (uint64_t)lens[b] > max_blocks * block_size) {
            snprintf(msg, sizeof msg,
                     "paged_attention: context_lens[%llu] = %d is outside 1..=%llu "
                     "(max_blocks_per_seq * block_size)",
                     (unsigned long long)b, (int)lens[b],
                     (unsigned long long)(max_blocks * block_size));
            return invalid_args(ops, msg);
        }
        const uint64_t len = (uint64_t)lens[b];
        const uint64_t used = (len + block_size - 1) / block_size;
        const SimplerChipTensor row = simpler_view_2d(bt, b, 0, 1, used);
        if ((rc = simpler_get_tensor_data(ops, &row, blocks, used * sizeof(int32_t))) != 0) return rc;
        for (uint64_t j = 0; j < used; ++j) {
            if (blocks[j] < 0 || (uint64_t)blocks[j] >= num_blocks) {
                snprintf(msg, sizeof msg,
                         "paged_attention: block_table[%llu][%llu] = %d is not a block of the "
                         "cache (0..%llu)",
                         (unsigned long long)b, (unsigned long long)j, (int)blocks[j],
                         (unsigned long long)num_blocks);
                return invalid_args(ops, msg);
            }
        }
        for (uint64_t h = 0; h < kv_heads; ++h) {
            if ((rc = simpler_scope_begin(ops)) != 0) return rc;
            rc = pa_attend(ops, q, kc, vc, out, b, h, g, dim, block_size, len, blocks, scale);
            const int32_t end = simpler_scope_end(ops);
            if (rc != 0) return rc;
            if (end != 0) return end;
        }
    }
    return 0;
}
