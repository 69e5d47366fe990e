/*
 * attend.h — the paged-attention task graph of one (sequence, KV head), for orchestrations.
 *
 * Included by examples/paged_attention/orchestration.c and examples/decoder_layer's
 * orchestration, which submit it per sequence and KV head inside a nested scope of their
 * own. The kernels it submits must be registered under PA_FUNC_QK .. PA_FUNC_NORMALIZE
 * (override the defines before including to renumber them); the graph is described in
 * examples/paged_attention/README.md.
 */
#ifndef PAGED_ATTENTION_ATTEND_H
#define PAGED_ATTENTION_ATTEND_H

#include "simpler/orchestration.h"

#ifndef PA_FUNC_QK
#define PA_FUNC_QK 0        /* kernels/qk_matmul.c, AIC */
#define PA_FUNC_SOFTMAX 1   /* kernels/softmax_update.c, AIV */
#define PA_FUNC_PV 2        /* kernels/pv_matmul.c, AIC */
#define PA_FUNC_UPDATE 3    /* kernels/online_update.c, AIV */
#define PA_FUNC_NORMALIZE 4 /* kernels/normalize.c, AIV */
#endif

/* The runtime-allocated outputs of one submit, which must be `want` of them. */
static inline int32_t pa_submit_expect(const SimplerOrchOps *ops, const SimplerTaskDesc *d,
                             SimplerTaskOutputs *outs, uint32_t want) {
    memset(outs, 0, sizeof *outs);
    const int32_t rc = simpler_submit(ops, d, outs);
    if (rc != 0) return rc;
    if (outs->count != want) {
        simpler_report_fatal(ops, SIMPLER_ORCH_EXPLICIT_FATAL,
                             "paged attention: submit returned the wrong number of outputs");
        return SIMPLER_ORCH_EXPLICIT_FATAL;
    }
    return 0;
}

/* Submits the 4 * ceil(len / block_size) + 1 tasks of sequence b, KV head h: q is the
 * [batch, heads, dim] query tensor (g query heads per KV head), kc/vc the [num_blocks,
 * block_size, kv_heads, dim] caches, out the [batch, heads, dim] f32 output, `blocks` the
 * sequence's first ceil(len / block_size) block-table entries (checked by the caller to lie
 * in 0..num_blocks), scale the score scale. Returns 0 or the failed submit's code; the
 * caller opens and ends the scope around it. */
static inline int32_t pa_attend(const SimplerOrchOps *ops, const SimplerChipTensor *q,
                      const SimplerChipTensor *kc, const SimplerChipTensor *vc,
                      const SimplerChipTensor *out, uint64_t b, uint64_t h, uint64_t g,
                      uint64_t dim, uint64_t block_size, uint64_t len, const int32_t *blocks,
                      float scale) {
    SimplerTaskDesc d;
    SimplerTaskOutputs outs;
    int32_t rc;
    const SimplerChipTensor qg =
        simpler_view_strided_2d(q, simpler_offset_3d(q, b, h * g, 0), g, dim, q->strides[1], q->strides[2]);
    SimplerChipTensor state, acc;
    const uint64_t nblocks = (len + block_size - 1) / block_size;
    for (uint64_t j = 0; j < nblocks; ++j) {
        const uint64_t n = len - j * block_size < block_size ? len - j * block_size : block_size;
        const uint64_t blk = (uint64_t)blocks[j];
        /* K/V of KV head h in this block: rows are tokens (stride kv_heads*dim). */
        const uint64_t koff = kc->strides[0] * blk + kc->strides[2] * h;
        const SimplerChipTensor kb = simpler_view_strided_2d(kc, koff, n, dim, kc->strides[1], kc->strides[3]);
        const uint64_t voff = vc->strides[0] * blk + vc->strides[2] * h;
        const SimplerChipTensor vb = simpler_view_strided_2d(vc, voff, n, dim, vc->strides[1], vc->strides[3]);
        const uint64_t s_shape[2] = {g, n}, state_shape[2] = {g, 3}, o_shape[2] = {g, dim};
        const int first = j == 0;

        simpler_task_init(&d, SIMPLER_CORE_AIC, PA_FUNC_QK);
        simpler_task_add_input(&d, &qg);
        simpler_task_add_input(&d, &kb);
        simpler_task_add_output(&d, s_shape, 2, SIMPLER_DT_FLOAT32);
        simpler_task_add_scalar_f32(&d, scale);
        if ((rc = pa_submit_expect(ops, &d, &outs, 1)) != 0) return rc;
        const SimplerChipTensor s = outs.tensors[0];

        simpler_task_init(&d, SIMPLER_CORE_AIV, PA_FUNC_SOFTMAX);
        simpler_task_add_input(&d, &s);
        if (first) simpler_task_add_output(&d, state_shape, 2, SIMPLER_DT_FLOAT32);
        else simpler_task_add_inout(&d, &state);
        simpler_task_add_output(&d, s_shape, 2, SIMPLER_DT_FLOAT32);
        simpler_task_add_scalar(&d, (uint64_t)first);
        if ((rc = pa_submit_expect(ops, &d, &outs, first ? 2 : 1)) != 0) return rc;
        if (first) state = outs.tensors[0];
        const SimplerChipTensor p = outs.tensors[first ? 1 : 0];

        simpler_task_init(&d, SIMPLER_CORE_AIC, PA_FUNC_PV);
        simpler_task_add_input(&d, &p);
        simpler_task_add_input(&d, &vb);
        simpler_task_add_output(&d, o_shape, 2, SIMPLER_DT_FLOAT32);
        if ((rc = pa_submit_expect(ops, &d, &outs, 1)) != 0) return rc;
        const SimplerChipTensor o = outs.tensors[0];

        simpler_task_init(&d, SIMPLER_CORE_AIV, PA_FUNC_UPDATE);
        simpler_task_add_input(&d, &o);
        simpler_task_add_input(&d, &state);
        if (first) simpler_task_add_output(&d, o_shape, 2, SIMPLER_DT_FLOAT32);
        else simpler_task_add_inout(&d, &acc);
        simpler_task_add_scalar(&d, (uint64_t)first);
        if ((rc = pa_submit_expect(ops, &d, &outs, first ? 1 : 0)) != 0) return rc;
        if (first) acc = outs.tensors[0];
    }
    const SimplerChipTensor og =
        simpler_view_strided_2d(out, simpler_offset_3d(out, b, h * g, 0), g, dim, out->strides[1], out->strides[2]);
    simpler_task_init(&d, SIMPLER_CORE_AIV, PA_FUNC_NORMALIZE);
    simpler_task_add_input(&d, &acc);
    simpler_task_add_input(&d, &state);
    simpler_task_add_output_existing(&d, &og);
    return simpler_submit(ops, &d, NULL);
}

#endif /* PAGED_ATTENTION_ATTEND_H */
