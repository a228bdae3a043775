/* kernels_avx512.c — AVX-512 versions of the loops in kernels.h (16 floats per step).
 *
 * Compiled with target attributes so the file builds without -march flags; only called when
 * mpx_cpu() reports avx512f + avx512bw (and f16c). Tails shorter than a vector go through the
 * portable per-element rules of fp_bits.h, which define the same bits.
 */
#include <immintrin.h>

#include "lib/numerics/fp_bits.h"
#include "lib/numerics/kernels.h"

/* (Every AVX-512 CPU also has popcnt.) */
#define MPX_AVX512 __attribute__((target("avx512f,avx512bw,f16c,popcnt")))

MPX_AVX512 void mpx_k_encode_f16_avx512(const float *src, float scale, uint16_t *dst, size_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_mul_ps(_mm512_loadu_ps(src + i), s);
        __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    mpx_k_encode_f16_c(src + i, scale, dst + i, n - i);
}

MPX_AVX512 void mpx_k_decode_f16_avx512(const uint16_t *src, float *dst, size_t n) {
    /* Scalar head up to a 64-byte aligned dst: split 512-bit stores cost more than the loop. */
    size_t i = ((64 - ((uintptr_t)dst & 63)) & 63) / sizeof(float);
    if (i > n) i = n;
    mpx_k_decode_f16_c(src, dst, i);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    mpx_k_decode_f16_c(src + i, dst + i, n - i);
}

/* BF16 RNE on integers: (u + 0x7fff + lsb) >> 16; NaN -> (u >> 16) | quiet bit. The hardware
 * vcvtneps2bf16 is not used: it flushes FP32 subnormals to zero. */
MPX_AVX512 static inline __m256i bf16_rne(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, qnan));
}

MPX_AVX512 void mpx_k_encode_bf16_avx512(const float *src, float scale, uint16_t *dst, size_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            bf16_rne(_mm512_mul_ps(_mm512_loadu_ps(src + i), s)));
    mpx_k_encode_bf16_c(src + i, scale, dst + i, n - i);
}

MPX_AVX512 void mpx_k_decode_bf16_avx512(const uint16_t *src, float *dst, size_t n) {
    const __m512i expmask = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x00400000);
    size_t i = ((64 - ((uintptr_t)dst & 63)) & 63) / sizeof(float); /* aligned stores */
    if (i > n) i = n;
    mpx_k_decode_bf16_c(src, dst, i);
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        u = _mm512_slli_epi32(u, 16);
        __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
        __mmask16 nan = _mm512_cmpgt_epu32_mask(a, expmask);
        u = _mm512_mask_or_epi32(u, nan, u, quiet);
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(u));
    }
    mpx_k_decode_bf16_c(src + i, dst + i, n - i);
}

/* Stochastic rounding, the rule of mpx_fp_round_mag in vector form. Per lane: v and shift as
 * there; q = v >> shift; the discarded fraction as a 32-bit fixed-point number is
 * v << (32 - shift) when shift < 32 and v >> (shift - 32) otherwise. vpsllvd / vpsrlvd give 0
 * for counts >= 32, and a "negative" count wraps to a huge one, so OR-ing both shifts selects
 * the right one without a branch (both are v when shift == 32). */
