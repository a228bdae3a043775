/* activations.cu — the element-wise operators on the GPU: ReLU, residual add and GELU, forward
 * and backward (and add with the ReLU after it fused), with the semantics of lib/ops/relu.c,
 * add.c and gelu.c.
 *
 * Each element is loaded to FP32 from its tensor's storage dtype (F32, F16 or BF16, any mix),
 * computed with the CPU op's operations in the CPU op's order, every one a separately rounded
 * IEEE operation (__fmul_rn, __fadd_rn: the CPU library is compiled without FMA contraction,
 * nvcc would fuse), and stored with one RNE rounding into the output's dtype.
 * Bits: ReLU and add give the CPU backend's bits (with the executor's rounding into the same
 * storage) for every input. GELU calls CUDA's erfcf and expf, which are within 4 and 2 ulp of
 * the true value where glibc's are within 1: a few FP32 ulps from the CPU, then the rounding.
 * Grid-stride loops: results do not depend on the launch; asynchronous.
 */
#include <cuda_runtime.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

namespace {

constexpr float RSQRT2 = 0.70710678118654752f;   /* 1 / sqrt(2) */
constexpr float RSQRT2PI = 0.39894228040143268f; /* 1 / sqrt(2 pi) */

struct Arr {
    const void *p;
    mpx_dtype dt;
};
struct OutArr {
    void *p;
    mpx_dtype dt;
};

/* Two operands of one element, as stored (cuop_raw). */
struct Pair {
    uint32_t a, b;
};

/* y = x < 0 ? 0 : x (NaN passes: the comparison is false). */
__global__ void relu_fwd(Arr x, OutArr y, size_t n) {
    cuop_each(
        n, [&](size_t i) { return cuop_raw(x.p, x.dt, i); },
        [&](size_t i, uint32_t r) {
            const float v = cuop_dec(x.dt, r);
            cuop_st(y.p, y.dt, i, v < 0.0f ? 0.0f : v);
        });
}

/* dx = y > 0 ? dy : 0 (a select: an Inf in dy is blocked where the unit is off). */
__global__ void relu_bwd(Arr dy, Arr y, OutArr dx, size_t n) {
    cuop_each(
        n, [&](size_t i) { return Pair{cuop_raw(y.p, y.dt, i), cuop_raw(dy.p, dy.dt, i)}; },
        [&](size_t i, Pair r) {
            cuop_st(dx.p, dx.dt, i, cuop_dec(y.dt, r.a) > 0.0f ? cuop_dec(dy.dt, r.b) : 0.0f);
        });
}

/* y = a + b, or with the ReLU after it fused (relu != 0): the select of relu_fwd on the FP32
 * sum, rounded once into y's dtype. */
__global__ void add_fwd(Arr a, Arr b, OutArr y, size_t n, int relu) {
    cuop_each(
        n, [&](size_t i) { return Pair{cuop_raw(a.p, a.dt, i), cuop_raw(b.p, b.dt, i)}; },
        [&](size_t i, Pair r) {
            const float s = __fadd_rn(cuop_dec(a.dt, r.a), cuop_dec(b.dt, r.b));
            cuop_st(y.p, y.dt, i, relu && s < 0.0f ? 0.0f : s);
        });
}

/* Phi(x) = erfc(-x / sqrt(2)) / 2, the erfc form of gelu.c (accurate for negative x). */
__device__ __forceinline__ float cdf(float x) {
    return __fmul_rn(0.5f, erfcf(__fmul_rn(-x, RSQRT2)));
}

/* y = x * Phi(x) */
__global__ void gelu_fwd(Arr x, OutArr y, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = cuop_ld(x.p, x.dt, i);
        cuop_st(y.p, y.dt, i, __fmul_rn(v, cdf(v)));
    }
}

/* dx = dy * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) */
__global__ void gelu_bwd(Arr dy, Arr x, OutArr dx, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = cuop_ld(x.p, x.dt, i);
        const float pdf = __fmul_rn(RSQRT2PI, expf(__fmul_rn(__fmul_rn(-0.5f, v), v)));
        const float d = __fadd_rn(cdf(v), __fmul_rn(v, pdf));
        cuop_st(dx.p, dx.dt, i, __fmul_rn(cuop_ld(dy.p, dy.dt, i), d));
    }
}

