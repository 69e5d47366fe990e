/*
 * row_stats.c — AIV kernel, softmax phase 1: per-row statistics of a block of rows.
 *
 * Arguments: tensor 0 = x block [R, C] (input, f32, a strided view of the full matrix),
 * tensor 1 = stats [R, 2] (written, f32): stats[r][0] = max_c x[r][c] and
 * stats[r][1] = sum_c exp(x[r][c] - stats[r][0]) (summed in double).
 * Element (r, c) of a 2-D view is at data[r*strides[0] + c*strides[1]] (simpler_view2d).
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail; a task
 * submitted with other argument counts fails with code 1000 + its tensor count).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 (1-D is one row) */
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

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 2, 0)) return;
    SimplerView2D x, stats;
    if (!simpler_view2d(simpler_arg_tensor(args, 0), SIMPLER_DT_FLOAT32, &x) ||
        !simpler_view2d(simpler_arg_tensor(args, 1), SIMPLER_DT_FLOAT32, &stats)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (x.cols == 0 || stats.rows != x.rows || stats.cols != 2) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t r = 0; r < x.rows; ++r) {
        const float *xr = SIMPLER_VIEW2D_ROW(float, &x, r);
        float mx = xr[0];
        for (uint64_t c = 1; c < x.cols; ++c) {
            const float v = xr[c * x.col_stride];
            if (v > mx || v != v) mx = v; /* NaN wins, as in numpy */
            if (mx != mx) break;
        }
        double sum = 0.0;
        for (uint64_t c = 0; c < x.cols; ++c) sum += exp_d((double)xr[c * x.col_stride] - (double)mx);
        SIMPLER_VIEW2D_AT(float, &stats, r, 0) = mx;
        SIMPLER_VIEW2D_AT(float, &stats, r, 1) = (float)sum;
    }
}
