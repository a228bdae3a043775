/* gemm.cu — the GEMM family on cuBLAS: linear (weights [IN, OUT], y = x w + b) and linear_t
 * (weights [OUT, IN], y = x w^T + b) forward, backward-data and backward-weights, and the batched
 * matmul of attention (bmm), with the semantics of lib/ops/linear.c and lib/ops/bmm.c.
 *
 * Layout: our matrices are row-major, cuBLAS's column-major. A row-major [R, C] matrix is the
 * column-major [C, R] matrix with the same leading dimension, so row-major C = op(A) op(B) is
 * computed as column-major C^T = op(B)^T op(A)^T: operands swapped, M and N swapped, each
 * operand's transpose flag kept (gemm_run).
 *
 * Precision: cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F (FP32 products
 * and accumulation; the handle's math mode forbids reduced-precision split-K reductions), or
 * CUBLAS_COMPUTE_32F_FAST_TF32 for F32 inputs declared exact in F16 or BF16
 * (mpx_cuda_set_operand_format): TF32 holds such values exactly, so the products stay exact and
 * the accumulation FP32; F32 inputs without that declaration never meet TF32. Inputs F32, F16
 * or BF16 as stored: 16-bit inputs run on tensor cores with FP32 accumulation when the operands
 * are declared exact in a 16-bit format, and are decoded to F32 for FMA math otherwise; output
 * written in the output tensor's dtype with one rounding. cuBLAS takes A and B of one dtype
 * and an output of that dtype or F32; other mixes are handled here: an input of another dtype
 * than its partner is decoded to F32 scratch first (exact), and an output cuBLAS cannot write
 * goes through F32 scratch and one rounding kernel. A bias is added in FP32 before that single
 * rounding, as the CPU op adds it before the executor rounds the result, by the rounding kernel
 * after the GEMM (in place for an F32 output): cuBLAS always runs with beta = 0, so its kernel
 * choice does not depend on the bias or the output dtype, and the same operands give the same
 * bits whether the executor hands over 16-bit storage or FP32 views (tests/cuda/
 * test_direct_io_cuda.c). (Preloading a 16-bit C is not one rounding anyway: on an H200,
 * cuBLAS's BF16 epilogue with beta = 1 was 2 BF16 ulps off the once-rounded sum in 1.2% of the
 * elements of a [128,96]x[96,160] product, which one rounding of the FP32 sum cannot be.)
 * The backward-data entries' scaled forms multiply the FP32 result by a power of two (cuBLAS's
 * alpha, applied to the FP32 accumulator before the one rounding): exact, so the result is the
 * unscaled one times the factor, as the executor's cast would give it.
 * The bias gradient is a column sum in double in row order, one thread per column: the CPU's
 * ops_column_sums order, so db has the CPU's bits.
 *
 * One cuBLAS handle per CUDA operators' context (mpx_cuda_ctx, which the caller hands in; the
 * CUDA backend owns one), created on first use on the then-current device and kept until the
 * context is released (cuBLAS handles are meant to be reused; the ops run on one host thread at
 * a time). Work is
 * queued on the legacy default stream, like the rest of lib/cuda; nothing here synchronises.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include <mutex>
#include <new>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

/* The GEMMs' state in the operators' context: the cuBLAS handle. */
struct cuop_gemm_state {
    std::mutex mutex;
    cublasHandle_t handle = nullptr;
};

cuop_gemm_state *cuop_gemm_state_new(void) { return new (std::nothrow) cuop_gemm_state(); }

void cuop_gemm_state_delete(cuop_gemm_state *S) { delete S; }

namespace {

mpx_status cublas_handle(cuop_gemm_state &S, const char *op, cublasHandle_t *out) {
    std::lock_guard<std::mutex> lock(S.mutex);
    if (!S.handle) {
        cublasHandle_t h = nullptr;
        cublasStatus_t st = cublasCreate(&h);
        if (st != CUBLAS_STATUS_SUCCESS)
            return mpx_fail(MPX_ERR_BACKEND, "%s: cublasCreate: %s", op, cublasGetStatusString(st));
        st = cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
        if (st != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(h);
            return mpx_fail(MPX_ERR_BACKEND, "%s: cublasSetMathMode: %s", op,
                            cublasGetStatusString(st));
        }
        S.handle = h;
    }
    *out = S.handle;
    return MPX_OK;
}

} // namespace

