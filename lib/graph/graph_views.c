/* graph_views.c — the views through which ops see storage: the only place that knows how
 * tensors are stored.
 *
 * An op asks for FP32 views; when the backend cannot read the storage dtype natively the view is
 * decoded into scratch, and results written into scratch are rounded into storage on commit (RNE
 * or stochastic, per the precision policy). A backend whose ops decode and round storage
 * themselves (direct_io; for one class of ops alone: op_direct_io, asked with the class of the
 * node whose views are being made, g->view_class) gets the stored tensors instead — inputs
 * always, forward outputs when the policy rounds to nearest — which saves a pass over memory per
 * view and changes no bit. A
 * gradient an op computes comes back in FP32 scratch whenever its commit has more to do than
 * round it to nearest: scale it, count it (statistics steps), shadow it or take its quantile, or
 * merge it with other branches; otherwise (grad_direct) such a backend writes it into its 16-bit
 * storage itself, rounding once as the commit would. Every other gradient commit goes through
 * the backend's counted cast, which also applies the scale factor a gradient picks up (the loss
 * scale at the loss, the layer's factor s under adaptive scaling) — so precision and scaling
 * live here and in the executor, not in the ops.
 */
#include <string.h>

#include "graph_internal.h"
uint64_t round_stream(int64_t step, int id, int kind) {
    return ((uint64_t)step << 24) ^ ((uint64_t)(unsigned)id << 4) ^ (uint64_t)kind;
}

mpx_cast_spec storage_cast(const mpx_graph *g, mpx_dtype dst, uint64_t stream) {
    mpx_cast_spec s = mpx_cast_plain(dst);
    s.rounding = g->prec.rounding;
    s.seed = g->prec.seed;
    s.stream = stream;
    s.stats_format = g->prec.stats_format;
    return s;
}

mpx_tensor make_view(int ndim, const int64_t *shape, mpx_dtype dt, mpx_device dev, void *data) {
    mpx_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.device = dev;
    v.ndim = ndim;
    memcpy(v.shape, shape, (size_t)ndim * sizeof *shape);
    v.data = data;
    return v;
}

/* Whether ops read tensors stored as `dt` as they are (natively, or decoding as they load). */
static int reads_stored(const mpx_graph *g, mpx_dtype dt) {
    if (g->be->native(g->be, dt)) return 1;
    if (!g->prec.direct_io) return 0;
    return (g->be->direct_io && g->be->direct_io(g->be, dt)) ||
           (g->be->op_direct_io && g->be->op_direct_io(g->be, g->view_class, dt));
}

/* Whether ops write forward values stored as `dt` themselves: natively, or rounding to nearest
 * as the commit would (stochastic rounding needs the cast's streams, so it keeps the commit). */
static int writes_stored(const mpx_graph *g, mpx_dtype dt) {
    return g->be->native(g->be, dt) || (reads_stored(g, dt) && g->prec.rounding == MPX_ROUND_RNE);
}

/* A view of `numel` elements stored as `dt` at `data` for an op to read: the storage itself when
 * the ops read it (reads_stored), else decoded into FP32 scratch. */
mpx_status view_of(mpx_graph *g, int ndim, const int64_t *shape, mpx_dtype dt, void *data,
                          const char *name, mpx_tensor *v) {
    if (reads_stored(g, dt)) {
        *v = make_view(ndim, shape, dt, g->be->device, data);
        return MPX_OK;
    }
    int64_t n = mpx_shape_numel(ndim, shape);
    float *f = scratch_take(g, n);
    if (!f) return scratch_fail(g, name);
    g->be->decode(g->be, dt, data, f, (size_t)n);
    *v = make_view(ndim, shape, MPX_F32, g->be->device, f);
    return MPX_OK;
}

mpx_status view_value(mpx_graph *g, int tensor, mpx_tensor *v) {
    gtensor *t = &g->tensors[tensor];
    return view_of(g, t->ndim, t->shape, t->plan.dtype, t->plan.value, t->name, v);
}

mpx_status view_output(mpx_graph *g, int tensor, mpx_tensor *v) {
    gtensor *t = &g->tensors[tensor];
    if (writes_stored(g, t->plan.dtype)) {
        *v = make_view(t->ndim, t->shape, t->plan.dtype, g->be->device, t->plan.value);
        return MPX_OK;
    }
    float *f = scratch_take(g, t->numel);
    if (!f) return scratch_fail(g, t->name);
    *v = make_view(t->ndim, t->shape, MPX_F32, g->be->device, f);
    return MPX_OK;
}

