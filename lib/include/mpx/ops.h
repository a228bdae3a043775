/* ops.h — the operators, forward and backward, one family per source file.
 *
 * Every op exists as `mpx_<op>_<pass>_cpu` (lib/ops/) and, with the same signature,
 * `mpx_<op>_<pass>_cuda` (lib/cuda/). Arguments are tensor views (tensor.h).
 * The CPU versions compute in FP32 and take FP32 tensors (labels I32): in low-precision runs
 * the graph executor decodes the stored FP16/BF16 values to FP32 before the call and rounds
 * results on write (the precision policy), so no op contains a precision branch.
 * The CUDA versions also accept F16/BF16 data with FP32 accumulation.
 *
 * Conventions: images NHWC, convolution weights HWIO [KH, KW, C, K], linear weights
 * [IN, OUT] (y = x @ w + b), sequences [B, T, C]. Backward passes OVERWRITE every gradient
 * they produce (activation and parameter gradients alike); the executor accumulates
 * parameter-gradient contributions across nodes after unscaling them.
 * Every function validates shapes and returns MPX_ERR_INPUT naming the mismatch.
 */
#ifndef MPX_OPS_H
#define MPX_OPS_H

#include "mpx/error.h"
#include "mpx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the CPU operators' context: what the GEMM family keeps between calls — oneDNN's engines,
 * streams and primitive caches, the operand scratch, the implementation switches benchmarks
 * set, the FLOPs linear layers skipped. The CPU backend owns one (backend.h:
 * mpx_backend_cpu_ctx); tests and benchmarks may make their own. The ops that take a context
 * run one at a time on it (they share its scratch). ---- */
typedef struct mpx_cpu_ctx mpx_cpu_ctx;
/* NULL (with a message) when out of memory; engines and caches are made on first use. */
mpx_cpu_ctx *mpx_cpu_ctx_create(void);
void mpx_cpu_ctx_free(mpx_cpu_ctx *ctx);

/* ---- GEMM (row-major): C = alpha * op(A) @ op(B) + beta * C, op = transpose when trans != 0.
 * op(A) is [M, K], op(B) is [K, N], C is [M, N]. oneDNN, or OpenBLAS when forced. ---- */
