/*
 * simpler/orchestration.h — for orchestration authors.
 *
 * An orchestration library exports one entry (default name "aicpu_orchestration_entry"):
 *
 *     SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
 *                                                             const SimplerOrchArgs *args);
 *
 * It runs on an AICPU thread while the schedulers dispatch. It builds tasks with the
 * simpler_task_* helpers, submits them with simpler_submit(), and opens nested scopes with
 * simpler_scope_begin()/simpler_scope_end(). Returning non-zero fails the run
 * (EXPLICIT_ORCH_FATAL). There is no link-time dependency on the runtime: every call goes
 * through the versioned SimplerOrchOps table. Mirrors crates/simpler-abi/src/orch.rs.
 * Tasks, rings, scopes and dependency discovery are described in docs/chip-runtime.md
 * (error codes: §13).
 */
#ifndef SIMPLER_ORCHESTRATION_H
#define SIMPLER_ORCHESTRATION_H

#include <string.h>
#include "simpler/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMPLER_MAX_ORCH_TENSORS 256
#define SIMPLER_MAX_ORCH_SCALARS 128
#define SIMPLER_TASK_MAX_TENSORS 32
#define SIMPLER_TASK_MAX_SCALARS 16
#define SIMPLER_MAX_TASK_DEPS 16
#define SIMPLER_NO_KERNEL (-1)
#define SIMPLER_SCOPE_AUTO 0u
#define SIMPLER_SCOPE_MANUAL 1u
#define SIMPLER_TASK_FLAG_REQUIRE_SYNC_START 1u
#define SIMPLER_ORCH_OPS_VERSION 2u
#define SIMPLER_LOG_ERROR 0u
#define SIMPLER_LOG_WARN 1u
#define SIMPLER_LOG_INFO 2u
#define SIMPLER_LOG_DEBUG 3u

/* Orchestrator error codes (upstream numbering). */
#define SIMPLER_ORCH_INVALID_ARGS 5
#define SIMPLER_ORCH_EXPLICIT_FATAL 9

/* Marks an exported orchestration entry. */
#define SIMPLER_ORCHESTRATION __attribute__((visibility("default")))

typedef struct SimplerOrchArgs {
    uint32_t tensor_count;
    uint32_t scalar_count;
    uint64_t reserved;
    SimplerChipTensor tensors[SIMPLER_MAX_ORCH_TENSORS];
    uint64_t scalars[SIMPLER_MAX_ORCH_SCALARS];
} SimplerOrchArgs;
_Static_assert(sizeof(SimplerOrchArgs) == 33808, "OrchArgs size");
_Static_assert(offsetof(SimplerOrchArgs, scalar_count) == 4, "OrchArgs.scalar_count");
_Static_assert(offsetof(SimplerOrchArgs, tensors) == 16, "OrchArgs.tensors");
_Static_assert(offsetof(SimplerOrchArgs, scalars) == 32784, "OrchArgs.scalars");

typedef struct SimplerTaskDesc {
    uint32_t size;         /* sizeof(SimplerTaskDesc) */
    uint32_t tensor_count;
    uint32_t scalar_count;
    uint32_t dep_count;
    int32_t kernel_ids[3]; /* AIC, AIV0, AIV1; SIMPLER_NO_KERNEL when inactive */
    int32_t block_num;     /* SPMD blocks, >= 1 */
    uint32_t flags;        /* SIMPLER_TASK_FLAG_* */
    uint32_t reserved;
    uint32_t tags[SIMPLER_TASK_MAX_TENSORS]; /* SimplerTensorArgType */
    uint64_t deps[SIMPLER_MAX_TASK_DEPS];    /* explicit dependencies (task ids) */
    uint64_t scalars[SIMPLER_TASK_MAX_SCALARS];
    SimplerChipTensor tensors[SIMPLER_TASK_MAX_TENSORS];
} SimplerTaskDesc;
_Static_assert(sizeof(SimplerTaskDesc) == 4520, "TaskDesc size");
_Static_assert(offsetof(SimplerTaskDesc, kernel_ids) == 16, "TaskDesc.kernel_ids");
_Static_assert(offsetof(SimplerTaskDesc, block_num) == 28, "TaskDesc.block_num");
_Static_assert(offsetof(SimplerTaskDesc, flags) == 32, "TaskDesc.flags");
_Static_assert(offsetof(SimplerTaskDesc, tags) == 40, "TaskDesc.tags");
_Static_assert(offsetof(SimplerTaskDesc, deps) == 168, "TaskDesc.deps");
_Static_assert(offsetof(SimplerTaskDesc, scalars) == 296, "TaskDesc.scalars");
_Static_assert(offsetof(SimplerTaskDesc, tensors) == 424, "TaskDesc.tensors");

