/* test_cast_stochastic.c — stochastic rounding in mpx_cast (F16, BF16, E4M3, E5M2).
 *
 * 1. Exact bits: element i rounds up iff r_i < floor(2^32 * fraction), with
 *    r_i = mpx_rand_u32(seed, MPX_RNG_ROUNDING ^ stream, offset + i), against the independent
 *    reference (fp_ref.h); hence always one of the two neighbours, representable values unchanged.
 * 2. Unbiased: the mean over ~1M draws of a value between two neighbours is within 6 standard
 *    deviations of the value (a false failure has probability ~2e-9; the seeds are fixed, so the
 *    test is deterministic).
 * 3. Independent of the thread count and the implementation (every loop tier the CPU has, on
 *    NaN, Inf, zeros and FP32 subnormals too), and a cast of a suffix with offset + k reproduces
 *    the suffix of the whole cast.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "testutil.h"

static ref_format R[MPX_DTYPE_COUNT];
/* The loop tiers of lib/numerics, slowest first (f16c: F16C with AVX2). */
static const char *TIERS[] = {"c", "f16c", "avx512"};
enum { N_TIERS = 3 };
static const mpx_dtype FORMATS[] = {MPX_F16, MPX_BF16, MPX_F8_E4M3, MPX_F8_E5M2};

static uint32_t code_at(mpx_dtype t, const void *p, size_t i) {
    return mpx_dtype_size(t) == 2 ? ((const uint16_t *)p)[i] : ((const uint8_t *)p)[i];
}

static mpx_cast_spec sr_spec(mpx_dtype t, uint64_t seed, uint64_t stream, uint64_t offset) {
    mpx_cast_spec sp = mpx_cast_plain(t);
    sp.rounding = MPX_ROUND_STOCHASTIC;
    sp.seed = seed;
    sp.stream = stream;
    sp.offset = offset;
    return sp;
}

/* Magnitudes spanning the format: from far below its smallest subnormal to beyond its max. */
static void fill_span(mpx_dtype t, float *x, size_t n, uint64_t seed) {
    const mpx_format_info *fi = mpx_format(t);
    double lo = log2(fi->min_subnormal) - 4, hi = log2(fi->max) + 2;
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(seed, MPX_RNG_TEST, i, w);
        if (w[2] % 16 == 0) { /* exactly representable values must never move */
            x[i] = (float)R[t].value[w[3] % (R[t].max_code + 1)];
        } else {
            x[i] = (float)exp2(lo + (hi - lo) * (double)w[0] / 4294967296.0);
        }
        if (w[1] & 1) x[i] = -x[i];
    }
}

static void test_exact_bits(mpx_dtype t) {
    const size_t n = 200003;
    float *x = malloc(n * sizeof *x);
    void *y = malloc(n * 2);
    NEED(x && y);
    fill_span(t, x, n, 51 + (uint64_t)t);
    /* The counters cross 2^34 inside a vector group (Philox's low counter word wraps into the
     * high one) at element 5115. */
    mpx_cast_spec sp = sr_spec(t, 1234, 77, (1ull << 34) - 5115);
    mpx_cast(&sp, x, y, n);
    long bad = 0, not_neighbour = 0, moved = 0, ups = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = mpx_rand_u32(sp.seed, MPX_RNG_ROUNDING ^ sp.stream, sp.offset + i);
        int ovf;
        uint32_t want = ref_round_sr(&R[t], x[i], r, &ovf);
        uint32_t got = code_at(t, y, i);
        bad += got != want;
        /* The neighbours: down = largest value <= |x|, up = the next code (Inf or saturation
         * past the largest finite value, as ref_round gives for it). */
        double a = fabs((double)x[i]);
        uint32_t sign = signbit(x[i]) ? R[t].sign_bit : 0u;
        uint32_t mag = got & (R[t].sign_bit - 1u);
        if (a < R[t].value[R[t].max_code + 1]) {
            uint32_t down = ref_floor_code(&R[t], a);
            uint32_t up = down + (R[t].value[down] != a);
            if (up > R[t].max_code) up = R[t].has_inf ? R[t].max_code + 1 : R[t].max_code;
            not_neighbour += (got & R[t].sign_bit) != sign || (mag != down && mag != up);
            moved += R[t].value[down] == a && mag != down;
            ups += mag == up && up != down;
        }
    }
    CHECK(bad == 0, "%s: %ld of %zu stochastic casts differ from the reference rule",
          mpx_dtype_name(t), bad, n);
    CHECK(not_neighbour == 0, "%s: %ld results are not one of the two neighbours",
          mpx_dtype_name(t), not_neighbour);
    CHECK(moved == 0, "%s: %ld representable values moved", mpx_dtype_name(t), moved);
    CHECK(ups > (long)n / 10, "%s: only %ld of %zu rounded up (rounding looks deterministic)",
          mpx_dtype_name(t), ups, n);
    free(x);
    free(y);
}

