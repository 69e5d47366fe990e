/*
 * simpler/kernel.h — for AICore kernel authors.
 *
 * A kernel exports one symbol (default name "kernel_entry"):
 *
 *     SIMPLER_KERNEL void kernel_entry(int64_t *args);
 *
 * args[0..T) point to the task's SimplerChipTensor views (in submission order),
 * args[T..T+S) hold the scalars as raw 64-bit patterns, args[48] points to the
 * SimplerLocalContext (SPMD block index/count) and args[49] to the SimplerGlobalContext;
 * args[50] and args[51] hold T and S. Mirrors crates/simpler-abi/src/kernel.rs. How tasks
 * reach a core and how a kernel's fatal code fails the run: docs/chip-runtime.md §3, §10.
 */
#ifndef SIMPLER_KERNEL_H
#define SIMPLER_KERNEL_H

#include <string.h>
#include "simpler/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMPLER_MAX_TASK_TENSORS 32
#define SIMPLER_MAX_TASK_SCALARS 16
#define SIMPLER_LOCAL_CONTEXT_SLOT 48
#define SIMPLER_GLOBAL_CONTEXT_SLOT 49
#define SIMPLER_TENSOR_COUNT_SLOT 50 /* number of tensor arguments of this task */
#define SIMPLER_SCALAR_COUNT_SLOT 51 /* number of scalar arguments of this task */
/* Slot 52 points to the dispatch's deferred-completion slab (simpler/async.h). */
#define SIMPLER_KERNEL_ARG_SLOTS 64

/* Marks an exported kernel entry. */
#define SIMPLER_KERNEL __attribute__((visibility("default")))

typedef struct SimplerKernelArgs {
    uint64_t slots[SIMPLER_KERNEL_ARG_SLOTS];
} SimplerKernelArgs;
_Static_assert(sizeof(SimplerKernelArgs) == 512, "KernelArgs is 512 bytes");

typedef struct SimplerLocalContext {
    int32_t block_idx; /* 0..block_num */
    int32_t block_num; /* >= 1 */
} SimplerLocalContext;
_Static_assert(sizeof(SimplerLocalContext) == 8, "LocalContext is 8 bytes");
_Static_assert(offsetof(SimplerLocalContext, block_num) == 4, "LocalContext.block_num");

typedef struct SimplerGlobalContext {
    int32_t sub_block_id; /* lane within the cluster: AIV 0 or 1, AIC 0 */
    uint32_t core_id;
    uint32_t core_type;   /* SimplerCoreType */
    int32_t fatal_code;   /* set non-zero to fail the run (see simpler_kernel_fail) */
    uint64_t reserved[6];
} SimplerGlobalContext;
_Static_assert(sizeof(SimplerGlobalContext) == 64, "GlobalContext is 64 bytes");
_Static_assert(offsetof(SimplerGlobalContext, core_id) == 4, "GlobalContext.core_id");
_Static_assert(offsetof(SimplerGlobalContext, core_type) == 8, "GlobalContext.core_type");
_Static_assert(offsetof(SimplerGlobalContext, fatal_code) == 12, "GlobalContext.fatal_code");

/* Number of tensor / scalar arguments the task was submitted with. */
static inline uint32_t simpler_arg_tensor_count(int64_t *args) { return (uint32_t)args[SIMPLER_TENSOR_COUNT_SLOT]; }
static inline uint32_t simpler_arg_scalar_count(int64_t *args) { return (uint32_t)args[SIMPLER_SCALAR_COUNT_SLOT]; }

/* Tensor argument i of a kernel (unchecked). */
static inline SimplerChipTensor *simpler_arg_tensor(int64_t *args, int i) {
    return (SimplerChipTensor *)(uintptr_t)args[i];
}

/* Checks that the task has exactly `tensors` tensor and `scalars` scalar arguments; on a
 * mismatch fails the run (fatal code 1000 + tensors given) and returns 0 — return at once. */
