/* rng.h — counter-based random streams (Philox4x32-10).
 *
 * A random value is a pure function of (seed, stream, counter): no hidden state, so any
 * element can be drawn independently by any thread (or CUDA thread) and runs are
 * reproducible whatever the thread count. Streams separate purposes so that, for example,
 * changing the augmentation does not change the initialisation.
 */
#ifndef MPX_RNG_H
#define MPX_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MPX_RNG_INIT = 1,      /* parameter initialisation */
    MPX_RNG_DATA_ORDER,    /* shuffling */
    MPX_RNG_AUGMENT,       /* crops, flips */
    MPX_RNG_DROPOUT,
    MPX_RNG_MASKING,       /* MLM masking */
    MPX_RNG_ROUNDING,      /* stochastic rounding */
    MPX_RNG_TEST,          /* tests and generators */
    MPX_RNG_BOOTSTRAP      /* resamples of the evaluation set (mpx eval --bootstrap) */
} mpx_rng_stream;

/* Four 32-bit random words for (seed, stream, counter). */
void mpx_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]);

/* One 32-bit word: word (counter & 3) of block counter >> 2. */
uint32_t mpx_rand_u32(uint64_t seed, uint64_t stream, uint64_t counter);
/* Uniform in [0, 1) with 24 random bits. */
float mpx_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
/* Standard normal (Box-Muller over two draws from block `counter`). */
float mpx_rand_normal(uint64_t seed, uint64_t stream, uint64_t counter);

/* A sequential generator over one stream, for loops that draw many values in order. */
typedef struct {
    uint64_t seed, stream, counter;
} mpx_rng;

static inline mpx_rng mpx_rng_make(uint64_t seed, uint64_t stream, uint64_t start) {
    mpx_rng r = {seed, stream, start};
    return r;
}
uint32_t mpx_rng_u32(mpx_rng *r);
float mpx_rng_uniform(mpx_rng *r);
/* Uniform integer in [0, n), unbiased (rejection). */
uint32_t mpx_rng_below(mpx_rng *r, uint32_t n);

#ifdef __cplusplus
}
#endif

#endif
