/* fp8.c — FP8 per-tensor scales and MX block quantization (fp8.h). Host code, exact: scales are
 * computed in double from FP32 amaxes, MX exponents from the amax's binary exponent, and the
 * element casts go through mpx_cast (counted when asked), so the FP8 values are those of the one
 * cast routine.
 */
#include "mpx/fp8.h"

#include <math.h>
#include <string.h>

#include "lib/numerics/fp_bits.h"

/* max(a, b), NaN when either is (a NaN amax makes a non-finite scale: kept or a NaN block). */
static inline float max_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

static double format_max(mpx_dtype fmt) {
    const mpx_format_info *f = mpx_format(fmt);
    return f ? f->max : 1.0;
}

size_t mpx_fp8_saturate(mpx_dtype fmt, float *x, size_t n) {
    if (fmt != MPX_F8_E5M2) return 0;
    const float max = 57344.0f, inf_from = 61440.0f; /* RNE reaches Inf from 61440 on */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a >= inf_from && a < INFINITY) {
            x[i] = copysignf(max, x[i]);
            k++;
        }
    }
    return k;
}

enum { QCHUNK = 4096 };

/* The FP8 value nearest x under RNE, saturating at +-max (x finite): the value mpx_cast and
 * mpx_decode give after mpx_fp8_saturate, by arithmetic instead of codes. Below the smallest
 * normal the grid is the subnormal quantum q, and t + 2^23 - 2^23 rounds t = |x| / q (< 2^23)
 * to an integer to nearest even; above it, the FP32 significand is rounded to `mbits` bits. */
static inline float fp8_nearest(float x, int mbits, float min_normal, float q, float max) {
    const float a = fabsf(x);
    float r;
    if (a < min_normal) {
        r = ((a / q + 8388608.0f) - 8388608.0f) * q;
    } else {
        const int sh = 23 - mbits;
        uint32_t u = mpx_fp_bits(a);
        u += (1u << (sh - 1)) - 1 + ((u >> sh) & 1u);
        r = mpx_fp_float(u & ~((1u << sh) - 1u));
    }
    return copysignf(r < max ? r : max, x);
}

/* mpx_fp8_quantize of m elements without counting (no codes). Non-finite x: E4M3 has no Inf
 * (an infinite x reads back as NaN, as the cast maps it), E5M2 keeps it. */
static void quantize_fast(mpx_dtype fmt, float scale, const float *src, float *dst, size_t m) {
    const int e5 = fmt == MPX_F8_E5M2;
    const int mbits = e5 ? 2 : 3;
    const float min_normal = e5 ? 0x1p-14f : 0x1p-6f, q = e5 ? 0x1p-16f : 0x1p-9f;
    const float max = e5 ? 57344.0f : 448.0f;
    for (size_t i = 0; i < m; i++) {
        const float v = src[i] * scale;
        const float r = fp8_nearest(v, mbits, min_normal, q, max);
        dst[i] = (isfinite(v) ? r : e5 || isnan(v) ? v : NAN) / scale;
    }
}

/* 2^k, exact, for k in E8M0's [-127, 127] (2^-127 is an FP32 subnormal). */
static inline float pow2f(int k) {
    return k >= -126 ? mpx_fp_float((uint32_t)(k + 127) << 23) : mpx_fp_float(1u << (k + 149));
}

/* One chunk of mpx_fp8_quantize, with its own counts. */
static void quantize_chunk(mpx_dtype fmt, float scale, const float *src, float *dst, size_t m,
                           mpx_cast_stats *st) {
    if (!st) {
        quantize_fast(fmt, scale, src, dst, m);
        return;
    }
    float tmp[QCHUNK];
    uint8_t codes[QCHUNK];
    for (size_t i = 0; i < m; i++) tmp[i] = src[i] * scale; /* the cast's own product */
    const size_t clamped = mpx_fp8_saturate(fmt, tmp, m);
    if (st) st->overflow += clamped;
    mpx_cast_spec spec = mpx_cast_plain(fmt);
    spec.stats = st;
    mpx_cast(&spec, tmp, codes, m);
    mpx_decode(fmt, codes, tmp, m);
    for (size_t i = 0; i < m; i++) dst[i] = tmp[i] / scale;
}

void mpx_fp8_quantize(mpx_dtype fmt, float scale, const float *src, float *dst, size_t n,
                      mpx_cast_stats *stats) {
    const long chunks = (long)((n + QCHUNK - 1) / QCHUNK);
#pragma omp parallel if (n >= 4 * QCHUNK)
    {
        mpx_cast_stats local;
        memset(&local, 0, sizeof local);
#pragma omp for schedule(static)
        for (long c = 0; c < chunks; c++) {
            const size_t i0 = (size_t)c * QCHUNK, m = n - i0 < QCHUNK ? n - i0 : QCHUNK;
            quantize_chunk(fmt, scale, src + i0, dst + i0, m, stats ? &local : NULL);
        }
        if (stats)
#pragma omp critical(mpx_fp8_stats)
            mpx_cast_stats_add(stats, &local);
    }
}

