/* graph_ops.c — what each node kind does in the forward and backward pass.
 *
 * Glue between a node and the backend's operator: fetch FP32 views (graph_exec.c), call the
 * op, commit the results. No precision or scaling logic here: the views and commits carry it.
 */
#include <string.h>

#include "graph_internal.h"

const char *op_name(op_kind op) {
    static const char *const names[OP_COUNT] = {
        [OP_INPUT] = "input",         [OP_CONV2D] = "conv2d",     [OP_BATCHNORM] = "batchnorm",
        [OP_RELU] = "relu",           [OP_MAXPOOL2D] = "maxpool2d",
        [OP_AVGPOOL_GLOBAL] = "avgpool", [OP_LINEAR] = "linear", [OP_ADD] = "add",
        [OP_SOFTMAX_CE] = "softmax_ce",
    };
    return (unsigned)op < OP_COUNT ? names[op] : "?";
}

static mpx_status missing(const mpx_graph *g, const char *what) {
    return mpx_fail(MPX_ERR_UNSUPPORTED, "%s is not implemented on the %s backend", what,
                    g->be->name);
}
#define NEED(fn) \
    do { if (!g->be->fn) return missing(g, #fn); } while (0)

static mpx_tensor aux_view(const mpx_graph *g, const gnode *n, int a) {
    mpx_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = MPX_F32;
    v.device = g->be->device;
    v.ndim = 1;
    v.shape[0] = n->aux_numel[a];
    v.data = n->aux[a];
    return v;
}

static mpx_tensor buffer_view(const mpx_graph *g, int b) {
    mpx_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = MPX_F32;
    v.device = g->be->device;
    v.ndim = 1;
    v.shape[0] = g->buffers[b].numel;
    v.data = g->buffers[b].data;
    return v;
}

mpx_status node_forward(mpx_graph *g, gnode *n, int training) {
    const mpx_backend *be = g->be;
    mpx_tensor x, y, w, b, b2;
    switch (n->op) {
    case OP_INPUT: return MPX_OK;
    case OP_CONV2D:
        NEED(conv2d_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        if (n->n_param > 1) MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->conv2d_forward(&n->attr.conv, &x, &w, n->n_param > 1 ? &b : NULL, &y));
        break;
    case OP_LINEAR:
        NEED(linear_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        if (n->n_param > 1) MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->linear_forward(&x, &w, n->n_param > 1 ? &b : NULL, &y));
        break;
    case OP_BATCHNORM: {
        NEED(batchnorm_forward);
        mpx_batchnorm_attr a = n->attr.bn;
        a.training = training;
        mpx_tensor rm = buffer_view(g, n->buffer[0]), rv = buffer_view(g, n->buffer[1]);
        mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->batchnorm_forward(&a, &x, &w, &b, &rm, &rv, &sm, &si, &y));
        break;
    }
    case OP_RELU:
        NEED(relu_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->relu_forward(&x, &y));
        break;
    case OP_MAXPOOL2D:
        NEED(maxpool2d_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->maxpool2d_forward(&n->attr.pool, &x, &y));
        break;
    case OP_AVGPOOL_GLOBAL:
        NEED(avgpool_global_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->avgpool_global_forward(&x, &y));
        break;
    case OP_ADD:
        NEED(add_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_value(g, n->in[1], &b2));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->add_forward(&x, &b2, &y));
        break;
    case OP_SOFTMAX_CE: {
        NEED(softmax_ce_forward);
        mpx_tensor probs = aux_view(g, n, 0);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_value(g, n->in[1], &b2));
        MPX_TRY(view_output(g, n->out, &y));
        /* probs share the logits' shape */
        probs.ndim = x.ndim;
        memcpy(probs.shape, x.shape, sizeof probs.shape);
        MPX_TRY(be->softmax_ce_forward(&x, &b2, &y, &probs));
        break;
    }
    default: return mpx_fail(MPX_ERR_INTERNAL, "unknown op %d", (int)n->op);
    }
    return commit_value(g, n->out, &y);
}

/* Weight (and bias) gradients of conv/linear and their commits. */
static mpx_status gemm_layer_param_grads(mpx_graph *g, gnode *n, const mpx_tensor *dy) {
    mpx_tensor x, dw, db;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_param_grad(g, n->param[0], &dw));
    if (n->n_param > 1) MPX_TRY(view_param_grad(g, n->param[1], &db));
    mpx_tensor *pdb = n->n_param > 1 ? &db : NULL;
    if (n->op == OP_CONV2D)
        MPX_TRY(g->be->conv2d_backward_weights(&n->attr.conv, dy, &x, &dw, pdb));
    else
        MPX_TRY(g->be->linear_backward_weights(dy, &x, &dw, pdb));
    MPX_TRY(commit_param_grad(g, n, n->param[0], &dw));
    if (pdb) MPX_TRY(commit_param_grad(g, n, n->param[1], &db));
    return MPX_OK;
}

