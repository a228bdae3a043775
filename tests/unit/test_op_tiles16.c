/* test_op_tiles16.c — batch-norm, ReLU and add on tensors stored as F16 or BF16 (lib/ops/tile.h)
 * against the executor's emulation: decode every 16-bit input to FP32 (mpx_decode), run the op on
 * FP32 tensors, round every 16-bit output to nearest even with the cast (mpx_cast), and require
 * the same bits — every dtype of every tensor independently (F32, F16, BF16), shapes that cut
 * tiles inside a row (C > TILE) and pack several rows into one (small C), the fused ReLU of both
 * ops, batch-norm's backward with relu_dy and in place, and inputs with NaN, Inf, -0, subnormals
 * of both formats and values next to the formats' rounding boundaries.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "mpx/rng.h"
#include "testutil.h"

static const mpx_dtype DT[3] = {MPX_F32, MPX_F16, MPX_BF16};

/* n FP32 values: mostly N(0, 1) (times `spread`), some specials. */
static void fill(float *x, int64_t n, uint64_t seed, float spread) {
    mpx_rng r = mpx_rng_make(seed, MPX_RNG_TEST, 0);
    static const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 0x1p-20f, -0x1p-24f,
                                    0x1p-130f, 65519.0f, 65520.0f, 1.0f + 0x1p-11f, 0x1p-25f};
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = mpx_rng_u32(&r);
        x[i] = (u % 97 == 0) ? special[(u >> 8) % (sizeof special / sizeof *special)]
                             : spread * mpx_rand_normal(seed, MPX_RNG_TEST, 1000000 + (uint64_t)i);
    }
}

/* A tensor of dtype dt holding the values of f (rounded into dt), and its FP32 decoding. */
typedef struct {
    mpx_tensor t;   /* as stored */
    mpx_tensor f32; /* the emulation's view: the decoded values */
} pair;

static pair make(mpx_dtype dt, int ndim, const int64_t *shape, const float *f) {
    pair p;
    int64_t n = mpx_shape_numel(ndim, shape);
    memset(&p, 0, sizeof p);
    p.t.dtype = dt;
    p.t.device = MPX_DEV_CPU;
    p.t.ndim = ndim;
    memcpy(p.t.shape, shape, (size_t)ndim * sizeof *shape);
    p.t.data = calloc((size_t)n, mpx_dtype_size(dt) ? mpx_dtype_size(dt) : 4);
    p.f32 = p.t;
    p.f32.dtype = MPX_F32;
    p.f32.data = calloc((size_t)n, sizeof(float));
    if (f) {
        mpx_cast_spec s = mpx_cast_plain(dt);
        mpx_cast(&s, f, p.t.data, (size_t)n);
        mpx_decode(dt, p.t.data, p.f32.data, (size_t)n);
    }
    return p;
}

static void drop(pair *p) {
    free(p->t.data);
    free(p->f32.data);
}

/* The emulation's output: the FP32 result rounded into the stored dtype. */
static void emulate_store(const pair *out) {
    mpx_cast_spec s = mpx_cast_plain(out->t.dtype);
    mpx_cast(&s, out->f32.data, out->t.data, (size_t)mpx_tensor_numel(&out->t));
}

/* Bits of the op's output `got` (stored as dt) against the emulation's `want` (also dt). */
static void same_bits(const mpx_tensor *got, const mpx_tensor *want, const char *what) {
    const size_t bytes = (size_t)mpx_tensor_numel(got) * mpx_dtype_size(got->dtype);
    const int same = memcmp(got->data, want->data, bytes) == 0;
    size_t first = 0;
    if (!same)
        while (((const unsigned char *)got->data)[first] == ((const unsigned char *)want->data)[first])
            first++;
    CHECK(same, "%s (%s): differs from the emulation from byte %zu", what,
          mpx_dtype_name(got->dtype), first);
}

