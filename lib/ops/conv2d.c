/* conv2d.c — 2D convolution on the CPU: oneDNN primitives (forward, backward data, backward
 * weights), and 1x1 stride-1 convolutions as one GEMM where that measures faster.
 *
 * Shapes: x [N,H,W,C] (dnnl_nhwc), w [KH,KW,C,K] (dnnl_hwio), b [K], y [N,OH,OW,K].
 * oneDNN's logical dims are {N,C,H,W} for activations and {K,C,KH,KW} for weights; the format
 * tag maps them onto our layouts, so no user tensor is ever copied.
 *
 * Each distinct (shape, stride, padding, bias, weights layout) gets one entry in the context's
 * cache, created on first use and kept until mpx_conv2d_cache_clear(): the primitive
 * descriptors, primitives,
 * memory objects (their data pointers are swapped in per call), the weights buffer in oneDNN's
 * preferred layout with its reorders, and user-mode scratchpads, so a training step allocates
 * no buffers here after its first iteration. One mutex guards the cache and is held while a
 * cached entry executes (its scratch buffers are shared); the parallelism is inside oneDNN.
 *
 * Which implementation (conv_pick_impl): oneDNN on the weights layout it prefers (blocked),
 * with the reorders in every call; one sgemm for 1x1 stride-1 unpadded convolutions at small
 * spatial sizes (H*W <= 49), where oneDNN's 1x1 kernels lose efficiency; oneDNN on plain HWIO
 * weights below 8 input or output channels, where oneDNN 2.6.3's blocked kernels corrupted the
 * heap on an AVX2 CPU. The measurements: results/reference/bench.md, "Convolution rule".
 */
#include <limits.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

/* ---- geometry and validation ---- */

typedef struct {
    int n, h, w, c, k, kh, kw, oh, ow;
} conv_geom;

static const char *const g_pass_name[3] = {"conv2d forward", "conv2d backward-data",
                                           "conv2d backward-weights"};

/* Validates an activation-like tensor `xn` [N,H,W,C], weights-like `wn` [KH,KW,C,K], output-like
 * `yn` [N,OH,OW,K] and optional bias-like `bn` [K], and fills g. */
static mpx_status conv_check(const char *op, const mpx_conv2d_attr *a, const char *xn,
                             const mpx_tensor *x, const char *wn, const mpx_tensor *w,
                             const char *yn, const mpx_tensor *y, const char *bn,
                             const mpx_tensor *b, conv_geom *g) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (a->stride_h < 1 || a->stride_w < 1 || a->pad_h < 0 || a->pad_w < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s: stride %dx%d must be >= 1 and pad %dx%d >= 0", op,
                        a->stride_h, a->stride_w, a->pad_h, a->pad_w);
    MPX_TRY(ops_expect_float(op, xn, x, 4));
    MPX_TRY(ops_expect_float(op, wn, w, 4));
    MPX_TRY(ops_expect_float(op, yn, y, 4));
    for (int i = 0; i < 4; i++)
        if (x->shape[i] > 1 << 30 || w->shape[i] > 1 << 30)
            return mpx_fail(MPX_ERR_INPUT, "%s: dimension %d of %s or %s exceeds 2^30", op, i, xn,
                            wn);
    g->n = (int)x->shape[0], g->h = (int)x->shape[1], g->w = (int)x->shape[2];
    g->c = (int)x->shape[3];
    g->kh = (int)w->shape[0], g->kw = (int)w->shape[1], g->k = (int)w->shape[3];
    MPX_TRY(ops_expect_dim(op, wn, w, 2, g->c, "C of the activations"));
    if (g->h + 2 * a->pad_h < g->kh || g->w + 2 * a->pad_w < g->kw) {
        char bx[64], bw[64];
        return mpx_fail(MPX_ERR_INPUT, "%s: kernel %dx%d of %s %s is larger than %s %s padded by %dx%d",
                        op, g->kh, g->kw, wn, mpx_shape_str(4, w->shape, bw, sizeof bw), xn,
                        mpx_shape_str(4, x->shape, bx, sizeof bx), a->pad_h, a->pad_w);
    }
    g->oh = (g->h + 2 * a->pad_h - g->kh) / a->stride_h + 1;
    g->ow = (g->w + 2 * a->pad_w - g->kw) / a->stride_w + 1;
    MPX_TRY(ops_expect_dim(op, yn, y, 0, g->n, "N of the activations"));
    MPX_TRY(ops_expect_dim(op, yn, y, 1, g->oh, "OH = (H + 2*pad_h - KH) / stride_h + 1"));
    MPX_TRY(ops_expect_dim(op, yn, y, 2, g->ow, "OW = (W + 2*pad_w - KW) / stride_w + 1"));
    MPX_TRY(ops_expect_dim(op, yn, y, 3, g->k, "K of the weights"));
    if (b) {
        MPX_TRY(ops_expect_float(op, bn, b, 1));
        MPX_TRY(ops_expect_dim(op, bn, b, 0, g->k, "K of the weights"));
    }
    return MPX_OK;
}

