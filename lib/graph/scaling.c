/* scaling.c — loss-scaling state machine (fixed, dynamic) and the adaptive per-layer maths.
 *
 * The adaptive formulas follow the 2019 ada-loss "approx_range" code (docs/papers.md §3):
 * sigma_o = sqrt((sigma_g^2 + mu_g^2) (sigma_w^2 + mu_w^2)); s = max(1, u_min / (T sigma_o));
 * s = min(s, (u_max / fan_in) / o_max) with o_max the largest |product| of the extremes of g
 * and W (the code takes the absolute value of the four signed products); a zero sigma_o gives 1.
 */
#include "mpx/scaling.h"

#include <math.h>
#include <string.h>

void mpx_scaling_defaults(mpx_scaling_cfg *c) {
    memset(c, 0, sizeof *c);
    c->method = MPX_SCALING_NONE;
    c->loss_scale = 1.0;
    c->init_scale = 65536.0;
    c->growth_factor = 2.0;
    c->backoff_factor = 0.5;
    c->growth_interval = 2000;
    c->hysteresis = 1;
    c->min_scale = 0.0;
    c->max_scale = 0.0;
    c->n_uf = 1e-3;
    c->u_min = 6e-8;
    c->u_max = 65504.0;
    c->scale_bound = 16.0;
    c->accum_bound = 1024.0;
    c->update_every = 100;
    c->quantile = 0.01;
    c->unscale_fp16 = 0;
}

static const char *const g_names[] = {"none", "fixed", "dynamic", "adaptive", "adaptive-quantile"};

int mpx_scaling_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof g_names / sizeof *g_names); i++)
        if (strcmp(name, g_names[i]) == 0) return i;
    return -1;
}

const char *mpx_scaling_name(mpx_scaling_method m) {
    return (unsigned)m < sizeof g_names / sizeof *g_names ? g_names[m] : "?";
}

int mpx_scaling_is_layerwise(mpx_scaling_method m) {
    return m == MPX_SCALING_ADAPTIVE || m == MPX_SCALING_ADAPTIVE_QUANTILE;
}

mpx_status mpx_scaler_init(mpx_scaler *s, const mpx_scaling_cfg *cfg) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    const mpx_scaling_cfg *c = cfg;
    switch (c->method) {
    case MPX_SCALING_NONE: s->scale = 1.0; break;
    case MPX_SCALING_FIXED:
    case MPX_SCALING_ADAPTIVE:
    case MPX_SCALING_ADAPTIVE_QUANTILE: s->scale = c->loss_scale; break;
    case MPX_SCALING_DYNAMIC: s->scale = c->init_scale; break;
    default: return mpx_fail(MPX_ERR_INPUT, "unknown scaling method %d", (int)c->method);
    }
    if (!(s->scale > 0) || !isfinite(s->scale))
        return mpx_fail(MPX_ERR_INPUT, "loss scale must be positive and finite, got %g", s->scale);
    if (c->method == MPX_SCALING_DYNAMIC) {
        if (c->growth_interval < 1 || c->hysteresis < 1 || !(c->growth_factor > 1) ||
            !(c->backoff_factor > 0 && c->backoff_factor < 1))
            return mpx_fail(MPX_ERR_INPUT,
                            "dynamic scaling needs growth_interval >= 1, hysteresis >= 1, "
                            "growth_factor > 1 and 0 < backoff_factor < 1");
        if (c->max_scale > 0 && c->min_scale > c->max_scale)
            return mpx_fail(MPX_ERR_INPUT, "min_scale %g exceeds max_scale %g", c->min_scale,
                            c->max_scale);
    }
    s->hysteresis_left = c->hysteresis > 0 ? c->hysteresis : 1;
    return MPX_OK;
}

int mpx_scaler_update(mpx_scaler *s, int nonfinite) {
    const mpx_scaling_cfg *c = &s->cfg;
    s->steps++;
    s->last_skipped = nonfinite != 0;
    if (nonfinite) s->skipped++;
    if (c->method != MPX_SCALING_DYNAMIC) return s->last_skipped;

    if (nonfinite) {
        s->growth_tracker = 0;
        if (--s->hysteresis_left <= 0) {
            s->scale *= c->backoff_factor;
            if (c->min_scale > 0 && s->scale < c->min_scale) s->scale = c->min_scale;
            s->hysteresis_left = c->hysteresis;
        }
        return 1;
    }
    if (++s->growth_tracker >= c->growth_interval) {
        s->scale *= c->growth_factor;
        if (c->max_scale > 0 && s->scale > c->max_scale) s->scale = c->max_scale;
        s->growth_tracker = 0;
        s->hysteresis_left = c->hysteresis;
    }
    return 0;
}

