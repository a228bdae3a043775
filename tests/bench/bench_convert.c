/* bench_convert.c — throughput of the bulk conversions and of mpx_cast.
 *
 * GB/s = (bytes read + bytes written) / time, best of REPS runs after a warm-up, on 64 MiB of
 * FP32 input (16 Mi elements) drawn log-normally like a gradient (so the histogram sees many
 * binades). Each implementation this CPU has (avx512, f16c, portable c) is measured, with the
 * OpenMP thread count given as the first argument (default: all) and with one thread.
 * Usage: bench_convert [threads]
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "mpx/runtime.h"

enum { REPS = 5 };

static const size_t N = (size_t)16 << 20; /* 64 MiB of FP32 */
static float *g_x, *g_y;
static uint16_t *g_h;

typedef enum { ENC_F16, DEC_F16, ENC_BF16, DEC_BF16, CAST } op_kind;

static double run_once(op_kind op, const mpx_cast_spec *spec) {
    double t0 = mpx_now();
    switch (op) {
    case ENC_F16: mpx_encode(MPX_F16, g_x, g_h, N); break;
    case DEC_F16: mpx_decode(MPX_F16, g_h, g_y, N); break;
    case ENC_BF16: mpx_encode(MPX_BF16, g_x, g_h, N); break;
    case DEC_BF16: mpx_decode(MPX_BF16, g_h, g_y, N); break;
    case CAST: mpx_cast(spec, g_x, g_h, N); break;
    }
    return mpx_now() - t0;
}

static double best_gbs(op_kind op, const mpx_cast_spec *spec) {
    run_once(op, spec);
    double best = INFINITY;
    for (int r = 0; r < REPS; r++) {
        double t = run_once(op, spec);
        if (t < best) best = t;
    }
    return (double)N * 6.0 / best / 1e9; /* 4 bytes FP32 + 2 bytes 16-bit, either direction */
}

static void row(const char *name, op_kind op, const mpx_cast_spec *spec, int threads) {
    const char *impls[] = {"avx512", "f16c", "c"};
    printf("%-34s", name);
    for (int k = 0; k < 3; k++) {
        int have = mpx_convert_limit(impls[k]);
        /* BF16 has no F16C version: that column would repeat the portable one. */
        if (!have ||
            ((op == ENC_BF16 || op == DEC_BF16 || (spec && spec->dst == MPX_BF16)) && k == 1)) {
            printf(" %10s", "-");
            continue;
        }
        omp_set_num_threads(threads);
        printf(" %10.2f", best_gbs(op, spec));
        fflush(stdout);
    }
    mpx_convert_limit(NULL);
    printf("\n");
}

static void table(int threads) {
    printf("\n%d thread(s); GB/s (read + written), 64 MiB FP32 <-> 32 MiB 16-bit\n", threads);
    printf("%-34s %10s %10s %10s\n", "operation", "avx512", "f16c", "c");
    mpx_cast_stats st = {0};
    mpx_cast_spec s;
    row("encode f32->f16", ENC_F16, 0, threads);
    row("decode f16->f32", DEC_F16, 0, threads);
    row("encode f32->bf16", ENC_BF16, 0, threads);
    row("decode bf16->f32", DEC_BF16, 0, threads);
    s = mpx_cast_plain(MPX_F16);
    s.scale = 1024.0f;
    row("cast f16 rne, scale, no stats", CAST, &s, threads);
    s.stats = &st;
    row("cast f16 rne, scale, stats", CAST, &s, threads);
    s.rounding = MPX_ROUND_STOCHASTIC;
    s.stats = 0;
    row("cast f16 stochastic, no stats", CAST, &s, threads);
    s.stats = &st;
    row("cast f16 stochastic, stats", CAST, &s, threads);
    s = mpx_cast_plain(MPX_BF16);
    row("cast bf16 rne, no stats", CAST, &s, threads);
    s.stats = &st;
    row("cast bf16 rne, stats", CAST, &s, threads);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_num_procs();
    g_x = malloc(N * sizeof *g_x);
    g_y = malloc(N * sizeof *g_y);
    g_h = malloc(N * sizeof *g_h);
    if (!g_x || !g_y || !g_h) {
        fprintf(stderr, "bench_convert: out of memory\n");
        return 1;
    }
    /* |x| = exp(N(-10, 3)), random sign: spans ~2^-28 .. 2^-1, like weight gradients. */
    omp_set_num_threads(threads);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)N; i++) {
        float z = mpx_rand_normal(7, MPX_RNG_TEST, (uint64_t)i);
        g_x[i] = expf(-10.0f + 3.0f * z) * ((i & 1) ? -1.0f : 1.0f);
        g_y[i] = 0;
        g_h[i] = 0;
    }
    printf("bench_convert: CPU features: %s; best implementation: %s\n", mpx_cpu_features_str(),
           mpx_convert_impl());
    table(threads);
    if (threads != 1) table(1);
    free(g_x);
    free(g_y);
    free(g_h);
    return 0;
}
