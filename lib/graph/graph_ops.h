/* graph_ops.h — the node glue of each op kind (graph_ops_<family>.c), named by the op table
 * (graph_optab.c), and what that glue shares (graph_ops_util.c).
 *
 * A node's forward fetches views (graph_views.c), calls the backend's operator and commits its
 * output; its backward does the same for the input and parameter gradients. No precision or
 * scaling logic here: the views and commits carry it.
 */
#ifndef MPX_GRAPH_OPS_H
#define MPX_GRAPH_OPS_H

#include "graph_internal.h"

/* ---- shared glue (graph_ops_util.c) ---- */
mpx_status op_missing(const mpx_graph *g, const char *what);
/* Fail unless the backend has entry `fn`. */
#define NEED(fn)                                                                                   \
    do {                                                                                           \
        if (!g->be->fn) return op_missing(g, #fn);                                                 \
    } while (0)
/* The node's saved tensor a (aux) and the graph's buffer b (running statistics), as views. */
mpx_tensor aux_view(const mpx_graph *g, const gnode *n, int a);
mpx_tensor buffer_view(const mpx_graph *g, int b);
/* The tensor a node's forward writes: its output, or its fused ReLU's (compile: plan_fusion). */
int forward_out(const mpx_graph *g, const gnode *n);
/* A view of `v` with another shape (same element count). */
mpx_tensor reshaped(const mpx_tensor *v, int ndim, const int64_t *shape);
/* dst = src, the same elements, across the dtypes views come in (a copy, a decode, or a
 * rounding to nearest); and n of them between element offsets. */
mpx_status move_all(const mpx_graph *g, const mpx_tensor *dst, const mpx_tensor *src);
mpx_status move_elems(const mpx_graph *g, const mpx_tensor *dst, int64_t dof, const mpx_tensor *src,
                      int64_t sof, int64_t n);
/* Where the GEMM that reads an operand runs its reduction (K) in that operand: along its last
 * dimension; along all its leading dimensions, the rows of [numel / C, C] (a layer's weight
 * [IN, OUT] or HWIO in the forward GEMM, its input and output gradient in the weight-gradient
 * GEMM); or along its second-to-last dimension for each index of the dims before it (bmm). Only
 * block formats read it (MXFP8 blocks run along K, graph_fp8.c). */
typedef enum { GEMM_K_LAST, GEMM_K_ROWS, GEMM_K_BATCH_ROWS } gemm_k;
/* A GEMM-family operand of node n as the precision reads it, into scratch: rounded to TF32 in
 * tf32 mode, quantized to FP8 in fp8 mode (graph_fp8.c) and to Q(16, f) in fixed16 mode
 * (graph_fixed.c); `slot` says which operand: MPX_OPERAND_X, MPX_OPERAND_W or MPX_OPERAND_DY,
 * stats.h, and k where the reading GEMM reduces; else unchanged. */
mpx_status gemm_operand(mpx_graph *g, gnode *n, int slot, gemm_k k, mpx_tensor *v);
/* fp8 mode (graph_fp8.c): v quantized under the recipe into FP32 scratch; counted into n's
 * statistics row on statistics steps; delayed scaling's amax of this step noted. */
mpx_status fp8_operand(mpx_graph *g, gnode *n, int slot, gemm_k k, mpx_tensor *v);
/* The quantizing modes' common first step: v's values decoded into FP32 scratch (*f); when this
 * is a statistics step of a training pass, n's statistics row (*ls, host) and the counters of
 * operand `slot` (*st, backend memory), else both NULL. */
mpx_status operand_f32(mpx_graph *g, const gnode *n, int slot, const mpx_tensor *v,
                       const char *what, float **f, mpx_layer_stats **ls, mpx_cast_stats **st);
/* fixed16 mode (graph_fixed.c): v quantized to Q(16, f) into FP32 scratch, counted likewise. */
mpx_status fixed_operand(mpx_graph *g, gnode *n, int slot, mpx_tensor *v);

/* ---- the op kinds: forward (views, operator, commit), backward, FLOPs, and for the ops whose
 * backward only moves values the shadow backward of statistics steps (into the FP32 dx) ---- */
typedef mpx_status (*op_forward_fn)(mpx_graph *g, gnode *n, int training);
typedef mpx_status (*op_backward_fn)(mpx_graph *g, gnode *n, const mpx_tensor *dy,
                                     const mpx_tensor *dy_data, const mpx_tensor *w0);
typedef mpx_status (*op_shadow_fn)(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy,
                                   mpx_tensor *dx);
typedef double (*op_flops_fn)(const mpx_graph *g, const gnode *n, int training);

/* One row per op kind (graph_optab.c): adding an op is a row here and its glue functions. */
typedef struct {
    const char *name;
    op_forward_fn forward;   /* NULL: nothing to run (inputs) */
    op_backward_fn backward; /* NULL: no gradient to propagate */
    op_shadow_fn shadow;     /* the ops whose backward only moves values: their shadow pass */
    op_flops_fn flops;       /* NULL: no FLOPs counted */
    mpx_op_class cls;        /* backend.h: GEMM (the operand rules), batch-norm, relu, add, other */
} op_row;
/* The row of op kind `op`; NULL for a kind outside the table. */
const op_row *op_row_of(op_kind op);

/* graph_ops_gemm.c: conv2d, linear, linear_t (weights [OUT, IN]), bmm */
mpx_status fwd_conv2d(mpx_graph *g, gnode *n, int training);
mpx_status bwd_conv2d(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0);
mpx_status fwd_linear(mpx_graph *g, gnode *n, int training);
mpx_status bwd_linear(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0);
mpx_status fwd_linear_t(mpx_graph *g, gnode *n, int training);
mpx_status bwd_linear_t(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                        const mpx_tensor *w0);
mpx_status fwd_bmm(mpx_graph *g, gnode *n, int training);
mpx_status bwd_bmm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                   const mpx_tensor *w0);
double flops_conv_linear(const mpx_graph *g, const gnode *n, int training);
double flops_linear_t(const mpx_graph *g, const gnode *n, int training);
double flops_bmm(const mpx_graph *g, const gnode *n, int training);

