/* graph_build.c — the builder: nodes, tensors, parameters and their shapes.
 *
 * Each mpx_g_* call validates its inputs, infers the output shape, declares the node's
 * parameters with their initialisers and appends the node. The first error sticks: later
 * calls return -1 and mpx_graph_status reports it with the node name in the message.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "mpx/ssd.h"

int graph_fail(mpx_graph *g, mpx_status st) {
    if (g->status == MPX_OK) g->status = st;
    return -1;
}

mpx_graph *mpx_graph_new(void) {
    mpx_graph *g = mpx_calloc(1, sizeof *g);
    if (g) g->loss_tensor = -1;
    return g;
}

mpx_status mpx_graph_status(const mpx_graph *g) { return g->status; }

/* Grow a dynamic array of `size`-byte elements to hold at least n + 1. */
static int grow(void **arr, int *cap, int n, size_t size) {
    if (n < *cap) return 0;
    int ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)ncap * size);
    if (!p) return -1;
    memset((char *)p + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *arr = p;
    *cap = ncap;
    return 0;
}

static int check_name(mpx_graph *g, const char *name) {
    if (!name || !*name || strlen(name) >= MPX_NAME_MAX)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "node name '%s' is empty or longer than %d",
                                      name ? name : "", MPX_NAME_MAX - 1));
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "duplicate node name '%s'", name));
    return 0;
}

static int check_tensor(mpx_graph *g, const char *node, int t) {
    if (t < 0 || t >= g->n_tensors)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "node '%s': input tensor %d does not exist",
                                      node, t));
    if (g->tensors[t].is_label)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "node '%s': tensor '%s' holds labels", node,
                                      g->tensors[t].name));
    return 0;
}

/* An int32 input (ids, masks, labels). */
static int check_ids(mpx_graph *g, const char *node, int t, const char *what) {
    if (t < 0 || t >= g->n_tensors || !g->tensors[t].is_label)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "node '%s': %s must be an int32 input", node,
                                      what));
    return 0;
}

/* Append a node with its output tensor; returns the node pointer or NULL (sticky error). */
static gnode *add_node(mpx_graph *g, op_kind op, const char *name, const int *in, int n_in,
                       int ndim, const int64_t *shape) {
    if (g->status != MPX_OK || g->compiled) {
        if (g->compiled) graph_fail(g, mpx_fail(MPX_ERR_INTERNAL, "graph already compiled"));
        return NULL;
    }
    if (check_name(g, name) < 0) return NULL;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            graph_fail(g, mpx_fail(MPX_ERR_INPUT, "node '%s': output dimension %d is %lld", name,
                                   i, (long long)shape[i]));
            return NULL;
        }
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof(gnode)) ||
        grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors, sizeof(gtensor))) {
        graph_fail(g, mpx_fail(MPX_ERR_NOMEM, "out of memory building node '%s'", name));
        return NULL;
    }
    gtensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof *t);
    t->pass.q_step = -1;
    snprintf(t->name, MPX_NAME_MAX, "%s", name);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = mpx_shape_numel(ndim, shape);
    t->role = MPX_ROLE_ACTIVATION;
    t->producer = g->n_nodes;
    for (int k = 0; k < 4; k++) t->plan.observer[k] = -1;
    t->pass.grad_scale = 1.0;

    gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->name, MPX_NAME_MAX, "%s", name);
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        gtensor *src = &g->tensors[in[i]];
        if (src->n_consumers >= MAX_CONSUMERS) {
            graph_fail(g, mpx_fail(MPX_ERR_UNSUPPORTED,
                                   "node '%s': tensor '%s' has more than %d consumers", name,
                                   src->name, (int)MAX_CONSUMERS));
            return NULL;
        }
        src->consumers[src->n_consumers++] = g->n_nodes;
    }
    n->out = g->n_tensors;
    n->buffer[0] = n->buffer[1] = -1;
    n->layer = -1;
    n->sc.s_prev = n->sc.layer_scale = 1.0;
    g->n_tensors++;
    g->n_nodes++;
    return n;
}

