/* ssd_match.c — box geometry for SSD targets: IoU, centre/corner forms, offset encoding and
 * decoding with variances, ground-truth validation and the matching of priors to ground truth
 * (best-prior-per-GT bipartite step, then the IoU threshold; see mpx/ssd.h).
 *
 * IoUs are computed in double from the FP32 boxes, and a prior's corners too (cx -+ w / 2 of
 * two floats is exact in double unless w < 2^-28 cx): priors of one shape lying inside one GT then
 * have exactly equal IoUs, so such geometric ties really fall to the lower index as documented,
 * instead of to the rounding of FP32 corners, which differs from cell to cell. The IoU, the
 * encoding and the bipartite step are ssd_box.h's, which the CUDA MultiBox compiles too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpx/ssd.h"
#include "ops_internal.h"
#include "ssd_internal.h"

double mpx_ssd_iou(const float a[4], const float b[4]) {
    const double ad[4] = {a[0], a[1], a[2], a[3]}, bd[4] = {b[0], b[1], b[2], b[3]};
    return ssd_iou_d(ad, bd);
}

static void centre_to_corner(const float c[4], float k[4]) {
    k[0] = c[0] - c[2] / 2, k[1] = c[1] - c[3] / 2;
    k[2] = c[0] + c[2] / 2, k[3] = c[1] + c[3] / 2;
}

void ssd_decode_one(const float prior[4], const float delta[4], float var_xy, float var_wh,
                    float box[4]) {
    float c[4] = {prior[0] + delta[0] * var_xy * prior[2], prior[1] + delta[1] * var_xy * prior[3],
                  prior[2] * expf(delta[2] * var_wh), prior[3] * expf(delta[3] * var_wh)};
    centre_to_corner(c, box);
}

mpx_status ssd_check_gt(const char *op, const float *gt, const int32_t *labels, int64_t g,
                        int64_t image, int64_t n_classes) {
    char at[48];
    for (int64_t j = 0; j < g; j++) {
        if (labels[j] < 0) continue;
        if (image >= 0)
            snprintf(at, sizeof at, "[%lld,%lld]", (long long)image, (long long)j);
        else
            snprintf(at, sizeof at, "[%lld]", (long long)j);
        if (labels[j] == 0 || (n_classes > 0 && labels[j] >= n_classes))
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: gt_labels%s = %d: an object's class must be in 1..%s (0 is "
                            "background, < 0 marks padding)",
                            op, at, (int)labels[j], n_classes > 0 ? "C-1" : "");
        const float *b = gt + 4 * j;
        if (!(isfinite(b[0]) && isfinite(b[1]) && isfinite(b[2]) && isfinite(b[3]) && b[2] > b[0] &&
              b[3] > b[1]))
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: gt_boxes%s = (%g, %g, %g, %g) is not a finite corner-form box "
                            "with x1 > x0 and y1 > y0",
                            op, at, b[0], b[1], b[2], b[3]);
    }
    return MPX_OK;
}

void ssd_match_image(const float *priors, int64_t p, const float *gt, const int32_t *labels,
                     int64_t g, float iou_threshold, ssd_pair *best, ssd_gt_state *gts,
                     int32_t *match) {
    for (int64_t i = 0; i < p; i++) best[i] = (ssd_pair){0, -1};
    /* One pass over (GT, prior): each prior's best GT and each GT's best prior. GTs ascend in
     * the outer loop and priors in the inner one, and only a strictly larger IoU replaces, so
     * ties go to the lower index on both sides. */
    for (int64_t j = 0; j < g; j++) {
        gts[j] = (ssd_gt_state){0, -1, labels[j] < 0};
        if (gts[j].done) continue;
        double box[4];
        ssd_gt_corners(gt, j, box);
        for (int64_t i = 0; i < p; i++) {
            double k[4];
            ssd_prior_corners(priors + 4 * i, k);
            double iou = ssd_iou_d(k, box);
            if (iou > best[i].v) best[i] = (ssd_pair){iou, (int32_t)j};
            if (iou > gts[j].iou) gts[j].iou = iou, gts[j].prior = (int32_t)i;
        }
    }
    ssd_bipartite(priors, p, gt, g, best, gts);
    for (int64_t i = 0; i < p; i++) match[i] = best[i].v >= iou_threshold ? best[i].i : -1;
}