typedef struct SimplerTaskOutputs {
    uint64_t task_id;
    uint32_t count;
    uint32_t reserved;
    SimplerChipTensor tensors[SIMPLER_TASK_MAX_TENSORS];
} SimplerTaskOutputs;
_Static_assert(sizeof(SimplerTaskOutputs) == 4112, "TaskOutputs size");
_Static_assert(offsetof(SimplerTaskOutputs, count) == 8, "TaskOutputs.count");
_Static_assert(offsetof(SimplerTaskOutputs, tensors) == 16, "TaskOutputs.tensors");

typedef struct SimplerOrchOps {
    uint32_t size;
    uint32_t version;
    void *runtime;
    int32_t (*submit_task)(void *runtime, const SimplerTaskDesc *desc, SimplerTaskOutputs *outputs);
    int32_t (*scope_begin)(void *runtime, uint32_t mode);
    int32_t (*scope_end)(void *runtime);
    void (*report_fatal)(void *runtime, int32_t code, const char *message);
    int32_t (*is_fatal)(void *runtime);
    void (*log)(void *runtime, uint32_t level, const char *message);
    uint32_t (*cluster_count)(void *runtime);
    uint32_t (*aiv_count)(void *runtime);
    /* v2 */
    int32_t (*get_tensor_data)(void *runtime, const SimplerChipTensor *tensor, void *dst, uint64_t dst_bytes);
    int32_t (*set_tensor_data)(void *runtime, const SimplerChipTensor *tensor, const void *src, uint64_t src_bytes);
} SimplerOrchOps;
_Static_assert(sizeof(SimplerOrchOps) == 96, "OrchOps size");
_Static_assert(offsetof(SimplerOrchOps, runtime) == 8, "OrchOps.runtime");
_Static_assert(offsetof(SimplerOrchOps, submit_task) == 16, "OrchOps.submit_task");
_Static_assert(offsetof(SimplerOrchOps, scope_begin) == 24, "OrchOps.scope_begin");
_Static_assert(offsetof(SimplerOrchOps, scope_end) == 32, "OrchOps.scope_end");
_Static_assert(offsetof(SimplerOrchOps, report_fatal) == 40, "OrchOps.report_fatal");
_Static_assert(offsetof(SimplerOrchOps, is_fatal) == 48, "OrchOps.is_fatal");
_Static_assert(offsetof(SimplerOrchOps, log) == 56, "OrchOps.log");
_Static_assert(offsetof(SimplerOrchOps, cluster_count) == 64, "OrchOps.cluster_count");
_Static_assert(offsetof(SimplerOrchOps, aiv_count) == 72, "OrchOps.aiv_count");
_Static_assert(offsetof(SimplerOrchOps, get_tensor_data) == 80, "OrchOps.get_tensor_data");
_Static_assert(offsetof(SimplerOrchOps, set_tensor_data) == 88, "OrchOps.set_tensor_data");

/* ---- reading the run's scalars --------------------------------------------------------- */

