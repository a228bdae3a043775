/* test_master_weights.c — the master-weights ablation (MPT §3.1) through the optimizer and the
 * graph's weight sync, against the rule written out by hand:
 *   - without master weights an SGD step stores w <- round16(w - lr g) (RNE): the FP32 result
 *     of the same update rounded once, and an update below half an ulp of w leaves w as it was;
 *     with masters the FP32 master keeps it;
 *   - with stochastic rounding the stored weight moves up or down with probability given by
 *     the distance: over 4096 equal updates the mean lands on w - d within binomial bounds;
 *   - the lost-update statistics (mpx_optimizer_watch / _watched) count exactly the elements
 *     whose nonzero update left the stored weight unchanged, and the mean relative error;
 *     a step that updates nothing leaves them 0;
 *   - optimizer state kept in storage holds FP16 values, the FP32 rule's rounded;
 *   - update_rounding = stochastic with rounding = rne (Zamirai et al. 2020): the update rounds
 *     stochastically as above while the forward pass's casts stay those of an all-RNE run (and
 *     differ from an all-stochastic one's, so the comparison can tell);
 *   - the initial-weights digest (what pairs runs) is that of the FP32 values the step-0 sync
 *     took: a masterless graph and an FP32 one from the same weights share it, though the
 *     masterless one's masters hold the rounded values; other weights give another digest.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "mpx/optim.h"
#include "testutil.h"

enum { IN = 64, OUT = 64 };

/* One linear layer, weight [IN, OUT] (decay) and no bias, in `mode` with `rounding`; masters
 * and state as asked; the optimizer's roundings stochastic when sr_update. */
static mpx_graph *layer_sr(const char *mode, const char *rounding, int masters, int state16,
                           int sr_update) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[2] = {2, IN}, ls[1] = {2};
    int x = mpx_g_input(g, "x", MPX_INPUT_DATA, 2, xs);
    int y = mpx_g_input(g, "y", MPX_INPUT_LABELS, 1, ls);
    int z = mpx_g_linear(g, "fc", x, OUT, 0);
    mpx_g_softmax_ce(g, "loss", z, y);
    mpx_precision p;
    mpx_precision_init(&p, mode, rounding, 7);
    CHECK(mpx_precision_set_masters(&p, masters, state16) == 0, "policy refused");
    if (sr_update) p.update_rounding = MPX_ROUND_STOCHASTIC;
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 1));
    return g;
}

static mpx_graph *layer(const char *mode, const char *rounding, int masters, int state16) {
    return layer_sr(mode, rounding, masters, state16, 0);
}

/* Weights w (all elements the same value, or from `w` when not NULL), then the sync. */
static mpx_param *set_weights(mpx_graph *g, float value, const float *w) {
    mpx_param *p = mpx_graph_param(g, 0);
    for (int64_t k = 0; k < p->numel; k++) p->master[k] = w ? w[k] : value;
    CHECK_OK(mpx_graph_sync_weights(g, 0));
    return p;
}

/* One plain SGD step (no momentum, no decay) with gradient gk = grad[k] and learning rate lr. */
static void sgd_step(mpx_graph *g, mpx_optimizer *o, const float *grad, double lr, int64_t step) {
    mpx_param *p = mpx_graph_param(g, 0);
    memcpy(p->grad, grad, (size_t)p->numel * sizeof(float));
    CHECK_OK(mpx_optimizer_step(o, lr, NULL));
    CHECK_OK(mpx_graph_sync_weights(g, step + 1));
}

