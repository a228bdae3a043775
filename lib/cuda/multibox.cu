/* multibox.cu — the SSD MultiBox loss (lib/ops/multibox.c) for the CUDA backend.
 *
 * Forward: HOST-STAGED, not a GPU port. The hard-negative mining ranks every non-positive
 * prior by its background loss lse - x[0], computed with glibc's expf; CUDA's expf differs in
 * the last bits, which can change the kept set. To keep the CPU's choice exactly, the forward
 * copies its inputs to the host (decoded to FP32, exact), runs mpx_multibox_forward_cpu there
 * with a host workspace, and uploads probs, target, loc_target and the loss (each rounded once
 * into its dtype). This is a synchronising round trip of the [B, P, C] confidences: correct,
 * but not fast. The device `workspace` tensor is checked as on the CPU and left unused.
 *
 * Backward: on the device, without a wait. One kernel checks target (-1..C-1; the first
 * offending position by integer atomicMin) and counts the positives N (integer atomics); a
 * second kernel reads N from that count and writes dconf = (probs - onehot) / N on counted
 * priors and dloc = w clamp(loc - loc_target, -1, 1) / N on positives with the CPU's FP32
 * operations in the CPU's order (IEEE division, no FMA), so the gradients are the CPU's bits,
 * rounded once into their dtype. A bad target is reported at the backend's next wait
 * (cuop_check_defer), naming its position and value.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"
#include "mpx/numerics.h"
#include "mpx/ssd.h"

namespace {

const char *const FWD = "multibox forward";
const char *const BWD = "multibox backward";

/* Host copies of device tensors, freed at scope exit. */
struct HostBufs {
    void *p[24] = {};
    int n = 0;
    void *take(size_t bytes) {
        void *q = calloc(1, bytes ? bytes : 1);
        if (q) p[n++] = q;
        return q;
    }
    ~HostBufs() {
        for (int i = 0; i < n; i++)
            free(p[i]);
    }
};

/* A host view of t: F32 values (floats decoded) or the raw I32 values. */
mpx_status to_host(const mpx_tensor *t, HostBufs *h, mpx_tensor *out, int download) {
    const size_t n = (size_t)mpx_tensor_numel(t), bytes = mpx_tensor_bytes(t);
    *out = *t;
    out->device = MPX_DEV_CPU;
    const int is_float = t->dtype != MPX_I32 && t->dtype != MPX_U8;
    if (is_float) out->dtype = MPX_F32;
    void *dst = h->take(is_float ? n * sizeof(float) : bytes);
    if (!dst) return mpx_fail(MPX_ERR_NOMEM, "%s: out of host memory (%zu bytes)", FWD, bytes);
    out->data = dst;
    if (!download) return MPX_OK;
    if (!is_float) {
        mpx_cuda_count_wait();
        MPX_CUDA_TRY(cudaMemcpy(dst, t->data, bytes, cudaMemcpyDeviceToHost));
        return MPX_OK;
    }
    void *raw = h->take(bytes);
    if (!raw) return mpx_fail(MPX_ERR_NOMEM, "%s: out of host memory (%zu bytes)", FWD, bytes);
    mpx_cuda_count_wait();
    MPX_CUDA_TRY(cudaMemcpy(raw, t->data, bytes, cudaMemcpyDeviceToHost));
    mpx_decode(t->dtype, raw, (float *)dst, n);
    return MPX_OK;
}

