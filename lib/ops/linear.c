/* linear.c — fully connected layer y = x @ w + b through one GEMM per pass.
 *
 * x [..., IN] is viewed as [M, IN] (leading dims flattened), w [IN, OUT], b [OUT] or NULL,
 * y [..., OUT] with the leading dims of x. Backward: dx = dy @ w^T, dw = x^T @ dy,
 * db = column sums of dy (double accumulation, deterministic).
 *
 * Tensors may be FP32 or 16-bit (the executor hands the GEMM family 16-bit storage where the
 * backend multiplies it natively: backend.h, op_direct_io). When both GEMM operands are in a
 * format oneDNN multiplies natively here, the GEMM runs on them (mpx_gemm_lowp: exact products,
 * FP32 sums); otherwise 16-bit operands are decoded and the GEMM is FP32's. Results are FP32,
 * rounded into a 16-bit output's storage by mpx_encode (gemm_lowp.c says why that is the
 * executor's own rounding).
 *
 * Rows of dy that hold only zeros: such a row adds nothing to dw and db and makes its row of
 * dx zero, and BERT's MLM decoder gets mostly such rows (softmax cross-entropy gives the ~85%
 * of positions it ignores a zero gradient). When at least a quarter of dy's rows are zero, the
 * backward passes run their GEMMs on the other rows only, gathered into scratch: the same sums
 * without their zero terms. dx's other rows are written +0. A GEMM of another size may block
 * its sums differently, so dx and dw can differ from the full GEMM's in the last FP32 bits
 * (within the same error bound); db is the same double sum in the same order, bit for bit.
 * IEEE's 0 * Inf = NaN is kept: the zero rows are left out of dx only when w is finite, and a
 * zero row of dy whose row of x holds an Inf or NaN stays in dw.
 *
 * The forward has a form for the rows a loss reads (*_forward_rows_cpu): given a mask (the
 * labels of the softmax cross-entropy that is the layer's only reader), rows whose mask is
 * negative are written 0 without being computed (BERT's decoder).
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
    MPX_TRY(ops_expect_float(op, name, t, lead->ndim));
    for (int i = 0; i + 1 < lead->ndim; i++)
        MPX_TRY(ops_expect_dim(op, name, t, i, lead->shape[i], lead_name));
    return ops_expect_dim(op, name, t, lead->ndim - 1, last, why);
}

/* w is [IN, OUT]; the [M, IN] view of x must fit mpx_sgemm's int sizes. */
static mpx_status linear_shapes(const char *op, const char *xn, const mpx_tensor *x,
                                const char *wn, const mpx_tensor *w, int64_t *m) {
    MPX_TRY(ops_expect_float(op, xn, x, -1));
    MPX_TRY(ops_expect_float(op, wn, w, 2));
    MPX_TRY(ops_expect_dim(op, xn, x, x->ndim - 1, w->shape[0], "IN, dim 0 of the weights"));
    *m = mpx_tensor_numel(x) / w->shape[0];
    if (*m > INT_MAX || w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s viewed as [%lld, %lld] exceeds the GEMM's int sizes",
                        op, xn, (long long)*m, (long long)w->shape[0]);
    return MPX_OK;
}

/* ---- operands: FP32 or one 16-bit format, by element ---- */

/* A row-major matrix operand: its bytes and its dtype (F32, or the 16-bit format it is
 * multiplied in). */
typedef struct {
    const char *p;
    mpx_dtype dt;
} operand;

static size_t esz(mpx_dtype dt) { return dt == MPX_F32 ? 4 : 2; }

/* The two GEMM operands of a pass in the format they are multiplied in: both 16-bit when this
 * CPU multiplies their format natively, else both FP32 (16-bit ones decoded into scratch). */
