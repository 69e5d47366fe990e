/*
 * simpler/host.h — the native C host ABI: embed the simpler runtime in a C or C++ framework.
 *
 * Link libsimpler.so or libsimpler.a (built by `cargo build -p simpler-capi`); see
 * docs/c-abi.md for linking, the run transaction, threading, lifetimes and the fork rule.
 *
 * Every entry returns an int32_t SimplerStatus (0 = SIMPLER_STATUS_OK) and, on failure,
 * leaves a message for the calling thread in simpler_last_error(). Handles are opaque and
 * validated on every call: a finalized, destroyed or foreign handle is refused with
 * SIMPLER_STATUS_INVALID_HANDLE, never undefined behaviour. Every struct and enum here has
 * _Static_asserts on its layout; crates/simpler-capi/src/types.rs asserts the same numbers
 * on the Rust side.
 */
#ifndef SIMPLER_HOST_H
#define SIMPLER_HOST_H

#include <stddef.h>
#include <stdint.h>

/* The same value as simpler/types.h (a C-only kernel header this one does not include, so
 * that C++ can include this one); SimplerArg.dtype takes its SimplerDataType values. */
#ifndef SIMPLER_MAX_TENSOR_DIMS
#define SIMPLER_MAX_TENSOR_DIMS 5
#endif

#ifdef __cplusplus
extern "C" {
#define SIMPLER_HOST_STATIC_ASSERT static_assert
#else
#define SIMPLER_HOST_STATIC_ASSERT _Static_assert
#endif

/* The ABI's version; bumped when an entry or a struct changes incompatibly. */
#define SIMPLER_HOST_ABI_VERSION 1

/* Status codes. Stable numbers: a code keeps its number forever, new codes are appended. */
typedef enum SimplerStatus {
    SIMPLER_STATUS_OK = 0,
    SIMPLER_STATUS_INVALID_ARGUMENT = 1,           /* an argument of the call is wrong */
    SIMPLER_STATUS_INVALID_STATE = 2,              /* not allowed now: mode latch, run outstanding, 64 callables */
    SIMPLER_STATUS_UNKNOWN_CALLABLE = 3,           /* no callable under that id */
    SIMPLER_STATUS_TIMEOUT = 4,                    /* simpler_wait_run ran out of time; the run goes on */
    SIMPLER_STATUS_RUN_FAILED = 5,                 /* the run executed and failed (runtime code in the text) */
    SIMPLER_STATUS_DEVICE_FAULT = 6,               /* the device faulted and no run result explains it */
    SIMPLER_STATUS_DEVICE_UNUSABLE = 7,            /* earlier failures closed admission */
    SIMPLER_STATUS_RUN_UNDECIDED = 8,              /* the run's evidence decided nothing */
    SIMPLER_STATUS_LANE_POISONED = 9,              /* not launched: an earlier launch awaits its drain */
    SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED = 10, /* borrowed context not current on this thread (retryable) */
    SIMPLER_STATUS_FORKED_CHILD = 11,              /* handle inherited by a forked child (never restorable) */
    SIMPLER_STATUS_WORKER_CLOSED = 12,             /* the context was finalized */
    SIMPLER_STATUS_UNSUPPORTED = 13,               /* the entry is closed (kernel-mode launch) */
    SIMPLER_STATUS_INTERNAL = 14,                  /* a panic inside the library (a bug) */
    SIMPLER_STATUS_NULL_POINTER = 15,              /* a required pointer argument is NULL */
    SIMPLER_STATUS_INVALID_HANDLE = 16,            /* not a live handle: finalized, destroyed, or never made */
    SIMPLER_STATUS_INVALID_CONFIG = 17,            /* a configuration field is out of range */
    SIMPLER_STATUS_INVALID_CALLABLE = 18,          /* bundle, signature or code image refused */
    SIMPLER_STATUS_DEVICE_ERROR = 19,              /* a device call failed (memory, copies, streams) */
    SIMPLER_STATUS_RUN_TIMEOUT = 20,               /* the run's completion was not proven in time; device unusable */
    SIMPLER_STATUS_RUN_PREPARATION_REFUSED = 21,   /* the run was refused at preparation and rolled back */
    SIMPLER_STATUS_DETACHED = 22,                  /* the run was detached from a dropped worker */
    SIMPLER_STATUS_CLEANUP_INCOMPLETE = 23         /* finalized, but not everything could be freed; retry */
} SimplerStatus;

SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerStatus) == 4, "SimplerStatus is 4 bytes");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_STATUS_INVALID_STATE == 2, "SIMPLER_STATUS_INVALID_STATE");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED == 10,
                           "SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_STATUS_INVALID_HANDLE == 16, "SIMPLER_STATUS_INVALID_HANDLE");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_STATUS_CLEANUP_INCOMPLETE == 23,
                           "SIMPLER_STATUS_CLEANUP_INCOMPLETE");