/* ---- implementation choice ---- */

void mpx_conv2d_force(mpx_cpu_ctx *ctx, mpx_conv2d_impl impl) { ctx->conv_force = impl; }

static int conv_is_gemm_shape(const mpx_conv2d_attr *a, const conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && a->stride_h == 1 && a->stride_w == 1 && a->pad_h == 0 &&
           a->pad_w == 0 && (int64_t)g->n * g->h * g->w <= INT_MAX; /* the GEMM's int M */
}

/* MPX_CONV_SGEMM, MPX_CONV_ONEDNN_HWIO or MPX_CONV_ONEDNN_ANY for this call. */
static mpx_conv2d_impl conv_pick_impl(const mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a,
                                      const conv_geom *g) {
    mpx_conv2d_impl f = ctx->conv_force;
    if (f == MPX_CONV_SGEMM && !conv_is_gemm_shape(a, g)) f = MPX_CONV_AUTO;
    if (f != MPX_CONV_AUTO) return f;
    if (conv_is_gemm_shape(a, g) && g->h * g->w <= 49) return MPX_CONV_SGEMM;
    if (g->c < 8 || g->k < 8) return MPX_CONV_ONEDNN_HWIO;
    return MPX_CONV_ONEDNN_ANY;
}

/* ---- oneDNN: the primitive cache (in the context's ops_dnnl) ---- */

typedef struct {
    int n, h, w, c, k, kh, kw, sh, sw, ph, pw, bias, wany;
    int lowp; /* 0: FP32 operands; else the dnnl data type of the 16-bit operands */
} conv_key;

/* One pass (forward, backward data or backward weights) of one cached shape. */
typedef struct {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t x;        /* src or diff_src, [N,H,W,C] */
    dnnl_memory_t y;        /* dst or diff_dst, [N,OH,OW,K] */
    dnnl_memory_t w_user;   /* the caller's HWIO weights (or weight gradient) */
    dnnl_memory_t w_prim;   /* owned buffer in the primitive's layout; NULL when it is HWIO */
    dnnl_memory_t bias;     /* bias or diff_bias; NULL without bias */
    dnnl_memory_t scratch;  /* user-mode scratchpad; NULL when the primitive needs none */
    dnnl_primitive_t reorder;
    dnnl_memory_t reorder_scratch;
    char wfmt[48];          /* the primitive's weights layout, e.g. "Acdb16a" */
} conv_pass_state;

typedef struct conv_entry {
    conv_key key;
    conv_pass_state pass[3];
    struct conv_entry *next;
} conv_entry;

