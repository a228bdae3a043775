/* multibox.c — the SSD MultiBox loss, forward and backward, FP32 with double sums.
 *
 * Forward per image b (images are independent and run in parallel):
 *   match priors to the image's GT                      -> target[b, p] = class or -1,
 *   encode the matched GT of each positive             -> loc_target[b, p, 4],
 *   softmax every prior's logits                        -> probs[b, p, C], log-sum-exp,
 *   CE of positives and smooth-L1 of their offsets      -> the image's partial sums,
 *   hard-negative mining: the K highest background losses among the other priors, kept with
 *   a K-sized heap (ssd_keep_best: O(P log K), no full sort); the rank is (loss descending,
 *   prior index ascending), a total order, so the kept set is unique
 *                                                       -> target[b, p] = 0, CE added.
 * The image partials are then added in image order and divided by N, the batch's positives.
 * Backward needs only the saved tensors: the selection is fixed, so the gradient is the plain
 * softmax-CE gradient on counted priors and the clamped offset difference on positives.
 * The workspace holds, per image, P (value, index) pairs — each prior's best GT while
 * matching, then the mining heap — the per-GT matching state and the image's sums.
 */
#include <math.h>
#include <stdint.h>

#include "mpx/ssd.h"
#include "ops_internal.h"
#include "ssd_internal.h"

static const char *const FWD = "multibox forward";
static const char *const BWD = "multibox backward";

mpx_multibox_attr mpx_multibox_defaults(void) {
    return (mpx_multibox_attr){.iou_threshold = 0.5f,
                               .var_xy = 0.1f,
                               .var_wh = 0.2f,
                               .neg_per_pos = 3,
                               .min_neg = 3,
                               .loc_weight = 1.0f};
}

size_t mpx_multibox_workspace_bytes(int64_t batch, int64_t priors, int64_t gt_per_image) {
    return (size_t)batch * ((size_t)priors * sizeof(ssd_pair) + sizeof(ssd_image_sums) +
                            (size_t)gt_per_image * sizeof(ssd_gt_state));
}

double ssd_softmax_row(const float *x, int64_t k, float *p) {
    float mx = x[0];
    for (int64_t j = 1; j < k; j++) mx = x[j] > mx ? x[j] : mx;
    double sum = 0;
    for (int64_t j = 0; j < k; j++) {
        p[j] = ssd_expf(x[j] - mx);
        sum += p[j];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < k; j++) p[j] *= inv;
    return log(sum) + (double)mx;
}

typedef struct {
    const mpx_multibox_attr *a;
    int64_t p, c, g;
    const float *conf, *loc, *priors, *gt;
    const int32_t *labels;
    float *probs, *loc_target;
    int32_t *target;
} fwd_args;

static void image_forward(const fwd_args *f, int64_t b, ssd_pair *pairs, ssd_gt_state *gts,
                          ssd_image_sums *s) {
    const int64_t p = f->p, c = f->c;
    const float *conf = f->conf + b * p * c, *loc = f->loc + b * p * 4;
    const float *gt = f->gt + b * f->g * 4;
    const int32_t *lab = f->labels + b * f->g;
    float *probs = f->probs + b * p * c, *lt = f->loc_target + b * p * 4;
    int32_t *tg = f->target + b * p;

    ssd_match_image(f->priors, p, gt, lab, f->g, f->a->iou_threshold, pairs, gts, tg);
    *s = (ssd_image_sums){0, 0, 0};
    int64_t nneg = 0;
    for (int64_t i = 0; i < p; i++) {
        const float *x = conf + i * c;
        double lse = ssd_softmax_row(x, c, probs + i * c);
        int32_t m = tg[i];
        if (m < 0) {
            lt[4 * i] = lt[4 * i + 1] = lt[4 * i + 2] = lt[4 * i + 3] = 0;
            pairs[nneg++] = (ssd_pair){lse - x[0], (int32_t)i};
            continue;
        }
        tg[i] = lab[m];
        s->npos++;
        s->conf += lse - x[lab[m]];
        ssd_encode_one(f->priors + 4 * i, gt + 4 * m, f->a->var_xy, f->a->var_wh, lt + 4 * i);
        for (int k = 0; k < 4; k++)
            s->loc += ssd_smooth_l1((double)loc[4 * i + k] - (double)lt[4 * i + k]);
    }
    /* Mining: pairs[0..nneg) hold the non-positives' background losses, in prior order. */
    int64_t want = (int64_t)f->a->neg_per_pos * s->npos;
    if (want < f->a->min_neg) want = f->a->min_neg;
    int64_t k = want < nneg ? want : nneg;
    ssd_keep_best(pairs, nneg, k);
    for (int64_t i = 0; i < k; i++) {
        tg[pairs[i].i] = 0;
        s->conf += pairs[i].v;
    }
}

