/* bench.c — `mpx bench`: how fast a configured training step runs, and what its parts cost.
 *
 * Every speed is reported next to a reference measured in the same process (the faster of
 * oneDNN's and OpenBLAS's sgemm on the model's dominant GEMM shape, both reported, and a large
 * square one), because shared machines are noisy: the ratio travels between machines and runs,
 * the absolute number does not.
 * Variants (precision modes; statistics and adaptive-scaling settings) are timed in
 * interleaved rounds on one fixed batch, so drift hits them all alike.
 *
 * Overheads are derived from per-step medians of five variants of the configured precision:
 *   base       no statistics, no loss scaling
 *   stats      statistics every step
 *   als_update adaptive scaling recomputing every factor (update_every = 1)
 *   als_cached adaptive scaling reusing cached factors (a step between updates)
 *   control    a twin of base (its own graph and buffers, the same work)
 * so that statistics every N steps cost (stats - base) / N, and adaptive scaling with
 * update_every = N costs ((N-1) als_cached + als_update) / N - base. Each overhead is computed
 * per round from that round's steps (the variants of one round run back to back, so they
 * share the machine's state), and reported as the median over rounds with a distribution-free
 * 95% confidence interval for that median (order statistics): an overhead smaller than the
 * interval's width is not resolved by timing on that machine, and the interval says so.
 *
 * Adaptive scaling at update_every = 100 costs far less than a step's own spread, so it is
 * also measured from its parts: base, als_update and als_cached time in place the graph-level
 * work loss scaling does (mpx_graph_time_scaling: the fan-out merges, which under adaptive
 * scaling also take each branch's magnitude, and the adaptive factors, whose update steps
 * take the moments of dy and W). Per round, ((N-1) w_cached + w_update) / N - w_base over
 * the base step is the same overhead counted from those parts only; its spread is that of a
 * few milliseconds, not of the step. It leaves out what the parts do to the cache of the ops
 * after them, and the cast that carries a factor other than 1 (a multiply per element inside
 * a pass that runs anyway): the update-every-step estimate from parts, beside the whole-step
 * one, shows how much that is.
 *
 * The control is an A/A comparison: control against base by the same two estimators. It has
 * no work of its own to find, so its interval is what the estimators resolve on this machine
 * (different buffers, the data loader's thread, other tenants): an overhead inside the
 * control's interval is not distinguished from nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "mpx/ops.h"
#include "mpx/comm.h"
#include "mpx/runtime.h"
#include "task.h"

typedef struct {
    const char *name;
    mpx_precision prec;
    mpx_scaling_cfg scaling;
    int stats;        /* statistics every step */
    int64_t step;     /* the step number handed to backward (drives update_every) */
    mpx_graph *g;
    mpx_optimizer *opt;
    mpx_layer_stats *ls;
    double *t;        /* per-round step seconds */
    double *w;        /* per-round seconds of the scaling work inside the step */
    int64_t waits;    /* the host's waits for the backend over the measured rounds */
    int64_t redos;    /* backward passes run again over them (speculative merges missed) */
    double skipped;   /* FLOPs its operators left out over the measured rounds */
    double dist_s, dist_bytes; /* the gradient all-reduce over the measured rounds */
} variant;

/* The overhead variants, in round order after the precision modes (at most MAX_MODES of those:
 * one per mode). */
enum { OV_BASE, OV_STATS, OV_ALS_UPDATE, OV_ALS_CACHED, OV_CONTROL, OV_COUNT };
enum { MAX_MODES = 6, MAX_VARIANTS = MAX_MODES + OV_COUNT };
_Static_assert(MAX_VARIANTS <= (int)(sizeof(((mpx_bench_result *)0)->rows) / sizeof(mpx_bench_row)),
               "every variant needs a result row");

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return NAN;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