static void pass_destroy(conv_pass_state *p) {
    if (p->reorder) dnnl_primitive_destroy(p->reorder);
    dnnl_memory_t mems[] = {p->x, p->y, p->w_user, p->w_prim, p->bias, p->scratch,
                            p->reorder_scratch};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

/* ops_dnnl's cache_free for the list of conv_entry. */
static void conv_cache_free(void *cache) {
    for (conv_entry *e = cache, *next; e; e = next) {
        next = e->next;
        for (int i = 2; i >= 0; i--) pass_destroy(&e->pass[i]);
        free(e);
    }
}

void mpx_conv2d_cache_clear(mpx_cpu_ctx *ctx) {
    pthread_mutex_lock(&ctx->conv.lock);
    ops_dnnl_release(&ctx->conv);
    pthread_mutex_unlock(&ctx->conv.lock);
}

static mpx_status dnnl_fail(int pass, const conv_key *k, const char *call, dnnl_status_t st) {
    return mpx_fail(MPX_ERR_BACKEND,
                    "%s x[%d,%d,%d,%d] w[%d,%d,%d,%d] stride %dx%d pad %dx%d: %s failed: %s",
                    g_pass_name[pass], k->n, k->h, k->w, k->c, k->kh, k->kw, k->c, k->k, k->sh,
                    k->sw, k->ph, k->pw, call, dnnl_status2str(st));
}

#define DNNL_TRY(pass, key, name, call)                                                            \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) return dnnl_fail((pass), (key), (name), st_);                    \
    } while (0)

/* "Acdb16a"-style name of a blocked layout (oneDNN's verbose notation: dims by decreasing
 * stride, upper case when also blocked, then the inner blocks). */
static void layout_name(const dnnl_memory_desc_t *md, char *buf, size_t cap) {
    if (md->format_kind != dnnl_blocked) {
        snprintf(buf, cap, "%s", dnnl_fmt_kind2str(md->format_kind));
        return;
    }
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    int order[DNNL_MAX_NDIMS], nd = md->ndims, used = 0;
    for (int i = 0; i < nd; i++) order[i] = i;
    for (int i = 1; i < nd; i++) /* insertion sort by decreasing outer stride (stable) */
        for (int j = i; j > 0 && bd->strides[order[j]] > bd->strides[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < nd && used + 1 < (int)cap; i++) {
        int blocked = 0;
        for (int j = 0; j < bd->inner_nblks; j++) blocked |= bd->inner_idxs[j] == order[i];
        buf[used++] = (char)((blocked ? 'A' : 'a') + order[i]);
    }
    buf[used] = '\0';
    for (int j = 0; j < bd->inner_nblks && used + 8 < (int)cap; j++)
        used += snprintf(buf + used, cap - used, "%lld%c", (long long)bd->inner_blks[j],
                         (int)('a' + bd->inner_idxs[j]));
}

/* The primitive for `pd`, with a user-mode scratchpad buffer of the size it asks for. */
static dnnl_status_t make_prim(dnnl_engine_t engine, dnnl_primitive_desc_t pd,
                               dnnl_primitive_t *prim, dnnl_memory_t *scratch) {
    dnnl_status_t st = dnnl_primitive_create(prim, pd);
    if (st != dnnl_success) return st;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0)
        st = dnnl_memory_create(scratch, smd, engine, DNNL_MEMORY_ALLOCATE);
    return st;
}

static dnnl_status_t user_scratch_attr(dnnl_primitive_attr_t *attr) {
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    return st;
}

/* Memory descriptors of one key, in oneDNN's logical dims. */
typedef struct {
    dnnl_memory_desc_t x, y, w_user, w_any, bias;
    dnnl_dims_t strides, pad_l, pad_r;
} conv_mds;

/* With 16-bit operands (k->lowp) the pass's inputs are 16-bit and its result FP32: forward
 * x, w -> y; backward data dy, w -> dx; backward weights x, dy -> dw (and the bias FP32). */
