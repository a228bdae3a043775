/* det_augment.c — SSD's training augmentation (Liu et al. 2016, as in ssd.pytorch's
 * augmentations.py) with exact box transforms: photometric jitter, expand (zoom out), the
 * IoU-constrained random crop, horizontal flip, resize to the network size.
 *
 * The draw is a pure function of (seed, epoch, example, the example's boxes): stream
 * MPX_RNG_AUGMENT from counter (epoch << 40) | (example << 12), so each example owns 4096
 * counters per epoch (a draw uses at most 9 + 4 + 12 * (1 + 50 * 4) + 1 = 2426, plus the
 * rare rejections of mpx_rng_below); epochs < 2^24, examples < 2^28. Only enabled steps draw,
 * in the order photometric, expand, crop, flip.
 *
 * All geometry is integer in the source's pixel-edge coordinates (the canvas size, the
 * source's offset on it, the crop rectangle), so boxes move exactly: a box edge x (in source
 * pixels) lands at (x + left - crop_x) / crop_w in the output, mirrored when flipped.
 */
#include "data/det_augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/rng.h"

enum { CROP_TRIALS = 50, MODE_DRAWS = 12 };
static const float crop_min_iou[7] = {-1, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, 0}; /* -1 none, 0 any */

void mpx_det_aug_scratch_free(mpx_det_aug_scratch *s) {
    free(s->jitter);
    free(s->cut);
    mpx_resample_scratch_free(&s->rs);
    memset(s, 0, sizeof *s);
}

mpx_status mpx_det_augment_check_config(const mpx_det_loader_config *cfg, int src_size,
                                        int *out_size) {
    if (cfg->batch_size < 1 || cfg->prefetch < 1 || cfg->threads < 1)
        return mpx_fail(MPX_ERR_INPUT,
                        "detection loader: batch_size %d, prefetch %d, threads %d (each >= 1)",
                        cfg->batch_size, cfg->prefetch, cfg->threads);
    if (src_size < 1 || cfg->size < 0 || cfg->size > 4096)
        return mpx_fail(MPX_ERR_INPUT, "detection loader: source size %d, output size %d (0..4096)",
                        src_size, cfg->size);
    if (cfg->expand && (!(cfg->expand_max >= 1) || !(cfg->expand_max <= 16)))
        return mpx_fail(MPX_ERR_INPUT, "detection loader: expand_max %g (1..16)", cfg->expand_max);
    for (int ch = 0; ch < 3; ch++)
        if (!(cfg->std[ch] > 0) || !isfinite(cfg->mean[ch]) || !isfinite(cfg->std[ch]))
            return mpx_fail(MPX_ERR_INPUT,
                            "detection loader: normalisation of channel %d has mean %g, std %g "
                            "(std must be > 0)",
                            ch, cfg->mean[ch], cfg->std[ch]);
    *out_size = cfg->size ? cfg->size : src_size;
    return MPX_OK;
}

static int coin(mpx_rng *r) { return (int)(mpx_rng_u32(r) >> 31); }

/* The crop trials of one mode on a W x H canvas; boxes in canvas pixels. 1 when accepted. */
static int try_crop(mpx_rng *r, int W, int H, float min_iou, const double (*bx)[4], int count,
                    mpx_det_augment *a) {
    for (int t = 0; t < CROP_TRIALS; t++) {
        int cw = (int)(W * (0.3 + 0.7 * mpx_rng_uniform(r)));
        int ch = (int)(H * (0.3 + 0.7 * mpx_rng_uniform(r)));
        if (cw < 1) cw = 1;
        if (ch < 1) ch = 1;
        if (2 * ch < cw || ch > 2 * cw) continue; /* aspect h / w in [1/2, 2] */
        int cx = (int)mpx_rng_below(r, (uint32_t)(W - cw + 1));
        int cy = (int)mpx_rng_below(r, (uint32_t)(H - ch + 1));
        mpx_det_box crop = {(float)cx, (float)cy, (float)(cx + cw), (float)(cy + ch), 0, 0};
        double best = 0;
        int centred = 0;
        for (int k = 0; k < count; k++) {
            mpx_det_box b = {
                (float)bx[k][0], (float)bx[k][1], (float)bx[k][2], (float)bx[k][3], 0, 0};
            double iou = mpx_det_iou(&crop, &b);
            best = iou > best ? iou : best;
            double mx = 0.5 * (bx[k][0] + bx[k][2]), my = 0.5 * (bx[k][1] + bx[k][3]);
            centred |= mx > cx && mx < cx + cw && my > cy && my < cy + ch;
        }
        if (min_iou > 0 && best < min_iou) continue;
        if (count > 0 && !centred) continue;
        a->min_iou = min_iou;
        a->crop_x = cx;
        a->crop_y = cy;
        a->crop_w = cw;
        a->crop_h = ch;
        return 1;
    }
    return 0;
}

