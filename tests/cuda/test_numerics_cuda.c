/* test_numerics_cuda.c — the CUDA backend's numerics entries against the CPU backend's on the same
 * data: decode, moments and absmax (to the host and into device memory), abs_quantile, accumulate
 * (with the merges' magnitudes), the speculative merges' check, unscale_accumulate, sumsq.
 *
 * Every comparison is exact (the same bits), because the GPU reproduces the CPU's operations:
 * decode, absmax and the quantile are exact functions of the data; accumulate and
 * unscale_accumulate round each product and sum separately as the CPU does; moments and sumsq
 * reduce the CPU's 4096-element blocks in the CPU's order (lib/cuda/moments.cu). The one
 * allowance: where a result is NaN, any NaN is accepted when the CPU's own payload is not
 * defined by IEEE 754 (two NaN operands: the compiler picks the order; an invalid operation
 * such as Inf - Inf: the ISA's default NaN). Data mix zeros of both signs, Inf, NaN with random
 * payloads, FP32 subnormals and exact powers of two into log-uniform magnitudes.
 * Skipped (77) when there is no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "mpx/cuda.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "cuda_check.h"
#include "testutil.h"

static const mpx_backend *cpu, *gpu;

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static int same(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }
static int same_d(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* Index of the first element where a and b differ (n when none); `exact` also compares the
 * payloads of NaNs. */
static size_t first_diff(const float *a, const float *b, size_t n, int exact) {
    for (size_t i = 0; i < n; i++)
        if (exact ? bits(a[i]) != bits(b[i]) : !same(a[i], b[i])) return i;
    return n;
}

/* Special values one in `every` elements (0 = none), else log-uniform magnitudes 2^lo..2^hi. */
static void fill(float *x, size_t n, uint64_t seed, int every, double lo, double hi) {
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(seed, MPX_RNG_TEST, i, w);
        unsigned kind = every ? w[0] % (unsigned)every : 99;
        switch (kind) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = INFINITY; break;
        case 2: x[i] = bits_f(0x7f800001u | (w[1] & 0x7fffffu)); break; /* any NaN payload */
        case 3: x[i] = bits_f(1u + w[1] % 0x7fffffu); break;            /* FP32 subnormal */
        case 4: x[i] = ldexpf(1.0f, (int)(w[2] % 60) - 30); break;      /* exact power of 2 */
        default: x[i] = (float)exp2(lo + (hi - lo) * (double)w[1] / 4294967296.0); break;
        }
        if (w[3] & 0x100) x[i] = -x[i];
    }
}