mpx_status mpx_multibox_check_attr(const char *op, const mpx_multibox_attr *a) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attributes are NULL", op);
    if (!(a->iou_threshold > 0 && a->iou_threshold <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: iou_threshold = %g, expected (0, 1]", op,
                        a->iou_threshold);
    if (!(a->var_xy > 0 && a->var_wh > 0 && isfinite(a->var_xy) && isfinite(a->var_wh)))
        return mpx_fail(MPX_ERR_INPUT, "%s: variances (%g, %g) must be finite and > 0", op,
                        a->var_xy, a->var_wh);
    if (a->neg_per_pos < 0 || a->min_neg < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s: neg_per_pos = %d, min_neg = %d must be >= 0", op,
                        a->neg_per_pos, a->min_neg);
    if (!(a->loc_weight >= 0 && isfinite(a->loc_weight)))
        return mpx_fail(MPX_ERR_INPUT, "%s: loc_weight = %g must be finite and >= 0", op,
                        a->loc_weight);
    return MPX_OK;
}

/* conf-like [B, P, C] and loc-like [B, P, 4] tensors with matching B and P; target [B, P]. */
static mpx_status check_bpc(const char *op, const char *cn, const mpx_tensor *cf, const char *ln,
                            const mpx_tensor *lc, const mpx_tensor *target) {
    MPX_TRY(ops_expect(op, cn, cf, MPX_F32, 3));
    if (cf->shape[2] < 2)
        return mpx_fail(
            MPX_ERR_INPUT,
            "%s: %s has C = %lld classes, expected >= 2 (background and an object class)", op, cn,
            (long long)cf->shape[2]);
    MPX_TRY(ops_expect(op, ln, lc, MPX_F32, 3));
    MPX_TRY(ops_expect_dim(op, ln, lc, 0, cf->shape[0], "B, dim 0 of the confidences"));
    MPX_TRY(ops_expect_dim(op, ln, lc, 1, cf->shape[1], "P, dim 1 of the confidences"));
    MPX_TRY(ops_expect_dim(op, ln, lc, 2, 4, "4 offsets"));
    MPX_TRY(ops_expect(op, "target", target, MPX_I32, 2));
    MPX_TRY(ops_expect_dim(op, "target", target, 0, cf->shape[0], "B, dim 0 of the confidences"));
    return ops_expect_dim(op, "target", target, 1, cf->shape[1], "P, dim 1 of the confidences");
}

