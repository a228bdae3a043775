/* graph_operand.c — a GEMM-family operand as the precision reads it (graph_ops.h: gemm_operand):
 * rounded to TF32 in tf32 mode, handed to the quantizing modes (graph_fp8.c, graph_fixed.c),
 * else unchanged. One dispatcher above the modes, so that they and the helper they share
 * (operand_f32, graph_ops_util.c) call only downward. */
#include "graph_ops.h"

/* What tensor cores read of FP32 data, done here with the one cast so that every backend
 * multiplies the same values (a device then runs its TF32 units on them exactly). */
mpx_status gemm_operand(mpx_graph *g, gnode *n, int slot, gemm_k k, mpx_tensor *v) {
    if (g->prec.gemm_round == MPX_F8_E4M3) return fp8_operand(g, n, slot, k, v);
    if (g->prec.mode == MPX_MODE_FIXED16) return fixed_operand(g, n, slot, v);
    (void)n, (void)slot, (void)k;
    if (g->prec.gemm_round != MPX_TF32 || !v->data || v->dtype != MPX_F32) return MPX_OK;
    const int64_t count = mpx_tensor_numel(v);
    float *f = scratch_take(g, count);
    if (!f) return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small for a TF32 operand");
    mpx_cast_spec c = mpx_cast_plain(MPX_TF32);
    g->be->cast(g->be, &c, v->data, f, (size_t)count);
    v->data = f;
    return MPX_OK;
}
