/*
 * check.h — the checks the C test programs share: CHECK_OK (exit on failure), REFUSED (a
 * status and a simpler_last_error() text that names the thing) and EXPECT. A program counts
 * failures in `failures` and prints PASS when there are none (finish). Also the context a
 * program opens with one bundle registered, and its close.
 */
#ifndef SIMPLER_TEST_CHECK_H
#define SIMPLER_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simpler/host.h"

static int failures = 0;

#define CHECK_OK(call)                                                                       \
    do {                                                                                     \
        int32_t s_ = (call);                                                                 \
        if (s_ != SIMPLER_STATUS_OK) {                                                       \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,              \
                    simpler_status_name(s_), simpler_last_error());                          \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* `call` returns `status` and the last error contains `needle`. */
#define REFUSED(call, status, needle)                                                        \
    refused_at(__FILE__, __LINE__, #call, (call), (status), (needle))

static inline void refused_at(const char *file, int line, const char *what, int32_t got,
                              int32_t want, const char *needle) {
    const char *text = simpler_last_error();
    if (got != want) {
        fprintf(stderr, "%s:%d: %s -> %s, expected %s (%s)\n", file, line, what,
                simpler_status_name(got), simpler_status_name(want), text);
        failures++;
    } else if (text == NULL || text[0] == '\0' || strstr(text, needle) == NULL) {
        fprintf(stderr, "%s:%d: %s: last error `%s` does not name `%s`\n", file, line, what,
                text ? text : "(null)", needle);
        failures++;
    } else {
        printf("refused as expected: %s -> %s: %s\n", what, simpler_status_name(got), text);
    }
}

#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

/* Prints PASS and returns 0, or the failure count and returns 1. */
static inline int finish(void) {
    if (failures != 0) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}

/* A context of `cfg` with the bundle file `bundle` registered as `*id`; exits on failure. */
static inline SimplerContext *open_context(const SimplerContextConfig *cfg,
                                           const char *bundle, int32_t *id) {
    SimplerContext *ctx = NULL;
    CHECK_OK(simpler_context_init(cfg, &ctx));
    CHECK_OK(simpler_register_callable_file(ctx, bundle, id));
    return ctx;
}

/* Finalizes and destroys `ctx`; exits on failure. */
static inline void close_context(SimplerContext *ctx) {
    CHECK_OK(simpler_context_finalize(ctx));
    CHECK_OK(simpler_context_destroy(ctx));
}

#endif /* SIMPLER_TEST_CHECK_H */
