/* ssd.h — everything SSD needs around the network: default boxes (priors), matching and box
 * encoding, the MultiBox loss operator, detection post-processing (decode, per-class NMS,
 * top-k) and Pascal VOC mAP.
 *
 * Boxes are in normalised image coordinates ([0, 1] across the image). Two forms:
 *   centre form (cx, cy, w, h)   — priors and the encoded offsets;
 *   corner form (x0, y0, x1, y1) — ground truth, decoded boxes, detections.
 * All functions compute in FP32 on FP32 tensors (labels and indices I32), validate shapes and
 * return MPX_ERR_INPUT naming the tensor, element or setting at fault.
 */
#ifndef MPX_SSD_H
#define MPX_SSD_H

#include "mpx/error.h"
#include "mpx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- default boxes (priors) -----------------------------------------------------------------
 * Map k (0-based, of m) is a size[k] x size[k] grid. Its scale grows linearly,
 *   s_k = s_min + k * step,  step = (s_max - s_min) / (m - 1)  (m = 1: step = s_max - s_min),
 * so s_0 = s_min, s_{m-1} = s_max, and the extrapolated s_m = s_max + step serves the last
 * map's extra box (the SSD paper). Boxes per cell, in this order:
 *   ratio 1 (s_k x s_k), the extra ratio-1 box of side sqrt(s_k s_{k+1}), ratio 2, ratio 1/2,
 *   and when ratio3[k]: ratio 3, ratio 1/3;  ratio a has w = s_k sqrt(a), h = s_k / sqrt(a).
 * Cell (row i, col j) is centred at cx = (j + 0.5) / f_k, cy = (i + 0.5) / f_k.
 * Prior order: (map, row, col, box) — exactly the order of an NHWC head output
 * [N, f_k, f_k, boxes * 4] (or * C) flattened per map and the maps concatenated, which is the
 * order the network's heads must produce. clip: the corners are clipped to [0, 1] and the box
 * re-centred (original SSD PriorBox), otherwise boxes may extend past the image. */
enum { MPX_SSD_MAX_MAPS = 8 };
typedef struct {
    int n_maps;
    int size[MPX_SSD_MAX_MAPS];   /* f_k */
    int ratio3[MPX_SSD_MAX_MAPS]; /* nonzero: map k also has ratios 3 and 1/3 (6 boxes, else 4) */
    float s_min, s_max;           /* 0.2, 0.9 in the paper; 0 < s_min <= s_max */
    int clip;
} mpx_ssd_priors_cfg;

/* Number of priors P = sum_k size[k]^2 * (ratio3[k] ? 6 : 4); validates the configuration. */
mpx_status mpx_ssd_prior_count(const mpx_ssd_priors_cfg *cfg, int64_t *count);
/* priors F32 [P, 4] in centre form. */
mpx_status mpx_ssd_priors(const mpx_ssd_priors_cfg *cfg, mpx_tensor *priors);

/* ---- geometry, matching, encoding ---------------------------------------------------------- */

/* Intersection over union of two corner-form boxes, computed in double (matching, NMS and
 * mAP all use it: thresholds compare exactly where the geometry is exact, e.g. 0.5); 0 when
 * the boxes do not overlap. */
double mpx_ssd_iou(const float a[4], const float b[4]);

/* Offsets of corner-form `boxes` [..., P, 4] relative to centre-form `priors` [P, 4], into
 * `deltas` (same shape as boxes), with variances v = (var_xy, var_wh):
 *   ((cx - cx_p) / (var_xy w_p), (cy - cy_p) / (var_xy h_p), log(w / w_p) / var_wh,
 *    log(h / h_p) / var_wh)   (boxes need w, h > 0).
 * Decoding is the inverse: centre-form offsets back to corner-form boxes. */
mpx_status mpx_ssd_encode(const mpx_tensor *priors, const mpx_tensor *boxes, float var_xy,
                          float var_wh, mpx_tensor *deltas);
mpx_status mpx_ssd_decode(const mpx_tensor *priors, const mpx_tensor *deltas, float var_xy,
                          float var_wh, mpx_tensor *boxes);

