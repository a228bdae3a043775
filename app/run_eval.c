/* run_eval.c — `mpx eval`: rebuild a run's model from the config in its checkpoint, load the
 * weights and running statistics, and evaluate; optionally bootstrap the metric over the
 * evaluation units and write the detections out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/checkpoint.h"
#include "mpx/runtime.h"
#include "task.h"

/* An output written to PATH.tmp and renamed at the end, so that a failure leaves nothing. */
static mpx_status open_tmp(const char *opt, const char *path, char tmp[4200], FILE **f) {
    if (snprintf(tmp, 4200, "%s.tmp", path) >= 4200) return mpx_fail(MPX_ERR_INPUT, "%s: path too long", opt);
    if (!(*f = fopen(tmp, "w"))) return mpx_fail(MPX_ERR_IO, "%s: cannot write", tmp);
    return MPX_OK;
}

static mpx_status close_tmp(FILE *f, const char *tmp, const char *path, mpx_status st) {
    if (!f) return st;
    int bad = ferror(f) | (fclose(f) != 0);
    if (st == MPX_OK && bad) st = mpx_fail(MPX_ERR_IO, "%s: write failed", tmp);
    if (st == MPX_OK && rename(tmp, path) != 0)
        st = mpx_fail(MPX_ERR_IO, "%s: cannot rename to %s", tmp, path);
    if (st != MPX_OK) remove(tmp);
    return st;
}

mpx_status mpx_run_eval_checkpoint(const char *checkpoint, const char *const *overrides,
                                   int n_overrides, const mpx_eval_opts *opts,
                                   mpx_eval_result *res) {
    memset(res, 0, sizeof *res);
    res->metric_sd = res->metric_lo = res->metric_hi = NAN;
    res->loss_sd = res->loss_lo = res->loss_hi = NAN;
    const mpx_eval_opts none = {0, NULL, NULL};
    if (!opts) opts = &none;
    if (opts->bootstrap < 0 || opts->bootstrap > 1000000)
        return mpx_fail(MPX_ERR_INPUT, "--bootstrap %d: expected 0 to 1000000 resamples", opts->bootstrap);
    char *model = NULL, *config_text = NULL;
    int64_t step = 0;
    MPX_TRY(mpx_checkpoint_peek(checkpoint, &model, &step, &config_text));
    mpx_config *cfg = NULL;
    char name[1100];
    snprintf(name, sizeof name, "%s (stored config)", checkpoint);
    mpx_status st = mpx_config_parse_string(config_text ? config_text : "", name, ".", &cfg);
    for (int i = 0; st == MPX_OK && i < n_overrides; i++) st = mpx_config_override(cfg, overrides[i]);
    mpx_run_cfg rc;
    if (st == MPX_OK) st = mpx_run_cfg_from(cfg, &rc);
    run_task task;
    memset(&task, 0, sizeof task);
    mpx_graph *g = NULL;
    if (st == MPX_OK) {
        mpx_threads_set(rc.train.threads);
        st = mpx_cpu_limit(rc.train.isa);
        if (st == MPX_OK) st = run_task_open(&rc, &task);
    }
    char det_tmp[4200] = "", units_tmp[4200] = "";
    if (st == MPX_OK && opts->detections) {
        if (strcmp(task.ops->name, "detect") != 0)
            st = mpx_fail(MPX_ERR_INPUT, "--detections %s: a %s run has no detections (SSD runs only)",
                          opts->detections, task.ops->name);
        else
            st = open_tmp("--detections", opts->detections, det_tmp, &task.detections);
    }
    if (st == MPX_OK && opts->units) {
        if (strcmp(task.ops->name, "detect") == 0)
            st = mpx_fail(MPX_ERR_INPUT, "--units %s: an SSD run's units are its detections "
                          "(--detections)", opts->units);
        else
            st = open_tmp("--units", opts->units, units_tmp, &task.units);
    }
    task.bootstrap = opts->bootstrap;
    task.boot.sd = task.boot_loss.sd = NAN;
    if (st == MPX_OK) st = run_task_graph(&task, NULL, &g);
    if (st == MPX_OK) {
        mpx_checkpoint_state cs = {.g = g, .model = rc.model.arch};
        st = mpx_checkpoint_read(checkpoint, &cs);
        free(cs.config_text_read);
    }
    /* The checkpoint holds the FP32 masters: round them into the working copies the forward
     * pass reads, as a resumed training does (trainer.c), else a low-precision run would be
     * evaluated with its initial weights. */
    if (st == MPX_OK) st = mpx_graph_sync_weights(g, step);
    if (st == MPX_OK) st = task.ops->evaluate(&task, g, &res->loss, &res->metric);
    if (st == MPX_OK) {
        snprintf(res->model, sizeof res->model, "%s", model);
        snprintf(res->dataset, sizeof res->dataset, "%s", task.dataset);
        res->step = step;
        res->metric_name = task.ops->metric;
        if (opts->bootstrap > 0) {
            res->units = task.boot.units;
            res->metric_sd = task.boot.sd;
            res->metric_lo = task.boot.lo;
            res->metric_hi = task.boot.hi;
            res->loss_sd = task.boot_loss.sd;
            res->loss_lo = task.boot_loss.lo;
            res->loss_hi = task.boot_loss.hi;
        }
    }
    st = close_tmp(task.detections, det_tmp, opts->detections, st);
    st = close_tmp(task.units, units_tmp, opts->units, st);
    mpx_graph_free(g);
    run_task_close(&task);
    mpx_config_free(cfg);
    free(model);
    free(config_text);
    return st;
}
