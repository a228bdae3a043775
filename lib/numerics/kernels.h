/* kernels.h — inner loops behind mpx_encode / mpx_decode / mpx_cast (private to lib/numerics).
 *
 * Each loop exists as portable C (kernels_c.c) and, where it pays, as AVX-512 (kernels_avx512.c),
 * AVX2 (kernels_avx2.c) and F16C (kernels_f16c.c) versions compiled with target attributes, so
 * the library builds without -march flags and picks the best version at run time from mpx_cpu().
 * Every version produces the same bits and the same counts as the portable one
 * (tests/unit/test_f16.c, test_bf16.c, test_cast_stats.c, test_cast_stochastic.c compare them).
 * Loops here are single-threaded over one contiguous range; the callers split work across
 * threads.
 */
#ifndef MPX_NUMERICS_KERNELS_H
#define MPX_NUMERICS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/numerics.h"

/* The tiers: portable C; F16C + AVX2 (kernels_f16c.c for FP16, kernels_avx2.c for BF16 and
 * stochastic rounding); AVX-512F/BW + F16C. */
typedef enum { MPX_IMPL_C = 0, MPX_IMPL_F16C, MPX_IMPL_AVX512 } mpx_impl;

/* The implementation to use now: the best the CPU has, or C when forced portable. */
mpx_impl mpx_impl_current(void);
/* Whether the AVX2 loops (merge sums, magnitudes, moments) may run now: the CPU has AVX2 and
 * the portable path is not forced. */
int mpx_impl_avx2(void);

/* dst[i] = code of (scale * src[i]) under RNE; n elements. */
typedef void (*mpx_encode16_fn)(const float *src, float scale, uint16_t *dst, size_t n);
/* dst[i] = value of code src[i]. */
typedef void (*mpx_decode16_fn)(const uint16_t *src, float *dst, size_t n);

/* The RNE loops for F16 or BF16 under `impl`. */
mpx_encode16_fn mpx_k_encoder16(mpx_dtype t, mpx_impl impl);
mpx_decode16_fn mpx_k_decoder16(mpx_dtype t, mpx_impl impl);

void mpx_k_encode_f16_c(const float *src, float scale, uint16_t *dst, size_t n);
void mpx_k_decode_f16_c(const uint16_t *src, float *dst, size_t n);
void mpx_k_encode_bf16_c(const float *src, float scale, uint16_t *dst, size_t n);
void mpx_k_decode_bf16_c(const uint16_t *src, float *dst, size_t n);

void mpx_k_encode_f16_f16c(const float *src, float scale, uint16_t *dst, size_t n);
void mpx_k_decode_f16_f16c(const uint16_t *src, float *dst, size_t n);

void mpx_k_encode_bf16_avx2(const float *src, float scale, uint16_t *dst, size_t n);
void mpx_k_decode_bf16_avx2(const uint16_t *src, float *dst, size_t n);

void mpx_k_encode_f16_avx512(const float *src, float scale, uint16_t *dst, size_t n);
void mpx_k_decode_f16_avx512(const uint16_t *src, float *dst, size_t n);
void mpx_k_encode_bf16_avx512(const float *src, float scale, uint16_t *dst, size_t n);
void mpx_k_decode_bf16_avx512(const uint16_t *src, float *dst, size_t n);

/* Stochastic rounding of scale * src[i] with random word rnd[i] (F16 or BF16 codes). */
void mpx_k_sr16_c(mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd, uint16_t *dst,
                  size_t n);
void mpx_k_sr16_avx512(mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd,
                       uint16_t *dst, size_t n);
void mpx_k_sr16_avx2(mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd,
                     uint16_t *dst, size_t n);
/* The best of them under `impl` (the F16C tier has AVX2). */
void mpx_k_sr16(mpx_impl impl, mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd,
                uint16_t *dst, size_t n);

/* Histogram accumulator of one thread's counting loops: MPX_K_SUBHIST interleaved 32-bit
 * sub-histograms (consecutive elements go to different ones, so repeated increments of one bin
 * do not wait on each other). Zero it before use; mpx_k_hist_flush adds it into an
 * mpx_cast_stats and zeroes it. The counting loops flush by themselves before a 32-bit counter
 * could wrap. */
