/* batchnorm.cu — batch-norm over the channel (last) dimension, forward (training and inference)
 * and backward, with the semantics and the arithmetic of lib/ops/batchnorm.c, on own kernels.
 *
 * Why not cuDNN: cudnnBatchNormalization* computes its statistics in its own order and
 * precision and its saved inverse std and running-variance update are not guaranteed to be the
 * CPU's double-precision values, so the results would not match the CPU op bit for bit.
 *
 * Arithmetic (the CPU's, step for step): x [..., C] viewed as [M, C]; rows are split into the
 * CPU's fixed chunks (a function of M only: max(ceil(M / 4096), 64) rows each). One thread per
 * (chunk, channel) accumulates that chunk's sums in double in row order (forward: the shifted
 * moments sum (x - x[0]) and sum (x - x[0])^2; backward: sum dy and sum dy (x - mean)); one
 * thread per (group of 64 chunks, channel) adds its group's partials in chunk order; one thread
 * per channel adds the group sums in group order and derives the statistics in double exactly
 * as batchnorm.c does; the element-wise pass uses the CPU's FP32 operations.
 * Every add and multiply is an explicit _rn intrinsic, so nvcc cannot contract into FMAs (the
 * CPU build has none either). No atomics: results do not depend on scheduling, and match the
 * CPU's bits (F32) or the CPU's result rounded once into the storage dtype (F16/BF16).
 *
 * Dtypes: every tensor may be F32, F16 or BF16 (elements decoded exactly to FP32, outputs
 * rounded once to nearest even). The statistics (running and saved) are normally FP32.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"
#include "mpx/ops.h"

namespace {

const char *const FWD = "batchnorm forward";
const char *const BWD = "batchnorm backward";

constexpr int64_t kChunkMin = 64, kMaxChunks = 4096, kGroup = 64;

int64_t chunking(int64_t m, int64_t *rows) {
    int64_t r = (m + kMaxChunks - 1) / kMaxChunks;
    if (r < kChunkMin) r = kChunkMin;
    *rows = r;
    return (m + r - 1) / r;
}

mpx_status bn_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m,
                   int64_t *c) {
    MPX_TRY(cuop_expect_float(op, name, x, -1));
    if (x->ndim < 2)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dim, expected [..., C] with >= 2 dims", op,
                        name, x->ndim);
    *c = x->shape[x->ndim - 1];
    *m = mpx_tensor_numel(x) / *c;
    return MPX_OK;
}

mpx_status bn_channel_vec(const char *op, const char *name, const mpx_tensor *t, int64_t c) {
    MPX_TRY(cuop_expect_float(op, name, t, 1));
    return cuop_expect_dim(op, name, t, 0, c, "C, the last dim of x");
}

struct Vec {
    const void *p;
    mpx_dtype dt;
};
__device__ __forceinline__ float ld(Vec v, size_t i) { return cuop_ld(v.p, v.dt, i); }
Vec vec(const mpx_tensor *t) { return Vec{t->data, t->dtype}; }

/* part[(2k) c + j], part[(2k+1) c + j] for chunk k, channel j (batchnorm.c's chunk_sums).
 * Forward (b.p == NULL): sum (a - a[0]) and sum (a - a[0])^2. Backward: sum a and
 * sum a (b - mean).
 * One thread walks one chunk's rows in order (the CPU's order, so the sums are its bits). A
 * plain loop would wait on one load at a time: the rows are read kLoadAhead at a time into
 * registers first, then added in order (on an H200, with 256 chunks at most, 8 rows ahead
 * halved the batch-norms' time). With up to 4096 chunks of at least 64 rows, ResNet-50's
 * batch-norms at batch 256 run 100K-1M such threads (the 112x112x64 one 262K; with 256 chunks
 * it ran 16K, which kept the H200's memory far from busy). */
constexpr int kLoadAhead = 32;

/* The fused ReLU's backward (attr.relu_dy; batchnorm.c's relu_mask): dy where the forward's
 * FP32 result (x - mean) * scale + beta exceeds t, else +0. */
struct Mask {
    const float *scale, *beta; /* NULL scale: no mask */
    float t;
};
__device__ __forceinline__ float masked(Mask mk, float dy, float x, float mean, size_t j) {
    if (!mk.scale) return dy;
    const float v = __fadd_rn(__fmul_rn(__fsub_rn(x, mean), mk.scale[j]), mk.beta[j]);
    return v > mk.t ? dy : 0.0f;
}

