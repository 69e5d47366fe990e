/*
 * simpler/run.h — the host<->device run records: the launch descriptor and the run result
 * record. Kernel and orchestration authors never need this; it exists so that a C or C++
 * device runtime can share the contract. Mirrors crates/simpler-abi/src/run.rs and result.rs;
 * docs/chip-runtime.md §1 (the descriptor) and docs/lane.md §9 (the result record).
 */
#ifndef SIMPLER_RUN_H
#define SIMPLER_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "simpler/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMPLER_RUN_RESULT_PAYLOAD_BYTES 256
#define SIMPLER_RUN_LAUNCH_MAGIC 0x4c504d53u
#define SIMPLER_RUN_LAUNCH_VERSION 2u
#define SIMPLER_RUNTIME_TMR 0u
#define SIMPLER_RUNTIME_HBG 1u

typedef enum SimplerRunVerdict { SIMPLER_VERDICT_NONE = 0, SIMPLER_VERDICT_OK = 1, SIMPLER_VERDICT_ERROR = 2 } SimplerRunVerdict;
typedef enum SimplerCodeSource {
    SIMPLER_CODE_SOURCE_NONE = 0,
    SIMPLER_CODE_SOURCE_HEADER = 1,
    SIMPLER_CODE_SOURCE_THREAD_RC = 2,
    SIMPLER_CODE_SOURCE_SHUTDOWN_RC = 3
} SimplerCodeSource;

/* Written by the AICPU kernel at the end of a run; `published` (the epoch) is written last. */
typedef struct SimplerRunResult {
    uint64_t published;
    uint32_t payload_bytes;
    uint32_t verdict;       /* SimplerRunVerdict */
    int32_t completion_code;
    uint32_t code_source;   /* SimplerCodeSource */
    uint8_t payload[SIMPLER_RUN_RESULT_PAYLOAD_BYTES];
    uint64_t tasks;         /* tasks the orchestration submitted */
} SimplerRunResult;
_Static_assert(sizeof(SimplerRunResult) == 288, "RunResult is 288 bytes");
_Static_assert(offsetof(SimplerRunResult, payload_bytes) == 8, "RunResult.payload_bytes");
_Static_assert(offsetof(SimplerRunResult, verdict) == 12, "RunResult.verdict");
_Static_assert(offsetof(SimplerRunResult, completion_code) == 16, "RunResult.completion_code");
_Static_assert(offsetof(SimplerRunResult, code_source) == 20, "RunResult.code_source");
_Static_assert(offsetof(SimplerRunResult, payload) == 24, "RunResult.payload");
_Static_assert(offsetof(SimplerRunResult, tasks) == 280, "RunResult.tasks");

