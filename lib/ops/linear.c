/* linear.c — fully connected layer y = x @ w + b through mpx_sgemm.
 *
 * x [..., IN] is viewed as [M, IN] (leading dims flattened), w [IN, OUT], b [OUT] or NULL,
 * y [..., OUT] with the leading dims of x. Backward: dx = dy @ w^T, dw = x^T @ dy,
 * db = column sums of dy (double accumulation, deterministic).
 */
#include <limits.h>

#include "mpx/ops.h"
#include "ops_internal.h"

/* t is [..., last] with the same leading dims as `lead` (whose last dim may differ). */
static mpx_status same_leading(const char *op, const char *lead_name, const mpx_tensor *lead,
                               const char *name, const mpx_tensor *t, int64_t last,
                               const char *why) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, lead->ndim));
    for (int i = 0; i + 1 < lead->ndim; i++)
        MPX_TRY(ops_expect_dim(op, name, t, i, lead->shape[i], lead_name));
    return ops_expect_dim(op, name, t, lead->ndim - 1, last, why);
}

/* w is [IN, OUT]; the [M, IN] view of x must fit mpx_sgemm's int sizes. */
static mpx_status linear_shapes(const char *op, const char *xn, const mpx_tensor *x,
                                const char *wn, const mpx_tensor *w, int64_t *m) {
    MPX_TRY(ops_expect(op, xn, x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, wn, w, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, xn, x, x->ndim - 1, w->shape[0], "IN, dim 0 of the weights"));
    *m = mpx_tensor_numel(x) / w->shape[0];
    if (*m > INT_MAX || w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s viewed as [%lld, %lld] exceeds the GEMM's int sizes",
                        op, xn, (long long)*m, (long long)w->shape[0]);
    return MPX_OK;
}

mpx_status mpx_linear_forward_cpu(const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                  mpx_tensor *y) {
    static const char *op = "linear forward";
    int64_t m;
    MPX_TRY(linear_shapes(op, "x", x, "w", w, &m));
    int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "x", x, "y", y, out, "OUT, dim 1 of the weights"));
    if (b) {
        MPX_TRY(ops_expect(op, "b", b, MPX_F32, 1));
        MPX_TRY(ops_expect_dim(op, "b", b, 0, out, "OUT, dim 1 of the weights"));
    }
    float *yd = y->data;
    mpx_sgemm(0, 0, (int)m, out, in, 1.0f, x->data, in, w->data, out, 0.0f, yd, out);
    if (b) {
        const float *bd = b->data;
#pragma omp parallel for schedule(static) if (m * out >= OPS_PAR_MIN)
        for (int64_t i = 0; i < m; i++)
            for (int j = 0; j < out; j++) yd[i * out + j] += bd[j];
    }
    return MPX_OK;
}

mpx_status mpx_linear_backward_data_cpu(const mpx_tensor *dy, const mpx_tensor *w, mpx_tensor *dx) {
    static const char *op = "linear backward-data";
    int64_t m;
    MPX_TRY(linear_shapes(op, "dx", dx, "w", w, &m));
    int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 1 of the weights"));
    /* dx[M,IN] = dy[M,OUT] @ w[IN,OUT]^T */
    mpx_sgemm(0, 1, (int)m, in, out, 1.0f, dy->data, out, w->data, out, 0.0f, dx->data, in);
    return MPX_OK;
}

mpx_status mpx_linear_backward_weights_cpu(const mpx_tensor *dy, const mpx_tensor *x,
                                           mpx_tensor *dw, mpx_tensor *db) {
    static const char *op = "linear backward-weights";
    int64_t m;
    MPX_TRY(linear_shapes(op, "x", x, "dw", dw, &m));
    int in = (int)dw->shape[0], out = (int)dw->shape[1];
    MPX_TRY(same_leading(op, "x", x, "dy", dy, out, "OUT, dim 1 of dw"));
    if (db) {
        MPX_TRY(ops_expect(op, "db", db, MPX_F32, 1));
        MPX_TRY(ops_expect_dim(op, "db", db, 0, out, "OUT, dim 1 of dw"));
    }
    /* dw[IN,OUT] = x[M,IN]^T @ dy[M,OUT] */
    mpx_sgemm(1, 0, in, out, (int)m, 1.0f, x->data, in, dy->data, out, 0.0f, dw->data, out);
    if (db) ops_column_sums(dy->data, m, out, db->data);
    return MPX_OK;
}

