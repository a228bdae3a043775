/* test_als_reference.c — precision.als = reference through the executor: the points of the
 * 2019 code (ada-loss @060a6a8) that act inside the backward pass, each on a graph built so
 * that the point changes the result, with the expected values derived here from the code's
 * rule and the values the executor stored:
 *   (g) a conv/linear layer's factor s multiplies its FP16 gradient before the GEMM
 *       (AdaLossConvolution2DFunction / Linear backward: get_scaled_gradient, then the GEMM);
 *   (b) a branch merge picks its target by testing the stored (scaled) branch magnitudes
 *       (rescaling: max(max_gs) * scale < u_max);
 *   (c) each branch is multiplied by target / S_i in FP16 and the branches are added in FP16
 *       (g.array *= scale_factor; sum(gs));
 *   (d) weight gradients are divided by S_prev in FP16 (get_unscaled_gradient).
 * The graph: x (diagonal, N = D = 64) -> lin0 (identity) -> h, which fans out to two linear
 * layers la and lb with one output each (so every data-gradient element is one product and
 * every weight-gradient element one product: no summation order anywhere), added, then lc (one
 * input, two classes) and the loss. Each point's check also counts the elements where mpx's
 * own rule would give another value and requires some, so the construction cannot stop
 * exercising it unnoticed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "testutil.h"

enum { N = 64, D = 64, K = 2 };

static float r16(double x) { return mpx_round_to(MPX_F16, (float)x); }

static int layer_of(const mpx_graph *g, const char *name) {
    for (int i = 0; i < mpx_graph_n_layers(g); i++) {
        mpx_layer_info li;
        mpx_graph_layer(g, i, &li);
        if (strcmp(li.name, name) == 0) return i;
    }
    return -1;
}

static mpx_param *param_named(mpx_graph *g, const char *name) {
    for (int i = 0; i < mpx_graph_n_params(g); i++)
        if (strcmp(mpx_graph_param(g, i)->name, name) == 0) return mpx_graph_param(g, i);
    return NULL;
}

/* The 2019 rule of a two-branch merge on stored magnitudes (ada_loss.py rescaling). */
static double code_target(double m_stored, const double *S, double u_max) {
    double hi = fmax(S[0], S[1]), lo = fmin(S[0], S[1]);
    if (m_stored * hi < u_max) return hi;
    if (m_stored * lo < u_max) return lo;
    double t = lo;
    while (t >= 0.125) {
        if (m_stored * t < u_max) break;
        t /= 2;
    }
    return m_stored * t < u_max ? t : 0;
}

/* mpx's rule on the unscaled magnitudes (scaling.c), to show the two differ here. */
static double mpx_target(const double *absmax, const double *S, double u_max) {
    double m = fmax(absmax[0] / S[0], absmax[1] / S[1]), best = 0;
    for (int i = 0; i < 2; i++)
        if (m * S[i] < u_max && S[i] > best) best = S[i];
    if (best > 0) return best;
    double t = fmin(S[0], S[1]);
    while (t >= 0.125 && !(m * t < u_max)) t *= 0.5;
    return t;
}

