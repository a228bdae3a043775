/* graph_optab.c — the op table: for every op kind its name, the node glue of its forward,
 * backward and shadow backward, its FLOPs and its family (graph_ops.h), and the facts the
 * views, the executor and the planner ask of a kind. */
#include "graph_ops.h"

static const op_row g_ops[OP_COUNT] = {
    [OP_INPUT] = {"input", NULL, NULL, NULL, NULL, MPX_OPC_OTHER},
    [OP_CONV2D] = {"conv2d", fwd_conv2d, bwd_conv2d, NULL, flops_conv_linear, MPX_OPC_GEMM},
    [OP_LINEAR] = {"linear", fwd_linear, bwd_linear, NULL, flops_conv_linear, MPX_OPC_GEMM},
    [OP_LINEAR_T] = {"linear", fwd_linear_t, bwd_linear_t, NULL, flops_linear_t, MPX_OPC_GEMM},
    [OP_BMM] = {"bmm", fwd_bmm, bwd_bmm, NULL, flops_bmm, MPX_OPC_GEMM},
    [OP_BATCHNORM] = {"batchnorm", fwd_batchnorm, bwd_batchnorm, NULL, flops_norm, MPX_OPC_BATCHNORM},
    [OP_LAYERNORM] = {"layernorm", fwd_layernorm, bwd_layernorm, NULL, flops_norm, MPX_OPC_OTHER},
    [OP_RELU] = {"relu", fwd_relu, bwd_relu, shadow_relu, flops_pointwise, MPX_OPC_RELU},
    [OP_ADD] = {"add", fwd_add, bwd_add, shadow_copy, flops_pointwise, MPX_OPC_ADD},
    [OP_GELU] = {"gelu", fwd_gelu, bwd_gelu, NULL, flops_pointwise, MPX_OPC_OTHER},
    [OP_DROPOUT] = {"dropout", fwd_dropout, bwd_dropout, NULL, flops_pointwise, MPX_OPC_OTHER},
    [OP_SOFTMAX] = {"softmax", fwd_softmax, bwd_softmax, NULL, flops_pointwise, MPX_OPC_OTHER},
    [OP_MAXPOOL2D] = {"maxpool2d", fwd_maxpool2d, bwd_maxpool2d, shadow_maxpool2d, flops_pointwise, MPX_OPC_OTHER},
    [OP_AVGPOOL_GLOBAL] = {"avgpool", fwd_avgpool, bwd_avgpool, NULL, flops_pointwise, MPX_OPC_OTHER},
    [OP_EMBEDDING] = {"embedding", fwd_embedding, bwd_embedding, NULL, flops_pointwise, MPX_OPC_OTHER},
    [OP_PERMUTE] = {"permute", fwd_permute, bwd_permute, shadow_permute, NULL, MPX_OPC_OTHER},
    [OP_RESHAPE] = {"reshape", fwd_reshape, bwd_reshape, shadow_copy, NULL, MPX_OPC_OTHER},
    [OP_CONCAT] = {"concat", fwd_concat, bwd_concat, shadow_concat, NULL, MPX_OPC_OTHER},
    [OP_SOFTMAX_CE] = {"softmax_ce", fwd_softmax_ce, bwd_softmax_ce, NULL, flops_softmax_ce, MPX_OPC_OTHER},
    [OP_L2NORM] = {"l2norm", fwd_l2norm, bwd_l2norm, NULL, flops_norm, MPX_OPC_OTHER},
    [OP_MULTIBOX] = {"multibox", fwd_multibox, bwd_multibox, NULL, NULL, MPX_OPC_OTHER},
};

const op_row *op_row_of(op_kind op) {
    return (unsigned)op < OP_COUNT && g_ops[op].name ? &g_ops[op] : NULL;
}

const char *op_name(op_kind op) {
    const op_row *r = op_row_of(op);
    return r ? r->name : "?";
}

int op_moves_values(op_kind op) {
    const op_row *r = op_row_of(op);
    return r && r->shadow;
}

int op_is_gemm_family(op_kind op) { return op_class(op) == MPX_OPC_GEMM; }

mpx_op_class op_class(op_kind op) {
    const op_row *r = op_row_of(op);
    return r ? r->cls : MPX_OPC_OTHER;
}

int op_scales_input_grad(const mpx_backend *be, op_kind op) {
    switch (op) {
    case OP_CONV2D: return be->conv2d_backward_data_scaled != NULL;
    case OP_LINEAR: return be->linear_backward_data_scaled != NULL;
    case OP_LINEAR_T: return be->linear_t_backward_data_scaled != NULL;
    default: return 0;
    }
}
