/* optim.c — SGD with momentum and AdamW on FP32 masters, global-norm clipping.
 *
 * The update rules run on the graph's backend (mpx_backend.sgd_update / adamw_update), next to
 * the masters and gradients; state (momentum, Adam moments) is allocated there too. The
 * gradient norm is reduced per parameter in double over fixed blocks, so results do not depend
 * on the thread count (same seed and threads -> same trajectory). The per-parameter sums land in
 * backend memory and are read with one download; in training the backward pass has read them
 * already with the step's status (mpx_graph_grad_norm), so SGD and AdamW updates make the host
 * wait for nothing and LAMB waits once for its trust ratios. State the policy keeps in storage
 * is rounded into the low format after each update with the policy's update rounding
 * (round_state).
 */
#include "mpx/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "mpx/precision.h"

struct mpx_optimizer {
    mpx_graph *g;
    const mpx_backend *be;
    mpx_optim_cfg cfg;
    int n_state;      /* 1 for SGD (momentum), 2 for AdamW (m, v) */
    float **state;    /* [n_params * n_state], backend memory */
    int64_t steps;
    /* Sums of squares, one slot per parameter (and for LAMB two more: weights, directions),
     * written by the backend and read with one download: one wait per reduction, not one per
     * parameter. */
    double *dev_sums, *host_sums;
    /* The low format the state lives in (F32: FP32 state) and a buffer of the largest
     * parameter's size in it, through which round_state passes the state. */
    mpx_dtype state_dtype;
    void *state_tmp;
    /* mpx_optimizer_watch: the next update writes each element's d into delta[i] (backend
     * memory); host copies of the stored parameters before (w0) and after (w1) and of d. */
    int watching, watched;
    float **delta;
    float *w0, *w1, *d;
};

int mpx_optimizer_parse(const char *name) {
    if (strcmp(name, "sgd") == 0) return MPX_OPT_SGD;
    if (strcmp(name, "adamw") == 0) return MPX_OPT_ADAMW;
    if (strcmp(name, "lamb") == 0) return MPX_OPT_LAMB;
    return -1;
}

mpx_status mpx_optimizer_create(mpx_graph *g, const mpx_optim_cfg *cfg, mpx_optimizer **out) {
    const mpx_backend *be = mpx_graph_backend(g);
    if (!be) return mpx_fail(MPX_ERR_INTERNAL, "optimizer: the graph is not compiled");
    mpx_optimizer *o = mpx_calloc(1, sizeof *o);
    if (!o) return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the optimizer");
    o->g = g;
    o->be = be;
    o->cfg = *cfg;
    o->n_state = cfg->kind == MPX_OPT_SGD ? 1 : 2;
    int np = mpx_graph_n_params(g);
    o->state = mpx_calloc((size_t)(np > 0 ? np : 1) * (size_t)o->n_state, sizeof *o->state);
    if (!o->state) {
        free(o);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the optimizer");
    }
    o->dev_sums = be->alloc(be, (size_t)(np > 0 ? 3 * np : 1) * sizeof(double));
    o->host_sums = mpx_calloc((size_t)(np > 0 ? 3 * np : 1), sizeof(double));
    if (!o->dev_sums || !o->host_sums) {
        mpx_optimizer_free(o);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the optimizer");
    }
    for (int i = 0; i < np * o->n_state; i++) {
        int64_t n = mpx_graph_param(g, i / o->n_state)->numel;
        o->state[i] = be->alloc(be, (size_t)n * sizeof(float)); /* zeroed */
        if (!o->state[i]) {
            mpx_optimizer_free(o);
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for optimizer state on %s", be->name);
        }
    }
    o->state_dtype = mpx_precision_dtype(mpx_graph_precision(g), MPX_ROLE_OPT_STATE);
    if (o->state_dtype != MPX_F32) {
        int64_t most = 1;
        for (int i = 0; i < np; i++)
            if (mpx_graph_param(g, i)->numel > most) most = mpx_graph_param(g, i)->numel;
        o->state_tmp = be->alloc(be, (size_t)most * mpx_dtype_size(o->state_dtype));
        if (!o->state_tmp) {
            mpx_optimizer_free(o);
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for optimizer state on %s", be->name);
        }
    }
    *out = o;
    return MPX_OK;
}

void mpx_optimizer_free(mpx_optimizer *o) {
    if (!o) return;
    int np = mpx_graph_n_params(o->g);
    for (int i = 0; i < np * o->n_state; i++)
        if (o->state[i]) o->be->free(o->be, o->state[i]);
    if (o->dev_sums) o->be->free(o->be, o->dev_sums);
    if (o->state_tmp) o->be->free(o->be, o->state_tmp);
    if (o->delta)
        for (int i = 0; i < np; i++)
            if (o->delta[i]) o->be->free(o->be, o->delta[i]);
    free(o->delta);
    free(o->w0);
    free(o->w1);
    free(o->d);
    free(o->host_sums);
    free(o->state);
    free(o);
}

