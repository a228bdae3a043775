/* graph_internal.h — the graph's data structures, shared by build, compile and execute. */
#ifndef MPX_GRAPH_INTERNAL_H
#define MPX_GRAPH_INTERNAL_H

#include "mpx/backend.h"
#include "mpx/graph.h"

/* Consumers one tensor may have: BERT-large's attention mask feeds its 24 layers; the branch
 * bookkeeping keeps one bit per consumer in a uint32_t. */
enum { MAX_CONSUMERS = 32 };

enum { MAX_IN = 8, MAX_PARAMS = 4, MAX_AUX = 6 };

typedef enum {
    OP_INPUT = 0,
    OP_CONV2D,
    OP_BATCHNORM,
    OP_RELU,
    OP_MAXPOOL2D,
    OP_AVGPOOL_GLOBAL,
    OP_LINEAR,
    OP_ADD,
    OP_SOFTMAX_CE,
    OP_EMBEDDING,
    OP_LAYERNORM,
    OP_GELU,
    OP_BMM,
    OP_SOFTMAX,
    OP_DROPOUT,
    OP_PERMUTE,
    OP_RESHAPE,
    OP_LINEAR_T,
    OP_CONCAT,
    OP_MULTIBOX,
    OP_L2NORM,
    OP_COUNT
} op_kind;

/* A tensor, by lifetime: what the builder fixed (shape, producer, consumers), what compile
 * decided for it (plan: storage formats, memory, fusion, statistics), and what the last
 * backward pass left in it (pass: which gradients it wrote and at what scale). */
typedef struct {
    int elided;              /* value never stored: its producer writes its ReLU's output instead */
    int round_id;            /* the tensor whose stochastic-rounding stream rounds this value (itself,
                              * or the elided tensor a fused ReLU's output stands for) */
    int grad_root;           /* the tensor whose gradient storage holds this one's (itself, or for
                              * an add's single-reader input the add output's: shares_grad) */
    mpx_dtype dtype;         /* storage of the value */
    mpx_dtype grad_dtype;    /* storage of the gradient */
    void *value;
    void *grad;              /* NULL when !requires_grad */
    float *branch[MAX_CONSUMERS]; /* FP32 contributions when n_consumers > 1 */
    int observer[4];         /* observed layers whose act stats describe this gradient */
    int shadow_counted;      /* its observers are counted from the FP32 shadow (see below) */
    int needs_shadow;        /* on statistics steps keep the FP32 pre-rounding gradient */
    float *shadow;           /* that FP32 copy (planned like the branch buffers) */
    size_t grad_bytes, branch_bytes;
} tensor_plan;

typedef struct {
    int grad_ready;          /* this backward pass wrote `grad` */
    double grad_scale;       /* S carried by the gradient in `grad` */
    int grad_alias;          /* >= 0: this pass, the gradient is that tensor's (a fused ReLU's
                              * output), masked by the consumer's op (relu_bwd_fused) */
    uint32_t branch_ready;   /* bit c: consumer c wrote branch[c] */
    /* S carried by branch c once its pending factor is applied */
    double branch_scale[MAX_CONSUMERS];
    /* a layer's factor s not yet multiplied into branch c: the merge applies it inside its
     * accumulation instead of a separate pass */
    float branch_pending[MAX_CONSUMERS];
    /* adaptive-quantile: the quantile of the nonzero |gradient| before its rounding into storage
     * (power-of-two resolution) and the step it belongs to; read by the producer's factor. */
    float q_pre;
    int64_t q_step;
} tensor_pass;

typedef struct {
    char name[MPX_NAME_MAX];
    int ndim;
    int64_t shape[MPX_MAX_DIMS];
    int64_t numel;
    mpx_tensor_role role;    /* ACTIVATION, or REDUCTION for losses */
    int is_label;            /* I32 labels: no gradient, never cast */
    int producer;            /* node index */
    int n_consumers;
    int consumers[MAX_CONSUMERS]; /* node indices (a consumer appears once per input slot) */
    int requires_grad;
    tensor_plan plan;        /* compile */
    tensor_pass pass;        /* the last backward pass */
} gtensor;

