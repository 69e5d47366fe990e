/*
 * decoder_layer orchestration: one pre-norm decoder layer at decode time (one new token per
 * sequence), f32, every op a task.
 *
 * Signature (README.md has the shapes):
 *   0 x [B, E]  1 w_norm1 [E]  2 w_qkv [E, (H + 2 KVH) D]  3 w_o [H D, E]  4 w_norm2 [E]
 *   5 w_gate_up [E, 2F] (gate columns first)  6 w_down [F, E]  7 rope [P, D] (row p: cos, sin
 *   of position p)  8 k_cache, 9 v_cache (inout) [NB, BS, KVH, D]  10 block_table i32 [B, MB]
 *   11 context_lens i32 [B] (tokens including the new one, which sits at position len - 1)
 *   12 out [B, E]; scalar eps (f32, RMSNorm).
 *
 * Graph (row tiles of 8 sequences for AIV ops; matmuls in 64 x 64 output tiles chained over
 * K steps of 128 like examples/gemm; tensors between ops are runtime-allocated by one
 * allocation-only task):
 *   h1   = rmsnorm(x) * w_norm1                  AIV func 6, per row tile
 *   qkv  = h1 · w_qkv                            AIC func 5 (examples/gemm's tile kernel)
 *   q, k_cache[slot], v_cache[slot] = rope(qkv)  AIV func 7, per sequence
 *   attn = paged_attention(q, caches)            funcs 0..4, per sequence and KV head, in a
 *                                                nested scope (examples/paged_attention)
 *   o    = attn · w_o;  h = x + o                AIC func 5;  AIV func 9 (vector_add's add)
 *   n2   = rmsnorm(h) * w_norm2                  AIV func 6
 *   gu   = n2 · w_gate_up                        AIC func 5
 *   act  = silu(gate) * up                       AIV func 8
 *   dn   = act · w_down;  out = h + dn           AIC func 5;  AIV func 9
 * Every edge is found by the tensor map (no explicit dependencies); the attention of a
 * sequence reads the cache slot its rope task wrote (RAW through k_cache/v_cache).
 */
#include <stdio.h>

#include "simpler/kernel_math.h"
#include "simpler/orchestration.h"

#include "../paged_attention/attend.h" /* pa_attend; funcs 0..4 */

#define FUNC_MATMUL 5
#define FUNC_RMSNORM 6
#define FUNC_ROPE 7
#define FUNC_SILU_MUL 8
#define FUNC_ADD 9
#define ROW_TILE 8u
#define MN_TILE 64u
#define K_TILE 128u
#define MAX_BATCH 4096u
#define MAX_BLOCKS_PER_SEQ 16384u

