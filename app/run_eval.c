/* run_eval.c — `mpx eval`: rebuild a run's model from the config in its checkpoint, load the
 * weights and running statistics, and evaluate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/checkpoint.h"
#include "mpx/runtime.h"
#include "task.h"

mpx_status mpx_run_eval_checkpoint(const char *checkpoint, const char *const *overrides,
                                   int n_overrides, mpx_eval_result *res) {
    memset(res, 0, sizeof *res);
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
    if (st == MPX_OK) st = run_task_graph(&task, NULL, &g);
    if (st == MPX_OK) {
        mpx_checkpoint_state cs = {.g = g, .model = rc.model.arch};
        st = mpx_checkpoint_read(checkpoint, &cs);
        free(cs.config_text_read);
    }
    if (st == MPX_OK) st = task.ops->evaluate(&task, g, &res->loss, &res->metric);
    if (st == MPX_OK) {
        snprintf(res->model, sizeof res->model, "%s", model);
        snprintf(res->dataset, sizeof res->dataset, "%s", task.dataset);
        res->step = step;
        res->metric_name = task.ops->metric;
    }
    mpx_graph_free(g);
    run_task_close(&task);
    mpx_config_free(cfg);
    free(model);
    free(config_text);
    return st;
}
