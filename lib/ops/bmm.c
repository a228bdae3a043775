/* bmm.c — batched matrix multiply (attention's Q K^T and P V), forward and backward.
 *
 * c [..., M, N] = alpha * op(a) @ op(b) for every leading index, a [..., M, K] ([..., K, M]
 * with trans_a), b [..., K, N] ([..., N, K] with trans_b); the leading dims (0..2 of them) are
 * equal in a, b and c and flattened to a batch count. Each batch is one mpx_sgemm; with a and b
 * (and dc) in a 16-bit format this CPU multiplies natively, all batches are one batched
 * mpx_gemm_lowp (linear.c says how 16-bit tensors are taken).
 *
 * Threads split the batches and each GEMM runs on one thread: called inside a parallel region,
 * oneDNN and OpenBLAS (OpenMP builds) run single-threaded, so every batch gives the bits of the
 * single-threaded GEMM whatever the thread count. Attention has B * heads batches of small
 * GEMMs (T x D by D x T), where this is also the faster split. A single batch is one GEMM
 * called outside any parallel region, so it uses every thread (and its bits may then depend
 * on the thread count, as mpx_sgemm's do).
 *
 * Backward, with C = alpha op(A) op(B):
 *   dA = alpha dC op(B)^T        (trans_a: dA = alpha op(B) dC^T, A's stored [K, M] layout)
 *   dB = alpha op(A)^T dC        (trans_b: dB = alpha dC^T op(A), B's stored [N, K] layout)
 */
#include <limits.h>
#include <math.h>

#include "mpx/ops.h"
#include "ops_internal.h"

/* Sizes of one problem: batch count and the GEMM dims with the leading dimensions of a, b. */
typedef struct {
    int64_t batch;
    int m, n, k, lda, ldb;
} bmm_dims;

/* t is F32 with the same leading dims as `ref` (rank included) and trailing [r, c]. */
static mpx_status expect_mat(const char *op, const char *ref_name, const mpx_tensor *ref,
                             const char *name, const mpx_tensor *t, int64_t r, const char *rwhy,
                             int64_t c, const char *cwhy) {
    MPX_TRY(ops_expect_float(op, name, t, ref->ndim));
    for (int i = 0; i + 2 < ref->ndim; i++)
        MPX_TRY(ops_expect_dim(op, name, t, i, ref->shape[i], ref_name));
    MPX_TRY(ops_expect_dim(op, name, t, ref->ndim - 2, r, rwhy));
    return ops_expect_dim(op, name, t, ref->ndim - 1, c, cwhy);
}

/* Validates a and b (names given) against each other and fills d. */
static mpx_status bmm_shapes(const char *op, const mpx_bmm_attr *at, const char *an,
                             const mpx_tensor *a, const char *bn, const mpx_tensor *b,
                             bmm_dims *d) {
    if (!at) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (!isfinite(at->alpha))
        return mpx_fail(MPX_ERR_INPUT, "%s: alpha %g is not finite", op, at->alpha);
    MPX_TRY(ops_expect_float(op, an, a, -1));
    if (a->ndim < 2)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has 1 dim, expected [..., rows, cols]", op, an);
    int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int64_t m = at->trans_a ? ac : ar, k = at->trans_a ? ar : ac;
    MPX_TRY(ops_expect_float(op, bn, b, a->ndim));
    int64_t n = at->trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (at->trans_b)
        MPX_TRY(expect_mat(op, an, a, bn, b, n, "N", k, "K of op(a)"));
    else
        MPX_TRY(expect_mat(op, an, a, bn, b, k, "K of op(a)", n, "N"));
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: GEMM sizes M %lld N %lld K %lld exceed int", op,
                        (long long)m, (long long)n, (long long)k);
    d->batch = mpx_tensor_numel(a) / (ar * ac);
    d->m = (int)m, d->n = (int)n, d->k = (int)k;
    d->lda = (int)ac;
    d->ldb = (int)b->shape[b->ndim - 1];
    return MPX_OK;
}

mpx_status mpx_bmm_forward_cpu(mpx_cpu_ctx *ctx, const mpx_bmm_attr *at, const mpx_tensor *a,
                               const mpx_tensor *b, mpx_tensor *c) {
    static const char *op = "bmm forward";
    bmm_dims d;
    MPX_TRY(bmm_shapes(op, at, "a", a, "b", b, &d));
    MPX_TRY(expect_mat(op, "a", a, "c", c, d.m, "M of op(a)", d.n, "N of op(b)"));
    const int64_t sa = (int64_t)d.m * d.k, sb = (int64_t)d.k * d.n, sc = (int64_t)d.m * d.n;
    float *cd;
    MPX_TRY(ops_result_begin(ctx, op, c, OPS_SLOT_OUT, &cd));
    if (ops_lowp_pair(ctx, a, b)) {
        MPX_TRY(mpx_gemm_lowp_batched(ctx, a->dtype, d.batch, at->trans_a, at->trans_b, d.m, d.n,
                                      d.k, at->alpha, a->data, d.lda, sa, b->data, d.ldb, sb, cd,
                                      d.n, sc));
        ops_result_end(c, cd);
        return MPX_OK;
    }
    const float *ad, *bd;
    MPX_TRY(ops_f32_of(ctx, op, a, OPS_SLOT_A, &ad));
    MPX_TRY(ops_f32_of(ctx, op, b, OPS_SLOT_B, &bd));
#pragma omp parallel for schedule(static) if (d.batch > 1)
    for (int64_t i = 0; i < d.batch; i++)
        mpx_sgemm(ctx, at->trans_a, at->trans_b, d.m, d.n, d.k, at->alpha, ad + i * sa, d.lda,
                  bd + i * sb, d.ldb, 0.0f, cd + i * sc, d.n);
    ops_result_end(c, cd);
    return MPX_OK;
}