static int32_t invalid_args(const SimplerOrchOps *ops, const char *msg) {
    simpler_report_fatal(ops, SIMPLER_ORCH_INVALID_ARGS, msg);
    return SIMPLER_ORCH_INVALID_ARGS;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static int is_f32(const SimplerChipTensor *t, uint32_t ndims) {
    return t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == ndims;
}

/* c = a · b for 2-D f32 views a [M, K], b [K, N], c [M, N], in gemm tiles. */
static int32_t matmul(const SimplerOrchOps *ops, const SimplerChipTensor *a,
                      const SimplerChipTensor *b, const SimplerChipTensor *c) {
    const uint64_t m = a->shapes[0], k = a->shapes[1], n = b->shapes[1];
    SimplerTaskDesc d;
    for (uint64_t k0 = 0; k0 < k; k0 += K_TILE) {
        const uint64_t kt = min_u64(K_TILE, k - k0);
        for (uint64_t i0 = 0; i0 < m; i0 += MN_TILE) {
            const uint64_t mt = min_u64(MN_TILE, m - i0);
            for (uint64_t j0 = 0; j0 < n; j0 += MN_TILE) {
                const uint64_t nt = min_u64(MN_TILE, n - j0);
                const SimplerChipTensor at = simpler_view_2d(a, i0, k0, mt, kt);
                const SimplerChipTensor bt = simpler_view_2d(b, k0, j0, kt, nt);
                const SimplerChipTensor ct = simpler_view_2d(c, i0, j0, mt, nt);
                simpler_task_init(&d, SIMPLER_CORE_AIC, FUNC_MATMUL);
                simpler_task_add_input(&d, &at);
                simpler_task_add_input(&d, &bt);
                if (k0 == 0) simpler_task_add_output_existing(&d, &ct);
                else simpler_task_add_inout(&d, &ct);
                simpler_task_add_scalar(&d, k0 == 0 ? 0 : 1); /* accumulate */
                const int32_t rc = simpler_submit(ops, &d, NULL);
                if (rc != 0) return rc;
            }
        }
    }
    return 0;
}

/* One AIV task per tile of ROW_TILE rows: func(x rows [, y rows or w], out rows [, eps]).
 * `w` (a 1-row gain) is passed whole instead of tiled; eps < 0 means no scalar. */
static int32_t rows_op(const SimplerOrchOps *ops, int32_t func, const SimplerChipTensor *x,
                       const SimplerChipTensor *y, int y_is_gain, const SimplerChipTensor *out,
                       float eps) {
    const uint64_t rows = x->shapes[0], cols = x->shapes[1];
    SimplerTaskDesc d;
    for (uint64_t r0 = 0; r0 < rows; r0 += ROW_TILE) {
        const uint64_t nr = min_u64(ROW_TILE, rows - r0);
        const SimplerChipTensor xt = simpler_view_2d(x, r0, 0, nr, cols);
        const SimplerChipTensor yt = y_is_gain ? *y : simpler_view_2d(y, r0, 0, nr, cols);
        const SimplerChipTensor ot = simpler_view_2d(out, r0, 0, nr, cols);
        simpler_task_init(&d, SIMPLER_CORE_AIV, func);
        simpler_task_add_input(&d, &xt);
        simpler_task_add_input(&d, &yt);
        simpler_task_add_output_existing(&d, &ot);
        if (eps >= 0.0f) simpler_task_add_scalar_f32(&d, eps);
        const int32_t rc = simpler_submit(ops, &d, NULL);
        if (rc != 0) return rc;
    }
    return 0;
}

/* Columns [c0, c0 + n) of row `row` of a 2-D tensor, seen as [n / dim, dim]. */
static SimplerChipTensor heads_of_row(const SimplerChipTensor *t, uint64_t row, uint64_t c0,
                                      uint64_t n, uint64_t dim) {
    return simpler_view_strided_2d(t, row * t->strides[0] + c0 * t->strides[1], n / dim, dim,
                                   dim * t->strides[1], t->strides[1]);
}

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    char msg[256];
    if (args->tensor_count != 13 || args->scalar_count != 1) {
        snprintf(msg, sizeof msg,
                 "decoder_layer: expected 13 tensors and 1 scalar (eps), got %u and %u",
                 (unsigned)args->tensor_count, (unsigned)args->scalar_count);
        return invalid_args(ops, msg);
    }
    const SimplerChipTensor *t = args->tensors;
    const SimplerChipTensor *x = &t[0], *w_norm1 = &t[1], *w_qkv = &t[2], *w_o = &t[3];
    const SimplerChipTensor *w_norm2 = &t[4], *w_gu = &t[5], *w_down = &t[6], *rope = &t[7];
    const SimplerChipTensor *kc = &t[8], *vc = &t[9], *bt = &t[10], *cl = &t[11], *out = &t[12];
    const float eps = simpler_orch_scalar_f32(args, 0);
    if (!is_f32(x, 2) || !is_f32(w_norm1, 1) || !is_f32(w_qkv, 2) || !is_f32(w_o, 2) ||
        !is_f32(w_norm2, 1) || !is_f32(w_gu, 2) || !is_f32(w_down, 2) || !is_f32(rope, 2) ||
        !is_f32(kc, 4) || !is_f32(vc, 4) || !is_f32(out, 2) || bt->ndims != 2 ||
        bt->dtype != SIMPLER_DT_INT32 || cl->ndims != 1 || cl->dtype != SIMPLER_DT_INT32) {
        return invalid_args(ops, "decoder_layer: a tensor has the wrong dtype or rank "
                                 "(README.md lists the signature)");
    }
    if (!(eps >= 0.0f)) return invalid_args(ops, "decoder_layer: eps must be >= 0");
    const uint64_t batch = x->shapes[0], embed = x->shapes[1];
    const uint64_t num_blocks = kc->shapes[0], block_size = kc->shapes[1];
    const uint64_t kv_heads = kc->shapes[2], dim = kc->shapes[3];
    const uint64_t qkv_cols = w_qkv->shapes[1], ffn = w_down->shapes[0];
    const uint64_t heads = qkv_cols / dim >= 2 * kv_heads ? qkv_cols / dim - 2 * kv_heads : 0;
    const uint64_t max_blocks = bt->shapes[1];
    int ok = qkv_cols % dim == 0 && heads > 0 && heads % kv_heads == 0 && dim % 2 == 0;
    ok &= w_norm1->shapes[0] == embed && w_norm2->shapes[0] == embed;
    ok &= w_qkv->shapes[0] == embed && w_o->shapes[0] == heads * dim && w_o->shapes[1] == embed;
    ok &= w_gu->shapes[0] == embed && w_gu->shapes[1] == 2 * ffn && w_down->shapes[1] == embed;
    ok &= rope->shapes[1] == dim && bt->shapes[0] == batch && cl->shapes[0] == batch;
    ok &= out->shapes[0] == batch && out->shapes[1] == embed;
    for (int i = 0; i < 4; ++i) ok &= vc->shapes[i] == kc->shapes[i];
    if (!ok) {
        snprintf(msg, sizeof msg,
                 "decoder_layer: shapes do not agree (x [%llu, %llu], w_qkv [%llu, %llu], "
                 "k_cache [%llu, %llu, %llu, %llu]: heads = %llu); README.md lists them",
                 (unsigned long long)batch, (unsigned long long)embed,
                 (unsigned long long)w_qkv->shapes[0], (unsigned long long)qkv_cols,
                 (unsigned long long)num_blocks, (unsigned long long)block_size,
                 (unsigned long long)kv_heads, (unsigned long long)dim,
                 (unsigned long long)heads);
        return invalid_args(ops, msg);
    }
    if (batch > MAX_BATCH || max_blocks > MAX_BLOCKS_PER_SEQ) {
        snprintf(msg, sizeof msg, "decoder_layer: at most %u sequences of %u blocks",
                 MAX_BATCH, MAX_BLOCKS_PER_SEQ);
        return invalid_args(ops, msg);
    }
    int32_t lens[MAX_BATCH];            /* 16 KiB of stack (the AICPU stack is 2 MiB) */
    int32_t blocks[MAX_BLOCKS_PER_SEQ]; /* 64 KiB */
    int32_t rc = simpler_get_tensor_data(ops, cl, lens, batch * sizeof(int32_t));
    if (rc != 0) return rc;
    for (uint64_t b = 0; b < batch; ++b) {
        if (lens[b] < 1 || (uint64_t)lens[b] > max_blocks * block_size ||
            (uint64_t)lens[b] > rope->shapes[0]) {
            snprintf(msg, sizeof msg,
                     "decoder_layer: context_lens[%llu] = %d is outside 1..=%llu (the block "
                     "table's and the rope table's reach)",
                     (unsigned long long)b, (int)lens[b],
                     (unsigned long long)min_u64(max_blocks * block_size, rope->shapes[0]));
            return invalid_args(ops, msg);
        }
    }

    /* The intermediates, allocated together. */
    enum { H1, QKV, Q, ATTN, O, H, N2, GU, ACT, DN, NBUF };
    const uint64_t shapes[NBUF][SIMPLER_MAX_TENSOR_DIMS] = {
        {batch, embed}, {batch, qkv_cols}, {batch, heads, dim}, {batch, heads, dim},
        {batch, embed}, {batch, embed},    {batch, embed},      {batch, 2 * ffn},
        {batch, ffn},   {batch, embed},
    };
    const uint32_t ndims[NBUF] = {2, 2, 3, 3, 2, 2, 2, 2, 2, 2};
    SimplerDataType dtypes[NBUF];
    for (int i = 0; i < NBUF; ++i) dtypes[i] = SIMPLER_DT_FLOAT32;
    SimplerTaskOutputs bufs;
    memset(&bufs, 0, sizeof bufs);
    if ((rc = simpler_alloc_tensors(ops, NBUF, shapes, ndims, dtypes, &bufs)) != 0) return rc;
    const SimplerChipTensor *v = bufs.tensors;
    const SimplerChipTensor attn2d =
        simpler_view_strided_2d(&v[ATTN], 0, batch, heads * dim, v[ATTN].strides[0], v[ATTN].strides[2]);

    /* attention block */
    if ((rc = rows_op(ops, FUNC_RMSNORM, x, w_norm1, 1, &v[H1], eps)) != 0) return rc;
    if ((rc = matmul(ops, &v[H1], w_qkv, &v[QKV])) != 0) return rc;
    const uint64_t g = heads / kv_heads;
    const float scale = (float)(1.0 / simpler_sqrt_d((double)dim));
    SimplerTaskDesc d;
    for (uint64_t b = 0; b < batch; ++b) {
        const uint64_t len = (uint64_t)lens[b], pos = len - 1;
        const uint64_t used = (len + block_size - 1) / block_size;
        const SimplerChipTensor row = simpler_view_2d(bt, b, 0, 1, used);
        if ((rc = simpler_get_tensor_data(ops, &row, blocks, used * sizeof(int32_t))) != 0) return rc;
        for (uint64_t j = 0; j < used; ++j) {
            if (blocks[j] < 0 || (uint64_t)blocks[j] >= num_blocks) {
                snprintf(msg, sizeof msg,
                         "decoder_layer: block_table[%llu][%llu] = %d is not a block of the "
                         "cache (0..%llu)",
                         (unsigned long long)b, (unsigned long long)j, (int)blocks[j],
                         (unsigned long long)num_blocks);
                return invalid_args(ops, msg);
            }
        }
        /* rope of q and k; k and v into the cache slot of position pos */
        const SimplerChipTensor q_in = heads_of_row(&v[QKV], b, 0, heads * dim, dim);
        const SimplerChipTensor k_in = heads_of_row(&v[QKV], b, heads * dim, kv_heads * dim, dim);
        const SimplerChipTensor v_in =
            heads_of_row(&v[QKV], b, (heads + kv_heads) * dim, kv_heads * dim, dim);
        const SimplerChipTensor rope_row = simpler_view_2d(rope, pos, 0, 1, dim);
        const SimplerChipTensor q_out = simpler_view_strided_2d(
            &v[Q], simpler_offset_3d(&v[Q], b, 0, 0), heads, dim, v[Q].strides[1], v[Q].strides[2]);
        const uint64_t blk = (uint64_t)blocks[pos / block_size], slot = pos % block_size;
        const SimplerChipTensor k_slot = simpler_view_strided_2d(
            kc, blk * kc->strides[0] + slot * kc->strides[1], kv_heads, dim, kc->strides[2], kc->strides[3]);
        const SimplerChipTensor v_slot = simpler_view_strided_2d(
            vc, blk * vc->strides[0] + slot * vc->strides[1], kv_heads, dim, vc->strides[2], vc->strides[3]);
        simpler_task_init(&d, SIMPLER_CORE_AIV, FUNC_ROPE);
        simpler_task_add_input(&d, &q_in);
        simpler_task_add_input(&d, &k_in);
        simpler_task_add_input(&d, &v_in);
        simpler_task_add_input(&d, &rope_row);
        simpler_task_add_output_existing(&d, &q_out);
        simpler_task_add_output_existing(&d, &k_slot);
        simpler_task_add_output_existing(&d, &v_slot);
        if ((rc = simpler_submit(ops, &d, NULL)) != 0) return rc;
        for (uint64_t h = 0; h < kv_heads; ++h) {
            if ((rc = simpler_scope_begin(ops)) != 0) return rc;
            rc = pa_attend(ops, &v[Q], kc, vc, &v[ATTN], b, h, g, dim, block_size, len, blocks, scale);
            const int32_t end = simpler_scope_end(ops);
            if (rc != 0) return rc;
            if (end != 0) return end;
        }
    }
    if ((rc = matmul(ops, &attn2d, w_o, &v[O])) != 0) return rc;
    if ((rc = rows_op(ops, FUNC_ADD, x, &v[O], 0, &v[H], -1.0f)) != 0) return rc;

    /* MLP block */
    if ((rc = rows_op(ops, FUNC_RMSNORM, &v[H], w_norm2, 1, &v[N2], eps)) != 0) return rc;
    if ((rc = matmul(ops, &v[N2], w_gu, &v[GU])) != 0) return rc;
    const SimplerChipTensor gate = simpler_view_2d(&v[GU], 0, 0, batch, ffn);
    const SimplerChipTensor up = simpler_view_2d(&v[GU], 0, ffn, batch, ffn);
    if ((rc = rows_op(ops, FUNC_SILU_MUL, &gate, &up, 0, &v[ACT], -1.0f)) != 0) return rc;
    if ((rc = matmul(ops, &v[ACT], w_down, &v[DN])) != 0) return rc;
    return rows_op(ops, FUNC_ADD, &v[H], &v[DN], 0, out, -1.0f);
}