int mpx_optimizer_n_state(const mpx_optimizer *o) { return o->n_state; }
float *mpx_optimizer_state(mpx_optimizer *o, int param, int k) {
    return o->state[param * o->n_state + k];
}
int64_t mpx_optimizer_steps(const mpx_optimizer *o) { return o->steps; }
void mpx_optimizer_set_steps(mpx_optimizer *o, int64_t steps) { o->steps = steps; }

/* AdamW/LAMB step constants. 1 - beta in double first: 1 - (float)0.999 is off by 1.3e-5
 * relative. */
static mpx_adamw_step adam_step(const mpx_optim_cfg *c, int64_t steps, double lr, float wd, float clip) {
    mpx_adamw_step s = {(float)lr,
                        (float)c->beta1,
                        (float)c->beta2,
                        (float)(1.0 - c->beta1),
                        (float)(1.0 - c->beta2),
                        (float)c->eps,
                        (float)(1.0 - pow(c->beta1, (double)steps)),
                        (float)(1.0 - pow(c->beta2, (double)steps)),
                        wd,
                        clip,
                        NULL};
    return s;
}

/* Where the update of parameter i writes its d: its delta buffer while watching, else nowhere. */
static float *delta_of(const mpx_optimizer *o, int i) { return o->watching ? o->delta[i] : NULL; }

/* The state of parameter i rounded into the policy's low format (as it rounds OPT_STATE; a
 * stochastic stream per step, parameter and state array). Two passes through state_tmp. */
static void round_state(mpx_optimizer *o, int i) {
    if (o->state_dtype == MPX_F32) return;
    const mpx_precision *p = mpx_graph_precision(o->g);
    const size_t n = (size_t)mpx_graph_param(o->g, i)->numel;
    for (int k = 0; k < o->n_state; k++) {
        mpx_cast_spec s = mpx_cast_plain(o->state_dtype);
        s.rounding = mpx_precision_rounding(p, MPX_ROLE_OPT_STATE);
        s.seed = p->seed;
        /* graph_exec.c's stream layout (step, id, kind) with kinds past the graph's 1..5 */
        s.stream = ((uint64_t)o->steps << 24) ^ ((uint64_t)(unsigned)i << 4) ^ (uint64_t)(8 + k);
        float *x = o->state[i * o->n_state + k];
        o->be->cast(o->be, &s, x, o->state_tmp, n);
        o->be->decode(o->be, o->state_dtype, o->state_tmp, x, n);
    }
}

/* Download the first n sums (the reduction's one wait) and report a backend failure. */
static mpx_status read_sums(mpx_optimizer *o, int n) {
    o->be->download(o->be, o->host_sums, o->dev_sums, (size_t)n * sizeof(double));
    mpx_status st = o->be->last_error(o->be);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "optimizer: sums of squares");
}

mpx_status mpx_optimizer_step(mpx_optimizer *o, double lr, double *grad_norm) {
    int np = mpx_graph_n_params(o->g);
    for (int i = 0; i < np; i++) {
        mpx_param *p = mpx_graph_param(o->g, i);
        o->be->sumsq(o->be, p->grad, (size_t)p->numel, &o->dev_sums[i]);
    }
    MPX_TRY(read_sums(o, np));
    double ss = 0;
    for (int i = 0; i < np; i++) ss += o->host_sums[i];
    double norm = sqrt(ss);
    if (grad_norm) *grad_norm = norm;
    return mpx_optimizer_step_norm(o, lr, norm);
}