/* Opaque handles. Never dereferenced by the caller; validated by every entry. */
typedef struct SimplerContext SimplerContext;
typedef struct SimplerRun SimplerRun;
typedef struct SimplerRecording SimplerRecording;

/* A stream of a caller context (the sim's stream id). */
typedef uint64_t SimplerStream;

/* A function the caller queues on a stream; runs on the stream's thread. */
typedef void (*SimplerHostFn)(void *user);

/* simpler_wait_run: wait as long as the run takes. */
#define SIMPLER_WAIT_FOREVER UINT64_MAX

/* simpler_capabilities bits. */
#define SIMPLER_CAP_PROGRAM_LAUNCH (1ull << 0)     /* simpler_launch_run(_joined) */
#define SIMPLER_CAP_CALLER_STREAM (1ull << 1)      /* simpler_launch_run_on_stream */
#define SIMPLER_CAP_SIM_CONTEXT (1ull << 2)        /* simpler_sim_* caller contexts */
#define SIMPLER_CAP_KERNEL_MODE_LAUNCH (1ull << 3) /* always 0: the entry is closed */

/* SimplerContextConfig.sim_memcheck. */
typedef enum SimplerMemcheck {
    SIMPLER_MEMCHECK_FROM_ENV = 0, /* SIMPLER_SIM_MEMCHECK decides */
    SIMPLER_MEMCHECK_OFF = 1,
    SIMPLER_MEMCHECK_AFTER = 2,    /* a guard page after each allocation */
    SIMPLER_MEMCHECK_BEFORE = 3    /* a guard page before each allocation */
} SimplerMemcheck;

SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerMemcheck) == 4, "SimplerMemcheck is 4 bytes");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_MEMCHECK_FROM_ENV == 0, "SIMPLER_MEMCHECK_FROM_ENV");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_MEMCHECK_OFF == 1, "SIMPLER_MEMCHECK_OFF");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_MEMCHECK_AFTER == 2, "SIMPLER_MEMCHECK_AFTER");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_MEMCHECK_BEFORE == 3, "SIMPLER_MEMCHECK_BEFORE");

/* SimplerContextConfig.runtime and SimplerRunConfig.runtime: a runtime variant
 * (docs/chip-runtime.md §17). A run uses its run config's, else its callable's (the
 * bundle's), else its context's, else tensormap_and_ringbuffer. */
typedef enum SimplerRuntime {
    SIMPLER_RUNTIME_DEFAULT = 0,                  /* not named here: the next level decides */
    SIMPLER_RUNTIME_TENSORMAP_AND_RINGBUFFER = 1, /* orchestration on an AICPU thread, four rings */
    SIMPLER_RUNTIME_HOST_BUILD_GRAPH = 2          /* graph built on the host, then uploaded */
} SimplerRuntime;

SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerRuntime) == 4, "SimplerRuntime is 4 bytes");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_RUNTIME_DEFAULT == 0, "SIMPLER_RUNTIME_DEFAULT");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_RUNTIME_TENSORMAP_AND_RINGBUFFER == 1,
                           "SIMPLER_RUNTIME_TENSORMAP_AND_RINGBUFFER");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_RUNTIME_HOST_BUILD_GRAPH == 2,
                           "SIMPLER_RUNTIME_HOST_BUILD_GRAPH");

#define SIMPLER_CONTEXT_CONFIG_VERSION 1u

/*
 * How a context is made. Zero means "the default" for every field after the header. The
 * library reads `size` bytes at most: a field past `size` counts as zero, so a struct that
 * grows at its end stays compatible both ways. version must be 1.
 */
typedef struct SimplerContextConfig {
    uint32_t size;                   /* sizeof(SimplerContextConfig) */
    uint32_t version;                /* SIMPLER_CONTEXT_CONFIG_VERSION */
    uint32_t clusters;               /* sim device: clusters (1..=24, 0: 8); owned init only */
    uint32_t aicpu_threads;          /* sim device: AICPU threads (2..=8, 0: 4); owned init only */
    uint32_t sim_memcheck;           /* SimplerMemcheck; owned init only */
    uint32_t aicpu_thread_num;       /* AICPU threads a run uses (0: all) */
    uint32_t launch_depth;           /* runs on the device at once, 1 or 2 (0: 2) */
    uint32_t task_window;            /* task slots per ring, power of two >= 4 (0: default) */
    uint64_t heap_size;              /* device output heap bytes (0: 256 MiB) */
    uint64_t run_timeout_ms;         /* a run's completion (0: SIMPLER_STREAM_SYNC_TIMEOUT_MS or 50 s) */
    uint64_t scheduler_timeout_ms;   /* no-progress watchdog (0: SIMPLER_SCHEDULER_TIMEOUT_MS or 10 s) */
    uint64_t op_execute_timeout_us;  /* one kernel dispatch (0: SIMPLER_OP_EXECUTE_TIMEOUT_US or 45 s) */
    uint64_t tensor_data_timeout_ms; /* get/set_tensor_data (0: SIMPLER_TENSOR_DATA_TIMEOUT_MS or 15 s) */
    /* Appended; a caller that passes size 72 (compiled before them) gets 0 for both. */
    uint32_t enable_sdma;            /* 1: the sim chip's SDMA engine (0: none); owned init only */
    uint32_t runtime;                /* SimplerRuntime of runs that name none (0: tensormap_and_ringbuffer) */
} SimplerContextConfig;

SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerContextConfig) == 80, "SimplerContextConfig is 80 bytes");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, version) == 4, "ContextConfig.version");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, clusters) == 8, "ContextConfig.clusters");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, aicpu_threads) == 12,
                           "ContextConfig.aicpu_threads");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, sim_memcheck) == 16,
                           "ContextConfig.sim_memcheck");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, aicpu_thread_num) == 20,
                           "ContextConfig.aicpu_thread_num");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, launch_depth) == 24,
                           "ContextConfig.launch_depth");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, task_window) == 28,
                           "ContextConfig.task_window");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, heap_size) == 32, "ContextConfig.heap_size");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, run_timeout_ms) == 40,
                           "ContextConfig.run_timeout_ms");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, scheduler_timeout_ms) == 48,
                           "ContextConfig.scheduler_timeout_ms");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, op_execute_timeout_us) == 56,
                           "ContextConfig.op_execute_timeout_us");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, tensor_data_timeout_ms) == 64,
                           "ContextConfig.tensor_data_timeout_ms");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, enable_sdma) == 72,
                           "ContextConfig.enable_sdma");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerContextConfig, runtime) == 76, "ContextConfig.runtime");

#define SIMPLER_RUN_CONFIG_VERSION 1u