__global__ void chunk_sums(Vec a, Vec b, const float *mean, Mask mk, int64_t m, int64_t c,
                           int64_t rows, int64_t nchunks, double *part) {
    const int64_t total = nchunks * c;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = t / c, j = t % c;
        const int64_t i1 = (k + 1) * rows < m ? (k + 1) * rows : m;
        double s1 = 0, s2 = 0;
        int64_t i = k * rows;
        if (!b.p) {
            const double a0 = (double)ld(a, (size_t)j);
            for (; i + kLoadAhead <= i1; i += kLoadAhead) {
                uint32_t ra[kLoadAhead];
#pragma unroll
                for (int u = 0; u < kLoadAhead; u++) ra[u] = cuop_raw(a.p, a.dt, (size_t)((i + u) * c + j));
#pragma unroll
                for (int u = 0; u < kLoadAhead; u++) {
                    const double d = __dsub_rn((double)cuop_dec(a.dt, ra[u]), a0);
                    s1 = __dadd_rn(s1, d);
                    s2 = __dadd_rn(s2, __dmul_rn(d, d));
                }
            }
            for (; i < i1; i++) {
                const double d = __dsub_rn((double)ld(a, (size_t)(i * c + j)), a0);
                s1 = __dadd_rn(s1, d);
                s2 = __dadd_rn(s2, __dmul_rn(d, d));
            }
        } else {
            const double mu = (double)mean[j];
            const float muf = mean[j];
            for (; i + kLoadAhead <= i1; i += kLoadAhead) {
                uint32_t ra[kLoadAhead], rb[kLoadAhead];
#pragma unroll
                for (int u = 0; u < kLoadAhead; u++) {
                    const size_t e = (size_t)((i + u) * c + j);
                    ra[u] = cuop_raw(a.p, a.dt, e);
                    rb[u] = cuop_raw(b.p, b.dt, e);
                }
#pragma unroll
                for (int u = 0; u < kLoadAhead; u++) {
                    const float bv = cuop_dec(b.dt, rb[u]);
                    const double av = (double)masked(mk, cuop_dec(a.dt, ra[u]), bv, muf, j);
                    s1 = __dadd_rn(s1, av);
                    s2 = __dadd_rn(s2, __dmul_rn(av, __dsub_rn((double)bv, mu)));
                }
            }
            for (; i < i1; i++) {
                const size_t e = (size_t)(i * c + j);
                const float bv = ld(b, e);
                const double av = (double)masked(mk, ld(a, e), bv, muf, j);
                s1 = __dadd_rn(s1, av);
                s2 = __dadd_rn(s2, __dmul_rn(av, __dsub_rn((double)bv, mu)));
            }
        }
        part[(2 * k) * c + j] = s1;
        part[(2 * k + 1) * c + j] = s2;
    }
}

/* Group sums in place: per (group of kGroup chunks, channel j) the group's partials added in
 * chunk order onto its first chunk's (batchnorm.c's add_partials, first level). Up to 63 adds
 * per thread, the partials loaded kPartialsAhead at a time (two doubles each, in registers). */
constexpr int kPartialsAhead = 16;

__global__ void group_sums(double *part, int64_t nchunks, int64_t c) {
    const int64_t ngroups = (nchunks + kGroup - 1) / kGroup, total = ngroups * c;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t g0 = t / c * kGroup, j = t % c;
        const int64_t g1 = g0 + kGroup < nchunks ? g0 + kGroup : nchunks;
        double a = part[(2 * g0) * c + j], b = part[(2 * g0 + 1) * c + j];
        int64_t k = g0 + 1;
        for (; k + kPartialsAhead <= g1; k += kPartialsAhead) {
            double p1[kPartialsAhead], p2[kPartialsAhead];
#pragma unroll
            for (int u = 0; u < kPartialsAhead; u++) {
                p1[u] = part[(2 * (k + u)) * c + j];
                p2[u] = part[(2 * (k + u) + 1) * c + j];
            }
#pragma unroll
            for (int u = 0; u < kPartialsAhead; u++) {
                a = __dadd_rn(a, p1[u]);
                b = __dadd_rn(b, p2[u]);
            }
        }
        for (; k < g1; k++) {
            a = __dadd_rn(a, part[(2 * k) * c + j]);
            b = __dadd_rn(b, part[(2 * k + 1) * c + j]);
        }
        part[(2 * g0) * c + j] = a;
        part[(2 * g0 + 1) * c + j] = b;
    }
}

