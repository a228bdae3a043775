/* backend_cpu.c — the CPU backend: host memory, the numerics of lib/numerics, the ops of lib/ops.
 *
 * The CPU operators compute in FP32 only; FP16/BF16 storage is emulated by the executor
 * (decode to FP32 scratch, round on write), so `native` accepts F32 alone.
 */
#include <math.h>
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
static int64_t cpu_host_waits(void) { return atomic_load_explicit(&g_waits, memory_order_relaxed); }
/* Every CPU entry reports its failure directly or cannot fail. */
static mpx_status cpu_last_error(void) { return MPX_OK; }

/* The CPU backend runs synchronously: nothing to wait for, but a device would. */
static void cpu_sync(void) { count_wait(); }

static int cpu_native(mpx_dtype t) { return t == MPX_F32 || t == MPX_I32; }

static void *cpu_alloc(size_t bytes) {
    /* 64-byte alignment for AVX-512 loads; zeroed like the contract says. */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_download(void *host, const void *src, size_t bytes) {
    count_wait();
    memmove(host, src, bytes);
}
static void cpu_moments(const float *x, size_t n, mpx_moments *out) {
    count_wait();
    mpx_moments_f32(x, n, out);
}
static void cpu_moments_to(const float *x, size_t n, mpx_moments *out) {
    mpx_moments_f32(x, n, out);
}
static float cpu_abs_quantile(const float *x, size_t n, double q, float scale) {
    count_wait();
    return mpx_abs_quantile_ceil_pow2(x, n, q, scale);
}
static float cpu_absmax(const float *x, size_t n) {
    count_wait();
    return mpx_absmax_f32(x, n);
}
static void cpu_accumulate_absmax(float *acc, const float *x, size_t n, float scale,
                                  float *acc_absmax, float *x_absmax) {
    mpx_accumulate_absmax_f32(acc, x, n, scale, acc_absmax, x_absmax);
}
static void cpu_absmax_to(const float *x, size_t n, float *out) { *out = mpx_absmax_f32(x, n); }
static void cpu_merge_check(const float *absmax, int k, const double *pending, const double *S,
                            double target, double u_max, uint32_t *misses) {
    *misses += !mpx_als_merge_keeps(absmax, k, pending, S, target, u_max);
}

static void cpu_unscale_accumulate(mpx_dtype g_dtype, const void *g, size_t n, double inv_scale,
                                   int round_to_storage, float *acc, uint64_t *nonfinite) {
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

static void cpu_sumsq(const float *x, size_t n, double *out) {
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
static void cpu_sgd_update(float *w, const float *g, float *v, size_t n, const mpx_sgd_step *s) {
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
static void cpu_adamw_update(float *w, const float *g, float *m, float *v, size_t n,
                             const mpx_adamw_step *s) {
    float *delta = s->delta;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) {
        const float d = s->lr * adam_direction(w[k], g[k], &m[k], &v[k], s);
        w[k] -= d;
        if (delta) delta[k] = d;
    }
}

static void cpu_lamb_direction(const float *w, float *g, float *m, float *v, size_t n,
                               const mpx_adamw_step *s) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) g[k] = adam_direction(w[k], g[k], &m[k], &v[k], s);
}

static void cpu_scaled_sub(float *w, const float *u, size_t n, float a, float *delta) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < n; k++) {
        const float d = a * u[k];
        w[k] -= d;
        if (delta) delta[k] = d;
    }
}

/* The GEMM family multiplies 16-bit storage natively where oneDNN can on this CPU (BF16 with
 * AVX512_BF16 or AMX; F16 where oneDNN has it): ops.h, mpx_gemm_lowp_native. */
static int cpu_gemm_direct_io(mpx_dtype t) { return mpx_gemm_lowp_native(t); }

static const mpx_backend g_cpu = {
    .name = "cpu",
    .device = MPX_DEV_CPU,
    .native = cpu_native,
    .gemm_direct_io = cpu_gemm_direct_io,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload = cpu_copy,
    .download = cpu_download,
    .sync = cpu_sync,
    .host_waits = cpu_host_waits,
    .last_error = cpu_last_error,
    .cast = mpx_cast,
    .decode = mpx_decode,
    .moments = cpu_moments,
    .moments_to = cpu_moments_to,
    .abs_quantile = cpu_abs_quantile,
    .absmax = cpu_absmax,
    .accumulate = mpx_accumulate_f32,
    .accumulate_absmax = cpu_accumulate_absmax,
    .absmax_to = cpu_absmax_to,
    .merge_check = cpu_merge_check,
    .unscale_accumulate = cpu_unscale_accumulate,
    .sumsq = cpu_sumsq,
    .sgd_update = cpu_sgd_update,
    .adamw_update = cpu_adamw_update,
    .lamb_direction = cpu_lamb_direction,
    .scaled_sub = cpu_scaled_sub,
    .conv2d_forward = mpx_conv2d_forward_cpu,
    .conv2d_backward_data = mpx_conv2d_backward_data_cpu,
    .conv2d_backward_weights = mpx_conv2d_backward_weights_cpu,
    .batchnorm_forward = mpx_batchnorm_forward_cpu,
    .batchnorm_backward = mpx_batchnorm_backward_cpu,
    .relu_forward = mpx_relu_forward_cpu,
    .relu_backward = mpx_relu_backward_cpu,
    .maxpool2d_forward = mpx_maxpool2d_forward_cpu,
    .maxpool2d_backward = mpx_maxpool2d_backward_cpu,
    .avgpool_global_forward = mpx_avgpool_global_forward_cpu,
    .avgpool_global_backward = mpx_avgpool_global_backward_cpu,
    .linear_forward = mpx_linear_forward_cpu,
    .linear_backward_data = mpx_linear_backward_data_cpu,
    .linear_backward_weights = mpx_linear_backward_weights_cpu,
    .add_forward = mpx_add_forward_cpu,
    .add_relu_forward = mpx_add_relu_forward_cpu,
    .softmax_ce_forward = mpx_softmax_ce_forward_cpu,
    .softmax_ce_backward = mpx_softmax_ce_backward_cpu,
    .linear_t_forward = mpx_linear_t_forward_cpu,
    .linear_t_backward_data = mpx_linear_t_backward_data_cpu,
    .linear_t_backward_weights = mpx_linear_t_backward_weights_cpu,
    .linear_forward_rows = mpx_linear_forward_rows_cpu,
    .linear_t_forward_rows = mpx_linear_t_forward_rows_cpu,
    .skipped_flops = mpx_linear_skipped_flops,
    .layernorm_forward = mpx_layernorm_forward_cpu,
    .layernorm_backward = mpx_layernorm_backward_cpu,
    .gelu_forward = mpx_gelu_forward_cpu,
    .gelu_backward = mpx_gelu_backward_cpu,
    .embedding_forward = mpx_embedding_forward_cpu,
    .embedding_backward = mpx_embedding_backward_cpu,
    .bmm_forward = mpx_bmm_forward_cpu,
    .bmm_backward = mpx_bmm_backward_cpu,
    .softmax_forward = mpx_softmax_forward_cpu,
    .softmax_backward = mpx_softmax_backward_cpu,
    .dropout_forward = mpx_dropout_forward_cpu,
    .dropout_backward = mpx_dropout_backward_cpu,
    .permute_forward = mpx_permute_forward_cpu,
    .permute_backward = mpx_permute_backward_cpu,
    .multibox_forward = mpx_multibox_forward_cpu,
    .multibox_backward = mpx_multibox_backward_cpu,
};

const mpx_backend *mpx_backend_cpu(void) { return &g_cpu; }
