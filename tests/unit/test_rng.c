/* test_rng.c — the counter-based generator: Philox4x32-10 known-answer vectors (Salmon et al.,
 * Random123), and the properties the engine relies on: draws are a pure function of
 * (seed, stream, counter), streams are independent, uniforms lie in [0, 1), normals have the
 * right moments, bounded draws are unbiased. */
#include <math.h>
#include <string.h>

#include "mpx/rng.h"
#include "testutil.h"

/* Our layout: counter = (c1 << 32 | c0), stream = (c3 << 32 | c2), seed = (k1 << 32 | k0). */
static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                const uint32_t expect[4]) {
    uint32_t out[4];
    mpx_philox(((uint64_t)k1 << 32) | k0, ((uint64_t)c3 << 32) | c2, ((uint64_t)c1 << 32) | c0, out);
    CHECK(memcmp(out, expect, sizeof out) == 0, "philox(%08x %08x %08x %08x / %08x %08x) = %08x %08x %08x %08x",
          c0, c1, c2, c3, k0, k1, out[0], out[1], out[2], out[3]);
}

int main(void) {
    /* Random123 kat_vectors for philox4x32_10. */
    kat(0, 0, 0, 0, 0, 0, (const uint32_t[4]){0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
    kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
        (const uint32_t[4]){0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
    kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
        (const uint32_t[4]){0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});

    /* Pure function of its arguments; the sequential generator walks the same counters. */
    mpx_rng r = mpx_rng_make(7, MPX_RNG_TEST, 100);
    for (uint64_t i = 0; i < 64; i++)
        CHECK(mpx_rng_u32(&r) == mpx_rand_u32(7, MPX_RNG_TEST, 100 + i), "sequential draw %llu",
              (unsigned long long)i);
    /* Streams and seeds differ. */
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        same += mpx_rand_u32(1, MPX_RNG_INIT, i) == mpx_rand_u32(1, MPX_RNG_DROPOUT, i);
        same += mpx_rand_u32(1, MPX_RNG_INIT, i) == mpx_rand_u32(2, MPX_RNG_INIT, i);
    }
    CHECK(same <= 1, "streams or seeds collide: %d equal draws of 2000", same);

    /* Uniform in [0,1): mean 1/2, variance 1/12 within 5 standard errors over 1e6 draws. */
    enum { N = 1000000 };
    double s = 0, s2 = 0, n1 = 0, n2 = 0, n4 = 0;
    float lo = 1, hi = 0;
    for (uint64_t i = 0; i < N; i++) {
        float u = mpx_rand_uniform(3, MPX_RNG_TEST, i);
        lo = fminf(lo, u);
        hi = fmaxf(hi, u);
        s += u;
        s2 += (double)u * u;
        double z = mpx_rand_normal(4, MPX_RNG_TEST, i);
        n1 += z;
        n2 += z * z;
        n4 += z * z * z * z;
    }
    CHECK(lo >= 0 && hi < 1, "uniform outside [0,1): %g %g", lo, hi);
    CHECK(fabs(s / N - 0.5) < 5 * sqrt(1.0 / 12 / N), "uniform mean %g", s / N);
    CHECK(fabs(s2 / N - s * s / N / N - 1.0 / 12) < 5 * sqrt(1.0 / 180 / N), "uniform variance");
    /* Normal: mean 0 (se 1e-3), variance 1 (se sqrt(2/N)), kurtosis 3 (se sqrt(24/N)). */
    CHECK(fabs(n1 / N) < 5e-3, "normal mean %g", n1 / N);
    CHECK(fabs(n2 / N - 1) < 5 * sqrt(2.0 / N), "normal variance %g", n2 / N);
    CHECK(fabs(n4 / N - 3) < 5 * sqrt(96.0 / N), "normal fourth moment %g", n4 / N);

    /* Bounded draws: every bucket of [0, 7) within 5 binomial sigmas. */
    long count[7] = {0};
    mpx_rng b = mpx_rng_make(5, MPX_RNG_DATA_ORDER, 0);
    for (int i = 0; i < 70000; i++) count[mpx_rng_below(&b, 7)]++;
    for (int k = 0; k < 7; k++)
        CHECK(fabs(count[k] - 10000.0) < 5 * sqrt(70000.0 / 7 * 6 / 7), "bucket %d: %ld", k, count[k]);
    return mpx_test_done(__FILE__);
}