double mpx_als_threshold(double n_uf) {
    /* erfinv by Newton iterations on erf (C has erf but no erfinv). n_uf is small, so start
     * from the linear term erf(x) ~ 2x/sqrt(pi). */
    double y = n_uf, x = y * sqrt(M_PI) / 2.0;
    for (int i = 0; i < 50; i++) {
        double err = erf(x) - y;
        x -= err / (2.0 / sqrt(M_PI) * exp(-x * x));
        if (fabs(err) < 1e-17) break;
    }
    return sqrt(2.0) * x;
}

/* Step 4: the overflow cap (u_max / fan_in) / o_max; +inf when o_max is 0. */
static double overflow_cap(const mpx_scaling_cfg *c, const mpx_als_inputs *in) {
    double p[4] = {in->g_max * in->w_max, in->g_min * in->w_min, in->g_max * in->w_min,
                   in->g_min * in->w_max};
    double o_max = 0;
    for (int i = 0; i < 4; i++) o_max = fmax(o_max, fabs(p[i]));
    double fan_in = in->fan_in > 0 ? (double)in->fan_in : 1.0;
    return (c->u_max / fan_in) / o_max;
}

double mpx_als_unbound(const mpx_scaling_cfg *c, const mpx_als_inputs *in) {
    double sigma_o = sqrt((in->sigma_g * in->sigma_g + in->mu_g * in->mu_g) *
                          (in->sigma_w * in->sigma_w + in->mu_w * in->mu_w));
    if (sigma_o == 0) return 1.0;
    double s = fmax(1.0, c->u_min / (mpx_als_threshold(c->n_uf) * sigma_o));
    return fmin(s, overflow_cap(c, in));
}

double mpx_als_quantile_unbound(const mpx_scaling_cfg *c, const mpx_als_inputs *in) {
    if (!(in->q_abs_g > 0)) return 1.0;
    double s = fmax(1.0, ldexp(1.0, -24) / in->q_abs_g);
    return fmin(s, overflow_cap(c, in));
}

double mpx_als_bound(const mpx_scaling_cfg *c, double unbound, double s_prev) {
    double s = unbound;
    s = fmin(s, c->accum_bound / s_prev);
    s = fmin(s, c->scale_bound);
    if (c->als == MPX_ALS_REFERENCE) {
        /* bound_loss_scale_by_heuristics ends in .astype(float32); get_power_of_two_scale takes
         * np.log2 of that float32 (a float32 result) and np.power(2, np.floor(...)). */
        const float s32 = (float)s;
        return exp2((double)floorf(log2f(s32)));
    }
    return exp2(floor(log2(s)));
}

int mpx_als_parse(const char *name) {
    if (strcmp(name, "mpx") == 0) return MPX_ALS_MPX;
    if (strcmp(name, "reference") == 0) return MPX_ALS_REFERENCE;
    return -1;
}

double mpx_als_merge_target(const mpx_scaling_cfg *c, int k, const double *S, const double *absmax) {
    /* The magnitude a target must keep below u_max: the largest unscaled one (mpx), or the
     * largest stored one as the 2019 code tests it (rescaling in ada_loss.py). */
    const int ref = c->als == MPX_ALS_REFERENCE;
    double m = 0, s_min = INFINITY, best = 0;
    for (int i = 0; i < k; i++) {
        m = fmax(m, ref ? absmax[i] : absmax[i] / S[i]);
        s_min = fmin(s_min, S[i]);
    }
    for (int i = 0; i < k; i++)
        if (m * S[i] < c->u_max && S[i] > best) best = S[i];
    if (best > 0) return best;
    /* None fits: start from the smallest scale and halve while >= 1/8 (the 2019 code). */
    double t = s_min;
    while (t >= 0.125 && !(m * t < c->u_max)) t *= 0.5;
    if (ref && !(m * t < c->u_max)) return 0; /* the code raises here */
    return t;
}
