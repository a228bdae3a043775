/* graph_whatif.c — "which format would this layer survive in": on statistics steps, every
 * observed activation gradient is also counted as other recipes would cast it (stats.h:
 * whatif), from the same FP32 values the layer's own counts read, without changing training.
 * Per recipe: the format (FP16, BF16, E5M2, E4M3, E2M1), its scale (none; a current per-tensor
 * scale max / amax as Transformer Engine's; MXFP8's and MXFP4's E8M0 blocks along the rows;
 * NVFP4's E4M3 blocks under an FP32 tensor scale, fp4.h) and the one counted
 * cast into FP8/16-bit scratch that is thrown away. The counts are the host's: they go straight
 * into the host's statistics rows, and a GPU's gradient is first downloaded (statistics steps
 * only, so the copy costs little).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "mpx/fp4.h"
#include "mpx/fp8.h"

const char *const mpx_whatif_names[MPX_WHATIF_N] = {
    "fp16", "bf16", "e5m2", "e5m2_current", "e4m3_current", "mxfp8_e5m2", "mxfp4", "nvfp4"};

mpx_status mpx_graph_whatif(mpx_graph *g, unsigned mask) {
    if (mask >> MPX_WHATIF_N)
        return mpx_fail(MPX_ERR_INPUT, "what-if recipes: mask 0x%x names recipes that do not exist",
                        mask);
    g->whatif = mask;
    return MPX_OK;
}

/* Recipe k's count of the n values src * multiplier (host memory) into row; f (n floats) and
 * codes (n 16-bit codes) are host scratch. */
static void count_one(int k, const float *src, size_t n, float multiplier, float *f, void *codes,
                      mpx_layer_stats *row) {
    static const mpx_dtype fmt[MPX_WHATIF_N] = {MPX_F16,     MPX_BF16,    MPX_F8_E5M2, MPX_F8_E5M2,
                                                MPX_F8_E4M3, MPX_F8_E5M2, MPX_F32,     MPX_F32};
    mpx_cast_stats *st = &row->whatif[k];
    if (k == MPX_WHATIF_MXFP8_E5M2 || k == MPX_WHATIF_MXFP4 || k == MPX_WHATIF_NVFP4) {
        for (size_t i = 0; i < n; i++) f[i] = src[i] * multiplier; /* the cast's own product */
        /* blocks of consecutive values: along the channels of an NHWC gradient */
        if (k == MPX_WHATIF_NVFP4) {
            mpx_nvfp4_scales sc;
            mpx_nvfp4_quantize(f, f, n, n, st, &sc);
            row->whatif_scale[k] = sc.tensor_scale > 0 ? 1.0 / sc.tensor_scale : 1.0;
            const double t = sc.tensor_scale; /* NaN for a non-finite gradient */
            row->whatif_scale_lo[k] = sc.max_block > 0 ? 1.0 / (sc.max_block * t) : 1.0 / t;
            row->whatif_scale_hi[k] = sc.min_block > 0 ? 1.0 / (sc.min_block * t)
                                      : sc.max_block > 0 ? INFINITY : 1.0 / t;
            return;
        }
        mpx_mx_scales sc;
        if (k == MPX_WHATIF_MXFP4)
            mpx_mxfp4_quantize(MPX_MX_FLOOR, f, f, n, n, st, &sc);
        else
            mpx_mx_quantize(fmt[k], MPX_MX_FLOOR, f, f, n, n, st, &sc);
        row->whatif_scale[k] = ldexp(1.0, -(sc.min_exp + sc.max_exp) / 2);
        row->whatif_scale_lo[k] = ldexp(1.0, -sc.max_exp);
        row->whatif_scale_hi[k] = ldexp(1.0, -sc.min_exp);
        return;
    }
    float scale = multiplier;
    if (k == MPX_WHATIF_E5M2_CURRENT || k == MPX_WHATIF_E4M3_CURRENT) {
        const float amax = mpx_absmax_f32(src, n) * fabsf(multiplier);
        scale = (float)mpx_fp8_scale(fmt[k], amax, 0, 0, 1.0) * multiplier;
    }
    mpx_cast_spec s = mpx_cast_plain(fmt[k]);
    s.scale = scale;
    s.stats = st;
    mpx_cast(&s, src, codes, n);
    row->whatif_scale[k] = row->whatif_scale_lo[k] = row->whatif_scale_hi[k] = scale / multiplier;
}

mpx_status whatif_count(mpx_graph *g, const gtensor *t, const float *src, double multiplier) {
    if (!g->whatif || !g->pass || !g->pass->bw->stats || t->plan.observer[0] < 0) return MPX_OK;
    mpx_layer_stats *row = &g->pass->bw->stats[t->plan.observer[0]];
    const size_t n = (size_t)t->numel;
    const int on_host = g->be->device == MPX_DEV_CPU;
    /* f: the scaled values of the block recipes, or the downloaded gradient followed by them */
    float *f = malloc((on_host ? n : 2 * n) * sizeof *f);
    uint16_t *codes = malloc(n * sizeof *codes);
    if (!f || !codes) {
        free(f);
        free(codes);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for the what-if counts of '%s'", t->name);
    }
    const float *x = src;
    if (!on_host) {
        g->be->download(g->be, f, src, n * sizeof *f);
        x = f;
    }
    for (int k = 0; k < MPX_WHATIF_N; k++)
        if (g->whatif & (1u << k))
            count_one(k, x, n, (float)multiplier, on_host ? f : f + n, codes, row);
    free(f);
    free(codes);
    for (int o = 1; o < 4 && t->plan.observer[o] >= 0; o++) { /* the loss shares fc's tensor */
        mpx_layer_stats *other = &g->pass->bw->stats[t->plan.observer[o]];
        memcpy(other->whatif, row->whatif, sizeof row->whatif);
        memcpy(other->whatif_scale, row->whatif_scale, sizeof row->whatif_scale);
        memcpy(other->whatif_scale_lo, row->whatif_scale_lo, sizeof row->whatif_scale_lo);
        memcpy(other->whatif_scale_hi, row->whatif_scale_hi, sizeof row->whatif_scale_hi);
    }
    return MPX_OK;
}
