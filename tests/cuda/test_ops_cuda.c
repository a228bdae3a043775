/* test_ops_cuda.c — the CUDA backend's own-kernel operators against the CPU backend: ReLU, add,
 * GELU, dropout, permute, max-pool, global average pool, embedding, softmax (scale, mask),
 * layer-norm, L2-norm and softmax cross-entropy, forward and backward, on random inputs of several shapes
 * (odd sizes, single elements, rows longer than a CUDA block), in F32, F16 and BF16 storage.
 *
 * Tolerances (ops_cuda_util.h has the comparison rule; F16/BF16 outputs add one ulp of the
 * output format, 2^-10 / 2^-7 relative, for the two independent roundings):
 *  - exact (the same bits): ReLU, add, dropout (the same Philox mask and one IEEE multiply),
 *    permute, max-pool (selection; the backward adds in the CPU's window order), global average
 *    pool (double sums in the CPU's order), embedding forward and backward (duplicates summed in
 *    position order on both sides), layer-norm's dgamma/dbeta and L2-norm's dgamma (the CPU's
 *    chunked double sums),
 *    softmax cross-entropy backward — the GPU performs the CPU's FP32 operations in the CPU's
 *    order, so any difference is a bug;
 *  - GELU: 2^-19 relative (16 ulp at worst) to |y| forward and to |dy| (Phi + |x| phi) backward:
 *    CUDA's erfcf is within 4 ulp and expf within 2 (glibc's within 1-2), plus three roundings
 *    on each side; the backward's bound is on the terms before the cancellation near x = -0.75;
 *  - softmax forward and the saved probs: 2^-19 relative: expf (2 + 1 ulp) in the numerator and,
 *    weighted, in the normaliser, plus the rounding of the product;
 *  - softmax backward: 2^-21 of |scale y| (|dy| + |sum dy y|): the double sum sum(dy y) is added in
 *    another order, which can move its FP32 rounding s by one ulp (2^-23 |s|), and then the
 *    rounding of dy - s and of the product may each land one ulp apart;
 *  - layer-norm: forward 2^-20 of (|x - mean| + |mean|) invstd |gamma| + |beta| (the FP32 mean and
 *    invstd come from double sums in another order and may differ by one ulp), the saved mean and
 *    invstd 2^-22 relative (+ 1e-12 absolute for a mean that cancels to ~0); backward dx 2^-20 of
 *    invstd (|dy gamma| + |mean(g)| + |xhat mean(g xhat)|), for the same reason;
 *  - L2-norm: forward 2^-20 of |x inv gamma|, the saved inverse norm 2^-22 relative (the double
 *    sum of squares in another order can move the FP32 inverse by one ulp); backward dx 2^-20 of
 *    inv (|dy gamma| + |xhat| sum |g xhat|), the row sum's rounding likewise;
 *  - softmax cross-entropy loss: 2^-20 absolute + 2^-22 relative: each row's log(sum) moves by
 *    the relative change of the sum (expf, 3 ulp), an absolute error, then the mean is rounded.
 * Skipped (77) without a CUDA device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/rng.h"
#include "ops_cuda_util.h"

/* 3000017: more than 4 elements per thread of the largest grid (launch.cuh: cuop_each runs its
 * 4-element iterations, then the tail) */
static const size_t SIZES[] = {1, 7, 1000, 65537, 3000017};

/* ---- ReLU, add ---- */
static void test_relu_add(void) {
    uint64_t seed = 1;
    for (int d = 0; d < n_storage; d++)
        for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
            const mpx_dtype dt = STORAGE[d];
            const size_t n = SIZES[s];
            const int64_t shape[1] = {(int64_t)n};
            char what[96];
            float *x = rand_in(dt, n, -2, 2, seed++), *dy = rand_in(dt, n, -1, 1, seed++);
            float *b = rand_in(dt, n, -2, 2, seed++), *ref = hbuf(n), *yr = hbuf(n);
            for (size_t i = 0; i < n; i += 7)
                x[i] = 0.0f;
            for (size_t i = 3; i < n; i += 11)
                x[i] = -0.0f;
            mpx_tensor hx = host_t(1, shape, x), hdy = host_t(1, shape, dy),
                       hb = host_t(1, shape, b);
            mpx_tensor href = host_t(1, shape, ref), hyr = host_t(1, shape, yr);
            mpx_tensor gx = dev_tensor(dt, 1, shape, x), gdy = dev_tensor(dt, 1, shape, dy);
            mpx_tensor gb = dev_tensor(dt, 1, shape, b), gy = dev_tensor(dt, 1, shape, NULL);

            CHECK_OK(mpx_relu_forward_cpu(&hx, &href));
            CHECK_OK(mpx_relu_forward_cuda(&gx, &gy));
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "relu forward n=%zu", n);
            check_exact(what, dt, got, ref, n);
            free(got);

            memcpy(yr, ref, n * sizeof *yr);
            round_through(dt, yr, n);
            mpx_tensor gyr = dev_tensor(dt, 1, shape, yr);
            CHECK_OK(mpx_relu_backward_cpu(&hdy, &hyr, &href));
            dev_poison(&gy);
            CHECK_OK(mpx_relu_backward_cuda(&gdy, &gyr, &gy));
            got = dev_read(&gy);
            snprintf(what, sizeof what, "relu backward n=%zu", n);
            check_exact(what, dt, got, ref, n);
            free(got);

            for (int f = 0; f < 2; f++) { /* add, and add with the ReLU fused */
                typedef mpx_status (*add_fn)(const mpx_tensor *, const mpx_tensor *, mpx_tensor *);
                const add_fn on_cpu = f ? mpx_add_relu_forward_cpu : mpx_add_forward_cpu;
                const add_fn on_gpu = f ? mpx_add_relu_forward_cuda : mpx_add_forward_cuda;
                CHECK_OK(on_cpu(&hx, &hb, &href));
                dev_poison(&gy);
                CHECK_OK(on_gpu(&gx, &gb, &gy));
                got = dev_read(&gy);
                snprintf(what, sizeof what, "%s forward n=%zu", f ? "add+relu" : "add", n);
                check_exact(what, dt, got, ref, n);
                free(got);
            }

            dev_free(&gx), dev_free(&gdy), dev_free(&gb), dev_free(&gy), dev_free(&gyr);
            free(x), free(dy), free(b), free(ref), free(yr);
        }
    /* mixed dtypes: F16 + BF16 -> F32, exact */
    const int64_t shape[1] = {1001};
    float *a = rand_in(MPX_F16, 1001, -3, 3, 77), *b = rand_in(MPX_BF16, 1001, -3, 3, 78);
    float *ref = hbuf(1001);
    mpx_tensor ha = host_t(1, shape, a), hb = host_t(1, shape, b), hr = host_t(1, shape, ref);
    mpx_tensor ga = dev_tensor(MPX_F16, 1, shape, a), gb = dev_tensor(MPX_BF16, 1, shape, b);
    mpx_tensor gy = dev_tensor(MPX_F32, 1, shape, NULL);
    CHECK_OK(mpx_add_forward_cpu(&ha, &hb, &hr));
    CHECK_OK(mpx_add_forward_cuda(&ga, &gb, &gy));
    float *got = dev_read(&gy);
    check_exact("add f16 + bf16 -> f32", MPX_F32, got, ref, 1001);
    free(got), free(a), free(b), free(ref);
    dev_free(&ga), dev_free(&gb), dev_free(&gy);
    check_device_clean("relu/add");
}

