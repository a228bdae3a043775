/* test_cast_cuda.c — mpx_cast_cuda against the CPU mpx_cast: identical bits and identical counts
 * (every field of mpx_cast_stats) on the same random data, for F16 and BF16 destinations (and a
 * scaled F32 copy counted against F16), RNE and stochastic rounding, counting against the
 * destination format and against the other one, with and without a scale; and the uncounted
 * RNE rounding to TF32 of tf32 mode. The GPU uses the same rounding rules and the same Philox
 * stream as the CPU, so every comparison is exact.
 * Skipped (77) when there is no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/cuda.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "cuda_check.h"
#include "testutil.h"

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Log-uniform magnitudes over every bin, random signs, with zeros, Inf, NaN (random payloads),
 * FP32 subnormals and exact FP16 ties mixed in. */
static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(81, MPX_RNG_TEST, i, w);
        switch (w[0] % 50) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = INFINITY; break;
        case 2: x[i] = bits_f(0x7f800001u | (w[1] & 0x7fffffu)); break;
        case 3: x[i] = bits_f(w[1] & 0x7fffffu); break;
        case 4:
            x[i] = ldexpf(1.0f + ldexpf(2.0f * (float)(w[2] % 1024) + 1.0f, -11),
                          (int)(w[3] % 40) - 25);
            break;
        default: x[i] = (float)exp2(-70.0 + 90.0 * (double)w[1] / 4294967296.0); break;
        }
        if (w[3] & 0x100) x[i] = -x[i];
    }
}