/* Signature scalar i of the run (raw 64 bits); 0 when i >= args->scalar_count. */
static inline uint64_t simpler_orch_scalar_u64(const SimplerOrchArgs *args, uint32_t i) {
    return i < args->scalar_count && i < SIMPLER_MAX_ORCH_SCALARS ? args->scalars[i] : 0;
}
/* Signature scalar i of the run read as the f32 whose bits were passed (an `f32` scalar of
 * the manifest); 0.0f when i >= args->scalar_count. */
static inline float simpler_orch_scalar_f32(const SimplerOrchArgs *args, uint32_t i) {
    const uint32_t bits = (uint32_t)simpler_orch_scalar_u64(args, i);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- building a task ---------------------------------------------------------------- */

/* Starts a task running kernel `func_id` on one core of `core_type`. */
static inline void simpler_task_init(SimplerTaskDesc *d, SimplerCoreType core_type, int32_t func_id) {
    memset(d, 0, sizeof *d);
    d->size = (uint32_t)sizeof *d;
    d->kernel_ids[0] = d->kernel_ids[1] = d->kernel_ids[2] = SIMPLER_NO_KERNEL;
    d->kernel_ids[core_type == SIMPLER_CORE_AIC ? 0 : 1] = func_id;
    d->block_num = 1;
}

/* Starts a MIX task: one AIC kernel plus up to two AIV kernels (SIMPLER_NO_KERNEL to leave a
 * lane empty) sharing the arguments, launched together on one cluster, never partially. */
static inline void simpler_task_init_mix(SimplerTaskDesc *d, int32_t aic, int32_t aiv0, int32_t aiv1) {
    simpler_task_init(d, SIMPLER_CORE_AIC, aic);
    d->kernel_ids[1] = aiv0;
    d->kernel_ids[2] = aiv1;
}

/* Starts a dummy task: dependencies only, never dispatched to a core. With OUTPUT arguments
 * it is an allocation-only task (alloc_tensors): its outputs are allocated and returned. */
static inline void simpler_task_init_dummy(SimplerTaskDesc *d) {
    simpler_task_init(d, SIMPLER_CORE_AIC, SIMPLER_NO_KERNEL);
}

/* SPMD: run the task as `block_num` logical blocks (kernels read simpler_block_idx/num).
 * With `sync_start`, all blocks start together or the submit fails. */
static inline void simpler_task_set_blocks(SimplerTaskDesc *d, int32_t block_num, int sync_start) {
    d->block_num = block_num;
    if (sync_start) d->flags |= SIMPLER_TASK_FLAG_REQUIRE_SYNC_START;
    else d->flags &= ~SIMPLER_TASK_FLAG_REQUIRE_SYNC_START;
}

/* Appends a tensor with a tag; returns its argument index, or -1 when the task is full. */
static inline int simpler_task_add_tensor(SimplerTaskDesc *d, const SimplerChipTensor *t, SimplerTensorArgType tag) {
    if (d->tensor_count >= SIMPLER_TASK_MAX_TENSORS) return -1;
    d->tensors[d->tensor_count] = *t;
    d->tags[d->tensor_count] = (uint32_t)tag;
    return (int)d->tensor_count++;
}
static inline int simpler_task_add_input(SimplerTaskDesc *d, const SimplerChipTensor *t) {
    return simpler_task_add_tensor(d, t, SIMPLER_INPUT);
}
static inline int simpler_task_add_inout(SimplerTaskDesc *d, const SimplerChipTensor *t) {
    return simpler_task_add_tensor(d, t, SIMPLER_INOUT);
}
static inline int simpler_task_add_output_existing(SimplerTaskDesc *d, const SimplerChipTensor *t) {
    return simpler_task_add_tensor(d, t, SIMPLER_OUTPUT_EXISTING);
}
static inline int simpler_task_add_no_dep(SimplerTaskDesc *d, const SimplerChipTensor *t) {
    return simpler_task_add_tensor(d, t, SIMPLER_NO_DEP);
}
/* Appends a runtime-allocated, row-major output of the given shape and dtype. */
static inline int simpler_task_add_output(SimplerTaskDesc *d, const uint64_t *shape, uint32_t ndims, SimplerDataType dtype) {
    SimplerChipTensor t;
    memset(&t, 0, sizeof t);
    t.ndims = ndims;
    t.dtype = (uint32_t)dtype;
    t.owner_task_id = SIMPLER_NO_OWNER_TASK;
    for (uint32_t i = 0; i < ndims && i < SIMPLER_MAX_TENSOR_DIMS; ++i) t.shapes[i] = shape[i];
    return simpler_task_add_tensor(d, &t, SIMPLER_OUTPUT);
}
/* Appends a scalar (raw bits); returns its index among the scalars, or -1 when full. */
static inline int simpler_task_add_scalar(SimplerTaskDesc *d, uint64_t bits) {
    if (d->scalar_count >= SIMPLER_TASK_MAX_SCALARS) return -1;
    d->scalars[d->scalar_count] = bits;
    return (int)d->scalar_count++;
}
static inline int simpler_task_add_scalar_f32(SimplerTaskDesc *d, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return simpler_task_add_scalar(d, (uint64_t)bits);
}
/* Adds an explicit dependency on an earlier task; -1 when full. */
static inline int simpler_task_add_dep(SimplerTaskDesc *d, uint64_t task_id) {
    if (d->dep_count >= SIMPLER_MAX_TASK_DEPS) return -1;
    d->deps[d->dep_count] = task_id;
    return (int)d->dep_count++;
}

/* ---- views ---------------------------------------------------------------------------- */

/* A 1-D view of `len` elements starting `offset` elements into a 1-D tensor. */
static inline SimplerChipTensor simpler_view_1d(const SimplerChipTensor *t, uint64_t offset, uint64_t len) {
    SimplerChipTensor v = *t;
    v.start_offset = t->start_offset + offset * t->strides[0];
    v.shapes[0] = len;
    return v;
}
/* A rows x cols view at (row0, col0) of a 2-D tensor. */
static inline SimplerChipTensor simpler_view_2d(const SimplerChipTensor *t, uint64_t row0, uint64_t col0, uint64_t rows, uint64_t cols) {
    SimplerChipTensor v = *t;
    v.start_offset = t->start_offset + row0 * t->strides[0] + col0 * t->strides[1];
    v.shapes[0] = rows;
    v.shapes[1] = cols;
    v.flags &= ~SIMPLER_TENSOR_FLAG_CONTIGUOUS;
    if (cols == t->shapes[1] || rows == 1) v.flags |= (t->flags & SIMPLER_TENSOR_FLAG_CONTIGUOUS);
    return v;
}

/* A rows x cols view of any tensor `t` (of any rank): element (r, c) is `offset + r*row_stride
 * + c*col_stride` elements past t's first element. This is how an orchestration takes 2-D
 * tiles out of 3-D to 5-D tensors (one head of a [tokens, heads, dim] cache block: offset
 * to the block and head, row stride heads*dim, col stride 1). The runtime checks at submit
 * that the view stays inside its buffer. */
static inline SimplerChipTensor simpler_view_strided_2d(const SimplerChipTensor *t, uint64_t offset, uint64_t rows, uint64_t cols,
                                                        uint64_t row_stride, uint64_t col_stride) {
    SimplerChipTensor v = *t;
    for (uint32_t i = 0; i < SIMPLER_MAX_TENSOR_DIMS; ++i) v.shapes[i] = v.strides[i] = 0;
    v.ndims = 2;
    v.start_offset = t->start_offset + offset;
    v.shapes[0] = rows;
    v.shapes[1] = cols;
    v.strides[0] = row_stride;
    v.strides[1] = col_stride;
    v.flags &= ~SIMPLER_TENSOR_FLAG_CONTIGUOUS;
    if (col_stride == 1 && (row_stride == cols || rows == 1)) v.flags |= SIMPLER_TENSOR_FLAG_CONTIGUOUS;
    return v;
}
/* Element offset of index (i0, i1, i2) of a tensor of rank >= 3 (or (i0, i1) with i2 = 0 for
 * rank 2), relative to its first element: i0*strides[0] + i1*strides[1] + i2*strides[2]. */
static inline uint64_t simpler_offset_3d(const SimplerChipTensor *t, uint64_t i0, uint64_t i1, uint64_t i2) {
    return i0 * t->strides[0] + i1 * t->strides[1] + (t->ndims > 2 ? i2 * t->strides[2] : 0);
}

/* ---- calling the runtime ------------------------------------------------------------------- */

/* Submits a task. `outs` may be NULL when the task has no OUTPUT argument; the views it
 * returns are valid only inside the enclosing scope (their memory is reclaimed after it). */
static inline int32_t simpler_submit(const SimplerOrchOps *ops, const SimplerTaskDesc *d, SimplerTaskOutputs *outs) {
    return ops->submit_task(ops->runtime, d, outs);
}
static inline int32_t simpler_scope_begin(const SimplerOrchOps *ops) { return ops->scope_begin(ops->runtime, SIMPLER_SCOPE_AUTO); }
static inline int32_t simpler_scope_begin_manual(const SimplerOrchOps *ops) { return ops->scope_begin(ops->runtime, SIMPLER_SCOPE_MANUAL); }
static inline int32_t simpler_scope_end(const SimplerOrchOps *ops) { return ops->scope_end(ops->runtime); }
static inline void simpler_report_fatal(const SimplerOrchOps *ops, int32_t code, const char *msg) { ops->report_fatal(ops->runtime, code, msg); }
static inline int32_t simpler_is_fatal(const SimplerOrchOps *ops) { return ops->is_fatal(ops->runtime); }
static inline void simpler_log(const SimplerOrchOps *ops, uint32_t level, const char *msg) { ops->log(ops->runtime, level, msg); }
static inline uint32_t simpler_cluster_count(const SimplerOrchOps *ops) { return ops->cluster_count(ops->runtime); }
static inline uint32_t simpler_aiv_count(const SimplerOrchOps *ops) { return ops->aiv_count(ops->runtime); }
/* Waits for the producers of the view, then copies it (packed row-major) into dst. */
static inline int32_t simpler_get_tensor_data(const SimplerOrchOps *ops, const SimplerChipTensor *t, void *dst, uint64_t bytes) {
    return ops->get_tensor_data(ops->runtime, t, dst, bytes);
}
/* Waits for earlier readers and writers of the view, then writes src (packed row-major) into it. */
static inline int32_t simpler_set_tensor_data(const SimplerOrchOps *ops, const SimplerChipTensor *t, const void *src, uint64_t bytes) {
    return ops->set_tensor_data(ops->runtime, t, src, bytes);
}
/* Allocates `count` tensors described by shapes/ndims/dtypes through an allocation-only task;
 * outs->task_id can be used as an explicit dependency. */
static inline int32_t simpler_alloc_tensors(const SimplerOrchOps *ops, uint32_t count, const uint64_t (*shapes)[SIMPLER_MAX_TENSOR_DIMS],
                                            const uint32_t *ndims, const SimplerDataType *dtypes, SimplerTaskOutputs *outs) {
    SimplerTaskDesc d;
    simpler_task_init_dummy(&d);
    for (uint32_t i = 0; i < count; ++i)
        if (simpler_task_add_output(&d, shapes[i], ndims[i], dtypes[i]) < 0) return SIMPLER_ORCH_INVALID_ARGS;
    return simpler_submit(ops, &d, outs);
}

#ifdef __cplusplus
}
#endif
#endif /* SIMPLER_ORCHESTRATION_H */
