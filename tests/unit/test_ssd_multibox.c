/* test_ssd_multibox.c — the MultiBox loss against a reference written here in double (its own
 * matching by a global greedy search over the IoU matrix, its own mining by repeated
 * selection of the largest background loss), the backward against central finite
 * differences of that reference with the selection fixed, tied negatives, a batch without
 * any object (N = 0), other attributes, 1 vs 2 threads, and the input errors.
 *
 * Tolerances, u = 2^-24, R = the row's logit range max - min:
 *  - probs p_j: as in test_op_softmax_ce.c, |err| <= u p_j (6 + |x_j - max| + R).
 *  - loc_target: the FP32 encoding bounds of test_ssd_match.c (twice the first-order bound):
 *      e_0 = 2 (u (|cx| + |cx - cx_p|) / (v w_p) + 2u |t_0|)   (same for y with h),
 *      e_2 = 2 ((2u + 2u |log(w / w_p)|) / v_wh + u |t_2|)     (same for h).
 *  - loss: each counted prior's CE is log(sum of FP32 exps) + max - x_c in double: the sum
 *    has relative error u (2 + R), so |err CE| <= u (3 + 2R) (as the softmax test); a
 *    positive's smooth-L1 terms move by at most |clamp(d)| e_k <= e_k through the FP32
 *    target; the total over N, rounded: + u |loss|.
 *  - dconf = (p - onehot) / N: (the p bound + 2u |p - onehot|) / N;
 *    dloc = w clamp(loc - loc_target) / N: w (e_k + u |d|) / N + 2u |dloc| (clamp is exact
 *    away from |d| = 1, which the data avoid by 1e-4 >> e_k).
 *  - finite differences: central, h = 1e-5, of one prior's double term (the loss is a sum of
 *    per-prior terms over N and a logit or offset enters its own prior's term only, the
 *    selection being fixed): truncation h^2 |f'''| / 6 ~ 1e-11 (smooth-L1's kink is 1e-4 >> h
 * away), rounding ~ |term| 1e-16 / h <= 1e-9; we add 2e-9 (1 + w) / N. The reference matches with
 * double IoUs and ranks by double losses while the op uses FP32 IoUs and FP32 probabilities; the
 * data are checked to keep every IoU 1e-6 away from the threshold and the mining cut 1e-5 away from
 * the next candidate (or exactly tied), far beyond those rounding differences, so the selections
 * must agree exactly.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/rng.h"
#include "mpx/runtime.h"
#include "mpx/ssd.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

typedef struct {
    int b, p, c, g;
    float *conf, *loc, *pri, *gt; /* [B,P,C] [B,P,4] [P,4] [B,G,4] */
    int32_t *lab;                 /* [B,G] */
} problem;

/* What the reference computes. */
typedef struct {
    int32_t *tgt; /* [B,P] */
    int *match;   /* [B,P]: the GT encoded into lt, -1 none */
    double *lt;   /* [B,P,4] */
    double loss;
    int64_t n;
    double min_thr_gap, min_cut_gap; /* data sanity: distance to the threshold / mining cut */
} reference;

/* ---- the reference ---- */

static double iou_d(const double *a, const double *b) {
    double iw = fmin(a[2], b[2]) - fmax(a[0], b[0]), ih = fmin(a[3], b[3]) - fmax(a[1], b[1]);
    if (iw <= 0 || ih <= 0) return 0;
    double inter = iw * ih;
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter);
}

static double ce_d(const float *x, int c, int t) {
    double mx = x[0], s = 0;
    for (int j = 1; j < c; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < c; j++) s += exp(x[j] - mx);
    return log(s) + mx - x[t];
}

static double sl1_d(double d) { return fabs(d) < 1 ? 0.5 * d * d : fabs(d) - 0.5; }

/* Matching of image b: the largest IoU over all (free GT, free prior) pairs, repeatedly
 * (scanning GT then prior, a strictly larger value replaces: ties to the lower indices), then
 * each remaining prior's best GT by threshold. */