/* Channel j's totals: the group sums (left by group_sums) added in group order from 0 (second
 * level; at most 64 groups, loaded kPartialsAhead ahead). */
__device__ void add_partials(const double *part, int64_t nchunks, int64_t c, int64_t j,
                             double *s1, double *s2) {
    const int64_t ngroups = (nchunks + kGroup - 1) / kGroup;
    double a = 0, b = 0;
    int64_t g = 0;
    for (; g + kPartialsAhead <= ngroups; g += kPartialsAhead) {
        double p1[kPartialsAhead], p2[kPartialsAhead];
#pragma unroll
        for (int u = 0; u < kPartialsAhead; u++) {
            p1[u] = part[(2 * (g + u) * kGroup) * c + j];
            p2[u] = part[(2 * (g + u) * kGroup + 1) * c + j];
        }
#pragma unroll
        for (int u = 0; u < kPartialsAhead; u++) {
            a = __dadd_rn(a, p1[u]);
            b = __dadd_rn(b, p2[u]);
        }
    }
    for (; g < ngroups; g++) {
        a = __dadd_rn(a, part[(2 * g * kGroup) * c + j]);
        b = __dadd_rn(b, part[(2 * g * kGroup + 1) * c + j]);
    }
    *s1 = a;
    *s2 = b;
}

/* The group-sum launch after chunk_sums (op and x name it in errors). */
mpx_status launch_group_sums(const char *op, const mpx_tensor *x, double *part, int64_t nchunks,
                             int64_t c) {
    unsigned grid = 0;
    MPX_TRY(mpx_cuda_grid((size_t)((nchunks + kGroup - 1) / kGroup * c), &grid));
    group_sums<<<grid, kLaunchThreads>>>(part, nchunks, c);
    CUOP_LAUNCHED(op, "group sums", x);
    return MPX_OK;
}

/* Training statistics per channel: mean/scale for the element-wise pass (FP32), saved mean and
 * inverse std, running statistics updated in place. */
__global__ void fwd_stats(const double *part, int64_t nchunks, int64_t m, int64_t c, Vec x,
                          Vec gamma, float eps, float momentum, void *rm, mpx_dtype rm_dt,
                          void *rv, mpx_dtype rv_dt, void *sm, mpx_dtype sm_dt, void *si,
                          mpx_dtype si_dt, float *mean, float *scale) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= c) return;
    double s1, s2;
    add_partials(part, nchunks, c, j, &s1, &s2);
    const double dm = __ddiv_rn(s1, (double)m);
    double var = __dsub_rn(__ddiv_rn(s2, (double)m), __dmul_rn(dm, dm));
    if (var < 0) var = 0;
    const double mu = __dadd_rn((double)ld(x, (size_t)j), dm);
    const double invstd = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, (double)eps)));
    const double mom = (double)momentum;
    mean[j] = (float)mu;
    cuop_st(sm, sm_dt, (size_t)j, (float)mu);
    cuop_st(si, si_dt, (size_t)j, (float)invstd);
    /* from the saved FP32 invstd (an exact product in double, rounded once), so that the
     * backward can recompute it (batchnorm.c: relu_dy) */
    scale[j] = (float)__dmul_rn((double)(float)invstd, (double)ld(gamma, (size_t)j));
    const double rmo = (double)cuop_ld(rm, rm_dt, (size_t)j);
    const double rvo = (double)cuop_ld(rv, rv_dt, (size_t)j);
    cuop_st(rm, rm_dt, (size_t)j, (float)__dadd_rn(__dmul_rn(__dsub_rn(1.0, mom), rmo),
                                                   __dmul_rn(mom, mu)));
    /* mom * var * m / (m - 1), left to right as in C */
    const double unb = __ddiv_rn(__dmul_rn(__dmul_rn(mom, var), (double)m), (double)(m - 1));
    cuop_st(rv, rv_dt, (size_t)j, (float)__dadd_rn(__dmul_rn(__dsub_rn(1.0, mom), rvo), unb));
}

