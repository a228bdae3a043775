/* graph_ops_gemm.c — the node glue of the GEMM family: conv2d, linear, linear_t (weights
 * [OUT, IN]: BERT's tied decoder) and bmm. Their operands go through gemm_operand (TF32 in tf32
 * mode); a linear layer that only a loss reads computes the rows that loss keeps
 * (plan_loss_rows); a backward-data pass applies the layer's adaptive factor itself when the
 * view is 16-bit storage and the backend has the scaled entry (in_grad_factor). */
#include "graph_ops.h"

/* The labels of the loss that alone reads linear node n (plan_loss_rows) as the rows forward's
 * mask: I32 [M], M the rows of x [..., IN]. */
static mpx_status loss_rows_mask(mpx_graph *g, const gnode *n, const mpx_tensor *x,
                                 mpx_tensor *mask) {
    MPX_TRY(view_value(g, n->plan.loss_rows, mask));
    const int64_t m = mpx_tensor_numel(x) / x->shape[x->ndim - 1];
    if (mpx_tensor_numel(mask) != m)
        return mpx_fail(MPX_ERR_INTERNAL, "'%s': %lld loss labels for %lld rows", n->name,
                        (long long)mpx_tensor_numel(mask), (long long)m);
    *mask = reshaped(mask, 1, (int64_t[]){m});
    return MPX_OK;
}

/* x, the weight, the bias (NULL without one) and the output view of a conv/linear node. */
static mpx_status layer_views(mpx_graph *g, gnode *n, mpx_tensor *x, mpx_tensor *w, mpx_tensor *b,
                              mpx_tensor **pb, mpx_tensor *y) {
    MPX_TRY(view_value(g, n->in[0], x));
    MPX_TRY(view_param(g, n->param[0], w));
    *pb = NULL;
    if (n->n_param > 1) {
        MPX_TRY(view_param(g, n->param[1], b));
        *pb = b;
    }
    MPX_TRY(view_output(g, n->out, y));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, x));
    return gemm_operand(g, n, MPX_OPERAND_W, w);
}

mpx_status fwd_conv2d(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(conv2d_forward);
    mpx_tensor x, w, b, *pb, y;
    MPX_TRY(layer_views(g, n, &x, &w, &b, &pb, &y));
    MPX_TRY(g->be->conv2d_forward(g->be, &n->attr.conv, &x, &w, pb, &y));
    return commit_value(g, n->out, &y);
}

mpx_status fwd_linear(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(linear_forward);
    mpx_tensor x, w, b, *pb, y, mask;
    MPX_TRY(layer_views(g, n, &x, &w, &b, &pb, &y));
    if (n->plan.loss_rows >= 0) {
        MPX_TRY(loss_rows_mask(g, n, &x, &mask));
        MPX_TRY(g->be->linear_forward_rows(g->be, &x, &w, pb, &mask, &y));
    } else {
        MPX_TRY(g->be->linear_forward(g->be, &x, &w, pb, &y));
    }
    return commit_value(g, n->out, &y);
}

mpx_status fwd_linear_t(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(linear_t_forward);
    mpx_tensor x, w, b, *pb, y, mask;
    MPX_TRY(layer_views(g, n, &x, &w, &b, &pb, &y));
    if (n->plan.loss_rows >= 0) {
        MPX_TRY(loss_rows_mask(g, n, &x, &mask));
        MPX_TRY(g->be->linear_t_forward_rows(g->be, &x, &w, pb, &mask, &y));
    } else {
        MPX_TRY(g->be->linear_t_forward(g->be, &x, &w, pb, &y));
    }
    return commit_value(g, n->out, &y);
}

mpx_status fwd_bmm(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(bmm_forward);
    mpx_tensor a, b, y;
    MPX_TRY(view_value(g, n->in[0], &a));
    MPX_TRY(view_value(g, n->in[1], &b));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, &a));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_W, &b));
    MPX_TRY(g->be->bmm_forward(g->be, &n->attr.bmm, &a, &b, &y));
    return commit_value(g, n->out, &y);
}

/* The input gradient of a conv/linear node from dy_data and the weight, with the layer's
 * factor applied by the op when in_grad_factor asks for one. */
