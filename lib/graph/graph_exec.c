/* graph_exec.c — the executor: the forward and backward passes, branch merges, adaptive
 * factors, the step status, weights and host I/O. Ops see storage through graph_views.c.
 *
 * Host waits: a pass queues work and reads nothing back, except what a step must decide on the
 * host: the loss, the non-finite count and the gradient norm, kept in one step-status block in
 * backend memory and downloaded once at the end of the backward pass. Adaptive branch merges
 * assume their target and have the device check it (merge_branches); statistics steps read
 * every layer's counts and moments with one more download; the adaptive factors' update steps
 * read each layer's moments as they go (the factor scales what follows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "mpx/runtime.h"

/* ---- forward ---- */

/* The clock for per-node profiles, read once the backend's queued work is done. */
static double profile_clock(mpx_graph *g) {
    g->be->sync(g->be);
    g->clock_waits++;
    return mpx_now();
}

/* Every GEMM-family operand of this graph is a stored value or gradient, so it is exact in the
 * precision's low format, or rounded to TF32 in tf32 mode (graph_ops.c: gemm_operand; backend.h:
 * gemm_operands); declared F32 when the policy asks for FP32 math (precision.tensor_cores =
 * false). */
static void declare_operands(mpx_graph *g) {
    const mpx_dtype exact = g->prec.gemm_round == MPX_TF32 ? MPX_TF32 : g->prec.low;
    if (g->be->gemm_operands) g->be->gemm_operands(g->be, g->prec.tensor_cores ? exact : MPX_F32);
}

mpx_status mpx_graph_forward(mpx_graph *g, int training) {
    if (!g->compiled) return mpx_fail(MPX_ERR_INTERNAL, "graph not compiled");
    declare_operands(g);
    for (int i = 0; i < g->n_nodes; i++) {
        gnode *n = &g->nodes[i];
        if (n->op == OP_INPUT) continue;
        scratch_reset(g);
        double t0 = g->profile ? profile_clock(g) : 0;
        const double skipped0 = g->profile && g->be->skipped_flops ? g->be->skipped_flops(g->be) : 0;
        g->view_class = op_class(n->op);
        mpx_status st = node_forward(g, n, training);
        g->view_class = MPX_OPC_OTHER;
        if (g->profile) {
            n->prof.fwd += profile_clock(g) - t0;
            n->prof.calls++;
            if (g->be->skipped_flops) n->prof.skipped += g->be->skipped_flops(g->be) - skipped0;
        }
        if (st != MPX_OK) return mpx_fail_context(st, "forward of %s '%s'", op_name(n->op), n->name);
    }
    /* The loss stays on the device until the host asks (mpx_graph_loss) or the backward pass
     * reads it with the non-finite count: no wait here. */
    if (g->loss_tensor >= 0)
        g->be->copy(g->be, &g->dev_status->loss, g->tensors[g->loss_tensor].plan.value,
                    sizeof(float));
    g->status_fresh = g->sums_fresh = 0;
    mpx_status st = g->be->last_error(g->be);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "forward pass");
}

/* The host copy of the step status, downloaded once per pass (one wait); `with_sums` after a
 * backward pass, when the gradients' sums of squares are behind it. */
static mpx_status read_status(mpx_graph *g, int with_sums) {
    if (g->status_fresh) return MPX_OK;
    g->be->download(g->be, g->host_status, g->dev_status,
                    with_sums ? g->status_bytes : sizeof(step_status));
    mpx_status st = g->be->last_error(g->be);
    if (st != MPX_OK) return mpx_fail_context(st, "reading the step's loss and non-finite count");
    g->status_fresh = 1;
    g->sums_fresh = with_sums;
    return MPX_OK;
}

float mpx_graph_loss(mpx_graph *g) {
    if (g->loss_tensor < 0) return NAN;
    return read_status(g, 0) == MPX_OK ? g->host_status->loss : NAN;
}

double mpx_graph_grad_norm(const mpx_graph *g) {
    if (!g->sums_fresh) return NAN;
    double ss = 0;
    for (int i = 0; i < g->n_params; i++) ss += STATUS_SUMS(g->host_status)[i];
    return sqrt(ss);
}

int64_t mpx_graph_host_waits(const mpx_graph *g) {
    return g->be ? g->be->host_waits(g->be) - g->clock_waits : 0;
}

/* ---- backward ---- */

/* x[i] <- round(s x[i]) in `dt`, to nearest even, for n elements (FP32 in and out): what an
 * arithmetic operation in that format stores. Through 16-bit scratch (the node's). */
