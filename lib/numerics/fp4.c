/* fp4.c — E2M1 and the MXFP4 and NVFP4 block quantizers (fp4.h), with their counts.
 *
 * E2M1 has eight magnitudes, so the cast is a search of that table with the tie rule written
 * out, not bit manipulation: the table is the definition. Block scales are computed in double
 * and rounded once into their format (E8M0: a power of two; NVFP4's E4M3 by the one E4M3 cast).
 */
#include "mpx/fp4.h"

#include <math.h>
#include <string.h>

static const float k_e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint8_t mpx_f32_to_e2m1(float x, int *saturated) {
    int sat = 0;
    uint8_t c = 0;
    const float a = fabsf(x);
    if (isnan(x)) {
        c = 0;
    } else if (a >= 7.0f) { /* 7 is halfway to the virtual next value 8 (an even code): past 6 */
        c = 7;
        sat = 1;
    } else if (a >= 6.0f) {
        c = 7;
    } else {
        uint8_t k = 0;
        while (a >= k_e2m1[k + 1]) k++; /* k_e2m1[k] <= a < k_e2m1[k + 1] */
        const float mid = 0.5f * (k_e2m1[k] + k_e2m1[k + 1]); /* exact */
        c = a < mid ? k : a > mid ? (uint8_t)(k + 1) : (k & 1u) ? (uint8_t)(k + 1) : k;
    }
    if (saturated) *saturated = sat;
    return (uint8_t)(c | (signbit(x) && !isnan(x) ? 8u : 0u));
}

float mpx_e2m1_to_f32(uint8_t code) {
    const float v = k_e2m1[code & 7u];
    return code & 8u ? -v : v;
}

/* Cast one scaled value v into E2M1, count it, return the value read back (scaled). */
static float cast_counted(float v, mpx_cast_stats *st) {
    int sat;
    const uint8_t c = mpx_f32_to_e2m1(v, &sat);
    if (st) {
        const int nz = v != 0.0f, fin = isfinite(v);
        st->count++;
        st->nonzero += nz;
        st->nonfinite += !fin;
        st->below_min += nz && fin && fabsf(v) < 0.5f;
        st->flushed += nz && fin && (c & 7u) == 0;
        st->subnormal += (c & 7u) == 1;
        st->overflow += fin && sat;
        st->hist[mpx_hist_bin(v)]++;
    }
    return mpx_e2m1_to_f32(c);
}

/* Count a value that is read back as NaN (a non-finite block or tensor). */
static void count_nan(float v, mpx_cast_stats *st) {
    if (!st) return;
    st->count++;
    st->nonzero += v != 0.0f;
    st->nonfinite += !isfinite(v);
    st->hist[mpx_hist_bin(v)]++;
}

static float max_abs_nan(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (isnan(a)) return NAN;
        if (a > m) m = a;
    }
    return m;
}

void mpx_mxfp4_quantize(mpx_mx_rule rule, const float *src, float *dst, size_t n, size_t row,
                        mpx_cast_stats *stats, mpx_mx_scales *sc) {
    if (row == 0 || row > n) row = n;
    mpx_mx_scales s = {0, 0, 0, 127, -127};
    for (size_t r0 = 0; r0 < n; r0 += row) {
        const size_t r1 = r0 + row < n ? r0 + row : n;
        for (size_t b0 = r0; b0 < r1; b0 += MPX_MX_BLOCK) {
            const size_t b1 = b0 + MPX_MX_BLOCK < r1 ? b0 + MPX_MX_BLOCK : r1;
            const float amax = max_abs_nan(src + b0, b1 - b0);
            const int e = mpx_mx_exponent_of(6.0, rule, isnan(amax) ? INFINITY : amax);
            s.blocks++;
            if (e == MPX_MX_NAN_EXP) {
                s.nan_blocks++;
                for (size_t i = b0; i < b1; i++) {
                    count_nan(src[i], stats);
                    dst[i] = NAN;
                }
                continue;
            }
            if (amax == 0) {
                s.zero_blocks++;
            } else {
                if (e < s.min_exp) s.min_exp = e;
                if (e > s.max_exp) s.max_exp = e;
            }
            const float down = ldexpf(1.0f, -e), up = ldexpf(1.0f, e);
            for (size_t i = b0; i < b1; i++) /* exact: powers of two within FP32's range */
                dst[i] = cast_counted(src[i] * down, stats) * up;
        }
    }
    if (s.min_exp > s.max_exp) s.min_exp = s.max_exp = 0;
    if (sc) *sc = s;
}

void mpx_nvfp4_quantize(const float *src, float *dst, size_t n, size_t row, mpx_cast_stats *stats,
                        mpx_nvfp4_scales *sc) {
    if (row == 0 || row > n) row = n;
    mpx_nvfp4_scales s = {1.0f, INFINITY, 0.0f, 0, 0};
    const float amax = max_abs_nan(src, n);
    if (!isfinite(amax)) {
        s.tensor_scale = NAN;
        for (size_t i = 0; i < n; i++) {
            count_nan(src[i], stats);
            dst[i] = NAN;
        }
        s.min_block = s.max_block = NAN;
        if (sc) *sc = s;
        return;
    }
    const double st = amax > 0 ? (double)amax / (6.0 * 448.0) : 1.0;
    s.tensor_scale = (float)st;
    for (size_t r0 = 0; r0 < n; r0 += row) {
        const size_t r1 = r0 + row < n ? r0 + row : n;
        for (size_t b0 = r0; b0 < r1; b0 += MPX_NVFP4_BLOCK) {
            const size_t b1 = b0 + MPX_NVFP4_BLOCK < r1 ? b0 + MPX_NVFP4_BLOCK : r1;
            const float bamax = max_abs_nan(src + b0, b1 - b0);
            const float sb = mpx_round_to(MPX_F8_E4M3, (float)((double)bamax / 6.0 / st));
            s.blocks++;
            if (bamax > 0) {
                if (sb < s.min_block) s.min_block = sb;
                if (sb > s.max_block) s.max_block = sb;
                s.zero_scale_blocks += sb == 0.0f;
            }
            const double step = (double)sb * st;
            for (size_t i = b0; i < b1; i++) {
                if (sb > 0) {
                    const float q = cast_counted((float)((double)src[i] / step), stats);
                    dst[i] = (float)((double)q * step);
                    continue;
                }
                dst[i] = 0.0f * src[i]; /* the block's scale underflowed: every value flushes */
                if (stats) {
                    const int nz = src[i] != 0.0f;
                    stats->count++;
                    stats->nonzero += nz;
                    stats->flushed += nz;
                    stats->below_min += nz;
                    stats->hist[mpx_hist_bin(src[i])]++;
                }
            }
        }
    }
    if (s.min_block > s.max_block) s.min_block = s.max_block = 0;
    if (sc) *sc = s;
}