static void check_pointwise(int64_t n, uint64_t seed) {
    const int64_t shape[1] = {n};
    float *fa = malloc((size_t)n * sizeof *fa), *fb = malloc((size_t)n * sizeof *fb);
    fill(fa, n, seed, 1.0f);
    fill(fb, n, seed + 1, 1.0f);
    char tag[96];
    for (int da = 0; da < 3; da++)
        for (int db = 0; db < 3; db++)
            for (int dy = 0; dy < 3; dy++) {
                pair a = make(DT[da], 1, shape, fa), b = make(DT[db], 1, shape, fb);
                pair y = make(DT[dy], 1, shape, NULL), e = make(DT[dy], 1, shape, NULL);
                for (int relu = 0; relu < 2; relu++) {
                    snprintf(tag, sizeof tag, "add%s n=%lld a %s b %s", relu ? "+relu" : "",
                             (long long)n, mpx_dtype_name(DT[da]), mpx_dtype_name(DT[db]));
                    CHECK_OK(relu ? mpx_add_relu_forward_cpu(&a.t, &b.t, &y.t)
                                  : mpx_add_forward_cpu(&a.t, &b.t, &y.t));
                    CHECK_OK(relu ? mpx_add_relu_forward_cpu(&a.f32, &b.f32, &e.f32)
                                  : mpx_add_forward_cpu(&a.f32, &b.f32, &e.f32));
                    emulate_store(&e);
                    same_bits(&y.t, &e.t, tag);
                }
                /* ReLU: x = a, and backward with dy = b, y = relu(a) as stored in dt(y) */
                snprintf(tag, sizeof tag, "relu n=%lld x %s", (long long)n, mpx_dtype_name(DT[da]));
                CHECK_OK(mpx_relu_forward_cpu(&a.t, &y.t));
                CHECK_OK(mpx_relu_forward_cpu(&a.f32, &e.f32));
                emulate_store(&e);
                same_bits(&y.t, &e.t, tag);
                pair yv = make(DT[dy], 1, shape, NULL);
                mpx_decode(DT[dy], y.t.data, yv.f32.data, (size_t)n);
                memcpy(yv.t.data, y.t.data, (size_t)n * mpx_dtype_size(DT[dy]));
                for (int dx = 0; dx < 3; dx++) {
                    pair g = make(DT[dx], 1, shape, NULL), ge = make(DT[dx], 1, shape, NULL);
                    snprintf(tag, sizeof tag, "relu backward n=%lld dy %s y %s", (long long)n,
                             mpx_dtype_name(DT[db]), mpx_dtype_name(DT[dy]));
                    CHECK_OK(mpx_relu_backward_cpu(&b.t, &yv.t, &g.t));
                    CHECK_OK(mpx_relu_backward_cpu(&b.f32, &yv.f32, &ge.f32));
                    emulate_store(&ge);
                    same_bits(&g.t, &ge.t, tag);
                    drop(&g), drop(&ge);
                }
                drop(&a), drop(&b), drop(&y), drop(&e), drop(&yv);
            }
    free(fa), free(fb);
}

/* Per-channel FP32 vector of c values. */
static mpx_tensor vec(int64_t c, float *data) {
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 1, {c}, data};
    return t;
}

