/* backend_cuda.cu — the CUDA backend table: device memory, the counted cast, the numerics
 * (elementwise.cu, moments.cu), the optimizer updates (optim.cu) and the operators: the GEMM
 * family on cuBLAS (gemm.cu: linear, linear_t, bmm), convolution on cuDNN (conv.cu), and own
 * kernels for ReLU, add and GELU (activations.cu), dropout (dropout.cu), softmax and layer-norm
 * (norm.cu), batch-norm (batchnorm.cu), embedding (embedding.cu), softmax cross-entropy
 * (loss.cu), permute (permute.cu), max-pool and global average pool (pool.cu), and the MultiBox
 * loss (multibox.cu: matching, mining and loss on the device, with the CPU op's arithmetic from
 * lib/ops/ssd_box.h). The operators return their status directly.
 * The other entries cannot return errors, so failures are remembered (the message is set,
 * mpx_backend_cuda_error(), the table's last_error, reports the first one; the executor asks
 * after every pass) and the entry returns something the caller notices where it can:
 * allocation NULL (which the graph reports with the arena it was planning), a reduction NaN.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "lib/cuda/check.cuh"
#include "lib/cuda/ops.cuh"
#include "mpx/backend.h"
#include "mpx/cuda.h"

static thread_local mpx_status g_error = MPX_OK;

/* Keep the first failure since mpx_backend_cuda_error() last looked. */
static bool failed(mpx_status st) {
    if (st != MPX_OK && g_error == MPX_OK) g_error = st;
    return st != MPX_OK;
}
/* A memory function's CUDA call: remembered when it fails. */
#define REMEMBER(expr)                                                                             \
    do {                                                                                           \
        cudaError_t remember_err_ = (expr);                                                        \
        if (remember_err_ != cudaSuccess)                                                          \
            failed(mpx_cuda_fail(remember_err_, __FILE__, __LINE__, #expr));                       \
    } while (0)

extern "C" mpx_status mpx_backend_cuda_error(void) {
    mpx_status st = g_error;
    g_error = MPX_OK;
    return st;
}

/* The dtypes the operators compute in natively. */
static int cuda_native(const mpx_backend *be, mpx_dtype t) {
    (void)be;
    return t == MPX_F32 || t == MPX_I32;
}

/* Every operator here loads F16/BF16 tensors exactly and rounds its FP32 result once to nearest
 * even into a 16-bit output (tests/cuda check each against the CPU op in every storage dtype and
 * in the executor's mixes), so the executor hands over 16-bit storage instead of decoding it
 * into FP32 device scratch and rounding it back: one pass over memory less per view. */
static int cuda_direct_io(const mpx_backend *be, mpx_dtype t) {
    (void)be;
    return t == MPX_F16 || t == MPX_BF16;
}

static void *cuda_alloc(const mpx_backend *be, size_t bytes) {
    (void)be;
    void *p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    if (cudaMemset(p, 0, bytes ? bytes : 64) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return nullptr;
    }
    return p;
}

static void cuda_free(const mpx_backend *be, void *p) {
    (void)be;
    REMEMBER(cudaFree(p));
}
static void cuda_zero(const mpx_backend *be, void *p, size_t bytes) {
    (void)be;
    REMEMBER(cudaMemsetAsync(p, 0, bytes));
}
static void cuda_copy(const mpx_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    REMEMBER(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
/* A copy from pageable host memory synchronises the stream before it starts: a wait. */
/* Queued through pinned staging (staging.cu): no wait. */
static void cuda_upload(const mpx_backend *be, void *dst, const void *host, size_t bytes) {
    (void)be;
    failed(cuop_upload(dst, host, bytes));
}
/* Both wait for all queued work, so the operators' deferred index checks (ops.cuh) are read
 * here, and a failed one becomes the backend's error. */
static void cuda_download(const mpx_backend *be, void *host, const void *src, size_t bytes) {
    (void)be;
    mpx_cuda_count_wait();
    REMEMBER(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
    failed(cuop_checks_resolve());
}
static void cuda_sync(const mpx_backend *be) {
    (void)be;
    mpx_cuda_count_wait();
    REMEMBER(cudaDeviceSynchronize());
    failed(cuop_checks_resolve());
}
/* The backend's state: the operators' context (cuda.h: mpx_cuda_ctx). */
static mpx_cuda_ctx *ctx_of(const mpx_backend *be) { return (mpx_cuda_ctx *)be->state; }

static void cuda_gemm_operands(const mpx_backend *be, mpx_dtype exact) {
    failed(mpx_cuda_set_operand_format(ctx_of(be), exact));
}
static void cuda_cast(const mpx_backend *be, const mpx_cast_spec *spec, const float *src, void *dst,
                      size_t n) {
    (void)be;
    failed(mpx_cast_cuda(spec, src, dst, n));
}

/* ---- numerics (elementwise.cu, moments.cu) ---- */

static void cuda_decode(const mpx_backend *be, mpx_dtype src_dtype, const void *src, float *dst,
                        size_t n) {
    (void)be;
    failed(mpx_decode_cuda(src_dtype, src, dst, n));
}
static void cuda_fp8_quantize(const mpx_backend *be, mpx_dtype fmt, float scale, const float *src,
                              float *dst, size_t n, mpx_cast_stats *stats) {
    (void)be;
    failed(mpx_fp8_quantize_cuda(fmt, scale, src, dst, n, stats));
}
static void cuda_mx_quantize(const mpx_backend *be, mpx_dtype fmt, mpx_mx_rule rule,
                             const float *src, float *dst, size_t n, size_t row,
                             mpx_cast_stats *stats, mpx_mx_scales *sc) {
    (void)be;
    if (failed(mpx_mx_quantize_cuda(fmt, rule, src, dst, n, row, stats, sc)) && sc)
        memset(sc, 0, sizeof *sc);
}
static void cuda_mx_quantize_cols(const mpx_backend *be, mpx_dtype fmt, mpx_mx_rule rule,
                                  const float *src, float *dst, size_t batches, size_t rows,
                                  size_t cols, mpx_cast_stats *stats, mpx_mx_scales *sc) {
    (void)be;
    if (failed(mpx_mx_quantize_cols_cuda(fmt, rule, src, dst, batches, rows, cols, stats, sc)) &&
        sc)
        memset(sc, 0, sizeof *sc);
}
static void cuda_fixed_quantize(const mpx_backend *be, const mpx_fixed_spec *s, const float *src,
                                float *dst, size_t n, mpx_cast_stats *stats) {
    (void)be;
    failed(mpx_fixed_quantize_cuda(s, src, dst, n, stats));
}
static void cuda_moments(const mpx_backend *be, const float *x, size_t n, mpx_moments *out) {
    (void)be;
    if (failed(mpx_moments_cuda(x, n, out))) {
        out->n = n;
        out->mean = out->std = NAN;
        out->min = out->max = out->absmax = NAN;
        out->all_finite = 0;
    }
}
static void cuda_moments_to(const mpx_backend *be, const float *x, size_t n, mpx_moments *out) {
    (void)be;
    failed(mpx_moments_to_cuda(x, n, out));
}
static float cuda_abs_quantile(const mpx_backend *be, const float *x, size_t n, double q,
                               float scale) {
    (void)be;
    float r = NAN;
    return failed(mpx_abs_quantile_cuda(x, n, q, scale, &r)) ? NAN : r;
}
static float cuda_absmax(const mpx_backend *be, const float *x, size_t n) {
    (void)be;
    float r = NAN;
    return failed(mpx_absmax_cuda(x, n, &r)) ? NAN : r;
}
static void cuda_accumulate(const mpx_backend *be, float *acc, const float *x, size_t n,
                            float scale) {
    (void)be;
    failed(mpx_accumulate_cuda(acc, x, n, scale));
}
/* Composed from absmax_to (device results, no wait) and accumulate (three passes where the CPU
 * makes one): each is checked against the CPU, and a fused kernel is not worth its own check
 * until the merges show in a GPU profile. */
static void cuda_accumulate_absmax(const mpx_backend *be, float *acc, const float *x, size_t n,
                                   float scale, float *acc_absmax, float *x_absmax) {
    (void)be;
    if (acc_absmax) failed(mpx_absmax_to_cuda(acc, n, acc_absmax));
    if (x_absmax) failed(mpx_absmax_to_cuda(x, n, x_absmax));
    failed(mpx_accumulate_cuda(acc, x, n, scale));
}
static void cuda_absmax_to(const mpx_backend *be, const float *x, size_t n, float *out) {
    (void)be;
    failed(mpx_absmax_to_cuda(x, n, out));
}
static void cuda_merge_check(const mpx_backend *be, const float *absmax, int k,
                             const double *pending, const double *S, double target, double u_max,
                             uint32_t *misses) {
    (void)be;
    failed(mpx_merge_check_cuda(absmax, k, pending, S, target, u_max, misses));
}
/* A failure is remembered: last_error() reports it when the pass ends. */
static void cuda_unscale_accumulate(const mpx_backend *be, mpx_dtype g_dtype, const void *g,
                                    size_t n, double inv_scale, int round_to_storage, float *acc,
                                    uint64_t *nonfinite) {
    (void)be;
    failed(mpx_unscale_accumulate_cuda(g_dtype, g, n, inv_scale, round_to_storage, acc, nonfinite));
}

/* ---- optimizer updates (moments.cu for sumsq, optim.cu) ---- */

static void cuda_sumsq(const mpx_backend *be, const float *x, size_t n, double *out) {
    (void)be;
    failed(mpx_sumsq_cuda(x, n, out));
}
static void cuda_sgd_update(const mpx_backend *be, float *w, const float *g, float *v, size_t n,
                            const mpx_sgd_step *s) {
    (void)be;
    failed(mpx_sgd_update_cuda(w, g, v, n, s));
}
static void cuda_adamw_update(const mpx_backend *be, float *w, const float *g, float *m, float *v,
                              size_t n, const mpx_adamw_step *s) {
    (void)be;
    failed(mpx_adamw_update_cuda(w, g, m, v, n, s));
}
static void cuda_lamb_direction(const mpx_backend *be, const float *w, float *g, float *m, float *v,
                                size_t n, const mpx_adamw_step *s) {
    (void)be;
    failed(mpx_lamb_direction_cuda(w, g, m, v, n, s));
}
static void cuda_scaled_sub(const mpx_backend *be, float *w, const float *u, size_t n, float a,
                            float *delta) {
    (void)be;
    failed(mpx_scaled_sub_cuda(w, u, n, a, delta));
}

/* ---- the table's entries that are functions of the operator files (cuda.h), with the backend
 * they belong to (its state: the operators' context, handed to the GEMMs and convolutions) ---- */

static mpx_status cuda_allreduce_sum(const mpx_backend *be, float *x, size_t n,
                                     float post_scale) {
    (void)be;
    return mpx_nccl_allreduce_sum(x, n, post_scale);
}

static int64_t cuda_host_waits(const mpx_backend *be) {
    (void)be;
    return mpx_cuda_host_waits();
}

static mpx_status cuda_last_error(const mpx_backend *be) {
    (void)be;
    return mpx_backend_cuda_error();
}

static size_t cuda_scratch_peak(const mpx_backend *be) { return mpx_cuda_scratch_peak(ctx_of(be)); }

static int64_t cuda_conv16_fallbacks(const mpx_backend *be) {
    return mpx_cuda_conv16_fallbacks(ctx_of(be));
}

static mpx_status cuda_relu_forward(const mpx_backend *be, const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_relu_forward_cuda(x, y);
}

static mpx_status cuda_relu_backward(const mpx_backend *be, const mpx_tensor *dy,
                                     const mpx_tensor *y, mpx_tensor *dx) {
    (void)be;
    return mpx_relu_backward_cuda(dy, y, dx);
}

static mpx_status cuda_maxpool2d_forward(const mpx_backend *be, const mpx_pool2d_attr *a,
                                         const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_maxpool2d_forward_cuda(a, x, y);
}

static mpx_status cuda_maxpool2d_backward(const mpx_backend *be, const mpx_pool2d_attr *a,
                                          const mpx_tensor *dy, const mpx_tensor *x,
                                          const mpx_tensor *y, mpx_tensor *dx) {
    (void)be;
    return mpx_maxpool2d_backward_cuda(a, dy, x, y, dx);
}

static mpx_status cuda_avgpool_global_forward(const mpx_backend *be, const mpx_tensor *x,
                                              mpx_tensor *y) {
    (void)be;
    return mpx_avgpool_global_forward_cuda(x, y);
}

static mpx_status cuda_avgpool_global_backward(const mpx_backend *be, const mpx_tensor *dy,
                                               mpx_tensor *dx) {
    (void)be;
    return mpx_avgpool_global_backward_cuda(dy, dx);
}

static mpx_status cuda_linear_forward(const mpx_backend *be, const mpx_tensor *x,
                                      const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y) {
    return mpx_linear_forward_cuda(ctx_of(be), x, w, b, y);
}

static mpx_status cuda_linear_backward_data(const mpx_backend *be, const mpx_tensor *dy,
                                            const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_linear_backward_data_cuda(ctx_of(be), dy, w, dx);
}

static mpx_status cuda_linear_backward_weights(const mpx_backend *be, const mpx_tensor *dy,
                                               const mpx_tensor *x, mpx_tensor *dw,
                                               mpx_tensor *db) {
    return mpx_linear_backward_weights_cuda(ctx_of(be), dy, x, dw, db);
}

static mpx_status cuda_add_forward(const mpx_backend *be, const mpx_tensor *a, const mpx_tensor *b,
                                   mpx_tensor *y) {
    (void)be;
    return mpx_add_forward_cuda(a, b, y);
}

static mpx_status cuda_add_relu_forward(const mpx_backend *be, const mpx_tensor *a,
                                        const mpx_tensor *b, mpx_tensor *y) {
    (void)be;
    return mpx_add_relu_forward_cuda(a, b, y);
}

static mpx_status cuda_softmax_ce_forward(const mpx_backend *be, const mpx_tensor *logits,
                                          const mpx_tensor *labels, mpx_tensor *loss,
                                          mpx_tensor *probs) {
    (void)be;
    return mpx_softmax_ce_forward_cuda(logits, labels, loss, probs);
}

static mpx_status cuda_softmax_ce_backward(const mpx_backend *be, const mpx_tensor *probs,
                                           const mpx_tensor *labels, mpx_tensor *dlogits) {
    (void)be;
    return mpx_softmax_ce_backward_cuda(probs, labels, dlogits);
}

static mpx_status cuda_linear_t_forward(const mpx_backend *be, const mpx_tensor *x,
                                        const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y) {
    return mpx_linear_t_forward_cuda(ctx_of(be), x, w, b, y);
}

static mpx_status cuda_linear_t_backward_data(const mpx_backend *be, const mpx_tensor *dy,
                                              const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_linear_t_backward_data_cuda(ctx_of(be), dy, w, dx);
}

static mpx_status cuda_linear_t_backward_weights(const mpx_backend *be, const mpx_tensor *dy,
                                                 const mpx_tensor *x, mpx_tensor *dw,
                                                 mpx_tensor *db) {
    return mpx_linear_t_backward_weights_cuda(ctx_of(be), dy, x, dw, db);
}

static mpx_status cuda_layernorm_forward(const mpx_backend *be, float eps, const mpx_tensor *x,
                                         const mpx_tensor *gamma, const mpx_tensor *beta,
                                         mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                         mpx_tensor *y) {
    (void)be;
    return mpx_layernorm_forward_cuda(eps, x, gamma, beta, save_mean, save_invstd, y);
}

static mpx_status cuda_l2norm_forward(const mpx_backend *be, float eps, const mpx_tensor *x,
                                       const mpx_tensor *gamma, mpx_tensor *save_inv,
                                       mpx_tensor *y) {
    (void)be;
    return mpx_l2norm_forward_cuda(eps, x, gamma, save_inv, y);
}

static mpx_status cuda_l2norm_backward(const mpx_backend *be, const mpx_tensor *dy,
                                        const mpx_tensor *x, const mpx_tensor *gamma,
                                        const mpx_tensor *save_inv, mpx_tensor *dx,
                                        mpx_tensor *dgamma) {
    (void)be;
    return mpx_l2norm_backward_cuda(dy, x, gamma, save_inv, dx, dgamma);
}

static mpx_status cuda_layernorm_backward(const mpx_backend *be, const mpx_tensor *dy,
                                          const mpx_tensor *x, const mpx_tensor *gamma,
                                          const mpx_tensor *save_mean,
                                          const mpx_tensor *save_invstd, mpx_tensor *dx,
                                          mpx_tensor *dgamma, mpx_tensor *dbeta) {
    (void)be;
    return mpx_layernorm_backward_cuda(dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

static mpx_status cuda_gelu_forward(const mpx_backend *be, const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_gelu_forward_cuda(x, y);
}

static mpx_status cuda_gelu_backward(const mpx_backend *be, const mpx_tensor *dy,
                                     const mpx_tensor *x, mpx_tensor *dx) {
    (void)be;
    return mpx_gelu_backward_cuda(dy, x, dx);
}

static mpx_status cuda_embedding_forward(const mpx_backend *be, const mpx_tensor *ids,
                                         const mpx_tensor *table, mpx_tensor *y) {
    (void)be;
    return mpx_embedding_forward_cuda(ids, table, y);
}

static mpx_status cuda_embedding_backward(const mpx_backend *be, const mpx_tensor *dy,
                                          const mpx_tensor *ids, mpx_tensor *dtable) {
    (void)be;
    return mpx_embedding_backward_cuda(dy, ids, dtable);
}

static mpx_status cuda_bmm_forward(const mpx_backend *be, const mpx_bmm_attr *at,
                                   const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *c) {
    return mpx_bmm_forward_cuda(ctx_of(be), at, a, b, c);
}

static mpx_status cuda_bmm_backward(const mpx_backend *be, const mpx_bmm_attr *at,
                                    const mpx_tensor *dc, const mpx_tensor *a, const mpx_tensor *b,
                                    mpx_tensor *da, mpx_tensor *db) {
    return mpx_bmm_backward_cuda(ctx_of(be), at, dc, a, b, da, db);
}

static mpx_status cuda_softmax_forward(const mpx_backend *be, float scale, const mpx_tensor *x,
                                       const mpx_tensor *mask, mpx_tensor *y) {
    (void)be;
    return mpx_softmax_forward_cuda(scale, x, mask, y);
}

static mpx_status cuda_softmax_backward(const mpx_backend *be, float scale, const mpx_tensor *dy,
                                        const mpx_tensor *y, mpx_tensor *dx) {
    (void)be;
    return mpx_softmax_backward_cuda(scale, dy, y, dx);
}

static mpx_status cuda_dropout_forward(const mpx_backend *be, const mpx_dropout_attr *a,
                                       const mpx_tensor *x, mpx_tensor *y) {
    (void)be;
    return mpx_dropout_forward_cuda(a, x, y);
}

static mpx_status cuda_dropout_backward(const mpx_backend *be, const mpx_dropout_attr *a,
                                        const mpx_tensor *dy, mpx_tensor *dx) {
    (void)be;
    return mpx_dropout_backward_cuda(a, dy, dx);
}

static mpx_status cuda_permute_forward(const mpx_backend *be, const int *perm, const mpx_tensor *x,
                                       mpx_tensor *y) {
    (void)be;
    return mpx_permute_forward_cuda(perm, x, y);
}

static mpx_status cuda_permute_backward(const mpx_backend *be, const int *perm,
                                        const mpx_tensor *dy, mpx_tensor *dx) {
    (void)be;
    return mpx_permute_backward_cuda(perm, dy, dx);
}

static mpx_status cuda_conv2d_forward(const mpx_backend *be, const mpx_conv2d_attr *a,
                                      const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                      mpx_tensor *y) {
    return mpx_conv2d_forward_cuda(ctx_of(be), a, x, w, b, y);
}

static mpx_status cuda_conv2d_backward_data(const mpx_backend *be, const mpx_conv2d_attr *a,
                                            const mpx_tensor *dy, const mpx_tensor *w,
                                            mpx_tensor *dx) {
    return mpx_conv2d_backward_data_cuda(ctx_of(be), a, dy, w, dx);
}

static mpx_status cuda_conv2d_backward_data_scaled(const mpx_backend *be, const mpx_conv2d_attr *a,
                                                   float scale, const mpx_tensor *dy,
                                                   const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_conv2d_backward_data_scaled_cuda(ctx_of(be), a, scale, dy, w, dx);
}

static mpx_status cuda_linear_backward_data_scaled(const mpx_backend *be, float scale,
                                                   const mpx_tensor *dy, const mpx_tensor *w,
                                                   mpx_tensor *dx) {
    return mpx_linear_backward_data_scaled_cuda(ctx_of(be), scale, dy, w, dx);
}

static mpx_status cuda_linear_t_backward_data_scaled(const mpx_backend *be, float scale,
                                                     const mpx_tensor *dy, const mpx_tensor *w,
                                                     mpx_tensor *dx) {
    return mpx_linear_t_backward_data_scaled_cuda(ctx_of(be), scale, dy, w, dx);
}

static mpx_status cuda_conv2d_backward_weights(const mpx_backend *be, const mpx_conv2d_attr *a,
                                               const mpx_tensor *dy, const mpx_tensor *x,
                                               mpx_tensor *dw, mpx_tensor *db) {
    return mpx_conv2d_backward_weights_cuda(ctx_of(be), a, dy, x, dw, db);
}

static mpx_status cuda_batchnorm_forward(const mpx_backend *be, const mpx_batchnorm_attr *a,
                                         const mpx_tensor *x, const mpx_tensor *gamma,
                                         const mpx_tensor *beta, mpx_tensor *running_mean,
                                         mpx_tensor *running_var, mpx_tensor *save_mean,
                                         mpx_tensor *save_invstd, mpx_tensor *y) {
    (void)be;
    return mpx_batchnorm_forward_cuda(a, x, gamma, beta, running_mean, running_var, save_mean,
                                      save_invstd, y);
}

static mpx_status cuda_batchnorm_backward(const mpx_backend *be, const mpx_batchnorm_attr *a,
                                          const mpx_tensor *dy, const mpx_tensor *x,
                                          const mpx_tensor *gamma, const mpx_tensor *beta,
                                          const mpx_tensor *save_mean,
                                          const mpx_tensor *save_invstd, mpx_tensor *dx,
                                          mpx_tensor *dgamma, mpx_tensor *dbeta) {
    (void)be;
    return mpx_batchnorm_backward_cuda(a, dy, x, gamma, beta, save_mean, save_invstd, dx, dgamma,
                                       dbeta);
}

static mpx_status cuda_multibox_forward(const mpx_backend *be, const mpx_multibox_attr *a,
                                        const mpx_tensor *conf, const mpx_tensor *loc,
                                        const mpx_tensor *priors, const mpx_tensor *gt_boxes,
                                        const mpx_tensor *gt_labels, mpx_tensor *workspace,
                                        mpx_tensor *loss, mpx_tensor *probs, mpx_tensor *target,
                                        mpx_tensor *loc_target) {
    (void)be;
    return mpx_multibox_forward_cuda(a, conf, loc, priors, gt_boxes, gt_labels, workspace, loss,
                                     probs, target, loc_target);
}

static mpx_status cuda_multibox_backward(const mpx_backend *be, const mpx_multibox_attr *a,
                                         const mpx_tensor *probs, const mpx_tensor *target,
                                         const mpx_tensor *loc, const mpx_tensor *loc_target,
                                         mpx_tensor *dconf, mpx_tensor *dloc) {
    (void)be;
    return mpx_multibox_backward_cuda(a, probs, target, loc, loc_target, dconf, dloc);
}

static mpx_backend make_backend(void) {
    mpx_backend b = {};
    b.name = "cuda";
    b.device = MPX_DEV_CUDA;
    b.state = mpx_cuda_ctx_create();
    b.native = cuda_native;
    b.direct_io = cuda_direct_io;
    b.alloc = cuda_alloc;
    b.free = cuda_free;
    b.zero = cuda_zero;
    b.copy = cuda_copy;
    b.upload = cuda_upload;
    b.download = cuda_download;
    b.sync = cuda_sync;
    b.host_waits = cuda_host_waits;
    b.last_error = cuda_last_error;
    b.scratch_peak = cuda_scratch_peak;
#ifdef MPX_HAVE_NCCL
    b.allreduce_sum = cuda_allreduce_sum;
#else
    (void)cuda_allreduce_sum;
#endif
    b.conv16_fallbacks = cuda_conv16_fallbacks;
    b.gemm_operands = cuda_gemm_operands;
    b.cast = cuda_cast;
    b.decode = cuda_decode;
    b.fp8_quantize = cuda_fp8_quantize;
    b.mx_quantize = cuda_mx_quantize;
    b.mx_quantize_cols = cuda_mx_quantize_cols;
    b.fixed_quantize = cuda_fixed_quantize;
    b.moments = cuda_moments;
    b.moments_to = cuda_moments_to;
    b.abs_quantile = cuda_abs_quantile;
    b.absmax = cuda_absmax;
    b.accumulate = cuda_accumulate;
    b.accumulate_absmax = cuda_accumulate_absmax;
    b.absmax_to = cuda_absmax_to;
    b.merge_check = cuda_merge_check;
    b.unscale_accumulate = cuda_unscale_accumulate;
    b.sumsq = cuda_sumsq;
    b.sgd_update = cuda_sgd_update;
    b.adamw_update = cuda_adamw_update;
    b.lamb_direction = cuda_lamb_direction;
    b.scaled_sub = cuda_scaled_sub;
    /* operators (cuda.h) */
    b.relu_forward = cuda_relu_forward;
    b.relu_backward = cuda_relu_backward;
    b.maxpool2d_forward = cuda_maxpool2d_forward;
    b.maxpool2d_backward = cuda_maxpool2d_backward;
    b.avgpool_global_forward = cuda_avgpool_global_forward;
    b.avgpool_global_backward = cuda_avgpool_global_backward;
    b.linear_forward = cuda_linear_forward;
    b.linear_backward_data = cuda_linear_backward_data;
    b.linear_backward_weights = cuda_linear_backward_weights;
    b.add_forward = cuda_add_forward;
    b.add_relu_forward = cuda_add_relu_forward;
    b.softmax_ce_forward = cuda_softmax_ce_forward;
    b.softmax_ce_backward = cuda_softmax_ce_backward;
    b.linear_t_forward = cuda_linear_t_forward;
    b.linear_t_backward_data = cuda_linear_t_backward_data;
    b.linear_t_backward_weights = cuda_linear_t_backward_weights;
    b.layernorm_forward = cuda_layernorm_forward;
    b.layernorm_backward = cuda_layernorm_backward;
    b.l2norm_forward = cuda_l2norm_forward;
    b.l2norm_backward = cuda_l2norm_backward;
    b.gelu_forward = cuda_gelu_forward;
    b.gelu_backward = cuda_gelu_backward;
    b.embedding_forward = cuda_embedding_forward;
    b.embedding_backward = cuda_embedding_backward;
    b.bmm_forward = cuda_bmm_forward;
    b.bmm_backward = cuda_bmm_backward;
    b.softmax_forward = cuda_softmax_forward;
    b.softmax_backward = cuda_softmax_backward;
    b.dropout_forward = cuda_dropout_forward;
    b.dropout_backward = cuda_dropout_backward;
    b.permute_forward = cuda_permute_forward;
    b.permute_backward = cuda_permute_backward;
    b.conv2d_forward = cuda_conv2d_forward;
    b.conv2d_backward_data = cuda_conv2d_backward_data;
    b.conv2d_backward_data_scaled = cuda_conv2d_backward_data_scaled;
    b.linear_backward_data_scaled = cuda_linear_backward_data_scaled;
    b.linear_t_backward_data_scaled = cuda_linear_t_backward_data_scaled;
    b.conv2d_backward_weights = cuda_conv2d_backward_weights;
    b.batchnorm_forward = cuda_batchnorm_forward;
    b.batchnorm_backward = cuda_batchnorm_backward;
    b.multibox_forward = cuda_multibox_forward;
    b.multibox_backward = cuda_multibox_backward;
    return b;
}

static const mpx_backend g_cuda = make_backend();

extern "C" const mpx_backend *mpx_backend_cuda(void) {
    if (!g_cuda.state) {
        mpx_fail(MPX_ERR_NOMEM, "out of memory for the CUDA operators' context");
        return nullptr;
    }
    return &g_cuda;
}

extern "C" mpx_status mpx_cuda_release(void) {
    mpx_status ops = g_cuda.state ? mpx_cuda_ctx_release(ctx_of(&g_cuda)) : MPX_OK;
    mpx_status device = cuop_device_release();
    return ops != MPX_OK ? ops : device;
}