static mpx_status operands(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *a,
                           const mpx_tensor *b, operand *oa, operand *ob) {
    if (ops_lowp_pair(ctx, a, b)) {
        *oa = (operand){a->data, a->dtype};
        *ob = (operand){b->data, b->dtype};
        return MPX_OK;
    }
    const float *fa, *fb;
    MPX_TRY(ops_f32_of(ctx, op, a, OPS_SLOT_A, &fa));
    MPX_TRY(ops_f32_of(ctx, op, b, OPS_SLOT_B, &fb));
    *oa = (operand){(const char *)fa, MPX_F32};
    *ob = (operand){(const char *)fb, MPX_F32};
    return MPX_OK;
}

/* C[M,N] (FP32) = op(A) @ op(B); A and B in the same format. */
static mpx_status gemm(mpx_cpu_ctx *ctx, int ta, int tb, int m, int n, int k, operand a, int lda,
                       operand b, int ldb, float *c, int ldc) {
    if (a.dt == MPX_F32) {
        mpx_sgemm(ctx, ta, tb, m, n, k, 1.0f, (const float *)a.p, lda, (const float *)b.p, ldb,
                  0.0f, c, ldc);
        return MPX_OK;
    }
    return mpx_gemm_lowp(ctx, a.dt, ta, tb, m, n, k, 1.0f, a.p, lda, b.p, ldb, c, ldc);
}

/* 1 when row r of n elements is all ±0 (NaN is nonzero). Blocks of 64 compares vectorise; the
 * first block with a nonzero ends the scan. A 16-bit zero is its sign bit alone. */
static int row_is_zero(operand x, int64_t r, int64_t n) {
    int64_t j = 0;
    if (x.dt == MPX_F32) {
        const float *v = (const float *)x.p + r * n;
        for (; j + 64 <= n; j += 64) {
            int nz = 0;
            for (int k = 0; k < 64; k++) nz |= v[j + k] != 0.0f;
            if (nz) return 0;
        }
        for (; j < n; j++)
            if (v[j] != 0.0f) return 0;
        return 1;
    }
    const uint16_t *v = (const uint16_t *)x.p + r * n;
    for (; j + 64 <= n; j += 64) {
        int nz = 0;
        for (int k = 0; k < 64; k++) nz |= (v[j + k] & 0x7fff) != 0;
        if (nz) return 0;
    }
    for (; j < n; j++)
        if (v[j] & 0x7fff) return 0;
    return 1;
}

/* 1 when row r of n elements holds no Inf or NaN (a 16-bit one: its exponent all ones). */
static int row_is_finite(operand x, int64_t r, int64_t n) {
    int bad = 0;
    if (x.dt == MPX_F32) {
        const float *v = (const float *)x.p + r * n;
        for (int64_t j = 0; j < n; j++) bad |= !(v[j] - v[j] == 0.0f); /* Inf - Inf and NaN */
        return !bad;
    }
    const uint16_t e = x.dt == MPX_BF16 ? 0x7f80 : 0x7c00;
    const uint16_t *v = (const uint16_t *)x.p + r * n;
    for (int64_t j = 0; j < n; j++) bad |= (v[j] & e) == e;
    return !bad;
}

/* The rows of dy [m, n] a backward GEMM must see, into idx[0..k) in order; returns k. A zero row
 * is left out unless keep (a row of x, [m, nk]) has a non-finite value in it. idx has m slots. */
static int64_t live_rows(operand dy, int64_t m, int64_t n, const operand *keep, int64_t nk,
                         int64_t *idx) {
#pragma omp parallel for schedule(static) if (m * 64 >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++)
        idx[i] = row_is_zero(dy, i, n) && (!keep || row_is_finite(*keep, i, nk)) ? -1 : i;
    int64_t k = 0;
    for (int64_t i = 0; i < m; i++)
        if (idx[i] >= 0) idx[k++] = i; /* in place: k <= i */
    return k;
}

/* dst[j, :] = src[idx[j], :] for j < k, rows of n elements; returns dst as an operand. */
static operand gather_rows(operand src, const int64_t *idx, int64_t k, int64_t n, char *dst) {
    const size_t row = (size_t)n * esz(src.dt);
#pragma omp parallel for schedule(static) if (k * n >= OPS_PAR_MIN)
    for (int64_t j = 0; j < k; j++)
        memcpy(dst + (size_t)j * row, src.p + (size_t)idx[j] * row, row);
    return (operand){dst, src.dt};
}

