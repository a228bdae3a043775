/* test_op_layernorm.c — layer-norm forward against a double reference, backward against central
 * finite differences in double, determinism across thread counts, and the error paths.
 *
 * FP32 tolerances, u = 2^-24, per element with A = |xhat| + |mean| * invstd (xhat in FP32
 * carries the rounding of x - mean and of the mean itself) and g = dy * gamma. The double
 * sums of the op carry ~C 2^-53 relative error: negligible.
 *  - save_mean: one rounding, plus the double sum's 2^-53 sum|x|: u |mean| + C 2^-52 mean|x|.
 *    save_invstd: one rounding of a double value: 2u relative.
 *  - y = (x - mean_f) * invstd_f * gamma + beta: x - mean_f is off by u (|x - mean| + |mean|),
 *    then invstd_f (u), two products and the sum (u each):
 *    |err| <= 8u ((|x - mean| + |mean|) invstd |gamma| + |beta|).
 *  - dx = invstd (g - mean_j g - xhat mean_j(g xhat)): g rounded (u |g|), the two row means
 *    (2u mean|g| and, with xhat off by 3u A, 5u G where G = mean_j |g| A), the product
 *    xhat * mean(g xhat) (9u A G), two subtractions and the product by invstd_f (3u of the
 *    magnitudes): |err| <= 12u invstd (|g| + mean_j |g| + A G).
 *  - dgamma = sum_rows dy * xhat (double, one final rounding): 4u sum |dy| A + 2u |dgamma|;
 *    dbeta = sum_rows dy: 2u |dbeta|.
 * Finite differences, central, in double: y is linear in gamma and beta (step 0.5, no
 * truncation error). For x the step is h = 1e-4 / invstd of the row (scale-free): the third
 * derivative of the row objective is ~invstd^3 |r g| / C, so truncation h^2 |f'''| / 6 is
 * ~2e-9 invstd |r g| / C, under 1e-2 of the dx tolerance. Rounding of the two objective values,
 * n 2^-53 sum |r y| / h for n terms, is added to every tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;
static const double E53 = 1.0 / 9007199254740992.0;

/* Double reference of rows [i0, i1): y = (x - mean) / sqrt(var + eps) * g + b. */
static void ref_ln(const double *x, const double *g, const double *b, int64_t i0, int64_t i1,
                   int64_t c, double eps, double *y, double *mean_out, double *inv_out) {
    for (int64_t i = i0; i < i1; i++) {
        const double *r = x + i * c;
        double s = 0, v = 0;
        for (int64_t j = 0; j < c; j++) s += r[j];
        double mean = s / c;
        for (int64_t j = 0; j < c; j++) v += (r[j] - mean) * (r[j] - mean);
        double inv = 1 / sqrt(v / c + eps);
        for (int64_t j = 0; j < c; j++) y[i * c + j] = (r[j] - mean) * inv * g[j] + b[j];
        if (mean_out) mean_out[i] = mean;
        if (inv_out) inv_out[i] = inv;
    }
}

typedef struct {
    double *x, *g, *b, *r, *y;
    int64_t m, c;
    double eps;
} fd_ctx;

/* sum r * y over rows [i0, i1); *abs_sum gets sum |r * y| (for the rounding estimate). */
static double objective(fd_ctx *f, int64_t i0, int64_t i1, double *abs_sum) {
    ref_ln(f->x, f->g, f->b, i0, i1, f->c, f->eps, f->y, NULL, NULL);
    double s = 0, a = 0;
    for (int64_t i = i0 * f->c; i < i1 * f->c; i++)
        s += f->r[i] * f->y[i], a += fabs(f->r[i] * f->y[i]);
    *abs_sum = a;
    return s;
}

/* Central difference of the objective over rows [i0, i1) in v[idx]; *err: rounding estimate. */
static double fd_one(fd_ctx *f, double *v, int64_t idx, double h, int64_t i0, int64_t i1,
                     double *err) {
    double save = v[idx], a1, a2;
    v[idx] = save + h;
    double fp = objective(f, i0, i1, &a1);
    v[idx] = save - h;
    double fm = objective(f, i0, i1, &a2);
    v[idx] = save;
    *err = 4.0 * (double)((i1 - i0) * f->c) * E53 * (a1 + a2) / (2 * h);
    return (fp - fm) / (2 * h);
}

