/* augment.c — the per-example augmentation: the draw (a pure function of seed, epoch and
 * example index through stream MPX_RNG_AUGMENT) and its application with normalisation.
 *
 * Counter layout: example i of epoch e draws from counter (e << 40) | (i << 8) onwards, so
 * every example owns 256 counters per epoch (a draw uses at most 2 + 10 * 4 + 1) and
 * epochs < 2^24, examples < 2^32. Draw order: random-resized-crop attempts (area, log aspect,
 * then y, x of an accepted box) or the pad-crop offsets (y, then x); the flip comes last.
 */
#include "data/augment.h"

#include <math.h>
#include <string.h>

#include "mpx/rng.h"

mpx_status mpx_augment_check_config(const mpx_loader_config *cfg, int src_h, int src_w, int c,
                                    int *oh, int *ow) {
    if (cfg->batch_size < 1 || cfg->prefetch < 1 || cfg->threads < 1 || cfg->pad < 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "loader: batch_size %d, prefetch %d, threads %d, pad %d: each must "
                        "be >= 1 (pad >= 0)",
                        cfg->batch_size, cfg->prefetch, cfg->threads, cfg->pad);
    if (c < 1 || c > MPX_DATA_MAX_CHANNELS)
        return mpx_fail(MPX_ERR_INPUT, "loader: %d channels (1..%d supported)", c,
                        MPX_DATA_MAX_CHANNELS);
    for (int ch = 0; ch < c; ch++)
        if (!(cfg->std[ch] > 0) || !isfinite(cfg->mean[ch]))
            return mpx_fail(MPX_ERR_INPUT,
                            "loader: normalisation of channel %d has mean %g, std %g (std "
                            "must be > 0)",
                            ch, cfg->mean[ch], cfg->std[ch]);
    if (cfg->out_h < 0 || cfg->out_w < 0 || (cfg->out_h == 0) != (cfg->out_w == 0))
        return mpx_fail(MPX_ERR_INPUT, "loader: output size %dx%d (give both or neither)",
                        cfg->out_h, cfg->out_w);
    if (cfg->out_h == 0 && src_h == 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "loader: an image folder needs an output size (out_h, out_w)");
    *oh = cfg->out_h ? cfg->out_h : src_h;
    *ow = cfg->out_w ? cfg->out_w : src_w;
    if (cfg->pad > 0 && (src_h != *oh || src_w != *ow))
        return mpx_fail(
            MPX_ERR_INPUT, "loader: pad-crop (pad %d) needs images of the output size %dx%d%s",
            cfg->pad, *oh, *ow, src_h ? "" : " (an image folder's images vary in size)");
    if (cfg->pad > 0 && cfg->random_resized_crop)
        return mpx_fail(MPX_ERR_INPUT, "loader: choose pad-crop or random_resized_crop, not both");
    if (cfg->scale_min < 0 || cfg->scale_min > 1)
        return mpx_fail(MPX_ERR_INPUT, "loader: scale_min %g is outside (0, 1]", cfg->scale_min);
    int big = *oh > *ow ? *oh : *ow;
    if (cfg->resize && cfg->resize < big)
        return mpx_fail(MPX_ERR_INPUT, "loader: resize %d is smaller than the output size %dx%d",
                        cfg->resize, *oh, *ow);
    return MPX_OK;
}

/* torchvision's RandomResizedCrop box: area fraction in [scale_min, 1], aspect in [3/4, 4/3],
 * 10 attempts, then a center crop with the aspect clamped into range. */
static void draw_resized_crop(const mpx_loader_config *cfg, int h, int w, mpx_rng *r,
                              mpx_augment *a) {
    double smin = cfg->scale_min > 0 ? cfg->scale_min : 0.08;
    double area = (double)h * w, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (smin + (1 - smin) * mpx_rng_uniform(r));
        double ratio = exp(lr0 + (lr1 - lr0) * mpx_rng_uniform(r));
        int cw = (int)lround(sqrt(target * ratio)), ch = (int)lround(sqrt(target / ratio));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            a->box_y = mpx_rng_below(r, (uint32_t)(h - ch + 1));
            a->box_x = mpx_rng_below(r, (uint32_t)(w - cw + 1));
            a->box_w = cw;
            a->box_h = ch;
            return;
        }
    }
    double in_ratio = (double)w / h;
    int cw = w, ch = h;
    if (in_ratio < 3.0 / 4.0)
        ch = (int)lround(w / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0)
        cw = (int)lround(h * (4.0 / 3.0));
    a->box_w = cw;
    a->box_h = ch;
    a->box_x = (w - cw) / 2;
    a->box_y = (h - ch) / 2;
}