/* ---- GELU ---- */
static void test_gelu(void) {
    uint64_t seed = 100;
    const double rel = ldexp(1.0, -19), tiny = 1e-40;
    for (int d = 0; d < n_storage; d++)
        for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
            const mpx_dtype dt = STORAGE[d];
            const size_t n = SIZES[s];
            const int64_t shape[1] = {(int64_t)n};
            char what[96];
            float *x = rand_in(dt, n, -6, 6, seed++), *dy = rand_in(dt, n, -1, 1, seed++);
            float *ref = hbuf(n), *mag = hbuf(n);
            if (n > 4) x[0] = 0.0f, x[1] = mpx_round_to(dt, -0.7518f), x[2] = -12.0f, x[3] = 9.0f;
            for (size_t i = 0; i < n; i++) {
                const double v = x[i], cdf = 0.5 * erfc(-v / sqrt(2.0));
                const double pdf = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
                mag[i] = (float)(fabs((double)dy[i]) * (cdf + fabs(v) * pdf));
            }
            mpx_tensor hx = host_t(1, shape, x), hdy = host_t(1, shape, dy),
                       hr = host_t(1, shape, ref);
            mpx_tensor gx = dev_tensor(dt, 1, shape, x), gdy = dev_tensor(dt, 1, shape, dy);
            mpx_tensor gy = dev_tensor(dt, 1, shape, NULL);
            CHECK_OK(mpx_gelu_forward_cpu(&hx, &hr));
            CHECK_OK(mpx_gelu_forward_cuda(&gx, &gy));
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "gelu forward n=%zu", n);
            check_close(what, dt, got, ref, NULL, n, rel, tiny);
            free(got);
            CHECK_OK(mpx_gelu_backward_cpu(&hdy, &hx, &hr));
            dev_poison(&gy);
            CHECK_OK(mpx_gelu_backward_cuda(&gdy, &gx, &gy));
            got = dev_read(&gy);
            snprintf(what, sizeof what, "gelu backward n=%zu", n);
            check_close(what, dt, got, ref, mag, n, rel, tiny);
            free(got);
            dev_free(&gx), dev_free(&gdy), dev_free(&gy);
            free(x), free(dy), free(ref), free(mag);
        }
    check_device_clean("gelu");
}

/* ---- dropout: the CPU's mask, bit for bit ---- */
static void test_dropout(void) {
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.97f};
    const uint64_t offsets[] = {0, 3, 4097};
    const size_t sizes[] = {1, 5, 1000, 4099};
    uint64_t seed = 300;
    for (int d = 0; d < n_storage; d++)
        for (size_t s = 0; s < 4; s++)
            for (int pi = 0; pi < 4; pi++)
                for (int oi = 0; oi < 3; oi++) {
                    const mpx_dtype dt = STORAGE[d];
                    const size_t n = sizes[s];
                    const int64_t shape[1] = {(int64_t)n};
                    const mpx_dropout_attr a = {ps[pi], 0x5eed0000ull + seed, 77 + seed,
                                                offsets[oi]};
                    char what[128];
                    float *x = rand_in(dt, n, -2, 2, seed++), *ref = hbuf(n);
                    mpx_tensor hx = host_t(1, shape, x), hr = host_t(1, shape, ref);
                    mpx_tensor gx = dev_tensor(dt, 1, shape, x),
                               gy = dev_tensor(dt, 1, shape, NULL);
                    CHECK_OK(mpx_dropout_forward_cpu(&a, &hx, &hr));
                    CHECK_OK(mpx_dropout_forward_cuda(&a, &gx, &gy));
                    float *got = dev_read(&gy);
                    snprintf(what, sizeof what, "dropout forward n=%zu p=%g offset=%llu", n,
                             (double)a.p, (unsigned long long)a.offset);
                    check_exact(what, dt, got, ref, n);
                    free(got);
                    CHECK_OK(mpx_dropout_backward_cpu(&a, &hx, &hr));
                    dev_poison(&gy);
                    CHECK_OK(mpx_dropout_backward_cuda(&a, &gx, &gy));
                    got = dev_read(&gy);
                    snprintf(what, sizeof what, "dropout backward n=%zu p=%g offset=%llu", n,
                             (double)a.p, (unsigned long long)a.offset);
                    check_exact(what, dt, got, ref, n);
                    free(got);
                    dev_free(&gx), dev_free(&gy);
                    free(x), free(ref);
                }
    const int64_t shape[1] = {4};
    mpx_tensor gx = dev_tensor(MPX_F32, 1, shape, NULL), gy = dev_tensor(MPX_F32, 1, shape, NULL);
    const mpx_dropout_attr bad = {1.0f, 1, 2, 0};
    CHECK(mpx_dropout_forward_cuda(&bad, &gx, &gy) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "p = 1"),
          "dropout p = 1 refused: %s", mpx_error_message());
    dev_free(&gx), dev_free(&gy);
    check_device_clean("dropout");
}

