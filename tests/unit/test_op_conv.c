/* test_op_conv.c — conv2d (oneDNN, the 1x1 GEMM path, every forced implementation) against
 * double-precision references, and backward against central finite differences.
 *
 * References, all in double and written here:
 *   ref_forward  — scatter form (loops over input pixels), independent of the gather-form
 *                  mpx_conv2d_reference, which is checked against it too;
 *   ref_backward — analytic dx, dw, db, itself checked against finite differences.
 * Finite differences: f(x, w, b) = sum(r * conv(x, w, b)) for a random r, derivative by central
 * differences in double on ref_forward. f is linear in each argument, so the central
 * difference has no truncation error: it is exact up to double rounding (~1e-12 here).
 *
 * Tolerance for every FP32 result (forward, dx, dw, db): the dot-product error bound
 *   |got - exact| <= gamma_R * S,  gamma_R = R u / (1 - R u), u = 2^-24,
 * where R is the number of terms summed (forward: C*KH*KW products + bias; dx: K*KH*KW;
 * dw and db: N*OH*OW) and S the same sum over absolute values, computed by running the double
 * references on |x|, |w|, |b|, |r|. The bound holds for any summation order or blocking, so
 * it fits oneDNN and the GEMM path alike; any indexing, padding or layout error is O(S).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

static const double U = 1.0 / 16777216.0;

typedef struct {
    int n, h, w, c, k, kh, kw, sh, sw, ph, pw;
    int fd; /* also check against finite differences (small shapes) */
} geom;

static int out_h(const geom *g) { return (g->h + 2 * g->ph - g->kh) / g->sh + 1; }
static int out_w(const geom *g) { return (g->w + 2 * g->pw - g->kw) / g->sw + 1; }
static size_t nx(const geom *g) { return (size_t)g->n * g->h * g->w * g->c; }
static size_t nw(const geom *g) { return (size_t)g->kh * g->kw * g->c * g->k; }
static size_t ny(const geom *g) { return (size_t)g->n * out_h(g) * out_w(g) * g->k; }

/* y = conv(x, w) + b, scatter form: every input pixel adds its contribution to the outputs
 * whose window covers it. */
static void ref_forward(const geom *g, const double *x, const double *w, const double *b,
                        double *y) {
    int oh = out_h(g), ow = out_w(g);
    for (size_t i = 0; i < ny(g); i++) y[i] = b ? b[i % g->k] : 0.0;
    for (int n = 0; n < g->n; n++)
        for (int iy = 0; iy < g->h; iy++)
            for (int ix = 0; ix < g->w; ix++)
                for (int ky = 0; ky < g->kh; ky++)
                    for (int kx = 0; kx < g->kw; kx++) {
                        int ty = iy + g->ph - ky, tx = ix + g->pw - kx;
                        if (ty < 0 || tx < 0 || ty % g->sh || tx % g->sw) continue;
                        int oy = ty / g->sh, ox = tx / g->sw;
                        if (oy >= oh || ox >= ow) continue;
                        for (int c = 0; c < g->c; c++) {
                            double xv = x[(((size_t)n * g->h + iy) * g->w + ix) * g->c + c];
                            const double *wr = w + (((size_t)ky * g->kw + kx) * g->c + c) * g->k;
                            double *yr = y + (((size_t)n * oh + oy) * ow + ox) * g->k;
                            for (int k = 0; k < g->k; k++) yr[k] += xv * wr[k];
                        }
                    }
}

/* Analytic gradients of sum(dy * conv(x, w, b)): dx, dw, db. */
static void ref_backward(const geom *g, const double *dy, const double *x, const double *w,
                         double *dx, double *dw, double *db) {
    int oh = out_h(g), ow = out_w(g);
    memset(dx, 0, nx(g) * sizeof(double));
    memset(dw, 0, nw(g) * sizeof(double));
    memset(db, 0, (size_t)g->k * sizeof(double));
    for (int n = 0; n < g->n; n++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                const double *d = dy + (((size_t)n * oh + oy) * ow + ox) * g->k;
                for (int k = 0; k < g->k; k++) db[k] += d[k];
                for (int ky = 0; ky < g->kh; ky++)
                    for (int kx = 0; kx < g->kw; kx++) {
                        int iy = oy * g->sh - g->ph + ky, ix = ox * g->sw - g->pw + kx;
                        if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                        size_t xo = (((size_t)n * g->h + iy) * g->w + ix) * g->c;
                        for (int c = 0; c < g->c; c++) {
                            size_t wo = (((size_t)ky * g->kw + kx) * g->c + c) * g->k;
                            for (int k = 0; k < g->k; k++) {
                                dx[xo + c] += d[k] * w[wo + k];
                                dw[wo + k] += d[k] * x[xo + c];
                            }
                        }
                    }
            }
}

