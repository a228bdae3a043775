/* cuda.h — the CUDA backend's C API (built when a CUDA toolkit is found; see MPX_HAVE_CUDA).
 *
 * Device pointers are plain pointers from cudaMalloc. Work is queued on the default stream and
 * no function here waits for the device, except the reductions that hand a value back to the
 * host and the operators that check ids, labels or mask values (below): errors from a kernel's
 * execution surface at the caller's next synchronisation.
 */
#ifndef MPX_CUDA_H
#define MPX_CUDA_H

#include <stddef.h>

#include "mpx/backend.h"
#include "mpx/error.h"
#include "mpx/fixed.h"
#include "mpx/fp8.h"
#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is none or no driver. */
int mpx_cuda_device_count(void);
/* Why mpx_cuda_device_count() found nothing ("no CUDA-capable device is detected", ...). */
const char *mpx_cuda_last_error(void);
/* The CUDA backend (backend.h): memory, the counted cast, the numerics and optimizer entries,
 * and the operators declared below (GEMMs on cuBLAS, convolution on cuDNN, own kernels for the
 * rest; the MultiBox forward runs on the host, see below). Every operator entry is set. */
const struct mpx_backend *mpx_backend_cuda(void);
/* The CUDA operators' context: what the GEMM family and the convolutions keep between calls
 * (the cuBLAS and cuDNN handles, made on first use on the then-current device; cuDNN's
 * algorithm table and shared workspace; the count of 16-bit convolution plans cuDNN refused).
 * The CUDA backend owns one (its state, backend.h); tests may make their own. NULL (with a
 * message) when out of host memory. */
typedef struct mpx_cuda_ctx mpx_cuda_ctx;
mpx_cuda_ctx *mpx_cuda_ctx_create(void);
/* Frees the handles, the table and the workspace (made again on next use); the context stays
 * usable. Waits for the device. */
mpx_status mpx_cuda_ctx_release(mpx_cuda_ctx *ctx);
/* Releases and frees ctx (NULL: nothing); the first failure of the release, or MPX_OK. */
mpx_status mpx_cuda_ctx_free(mpx_cuda_ctx *ctx);
/* The table's entries cannot return a status: a failing entry sets the message and, where it
 * returns a value, returns a poisoned one (NaN for a reduction). This returns the first such
 * failure on this thread since the last call (MPX_OK when none) and forgets it; it is the
 * table's last_error, which the executor asks after every pass. */
mpx_status mpx_backend_cuda_error(void);
/* The format the F32 operands of the GEMM-family operators (conv2d, linear, linear_t, bmm) run
 * with this context are exact in: F32 (the default: nothing declared), F16 or BF16 (an
 * executor running a 16-bit precision mode, whose operands come from 16-bit storage), or TF32
 * (tf32 mode, whose executor rounds them to TF32 first). With F16, BF16 or TF32 declared those
 * operators run on tensor cores (cuDNN tensor-op math, cuBLAS CUBLAS_COMPUTE_32F_FAST_TF32 on
 * F32 data, 16-bit tensor cores on 16-bit data): every F16 and BF16 value is a TF32 value
 * (TF32 has FP32's exponent range and F16's 10 fraction bits), so the conversion is exact, the
 * products are exact in FP32 and the accumulation stays FP32. With F32 they use FP32 FMA math
 * (no TF32, no tensor cores on F32 data). MPX_ERR_INPUT for any other dtype. The backend
 * table's gemm_operands entry. */
mpx_status mpx_cuda_set_operand_format(mpx_cuda_ctx *ctx, mpx_dtype exact);
mpx_dtype mpx_cuda_operand_format(const mpx_cuda_ctx *ctx);
/* Frees what the backend keeps for the life of the process: its operators' context's handles,
 * cuDNN's algorithm table and workspace, the pinned upload buffers and the index-check slots
 * (the next call makes them again). Waits for the device. For leak checkers (compute-sanitizer
 * --leak-check full) and long-lived hosts. */
mpx_status mpx_cuda_release(void);
/* "NVIDIA H100 80GB HBM3"; "" for an invalid index. The buffer is per thread and is reused by
 * the next call on the same thread. */
const char *mpx_cuda_device_name(int device);

