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
 * of the cancellation of the unshifted formula at the cost of a single read pass. Chunk
 * partials live in a buffer of the call's own (ops keep no state between calls). x, y, dy and dx
 * may each be stored as F32, F16 or BF16 (tile.h: decoded as loaded, rounded to nearest as
 * stored; the per-channel vectors are FP32); the passes run over tiles of rows, so the sums'
 * order is the FP32 path's.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"
#include "tile.h"

enum { CHUNK_MIN = 64, MAX_CHUNKS = 4096, GROUP = 64 };

static const char *const FWD = "batchnorm forward";
static const char *const BWD = "batchnorm backward";

/* x is F32, F16 or BF16 with >= 2 dims; *m, *c get the [M, C] view. */
static mpx_status bn_view(const char *op, const char *name, const mpx_tensor *x, int64_t *m,
                          int64_t *c) {
    MPX_TRY(ops_expect_float(op, name, x, -1));
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

/* One tile's rows (rows x w values of a, and of b when given, channels from j0) into the
 * channels' double sums p1, p2, as chunk_sums says. */
OPS_VECTOR_CLONES static void tile_sums(const float *ta, const float *tb, const float *f0,
                                        const float *mn, const relu_mask *mk, int64_t j0,
                                        int64_t rows, int64_t w, double *p1, double *p2) {
    for (int64_t i = 0; i < rows; i++) {
        const float *ra = ta + i * w;
        if (!tb) {
            for (int64_t j = 0; j < w; j++) {
                double d = (double)ra[j] - (double)f0[j];
                p1[j] += d;
                p2[j] += d * d;
            }
        } else if (!mk) {
            const float *rb = tb + i * w;
            for (int64_t j = 0; j < w; j++) {
                p1[j] += ra[j];
                p2[j] += (double)ra[j] * ((double)rb[j] - (double)mn[j]);
            }
        } else {
            const float *rb = tb + i * w, *ms = mk->scale + j0, *mb = mk->beta + j0, th = mk->t;
            for (int64_t j = 0; j < w; j++) {
                const float d = masked(ra[j], rb[j], mn[j], ms[j], mb[j], th);
                p1[j] += d;
                p2[j] += (double)d * ((double)rb[j] - (double)mn[j]);
            }
        }
    }
}

/* Per chunk k of `rows` rows, in double, into part[2k][C] and part[2k+1][C]:
 *   forward  (b == NULL): sum (a - a0) and sum (a - a0)^2 — shifted moments of x, a0 its first
 *   row in FP32;
 *   backward (b != NULL): sum a and sum a * (b - mean) — of dy and dy times centred x, with dy
 *   masked first when mk is given. */
static void chunk_sums(const mpx_tensor *a, const mpx_tensor *b, const float *a0,
                       const float *mean, const relu_mask *mk, int64_t m, int64_t c, int64_t rows,
                       int64_t nchunks, double *part) {
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN && nchunks > 1)
    for (int64_t k = 0; k < nchunks; k++) {
        float ba[TILE], bb[TILE];
        double *s1 = part + (2 * k) * c, *s2 = part + (2 * k + 1) * c;
        memset(s1, 0, (size_t)c * sizeof *s1);
        memset(s2, 0, (size_t)c * sizeof *s2);
        const int64_t i0 = k * rows, i1 = (k + 1) * rows < m ? (k + 1) * rows : m;
        const int64_t nt = tile_count(i0, i1, c);
        for (int64_t q = 0; q < nt; q++) {
            const tile_run t = tile_at(q, i0, i1, c);
            const int64_t off = tile_offset(&t, c), len = tile_len(&t), w = t.j1 - t.j0;
            const float *ta = tile_load(a, off, len, ba);
            const float *tb = b ? tile_load(b, off, len, bb) : NULL;
            tile_sums(ta, tb, a0 ? a0 + t.j0 : NULL, mean ? mean + t.j0 : NULL, mk, t.j0,
                      t.i1 - t.i0, w,
                      s1 + t.j0, s2 + t.j0);
        }
    }
}

/* One tile's rows of the forward: y = (x - mean) * scale + beta, and max(y, 0) with relu
 * (relu.c's select on the FP32 result: NaN passes). */
