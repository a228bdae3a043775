/* backend.h — the one interface behind which CPU and CUDA live.
 *
 * The executor talks only to an mpx_backend: memory, the counted cast, reductions and the
 * operators, all with the signatures of ops.h / numerics.h. A backend states which storage
 * dtypes its operators read and write natively; for the others the executor decodes into FP32
 * scratch and rounds results on write — that is how the CPU emulates FP16 and BF16 exactly. A
 * backend whose operators do that decoding and rounding themselves says so (direct_io), and the
 * executor then hands them the storage.
 * Every entry takes the backend it belongs to, so that a backend with state of its own (a
 * device, its streams and caches) is one more table, not a second set of globals.
 * A NULL operator means "not implemented on this backend" and is reported as such.
 */
#ifndef MPX_BACKEND_H
#define MPX_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"
#include "mpx/fixed.h"
#include "mpx/fp8.h"
#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "mpx/ssd.h"
#include "mpx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One optimizer step's constants, as the update kernels take them. `clip` multiplies the
 * gradient (global-norm clipping); `wd` is 0 for parameters without weight decay. `delta`
 * (backend memory, or NULL): where the kernel also writes, per element, the FP32 update d it
 * subtracts (w <- w - d), for the lost-update statistics of statistics steps. */
typedef struct {
    float lr, momentum, wd, clip;
    int nesterov;
    float *delta;
} mpx_sgd_step;
typedef struct {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, bias_corr1, bias_corr2, wd, clip;
    float *delta;
} mpx_adamw_step;

/* Classes of operators a backend may declare to take 16-bit storage apart from the rest
 * (op_direct_io). */
typedef enum {
    MPX_OPC_OTHER = 0,
    MPX_OPC_GEMM,      /* conv2d, linear, linear_t, bmm: forward, rows forward, backward data and
                        * weights */
    MPX_OPC_BATCHNORM, /* forward (its fused ReLU too) and backward (relu_dy too) */
    MPX_OPC_RELU,      /* forward and backward */
    MPX_OPC_ADD        /* add and add+ReLU forward (the backward is the executor's) */
} mpx_op_class;