void mpx_sgemm(const mpx_cpu_ctx *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef enum { MPX_GEMM_AUTO = 0, MPX_GEMM_OPENBLAS, MPX_GEMM_ONEDNN } mpx_gemm_impl;
/* ---- the same with 16-bit operands (gemm_lowp.c): C (FP32, beta 0) = alpha op(A) op(B), A and
 * B stored as `t` (BF16, or F16 where oneDNN has it), FP32 accumulation. ---- */
mpx_status mpx_gemm_lowp(mpx_cpu_ctx *ctx, mpx_dtype t, int trans_a, int trans_b, int m, int n,
                         int k, float alpha, const void *a, int lda, const void *b, int ldb,
                         float *c, int ldc);
/* `batch` of them at element strides sa, sb, sc apart, in one primitive call. */
mpx_status mpx_gemm_lowp_batched(mpx_cpu_ctx *ctx, mpx_dtype t, int64_t batch, int trans_a,
                                 int trans_b, int m, int n, int k, float alpha, const void *a,
                                 int lda, int64_t sa, const void *b, int ldb, int64_t sb, float *c,
                                 int ldc, int64_t sc);
/* 1 when oneDNN multiplies `t` operands natively on this CPU (not its reference kernels): the
 * GEMM-family CPU ops then take tensors stored as `t` (backend.h: op_direct_io). */
int mpx_gemm_lowp_native(mpx_cpu_ctx *ctx, mpx_dtype t);
/* The path the GEMM family takes on `t` operands here, in words (mpx info, mpx bench): "native
 * (oneDNN <implementation>, FP32 accumulation)" or "emulated (<why>)"; written into buf. */
const char *mpx_gemm_lowp_path(mpx_cpu_ctx *ctx, mpx_dtype t, char *buf, size_t cap);
/* 0: report no native 16-bit GEMM (tests and benchmarks compare the paths); 1: detect again. */
void mpx_gemm_lowp_force(mpx_cpu_ctx *ctx, int on);
void mpx_gemm_lowp_cache_clear(mpx_cpu_ctx *ctx);
/* Force one implementation (benchmarks); AUTO restores the default (oneDNN). */
void mpx_sgemm_force(mpx_cpu_ctx *ctx, mpx_gemm_impl impl);
const char *mpx_sgemm_choice(const mpx_cpu_ctx *ctx, int trans_a, int trans_b, int m, int n, int k);

/* ---- conv2d: x [N,H,W,C], w [KH,KW,C,K], b [K] or NULL, y [N,OH,OW,K],
 * OH = (H + 2*pad_h - KH) / stride_h + 1 (same for W). No groups, no dilation. ---- */
typedef struct {
    int stride_h, stride_w, pad_h, pad_w;
} mpx_conv2d_attr;
mpx_status mpx_conv2d_forward_cpu(mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a, const mpx_tensor *x,
                                  const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_conv2d_backward_data_cpu(mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a,
                                        const mpx_tensor *dy, const mpx_tensor *w, mpx_tensor *dx);
/* dw [KH,KW,C,K]; db [K] or NULL. */
mpx_status mpx_conv2d_backward_weights_cpu(mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a,
                                           const mpx_tensor *dy, const mpx_tensor *x,
                                           mpx_tensor *dw, mpx_tensor *db);
/* Plain loops in double precision: the reference the oneDNN path is tested against. */
void mpx_conv2d_reference(const mpx_conv2d_attr *a, int n, int h, int w, int c, int k, int kh,
                          int kw, const double *x, const double *wt, const double *b, double *y);
/* Free the cached oneDNN primitives (mpx_cpu_ctx_free does; harmless when empty). */
void mpx_conv2d_cache_clear(mpx_cpu_ctx *ctx);
/* Implementation choice (benchmarks). AUTO is the measured rule in conv2d.c; ONEDNN_HWIO runs
 * oneDNN on the user's HWIO weights; ONEDNN_ANY lets oneDNN pick the weights layout and
 * reorders to/from HWIO on every call; SGEMM runs 1x1 stride-1 unpadded convolutions as one
 * mpx_sgemm (other shapes then use AUTO). */
typedef enum {
    MPX_CONV_AUTO = 0,
    MPX_CONV_ONEDNN_HWIO,
    MPX_CONV_ONEDNN_ANY,
    MPX_CONV_SGEMM
} mpx_conv2d_impl;
void mpx_conv2d_force(mpx_cpu_ctx *ctx, mpx_conv2d_impl impl);
typedef enum { MPX_CONV_FORWARD = 0, MPX_CONV_BACKWARD_DATA, MPX_CONV_BACKWARD_WEIGHTS } mpx_conv2d_pass;
/* What runs `pass` for x [N,H,W,C] and w [KH,KW,C,K] (with_bias: b / db given), e.g.
 * "onednn brg:avx512_core weights Acdb16a (reorder)" or "sgemm onednn"; creates and caches the
 * primitive as a real call would. */
mpx_status mpx_conv2d_describe(mpx_cpu_ctx *ctx, mpx_conv2d_pass pass, const mpx_conv2d_attr *a,
                               const mpx_tensor *x, const mpx_tensor *w, int with_bias, char *buf,
                               size_t cap);

/* ---- batch-norm over the last (channel) dimension: x [..., C] viewed as [M, C].
 * Training: batch mean and biased variance in FP32 (double accumulation), saved as
 * mean [C] and invstd [C] = 1/sqrt(var + eps); running stats updated as
 * running = (1 - momentum) * running + momentum * batch (running_var uses unbiased var).
 * Eval (training = 0): running statistics, save_* untouched (may be NULL).
 * running_mean / running_var are always required; training needs M >= 2 rows.
 * relu = 1 writes max(y, 0) instead (ReLU fused into the forward).
 * The forward's FP32 result is y = (x - mean) * scale + beta with scale = (float)(gamma *
 * (double)invstd) from the saved FP32 invstd (training), so the backward can recompute it.
 * relu_dy = 1 (backward): dy is the gradient at the fused ReLU's output, whose backward the op
 * applies itself: dy counts where that output, as stored in `relu_store` (F32, F16 or BF16,
 * rounded to nearest even from max(y, 0)), is positive, i.e. where y > 0, 2^-25 or 2^-134 (half
 * the format's smallest subnormal); else 0 — the bits of relu backward then batch-norm backward.
 * It needs beta. ---- */
typedef struct {
    float eps, momentum;
    int training;
    int relu;
    int relu_dy;
    mpx_dtype relu_store;
    /* Synchronised batch-norm (training): when set, the per-channel totals are handed to
     * `reduce` before they are used — forward: sum (x - shift) and sum (x - shift)^2 about the
     * shift it is given (the first row; it returns the totals of every replica about the shift
     * it writes back), backward: sum dy and sum dy (x - mean) (shift NULL) — and the statistics
     * count the rows of all `replicas` (each with the same M). The executor's reducer sums over
     * the ranks of a data-parallel run (train.sync_bn); the op knows nothing of them. */
    mpx_status (*reduce)(void *ctx, double *totals, float *shift, int64_t c, int64_t m);
    void *reduce_ctx;
    int replicas;
} mpx_batchnorm_attr;
mpx_status mpx_batchnorm_forward_cpu(const mpx_batchnorm_attr *a, const mpx_tensor *x,
                                     const mpx_tensor *gamma, const mpx_tensor *beta,
                                     mpx_tensor *running_mean, mpx_tensor *running_var,
                                     mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                     mpx_tensor *y);
/* Training-mode backward: dx, dgamma [C], dbeta [C] (training = 0: MPX_ERR_UNSUPPORTED).
 * beta is read only with relu_dy (may be NULL otherwise). */
mpx_status mpx_batchnorm_backward_cpu(const mpx_batchnorm_attr *a, const mpx_tensor *dy,
                                      const mpx_tensor *x, const mpx_tensor *gamma,
                                      const mpx_tensor *beta, const mpx_tensor *save_mean,
                                      const mpx_tensor *save_invstd, mpx_tensor *dx,
                                      mpx_tensor *dgamma, mpx_tensor *dbeta);
/* The relu_dy threshold for a ReLU output stored as `store`: 0 (F32, TF32), 2^-25 (F16),
 * 2^-134 (BF16); -1 for a format the fused backward does not take. */
float mpx_batchnorm_relu_threshold(mpx_dtype store);

/* ---- ReLU: y = max(x, 0); backward from y: dx = dy * (y > 0). ---- */
mpx_status mpx_relu_forward_cpu(const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_relu_backward_cpu(const mpx_tensor *dy, const mpx_tensor *y, mpx_tensor *dx);

/* ---- max-pool 2D, NHWC: window k x k, stride, padding in [0, k) (padded cells never win).
 * Backward routes dy to the first position in the window (row-major) whose x equals y. ---- */
typedef struct {
    int kernel, stride, pad;
} mpx_pool2d_attr;
mpx_status mpx_maxpool2d_forward_cpu(const mpx_pool2d_attr *a, const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_maxpool2d_backward_cpu(const mpx_pool2d_attr *a, const mpx_tensor *dy,
                                      const mpx_tensor *x, const mpx_tensor *y, mpx_tensor *dx);

/* ---- global average pool: x [N,H,W,C] -> y [N,C] ---- */
mpx_status mpx_avgpool_global_forward_cpu(const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_avgpool_global_backward_cpu(const mpx_tensor *dy, mpx_tensor *dx);

/* ---- linear: x [M, IN] (any leading dims flattened), w [IN, OUT], b [OUT] or NULL,
 * y [M, OUT] = x @ w + b ---- */
mpx_status mpx_linear_forward_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                  const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_linear_backward_data_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy, const mpx_tensor *w,
                                        mpx_tensor *dx);
mpx_status mpx_linear_backward_weights_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy,
                                           const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db);
/* The same with weights stored [OUT, IN] (y = x @ w^T + b), for weights shared with a table laid
 * out that way (BERT's MLM decoder reuses the token embedding [V, H]). dw is [OUT, IN]. */
mpx_status mpx_linear_t_forward_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                    const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_linear_t_backward_data_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy,
                                          const mpx_tensor *w, mpx_tensor *dx);
mpx_status mpx_linear_t_backward_weights_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy,
                                             const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db);
/* The forward for the rows a loss reads: mask I32 [M] (a softmax cross-entropy's labels), rows
 * whose mask is negative are written 0 and not computed; NULL: every row (the forms above). */
mpx_status mpx_linear_forward_rows_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                       const mpx_tensor *b, const mpx_tensor *mask, mpx_tensor *y);
mpx_status mpx_linear_t_forward_rows_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                         const mpx_tensor *b, const mpx_tensor *mask,
                                         mpx_tensor *y);
