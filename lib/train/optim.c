/* optim.c — SGD with momentum and AdamW on FP32 masters, global-norm clipping.
 *
 * Gradient norms are reduced per parameter in double over fixed blocks, so the result does not
 * depend on the thread count (determinism: same seed and threads -> same trajectory).
 */
#include "mpx/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mpx_optimizer {
    mpx_graph *g;
    mpx_optim_cfg cfg;
    int n_state;      /* 1 for SGD (momentum), 2 for AdamW (m, v) */
    float **state;    /* [n_params * n_state] */
    int64_t steps;
};

int mpx_optimizer_parse(const char *name) {
    if (strcmp(name, "sgd") == 0) return MPX_OPT_SGD;
    if (strcmp(name, "adamw") == 0) return MPX_OPT_ADAMW;
    return -1;
}

mpx_status mpx_optimizer_create(mpx_graph *g, const mpx_optim_cfg *cfg, mpx_optimizer **out) {
    mpx_optimizer *o = mpx_calloc(1, sizeof *o);
    if (!o) return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the optimizer");
    o->g = g;
    o->cfg = *cfg;
    o->n_state = cfg->kind == MPX_OPT_ADAMW ? 2 : 1;
    int np = mpx_graph_n_params(g);
    o->state = mpx_calloc((size_t)(np > 0 ? np : 1) * (size_t)o->n_state, sizeof *o->state);
    if (!o->state) {
        free(o);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the optimizer");
    }
    for (int i = 0; i < np * o->n_state; i++) {
        int64_t n = mpx_graph_param(g, i / o->n_state)->numel;
        o->state[i] = mpx_calloc((size_t)n, sizeof(float));
        if (!o->state[i]) {
            mpx_optimizer_free(o);
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for optimizer state");
        }
    }
    *out = o;
    return MPX_OK;
}

void mpx_optimizer_free(mpx_optimizer *o) {
    if (!o) return;
    int np = mpx_graph_n_params(o->g);
    for (int i = 0; i < np * o->n_state; i++) free(o->state[i]);
    free(o->state);
    free(o);
}

int mpx_optimizer_n_state(const mpx_optimizer *o) { return o->n_state; }
float *mpx_optimizer_state(mpx_optimizer *o, int param, int k) {
    return o->state[param * o->n_state + k];
}
int64_t mpx_optimizer_steps(const mpx_optimizer *o) { return o->steps; }
void mpx_optimizer_set_steps(mpx_optimizer *o, int64_t steps) { o->steps = steps; }

static double sumsq(const float *x, int64_t n) {
    enum { BLOCK = 4096 };
    int64_t nb = (n + BLOCK - 1) / BLOCK;
    double total = 0;
    for (int64_t b = 0; b < nb; b++) {
        double s = 0;
        int64_t hi = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
        for (int64_t i = b * BLOCK; i < hi; i++) s += (double)x[i] * x[i];
        total += s;
    }
    return total;
}

mpx_status mpx_optimizer_step(mpx_optimizer *o, double lr, double *grad_norm) {
    const mpx_optim_cfg *c = &o->cfg;
    int np = mpx_graph_n_params(o->g);
    double ss = 0;
    for (int i = 0; i < np; i++) {
        mpx_param *p = mpx_graph_param(o->g, i);
        ss += sumsq(p->grad, p->numel);
    }
    double norm = sqrt(ss);
    if (grad_norm) *grad_norm = norm;
    if (!isfinite(norm))
        return mpx_fail(MPX_ERR_NUMERIC, "non-finite gradient norm reached the optimizer");
    float clip = c->clip_norm > 0 && norm > c->clip_norm ? (float)(c->clip_norm / norm) : 1.0f;
    o->steps++;
    const float flr = (float)lr;
    for (int i = 0; i < np; i++) {
        mpx_param *p = mpx_graph_param(o->g, i);
        float *w = p->master, *g = p->grad;
        const float wd = p->decay ? (float)c->weight_decay : 0.0f;
        const int64_t n = p->numel;
        if (c->kind == MPX_OPT_SGD) {
            float *v = o->state[i];
            const float mom = (float)c->momentum;
            const int nest = c->nesterov;
#pragma omp parallel for schedule(static) if (n > 65536)
            for (int64_t k = 0; k < n; k++) {
                float gk = g[k] * clip + wd * w[k];
                v[k] = mom * v[k] + gk;
                w[k] -= flr * (nest ? gk + mom * v[k] : v[k]);
            }
        } else {
            float *m = o->state[2 * i], *v = o->state[2 * i + 1];
            /* 1 - beta in double first: 1 - (float)0.999 is off by 1.3e-5 relative. */
            const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
            const float ob1 = (float)(1.0 - c->beta1), ob2 = (float)(1.0 - c->beta2);
            const float bc1 = (float)(1.0 - pow(c->beta1, (double)o->steps));
            const float bc2 = (float)(1.0 - pow(c->beta2, (double)o->steps));
#pragma omp parallel for schedule(static) if (n > 65536)
            for (int64_t k = 0; k < n; k++) {
                float gk = g[k] * clip;
                m[k] = b1 * m[k] + ob1 * gk;
                v[k] = b2 * v[k] + ob2 * gk * gk;
                float mhat = m[k] / bc1, vhat = v[k] / bc2;
                w[k] -= flr * (mhat / (sqrtf(vhat) + eps) + wd * w[k]);
            }
        }
    }
    return MPX_OK;
}

int mpx_lr_parse(const char *name) {
    static const char *const names[] = {"constant", "step", "cosine", "linear"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

double mpx_lr_at(const mpx_lr_schedule *s, int64_t step) {
    if (step < s->warmup_steps) {
        double f = (double)step / (double)s->warmup_steps;
        return s->base_lr * (s->warmup_start + (1.0 - s->warmup_start) * f);
    }
    double base = s->base_lr, floor_lr = s->base_lr * s->final_lr_frac;
    int64_t span = s->total_steps - s->warmup_steps;
    double t = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
    if (t > 1) t = 1;
    switch (s->kind) {
    case MPX_LR_CONSTANT: return base;
    case MPX_LR_STEP: {
        double lr = base;
        for (int i = 0; i < 8 && s->milestones[i] > 0; i++)
            if (step >= s->milestones[i]) lr *= s->step_gamma;
        return lr;
    }
    case MPX_LR_COSINE: return floor_lr + (base - floor_lr) * 0.5 * (1.0 + cos(M_PI * t));
    case MPX_LR_LINEAR: return base + (floor_lr - base) * t;
    }
    return base;
}