/* What the host must know after a step, kept in backend memory and read with one download:
 * the skip decision's inputs. n_params doubles follow it: each parameter gradient's sum of
 * squares (the optimizer's global norm), computed at the end of the backward pass. */
typedef struct {
    float loss;              /* the loss tensor's value, copied there by the forward pass */
    uint32_t merge_misses;   /* speculative merges whose assumed target did not fit */
    uint64_t nonfinite;      /* non-finite weight-gradient addends (unscale_accumulate) */
} step_status;
#define STATUS_SUMS(st) ((double *)((step_status *)(st) + 1))

typedef union {
    mpx_conv2d_attr conv;
    mpx_batchnorm_attr bn;
    mpx_pool2d_attr pool;
    mpx_bmm_attr bmm;
    struct { float scale; } softmax;
    struct { float p; } dropout;
    struct { float eps; } ln;
    int perm[4];
    struct { int64_t width; } concat;
    struct { float iou_threshold, neg_per_pos; } multibox;
} op_attr;

/* A node, by lifetime: the builder's (op, inputs, parameters, attributes), compile's (saved
 * state buffers, fusion and loss-row decisions), adaptive scaling's state carried from step to
 * step, the last pass's, and the profile. */
typedef struct {
    void *aux[MAX_AUX];      /* saved state: norm statistics, probabilities, loss targets */
    int64_t aux_numel[MAX_AUX];
    mpx_dtype aux_dtype[MAX_AUX]; /* F32 unless set (I32 targets, U8 workspace) */
    int n_aux;
    int fused_relu;          /* batch-norm or add: the ReLU node whose output its forward writes */
    int fused_into;          /* ReLU: the node whose forward writes its output (its own is
                              * skipped) */
    int loss_rows;           /* linear read only by a softmax cross-entropy: that loss's labels,
                              * whose negative entries mark rows its forward leaves 0 (-1: none) */
} node_plan;

typedef struct {
    double s_prev;           /* scale of the gradient entering the backward (last step) */
    double layer_scale;      /* the node's factor s (last step) */
    double unbound;          /* cached unbound factor between adaptive updates */
    int valid;
    double unbound_saved;    /* ... as the backward pass found them (a redone pass restores) */
    int valid_saved;
    int factor_in_dy;        /* this pass: the factor s is in the dy its input gradient came from
                              * (als = reference), so the commit does not apply it again */
} node_scaling;

typedef struct {
    double fwd, bwd;         /* seconds */
    double skipped;          /* FLOPs its operators left out (backend skipped_flops) */
    int64_t calls;
} node_profile;

typedef struct {
    op_kind op;
    char name[MPX_NAME_MAX];
    int in[MAX_IN];
    int n_in;
    int out;
    int param[MAX_PARAMS];
    int n_param;
    int buffer[2];           /* BN running mean/var (indices into g->buffers), -1 when none */
    float *aux_init;         /* host values copied into aux[0] at compile (SSD priors) */
    op_attr attr;
    int layer;               /* observed-layer index or -1 */
    int is_gemm_layer;       /* conv / linear: adaptive scaling gives it a factor */
    int seeds_gradient;      /* the loss: its backward starts the gradient flow */
    int64_t fan_in;
    node_plan plan;          /* compile */
    node_scaling sc;         /* adaptive scaling, carried across steps */
    struct node_fp8 *fp8;    /* fp8 mode, GEMM family: the scaling state (graph_fp8.c) */
    node_profile prof;
} gnode;

/* The state of one backward pass: on the stack of mpx_graph_backward, reachable from the graph
 * (g->pass) only while the pass runs. */
typedef struct {
    const mpx_backward_opts *bw;
    int layerwise;           /* adaptive scaling: per-layer factors and merges */
    int speculating;         /* this pass's merges assume their target (no wait) */
    int quantile_due;        /* adaptive-quantile recomputes factors this step */
} bw_pass;

/* The graph: the builder's topology, the options set before compile, compile's plan (precision,
 * backend, arenas, the memory plan, statistics and status buffers), counters, and what a pass
 * running now points to. */
