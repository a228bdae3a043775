/* cast.c — mpx_cast: the one FP32 -> storage cast, with optional accounting (docs/design.md §5).
 *
 * The array is cut into fixed blocks of BLOCK elements. For each block: draw the random words
 * when rounding stochastically (element i always gets counter offset + i, so the bits do not
 * depend on how blocks are shared among threads), cast, then — when counting — count x against
 * the codes the cast produced. Threads count into private mpx_cast_stats that are summed at the
 * end; the counts are integers, so the sum does not depend on the order.
 */
#include <string.h>

#include "lib/numerics/fp_bits.h"
#include "lib/numerics/kernels.h"
#include "mpx/rng.h"

enum {
    BLOCK = 2048,     /* elements per work item; buffers for it live on the stack */
    PAR_MIN = 1 << 15 /* below this many elements the cast runs on the calling thread */
};

void mpx_cast_stats_add(mpx_cast_stats *acc, const mpx_cast_stats *s) {
    acc->count += s->count;
    acc->nonzero += s->nonzero;
    acc->flushed += s->flushed;
    acc->below_min += s->below_min;
    acc->subnormal += s->subnormal;
    acc->overflow += s->overflow;
    acc->nonfinite += s->nonfinite;
    for (int k = 0; k < MPX_HIST_BINS; k++) acc->hist[k] += s->hist[k];
}

mpx_cast_spec mpx_cast_plain(mpx_dtype dst) {
    mpx_cast_spec s = {dst, MPX_ROUND_RNE, 1.0f, 0, 0, 0, dst, 0};
    return s;
}

/* Everything a block needs, decided once per call. */
typedef struct {
    const mpx_cast_spec *spec;
    mpx_impl impl;
    int stochastic;           /* rounding is stochastic and dst is a low-precision format */
    uint64_t rng_stream;      /* MPX_RNG_ROUNDING ^ spec->stream */
    mpx_encode16_fn enc_dst;  /* RNE loop into dst (F16/BF16) */
    mpx_encode16_fn enc_stat; /* RNE loop into stats_format (F16/BF16) */
} cast_plan;

/* The formats cast one element at a time (not F16/BF16, which have vector loops). */
static mpx_fp_fmt scalar_fmt(mpx_dtype t) {
    return t == MPX_F8_E4M3 ? MPX_FP_E4M3 : t == MPX_F8_E5M2 ? MPX_FP_E5M2 : MPX_FP_TF32;
}

/* FP32 bits of the smallest positive subnormal of t (for `below_min`). */
static uint32_t min_subnormal_bits(mpx_dtype t) {
    switch (t) {
    case MPX_F16: return 0x33800000u;     /* 2^-24 */
    case MPX_BF16: return 0x00010000u;    /* 2^-133 */
    case MPX_F8_E4M3: return 0x3b000000u; /* 2^-9 */
    case MPX_F8_E5M2: return 0x37800000u; /* 2^-16 */
    case MPX_TF32: return 0x00002000u;    /* 2^-136 */
    default: return 0x00000001u;          /* 2^-149 */
    }
}

/* Counting against an FP8 format or TF32, or against F32 itself, one element at a time. The
 * code of x is recomputed here (with the cast's own random word when rnd != NULL) because the
 * E4M3 saturation flag cannot be read back from the code. */
static void count_generic(mpx_dtype sf, const float *src, float scale, const uint32_t *rnd,
                          size_t m, mpx_cast_stats *st) {
    const uint32_t min_sub = min_subnormal_bits(sf);
    const int is_f32 = sf == MPX_F32; /* counting against FP32 itself: the code is x's bits */
    const mpx_fp_fmt f = scalar_fmt(sf); /* not used when is_f32 */
    const uint32_t mag_mask = is_f32 ? 0x7fffffffu : f.sign_bit - 1u;
    const uint32_t sub_end = is_f32 ? 0x00800000u : 1u << f.man_bits;
    for (size_t j = 0; j < m; j++) {
        float x = scale * src[j];
        uint32_t u = mpx_fp_bits(x), a = u & 0x7fffffffu, code = u;
        int ovf = 0;
        if (!is_f32) code = mpx_fp_encode(f, x, rnd != 0, rnd ? rnd[j] : 0u, &ovf);
        uint32_t mag = code & mag_mask;
        int nz = a != 0, fin = a < 0x7f800000u;
        st->nonzero += nz;
        st->nonfinite += !fin;
        st->below_min += nz && a < min_sub;
        st->flushed += nz && fin && mag == 0;
        st->subnormal += mag != 0 && mag < sub_end;
        st->overflow += ovf;
        st->hist[mpx_fp_hist_bin(u)]++;
    }
    st->count += m;
}

/* Cast elements [i0, i0 + m) (m <= BLOCK); when st != NULL add their counts to *st and their
 * histogram to *h. */
