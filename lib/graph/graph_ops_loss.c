/* graph_ops_loss.c — the node glue of the losses: softmax cross-entropy (logits [..., K] taken
 * as rows [M, K], its probabilities saved for the backward) and SSD's MultiBox loss (priors,
 * probabilities, targets, encoded box targets and its workspace in the node's saved tensors).
 * A loss seeds the gradient: its backward gets no dy. */
#include "graph_ops.h"

mpx_status fwd_softmax_ce(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(softmax_ce_forward);
    mpx_tensor probs = aux_view(g, n, 0), x, labels, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_value(g, n->in[1], &labels));
    MPX_TRY(view_output(g, n->out, &y));
    const int64_t K = x.shape[x.ndim - 1], M = mpx_tensor_numel(&x) / K;
    x = reshaped(&x, 2, (int64_t[]){M, K});
    labels = reshaped(&labels, 1, (int64_t[]){M});
    probs = reshaped(&probs, 2, (int64_t[]){M, K});
    MPX_TRY(g->be->softmax_ce_forward(g->be, &x, &labels, &y, &probs));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_softmax_ce(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                          const mpx_tensor *w0) {
    (void)dy, (void)dy_data, (void)w0;
    NEED(softmax_ce_backward);
    mpx_tensor probs = aux_view(g, n, 0), labels, dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(view_value(g, n->in[1], &labels));
    const int64_t K = dx.shape[dx.ndim - 1], M = mpx_tensor_numel(&dx) / K;
    mpx_tensor dx2 = reshaped(&dx, 2, (int64_t[]){M, K});
    labels = reshaped(&labels, 1, (int64_t[]){M});
    probs = reshaped(&probs, 2, (int64_t[]){M, K});
    MPX_TRY(g->be->softmax_ce_backward(g->be, &probs, &labels, &dx2));
    return commit_in_grad(g, n, 0, &dx);
}

static mpx_multibox_attr multibox_attr(const gnode *n) {
    mpx_multibox_attr a = mpx_multibox_defaults();
    a.iou_threshold = n->attr.multibox.iou_threshold;
    a.neg_per_pos = (int)n->attr.multibox.neg_per_pos;
    return a;
}

/* The saved probabilities [B, P, C], targets [B, P] and box targets [B, P, 4]. */
static void multibox_saved(const mpx_graph *g, const gnode *n, int64_t B, int64_t P, int64_t C,
                           mpx_tensor *probs, mpx_tensor *tgt, mpx_tensor *lt) {
    mpx_tensor p = aux_view(g, n, 1), t = aux_view(g, n, 2), l = aux_view(g, n, 3);
    *probs = reshaped(&p, 3, (int64_t[]){B, P, C});
    *tgt = reshaped(&t, 2, (int64_t[]){B, P});
    *lt = reshaped(&l, 3, (int64_t[]){B, P, 4});
}

mpx_status fwd_multibox(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(multibox_forward);
    mpx_multibox_attr a = multibox_attr(n);
    mpx_tensor conf, loc, boxes, labels, y, probs, tgt, lt;
    mpx_tensor pri = aux_view(g, n, 0), ws = aux_view(g, n, 4);
    MPX_TRY(view_value(g, n->in[0], &conf));
    MPX_TRY(view_value(g, n->in[1], &loc));
    MPX_TRY(view_value(g, n->in[2], &boxes));
    MPX_TRY(view_value(g, n->in[3], &labels));
    MPX_TRY(view_output(g, n->out, &y));
    const int64_t B = conf.shape[0], P = conf.shape[1], C = conf.shape[2];
    pri = reshaped(&pri, 2, (int64_t[]){P, 4});
    multibox_saved(g, n, B, P, C, &probs, &tgt, &lt);
    MPX_TRY(g->be->multibox_forward(g->be, &a, &conf, &loc, &pri, &boxes, &labels, &ws, &y, &probs, &tgt,
                                    &lt));
    return commit_value(g, n->out, &y);
}

/* The backward writes both gradients; one nobody needs goes to scratch. */
mpx_status bwd_multibox(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                        const mpx_tensor *w0) {
    (void)dy, (void)dy_data, (void)w0;
    NEED(multibox_backward);
    mpx_multibox_attr a = multibox_attr(n);
    mpx_tensor dconf, dloc, loc, probs, tgt, lt;
    MPX_TRY(view_in_grad(g, n, 0, &dconf));
    MPX_TRY(view_in_grad(g, n, 1, &dloc));
    MPX_TRY(view_value(g, n->in[1], &loc));
    multibox_saved(g, n, loc.shape[0], loc.shape[1], dconf.shape[2], &probs, &tgt, &lt);
    float *tmp[2] = {NULL, NULL};
    if (!dconf.data) dconf.data = tmp[0] = scratch_take(g, mpx_tensor_numel(&dconf));
    if (!dloc.data) dloc.data = tmp[1] = scratch_take(g, mpx_tensor_numel(&dloc));
    if (!dconf.data || !dloc.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small");
    MPX_TRY(g->be->multibox_backward(g->be, &a, &probs, &tgt, &loc, &lt, &dconf, &dloc));
    if (!tmp[0]) MPX_TRY(commit_in_grad(g, n, 0, &dconf));
    if (!tmp[1]) MPX_TRY(commit_in_grad(g, n, 1, &dloc));
    return MPX_OK;
}

/* softmax cross-entropy: 5 FLOPs per logit forward, 2 backward. */
double flops_softmax_ce(const mpx_graph *g, const gnode *n, int training) {
    return (double)g->tensors[n->in[0]].numel * (training ? 7.0 : 5.0);
}