mpx_status commit_value(mpx_graph *g, int tensor, const mpx_tensor *v) {
    gtensor *t = &g->tensors[tensor];
    if (v->data == t->plan.value) return MPX_OK;
    mpx_cast_spec s =
        storage_cast(g, t->plan.dtype, round_stream(g->step, t->plan.round_id, RS_VALUE));
    g->be->cast(g->be, &s, v->data, t->plan.value, (size_t)t->numel);
    return MPX_OK;
}

mpx_status view_param(mpx_graph *g, int param, mpx_tensor *v) {
    mpx_param *p = &g->params[param];
    return view_of(g, p->ndim, p->shape, p->work_dtype, p->work, p->name, v);
}

mpx_status view_out_grad(mpx_graph *g, gnode *n, mpx_tensor *v) {
    gtensor *t = &g->tensors[n->out];
    if (t->pass.grad_alias >= 0) t = &g->tensors[t->pass.grad_alias]; /* relu_bwd_fused */
    return view_of(g, t->ndim, t->shape, t->plan.grad_dtype, t->plan.grad, t->name, v);
}

int consumer_slot(const gtensor *t, const gnode *g_nodes, const gnode *n, int slot) {
    /* The k-th appearance of n among t's consumers matches n's k-th input slot reading t. */
    int node = (int)(n - g_nodes), k = 0;
    for (int s = 0; s < slot; s++)
        if (n->in[s] == n->in[slot]) k++;
    for (int c = 0; c < t->n_consumers; c++)
        if (t->consumers[c] == node && k-- == 0) return c;
    return -1;
}

/* The factor node n's input gradients pick up on their commit: the layer's adaptive factor s
 * (unless it was multiplied into dy already: factor_in_dy), and at the loss the whole seed
 * scale (the loss computes its gradient from nothing scaled). */
static double grad_multiplier(const gnode *n) {
    return (n->sc.factor_in_dy ? 1.0 : n->sc.layer_scale) *
           (n->seeds_gradient ? n->sc.s_prev : 1.0);
}

/* Whether n's backward may write the gradient of tensor t (input `slot`, whose sole consumer n
 * is) into t's 16-bit storage itself: the commit would only round it to nearest (cast_grad:
 * nothing counted, shadowed or measured), which a direct-I/O backend's op does as it stores,
 * and apply the node's factor, which must then be 1 or one the op can apply (an adaptive
 * factor of a conv/linear layer on a backend with the scaled backward-data entries). */
static int grad_direct(const mpx_graph *g, const gnode *n, int slot, const gtensor *t) {
    const int factor_ok = grad_multiplier(n) == 1.0 ||
                          (!n->seeds_gradient && slot == 0 && op_scales_input_grad(g->be, n->op));
    return writes_stored(g, t->plan.grad_dtype) && factor_ok && !g->pass->bw->stats &&
           !g->pass->quantile_due;
}

/* Whether v, a view of input `slot`'s gradient, is that tensor's storage written by the op
 * (grad_direct): rounded, and multiplied by the node's factor, already. A view of storage the
 * backend holds natively (F32) is still the commit's to scale in place. */
static int grad_written_by_op(const mpx_graph *g, const gnode *n, int slot, const mpx_tensor *v) {
    const gtensor *t = &g->tensors[n->in[slot]];
    return v->data && v->data == t->plan.grad && !g->be->native(g->be, t->plan.grad_dtype);
}

double in_grad_factor(const mpx_graph *g, const gnode *n, int slot, const mpx_tensor *v) {
    return grad_written_by_op(g, n, slot, v) ? grad_multiplier(n) : 1.0;
}

/* Whether a parameter's gradient contribution may be written by the op into the parameter's
 * 16-bit work format: its commit only rounds it (no statistics step) before unscaling. */
static int param_grad_direct(const mpx_graph *g, const mpx_param *p) {
    return writes_stored(g, p->work_dtype) && !g->pass->bw->stats;
}

mpx_status view_in_grad(mpx_graph *g, gnode *n, int slot, mpx_tensor *v) {
    gtensor *t = &g->tensors[n->in[slot]];
    if (!t->requires_grad) {
        *v = make_view(t->ndim, t->shape, MPX_F32, g->be->device, NULL);
        return MPX_OK;
    }
    if (t->n_consumers > 1) {
        int c = consumer_slot(t, g->nodes, n, slot);
        *v = make_view(t->ndim, t->shape, MPX_F32, g->be->device, t->plan.branch[c]);
        return MPX_OK;
    }
    if (g->be->native(g->be, t->plan.grad_dtype) || grad_direct(g, n, slot, t)) {
        *v = make_view(t->ndim, t->shape, t->plan.grad_dtype, g->be->device, t->plan.grad);
        return MPX_OK;
    }
    float *f = scratch_take(g, t->numel);
    if (!f) return scratch_fail(g, t->name);
    *v = make_view(t->ndim, t->shape, MPX_F32, g->be->device, f);
    return MPX_OK;
}

