/* kernels_c.c — portable C versions of the conversion, stochastic-rounding and counting loops.
 *
 * These define the results: the vector versions must match them bit for bit and count for count.
 */
#include <string.h>

#include "lib/numerics/fp_bits.h"
#include "lib/numerics/kernels.h"
#include "mpx/rng.h"

void mpx_k_encode_f16_c(const float *src, float scale, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)mpx_fp_encode(MPX_FP_F16, scale * src[i], 0, 0, 0);
}

void mpx_k_decode_f16_c(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mpx_fp_decode(MPX_FP_F16, src[i]);
}

void mpx_k_encode_bf16_c(const float *src, float scale, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)mpx_fp_encode(MPX_FP_BF16, scale * src[i], 0, 0, 0);
}

void mpx_k_decode_bf16_c(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mpx_fp_decode(MPX_FP_BF16, src[i]);
}

void mpx_k_sr16_c(mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd, uint16_t *dst,
                  size_t n) {
    if (fmt == MPX_F16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = (uint16_t)mpx_fp_encode(MPX_FP_F16, scale * src[i], 1, rnd[i], 0);
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = (uint16_t)mpx_fp_encode(MPX_FP_BF16, scale * src[i], 1, rnd[i], 0);
    }
}

void mpx_k_hist_flush(mpx_k_hist *h, mpx_cast_stats *st) {
    for (int j = 0; j < MPX_K_SUBHIST; j++)
        for (int k = 0; k < MPX_HIST_BINS; k++) {
            st->hist[k] += h->sub[j][k];
            h->sub[j][k] = 0;
        }
    h->pending = 0;
}

void mpx_k_count16_c(mpx_dtype fmt, const float *src, float scale, const uint16_t *codes, size_t n,
                     mpx_cast_stats *st, mpx_k_hist *h) {
    /* Magnitude-code facts of the format: codes below `sub_end` with a zero exponent field are
     * subnormal; `inf` is +Inf; `min_sub` is the FP32 bit pattern of the smallest subnormal. */
    const uint32_t sub_end = fmt == MPX_F16 ? 0x0400u : 0x0080u;
    const uint32_t inf = fmt == MPX_F16 ? 0x7c00u : 0x7f80u;
    const uint32_t min_sub = fmt == MPX_F16 ? 0x33800000u : 0x00010000u; /* 2^-24, 2^-133 */
    uint64_t nonzero = 0, flushed = 0, below_min = 0, subnormal = 0, overflow = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = mpx_fp_bits(scale * src[i]);
        uint32_t a = u & 0x7fffffffu, mag = codes[i] & 0x7fffu;
        int nz = a != 0, fin = a < 0x7f800000u;
        nonzero += nz;
        nonfinite += !fin;
        below_min += nz && a < min_sub;
        flushed += nz && fin && mag == 0;
        subnormal += mag != 0 && mag < sub_end;
        overflow += fin && mag == inf;
        h->sub[i % MPX_K_SUBHIST][mpx_fp_hist_bin(u)]++;
    }
    h->pending += n;
    if (h->pending >= (1u << 31)) mpx_k_hist_flush(h, st);
    st->count += n;
    st->nonzero += nonzero;
    st->flushed += flushed;
    st->below_min += below_min;
    st->subnormal += subnormal;
    st->overflow += overflow;
    st->nonfinite += nonfinite;
}

void mpx_k_rand_c(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out, size_t n) {
    size_t j = 0;
    while (j < n) {
        uint32_t w[4];
        mpx_philox(seed, stream, counter >> 2, w);
        for (unsigned k = (unsigned)(counter & 3); k < 4 && j < n; k++, j++, counter++)
            out[j] = w[k];
    }
}

void mpx_k_rand_blocks(mpx_philox_blocks_fn f, size_t blocks, uint64_t seed, uint64_t stream,
                       uint64_t counter, uint32_t *out, size_t n) {
    /* Unaligned head (counter not a multiple of 4) and short tail go word by word. */
    size_t head = (size_t)((4 - (counter & 3)) & 3);
    if (head > n) head = n;
    mpx_k_rand_c(seed, stream, counter, out, head);
    size_t j = head;
    counter += head;
    for (; j + 4 * blocks <= n; j += 4 * blocks, counter += 4 * blocks)
        f(seed, stream, counter >> 2, out + j);
    mpx_k_rand_c(seed, stream, counter, out + j, n - j);
}

/* The bits of |v|: sign cleared. */
static inline uint32_t abs_bits(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}

void mpx_k_accumulate_c(float *restrict acc, const float *restrict x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) acc[i] = acc[i] + scale * x[i];
}

uint32_t mpx_k_absmax_bits_c(const float *x, size_t n, uint32_t m) {
    for (size_t i = 0; i < n; i++) {
        uint32_t a = abs_bits(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

void mpx_k_accumulate_absmax_c(float *restrict acc, const float *restrict x, size_t n, float scale,
                               uint32_t *ma, uint32_t *mx) {
    uint32_t a_max = *ma, x_max = *mx;
    for (size_t i = 0; i < n; i++) {
        const float av = acc[i], xv = x[i]; /* each read once: the loop vectorises */
        const uint32_t a = abs_bits(av), b = abs_bits(xv);
        a_max = a > a_max ? a : a_max;
        x_max = b > x_max ? b : x_max;
        acc[i] = av + scale * xv;
    }
    *ma = a_max;
    *mx = x_max;
}

void mpx_k_lane_sums_c(const float *x, size_t n, double *s, float *mn, float *mx) {
    size_t i = 0;
    for (; i + MPX_K_LANES <= n; i += MPX_K_LANES)
        for (int j = 0; j < MPX_K_LANES; j++) { /* independent lanes: the compiler vectorises */
            const float v = x[i + j];
            s[j] += v;
            mn[j] = v < mn[j] ? v : mn[j]; /* comparisons with NaN are false: NaN is ignored */
            mx[j] = v > mx[j] ? v : mx[j];
        }
    for (int j = 0; i < n; i++, j++) {
        const float v = x[i];
        s[j] += v;
        mn[j] = v < mn[j] ? v : mn[j];
        mx[j] = v > mx[j] ? v : mx[j];
    }
}

void mpx_k_lane_sqdev_c(const float *x, size_t n, double mean, double *q) {
    size_t i = 0;
    for (; i + MPX_K_LANES <= n; i += MPX_K_LANES)
        for (int j = 0; j < MPX_K_LANES; j++) {
            const double d = (double)x[i + j] - mean;
            q[j] += d * d;
        }
    for (int j = 0; i < n; i++, j++) {
        const double d = (double)x[i] - mean;
        q[j] += d * d;
    }
}
