/* test_op_batchnorm.c — batch-norm forward (training and eval) against a double reference,
 * backward against central finite differences in double, determinism across thread counts,
 * and the error paths.
 *
 * Finite differences: f(x, gamma, beta) = sum(r * bn_train(x, gamma, beta)) in double, central
 * step h = 1e-4: truncation error ~h^2 |f'''| / 6 ~ 1e-9 and rounding ~1e-16 |f| / h ~ 1e-11,
 * far below the FP32 tolerances below (~1e-7 relative).
 *
 * FP32 tolerances, u = 2^-24, from counting roundings (the statistics are double sums, whose
 * own error is ~1e-16 relative and negligible):
 *  - save_mean, save_invstd, running stats: one rounding of a double value: 2u relative.
 *  - y = (x - mean) * scale + beta: mean and scale rounded (u, 2u), subtraction, product and
 *    sum (u each): |err| <= 8u * ((|x| + |mean|) * |scale| + |beta|).
 *  - dx = k (dy - dbeta/M - xhat dgamma/M), k = gamma invstd: xhat in FP32 carries ~4u
 *    (|x| + |mean|) invstd, k, dbeta/M, dgamma/M one rounding each, three operations:
 *    |err| <= 12u * |k| * (|dy| + |dbeta/M| + (|xhat| + |mean| invstd) |dgamma/M|).
 *  - dgamma = sum dy * xhat in double with the FP32 mean/invstd of the forward: relative
 *    error of each xhat <= 2u (|xhat| + |mean| invstd): |err| <= 4u * sum |dy| (|xhat| +
 *    |mean| invstd) + u |dgamma|; dbeta = rounded double sum: 2u |dbeta|.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

/* Double reference forward in training mode; mean/var out (biased var) when non-NULL. */
static void ref_bn(const double *x, const double *g, const double *b, int64_t m, int64_t c,
                   double eps, double *y, double *mean_out, double *var_out) {
    for (int64_t j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < m; i++) s += x[i * c + j];
        double mean = s / m;
        for (int64_t i = 0; i < m; i++) s2 += (x[i * c + j] - mean) * (x[i * c + j] - mean);
        double var = s2 / m, inv = 1 / sqrt(var + eps);
        for (int64_t i = 0; i < m; i++) y[i * c + j] = (x[i * c + j] - mean) * inv * g[j] + b[j];
        if (mean_out) mean_out[j] = mean;
        if (var_out) var_out[j] = var;
    }
}

typedef struct {
    double *x, *g, *b, *r, *y;
    int64_t m, c;
    double eps;
} fd_ctx;

static double objective(fd_ctx *f) {
    ref_bn(f->x, f->g, f->b, f->m, f->c, f->eps, f->y, NULL, NULL);
    double s = 0;
    for (int64_t i = 0; i < f->m * f->c; i++) s += f->r[i] * f->y[i];
    return s;
}

/* Central differences for every `every`-th element of v (the rest NaN: not checked). */
static void fd_grad(fd_ctx *f, double *v, int64_t n, int64_t every, double *grad) {
    const double h = 1e-4;
    for (int64_t i = 0; i < n; i++) grad[i] = NAN;
    for (int64_t i = 0; i < n; i += every) {
        double save = v[i];
        v[i] = save + h;
        double fp = objective(f);
        v[i] = save - h;
        double fm = objective(f);
        v[i] = save;
        grad[i] = (fp - fm) / (2 * h);
    }
}

static float *falloc(size_t n) { return calloc(n, sizeof(float)); }
static double *dalloc(size_t n) { return calloc(n, sizeof(double)); }

static mpx_tensor vec(float *p, int64_t c) {
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 1, {c}, p};
    return t;
}