mpx_status cuop_gemm_release(cuop_gemm_state *S) {
    std::lock_guard<std::mutex> lock(S->mutex);
    cublasStatus_t st = S->handle ? cublasDestroy(S->handle) : CUBLAS_STATUS_SUCCESS;
    S->handle = nullptr;
    if (st != CUBLAS_STATUS_SUCCESS)
        return mpx_fail(MPX_ERR_BACKEND, "mpx_cuda_release: cublasDestroy: %s", cublasGetStatusString(st));
    return MPX_OK;
}

namespace {

cudaDataType cuda_type(mpx_dtype t) {
    return t == MPX_F16 ? CUDA_R_16F : t == MPX_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

struct Operand {
    const void *p;
    mpx_dtype dt;
};

/* C[batch][m, n] = alpha op(A) op(B) (+ bias[n] on every row), row-major, contiguous batches:
 * A stored [m, k] ([k, m] with ta), B stored [k, n] ([n, k] with tb). */
struct Gemm {
    const char *op;
    int ta, tb;
    int m, n, k, batch;
    float alpha;
    Operand a, b;
    void *c;
    mpx_dtype cdt;
    Operand bias; /* p == nullptr: none */
};

/* y[i] = round(acc[i] (+ bias[i % n])) into y's dtype: one rounding of the FP32 result. acc may
 * be y itself (an F32 output, the bias added in place). */
__global__ void round_out(const float *acc, const void *bias, mpx_dtype bdt, size_t n, void *y,
                          mpx_dtype ydt, size_t total) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (ChannelCursor ch(i, stride, n); i < total; i += stride, ch.next()) {
        float v = acc[i];
        if (bias) v = __fadd_rn(v, cuop_ld(bias, bdt, ch.c));
        cuop_st(y, ydt, i, v);
    }
}

/* out[j] = sum over the m rows of x[i, j], in double, in row order (ops_column_sums). */
__global__ void column_sums(const void *x, mpx_dtype xdt, size_t m, size_t n, void *out,
                            mpx_dtype odt) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
        double acc = 0;
        for (size_t i = 0; i < m; i++)
            acc = __dadd_rn(acc, (double)cuop_ld(x, xdt, i * n + j));
        cuop_st(out, odt, j, (float)acc);
    }
}

const char *shape_of(int m, int n, int k, int batch, char *buf, size_t cap) {
    snprintf(buf, cap, "M %d N %d K %d batch %d", m, n, k, batch);
    return buf;
}