static void ref_match(const problem *pb, int b, double thr, int *match, reference *r) {
    const int p = pb->p, g = pb->g;
    const float *gt = pb->gt + (size_t)b * g * 4;
    const int32_t *lab = pb->lab + (size_t)b * g;
    double *iou = malloc(sizeof(double) * p * g);
    char *gdone = calloc(g, 1), *taken = calloc(p, 1);
    for (int j = 0; j < g; j++)
        for (int i = 0; i < p; i++) {
            const float *q = pb->pri + 4 * i;
            double pc[4] = {q[0] - q[2] / 2.0, q[1] - q[3] / 2.0, q[0] + q[2] / 2.0,
                            q[1] + q[3] / 2.0};
            double gd[4] = {gt[4 * j], gt[4 * j + 1], gt[4 * j + 2], gt[4 * j + 3]};
            iou[j * p + i] = lab[j] < 0 ? -1 : iou_d(pc, gd);
            if (lab[j] >= 0 && fabs(iou[j * p + i] - thr) < r->min_thr_gap)
                r->min_thr_gap = fabs(iou[j * p + i] - thr);
        }
    for (int i = 0; i < p; i++) match[i] = -1;
    for (;;) {
        double best = 0;
        int bj = -1, bi = -1;
        for (int j = 0; j < g; j++) {
            if (gdone[j]) continue;
            for (int i = 0; i < p; i++)
                if (!taken[i] && iou[j * p + i] > best) best = iou[j * p + i], bj = j, bi = i;
        }
        if (bj < 0) break;
        match[bi] = bj, gdone[bj] = taken[bi] = 1;
    }
    for (int i = 0; i < p; i++) {
        if (taken[i]) continue;
        double best = -1;
        for (int j = 0; j < g; j++)
            if (iou[j * p + i] > best) best = iou[j * p + i], match[i] = j;
        if (best < thr) match[i] = -1;
    }
    free(iou), free(gdone), free(taken);
}

static void encode_d(const float *q, const float *box, const mpx_multibox_attr *a, double *t) {
    double cx = ((double)box[0] + box[2]) / 2, cy = ((double)box[1] + box[3]) / 2;
    double w = (double)box[2] - box[0], h = (double)box[3] - box[1];
    t[0] = (cx - q[0]) / ((double)a->var_xy * q[2]);
    t[1] = (cy - q[1]) / ((double)a->var_xy * q[3]);
    t[2] = log(w / q[2]) / a->var_wh;
    t[3] = log(h / q[3]) / a->var_wh;
}

/* The FP32 encoding error bounds e_k of the header comment. */
static void encode_tol(const float *q, const float *box, const mpx_multibox_attr *a, double *e) {
    double t[4];
    encode_d(q, box, a, t);
    double cx = ((double)box[0] + box[2]) / 2, cy = ((double)box[1] + box[3]) / 2;
    double w = (double)box[2] - box[0], h = (double)box[3] - box[1];
    e[0] = 2 * (U * (fabs(cx) + fabs(cx - q[0])) / (a->var_xy * (double)q[2]) + 2 * U * fabs(t[0]));
    e[1] = 2 * (U * (fabs(cy) + fabs(cy - q[1])) / (a->var_xy * (double)q[3]) + 2 * U * fabs(t[1]));
    e[2] = 2 * ((2 * U + 2 * U * fabs(log(w / q[2]))) / a->var_wh + U * fabs(t[2]));
    e[3] = 2 * ((2 * U + 2 * U * fabs(log(h / q[3]))) / a->var_wh + U * fabs(t[3]));
}

/* One prior's term of the loss (times N): CE if counted, w * smooth-L1 if positive. */
static double term_d(const mpx_multibox_attr *a, const float *x, int c, const float *l,
                     const double *lt, int32_t t) {
    double s = t >= 0 ? ce_d(x, c, t) : 0;
    if (t >= 1)
        for (int k = 0; k < 4; k++) s += a->loc_weight * sl1_d((double)l[k] - lt[k]);
    return s;
}

