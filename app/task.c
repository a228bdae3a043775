/* task.c — choosing the task of a run and the steps every task shares. */
#include "task.h"

#include <string.h>

mpx_status run_task_open(const mpx_run_cfg *rc, run_task *t) {
    memset(t, 0, sizeof *t);
    t->rc = rc;
    switch (rc->model.task) {
    case MPX_TASK_CLASSIFY: t->ops = &run_task_classify; break;
    case MPX_TASK_MLM: t->ops = &run_task_mlm; break;
    case MPX_TASK_DETECT: t->ops = &run_task_detect; break;
    default: return mpx_fail(MPX_ERR_INTERNAL, "no task for model '%s'", rc->model.arch);
    }
    return t->ops->open(t);
}

mpx_status run_task_graph(run_task *t, const mpx_precision *p, mpx_graph **out) {
    mpx_graph *g = mpx_graph_new();
    *out = g;
    if (!g) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    MPX_TRY(t->ops->build(t, g));
    mpx_graph_fuse(g, t->rc->train.fuse);
    mpx_graph_sync_bn(g, t->rc->train.sync_bn);
    MPX_TRY(mpx_graph_whatif(g, t->rc->log.whatif));
    return mpx_graph_compile(g, p ? p : &t->rc->precision, t->rc->train.device, t->rc->train.seed);
}

void run_task_close(run_task *t) {
    if (t->ops && t->impl) t->ops->close(t);
    memset(t, 0, sizeof *t);
}
