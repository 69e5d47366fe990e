/*
 * simpler/kernel_math.h — scalar math and element conversions for kernels and orchestrations.
 *
 * Kernel and orchestration libraries are dlopen'ed into a host process; these routines need
 * no libm, so a library that uses only them binds no math symbol (docs/toolchain.md). All
 * are static inline and pure:
 *
 *   simpler_exp_d(x)        exp(x) in double, relative error < 4e-16 where the result is a
 *                           normal double (fewer bits for subnormal results below exp(-708))
 *   simpler_sqrt_d(x)       sqrt(x) in double, within 1 ulp; NaN for x < 0 and NaN
 *   simpler_f16_to_f32(h)   IEEE binary16 bits -> float (exact; subnormals, inf and NaN kept)
 *   simpler_bf16_to_f32(b)  bfloat16 bits -> float (exact)
 *   simpler_load_f32(p, dt, i)  element i of an f32, f16 or bf16 array at p, as float
 *
 * simpler_load_f32 is how a kernel reads "f32, f16 or bf16 inputs with f32 accumulation":
 * widening is exact, so the only rounding is the kernel's own arithmetic.
 */
#ifndef SIMPLER_KERNEL_MATH_H
#define SIMPLER_KERNEL_MATH_H

#include <string.h>
#include "simpler/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2^e as a double, for -1022 <= e <= 1023. */
static inline double simpler_pow2i_d(int64_t e) {
    const uint64_t bits = (uint64_t)(e + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/*
 * exp(x): x = k*ln2 + r with |r| <= ln2/2; exp(r) by its Taylor series to degree 13
 * (truncation error < 1e-16 relative); then scaled by 2^k in two steps so that each factor
 * is a normal double. NaN stays NaN, overflow gives +inf, underflow 0.
 */
static inline double simpler_exp_d(double x) {
    if (x != x) return x;
    if (x > 709.78) return __builtin_inf();
    if (x < -745.2) return 0.0;
    const double log2e = 1.4426950408889634;
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double t = x * log2e;
    const int64_t k = (int64_t)(t < 0.0 ? t - 0.5 : t + 0.5);
    const double r = (x - (double)k * ln2_hi) - (double)k * ln2_lo;
    static const double inv_fact[13] = {
        1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
        1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 1.0 / 2.0, 1.0, 1.0,
    };
    double p = 1.0 / 6227020800.0; /* 1/13! */
    for (int i = 0; i < 13; ++i) p = p * r + inv_fact[i];
    const int64_t k1 = k / 2, k2 = k - k1;
    return p * simpler_pow2i_d(k1) * simpler_pow2i_d(k2);
}

/* sqrt(x) by Newton's iteration from a power-of-two start; 0 and +inf are returned as they
 * are, NaN and negative x give NaN. */
static inline double simpler_sqrt_d(double x) {
    if (x != x || x < 0.0) return __builtin_nan("");
    if (x == 0.0 || x == __builtin_inf()) return x;
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int64_t e = (int64_t)((bits >> 52) & 0x7ff) - 1023; /* subnormals start low: fine */
    double y = simpler_pow2i_d(e / 2 < -1022 ? -1022 : e / 2);
    for (int i = 0; i < 60; ++i) {
        const double next = 0.5 * (y + x / y);
        if (next == y) break;
        y = next;
    }
    return y;
}

/* IEEE binary16 bits to float, exactly. */
static inline float simpler_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* +-0 */
    } else {         /* subnormal: normalise */
        exp = 113u;
        while ((man & 0x400u) == 0) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 bits (the high half of an f32) to float, exactly. */
static inline float simpler_bf16_to_f32(uint16_t b) {
    const uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Element i of an array of dtype `dt` (SIMPLER_DT_FLOAT32, _FLOAT16 or _BFLOAT16) at `p`,
 * widened to float; 0 for any other dtype (check the dtype before the loop). */
static inline float simpler_load_f32(const void *p, uint32_t dt, uint64_t i) {
    switch (dt) {
    case SIMPLER_DT_FLOAT32: return ((const float *)p)[i];
    case SIMPLER_DT_FLOAT16: return simpler_f16_to_f32(((const uint16_t *)p)[i]);
    case SIMPLER_DT_BFLOAT16: return simpler_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0f;
    }
}

/* 1 if `dt` is one simpler_load_f32 reads. */
static inline int simpler_is_float_dtype(uint32_t dt) {
    return dt == SIMPLER_DT_FLOAT32 || dt == SIMPLER_DT_FLOAT16 || dt == SIMPLER_DT_BFLOAT16;
}

#ifdef __cplusplus
}
#endif
#endif /* SIMPLER_KERNEL_MATH_H */