void mpx_det_augment_draw_unchecked(const mpx_det_loader_config *cfg, int S,
                                    const mpx_det_box *boxes, int count, int64_t epoch,
                                    int64_t example, mpx_det_augment *a) {
    memset(a, 0, sizeof *a);
    a->contrast = a->saturation = 1;
    a->canvas_w = a->canvas_h = a->crop_w = a->crop_h = S;
    a->min_iou = -1;
    mpx_rng r = mpx_rng_make(cfg->seed, MPX_RNG_AUGMENT,
                             ((uint64_t)epoch << 40) | ((uint64_t)example << 12));
    if (cfg->photometric) {
        if (coin(&r)) a->brightness = -32 + 64 * mpx_rng_uniform(&r);
        a->contrast_last = coin(&r);
        if (coin(&r)) a->contrast = 0.5f + mpx_rng_uniform(&r);
        if (coin(&r)) a->saturation = 0.5f + mpx_rng_uniform(&r);
        if (coin(&r)) a->hue = -18 + 36 * mpx_rng_uniform(&r);
    }
    if (cfg->expand && coin(&r)) {
        double ratio = 1 + (cfg->expand_max - 1) * mpx_rng_uniform(&r);
        a->canvas_w = a->canvas_h = a->crop_w = a->crop_h = (int)(S * ratio);
        a->left = (int)mpx_rng_below(&r, (uint32_t)(a->canvas_w - S + 1));
        a->top = (int)mpx_rng_below(&r, (uint32_t)(a->canvas_h - S + 1));
    }
    if (cfg->crop) {
        /* As ssd.pytorch: draw a mode; "none" keeps the canvas, a mode whose trials all fail
         * is replaced by a new draw (at most MODE_DRAWS, then no crop). */
        double bx[MPX_DET_MAX_BOXES][4];
        for (int k = 0; k < count; k++) {
            bx[k][0] = (double)boxes[k].xmin * S + a->left;
            bx[k][1] = (double)boxes[k].ymin * S + a->top;
            bx[k][2] = (double)boxes[k].xmax * S + a->left;
            bx[k][3] = (double)boxes[k].ymax * S + a->top;
        }
        for (int d = 0; d < MODE_DRAWS; d++) {
            float min_iou = crop_min_iou[mpx_rng_below(&r, 7)];
            if (min_iou < 0 ||
                try_crop(&r, a->canvas_w, a->canvas_h, min_iou, (const double(*)[4])bx, count, a))
                break;
        }
    }
    if (cfg->flip) a->flip = coin(&r);
}

mpx_status mpx_det_augment_draw(const mpx_det_loader_config *cfg, int src_size,
                                const mpx_det_box *boxes, int count, int64_t epoch, int64_t example,
                                mpx_det_augment *out) {
    int out_size;
    memset(out, 0, sizeof *out);
    MPX_TRY(mpx_det_augment_check_config(cfg, src_size, &out_size));
    if (count < 0 || count > MPX_DET_MAX_BOXES)
        return mpx_fail(MPX_ERR_INPUT, "detection augmentation: %d boxes (0..%d)", count,
                        MPX_DET_MAX_BOXES);
    if (epoch < 0 || epoch >= ((int64_t)1 << 24) || example < 0 || example >= ((int64_t)1 << 28))
        return mpx_fail(MPX_ERR_INPUT,
                        "detection augmentation: epoch %lld / example %lld outside [0, 2^24) / "
                        "[0, 2^28)",
                        (long long)epoch, (long long)example);
    mpx_det_augment_draw_unchecked(cfg, src_size, boxes, count, epoch, example, out);
    return MPX_OK;
}

