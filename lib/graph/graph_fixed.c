/* graph_fixed.c — fixed16 mode's GEMM operands (precision.h; the format in fixed.h).
 *
 * Every operand a convolution, linear layer or batched matmul reads (its input and weight, and
 * in the backward passes its output gradient) is quantized to Q(16, f) as it is read, into FP32
 * scratch that the FP32 operator then multiplies: Gupta et al.'s fixed-point GEMM inputs with
 * high-precision accumulation. Stochastic rounding draws from a stream named by the step, the
 * node and the operand, so an input read again by the backward pass rounds the same way as in
 * the forward pass. Statistics steps count each cast into the layer's row (stats.h: operand).
 * The backend quantizes (backend.h: fixed_quantize), so the mode runs on every backend.
 */
#include "graph_ops.h"
#include "mpx/fixed.h"

mpx_status fixed_operand(mpx_graph *g, gnode *n, int slot, mpx_tensor *v) {
    if (!v->data) return MPX_OK;
    float *f;
    mpx_layer_stats *ls;
    mpx_cast_stats *st;
    MPX_TRY(operand_f32(g, n, slot, v, "a fixed-point operand", &f, &ls, &st));
    const mpx_fixed_spec s = {g->prec.fixed_frac, g->prec.rounding, g->prec.seed,
                              round_stream(g->step, 4 * (int)(n - g->nodes) + slot, RS_OPERAND),
                              0};
    g->be->fixed_quantize(g->be, &s, f, f, (size_t)mpx_tensor_numel(v), st);
    if (ls) {
        ls->operand_scale[slot] = 1.0;
        note_scale_range(&ls->operand_scale_lo[slot], &ls->operand_scale_hi[slot], 1.0, 1.0);
    }
    v->data = f;
    v->dtype = MPX_F32;
    return MPX_OK;
}
