/* trainer.c — the training loop of `mpx train`.
 *
 * One step: next batch (prepared by the loader's thread) -> forward -> backward with the loss
 * scale, layer factors and, on statistics steps, the counted casts -> skip or update on the
 * FP32 masters -> round the working weights -> log. Evaluation and checkpoints at their
 * intervals; a run whose loss stays non-finite stops with a clear message and the reason in
 * the run file. One writer per run file (a lock beside it); a stop requested by a signal ends
 * the step in progress, writes a checkpoint and flushes the run file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/checkpoint.h"
#include "mpx/backend.h"
#include "mpx/comm.h"
#include "mpx/fsutil.h"
#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "mpx/runlog.h"
#include "mpx/runtime.h"
#include "task.h"

typedef struct {
    const mpx_run_cfg *rc;
    const mpx_train_opts *o;
    run_task task;
    mpx_graph *g;
    mpx_optimizer *opt;
    mpx_scaler scaler;
    mpx_runlog *log;
    mpx_layer_stats *stats;
    mpx_layer_info *layers;
    double train_time;
    int stop_signal;     /* the signal a requested stop came from (any rank's) */
} trainer;

/* train.inject_nonfinite: the testing hook that overflows this step's low-precision gradients. */
static int injected(const mpx_train_cfg *c, int64_t step) {
    if (c->inject_rank >= 0 && c->inject_rank != c->rank) return 0;
    for (int i = 0; i < MPX_INJECT_MAX && c->inject_nonfinite[i] >= 0; i++)
        if (c->inject_nonfinite[i] == step) return 1;
    return 0;
}

static mpx_status evaluate(trainer *t, double *loss, double *metric) {
    return t->task.ops->evaluate(&t->task, t->g, loss, metric);
}

/* The layer table and the statistics rows (every rank computes statistics: their counts are
 * reduced over the ranks). */
static mpx_status alloc_stats(trainer *t) {
    int nl = mpx_graph_n_layers(t->g);
    t->layers = mpx_calloc((size_t)nl, sizeof *t->layers);
    t->stats = mpx_calloc((size_t)nl, sizeof *t->stats);
    if (!t->layers || !t->stats) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nl; i++) mpx_graph_layer(t->g, i, &t->layers[i]);
    return MPX_OK;
}

/* The vector path each op family took here: run files record it beside the host. */
static void cpu_paths(const mpx_run_cfg *rc, char *out, size_t cap) {
    char gemm[200] = "none (FP32 or quantized operands in this mode)";
    mpx_dtype t16 = rc->precision.mode == MPX_MODE_BF16 ? MPX_BF16 : MPX_F16;
    mpx_cpu_ctx *ctx = mpx_backend_cpu_ctx(mpx_backend_cpu());
    if (ctx && (rc->precision.mode == MPX_MODE_BF16 || rc->precision.mode == MPX_MODE_FP16))
        mpx_gemm_lowp_path(ctx, t16, gemm, sizeof gemm);
    snprintf(out, cap, "isa %s; convert %s (bf16 %s); stochastic rounding %s; %s; 16-bit GEMMs %s",
             mpx_cpu_limit_name(), mpx_convert_impl(), mpx_convert_impl_bf16(),
             mpx_stochastic_impl(), mpx_dnnl_info(), gemm);
}

static mpx_status open_log(trainer *t, int64_t resume_step) {
    const mpx_run_cfg *rc = t->rc;
    char paths[512];
    const char *init = resume_step < 0 ? mpx_graph_init_digest(t->g) : "";
    cpu_paths(rc, paths, sizeof paths);
    char scaling[64];
    snprintf(scaling, sizeof scaling, "%s", mpx_scaling_name(rc->scaling.method));
    mpx_runlog_meta meta = {
        .config = t->o->config_text,
        .model = rc->model.arch,
        .dataset = t->task.dataset,
        .precision = mpx_precision_mode_name(rc->precision.mode),
        .scaling = scaling,
        .device = rc->train.device == MPX_DEV_CUDA ? "cuda" : "cpu",
        .seed = (int64_t)rc->train.seed,
        .threads = mpx_threads_get(),
        .isa = mpx_cpu_limit_name(),
        .cpu_paths = paths,
        .init_weights = init,
        .eval_metric = t->task.ops->metric,
        .n_layers = mpx_graph_n_layers(t->g),
        .layers = t->layers,
    };
    if (resume_step >= 0) return mpx_runlog_reopen(t->o->out, &meta, resume_step, &t->log);
    return mpx_runlog_create(t->o->out, &meta, t->o->force, &t->log);
}

