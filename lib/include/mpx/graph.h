/* graph.h — the static graph: builder, compilation (memory plan), forward/backward executor.
 *
 * A model builder calls the mpx_g_* functions once; each appends a node (so the build order is
 * a topological order) and returns the id of its output tensor, or -1 after the first error
 * (which mpx_graph_status reports: errors are sticky, so a builder checks once at the end).
 * mpx_graph_compile resolves every tensor's storage dtype from the precision policy, plans
 * all activation, gradient and scratch buffers into arenas and initialises the parameters;
 * after it, a training step allocates nothing.
 *
 * Backward runs in reverse build order. Where a tensor fans out, the consumers' gradient
 * contributions are kept in FP32 and summed (under adaptive scaling: rescaled to a common
 * scale first) before the ONE counted cast into the tensor's gradient storage. Every other
 * gradient is rounded to storage when its producer writes it. Parameter gradients are
 * rounded to their storage format (counted), unscaled by the S that produced them, and
 * accumulated in FP32 into mpx_param.grad.
 */
#ifndef MPX_GRAPH_H
#define MPX_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "mpx/error.h"
#include "mpx/precision.h"
#include "mpx/scaling.h"
#include "mpx/stats.h"
#include "mpx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MPX_NAME_MAX = 64 };

typedef struct mpx_graph mpx_graph;
struct mpx_backend; /* backend.h */

/* DATA: network input stored like activations (images). LABELS (= I32): int32 data — labels,
 * token ids, attention masks. F32: side data kept in FP32 whatever the precision (boxes). */
typedef enum { MPX_INPUT_DATA = 0, MPX_INPUT_LABELS, MPX_INPUT_F32 } mpx_input_kind;
#define MPX_INPUT_I32 MPX_INPUT_LABELS

typedef enum { MPX_INIT_CONST = 0, MPX_INIT_NORMAL, MPX_INIT_UNIFORM } mpx_init_kind;
typedef struct {
    mpx_init_kind kind;
    float a; /* CONST: the value; NORMAL: std (mean 0); UNIFORM: bound b for U(-b, b) */
} mpx_init;

/* A trainable parameter. master and grad are FP32 host/device arrays of numel elements;
 * grad holds the UNSCALED gradient after mpx_graph_backward. */
typedef struct {
    char name[MPX_NAME_MAX];
    int ndim;
    int64_t shape[4];
    int64_t numel;
    mpx_tensor_role role;  /* MPX_ROLE_WEIGHT (conv/linear weight, bias) or MPX_ROLE_NORM_PARAM */
    mpx_dtype work_dtype;  /* storage of the working copy the ops read */
    int decay;             /* 1: weight decay applies (weights; not biases or norm parameters) */
    mpx_init init;
    int node;
    float *master;
    void *work;            /* == master when work_dtype is F32 */
    float *grad;
} mpx_param;

/* A non-trainable state buffer saved in checkpoints (batch-norm running statistics). */
typedef struct {
    char name[MPX_NAME_MAX];
    int64_t numel;
    float *data;
} mpx_buffer;

/* One observed layer (a node with parameters, or the loss), in forward order. */
typedef struct {
    const char *name;
    const char *kind;   /* "conv2d", "linear", "batchnorm", "softmax_ce", ... */
    int64_t params;     /* number of parameter elements */
    int64_t fan_in;     /* reduction length of the data-gradient GEMM (0 when none) */
} mpx_layer_info;

/* ---- building ---- */
mpx_graph *mpx_graph_new(void);
void mpx_graph_free(mpx_graph *g);
/* MPX_OK, or the first builder/compile error (its message is in mpx_error_message()). */
mpx_status mpx_graph_status(const mpx_graph *g);

/* x [N,H,W,C] (data) or labels [N] / [N,T]. */
int mpx_g_input(mpx_graph *g, const char *name, mpx_input_kind kind, int ndim, const int64_t *shape);
/* y [N,OH,OW,K]; weight [KH,KW,C,K] He-normal (fan_out, as torchvision); optional bias [K]. */
int mpx_g_conv2d(mpx_graph *g, const char *name, int x, int out_channels, int kh, int kw,
                 int stride, int pad, int bias);
/* Batch-norm over channels; gamma [C] = gamma_init, beta [C] = 0; running mean 0, var 1. */
int mpx_g_batchnorm(mpx_graph *g, const char *name, int x, float eps, float momentum,
                    float gamma_init);
