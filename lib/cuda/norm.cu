/* norm.cu — the row-normalising operators on the GPU: the attention softmax (scale, optional key
 * mask), layer-norm and SSD's L2 normalization, forward and backward, with the semantics of
 * lib/ops/softmax.c, lib/ops/layernorm.c and lib/ops/l2norm.c.
 *
 * One CUDA block per row (grid-stride over rows). Statistics are FP32 values from double sums:
 * the softmax normaliser, softmax backward's sum(dy * y), layer-norm's mean and biased variance
 * (two passes, the second centred) and its backward sums. The double sums within a row are
 * block reductions (a fixed tree), not the CPU's sequential order: the double results may differ
 * in their last bits, which almost never changes their rounding to FP32. Element formulas are the
 * CPU's operations in the CPU's order, each a separate IEEE operation (no FMA contraction);
 * softmax calls CUDA's expf (within 2 ulp; glibc's within 1). Inputs and outputs in any of F32,
 * F16, BF16 (loaded exactly, results rounded once into the output's dtype); the saved layer-norm
 * statistics in their tensors' dtypes (F32 in the executor).
 * Layer-norm's and L2-norm's dgamma (and dbeta) are column sums over the rows computed exactly as
 * the CPU does:
 * double partial sums over the CPU's fixed chunks of rows (rows per chunk a function of M only),
 * each chunk in row order, then the chunk partials in chunk order — the CPU's bits.
 *
 * The mask: values must be 0 or 1 as on the CPU. A kernel checks them on the device; the verdict
 * is read at the backend's next wait (cuop_check_defer, ops.cuh), so a masked softmax costs no
 * wait of its own, and a bad value is reported through the backend's last_error.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

namespace {

/* lib/ops/layernorm.c's chunking of the rows for dgamma / dbeta. */
constexpr int64_t kChunkMin = 32, kMaxChunks = 256;

int64_t chunking(int64_t m, int64_t *rows) {
    int64_t r = (m + kMaxChunks - 1) / kMaxChunks;
    if (r < kChunkMin) r = kChunkMin;
    *rows = r;
    return (m + r - 1) / r;
}

/* ---- softmax ---- */

struct SoftmaxArgs {
    const void *x;
    mpx_dtype xdt;
    const void *mask; /* nullptr: none */
    mpx_dtype mdt;
    int64_t per_mask; /* rows per mask row: H * T_q */
    float scale;
    void *y;
    mpx_dtype ydt;
    int64_t rows, tk;
};

__device__ __forceinline__ int kept(const void *mask, mpx_dtype mdt, size_t i) {
    if (!mask) return 1;
    if (mdt == MPX_I32) return ((const int32_t *)mask)[i] != 0;
    return cuop_ld(mask, mdt, i) != 0.0f;
}

/* z_j = scale * x_j, or -inf for a masked key. */
__device__ __forceinline__ float softmax_z(const SoftmaxArgs &a, size_t base, size_t mbase,
                                           int64_t j) {
    return kept(a.mask, a.mdt, mbase + (size_t)j)
               ? __fmul_rn(a.scale, cuop_ld(a.x, a.xdt, base + j))
               : -INFINITY;
}

/* y = exp(z - max) * (float)(1 / sum exp(z - max)); all zeros when every key is masked. */
__global__ void softmax_fwd(SoftmaxArgs a) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const size_t base = (size_t)r * a.tk;
        const size_t mbase = a.mask ? (size_t)(r / a.per_mask) * a.tk : 0;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x) {
            const float z = softmax_z(a, base, mbase, j);
            if (z > mx) mx = z; /* NaN never wins, as in softmax.c */
        }
        mx = cuop_block_max(mx, shf);
        if (mx == -INFINITY) { /* every key masked (uniform across the block) */
            for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x)
                cuop_st(a.y, a.ydt, base + j, 0.0f);
            continue;
        }
        double s = 0;
        for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x)
            s = __dadd_rn(s, (double)expf(__fsub_rn(softmax_z(a, base, mbase, j), mx)));
        s = cuop_block_sum(s, shd);
        const float inv = (float)__ddiv_rn(1.0, s);
        for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x)
            cuop_st(a.y, a.ydt, base + j,
                    __fmul_rn(expf(__fsub_rn(softmax_z(a, base, mbase, j), mx)), inv));
    }
}

