/* batchnorm.c — batch normalization over the channel (last) dimension, forward (optionally with
 * the ReLU after it fused: attr.relu) and backward.
 *
 * x [..., C] is viewed as [M, C]. Batch-norm is memory-bound, so every pass streams whole rows
 * (contiguous, vectorised over channels). Per-channel sums are accumulated in double over
 * fixed chunks of rows — the chunking depends only on M, never on the thread count — and the
 * chunk partials are added in a fixed order (in chunk order within groups of GROUP chunks, then
 * the group sums in group order), so results are bit-identical across thread counts and runs.
 * The CUDA backend reproduces these bits with one thread per (chunk, channel) and then per
 * (group, channel): up to 4096 chunks, so that a GPU has enough independent sums to keep its
 * memory busy (ResNet-50's 112x112x64 batch-norm at batch 256: 262K of them), and the groups,
 * so that adding 4096 partials per channel is not one long serial chain there (64 rows at
 * least per chunk: the partials stay under 1/16 of x's FP32 bytes, 2 doubles per 64 values).
 * The variance uses sums shifted by the first row (x - x[0]), which keeps E[d^2] - E[d]^2 free
 * of the cancellation of the unshifted formula at the cost of a single read pass. Chunk partials live in a buffer that grows to the largest shape seen (ops run on
 * one thread at a time), so steady-state training allocates nothing here.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

enum { CHUNK_MIN = 64, MAX_CHUNKS = 4096, GROUP = 64 };

static const char *const FWD = "batchnorm forward";
static const char *const BWD = "batchnorm backward";

/* x is F32 with >= 2 dims; *m, *c get the [M, C] view. */
static mpx_status bn_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m,
                          int64_t *c) {
    MPX_TRY(ops_expect(op, name, x, MPX_F32, -1));
    if (x->ndim < 2)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dim, expected [..., C] with >= 2 dims", op,
                        name, x->ndim);
    *c = x->shape[x->ndim - 1];
    *m = mpx_tensor_numel(x) / *c;
    return MPX_OK;
}

static mpx_status bn_channel_vec(const char *op, const char *name, const mpx_tensor *t,
                                 int64_t c) {
    MPX_TRY(ops_expect(op, name, t, MPX_F32, 1));
    return ops_expect_dim(op, name, t, 0, c, "C, the last dim of x");
}

