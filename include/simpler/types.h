/*
 * simpler/types.h — the tensor types shared by kernels and orchestration.
 *
 * Mirrors crates/simpler-abi/src/tensor.rs and kernel.rs byte for byte; every struct has
 * _Static_asserts on its size and offsets, and crates/simpler-abi/tests/it/c_headers.rs
 * compiles a C file against this header to check that Rust agrees.
 */
#ifndef SIMPLER_TYPES_H
#define SIMPLER_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMPLER_MAX_TENSOR_DIMS 5
#define SIMPLER_NO_OWNER_TASK UINT64_MAX
#define SIMPLER_TENSOR_FLAG_CONTIGUOUS 1u

/* Element types (wire values of ChipTensor.dtype). */
typedef enum SimplerDataType {
    SIMPLER_DT_FLOAT32 = 0,
    SIMPLER_DT_FLOAT16 = 1,
    SIMPLER_DT_INT32 = 2,
    SIMPLER_DT_INT16 = 3,
    SIMPLER_DT_INT8 = 4,
    SIMPLER_DT_UINT8 = 5,
    SIMPLER_DT_BFLOAT16 = 6,
    SIMPLER_DT_INT64 = 7,
    SIMPLER_DT_UINT64 = 8,
    SIMPLER_DT_UINT16 = 9,
    SIMPLER_DT_UINT32 = 10,
    SIMPLER_DT_FLOAT64 = 11
} SimplerDataType;

/* How a task argument takes part in dependency discovery. */
typedef enum SimplerTensorArgType {
    SIMPLER_INPUT = 0,           /* read: waits for earlier writers (RAW) */
    SIMPLER_OUTPUT = 1,          /* allocated by the runtime, returned by the submit */
    SIMPLER_INOUT = 2,           /* read and written: RAW, WAW and WAR */
    SIMPLER_OUTPUT_EXISTING = 3, /* written into an existing buffer: WAW and WAR */
    SIMPLER_NO_DEP = 4           /* no dependency tracking */
} SimplerTensorArgType;

/* Core types. */
typedef enum SimplerCoreType { SIMPLER_CORE_AIC = 0, SIMPLER_CORE_AIV = 1 } SimplerCoreType;

/*
 * A strided view over a device buffer, 128 bytes. Element (i0..i{n-1}) is at byte
 * buffer_addr + (start_offset + sum(ik * strides[k])) * element_size. Shapes and strides
 * count elements.
 */
typedef struct SimplerChipTensor {
    uint64_t buffer_addr;                     /* device address of the whole buffer */
    uint64_t buffer_size;                     /* bytes of the whole buffer */
    uint64_t start_offset;                    /* elements from buffer_addr to the view */
    uint64_t shapes[SIMPLER_MAX_TENSOR_DIMS]; /* extent per dimension */
    uint64_t strides[SIMPLER_MAX_TENSOR_DIMS];/* element distance per dimension */
    uint64_t owner_task_id;                   /* producing task or SIMPLER_NO_OWNER_TASK */
    uint32_t ndims;                           /* 1..5 */
    uint32_t dtype;                           /* SimplerDataType */
    uint32_t version;
    uint32_t flags;                           /* SIMPLER_TENSOR_FLAG_* */
} SimplerChipTensor;

_Static_assert(sizeof(SimplerChipTensor) == 128, "ChipTensor is 128 bytes");
_Static_assert(offsetof(SimplerChipTensor, buffer_size) == 8, "ChipTensor.buffer_size");
_Static_assert(offsetof(SimplerChipTensor, start_offset) == 16, "ChipTensor.start_offset");
_Static_assert(offsetof(SimplerChipTensor, shapes) == 24, "ChipTensor.shapes");
_Static_assert(offsetof(SimplerChipTensor, strides) == 64, "ChipTensor.strides");
_Static_assert(offsetof(SimplerChipTensor, owner_task_id) == 104, "ChipTensor.owner_task_id");
_Static_assert(offsetof(SimplerChipTensor, ndims) == 112, "ChipTensor.ndims");
_Static_assert(offsetof(SimplerChipTensor, dtype) == 116, "ChipTensor.dtype");
_Static_assert(offsetof(SimplerChipTensor, version) == 120, "ChipTensor.version");
_Static_assert(offsetof(SimplerChipTensor, flags) == 124, "ChipTensor.flags");

/* Pointer to the first element of a view, as T*. */
#define SIMPLER_TENSOR_DATA(T, t) \
    ((T *)(uintptr_t)((t)->buffer_addr) + (t)->start_offset)

/* Number of elements in a view. */
static inline uint64_t simpler_tensor_numel(const SimplerChipTensor *t) {
    uint64_t n = t->ndims ? 1 : 0;
    for (uint32_t d = 0; d < t->ndims && d < SIMPLER_MAX_TENSOR_DIMS; ++d) n *= t->shapes[d];
    return n;
}

#ifdef __cplusplus
}
#endif
#endif /* SIMPLER_TYPES_H */
