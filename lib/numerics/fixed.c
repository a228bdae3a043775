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

/* One chunk: quantize m elements, counting into st when it is not NULL. */
static void quantize_chunk(const mpx_fixed_spec *s, int stochastic, const float *src, float *dst,
                           size_t i0, size_t m, mpx_cast_stats *st) {
    uint32_t rnd[QCHUNK];
    if (stochastic) {
        const uint64_t stream = (uint64_t)MPX_RNG_ROUNDING ^ s->stream;
        mpx_k_rand(mpx_impl_current(), s->seed, stream, s->offset + i0, rnd, m);
    }
    const float min = ldexpf(1.0f, -s->frac);
    for (size_t j = 0; j < m; j++) {
        const float x = src[i0 + j];
        int sat;
        const int16_t q = mpx_f32_to_q16(x, s->frac, stochastic, stochastic ? rnd[j] : 0u, &sat);
        const int fin = isfinite(x);
        dst[i0 + j] = fin ? mpx_q16_to_f32(q, s->frac) : x;
        if (!st) continue;
        const int nz = x != 0.0f;
        st->nonzero += nz;
        st->nonfinite += !fin;
        st->below_min += nz && fin && fabsf(x) < min;
        st->flushed += nz && fin && q == 0;
        st->overflow += fin && sat;
        st->hist[mpx_fp_hist_bin(mpx_fp_bits(x))]++;
    }
    if (st) st->count += m;
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
