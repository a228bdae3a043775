/* test_op_native16.c — the GEMM family on BF16 storage through oneDNN's native kernels
 * (gemm_lowp.c) against the emulation (the FP32 op on the decoded values), per op and pass:
 * linear, linear_t and bmm (forward, backward data and weights), conv2d (three geometries,
 * three passes).
 *
 * A product of two BF16 values is exact in FP32, so the paths differ only in the order their
 * FP32 sums are taken, and in two rules of the BF16 dot-product instructions: inputs below
 * 2^-126 count as zero and partial sums below 2^-126 are flushed. Whatever its order, each path
 * is within gamma_R * S of the exact sum of an output of R terms (S = sum |a_i b_i|,
 * gamma_R = R u / (1 - R u), u = 2^-24), so they differ by at most
 *     2 gamma_R S  +  R 2^-126 (flushed partial sums)  +  the |terms| with a subnormal operand.
 * Checked:
 *  - normal random operands: within that bound (the largest fraction of it used is printed,
 *    with how many outputs differ at all);
 *  - small integers, whose sums FP32 holds exactly in any order: bit for bit;
 *  - a 16-bit output: the native FP32 result rounded once to nearest even, bit for bit;
 *  - native kernels turned off (mpx_gemm_lowp_force(ctx, 0)): the op on BF16 tensors is the FP32 op
 *    on the decoded values bit for bit, on every CPU;
 *  - subnormal inputs: within the bound with their terms; whether this CPU flushed is printed.
 * Without native BF16 GEMMs (no AVX512_BF16 or AMX, or a oneDNN without them) the native checks
 * are skipped with a message (exit 77) once the emulation checks have passed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

static const double U = 1.0 / 16777216.0;

enum { PASS_F, PASS_BD, PASS_BW };
static const char *const pass_name[] = {"forward", "backward-data", "backward-weights"};
enum { IN_GAUSS, IN_INT, IN_SUBNORMAL, IN_ZERO_ROWS };
static const char *const input_name[] = {"normal", "integer", "subnormal", "zero-row"};

/* ---- the terms of each output: S = sum |a b| and the count R, in double ---- */

/* C[b,i,j] = sum_p A(b,i,p) B(b,p,j), A [M,K] ([K,M] with ta), B [K,N] ([N,K] with tb), dC like
 * C. Accumulates into s/r for C, dA (shaped like A) and dB (like B); any may be NULL. */
static void mm_terms(int batch, int M, int N, int K, int ta, int tb, const double *a,
                     const double *b, const double *dc, double *sc, double *rc, double *sda,
                     double *rda, double *sdb, double *rdb) {
    for (int q = 0; q < batch; q++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                for (int p = 0; p < K; p++) {
                    const size_t ai =
                        (size_t)q * M * K + (ta ? (size_t)p * M + i : (size_t)i * K + p);
                    const size_t bi =
                        (size_t)q * K * N + (tb ? (size_t)j * K + p : (size_t)p * N + j);
                    const size_t ci = ((size_t)q * M + i) * N + j;
                    if (sc) sc[ci] += a[ai] * b[bi], rc[ci] += 1;
                    if (sda) sda[ai] += dc[ci] * b[bi], rda[ai] += 1;
                    if (sdb) sdb[bi] += a[ai] * dc[ci], rdb[bi] += 1;
                }
}

typedef struct {
    int n, h, w, c, k, kh, kw;
    mpx_conv2d_attr at;
} conv_geom;

static int conv_oh(const conv_geom *g) {
    return (g->h + 2 * g->at.pad_h - g->kh) / g->at.stride_h + 1;
}
static int conv_ow(const conv_geom *g) {
    return (g->w + 2 * g->at.pad_w - g->kw) / g->at.stride_w + 1;
}

/* y = conv(x, w); dx and dw from dy: the terms of each output, as mm_terms. */
static void conv_terms(const conv_geom *g, const double *x, const double *w, const double *dy,
                       double *sy, double *ry, double *sdx, double *rdx, double *sdw, double *rdw) {
    const int oh = conv_oh(g), ow = conv_ow(g);
    for (int n = 0; n < g->n; n++)
        for (int y = 0; y < oh; y++)
            for (int z = 0; z < ow; z++)
                for (int i = 0; i < g->kh; i++)
                    for (int j = 0; j < g->kw; j++) {
                        const int ih = y * g->at.stride_h - g->at.pad_h + i;
                        const int iw = z * g->at.stride_w - g->at.pad_w + j;
                        if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) continue;
                        for (int c = 0; c < g->c; c++)
                            for (int k = 0; k < g->k; k++) {
                                const size_t xi = (((size_t)n * g->h + ih) * g->w + iw) * g->c + c;
                                const size_t wi = (((size_t)i * g->kw + j) * g->c + c) * g->k + k;
                                const size_t yi = (((size_t)n * oh + y) * ow + z) * g->k + k;
                                if (sy) sy[yi] += x[xi] * w[wi], ry[yi] += 1;
                                if (sdx) sdx[xi] += dy[yi] * w[wi], rdx[xi] += 1;
                                if (sdw) sdw[wi] += x[xi] * dy[yi], rdw[wi] += 1;
                            }
                    }
}

