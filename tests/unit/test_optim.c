/* test_optim.c — optimizers on FP32 masters and learning-rate schedules, against the update
 * rules written out by hand (PyTorch's SGD and AdamW semantics):
 *   SGD:   g' = g + wd w;  v = m v + g';  w -= lr v            (nesterov: w -= lr (g' + m v))
 *   AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *          w -= lr (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd w)
 * Weight decay applies only to parameters marked `decay`; clip_norm rescales the gradient.
 * The rules are evaluated here in double; the optimizer runs in FP32, so the tolerance is a
 * few FP32 ulps of the values involved (relative 1e-6). */
#include <math.h>
#include <string.h>

#include "mpx/graph.h"
#include "mpx/optim.h"
#include "testutil.h"

/* A graph with one linear layer: weight [4, 3] (decay) and bias [3] (no decay). */
static mpx_graph *tiny(void) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[2] = {2, 4}, ls[1] = {2};
    int x = mpx_g_input(g, "x", MPX_INPUT_DATA, 2, xs);
    int y = mpx_g_input(g, "y", MPX_INPUT_LABELS, 1, ls);
    int z = mpx_g_linear(g, "fc", x, 3, 1);
    mpx_g_softmax_ce(g, "loss", z, y);
    mpx_precision p;
    mpx_precision_init(&p, "fp32", "rne", 0);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 1));
    return g;
}

static void set_grads(mpx_graph *g, int step) {
    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        mpx_param *p = mpx_graph_param(g, i);
        for (int64_t k = 0; k < p->numel; k++) p->grad[k] = (float)(0.1 * sin(1.0 + k + 7 * i + 3 * step));
    }
}

static void run(mpx_optimizer_kind kind, int nesterov, double clip) {
    mpx_graph *g = tiny();
    mpx_optim_cfg c = {kind, 0.9, nesterov, 0.01, 0.9, 0.999, 1e-8, clip};
    mpx_optimizer *o;
    CHECK_OK(mpx_optimizer_create(g, &c, &o));
    int np = mpx_graph_n_params(g);
    double w[2][16], m1[2][16], m2[2][16];
    memset(m1, 0, sizeof m1);
    memset(m2, 0, sizeof m2);
    for (int i = 0; i < np; i++)
        for (int64_t k = 0; k < mpx_graph_param(g, i)->numel; k++) w[i][k] = mpx_graph_param(g, i)->master[k];
    const double lr = 0.05;
    for (int t = 1; t <= 5; t++) {
        set_grads(g, t);
        double norm = 0;
        for (int i = 0; i < np; i++)
            for (int64_t k = 0; k < mpx_graph_param(g, i)->numel; k++)
                norm += (double)mpx_graph_param(g, i)->grad[k] * mpx_graph_param(g, i)->grad[k];
        norm = sqrt(norm);
        double f = clip > 0 && norm > clip ? clip / norm : 1.0, got_norm;
        CHECK_OK(mpx_optimizer_step(o, lr, &got_norm));
        CHECK(fabs(got_norm - norm) <= 1e-6 * norm, "gradient norm %g vs %g", got_norm, norm);
        for (int i = 0; i < np; i++) {
            mpx_param *p = mpx_graph_param(g, i);
            double wd = p->decay ? 0.01 : 0.0;
            for (int64_t k = 0; k < p->numel; k++) {
                double gk = p->grad[k] * f;
                if (kind == MPX_OPT_SGD) {
                    gk += wd * w[i][k];
                    m1[i][k] = 0.9 * m1[i][k] + gk;
                    w[i][k] -= lr * (nesterov ? gk + 0.9 * m1[i][k] : m1[i][k]);
                } else {
                    m1[i][k] = 0.9 * m1[i][k] + 0.1 * gk;
                    m2[i][k] = 0.999 * m2[i][k] + 0.001 * gk * gk;
                    double mh = m1[i][k] / (1 - pow(0.9, t)), vh = m2[i][k] / (1 - pow(0.999, t));
                    w[i][k] -= lr * (mh / (sqrt(vh) + 1e-8) + wd * w[i][k]);
                }
                CHECK(fabs(p->master[k] - w[i][k]) <= 1e-6 * (fabs(w[i][k]) + 1e-3),
                      "%s step %d %s[%lld]: %.9g vs %.9g", kind == MPX_OPT_SGD ? "sgd" : "adamw", t,
                      p->name, (long long)k, p->master[k], w[i][k]);
            }
        }
    }
    CHECK(mpx_optimizer_steps(o) == 5, "step count %lld", (long long)mpx_optimizer_steps(o));
    /* A non-finite gradient never reaches the masters. */
    mpx_graph_param(g, 0)->grad[0] = NAN;
    float before = mpx_graph_param(g, 0)->master[1];
    CHECK(mpx_optimizer_step(o, lr, NULL) == MPX_ERR_NUMERIC, "NaN gradient accepted");
    CHECK(mpx_graph_param(g, 0)->master[1] == before, "NaN step changed the weights");
    mpx_optimizer_free(o);
    mpx_graph_free(g);
}