/* SSD matching of priors [P, 4] (centre form) to one image's ground truth gt_boxes [G, 4]
 * (corner form, w, h > 0) with gt_labels I32 [G] (< 0: padding, skipped; others >= 1).
 *  1. Each GT gets one prior of its own: repeatedly the pair (unmatched GT, free prior) of
 *     highest IoU is matched (ties: lower GT index, then lower prior index), so two GTs never
 *     claim the same prior (the bipartite step of Caffe SSD); a GT overlapping no free prior
 *     (IoU 0) gets none.
 *  2. Every other prior takes its best GT (ties: lower index) when that IoU >= iou_threshold.
 * match I32 [P]: the matched GT index, or -1 (background). Allocates O(P + G) scratch. */
mpx_status mpx_ssd_match(const mpx_tensor *priors, const mpx_tensor *gt_boxes,
                         const mpx_tensor *gt_labels, float iou_threshold, mpx_tensor *match);

/* ---- MultiBox loss --------------------------------------------------------------------------
 * Inputs: conf logits [B, P, C] (class 0 = background), loc offsets [B, P, 4] (as encoded
 * above), priors [P, 4], gt_boxes [B, G, 4] corner form, gt_labels I32 [B, G] (-1 padding,
 * objects 1..C-1; an image may have no objects).
 * Forward, per image: match (above) and encode the matched GT into loc_target; positives are
 * the matched priors. Hard-negative mining: the other priors ranked by background loss
 * -log softmax(conf)[0], descending, ties broken by the lower prior index; the first
 *   K = min(#non-positive priors, max(neg_per_pos * #positives, min_neg))
 * are kept. min_neg only matters for images with few or no positives (the rule of the
 * TensorFlow Object Detection API's hard-example miner): an image without objects still
 * trains min_neg background priors whenever the batch has positives elsewhere.
 * With N = the number of positives in the whole batch and "counted" = positive or kept,
 *   loss = (sum_counted CE(conf, class) + loc_weight sum_positive sum_4 smoothL1(loc -
 *          loc_target)) / N,   CE of a kept negative against class 0,
 *   smoothL1(d) = d^2 / 2 for |d| < 1, |d| - 1/2 otherwise (beta 1),
 * and loss = 0 (with zero gradients) when N = 0.
 * Saved for backward: probs F32 [B, P, C] (softmax of conf), target I32 [B, P] (>= 1 positive
 * with its class, 0 kept negative, -1 not in the loss), loc_target F32 [B, P, 4] (encoded GT
 * of positives, 0 elsewhere).
 * Backward: the gradient of that loss with the selection fixed, OVERWRITING dconf [B, P, C] =
 * (probs - onehot(target)) / N on counted priors (0 elsewhere) and dloc [B, P, 4] =
 * loc_weight clamp(loc - loc_target, -1, 1) / N on positives (0 elsewhere).
 * Deterministic: images are independent, each image's sums run in double in a fixed order
 * and the image partials are added in image order, so results do not depend on the thread
 * count. P must fit an I32 index.
 * The forward needs a workspace: U8 [>= mpx_multibox_workspace_bytes(B, P, G)], 8-byte
 * aligned; the op allocates nothing. */
typedef struct {
    float iou_threshold;  /* 0.5 */
    float var_xy, var_wh; /* 0.1, 0.2 */
    int neg_per_pos;      /* 3 */
    int min_neg;          /* 3: negatives per image even when it has no positive */
    float loc_weight;     /* 1 (the SSD paper's alpha) */
} mpx_multibox_attr;

mpx_multibox_attr mpx_multibox_defaults(void);
/* MPX_OK, or MPX_ERR_INPUT with "<op>: <what is wrong>" for attributes out of range (every
 * backend's MultiBox checks them so). */
mpx_status mpx_multibox_check_attr(const char *op, const mpx_multibox_attr *a);
size_t mpx_multibox_workspace_bytes(int64_t batch, int64_t priors, int64_t gt_per_image);
mpx_status mpx_multibox_forward_cpu(const mpx_multibox_attr *a, const mpx_tensor *conf,
                                    const mpx_tensor *loc, const mpx_tensor *priors,
                                    const mpx_tensor *gt_boxes, const mpx_tensor *gt_labels,
                                    mpx_tensor *workspace, mpx_tensor *loss, mpx_tensor *probs,
                                    mpx_tensor *target, mpx_tensor *loc_target);