void mpx_augment_draw(const mpx_loader_config *cfg, int h, int w, int64_t epoch, int64_t example,
                      mpx_augment *a) {
    memset(a, 0, sizeof *a);
    int oh = cfg->out_h ? cfg->out_h : h, ow = cfg->out_w ? cfg->out_w : w;
    mpx_rng r = mpx_rng_make(cfg->seed, MPX_RNG_AUGMENT,
                             ((uint64_t)epoch << 40) | ((uint64_t)example << 8));
    a->crop_x = a->crop_y = cfg->pad; /* identity */
    if (cfg->random_resized_crop) {
        a->resample = 1;
        draw_resized_crop(cfg, h, w, &r, a);
    } else if (h == oh && w == ow) {
        if (cfg->pad > 0) {
            a->crop_y = (int)mpx_rng_below(&r, (uint32_t)(2 * cfg->pad + 1));
            a->crop_x = (int)mpx_rng_below(&r, (uint32_t)(2 * cfg->pad + 1));
        }
    } else {
        /* shorter side to `resize`, then the centred oh x ow window, mapped back to the source */
        int big = oh > ow ? oh : ow;
        double resize = cfg->resize ? cfg->resize : floor(big * 8.0 / 7.0 + 0.5);
        double scale = resize / (h < w ? h : w);
        a->resample = 1;
        a->box_w = ow / scale;
        a->box_h = oh / scale;
        a->box_x = (w - a->box_w) / 2;
        a->box_y = (h - a->box_h) / 2;
    }
    if (cfg->flip) a->flip = (int)(mpx_rng_u32(&r) >> 31);
}

mpx_status mpx_loader_augment(const mpx_loader_config *cfg, int src_h, int src_w, int64_t epoch,
                              int64_t example, mpx_augment *out) {
    int oh, ow;
    memset(out, 0, sizeof *out);
    if (src_h <= 0 || src_w <= 0)
        return mpx_fail(MPX_ERR_INPUT, "loader augmentation: source size %dx%d", src_h, src_w);
    MPX_TRY(mpx_augment_check_config(cfg, src_h, src_w, 1, &oh, &ow));
    if (epoch < 0 || epoch >= ((int64_t)1 << 24) || example < 0 || example >= ((int64_t)1 << 32))
        return mpx_fail(MPX_ERR_INPUT,
                        "loader augmentation: epoch %lld / example %lld out of range",
                        (long long)epoch, (long long)example);
    mpx_augment_draw(cfg, src_h, src_w, epoch, example, out);
    return MPX_OK;
}

mpx_status mpx_augment_apply(const mpx_loader_config *cfg, const mpx_augment *a, const uint8_t *src,
                             int h, int w, int c, int oh, int ow, float *dst,
                             mpx_resample_scratch *s) {
    /* x = (p/255 - mean) / std = p * mul + add */
    float mul[MPX_DATA_MAX_CHANNELS], add[MPX_DATA_MAX_CHANNELS];
    for (int ch = 0; ch < c; ch++) {
        mul[ch] = (float)(1.0 / (255.0 * cfg->std[ch]));
        add[ch] = (float)(-(double)cfg->mean[ch] / cfg->std[ch]);
    }
    if (a->resample) {
        MPX_TRY(mpx_resample_box(src, h, w, c, a->box_x, a->box_y, a->box_w, a->box_h, dst, oh, ow,
                                 a->flip, s));
        size_t n = (size_t)oh * ow;
        for (size_t p = 0; p < n; p++)
            for (int ch = 0; ch < c; ch++) dst[p * c + ch] = dst[p * c + ch] * mul[ch] + add[ch];
        return MPX_OK;
    }
    /* pad-crop: out(y, x) = src(y + crop_y - pad, x' + crop_x - pad), x' = flip ? ow-1-x : x;
     * pixels outside the source are 0 (black) before normalisation, as torchvision pads. */
    for (int y = 0; y < oh; y++) {
        int sy = y + a->crop_y - cfg->pad;
        for (int x = 0; x < ow; x++) {
            int sx = (a->flip ? ow - 1 - x : x) + a->crop_x - cfg->pad;
            float *d = dst + ((size_t)y * ow + x) * c;
            int inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
            const uint8_t *p = inside ? src + ((size_t)sy * w + sx) * c : NULL;
            for (int ch = 0; ch < c; ch++)
                d[ch] = (inside ? (float)p[ch] : 0.0f) * mul[ch] + add[ch];
        }
    }
    return MPX_OK;
}