/* every: finite differences on every every-th element of x (1 = all). */
static void check_shape(int ndim, const int64_t *shape, int64_t every, uint64_t seed) {
    int64_t c = shape[ndim - 1], m = mpx_shape_numel(ndim, shape) / c, n = m * c;
    const float eps = 1e-5f, mom = 0.1f;
    char tag[64];
    mpx_shape_str(ndim, shape, tag, sizeof tag);
    float *xf = falloc(n), *rf = falloc(n), *yf = falloc(n), *dxf = falloc(n);
    float *gf = falloc(c), *bf = falloc(c), *rm = falloc(c), *rv = falloc(c), *sm = falloc(c);
    float *si = falloc(c), *dg = falloc(c), *db = falloc(c);
    /* Non-zero means and varied scales, so that centring matters. */
    mpx_test_normal(xf, n, 3.0f, 2.0f, seed);
    for (int64_t i = 0; i < n; i++) xf[i] *= 1.0f + (float)(i % c) / (float)c;
    mpx_test_uniform(rf, n, -1, 1, seed + 1);
    mpx_test_uniform(gf, c, 0.5f, 1.5f, seed + 2);
    mpx_test_uniform(bf, c, -1, 1, seed + 3);
    mpx_test_uniform(rm, c, -1, 1, seed + 4);
    mpx_test_uniform(rv, c, 0.5f, 2, seed + 5);
    float *rm0 = falloc(c), *rv0 = falloc(c);
    memcpy(rm0, rm, c * sizeof(float));
    memcpy(rv0, rv, c * sizeof(float));

    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, xf}, ty = tx, tr = tx, tdx = tx;
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    ty = tx, tr = tx, tdx = tx;
    ty.data = yf, tr.data = rf, tdx.data = dxf;
    mpx_tensor tg = vec(gf, c), tb = vec(bf, c), trm = vec(rm, c), trv = vec(rv, c);
    mpx_tensor tsm = vec(sm, c), tsi = vec(si, c), tdg = vec(dg, c), tdb = vec(db, c);
    mpx_batchnorm_attr at = {eps, mom, 1, 0, 0, MPX_F32, NULL, NULL, 0};

    double *x = dalloc(n), *g = dalloc(c), *b = dalloc(c), *r = dalloc(n), *y = dalloc(n);
    double *mean = dalloc(c), *var = dalloc(c);
    for (int64_t i = 0; i < n; i++) x[i] = xf[i], r[i] = rf[i];
    for (int64_t j = 0; j < c; j++) g[j] = gf[j], b[j] = bf[j];
    ref_bn(x, g, b, m, c, eps, y, mean, var);

    /* Training forward. */
    for (int64_t i = 0; i < n; i++) yf[i] = NAN;
    CHECK_OK(mpx_batchnorm_forward_cpu(&at, &tx, &tg, &tb, &trm, &trv, &tsm, &tsi, &ty));
    double worst = 0;
    for (int64_t j = 0; j < c; j++) {
        double inv = 1 / sqrt(var[j] + eps);
        double e = fabs(sm[j] - mean[j]) / (2 * U * fabs(mean[j]) + 1e-30);
        e = fmax(e, fabs(si[j] - inv) / (2 * U * inv));
        double md = mom; /* the update in double, as documented */
        double erm = (1 - md) * rm0[j] + md * mean[j];
        double erv = (1 - md) * rv0[j] + md * var[j] * m / (m - 1);
        e = fmax(e, fabs(rm[j] - erm) / (2 * U * fabs(erm) + 1e-30));
        e = fmax(e, fabs(rv[j] - erv) / (2 * U * fabs(erv)));
        worst = fmax(worst, e);
    }
    CHECK(worst <= 1, "%s: saved/running statistics error %.3g x tolerance", tag, worst);
    worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i % c;
        double scale = g[j] / sqrt(var[j] + eps);
        double tol = 8 * U * ((fabs(x[i]) + fabs(mean[j])) * fabs(scale) + fabs(b[j]));
        double e = fabs(yf[i] - y[i]) / tol;
        if (!(e <= worst)) worst = e;
    }
    CHECK(worst <= 1, "%s: training forward error %.3g x tolerance", tag, worst);

    /* Backward against finite differences. */
    fd_ctx f = {x, g, b, r, dalloc(n), m, c, eps};
    double *gx = dalloc(n), *gg = dalloc(c), *gb = dalloc(c);
    fd_grad(&f, x, n, every, gx);
    fd_grad(&f, g, c, 1, gg);
    fd_grad(&f, b, c, 1, gb);
    for (int64_t i = 0; i < n; i++) dxf[i] = NAN;
    for (int64_t j = 0; j < c; j++) dg[j] = db[j] = NAN;
    CHECK_OK(mpx_batchnorm_backward_cpu(&at, &tr, &tx, &tg, NULL, &tsm, &tsi, &tdx, &tdg, &tdb));
    double wdx = 0, wdg = 0, wdb = 0;
    for (int64_t j = 0; j < c; j++) {
        double inv = si[j], k = g[j] * inv, sabs = 0;
        for (int64_t i = 0; i < m; i++) {
            double xhat = (x[i * c + j] - sm[j]) * inv;
            sabs += fabs(r[i * c + j]) * (fabs(xhat) + fabs(sm[j]) * inv);
        }
        double e = fabs(dg[j] - gg[j]) / (4 * U * sabs + U * fabs(gg[j]));
        if (!(e <= wdg)) wdg = e;
        e = fabs(db[j] - gb[j]) / (2 * U * fabs(gb[j]) + 1e-12);
        if (!(e <= wdb)) wdb = e;
        for (int64_t i = 0; i < m; i++) {
            if (isnan(gx[i * c + j])) continue;
            double xhat = (x[i * c + j] - sm[j]) * inv;
            double tol = 12 * U * fabs(k) *
                         (fabs(r[i * c + j]) + fabs(gb[j] / m) +
                          (fabs(xhat) + fabs(sm[j]) * inv) * fabs(gg[j] / m));
            e = fabs(dxf[i * c + j] - gx[i * c + j]) / tol;
            if (!(e <= wdx)) wdx = e;
        }
    }
    CHECK(wdx <= 1, "%s: dx vs finite differences %.3g x tolerance", tag, wdx);
    CHECK(wdg <= 1, "%s: dgamma vs finite differences %.3g x tolerance", tag, wdg);
    CHECK(wdb <= 1, "%s: dbeta vs finite differences %.3g x tolerance", tag, wdb);

    /* Same bits with 1 and 2 threads (fixed channel-block partition). */
    float *y1 = falloc(n), *dx1 = falloc(n), *dg1 = falloc(c);
    mpx_tensor ty1 = ty, tdx1 = tdx, tdg1 = tdg;
    ty1.data = y1, tdx1.data = dx1, tdg1.data = dg1;
    mpx_threads_set(1);
    memcpy(rm, rm0, c * sizeof(float));
    memcpy(rv, rv0, c * sizeof(float));
    CHECK_OK(mpx_batchnorm_forward_cpu(&at, &tx, &tg, &tb, &trm, &trv, &tsm, &tsi, &ty1));
    CHECK_OK(mpx_batchnorm_backward_cpu(&at, &tr, &tx, &tg, NULL, &tsm, &tsi, &tdx1, &tdg1, &tdb));
    mpx_threads_set(2);
    CHECK(!memcmp(y1, yf, n * sizeof(float)) && !memcmp(dx1, dxf, n * sizeof(float)) &&
              !memcmp(dg1, dg, c * sizeof(float)),
          "%s: results differ between 1 and 2 threads", tag);

    /* The fused ReLU (training and eval): relu.c's select on the unfused result, bit for bit. */
    for (int training = 1; training >= 0; training--) {
        mpx_batchnorm_attr fr = {eps, mom, training, 0, 0, MPX_F32, NULL, NULL, 0};
        memcpy(rm, rm0, c * sizeof(float));
        memcpy(rv, rv0, c * sizeof(float));
        CHECK_OK(mpx_batchnorm_forward_cpu(&fr, &tx, &tg, &tb, &trm, &trv, &tsm, &tsi, &ty));
        memcpy(rm, rm0, c * sizeof(float));
        memcpy(rv, rv0, c * sizeof(float));
        fr.relu = 1;
        CHECK_OK(mpx_batchnorm_forward_cpu(&fr, &tx, &tg, &tb, &trm, &trv, &tsm, &tsi, &ty1));
        int64_t bad = 0, zeroed = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = yf[i] < 0.0f ? 0.0f : yf[i];
            bad += memcmp(&y1[i], &want, sizeof want) != 0;
            zeroed += y1[i] == 0.0f;
        }
        /* (training centres every channel, so some outputs must be zeroed) */
        CHECK(bad == 0 && (zeroed > 0 || !training), "%s: batchnorm + relu (%s): %lld of %lld "
              "differ from relu of the unfused output, %lld zeroed", tag,
              training ? "training" : "eval", (long long)bad, (long long)n, (long long)zeroed);
    }
    memcpy(rm, rm0, c * sizeof(float));
    memcpy(rv, rv0, c * sizeof(float));

    /* Eval forward: running statistics, save_* untouched (NULL). */
    mpx_batchnorm_attr ev = {eps, mom, 0, 0, 0, MPX_F32, NULL, NULL, 0};
    for (int64_t i = 0; i < n; i++) yf[i] = NAN;
    CHECK_OK(mpx_batchnorm_forward_cpu(&ev, &tx, &tg, &tb, &trm, &trv, NULL, NULL, &ty));
    worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i % c;
        double scale = g[j] / sqrt((double)rv[j] + eps);
        double ref = (x[i] - rm[j]) * scale + b[j];
        double tol = 8 * U * ((fabs(x[i]) + fabs(rm[j])) * fabs(scale) + fabs(b[j]));
        double e = fabs(yf[i] - ref) / tol;
        if (!(e <= worst)) worst = e;
    }
    CHECK(worst <= 1, "%s: eval forward error %.3g x tolerance", tag, worst);

    free(xf), free(rf), free(yf), free(dxf), free(gf), free(bf), free(rm), free(rv), free(sm);
    free(si), free(dg), free(db), free(rm0), free(rv0), free(x), free(g), free(b), free(r);
    free(y), free(mean), free(var), free(f.y), free(gx), free(gg), free(gb), free(y1), free(dx1);
    free(dg1);
}

