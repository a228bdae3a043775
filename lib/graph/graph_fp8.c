/* graph_fp8.c — fp8 mode's GEMM operands (precision.h: mpx_fp8_cfg; the rules in fp8.h).
 *
 * Every operand a convolution, linear layer or batched matmul reads — its input and weight (E4M3)
 * in the forward pass and in the backward passes that read them again, its output gradient
 * (E5M2) in the backward passes — is quantized as it is read: cast into FP8 with the recipe's
 * scale by the one counted cast, decoded and divided by the scale into FP32 scratch, which the
 * FP32 operator then multiplies; casts saturate as Transformer Engine's do (products of FP8
 * values are exact in FP32; Transformer Engine
 * applies the inverse scales to the FP32 accumulator instead, a difference of one FP32 rounding
 * per element, none with power-of-two scales). MXFP8 blocks run along the reduction dimension
 * of the GEMM that reads the operand (the glue says which, graph_ops_gemm.c: gemm_k), as the
 * OCP spec and Transformer Engine's rowwise and columnwise copies have them: an operand two
 * GEMMs reduce differently (the output gradient, and with the weight-gradient GEMM the input)
 * is quantized once for each. Statistics steps count
 * each cast into the layer's row (stats.h: fp8, operand_scale); delayed scaling notes each
 * operand's amax during the backward pass and pushes it into the node's history when the pass
 * ends. The backend quantizes (backend.h: fp8_quantize, mx_quantize), so the mode runs on every
 * backend.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_ops.h"
#include "mpx/comm.h"
#include "mpx/fp8.h"

struct node_fp8 {
    mpx_fp8_history hist[3];
    float amax[3]; /* this pass's largest amax per operand */
    int seen[3];
};

mpx_status fp8_init(mpx_graph *g) {
    if (mpx_precision_quantizes_operands(&g->prec) &&
        !(g->be->fp8_quantize && g->be->mx_quantize && g->be->mx_quantize_cols &&
          g->be->fixed_quantize))
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "precision.mode = %s: the %s backend has no "
                        "operand quantization",
                        mpx_precision_mode_name(g->prec.mode), g->be->name);
    if (g->prec.gemm_round != MPX_F8_E4M3) return MPX_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        gnode *n = &g->nodes[i];
        if (!op_is_gemm_family(n->op)) continue;
        n->fp8 = calloc(1, sizeof *n->fp8);
        if (!n->fp8) return mpx_fail(MPX_ERR_NOMEM, "out of memory for FP8 scaling state");
        for (int k = 0; k < 3; k++)
            mpx_fp8_history_init(&n->fp8->hist[k], g->prec.fp8.history, g->prec.fp8.most_recent);
    }
    return MPX_OK;
}

void fp8_free(mpx_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].fp8);
        g->nodes[i].fp8 = NULL;
    }
}

/* The end of a backward pass: delayed scaling's histories take this pass's amaxes — the largest
 * over the ranks of a data-parallel run, so that every rank keeps the same scales (Transformer
 * Engine's amax reduction over the data-parallel group). */
mpx_status fp8_pass_end(mpx_graph *g) {
    const mpx_fp8_cfg *c = &g->prec.fp8;
    if (g->prec.gemm_round != MPX_F8_E4M3 || c->recipe != MPX_FP8_DELAYED) return MPX_OK;
    float *a = malloc((size_t)(3 * g->n_nodes + 1) * sizeof *a);
    if (!a) return mpx_fail(MPX_ERR_NOMEM, "out of memory for the FP8 amaxes");
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < 3; k++)
            a[3 * i + k] = g->nodes[i].fp8 && g->nodes[i].fp8->seen[k] ? g->nodes[i].fp8->amax[k] : -1;
    mpx_status st = mpx_comm_allreduce(a, (size_t)(3 * g->n_nodes), MPX_COMM_F32, MPX_COMM_MAX);
    for (int i = 0; st == MPX_OK && i < g->n_nodes; i++) {
        struct node_fp8 *s = g->nodes[i].fp8;
        if (!s) continue;
        for (int k = 0; k < 3; k++) {
            if (a[3 * i + k] >= 0 || isnan(a[3 * i + k]))
                mpx_fp8_history_push(&s->hist[k], k == MPX_OPERAND_DY ? MPX_F8_E5M2 : MPX_F8_E4M3,
                                     a[3 * i + k], c->margin, c->pow2);
            s->seen[k] = 0;
            s->amax[k] = 0;
        }
    }
    free(a);
    return st;
}