/* The GEMM FLOPs (2 per multiply-add) that linear layers of either layout have left out on this
 * context since it was made: products with all-zero rows of dy in the backward passes (skipped when
 * a quarter of the rows or more are zero: BERT's MLM decoder, whose ignored positions get zero
 * gradients) and rows a forward's mask excluded. Benchmarks subtract them (backend.h:
 * skipped_flops); tests see the paths taken. */
double mpx_linear_skipped_flops(const mpx_cpu_ctx *ctx);

/* ---- element-wise add: y = a + b (same shapes). Backward: da = db = dy (copies). ---- */
mpx_status mpx_add_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y);
/* y = max(a + b, 0): a residual add with the ReLU after it fused (the same bits as add, then
 * relu, on F32 data). */
mpx_status mpx_add_relu_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y);

/* ---- softmax cross-entropy, FP32: logits [M, K], labels I32 [M] (label < 0: ignored),
 * loss F32 [1] = mean over the counted rows of -log softmax(logits)[label];
 * probs F32 [M, K] saved for backward. Backward: dlogits = (probs - onehot) / count
 * (zero rows for ignored labels). A label >= K is an MPX_ERR_INPUT naming the row. ---- */
mpx_status mpx_softmax_ce_forward_cpu(const mpx_tensor *logits, const mpx_tensor *labels,
                                      mpx_tensor *loss, mpx_tensor *probs);