/* ---- the cases: an op pass on inputs stored as `in_dt`, outputs written as `out_dt` ---- */

enum { MAX_IO = 3 };
typedef struct opcase opcase;
struct opcase {
    char name[96];
    int nin, nout;
    int64_t in_n[MAX_IO], out_n[MAX_IO];
    /* the pass on inputs of in_dt and outputs of out_dt */
    mpx_status (*run)(const opcase *c, mpx_dtype in_dt, mpx_dtype out_dt, void *const *in,
                      void *const *out);
    /* S and R of every output, from the inputs' absolute values (zeroed arrays) */
    void (*terms)(const opcase *c, const double *const *in, double *const *s, double *const *r);
    int pass;
    int64_t m, in, out, trans;     /* linear: rows, IN, OUT; trans: linear_t (w [OUT, IN]) */
    int masked;                    /* linear forward on the rows a mask keeps (BERT's decoder) */
    int64_t dy_row;                /* linear backward: dy's row length (zero-row inputs) */
    int batch, bm, bn, bk, ta, tb; /* bmm */
    conv_geom g;
};

static mpx_tensor T2(mpx_dtype t, int64_t a, int64_t b, void *d) {
    return (mpx_tensor){t, MPX_DEV_CPU, 2, {a, b}, d};
}
static mpx_tensor T1(mpx_dtype t, int64_t a, void *d) {
    return (mpx_tensor){t, MPX_DEV_CPU, 1, {a}, d};
}

/* linear (trans 0, w [IN, OUT]) and linear_t (trans 1, w [OUT, IN]); x [M, IN], y [M, OUT]. */
static mpx_status run_linear(const opcase *c, mpx_dtype it, mpx_dtype ot, void *const *in,
                             void *const *out) {
    const int64_t m = c->m, ni = c->in, no = c->out;
    mpx_tensor w = c->trans ? T2(it, no, ni, in[1]) : T2(it, ni, no, in[1]);
    if (c->pass == PASS_F) { /* in: x, w, b; out: y */
        mpx_tensor x = T2(it, m, ni, in[0]), b = T1(it, no, in[2]), y = T2(ot, m, no, out[0]);
        if (c->masked) { /* rows i % 3 == 0 kept */
            int32_t *keep = malloc((size_t)m * sizeof *keep);
            for (int64_t i = 0; i < m; i++) keep[i] = i % 3 == 0 ? 1 : -1;
            mpx_tensor mask = {MPX_I32, MPX_DEV_CPU, 1, {m}, keep};
            mpx_status st = c->trans ? mpx_linear_t_forward_rows_cpu(ctx, &x, &w, &b, &mask, &y)
                                     : mpx_linear_forward_rows_cpu(ctx, &x, &w, &b, &mask, &y);
            free(keep);
            return st;
        }
        return c->trans ? mpx_linear_t_forward_cpu(ctx, &x, &w, &b, &y)
                        : mpx_linear_forward_cpu(ctx, &x, &w, &b, &y);
    }
    if (c->pass == PASS_BD) { /* in: dy, w; out: dx */
        mpx_tensor dy = T2(it, m, no, in[0]), dx = T2(ot, m, ni, out[0]);
        return c->trans ? mpx_linear_t_backward_data_cpu(ctx, &dy, &w, &dx)
                        : mpx_linear_backward_data_cpu(ctx, &dy, &w, &dx);
    }
    /* in: dy, x; out: dw (shaped like w), db */
    mpx_tensor dy = T2(it, m, no, in[0]), x = T2(it, m, ni, in[1]), db = T1(ot, no, out[1]);
    mpx_tensor dw = c->trans ? T2(ot, no, ni, out[0]) : T2(ot, ni, no, out[0]);
    return c->trans ? mpx_linear_t_backward_weights_cpu(ctx, &dy, &x, &dw, &db)
                    : mpx_linear_backward_weights_cpu(ctx, &dy, &x, &dw, &db);
}