double mpx_fp8_scale(mpx_dtype fmt, float amax, int margin, int pow2, double prev) {
    if (!(amax > 0) || !isfinite(amax)) return prev;
    double s = format_max(fmt) / (double)amax / ldexp(1.0, margin);
    if (pow2) {
        int e;
        const double m = frexp(s, &e); /* s = m 2^e, m in [0.5, 1) */
        s = ldexp(1.0, m == 0.5 ? e - 1 : e - 1);
    }
    return s;
}

void mpx_fp8_history_init(mpx_fp8_history *h, int len, int most_recent) {
    memset(h, 0, sizeof *h);
    h->len = len < 1 ? 1 : len > MPX_FP8_HISTORY_MAX ? MPX_FP8_HISTORY_MAX : len;
    h->most_recent = most_recent;
    h->scale = 1.0;
}

void mpx_fp8_history_push(mpx_fp8_history *h, mpx_dtype fmt, float amax, int margin, int pow2) {
    h->amax[h->pos] = amax;
    h->pos = (h->pos + 1) % h->len;
    if (h->filled < h->len) h->filled++;
    float a = amax;
    if (!h->most_recent)
        for (int i = 0; i < h->filled; i++) a = max_nan(a, h->amax[i]);
    h->scale = mpx_fp8_scale(fmt, a, margin, pow2, h->scale);
}

int mpx_mx_exponent(mpx_dtype fmt, mpx_mx_rule rule, float amax) {
    return mpx_mx_exponent_of(format_max(fmt), rule, amax);
}

int mpx_mx_exponent_of(double max, mpx_mx_rule rule, float amax) {
    return mpx_fp_mx_exponent(max, rule == MPX_MX_CEIL, amax, MPX_MX_NAN_EXP);
}

/* The shared exponent of a block whose largest |x| has the bits abits (NaN above Inf), noted
 * into s. */
static int block_exponent(mpx_dtype fmt, mpx_mx_rule rule, uint32_t abits, mpx_mx_scales *s) {
    const float amax = mpx_fp_float(abits);
    const int e = mpx_mx_exponent(fmt, rule, isnan(amax) ? INFINITY : amax);
    s->blocks++;
    if (e == MPX_MX_NAN_EXP) {
        s->nan_blocks++;
    } else if (amax == 0) {
        s->zero_blocks++;
    } else {
        if (e < s->min_exp) s->min_exp = e;
        if (e > s->max_exp) s->max_exp = e;
    }
    return e;
}

/* What a block's values are multiplied by before the cast (exact), and after it. */
static inline float block_down(int e) { return e == MPX_MX_NAN_EXP ? 1.0f : pow2f(-e); }
static inline float block_up(float v, int e) { return e == MPX_MX_NAN_EXP ? NAN : v * pow2f(e); }

/* len <= QCHUNK values already divided by their blocks' scales, cast into fmt in place. */
static void cast_scaled(mpx_dtype fmt, float *tmp, size_t len, mpx_cast_stats *stats) {
    if (!stats) {
        quantize_fast(fmt, 1.0f, tmp, tmp, len);
        return;
    }
    uint8_t codes[QCHUNK];
    stats->overflow += mpx_fp8_saturate(fmt, tmp, len);
    mpx_cast_spec spec = mpx_cast_plain(fmt);
    spec.stats = stats;
    mpx_cast(&spec, tmp, codes, len);
    mpx_decode(fmt, codes, tmp, len);
}

/* One run of len <= QCHUNK elements of a row (its blocks start at src), with its own counts. */
static void mx_chunk(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst, size_t len,
                     mpx_cast_stats *stats, mpx_mx_scales *s) {
    float tmp[QCHUNK];
    int exps[QCHUNK / MPX_MX_BLOCK + 1];
    int nb = 0;
    for (size_t b0 = 0; b0 < len; b0 += MPX_MX_BLOCK, nb++) {
        const size_t b1 = b0 + MPX_MX_BLOCK < len ? b0 + MPX_MX_BLOCK : len;
        uint32_t abits = 0; /* max |x| on the bits: ordered as the values, any NaN above Inf */
        for (size_t i = b0; i < b1; i++) {
            const uint32_t a = mpx_fp_bits(src[i]) & 0x7fffffffu;
            abits = a > abits ? a : abits;
        }
        const int e = exps[nb] = block_exponent(fmt, rule, abits, s);
        const float down = block_down(e);
        for (size_t i = b0; i < b1; i++) tmp[i] = src[i] * down; /* exact */
    }
    cast_scaled(fmt, tmp, len, stats);
    nb = 0;
    for (size_t b0 = 0; b0 < len; b0 += MPX_MX_BLOCK, nb++) {
        const size_t b1 = b0 + MPX_MX_BLOCK < len ? b0 + MPX_MX_BLOCK : len;
        for (size_t i = b0; i < b1; i++) dst[i] = block_up(tmp[i], exps[nb]);
    }
}

