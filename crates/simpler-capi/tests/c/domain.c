/*
 * domain.c — collectives from a C host (simpler/domain.h).
 *
 * Usage: domain <kernel-cache-dir>
 *
 * 1. A domain of 3 sim chips runs an f32 allreduce (exact sums), the same allreduce in place
 *    (inputs == outputs), an f32 allgather and an i32 reduce-scatter (wrapping sums), and
 *    says it has 3 ranks.
 * 2. Refusals name the argument and change nothing: an unsupported dtype, count 0, a
 *    timeout past the limit, NULL arrays and a NULL rank pointer, a misaligned output; the
 *    outputs keep their sentinel.
 * 3. Bad configs: ranks past the limit, reserved set, a compiler that does not exist
 *    (INVALID_CALLABLE, from a fresh cache so nothing is cached).
 * 4. Handles: a destroyed domain and a context passed as a domain are INVALID_HANDLE.
 *
 * Prints PASS and exits 0, or prints what failed and exits 1.
 */
#include "check.h"
#include "simpler/domain.h"
#include "simpler/types.h"

#define RANKS 3
#define COUNT 5

static float X[RANKS][COUNT], AR[RANKS][COUNT], AG[RANKS][RANKS * COUNT];
static int32_t RS_IN[RANKS][RANKS * COUNT], RS[RANKS][COUNT];

static void sentinel(void) {
    for (int r = 0; r < RANKS; ++r)
        for (int i = 0; i < COUNT; ++i) AR[r][i] = -1.0f;
}