static mpx_status round_in_format(mpx_graph *g, mpx_dtype dt, double s, float *x, size_t n) {
    void *tmp = scratch_take_dtype(g, (int64_t)n, dt);
    if (!tmp) return scratch_fail(g, "a branch rounded in its storage format");
    mpx_cast_spec c = mpx_cast_plain(dt);
    c.scale = (float)s;
    g->be->cast(g->be, &c, x, tmp, n);
    g->be->decode(g->be, dt, tmp, x, n);
    return MPX_OK;
}

/* A branch merge as the 2019 code does it (als = reference; ada_loss.py: rescaling and
 * AdaLossBranch): every branch stored in FP16 as its consumer computed it, the target chosen
 * on those stored magnitudes (an error where none fits, as the code raises), each branch
 * multiplied by target / S_i in FP16, and the branches added one after another in FP16 (each
 * addition in FP32 and rounded: exact FP16 arithmetic, since FP32 holds the sum of two FP16
 * values to well within the double-rounding bound). Statistics steps count, as in every mode,
 * the merged gradient's values before FP16 touches them: the FP32 sum of the unrounded
 * branches at the target, whose cast is counted and then overwritten by the stored result.
 * One wait for the magnitudes. */
static mpx_status merge_branches_reference(mpx_graph *g, int tensor, const int *idx, int k,
                                           const double *S, const double *P) {
    gtensor *t = &g->tensors[tensor];
    const size_t n = (size_t)t->numel;
    const mpx_dtype dt = t->plan.grad_dtype;
    float a[MAX_CONSUMERS];
    double stored[MAX_CONSUMERS];
    for (int i = 0; i < k; i++)
        g->be->absmax_to(g->be, t->plan.branch[idx[i]], n, &g->merge_slots[i]);
    g->be->download(g->be, a, g->merge_slots, (size_t)k * sizeof(float));
    MPX_TRY(dist_max_magnitudes(a, k));
    /* rounding is monotone: the stored branch's magnitude is the rounded magnitude */
    for (int i = 0; i < k; i++) stored[i] = mpx_round_to(dt, (float)((double)a[i] * P[i]));
    const double target = mpx_als_merge_target(g->pass->bw->scaling, k, S, stored);
    if (!(target > 0))
        return mpx_fail(MPX_ERR_NUMERIC,
                        "adaptive merge of '%s' (precision.als = reference): no target scale keeps "
                        "the largest stored branch magnitude %g below u_max = %g (the 2019 code "
                        "raises \"Cannot find a suitable target\" here)",
                        t->name, stored[0], g->pass->bw->scaling->u_max);
    if (act_stats(g, t) || (g->pass->bw->stats && t->plan.needs_shadow)) {
        float *sum = scratch_take(g, t->numel);
        if (!sum) return scratch_fail(g, t->name);
        g->be->zero(g->be, sum, n * sizeof(float));
        for (int i = 0; i < k; i++)
            g->be->accumulate(g->be, sum, t->plan.branch[idx[i]], n, (float)(P[i] * target / S[i]));
        MPX_TRY(cast_grad(g, tensor, sum, 1.0, NULL));
    }
    float *acc = t->plan.branch[idx[0]];
    for (int i = 0; i < k; i++) {
        float *b = t->plan.branch[idx[i]];
        MPX_TRY(round_in_format(g, dt, P[i], b, n));          /* the consumer's store */
        MPX_TRY(round_in_format(g, dt, target / S[i], b, n)); /* g.array *= target / S_i */
        if (i == 0) continue;
        g->be->accumulate(g->be, acc, b, n, 1.0f);
        if (i + 1 < k) MPX_TRY(round_in_format(g, dt, 1.0, acc, n));
    }
    mpx_cast_spec s = mpx_cast_plain(dt);
    g->be->cast(g->be, &s, acc, t->plan.grad, n);
    scratch_reset(g);
    t->pass.grad_scale = target;
    t->pass.grad_ready = 1;
    return MPX_OK;
}

/* Sum a fan-out tensor's FP32 branch contributions (rescaled to one target scale under
 * adaptive scaling, docs/papers.md §3 step 10) and cast the sum into its gradient storage.
 * Every factor is a power of two, so scaling commutes with FP32 rounding: the branches are
 * summed at an interim scale T0 (branch 0's, so it needs no pass of its own) while the same
 * pass measures the magnitudes that choose the target (into g->merge_slots), and target / T0
 * rides on the cast into storage. Under adaptive scaling a merge thus costs its accumulation
 * and nothing more. The target: in a speculative pass the largest S_i, checked on the device
 * against the magnitudes (merge_check; a miss makes mpx_graph_backward run the pass again
 * without speculation); otherwise chosen on the host from the magnitudes, one wait. */
