/*
 * row_stats.c — AIV kernel, softmax phase 1: per-row statistics of a block of rows.
 *
 * Arguments: tensor 0 = x block [R, C] (input, f32, a strided view of the full matrix),
 * tensor 1 = stats [R, 2] (written, f32): stats[r][0] = max_c x[r][c] and
 * stats[r][1] = sum_c exp(x[r][c] - stats[r][0]) (summed in double).
 * Element (r, c) of a 2-D view is at data[r*strides[0] + c*strides[1]].
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or not 2-D */
#define KERNEL_BAD_SHAPE 2  /* stats is not [R, 2], or C == 0 */

/*
 * exp(x) in double without libm: the kernel library is dlopen'ed into a host process
 * that need not have libm loaded, so an undefined `expf` could fail to bind.
 * x = k*ln2 + r with |r| <= ln2/2; exp(r) by its Taylor series to degree 13
 * (truncation error < 1e-16 relative); then scaled by 2^k in two steps so that each
 * factor is a normal double.
 */
static double pow2i(int64_t e) { /* 2^e for -1022 <= e <= 1023 */
    const uint64_t bits = (uint64_t)(e + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static double exp_d(double x) {
    if (x != x) return x;              /* NaN */
    if (x > 709.78) return __builtin_inf();
    if (x < -745.2) return 0.0;
    const double log2e = 1.4426950408889634;
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double t = x * log2e;
    const int64_t k = (int64_t)(t < 0.0 ? t - 0.5 : t + 0.5);
    const double r = (x - (double)k * ln2_hi) - (double)k * ln2_lo;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    static const double inv_fact[13] = {
        1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
        1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 1.0 / 2.0, 1.0, 1.0,
    };
    for (int i = 0; i < 13; ++i) p = p * r + inv_fact[i];
    const int64_t k1 = k / 2, k2 = k - k1;
    return p * pow2i(k1) * pow2i(k2);
}

static int is_f32_matrix(const SimplerChipTensor *t) {
    return t != NULL && t->dtype == SIMPLER_DT_FLOAT32 && t->ndims == 2;
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    const SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    const SimplerChipTensor *stats = simpler_arg_tensor(args, 1);
    if (!is_f32_matrix(x) || !is_f32_matrix(stats)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    const uint64_t rows = x->shapes[0], cols = x->shapes[1];
    if (cols == 0 || stats->shapes[0] != rows || stats->shapes[1] != 2) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const float *xd = SIMPLER_TENSOR_DATA(float, x);
    float *sd = SIMPLER_TENSOR_DATA(float, stats);
    const uint64_t xs0 = x->strides[0], xs1 = x->strides[1];
    const uint64_t ss0 = stats->strides[0], ss1 = stats->strides[1];

    for (uint64_t r = 0; r < rows; ++r) {
        const float *xr = xd + r * xs0;
        float mx = xr[0];
        for (uint64_t c = 1; c < cols; ++c) {
            const float v = xr[c * xs1];
            if (v > mx || v != v) mx = v; /* NaN wins, as in numpy */
            if (mx != mx) break;
        }
        double sum = 0.0;
        for (uint64_t c = 0; c < cols; ++c) sum += exp_d((double)xr[c * xs1] - (double)mx);
        sd[r * ss0] = mx;
        sd[r * ss0 + ss1] = (float)sum;
    }
}