static void terms_linear(const opcase *c, const double *const *in, double *const *s,
                         double *const *r) {
    const int m = (int)c->m, ni = (int)c->in, no = (int)c->out, tb = (int)c->trans;
    if (c->pass == PASS_F) {
        mm_terms(1, m, no, ni, 0, tb, in[0], in[1], NULL, s[0], r[0], NULL, NULL, NULL, NULL);
        for (int i = 0; i < m; i++) /* the bias: one more term */
            for (int j = 0; j < no; j++) s[0][i * no + j] += in[2][j], r[0][i * no + j] += 1;
        for (int i = 0; c->masked && i < m; i++) /* rows left out: +0 on both paths */
            if (i % 3 != 0)
                for (int j = 0; j < no; j++) s[0][i * no + j] = 0, r[0][i * no + j] = 0;
    } else if (c->pass == PASS_BD) { /* dx = dA of C = x @ op(w), dC = dy */
        mm_terms(1, m, no, ni, 0, tb, NULL, in[1], in[0], NULL, NULL, s[0], r[0], NULL, NULL);
    } else { /* dw = dB; db = column sums of dy */
        mm_terms(1, m, no, ni, 0, tb, in[1], NULL, in[0], NULL, NULL, NULL, NULL, s[0], r[0]);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < no; j++) s[1][j] += in[0][i * no + j], r[1][j] += 1;
    }
}

/* bmm: c [B, M, N] = a @ b (transposes per case); backward: da and db from dc. */
static mpx_status run_bmm(const opcase *c, mpx_dtype it, mpx_dtype ot, void *const *in,
                          void *const *out) {
    const mpx_bmm_attr at = {c->ta, c->tb, 1.0f};
    const int64_t B = c->batch, M = c->bm, N = c->bn, K = c->bk;
    const int64_t as[2] = {c->ta ? K : M, c->ta ? M : K}, bs[2] = {c->tb ? N : K, c->tb ? K : N};
    if (c->pass == PASS_F) { /* in: a, b; out: c */
        mpx_tensor a = {it, MPX_DEV_CPU, 3, {B, as[0], as[1]}, in[0]};
        mpx_tensor b = {it, MPX_DEV_CPU, 3, {B, bs[0], bs[1]}, in[1]};
        mpx_tensor y = {ot, MPX_DEV_CPU, 3, {B, M, N}, out[0]};
        return mpx_bmm_forward_cpu(ctx, &at, &a, &b, &y);
    }
    /* in: dc, a, b; out: da, db */
    mpx_tensor dc = {it, MPX_DEV_CPU, 3, {B, M, N}, in[0]};
    mpx_tensor a = {it, MPX_DEV_CPU, 3, {B, as[0], as[1]}, in[1]};
    mpx_tensor b = {it, MPX_DEV_CPU, 3, {B, bs[0], bs[1]}, in[2]};
    mpx_tensor da = {ot, MPX_DEV_CPU, 3, {B, as[0], as[1]}, out[0]};
    mpx_tensor db = {ot, MPX_DEV_CPU, 3, {B, bs[0], bs[1]}, out[1]};
    return mpx_bmm_backward_cpu(ctx, &at, &dc, &a, &b, &da, &db);
}

static void terms_bmm(const opcase *c, const double *const *in, double *const *s,
                      double *const *r) {
    if (c->pass == PASS_F)
        mm_terms(c->batch, c->bm, c->bn, c->bk, c->ta, c->tb, in[0], in[1], NULL, s[0], r[0], NULL,
                 NULL, NULL, NULL);
    else
        mm_terms(c->batch, c->bm, c->bn, c->bk, c->ta, c->tb, in[1], in[2], in[0], NULL, NULL, s[0],
                 r[0], s[1], r[1]);
}

