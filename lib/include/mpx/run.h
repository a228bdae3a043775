/* run.h — a training run: the config schema, the typed run configuration, and the driver.
 *
 * mpx_run_schema lists every config key the `mpx` command accepts, with its default and
 * range; mpx_run_cfg_from validates a parsed config against it, resolves it into typed
 * structs and rejects contradictions, naming the file, line and key. mpx_run_train runs the
 * training loop: data -> forward -> backward (loss scaling, statistics) -> optimizer ->
 * run log, with evaluation and checkpoints at their intervals.
 */
#ifndef MPX_RUN_H
#define MPX_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#include "mpx/config.h"
#include "mpx/optim.h"
#include "mpx/precision.h"
#include "mpx/scaling.h"
#include "mpx/models.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const mpx_cfg_key mpx_run_schema[];
extern const size_t mpx_run_schema_len;

typedef enum { MPX_TASK_CLASSIFY = 0, MPX_TASK_MLM, MPX_TASK_DETECT } mpx_task_kind;

typedef struct {
    char arch[32];
    mpx_task_kind task;    /* from the architecture: resnet*, vgg classify, bert_* mlm, ssd detect */
    mpx_resnet_cfg resnet; /* classify, resnet* */
    mpx_vgg_cfg vgg;       /* classify, vgg */
    mpx_bert_cfg bert;     /* mlm */
    mpx_ssd_cfg ssd;       /* detect */
} mpx_model_cfg;

typedef struct {
    char dataset[32];        /* cifar10 | fashion_mnist | imagefolder | synthetic | text |
                                scenes | voc */
    char root[1024], cache_dir[1024], shared_dir[1024];
    int seq_len, vocab_size; /* text */
    double mask_prob;        /* text */
    int64_t scenes_train, scenes_eval; /* scenes */
    int resolution;          /* 0: the dataset's own */
    int crop_pad, flip, normalize;
    int64_t train_subset, eval_subset;
} mpx_data_cfg;

enum { MPX_INJECT_MAX = 16 };

typedef struct {
    int64_t steps;
    int batch_size;
    mpx_optim_cfg optim;
    mpx_lr_schedule lr;
    uint64_t seed;
    int threads;
    char isa[8];             /* runtime.h mpx_cpu_limit: "native" or "avx2" (the reference path) */
    mpx_device device;
    int fuse;                /* mpx_graph_fuse before compiling */
    int sync_bn;             /* mpx_graph_sync_bn: batch-norm over every rank's rows */
    int64_t eval_every, eval_batches, checkpoint_every;
    char init_from[1024];    /* a checkpoint whose same-named weights start the run ("": none) */
    int max_nonfinite;
    int64_t inject_nonfinite[MPX_INJECT_MAX]; /* testing hook: steps whose loss scale is x2^100; -1 after the last */
    int inject_rank;         /* testing hook: the rank that injects (-1: every rank) */
    /* A data-parallel run (comm.h): the number of ranks and this one's, set by the command from
     * the communicator, not by the config; batch_size is the global batch. */
    int ranks, rank;
} mpx_train_cfg;

typedef struct {
    int64_t stats_every, log_every;
    int progress;            /* -1 never, 0 auto (TTY), 1 always */
    unsigned whatif;         /* what-if recipes (stats.h: bit k = MPX_WHATIF_k) */
} mpx_log_cfg;

typedef struct {
    mpx_model_cfg model;
    mpx_data_cfg data;
    mpx_train_cfg train;
    mpx_precision precision;
    mpx_scaling_cfg scaling;
    mpx_log_cfg log;
} mpx_run_cfg;

/* Validate `cfg` against mpx_run_schema and fill `rc`. MPX_ERR_INPUT names file:line:key. */
mpx_status mpx_run_cfg_from(mpx_config *cfg, mpx_run_cfg *rc);

/* Load CONFIG, apply overrides ("section.key=value"), validate and resolve. *cfg_out is set
 * (caller frees) when the file parsed, even if validation failed. */
mpx_status mpx_run_load(const char *path, const char *const *overrides, int n_overrides,
                        mpx_config **cfg_out, mpx_run_cfg *rc);