/* Where tensor t's act stats go on this step: its first observer's counters, or NULL when no
 * statistics are due, nobody observes it, or it is counted from its shadow instead. */
mpx_cast_stats *act_stats(mpx_graph *g, const gtensor *t) {
    if (!g->pass->bw->stats || t->plan.observer[0] < 0 || t->plan.shadow_counted) return NULL;
    return STATS_AT(g, dev_stats, t->plan.observer[0], STATS_ACT);
}

/* Copy the counts of t's first observer to the others (the loss shares fc's tensor). */
static void share_counts(mpx_graph *g, const gtensor *t) {
    for (int k = 1; k < 4 && t->plan.observer[k] >= 0; k++)
        g->be->copy(g->be, STATS_AT(g, dev_stats, t->plan.observer[k], STATS_ACT),
                    STATS_AT(g, dev_stats, t->plan.observer[0], STATS_ACT), sizeof(mpx_cast_stats));
}

/* adaptive-quantile: take the quantile of the gradient about to be rounded into t's storage,
 * from its FP32 values (times `multiplier`, as the cast applies it). Why before the rounding:
 * stored FP16 keeps no nonzero magnitude below 2^-24, so a quantile of the stored values could
 * never ask for a factor above 1. A gradient written by an op that only moves the values of
 * its output gradient (ReLU, add, pooling, reshape; `writer`) holds values rounded further
 * down the backward pass: it takes over the quantile of that op's output gradient instead.
 * So does dropout's (a mask and 1/(1-p), which moves the quantile by less than a binade). */
static void note_quantile(mpx_graph *g, gtensor *t, const float *src, double multiplier,
                          const gnode *writer) {
    if (!g->pass->quantile_due) return;
    const gtensor *up = writer ? &g->tensors[writer->out] : NULL;
    if (up && (op_moves_values(writer->op) || writer->op == OP_DROPOUT) &&
        up->pass.q_step == g->step)
        t->pass.q_pre = up->pass.q_pre;
    else
        t->pass.q_pre = g->be->abs_quantile(g->be, src, (size_t)t->numel,
                                            g->pass->bw->scaling->quantile, (float)multiplier);
    t->pass.q_step = g->step;
}

/* The cast that writes tensor t's gradient (counted for its observers). On statistics steps a
 * tensor on a value-moving chain first keeps its FP32 value as the shadow. `writer` is the
 * node whose backward made src (NULL for a merge of branches). */
mpx_status cast_grad(mpx_graph *g, int tensor, const float *src, double multiplier,
                     const gnode *writer) {
    gtensor *t = &g->tensors[tensor];
    note_quantile(g, t, src, multiplier, writer);
    if (g->pass->bw->stats && t->plan.needs_shadow) {
        mpx_cast_spec sh = mpx_cast_plain(MPX_F32);
        sh.scale = (float)multiplier;
        g->be->cast(g->be, &sh, src, t->plan.shadow, (size_t)t->numel);
    }
    mpx_cast_spec s = storage_cast(g, t->plan.grad_dtype, round_stream(g->step, tensor, RS_GRAD));
    s.scale = (float)multiplier;
    s.stats = act_stats(g, t);
    if (s.stats) MPX_TRY(whatif_count(g, t, src, multiplier));
    if (src != t->plan.grad || s.scale != 1.0f || s.stats)
        g->be->cast(g->be, &s, src, t->plan.grad, (size_t)t->numel);
    if (s.stats) share_counts(g, t);
    return MPX_OK;
}

int shadow_needed(const mpx_graph *g, const gnode *n, int slot) {
    const gtensor *t = &g->tensors[n->in[slot]];
    return g->pass->bw->stats && t->requires_grad &&
           (t->plan.needs_shadow || t->plan.shadow_counted);
}

mpx_status commit_shadow(mpx_graph *g, gnode *n, int slot, const mpx_tensor *v) {
    gtensor *t = &g->tensors[n->in[slot]];
    if (t->plan.needs_shadow)
        g->be->copy(g->be, t->plan.shadow, v->data, (size_t)t->numel * sizeof(float));
    if (t->plan.shadow_counted && t->plan.observer[0] >= 0) {
        MPX_TRY(whatif_count(g, t, v->data, 1.0));
        /* Count what the cast into storage does to these values (the copy is in place). */
        mpx_cast_spec s = mpx_cast_plain(MPX_F32);
        s.stats_format = g->prec.stats_format;
        s.stats = STATS_AT(g, dev_stats, t->plan.observer[0], STATS_ACT);
        g->be->cast(g->be, &s, v->data, v->data, (size_t)t->numel);
        share_counts(g, t);
    }
    return MPX_OK;
}