/* CE of a double row of logits with x_j moved by dx. */
static double ce_moved(const double *x, int c, int t, int j, double dx) {
    double mx = -INFINITY, s = 0;
    for (int q = 0; q < c; q++) mx = fmax(mx, x[q] + (q == j ? dx : 0));
    for (int q = 0; q < c; q++) s += exp(x[q] + (q == j ? dx : 0) - mx);
    return log(s) + mx - (x[t] + (t == j ? dx : 0));
}

/* Smooth-L1 over the 4 offsets of a prior with l_k moved by dx. */
static double sl1_moved(const float *l, const double *lt, int k, double dx) {
    double s = 0;
    for (int q = 0; q < 4; q++) s += sl1_d((double)l[q] + (q == k ? dx : 0) - lt[q]);
    return s;
}

static void ref_forward(const mpx_multibox_attr *a, const problem *pb, reference *r) {
    const int p = pb->p, c = pb->c, g = pb->g;
    char *sel = malloc(p);
    double *bg = malloc(sizeof(double) * p), sum = 0;
    r->n = 0, r->min_thr_gap = INFINITY, r->min_cut_gap = INFINITY;
    for (int b = 0; b < pb->b; b++) {
        int *match = r->match + (size_t)b * p;
        ref_match(pb, b, a->iou_threshold, match, r);
        int32_t *tg = r->tgt + (size_t)b * p;
        double *lt = r->lt + (size_t)b * p * 4;
        const float *x = pb->conf + (size_t)b * p * c;
        int npos = 0, nneg = 0;
        for (int i = 0; i < p; i++) {
            sel[i] = 0;
            if (match[i] < 0) {
                tg[i] = -1, lt[4 * i] = lt[4 * i + 1] = lt[4 * i + 2] = lt[4 * i + 3] = 0;
                bg[i] = ce_d(x + (size_t)i * c, c, 0), nneg++;
                continue;
            }
            tg[i] = pb->lab[b * g + match[i]], npos++;
            encode_d(pb->pri + 4 * i, pb->gt + ((size_t)b * g + match[i]) * 4, a, lt + 4 * i);
        }
        int want = a->neg_per_pos * npos > a->min_neg ? a->neg_per_pos * npos : a->min_neg;
        int k = want < nneg ? want : nneg;
        double last = INFINITY;
        for (int s = 0; s < k; s++) {
            int pick = -1;
            for (int i = 0; i < p; i++)
                if (tg[i] < 0 && !sel[i] && (pick < 0 || bg[i] > bg[pick])) pick = i;
            sel[pick] = 1, tg[pick] = 0, last = bg[pick];
        }
        for (int i = 0; k > 0 && i < p; i++)
            if (tg[i] < 0 && last - bg[i] < r->min_cut_gap) r->min_cut_gap = last - bg[i];
        r->n += npos;
        for (int i = 0; i < p; i++)
            sum += term_d(a, x + (size_t)i * c, c, pb->loc + ((size_t)b * p + i) * 4, lt + 4 * i,
                          tg[i]);
    }
    r->loss = r->n ? sum / r->n : 0;
    free(sel), free(bg);
}

/* ---- problems ---- */

/* Priors of a configuration into a fresh array; returns P. */
static int make_priors(const mpx_ssd_priors_cfg *cfg, float **out) {
    int64_t n = 0;
    CHECK_OK(mpx_ssd_prior_count(cfg, &n));
    *out = malloc(sizeof(float) * 4 * n);
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 2, {n, 4}, *out};
    CHECK_OK(mpx_ssd_priors(cfg, &t));
    return (int)n;
}

/* Random objects (n_obj[b] per image, the rest padding with NaN boxes, which must never be
 * read), logits N(0, conf_std) and offsets N(0, 1.5). */