/* Runs g: decodes a mismatched input, stages an output cuBLAS cannot write, adds the bias. */
mpx_status gemm_run(mpx_cuda_ctx *ctx, const Gemm &g) {
    cublasHandle_t h = nullptr;
    MPX_TRY(cublas_handle(*ctx->gemm, g.op, &h));
    const size_t na = (size_t)g.batch * g.m * g.k, nb = (size_t)g.batch * g.k * g.n;
    const size_t nc = (size_t)g.batch * g.m * g.n;
    void *up_a = nullptr, *up_b = nullptr, *stage = nullptr;
    Operand a = g.a, b = g.b;
    mpx_status st = MPX_OK;
    /* cuBLAS needs A and B of one dtype: decode whichever is not F32 (exact). 16-bit operands
     * are decoded too unless they are declared exact in a 16-bit format (cuop_tensor_cores):
     * cuBLAS would run them on tensor cores, which FP32 math (fp32 mode, or
     * precision.tensor_cores = false) must not meet. */
    if (a.dt != b.dt || (a.dt != MPX_F32 && !cuop_tensor_cores(ctx))) {
        if (a.dt != MPX_F32 && (st = cuop_scratch(na * sizeof(float), &up_a)) == MPX_OK &&
            (st = mpx_decode_cuda(a.dt, a.p, (float *)up_a, na)) == MPX_OK)
            a = Operand{up_a, MPX_F32};
        if (st == MPX_OK && b.dt != MPX_F32 &&
            (st = cuop_scratch(nb * sizeof(float), &up_b)) == MPX_OK &&
            (st = mpx_decode_cuda(b.dt, b.p, (float *)up_b, nb)) == MPX_OK)
            b = Operand{up_b, MPX_F32};
    }
    const mpx_dtype in_t = a.dt;
    /* Written by cuBLAS directly when it can write that dtype from these inputs and no bias
     * has to be added before a 16-bit rounding; else into F32 scratch, rounded by round_out.
     * A bias is always added after the GEMM (beta = 0), so cuBLAS runs the same kernel whatever
     * the output's dtype and bias: its heuristics may pick another for beta = 1. */
    const int direct = (g.cdt == in_t || g.cdt == MPX_F32) && (!g.bias.p || g.cdt == MPX_F32);
    void *c = g.c;
    mpx_dtype ct = g.cdt;
    if (st == MPX_OK && !direct && (st = cuop_scratch(nc * sizeof(float), &stage)) == MPX_OK) {
        c = stage;
        ct = MPX_F32;
    }
    const float beta = 0.0f;
    unsigned grid = 1;
    if (st == MPX_OK) st = mpx_cuda_grid(nc, &grid);
    if (st == MPX_OK) {
        /* Column-major C^T[n, m] = op(B)^T op(A)^T. */
        const cublasOperation_t opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        const int lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n, ldc = g.n;
        const cublasComputeType_t compute = in_t == MPX_F32 && cuop_tensor_cores(ctx)
                                                ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                : CUBLAS_COMPUTE_32F;
        cublasStatus_t cs;
        if (g.batch == 1)
            cs = cublasGemmEx(h, opb, opa, g.n, g.m, g.k, &g.alpha, b.p, cuda_type(in_t), ldb, a.p,
                              cuda_type(in_t), lda, &beta, c, cuda_type(ct), ldc,
                              compute, CUBLAS_GEMM_DEFAULT);
        else
            cs = cublasGemmStridedBatchedEx(h, opb, opa, g.n, g.m, g.k, &g.alpha, b.p,
                                            cuda_type(in_t), ldb, (long long)g.k * g.n, a.p,
                                            cuda_type(in_t), lda, (long long)g.m * g.k, &beta, c,
                                            cuda_type(ct), ldc, (long long)g.m * g.n, g.batch,
                                            compute, CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            char buf[96];
            st = mpx_fail(MPX_ERR_BACKEND, "%s: cuBLAS GEMM %s (%s x %s -> %s): %s", g.op,
                          shape_of(g.m, g.n, g.k, g.batch, buf, sizeof buf), mpx_dtype_name(in_t),
                          mpx_dtype_name(in_t), mpx_dtype_name(ct), cublasGetStatusString(cs));
        }
    }
    if (st == MPX_OK && (!direct || g.bias.p)) {
        /* staged: round into the output; direct F32 with a bias: add it in place */
        round_out<<<grid, kLaunchThreads>>>((const float *)c, g.bias.p, g.bias.dt, (size_t)g.n,
                                            g.c, g.cdt, nc);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) st = mpx_cuda_fail(err, __FILE__, __LINE__, "round_out");
    }
    /* Stream-ordered frees: after the work queued above. */
    mpx_status f1 = mpx_cuda_scratch_free(up_a), f2 = mpx_cuda_scratch_free(up_b),
               f3 = mpx_cuda_scratch_free(stage);
    if (st != MPX_OK) return st;
    return f1 != MPX_OK ? f1 : f2 != MPX_OK ? f2 : f3;
}

/* db[n] = column sums of dy viewed as [m, n]. */
mpx_status bias_grad(const char *op, const mpx_tensor *dy, int64_t m, int64_t n, mpx_tensor *db) {
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid((size_t)n, &grid));
    column_sums<<<grid, kLaunchThreads>>>(dy->data, dy->dtype, (size_t)m, (size_t)n, db->data,
                                          db->dtype);
    CUOP_LAUNCHED(op, "bias-gradient column sums", dy);
    return MPX_OK;
}

/* ---- shape checks: lib/ops/linear.c's, for device tensors of the floating dtypes ---- */

/* t is [..., last] with the same leading dims as `lead` (whose last dim may differ). */
mpx_status same_leading(const char *op, const char *lead_name, const mpx_tensor *lead,
                        const char *name, const mpx_tensor *t, int64_t last, const char *why) {
    MPX_TRY(cuop_expect_float(op, name, t, lead->ndim));
    for (int i = 0; i + 1 < lead->ndim; i++)
        MPX_TRY(cuop_expect_dim(op, name, t, i, lead->shape[i], lead_name));
    return cuop_expect_dim(op, name, t, lead->ndim - 1, last, why);
}

