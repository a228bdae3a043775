/* linear.c — fully connected layer y = x @ w + b through mpx_sgemm.
 *
 * x [..., IN] is viewed as [M, IN] (leading dims flattened), w [IN, OUT], b [OUT] or NULL,
 * y [..., OUT] with the leading dims of x. Backward: dx = dy @ w^T, dw = x^T @ dy,
 * db = column sums of dy (double accumulation, deterministic).
 *
 * Rows of dy that hold only zeros: such a row adds nothing to dw and db and makes its row of
 * dx zero, and BERT's MLM decoder gets mostly such rows (softmax cross-entropy gives the ~85%
 * of positions it ignores a zero gradient; the decoder's GEMMs were half of the BERT-tiny
 * step on the CPU, its backward three quarters of that). When at least a quarter of dy's rows are zero, the backward passes run their
 * GEMMs on the other rows only, gathered into scratch: the same sums without their zero terms.
 * dx's other rows are written +0. A GEMM of another size may block its sums differently, so dx
 * and dw can differ from the full GEMM's in the last FP32 bits (within the same error bound);
 * db is the same double sum in the same order (adding a zero changes nothing), bit for bit.
 * IEEE's 0 * Inf = NaN is kept: the zero rows are left out of dx only when w is finite, and a
 * zero row of dy whose row of x holds an Inf or NaN stays in dw. Zero rows are found by a scan
 * that stops at the first 64 values holding a nonzero, so layers whose dy has none read 256
 * bytes per row.
 *
 * The forward has a form for the rows a loss reads (*_forward_rows_cpu): given a mask (the
 * labels of the softmax cross-entropy that is the layer's only reader), rows whose mask is
 * negative are written 0 without being computed. The executor uses it for BERT's decoder, whose
 * logits at the ignored positions nothing reads.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the backward passes on dy's nonzero rows ---- */

/* Scratch grown to the largest request (ops run on one thread at a time): the live-row list
 * and the gathered operands. NULL when it cannot grow; the caller then runs the full GEMM. */
static void *rows_scratch(size_t bytes) {
    static void *buf;
    static size_t cap;
    if (bytes > cap) {
        void *p = realloc(buf, bytes);
        if (!p) return NULL;
        buf = p;
        cap = bytes;
    }
    return buf;
}

/* 1 when r[0..n) are all ±0 (NaN is nonzero). Blocks of 64 compares vectorise; the first
 * block with a nonzero ends the scan. */
static int row_is_zero(const float *r, int64_t n) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        int nz = 0;
        for (int k = 0; k < 64; k++) nz |= r[j + k] != 0.0f;
        if (nz) return 0;
    }
    for (; j < n; j++)
        if (r[j] != 0.0f) return 0;
    return 1;
}

static int row_is_finite(const float *r, int64_t n) {
    int bad = 0;
    for (int64_t j = 0; j < n; j++) bad |= !(r[j] - r[j] == 0.0f); /* Inf - Inf and NaN: NaN */
    return !bad;
}

/* The rows of dy [m, n] a backward GEMM must see, into idx[0..k) in order; returns k. A zero row
 * is left out unless keep (a row of x, [m, nk]) has a non-finite value in it. idx has m slots. */
static int64_t live_rows(const float *dy, int64_t m, int64_t n, const float *keep, int64_t nk,
                         int64_t *idx) {
#pragma omp parallel for schedule(static) if (m * 64 >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++)
        idx[i] = row_is_zero(dy + i * n, n) && (!keep || row_is_finite(keep + i * nk, nk)) ? -1 : i;
    int64_t k = 0;
    for (int64_t i = 0; i < m; i++)
        if (idx[i] >= 0) idx[k++] = i; /* in place: k <= i */
    return k;
}

/* dst[j, :] = src[idx[j], :] for j < k, rows of n floats. */
static void gather_rows(const float *src, const int64_t *idx, int64_t k, int64_t n, float *dst) {
#pragma omp parallel for schedule(static) if (k * n >= OPS_PAR_MIN)
    for (int64_t j = 0; j < k; j++) memcpy(dst + j * n, src + idx[j] * n, (size_t)n * sizeof *dst);
}

static double g_skipped_flops;

double mpx_linear_skipped_flops(void) { return g_skipped_flops; }

/* The scratch behind the live-row list *idx (m slots, kept at the front: the scratch may move,
 * so *idx is updated) for k gathered rows of IN and k of OUT floats; NULL when it cannot grow. */
