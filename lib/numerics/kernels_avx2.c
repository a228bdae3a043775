/* kernels_avx2.c — AVX2 versions of the merge and moments loops in kernels.h (8 floats per step).
 *
 * Why: the library is built for baseline x86-64, where an unsigned 32-bit max is a
 * compare-and-blend sequence; AVX2 has it as one instruction (vpmaxud). These loops run at every
 * branch merge of every adaptive-scaling step, so their cost is the cached adaptive step's
 * overhead (and the plain accumulation, so that the merges of the other methods get the same
 * vector width and the two stay comparable). The moments' lane loops run on every adaptive
 * update and statistics step; their 8 lanes are two registers of 4 doubles, element i in lane
 * i % 8 as in the portable loop, and min/max_ps(v, m) is exactly `v < m ? v : m`, so the bits
 * match. Compiled with a target attribute; only called when mpx_cpu() reports avx2. The sum
 * is one multiply and one add per element, as in the portable loop, so the bits are the same.
 */
#include <immintrin.h>

#include "lib/numerics/kernels.h"

#define MPX_AVX2 __attribute__((target("avx2")))

MPX_AVX2 static uint32_t hmax_epu32(__m256i v, uint32_t m) {
    uint32_t lane[8];
    _mm256_storeu_si256((__m256i *)lane, v);
    for (int j = 0; j < 8; j++) m = lane[j] > m ? lane[j] : m;
    return m;
}

MPX_AVX2 uint32_t mpx_k_absmax_bits_avx2(const float *x, size_t n, uint32_t m) {
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i v0 = _mm256_setzero_si256(), v1 = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) { /* two chains: the max's latency is not the limit */
        __m256i a = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(x + i + 8));
        v0 = _mm256_max_epu32(v0, _mm256_and_si256(a, mask));
        v1 = _mm256_max_epu32(v1, _mm256_and_si256(b, mask));
    }
    m = hmax_epu32(_mm256_max_epu32(v0, v1), m);
    return mpx_k_absmax_bits_c(x + i, n - i, m);
}

MPX_AVX2 void mpx_k_accumulate_avx2(float *acc, const float *x, size_t n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i), b = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(acc + i, _mm256_add_ps(a, _mm256_mul_ps(s, b)));
    }
    mpx_k_accumulate_c(acc + i, x + i, n - i, scale);
}

MPX_AVX2 void mpx_k_accumulate_absmax_avx2(float *acc, const float *x, size_t n, float scale,
                                           uint32_t *ma, uint32_t *mx) {
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    const __m256 s = _mm256_set1_ps(scale);
    __m256i va = _mm256_setzero_si256(), vx = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i), b = _mm256_loadu_ps(x + i);
        va = _mm256_max_epu32(va, _mm256_and_si256(_mm256_castps_si256(a), mask));
        vx = _mm256_max_epu32(vx, _mm256_and_si256(_mm256_castps_si256(b), mask));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(a, _mm256_mul_ps(s, b)));
    }
    *ma = hmax_epu32(va, *ma);
    *mx = hmax_epu32(vx, *mx);
    mpx_k_accumulate_absmax_c(acc + i, x + i, n - i, scale, ma, mx);
}

MPX_AVX2 void mpx_k_lane_sums_avx2(const float *x, size_t n, double *s, float *mn, float *mx) {
    __m256d s0 = _mm256_loadu_pd(s), s1 = _mm256_loadu_pd(s + 4);
    __m256 lo = _mm256_loadu_ps(mn), hi = _mm256_loadu_ps(mx);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
        lo = _mm256_min_ps(v, lo); /* v < lo ? v : lo: a NaN v leaves lo */
        hi = _mm256_max_ps(v, hi);
    }
    _mm256_storeu_pd(s, s0);
    _mm256_storeu_pd(s + 4, s1);
    _mm256_storeu_ps(mn, lo);
    _mm256_storeu_ps(mx, hi);
    mpx_k_lane_sums_c(x + i, n - i, s, mn, mx); /* i is a multiple of 8: the lanes line up */
}

MPX_AVX2 void mpx_k_lane_sqdev_avx2(const float *x, size_t n, double mean, double *q) {
    const __m256d m = _mm256_set1_pd(mean);
    __m256d q0 = _mm256_loadu_pd(q), q1 = _mm256_loadu_pd(q + 4);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m);
        __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m);
        q0 = _mm256_add_pd(q0, _mm256_mul_pd(d0, d0));
        q1 = _mm256_add_pd(q1, _mm256_mul_pd(d1, d1));
    }
    _mm256_storeu_pd(q, q0);
    _mm256_storeu_pd(q + 4, q1);
    mpx_k_lane_sqdev_c(x + i, n - i, mean, q);
}