static void test_rne_without_masters(void) {
    mpx_optim_cfg c = {MPX_OPT_SGD, 0.0, 0, 0.0, 0.9, 0.999, 1e-8, 0};
    float w0[IN * OUT], grad[IN * OUT];
    for (int k = 0; k < IN * OUT; k++) {
        /* weights across binades, fp16-exact; gradients from tiny to large */
        w0[k] = mpx_round_to(MPX_F16, (float)((k % 2 ? -1 : 1) * ldexp(1.0 + (k % 7) / 8.0, k % 9 - 4)));
        grad[k] = (float)(ldexp(1.0, -(k % 23)) * (k % 3 ? 1 : -1));
    }
    const double lr = 0.05;
    mpx_graph *pure = layer("fp16", "rne", 0, 0), *mast = layer("fp16", "rne", 1, 0);
    mpx_optimizer *op = NULL, *om = NULL;
    CHECK_OK(mpx_optimizer_create(pure, &c, &op));
    CHECK_OK(mpx_optimizer_create(mast, &c, &om));
    mpx_param *pp = set_weights(pure, 0, w0), *pm = set_weights(mast, 0, w0);
    sgd_step(pure, op, grad, lr, 0);
    sgd_step(mast, om, grad, lr, 0);
    int64_t bad = 0, lost = 0, kept_by_master = 0;
    for (int k = 0; k < IN * OUT; k++) {
        const float d = (float)lr * grad[k];     /* the FP32 update the kernel subtracts */
        const float fp32 = w0[k] - d;            /* the FP32 result */
        const float expect = mpx_round_to(MPX_F16, fp32);
        float stored;
        mpx_decode(MPX_F16, (const uint16_t *)pp->work + k, &stored, 1);
        bad += pp->master[k] != expect || stored != expect;
        lost += expect == w0[k];
        /* with masters the FP32 master holds the FP32 result; its working copy is rounded */
        kept_by_master += pm->master[k] == fp32 && fp32 != w0[k];
        bad += pm->master[k] != fp32;
    }
    CHECK(bad == 0, "%lld elements differ from round16(w - lr g)", (long long)bad);
    CHECK(lost > 100 && kept_by_master >= lost, "the construction must lose updates: %lld lost, "
          "%lld kept by the FP32 master", (long long)lost, (long long)kept_by_master);
    /* One element by hand: w = 1, d = 0.05 * 2^-12 = 1.2e-5 < 2^-11 (half an ulp of 1): lost. */
    const float one = 1.0f, tiny = (float)ldexp(1.0, -12);
    float w1[IN * OUT], g1[IN * OUT];
    for (int k = 0; k < IN * OUT; k++) w1[k] = one, g1[k] = tiny;
    set_weights(pure, 0, w1);
    sgd_step(pure, op, g1, lr, 1);
    CHECK(pp->master[0] == 1.0f, "w = 1 - 1.2e-5 stored as %.9g, expected 1", pp->master[0]);
    mpx_optimizer_free(op);
    mpx_optimizer_free(om);
    mpx_graph_free(pure);
    mpx_graph_free(mast);
}

/* One SGD step w = 1, d = 2^-13 on the graph (stochastic update rounding). */
static void check_stochastic_update(mpx_graph *g) {
    mpx_optim_cfg c = {MPX_OPT_SGD, 0.0, 0, 0.0, 0.9, 0.999, 1e-8, 0};
    mpx_optimizer *o = NULL;
    CHECK_OK(mpx_optimizer_create(g, &c, &o));
    /* w = 1, d = 2^-13 = an eighth of the ulp below 1 (2^-11 between 1 - 2^-11 and 1): each
     * element rounds down to 1 - 2^-11 with probability 1/4 ((1 - (1 - 2^-13)) / 2^-11). */
    float w[IN * OUT], gr[IN * OUT];
    for (int k = 0; k < IN * OUT; k++) w[k] = 1.0f, gr[k] = (float)ldexp(1.0, -13) / 0.5f;
    mpx_param *p = set_weights(g, 0, w);
    sgd_step(g, o, gr, 0.5, 0);
    const double lo = 1.0 - ldexp(1.0, -11);
    int64_t down = 0, other = 0;
    double mean = 0;
    for (int k = 0; k < IN * OUT; k++) {
        down += p->master[k] == (float)lo;
        other += p->master[k] != (float)lo && p->master[k] != 1.0f;
        mean += p->master[k];
    }
    mean /= IN * OUT;
    const double pr = 0.25, n = IN * OUT, sd = sqrt(n * pr * (1 - pr));
    CHECK(other == 0, "%lld elements on neither neighbour", (long long)other);
    CHECK(fabs((double)down - n * pr) < 5 * sd, "%lld rounded down, expected %.0f +- %.0f",
          (long long)down, n * pr, sd);
    CHECK(fabs(mean - (1.0 - ldexp(1.0, -13))) < 5 * sd / n * ldexp(1.0, -11),
          "mean %.9g, expected 1 - 2^-13 = %.9g", mean, 1.0 - ldexp(1.0, -13));
    mpx_optimizer_free(o);
}

static void test_stochastic_without_masters(void) {
    mpx_graph *g = layer("fp16", "stochastic", 0, 0);
    check_stochastic_update(g);
    mpx_graph_free(g);
}

/* The layer's stored output z for inputs x of a few binades and weights w (same for every
 * graph), read back as FP32. */
