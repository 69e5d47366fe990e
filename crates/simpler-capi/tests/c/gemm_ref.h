/*
 * gemm_ref.h — the gemm example's inputs and reference the C test programs share: N x N
 * f32 matrices A, 2A and B, REF = A·B computed in double, a tolerance check against
 * scale·REF, and the SimplerArg of a host matrix.
 */
#ifndef SIMPLER_TEST_GEMM_REF_H
#define SIMPLER_TEST_GEMM_REF_H

#include <math.h>
#include <stdio.h>

#include "simpler/host.h"
#include "simpler/types.h"

#define N 512

static float A[N * N], A2[N * N], B[N * N], REF[N * N];

/* Fills A, A2 = 2A and B, and REF = A·B in double, i-k-j order. */
static inline void fill_inputs(void) {
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j) {
            A[i * N + j] = (float)((i * 7 + j * 3) % 17) / 17.0f - 0.5f;
            A2[i * N + j] = 2.0f * A[i * N + j];
            B[i * N + j] = (float)((i * 5 + j * 11) % 13) / 13.0f - 0.5f;
        }
    static double acc[N];
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) acc[j] = 0.0;
        for (int k = 0; k < N; ++k) {
            const double a = A[i * N + k];
            for (int j = 0; j < N; ++j) acc[j] += a * (double)B[k * N + j];
        }
        for (int j = 0; j < N; ++j) REF[i * N + j] = (float)acc[j];
    }
}

/* |got - scale·REF| <= 1e-4 + 1e-4·|scale·REF| everywhere; the first element that is not
 * is printed, named by `what`. */
static inline int matches(const float *got, float scale, const char *what) {
    for (int i = 0; i < N * N; ++i) {
        const double want = (double)scale * REF[i];
        if (fabs((double)got[i] - want) > 1e-4 + 1e-4 * fabs(want)) {
            fprintf(stderr, "%s: element %d is %g, expected %g\n", what, i, got[i], want);
            return 0;
        }
    }
    return 1;
}

/* A host N x N f32 matrix argument over `m`. */
static inline SimplerArg host_matrix(float *m) {
    const uint64_t shape[2] = {N, N};
    return simpler_arg_host(m, sizeof(float) * N * N, SIMPLER_DT_FLOAT32, 2, shape);
}

#endif /* SIMPLER_TEST_GEMM_REF_H */
