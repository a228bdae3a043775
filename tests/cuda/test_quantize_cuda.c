/* test_quantize_cuda.c — the quantizing modes' operand casts on the GPU (quantize.cu) against
 * the CPU's (fp8.h, fixed.h): the same values and identical counts (every field of
 * mpx_cast_stats, histogram included) on the same random data, for FP8 E4M3 and E5M2 under
 * per-tensor scales (with values past both formats' ranges), MX blocks under both exponent
 * rules along rows that do not divide into blocks (and a short last row) and down the columns of
 * batches of matrices whose sides do not divide into blocks, with the block scales' summary, and
 * Q(16, f) fixed point under RNE and stochastic rounding. Every rule is shared
 * (fp_bits.h) and every product a single FP32 rounding, so the comparison is exact; only NaN
 * payloads may differ (a NaN result is NaN on both).
 * Skipped (77) when there is no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/cuda.h"
#include "mpx/fixed.h"
#include "mpx/fp8.h"
#include "mpx/rng.h"
#include "cuda_check.h"
#include "testutil.h"

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Log-uniform magnitudes from 2^-40 to 2^20 (both FP8 formats' subnormals, normals and
 * overflow; Q(16, f)'s flushing and saturation), random signs, with zeros, Inf, NaN and FP32
 * subnormals mixed in; rarely, so that most MX blocks stay finite. */
static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(97, MPX_RNG_TEST, i, w);
        switch (w[0] % 400) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = INFINITY; break;
        case 2: x[i] = bits_f(0x7f800001u | (w[1] & 0x7fffffu)); break;
        case 3: x[i] = bits_f(w[1] & 0x7fffffu); break;
        default: x[i] = (float)exp2(-40.0 + 60.0 * (double)w[1] / 4294967296.0); break;
        }
        if (w[3] & 0x100) x[i] = -x[i];
    }
    for (size_t i = 64; i < 96 && i < n; i++) x[i] = 0.0f; /* an all-zero MX block */
}

/* Values equal bit for bit, or both NaN; the first difference reported. */
static int same_values(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            CHECK(0, "%s: element %zu: GPU %a, CPU %a", what, i, (double)b[i], (double)a[i]);
            return 0;
        }
    }
    return 1;
}

static void same_stats(const mpx_cast_stats *g, const mpx_cast_stats *c, const char *what) {
    CHECK(g->count == c->count && g->nonzero == c->nonzero && g->flushed == c->flushed &&
              g->below_min == c->below_min && g->subnormal == c->subnormal &&
              g->overflow == c->overflow && g->nonfinite == c->nonfinite,
          "%s: counts differ: count %llu/%llu flushed %llu/%llu subnormal %llu/%llu overflow "
          "%llu/%llu nonfinite %llu/%llu",
          what, (unsigned long long)g->count, (unsigned long long)c->count,
          (unsigned long long)g->flushed, (unsigned long long)c->flushed,
          (unsigned long long)g->subnormal, (unsigned long long)c->subnormal,
          (unsigned long long)g->overflow, (unsigned long long)c->overflow,
          (unsigned long long)g->nonfinite, (unsigned long long)c->nonfinite);
    CHECK(memcmp(g->hist, c->hist, sizeof c->hist) == 0, "%s: histograms differ", what);
}

typedef struct {
    const float *x, *d_x;
    float *cpu, *gpu, *d_y;
    mpx_cast_stats *d_st;
    size_t n;
} bufs;

/* Counts are added: both sides start from the same non-empty stats. */
static mpx_cast_stats start_stats(void) {
    mpx_cast_stats s;
    memset(&s, 0, sizeof s);
    s.count = 3;
    s.hist[40] = 11;
    return s;
}

/* Copy the GPU's result and counts back and compare them with the CPU's. */
static void compare(const bufs *b, const mpx_cast_stats *s_cpu, const char *what) {
    mpx_cast_stats s_gpu;
    CUDA_OK_VOID(cudaDeviceSynchronize());
    CUDA_OK_VOID(cudaMemcpy(b->gpu, b->d_y, b->n * sizeof(float), cudaMemcpyDeviceToHost));
    same_values(b->cpu, b->gpu, b->n, what);
    if (!s_cpu) return;
    CUDA_OK_VOID(cudaMemcpy(&s_gpu, b->d_st, sizeof s_gpu, cudaMemcpyDeviceToHost));
    same_stats(&s_gpu, s_cpu, what);
}

