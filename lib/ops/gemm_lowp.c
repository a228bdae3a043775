/* gemm_lowp.c — GEMMs on 16-bit operands (BF16, or F16 where oneDNN has it) with FP32
 * accumulation and an FP32 result, through oneDNN's matmul primitive; which 16-bit formats
 * this CPU and oneDNN multiply natively; the operand and result conversions the GEMM-family
 * ops share when they take 16-bit tensors (backend.h: op_direct_io).
 *
 * A product of two BF16 (or F16) values is exact in FP32, so these GEMMs compute what FP32 math
 * on the decoded operands computes, up to the order of the FP32 sums, and two hardware rules:
 * the BF16 dot-product instructions treat subnormal inputs (|x| < 2^-126) as zero and flush
 * subnormal partial sums to zero. Results are written in FP32 and rounded into 16-bit storage
 * by mpx_encode (RNE, subnormals kept), as the executor's cast would round them.
 *
 * One primitive per (format, transposes, sizes, leading dimensions, alpha), created on first use
 * and cached in the context until mpx_gemm_lowp_cache_clear (a graph has a few dozen shapes);
 * the context's lock guards the cache and is held while a cached primitive runs (it shares its
 * scratchpad).
 */
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "ops_internal.h"

typedef struct {
    int dt, ta, tb, m, n, k, lda, ldb, ldc;
    int64_t batch, sa, sb, sc; /* batch count and the element strides between batches */
    float alpha;
} mm_key;

typedef struct mm_entry {
    mm_key key;
    int ref; /* oneDNN has only its reference kernel for it: FP32 GEMM instead */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, scratch;
    struct mm_entry *next;
} mm_entry;

static dnnl_data_type_t dnnl_type(mpx_dtype t) { return t == MPX_F16 ? dnnl_f16 : dnnl_bf16; }

static void entry_free(mm_entry *e) {
    dnnl_memory_t mems[] = {e->a, e->b, e->c, e->scratch};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    free(e);
}

