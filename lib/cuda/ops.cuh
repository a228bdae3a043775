/* ops.cuh — what the operator files of lib/cuda share (private to lib/cuda): argument checks for
 * device tensors (the CPU ops' messages, ops_common.cu), element loads and stores in any of the
 * backend's floating storage dtypes, block reductions, and scratch for index checks.
 *
 * Storage: an op's float tensors may each be F32, F16 or BF16 (the executor hands the CUDA
 * backend tensors in their storage dtype, backend_cuda.cu's `native`). Kernels load every
 * element to FP32 (exact), compute in FP32, and store with one round-to-nearest-even into the
 * output's dtype, by the integer rules of fp_bits.h: the bits the CPU backend's executor writes
 * when it rounds an FP32 result into the same storage (NaN payloads included).
 * The dtype is a kernel argument (uniform across a launch), not a template parameter, so an op
 * takes any mix of dtypes over its tensors without a kernel per combination.
 *
 * Everything runs on the legacy default stream, like the rest of lib/cuda.
 */
#ifndef MPX_CUDA_OPS_CUH
#define MPX_CUDA_OPS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "lib/numerics/fp_bits.h"
#include "mpx/cuda.h"
#include "mpx/error.h"
#include "mpx/tensor.h"

/* ---- host: argument checks (ops_common.cu). Each returns MPX_OK, or MPX_ERR_INPUT (or
 * MPX_ERR_UNSUPPORTED for a floating dtype other than F32/F16/BF16) with "<op>: <name> ...". */

/* t is non-NULL, a CUDA tensor with data, `ndim` dims (ndim < 0: any 1..4), no empty dim, and
 * dtype F32, F16 or BF16. */
mpx_status cuop_expect_float(const char *op, const char *name, const mpx_tensor *t, int ndim);
/* The same with one exact dtype (I32 for ids and labels). */
mpx_status cuop_expect(const char *op, const char *name, const mpx_tensor *t, mpx_dtype dt,
                       int ndim);
/* t->shape[dim] == want; `why` says where the expectation comes from. */
mpx_status cuop_expect_dim(const char *op, const char *name, const mpx_tensor *t, int dim,
                           int64_t want, const char *why);
/* a and b have the same ndim and dims. */
mpx_status cuop_expect_same_shape(const char *op, const char *name_a, const mpx_tensor *a,
                                  const char *name_b, const mpx_tensor *b);
/* A factor an op applies to its result (the scaled backward-data entries): positive and
 * finite. */
mpx_status cuop_expect_scale(const char *op, float scale);
/* The message of a kernel launch that failed: "<op>: <what> launch for <shape>: <CUDA error>". */
mpx_status cuop_launch_fail(const char *op, const char *what, const mpx_tensor *t, cudaError_t err);
/* Device scratch, NOT zeroed (stream-ordered where supported); free with mpx_cuda_scratch_free. */
mpx_status cuop_scratch(size_t bytes, void **p);
/* 1 when the GEMM-family operands may run on TF32 tensor cores: they are declared exact in
 * F16 or BF16 (mpx_cuda_set_operand_format), so TF32 holds them exactly. */
static inline int cuop_tensor_cores(const mpx_cuda_ctx *ctx) {
    return mpx_cuda_operand_format(ctx) != MPX_F32;
}
/* ---- the operators' context (cuda.h: mpx_cuda_ctx; cuda_ctx.cu): the state of conv.cu (the
 * cuDNN handle, its algorithm table, workspace and fallback count) and of gemm.cu (the cuBLAS
 * handle), each defined in its file. ---- */
struct cuop_conv_state;
struct cuop_gemm_state;
struct mpx_cuda_ctx {
    cuop_conv_state *conv;
    cuop_gemm_state *gemm;
    mpx_dtype operand_format; /* mpx_cuda_set_operand_format */
};
/* nullptr when out of memory; empty: handles and buffers are made on first use. */
cuop_conv_state *cuop_conv_state_new(void);
cuop_gemm_state *cuop_gemm_state_new(void);
void cuop_conv_state_delete(cuop_conv_state *s);
void cuop_gemm_state_delete(cuop_gemm_state *s);
/* Free what a state holds (made again on next use). */
mpx_status cuop_conv_release(cuop_conv_state *s);
mpx_status cuop_gemm_release(cuop_gemm_state *s);
/* Bytes of cuDNN's shared workspace. */
size_t cuop_conv_workspace_bytes(cuop_conv_state *s);
/* What mpx_cuda_release frees besides the backend's context (ops_common.cu, staging.cu). */
mpx_status cuop_device_release(void);
/* Host-to-device copy through a pinned staging buffer, queued on the default stream: the host
 * memory may be reused at once, and the host waits only when every buffer is in flight
 * (staging.cu). */
