/* graph_ops_pointwise.c — the node glue of the ops that work element by element or on small
 * windows: relu (which may run inside its producer: plan_fusion), add (with a fused ReLU; an
 * input may share the output's gradient storage), gelu, dropout (its mask regenerated from the
 * node and the step), softmax (with an optional attention mask), max-pool, global average pool
 * and the embedding lookup. */
#include "graph_ops.h"

/* One input x, one output y: the views, and y's commit after `op` ran. */
#define UNARY_FORWARD(entry, ...)                                                                  \
    do {                                                                                           \
        NEED(entry);                                                                               \
        mpx_tensor x, y;                                                                           \
        MPX_TRY(view_value(g, n->in[0], &x));                                                      \
        MPX_TRY(view_output(g, n->out, &y));                                                       \
        MPX_TRY(g->be->entry(g->be, __VA_ARGS__));                                                 \
        return commit_value(g, n->out, &y);                                                        \
    } while (0)

mpx_status fwd_relu(mpx_graph *g, gnode *n, int training) {
    (void)training;
    if (n->plan.fused_into >= 0) return MPX_OK; /* its producer's forward wrote it */
    UNARY_FORWARD(relu_forward, &x, &y);
}

mpx_status bwd_relu(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                    const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(relu_backward);
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(shadow_relu(g, n, 0, dy, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status shadow_relu(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx) {
    (void)slot;
    mpx_tensor y;
    MPX_TRY(view_value(g, n->out, &y));
    return g->be->relu_backward(g->be, dy, &y, dx);
}

mpx_status fwd_add(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(add_forward);
    const int out = forward_out(g, n);
    mpx_tensor a, b, y;
    MPX_TRY(view_value(g, n->in[0], &a));
    MPX_TRY(view_value(g, n->in[1], &b));
    MPX_TRY(view_output(g, out, &y));
    MPX_TRY(n->plan.fused_relu >= 0 ? g->be->add_relu_forward(g->be, &a, &b, &y)
                                    : g->be->add_forward(g->be, &a, &b, &y));
    return commit_value(g, out, &y);
}

mpx_status bwd_add(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                   const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    for (int s = 0; s < 2; s++) {
        if (shares_grad(g, n, s)) { /* dy's storage is this input's gradient already */
            MPX_TRY(commit_shared_grad(g, n, s));
            continue;
        }
        mpx_tensor dx;
        MPX_TRY(view_in_grad(g, n, s, &dx));
        if (!dx.data) continue;
        MPX_TRY(move_all(g, &dx, dy));
        MPX_TRY(commit_in_grad(g, n, s, &dx));
    }
    return MPX_OK;
}

mpx_status fwd_gelu(mpx_graph *g, gnode *n, int training) {
    (void)training;
    UNARY_FORWARD(gelu_forward, &x, &y);
}

mpx_status bwd_gelu(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                    const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(gelu_backward);
    mpx_tensor dx, x;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(g->be->gelu_backward(g->be, dy, &x, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

/* Dropout's mask stream for this node at this step: forward and backward regenerate it. */
static mpx_dropout_attr dropout_attr(const mpx_graph *g, const gnode *n) {
    mpx_dropout_attr a = {n->attr.dropout.p, g->seed,
                          ((uint64_t)g->step << 20) ^ (uint64_t)(n - g->nodes), 0};
    return a;
}

mpx_status fwd_dropout(mpx_graph *g, gnode *n, int training) {
    mpx_dropout_attr a = dropout_attr(g, n);
    if (!training) a.p = 0; /* evaluation: the identity */
    UNARY_FORWARD(dropout_forward, &a, &x, &y);
}

mpx_status bwd_dropout(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(dropout_backward);
    mpx_dropout_attr a = dropout_attr(g, n);
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(g->be->dropout_backward(g->be, &a, dy, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status fwd_softmax(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(softmax_forward);
    mpx_tensor x, mask, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    if (n->n_in > 1) MPX_TRY(view_value(g, n->in[1], &mask));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(
        g->be->softmax_forward(g->be, n->attr.softmax.scale, &x, n->n_in > 1 ? &mask : NULL, &y));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_softmax(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(softmax_backward);
    mpx_tensor dx, y;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(view_value(g, n->out, &y));
    MPX_TRY(g->be->softmax_backward(g->be, n->attr.softmax.scale, dy, &y, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status fwd_maxpool2d(mpx_graph *g, gnode *n, int training) {
    (void)training;
    UNARY_FORWARD(maxpool2d_forward, &n->attr.pool, &x, &y);
}

mpx_status bwd_maxpool2d(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(maxpool2d_backward);
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(shadow_maxpool2d(g, n, 0, dy, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status shadow_maxpool2d(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy,
                            mpx_tensor *dx) {
    (void)slot;
    mpx_tensor x, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_value(g, n->out, &y));
    return g->be->maxpool2d_backward(g->be, &n->attr.pool, dy, &x, &y, dx);
}

mpx_status fwd_avgpool(mpx_graph *g, gnode *n, int training) {
    (void)training;
    UNARY_FORWARD(avgpool_global_forward, &x, &y);
}

mpx_status bwd_avgpool(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(avgpool_global_backward);
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(g->be->avgpool_global_backward(g->be, dy, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status fwd_embedding(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(embedding_forward);
    mpx_tensor ids, w, y;
    MPX_TRY(view_value(g, n->in[0], &ids));
    MPX_TRY(view_param(g, n->param[0], &w));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(g->be->embedding_forward(g->be, &ids, &w, &y));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_embedding(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(embedding_backward);
    mpx_tensor ids, dw;
    MPX_TRY(view_value(g, n->in[0], &ids));
    MPX_TRY(view_param_grad(g, n->param[0], &dw));
    MPX_TRY(g->be->embedding_backward(g->be, dy, &ids, &dw));
    return commit_param_grad(g, n, n->param[0], &dw);
}

/* A few FLOPs per element: gelu 15 forward / 15 backward, softmax 5 / 3, the others 1 / 1
 * (the global average pool per input element). */
double flops_pointwise(const mpx_graph *g, const gnode *n, int training) {
    const double elems = (double)g->tensors[n->out].numel;
    switch (n->op) {
    case OP_AVGPOOL_GLOBAL: return (double)g->tensors[n->in[0]].numel * (training ? 2.0 : 1.0);
    case OP_GELU: return elems * (training ? 30.0 : 15.0);
    case OP_SOFTMAX: return elems * (training ? 8.0 : 5.0);
    default: return elems * (training ? 2.0 : 1.0);
    }
}
