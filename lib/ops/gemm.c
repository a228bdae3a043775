/* gemm.c — row-major single-precision GEMM: C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C.
 *
 * oneDNN's dnnl_sgemm for every shape: it picks its kernel from the CPU's features at run time,
 * where OpenBLAS on a CPU it does not know runs a generic kernel several times slower (and the
 * environment may force one). OpenBLAS stays for comparisons (mpx_sgemm_force) and for arguments
 * oneDNN refuses. Measurements behind the choice: results/reference/bench.md, "GEMM routing".
 */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "ops_internal.h"

void mpx_sgemm_force(mpx_cpu_ctx *ctx, mpx_gemm_impl impl) { ctx->sgemm_force = impl; }

static mpx_gemm_impl gemm_pick(const mpx_cpu_ctx *ctx) {
    return ctx->sgemm_force != MPX_GEMM_AUTO ? ctx->sgemm_force : MPX_GEMM_ONEDNN;
}

const char *mpx_sgemm_choice(const mpx_cpu_ctx *ctx, int trans_a, int trans_b, int m, int n,
                             int k) {
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k;
    return gemm_pick(ctx) == MPX_GEMM_ONEDNN ? "onednn" : "openblas";
}

void mpx_sgemm(const mpx_cpu_ctx *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    /* oneDNN only refuses malformed arguments (which OpenBLAS then reports through xerbla);
     * falling through keeps this void API total. */
    if (gemm_pick(ctx) == MPX_GEMM_ONEDNN &&
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta,
                   c, ldc) == dnnl_success)
        return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