static problem make_problem(const mpx_ssd_priors_cfg *cfg, int b, int c, int g, const int *n_obj,
                            float conf_std, uint64_t seed) {
    problem pb = {.b = b, .c = c, .g = g};
    pb.p = make_priors(cfg, &pb.pri);
    const int p = pb.p;
    pb.conf = malloc(sizeof(float) * b * p * c);
    pb.loc = malloc(sizeof(float) * b * p * 4);
    pb.gt = malloc(sizeof(float) * b * g * 4);
    pb.lab = malloc(sizeof(int32_t) * b * g);
    if (conf_std > 0)
        mpx_test_normal(pb.conf, (size_t)b * p * c, 0, conf_std, seed);
    else
        memset(pb.conf, 0, sizeof(float) * b * p * c);
    mpx_test_normal(pb.loc, (size_t)b * p * 4, 0, 1.5f, seed + 1);
    for (int i = 0; i < b * g; i++) {
        float r[4];
        float *box = pb.gt + 4 * i;
        if (i % g >= n_obj[i / g]) {
            pb.lab[i] = -1;
            box[0] = box[1] = box[2] = box[3] = NAN;
            continue;
        }
        mpx_test_uniform(r, 4, 0, 1, seed * 1000 + 7 + i);
        float cx = 0.1f + 0.8f * r[0], cy = 0.1f + 0.8f * r[1];
        float w = 0.05f + 0.6f * r[2], h = 0.05f + 0.6f * r[3];
        box[0] = fmaxf(cx - w / 2, 0), box[1] = fmaxf(cy - h / 2, 0);
        box[2] = fminf(cx + w / 2, 1), box[3] = fminf(cy + h / 2, 1);
        pb.lab[i] = 1 + (int32_t)(mpx_rand_u32(seed, MPX_RNG_TEST, 5000 + i) % (uint32_t)(c - 1));
    }
    return pb;
}

static void free_problem(problem *pb) {
    free(pb->conf), free(pb->loc), free(pb->pri), free(pb->gt), free(pb->lab);
}

/* The op's outputs and gradients for one problem. */
typedef struct {
    float loss, *probs, *lt, *dconf, *dloc;
    int32_t *tgt;
    unsigned char *ws;
} result;

static void run_op(const mpx_multibox_attr *a, const problem *pb, result *o) {
    const int b = pb->b, p = pb->p, c = pb->c, g = pb->g;
    size_t wsb = mpx_multibox_workspace_bytes(b, p, g);
    o->probs = malloc(sizeof(float) * b * p * c), o->dconf = malloc(sizeof(float) * b * p * c);
    o->lt = malloc(sizeof(float) * b * p * 4), o->dloc = malloc(sizeof(float) * b * p * 4);
    o->tgt = malloc(sizeof(int32_t) * b * p);
    o->ws = malloc(wsb);
    /* NaN everywhere: every output element must be written. */
    memset(o->probs, 0xff, sizeof(float) * b * p * c),
        memset(o->dconf, 0xff, sizeof(float) * b * p * c);
    memset(o->lt, 0xff, sizeof(float) * b * p * 4),
        memset(o->dloc, 0xff, sizeof(float) * b * p * 4);
    memset(o->tgt, 0x7f, sizeof(int32_t) * b * p), memset(o->ws, 0xab, wsb);
    o->loss = NAN;
    mpx_tensor conf = {MPX_F32, MPX_DEV_CPU, 3, {b, p, c}, pb->conf}, probs = conf, dconf = conf;
    probs.data = o->probs, dconf.data = o->dconf;
    mpx_tensor loc = {MPX_F32, MPX_DEV_CPU, 3, {b, p, 4}, pb->loc}, lt = loc, dloc = loc;
    lt.data = o->lt, dloc.data = o->dloc;
    mpx_tensor pri = {MPX_F32, MPX_DEV_CPU, 2, {p, 4}, pb->pri};
    mpx_tensor gt = {MPX_F32, MPX_DEV_CPU, 3, {b, g, 4}, pb->gt};
    mpx_tensor lab = {MPX_I32, MPX_DEV_CPU, 2, {b, g}, pb->lab};
    mpx_tensor tgt = {MPX_I32, MPX_DEV_CPU, 2, {b, p}, o->tgt};
    mpx_tensor ws = {MPX_U8, MPX_DEV_CPU, 1, {(int64_t)wsb}, o->ws};
    mpx_tensor loss = {MPX_F32, MPX_DEV_CPU, 1, {1}, &o->loss};
    CHECK_OK(
        mpx_multibox_forward_cpu(a, &conf, &loc, &pri, &gt, &lab, &ws, &loss, &probs, &tgt, &lt));
    CHECK_OK(mpx_multibox_backward_cpu(a, &probs, &tgt, &loc, &lt, &dconf, &dloc));
}

