/* cmd_bench.c — `mpx bench CONFIG [section.key=value ...] [--device cpu|cuda] [--steps N]
 * [--warmup N] [--modes fp32,tf32,fp16,bf16] [--overheads] [--profile] [--json FILE]`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpx/run.h"
#include "mpx/runtime.h"

static void help(void) {
    printf("usage: mpx bench CONFIG [section.key=value ...] [--device cpu|cuda] [--steps N]\n"
           "                 [--warmup N] [--modes fp32,tf32,fp16,bf16] [--overheads] [--profile]\n"
           "                 [--json FILE]\n"
           "\n"
           "Time the training step CONFIG describes on one fixed batch: median/min/max step time,\n"
           "samples/s, achieved GFLOP/s, memory, and every speed as a ratio to an OpenBLAS sgemm\n"
           "of the model's dominant GEMM shape measured in the same run, and the host's waits\n"
           "for the backend per step (`waits`: on a GPU each stalls the host until the device is\n"
           "done; the CPU counts the same calls, so the number is the executor's on both; an\n"
           "adaptive step whose speculative branch merge missed runs its backward pass again\n"
           "with merges that wait: JSON merge_redos_per_step).\n"
           "GFLOP/s is the arithmetic done: the convolutions' and GEMMs' FLOPs, less what an\n"
           "operator left out — products with all-zero gradient rows, rows no loss reads (the\n"
           "CPU's linear layers at BERT's ignored MLM positions; JSON skipped_gflop_per_step).\n"
           "  --device D     cpu or cuda (the same as train.device=D; default: the config's)\n"
           "  --steps N      measured rounds (default 10); --warmup N rounds first (default 2)\n"
           "  --modes LIST   precision modes to compare (default: the config's)\n"
           "  --overheads    also time statistics every step and adaptive scaling (update every\n"
           "                 step / cached) and derive their overhead at every 1 and 100 steps:\n"
           "                 per-round paired estimates, their median and a 95%% interval\n"
           "                 (needs --steps >= 6; more rounds narrow it); adaptive scaling\n"
           "                 also from its own work timed in place (merges, factors), which\n"
           "                 resolves overheads far below the step's spread; and an A/A control\n"
           "                 (a twin of the base against the base, both ways) whose interval\n"
           "                 is the resolution of those estimates on this machine\n"
           "  --profile      per-op time and GFLOP/s of each precision mode (the backend is\n"
           "                 synchronised around every op, so the rounds run slower; a ReLU\n"
           "                 fused into the batch-norm or add before it (train.fuse) is\n"
           "                 timed with that op)\n"
           "  --json FILE    write the results as JSON too\n");
}

/* JSON keys of the overheads, in mpx_overhead_kind order. */
static const char *const overhead_keys[MPX_OVERHEAD_KINDS] = {
    "stats_every_1",           "stats_every_100",           "adaptive_update_every_1",
    "adaptive_update_every_100", "adaptive_update_every_1_parts", "adaptive_update_every_100_parts",
    "control",                 "control_parts"};