/* Options of one run; zero means "the context's setting". Same size/version rule. */
typedef struct SimplerRunConfig {
    uint32_t size;             /* sizeof(SimplerRunConfig) */
    uint32_t version;          /* SIMPLER_RUN_CONFIG_VERSION */
    uint32_t aicpu_thread_num; /* 2..=the device's AICPU threads (0: the context's) */
    uint32_t reserved;         /* must be 0 */
    uint64_t ring_task_window; /* every ring's task window (0: default) */
    uint64_t ring_heap;        /* every ring's output-heap bytes (0: default) */
    uint64_t ring_dep_pool;    /* every ring's dependency-pool entries (0: default) */
    /* Appended; a caller that passes size 40 (compiled before them) gets 0 for both. */
    uint32_t runtime;          /* SimplerRuntime of this run (0: the callable's, else the context's) */
    uint32_t reserved2;        /* must be 0 */
} SimplerRunConfig;

SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerRunConfig) == 48, "SimplerRunConfig is 48 bytes");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, aicpu_thread_num) == 8,
                           "RunConfig.aicpu_thread_num");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, reserved) == 12, "RunConfig.reserved");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, ring_task_window) == 16,
                           "RunConfig.ring_task_window");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, ring_heap) == 24, "RunConfig.ring_heap");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, ring_dep_pool) == 32, "RunConfig.ring_dep_pool");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, runtime) == 40, "RunConfig.runtime");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerRunConfig, reserved2) == 44, "RunConfig.reserved2");

/* What a SimplerArg is. */
typedef enum SimplerArgKind {
    SIMPLER_ARG_HOST_TENSOR = 1,   /* host memory: host_ptr, nbytes, dtype, ndims, shape */
    SIMPLER_ARG_DEVICE_TENSOR = 2, /* device memory from simpler_malloc: device_ptr, dtype, ndims, shape */
    SIMPLER_ARG_SCALAR = 3         /* the scalar's 64 raw bits: scalar_bits */
} SimplerArgKind;

SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerArgKind) == 4, "SimplerArgKind is 4 bytes");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_ARG_HOST_TENSOR == 1, "SIMPLER_ARG_HOST_TENSOR");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_ARG_DEVICE_TENSOR == 2, "SIMPLER_ARG_DEVICE_TENSOR");
SIMPLER_HOST_STATIC_ASSERT(SIMPLER_ARG_SCALAR == 3, "SIMPLER_ARG_SCALAR");

/*
 * One run argument, in signature order. A host tensor's memory is lent in place: the run
 * reads its inputs and writes its outputs there, so the caller keeps it alive and leaves it
 * alone from simpler_launch_run* until simpler_finalize_run returns.
 */
typedef struct SimplerArg {
    uint32_t kind;                             /* SimplerArgKind */
    uint32_t dtype;                            /* SimplerDataType of simpler/types.h (tensors) */
    uint32_t ndims;                            /* 1..=SIMPLER_MAX_TENSOR_DIMS (tensors) */
    uint32_t reserved;                         /* must be 0 */
    uint64_t shape[SIMPLER_MAX_TENSOR_DIMS];   /* elements per dimension; the first ndims count */
    void *host_ptr;                            /* HOST_TENSOR: the first byte, C order */
    uint64_t nbytes;                           /* HOST_TENSOR: bytes at host_ptr */
    uint64_t device_ptr;                       /* DEVICE_TENSOR: the first byte */
    uint64_t scalar_bits;                      /* SCALAR: raw bits (a double keeps its 64 bits) */
} SimplerArg;

SIMPLER_HOST_STATIC_ASSERT(sizeof(void *) == 8, "simpler's host ABI needs 64-bit pointers");
SIMPLER_HOST_STATIC_ASSERT(sizeof(SimplerArg) == 88, "SimplerArg is 88 bytes");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, dtype) == 4, "SimplerArg.dtype");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, ndims) == 8, "SimplerArg.ndims");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, reserved) == 12, "SimplerArg.reserved");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, shape) == 16, "SimplerArg.shape");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, host_ptr) == 56, "SimplerArg.host_ptr");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, nbytes) == 64, "SimplerArg.nbytes");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, device_ptr) == 72, "SimplerArg.device_ptr");
SIMPLER_HOST_STATIC_ASSERT(offsetof(SimplerArg, scalar_bits) == 80, "SimplerArg.scalar_bits");