static void free_result(result *o) {
    free(o->probs), free(o->lt), free(o->dconf), free(o->dloc), free(o->tgt), free(o->ws);
}

/* Everything the op produces against the reference; returns the reference positives N. */
static int64_t check_problem(const mpx_multibox_attr *a, const problem *pb, const char *tag) {
    const int b = pb->b, p = pb->p, c = pb->c, g = pb->g;
    reference r = {.tgt = malloc(sizeof(int32_t) * b * p),
                   .match = malloc(sizeof(int) * b * p),
                   .lt = malloc(sizeof(double) * b * p * 4)};
    ref_forward(a, pb, &r);
    CHECK(r.min_thr_gap > 1e-6, "%s: data sanity: an IoU lies %.3g from the threshold", tag,
          r.min_thr_gap);
    CHECK(r.min_cut_gap == 0 || r.min_cut_gap > 1e-5,
          "%s: data sanity: the mining cut is %.3g from the next candidate", tag, r.min_cut_gap);
    result o;
    run_op(a, pb, &o);

    int bad_tgt = 0;
    for (int i = 0; i < b * p; i++) bad_tgt += o.tgt[i] != r.tgt[i];
    CHECK(bad_tgt == 0, "%s: %d of %d targets differ from the reference", tag, bad_tgt, b * p);

    const double n = (double)r.n, w = a->loc_weight;
    double ltol = 0, wp = 0, wlt = 0, wdc = 0, wdl = 0;
    int n_quad = 0, n_lin = 0, near_kink = 0;
    const double h = 1e-5; /* the finite-difference step */
    double *xd = malloc(sizeof(double) * c);
    for (int bi = 0; bi < b; bi++)
        for (int i = 0; i < p; i++) {
            const int64_t row = (int64_t)bi * p + i;
            const float *x = pb->conf + row * c, *l = pb->loc + row * 4;
            const int32_t t = r.tgt[row];
            const double *lt = r.lt + row * 4;
            double mx = x[0], mn = x[0], s = 0;
            for (int j = 1; j < c; j++) mx = fmax(mx, x[j]), mn = fmin(mn, x[j]);
            for (int j = 0; j < c; j++) s += exp(x[j] - mx), xd[j] = x[j];
            const double R = mx - mn;
            if (t >= 0) ltol += U * (3 + 2 * R);
            /* probs and dconf; uncounted priors (and N = 0) must have an exact 0 gradient */
            for (int j = 0; j < c; j++) {
                double pr = exp(x[j] - mx) / s;
                double tolp = U * pr * (6 + fabs(x[j] - mx) + R) + 1e-45;
                double e = fabs(o.probs[row * c + j] - pr) / tolp;
                if (!(e <= wp)) wp = e;
                double dc = o.dconf[row * c + j];
                if (t < 0 || n == 0) {
                    e = dc == 0 ? 0 : INFINITY;
                } else {
                    double fd =
                        (ce_moved(xd, c, t, j, h) - ce_moved(xd, c, t, j, -h)) / (2 * h) / n;
                    double tol = (tolp + 2 * U * fabs(pr - (t == j))) / n + 2e-9 * (1 + w) / n;
                    e = fabs(dc - fd) / tol;
                }
                if (!(e <= wdc)) wdc = e;
            }
            /* loc_target (0 off the positives) and dloc */
            double et[4] = {0, 0, 0, 0};
            if (t >= 1)
                encode_tol(pb->pri + 4 * i, pb->gt + ((size_t)bi * g + r.match[row]) * 4, a, et);
            for (int k = 0; k < 4; k++) {
                double e = t >= 1 ? fabs(o.lt[row * 4 + k] - lt[k]) / et[k]
                                  : (o.lt[row * 4 + k] == 0 ? 0 : INFINITY);
                if (!(e <= wlt)) wlt = e;
                double d = (double)l[k] - lt[k], dl = o.dloc[row * 4 + k];
                if (t < 1 || n == 0) {
                    e = dl == 0 ? 0 : INFINITY;
                } else {
                    ltol += w * et[k];
                    n_quad += fabs(d) < 1, n_lin += fabs(d) >= 1;
                    near_kink += fabs(fabs(d) - 1) < 1e-4;
                    double fd =
                        w * (sl1_moved(l, lt, k, h) - sl1_moved(l, lt, k, -h)) / (2 * h) / n;
                    double tol =
                        w * (et[k] + U * fabs(d)) / n + 2 * U * fabs(fd) + 2e-9 * (1 + w) / n;
                    e = fabs(dl - fd) / tol;
                }
                if (!(e <= wdl)) wdl = e;
            }
        }
    ltol = r.n ? ltol / n + U * fabs(r.loss) : 0;
    CHECK(r.n ? fabs(o.loss - r.loss) <= ltol : o.loss == 0,
          "%s: loss %.9g vs reference %.9g (tolerance %.3g, N = %lld)", tag, o.loss, r.loss, ltol,
          (long long)r.n);
    CHECK(wp <= 1, "%s: probs %.3g x tolerance", tag, wp);
    CHECK(wlt <= 1, "%s: loc_target %.3g x tolerance", tag, wlt);
    CHECK(wdc <= 1, "%s: dconf vs finite differences %.3g x tolerance", tag, wdc);
    CHECK(wdl <= 1, "%s: dloc vs finite differences %.3g x tolerance", tag, wdl);
    CHECK(near_kink == 0, "%s: data sanity: %d offsets within 1e-4 of the smooth-L1 kink", tag,
          near_kink);
    if (r.n)
        CHECK(n_quad > 0 && n_lin > 0, "%s: smooth-L1 branches: %d quadratic, %d linear", tag,
              n_quad, n_lin);
    free(xd), free(r.tgt), free(r.match), free(r.lt);
    free_result(&o);
    return r.n;
}