MPX_AVX512 static inline __m512i sr_mag(__m512i a, __m512i r, int man, int bias) {
    const int e_min = 128 - bias;
    __m512i e = _mm512_srli_epi32(a, 23);
    __mmask16 normal = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(e_min));
    __m512i v_norm = _mm512_sub_epi32(a, _mm512_set1_epi32((127 - bias) << 23));
    __mmask16 e0 = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
    __m512i e_eff = _mm512_mask_mov_epi32(e, e0, _mm512_set1_epi32(1));
    __m512i sig = _mm512_and_si512(a, _mm512_set1_epi32(0x7fffff));
    sig = _mm512_mask_or_epi32(sig, (__mmask16)~e0, sig, _mm512_set1_epi32(0x800000));
    __m512i shift_sub = _mm512_add_epi32(_mm512_set1_epi32(23 - man + e_min),
                                         _mm512_sub_epi32(_mm512_setzero_si512(), e_eff));
    __m512i v = _mm512_mask_mov_epi32(sig, normal, v_norm);
    __m512i shift = _mm512_mask_mov_epi32(shift_sub, normal, _mm512_set1_epi32(23 - man));
    __m512i q = _mm512_srlv_epi32(v, shift);
    __m512i frac =
        _mm512_or_si512(_mm512_sllv_epi32(v, _mm512_sub_epi32(_mm512_set1_epi32(32), shift)),
                        _mm512_srlv_epi32(v, _mm512_sub_epi32(shift, _mm512_set1_epi32(32))));
    __mmask16 up = _mm512_cmplt_epu32_mask(r, frac);
    return _mm512_mask_add_epi32(q, up, q, _mm512_set1_epi32(1));
}

MPX_AVX512 void mpx_k_sr16_avx512(mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd,
                                  uint16_t *dst, size_t n) {
    const int f16 = fmt == MPX_F16;
    const int man = f16 ? 10 : 7, bias = f16 ? 15 : 127, nan_shift = f16 ? 13 : 16;
    const __m512i max_code = _mm512_set1_epi32(f16 ? 0x7bff : 0x7f7f);
    const __m512i inf = _mm512_set1_epi32(f16 ? 0x7c00 : 0x7f80);
    const __m512i nan_code = _mm512_set1_epi32(f16 ? 0x7e00 : 0x7fc0);
    const __m512i man_mask = _mm512_set1_epi32(f16 ? 0x3ff : 0x7f);
    const __m512i expmask = _mm512_set1_epi32(0x7f800000);
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(src + i), s));
        __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
        __m512i r = _mm512_loadu_si512((const void *)(rnd + i));
        __m512i q = sr_mag(a, r, man, bias);
        q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(q, max_code), inf);
        q = _mm512_mask_mov_epi32(q, _mm512_cmpeq_epi32_mask(a, expmask), inf);
        __m512i nanv =
            _mm512_or_si512(nan_code, _mm512_and_si512(_mm512_srli_epi32(a, nan_shift), man_mask));
        q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(a, expmask), nanv);
        q = _mm512_or_si512(
            q, _mm512_srli_epi32(_mm512_andnot_si512(_mm512_set1_epi32(0x7fffffff), u), 16));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(q));
    }
    mpx_k_sr16_c(fmt, src + i, scale, rnd + i, dst + i, n - i);
}

/* Counting: six masked popcounts per 16 values, and the histogram bin of each value computed in
 * vector form, then added to the interleaved sub-histograms of *h. */
