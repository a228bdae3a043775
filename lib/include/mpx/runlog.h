/* runlog.h — the HDF5 run file (docs/design.md §6): writing during training, reading for export.
 *
 * One file per run. Every dataset is chunked and extendable along its first axis. Training
 * rows are buffered in memory and written at each flush; statistics and evaluation rows are
 * written and flushed at once — so between flushes no HDF5 call touches the file and a run
 * killed at any moment leaves a file holding everything up to its last flush.
 * An existing file is never overwritten unless `force` is set.
 * Disk space for each flush is reserved before HDF5 writes anything, so a full disk is
 * MPX_ERR_IO with the file left as it was at its last flush. The first error sticks: later
 * calls (and close) return it.
 */
#ifndef MPX_RUNLOG_H
#define MPX_RUNLOG_H

#include <stdint.h>
#include <stdio.h>

#include "mpx/error.h"
#include "mpx/graph.h"
#include "mpx/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mpx_runlog mpx_runlog;

/* Root attributes and the layer table. Strings may be NULL (written as ""). */
typedef struct {
    const char *config;     /* the resolved config text */
    const char *model, *dataset, *precision, *scaling, *device;
    int64_t seed;
    int threads;
    /* Provenance that decides whether two runs pair (same bits from the same inputs): the ISA
     * limit (runtime.h mpx_cpu_limit), the vector path each op family took, and a hash of the
     * initial weights (after train.init_from). */
    const char *isa, *cpu_paths, *init_weights;
    const char *eval_metric; /* "top1" | "mlm_acc" | "mAP" (attribute `metric` of /eval/metric) */
    int n_layers;
    const mpx_layer_info *layers;
} mpx_runlog_meta;

/* Create `path` (its directory must exist). If it exists: MPX_ERR_INPUT naming it and saying
 * to pass --force, unless force != 0. mpx_version, git_commit, created_utc and host
 * (runtime.h: mpx_host_str) are added. */
mpx_status mpx_runlog_create(const char *path, const mpx_runlog_meta *meta, int force,
                             mpx_runlog **out);
/* Reopen a run file of ours to continue it at step `resume_step` (a checkpoint's count of steps
 * done), so that the resumed run appends without duplicates or gaps: /train and /stats rows of
 * steps >= resume_step are dropped (their step is the step's index), /eval rows of steps >
 * resume_step (an evaluation's step counts the steps done before it, so the one at
 * resume_step was made, and flushed, before the checkpoint was written). The layer table must
 * match (n_layers and names), else MPX_ERR_INPUT. Only meta's layer table is used; the root
 * attribute `stopped` is removed (the run is going again). */
mpx_status mpx_runlog_reopen(const char *path, const mpx_runlog_meta *meta, int64_t resume_step,
                             mpx_runlog **out);
/* The /train/wall_s of the last row mpx_runlog_reopen kept (0 for a created file, or when it
 * kept none): a resumed run continues its training clock from there. */
double mpx_runlog_resumed_wall_s(const mpx_runlog *r);

typedef struct {
    int64_t step;
    float loss, lr;
    double loss_scale;      /* the scale at the loss output for this step */
    uint8_t skipped;
    float samples_per_s;
    double wall_s;          /* seconds since the run started */
} mpx_train_row;

/* Buffer one training row (written at the next flush; 1024 waiting rows force a flush). */
mpx_status mpx_runlog_train(mpx_runlog *r, const mpx_train_row *row);
/* Append one evaluation row and flush. */
mpx_status mpx_runlog_eval(mpx_runlog *r, int64_t step, float loss, float metric);
/* Append one statistics step (layers[n_layers] as filled by mpx_graph_backward) and flush. */
mpx_status mpx_runlog_stats(mpx_runlog *r, int64_t step, const mpx_layer_stats *layers);
/* Record that the run stopped early (divergence, error): root attribute `stopped` = reason. */
mpx_status mpx_runlog_mark_stopped(mpx_runlog *r, const char *reason);
/* Write buffered rows and flush the file to disk. */
mpx_status mpx_runlog_flush(mpx_runlog *r);
/* Flush and close; always frees r. Returns the first error seen. */
mpx_status mpx_runlog_close(mpx_runlog *r);

/* ---- reading ---- */
/* Print TSV (one header line, then rows) for WHAT = train | eval | layers | hist | underflow |
 * scale | updates | summary. `layer` (NULL = all) selects one layer by name; `step` (< 0 = all) one stats step;
 * `pooled` (hist only) sums the histograms over the selected layers. Errors name the file,
 * the missing dataset, or the unknown layer / step. Columns (`layer` = index in forward order):
 *   train      step loss lr loss_scale skipped samples_per_s wall_s
 *   eval       step loss metric
 *   layers     index name kind params fan_in                          (--layer)
 *   underflow  step layer name kind act_nonzero act_flushed act_below_min act_subnormal
 *              act_overflow act_nonfinite act_underflow_rate weight_nonzero ...
 *              weight_underflow_rate
 *   scale      step layer name scale layer_scale g_mean g_std g_min g_max w_mean w_std w_min w_max
 *   updates    step layer name kind update_nonzero update_lost update_error   (stats.h; a run
 *              file from before these statistics: MPX_ERR_INPUT saying so)
 *   hist       step layer name tensor bin count pct    (83 rows per step, layer, tensor; pooled:
 *              layer and name read "all"; bin = k of [2^k, 2^(k+1)) or zero / inf / nan)
 *   summary    model dataset precision scaling seed steps final_loss eval_step eval_loss metric
 *              skipped samples_per_s wall_s stopped git_commit threads host  (one row; samples_per_s
 *              is the median after the first 5% of steps; stopped is "-" for a run that was not
 *              stopped, else the reason it stopped)
 * underflow, scale, updates and hist take --layer and --step; --pooled is for hist only; an option an
 * export does not take is MPX_ERR_INPUT. A missing file, a file that is not HDF5 and an HDF5
 * file that is not ours are MPX_ERR_INPUT naming it. The file is read without HDF5's file
 * lock, so a run can be exported while it is being written. */
typedef struct {
    const char *layer;
    int64_t step;
    int pooled;
} mpx_export_opts;
mpx_status mpx_runlog_export(const char *path, const char *what, const mpx_export_opts *o, FILE *out);

/* Read a root attribute (config, model, ...) into a malloc'ed string (numbers in decimal). */
mpx_status mpx_runlog_read_attr(const char *path, const char *name, char **value);

#ifdef __cplusplus
}
#endif

#endif