/* ---- permute ---- */
typedef struct {
    int ndim;
    int64_t shape[4];
    int perm[4];
} perm_case;

static void test_permute(void) {
    static const perm_case cases[] = {
        {4, {2, 3, 4, 5}, {0, 2, 1, 3}},
        {4, {3, 1, 7, 2}, {3, 1, 0, 2}},
        {3, {4, 6, 5}, {2, 0, 1}},
        {2, {7, 9}, {1, 0}},
        {1, {5}, {0}},
        {4, {2, 5, 3, 8}, {0, 2, 1, 3}},
    };
    uint64_t seed = 700;
    for (int d = 0; d < n_storage; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const perm_case *pc = &cases[c];
            const mpx_dtype dt = STORAGE[d];
            const size_t n = numel_of(pc->ndim, pc->shape);
            int64_t ys[4];
            for (int i = 0; i < pc->ndim; i++)
                ys[i] = pc->shape[pc->perm[i]];
            char what[96], shp[64];
            mpx_shape_str(pc->ndim, pc->shape, shp, sizeof shp);
            float *x = rand_in(dt, n, -1, 1, seed++), *ref = hbuf(n), *back = hbuf(n);
            mpx_tensor hx = host_t(pc->ndim, pc->shape, x), hy = host_t(pc->ndim, ys, ref);
            mpx_tensor hb = host_t(pc->ndim, pc->shape, back);
            mpx_tensor gx = dev_tensor(dt, pc->ndim, pc->shape, x),
                       gy = dev_tensor(dt, pc->ndim, ys, NULL);
            mpx_tensor gb = dev_tensor(dt, pc->ndim, pc->shape, NULL);
            CHECK_OK(mpx_permute_forward_cpu(pc->perm, &hx, &hy));
            CHECK_OK(mpx_permute_forward_cuda(pc->perm, &gx, &gy));
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "permute forward %s", shp);
            check_exact(what, dt, got, ref, n);
            free(got);
            /* backward of the forward's output: dy = y, dx must equal x */
            CHECK_OK(mpx_permute_backward_cpu(pc->perm, &hy, &hb));
            CHECK_OK(mpx_permute_backward_cuda(pc->perm, &gy, &gb));
            got = dev_read(&gb);
            snprintf(what, sizeof what, "permute backward %s", shp);
            check_exact(what, dt, got, back, n);
            check_exact(what, dt, got, x, n);
            free(got);
            dev_free(&gx), dev_free(&gy), dev_free(&gb);
            free(x), free(ref), free(back);
        }
    check_device_clean("permute");
}

