/*
 * record_replay.c — simpler_record_run / simpler_replay_run / simpler_recording_destroy.
 *
 * Usage: record_replay <gemm.simpler> <sleepy.simpler> <readback.simpler>
 *   gemm: C = A·B, 512 x 512 f32. sleepy: `out` f32 [16] (out), `ms` u64 (scalar).
 *   readback: sleepy's signature; its orchestration calls get_tensor_data (after its task,
 *   or with ms = 1 before it).
 *
 * 1. gemm recorded on (A, B) gives A·B; replayed on (2A, B) it gives 2A·B, and on (A, B)
 *    again A·B: the replays use their own arguments. An ordinary run in between works.
 * 2. Refusals, each named: a replay whose scalar, argument count or argument kind the
 *    recording cannot take (nothing runs); a recording config naming
 *    tensormap_and_ringbuffer; an orchestration whose get_tensor_data waits for a task, and one
 *    that calls it at all; a recording
 *    whose callable was unregistered; a destroyed recording; a run handle as a recording;
 *    a recording of another context; NULL out.
 *
 * Prints PASS and exits 0, or prints what failed and exits 1.
 */
#include <math.h>

#include "check.h"
#include "gemm_ref.h"

static float C1[N * N], C2[N * N], C3[N * N], C4[N * N];
static float OUT[16];

static SimplerArg host_out16(void) {
    const uint64_t shape[1] = {16};
    return simpler_arg_host(OUT, sizeof OUT, SIMPLER_DT_FLOAT32, 1, shape);
}