/* conv2d: x [N,H,W,C], w [KH,KW,C,K], b [K], y [N,OH,OW,K]. */
static mpx_status run_conv(const opcase *c, mpx_dtype it, mpx_dtype ot, void *const *in,
                           void *const *out) {
    const conv_geom *g = &c->g;
    const int64_t oh = conv_oh(g), ow = conv_ow(g);
    if (c->pass == PASS_F) { /* in: x, w, b; out: y */
        mpx_tensor x = {it, MPX_DEV_CPU, 4, {g->n, g->h, g->w, g->c}, in[0]};
        mpx_tensor w = {it, MPX_DEV_CPU, 4, {g->kh, g->kw, g->c, g->k}, in[1]};
        mpx_tensor b = T1(it, g->k, in[2]);
        mpx_tensor y = {ot, MPX_DEV_CPU, 4, {g->n, oh, ow, g->k}, out[0]};
        return mpx_conv2d_forward_cpu(ctx, &g->at, &x, &w, &b, &y);
    }
    mpx_tensor dy = {it, MPX_DEV_CPU, 4, {g->n, oh, ow, g->k}, in[0]};
    if (c->pass == PASS_BD) { /* in: dy, w; out: dx */
        mpx_tensor w = {it, MPX_DEV_CPU, 4, {g->kh, g->kw, g->c, g->k}, in[1]};
        mpx_tensor dx = {ot, MPX_DEV_CPU, 4, {g->n, g->h, g->w, g->c}, out[0]};
        return mpx_conv2d_backward_data_cpu(ctx, &g->at, &dy, &w, &dx);
    }
    /* in: dy, x; out: dw, db */
    mpx_tensor x = {it, MPX_DEV_CPU, 4, {g->n, g->h, g->w, g->c}, in[1]};
    mpx_tensor dw = {ot, MPX_DEV_CPU, 4, {g->kh, g->kw, g->c, g->k}, out[0]};
    mpx_tensor db = T1(ot, g->k, out[1]);
    return mpx_conv2d_backward_weights_cpu(ctx, &g->at, &dy, &x, &dw, &db);
}

static void terms_conv(const opcase *c, const double *const *in, double *const *s,
                       double *const *r) {
    const conv_geom *g = &c->g;
    const int64_t rows = (int64_t)g->n * conv_oh(g) * conv_ow(g);
    if (c->pass == PASS_F) {
        conv_terms(g, in[0], in[1], NULL, s[0], r[0], NULL, NULL, NULL, NULL);
        for (int64_t i = 0; i < rows; i++)
            for (int k = 0; k < g->k; k++) s[0][i * g->k + k] += in[2][k], r[0][i * g->k + k] += 1;
    } else if (c->pass == PASS_BD) {
        conv_terms(g, NULL, in[1], in[0], NULL, NULL, s[0], r[0], NULL, NULL);
    } else {
        conv_terms(g, in[1], NULL, in[0], NULL, NULL, NULL, NULL, s[0], r[0]);
        for (int64_t i = 0; i < rows; i++)
            for (int k = 0; k < g->k; k++) s[1][k] += in[0][i * g->k + k], r[1][k] += 1;
    }
}

/* ---- inputs and the comparison ---- */

/* BF16 inputs of the kind asked for, and their values in FP32 (exact). Zero-row inputs: rows
 * (of `row` elements) of the first operand all zero but every fourth, so that the backward
 * passes run on the others alone (linear.c). */
static void make_input(int kind, int which, size_t n, int64_t row, uint64_t seed, uint16_t *b,
                       float *f) {
    mpx_test_normal(f, n, 0, 1, seed);
    for (size_t i = 0; i < n; i++) {
        if (kind == IN_ZERO_ROWS && which == 0 && (i / (size_t)row) % 4 != 1) f[i] = 0.0f;
        if (kind == IN_INT) f[i] = (float)((int)floorf(f[i] * 2.0f) % 4); /* -3 .. 3 */
        /* every 5th value of the first operand a subnormal (2^-127 .. 2^-133) */
        if (kind == IN_SUBNORMAL && which == 0 && i % 5 == 0)
            f[i] = ldexpf(f[i] < 0 ? -1.0f : 1.0f, -127 - (int)(i % 7));
    }
    mpx_encode(MPX_BF16, f, b, n);
    mpx_decode(MPX_BF16, b, f, n);
}