/* ---- pooling ---- */
static void test_pool(void) {
    static const mpx_pool2d_attr attrs[] = {{3, 2, 1}, {2, 2, 0}, {3, 1, 1}, {1, 1, 0}, {3, 3, 2}};
    static const int64_t shapes[][4] = {{2, 7, 9, 5}, {1, 4, 4, 1}, {3, 11, 6, 17}};
    uint64_t seed = 900;
    for (int d = 0; d < n_storage; d++)
        for (size_t si = 0; si < 3; si++)
            for (size_t ai = 0; ai < sizeof attrs / sizeof attrs[0]; ai++) {
                const mpx_dtype dt = STORAGE[d];
                const mpx_pool2d_attr *a = &attrs[ai];
                const int64_t *xs = shapes[si];
                if (xs[1] + 2 * a->pad < a->kernel || xs[2] + 2 * a->pad < a->kernel) continue;
                const int64_t ys[4] = {xs[0], (xs[1] + 2 * a->pad - a->kernel) / a->stride + 1,
                                       (xs[2] + 2 * a->pad - a->kernel) / a->stride + 1, xs[3]};
                const size_t nx = numel_of(4, xs), ny = numel_of(4, ys);
                char what[128];
                /* few distinct values: ties, so the first-maximum rule matters; one NaN */
                float *x = hbuf(nx);
                mpx_test_uniform(x, nx, -4, 4, seed++);
                for (size_t i = 0; i < nx; i++)
                    x[i] = floorf(x[i] * 2.0f) / 2.0f;
                if (si == 0) x[nx / 2] = NAN;
                float *dy = rand_in(dt, ny, -1, 1, seed++), *y = hbuf(ny), *dx = hbuf(nx);
                mpx_tensor hx = host_t(4, xs, x), hy = host_t(4, ys, y), hdy = host_t(4, ys, dy);
                mpx_tensor hdx = host_t(4, xs, dx);
                mpx_tensor gx = dev_tensor(dt, 4, xs, x), gy = dev_tensor(dt, 4, ys, NULL);
                mpx_tensor gdy = dev_tensor(dt, 4, ys, dy), gdx = dev_tensor(dt, 4, xs, NULL);
                CHECK_OK(mpx_maxpool2d_forward_cpu(a, &hx, &hy));
                CHECK_OK(mpx_maxpool2d_forward_cuda(a, &gx, &gy));
                float *got = dev_read(&gy);
                snprintf(what, sizeof what, "maxpool forward k%d s%d p%d shape %d", a->kernel,
                         a->stride, a->pad, (int)si);
                check_exact(what, dt, got, y, ny);
                free(got);
                round_through(dt, y, ny); /* the stored y both backward passes read */
                mpx_tensor gyr = dev_tensor(dt, 4, ys, y);
                CHECK_OK(mpx_maxpool2d_backward_cpu(a, &hdy, &hx, &hy, &hdx));
                CHECK_OK(mpx_maxpool2d_backward_cuda(a, &gdy, &gx, &gyr, &gdx));
                got = dev_read(&gdx);
                snprintf(what, sizeof what, "maxpool backward k%d s%d p%d shape %d", a->kernel,
                         a->stride, a->pad, (int)si);
                check_exact(what, dt, got, dx, nx);
                free(got);
                dev_free(&gx), dev_free(&gy), dev_free(&gdy), dev_free(&gdx), dev_free(&gyr);
                free(x), free(dy), free(y), free(dx);
            }
    /* global average pool */
    static const int64_t gshapes[][4] = {{3, 5, 7, 6}, {1, 1, 1, 1}, {2, 8, 8, 33}};
    for (int d = 0; d < n_storage; d++)
        for (size_t si = 0; si < 3; si++) {
            const mpx_dtype dt = STORAGE[d];
            const int64_t *xs = gshapes[si], ys[2] = {xs[0], xs[3]};
            const size_t nx = numel_of(4, xs), ny = numel_of(2, ys);
            char what[96];
            float *x = rand_in(dt, nx, -3, 3, seed++), *dy = rand_in(dt, ny, -1, 1, seed++);
            float *y = hbuf(ny), *dx = hbuf(nx);
            mpx_tensor hx = host_t(4, xs, x), hy = host_t(2, ys, y), hdy = host_t(2, ys, dy);
            mpx_tensor hdx = host_t(4, xs, dx);
            mpx_tensor gx = dev_tensor(dt, 4, xs, x), gy = dev_tensor(dt, 2, ys, NULL);
            mpx_tensor gdy = dev_tensor(dt, 2, ys, dy), gdx = dev_tensor(dt, 4, xs, NULL);
            CHECK_OK(mpx_avgpool_global_forward_cpu(&hx, &hy));
            CHECK_OK(mpx_avgpool_global_forward_cuda(&gx, &gy));
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "avgpool forward shape %d", (int)si);
            check_exact(what, dt, got, y, ny);
            free(got);
            CHECK_OK(mpx_avgpool_global_backward_cpu(&hdy, &hdx));
            CHECK_OK(mpx_avgpool_global_backward_cuda(&gdy, &gdx));
            got = dev_read(&gdx);
            snprintf(what, sizeof what, "avgpool backward shape %d", (int)si);
            check_exact(what, dt, got, dx, nx);
            free(got);
            dev_free(&gx), dev_free(&gy), dev_free(&gdy), dev_free(&gdx);
            free(x), free(dy), free(y), free(dx);
        }
    check_device_clean("pool");
}

/* ---- embedding ---- */
static void test_embedding(void) {
    typedef struct {
        int ndim;
        int64_t shape[3];
        int64_t v, h;
    } emb_case;
    static const emb_case cases[] = {
        {2, {4, 9}, 50, 19},
        {1, {1}, 3, 1},
        {3, {2, 3, 5}, 7, 300},
        {1, {4000}, 30, 64},
    };
    uint64_t seed = 1100;
    for (int d = 0; d < n_storage; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const emb_case *ec = &cases[c];
            const mpx_dtype dt = STORAGE[d];
            const size_t n = numel_of(ec->ndim, ec->shape), h = (size_t)ec->h;
            const int64_t ts[2] = {ec->v, ec->h};
            int64_t ys[4];
            memcpy(ys, ec->shape, sizeof ec->shape);
            ys[ec->ndim] = ec->h;
            char what[96];
            int32_t *ids = xalloc(n * sizeof *ids);
            for (size_t i = 0; i < n; i++) {
                uint32_t w[4];
                mpx_philox(seed, MPX_RNG_TEST, i, w);
                /* every third id from a small set: many duplicates */
                ids[i] = (int32_t)(w[0] % 3 == 0 ? w[1] % 3 : w[1] % (uint32_t)ec->v);
            }
            seed++;
            float *table = rand_in(dt, (size_t)ec->v * h, -1, 1, seed++);
            float *dy = rand_in(dt, n * h, -1, 1, seed++);
            float *y = hbuf(n * h), *dt_ref = hbuf((size_t)ec->v * h);
            mpx_tensor hid = view(MPX_I32, MPX_DEV_CPU, ec->ndim, ec->shape, ids);
            mpx_tensor ht = host_t(2, ts, table), hy = host_t(ec->ndim + 1, ys, y);
            mpx_tensor hdy = host_t(ec->ndim + 1, ys, dy), hdt = host_t(2, ts, dt_ref);
            mpx_tensor gid = dev_i32(ec->ndim, ec->shape, ids), gt = dev_tensor(dt, 2, ts, table);
            mpx_tensor gy = dev_tensor(dt, ec->ndim + 1, ys, NULL),
                       gdy = dev_tensor(dt, ec->ndim + 1, ys, dy);
            mpx_tensor gdt = dev_tensor(MPX_F32, 2, ts, NULL);
            CHECK_OK(mpx_embedding_forward_cpu(&hid, &ht, &hy));
            CHECK_OK(mpx_embedding_forward_cuda(&gid, &gt, &gy));
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "embedding forward case %d", (int)c);
            check_exact(what, dt, got, y, n * h);
            free(got);
            CHECK_OK(mpx_embedding_backward_cpu(&hdy, &hid, &hdt));
            CHECK_OK(mpx_embedding_backward_cuda(&gdy, &gid, &gdt));
            got = dev_read(&gdt);
            snprintf(what, sizeof what, "embedding backward case %d", (int)c);
            check_exact(what, MPX_F32, got, dt_ref, (size_t)ec->v * h);
            free(got);
            /* an id out of range names its position and value */
            if (c == 0) {
                for (int k = 0; k < 2; k++) {
                    int32_t saved = ids[1 * 9 + 2];
                    ids[1 * 9 + 2] = k ? -1 : (int32_t)ec->v;
                    mpx_tensor gbad = dev_i32(ec->ndim, ec->shape, ids);
                    mpx_status st = after_wait(k ? mpx_embedding_backward_cuda(&gdy, &gbad, &gdt)
                                                 : mpx_embedding_forward_cuda(&gbad, &gt, &gy));
                    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "ids[1,2]") &&
                              strstr(mpx_error_message(), k ? "= -1" : "= 50"),
                          "embedding %s: bad id refused: %s", k ? "backward" : "forward",
                          mpx_error_message());
                    ids[1 * 9 + 2] = saved;
                    dev_free(&gbad);
                }
            }
            dev_free(&gid), dev_free(&gt), dev_free(&gy), dev_free(&gdy), dev_free(&gdt);
            free(ids), free(table), free(dy), free(y), free(dt_ref);
        }
    check_device_clean("embedding");
}