mpx_status commit_in_grad(mpx_graph *g, gnode *n, int slot, const mpx_tensor *v) {
    gtensor *t = &g->tensors[n->in[slot]];
    if (!v->data) return MPX_OK;
    /* The op computed its result from the stored dy (carrying s_prev); the loss computed its
     * gradient from nothing scaled, so it multiplies by the whole seed scale. */
    double multiplier = grad_multiplier(n);
    double carried = n->sc.s_prev * n->sc.layer_scale;
    if (t->n_consumers > 1) {
        int c = consumer_slot(t, g->nodes, n, slot);
        t->pass.branch_pending[c] = 1.0f;
        if (!n->seeds_gradient) {
            t->pass.branch_pending[c] = (float)multiplier; /* a power of two: exact when applied */
        } else if (multiplier != 1.0) {
            /* The loss's seed scale is applied now: its statistics row reads the branch. */
            mpx_cast_spec s = mpx_cast_plain(MPX_F32);
            s.scale = (float)multiplier;
            g->be->cast(g->be, &s, v->data, v->data, (size_t)t->numel);
        }
        t->pass.branch_scale[c] = carried;
        t->pass.branch_ready |= 1u << c;
        return MPX_OK;
    }
    if (!grad_written_by_op(g, n, slot, v)) MPX_TRY(cast_grad(g, n->in[slot], v->data, multiplier, n));
    t->pass.grad_scale = carried;
    t->pass.grad_ready = 1;
    return MPX_OK;
}

int shares_grad(const mpx_graph *g, const gnode *n, int slot) {
    const gtensor *t = &g->tensors[n->in[slot]];
    return t->requires_grad && t->plan.grad_root != n->in[slot];
}

mpx_status commit_shared_grad(mpx_graph *g, gnode *n, int slot) {
    gtensor *t = &g->tensors[n->in[slot]];
    const gtensor *out = &g->tensors[n->out];
    /* adaptive-quantile: the quantile of the values before their rounding, which are dy's
     * (note_quantile's rule for a value-moving writer; dy's commit noted it this step) */
    if (g->pass->quantile_due) {
        if (out->pass.q_step != g->step)
            return mpx_fail(MPX_ERR_INTERNAL, "no pre-rounding quantile of '%s' at step %lld",
                            out->name, (long long)g->step);
        t->pass.q_pre = out->pass.q_pre;
        t->pass.q_step = g->step;
    }
    t->pass.grad_scale = n->sc.s_prev * n->sc.layer_scale;
    t->pass.grad_ready = 1;
    return MPX_OK;
}

mpx_status view_param_grad(mpx_graph *g, int param, mpx_tensor *v) {
    mpx_param *p = &g->params[param];
    const mpx_dtype dt = param_grad_direct(g, p) ? p->work_dtype : MPX_F32;
    void *f = scratch_take_dtype(g, p->numel, dt);
    if (!f) return scratch_fail(g, p->name);
    *v = make_view(p->ndim, p->shape, dt, g->be->device, f);
    return MPX_OK;
}

mpx_status commit_param_grad(mpx_graph *g, gnode *n, int param, const mpx_tensor *v) {
    mpx_param *p = &g->params[param];
    /* Round the contribution into the parameter's gradient storage (counted), then unscale by
     * the S it carries and accumulate in FP32. */
    mpx_cast_spec s = storage_cast(g, p->work_dtype, round_stream(g->step, param, RS_PGRAD));
    s.stats =
        g->pass->bw->stats && n->layer >= 0 ? STATS_AT(g, dev_stats, n->layer, STATS_WGRAD) : NULL;
    void *stored = v->data;
    if (v->dtype != p->work_dtype) {
        stored = scratch_take_dtype(g, p->numel, p->work_dtype);
        if (!stored) return scratch_fail(g, p->name);
    }
    if (stored != v->data || s.stats) g->be->cast(g->be, &s, v->data, stored, (size_t)p->numel);
    int fp16_unscale = g->pass->bw->scaling && g->pass->bw->scaling->unscale_fp16;
    g->be->unscale_accumulate(g->be, p->work_dtype, stored, (size_t)p->numel, 1.0 / n->sc.s_prev,
                              fp16_unscale, p->grad, &g->dev_status->nonfinite);
    return MPX_OK;
}

