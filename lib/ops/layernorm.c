/* layernorm.c — layer normalization over the last dimension, forward and backward.
 *
 * x [..., C] is viewed as [M, C]. Each row is normalised by its own mean and biased variance,
 * taken in double over the row (two passes: the row is in cache and the centred second pass
 * has no cancellation), then scaled by gamma [C] and shifted by beta [C]. The saved mean and
 * invstd are FP32, and forward and backward both use these rounded values, so the backward is
 * the exact derivative of what the forward computed up to FP32 rounding.
 *
 * Rows are independent: forward and dx parallelise over rows with results that do not depend
 * on the thread count. dgamma and dbeta are column sums over all rows; as in batchnorm.c they
 * are accumulated in double over fixed chunks of rows (the chunking depends only on M) and the
 * chunk partials are added in chunk order, so they are bit-identical across thread counts.
 * Chunk partials live in a buffer of the call's own (ops keep no state between calls).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

enum { CHUNK_MIN = 32, MAX_CHUNKS = 256 };

static const char *const FWD = "layernorm forward";
static const char *const BWD = "layernorm backward";

/* x is F32 [..., C]; *m, *c get the [M, C] view. */
static mpx_status ln_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m,
                          int64_t *c) {
    MPX_TRY(ops_expect(op, name, x, MPX_F32, -1));
    *c = x->shape[x->ndim - 1];
    *m = mpx_tensor_numel(x) / *c;
    return MPX_OK;
}

static mpx_status ln_channel_vec(const char *op, const char *name, const mpx_tensor *t, int64_t c) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, 1));
    return ops_expect_dim(op, name, t, 0, c, "C, the last dim of x");
}

/* A per-row statistic: F32 with M elements, whatever its shape. */
static mpx_status ln_row_stat(const char *op, const char *name, const mpx_tensor *t, int64_t m) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, -1));
    if (mpx_tensor_numel(t) == m) return MPX_OK;
    char buf[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s, expected %lld elements (M, the rows of x)",
                    op, name, mpx_shape_str(t->ndim, t->shape, buf, sizeof buf), (long long)m);
}

mpx_status mpx_layernorm_forward_cpu(float eps, const mpx_tensor *x, const mpx_tensor *gamma,
                                     const mpx_tensor *beta, mpx_tensor *save_mean,
                                     mpx_tensor *save_invstd, mpx_tensor *y) {
    if (!(eps >= 0 && isfinite(eps)))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be finite and >= 0", FWD, eps);
    int64_t m, c;
    MPX_TRY(ln_view(FWD, "x", x, &m, &c));
    MPX_TRY(ln_channel_vec(FWD, "gamma", gamma, c));
    MPX_TRY(ln_channel_vec(FWD, "beta", beta, c));
    MPX_TRY(ln_row_stat(FWD, "save_mean", save_mean, m));
    MPX_TRY(ln_row_stat(FWD, "save_invstd", save_invstd, m));
    MPX_TRY(ops_expect(FWD, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(FWD, "x", x, "y", y));
    const float *xd = x->data, *g = gamma->data, *bt = beta->data;
    float *yd = y->data, *sm = save_mean->data, *si = save_invstd->data;
    const double deps = eps;
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
        const float *row = xd + i * c;
        float *out = yd + i * c;
        double s = 0, v = 0;
        for (int64_t j = 0; j < c; j++) s += row[j];
        double mu = s / (double)c;
        for (int64_t j = 0; j < c; j++) {
            double d = (double)row[j] - mu;
            v += d * d;
        }
        float muf = (float)mu, isf = (float)(1.0 / sqrt(v / (double)c + deps));
        sm[i] = muf;
        si[i] = isf;
        for (int64_t j = 0; j < c; j++) out[j] = (row[j] - muf) * isf * g[j] + bt[j];
    }
    return MPX_OK;
}

/* With xhat = (x - mean) * invstd, y = gamma * xhat + beta and g = dy * gamma, per row:
 *   dx = invstd * (g - mean_j(g) - xhat * mean_j(g * xhat));
 * over rows: dbeta = sum dy, dgamma = sum dy * xhat. */
mpx_status mpx_layernorm_backward_cpu(const mpx_tensor *dy, const mpx_tensor *x,
                                      const mpx_tensor *gamma, const mpx_tensor *save_mean,
                                      const mpx_tensor *save_invstd, mpx_tensor *dx,
                                      mpx_tensor *dgamma, mpx_tensor *dbeta) {
    int64_t m, c;
    MPX_TRY(ln_view(BWD, "x", x, &m, &c));
    MPX_TRY(ops_expect(BWD, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dy", dy));
    MPX_TRY(ops_expect(BWD, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dx", dx));
    MPX_TRY(ln_channel_vec(BWD, "gamma", gamma, c));
    MPX_TRY(ln_row_stat(BWD, "save_mean", save_mean, m));
    MPX_TRY(ln_row_stat(BWD, "save_invstd", save_invstd, m));
    MPX_TRY(ln_channel_vec(BWD, "dgamma", dgamma, c));
    MPX_TRY(ln_channel_vec(BWD, "dbeta", dbeta, c));
    const float *dyd = dy->data, *xd = x->data, *g = gamma->data;
    const float *sm = save_mean->data, *si = save_invstd->data;
    float *dxd = dx->data, *dg = dgamma->data, *db = dbeta->data;
    int64_t rows, nchunks = ops_chunking(m, CHUNK_MIN, MAX_CHUNKS, &rows);
    double *part = malloc((size_t)(2 * nchunks * c) * sizeof *part);
    if (!part) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for partial sums", BWD);
    const double dc = (double)c;
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN && nchunks > 1)
    for (int64_t k = 0; k < nchunks; k++) {
        double *pdb = part + (2 * k) * c, *pdg = part + (2 * k + 1) * c;
        memset(pdb, 0, (size_t)c * sizeof *pdb);
        memset(pdg, 0, (size_t)c * sizeof *pdg);
        int64_t i1 = (k + 1) * rows < m ? (k + 1) * rows : m;
        for (int64_t i = k * rows; i < i1; i++) {
            const float *drow = dyd + i * c, *xrow = xd + i * c;
            float *out = dxd + i * c;
            const float mu = sm[i], is = si[i];
            double sg = 0, sgx = 0;
            for (int64_t j = 0; j < c; j++) {
                float xhat = (xrow[j] - mu) * is, gj = drow[j] * g[j];
                sg += gj;
                sgx += (double)gj * xhat;
                pdb[j] += drow[j];
                pdg[j] += (double)drow[j] * xhat;
            }
            const float mg = (float)(sg / dc), mgx = (float)(sgx / dc);
            for (int64_t j = 0; j < c; j++) {
                float xhat = (xrow[j] - mu) * is;
                out[j] = is * (drow[j] * g[j] - mg - xhat * mgx);
            }
        }
    }
    for (int64_t j = 0; j < c; j++) {
        double sdb = 0, sdg = 0;
        for (int64_t k = 0; k < nchunks; k++) {
            sdb += part[(2 * k) * c + j];
            sdg += part[(2 * k + 1) * c + j];
        }
        db[j] = (float)sdb;
        dg[j] = (float)sdg;
    }
    free(part);
    return MPX_OK;
}
