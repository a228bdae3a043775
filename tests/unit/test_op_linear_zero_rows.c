/* test_op_linear_zero_rows.c — the backward passes of linear and linear_t when many rows of dy
 * are zero (lib/ops/linear.c runs its GEMMs on the other rows only): against a double reference
 * over all rows, IEEE's 0 * Inf = NaN kept, and the path actually taken (the FLOPs it reports
 * left out).
 *
 * Tolerances: the dot-product bound of test_op_linear.c, gamma_R * S (u = 2^-24, R the terms:
 * OUT for dx, M for dw), with S the same sum over absolute values — the zero rows add nothing
 * to either side. Exact: dx's rows where dy is zero are +0 (the product of a zero row with a
 * finite w); db is the double column sum in row order rounded once, so it must equal that
 * reference bit for bit (adding a zero changes no partial sum).
 * dy patterns (M = 40 rows, OUT = 150: two 64-wide scan blocks and a tail): 31 zero rows, some
 * +0 and some -0, and live rows whose only nonzero sits in the first block, the second or the
 * tail — a scan that stopped early or missed the tail would drop them; no zero row (the full
 * GEMM); every row zero.
 * The rows forward (a loss's labels as the mask): rows with a mask >= 0 (0 included) against the
 * double reference within the forward's bound (IN + 1 terms with the bias), the others +0, the
 * FLOPs left out counted, a mask without negatives the plain forward's bits, and a mask of
 * the wrong length refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

static const double U = 1.0 / 16777216.0;
enum { M = 40, IN = 24, OUT = 150 };

typedef enum { DENSE, SPARSE, ALL_ZERO } pattern;

/* dy for a pattern; live[i] says whether row i has a nonzero. */
static void make_dy(pattern p, float *dy, int *live, uint64_t seed) {
    mpx_test_uniform(dy, M * OUT, -1, 1, seed);
    for (int i = 0; i < M; i++) {
        live[i] = p == DENSE || (p == SPARSE && i % 7 == 3);
        if (live[i]) continue;
        for (int j = 0; j < OUT; j++) dy[i * OUT + j] = i % 2 ? -0.0f : 0.0f;
    }
    if (p != SPARSE) return;
    /* rows 0, 1 and 2 (zero so far): one nonzero each, in scan block 0, block 1, the tail */
    const int at[3] = {5, 100, OUT - 1};
    for (int r = 0; r < 3; r++) {
        dy[r * OUT + at[r]] = 0.375f;
        live[r] = 1;
    }
}

/* The double reference over all rows: dx [M, IN], dw in the layer's layout, db [OUT]; the
 * absolute sums for the bounds. w_t: w is [OUT, IN], else [IN, OUT]. */
static void reference(int w_t, const float *dy, const float *x, const float *w, double *dx,
                      double *sdx, double *dw, double *sdw, float *db) {
    for (int i = 0; i < M; i++)
        for (int p = 0; p < IN; p++) {
            double s = 0, a = 0;
            for (int j = 0; j < OUT; j++) {
                const double wv = w_t ? w[j * IN + p] : w[p * OUT + j];
                s += (double)dy[i * OUT + j] * wv;
                a += fabs((double)dy[i * OUT + j] * wv);
            }
            dx[i * IN + p] = s, sdx[i * IN + p] = a;
        }
    for (int p = 0; p < IN; p++)
        for (int j = 0; j < OUT; j++) {
            double s = 0, a = 0;
            for (int i = 0; i < M; i++) {
                s += (double)x[i * IN + p] * dy[i * OUT + j];
                a += fabs((double)x[i * IN + p] * dy[i * OUT + j]);
            }
            const int e = w_t ? j * IN + p : p * OUT + j;
            dw[e] = s, sdw[e] = a;
        }
    for (int j = 0; j < OUT; j++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += dy[i * OUT + j];
        db[j] = (float)s;
    }
}

static double worst(const float *got, const double *ref, const double *s, int n, int terms) {
    const double gam = terms * U / (1 - terms * U);
    double w = 0;
    for (int i = 0; i < n; i++) {
        const double e = fabs(got[i] - ref[i]) / (gam * s[i] + 1e-30);
        if (!(e <= w)) w = e;
    }
    return w;
}

static void run(int w_t, mpx_tensor *tdy, mpx_tensor *tx, mpx_tensor *tw, mpx_tensor *tdx,
                mpx_tensor *tdw, mpx_tensor *tdb) {
    if (w_t) {
        CHECK_OK(mpx_linear_t_backward_data_cpu(ctx, tdy, tw, tdx));
        CHECK_OK(mpx_linear_t_backward_weights_cpu(ctx, tdy, tx, tdw, tdb));
    } else {
        CHECK_OK(mpx_linear_backward_data_cpu(ctx, tdy, tw, tdx));
        CHECK_OK(mpx_linear_backward_weights_cpu(ctx, tdy, tx, tdw, tdb));
    }
}

