/* l2norm.c — L2 normalization over the channel (last) dimension with a learned per-channel
 * scale, forward and backward: SSD's conv4_3 normalization (Liu et al. 2016, after ParseNet),
 * y = gamma * x / sqrt(sum_c x^2 + eps).
 *
 * x [..., C] is viewed as [M, C]; each row (one position's channels) is normalised by its own
 * L2 norm, taken in double, and the saved inverse norm is FP32: forward and backward both use
 * that rounded value, so the backward is the exact derivative of what the forward computed up
 * to FP32 rounding. Rows are independent; dgamma is a column sum accumulated in double over
 * fixed chunks of rows (the chunking depends only on M) added in chunk order, so every result
 * is bit-identical across thread counts. The CUDA op (lib/cuda/norm.cu) follows the same order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

enum { CHUNK_MIN = 32, MAX_CHUNKS = 256 };

static const char *const FWD = "l2norm forward";
static const char *const BWD = "l2norm backward";

/* x is F32 [..., C]; *m, *c get the [M, C] view. */
static mpx_status l2_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m,
                          int64_t *c) {
    MPX_TRY(ops_expect(op, name, x, MPX_F32, -1));
    *c = x->shape[x->ndim - 1];
    *m = mpx_tensor_numel(x) / *c;
    return MPX_OK;
}

static mpx_status l2_channel_vec(const char *op, const char *name, const mpx_tensor *t,
                                 int64_t c) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, 1));
    return ops_expect_dim(op, name, t, 0, c, "C, the last dim of x");
}

/* The per-row inverse norm: F32 with M elements, whatever its shape. */
static mpx_status l2_row_stat(const char *op, const char *name, const mpx_tensor *t, int64_t m) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, -1));
    if (mpx_tensor_numel(t) == m) return MPX_OK;
    char buf[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s, expected %lld elements (M, the rows of x)",
                    op, name, mpx_shape_str(t->ndim, t->shape, buf, sizeof buf), (long long)m);
}

mpx_status mpx_l2norm_forward_cpu(float eps, const mpx_tensor *x, const mpx_tensor *gamma,
                                  mpx_tensor *save_inv, mpx_tensor *y) {
    if (!(eps > 0 && isfinite(eps)))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be finite and > 0", FWD, eps);
    int64_t m, c;
    MPX_TRY(l2_view(FWD, "x", x, &m, &c));
    MPX_TRY(l2_channel_vec(FWD, "gamma", gamma, c));
    MPX_TRY(l2_row_stat(FWD, "save_inv", save_inv, m));
    MPX_TRY(ops_expect(FWD, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(FWD, "x", x, "y", y));
    const float *xd = x->data, *g = gamma->data;
    float *yd = y->data, *si = save_inv->data;
    const double deps = eps;
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
        const float *row = xd + i * c;
        float *out = yd + i * c;
        double s = 0;
        for (int64_t j = 0; j < c; j++) s += (double)row[j] * row[j];
        const float inv = (float)(1.0 / sqrt(s + deps));
        si[i] = inv;
        for (int64_t j = 0; j < c; j++) out[j] = row[j] * inv * g[j];
    }
    return MPX_OK;
}

/* With xhat = x * inv, y = gamma * xhat and g = dy * gamma, per row:
 *   dx = inv * (g - xhat * sum_j(g * xhat));
 * over rows: dgamma = sum dy * xhat. */
mpx_status mpx_l2norm_backward_cpu(const mpx_tensor *dy, const mpx_tensor *x,
                                   const mpx_tensor *gamma, const mpx_tensor *save_inv,
                                   mpx_tensor *dx, mpx_tensor *dgamma) {
    int64_t m, c;
    MPX_TRY(l2_view(BWD, "x", x, &m, &c));
    MPX_TRY(ops_expect(BWD, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dy", dy));
    MPX_TRY(ops_expect(BWD, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dx", dx));
    MPX_TRY(l2_channel_vec(BWD, "gamma", gamma, c));
    MPX_TRY(l2_row_stat(BWD, "save_inv", save_inv, m));
    MPX_TRY(l2_channel_vec(BWD, "dgamma", dgamma, c));
    const float *dyd = dy->data, *xd = x->data, *g = gamma->data, *si = save_inv->data;
    float *dxd = dx->data, *dg = dgamma->data;
    int64_t rows, nchunks = ops_chunking(m, CHUNK_MIN, MAX_CHUNKS, &rows);
    double *part = malloc((size_t)(nchunks * c) * sizeof *part);
    if (!part) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for partial sums", BWD);
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN && nchunks > 1)
    for (int64_t k = 0; k < nchunks; k++) {
        double *pdg = part + k * c;
        memset(pdg, 0, (size_t)c * sizeof *pdg);
        int64_t i1 = (k + 1) * rows < m ? (k + 1) * rows : m;
        for (int64_t i = k * rows; i < i1; i++) {
            const float *drow = dyd + i * c, *xrow = xd + i * c;
            float *out = dxd + i * c;
            const float inv = si[i];
            double sgx = 0;
            for (int64_t j = 0; j < c; j++) {
                float xhat = xrow[j] * inv, gj = drow[j] * g[j];
                sgx += (double)gj * xhat;
                pdg[j] += (double)drow[j] * xhat;
            }
            const float s = (float)sgx;
            for (int64_t j = 0; j < c; j++) {
                float xhat = xrow[j] * inv;
                out[j] = inv * (drow[j] * g[j] - xhat * s);
            }
        }
    }
    for (int64_t j = 0; j < c; j++) {
        double sdg = 0;
        for (int64_t k = 0; k < nchunks; k++) sdg += part[k * c + j];
        dg[j] = (float)sdg;
    }
    free(part);
    return MPX_OK;
}