/* x [..., IN] viewed as [M, IN] with IN = w.shape[in_dim]; sizes must fit cuBLAS's ints. */
mpx_status linear_view(const char *op, const char *xn, const mpx_tensor *x, const char *wn,
                       const mpx_tensor *w, int in_dim, int64_t *m) {
    MPX_TRY(cuop_expect_float(op, xn, x, -1));
    MPX_TRY(cuop_expect_float(op, wn, w, 2));
    MPX_TRY(cuop_expect_dim(op, xn, x, x->ndim - 1, w->shape[in_dim],
                            in_dim == 0 ? "IN, dim 0 of the weights" : "IN, dim 1 of the weights"));
    *m = mpx_tensor_numel(x) / w->shape[in_dim];
    if (*m > INT_MAX || w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s viewed as [%lld, %lld] exceeds the GEMM's int sizes",
                        op, xn, (long long)*m, (long long)w->shape[in_dim]);
    return MPX_OK;
}

mpx_status bias_check(const char *op, const char *name, const mpx_tensor *b, int64_t out,
                      const char *why) {
    if (!b) return MPX_OK;
    MPX_TRY(cuop_expect_float(op, name, b, 1));
    return cuop_expect_dim(op, name, b, 0, out, why);
}

Operand operand(const mpx_tensor *t) { return Operand{t->data, t->dtype}; }
Operand no_bias() { return Operand{nullptr, MPX_F32}; }

/* ---- bmm: lib/ops/bmm.c's shape rules ---- */

struct BmmDims {
    int64_t batch;
    int m, n, k;
};

/* t has the same leading dims as `ref` (rank included) and trailing [r, c]. */
mpx_status expect_mat(const char *op, const char *ref_name, const mpx_tensor *ref, const char *name,
                      const mpx_tensor *t, int64_t r, const char *rwhy, int64_t c,
                      const char *cwhy) {
    MPX_TRY(cuop_expect_float(op, name, t, ref->ndim));
    for (int i = 0; i + 2 < ref->ndim; i++)
        MPX_TRY(cuop_expect_dim(op, name, t, i, ref->shape[i], ref_name));
    MPX_TRY(cuop_expect_dim(op, name, t, ref->ndim - 2, r, rwhy));
    return cuop_expect_dim(op, name, t, ref->ndim - 1, c, cwhy);
}

mpx_status bmm_shapes(const char *op, const mpx_bmm_attr *at, const mpx_tensor *a,
                      const mpx_tensor *b, BmmDims *d) {
    if (!at) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (!isfinite(at->alpha))
        return mpx_fail(MPX_ERR_INPUT, "%s: alpha %g is not finite", op, at->alpha);
    MPX_TRY(cuop_expect_float(op, "a", a, -1));
    if (a->ndim < 2)
        return mpx_fail(MPX_ERR_INPUT, "%s: a has 1 dim, expected [..., rows, cols]", op);
    const int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    const int64_t m = at->trans_a ? ac : ar, k = at->trans_a ? ar : ac;
    MPX_TRY(cuop_expect_float(op, "b", b, a->ndim));
    const int64_t n = at->trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (at->trans_b)
        MPX_TRY(expect_mat(op, "a", a, "b", b, n, "N", k, "K of op(a)"));
    else
        MPX_TRY(expect_mat(op, "a", a, "b", b, k, "K of op(a)", n, "N"));
    const int64_t batch = mpx_tensor_numel(a) / (ar * ac);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: GEMM sizes M %lld N %lld K %lld batch %lld exceed int",
                        op, (long long)m, (long long)n, (long long)k, (long long)batch);
    d->batch = batch;
    d->m = (int)m, d->n = (int)n, d->k = (int)k;
    return MPX_OK;
}

} // namespace

/* ---- linear: w [IN, OUT] ---- */

extern "C" mpx_status mpx_linear_forward_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *x,
                                              const mpx_tensor *w, const mpx_tensor *b,
                                              mpx_tensor *y) {
    static const char *op = "linear forward";
    int64_t m = 0;
    MPX_TRY(linear_view(op, "x", x, "w", w, 0, &m));
    const int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "x", x, "y", y, out, "OUT, dim 1 of the weights"));
    MPX_TRY(bias_check(op, "b", b, out, "OUT, dim 1 of the weights"));
    /* y[M,OUT] = x[M,IN] @ w[IN,OUT] + b */
    return gemm_run(ctx, Gemm{op, 0, 0, (int)m, out, in, 1, 1.0f, operand(x), operand(w), y->data,
                              y->dtype, b ? operand(b) : no_bias()});
}