static int is_subnormal_bf16(float v) { return v != 0.0f && fabsf(v) < 0x1p-126f; }

typedef struct {
    uint16_t *b16[MAX_IO];
    float *f32[MAX_IO];
} inputs;

static mpx_status run_f32(const opcase *c, mpx_dtype it, const inputs *x, float *const *out) {
    void *in[MAX_IO] = {0}, *o[MAX_IO] = {0};
    for (int i = 0; i < c->nin; i++) in[i] = it == MPX_F32 ? (void *)x->f32[i] : (void *)x->b16[i];
    for (int i = 0; i < c->nout; i++) o[i] = out[i];
    return c->run(c, it, MPX_F32, in, o);
}

/* The largest fraction of the bound used over the outputs, and the outputs differing at all. */
static void check_case(const opcase *c, int kind, int native) {
    inputs x = {{0}, {0}};
    float *emu[MAX_IO] = {0}, *nat[MAX_IO] = {0}, *off[MAX_IO] = {0};
    uint16_t *o16[MAX_IO] = {0};
    double *s[MAX_IO] = {0}, *r[MAX_IO] = {0}, *sn[MAX_IO] = {0}, *rn[MAX_IO] = {0};
    double *ab[MAX_IO] = {0}, *abn[MAX_IO] = {0};
    char what[192];
    snprintf(what, sizeof what, "%.96s, %s inputs", c->name, input_name[kind]);
    for (int i = 0; i < c->nin; i++) {
        x.b16[i] = malloc((size_t)c->in_n[i] * 2);
        x.f32[i] = malloc((size_t)c->in_n[i] * 4);
        ab[i] = malloc((size_t)c->in_n[i] * sizeof(double));
        abn[i] = malloc((size_t)c->in_n[i] * sizeof(double));
        make_input(kind, i, (size_t)c->in_n[i], c->dy_row,
                   100 + (uint64_t)i * 7 + (uint64_t)c->pass, x.b16[i], x.f32[i]);
        for (int64_t j = 0; j < c->in_n[i]; j++) {
            ab[i][j] = fabs((double)x.f32[i][j]);
            abn[i][j] = is_subnormal_bf16(x.f32[i][j]) ? 0 : ab[i][j];
        }
    }
    for (int i = 0; i < c->nout; i++) {
        const size_t n = (size_t)c->out_n[i];
        emu[i] = malloc(n * 4), nat[i] = malloc(n * 4), off[i] = malloc(n * 4);
        o16[i] = malloc(n * 2);
        s[i] = calloc(n, sizeof(double)), r[i] = calloc(n, sizeof(double));
        sn[i] = calloc(n, sizeof(double)), rn[i] = calloc(n, sizeof(double));
    }
    c->terms(c, (const double *const *)ab, s, r);
    c->terms(c, (const double *const *)abn, sn, rn);

    /* the emulation: the FP32 op on the decoded values; and the op on BF16 tensors with the
     * native kernels off, which must be the same thing */
    CHECK_OK(run_f32(c, MPX_F32, &x, emu));
    mpx_gemm_lowp_force(ctx, 0);
    CHECK_OK(run_f32(c, MPX_BF16, &x, off));
    mpx_gemm_lowp_force(ctx, 1);
    for (int i = 0; i < c->nout; i++)
        CHECK(memcmp(emu[i], off[i], (size_t)c->out_n[i] * 4) == 0,
              "%s: output %d with native kernels off is not the FP32 op on the decoded values",
              what, i);

    if (native) {
        CHECK_OK(run_f32(c, MPX_BF16, &x, nat));
        double used = 0;
        long differ = 0, flushed = 0, bad = 0;
        for (int i = 0; i < c->nout; i++)
            for (int64_t j = 0; j < c->out_n[i]; j++) {
                const double R = r[i][j], g = R * U / (1 - R * U);
                const double sub = s[i][j] - sn[i][j]; /* |terms| with a subnormal operand */
                const double bound = 2 * g * s[i][j] + R * 0x1p-126 + sub;
                const double d = fabs((double)nat[i][j] - (double)emu[i][j]);
                differ += nat[i][j] != emu[i][j];
                flushed += sub > 0 && d > 0;
                if (!(d <= bound)) {
                    if (bad++ < 3)
                        CHECK(0,
                              "%s: output %d[%lld]: native %.9g, emulated %.9g, |diff| %.3g > "
                              "bound %.3g (R %.0f, S %.3g)",
                              what, i, (long long)j, (double)nat[i][j], (double)emu[i][j], d, bound,
                              R, s[i][j]);
                    else
                        mpx_test_failures++;
                } else if (bound > 0) {
                    used = fmax(used, d / bound);
                }
                if (kind == IN_INT && d != 0 && bad++ < 3)
                    CHECK(0, "%s: output %d[%lld] native %.9g != emulated %.9g on exact sums", what,
                          i, (long long)j, (double)nat[i][j], (double)emu[i][j]);
            }
        printf("  %-58s %6ld outputs differ, largest %.3f of the bound%s\n", what, differ, used,
               kind == IN_SUBNORMAL ? (flushed ? "; subnormal inputs flushed" : "; subnormals kept")
                                    : "");
        /* a 16-bit output: the FP32 result rounded once to nearest even */
        void *in[MAX_IO] = {0}, *o[MAX_IO] = {0};
        for (int i = 0; i < c->nin; i++) in[i] = x.b16[i];
        for (int i = 0; i < c->nout; i++) o[i] = o16[i];
        CHECK_OK(c->run(c, MPX_BF16, MPX_BF16, in, o));
        for (int i = 0; i < c->nout; i++) {
            uint16_t *want = malloc((size_t)c->out_n[i] * 2);
            mpx_encode(MPX_BF16, nat[i], want, (size_t)c->out_n[i]);
            CHECK(memcmp(want, o16[i], (size_t)c->out_n[i] * 2) == 0,
                  "%s: BF16 output %d is not the native FP32 result rounded to nearest even", what,
                  i);
            free(want);
        }
    }
    for (int i = 0; i < MAX_IO; i++) {
        free(x.b16[i]), free(x.f32[i]), free(ab[i]), free(abn[i]);
        free(emu[i]), free(nat[i]), free(off[i]), free(o16[i]);
        free(s[i]), free(r[i]), free(sn[i]), free(rn[i]);
    }
}