/* graph_ops_norm.c: batch-norm (with a fused ReLU), layer-norm */
mpx_status fwd_batchnorm(mpx_graph *g, gnode *n, int training);
mpx_status bwd_batchnorm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0);
mpx_status fwd_layernorm(mpx_graph *g, gnode *n, int training);
mpx_status fwd_l2norm(mpx_graph *g, gnode *n, int training);
mpx_status bwd_l2norm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0);
mpx_status bwd_layernorm(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0);
double flops_norm(const mpx_graph *g, const gnode *n, int training);

/* graph_ops_pointwise.c: relu, add (+relu), gelu, dropout, softmax, the pools, embedding */
mpx_status fwd_relu(mpx_graph *g, gnode *n, int training);
mpx_status bwd_relu(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                    const mpx_tensor *w0);
mpx_status shadow_relu(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx);
mpx_status fwd_add(mpx_graph *g, gnode *n, int training);
mpx_status bwd_add(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                   const mpx_tensor *w0);
mpx_status fwd_gelu(mpx_graph *g, gnode *n, int training);
mpx_status bwd_gelu(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                    const mpx_tensor *w0);
mpx_status fwd_dropout(mpx_graph *g, gnode *n, int training);
mpx_status bwd_dropout(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0);
mpx_status fwd_softmax(mpx_graph *g, gnode *n, int training);
mpx_status bwd_softmax(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0);
mpx_status fwd_maxpool2d(mpx_graph *g, gnode *n, int training);
mpx_status bwd_maxpool2d(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0);
mpx_status shadow_maxpool2d(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx);
mpx_status fwd_avgpool(mpx_graph *g, gnode *n, int training);
mpx_status bwd_avgpool(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0);
mpx_status fwd_embedding(mpx_graph *g, gnode *n, int training);
mpx_status bwd_embedding(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                         const mpx_tensor *w0);
double flops_pointwise(const mpx_graph *g, const gnode *n, int training);

/* graph_ops_layout.c: permute, reshape, concat (their backward moves values) */
mpx_status fwd_permute(mpx_graph *g, gnode *n, int training);
mpx_status bwd_permute(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0);
mpx_status shadow_permute(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx);
mpx_status fwd_reshape(mpx_graph *g, gnode *n, int training);
mpx_status bwd_reshape(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                       const mpx_tensor *w0);
/* add's and reshape's shadow: dx = dy */
mpx_status shadow_copy(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx);
mpx_status fwd_concat(mpx_graph *g, gnode *n, int training);
mpx_status bwd_concat(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                      const mpx_tensor *w0);
mpx_status shadow_concat(mpx_graph *g, gnode *n, int slot, const mpx_tensor *dy, mpx_tensor *dx);

/* graph_ops_loss.c: softmax cross-entropy, the MultiBox loss */
mpx_status fwd_softmax_ce(mpx_graph *g, gnode *n, int training);
mpx_status bwd_softmax_ce(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                          const mpx_tensor *w0);
mpx_status fwd_multibox(mpx_graph *g, gnode *n, int training);
mpx_status bwd_multibox(mpx_graph *g, gnode *n, const mpx_tensor *dy, const mpx_tensor *dy_data,
                        const mpx_tensor *w0);
double flops_softmax_ce(const mpx_graph *g, const gnode *n, int training);

#endif