static void check_pattern(int w_t, pattern p, uint64_t seed) {
    static const char *pname[] = {"no zero row", "31 zero rows", "every row zero"};
    const char *layer = w_t ? "linear_t" : "linear";
    float *dy = malloc(M * OUT * 4), *x = malloc(M * IN * 4), *w = malloc(IN * OUT * 4);
    float *dx = malloc(M * IN * 4), *dw = malloc(IN * OUT * 4), *db = malloc(OUT * 4);
    float *db_ref = malloc(OUT * 4);
    double *rdx = malloc(M * IN * 8), *sdx = malloc(M * IN * 8);
    double *rdw = malloc(IN * OUT * 8), *sdw = malloc(IN * OUT * 8);
    int live[M];
    make_dy(p, dy, live, seed);
    mpx_test_uniform(x, M * IN, -1, 1, seed + 1);
    mpx_test_uniform(w, IN * OUT, -1, 1, seed + 2);
    reference(w_t, dy, x, w, rdx, sdx, rdw, sdw, db_ref);

    mpx_tensor tdy = {MPX_F32, MPX_DEV_CPU, 2, {M, OUT}, dy};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {M, IN}, x}, tdx = tx;
    tdx.data = dx;
    mpx_tensor tw = {MPX_F32, MPX_DEV_CPU, 2, {IN, OUT}, w}, tdw;
    if (w_t) tw.shape[0] = OUT, tw.shape[1] = IN;
    tdw = tw;
    tdw.data = dw;
    mpx_tensor tdb = {MPX_F32, MPX_DEV_CPU, 1, {OUT}, db};

    for (int i = 0; i < M * IN; i++) dx[i] = NAN;
    for (int i = 0; i < IN * OUT; i++) dw[i] = NAN;
    for (int i = 0; i < OUT; i++) db[i] = NAN;
    int n_zero = 0;
    for (int i = 0; i < M; i++) n_zero += !live[i];
    const double flops0 = mpx_linear_skipped_flops(ctx);
    run(w_t, &tdy, &tx, &tw, &tdx, &tdw, &tdb);
    /* both passes leave every zero row out: 2 * IN * OUT FLOPs per row each */
    const double skipped = mpx_linear_skipped_flops(ctx) - flops0, want = 4.0 * n_zero * IN * OUT;
    CHECK(skipped == want, "%s, %s: the backward passes left out %.0f FLOPs, expected %.0f",
          layer, pname[p], skipped, want);
    double e = worst(dx, rdx, sdx, M * IN, OUT);
    CHECK(e <= 1, "%s, %s: dx %.3g x bound", layer, pname[p], e);
    e = worst(dw, rdw, sdw, IN * OUT, M);
    CHECK(e <= 1, "%s, %s: dw %.3g x bound", layer, pname[p], e);
    CHECK(!memcmp(db, db_ref, OUT * 4), "%s, %s: db is not the double row-order sum", layer,
          pname[p]);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int q = 0; q < IN && !live[i]; q++) {
            uint32_t bits;
            memcpy(&bits, &dx[i * IN + q], 4);
            bad += bits != 0;
        }
    CHECK(bad == 0, "%s, %s: %d elements of dx's zero-dy rows are not +0", layer, pname[p], bad);

    if (p == SPARSE) {
        /* IEEE: an Inf in w makes 0 * Inf = NaN in the zero-dy rows of that column of dx (the
         * others are Inf or NaN); an Inf in a zero-dy row of x makes dw's entries of that input
         * column NaN. */
        const int q = 7, row = 6; /* row 6 has a zero dy (6 % 7 != 3) */
        CHECK(!live[row], "test setup: row %d should be a zero row", row);
        const int wi = w_t ? 11 * IN + q : q * OUT + 11;
        const float save = w[wi];
        w[wi] = INFINITY;
        run(w_t, &tdy, &tx, &tw, &tdx, &tdw, &tdb);
        int nan_rows = 0, inf_live = 0;
        for (int i = 0; i < M; i++) {
            nan_rows += !live[i] && isnan(dx[i * IN + q]);
            inf_live += live[i] && !isfinite(dx[i * IN + q]);
        }
        CHECK(nan_rows == n_zero && inf_live == M - n_zero,
              "%s: Inf in w: %d of %d zero-dy rows of dx have NaN in column %d (0 * Inf), %d of "
              "%d others are not finite", layer, nan_rows, n_zero, q, inf_live, M - n_zero);
        w[wi] = save;
        x[row * IN + q] = -INFINITY;
        run(w_t, &tdy, &tx, &tw, &tdx, &tdw, &tdb);
        int nan_dw = 0, other = 0;
        for (int j = 0; j < OUT; j++)
            for (int pi = 0; pi < IN; pi++) {
                const float v = w_t ? dw[j * IN + pi] : dw[pi * OUT + j];
                if (pi == q) nan_dw += isnan(v) != 0;
                else other += !isfinite(v);
            }
        CHECK(nan_dw == OUT && other == 0,
              "%s: Inf in a zero row of x: %d of %d dw entries of input %d NaN, %d others "
              "non-finite", layer, nan_dw, OUT, q, other);
    }
    free(dy), free(x), free(w), free(dx), free(dw), free(db), free(db_ref);
    free(rdx), free(sdx), free(rdw), free(sdw);
}