/* ---- softmax ---- */
static void test_softmax(void) {
    typedef struct {
        int ndim;
        int64_t shape[4];
        int mask; /* 0 none, 1 i32, 2 f32 */
        float scale;
    } sm_case;
    static const sm_case cases[] = {
        {4, {2, 3, 5, 7}, 0, 0.125f}, {4, {2, 3, 5, 7}, 1, 0.125f},
        {4, {3, 2, 4, 33}, 2, 1.0f},  {1, {1}, 0, 1.0f},
        {2, {3, 1000}, 0, -0.5f},     {4, {2, 12, 16, 16}, 1, 0.25f},
    };
    uint64_t seed = 1500;
    for (int d = 0; d < n_storage; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const sm_case *sc = &cases[c];
            const mpx_dtype dt = STORAGE[d];
            const size_t n = numel_of(sc->ndim, sc->shape);
            const int64_t tk = sc->shape[sc->ndim - 1], rows = (int64_t)n / tk;
            char what[96];
            float *x = rand_in(dt, n, -8, 8, seed++), *dy = rand_in(dt, n, -1, 1, seed++);
            float *y = hbuf(n), *dx = hbuf(n), *mag = hbuf(n);
            mpx_tensor hmask, gmask;
            memset(&hmask, 0, sizeof hmask);
            memset(&gmask, 0, sizeof gmask);
            int32_t *mi = NULL;
            float *mf = NULL;
            const int64_t ms[2] = {sc->shape[0], tk};
            if (sc->mask) {
                const size_t nm = (size_t)(ms[0] * ms[1]);
                mi = xalloc(nm * sizeof *mi);
                mf = hbuf(nm);
                for (size_t i = 0; i < nm; i++) {
                    uint32_t w[4];
                    mpx_philox(seed, MPX_RNG_TEST, i, w);
                    /* batch 0 keeps most keys; batch 1 masks every key (rows of zeros) */
                    mi[i] = i / (size_t)tk == 1 ? 0 : (w[0] % 4 != 0);
                    mf[i] = (float)mi[i];
                }
                hmask = sc->mask == 1 ? view(MPX_I32, MPX_DEV_CPU, 2, ms, mi) : host_t(2, ms, mf);
                gmask = sc->mask == 1 ? dev_i32(2, ms, mi) : dev_tensor(MPX_F32, 2, ms, mf);
            }
            mpx_tensor hx = host_t(sc->ndim, sc->shape, x), hy = host_t(sc->ndim, sc->shape, y);
            mpx_tensor hdy = host_t(sc->ndim, sc->shape, dy), hdx = host_t(sc->ndim, sc->shape, dx);
            mpx_tensor gx = dev_tensor(dt, sc->ndim, sc->shape, x),
                       gy = dev_tensor(dt, sc->ndim, sc->shape, NULL);
            CHECK_OK(mpx_softmax_forward_cpu(sc->scale, &hx, sc->mask ? &hmask : NULL, &hy));
            CHECK_OK(mpx_softmax_forward_cuda(sc->scale, &gx, sc->mask ? &gmask : NULL, &gy));
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "softmax forward case %d", (int)c);
            check_close(what, dt, got, y, NULL, n, ldexp(1.0, -19), 1e-40);
            free(got);
            /* backward from the stored y */
            round_through(dt, y, n);
            for (int64_t r = 0; r < rows; r++) {
                double s = 0;
                for (int64_t j = 0; j < tk; j++)
                    s += (double)dy[r * tk + j] * y[r * tk + j];
                for (int64_t j = 0; j < tk; j++)
                    mag[r * tk + j] = (float)(fabs((double)sc->scale * y[r * tk + j]) *
                                              (fabs((double)dy[r * tk + j]) + fabs(s)));
            }
            mpx_tensor gyr = dev_tensor(dt, sc->ndim, sc->shape, y),
                       gdy = dev_tensor(dt, sc->ndim, sc->shape, dy);
            CHECK_OK(mpx_softmax_backward_cpu(sc->scale, &hdy, &hy, &hdx));
            dev_poison(&gy);
            CHECK_OK(mpx_softmax_backward_cuda(sc->scale, &gdy, &gyr, &gy));
            got = dev_read(&gy);
            snprintf(what, sizeof what, "softmax backward case %d", (int)c);
            check_close(what, dt, got, dx, mag, n, ldexp(1.0, -21), 1e-40);
            free(got);
            if (sc->mask == 1) { /* a mask value of 2 names its position */
                mi[1] = 2;
                mpx_tensor gbad = dev_i32(2, ms, mi);
                CHECK(after_wait(mpx_softmax_forward_cuda(sc->scale, &gx, &gbad, &gy)) ==
                              MPX_ERR_INPUT &&
                          strstr(mpx_error_message(), "mask[0,1] = 2"),
                      "softmax: mask value 2 refused: %s", mpx_error_message());
                dev_free(&gbad);
            }
            if (sc->mask) dev_free(&gmask);
            dev_free(&gx), dev_free(&gy), dev_free(&gyr), dev_free(&gdy);
            free(x), free(dy), free(y), free(dx), free(mag), free(mi), free(mf);
        }
    check_device_clean("softmax");
}

