/* test_loss_rows.c — BERT's decoder computing only the rows its loss reads (graph_compile.c:
 * plan_loss_rows; linear.c's rows forward) trains as the decoder on every row does.
 *
 * 1. Whole trainings (train_trace.h: the one-layer BERT with masked-LM labels, 3 of its 16
 *    positions predicted, 4 steps of SGD, statistics on odd steps) with the decoder on the
 *    predicted rows and on every row: each step's loss and gradient norm and the final weights
 *    agree within a tolerance, the non-finite counts exactly, in fp32, fp16 (no scaling,
 *    dynamic, adaptive, adaptive-quantile, stochastic rounding), bf16 and tf32.
 * 2. The FLOPs left out: with the rows forward, exactly the decoder forward's share of the 13
 *    ignored rows more than without (which leaves out only the backward's zero rows).
 * 3. The logits after a forward: the ignored rows are +0, the predicted rows those of the
 *    all-rows graph within the tolerance.
 *
 * Why a tolerance and not bits: the GEMM library blocks a 3-row product differently from a
 * 16-row one (oneDNN picks its kernel by shape), so a logit can differ in its last FP32 bit;
 * nothing else differs (nothing but the loss reads the rows left out, and the backward skips
 * the zero gradient rows either way). Tolerance relative, per the format the difference can
 * grow to: fp32 1e-5 — a last-bit logit difference (6e-8) moves the loss by about as much,
 * and four SGD steps at learning rate 0.05 amplify it far less than 100x; a wrong row would
 * move it by O(1). F16 2^-10 and BF16 2^-7: one unit in the last place of a logit that the
 * FP32 difference rounds the other way (in this test the 16-bit runs happen to agree in every
 * bit). tf32 2^-10, as F16: its GEMM operands keep 10 fraction bits, so a last-bit difference
 * in the logits' gradient can round an operand one TF32 unit the other way (2^-11 relative),
 * which the next GEMMs carry into the weight gradients (on an AVX2-only CPU: loss 1.4e-5,
 * gradient norm 7.7e-5 relative after four steps). Weights: the same relative tolerance, with
 * an absolute floor of 1e-6 in fp32; in the modes whose GEMM operands keep 10 or 7 fraction
 * bits, the tolerance times the largest weight (a weight near zero carries the absolute error
 * of its updates, which that rounding sets: tf32 on that CPU moved a 4e-4 weight by 3e-6).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"
#include "train_trace.h"

/* The CPU backend's operators' context (its switches and counters). */
static mpx_cpu_ctx *cpu_ctx(void) { return mpx_backend_cpu_ctx(mpx_backend_cpu()); }

static double tolerance(const char *mode) {
    if (strcmp(mode, "fp16") == 0 || strcmp(mode, "tf32") == 0)
        return 1.0 / 1024;
    return strcmp(mode, "bf16") == 0 ? 1.0 / 128 : 1e-5;
}

/* NaN matches NaN: dynamic scaling's overflow steps have no gradient norm in either run. */
static int close_to(double a, double b, double rel, double abs_floor) {
    return (isnan(a) && isnan(b)) || fabs(a - b) <= rel * fabs(a) + abs_floor;
}

static void compare_within(const char *what, const char *mode, const trace *a, const trace *b) {
    const double tol = tolerance(mode);
    for (int s = 0; s < STEPS; s++) {
        CHECK(isfinite(a->loss[s]) && close_to(a->loss[s], b->loss[s], tol, 0),
              "%s step %d: loss %.9g (all rows) vs %.9g", what, s, (double)a->loss[s],
              (double)b->loss[s]);
        CHECK(a->nonfinite[s] == b->nonfinite[s], "%s step %d: non-finite %lld vs %lld", what,
              s, (long long)a->nonfinite[s], (long long)b->nonfinite[s]);
        CHECK(close_to(a->norm[s], b->norm[s], tol, 0), "%s step %d: gradient norm %.9g vs %.9g",
              what, s, a->norm[s], b->norm[s]);
    }
    double wmax = 0;
    for (size_t i = 0; i < a->n_weights; i++)
        wmax = fmax(wmax, fabs(a->weights[i]));
    const double floor = strcmp(mode, "fp32") == 0 ? 1e-6 : fmax(1e-6, tol * wmax);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < a->n_weights; i++)
        if (!close_to(a->weights[i], b->weights[i], tol, floor) && bad++ == 0)
            first = i;
    CHECK(bad == 0, "%s: %zu of %zu final weights differ, the first %zu: %.9g vs %.9g", what,
          bad, a->n_weights, first, (double)a->weights[first], (double)b->weights[first]);
}

