/* cmd_bench.c — `mpx bench CONFIG [section.key=value ...] [--device cpu|cuda] [--steps N]
 * [--warmup N] [--modes fp32,tf32,fp16,bf16] [--overheads] [--profile] [--json FILE]`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpx/comm.h"
#include "json.h"
#include "mpx/run.h"
#include "mpx/runtime.h"

static void help(void) {
    printf("usage: mpx bench CONFIG [section.key=value ...] [--device cpu|cuda] [--steps N]\n"
           "                 [--warmup N] [--modes fp32,tf32,fp16,bf16] [--overheads] [--profile]\n"
           "                 [--json FILE]\n"
           "\n"
           "Time the training step CONFIG describes on one fixed batch: median/min/max step time,\n"
           "samples/s, achieved GFLOP/s, memory, and every speed as a ratio to a reference\n"
           "measured in the same run: the FLOP-weighted rate of the faster of oneDNN's and\n"
           "OpenBLAS's sgemm on the graph's largest GEMM shapes, and the host's waits\n"
           "for the backend per step (`waits`: on a GPU each stalls the host until the device is\n"
           "done; the CPU counts the same calls, so the number is the executor's on both; an\n"
           "adaptive step whose speculative branch merge missed runs its backward pass again\n"
           "with merges that wait: JSON merge_redos_per_step).\n"
           "GFLOP/s is the arithmetic done: the convolutions' and GEMMs' FLOPs, less what an\n"
           "operator left out — products with all-zero gradient rows, rows no loss reads (the\n"
           "CPU's linear layers at BERT's ignored MLM positions; JSON skipped_gflop_per_step).\n"
           "  --device D     cpu or cuda (the same as train.device=D; default: the config's)\n"
           "  --steps N      measured rounds (default 10); --warmup N rounds first (default 2)\n"
           "  --modes LIST   precision modes to compare (default: the config's); the config's\n"
           "                 mode runs with its whole precision section (rounding, master\n"
           "                 weights, FP8 recipe, fixed-point bits), any other mode with\n"
           "                 that mode's defaults; none of them with loss scaling\n"
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

static const char *const ref_impl_name[2] = {"oneDNN", "OpenBLAS"};

/* The precision mode a result row ran in. */
static int row_mode(const mpx_bench_row *row, mpx_precision_mode *m) {
    static const mpx_precision_mode all[] = {MPX_MODE_FP32, MPX_MODE_FP16, MPX_MODE_BF16,
                                             MPX_MODE_TF32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(row->mode, mpx_precision_mode_name(all[i])) == 0) return *m = all[i], 1;
    return 0;
}

/* A data-parallel bench: every rank's step, and the gradient all-reduce's share and bytes. */
static void print_ranks(const mpx_bench_result *r) {
    printf("%d ranks (%s), batch %d each:\n", r->ranks, mpx_comm_library(), r->batch / r->ranks);
    for (int i = 0; i < r->n; i++) {
        const mpx_bench_row *w = &r->rows[i];
        printf("  %-11s all-reduce %.2f MB and %.4f s per step (%.1f%% of rank 0's step); step per "
               "rank:", w->name, w->allreduce_mb, w->allreduce_s, 100 * w->allreduce_s / w->median_s);
        for (int k = 0; k < r->ranks && k < MPX_BENCH_MAX_RANKS; k++)
            printf(" %.4f", w->rank_median_s[k]);
        printf(" s\n");
    }
}