/* dx = scale * y * (dy - sum(dy * y)), the sum in double. */
__global__ void softmax_bwd(float scale, const void *dy, mpx_dtype dydt, const void *y,
                            mpx_dtype ydt, void *dx, mpx_dtype dxdt, int64_t rows, int64_t tk) {
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t base = (size_t)r * tk;
        double s = 0;
        for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
            s = __dadd_rn(s, __dmul_rn((double)cuop_ld(dy, dydt, base + j),
                                       (double)cuop_ld(y, ydt, base + j)));
        const float sf = (float)cuop_block_sum(s, shd);
        for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) {
            const float yv = cuop_ld(y, ydt, base + j), d = cuop_ld(dy, dydt, base + j);
            cuop_st(dx, dxdt, base + j, __fmul_rn(__fmul_rn(scale, yv), __fsub_rn(d, sf)));
        }
    }
}

/* Mask values other than 0 and 1: the first position, by integer atomicMin. */
__global__ void mask_check_kernel(const void *mask, mpx_dtype mdt, size_t n, CuopCheck *chk) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int bad;
        if (mdt == MPX_I32) {
            const int32_t v = ((const int32_t *)mask)[i];
            bad = v != 0 && v != 1;
        } else {
            const float v = cuop_ld(mask, mdt, i);
            bad = !(v == 0.0f || v == 1.0f); /* NaN is bad */
        }
        if (bad) atomicMin(&chk->first_bad, (unsigned long long)i);
    }
}

/* softmax.c's mask_check, shapes only (values are checked on the device). */
mpx_status mask_shape_check(const char *op, const mpx_tensor *x, const mpx_tensor *mask) {
    if (x->ndim != 4)
        return mpx_fail(MPX_ERR_INPUT, "%s: with a mask, x must be [B, H, T_q, T_k], has %d dims",
                        op, x->ndim);
    if (mask->dtype == MPX_I32)
        MPX_TRY(cuop_expect(op, "mask", mask, MPX_I32, 2));
    else
        MPX_TRY(cuop_expect_float(op, "mask", mask, 2));
    MPX_TRY(cuop_expect_dim(op, "mask", mask, 0, x->shape[0], "B, dim 0 of x"));
    return cuop_expect_dim(op, "mask", mask, 1, x->shape[3], "T_k, dim 3 of x");
}

/* ---- layer-norm ---- */

struct LnFwdArgs {
    const void *x, *gamma, *beta;
    mpx_dtype xdt, gdt, bdt;
    void *mean, *invstd, *y;
    mpx_dtype mdt, idt, ydt;
    int64_t rows, c;
    double eps;
};

__global__ void layernorm_fwd(LnFwdArgs a) {
    __shared__ double shd[32];
    const double dc = (double)a.c;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const size_t base = (size_t)r * a.c;
        double s = 0;
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x)
            s = __dadd_rn(s, (double)cuop_ld(a.x, a.xdt, base + j));
        const double mu = __ddiv_rn(cuop_block_sum(s, shd), dc);
        double v = 0;
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const double d = __dsub_rn((double)cuop_ld(a.x, a.xdt, base + j), mu);
            v = __dadd_rn(v, __dmul_rn(d, d));
        }
        v = cuop_block_sum(v, shd);
        const float muf = (float)mu;
        const float isf = (float)__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(v, dc), a.eps)));
        if (threadIdx.x == 0) {
            cuop_st(a.mean, a.mdt, (size_t)r, muf);
            cuop_st(a.invstd, a.idt, (size_t)r, isf);
        }
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const float xh = __fmul_rn(__fsub_rn(cuop_ld(a.x, a.xdt, base + j), muf), isf);
            cuop_st(
                a.y, a.ydt, base + j,
                __fadd_rn(__fmul_rn(xh, cuop_ld(a.gamma, a.gdt, j)), cuop_ld(a.beta, a.bdt, j)));
        }
    }
}