/* ---- layer-norm ---- */
static void test_layernorm(void) {
    typedef struct {
        int ndim;
        int64_t shape[3];
    } ln_case;
    /* 9000 rows: 250 chunks of 36 rows for dgamma/dbeta; 100 rows: 4 chunks of 32 */
    static const ln_case cases[] = {
        {3, {3, 5, 37}}, {2, {4, 300}}, {2, {1, 1}}, {2, {9000, 8}}, {2, {100, 768}},
    };
    const float eps = 1e-5f;
    uint64_t seed = 1900;
    for (int d = 0; d < n_storage; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const ln_case *lc = &cases[c];
            const mpx_dtype dt = STORAGE[d];
            const size_t n = numel_of(lc->ndim, lc->shape);
            const int64_t C = lc->shape[lc->ndim - 1], M = (int64_t)n / C;
            const int64_t cs[1] = {C}, ms[1] = {M};
            char what[96];
            float *x = rand_in(dt, n, 1, 5, seed++),
                  *g = rand_in(dt, (size_t)C, 0.5f, 1.5f, seed++);
            float *b = rand_in(dt, (size_t)C, -1, 1, seed++), *dy = rand_in(dt, n, -1, 1, seed++);
            float *y = hbuf(n), *mean = hbuf((size_t)M), *inv = hbuf((size_t)M), *mag = hbuf(n);
            float *dx = hbuf(n), *dg = hbuf((size_t)C), *db = hbuf((size_t)C);
            mpx_tensor hx = host_t(lc->ndim, lc->shape, x), hg = host_t(1, cs, g),
                       hb = host_t(1, cs, b);
            mpx_tensor hy = host_t(lc->ndim, lc->shape, y), hm = host_t(1, ms, mean);
            mpx_tensor hi = host_t(1, ms, inv), hdy = host_t(lc->ndim, lc->shape, dy);
            mpx_tensor hdx = host_t(lc->ndim, lc->shape, dx), hdg = host_t(1, cs, dg);
            mpx_tensor hdb = host_t(1, cs, db);
            mpx_tensor gx = dev_tensor(dt, lc->ndim, lc->shape, x), gg = dev_tensor(dt, 1, cs, g);
            mpx_tensor gb = dev_tensor(dt, 1, cs, b),
                       gy = dev_tensor(dt, lc->ndim, lc->shape, NULL);
            mpx_tensor gm = dev_tensor(MPX_F32, 1, ms, NULL), gi = dev_tensor(MPX_F32, 1, ms, NULL);
            CHECK_OK(mpx_layernorm_forward_cpu(eps, &hx, &hg, &hb, &hm, &hi, &hy));
            CHECK_OK(mpx_layernorm_forward_cuda(eps, &gx, &gg, &gb, &gm, &gi, &gy));
            for (int64_t r = 0; r < M; r++)
                for (int64_t j = 0; j < C; j++) {
                    const size_t e = (size_t)(r * C + j);
                    mag[e] = (fabsf(x[e] - mean[r]) + fabsf(mean[r])) * inv[r] * fabsf(g[j]) +
                             fabsf(b[j]);
                }
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "layernorm forward y case %d", (int)c);
            check_close(what, dt, got, y, mag, n, ldexp(1.0, -20), 0);
            free(got);
            got = dev_read(&gm);
            snprintf(what, sizeof what, "layernorm forward mean case %d", (int)c);
            check_close(what, MPX_F32, got, mean, NULL, (size_t)M, ldexp(1.0, -22), 1e-12);
            free(got);
            got = dev_read(&gi);
            snprintf(what, sizeof what, "layernorm forward invstd case %d", (int)c);
            check_close(what, MPX_F32, got, inv, NULL, (size_t)M, ldexp(1.0, -22), 0);
            free(got);

            /* backward: both sides read the CPU's saved statistics */
            mpx_tensor gm2 = dev_tensor(MPX_F32, 1, ms, mean),
                       gi2 = dev_tensor(MPX_F32, 1, ms, inv);
            mpx_tensor gdy = dev_tensor(dt, lc->ndim, lc->shape, dy),
                       gdx = dev_tensor(dt, lc->ndim, lc->shape, NULL);
            mpx_tensor gdg = dev_tensor(MPX_F32, 1, cs, NULL),
                       gdb = dev_tensor(MPX_F32, 1, cs, NULL);
            CHECK_OK(mpx_layernorm_backward_cpu(&hdy, &hx, &hg, &hm, &hi, &hdx, &hdg, &hdb));
            CHECK_OK(mpx_layernorm_backward_cuda(&gdy, &gx, &gg, &gm2, &gi2, &gdx, &gdg, &gdb));
            for (int64_t r = 0; r < M; r++) {
                double sg = 0, sgx = 0;
                for (int64_t j = 0; j < C; j++) {
                    const size_t e = (size_t)(r * C + j);
                    const double xh = ((double)x[e] - mean[r]) * inv[r], gj = (double)dy[e] * g[j];
                    sg += gj, sgx += gj * xh;
                }
                for (int64_t j = 0; j < C; j++) {
                    const size_t e = (size_t)(r * C + j);
                    const double xh = ((double)x[e] - mean[r]) * inv[r];
                    mag[e] = (float)(inv[r] * (fabs((double)dy[e] * g[j]) + fabs(sg / (double)C) +
                                               fabs(xh * sgx / (double)C)));
                }
            }
            got = dev_read(&gdx);
            snprintf(what, sizeof what, "layernorm backward dx case %d", (int)c);
            check_close(what, dt, got, dx, mag, n, ldexp(1.0, -20), 0);
            free(got);
            got = dev_read(&gdg);
            snprintf(what, sizeof what, "layernorm backward dgamma case %d", (int)c);
            check_exact(what, MPX_F32, got, dg, (size_t)C);
            free(got);
            got = dev_read(&gdb);
            snprintf(what, sizeof what, "layernorm backward dbeta case %d", (int)c);
            check_exact(what, MPX_F32, got, db, (size_t)C);
            free(got);
            dev_free(&gx), dev_free(&gg), dev_free(&gb), dev_free(&gy), dev_free(&gm);
            dev_free(&gi), dev_free(&gm2), dev_free(&gi2), dev_free(&gdy), dev_free(&gdx);
            dev_free(&gdg), dev_free(&gdb);
            free(x), free(g), free(b), free(dy), free(y), free(mean), free(inv), free(mag);
            free(dx), free(dg), free(db);
        }
    check_device_clean("layernorm");
}