double mpx_linear_skipped_flops(const mpx_cpu_ctx *ctx) { return ctx->skipped_flops; }

/* Worth gathering: at least a quarter of the m rows left out. */
static int few_live(int64_t k, int64_t m) { return k <= m - m / 4 && k < m; }

/* The live-row list, m slots (NULL when it cannot grow: the full GEMM then). */
static int64_t *row_list(mpx_cpu_ctx *ctx, int64_t m) {
    return ops_scratch(ctx, OPS_SLOT_ROWS_A, (size_t)m * sizeof(int64_t));
}

/* Scratch for k gathered rows of n elements of dt, in slot `slot`. */
static char *rows_of(mpx_cpu_ctx *ctx, int slot, int64_t k, int64_t n, mpx_dtype dt) {
    return ops_scratch(ctx, slot, (size_t)(k > 0 ? k : 1) * (size_t)n * esz(dt) + 64);
}

/* dx[M, IN] (FP32) = dy[M, OUT] @ op(w) with op(w) [OUT, IN] (trans_w: w is [IN, OUT], ldw its
 * row length), on dy's nonzero rows when that pays (see the top of the file). */
static mpx_status backward_data(mpx_cpu_ctx *ctx, operand dy, operand w, int trans_w, int ldw,
                                int64_t m, int in, int out, float *dx) {
    int64_t *idx = m >= 4 ? row_list(ctx, m) : NULL;
    int64_t k = idx ? live_rows(dy, m, out, NULL, 0, idx) : m;
    char *dyk = NULL;
    float *dxk = NULL;
    int w_finite = 1;
    for (int64_t r = 0; few_live(k, m) && w_finite && r < (trans_w ? in : out); r++)
        w_finite = row_is_finite(w, r, trans_w ? out : in);
    if (few_live(k, m) && w_finite) {
        dyk = rows_of(ctx, OPS_SLOT_ROWS_B, k, out, dy.dt);
        dxk = ops_scratch(ctx, OPS_SLOT_OUT2, (size_t)(k > 0 ? k : 1) * (size_t)in * sizeof *dxk);
    }
    if (!dyk || !dxk)
        return gemm(ctx, 0, trans_w, (int)m, in, out, dy, out, w, ldw, dx, in);
    ctx->skipped_flops += 2.0 * (double)(m - k) * in * out;
    const operand dy_live = gather_rows(dy, idx, k, out, dyk);
    MPX_TRY(gemm(ctx, 0, trans_w, (int)k, in, out, dy_live, out, w, ldw, dxk, in));
    memset(dx, 0, (size_t)m * (size_t)in * sizeof *dx);
#pragma omp parallel for schedule(static) if (k * in >= OPS_PAR_MIN)
    for (int64_t j = 0; j < k; j++) memcpy(dx + idx[j] * in, dxk + j * in, (size_t)in * sizeof *dx);
    return MPX_OK;
}

/* The weight and bias gradients (FP32) from dy [M, OUT] and x [M, IN]: dw = x^T @ dy ([IN,
 * OUT], w_t == 0) or dy^T @ x ([OUT, IN], w_t == 1), db = column sums of dy; on the rows that
 * contribute when that pays (see the top of the file). */
