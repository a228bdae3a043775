/* graph_ops.c — what each node kind does in the forward and backward pass.
 *
 * Glue between a node and the backend's operator: fetch FP32 views (graph_views.c), call the
 * op, commit the results. No precision or scaling logic here: the views and commits carry it.
 */
#include <string.h>

#include "graph_internal.h"

static mpx_status missing(const mpx_graph *g, const char *what) {
    return mpx_fail(MPX_ERR_UNSUPPORTED, "%s is not implemented on the %s backend", what,
                    g->be->name);
}
#define NEED(fn) \
    do { if (!g->be->fn) return missing(g, #fn); } while (0)

static mpx_tensor aux_view(const mpx_graph *g, const gnode *n, int a) {
    mpx_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = n->aux_dtype[a];
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

/* Dropout's mask stream for this node at this step: forward and backward regenerate it. */
static mpx_dropout_attr dropout_attr(const mpx_graph *g, const gnode *n) {
    mpx_dropout_attr a = {n->attr.dropout.p, g->seed, ((uint64_t)g->step << 20) ^ (uint64_t)(n - g->nodes), 0};
    return a;
}

static mpx_multibox_attr multibox_attr(const gnode *n) {
    mpx_multibox_attr a = mpx_multibox_defaults();
    a.iou_threshold = n->attr.multibox.iou_threshold;
    a.neg_per_pos = (int)n->attr.multibox.neg_per_pos;
    return a;
}

/* A view of `v` with another shape (same element count): reshape nodes and [B,P,C] loss views. */
static mpx_tensor reshaped(const mpx_tensor *v, int ndim, const int64_t *shape) {
    mpx_tensor r = *v;
    r.ndim = ndim;
    memset(r.shape, 0, sizeof r.shape);
    memcpy(r.shape, shape, (size_t)ndim * sizeof *shape);
    return r;
}

/* n elements from src (element offset so) to dst (element offset do), across the dtypes views
 * come in (graph_exec.c): a copy when they match, else a decode into FP32 or a rounding to
 * nearest into 16-bit storage (an op's 16-bit output view exists only under RNE). */
static mpx_status move_elems(const mpx_graph *g, const mpx_tensor *dst, int64_t dof,
                             const mpx_tensor *src, int64_t sof, int64_t n) {
    const size_t ds = mpx_dtype_size(dst->dtype), ss = mpx_dtype_size(src->dtype);
    void *d = (char *)dst->data + (size_t)dof * ds;
    const void *sp = (const char *)src->data + (size_t)sof * ss;
    if (dst->dtype == src->dtype) {
        g->be->copy(d, sp, (size_t)n * ds);
    } else if (dst->dtype == MPX_F32) {
        g->be->decode(src->dtype, sp, d, (size_t)n);
    } else if (src->dtype == MPX_F32) {
        mpx_cast_spec c = mpx_cast_plain(dst->dtype);
        g->be->cast(&c, sp, d, (size_t)n);
    } else {
        return mpx_fail(MPX_ERR_INTERNAL, "cannot move %s values into %s",
                        mpx_dtype_name(src->dtype), mpx_dtype_name(dst->dtype));
    }
    return MPX_OK;
}

/* dst = src, the same elements (reshape, and the add/reshape backward's pass-through of dy). */
static mpx_status move_all(const mpx_graph *g, const mpx_tensor *dst, const mpx_tensor *src) {
    return move_elems(g, dst, 0, src, 0, mpx_tensor_numel(src));
}

/* Concatenation per batch element: out[b] = x_0[b] ++ x_1[b] ++ ... (forward), and the split
 * back (backward, into each slot's view, or only the slots that want it). */
static mpx_status concat_copy(const mpx_graph *g, const gnode *n, mpx_tensor *parts, int split,
                              const mpx_tensor *whole) {
    const int64_t B = whole->shape[0], per_b = mpx_tensor_numel(whole) / B;
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = mpx_tensor_numel(&parts[i]) / B;
        if (parts[i].data)
            for (int64_t b = 0; b < B; b++) {
                if (split) MPX_TRY(move_elems(g, &parts[i], b * len, whole, b * per_b + off, len));
                else MPX_TRY(move_elems(g, whole, b * per_b + off, &parts[i], b * len, len));
            }
        off += len;
    }
    return MPX_OK;
}

/* tf32 mode: an operand of the GEMM family rounded to TF32 (RNE) into scratch by the one cast —
 * what tensor cores read of FP32 data, done here so that every backend multiplies the same
 * values (a device then runs its TF32 units on them exactly). Other modes: left as it is. */
static mpx_status gemm_operand(mpx_graph *g, mpx_tensor *v) {
    if (g->prec.gemm_round != MPX_TF32 || !v->data || v->dtype != MPX_F32) return MPX_OK;
    const int64_t n = mpx_tensor_numel(v);
    float *f = scratch_take(g, n);
    if (!f) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small for a TF32 operand");
    mpx_cast_spec c = mpx_cast_plain(MPX_TF32);
    g->be->cast(&c, v->data, f, (size_t)n);
    v->data = f;
    return MPX_OK;
}

/* The labels of the loss that alone reads linear node n (plan_loss_rows) as the rows forward's
 * mask: I32 [M], M the rows of x [..., IN]. */
static mpx_status loss_rows_mask(mpx_graph *g, const gnode *n, const mpx_tensor *x,
                                 mpx_tensor *mask) {
    MPX_TRY(view_value(g, n->loss_rows, mask));
    const int64_t m = mpx_tensor_numel(x) / x->shape[x->ndim - 1];
    if (mpx_tensor_numel(mask) != m)
        return mpx_fail(MPX_ERR_INTERNAL, "'%s': %lld loss labels for %lld rows", n->name,
                        (long long)mpx_tensor_numel(mask), (long long)m);
    *mask = reshaped(mask, 1, (int64_t[]){m});
    return MPX_OK;
}

mpx_status node_forward(mpx_graph *g, gnode *n, int training) {
    const mpx_backend *be = g->be;
    mpx_tensor x, y, w, b, b2;
    /* A node with a fused ReLU writes the ReLU's output (compile: plan_fusion). */
    const int out = n->fused_relu >= 0 ? g->nodes[n->fused_relu].out : n->out;
    switch (n->op) {
    case OP_INPUT: return MPX_OK;
    case OP_CONV2D:
        NEED(conv2d_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        if (n->n_param > 1) MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(gemm_operand(g, &x));
        MPX_TRY(gemm_operand(g, &w));
        MPX_TRY(be->conv2d_forward(&n->attr.conv, &x, &w, n->n_param > 1 ? &b : NULL, &y));
        break;
    case OP_LINEAR:
        NEED(linear_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        if (n->n_param > 1) MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(gemm_operand(g, &x));
        MPX_TRY(gemm_operand(g, &w));
        if (n->loss_rows >= 0) {
            MPX_TRY(loss_rows_mask(g, n, &x, &b2));
            MPX_TRY(be->linear_forward_rows(&x, &w, n->n_param > 1 ? &b : NULL, &b2, &y));
        } else {
            MPX_TRY(be->linear_forward(&x, &w, n->n_param > 1 ? &b : NULL, &y));
        }
        break;
    case OP_BATCHNORM: {
        NEED(batchnorm_forward);
        mpx_batchnorm_attr a = n->attr.bn;
        a.training = training;
        a.relu = n->fused_relu >= 0;
        mpx_tensor rm = buffer_view(g, n->buffer[0]), rv = buffer_view(g, n->buffer[1]);
        mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, out, &y));
        MPX_TRY(be->batchnorm_forward(&a, &x, &w, &b, &rm, &rv, &sm, &si, &y));
        break;
    }
    case OP_RELU:
        if (n->fused_into >= 0) return MPX_OK; /* its producer's forward wrote it */
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
        MPX_TRY(view_output(g, out, &y));
        MPX_TRY(n->fused_relu >= 0 ? be->add_relu_forward(&x, &b2, &y) : be->add_forward(&x, &b2, &y));
        break;
    case OP_SOFTMAX_CE: {
        NEED(softmax_ce_forward);
        mpx_tensor probs = aux_view(g, n, 0);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_value(g, n->in[1], &b2));
        MPX_TRY(view_output(g, n->out, &y));
        /* The op takes rows: logits [..., K] as [M, K], labels [...] as [M]. */
        const int64_t K = x.shape[x.ndim - 1], M = mpx_tensor_numel(&x) / K;
        x = reshaped(&x, 2, (int64_t[]){M, K});
        b2 = reshaped(&b2, 1, (int64_t[]){M});
        probs = reshaped(&probs, 2, (int64_t[]){M, K});
        MPX_TRY(be->softmax_ce_forward(&x, &b2, &y, &probs));
        break;
    }
    case OP_EMBEDDING:
        NEED(embedding_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->embedding_forward(&x, &w, &y));
        break;
    case OP_LAYERNORM: {
        NEED(layernorm_forward);
        mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->layernorm_forward(n->attr.ln.eps, &x, &w, &b, &sm, &si, &y));
        break;
    }
    case OP_GELU:
        NEED(gelu_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->gelu_forward(&x, &y));
        break;
    case OP_BMM:
        NEED(bmm_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_value(g, n->in[1], &b2));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(gemm_operand(g, &x));
        MPX_TRY(gemm_operand(g, &b2));
        MPX_TRY(be->bmm_forward(&n->attr.bmm, &x, &b2, &y));
        break;
    case OP_SOFTMAX:
        NEED(softmax_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        if (n->n_in > 1) MPX_TRY(view_value(g, n->in[1], &b2));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->softmax_forward(n->attr.softmax.scale, &x, n->n_in > 1 ? &b2 : NULL, &y));
        break;
    case OP_DROPOUT: {
        NEED(dropout_forward);
        mpx_dropout_attr a = dropout_attr(g, n);
        if (!training) a.p = 0; /* evaluation: the identity */
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->dropout_forward(&a, &x, &y));
        break;
    }
    case OP_PERMUTE:
        NEED(permute_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(be->permute_forward(n->attr.perm, &x, &y));
        break;
    case OP_RESHAPE:
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(move_all(g, &y, &x));
        break;
    case OP_LINEAR_T:
        NEED(linear_t_forward);
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_param(g, n->param[0], &w));
        if (n->n_param > 1) MPX_TRY(view_param(g, n->param[1], &b));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(gemm_operand(g, &x));
        MPX_TRY(gemm_operand(g, &w));
        if (n->loss_rows >= 0) {
            MPX_TRY(loss_rows_mask(g, n, &x, &b2));
            MPX_TRY(be->linear_t_forward_rows(&x, &w, n->n_param > 1 ? &b : NULL, &b2, &y));
        } else {
            MPX_TRY(be->linear_t_forward(&x, &w, n->n_param > 1 ? &b : NULL, &y));
        }
        break;
    case OP_CONCAT: {
        mpx_tensor parts[MAX_IN];
        for (int i = 0; i < n->n_in; i++) MPX_TRY(view_value(g, n->in[i], &parts[i]));
        MPX_TRY(view_output(g, n->out, &y));
        MPX_TRY(concat_copy(g, n, parts, 0, &y));
        break;
    }
    case OP_MULTIBOX: {
        NEED(multibox_forward);
        mpx_multibox_attr a = multibox_attr(n);
        mpx_tensor conf, loc, boxes, labels, pri = aux_view(g, n, 0), probs = aux_view(g, n, 1),
                   tgt = aux_view(g, n, 2), lt = aux_view(g, n, 3), ws = aux_view(g, n, 4);
        MPX_TRY(view_value(g, n->in[0], &conf));
        MPX_TRY(view_value(g, n->in[1], &loc));
        MPX_TRY(view_value(g, n->in[2], &boxes));
        MPX_TRY(view_value(g, n->in[3], &labels));
        MPX_TRY(view_output(g, n->out, &y));
        const int64_t B = conf.shape[0], P = conf.shape[1], C = conf.shape[2];
        pri = reshaped(&pri, 2, (int64_t[]){P, 4});
        probs = reshaped(&probs, 3, (int64_t[]){B, P, C});
        tgt = reshaped(&tgt, 2, (int64_t[]){B, P});
        lt = reshaped(&lt, 3, (int64_t[]){B, P, 4});
        MPX_TRY(be->multibox_forward(&a, &conf, &loc, &pri, &boxes, &labels, &ws, &y, &probs, &tgt, &lt));
        break;
    }
    default: return mpx_fail(MPX_ERR_INTERNAL, "unknown op %d", (int)n->op);
    }
    return commit_value(g, out, &y);
}

