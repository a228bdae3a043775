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
static int cuda_native(mpx_dtype t) { return t == MPX_F32 || t == MPX_I32; }

/* Every operator here loads F16/BF16 tensors exactly and rounds its FP32 result once to nearest
 * even into a 16-bit output (tests/cuda check each against the CPU op in every storage dtype and
 * in the executor's mixes), so the executor hands over 16-bit storage instead of decoding it
 * into FP32 device scratch and rounding it back: one pass over memory less per view. */
static int cuda_direct_io(mpx_dtype t) { return t == MPX_F16 || t == MPX_BF16; }

static void *cuda_alloc(size_t bytes) {
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

static void cuda_free(void *p) { REMEMBER(cudaFree(p)); }
static void cuda_zero(void *p, size_t bytes) { REMEMBER(cudaMemsetAsync(p, 0, bytes)); }
static void cuda_copy(void *dst, const void *src, size_t bytes) {
    REMEMBER(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
/* A copy from pageable host memory synchronises the stream before it starts: a wait. */
/* Queued through pinned staging (staging.cu): no wait. */
static void cuda_upload(void *dst, const void *host, size_t bytes) {
    failed(cuop_upload(dst, host, bytes));
}
/* Both wait for all queued work, so the operators' deferred index checks (ops.cuh) are read
 * here, and a failed one becomes the backend's error. */
static void cuda_download(void *host, const void *src, size_t bytes) {
    mpx_cuda_count_wait();
    REMEMBER(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
    failed(cuop_checks_resolve());
}
static void cuda_sync(void) {
    mpx_cuda_count_wait();
    REMEMBER(cudaDeviceSynchronize());
    failed(cuop_checks_resolve());
}
static void cuda_gemm_operands(mpx_dtype exact) { failed(mpx_cuda_set_operand_format(exact)); }
static void cuda_cast(const mpx_cast_spec *spec, const float *src, void *dst, size_t n) {
    failed(mpx_cast_cuda(spec, src, dst, n));
}

/* ---- numerics (elementwise.cu, moments.cu) ---- */

static void cuda_decode(mpx_dtype src_dtype, const void *src, float *dst, size_t n) {
    failed(mpx_decode_cuda(src_dtype, src, dst, n));
}
static void cuda_moments(const float *x, size_t n, mpx_moments *out) {
    if (failed(mpx_moments_cuda(x, n, out))) {
        out->n = n;
        out->mean = out->std = NAN;
        out->min = out->max = out->absmax = NAN;
        out->all_finite = 0;
    }
}
static void cuda_moments_to(const float *x, size_t n, mpx_moments *out) {
    failed(mpx_moments_to_cuda(x, n, out));
}
static float cuda_abs_quantile(const float *x, size_t n, double q, float scale) {
    float r = NAN;
    return failed(mpx_abs_quantile_cuda(x, n, q, scale, &r)) ? NAN : r;
}
static float cuda_absmax(const float *x, size_t n) {
    float r = NAN;
    return failed(mpx_absmax_cuda(x, n, &r)) ? NAN : r;
}
static void cuda_accumulate(float *acc, const float *x, size_t n, float scale) {
    failed(mpx_accumulate_cuda(acc, x, n, scale));
}
/* Composed from absmax_to (device results, no wait) and accumulate (three passes where the CPU
 * makes one): each is checked against the CPU, and a fused kernel is not worth its own check
 * until the merges show in a GPU profile. */
static void cuda_accumulate_absmax(float *acc, const float *x, size_t n, float scale,
                                   float *acc_absmax, float *x_absmax) {
    if (acc_absmax) failed(mpx_absmax_to_cuda(acc, n, acc_absmax));
    if (x_absmax) failed(mpx_absmax_to_cuda(x, n, x_absmax));
    failed(mpx_accumulate_cuda(acc, x, n, scale));
}
static void cuda_absmax_to(const float *x, size_t n, float *out) {
    failed(mpx_absmax_to_cuda(x, n, out));
}
static void cuda_merge_check(const float *absmax, int k, const double *pending, const double *S,
                             double target, double u_max, uint32_t *misses) {
    failed(mpx_merge_check_cuda(absmax, k, pending, S, target, u_max, misses));
}
/* A failure is remembered: last_error() reports it when the pass ends. */
static void cuda_unscale_accumulate(mpx_dtype g_dtype, const void *g, size_t n, double inv_scale,
                                    int round_to_storage, float *acc, uint64_t *nonfinite) {
    failed(mpx_unscale_accumulate_cuda(g_dtype, g, n, inv_scale, round_to_storage, acc, nonfinite));
}

/* ---- optimizer updates (moments.cu for sumsq, optim.cu) ---- */

static void cuda_sumsq(const float *x, size_t n, double *out) {
    failed(mpx_sumsq_cuda(x, n, out));
}
static void cuda_sgd_update(float *w, const float *g, float *v, size_t n, const mpx_sgd_step *s) {
    failed(mpx_sgd_update_cuda(w, g, v, n, s));
}
static void cuda_adamw_update(float *w, const float *g, float *m, float *v, size_t n,
                              const mpx_adamw_step *s) {
    failed(mpx_adamw_update_cuda(w, g, m, v, n, s));
}
static void cuda_lamb_direction(const float *w, float *g, float *m, float *v, size_t n,
                                const mpx_adamw_step *s) {
    failed(mpx_lamb_direction_cuda(w, g, m, v, n, s));
}
static void cuda_scaled_sub(float *w, const float *u, size_t n, float a, float *delta) {
    failed(mpx_scaled_sub_cuda(w, u, n, a, delta));
}

static mpx_backend make_backend(void) {
    mpx_backend b = {};
    b.name = "cuda";
    b.device = MPX_DEV_CUDA;
    b.native = cuda_native;
    b.direct_io = cuda_direct_io;
    b.alloc = cuda_alloc;
    b.free = cuda_free;
    b.zero = cuda_zero;
    b.copy = cuda_copy;
    b.upload = cuda_upload;
    b.download = cuda_download;
    b.sync = cuda_sync;
    b.host_waits = mpx_cuda_host_waits;
    b.last_error = mpx_backend_cuda_error;
    b.scratch_peak = mpx_cuda_scratch_peak;
    b.conv16_fallbacks = mpx_cuda_conv16_fallbacks;
    b.gemm_operands = cuda_gemm_operands;
    b.cast = cuda_cast;
    b.decode = cuda_decode;
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
    b.relu_forward = mpx_relu_forward_cuda;
    b.relu_backward = mpx_relu_backward_cuda;
    b.maxpool2d_forward = mpx_maxpool2d_forward_cuda;
    b.maxpool2d_backward = mpx_maxpool2d_backward_cuda;
    b.avgpool_global_forward = mpx_avgpool_global_forward_cuda;
    b.avgpool_global_backward = mpx_avgpool_global_backward_cuda;
    b.linear_forward = mpx_linear_forward_cuda;
    b.linear_backward_data = mpx_linear_backward_data_cuda;
    b.linear_backward_weights = mpx_linear_backward_weights_cuda;
    b.add_forward = mpx_add_forward_cuda;
    b.add_relu_forward = mpx_add_relu_forward_cuda;
    b.softmax_ce_forward = mpx_softmax_ce_forward_cuda;
    b.softmax_ce_backward = mpx_softmax_ce_backward_cuda;
    b.linear_t_forward = mpx_linear_t_forward_cuda;
    b.linear_t_backward_data = mpx_linear_t_backward_data_cuda;
    b.linear_t_backward_weights = mpx_linear_t_backward_weights_cuda;
    b.layernorm_forward = mpx_layernorm_forward_cuda;
    b.layernorm_backward = mpx_layernorm_backward_cuda;
    b.gelu_forward = mpx_gelu_forward_cuda;
    b.gelu_backward = mpx_gelu_backward_cuda;
    b.embedding_forward = mpx_embedding_forward_cuda;
    b.embedding_backward = mpx_embedding_backward_cuda;
    b.bmm_forward = mpx_bmm_forward_cuda;
    b.bmm_backward = mpx_bmm_backward_cuda;
    b.softmax_forward = mpx_softmax_forward_cuda;
    b.softmax_backward = mpx_softmax_backward_cuda;
    b.dropout_forward = mpx_dropout_forward_cuda;
    b.dropout_backward = mpx_dropout_backward_cuda;
    b.permute_forward = mpx_permute_forward_cuda;
    b.permute_backward = mpx_permute_backward_cuda;
    b.conv2d_forward = mpx_conv2d_forward_cuda;
    b.conv2d_backward_data = mpx_conv2d_backward_data_cuda;
    b.conv2d_backward_data_scaled = mpx_conv2d_backward_data_scaled_cuda;
    b.linear_backward_data_scaled = mpx_linear_backward_data_scaled_cuda;
    b.linear_t_backward_data_scaled = mpx_linear_t_backward_data_scaled_cuda;
    b.conv2d_backward_weights = mpx_conv2d_backward_weights_cuda;
    b.batchnorm_forward = mpx_batchnorm_forward_cuda;
    b.batchnorm_backward = mpx_batchnorm_backward_cuda;
    b.multibox_forward = mpx_multibox_forward_cuda;
    b.multibox_backward = mpx_multibox_backward_cuda;
    return b;
}

static const mpx_backend g_cuda = make_backend();

extern "C" const mpx_backend *mpx_backend_cuda(void) { return &g_cuda; }
