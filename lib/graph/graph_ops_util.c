/* graph_ops_util.c — what the node glue of every op kind shares (graph_ops.h): views of a
 * node's saved tensors and buffers, reshaped views, element moves across the dtypes views come
 * in, and the quantizing modes' first step for a GEMM operand (operand_f32). */
#include <string.h>

#include "graph_ops.h"

mpx_status op_missing(const mpx_graph *g, const char *what) {
    return mpx_fail(MPX_ERR_UNSUPPORTED, "%s is not implemented on the %s backend", what,
                    g->be->name);
}

mpx_tensor aux_view(const mpx_graph *g, const gnode *n, int a) {
    mpx_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = n->plan.aux_dtype[a];
    v.device = g->be->device;
    v.ndim = 1;
    v.shape[0] = n->plan.aux_numel[a];
    v.data = n->plan.aux[a];
    return v;
}

mpx_tensor buffer_view(const mpx_graph *g, int b) {
    mpx_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = MPX_F32;
    v.device = g->be->device;
    v.ndim = 1;
    v.shape[0] = g->buffers[b].numel;
    v.data = g->buffers[b].data;
    return v;
}

int forward_out(const mpx_graph *g, const gnode *n) {
    return n->plan.fused_relu >= 0 ? g->nodes[n->plan.fused_relu].out : n->out;
}

mpx_tensor reshaped(const mpx_tensor *v, int ndim, const int64_t *shape) {
    mpx_tensor r = *v;
    r.ndim = ndim;
    memset(r.shape, 0, sizeof r.shape);
    memcpy(r.shape, shape, (size_t)ndim * sizeof *shape);
    return r;
}

/* An op's 16-bit output view exists only under round-to-nearest (graph_views.c), so a move
 * into 16-bit storage rounds to nearest. */
mpx_status move_elems(const mpx_graph *g, const mpx_tensor *dst, int64_t dof, const mpx_tensor *src,
                      int64_t sof, int64_t n) {
    const size_t ds = mpx_dtype_size(dst->dtype), ss = mpx_dtype_size(src->dtype);
    void *d = (char *)dst->data + (size_t)dof * ds;
    const void *sp = (const char *)src->data + (size_t)sof * ss;
    if (dst->dtype == src->dtype) {
        g->be->copy(g->be, d, sp, (size_t)n * ds);
    } else if (dst->dtype == MPX_F32) {
        g->be->decode(g->be, src->dtype, sp, d, (size_t)n);
    } else if (src->dtype == MPX_F32) {
        mpx_cast_spec c = mpx_cast_plain(dst->dtype);
        g->be->cast(g->be, &c, sp, d, (size_t)n);
    } else {
        return mpx_fail(MPX_ERR_INTERNAL, "cannot move %s values into %s",
                        mpx_dtype_name(src->dtype), mpx_dtype_name(dst->dtype));
    }
    return MPX_OK;
}

mpx_status move_all(const mpx_graph *g, const mpx_tensor *dst, const mpx_tensor *src) {
    return move_elems(g, dst, 0, src, 0, mpx_tensor_numel(src));
}

mpx_status operand_f32(mpx_graph *g, const gnode *n, int slot, const mpx_tensor *v,
                       const char *what, float **f, mpx_layer_stats **ls, mpx_cast_stats **st) {
    const int64_t count = mpx_tensor_numel(v);
    if (!(*f = scratch_take(g, count))) return scratch_fail(g, what);
    g->be->decode(g->be, v->dtype, v->data, *f, (size_t)count); /* F32: a copy */
    const int counted = g->pass && g->pass->bw->stats && n->layer >= 0;
    *ls = counted ? &g->pass->bw->stats[n->layer] : NULL;
    *st = counted ? STATS_AT(g, dev_stats, n->layer, STATS_OPERAND + slot) : NULL;
    return MPX_OK;
}
