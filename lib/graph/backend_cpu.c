/* backend_cpu.c — the CPU backend: host memory, the numerics of lib/numerics, the ops of lib/ops.
 *
 * The operators compute in FP32; FP16/BF16 storage is emulated by the executor (decode to FP32
 * scratch, round on write), so `native` accepts F32 alone — except for the classes of operators
 * that take 16-bit storage themselves (op_direct_io): the GEMM family where oneDNN multiplies it
 * natively here, batch-norm, ReLU and add everywhere. The backend's state is the operators'
 * context (ops.h: mpx_cpu_ctx: oneDNN's caches, scratch, switches), made with the backend on
 * first use and reached through the backend every entry is handed.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/graph/als_merge.h"
#include "mpx/backend.h"

/* The entries a device backend would wait on, counted (backend.h: host_waits). Relaxed: only
 * the count matters, and the executor calls the backend from one thread. */
static _Atomic int64_t g_waits;
static void count_wait(void) { atomic_fetch_add_explicit(&g_waits, 1, memory_order_relaxed); }
static int64_t cpu_host_waits(const mpx_backend *be) {
    (void)be;
    return atomic_load_explicit(&g_waits, memory_order_relaxed);
}
/* Every CPU entry reports its failure directly or cannot fail. */
static mpx_status cpu_last_error(const mpx_backend *be) {
    (void)be;
    return MPX_OK;
}

/* The CPU backend runs synchronously: nothing to wait for, but a device would. */
static void cpu_sync(const mpx_backend *be) {
    (void)be;
    count_wait();
}

static int cpu_native(const mpx_backend *be, mpx_dtype t) {
    (void)be;
    return t == MPX_F32 || t == MPX_I32;
}

static void *cpu_alloc(const mpx_backend *be, size_t bytes) {
    (void)be;
    /* 64-byte alignment for AVX-512 loads; zeroed like the contract says. */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

static void cpu_free(const mpx_backend *be, void *p) {
    (void)be;
    free(p);
}
static void cpu_zero(const mpx_backend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}
static void cpu_copy(const mpx_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memmove(dst, src, bytes);
}
static void cpu_download(const mpx_backend *be, void *host, const void *src, size_t bytes) {
    (void)be;
    count_wait();
    memmove(host, src, bytes);
}
static void cpu_moments(const mpx_backend *be, const float *x, size_t n, mpx_moments *out) {
    (void)be;
    count_wait();
    mpx_moments_f32(x, n, out);
}
static void cpu_moments_to(const mpx_backend *be, const float *x, size_t n, mpx_moments *out) {
    (void)be;
    mpx_moments_f32(x, n, out);
}
static float cpu_abs_quantile(const mpx_backend *be, const float *x, size_t n, double q,
                              float scale) {
    (void)be;
    count_wait();
    return mpx_abs_quantile_ceil_pow2(x, n, q, scale);
}
static float cpu_absmax(const mpx_backend *be, const float *x, size_t n) {
    (void)be;
    count_wait();
    return mpx_absmax_f32(x, n);
}
static void cpu_accumulate_absmax(const mpx_backend *be, float *acc, const float *x, size_t n,
                                  float scale, float *acc_absmax, float *x_absmax) {
    (void)be;
    mpx_accumulate_absmax_f32(acc, x, n, scale, acc_absmax, x_absmax);
}
static void cpu_absmax_to(const mpx_backend *be, const float *x, size_t n, float *out) {
    (void)be;
    *out = mpx_absmax_f32(x, n);
}
static void cpu_merge_check(const mpx_backend *be, const float *absmax, int k,
                            const double *pending, const double *S, double target, double u_max,
                            uint32_t *misses) {
    (void)be;
    *misses += !mpx_als_merge_keeps(absmax, k, pending, S, target, u_max);
}

static void cpu_unscale_accumulate(const mpx_backend *be, mpx_dtype g_dtype, const void *g,
                                   size_t n, double inv_scale, int round_to_storage, float *acc,
                                   uint64_t *nonfinite) {
    (void)be;
    /* Blocks of decoded values keep this a single pass over g without a full FP32 copy. */
    enum { BLOCK = 4096 };
    const size_t esize = mpx_dtype_size(g_dtype);
    const float inv = (float)inv_scale;
    const size_t nblocks = (n + BLOCK - 1) / BLOCK;
    int64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n > 65536)
    for (size_t b = 0; b < nblocks; b++) {
        float tmp[BLOCK];
        size_t lo = b * BLOCK, len = n - lo < BLOCK ? n - lo : BLOCK;
        mpx_decode(g_dtype, (const char *)g + lo * esize, tmp, len);
        for (size_t i = 0; i < len; i++) {
            float v = tmp[i] * inv;
            if (round_to_storage) v = mpx_round_to(g_dtype, v);
            bad += !isfinite(v);
            acc[lo + i] += v;
        }
    }
    *nonfinite += (uint64_t)bad;
}