typedef struct SimplerRunLaunchDesc {
    uint32_t magic;
    uint32_t version;
    uint64_t epoch;
    uint64_t result_addr;
    uint64_t orch_entry;
    uint64_t orch_args_addr;
    uint64_t func_table_addr;
    uint64_t func_core_types_addr;
    uint32_t func_count;
    uint32_t aicpu_thread_num;
    uint64_t heap_addr;
    uint64_t heap_size;
    uint32_t task_window;
    uint32_t scheduler_timeout_ms;
    uint64_t core_mailbox_addr;
    uint64_t runtime_state_addr;
    uint32_t ring_task_window[4]; /* 0 = task_window */
    uint64_t ring_heap[4];        /* all 0 = equal split of heap_size */
    uint32_t ring_dep_pool[4];    /* 0 = default */
    uint32_t tensor_wait_timeout_ms;
    uint32_t op_execute_timeout_ms; /* one kernel dispatch at most; 0 = default (45 s) */
    uint64_t trace_addr;            /* SimplerTraceControl and its buffers; 0 = no trace */
    uint32_t runtime;               /* SIMPLER_RUNTIME_TMR or SIMPLER_RUNTIME_HBG */
    uint32_t ready_queue;           /* HBG: ready tasks per shape at most; 0 = 8192 */
    uint64_t graph_addr;            /* HBG: the SimplerGraphImageHeader; 0 under TMR */
    uint64_t graph_bytes;
    uint64_t graph_generation;      /* the callable generation the image must carry */
} SimplerRunLaunchDesc;
_Static_assert(sizeof(SimplerRunLaunchDesc) == 216, "RunLaunchDesc is 216 bytes");
_Static_assert(offsetof(SimplerRunLaunchDesc, runtime) == 184, "RunLaunchDesc.runtime");
_Static_assert(offsetof(SimplerRunLaunchDesc, graph_addr) == 192, "RunLaunchDesc.graph_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, graph_generation) == 208, "RunLaunchDesc.graph_generation");
_Static_assert(offsetof(SimplerRunLaunchDesc, trace_addr) == 176, "RunLaunchDesc.trace_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, ring_task_window) == 104, "RunLaunchDesc.ring_task_window");
_Static_assert(offsetof(SimplerRunLaunchDesc, ring_heap) == 120, "RunLaunchDesc.ring_heap");
_Static_assert(offsetof(SimplerRunLaunchDesc, ring_dep_pool) == 152, "RunLaunchDesc.ring_dep_pool");
_Static_assert(offsetof(SimplerRunLaunchDesc, tensor_wait_timeout_ms) == 168, "RunLaunchDesc.tensor_wait_timeout_ms");
_Static_assert(offsetof(SimplerRunLaunchDesc, epoch) == 8, "RunLaunchDesc.epoch");
_Static_assert(offsetof(SimplerRunLaunchDesc, result_addr) == 16, "RunLaunchDesc.result_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, orch_entry) == 24, "RunLaunchDesc.orch_entry");
_Static_assert(offsetof(SimplerRunLaunchDesc, orch_args_addr) == 32, "RunLaunchDesc.orch_args_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, func_table_addr) == 40, "RunLaunchDesc.func_table_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, func_core_types_addr) == 48, "RunLaunchDesc.func_core_types_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, func_count) == 56, "RunLaunchDesc.func_count");
_Static_assert(offsetof(SimplerRunLaunchDesc, aicpu_thread_num) == 60, "RunLaunchDesc.aicpu_thread_num");
_Static_assert(offsetof(SimplerRunLaunchDesc, heap_addr) == 64, "RunLaunchDesc.heap_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, heap_size) == 72, "RunLaunchDesc.heap_size");
_Static_assert(offsetof(SimplerRunLaunchDesc, task_window) == 80, "RunLaunchDesc.task_window");
_Static_assert(offsetof(SimplerRunLaunchDesc, scheduler_timeout_ms) == 84, "RunLaunchDesc.scheduler_timeout_ms");
_Static_assert(offsetof(SimplerRunLaunchDesc, core_mailbox_addr) == 88, "RunLaunchDesc.core_mailbox_addr");
_Static_assert(offsetof(SimplerRunLaunchDesc, runtime_state_addr) == 96, "RunLaunchDesc.runtime_state_addr");

/* The head of a run's trace area (docs/tracing.md), then buffer_count buffers of
 * SimplerTraceBufferHeader + capacity x SimplerTraceRecord (AICores first, then AICPU threads). */
typedef struct SimplerTraceControl {
    uint32_t magic;           /* "STRC" */
    uint32_t level;           /* 1 tasks .. 4 orchestrator */
    uint32_t buffer_count;
    uint32_t core_count;
    uint32_t capacity;        /* records per buffer */
    uint32_t reserved;
    uint64_t clock_origin_ns; /* device time = CLOCK_MONOTONIC - origin on the sim */
    uint64_t align_device_ns; /* one simultaneous reading of both clocks */
    uint64_t align_host_ns;
} SimplerTraceControl;
_Static_assert(sizeof(SimplerTraceControl) == 48, "TraceControl is 48 bytes");
_Static_assert(offsetof(SimplerTraceControl, clock_origin_ns) == 24, "TraceControl.clock_origin_ns");
_Static_assert(offsetof(SimplerTraceControl, align_host_ns) == 40, "TraceControl.align_host_ns");

typedef struct SimplerTraceBufferHeader {
    uint32_t capacity;
    uint32_t reserved;
    uint64_t len;     /* records written */
    uint64_t dropped; /* events that found the buffer full */
} SimplerTraceBufferHeader;
_Static_assert(sizeof(SimplerTraceBufferHeader) == 24, "TraceBufferHeader is 24 bytes");
_Static_assert(offsetof(SimplerTraceBufferHeader, dropped) == 16, "TraceBufferHeader.dropped");

typedef struct SimplerTraceRecord {
    uint32_t kind;
    uint32_t a, b, c;
    uint64_t task;
    uint64_t start_ns;
    uint64_t end_ns;
} SimplerTraceRecord;
_Static_assert(sizeof(SimplerTraceRecord) == 40, "TraceRecord is 40 bytes");
_Static_assert(offsetof(SimplerTraceRecord, task) == 16, "TraceRecord.task");
_Static_assert(offsetof(SimplerTraceRecord, end_ns) == 32, "TraceRecord.end_ns");

/* One dispatch buffer of a core: what the AICPU wrote for the AICore to run. 640 bytes. */
typedef struct SimplerDispatchPayload {
    uint64_t kernel_addr;   /* kernel entry address */
    uint64_t task_id;
    int32_t block_idx;      /* SimplerLocalContext */
    int32_t block_num;
    uint64_t reserved[5];
    uint64_t args[64];      /* SimplerKernelArgs */
    uint64_t reserved2[8];
} SimplerDispatchPayload;
_Static_assert(sizeof(SimplerDispatchPayload) == 640, "DispatchPayload is 640 bytes");
_Static_assert(offsetof(SimplerDispatchPayload, block_idx) == 16, "DispatchPayload.local");
_Static_assert(offsetof(SimplerDispatchPayload, args) == 64, "DispatchPayload.args");

/* A core's mailbox: two dispatch buffers (selected by dispatch id parity), its global
 * context, and one deferred-completion slab per dispatch buffer (simpler/async.h's
 * SimplerDeferredSlab, 1600 bytes each). */
typedef struct SimplerCoreMailbox {
    SimplerDispatchPayload payloads[2];
    int32_t sub_block_id;   /* SimplerGlobalContext */
    uint32_t core_id;
    uint32_t core_type;
    int32_t fatal_code;
    uint64_t global_reserved[6];
    uint64_t deferred[2][200]; /* SimplerDeferredSlab */
} SimplerCoreMailbox;
_Static_assert(sizeof(SimplerCoreMailbox) == 4544, "CoreMailbox is 4544 bytes");
_Static_assert(offsetof(SimplerCoreMailbox, deferred) == 1344, "CoreMailbox.deferred");
_Static_assert(offsetof(SimplerCoreMailbox, fatal_code) == 1292, "CoreMailbox.global.fatal_code");

/* host_build_graph graph image (docs/chip-runtime.md §17): a header, then task_count
 * SimplerGraphTask, tensor_count SimplerGraphTensor and wake_count uint32_t wake entries.
 * checksum is the CRC-32 (IEEE) of every byte after the header. */
#define SIMPLER_GRAPH_IMAGE_MAGIC 0x52474d53u
#define SIMPLER_GRAPH_IMAGE_VERSION 1u
#define SIMPLER_GRAPH_RELOC_ABSOLUTE 0u
#define SIMPLER_GRAPH_RELOC_ARG 1u
#define SIMPLER_GRAPH_RELOC_HEAP 2u

typedef struct SimplerGraphImageHeader {
    uint32_t magic;
    uint32_t version;
    uint32_t checksum;
    uint32_t reserved;
    uint64_t generation;
    uint64_t total_bytes;
    uint32_t task_count;
    uint32_t tensor_count;
    uint32_t wake_count;
    uint32_t arg_tensor_count;
    uint64_t heap_bytes;
    uint64_t reserved2;
} SimplerGraphImageHeader;
_Static_assert(sizeof(SimplerGraphImageHeader) == 64, "GraphImageHeader is 64 bytes");
_Static_assert(offsetof(SimplerGraphImageHeader, heap_bytes) == 48, "GraphImageHeader.heap_bytes");

typedef struct SimplerGraphTask {
    int32_t func_ids[3];
    uint32_t shape;         /* 0 AIC, 1 AIV, 2 MIX, 3 dummy */
    uint32_t lanes;
    uint32_t block_num;
    uint32_t flags;         /* 1 = require_sync_start */
    uint32_t fanin;
    uint32_t wake_first;
    uint32_t wake_count;
    uint32_t tensor_first;
    uint32_t tensor_count;
    uint32_t scalar_count;
    uint32_t reserved;
    uint64_t submit;
    uint64_t scalars[16];
} SimplerGraphTask;
_Static_assert(sizeof(SimplerGraphTask) == 192, "GraphTask is 192 bytes");
_Static_assert(offsetof(SimplerGraphTask, submit) == 56, "GraphTask.submit");
_Static_assert(offsetof(SimplerGraphTask, scalars) == 64, "GraphTask.scalars");

typedef struct SimplerGraphTensor {
    SimplerChipTensor tensor;   /* buffer_addr relative to what reloc names */
    uint32_t reloc;             /* SIMPLER_GRAPH_RELOC_* */
    uint32_t arg;               /* the orchestration tensor argument, for RELOC_ARG */
} SimplerGraphTensor;
_Static_assert(sizeof(SimplerGraphTensor) == 136, "GraphTensor is 136 bytes");

#ifdef __cplusplus
}
#endif
#endif /* SIMPLER_RUN_H */