/* Inference: the running statistics. */
__global__ void eval_stats(int64_t c, Vec gamma, Vec rm, Vec rv, float eps, float *mean,
                           float *scale) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= c) return;
    mean[j] = ld(rm, (size_t)j);
    scale[j] = (float)__ddiv_rn((double)ld(gamma, (size_t)j),
                                __dsqrt_rn(__dadd_rn((double)ld(rv, (size_t)j), (double)eps)));
}

/* y = (x - mean) * scale + beta, FP32, (with the fused ReLU: relu.c's select, NaN passes)
 * rounded once into y's dtype. */
__global__ void fwd_apply(Vec x, const float *mean, const float *scale, Vec beta, void *y,
                          mpx_dtype ydt, int64_t c, size_t n, int relu) {
    cuop_each_channel(
        n, (size_t)c, [&](size_t i, size_t) { return cuop_raw(x.p, x.dt, i); },
        [&](size_t i, size_t j, uint32_t r) {
            const float v = __fadd_rn(
                __fmul_rn(__fsub_rn(cuop_dec(x.dt, r), mean[j]), scale[j]), ld(beta, j));
            cuop_st(y, ydt, i, relu && v < 0.0f ? 0.0f : v);
        });
}

/* Backward per channel: dbeta, dgamma and the FP32 coefficients of the dx pass (kc = k,
 * kc + c = dbeta / M, kc + 2c = dgamma / M). */
__global__ void bwd_stats(const double *part, int64_t nchunks, int64_t m, int64_t c, Vec gamma,
                          const float *si, void *dg, mpx_dtype dg_dt, void *db, mpx_dtype db_dt,
                          float *kc) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= c) return;
    double sdy, sdyx;
    add_partials(part, nchunks, c, j, &sdy, &sdyx);
    sdyx = __dmul_rn(sdyx, (double)si[j]);
    cuop_st(db, db_dt, (size_t)j, (float)sdy);
    cuop_st(dg, dg_dt, (size_t)j, (float)sdyx);
    kc[j] = __fmul_rn(ld(gamma, (size_t)j), si[j]);
    kc[c + j] = (float)__ddiv_rn(sdy, (double)m);
    kc[2 * c + j] = (float)__ddiv_rn(sdyx, (double)m);
}

/* dx = k (dy - dbeta/M - xhat dgamma/M), xhat = (x - mean) invstd, FP32. */
struct XDy { /* as stored (cuop_raw) */
    uint32_t x, dy;
};

__global__ void bwd_apply(Vec dy, Vec x, const float *sm, const float *si, const float *kc,
                          Mask mk, void *dx, mpx_dtype dxdt, int64_t c, size_t n) {
    cuop_each_channel(
        n, (size_t)c,
        [&](size_t i, size_t) { return XDy{cuop_raw(x.p, x.dt, i), cuop_raw(dy.p, dy.dt, i)}; },
        [&](size_t i, size_t j, XDy r) {
            const float xv = cuop_dec(x.dt, r.x);
            const float d = masked(mk, cuop_dec(dy.dt, r.dy), xv, sm[j], j);
            const float xhat = __fmul_rn(__fsub_rn(xv, sm[j]), si[j]);
            const float inner =
                __fsub_rn(__fsub_rn(d, kc[c + j]), __fmul_rn(xhat, kc[2 * c + j]));
            cuop_st(dx, dxdt, i, __fmul_rn(kc[j], inner));
        });
}

/* The fused ReLU's per-channel vectors: the forward's scale from the saved invstd, beta. */
__global__ void relu_vectors(Vec gamma, const float *si, Vec beta, float *scale, float *bf,
                             int64_t c) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= c) return;
    scale[j] = (float)__dmul_rn((double)si[j], (double)ld(gamma, (size_t)j));
    bf[j] = ld(beta, (size_t)j);
}

/* A channel vector decoded to FP32 (kernel), in scratch of at least c floats at dst. */
__global__ void decode_vec(Vec v, float *dst, int64_t c) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j < c) dst[j] = ld(v, (size_t)j);
}

/* Scratch freed at scope exit (stream-ordered). */
struct Scratch {
    void *p = nullptr;
    ~Scratch() { mpx_cuda_scratch_free(p); }
};