static float *gather_scratch(int64_t **idx, int64_t m, int64_t k, int in, int out) {
    const size_t head = ((size_t)m * sizeof **idx + 63) & ~(size_t)63;
    char *base = rows_scratch(head + (size_t)k * (size_t)(in + out) * sizeof(float));
    if (!base) return NULL;
    *idx = (int64_t *)base;
    return (float *)(base + head);
}

/* Worth gathering: at least a quarter of the m rows left out. */
static int few_live(int64_t k, int64_t m) { return k <= m - m / 4 && k < m; }

/* dx[M, IN] = dy[M, OUT] @ op(w) with op(w) [OUT, IN] (trans_w: w is [IN, OUT], ldw its row
 * length), on dy's nonzero rows when that pays (see the top of the file). */
static void backward_data(const float *dy, const float *w, int trans_w, int ldw, int64_t m,
                          int in, int out, float *dx) {
    int64_t *idx = m >= 4 ? rows_scratch((size_t)m * sizeof *idx) : NULL;
    int64_t k = idx ? live_rows(dy, m, out, NULL, 0, idx) : m;
    float *buf = NULL;
    if (few_live(k, m) && row_is_finite(w, (int64_t)in * out))
        buf = gather_scratch(&idx, m, k, in, out); /* dy's rows [k, OUT], dx's [k, IN] */
    if (!buf) {
        mpx_sgemm(0, trans_w, (int)m, in, out, 1.0f, dy, out, w, ldw, 0.0f, dx, in);
        return;
    }
    float *dyk = buf, *dxk = buf + k * out;
    g_skipped_flops += 2.0 * (double)(m - k) * in * out;
    gather_rows(dy, idx, k, out, dyk);
    mpx_sgemm(0, trans_w, (int)k, in, out, 1.0f, dyk, out, w, ldw, 0.0f, dxk, in);
    memset(dx, 0, (size_t)m * (size_t)in * sizeof *dx);
#pragma omp parallel for schedule(static) if (k * in >= OPS_PAR_MIN)
    for (int64_t j = 0; j < k; j++) memcpy(dx + idx[j] * in, dxk + j * in, (size_t)in * sizeof *dx);
}

/* The weight and bias gradients from dy [M, OUT] and x [M, IN]: dw = x^T @ dy ([IN, OUT],
 * w_t == 0) or dy^T @ x ([OUT, IN], w_t == 1), db = column sums of dy; on the rows that
 * contribute when that pays (see the top of the file). */
static void backward_weights(const float *dy, const float *x, int w_t, int64_t m, int in,
                             int out, float *dw, float *db) {
    int64_t *idx = m >= 4 ? rows_scratch((size_t)m * sizeof *idx) : NULL;
    int64_t k = idx ? live_rows(dy, m, out, x, in, idx) : m;
    float *buf = NULL;
    if (few_live(k, m)) buf = gather_scratch(&idx, m, k, in, out); /* dy's rows, x's rows */
    int64_t rows = m;
    if (buf) {
        float *dyk = buf, *xk = buf + k * out;
        g_skipped_flops += 2.0 * (double)(m - k) * in * out;
        gather_rows(dy, idx, k, out, dyk);
        gather_rows(x, idx, k, in, xk);
        dy = dyk;
        x = xk;
        rows = k;
    }
    if (rows == 0) { /* every row zero: a GEMM over no rows (zeros, which BLAS may not write) */
        memset(dw, 0, (size_t)in * (size_t)out * sizeof *dw);
        if (db) memset(db, 0, (size_t)out * sizeof *db);
        return;
    }
    if (w_t)
        mpx_sgemm(1, 0, out, in, (int)rows, 1.0f, dy, out, x, in, 0.0f, dw, in);
    else
        mpx_sgemm(1, 0, in, out, (int)rows, 1.0f, x, in, dy, out, 0.0f, dw, out);
    if (db) ops_column_sums(dy, rows, out, db);
}

/* y[M, OUT] = x[M, IN] @ op(w) (+ b), op(w) [IN, OUT] (trans_w: w is [OUT, IN], ldw its row
 * length). With a mask (I32 [M]) only the rows whose mask is >= 0 are computed, gathered into
 * scratch when at least a quarter are left out, and the others are written +0: the rows a
 * softmax cross-entropy reads, given its labels (a negative label: the row is ignored). */