static mpx_status data_grad(mpx_graph *g, gnode *n, const mpx_tensor *dy_data,
                            const mpx_tensor *w0) {
    const mpx_backend *be = g->be;
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    const double s = in_grad_factor(g, n, 0, &dx);
    const float f = (float)s;
    switch (n->op) {
    case OP_CONV2D:
        NEED(conv2d_backward_data);
        MPX_TRY(s != 1.0 ? be->conv2d_backward_data_scaled(be, &n->attr.conv, f, dy_data, w0, &dx)
                         : be->conv2d_backward_data(be, &n->attr.conv, dy_data, w0, &dx));
        break;
    case OP_LINEAR:
        NEED(linear_backward_data);
        MPX_TRY(s != 1.0 ? be->linear_backward_data_scaled(be, f, dy_data, w0, &dx)
                         : be->linear_backward_data(be, dy_data, w0, &dx));
        break;
    default:
        NEED(linear_t_backward_data);
        MPX_TRY(s != 1.0 ? be->linear_t_backward_data_scaled(be, f, dy_data, w0, &dx)
                         : be->linear_t_backward_data(be, dy_data, w0, &dx));
        break;
    }
    return commit_in_grad(g, n, 0, &dx);
}

/* Weight (and bias) gradients of a conv/linear node and their commits. */
static mpx_status param_grads(mpx_graph *g, gnode *n, const mpx_tensor *dy) {
    const mpx_backend *be = g->be;
    mpx_tensor x, dw, db;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, &x));
    MPX_TRY(view_param_grad(g, n->param[0], &dw));
    if (n->n_param > 1) MPX_TRY(view_param_grad(g, n->param[1], &db));
    mpx_tensor *pdb = n->n_param > 1 ? &db : NULL;
    switch (n->op) {
    case OP_CONV2D:
        NEED(conv2d_backward_weights);
        MPX_TRY(be->conv2d_backward_weights(be, &n->attr.conv, dy, &x, &dw, pdb));
        break;
    case OP_LINEAR:
        NEED(linear_backward_weights);
        MPX_TRY(be->linear_backward_weights(be, dy, &x, &dw, pdb));
        break;
    default:
        NEED(linear_t_backward_weights);
        MPX_TRY(be->linear_t_backward_weights(be, dy, &x, &dw, pdb));
        break;
    }
    MPX_TRY(commit_param_grad(g, n, n->param[0], &dw));
    return pdb ? commit_param_grad(g, n, n->param[1], &db) : MPX_OK;
}

static mpx_status layer_backward(mpx_graph *g, gnode *n, const mpx_tensor *dy,
                                 const mpx_tensor *dy_data, const mpx_tensor *w0) {
    MPX_TRY(data_grad(g, n, dy_data, w0));
    return param_grads(g, n, dy);
}

mpx_status bwd_conv2d(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0) {
    return layer_backward(g, n, dy, dy_data, w0);
}

mpx_status bwd_linear(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0) {
    return layer_backward(g, n, dy, dy_data, w0);
}

mpx_status bwd_linear_t(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                        const mpx_tensor *w0) {
    return layer_backward(g, n, dy, dy_data, w0);
}

mpx_status bwd_bmm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                   const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(bmm_backward);
    mpx_tensor a, b, da, db;
    MPX_TRY(view_value(g, n->in[0], &a));
    MPX_TRY(view_value(g, n->in[1], &b));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, &a));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_W, &b));
    MPX_TRY(view_in_grad(g, n, 0, &da));
    MPX_TRY(view_in_grad(g, n, 1, &db));
    if (!da.data && !db.data) return MPX_OK;
    MPX_TRY(
        g->be->bmm_backward(g->be, &n->attr.bmm, dy, &a, &b, da.data ? &da : NULL, db.data ? &db : NULL));
    MPX_TRY(commit_in_grad(g, n, 0, &da));
    return commit_in_grad(g, n, 1, &db);
}

/* 2 M N K per GEMM: the forward; in training backward-weights too, and backward-data when the
 * input needs a gradient. */
static double gemm_passes(const mpx_graph *g, const gnode *n, int training, double gemm) {
    const int dx_needed = n->n_in && g->tensors[n->in[0]].requires_grad;
    return gemm * (training ? 2.0 + dx_needed : 1.0);
}

double flops_conv_linear(const mpx_graph *g, const gnode *n, int training) {
    const gtensor *out = &g->tensors[n->out];
    const double gemm = 2.0 * (double)out->numel * (double)g->params[n->param[0]].numel /
                        (double)out->shape[out->ndim - 1];
    return gemm_passes(g, n, training, gemm);
}

double flops_linear_t(const mpx_graph *g, const gnode *n, int training) {
    const double in = (double)g->params[n->param[0]].shape[1]; /* w [OUT, IN] */
    return gemm_passes(g, n, training, 2.0 * (double)g->tensors[n->out].numel * in);
}

double flops_bmm(const mpx_graph *g, const gnode *n, int training) {
    const gtensor *a = &g->tensors[n->in[0]];
    const int64_t k = n->attr.bmm.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    return 2.0 * (double)g->tensors[n->out].numel * (double)k * (training ? 3.0 : 1.0);
}
