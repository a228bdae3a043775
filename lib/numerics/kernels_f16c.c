/* kernels_f16c.c — F16C (AVX, 8 floats per step) versions of the FP16 conversions, for CPUs
 * without AVX-512. Compiled with target attributes; only called when mpx_cpu() reports f16c.
 */
#include <immintrin.h>

#include "lib/numerics/kernels.h"

#define MPX_F16C __attribute__((target("avx,f16c")))

MPX_F16C void mpx_k_encode_f16_f16c(const float *src, float scale, uint16_t *dst, size_t n) {
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(src + i), s);
        __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    mpx_k_encode_f16_c(src + i, scale, dst + i, n - i);
}

MPX_F16C void mpx_k_decode_f16_f16c(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    mpx_k_decode_f16_c(src + i, dst + i, n - i);
}