static void forward(const float *x, const float *w, int trans_w, int ldw, const float *b,
                    const int32_t *mask, int64_t m, int in, int out, float *y) {
    int64_t k = m, *idx = mask ? rows_scratch((size_t)m * sizeof *idx) : NULL;
    float *buf = NULL;
    if (idx) {
        k = 0;
        for (int64_t i = 0; i < m; i++)
            if (mask[i] >= 0) idx[k++] = i;
        if (few_live(k, m)) buf = gather_scratch(&idx, m, k, in, out); /* x's rows, y's rows */
    }
    const float *xs = x;
    float *ys = y;
    int64_t rows = m;
    if (buf) {
        g_skipped_flops += 2.0 * (double)(m - k) * in * out;
        gather_rows(x, idx, k, in, buf);
        xs = buf;
        ys = buf + k * in;
        rows = k;
    }
    mpx_sgemm(0, trans_w, (int)rows, out, in, 1.0f, xs, in, w, ldw, 0.0f, ys, out);
    if (b) {
#pragma omp parallel for schedule(static) if (rows * out >= OPS_PAR_MIN)
        for (int64_t i = 0; i < rows; i++)
            for (int j = 0; j < out; j++) ys[i * out + j] += b[j];
    }
    if (!buf) return;
    memset(y, 0, (size_t)m * (size_t)out * sizeof *y);
#pragma omp parallel for schedule(static) if (k * out >= OPS_PAR_MIN)
    for (int64_t j = 0; j < k; j++) memcpy(y + idx[j] * out, ys + j * out, (size_t)out * sizeof *y);
}

/* The mask of a rows forward: I32 [M], M the rows of x. */
static mpx_status mask_check(const char *op, const mpx_tensor *mask, int64_t m) {
    MPX_TRY(ops_expect(op, "mask", mask, MPX_I32, 1));
    return ops_expect_dim(op, "mask", mask, 0, m, "M, the rows of x");
}

mpx_status mpx_linear_forward_rows_cpu(const mpx_tensor *x, const mpx_tensor *w,
                                       const mpx_tensor *b, const mpx_tensor *mask,
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
    if (mask) MPX_TRY(mask_check(op, mask, m));
    forward(x->data, w->data, 0, out, b ? b->data : NULL, mask ? mask->data : NULL, m, in, out,
            y->data);
    return MPX_OK;
}

mpx_status mpx_linear_forward_cpu(const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                  mpx_tensor *y) {
    return mpx_linear_forward_rows_cpu(x, w, b, NULL, y);
}

mpx_status mpx_linear_backward_data_cpu(const mpx_tensor *dy, const mpx_tensor *w, mpx_tensor *dx) {
    static const char *op = "linear backward-data";
    int64_t m;
    MPX_TRY(linear_shapes(op, "dx", dx, "w", w, &m));
    int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 1 of the weights"));
    /* dx[M,IN] = dy[M,OUT] @ w[IN,OUT]^T */
    backward_data(dy->data, w->data, 1, out, m, in, out, dx->data);
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
    backward_weights(dy->data, x->data, 0, m, in, out, dw->data, db ? db->data : NULL);
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

mpx_status mpx_linear_t_forward_rows_cpu(const mpx_tensor *x, const mpx_tensor *w,
                                         const mpx_tensor *b, const mpx_tensor *mask,
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
    if (mask) MPX_TRY(mask_check(op, mask, m));
    /* y[M,OUT] = x[M,IN] @ w[OUT,IN]^T */
    forward(x->data, w->data, 1, in, b ? b->data : NULL, mask ? mask->data : NULL, m, in, out,
            y->data);
    return MPX_OK;
}

mpx_status mpx_linear_t_forward_cpu(const mpx_tensor *x, const mpx_tensor *w, const mpx_tensor *b,
                                    mpx_tensor *y) {
    return mpx_linear_t_forward_rows_cpu(x, w, b, NULL, y);
}

mpx_status mpx_linear_t_backward_data_cpu(const mpx_tensor *dy, const mpx_tensor *w,
                                          mpx_tensor *dx) {
    static const char *op = "linear_t backward-data";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "dx", dx, "w", w, &m));
    int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 0 of the weights"));
    /* dx[M,IN] = dy[M,OUT] @ w[OUT,IN] */
    backward_data(dy->data, w->data, 0, in, m, in, out, dx->data);
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
    backward_weights(dy->data, x->data, 1, m, in, out, dw->data, db ? db->data : NULL);
    return MPX_OK;
}