static mpx_status backward_weights(mpx_cpu_ctx *ctx, const char *op, operand dy, operand x, int w_t,
                                   int64_t m, int in, int out, float *dw, float *db) {
    int64_t *idx = m >= 4 ? row_list(ctx, m) : NULL;
    int64_t k = idx ? live_rows(dy, m, out, &x, in, idx) : m;
    char *dyk = NULL, *xk = NULL;
    if (few_live(k, m)) {
        dyk = rows_of(ctx, OPS_SLOT_ROWS_B, k, out, dy.dt);
        xk = rows_of(ctx, OPS_SLOT_OUT2, k, in, x.dt);
    }
    int64_t rows = m;
    if (dyk && xk) {
        ctx->skipped_flops += 2.0 * (double)(m - k) * in * out;
        dy = gather_rows(dy, idx, k, out, dyk);
        x = gather_rows(x, idx, k, in, xk);
        rows = k;
    }
    if (rows == 0) { /* every row zero: a GEMM over no rows (zeros, which BLAS may not write) */
        memset(dw, 0, (size_t)in * (size_t)out * sizeof *dw);
        if (db) memset(db, 0, (size_t)out * sizeof *db);
        return MPX_OK;
    }
    if (w_t)
        MPX_TRY(gemm(ctx, 1, 0, out, in, (int)rows, dy, out, x, in, dw, in));
    else
        MPX_TRY(gemm(ctx, 1, 0, in, out, (int)rows, x, in, dy, out, dw, out));
    if (!db) return MPX_OK;
    const float *dyf = (const float *)dy.p;
    if (dy.dt != MPX_F32) { /* the rows' values for the column sums */
        mpx_tensor t = {.dtype = dy.dt, .device = MPX_DEV_CPU, .ndim = 2, .shape = {rows, out},
                        .data = (void *)dy.p};
        MPX_TRY(ops_f32_of(ctx, op, &t, OPS_SLOT_GEMM_A, &dyf));
    }
    ops_column_sums(dyf, rows, out, db);
    return MPX_OK;
}

/* y[M, OUT] (FP32) = x[M, IN] @ op(w) (+ b), op(w) [IN, OUT] (trans_w: w is [OUT, IN], ldw its
 * row length). With a mask (I32 [M]) only the rows whose mask is >= 0 are computed, gathered
 * into scratch when at least a quarter are left out, and the others are written +0: the rows a
 * softmax cross-entropy reads, given its labels (a negative label: the row is ignored). */
static mpx_status forward(mpx_cpu_ctx *ctx, operand x, operand w, int trans_w, int ldw,
                          const float *b, const int32_t *mask, int64_t m, int in, int out,
                          float *y) {
    int64_t k = m, *idx = mask ? row_list(ctx, m) : NULL;
    char *xk = NULL;
    float *yk = NULL;
    if (idx) {
        k = 0;
        for (int64_t i = 0; i < m; i++)
            if (mask[i] >= 0) idx[k++] = i;
        if (few_live(k, m)) {
            xk = rows_of(ctx, OPS_SLOT_ROWS_B, k, in, x.dt);
            yk =
                ops_scratch(ctx, OPS_SLOT_OUT2, (size_t)(k > 0 ? k : 1) * (size_t)out * sizeof *yk);
        }
    }
    operand xs = x;
    float *ys = y;
    int64_t rows = m;
    if (xk && yk) {
        ctx->skipped_flops += 2.0 * (double)(m - k) * in * out;
        xs = gather_rows(x, idx, k, in, xk);
        ys = yk;
        rows = k;
    }
    MPX_TRY(gemm(ctx, 0, trans_w, (int)rows, out, in, xs, in, w, ldw, ys, out));
    if (b) {
#pragma omp parallel for schedule(static) if (rows * out >= OPS_PAR_MIN)
        for (int64_t i = 0; i < rows; i++)
            for (int j = 0; j < out; j++) ys[i * out + j] += b[j];
    }
    if (ys == y) return MPX_OK;
    memset(y, 0, (size_t)m * (size_t)out * sizeof *y);
#pragma omp parallel for schedule(static) if (k * out >= OPS_PAR_MIN)
    for (int64_t j = 0; j < k; j++) memcpy(y + idx[j] * out, ys + j * out, (size_t)out * sizeof *y);
    return MPX_OK;
}

/* The passes on tensors: operands in the format they are multiplied in, FP32 results rounded
 * into 16-bit outputs. */
