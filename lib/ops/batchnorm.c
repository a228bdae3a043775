/* batchnorm.c — batch normalization over the channel (last) dimension, forward and backward.
 *
 * x [..., C] is viewed as [M, C]. Statistics are FP32 values accumulated in double. Work is
 * split by blocks of 16 channels (one cache line of floats per row), and each block runs down
 * all M rows in order: every per-channel sum is then computed in the same order whatever the
 * thread count, so results are bit-identical across thread counts and runs, with no scratch
 * buffer. Training uses two passes for the variance (mean first, then centred squares), which
 * avoids the cancellation of E[x^2] - mean^2.
 */
#include <math.h>

#include "mpx/ops.h"
#include "ops_internal.h"

enum { CB = 16 };

static const char *const FWD = "batchnorm forward";
static const char *const BWD = "batchnorm backward";

/* x is F32 with >= 2 dims; *m, *c get the [M, C] view. */
static mpx_status bn_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m,
                          int64_t *c) {
    MPX_TRY(ops_expect(op, name, x, MPX_F32, -1));
    if (x->ndim < 2)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dim, expected [..., C] with >= 2 dims", op,
                        name, x->ndim);
    *c = x->shape[x->ndim - 1];
    *m = mpx_tensor_numel(x) / *c;
    return MPX_OK;
}

static mpx_status bn_channel_vec(const char *op, const char *name, const mpx_tensor *t,
                                 int64_t c) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, 1));
    return ops_expect_dim(op, name, t, 0, c, "C, the last dim of x");
}

mpx_status mpx_batchnorm_forward_cpu(const mpx_batchnorm_attr *a, const mpx_tensor *x,
                                     const mpx_tensor *gamma, const mpx_tensor *beta,
                                     mpx_tensor *running_mean, mpx_tensor *running_var,
                                     mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                     mpx_tensor *y) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", FWD);
    if (!(a->eps >= 0 && isfinite(a->eps)) || !(a->momentum >= 0 && a->momentum <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be >= 0 and momentum %g in [0, 1]", FWD,
                        a->eps, a->momentum);
    int64_t m, c;
    MPX_TRY(bn_view(FWD, "x", x, &m, &c));
    MPX_TRY(bn_channel_vec(FWD, "gamma", gamma, c));
    MPX_TRY(bn_channel_vec(FWD, "beta", beta, c));
    MPX_TRY(bn_channel_vec(FWD, "running_mean", running_mean, c));
    MPX_TRY(bn_channel_vec(FWD, "running_var", running_var, c));
    MPX_TRY(ops_expect(FWD, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(FWD, "x", x, "y", y));
    if (a->training) {
        MPX_TRY(bn_channel_vec(FWD, "save_mean", save_mean, c));
        MPX_TRY(bn_channel_vec(FWD, "save_invstd", save_invstd, c));
        if (m < 2)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: training needs more than one value per channel (x has %lld rows "
                            "of C = %lld): the unbiased running variance is undefined",
                            FWD, (long long)m, (long long)c);
    }
    const float *xd = x->data, *g = gamma->data, *bt = beta->data;
    float *yd = y->data, *rm = running_mean->data, *rv = running_var->data;
    float *sm = a->training ? save_mean->data : NULL, *si = a->training ? save_invstd->data : NULL;
    const int training = a->training;
    const double eps = a->eps, mom = a->momentum;
    int64_t nblocks = (c + CB - 1) / CB;

#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t c0 = blk * CB, nc = c0 + CB < c ? CB : c - c0;
        float mean[CB], scale[CB];
        if (training) {
            double s[CB] = {0}, s2[CB] = {0};
            for (int64_t i = 0; i < m; i++) {
                const float *row = xd + i * c + c0;
                for (int64_t j = 0; j < nc; j++) s[j] += row[j];
            }
            for (int64_t j = 0; j < nc; j++) s[j] /= (double)m;
            for (int64_t i = 0; i < m; i++) {
                const float *row = xd + i * c + c0;
                for (int64_t j = 0; j < nc; j++) {
                    double d = row[j] - s[j];
                    s2[j] += d * d;
                }
            }
            for (int64_t j = 0; j < nc; j++) {
                double var = s2[j] / (double)m, invstd = 1.0 / sqrt(var + eps);
                mean[j] = sm[c0 + j] = (float)s[j];
                si[c0 + j] = (float)invstd;
                scale[j] = (float)(invstd * g[c0 + j]);
                rm[c0 + j] = (float)((1.0 - mom) * rm[c0 + j] + mom * s[j]);
                rv[c0 + j] = (float)((1.0 - mom) * rv[c0 + j] + mom * var * m / (double)(m - 1));
            }
        } else {
            for (int64_t j = 0; j < nc; j++) {
                mean[j] = rm[c0 + j];
                scale[j] = (float)(g[c0 + j] / sqrt((double)rv[c0 + j] + eps));
            }
        }
        for (int64_t i = 0; i < m; i++) {
            const float *row = xd + i * c + c0;
            float *out = yd + i * c + c0;
            for (int64_t j = 0; j < nc; j++) out[j] = (row[j] - mean[j]) * scale[j] + bt[c0 + j];
        }
    }
    return MPX_OK;
}

