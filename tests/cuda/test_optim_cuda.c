/* test_optim_cuda.c — the CUDA backend's optimizer updates against the CPU backend's: SGD (plain,
 * Nesterov, with weight decay and a clip factor), AdamW, and LAMB (direction, the two norms
 * through sumsq, then w -= lr trust u), several steps in a row with the state carried.
 *
 * Every comparison is exact (the same bits for weights and state): the kernels perform the
 * CPU's IEEE operations in the CPU's order with no fused multiply-add (lib/cuda/optim.cu), and
 * sumsq keeps the CPU's block order. The last step of each also writes the per-element update
 * (the step structs' delta, for the lost-update statistics), compared the same way. The data are finite, as the optimizer guarantees (it
 * refuses a non-finite gradient norm). Skipped (77) when there is no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "mpx/cuda.h"
#include "mpx/rng.h"
#include "cuda_check.h"
#include "testutil.h"

enum { NARR = 5, DELTA = 4 }; /* w, g, up to two state arrays, the update written (delta) */

static const mpx_backend *cpu, *gpu;
static const size_t n = (1u << 20) + 13;

/* The same arrays on the host (h) and the device (d). */
typedef struct {
    float *h[NARR], *d[NARR];
} arrays;

static int arrays_init(arrays *a, uint64_t seed) {
    for (int k = 0; k < NARR; k++) {
        a->h[k] = malloc(n * sizeof(float));
        if (!a->h[k] || cudaMalloc((void **)&a->d[k], n * sizeof(float)) != cudaSuccess) return 0;
        /* w ~ N(0, 0.05), g ~ N(0, 1e-3) with exact zeros, state zero as the optimizer starts */
        if (k == 0) mpx_test_normal(a->h[k], n, 0.0f, 0.05f, seed);
        if (k == 1) {
            mpx_test_normal(a->h[k], n, 0.0f, 1e-3f, seed + 1);
            for (size_t i = 0; i < n; i += 97) a->h[k][i] = 0.0f;
        }
        if (k >= 2) memset(a->h[k], 0, n * sizeof(float));
        if (cudaMemcpy(a->d[k], a->h[k], n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
            return 0;
    }
    return 1;
}

static void arrays_free(arrays *a) {
    for (int k = 0; k < NARR; k++) {
        free(a->h[k]);
        cudaFree(a->d[k]);
    }
}

/* A new gradient for the next step on both sides. */
static void new_grad(arrays *a, uint64_t seed) {
    mpx_test_normal(a->h[1], n, 0.0f, 1e-3f, seed);
    CUDA_OK_VOID(cudaMemcpy(a->d[1], a->h[1], n * sizeof(float), cudaMemcpyHostToDevice));
}

/* Compare array k of both sides bit for bit. */
static void compare(const arrays *a, int k, const char *what, int step) {
    float *got = malloc(n * sizeof *got);
    REQUIRE_VOID(got, "out of memory");
    size_t i = 0;
    if (cudaMemcpy(got, a->d[k], n * sizeof *got, cudaMemcpyDeviceToHost) == cudaSuccess)
        while (i < n && memcmp(&got[i], &a->h[k][i], sizeof(float)) == 0) i++;
    CHECK(i == n, "%s step %d array %d: element %zu: cpu %.9g gpu %.9g", what, step, k, i,
          i < n ? (double)a->h[k][i] : 0.0, i < n ? (double)got[i] : 0.0);
    free(got);
}

static void test_sgd(int nesterov, float wd, float clip) {
    arrays a;
    REQUIRE_VOID(arrays_init(&a, 100 + (uint64_t)nesterov), "setup failed");
    char what[64];
    snprintf(what, sizeof what, "sgd nesterov %d wd %g clip %g", nesterov, (double)wd,
             (double)clip);
    mpx_sgd_step s = {0.1f, 0.9f, wd, clip, nesterov, NULL};
    for (int step = 0; step < 3; step++) {
        mpx_sgd_step sh = s, sd = s;
        if (step == 2) sh.delta = a.h[DELTA], sd.delta = a.d[DELTA];
        cpu->sgd_update(cpu, a.h[0], a.h[1], a.h[2], n, &sh);
        gpu->sgd_update(gpu, a.d[0], a.d[1], a.d[2], n, &sd);
        compare(&a, 0, what, step);
        compare(&a, 2, what, step);
        compare(&a, DELTA, what, step);
        new_grad(&a, 200 + (uint64_t)step);
    }
    arrays_free(&a);
}

/* optim.c's step constants. */
static mpx_adamw_step adam_step(int64_t t, float lr, float wd, float clip) {
    const double b1 = 0.9, b2 = 0.999;
    mpx_adamw_step s = {lr,
                        (float)b1,
                        (float)b2,
                        (float)(1.0 - b1),
                        (float)(1.0 - b2),
                        1e-8f,
                        (float)(1.0 - pow(b1, (double)t)),
                        (float)(1.0 - pow(b2, (double)t)),
                        wd,
                        clip,
                        NULL};
    return s;
}

static void test_adamw(float wd, float clip) {
    arrays a;
    REQUIRE_VOID(arrays_init(&a, 300), "setup failed");
    char what[64];
    snprintf(what, sizeof what, "adamw wd %g clip %g", (double)wd, (double)clip);
    for (int step = 1; step <= 3; step++) {
        mpx_adamw_step sh = adam_step(step, 1e-3f, wd, clip), sd = sh;
        if (step == 3) sh.delta = a.h[DELTA], sd.delta = a.d[DELTA];
        cpu->adamw_update(cpu, a.h[0], a.h[1], a.h[2], a.h[3], n, &sh);
        gpu->adamw_update(gpu, a.d[0], a.d[1], a.d[2], a.d[3], n, &sd);
        for (int k = 0; k < NARR; k++)
            if (k != 1) compare(&a, k, what, step);
        new_grad(&a, 400 + (uint64_t)step);
    }
    arrays_free(&a);
}

/* optim.c's LAMB step, on one backend (its sums land in backend memory: `sums` holds two
 * doubles there). */
static void lamb_step(const mpx_backend *be, float *w, float *g, float *m, float *v,
                      const mpx_adamw_step *s, double lr, double *sums, double *trust,
                      float *delta) {
    be->lamb_direction(be, w, g, m, v, n, s);
    double host[2];
    be->sumsq(be, w, n, &sums[0]);
    be->sumsq(be, g, n, &sums[1]);
    be->download(be, host, sums, sizeof host);
    double wn = sqrt(host[0]), un = sqrt(host[1]);
    *trust = wn > 0 && un > 0 ? wn / un : 1.0;
    be->scaled_sub(be, w, g, n, (float)(lr * *trust), delta);
}

static void test_lamb(void) {
    arrays a;
    REQUIRE_VOID(arrays_init(&a, 500), "setup failed");
    double *dsums = gpu->alloc(gpu, 2 * sizeof(double));
    REQUIRE_VOID(dsums, "cudaMalloc failed");
    for (int step = 1; step <= 3; step++) {
        mpx_adamw_step s = adam_step(step, 1e-3f, 0.01f, 0.5f);
        double tc, tg, hsums[2];
        lamb_step(cpu, a.h[0], a.h[1], a.h[2], a.h[3], &s, 1e-3, hsums, &tc,
                  step == 3 ? a.h[DELTA] : NULL);
        lamb_step(gpu, a.d[0], a.d[1], a.d[2], a.d[3], &s, 1e-3, dsums, &tg,
                  step == 3 ? a.d[DELTA] : NULL);
        CHECK(memcmp(&tc, &tg, sizeof tc) == 0, "lamb step %d: trust %.17g / %.17g", step, tc, tg);
        for (int k = 0; k < NARR; k++) compare(&a, k, "lamb", step);
        new_grad(&a, 600 + (uint64_t)step);
    }
    gpu->free(gpu, dsums);
    arrays_free(&a);
}

int main(void) {
    if (mpx_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return MPX_TEST_SKIP;
    }
    printf("device 0: %s\n", mpx_cuda_device_name(0));
    cpu = mpx_backend_cpu();
    gpu = mpx_backend_cuda();
    test_sgd(0, 0.0f, 1.0f);
    test_sgd(0, 1e-4f, 0.37f);
    test_sgd(1, 5e-4f, 1.0f);
    test_adamw(0.0f, 1.0f);
    test_adamw(0.01f, 0.61f);
    test_lamb();
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error");
    mpx_status st = mpx_backend_cuda_error();
    CHECK(st == MPX_OK, "a CUDA backend entry failed: %s: %s", mpx_status_name(st),
          mpx_error_message());
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