/* A device copy of `bytes` of host memory; host NULL: an uninitialised buffer. */
static float *to_dev(const void *host, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 4) != cudaSuccess) return NULL;
    if (host && bytes && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static void test_decode(void) {
    /* Every F16 / BF16 code, then random codes; every FP8 code, repeated. */
    const size_t n = 65536 + (1u << 20) + 33;
    uint16_t *c16 = malloc(n * sizeof *c16);
    uint8_t *c8 = malloc(n);
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    REQUIRE_VOID(c16 && c8 && ref && got, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(5, MPX_RNG_TEST, i, w);
        c16[i] = i < 65536 ? (uint16_t)i : (uint16_t)w[0];
        c8[i] = (uint8_t)(i < 65536 ? i : w[1]);
    }
    void *d16 = to_dev(c16, n * sizeof *c16), *d8 = to_dev(c8, n);
    float *dy = to_dev(NULL, n * sizeof(float));
    REQUIRE_VOID(d16 && d8 && dy, "cudaMalloc failed");
    const mpx_dtype types[] = {MPX_F16, MPX_BF16, MPX_F8_E4M3, MPX_F8_E5M2, MPX_F32};
    for (int t = 0; t < 5; t++) {
        const mpx_dtype dt = types[t];
        /* F32 decodes (copies) the 16-bit codes read as floats: n / 2 of them. */
        const void *src = dt == MPX_F8_E4M3 || dt == MPX_F8_E5M2 ? (const void *)c8 : c16;
        const void *dsrc = src == c8 ? d8 : d16;
        const size_t m = dt == MPX_F32 ? n / 2 : n;
        cpu->decode(cpu, dt, src, ref, m);
        CUDA_OK_VOID(cudaMemset(dy, 0xff, n * sizeof(float)));
        gpu->decode(gpu, dt, dsrc, dy, m);
        CUDA_OK_VOID(cudaMemcpy(got, dy, m * sizeof(float), cudaMemcpyDeviceToHost));
        size_t i = first_diff(ref, got, m, 1);
        CHECK(i == m, "decode %s: element %zu: cpu %08x gpu %08x", mpx_dtype_name(dt), i,
              i < m ? bits(ref[i]) : 0, i < m ? bits(got[i]) : 0);
    }
    CHECK(mpx_decode_cuda(MPX_I32, d16, dy, 4) == MPX_ERR_UNSUPPORTED &&
              strstr(mpx_error_message(), "i32"),
          "decode of i32 refused with a message naming it");
    cudaFree(d16);
    cudaFree(d8);
    cudaFree(dy);
    free(c16);
    free(c8);
    free(ref);
    free(got);
}

/* The backend's sumsq (written to device memory), read back; NaN when the copy fails. */
static double gpu_sumsq(const float *dx, size_t n) {
    double *d = (double *)to_dev(NULL, sizeof(double)), r = NAN;
    if (!d) return NAN;
    gpu->sumsq(gpu, dx, n, d);
    if (cudaMemcpy(&r, d, sizeof r, cudaMemcpyDeviceToHost) != cudaSuccess) r = NAN;
    cudaFree(d);
    return r;
}

static void check_moments_one(const char *what, const float *x, const float *dx, size_t n,
                              int to_device) {
    mpx_moments a, b;
    memset(&b, 0xab, sizeof b);
    cpu->moments(cpu, x, n, &a);
    if (to_device) { /* moments_to: into device memory, no wait */
        mpx_moments *db = (mpx_moments *)(void *)to_dev(&b, sizeof b);
        REQUIRE_VOID(db, "cudaMalloc failed");
        const int64_t w0 = gpu->host_waits(gpu);
        gpu->moments_to(gpu, dx, n, db);
        CHECK(gpu->host_waits(gpu) == w0, "%s n=%zu: moments_to waited", what, n);
        CUDA_OK_VOID(cudaMemcpy(&b, db, sizeof b, cudaMemcpyDeviceToHost));
        cudaFree(db);
    } else {
        gpu->moments(gpu, dx, n, &b);
    }
    CHECK(a.n == b.n && a.all_finite == b.all_finite, "%s n=%zu: n %llu/%llu finite %d/%d", what,
          n, (unsigned long long)a.n, (unsigned long long)b.n, a.all_finite, b.all_finite);
    CHECK(same_d(a.mean, b.mean) && same_d(a.std, b.std),
          "%s n=%zu: mean %.17g/%.17g std %.17g/%.17g", what, n, a.mean, b.mean, a.std, b.std);
    CHECK(same(a.min, b.min) && same(a.max, b.max) && same(a.absmax, b.absmax),
          "%s n=%zu: min %a/%a max %a/%a absmax %a/%a", what, n, (double)a.min, (double)b.min,
          (double)a.max, (double)b.max, (double)a.absmax, (double)b.absmax);
}

static void check_moments(const char *what, const float *x, const float *dx, size_t n) {
    check_moments_one(what, x, dx, n, 0);
    check_moments_one(what, x, dx, n, 1);
}

/* The reductions on one data set, over several lengths (whole blocks, ragged tails, more than
 * one warp's 32 blocks, more than the CPU's 256-block group). */
static void test_reductions(const char *what, const float *x, const float *dx, size_t nmax) {
    const size_t lens[] = {0, 1, 7, 4095, 4096, 4097, 5 * 4096 + 3, 33 * 4096 + 1, nmax};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const size_t n = lens[l] < nmax ? lens[l] : nmax;
        check_moments(what, x, dx, n);
        float am = cpu->absmax(cpu, x, n), bm = gpu->absmax(gpu, dx, n);
        CHECK(bits(am) == bits(bm), "%s n=%zu: absmax %a/%a", what, n, (double)am, (double)bm);
        double sa = 0, sb = gpu_sumsq(dx, n);
        cpu->sumsq(cpu, x, n, &sa);
        CHECK(same_d(sa, sb), "%s n=%zu: sumsq %.17g/%.17g", what, n, sa, sb);
        /* absmax_to: both halves' magnitudes into device memory, without a wait */
        float h[2] = {-1, -1}, *dh = to_dev(h, sizeof h);
        REQUIRE_VOID(dh, "cudaMalloc failed");
        int64_t w0 = gpu->host_waits(gpu);
        gpu->absmax_to(gpu, dx, n / 2, dh);
        gpu->absmax_to(gpu, dx + n / 2, n - n / 2, dh + 1);
        CHECK(gpu->host_waits(gpu) == w0, "%s n=%zu: absmax_to waited %lld times", what, n,
              (long long)(gpu->host_waits(gpu) - w0));
        CUDA_OK_VOID(cudaMemcpy(h, dh, sizeof h, cudaMemcpyDeviceToHost));
        cudaFree(dh);
        float c0 = cpu->absmax(cpu, x, n / 2), c1 = cpu->absmax(cpu, x + n / 2, n - n / 2);
        CHECK(bits(h[0]) == bits(c0) && bits(h[1]) == bits(c1),
              "%s n=%zu: absmax_to %a %a / cpu %a %a", what, n, (double)h[0], (double)h[1],
              (double)c0, (double)c1);
        const double qs[] = {0.0, 1e-3, 0.25, 0.5, 0.999, 1.0};
        const float scales[] = {1.0f, 0x1p12f, 0.3f, 0x1p-30f};
        for (int qi = 0; qi < 6; qi++)
            for (int si = 0; si < 4; si++) {
                float qa = cpu->abs_quantile(cpu, x, n, qs[qi], scales[si]);
                float qb = gpu->abs_quantile(gpu, dx, n, qs[qi], scales[si]);
                CHECK(bits(qa) == bits(qb), "%s n=%zu q=%g scale %g: quantile %a/%a", what, n,
                      qs[qi], (double)scales[si], (double)qa, (double)qb);
            }
    }
}