static void compare_rows(const variant *v) {
    variant all = *v;
    all.all_rows = 1;
    trace a, b;
    const double f0 = mpx_linear_skipped_flops(cpu_ctx());
    run(&all, mpx_backend_cpu(), &a);
    const double f1 = mpx_linear_skipped_flops(cpu_ctx());
    run(v, mpx_backend_cpu(), &b);
    const double f2 = mpx_linear_skipped_flops(cpu_ctx());
    char what[128];
    snprintf(what, sizeof what, "%s %s %s %s: all rows vs the loss's rows", v->model, v->mode,
             v->scaling, v->rounding);
    /* decoder forward: 13 ignored rows x H 32 x V 40 x 2 FLOPs per step (+ the bias adds, not
     * counted as GEMM FLOPs) */
    const double forward = (double)STEPS * 13 * 32 * 40 * 2;
    printf("%s: loss %.6f -> %.6f; %.0f and %.0f FLOPs left out\n", what, (double)b.loss[0],
           (double)b.loss[STEPS - 1], f1 - f0, f2 - f1);
    CHECK(f1 - f0 > 0, "%s: the backward left no zero rows out (%.0f FLOPs)", what, f1 - f0);
    CHECK(f2 - f1 == f1 - f0 + forward, "%s: the rows forward left out %.0f FLOPs more than the "
          "all-rows run, expected %.0f", what, (f2 - f1) - (f1 - f0), forward);
    compare_within(what, v->mode, &a, &b);
    trace_free(&a);
    trace_free(&b);
}

static void compare_logits(const char *mode) {
    float *l[2] = {NULL, NULL};
    int n = 0;
    for (int k = 0; k < 2; k++) {
        variant v = {"bert", mode, "none", "rne", 0, 0, 0, k == 0, 1, 0, 0, 0, 0, 0};
        mpx_graph *g = build(&v, mpx_backend_cpu());
        CHECK_OK(mpx_graph_forward(g, 1));
        int t = mpx_graph_find_tensor(g, "mlm.decoder");
        int64_t shape[4];
        int nd = mpx_graph_tensor_shape(g, t, shape);
        n = (int)(shape[0] * shape[1] * shape[2]);
        CHECK(nd == 3 && shape[2] == 40, "%s: decoder output has %d dims", mode, nd);
        l[k] = malloc((size_t)n * sizeof(float));
        CHECK_OK(mpx_graph_read(g, t, l[k]));
        mpx_graph_free(g);
    }
    const double tol = tolerance(mode);
    int zero_bad = 0, differ = 0, rows = 0;
    for (int r = 0; r < n / 40; r++) {
        const int32_t lab = mlm_label(r);
        rows += lab < 0;
        for (int j = 0; j < 40; j++) {
            const float a = l[0][r * 40 + j], b = l[1][r * 40 + j];
            uint32_t bits;
            memcpy(&bits, &b, 4);
            if (lab < 0) zero_bad += bits != 0;
            else differ += !close_to(a, b, tol, 1e-6);
        }
    }
    CHECK(rows == 13, "%s: %d ignored rows, expected 13", mode, rows);
    CHECK(zero_bad == 0, "%s: %d logits of ignored rows are not +0", mode, zero_bad);
    CHECK(differ == 0, "%s: %d logits of predicted rows differ from the all-rows graph's beyond "
          "%g", mode, differ, tol);
    free(l[0]);
    free(l[1]);
}

int main(void) {
    static const variant vs[] = {
        {"bert", "fp32", "none", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "fp16", "none", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "fp16", "dynamic", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "fp16", "adaptive", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "fp16", "adaptive-quantile", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "fp16", "adaptive", "stochastic", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "bf16", "dynamic", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"bert", "tf32", "none", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) compare_rows(&vs[i]);
    compare_logits("fp32");
    compare_logits("fp16");
    return mpx_test_done(__FILE__);
}