/* mpx_cast on the device (numerics.h), with the same semantics and the same bits: src and dst
 * are device pointers; spec is host memory and spec->stats, when not NULL, points to an
 * mpx_cast_stats in DEVICE memory to which the counts are added atomically. Supported: dst F32,
 * F16 or BF16; stats_format F16 or BF16 (others: MPX_ERR_UNSUPPORTED). Asynchronous. */
mpx_status mpx_cast_cuda(const mpx_cast_spec *spec, const float *src, void *dst, size_t n);

/* The quantizing modes' operand casts on the device (quantize.cu): fp8.h's mpx_fp8_quantize,
 * mpx_mx_quantize and mpx_mx_quantize_cols, fixed.h's mpx_fixed_quantize, with the same values
 * and counts. src and dst (may be src) are device pointers, stats (when not NULL) an
 * mpx_cast_stats in DEVICE memory added to atomically, sc host memory. Asynchronous, except
 * mx_quantize with sc, which waits for the block scales. */
mpx_status mpx_fp8_quantize_cuda(mpx_dtype fmt, float scale, const float *src, float *dst, size_t n,
                                 mpx_cast_stats *stats);
mpx_status mpx_mx_quantize_cuda(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst,
                                size_t n, size_t row, mpx_cast_stats *stats, mpx_mx_scales *sc);
mpx_status mpx_mx_quantize_cols_cuda(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst,
                                     size_t batches, size_t rows, size_t cols,
                                     mpx_cast_stats *stats, mpx_mx_scales *sc);
mpx_status mpx_fixed_quantize_cuda(const mpx_fixed_spec *s, const float *src, float *dst, size_t n,
                                   mpx_cast_stats *stats);

/* ---- numerics and optimizer updates on the device ----
 * The backend entries of backend.h with the CPU backend's semantics. Array arguments are device
 * pointers; `out`, returned values and the step structs are host memory. Element-wise functions
 * are asynchronous. The reductions that return a value to the host (moments, absmax,
 * abs_quantile) wait for it: each ends with one small device-to-host copy. sumsq and
 * unscale_accumulate write their results to device memory and do not wait.
 * Bits: every function gives the CPU backend's bits, Inf included (moments and sumsq keep the
 * CPU's block order, see moments.cu), except the payloads of NaN results: a NaN result is NaN;
 * decode and the accumulations keep an operand's payload as the CPU does (launch.cuh). */

/* mpx_decode: any floating src dtype (F32 copies); MPX_ERR_UNSUPPORTED for the others. */
mpx_status mpx_decode_cuda(mpx_dtype src_dtype, const void *src, float *dst, size_t n);
/* mpx_moments_f32. */
mpx_status mpx_moments_cuda(const float *x, size_t n, mpx_moments *out);
/* The same into *out in DEVICE memory (asynchronous: no wait). */
mpx_status mpx_moments_to_cuda(const float *x, size_t n, mpx_moments *out);
/* mpx_absmax_f32. */
mpx_status mpx_absmax_cuda(const float *x, size_t n, float *out);
/* The same into *out in DEVICE memory (asynchronous: no wait). */
mpx_status mpx_absmax_to_cuda(const float *x, size_t n, float *out);
/* backend.h's merge_check: absmax and *misses in DEVICE memory, pending and S host arrays of k
 * (1..32) entries; asynchronous. */
mpx_status mpx_merge_check_cuda(const float *absmax, int k, const double *pending,
                                const double *S, double target, double u_max, uint32_t *misses);
/* mpx_abs_quantile_ceil_pow2. */
mpx_status mpx_abs_quantile_cuda(const float *x, size_t n, double q, float scale, float *out);
/* acc[i] += scale * x[i] (FP32, no fused multiply-add, as on the CPU). */
mpx_status mpx_accumulate_cuda(float *acc, const float *x, size_t n, float scale);
/* acc[i] += decode(g[i]) * (float)inv_scale, rounded back to g_dtype first when
 * round_to_storage; how many of those addends are Inf or NaN is added to *nonfinite, a counter
 * in DEVICE memory (asynchronous: no wait). Any floating g_dtype. */