static void test_all_reductions(void) {
    const size_t n = (1u << 21) + 77;
    float *x = malloc(n * sizeof *x);
    REQUIRE_VOID(x, "out of memory");
    float *dx;

    /* Gradient-like data: a mean offset and a spread, no specials (the finite path). */
    mpx_test_normal(x, n, 0.3f, 2.0f, 17);
    x[n / 3] = 0.0f;
    REQUIRE_VOID((dx = to_dev(x, n * sizeof *x)) != NULL, "cudaMalloc failed");
    test_reductions("normal", x, dx, n);
    cudaFree(dx);

    /* Log-uniform magnitudes over the whole FP32 range (every binade of the quantile,
     * subnormals, products that overflow or go subnormal under the scales), then a narrower
     * range with specials: Inf and NaN in every statistic. */
    fill(x, n, 23, 0, -149.0, 127.0);
    REQUIRE_VOID((dx = to_dev(x, n * sizeof *x)) != NULL, "cudaMalloc failed");
    test_reductions("wide", x, dx, n);
    cudaFree(dx);
    fill(x, n, 29, 40, -40.0, 20.0);
    REQUIRE_VOID((dx = to_dev(x, n * sizeof *x)) != NULL, "cudaMalloc failed");
    test_reductions("specials", x, dx, n);
    cudaFree(dx);

    /* Only zeros of both signs: min and max keep the first zero of their block and the first
     * block's, as the CPU's strict comparisons do. */
    for (size_t i = 0; i < 20000; i++) x[i] = (i * 7919) % 3 ? 0.0f : -0.0f;
    REQUIRE_VOID((dx = to_dev(x, 20000 * sizeof *x)) != NULL, "cudaMalloc failed");
    test_reductions("signed zeros", x, dx, 20000);
    cudaFree(dx);

    /* Every element NaN: the moments' min, max and absmax are NaN, absmax() is Inf and the
     * quantile 0. */
    for (size_t i = 0; i < 9000; i++) x[i] = bits_f(0x7fc00000u | (uint32_t)i);
    REQUIRE_VOID((dx = to_dev(x, 9000 * sizeof *x)) != NULL, "cudaMalloc failed");
    test_reductions("all NaN", x, dx, 9000);
    cudaFree(dx);
    free(x);
}

