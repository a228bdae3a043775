/* fp8.h — the scaling rules of FP8 training: per-tensor scales (Transformer Engine's current and
 * delayed scaling) and OCP microscaling blocks (MXFP8), as exact host functions. The executor
 * (lib/graph/graph_fp8.c) quantizes the GEMM family's operands with them in precision.mode = fp8.
 *
 * Per-tensor: a tensor x is cast as cast(x * s) into E4M3 or E5M2 and read back as that value
 * / s. s = max / amax / 2^margin (max the format's largest value, 448 or 57344), optionally
 * rounded down to a power of two; an amax of 0 or a non-finite amax keeps the previous scale
 * (Transformer Engine's rule: a tensor of zeros gives no information, a non-finite one is a step
 * the scaler skips). Current scaling takes amax from the tensor itself; delayed scaling from a
 * history of the amaxes of the last `len` steps (the maximum, or the most recent), the scale for
 * this step computed before its cast, and this step's amax pushed after.
 *
 * MX (OCP Microscaling v1.0): blocks of 32 consecutive elements share a power-of-two scale 2^e
 * stored as E8M0 (e in [-127, 127]); each element is cast(x / 2^e) to E4M3 or E5M2 (RNE, E4M3
 * saturating) and read back as that value times 2^e (exact). The scale rule: the spec's floor
 * rule e = floor(log2 amax) - emax (emax 8 for E4M3, 15 for E5M2: the largest element's
 * exponent lands on the format's largest binade, values in (448, 512) saturate), or the
 * round-up rule of cuBLAS and Transformer Engine e = ceil(log2(amax / max)) (nothing saturates).
 * An all-zero block gets e = -127; a block holding NaN or Inf gets the NaN scale and reads back
 * as NaN.
 */
#ifndef MPX_FP8_H
#define MPX_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Saturating casts (Transformer Engine casts with __NV_SATFINITE; the MX spec clamps elements to
 * the format's largest value): the finite x[i] whose cast into fmt would overflow to Inf are
 * clamped in place to +-max; how many. E4M3's cast saturates by itself (numerics.h): none. */
size_t mpx_fp8_saturate(mpx_dtype fmt, float *x, size_t n);

/* The per-tensor scale for `amax` (see above); prev when amax is 0 or not finite. */
double mpx_fp8_scale(mpx_dtype fmt, float amax, int margin, int pow2, double prev);

/* Delayed scaling's amax history (Transformer Engine: amax_history_len, amax_compute_algo). */
enum { MPX_FP8_HISTORY_MAX = 1024 };
typedef struct {
    float amax[MPX_FP8_HISTORY_MAX];
    int len, filled, pos;
    int most_recent; /* 1: the newest amax; 0: the largest in the history */
    double scale;    /* the scale the next cast uses (1 before any amax) */
} mpx_fp8_history;
void mpx_fp8_history_init(mpx_fp8_history *h, int len, int most_recent);
/* Record a step's amax and compute the next scale from the history. */
void mpx_fp8_history_push(mpx_fp8_history *h, mpx_dtype fmt, float amax, int margin, int pow2);

/* dst[i] = cast(src[i] * scale) / scale: the FP8 value of x under a per-tensor scale, read back
 * in FP32 (saturating casts: mpx_fp8_saturate; RNE). Counted into stats (against fmt, on the
 * scaled values, clamped ones as overflow) when it is not NULL. dst may be src. */
void mpx_fp8_quantize(mpx_dtype fmt, float scale, const float *src, float *dst, size_t n,
                      mpx_cast_stats *stats);

typedef enum { MPX_MX_FLOOR = 0, MPX_MX_CEIL } mpx_mx_rule;
enum { MPX_MX_BLOCK = 32, MPX_MX_NAN_EXP = 128 };

/* The shared exponent of a block whose largest |x| is amax (MPX_MX_NAN_EXP for NaN/Inf). */
int mpx_mx_exponent(mpx_dtype fmt, mpx_mx_rule rule, float amax);
/* The same for an element format whose largest value is max (E2M1's 6: fp4.h). */
int mpx_mx_exponent_of(double max, mpx_mx_rule rule, float amax);

/* The scales of a quantized tensor: how many blocks, the smallest and largest exponent, how many
 * all-zero and non-finite blocks. */
typedef struct {
    uint64_t blocks, zero_blocks, nan_blocks;
    int min_exp, max_exp; /* over the blocks with a finite nonzero amax */
} mpx_mx_scales;

/* dst[i] = the MX value of src[i], for rows of `row` elements (blocks run along a row and do not
 * cross it; the last block of a row may be shorter); dst may be src. When stats is not NULL the
 * element casts (x / 2^e into fmt) are counted into it (numerics.h), and sc (when not NULL)
 * gets the scales. */
void mpx_mx_quantize(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst, size_t n,
                     size_t row, mpx_cast_stats *stats, mpx_mx_scales *sc);
/* The same with blocks down the columns of `batches` row-major [rows, cols] matrices (n = batches
 * x rows x cols): a block is 32 consecutive rows of one column (the last of a column may be
 * shorter). Values, counts and scales are those mpx_mx_quantize gives the transposed matrices
 * (rows of `rows`), without a transpose: a GEMM operand blocked along its leading dimension. */
void mpx_mx_quantize_cols(mpx_dtype fmt, mpx_mx_rule rule, const float *src, float *dst,
                          size_t batches, size_t rows, size_t cols, mpx_cast_stats *stats,
                          mpx_mx_scales *sc);

#ifdef __cplusplus
}
#endif

#endif