enum { TILE_W = QCHUNK / MPX_MX_BLOCK }; /* columns of a column-block tile */

/* One tile of mpx_mx_quantize_cols: h <= 32 rows (one block down each column) of w <= TILE_W
 * columns, rows `stride` apart, with its own counts. */
static void mx_tile(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst, size_t h,
                    size_t w, size_t stride, mpx_cast_stats *stats, mpx_mx_scales *s) {
    float tmp[QCHUNK], down[TILE_W], up[TILE_W];
    uint32_t abits[TILE_W] = {0};
    int nan_block[TILE_W];
    for (size_t r = 0; r < h; r++)
        for (size_t c = 0; c < w; c++) {
            const uint32_t a = mpx_fp_bits(src[r * stride + c]) & 0x7fffffffu;
            abits[c] = a > abits[c] ? a : abits[c];
        }
    for (size_t c = 0; c < w; c++) {
        const int e = block_exponent(fmt, rule, abits[c], s);
        nan_block[c] = e == MPX_MX_NAN_EXP;
        down[c] = block_down(e);
        up[c] = block_up(1.0f, e);
    }
    for (size_t r = 0; r < h; r++)
        for (size_t c = 0; c < w; c++) tmp[r * w + c] = src[r * stride + c] * down[c];
    cast_scaled(fmt, tmp, h * w, stats);
    for (size_t r = 0; r < h; r++) /* block_up, its 2^e taken once per column */
        for (size_t c = 0; c < w; c++)
            dst[r * stride + c] = nan_block[c] ? NAN : tmp[r * w + c] * up[c];
}

/* Per-thread counts and scales merged into the totals. */
static void merge_scales(mpx_mx_scales *total, const mpx_mx_scales *s) {
    total->blocks += s->blocks;
    total->zero_blocks += s->zero_blocks;
    total->nan_blocks += s->nan_blocks;
    if (s->min_exp < total->min_exp) total->min_exp = s->min_exp;
    if (s->max_exp > total->max_exp) total->max_exp = s->max_exp;
}

void mpx_mx_quantize_cols(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst,
                          size_t batches, size_t rows, size_t cols, mpx_cast_stats *stats,
                          mpx_mx_scales *sc) {
    const size_t rb = (rows + MPX_MX_BLOCK - 1) / MPX_MX_BLOCK, cb = (cols + TILE_W - 1) / TILE_W;
    const long items = (long)(batches * rb * cb);
    mpx_mx_scales total = {0, 0, 0, 127, -127};
#pragma omp parallel if (batches * rows * cols >= 4 * QCHUNK)
    {
        mpx_cast_stats local;
        memset(&local, 0, sizeof local);
        mpx_mx_scales s = {0, 0, 0, 127, -127};
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            const size_t c0 = (size_t)it % cb * TILE_W, r0 = (size_t)it / cb % rb * MPX_MX_BLOCK;
            const size_t off = (size_t)it / (cb * rb) * rows * cols + r0 * cols + c0;
            const size_t h = rows - r0 < MPX_MX_BLOCK ? rows - r0 : MPX_MX_BLOCK;
            const size_t w = cols - c0 < TILE_W ? cols - c0 : TILE_W;
            mx_tile(fmt, rule, src + off, dst + off, h, w, cols, stats ? &local : NULL, &s);
        }
#pragma omp critical(mpx_mx_stats)
        {
            if (stats) mpx_cast_stats_add(stats, &local);
            merge_scales(&total, &s);
        }
    }
    if (total.min_exp > total.max_exp) total.min_exp = total.max_exp = 0;
    if (sc) *sc = total;
}

void mpx_mx_quantize(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst, size_t n,
                     size_t row, mpx_cast_stats *stats, mpx_mx_scales *sc) {
    if (row == 0 || row > n) row = n;
    const size_t per_row = (row + QCHUNK - 1) / QCHUNK, rows = n ? (n + row - 1) / row : 0;
    const long items = (long)(rows * per_row);
    mpx_mx_scales total = {0, 0, 0, 127, -127};
#pragma omp parallel if (n >= 4 * QCHUNK)
    {
        mpx_cast_stats local;
        memset(&local, 0, sizeof local);
        mpx_mx_scales s = {0, 0, 0, 127, -127};
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            const size_t r0 = (size_t)it / per_row * row, c0 = r0 + (size_t)it % per_row * QCHUNK;
            const size_t r1 = r0 + row < n ? r0 + row : n;
            if (c0 >= r1) continue;
            const size_t len = r1 - c0 < QCHUNK ? r1 - c0 : QCHUNK;
            mx_chunk(fmt, rule, src + c0, dst + c0, len, stats ? &local : NULL, &s);
        }
#pragma omp critical(mpx_mx_stats)
        {
            if (stats) mpx_cast_stats_add(stats, &local);
            merge_scales(&total, &s);
        }
    }
    if (total.min_exp > total.max_exp) total.min_exp = total.max_exp = 0;
    if (sc) *sc = total;
}