mpx_status mpx_softmax_ce_backward_cpu(const mpx_tensor *probs, const mpx_tensor *labels,
                                       mpx_tensor *dlogits);

/* ---- layer-norm over the last dim: x [..., C] viewed as [M, C], gamma, beta [C],
 * y [..., C] = (x - mean) * invstd * gamma + beta per row, with the row's mean and biased
 * variance in FP32 from double sums; save_mean and save_invstd (M elements each, any shape,
 * e.g. [M] or the leading dims of x) get mean and 1/sqrt(var + eps) for backward. ---- */
mpx_status mpx_layernorm_forward_cpu(float eps, const mpx_tensor *x, const mpx_tensor *gamma,
                                     const mpx_tensor *beta, mpx_tensor *save_mean,
                                     mpx_tensor *save_invstd, mpx_tensor *y);
/* dx [..., C], dgamma [C], dbeta [C]; deterministic whatever the thread count. */
mpx_status mpx_layernorm_backward_cpu(const mpx_tensor *dy, const mpx_tensor *x,
                                      const mpx_tensor *gamma, const mpx_tensor *save_mean,
                                      const mpx_tensor *save_invstd, mpx_tensor *dx,
                                      mpx_tensor *dgamma, mpx_tensor *dbeta);

/* ---- L2 normalization over the last dim (SSD's conv4_3): x [..., C] viewed as [M, C], gamma
 * [C], y = x * inv * gamma per row with inv = 1/sqrt(sum_c x^2 + eps) in FP32 from a double
 * sum, saved in save_inv (M elements, any shape) for backward. eps > 0. ---- */
mpx_status mpx_l2norm_forward_cpu(float eps, const mpx_tensor *x, const mpx_tensor *gamma,
                                  mpx_tensor *save_inv, mpx_tensor *y);
/* dx [..., C], dgamma [C]; deterministic whatever the thread count. */
mpx_status mpx_l2norm_backward_cpu(const mpx_tensor *dy, const mpx_tensor *x,
                                   const mpx_tensor *gamma, const mpx_tensor *save_inv,
                                   mpx_tensor *dx, mpx_tensor *dgamma);

/* ---- GELU, exact erf form (BERT): y = x * Phi(x), Phi the standard normal CDF.
 * Backward from the input: dx = dy * (Phi(x) + x * phi(x)). Any shape. ---- */