struct LnBwdArgs {
    const void *dy, *x, *gamma, *mean, *invstd;
    mpx_dtype dydt, xdt, gdt, mdt, idt;
    void *dx;
    mpx_dtype dxdt;
    int64_t rows, c;
};

/* With xhat = (x - mean) * invstd and g = dy * gamma, per row:
 *   dx = invstd * (g - mean_j(g) - xhat * mean_j(g * xhat)). */
__global__ void layernorm_bwd_dx(LnBwdArgs a) {
    __shared__ double shd[32];
    const double dc = (double)a.c;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const size_t base = (size_t)r * a.c;
        const float mu = cuop_ld(a.mean, a.mdt, (size_t)r),
                    is = cuop_ld(a.invstd, a.idt, (size_t)r);
        double sg = 0, sgx = 0;
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const float xh = __fmul_rn(__fsub_rn(cuop_ld(a.x, a.xdt, base + j), mu), is);
            const float gj = __fmul_rn(cuop_ld(a.dy, a.dydt, base + j), cuop_ld(a.gamma, a.gdt, j));
            sg = __dadd_rn(sg, (double)gj);
            sgx = __dadd_rn(sgx, __dmul_rn((double)gj, (double)xh));
        }
        sg = cuop_block_sum(sg, shd);
        sgx = cuop_block_sum(sgx, shd);
        const float mg = (float)__ddiv_rn(sg, dc), mgx = (float)__ddiv_rn(sgx, dc);
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const float xh = __fmul_rn(__fsub_rn(cuop_ld(a.x, a.xdt, base + j), mu), is);
            const float gj = __fmul_rn(cuop_ld(a.dy, a.dydt, base + j), cuop_ld(a.gamma, a.gdt, j));
            cuop_st(a.dx, a.dxdt, base + j,
                    __fmul_rn(is, __fsub_rn(__fsub_rn(gj, mg), __fmul_rn(xh, mgx))));
        }
    }
}

/* Chunk k (blockIdx.y) of `rows_per` rows, column j: part[2k][j] = sum dy, part[2k+1][j] =
 * sum dy * xhat, in double, in row order. */
__global__ void layernorm_bwd_partials(LnBwdArgs a, int64_t rows_per, double *part) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (j >= a.c) return;
    const int64_t i0 = k * rows_per, i1 = i0 + rows_per < a.rows ? i0 + rows_per : a.rows;
    double pdb = 0, pdg = 0;
    for (int64_t i = i0; i < i1; i++) {
        const float mu = cuop_ld(a.mean, a.mdt, (size_t)i),
                    is = cuop_ld(a.invstd, a.idt, (size_t)i);
        const size_t e = (size_t)i * a.c + j;
        const float d = cuop_ld(a.dy, a.dydt, e);
        const float xh = __fmul_rn(__fsub_rn(cuop_ld(a.x, a.xdt, e), mu), is);
        pdb = __dadd_rn(pdb, (double)d);
        pdg = __dadd_rn(pdg, __dmul_rn((double)d, (double)xh));
    }
    part[(size_t)(2 * k) * a.c + j] = pdb;
    part[(size_t)(2 * k + 1) * a.c + j] = pdg;
}

/* dbeta[j], dgamma[j] = the chunk partials added in chunk order. */
__global__ void layernorm_bwd_merge(const double *part, int64_t nchunks, int64_t c, void *dgamma,
                                    mpx_dtype gdt, void *dbeta, mpx_dtype bdt) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    double sdb = 0, sdg = 0;
    for (int64_t k = 0; k < nchunks; k++) {
        sdb = __dadd_rn(sdb, part[(size_t)(2 * k) * c + j]);
        sdg = __dadd_rn(sdg, part[(size_t)(2 * k + 1) * c + j]);
    }
    cuop_st(dbeta, bdt, (size_t)j, (float)sdb);
    cuop_st(dgamma, gdt, (size_t)j, (float)sdg);
}