mpx_status mpx_bmm_backward_cpu(mpx_cpu_ctx *ctx, const mpx_bmm_attr *at, const mpx_tensor *dc,
                                const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *da,
                                mpx_tensor *db) {
    static const char *op = "bmm backward";
    bmm_dims d;
    MPX_TRY(bmm_shapes(op, at, "a", a, "b", b, &d));
    MPX_TRY(expect_mat(op, "a", a, "dc", dc, d.m, "M of op(a)", d.n, "N of op(b)"));
    if (da) {
        MPX_TRY(ops_expect_float(op, "da", da, -1));
        MPX_TRY(ops_expect_same_shape(op, "a", a, "da", da));
    }
    if (db) {
        MPX_TRY(ops_expect_float(op, "db", db, -1));
        MPX_TRY(ops_expect_same_shape(op, "b", b, "db", db));
    }
    const int64_t sa = (int64_t)d.m * d.k, sb = (int64_t)d.k * d.n, sc = (int64_t)d.m * d.n;
    const int ta = at->trans_a, tb = at->trans_b, m = d.m, n = d.n, k = d.k;
    const float alpha = at->alpha;
    float *dad = NULL, *dbd = NULL;
    MPX_TRY(ops_result_begin(ctx, op, da, OPS_SLOT_OUT, &dad));
    MPX_TRY(ops_result_begin(ctx, op, db, OPS_SLOT_OUT2, &dbd));
    if (ops_lowp_pair(ctx, a, b) && a->dtype == dc->dtype) {
        const mpx_dtype t = a->dtype;
        const void *A = a->data, *B = b->data, *C = dc->data;
        const int64_t q = d.batch;
        /* da = dc op(b)^T ([M, K]), or its transpose op(b) dc^T ([K, M]) with trans_a */
        if (dad && !ta)
            MPX_TRY(mpx_gemm_lowp_batched(ctx, t, q, 0, !tb, m, k, n, alpha, C, n, sc, B, d.ldb, sb,
                                          dad, k, sa));
        if (dad && ta)
            MPX_TRY(mpx_gemm_lowp_batched(ctx, t, q, tb, 1, k, m, n, alpha, B, d.ldb, sb, C, n, sc,
                                          dad, m, sa));
        /* db = op(a)^T dc ([K, N]), or dc^T op(a) ([N, K]) with trans_b */
        if (dbd && !tb)
            MPX_TRY(mpx_gemm_lowp_batched(ctx, t, q, !ta, 0, k, n, m, alpha, A, d.lda, sa, C, n, sc,
                                          dbd, n, sb));
        if (dbd && tb)
            MPX_TRY(mpx_gemm_lowp_batched(ctx, t, q, 1, ta, n, k, m, alpha, C, n, sc, A, d.lda, sa,
                                          dbd, k, sb));
        ops_result_end(da, dad);
        ops_result_end(db, dbd);
        return MPX_OK;
    }
    const float *ad, *bd, *dcd;
    MPX_TRY(ops_f32_of(ctx, op, a, OPS_SLOT_A, &ad));
    MPX_TRY(ops_f32_of(ctx, op, b, OPS_SLOT_B, &bd));
    MPX_TRY(ops_f32_of(ctx, op, dc, OPS_SLOT_BIAS, &dcd));
#pragma omp parallel for schedule(static) if (d.batch > 1)
    for (int64_t i = 0; i < d.batch; i++) {
        const float *ai = ad + i * sa, *bi = bd + i * sb, *ci = dcd + i * sc;
        if (dad) {
            if (!ta) /* dA[M,K] = dC[M,N] @ op(B)^T; op(B)^T is B^T, or B itself when trans_b */
                mpx_sgemm(ctx, 0, !tb, m, k, n, alpha, ci, n, bi, d.ldb, 0.0f, dad + i * sa, k);
            else /* dA[K,M] = op(B)[K,N] @ dC^T */
                mpx_sgemm(ctx, tb, 1, k, m, n, alpha, bi, d.ldb, ci, n, 0.0f, dad + i * sa, m);
        }
        if (dbd) {
            if (!tb) /* dB[K,N] = op(A)^T[K,M] @ dC; op(A)^T is A^T, or A itself when trans_a */
                mpx_sgemm(ctx, !ta, 0, k, n, m, alpha, ai, d.lda, ci, n, 0.0f, dbd + i * sb, n);
            else /* dB[N,K] = dC^T[N,M] @ op(A) */
                mpx_sgemm(ctx, 1, ta, n, k, m, alpha, ci, n, ai, d.lda, 0.0f, dbd + i * sb, k);
        }
    }
    ops_result_end(da, dad);
    ops_result_end(db, dbd);
    return MPX_OK;
}
