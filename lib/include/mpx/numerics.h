/* numerics.h — low-precision formats, rounding, and the cast with accounting.
 *
 * Exact IEEE conversions between FP32 and FP16 / BF16 / FP8 (round-to-nearest-even, NaN stays
 * NaN, overflow to Inf where the format has one), bulk encode/decode vectorised at run time
 * (F16C / AVX-512 when the CPU has them, portable C otherwise), stochastic rounding, and
 * mpx_cast: the ONE routine through which every FP32 -> storage cast of a gradient goes.
 * When asked, mpx_cast counts what the cast did to the tensor (docs/design.md §5).
 */
#ifndef MPX_NUMERICS_H
#define MPX_NUMERICS_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scalar conversions (exact, RNE) ----
 * NaN -> quiet NaN with the sign and the top payload bits kept (as F16C does), in both
 * directions. */
uint16_t mpx_f32_to_f16(float x);
float mpx_f16_to_f32(uint16_t h);
uint16_t mpx_f32_to_bf16(float x);
float mpx_bf16_to_f32(uint16_t h);
/* FP8 (OCP 8-bit floating point spec). E4M3 has no Inf: finite values beyond 448 saturate to
 * +-448 (the Transformer Engine convention), Inf maps to NaN. E5M2 overflows to Inf. */
uint8_t mpx_f32_to_e4m3(float x);
float mpx_e4m3_to_f32(uint8_t v);
uint8_t mpx_f32_to_e5m2(float x);
float mpx_e5m2_to_f32(uint8_t v);
/* x rounded to TF32 (10 mantissa bits, FP32's exponent range) under RNE, as an FP32 value. */
float mpx_round_tf32(float x);

/* Facts about a floating format. */
typedef struct {
    const char *name;
    int exp_bits, man_bits;
    double max;            /* largest finite */
    double min_normal;     /* smallest positive normal */
    double min_subnormal;  /* smallest positive subnormal */
    int has_inf;
} mpx_format_info;
/* NULL for non-floating dtypes. */
const mpx_format_info *mpx_format(mpx_dtype t);

/* Round-trip one FP32 value through a format under RNE (F32 returns x). */
float mpx_round_to(mpx_dtype t, float x);

/* ---- bulk conversions (RNE), vectorised where the CPU allows ---- */
/* src has n elements of `src_dtype` (any floating dtype, F32 = copy). */
void mpx_decode(mpx_dtype src_dtype, const void *src, float *dst, size_t n);
/* dst has n elements of `dst_dtype` (any floating dtype, F32 = copy). In-place allowed for F32. */
void mpx_encode(mpx_dtype dst_dtype, const float *src, void *dst, size_t n);
/* The same for F16 or BF16 (`t`) on the calling thread alone, with the same bits: for loops
 * that convert one block at a time inside their own parallel region (the 16-bit tiles of the
 * memory-bound operators, lib/ops/tile.h). */
void mpx_encode16_block(mpx_dtype t, const float *src, uint16_t *dst, size_t n);
void mpx_decode16_block(mpx_dtype t, const uint16_t *src, float *dst, size_t n);
/* Which implementation mpx_encode/mpx_decode use for F16 on this CPU: "avx512", "f16c", "c". */
const char *mpx_convert_impl(void);
/* Which loops they use for BF16: "avx512", "avx2" (the f16c tier: F16C has no BF16), "c". */
const char *mpx_convert_impl_bf16(void);
/* Which loops stochastic rounding (its Philox words and the F16/BF16 cast) uses on this CPU:
 * "avx512", "avx2" (the f16c tier), "c". */
const char *mpx_stochastic_impl(void);
/* Force the portable C path (tests compare it against the vector path). 0 restores auto. */
void mpx_convert_force_portable(int on);
/* Cap the implementation used by encode/decode/cast at "avx512", "f16c" or "c" (tests and
 * benchmarks compare them); NULL removes the cap. Returns 1 when this CPU has the one named, 0
 * when it does not (the best one below it is used) or the name is unknown (cap unchanged). */
int mpx_convert_limit(const char *impl);

typedef enum { MPX_ROUND_RNE = 0, MPX_ROUND_STOCHASTIC } mpx_rounding;

/* ---- statistics of a cast (docs/design.md §5) ---- */
enum {
    MPX_HIST_LOG2_LO = -64, /* bin 0 = [2^-64, 2^-63); smaller nonzero values clamp into it */
    MPX_HIST_LOG2_HI = 15,  /* bin 79 = [2^15, 2^16); larger finite values clamp into it */
    MPX_HIST_ZERO = 80,
    MPX_HIST_INF = 81,
    MPX_HIST_NAN = 82,
    MPX_HIST_BINS = 83
};