typedef struct {
    const geom *g;
    double *x, *w, *b, *r, *y;
} fd_ctx;

static double objective(fd_ctx *f) {
    ref_forward(f->g, f->x, f->w, f->b, f->y);
    double s = 0;
    for (size_t i = 0; i < ny(f->g); i++) s += f->r[i] * f->y[i];
    return s;
}

/* Central differences of objective() with respect to v[0..n). */
static void fd_grad(fd_ctx *f, double *v, size_t n, double *grad) {
    const double h = 0.5; /* f is linear in v: any step is exact; 0.5 keeps v +- h exact */
    for (size_t i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + h;
        double fp = objective(f);
        v[i] = save - h;
        double fm = objective(f);
        v[i] = save;
        grad[i] = (fp - fm) / (2 * h);
    }
}

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void to_double(const float *s, double *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = s[i];
}
static void to_abs(const double *s, double *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = fabs(s[i]);
}
static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* max over i of |got_i - ref_i| / (gamma_R * abs_i + tiny): <= 1 passes. */
static double bound_ratio(const float *got, const double *ref, const double *abs, size_t n,
                          int r_terms) {
    double gam = r_terms * U / (1 - r_terms * U), worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (gam * abs[i] + 1e-30);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static const char *const IMPL[] = {"auto", "onednn-hwio", "onednn-any", "sgemm"};

static void check_shape(const geom *g, uint64_t seed) {
    mpx_conv2d_attr a = {g->sh, g->sw, g->ph, g->pw};
    int oh = out_h(g), ow = out_w(g);
    size_t NX = nx(g), NW = nw(g), NY = ny(g), K = (size_t)g->k;
    float *xf = falloc(NX), *wf = falloc(NW), *bf = falloc(K), *rf = falloc(NY);
    mpx_test_uniform(xf, NX, -1, 1, seed);
    mpx_test_uniform(wf, NW, -1, 1, seed + 1);
    mpx_test_uniform(bf, K, -1, 1, seed + 2);
    mpx_test_uniform(rf, NY, -1, 1, seed + 3);
    double *x = dalloc(NX), *w = dalloc(NW), *b = dalloc(K), *r = dalloc(NY);
    double *ax = dalloc(NX), *aw = dalloc(NW), *ab = dalloc(K), *ar = dalloc(NY);
    to_double(xf, x, NX), to_double(wf, w, NW), to_double(bf, b, K), to_double(rf, r, NY);
    to_abs(x, ax, NX), to_abs(w, aw, NW), to_abs(b, ab, K), to_abs(r, ar, NY);

    /* References: y with and without bias, |.| bounds, gradients, their |.| bounds. */
    double *y = dalloc(NY), *y0 = dalloc(NY), *ay = dalloc(NY), *ylib = dalloc(NY);
    double *dx = dalloc(NX), *dw = dalloc(NW), *db = dalloc(K);
    double *adx = dalloc(NX), *adw = dalloc(NW), *adb = dalloc(K);
    ref_forward(g, x, w, b, y);
    ref_forward(g, x, w, NULL, y0);
    ref_forward(g, ax, aw, ab, ay);
    ref_backward(g, r, x, w, dx, dw, db);
    ref_backward(g, ar, ax, aw, adx, adw, adb);
    char tag[160];
    snprintf(tag, sizeof tag, "x[%d,%d,%d,%d] w[%d,%d,%d,%d] stride %dx%d pad %dx%d", g->n, g->h,
             g->w, g->c, g->kh, g->kw, g->c, g->k, g->sh, g->sw, g->ph, g->pw);

    /* The library's gather-form reference agrees with the scatter form (both double). */
    mpx_conv2d_reference(&a, g->n, g->h, g->w, g->c, g->k, g->kh, g->kw, x, w, b, ylib);
    double worst = 0;
    for (size_t i = 0; i < NY; i++) {
        double e = fabs(ylib[i] - y[i]) / (1e-13 * (ay[i] + 1e-300));
        if (!(e <= worst)) worst = e;
    }
    CHECK(worst <= 1, "%s: mpx_conv2d_reference differs from the test reference (%.3g)", tag,
          worst);

    /* The analytic backward agrees with finite differences (small shapes). */
    if (g->fd) {
        fd_ctx f = {g, x, w, b, r, dalloc(NY)};
        double *gx = dalloc(NX), *gw = dalloc(NW), *gb = dalloc(K);
        fd_grad(&f, x, NX, gx);
        fd_grad(&f, w, NW, gw);
        fd_grad(&f, b, K, gb);
        double e = 0;
        for (size_t i = 0; i < NX; i++) e = fmax(e, fabs(gx[i] - dx[i]) / (adx[i] + 1));
        for (size_t i = 0; i < NW; i++) e = fmax(e, fabs(gw[i] - dw[i]) / (adw[i] + 1));
        for (size_t i = 0; i < K; i++) e = fmax(e, fabs(gb[i] - db[i]) / (adb[i] + 1));
        CHECK(e < 1e-9, "%s: analytic gradient vs finite differences: relative error %.3g", tag,
              e);
        free(f.y), free(gx), free(gw), free(gb);
    }

    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 4, {g->n, g->h, g->w, g->c}, xf};
    mpx_tensor tw = {MPX_F32, MPX_DEV_CPU, 4, {g->kh, g->kw, g->c, g->k}, wf};
    mpx_tensor tb = {MPX_F32, MPX_DEV_CPU, 1, {g->k}, bf};
    mpx_tensor tr = {MPX_F32, MPX_DEV_CPU, 4, {g->n, oh, ow, g->k}, rf};
    float *yf = falloc(NY), *dxf = falloc(NX), *dwf = falloc(NW), *dbf = falloc(K);
    float *dwf2 = falloc(NW);
    mpx_tensor ty = {MPX_F32, MPX_DEV_CPU, 4, {g->n, oh, ow, g->k}, yf};
    mpx_tensor tdx = tx, tdw = tw, tdb = tb, tdw2 = tw;
    tdx.data = dxf, tdw.data = dwf, tdb.data = dbf, tdw2.data = dwf2;
    int rf_terms = g->c * g->kh * g->kw + 1, rx_terms = g->k * g->kh * g->kw;
    int rw_terms = g->n * oh * ow;
    for (int impl = MPX_CONV_AUTO; impl <= MPX_CONV_SGEMM; impl++) {
        mpx_conv2d_force(ctx, (mpx_conv2d_impl)impl);
        /* Outputs start as NaN: every pass must overwrite all of its outputs. */
        fill_nan(yf, NY);
        CHECK_OK(mpx_conv2d_forward_cpu(ctx, &a, &tx, &tw, &tb, &ty));
        double e = bound_ratio(yf, y, ay, NY, rf_terms);
        CHECK(e <= 1, "%s %s: forward error %.3g x bound", IMPL[impl], tag, e);
        fill_nan(yf, NY);
        CHECK_OK(mpx_conv2d_forward_cpu(ctx, &a, &tx, &tw, NULL, &ty));
        e = bound_ratio(yf, y0, ay, NY, rf_terms);
        CHECK(e <= 1, "%s %s: forward without bias error %.3g x bound", IMPL[impl], tag, e);

        fill_nan(dxf, NX);
        CHECK_OK(mpx_conv2d_backward_data_cpu(ctx, &a, &tr, &tw, &tdx));
        e = bound_ratio(dxf, dx, adx, NX, rx_terms);
        CHECK(e <= 1, "%s %s: dx error %.3g x bound", IMPL[impl], tag, e);

        fill_nan(dwf, NW), fill_nan(dbf, K), fill_nan(dwf2, NW);
        CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &a, &tr, &tx, &tdw, &tdb));
        CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &a, &tr, &tx, &tdw2, NULL));
        e = bound_ratio(dwf, dw, adw, NW, rw_terms);
        CHECK(e <= 1, "%s %s: dw error %.3g x bound", IMPL[impl], tag, e);
        e = bound_ratio(dwf2, dw, adw, NW, rw_terms);
        CHECK(e <= 1, "%s %s: dw (no db) error %.3g x bound", IMPL[impl], tag, e);
        e = bound_ratio(dbf, db, adb, K, rw_terms);
        CHECK(e <= 1, "%s %s: db error %.3g x bound", IMPL[impl], tag, e);

        /* A cached primitive gives the same bits on a second call. */
        float *again = falloc(NY);
        mpx_tensor t2 = ty;
        t2.data = again;
        CHECK_OK(mpx_conv2d_forward_cpu(ctx, &a, &tx, &tw, NULL, &t2));
        CHECK(memcmp(again, yf, NY * sizeof(float)) == 0, "%s %s: second call differs",
              IMPL[impl], tag);
        free(again);
    }
    mpx_conv2d_force(ctx, MPX_CONV_AUTO);
    char desc[200];
    CHECK_OK(mpx_conv2d_describe(ctx, MPX_CONV_FORWARD, &a, &tx, &tw, 1, desc, sizeof desc));
    printf("  %s: %s\n", tag, desc);

    free(xf), free(wf), free(bf), free(rf), free(x), free(w), free(b), free(r);
    free(ax), free(aw), free(ab), free(ar), free(y), free(y0), free(ay), free(ylib);
    free(dx), free(dw), free(db), free(adx), free(adw), free(adb);
    free(yf), free(dxf), free(dwf), free(dbf), free(dwf2);
}

