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
 * The BF16 conversions, the stochastic-rounding cast and its Philox words are here too: on a CPU
 * without AVX-512 their portable loops were most of a BF16 or a stochastically rounded step.
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

/* BF16 round to nearest even on the integers, as in kernels_avx512.c: (u + 0x7fff + lsb) >> 16,
 * NaN -> (u >> 16) | quiet bit. 8 values to 8 codes in 32-bit lanes; |u| < 2^31, so the signed
 * compare finds the NaNs. */
MPX_AVX2 static inline __m256i bf16_rne(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, qnan, nan);
}

/* Two registers of codes (each at most 0xffff) to 16 uint16 in element order: the
 * unsigned-saturating pack keeps them but packs within 128-bit halves; the permute puts the four
 * quarters back in order. */
MPX_AVX2 static inline __m256i pack_codes(__m256i q0, __m256i q1) {
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(q0, q1), _MM_SHUFFLE(3, 1, 2, 0));
}

MPX_AVX2 void mpx_k_encode_bf16_avx2(const float *src, float scale, uint16_t *dst, size_t n) {
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i q0 = bf16_rne(_mm256_mul_ps(_mm256_loadu_ps(src + i), s));
        __m256i q1 = bf16_rne(_mm256_mul_ps(_mm256_loadu_ps(src + i + 8), s));
        _mm256_storeu_si256((__m256i *)(dst + i), pack_codes(q0, q1));
    }
    mpx_k_encode_bf16_c(src + i, scale, dst + i, n - i);
}

/* A BF16 code is the high half of its FP32 value; a NaN gets the quiet bit, as in the scalar
 * decode. */
MPX_AVX2 void mpx_k_decode_bf16_avx2(const uint16_t *src, float *dst, size_t n) {
    const __m256i expmask = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x00400000);
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        u = _mm256_slli_epi32(u, 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, mag), expmask);
        u = _mm256_or_si256(u, _mm256_and_si256(nan, quiet));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(u));
    }
    mpx_k_decode_bf16_c(src + i, dst + i, n - i);
}

/* Stochastic rounding, the rule of mpx_fp_round_mag in vector form (as in kernels_avx512.c, with
 * compares and blends for the masks). The discarded fraction as a 32-bit fixed-point number is
 * v << (32 - shift) | v >> (shift - 32): vpsllvd / vpsrlvd give 0 for counts >= 32 and read a
 * "negative" count as a huge one, so one of the two is always 0 (both are v when shift == 32).
 * AVX2 compares are signed: r < frac unsigned is tested with both sign bits flipped. */
MPX_AVX2 static inline __m256i sr_mag(__m256i a, __m256i r, int man, int bias) {
    const int e_min = 128 - bias;
    const __m256i zero = _mm256_setzero_si256(), flip = _mm256_set1_epi32((int)0x80000000u);
    __m256i e = _mm256_srli_epi32(a, 23);
    __m256i normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(e_min - 1));
    __m256i v_norm = _mm256_sub_epi32(a, _mm256_set1_epi32((127 - bias) << 23));
    __m256i e0 = _mm256_cmpeq_epi32(e, zero);
    __m256i e_eff = _mm256_blendv_epi8(e, _mm256_set1_epi32(1), e0);
    __m256i sig = _mm256_and_si256(a, _mm256_set1_epi32(0x7fffff));
    sig = _mm256_or_si256(sig, _mm256_andnot_si256(e0, _mm256_set1_epi32(0x800000)));
    __m256i shift_sub = _mm256_sub_epi32(_mm256_set1_epi32(23 - man + e_min), e_eff);
    __m256i v = _mm256_blendv_epi8(sig, v_norm, normal);
    __m256i shift = _mm256_blendv_epi8(shift_sub, _mm256_set1_epi32(23 - man), normal);
    __m256i q = _mm256_srlv_epi32(v, shift);
    __m256i frac =
        _mm256_or_si256(_mm256_sllv_epi32(v, _mm256_sub_epi32(_mm256_set1_epi32(32), shift)),
                        _mm256_srlv_epi32(v, _mm256_sub_epi32(shift, _mm256_set1_epi32(32))));
    __m256i up = _mm256_cmpgt_epi32(_mm256_xor_si256(frac, flip), _mm256_xor_si256(r, flip));
    return _mm256_sub_epi32(q, up); /* up is -1 where the value rounds up */
}