mpx_status mpx_gelu_forward_cpu(const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_gelu_backward_cpu(const mpx_tensor *dy, const mpx_tensor *x, mpx_tensor *dx);

/* ---- embedding lookup: ids I32 [...] (1..3 dims), table [V, H] -> y [..., H],
 * y[n] = table[ids[n]]. An id outside [0, V) is MPX_ERR_INPUT naming its position and value.
 * Backward: dtable [V, H] = sum over positions n with ids[n] = v of dy[n] (zero rows for unused
 * ids), duplicates added in position order (deterministic whatever the thread count). ---- */
mpx_status mpx_embedding_forward_cpu(const mpx_tensor *ids, const mpx_tensor *table,
                                     mpx_tensor *y);
mpx_status mpx_embedding_backward_cpu(const mpx_tensor *dy, const mpx_tensor *ids,
                                      mpx_tensor *dtable);

/* ---- batched matmul: c [..., M, N] = alpha * op(a) @ op(b) for every leading index (the
 * leading dims, 0..2 of them, equal in a, b and c and flattened to a batch count);
 * a [..., M, K] ([..., K, M] with trans_a), b [..., K, N] ([..., N, K] with trans_b).
 * Batches run in parallel, each GEMM on one thread, so results do not depend on the thread
 * count; a single batch is one multi-threaded mpx_sgemm instead (bits as mpx_sgemm gives them).
 * Backward: da (shaped like a) and db (shaped like b); either may be NULL. ---- */
typedef struct {
    int trans_a, trans_b;
    float alpha;
} mpx_bmm_attr;
mpx_status mpx_bmm_forward_cpu(mpx_cpu_ctx *ctx, const mpx_bmm_attr *at, const mpx_tensor *a,
                               const mpx_tensor *b, mpx_tensor *c);
mpx_status mpx_bmm_backward_cpu(mpx_cpu_ctx *ctx, const mpx_bmm_attr *at, const mpx_tensor *dc,
                                const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *da,
                                mpx_tensor *db);

/* ---- attention softmax over the last dim: y = softmax(scale * x + mask_bias), FP32,
 * max-subtracted. Without a mask (NULL) x and y are any [..., T_k]. With a mask, x and y are
 * [B, H, T_q, T_k] and mask [B, T_k] (I32 or F32, every value 0 or 1) broadcasts over heads and
 * query positions: 1 keeps the key, 0 makes its bias -inf (probability exactly 0); a row with
 * every key masked gives zeros. Backward from y: dx = scale * y * (dy - sum(dy * y)). ---- */
mpx_status mpx_softmax_forward_cpu(float scale, const mpx_tensor *x, const mpx_tensor *mask,
                                   mpx_tensor *y);
mpx_status mpx_softmax_backward_cpu(float scale, const mpx_tensor *dy, const mpx_tensor *y,
                                    mpx_tensor *dx);

/* ---- dropout, seeded: element i (row-major) is kept iff
 * mpx_rand_u32(seed, MPX_RNG_DROPOUT ^ stream, offset + i) >= round(p * 2^32), i.e. with
 * probability 1 - p, and kept values are multiplied by (float)(1 / (1 - p)); 0 <= p < 1,
 * p = 0 is the identity. No mask is stored: backward (same attr) recomputes it,
 * dx = dy * keep * scale. Any shape. ---- */
typedef struct {
    float p;
    uint64_t seed, stream, offset;
} mpx_dropout_attr;
mpx_status mpx_dropout_forward_cpu(const mpx_dropout_attr *a, const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_dropout_backward_cpu(const mpx_dropout_attr *a, const mpx_tensor *dy,
                                    mpx_tensor *dx);

/* ---- permute: y.shape[i] = x.shape[perm[i]], y[i0,..] = x at the permuted index;
 * perm has x->ndim entries (a permutation of 0..ndim-1). The attention head split is
 * x [B, T, H*D] viewed as [B, T, H, D] with perm {0, 2, 1, 3} -> [B, H, T, D]; the merge is the
 * same perm from [B, H, T, D] to [B, T, H, D] (viewed as [B, T, H*D]).
 * Backward: dx = dy permuted by the inverse of perm. ---- */
mpx_status mpx_permute_forward_cpu(const int *perm, const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_permute_backward_cpu(const int *perm, const mpx_tensor *dy, mpx_tensor *dx);

#ifdef __cplusplus
}
#endif

#endif