static void cpu_sumsq(const mpx_backend *be, const float *x, size_t n, double *out) {
    (void)be;
    /* Fixed blocks reduced in order: the same result whatever the thread count. */
    enum { BLOCK = 4096 };
    size_t nb = (n + BLOCK - 1) / BLOCK;
    double total = 0;
    for (size_t b = 0; b < nb; b++) {
        double s = 0;
        size_t hi = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
        for (size_t i = b * BLOCK; i < hi; i++) s += (double)x[i] * x[i];
        total += s;
    }
    *out = total;
}

/* SGD (PyTorch semantics): g' = clip g + wd w; v = m v + g'; w -= lr (nesterov ? g' + m v : v). */
static void cpu_sgd_update(const mpx_backend *be, float *w, const float *g, float *v, size_t n,
                           const mpx_sgd_step *s) {
    (void)be;
    const float lr = s->lr, mom = s->momentum, wd = s->wd, clip = s->clip;
    const int nest = s->nesterov;
    float *delta = s->delta;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) {
        float gk = g[k] * clip + wd * w[k];
        v[k] = mom * v[k] + gk;
        const float d = lr * (nest ? gk + mom * v[k] : v[k]);
        w[k] -= d;
        if (delta) delta[k] = d;
    }
}

/* Element k of the Adam moments update; returns the AdamW direction (bias-corrected moment
 * ratio plus decoupled weight decay) that AdamW applies with lr and LAMB with its trust ratio. */
static inline float adam_direction(float w, float g, float *m, float *v, const mpx_adamw_step *s) {
    float gk = g * s->clip;
    *m = s->beta1 * *m + s->one_minus_beta1 * gk;
    *v = s->beta2 * *v + s->one_minus_beta2 * gk * gk;
    float mhat = *m / s->bias_corr1, vhat = *v / s->bias_corr2;
    return mhat / (sqrtf(vhat) + s->eps) + s->wd * w;
}

/* AdamW (decoupled weight decay, bias-corrected moments). */
static void cpu_adamw_update(const mpx_backend *be, float *w, const float *g, float *m, float *v,
                             size_t n, const mpx_adamw_step *s) {
    (void)be;
    float *delta = s->delta;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) {
        const float d = s->lr * adam_direction(w[k], g[k], &m[k], &v[k], s);
        w[k] -= d;
        if (delta) delta[k] = d;
    }
}

static void cpu_lamb_direction(const mpx_backend *be, const float *w, float *g, float *m, float *v,
                               size_t n, const mpx_adamw_step *s) {
    (void)be;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) g[k] = adam_direction(w[k], g[k], &m[k], &v[k], s);
}

static void cpu_scaled_sub(const mpx_backend *be, float *w, const float *u, size_t n, float a,
                           float *delta) {
    (void)be;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) {
        const float d = a * u[k];
        w[k] -= d;
        if (delta) delta[k] = d;
    }
}

/* The GEMM family multiplies 16-bit storage natively where oneDNN can on this CPU (BF16 with
 * AVX512_BF16 or AMX; F16 where oneDNN has it): ops.h, mpx_gemm_lowp_native. Batch-norm, ReLU
 * and add take F16 and BF16 tensors on every CPU (tile.h: decoded and rounded tile by tile as
 * they stream them, one pass over memory instead of three). */
static mpx_cpu_ctx *ctx_of(const mpx_backend *be) { return be->state; }

static int cpu_op_direct_io(const mpx_backend *be, mpx_op_class c, mpx_dtype t) {
    switch (c) {
    case MPX_OPC_GEMM: return mpx_gemm_lowp_native(ctx_of(be), t);
    case MPX_OPC_BATCHNORM:
    case MPX_OPC_RELU:
    case MPX_OPC_ADD: return t == MPX_F16 || t == MPX_BF16;
    default: return 0;
    }
}

/* ---- the table's entries that are library functions, with the backend they belong to (its
 * state: the operators' context) ---- */

static void cpu_cast(const mpx_backend *be, const mpx_cast_spec *spec, const float *src, void *dst,
                     size_t n) {
    (void)be;
    mpx_cast(spec, src, dst, n);
}