int mpx_g_relu(mpx_graph *g, const char *name, int x);
int mpx_g_maxpool2d(mpx_graph *g, const char *name, int x, int kernel, int stride, int pad);
/* [N,H,W,C] -> [N,C] */
int mpx_g_avgpool_global(mpx_graph *g, const char *name, int x);
/* [.., IN] -> [.., OUT]; weight [IN,OUT] and bias U(-1/sqrt(IN), 1/sqrt(IN)) (PyTorch default). */
int mpx_g_linear(mpx_graph *g, const char *name, int x, int out_features, int bias);
int mpx_g_add(mpx_graph *g, const char *name, int a, int b);
/* Mean softmax cross-entropy of logits [M,K] against labels [M]; returns the scalar loss
 * tensor and makes it the graph's loss. */
int mpx_g_softmax_ce(mpx_graph *g, const char *name, int logits, int labels);
/* ---- transformer layers ---- */
/* ids I32 [...] -> [..., dim]; table [vocab, dim] ~ `init` (BERT: normal, std 0.02). */
int mpx_g_embedding(mpx_graph *g, const char *name, int ids, int vocab, int dim, mpx_init init);
/* Layer-norm over the last dim; gamma 1, beta 0. */
int mpx_g_layernorm(mpx_graph *g, const char *name, int x, float eps);
/* y = gamma * x / sqrt(sum_c x^2 + eps) over the last dim (SSD's L2Norm), gamma [C] a learned
 * scale starting at `scale` (SSD: 20). */
int mpx_g_l2norm(mpx_graph *g, const char *name, int x, float eps, float scale);
int mpx_g_gelu(mpx_graph *g, const char *name, int x);
/* c = alpha op(a) @ op(b) over matching leading (batch) dims (ops.h mpx_bmm_*). */
int mpx_g_bmm(mpx_graph *g, const char *name, int a, int b, int trans_a, int trans_b, float alpha);
/* softmax(scale x) over the last dim of x [B,H,Tq,Tk]; mask I32 [B,Tk] (1 keep, 0 drop) or -1. */
int mpx_g_softmax(mpx_graph *g, const char *name, int x, int mask, float scale);
/* Dropout with keep probability 1-p while training (identity in evaluation); the mask is
 * regenerated from (graph seed, node, step), see mpx_graph_set_step. */
int mpx_g_dropout(mpx_graph *g, const char *name, int x, float p);
int mpx_g_permute(mpx_graph *g, const char *name, int x, const int perm[4]);
/* The same values with another shape (same element count). */
int mpx_g_reshape(mpx_graph *g, const char *name, int x, int ndim, const int64_t *shape);
/* y = x @ W^T (+ b) where W [OUT, IN] is another node's parameter (weight tying: BERT's MLM
 * decoder and the token embedding). An adaptive-scaling layer like linear. */
int mpx_g_linear_tied(mpx_graph *g, const char *name, int x, const char *weight_param, int bias);

/* ---- detection layers ---- */
/* Per batch element, the inputs' values one after another: each x_i [B, ...] holds
 * n_i * width values per batch element; out [B, sum n_i, width]. */
int mpx_g_concat(mpx_graph *g, const char *name, int n, const int *xs, int64_t width);
/* The SSD MultiBox loss (ssd.h) of conf [B,P,C] and loc [B,P,4] against gt_boxes (an F32
 * input [B,G,4]) and gt_labels (I32 [B,G]); priors [P,4] (centre form) are copied. Returns
 * the scalar loss and makes it the graph's loss. */
int mpx_g_multibox(mpx_graph *g, const char *name, int conf, int loc, int gt_boxes, int gt_labels,
                   const float *priors, int64_t n_priors, float iou_threshold, float neg_per_pos);

/* The step number forward and backward use for dropout masks and rounding streams. */
void mpx_graph_set_step(mpx_graph *g, int64_t step);

/* Override the initialiser of the named parameter (e.g. zero-init of a block's last BN gamma). */
mpx_status mpx_g_set_init(mpx_graph *g, const char *param_name, mpx_init init);

/* ---- compiling ---- */
/* Before compiling: give every activation gradient its own buffer (no sharing by lifetime), so
 * mpx_graph_read_grad works on any tensor after a backward pass. For tests and debugging. */
void mpx_graph_keep_grads(mpx_graph *g, int keep);
/* Before compiling: whether element-wise work is fused (default on; graph_compile.c:
 * plan_fusion, plan_shared_grads): a ReLU whose only input is a batch-norm or add output read
 * by nothing else runs inside that node's forward, and an add input that only the add reads
 * takes the add's output gradient as its own (shared storage, no copy). The fused-away output
 * is not stored, so mpx_graph_read refuses it; the gradients and statistics are those of the
 * unfused graph. Off: every node runs on its own (tests compare the two). */
void mpx_graph_fuse(mpx_graph *g, int on);
/* Before compiling: whether a linear layer whose only reader is a softmax cross-entropy computes
 * just the rows that loss reads (default on; graph_compile.c: plan_loss_rows): rows whose label
 * is negative are ignored by the loss, so their logits are left 0 (BERT's decoder, ~85% of its
 * rows). Needs the backend's linear_forward_rows entries (the CPU has them). Off: every row. */