static void cast_block(const cast_plan *p, const float *src, void *dst, size_t i0, size_t m,
                       mpx_cast_stats *st, mpx_k_hist *h) {
    const mpx_cast_spec *s = p->spec;
    const float *x = src + i0;
    uint32_t rnd[BLOCK];
    uint16_t codes[BLOCK];
    if (p->stochastic) mpx_k_rand(p->impl, s->seed, p->rng_stream, s->offset + i0, rnd, m);

    /* The cast. */
    switch (s->dst) {
    case MPX_F32: {
        float *y = (float *)dst + i0; /* may alias x: element j is read before it is written */
        for (size_t j = 0; j < m; j++) y[j] = s->scale * x[j];
        break;
    }
    case MPX_F16:
    case MPX_BF16: {
        uint16_t *y = (uint16_t *)dst + i0;
        if (!p->stochastic)
            p->enc_dst(x, s->scale, y, m);
        else
            mpx_k_sr16(p->impl, s->dst, x, s->scale, rnd, y, m);
        break;
    }
    case MPX_TF32: {
        float *y = (float *)dst + i0; /* may alias x, as for F32 */
        if (!p->stochastic)
            for (size_t j = 0; j < m; j++)
                y[j] = mpx_fp_float(mpx_fp_tf32_rne_bits(mpx_fp_bits(s->scale * x[j])));
        else
            for (size_t j = 0; j < m; j++)
                y[j] = mpx_fp_decode(MPX_FP_TF32,
                                     mpx_fp_encode(MPX_FP_TF32, s->scale * x[j], 1, rnd[j], 0));
        break;
    }
    default: {
        uint8_t *y = (uint8_t *)dst + i0;
        const mpx_fp_fmt f = scalar_fmt(s->dst);
        for (size_t j = 0; j < m; j++)
            y[j] = (uint8_t)mpx_fp_encode(f, s->scale * x[j], p->stochastic,
                                          p->stochastic ? rnd[j] : 0u, 0);
        break;
    }
    }
    if (!st) return;

    /* The counts. An F32 destination already holds x itself (and may be src): count from it. */
    const mpx_dtype sf = s->stats_format;
    const float *cx = s->dst == MPX_F32 ? (const float *)dst + i0 : x;
    const float cscale = s->dst == MPX_F32 ? 1.0f : s->scale;
    if (sf == MPX_F16 || sf == MPX_BF16) {
        const uint16_t *c = codes;
        if (sf == s->dst)
            c = (const uint16_t *)dst + i0;
        else
            p->enc_stat(cx, cscale, codes, m);
        if (p->impl == MPX_IMPL_AVX512)
            mpx_k_count16_avx512(sf, cx, cscale, c, m, st, h);
        else
            mpx_k_count16_c(sf, cx, cscale, c, m, st, h);
    } else {
        count_generic(sf, cx, cscale, sf == s->dst && p->stochastic ? rnd : 0, m, st);
    }
}

void mpx_cast(const mpx_cast_spec *spec, const float *src, void *dst, size_t n) {
    /* Non-floating formats are a caller bug with no status to report it: nothing is written. */
    if (!mpx_format(spec->dst) || (spec->stats && !mpx_format(spec->stats_format))) return;
    cast_plan p;
    p.spec = spec;
    p.impl = mpx_impl_current();
    p.stochastic = spec->rounding == MPX_ROUND_STOCHASTIC && spec->dst != MPX_F32;
    p.rng_stream = (uint64_t)MPX_RNG_ROUNDING ^ spec->stream;
    p.enc_dst =
        spec->dst == MPX_F16 || spec->dst == MPX_BF16 ? mpx_k_encoder16(spec->dst, p.impl) : 0;
    p.enc_stat = spec->stats_format == MPX_F16 || spec->stats_format == MPX_BF16
                     ? mpx_k_encoder16(spec->stats_format, p.impl)
                     : 0;
    const long nblocks = (long)((n + BLOCK - 1) / BLOCK);
    if (n < PAR_MIN) {
        mpx_k_hist h; /* 2.6 KB: zeroed only when counting */
        if (spec->stats) memset(&h, 0, sizeof h);
        for (long b = 0; b < nblocks; b++) {
            size_t i0 = (size_t)b * BLOCK;
            cast_block(&p, src, dst, i0, n - i0 < BLOCK ? n - i0 : BLOCK, spec->stats, &h);
        }
        if (spec->stats) mpx_k_hist_flush(&h, spec->stats);
        return;
    }
#pragma omp parallel
    {
        mpx_cast_stats local;
        mpx_k_hist h;
        mpx_cast_stats *st = spec->stats ? &local : 0;
        if (st) {
            memset(&local, 0, sizeof local);
            memset(&h, 0, sizeof h);
        }
#pragma omp for schedule(static)
        for (long b = 0; b < nblocks; b++) {
            size_t i0 = (size_t)b * BLOCK;
            cast_block(&p, src, dst, i0, n - i0 < BLOCK ? n - i0 : BLOCK, st, &h);
        }
        if (st) {
            mpx_k_hist_flush(&h, st);
#pragma omp critical(mpx_cast_stats_sum)
            mpx_cast_stats_add(spec->stats, st);
        }
    }
}