/* y = x @ op(w) + b on the rows a mask keeps (mask: 0, 7 and negative values). */
static void check_forward_rows(int w_t) {
    const char *layer = w_t ? "linear_t" : "linear";
    float *x = malloc(M * IN * 4), *w = malloc(IN * OUT * 4), *b = malloc(OUT * 4);
    float *y = malloc(M * OUT * 4), *y_all = malloc(M * OUT * 4);
    int32_t mask[M], all[M];
    for (int i = 0; i < M; i++) {
        mask[i] = i % 4 == 0 ? 0 : i % 4 == 1 ? 7 : -1 - i; /* 20 of 40 rows kept */
        all[i] = i % 3;
    }
    mpx_test_uniform(x, M * IN, -1, 1, 71);
    mpx_test_uniform(w, IN * OUT, -1, 1, 72);
    mpx_test_uniform(b, OUT, -1, 1, 73);
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {M, IN}, x};
    mpx_tensor tw = {MPX_F32, MPX_DEV_CPU, 2, {IN, OUT}, w};
    if (w_t) tw.shape[0] = OUT, tw.shape[1] = IN;
    mpx_tensor tb = {MPX_F32, MPX_DEV_CPU, 1, {OUT}, b};
    mpx_tensor ty = {MPX_F32, MPX_DEV_CPU, 2, {M, OUT}, y}, tya = ty;
    tya.data = y_all;
    mpx_tensor tm = {MPX_F32, MPX_DEV_CPU, 1, {M}, mask};
    tm.dtype = MPX_I32;
    for (int i = 0; i < M * OUT; i++) y[i] = NAN;
    const double f0 = mpx_linear_skipped_flops(ctx);
    if (w_t)
        CHECK_OK(mpx_linear_t_forward_rows_cpu(ctx, &tx, &tw, &tb, &tm, &ty));
    else
        CHECK_OK(mpx_linear_forward_rows_cpu(ctx, &tx, &tw, &tb, &tm, &ty));
    const double skipped = mpx_linear_skipped_flops(ctx) - f0, want = 2.0 * 20 * IN * OUT;
    CHECK(skipped == want, "%s rows forward: %.0f FLOPs left out, expected %.0f", layer, skipped,
          want);
    const double gam = (IN + 1) * U / (1 - (IN + 1) * U);
    double worst_e = 0;
    int not_zero = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < OUT; j++) {
            const float got = y[i * OUT + j];
            if (mask[i] < 0) {
                uint32_t bits;
                memcpy(&bits, &got, 4);
                not_zero += bits != 0;
                continue;
            }
            double ref = b[j], abs_sum = fabs(b[j]);
            for (int p = 0; p < IN; p++) {
                const double wv = w_t ? w[j * IN + p] : w[p * OUT + j];
                ref += (double)x[i * IN + p] * wv;
                abs_sum += fabs((double)x[i * IN + p] * wv);
            }
            const double e = fabs(got - ref) / (gam * abs_sum + 1e-30);
            if (!(e <= worst_e)) worst_e = e;
        }
    CHECK(worst_e <= 1, "%s rows forward: kept rows %.3g x bound", layer, worst_e);
    CHECK(not_zero == 0, "%s rows forward: %d values of left-out rows are not +0", layer,
          not_zero);
    /* no negative mask value: every row, the plain forward's bits */
    tm.data = all;
    if (w_t) {
        CHECK_OK(mpx_linear_t_forward_rows_cpu(ctx, &tx, &tw, &tb, &tm, &ty));
        CHECK_OK(mpx_linear_t_forward_cpu(ctx, &tx, &tw, &tb, &tya));
    } else {
        CHECK_OK(mpx_linear_forward_rows_cpu(ctx, &tx, &tw, &tb, &tm, &ty));
        CHECK_OK(mpx_linear_forward_cpu(ctx, &tx, &tw, &tb, &tya));
    }
    CHECK(!memcmp(y, y_all, M * OUT * 4), "%s rows forward with every row kept: not the plain "
          "forward's bits", layer);
    tm.shape[0] = M - 1;
    mpx_status st = w_t ? mpx_linear_t_forward_rows_cpu(ctx, &tx, &tw, &tb, &tm, &ty)
                        : mpx_linear_forward_rows_cpu(ctx, &tx, &tw, &tb, &tm, &ty);
    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "mask has shape [39]"),
          "%s rows forward, a mask of 39 rows for 40: %s", layer, mpx_error_message());
    free(x), free(w), free(b), free(y), free(y_all);
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    for (int w_t = 0; w_t <= 1; w_t++)
        for (int p = DENSE; p <= ALL_ZERO; p++) check_pattern(w_t, (pattern)p, 100 + 10 * p + w_t);
    for (int w_t = 0; w_t <= 1; w_t++) check_forward_rows(w_t);
    return mpx_test_done(__FILE__);
}
