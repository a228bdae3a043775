/* test_native16_trace.c — training on the CPU's native 16-bit GEMMs (conv2d, linear, bmm on
 * BF16 storage: gemm_lowp.c) against the same training with them off (FP32 GEMMs on the
 * decoded values), for the train_trace models (ResNet, BERT, SSD) in bf16 — without scaling,
 * with dynamic scaling, masked-LM labels, stochastic rounding, and without master weights —
 * and fp16 with adaptive scaling (emulated on CPUs whose oneDNN has no native F16 GEMM: then
 * the two runs must agree in every bit).
 *
 * Each GEMM output of the native path is within 2 gamma_R S of the emulated one
 * (test_op_native16.c), about 1e-5 of its magnitude for these sizes, and the executor rounds
 * it into BF16 storage, where most values come out the same and the rest one BF16 unit
 * (2^-8 relative) apart. So the paths must agree on what is discrete (each step's non-finite
 * count), and each step's loss and gradient norm, and every final weight relative to the
 * largest of its tensor, within 2^-8 relative: the two must not differ by as much as one BF16
 * rounding. The largest differences seen are printed. The SSD's traces part from its third step
 * on (its MultiBox loss mines hard negatives by rank: a negative whose loss changes place in the
 * ranking moves the loss by a term of its own, not by a rounding), so its first two steps are
 * checked, not its final weights.
 * Skipped (exit 77) where the CPU has no native 16-bit GEMM.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"
#include "train_trace.h"

/* The CPU backend's operators' context (its switches and counters). */
static mpx_cpu_ctx *cpu_ctx(void) { return mpx_backend_cpu_ctx(mpx_backend_cpu()); }

static const double TOL = 1.0 / 256; /* 2^-8: one BF16 rounding, relative */

static double rel(double a, double b) {
    if (!(isfinite(a) && isfinite(b))) return a == b ? 0 : INFINITY;
    const double m = fmax(fabs(a), fabs(b));
    return m > 0 ? fabs(a - b) / m : 0;
}

static void compare_paths(const variant *v) {
    const mpx_backend *cpu = mpx_backend_cpu();
    trace nat, emu;
    mpx_gemm_lowp_force(cpu_ctx(), 1);
    run(v, cpu, &nat);
    mpx_gemm_lowp_force(cpu_ctx(), 0);
    run(v, cpu, &emu);
    mpx_gemm_lowp_force(cpu_ctx(), 1);
    char what[128];
    snprintf(what, sizeof what, "%s %s %s %s%s%s", v->model, v->mode, v->scaling, v->rounding,
             v->mlm ? " (masked-LM labels)" : "", v->pure ? " (no masters)" : "");
    const mpx_dtype t = strcmp(v->mode, "bf16") == 0 ? MPX_BF16 : MPX_F16;
    const int native = mpx_gemm_lowp_native(cpu_ctx(), t);
    double d_loss = 0, d_norm = 0, d_w = 0;
    int same = 1;
    const int checked = strcmp(v->model, "ssd") == 0 ? 2 : STEPS; /* see the top of the file */
    for (int s = 0; s < STEPS; s++) {
        if (s == checked) {
            printf("  (%s: steps from %d on not compared, as said at the top of the file)\n",
                   v->model, s);
            break;
        }
        CHECK(isfinite(nat.loss[s]) && isfinite(emu.loss[s]), "%s step %d: loss %g vs %g", what, s,
              (double)nat.loss[s], (double)emu.loss[s]);
        CHECK(nat.nonfinite[s] == emu.nonfinite[s], "%s step %d: non-finite %lld vs %lld", what, s,
              (long long)nat.nonfinite[s], (long long)emu.nonfinite[s]);
        d_loss = fmax(d_loss, rel(nat.loss[s], emu.loss[s]));
        /* a step that overflowed has a non-finite norm in both (its count is checked above) */
        if (isfinite(nat.norm[s]) || isfinite(emu.norm[s]))
            d_norm = fmax(d_norm, rel(nat.norm[s], emu.norm[s]));
        same &= memcmp(&nat.loss[s], &emu.loss[s], sizeof nat.loss[s]) == 0 &&
                memcmp(&nat.norm[s], &emu.norm[s], sizeof nat.norm[s]) == 0;
        if (getenv("MPX_TEST_VERBOSE"))
            printf("  step %d: loss %.9g / %.9g, norm %.9g / %.9g\n", s, (double)nat.loss[s],
                   (double)emu.loss[s], nat.norm[s], emu.norm[s]);
    }
    /* weights: relative to the largest magnitude of the run's weights (a weight near zero
     * moves by the update's difference, not by a fraction of itself) */
    double wmax = 0;
    for (size_t i = 0; i < emu.n_weights; i++) wmax = fmax(wmax, fabs((double)emu.weights[i]));
    for (size_t i = 0; i < emu.n_weights && checked == STEPS; i++) {
        d_w = fmax(d_w, fabs((double)nat.weights[i] - emu.weights[i]) / wmax);
        same &= memcmp(&nat.weights[i], &emu.weights[i], sizeof(float)) == 0;
    }
    char wd[32] = "not compared";
    if (checked == STEPS) snprintf(wd, sizeof wd, "%.2e", d_w);
    printf("%-50s %s; largest relative difference: loss %.2e, gradient norm %.2e, weights %s%s\n",
           what, native ? "native" : "emulated (both runs)", d_loss, d_norm, wd,
           same && checked == STEPS ? " (the same bits)" : "");
    if (!native && checked == STEPS)
        CHECK(same, "%s: with no native %s GEMM both runs must agree in every bit", what, v->mode);
    CHECK(d_loss <= TOL, "%s: loss differs by %.3g relative (tolerance %.3g)", what, d_loss, TOL);
    CHECK(d_norm <= TOL, "%s: gradient norm differs by %.3g relative (tolerance %.3g)", what,
          d_norm, TOL);
    CHECK(d_w <= TOL, "%s: weights differ by %.3g of the largest (tolerance %.3g)", what, d_w, TOL);
    trace_free(&nat);
    trace_free(&emu);
}

int main(void) {
    char bf[192], f16[192];
    printf("BF16 GEMMs: %s\nF16 GEMMs: %s\n",
           mpx_gemm_lowp_path(cpu_ctx(), MPX_BF16, bf, sizeof bf),
           mpx_gemm_lowp_path(cpu_ctx(), MPX_F16, f16, sizeof f16));
    if (!mpx_gemm_lowp_native(cpu_ctx(), MPX_BF16) && !mpx_gemm_lowp_native(cpu_ctx(), MPX_F16)) {
        printf("test_native16_trace: skipped: no native 16-bit GEMM on this CPU (bf16 %s)\n", bf);
        return MPX_TEST_SKIP;
    }
    static const variant vs[] = {
        {"resnet", "bf16", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "bf16", "none", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "bf16", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
        {"bert", "bf16", "dynamic", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bert", "bf16", "dynamic", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"ssd", "bf16", "dynamic", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) compare_paths(&vs[i]);
    mpx_gemm_lowp_cache_clear(cpu_ctx());
    return mpx_test_done(__FILE__);
}
