/* run_internal.h — pieces of the training driver shared between its files. */
#ifndef MPX_RUN_INTERNAL_H
#define MPX_RUN_INTERNAL_H

#include "mpx/data.h"
#include "mpx/run.h"

typedef struct {
    char name[256];
    mpx_dataset train, eval;                      /* in-memory sources */
    mpx_image_folder *train_folder, *eval_folder; /* on-disk source */
    int h, w, c, num_classes;
    int64_t n_train, n_eval;
    float mean[MPX_DATA_MAX_CHANNELS], std[MPX_DATA_MAX_CHANNELS];
} run_data;

mpx_status run_data_open(const mpx_run_cfg *rc, run_data *d);
/* A training (shuffled, augmented) or evaluation loader starting at `start`. */
mpx_status run_data_loader(const mpx_run_cfg *rc, run_data *d, int train, mpx_loader_pos start,
                           mpx_loader **out);
void run_data_close(run_data *d);

typedef struct {
    mpx_graph *g;
    int image, labels, logits;
} run_model;

/* Build and compile the configured model for the data's geometry and classes. m->g is set
 * (caller frees) even when compiling fails. */
mpx_status run_model_build(const mpx_run_cfg *rc, const run_data *d, run_model *m);
/* Mean loss and top-1 (percent) over the evaluation set, or its first train.eval_batches
 * batches. logits_host holds one batch of logits. */
mpx_status run_evaluate(const mpx_run_cfg *rc, run_data *d, const run_model *m, float *logits_host,
                        double *loss, double *top1);

#endif
