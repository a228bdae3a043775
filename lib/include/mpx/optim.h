/* optim.h — optimizers on FP32 master weights, gradient clipping, learning-rate schedules.
 *
 * The optimizer reads the unscaled FP32 gradients the executor leaves in mpx_param.grad and
 * updates the masters (docs/papers.md §1: unscale before clipping, weight decay, update). One
 * path for every recipe: the precision policy says where masters and state live. Masters are
 * FP32 arrays; without master weights the graph rounds them into storage after the update
 * (mpx_graph_sync_weights). State (momentum, Adam moments) is owned by the optimizer: FP32, or,
 * when the policy keeps it in storage, rounded into the low format after every update.
 */
#ifndef MPX_OPTIM_H
#define MPX_OPTIM_H

#include <stdint.h>

#include "mpx/error.h"
#include "mpx/graph.h"
#include "mpx/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LAMB (You et al. 2020): the AdamW direction u = m^ / (sqrt(v^) + eps) + wd w, scaled per
 * parameter tensor by the trust ratio ||w|| / ||u|| (1 when either is 0): w -= lr trust u. */
typedef enum { MPX_OPT_SGD = 0, MPX_OPT_ADAMW, MPX_OPT_LAMB } mpx_optimizer_kind;

typedef struct {
    mpx_optimizer_kind kind;
    double momentum;      /* SGD: 0.9 (PyTorch semantics: v = m v + g; w -= lr v) */
    int nesterov;
    double weight_decay;  /* SGD: L2 added to the gradient; AdamW: decoupled */
    double beta1, beta2, eps; /* AdamW */
    double clip_norm;     /* global L2 norm clip of the unscaled gradient; 0 = off */
} mpx_optim_cfg;

typedef struct mpx_optimizer mpx_optimizer;

/* "sgd" | "adamw" | "lamb"; -1 when unknown. */
int mpx_optimizer_parse(const char *name);
mpx_status mpx_optimizer_create(mpx_graph *g, const mpx_optim_cfg *cfg, mpx_optimizer **out);
void mpx_optimizer_free(mpx_optimizer *o);
/* One update with learning rate lr; returns the gradient norm before clipping in *grad_norm.
 * The norm costs one wait on a device (every parameter's sum in one download). */
mpx_status mpx_optimizer_step(mpx_optimizer *o, double lr, double *grad_norm);
/* The same update with the global gradient norm given (mpx_graph_grad_norm after the backward
 * pass read it with the step's status): MPX_ERR_NUMERIC, masters untouched, when it is not
 * finite. No wait, except LAMB's trust ratios (one). */
mpx_status mpx_optimizer_step_norm(mpx_optimizer *o, double lr, double norm);
/* Optimizer state for checkpoints: n_state arrays per parameter, each of the param's numel. */
int mpx_optimizer_n_state(const mpx_optimizer *o);
float *mpx_optimizer_state(mpx_optimizer *o, int param, int k);
int64_t mpx_optimizer_steps(const mpx_optimizer *o);
void mpx_optimizer_set_steps(mpx_optimizer *o, int64_t steps);

/* Lost updates (MPT §3.1), measured on statistics steps: mpx_optimizer_watch before the update
 * keeps the stored parameters and has the next update write each element's update d (the
 * backend's step structs: delta); after the update and mpx_graph_sync_weights,
 * mpx_optimizer_watched compares the stored parameters with what they were and fills the
 * update_* fields of stats[mpx_graph_param_layer(p)] (stats.h), pooled over each layer's
 * parameters. A skipped step (no update between the two) leaves them 0. Three downloads of the
 * parameters on a device. */
mpx_status mpx_optimizer_watch(mpx_optimizer *o);
mpx_status mpx_optimizer_watched(mpx_optimizer *o, mpx_layer_stats *stats);

/* ---- learning-rate schedules ---- */
typedef enum { MPX_LR_CONSTANT = 0, MPX_LR_STEP, MPX_LR_COSINE, MPX_LR_LINEAR } mpx_lr_kind;
typedef struct {
    mpx_lr_kind kind;
    double base_lr;
    int64_t warmup_steps;   /* linear warm-up from base_lr * warmup_start to base_lr */
    double warmup_start;    /* fraction of base_lr at step 0 (0.0 .. 1.0) */
    int64_t total_steps;    /* cosine / linear decay horizon */
    double final_lr_frac;   /* cosine / linear: lr at total_steps as a fraction of base */
    double step_gamma;      /* step: multiply by gamma at each milestone */
    int64_t milestones[8];  /* step: steps at which the lr drops (ascending, 0-terminated) */
} mpx_lr_schedule;
/* "constant" | "step" | "cosine" | "linear"; -1 when unknown. */
int mpx_lr_parse(const char *name);
double mpx_lr_at(const mpx_lr_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif

#endif