/* ---- cases ---- */

static const mpx_ssd_priors_cfg SMALL = {
    .n_maps = 3, .size = {4, 2, 1}, .ratio3 = {0, 1, 0}, .s_min = 0.2f, .s_max = 0.9f};

static void check_random(void) {
    mpx_multibox_attr a = mpx_multibox_defaults();
    const int n_obj[3] = {3, 1, 0};
    problem pb = make_problem(&SMALL, 3, 5, 4, n_obj, 2.0f, 11);
    int64_t n = check_problem(&a, &pb, "small, defaults");
    CHECK(n > 0, "small: no positives (the case must have some)");

    /* Other attributes: looser threshold, 1 negative per positive, at least 10, loc weight 2,
     * other variances. */
    a.iou_threshold = 0.4f, a.neg_per_pos = 1, a.min_neg = 10, a.loc_weight = 2.0f;
    a.var_xy = 0.2f, a.var_wh = 0.5f;
    check_problem(&a, &pb, "small, other attributes");
    free_problem(&pb);
}

/* All logits 0: every background loss is log C, so mining is decided by the tie rule alone:
 * the kept negatives are the lowest-index non-positive priors. */
static void check_ties(void) {
    mpx_multibox_attr a = mpx_multibox_defaults();
    const int n_obj[2] = {2, 0};
    problem pb = make_problem(&SMALL, 2, 4, 3, n_obj, 0.0f, 12);
    check_problem(&a, &pb, "tied logits");
    result o;
    run_op(&a, &pb, &o);
    for (int b = 0; b < 2; b++) {
        const int32_t *t = o.tgt + b * pb.p;
        int npos = 0, kept = 0, seen_unkept = 0, order_ok = 1;
        for (int i = 0; i < pb.p; i++) {
            npos += t[i] >= 1;
            if (t[i] == 0) kept++, order_ok &= !seen_unkept;
            if (t[i] == -1) seen_unkept = 1;
        }
        int want = 3 * npos > 3 ? 3 * npos : 3;
        CHECK(kept == want && order_ok,
              "tied logits, image %d: %d negatives kept (want %d), lowest indices first: %d", b,
              kept, want, order_ok);
    }
    free_result(&o);
    free_problem(&pb);
}