static dnnl_status_t conv_make_mds(const conv_key *k, int pass, conv_mds *m) {
    int oh = (k->h + 2 * k->ph - k->kh) / k->sh + 1, ow = (k->w + 2 * k->pw - k->kw) / k->sw + 1;
    dnnl_dims_t xd = {k->n, k->c, k->h, k->w}, yd = {k->n, k->k, oh, ow};
    dnnl_dims_t wd = {k->k, k->c, k->kh, k->kw}, bd = {k->k};
    const dnnl_data_type_t lo = k->lowp ? (dnnl_data_type_t)k->lowp : dnnl_f32;
    const dnnl_data_type_t xt = pass == MPX_CONV_BACKWARD_DATA ? dnnl_f32 : lo;
    const dnnl_data_type_t yt = pass == MPX_CONV_FORWARD ? dnnl_f32 : lo;
    const dnnl_data_type_t wt = pass == MPX_CONV_BACKWARD_WEIGHTS ? dnnl_f32 : lo;
    dnnl_status_t st;
    if ((st = dnnl_memory_desc_init_by_tag(&m->x, 4, xd, xt, dnnl_nhwc))) return st;
    if ((st = dnnl_memory_desc_init_by_tag(&m->y, 4, yd, yt, dnnl_nhwc))) return st;
    if ((st = dnnl_memory_desc_init_by_tag(&m->w_user, 4, wd, wt, dnnl_hwio))) return st;
    if ((st = dnnl_memory_desc_init_by_tag(&m->w_any, 4, wd, wt, dnnl_format_tag_any)))
        return st;
    if ((st = dnnl_memory_desc_init_by_tag(&m->bias, 1, bd, dnnl_f32, dnnl_a))) return st;
    m->strides[0] = k->sh, m->strides[1] = k->sw;
    /* Symmetric padding as in the OH formula; oneDNN accepts a right padding that the floor
     * division leaves partly unused. */
    m->pad_l[0] = m->pad_r[0] = k->ph;
    m->pad_l[1] = m->pad_r[1] = k->pw;
    return dnnl_success;
}

/* The forward primitive descriptor (also the hint for both backward passes). */
static mpx_status conv_fwd_pd(dnnl_engine_t engine, const conv_key *k, const conv_mds *m,
                              dnnl_primitive_desc_t *pd) {
    dnnl_convolution_desc_t d;
    DNNL_TRY(0, k, "dnnl_convolution_forward_desc_init",
             dnnl_convolution_forward_desc_init(&d, dnnl_forward_training, dnnl_convolution_direct,
                                                &m->x, k->wany ? &m->w_any : &m->w_user,
                                                k->bias ? &m->bias : NULL, &m->y, m->strides,
                                                m->pad_l, m->pad_r));
    dnnl_primitive_attr_t attr;
    DNNL_TRY(0, k, "dnnl_primitive_attr_create", user_scratch_attr(&attr));
    dnnl_status_t st = dnnl_primitive_desc_create(pd, &d, attr, engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    DNNL_TRY(0, k, "dnnl_primitive_desc_create", st);
    return MPX_OK;
}

/* Fills p for `pass` (p is zeroed; on failure the caller destroys the partial state). */
static mpx_status conv_pass_create(dnnl_engine_t engine, conv_entry *e, int pass,
                                   conv_pass_state *p) {
    const conv_key *k = &e->key;
    conv_mds m;
    DNNL_TRY(pass, k, "dnnl_memory_desc_init_by_tag", conv_make_mds(k, pass, &m));
    const dnnl_memory_desc_t *wmd = k->wany ? &m.w_any : &m.w_user;
    if (pass == MPX_CONV_FORWARD) {
        MPX_TRY(conv_fwd_pd(engine, k, &m, &p->pd));
    } else {
        dnnl_primitive_desc_t hint = e->pass[MPX_CONV_FORWARD].pd, own_hint = NULL;
        if (!hint) {
            conv_mds fm;
            DNNL_TRY(pass, k, "dnnl_memory_desc_init_by_tag",
                     conv_make_mds(k, MPX_CONV_FORWARD, &fm));
            MPX_TRY(conv_fwd_pd(engine, k, &fm, &own_hint));
            hint = own_hint;
        }
        dnnl_convolution_desc_t d;
        dnnl_status_t st =
            pass == MPX_CONV_BACKWARD_DATA
                ? dnnl_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &m.x, wmd,
                                                           &m.y, m.strides, m.pad_l, m.pad_r)
                : dnnl_convolution_backward_weights_desc_init(
                      &d, dnnl_convolution_direct, &m.x, wmd, k->bias ? &m.bias : NULL, &m.y,
                      m.strides, m.pad_l, m.pad_r);
        dnnl_primitive_attr_t attr = NULL;
        if (st == dnnl_success) st = user_scratch_attr(&attr);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&p->pd, &d, attr, engine, hint);
        if (attr) dnnl_primitive_attr_destroy(attr);
        if (own_hint) dnnl_primitive_desc_destroy(own_hint);
        DNNL_TRY(pass, k, "dnnl_primitive_desc_create", st);
    }
    DNNL_TRY(pass, k, "dnnl_primitive_create", make_prim(engine, p->pd, &p->prim, &p->scratch));

    DNNL_TRY(pass, k, "dnnl_memory_create",
             dnnl_memory_create(&p->x, &m.x, engine, DNNL_MEMORY_NONE));
    DNNL_TRY(pass, k, "dnnl_memory_create",
             dnnl_memory_create(&p->y, &m.y, engine, DNNL_MEMORY_NONE));
    DNNL_TRY(pass, k, "dnnl_memory_create",
             dnnl_memory_create(&p->w_user, &m.w_user, engine, DNNL_MEMORY_NONE));
    if (k->bias && pass != MPX_CONV_BACKWARD_DATA)
        DNNL_TRY(pass, k, "dnnl_memory_create",
                 dnnl_memory_create(&p->bias, &m.bias, engine, DNNL_MEMORY_NONE));

    /* The layout the primitive chose for the weights; a reorder when it is not HWIO. */
    const dnnl_memory_desc_t *chosen = dnnl_primitive_desc_query_md(
        p->pd, pass == MPX_CONV_BACKWARD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md,
        0);
    if (!chosen) return dnnl_fail(pass, k, "dnnl_primitive_desc_query_md", dnnl_runtime_error);
    layout_name(chosen, p->wfmt, sizeof p->wfmt);
    if (!dnnl_memory_desc_equal(chosen, &m.w_user)) {
        DNNL_TRY(pass, k, "dnnl_memory_create",
                 dnnl_memory_create(&p->w_prim, chosen, engine, DNNL_MEMORY_ALLOCATE));
        const dnnl_memory_desc_t *from = pass == MPX_CONV_BACKWARD_WEIGHTS ? chosen : &m.w_user;
        const dnnl_memory_desc_t *to = pass == MPX_CONV_BACKWARD_WEIGHTS ? &m.w_user : chosen;
        dnnl_primitive_attr_t attr;
        DNNL_TRY(pass, k, "dnnl_primitive_attr_create", user_scratch_attr(&attr));
        dnnl_primitive_desc_t rpd;
        dnnl_status_t st = dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, attr);
        dnnl_primitive_attr_destroy(attr);
        DNNL_TRY(pass, k, "dnnl_reorder_primitive_desc_create", st);
        st = make_prim(engine, rpd, &p->reorder, &p->reorder_scratch);
        dnnl_primitive_desc_destroy(rpd);
        DNNL_TRY(pass, k, "dnnl_primitive_create (weights reorder)", st);
    }
    return MPX_OK;
}