static void schedules(void) {
    mpx_lr_schedule s = {MPX_LR_COSINE, 0.4, 10, 0.1, 110, 0.0, 0.1, {0}};
    CHECK(fabs(mpx_lr_at(&s, 0) - 0.04) < 1e-12, "warm-up start %g", mpx_lr_at(&s, 0));
    CHECK(fabs(mpx_lr_at(&s, 5) - 0.22) < 1e-12, "warm-up middle %g", mpx_lr_at(&s, 5));
    CHECK(fabs(mpx_lr_at(&s, 10) - 0.4) < 1e-12, "cosine start %g", mpx_lr_at(&s, 10));
    CHECK(fabs(mpx_lr_at(&s, 60) - 0.2) < 1e-12, "cosine half-way %g", mpx_lr_at(&s, 60));
    CHECK(fabs(mpx_lr_at(&s, 110)) < 1e-12, "cosine end %g", mpx_lr_at(&s, 110));
    s.kind = MPX_LR_LINEAR;
    s.final_lr_frac = 0.25;
    CHECK(fabs(mpx_lr_at(&s, 60) - 0.25) < 1e-12, "linear half-way %g", mpx_lr_at(&s, 60));
    CHECK(fabs(mpx_lr_at(&s, 110) - 0.1) < 1e-12, "linear end %g", mpx_lr_at(&s, 110));
    mpx_lr_schedule st = {MPX_LR_STEP, 1.0, 0, 1.0, 100, 0, 0.1, {30, 60, 0}};
    CHECK(mpx_lr_at(&st, 29) == 1.0 && fabs(mpx_lr_at(&st, 30) - 0.1) < 1e-12 &&
              fabs(mpx_lr_at(&st, 99) - 0.01) < 1e-12,
          "step schedule %g %g %g", mpx_lr_at(&st, 29), mpx_lr_at(&st, 30), mpx_lr_at(&st, 99));
    mpx_lr_schedule c = {MPX_LR_CONSTANT, 0.3, 0, 1.0, 100, 0, 0.1, {0}};
    CHECK(mpx_lr_at(&c, 0) == 0.3 && mpx_lr_at(&c, 1000) == 0.3, "constant");
    CHECK(mpx_lr_parse("cosine") == MPX_LR_COSINE && mpx_lr_parse("cosin") < 0, "lr names");
    CHECK(mpx_optimizer_parse("adamw") == MPX_OPT_ADAMW && mpx_optimizer_parse("adam") < 0, "optimizer names");
}

int main(void) {
    run(MPX_OPT_SGD, 0, 0);
    run(MPX_OPT_SGD, 1, 0);
    run(MPX_OPT_SGD, 0, 0.05);
    run(MPX_OPT_ADAMW, 0, 0);
    schedules();
    return mpx_test_done(__FILE__);
}
