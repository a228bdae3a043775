/* test_op_softmax_ce.c — softmax cross-entropy forward against a double reference, backward
 * against central finite differences of the double loss, ignored labels (zero probs and
 * gradients, the loss over the rest), stability on huge logits, determinism across thread
 * counts, and the error paths.
 *
 * FP32 tolerances, u = 2^-24, per row with range R = max_j |x_j - max| (the argument of exp):
 *  - probs p_j: x_j - max rounded (u |x_j - max|, amplified by exp into a relative error of
 *    the same size), expf (<= 2u), the normaliser (a double sum of such terms: relative
 *    u (2 + R)), 1/sum rounded (u) and the product (u):
 *    |err p_j| <= u p_j (6 + |x_j - max| + R).
 *  - row loss log(sum) - (x_l - max): log of a sum with relative error u (2 + R) plus the
 *    rounded subtraction: <= u (3 + 2R); the mean of the rows then rounded: + u |loss|.
 *  - dlogits = (p - onehot) / count: the p error, then subtraction and division (u each of
 *    |p - onehot|): |err| <= (u p_j (6 + |x_j - max| + R) + 2u |p_j - onehot_j|) / count.
 * Finite differences: central step h = 1e-5 on the double loss (smooth; truncation
 * h^2 |f'''| / 6 ~ 1e-12, rounding ~|x| 1e-16 / h <= 1e-9), added to the tolerance; the FP32
 * bound on the label entry (~2u = 1.2e-7) is far above it, so a wrong gradient still fails.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/rng.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

/* Double loss of one row: logsumexp(x) - x[label]. */
static double ref_row_loss(const double *x, int32_t label, int k) {
    double mx = x[0];
    for (int j = 1; j < k; j++) mx = fmax(mx, x[j]);
    double s = 0;
    for (int j = 0; j < k; j++) s += exp(x[j] - mx);
    return log(s) + mx - x[label];
}

/* Double loss: mean over rows with label >= 0. */
static double ref_loss(const double *x, const int32_t *lab, int m, int k) {
    double total = 0;
    int count = 0;
    for (int i = 0; i < m; i++) {
        if (lab[i] < 0) continue;
        total += ref_row_loss(x + i * k, lab[i], k);
        count++;
    }
    return count ? total / count : 0;
}

static double row_range(const float *x, int k) {
    float mx = x[0], mn = x[0];
    for (int j = 1; j < k; j++) mx = fmaxf(mx, x[j]), mn = fminf(mn, x[j]);
    return (double)mx - mn;
}

static void check_case(int m, int k, float scale, int ignore_every, uint64_t seed) {
    float *x = malloc(sizeof(float) * m * k), *p = malloc(sizeof(float) * m * k);
    float *d = malloc(sizeof(float) * m * k), loss = NAN;
    int32_t *lab = malloc(sizeof(int32_t) * m);
    double *xd = malloc(sizeof(double) * m * k);
    mpx_test_normal(x, (size_t)m * k, 0, scale, seed);
    int count = 0;
    for (int i = 0; i < m; i++) {
        lab[i] = (int32_t)mpx_rand_u32(seed, MPX_RNG_TEST, 1000000 + i) % k;
        if (ignore_every && i % ignore_every == 1) lab[i] = -1 - (i % 3); /* any negative */
        count += lab[i] >= 0;
    }
    for (int i = 0; i < m * k; i++) xd[i] = x[i], p[i] = d[i] = NAN;
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {m, k}, x}, tp = tx, td = tx;
    tp.data = p, td.data = d;
    mpx_tensor tl = {MPX_I32, MPX_DEV_CPU, 1, {m}, lab};
    mpx_tensor tloss = {MPX_F32, MPX_DEV_CPU, 1, {1}, &loss};
    CHECK_OK(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss, &tp));
    CHECK_OK(mpx_softmax_ce_backward_cpu(&tp, &tl, &td));
    char tag[96];
    snprintf(tag, sizeof tag, "[%d,%d] scale %g, %d counted", m, k, scale, count);

    double lref = ref_loss(xd, lab, m, k), ltol = 0, wp = 0, wd = 0;
    for (int i = 0; i < m; i++) {
        double R = row_range(x + i * k, k);
        if (lab[i] >= 0) ltol += U * (3 + 2 * R);
        double mx = xd[i * k], s = 0;
        for (int j = 1; j < k; j++) mx = fmax(mx, xd[i * k + j]);
        for (int j = 0; j < k; j++) s += exp(xd[i * k + j] - mx);
        for (int j = 0; j < k; j++) {
            double pr = exp(xd[i * k + j] - mx) / s;
            double tol = U * pr * (6 + fabs(xd[i * k + j] - mx) + R) + 1e-45;
            double e = fabs(p[i * k + j] - pr) / tol;
            if (lab[i] < 0) e = p[i * k + j] == 0 ? 0 : INFINITY; /* ignored rows: zeros */
            if (!(e <= wp)) wp = e;
            /* Finite differences of the double loss with respect to x[i,j]. The loss is
             * sum_rows loss_i / count and x[i,j] enters row i only, so differencing row i's
             * term is the same derivative at O(K) instead of O(M K) per element (ignored
             * rows contribute nothing: derivative 0). */
            const double h = 1e-5;
            double g = 0;
            if (lab[i] >= 0) {
                double save = xd[i * k + j];
                xd[i * k + j] = save + h;
                double fp = ref_row_loss(xd + i * k, lab[i], k);
                xd[i * k + j] = save - h;
                double fm = ref_row_loss(xd + i * k, lab[i], k);
                xd[i * k + j] = save;
                g = (fp - fm) / (2 * h) / count;
            }
            double oh = lab[i] == j;
            double dtol = count ? (tol + 2 * U * fabs(pr - oh)) / count : 0;
            /* + the FD's own error: rounding ~|x| 1e-16 / h <= 1e-9 for |x| <= 60 (scale
             * 10 rows), truncation h^2 |f'''| / 6 ~ 1e-12; per row, divided by count. */
            e = fabs(d[i * k + j] - g) / (dtol + 2e-9 / (count ? count : 1));
            if (lab[i] < 0) e = d[i * k + j] == 0 ? 0 : INFINITY; /* ignored rows: exact 0 */
            if (!(e <= wd)) wd = e;
        }
    }
    ltol = count ? ltol / count + U * fabs(lref) : 0;
    CHECK(fabs(loss - lref) <= ltol, "%s: loss %.9g vs %.9g (tolerance %.3g)", tag, loss, lref,
          ltol);
    CHECK(wp <= 1, "%s: probs %.3g x tolerance", tag, wp);
    CHECK(wd <= 1, "%s: dlogits vs finite differences %.3g x tolerance", tag, wd);

    /* Same bits with 1 and 2 threads (fixed row blocks). */
    float loss1 = NAN, *p1 = malloc(sizeof(float) * m * k);
    mpx_tensor tp1 = tp, tloss1 = tloss;
    tp1.data = p1, tloss1.data = &loss1;
    mpx_threads_set(1);
    CHECK_OK(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss1, &tp1));
    mpx_threads_set(2);
    CHECK(!memcmp(&loss, &loss1, sizeof loss) && !memcmp(p, p1, sizeof(float) * m * k),
          "%s: 1 and 2 threads differ", tag);
    free(x), free(p), free(d), free(lab), free(xd), free(p1);
}