static int add_param(mpx_graph *g, gnode *n, const char *suffix, mpx_tensor_role role, int ndim,
                     const int64_t *shape, int decay, mpx_init init) {
    if (grow((void **)&g->params, &g->cap_params, g->n_params, sizeof(mpx_param)))
        return graph_fail(g, mpx_fail(MPX_ERR_NOMEM, "out of memory adding parameters"));
    mpx_param *p = &g->params[g->n_params];
    memset(p, 0, sizeof *p);
    snprintf(p->name, MPX_NAME_MAX, "%.40s.%s", n->name, suffix);
    p->ndim = ndim;
    memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    p->numel = mpx_shape_numel(ndim, shape);
    p->role = role;
    p->decay = decay;
    p->init = init;
    p->node = (int)(n - g->nodes);
    n->param[n->n_param++] = g->n_params;
    return g->n_params++;
}

static int add_buffer(mpx_graph *g, gnode *n, const char *suffix, int64_t numel) {
    if (grow((void **)&g->buffers, &g->cap_buffers, g->n_buffers, sizeof(mpx_buffer)))
        return graph_fail(g, mpx_fail(MPX_ERR_NOMEM, "out of memory adding buffers"));
    mpx_buffer *b = &g->buffers[g->n_buffers];
    memset(b, 0, sizeof *b);
    snprintf(b->name, MPX_NAME_MAX, "%.40s.%s", n->name, suffix);
    b->numel = numel;
    return g->n_buffers++;
}

/* Observed layers: every node with parameters, and the loss, in forward order. */
static void observe(mpx_graph *g, gnode *n) {
    int *p = realloc(g->layer_node, (size_t)(g->n_layers + 1) * sizeof *p);
    if (!p) {
        graph_fail(g, mpx_fail(MPX_ERR_NOMEM, "out of memory"));
        return;
    }
    g->layer_node = p;
    n->layer = g->n_layers;
    g->layer_node[g->n_layers++] = (int)(n - g->nodes);
}

int mpx_g_input(mpx_graph *g, const char *name, mpx_input_kind kind, int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > MPX_MAX_DIMS)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "input '%s': %d dimensions", name, ndim));
    gnode *n = add_node(g, OP_INPUT, name, NULL, 0, ndim, shape);
    if (!n) return -1;
    g->tensors[n->out].is_label = kind == MPX_INPUT_LABELS;
    if (kind == MPX_INPUT_F32) g->tensors[n->out].role = MPX_ROLE_REDUCTION;
    return n->out;
}

int mpx_g_conv2d(mpx_graph *g, const char *name, int x, int out_channels, int kh, int kw,
                 int stride, int pad, int bias) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    if (xt->ndim != 4)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "conv2d '%s': input '%s' is not NHWC", name,
                                      xt->name));
    if (out_channels < 1 || kh < 1 || kw < 1 || stride < 1 || pad < 0)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "conv2d '%s': bad geometry", name));
    int64_t c = xt->shape[3];
    int64_t oh = (xt->shape[1] + 2 * pad - kh) / stride + 1;
    int64_t ow = (xt->shape[2] + 2 * pad - kw) / stride + 1;
    int64_t shape[4] = {xt->shape[0], oh, ow, out_channels};
    gnode *n = add_node(g, OP_CONV2D, name, &x, 1, 4, shape);
    if (!n) return -1;
    n->attr.conv = (mpx_conv2d_attr){stride, stride, pad, pad};
    n->is_gemm_layer = 1;
    n->fan_in = (int64_t)out_channels * kh * kw; /* data-gradient reduction length */
    /* He normal, fan_out mode (torchvision ResNet): std = sqrt(2 / (K * kh * kw)). */
    int64_t ws[4] = {kh, kw, c, out_channels};
    add_param(g, n, "weight", MPX_ROLE_WEIGHT, 4, ws, 1,
              (mpx_init){MPX_INIT_NORMAL, sqrtf(2.0f / (float)(out_channels * kh * kw))});
    if (bias) {
        int64_t bs[1] = {out_channels};
        add_param(g, n, "bias", MPX_ROLE_WEIGHT, 1, bs, 0,
                  (mpx_init){MPX_INIT_UNIFORM, 1.0f / sqrtf((float)(c * kh * kw))});
    }
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