static void cpu_decode(const mpx_backend *be, mpx_dtype src_dtype, const void *src, float *dst,
                       size_t n) {
    (void)be;
    mpx_decode(src_dtype, src, dst, n);
}

static void cpu_fp8_quantize(const mpx_backend *be, mpx_dtype fmt, float scale, const float *src,
                             float *dst, size_t n, mpx_cast_stats *stats) {
    (void)be;
    mpx_fp8_quantize(fmt, scale, src, dst, n, stats);
}

static void cpu_mx_quantize(const mpx_backend *be, mpx_dtype fmt, mpx_mx_rule rule,
                            const float *src, float *dst, size_t n, size_t row,
                            mpx_cast_stats *stats, mpx_mx_scales *sc) {
    (void)be;
    mpx_mx_quantize(fmt, rule, src, dst, n, row, stats, sc);
}

static void cpu_mx_quantize_cols(const mpx_backend *be, mpx_dtype fmt, mpx_mx_rule rule,
                                 const float *src, float *dst, size_t batches, size_t rows,
                                 size_t cols, mpx_cast_stats *stats, mpx_mx_scales *sc) {
    (void)be;
    mpx_mx_quantize_cols(fmt, rule, src, dst, batches, rows, cols, stats, sc);
}

static void cpu_fixed_quantize(const mpx_backend *be, const mpx_fixed_spec *s, const float *src,
                               float *dst, size_t n, mpx_cast_stats *stats) {
    (void)be;
    mpx_fixed_quantize(s, src, dst, n, stats);
}

static void cpu_accumulate(const mpx_backend *be, float *acc, const float *x, size_t n,
                           float scale) {
    (void)be;
    mpx_accumulate_f32(acc, x, n, scale);
}

static mpx_status cpu_conv2d_forward(const mpx_backend *be, const mpx_conv2d_attr *a,
                                     const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                     mpx_tensor *y) {
    return mpx_conv2d_forward_cpu(ctx_of(be), a, x, w, b, y);
}

static mpx_status cpu_conv2d_backward_data(const mpx_backend *be, const mpx_conv2d_attr *a,
                                           const mpx_tensor *dy, const mpx_tensor *w,
                                           mpx_tensor *dx) {
    return mpx_conv2d_backward_data_cpu(ctx_of(be), a, dy, w, dx);
}

static mpx_status cpu_conv2d_backward_weights(const mpx_backend *be, const mpx_conv2d_attr *a,
                                              const mpx_tensor *dy, const mpx_tensor *x,
                                              mpx_tensor *dw, mpx_tensor *db) {
    return mpx_conv2d_backward_weights_cpu(ctx_of(be), a, dy, x, dw, db);
}

static mpx_status cpu_batchnorm_forward(const mpx_backend *be, const mpx_batchnorm_attr *a,
                                        const mpx_tensor *x, const mpx_tensor *gamma,
                                        const mpx_tensor *beta, mpx_tensor *running_mean,
                                        mpx_tensor *running_var, mpx_tensor *save_mean,
                                        mpx_tensor *save_invstd, mpx_tensor *y) {
    (void)be;
    return mpx_batchnorm_forward_cpu(a, x, gamma, beta, running_mean, running_var, save_mean,
                                     save_invstd, y);
}

static mpx_status cpu_batchnorm_backward(const mpx_backend *be, const mpx_batchnorm_attr *a,
                                         const mpx_tensor *dy, const mpx_tensor *x,
                                         const mpx_tensor *gamma, const mpx_tensor *beta,
                                         const mpx_tensor *save_mean, const mpx_tensor *save_invstd,
                                         mpx_tensor *dx, mpx_tensor *dgamma, mpx_tensor *dbeta) {
    (void)be;
    return mpx_batchnorm_backward_cpu(a, dy, x, gamma, beta, save_mean, save_invstd, dx, dgamma,
                                      dbeta);
}

static mpx_status cpu_relu_forward(const mpx_backend *be, const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_relu_forward_cpu(x, y);
}

static mpx_status cpu_relu_backward(const mpx_backend *be, const mpx_tensor *dy,
                                    const mpx_tensor *y, mpx_tensor *dx) {
    (void)be;
    return mpx_relu_backward_cpu(dy, y, dx);
}

static mpx_status cpu_maxpool2d_forward(const mpx_backend *be, const mpx_pool2d_attr *a,
                                        const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_maxpool2d_forward_cpu(a, x, y);
}

