/* stats.h — what one statistics step records for one observed layer (docs/design.md §5, §6).
 *
 * Observed layers are every node with parameters plus the loss, in forward order. On a
 * statistics step the executor fills one mpx_layer_stats per observed layer:
 *   act   — the gradient of the layer's output, what enters its backward (for the loss: the
 *           gradient it emits into the network), counted against the storage format from its
 *           values before rounding. Where that gradient comes out of ReLU / add / max-pool
 *           backward (which only move values), the rounding happened where the op behind them
 *           computed it; the executor then replays those ops on FP32 shadows on statistics
 *           steps, so the counts still describe exactly these values (ReLU's zeros included);
 *   wgrad — the counted casts of all the layer's parameter gradients, pooled;
 *   scale — S_prev, the cumulative scale carried by the gradient entering the layer;
 *   layer_scale — the layer's own factor s (1 where the method has none);
 *   g_* — moments of that gradient as stored (still multiplied by S_prev);
 *   w_* — moments of the layer's first parameter (the weight, or gamma);
 *   update_* — what the optimizer's update of that step did to the layer's parameters as they
 *           are stored (the FP32 masters, or without master weights the 16-bit weights), filled
 *           by the optimizer after the step (optim.h: mpx_optimizer_watched): of the elements
 *           with a nonzero update d (w <- w - d), the fraction that kept their stored value
 *           (lost), and the mean of |stored change + d| / |d| over them (0: every update
 *           landed exactly);
 *   operand[k], operand_scale[k] — precision.mode = fp8 (fp8.h) or fixed16 (fixed.h): what
 *           the cast of the layer's GEMM operands did (k = MPX_OPERAND_X, MPX_OPERAND_W: its
 *           input and weight, E4M3 or Q(16, f); MPX_OPERAND_DY: its output gradient, E5M2 or
 *           Q(16, f)), counted on their values times the scale, as the backward pass cast them,
 *           and the per-tensor scale used (MXFP8: 2^-e for e the midpoint of the range of its
 *           block exponents; fixed16: 1); zeros in other modes; operand_scale_lo[k] and
 *           operand_scale_hi[k] the smallest and largest scale any block or tensor of that
 *           operand was multiplied by in the step's casts (per-tensor recipes: the scale;
 *           log2(hi / lo) is the spread of MXFP8's block scales in binades);
 *   whatif[k], whatif_scale[k] — log.whatif: the same activation gradient (its values before
 *           rounding, as act counts them) counted as recipe k would cast it, without changing
 *           training (MPX_WHATIF_*: FP16, BF16, E5M2 unscaled, E5M2 and E4M3 with a current
 *           per-tensor scale, MXFP8 E5M2 blocks, MXFP4 and NVFP4 E2M1 blocks: fp4.h), and the
 *           scale it would use (1 unscaled; for MXFP8 and MXFP4 2^-e for the midpoint e of its
 *           block exponents; NVFP4 1 / its tensor scale), and the smallest and largest scale
 *           of its blocks (whatif_scale_lo, _hi: MXFP8 and MXFP4 2^-e, NVFP4 1 / (block scale x
 *           tensor scale), Inf where a block scale rounded to 0; the scale for the others);
 *           zeros for recipes not asked.
 *           The histogram of a scaled recipe is act's shifted by log2 of its scale.
 */
#ifndef MPX_STATS_H
#define MPX_STATS_H

#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    mpx_cast_stats act, wgrad;
    double scale, layer_scale;
    float g_mean, g_std, g_min, g_max;
    float w_mean, w_std, w_min, w_max;
    uint64_t update_nonzero;          /* elements with a nonzero update */
    double update_lost, update_error; /* fraction of those lost; mean relative error */
    mpx_cast_stats operand[3]; /* MPX_OPERAND_X, MPX_OPERAND_W, MPX_OPERAND_DY */
    double operand_scale[3], operand_scale_lo[3], operand_scale_hi[3];
    mpx_cast_stats whatif[8]; /* MPX_WHATIF_* */
    double whatif_scale[8], whatif_scale_lo[8], whatif_scale_hi[8];
} mpx_layer_stats;

enum { MPX_OPERAND_X = 0, MPX_OPERAND_W, MPX_OPERAND_DY };
enum {
    MPX_WHATIF_F16 = 0,
    MPX_WHATIF_BF16,
    MPX_WHATIF_E5M2,
    MPX_WHATIF_E5M2_CURRENT,
    MPX_WHATIF_E4M3_CURRENT,
    MPX_WHATIF_MXFP8_E5M2,
    MPX_WHATIF_MXFP4,
    MPX_WHATIF_NVFP4,
    MPX_WHATIF_N
};
/* The recipes' names in log.whatif and the run file: "fp16", "bf16", "e5m2", "e5m2_current",
 * "e4m3_current", "mxfp8_e5m2", "mxfp4", "nvfp4". */
extern const char *const mpx_whatif_names[MPX_WHATIF_N];

/* Underflow rate = flushed / nonzero (0 when there is nothing nonzero). */
static inline double mpx_underflow_rate(const mpx_cast_stats *s) {
    return s->nonzero ? (double)s->flushed / (double)s->nonzero : 0.0;
}

#ifdef __cplusplus
}
#endif

#endif