int mpx_g_batchnorm(mpx_graph *g, const char *name, int x, float eps, float momentum,
                    float gamma_init) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    if (!(eps > 0) || !(momentum >= 0 && momentum <= 1))
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "batchnorm '%s': eps %g momentum %g", name,
                                      eps, momentum));
    int64_t shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    int ndim = xt->ndim;
    int64_t c = xt->shape[ndim - 1];
    gnode *n = add_node(g, OP_BATCHNORM, name, &x, 1, ndim, shape);
    if (!n) return -1;
    n->attr.bn = (mpx_batchnorm_attr){eps, momentum, 1, 0, 0, MPX_F32, NULL, NULL, 0};
    int64_t cs[1] = {c};
    add_param(g, n, "gamma", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, gamma_init});
    add_param(g, n, "beta", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, 0});
    n->buffer[0] = add_buffer(g, n, "running_mean", c);
    n->buffer[1] = add_buffer(g, n, "running_var", c);
    n->plan.n_aux = 2; /* save_mean, save_invstd */
    n->plan.aux_numel[0] = n->plan.aux_numel[1] = c;
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

int mpx_g_relu(mpx_graph *g, const char *name, int x) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    int64_t shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    gnode *n = add_node(g, OP_RELU, name, &x, 1, xt->ndim, shape);
    return n ? n->out : -1;
}

int mpx_g_maxpool2d(mpx_graph *g, const char *name, int x, int kernel, int stride, int pad) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    if (xt->ndim != 4 || kernel < 1 || stride < 1 || pad < 0 || pad >= kernel)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "maxpool2d '%s': bad input or geometry", name));
    int64_t shape[4] = {xt->shape[0], (xt->shape[1] + 2 * pad - kernel) / stride + 1,
                        (xt->shape[2] + 2 * pad - kernel) / stride + 1, xt->shape[3]};
    gnode *n = add_node(g, OP_MAXPOOL2D, name, &x, 1, 4, shape);
    if (!n) return -1;
    n->attr.pool = (mpx_pool2d_attr){kernel, stride, pad};
    return n->out;
}

int mpx_g_avgpool_global(mpx_graph *g, const char *name, int x) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    if (xt->ndim != 4)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "avgpool '%s': input is not NHWC", name));
    int64_t shape[2] = {xt->shape[0], xt->shape[3]};
    gnode *n = add_node(g, OP_AVGPOOL_GLOBAL, name, &x, 1, 2, shape);
    return n ? n->out : -1;
}

int mpx_g_linear(mpx_graph *g, const char *name, int x, int out_features, int bias) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    if (out_features < 1)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "linear '%s': %d outputs", name, out_features));
    int64_t in = xt->shape[xt->ndim - 1];
    int64_t shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    shape[xt->ndim - 1] = out_features;
    gnode *n = add_node(g, OP_LINEAR, name, &x, 1, xt->ndim, shape);
    if (!n) return -1;
    n->is_gemm_layer = 1;
    n->fan_in = out_features;
    float bound = 1.0f / sqrtf((float)in);
    int64_t ws[2] = {in, out_features};
    add_param(g, n, "weight", MPX_ROLE_WEIGHT, 2, ws, 1, (mpx_init){MPX_INIT_UNIFORM, bound});
    if (bias) {
        int64_t bs[1] = {out_features};
        add_param(g, n, "bias", MPX_ROLE_WEIGHT, 1, bs, 0, (mpx_init){MPX_INIT_UNIFORM, bound});
    }
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

int mpx_g_add(mpx_graph *g, const char *name, int a, int b) {
    if (g->status != MPX_OK || check_tensor(g, name, a) < 0 || check_tensor(g, name, b) < 0)
        return -1;
    const gtensor *at = &g->tensors[a], *bt = &g->tensors[b];
    if (at->ndim != bt->ndim || memcmp(at->shape, bt->shape, (size_t)at->ndim * sizeof(int64_t)))
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "add '%s': shapes of '%s' and '%s' differ",
                                      name, at->name, bt->name));
    int in[2] = {a, b};
    int64_t shape[4];
    memcpy(shape, at->shape, sizeof shape);
    gnode *n = add_node(g, OP_ADD, name, in, 2, at->ndim, shape);
    return n ? n->out : -1;
}

