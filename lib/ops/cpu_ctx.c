/* cpu_ctx.c — the CPU operators' context (ops.h: mpx_cpu_ctx): made empty, filled on first use
 * by the ops that keep something between calls (conv2d.c, gemm_lowp.c, linear.c), freed whole.
 * The state lives here rather than in file-scope variables so that its owner (the CPU backend,
 * or a test or benchmark) decides its lifetime and two owners never share a cache or a switch.
 */
#include <stdlib.h>

#include "ops_internal.h"

mpx_cpu_ctx *mpx_cpu_ctx_create(void) {
    mpx_cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        mpx_fail(MPX_ERR_NOMEM, "out of memory for the CPU operators' context");
        return NULL;
    }
    pthread_mutex_init(&ctx->conv.lock, NULL);
    pthread_mutex_init(&ctx->mm.lock, NULL);
    ctx->sgemm_force = MPX_GEMM_AUTO;
    ctx->conv_force = MPX_CONV_AUTO;
    ctx->lowp_native[0] = ctx->lowp_native[1] = -1;
    ctx->lowp_forced = -1;
    return ctx;
}

void mpx_cpu_ctx_free(mpx_cpu_ctx *ctx) {
    if (!ctx) return;
    ops_dnnl_release(&ctx->conv);
    ops_dnnl_release(&ctx->mm);
    for (int i = 0; i < OPS_SCRATCH_SLOTS; i++) free(ctx->scratch[i]);
    pthread_mutex_destroy(&ctx->conv.lock);
    pthread_mutex_destroy(&ctx->mm.lock);
    free(ctx);
}

void *ops_scratch(mpx_cpu_ctx *ctx, int slot, size_t bytes) {
    if (bytes > ctx->scratch_cap[slot]) {
        void *p = realloc(ctx->scratch[slot], bytes);
        if (!p) return NULL;
        ctx->scratch[slot] = p;
        ctx->scratch_cap[slot] = bytes;
    }
    return ctx->scratch[slot];
}

dnnl_status_t ops_dnnl_ready(ops_dnnl *d) {
    dnnl_status_t st = dnnl_success;
    if (!d->engine) st = dnnl_engine_create(&d->engine, dnnl_cpu, 0);
    if (st == dnnl_success && !d->stream)
        st = dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags);
    return st;
}

void ops_dnnl_release(ops_dnnl *d) {
    if (d->cache && d->cache_free)
        d->cache_free(d->cache);
    d->cache = NULL;
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->engine) dnnl_engine_destroy(d->engine);
    d->stream = NULL;
    d->engine = NULL;
}
