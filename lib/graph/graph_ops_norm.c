/* graph_ops_norm.c — the node glue of batch-norm (running statistics in the graph's buffers,
 * mean and inverse std saved for the backward, a ReLU fused into it: plan_fusion) and
 * layer-norm and L2-norm. Their backward passes always produce dx; nodes whose input needs no
 * gradient get it in scratch. */
#include "graph_ops.h"

mpx_status fwd_batchnorm(mpx_graph *g, gnode *n, int training) {
    NEED(batchnorm_forward);
    mpx_batchnorm_attr a = n->attr.bn;
    a.training = training;
    a.relu = n->plan.fused_relu >= 0;
    if (training) MPX_TRY(dist_bn_attr(g, &a));
    const int out = forward_out(g, n);
    mpx_tensor rm = buffer_view(g, n->buffer[0]), rv = buffer_view(g, n->buffer[1]);
    mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), x, w, b, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_param(g, n->param[0], &w));
    MPX_TRY(view_param(g, n->param[1], &b));
    MPX_TRY(view_output(g, out, &y));
    MPX_TRY(g->be->batchnorm_forward(g->be, &a, &x, &w, &b, &rm, &rv, &sm, &si, &y));
    return commit_value(g, out, &y);
}

/* dx, dgamma and dbeta's views; dx in scratch when the input needs no gradient (*needed 0). */
static mpx_status grad_views(mpx_graph *g, gnode *n, mpx_tensor *dx, mpx_tensor *dg,
                             mpx_tensor *dbeta, int *needed) {
    MPX_TRY(view_in_grad(g, n, 0, dx));
    MPX_TRY(view_param_grad(g, n->param[0], dg));
    if (dbeta) MPX_TRY(view_param_grad(g, n->param[1], dbeta));
    *needed = dx->data != NULL;
    if (!*needed) {
        dx->data = scratch_take(g, mpx_tensor_numel(dx));
        if (!dx->data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small");
    }
    return MPX_OK;
}

mpx_status bwd_batchnorm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0) {
    (void)dy_data;
    NEED(batchnorm_backward);
    mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), x, dx, dg, dbeta, beta;
    /* dy may be the gradient at the fused ReLU's output (graph_exec.c: relu_bwd_fused); the
     * op then recomputes the forward's result, which needs beta */
    mpx_batchnorm_attr a = n->attr.bn;
    MPX_TRY(dist_bn_attr(g, &a));
    const int alias = g->tensors[n->out].pass.grad_alias;
    a.relu_dy = alias >= 0;
    a.relu_store = alias >= 0 ? g->tensors[alias].plan.dtype : MPX_F32;
    if (a.relu_dy) MPX_TRY(view_param(g, n->param[1], &beta));
    MPX_TRY(view_value(g, n->in[0], &x));
    int needed;
    MPX_TRY(grad_views(g, n, &dx, &dg, &dbeta, &needed));
    MPX_TRY(g->be->batchnorm_backward(g->be, &a, dy, &x, w0, a.relu_dy ? &beta : NULL, &sm, &si, &dx, &dg,
                                      &dbeta));
    if (needed) MPX_TRY(commit_in_grad(g, n, 0, &dx));
    MPX_TRY(commit_param_grad(g, n, n->param[0], &dg));
    return commit_param_grad(g, n, n->param[1], &dbeta);
}

mpx_status fwd_layernorm(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(layernorm_forward);
    mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), x, w, b, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_param(g, n->param[0], &w));
    MPX_TRY(view_param(g, n->param[1], &b));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(g->be->layernorm_forward(g->be, n->attr.ln.eps, &x, &w, &b, &sm, &si, &y));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_layernorm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0) {
    (void)dy_data;
    NEED(layernorm_backward);
    mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), x, dx, dg, dbeta;
    MPX_TRY(view_value(g, n->in[0], &x));
    int needed;
    MPX_TRY(grad_views(g, n, &dx, &dg, &dbeta, &needed));
    MPX_TRY(g->be->layernorm_backward(g->be, dy, &x, w0, &sm, &si, &dx, &dg, &dbeta));
    if (needed) MPX_TRY(commit_in_grad(g, n, 0, &dx));
    MPX_TRY(commit_param_grad(g, n, n->param[0], &dg));
    return commit_param_grad(g, n, n->param[1], &dbeta);
}

mpx_status fwd_l2norm(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(l2norm_forward);
    mpx_tensor si = aux_view(g, n, 0), x, w, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_param(g, n->param[0], &w));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(g->be->l2norm_forward(g->be, n->attr.ln.eps, &x, &w, &si, &y));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_l2norm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0) {
    (void)dy_data;
    NEED(l2norm_backward);
    mpx_tensor si = aux_view(g, n, 0), x, dx, dg;
    MPX_TRY(view_value(g, n->in[0], &x));
    int needed;
    MPX_TRY(grad_views(g, n, &dx, &dg, NULL, &needed));
    MPX_TRY(g->be->l2norm_backward(g->be, dy, &x, w0, &si, &dx, &dg));
    if (needed) MPX_TRY(commit_in_grad(g, n, 0, &dx));
    return commit_param_grad(g, n, n->param[0], &dg);
}

/* 5 FLOPs per element forward, 8 backward. */
double flops_norm(const mpx_graph *g, const gnode *n, int training) {
    return (double)g->tensors[n->out].numel * (training ? 13.0 : 5.0);
}