/* No object anywhere: N = 0, so the loss is 0 and every gradient 0 (no 0/0), while each image
 * still keeps min_neg negatives. */
static void check_no_objects(void) {
    mpx_multibox_attr a = mpx_multibox_defaults();
    a.min_neg = 5;
    const int n_obj[2] = {0, 0};
    problem pb = make_problem(&SMALL, 2, 3, 2, n_obj, 2.0f, 13);
    check_problem(&a, &pb, "no objects");
    result o;
    run_op(&a, &pb, &o);
    int kept[2] = {0, 0}, pos = 0, nonzero = 0, nonfinite = 0;
    for (int i = 0; i < 2 * pb.p; i++) {
        kept[i / pb.p] += o.tgt[i] == 0, pos += o.tgt[i] >= 1;
        for (int j = 0; j < 3; j++)
            nonzero += o.dconf[i * 3 + j] != 0, nonfinite += !isfinite(o.probs[i * 3 + j]);
        for (int k = 0; k < 4; k++) nonzero += o.dloc[i * 4 + k] != 0;
    }
    CHECK(o.loss == 0 && nonzero == 0 && nonfinite == 0 && pos == 0,
          "no objects: loss %g, %d nonzero gradients, %d non-finite probs, %d positives", o.loss,
          nonzero, nonfinite, pos);
    CHECK(kept[0] == 5 && kept[1] == 5, "no objects: kept %d and %d negatives, want min_neg = 5",
          kept[0], kept[1]);
    free_result(&o);
    free_problem(&pb);
}

/* SSD300's 8732 priors, 21 classes, 4 images: the OpenMP path; and the same bits with 1 and 2
 * threads. */