static mpx_status run_forward(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *x,
                              const mpx_tensor *w, int trans_w, int ldw, const mpx_tensor *b,
                              const mpx_tensor *mask, int64_t m, int in, int out, mpx_tensor *y) {
    operand ox, ow;
    const float *bf;
    float *yf;
    MPX_TRY(operands(ctx, op, x, w, &ox, &ow));
    MPX_TRY(ops_f32_of(ctx, op, b, OPS_SLOT_BIAS, &bf));
    MPX_TRY(ops_result_begin(ctx, op, y, OPS_SLOT_OUT, &yf));
    MPX_TRY(forward(ctx, ox, ow, trans_w, ldw, bf, mask ? mask->data : NULL, m, in, out, yf));
    ops_result_end(y, yf);
    return MPX_OK;
}

static mpx_status run_backward_data(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *dy,
                                    const mpx_tensor *w, int trans_w, int ldw, int64_t m, int in,
                                    int out, mpx_tensor *dx) {
    operand od, ow;
    float *dxf;
    MPX_TRY(operands(ctx, op, dy, w, &od, &ow));
    MPX_TRY(ops_result_begin(ctx, op, dx, OPS_SLOT_OUT, &dxf));
    MPX_TRY(backward_data(ctx, od, ow, trans_w, ldw, m, in, out, dxf));
    ops_result_end(dx, dxf);
    return MPX_OK;
}

static mpx_status run_backward_weights(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *dy,
                                       const mpx_tensor *x, int w_t, int64_t m, int in, int out,
                                       mpx_tensor *dw, mpx_tensor *db) {
    operand od, ox;
    float *dwf, *dbf;
    MPX_TRY(operands(ctx, op, dy, x, &od, &ox));
    MPX_TRY(ops_result_begin(ctx, op, dw, OPS_SLOT_OUT, &dwf));
    MPX_TRY(ops_result_begin(ctx, op, db, OPS_SLOT_BIAS, &dbf));
    MPX_TRY(backward_weights(ctx, op, od, ox, w_t, m, in, out, dwf, dbf));
    ops_result_end(dw, dwf);
    ops_result_end(db, dbf);
    return MPX_OK;
}

/* The mask of a rows forward: I32 [M], M the rows of x. */
static mpx_status mask_check(const char *op, const mpx_tensor *mask, int64_t m) {
    MPX_TRY(ops_expect(op, "mask", mask, MPX_I32, 1));
    return ops_expect_dim(op, "mask", mask, 0, m, "M, the rows of x");
}

mpx_status mpx_linear_forward_rows_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                       const mpx_tensor *b, const mpx_tensor *mask, mpx_tensor *y) {
    static const char *op = "linear forward";
    int64_t m;
    MPX_TRY(linear_shapes(op, "x", x, "w", w, &m));
    int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "x", x, "y", y, out, "OUT, dim 1 of the weights"));
    if (b) {
        MPX_TRY(ops_expect_float(op, "b", b, 1));
        MPX_TRY(ops_expect_dim(op, "b", b, 0, out, "OUT, dim 1 of the weights"));
    }
    if (mask) MPX_TRY(mask_check(op, mask, m));
    return run_forward(ctx, op, x, w, 0, out, b, mask, m, in, out, y);
}

mpx_status mpx_linear_forward_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                  const mpx_tensor *b, mpx_tensor *y) {
    return mpx_linear_forward_rows_cpu(ctx, x, w, b, NULL, y);
}

mpx_status mpx_linear_backward_data_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy, const mpx_tensor *w,
                                        mpx_tensor *dx) {
    static const char *op = "linear backward-data";
    int64_t m;
    MPX_TRY(linear_shapes(op, "dx", dx, "w", w, &m));
    int in = (int)w->shape[0], out = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 1 of the weights"));
    /* dx[M,IN] = dy[M,OUT] @ w[IN,OUT]^T */
    return run_backward_data(ctx, op, dy, w, 1, out, m, in, out, dx);
}