/* x is floating [..., C]; *m, *c get the [M, C] view. */
mpx_status ln_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m, int64_t *c) {
    MPX_TRY(cuop_expect_float(op, name, x, -1));
    *c = x->shape[x->ndim - 1];
    *m = mpx_tensor_numel(x) / *c;
    return MPX_OK;
}

mpx_status ln_channel_vec(const char *op, const char *name, const mpx_tensor *t, int64_t c) {
    MPX_TRY(cuop_expect_float(op, name, t, 1));
    return cuop_expect_dim(op, name, t, 0, c, "C, the last dim of x");
}

/* A per-row statistic: M elements, whatever its shape. */
mpx_status ln_row_stat(const char *op, const char *name, const mpx_tensor *t, int64_t m) {
    MPX_TRY(cuop_expect_float(op, name, t, -1));
    if (mpx_tensor_numel(t) == m) return MPX_OK;
    char buf[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s, expected %lld elements (M, the rows of x)",
                    op, name, mpx_shape_str(t->ndim, t->shape, buf, sizeof buf), (long long)m);
}

/* ---- L2 normalization (SSD) ---- */

struct L2FwdArgs {
    const void *x, *gamma;
    mpx_dtype xdt, gdt;
    void *inv, *y;
    mpx_dtype idt, ydt;
    int64_t rows, c;
    double eps;
};

/* y = x * inv * gamma, inv = (float)(1 / sqrt(sum x^2 + eps)). */
__global__ void l2norm_fwd(L2FwdArgs a) {
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const size_t base = (size_t)r * a.c;
        double s = 0;
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const double v = (double)cuop_ld(a.x, a.xdt, base + j);
            s = __dadd_rn(s, __dmul_rn(v, v));
        }
        s = cuop_block_sum(s, shd);
        const float inv = (float)__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(s, a.eps)));
        if (threadIdx.x == 0) cuop_st(a.inv, a.idt, (size_t)r, inv);
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x)
            cuop_st(a.y, a.ydt, base + j,
                    __fmul_rn(__fmul_rn(cuop_ld(a.x, a.xdt, base + j), inv),
                              cuop_ld(a.gamma, a.gdt, j)));
    }
}

struct L2BwdArgs {
    const void *dy, *x, *gamma, *inv;
    mpx_dtype dydt, xdt, gdt, idt;
    void *dx;
    mpx_dtype dxdt;
    int64_t rows, c;
};

/* With xhat = x * inv and g = dy * gamma, per row: dx = inv * (g - xhat * sum_j(g * xhat)). */
__global__ void l2norm_bwd_dx(L2BwdArgs a) {
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const size_t base = (size_t)r * a.c;
        const float inv = cuop_ld(a.inv, a.idt, (size_t)r);
        double sgx = 0;
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const float xh = __fmul_rn(cuop_ld(a.x, a.xdt, base + j), inv);
            const float gj = __fmul_rn(cuop_ld(a.dy, a.dydt, base + j), cuop_ld(a.gamma, a.gdt, j));
            sgx = __dadd_rn(sgx, __dmul_rn((double)gj, (double)xh));
        }
        const float sf = (float)cuop_block_sum(sgx, shd);
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
            const float xh = __fmul_rn(cuop_ld(a.x, a.xdt, base + j), inv);
            const float gj = __fmul_rn(cuop_ld(a.dy, a.dydt, base + j), cuop_ld(a.gamma, a.gdt, j));
            cuop_st(a.dx, a.dxdt, base + j, __fmul_rn(inv, __fsub_rn(gj, __fmul_rn(xh, sf))));
        }
    }
}

/* Chunk k (blockIdx.y) of `rows_per` rows, column j: part[k][j] = sum dy * xhat, in double, in
 * row order. */