static mpx_status merge_branches(mpx_graph *g, int tensor) {
    gtensor *t = &g->tensors[tensor];
    int idx[MAX_CONSUMERS], k = 0;
    double S[MAX_CONSUMERS], P[MAX_CONSUMERS];
    for (int c = 0; c < t->n_consumers; c++)
        if (t->pass.branch_ready & (1u << c)) {
            idx[k] = c;
            S[k] = t->pass.branch_scale[c];
            P[k] = t->pass.branch_pending[c];
            k++;
        }
    if (k == 0) return MPX_OK;
    if (g->pass->layerwise && g->pass->bw->scaling->als == MPX_ALS_REFERENCE && k > 1)
        return merge_branches_reference(g, tensor, idx, k, S, P);
    if (!g->pass->layerwise)
        for (int i = 1; i < k; i++)
            if (S[i] != S[0] || t->pass.branch_pending[idx[i]] != 1.0f)
                return mpx_fail(MPX_ERR_INTERNAL, "branches of '%s' carry scales %g and %g",
                                t->name, S[0], S[i]);
    /* Branch i enters the sum times T0 / S_i and its pending factor P_i (slot i: the magnitude
     * of its stored values, which times P_i / S_i is unscaled as the target wants). */
    const size_t n = (size_t)t->numel;
    const double T0 = S[0] / P[0];
    float *acc = t->plan.branch[idx[0]], *slot = g->merge_slots;
    for (int i = 1; i < k; i++) {
        if (g->pass->layerwise)
            g->be->accumulate_absmax(g->be, acc, t->plan.branch[idx[i]], n,
                                     (float)(T0 / S[i] * P[i]), i == 1 ? &slot[0] : NULL, &slot[i]);
        else
            g->be->accumulate(g->be, acc, t->plan.branch[idx[i]], n, 1.0f);
    }
    double target = S[0];
    /* A single branch under als = reference is no merge: the code sums nothing there. */
    if (g->pass->layerwise && g->pass->bw->scaling->als != MPX_ALS_REFERENCE) {
        if (k == 1) g->be->absmax_to(g->be, acc, n, &slot[0]);
        if (g->pass->speculating) {
            for (int i = 1; i < k; i++) target = fmax(target, S[i]);
            g->be->merge_check(g->be, slot, k, P, S, target, g->pass->bw->scaling->u_max,
                               &g->dev_status->merge_misses);
        } else {
            float a[MAX_CONSUMERS];
            double absmax[MAX_CONSUMERS];
            g->be->download(g->be, a, slot, (size_t)k * sizeof(float));
            MPX_TRY(dist_max_magnitudes(a, k));
            for (int i = 0; i < k; i++) absmax[i] = (double)a[i] * P[i];
            target = mpx_als_merge_target(g->pass->bw->scaling, k, S, absmax);
        }
    }
    MPX_TRY(cast_grad(g, tensor, acc, target / T0, NULL));
    t->pass.grad_scale = target;
    t->pass.grad_ready = 1;
    return MPX_OK;
}

/* A view's values in FP32 for a reduction: one the ops read in its 16-bit storage is decoded
 * first (scratch until the node's views are released). */
static mpx_status reduction_input(mpx_graph *g, const mpx_tensor *v, const float **x) {
    const size_t n = (size_t)mpx_tensor_numel(v);
    *x = v->data;
    if (v->dtype != MPX_F32) {
        float *f = scratch_take(g, (int64_t)n);
        if (!f) return scratch_fail(g, "the moments of a 16-bit view");
        g->be->decode(g->be, v->dtype, v->data, f, n);
        *x = f;
    }
    return MPX_OK;
}

/* Moments of a view, on the host now (a wait). */
static mpx_status moments_into(mpx_graph *g, const mpx_tensor *v, mpx_moments *m) {
    const float *x;
    MPX_TRY(reduction_input(g, v, &x));
    g->be->moments(g->be, x, (size_t)mpx_tensor_numel(v), m);
    return MPX_OK;
}

/* Moments of a layer's incoming gradient for its adaptive factor, over the global batch (a
 * wait, and a reduction over the ranks of a data-parallel run). */
static mpx_status grad_moments(mpx_graph *g, const mpx_tensor *dy, mpx_moments *m) {
    MPX_TRY(moments_into(g, dy, m));
    return dist_reduce_moments(m);
}

/* Moments of a view for a statistics row, into dev_moments[slot] (slot 2 * layer: the gradient,
 * + 1: the weight) without a wait; backward_pass reads them all with the layers' counts. */