/* What the driver reports after every step and evaluation (the `mpx` command prints it). */
typedef struct {
    int64_t step, steps;     /* the step just done (0-based) and the total */
    double loss, lr, loss_scale;
    int skipped;
    double samples_per_s;    /* average over the run so far, excluding evaluation */
    double elapsed_s;        /* training wall time so far (a resumed run's includes its past) */
    double eta_s;            /* training time left at this process's speed */
    int is_eval;             /* 1: an evaluation just finished (eval_loss, eval_metric set) */
    double eval_loss, eval_metric;
    const char *metric_name; /* "top1" | "mlm_acc" | "mAP" */
    int stats_step;          /* 1: statistics were recorded this step */
    double underflow_rate;   /* pooled act-grad underflow of the last statistics step */
} mpx_step_report;

typedef struct {
    const char *out;         /* run file path */
    int force;               /* overwrite an existing run file */
    const char *resume;      /* checkpoint to resume from, or NULL */
    const char *checkpoint_path; /* where checkpoints go (NULL: none) */
    const char *config_text; /* the resolved config (stored in the run file) */
    const char *config_name; /* for messages */
    void (*report)(const mpx_step_report *r, void *ctx); /* may be NULL */
    void *report_ctx;
    /* When it becomes nonzero (a signal handler sets it), the run stops after the step in
     * progress: a checkpoint, the run file flushed and marked `stopped` with the reason, and
     * mpx_run_train returns MPX_OK with result.interrupted = that value (the signal number).
     * --resume then continues as if nothing had happened. May be NULL. */
    const volatile sig_atomic_t *stop;
} mpx_train_opts;

typedef struct {
    int64_t start_step;      /* the step training started at (the checkpoint's when resuming) */
    int64_t steps_done, skipped;
    double final_loss, final_metric, samples_per_s, wall_s;
    int stopped_early;       /* divergence stop */
    int interrupted;         /* stopped on request (opts.stop): its value, the signal number */
} mpx_train_result;

mpx_status mpx_run_train(const mpx_run_cfg *rc, const mpx_train_opts *o, mpx_train_result *res);

/* Print what a run would build: data, model size, FLOPs per step, the memory plan. */
mpx_status mpx_run_describe(const mpx_run_cfg *rc, FILE *f);

/* ---- benchmarks (mpx bench) ---- */
typedef struct {
    int steps, warmup;       /* measured rounds and warm-up rounds */
    const char *modes;       /* "fp32,tf32,fp16,bf16" (any of them) or NULL: the config's mode */
    int overheads;           /* also time statistics and adaptive-scaling variants */
    int profile;             /* per-op profile of the first variant */
    int progress;
} mpx_bench_opts;

enum { MPX_BENCH_MAX_RANKS = 16 };

typedef struct {
    char name[16], mode[8];
    char rounding[12];       /* the variant's storage rounding: "rne" or "stochastic" */
    int master_weights;      /* 1: FP32 master weights (or an FP32 mode); 0: pure low precision */
    double median_s, min_s, max_s, samples_per_s, gflops, ratio_ref, arena_bytes;
    double waits_per_step;   /* the host's waits for the backend per measured step (backend.h) */
    double redos_per_step;   /* backward passes run again after a speculative adaptive merge
                              * missed (mpx_graph_merge_redos), per measured step */
    double skipped_flops;    /* per step: GEMM FLOPs the operators left out (products with
                              * all-zero gradient rows, rows no loss reads; backend.h:
                              * skipped_flops); gflops counts the rest */
    /* A data-parallel run (mpirun): per step, the gradient all-reduce's seconds and the MB each
     * rank contributes; every rank's median step time (rank_median_s[r], 0 beyond ranks). */
    double allreduce_s, allreduce_mb;
    double rank_median_s[MPX_BENCH_MAX_RANKS];
} mpx_bench_row;