static mpx_status cpu_maxpool2d_backward(const mpx_backend *be, const mpx_pool2d_attr *a,
                                         const mpx_tensor *dy, const mpx_tensor *x,
                                         const mpx_tensor *y, mpx_tensor *dx) {
    (void)be;
    return mpx_maxpool2d_backward_cpu(a, dy, x, y, dx);
}

static mpx_status cpu_avgpool_global_forward(const mpx_backend *be, const mpx_tensor *x,
                                             mpx_tensor *y) {
    (void)be;
    return mpx_avgpool_global_forward_cpu(x, y);
}

static mpx_status cpu_avgpool_global_backward(const mpx_backend *be, const mpx_tensor *dy,
                                              mpx_tensor *dx) {
    (void)be;
    return mpx_avgpool_global_backward_cpu(dy, dx);
}

static mpx_status cpu_linear_forward(const mpx_backend *be, const mpx_tensor *x,
                                     const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y) {
    return mpx_linear_forward_cpu(ctx_of(be), x, w, b, y);
}

static mpx_status cpu_linear_backward_data(const mpx_backend *be, const mpx_tensor *dy,
                                           const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_linear_backward_data_cpu(ctx_of(be), dy, w, dx);
}

static mpx_status cpu_linear_backward_weights(const mpx_backend *be, const mpx_tensor *dy,
                                              const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db) {
    return mpx_linear_backward_weights_cpu(ctx_of(be), dy, x, dw, db);
}

static mpx_status cpu_add_forward(const mpx_backend *be, const mpx_tensor *a, const mpx_tensor *b,
                                  mpx_tensor *y) {
    (void)be;
    return mpx_add_forward_cpu(a, b, y);
}

static mpx_status cpu_add_relu_forward(const mpx_backend *be, const mpx_tensor *a,
                                       const mpx_tensor *b, mpx_tensor *y) {
    (void)be;
    return mpx_add_relu_forward_cpu(a, b, y);
}

static mpx_status cpu_softmax_ce_forward(const mpx_backend *be, const mpx_tensor *logits,
                                         const mpx_tensor *labels, mpx_tensor *loss,
                                         mpx_tensor *probs) {
    (void)be;
    return mpx_softmax_ce_forward_cpu(logits, labels, loss, probs);
}

static mpx_status cpu_softmax_ce_backward(const mpx_backend *be, const mpx_tensor *probs,
                                          const mpx_tensor *labels, mpx_tensor *dlogits) {
    (void)be;
    return mpx_softmax_ce_backward_cpu(probs, labels, dlogits);
}

static mpx_status cpu_linear_t_forward(const mpx_backend *be, const mpx_tensor *x,
                                       const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y) {
    return mpx_linear_t_forward_cpu(ctx_of(be), x, w, b, y);
}

static mpx_status cpu_linear_t_backward_data(const mpx_backend *be, const mpx_tensor *dy,
                                             const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_linear_t_backward_data_cpu(ctx_of(be), dy, w, dx);
}

static mpx_status cpu_linear_t_backward_weights(const mpx_backend *be, const mpx_tensor *dy,
                                                const mpx_tensor *x, mpx_tensor *dw,
                                                mpx_tensor *db) {
    return mpx_linear_t_backward_weights_cpu(ctx_of(be), dy, x, dw, db);
}

static mpx_status cpu_linear_forward_rows(const mpx_backend *be, const mpx_tensor *x,
                                          const mpx_tensor *w, const mpx_tensor *b,
                                          const mpx_tensor *mask, mpx_tensor *y) {
    return mpx_linear_forward_rows_cpu(ctx_of(be), x, w, b, mask, y);
}

static mpx_status cpu_linear_t_forward_rows(const mpx_backend *be, const mpx_tensor *x,
                                            const mpx_tensor *w, const mpx_tensor *b,
                                            const mpx_tensor *mask, mpx_tensor *y) {
    return mpx_linear_t_forward_rows_cpu(ctx_of(be), x, w, b, mask, y);
}

static double cpu_skipped_flops(const mpx_backend *be) {
    return mpx_linear_skipped_flops(ctx_of(be));
}

static mpx_status cpu_layernorm_forward(const mpx_backend *be, float eps, const mpx_tensor *x,
                                        const mpx_tensor *gamma, const mpx_tensor *beta,
                                        mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                        mpx_tensor *y) {
    (void)be;
    return mpx_layernorm_forward_cpu(eps, x, gamma, beta, save_mean, save_invstd, y);
}