static double pooled_underflow(const trainer *t) {
    uint64_t nz = 0, fl = 0;
    for (int i = 0; i < mpx_graph_n_layers(t->g); i++) {
        nz += t->stats[i].act.nonzero;
        fl += t->stats[i].act.flushed;
    }
    return nz ? (double)fl / (double)nz : 0.0;
}

static void report(trainer *t, const mpx_step_report *r) {
    if (t->rc->train.rank != 0) return;
    if (t->o->report) t->o->report(r, t->o->report_ctx);
}

static mpx_status checkpoint(trainer *t, int64_t next_step) {
    const mpx_loader_pos pos = t->task.ops->position(&t->task);
    mpx_checkpoint_state s = {
        .g = t->g,
        .opt = t->opt,
        .scaler = &t->scaler,
        .step = next_step,
        .loader = {pos.epoch, pos.batch},
        .config_text = t->o->config_text,
        .model = t->rc->model.arch,
    };
    MPX_TRY(mpx_runlog_flush(t->log));
    return mpx_checkpoint_write(t->o->checkpoint_path, &s);
}

/* What one training step did. */
typedef struct {
    double loss, lr, scale;
    int skip, loss_bad, stats_due;
    double seconds;
} step_done;

/* Stops the run as diverged with `why` in the run file. */
static mpx_status diverged(trainer *t, const char *why, int64_t steps_done, mpx_train_result *res) {
    if (t->log) MPX_TRY(mpx_runlog_mark_stopped(t->log, why));
    res->stopped_early = 1;
    res->steps_done = steps_done;
    return mpx_fail(MPX_ERR_NUMERIC, "%s", why);
}

/* One step: batch, forward, backward with the loss scale (and on statistics steps the counted
 * casts), the scaler's skip decision, the update on the masters, the working weights rounded,
 * the train row (and statistics) logged. */
static mpx_status train_step(trainer *t, int64_t step, step_done *d, mpx_train_result *res) {
    const mpx_run_cfg *rc = t->rc;
    const run_task_ops *task = t->task.ops;
    const double t0 = mpx_now();
    MPX_TRY(task->fetch(&t->task));
    MPX_TRY(task->feed(&t->task, t->g));
    mpx_graph_set_step(t->g, step);
    MPX_TRY(mpx_graph_forward(t->g, 1));
    d->scale = mpx_scaler_loss_scale(&t->scaler);
    d->stats_due = rc->log.stats_every > 0 && step % rc->log.stats_every == 0;
    mpx_backward_opts bo = {&rc->scaling,
                            injected(&rc->train, step) ? d->scale * 0x1p100 : d->scale, step,
                            d->stats_due ? t->stats : NULL};
    int64_t nonfinite = 0;
    mpx_status bst = mpx_graph_backward(t->g, &bo, &nonfinite);
    if (bst == MPX_ERR_NUMERIC) {
        /* A numerical failure the method stops on (als = reference: a merge without a target,
         * where the 2019 code raises): the run ends as diverged, with the reason. */
        char why[512];
        snprintf(why, sizeof why, "diverged at step %lld: %.460s", (long long)step,
                 mpx_error_message());
        return diverged(t, why, step, res);
    }
    MPX_TRY(bst);
    /* Read with the non-finite count (the step's one wait on a device). */
    d->loss = mpx_graph_loss(t->g);
    d->loss_bad = !isfinite(d->loss);
    d->skip = mpx_scaler_update(&t->scaler, nonfinite > 0 || d->loss_bad);
    d->lr = mpx_lr_at(&rc->train.lr, step);
    if (d->stats_due) MPX_TRY(mpx_optimizer_watch(t->opt));
    if (!d->skip) {
        MPX_TRY(mpx_optimizer_step_norm(t->opt, d->lr, mpx_graph_grad_norm(t->g)));
        MPX_TRY(mpx_graph_sync_weights(t->g, step + 1));
    }
    if (d->stats_due) MPX_TRY(mpx_optimizer_watched(t->opt, t->stats));
    d->seconds = mpx_now() - t0;
    t->train_time += d->seconds;
    mpx_train_row row = {step,
                         (float)d->loss,
                         (float)d->lr,
                         d->scale,
                         (uint8_t)d->skip,
                         (float)(rc->train.batch_size / (mpx_now() - t0)),
                         t->train_time};
    if (t->log) MPX_TRY(mpx_runlog_train(t->log, &row));
    if (t->log && d->stats_due) MPX_TRY(mpx_runlog_stats(t->log, step, t->stats));
    return MPX_OK;
}