mpx_status mpx_multibox_forward_cpu(const mpx_multibox_attr *a, const mpx_tensor *conf,
                                    const mpx_tensor *loc, const mpx_tensor *priors,
                                    const mpx_tensor *gt_boxes, const mpx_tensor *gt_labels,
                                    mpx_tensor *workspace, mpx_tensor *loss, mpx_tensor *probs,
                                    mpx_tensor *target, mpx_tensor *loc_target) {
    MPX_TRY(mpx_multibox_check_attr(FWD, a));
    MPX_TRY(check_bpc(FWD, "conf", conf, "loc", loc, target));
    const int64_t nb = conf->shape[0], p = conf->shape[1], c = conf->shape[2];
    MPX_TRY(ops_expect(FWD, "priors", priors, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(FWD, "priors", priors, 0, p, "P, dim 1 of the confidences"));
    MPX_TRY(ops_expect_dim(FWD, "priors", priors, 1, 4, "(cx, cy, w, h)"));
    if (p > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld priors, more than an I32 index holds", FWD,
                        (long long)p);
    MPX_TRY(ops_expect(FWD, "gt_boxes", gt_boxes, MPX_F32, 3));
    MPX_TRY(ops_expect_dim(FWD, "gt_boxes", gt_boxes, 0, nb, "B, dim 0 of the confidences"));
    MPX_TRY(ops_expect_dim(FWD, "gt_boxes", gt_boxes, 2, 4, "(x0, y0, x1, y1)"));
    const int64_t g = gt_boxes->shape[1];
    MPX_TRY(ops_expect(FWD, "gt_labels", gt_labels, MPX_I32, 2));
    MPX_TRY(ops_expect_dim(FWD, "gt_labels", gt_labels, 0, nb, "B, dim 0 of the confidences"));
    MPX_TRY(ops_expect_dim(FWD, "gt_labels", gt_labels, 1, g, "G, dim 1 of gt_boxes"));
    MPX_TRY(ops_expect(FWD, "loss", loss, MPX_F32, -1));
    if (mpx_tensor_numel(loss) != 1) {
        char buf[64];
        return mpx_fail(MPX_ERR_INPUT, "%s: loss has shape %s, expected one element", FWD,
                        mpx_shape_str(loss->ndim, loss->shape, buf, sizeof buf));
    }
    MPX_TRY(ops_expect(FWD, "probs", probs, MPX_F32, 3));
    MPX_TRY(ops_expect_same_shape(FWD, "conf", conf, "probs", probs));
    MPX_TRY(ops_expect(FWD, "loc_target", loc_target, MPX_F32, 3));
    MPX_TRY(ops_expect_same_shape(FWD, "loc", loc, "loc_target", loc_target));
    MPX_TRY(ops_expect(FWD, "workspace", workspace, MPX_U8, 1));
    const size_t need = mpx_multibox_workspace_bytes(nb, p, g);
    if ((size_t)workspace->shape[0] < need || (uintptr_t)workspace->data % 8)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: workspace has %lld bytes at %p, needs %zu bytes (B = %lld, P = %lld, "
                        "G = %lld) aligned to 8",
                        FWD, (long long)workspace->shape[0], workspace->data, need, (long long)nb,
                        (long long)p, (long long)g);
    for (int64_t b = 0; b < nb; b++)
        MPX_TRY(ssd_check_gt(FWD, (const float *)gt_boxes->data + b * g * 4,
                             (const int32_t *)gt_labels->data + b * g, g, b, c));

    const fwd_args f = {.a = a,
                        .p = p,
                        .c = c,
                        .g = g,
                        .conf = conf->data,
                        .loc = loc->data,
                        .priors = priors->data,
                        .gt = gt_boxes->data,
                        .labels = gt_labels->data,
                        .probs = probs->data,
                        .loc_target = loc_target->data,
                        .target = target->data};
    ssd_pair *pairs = workspace->data;
    ssd_image_sums *sums = (ssd_image_sums *)(pairs + nb * p);
    ssd_gt_state *gts = (ssd_gt_state *)(sums + nb);
#pragma omp parallel for schedule(static) if (nb > 1 && nb * p * c >= OPS_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) image_forward(&f, b, pairs + b * p, gts + b * g, &sums[b]);

    double conf_sum = 0, loc_sum = 0;
    int64_t n = 0;
    for (int64_t b = 0; b < nb; b++)
        conf_sum += sums[b].conf, loc_sum += sums[b].loc, n += sums[b].npos;
    *(float *)loss->data = n ? (float)((conf_sum + a->loc_weight * loc_sum) / (double)n) : 0.0f;
    return MPX_OK;
}

mpx_status mpx_multibox_backward_cpu(const mpx_multibox_attr *a, const mpx_tensor *probs,
                                     const mpx_tensor *target, const mpx_tensor *loc,
                                     const mpx_tensor *loc_target, mpx_tensor *dconf,
                                     mpx_tensor *dloc) {
    MPX_TRY(mpx_multibox_check_attr(BWD, a));
    MPX_TRY(check_bpc(BWD, "probs", probs, "loc", loc, target));
    MPX_TRY(ops_expect(BWD, "loc_target", loc_target, MPX_F32, 3));
    MPX_TRY(ops_expect_same_shape(BWD, "loc", loc, "loc_target", loc_target));
    MPX_TRY(ops_expect(BWD, "dconf", dconf, MPX_F32, 3));
    MPX_TRY(ops_expect_same_shape(BWD, "probs", probs, "dconf", dconf));
    MPX_TRY(ops_expect(BWD, "dloc", dloc, MPX_F32, 3));
    MPX_TRY(ops_expect_same_shape(BWD, "loc", loc, "dloc", dloc));
    const int64_t rows = probs->shape[0] * probs->shape[1], c = probs->shape[2];
    const int32_t *tg = target->data;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (tg[r] < -1 || tg[r] >= c)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: target[%lld,%lld] = %d, expected -1..C-1 = %lld (the forward's "
                            "saved target)",
                            BWD, (long long)(r / probs->shape[1]), (long long)(r % probs->shape[1]),
                            (int)tg[r], (long long)c - 1);
        n += tg[r] >= 1;
    }
    const float *p = probs->data, *l = loc->data, *lt = loc_target->data;
    float *dc = dconf->data, *dl = dloc->data;
    const float fn = (float)n, w = a->loc_weight;
#pragma omp parallel for schedule(static) if (rows * c >= OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float *dcr = dc + r * c, *dlr = dl + r * 4;
        const float *pr = p + r * c;
        const int32_t t = n ? tg[r] : -1; /* N = 0: the loss is the constant 0 */
        if (t < 0)
            for (int64_t j = 0; j < c; j++) dcr[j] = 0.0f;
        else {
            for (int64_t j = 0; j < c; j++) dcr[j] = pr[j] / fn;
            dcr[t] = (pr[t] - 1.0f) / fn;
        }
        for (int k = 0; k < 4; k++) {
            float d = l[4 * r + k] - lt[4 * r + k];
            dlr[k] = t >= 1 ? w * fminf(fmaxf(d, -1.0f), 1.0f) / fn : 0.0f;
        }
    }
    return MPX_OK;
}
