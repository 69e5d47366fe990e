/*
 * gemm_pipeline.c — a C framework embedding simpler through include/simpler/host.h.
 *
 * Usage: gemm_pipeline <gemm.simpler>   (the bundle `simpler build examples/gemm` writes)
 *
 * 1. An owned context: registers gemm with an automatic id, runs it twice pipelined (the
 *    second launch joined behind the first, both in flight at once), checks both results
 *    against a reference computed here, finalizes.
 * 2. A borrowed context on a sim caller context made current on this thread: a caller
 *    stream, a host function queued before the launch (Start: it writes the inputs to the
 *    device), the launch on the stream, a host function queued after it (Tail: it reads the
 *    output back), a stream synchronize; checks that Start ran before the run, Tail after it,
 *    and the result. Then everything is shut down.
 *
 * Prints PASS and exits 0, or prints what failed and exits 1.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gemm_ref.h"

static float C1[N * N], C2[N * N], C3[N * N];

static void owned_pipeline(const char *bundle) {
    SimplerContextConfig cfg = simpler_context_config_default();
    SimplerContext *ctx = NULL;
    CHECK_OK(simpler_context_init(&cfg, &ctx));
    int32_t gemm = -7;
    CHECK_OK(simpler_register_callable_file(ctx, bundle, &gemm));
    EXPECT(gemm == 0, "the first automatic id is 0, got %d", gemm);

    SimplerArg first[3] = {host_matrix(A), host_matrix(B), host_matrix(C1)};
    SimplerArg second[3] = {host_matrix(A2), host_matrix(B), host_matrix(C2)};
    SimplerRunConfig rc = simpler_run_config_default();
    SimplerRun *r1 = NULL, *r2 = NULL;
    CHECK_OK(simpler_prepare_run(ctx, gemm, first, 3, &rc, &r1));
    CHECK_OK(simpler_prepare_run(ctx, gemm, second, 3, NULL, &r2));
    CHECK_OK(simpler_launch_run(ctx, r1));
    CHECK_OK(simpler_launch_run_joined(ctx, r2, r1));
    int done = -1;
    CHECK_OK(simpler_poll_run(ctx, r2, &done));
    EXPECT(done == 0 || done == 1, "poll answers 0 or 1, got %d", done);
    CHECK_OK(simpler_wait_run(ctx, r1, SIMPLER_WAIT_FOREVER));
    CHECK_OK(simpler_finalize_run(ctx, r1));
    CHECK_OK(simpler_finalize_run(ctx, r2));
    EXPECT(matches(C1, 1.0f, "C of the first run"), "the first run's C is A·B");
    EXPECT(matches(C2, 2.0f, "C of the joined run"), "the joined run's C is 2A·B");

    CHECK_OK(simpler_context_finalize(ctx));
    CHECK_OK(simpler_context_destroy(ctx));
    printf("owned context: two pipelined gemm runs match the reference\n");
}

/* What the caller's host functions share with it. */
struct Caller {
    uint64_t generation;
    SimplerContext *ctx;
    uint64_t da, db, dc;
    atomic_int order;       /* bumped by each host function */
    int start_seen;         /* Start's place in `order` */
    int tail_seen;          /* Tail's place in `order` */
    int32_t start_status, tail_status;
};

/* Start: queued before the launch; writes the inputs the run reads. A host function runs on
 * the stream's thread, so it makes the caller context current there first. */
static void start_fn(void *user) {
    struct Caller *c = (struct Caller *)user;
    int32_t s = simpler_sim_context_make_current(c->generation);
    if (s == SIMPLER_STATUS_OK) s = simpler_copy_to_device(c->ctx, c->da, A, sizeof A);
    if (s == SIMPLER_STATUS_OK) s = simpler_copy_to_device(c->ctx, c->db, B, sizeof B);
    if (s == SIMPLER_STATUS_OK) s = simpler_sim_context_make_current(0); /* the thread is the stream's */
    c->start_status = s;
    c->start_seen = atomic_fetch_add(&c->order, 1) + 1;
}

