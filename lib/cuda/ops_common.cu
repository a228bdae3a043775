/* ops_common.cu — the host side of ops.cuh: argument checks for the CUDA operators (the CPU ops'
 * messages, lib/ops/ops_check.c, for device tensors and the backend's storage dtypes), launch
 * failures, scratch, the device-side index checks' read-back (at once or deferred to the next
 * wait), and what mpx_cuda_release frees besides the backend's context. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mutex>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

static mpx_status expect_common(const char *op, const char *name, const mpx_tensor *t, int ndim) {
    if (!t) return mpx_fail(MPX_ERR_INPUT, "%s: %s is NULL", op, name);
    if (t->device != MPX_DEV_CUDA)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s is not a CUDA tensor", op, name);
    char buf[96];
    if (ndim >= 0 && t->ndim != ndim)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dims, expected %d", op, name, t->ndim, ndim);
    if (t->ndim < 1 || t->ndim > MPX_MAX_DIMS)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dims, expected 1..%d", op, name, t->ndim,
                        MPX_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] <= 0)
            return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s with an empty dimension", op, name,
                            mpx_shape_str(t->ndim, t->shape, buf, sizeof buf));
    if (!t->data) return mpx_fail(MPX_ERR_INPUT, "%s: %s has no data", op, name);
    return MPX_OK;
}

mpx_status cuop_expect_float(const char *op, const char *name, const mpx_tensor *t, int ndim) {
    if (t && t->dtype != MPX_F32 && t->dtype != MPX_F16 && t->dtype != MPX_BF16) {
        const int floating = t->dtype == MPX_F8_E4M3 || t->dtype == MPX_F8_E5M2;
        return mpx_fail(floating ? MPX_ERR_UNSUPPORTED : MPX_ERR_INPUT,
                        "%s: %s has dtype %s, expected f32, f16 or bf16%s", op, name,
                        mpx_dtype_name(t->dtype),
                        floating ? " (the CUDA operators do not read FP8 storage)" : "");
    }
    return expect_common(op, name, t, ndim);
}

mpx_status cuop_expect(const char *op, const char *name, const mpx_tensor *t, mpx_dtype dt,
                       int ndim) {
    if (t && t->dtype != dt)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has dtype %s, expected %s", op, name,
                        mpx_dtype_name(t->dtype), mpx_dtype_name(dt));
    return expect_common(op, name, t, ndim);
}

mpx_status cuop_expect_dim(const char *op, const char *name, const mpx_tensor *t, int dim,
                           int64_t want, const char *why) {
    if (t->shape[dim] == want) return MPX_OK;
    char buf[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s, dim %d must be %lld (%s)", op, name,
                    mpx_shape_str(t->ndim, t->shape, buf, sizeof buf), dim, (long long)want, why);
}

mpx_status cuop_expect_same_shape(const char *op, const char *name_a, const mpx_tensor *a,
                                  const char *name_b, const mpx_tensor *b) {
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++)
        same = a->shape[i] == b->shape[i];
    if (same) return MPX_OK;
    char ba[96], bb[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s but %s has shape %s (must match)", op,
                    name_b, mpx_shape_str(b->ndim, b->shape, bb, sizeof bb), name_a,
                    mpx_shape_str(a->ndim, a->shape, ba, sizeof ba));
}

mpx_status cuop_expect_scale(const char *op, float scale) {
    if (scale > 0 && isfinite(scale)) return MPX_OK;
    return mpx_fail(MPX_ERR_INPUT, "%s: scale %g must be positive and finite", op, (double)scale);
}

mpx_status cuop_launch_fail(const char *op, const char *what, const mpx_tensor *t,
                            cudaError_t err) {
    char buf[96] = "";
    if (t) mpx_shape_str(t->ndim, t->shape, buf, sizeof buf);
    return mpx_fail(MPX_ERR_BACKEND, "%s: %s kernel for %s %s failed: %s (%s)", op, what,
                    t ? mpx_dtype_name(t->dtype) : "", buf, cudaGetErrorString(err),
                    cudaGetErrorName(err));
}

/* The stream-ordered pool keeps what it has reserved. By default it hands memory back to the
 * driver at synchronisations, and the next step's scratch (decoded convolution inputs: hundreds
 * of MiB at ResNet-50 batch 256) would be mapped again every step. Once per device; a failure
 * only costs that. */
static void keep_pool_memory(void) {
    static int done_for = -1;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (dev == done_for) return;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
        cudaGetLastError(); /* pools unsupported: cuop_scratch falls back to cudaMalloc */
    done_for = dev;
}

/* The stream-ordered pool's high-water mark of memory in use, plus cuDNN's workspace: the
 * device memory the operators need beyond the graph's arenas (backend.h: scratch_peak). */
extern "C" size_t mpx_cuda_scratch_peak(mpx_cuda_ctx *ctx) {
    int dev = 0;
    cudaMemPool_t pool;
    uint64_t high = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess) {
        cudaGetLastError();
        high = 0;
    }
    return (size_t)high + cuop_conv_workspace_bytes(ctx->conv);
}

