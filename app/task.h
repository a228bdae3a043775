/* task.h — what the training driver needs from a kind of experiment (internal).
 *
 * The driver (trainer.c), the benchmark (bench.c), `mpx eval` and `mpx info` are written once
 * against this interface; a task owns its data (datasets, loaders, the current host batch),
 * builds its model into graphs and evaluates it:
 *   classify  ResNets on images, metric top-1 (task_classify.c)
 *   mlm       BERT masked-language modelling on text, metric masked-token accuracy (task_mlm.c)
 *   detect    SSD on procedural scenes or Pascal VOC, metric mAP@0.5 (task_detect.c)
 */
#ifndef MPX_TASK_H
#define MPX_TASK_H

#include <stdio.h>

#include "eval_boot.h"
#include "mpx/data.h"
#include "mpx/graph.h"
#include "mpx/run.h"

typedef struct run_task run_task;

typedef struct {
    const char *name;   /* "classify" | "mlm" | "detect" */
    const char *metric; /* "top1" | "mlm_acc" | "mAP" (percent) */
    /* Open the data (t->rc is set); fill t->dataset, t->n_train, t->n_eval. */
    mpx_status (*open)(run_task *t);
    /* Build the model into a new graph (not compiled). */
    mpx_status (*build)(run_task *t, mpx_graph *g);
    /* Start the training loader at a position. */
    mpx_status (*start)(run_task *t, mpx_loader_pos pos);
    /* Take the next training batch (host memory, owned by the task). */
    mpx_status (*fetch)(run_task *t);
    /* Copy the current batch into a graph built by `build`. */
    mpx_status (*feed)(run_task *t, mpx_graph *g);
    mpx_loader_pos (*position)(const run_task *t);
    /* Mean loss and the metric over the evaluation set (or train.eval_batches batches). */
    mpx_status (*evaluate)(run_task *t, mpx_graph *g, double *loss, double *metric);
    void (*close)(run_task *t);
} run_task_ops;

struct run_task {
    const run_task_ops *ops;
    const mpx_run_cfg *rc;
    char dataset[256];
    int64_t n_train, n_eval;
    /* `mpx eval` only (zero while training): with bootstrap > 0, evaluate also fills boot
     * and boot_loss from that many resamples of its units (eval_boot.h); with units set, the
     * classify and mlm tasks write each unit's loss and hits there, and with detections set
     * the detect task writes its detections and ground truth there (TSV). */
    int bootstrap;
    FILE *units, *detections;
    eval_boot boot, boot_loss; /* the metric's; the loss's (not for detect: NaN) */
    void *impl;
};

extern const run_task_ops run_task_classify, run_task_mlm, run_task_detect;

/* A data-parallel run (train.ranks > 1): each rank's graph and evaluation take the local batch,
 * batch_size / ranks (evaluations then read eval_batches x ranks of them, the same examples);
 * the training loader makes the global batch on every rank, and each feeds its slice, rows
 * [rank b, (rank + 1) b): every example is seen once per epoch across the ranks, in the order
 * one process would see it. */
static inline int task_batch(const run_task *t) {
    return t->rc->train.batch_size / (t->rc->train.ranks > 0 ? t->rc->train.ranks : 1);
}
static inline int64_t task_eval_batches(const run_task *t) {
    return t->rc->train.eval_batches * (t->rc->train.ranks > 0 ? t->rc->train.ranks : 1);
}
static inline int task_shard(const run_task *t) { return t->rc->train.rank * task_batch(t); }

/* Pick the task of rc's model and open its data. */
mpx_status run_task_open(const mpx_run_cfg *rc, run_task *t);
/* Build and compile a graph for precision p (NULL: the config's). *g is set (caller frees)
 * even when compiling fails. */
mpx_status run_task_graph(run_task *t, const mpx_precision *p, mpx_graph **g);
void run_task_close(run_task *t);

#endif
