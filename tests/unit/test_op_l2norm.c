/* test_op_l2norm.c — L2 normalization (SSD's conv4_3 L2Norm) forward against a double
 * reference, backward against central finite differences in double, determinism across thread
 * counts, and the error paths.
 *
 * FP32 tolerances, u = 2^-24, with xhat = x inv and g = dy * gamma; the op's double sums carry
 * ~C 2^-53 relative error: negligible.
 *  - save_inv: one rounding of a double value: 2u relative.
 *  - y = (x * inv_f) * gamma: inv_f (u) and two products (u each): |err| <= 4u |x inv gamma|.
 *  - dx = inv (g - xhat s) with s = sum_j g xhat: g rounded (u |g|), xhat off by 2u, s off by
 *    3u G (G = sum_j |g xhat|) plus its rounding, the product xhat s, the subtraction and the
 *    product by inv_f (u of the magnitudes each): |err| <= 12u inv (|g| + |xhat| G).
 *  - dgamma = sum_rows dy * xhat (double, one final rounding): 4u sum |dy xhat| + 2u |dgamma|.
 * Finite differences, central, in double: y is linear in gamma (step 0.5, no truncation error).
 * For x the step is h = 1e-4 / inv of the row (scale-free: the k-th derivative of x / |x|
 * scales with inv^k), so truncation h^2 |third derivative| / 6 is ~2e-9 inv |r g|, under 1e-2
 * of the dx tolerance. Rounding of the two objective values, n 2^-53 sum |r y| / h for n terms,
 * is added to every tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;
static const double E53 = 1.0 / 9007199254740992.0;

/* Double reference of rows [i0, i1): y = x / sqrt(sum x^2 + eps) * g. */
static void ref_l2(const double *x, const double *g, int64_t i0, int64_t i1, int64_t c,
                   double eps, double *y, double *inv_out) {
    for (int64_t i = i0; i < i1; i++) {
        const double *r = x + i * c;
        double s = 0;
        for (int64_t j = 0; j < c; j++) s += r[j] * r[j];
        double inv = 1 / sqrt(s + eps);
        for (int64_t j = 0; j < c; j++) y[i * c + j] = r[j] * inv * g[j];
        if (inv_out) inv_out[i] = inv;
    }
}

typedef struct {
    double *x, *g, *r, *y;
    int64_t m, c;
    double eps;
} fd_ctx;

