/* ssd_box.h — the SSD box arithmetic that the CPU ops (lib/ops/ssd_*.c, multibox.c) and the CUDA
 * MultiBox kernels (lib/cuda/multibox.cu) share as source, so both backends match priors to
 * ground truth, encode offsets and mine hard negatives with the same operations in the same
 * order: IoU in double, offset encoding, smooth-L1, the ranking order and its top-k heap, and the
 * bipartite step of the matching.
 *
 * Plain +, -, *, / only (IEEE on both: the CUDA file is compiled with -fmad=false, so nothing is
 * contracted into an FMA the CPU does not do), and the transcendentals in double rounded once to
 * FP32: glibc's and CUDA's double exp/log differ by at most an ulp of double, which reaches an
 * FP32 result only when it lies within that ulp of an FP32 rounding boundary (about 2^-29 of the
 * values), where their single-precision expf/logf differ by up to 2 ulps of FP32 much more often.
 */
#ifndef MPX_SSD_BOX_H
#define MPX_SSD_BOX_H

#include <math.h>
#include <stdint.h>

#include "lib/numerics/fp_bits.h" /* MPX_HD */

/* A value with the index it belongs to: best IoU + GT index while matching, background loss +
 * prior index while mining, score + candidate index in NMS. */
typedef struct {
    double v;
    int32_t i;
} ssd_pair;

/* Per-GT state of the bipartite matching step. */
typedef struct {
    double iou;    /* IoU with `prior` */
    int32_t prior; /* best free prior, -1 when none overlaps */
    int32_t done;  /* matched (or out of candidates) */
} ssd_gt_state;

/* One image's sums in the MultiBox forward: CE over counted priors and smooth-L1 over positives,
 * in prior order (then the kept negatives), and the positives. */
typedef struct {
    double conf, loc;
    int64_t npos;
} ssd_image_sums;

/* A prior taken by the bipartite step is marked with this "IoU" (> any real IoU), so step 2
 * leaves it alone and the threshold test accepts it (as SSD implementations fill 2). */
#define SSD_FORCED 2.0

/* a ranks before b: larger v, ties by lower i. */
MPX_HD int ssd_pair_before(const ssd_pair *a, const ssd_pair *b) {
    if (a->v != b->v) return a->v > b->v;
    return a->i < b->i;
}

/* FP32 exp and log through double (see the header comment for why). */
MPX_HD float ssd_expf(float x) { return (float)exp((double)x); }
MPX_HD float ssd_logf(float x) { return (float)log((double)x); }

/* IoU of corner boxes in double. */
MPX_HD double ssd_iou_d(const double a[4], const double b[4]) {
    double iw = fmin(a[2], b[2]) - fmax(a[0], b[0]);
    double ih = fmin(a[3], b[3]) - fmax(a[1], b[1]);
    if (!(iw > 0 && ih > 0)) return 0;
    double inter = iw * ih;
    double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    return uni > 0 ? inter / uni : 0;
}

/* The double corners of a centre-form prior (cx -+ w / 2 of two floats is exact in double unless
 * w < 2^-28 cx): priors of one shape lying inside one GT then have exactly equal IoUs. */
MPX_HD void ssd_prior_corners(const float c[4], double k[4]) {
    k[0] = c[0] - c[2] / 2.0, k[1] = c[1] - c[3] / 2.0;
    k[2] = c[0] + c[2] / 2.0, k[3] = c[1] + c[3] / 2.0;
}

/* Offsets of corner box `box` from centre-form `prior`, with the variances. */
MPX_HD void ssd_encode_one(const float prior[4], const float box[4], float var_xy, float var_wh,
                           float out[4]) {
    float cx = (box[0] + box[2]) / 2, cy = (box[1] + box[3]) / 2;
    float w = box[2] - box[0], h = box[3] - box[1];
    out[0] = (cx - prior[0]) / (var_xy * prior[2]);
    out[1] = (cy - prior[1]) / (var_xy * prior[3]);
    out[2] = ssd_logf(w / prior[2]) / var_wh;
    out[3] = ssd_logf(h / prior[3]) / var_wh;
}

MPX_HD double ssd_smooth_l1(double d) {
    double a = fabs(d);
    return a < 1 ? 0.5 * d * d : a - 0.5;
}

/* Restores the heap order below h[i]: every parent ranks after its children, so h[0] is the
 * lowest-ranked element kept (the one a better candidate replaces). */
MPX_HD void ssd_sift_down(ssd_pair *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ssd_pair_before(&h[w], &h[l])) w = l;
        if (r < n && ssd_pair_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        ssd_pair t = h[i];
        h[i] = h[w], h[w] = t;
        i = w;
    }
}

/* Moves the k best-ranked of c[0..n) into c[0..k), in heap order (not sorted); O(n log k). */
MPX_HD void ssd_keep_best(ssd_pair *c, int64_t n, int64_t k) {
    if (k <= 0 || k >= n) return;
    for (int64_t i = k / 2 - 1; i >= 0; i--) ssd_sift_down(c, k, i);
    for (int64_t i = k; i < n; i++)
        if (ssd_pair_before(&c[i], &c[0])) {
            c[0] = c[i];
            ssd_sift_down(c, k, 0);
        }
}

/* GT j's corners in double. */
MPX_HD void ssd_gt_corners(const float *gt, int64_t j, double box[4]) {
    for (int k = 0; k < 4; k++) box[k] = gt[4 * j + k];
}

/* Best free prior (not yet forced) for corner box `box`: IoU > 0 required, ties to the lower
 * index. */
MPX_HD void ssd_best_free_prior(const float *priors, int64_t p, const double box[4],
                                const ssd_pair *best, ssd_gt_state *st) {
    st->iou = 0, st->prior = -1;
    for (int64_t i = 0; i < p; i++) {
        if (best[i].v >= SSD_FORCED) continue;
        double k[4];
        ssd_prior_corners(priors + 4 * i, k);
        double iou = ssd_iou_d(k, box);
        if (iou > st->iou) st->iou = iou, st->prior = (int32_t)i;
    }
}

/* The bipartite step of one image's matching, after the pass that filled best[i] (each prior's
 * best GT) and gts[j] (each GT's best prior): the highest-IoU (GT, free prior) pair first, its
 * prior marked SSD_FORCED. A GT whose best prior was just taken looks for its best free one
 * again (rare: only on collisions). Ties go to the lower GT index. */
MPX_HD void ssd_bipartite(const float *priors, int64_t p, const float *gt, int64_t g,
                          ssd_pair *best, ssd_gt_state *gts) {
    for (;;) {
        int64_t pick = -1;
        for (int64_t j = 0; j < g; j++)
            if (!gts[j].done && gts[j].iou > 0 && (pick < 0 || gts[j].iou > gts[pick].iou))
                pick = j;
        if (pick < 0) return;
        int32_t q = gts[pick].prior;
        best[q].v = SSD_FORCED;
        best[q].i = (int32_t)pick;
        gts[pick].done = 1;
        for (int64_t j = 0; j < g; j++)
            if (!gts[j].done && gts[j].prior == q) {
                double box[4];
                ssd_gt_corners(gt, j, box);
                ssd_best_free_prior(priors, p, box, best, &gts[j]);
            }
    }
}

#endif