/* The cached state of `pass` for key k, created on first use. Called with d->lock held. */
static mpx_status conv_lookup(ops_dnnl *d, const conv_key *k, int pass, conv_pass_state **out) {
    DNNL_TRY(pass, k, "creating the oneDNN engine and stream", ops_dnnl_ready(d));
    conv_entry *e = d->cache;
    while (e && memcmp(&e->key, k, sizeof *k) != 0) e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for the primitive cache",
                                g_pass_name[pass]);
        e->key = *k;
        e->next = d->cache;
        d->cache = e;
        d->cache_free = conv_cache_free;
    }
    conv_pass_state *p = &e->pass[pass];
    if (!p->prim) {
        mpx_status s = conv_pass_create(d->engine, e, pass, p);
        if (s != MPX_OK) {
            pass_destroy(p);
            return s;
        }
    }
    *out = p;
    return MPX_OK;
}

static conv_key conv_make_key(const mpx_conv2d_attr *a, const conv_geom *g, int bias,
                              mpx_conv2d_impl impl, mpx_dtype lowp) {
    conv_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp */
    k.n = g->n, k.h = g->h, k.w = g->w, k.c = g->c, k.k = g->k, k.kh = g->kh, k.kw = g->kw;
    k.sh = a->stride_h, k.sw = a->stride_w, k.ph = a->pad_h, k.pw = a->pad_w;
    k.bias = bias;
    k.wany = impl == MPX_CONV_ONEDNN_ANY;
    k.lowp = lowp == MPX_BF16 ? (int)dnnl_bf16 : lowp == MPX_F16 ? (int)dnnl_f16 : 0;
    return k;
}