static void check_fp8(const bufs *b) {
    const mpx_dtype fmts[] = {MPX_F8_E4M3, MPX_F8_E5M2};
    const float scales[] = {1.0f, 0x1p-6f, 3.0f, 0x1p20f};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 4; k++)
            for (int counted = 0; counted < 2; counted++) {
                char what[96];
                snprintf(what, sizeof what, "fp8 %s scale %g%s", mpx_dtype_name(fmts[f]),
                         (double)scales[k], counted ? " counted" : "");
                mpx_cast_stats s = start_stats();
                CUDA_OK_VOID(cudaMemcpy(b->d_st, &s, sizeof s, cudaMemcpyHostToDevice));
                mpx_fp8_quantize(fmts[f], scales[k], b->x, b->cpu, b->n, counted ? &s : NULL);
                CHECK_OK(mpx_fp8_quantize_cuda(fmts[f], scales[k], b->d_x, b->d_y, b->n,
                                               counted ? b->d_st : NULL));
                compare(b, counted ? &s : NULL, what);
            }
}

/* The block scales' summaries equal. */
static void same_scales(const mpx_mx_scales *g, const mpx_mx_scales *c, const char *what) {
    CHECK(g->blocks == c->blocks && g->zero_blocks == c->zero_blocks &&
              g->nan_blocks == c->nan_blocks && g->min_exp == c->min_exp &&
              g->max_exp == c->max_exp,
          "%s: block scales differ: blocks %llu/%llu zero %llu/%llu nan %llu/%llu "
          "exponents [%d, %d]/[%d, %d]",
          what, (unsigned long long)g->blocks, (unsigned long long)c->blocks,
          (unsigned long long)g->zero_blocks, (unsigned long long)c->zero_blocks,
          (unsigned long long)g->nan_blocks, (unsigned long long)c->nan_blocks, g->min_exp,
          g->max_exp, c->min_exp, c->max_exp);
}

static void check_mx(const bufs *b) {
    const mpx_dtype fmts[] = {MPX_F8_E4M3, MPX_F8_E5M2};
    /* Rows of 100 (blocks 32, 32, 32, 4), of 64, one row, and rows leaving a short last row. */
    const size_t rows[] = {100, 64, 0, b->n / 3 + 5};
    for (int f = 0; f < 2; f++)
        for (int rule = 0; rule < 2; rule++)
            for (int r = 0; r < 4; r++) {
                char what[96];
                snprintf(what, sizeof what, "mx %s %s rows of %zu", mpx_dtype_name(fmts[f]),
                         rule ? "round-up" : "floor", rows[r]);
                const mpx_mx_rule rl = rule ? MPX_MX_CEIL : MPX_MX_FLOOR;
                mpx_cast_stats s = start_stats();
                mpx_mx_scales sc_cpu, sc_gpu;
                CUDA_OK_VOID(cudaMemcpy(b->d_st, &s, sizeof s, cudaMemcpyHostToDevice));
                mpx_mx_quantize(fmts[f], rl, b->x, b->cpu, b->n, rows[r], &s, &sc_cpu);
                CHECK_OK(mpx_mx_quantize_cuda(fmts[f], rl, b->d_x, b->d_y, b->n, rows[r], b->d_st,
                                              &sc_gpu));
                compare(b, &s, what);
                same_scales(&sc_gpu, &sc_cpu, what);
                /* Uncounted, without the scales: the same values. */
                CUDA_OK_VOID(cudaMemset(b->d_y, 0, b->n * sizeof(float)));
                CHECK_OK(
                    mpx_mx_quantize_cuda(fmts[f], rl, b->d_x, b->d_y, b->n, rows[r], NULL, NULL));
                compare(b, NULL, what);
            }
}

/* Blocks down columns: [3, 70, 150] (a short block of 6 rows), one [1000, 1000] matrix, and
 * [5, 32, 33] (whole blocks, a column past a warp), both formats and rules, counted with the
 * scales and uncounted; the input's head (its zero run lies along a row here, so a block with a
 * zero among nonzeros). */