static void expect_error(mpx_status s, mpx_status want, const char *needle, const char *what) {
    const char *msg = mpx_error_message();
    CHECK(s == want && strstr(msg, needle), "%s: expected %s mentioning '%s', got %s: %s", what,
          mpx_status_name(want), needle, mpx_status_name(s), msg);
}

static void check_errors(void) {
    static float xb[24], yb[24], v[6][4];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 2, {6, 4}, xb}, y = x;
    y.data = yb;
    mpx_tensor g = vec(v[0], 4), b = vec(v[1], 4), rm = vec(v[2], 4), rv = vec(v[3], 4);
    mpx_tensor sm = vec(v[4], 4), si = vec(v[5], 4);
    mpx_batchnorm_attr at = {1e-5f, 0.1f, 1, 0, 0, MPX_F32, NULL, NULL, 0};
    CHECK_OK(mpx_batchnorm_forward_cpu(&at, &x, &g, &b, &rm, &rv, &sm, &si, &y));
    mpx_tensor t = g;
    t.shape[0] = 3;
    expect_error(mpx_batchnorm_forward_cpu(&at, &x, &t, &b, &rm, &rv, &sm, &si, &y), MPX_ERR_INPUT,
                 "gamma has shape [3]", "short gamma");
    expect_error(mpx_batchnorm_backward_cpu(&at, &y, &x, &g, NULL, &sm, &si, &x, &t, &b),
                 MPX_ERR_INPUT, "dgamma has shape [3]", "short dgamma");
    t = x;
    t.dtype = MPX_I32;
    expect_error(mpx_batchnorm_forward_cpu(&at, &t, &g, &b, &rm, &rv, &sm, &si, &y), MPX_ERR_INPUT,
                 "x has dtype i32", "i32 x");
    t = y;
    t.shape[0] = 3, t.shape[1] = 8;
    expect_error(mpx_batchnorm_forward_cpu(&at, &x, &g, &b, &rm, &rv, &sm, &si, &t), MPX_ERR_INPUT,
                 "y has shape [3,8]", "y of another shape");
    expect_error(mpx_batchnorm_forward_cpu(&at, &x, &g, &b, &rm, &rv, NULL, &si, &y), MPX_ERR_INPUT,
                 "save_mean is NULL", "training without save_mean");
    t = x;
    t.shape[0] = 1;
    expect_error(mpx_batchnorm_forward_cpu(&at, &t, &g, &b, &rm, &rv, &sm, &si, &t), MPX_ERR_INPUT,
                 "more than one value", "training on one row");
    mpx_batchnorm_attr bad = {-1, 0.1f, 1, 0, 0, MPX_F32, NULL, NULL, 0};
    expect_error(mpx_batchnorm_forward_cpu(&bad, &x, &g, &b, &rm, &rv, &sm, &si, &y), MPX_ERR_INPUT,
                 "eps", "negative eps");
    mpx_batchnorm_attr ev = {1e-5f, 0.1f, 0, 0, 0, MPX_F32, NULL, NULL, 0};
    expect_error(mpx_batchnorm_backward_cpu(&ev, &y, &x, &g, NULL, &sm, &si, &x, &g, &b),
                 MPX_ERR_UNSUPPORTED, "training", "eval-mode backward");
    t = x;
    t.ndim = 1, t.shape[0] = 24;
    expect_error(mpx_batchnorm_forward_cpu(&at, &t, &g, &b, &rm, &rv, &sm, &si, &y), MPX_ERR_INPUT,
                 "x has 1 dim", "1-d x");
}