static void test_unbiased(mpx_dtype t) {
    /* Values a fraction f of the way between neighbouring codes c and c + 1, in the normal and
     * the subnormal range. M = 8 seeds x 131072 elements draws; the mean of the decoded results
     * has standard deviation (hi - lo) sqrt(f (1 - f) / M). */
    const size_t n = 131072;
    const int seeds = 8;
    const double M = (double)n * seeds;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    void *y = malloc(n * 2);
    NEED(x && back && y);
    const ref_format *F = &R[t];
    const uint32_t cs[] = {1, 3, F->max_code / 2, F->max_code - 3};
    const double fs[] = {0.1, 0.5, 0.77};
    for (int ci = 0; ci < 4; ci++) {
        for (int fi = 0; fi < 3; fi++) {
            double lo = F->value[cs[ci]], hi = F->value[cs[ci] + 1];
            float v = (float)(lo + fs[fi] * (hi - lo));
            double f = ((double)v - lo) / (hi - lo); /* v rounded to FP32 */
            for (size_t i = 0; i < n; i++) x[i] = v;
            double sum = 0;
            for (int s = 0; s < seeds; s++) {
                mpx_cast_spec sp = sr_spec(t, 1000 + (uint64_t)s, 3, 0);
                mpx_cast(&sp, x, y, n);
                mpx_decode(t, y, back, n);
                for (size_t i = 0; i < n; i++) sum += back[i];
            }
            double mean = sum / M, sd = (hi - lo) * sqrt(f * (1 - f) / M);
            CHECK(fabs(mean - v) <= 6 * sd, "%s: E[sr(%a)] = %a, off by %.2f sd", mpx_dtype_name(t),
                  (double)v, mean, fabs(mean - v) / sd);
        }
    }
    free(x);
    free(back);
    free(y);
}

static void test_determinism(mpx_dtype t) {
    const size_t n = 500001, k = 123457;
    const size_t esz = mpx_dtype_size(t);
    float *x = malloc(n * sizeof *x);
    uint8_t *a = malloc(n * esz), *b = malloc(n * esz), *c = malloc(n * esz);
    NEED(x && a && b && c);
    fill_span(t, x, n, 61);
    /* Every 97th element a special or an FP32 subnormal: the vector loops' NaN, Inf and zero
     * lanes must match the portable loop's too. */
    const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffa5a5a5u, 0x7f812345u,
                                 0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu};
    for (size_t i = 0; i < n; i += 97) {
        uint32_t u = specials[(i / 97) % (sizeof specials / sizeof specials[0])];
        memcpy(&x[i], &u, sizeof u);
    }
    mpx_cast_spec sp = sr_spec(t, 42, 9, 77);
    mpx_cast_stats s1 = {0}, s2 = {0}, s3 = {0};
    sp.stats = &s1;
    omp_set_num_threads(2);
    mpx_cast(&sp, x, a, n);
    omp_set_num_threads(1);
    sp.stats = &s2;
    mpx_cast(&sp, x, b, n);
    omp_set_num_threads(2);
    CHECK(memcmp(a, b, n * esz) == 0 && memcmp(&s1, &s2, sizeof s1) == 0,
          "%s: 1 thread and 2 threads differ", mpx_dtype_name(t));
    for (int k = 0; k < N_TIERS; k++) {
        if (!mpx_convert_limit(TIERS[k])) continue;
        memset(&s3, 0, sizeof s3);
        sp.stats = &s3;
        mpx_cast(&sp, x, c, n);
        CHECK(memcmp(a, c, n * esz) == 0 && memcmp(&s1, &s3, sizeof s1) == 0,
              "%s: the %s loops differ from the default (best) loops", mpx_dtype_name(t),
              TIERS[k]);
    }
    mpx_convert_limit(NULL);
    /* The suffix from k, cast with offset + k, equals the suffix of the whole cast. */
    mpx_cast_spec tail = sr_spec(t, 42, 9, 77 + k);
    mpx_cast(&tail, x + k, c, n - k);
    CHECK(memcmp(a + k * esz, c, (n - k) * esz) == 0, "%s: offset does not address elements",
          mpx_dtype_name(t));
    /* Another seed or stream changes the result. */
    mpx_cast_spec other = sr_spec(t, 43, 9, 77);
    mpx_cast(&other, x, c, n);
    CHECK(memcmp(a, c, n * esz) != 0, "%s: the seed has no effect", mpx_dtype_name(t));
    other = sr_spec(t, 42, 10, 77);
    mpx_cast(&other, x, c, n);
    CHECK(memcmp(a, c, n * esz) != 0, "%s: the stream has no effect", mpx_dtype_name(t));
    free(x);
    free(a);
    free(b);
    free(c);
}

int main(void) {
    R[MPX_F16] = ref_f16();
    R[MPX_BF16] = ref_bf16();
    R[MPX_F8_E4M3] = ref_e4m3();
    R[MPX_F8_E5M2] = ref_e5m2();
    for (int k = 0; k < N_TIERS; k++) {
        if (!mpx_convert_limit(TIERS[k])) {
            printf("  %s loops: not available on this CPU, skipped\n", TIERS[k]);
            continue;
        }
        for (int i = 0; i < 4; i++) test_exact_bits(FORMATS[i]);
        printf("  %s loops: stochastic casts match the reference rule\n", TIERS[k]);
    }
    mpx_convert_limit(NULL);
    for (int i = 0; i < 4; i++) {
        test_unbiased(FORMATS[i]);
        test_determinism(FORMATS[i]);
    }
    for (int i = 0; i < 4; i++) ref_free(&R[FORMATS[i]]);
    return mpx_test_done(__FILE__);
}