mpx_status cuop_upload(void *dst, const void *host, size_t bytes);
mpx_status cuop_staging_release(void);

/* Check launches and report, naming the op and the tensor the launch covers. */
#define CUOP_LAUNCHED(op, what, t)                                                                 \
    do {                                                                                           \
        cudaError_t cuop_err_ = cudaGetLastError();                                                \
        if (cuop_err_ != cudaSuccess) return cuop_launch_fail((op), (what), (t), cuop_err_);       \
    } while (0)

/* ---- index checks on the device (ids, labels, masks): a kernel records the first offending
 * position with an integer atomicMin (the smallest index, whatever the schedule) and an integer
 * count. The verdict reaches the host at the backend's next wait (cuop_check_defer: the 24 bytes
 * are copied into pinned memory behind the op's work and read after the step's status download
 * or a sync, so a check costs no wait of its own); a failure then surfaces through the backend's
 * last_error, naming the op, the position and the value. ---- */
struct CuopCheck {
    unsigned long long first_bad; /* ~0ull when nothing offended */
    unsigned long long count;     /* what the kernel counts (labels: rows that are not ignored) */
    double value;                 /* the offending element (set by cuop_check_defer) */
};
/* Scratch for one check: first_bad = ~0, count = 0, value = 0. */
mpx_status cuop_check_begin(CuopCheck **d);
/* Queues the read-back of the check of tensor `t` (called `name` in the message) and frees the
 * scratch after the queued work; the message will be "<op>: <name>[i,j] = <value><rule>".
 * Returns a failure only of its own queueing, or of earlier deferred checks when 64 are pending
 * and it has to wait for them. */
mpx_status cuop_check_defer(CuopCheck *d, const mpx_tensor *t, const char *op, const char *name,
                            const char *rule);
/* After the host has waited for the device (a download, a sync): the first failed deferred check
 * as an input error, MPX_OK when none; forgets them all. */
mpx_status cuop_checks_resolve(void);
mpx_status cuop_checks_release(void);

/* ---- device: loads and stores ---- */

/* Element i of an F32, F16 or BF16 array as stored (FP32 bits or the 16-bit code), and such
 * bits decoded exactly to FP32: the two halves of cuop_ld, for loops that load several
 * elements before using any (launch.cuh: cuop_each). */
__device__ __forceinline__ uint32_t cuop_raw(const void *p, mpx_dtype dt, size_t i) {
    if (dt == MPX_F16 || dt == MPX_BF16) return ((const uint16_t *)p)[i];
    return __float_as_uint(((const float *)p)[i]);
}
__device__ __forceinline__ float cuop_dec(mpx_dtype dt, uint32_t r) {
    if (dt == MPX_F16) return cuop_f16_decode((uint16_t)r);
    if (dt == MPX_BF16) return cuop_bf16_decode((uint16_t)r);
    return __uint_as_float(r);
}

/* Element i of an F32, F16 or BF16 array, exactly, in FP32. */
__device__ __forceinline__ float cuop_ld(const void *p, mpx_dtype dt, size_t i) {
    return cuop_dec(dt, cuop_raw(p, dt, i));
}

/* Element i of an F32, F16 or BF16 array = v rounded to nearest even (NaN keeps sign and top
 * payload bits, as mpx_cast does). */
__device__ __forceinline__ void cuop_st(void *p, mpx_dtype dt, size_t i, float v) {
    if (dt == MPX_F16)
        ((uint16_t *)p)[i] = cuop_f16_rne(v);
    else if (dt == MPX_BF16)
        ((uint16_t *)p)[i] = cuop_bf16_rne(v);
    else
        ((float *)p)[i] = v;
}

/* ---- device: block reductions (blockDim.x a multiple of 32, at most 1024). The tree is fixed by
 * blockDim.x, so a result does not depend on scheduling. `sh` is __shared__ scratch of 32
 * elements; every thread of the block must call, and every thread gets the result. ---- */

__device__ __forceinline__ double cuop_block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1)
        v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1)
            v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

/* The largest value; NaN is ignored (fmaxf), -inf when every value is NaN or -inf. */
__device__ __forceinline__ float cuop_block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sh[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1)
            v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

/* Threads per block of the row kernels (one block per row: softmax, layer-norm, the loss). */
constexpr int kRowThreads = 256;

/* Blocks for a loop over `rows` rows, one block per row at a time (grid-stride over rows). */
static inline unsigned cuop_row_grid(int64_t rows) {
    const int64_t cap = (int64_t)1 << 20;
    return (unsigned)(rows < cap ? rows : cap);
}

#endif
