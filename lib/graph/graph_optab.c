/* graph_optab.c — facts about each op kind that the views, the executor and the planner ask:
 * its name, whether its backward only moves values, whether the backend scales its input
 * gradient itself. Kept apart from the ops' execution (graph_ops.c), which the views serve. */
#include "graph_internal.h"

const char *op_name(op_kind op) {
    static const char *const names[OP_COUNT] = {
        [OP_INPUT] = "input",         [OP_CONV2D] = "conv2d",     [OP_BATCHNORM] = "batchnorm",
        [OP_RELU] = "relu",           [OP_MAXPOOL2D] = "maxpool2d",
        [OP_AVGPOOL_GLOBAL] = "avgpool", [OP_LINEAR] = "linear", [OP_ADD] = "add",
        [OP_SOFTMAX_CE] = "softmax_ce", [OP_EMBEDDING] = "embedding", [OP_LAYERNORM] = "layernorm",
        [OP_GELU] = "gelu",           [OP_BMM] = "bmm",           [OP_SOFTMAX] = "softmax",
        [OP_DROPOUT] = "dropout",     [OP_PERMUTE] = "permute",   [OP_RESHAPE] = "reshape",
        [OP_LINEAR_T] = "linear",     [OP_CONCAT] = "concat",     [OP_MULTIBOX] = "multibox",
    };
    return (unsigned)op < OP_COUNT ? names[op] : "?";
}

int op_moves_values(op_kind op) {
    return op == OP_RELU || op == OP_ADD || op == OP_MAXPOOL2D || op == OP_PERMUTE ||
           op == OP_RESHAPE || op == OP_CONCAT;
}

int op_scales_input_grad(const mpx_backend *be, op_kind op) {
    switch (op) {
    case OP_CONV2D: return be->conv2d_backward_data_scaled != NULL;
    case OP_LINEAR: return be->linear_backward_data_scaled != NULL;
    case OP_LINEAR_T: return be->linear_t_backward_data_scaled != NULL;
    default: return 0;
    }
}

int op_is_gemm_family(op_kind op) {
    return op == OP_CONV2D || op == OP_LINEAR || op == OP_LINEAR_T || op == OP_BMM;
}
