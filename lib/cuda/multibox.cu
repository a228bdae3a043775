/* multibox.cu — the SSD MultiBox loss (lib/ops/multibox.c) for the CUDA backend.
 *
 * Forward: on the device, without a wait, in four launches that follow the CPU op's order:
 *   mb_match  one block per image: each prior's best GT and each GT's best prior (threads own
 *             priors, GTs in ascending order, a strictly larger IoU replaces, so ties fall to
 *             the lower index as on the CPU; a GT's best prior by a block reduction that prefers
 *             the lower index among equal IoUs), then the bipartite step by one thread
 *             (ssd_bipartite) and the IoU threshold;
 *   mb_rows   one thread per (image, prior): softmax into probs, the log-sum-exp, the target
 *             (class or -1), the encoded offsets of positives, and the row's CE value (positive)
 *             or background loss (the rest, the mining key);
 *   mb_mine   one thread per image, in prior order as on the CPU: the positives' CE and
 *             smooth-L1 sums, the non-positives compacted with their prior index, and the heap
 *             selection of the K hardest (ssd_keep_best), whose CE joins the sum;
 *   mb_loss   one thread: the images' sums in image order, divided by N.
 * The box arithmetic, the ranking and the heap are ssd_box.h's, compiled for both backends, and
 * this file is compiled with -fmad=false (CMakeLists.txt), so every +, -, *, / is the CPU's IEEE
 * operation: same matching, same double sums in the same order. exp and log go through double
 * (ssd_expf/ssd_logf, and the log of the double normaliser), where CUDA and glibc differ by at
 * most an ulp of double: a probability or an offset can then differ from the CPU's by one ulp of
 * FP32 when its value lies that close to an FP32 rounding boundary (about 2^-29 of them), and a
 * mining key by an ulp of double, which changes the kept set only for two keys within an ulp of
 * double of each other at the cut (keys from equal logits are equal on both).
 *
 * Ground truth is checked on the device (labels in 1..C-1 or < 0 for padding, finite boxes with
 * x1 > x0 and y1 > y0), the first offence by integer atomicMin, and reported at the backend's
 * next wait (ops.cuh: cuop_check_defer) naming its position and value; until then such a GT is
 * left out of the matching (the CPU op refuses the batch before computing anything).
 *
 * Backward: one kernel checks target (-1..C-1; the first offending position by integer atomicMin)
 * and counts the positives N (integer atomics); a second kernel reads N from that count and
 * writes dconf = (probs - onehot) / N on counted priors and dloc = w clamp(loc - loc_target, -1, 1)
 * / N on positives with the CPU's FP32 operations in the CPU's order (IEEE division, no FMA), so
 * the gradients are the CPU's bits, rounded once into their dtype. A bad target is reported at the
 * backend's next wait, naming its position and value.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/cuda/ops.cuh"
#include "lib/ops/ssd_box.h"
#include "mpx/cuda.h"
#include "mpx/ssd.h"

namespace {

const char *const FWD = "multibox forward";
const char *const BWD = "multibox backward";

/* Threads of mb_match's blocks (a power of two: its reduction halves). */
constexpr int kMatchThreads = 256;

/* Whether (iou_b, i_b) is a better best prior for a GT than (iou_a, i_a): the larger IoU, ties
 * to the lower prior index; an empty candidate (index -1, no overlap) never is. */
__device__ __forceinline__ bool better_prior(double iou_b, int32_t i_b, double iou_a,
                                             int32_t i_a) {
    if (i_b < 0) return false;
    if (i_a < 0) return true;
    return iou_b > iou_a || (iou_b == iou_a && i_b < i_a);
}

/* One block per image b: best [P] = (best IoU, GT) per prior, gts [G] per GT, then the bipartite
 * step and the threshold, leaving best[i].i = the matched GT or -1 (ssd_match_image's result).
 * priors [P, 4] centre form, gt [B, G, 4] corners, labels [B, G]. */