__global__ void l2norm_bwd_partials(L2BwdArgs a, int64_t rows_per, double *part) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (j >= a.c) return;
    const int64_t i0 = k * rows_per, i1 = i0 + rows_per < a.rows ? i0 + rows_per : a.rows;
    double pdg = 0;
    for (int64_t i = i0; i < i1; i++) {
        const size_t e = (size_t)i * a.c + j;
        const float xh = __fmul_rn(cuop_ld(a.x, a.xdt, e), cuop_ld(a.inv, a.idt, (size_t)i));
        pdg = __dadd_rn(pdg, __dmul_rn((double)cuop_ld(a.dy, a.dydt, e), (double)xh));
    }
    part[(size_t)k * a.c + j] = pdg;
}

/* dgamma[j] = the chunk partials added in chunk order. */
__global__ void l2norm_bwd_merge(const double *part, int64_t nchunks, int64_t c, void *dgamma,
                                 mpx_dtype gdt) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    double sdg = 0;
    for (int64_t k = 0; k < nchunks; k++) sdg = __dadd_rn(sdg, part[(size_t)k * c + j]);
    cuop_st(dgamma, gdt, (size_t)j, (float)sdg);
}

} // namespace

extern "C" mpx_status mpx_softmax_forward_cuda(float scale, const mpx_tensor *x,
                                               const mpx_tensor *mask, mpx_tensor *y) {
    static const char *op = "softmax forward";
    if (!isfinite(scale)) return mpx_fail(MPX_ERR_INPUT, "%s: scale %g is not finite", op, scale);
    MPX_TRY(cuop_expect_float(op, "x", x, -1));
    MPX_TRY(cuop_expect_float(op, "y", y, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "y", y));
    if (mask) MPX_TRY(mask_shape_check(op, x, mask));
    SoftmaxArgs a;
    a.x = x->data;
    a.xdt = x->dtype;
    a.mask = mask ? mask->data : nullptr;
    a.mdt = mask ? mask->dtype : MPX_F32;
    a.per_mask = mask ? x->shape[1] * x->shape[2] : 1;
    a.scale = scale;
    a.y = y->data;
    a.ydt = y->dtype;
    a.tk = x->shape[x->ndim - 1];
    a.rows = mpx_tensor_numel(x) / a.tk;
    CuopCheck *chk = nullptr;
    const size_t nmask = mask ? (size_t)mpx_tensor_numel(mask) : 0;
    if (mask) {
        unsigned g = 1;
        MPX_TRY(mpx_cuda_grid(nmask, &g));
        MPX_TRY(cuop_check_begin(&chk));
        mask_check_kernel<<<g, kLaunchThreads>>>(mask->data, mask->dtype, nmask, chk);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) {
            mpx_cuda_scratch_free(chk);
            return cuop_launch_fail(op, "mask check", mask, err);
        }
    }
    softmax_fwd<<<cuop_row_grid(a.rows), kRowThreads>>>(a);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        if (chk) mpx_cuda_scratch_free(chk);
        return cuop_launch_fail(op, "softmax", x, err);
    }
    if (!mask) return MPX_OK;
    return cuop_check_defer(chk, mask, op, "mask", ": mask values must be 1 (keep) or 0 (mask)");
}

extern "C" mpx_status mpx_softmax_backward_cuda(float scale, const mpx_tensor *dy,
                                                const mpx_tensor *y, mpx_tensor *dx) {
    static const char *op = "softmax backward";
    if (!isfinite(scale)) return mpx_fail(MPX_ERR_INPUT, "%s: scale %g is not finite", op, scale);
    MPX_TRY(cuop_expect_float(op, "dy", dy, -1));
    MPX_TRY(cuop_expect_float(op, "y", y, -1));
    MPX_TRY(cuop_expect_float(op, "dx", dx, -1));
    MPX_TRY(cuop_expect_same_shape(op, "y", y, "dy", dy));
    MPX_TRY(cuop_expect_same_shape(op, "y", y, "dx", dx));
    const int64_t tk = y->shape[y->ndim - 1], rows = mpx_tensor_numel(y) / tk;
    softmax_bwd<<<cuop_row_grid(rows), kRowThreads>>>(scale, dy->data, dy->dtype, y->data, y->dtype,
                                                      dx->data, dx->dtype, rows, tk);
    CUOP_LAUNCHED(op, "softmax", y);
    return MPX_OK;
}