mpx_status mpx_optimizer_step_norm(mpx_optimizer *o, double lr, double norm) {
    const mpx_optim_cfg *c = &o->cfg;
    int np = mpx_graph_n_params(o->g);
    if (!isfinite(norm))
        return mpx_fail(MPX_ERR_NUMERIC, "non-finite gradient norm reached the optimizer");
    float clip = c->clip_norm > 0 && norm > c->clip_norm ? (float)(c->clip_norm / norm) : 1.0f;
    o->steps++;
    if (c->kind == MPX_OPT_LAMB) {
        /* Every direction first (the direction overwrites the gradient, which nothing reads
         * after the update), then all trust-ratio norms with one wait, then the updates; the
         * parameters are independent, so the order changes no bit. */
        for (int i = 0; i < np; i++) {
            mpx_param *p = mpx_graph_param(o->g, i);
            const float wd = p->decay ? (float)c->weight_decay : 0.0f;
            mpx_adamw_step s = adam_step(c, o->steps, lr, wd, clip);
            o->be->lamb_direction(o->be, p->master, p->grad, o->state[2 * i], o->state[2 * i + 1],
                                  (size_t)p->numel, &s);
            round_state(o, i);
            o->be->sumsq(o->be, p->master, (size_t)p->numel, &o->dev_sums[np + 2 * i]);
            o->be->sumsq(o->be, p->grad, (size_t)p->numel, &o->dev_sums[np + 2 * i + 1]);
        }
        MPX_TRY(read_sums(o, 3 * np));
        for (int i = 0; i < np; i++) {
            mpx_param *p = mpx_graph_param(o->g, i);
            double wn = sqrt(o->host_sums[np + 2 * i]), un = sqrt(o->host_sums[np + 2 * i + 1]);
            double trust = wn > 0 && un > 0 ? wn / un : 1.0;
            o->be->scaled_sub(o->be, p->master, p->grad, (size_t)p->numel, (float)(lr * trust),
                              delta_of(o, i));
        }
        o->watched = o->watching;
        return MPX_OK;
    }
    for (int i = 0; i < np; i++) {
        mpx_param *p = mpx_graph_param(o->g, i);
        const float wd = p->decay ? (float)c->weight_decay : 0.0f;
        if (c->kind == MPX_OPT_SGD) {
            mpx_sgd_step s = {(float)lr, (float)c->momentum, wd, clip, c->nesterov, delta_of(o, i)};
            o->be->sgd_update(o->be, p->master, p->grad, o->state[i], (size_t)p->numel, &s);
        } else {
            mpx_adamw_step s = adam_step(c, o->steps, lr, wd, clip);
            s.delta = delta_of(o, i);
            o->be->adamw_update(o->be, p->master, p->grad, o->state[2 * i], o->state[2 * i + 1],
                                (size_t)p->numel, &s);
        }
        round_state(o, i);
    }
    o->watched = o->watching;
    return MPX_OK;
}

/* Host copies of every parameter's master (stored values) into dst, in parameter order. */
static void download_masters(mpx_optimizer *o, float *dst) {
    for (int i = 0; i < mpx_graph_n_params(o->g); i++) {
        mpx_param *p = mpx_graph_param(o->g, i);
        o->be->download(o->be, dst, p->master, (size_t)p->numel * sizeof(float));
        dst += p->numel;
    }
}

mpx_status mpx_optimizer_watch(mpx_optimizer *o) {
    const int np = mpx_graph_n_params(o->g);
    const size_t total = (size_t)mpx_graph_param_count(o->g);
    if (!o->delta) {
        o->delta = mpx_calloc((size_t)(np > 0 ? np : 1), sizeof *o->delta);
        o->w0 = malloc((total ? total : 1) * sizeof(float));
        o->w1 = malloc((total ? total : 1) * sizeof(float));
        o->d = malloc((total ? total : 1) * sizeof(float));
        if (!o->delta || !o->w0 || !o->w1 || !o->d)
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for the lost-update statistics");
        for (int i = 0; i < np; i++) {
            o->delta[i] = o->be->alloc(o->be, (size_t)mpx_graph_param(o->g, i)->numel * sizeof(float));
            if (!o->delta[i])
                return mpx_fail(MPX_ERR_NOMEM, "out of memory for the lost-update statistics on %s",
                                o->be->name);
        }
    }
    download_masters(o, o->w0);
    o->watching = 1;
    o->watched = 0;
    mpx_status st = o->be->last_error(o->be);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "optimizer: keeping the parameters");
}

mpx_status mpx_optimizer_watched(mpx_optimizer *o, mpx_layer_stats *stats) {
    const int updated = o->watched;
    o->watching = o->watched = 0;
    if (!updated) return MPX_OK;
    download_masters(o, o->w1);
    float *d = o->d;
    for (int i = 0; i < mpx_graph_n_params(o->g); i++) {
        mpx_param *p = mpx_graph_param(o->g, i);
        o->be->download(o->be, d, o->delta[i], (size_t)p->numel * sizeof(float));
        d += p->numel;
    }
    mpx_status st = o->be->last_error(o->be);
    if (st != MPX_OK) return mpx_fail_context(st, "optimizer: reading the updates");
    size_t off = 0;
    for (int i = 0; i < mpx_graph_n_params(o->g); i++) {
        const int64_t n = mpx_graph_param(o->g, i)->numel;
        const int layer = mpx_graph_param_layer(o->g, i);
        uint64_t nonzero = 0, lost = 0;
        double err = 0;
        for (int64_t k = 0; k < n; k++) {
            const double dk = o->d[off + k];
            if (dk == 0) continue;
            const double w0 = o->w0[off + k], w1 = o->w1[off + k];
            nonzero++;
            lost += w1 == w0;
            err += fabs((w1 - w0) + dk) / fabs(dk);
        }
        off += (size_t)n;
        if (layer < 0) continue;
        /* pooled with the layer's other parameters: the fractions weighted by their counts */
        mpx_layer_stats *ls = &stats[layer];
        const double had = (double)ls->update_nonzero, all = had + (double)nonzero;
        if (all == 0) continue;
        ls->update_lost = (ls->update_lost * had + (double)lost) / all;
        ls->update_error = (ls->update_error * had + err) / all;
        ls->update_nonzero += nonzero;
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