static void check_ssd300(void) {
    const mpx_ssd_priors_cfg cfg = {.n_maps = 6,
                                    .size = {38, 19, 10, 5, 3, 1},
                                    .ratio3 = {0, 1, 1, 1, 0, 0},
                                    .s_min = 0.2f,
                                    .s_max = 0.9f};
    mpx_multibox_attr a = mpx_multibox_defaults();
    const int n_obj[4] = {6, 3, 1, 0};
    problem pb = make_problem(&cfg, 4, 21, 6, n_obj, 2.0f, 14);
    check_problem(&a, &pb, "SSD300");
    result r2, r1;
    mpx_threads_set(2);
    run_op(&a, &pb, &r2);
    mpx_threads_set(1);
    run_op(&a, &pb, &r1);
    mpx_threads_set(2);
    const size_t bpc = sizeof(float) * 4 * pb.p * 21, bp4 = sizeof(float) * 4 * pb.p * 4;
    CHECK(!memcmp(&r1.loss, &r2.loss, sizeof r1.loss) && !memcmp(r1.probs, r2.probs, bpc) &&
              !memcmp(r1.dconf, r2.dconf, bpc) && !memcmp(r1.dloc, r2.dloc, bp4) &&
              !memcmp(r1.lt, r2.lt, bp4) && !memcmp(r1.tgt, r2.tgt, sizeof(int32_t) * 4 * pb.p),
          "SSD300: 1 and 2 threads differ (loss %.9g vs %.9g)", r1.loss, r2.loss);
    free_result(&r1), free_result(&r2);
    free_problem(&pb);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    const mpx_multibox_attr a = mpx_multibox_defaults();
    const int n_obj[2] = {2, 1};
    problem pb = make_problem(&SMALL, 2, 3, 2, n_obj, 1.0f, 15);
    const int p = pb.p;
    size_t wsb = mpx_multibox_workspace_bytes(2, p, 2);
    float *probs = malloc(sizeof(float) * 2 * p * 3), *lt = malloc(sizeof(float) * 2 * p * 4);
    float *dconf = malloc(sizeof(float) * 2 * p * 3), *dloc = malloc(sizeof(float) * 2 * p * 4);
    int32_t *tgt = malloc(sizeof(int32_t) * 2 * p);
    double *wsd = malloc(wsb + 8); /* 8-byte aligned */
    float loss;
    mpx_tensor conf = {MPX_F32, MPX_DEV_CPU, 3, {2, p, 3}, pb.conf}, tp = conf, tdc = conf;
    tp.data = probs, tdc.data = dconf;
    mpx_tensor loc = {MPX_F32, MPX_DEV_CPU, 3, {2, p, 4}, pb.loc}, tlt = loc, tdl = loc;
    tlt.data = lt, tdl.data = dloc;
    mpx_tensor pri = {MPX_F32, MPX_DEV_CPU, 2, {p, 4}, pb.pri};
    mpx_tensor gt = {MPX_F32, MPX_DEV_CPU, 3, {2, 2, 4}, pb.gt};
    mpx_tensor lab = {MPX_I32, MPX_DEV_CPU, 2, {2, 2}, pb.lab};
    mpx_tensor tt = {MPX_I32, MPX_DEV_CPU, 2, {2, p}, tgt};
    mpx_tensor ws = {MPX_U8, MPX_DEV_CPU, 1, {(int64_t)wsb}, wsd};
    mpx_tensor tl = {MPX_F32, MPX_DEV_CPU, 1, {1}, &loss};
    CHECK_OK(mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &lab, &ws, &tl, &tp, &tt, &tlt));

    mpx_tensor t = ws;
    t.shape[0] = (int64_t)wsb - 1;
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &lab, &t, &tl, &tp, &tt, &tlt),
        "workspace has", "short workspace");
    t = ws;
    t.data = (char *)wsd + 4;
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &lab, &t, &tl, &tp, &tt, &tlt),
        "aligned to 8", "misaligned workspace");
    int32_t save = pb.lab[3];
    pb.lab[3] = 3; /* C = 3: classes 1..2 */
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &lab, &ws, &tl, &tp, &tt, &tlt),
        "gt_labels[1,1] = 3", "label == C");
    pb.lab[3] = 0;
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &lab, &ws, &tl, &tp, &tt, &tlt),
        "gt_labels[1,1] = 0", "label 0 (background)");
    pb.lab[3] = save;
    float x0 = pb.gt[0];
    pb.gt[0] = pb.gt[2];
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &lab, &ws, &tl, &tp, &tt, &tlt),
        "gt_boxes[0,0]", "empty box");
    pb.gt[0] = x0;
    t = pri;
    t.shape[0] = p - 1;
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &t, &gt, &lab, &ws, &tl, &tp, &tt, &tlt),
        "priors has shape", "priors of another P");
    t = lab;
    t.shape[1] = 1;
    expect_input_error(
        mpx_multibox_forward_cpu(&a, &conf, &loc, &pri, &gt, &t, &ws, &tl, &tp, &tt, &tlt),
        "gt_labels has shape [2,1]", "labels of another G");
    mpx_multibox_attr bad = a;
    bad.neg_per_pos = -1;
    expect_input_error(
        mpx_multibox_forward_cpu(&bad, &conf, &loc, &pri, &gt, &lab, &ws, &tl, &tp, &tt, &tlt),
        "neg_per_pos = -1", "negative ratio");

    CHECK_OK(mpx_multibox_backward_cpu(&a, &tp, &tt, &loc, &tlt, &tdc, &tdl));
    tgt[p + 5] = 3;
    expect_input_error(mpx_multibox_backward_cpu(&a, &tp, &tt, &loc, &tlt, &tdc, &tdl),
                       "target[1,5] = 3", "target == C in backward");
    tgt[p + 5] = -1;
    t = tdl;
    t.shape[2] = 3;
    expect_input_error(mpx_multibox_backward_cpu(&a, &tp, &tt, &loc, &tlt, &tdc, &t),
                       "dloc has shape", "dloc of another shape");
    free(probs), free(lt), free(dconf), free(dloc), free(tgt), free(wsd);
    free_problem(&pb);
}

int main(void) {
    mpx_threads_set(2);
    check_random();
    check_ties();
    check_no_objects();
    check_ssd300();
    check_errors();
    return mpx_test_done(__FILE__);
}