static uint8_t to_byte(double v) {
    v += 0.5;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* SSD's photometric distortion on RGB values 0..255, rounded back to bytes. Saturation blends
 * with the luma; hue rotates the chroma plane of YIQ (NTSC matrices). */
static void photometric(const mpx_det_augment *a, const uint8_t *src, size_t pixels, uint8_t *dst) {
    double th = a->hue * M_PI / 180, c = cos(th), s = sin(th);
    for (size_t p = 0; p < pixels; p++) {
        double v[3];
        for (int ch = 0; ch < 3; ch++) {
            v[ch] = src[3 * p + ch] + (double)a->brightness;
            if (!a->contrast_last) v[ch] *= a->contrast;
        }
        if (a->saturation != 1) {
            double gray = 0.299 * v[0] + 0.587 * v[1] + 0.114 * v[2];
            for (int ch = 0; ch < 3; ch++) v[ch] = gray + a->saturation * (v[ch] - gray);
        }
        if (a->hue != 0) {
            double y = 0.299 * v[0] + 0.587 * v[1] + 0.114 * v[2];
            double i = 0.596 * v[0] - 0.274 * v[1] - 0.322 * v[2];
            double q = 0.211 * v[0] - 0.523 * v[1] + 0.312 * v[2];
            double i2 = c * i - s * q, q2 = s * i + c * q;
            v[0] = y + 0.956 * i2 + 0.621 * q2;
            v[1] = y - 0.272 * i2 - 0.647 * q2;
            v[2] = y - 1.106 * i2 + 1.703 * q2;
        }
        for (int ch = 0; ch < 3; ch++)
            dst[3 * p + ch] = to_byte(a->contrast_last ? v[ch] * a->contrast : v[ch]);
    }
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    uint8_t *p = realloc(*buf, need);
    if (!p) return 0;
    *buf = p;
    *cap = need;
    return 1;
}

mpx_status mpx_det_augment_apply_with(const mpx_det_loader_config *cfg, const mpx_det_augment *a,
                                      const uint8_t *src, int S, const mpx_det_box *boxes,
                                      int count, int N, float *dst, mpx_det_box *out_boxes,
                                      int *out_count, mpx_det_aug_scratch *s) {
    *out_count = 0;
    const uint8_t *img = src;
    if (a->brightness != 0 || a->contrast != 1 || a->saturation != 1 || a->hue != 0) {
        if (!grow(&s->jitter, &s->jitter_cap, (size_t)S * S * 3))
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for photometric jitter (%dx%d)", S, S);
        photometric(a, src, (size_t)S * S, s->jitter);
        img = s->jitter;
    }
    int whole = a->canvas_w == S && a->canvas_h == S && a->crop_x == 0 && a->crop_y == 0 &&
                a->crop_w == S && a->crop_h == S;
    if (whole) {
        MPX_TRY(mpx_resample_box(img, S, S, 3, 0, 0, S, S, dst, N, N, a->flip, &s->rs));
    } else {
        /* cut the crop rectangle out of the canvas (mean colour around the placed source) */
        int cw = a->crop_w, ch = a->crop_h;
        if (!grow(&s->cut, &s->cut_cap, (size_t)cw * ch * 3))
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for a %dx%d crop", cw, ch);
        uint8_t fill[3];
        for (int c = 0; c < 3; c++) fill[c] = to_byte(255.0 * cfg->mean[c]);
        for (int y = 0; y < ch; y++) {
            int sy = y + a->crop_y - a->top;
            uint8_t *row = s->cut + (size_t)y * cw * 3;
            for (int x = 0; x < cw; x++) {
                int sx = x + a->crop_x - a->left;
                const uint8_t *p = (sy >= 0 && sy < S && sx >= 0 && sx < S)
                                       ? img + ((size_t)sy * S + sx) * 3
                                       : fill;
                row[3 * x] = p[0];
                row[3 * x + 1] = p[1];
                row[3 * x + 2] = p[2];
            }
        }
        MPX_TRY(mpx_resample_box(s->cut, ch, cw, 3, 0, 0, cw, ch, dst, N, N, a->flip, &s->rs));
    }
    float mul[3], add[3];
    for (int c = 0; c < 3; c++) {
        mul[c] = (float)(1.0 / (255.0 * cfg->std[c]));
        add[c] = (float)(-(double)cfg->mean[c] / cfg->std[c]);
    }
    for (size_t p = 0; p < (size_t)N * N; p++)
        for (int c = 0; c < 3; c++) dst[3 * p + c] = dst[3 * p + c] * mul[c] + add[c];
    /* boxes: source pixels -> canvas -> crop (centre strictly inside, clipped) -> [0,1] -> flip */
    int n = 0;
    for (int k = 0; k < count; k++) {
        double x0 = (double)boxes[k].xmin * S + a->left - a->crop_x;
        double y0 = (double)boxes[k].ymin * S + a->top - a->crop_y;
        double x1 = (double)boxes[k].xmax * S + a->left - a->crop_x;
        double y1 = (double)boxes[k].ymax * S + a->top - a->crop_y;
        double mx = 0.5 * (x0 + x1), my = 0.5 * (y0 + y1);
        if (!(mx > 0 && mx < a->crop_w && my > 0 && my < a->crop_h)) continue;
        x0 = fmax(x0, 0) / a->crop_w;
        x1 = fmin(x1, a->crop_w) / a->crop_w;
        y0 = fmax(y0, 0) / a->crop_h;
        y1 = fmin(y1, a->crop_h) / a->crop_h;
        if (a->flip) {
            double t = 1 - x1;
            x1 = 1 - x0;
            x0 = t;
        }
        out_boxes[n] = boxes[k];
        out_boxes[n].xmin = (float)x0;
        out_boxes[n].ymin = (float)y0;
        out_boxes[n].xmax = (float)x1;
        out_boxes[n].ymax = (float)y1;
        n++;
    }
    *out_count = n;
    return MPX_OK;
}

mpx_status mpx_det_augment_apply(const mpx_det_loader_config *cfg, const mpx_det_augment *a,
                                 const uint8_t *src, int src_size, const mpx_det_box *boxes,
                                 int count, float *dst, mpx_det_box *out_boxes, int *out_count) {
    int N = 0;
    *out_count = 0;
    MPX_TRY(mpx_det_augment_check_config(cfg, src_size, &N));
    if (count < 0 || count > MPX_DET_MAX_BOXES)
        return mpx_fail(MPX_ERR_INPUT, "detection augmentation: %d boxes (0..%d)", count,
                        MPX_DET_MAX_BOXES);
    if (a->canvas_w < src_size || a->canvas_h < src_size || a->left < 0 || a->top < 0 ||
        a->left + src_size > a->canvas_w || a->top + src_size > a->canvas_h || a->crop_w < 1 ||
        a->crop_h < 1 || a->crop_x < 0 || a->crop_y < 0 || a->crop_x + a->crop_w > a->canvas_w ||
        a->crop_y + a->crop_h > a->canvas_h)
        return mpx_fail(MPX_ERR_INPUT,
                        "detection augmentation: canvas %dx%d with the %dx%d source at (%d, %d) "
                        "and crop (%d, %d, %d, %d) do not nest",
                        a->canvas_w, a->canvas_h, src_size, src_size, a->left, a->top, a->crop_x,
                        a->crop_y, a->crop_w, a->crop_h);
    mpx_det_aug_scratch s = {0};
    mpx_status st = mpx_det_augment_apply_with(cfg, a, src, src_size, boxes, count, N, dst,
                                               out_boxes, out_count, &s);
    mpx_det_aug_scratch_free(&s);
    return st;
}