/* ---- Convenience constructors (header-only). ---- */

static inline SimplerContextConfig simpler_context_config_default(void) {
    SimplerContextConfig c;
    unsigned char *p = (unsigned char *)&c;
    for (size_t i = 0; i < sizeof c; ++i) p[i] = 0;
    c.size = (uint32_t)sizeof c;
    c.version = SIMPLER_CONTEXT_CONFIG_VERSION;
    return c;
}

static inline SimplerRunConfig simpler_run_config_default(void) {
    SimplerRunConfig c;
    unsigned char *p = (unsigned char *)&c;
    for (size_t i = 0; i < sizeof c; ++i) p[i] = 0;
    c.size = (uint32_t)sizeof c;
    c.version = SIMPLER_RUN_CONFIG_VERSION;
    return c;
}

static inline SimplerArg simpler_arg_tensor_(uint32_t kind, uint32_t dtype, uint32_t ndims,
                                             const uint64_t *shape) {
    SimplerArg a;
    unsigned char *p = (unsigned char *)&a;
    for (size_t i = 0; i < sizeof a; ++i) p[i] = 0;
    a.kind = kind;
    a.dtype = dtype;
    a.ndims = ndims;
    for (uint32_t d = 0; d < ndims && d < SIMPLER_MAX_TENSOR_DIMS; ++d) a.shape[d] = shape[d];
    return a;
}

/* A host tensor of `ndims` dims `shape` (elements) and dtype at `ptr` (`nbytes` bytes). */
static inline SimplerArg simpler_arg_host(void *ptr, uint64_t nbytes, uint32_t dtype,
                                          uint32_t ndims, const uint64_t *shape) {
    SimplerArg a = simpler_arg_tensor_(SIMPLER_ARG_HOST_TENSOR, dtype, ndims, shape);
    a.host_ptr = ptr;
    a.nbytes = nbytes;
    return a;
}

/* A device tensor at `device_ptr` (inside one simpler_malloc allocation). */
static inline SimplerArg simpler_arg_device(uint64_t device_ptr, uint32_t dtype, uint32_t ndims,
                                            const uint64_t *shape) {
    SimplerArg a = simpler_arg_tensor_(SIMPLER_ARG_DEVICE_TENSOR, dtype, ndims, shape);
    a.device_ptr = device_ptr;
    return a;
}

/* A scalar's raw 64 bits. */
static inline SimplerArg simpler_arg_scalar(uint64_t bits) {
    SimplerArg a = simpler_arg_tensor_(SIMPLER_ARG_SCALAR, 0, 0, NULL);
    a.scalar_bits = bits;
    return a;
}

/* ---- Errors. ---- */

/* This thread's last failure text (valid until this thread's next simpler_* call); "" if the
 * thread's last call succeeded or it made none. Never NULL. */
const char *simpler_last_error(void);

/* The status's name ("SIMPLER_STATUS_OK", ...), "SIMPLER_STATUS_<unknown>" for other numbers. */
const char *simpler_status_name(int32_t status);

/* Capability bits (SIMPLER_CAP_*) of this library; SIMPLER_CAP_KERNEL_MODE_LAUNCH is 0. */
int32_t simpler_capabilities(uint64_t *bits);

/* ---- Contexts. ---- */

/* An owned context: a sim device of config's topology and a worker on it. config may be
 * NULL (all defaults). *out is NULL on failure. */
int32_t simpler_context_init(const SimplerContextConfig *config, SimplerContext **out);

/* A borrowed context on the caller context `borrowed_context_generation` (nonzero, live, and
 * current on this thread): KERNEL mode from the start, runs go on caller streams. Device
 * fields (clusters, aicpu_threads, sim_memcheck) must be 0: the caller owns the device. */