static mpx_status moments_later(mpx_graph *g, const mpx_tensor *v, int slot) {
    const float *x;
    MPX_TRY(reduction_input(g, v, &x));
    g->be->moments_to(g->be, x, (size_t)mpx_tensor_numel(v), &g->dev_moments[slot]);
    g->moments_due[slot] = 1;
    return MPX_OK;
}

/* Whether a conv/linear node recomputes its unbound adaptive factor on this step. */
static int als_update_due(const mpx_graph *g, const gnode *n) {
    int every = g->pass->bw->scaling->update_every > 0 ? g->pass->bw->scaling->update_every : 1;
    return !n->sc.valid || g->step % every == 0;
}

/* The adaptive factor s of a conv/linear node from its incoming gradient and weight. */
static mpx_status layer_factor(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *w,
                               const mpx_moments *mg, const mpx_moments *mw) {
    const mpx_scaling_cfg *c = g->pass->bw->scaling;
    n->sc.layer_scale = 1.0;
    if (!g->pass->layerwise || !n->is_gemm_layer) return MPX_OK;
    if (als_update_due(g, n)) {
        mpx_moments a, b;
        if (!mg) {
            MPX_TRY(grad_moments(g, dy, &a));
            mg = &a;
        }
        if (!mw) {
            MPX_TRY(moments_into(g, w, &b));
            mw = &b;
        }
        mpx_als_inputs in = {mg->mean, mg->std, mw->mean, mw->std, mg->min, mg->max,
                             mw->min,  mw->max, n->fan_in, 0};
        if (c->method == MPX_SCALING_ADAPTIVE_QUANTILE) {
            const gtensor *o = &g->tensors[n->out];
            if (o->pass.q_step != g->step)
                return mpx_fail(MPX_ERR_INTERNAL, "no pre-rounding quantile of '%s' at step %lld",
                                o->name, (long long)g->step);
            in.q_abs_g = o->pass.q_pre;
            n->sc.unbound = mpx_als_quantile_unbound(c, &in);
        } else {
            n->sc.unbound = mpx_als_unbound(c, &in);
        }
        n->sc.valid = 1;
    }
    n->sc.layer_scale = mpx_als_bound(c, n->sc.unbound, n->sc.s_prev);
    return MPX_OK;
}

/* als = reference (the 2019 code's AdaLossConvolution2DFunction / Linear backward): a
 * conv/linear layer's factor s multiplies its stored gradient in FP16 before the GEMM, so a
 * factor below 1 can flush values and one above 1 overflow them there; the input gradient is
 * then computed from that copy (dyd) and its commit applies no factor (factor_in_dy). The weight
 * gradient still reads the unscaled dy. Other modes and a factor of 1: nothing to do. */
static mpx_status factor_into_dy(mpx_graph *g, gnode *n, const mpx_tensor *dy, mpx_tensor *dyd) {
    n->sc.factor_in_dy = 0;
    if (!g->pass->layerwise || !n->is_gemm_layer ||
        g->pass->bw->scaling->als != MPX_ALS_REFERENCE || n->sc.layer_scale == 1.0)
        return MPX_OK;
    const gtensor *out = &g->tensors[n->out];
    const float *x;
    MPX_TRY(reduction_input(g, dy, &x));
    float *f = scratch_take(g, out->numel);
    if (!f) return scratch_fail(g, "the gradient times its layer's factor");
    g->be->copy(g->be, f, x, (size_t)out->numel * sizeof(float));
    MPX_TRY(round_in_format(g, out->plan.grad_dtype, n->sc.layer_scale, f, (size_t)out->numel));
    *dyd = make_view(dy->ndim, dy->shape, MPX_F32, g->be->device, f);
    n->sc.factor_in_dy = 1;
    return MPX_OK;
}

static void set_g_stats(mpx_layer_stats *ls, const mpx_moments *m) {
    ls->g_mean = (float)m->mean;
    ls->g_std = (float)m->std;
    ls->g_min = m->min;
    ls->g_max = m->max;
}

static void set_w_stats(mpx_layer_stats *ls, const mpx_moments *m) {
    ls->w_mean = (float)m->mean;
    ls->w_std = (float)m->std;
    ls->w_min = m->min;
    ls->w_max = m->max;
}

/* Whether ReLU node n's backward runs inside the batch-norm's before it (attr.relu_dy) on this
 * step: the ReLU is fused into that batch-norm's forward, and its own commit of the batch-norm
 * output's gradient would only copy the selected values — no statistics step, no quantile to
 * take, nothing reading gradients back (keep_grads) — and the ReLU's stored output is a
 * function of the batch-norm's FP32 result that the op can recompute: rounded to nearest (or
 * F32). Then the batch-norm reads the ReLU output's gradient and masks it itself: one pass
 * over the activations fewer, the same bits. */