typedef struct mpx_backend {
    const char *name;
    mpx_device device;
    /* The backend's own state, which its entries reach through the backend they are handed (the
     * CPU's: the operators' context, ops.h mpx_cpu_ctx). */
    void *state;
    /* 1 when the operators read and write `t` directly (F32 always). */
    int (*native)(const struct mpx_backend *be, mpx_dtype t);
    /* 1 when every operator takes tensors stored as `t` (F16, BF16) as they are: it decodes
     * them exactly as it loads them and writes such outputs rounded once, to nearest even,
     * from its FP32 result — the executor's emulation fused into the op (same bits, as
     * tests/model/test_direct_io.c checks with such a CPU backend; on CUDA a GEMM's FP32
     * result may then come from 16-bit tensor cores instead of TF32 ones: exact products, FP32
     * accumulation either way).
     * The executor then passes values, parameters and output gradients in their storage
     * instead of decoding them into FP32 scratch, and lets operators write forward values into
     * storage when the policy rounds to nearest — and gradients too, when their commit would
     * only round them (no factor, no statistics step: graph_exec.c, grad_direct); otherwise a
     * gradient arrives in FP32, to be scaled, counted or shadowed on its way into storage.
     * Operators then see mixed dtypes (an F16 dy with an F32 dx). NULL: none. */
    int (*direct_io)(const struct mpx_backend *be, mpx_dtype t);
    /* The same promise for one class of operators alone (mpx_op_class): the executor then hands
     * storage stored as `t` to those operators only. The CPU's GEMM family multiplies 16-bit
     * tensors natively where the CPU can (mpx_gemm_lowp_native), and its memory-bound batch-norm,
     * ReLU and add decode and round tiles as they stream them (lib/ops/tile.h). NULL: none. */
    int (*op_direct_io)(const struct mpx_backend *be, mpx_op_class c, mpx_dtype t);

    /* memory: alloc returns zeroed memory or NULL */
    void *(*alloc)(const struct mpx_backend *be, size_t bytes);
    void (*free)(const struct mpx_backend *be, void *p);
    void (*zero)(const struct mpx_backend *be, void *p, size_t bytes);
    /* same device */
    void (*copy)(const struct mpx_backend *be, void *dst, const void *src, size_t bytes);
    /* host memory may be reused when upload returns; the copy itself may still be queued */
    void (*upload)(const struct mpx_backend *be, void *dst, const void *host, size_t bytes);
    void (*download)(const struct mpx_backend *be, void *host, const void *src, size_t bytes);
    /* waits until all queued work is done (profiling: a node's time must be its own) */
    void (*sync)(const struct mpx_backend *be);
    /* How many times the host has waited for this backend's results so far in the process: sync,
     * download, and every entry that returns a value to the host (moments, abs_quantile,
     * absmax); on CUDA also the rare waits of the operators (a deferred index check that finds
     * all its slots pending). The CPU waits for nothing
     * but counts the same entries, so the executor's count per step is tested without a GPU. */
    int64_t (*host_waits)(const struct mpx_backend *be);
    /* Declares the format the F32 operands of the GEMM-family operators (conv2d, linear,
     * linear_t, bmm) are exact in: the precision's low format, F16 or BF16 in 16-bit modes (the
     * operands come from 16-bit storage), TF32 in tf32 mode (the executor rounds them), F32
     * otherwise. A backend may then run those operators on units that read a format holding
     * such values exactly (tensor cores) with FP32 accumulation, which changes no operand. The
     * executor declares it at the start of every pass. NULL when the backend has no such units
     * (the CPU). */
    void (*gemm_operands)(const struct mpx_backend *be, mpx_dtype exact);
    /* The first failure of an entry that cannot return a status (memory, numerics, optimizer
     * updates) since the last call, then forgotten; MPX_OK when none. The executor asks after
     * every pass, so such a failure surfaces as the pass's error with its message. */
    mpx_status (*last_error)(const struct mpx_backend *be);
    /* The most device memory the operators have held beyond the graph's arenas so far in the
     * process (their scratch: decoded operands, staged outputs, workspaces), in bytes; NULL
     * where that memory is host memory, counted in the process's RSS (the CPU). */
    size_t (*scratch_peak)(const struct mpx_backend *be);
    /* Optional: how many convolution plans (pass and shape) on 16-bit data the backend could
     * not run as such and runs on FP32 data instead (cuda.h: mpx_cuda_conv16_fallbacks); a
     * speed question, not a numerical one. NULL where there is no such path. */
    int64_t (*conv16_fallbacks)(const struct mpx_backend *be);
    /* Optional: the GEMM FLOPs its operators have left out since the backend was made, as
     * products with zeros or rows nothing reads (the CPU's linear layers skip all-zero rows of
     * dy and the rows a loss ignores: ops.h, mpx_linear_skipped_flops). Benchmarks and the
     * profile subtract them from the FLOPs a graph counts, so that GFLOP/s is the arithmetic
     * done. NULL: never skips. */
    double (*skipped_flops)(const struct mpx_backend *be);

    /* Optional: x[0..n) (backend memory) summed over the ranks of a data-parallel run (comm.h)
     * and multiplied by post_scale, in place, over the devices' own links (CUDA: NCCL). NULL:
     * the executor reduces through host memory with MPI. */
    mpx_status (*allreduce_sum)(const struct mpx_backend *be, float *x, size_t n,
                                float post_scale);

    /* numerics */
    void (*cast)(const struct mpx_backend *be, const mpx_cast_spec *spec, const float *src,
                 void *dst, size_t n);
    void (*decode)(const struct mpx_backend *be, mpx_dtype src_dtype, const void *src, float *dst,
                   size_t n);
    /* The quantizing modes' operand casts (precision.h: fp8, fixed16), dst[i] = src[i] in the
     * format read back in FP32 (dst may be src; FP32 backend memory), counted into *stats
     * (BACKEND memory) when stats is not NULL: fp8.h's mpx_fp8_quantize and mpx_mx_quantize,
     * fixed.h's mpx_fixed_quantize, with their values and counts. mx_quantize's sc (HOST
     * memory, may be NULL) gets the block scales, which waits for them. */
    void (*fp8_quantize)(const struct mpx_backend *be, mpx_dtype fmt, float scale, const float *src,
                         float *dst, size_t n, mpx_cast_stats *stats);
    void (*mx_quantize)(const struct mpx_backend *be, mpx_dtype fmt, mpx_mx_rule rule,
                        const float *src, float *dst, size_t n, size_t row, mpx_cast_stats *stats,
                        mpx_mx_scales *sc);
    /* The same with blocks down the columns of `batches` [rows, cols] matrices, fp8.h's
     * mpx_mx_quantize_cols. */
    void (*mx_quantize_cols)(const struct mpx_backend *be, mpx_dtype fmt, mpx_mx_rule rule,
                             const float *src, float *dst, size_t batches, size_t rows,
                             size_t cols, mpx_cast_stats *stats, mpx_mx_scales *sc);
    void (*fixed_quantize)(const struct mpx_backend *be, const mpx_fixed_spec *s, const float *src,
                           float *dst, size_t n, mpx_cast_stats *stats);
    void (*moments)(const struct mpx_backend *be, const float *x, size_t n, mpx_moments *out);
    /* The same into *out in BACKEND memory, without a wait (statistics steps read every
     * layer's moments with one download). */
    void (*moments_to)(const struct mpx_backend *be, const float *x, size_t n, mpx_moments *out);
    float (*abs_quantile)(const struct mpx_backend *be, const float *x, size_t n, double q,
                          float scale); /* numerics.h */
    float (*absmax)(const struct mpx_backend *be, const float *x, size_t n); /* numerics.h */
    /* acc[i] += scale * x[i] for n elements (FP32; scale a power of two in practice, so the
     * product is exact and a rescaled branch costs no extra pass). */
    void (*accumulate)(const struct mpx_backend *be, float *acc, const float *x, size_t n,
                       float scale);
    /* accumulate, and in the same pass the magnitudes a branch merge needs: *acc_absmax =
     * max|acc| before the addition and *x_absmax = max|x| (each skipped when NULL; a NaN or Inf
     * gives +Inf, as absmax does), written to BACKEND memory without a wait. */
    void (*accumulate_absmax)(const struct mpx_backend *be, float *acc, const float *x, size_t n,
                              float scale, float *acc_absmax, float *x_absmax);
    /* *out (backend memory) = absmax(x, n), without a wait. */
    void (*absmax_to)(const struct mpx_backend *be, const float *x, size_t n, float *out);
    /* A speculative branch merge's check (graph_exec.c: merge_branches), without a wait: with
     * m = max over i < k of ((double)absmax[i] * pending[i]) / S[i] (absmax in backend memory;
     * pending and S host arrays of the branches' factors not yet applied and scales), adds 1 to
     * *misses (backend memory) unless m * target < u_max, i.e. when `target` (the largest S_i)
     * is not the one mpx_als_merge_target chooses from these magnitudes. */
    void (*merge_check)(const struct mpx_backend *be, const float *absmax, int k,
                        const double *pending, const double *S, double target, double u_max,
                        uint32_t *misses);
    /* acc[i] += decode(g[i]) * inv_scale, with the product rounded back to `g_dtype` first when
     * round_to_storage is set (the 2019 code's FP16 unscale); the count of non-finite addends is
     * added to *nonfinite, a counter in backend memory, so the host reads one total per step
     * instead of waiting for every parameter's count. */
    void (*unscale_accumulate)(const struct mpx_backend *be, mpx_dtype g_dtype, const void *g,
                               size_t n, double inv_scale, int round_to_storage, float *acc,
                               uint64_t *nonfinite);

    /* optimizer updates on FP32 masters (optim.h gives the rules) */
    /* *out (backend memory) = the sum of squares in double, thread-count independent; the
     * optimizer collects every parameter's sum and reads them with one download. */
    void (*sumsq)(const struct mpx_backend *be, const float *x, size_t n, double *out);
    void (*sgd_update)(const struct mpx_backend *be, float *w, const float *g, float *v, size_t n,
                       const mpx_sgd_step *s);
    void (*adamw_update)(const struct mpx_backend *be, float *w, const float *g, float *m, float *v,
                         size_t n, const mpx_adamw_step *s);
    /* LAMB in two passes: update m, v and overwrite g with the direction
     * u = m^ / (sqrt(v^) + eps) + wd w; then w -= a u. */
    void (*lamb_direction)(const struct mpx_backend *be, const float *w, float *g, float *m,
                           float *v, size_t n, const mpx_adamw_step *s);
    /* w -= a u; d = a u also into delta when not NULL (as the step structs' delta) */
    void (*scaled_sub)(const struct mpx_backend *be, float *w, const float *u, size_t n, float a,
                       float *delta);

    /* operators (ops.h) */
    mpx_status (*conv2d_forward)(const struct mpx_backend *be, const mpx_conv2d_attr *a,
                                 const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                 mpx_tensor *y);
    mpx_status (*conv2d_backward_data)(const struct mpx_backend *be, const mpx_conv2d_attr *a,
                                       const mpx_tensor *dy, const mpx_tensor *w, mpx_tensor *dx);
    mpx_status (*conv2d_backward_weights)(const struct mpx_backend *be, const mpx_conv2d_attr *a,
                                          const mpx_tensor *dy, const mpx_tensor *x, mpx_tensor *dw,
                                          mpx_tensor *db);
    mpx_status (*batchnorm_forward)(const struct mpx_backend *be, const mpx_batchnorm_attr *a,
                                    const mpx_tensor *x, const mpx_tensor *gamma,
                                    const mpx_tensor *beta, mpx_tensor *running_mean,
                                    mpx_tensor *running_var, mpx_tensor *save_mean,
                                    mpx_tensor *save_invstd, mpx_tensor *y);
    mpx_status (*batchnorm_backward)(const struct mpx_backend *be, const mpx_batchnorm_attr *a,
                                     const mpx_tensor *dy, const mpx_tensor *x,
                                     const mpx_tensor *gamma, const mpx_tensor *beta,
                                     const mpx_tensor *save_mean, const mpx_tensor *save_invstd,
                                     mpx_tensor *dx, mpx_tensor *dgamma, mpx_tensor *dbeta);
    mpx_status (*relu_forward)(const struct mpx_backend *be, const mpx_tensor *x, mpx_tensor *y);
    mpx_status (*relu_backward)(const struct mpx_backend *be, const mpx_tensor *dy,
                                const mpx_tensor *y, mpx_tensor *dx);
    mpx_status (*maxpool2d_forward)(const struct mpx_backend *be, const mpx_pool2d_attr *a,
                                    const mpx_tensor *x, mpx_tensor *y);
    mpx_status (*maxpool2d_backward)(const struct mpx_backend *be, const mpx_pool2d_attr *a,
                                     const mpx_tensor *dy, const mpx_tensor *x, const mpx_tensor *y,
                                     mpx_tensor *dx);
    mpx_status (*avgpool_global_forward)(const struct mpx_backend *be, const mpx_tensor *x,
                                         mpx_tensor *y);
    mpx_status (*avgpool_global_backward)(const struct mpx_backend *be, const mpx_tensor *dy,
                                          mpx_tensor *dx);
    mpx_status (*linear_forward)(const struct mpx_backend *be, const mpx_tensor *x,
                                 const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y);
    mpx_status (*linear_backward_data)(const struct mpx_backend *be, const mpx_tensor *dy,
                                       const mpx_tensor *w, mpx_tensor *dx);
    mpx_status (*linear_backward_weights)(const struct mpx_backend *be, const mpx_tensor *dy,
                                          const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db);
    mpx_status (*add_forward)(const struct mpx_backend *be, const mpx_tensor *a,
                              const mpx_tensor *b, mpx_tensor *y);
    /* Optional: y = max(a + b, 0) (ops.h); with it the executor fuses an add into the ReLU that
     * is its sole consumer. */
    mpx_status (*add_relu_forward)(const struct mpx_backend *be, const mpx_tensor *a,
                                   const mpx_tensor *b, mpx_tensor *y);
    mpx_status (*softmax_ce_forward)(const struct mpx_backend *be, const mpx_tensor *logits,
                                     const mpx_tensor *labels, mpx_tensor *loss, mpx_tensor *probs);
    mpx_status (*softmax_ce_backward)(const struct mpx_backend *be, const mpx_tensor *probs,
                                      const mpx_tensor *labels, mpx_tensor *dlogits);

    /* transformer operators */
    mpx_status (*linear_t_forward)(const struct mpx_backend *be, const mpx_tensor *x,
                                   const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y);
    mpx_status (*linear_t_backward_data)(const struct mpx_backend *be, const mpx_tensor *dy,
                                         const mpx_tensor *w, mpx_tensor *dx);
    mpx_status (*linear_t_backward_weights)(const struct mpx_backend *be, const mpx_tensor *dy,
                                            const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db);
    /* Optional: linear_forward / linear_t_forward for the rows a loss reads (ops.h:
     * mpx_linear_forward_rows_cpu): x, w, b, an I32 mask [M] (rows with a negative mask are
     * written 0, not computed), y. The executor calls it for a layer whose only reader is a
     * softmax cross-entropy, with that loss's labels; NULL: every row is computed. */
    mpx_status (*linear_forward_rows)(const struct mpx_backend *be, const mpx_tensor *x,
                                      const mpx_tensor *w, const mpx_tensor *b,
                                      const mpx_tensor *mask, mpx_tensor *y);
    mpx_status (*linear_t_forward_rows)(const struct mpx_backend *be, const mpx_tensor *x,
                                        const mpx_tensor *w, const mpx_tensor *b,
                                        const mpx_tensor *mask, mpx_tensor *y);
    mpx_status (*layernorm_forward)(const struct mpx_backend *be, float eps, const mpx_tensor *x,
                                    const mpx_tensor *gamma, const mpx_tensor *beta,
                                    mpx_tensor *save_mean, mpx_tensor *save_invstd, mpx_tensor *y);
    mpx_status (*layernorm_backward)(const struct mpx_backend *be, const mpx_tensor *dy,
                                     const mpx_tensor *x, const mpx_tensor *gamma,
                                     const mpx_tensor *save_mean, const mpx_tensor *save_invstd,
                                     mpx_tensor *dx, mpx_tensor *dgamma, mpx_tensor *dbeta);
    mpx_status (*l2norm_forward)(const struct mpx_backend *be, float eps, const mpx_tensor *x,
                                 const mpx_tensor *gamma, mpx_tensor *save_inv, mpx_tensor *y);
    mpx_status (*l2norm_backward)(const struct mpx_backend *be, const mpx_tensor *dy,
                                  const mpx_tensor *x, const mpx_tensor *gamma,
                                  const mpx_tensor *save_inv, mpx_tensor *dx, mpx_tensor *dgamma);
    mpx_status (*gelu_forward)(const struct mpx_backend *be, const mpx_tensor *x, mpx_tensor *y);
    mpx_status (*gelu_backward)(const struct mpx_backend *be, const mpx_tensor *dy,
                                const mpx_tensor *x, mpx_tensor *dx);
    mpx_status (*embedding_forward)(const struct mpx_backend *be, const mpx_tensor *ids,
                                    const mpx_tensor *table, mpx_tensor *y);
    mpx_status (*embedding_backward)(const struct mpx_backend *be, const mpx_tensor *dy,
                                     const mpx_tensor *ids, mpx_tensor *dtable);
    mpx_status (*bmm_forward)(const struct mpx_backend *be, const mpx_bmm_attr *at,
                              const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *c);
    mpx_status (*bmm_backward)(const struct mpx_backend *be, const mpx_bmm_attr *at,
                               const mpx_tensor *dc, const mpx_tensor *a, const mpx_tensor *b,
                               mpx_tensor *da, mpx_tensor *db);
    mpx_status (*softmax_forward)(const struct mpx_backend *be, float scale, const mpx_tensor *x,
                                  const mpx_tensor *mask, mpx_tensor *y);
    mpx_status (*softmax_backward)(const struct mpx_backend *be, float scale, const mpx_tensor *dy,
                                   const mpx_tensor *y, mpx_tensor *dx);
    mpx_status (*dropout_forward)(const struct mpx_backend *be, const mpx_dropout_attr *a,
                                  const mpx_tensor *x, mpx_tensor *y);
    mpx_status (*dropout_backward)(const struct mpx_backend *be, const mpx_dropout_attr *a,
                                   const mpx_tensor *dy, mpx_tensor *dx);
    mpx_status (*permute_forward)(const struct mpx_backend *be, const int *perm,
                                  const mpx_tensor *x, mpx_tensor *y);
    mpx_status (*permute_backward)(const struct mpx_backend *be, const int *perm,
                                   const mpx_tensor *dy, mpx_tensor *dx);

    /* Optional (NULL: none): backward-data with the result multiplied by `scale` (a power of
     * two) before its one rounding into dx — a layer's adaptive factor applied in the op, so
     * that the executor can let it write a 16-bit dx directly (graph_exec.c: grad_direct)
     * where the factor is not 1. Same arguments as the plain entries otherwise. */
    mpx_status (*conv2d_backward_data_scaled)(const struct mpx_backend *be,
                                              const mpx_conv2d_attr *a, float scale,
                                              const mpx_tensor *dy, const mpx_tensor *w,
                                              mpx_tensor *dx);
    mpx_status (*linear_backward_data_scaled)(const struct mpx_backend *be, float scale,
                                              const mpx_tensor *dy, const mpx_tensor *w,
                                              mpx_tensor *dx);
    mpx_status (*linear_t_backward_data_scaled)(const struct mpx_backend *be, float scale,
                                                const mpx_tensor *dy, const mpx_tensor *w,
                                                mpx_tensor *dx);

    /* detection: the MultiBox loss (ssd.h) */
    mpx_status (*multibox_forward)(const struct mpx_backend *be, const mpx_multibox_attr *a,
                                   const mpx_tensor *conf, const mpx_tensor *loc,
                                   const mpx_tensor *priors, const mpx_tensor *gt_boxes,
                                   const mpx_tensor *gt_labels, mpx_tensor *workspace,
                                   mpx_tensor *loss, mpx_tensor *probs, mpx_tensor *target,
                                   mpx_tensor *loc_target);
    mpx_status (*multibox_backward)(const struct mpx_backend *be, const mpx_multibox_attr *a,
                                    const mpx_tensor *probs, const mpx_tensor *target,
                                    const mpx_tensor *loc, const mpx_tensor *loc_target,
                                    mpx_tensor *dconf, mpx_tensor *dloc);
} mpx_backend;

/* The backend for a device, or NULL (with a message) when it is not built or has no device. */
const mpx_backend *mpx_backend_get(mpx_device device);
/* The CPU backend (made, with its operators' context, on the first call); NULL with a message
 * when that context cannot be made. */
const mpx_backend *mpx_backend_cpu(void);
/* A CPU backend's operators' context, for benchmarks and tests that set its switches or call
 * the CPU ops beside it; NULL for another backend. */
mpx_cpu_ctx *mpx_backend_cpu_ctx(const mpx_backend *be);
/* 1 when the CUDA backend was compiled into this build. */
int mpx_backend_cuda_built(void);

#ifdef __cplusplus
}
#endif

#endif