/* After step `step`: the evaluation and the checkpoint when due. */
static mpx_status after_step(trainer *t, int64_t step, const mpx_step_report *r,
                             mpx_train_result *res) {
    const mpx_run_cfg *rc = t->rc;
    const int last = step + 1 == rc->train.steps;
    const int eval_due =
        last || (rc->train.eval_every > 0 && (step + 1) % rc->train.eval_every == 0);
    if (eval_due) {
        double el, metric;
        MPX_TRY(evaluate(t, &el, &metric));
        if (t->log) MPX_TRY(mpx_runlog_eval(t->log, step + 1, (float)el, (float)metric));
        mpx_step_report e = *r;
        e.is_eval = 1;
        e.eval_loss = el;
        e.eval_metric = metric;
        e.metric_name = t->task.ops->metric;
        report(t, &e);
        res->final_metric = metric;
    }
    if (t->o->checkpoint_path && rc->train.rank == 0 &&
        ((rc->train.checkpoint_every > 0 && (step + 1) % rc->train.checkpoint_every == 0) || last))
        MPX_TRY(checkpoint(t, step + 1));
    return MPX_OK;
}

/* Whether a stop was requested (opts.stop): on any rank, so that all stop after the same step
 * (a launcher may deliver the signal to the ranks at different moments). */
static int stop_requested(trainer *t) {
    int32_t stop = t->o->stop ? (int32_t)*t->o->stop : 0;
    if (t->rc->train.ranks > 1 &&
        mpx_comm_allreduce(&stop, 1, MPX_COMM_U32, MPX_COMM_MAX) != MPX_OK)
        return 0;
    t->stop_signal = (int)stop;
    return stop != 0;
}

/* Stop on request (opts.stop) after step `step`: a checkpoint at step + 1 unless after_step just
 * wrote it, the run file marked with the reason and flushed. */
static mpx_status interrupt(trainer *t, int64_t step, mpx_train_result *res) {
    const mpx_run_cfg *rc = t->rc;
    const int signo = t->stop_signal;
    const int written = rc->train.checkpoint_every > 0 && (step + 1) % rc->train.checkpoint_every == 0;
    if (t->o->checkpoint_path && !written && rc->train.rank == 0) MPX_TRY(checkpoint(t, step + 1));
    char why[512];
    snprintf(why, sizeof why, "interrupted by signal %d after step %lld%s%.400s", signo,
             (long long)step, t->o->checkpoint_path ? "; resume with --resume " : "",
             t->o->checkpoint_path ? t->o->checkpoint_path : "");
    if (t->log) {
        MPX_TRY(mpx_runlog_mark_stopped(t->log, why));
        MPX_TRY(mpx_runlog_flush(t->log));
    }
    res->interrupted = signo;
    return MPX_OK;
}

static mpx_status train_loop(trainer *t, int64_t start, mpx_train_result *res) {
    const mpx_run_cfg *rc = t->rc;
    const int64_t steps = rc->train.steps, B = rc->train.batch_size;
    const int tolerate_overflow = rc->scaling.method == MPX_SCALING_DYNAMIC ||
                                  mpx_scaling_is_layerwise(rc->scaling.method);
    int bad_streak = 0;
    double last_loss = NAN, underflow = 0;
    mpx_status st = MPX_OK;
    /* A resumed run continues its clock (the run file's wall_s); its speed is this process's. */
    t->train_time = mpx_runlog_resumed_wall_s(t->log);
    const double time0 = t->train_time;
    res->steps_done = start;
    for (int64_t step = start; step < steps && st == MPX_OK; step++) {
        step_done d = {0};
        if ((st = train_step(t, step, &d, res)) != MPX_OK) break;
        last_loss = d.loss;
        if (d.stats_due) underflow = pooled_underflow(t);
        const double run_time = t->train_time - time0;
        mpx_step_report r = {step, steps, d.loss, d.lr, d.scale, d.skip,
                             (double)(step - start + 1) * B / run_time, t->train_time,
                             run_time / (double)(step - start + 1) * (double)(steps - step - 1),
                             0, 0, 0, NULL, d.stats_due, underflow};
        report(t, &r);
        /* Divergence: a non-finite loss (any method) or, where no scaler will recover,
         * non-finite gradients, for max_nonfinite consecutive steps. */
        bad_streak = (d.loss_bad || (d.skip && !tolerate_overflow)) ? bad_streak + 1 : 0;
        if (bad_streak >= rc->train.max_nonfinite) {
            char why[256];
            snprintf(why, sizeof why,
                     "diverged: %d consecutive steps with a non-finite loss or gradient (last at "
                     "step %lld, train.max_nonfinite = %d)",
                     bad_streak, (long long)step, rc->train.max_nonfinite);
            st = diverged(t, why, step + 1, res);
            break;
        }
        if ((st = after_step(t, step, &r, res)) != MPX_OK) break;
        res->steps_done = step + 1;
        if (stop_requested(t) && step + 1 < steps) {
            st = interrupt(t, step, res);
            break;
        }
    }
    res->final_loss = last_loss;
    res->skipped = t->scaler.skipped;
    res->wall_s = t->train_time;
    res->samples_per_s = t->train_time > time0
                             ? (double)(res->steps_done - start) * B / (t->train_time - time0)
                             : 0;
    return st;
}