static int untouched(void) {
    for (int r = 0; r < RANKS; ++r)
        for (int i = 0; i < COUNT; ++i)
            if (AR[r][i] != -1.0f) return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <kernel-cache-dir>\n", argv[0]);
        return 2;
    }
    SimplerContextConfig chip = simpler_context_config_default();
    chip.clusters = 1;
    chip.aicpu_threads = 3;
    chip.heap_size = 1u << 20;
    SimplerDomainConfig cfg = simpler_domain_config_default();
    cfg.ranks = RANKS;
    cfg.chip = &chip;
    cfg.cache_dir = argv[1];

    SimplerDomain *dom = NULL;
    CHECK_OK(simpler_domain_init(&cfg, &dom));
    uint32_t ranks = 0;
    CHECK_OK(simpler_domain_ranks(dom, &ranks));
    EXPECT(ranks == RANKS, "ranks %u", ranks);

    /* 1. Rank r's input: r + i/4 (exact in f32). */
    const void *xin[RANKS];
    void *arout[RANKS], *agout[RANKS], *xinout[RANKS];
    for (int r = 0; r < RANKS; ++r) {
        for (int i = 0; i < COUNT; ++i) X[r][i] = (float)r + (float)i / 4.0f;
        xin[r] = X[r];
        arout[r] = AR[r];
        agout[r] = AG[r];
    }
    sentinel();
    CHECK_OK(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, xin, arout, COUNT, 0));
    for (int r = 0; r < RANKS; ++r)
        for (int i = 0; i < COUNT; ++i) {
            float want = 0.0f;
            for (int p = 0; p < RANKS; ++p) want += X[p][i];
            EXPECT(AR[r][i] == want, "allreduce rank %d [%d] = %g, want %g", r, i, AR[r][i], want);
        }
    CHECK_OK(simpler_domain_allgather(dom, SIMPLER_DT_FLOAT32, xin, agout, COUNT, 5000));
    for (int r = 0; r < RANKS; ++r)
        for (int p = 0; p < RANKS; ++p)
            for (int i = 0; i < COUNT; ++i)
                EXPECT(AG[r][p * COUNT + i] == X[p][i], "allgather rank %d block %d [%d]", r, p, i);
    /* In place: each rank's buffer is both its input and its output. */
    for (int r = 0; r < RANKS; ++r) {
        for (int i = 0; i < COUNT; ++i) AR[r][i] = (float)(r + 1);
        xinout[r] = AR[r];
    }
    CHECK_OK(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, (const void *const *)xinout,
                                      xinout, COUNT, 0));
    for (int r = 0; r < RANKS; ++r)
        for (int i = 0; i < COUNT; ++i)
            EXPECT(AR[r][i] == 6.0f, "in-place allreduce rank %d [%d] = %g", r, i, AR[r][i]);
    /* i32 reduce-scatter: rank p's element j is 1000 p + j; one rank is near INT32_MAX so
     * the sum wraps. */
    const void *rsin[RANKS];
    void *rsout[RANKS];
    for (int p = 0; p < RANKS; ++p) {
        for (int j = 0; j < RANKS * COUNT; ++j)
            RS_IN[p][j] = p == 2 ? INT32_MAX - j : 1000 * p + j;
        rsin[p] = RS_IN[p];
        rsout[p] = RS[p];
    }
    CHECK_OK(simpler_domain_reduce_scatter(dom, SIMPLER_DT_INT32, rsin, rsout, COUNT, 0));
    for (int r = 0; r < RANKS; ++r)
        for (int j = 0; j < COUNT; ++j) {
            uint32_t want = 0;
            for (int p = 0; p < RANKS; ++p) want += (uint32_t)RS_IN[p][r * COUNT + j];
            EXPECT((uint32_t)RS[r][j] == want, "reduce_scatter rank %d [%d] = %d, want %d", r, j,
                   RS[r][j], (int32_t)want);
        }

    /* 2. Refusals, the outputs untouched. */
    sentinel();
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT16, xin, arout, COUNT, 0),
            SIMPLER_STATUS_INVALID_ARGUMENT, "dtype");
    REFUSED(simpler_domain_allreduce(dom, 99, xin, arout, COUNT, 0),
            SIMPLER_STATUS_INVALID_ARGUMENT, "dtype");
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, xin, arout, 0, 0),
            SIMPLER_STATUS_INVALID_ARGUMENT, "count");
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, xin, arout, COUNT,
                                     SIMPLER_DOMAIN_MAX_TIMEOUT_MS + 1),
            SIMPLER_STATUS_INVALID_ARGUMENT, "timeout_ms");
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, NULL, arout, COUNT, 0),
            SIMPLER_STATUS_NULL_POINTER, "inputs");
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, xin, NULL, COUNT, 0),
            SIMPLER_STATUS_NULL_POINTER, "outputs");
    const void *holed[RANKS] = {X[0], NULL, X[2]};
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, holed, arout, COUNT, 0),
            SIMPLER_STATUS_NULL_POINTER, "inputs[1]");
    void *crooked[RANKS] = {(char *)AR[0] + 1, AR[1], AR[2]};
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, xin, crooked, COUNT, 0),
            SIMPLER_STATUS_INVALID_ARGUMENT, "outputs[0]");
    REFUSED(simpler_domain_allreduce(dom, SIMPLER_DT_FLOAT32, xin, arout, UINT64_MAX / 2, 0),
            SIMPLER_STATUS_INVALID_ARGUMENT, "count");
    REFUSED(simpler_domain_ranks(dom, NULL), SIMPLER_STATUS_NULL_POINTER, "out");
    EXPECT(untouched(), "a refused collective wrote an output");

    /* 3. Bad configs. */
    SimplerDomain *none = (SimplerDomain *)1;
    SimplerDomainConfig bad = cfg;
    bad.ranks = SIMPLER_DOMAIN_MAX_RANKS + 1;
    REFUSED(simpler_domain_init(&bad, &none), SIMPLER_STATUS_INVALID_CONFIG, "config->ranks");
    EXPECT(none == NULL, "a failed init left *out set");
    bad = cfg;
    bad.reserved = 1;
    REFUSED(simpler_domain_init(&bad, &none), SIMPLER_STATUS_INVALID_CONFIG, "config->reserved");
    bad = cfg;
    bad.version = 7;
    REFUSED(simpler_domain_init(&bad, &none), SIMPLER_STATUS_INVALID_ARGUMENT, "config->version");
    char fresh[4096];
    snprintf(fresh, sizeof fresh, "%s/fresh-for-missing-cc", argv[1]);
    bad = cfg;
    bad.ranks = 1;
    bad.cc = "/nonexistent/simpler-test-cc";
    bad.cache_dir = fresh;
    REFUSED(simpler_domain_init(&bad, &none), SIMPLER_STATUS_INVALID_CALLABLE, "collective");

    /* 4. Handles. */
    CHECK_OK(simpler_domain_destroy(dom));
    REFUSED(simpler_domain_ranks(dom, &ranks), SIMPLER_STATUS_INVALID_HANDLE,
            "finalized or destroyed");
    REFUSED(simpler_domain_destroy(dom), SIMPLER_STATUS_INVALID_HANDLE, "domain");
    SimplerContext *ctx = NULL;
    SimplerContextConfig small = chip;
    CHECK_OK(simpler_context_init(&small, &ctx));
    REFUSED(simpler_domain_ranks((SimplerDomain *)ctx, &ranks), SIMPLER_STATUS_INVALID_HANDLE,
            "is a context handle, not a domain handle");
    close_context(ctx);
    return finish();
}