double mpx_median_ci(double *v, int n, double *lo, double *hi) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double cdf = 0; /* P(Binomial(n, 1/2) < k), in log space per term: n may exceed 1000 */
    int k = 0;
    for (int i = 0; i < n; i++) {
        double p = exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) - n * log(2.0));
        if (cdf + p > 0.025) break;
        cdf += p;
        k = i + 1;
    }
    *lo = k > 0 ? v[k - 1] : -INFINITY;
    *hi = k > 0 ? v[n - k] : INFINITY;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* GFLOP/s of C[m,n] = A[m,k] B[k,n] through `impl` (oneDNN or OpenBLAS), best of a few
 * repetitions. */
static double sgemm_rate(mpx_gemm_impl impl, int m, int n, int k) {
    float *a = calloc((size_t)m * k, sizeof *a), *b = calloc((size_t)k * n, sizeof *b),
          *c = calloc((size_t)m * n, sizeof *c);
    mpx_cpu_ctx *ctx = mpx_cpu_ctx_create();
    if (!a || !b || !c || !ctx) {
        free(a);
        free(b);
        free(c);
        mpx_cpu_ctx_free(ctx);
        return NAN;
    }
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)((i * 7919) % 13) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)((i * 104729) % 11) * 0.1f;
    mpx_sgemm_force(ctx, impl);
    double flops = 2.0 * m * n * k, best = 1e30;
    int reps = (int)fmin(20, fmax(3, 2e10 / flops));
    mpx_sgemm(ctx, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = mpx_now();
        mpx_sgemm(ctx, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
        best = fmin(best, mpx_now() - t0);
    }
    mpx_cpu_ctx_free(ctx);
    free(a);
    free(b);
    free(c);
    return flops / best * 1e-9;
}

static mpx_status one_step(variant *v, double *seconds, double *scaling_seconds) {
    const int64_t waits0 = mpx_graph_host_waits(v->g), redos0 = mpx_graph_merge_redos(v->g);
    const mpx_backend *be = mpx_graph_backend(v->g);
    const double skipped0 = be->skipped_flops ? be->skipped_flops(be) : 0;
    double ds0, db0, ds1, db1;
    mpx_graph_allreduce_stats(v->g, &ds0, &db0);
    double w0 = mpx_graph_scaling_seconds(v->g), t0 = mpx_now();
    mpx_graph_set_step(v->g, v->step);
    MPX_TRY(mpx_graph_forward(v->g, 1));
    mpx_backward_opts bo = {&v->scaling, v->scaling.method == MPX_SCALING_NONE ? 1.0 : v->scaling.loss_scale,
                            v->step, v->stats ? v->ls : NULL};
    int64_t nonfinite = 0;
    MPX_TRY(mpx_graph_backward(v->g, &bo, &nonfinite));
    if (nonfinite == 0) {
        /* A real update at a tiny learning rate: the optimizer's cost without walking away. */
        MPX_TRY(mpx_optimizer_step_norm(v->opt, 1e-6, mpx_graph_grad_norm(v->g)));
        MPX_TRY(mpx_graph_sync_weights(v->g, v->step + 1));
    }
    *seconds = mpx_now() - t0;
    *scaling_seconds = mpx_graph_scaling_seconds(v->g) - w0;
    if (be->skipped_flops) v->skipped += be->skipped_flops(be) - skipped0;
    v->waits += mpx_graph_host_waits(v->g) - waits0;
    v->redos += mpx_graph_merge_redos(v->g) - redos0;
    mpx_graph_allreduce_stats(v->g, &ds1, &db1);
    v->dist_s += ds1 - ds0;
    v->dist_bytes += db1 - db0;
    /* adaptive "cached" variants never reach an update step after their first */
    v->step++;
    return MPX_OK;
}

static mpx_status setup(const mpx_run_cfg *rc, run_task *task, variant *v) {
    MPX_TRY(run_task_graph(task, &v->prec, &v->g));
    MPX_TRY(mpx_optimizer_create(v->g, &rc->train.optim, &v->opt));
    int nl = mpx_graph_n_layers(v->g);
    v->ls = mpx_calloc((size_t)nl, sizeof *v->ls);
    if (!v->ls) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    return task->ops->feed(task, v->g);
}

