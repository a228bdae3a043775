/* graph_ops_layout.c — the node glue of the ops that only move values: permute, reshape (a copy
 * in the views' dtypes) and concat (per batch element, along the last axes: SSD's heads). Their
 * backward moves dy back; on statistics steps it runs again on FP32 shadows (shadow_*). */
#include <string.h>

#include "graph_ops.h"

mpx_status fwd_permute(mpx_graph *g, gnode *n, int training) {
    (void)training;
    NEED(permute_forward);
    mpx_tensor x, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(g->be->permute_forward(g->be, n->attr.perm, &x, &y));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_permute(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    NEED(permute_backward);
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(shadow_permute(g, n, 0, dy, &dx));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status shadow_permute(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx) {
    (void)slot;
    return g->be->permute_backward(g->be, n->attr.perm, dy, dx);
}

mpx_status fwd_reshape(mpx_graph *g, gnode *n, int training) {
    (void)training;
    mpx_tensor x, y;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(move_all(g, &y, &x));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_reshape(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    mpx_tensor dx;
    MPX_TRY(view_in_grad(g, n, 0, &dx));
    if (!dx.data) return MPX_OK;
    MPX_TRY(move_all(g, &dx, dy));
    return commit_in_grad(g, n, 0, &dx);
}

mpx_status shadow_copy(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx) {
    (void)n, (void)slot;
    return move_all(g, dx, dy);
}

/* Concatenation per batch element: out[b] = x_0[b] ++ x_1[b] ++ ... (forward), and the split
 * back (backward, into each slot's view, or only the slots whose view has data). */
static mpx_status concat_copy(const mpx_graph *g, const gnode *n, mpx_tensor *parts, int split,
                              const mpx_tensor *whole) {
    const int64_t B = whole->shape[0], per_b = mpx_tensor_numel(whole) / B;
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = mpx_tensor_numel(&parts[i]) / B;
        if (parts[i].data)
            for (int64_t b = 0; b < B; b++) {
                if (split)
                    MPX_TRY(move_elems(g, &parts[i], b * len, whole, b * per_b + off, len));
                else
                    MPX_TRY(move_elems(g, whole, b * per_b + off, &parts[i], b * len, len));
            }
        off += len;
    }
    return MPX_OK;
}

mpx_status fwd_concat(mpx_graph *g, gnode *n, int training) {
    (void)training;
    mpx_tensor parts[MAX_IN], y;
    for (int i = 0; i < n->n_in; i++) MPX_TRY(view_value(g, n->in[i], &parts[i]));
    MPX_TRY(view_output(g, n->out, &y));
    MPX_TRY(concat_copy(g, n, parts, 0, &y));
    return commit_value(g, n->out, &y);
}

mpx_status bwd_concat(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0) {
    (void)dy_data, (void)w0;
    mpx_tensor parts[MAX_IN];
    for (int i = 0; i < n->n_in; i++) MPX_TRY(view_in_grad(g, n, i, &parts[i]));
    MPX_TRY(concat_copy(g, n, parts, 1, dy));
    for (int i = 0; i < n->n_in; i++) MPX_TRY(commit_in_grad(g, n, i, &parts[i]));
    return MPX_OK;
}

/* Only slot `slot` is filled: the other parts carry their shapes (for the offsets), no data. */
mpx_status shadow_concat(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx) {
    mpx_tensor parts[MAX_IN];
    memset(parts, 0, sizeof parts);
    for (int i = 0; i < n->n_in; i++) {
        const gtensor *ti = &g->tensors[n->in[i]];
        parts[i].ndim = ti->ndim;
        memcpy(parts[i].shape, ti->shape, sizeof parts[i].shape);
    }
    parts[slot] = *dx;
    return concat_copy(g, n, parts, 1, dy);
}