mpx_status mpx_run_train(const mpx_run_cfg *rc, const mpx_train_opts *o, mpx_train_result *res) {
    trainer t;
    memset(&t, 0, sizeof t);
    memset(res, 0, sizeof *res);
    t.rc = rc;
    t.o = o;
    mpx_threads_set(rc->train.threads);
    MPX_TRY(mpx_cpu_limit(rc->train.isa));

    mpx_checkpoint_state ck;
    memset(&ck, 0, sizeof ck);
    /* One writer per run file, before anything is read or written: a second `mpx train` on the
     * same file (--force included) stops here, naming the holder. */
    char lock[4200];
    int lock_fd = -1;
    mpx_status st = MPX_OK;
    if (snprintf(lock, sizeof lock, "%s.lock", o->out) >= (int)sizeof lock)
        return mpx_fail(MPX_ERR_INPUT, "run file path too long: '%s'", o->out);
    char what[4200];
    snprintf(what, sizeof what, "run file '%s'", o->out);
    if (rc->train.rank == 0) MPX_TRY(mpx_fs_trylock(lock, what, &lock_fd));
    st = run_task_open(rc, &t.task);
    if (st == MPX_OK) st = run_task_graph(&t.task, NULL, &t.g);
    if (st == MPX_OK) st = mpx_optimizer_create(t.g, &rc->train.optim, &t.opt);
    if (st == MPX_OK) st = mpx_scaler_init(&t.scaler, &rc->scaling);
    int64_t start = 0;
    if (st == MPX_OK && o->resume) {
        ck = (mpx_checkpoint_state){.g = t.g, .opt = t.opt, .scaler = &t.scaler,
                                    .model = rc->model.arch};
        st = mpx_checkpoint_read(o->resume, &ck);
        start = ck.step;
        if (st == MPX_OK) st = mpx_graph_sync_weights(t.g, start);
        /* A checkpoint at exactly train.steps is a finished run (its final evaluation was
         * flushed before the checkpoint was written): resuming it trains nothing. */
        if (st == MPX_OK && start > rc->train.steps)
            st = mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' is at step %lld; train.steps is %lld",
                          o->resume, (long long)start, (long long)rc->train.steps);
    }
    if (st == MPX_OK && !o->resume && rc->train.init_from[0]) {
        int np = 0, nb = 0;
        st = mpx_checkpoint_load_weights(rc->train.init_from, t.g, &np, &nb);
        if (st == MPX_OK) st = mpx_graph_sync_weights(t.g, 0);
        if (st == MPX_OK && rc->train.rank == 0)
            fprintf(stderr, "init_from: %d of %d parameters and %d of %d buffers from '%s'\n", np,
                    mpx_graph_n_params(t.g), nb, mpx_graph_n_buffers(t.g), rc->train.init_from);
    }
    res->start_step = start;
    if (st == MPX_OK) st = alloc_stats(&t);
    if (st == MPX_OK && rc->train.rank == 0) st = open_log(&t, o->resume ? start : -1);
    if (st == MPX_OK)
        st = t.task.ops->start(&t.task, (mpx_loader_pos){ck.loader.epoch, ck.loader.batch});
    if (st == MPX_OK) st = train_loop(&t, start, res);

    if (t.log) {
        if (st != MPX_OK && !res->stopped_early) {
            char why[512];
            snprintf(why, sizeof why, "error: %.480s", mpx_error_message());
            mpx_runlog_mark_stopped(t.log, why);
        }
        mpx_status cs = mpx_runlog_close(t.log);
        if (st == MPX_OK) st = cs;
    }
    mpx_optimizer_free(t.opt);
    mpx_graph_free(t.g);
    run_task_close(&t.task);
    free(t.stats);
    free(t.layers);
    free(ck.config_text_read);
    if (lock_fd >= 0) mpx_fs_unlock(lock_fd);
    return st;
}