/* relu_dy: batch-norm backward with the fused ReLU's backward inside equals, bit for bit, the
 * ReLU's backward on the stored ReLU output (the fused forward's FP32 result rounded to nearest
 * into `store`) followed by the plain backward. gamma = `gscale` puts the FP32 results around the
 * threshold of the store (2^-25 for F16, 2^-134 for BF16; 0 for F32), so that results which
 * round to 0 only in storage occur; dy has NaN and -0 in it. */
static void check_relu_dy(mpx_dtype store, float gscale, uint64_t seed) {
    enum { M = 300, C = 7 };
    const int64_t shape[2] = {M, C};
    const size_t n = (size_t)M * C;
    float *xf = falloc(n), *dyf = falloc(n), *yf = falloc(n), *dyb = falloc(n);
    float *dx1 = falloc(n), *dx2 = falloc(n), gf[C], bf[C], rm[C], rv[C], sm[C], si[C];
    float dg1[C], db1[C], dg2[C], db2[C];
    mpx_test_normal(xf, n, 0.5f, 2.0f, seed);
    mpx_test_normal(dyf, n, 0, 1, seed + 1);
    dyf[5] = NAN, dyf[9] = -0.0f;
    for (int j = 0; j < C; j++) {
        gf[j] = gscale * (float)(j + 1);
        bf[j] = gscale * (float)(j % 3) * 0.25f;
        rm[j] = 0, rv[j] = 1;
    }
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {M, C}, xf}, ty = tx, tdy = tx, tdyb = tx;
    mpx_tensor tdx1 = tx, tdx2 = tx;
    memcpy(tx.shape, shape, sizeof shape);
    ty.data = yf, tdy.data = dyf, tdyb.data = dyb, tdx1.data = dx1, tdx2.data = dx2;
    mpx_tensor tg = vec(gf, C), tb = vec(bf, C), trm = vec(rm, C), trv = vec(rv, C);
    mpx_tensor tsm = vec(sm, C), tsi = vec(si, C);
    mpx_tensor tdg1 = vec(dg1, C), tdb1 = vec(db1, C), tdg2 = vec(dg2, C), tdb2 = vec(db2, C);
    mpx_batchnorm_attr fwd = {1e-5f, 0.1f, 1, 1, 0, MPX_F32, NULL, NULL, 0};
    CHECK_OK(mpx_batchnorm_forward_cpu(&fwd, &tx, &tg, &tb, &trm, &trv, &tsm, &tsi, &ty));
    /* the ReLU's backward on its stored output, then the plain backward */
    int off = 0, tiny = 0;
    for (size_t i = 0; i < n; i++) {
        const float stored = mpx_round_to(store, yf[i]);
        dyb[i] = stored > 0.0f ? dyf[i] : 0.0f;
        off += !(stored > 0.0f);
        tiny += yf[i] > 0.0f && !(stored > 0.0f);
    }
    fwd.relu = 0;
    CHECK_OK(mpx_batchnorm_backward_cpu(&fwd, &tdyb, &tx, &tg, NULL, &tsm, &tsi, &tdx1, &tdg1,
                                        &tdb1));
    mpx_batchnorm_attr fused = fwd;
    fused.relu = 1, fused.relu_dy = 1, fused.relu_store = store;
    CHECK_OK(mpx_batchnorm_backward_cpu(&fused, &tdy, &tx, &tg, &tb, &tsm, &tsi, &tdx2, &tdg2,
                                        &tdb2));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&dx1[i], &dx2[i], sizeof(float)) != 0;
    for (int j = 0; j < C; j++)
        bad += memcmp(&dg1[j], &dg2[j], sizeof(float)) != 0 || memcmp(&db1[j], &db2[j], 4) != 0;
    printf("relu_dy %s: %d of %zu masked, %d of them positive in FP32\n", mpx_dtype_name(store),
           off, n, tiny);
    CHECK(bad == 0, "relu_dy %s: %zu values differ from relu backward + batch-norm backward",
          mpx_dtype_name(store), bad);
    CHECK(off > 0 && off < (int)n, "relu_dy %s: %d of %zu masked (both kinds wanted)",
          mpx_dtype_name(store), off, n);
    CHECK(store == MPX_F32 || tiny > 0, "relu_dy %s: no result rounds to 0 only in storage",
          mpx_dtype_name(store));
    /* in place (dx over dy), as the executor runs it (graph_compile.c: plan_bn_inplace_grads) */
    memcpy(dx2, dyf, n * sizeof(float));
    CHECK_OK(mpx_batchnorm_backward_cpu(&fused, &tdx2, &tx, &tg, &tb, &tsm, &tsi, &tdx2, &tdg2,
                                        &tdb2));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&dx1[i], &dx2[i], sizeof(float)) != 0;
    CHECK(bad == 0, "relu_dy %s in place: %zu values differ", mpx_dtype_name(store), bad);
    fused.relu_store = MPX_F8_E4M3;
    CHECK(mpx_batchnorm_backward_cpu(&fused, &tdy, &tx, &tg, &tb, &tsm, &tsi, &tdx2, &tdg2,
                                     &tdb2) == MPX_ERR_UNSUPPORTED,
          "relu_dy with an FP8 store accepted");
    free(xf), free(dyf), free(yf), free(dyb), free(dx1), free(dx2);
}

