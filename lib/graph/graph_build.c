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
    snprintf(t->name, MPX_NAME_MAX, "%s", name);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = mpx_shape_numel(ndim, shape);
    t->role = MPX_ROLE_ACTIVATION;
    t->producer = g->n_nodes;
    for (int k = 0; k < 4; k++) t->observer[k] = -1;
    t->grad_scale = 1.0;

    gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->name, MPX_NAME_MAX, "%s", name);
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        gtensor *src = &g->tensors[in[i]];
        if (src->n_consumers >= 8) {
            graph_fail(g, mpx_fail(MPX_ERR_UNSUPPORTED,
                                   "node '%s': tensor '%s' has more than 8 consumers", name,
                                   src->name));
            return NULL;
        }
        src->consumers[src->n_consumers++] = g->n_nodes;
    }
    n->out = g->n_tensors;
    n->buffer[0] = n->buffer[1] = -1;
    n->layer = -1;
    n->s_prev = n->layer_scale = 1.0;
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
    n->attr.bn = (mpx_batchnorm_attr){eps, momentum, 1};
    int64_t cs[1] = {c};
    add_param(g, n, "gamma", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, gamma_init});
    add_param(g, n, "beta", MPX_ROLE_NORM_PARAM, 1, cs, 0, (mpx_init){MPX_INIT_CONST, 0});
    n->buffer[0] = add_buffer(g, n, "running_mean", c);
    n->buffer[1] = add_buffer(g, n, "running_var", c);
    n->n_aux = 2; /* save_mean, save_invstd */
    n->aux_numel[0] = n->aux_numel[1] = c;
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
    n->n_aux = 1; /* probs [rows, K] */
    n->aux_numel[0] = lt->numel;
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