static inline int simpler_expect_args(int64_t *args, uint32_t tensors, uint32_t scalars) {
    if (simpler_arg_tensor_count(args) != tensors || simpler_arg_scalar_count(args) != scalars) {
        ((SimplerGlobalContext *)(uintptr_t)args[SIMPLER_GLOBAL_CONTEXT_SLOT])->fatal_code =
            1000 + (int32_t)simpler_arg_tensor_count(args);
        return 0;
    }
    return 1;
}
/* Scalar at argument slot i (slot = tensor count + scalar index), raw bits. */
static inline uint64_t simpler_arg_u64(int64_t *args, int slot) { return (uint64_t)args[slot]; }
/* Scalar at argument slot i, interpreted as the f32 whose bits were passed. */
static inline float simpler_arg_f32(int64_t *args, int slot) {
    uint32_t bits = (uint32_t)(uint64_t)args[slot];
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline SimplerLocalContext *simpler_local_context(int64_t *args) {
    return (SimplerLocalContext *)(uintptr_t)args[SIMPLER_LOCAL_CONTEXT_SLOT];
}
static inline SimplerGlobalContext *simpler_global_context(int64_t *args) {
    return (SimplerGlobalContext *)(uintptr_t)args[SIMPLER_GLOBAL_CONTEXT_SLOT];
}
static inline int32_t simpler_block_idx(int64_t *args) { return simpler_local_context(args)->block_idx; }
static inline int32_t simpler_block_num(int64_t *args) { return simpler_local_context(args)->block_num; }
/* Fails the run with KERNEL_FATAL; `code` (non-zero) is reported in the run's message. */
static inline void simpler_kernel_fail(int64_t *args, int32_t code) {
    simpler_global_context(args)->fatal_code = code ? code : 1;
}

/* ---- 1-D and 2-D views -------------------------------------------------------------------
 *
 * Element-wise and row-wise kernels usually treat every tensor as a matrix. simpler_view2d()
 * sees a 1-D or 2-D view of element type `dt` as rows x cols with element strides (a 1-D view
 * of n elements is 1 x n), so one loop handles whole tensors, tiles and strided views alike:
 *
 *     SimplerView2D x, y;
 *     if (!simpler_expect_args(args, 2, 0)) return;
 *     if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
 *         !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &y) ||
 *         !simpler_view2d_same_shape(&x, &y)) {
 *         simpler_kernel_fail(args, 1);
 *         return;
 *     }
 *     for (uint64_t r = 0; r < y.rows; ++r)
 *         for (uint64_t c = 0; c < y.cols; ++c)
 *             SIMPLER_VIEW2D_AT(float, &y, r, c) = 2.0f * SIMPLER_VIEW2D_AT(float, &x, r, c);
 */
typedef struct SimplerView2D {
    void *data;          /* element (0, 0) */
    uint64_t rows, cols;
    uint64_t row_stride; /* elements from (r, c) to (r + 1, c); 0 for a 1-D view */
    uint64_t col_stride; /* elements from (r, c) to (r, c + 1) */
    uint32_t dtype;      /* SimplerDataType */
    uint32_t elem_size;  /* bytes per element */
} SimplerView2D;

/* Element (r, c) of view `v` (a SimplerView2D *) holding T, as an lvalue. */
#define SIMPLER_VIEW2D_AT(T, v, r, c) \
    (((T *)(v)->data)[(r) * (v)->row_stride + (c) * (v)->col_stride])
/* Pointer to the first element of row r of view `v` (a SimplerView2D *) holding T; element c
 * of that row is at [c * (v)->col_stride]. */
#define SIMPLER_VIEW2D_ROW(T, v, r) ((T *)(v)->data + (r) * (v)->row_stride)

/* Bytes per element of a SimplerDataType; 0 for an unknown one. */
static inline uint32_t simpler_dtype_size(uint32_t dt) {
    switch (dt) {
    case SIMPLER_DT_INT8: case SIMPLER_DT_UINT8: return 1;
    case SIMPLER_DT_FLOAT16: case SIMPLER_DT_BFLOAT16: case SIMPLER_DT_INT16: case SIMPLER_DT_UINT16: return 2;
    case SIMPLER_DT_FLOAT32: case SIMPLER_DT_INT32: case SIMPLER_DT_UINT32: return 4;
    case SIMPLER_DT_INT64: case SIMPLER_DT_UINT64: case SIMPLER_DT_FLOAT64: return 8;
    default: return 0;
    }
}

/* Fills *v from tensor t if t is non-NULL, holds `dt` and has 1 or 2 dimensions; returns 1,
 * else 0 (and *v is unspecified). */
static inline int simpler_view2d(const SimplerChipTensor *t, SimplerDataType dt, SimplerView2D *v) {
    if (t == NULL || v == NULL || t->dtype != (uint32_t)dt || simpler_dtype_size(t->dtype) == 0) return 0;
    if (t->ndims == 1) {
        v->rows = 1;
        v->cols = t->shapes[0];
        v->row_stride = 0;
        v->col_stride = t->strides[0];
    } else if (t->ndims == 2) {
        v->rows = t->shapes[0];
        v->cols = t->shapes[1];
        v->row_stride = t->strides[0];
        v->col_stride = t->strides[1];
    } else {
        return 0;
    }
    v->dtype = t->dtype;
    v->elem_size = simpler_dtype_size(t->dtype);
    v->data = (void *)((unsigned char *)(uintptr_t)t->buffer_addr + t->start_offset * v->elem_size);
    return 1;
}

/* 1 if the two views have the same rows and cols. */
static inline int simpler_view2d_same_shape(const SimplerView2D *a, const SimplerView2D *b) {
    return a->rows == b->rows && a->cols == b->cols;
}

#ifdef __cplusplus
}
#endif
#endif /* SIMPLER_KERNEL_H */