/* ---- L2 normalization (SSD) ---- */
static void test_l2norm(void) {
    typedef struct {
        int ndim;
        int64_t shape[3];
    } l2_case;
    /* 9000 rows: 250 chunks of 36 rows for dgamma; 100 rows: 4 chunks of 32 */
    static const l2_case cases[] = {
        {3, {3, 5, 37}}, {2, {4, 300}}, {2, {1, 1}}, {2, {9000, 8}}, {2, {100, 512}},
    };
    const float eps = 1e-10f;
    uint64_t seed = 2100;
    for (int d = 0; d < n_storage; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const l2_case *lc = &cases[c];
            const mpx_dtype dt = STORAGE[d];
            const size_t n = numel_of(lc->ndim, lc->shape);
            const int64_t C = lc->shape[lc->ndim - 1], M = (int64_t)n / C;
            const int64_t cs[1] = {C}, ms[1] = {M};
            char what[96];
            float *x = rand_in(dt, n, -3, 3, seed++), *g = rand_in(dt, (size_t)C, 10, 30, seed++);
            float *dy = rand_in(dt, n, -1, 1, seed++);
            float *y = hbuf(n), *inv = hbuf((size_t)M), *mag = hbuf(n), *dx = hbuf(n);
            float *dg = hbuf((size_t)C);
            mpx_tensor hx = host_t(lc->ndim, lc->shape, x), hg = host_t(1, cs, g);
            mpx_tensor hy = host_t(lc->ndim, lc->shape, y), hi = host_t(1, ms, inv);
            mpx_tensor hdy = host_t(lc->ndim, lc->shape, dy), hdx = host_t(lc->ndim, lc->shape, dx);
            mpx_tensor hdg = host_t(1, cs, dg);
            mpx_tensor gx = dev_tensor(dt, lc->ndim, lc->shape, x), gg = dev_tensor(dt, 1, cs, g);
            mpx_tensor gy = dev_tensor(dt, lc->ndim, lc->shape, NULL);
            mpx_tensor gi = dev_tensor(MPX_F32, 1, ms, NULL);
            CHECK_OK(mpx_l2norm_forward_cpu(eps, &hx, &hg, &hi, &hy));
            CHECK_OK(mpx_l2norm_forward_cuda(eps, &gx, &gg, &gi, &gy));
            for (int64_t r = 0; r < M; r++)
                for (int64_t j = 0; j < C; j++) {
                    const size_t e = (size_t)(r * C + j);
                    mag[e] = fabsf(x[e]) * inv[r] * fabsf(g[j]);
                }
            float *got = dev_read(&gy);
            snprintf(what, sizeof what, "l2norm forward y case %d", (int)c);
            check_close(what, dt, got, y, mag, n, ldexp(1.0, -20), 0);
            free(got);
            got = dev_read(&gi);
            snprintf(what, sizeof what, "l2norm forward inverse norm case %d", (int)c);
            check_close(what, MPX_F32, got, inv, NULL, (size_t)M, ldexp(1.0, -22), 0);
            free(got);

            /* backward: both sides read the CPU's saved inverse norms */
            mpx_tensor gi2 = dev_tensor(MPX_F32, 1, ms, inv);
            mpx_tensor gdy = dev_tensor(dt, lc->ndim, lc->shape, dy),
                       gdx = dev_tensor(dt, lc->ndim, lc->shape, NULL);
            mpx_tensor gdg = dev_tensor(MPX_F32, 1, cs, NULL);
            CHECK_OK(mpx_l2norm_backward_cpu(&hdy, &hx, &hg, &hi, &hdx, &hdg));
            CHECK_OK(mpx_l2norm_backward_cuda(&gdy, &gx, &gg, &gi2, &gdx, &gdg));
            for (int64_t r = 0; r < M; r++) {
                double sgx = 0;
                for (int64_t j = 0; j < C; j++) {
                    const size_t e = (size_t)(r * C + j);
                    sgx += fabs((double)dy[e] * g[j] * x[e] * inv[r]);
                }
                for (int64_t j = 0; j < C; j++) {
                    const size_t e = (size_t)(r * C + j);
                    mag[e] = (float)(inv[r] * (fabs((double)dy[e] * g[j]) +
                                               fabs((double)x[e] * inv[r]) * sgx));
                }
            }
            got = dev_read(&gdx);
            snprintf(what, sizeof what, "l2norm backward dx case %d", (int)c);
            check_close(what, dt, got, dx, mag, n, ldexp(1.0, -20), 0);
            free(got);
            got = dev_read(&gdg);
            snprintf(what, sizeof what, "l2norm backward dgamma case %d", (int)c);
            check_exact(what, MPX_F32, got, dg, (size_t)C);
            free(got);
            dev_free(&gx), dev_free(&gg), dev_free(&gy), dev_free(&gi), dev_free(&gi2);
            dev_free(&gdy), dev_free(&gdx), dev_free(&gdg);
            free(x), free(g), free(dy), free(y), free(inv), free(mag), free(dx), free(dg);
        }
    check_device_clean("l2norm");
}