static void write_json(FILE *f, const char *config, const mpx_run_cfg *rc,
                       const mpx_bench_result *r, int tokens, int cpu, int direct_io) {
    json_writer w = {f, 0, {0}};
    json_begin_object(&w, NULL);
    json_string(&w, "config", config);
    json_string(&w, "mpx_version", mpx_version());
    json_string(&w, "git_commit", mpx_git_commit());
    json_string(&w, "host", mpx_host_str());
    json_integer(&w, "threads", mpx_threads_get());
    json_string(&w, "blas", mpx_blas_info());
    json_integer(&w, "batch", r->batch);
    json_number(&w, "gflop_per_step", r->flops_per_step * 1e-9);
    /* the config's schedule, for estimates of a whole run (experiments/estimate.py) */
    json_begin_object(&w, "schedule");
    json_integer(&w, "steps", rc->train.steps);
    json_integer(&w, "eval_every", rc->train.eval_every);
    json_integer(&w, "eval_examples", r->eval_examples);
    json_end_object(&w);
    json_begin_object(&w, "reference");
    json_integer(&w, "gemm_m", r->ref_gemm_m);
    json_integer(&w, "gemm_n", r->ref_gemm_n);
    json_integer(&w, "gemm_k", r->ref_gemm_k);
    json_number(&w, "sgemm_gflops", r->ref_gflops);
    json_integer(&w, "sgemm_shapes", r->ref_shapes);
    json_number(&w, "sgemm_flops_share", r->ref_flops_share);
    json_number(&w, "sgemm_2048_gflops", r->big_gflops);
    json_string(&w, "sgemm_impl", ref_impl_name[r->ref_impl]);
    json_number(&w, "onednn_gflops", r->ref_by[0]);
    json_number(&w, "openblas_gflops", r->ref_by[1]);
    json_number(&w, "onednn_2048_gflops", r->big_by[0]);
    json_number(&w, "openblas_2048_gflops", r->big_by[1]);
    json_end_object(&w);
    if (mpx_blas_warning()) json_string(&w, "blas_warning", mpx_blas_warning());
    if (cpu) {
        json_begin_object(&w, "paths");
        for (int i = 0; i < r->n; i++) {
            char buf[320];
            mpx_precision_mode m;
            int seen = 0; /* one key per mode: the variants of --overheads share theirs */
            for (int k = 0; k < i; k++) seen |= strcmp(r->rows[k].mode, r->rows[i].mode) == 0;
            if (!seen && row_mode(&r->rows[i], &m))
                json_string(&w, r->rows[i].mode, cli_op_path(m, direct_io, buf, sizeof buf));
        }
        json_end_object(&w);
    }
    json_number(&w, "peak_rss_mib", r->peak_rss / 1048576.0);
    if (r->has_scratch_peak) json_number(&w, "device_scratch_peak_mib", r->scratch_peak / 1048576.0);
    if (r->conv16_fallbacks >= 0) json_integer(&w, "conv16_fallbacks", (long long)r->conv16_fallbacks);
    json_begin_array(&w, "variants");
    for (int i = 0; i < r->n; i++) {
        const mpx_bench_row *v = &r->rows[i];
        json_begin_object(&w, NULL);
        json_string(&w, "name", v->name);
        json_string(&w, "mode", v->mode);
        json_string(&w, "rounding", v->rounding);
        json_bool(&w, "master_weights", v->master_weights);
        json_number(&w, "median_s", v->median_s);
        json_number(&w, "min_s", v->min_s);
        json_number(&w, "max_s", v->max_s);
        json_number(&w, "samples_per_s", v->samples_per_s);
        json_number(&w, "gflops", v->gflops);
        json_number(&w, "ratio_to_sgemm", v->ratio_ref);
        json_number(&w, "tokens_per_s", v->samples_per_s * tokens);
        json_number(&w, "arena_mib", v->arena_bytes / 1048576.0);
        json_number(&w, "host_waits_per_step", v->waits_per_step);
        json_number(&w, "merge_redos_per_step", v->redos_per_step);
        json_number(&w, "skipped_gflop_per_step", v->skipped_flops * 1e-9);
        json_end_object(&w);
    }
    json_end_array(&w);
    if (r->has_overheads) {
        /* each: the median over rounds, then its 95% interval ("ci95", null where the rounds
         * were too few to give one) */
        json_begin_object(&w, "overheads");
        for (int q = 0; q < MPX_OVERHEAD_KINDS; q++) {
            char ci[64];
            snprintf(ci, sizeof ci, "%s_ci95", overhead_keys[q]);
            json_number(&w, overhead_keys[q], r->overhead[q]);
            if (isfinite(r->overhead_lo[q]) && isfinite(r->overhead_hi[q])) {
                json_begin_array(&w, ci);
                json_number(&w, NULL, r->overhead_lo[q]);
                json_number(&w, NULL, r->overhead_hi[q]);
                json_end_array(&w);
            } else {
                json_null(&w, ci);
            }
        }
        json_end_object(&w);
    }
    json_end_object(&w);
}