unsigned channel_grid(int64_t c) { return (unsigned)((c + 127) / 128); }

} // namespace

extern "C" mpx_status mpx_batchnorm_forward_cuda(const mpx_batchnorm_attr *a, const mpx_tensor *x,
                                                 const mpx_tensor *gamma, const mpx_tensor *beta,
                                                 mpx_tensor *running_mean, mpx_tensor *running_var,
                                                 mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                                 mpx_tensor *y) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", FWD);
    if (a->reduce)
        return mpx_fail(MPX_ERR_UNSUPPORTED, "%s: synchronised statistics (attr.reduce)", FWD);
    if (!(a->eps >= 0 && isfinite(a->eps)) || !(a->momentum >= 0 && a->momentum <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be >= 0 and momentum %g in [0, 1]", FWD,
                        a->eps, a->momentum);
    int64_t m = 0, c = 0;
    MPX_TRY(bn_view(FWD, "x", x, &m, &c));
    MPX_TRY(bn_channel_vec(FWD, "gamma", gamma, c));
    MPX_TRY(bn_channel_vec(FWD, "beta", beta, c));
    MPX_TRY(bn_channel_vec(FWD, "running_mean", running_mean, c));
    MPX_TRY(bn_channel_vec(FWD, "running_var", running_var, c));
    MPX_TRY(cuop_expect_float(FWD, "y", y, -1));
    MPX_TRY(cuop_expect_same_shape(FWD, "x", x, "y", y));
    if (a->training) {
        MPX_TRY(bn_channel_vec(FWD, "save_mean", save_mean, c));
        MPX_TRY(bn_channel_vec(FWD, "save_invstd", save_invstd, c));
        if (m < 2)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: training needs more than one value per channel (x has %lld rows "
                            "of C = %lld): the unbiased running variance is undefined",
                            FWD, (long long)m, (long long)c);
    }
    int64_t rows, nchunks = chunking(m, &rows);
    Scratch s;
    const size_t part_bytes = a->training ? (size_t)(2 * nchunks * c) * sizeof(double) : 0;
    MPX_TRY(cuop_scratch(part_bytes + (size_t)(2 * c) * sizeof(float), &s.p));
    double *part = (double *)s.p;
    float *mean = (float *)((char *)s.p + part_bytes), *scale = mean + c;
    if (a->training) {
        unsigned grid;
        MPX_TRY(mpx_cuda_grid((size_t)(nchunks * c), &grid));
        chunk_sums<<<grid, kLaunchThreads>>>(vec(x), Vec{nullptr, MPX_F32}, nullptr,
                                             Mask{nullptr, nullptr, 0.0f}, m, c, rows, nchunks,
                                             part);
        CUOP_LAUNCHED(FWD, "chunk sums", x);
        MPX_TRY(launch_group_sums(FWD, x, part, nchunks, c));
        fwd_stats<<<channel_grid(c), 128>>>(
            part, nchunks, m, c, vec(x), vec(gamma), a->eps, a->momentum, running_mean->data,
            running_mean->dtype, running_var->data, running_var->dtype, save_mean->data,
            save_mean->dtype, save_invstd->data, save_invstd->dtype, mean, scale);
        CUOP_LAUNCHED(FWD, "statistics", x);
    } else {
        eval_stats<<<channel_grid(c), 128>>>(c, vec(gamma), vec(running_mean), vec(running_var),
                                             a->eps, mean, scale);
        CUOP_LAUNCHED(FWD, "statistics", x);
    }
    const size_t n = (size_t)mpx_tensor_numel(x);
    unsigned grid = 0;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    fwd_apply<<<grid, kLaunchThreads>>>(vec(x), mean, scale, vec(beta), y->data, y->dtype, c, n,
                                        a->relu);
    CUOP_LAUNCHED(FWD, "normalize", y);
    return MPX_OK;
}