static int expect_input_error(mpx_status s, const char *needle, const char *what) {
    const char *msg = mpx_error_message();
    CHECK(s == MPX_ERR_INPUT && strstr(msg, needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), msg);
    return s == MPX_ERR_INPUT;
}

static void check_errors(void) {
    static float xb[2 * 5 * 5 * 3], wb[3 * 3 * 3 * 4], bb[4], yb[2 * 5 * 5 * 4];
    mpx_conv2d_attr a = {1, 1, 1, 1};
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 4, {2, 5, 5, 3}, xb};
    mpx_tensor w = {MPX_F32, MPX_DEV_CPU, 4, {3, 3, 3, 4}, wb};
    mpx_tensor b = {MPX_F32, MPX_DEV_CPU, 1, {4}, bb};
    mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 4, {2, 5, 5, 4}, yb};
    CHECK_OK(mpx_conv2d_forward_cpu(ctx, &a, &x, &w, &b, &y));

    mpx_tensor t = x;
    t.dtype = MPX_I32; /* (16-bit floats are taken: the native path's test covers them) */
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &a, &t, &w, &b, &y), "x has dtype i32", "i32 x");
    t = w;
    t.shape[2] = 2;
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &a, &x, &t, &b, &y), "w has shape [3,3,2,4]",
                       "w with the wrong C");
    t = y;
    t.shape[1] = 4;
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &a, &x, &w, &b, &t), "OH",
                       "y with the wrong OH");
    t = y;
    t.shape[3] = 5;
    expect_input_error(mpx_conv2d_backward_data_cpu(ctx, &a, &t, &w, &x), "dy",
                       "dy with the wrong K");
    t = b;
    t.shape[0] = 3;
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &a, &x, &w, &t, &y), "b has shape [3]",
                       "short b");
    expect_input_error(mpx_conv2d_backward_weights_cpu(ctx, &a, &y, &x, &w, &t), "db", "short db");
    t = x;
    t.ndim = 3;
    expect_input_error(mpx_conv2d_backward_weights_cpu(ctx, &a, &y, &t, &w, NULL), "x has 3 dims",
                       "3-d x");
    t = y;
    t.dtype = MPX_I32;
    expect_input_error(mpx_conv2d_backward_weights_cpu(ctx, &a, &t, &x, &w, NULL),
                       "dy has dtype i32", "i32 dy");
    mpx_conv2d_attr bad = {0, 1, 0, 0};
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &bad, &x, &w, &b, &y), "stride", "stride 0");
    expect_input_error(mpx_conv2d_forward_cpu(ctx, NULL, &x, &w, &b, &y), "attr", "NULL attr");
    mpx_conv2d_attr nopad = {1, 1, 0, 0};
    t = w;
    t.shape[0] = t.shape[1] = 7; /* 7x7 kernel on a 5x5 unpadded input */
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &nopad, &x, &t, &b, &y), "larger",
                       "kernel > input");
    t = x;
    t.data = NULL;
    expect_input_error(mpx_conv2d_forward_cpu(ctx, &a, &t, &w, &b, &y), "no data", "NULL data");
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    mpx_threads_set(0);
    static const geom shapes[] = {
        /* ResNet families, small enough for finite differences */
        {2, 9, 8, 3, 8, 7, 7, 2, 2, 3, 3, 1},   /* 7x7/2 pad 3 (stem), odd input */
        {2, 7, 6, 5, 6, 3, 3, 1, 1, 1, 1, 1},   /* 3x3/1 pad 1, odd channels */
        {2, 9, 8, 8, 8, 3, 3, 2, 2, 1, 1, 1},   /* 3x3/2 pad 1 */
        {2, 5, 4, 17, 20, 1, 1, 1, 1, 0, 0, 1}, /* 1x1/1 */
        {2, 7, 6, 8, 12, 1, 1, 2, 2, 0, 0, 1},  /* 1x1/2 (projection shortcut) */
        {1, 8, 8, 4, 4, 3, 3, 2, 2, 0, 0, 1},   /* 3x3/2 pad 0: last input row unused */
        {2, 6, 9, 3, 5, 5, 3, 1, 2, 2, 1, 1},   /* 5x3 kernel, stride 1x2, pad 2x1 */
        /* ResNet families with channel counts that use oneDNN's blocked kernels */
        {2, 8, 8, 48, 40, 3, 3, 1, 1, 1, 1, 0},
        {2, 10, 10, 32, 64, 3, 3, 2, 2, 1, 1, 0},
        {4, 6, 6, 64, 96, 1, 1, 1, 1, 0, 0, 0},
        {2, 8, 8, 64, 128, 1, 1, 2, 2, 0, 0, 0},
        {2, 20, 18, 3, 32, 7, 7, 2, 2, 3, 3, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(&shapes[i], 1000 + 10 * i);
    check_errors();
    mpx_conv2d_cache_clear(ctx);
    mpx_conv2d_cache_clear(ctx); /* harmless when empty */
    return mpx_test_done(__FILE__);
}