int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    const char *json = NULL, *device = NULL;
    mpx_bench_opts o = {10, 2, NULL, 0, 0, 1};
    static const struct option opts[] = {
        {"steps", required_argument, NULL, 's'}, {"warmup", required_argument, NULL, 'w'},
        {"modes", required_argument, NULL, 'm'}, {"json", required_argument, NULL, 'j'},
        {"device", required_argument, NULL, 'd'}, {"overheads", no_argument, NULL, 'O'},
        {"profile", no_argument, NULL, 'P'},     {NULL, 0, NULL, 0}};
    cli_getopt_start();
    for (int c; (c = cli_getopt("bench", argc, argv, opts)) != -1;) {
        if (c == CLI_BAD) return EXIT_USAGE;
        if (c == 'm') o.modes = optarg;
        if (c == 'j') json = optarg;
        if (c == 'O') o.overheads = 1;
        if (c == 'P') o.profile = 1;
        if (c == 'd') {
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0)
                return cli_usage("bench", "--device '%s': expected cpu or cuda", optarg);
            device = !strcmp(optarg, "cpu") ? "train.device=cpu" : "train.device=cuda";
        }
        if (c == 's' || c == 'w') {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < (c == 's' ? 1 : 0) || n > 100000)
                return cli_usage("bench", "--%s '%s' is not a valid count",
                                 c == 's' ? "steps" : "warmup", optarg);
            *(c == 's' ? &o.steps : &o.warmup) = (int)n;
        }
    }
    if (optind >= argc) return cli_usage("bench", "missing CONFIG");
    const char *config = argv[optind];
    const int n_args = argc - optind - 1;
    if (!cli_overrides_only("bench", n_args, argv + optind + 1)) return EXIT_USAGE;
    const char **overrides = calloc((size_t)n_args + 1, sizeof *overrides);
    if (!overrides) return cli_usage("bench", "out of memory");
    int n_over = 0;
    for (int i = 0; i < n_args; i++) overrides[n_over++] = argv[optind + 1 + i];
    if (device) overrides[n_over++] = device;
    mpx_config *cfg = NULL;
    mpx_run_cfg rc;
    mpx_status st = mpx_run_load(config, overrides, n_over, &cfg, &rc);
    free(overrides);
    mpx_config_free(cfg);
    if (st != MPX_OK) return cli_error("bench", st);
    /* Under mpirun: every rank steps its slice of the batch; rank 0 reports. */
    rc.train.ranks = mpx_comm_size();
    rc.train.rank = mpx_comm_rank();
    if (rc.train.batch_size % rc.train.ranks != 0)
        return cli_usage("bench", "train.batch_size = %d is not a multiple of the %d ranks",
                         rc.train.batch_size, rc.train.ranks);
    if (rc.train.rank != 0) o.progress = 0;
    mpx_bench_result r;
    st = mpx_run_bench(&rc, &o, &r, rc.train.rank == 0 ? stdout : NULL);
    if (st != MPX_OK) return cli_error("bench", st);
    if (rc.train.rank != 0) return EXIT_OK;

    printf("%s: batch %d, %.3f GFLOP per training step, %d threads, host %s\n", config, r.batch,
           r.flops_per_step * 1e-9, mpx_threads_get(), mpx_host_str());
    printf("blas: %s\n", mpx_blas_info());
    if (mpx_blas_warning()) printf("warning: %s\n", mpx_blas_warning());
    printf("reference sgemm: %.1f GFLOP/s, the faster of oneDNN and OpenBLAS on each of the "
           "graph's %d largest GEMM shapes (%.0f%% of its conv/linear FLOPs), FLOP-weighted; "
           "largest %dx%dx%d: oneDNN %.1f, OpenBLAS %.1f; 2048^3: oneDNN %.1f, OpenBLAS %.1f\n",
           r.ref_gflops, r.ref_shapes, 100 * r.ref_flops_share, r.ref_gemm_m, r.ref_gemm_n,
           r.ref_gemm_k, r.ref_by[0], r.ref_by[1], r.big_by[0], r.big_by[1]);
    if (rc.train.device == MPX_DEV_CPU) {
        printf("paths (cpu):\n");
        for (int i = 0; i < r.n; i++) {
            int dup = 0; /* one line per mode */
            for (int j = 0; j < i; j++) dup |= strcmp(r.rows[j].mode, r.rows[i].mode) == 0;
            mpx_precision_mode m;
            if (!dup && row_mode(&r.rows[i], &m))
                cli_print_op_paths(stdout, "  ", m, rc.precision.direct_io);
        }
    }
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
    if (r.ranks > 1) print_ranks(&r);
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
        write_json(f, config, &rc, &r, tokens, rc.train.device == MPX_DEV_CPU, rc.precision.direct_io);
        if (fclose(f) != 0) {
            fprintf(stderr, "mpx bench: cannot write '%s'\n", json);
            return EXIT_FAIL;
        }
    }
    return EXIT_OK;
}