/* Tail: queued after the launch; reads the output the run wrote. */
static void tail_fn(void *user) {
    struct Caller *c = (struct Caller *)user;
    int32_t s = simpler_sim_context_make_current(c->generation);
    if (s == SIMPLER_STATUS_OK) s = simpler_copy_from_device(c->ctx, C3, c->dc, sizeof C3);
    if (s == SIMPLER_STATUS_OK) s = simpler_sim_context_make_current(0);
    c->tail_status = s;
    c->tail_seen = atomic_fetch_add(&c->order, 1) + 1;
}

static void borrowed_on_stream(const char *bundle) {
    static struct Caller c;
    CHECK_OK(simpler_sim_context_create(2, 3, &c.generation));
    CHECK_OK(simpler_sim_context_make_current(c.generation));
    CHECK_OK(simpler_context_init_borrowed(NULL, c.generation, &c.ctx));
    int32_t gemm = -1;
    CHECK_OK(simpler_register_callable_file(c.ctx, bundle, &gemm));
    CHECK_OK(simpler_malloc(c.ctx, sizeof A, &c.da));
    CHECK_OK(simpler_malloc(c.ctx, sizeof B, &c.db));
    CHECK_OK(simpler_malloc(c.ctx, sizeof C3, &c.dc));
    SimplerStream stream = 0;
    CHECK_OK(simpler_sim_stream_create(c.generation, &stream));

    const uint64_t shape[2] = {N, N};
    SimplerArg args[3] = {
        simpler_arg_device(c.da, SIMPLER_DT_FLOAT32, 2, shape),
        simpler_arg_device(c.db, SIMPLER_DT_FLOAT32, 2, shape),
        simpler_arg_device(c.dc, SIMPLER_DT_FLOAT32, 2, shape),
    };
    SimplerRun *run = NULL;
    CHECK_OK(simpler_prepare_run(c.ctx, gemm, args, 3, NULL, &run));
    atomic_init(&c.order, 0);
    CHECK_OK(simpler_sim_stream_launch_host_fn(c.generation, stream, start_fn, &c));
    CHECK_OK(simpler_launch_run_on_stream(c.ctx, run, stream, NULL));
    CHECK_OK(simpler_sim_stream_launch_host_fn(c.generation, stream, tail_fn, &c));
    CHECK_OK(simpler_sim_stream_synchronize(c.generation, stream, 120000));
    CHECK_OK(simpler_finalize_run(c.ctx, run));

    EXPECT(c.start_status == SIMPLER_STATUS_OK, "Start's copies succeed: %s",
           simpler_status_name(c.start_status));
    EXPECT(c.tail_status == SIMPLER_STATUS_OK, "Tail's copy succeeds: %s",
           simpler_status_name(c.tail_status));
    EXPECT(c.start_seen == 1 && c.tail_seen == 2, "Start ran first (%d), Tail second (%d)",
           c.start_seen, c.tail_seen);
    /* The device memory was zero before Start: a run ahead of Start would give C = 0, and a
     * Tail ahead of the run would read zeros. */
    EXPECT(matches(C3, 1.0f, "C read by Tail"), "Tail read the run's A·B");

    CHECK_OK(simpler_sim_stream_destroy(c.generation, stream));
    CHECK_OK(simpler_free(c.ctx, c.da));
    CHECK_OK(simpler_free(c.ctx, c.db));
    CHECK_OK(simpler_free(c.ctx, c.dc));
    CHECK_OK(simpler_context_finalize(c.ctx));
    CHECK_OK(simpler_context_destroy(c.ctx));
    CHECK_OK(simpler_sim_context_make_current(0));
    CHECK_OK(simpler_sim_context_destroy(c.generation));
    printf("borrowed context: Start -> run -> Tail on the caller's stream, result matches\n");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <gemm.simpler>\n", argv[0]);
        return 2;
    }
    fill_inputs();
    owned_pipeline(argv[1]);
    borrowed_on_stream(argv[1]);
    return finish();
}