/* Runs `pass` through oneDNN. x: src / diff_src; y: dst / diff_dst; w: weights / diff weights;
 * b: bias / diff bias (NULL without). */
static mpx_status conv_run_dnnl(ops_dnnl *d, int pass, const conv_key *k, const void *x,
                                const void *y, const void *w, const void *b) {
    pthread_mutex_lock(&d->lock);
    conv_pass_state *p;
    mpx_status s = conv_lookup(d, k, pass, &p);
    if (s != MPX_OK) {
        pthread_mutex_unlock(&d->lock);
        return s;
    }
    dnnl_status_t st = dnnl_success;
    const char *call = "dnnl_memory_set_data_handle";
    /* The API takes void *; oneDNN never writes through an input argument. */
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(p->x, (void *)x);
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(p->y, (void *)y);
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(p->w_user, (void *)w);
    if (st == dnnl_success && p->bias) st = dnnl_memory_set_data_handle(p->bias, (void *)b);
    dnnl_memory_t wmem = p->w_prim ? p->w_prim : p->w_user;
    if (st == dnnl_success && p->reorder && pass != MPX_CONV_BACKWARD_WEIGHTS) {
        call = "dnnl_primitive_execute (weights reorder)";
        dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, p->w_user}, {DNNL_ARG_TO, p->w_prim},
                                {DNNL_ARG_SCRATCHPAD, p->reorder_scratch}};
        st = dnnl_primitive_execute(p->reorder, d->stream, p->reorder_scratch ? 3 : 2, ra);
    }
    if (st == dnnl_success) {
        call = "dnnl_primitive_execute";
        dnnl_exec_arg_t args[5];
        int na = 0;
        if (pass == MPX_CONV_FORWARD) {
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, p->x};
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wmem};
            if (p->bias) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bias};
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DST, p->y};
        } else if (pass == MPX_CONV_BACKWARD_DATA) {
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, p->y};
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wmem};
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, p->x};
        } else {
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, p->x};
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, p->y};
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, wmem};
            if (p->bias) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, p->bias};
        }
        if (p->scratch) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratch};
        st = dnnl_primitive_execute(p->prim, d->stream, na, args);
    }
    if (st == dnnl_success && p->reorder && pass == MPX_CONV_BACKWARD_WEIGHTS) {
        call = "dnnl_primitive_execute (weights reorder)";
        dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, p->w_prim}, {DNNL_ARG_TO, p->w_user},
                                {DNNL_ARG_SCRATCHPAD, p->reorder_scratch}};
        st = dnnl_primitive_execute(p->reorder, d->stream, p->reorder_scratch ? 3 : 2, ra);
    }
    if (st == dnnl_success) {
        call = "dnnl_stream_wait";
        st = dnnl_stream_wait(d->stream);
    }
    pthread_mutex_unlock(&d->lock);
    if (st != dnnl_success) return dnnl_fail(pass, k, call, st);
    return MPX_OK;
}

/* ---- public entry points ----
 * Tensors may be FP32 or 16-bit (linear.c says how they are taken): the pass runs on the two
 * inputs as they are when both are in a 16-bit format this CPU multiplies natively, else on
 * FP32 (decoded); its result is FP32, rounded into a 16-bit output's storage. */

/* The pass's two inputs in the format they are multiplied in; *lowp their 16-bit dtype (F32:
 * FP32 math). */
static mpx_status conv_inputs(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *a,
                              const mpx_tensor *b, const void **pa, const void **pb,
                              mpx_dtype *lowp) {
    if (ops_lowp_pair(ctx, a, b)) {
        *pa = a->data, *pb = b->data, *lowp = a->dtype;
        return MPX_OK;
    }
    const float *fa, *fb;
    MPX_TRY(ops_f32_of(ctx, op, a, OPS_SLOT_A, &fa));
    MPX_TRY(ops_f32_of(ctx, op, b, OPS_SLOT_B, &fb));
    *pa = fa, *pb = fb, *lowp = MPX_F32;
    return MPX_OK;
}

