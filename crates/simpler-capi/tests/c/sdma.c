/*
 * sdma.c — SimplerContextConfig.enable_sdma: the sim chip's SDMA engine.
 *
 * Usage: sdma <sdma_copy.simpler>
 *   sdma_copy: `src` f32 [1024] (in), `dst` f32 [1024] (out); its one kernel copies src
 *   into dst with one SDMA copy.
 *
 * 1. enable_sdma = 1: the run copies src into dst.
 * 2. enable_sdma = 0 (the default): the run fails, naming the missing SDMA engine; the
 *    context goes on (a second run fails the same way).
 * 3. A caller compiled before the field (size 72): enable_sdma past `size` reads as 0.
 * 4. enable_sdma = 2: INVALID_CONFIG naming config->enable_sdma, no context made.
 *
 * Prints PASS and exits 0, or prints what failed and exits 1.
 */
#include "check.h"
#include "simpler/types.h"

#define N 1024

static float SRC[N], DST[N];

static int32_t copy_once(SimplerContext *ctx, int32_t id) {
    const uint64_t shape[1] = {N};
    for (int i = 0; i < N; ++i) DST[i] = -1.0f;
    SimplerArg args[2] = {
        simpler_arg_host(SRC, sizeof SRC, SIMPLER_DT_FLOAT32, 1, shape),
        simpler_arg_host(DST, sizeof DST, SIMPLER_DT_FLOAT32, 1, shape),
    };
    SimplerRun *run = NULL;
    CHECK_OK(simpler_prepare_run(ctx, id, args, 2, NULL, &run));
    CHECK_OK(simpler_launch_run(ctx, run));
    return simpler_finalize_run(ctx, run);
}

static int copied(void) {
    for (int i = 0; i < N; ++i)
        if (DST[i] != SRC[i]) return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <sdma_copy.simpler>\n", argv[0]);
        return 2;
    }
    for (int i = 0; i < N; ++i) SRC[i] = (float)i * 0.5f - 7.0f;
    int32_t id = -1;

    SimplerContextConfig on = simpler_context_config_default();
    on.clusters = 2;
    on.enable_sdma = 1;
    SimplerContext *ctx = open_context(&on, argv[1], &id);
    CHECK_OK(copy_once(ctx, id));
    EXPECT(copied(), "dst is src after an SDMA copy");
    close_context(ctx);
    printf("enable_sdma = 1: the SDMA copy landed\n");

    SimplerContextConfig off = simpler_context_config_default();
    off.clusters = 2;
    ctx = open_context(&off, argv[1], &id);
    REFUSED(copy_once(ctx, id), SIMPLER_STATUS_RUN_FAILED, "SDMA");
    EXPECT(!copied(), "dst untouched without an SDMA engine");
    REFUSED(copy_once(ctx, id), SIMPLER_STATUS_RUN_FAILED, "SDMA");
    close_context(ctx);

    /* A caller compiled before enable_sdma and runtime existed passes size 72. */
    SimplerContextConfig old = simpler_context_config_default();
    old.clusters = 2;
    old.size = (uint32_t)offsetof(SimplerContextConfig, enable_sdma);
    old.enable_sdma = 1; /* past `size`: not read */
    ctx = open_context(&old, argv[1], &id);
    REFUSED(copy_once(ctx, id), SIMPLER_STATUS_RUN_FAILED, "SDMA");
    close_context(ctx);

    SimplerContextConfig bad = simpler_context_config_default();
    bad.enable_sdma = 2;
    SimplerContext *none = (SimplerContext *)&bad;
    REFUSED(simpler_context_init(&bad, &none), SIMPLER_STATUS_INVALID_CONFIG,
            "config->enable_sdma");
    EXPECT(none == NULL, "no context on a refused config");
    return finish();
}