extern "C" mpx_status mpx_linear_backward_data_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                                    const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_linear_backward_data_scaled_cuda(ctx, 1.0f, dy, w, dx);
}

extern "C" mpx_status mpx_linear_backward_data_scaled_cuda(mpx_cuda_ctx *ctx, float scale,
                                                           const mpx_tensor *dy,
                                                           const mpx_tensor *w, mpx_tensor *dx) {
    static const char *op = "linear backward-data";
    MPX_TRY(cuop_expect_scale(op, scale));
    int64_t m = 0;
    MPX_TRY(linear_view(op, "dx", dx, "w", w, 0, &m));
    const int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 1 of the weights"));
    /* dx[M,IN] = scale dy[M,OUT] @ w[IN,OUT]^T */
    return gemm_run(ctx, Gemm{op, 0, 1, (int)m, in, out, 1, scale, operand(dy), operand(w),
                              dx->data, dx->dtype, no_bias()});
}

extern "C" mpx_status mpx_linear_backward_weights_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                                       const mpx_tensor *x, mpx_tensor *dw,
                                                       mpx_tensor *db) {
    static const char *op = "linear backward-weights";
    int64_t m = 0;
    MPX_TRY(linear_view(op, "x", x, "dw", dw, 0, &m));
    const int in = (int)dw->shape[0], out = (int)dw->shape[1];
    MPX_TRY(same_leading(op, "x", x, "dy", dy, out, "OUT, dim 1 of dw"));
    MPX_TRY(bias_check(op, "db", db, out, "OUT, dim 1 of dw"));
    /* dw[IN,OUT] = x[M,IN]^T @ dy[M,OUT] */
    MPX_TRY(gemm_run(ctx, Gemm{op, 1, 0, in, out, (int)m, 1, 1.0f, operand(x), operand(dy),
                               dw->data, dw->dtype, no_bias()}));
    return db ? bias_grad(op, dy, m, out, db) : MPX_OK;
}

/* ---- linear_t: w [OUT, IN] ---- */

extern "C" mpx_status mpx_linear_t_forward_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *x,
                                                const mpx_tensor *w, const mpx_tensor *b,
                                                mpx_tensor *y) {
    static const char *op = "linear_t forward";
    int64_t m = 0;
    MPX_TRY(linear_view(op, "x", x, "w", w, 1, &m));
    const int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "x", x, "y", y, out, "OUT, dim 0 of the weights"));
    MPX_TRY(bias_check(op, "b", b, out, "OUT, dim 0 of the weights"));
    /* y[M,OUT] = x[M,IN] @ w[OUT,IN]^T + b */
    return gemm_run(ctx, Gemm{op, 0, 1, (int)m, out, in, 1, 1.0f, operand(x), operand(w), y->data,
                              y->dtype, b ? operand(b) : no_bias()});
}

extern "C" mpx_status mpx_linear_t_backward_data_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                                      const mpx_tensor *w, mpx_tensor *dx) {
    return mpx_linear_t_backward_data_scaled_cuda(ctx, 1.0f, dy, w, dx);
}

extern "C" mpx_status mpx_linear_t_backward_data_scaled_cuda(mpx_cuda_ctx *ctx, float scale,
                                                             const mpx_tensor *dy,
                                                             const mpx_tensor *w, mpx_tensor *dx) {
    static const char *op = "linear_t backward-data";
    MPX_TRY(cuop_expect_scale(op, scale));
    int64_t m = 0;
    MPX_TRY(linear_view(op, "dx", dx, "w", w, 1, &m));
    const int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 0 of the weights"));
    /* dx[M,IN] = scale dy[M,OUT] @ w[OUT,IN] */
    return gemm_run(ctx, Gemm{op, 0, 0, (int)m, in, out, 1, scale, operand(dy), operand(w),
                              dx->data, dx->dtype, no_bias()});
}