extern "C" mpx_status mpx_batchnorm_backward_cuda(const mpx_batchnorm_attr *a,
                                                  const mpx_tensor *dy, const mpx_tensor *x,
                                                  const mpx_tensor *gamma,
                                                  const mpx_tensor *beta,
                                                  const mpx_tensor *save_mean,
                                                  const mpx_tensor *save_invstd, mpx_tensor *dx,
                                                  mpx_tensor *dgamma, mpx_tensor *dbeta) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", BWD);
    if (a->reduce)
        return mpx_fail(MPX_ERR_UNSUPPORTED, "%s: synchronised statistics (attr.reduce)", BWD);
    if (!a->training)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "%s: only training mode has a backward (attr.training is 0)", BWD);
    int64_t m = 0, c = 0;
    MPX_TRY(bn_view(BWD, "x", x, &m, &c));
    MPX_TRY(cuop_expect_float(BWD, "dy", dy, -1));
    MPX_TRY(cuop_expect_same_shape(BWD, "x", x, "dy", dy));
    MPX_TRY(cuop_expect_float(BWD, "dx", dx, -1));
    MPX_TRY(cuop_expect_same_shape(BWD, "x", x, "dx", dx));
    MPX_TRY(bn_channel_vec(BWD, "gamma", gamma, c));
    MPX_TRY(bn_channel_vec(BWD, "save_mean", save_mean, c));
    MPX_TRY(bn_channel_vec(BWD, "save_invstd", save_invstd, c));
    MPX_TRY(bn_channel_vec(BWD, "dgamma", dgamma, c));
    MPX_TRY(bn_channel_vec(BWD, "dbeta", dbeta, c));
    Mask mk = {nullptr, nullptr, 0.0f};
    if (a->relu_dy) {
        /* the forward's mean and scale come from FP32 statistics: saved in another dtype they
         * would not be the values the forward used */
        MPX_TRY(bn_channel_vec(BWD, "beta (the fused ReLU's backward)", beta, c));
        MPX_TRY(cuop_expect(BWD, "save_mean (the fused ReLU's backward)", save_mean, MPX_F32, 1));
        MPX_TRY(cuop_expect(BWD, "save_invstd (the fused ReLU's backward)", save_invstd, MPX_F32,
                            1));
        mk.t = mpx_batchnorm_relu_threshold(a->relu_store);
        if (mk.t < 0)
            return mpx_fail(MPX_ERR_UNSUPPORTED,
                            "%s: the fused ReLU's output stored as %s (expected f32, f16 or bf16)",
                            BWD, mpx_dtype_name(a->relu_store));
    }
    int64_t rows, nchunks = chunking(m, &rows);
    Scratch s;
    const size_t part_bytes = (size_t)(2 * nchunks * c) * sizeof(double);
    MPX_TRY(cuop_scratch(part_bytes + (size_t)(7 * c) * sizeof(float), &s.p));
    double *part = (double *)s.p;
    float *sm = (float *)((char *)s.p + part_bytes), *si = sm + c, *kc = si + c;
    decode_vec<<<channel_grid(c), 128>>>(vec(save_mean), sm, c);
    decode_vec<<<channel_grid(c), 128>>>(vec(save_invstd), si, c);
    CUOP_LAUNCHED(BWD, "statistics decode", save_mean);
    if (a->relu_dy) {
        float *ms = kc + 3 * c, *mb = ms + c;
        relu_vectors<<<channel_grid(c), 128>>>(vec(gamma), si, vec(beta), ms, mb, c);
        CUOP_LAUNCHED(BWD, "fused ReLU vectors", beta);
        mk.scale = ms;
        mk.beta = mb;
    }
    unsigned grid = 0;
    MPX_TRY(mpx_cuda_grid((size_t)(nchunks * c), &grid));
    chunk_sums<<<grid, kLaunchThreads>>>(vec(dy), vec(x), sm, mk, m, c, rows, nchunks, part);
    CUOP_LAUNCHED(BWD, "chunk sums", dy);
    MPX_TRY(launch_group_sums(BWD, dy, part, nchunks, c));
    bwd_stats<<<channel_grid(c), 128>>>(part, nchunks, m, c, vec(gamma), si, dgamma->data,
                                        dgamma->dtype, dbeta->data, dbeta->dtype, kc);
    CUOP_LAUNCHED(BWD, "statistics", dgamma);
    const size_t n = (size_t)mpx_tensor_numel(x);
    MPX_TRY(mpx_cuda_grid(n, &grid));
    bwd_apply<<<grid, kLaunchThreads>>>(vec(dy), vec(x), sm, si, kc, mk, dx->data, dx->dtype, c,
                                        n);
    CUOP_LAUNCHED(BWD, "dx", dx);
    return MPX_OK;
}