/* A layer's row of cast statistics in dev_stats / host_stats: the activation gradients' cast,
 * the weight gradients' cast, and the quantizing modes' three operand casts (stats.h). */
enum { STATS_ACT = 0, STATS_WGRAD = 1, STATS_OPERAND = 2, STATS_ROW = 5 };
#define STATS_AT(g, stats, layer, k) (&(g)->stats[STATS_ROW * (size_t)(layer) + (k)])
/* A cast's scales noted into a statistics row's range for one operand or recipe (stats.h:
 * operand_scale_lo, _hi): *lo and *hi widened to [s_lo, s_hi] (both 0: nothing noted yet). */
static inline void note_scale_range(double *lo, double *hi, double s_lo, double s_hi) {
    const int first = *lo == 0 && *hi == 0;
    if (first || s_lo < *lo) *lo = s_lo;
    if (first || s_hi > *hi) *hi = s_hi;
}

struct mpx_graph {
    mpx_status status;       /* sticky builder/compile error */
    gtensor *tensors;
    int n_tensors, cap_tensors;
    gnode *nodes;
    int n_nodes, cap_nodes;
    mpx_param *params;
    int n_params, cap_params;
    mpx_buffer *buffers;
    int n_buffers, cap_buffers;
    int *layer_node;         /* observed layer -> node */
    int n_layers;
    int loss_tensor;

    /* options, set before compile */
    int keep_grads;          /* no gradient-buffer sharing (tests) */
    int no_fusion;           /* run every ReLU on its own (mpx_graph_fuse) */
    int all_rows;            /* compute the rows a loss ignores too (mpx_graph_loss_rows) */
    int sync_bn;             /* batch-norm statistics over every rank (mpx_graph_sync_bn) */
    unsigned whatif;         /* what-if recipes counted on statistics steps (mpx_graph_whatif) */
    int exact_merges;        /* adaptive merges wait for their magnitudes (mpx_graph_speculative_merges) */
    int profile;             /* time every node */
    int time_scaling;        /* time the merges and adaptive factors (mpx_graph_time_scaling) */

    /* counters */
    int64_t merge_redos;     /* backward passes run again because a speculative merge missed */
    double scaling_s;        /* seconds of merges and adaptive factors so far (time_scaling) */
    int64_t clock_waits;     /* the backend waits those clocks made (not the step's own) */
    double dist_s;           /* seconds in the gradient all-reduce so far (graph_dist.c) */
    double dist_bytes;       /* ... and the bytes each rank contributed to it */
    char init_digest[40];    /* the FP32 weights as the last step-0 sync took them (graph_exec.c) */

    /* compile's plan */
    int compiled;
    int n_fused;             /* ReLUs fused into their producers */
    int n_shared;            /* add inputs whose gradient shares the add output's storage */
    mpx_precision prec;
    const mpx_backend *be;
    void *arena_values, *arena_grads, *arena_branches, *arena_saved, *arena_params;
    float *scratch;
    size_t scratch_floats, scratch_used;
    mpx_memory_plan plan;
    mpx_cast_stats *dev_stats;     /* backend copy of [n_layers][STATS_ROW] cast stats (act,
                                    * wgrad, the three operands: STATS_AT), followed by
                                    * dev_moments in the same allocation */
    mpx_cast_stats *host_stats;    /* their host copy, downloaded at once on statistics steps */
    mpx_moments *dev_moments;      /* [n_layers][2] moments (gradient, weight) of statistics
                                    * steps, computed without a wait (behind dev_stats) */
    mpx_moments *host_moments;     /* their host copy (behind host_stats) */
    unsigned char *moments_due;    /* [n_layers][2]: dev_moments holds this step's (host) */
    size_t stats_bytes;            /* dev_stats and dev_moments together */
    step_status *dev_status;       /* backend memory, with the sums behind it */
    float *merge_slots;            /* backend memory: a merge's branch magnitudes [MAX_CONSUMERS] */
    step_status *host_status;      /* its host copy, valid when status_fresh */
    size_t status_bytes;
    int status_fresh;              /* downloaded since the last forward */
    int sums_fresh;                /* ... and holds the gradient sums of the last backward */