int32_t simpler_context_init_borrowed(const SimplerContextConfig *config,
                                      uint64_t borrowed_context_generation, SimplerContext **out);

/* Closes the context: queued runs end with WORKER_CLOSED, launched runs are drained, device
 * memory is freed. Afterwards entries on ctx return SIMPLER_STATUS_WORKER_CLOSED (finalize
 * again retries an incomplete cleanup); the handle stays valid until simpler_context_destroy. */
int32_t simpler_context_finalize(SimplerContext *ctx);

/* Finalizes (if not yet) and frees the handle and its runs; afterwards every entry on ctx
 * returns SIMPLER_STATUS_INVALID_HANDLE. */
int32_t simpler_context_destroy(SimplerContext *ctx);

/* ---- Sim caller contexts (a "current context" and streams without hardware). ---- */

/* A sim device of `clusters` x `aicpu_threads` (0: defaults) named by a fresh generation. */
int32_t simpler_sim_context_create(uint32_t clusters, uint32_t aicpu_threads,
                                   uint64_t *generation_out);
/* Removes the generation (a context already attached keeps the device alive). */
int32_t simpler_sim_context_destroy(uint64_t generation);
/* Makes `generation` the calling thread's current context; 0 clears it. */
int32_t simpler_sim_context_make_current(uint64_t generation);
int32_t simpler_sim_stream_create(uint64_t generation, SimplerStream *out);
/* Waits for the stream's queued work, then destroys it. */
int32_t simpler_sim_stream_destroy(uint64_t generation, SimplerStream stream);
/* Queues fn(user) on the stream: it runs after the work queued before it. */
int32_t simpler_sim_stream_launch_host_fn(uint64_t generation, SimplerStream stream,
                                          SimplerHostFn fn, void *user);
/* Waits until the stream drains, at most timeout_ms (> 0; 0 is INVALID_ARGUMENT): TIMEOUT
 * otherwise. An unknown stream is INVALID_ARGUMENT for every simpler_sim_stream_* entry. */
int32_t simpler_sim_stream_synchronize(uint64_t generation, SimplerStream stream,
                                       uint64_t timeout_ms);

/* ---- Callables. `bundle` is the contents of a bundle file (`simpler build`). ---- */

/* Registers under the lowest free id; *out_id is the id, or -1 on any failure
 * (SIMPLER_STATUS_INVALID_STATE when all 64 slots are taken). */
int32_t simpler_register_callable_v2(SimplerContext *ctx, const uint8_t *bundle, size_t len,
                                     int32_t *out_id);
/* Registers under `id` (0..63); taken or out of range: INVALID_ARGUMENT. */
int32_t simpler_register_callable(SimplerContext *ctx, uint32_t id, const uint8_t *bundle,
                                  size_t len);
/* simpler_register_callable_v2 from a bundle file's path. */
int32_t simpler_register_callable_file(SimplerContext *ctx, const char *path, int32_t *out_id);
int32_t simpler_unregister_callable(SimplerContext *ctx, uint32_t id);

/* ---- Runs: prepare -> launch (plain, joined or on a stream) -> poll / wait -> finalize. ---- */

/* Checks args against the callable's signature (nargs first, before args is read) and cfg
 * (INVALID_CONFIG), and makes a run; nothing is launched yet. Device tensors' device_ptr is
 * checked at the launch. cfg may be NULL. *out is NULL on failure. */
int32_t simpler_prepare_run(SimplerContext *ctx, int32_t callable_id, const SimplerArg *args,
                            size_t nargs, const SimplerRunConfig *cfg, SimplerRun **out);
/* Program launch on the context's own streams (claims the PROGRAM mode). A failed launch
 * leaves the run prepared: launch it again or finalize it. */
int32_t simpler_launch_run(SimplerContext *ctx, SimplerRun *run);
/* simpler_launch_run, checking that `predecessor` is the context's latest launched run not
 * yet finalized; the run is ordered behind it (both predecessor kernels finish before either
 * of the run's kernels starts) while up to two runs are on the device. */
