/* accumulate.c — max |x| and the sums of a branch merge: acc += scale * x, plain or measuring
 * both operands' magnitudes in the same pass (adaptive scaling's merge target needs them).
 *
 * Fixed chunks of CHUNK elements whatever the thread count; each element's sum is one multiply
 * and one add in every version (portable and AVX2, kernels.h), so the bits never depend on
 * the threads or the CPU, and the maxima are order-free.
 */
#include <math.h>
#include <stdint.h>

#include "lib/numerics/kernels.h"
#include "mpx/numerics.h"

enum { CHUNK = 4096, PAR_MIN = 1 << 16 };

static float bits_value(uint32_t m) {
    if (m >= 0x7f800000u) return INFINITY; /* Inf or NaN */
    union { uint32_t u; float f; } r = {m};
    return r.f;
}

float mpx_absmax_f32(const float *x, size_t n) {
    /* The integer max of the sign-cleared bits (kernels.h): exact, no NaN case; max is
     * order-free, so the threads do not change it. */
    const int avx2 = mpx_impl_avx2();
    const long nchunks = (long)((n + CHUNK - 1) / CHUNK);
    uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (n > PAR_MIN)
    for (long c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
        uint32_t b = avx2 ? mpx_k_absmax_bits_avx2(x + i0, len, 0) : mpx_k_absmax_bits_c(x + i0, len, 0);
        m = b > m ? b : m;
    }
    return bits_value(m);
}

void mpx_accumulate_f32(float *acc, const float *x, size_t n, float scale) {
    const int avx2 = mpx_impl_avx2();
    const long nchunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (long c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (avx2)
            mpx_k_accumulate_avx2(acc + i0, x + i0, len, scale);
        else
            mpx_k_accumulate_c(acc + i0, x + i0, len, scale);
    }
}

void mpx_accumulate_absmax_f32(float *acc, const float *x, size_t n, float scale, float *acc_absmax,
                               float *x_absmax) {
    const int avx2 = mpx_impl_avx2();
    const long nchunks = (long)((n + CHUNK - 1) / CHUNK);
    uint32_t ma = 0, mx = 0;
#pragma omp parallel for schedule(static) reduction(max : ma, mx) if (n > PAR_MIN)
    for (long c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
        uint32_t a = 0, b = 0;
        if (avx2)
            mpx_k_accumulate_absmax_avx2(acc + i0, x + i0, len, scale, &a, &b);
        else
            mpx_k_accumulate_absmax_c(acc + i0, x + i0, len, scale, &a, &b);
        ma = a > ma ? a : ma;
        mx = b > mx ? b : mx;
    }
    if (acc_absmax) *acc_absmax = bits_value(ma);
    if (x_absmax) *x_absmax = bits_value(mx);
}