/* C[M,N] (FP32) = op(A) op(B) on operands of `lowp` (F32: FP32). */
static mpx_status conv_gemm(mpx_cpu_ctx *ctx, mpx_dtype lowp, int ta, int tb, int m, int n, int k,
                            const void *a, int lda, const void *b, int ldb, float *c, int ldc) {
    if (lowp == MPX_F32) {
        mpx_sgemm(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
        return MPX_OK;
    }
    return mpx_gemm_lowp(ctx, lowp, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, c, ldc);
}

mpx_status mpx_conv2d_forward_cpu(mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a, const mpx_tensor *x,
                                  const mpx_tensor *w, const mpx_tensor *b, mpx_tensor *y) {
    const char *op = g_pass_name[0];
    conv_geom g = {0};
    MPX_TRY(conv_check(op, a, "x", x, "w", w, "y", y, "b", b, &g));
    const void *xd, *wd;
    const float *bd;
    float *yd;
    mpx_dtype lowp;
    MPX_TRY(conv_inputs(ctx, op, x, w, &xd, &wd, &lowp));
    MPX_TRY(ops_f32_of(ctx, op, b, OPS_SLOT_BIAS, &bd));
    MPX_TRY(ops_result_begin(ctx, op, y, OPS_SLOT_OUT, &yd));
    mpx_conv2d_impl impl = conv_pick_impl(ctx, a, &g);
    if (impl == MPX_CONV_SGEMM) {
        const int64_t m = (int64_t)g.n * g.h * g.w;
        MPX_TRY(conv_gemm(ctx, lowp, 0, 0, (int)m, g.k, g.c, xd, g.c, wd, g.k, yd, g.k));
        if (bd) {
#pragma omp parallel for schedule(static) if (m * g.k >= OPS_PAR_MIN)
            for (int64_t i = 0; i < m; i++)
                for (int j = 0; j < g.k; j++) yd[i * g.k + j] += bd[j];
        }
    } else {
        conv_key k = conv_make_key(a, &g, b != NULL, impl, lowp);
        MPX_TRY(conv_run_dnnl(&ctx->conv, MPX_CONV_FORWARD, &k, xd, yd, wd, bd));
    }
    ops_result_end(y, yd);
    return MPX_OK;
}

mpx_status mpx_conv2d_backward_data_cpu(mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a,
                                        const mpx_tensor *dy, const mpx_tensor *w, mpx_tensor *dx) {
    const char *op = g_pass_name[1];
    conv_geom g = {0};
    MPX_TRY(conv_check(op, a, "dx", dx, "w", w, "dy", dy, NULL, NULL, &g));
    const void *dyd, *wd;
    float *dxd;
    mpx_dtype lowp;
    MPX_TRY(conv_inputs(ctx, op, dy, w, &dyd, &wd, &lowp));
    MPX_TRY(ops_result_begin(ctx, op, dx, OPS_SLOT_OUT, &dxd));
    mpx_conv2d_impl impl = conv_pick_impl(ctx, a, &g);
    if (impl == MPX_CONV_SGEMM) { /* dx[M,C] = dy[M,K] @ w[C,K]^T */
        const int m = (int)((int64_t)g.n * g.h * g.w);
        MPX_TRY(conv_gemm(ctx, lowp, 0, 1, m, g.c, g.k, dyd, g.k, wd, g.k, dxd, g.c));
    } else {
        conv_key k = conv_make_key(a, &g, 0, impl, lowp);
        MPX_TRY(conv_run_dnnl(&ctx->conv, MPX_CONV_BACKWARD_DATA, &k, dxd, dyd, wd, NULL));
    }
    ops_result_end(dx, dxd);
    return MPX_OK;
}

mpx_status mpx_conv2d_backward_weights_cpu(mpx_cpu_ctx *ctx, const mpx_conv2d_attr *a,
                                           const mpx_tensor *dy, const mpx_tensor *x,
                                           mpx_tensor *dw, mpx_tensor *db) {
    const char *op = g_pass_name[2];
    conv_geom g = {0};
    MPX_TRY(conv_check(op, a, "x", x, "dw", dw, "dy", dy, "db", db, &g));
    const void *dyd, *xd;
    float *dwd, *dbd;
    mpx_dtype lowp;
    MPX_TRY(conv_inputs(ctx, op, dy, x, &dyd, &xd, &lowp));
    MPX_TRY(ops_result_begin(ctx, op, dw, OPS_SLOT_OUT, &dwd));
    MPX_TRY(ops_result_begin(ctx, op, db, OPS_SLOT_OUT2, &dbd));
    mpx_conv2d_impl impl = conv_pick_impl(ctx, a, &g);
    if (impl == MPX_CONV_SGEMM) { /* dw[C,K] = x[M,C]^T @ dy[M,K]; db = column sums of dy */
        const int m = (int)((int64_t)g.n * g.h * g.w);
        MPX_TRY(conv_gemm(ctx, lowp, 1, 0, g.c, g.k, m, xd, g.c, dyd, g.k, dwd, g.k));
        if (dbd) {
            const float *dyf = dyd;
            if (lowp != MPX_F32)
                MPX_TRY(ops_f32_of(ctx, op, dy, OPS_SLOT_GEMM_A, &dyf));
            ops_column_sums(dyf, m, g.k, dbd);
        }
    } else {
        conv_key k = conv_make_key(a, &g, db != NULL, impl, lowp);
        MPX_TRY(conv_run_dnnl(&ctx->conv, MPX_CONV_BACKWARD_WEIGHTS, &k, xd, dyd, dwd, dbd));
    }
    ops_result_end(dw, dwd);
    ops_result_end(db, dbd);
    return MPX_OK;
}

mpx_status mpx_conv2d_describe(mpx_cpu_ctx *ctx, mpx_conv2d_pass pass, const mpx_conv2d_attr *a,
                               const mpx_tensor *x, const mpx_tensor *w, int with_bias, char *buf,
                               size_t cap) {
    if ((unsigned)pass > MPX_CONV_BACKWARD_WEIGHTS)
        return mpx_fail(MPX_ERR_INPUT, "conv2d describe: unknown pass %d", (int)pass);
    const char *op = g_pass_name[pass];
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, 4));
    MPX_TRY(ops_expect(op, "w", w, MPX_F32, 4));
    /* A shape-only output descriptor so that conv_check validates the geometry. */
    mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 4, {x->shape[0], 1, 1, w->shape[3]}, x->data};
    if (a && a->stride_h > 0 && a->stride_w > 0) {
        y.shape[1] = (x->shape[1] + 2 * a->pad_h - w->shape[0]) / a->stride_h + 1;
        y.shape[2] = (x->shape[2] + 2 * a->pad_w - w->shape[1]) / a->stride_w + 1;
    }
    conv_geom g = {0};
    MPX_TRY(conv_check(op, a, "x", x, "w", w, "y", &y, NULL, NULL, &g));
    mpx_conv2d_impl impl = conv_pick_impl(ctx, a, &g);
    if (impl == MPX_CONV_SGEMM) {
        int m = (int)((int64_t)g.n * g.h * g.w);
        const char *lib = pass == MPX_CONV_FORWARD ? mpx_sgemm_choice(ctx, 0, 0, m, g.k, g.c)
                          : pass == MPX_CONV_BACKWARD_DATA
                              ? mpx_sgemm_choice(ctx, 0, 1, m, g.c, g.k)
                              : mpx_sgemm_choice(ctx, 1, 0, g.c, g.k, m);
        snprintf(buf, cap, "sgemm %s", lib);
        return MPX_OK;
    }
    conv_key k = conv_make_key(a, &g, with_bias != 0, impl, MPX_F32);
    pthread_mutex_lock(&ctx->conv.lock);
    conv_pass_state *p;
    mpx_status s = conv_lookup(&ctx->conv, &k, pass, &p);
    if (s == MPX_OK) {
        const char *name = "?";
        dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &name);
        snprintf(buf, cap, "onednn %s weights %s%s", name, p->wfmt, p->reorder ? " (reorder)" : "");
    }
    pthread_mutex_unlock(&ctx->conv.lock);
    return s;
}