    uint64_t seed;                 /* compile seed: dropout masks */

    /* while a pass runs */
    const bw_pass *pass;           /* the backward pass in progress, NULL outside one */
    mpx_op_class view_class;       /* the class of the node whose views are being made
                                    * (backend.h: op_direct_io) */
    int64_t step;                  /* the step the passes belong to (rounding streams, factors) */
};

/* Reductions over the ranks of a data-parallel run (graph_dist.c); each the identity with one. */
int dist_ranks(void);
mpx_status dist_reduce_grads(mpx_graph *g);
mpx_status dist_reduce_status(mpx_graph *g);
mpx_status dist_reduce_moments(mpx_moments *m);
mpx_status dist_max_magnitudes(float *a, int k);
mpx_status dist_reduce_stats(mpx_graph *g);
mpx_status dist_check_factors(const mpx_graph *g);
/* Batch-norm's reducer of a synchronised run (ops.h: mpx_batchnorm_attr.reduce); ctx unused. */
mpx_status dist_bn_reduce(void *ctx, double *totals, float *shift, int64_t c, int64_t m);
/* Sets a's reducer when the graph synchronises batch-norm over more than one rank. */
mpx_status dist_bn_attr(const mpx_graph *g, mpx_batchnorm_attr *a);

/* fp8 mode (graph_fp8.c): the GEMM nodes' scaling state made at compile, freed with the graph;
 * the end of a backward pass (delayed scaling's amax histories). fp8_init also refuses the
 * quantizing modes (fp8, fixed16) on a backend without their casts. */
mpx_status fp8_init(mpx_graph *g);
void fp8_free(mpx_graph *g);
mpx_status fp8_pass_end(mpx_graph *g);

/* Builder helpers (graph_build.c). */
int graph_fail(mpx_graph *g, mpx_status st);

/* Per-op execution through the op table (graph_ops.c, graph_optab.c): forward and backward of
 * one node. The executor hands the backward the FP32 view of the incoming gradient (NULL for
 * the loss, which seeds it), the one a conv/linear computes its input gradient from (dy_data:
 * dy multiplied by the layer's factor in storage, as the 2019 code does; NULL: dy itself) and
 * the view of the node's first parameter (NULL when it has none). */
mpx_status node_forward(mpx_graph *g, gnode *n, int training);
mpx_status node_backward(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0);
/* Statistics steps: run such an op's backward again on the FP32 shadow of its output
 * gradient, handing each input's result to commit_shadow. */
mpx_status node_backward_shadow(mpx_graph *g, gnode *n, const mpx_tensor *dy_shadow);
double node_flops(const mpx_graph *g, const gnode *n, int training);
/* Facts of an op kind, from the op table. */
const char *op_name(op_kind op);
/* 1 when its backward only moves values of dy (ReLU, add, max-pool, permute, reshape,
 * concat): on statistics steps it runs again on FP32 shadows. */
int op_moves_values(op_kind op);
/* 1 for conv2d, linear, linear_t and bmm: the GEMM family. */
int op_is_gemm_family(op_kind op);
/* The operator class of the kind (backend.h: op_direct_io). */
mpx_op_class op_class(op_kind op);
/* 1 when the backend can apply a factor to the op's input gradient itself (backend.h:
 * conv2d_backward_data_scaled and its linear siblings). */
int op_scales_input_grad(const mpx_backend *be, op_kind op);

/* Execution views (graph_views.c): the only place that knows about storage formats. */
/* Stochastic-rounding streams: unique per (step, tensor or parameter, kind of cast). */
enum { RS_VALUE = 1, RS_GRAD, RS_PGRAD, RS_WEIGHT, RS_INPUT, RS_OPERAND };
uint64_t round_stream(int64_t step, int id, int kind);
/* The policy's cast into storage dtype `dst` (its rounding and seed) on stream `stream`. */
mpx_cast_spec storage_cast(const mpx_graph *g, mpx_dtype dst, uint64_t stream);
/* A tensor descriptor of the given shape over `data`. */
mpx_tensor make_view(int ndim, const int64_t *shape, mpx_dtype dt, mpx_device dev, void *data);
/* A view of `numel` elements stored as `dt` at `data` for an op to read (decoded into scratch
 * when the ops cannot read that dtype). */
