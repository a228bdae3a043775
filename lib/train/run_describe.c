/* run_describe.c — what a config builds: data, parameters, FLOPs, the memory plan (`mpx info`). */
#include <stdio.h>

#include "mpx/runtime.h"
#include "run_internal.h"

mpx_status mpx_run_describe(const mpx_run_cfg *rc, FILE *f) {
    run_data d;
    run_model m = {0};
    mpx_status st = run_data_open(rc, &d);
    if (st == MPX_OK) st = run_model_build(rc, &d, &m);
    if (st == MPX_OK) {
        fprintf(f, "data:        %s, %lld train / %lld eval, %dx%dx%d, %d classes\n", d.name,
                (long long)d.n_train, (long long)d.n_eval, d.h, d.w, d.c, d.num_classes);
        fprintf(f, "model:       %s, width x%g, %lld parameters, %d observed layers\n",
                rc->model.arch, rc->model.resnet.width_mult, (long long)mpx_graph_param_count(m.g),
                mpx_graph_n_layers(m.g));
        fprintf(f, "step:        batch %d, %.3f GFLOP forward, %.3f GFLOP training step\n",
                rc->train.batch_size, mpx_graph_flops(m.g, 0) * 1e-9, mpx_graph_flops(m.g, 1) * 1e-9);
        mpx_graph_print_plan(m.g, f);
    }
    mpx_graph_free(m.g);
    run_data_close(&d);
    return st;
}