int32_t simpler_launch_run_joined(SimplerContext *ctx, SimplerRun *run, SimplerRun *predecessor);
/* Launch on the caller's stream (claims the KERNEL mode): after the work queued on `caller`
 * before this call, before the work queued after it. predecessor may be NULL; if not, it
 * must be the context's latest launched run not yet finalized. */
int32_t simpler_launch_run_on_stream(SimplerContext *ctx, SimplerRun *run, SimplerStream caller,
                                     SimplerRun *predecessor);
/* *done = 1 once the run is terminal, else 0; never blocks. */
int32_t simpler_poll_run(SimplerContext *ctx, SimplerRun *run, int *done);
/* Waits at most timeout_ms (SIMPLER_WAIT_FOREVER: unbounded) and returns the run's verdict;
 * TIMEOUT when not terminal in time (the run goes on and stays waitable). */
int32_t simpler_wait_run(SimplerContext *ctx, SimplerRun *run, uint64_t timeout_ms);
/* Waits for the run, returns its verdict (outputs are in the caller's host buffers on OK),
 * and frees the run: afterwards the handle is refused (INVALID_HANDLE). A run never launched
 * is freed with OK. */
int32_t simpler_finalize_run(SimplerContext *ctx, SimplerRun *run);

/* ---- Record and replay (host_build_graph; docs/c-abi.md §5, docs/chip-runtime.md §17). ---- */

/* Runs callable_id on args (checked as simpler_prepare_run checks them) under
 * host_build_graph, waits for it, and keeps its graph: on OK the outputs are in the caller's
 * host buffers and *out is a recording to replay. An orchestration that calls
 * get/set_tensor_data fails the run (INVALID_ARGUMENT naming `record`). cfg may be NULL;
 * its runtime must be 0 or HOST_BUILD_GRAPH. *out is NULL on failure. */
int32_t simpler_record_run(SimplerContext *ctx, int32_t callable_id, const SimplerArg *args,
                           size_t nargs, const SimplerRunConfig *cfg, SimplerRecording **out);
/* Runs the recorded graph again on args and waits for it: the orchestration does not run,
 * only the arguments' addresses are rebound. An argument whose kind, shape, dtype or scalar
 * value differs from the recording's is refused with INVALID_ARGUMENT naming it (nothing
 * runs); a recording whose callable was unregistered or registered again since:
 * INVALID_STATE. cfg may be NULL (its runtime must be 0 or HOST_BUILD_GRAPH). */
int32_t simpler_replay_run(SimplerContext *ctx, SimplerRecording *recording,
                           const SimplerArg *args, size_t nargs, const SimplerRunConfig *cfg);
/* Frees a recording (its device image goes once no run uses it); afterwards the handle is
 * refused (INVALID_HANDLE). simpler_context_destroy frees the context's recordings. */
int32_t simpler_recording_destroy(SimplerContext *ctx, SimplerRecording *recording);

/* Closed compatibility entry: always SIMPLER_STATUS_UNSUPPORTED. */
int32_t simpler_kernel_mode_launch(SimplerContext *ctx, int32_t callable_id,
                                   const SimplerArg *args, size_t nargs, SimplerStream stream);

/* ---- Device memory. ---- */

/* size bytes of zeroed device memory at *dev_ptr. */
int32_t simpler_malloc(SimplerContext *ctx, uint64_t size, uint64_t *dev_ptr);
int32_t simpler_free(SimplerContext *ctx, uint64_t dev_ptr);
int32_t simpler_copy_to_device(SimplerContext *ctx, uint64_t dst, const void *src, uint64_t size);
int32_t simpler_copy_from_device(SimplerContext *ctx, void *dst, uint64_t src, uint64_t size);

#ifdef __cplusplus
}
#endif

#undef SIMPLER_HOST_STATIC_ASSERT

#endif /* SIMPLER_HOST_H */
