/* fixed.h — 16-bit fixed point Q(16, f): the format of Gupta et al. 2015, "Deep learning with
 * limited numerical precision" (<IL, FL> = <16 - f, f>).
 *
 * A code is a two's-complement int16 q; its value is q * 2^-f, so the format holds the multiples
 * of 2^-f in [-2^(15-f), 2^(15-f) - 2^-f]. A cast computes x * 2^f (exact in FP32: a power of
 * two) and rounds it to an integer, to nearest even or stochastically with mpx_cast's rule (|x|
 * rounds up with probability equal to its distance from the lower neighbour, in units of 2^-f:
 * up iff r < floor(2^32 frac) for the 32-bit random word r), then saturates to the int16 range
 * as Gupta et al. do. No subnormals, no Inf, no NaN: +-Inf saturate, NaN casts to code 0.
 *
 * The counted quantize reads values back in FP32 for an FP32 operator, and keeps non-finite
 * values as they are (so that a diverging run still shows NaN and a scaler still skips); its
 * counts follow numerics.h's mpx_cast_stats: flushed (nonzero finite x whose code is 0),
 * below_min (0 < |x| < 2^-f), overflow (finite x that saturated), subnormal always 0.
 */
#ifndef MPX_FIXED_H
#define MPX_FIXED_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MPX_FIXED_FRAC_MAX = 24 }; /* fraction bits 0..24 */

/* The code of x; *saturated (may be NULL) set to 1 when finite x or +-Inf left the range. */
int16_t mpx_f32_to_q16(float x, int frac, int stochastic, uint32_t rnd, int *saturated);
float mpx_q16_to_f32(int16_t q, int frac);

/* One quantization of a tensor: element i's random word is drawn from (seed, MPX_RNG_ROUNDING ^
 * stream, offset + i), as mpx_cast draws them, so the result does not depend on threads. */
typedef struct {
    int frac;
    mpx_rounding rounding;
    uint64_t seed, stream, offset;
} mpx_fixed_spec;

/* dst[i] = the Q(16, f) value of src[i], read back in FP32 (non-finite values kept); counted into
 * stats (added) when it is not NULL. dst may be src. */
void mpx_fixed_quantize(const mpx_fixed_spec *s, const float *src, float *dst, size_t n,
                        mpx_cast_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