static void check_batchnorm(int64_t m, int64_t c, uint64_t seed) {
    const int64_t shape[2] = {m, c};
    const int64_t n = m * c;
    float *fx = malloc((size_t)n * sizeof *fx), *fdy = malloc((size_t)n * sizeof *fdy);
    fill(fx, n, seed, 2.0f);
    for (int64_t i = 0; i < n; i++) /* the statistics stay finite: no specials in x */
        if (!isfinite(fx[i])) fx[i] = 1.5f;
    fill(fdy, n, seed + 3, 0.01f);
    float *buf = calloc((size_t)c * 16, sizeof *buf);
    float *gm = buf, *bt = buf + c, *rm = buf + 2 * c, *rv = buf + 3 * c, *sm = buf + 4 * c,
          *si = buf + 5 * c, *rm2 = buf + 6 * c, *rv2 = buf + 7 * c, *sm2 = buf + 8 * c,
          *si2 = buf + 9 * c, *dg = buf + 10 * c, *db = buf + 11 * c, *dg2 = buf + 12 * c,
          *db2 = buf + 13 * c;
    for (int64_t j = 0; j < c; j++) gm[j] = 0.5f + 0.01f * (float)j, bt[j] = 0.1f * (float)(j % 7);
    mpx_tensor g = vec(c, gm), b = vec(c, bt);
    char tag[128];
    for (int dx = 0; dx < 3; dx++)
        for (int dy = 0; dy < 3; dy++)
            for (int relu = 0; relu < 2; relu++) {
                mpx_batchnorm_attr at = {1e-5f, 0.1f, 1, relu, 0, MPX_F32, NULL, NULL, 0};
                pair x = make(DT[dx], 2, shape, fx);
                pair y = make(DT[dy], 2, shape, NULL), e = make(DT[dy], 2, shape, NULL);
                for (int64_t j = 0; j < c; j++) rm[j] = rm2[j] = 0, rv[j] = rv2[j] = 1;
                mpx_tensor trm = vec(c, rm), trv = vec(c, rv), tsm = vec(c, sm), tsi = vec(c, si);
                mpx_tensor trm2 = vec(c, rm2), trv2 = vec(c, rv2), tsm2 = vec(c, sm2),
                           tsi2 = vec(c, si2);
                snprintf(tag, sizeof tag, "batchnorm%s [%lld,%lld] x %s", relu ? "+relu" : "",
                         (long long)m, (long long)c, mpx_dtype_name(DT[dx]));
                CHECK_OK(mpx_batchnorm_forward_cpu(&at, &x.t, &g, &b, &trm, &trv, &tsm, &tsi, &y.t));
                CHECK_OK(mpx_batchnorm_forward_cpu(&at, &x.f32, &g, &b, &trm2, &trv2, &tsm2, &tsi2,
                                                   &e.f32));
                emulate_store(&e);
                same_bits(&y.t, &e.t, tag);
                CHECK(memcmp(sm, sm2, (size_t)c * 4) == 0 && memcmp(si, si2, (size_t)c * 4) == 0 &&
                          memcmp(rm, rm2, (size_t)c * 4) == 0 && memcmp(rv, rv2, (size_t)c * 4) == 0,
                      "%s: saved or running statistics differ", tag);
                /* backward: dy stored as DT[dy], dx as each dtype, plain and relu_dy */
                for (int dd = 0; dd < 3; dd++) {
                    at.relu_dy = relu;
                    at.relu_store = DT[dy];
                    pair d = make(DT[dy], 2, shape, fdy);
                    pair gx = make(DT[dd], 2, shape, NULL), ge = make(DT[dd], 2, shape, NULL);
                    mpx_tensor tdg = vec(c, dg), tdb = vec(c, db), tdg2 = vec(c, dg2),
                               tdb2 = vec(c, db2);
                    snprintf(tag, sizeof tag, "batchnorm backward%s [%lld,%lld] x %s dy %s",
                             relu ? " relu_dy" : "", (long long)m, (long long)c,
                             mpx_dtype_name(DT[dx]), mpx_dtype_name(DT[dy]));
                    CHECK_OK(mpx_batchnorm_backward_cpu(&at, &d.t, &x.t, &g, &b, &tsm, &tsi, &gx.t,
                                                        &tdg, &tdb));
                    CHECK_OK(mpx_batchnorm_backward_cpu(&at, &d.f32, &x.f32, &g, &b, &tsm, &tsi,
                                                        &ge.f32, &tdg2, &tdb2));
                    emulate_store(&ge);
                    same_bits(&gx.t, &ge.t, tag);
                    CHECK(memcmp(dg, dg2, (size_t)c * 4) == 0 && memcmp(db, db2, (size_t)c * 4) == 0,
                          "%s: dgamma or dbeta differ", tag);
                    if (DT[dd] == DT[dy]) {
                        /* in place: dx written over dy's storage */
                        CHECK_OK(mpx_batchnorm_backward_cpu(&at, &d.t, &x.t, &g, &b, &tsm, &tsi,
                                                            &d.t, &tdg, &tdb));
                        snprintf(tag + strlen(tag), sizeof tag - strlen(tag), " in place");
                        same_bits(&d.t, &ge.t, tag);
                    }
                    drop(&d), drop(&gx), drop(&ge);
                }
                drop(&x), drop(&y), drop(&e);
            }
    free(buf), free(fx), free(fdy);
}

int main(void) {
    /* one tile, a partial tile, several tiles with a remainder */
    const int64_t sizes[] = {5, 2048, 2049, 70001};
    for (int i = 0; i < 4; i++) check_pointwise(sizes[i], 10 + (uint64_t)i);
    /* small C (many rows per tile), C dividing TILE, C not dividing it, C > TILE (a row cut) */
    check_batchnorm(300, 3, 1);
    check_batchnorm(257, 16, 2);
    check_batchnorm(70, 100, 3);
    check_batchnorm(5, 4100, 4);
    check_batchnorm(4096, 64, 5);
    return mpx_test_done("test_op_tiles16.c");
}