extern "C" mpx_status mpx_linear_t_backward_weights_cuda(mpx_cuda_ctx *ctx, const mpx_tensor *dy,
                                                         const mpx_tensor *x, mpx_tensor *dw,
                                                         mpx_tensor *db) {
    static const char *op = "linear_t backward-weights";
    int64_t m = 0;
    MPX_TRY(linear_view(op, "x", x, "dw", dw, 1, &m));
    const int out = (int)dw->shape[0], in = (int)dw->shape[1];
    MPX_TRY(same_leading(op, "x", x, "dy", dy, out, "OUT, dim 0 of dw"));
    MPX_TRY(bias_check(op, "db", db, out, "OUT, dim 0 of dw"));
    /* dw[OUT,IN] = dy[M,OUT]^T @ x[M,IN] */
    MPX_TRY(gemm_run(ctx, Gemm{op, 1, 0, out, in, (int)m, 1, 1.0f, operand(dy), operand(x),
                               dw->data, dw->dtype, no_bias()}));
    return db ? bias_grad(op, dy, m, out, db) : MPX_OK;
}

/* ---- bmm ---- */

extern "C" mpx_status mpx_bmm_forward_cuda(mpx_cuda_ctx *ctx, const mpx_bmm_attr *at,
                                           const mpx_tensor *a, const mpx_tensor *b,
                                           mpx_tensor *c) {
    static const char *op = "bmm forward";
    BmmDims d = {};
    MPX_TRY(bmm_shapes(op, at, a, b, &d));
    MPX_TRY(expect_mat(op, "a", a, "c", c, d.m, "M of op(a)", d.n, "N of op(b)"));
    return gemm_run(ctx, Gemm{op, at->trans_a, at->trans_b, d.m, d.n, d.k, (int)d.batch, at->alpha,
                              operand(a), operand(b), c->data, c->dtype, no_bias()});
}

/* With C = alpha op(A) op(B) (bmm.c):
 *   dA = alpha dC op(B)^T        (trans_a: dA = alpha op(B) dC^T, A's stored [K, M] layout)
 *   dB = alpha op(A)^T dC        (trans_b: dB = alpha dC^T op(A), B's stored [N, K] layout) */
extern "C" mpx_status mpx_bmm_backward_cuda(mpx_cuda_ctx *ctx, const mpx_bmm_attr *at,
                                            const mpx_tensor *dc, const mpx_tensor *a,
                                            const mpx_tensor *b, mpx_tensor *da, mpx_tensor *db) {
    static const char *op = "bmm backward";
    BmmDims d = {};
    MPX_TRY(bmm_shapes(op, at, a, b, &d));
    MPX_TRY(expect_mat(op, "a", a, "dc", dc, d.m, "M of op(a)", d.n, "N of op(b)"));
    if (da) {
        MPX_TRY(cuop_expect_float(op, "da", da, -1));
        MPX_TRY(cuop_expect_same_shape(op, "a", a, "da", da));
    }
    if (db) {
        MPX_TRY(cuop_expect_float(op, "db", db, -1));
        MPX_TRY(cuop_expect_same_shape(op, "b", b, "db", db));
    }
    const int ta = at->trans_a, tb = at->trans_b, m = d.m, n = d.n, k = d.k;
    const int batch = (int)d.batch;
    if (da) {
        if (!ta) /* dA[M,K] = dC[M,N] @ op(B)^T */
            MPX_TRY(gemm_run(ctx, Gemm{op, 0, !tb, m, k, n, batch, at->alpha, operand(dc),
                                       operand(b), da->data, da->dtype, no_bias()}));
        else /* dA[K,M] = op(B)[K,N] @ dC^T */
            MPX_TRY(gemm_run(ctx, Gemm{op, tb, 1, k, m, n, batch, at->alpha, operand(b),
                                       operand(dc), da->data, da->dtype, no_bias()}));
    }
    if (db) {
        if (!tb) /* dB[K,N] = op(A)^T[K,M] @ dC */
            MPX_TRY(gemm_run(ctx, Gemm{op, !ta, 0, k, n, m, batch, at->alpha, operand(a),
                                       operand(dc), db->data, db->dtype, no_bias()}));
        else /* dB[N,K] = dC^T[N,M] @ op(A) */
            MPX_TRY(gemm_run(ctx, Gemm{op, 1, ta, n, k, m, batch, at->alpha, operand(dc),
                                       operand(a), db->data, db->dtype, no_bias()}));
    }
    return MPX_OK;
}