void mpx_graph_loss_rows(mpx_graph *g, int on);
/* Whether batch-norm's training statistics are those of the global batch of a data-parallel
 * run (comm.h; the ranks' sums reduced inside every batch-norm pass: train.sync_bn) or of each
 * rank's slice (default off, as PyTorch DDP). CPU backend; no effect with one rank. */
void mpx_graph_sync_bn(mpx_graph *g, int on);
/* The what-if recipes counted on statistics steps (stats.h: whatif; bit k = MPX_WHATIF_k): every
 * observed activation gradient also counted as each would cast it. 0: none (default). CPU. */
mpx_status mpx_graph_whatif(mpx_graph *g, unsigned mask);
/* A data-parallel run's gradient all-reduce so far: its seconds, and the bytes this rank sent
 * into it (0 and 0 with one rank). */
void mpx_graph_allreduce_stats(const mpx_graph *g, double *seconds, double *bytes);
/* After compiling: how many ReLUs were fused, and how many add inputs share the gradient. */
int mpx_graph_n_fused(const mpx_graph *g);
int mpx_graph_n_shared_grads(const mpx_graph *g);
mpx_status mpx_graph_compile(mpx_graph *g, const mpx_precision *p, mpx_device device,
                             uint64_t seed);
/* The same on a given backend (backend.h), which must outlive the graph: for backends that
 * mpx_backend_get does not name, such as a test's instrumented one. */
mpx_status mpx_graph_compile_backend(mpx_graph *g, const mpx_precision *p,
                                     const struct mpx_backend *be, uint64_t seed);

/* ---- running ---- */
/* Copy a host batch into an input: F32 data is cast to the input's storage dtype (RNE),
 * labels are I32. `count` elements must equal the input's size. */
mpx_status mpx_graph_set_input(mpx_graph *g, int tensor, const void *host, mpx_dtype dtype,
                               int64_t count);
mpx_status mpx_graph_forward(mpx_graph *g, int training);
/* The loss of the last forward pass; NAN when the graph has none or it cannot be read. On a
 * device the first call after a forward pass waits for it (mpx_graph_backward reads the loss
 * with its non-finite count, so after a backward pass this costs nothing). */
float mpx_graph_loss(mpx_graph *g);
/* The global L2 norm of the unscaled parameter gradients of the last backward pass (read with
 * its non-finite count, so no extra wait); NAN before one, or after a forward pass since. */
double mpx_graph_grad_norm(const mpx_graph *g);
/* How many times the host has waited for the graph's backend so far (backend.h: host_waits),
 * less the synchronisations of this graph's profiling clocks (mpx_graph_profile,
 * mpx_graph_time_scaling); the difference across a step of this graph is that step's waits. */
int64_t mpx_graph_host_waits(const mpx_graph *g);
/* Adaptive scaling's branch merges (docs/papers.md §3 step 10) choose their target scale from the
 * branches' magnitudes. Speculative (default on): a merge takes the largest of its branches'
 * scales — the usual choice — without waiting for the magnitudes, and the device checks the
 * choice; when any merge of a pass missed, the pass runs again with merges that wait, so the
 * gradients are those of the exact algorithm either way and a step usually waits once. Off:
 * every merge waits for its magnitudes (tests compare the two). */
void mpx_graph_speculative_merges(mpx_graph *g, int on);
/* Backward passes run again because a speculative merge missed, so far. */
int64_t mpx_graph_merge_redos(const mpx_graph *g);
/* Decode a tensor's value into host FP32 (numel elements). */
mpx_status mpx_graph_read(const mpx_graph *g, int tensor, float *host);
/* Decode a tensor's gradient into host FP32 (unscaled: divided by the scale it carries). Only
 * valid after mpx_graph_backward when the graph keeps its gradients (mpx_graph_keep_grads). */
mpx_status mpx_graph_read_grad(const mpx_graph *g, int tensor, float *host);

typedef struct {
    const mpx_scaling_cfg *scaling; /* method and its knobs (NULL: no scaling) */
    double loss_scale;              /* S0: the scale the loss gradient carries */
    int64_t step;                   /* global step: adaptive update_every, rounding streams */
    mpx_layer_stats *stats;         /* [mpx_graph_n_layers] on statistics steps, else NULL */
} mpx_backward_opts;
/* Zeroes every parameter gradient, runs the backward pass, leaves unscaled FP32 gradients in
 * mpx_param.grad; *nonfinite = number of non-finite parameter-gradient elements. */