__global__ void mb_match(const float *priors, const float *gt_all, const int32_t *labels_all,
                         int64_t p, int64_t g, int64_t c, float thr, ssd_pair *pairs_all,
                         ssd_gt_state *gts_all, CuopCheck *lab_chk, CuopCheck *box_chk) {
    __shared__ double s_iou[kMatchThreads];
    __shared__ int32_t s_idx[kMatchThreads];
    const int64_t b = blockIdx.x;
    const float *gt = gt_all + b * g * 4;
    const int32_t *lab = labels_all + b * g;
    ssd_pair *best = pairs_all + b * p;
    ssd_gt_state *gts = gts_all + b * g;
    for (int64_t i = threadIdx.x; i < p; i += blockDim.x) {
        best[i].v = 0;
        best[i].i = -1;
    }
    for (int64_t j = 0; j < g; j++) {
        /* every thread reads GT j, so the branches below are uniform over the block */
        const float *bx = gt + 4 * j;
        const int32_t l = lab[j];
        const bool lab_ok = l >= 1 && l < c;
        const bool box_ok = isfinite(bx[0]) && isfinite(bx[1]) && isfinite(bx[2]) &&
                            isfinite(bx[3]) && bx[2] > bx[0] && bx[3] > bx[1];
        if (threadIdx.x == 0 && l >= 0) {
            if (!lab_ok)
                atomicMin(&lab_chk->first_bad, (unsigned long long)(b * g + j));
            else if (!box_ok)
                atomicMin(&box_chk->first_bad, (unsigned long long)(4 * (b * g + j)));
        }
        if (l < 0 || !lab_ok || !box_ok) { /* padding, or an offence reported at the wait */
            if (threadIdx.x == 0) {
                gts[j].iou = 0;
                gts[j].prior = -1;
                gts[j].done = 1;
            }
            continue;
        }
        double box[4];
        ssd_gt_corners(gt, j, box);
        double my_iou = 0;
        int32_t my_i = -1;
        for (int64_t i = threadIdx.x; i < p; i += blockDim.x) {
            double k[4];
            ssd_prior_corners(priors + 4 * i, k);
            const double iou = ssd_iou_d(k, box);
            if (iou > best[i].v) {
                best[i].v = iou;
                best[i].i = (int32_t)j;
            }
            if (iou > my_iou) my_iou = iou, my_i = (int32_t)i;
        }
        s_iou[threadIdx.x] = my_iou;
        s_idx[threadIdx.x] = my_i;
        __syncthreads();
        for (int h = blockDim.x / 2; h > 0; h >>= 1) {
            const int t = threadIdx.x;
            if (t < h && better_prior(s_iou[t + h], s_idx[t + h], s_iou[t], s_idx[t])) {
                s_iou[t] = s_iou[t + h];
                s_idx[t] = s_idx[t + h];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            gts[j].iou = s_idx[0] >= 0 ? s_iou[0] : 0;
            gts[j].prior = s_idx[0];
            gts[j].done = 0;
        }
        __syncthreads(); /* s_iou and s_idx are the next GT's */
    }
    __syncthreads(); /* best[] of every thread and gts[] are complete */
    if (threadIdx.x == 0) ssd_bipartite(priors, p, gt, g, best, gts);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < p; i += blockDim.x)
        if (!(best[i].v >= thr)) best[i].i = -1;
}

/* One thread per row r = (b, i) of conf [B, P, C]: ssd_softmax_row's operations into probs, and
 * image_forward's per-prior part: target (class or -1), loc_target (offsets or 0), and
 * pairs[r] = (CE of the row's class, matched GT) for a positive, (background loss, -1) else. */
__global__ void mb_rows(const void *conf, mpx_dtype cdt, const float *priors, const float *gt_all,
                        const int32_t *labels_all, int64_t rows, int64_t p, int64_t c, int64_t g,
                        float var_xy, float var_wh, ssd_pair *pairs_all, void *probs,
                        mpx_dtype pdt, int32_t *target, void *loc_target, mpx_dtype ltdt) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = r / p, i = r - b * p;
        const size_t row = (size_t)r * (size_t)c;
        float mx = cuop_ld(conf, cdt, row);
        for (int64_t j = 1; j < c; j++) {
            const float x = cuop_ld(conf, cdt, row + j);
            mx = x > mx ? x : mx;
        }
        double sum = 0;
        for (int64_t j = 0; j < c; j++) sum += ssd_expf(cuop_ld(conf, cdt, row + j) - mx);
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < c; j++)
            cuop_st(probs, pdt, row + j, ssd_expf(cuop_ld(conf, cdt, row + j) - mx) * inv);
        const double lse = log(sum) + (double)mx;
        const int32_t m = pairs_all[r].i;
        float lt[4] = {0, 0, 0, 0};
        if (m < 0) {
            pairs_all[r].v = lse - cuop_ld(conf, cdt, row);
            target[r] = -1;
        } else {
            const int32_t l = labels_all[b * g + m];
            pairs_all[r].v = lse - cuop_ld(conf, cdt, row + l);
            target[r] = l;
            ssd_encode_one(priors + 4 * i, gt_all + (b * g + m) * 4, var_xy, var_wh, lt);
        }
        for (int k = 0; k < 4; k++) cuop_st(loc_target, ltdt, 4 * (size_t)r + k, lt[k]);
    }
}