/* ---- softmax cross-entropy ---- */
static void test_softmax_ce(void) {
    static const int64_t cases[][2] = {{1, 2}, {37, 10}, {300, 1000}, {64, 7}, {5, 3}};
    uint64_t seed = 2300;
    for (int d = 0; d < n_storage; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const mpx_dtype dt = STORAGE[d];
            const int64_t M = cases[c][0], K = cases[c][1], xs[2] = {M, K}, ls[1] = {M},
                          one[1] = {1};
            const size_t n = (size_t)(M * K);
            char what[96];
            float *x = rand_in(dt, n, -5, 5, seed++), *p = hbuf(n), *dx = hbuf(n), loss = 0;
            int32_t *lab = xalloc((size_t)M * sizeof *lab);
            for (int64_t i = 0; i < M; i++) {
                uint32_t w[4];
                mpx_philox(seed, MPX_RNG_TEST, (uint64_t)i, w);
                /* about one row in five ignored; the last case ignores every row */
                lab[i] = c == 4 || w[0] % 5 == 0 ? -1 : (int32_t)(w[1] % (uint32_t)K);
            }
            seed++;
            mpx_tensor hx = host_t(2, xs, x), hl = view(MPX_I32, MPX_DEV_CPU, 1, ls, lab);
            mpx_tensor hloss = host_t(1, one, &loss), hp = host_t(2, xs, p),
                       hdx = host_t(2, xs, dx);
            mpx_tensor gx = dev_tensor(dt, 2, xs, x), gl = dev_i32(1, ls, lab);
            mpx_tensor gloss = dev_tensor(MPX_F32, 1, one, NULL),
                       gp = dev_tensor(MPX_F32, 2, xs, NULL);
            CHECK_OK(mpx_softmax_ce_forward_cpu(&hx, &hl, &hloss, &hp));
            CHECK_OK(mpx_softmax_ce_forward_cuda(&gx, &gl, &gloss, &gp));
            float *got = dev_read(&gloss);
            snprintf(what, sizeof what, "softmax_ce loss M %lld K %lld", (long long)M,
                     (long long)K);
            check_close(what, MPX_F32, got, &loss, NULL, 1, ldexp(1.0, -22), ldexp(1.0, -20));
            free(got);
            got = dev_read(&gp);
            snprintf(what, sizeof what, "softmax_ce probs M %lld K %lld", (long long)M,
                     (long long)K);
            check_close(what, MPX_F32, got, p, NULL, n, ldexp(1.0, -19), 1e-40);
            free(got);
            /* backward from the CPU's probs: exact */
            mpx_tensor gp2 = dev_tensor(MPX_F32, 2, xs, p), gdx = dev_tensor(dt, 2, xs, NULL);
            CHECK_OK(mpx_softmax_ce_backward_cpu(&hp, &hl, &hdx));
            CHECK_OK(mpx_softmax_ce_backward_cuda(&gp2, &gl, &gdx));
            got = dev_read(&gdx);
            snprintf(what, sizeof what, "softmax_ce backward M %lld K %lld", (long long)M,
                     (long long)K);
            check_exact(what, dt, got, dx, n);
            free(got);
            if (c == 1) { /* a label >= K names its row */
                const int32_t saved = lab[3];
                lab[3] = (int32_t)K;
                mpx_tensor gbad = dev_i32(1, ls, lab);
                CHECK(after_wait(mpx_softmax_ce_forward_cuda(&gx, &gbad, &gloss, &gp)) ==
                              MPX_ERR_INPUT &&
                          strstr(mpx_error_message(), "labels[3] = 10"),
                      "softmax_ce forward: label K refused: %s", mpx_error_message());
                CHECK(after_wait(mpx_softmax_ce_backward_cuda(&gp2, &gbad, &gdx)) ==
                              MPX_ERR_INPUT &&
                          strstr(mpx_error_message(), "labels[3] = 10"),
                      "softmax_ce backward: label K refused: %s", mpx_error_message());
                lab[3] = saved;
                dev_free(&gbad);
            }
            dev_free(&gx), dev_free(&gl), dev_free(&gloss), dev_free(&gp), dev_free(&gp2);
            dev_free(&gdx);
            free(x), free(p), free(dx), free(lab);
        }
    check_device_clean("softmax_ce");
}

int main(void) {
    if (!ops_test_setup()) return MPX_TEST_SKIP;
    test_relu_add();
    test_gelu();
    test_dropout();
    test_permute();
    test_pool();
    test_embedding();
    test_softmax();
    test_layernorm();
    test_l2norm();
    test_softmax_ce();
    check_device_clean("end");
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