/* ops_dnnl's cache_free for the list of mm_entry. */
static void mm_cache_free(void *cache) {
    for (mm_entry *e = cache, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
}

void mpx_gemm_lowp_cache_clear(mpx_cpu_ctx *ctx) {
    pthread_mutex_lock(&ctx->mm.lock);
    ops_dnnl_release(&ctx->mm);
    pthread_mutex_unlock(&ctx->mm.lock);
}

/* The matmul primitive descriptor of key k (row-major operands by their leading dimensions). */
static dnnl_status_t mm_pd(dnnl_engine_t engine, const mm_key *k, dnnl_primitive_desc_t *pd) {
    const dnnl_data_type_t dt = k->dt;
    dnnl_memory_desc_t a, b, c;
    /* [batch,] rows, cols with the strides of row-major (or transposed) storage */
    dnnl_dims_t ad = {k->batch, k->m, k->k}, bd = {k->batch, k->k, k->n},
                cd = {k->batch, k->m, k->n};
    dnnl_dims_t as = {k->sa, k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t bs = {k->sb, k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t cs = {k->sc, k->ldc, 1};
    const int nd = k->batch > 1 ? 3 : 2, o = 3 - nd; /* 2 dims: skip the batch */
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&a, nd, ad + o, dt, as + o);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&b, nd, bd + o, dt, bs + o);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&c, nd, cd + o, dnnl_f32, cs + o);
    dnnl_matmul_desc_t d;
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&d, &a, &b, NULL, &c);
    dnnl_primitive_attr_t attr = NULL;
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && k->alpha != 1.0f)
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(pd, &d, attr, engine, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Whether oneDNN runs a matmul on `t` operands natively here: a primitive that is not the
 * reference implementation can be made for a small problem. Its name goes into `impl`. */
static int probe(ops_dnnl *d, mpx_dtype t, char *impl, size_t cap) {
    mm_key k = {(int)dnnl_type(t), 0, 0, 64, 64, 64, 64, 64, 64, 1, 0, 0, 0, 1.0f};
    dnnl_primitive_desc_t pd = NULL;
    snprintf(impl, cap, "no primitive");
    if (ops_dnnl_ready(d) != dnnl_success || mm_pd(d->engine, &k, &pd) != dnnl_success)
        return 0;
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    if (name) snprintf(impl, cap, "%s", name);
    const int native = name && !strstr(name, "ref");
    dnnl_primitive_desc_destroy(pd);
    return native;
}

/* Probes once per format and context, under the lock. */
static int probed(mpx_cpu_ctx *ctx, mpx_dtype t) {
    const int i = t == MPX_F16;
    pthread_mutex_lock(&ctx->mm.lock);
    if (ctx->lowp_native[i] < 0)
        ctx->lowp_native[i] = probe(&ctx->mm, t, ctx->lowp_impl[i], sizeof ctx->lowp_impl[i]);
    const int native = ctx->lowp_native[i];
    pthread_mutex_unlock(&ctx->mm.lock);
    return native;
}

int mpx_gemm_lowp_native(mpx_cpu_ctx *ctx, mpx_dtype t) {
    if (t != MPX_BF16 && t != MPX_F16) return 0;
    if (ctx->lowp_forced == 0)
        return 0;
    return probed(ctx, t);
}

const char *mpx_gemm_lowp_path(mpx_cpu_ctx *ctx, mpx_dtype t, char *buf, size_t cap) {
    if (t != MPX_BF16 && t != MPX_F16) {
        snprintf(buf, cap, "FP32 operands");
        return buf;
    }
    const int native = probed(ctx, t), i = t == MPX_F16;
    const char *impl = ctx->lowp_impl[i];
    const dnnl_version_t *v = dnnl_version();
    if (native && ctx->lowp_forced != 0)
        snprintf(buf, cap, "native (oneDNN %s, FP32 accumulation)", impl);
    else if (native)
        snprintf(buf, cap, "emulated (native %s turned off)", impl);
    else if (strcmp(impl, "no primitive") == 0)
        snprintf(buf, cap, "emulated (oneDNN %d.%d.%d has no %s matmul for this CPU)", v->major,
                 v->minor, v->patch, mpx_dtype_name(t));
    else
        snprintf(buf, cap, "emulated (oneDNN %d.%d.%d has only its reference %s matmul here: %s)",
                 v->major, v->minor, v->patch, mpx_dtype_name(t), impl);
    return buf;
}

void mpx_gemm_lowp_force(mpx_cpu_ctx *ctx, int on) { ctx->lowp_forced = on ? -1 : 0; }

static mpx_status fail(const mm_key *k, const char *what, dnnl_status_t st) {
    return mpx_fail(MPX_ERR_BACKEND, "16-bit GEMM %dx%dx%d (trans %d%d): %s failed: %d", k->m, k->n,
                    k->k, k->ta, k->tb, what, (int)st);
}

static mpx_status entry_create(dnnl_engine_t engine, const mm_key *k, mm_entry **out) {
    mm_entry *e = calloc(1, sizeof *e);
    if (!e) return mpx_fail(MPX_ERR_NOMEM, "out of memory for a 16-bit GEMM");
    e->key = *k;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = mm_pd(engine, k, &pd);
    const char *impl = NULL;
    if (st == dnnl_success) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    e->ref = !impl || strstr(impl, "ref") != NULL;
    if (st == dnnl_success && !e->ref) st = dnnl_primitive_create(&e->prim, pd);
    if (e->ref) {
        if (pd) dnnl_primitive_desc_destroy(pd);
        *out = e;
        return MPX_OK;
    }
    const dnnl_memory_desc_t *mds[3] = {
        pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0) : NULL,
        pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL,
        pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0) : NULL};
    dnnl_memory_t *mems[3] = {&e->a, &e->b, &e->c};
    for (int i = 0; i < 3 && st == dnnl_success; i++)
        st = dnnl_memory_create(mems[i], mds[i], engine, DNNL_MEMORY_NONE);
    const dnnl_memory_desc_t *smd =
        st == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
    if (smd && dnnl_memory_desc_get_size(smd) > 0)
        st = dnnl_memory_create(&e->scratch, smd, engine, DNNL_MEMORY_ALLOCATE);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        entry_free(e);
        return fail(k, "creating the matmul primitive", st);
    }
    *out = e;
    return MPX_OK;
}

/* The operand of `rows` rows of `ld` elements (cols used) decoded into scratch `slot`, with the
 * same layout. */
static const float *decoded(mpx_cpu_ctx *ctx, mpx_dtype t, const void *x, int rows, int cols,
                            int ld, int slot) {
    const size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
    float *f = ops_scratch(ctx, slot, n * sizeof *f);
    if (f) mpx_decode(t, x, f, n);
    return f;
}

/* A shape oneDNN multiplies only with its reference kernel: the FP32 GEMM on the decoded
 * operands, the same products (exact in FP32) summed another way. */
static mpx_status gemm_decoded(mpx_cpu_ctx *ctx, mpx_dtype t, int ta, int tb, int m, int n, int k,
                               float alpha, const void *a, int lda, const void *b, int ldb,
                               float *c, int ldc) {
    const float *af = decoded(ctx, t, a, ta ? k : m, ta ? m : k, lda, OPS_SLOT_GEMM_A);
    const float *bf = decoded(ctx, t, b, tb ? n : k, tb ? k : n, ldb, OPS_SLOT_GEMM_B);
    if (!af || !bf) return mpx_fail(MPX_ERR_NOMEM, "out of memory decoding 16-bit GEMM operands");
    mpx_sgemm(ctx, ta, tb, m, n, k, alpha, af, lda, bf, ldb, 0.0f, c, ldc);
    return MPX_OK;
}

