/* graph_ops_gemm.c — the node glue of the GEMM family: conv2d, linear, linear_t (weights
 * [OUT, IN]: BERT's tied decoder) and bmm. Their operands go through gemm_operand (TF32 in tf32
 * mode), each told where the GEMM reading it reduces (gemm_k); a linear layer that only a loss
 * reads computes the rows that loss keeps (plan_loss_rows); a backward-data pass applies the
 * layer's adaptive factor itself when the view is 16-bit storage and the backend has the scaled
 * entry (in_grad_factor). */
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
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, GEMM_K_LAST, x));
    return gemm_operand(g, n, MPX_OPERAND_W, n->op == OP_LINEAR_T ? GEMM_K_LAST : GEMM_K_ROWS, w);
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
    /* the reduction K: a [.., M, K] or [.., K, M], b [.., K, N] or [.., N, K] */
    const mpx_bmm_attr *at = &n->attr.bmm;
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, at->trans_a ? GEMM_K_BATCH_ROWS : GEMM_K_LAST, &a));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_W, at->trans_b ? GEMM_K_LAST : GEMM_K_BATCH_ROWS, &b));
    MPX_TRY(g->be->bmm_forward(g->be, &n->attr.bmm, &a, &b, &y));
    return commit_value(g, n->out, &y);
}

/* *copy = *v as the GEMM that reduces it along k reads it (gemm_operand); NULL stays NULL. */
static mpx_status operand_copy(mpx_graph *g, gnode *n, int slot, gemm_k k, const mpx_tensor *v,
                               mpx_tensor *copy) {
    if (!v) return MPX_OK;
    *copy = *v;
    return gemm_operand(g, n, slot, k, copy);
}

/* The input gradient of a conv/linear node from dy_data and the weight w0 (as stored), with the
 * layer's factor applied by the op when in_grad_factor asks for one. The GEMM reduces over OUT:
 * dy_data's last dimension, the weight's last ([IN, OUT], HWIO) or first ([OUT, IN]); dy_read
 * is dy_data as read already for the weight gradient when that copy serves here too. */
static mpx_status data_grad(mpx_graph *g, gnode *n, const mpx_tensor *dy_data,
                            const mpx_tensor *dy_read, const mpx_tensor *w0) {
    const mpx_backend *be = g->be;
    mpx_tensor dx, dyq, wq;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    if (!dy_read) MPX_TRY(operand_copy(g, n, MPX_OPERAND_DY, GEMM_K_LAST, dy_data, &dyq));
    dy_data = dy_read ? dy_read : &dyq;
    MPX_TRY(operand_copy(g, n, MPX_OPERAND_W, n->op == OP_LINEAR_T ? GEMM_K_ROWS : GEMM_K_LAST,
                         w0, &wq));
    w0 = &wq;
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

/* Weight (and bias) gradients of a conv/linear node from dy as read (dyq) and their commits.
 * The GEMM reduces over positions, x's and dy's leading dimensions. */
static mpx_status param_grads(mpx_graph *g, gnode *n, const mpx_tensor *dyq) {
    const mpx_backend *be = g->be;
    mpx_tensor x, dw, db;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, GEMM_K_ROWS, &x));
    MPX_TRY(view_param_grad(g, n->param[0], &dw));
    if (n->n_param > 1) MPX_TRY(view_param_grad(g, n->param[1], &db));
    mpx_tensor *pdb = n->n_param > 1 ? &db : NULL;
    switch (n->op) {
    case OP_CONV2D:
        NEED(conv2d_backward_weights);
        MPX_TRY(be->conv2d_backward_weights(be, &n->attr.conv, dyq, &x, &dw, pdb));
        break;
    case OP_LINEAR:
        NEED(linear_backward_weights);
        MPX_TRY(be->linear_backward_weights(be, dyq, &x, &dw, pdb));
        break;
    default:
        NEED(linear_t_backward_weights);
        MPX_TRY(be->linear_t_backward_weights(be, dyq, &x, &dw, pdb));
        break;
    }
    MPX_TRY(commit_param_grad(g, n, n->param[0], &dw));
    return pdb ? commit_param_grad(g, n, n->param[1], &db) : MPX_OK;
}

/* dy is read once for both GEMMs unless they read it differently: dy_data is another tensor
 * (the factor applied, graph_exec.c: factor_into_dy) or the format blocks along K. */
static mpx_status layer_backward(mpx_graph *g, gnode *n, const mpx_tensor *dy,
                                 const mpx_tensor *dy_data, const mpx_tensor *w0) {
    mpx_tensor dyq;
    MPX_TRY(operand_copy(g, n, MPX_OPERAND_DY, GEMM_K_ROWS, dy, &dyq));
    const int shared = dy_data == dy && !mpx_precision_blocks_operands(&g->prec);
    MPX_TRY(data_grad(g, n, dy_data, shared ? &dyq : NULL, w0));
    return param_grads(g, n, &dyq);
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

/* da = dy op(b)^T reduces over N: dy's last dimension, b's last ([.., K, N]) or second-to-last
 * (trans_b); db = op(a)^T dy over M: dy's second-to-last, a's ([.., M, K]) or its last
 * (trans_a). One backward call for both where dy reads the same for both, else one each. */
mpx_status bwd_bmm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                   const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(bmm_backward);
    const mpx_bmm_attr *at = &n->attr.bmm;
    mpx_tensor a, b, da, db, dyq;
    MPX_TRY(view_in_grad(g, n, 0, &da));
    MPX_TRY(view_in_grad(g, n, 1, &db));
    if (!da.data && !db.data) return MPX_OK;
    mpx_tensor *pda = da.data ? &da : NULL, *pdb = db.data ? &db : NULL;
    MPX_TRY(view_value(g, n->in[0], &a));
    MPX_TRY(view_value(g, n->in[1], &b));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_X, at->trans_a ? GEMM_K_LAST : GEMM_K_BATCH_ROWS, &a));
    MPX_TRY(gemm_operand(g, n, MPX_OPERAND_W, at->trans_b ? GEMM_K_BATCH_ROWS : GEMM_K_LAST, &b));
    if (!mpx_precision_blocks_operands(&g->prec)) {
        MPX_TRY(operand_copy(g, n, MPX_OPERAND_DY, GEMM_K_LAST, dy, &dyq));
        MPX_TRY(g->be->bmm_backward(g->be, at, &dyq, &a, &b, pda, pdb));
    } else {
        if (pda) {
            MPX_TRY(operand_copy(g, n, MPX_OPERAND_DY, GEMM_K_LAST, dy, &dyq));
            MPX_TRY(g->be->bmm_backward(g->be, at, &dyq, &a, &b, pda, NULL));
        }
        if (pdb) {
            MPX_TRY(operand_copy(g, n, MPX_OPERAND_DY, GEMM_K_BATCH_ROWS, dy, &dyq));
            MPX_TRY(g->be->bmm_backward(g->be, at, &dyq, &a, &b, NULL, pdb));
        }
    }
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