mpx_status mpx_linear_backward_weights_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy,
                                           const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db) {
    static const char *op = "linear backward-weights";
    int64_t m;
    MPX_TRY(linear_shapes(op, "x", x, "dw", dw, &m));
    int in = (int)dw->shape[0], out = (int)dw->shape[1];
    MPX_TRY(same_leading(op, "x", x, "dy", dy, out, "OUT, dim 1 of dw"));
    if (db) {
        MPX_TRY(ops_expect_float(op, "db", db, 1));
        MPX_TRY(ops_expect_dim(op, "db", db, 0, out, "OUT, dim 1 of dw"));
    }
    /* dw[IN,OUT] = x[M,IN]^T @ dy[M,OUT] */
    return run_backward_weights(ctx, op, dy, x, 0, m, in, out, dw, db);
}

/* ---- the same layer with weights stored [OUT, IN] (PyTorch's layout; BERT's MLM decoder uses
 * the token-embedding table [V, H] this way): y = x @ w^T + b. ---- */

/* w is [OUT, IN]; the [M, IN] view of x must fit mpx_sgemm's int sizes. */
static mpx_status linear_t_shapes(const char *op, const char *xn, const mpx_tensor *x,
                                  const char *wn, const mpx_tensor *w, int64_t *m) {
    MPX_TRY(ops_expect_float(op, xn, x, -1));
    MPX_TRY(ops_expect_float(op, wn, w, 2));
    MPX_TRY(ops_expect_dim(op, xn, x, x->ndim - 1, w->shape[1], "IN, dim 1 of the weights"));
    *m = mpx_tensor_numel(x) / w->shape[1];
    if (*m > INT_MAX || w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s viewed as [%lld, %lld] exceeds the GEMM's int sizes",
                        op, xn, (long long)*m, (long long)w->shape[1]);
    return MPX_OK;
}

mpx_status mpx_linear_t_forward_rows_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                         const mpx_tensor *b, const mpx_tensor *mask,
                                         mpx_tensor *y) {
    static const char *op = "linear_t forward";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "x", x, "w", w, &m));
    int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "x", x, "y", y, out, "OUT, dim 0 of the weights"));
    if (b) {
        MPX_TRY(ops_expect_float(op, "b", b, 1));
        MPX_TRY(ops_expect_dim(op, "b", b, 0, out, "OUT, dim 0 of the weights"));
    }
    if (mask) MPX_TRY(mask_check(op, mask, m));
    /* y[M,OUT] = x[M,IN] @ w[OUT,IN]^T */
    return run_forward(ctx, op, x, w, 1, in, b, mask, m, in, out, y);
}

mpx_status mpx_linear_t_forward_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *x, const mpx_tensor *w,
                                    const mpx_tensor *b, mpx_tensor *y) {
    return mpx_linear_t_forward_rows_cpu(ctx, x, w, b, NULL, y);
}

mpx_status mpx_linear_t_backward_data_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy,
                                          const mpx_tensor *w, mpx_tensor *dx) {
    static const char *op = "linear_t backward-data";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "dx", dx, "w", w, &m));
    int out = (int)w->shape[0], in = (int)w->shape[1];
    MPX_TRY(same_leading(op, "dx", dx, "dy", dy, out, "OUT, dim 0 of the weights"));
    /* dx[M,IN] = dy[M,OUT] @ w[OUT,IN] */
    return run_backward_data(ctx, op, dy, w, 0, in, m, in, out, dx);
}

mpx_status mpx_linear_t_backward_weights_cpu(mpx_cpu_ctx *ctx, const mpx_tensor *dy,
                                             const mpx_tensor *x, mpx_tensor *dw, mpx_tensor *db) {
    static const char *op = "linear_t backward-weights";
    int64_t m;
    MPX_TRY(linear_t_shapes(op, "x", x, "dw", dw, &m));
    int out = (int)dw->shape[0], in = (int)dw->shape[1];
    MPX_TRY(same_leading(op, "x", x, "dy", dy, out, "OUT, dim 0 of dw"));
    if (db) {
        MPX_TRY(ops_expect_float(op, "db", db, 1));
        MPX_TRY(ops_expect_dim(op, "db", db, 0, out, "OUT, dim 0 of dw"));
    }
    /* dw[OUT,IN] = dy[M,OUT]^T @ x[M,IN] */
    return run_backward_weights(ctx, op, dy, x, 1, m, in, out, dw, db);
}