static float *falloc(size_t n) { return calloc(n, sizeof(float)); }
static double *dalloc(size_t n) { return calloc(n, sizeof(double)); }

static mpx_tensor vec(float *p, int64_t c) {
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 1, {c}, p};
    return t;
}

static void upd(double *worst, double e) {
    if (!(e <= *worst)) *worst = e; /* NaN sticks */
}

/* x of the given shape; rows get means in [-mean_spread, mean_spread] and stds in [0.2, 3]. */
static void check_shape(int ndim, const int64_t *shape, float eps, float mean_spread,
                        uint64_t seed) {
    int64_t c = shape[ndim - 1], m = mpx_shape_numel(ndim, shape) / c, n = m * c;
    char tag[80];
    mpx_shape_str(ndim, shape, tag, sizeof tag);
    float *xf = falloc(n), *rf = falloc(n), *yf = falloc(n), *dxf = falloc(n);
    float *gf = falloc(c), *bf = falloc(c), *sm = falloc(m), *si = falloc(m);
    float *dg = falloc(c), *db = falloc(c), *rowm = falloc(m), *rows = falloc(m);
    mpx_test_normal(xf, n, 0.0f, 1.0f, seed);
    mpx_test_uniform(rowm, m, -mean_spread, mean_spread, seed + 1);
    mpx_test_uniform(rows, m, 0.2f, 3.0f, seed + 2);
    for (int64_t i = 0; i < n; i++) xf[i] = rowm[i / c] + rows[i / c] * xf[i];
    mpx_test_uniform(rf, n, -1, 1, seed + 3);
    mpx_test_uniform(gf, c, 0.5f, 1.5f, seed + 4);
    mpx_test_uniform(bf, c, -1, 1, seed + 5);

    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, xf};
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor ty = tx, tr = tx, tdx = tx;
    ty.data = yf, tr.data = rf, tdx.data = dxf;
    /* The saved statistics as [M] here; the leading-dims shape is exercised below. */
    mpx_tensor tg = vec(gf, c), tb = vec(bf, c), tsm = vec(sm, m), tsi = vec(si, m);
    mpx_tensor tdg = vec(dg, c), tdb = vec(db, c);

    double *x = dalloc(n), *g = dalloc(c), *b = dalloc(c), *r = dalloc(n), *y = dalloc(n);
    double *mean = dalloc(m), *inv = dalloc(m);
    for (int64_t i = 0; i < n; i++) x[i] = xf[i], r[i] = rf[i];
    for (int64_t j = 0; j < c; j++) g[j] = gf[j], b[j] = bf[j];
    ref_ln(x, g, b, 0, m, c, eps, y, mean, inv);

    for (int64_t i = 0; i < n; i++) yf[i] = NAN;
    CHECK_OK(mpx_layernorm_forward_cpu(eps, &tx, &tg, &tb, &tsm, &tsi, &ty));
    double ws = 0, wy = 0;
    for (int64_t i = 0; i < m; i++) {
        double mabs = 0;
        for (int64_t j = 0; j < c; j++) mabs += fabs(x[i * c + j]) / c;
        upd(&ws, fabs(sm[i] - mean[i]) / (U * fabs(mean[i]) + c * 2 * E53 * mabs + 1e-300));
        upd(&ws, fabs(si[i] - inv[i]) / (2 * U * inv[i]));
        for (int64_t j = 0; j < c; j++) {
            int64_t k = i * c + j;
            double tol =
                8 * U * ((fabs(x[k] - mean[i]) + fabs(mean[i])) * inv[i] * fabs(g[j]) + fabs(b[j]));
            upd(&wy, fabs(yf[k] - y[k]) / tol);
        }
    }
    CHECK(ws <= 1, "%s: saved statistics error %.3g x tolerance", tag, ws);
    CHECK(wy <= 1, "%s: forward error %.3g x tolerance", tag, wy);

    /* Backward against finite differences. */
    fd_ctx f = {x, g, b, r, dalloc(n), m, c, eps};
    for (int64_t i = 0; i < n; i++) dxf[i] = NAN;
    for (int64_t j = 0; j < c; j++) dg[j] = db[j] = NAN;
    CHECK_OK(mpx_layernorm_backward_cpu(&tr, &tx, &tg, &tsm, &tsi, &tdx, &tdg, &tdb));
    double wdx = 0, wdg = 0, wdb = 0;
    double *sabs_dg = dalloc(c);
    for (int64_t i = 0; i < m; i++) {
        double is = inv[i], mg = 0, G = 0;
        for (int64_t j = 0; j < c; j++) {
            int64_t k = i * c + j;
            double gk = fabs(r[k] * g[j]), a = fabs((x[k] - mean[i]) * is) + fabs(mean[i]) * is;
            mg += gk / c;
            G += gk * a / c;
            sabs_dg[j] += fabs(r[k]) * a;
        }
        for (int64_t j = 0; j < c; j++) {
            int64_t k = i * c + j;
            double err, gd = fd_one(&f, x, k, 1e-4 / is, i, i + 1, &err);
            double a = fabs((x[k] - mean[i]) * is) + fabs(mean[i]) * is;
            double tol = 12 * U * is * (fabs(r[k] * g[j]) + mg + a * G) + err;
            upd(&wdx, fabs(dxf[k] - gd) / tol);
        }
    }
    for (int64_t j = 0; j < c; j++) {
        double err_g, err_b;
        double gg = fd_one(&f, g, j, 0.5, 0, m, &err_g), gb = fd_one(&f, b, j, 0.5, 0, m, &err_b);
        upd(&wdg, fabs(dg[j] - gg) / (4 * U * sabs_dg[j] + 2 * U * fabs(gg) + err_g));
        upd(&wdb, fabs(db[j] - gb) / (2 * U * fabs(gb) + err_b));
    }
    CHECK(wdx <= 1, "%s: dx vs finite differences %.3g x tolerance", tag, wdx);
    CHECK(wdg <= 1, "%s: dgamma vs finite differences %.3g x tolerance", tag, wdg);
    CHECK(wdb <= 1, "%s: dbeta vs finite differences %.3g x tolerance", tag, wdb);

    /* Same bits with 1 and 2 threads; saved statistics shaped like the leading dims of x. */
    float *y1 = falloc(n), *dx1 = falloc(n), *dg1 = falloc(c), *db1 = falloc(c);
    float *sm1 = falloc(m), *si1 = falloc(m);
    mpx_tensor ty1 = ty, tdx1 = tdx, tdg1 = tdg, tdb1 = tdb, tsm1 = tx, tsi1 = tx;
    ty1.data = y1, tdx1.data = dx1, tdg1.data = dg1, tdb1.data = db1;
    tsm1.ndim = tsi1.ndim = ndim > 1 ? ndim - 1 : 1;
    if (ndim == 1) tsm1.shape[0] = tsi1.shape[0] = 1;
    tsm1.data = sm1, tsi1.data = si1;
    mpx_threads_set(1);
    CHECK_OK(mpx_layernorm_forward_cpu(eps, &tx, &tg, &tb, &tsm1, &tsi1, &ty1));
    CHECK_OK(mpx_layernorm_backward_cpu(&tr, &tx, &tg, &tsm1, &tsi1, &tdx1, &tdg1, &tdb1));
    mpx_threads_set(2);
    CHECK(!memcmp(y1, yf, n * sizeof(float)) && !memcmp(dx1, dxf, n * sizeof(float)) &&
              !memcmp(dg1, dg, c * sizeof(float)) && !memcmp(db1, db, c * sizeof(float)) &&
              !memcmp(sm1, sm, m * sizeof(float)) && !memcmp(si1, si, m * sizeof(float)),
          "%s: results differ between 1 and 2 threads", tag);

    free(xf), free(rf), free(yf), free(dxf), free(gf), free(bf), free(sm), free(si), free(dg);
    free(db), free(rowm), free(rows), free(x), free(g), free(b), free(r), free(y), free(mean);
    free(inv), free(f.y), free(sabs_dg), free(y1), free(dx1), free(dg1), free(db1), free(sm1);
    free(si1);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float xb[24], yb[24], v[4][4], st[2][6];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 2, {6, 4}, xb}, y = x;
    y.data = yb;
    mpx_tensor g = vec(v[0], 4), b = vec(v[1], 4), dg = vec(v[2], 4), db = vec(v[3], 4);
    mpx_tensor sm = vec(st[0], 6), si = vec(st[1], 6);
    CHECK_OK(mpx_layernorm_forward_cpu(1e-5f, &x, &g, &b, &sm, &si, &y));
    CHECK_OK(mpx_layernorm_backward_cpu(&y, &x, &g, &sm, &si, &x, &dg, &db));
    mpx_tensor t = g;
    t.shape[0] = 3;
    expect_input_error(mpx_layernorm_forward_cpu(1e-5f, &x, &t, &b, &sm, &si, &y),
                       "gamma has shape [3], dim 0 must be 4", "short gamma");
    expect_input_error(mpx_layernorm_backward_cpu(&y, &x, &g, &sm, &si, &x, &dg, &t),
                       "dbeta has shape [3]", "short dbeta");
    t = sm;
    t.shape[0] = 4;
    expect_input_error(mpx_layernorm_forward_cpu(1e-5f, &x, &g, &b, &t, &si, &y),
                       "save_mean has shape [4], expected 6 elements", "short save_mean");
    expect_input_error(mpx_layernorm_backward_cpu(&y, &x, &g, &sm, &t, &x, &dg, &db),
                       "save_invstd has shape [4], expected 6 elements", "short save_invstd");
    t = x;
    t.dtype = MPX_F16;
    expect_input_error(mpx_layernorm_forward_cpu(1e-5f, &t, &g, &b, &sm, &si, &y),
                       "x has dtype f16", "f16 x");
    t = y;
    t.shape[0] = 3, t.shape[1] = 8;
    expect_input_error(mpx_layernorm_forward_cpu(1e-5f, &x, &g, &b, &sm, &si, &t),
                       "y has shape [3,8]", "y of another shape");
    expect_input_error(mpx_layernorm_backward_cpu(&y, &x, &g, &sm, &si, &t, &dg, &db),
                       "dx has shape [3,8]", "dx of another shape");
    expect_input_error(mpx_layernorm_backward_cpu(&t, &x, &g, &sm, &si, &x, &dg, &db),
                       "dy has shape [3,8]", "dy of another shape");
    expect_input_error(mpx_layernorm_forward_cpu(-1e-5f, &x, &g, &b, &sm, &si, &y), "eps",
                       "negative eps");
    expect_input_error(mpx_layernorm_forward_cpu(1e-5f, &x, &g, &b, NULL, &si, &y),
                       "save_mean is NULL", "no save_mean");
}

int main(void) {
    mpx_threads_set(2);
    static const int64_t s1[] = {4, 7}, s2[] = {2, 3, 33}, s3[] = {5, 1}, s4[] = {9},
                         s5[] = {2, 2, 3, 16}, s6[] = {2, 64, 256};
    check_shape(2, s1, 1e-5f, 2, 10);
    check_shape(3, s2, 1e-12f, 50, 20); /* BERT's eps, rows far from zero mean */
    check_shape(2, s3, 1e-5f, 2, 30);   /* C = 1: xhat = 0, y = beta, dx = 0 */
    check_shape(1, s4, 1e-5f, 2, 40);   /* one row */
    check_shape(4, s5, 1e-5f, 5, 50);
    /* M * C = 32768 >= the OpenMP threshold and M = 128 rows: four row chunks. */
    check_shape(3, s6, 1e-12f, 3, 60);
    check_errors();
    return mpx_test_done(__FILE__);
}
