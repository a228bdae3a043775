/* test_multibox_cuda.c — the CUDA backend's MultiBox loss (lib/cuda/multibox.cu) against the CPU
 * backend: forward (loss, probs, target with the mined negatives, loc_target) and backward
 * (dconf, dloc), for batches with several objects per image, padding labels, an image without
 * objects and a batch without any (N = 0), GTs that want the same prior (the bipartite step's
 * search again), priors on a grid whose IoUs with a GT tie exactly (ties to the lower index),
 * an SSD-sized image (3000 priors, 21 classes), in F32, F16 and BF16 storage of
 * conf / loc / probs / loc_target and the gradients; and ground truth the forward must refuse.
 *
 * Tolerances. target (the matching and the mined set): exact. probs, loc_target and the loss:
 * within one ulp of their dtype — the forward's +, -, *, / are the CPU's IEEE operations in the
 * CPU's order (ssd_box.h, -fmad=false), and its exp and log run in double, where CUDA's and
 * glibc's differ by at most an ulp of double; rounded to FP32 (or the loss's double sums divided
 * and rounded) that moves a result by one ulp only next to a rounding boundary. How many differ
 * at all is printed. The backward: exact (the CPU's FP32 operations, IEEE division, no FMA).
 * Skipped (77) without a device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpx/ssd.h"
#include "ops_cuda_util.h"

typedef struct {
    int b, p, c, g;
    int no_objects; /* 1: image 0 has only padding; 2: every image */
    int dup_gt;     /* 1: GT 1 of every image is GT 0 again (both want the same best prior) */
    int grid;       /* 1: priors of one size on a grid, as SSD lays them: those inside a GT tie */
} mb_shape;

static const mb_shape SHAPES[] = {
    {2, 50, 5, 3, 0, 0, 0},  {3, 200, 21, 4, 1, 0, 0}, {2, 30, 3, 2, 2, 0, 0},
    {3, 120, 4, 5, 0, 1, 0}, {4, 3000, 21, 8, 0, 0, 0}, {3, 400, 5, 6, 0, 1, 1},
    {2, 2500, 21, 10, 0, 0, 1},
};

/* got within one ulp of dt of the CPU's result (see the header); prints how many differ. */
static void check_ulp(const char *what, mpx_dtype dt, const float *got, const float *cpu_ref,
                      size_t n) {
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += bits_of(got[i]) != bits_of(mpx_round_to(dt, cpu_ref[i]));
    printf("%s [%s]: %zu of %zu differ from the CPU's bits\n", what, mpx_dtype_name(dt), differ,
           n);
    check_close(what, dt, got, cpu_ref, NULL, n, ldexp(1.0, -23), 0.0);
}

static const mpx_dtype DT[] = {MPX_F32, MPX_F16, MPX_BF16};