enum { MPX_K_SUBHIST = 8 };
typedef struct {
    uint32_t sub[MPX_K_SUBHIST][MPX_HIST_BINS];
    uint64_t pending; /* elements added since the last flush */
} mpx_k_hist;
void mpx_k_hist_flush(mpx_k_hist *h, mpx_cast_stats *st);

/* Add the counts of x = scale * src[i] against F16 or BF16 to *st (histogram into *h), given
 * codes[i], the code the cast into that format produced for x (docs/design.md §5). */
void mpx_k_count16_c(mpx_dtype fmt, const float *src, float scale, const uint16_t *codes, size_t n,
                     mpx_cast_stats *st, mpx_k_hist *h);
void mpx_k_count16_avx512(mpx_dtype fmt, const float *src, float scale, const uint16_t *codes,
                          size_t n, mpx_cast_stats *st, mpx_k_hist *h);

/* Random words for stochastic rounding: out[j] = mpx_rand_u32(seed, stream, counter + j). */
void mpx_k_rand_c(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out, size_t n);
void mpx_k_rand_avx512(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out, size_t n);
void mpx_k_rand_avx2(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out, size_t n);
/* The same from a vector Philox f that writes the 4 words of each of `blocks` consecutive
 * blocks from `block` on: f for the aligned middle, mpx_k_rand_c for the head and tail. */
typedef void (*mpx_philox_blocks_fn)(uint64_t seed, uint64_t stream, uint64_t block,
                                     uint32_t *out);
void mpx_k_rand_blocks(mpx_philox_blocks_fn f, size_t blocks, uint64_t seed, uint64_t stream,
                       uint64_t counter, uint32_t *out, size_t n);
/* The best of them under `impl`. */
void mpx_k_rand(mpx_impl impl, uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out,
                size_t n);

/* Magnitude maxima on the bits with the sign cleared: unsigned order there is |value| order and
 * NaN and Inf sort above every finite value, so an integer max is exact and needs no NaN case.
 * absmax_bits returns max(m, bits of |x[i]|); accumulate does acc[i] += scale * x[i] (one
 * multiply, one add); accumulate_absmax does the same sum and raises *ma / *mx to the bits of max |acc[i]|
 * before the sum / max |x[i]|. The AVX2 versions are used when mpx_cpu() reports avx2 and the
 * portable path is not forced. */
void mpx_k_accumulate_c(float *acc, const float *x, size_t n, float scale);
void mpx_k_accumulate_avx2(float *acc, const float *x, size_t n, float scale);
uint32_t mpx_k_absmax_bits_c(const float *x, size_t n, uint32_t m);
uint32_t mpx_k_absmax_bits_avx2(const float *x, size_t n, uint32_t m);
void mpx_k_accumulate_absmax_c(float *acc, const float *x, size_t n, float scale, uint32_t *ma,
                               uint32_t *mx);
void mpx_k_accumulate_absmax_avx2(float *acc, const float *x, size_t n, float scale, uint32_t *ma,
                                  uint32_t *mx);

/* The two passes of a block's moments over MPX_K_LANES interleaved lanes (element i goes to
 * lane i % MPX_K_LANES; the caller initialises the lane arrays and combines them):
 * lane_sums adds x into s[] in double and lowers mn[] / raises mx[] (NaN ignored: v < mn ? v :
 * mn); lane_sqdev adds (x - mean)^2 into q[] (a multiply and an add, no fused multiply-add). */
enum { MPX_K_LANES = 8 };
void mpx_k_lane_sums_c(const float *x, size_t n, double *s, float *mn, float *mx);
void mpx_k_lane_sums_avx2(const float *x, size_t n, double *s, float *mn, float *mx);
void mpx_k_lane_sqdev_c(const float *x, size_t n, double mean, double *q);
void mpx_k_lane_sqdev_avx2(const float *x, size_t n, double mean, double *q);

#endif