static void forward_z(mpx_graph *g, float *z) {
    float x[2 * IN], w[IN * OUT];
    int32_t y[2] = {1, 2};
    for (int k = 0; k < 2 * IN; k++) x[k] = (float)ldexp(1.0 + (k % 5) / 7.0, k % 6 - 3);
    for (int k = 0; k < IN * OUT; k++) /* FP16-exact: the weights' own cast changes nothing */
        w[k] = mpx_round_to(MPX_F16, (float)((k % 3 - 1) * ldexp(1.0 + (k % 11) / 13.0, -(k % 4))));
    set_weights(g, 0, w);
    CHECK_OK(mpx_graph_set_input(g, 0, x, MPX_F32, 2 * IN));
    CHECK_OK(mpx_graph_set_input(g, 1, y, MPX_I32, 2));
    CHECK_OK(mpx_graph_forward(g, 1));
    CHECK_OK(mpx_graph_read(g, 2, z));
}

static void test_stochastic_update_only(void) {
    mpx_graph *g = layer_sr("fp16", "rne", 0, 0, 1);
    check_stochastic_update(g);
    mpx_graph_free(g);
    float z_upd[2 * OUT], z_rne[2 * OUT], z_sr[2 * OUT];
    const char *rounding[3] = {"rne", "rne", "stochastic"};
    float *out[3] = {z_upd, z_rne, z_sr};
    for (int v = 0; v < 3; v++) {
        g = layer_sr("fp16", rounding[v], 0, 0, v == 0);
        forward_z(g, out[v]);
        mpx_graph_free(g);
    }
    int same_rne = 0, same_sr = 0;
    for (int k = 0; k < 2 * OUT; k++) {
        same_rne += memcmp(&z_upd[k], &z_rne[k], sizeof(float)) == 0;
        same_sr += memcmp(&z_upd[k], &z_sr[k], sizeof(float)) == 0;
    }
    CHECK(same_rne == 2 * OUT, "%d of %d outputs differ from the all-RNE run's", 2 * OUT - same_rne,
          2 * OUT);
    CHECK(same_sr < 2 * OUT, "an all-stochastic run stores the same outputs: the check cannot tell");
}

static void test_lost_update_stats(void) {
    mpx_optim_cfg c = {MPX_OPT_SGD, 0.0, 0, 0.0, 0.9, 0.999, 1e-8, 0};
    mpx_graph *g = layer("fp16", "rne", 0, 0);
    mpx_optimizer *o = NULL;
    CHECK_OK(mpx_optimizer_create(g, &c, &o));
    /* w = 1 everywhere; a quarter of the elements get no gradient, a quarter an update of
     * 2^-12 (lost: below half the ulp 2^-11 under 1), a quarter 2^-10 (exact: 1 - 2^-10 is
     * FP16), a quarter 3 * 2^-12 (stored as 1 - 2^-11, error |2^-11 - 3 2^-12| / (3 2^-12) =
     * 1/3). With lr = 1 the update is the gradient. */
    float w[IN * OUT], gr[IN * OUT];
    static const double upd[4] = {0, 0x1p-12, 0x1p-10, 3 * 0x1p-12};
    for (int k = 0; k < IN * OUT; k++) w[k] = 1.0f, gr[k] = (float)upd[k % 4];
    set_weights(g, 0, w);
    mpx_layer_stats st[2];
    memset(st, 0, sizeof st);
    CHECK_OK(mpx_optimizer_watch(o));
    sgd_step(g, o, gr, 1.0, 0);
    CHECK_OK(mpx_optimizer_watched(o, st));
    const int fc = mpx_graph_param_layer(g, 0);
    REQUIRE_VOID(fc >= 0 && fc < 2, "fc's layer %d", fc);
    const double n = IN * OUT;
    CHECK(st[fc].update_nonzero == (uint64_t)(3 * n / 4), "nonzero %llu, expected %.0f",
          (unsigned long long)st[fc].update_nonzero, 3 * n / 4);
    CHECK(fabs(st[fc].update_lost - 1.0 / 3) < 1e-15, "lost %.17g, expected 1/3",
          st[fc].update_lost);
    /* errors: 1 (lost), 0 (exact), 1/3: mean (1 + 0 + 1/3) / 3 = 4/9, summed in double over
     * 3072 elements (relative rounding at most 3072 * 2^-53 = 3.4e-13) */
    CHECK(fabs(st[fc].update_error - 4.0 / 9) < 1e-12, "error %.17g, expected 4/9",
          st[fc].update_error);
    /* A skipped step (no update between watch and watched) records nothing. */
    memset(st, 0, sizeof st);
    CHECK_OK(mpx_optimizer_watch(o));
    CHECK_OK(mpx_optimizer_watched(o, st));
    CHECK(st[fc].update_nonzero == 0 && st[fc].update_lost == 0, "skipped step recorded");
    /* With FP32 masters the same updates all land (the master keeps 1 - 2^-12). */
    mpx_graph *m = layer("fp16", "rne", 1, 0);
    mpx_optimizer *om = NULL;
    CHECK_OK(mpx_optimizer_create(m, &c, &om));
    set_weights(m, 0, w);
    memset(st, 0, sizeof st);
    CHECK_OK(mpx_optimizer_watch(om));
    sgd_step(m, om, gr, 1.0, 0);
    CHECK_OK(mpx_optimizer_watched(om, st));
    CHECK(st[fc].update_lost == 0 && st[fc].update_error == 0,
          "with masters: lost %g error %g", st[fc].update_lost, st[fc].update_error);
    mpx_optimizer_free(om);
    mpx_graph_free(m);
    mpx_optimizer_free(o);
    mpx_graph_free(g);
}