/* Rows per chunk and the number of chunks: a function of M only. */
static int64_t chunking(int64_t m, int64_t *rows) {
    int64_t r = (m + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (r < CHUNK_MIN) r = CHUNK_MIN;
    *rows = r;
    return (m + r - 1) / r;
}

/* Per-channel totals t1[C], t2[C] of the chunk partials (part as chunk_sums leaves it): each
 * group's partials added in chunk order onto its first, then the group sums added in group
 * order starting from 0 (lib/cuda/batchnorm.cu adds in the same order; a group sum's sign of
 * zero cannot reach a total, which starts from +0). The group sums overwrite each group's
 * first partials. Channels are the inner loop: only the order per channel matters, and a
 * chunk's partials are contiguous over channels. */
static void add_partials(double *part, int64_t nchunks, int64_t c, double *t1, double *t2) {
    memset(t1, 0, (size_t)c * sizeof *t1);
    memset(t2, 0, (size_t)c * sizeof *t2);
    for (int64_t g0 = 0; g0 < nchunks; g0 += GROUP) {
        const int64_t g1 = g0 + GROUP < nchunks ? g0 + GROUP : nchunks;
        double *a1 = part + (2 * g0) * c, *a2 = part + (2 * g0 + 1) * c;
        for (int64_t k = g0 + 1; k < g1; k++) {
            const double *p1 = part + (2 * k) * c, *p2 = part + (2 * k + 1) * c;
            for (int64_t j = 0; j < c; j++) {
                a1[j] += p1[j];
                a2[j] += p2[j];
            }
        }
        for (int64_t j = 0; j < c; j++) {
            t1[j] += a1[j];
            t2[j] += a2[j];
        }
    }
}

/* The partial-sum buffer, grown to the largest request seen. */
static double *partials(int64_t n) {
    static double *buf;
    static int64_t cap;
    if (n > cap) {
        double *p = realloc(buf, (size_t)n * sizeof *p);
        if (!p) return NULL;
        buf = p;
        cap = n;
    }
    return buf;
}

/* The fused ReLU's backward (attr.relu_dy): the forward's FP32 result v = (x - mean) * scale +
 * beta, recomputed with the same operations, against the threshold `t` above which the ReLU's
 * stored output is positive. */
typedef struct {
    const float *scale, *beta;
    float t;
} relu_mask;

/* dy where the fused ReLU's output is positive, else +0 (relu.c's select), as a bit mask so
 * that the loops summing it vectorise (GCC does not if-convert the select there). */
static inline float masked(float dy, float x, float mean, float scale, float beta, float t) {
    union {
        float f;
        uint32_t u;
    } d = {dy};
    d.u &= -(uint32_t)((x - mean) * scale + beta > t);
    return d.f;
}

float mpx_batchnorm_relu_threshold(mpx_dtype store) {
    switch (store) {
    case MPX_F32:
    case MPX_TF32: return 0.0f;
    case MPX_F16: return 0x1p-25f;
    case MPX_BF16: return 0x1p-134f;
    default: return -1.0f;
    }
}

/* Per chunk k of `rows` rows, in double, into part[2k][C] and part[2k+1][C]:
 *   forward  (b == NULL): sum (a - a[0]) and sum (a - a[0])^2 — shifted moments of x;
 *   backward (b != NULL): sum a and sum a * (b - mean) — of dy and dy times centred x, with dy
 *   masked first when mk is given. */
static void chunk_sums(const float *a, const float *b, const float *mean, const relu_mask *mk,
                       int64_t m, int64_t c, int64_t rows, int64_t nchunks, double *part) {
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN && nchunks > 1)
    for (int64_t k = 0; k < nchunks; k++) {
        double *s1 = part + (2 * k) * c, *s2 = part + (2 * k + 1) * c;
        memset(s1, 0, (size_t)c * sizeof *s1);
        memset(s2, 0, (size_t)c * sizeof *s2);
        int64_t i1 = (k + 1) * rows < m ? (k + 1) * rows : m;
        for (int64_t i = k * rows; i < i1; i++) {
            const float *ra = a + i * c;
            if (!b) {
                for (int64_t j = 0; j < c; j++) {
                    double d = (double)ra[j] - (double)a[j];
                    s1[j] += d;
                    s2[j] += d * d;
                }
            } else if (!mk) {
                const float *rb = b + i * c;
                for (int64_t j = 0; j < c; j++) {
                    s1[j] += ra[j];
                    s2[j] += (double)ra[j] * ((double)rb[j] - (double)mean[j]);
                }
            } else {
                const float *rb = b + i * c, *ms = mk->scale, *mb = mk->beta, t = mk->t;
                for (int64_t j = 0; j < c; j++) {
                    const float d = masked(ra[j], rb[j], mean[j], ms[j], mb[j], t);
                    s1[j] += d;
                    s2[j] += (double)d * ((double)rb[j] - (double)mean[j]);
                }
            }
        }
    }
}

