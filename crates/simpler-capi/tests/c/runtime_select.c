/*
 * runtime_select.c — choosing the runtime variant: SimplerContextConfig.runtime (the
 * context's) and SimplerRunConfig.runtime (one run's, over the callable's and the
 * context's).
 *
 * Usage: runtime_select <readback.simpler>
 *   readback: `out` f32 [16] (out), `ms` u64 (scalar); its task writes 1.0 to `out`, then
 *   the orchestration reads `out` back with get_tensor_data. That waits for the task under
 *   tensormap_and_ringbuffer and is refused under host_build_graph (the orchestration runs
 *   on the host before any task), so the run's verdict tells the variant that ran it.
 *
 * Prints PASS and exits 0, or prints what failed and exits 1.
 */
#include "check.h"
#include "simpler/types.h"

static float OUT[16];

static int32_t run_with(SimplerContext *ctx, int32_t id, const SimplerRunConfig *rc) {
    const uint64_t shape[1] = {16};
    SimplerArg args[2] = {simpler_arg_host(OUT, sizeof OUT, SIMPLER_DT_FLOAT32, 1, shape),
                          simpler_arg_scalar(0)};
    SimplerRun *run = NULL;
    int32_t s = simpler_prepare_run(ctx, id, args, 2, rc, &run);
    if (s != SIMPLER_STATUS_OK) return s;
    CHECK_OK(simpler_launch_run(ctx, run));
    return simpler_finalize_run(ctx, run);
}

/* A two-cluster context of `runtime` with the bundle `bundle` registered as `*id`. */
static SimplerContext *context(uint32_t runtime, const char *bundle, int32_t *id) {
    SimplerContextConfig cfg = simpler_context_config_default();
    cfg.clusters = 2;
    cfg.runtime = runtime;
    return open_context(&cfg, bundle, id);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <readback.simpler>\n", argv[0]);
        return 2;
    }
    int32_t id = -1;
    SimplerRunConfig tmr = simpler_run_config_default();
    tmr.runtime = SIMPLER_RUNTIME_TENSORMAP_AND_RINGBUFFER;
    SimplerRunConfig hbg = simpler_run_config_default();
    hbg.runtime = SIMPLER_RUNTIME_HOST_BUILD_GRAPH;

    /* The default context: tensormap_and_ringbuffer, unless the run names host_build_graph. */
    SimplerContext *ctx = context(SIMPLER_RUNTIME_DEFAULT, argv[1], &id);
    CHECK_OK(run_with(ctx, id, NULL));
    EXPECT(OUT[0] == 1.0f && OUT[15] == 1.0f, "the task wrote out");
    REFUSED(run_with(ctx, id, &hbg), SIMPLER_STATUS_RUN_FAILED, "has not run");
    /* A caller compiled before SimplerRunConfig.runtime passes size 40: not read. */
    SimplerRunConfig old = hbg;
    old.size = (uint32_t)offsetof(SimplerRunConfig, runtime);
    CHECK_OK(run_with(ctx, id, &old));
    close_context(ctx);
    printf("default context: tensormap_and_ringbuffer; a run config picks host_build_graph\n");

    /* A host_build_graph context: its runs build on the host, unless the run says otherwise. */
    ctx = context(SIMPLER_RUNTIME_HOST_BUILD_GRAPH, argv[1], &id);
    REFUSED(run_with(ctx, id, NULL), SIMPLER_STATUS_RUN_FAILED, "has not run");
    CHECK_OK(run_with(ctx, id, &tmr));
    close_context(ctx);
    printf("host_build_graph context: its runs build on the host; a run config overrides\n");

    /* Unknown runtimes and a nonzero reserved field, each named. */
    SimplerContextConfig bad = simpler_context_config_default();
    bad.runtime = 7;
    SimplerContext *none = NULL;
    REFUSED(simpler_context_init(&bad, &none), SIMPLER_STATUS_INVALID_CONFIG, "config->runtime");
    EXPECT(none == NULL, "no context on a refused config");
    ctx = context(SIMPLER_RUNTIME_DEFAULT, argv[1], &id);
    SimplerRunConfig bad_run = simpler_run_config_default();
    bad_run.runtime = 3;
    REFUSED(run_with(ctx, id, &bad_run), SIMPLER_STATUS_INVALID_CONFIG, "cfg->runtime");
    bad_run = simpler_run_config_default();
    bad_run.reserved2 = 1;
    REFUSED(run_with(ctx, id, &bad_run), SIMPLER_STATUS_INVALID_ARGUMENT, "cfg->reserved2");
    close_context(ctx);
    return finish();
}