mpx_status mpx_multibox_backward_cpu(const mpx_multibox_attr *a, const mpx_tensor *probs,
                                     const mpx_tensor *target, const mpx_tensor *loc,
                                     const mpx_tensor *loc_target, mpx_tensor *dconf,
                                     mpx_tensor *dloc);

/* ---- post-processing ------------------------------------------------------------------------ */

/* Greedy non-maximum suppression over boxes [N, 4] (corner form) with scores [N]: boxes are
 * visited by score, descending (ties: lower index first); a box is kept unless its IoU with an
 * already kept box is > iou_threshold. keep I32 [N] receives the kept indices in visiting
 * order, *kept their number. Allocates O(N) scratch. */
mpx_status mpx_ssd_nms(const mpx_tensor *boxes, const mpx_tensor *scores, float iou_threshold,
                       mpx_tensor *keep, int64_t *kept);

typedef struct {
    float score_threshold; /* 0.01: class scores must be > this */
    float nms_iou;         /* 0.45 */
    int nms_top_k;         /* 400: best candidates per class entering NMS (0: all) */
    int top_k;             /* 200: detections kept per image, over all classes */
    float var_xy, var_wh;  /* 0.1, 0.2: as in the loss */
} mpx_ssd_detect_attr;

typedef struct {
    int32_t image; /* first_image + index in the batch */
    int32_t cls;   /* 1..C-1 */
    float score;   /* softmax probability of cls */
    float box[4];  /* corner form */
} mpx_detection;

mpx_ssd_detect_attr mpx_ssd_detect_defaults(void);
/* Detections of a batch: decode loc [B, P, 4] against priors [P, 4], softmax conf [B, P, C]
 * per prior; per image and class c >= 1, the priors with score > score_threshold (best
 * nms_top_k) go through NMS; the survivors of all classes are ranked by score (ties: lower
 * class, then lower prior index) and the best top_k kept. `out` (room for `cap` >= B * top_k)
 * receives them image by image, in rank order; *count their number. Allocates O(P C) scratch. */
mpx_status mpx_ssd_detect(const mpx_ssd_detect_attr *a, const mpx_tensor *conf,
                          const mpx_tensor *loc, const mpx_tensor *priors, int32_t first_image,
                          mpx_detection *out, int64_t cap, int64_t *count);

/* ---- Pascal VOC mAP -------------------------------------------------------------------------
 * The VOC devkit protocol per class: detections by score, descending (ties: input order);
 * each takes the GT of its image and class with the highest IoU (ties: lower input index);
 * if that IoU >= iou_threshold (0.5): a difficult GT makes the detection ignored (neither TP
 * nor FP), an unclaimed GT makes it a TP and claims the GT, an already claimed GT makes it a
 * FP (a duplicate — even when another unclaimed GT also overlaps enough, as in the devkit);
 * otherwise FP. Recall = TP / #non-difficult GT, precision = TP / (TP + FP).
 * AP 11-point (VOC2007): mean over t = 0, 0.1, ..., 1 (t = k / 10.0) of the highest precision
 * at recall >= t (0 if none). AP area (VOC2010+): area under the precision envelope (precision
 * made non-increasing from the right) over recall steps. IoU uses continuous coordinates (no
 * devkit "+1 pixel"). Classes with no non-difficult GT have AP NaN and are left out of mAP;
 * mAP is the mean over the others (0 classes: mAP 0). */
typedef struct {
    int32_t image, cls;
    float box[4]; /* corner form */
    int32_t difficult;
} mpx_voc_gt;

typedef struct {
    double map_11pt, map_area;
    int classes_with_gt;
} mpx_voc_summary;

/* Classes are 0..n_classes-1 (detections and GT outside that range are an error);
 * ap_11pt / ap_area [n_classes] receive per-class APs (either may be NULL). Allocates. */
mpx_status mpx_voc_map(const mpx_detection *dets, int64_t n_dets, const mpx_voc_gt *gt,
                       int64_t n_gt, int n_classes, float iou_threshold, double *ap_11pt,
                       double *ap_area, mpx_voc_summary *out);

#ifdef __cplusplus
}
#endif

#endif