mpx_status mpx_batchnorm_forward_cpu(const mpx_batchnorm_attr *a, const mpx_tensor *x,
                                     const mpx_tensor *gamma, const mpx_tensor *beta,
                                     mpx_tensor *running_mean, mpx_tensor *running_var,
                                     mpx_tensor *save_mean, mpx_tensor *save_invstd,
                                     mpx_tensor *y) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", FWD);
    if (!(a->eps >= 0 && isfinite(a->eps)) || !(a->momentum >= 0 && a->momentum <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: eps %g must be >= 0 and momentum %g in [0, 1]", FWD,
                        a->eps, a->momentum);
    int64_t m, c;
    MPX_TRY(bn_view(FWD, "x", x, &m, &c));
    MPX_TRY(bn_channel_vec(FWD, "gamma", gamma, c));
    MPX_TRY(bn_channel_vec(FWD, "beta", beta, c));
    MPX_TRY(bn_channel_vec(FWD, "running_mean", running_mean, c));
    MPX_TRY(bn_channel_vec(FWD, "running_var", running_var, c));
    MPX_TRY(ops_expect(FWD, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(FWD, "x", x, "y", y));
    if (a->training) {
        MPX_TRY(bn_channel_vec(FWD, "save_mean", save_mean, c));
        MPX_TRY(bn_channel_vec(FWD, "save_invstd", save_invstd, c));
        if (m < 2)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: training needs more than one value per channel (x has %lld rows "
                            "of C = %lld): the unbiased running variance is undefined",
                            FWD, (long long)m, (long long)c);
    }
    const float *xd = x->data, *g = gamma->data, *bt = beta->data;
    float *yd = y->data, *rm = running_mean->data, *rv = running_var->data;
    float *mean = NULL, *scale = NULL;
    int64_t rows, nchunks = chunking(m, &rows);
    double *part = partials(2 * nchunks * c + 3 * c);
    if (!part) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for partial sums", FWD);
    double *tot = part + 2 * nchunks * c;   /* two totals per channel */
    float *mv = (float *)(tot + 2 * c);     /* mean[C], scale[C] as floats */
    mean = mv;
    scale = mv + c;
    if (a->training) {
        float *sm = save_mean->data, *si = save_invstd->data;
        chunk_sums(xd, NULL, NULL, NULL, m, c, rows, nchunks, part);
        add_partials(part, nchunks, c, tot, tot + c);
        const double mom = a->momentum;
        for (int64_t j = 0; j < c; j++) {
            const double s1 = tot[j], s2 = tot[c + j];
            double dm = s1 / (double)m, var = s2 / (double)m - dm * dm;
            if (var < 0) var = 0;
            double mu = xd[j] + dm, invstd = 1.0 / sqrt(var + a->eps);
            mean[j] = sm[j] = (float)mu;
            si[j] = (float)invstd;
            scale[j] = (float)((double)si[j] * g[j]); /* from the saved invstd: see relu_dy */
            rm[j] = (float)((1.0 - mom) * rm[j] + mom * mu);
            rv[j] = (float)((1.0 - mom) * rv[j] + mom * var * (double)m / (double)(m - 1));
        }
    } else {
        for (int64_t j = 0; j < c; j++) {
            mean[j] = rm[j];
            scale[j] = (float)(g[j] / sqrt((double)rv[j] + a->eps));
        }
    }
    /* The fused ReLU is relu.c's select on the FP32 result (NaN passes). */
    const int relu = a->relu;
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
        const float *row = xd + i * c;
        float *out = yd + i * c;
        if (relu)
            for (int64_t j = 0; j < c; j++) {
                const float v = (row[j] - mean[j]) * scale[j] + bt[j];
                out[j] = v < 0.0f ? 0.0f : v;
            }
        else
            for (int64_t j = 0; j < c; j++) out[j] = (row[j] - mean[j]) * scale[j] + bt[j];
    }
    return MPX_OK;
}

/* With xhat = (x - mean) * invstd and y = gamma * xhat + beta:
 *   dbeta = sum_rows dy,  dgamma = sum_rows dy * xhat,
 *   dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M),
 * dy masked by the fused ReLU first with relu_dy (both passes recompute the mask: no pass of
 * its own, no masked copy). */