int mpx_g_softmax_ce(mpx_graph *g, const char *name, int logits, int labels) {
    if (g->status != MPX_OK || check_tensor(g, name, logits) < 0) return -1;
    if (labels < 0 || labels >= g->n_tensors || !g->tensors[labels].is_label)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "softmax_ce '%s': labels must be a label input",
                                      name));
    if (g->loss_tensor >= 0)
        return graph_fail(g, mpx_fail(MPX_ERR_UNSUPPORTED, "softmax_ce '%s': the graph has a loss",
                                      name));
    const gtensor *lt = &g->tensors[logits];
    int64_t rows = lt->numel / lt->shape[lt->ndim - 1];
    if (g->tensors[labels].numel != rows)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT,
                                      "softmax_ce '%s': %lld label(s) for %lld row(s) of logits",
                                      name, (long long)g->tensors[labels].numel, (long long)rows));
    int in[2] = {logits, labels};
    int64_t shape[1] = {1};
    gnode *n = add_node(g, OP_SOFTMAX_CE, name, in, 2, 1, shape);
    if (!n) return -1;
    g->tensors[n->out].role = MPX_ROLE_REDUCTION;
    n->seeds_gradient = 1;
    n->plan.n_aux = 1; /* probs [rows, K] */
    n->plan.aux_numel[0] = lt->numel;
    g->loss_tensor = n->out;
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

mpx_status mpx_g_set_init(mpx_graph *g, const char *param_name, mpx_init init) {
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->params[i].name, param_name) == 0) {
            g->params[i].init = init;
            return MPX_OK;
        }
    return mpx_fail(MPX_ERR_INPUT, "no parameter named '%s'", param_name);
}

/* ---- transformer layers ---- */

static gnode *same_shape_node(mpx_graph *g, op_kind op, const char *name, int x) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return NULL;
    const gtensor *xt = &g->tensors[x];
    int64_t shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    return add_node(g, op, name, &x, 1, xt->ndim, shape);
}

int mpx_g_embedding(mpx_graph *g, const char *name, int ids, int vocab, int dim, mpx_init init) {
    if (g->status != MPX_OK || check_ids(g, name, ids, "ids") < 0) return -1;
    const gtensor *it = &g->tensors[ids];
    if (vocab < 1 || dim < 1 || it->ndim > 3)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "embedding '%s': vocab %d, dim %d, ids of %d dims",
                                      name, vocab, dim, it->ndim));
    int64_t shape[4];
    memcpy(shape, it->shape, sizeof shape);
    shape[it->ndim] = dim;
    gnode *n = add_node(g, OP_EMBEDDING, name, &ids, 1, it->ndim + 1, shape);
    if (!n) return -1;
    int64_t ts[2] = {vocab, dim};
    add_param(g, n, "weight", MPX_ROLE_WEIGHT, 2, ts, 1, init);
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

int mpx_g_layernorm(mpx_graph *g, const char *name, int x, float eps) {
    gnode *n = same_shape_node(g, OP_LAYERNORM, name, x);
    if (!n) return -1;
    const gtensor *xt = &g->tensors[x];
    int64_t c = xt->shape[xt->ndim - 1], cs[1] = {c};
    n->attr.ln.eps = eps;
    add_param(g, n, "gamma", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, 1.0f});
    add_param(g, n, "beta", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, 0.0f});
    n->plan.n_aux = 2; /* mean, invstd per row */
    n->plan.aux_numel[0] = n->plan.aux_numel[1] = xt->numel / c;
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

int mpx_g_l2norm(mpx_graph *g, const char *name, int x, float eps, float scale) {
    if (!(eps > 0) || !(scale > 0))
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "l2norm '%s': eps %g and scale %g must be > 0",
                                      name ? name : "", eps, scale));
    gnode *n = same_shape_node(g, OP_L2NORM, name, x);
    if (!n) return -1;
    const gtensor *xt = &g->tensors[x];
    int64_t c = xt->shape[xt->ndim - 1], cs[1] = {c};
    n->attr.ln.eps = eps;
    add_param(g, n, "gamma", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, scale});
    n->plan.n_aux = 1; /* inverse norm per row */
    n->plan.aux_numel[0] = xt->numel / c;
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

int mpx_g_gelu(mpx_graph *g, const char *name, int x) {
    gnode *n = same_shape_node(g, OP_GELU, name, x);
    return n ? n->out : -1;
}