static void test_accumulate(void) {
    const size_t n = (1u << 22) + 5; /* > 4 elements per thread: cuop_each's iterations */
    float *x = malloc(n * sizeof *x), *acc = malloc(n * sizeof *x), *got = malloc(n * sizeof *x);
    REQUIRE_VOID(x && acc && got, "out of memory");
    const float scales[] = {1.0f, 0.5f, 0x1p-7f, 0.3f};
    for (int s = 0; s < 4; s++) {
        fill(x, n, 31, 30, -30.0, 10.0);
        fill(acc, n, 37 + (uint64_t)s, s == 3 ? 0 : 30, -30.0, 10.0);
        float *dx = to_dev(x, n * sizeof *x), *dacc = to_dev(acc, n * sizeof *x);
        REQUIRE_VOID(dx && dacc, "cudaMalloc failed");
        /* accumulate, then accumulate_absmax on the result (the magnitudes are of the inputs
         * before each sum) */
        cpu->accumulate(cpu, acc, x, n, scales[s]);
        gpu->accumulate(gpu, dacc, dx, n, scales[s]);
        float ca = -1, cx = -1, gm[2] = {-2, -2}, *dm = to_dev(gm, sizeof gm);
        REQUIRE_VOID(dm, "cudaMalloc failed");
        cpu->accumulate_absmax(cpu, acc, x, n, scales[s], &ca, &cx);
        gpu->accumulate_absmax(gpu, dacc, dx, n, scales[s], dm, dm + 1); /* device results */
        CUDA_OK_VOID(cudaMemcpy(gm, dm, sizeof gm, cudaMemcpyDeviceToHost));
        cudaFree(dm);
        CHECK(same(ca, gm[0]) && same(cx, gm[1]), "accumulate_absmax scale %g: cpu %g %g gpu %g %g",
              (double)scales[s], (double)ca, (double)cx, (double)gm[0], (double)gm[1]);
        CUDA_OK_VOID(cudaMemcpy(got, dacc, n * sizeof *x, cudaMemcpyDeviceToHost));
        size_t i = first_diff(acc, got, n, 0);
        CHECK(i == n, "accumulate scale %g: element %zu: cpu %08x gpu %08x", (double)scales[s], i,
              i < n ? bits(acc[i]) : 0, i < n ? bits(got[i]) : 0);
        cudaFree(dx);
        cudaFree(dacc);
    }
    free(x);
    free(acc);
    free(got);
}

static void test_unscale_accumulate(void) {
    const size_t n = (1u << 20) + 19;
    float *x = malloc(n * sizeof *x), *acc = malloc(n * sizeof *x), *got = malloc(n * sizeof *x);
    void *g = malloc(n * sizeof(float));
    REQUIRE_VOID(x && acc && got && g, "out of memory");
    const mpx_dtype types[] = {MPX_F32, MPX_F16, MPX_BF16, MPX_F8_E4M3, MPX_F8_E5M2};
    const double inv[] = {0x1p-10, 1.0 / 3.0, 65536.0};
    for (int t = 0; t < 5; t++)
        for (int k = 0; k < 3; k++)
            for (int round = 0; round < 2; round++) {
                const mpx_dtype dt = types[t];
                const size_t bytes = n * mpx_dtype_size(dt);
                /* Stored gradients span the format's range and beyond (Inf, NaN, flushed). */
                fill(x, n, 41 + (uint64_t)t, 25, -30.0, 18.0);
                mpx_encode(dt, x, g, n);
                fill(acc, n, 43, 25, -20.0, 5.0);
                void *dg = to_dev(g, bytes);
                float *dacc = to_dev(acc, n * sizeof *x);
                REQUIRE_VOID(dg && dacc, "cudaMalloc failed");
                /* The counts add into counters that already hold 5 (a step's earlier
                 * parameters); the GPU's is in device memory and the call does not wait. */
                uint64_t ca = 5, cb = 5;
                uint64_t *dcount = (uint64_t *)to_dev(&cb, sizeof cb);
                REQUIRE_VOID(dcount, "cudaMalloc failed");
                cpu->unscale_accumulate(cpu, dt, g, n, inv[k], round, acc, &ca);
                int64_t w0 = gpu->host_waits(gpu);
                gpu->unscale_accumulate(gpu, dt, dg, n, inv[k], round, dacc, dcount);
                CHECK(gpu->host_waits(gpu) == w0 && gpu->last_error(gpu) == MPX_OK,
                      "unscale %s: waited or failed: %s", mpx_dtype_name(dt), mpx_error_message());
                CUDA_OK_VOID(cudaMemcpy(&cb, dcount, sizeof cb, cudaMemcpyDeviceToHost));
                cudaFree(dcount);
                CUDA_OK_VOID(cudaMemcpy(got, dacc, n * sizeof *x, cudaMemcpyDeviceToHost));
                size_t i = first_diff(acc, got, n, 0);
                CHECK(ca == cb && ca > 5, "unscale %s inv %g round %d: non-finite %lld/%lld",
                      mpx_dtype_name(dt), inv[k], round, (long long)ca, (long long)cb);
                CHECK(i == n, "unscale %s inv %g round %d: element %zu: cpu %08x gpu %08x",
                      mpx_dtype_name(dt), inv[k], round, i, i < n ? bits(acc[i]) : 0,
                      i < n ? bits(got[i]) : 0);
                cudaFree(dg);
                cudaFree(dacc);
            }
    free(x);
    free(acc);
    free(got);
    free(g);
}