static int relu_bwd_fused(const mpx_graph *g, const gnode *n) {
    if (n->op != OP_RELU || n->plan.fused_into < 0 ||
        g->nodes[n->plan.fused_into].op != OP_BATCHNORM)
        return 0;
    const mpx_dtype store = g->tensors[n->out].plan.dtype;
    return !g->pass->bw->stats && !g->pass->quantile_due && !g->keep_grads &&
           (g->prec.rounding == MPX_ROUND_RNE || store == MPX_F32) &&
           mpx_batchnorm_relu_threshold(store) >= 0;
}

static mpx_status backward_node(mpx_graph *g, gnode *n) {
    gtensor *out = &g->tensors[n->out];
    mpx_layer_stats *ls =
        g->pass->bw->stats && n->layer >= 0 ? &g->pass->bw->stats[n->layer] : NULL;
    scratch_reset(g);
    if (n->seeds_gradient) {
        n->sc.s_prev = g->pass->bw->loss_scale;
    } else {
        if (out->n_consumers > 1) {
            double t0 = g->time_scaling ? profile_clock(g) : 0;
            MPX_TRY(merge_branches(g, n->out));
            if (g->time_scaling) g->scaling_s += profile_clock(g) - t0;
        }
        if (!out->pass.grad_ready) return MPX_OK; /* no gradient reaches this node */
        n->sc.s_prev = out->pass.grad_scale;
    }
    if (relu_bwd_fused(g, n)) {
        /* the batch-norm before it reads this gradient and applies the ReLU's backward */
        gtensor *in = &g->tensors[n->in[0]];
        in->pass.grad_alias = n->out;
        in->pass.grad_scale = out->pass.grad_scale;
        in->pass.grad_ready = 1;
        return MPX_OK;
    }
    n->sc.layer_scale = 1.0;

    mpx_tensor dy, w0;
    memset(&dy, 0, sizeof dy);
    memset(&w0, 0, sizeof w0);
    if (!n->seeds_gradient) MPX_TRY(view_out_grad(g, n, &dy));
    if (n->n_param > 0) MPX_TRY(view_param(g, n->param[0], &w0));

    mpx_moments mg, mw, *pmg = NULL, *pmw = NULL;
    if (ls && !n->seeds_gradient) {
        if (g->pass->layerwise && n->is_gemm_layer && als_update_due(g, n)) {
            /* the adaptive factor reads them now (layer_factor) */
            MPX_TRY(grad_moments(g, &dy, pmg = &mg));
            set_g_stats(ls, &mg);
            if (n->n_param > 0) {
                MPX_TRY(moments_into(g, &w0, pmw = &mw));
                set_w_stats(ls, &mw);
            }
        } else {
            MPX_TRY(moments_later(g, &dy, 2 * n->layer));
            if (n->n_param > 0) MPX_TRY(moments_later(g, &w0, 2 * n->layer + 1));
        }
    }
    double t0 = g->time_scaling ? profile_clock(g) : 0;
    MPX_TRY(layer_factor(g, n, &dy, &w0, pmg, pmw));
    if (g->time_scaling) g->scaling_s += profile_clock(g) - t0;

    mpx_tensor dyd;
    MPX_TRY(factor_into_dy(g, n, &dy, &dyd));
    MPX_TRY(node_backward(g, n, n->seeds_gradient ? NULL : &dy, n->sc.factor_in_dy ? &dyd : NULL,
                          n->n_param > 0 ? &w0 : NULL));
    if (g->pass->bw->stats && out->plan.needs_shadow && op_moves_values(n->op)) {
        mpx_tensor sh = make_view(out->ndim, out->shape, MPX_F32, g->be->device, out->plan.shadow);
        scratch_reset(g); /* the regular backward is done with its views */
        MPX_TRY(node_backward_shadow(g, n, &sh));
    }

    if (ls) {
        ls->scale = n->sc.s_prev;
        ls->layer_scale = n->sc.layer_scale;
        if (n->seeds_gradient) {
            /* The loss row describes the gradient it emitted, as stored. */
            gtensor *in = &g->tensors[n->in[0]];
            mpx_tensor e;
            scratch_reset(g);
            if (in->n_consumers > 1) {
                int c = consumer_slot(in, g->nodes, n, 0);
                e = make_view(in->ndim, in->shape, MPX_F32, g->be->device, in->plan.branch[c]);
            } else {
                MPX_TRY(view_of(g, in->ndim, in->shape, in->plan.grad_dtype, in->plan.grad,
                                in->name, &e));
            }
            MPX_TRY(moments_later(g, &e, 2 * n->layer));
        }
    }
    return MPX_OK;
}