/* Upload the host result `h` into device tensor t (floats rounded once into t's dtype). */
mpx_status from_host(const mpx_tensor *h, mpx_tensor *t) {
    const size_t n = (size_t)mpx_tensor_numel(t), bytes = mpx_tensor_bytes(t);
    if (t->dtype == MPX_I32 || t->dtype == MPX_F32) {
        MPX_CUDA_TRY(cudaMemcpy(t->data, h->data, bytes, cudaMemcpyHostToDevice));
        return MPX_OK;
    }
    void *raw = malloc(bytes ? bytes : 1);
    if (!raw) return mpx_fail(MPX_ERR_NOMEM, "%s: out of host memory (%zu bytes)", FWD, bytes);
    mpx_encode(t->dtype, (const float *)h->data, raw, n);
    cudaError_t err = cudaMemcpy(t->data, raw, bytes, cudaMemcpyHostToDevice);
    free(raw);
    MPX_CUDA_TRY(err);
    return MPX_OK;
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

extern "C" mpx_status mpx_multibox_forward_cuda(const mpx_multibox_attr *a, const mpx_tensor *conf,
                                                const mpx_tensor *loc, const mpx_tensor *priors,
                                                const mpx_tensor *gt_boxes,
                                                const mpx_tensor *gt_labels,
                                                mpx_tensor *workspace, mpx_tensor *loss,
                                                mpx_tensor *probs, mpx_tensor *target,
                                                mpx_tensor *loc_target) {
    /* Device-side checks; the shapes, attributes and GT values are checked by the CPU op. */
    MPX_TRY(cuop_expect_float(FWD, "conf", conf, 3));
    MPX_TRY(cuop_expect_float(FWD, "loc", loc, 3));
    MPX_TRY(cuop_expect_float(FWD, "priors", priors, 2));
    MPX_TRY(cuop_expect_float(FWD, "gt_boxes", gt_boxes, 3));
    MPX_TRY(cuop_expect(FWD, "gt_labels", gt_labels, MPX_I32, 2));
    MPX_TRY(cuop_expect(FWD, "workspace", workspace, MPX_U8, 1));
    MPX_TRY(cuop_expect_float(FWD, "loss", loss, -1));
    MPX_TRY(cuop_expect_float(FWD, "probs", probs, 3));
    MPX_TRY(cuop_expect(FWD, "target", target, MPX_I32, 2));
    MPX_TRY(cuop_expect_float(FWD, "loc_target", loc_target, 3));
    const int64_t nb = conf->shape[0], p = conf->shape[1], g = gt_boxes->shape[1];
    const size_t need = mpx_multibox_workspace_bytes(nb, p, g);
    if ((size_t)workspace->shape[0] < need)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: workspace has %lld bytes, needs %zu bytes (B = %lld, P = %lld, "
                        "G = %lld)",
                        FWD, (long long)workspace->shape[0], need, (long long)nb, (long long)p,
                        (long long)g);
    HostBufs h;
    mpx_tensor hc, hl, hp, hg, hlab, hloss, hprobs, htg, hlt;
    MPX_TRY(to_host(conf, &h, &hc, 1));
    MPX_TRY(to_host(loc, &h, &hl, 1));
    MPX_TRY(to_host(priors, &h, &hp, 1));
    MPX_TRY(to_host(gt_boxes, &h, &hg, 1));
    MPX_TRY(to_host(gt_labels, &h, &hlab, 1));
    MPX_TRY(to_host(loss, &h, &hloss, 0));
    MPX_TRY(to_host(probs, &h, &hprobs, 0));
    MPX_TRY(to_host(target, &h, &htg, 0));
    MPX_TRY(to_host(loc_target, &h, &hlt, 0));
    void *ws = h.take(need + 8);
    if (!ws) return mpx_fail(MPX_ERR_NOMEM, "%s: out of host memory (%zu bytes)", FWD, need);
    mpx_tensor hws = *workspace;
    hws.device = MPX_DEV_CPU;
    hws.shape[0] = (int64_t)need;
    hws.data = ws; /* calloc: aligned for any fundamental type */
    MPX_TRY(mpx_multibox_forward_cpu(a, &hc, &hl, &hp, &hg, &hlab, &hws, &hloss, &hprobs, &htg,
                                     &hlt));
    MPX_TRY(from_host(&hprobs, probs));
    MPX_TRY(from_host(&htg, target));
    MPX_TRY(from_host(&hlt, loc_target));
    MPX_TRY(from_host(&hloss, loss));
    return MPX_OK;
}

extern "C" mpx_status mpx_multibox_backward_cuda(const mpx_multibox_attr *a,
                                                 const mpx_tensor *probs,
                                                 const mpx_tensor *target, const mpx_tensor *loc,
                                                 const mpx_tensor *loc_target, mpx_tensor *dconf,
                                                 mpx_tensor *dloc) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attributes are NULL", BWD);
    if (!(a->iou_threshold > 0 && a->iou_threshold <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: iou_threshold = %g, expected (0, 1]", BWD,
                        a->iou_threshold);
    if (!(a->var_xy > 0 && a->var_wh > 0 && isfinite(a->var_xy) && isfinite(a->var_wh)))
        return mpx_fail(MPX_ERR_INPUT, "%s: variances (%g, %g) must be finite and > 0", BWD,
                        a->var_xy, a->var_wh);
    if (a->neg_per_pos < 0 || a->min_neg < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s: neg_per_pos = %d, min_neg = %d must be >= 0", BWD,
                        a->neg_per_pos, a->min_neg);
    if (!(a->loc_weight >= 0 && isfinite(a->loc_weight)))
        return mpx_fail(MPX_ERR_INPUT, "%s: loc_weight = %g must be finite and >= 0", BWD,
                        a->loc_weight);
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