static void test_state_in_storage(void) {
    mpx_optim_cfg c = {MPX_OPT_SGD, 0.9, 0, 0.0, 0.9, 0.999, 1e-8, 0};
    mpx_graph *g = layer("fp16", "rne", 0, 1);
    mpx_optimizer *o = NULL;
    CHECK_OK(mpx_optimizer_create(g, &c, &o));
    REQUIRE_VOID(o, "no optimizer");
    float w[IN * OUT], gr[IN * OUT];
    for (int k = 0; k < IN * OUT; k++) w[k] = 0.5f, gr[k] = (float)(1e-3 * (1 + k % 17) / 3.0);
    set_weights(g, 0, w);
    sgd_step(g, o, gr, 0.1, 0);
    /* v = 0.9 * 0 + g, then rounded: round16(g); a second step v = round16(0.9 v + g) */
    const float *v = mpx_optimizer_state(o, 0, 0);
    int64_t bad = 0;
    for (int k = 0; k < IN * OUT; k++) bad += v[k] != mpx_round_to(MPX_F16, gr[k]);
    CHECK(bad == 0, "%lld momentum values are not round16(g)", (long long)bad);
    float v1[IN * OUT];
    memcpy(v1, v, sizeof v1);
    sgd_step(g, o, gr, 0.1, 1);
    bad = 0;
    for (int k = 0; k < IN * OUT; k++) bad += v[k] != mpx_round_to(MPX_F16, 0.9f * v1[k] + gr[k]);
    CHECK(bad == 0, "%lld momentum values are not round16(0.9 v + g)", (long long)bad);
    mpx_optimizer_free(o);
    mpx_graph_free(g);
}

static void test_init_digest(void) {
    float w[IN * OUT];
    for (int k = 0; k < IN * OUT; k++) w[k] = (float)(k % 13 - 6) / 7.0f; /* not FP16-exact */
    mpx_graph *pure = layer("fp16", "rne", 0, 0), *fp32 = layer("fp32", "rne", 1, 0);
    mpx_param *pp = set_weights(pure, 0, w);
    set_weights(fp32, 0, w);
    CHECK(pp->master[1] != w[1], "the masterless graph kept the FP32 weight %.9g", w[1]);
    CHECK(strncmp(mpx_graph_init_digest(pure), "fnv1a64:", 8) == 0 &&
          strlen(mpx_graph_init_digest(pure)) == 24, "digest '%s'", mpx_graph_init_digest(pure));
    CHECK(strcmp(mpx_graph_init_digest(pure), mpx_graph_init_digest(fp32)) == 0,
          "same weights, digests %s and %s", mpx_graph_init_digest(pure), mpx_graph_init_digest(fp32));
    char before[40];
    snprintf(before, sizeof before, "%s", mpx_graph_init_digest(fp32));
    CHECK_OK(mpx_graph_sync_weights(fp32, 1));
    CHECK(strcmp(before, mpx_graph_init_digest(fp32)) == 0, "a later sync changed the digest");
    w[7] = 0.5f;
    set_weights(fp32, 0, w);
    CHECK(strcmp(before, mpx_graph_init_digest(fp32)) != 0, "other weights, the same digest %s",
          before);
    mpx_graph_free(pure);
    mpx_graph_free(fp32);
}

int main(void) {
    test_rne_without_masters();
    test_stochastic_without_masters();
    test_stochastic_update_only();
    test_lost_update_stats();
    test_state_in_storage();
    test_init_digest();
    return mpx_test_done(__FILE__);
}