/* The 16-bit code of 8 values u (FP32 bits) with random words r. Magnitudes and codes stay below
 * 2^31, so signed compares order them. */
MPX_AVX2 static inline __m256i sr16_code(__m256i u, __m256i r, int f16) {
    const int man = f16 ? 10 : 7, bias = f16 ? 15 : 127, nan_shift = f16 ? 13 : 16;
    const __m256i inf = _mm256_set1_epi32(f16 ? 0x7c00 : 0x7f80);
    const __m256i expmask = _mm256_set1_epi32(0x7f800000);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i q = sr_mag(a, r, man, bias);
    q = _mm256_blendv_epi8(q, inf, _mm256_cmpgt_epi32(q, _mm256_set1_epi32(f16 ? 0x7bff : 0x7f7f)));
    q = _mm256_blendv_epi8(q, inf, _mm256_cmpeq_epi32(a, expmask));
    __m256i nanv = _mm256_or_si256(
        _mm256_set1_epi32(f16 ? 0x7e00 : 0x7fc0),
        _mm256_and_si256(_mm256_srli_epi32(a, nan_shift), _mm256_set1_epi32(f16 ? 0x3ff : 0x7f)));
    q = _mm256_blendv_epi8(q, nanv, _mm256_cmpgt_epi32(a, expmask));
    return _mm256_or_si256(q, _mm256_srli_epi32(_mm256_xor_si256(u, a), 16)); /* the sign */
}

MPX_AVX2 void mpx_k_sr16_avx2(mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd,
                              uint16_t *dst, size_t n) {
    const int f16 = fmt == MPX_F16;
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i u0 = _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(src + i), s));
        __m256i u1 = _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(src + i + 8), s));
        __m256i q0 = sr16_code(u0, _mm256_loadu_si256((const __m256i *)(rnd + i)), f16);
        __m256i q1 = sr16_code(u1, _mm256_loadu_si256((const __m256i *)(rnd + i + 8)), f16);
        _mm256_storeu_si256((__m256i *)(dst + i), pack_codes(q0, q1));
    }
    mpx_k_sr16_c(fmt, src + i, scale, rnd + i, dst + i, n - i);
}

/* Philox4x32-10 for 8 consecutive blocks at once (lib/core/rng.c is the reference): 32 words.
 * The 32x32 -> 64-bit products come from vpmuludq on the even and the odd lanes. */
MPX_AVX2 static inline void mulhilo(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
    __m256i pe = _mm256_mul_epu32(a, m);
    __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    *lo = _mm256_mullo_epi32(a, m);
}

MPX_AVX2 static void philox8(uint64_t seed, uint64_t stream, uint64_t block, uint32_t *out) {
    const __m256i flip = _mm256_set1_epi32((int)0x80000000u);
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u),
                  m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    __m256i base = _mm256_set1_epi32((int)(uint32_t)block);
    __m256i c0 = _mm256_add_epi32(base, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    /* The low word wrapped (c0 < base, unsigned): carry into the high word. */
    __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(base, flip), _mm256_xor_si256(c0, flip));
    __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32((int)(uint32_t)(block >> 32)), carry);
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)stream);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo(c0, m0, &hi0, &lo0);
        mulhilo(c2, m1, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* Transpose 4 x 8 words into 8 blocks of 4 consecutive words: u0 holds blocks 0 and 4, u1
     * 1 and 5, u2 2 and 6, u3 3 and 7. */
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    _mm256_storeu_si256((__m256i *)(out + 0), _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(u2, u3, 0x31));
}

void mpx_k_rand_avx2(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out, size_t n) {
    mpx_k_rand_blocks(philox8, 8, seed, stream, counter, out, n);
}