/* The per-tensor scale of operand `slot` of n for this cast. */
static float tensor_scale(mpx_graph *g, gnode *n, int slot, mpx_dtype fmt, float amax) {
    const mpx_fp8_cfg *c = &g->prec.fp8;
    switch (c->recipe) {
    case MPX_FP8_DELAYED: return (float)n->fp8->hist[slot].scale;
    case MPX_FP8_ALS: /* output gradients: the layer's adaptive loss scale is their scale */
        if (slot == MPX_OPERAND_DY) return 1.0f;
        return (float)mpx_fp8_scale(fmt, amax, c->margin, c->pow2, 1.0);
    default: return (float)mpx_fp8_scale(fmt, amax, c->margin, c->pow2, 1.0);
    }
}

/* MXFP8 blocks of f (the operand v's values, FP32 scratch) along k, in place: along the last
 * dimension, or f is [B, R, C] (B = 1 for GEMM_K_ROWS) blocked down its columns. */
static mpx_status mx_blocks(mpx_graph *g, mpx_dtype fmt, gemm_k k, const mpx_tensor *v, float *f,
                            mpx_cast_stats *st, mpx_mx_scales *sc) {
    const mpx_backend *be = g->be;
    const mpx_mx_rule rule = g->prec.fp8.mx_ceil ? MPX_MX_CEIL : MPX_MX_FLOOR;
    const int64_t count = mpx_tensor_numel(v), c = v->shape[v->ndim - 1];
    if (k == GEMM_K_LAST || count == 0) {
        be->mx_quantize(be, fmt, rule, f, f, (size_t)count, (size_t)c, st, sc);
        return MPX_OK;
    }
    int64_t b = 1;
    if (k == GEMM_K_BATCH_ROWS)
        for (int d = 0; d < v->ndim - 2; d++) b *= v->shape[d];
    const int64_t r = count / (b * c);
    be->mx_quantize_cols(be, fmt, rule, f, f, (size_t)b, (size_t)r, (size_t)c, st, sc);
    return MPX_OK;
}

mpx_status fp8_operand(mpx_graph *g, gnode *n, int slot, gemm_k k, mpx_tensor *v) {
    if (!v->data) return MPX_OK;
    if (!n->fp8) return mpx_fail(MPX_ERR_INTERNAL, "fp8 operand of '%s' without its state", n->name);
    const mpx_fp8_cfg *c = &g->prec.fp8;
    const mpx_dtype fmt = slot == MPX_OPERAND_DY ? MPX_F8_E5M2 : MPX_F8_E4M3;
    const int64_t count = mpx_tensor_numel(v);
    float *f;
    mpx_layer_stats *ls;
    mpx_cast_stats *st;
    MPX_TRY(operand_f32(g, n, slot, v, "an FP8 operand", &f, &ls, &st));
    if (c->recipe == MPX_FP8_MXFP8) {
        mpx_mx_scales sc;
        MPX_TRY(mx_blocks(g, fmt, k, v, f, st, ls ? &sc : NULL));
        if (ls) { /* the midpoint of the block exponents over the step's casts of this operand */
            note_scale_range(&ls->operand_scale_lo[slot], &ls->operand_scale_hi[slot],
                             ldexp(1.0, -sc.max_exp), ldexp(1.0, -sc.min_exp));
            ls->operand_scale[slot] = ldexp(1.0, (ilogb(ls->operand_scale_lo[slot]) +
                                                  ilogb(ls->operand_scale_hi[slot])) / 2);
        }
    } else {
        const float amax = g->be->absmax(g->be, f, (size_t)count);
        if (g->pass) { /* delayed scaling's history: the training passes' amaxes */
            struct node_fp8 *s = n->fp8;
            if (!s->seen[slot] || !(amax <= s->amax[slot])) s->amax[slot] = amax;
            s->seen[slot] = 1;
        }
        const float scale = tensor_scale(g, n, slot, fmt, amax);
        g->be->fp8_quantize(g->be, fmt, scale, f, f, (size_t)count, st);
        if (ls) {
            ls->operand_scale[slot] = scale;
            note_scale_range(&ls->operand_scale_lo[slot], &ls->operand_scale_hi[slot], scale, scale);
        }
    }
    v->data = f;
    v->dtype = MPX_F32;
    return MPX_OK;
}