mpx_status mpx_batchnorm_backward_cpu(const mpx_batchnorm_attr *a, const mpx_tensor *dy,
                                      const mpx_tensor *x, const mpx_tensor *gamma,
                                      const mpx_tensor *beta, const mpx_tensor *save_mean,
                                      const mpx_tensor *save_invstd, mpx_tensor *dx,
                                      mpx_tensor *dgamma, mpx_tensor *dbeta) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", BWD);
    if (!a->training)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "%s: only training mode has a backward (attr.training is 0)", BWD);
    int64_t m, c;
    MPX_TRY(bn_view(BWD, "x", x, &m, &c));
    MPX_TRY(ops_expect(BWD, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dy", dy));
    MPX_TRY(ops_expect(BWD, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dx", dx));
    MPX_TRY(bn_channel_vec(BWD, "gamma", gamma, c));
    MPX_TRY(bn_channel_vec(BWD, "save_mean", save_mean, c));
    MPX_TRY(bn_channel_vec(BWD, "save_invstd", save_invstd, c));
    MPX_TRY(bn_channel_vec(BWD, "dgamma", dgamma, c));
    MPX_TRY(bn_channel_vec(BWD, "dbeta", dbeta, c));
    relu_mask mask = {NULL, NULL, 0.0f};
    if (a->relu_dy) {
        MPX_TRY(bn_channel_vec(BWD, "beta (the fused ReLU's backward)", beta, c));
        mask.t = mpx_batchnorm_relu_threshold(a->relu_store);
        if (mask.t < 0)
            return mpx_fail(MPX_ERR_UNSUPPORTED,
                            "%s: the fused ReLU's output stored as %s (expected f32, f16 or bf16)",
                            BWD, mpx_dtype_name(a->relu_store));
        mask.beta = beta->data;
    }
    const float *dyd = dy->data, *xd = x->data, *g = gamma->data;
    const float *sm = save_mean->data, *si = save_invstd->data;
    float *dxd = dx->data, *dg = dgamma->data, *db = dbeta->data;
    int64_t rows, nchunks = chunking(m, &rows);
    double *part = partials(2 * nchunks * c + 2 * c + 2 * c + c);
    if (!part) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for partial sums", BWD);
    /* the forward's scale (batchnorm forward), C floats after the totals and coefficients */
    float *scale = (float *)(part + 2 * nchunks * c + 4 * c);
    for (int64_t j = 0; j < c; j++) scale[j] = (float)((double)si[j] * g[j]);
    mask.scale = scale;
    chunk_sums(dyd, xd, sm, a->relu_dy ? &mask : NULL, m, c, rows, nchunks, part);
    double *tot = part + 2 * nchunks * c; /* two totals per channel */
    add_partials(part, nchunks, c, tot, tot + c);
    float *k = (float *)(tot + 2 * c), *mdb = k + c, *mdg = mdb + c; /* 3C floats in 2C doubles */
    for (int64_t j = 0; j < c; j++) {
        const double sdy = tot[j];
        double sdyx = tot[c + j];
        sdyx *= si[j]; /* sum dy * (x - mean), times invstd: sum dy * xhat */
        db[j] = (float)sdy;
        dg[j] = (float)sdyx;
        k[j] = g[j] * si[j];
        mdb[j] = (float)(sdy / (double)m);
        mdg[j] = (float)(sdyx / (double)m);
    }
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
        const float *drow = dyd + i * c, *xrow = xd + i * c;
        float *out = dxd + i * c;
        if (a->relu_dy)
            for (int64_t j = 0; j < c; j++) {
                const float d = masked(drow[j], xrow[j], sm[j], scale[j], mask.beta[j], mask.t);
                float xhat = (xrow[j] - sm[j]) * si[j];
                out[j] = k[j] * (d - mdb[j] - xhat * mdg[j]);
            }
        else
            for (int64_t j = 0; j < c; j++) {
                float xhat = (xrow[j] - sm[j]) * si[j];
                out[j] = k[j] * (drow[j] - mdb[j] - xhat * mdg[j]);
            }
    }
    return MPX_OK;
}