/* One thread per image b, in prior order as image_forward: the positives' CE and smooth-L1 sums
 * (offsets encoded again: the CPU sums the FP32 offsets before their rounding into loc_target),
 * the non-positives compacted in place into (background loss, prior), the K hardest kept by
 * ssd_keep_best and marked target 0, their CE added. */
__global__ void mb_mine(const void *loc, mpx_dtype ldt, const float *priors, const float *gt_all,
                        int64_t nb, int64_t p, int64_t g, float var_xy, float var_wh,
                        int neg_per_pos, int min_neg, ssd_pair *pairs_all, int32_t *target,
                        ssd_image_sums *sums) {
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (b >= nb) return;
    ssd_pair *pairs = pairs_all + b * p;
    int32_t *tg = target + b * p;
    ssd_image_sums s = {0, 0, 0};
    int64_t nneg = 0;
    for (int64_t i = 0; i < p; i++) {
        const ssd_pair q = pairs[i]; /* read before pairs[nneg <= i] is written */
        if (q.i < 0) {
            pairs[nneg].v = q.v;
            pairs[nneg].i = (int32_t)i;
            nneg++;
            continue;
        }
        s.npos++;
        s.conf += q.v;
        float lt[4];
        ssd_encode_one(priors + 4 * i, gt_all + (b * g + q.i) * 4, var_xy, var_wh, lt);
        for (int k = 0; k < 4; k++)
            s.loc += ssd_smooth_l1((double)cuop_ld(loc, ldt, 4 * (size_t)(b * p + i) + k) -
                                   (double)lt[k]);
    }
    int64_t want = (int64_t)neg_per_pos * s.npos;
    if (want < min_neg) want = min_neg;
    const int64_t k = want < nneg ? want : nneg;
    ssd_keep_best(pairs, nneg, k);
    for (int64_t t = 0; t < k; t++) {
        tg[pairs[t].i] = 0;
        s.conf += pairs[t].v;
    }
    sums[b] = s;
}

/* The loss: the images' sums in image order over N, the batch's positives (0 when N = 0). */
__global__ void mb_loss(const ssd_image_sums *sums, int64_t nb, float w, void *loss,
                        mpx_dtype dt) {
    double conf = 0, loc = 0;
    int64_t n = 0;
    for (int64_t b = 0; b < nb; b++) conf += sums[b].conf, loc += sums[b].loc, n += sums[b].npos;
    cuop_st(loss, dt, 0, n ? (float)((conf + w * loc) / (double)n) : 0.0f);
}

/* target check: first position outside -1..C-1, and the number of positives (>= 1). */
__global__ void target_check(const int32_t *tg, int64_t rows, int64_t c, CuopCheck *chk) {
    unsigned long long pos = 0;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        const int32_t t = tg[r];
        if (t < -1 || t >= c) atomicMin(&chk->first_bad, (unsigned long long)r);
        pos += t >= 1;
    }
    if (pos) atomicAdd(&chk->count, pos);
}