/* Operand NaNs keep their payload (quieted) as on the CPU, where exactly one operand is NaN. */
static void test_nan_payloads(void) {
    enum { N = 4096 };
    float x[N], acc[N], got[N];
    for (int i = 0; i < N; i++) {
        x[i] = i % 2 ? bits_f(0x7f800001u + (uint32_t)i * 977u) : (float)i;
        acc[i] = i % 2 ? 1.5f : bits_f(0xff800001u + (uint32_t)i * 131u);
    }
    float *dx = to_dev(x, sizeof x), *dacc = to_dev(acc, sizeof acc);
    REQUIRE_VOID(dx && dacc, "cudaMalloc failed");
    cpu->accumulate(cpu, acc, x, N, 0.25f);
    gpu->accumulate(gpu, dacc, dx, N, 0.25f);
    CUDA_OK_VOID(cudaMemcpy(got, dacc, sizeof got, cudaMemcpyDeviceToHost));
    size_t i = first_diff(acc, got, N, 1);
    CHECK(i == N, "NaN payloads: element %zu: cpu %08x gpu %08x", i, i < N ? bits(acc[i]) : 0,
          i < N ? bits(got[i]) : 0);
    cudaFree(dx);
    cudaFree(dacc);
}

/* merge_check: the same verdicts as the CPU's on magnitudes around u_max, Inf included. */
static void test_merge_check(void) {
    const float mags[] = {0.0f, 1.0f, 0x1p-20f, 65503.0f, 65504.0f, 1e30f, INFINITY};
    const double pend[] = {1.0, 0.5, 8.0}, scales[] = {1.0, 0x1p10, 0x1p-3};
    float *dslots = NULL;
    uint32_t *dmiss = NULL;
    CUDA_OK_VOID(cudaMalloc((void **)&dslots, 32 * sizeof(float)));
    CUDA_OK_VOID(cudaMalloc((void **)&dmiss, sizeof(uint32_t)));
    CUDA_OK_VOID(cudaMemset(dmiss, 0, sizeof(uint32_t)));
    uint32_t cmiss = 0, calls = 0;
    for (int k = 1; k <= 3; k++)
        for (int a = 0; a < 7; a++)
            for (int b = 0; b < 7; b++) {
                float slots[3] = {mags[a], mags[b], mags[(a + b) % 7]};
                double p[3], S[3], target = 0;
                for (int i = 0; i < k; i++) {
                    p[i] = pend[(a + i) % 3];
                    S[i] = scales[(b + i) % 3];
                    target = fmax(target, S[i]);
                }
                CUDA_OK_VOID(cudaMemcpy(dslots, slots, sizeof slots, cudaMemcpyHostToDevice));
                cpu->merge_check(cpu, slots, k, p, S, target, 65504.0, &cmiss);
                gpu->merge_check(gpu, dslots, k, p, S, target, 65504.0, dmiss);
                uint32_t gmiss = 0;
                CUDA_OK_VOID(cudaMemcpy(&gmiss, dmiss, sizeof gmiss, cudaMemcpyDeviceToHost));
                calls++;
                CHECK(gmiss == cmiss, "merge_check k %d slots %g %g %g: %u misses, cpu %u", k,
                      (double)slots[0], (double)slots[1], (double)slots[2], gmiss, cmiss);
            }
    CHECK(cmiss > 0 && cmiss < calls, "merge_check: %u misses in %u calls (both kinds wanted)",
          cmiss, calls);
    cudaFree(dslots);
    cudaFree(dmiss);
}

int main(void) {
    if (mpx_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return MPX_TEST_SKIP;
    }
    printf("device 0: %s\n", mpx_cuda_device_name(0));
    cpu = mpx_backend_cpu();
    gpu = mpx_backend_cuda();
    test_decode();
    test_all_reductions();
    test_accumulate();
    test_merge_check();
    test_unscale_accumulate();
    test_nan_payloads();
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error");
    mpx_status st = mpx_backend_cuda_error();
    CHECK(st == MPX_OK, "a CUDA backend entry failed: %s: %s", mpx_status_name(st),
          mpx_error_message());
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
