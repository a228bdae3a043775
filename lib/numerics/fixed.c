/* fixed.c — Q(16, f) fixed point (fixed.h): the scalar cast, and the counted quantize that the
 * executor applies to the GEMM family's operands in precision.mode = fixed16.
 *
 * Chunks of QCHUNK elements draw their random words by counter (offset + i), so neither the
 * values nor the counts depend on how chunks are shared among threads.
 */
#include "mpx/fixed.h"

#include <math.h>
#include <string.h>

#include "lib/numerics/fp_bits.h"
#include "lib/numerics/kernels.h"
#include "mpx/rng.h"

enum { QCHUNK = 2048 };

int16_t mpx_f32_to_q16(float x, int frac, int stochastic, uint32_t rnd, int *saturated) {
    return (int16_t)mpx_fp_q16(x, frac, stochastic, rnd, saturated);
}

float mpx_q16_to_f32(int16_t q, int frac) { return ldexpf((float)q, -frac); }

/* 1.0f where c, else 0.0f, by a mask rather than a branch (a stochastic rounding's outcome is
 * random, so a branch on it mispredicts half the time). */
static inline float one_if(int c) {
    const uint32_t u = 0x3f800000u & (0u - (uint32_t)(c != 0));
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* floor(2^32 d) for d in [0, 1) as a uint32, exactly, in float and int32 steps only (they
 * vectorize; a double or a uint32 conversion does not, two lanes at best): 2^32 d is exact in
 * float; below 2^23 it is floored as in q16_code, above it is an integer already; its high and
 * low 16 bits are split in float (exact: integers below 2^24) and joined as integers. */
static inline uint32_t floor_2p32(float d) {
    const float f = d * 0x1p32f;
    const float t = (f + 0x1p23f) - 0x1p23f;
    const float g = f < 0x1p23f ? t - one_if(t > f) : f;
    const float h = g * 0x1p-16f, th = (h + 0x1p23f) - 0x1p23f, hi = th - one_if(th > h);
    const float lo = g - hi * 0x1p16f;
    return ((uint32_t)(int32_t)hi << 16) | (uint32_t)(int32_t)lo;
}

/* The code of finite x as a float, *sat set where it saturated: mpx_f32_to_q16 written for a
 * loop. |x 2^f| is capped at 2^16 (past the int16 range, so it saturates all the same) and
 * rounded to an integer by adding and taking away 2^23 (exact, to nearest even, below 2^23; 2^23
 * is even); floor is that minus one where it rounded up, and the stochastic test is
 * r < floor(2^32 frac) with floor_2p32. No libm call. */
static inline float q16_code(float x, float up, int stochastic, uint32_t r, int *sat) {
    const float v = x * up;
    float a = fabsf(v);
    a = a < 0x1p16f ? a : 0x1p16f;
    float mag = (a + 0x1p23f) - 0x1p23f;
    if (stochastic) {
        const float lo = mag - one_if(mag > a);
        mag = lo + one_if(r < floor_2p32(a - lo));
    }
    const float q = copysignf(mag, v);
    *sat = q > 32767.0f || q < -32768.0f;
    return q > 32767.0f ? 32767.0f : q < -32768.0f ? -32768.0f : q;
}

/* dst = the values of m codes (non-finite x kept); a code 0 reads back as +0 (q + 0.0f), as an
 * int16 does. One loop per rounding, so that the compiler sees a constant `stochastic`. */
static inline void q16_values(const float *src, float *dst, size_t m, float up, float down,
                              int stochastic, const uint32_t *rnd) {
    for (size_t j = 0; j < m; j++) {
        int sat;
        const float x = src[j], q = q16_code(x, up, stochastic, stochastic ? rnd[j] : 0u, &sat);
        const float value = (q + 0.0f) * down; /* computed either way: a select, not a branch */
        dst[j] = isfinite(x) ? value : x;
    }
}

/* One chunk: count m elements into st when it is not NULL (before dst, which may be src, is
 * written), then quantize them. test_fixed16 checks the values bit for bit against the scalar
 * cast, and the counts. */
static void quantize_chunk(const mpx_fixed_spec *s, int stochastic, const float *src, float *dst,
                           size_t i0, size_t m, mpx_cast_stats *st) {
    uint32_t rnd[QCHUNK];
    if (stochastic) {
        const uint64_t stream = (uint64_t)MPX_RNG_ROUNDING ^ s->stream;
        mpx_k_rand(mpx_impl_current(), s->seed, stream, s->offset + i0, rnd, m);
    }
    const float up = ldexpf(1.0f, s->frac), down = ldexpf(1.0f, -s->frac);
    if (st) {
        for (size_t j = 0; j < m; j++) {
            const float x = src[i0 + j];
            int sat;
            const float q = q16_code(x, up, stochastic, stochastic ? rnd[j] : 0u, &sat);
            const int nz = x != 0.0f, fin = isfinite(x);
            st->nonzero += nz;
            st->nonfinite += !fin;
            st->below_min += nz && fin && fabsf(x) < down;
            st->flushed += nz && fin && q == 0.0f;
            st->overflow += fin && sat;
            st->hist[mpx_fp_hist_bin(mpx_fp_bits(x))]++;
        }
        st->count += m;
    }
    if (stochastic)
        q16_values(src + i0, dst + i0, m, up, down, 1, rnd);
    else
        q16_values(src + i0, dst + i0, m, up, down, 0, NULL);
}

void mpx_fixed_quantize(const mpx_fixed_spec *s, const float *src, float *dst, size_t n,
                        mpx_cast_stats *stats) {
    const int stochastic = s->rounding == MPX_ROUND_STOCHASTIC;
    const long chunks = (long)((n + QCHUNK - 1) / QCHUNK);
#pragma omp parallel if (n >= 8 * QCHUNK)
    {
        mpx_cast_stats local;
        memset(&local, 0, sizeof local);
#pragma omp for schedule(static)
        for (long c = 0; c < chunks; c++) {
            const size_t i0 = (size_t)c * QCHUNK, m = n - i0 < QCHUNK ? n - i0 : QCHUNK;
            quantize_chunk(s, stochastic, src, dst, i0, m, stats ? &local : NULL);
        }
        if (stats)
#pragma omp critical(mpx_fixed_stats)
            mpx_cast_stats_add(stats, &local);
    }
}