OPS_VECTOR_CLONES static void tile_forward(const float *xs, float *ys, const float *mn,
                                           const float *sc, const float *bb, int64_t rows,
                                           int64_t w, int relu) {
    for (int64_t i = 0; i < rows; i++) {
        const float *row = xs + i * w;
        float *out = ys + i * w;
        if (relu)
            for (int64_t j = 0; j < w; j++) {
                const float v = (row[j] - mn[j]) * sc[j] + bb[j];
                out[j] = v < 0.0f ? 0.0f : v;
            }
        else
            for (int64_t j = 0; j < w; j++) out[j] = (row[j] - mn[j]) * sc[j] + bb[j];
    }
}

/* One tile's rows of the backward's dx (see mpx_batchnorm_backward_cpu); dy masked by the fused
 * ReLU when be (its beta) is given. */
OPS_VECTOR_CLONES static void tile_backward(const float *dys, const float *xs, float *dxs,
                                            const float *mn, const float *is, const float *kk,
                                            const float *mb, const float *mg, const float *sc,
                                            const float *be, float th, int64_t rows, int64_t w) {
    for (int64_t i = 0; i < rows; i++) {
        const float *drow = dys + i * w, *xrow = xs + i * w;
        float *out = dxs + i * w;
        if (be) {
            for (int64_t j = 0; j < w; j++) {
                const float d = masked(drow[j], xrow[j], mn[j], sc[j], be[j], th);
                float xhat = (xrow[j] - mn[j]) * is[j];
                out[j] = kk[j] * (d - mb[j] - xhat * mg[j]);
            }
        } else {
            for (int64_t j = 0; j < w; j++) {
                float xhat = (xrow[j] - mn[j]) * is[j];
                out[j] = kk[j] * (drow[j] - mb[j] - xhat * mg[j]);
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
    MPX_TRY(ops_expect_float(FWD, "y", y, -1));
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
    const float *g = gamma->data, *bt = beta->data;
    float *rm = running_mean->data, *rv = running_var->data;
    int64_t rows, nchunks = ops_chunking(m, CHUNK_MIN, MAX_CHUNKS, &rows);
    double *part = malloc((size_t)(2 * nchunks * c + 4 * c) * sizeof *part);
    if (!part) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for partial sums", FWD);
    double *tot = part + 2 * nchunks * c; /* two totals per channel */
    float *mean = (float *)(tot + 2 * c), *scale = mean + c, *x0 = scale + c; /* 3C floats */
    if (a->training) {
        float *sm = save_mean->data, *si = save_invstd->data;
        tile_load_into(x, 0, c, x0); /* the first row, the shift of the sums */
        chunk_sums(x, NULL, x0, NULL, NULL, m, c, rows, nchunks, part);
        add_partials(part, nchunks, c, tot, tot + c);
        double mt = (double)m; /* the rows the statistics count */
        if (a->reduce) {
            const mpx_status st = a->reduce(a->reduce_ctx, tot, x0, c, m);
            if (st != MPX_OK) {
                free(part);
                return st;
            }
            mt *= a->replicas > 1 ? a->replicas : 1;
        }
        const double mom = a->momentum;
        for (int64_t j = 0; j < c; j++) {
            const double s1 = tot[j], s2 = tot[c + j];
            double dm = s1 / mt, var = s2 / mt - dm * dm;
            if (var < 0) var = 0;
            double mu = x0[j] + dm, invstd = 1.0 / sqrt(var + a->eps);
            mean[j] = sm[j] = (float)mu;
            si[j] = (float)invstd;
            scale[j] = (float)((double)si[j] * g[j]); /* from the saved invstd: see relu_dy */
            rm[j] = (float)((1.0 - mom) * rm[j] + mom * mu);
            rv[j] = (float)((1.0 - mom) * rv[j] + mom * var * mt / (mt - 1));
        }
    } else {
        for (int64_t j = 0; j < c; j++) {
            mean[j] = rm[j];
            scale[j] = (float)(g[j] / sqrt((double)rv[j] + a->eps));
        }
    }
    /* The fused ReLU is relu.c's select on the FP32 result (NaN passes). */
    const int relu = a->relu;
    const int64_t nt = tile_count(0, m, c);
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN)
    for (int64_t q = 0; q < nt; q++) {
        float bx[TILE], by[TILE];
        const tile_run t = tile_at(q, 0, m, c);
        const int64_t off = tile_offset(&t, c), len = tile_len(&t), w = t.j1 - t.j0;
        const float *xs = tile_load(x, off, len, bx), *mn = mean + t.j0, *sc = scale + t.j0,
                    *bb = bt + t.j0;
        float *ys = tile_dst(y, off, by);
        tile_forward(xs, ys, mn, sc, bb, t.i1 - t.i0, w, relu);
        tile_store(y, off, len, ys);
    }
    free(part);
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
    MPX_TRY(ops_expect_float(BWD, "dy", dy, -1));
    MPX_TRY(ops_expect_same_shape(BWD, "x", x, "dy", dy));
    MPX_TRY(ops_expect_float(BWD, "dx", dx, -1));
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
    const float *g = gamma->data;
    const float *sm = save_mean->data, *si = save_invstd->data;
    float *dg = dgamma->data, *db = dbeta->data;
    int64_t rows, nchunks = ops_chunking(m, CHUNK_MIN, MAX_CHUNKS, &rows);
    double *part = malloc((size_t)(2 * nchunks * c + 2 * c + 2 * c + c) * sizeof *part);
    if (!part) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for partial sums", BWD);
    /* the forward's scale (batchnorm forward), C floats after the totals and coefficients */
    float *scale = (float *)(part + 2 * nchunks * c + 4 * c);
    for (int64_t j = 0; j < c; j++) scale[j] = (float)((double)si[j] * g[j]);
    mask.scale = scale;
    chunk_sums(dy, x, NULL, sm, a->relu_dy ? &mask : NULL, m, c, rows, nchunks, part);
    double *tot = part + 2 * nchunks * c; /* two totals per channel */
    add_partials(part, nchunks, c, tot, tot + c);
    double mt = (double)m;
    if (a->reduce) {
        const mpx_status st = a->reduce(a->reduce_ctx, tot, NULL, c, m);
        if (st != MPX_OK) {
            free(part);
            return st;
        }
        mt *= a->replicas > 1 ? a->replicas : 1;
    }
    float *k = (float *)(tot + 2 * c), *mdb = k + c, *mdg = mdb + c; /* 3C floats in 2C doubles */
    for (int64_t j = 0; j < c; j++) {
        const double sdy = tot[j];
        double sdyx = tot[c + j];
        sdyx *= si[j]; /* sum dy * (x - mean), times invstd: sum dy * xhat */
        db[j] = (float)sdy;
        dg[j] = (float)sdyx;
        k[j] = g[j] * si[j];
        mdb[j] = (float)(sdy / mt);
        mdg[j] = (float)(sdyx / mt);
    }
    const int64_t nt = tile_count(0, m, c);
#pragma omp parallel for schedule(static) if (m * c >= OPS_PAR_MIN)
    for (int64_t q = 0; q < nt; q++) {
        float bdy[TILE], bx[TILE], bdx[TILE];
        const tile_run t = tile_at(q, 0, m, c);
        const int64_t off = tile_offset(&t, c), len = tile_len(&t), w = t.j1 - t.j0;
        /* dy is loaded before dx is stored: dx may be dy's storage (relu_dy runs in place) */
        const float *dys = tile_load(dy, off, len, bdy), *xs = tile_load(x, off, len, bx);
        const float *mn = sm + t.j0, *is = si + t.j0, *kk = k + t.j0, *mb = mdb + t.j0,
                    *mg = mdg + t.j0, *sc = scale + t.j0;
        float *dxs = tile_dst(dx, off, bdx);
        tile_backward(dys, xs, dxs, mn, is, kk, mb, mg, sc, a->relu_dy ? mask.beta + t.j0 : NULL,
                      mask.t, t.i1 - t.i0, w);
        tile_store(dx, off, len, dxs);
    }
    free(part);
    return MPX_OK;
}