/* Weight (and bias) gradients of conv/linear and their commits. */
static mpx_status gemm_layer_param_grads(mpx_graph *g, gnode *n, const mpx_tensor *dy) {
    mpx_tensor x, dw, db;
    MPX_TRY(view_value(g, n->in[0], &x));
    MPX_TRY(gemm_operand(g, &x));
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

mpx_status node_backward(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0) {
    const mpx_backend *be = g->be;
    mpx_tensor dx, x, y;
    /* The GEMM family's backward reads dy and the weight as its forward read its operands
     * (rounded to TF32 in tf32 mode). */
    mpx_tensor dy_g, dyd_g, w0_g;
    if (op_is_gemm_family(n->op)) {
        if (dy) {
            dy_g = *dy;
            MPX_TRY(gemm_operand(g, &dy_g));
            dy = &dy_g;
        }
        if (dy_data) {
            dyd_g = *dy_data;
            MPX_TRY(gemm_operand(g, &dyd_g));
            dy_data = &dyd_g;
        }
        if (w0) {
            w0_g = *w0;
            MPX_TRY(gemm_operand(g, &w0_g));
            w0 = &w0_g;
        }
    }
    if (!dy_data) dy_data = dy;
    switch (n->op) {
    case OP_INPUT: return MPX_OK;
    case OP_CONV2D:
        NEED(conv2d_backward_data);
        NEED(conv2d_backward_weights);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (dx.data) {
            const double s = in_grad_factor(g, n, 0, &dx);
            if (s != 1.0)
                MPX_TRY(be->conv2d_backward_data_scaled(&n->attr.conv, (float)s, dy_data, w0, &dx));
            else
                MPX_TRY(be->conv2d_backward_data(&n->attr.conv, dy_data, w0, &dx));
            MPX_TRY(commit_in_grad(g, n, 0, &dx));
        }
        return gemm_layer_param_grads(g, n, dy);
    case OP_LINEAR:
        NEED(linear_backward_data);
        NEED(linear_backward_weights);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (dx.data) {
            const double s = in_grad_factor(g, n, 0, &dx);
            if (s != 1.0) MPX_TRY(be->linear_backward_data_scaled((float)s, dy_data, w0, &dx));
            else MPX_TRY(be->linear_backward_data(dy_data, w0, &dx));
            MPX_TRY(commit_in_grad(g, n, 0, &dx));
        }
        return gemm_layer_param_grads(g, n, dy);
    case OP_BATCHNORM: {
        NEED(batchnorm_backward);
        mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), dg, dbeta, beta;
        /* dy may be the gradient at the fused ReLU's output (graph_exec.c: relu_bwd_fused);
         * the op then recomputes the forward's result, which needs beta */
        mpx_batchnorm_attr a = n->attr.bn;
        const int alias = g->tensors[n->out].grad_alias;
        a.relu_dy = alias >= 0;
        a.relu_store = alias >= 0 ? g->tensors[alias].dtype : MPX_F32;
        if (a.relu_dy) MPX_TRY(view_param(g, n->param[1], &beta));
        const mpx_tensor *b = a.relu_dy ? &beta : NULL;
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        MPX_TRY(view_param_grad(g, n->param[0], &dg));
        MPX_TRY(view_param_grad(g, n->param[1], &dbeta));
        if (!dx.data) {
            /* The op always produces dx; give it scratch when nobody needs it. */
            dx.data = scratch_take(g, mpx_tensor_numel(&dx));
            if (!dx.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small");
            MPX_TRY(be->batchnorm_backward(&a, dy, &x, w0, b, &sm, &si, &dx, &dg, &dbeta));
        } else {
            MPX_TRY(be->batchnorm_backward(&a, dy, &x, w0, b, &sm, &si, &dx, &dg, &dbeta));
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
            if (shares_grad(g, n, s)) { /* dy's storage is this input's gradient already */
                MPX_TRY(commit_shared_grad(g, n, s));
                continue;
            }
            MPX_TRY(view_in_grad(g, n, s, &dx));
            if (!dx.data) continue;
            MPX_TRY(move_all(g, &dx, dy));
            MPX_TRY(commit_in_grad(g, n, s, &dx));
        }
        return MPX_OK;
    case OP_EMBEDDING: {
        NEED(embedding_backward);
        mpx_tensor ids, dw;
        MPX_TRY(view_value(g, n->in[0], &ids));
        MPX_TRY(view_param_grad(g, n->param[0], &dw));
        MPX_TRY(be->embedding_backward(dy, &ids, &dw));
        return commit_param_grad(g, n, n->param[0], &dw);
    }
    case OP_LAYERNORM: {
        NEED(layernorm_backward);
        mpx_tensor sm = aux_view(g, n, 0), si = aux_view(g, n, 1), dg, dbeta;
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        MPX_TRY(view_param_grad(g, n->param[0], &dg));
        MPX_TRY(view_param_grad(g, n->param[1], &dbeta));
        int need_dx = dx.data != NULL;
        if (!need_dx) {
            dx.data = scratch_take(g, mpx_tensor_numel(&dx));
            if (!dx.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small");
        }
        MPX_TRY(be->layernorm_backward(dy, &x, w0, &sm, &si, &dx, &dg, &dbeta));
        if (need_dx) MPX_TRY(commit_in_grad(g, n, 0, &dx));
        MPX_TRY(commit_param_grad(g, n, n->param[0], &dg));
        return commit_param_grad(g, n, n->param[1], &dbeta);
    }
    case OP_GELU:
        NEED(gelu_backward);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(be->gelu_backward(dy, &x, &dx));
        return commit_in_grad(g, n, 0, &dx);
    case OP_BMM: {
        NEED(bmm_backward);
        mpx_tensor a, b, da, db;
        MPX_TRY(view_value(g, n->in[0], &a));
        MPX_TRY(view_value(g, n->in[1], &b));
        MPX_TRY(gemm_operand(g, &a));
        MPX_TRY(gemm_operand(g, &b));
        MPX_TRY(view_in_grad(g, n, 0, &da));
        MPX_TRY(view_in_grad(g, n, 1, &db));
        if (!da.data && !db.data) return MPX_OK;
        MPX_TRY(be->bmm_backward(&n->attr.bmm, dy, &a, &b, da.data ? &da : NULL, db.data ? &db : NULL));
        MPX_TRY(commit_in_grad(g, n, 0, &da));
        return commit_in_grad(g, n, 1, &db);
    }
    case OP_SOFTMAX:
        NEED(softmax_backward);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(view_value(g, n->out, &y));
        MPX_TRY(be->softmax_backward(n->attr.softmax.scale, dy, &y, &dx));
        return commit_in_grad(g, n, 0, &dx);
    case OP_DROPOUT: {
        NEED(dropout_backward);
        mpx_dropout_attr a = dropout_attr(g, n);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(be->dropout_backward(&a, dy, &dx));
        return commit_in_grad(g, n, 0, &dx);
    }
    case OP_PERMUTE:
        NEED(permute_backward);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(be->permute_backward(n->attr.perm, dy, &dx));
        return commit_in_grad(g, n, 0, &dx);
    case OP_RESHAPE:
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(move_all(g, &dx, dy));
        return commit_in_grad(g, n, 0, &dx);
    case OP_LINEAR_T: {
        NEED(linear_t_backward_data);
        NEED(linear_t_backward_weights);
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (dx.data) {
            const double s = in_grad_factor(g, n, 0, &dx);
            if (s != 1.0) MPX_TRY(be->linear_t_backward_data_scaled((float)s, dy_data, w0, &dx));
            else MPX_TRY(be->linear_t_backward_data(dy_data, w0, &dx));
            MPX_TRY(commit_in_grad(g, n, 0, &dx));
        }
        mpx_tensor dw, db;
        MPX_TRY(view_value(g, n->in[0], &x));
        MPX_TRY(gemm_operand(g, &x));
        MPX_TRY(view_param_grad(g, n->param[0], &dw));
        if (n->n_param > 1) MPX_TRY(view_param_grad(g, n->param[1], &db));
        MPX_TRY(be->linear_t_backward_weights(dy, &x, &dw, n->n_param > 1 ? &db : NULL));
        MPX_TRY(commit_param_grad(g, n, n->param[0], &dw));
        return n->n_param > 1 ? commit_param_grad(g, n, n->param[1], &db) : MPX_OK;
    }
    case OP_CONCAT: {
        mpx_tensor parts[MAX_IN];
        for (int i = 0; i < n->n_in; i++) MPX_TRY(view_in_grad(g, n, i, &parts[i]));
        MPX_TRY(concat_copy(g, n, parts, 1, dy));
        for (int i = 0; i < n->n_in; i++) MPX_TRY(commit_in_grad(g, n, i, &parts[i]));
        return MPX_OK;
    }
    case OP_MULTIBOX: {
        NEED(multibox_backward);
        mpx_multibox_attr a = multibox_attr(n);
        mpx_tensor dconf, dloc, loc, probs = aux_view(g, n, 1), tgt = aux_view(g, n, 2),
                   lt = aux_view(g, n, 3);
        MPX_TRY(view_in_grad(g, n, 0, &dconf));
        MPX_TRY(view_in_grad(g, n, 1, &dloc));
        MPX_TRY(view_value(g, n->in[1], &loc));
        const int64_t B = loc.shape[0], P = loc.shape[1], C = dconf.shape[2];
        probs = reshaped(&probs, 3, (int64_t[]){B, P, C});
        tgt = reshaped(&tgt, 2, (int64_t[]){B, P});
        lt = reshaped(&lt, 3, (int64_t[]){B, P, 4});
        float *tmp[2] = {NULL, NULL};
        if (!dconf.data) dconf.data = tmp[0] = scratch_take(g, mpx_tensor_numel(&dconf));
        if (!dloc.data) dloc.data = tmp[1] = scratch_take(g, mpx_tensor_numel(&dloc));
        if (!dconf.data || !dloc.data) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small");
        MPX_TRY(be->multibox_backward(&a, &probs, &tgt, &loc, &lt, &dconf, &dloc));
        if (!tmp[0]) MPX_TRY(commit_in_grad(g, n, 0, &dconf));
        if (!tmp[1]) MPX_TRY(commit_in_grad(g, n, 1, &dloc));
        return MPX_OK;
    }
    case OP_SOFTMAX_CE: {
        NEED(softmax_ce_backward);
        mpx_tensor probs = aux_view(g, n, 0), labels;
        MPX_TRY(view_in_grad(g, n, 0, &dx));
        if (!dx.data) return MPX_OK;
        MPX_TRY(view_value(g, n->in[1], &labels));
        const int64_t K = dx.shape[dx.ndim - 1], M = mpx_tensor_numel(&dx) / K;
        mpx_tensor dx2 = reshaped(&dx, 2, (int64_t[]){M, K});
        labels = reshaped(&labels, 1, (int64_t[]){M});
        probs = reshaped(&probs, 2, (int64_t[]){M, K});
        MPX_TRY(be->softmax_ce_backward(&probs, &labels, &dx2));
        return commit_in_grad(g, n, 0, &dx);
    }
    default: return mpx_fail(MPX_ERR_INTERNAL, "unknown op %d", (int)n->op);
    }
}

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
        case OP_ADD:
        case OP_RESHAPE: MPX_TRY(move_all(g, &dx, dy)); break;
        case OP_PERMUTE: MPX_TRY(be->permute_backward(n->attr.perm, dy, &dx)); break;
        case OP_CONCAT: {
            mpx_tensor parts[MAX_IN];
            memset(parts, 0, sizeof parts);
            for (int i = 0; i < n->n_in; i++) {
                const gtensor *ti = &g->tensors[n->in[i]];
                parts[i].ndim = ti->ndim;
                memcpy(parts[i].shape, ti->shape, sizeof parts[i].shape);
            }
            parts[s] = dx; /* only this slot is filled */
            MPX_TRY(concat_copy(g, n, parts, 1, dy));
            break;
        }
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
    case OP_LINEAR_T: {
        double gemm = 2.0 * elems * (double)g->params[n->param[0]].shape[1];
        return gemm * (training ? 2.0 + dx_needed : 1.0);
    }
    case OP_BMM: {
        const gtensor *a = &g->tensors[n->in[0]];
        double k = (double)(n->attr.bmm.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1]);
        return 2.0 * elems * k * (training ? 3.0 : 1.0);
    }
    case OP_LAYERNORM: return elems * (training ? 13.0 : 5.0);
    case OP_GELU: return elems * (training ? 30.0 : 15.0);
    case OP_SOFTMAX: return elems * (training ? 8.0 : 5.0);
    case OP_EMBEDDING:
    case OP_DROPOUT: return elems * (training ? 2.0 : 1.0);
    default: return 0;
    }
}