__global__ void multibox_grad(const void *probs, mpx_dtype pdt, const int32_t *tg,
                              const void *loc, mpx_dtype ldt, const void *lt, mpx_dtype ltdt,
                              void *dconf, mpx_dtype dcdt, void *dloc, mpx_dtype dldt,
                              int64_t rows, int64_t c, const CuopCheck *chk, float w) {
    /* N, the positives, as target_check counted them (read here: no wait on the host) */
    const unsigned long long n = chk->count;
    const float fn = (float)n;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        const int32_t t = n ? tg[r] : -1;
        for (int64_t j = 0; j < c; j++) {
            const size_t e = (size_t)(r * c + j);
            float v = 0.0f;
            if (t >= 0) {
                const float p = cuop_ld(probs, pdt, e);
                v = j == t ? __fdiv_rn(__fsub_rn(p, 1.0f), fn) : __fdiv_rn(p, fn);
            }
            cuop_st(dconf, dcdt, e, v);
        }
        for (int k = 0; k < 4; k++) {
            const size_t e = (size_t)(4 * r + k);
            const float d = __fsub_rn(cuop_ld(loc, ldt, e), cuop_ld(lt, ltdt, e));
            const float v =
                t >= 1 ? __fdiv_rn(__fmul_rn(w, fminf(fmaxf(d, -1.0f), 1.0f)), fn) : 0.0f;
            cuop_st(dloc, dldt, e, v);
        }
    }
}

} // namespace

/* The forward's arguments, as the CPU op checks them. */
static mpx_status mb_forward_check(const mpx_multibox_attr *a, const mpx_tensor *conf,
                                   const mpx_tensor *loc, const mpx_tensor *priors,
                                   const mpx_tensor *gt_boxes, const mpx_tensor *gt_labels,
                                   const mpx_tensor *workspace, const mpx_tensor *loss,
                                   const mpx_tensor *probs, const mpx_tensor *target,
                                   const mpx_tensor *loc_target) {
    MPX_TRY(mpx_multibox_check_attr(FWD, a));
    MPX_TRY(cuop_expect_float(FWD, "conf", conf, 3));
    if (conf->shape[2] < 2)
        return mpx_fail(
            MPX_ERR_INPUT,
            "%s: conf has C = %lld classes, expected >= 2 (background and an object class)", FWD,
            (long long)conf->shape[2]);
    const int64_t nb = conf->shape[0], p = conf->shape[1];
    MPX_TRY(cuop_expect_float(FWD, "loc", loc, 3));
    MPX_TRY(cuop_expect_dim(FWD, "loc", loc, 0, nb, "B, dim 0 of the confidences"));
    MPX_TRY(cuop_expect_dim(FWD, "loc", loc, 1, p, "P, dim 1 of the confidences"));
    MPX_TRY(cuop_expect_dim(FWD, "loc", loc, 2, 4, "4 offsets"));
    MPX_TRY(cuop_expect(FWD, "priors", priors, MPX_F32, 2));
    MPX_TRY(cuop_expect_dim(FWD, "priors", priors, 0, p, "P, dim 1 of the confidences"));
    MPX_TRY(cuop_expect_dim(FWD, "priors", priors, 1, 4, "(cx, cy, w, h)"));
    if (p > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld priors, more than an I32 index holds", FWD,
                        (long long)p);
    if (nb > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld images, more than one launch's blocks", FWD,
                        (long long)nb);
    MPX_TRY(cuop_expect(FWD, "gt_boxes", gt_boxes, MPX_F32, 3));
    MPX_TRY(cuop_expect_dim(FWD, "gt_boxes", gt_boxes, 0, nb, "B, dim 0 of the confidences"));
    MPX_TRY(cuop_expect_dim(FWD, "gt_boxes", gt_boxes, 2, 4, "(x0, y0, x1, y1)"));
    const int64_t g = gt_boxes->shape[1];
    MPX_TRY(cuop_expect(FWD, "gt_labels", gt_labels, MPX_I32, 2));
    MPX_TRY(cuop_expect_dim(FWD, "gt_labels", gt_labels, 0, nb, "B, dim 0 of the confidences"));
    MPX_TRY(cuop_expect_dim(FWD, "gt_labels", gt_labels, 1, g, "G, dim 1 of gt_boxes"));
    MPX_TRY(cuop_expect_float(FWD, "loss", loss, -1));
    if (mpx_tensor_numel(loss) != 1) {
        char buf[64];
        return mpx_fail(MPX_ERR_INPUT, "%s: loss has shape %s, expected one element", FWD,
                        mpx_shape_str(loss->ndim, loss->shape, buf, sizeof buf));
    }
    MPX_TRY(cuop_expect_float(FWD, "probs", probs, 3));
    MPX_TRY(cuop_expect_same_shape(FWD, "conf", conf, "probs", probs));
    MPX_TRY(cuop_expect(FWD, "target", target, MPX_I32, 2));
    MPX_TRY(cuop_expect_dim(FWD, "target", target, 0, nb, "B, dim 0 of the confidences"));
    MPX_TRY(cuop_expect_dim(FWD, "target", target, 1, p, "P, dim 1 of the confidences"));
    MPX_TRY(cuop_expect_float(FWD, "loc_target", loc_target, 3));
    MPX_TRY(cuop_expect_same_shape(FWD, "loc", loc, "loc_target", loc_target));
    MPX_TRY(cuop_expect(FWD, "workspace", workspace, MPX_U8, 1));
    const size_t need = mpx_multibox_workspace_bytes(nb, p, g);
    if ((size_t)workspace->shape[0] < need || (uintptr_t)workspace->data % 8)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: workspace has %lld bytes at %p, needs %zu bytes (B = %lld, P = %lld, "
                        "G = %lld) aligned to 8",
                        FWD, (long long)workspace->shape[0], workspace->data, need, (long long)nb,
                        (long long)p, (long long)g);
    return MPX_OK;
}

