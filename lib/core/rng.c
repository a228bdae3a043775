/* rng.c — Philox4x32-10 (Salmon et al., SC'11) and the draws built on it. */
#include "mpx/rng.h"

#include <math.h>

void mpx_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint32_t mpx_rand_u32(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint32_t w[4];
    mpx_philox(seed, stream, counter >> 2, w);
    return w[counter & 3];
}

float mpx_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    return (float)(mpx_rand_u32(seed, stream, counter) >> 8) * (1.0f / 16777216.0f);
}

float mpx_rand_normal(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint32_t w[4];
    mpx_philox(seed, stream, counter, w);
    double u1 = ((double)(w[0] >> 8) + 0.5) / 16777216.0; /* (0,1): log is finite */
    double u2 = (double)(w[1] >> 8) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t mpx_rng_u32(mpx_rng *r) { return mpx_rand_u32(r->seed, r->stream, r->counter++); }

float mpx_rng_uniform(mpx_rng *r) { return mpx_rand_uniform(r->seed, r->stream, r->counter++); }

uint32_t mpx_rng_below(mpx_rng *r, uint32_t n) {
    if (n <= 1) return 0;
    uint32_t limit = UINT32_MAX - UINT32_MAX % n;
    for (;;) {
        uint32_t v = mpx_rng_u32(r);
        if (v < limit) return v % n;
    }
}