static void write_json(FILE *f, const char *config, const mpx_bench_result *r, int tokens) {
    fprintf(f, "{\n  \"config\": \"%s\",\n  \"mpx_version\": \"%s\",\n  \"git_commit\": \"%s\",\n", config,
            mpx_version(), mpx_git_commit());
    fprintf(f, "  \"threads\": %d,\n  \"blas\": \"%s\",\n  \"batch\": %d,\n  \"gflop_per_step\": %.6g,\n",
            mpx_threads_get(), mpx_blas_info(), r->batch, r->flops_per_step * 1e-9);
    fprintf(f, "  \"reference\": {\"gemm_m\": %d, \"gemm_n\": %d, \"gemm_k\": %d, \"sgemm_gflops\": %.6g, "
               "\"sgemm_2048_gflops\": %.6g},\n",
            r->ref_gemm_m, r->ref_gemm_n, r->ref_gemm_k, r->ref_gflops, r->big_gflops);
    fprintf(f, "  \"peak_rss_mib\": %.1f,\n", r->peak_rss / 1048576.0);
    if (r->has_scratch_peak)
        fprintf(f, "  \"device_scratch_peak_mib\": %.1f,\n", r->scratch_peak / 1048576.0);
    if (r->conv16_fallbacks >= 0)
        fprintf(f, "  \"conv16_fallbacks\": %lld,\n", (long long)r->conv16_fallbacks);
    fprintf(f, "  \"variants\": [\n");
    for (int i = 0; i < r->n; i++) {
        const mpx_bench_row *w = &r->rows[i];
        fprintf(f, "    {\"name\": \"%s\", \"mode\": \"%s\", \"median_s\": %.6g, \"min_s\": %.6g, "
                   "\"max_s\": %.6g, \"samples_per_s\": %.6g, \"gflops\": %.6g, \"ratio_to_sgemm\": %.6g, "
                   "\"tokens_per_s\": %.6g, \"arena_mib\": %.1f, \"host_waits_per_step\": %.6g, "
                   "\"merge_redos_per_step\": %.6g, \"skipped_gflop_per_step\": %.6g}%s\n",
                w->name, w->mode, w->median_s, w->min_s, w->max_s, w->samples_per_s, w->gflops,
                w->ratio_ref, w->samples_per_s * tokens, w->arena_bytes / 1048576.0, w->waits_per_step,
                w->redos_per_step, w->skipped_flops * 1e-9, i + 1 < r->n ? "," : "");
    }
    fprintf(f, "  ]");
    if (r->has_overheads) {
        /* each: the median over rounds, then its 95% interval ("ci95", null where the rounds
         * were too few to give one) */
        fprintf(f, ",\n  \"overheads\": {");
        for (int q = 0; q < MPX_OVERHEAD_KINDS; q++) {
            fprintf(f, "%s\"%s\": %.6g, \"%s_ci95\": ", q ? ", " : "", overhead_keys[q], r->overhead[q],
                    overhead_keys[q]);
            if (isfinite(r->overhead_lo[q]) && isfinite(r->overhead_hi[q]))
                fprintf(f, "[%.6g, %.6g]", r->overhead_lo[q], r->overhead_hi[q]);
            else
                fprintf(f, "null");
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n}\n");
}

int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    const char *config = NULL, *json = NULL;
    mpx_bench_opts o = {10, 2, NULL, 0, 0, 1};
    const char **overrides = calloc((size_t)argc, sizeof *overrides);
    int n_over = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--steps") || !strcmp(a, "--warmup") || !strcmp(a, "--modes") || !strcmp(a, "--json") ||
            !strcmp(a, "--device")) {
            if (i + 1 >= argc) {
                free(overrides);
                return cli_usage("bench", "%s needs a value", a);
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--modes")) o.modes = v;
            else if (!strcmp(a, "--device")) {
                if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) {
                    free(overrides);
                    return cli_usage("bench", "--device '%s': expected cpu or cuda", v);
                }
                overrides[n_over++] = !strcmp(v, "cpu") ? "train.device=cpu" : "train.device=cuda";
            } else if (!strcmp(a, "--json")) json = v;
            else {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || n < (a[2] == 's' ? 1 : 0) || n > 100000) {
                    free(overrides);
                    return cli_usage("bench", "%s '%s' is not a valid count", a, v);
                }
                *(a[2] == 's' ? &o.steps : &o.warmup) = (int)n;
            }
        } else if (!strcmp(a, "--overheads")) {
            o.overheads = 1;
        } else if (!strcmp(a, "--profile")) {
            o.profile = 1;
        } else if (a[0] == '-') {
            free(overrides);
            return cli_usage("bench", "unknown option '%s'", a);
        } else if (!config) {
            config = a;
        } else if (strchr(a, '=')) {
            overrides[n_over++] = a;
        } else {
            free(overrides);
            return cli_usage("bench", "unexpected argument '%s'", a);
        }
    }
    if (!config) {
        free(overrides);
        return cli_usage("bench", "missing CONFIG");
    }
    mpx_config *cfg = NULL;
    mpx_run_cfg rc;
    mpx_status st = mpx_run_load(config, overrides, n_over, &cfg, &rc);
    free(overrides);
    mpx_config_free(cfg);
    if (st != MPX_OK) return cli_error("bench", st);
    mpx_bench_result r;
    st = mpx_run_bench(&rc, &o, &r, stdout);
    if (st != MPX_OK) return cli_error("bench", st);

    printf("%s: batch %d, %.3f GFLOP per training step, %d threads, %s\n", config, r.batch,
           r.flops_per_step * 1e-9, mpx_threads_get(), mpx_blas_info());
    printf("reference: OpenBLAS sgemm %dx%dx%d (the dominant GEMM) %.1f GFLOP/s; 2048^3 %.1f GFLOP/s\n",
           r.ref_gemm_m, r.ref_gemm_n, r.ref_gemm_k, r.ref_gflops, r.big_gflops);
    /* Sequence models: tokens per second too (samples x tokens per sample); 0 elsewhere. */
    int tokens = rc.model.task == MPX_TASK_MLM ? rc.data.seq_len : 0;
    printf("%-11s %-5s %9s %9s %9s %10s %9s %8s %9s %6s%s\n", "variant", "mode", "median_s", "min_s",
           "max_s", "samples/s", "GFLOP/s", "/sgemm", "arena_MiB", "waits", tokens ? "  tokens/s" : "");
    for (int i = 0; i < r.n; i++) {
        const mpx_bench_row *w = &r.rows[i];
        printf("%-11s %-5s %9.4f %9.4f %9.4f %10.1f %9.1f %8.3f %9.1f %6.1f", w->name, w->mode,
               w->median_s, w->min_s, w->max_s, w->samples_per_s, w->gflops, w->ratio_ref,
               w->arena_bytes / 1048576.0, w->waits_per_step);
        if (tokens) printf(" %9.0f", w->samples_per_s * tokens);
        printf("\n");
    }
    double skipped = 0;
    for (int i = 0; i < r.n; i++) skipped = fmax(skipped, r.rows[i].skipped_flops);
    if (skipped > 0)
        printf("GFLOP/s counts the arithmetic done: the operators left out up to %.3f GFLOP per "
               "step (products with all-zero gradient rows, rows no loss reads)\n",
               skipped * 1e-9);
    printf("peak RSS: %.1f MiB\n", r.peak_rss / 1048576.0);
    if (r.has_scratch_peak)
        printf("device scratch peak: %.1f MiB (operator scratch and cuDNN's workspace, beyond the "
               "arenas)\n", r.scratch_peak / 1048576.0);
    if (r.conv16_fallbacks >= 0)
        printf("convolution plans on 16-bit data run on FP32 data instead (cuDNN could not run "
               "them): %lld\n", (long long)r.conv16_fallbacks);
    if (r.has_overheads) {
        static const char *const what[MPX_OVERHEAD_KINDS] = {
            "statistics every step", "statistics every 100 steps",
            "adaptive scaling updated every step", "adaptive scaling updated every 100 steps",
            "  the same from its work timed in place", "  the same from its work timed in place",
            "control: base against an identical twin", "  the same from its work timed in place"};
        static const int order[MPX_OVERHEAD_KINDS] = {
            MPX_OVERHEAD_STATS_EVERY_1,         MPX_OVERHEAD_STATS_EVERY_100,
            MPX_OVERHEAD_ADAPTIVE_EVERY_1,      MPX_OVERHEAD_ADAPTIVE_EVERY_1_PARTS,
            MPX_OVERHEAD_ADAPTIVE_EVERY_100,    MPX_OVERHEAD_ADAPTIVE_EVERY_100_PARTS,
            MPX_OVERHEAD_CONTROL,               MPX_OVERHEAD_CONTROL_PARTS};
        printf("overhead of the step (median over rounds, 95%% interval):\n");
        for (int j = 0; j < MPX_OVERHEAD_KINDS; j++) {
            const int q = order[j];
            printf("  %-41s %+8.3f%%", what[q], 100 * r.overhead[q]);
            if (isfinite(r.overhead_lo[q]) && isfinite(r.overhead_hi[q]))
                printf("   [%+.3f%%, %+.3f%%]\n", 100 * r.overhead_lo[q], 100 * r.overhead_hi[q]);
            else
                printf("   (interval needs --steps >= 6)\n");
        }
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "mpx bench: cannot write '%s'\n", json);
            return EXIT_FAIL;
        }
        write_json(f, config, &r, tokens);
        if (fclose(f) != 0) {
            fprintf(stderr, "mpx bench: cannot write '%s'\n", json);
            return EXIT_FAIL;
        }
    }
    return EXIT_OK;
}