static void check_mx_cols(const bufs *full) {
    const mpx_dtype fmts[] = {MPX_F8_E4M3, MPX_F8_E5M2};
    const size_t shapes[3][3] = {{3, 70, 150}, {1, 1000, 1000}, {5, 32, 33}};
    for (int f = 0; f < 2; f++)
        for (int rule = 0; rule < 2; rule++)
            for (int k = 0; k < 3; k++) {
                const size_t *sh = shapes[k];
                bufs b = *full;
                b.n = sh[0] * sh[1] * sh[2];
                char what[96];
                snprintf(what, sizeof what, "mx %s %s columns of [%zu, %zu, %zu]",
                         mpx_dtype_name(fmts[f]), rule ? "round-up" : "floor", sh[0], sh[1],
                         sh[2]);
                const mpx_mx_rule rl = rule ? MPX_MX_CEIL : MPX_MX_FLOOR;
                mpx_cast_stats s = start_stats();
                mpx_mx_scales sc_cpu, sc_gpu;
                CUDA_OK_VOID(cudaMemcpy(b.d_st, &s, sizeof s, cudaMemcpyHostToDevice));
                mpx_mx_quantize_cols(fmts[f], rl, b.x, b.cpu, sh[0], sh[1], sh[2], &s, &sc_cpu);
                CHECK_OK(mpx_mx_quantize_cols_cuda(fmts[f], rl, b.d_x, b.d_y, sh[0], sh[1], sh[2],
                                                   b.d_st, &sc_gpu));
                compare(&b, &s, what);
                same_scales(&sc_gpu, &sc_cpu, what);
                CUDA_OK_VOID(cudaMemset(b.d_y, 0, b.n * sizeof(float)));
                CHECK_OK(mpx_mx_quantize_cols_cuda(fmts[f], rl, b.d_x, b.d_y, sh[0], sh[1], sh[2],
                                                   NULL, NULL));
                compare(&b, NULL, what);
            }
}

static void check_fixed(const bufs *b) {
    const int fracs[] = {14, 8, 0};
    for (int k = 0; k < 3; k++)
        for (int sr = 0; sr < 2; sr++) {
            char what[96];
            snprintf(what, sizeof what, "fixed Q(16, %d) %s", fracs[k], sr ? "sr" : "rne");
            const mpx_fixed_spec sp = {fracs[k], sr ? MPX_ROUND_STOCHASTIC : MPX_ROUND_RNE,
                                       0x1234567890abcdefull, 5, 4097};
            mpx_cast_stats s = start_stats();
            CUDA_OK_VOID(cudaMemcpy(b->d_st, &s, sizeof s, cudaMemcpyHostToDevice));
            mpx_fixed_quantize(&sp, b->x, b->cpu, b->n, &s);
            CHECK_OK(mpx_fixed_quantize_cuda(&sp, b->d_x, b->d_y, b->n, b->d_st));
            compare(b, &s, what);
        }
}

int main(void) {
    if (mpx_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return MPX_TEST_SKIP;
    }
    printf("device 0: %s\n", mpx_cuda_device_name(0));
    const size_t n = (1u << 20) + 77;
    float *x = malloc(n * sizeof *x), *cpu = malloc(n * sizeof *x), *gpu = malloc(n * sizeof *x);
    REQUIRE(x && cpu && gpu, "out of memory");
    fill(x, n);
    float *d_x, *d_y;
    mpx_cast_stats *d_st;
    CUDA_OK(cudaMalloc((void **)&d_x, n * sizeof *x));
    CUDA_OK(cudaMalloc((void **)&d_y, n * sizeof *x));
    CUDA_OK(cudaMalloc((void **)&d_st, sizeof(mpx_cast_stats)));
    CUDA_OK(cudaMemcpy(d_x, x, n * sizeof *x, cudaMemcpyHostToDevice));
    const bufs b = {x, d_x, cpu, gpu, d_y, d_st, n};
    check_fp8(&b);
    check_mx(&b);
    check_mx_cols(&b);
    check_fixed(&b);
    /* In place (dst = src), as the executor calls them. */
    CUDA_OK(cudaMemcpy(d_y, x, n * sizeof *x, cudaMemcpyHostToDevice));
    mpx_fp8_quantize(MPX_F8_E5M2, 0.5f, x, cpu, n, NULL);
    CHECK_OK(mpx_fp8_quantize_cuda(MPX_F8_E5M2, 0.5f, d_y, d_y, n, NULL));
    compare(&b, NULL, "fp8 e5m2 in place");
    CHECK(mpx_fp8_quantize_cuda(MPX_F16, 1.0f, d_x, d_y, n, NULL) == MPX_ERR_UNSUPPORTED &&
              strstr(mpx_error_message(), "f16"),
          "a non-FP8 format refused");
    cudaFree(d_x);
    cudaFree(d_y);
    cudaFree(d_st);
    free(x);
    free(cpu);
    free(gpu);
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