mpx_status node_backward(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *w0) {
    const mpx_backend *be = g->be;
    mpx_tensor dx, x, y;
    switch (n->op) {
    case OP_INPUT: return MPX_OK;
    case OP_CONV2D:
        NEED(conv2d_backward_data);
        NEED(conv2d_backward_weights);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (dx.data) {
            MPX_TRY(be->conv2d_backward_data(&n->attr.conv, dy, w0, &dx));
            MPX_TRY(commit_in_grad(g, n, 0, &dx));
        }
        return gemm_layer_param_grads(g, n, dy);
    case OP_LINEAR:
        NEED(linear_backward_data);
        NEED(linear_backward_weights);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (dx.data) {
            MPX_TRY(be->linear_backward_data(dy, w0, &dx));
            MPX_TRY(commit_in_grad(g, n, 0, &dx));
        }
        return gemm_layer_param_grads(g, n, dy);
    case OP_BATCHNORM: {
        NEED(batchnorm_backward);
        mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), dg, dbeta;
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        MPX_TRY(view_param_grad(g, n->param[0], &dg));
        MPX_TRY(view_param_grad(g, n->param[1], &dbeta));
        if (!dx.data) {
            /* The op always produces dx; give it scratch when nobody needs it. */
            dx.data = scratch_take(g, mpx_tensor_numel(&dx));
            if (!dx.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small");
            MPX_TRY(be->batchnorm_backward(&n->attr.bn, dy, &x, w0, &sm, &si, &dx, &dg, &dbeta));
        } else {
            MPX_TRY(be->batchnorm_backward(&n->attr.bn, dy, &x, w0, &sm, &si, &dx, &dg, &dbeta));
            MPX_TRY(commit_in_grad(g, n, 0, &dx));
        }
        MPX_TRY(commit_param_grad(g, n, n->param[0], &dg));
        return commit_param_grad(g, n, n->param[1], &dbeta);
    }
    case OP_RELU:
        NEED(relu_backward);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(view_value(g, n->out, &y));
        MPX_TRY(be->relu_backward(dy, &y, &dx));
        return commit_in_grad(g, n, 0, &dx);
    case OP_MAXPOOL2D:
        NEED(maxpool2d_backward);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_value(g, n->out, &y));
        MPX_TRY(be->maxpool2d_backward(&n->attr.pool, dy, &x, &y, &dx));
        return commit_in_grad(g, n, 0, &dx);
    case OP_AVGPOOL_GLOBAL:
        NEED(avgpool_global_backward);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(be->avgpool_global_backward(dy, &dx));
        return commit_in_grad(g, n, 0, &dx);
    case OP_ADD:
        for (int s = 0; s < 2; s++) {
            MPX_TRY(view_in_grad(g, n, s, &dx));
            if (!dx.data) continue;
            be->copy(dx.data, dy->data, (size_t)mpx_tensor_numel(dy) * sizeof(float));
            MPX_TRY(commit_in_grad(g, n, s, &dx));
        }
        return MPX_OK;
    case OP_SOFTMAX_CE: {
        NEED(softmax_ce_backward);
        mpx_tensor probs = aux_view(g, n, 0), labels;
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(view_value(g, n->in[1], &labels));
        probs.ndim = dx.ndim;
        memcpy(probs.shape, dx.shape, sizeof probs.shape);
        MPX_TRY(be->softmax_ce_backward(&probs, &labels, &dx));
        return commit_in_grad(g, n, 0, &dx);
    }
    default: return mpx_fail(MPX_ERR_INTERNAL, "unknown op %d", (int)n->op);
    }
}

int op_moves_values(op_kind op) { return op == OP_RELU || op == OP_ADD || op == OP_MAXPOOL2D; }

mpx_status node_backward_shadow(mpx_graph *g, gnode *n, const mpx_tensor *dy) {
    const mpx_backend *be = g->be;
    for (int s = 0; s < n->n_in; s++) {
        if (!shadow_needed(g, n, s)) continue;
        const gtensor *t = &g->tensors[n->in[s]];
        mpx_tensor dx, x, y;
        memset(&dx, 0, sizeof dx);
        dx.dtype = MPX_F32;
        dx.device = be->device;
        dx.ndim = t->ndim;
        memcpy(dx.shape, t->shape, sizeof dx.shape);
        dx.data = scratch_take(g, t->numel);
        if (!dx.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small for shadows");
        switch (n->op) {
        case OP_RELU:
            MPX_TRY(view_value(g, n->out, &y));
            MPX_TRY(be->relu_backward(dy, &y, &dx));
            break;
        case OP_MAXPOOL2D:
            MPX_TRY(view_value(g, n->in[0], &x));
            MPX_TRY(view_value(g, n->out, &y));
            MPX_TRY(be->maxpool2d_backward(&n->attr.pool, dy, &x, &y, &dx));
            break;
        case OP_ADD: be->copy(dx.data, dy->data, (size_t)t->numel * sizeof(float)); break;
        default: return mpx_fail(MPX_ERR_INTERNAL, "%s has no shadow backward", op_name(n->op));
        }
        MPX_TRY(commit_shadow(g, n, s, &dx));
    }
    return MPX_OK;
}

/* FLOPs: conv and linear count 2*M*N*K per GEMM (forward; backward-data and backward-weights
 * the same each, backward-data only when the input needs a gradient). Element-wise ops count
 * a few FLOPs per element (batch-norm 5 forward / 8 backward, others 1, softmax-CE 5). */
double node_flops(const mpx_graph *g, const gnode *n, int training) {
    const gtensor *out = &g->tensors[n->out];
    double elems = (double)out->numel, in_elems = n->n_in ? (double)g->tensors[n->in[0]].numel : 0;
    int dx_needed = n->n_in && g->tensors[n->in[0]].requires_grad;
    switch (n->op) {
    case OP_CONV2D:
    case OP_LINEAR: {
        double gemm = 2.0 * elems * (double)g->params[n->param[0]].numel / (double)out->shape[out->ndim - 1];
        return gemm * (training ? 2.0 + dx_needed : 1.0);
    }
    case OP_BATCHNORM: return elems * (training ? 13.0 : 5.0);
    case OP_RELU:
    case OP_ADD:
    case OP_MAXPOOL2D:
    case OP_AVGPOOL_GLOBAL: return (n->op == OP_AVGPOOL_GLOBAL ? in_elems : elems) * (training ? 2.0 : 1.0);
    case OP_SOFTMAX_CE: return in_elems * (training ? 7.0 : 5.0);
    default: return 0;
    }
}