/* ---- the cases ---- */

static opcase linear_case(int64_t m, int64_t in, int64_t out, int trans, int pass) {
    opcase c = {.run = run_linear,
                .terms = terms_linear,
                .pass = pass,
                .m = m,
                .in = in,
                .out = out,
                .trans = trans};
    snprintf(c.name, sizeof c.name, "%s [%lld,%lld]x[%lld,%lld] %s", trans ? "linear_t" : "linear",
             (long long)m, (long long)in, (long long)in, (long long)out, pass_name[pass]);
    const int64_t w = in * out;
    if (pass == PASS_F) {
        c.nin = 3, c.in_n[0] = m * in, c.in_n[1] = w, c.in_n[2] = out;
        c.nout = 1, c.out_n[0] = m * out;
    } else if (pass == PASS_BD) {
        c.nin = 2, c.in_n[0] = m * out, c.in_n[1] = w;
        c.nout = 1, c.out_n[0] = m * in;
    } else {
        c.nin = 2, c.in_n[0] = m * out, c.in_n[1] = m * in;
        c.nout = 2, c.out_n[0] = w, c.out_n[1] = out;
    }
    if (pass != PASS_F) c.dy_row = out;
    return c;
}

/* The forward on the rows a mask keeps (a third of them). */
static opcase linear_rows_case(int64_t m, int64_t in, int64_t out, int trans) {
    opcase c = linear_case(m, in, out, trans, PASS_F);
    c.masked = 1;
    snprintf(c.name, sizeof c.name, "%s [%lld,%lld]x[%lld,%lld] forward, a third of the rows",
             trans ? "linear_t" : "linear", (long long)m, (long long)in, (long long)in,
             (long long)out);
    return c;
}

static opcase bmm_case(int batch, int m, int n, int k, int ta, int tb, int pass) {
    opcase c = {.run = run_bmm,
                .terms = terms_bmm,
                .pass = pass,
                .batch = batch,
                .bm = m,
                .bn = n,
                .bk = k,
                .ta = ta,
                .tb = tb};
    snprintf(c.name, sizeof c.name, "bmm %dx[%d,%d,%d] trans %d%d %s", batch, m, n, k, ta, tb,
             pass == PASS_F ? "forward" : "backward");
    const int64_t na = (int64_t)batch * m * k, nb = (int64_t)batch * k * n,
                  nc = (int64_t)batch * m * n;
    if (pass == PASS_F) {
        c.nin = 2, c.in_n[0] = na, c.in_n[1] = nb;
        c.nout = 1, c.out_n[0] = nc;
    } else {
        c.nin = 3, c.in_n[0] = nc, c.in_n[1] = na, c.in_n[2] = nb;
        c.nout = 2, c.out_n[0] = na, c.out_n[1] = nb;
    }
    return c;
}

