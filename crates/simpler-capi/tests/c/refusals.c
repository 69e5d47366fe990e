/*
 * refusals.c — every refusal of include/simpler/host.h a C caller can meet, each checked for
 * its status and for a simpler_last_error() text that names the thing.
 *
 * Usage: refusals <gemm.simpler> <sleepy.simpler>
 *   sleepy: `out` f32 [16] (out), `ms` u64 (scalar); its one kernel sleeps `ms`
 *   milliseconds, then writes 1.0 to every element of `out`.
 *
 * Prints PASS and exits 0, or prints what failed and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "simpler/types.h"

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = (uint8_t *)malloc((size_t)n);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static float OUT1[16], OUT2[16], OUT3[16];

static SimplerRun *sleepy_run(SimplerContext *ctx, int32_t id, float *out, uint64_t ms) {
    const uint64_t shape[1] = {16};
    SimplerArg args[2] = {simpler_arg_host(out, sizeof(float) * 16, SIMPLER_DT_FLOAT32, 1, shape),
                          simpler_arg_scalar(ms)};
    SimplerRun *run = NULL;
    CHECK_OK(simpler_prepare_run(ctx, id, args, 2, NULL, &run));
    return run;
}

static void registry_and_runs(const char *gemm_path, const char *sleepy_path) {
    size_t glen = 0, slen = 0;
    uint8_t *gemm = read_file(gemm_path, &glen);
    uint8_t *sleepy = read_file(sleepy_path, &slen);
    SimplerContextConfig cfg = simpler_context_config_default();
    cfg.clusters = 1;
    cfg.aicpu_threads = 2;
    cfg.heap_size = 16u << 20;
    SimplerContext *ctx = NULL;
    CHECK_OK(simpler_context_init(&cfg, &ctx));

    /* 64 slots, then the 65th registration: INVALID_STATE and -1. */
    for (int i = 0; i < 64; ++i) {
        int32_t id = -7;
        CHECK_OK(simpler_register_callable_v2(ctx, gemm, glen, &id));
        EXPECT(id == i, "automatic id %d, got %d", i, id);
    }
    int32_t id = 5;
    REFUSED(simpler_register_callable_v2(ctx, gemm, glen, &id), SIMPLER_STATUS_INVALID_STATE,
            "64 callable slots");
    EXPECT(id == -1, "the 65th registration's id is -1, got %d", id);
    id = 5;
    REFUSED(simpler_register_callable_v2(ctx, gemm, 3, &id), SIMPLER_STATUS_INVALID_CALLABLE,
            "bundle");
    EXPECT(id == -1, "a refused bundle's id is -1, got %d", id);

    /* An explicit id that is taken. */
    REFUSED(simpler_register_callable(ctx, 3, sleepy, slen), SIMPLER_STATUS_INVALID_ARGUMENT,
            "callable_id");
    CHECK_OK(simpler_unregister_callable(ctx, 63));
    CHECK_OK(simpler_register_callable(ctx, 63, sleepy, slen));
    REFUSED(simpler_unregister_callable(ctx, 64), SIMPLER_STATUS_UNKNOWN_CALLABLE, "64");

    /* Null pointers and bad arguments. */
    REFUSED(simpler_malloc(ctx, 64, NULL), SIMPLER_STATUS_NULL_POINTER, "dev_ptr");
    SimplerRun *none = NULL;
    REFUSED(simpler_prepare_run(ctx, 63, NULL, 2, NULL, &none), SIMPLER_STATUS_NULL_POINTER,
            "args");
    EXPECT(none == NULL, "no run on failure");
    int done = -1;
    REFUSED(simpler_poll_run(ctx, NULL, &done), SIMPLER_STATUS_NULL_POINTER, "run");
    REFUSED(simpler_launch_run(NULL, NULL), SIMPLER_STATUS_NULL_POINTER, "ctx");
    {
        const uint64_t shape[1] = {8};
        SimplerArg wrong[2] = {simpler_arg_host(OUT1, sizeof(float) * 8, SIMPLER_DT_FLOAT32, 1,
                                                shape),
                               simpler_arg_scalar(0)};
        REFUSED(simpler_prepare_run(ctx, 63, wrong, 2, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "out");
        REFUSED(simpler_prepare_run(ctx, 63, wrong, 1, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "takes 2 arguments");
        /* A count no array can have is refused before anything is read. */
        REFUSED(simpler_prepare_run(ctx, 63, wrong, SIZE_MAX, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "takes 2 arguments");
        SimplerArg storage[3];
        memcpy((char *)storage + 1, wrong, sizeof wrong);
        REFUSED(simpler_prepare_run(ctx, 63, (const SimplerArg *)(const void *)((char *)storage + 1),
                                    2, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "aligned");
        /* Out-of-range run options are refused at prepare, not first at the launch. */
        SimplerRunConfig rc = simpler_run_config_default();
        rc.aicpu_thread_num = 99;
        SimplerArg right[2] = {simpler_arg_host(OUT1, sizeof OUT1, SIMPLER_DT_FLOAT32, 1,
                                                (const uint64_t[1]){16}),
                               simpler_arg_scalar(0)};
        REFUSED(simpler_prepare_run(ctx, 63, right, 2, &rc, &none), SIMPLER_STATUS_INVALID_CONFIG,
                "aicpu_thread_num");
        rc.aicpu_thread_num = 0;
        rc.ring_task_window = 3;
        REFUSED(simpler_prepare_run(ctx, 63, right, 2, &rc, &none), SIMPLER_STATUS_INVALID_CONFIG,
                "ring_task_window");
        EXPECT(none == NULL, "no run on failure");
        /* A byte count no host range can have. */
        char host[8];
        REFUSED(simpler_copy_to_device(ctx, 4096, host, UINT64_MAX),
                SIMPLER_STATUS_INVALID_ARGUMENT, "src");
        REFUSED(simpler_copy_from_device(ctx, host, 4096, UINT64_MAX),
                SIMPLER_STATUS_INVALID_ARGUMENT, "dst");
        /* A host tensor's range is checked at prepare as the copies check theirs: 1 MiB at
         * UINTPTR_MAX - 100 wraps, and is refused before any launch could touch it. */
        const uint64_t g_shape[2] = {512, 512};
        const uint64_t g_bytes = 512u * 512u * sizeof(float);
        float *ga = (float *)calloc(512 * 512 + 1, sizeof(float));
        float *gc = (float *)calloc(512 * 512, sizeof(float));
        EXPECT(ga != NULL && gc != NULL, "the gemm buffers were allocated");
        SimplerArg wraps[3] = {
            simpler_arg_host((void *)(UINTPTR_MAX - 100), g_bytes, SIMPLER_DT_FLOAT32, 2, g_shape),
            simpler_arg_host(ga, g_bytes, SIMPLER_DT_FLOAT32, 2, g_shape),
            simpler_arg_host(gc, g_bytes, SIMPLER_DT_FLOAT32, 2, g_shape)};
        REFUSED(simpler_prepare_run(ctx, 0, wraps, 3, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "args[0].host_ptr");
        REFUSED(simpler_prepare_run(ctx, 0, wraps, 3, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "past the end of the address space");
        /* A host tensor that does not start on an element boundary is refused, naming it. */
        SimplerArg misaligned[3] = {
            simpler_arg_host(ga, g_bytes, SIMPLER_DT_FLOAT32, 2, g_shape),
            simpler_arg_host((char *)ga + 1, g_bytes, SIMPLER_DT_FLOAT32, 2, g_shape),
            simpler_arg_host(gc, g_bytes, SIMPLER_DT_FLOAT32, 2, g_shape)};
        REFUSED(simpler_prepare_run(ctx, 0, misaligned, 3, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "args[1].host_ptr");
        REFUSED(simpler_prepare_run(ctx, 0, misaligned, 3, NULL, &none),
                SIMPLER_STATUS_INVALID_ARGUMENT, "not aligned to the 4-byte elements");
        EXPECT(none == NULL, "no run on failure");
        free(ga);
        free(gc);
        /* A bundle path that is a device, a FIFO with no writer (refused at once, not waited
         * on) or a directory is refused before anything is read. */
        REFUSED(simpler_register_callable_file(ctx, "/dev/zero", &id),
                SIMPLER_STATUS_INVALID_ARGUMENT, "is a character device, not a regular file");
        char fifo[64];
        snprintf(fifo, sizeof fifo, "/tmp/simpler-refusals-%d.fifo", (int)getpid());
        unlink(fifo);
        EXPECT(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
        REFUSED(simpler_register_callable_file(ctx, fifo, &id), SIMPLER_STATUS_INVALID_ARGUMENT,
                "is a FIFO, not a regular file");
        unlink(fifo);
        REFUSED(simpler_register_callable_file(ctx, "/tmp", &id), SIMPLER_STATUS_INVALID_ARGUMENT,
                "is a directory, not a regular file");
        EXPECT(id == -1, "a refused file's id is -1, got %d", id);
    }

    /* A bounded wait on a run that sleeps: TIMEOUT, and the run stays waitable. */
    SimplerRun *slow = sleepy_run(ctx, 63, OUT1, 1500);
    /* A handle of the other kind is refused even when its serial number is live (this is the
     * process's first context and first run). */
    REFUSED(simpler_poll_run(ctx, (SimplerRun *)(void *)ctx, &done), SIMPLER_STATUS_INVALID_HANDLE,
            "is a context handle, not a run handle");
    REFUSED(simpler_context_finalize((SimplerContext *)(void *)slow), SIMPLER_STATUS_INVALID_HANDLE,
            "is a run handle, not a context handle");
    CHECK_OK(simpler_launch_run(ctx, slow));
    REFUSED(simpler_launch_run(ctx, slow), SIMPLER_STATUS_INVALID_STATE, "already launched");
    REFUSED(simpler_wait_run(ctx, slow, 50), SIMPLER_STATUS_TIMEOUT, "still in flight");
    CHECK_OK(simpler_poll_run(ctx, slow, &done));
    EXPECT(done == 0, "the sleeping run is not done yet");
    CHECK_OK(simpler_wait_run(ctx, slow, SIMPLER_WAIT_FOREVER));
    CHECK_OK(simpler_finalize_run(ctx, slow));
    EXPECT(OUT1[0] == 1.0f && OUT1[15] == 1.0f, "the output was copied back (%g)", OUT1[0]);

    /* Use after finalize (run). */
    REFUSED(simpler_poll_run(ctx, slow, &done), SIMPLER_STATUS_INVALID_HANDLE,
            "finalized or destroyed");
    REFUSED(simpler_finalize_run(ctx, slow), SIMPLER_STATUS_INVALID_HANDLE, "run");

    /* Joined launches: the predecessor must be the latest launched run not finalized. */
    SimplerRun *a = sleepy_run(ctx, 63, OUT1, 200);
    SimplerRun *b = sleepy_run(ctx, 63, OUT2, 0);
    SimplerRun *c = sleepy_run(ctx, 63, OUT3, 0);
    REFUSED(simpler_launch_run_joined(ctx, b, a), SIMPLER_STATUS_INVALID_ARGUMENT,
            "predecessor");
    CHECK_OK(simpler_launch_run(ctx, a));
    CHECK_OK(simpler_launch_run_joined(ctx, b, a));
    REFUSED(simpler_launch_run_joined(ctx, c, a), SIMPLER_STATUS_INVALID_ARGUMENT,
            "latest launched run");

    /* The execution-mode latch: this context is PROGRAM now, so a caller stream is refused
     * (before the stream is even looked at). */
    REFUSED(simpler_launch_run_on_stream(ctx, c, 0, NULL), SIMPLER_STATUS_INVALID_STATE,
            "PROGRAM");

    /* A forked child: refused from the handle's value, without a hang. */
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20); /* a hang shows as SIGALRM */
        uint64_t p = 0;
        int ok = simpler_malloc(ctx, 64, &p) == SIMPLER_STATUS_FORKED_CHILD &&
                 strstr(simpler_last_error(), "forked child") != NULL;
        int d = 0;
        ok = ok && simpler_poll_run(ctx, b, &d) == SIMPLER_STATUS_FORKED_CHILD;
        _exit(ok ? 0 : 3);
    }
    int wstatus = 0;
    EXPECT(pid > 0 && waitpid(pid, &wstatus, 0) == pid, "the child was waited for");
    EXPECT(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
           "the forked child got FORKED_CHILD everywhere (exit %d, signal %d)",
           WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1,
           WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);

    /* The parent continues. */
    CHECK_OK(simpler_finalize_run(ctx, a));
    CHECK_OK(simpler_finalize_run(ctx, b));
    CHECK_OK(simpler_finalize_run(ctx, c)); /* never launched: freed with OK */
    EXPECT(OUT2[3] == 1.0f, "the joined run wrote its output");

    /* Use after finalize (context), then after destroy. */
    CHECK_OK(simpler_context_finalize(ctx));
    uint64_t p = 0;
    REFUSED(simpler_malloc(ctx, 64, &p), SIMPLER_STATUS_WORKER_CLOSED, "closed");
    REFUSED(simpler_register_callable_v2(ctx, sleepy, slen, &id), SIMPLER_STATUS_WORKER_CLOSED,
            "finalized");
    REFUSED(simpler_prepare_run(ctx, 63, NULL, 0, NULL, &none), SIMPLER_STATUS_WORKER_CLOSED,
            "finalized");
    CHECK_OK(simpler_context_finalize(ctx)); /* again: a no-op */
    CHECK_OK(simpler_context_destroy(ctx));
    REFUSED(simpler_malloc(ctx, 64, &p), SIMPLER_STATUS_INVALID_HANDLE, "finalized or destroyed");
    REFUSED(simpler_context_destroy(ctx), SIMPLER_STATUS_INVALID_HANDLE, "ctx");
    REFUSED(simpler_malloc((SimplerContext *)(uintptr_t)0x1234, 64, &p),
            SIMPLER_STATUS_INVALID_HANDLE, "not a handle");
    free(gemm);
    free(sleepy);
}

static void noop_host_fn(void *user) { (void)user; }

static void borrowed_refusals(const char *sleepy_path) {
    SimplerContext *ctx = (SimplerContext *)(uintptr_t)1;
    REFUSED(simpler_context_init_borrowed(NULL, 0, &ctx), SIMPLER_STATUS_INVALID_ARGUMENT,
            "borrowed_context_generation");
    EXPECT(ctx == NULL, "*out is NULL on failure");
    uint64_t g = 0;
    CHECK_OK(simpler_sim_context_create(1, 2, &g));
    EXPECT(g != 0, "a sim context's generation is nonzero");
    /* Not current on this thread. */
    REFUSED(simpler_context_init_borrowed(NULL, g, &ctx),
            SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED, "current");
    CHECK_OK(simpler_sim_context_make_current(g));
    /* Device options belong to the caller's device. */
    SimplerContextConfig cfg = simpler_context_config_default();
    cfg.clusters = 1;
    REFUSED(simpler_context_init_borrowed(&cfg, g, &ctx), SIMPLER_STATUS_INVALID_ARGUMENT,
            "clusters");
    cfg = simpler_context_config_default();
    cfg.version = 9;
    REFUSED(simpler_context_init_borrowed(&cfg, g, &ctx), SIMPLER_STATUS_INVALID_ARGUMENT,
            "version");
    CHECK_OK(simpler_context_init_borrowed(NULL, g, &ctx));
    int32_t id = -1;
    CHECK_OK(simpler_register_callable_file(ctx, sleepy_path, &id));
    SimplerRun *run = sleepy_run(ctx, id, OUT1, 0);
    /* A borrowed context is KERNEL from init: program launch is refused. */
    REFUSED(simpler_launch_run(ctx, run), SIMPLER_STATUS_INVALID_STATE, "KERNEL");
    REFUSED(simpler_launch_run_on_stream(ctx, run, 99999, NULL), SIMPLER_STATUS_INVALID_ARGUMENT,
            "caller_stream");
    REFUSED(simpler_sim_stream_launch_host_fn(g, 99999, noop_host_fn, NULL),
            SIMPLER_STATUS_INVALID_ARGUMENT, "unknown stream");
    REFUSED(simpler_sim_stream_synchronize(g, 99999, 10), SIMPLER_STATUS_INVALID_ARGUMENT,
            "unknown stream");
    REFUSED(simpler_sim_stream_destroy(g, 99999), SIMPLER_STATUS_INVALID_ARGUMENT,
            "unknown stream");
    /* Not current: refused, and retryable once current again. */
    CHECK_OK(simpler_sim_context_make_current(0));
    uint64_t p = 0;
    REFUSED(simpler_malloc(ctx, 64, &p), SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED, "context");
    REFUSED(simpler_context_destroy(ctx), SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED, "context");
    CHECK_OK(simpler_sim_context_make_current(g));
    CHECK_OK(simpler_malloc(ctx, 64, &p));
    CHECK_OK(simpler_free(ctx, p));
    CHECK_OK(simpler_finalize_run(ctx, run));
    CHECK_OK(simpler_context_destroy(ctx));
    REFUSED(simpler_sim_stream_synchronize(g, 0, 0), SIMPLER_STATUS_INVALID_ARGUMENT,
            "timeout_ms");
    CHECK_OK(simpler_sim_context_make_current(0));
    CHECK_OK(simpler_sim_context_destroy(g));
    REFUSED(simpler_sim_context_make_current(g), SIMPLER_STATUS_INVALID_ARGUMENT,
            "no live sim caller context");
    REFUSED(simpler_sim_stream_create(g, NULL), SIMPLER_STATUS_NULL_POINTER, "out");
}

static void library_refusals(void) {
    REFUSED(simpler_kernel_mode_launch(NULL, 0, NULL, 0, 0), SIMPLER_STATUS_UNSUPPORTED,
            "closed");
    uint64_t caps = 0;
    CHECK_OK(simpler_capabilities(&caps));
    EXPECT((caps & SIMPLER_CAP_KERNEL_MODE_LAUNCH) == 0, "no kernel-mode capability");
    EXPECT((caps & SIMPLER_CAP_CALLER_STREAM) != 0, "caller streams are a capability");
    EXPECT(simpler_last_error()[0] == '\0', "a success clears the last error");
    REFUSED(simpler_capabilities(NULL), SIMPLER_STATUS_NULL_POINTER, "bits");
    EXPECT(strcmp(simpler_status_name(SIMPLER_STATUS_FORKED_CHILD),
                  "SIMPLER_STATUS_FORKED_CHILD") == 0,
           "status names");
    EXPECT(strcmp(simpler_status_name(999), "SIMPLER_STATUS_<unknown>") == 0, "unknown status");
    SimplerContext *ctx = (SimplerContext *)(uintptr_t)1;
    REFUSED(simpler_context_init(NULL, NULL), SIMPLER_STATUS_NULL_POINTER, "out");
    SimplerContextConfig cfg = simpler_context_config_default();
    cfg.launch_depth = 3;
    REFUSED(simpler_context_init(&cfg, &ctx), SIMPLER_STATUS_INVALID_CONFIG, "launch_depth");
    cfg = simpler_context_config_default();
    cfg.task_window = 5; /* not a power of two */
    REFUSED(simpler_context_init(&cfg, &ctx), SIMPLER_STATUS_INVALID_CONFIG, "task_window");
    EXPECT(ctx == NULL, "*out is NULL on failure");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s <gemm.simpler> <sleepy.simpler>\n", argv[0]);
        return 2;
    }
    library_refusals();
    registry_and_runs(argv[1], argv[2]);
    borrowed_refusals(argv[2]);
    return finish();
}