int main(void) {
    if (mpx_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return MPX_TEST_SKIP;
    }
    printf("device 0: %s\n", mpx_cuda_device_name(0));
    const size_t n = (1u << 21) + 77;
    float *x = malloc(n * sizeof *x), *cpu = malloc(n * sizeof *x), *gpu = malloc(n * sizeof *x);
    REQUIRE(x && cpu && gpu, "out of memory");
    fill(x, n);
    float *d_x;
    void *d_y;
    mpx_cast_stats *d_st;
    CUDA_OK(cudaMalloc((void **)&d_x, n * sizeof *x));
    CUDA_OK(cudaMalloc(&d_y, n * sizeof *x));
    CUDA_OK(cudaMalloc((void **)&d_st, sizeof(mpx_cast_stats)));
    CUDA_OK(cudaMemcpy(d_x, x, n * sizeof *x, cudaMemcpyHostToDevice));

    const struct {
        mpx_dtype dst, sf;
    } combos[] = {{MPX_F16, MPX_F16},
                  {MPX_BF16, MPX_BF16},
                  {MPX_F16, MPX_BF16},
                  {MPX_BF16, MPX_F16},
                  {MPX_F32, MPX_F16}};
    const float scales[] = {1.0f, 0x1p12f, 0.3f};
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
        for (int rnd = 0; rnd < 2; rnd++) {
            for (int k = 0; k < 3; k++) {
                mpx_cast_spec sp = mpx_cast_plain(combos[c].dst);
                sp.stats_format = combos[c].sf;
                sp.rounding = rnd ? MPX_ROUND_STOCHASTIC : MPX_ROUND_RNE;
                sp.scale = scales[k];
                sp.seed = 0x1234567890abcdefull;
                sp.stream = 3;
                sp.offset = 4097; /* not a multiple of 4: words start mid Philox block */
                char what[96];
                snprintf(what, sizeof what, "dst %s stats %s %s scale %g", mpx_dtype_name(sp.dst),
                         mpx_dtype_name(sp.stats_format), rnd ? "sr" : "rne", (double)sp.scale);
                const size_t bytes = n * mpx_dtype_size(sp.dst);

                /* Counts are added: both sides start from the same non-empty stats. */
                mpx_cast_stats s_cpu = {0}, s_gpu;
                s_cpu.count = 3;
                s_cpu.hist[40] = 11;
                CUDA_OK(cudaMemcpy(d_st, &s_cpu, sizeof s_cpu, cudaMemcpyHostToDevice));
                sp.stats = &s_cpu;
                mpx_cast(&sp, x, cpu, n);
                sp.stats = d_st;
                CHECK_OK(mpx_cast_cuda(&sp, d_x, d_y, n));
                CUDA_OK(cudaDeviceSynchronize());
                CUDA_OK(cudaMemcpy(gpu, d_y, bytes, cudaMemcpyDeviceToHost));
                CUDA_OK(cudaMemcpy(&s_gpu, d_st, sizeof s_gpu, cudaMemcpyDeviceToHost));
                CHECK(memcmp(cpu, gpu, bytes) == 0, "%s: GPU bits differ from the CPU", what);
                CHECK(s_gpu.count == s_cpu.count && s_gpu.nonzero == s_cpu.nonzero &&
                          s_gpu.flushed == s_cpu.flushed && s_gpu.below_min == s_cpu.below_min &&
                          s_gpu.subnormal == s_cpu.subnormal && s_gpu.overflow == s_cpu.overflow &&
                          s_gpu.nonfinite == s_cpu.nonfinite,
                      "%s: counts differ: flushed %llu/%llu subnormal %llu/%llu overflow %llu/%llu",
                      what, (unsigned long long)s_gpu.flushed, (unsigned long long)s_cpu.flushed,
                      (unsigned long long)s_gpu.subnormal, (unsigned long long)s_cpu.subnormal,
                      (unsigned long long)s_gpu.overflow, (unsigned long long)s_cpu.overflow);
                CHECK(memcmp(s_gpu.hist, s_cpu.hist, sizeof s_cpu.hist) == 0,
                      "%s: histograms differ", what);

                /* Without stats: same bits. */
                sp.stats = NULL;
                CUDA_OK(cudaMemset(d_y, 0, bytes));
                CHECK_OK(mpx_cast_cuda(&sp, d_x, d_y, n));
                CUDA_OK(cudaMemcpy(gpu, d_y, bytes, cudaMemcpyDeviceToHost));
                CHECK(memcmp(cpu, gpu, bytes) == 0, "%s, no stats: GPU bits differ from the CPU",
                      what);
            }
        }
    }
    /* TF32 (tf32 mode's GEMM operands): RNE, uncounted, the CPU's bits; counted or stochastic
     * casts to it are refused. */
    for (int k = 0; k < 3; k++) {
        mpx_cast_spec sp = mpx_cast_plain(MPX_TF32);
        sp.scale = scales[k];
        mpx_cast(&sp, x, cpu, n);
        CUDA_OK(cudaMemset(d_y, 0, n * sizeof(float)));
        CHECK_OK(mpx_cast_cuda(&sp, d_x, d_y, n));
        CUDA_OK(cudaMemcpy(gpu, d_y, n * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(memcmp(cpu, gpu, n * sizeof(float)) == 0, "dst tf32 scale %g: GPU bits differ",
              (double)sp.scale);
    }
    mpx_cast_spec tf = mpx_cast_plain(MPX_TF32);
    tf.rounding = MPX_ROUND_STOCHASTIC;
    CHECK(mpx_cast_cuda(&tf, d_x, d_y, n) == MPX_ERR_UNSUPPORTED, "stochastic tf32 refused");
    tf.rounding = MPX_ROUND_RNE;
    tf.stats = d_st;
    CHECK(mpx_cast_cuda(&tf, d_x, d_y, n) == MPX_ERR_UNSUPPORTED, "counted tf32 refused");
    /* FP8 codes are not a cast destination on the GPU (fp8 mode's operands go through
     * quantize.cu, which reads them back in FP32): refused with a message, nothing launched. */
    mpx_cast_spec fp8 = mpx_cast_plain(MPX_F8_E4M3);
    CHECK(mpx_cast_cuda(&fp8, d_x, d_y, n) == MPX_ERR_UNSUPPORTED &&
              strstr(mpx_error_message(), "f8_e4m3"),
          "FP8 destination refused");
    cudaFree(d_x);
    cudaFree(d_y);
    cudaFree(d_st);
    free(x);
    free(cpu);
    free(gpu);
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