int main(void) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[2] = {N, D}, ls[1] = {N};
    int x = mpx_g_input(g, "x", MPX_INPUT_DATA, 2, xs);
    int y = mpx_g_input(g, "y", MPX_INPUT_LABELS, 1, ls);
    int h = mpx_g_linear(g, "lin0", x, D, 0);
    int a = mpx_g_linear(g, "la", h, 1, 0);
    int b = mpx_g_linear(g, "lb", h, 1, 0);
    int s = mpx_g_add(g, "add", a, b);
    int z = mpx_g_linear(g, "lc", s, K, 0);
    mpx_g_softmax_ce(g, "loss", z, y);
    mpx_graph_keep_grads(g, 1);
    mpx_precision p;
    mpx_precision_init(&p, "fp16", "rne", 0);
    REQUIRE(mpx_graph_compile(g, &p, MPX_DEV_CPU, 3) == MPX_OK, "compile: %s", mpx_error_message());

    /* Every value FP16-exact. x = diag(v), v over 16 binades; lin0 = identity; la, lb weights
     * from 2^-4 to 3072 with signs; lc = (4, -4). */
    static float xin[N * D], wa[D], wb[D];
    int32_t lab[N];
    for (int n = 0; n < N; n++) {
        xin[n * D + n] = (float)((n % 3 ? 1 : -1) * ldexp(1.0 + (n % 5) / 8.0, -(n % 16)));
        lab[n] = n % 2;
    }
    mpx_param *w0 = param_named(g, "lin0.weight"), *pa = param_named(g, "la.weight"),
              *pb = param_named(g, "lb.weight"), *pc = param_named(g, "lc.weight");
    REQUIRE(w0 && pa && pb && pc, "parameters not found");
    memset(w0->master, 0, (size_t)w0->numel * sizeof(float));
    for (int d = 0; d < D; d++) {
        w0->master[d * D + d] = 1.0f;
        wa[d] = pa->master[d] = (float)((d % 2 ? -1 : 1) * ldexp(1.0 + (d % 3) / 4.0, d % 16 - 4));
        wb[d] = pb->master[d] = (float)((d % 4 < 2 ? 1 : -1) * ldexp(1.0 + (d % 5) / 8.0, (7 * d) % 11 - 5));
    }
    /* Every fourth sample (label 0) confident by a margin 8 s of 16 to 29 nats: its loss
     * gradient lands in FP16's subnormals, where s * dy with s < 1 loses bits (point g). */
    for (int n = 0; n < N; n += 4)
        xin[n * D + n] = r16((2.0 + 0.1 * n / 4) / ((double)wa[n] + wb[n]));
    pc->master[0] = 4.0f;
    pc->master[1] = -4.0f;
    REQUIRE(mpx_graph_sync_weights(g, 0) == MPX_OK, "sync");
    REQUIRE(mpx_graph_set_input(g, x, xin, MPX_F32, N * D) == MPX_OK, "input");
    REQUIRE(mpx_graph_set_input(g, y, lab, MPX_I32, N) == MPX_OK, "labels");

    mpx_scaling_cfg sc;
    mpx_scaling_defaults(&sc);
    sc.method = MPX_SCALING_ADAPTIVE;
    sc.als = MPX_ALS_REFERENCE;
    sc.u_max = 6e4;
    sc.update_every = 1;
    sc.unscale_fp16 = 1;
    REQUIRE(mpx_graph_forward(g, 1) == MPX_OK, "forward: %s", mpx_error_message());
    mpx_backward_opts bo = {&sc, 16384.0, 0, NULL};
    int64_t nonfinite = -1;
    REQUIRE(mpx_graph_backward(g, &bo, &nonfinite) == MPX_OK, "backward: %s", mpx_error_message());
    CHECK(nonfinite == 0, "%lld non-finite gradients", (long long)nonfinite);

    /* What the executor stored: dy at the add (= la's and lb's output gradient), its scale,
     * the factors. */
    double S_s, s_a, s_b, S_h, unused;
    mpx_graph_layer_scale(g, layer_of(g, "la"), &S_s, &s_a);
    mpx_graph_layer_scale(g, layer_of(g, "lb"), &unused, &s_b);
    mpx_graph_layer_scale(g, layer_of(g, "lin0"), &S_h, &unused);
    float dy[N], hm[N * D];
    REQUIRE(mpx_graph_read_grad(g, s, dy) == MPX_OK, "dy: %s", mpx_error_message());
    REQUIRE(mpx_graph_read_grad(g, h, hm) == MPX_OK, "dh: %s", mpx_error_message());
    for (int n = 0; n < N; n++) dy[n] = (float)(dy[n] * S_s);
    printf("S at the add %g, factors la %g lb %g, target at h %g\n", S_s, s_a, s_b, S_h);

    /* (g): the factor into the FP16 gradient, then one product per element. */
    const double fac[2] = {s_a, s_b};
    const float *wt[2] = {wa, wb};
    static float br[2][N * D];
    double absmax[2] = {0, 0};
    int64_t g_changed = 0;
    for (int i = 0; i < 2; i++)
        for (int n = 0; n < N; n++) {
            const float dyd = r16(fac[i] * dy[n]);
            g_changed += dyd != (float)(fac[i] * dy[n]);
            for (int d = 0; d < D; d++) {
                br[i][n * D + d] = r16((double)dyd * wt[i][d]); /* the consumer's store */
                absmax[i] = fmax(absmax[i], fabs(br[i][n * D + d]));
            }
        }
    CHECK(s_a < 1 || s_b < 1, "a factor below 1 is needed for (g): %g, %g", s_a, s_b);
    CHECK(g_changed > 0, "(g) not exercised: s * dy is FP16-exact everywhere");

    /* (b): the target on the stored magnitudes. */
    const double S[2] = {S_s * s_a, S_s * s_b};
    const double target = code_target(fmax(absmax[0], absmax[1]), S, 6e4);
    CHECK(S_h == target, "(b) target %g, the code's rule gives %g", S_h, target);
    CHECK(mpx_target(absmax, S, 6e4) != target, "(b) not exercised: mpx's rule gives %g too",
          mpx_target(absmax, S, 6e4));

    /* (c): each branch times target / S_i in FP16, then one FP16 addition. */
    int64_t bad = 0, c_changed = 0;
    for (int k = 0; k < N * D; k++) {
        const float ra = r16(br[0][k] * (target / S[0])), rb = r16(br[1][k] * (target / S[1]));
        const float merged = r16((double)ra + rb);
        const float got = (float)(hm[k] * S_h);
        bad += memcmp(&merged, &got, sizeof got) != 0 && !(merged == 0 && got == 0);
        const int n = k / D, d = k % D;
        const double exact = (double)dy[n] * s_a * wa[d] * (target / S[0]) +
                             (double)dy[n] * s_b * wb[d] * (target / S[1]);
        c_changed += merged != r16(exact);
    }
    CHECK(bad == 0, "(c) %lld merged elements differ from the FP16 merge", (long long)bad);
    CHECK(c_changed > 0, "(c) not exercised: FP16 merging changes nothing here");

    /* (d): dW[d] = h[d, d] dy[d] (one product), stored in FP16, divided by S in FP16. */
    const mpx_param *pw[2] = {pa, pb};
    int64_t d_bad = 0, d_changed = 0;
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < D; d++) {
            const float stored = r16((double)xin[d * D + d] * dy[d]);
            const float expect = r16(stored / S_s);
            d_bad += pw[i]->grad[d] != expect;
            d_changed += expect != (float)(stored / S_s);
        }
    CHECK(d_bad == 0, "(d) %lld weight-gradient elements differ from the FP16 unscale", (long long)d_bad);
    CHECK(d_changed > 0, "(d) not exercised: the FP16 division is exact everywhere");
    printf("elements where the code's arithmetic differs from mpx's: (g) %lld of %d, (c) %lld of "
           "%d, (d) %lld of %d\n", (long long)g_changed, 2 * N, (long long)c_changed, N * D,
           (long long)d_changed, 2 * D);
    mpx_graph_free(g);
    return mpx_test_done(__FILE__);
}
