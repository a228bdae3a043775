/* ops_internal.h — argument checks, loop helpers and the operators' context (struct mpx_cpu_ctx)
 * shared by the CPU ops (lib/ops only).
 *
 * Every check returns MPX_OK or MPX_ERR_INPUT with a message "<op>: <tensor> ..." that names
 * the tensor, its shape or dtype, and what was expected.
 */
#ifndef MPX_OPS_INTERNAL_H
#define MPX_OPS_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"
#include "mpx/ops.h"
#include "mpx/tensor.h"

/* Element count below which an OpenMP region costs more than it saves. Measured here with 2
 * threads, y = a + b: 4K floats 1.3 us serial vs 1.4 us parallel, 8K 2.7 vs 2.1, 16K 5.7 vs
 * 4.1, 64K 21 vs 12. */
enum { OPS_PAR_MIN = 1 << 14 };

/* An element loop compiled for the widest vector unit of the CPU it runs on (GCC's function
 * multi-versioning, chosen when the library loads). The project compiles without FMA
 * contraction (-ffp-contract=off), so every version does each element's operations as written:
 * the bits do not depend on the CPU. On functions that run no OpenMP region themselves (GCC
 * outlines a parallel loop's body before it clones a function, so the body would not be
 * cloned). */
#define OPS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* t is non-NULL, on the CPU, has data, dtype `dt` and `ndim` dims (ndim < 0: any 1..4). */
mpx_status ops_expect(const char *op, const char *name, const mpx_tensor *t, mpx_dtype dt,
                      int ndim);
/* t->shape[dim] == want; `why` says where the expectation comes from ("C of x"). */
mpx_status ops_expect_dim(const char *op, const char *name, const mpx_tensor *t, int dim,
                          int64_t want, const char *why);
/* a and b have identical ndim and dims. */
mpx_status ops_expect_same_shape(const char *op, const char *name_a, const mpx_tensor *a,
                                 const char *name_b, const mpx_tensor *b);

/* ---- the CPU operators' context (ops.h: mpx_cpu_ctx; cpu_ctx.c) ---- */
/* Scratch slots: each operand of one op call has its own (ops run one at a time per context). */
enum {
    OPS_SLOT_A = 0, OPS_SLOT_B, OPS_SLOT_BIAS, OPS_SLOT_OUT, OPS_SLOT_OUT2, OPS_SLOT_GEMM_A,
    OPS_SLOT_GEMM_B, OPS_SLOT_ROWS_A, OPS_SLOT_ROWS_B, OPS_SCRATCH_SLOTS
};
/* A oneDNN engine and stream with a cache of primitives, created on first use; the lock guards
 * the cache and is held while a cached primitive runs (its scratchpad is shared). The cache's
 * owner (conv2d.c, gemm_lowp.c) says how to free its entries, so that the context frees them
 * without knowing their type. */
typedef struct {
    pthread_mutex_t lock;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    void *cache;                     /* the owner's list of entries */
    void (*cache_free)(void *cache); /* frees that list; set with the first entry */
} ops_dnnl;
struct mpx_cpu_ctx {
    mpx_gemm_impl sgemm_force;  /* mpx_sgemm_force */
    mpx_conv2d_impl conv_force; /* mpx_conv2d_force */
    ops_dnnl conv;              /* conv2d.c */
    ops_dnnl mm;                /* gemm_lowp.c */
    int lowp_native[2];         /* BF16, F16: -1 not probed yet (under mm.lock) */
    char lowp_impl[2][64];      /* the implementation the probe got, by name */
    int lowp_forced;            /* mpx_gemm_lowp_force: -1 auto, 0 off */
    void *scratch[OPS_SCRATCH_SLOTS];
    size_t scratch_cap[OPS_SCRATCH_SLOTS];
    double skipped_flops; /* mpx_linear_skipped_flops */
};
/* A grow-only buffer of at least `bytes` for `slot`; NULL when it cannot grow. */
void *ops_scratch(mpx_cpu_ctx *ctx, int slot, size_t bytes);
/* Creates the engine and stream of `d` if it has none (called with d->lock held). */
dnnl_status_t ops_dnnl_ready(ops_dnnl *d);
/* Frees the cache of `d`, then its stream and engine (called with d->lock held). */
void ops_dnnl_release(ops_dnnl *d);

/* ---- 16-bit operands of the GEMM-family ops (gemm_lowp.c) ---- */
/* t's values in FP32: t's own data when F32, else decoded into scratch `slot` (t may be NULL). */
mpx_status ops_f32_of(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *t, int slot,
                      const float **out);
/* Where to write t's FP32 result: t's data when F32, else scratch `slot`; then ops_result_end
 * rounds it into t's 16-bit storage (mpx_encode: RNE, as the executor's cast). */
mpx_status ops_result_begin(mpx_cpu_ctx *ctx, const char *op, const mpx_tensor *t, int slot,
                            float **out);
void ops_result_end(const mpx_tensor *t, const float *f);
/* 1 when a and b are both stored in one 16-bit format this CPU multiplies natively. */
int ops_lowp_pair(mpx_cpu_ctx *ctx, const mpx_tensor *a, const mpx_tensor *b);
/* t's dtype is F32, or a 16-bit format: for the checks of ops that take either. */
mpx_status ops_expect_float(const char *op, const char *name, const mpx_tensor *t, int ndim);

/* The row chunks of the norm ops' deterministic reductions: rows per chunk (at least
 * chunk_min, enough that there are at most max_chunks) into *rows, and the number of chunks; a
 * function of m alone, so the summation order does not depend on the thread count. The
 * partial sums live in a buffer the op allocates per call (no state kept between calls). */
static inline int64_t ops_chunking(int64_t m, int64_t chunk_min, int64_t max_chunks,
                                   int64_t *rows) {
    int64_t r = (m + max_chunks - 1) / max_chunks;
    if (r < chunk_min) r = chunk_min;
    *rows = r;
    return (m + r - 1) / r;
}

/* Column sums of a row-major [m, n] matrix into out[n], accumulated in double in row order
 * (deterministic whatever the thread count: threads split the columns, never the rows). */
void ops_column_sums(const float *x, int64_t m, int64_t n, float *out);

#endif