Arr in(const mpx_tensor *t) { return Arr{t->data, t->dtype}; }
OutArr out(mpx_tensor *t) { return OutArr{t->data, t->dtype}; }

/* Checks y (and the optional second input) against x, all floating, same shape. */
mpx_status unary_check(const char *op, const char *xn, const mpx_tensor *x, const char *x2n,
                       const mpx_tensor *x2, const char *yn, const mpx_tensor *y) {
    MPX_TRY(cuop_expect_float(op, xn, x, -1));
    if (x2) {
        MPX_TRY(cuop_expect_float(op, x2n, x2, -1));
        MPX_TRY(cuop_expect_same_shape(op, xn, x, x2n, x2));
    }
    MPX_TRY(cuop_expect_float(op, yn, y, -1));
    return cuop_expect_same_shape(op, xn, x, yn, y);
}

} // namespace

extern "C" mpx_status mpx_relu_forward_cuda(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "relu forward";
    MPX_TRY(unary_check(op, "x", x, nullptr, nullptr, "y", y));
    const size_t n = (size_t)mpx_tensor_numel(x);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    relu_fwd<<<grid, kLaunchThreads>>>(in(x), out(y), n);
    CUOP_LAUNCHED(op, "relu", x);
    return MPX_OK;
}

extern "C" mpx_status mpx_relu_backward_cuda(const mpx_tensor *dy, const mpx_tensor *y,
                                             mpx_tensor *dx) {
    static const char *op = "relu backward";
    MPX_TRY(unary_check(op, "y", y, "dy", dy, "dx", dx));
    const size_t n = (size_t)mpx_tensor_numel(y);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    relu_bwd<<<grid, kLaunchThreads>>>(in(dy), in(y), out(dx), n);
    CUOP_LAUNCHED(op, "relu", y);
    return MPX_OK;
}

/* add forward, and add + relu forward (relu != 0). */
static mpx_status add_launch(const char *op, const mpx_tensor *a, const mpx_tensor *b,
                             mpx_tensor *y, int relu) {
    MPX_TRY(unary_check(op, "a", a, "b", b, "y", y));
    const size_t n = (size_t)mpx_tensor_numel(a);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    add_fwd<<<grid, kLaunchThreads>>>(in(a), in(b), out(y), n, relu);
    CUOP_LAUNCHED(op, "add", a);
    return MPX_OK;
}

extern "C" mpx_status mpx_add_forward_cuda(const mpx_tensor *a, const mpx_tensor *b,
                                           mpx_tensor *y) {
    return add_launch("add forward", a, b, y, 0);
}

extern "C" mpx_status mpx_add_relu_forward_cuda(const mpx_tensor *a, const mpx_tensor *b,
                                                mpx_tensor *y) {
    return add_launch("add+relu forward", a, b, y, 1);
}

extern "C" mpx_status mpx_gelu_forward_cuda(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "gelu forward";
    MPX_TRY(unary_check(op, "x", x, nullptr, nullptr, "y", y));
    const size_t n = (size_t)mpx_tensor_numel(x);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    gelu_fwd<<<grid, kLaunchThreads>>>(in(x), out(y), n);
    CUOP_LAUNCHED(op, "gelu", x);
    return MPX_OK;
}

extern "C" mpx_status mpx_gelu_backward_cuda(const mpx_tensor *dy, const mpx_tensor *x,
                                             mpx_tensor *dx) {
    static const char *op = "gelu backward";
    MPX_TRY(unary_check(op, "x", x, "dy", dy, "dx", dx));
    const size_t n = (size_t)mpx_tensor_numel(x);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    gelu_bwd<<<grid, kLaunchThreads>>>(in(dy), in(x), out(dx), n);
    CUOP_LAUNCHED(op, "gelu", x);
    return MPX_OK;
}