mpx_status mpx_graph_backward(mpx_graph *g, const mpx_backward_opts *o, int64_t *nonfinite);
/* Round the FP32 masters into the working copies (after every optimizer update). Without
 * master weights (precision.h: master_weights = 0) the masters then take the rounded values:
 * the stored weight is the parameter. */
mpx_status mpx_graph_sync_weights(mpx_graph *g, int64_t step);
/* "fnv1a64:<hex>" of every parameter's FP32 values and every buffer, in graph order, as the
 * last mpx_graph_sync_weights at step 0 took them: before the policy rounded them, so runs that
 * started from the same draw or file share it whether or not they keep master weights. */
const char *mpx_graph_init_digest(const mpx_graph *g);
/* The precision policy the graph was compiled with. */
const mpx_precision *mpx_graph_precision(const mpx_graph *g);

/* ---- inspecting ---- */
int mpx_graph_n_params(const mpx_graph *g);
mpx_param *mpx_graph_param(mpx_graph *g, int i);
/* The observed layer (mpx_graph_layer) parameter i belongs to. */
int mpx_graph_param_layer(const mpx_graph *g, int i);
int64_t mpx_graph_param_count(const mpx_graph *g); /* total parameter elements */
int mpx_graph_n_buffers(const mpx_graph *g);
mpx_buffer *mpx_graph_buffer(mpx_graph *g, int i);
int mpx_graph_n_layers(const mpx_graph *g);
void mpx_graph_layer(const mpx_graph *g, int i, mpx_layer_info *out);
int mpx_graph_find_tensor(const mpx_graph *g, const char *name);
/* Shape of a tensor (returns ndim; shape may be NULL). */
int mpx_graph_tensor_shape(const mpx_graph *g, int tensor, int64_t *shape);
/* Floating-point operations of one step (forward only, or forward + backward). */
double mpx_graph_flops(const mpx_graph *g, int training);
/* Bytes of every arena (values, gradients, branches, scratch, parameters, optimizer excluded). */
typedef struct {
    size_t values, grads, branches, scratch, params, saved, total;
} mpx_memory_plan;
void mpx_graph_memory(const mpx_graph *g, mpx_memory_plan *out);
void mpx_graph_print_plan(const mpx_graph *g, FILE *f);
/* Per-node timing: when on, forward and backward time each node (wall clock, after the
 * backend finished it) and accumulate per node; the report sums them per op kind and lists
 * the slowest nodes. For `mpx bench` and performance work; off by default. */
void mpx_graph_profile(mpx_graph *g, int on);
/* Per op kind: forward and backward seconds, GFLOP, calls. */
typedef struct {
    const char *op;
    double fwd_s, bwd_s, gflop;
    int64_t calls;
} mpx_op_profile;
/* Fills up to `cap` entries (one per op kind present); returns the count. */
int mpx_graph_profile_ops(const mpx_graph *g, mpx_op_profile *out, int cap);
void mpx_graph_profile_print(const mpx_graph *g, FILE *f, int top_nodes);

/* The graph-level work of loss scaling, timed in place: when on, backward reads the clock
 * (after the backend finished the work before) around every fan-out's merge (accumulation,
 * rescaling to the target scale, cast) and every conv/linear node's adaptive factor (the
 * moments of dy and W on an update step), and adds the seconds up. Under `scaling = none` the
 * same merges run without the magnitudes, so the difference between two graphs is what
 * adaptive scaling adds there — small enough that whole-step timing cannot resolve it on a
 * noisy machine, while these parts can (`mpx bench --overheads`). Off by default. */
void mpx_graph_time_scaling(mpx_graph *g, int on);
/* Seconds accumulated since the graph was built (0 while timing was never on). */
double mpx_graph_scaling_seconds(const mpx_graph *g);

/* Per-node precision state (checkpoints carry it so a resumed run is bit-identical). */
typedef struct {
    double s_prev, layer_scale, als_unbound;
    int32_t als_valid;
} mpx_node_state;
int mpx_graph_n_nodes(const mpx_graph *g);
void mpx_graph_get_node_state(const mpx_graph *g, int node, mpx_node_state *s);
void mpx_graph_set_node_state(mpx_graph *g, int node, const mpx_node_state *s);
/* The backend the graph runs on (after compile). */
const struct mpx_backend *mpx_graph_backend(const mpx_graph *g);
/* Copy between backend memory (parameters, buffers) and the host. */
void mpx_graph_download(const mpx_graph *g, void *host, const void *src, size_t bytes);
void mpx_graph_upload(const mpx_graph *g, void *dst, const void *host, size_t bytes);
/* Per-layer scale state of the last backward: S_prev and the factor s. */
void mpx_graph_layer_scale(const mpx_graph *g, int layer, double *s_prev, double *s);

#ifdef __cplusplus
}
#endif

#endif