mpx_status mpx_unscale_accumulate_cuda(mpx_dtype g_dtype, const void *g, size_t n,
                                       double inv_scale, int round_to_storage, float *acc,
                                       uint64_t *nonfinite);
/* Sum of squares in double over fixed blocks of 4096, in block order (the CPU's sumsq), written
 * to *out in DEVICE memory (asynchronous: no wait). */
mpx_status mpx_sumsq_cuda(const float *x, size_t n, double *out);
/* How many times the host has waited for the device through this backend (backend.h's
 * host_waits): downloads, synchronisations, the reductions that return a value, a deferred
 * index check that finds all its slots pending, and an upload that finds every pinned staging
 * buffer in flight. */
int64_t mpx_cuda_host_waits(void);
/* The backend table's scratch_peak: the stream-ordered pool's high-water mark of memory in use
 * by the operators' scratch, plus the cuDNN workspace of ctx (0 when the pool cannot say). */
size_t mpx_cuda_scratch_peak(mpx_cuda_ctx *ctx);
/* The backend table's conv16_fallbacks: convolution plans on 16-bit data (pass and shape) that
 * cuDNN could not run — no algorithm, or a "not supported" status from the call — and that
 * therefore run on FP32 data (decoded operands; correct, slower). Each is counted once. */
int64_t mpx_cuda_conv16_fallbacks(mpx_cuda_ctx *ctx);
/* The optimizer rules of backend_cpu.c (optim.h): SGD, AdamW, the LAMB direction, w -= a u. */
mpx_status mpx_sgd_update_cuda(float *w, const float *g, float *v, size_t n,
                               const mpx_sgd_step *s);
mpx_status mpx_adamw_update_cuda(float *w, const float *g, float *m, float *v, size_t n,
                                 const mpx_adamw_step *s);
mpx_status mpx_lamb_direction_cuda(const float *w, float *g, float *m, float *v, size_t n,
                                   const mpx_adamw_step *s);
mpx_status mpx_scaled_sub_cuda(float *w, const float *u, size_t n, float a, float *delta);

/* ---- operators (ops.h): mpx_<op>_<pass>_cuda has the signature and the semantics of
 * mpx_<op>_<pass>_cpu, on device tensors (device MPX_DEV_CUDA, data a device pointer; attributes,
 * perm and the mpx_tensor structs themselves are host memory). Unlike the CPU ops, every float
 * tensor may be F32, F16 or BF16, each its own (the executor passes storage dtypes through):
 * elements are decoded exactly, computed in FP32 (FP32 accumulation, statistics in FP32 from
 * double sums as on the CPU) and rounded once, to nearest even, into the output's dtype. FP8
 * tensors are MPX_ERR_UNSUPPORTED. Asynchronous on the default stream, except the checks of ids
 * (embedding), labels (softmax_ce) and mask values (softmax), which read 16 bytes back (one
 * synchronisation per call) so that a bad value is an MPX_ERR_INPUT naming its position, as on
 * the CPU. Bits, against the CPU op followed by the executor's rounding into the same storage:
 * identical for relu, add, dropout (the same Philox mask), permute, pooling, embedding (forward
 * and backward: duplicates added in position order), layer-norm's dgamma/dbeta (the CPU's
 * chunked double sums) and the linear bias gradient; within a few FP32 ulps where CUDA's expf /
 * erfcf or a differently ordered double sum enter (GELU, softmax, layer-norm, the loss); cuBLAS
 * GEMMs within the FP32 summation-order bound (K 2^-24 relative to sum |a b|). The test
 * tests/cuda/test_ops_cuda*.c states each tolerance. ---- */
mpx_status mpx_linear_forward_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                   const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_linear_backward_data_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                         const mpx_tensor *w, mpx_tensor *dx);
/* The backward-data passes with the FP32 result times `scale` (a power of two: exact) before
 * the one rounding into dx (backend.h: *_backward_data_scaled). */
mpx_status mpx_linear_backward_data_scaled_cuda(mpx_cuda_ctx *ctx, float scale,
                                                const mpx_tensor *dy, const mpx_tensor *w,
                                                mpx_tensor *dx);
mpx_status mpx_linear_t_backward_data_scaled_cuda(mpx_cuda_ctx *ctx, float scale,
                                                  const mpx_tensor *dy, const mpx_tensor *w,
                                                  mpx_tensor *dx);