/* priors [P, 4] and a boxes-like tensor [P, 4] or [B, P, 4]; *rows = B * P. */
static mpx_status box_shapes(const char *op, const mpx_tensor *priors, const char *xn,
                             const mpx_tensor *x, const char *yn, const mpx_tensor *y,
                             int64_t *rows) {
    MPX_TRY(ops_expect(op, "priors", priors, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "priors", priors, 1, 4, "(cx, cy, w, h)"));
    MPX_TRY(ops_expect(op, xn, x, MPX_F32, -1));
    if (x->ndim != 2 && x->ndim != 3) {
        char buf[96];
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s, expected [P, 4] or [B, P, 4]", op, xn,
                        mpx_shape_str(x->ndim, x->shape, buf, sizeof buf));
    }
    MPX_TRY(ops_expect_dim(op, xn, x, x->ndim - 2, priors->shape[0], "P, the rows of priors"));
    MPX_TRY(ops_expect_dim(op, xn, x, x->ndim - 1, 4, "4 coordinates"));
    MPX_TRY(ops_expect(op, yn, y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, xn, x, yn, y));
    *rows = mpx_tensor_numel(x) / 4;
    return MPX_OK;
}

static mpx_status check_variances(const char *op, float var_xy, float var_wh) {
    if (var_xy > 0 && var_wh > 0 && isfinite(var_xy) && isfinite(var_wh)) return MPX_OK;
    return mpx_fail(MPX_ERR_INPUT, "%s: variances (%g, %g) must be finite and > 0", op, var_xy,
                    var_wh);
}

mpx_status mpx_ssd_encode(const mpx_tensor *priors, const mpx_tensor *boxes, float var_xy,
                          float var_wh, mpx_tensor *deltas) {
    static const char *op = "ssd encode";
    int64_t rows = 0;
    MPX_TRY(box_shapes(op, priors, "boxes", boxes, "deltas", deltas, &rows));
    MPX_TRY(check_variances(op, var_xy, var_wh));
    const int64_t p = priors->shape[0];
    const float *pr = priors->data, *b = boxes->data;
    float *d = deltas->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *br = b + 4 * r;
        if (!(br[2] > br[0] && br[3] > br[1]))
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: boxes row %lld = (%g, %g, %g, %g) needs x1 > x0 and y1 > y0", op,
                            (long long)r, br[0], br[1], br[2], br[3]);
        ssd_encode_one(pr + 4 * (r % p), br, var_xy, var_wh, d + 4 * r);
    }
    return MPX_OK;
}

mpx_status mpx_ssd_decode(const mpx_tensor *priors, const mpx_tensor *deltas, float var_xy,
                          float var_wh, mpx_tensor *boxes) {
    static const char *op = "ssd decode";
    int64_t rows = 0;
    MPX_TRY(box_shapes(op, priors, "deltas", deltas, "boxes", boxes, &rows));
    MPX_TRY(check_variances(op, var_xy, var_wh));
    const int64_t p = priors->shape[0];
    const float *pr = priors->data, *d = deltas->data;
    float *b = boxes->data;
    for (int64_t r = 0; r < rows; r++)
        ssd_decode_one(pr + 4 * (r % p), d + 4 * r, var_xy, var_wh, b + 4 * r);
    return MPX_OK;
}

mpx_status mpx_ssd_match(const mpx_tensor *priors, const mpx_tensor *gt_boxes,
                         const mpx_tensor *gt_labels, float iou_threshold, mpx_tensor *match) {
    static const char *op = "ssd match";
    MPX_TRY(ops_expect(op, "priors", priors, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "priors", priors, 1, 4, "(cx, cy, w, h)"));
    MPX_TRY(ops_expect(op, "gt_boxes", gt_boxes, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "gt_boxes", gt_boxes, 1, 4, "(x0, y0, x1, y1)"));
    MPX_TRY(ops_expect(op, "gt_labels", gt_labels, MPX_I32, 1));
    MPX_TRY(ops_expect_dim(op, "gt_labels", gt_labels, 0, gt_boxes->shape[0],
                           "G, the rows of gt_boxes"));
    MPX_TRY(ops_expect(op, "match", match, MPX_I32, 1));
    MPX_TRY(ops_expect_dim(op, "match", match, 0, priors->shape[0], "P, the rows of priors"));
    if (!(iou_threshold > 0 && iou_threshold <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: iou_threshold = %g, expected (0, 1]", op,
                        iou_threshold);
    const int64_t p = priors->shape[0], g = gt_boxes->shape[0];
    MPX_TRY(ssd_check_gt(op, gt_boxes->data, gt_labels->data, g, -1, 0));
    ssd_pair *best;
    ssd_gt_state *gts;
    MPX_ALLOC(best, p, "ssd match scratch (priors)");
    gts = mpx_calloc((size_t)g, sizeof *gts);
    if (!gts) {
        free(best);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory allocating ssd match scratch (gt)");
    }
    ssd_match_image(priors->data, p, gt_boxes->data, gt_labels->data, g, iou_threshold, best, gts,
                    match->data);
    free(best), free(gts);
    return MPX_OK;
}
