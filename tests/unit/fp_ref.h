/* fp_ref.h — an independent reference for the floating formats, for the numerics tests.
 *
 * Built from the format definitions alone, in double precision, without any bit tricks: the
 * table of every finite positive value of a format (code c = its index), searched for the nearest
 * value with ties going to the even code, which is IEEE round-to-nearest-even. The overflow rule
 * falls out of appending one "virtual" value past the largest finite one — the value the next code
 * would have with an unbounded exponent (2^16 for FP16, 2^128 for BF16, 480 for E4M3, 2^16 for
 * E5M2): a value rounding to it overflows (to Inf, or saturating for E4M3).
 */
#ifndef MPX_TEST_FP_REF_H
#define MPX_TEST_FP_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const char *name;
    int exp_bits, man_bits, bias, has_inf;
    uint32_t max_code; /* largest finite positive code */
    uint32_t sign_bit;
    double *value; /* value[c] for c = 0 .. max_code + 1 (the last one virtual) */
} ref_format;

static inline ref_format ref_make(const char *name, int exp_bits, int man_bits, int has_inf) {
    ref_format f = {name, exp_bits, man_bits, (1 << (exp_bits - 1)) - 1, has_inf, 0, 0, 0};
    f.sign_bit = 1u << (exp_bits + man_bits);
    /* With Inf the all-ones exponent is reserved; without (E4M3) only the all-ones code is NaN. */
    f.max_code = has_inf ? (((1u << exp_bits) - 1u) << man_bits) - 1u : f.sign_bit - 2u;
    f.value = malloc((f.max_code + 2) * sizeof(double));
    for (uint32_t c = 0; c <= f.max_code + 1; c++) {
        int e = (int)(c >> man_bits);
        double m = (double)(c & ((1u << man_bits) - 1u));
        f.value[c] = e == 0 ? ldexp(m, 1 - f.bias - man_bits)
                            : ldexp(1.0 + m / (double)(1u << man_bits), e - f.bias);
    }
    return f;
}

static inline void ref_free(ref_format *f) {
    free(f->value);
    f->value = 0;
}

/* Largest code whose value is <= a (a >= 0, a < virtual value). */
static inline uint32_t ref_floor_code(const ref_format *f, double a) {
    uint32_t lo = 0, hi = f->max_code + 1; /* value[lo] <= a < value[hi] */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (f->value[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* RNE code of a non-NaN x; *overflow = 1 when a finite x rounds past the largest finite value.
 * Infinite x gives the Inf code (formats with Inf) or the NaN code (E4M3). */
static inline uint32_t ref_round(const ref_format *f, double x, int *overflow) {
    uint32_t sign = signbit(x) ? f->sign_bit : 0u;
    double a = fabs(x);
    uint32_t inf_or_sat = f->has_inf ? f->max_code + 1 : f->max_code;
    *overflow = 0;
    if (isinf(a)) return sign | (f->has_inf ? f->max_code + 1 : f->sign_bit - 1u);
    uint32_t c;
    if (a >= f->value[f->max_code + 1]) {
        c = f->max_code + 1;
    } else {
        c = ref_floor_code(f, a);
        if (f->value[c] != a) {
            double down = a - f->value[c], up = f->value[c + 1] - a;
            if (up < down || (up == down && (c & 1u))) c++;
        }
    }
    if (c > f->max_code) {
        *overflow = 1;
        c = inf_or_sat;
    }
    return sign | c;
}

/* The code's value (NaN for NaN codes, +-Inf for Inf codes). */
static inline double ref_value(const ref_format *f, uint32_t code) {
    double s = (code & f->sign_bit) ? -1.0 : 1.0;
    uint32_t mag = code & (f->sign_bit - 1u);
    if (mag <= f->max_code) return s * f->value[mag];
    if (f->has_inf && mag == f->max_code + 1) return s * INFINITY;
    return NAN;
}

static inline int ref_is_nan_code(const ref_format *f, uint32_t code) {
    uint32_t mag = code & (f->sign_bit - 1u);
    return mag > f->max_code + (f->has_inf ? 1u : 0u);
}

/* Stochastic rounding as specified: with lo <= |x| < hi the neighbouring codes, round up iff
 * r < floor(2^32 (|x| - lo) / (hi - lo)). Exact in double: hi - lo is a power of two and
 * |x| - lo is exact. *overflow as in ref_round (the up neighbour is past the largest finite). */
static inline uint32_t ref_round_sr(const ref_format *f, double x, uint32_t r, int *overflow) {
    uint32_t sign = signbit(x) ? f->sign_bit : 0u;
    double a = fabs(x);
    *overflow = 0;
    if (isinf(a)) return ref_round(f, x, overflow);
    uint32_t c;
    if (a >= f->value[f->max_code + 1]) {
        c = f->max_code + 1;
    } else {
        c = ref_floor_code(f, a);
        double frac = (a - f->value[c]) / (f->value[c + 1] - f->value[c]);
        if ((double)r < floor(ldexp(frac, 32))) c++;
    }
    if (c > f->max_code) {
        *overflow = 1;
        c = f->has_inf ? f->max_code + 1 : f->max_code;
    }
    return sign | c;
}

static inline ref_format ref_f16(void) { return ref_make("f16", 5, 10, 1); }
static inline ref_format ref_bf16(void) { return ref_make("bf16", 8, 7, 1); }
static inline ref_format ref_e4m3(void) { return ref_make("e4m3", 4, 3, 0); }
static inline ref_format ref_e5m2(void) { return ref_make("e5m2", 5, 2, 1); }

/* Leave a void test function when an allocation failed (uses CHECK from testutil.h). */
#define NEED(cond)                                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            CHECK(0, "allocation failed: %s", #cond);                                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Float from bits and back (tests build special values from patterns). */
static inline float ref_bits_f(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v = {u};
    return v.f;
}

static inline uint32_t ref_f_bits(float f) {
    union {
        float f;
        uint32_t u;
    } v = {f};
    return v.u;
}

#endif