typedef enum {
    MPX_OVERHEAD_STATS_EVERY_1 = 0,
    MPX_OVERHEAD_STATS_EVERY_100,
    MPX_OVERHEAD_ADAPTIVE_EVERY_1,
    MPX_OVERHEAD_ADAPTIVE_EVERY_100,
    /* the same two from the scaling work timed in place (mpx_graph_time_scaling) */
    MPX_OVERHEAD_ADAPTIVE_EVERY_1_PARTS,
    MPX_OVERHEAD_ADAPTIVE_EVERY_100_PARTS,
    /* an A/A control: a twin of the base variant against the base, whole step and in place;
     * its interval is the resolution of the estimates above on this machine */
    MPX_OVERHEAD_CONTROL,
    MPX_OVERHEAD_CONTROL_PARTS,
    MPX_OVERHEAD_KINDS
} mpx_overhead_kind;

typedef struct {
    int n;
    mpx_bench_row rows[12];
    int ranks;                     /* data-parallel ranks (1: one process) */
    int batch;
    int64_t eval_examples;         /* what one evaluation of the config reads */
    double flops_per_step;
    /* The reference (/sgemm): the FLOP-weighted rate of the faster sgemm on the graph's own
     * conv/linear GEMM shapes (the ref_shapes largest, ref_flops_share of their FLOPs). */
    double ref_gflops;
    int ref_shapes;
    double ref_flops_share;
    int ref_gemm_m, ref_gemm_n, ref_gemm_k; /* the largest shape */
    double big_gflops;             /* 2048^3 through the faster library on the largest shape */
    double ref_by[2], big_by[2];   /* the largest shape and 2048^3 through [0] oneDNN, [1]
                                    * OpenBLAS (the regression baselines' references) */
    int ref_impl;                  /* the faster of the two on the largest shape */
    size_t peak_rss;
    /* device backends: the most memory the operators held beyond the arenas (backend.h:
     * scratch_peak), over every variant; has_scratch_peak 0 on the CPU */
    size_t scratch_peak;
    int has_scratch_peak;
    int64_t conv16_fallbacks; /* backend.h: conv16_fallbacks, after every variant; -1 on the CPU */
    int has_overheads;
    /* Fractions of the base step, indexed by mpx_overhead_kind: the median over rounds of each
     * round's paired estimate, and a 95% confidence interval for it (+-inf: too few rounds). */
    double overhead[MPX_OVERHEAD_KINDS], overhead_lo[MPX_OVERHEAD_KINDS], overhead_hi[MPX_OVERHEAD_KINDS];
} mpx_bench_result;

mpx_status mpx_run_bench(const mpx_run_cfg *rc, const mpx_bench_opts *o, mpx_bench_result *res,
                         FILE *out);
/* Median of v[0..n) (n >= 1) with a distribution-free 95% confidence interval [lo, hi] for it:
 * the order statistics x_(k) and x_(n+1-k) for the largest k with P(Binomial(n, 1/2) < k) <=
 * 0.025, so the interval holds the true median with probability >= 95% whatever the
 * distribution. With n < 6 no such k exists: lo = -inf, hi = +inf. Sorts v. */
double mpx_median_ci(double *v, int n, double *lo, double *hi);

/* Evaluate a checkpoint on its run's evaluation set with the config stored in it (overrides
 * such as train.eval_batches=10 apply on top). Options (NULL: none): `bootstrap` resamples
 * of the evaluation units (images; sequences for mlm) give the metric's and the loss's
 * sampling spread; `units` (classify, mlm) is a path that receives each unit's loss and hits,
 * `detections` (detect) one that receives the detections and ground truth, as TSV (written
 * to a temporary name and renamed, so a failure leaves no partial file). */
typedef struct {
    int bootstrap;
    const char *units, *detections;
} mpx_eval_opts;
typedef struct {
    char model[64], dataset[256];
    int64_t step;
    double loss, metric;
    const char *metric_name;  /* "top1" */
    int64_t units;                          /* resampled units (0 without a bootstrap) */
    double metric_sd, metric_lo, metric_hi; /* over the resamples; lo, hi: 5th, 95th percentile */
    double loss_sd, loss_lo, loss_hi;       /* the same for the loss (NaN for detect) */
} mpx_eval_result;
mpx_status mpx_run_eval_checkpoint(const char *checkpoint, const char *const *overrides,
                                   int n_overrides, const mpx_eval_opts *opts,
                                   mpx_eval_result *res);

#ifdef __cplusplus
}
#endif

#endif