/* One backward pass over the nodes, ending with the skip decision's wait: the loss, the
 * non-finite count, the speculative merges' misses and the gradient sums in one download. */
static mpx_status backward_pass(mpx_graph *g, bw_pass *p) {
    const mpx_backward_opts *o = p->bw;
    g->be->zero(g->be, &g->dev_status->nonfinite, sizeof g->dev_status->nonfinite);
    g->be->zero(g->be, &g->dev_status->merge_misses, sizeof g->dev_status->merge_misses);
    g->status_fresh = g->sums_fresh = 0;
    /* adaptive-quantile: gradients note their quantile when any layer recomputes its factor. */
    p->quantile_due = 0;
    if (p->layerwise && o->scaling->method == MPX_SCALING_ADAPTIVE_QUANTILE)
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].is_gemm_layer && als_update_due(g, &g->nodes[i])) p->quantile_due = 1;
    for (int i = 0; i < g->n_params; i++)
        g->be->zero(g->be, g->params[i].grad, (size_t)g->params[i].numel * sizeof(float));
    for (int i = 0; i < g->n_tensors; i++) {
        g->tensors[i].pass.grad_ready = 0;
        g->tensors[i].pass.branch_ready = 0;
        g->tensors[i].pass.grad_alias = -1;
    }
    if (o->stats) {
        memset(o->stats, 0, (size_t)g->n_layers * sizeof *o->stats);
        memset(g->moments_due, 0, (size_t)g->n_layers * 2);
        g->be->zero(g->be, g->dev_stats, (size_t)g->n_layers * STATS_ROW * sizeof(mpx_cast_stats));
    }
    mpx_status st = MPX_OK;
    for (int i = g->n_nodes - 1; i >= 0 && st == MPX_OK; i--) {
        gnode *n = &g->nodes[i];
        if (n->op == OP_INPUT) continue;
        double t0 = g->profile ? profile_clock(g) : 0;
        const double skipped0 = g->profile && g->be->skipped_flops ? g->be->skipped_flops(g->be) : 0;
        g->view_class = op_class(n->op);
        st = backward_node(g, n);
        g->view_class = MPX_OPC_OTHER;
        if (g->profile) {
            n->prof.bwd += profile_clock(g) - t0;
            if (g->be->skipped_flops) n->prof.skipped += g->be->skipped_flops(g->be) - skipped0;
        }
        if (st != MPX_OK) st = mpx_fail_context(st, "backward of %s '%s'", op_name(n->op), n->name);
    }
    if (st == MPX_OK && o->stats) {
        /* Statistics steps: every layer's counts and moments in one download. */
        g->be->download(g->be, g->host_stats, g->dev_stats, g->stats_bytes);
        st = dist_reduce_stats(g);
        for (int l = 0; st == MPX_OK && l < g->n_layers; l++) {
            o->stats[l].act = *STATS_AT(g, host_stats, l, STATS_ACT);
            o->stats[l].wgrad = *STATS_AT(g, host_stats, l, STATS_WGRAD);
            for (int k = 0; k < 3; k++)
                o->stats[l].operand[k] = *STATS_AT(g, host_stats, l, STATS_OPERAND + k);
            if (g->moments_due[2 * l]) set_g_stats(&o->stats[l], &g->host_moments[2 * l]);
            if (g->moments_due[2 * l + 1]) set_w_stats(&o->stats[l], &g->host_moments[2 * l + 1]);
        }
    }
    /* The ranks' gradients averaged; then the global gradient norm's parts, for the optimizer's
     * clipping and its finite check. */
    if (st == MPX_OK) st = dist_reduce_grads(g);
    if (st == MPX_OK)
        for (int i = 0; i < g->n_params; i++)
            g->be->sumsq(g->be, g->params[i].grad, (size_t)g->params[i].numel,
                         &STATUS_SUMS(g->dev_status)[i]);
    if (st == MPX_OK && (st = g->be->last_error(g->be)) != MPX_OK)
        st = mpx_fail_context(st, "backward pass");
    if (st == MPX_OK) st = read_status(g, 1);
    if (st == MPX_OK) st = dist_reduce_status(g);
    if (st == MPX_OK && p->layerwise) st = dist_check_factors(g);
    return st;
}

/* The adaptive factors' cache (als_unbound, als_valid) as a pass found it: an update step's
 * speculative pass rewrites it from gradients a redone pass must not see. */