static void teardown(variant *v) {
    mpx_optimizer_free(v->opt);
    mpx_graph_free(v->g);
    free(v->ls);
    free(v->t);
    free(v->w);
}

/* The conv/linear layers' forward GEMMs as distinct (M = output positions, N = output
 * channels, K = reduction length) shapes with their FLOPs summed, most FLOPs first. */
enum { MAX_SHAPES = 64, REF_SHAPES = 16 };
typedef struct {
    int m, n, k;
    double flops;
} gemm_shape;

static int gemm_shapes(const mpx_graph *g, gemm_shape *s) {
    int ns = 0;
    for (int i = 0; i < mpx_graph_n_layers(g); i++) {
        mpx_layer_info li;
        mpx_graph_layer(g, i, &li);
        if (strcmp(li.kind, "conv2d") != 0 && strcmp(li.kind, "linear") != 0) continue;
        int t = mpx_graph_find_tensor(g, li.name);
        int64_t shape[4];
        int nd = mpx_graph_tensor_shape(g, t, shape);
        int64_t out = shape[nd - 1], pos = 1;
        for (int d = 0; d < nd - 1; d++) pos *= shape[d];
        int64_t red = li.params / out; /* bias-free convs; a bias adds < 1 to K */
        const gemm_shape x = {(int)pos, (int)out, (int)red, 2.0 * (double)pos * out * red};
        int j = 0;
        while (j < ns && !(s[j].m == x.m && s[j].n == x.n && s[j].k == x.k)) j++;
        if (j < ns)
            s[j].flops += x.flops;
        else if (ns < MAX_SHAPES)
            s[ns++] = x;
    }
    for (int i = 1; i < ns; i++) /* insertion sort, most FLOPs first */
        for (int j = i; j > 0 && s[j].flops > s[j - 1].flops; j--) {
            gemm_shape t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return ns;
}

/* The variants: each requested precision mode without loss scaling — the configured mode with
 * the config's whole precision policy (rounding, master weights, FP8 recipe, fixed-point
 * fraction bits), any other mode with that mode's defaults; with o->overheads also, for the
 * configured mode, the statistics and adaptive-scaling variants from *base on (-1: none). */
static mpx_status make_variants(const mpx_run_cfg *rc, const mpx_bench_opts *o, variant *v,
                                int *nv_out, int *base_out) {
    int nv = 0;
    mpx_status st = MPX_OK;
    char modes[64];
    const char *asked = o->modes && *o->modes ? o->modes : mpx_precision_mode_name(rc->precision.mode);
    if (snprintf(modes, sizeof modes, "%s", asked) >= (int)sizeof modes)
        return mpx_fail(MPX_ERR_INPUT, "--modes: '%s' is too long", asked);
    for (char *save = NULL, *tok = strtok_r(modes, ",", &save); tok && st == MPX_OK;
         tok = strtok_r(NULL, ",", &save)) {
        if (nv == MAX_MODES) {
            st = mpx_fail(MPX_ERR_INPUT, "--modes: at most %d modes ('%s' is one too many)",
                          MAX_MODES, tok);
            break;
        }
        variant *x = &v[nv];
        if (mpx_precision_init(&x->prec, tok, "rne", rc->train.seed) != 0) {
            st = mpx_fail(MPX_ERR_INPUT, "--modes: unknown precision mode '%s'", tok);
            break;
        }
        if (x->prec.mode == rc->precision.mode) {
            x->prec = rc->precision; /* the config's own policy: rounding, masters, recipe */
        } else {
            x->prec.tensor_cores = rc->precision.tensor_cores;
            x->prec.direct_io = rc->precision.direct_io;
        }
        mpx_scaling_defaults(&x->scaling);
        x->name = mpx_precision_mode_name(x->prec.mode);
        nv++;
    }
    int base = -1;
    if (st == MPX_OK && o->overheads) {
        static const char *const names[OV_COUNT] = {"base", "stats", "als_update", "als_cached",
                                                    "control"};
        base = nv;
        for (int k = 0; k < OV_COUNT; k++) {
            variant *x = &v[nv++];
            x->name = names[k];
            x->prec = rc->precision;
            mpx_scaling_defaults(&x->scaling);
            x->stats = k == OV_STATS;
            if (k == OV_ALS_UPDATE || k == OV_ALS_CACHED) {
                x->scaling.method = MPX_SCALING_ADAPTIVE;
                x->scaling.update_every = k == OV_ALS_UPDATE ? 1 : 1000000000;
            }
        }
    }
    *nv_out = nv;
    *base_out = base;
    return st;
}

/* Warm-up (primitive creation, caches, the first adaptive update), then o->steps interleaved
 * rounds of every variant. */
static mpx_status measure(const mpx_bench_opts *o, variant *v, int nv) {
    mpx_status st = MPX_OK;
    for (int w = 0; w < o->warmup && st == MPX_OK; w++)
        for (int i = 0; i < nv && st == MPX_OK; i++) {
            double s, w;
            st = one_step(&v[i], &s, &w);
        }
    if (st == MPX_OK && o->profile)
        for (int i = 0; i < nv; i++) mpx_graph_profile(v[i].g, 1);
    for (int i = 0; i < nv; i++) /* over the measured rounds */
        v[i].waits = 0, v[i].redos = 0, v[i].skipped = 0, v[i].dist_s = 0, v[i].dist_bytes = 0;
    for (int r = 0; r < o->steps && st == MPX_OK; r++) {
        for (int i = 0; i < nv && st == MPX_OK; i++) st = one_step(&v[i], &v[i].t[r], &v[i].w[r]);
        if (o->progress) fprintf(stderr, "\rbench: round %d/%d", r + 1, o->steps);
    }
    if (o->progress) fprintf(stderr, "\r\033[K");
    return st;
}

/* The reference: what plain sgemm calls would achieve on the graph's own GEMMs — the FLOP-
 * weighted rate (total FLOPs over total time) of the faster of oneDNN and OpenBLAS on each of
 * the REF_SHAPES largest shapes; and, for the record and the regression baselines, both
 * libraries on the largest shape and on 2048^3. */
static void reference_gemm(const mpx_graph *g, mpx_bench_result *res) {
    gemm_shape s[MAX_SHAPES];
    const int ns = gemm_shapes(g, s);
    const gemm_shape top = ns > 0 ? s[0] : (gemm_shape){512, 512, 512, 2.0 * 512 * 512 * 512};
    res->ref_gemm_m = top.m;
    res->ref_gemm_n = top.n;
    res->ref_gemm_k = top.k;
    for (int i = 0; i < 2; i++) {
        const mpx_gemm_impl impl = i == 0 ? MPX_GEMM_ONEDNN : MPX_GEMM_OPENBLAS;
        res->ref_by[i] = sgemm_rate(impl, top.m, top.n, top.k);
        res->big_by[i] = sgemm_rate(impl, 2048, 2048, 2048);
    }
    res->ref_impl = res->ref_by[1] > res->ref_by[0] ? 1 : 0;
    res->big_gflops = res->big_by[res->ref_impl];
    double flops = 0, seconds = 0, all = 0;
    for (int i = 0; i < ns; i++) all += s[i].flops;
    res->ref_shapes = 0;
    for (int i = 0; i < ns && i < REF_SHAPES; i++) {
        const double r = i == 0 ? res->ref_by[res->ref_impl]
                                : fmax(sgemm_rate(MPX_GEMM_ONEDNN, s[i].m, s[i].n, s[i].k),
                                       sgemm_rate(MPX_GEMM_OPENBLAS, s[i].m, s[i].n, s[i].k));
        if (!(r > 0)) continue;
        flops += s[i].flops;
        seconds += s[i].flops / (r * 1e9);
        res->ref_shapes++;
    }
    res->ref_flops_share = all > 0 ? flops / all : 1;
    res->ref_gflops = seconds > 0 ? flops / seconds * 1e-9 : res->ref_by[res->ref_impl];
}

/* One result row per variant: step times, rates, memory, waits. */
static void result_rows(const mpx_bench_opts *o, const variant *v, int nv, mpx_bench_result *res) {
    res->n = 0;
    for (int i = 0; i < nv; i++) {
        mpx_bench_row *row = &res->rows[res->n++];
        snprintf(row->name, sizeof row->name, "%s", v[i].name);
        snprintf(row->mode, sizeof row->mode, "%s", mpx_precision_mode_name(v[i].prec.mode));
        snprintf(row->rounding, sizeof row->rounding, "%s",
                 v[i].prec.rounding == MPX_ROUND_STOCHASTIC ? "stochastic" : "rne");
        row->master_weights = v[i].prec.master_weights;
        row->median_s = median(v[i].t, o->steps);
        row->min_s = row->max_s = v[i].t[0];
        for (int r = 1; r < o->steps; r++) {
            row->min_s = fmin(row->min_s, v[i].t[r]);
            row->max_s = fmax(row->max_s, v[i].t[r]);
        }
        row->samples_per_s = res->batch / row->median_s;
        row->skipped_flops = v[i].skipped / o->steps;
        row->gflops = (res->flops_per_step - row->skipped_flops) / row->median_s * 1e-9;
        row->ratio_ref = row->gflops / res->ref_gflops;
        mpx_memory_plan mp;
        mpx_graph_memory(v[i].g, &mp);
        row->arena_bytes = (double)mp.total;
        row->waits_per_step = (double)v[i].waits / o->steps;
        row->redos_per_step = (double)v[i].redos / o->steps;
        row->allreduce_s = v[i].dist_s / o->steps;
        row->allreduce_mb = v[i].dist_bytes / o->steps / 1048576.0;
    }
}

/* Every rank's median step time of every row, on every rank (a data-parallel bench). */
static mpx_status rank_medians(mpx_bench_result *res) {
    res->ranks = mpx_comm_size();
    const int r = mpx_comm_rank();
    for (int i = 0; i < res->n; i++) {
        memset(res->rows[i].rank_median_s, 0, sizeof res->rows[i].rank_median_s);
        if (r < MPX_BENCH_MAX_RANKS) res->rows[i].rank_median_s[r] = res->rows[i].median_s;
        MPX_TRY(mpx_comm_allreduce(res->rows[i].rank_median_s, MPX_BENCH_MAX_RANKS,
                                   MPX_COMM_F64, MPX_COMM_SUM));
    }
    return MPX_OK;
}

/* The overheads from the OV_COUNT variants at ov: per-round paired differences against the base,
 * their medians and distribution-free 95% intervals. */
static mpx_status overheads(const variant *ov, int n, mpx_bench_result *res) {
    double *d = malloc(MPX_OVERHEAD_KINDS * (size_t)n * sizeof *d);
    if (!d) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    for (int r = 0; r < n; r++) {
        double tb = ov[OV_BASE].t[r], ts = ov[OV_STATS].t[r], ta = ov[OV_CONTROL].t[r];
        double tu = ov[OV_ALS_UPDATE].t[r], tc = ov[OV_ALS_CACHED].t[r];
        double wb = ov[OV_BASE].w[r], wu = ov[OV_ALS_UPDATE].w[r];
        double wc = ov[OV_ALS_CACHED].w[r], wa = ov[OV_CONTROL].w[r];
        d[MPX_OVERHEAD_STATS_EVERY_1 * n + r] = (ts - tb) / tb;
        d[MPX_OVERHEAD_STATS_EVERY_100 * n + r] = (ts - tb) / 100 / tb;
        d[MPX_OVERHEAD_ADAPTIVE_EVERY_1 * n + r] = (tu - tb) / tb;
        d[MPX_OVERHEAD_ADAPTIVE_EVERY_100 * n + r] = ((99 * tc + tu) / 100 - tb) / tb;
        d[MPX_OVERHEAD_ADAPTIVE_EVERY_1_PARTS * n + r] = (wu - wb) / tb;
        d[MPX_OVERHEAD_ADAPTIVE_EVERY_100_PARTS * n + r] = ((99 * wc + wu) / 100 - wb) / tb;
        d[MPX_OVERHEAD_CONTROL * n + r] = (ta - tb) / tb;
        d[MPX_OVERHEAD_CONTROL_PARTS * n + r] = (wa - wb) / tb;
    }
    for (int q = 0; q < MPX_OVERHEAD_KINDS; q++)
        res->overhead[q] = mpx_median_ci(d + q * n, n, &res->overhead_lo[q], &res->overhead_hi[q]);
    res->has_overheads = 1;
    free(d);
    return MPX_OK;
}

mpx_status mpx_run_bench(const mpx_run_cfg *rc, const mpx_bench_opts *o, mpx_bench_result *res,
                         FILE *out) {
    memset(res, 0, sizeof *res);
    mpx_threads_set(rc->train.threads);
    MPX_TRY(mpx_cpu_limit(rc->train.isa));
    run_task task;
    mpx_status st = run_task_open(rc, &task);
    mpx_loader_pos start = {0, 0};
    if (st == MPX_OK) st = task.ops->start(&task, start);
    if (st == MPX_OK) st = task.ops->fetch(&task);

    variant v[MAX_VARIANTS];
    int nv = 0, base = -1;
    memset(v, 0, sizeof v);
    if (st == MPX_OK) st = make_variants(rc, o, v, &nv, &base);
    for (int i = 0; i < nv && st == MPX_OK; i++) {
        st = setup(rc, &task, &v[i]);
        v[i].t = calloc((size_t)o->steps, sizeof *v[i].t);
        v[i].w = calloc((size_t)o->steps, sizeof *v[i].w);
        if (st == MPX_OK && (!v[i].t || !v[i].w)) st = mpx_fail(MPX_ERR_NOMEM, "out of memory");
        /* the scaling work is timed where it is compared: base and the adaptive variants */
        if (st == MPX_OK && base >= 0 && i >= base && i != base + OV_STATS)
            mpx_graph_time_scaling(v[i].g, 1);
    }
    if (st == MPX_OK) st = measure(o, v, nv);
    if (st == MPX_OK) {
        reference_gemm(v[0].g, res);
        res->flops_per_step = mpx_graph_flops(v[0].g, 1);
        res->batch = rc->train.batch_size;
        const int64_t eb = rc->train.eval_batches * (int64_t)rc->train.batch_size;
        res->eval_examples = eb > 0 && eb < task.n_eval ? eb : task.n_eval;
        res->peak_rss = mpx_peak_rss();
        const mpx_backend *be = mpx_graph_backend(v[0].g);
        res->has_scratch_peak = be->scratch_peak != NULL;
        res->scratch_peak = be->scratch_peak ? be->scratch_peak(be) : 0;
        res->conv16_fallbacks = be->conv16_fallbacks ? be->conv16_fallbacks(be) : -1;
        result_rows(o, v, nv, res);
        st = rank_medians(res);
        if (st == MPX_OK && base >= 0) st = overheads(&v[base], o->steps, res);
        if (o->profile && out)
            for (int i = 0; i < (base >= 0 ? base : nv); i++) {
                fprintf(out, "per-op profile of %s (%d steps):\n", v[i].name, o->steps);
                mpx_graph_profile_print(v[i].g, out, 8);
            }
    }
    for (int i = 0; i < nv; i++) teardown(&v[i]);
    run_task_close(&task);
    return st;
}
