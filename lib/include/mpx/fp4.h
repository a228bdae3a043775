/* fp4.h — FP4 E2M1 and the two block-scaled formats built on it, as exact host functions.
 *
 * E2M1 (OCP Microscaling v1.0): 1 sign, 2 exponent bits (bias 1), 1 mantissa bit; the values
 * 0, 0.5 (the one subnormal), 1, 1.5, 2, 3, 4, 6 and their negatives; no Inf and no NaN. A cast
 * rounds to nearest even and saturates to +-6 (the MX spec's conversion; Inf too); NaN has no
 * code (the scalar cast gives +0; the block quantizers below read a NaN block back as NaN).
 *
 * MXFP4 (OCP MX v1.0): blocks of 32 consecutive elements along a row share an E8M0 scale 2^e,
 * e = floor(log2 amax) - 2 (the spec's rule: E2M1's emax is 2) or ceil(log2(amax / 6)) (the
 * round-up rule); as MXFP8 in fp8.h otherwise (zero blocks e = -127, NaN/Inf blocks NaN).
 *
 * NVFP4 (NVIDIA Blackwell, Transformer Engine's NVFP4 recipe): blocks of 16 elements share an
 * E4M3 scale s_b, and the tensor an FP32 scale s_t = amax(tensor) / (6 * 448) (1 for a zero
 * tensor): s_b = E4M3(amax(block) / (6 s_t)) (nearest even, saturating at 448), elements
 * E2M1(x / (s_b s_t)), read back as q s_b s_t. A block whose scale rounds to 0 reads back as 0.
 *
 * Counts (numerics.h's mpx_cast_stats) refer to the element cast of the scaled values: flushed
 * (nonzero -> 0), below_min (below 0.5, the smallest E2M1 value), subnormal (cast to +-0.5),
 * overflow (saturated), histogram of the scaled values (the unscaled ones in an NVFP4 block whose
 * scale rounded to 0, all of them flushed).
 */
#ifndef MPX_FP4_H
#define MPX_FP4_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/fp8.h"
#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The E2M1 code (bit 3 the sign) of x; *saturated (may be NULL) set when |x| rounded past 6. */
uint8_t mpx_f32_to_e2m1(float x, int *saturated);
float mpx_e2m1_to_f32(uint8_t code);

enum { MPX_NVFP4_BLOCK = 16 };

/* dst[i] = the MXFP4 value of src[i] for rows of `row` elements (blocks do not cross a row);
 * dst may be src; counted into stats and the scales into sc when not NULL. */
void mpx_mxfp4_quantize(mpx_mx_rule rule, const float *src, float *dst, size_t n, size_t row,
                        mpx_cast_stats *stats, mpx_mx_scales *sc);

/* The block scales of an NVFP4 quantization: the tensor scale, and the smallest and largest
 * block scale over blocks with a nonzero amax, how many blocks there were and how many of those
 * had a scale that rounded to 0. */
typedef struct {
    float tensor_scale;
    float min_block, max_block;
    uint64_t blocks, zero_scale_blocks;
} mpx_nvfp4_scales;

/* dst[i] = the NVFP4 value of src[i] (rows as above); NaN or Inf anywhere makes the tensor
 * scale NaN and every value NaN. */
void mpx_nvfp4_quantize(const float *src, float *dst, size_t n, size_t row, mpx_cast_stats *stats,
                        mpx_nvfp4_scales *sc);

#ifdef __cplusplus
}
#endif

#endif