static void check_extremes(void) {
    /* Huge logits: max subtraction keeps exp finite; the loss of a row whose label has a
     * vanishing probability is still finite and exact (computed from logsumexp, not log p). */
    float x[6] = {1e4f, -1e4f, 0.0f, 88.0f, 89.0f, -200.0f}, p[6], d[6], loss;
    int32_t lab[2] = {1, 2};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {2, 3}, x}, tp = tx, td = tx;
    tp.data = p, td.data = d;
    mpx_tensor tl = {MPX_I32, MPX_DEV_CPU, 1, {2}, lab};
    mpx_tensor tloss = {MPX_F32, MPX_DEV_CPU, 1, {1}, &loss};
    CHECK_OK(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss, &tp));
    double want = (2e4 + (log(1 + exp(-1.0) + exp(-289.0)) + 289.0)) / 2;
    CHECK(isfinite(loss) && fabs(loss - want) <= 2 * U * want, "huge logits: loss %.9g want %.9g",
          loss, want);
    CHECK(p[0] == 1 && p[1] == 0 && isfinite(p[5]), "huge logits: probs %g %g %g", p[0], p[1],
          p[5]);
    /* Every row ignored: loss 0 and zero gradients, not 0/0. */
    lab[0] = lab[1] = -1;
    CHECK_OK(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss, &tp));
    CHECK_OK(mpx_softmax_ce_backward_cpu(&tp, &tl, &td));
    CHECK(loss == 0 && d[0] == 0 && d[4] == 0, "all ignored: loss %g, dlogits %g", loss, d[0]);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float x[4 * 10], p[4 * 10], loss[2];
    static int32_t lab[4] = {0, 9, -1, 10};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {4, 10}, x}, tp = tx;
    tp.data = p;
    mpx_tensor tl = {MPX_I32, MPX_DEV_CPU, 1, {4}, lab};
    mpx_tensor tloss = {MPX_F32, MPX_DEV_CPU, 1, {1}, loss};
    expect_input_error(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss, &tp), "labels[3] = 10",
                       "label == K in forward");
    expect_input_error(mpx_softmax_ce_backward_cpu(&tp, &tl, &tx), "labels[3] = 10",
                       "label == K in backward");
    lab[3] = 3;
    CHECK_OK(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss, &tp));
    mpx_tensor t = tl;
    t.dtype = MPX_F32;
    expect_input_error(mpx_softmax_ce_forward_cpu(&tx, &t, &tloss, &tp), "labels has dtype f32",
                       "f32 labels");
    t = tl;
    t.shape[0] = 3;
    expect_input_error(mpx_softmax_ce_forward_cpu(&tx, &t, &tloss, &tp), "labels has shape [3]",
                       "short labels");
    t = tloss;
    t.shape[0] = 2;
    expect_input_error(mpx_softmax_ce_forward_cpu(&tx, &tl, &t, &tp), "loss has shape [2]",
                       "loss of two elements");
    t = tp;
    t.shape[1] = 9;
    expect_input_error(mpx_softmax_ce_forward_cpu(&tx, &tl, &tloss, &t), "probs has shape [4,9]",
                       "probs of another shape");
    t = tx;
    t.dtype = MPX_F16;
    expect_input_error(mpx_softmax_ce_forward_cpu(&t, &tl, &tloss, &tp), "logits has dtype f16",
                       "f16 logits");
}

int main(void) {
    mpx_threads_set(2);
    check_case(5, 3, 1.0f, 0, 1);
    check_case(16, 10, 3.0f, 4, 2); /* every 4th row ignored */
    check_case(7, 33, 10.0f, 0, 3); /* wide logit range */
    check_case(1, 1, 1.0f, 0, 4);   /* one class: loss 0, gradient 0 */
    check_case(130, 257, 2.0f, 7, 5); /* the OpenMP path (M*K >= 16384) */
    check_extremes();
    check_errors();
    return mpx_test_done(__FILE__);
}