/* ---- the same layer with weights stored [OUT, IN] (PyTorch's layout; BERT's MLM decoder uses
 * the token-embedding table [V, H] this way): y = x @ w^T + b. ---- */

/* w is [OUT, IN]; the [M, IN] view of x must fit mpx_sgemm's int sizes. */
static mpx_status linear_t_shapes(const char *op, const char *xn, const mpx_tensor *x,
                                  const char *wn, const mpx_tensor *w, int64_t *m) {
    MPX_TRY(ops_expect(op, xn, x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, wn, w, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, xn, x, x->ndim - 1, w->shape[1], "IN, dim 1 of the weights"));
    *m = mpx_tensor_numel(x) / w->shape[1];
    if (*m > INT_MAX || w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s viewed as [%lld, %lld] exceeds the GEMM's int sizes",
                        op, xn, (long long)*m, (long long)w->shape[1]);
    return MPX_OK;
}

mpx_status mpx_linear_t_forward_cpu(const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                    mpx_tensor *y) {
    static const char *op = "linear_t forward";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "x", x, "w", w, &m));
    int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "x", x, "y", y, out, "OUT, dim 0 of the weights"));
    if (b) {
        MPX_TRY(ops_expect(op, "b", b, MPX_F32, 1));
        MPX_TRY(ops_expect_dim(op, "b", b, 0, out, "OUT, dim 0 of the weights"));
    }
    float *yd = y->data;
    /* y[M,OUT] = x[M,IN] @ w[OUT,IN]^T */
    mpx_sgemm(0, 1, (int)m, out, in, 1.0f, x->data, in, w->data, in, 0.0f, yd, out);
    if (b) {
        const float *bd = b->data;
#pragma omp parallel for schedule(static) if (m * out >= OPS_PAR_MIN)
        for (int64_t i = 0; i < m; i++)
            for (int j = 0; j < out; j++) yd[i * out + j] += bd[j];
    }
    return MPX_OK;
}

mpx_status mpx_linear_t_backward_data_cpu(const mpx_tensor *dy, const mpx_tensor *w,
                                          mpx_tensor *dx) {
    static const char *op = "linear_t backward-data";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "dx", dx, "w", w, &m));
    int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 0 of the weights"));
    /* dx[M,IN] = dy[M,OUT] @ w[OUT,IN] */
    mpx_sgemm(0, 0, (int)m, in, out, 1.0f, dy->data, out, w->data, in, 0.0f, dx->data, in);
    return MPX_OK;
}

mpx_status mpx_linear_t_backward_weights_cpu(const mpx_tensor *dy, const mpx_tensor *x,
                                             mpx_tensor *dw, mpx_tensor *db) {
    static const char *op = "linear_t backward-weights";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "x", x, "dw", dw, &m));
    int out = (int)dw->shape[0], in = (int)dw->shape[1];
    MPX_TRY(same_leading(op, "x", x, "dy", dy, out, "OUT, dim 0 of dw"));
    if (db) {
        MPX_TRY(ops_expect(op, "db", db, MPX_F32, 1));
        MPX_TRY(ops_expect_dim(op, "db", db, 0, out, "OUT, dim 0 of dw"));
    }
    /* dw[OUT,IN] = dy[M,OUT]^T @ x[M,IN] */
    mpx_sgemm(1, 0, out, in, (int)m, 1.0f, dy->data, out, x->data, in, 0.0f, dw->data, in);
    if (db) ops_column_sums(dy->data, m, out, db->data);
    return MPX_OK;
}