static mpx_status cpu_l2norm_forward(const mpx_backend *be, float eps, const mpx_tensor *x,
                                      const mpx_tensor *gamma, mpx_tensor *save_inv,
                                      mpx_tensor *y) {
    (void)be;
    return mpx_l2norm_forward_cpu(eps, x, gamma, save_inv, y);
}

static mpx_status cpu_l2norm_backward(const mpx_backend *be, const mpx_tensor *dy,
                                       const mpx_tensor *x, const mpx_tensor *gamma,
                                       const mpx_tensor *save_inv, mpx_tensor *dx,
                                       mpx_tensor *dgamma) {
    (void)be;
    return mpx_l2norm_backward_cpu(dy, x, gamma, save_inv, dx, dgamma);
}

static mpx_status cpu_layernorm_backward(const mpx_backend *be, const mpx_tensor *dy,
                                         const mpx_tensor *x, const mpx_tensor *gamma,
                                         const mpx_tensor *save_mean, const mpx_tensor *save_invstd,
                                         mpx_tensor *dx, mpx_tensor *dgamma, mpx_tensor *dbeta) {
    (void)be;
    return mpx_layernorm_backward_cpu(dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

static mpx_status cpu_gelu_forward(const mpx_backend *be, const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_gelu_forward_cpu(x, y);
}

static mpx_status cpu_gelu_backward(const mpx_backend *be, const mpx_tensor *dy,
                                    const mpx_tensor *x, mpx_tensor *dx) {
    (void)be;
    return mpx_gelu_backward_cpu(dy, x, dx);
}

static mpx_status cpu_embedding_forward(const mpx_backend *be, const mpx_tensor *ids,
                                        const mpx_tensor *table, mpx_tensor *y) {
    (void)be;
    return mpx_embedding_forward_cpu(ids, table, y);
}

static mpx_status cpu_embedding_backward(const mpx_backend *be, const mpx_tensor *dy,
                                         const mpx_tensor *ids, mpx_tensor *dtable) {
    (void)be;
    return mpx_embedding_backward_cpu(dy, ids, dtable);
}

static mpx_status cpu_bmm_forward(const mpx_backend *be, const mpx_bmm_attr *at,
                                  const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *c) {
    return mpx_bmm_forward_cpu(ctx_of(be), at, a, b, c);
}

static mpx_status cpu_bmm_backward(const mpx_backend *be, const mpx_bmm_attr *at,
                                   const mpx_tensor *dc, const mpx_tensor *a, const mpx_tensor *b,
                                   mpx_tensor *da, mpx_tensor *db) {
    return mpx_bmm_backward_cpu(ctx_of(be), at, dc, a, b, da, db);
}

static mpx_status cpu_softmax_forward(const mpx_backend *be, float scale, const mpx_tensor *x,
                                      const mpx_tensor *mask, mpx_tensor *y) {
    (void)be;
    return mpx_softmax_forward_cpu(scale, x, mask, y);
}

static mpx_status cpu_softmax_backward(const mpx_backend *be, float scale, const mpx_tensor *dy,
                                       const mpx_tensor *y, mpx_tensor *dx) {
    (void)be;
    return mpx_softmax_backward_cpu(scale, dy, y, dx);
}

static mpx_status cpu_dropout_forward(const mpx_backend *be, const mpx_dropout_attr *a,
                                      const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_dropout_forward_cpu(a, x, y);
}

static mpx_status cpu_dropout_backward(const mpx_backend *be, const mpx_dropout_attr *a,
                                       const mpx_tensor *dy, mpx_tensor *dx) {
    (void)be;
    return mpx_dropout_backward_cpu(a, dy, dx);
}

static mpx_status cpu_permute_forward(const mpx_backend *be, const int *perm, const mpx_tensor *x,
                                      mpx_tensor *y) {
    (void)be;
    return mpx_permute_forward_cpu(perm, x, y);
}

static mpx_status cpu_permute_backward(const mpx_backend *be, const int *perm, const mpx_tensor *dy,
                                       mpx_tensor *dx) {
    (void)be;
    return mpx_permute_backward_cpu(perm, dy, dx);
}

static mpx_status cpu_multibox_forward(const mpx_backend *be, const mpx_multibox_attr *a,
                                       const mpx_tensor *conf, const mpx_tensor *loc,
                                       const mpx_tensor *priors, const mpx_tensor *gt_boxes,
                                       const mpx_tensor *gt_labels, mpx_tensor *workspace,
                                       mpx_tensor *loss, mpx_tensor *probs, mpx_tensor *target,
                                       mpx_tensor *loc_target) {
    (void)be;
    return mpx_multibox_forward_cpu(a, conf, loc, priors, gt_boxes, gt_labels, workspace, loss,
                                    probs, target, loc_target);
}

static mpx_status cpu_multibox_backward(const mpx_backend *be, const mpx_multibox_attr *a,
                                        const mpx_tensor *probs, const mpx_tensor *target,
                                        const mpx_tensor *loc, const mpx_tensor *loc_target,
                                        mpx_tensor *dconf, mpx_tensor *dloc) {
    (void)be;
    return mpx_multibox_backward_cpu(a, probs, target, loc, loc_target, dconf, dloc);
}

/* .state: set once, by mpx_backend_cpu */
static mpx_backend g_cpu = {
    .name = "cpu",
    .device = MPX_DEV_CPU,
    .native = cpu_native,
    .op_direct_io = cpu_op_direct_io,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload = cpu_copy,
    .download = cpu_download,
    .sync = cpu_sync,
    .host_waits = cpu_host_waits,
    .last_error = cpu_last_error,
    .cast = cpu_cast,
    .decode = cpu_decode,
    .fp8_quantize = cpu_fp8_quantize,
    .mx_quantize = cpu_mx_quantize,
    .mx_quantize_cols = cpu_mx_quantize_cols,
    .fixed_quantize = cpu_fixed_quantize,
    .moments = cpu_moments,
    .moments_to = cpu_moments_to,
    .abs_quantile = cpu_abs_quantile,
    .absmax = cpu_absmax,
    .accumulate = cpu_accumulate,
    .accumulate_absmax = cpu_accumulate_absmax,
    .absmax_to = cpu_absmax_to,
    .merge_check = cpu_merge_check,
    .unscale_accumulate = cpu_unscale_accumulate,
    .sumsq = cpu_sumsq,
    .sgd_update = cpu_sgd_update,
    .adamw_update = cpu_adamw_update,
    .lamb_direction = cpu_lamb_direction,
    .scaled_sub = cpu_scaled_sub,
    .conv2d_forward = cpu_conv2d_forward,
    .conv2d_backward_data = cpu_conv2d_backward_data,
    .conv2d_backward_weights = cpu_conv2d_backward_weights,
    .batchnorm_forward = cpu_batchnorm_forward,
    .batchnorm_backward = cpu_batchnorm_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .maxpool2d_forward = cpu_maxpool2d_forward,
    .maxpool2d_backward = cpu_maxpool2d_backward,
    .avgpool_global_forward = cpu_avgpool_global_forward,
    .avgpool_global_backward = cpu_avgpool_global_backward,
    .linear_forward = cpu_linear_forward,
    .linear_backward_data = cpu_linear_backward_data,
    .linear_backward_weights = cpu_linear_backward_weights,
    .add_forward = cpu_add_forward,
    .add_relu_forward = cpu_add_relu_forward,
    .softmax_ce_forward = cpu_softmax_ce_forward,
    .softmax_ce_backward = cpu_softmax_ce_backward,
    .linear_t_forward = cpu_linear_t_forward,
    .linear_t_backward_data = cpu_linear_t_backward_data,
    .linear_t_backward_weights = cpu_linear_t_backward_weights,
    .linear_forward_rows = cpu_linear_forward_rows,
    .linear_t_forward_rows = cpu_linear_t_forward_rows,
    .skipped_flops = cpu_skipped_flops,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .l2norm_forward = cpu_l2norm_forward,
    .l2norm_backward = cpu_l2norm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .bmm_forward = cpu_bmm_forward,
    .bmm_backward = cpu_bmm_backward,
    .softmax_forward = cpu_softmax_forward,
    .softmax_backward = cpu_softmax_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .permute_forward = cpu_permute_forward,
    .permute_backward = cpu_permute_backward,
    .multibox_forward = cpu_multibox_forward,
    .multibox_backward = cpu_multibox_backward,
};

static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static void cpu_make(void) { g_cpu.state = mpx_cpu_ctx_create(); }

const mpx_backend *mpx_backend_cpu(void) {
    pthread_once(&g_cpu_once, cpu_make);
    return g_cpu.state ? &g_cpu : NULL;
}

mpx_cpu_ctx *mpx_backend_cpu_ctx(const mpx_backend *be) {
    return be && be->device == MPX_DEV_CPU ? be->state : NULL;
}