mpx_status mpx_gemm_lowp(mpx_cpu_ctx *ctx, mpx_dtype t, int ta, int tb, int m, int n, int k,
                         float alpha, const void *a, int lda, const void *b, int ldb, float *c,
                         int ldc) {
    return mpx_gemm_lowp_batched(ctx, t, 1, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, c, ldc,
                                 0);
}

mpx_status mpx_gemm_lowp_batched(mpx_cpu_ctx *ctx, mpx_dtype t, int64_t batch, int ta, int tb,
                                 int m, int n, int k, float alpha, const void *a, int lda,
                                 int64_t sa, const void *b, int ldb, int64_t sb, float *c, int ldc,
                                 int64_t sc) {
    if (m <= 0 || n <= 0 || batch <= 0) return MPX_OK;
    if (k <= 0) { /* a sum of nothing; oneDNN wants K >= 1 */
        for (int64_t q = 0; q < batch; q++)
            for (int i = 0; i < m; i++)
                memset(c + q * sc + (int64_t)i * ldc, 0, (size_t)n * sizeof *c);
        return MPX_OK;
    }
    if (batch == 1) sa = sb = sc = 0;
    const mm_key key = {
        (int)dnnl_type(t), ta, tb, m, n, k, lda, ldb, ldc, batch, sa, sb, sc, alpha};
    ops_dnnl *d = &ctx->mm;
    pthread_mutex_lock(&d->lock);
    mpx_status st = MPX_OK;
    dnnl_status_t ds = ops_dnnl_ready(d);
    if (ds != dnnl_success) st = fail(&key, "creating the oneDNN engine", ds);
    mm_entry *e = d->cache;
    while (st == MPX_OK && e && memcmp(&e->key, &key, sizeof key) != 0) e = e->next;
    if (st == MPX_OK && !e && (st = entry_create(d->engine, &key, &e)) == MPX_OK) {
        e->next = d->cache;
        d->cache = e;
        d->cache_free = mm_cache_free;
    }
    const int ref = st == MPX_OK && e->ref;
    if (st == MPX_OK && !ref) {
        dnnl_memory_set_data_handle(e->a, (void *)a);
        dnnl_memory_set_data_handle(e->b, (void *)b);
        dnnl_memory_set_data_handle(e->c, c);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a},
                                   {DNNL_ARG_WEIGHTS, e->b},
                                   {DNNL_ARG_DST, e->c},
                                   {DNNL_ARG_SCRATCHPAD, e->scratch}};
        ds = dnnl_primitive_execute(e->prim, d->stream, e->scratch ? 4 : 3, args);
        if (ds == dnnl_success)
            ds = dnnl_stream_wait(d->stream);
        if (ds != dnnl_success) st = fail(&key, "dnnl_primitive_execute", ds);
    }
    pthread_mutex_unlock(&d->lock);
    for (int64_t q = 0; ref && st == MPX_OK && q < batch; q++) /* 2-byte elements */
        st = gemm_decoded(ctx, t, ta, tb, m, n, k, alpha, (const char *)a + (size_t)(q * sa) * 2,
                          lda, (const char *)b + (size_t)(q * sb) * 2, ldb, c + q * sc, ldc);
    return st;
}

/* ---- the GEMM-family ops' operands and results in 16-bit storage ---- */

mpx_status ops_f32_of(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *t, int slot,
                      const float **out) {
    if (!t || t->dtype == MPX_F32) {
        *out = t ? t->data : NULL;
        return MPX_OK;
    }
    const size_t n = (size_t)mpx_tensor_numel(t);
    float *f = ops_scratch(ctx, slot, n * sizeof *f);
    if (!f) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory decoding a 16-bit operand", op);
    mpx_decode(t->dtype, t->data, f, n);
    *out = f;
    return MPX_OK;
}

mpx_status ops_result_begin(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *t, int slot,
                            float **out) {
    if (!t || t->dtype == MPX_F32) {
        *out = t ? t->data : NULL;
        return MPX_OK;
    }
    float *f = ops_scratch(ctx, slot, (size_t)mpx_tensor_numel(t) * sizeof *f);
    if (!f) return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for a 16-bit result", op);
    *out = f;
    return MPX_OK;
}

void ops_result_end(const mpx_tensor *t, const float *f) {
    if (t && t->dtype != MPX_F32) mpx_encode(t->dtype, f, t->data, (size_t)mpx_tensor_numel(t));
}

int ops_lowp_pair(mpx_cpu_ctx *ctx, const mpx_tensor *a, const mpx_tensor *b) {
    return a->dtype != MPX_F32 && a->dtype == b->dtype && mpx_gemm_lowp_native(ctx, a->dtype);
}