static SimplerContext *new_context(void) {
    SimplerContextConfig cfg = simpler_context_config_default();
    cfg.clusters = 2;
    SimplerContext *ctx = NULL;
    CHECK_OK(simpler_context_init(&cfg, &ctx));
    return ctx;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s <gemm.simpler> <sleepy.simpler> <readback.simpler>\n", argv[0]);
        return 2;
    }
    fill_inputs();
    SimplerContext *ctx = new_context();
    int32_t gemm = -1, sleepy = -1, readback = -1;
    CHECK_OK(simpler_register_callable_file(ctx, argv[1], &gemm));
    CHECK_OK(simpler_register_callable_file(ctx, argv[2], &sleepy));
    CHECK_OK(simpler_register_callable_file(ctx, argv[3], &readback));

    /* 1. Record gemm, replay it on other arguments. */
    SimplerArg first[3] = {host_matrix(A), host_matrix(B), host_matrix(C1)};
    SimplerRecording *rec = NULL;
    CHECK_OK(simpler_record_run(ctx, gemm, first, 3, NULL, &rec));
    EXPECT(rec != NULL, "a recording");
    EXPECT(matches(C1, 1.0f, "C of the recording run"), "the recording run's C is A·B");
    SimplerArg second[3] = {host_matrix(A2), host_matrix(B), host_matrix(C2)};
    SimplerRunConfig rc = simpler_run_config_default();
    rc.runtime = SIMPLER_RUNTIME_HOST_BUILD_GRAPH;
    CHECK_OK(simpler_replay_run(ctx, rec, second, 3, &rc));
    EXPECT(matches(C2, 2.0f, "C of the replay on 2A"), "the replay on 2A gives 2A·B");
    SimplerArg plain[3] = {host_matrix(A2), host_matrix(B), host_matrix(C4)};
    SimplerRun *run = NULL;
    CHECK_OK(simpler_prepare_run(ctx, gemm, plain, 3, NULL, &run));
    CHECK_OK(simpler_launch_run(ctx, run));
    CHECK_OK(simpler_finalize_run(ctx, run));
    EXPECT(matches(C4, 2.0f, "C of the ordinary run"), "an ordinary run between replays");
    SimplerArg third[3] = {host_matrix(A), host_matrix(B), host_matrix(C3)};
    CHECK_OK(simpler_replay_run(ctx, rec, third, 3, NULL));
    EXPECT(matches(C3, 1.0f, "C of the replay on A"), "the replay on A gives A·B again");
    printf("gemm: recorded once, replayed twice on new arguments\n");

    /* 2. Replays the recording cannot take: nothing runs. */
    SimplerRecording *srec = NULL;
    SimplerArg s0[2] = {host_out16(), simpler_arg_scalar(0)};
    CHECK_OK(simpler_record_run(ctx, sleepy, s0, 2, NULL, &srec));
    EXPECT(OUT[0] == 1.0f, "the recording run wrote out");
    OUT[0] = 0.0f;
    SimplerArg s5[2] = {host_out16(), simpler_arg_scalar(5)};
    REFUSED(simpler_replay_run(ctx, srec, s5, 2, NULL), SIMPLER_STATUS_INVALID_ARGUMENT, "`ms`");
    EXPECT(OUT[0] == 0.0f, "a refused replay runs nothing");
    REFUSED(simpler_replay_run(ctx, srec, s0, 1, NULL), SIMPLER_STATUS_INVALID_ARGUMENT, "sleepy");
    SimplerArg kinds[2] = {simpler_arg_scalar(0), simpler_arg_scalar(0)};
    REFUSED(simpler_replay_run(ctx, srec, kinds, 2, NULL), SIMPLER_STATUS_INVALID_ARGUMENT,
            "out");
    REFUSED(simpler_replay_run(ctx, rec, s0, 2, NULL), SIMPLER_STATUS_INVALID_ARGUMENT, "gemm");
    CHECK_OK(simpler_replay_run(ctx, srec, s0, 2, NULL));
    EXPECT(OUT[0] == 1.0f, "an accepted replay ran");

    /* Configs and callables that cannot record. */
    SimplerRunConfig tmr = simpler_run_config_default();
    tmr.runtime = SIMPLER_RUNTIME_TENSORMAP_AND_RINGBUFFER;
    SimplerRecording *none = NULL;
    REFUSED(simpler_record_run(ctx, sleepy, s0, 2, &tmr, &none), SIMPLER_STATUS_INVALID_CONFIG,
            "cfg->runtime");
    REFUSED(simpler_replay_run(ctx, srec, s0, 2, &tmr), SIMPLER_STATUS_INVALID_CONFIG,
            "cfg->runtime");
    /* Its get_tensor_data would wait for a task, which under host_build_graph has not run. */
    REFUSED(simpler_record_run(ctx, readback, s0, 2, NULL, &none), SIMPLER_STATUS_RUN_FAILED,
            "get_tensor_data");
    EXPECT(none == NULL, "no recording on a failed recording run");
    /* With ms = 1 it reads `out` before any task: a plain run may, a recording may not. */
    SimplerArg s1[2] = {host_out16(), simpler_arg_scalar(1)};
    REFUSED(simpler_record_run(ctx, readback, s1, 2, NULL, &none),
            SIMPLER_STATUS_INVALID_ARGUMENT, "record");
    EXPECT(none == NULL, "no recording on a refused recording run");
    CHECK_OK(simpler_prepare_run(ctx, readback, s1, 2, &rc, &run));
    CHECK_OK(simpler_launch_run(ctx, run));
    CHECK_OK(simpler_finalize_run(ctx, run));
    REFUSED(simpler_record_run(ctx, sleepy, s0, 2, NULL, NULL), SIMPLER_STATUS_NULL_POINTER,
            "out");
    REFUSED(simpler_record_run(ctx, 63, s0, 2, NULL, &none), SIMPLER_STATUS_UNKNOWN_CALLABLE,
            "63");

    /* Handles. */
    CHECK_OK(simpler_prepare_run(ctx, sleepy, s0, 2, NULL, &run));
    REFUSED(simpler_replay_run(ctx, (SimplerRecording *)run, s0, 2, NULL),
            SIMPLER_STATUS_INVALID_HANDLE, "run handle");
    CHECK_OK(simpler_finalize_run(ctx, run));
    SimplerContext *other = new_context();
    REFUSED(simpler_replay_run(other, srec, s0, 2, NULL), SIMPLER_STATUS_INVALID_ARGUMENT,
            "another context");
    CHECK_OK(simpler_context_finalize(other));
    CHECK_OK(simpler_context_destroy(other));
    CHECK_OK(simpler_unregister_callable(ctx, (uint32_t)sleepy));
    REFUSED(simpler_replay_run(ctx, srec, s0, 2, NULL), SIMPLER_STATUS_INVALID_STATE, "sleepy");
    CHECK_OK(simpler_recording_destroy(ctx, srec));
    REFUSED(simpler_replay_run(ctx, srec, s0, 2, NULL), SIMPLER_STATUS_INVALID_HANDLE,
            "recording");
    REFUSED(simpler_recording_destroy(ctx, srec), SIMPLER_STATUS_INVALID_HANDLE, "recording");

    /* `rec` is left to simpler_context_destroy. */
    CHECK_OK(simpler_context_finalize(ctx));
    CHECK_OK(simpler_context_destroy(ctx));
    return finish();
}