extern "C" mpx_status mpx_multibox_forward_cuda(const mpx_multibox_attr *a, const mpx_tensor *conf,
                                                const mpx_tensor *loc, const mpx_tensor *priors,
                                                const mpx_tensor *gt_boxes,
                                                const mpx_tensor *gt_labels,
                                                mpx_tensor *workspace, mpx_tensor *loss,
                                                mpx_tensor *probs, mpx_tensor *target,
                                                mpx_tensor *loc_target) {
    MPX_TRY(mb_forward_check(a, conf, loc, priors, gt_boxes, gt_labels, workspace, loss, probs,
                             target, loc_target));
    const int64_t nb = conf->shape[0], p = conf->shape[1], c = conf->shape[2];
    const int64_t g = gt_boxes->shape[1];
    /* The workspace as the CPU op lays it out: pairs [B, P], sums [B], GT states [B, G]. */
    ssd_pair *pairs = (ssd_pair *)workspace->data;
    ssd_image_sums *sums = (ssd_image_sums *)(pairs + nb * p);
    ssd_gt_state *gts = (ssd_gt_state *)(sums + nb);
    const float *pri = (const float *)priors->data, *gt = (const float *)gt_boxes->data;
    const int32_t *lab = (const int32_t *)gt_labels->data;

    CuopCheck *lab_chk = nullptr, *box_chk = nullptr;
    MPX_TRY(cuop_check_begin(&lab_chk));
    mpx_status st = cuop_check_begin(&box_chk);
    unsigned grid = 0;
    if (st == MPX_OK) st = mpx_cuda_grid((size_t)(nb * p), &grid);
    const char *what = "matching";
    cudaError_t err = cudaSuccess;
    if (st == MPX_OK) {
        mb_match<<<(unsigned)nb, kMatchThreads>>>(pri, gt, lab, p, g, c, a->iou_threshold, pairs,
                                                  gts, lab_chk, box_chk);
        err = cudaGetLastError();
    }
    if (st == MPX_OK && err == cudaSuccess) {
        what = "softmax and targets";
        mb_rows<<<grid, kLaunchThreads>>>(conf->data, conf->dtype, pri, gt, lab, nb * p, p, c, g,
                                          a->var_xy, a->var_wh, pairs, probs->data, probs->dtype,
                                          (int32_t *)target->data, loc_target->data,
                                          loc_target->dtype);
        err = cudaGetLastError();
    }
    if (st == MPX_OK && err == cudaSuccess) {
        what = "hard-negative mining";
        mb_mine<<<(unsigned)((nb + 63) / 64), 64>>>(loc->data, loc->dtype, pri, gt, nb, p, g,
                                                    a->var_xy, a->var_wh, a->neg_per_pos,
                                                    a->min_neg, pairs, (int32_t *)target->data,
                                                    sums);
        err = cudaGetLastError();
    }
    if (st == MPX_OK && err == cudaSuccess) {
        what = "loss";
        mb_loss<<<1, 1>>>(sums, nb, a->loc_weight, loss->data, loss->dtype);
        err = cudaGetLastError();
    }
    if (st != MPX_OK || err != cudaSuccess) {
        mpx_cuda_scratch_free(lab_chk);
        mpx_cuda_scratch_free(box_chk);
        return st != MPX_OK ? st : cuop_launch_fail(FWD, what, conf, err);
    }
    char rule[128];
    snprintf(rule, sizeof rule,
             ": an object's class must be in 1..C-1 = %lld (0 is background, < 0 marks padding)",
             (long long)c - 1);
    st = cuop_check_defer(lab_chk, gt_labels, FWD, "gt_labels", rule);
    mpx_status st_box = cuop_check_defer(
        box_chk, gt_boxes, FWD, "gt_boxes",
        ", the first corner of a box that is not finite with x1 > x0 and y1 > y0");
    return st != MPX_OK ? st : st_box;
}