/* With xhat = (x - mean) * invstd and y = gamma * xhat + beta:
 *   dbeta = sum_rows dy,  dgamma = sum_rows dy * xhat,
 *   dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M). */
mpx_status mpx_batchnorm_backward_cpu(const mpx_batchnorm_attr *a, const mpx_tensor *dy,
                                      const mpx_tensor *x, const mpx_tensor *gamma,
                                      const mpx_tensor *save_mean, const mpx_tensor *save_invstd,
                                      mpx_tensor *dx, mpx_tensor *dgamma, mpx_tensor *dbeta) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", BWD);
    if (!a->training)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "%s: only training mode has a backward (attr.training is 0)", BWD);
    int64_t m, c;
    MPX_TRY(bn_view(BWD, "x", x, &m, &c));
    MPX_TRY(ops_expect(BWD, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dy", dy));
    MPX_TRY(ops_expect(BWD, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dx", dx));
    MPX_TRY(bn_channel_vec(BWD, "gamma", gamma, c));
    MPX_TRY(bn_channel_vec(BWD, "save_mean", save_mean, c));
    MPX_TRY(bn_channel_vec(BWD, "save_invstd", save_invstd, c));
    MPX_TRY(bn_channel_vec(BWD, "dgamma", dgamma, c));
    MPX_TRY(bn_channel_vec(BWD, "dbeta", dbeta, c));
    const float *dyd = dy->data, *xd = x->data, *g = gamma->data;
    const float *sm = save_mean->data, *si = save_invstd->data;
    float *dxd = dx->data, *dg = dgamma->data, *db = dbeta->data;
    int64_t nblocks = (c + CB - 1) / CB;

#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t c0 = blk * CB, nc = c0 + CB < c ? CB : c - c0;
        double sdy[CB] = {0}, sdyx[CB] = {0};
        for (int64_t i = 0; i < m; i++) {
            const float *drow = dyd + i * c + c0, *xrow = xd + i * c + c0;
            for (int64_t j = 0; j < nc; j++) {
                sdy[j] += drow[j];
                sdyx[j] += (double)drow[j] * (((double)xrow[j] - sm[c0 + j]) * si[c0 + j]);
            }
        }
        float mean[CB], invstd[CB], k[CB], mdb[CB], mdg[CB];
        for (int64_t j = 0; j < nc; j++) {
            db[c0 + j] = (float)sdy[j];
            dg[c0 + j] = (float)sdyx[j];
            mean[j] = sm[c0 + j];
            invstd[j] = si[c0 + j];
            k[j] = g[c0 + j] * si[c0 + j];
            mdb[j] = (float)(sdy[j] / (double)m);
            mdg[j] = (float)(sdyx[j] / (double)m);
        }
        for (int64_t i = 0; i < m; i++) {
            const float *drow = dyd + i * c + c0, *xrow = xd + i * c + c0;
            float *out = dxd + i * c + c0;
            for (int64_t j = 0; j < nc; j++) {
                float xhat = (xrow[j] - mean[j]) * invstd[j];
                out[j] = k[j] * (drow[j] - mdb[j] - xhat * mdg[j]);
            }
        }
    }
    return MPX_OK;
}
