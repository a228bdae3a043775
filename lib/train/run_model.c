/* run_model.c — build the configured model, and evaluate it (top-1 and mean loss). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"

mpx_status run_model_build(const mpx_run_cfg *rc, const run_data *d, run_model *m) {
    memset(m, 0, sizeof *m);
    mpx_resnet_cfg rn = rc->model.resnet;
    if (rn.num_classes == 0) rn.num_classes = d->num_classes;
    if (rn.num_classes < d->num_classes)
        return mpx_fail(MPX_ERR_INPUT, "model.num_classes = %d but %s has %d classes",
                        rn.num_classes, d->name, d->num_classes);
    m->g = mpx_graph_new();
    if (!m->g) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    MPX_TRY(mpx_resnet_build(m->g, &rn, rc->train.batch_size, d->h, d->w, d->c, &m->image,
                             &m->labels, &m->logits));
    return mpx_graph_compile(m->g, &rc->precision, rc->train.device, rc->train.seed);
}

mpx_status run_evaluate(const mpx_run_cfg *rc, run_data *d, const run_model *m, float *logits_host,
                        double *loss, double *top1) {
    mpx_loader *L;
    mpx_loader_pos start = {0, 0};
    MPX_TRY(run_data_loader(rc, d, 0, start, &L));
    int64_t nb = mpx_loader_batches_per_epoch(L), limit = rc->train.eval_batches;
    if (limit > 0 && limit < nb) nb = limit;
    int64_t shape[2];
    mpx_graph_tensor_shape(m->g, m->logits, shape);
    const int classes = (int)shape[1];
    double loss_sum = 0, correct = 0, count = 0;
    mpx_status st = MPX_OK;
    for (int64_t b = 0; b < nb && st == MPX_OK; b++) {
        mpx_batch batch;
        st = mpx_loader_next(L, &batch);
        int64_t pixels = (int64_t)batch.batch_size * batch.h * batch.w * batch.c;
        if (st == MPX_OK) st = mpx_graph_set_input(m->g, m->image, batch.x, MPX_F32, pixels);
        if (st == MPX_OK) st = mpx_graph_set_input(m->g, m->labels, batch.y, MPX_I32, batch.batch_size);
        if (st == MPX_OK) st = mpx_graph_forward(m->g, 0);
        if (st == MPX_OK) st = mpx_graph_read(m->g, m->logits, logits_host);
        if (st != MPX_OK) break;
        /* The loss is the mean over the batch's real rows (padding rows carry label -1). */
        loss_sum += (double)mpx_graph_loss(m->g) * batch.n;
        for (int i = 0; i < batch.n; i++) {
            const float *row = logits_host + (size_t)i * classes;
            int best = 0;
            for (int k = 1; k < classes; k++)
                if (row[k] > row[best]) best = k;
            correct += best == batch.y[i];
        }
        count += batch.n;
    }
    mpx_loader_free(L);
    if (st != MPX_OK) return mpx_fail_context(st, "evaluation");
    *loss = count > 0 ? loss_sum / count : NAN;
    *top1 = count > 0 ? 100.0 * correct / count : NAN;
    return MPX_OK;
}
