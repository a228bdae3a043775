/* graph_ops.c — a node's forward, backward, shadow backward and FLOPs through the op table
 * (graph_optab.c; each kind's glue in graph_ops_<family>.c). */
#include <string.h>

#include "graph_ops.h"

static mpx_status unknown(const gnode *n) {
    return mpx_fail(MPX_ERR_INTERNAL, "unknown op %d", (int)n->op);
}

mpx_status node_forward(mpx_graph *g, gnode *n, int training) {
    const op_row *r = op_row_of(n->op);
    if (!r) return unknown(n);
    return r->forward ? r->forward(g, n, training) : MPX_OK;
}

mpx_status node_backward(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0) {
    const op_row *r = op_row_of(n->op);
    if (!r) return unknown(n);
    return r->backward ? r->backward(g, n, dy, dy_data ? dy_data : dy, w0) : MPX_OK;
}

mpx_status node_backward_shadow(mpx_graph *g, gnode *n, const mpx_tensor *dy) {
    const op_row *r = op_row_of(n->op);
    if (!r || !r->shadow)
        return mpx_fail(MPX_ERR_INTERNAL, "%s has no shadow backward", op_name(n->op));
    for (int s = 0; s < n->n_in; s++) {
        if (!shadow_needed(g, n, s)) continue;
        const gtensor *t = &g->tensors[n->in[s]];
        mpx_tensor dx;
        memset(&dx, 0, sizeof dx);
        dx.dtype = MPX_F32;
        dx.device = g->be->device;
        dx.ndim = t->ndim;
        memcpy(dx.shape, t->shape, sizeof dx.shape);
        dx.data = scratch_take(g, t->numel);
        if (!dx.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small for shadows");
        MPX_TRY(r->shadow(g, n, s, dy, &dx));
        MPX_TRY(commit_shadow(g, n, s, &dx));
    }
    return MPX_OK;
}

double node_flops(const mpx_graph *g, const gnode *n, int training) {
    const op_row *r = op_row_of(n->op);
    return r && r->flops ? r->flops(g, n, training) : 0;
}