mpx_status mpx_linear_backward_weights_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                            const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db);
mpx_status mpx_linear_t_forward_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                     const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_linear_t_backward_data_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                           const mpx_tensor *w, mpx_tensor *dx);
mpx_status mpx_linear_t_backward_weights_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                              const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db);
mpx_status mpx_bmm_forward_cuda(mpx_cuda_ctx *ctx, const mpx_bmm_attr *at, const mpx_tensor *a,
                                const mpx_tensor *b, mpx_tensor *c);
mpx_status mpx_bmm_backward_cuda(mpx_cuda_ctx *ctx, const mpx_bmm_attr *at, const mpx_tensor *dc,
                                 const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *da,
                                 mpx_tensor *db);
mpx_status mpx_relu_forward_cuda(const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_relu_backward_cuda(const mpx_tensor *dy, const mpx_tensor *y, mpx_tensor *dx);
mpx_status mpx_add_forward_cuda(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_add_relu_forward_cuda(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_gelu_forward_cuda(const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_gelu_backward_cuda(const mpx_tensor *dy, const mpx_tensor *x, mpx_tensor *dx);
mpx_status mpx_softmax_forward_cuda(float scale, const mpx_tensor *x, const mpx_tensor *mask,
                                    mpx_tensor *y);
mpx_status mpx_softmax_backward_cuda(float scale, const mpx_tensor *dy, const mpx_tensor *y,
                                     mpx_tensor *dx);
mpx_status mpx_layernorm_forward_cuda(float eps, const mpx_tensor *x, const mpx_tensor *gamma,
                                      const mpx_tensor *beta, mpx_tensor *save_mean,
                                      mpx_tensor *save_invstd, mpx_tensor *y);
mpx_status mpx_layernorm_backward_cuda(const mpx_tensor *dy, const mpx_tensor *x,
                                       const mpx_tensor *gamma, const mpx_tensor *save_mean,
                                       const mpx_tensor *save_invstd, mpx_tensor *dx,
                                       mpx_tensor *dgamma, mpx_tensor *dbeta);
/* Make `device` the current one for this process (before any allocation). */
mpx_status mpx_cuda_use_device(int device);
/* x[0..n) (device memory) summed over the ranks with NCCL and multiplied by post_scale, in
 * place, on the current stream; MPX_ERR_UNSUPPORTED in a build without NCCL. */
mpx_status mpx_nccl_allreduce_sum(float *x, size_t n, float post_scale);
mpx_status mpx_l2norm_forward_cuda(float eps, const mpx_tensor *x, const mpx_tensor *gamma,
                                   mpx_tensor *save_inv, mpx_tensor *y);
mpx_status mpx_l2norm_backward_cuda(const mpx_tensor *dy, const mpx_tensor *x,
                                    const mpx_tensor *gamma, const mpx_tensor *save_inv,
                                    mpx_tensor *dx, mpx_tensor *dgamma);
mpx_status mpx_embedding_forward_cuda(const mpx_tensor *ids, const mpx_tensor *table,
                                      mpx_tensor *y);
mpx_status mpx_embedding_backward_cuda(const mpx_tensor *dy, const mpx_tensor *ids,
                                       mpx_tensor *dtable);
mpx_status mpx_dropout_forward_cuda(const mpx_dropout_attr *a, const mpx_tensor *x,
                                    mpx_tensor *y);
mpx_status mpx_dropout_backward_cuda(const mpx_dropout_attr *a, const mpx_tensor *dy,
                                     mpx_tensor *dx);
mpx_status mpx_softmax_ce_forward_cuda(const mpx_tensor *logits, const mpx_tensor *labels,
                                       mpx_tensor *loss, mpx_tensor *probs);
mpx_status mpx_softmax_ce_backward_cuda(const mpx_tensor *probs, const mpx_tensor *labels,
                                        mpx_tensor *dlogits);
mpx_status mpx_permute_forward_cuda(const int *perm, const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_permute_backward_cuda(const int *perm, const mpx_tensor *dy, mpx_tensor *dx);
mpx_status mpx_maxpool2d_forward_cuda(const mpx_pool2d_attr *a, const mpx_tensor *x,
                                      mpx_tensor *y);
mpx_status mpx_maxpool2d_backward_cuda(const mpx_pool2d_attr *a, const mpx_tensor *dy,
                                       const mpx_tensor *x, const mpx_tensor *y, mpx_tensor *dx);
mpx_status mpx_avgpool_global_forward_cuda(const mpx_tensor *x, mpx_tensor *y);
mpx_status mpx_avgpool_global_backward_cuda(const mpx_tensor *dy, mpx_tensor *dx);
/* conv2d on cuDNN (conv.cu): FP32 compute; FMA math (no tensor cores, no TF32) unless the
 * operands are declared exact in a 16-bit format (mpx_cuda_set_operand_format), then tensor-op
 * math — on the 16-bit data itself where every tensor of the pass is stored in that format,
 * else on FP32 data (16-bit tensors decoded into scratch); HWIO weights reordered to cuDNN's
 * KRSC; algorithms from cudnnGet*Algorithm_v7, deterministic ones only, cached per (pass,
 * shape, math, data type). Within the FP32 summation-order bound of a GEMM of length
 * K = C KH KW (forward), K KH KW (backward-data) or N OH OW (backward-weights); the bias
 * gradient is a double column sum. */
mpx_status mpx_conv2d_forward_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a, const mpx_tensor *x,
                                   const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y);
mpx_status mpx_conv2d_backward_data_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a,
                                         const mpx_tensor *dy, const mpx_tensor *w, mpx_tensor *dx);
/* ... with the FP32 result times `scale` (a power of two) before its one rounding. */
mpx_status mpx_conv2d_backward_data_scaled_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a,
                                                float scale, const mpx_tensor *dy,
                                                const mpx_tensor *w, mpx_tensor *dx);
mpx_status mpx_conv2d_backward_weights_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a,
                                            const mpx_tensor *dy, const mpx_tensor *x,
                                            mpx_tensor *dw, mpx_tensor *db);
/* batch-norm (batchnorm.cu, own kernels): the CPU's chunked double sums and FP32 element-wise
 * operations in the CPU's order (no FMA contraction): the CPU's bits, statistics included. */
mpx_status mpx_batchnorm_forward_cuda(const mpx_batchnorm_attr *a, const mpx_tensor *x,
                                      const mpx_tensor *gamma, const mpx_tensor *beta,
                                      mpx_tensor *running_mean, mpx_tensor *running_var,
                                      mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                      mpx_tensor *y);
mpx_status mpx_batchnorm_backward_cuda(const mpx_batchnorm_attr *a, const mpx_tensor *dy,
                                       const mpx_tensor *x, const mpx_tensor *gamma,
                                       const mpx_tensor *beta, const mpx_tensor *save_mean,
                                       const mpx_tensor *save_invstd, mpx_tensor *dx,
                                       mpx_tensor *dgamma, mpx_tensor *dbeta);
/* The MultiBox loss (multibox.cu), on the device without a wait. The forward matches, mines and
 * sums with the CPU op's arithmetic (lib/ops/ssd_box.h, no FMA contraction) in the CPU's order,
 * in the same workspace layout: the same target, and probs / loc_target / loss within one ulp
 * (exp and log in double, where CUDA and glibc may differ by an ulp of double). Bad ground truth
 * and, in the backward, a bad target are reported at the backend's next wait. The backward
 * runs the CPU's FP32 operations (the CPU's bits). */
mpx_status mpx_multibox_forward_cuda(const mpx_multibox_attr *a, const mpx_tensor *conf,
                                     const mpx_tensor *loc, const mpx_tensor *priors,
                                     const mpx_tensor *gt_boxes, const mpx_tensor *gt_labels,
                                     mpx_tensor *workspace, mpx_tensor *loss, mpx_tensor *probs,
                                     mpx_tensor *target, mpx_tensor *loc_target);
mpx_status mpx_multibox_backward_cuda(const mpx_multibox_attr *a, const mpx_tensor *probs,
                                      const mpx_tensor *target, const mpx_tensor *loc,
                                      const mpx_tensor *loc_target, mpx_tensor *dconf,
                                      mpx_tensor *dloc);

#ifdef __cplusplus
}
#endif

#endif