static opcase conv_case(conv_geom g, int pass) {
    opcase c = {.run = run_conv, .terms = terms_conv, .pass = pass, .g = g};
    snprintf(c.name, sizeof c.name, "conv2d %dx%d/%d %dx%dx%dx%d->%d %s", g.kh, g.kw, g.at.stride_h,
             g.n, g.h, g.w, g.c, g.k, pass_name[pass]);
    const int64_t nx = (int64_t)g.n * g.h * g.w * g.c, nw = (int64_t)g.kh * g.kw * g.c * g.k;
    const int64_t ny = (int64_t)g.n * conv_oh(&g) * conv_ow(&g) * g.k;
    if (pass == PASS_F) {
        c.nin = 3, c.in_n[0] = nx, c.in_n[1] = nw, c.in_n[2] = g.k;
        c.nout = 1, c.out_n[0] = ny;
    } else if (pass == PASS_BD) {
        c.nin = 2, c.in_n[0] = ny, c.in_n[1] = nw;
        c.nout = 1, c.out_n[0] = nx;
    } else {
        c.nin = 2, c.in_n[0] = ny, c.in_n[1] = nx;
        c.nout = 2, c.out_n[0] = nw, c.out_n[1] = g.k;
    }
    return c;
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    char path[192];
    const int native = mpx_gemm_lowp_native(ctx, MPX_BF16);
    printf("BF16 GEMMs here: %s\n", mpx_gemm_lowp_path(ctx, MPX_BF16, path, sizeof path));
    opcase cases[64];
    int n = 0;
    for (int pass = PASS_F; pass <= PASS_BW; pass++) {
        cases[n++] = linear_case(37, 150, 70, 0, pass);
        cases[n++] = linear_case(64, 128, 96, 1, pass);
    }
    cases[n++] = linear_rows_case(37, 150, 70, 0);
    cases[n++] = linear_rows_case(64, 128, 96, 1);     /* BERT's tied decoder */
    for (int pass = PASS_F; pass <= PASS_BD; pass++) { /* bmm's backward is one call */
        cases[n++] = bmm_case(3, 17, 12, 40, 0, 0, pass);
        cases[n++] = bmm_case(3, 16, 16, 24, 0, 1, pass); /* attention scores: q @ k^T */
        cases[n++] = bmm_case(1, 33, 20, 18, 1, 0, pass); /* a single batch: one GEMM */
    }
    static const conv_geom geoms[] = {
        {2, 9, 9, 16, 24, 3, 3, {1, 1, 1, 1}},  /* 3x3, stride 1, padded */
        {2, 8, 8, 32, 48, 1, 1, {1, 1, 0, 0}},  /* 1x1 stride 1: one GEMM */
        {2, 10, 10, 8, 16, 3, 3, {2, 2, 1, 1}}, /* 3x3 stride 2 */
        {2, 16, 16, 3, 8, 7, 7, {2, 2, 3, 3}},  /* the ImageNet stem: 3 channels */
    };
    for (size_t i = 0; i < sizeof geoms / sizeof *geoms; i++)
        for (int pass = PASS_F; pass <= PASS_BW; pass++) cases[n++] = conv_case(geoms[i], pass);
    for (int i = 0; i < n; i++)
        for (int kind = IN_GAUSS; kind <= IN_ZERO_ROWS; kind++)
            if (kind != IN_ZERO_ROWS || cases[i].dy_row > 0) check_case(&cases[i], kind, native);
    mpx_gemm_lowp_cache_clear(ctx);
    mpx_conv2d_cache_clear(ctx);
    if (!native && mpx_test_failures == 0) {
        printf("test_op_native16: native checks skipped: %s (the emulation checks passed)\n", path);
        return MPX_TEST_SKIP;
    }
    return mpx_test_done(__FILE__);
}