int main(void) {
    mpx_threads_set(2);
    check_relu_dy(MPX_F32, 1.0f, 80);
    check_relu_dy(MPX_F16, 0x1p-24f, 81);
    check_relu_dy(MPX_BF16, 0x1p-133f, 82);
    static const int64_t s1[] = {6, 5}, s2[] = {2, 3, 3, 20}, s3[] = {3, 2, 2, 33},
                         s4[] = {2, 4, 4, 16}, s5[] = {7, 3};
    check_shape(2, s1, 1, 10);
    check_shape(4, s2, 1, 20); /* two channel blocks, the second partial */
    check_shape(4, s3, 1, 30); /* three blocks */
    check_shape(4, s4, 1, 40); /* exactly one block */
    check_shape(2, s5, 1, 50);
    /* Large enough for the OpenMP path (M*C >= 16384): finite differences on every 211th
     * element of x (a prime, so the samples cover every channel) to stay fast. */
    static const int64_t s6[] = {8, 16, 16, 24};
    check_shape(4, s6, 211, 60);
    /* M = 9000: 141 chunks of 64 rows, their partials added in groups of 64, 64 and 13. */
    static const int64_t s7[] = {9, 10, 100, 5};
    check_shape(4, s7, 211, 70);
    check_errors();
    return mpx_test_done(__FILE__);
}