static void test_case(mpx_dtype dt, const mb_shape *s, uint64_t seed) {
    const int64_t cs[3] = {s->b, s->p, s->c}, ls[3] = {s->b, s->p, 4}, ps[2] = {s->p, 4};
    const int64_t gs[3] = {s->b, s->g, 4}, labs[2] = {s->b, s->g}, ts[2] = {s->b, s->p};
    const int64_t one[1] = {1};
    const size_t nc = numel_of(3, cs), nl = numel_of(3, ls), np = (size_t)s->p * 4;
    const size_t ng = numel_of(3, gs), nlab = (size_t)s->b * s->g, nt = (size_t)s->b * s->p;
    float *conf = rand_in(dt, nc, -3, 3, seed), *loc = rand_in(dt, nl, -1.5f, 1.5f, seed + 1);
    /* priors (cx, cy, w, h) and GT corners, F32 */
    float *pri = hbuf(np), *gt = hbuf(ng), *u = rand_in(MPX_F32, np + ng, 0, 1, seed + 2);
    for (int i = 0; i < s->p; i++) {
        pri[4 * i] = 0.1f + 0.8f * u[4 * i], pri[4 * i + 1] = 0.1f + 0.8f * u[4 * i + 1];
        pri[4 * i + 2] = 0.1f + 0.3f * u[4 * i + 2], pri[4 * i + 3] = 0.1f + 0.3f * u[4 * i + 3];
    }
    for (size_t i = 0; i < ng / 4; i++) {
        const float *v = u + np + 4 * i;
        gt[4 * i] = 0.6f * v[0], gt[4 * i + 1] = 0.6f * v[1];
        gt[4 * i + 2] = gt[4 * i] + 0.1f + 0.3f * v[2];
        gt[4 * i + 3] = gt[4 * i + 1] + 0.1f + 0.3f * v[3];
    }
    if (s->grid) { /* P = n^2 cells of side 1/n, priors 0.05 wide: many lie inside one GT */
        const int n = (int)sqrt((double)s->p);
        for (int i = 0; i < s->p; i++) {
            pri[4 * i] = ((float)(i % n) + 0.5f) / (float)n;
            pri[4 * i + 1] = ((float)(i / n % n) + 0.5f) / (float)n;
            pri[4 * i + 2] = pri[4 * i + 3] = 0.05f;
        }
    }
    if (s->dup_gt)
        for (int b = 0; b < s->b; b++)
            memcpy(gt + ((size_t)b * s->g + 1) * 4, gt + (size_t)b * s->g * 4, 4 * sizeof(float));
    int32_t *lab = xalloc(nlab * sizeof *lab);
    for (int b = 0; b < s->b; b++)
        for (int g = 0; g < s->g; g++) {
            int32_t l = 1 + (int32_t)((seed + 7 * b + 3 * g) % (uint64_t)(s->c - 1));
            if (g == s->g - 1 && b % 2 == 1) l = -1; /* padding */
            if (s->no_objects == 2 || (s->no_objects == 1 && b == 0)) l = -1;
            lab[b * s->g + g] = l;
        }
    float *probs = hbuf(nc), *lt = hbuf(nl), *dconf = hbuf(nc), *dloc = hbuf(nl), loss = 0;
    int32_t *tgt = xalloc(nt * sizeof *tgt);
    const size_t wsb = mpx_multibox_workspace_bytes(s->b, s->p, s->g);
    const int64_t wss[1] = {(int64_t)wsb};
    void *ws_host = xalloc(wsb + 8);
    const mpx_multibox_attr at = mpx_multibox_defaults();

    mpx_tensor hc = host_t(3, cs, conf), hl = host_t(3, ls, loc), hp = host_t(2, ps, pri);
    mpx_tensor hg = host_t(3, gs, gt), hprobs = host_t(3, cs, probs), hlt = host_t(3, ls, lt);
    mpx_tensor hloss = host_t(1, one, &loss), hdc = host_t(3, cs, dconf), hdl = host_t(3, ls, dloc);
    mpx_tensor hlab = view(MPX_I32, MPX_DEV_CPU, 2, labs, lab);
    mpx_tensor htg = view(MPX_I32, MPX_DEV_CPU, 2, ts, tgt);
    mpx_tensor hws = view(MPX_U8, MPX_DEV_CPU, 1, wss, ws_host);
    CHECK_OK(mpx_multibox_forward_cpu(&at, &hc, &hl, &hp, &hg, &hlab, &hws, &hloss, &hprobs, &htg,
                                      &hlt));
    CHECK_OK(mpx_multibox_backward_cpu(&at, &hprobs, &htg, &hl, &hlt, &hdc, &hdl));

    mpx_tensor gc = dev_tensor(dt, 3, cs, conf), gl = dev_tensor(dt, 3, ls, loc);
    mpx_tensor gp = dev_tensor(MPX_F32, 2, ps, pri), gg = dev_tensor(MPX_F32, 3, gs, gt);
    mpx_tensor glab = dev_i32(2, labs, lab);
    mpx_tensor gprobs = dev_tensor(dt, 3, cs, NULL), glt = dev_tensor(dt, 3, ls, NULL);
    mpx_tensor gloss = dev_tensor(MPX_F32, 1, one, NULL);
    mpx_tensor gdc = dev_tensor(dt, 3, cs, NULL), gdl = dev_tensor(dt, 3, ls, NULL);
    int32_t *poison = xalloc(nt * sizeof *poison);
    memset(poison, 0x7f, nt * sizeof *poison);
    mpx_tensor gtg = dev_i32(2, ts, poison);
    mpx_tensor gws = view(MPX_U8, gpu->device, 1, wss, gpu->alloc(gpu, wsb + 8));
    CHECK_OK(mpx_multibox_forward_cuda(&at, &gc, &gl, &gp, &gg, &glab, &gws, &gloss, &gprobs, &gtg,
                                       &glt));
    char what[160], shp[64];
    mpx_shape_str(3, cs, shp, sizeof shp);
    {
        float *got = dev_read(&gloss);
        snprintf(what, sizeof what, "multibox loss x%s", shp);
        check_ulp(what, MPX_F32, got, &loss, 1);
        free(got);
        got = dev_read(&gprobs);
        snprintf(what, sizeof what, "multibox probs x%s", shp);
        check_ulp(what, dt, got, probs, nc);
        free(got);
        got = dev_read(&glt);
        snprintf(what, sizeof what, "multibox loc_target x%s", shp);
        check_ulp(what, dt, got, lt, nl);
        free(got);
        int32_t *tg = xalloc(nt * sizeof *tg);
        gpu->download(gpu, tg, gtg.data, nt * sizeof *tg);
        size_t bad = 0;
        for (size_t i = 0; i < nt; i++)
            bad += tg[i] != tgt[i];
        CHECK(bad == 0, "multibox target [%s] x%s: %zu of %zu differ", mpx_dtype_name(dt), shp,
              bad, nt);
        free(tg);
    }
    /* backward from the GPU's saved tensors (probs rounded into dt, as the executor would
     * store them): the CPU reference from the same rounded values */
    {
        float *pr = dev_read(&gprobs), *ltr = dev_read(&glt);
        mpx_tensor hpr = host_t(3, cs, pr), hltr = host_t(3, ls, ltr);
        CHECK_OK(mpx_multibox_backward_cpu(&at, &hpr, &htg, &hl, &hltr, &hdc, &hdl));
        CHECK_OK(mpx_multibox_backward_cuda(&at, &gprobs, &gtg, &gl, &glt, &gdc, &gdl));
        float *got = dev_read(&gdc);
        snprintf(what, sizeof what, "multibox dconf x%s", shp);
        check_exact(what, dt, got, dconf, nc);
        free(got);
        got = dev_read(&gdl);
        snprintf(what, sizeof what, "multibox dloc x%s", shp);
        check_exact(what, dt, got, dloc, nl);
        free(got);
        free(pr);
        free(ltr);
    }
    /* a bad target is an input error naming its position (read at the backend's next wait) */
    {
        int32_t bad_t[1] = {(int32_t)s->c};
        gpu->upload(gpu, gtg.data, bad_t, sizeof bad_t);
        CHECK(after_wait(mpx_multibox_backward_cuda(&at, &gprobs, &gtg, &gl, &glt, &gdc, &gdl)) ==
                      MPX_ERR_INPUT &&
                  strstr(mpx_error_message(), "target[0,0]"),
              "multibox backward: target C accepted: %s", mpx_error_message());
    }
    /* ground truth the CPU op refuses: reported at the next wait, naming the first offence */
    if (s->b >= 2 && s->g >= 2 && !s->no_objects) {
        int32_t bad_lab[1] = {(int32_t)s->c};
        gpu->upload(gpu, (int32_t *)glab.data + s->g, bad_lab, sizeof bad_lab); /* gt_labels[1,0] */
        CHECK(after_wait(mpx_multibox_forward_cuda(&at, &gc, &gl, &gp, &gg, &glab, &gws, &gloss,
                                                   &gprobs, &gtg, &glt)) == MPX_ERR_INPUT &&
                  strstr(mpx_error_message(), "gt_labels[1,0]"),
              "multibox forward: label C accepted: %s", mpx_error_message());
        gpu->upload(gpu, glab.data, lab, nlab * sizeof *lab);
        const float flipped[4] = {gt[4 + 2], gt[4 + 1], gt[4], gt[4 + 3]}; /* x1 < x0 */
        gpu->upload(gpu, (float *)gg.data + 4, flipped, sizeof flipped);          /* gt_boxes[0,1] */
        CHECK(after_wait(mpx_multibox_forward_cuda(&at, &gc, &gl, &gp, &gg, &glab, &gws, &gloss,
                                                   &gprobs, &gtg, &glt)) == MPX_ERR_INPUT &&
                  strstr(mpx_error_message(), "gt_boxes[0,1,0]"),
              "multibox forward: box with x1 < x0 accepted: %s", mpx_error_message());
    }
    check_device_clean(what);
    mpx_tensor *dev[] = {&gc, &gl, &gp, &gg, &glab, &gprobs, &glt, &gloss, &gdc, &gdl, &gtg, &gws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        dev_free(dev[i]);
    void *host[] = {conf, loc, pri, gt, u, lab, probs, lt, dconf, dloc, tgt, ws_host, poison};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

int main(void) {
    if (!ops_test_setup()) return MPX_TEST_SKIP;
    uint64_t seed = 9000;
    for (size_t d = 0; d < sizeof DT / sizeof DT[0]; d++)
        for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++, seed += 10)
            test_case(DT[d], &SHAPES[s], seed);
    check_device_clean("end");
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