extern "C" mpx_status mpx_layernorm_forward_cuda(float eps, const mpx_tensor *x,
                                                 const mpx_tensor *gamma, const mpx_tensor *beta,
                                                 mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                                 mpx_tensor *y) {
    static const char *op = "layernorm forward";
    if (!(eps >= 0 && isfinite(eps)))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be finite and >= 0", op, eps);
    int64_t m, c;
    MPX_TRY(ln_view(op, "x", x, &m, &c));
    MPX_TRY(ln_channel_vec(op, "gamma", gamma, c));
    MPX_TRY(ln_channel_vec(op, "beta", beta, c));
    MPX_TRY(ln_row_stat(op, "save_mean", save_mean, m));
    MPX_TRY(ln_row_stat(op, "save_invstd", save_invstd, m));
    MPX_TRY(cuop_expect_float(op, "y", y, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "y", y));
    LnFwdArgs a;
    a.x = x->data, a.gamma = gamma->data, a.beta = beta->data;
    a.xdt = x->dtype, a.gdt = gamma->dtype, a.bdt = beta->dtype;
    a.mean = save_mean->data, a.invstd = save_invstd->data, a.y = y->data;
    a.mdt = save_mean->dtype, a.idt = save_invstd->dtype, a.ydt = y->dtype;
    a.rows = m, a.c = c;
    a.eps = (double)eps;
    layernorm_fwd<<<cuop_row_grid(m), kRowThreads>>>(a);
    CUOP_LAUNCHED(op, "layernorm", x);
    return MPX_OK;
}

extern "C" mpx_status mpx_layernorm_backward_cuda(const mpx_tensor *dy, const mpx_tensor *x,
                                                  const mpx_tensor *gamma,
                                                  const mpx_tensor *save_mean,
                                                  const mpx_tensor *save_invstd, mpx_tensor *dx,
                                                  mpx_tensor *dgamma, mpx_tensor *dbeta) {
    static const char *op = "layernorm backward";
    int64_t m, c;
    MPX_TRY(ln_view(op, "x", x, &m, &c));
    MPX_TRY(cuop_expect_float(op, "dy", dy, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "dy", dy));
    MPX_TRY(cuop_expect_float(op, "dx", dx, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "dx", dx));
    MPX_TRY(ln_channel_vec(op, "gamma", gamma, c));
    MPX_TRY(ln_row_stat(op, "save_mean", save_mean, m));
    MPX_TRY(ln_row_stat(op, "save_invstd", save_invstd, m));
    MPX_TRY(ln_channel_vec(op, "dgamma", dgamma, c));
    MPX_TRY(ln_channel_vec(op, "dbeta", dbeta, c));
    LnBwdArgs a;
    a.dy = dy->data, a.x = x->data, a.gamma = gamma->data;
    a.mean = save_mean->data, a.invstd = save_invstd->data;
    a.dydt = dy->dtype, a.xdt = x->dtype, a.gdt = gamma->dtype;
    a.mdt = save_mean->dtype, a.idt = save_invstd->dtype;
    a.dx = dx->data, a.dxdt = dx->dtype;
    a.rows = m, a.c = c;
    int64_t rows_per, nchunks = chunking(m, &rows_per);
    void *part = nullptr;
    MPX_TRY(cuop_scratch((size_t)(2 * nchunks * c) * sizeof(double), &part));
    layernorm_bwd_dx<<<cuop_row_grid(m), kRowThreads>>>(a);
    cudaError_t err = cudaGetLastError();
    const unsigned cblocks = (unsigned)((c + kLaunchThreads - 1) / kLaunchThreads);
    if (err == cudaSuccess) {
        layernorm_bwd_partials<<<dim3(cblocks, (unsigned)nchunks), kLaunchThreads>>>(
            a, rows_per, (double *)part);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) {
        layernorm_bwd_merge<<<cblocks, kLaunchThreads>>>((const double *)part, nchunks, c,
                                                         dgamma->data, dgamma->dtype, dbeta->data,
                                                         dbeta->dtype);
        err = cudaGetLastError();
    }
    mpx_status freed = mpx_cuda_scratch_free(part);
    if (err != cudaSuccess) return cuop_launch_fail(op, "layernorm", x, err);
    return freed;
}