static void als_cache(mpx_graph *g, int restore) {
    for (int i = 0; i < g->n_nodes; i++) {
        gnode *n = &g->nodes[i];
        if (restore)
            n->sc.unbound = n->sc.unbound_saved, n->sc.valid = n->sc.valid_saved;
        else
            n->sc.unbound_saved = n->sc.unbound, n->sc.valid_saved = n->sc.valid;
    }
}

mpx_status mpx_graph_backward(mpx_graph *g, const mpx_backward_opts *o, int64_t *nonfinite) {
    if (!g->compiled) return mpx_fail(MPX_ERR_INTERNAL, "graph not compiled");
    if (g->loss_tensor < 0) return mpx_fail(MPX_ERR_INPUT, "the graph has no loss to differentiate");
    if (o->loss_scale <= 0 || !isfinite(o->loss_scale))
        return mpx_fail(MPX_ERR_INPUT, "loss scale %g is not a positive finite number", o->loss_scale);
    if (o->scaling && o->scaling->method == MPX_SCALING_ADAPTIVE_QUANTILE && dist_ranks() > 1)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "adaptive-quantile scaling over %d ranks: the quantile of the global "
                        "batch's gradients is not reduced across ranks (use adaptive)",
                        dist_ranks());
    bw_pass p = {.bw = o, .layerwise = o->scaling && mpx_scaling_is_layerwise(o->scaling->method)};
    /* als = reference merges always wait (merge_branches_reference) */
    p.speculating = p.layerwise && !g->exact_merges && o->scaling->als != MPX_ALS_REFERENCE;
    declare_operands(g);
    g->step = o->step;
    g->pass = &p;
    if (p.speculating) als_cache(g, 0);
    mpx_status st = backward_pass(g, &p);
    if (st == MPX_OK && p.speculating && g->host_status->merge_misses > 0) {
        /* A merge's assumed target did not fit its magnitudes: everything after it carries the
         * wrong scales. The pass again, with merges that wait (rare: a gradient near u_max). */
        als_cache(g, 1);
        p.speculating = 0;
        g->merge_redos++;
        st = backward_pass(g, &p);
    }
    g->pass = NULL;
    if (st == MPX_OK) st = fp8_pass_end(g);
    if (nonfinite) *nonfinite = st == MPX_OK ? (int64_t)g->host_status->nonfinite : 0;
    return st;
}

void mpx_graph_speculative_merges(mpx_graph *g, int on) { g->exact_merges = !on; }
int64_t mpx_graph_merge_redos(const mpx_graph *g) { return g->merge_redos; }

/* ---- host I/O and weights ---- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The digest of the FP32 parameters and buffers (mpx_graph_init_digest). */
static mpx_status digest_weights(mpx_graph *g) {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t biggest = 1;
    for (int i = 0; i < g->n_params; i++)
        if ((size_t)g->params[i].numel > biggest) biggest = (size_t)g->params[i].numel;
    for (int i = 0; i < g->n_buffers; i++)
        if ((size_t)g->buffers[i].numel > biggest) biggest = (size_t)g->buffers[i].numel;
    float *host = malloc(biggest * sizeof *host);
    if (!host) return mpx_fail(MPX_ERR_NOMEM, "out of memory hashing the initial weights");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < (k == 0 ? g->n_params : g->n_buffers); i++) {
            const char *name = k == 0 ? g->params[i].name : g->buffers[i].name;
            size_t n = (size_t)(k == 0 ? g->params[i].numel : g->buffers[i].numel);
            g->be->download(g->be, host, k == 0 ? g->params[i].master : g->buffers[i].data,
                            n * sizeof *host);
            h = fnv1a(h, name, strlen(name) + 1);
            h = fnv1a(h, host, n * sizeof *host);
        }
    free(host);
    snprintf(g->init_digest, sizeof g->init_digest, "fnv1a64:%016llx", (unsigned long long)h);
    return MPX_OK;
}

const char *mpx_graph_init_digest(const mpx_graph *g) { return g->init_digest; }

/* Without master weights (the policy's MASTER role in the working format) the rounded working
 * copy is the parameter: the FP32 array the optimizer updates takes its values back, so the
 * next update starts from the stored weight and w <- round(w - lr u) is the whole rule, rounded
 * as the policy rounds the MASTER role. */