extern "C" mpx_status mpx_multibox_backward_cuda(const mpx_multibox_attr *a,
                                                 const mpx_tensor *probs,
                                                 const mpx_tensor *target, const mpx_tensor *loc,
                                                 const mpx_tensor *loc_target, mpx_tensor *dconf,
                                                 mpx_tensor *dloc) {
    MPX_TRY(mpx_multibox_check_attr(BWD, a));
    MPX_TRY(cuop_expect_float(BWD, "probs", probs, 3));
    if (probs->shape[2] < 2)
        return mpx_fail(
            MPX_ERR_INPUT,
            "%s: probs has C = %lld classes, expected >= 2 (background and an object class)", BWD,
            (long long)probs->shape[2]);
    MPX_TRY(cuop_expect_float(BWD, "loc", loc, 3));
    MPX_TRY(cuop_expect_dim(BWD, "loc", loc, 0, probs->shape[0], "B, dim 0 of the confidences"));
    MPX_TRY(cuop_expect_dim(BWD, "loc", loc, 1, probs->shape[1], "P, dim 1 of the confidences"));
    MPX_TRY(cuop_expect_dim(BWD, "loc", loc, 2, 4, "4 offsets"));
    MPX_TRY(cuop_expect(BWD, "target", target, MPX_I32, 2));
    MPX_TRY(cuop_expect_dim(BWD, "target", target, 0, probs->shape[0],
                            "B, dim 0 of the confidences"));
    MPX_TRY(cuop_expect_dim(BWD, "target", target, 1, probs->shape[1],
                            "P, dim 1 of the confidences"));
    MPX_TRY(cuop_expect_float(BWD, "loc_target", loc_target, 3));
    MPX_TRY(cuop_expect_same_shape(BWD, "loc", loc, "loc_target", loc_target));
    MPX_TRY(cuop_expect_float(BWD, "dconf", dconf, 3));
    MPX_TRY(cuop_expect_same_shape(BWD, "probs", probs, "dconf", dconf));
    MPX_TRY(cuop_expect_float(BWD, "dloc", dloc, 3));
    MPX_TRY(cuop_expect_same_shape(BWD, "loc", loc, "dloc", dloc));
    const int64_t rows = probs->shape[0] * probs->shape[1], c = probs->shape[2];
    const int32_t *tg = (const int32_t *)target->data;

    CuopCheck *chk = nullptr;
    MPX_TRY(cuop_check_begin(&chk));
    unsigned grid = 0;
    mpx_status st = mpx_cuda_grid((size_t)rows, &grid);
    if (st != MPX_OK) {
        mpx_cuda_scratch_free(chk);
        return st;
    }
    target_check<<<grid, kLaunchThreads>>>(tg, rows, c, chk);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        mpx_cuda_scratch_free(chk);
        return cuop_launch_fail(BWD, "target check", target, err);
    }
    /* The gradient reads the count from the check; a bad target (the kernel only compares it)
     * is reported at the backend's next wait (ops.cuh: cuop_check_defer). */
    multibox_grad<<<grid, kLaunchThreads>>>(probs->data, probs->dtype, tg, loc->data, loc->dtype,
                                            loc_target->data, loc_target->dtype, dconf->data,
                                            dconf->dtype, dloc->data, dloc->dtype, rows, c, chk,
                                            a->loc_weight);
    err = cudaGetLastError();
    if (err != cudaSuccess) {
        mpx_cuda_scratch_free(chk);
        return cuop_launch_fail(BWD, "gradient", dconf, err);
    }
    char rule[96];
    snprintf(rule, sizeof rule, ", expected -1..C-1 = %lld (the forward's saved target)",
             (long long)c - 1);
    return cuop_check_defer(chk, target, BWD, "target", rule);
}
