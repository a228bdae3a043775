/* run_describe.c — what a config builds: data, parameters, FLOPs, the memory plan (`mpx info`). */
#include <stdio.h>

#include "mpx/runtime.h"
#include "task.h"

mpx_status mpx_run_describe(const mpx_run_cfg *rc, FILE *f) {
    run_task task;
    mpx_graph *g = NULL;
    mpx_status st = run_task_open(rc, &task);
    if (st == MPX_OK) st = run_task_graph(&task, NULL, &g);
    if (st == MPX_OK) {
        fprintf(f, "data:        %s, %lld train / %lld eval examples (task %s, metric %s)\n",
                task.dataset, (long long)task.n_train, (long long)task.n_eval, task.ops->name,
                task.ops->metric);
        fprintf(f, "model:       %s, %lld parameters, %d observed layers\n", rc->model.arch,
                (long long)mpx_graph_param_count(g), mpx_graph_n_layers(g));
        fprintf(f, "step:        batch %d, %.3f GFLOP forward, %.3f GFLOP training step\n",
                rc->train.batch_size, mpx_graph_flops(g, 0) * 1e-9, mpx_graph_flops(g, 1) * 1e-9);
        mpx_graph_print_plan(g, f);
    }
    mpx_graph_free(g);
    run_task_close(&task);
    return st;
}