mpx_status mpx_graph_sync_weights(mpx_graph *g, int64_t step) {
    if (step == 0) MPX_TRY(digest_weights(g));
    const int no_masters = mpx_precision_dtype(&g->prec, MPX_ROLE_MASTER) != MPX_F32;
    for (int i = 0; i < g->n_params; i++) {
        mpx_param *p = &g->params[i];
        if (p->work == (void *)p->master) continue;
        mpx_cast_spec s = storage_cast(g, p->work_dtype, round_stream(step, i, RS_WEIGHT));
        s.rounding =
            mpx_precision_rounding(&g->prec, no_masters ? MPX_ROLE_MASTER : MPX_ROLE_WEIGHT);
        g->be->cast(g->be, &s, p->master, p->work, (size_t)p->numel);
        if (no_masters) g->be->decode(g->be, p->work_dtype, p->work, p->master, (size_t)p->numel);
    }
    return MPX_OK;
}

const mpx_precision *mpx_graph_precision(const mpx_graph *g) { return &g->prec; }

mpx_status mpx_graph_set_input(mpx_graph *g, int tensor, const void *host, mpx_dtype dtype,
                               int64_t count) {
    if (tensor < 0 || tensor >= g->n_tensors || g->nodes[g->tensors[tensor].producer].op != OP_INPUT)
        return mpx_fail(MPX_ERR_INPUT, "tensor %d is not a graph input", tensor);
    gtensor *t = &g->tensors[tensor];
    if (count != t->numel)
        return mpx_fail(MPX_ERR_INPUT, "input '%s' holds %lld elements, got %lld", t->name,
                        (long long)t->numel, (long long)count);
    if (t->is_label) {
        if (dtype != MPX_I32) return mpx_fail(MPX_ERR_INPUT, "labels '%s' must be i32", t->name);
        g->be->upload(g->be, t->plan.value, host, (size_t)count * sizeof(int32_t));
        return MPX_OK;
    }
    if (dtype != MPX_F32) return mpx_fail(MPX_ERR_INPUT, "input '%s' takes f32 data", t->name);
    if (t->plan.dtype == MPX_F32) {
        g->be->upload(g->be, t->plan.value, host, (size_t)count * sizeof(float));
        return MPX_OK;
    }
    scratch_reset(g);
    float *f = scratch_take(g, count);
    if (!f) return scratch_fail(g, t->name);
    g->be->upload(g->be, f, host, (size_t)count * sizeof(float));
    mpx_cast_spec s = storage_cast(g, t->plan.dtype, round_stream(g->step, tensor, RS_INPUT));
    g->be->cast(g->be, &s, f, t->plan.value, (size_t)count);
    return MPX_OK;
}

static mpx_status read_stored(mpx_graph *g, const gtensor *t, mpx_dtype dt, void *data, double div,
                              float *host) {
    if (!data) return mpx_fail(MPX_ERR_INPUT, "tensor '%s' has no such buffer", t->name);
    scratch_reset(g);
    float *f = scratch_take(g, t->numel);
    if (!f) return scratch_fail(g, t->name);
    g->be->decode(g->be, dt, data, f, (size_t)t->numel);
    if (div != 1.0) {
        mpx_cast_spec s = mpx_cast_plain(MPX_F32);
        s.scale = (float)(1.0 / div);
        g->be->cast(g->be, &s, f, f, (size_t)t->numel);
    }
    g->be->download(g->be, host, f, (size_t)t->numel * sizeof(float));
    /* A device reports its deferred failures (an operator's index check) once it has waited. */
    mpx_status st = g->be->last_error(g->be);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "reading '%s'", t->name);
}

mpx_status mpx_graph_read(const mpx_graph *cg, int tensor, float *host) {
    mpx_graph *g = (mpx_graph *)cg; /* reading uses the scratch arena */
    const gtensor *t = &g->tensors[tensor];
    if (t->is_label) return mpx_fail(MPX_ERR_INPUT, "'%s' holds labels", t->name);
    if (t->plan.elided)
        return mpx_fail(MPX_ERR_INPUT, "'%s' is not stored: the ReLU after it is fused into its "
                        "forward (mpx_graph_fuse(g, 0) before compiling keeps it)", t->name);
    return read_stored(g, t, t->plan.dtype, t->plan.value, 1.0, host);
}

mpx_status mpx_graph_read_grad(const mpx_graph *cg, int tensor, float *host) {
    mpx_graph *g = (mpx_graph *)cg;
    const gtensor *t = &g->tensors[tensor];
    if (!t->pass.grad_ready) return mpx_fail(MPX_ERR_INPUT, "tensor '%s' has no gradient", t->name);
    if (!g->keep_grads)
        return mpx_fail(MPX_ERR_INPUT, "tensor '%s': gradients are shared by lifetime; call "
                        "mpx_graph_keep_grads before compiling", t->name);
    return read_stored(g, t, t->plan.grad_dtype, t->plan.grad, t->pass.grad_scale, host);
}