int mpx_g_bmm(mpx_graph *g, const char *name, int a, int b, int trans_a, int trans_b, float alpha) {
    if (g->status != MPX_OK || check_tensor(g, name, a) < 0 || check_tensor(g, name, b) < 0) return -1;
    const gtensor *at = &g->tensors[a], *bt = &g->tensors[b];
    int nd = at->ndim;
    if (nd < 2 || bt->ndim != nd ||
        memcmp(at->shape, bt->shape, (size_t)(nd - 2) * sizeof(int64_t)) != 0)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "bmm '%s': '%s' and '%s' need the same batch dims",
                                      name, at->name, bt->name));
    int64_t m = trans_a ? at->shape[nd - 1] : at->shape[nd - 2];
    int64_t ka = trans_a ? at->shape[nd - 2] : at->shape[nd - 1];
    int64_t kb = trans_b ? bt->shape[nd - 1] : bt->shape[nd - 2];
    int64_t nn = trans_b ? bt->shape[nd - 2] : bt->shape[nd - 1];
    if (ka != kb)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "bmm '%s': inner dims %lld and %lld differ", name,
                                      (long long)ka, (long long)kb));
    int64_t shape[4];
    memcpy(shape, at->shape, sizeof shape);
    shape[nd - 2] = m;
    shape[nd - 1] = nn;
    int in[2] = {a, b};
    gnode *n = add_node(g, OP_BMM, name, in, 2, nd, shape);
    if (!n) return -1;
    n->attr.bmm = (mpx_bmm_attr){trans_a, trans_b, alpha};
    return n->out;
}

int mpx_g_softmax(mpx_graph *g, const char *name, int x, int mask, float scale) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    if (mask >= 0 && check_ids(g, name, mask, "the mask") < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    int in[2] = {x, mask};
    int64_t shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    gnode *n = add_node(g, OP_SOFTMAX, name, in, mask >= 0 ? 2 : 1, xt->ndim, shape);
    if (!n) return -1;
    n->attr.softmax.scale = scale;
    return n->out;
}

int mpx_g_dropout(mpx_graph *g, const char *name, int x, float p) {
    if (!(p >= 0 && p < 1))
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "dropout '%s': p = %g outside [0, 1)", name, p));
    gnode *n = same_shape_node(g, OP_DROPOUT, name, x);
    if (!n) return -1;
    n->attr.dropout.p = p;
    return n->out;
}

int mpx_g_permute(mpx_graph *g, const char *name, int x, const int perm[4]) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    const gtensor *xt = &g->tensors[x];
    int64_t shape[4] = {1, 1, 1, 1};
    int seen = 0;
    for (int i = 0; i < xt->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= xt->ndim || (seen & (1 << perm[i])))
            return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "permute '%s': not a permutation", name));
        seen |= 1 << perm[i];
        shape[i] = xt->shape[perm[i]];
    }
    gnode *n = add_node(g, OP_PERMUTE, name, &x, 1, xt->ndim, shape);
    if (!n) return -1;
    memcpy(n->attr.perm, perm, sizeof n->attr.perm);
    return n->out;
}

int mpx_g_reshape(mpx_graph *g, const char *name, int x, int ndim, const int64_t *shape) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    if (ndim < 1 || ndim > 4 || mpx_shape_numel(ndim, shape) != g->tensors[x].numel)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "reshape '%s': %lld elements into another count",
                                      name, (long long)g->tensors[x].numel));
    gnode *n = add_node(g, OP_RESHAPE, name, &x, 1, ndim, shape);
    return n ? n->out : -1;
}

int mpx_g_linear_tied(mpx_graph *g, const char *name, int x, const char *weight_param, int bias) {
    if (g->status != MPX_OK || check_tensor(g, name, x) < 0) return -1;
    int pw = -1;
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->params[i].name, weight_param) == 0) pw = i;
    if (pw < 0 || g->params[pw].ndim != 2)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "linear_tied '%s': no 2-D parameter '%s'", name,
                                      weight_param));
    const gtensor *xt = &g->tensors[x];
    int64_t out = g->params[pw].shape[0], in = g->params[pw].shape[1];
    if (xt->shape[xt->ndim - 1] != in)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "linear_tied '%s': input has %lld features, '%s' takes %lld",
                                      name, (long long)xt->shape[xt->ndim - 1], weight_param, (long long)in));
    int64_t shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    shape[xt->ndim - 1] = out;
    gnode *n = add_node(g, OP_LINEAR_T, name, &x, 1, xt->ndim, shape);
    if (!n) return -1;
    n->is_gemm_layer = 1;
    n->fan_in = out; /* the data-gradient GEMM reduces over OUT */
    n->param[n->n_param++] = pw; /* shared: the owner node keeps it in its own list */
    if (bias) {
        int64_t bs[1] = {out};
        add_param(g, n, "bias", MPX_ROLE_WEIGHT, 1, bs, 0, (mpx_init){MPX_INIT_CONST, 0.0f});
    }
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