MPX_AVX512 void mpx_k_count16_avx512(mpx_dtype fmt, const float *src, float scale,
                                     const uint16_t *codes, size_t n, mpx_cast_stats *st,
                                     mpx_k_hist *h) {
    const int f16 = fmt == MPX_F16;
    const __m512i sub_end = _mm512_set1_epi32(f16 ? 0x0400 : 0x0080);
    const __m512i inf = _mm512_set1_epi32(f16 ? 0x7c00 : 0x7f80);
    const __m512i min_sub = _mm512_set1_epi32(f16 ? 0x33800000 : 0x00010000);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), expmask = _mm512_set1_epi32(0x7f800000);
    const __m512i zero = _mm512_setzero_si512();
    const __m512 s = _mm512_set1_ps(scale);
    uint64_t nonzero = 0, flushed = 0, below_min = 0, subnormal = 0, overflow = 0, nonfinite = 0;
    uint32_t bins[16];
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i a = _mm512_and_si512(
            _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(src + i), s)), absmask);
        __m512i mag = _mm512_and_si512(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(codes + i))),
            _mm512_set1_epi32(0x7fff));
        __mmask16 nz = _mm512_cmpneq_epi32_mask(a, zero);
        __mmask16 fin = _mm512_cmplt_epu32_mask(a, expmask);
        __mmask16 mag0 = _mm512_cmpeq_epi32_mask(mag, zero);
        nonzero += (uint64_t)_mm_popcnt_u32(nz);
        nonfinite += (uint64_t)_mm_popcnt_u32((uint16_t)~fin);
        below_min += (uint64_t)_mm_popcnt_u32(_mm512_mask_cmplt_epu32_mask(nz, a, min_sub));
        flushed += (uint64_t)_mm_popcnt_u32(nz & fin & mag0);
        subnormal +=
            (uint64_t)_mm_popcnt_u32(_mm512_mask_cmplt_epu32_mask((__mmask16)~mag0, mag, sub_end));
        overflow += (uint64_t)_mm_popcnt_u32(_mm512_mask_cmpeq_epi32_mask(fin, mag, inf));
        /* bin = clamp(exponent - 63, 0, 79); zero 80, Inf 81, NaN 82 (mpx_fp_hist_bin). */
        __m512i b = _mm512_sub_epi32(_mm512_srli_epi32(a, 23), _mm512_set1_epi32(63));
        b = _mm512_min_epi32(_mm512_max_epi32(b, zero), _mm512_set1_epi32(79));
        b = _mm512_mask_mov_epi32(b, (__mmask16)~nz, _mm512_set1_epi32(MPX_HIST_ZERO));
        b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(a, expmask),
                                  _mm512_set1_epi32(MPX_HIST_INF));
        b = _mm512_mask_mov_epi32(b, _mm512_cmpgt_epu32_mask(a, expmask),
                                  _mm512_set1_epi32(MPX_HIST_NAN));
        _mm512_storeu_si512((void *)bins, b);
        for (int k = 0; k < 16; k += 8) {
            h->sub[0][bins[k]]++;
            h->sub[1][bins[k + 1]]++;
            h->sub[2][bins[k + 2]]++;
            h->sub[3][bins[k + 3]]++;
            h->sub[4][bins[k + 4]]++;
            h->sub[5][bins[k + 5]]++;
            h->sub[6][bins[k + 6]]++;
            h->sub[7][bins[k + 7]]++;
        }
    }
    st->count += i;
    st->nonzero += nonzero;
    st->flushed += flushed;
    st->below_min += below_min;
    st->subnormal += subnormal;
    st->overflow += overflow;
    st->nonfinite += nonfinite;
    h->pending += i;
    mpx_k_count16_c(fmt, src + i, scale, codes + i, n - i, st, h);
}

/* Philox4x32-10 for 16 consecutive blocks at once (lib/core/rng.c is the reference). The 32x32
 * -> 64-bit products come from vpmuludq on the even and the odd lanes. */
MPX_AVX512 static inline void mulhilo(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
    __m512i pe = _mm512_mul_epu32(a, m);
    __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
    *lo = _mm512_mullo_epi32(a, m);
}

MPX_AVX512 static void philox16(uint64_t seed, uint64_t stream, uint64_t block, uint32_t *out) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u),
                  m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    __m512i base = _mm512_set1_epi32((int)(uint32_t)block);
    __m512i c0 = _mm512_add_epi32(base, iota);
    __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base);
    __m512i c1 = _mm512_set1_epi32((int)(uint32_t)(block >> 32));
    c1 = _mm512_mask_add_epi32(c1, carry, c1, _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32((int)(uint32_t)stream);
    __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo(c0, m0, &hi0, &lo0);
        mulhilo(c2, m1, &hi1, &lo1);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* Transpose 4 x 16 words into 16 blocks of 4 consecutive words. */
    __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    __m512i x0 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0));
    __m512i x1 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2));
    __m512i y0 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(1, 0, 1, 0));
    __m512i y1 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(3, 2, 3, 2));
    _mm512_storeu_si512((void *)(out + 0), _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512((void *)(out + 16), _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_si512((void *)(out + 32), _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512((void *)(out + 48), _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(3, 1, 3, 1)));
}

void mpx_k_rand_avx512(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out,
                       size_t n) {
    mpx_k_rand_blocks(philox16, 16, seed, stream, counter, out, n);
}