mpx_status cuop_scratch(size_t bytes, void **p) {
    *p = nullptr;
    keep_pool_memory();
    cudaError_t err = cudaMallocAsync(p, bytes ? bytes : 16, 0);
    if (err == cudaErrorNotSupported) {
        cudaGetLastError();
        MPX_CUDA_TRY(cudaMalloc(p, bytes ? bytes : 16));
    } else {
        MPX_CUDA_TRY(err);
    }
    return MPX_OK;
}

mpx_status cuop_check_begin(CuopCheck **d) {
    void *p = nullptr;
    MPX_TRY(cuop_scratch(sizeof(CuopCheck), &p));
    /* first_bad = all ones, count = 0, value = 0 */
    cudaError_t err = cudaMemsetAsync(p, 0xff, sizeof(unsigned long long), 0);
    if (err == cudaSuccess)
        err = cudaMemsetAsync((char *)p + sizeof(unsigned long long), 0,
                              sizeof(CuopCheck) - sizeof(unsigned long long), 0);
    if (err != cudaSuccess) {
        mpx_cuda_scratch_free(p);
        MPX_CUDA_TRY(err);
    }
    *d = (CuopCheck *)p;
    return MPX_OK;
}

namespace {

/* The offending element's value, for the message (stream-ordered after the check kernel). */
__global__ void check_value(CuopCheck *c, const void *v, mpx_dtype dt) {
    if (c->first_bad == ~0ull) return;
    c->value = dt == MPX_I32 ? (double)((const int32_t *)v)[c->first_bad]
                             : (double)cuop_ld(v, dt, (size_t)c->first_bad);
}

constexpr int kPending = 64;
struct PendingCheck {
    const char *op, *name;
    int ndim;
    int64_t shape[MPX_MAX_DIMS];
    char rule[192];
};
std::mutex g_check_mutex;
CuopCheck *g_check_host = nullptr; /* pinned, [kPending], written by the queued copies */
PendingCheck g_pending[kPending];
int g_n_pending = 0;

mpx_status resolve_locked(void) {
    mpx_status st = MPX_OK;
    for (int i = 0; i < g_n_pending && st == MPX_OK; i++) {
        const CuopCheck &h = g_check_host[i];
        const PendingCheck &p = g_pending[i];
        if (h.first_bad == ~0ull) continue;
        int64_t idx[MPX_MAX_DIMS];
        unsigned long long rest = h.first_bad;
        for (int d = p.ndim - 1; d >= 0; d--) {
            idx[d] = (int64_t)(rest % (unsigned long long)p.shape[d]);
            rest /= (unsigned long long)p.shape[d];
        }
        char pos[96];
        mpx_shape_str(p.ndim, idx, pos, sizeof pos);
        st = mpx_fail(MPX_ERR_INPUT, "%s: %s%s = %g%s", p.op, p.name, pos, h.value, p.rule);
    }
    g_n_pending = 0;
    return st;
}

} // namespace

mpx_status cuop_check_defer(CuopCheck *d, const mpx_tensor *t, const char *op, const char *name,
                            const char *rule) {
    std::lock_guard<std::mutex> lock(g_check_mutex);
    mpx_status st = MPX_OK;
    cudaError_t err = cudaSuccess;
    if (!g_check_host) err = cudaHostAlloc((void **)&g_check_host, kPending * sizeof(CuopCheck),
                                           cudaHostAllocDefault);
    if (err == cudaSuccess && g_n_pending == kPending) {
        /* Every slot holds a verdict not yet read: wait for them (rare: 64 checks in a pass). */
        mpx_cuda_count_wait();
        err = cudaDeviceSynchronize();
        if (err == cudaSuccess) st = resolve_locked();
    }
    if (err == cudaSuccess) {
        check_value<<<1, 1>>>(d, t->data, t->dtype);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(&g_check_host[g_n_pending], d, sizeof *d, cudaMemcpyDeviceToHost, 0);
    if (err == cudaSuccess) {
        PendingCheck &p = g_pending[g_n_pending++];
        p.op = op;
        p.name = name;
        p.ndim = t->ndim;
        memcpy(p.shape, t->shape, sizeof p.shape);
        snprintf(p.rule, sizeof p.rule, "%s", rule);
    }
    mpx_status freed = mpx_cuda_scratch_free(d);
    if (err != cudaSuccess) return cuop_launch_fail(op, "check read-back", t, err);
    return st != MPX_OK ? st : freed;
}

mpx_status cuop_checks_resolve(void) {
    std::lock_guard<std::mutex> lock(g_check_mutex);
    return resolve_locked();
}

mpx_status cuop_checks_release(void) {
    std::lock_guard<std::mutex> lock(g_check_mutex);
    g_n_pending = 0;
    cudaError_t err = g_check_host ? cudaFreeHost(g_check_host) : cudaSuccess;
    g_check_host = nullptr;
    MPX_CUDA_TRY(err);
    return MPX_OK;
}

mpx_status cuop_device_release(void) {
    MPX_CUDA_TRY(cudaDeviceSynchronize());
    mpx_status staging = cuop_staging_release(), checks = cuop_checks_release();
    return staging != MPX_OK ? staging : checks;
}