/* sum r * y over rows [i0, i1); *abs_sum gets sum |r * y| (for the rounding estimate). */
static double objective(fd_ctx *f, int64_t i0, int64_t i1, double *abs_sum) {
    ref_l2(f->x, f->g, i0, i1, f->c, f->eps, f->y, NULL);
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

/* x of the given shape; rows get norms spread over e^-3 .. e^4 (times sqrt(C)). */
static void check_shape(int ndim, const int64_t *shape, float eps, uint64_t seed) {
    int64_t c = shape[ndim - 1], m = mpx_shape_numel(ndim, shape) / c, n = m * c;
    char tag[80];
    mpx_shape_str(ndim, shape, tag, sizeof tag);
    float *xf = falloc(n), *rf = falloc(n), *yf = falloc(n), *dxf = falloc(n);
    float *gf = falloc(c), *si = falloc(m), *dg = falloc(c), *rows = falloc(m);
    mpx_test_normal(xf, n, 0.0f, 1.0f, seed);
    mpx_test_uniform(rows, m, -3.0f, 4.0f, seed + 2);
    for (int64_t i = 0; i < n; i++) xf[i] *= expf(rows[i / c]);
    mpx_test_uniform(rf, n, -1, 1, seed + 3);
    mpx_test_uniform(gf, c, 10.0f, 30.0f, seed + 4); /* around SSD's initial 20 */

    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, xf};
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor ty = tx, tr = tx, tdx = tx;
    ty.data = yf, tr.data = rf, tdx.data = dxf;
    mpx_tensor tg = vec(gf, c), tsi = vec(si, m), tdg = vec(dg, c);

    double *x = dalloc(n), *g = dalloc(c), *r = dalloc(n), *y = dalloc(n), *inv = dalloc(m);
    for (int64_t i = 0; i < n; i++) x[i] = xf[i], r[i] = rf[i];
    for (int64_t j = 0; j < c; j++) g[j] = gf[j];
    ref_l2(x, g, 0, m, c, eps, y, inv);

    for (int64_t i = 0; i < n; i++) yf[i] = NAN;
    CHECK_OK(mpx_l2norm_forward_cpu(eps, &tx, &tg, &tsi, &ty));
    double ws = 0, wy = 0;
    for (int64_t i = 0; i < m; i++) {
        upd(&ws, fabs(si[i] - inv[i]) / (2 * U * inv[i]));
        for (int64_t j = 0; j < c; j++) {
            int64_t k = i * c + j;
            upd(&wy, fabs(yf[k] - y[k]) / (4 * U * fabs(x[k] * inv[i] * g[j]) + 1e-300));
        }
    }
    CHECK(ws <= 1, "%s: saved inverse norm error %.3g x tolerance", tag, ws);
    CHECK(wy <= 1, "%s: forward error %.3g x tolerance", tag, wy);

    /* Backward against finite differences. */
    fd_ctx f = {x, g, r, dalloc(n), m, c, eps};
    for (int64_t i = 0; i < n; i++) dxf[i] = NAN;
    for (int64_t j = 0; j < c; j++) dg[j] = NAN;
    CHECK_OK(mpx_l2norm_backward_cpu(&tr, &tx, &tg, &tsi, &tdx, &tdg));
    double wdx = 0, wdg = 0;
    double *sabs_dg = dalloc(c);
    for (int64_t i = 0; i < m; i++) {
        double is = inv[i], G = 0;
        for (int64_t j = 0; j < c; j++) {
            int64_t k = i * c + j;
            G += fabs(r[k] * g[j] * x[k] * is);
            sabs_dg[j] += fabs(r[k] * x[k] * is);
        }
        for (int64_t j = 0; j < c; j++) {
            int64_t k = i * c + j;
            double err, gd = fd_one(&f, x, k, 1e-4 / is, i, i + 1, &err);
            double tol = 12 * U * is * (fabs(r[k] * g[j]) + fabs(x[k] * is) * G) + err;
            upd(&wdx, fabs(dxf[k] - gd) / tol);
        }
    }
    for (int64_t j = 0; j < c; j++) {
        double err_g, gg = fd_one(&f, g, j, 0.5, 0, m, &err_g);
        upd(&wdg, fabs(dg[j] - gg) / (4 * U * sabs_dg[j] + 2 * U * fabs(gg) + err_g));
    }
    CHECK(wdx <= 1, "%s: dx vs finite differences %.3g x tolerance", tag, wdx);
    CHECK(wdg <= 1, "%s: dgamma vs finite differences %.3g x tolerance", tag, wdg);

    /* Same bits with 1 and 2 threads. */
    float *y1 = falloc(n), *dx1 = falloc(n), *dg1 = falloc(c), *si1 = falloc(m);
    mpx_tensor ty1 = ty, tdx1 = tdx, tdg1 = tdg, tsi1 = tsi;
    ty1.data = y1, tdx1.data = dx1, tdg1.data = dg1, tsi1.data = si1;
    mpx_threads_set(1);
    CHECK_OK(mpx_l2norm_forward_cpu(eps, &tx, &tg, &tsi1, &ty1));
    CHECK_OK(mpx_l2norm_backward_cpu(&tr, &tx, &tg, &tsi1, &tdx1, &tdg1));
    mpx_threads_set(2);
    CHECK(!memcmp(y1, yf, n * sizeof(float)) && !memcmp(dx1, dxf, n * sizeof(float)) &&
              !memcmp(dg1, dg, c * sizeof(float)) && !memcmp(si1, si, m * sizeof(float)),
          "%s: results differ between 1 and 2 threads", tag);

    free(xf), free(rf), free(yf), free(dxf), free(gf), free(si), free(dg), free(rows), free(x);
    free(g), free(r), free(y), free(inv), free(f.y), free(sabs_dg), free(y1), free(dx1);
    free(dg1), free(si1);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float xb[24], yb[24], v[2][4], st[6];
    for (int i = 0; i < 24; i++) xb[i] = (float)(i % 5) - 2.0f;
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 2, {6, 4}, xb}, y = x;
    y.data = yb;
    mpx_tensor g = vec(v[0], 4), dg = vec(v[1], 4), si = vec(st, 6);
    CHECK_OK(mpx_l2norm_forward_cpu(1e-10f, &x, &g, &si, &y));
    CHECK_OK(mpx_l2norm_backward_cpu(&y, &x, &g, &si, &x, &dg));
    mpx_tensor t = g;
    t.shape[0] = 3;
    expect_input_error(mpx_l2norm_forward_cpu(1e-10f, &x, &t, &si, &y),
                       "gamma has shape [3], dim 0 must be 4", "short gamma");
    expect_input_error(mpx_l2norm_backward_cpu(&y, &x, &g, &si, &x, &t), "dgamma has shape [3]",
                       "short dgamma");
    t = si;
    t.shape[0] = 4;
    expect_input_error(mpx_l2norm_forward_cpu(1e-10f, &x, &g, &t, &y),
                       "save_inv has shape [4], expected 6 elements", "short save_inv");
    t = x;
    t.dtype = MPX_F16;
    expect_input_error(mpx_l2norm_forward_cpu(1e-10f, &t, &g, &si, &y), "x has dtype f16",
                       "f16 x");
    t = y;
    t.shape[0] = 3, t.shape[1] = 8;
    expect_input_error(mpx_l2norm_backward_cpu(&y, &x, &g, &si, &t, &dg), "dx has shape [3,8]",
                       "dx of another shape");
    expect_input_error(mpx_l2norm_forward_cpu(0.0f, &x, &g, &si, &y), "eps", "zero eps");
    /* An all-zero row: inv = 1/sqrt(eps), y = 0. */
    for (int i = 0; i < 4; i++) xb[i] = 0.0f, v[0][i] = 2.0f, yb[i] = 1.0f;
    CHECK_OK(mpx_l2norm_forward_cpu(1e-10f, &x, &g, &si, &y));
    CHECK(yb[0] == 0.0f && yb[3] == 0.0f && isfinite(st[0]), "zero row: y = %g, %g, inv %g",
          yb[0], yb[3], st[0]);
}

int main(void) {
    mpx_threads_set(2);
    static const int64_t s1[] = {4, 7}, s2[] = {2, 3, 33}, s3[] = {5, 1}, s4[] = {9},
                         s5[] = {2, 8, 8, 64}, s6[] = {2, 64, 256};
    check_shape(2, s1, 1e-10f, 10);
    check_shape(3, s2, 1e-10f, 20);
    check_shape(2, s3, 1e-10f, 30); /* C = 1: y = sign(x) gamma, dx ~ 0 */
    check_shape(1, s4, 1e-10f, 40); /* one row */
    check_shape(4, s5, 1e-10f, 50); /* an SSD stride-8 map: 64 channels per position */
    /* M * C = 32768 >= the OpenMP threshold and M = 128 rows: four row chunks. */
    check_shape(3, s6, 1e-10f, 60);
    check_errors();
    return mpx_test_done(__FILE__);
}