/* ---- detection layers ---- */

int mpx_g_concat(mpx_graph *g, const char *name, int n_in, const int *xs, int64_t width) {
    if (g->status != MPX_OK) return -1;
    if (n_in < 1 || n_in > MAX_IN || width < 1)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "concat '%s': %d inputs (1..%d), width %lld",
                                      name, n_in, MAX_IN, (long long)width));
    int64_t rows = 0, batch = -1;
    for (int i = 0; i < n_in; i++) {
        if (check_tensor(g, name, xs[i]) < 0) return -1;
        const gtensor *t = &g->tensors[xs[i]];
        if (batch < 0) batch = t->shape[0];
        if (t->shape[0] != batch || (t->numel / batch) % width)
            return graph_fail(g, mpx_fail(MPX_ERR_INPUT,
                                          "concat '%s': '%s' is not [%lld, n * %lld]", name, t->name,
                                          (long long)batch, (long long)width));
        rows += t->numel / batch / width;
    }
    int64_t shape[3] = {batch, rows, width};
    gnode *n = add_node(g, OP_CONCAT, name, xs, n_in, 3, shape);
    if (!n) return -1;
    n->attr.concat.width = width;
    return n->out;
}

int mpx_g_multibox(mpx_graph *g, const char *name, int conf, int loc, int gt_boxes, int gt_labels,
                   const float *priors, int64_t n_priors, float iou_threshold, float neg_per_pos) {
    if (g->status != MPX_OK || check_tensor(g, name, conf) < 0 || check_tensor(g, name, loc) < 0)
        return -1;
    if (check_ids(g, name, gt_labels, "gt_labels") < 0) return -1;
    if (g->loss_tensor >= 0)
        return graph_fail(g, mpx_fail(MPX_ERR_UNSUPPORTED, "multibox '%s': the graph has a loss", name));
    const gtensor *ct = &g->tensors[conf], *bt = &g->tensors[gt_boxes];
    if (bt->is_label || bt->role != MPX_ROLE_REDUCTION || g->nodes[bt->producer].op != OP_INPUT)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "multibox '%s': gt_boxes must be an F32 input", name));
    if (ct->ndim != 3 || ct->shape[1] != n_priors)
        return graph_fail(g, mpx_fail(MPX_ERR_INPUT, "multibox '%s': conf must be [B, %lld, C]", name,
                                      (long long)n_priors));
    int64_t B = ct->shape[0], P = n_priors, C = ct->shape[2], G = bt->shape[1];
    int in[4] = {conf, loc, gt_boxes, gt_labels};
    int64_t shape[1] = {1};
    gnode *n = add_node(g, OP_MULTIBOX, name, in, 4, 1, shape);
    if (!n) return -1;
    g->tensors[n->out].role = MPX_ROLE_REDUCTION;
    n->seeds_gradient = 1;
    n->attr.multibox.iou_threshold = iou_threshold;
    n->attr.multibox.neg_per_pos = neg_per_pos;
    /* aux: priors [P,4] (constant), probs [B,P,C], target I32 [B,P], loc_target [B,P,4],
     * workspace U8 */
    n->plan.n_aux = 5;
    n->plan.aux_numel[0] = P * 4;
    n->plan.aux_numel[1] = B * P * C;
    n->plan.aux_numel[2] = B * P;
    n->plan.aux_dtype[2] = MPX_I32;
    n->plan.aux_numel[3] = B * P * 4;
    n->plan.aux_numel[4] = (int64_t)mpx_multibox_workspace_bytes(B, P, G);
    n->plan.aux_dtype[4] = MPX_U8;
    n->aux_init = malloc((size_t)P * 4 * sizeof(float));
    if (!n->aux_init) return graph_fail(g, mpx_fail(MPX_ERR_NOMEM, "out of memory"));
    memcpy(n->aux_init, priors, (size_t)P * 4 * sizeof(float));
    g->loss_tensor = n->out;
    observe(g, n);
    return g->status == MPX_OK ? n->out : -1;
}

void mpx_graph_set_step(mpx_graph *g, int64_t step) { g->step = step; }