mpx_status view_of(mpx_graph *g, int ndim, const int64_t *shape, mpx_dtype dt, void *data,
                   const char *name, mpx_tensor *v);
/* Which of t's consumers (a branch slot) input `slot` of node n is. */
int consumer_slot(const gtensor *t, const gnode *g_nodes, const gnode *n, int slot);
/* Where tensor t's act stats go on this step, or NULL (none due, unobserved, or shadowed). */
mpx_cast_stats *act_stats(mpx_graph *g, const gtensor *t);
/* The counted cast that writes tensor t's gradient from FP32 `src` times `multiplier`;
 * `writer` is the node whose backward made src (NULL for a merge). */
mpx_status cast_grad(mpx_graph *g, int tensor, const float *src, double multiplier,
                     const gnode *writer);
/* log.whatif (graph_whatif.c): on statistics steps, t's gradient values src * multiplier counted
 * as the asked recipes would cast them, into its observer's row. */
mpx_status whatif_count(mpx_graph *g, const gtensor *t, const float *src, double multiplier);
/* FP32 view of a tensor's value (decoded into scratch when the backend cannot read it). */
mpx_status view_value(mpx_graph *g, int tensor, mpx_tensor *v);
/* FP32 view to write a node's output value; commit_value rounds it into storage. */
mpx_status view_output(mpx_graph *g, int tensor, mpx_tensor *v);
mpx_status commit_value(mpx_graph *g, int tensor, const mpx_tensor *v);
/* FP32 view of a parameter's working copy. */
mpx_status view_param(mpx_graph *g, int param, mpx_tensor *v);
/* FP32 view of the gradient entering node n's backward (merged and cast already). */
mpx_status view_out_grad(mpx_graph *g, gnode *n, mpx_tensor *v);
/* FP32 view to write the gradient for input slot i of node n; NULL data when not needed. Or
 * the input's 16-bit gradient storage itself, when its commit would only round it (and apply
 * the factor in_grad_factor returns, which the op must then apply). */
mpx_status view_in_grad(mpx_graph *g, gnode *n, int slot, mpx_tensor *v);
/* The factor the op must multiply the gradient it writes into v by before rounding: not 1 only
 * for a view of 16-bit storage (view_in_grad) of a node with an adaptive factor. */
double in_grad_factor(const mpx_graph *g, const gnode *n, int slot, const mpx_tensor *v);
mpx_status commit_in_grad(mpx_graph *g, gnode *n, int slot, const mpx_tensor *v);
/* Whether input `slot` of an add shares the storage of the add's output gradient (compile:
 * plan_fusion), and its commit: the values are there already, so only the bookkeeping. */
int shares_grad(const mpx_graph *g, const gnode *n, int slot);
mpx_status commit_shared_grad(mpx_graph *g, gnode *n, int slot);
/* The shadow result for input `slot`: count it for that input's observers and/or keep it as
 * the input's own shadow. `needed` says whether the slot wants a result at all. */
int shadow_needed(const mpx_graph *g, const gnode *n, int slot);
mpx_status commit_shadow(mpx_graph *g, gnode *n, int slot, const mpx_tensor *v);
/* FP32 view to write node n's contribution to a parameter gradient; commit counts the cast
 * into the parameter's storage, unscales by S_prev and accumulates into param.grad. */
mpx_status view_param_grad(mpx_graph *g, int param, mpx_tensor *v);
mpx_status commit_param_grad(mpx_graph *g, gnode *n, int param, const mpx_tensor *v);
/* Scratch is a bump allocator reset per node. */
float *scratch_take(mpx_graph *g, int64_t numel);
/* Scratch for `numel` elements of dtype dt. */
void *scratch_take_dtype(mpx_graph *g, int64_t numel, mpx_dtype dt);
mpx_status scratch_fail(const mpx_graph *g, const char *what);
void scratch_reset(mpx_graph *g);

#endif
