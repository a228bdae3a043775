/* kernels_avx2.c — AVX2 versions of the magnitude-max loops in kernels.h (8 floats per step).
 *
 * Why: the library is built for baseline x86-64, where an unsigned 32-bit max is a
 * compare-and-blend sequence; AVX2 has it as one instruction (vpmaxud). These loops run at every
 * branch merge of every adaptive-scaling step, so their cost is the cached adaptive step's
 * overhead (and the plain accumulation, so that the merges of the other methods get the same
 * vector width and the two stay comparable). Compiled with a target attribute; only called when mpx_cpu() reports avx2. The sum
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