extern "C" mpx_status mpx_l2norm_forward_cuda(float eps, const mpx_tensor *x,
                                              const mpx_tensor *gamma, mpx_tensor *save_inv,
                                              mpx_tensor *y) {
    static const char *op = "l2norm forward";
    if (!(eps > 0 && isfinite(eps)))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be finite and > 0", op, eps);
    int64_t m, c;
    MPX_TRY(ln_view(op, "x", x, &m, &c));
    MPX_TRY(ln_channel_vec(op, "gamma", gamma, c));
    MPX_TRY(ln_row_stat(op, "save_inv", save_inv, m));
    MPX_TRY(cuop_expect_float(op, "y", y, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "y", y));
    L2FwdArgs a;
    a.x = x->data, a.gamma = gamma->data, a.xdt = x->dtype, a.gdt = gamma->dtype;
    a.inv = save_inv->data, a.y = y->data, a.idt = save_inv->dtype, a.ydt = y->dtype;
    a.rows = m, a.c = c;
    a.eps = (double)eps;
    l2norm_fwd<<<cuop_row_grid(m), kRowThreads>>>(a);
    CUOP_LAUNCHED(op, "l2norm", x);
    return MPX_OK;
}

extern "C" mpx_status mpx_l2norm_backward_cuda(const mpx_tensor *dy, const mpx_tensor *x,
                                               const mpx_tensor *gamma, const mpx_tensor *save_inv,
                                               mpx_tensor *dx, mpx_tensor *dgamma) {
    static const char *op = "l2norm backward";
    int64_t m, c;
    MPX_TRY(ln_view(op, "x", x, &m, &c));
    MPX_TRY(cuop_expect_float(op, "dy", dy, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "dy", dy));
    MPX_TRY(cuop_expect_float(op, "dx", dx, -1));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "dx", dx));
    MPX_TRY(ln_channel_vec(op, "gamma", gamma, c));
    MPX_TRY(ln_row_stat(op, "save_inv", save_inv, m));
    MPX_TRY(ln_channel_vec(op, "dgamma", dgamma, c));
    L2BwdArgs a;
    a.dy = dy->data, a.x = x->data, a.gamma = gamma->data, a.inv = save_inv->data;
    a.dydt = dy->dtype, a.xdt = x->dtype, a.gdt = gamma->dtype, a.idt = save_inv->dtype;
    a.dx = dx->data, a.dxdt = dx->dtype;
    a.rows = m, a.c = c;
    int64_t rows_per, nchunks = chunking(m, &rows_per);
    void *part = nullptr;
    MPX_TRY(cuop_scratch((size_t)(nchunks * c) * sizeof(double), &part));
    l2norm_bwd_dx<<<cuop_row_grid(m), kRowThreads>>>(a);
    cudaError_t err = cudaGetLastError();
    const unsigned cblocks = (unsigned)((c + kLaunchThreads - 1) / kLaunchThreads);
    if (err == cudaSuccess) {
        l2norm_bwd_partials<<<dim3(cblocks, (unsigned)nchunks), kLaunchThreads>>>(
            a, rows_per, (double *)part);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) {
        l2norm_bwd_merge<<<cblocks, kLaunchThreads>>>((const double *)part, nchunks, c,
                                                      dgamma->data, dgamma->dtype);
        err = cudaGetLastError();
    }
    mpx_status freed = mpx_cuda_scratch_free(part);
    if (err != cudaSuccess) return cuop_launch_fail(op, "l2norm", x, err);
    return freed;
}