typedef struct {
    uint64_t count;     /* elements seen */
    uint64_t nonzero;   /* x != 0 (NaN counts as nonzero) */
    uint64_t flushed;   /* x != 0, finite, and cast(x) == 0 */
    uint64_t below_min; /* 0 < |x| < min subnormal of the format (the papers' definition) */
    uint64_t subnormal; /* cast(x) is subnormal (nonzero) */
    uint64_t overflow;  /* x finite, cast(x) infinite (or saturated to max for E4M3: the rounding
                         * went past 448, i.e. |x| > 464 under RNE) */
    uint64_t nonfinite; /* x is Inf or NaN */
    uint64_t hist[MPX_HIST_BINS]; /* log2|x| bins of the pre-cast value x, plus zero/inf/nan */
} mpx_cast_stats;

/* Bin index of one FP32 value. */
int mpx_hist_bin(float x);
void mpx_cast_stats_add(mpx_cast_stats *acc, const mpx_cast_stats *s);

/* ---- the cast with accounting ----
 * For i in [0, n): x = scale * src[i] (computed in FP32; exact when scale is a power of two),
 * dst[i] = cast(x) into `dst` format under `rounding`.
 * When stats != NULL the counts of x against `stats_format` are ADDED to *stats:
 * stats_format is normally dst; for an F32 destination it names the format the counts refer to
 * (F16 in an fp32 run: what FP16 storage would have done). Counting uses the cast actually
 * performed when dst == stats_format, else the RNE cast into stats_format.
 * Stochastic rounding draws element i's random bits from (seed, MPX_RNG_ROUNDING ^ stream, offset + i):
 * results do not depend on the thread count. src and dst may alias only when dst is F32.
 * Stochastic rounding rounds |x| up with probability (|x| - lo) / (hi - lo) between its
 * neighbours lo <= |x| < hi (exactly: up iff r < floor(2^32 (|x| - lo) / (hi - lo)) for the
 * 32-bit random word r), so past the largest finite value it can reach Inf (saturate for E4M3).
 * dst and stats_format must be floating dtypes (a zeroed spec counts against F32 itself); for
 * any other dtype mpx_cast writes nothing. */
typedef struct {
    mpx_dtype dst;
    mpx_rounding rounding;
    float scale;
    uint64_t seed, stream, offset;
    mpx_dtype stats_format;
    mpx_cast_stats *stats;
} mpx_cast_spec;

/* A spec for a plain RNE cast into `dst` with scale 1 and no counting. */
mpx_cast_spec mpx_cast_plain(mpx_dtype dst);
void mpx_cast(const mpx_cast_spec *spec, const float *src, void *dst, size_t n);

/* ---- reductions used by adaptive loss scaling and the run log ---- */
typedef struct {
    uint64_t n;
    double mean, std;   /* over all elements, zeros included; population std */
    float min, max;     /* signed extremes (NaN ignored) */
    float absmax;
    int all_finite;
} mpx_moments;
/* Deterministic for a given n and thread count: fixed blocks, double accumulation.
 * (The blocks do not depend on the thread count, so neither does the result.) When every
 * element is NaN, min, max and absmax are NaN; for n == 0 everything is 0 and all_finite is 1. */
void mpx_moments_f32(const float *x, size_t n, mpx_moments *out);

/* max |x|, exact and thread-count independent; Inf when any element is Inf or NaN; 0 for n = 0.
 * One cheap pass (integer max on the bits): what a branch merge needs every step. */
float mpx_absmax_f32(const float *x, size_t n);

/* acc[i] += scale * x[i]: one multiply and one add per element on every CPU and thread count. */
void mpx_accumulate_f32(float *acc, const float *x, size_t n, float scale);

/* A branch merge's one pass: acc[i] += scale * x[i] (one multiply and one add: the bits of a
 * plain accumulation) while measuring max |acc| before the sum and max |x|, with
 * mpx_absmax_f32's semantics, into *acc_absmax and *x_absmax (either may be NULL). */
void mpx_accumulate_absmax_f32(float *acc, const float *x, size_t n, float scale, float *acc_absmax,
                               float *x_absmax);

/* The q-quantile (0..1) of |scale * x| over the nonzero elements, rounded up to a power of two;
 * 0 when none, Inf when it is Inf. The quantile is the element of rank ceil(q m) (1-based, m the
 * nonzero count; q = 0 gives the minimum); NaN elements are ignored. Why rounded: the
 * adaptive-quantile scaler only uses 2^floor(log2(2^-24 / quantile)), which this value gives
 * exactly (2^-24 / 2^ceil(log2 v) has the same floor power of two as 2^-24 / v), and counting
 * per binade needs one pass and no copy. The product scale * x is rounded to FP32 as a cast
 * with that scale would round it. */
float mpx_abs_quantile_ceil_pow2(const float *x, size_t n, double q, float scale);

#ifdef __cplusplus
}
#endif

#endif
