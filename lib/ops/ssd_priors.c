/* ssd_priors.c — SSD default boxes (priors) for a list of square feature maps.
 *
 * Each box is computed in double and rounded once to FP32, so a prior is the nearest float to
 * its formula (see mpx/ssd.h for the scales, ratios and the (map, row, col, box) order).
 */
#include <math.h>

#include "mpx/ssd.h"
#include "ops_internal.h"

static const char *const OP = "ssd priors";

static int boxes_per_cell(const mpx_ssd_priors_cfg *cfg, int k) { return cfg->ratio3[k] ? 6 : 4; }

mpx_status mpx_ssd_prior_count(const mpx_ssd_priors_cfg *cfg, int64_t *count) {
    if (!cfg) return mpx_fail(MPX_ERR_INPUT, "%s: configuration is NULL", OP);
    if (cfg->n_maps < 1 || cfg->n_maps > MPX_SSD_MAX_MAPS)
        return mpx_fail(MPX_ERR_INPUT, "%s: n_maps = %d, expected 1..%d", OP, cfg->n_maps,
                        MPX_SSD_MAX_MAPS);
    if (!(cfg->s_min > 0 && cfg->s_min <= cfg->s_max && isfinite(cfg->s_max)))
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: scales s_min = %g, s_max = %g, expected 0 < s_min <= "
                        "s_max",
                        OP, cfg->s_min, cfg->s_max);
    int64_t n = 0;
    for (int k = 0; k < cfg->n_maps; k++) {
        if (cfg->size[k] < 1 || cfg->size[k] > 4096)
            return mpx_fail(MPX_ERR_INPUT, "%s: size[%d] = %d, expected 1..4096", OP, k,
                            cfg->size[k]);
        n += (int64_t)cfg->size[k] * cfg->size[k] * boxes_per_cell(cfg, k);
    }
    if (n > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld priors, more than an I32 index holds", OP,
                        (long long)n);
    *count = n;
    return MPX_OK;
}

/* One box of centre (cx, cy) and size (w, h) into out[4], clipped when asked. */
static void put_box(double cx, double cy, double w, double h, int clip, float *out) {
    if (clip) {
        double x0 = fmax(cx - w / 2, 0), x1 = fmin(cx + w / 2, 1);
        double y0 = fmax(cy - h / 2, 0), y1 = fmin(cy + h / 2, 1);
        cx = (x0 + x1) / 2, cy = (y0 + y1) / 2, w = x1 - x0, h = y1 - y0;
    }
    out[0] = (float)cx, out[1] = (float)cy, out[2] = (float)w, out[3] = (float)h;
}

mpx_status mpx_ssd_priors(const mpx_ssd_priors_cfg *cfg, mpx_tensor *priors) {
    int64_t n = 0;
    MPX_TRY(mpx_ssd_prior_count(cfg, &n));
    MPX_TRY(ops_expect(OP, "priors", priors, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(OP, "priors", priors, 0, n, "P, the prior count of the configuration"));
    MPX_TRY(ops_expect_dim(OP, "priors", priors, 1, 4, "(cx, cy, w, h)"));
    const int m = cfg->n_maps;
    const double step =
        m > 1 ? ((double)cfg->s_max - cfg->s_min) / (m - 1) : (double)cfg->s_max - cfg->s_min;
    float *out = priors->data;
    for (int k = 0; k < m; k++) {
        const int f = cfg->size[k];
        const double s = cfg->s_min + k * step, s_next = cfg->s_min + (k + 1) * step;
        const double extra = sqrt(s * s_next);
        /* Ratios after the two ratio-1 boxes: 2, 1/2 and optionally 3, 1/3. */
        const double ratios[4] = {2, 0.5, 3, 1.0 / 3};
        const int n_ratios = boxes_per_cell(cfg, k) - 2;
        for (int i = 0; i < f; i++)
            for (int j = 0; j < f; j++) {
                const double cx = (j + 0.5) / f, cy = (i + 0.5) / f;
                put_box(cx, cy, s, s, cfg->clip, out), out += 4;
                put_box(cx, cy, extra, extra, cfg->clip, out), out += 4;
                for (int r = 0; r < n_ratios; r++) {
                    const double q = sqrt(ratios[r]);
                    put_box(cx, cy, s * q, s / q, cfg->clip, out), out += 4;
                }
            }
    }
    return MPX_OK;
}
