/* scaling.h — loss-scaling methods: none, fixed, dynamic, adaptive (ALS), adaptive-quantile.
 *
 * Every activation gradient carries a cumulative scale S (double). The loss emits its gradient
 * multiplied by S0 = mpx_scaler_loss_scale(). Global methods keep every per-layer factor at 1;
 * the adaptive methods give each Linear/Convolution layer a factor s computed from g and W
 * (docs/papers.md §3, the 2019 "approx_range" code) and rescale branch merges to one target.
 * Parameter gradients are unscaled by the S of the gradient that produced them.
 *
 * The per-layer maths are pure functions (mpx_als_*), tested on constructed inputs; the global
 * state machine (dynamic) is mpx_scaler_update.
 *
 * Two versions of ALS (`als`): MPX_ALS_MPX, the default, and MPX_ALS_REFERENCE, the 2019 code
 * (ada-loss @060a6a8) in every point where mpx departs from it deliberately: u_max 6e4, merge
 * targets tested on the stored (scaled) branch magnitudes with the code's error when none fits,
 * merges that rescale and add each branch in the storage format, weight gradients unscaled in
 * the storage format, factors recomputed every step, the power of two taken by a float32 log2
 * of a float32 value, and the factor multiplied into the stored gradient before the GEMM. The
 * configuration applies the reference's defaults (run_config.c); the executor and the functions
 * below follow `als` for the rest.
 */
#ifndef MPX_SCALING_H
#define MPX_SCALING_H

#include <stdint.h>

#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MPX_SCALING_NONE = 0,
    MPX_SCALING_FIXED,
    MPX_SCALING_DYNAMIC,
    MPX_SCALING_ADAPTIVE,
    MPX_SCALING_ADAPTIVE_QUANTILE
} mpx_scaling_method;

typedef enum { MPX_ALS_MPX = 0, MPX_ALS_REFERENCE } mpx_als_version;

typedef struct {
    mpx_scaling_method method;
    mpx_als_version als;    /* adaptive: mpx's rules or the 2019 code's (see above) */
    double loss_scale;      /* fixed: the constant S; adaptive: the initial scale at the loss */
    /* dynamic (PyTorch GradScaler semantics, plus DeepSpeed-style hysteresis and bounds) */
    double init_scale;      /* 65536 */
    double growth_factor;   /* 2 */
    double backoff_factor;  /* 0.5 */
    int growth_interval;    /* 2000 consecutive finite steps */
    int hysteresis;         /* back off on the hysteresis-th overflow since the last change; 1 */
    double min_scale;       /* floor after backoff; 0 = none */
    double max_scale;       /* ceiling after growth; 0 = none */
    /* adaptive */
    double n_uf;            /* target underflow fraction, 1e-3 */
    double u_min;           /* 6e-8 (the 2019 code's FP16 u_min) */
    double u_max;           /* 65504 (the 2019 code used 6e4) */
    double scale_bound;     /* 16 */
    double accum_bound;     /* 1024 */
    int update_every;       /* recompute the unbound factor every N steps; 100 */
    double quantile;        /* adaptive-quantile: 0.01 */
    int unscale_fp16;       /* 1: divide weight gradients by S in the storage format (the 2019
                               code); 0: in FP32 (the MPT recipe, default) */
} mpx_scaling_cfg;

/* References' defaults for every field; method NONE. */
void mpx_scaling_defaults(mpx_scaling_cfg *c);
/* "none" | "fixed" | "dynamic" | "adaptive" | "adaptive-quantile"; -1 when unknown. */
int mpx_scaling_parse(const char *name);
const char *mpx_scaling_name(mpx_scaling_method m);
/* 1 for the adaptive methods: per-layer factors and branch-merge rescaling. */
int mpx_scaling_is_layerwise(mpx_scaling_method m);

/* ---- global state: the scale at the loss, skipped-step accounting ---- */
typedef struct {
    mpx_scaling_cfg cfg;
    double scale;           /* S0 for the next backward pass */
    int growth_tracker;     /* consecutive finite steps since the last change (dynamic) */
    int hysteresis_left;    /* overflows still tolerated before a backoff (dynamic) */
    int64_t steps, skipped; /* steps seen, steps skipped */
    int last_skipped;
} mpx_scaler;

mpx_status mpx_scaler_init(mpx_scaler *s, const mpx_scaling_cfg *cfg);
static inline double mpx_scaler_loss_scale(const mpx_scaler *s) { return s->scale; }
/* End of step: `nonfinite` = some parameter gradient was Inf/NaN. Returns 1 when the optimizer
 * update must be skipped (every method skips on non-finite gradients). Updates the dynamic
 * scale (growth / backoff with hysteresis and bounds). */
int mpx_scaler_update(mpx_scaler *s, int nonfinite);

/* ---- adaptive loss scaling, one layer (docs/papers.md §3) ---- */
typedef struct {
    double mu_g, sigma_g;   /* of the incoming gradient g as stored (carrying S_prev) */
    double mu_w, sigma_w;   /* of the working weight W */
    double g_min, g_max, w_min, w_max;
    int64_t fan_in;         /* reduction length of the data-gradient GEMM */
    double q_abs_g;         /* adaptive-quantile: the quantile of nonzero |g| before g was rounded
                             * into storage, to the power of two above it (0 = none) */
} mpx_als_inputs;

/* T = sqrt(2) * erfinv(n_uf). */
double mpx_als_threshold(double n_uf);
/* Steps 1-4: the unbound factor (underflow target, then the fan_in overflow cap). */
double mpx_als_unbound(const mpx_scaling_cfg *c, const mpx_als_inputs *in);
/* The quantile variant's unbound factor: max(1, 2^-24 / q) with the same overflow cap. */
double mpx_als_quantile_unbound(const mpx_scaling_cfg *c, const mpx_als_inputs *in);
/* Steps 5-6: accumulation and scale bounds, then round down to a power of two: in double
 * (mpx), or as the 2019 code does (reference): the bounded value rounded to float32 and
 * 2^floor(log2f(s)) of it, so that a value a few float32 ulps below 2^k gives 2^k. */
double mpx_als_bound(const mpx_scaling_cfg *c, double unbound, double s_prev);
/* Step 10: the common target scale of a branch merge. S[i] are the incoming scales and
 * absmax[i] the largest |g_i| as stored (so absmax[i] / S[i] is the unscaled magnitude).
 * mpx: the largest S_i with max_i(absmax_i / S_i) * S_i < u_max; else from min S_i halving
 * while >= 1/8. reference: the largest S_i with max_i(absmax_i) * S_i < u_max (the code tests
 * the stored magnitudes), the same fallback, and 0 when even that does not fit (where the code
 * raises "Cannot find a suitable target"). */
double mpx_als_merge_target(const mpx_scaling_cfg *c, int k, const double *S, const double *absmax);
/* "mpx" | "reference"; -1 when unknown. */
int mpx_als_parse(const char *name);

#ifdef __cplusplus
}
#endif

#endif
