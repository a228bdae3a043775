/* conv.cu — conv2d forward, backward-data and backward-weights on cuDNN (legacy convolution API),
 * with the semantics of lib/ops/conv2d.c: x [N,H,W,C], w HWIO [KH,KW,C,K], optional bias [K],
 * y [N,OH,OW,K], stride and padding per the attr (no groups, no dilation: the CPU op has none).
 *
 * Precision and layout: cuDNN runs with FP32 compute. The math type is CUDNN_FMA_MATH (neither
 * tensor cores nor TF32) unless the operands are declared exact in F16 or BF16
 * (mpx_cuda_set_operand_format, as the executor does in 16-bit modes): then
 * CUDNN_TENSOR_OP_MATH, whose products of such values are exact, so only the FP32 accumulation
 * order differs. Data: a forward whose x, w and y are all stored in that declared 16-bit format
 * and that has no bias runs on the 16-bit data itself (cuDNN reads x and writes y, rounding once
 * from the FP32 sums; the weights reordered into 16-bit KRSC scratch), falling back to the FP32
 * path when cuDNN offers no usable algorithm. Everything else runs on FP32 data: inputs stored
 * as F16/BF16 are decoded to FP32 scratch first (exact; TF32 tensor cores then hold them
 * exactly); the HWIO weights are reordered to cuDNN's KRSC ("NHWC" filter) layout in FP32
 * scratch. An F32 output without bias is written by cuDNN directly; otherwise cuDNN writes FP32
 * scratch and one kernel adds the bias in FP32 and rounds once (to nearest even) into the
 * output's dtype. The backward passes do the same: on 16-bit data when every tensor of the pass
 * (dy, w, dx; or x, dy, dw) is in the declared format — the gradients the executor lets an op
 * round itself (graph_exec.c: grad_direct) — else on FP32 data, since cuDNN writes a gradient
 * in its inputs' type and an FP32 gradient (which the executor scales and counts before
 * rounding) must not be rounded on the way. Backward-data's scaled form passes its factor (a
 * power of two) as cuDNN's alpha, which multiplies the FP32 result before the one rounding:
 * exact, the unscaled result times the factor. The weight gradient is computed in KRSC scratch
 * (FP32, or the 16-bit format) and reordered into HWIO with at most that one rounding. The bias
 * gradient is a column sum of dy in double in row order (one thread per channel), the order of
 * the CPU's SGEMM path. A 16-bit plan cuDNN cannot run (no algorithm, or a "not supported"
 * status from the call) is remembered and counted (mpx_cuda_conv16_fallbacks): the pass then
 * runs on FP32 data, correct but slower, and `mpx bench --device cuda` shows the count.
 *
 * Algorithms: chosen once per (pass, shape, math, data type) with cudnnGet*Algorithm_v7
 * (heuristics, no timing, so the choice cannot depend on the machine's load), taking the first
 * algorithm that cuDNN reports as supported, deterministic, of the allowed math (tensor-op
 * math only when declared exact) and not FFT/Winograd (whose error is not bounded element-wise
 * like a direct sum's), and cached in a small table with the math type it runs in.
 * One workspace buffer is shared by all calls and grown as needed. The handle, the table and the
 * workspace live in the CUDA operators' context the caller hands in (mpx_cuda_ctx: the CUDA
 * backend owns one), guarded by its mutex (ops run on one host thread at a time).
 */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>
#include <string.h>

#include <mutex>
#include <new>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"
#include "mpx/ops.h"

namespace {

const char *const kPass[3] = {"conv2d forward", "conv2d backward-data", "conv2d backward-weights"};

struct Geom {
    int n, h, w, c, k, kh, kw, oh, ow;
};

/* The checks of conv2d.c's conv_check, for device tensors of any float storage dtype. */
mpx_status conv_check(const char *op, const mpx_conv2d_attr *a, const char *xn,
                      const mpx_tensor *x, const char *wn, const mpx_tensor *w, const char *yn,
                      const mpx_tensor *y, const char *bn, const mpx_tensor *b, Geom *g) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (a->stride_h < 1 || a->stride_w < 1 || a->pad_h < 0 || a->pad_w < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s: stride %dx%d must be >= 1 and pad %dx%d >= 0", op,
                        a->stride_h, a->stride_w, a->pad_h, a->pad_w);
    MPX_TRY(cuop_expect_float(op, xn, x, 4));
    MPX_TRY(cuop_expect_float(op, wn, w, 4));
    MPX_TRY(cuop_expect_float(op, yn, y, 4));
    for (int i = 0; i < 4; i++)
        if (x->shape[i] > 1 << 30 || w->shape[i] > 1 << 30)
            return mpx_fail(MPX_ERR_INPUT, "%s: dimension %d of %s or %s exceeds 2^30", op, i, xn,
                            wn);
    g->n = (int)x->shape[0], g->h = (int)x->shape[1], g->w = (int)x->shape[2];
    g->c = (int)x->shape[3];
    g->kh = (int)w->shape[0], g->kw = (int)w->shape[1], g->k = (int)w->shape[3];
    MPX_TRY(cuop_expect_dim(op, wn, w, 2, g->c, "C of the activations"));
    if ((int64_t)g->h + 2 * (int64_t)a->pad_h < g->kh ||
        (int64_t)g->w + 2 * (int64_t)a->pad_w < g->kw) {
        char bx[64], bw[64];
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: kernel %dx%d of %s %s is larger than %s %s padded by %dx%d", op,
                        g->kh, g->kw, wn, mpx_shape_str(4, w->shape, bw, sizeof bw), xn,
                        mpx_shape_str(4, x->shape, bx, sizeof bx), a->pad_h, a->pad_w);
    }
    g->oh = (g->h + 2 * a->pad_h - g->kh) / a->stride_h + 1;
    g->ow = (g->w + 2 * a->pad_w - g->kw) / a->stride_w + 1;
    MPX_TRY(cuop_expect_dim(op, yn, y, 0, g->n, "N of the activations"));
    MPX_TRY(cuop_expect_dim(op, yn, y, 1, g->oh, "OH = (H + 2*pad_h - KH) / stride_h + 1"));
    MPX_TRY(cuop_expect_dim(op, yn, y, 2, g->ow, "OW = (W + 2*pad_w - KW) / stride_w + 1"));
    MPX_TRY(cuop_expect_dim(op, yn, y, 3, g->k, "K of the weights"));
    if (b) {
        MPX_TRY(cuop_expect_float(op, bn, b, 1));
        MPX_TRY(cuop_expect_dim(op, bn, b, 0, g->k, "K of the weights"));
    }
    return MPX_OK;
}

/* ---- kernels ---- */

/* dst (KRSC, in ddt: FP32, or w's own 16-bit format, so exact) from w (HWIO, any float dtype). */
__global__ void hwio_to_krsc(const void *w, mpx_dtype dt, void *dst, mpx_dtype ddt, int kh, int kw,
                             int c, int k, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i;
        const size_t ci = t % c;
        t /= c;
        const size_t s = t % kw;
        t /= kw;
        const size_t r = t % kh;
        const size_t ko = t / kh;
        cuop_st(dst, ddt, i, cuop_ld(w, dt, ((r * kw + s) * c + ci) * k + ko));
    }
}

/* dw (HWIO, its dtype) = src (KRSC, in sdt: FP32, rounded once; or dw's own 16-bit format,
 * exact). */
__global__ void krsc_to_hwio(const void *src, mpx_dtype sdt, void *dw, mpx_dtype dt, int kh, int kw,
                             int c, int k, size_t n) {
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        size_t t = j;
        const size_t ko = t % k;
        t /= k;
        const size_t ci = t % c;
        t /= c;
        const size_t s = t % kw;
        const size_t r = t / kw;
        cuop_st(dw, dt, j, cuop_ld(src, sdt, ((ko * kh + r) * kw + s) * c + ci));
    }
}

/* y[i] = src[i] + bias[i % k] (bias may be NULL), rounded once into y's dtype. src may be y's
 * own FP32 data. */
__global__ void bias_store(const float *src, void *y, mpx_dtype ydt, const void *bias,
                           mpx_dtype bdt, int k, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (ChannelCursor ch(i, stride, (size_t)k); i < n; i += stride, ch.next()) {
        float v = src[i];
        if (bias) v = v + cuop_ld(bias, bdt, ch.c);
        cuop_st(y, ydt, i, v);
    }
}

/* db[j] = sum over the m rows of dy[:, j], in double, in row order. */
__global__ void column_sum(const void *dy, mpx_dtype dt, int64_t m, int k, void *db,
                           mpx_dtype dbt) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= k) return;
    double s = 0;
    for (int64_t i = 0; i < m; i++)
        s += (double)cuop_ld(dy, dt, (size_t)i * k + j);
    cuop_st(db, dbt, j, (float)s);
}

} // namespace

/* ---- cuDNN state in the operators' context: handle, algorithm table, workspace ---- */

struct cuop_conv_state {
    struct Key {
        int pass, n, h, w, c, k, kh, kw, sh, sw, ph, pw, tensor_cores, data;
    };
    struct Entry {
        Key key;
        int used, algo; /* algo -1: cuDNN offered none, or refused to run a 16-bit plan
                         * (remembered, so that it is asked once) */
        cudnnMathType_t math;
        size_t ws;
    };
    /* Entries for every (pass, shape, math, data type) a process meets: ResNet-50 alone has 24
     * distinct convolution shapes, 71 (pass, shape) pairs; a table of 64 missed on every call
     * of a ResNet-50 step (a cyclic pattern longer than the table). When it is full, entries
     * are replaced first in, first out. */
    static constexpr int kTable = 1024;

    std::mutex mutex;
    cudnnHandle_t handle = nullptr;
    Entry table[kTable] = {};
    int next = 0;
    void *ws = nullptr;
    size_t ws_cap = 0;
    int64_t fallbacks = 0; /* 16-bit plans found unusable (mpx_cuda_conv16_fallbacks) */
};

namespace {

using Key = cuop_conv_state::Key;
using Entry = cuop_conv_state::Entry;
using State = cuop_conv_state;
constexpr int kTable = cuop_conv_state::kTable;

/* cuDNN's statuses for "this configuration is not supported" (pattern, shape, data type,
 * layout, padding, shared memory, launch parameters) are MPX_ERR_UNSUPPORTED, on which the
 * 16-bit passes fall back to FP32 data. The rest of its 3000 family says the installation
 * cannot run it (driver, runtime, architecture, a missing sublibrary): a backend failure, which
 * must not turn into a quiet fallback. */
int cudnn_unsupported(cudnnStatus_t st) {
    switch (st) {
    case CUDNN_STATUS_NOT_SUPPORTED:
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN:
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE:
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE:
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT:
    case CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT:
    case CUDNN_STATUS_NOT_SUPPORTED_PADDING:
    case CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM: return 1;
    default: return 0;
    }
}

mpx_status cudnn_fail(const char *op, const char *what, cudnnStatus_t st) {
    return mpx_fail(cudnn_unsupported(st) ? MPX_ERR_UNSUPPORTED : MPX_ERR_BACKEND, "%s: %s: %s",
                    op, what, cudnnGetErrorString(st));
}

#define CUDNN_TRY(op, expr)                                                                        \
    do {                                                                                           \
        cudnnStatus_t cudnn_st_ = (expr);                                                          \
        if (cudnn_st_ != CUDNN_STATUS_SUCCESS) return cudnn_fail((op), #expr, cudnn_st_);          \
    } while (0)

mpx_status get_handle(State &S, const char *op, cudnnHandle_t *out) {
    if (!S.handle) {
        cudnnHandle_t h = nullptr;
        CUDNN_TRY(op, cudnnCreate(&h));
        S.handle = h;
    }
    CUDNN_TRY(op, cudnnSetStream(S.handle, 0));
    *out = S.handle;
    return MPX_OK;
}

mpx_status workspace(State &S, size_t bytes, void **out) {
    if (bytes > S.ws_cap) {
        if (S.ws)
            MPX_CUDA_TRY(cudaFree(S.ws)); /* synchronises: queued users are done */
        S.ws = nullptr;
        S.ws_cap = 0;
        MPX_CUDA_TRY(cudaMalloc(&S.ws, bytes));
        S.ws_cap = bytes;
    }
    *out = bytes ? S.ws : nullptr;
    return MPX_OK;
}

} // namespace

cuop_conv_state *cuop_conv_state_new(void) { return new (std::nothrow) cuop_conv_state(); }

void cuop_conv_state_delete(cuop_conv_state *S) { delete S; }

size_t cuop_conv_workspace_bytes(cuop_conv_state *S) {
    std::lock_guard<std::mutex> lock(S->mutex);
    return S->ws_cap;
}

mpx_status cuop_conv_release(cuop_conv_state *S) {
    std::lock_guard<std::mutex> lock(S->mutex);
    cudnnStatus_t hs = S->handle ? cudnnDestroy(S->handle) : CUDNN_STATUS_SUCCESS;
    S->handle = nullptr;
    for (Entry &e : S->table)
        e = Entry{};
    S->next = 0;
    cudaError_t ws = S->ws ? cudaFree(S->ws) : cudaSuccess;
    S->ws = nullptr;
    S->ws_cap = 0;
    if (hs != CUDNN_STATUS_SUCCESS) return cudnn_fail("mpx_cuda_release", "cudnnDestroy", hs);
    MPX_CUDA_TRY(ws);
    return MPX_OK;
}

namespace {

/* The descriptors of one call; destroyed by the destructor. */
struct Descs {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    ~Descs() {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }
};

/* Descriptors for data of type `data` (FP32, or F16/BF16 for the 16-bit forward) with FP32
 * compute. */
mpx_status make_descs(const char *op, const mpx_conv2d_attr *a, const Geom &g, int tensor_cores,
                      cudnnDataType_t data, Descs *d) {
    CUDNN_TRY(op, cudnnCreateTensorDescriptor(&d->x));
    CUDNN_TRY(op, cudnnCreateTensorDescriptor(&d->y));
    CUDNN_TRY(op, cudnnCreateFilterDescriptor(&d->w));
    CUDNN_TRY(op, cudnnCreateConvolutionDescriptor(&d->conv));
    CUDNN_TRY(op, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NHWC, data, g.n, g.c, g.h, g.w));
    CUDNN_TRY(op, cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NHWC, data, g.n, g.k, g.oh, g.ow));
    CUDNN_TRY(op, cudnnSetFilter4dDescriptor(d->w, data, CUDNN_TENSOR_NHWC, g.k, g.c, g.kh, g.kw));
    CUDNN_TRY(op, cudnnSetConvolution2dDescriptor(d->conv, a->pad_h, a->pad_w, a->stride_h,
                                                  a->stride_w, 1, 1, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
    CUDNN_TRY(op, cudnnSetConvolutionMathType(d->conv, tensor_cores ? CUDNN_TENSOR_OP_MATH
                                                                    : CUDNN_FMA_MATH));
    return MPX_OK;
}

/* Transform-based algorithms (FFT, Winograd): their error is not bounded element-wise by the
 * summation bound of a direct/GEMM convolution, so they are never chosen. */
bool transform_algo(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transform_algo(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transform_algo(cudnnConvolutionBwdFilterAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* 1 when a heuristic result is usable: supported, deterministic, not a transform-based
 * algorithm, and of FMA (or default) math, or tensor-op math when the operands are declared
 * exact. Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: its down-conversion to F16 would not be
 * exact for BF16 values outside F16's range. */
template <class Perf> int usable(const Perf &p, int tensor_cores) {
    const int math = p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH ||
                     (tensor_cores && p.mathType == CUDNN_TENSOR_OP_MATH);
    return p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC && math &&
           !transform_algo(p.algo);
}

/* The math type an algorithm runs in: the one cuDNN reported it with (its rule for running a
 * heuristic's choice) when tensor cores are allowed; else FMA math, whatever was reported, so
 * that a "default math" report cannot let TF32 touch FP32 operands. */
template <class Perf> cudnnMathType_t run_math(const Perf &p, int tensor_cores) {
    return tensor_cores ? p.mathType : CUDNN_FMA_MATH;
}

mpx_status no_algorithm(const char *op, const mpx_conv2d_attr *a, const Geom &g, int tensor_cores,
                        cudnnDataType_t data) {
    return mpx_fail(MPX_ERR_UNSUPPORTED,
                    "%s: cuDNN offers no deterministic %s algorithm for %s x [%d,%d,%d,%d], "
                    "w [%d,%d,%d,%d], stride %dx%d, pad %dx%d",
                    op, tensor_cores ? "FP32 or tensor-op" : "FP32 (non-tensor-op)",
                    data == CUDNN_DATA_HALF       ? "f16"
                    : data == CUDNN_DATA_BFLOAT16 ? "bf16"
                                                  : "f32",
                    g.n, g.h, g.w, g.c, g.kh, g.kw, g.c, g.k, a->stride_h, a->stride_w, a->pad_h,
                    a->pad_w);
}

/* The cached (algorithm, workspace bytes) for this pass, shape, math and data type, chosen on
 * first use (a shape cuDNN has no usable algorithm for is remembered too);
 * the descriptor's math type is set to the one it runs in (run_math) before the workspace is
 * sized and for the call. */
Key make_key(int pass, const mpx_conv2d_attr *a, const Geom &g, int tensor_cores,
             cudnnDataType_t data) {
    Key key;
    memset(&key, 0, sizeof key);
    key = Key{pass,        g.n,         g.h,      g.w,      g.c,         g.k, g.kh,
              g.kw,        a->stride_h, a->stride_w, a->pad_h, a->pad_w, tensor_cores, (int)data};
    return key;
}

/* The table entry of `key`, or NULL. */
Entry *find_entry(State &S, const Key &key) {
    for (int i = 0; i < kTable && S.table[i].used; i++) /* filled in order from 0 */
        if (memcmp(&S.table[i].key, &key, sizeof key) == 0)
            return &S.table[i];
    return nullptr;
}

mpx_status pick_algo(State &S, int pass, const mpx_conv2d_attr *a, const Geom &g, int tensor_cores,
                     cudnnDataType_t data, cudnnHandle_t h, const Descs &d, int *algo, size_t *ws) {
    const char *op = kPass[pass];
    const Key key = make_key(pass, a, g, tensor_cores, data);
    if (const Entry *hit = find_entry(S, key)) {
        if (hit->algo < 0) return no_algorithm(op, a, g, tensor_cores, data);
        *algo = hit->algo;
        *ws = hit->ws;
        CUDNN_TRY(op, cudnnSetConvolutionMathType(d.conv, hit->math));
        return MPX_OK;
    }
    enum { kMax = 16 };
    int got = 0, chosen = -1;
    cudnnMathType_t math = CUDNN_FMA_MATH;
    size_t bytes = 0;
    if (pass == MPX_CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t perf[kMax];
        CUDNN_TRY(op, cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMax, &got,
                                                             perf));
        for (int i = 0; i < got && chosen < 0; i++)
            if (usable(perf[i], tensor_cores)) {
                chosen = (int)perf[i].algo;
                math = run_math(perf[i], tensor_cores);
            }
        if (chosen >= 0) {
            CUDNN_TRY(op, cudnnSetConvolutionMathType(d.conv, math));
            CUDNN_TRY(op, cudnnGetConvolutionForwardWorkspaceSize(
                              h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)chosen, &bytes));
        }
    } else if (pass == MPX_CONV_BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
        CUDNN_TRY(op, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kMax,
                                                                  &got, perf));
        for (int i = 0; i < got && chosen < 0; i++)
            if (usable(perf[i], tensor_cores)) {
                chosen = (int)perf[i].algo;
                math = run_math(perf[i], tensor_cores);
            }
        if (chosen >= 0) {
            CUDNN_TRY(op, cudnnSetConvolutionMathType(d.conv, math));
            CUDNN_TRY(op, cudnnGetConvolutionBackwardDataWorkspaceSize(
                              h, d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)chosen,
                              &bytes));
        }
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
        CUDNN_TRY(op, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                    kMax, &got, perf));
        for (int i = 0; i < got && chosen < 0; i++)
            if (usable(perf[i], tensor_cores)) {
                chosen = (int)perf[i].algo;
                math = run_math(perf[i], tensor_cores);
            }
        if (chosen >= 0) {
            CUDNN_TRY(op, cudnnSetConvolutionMathType(d.conv, math));
            CUDNN_TRY(op, cudnnGetConvolutionBackwardFilterWorkspaceSize(
                              h, d.x, d.y, d.conv, d.w, (cudnnConvolutionBwdFilterAlgo_t)chosen,
                              &bytes));
        }
    }
    Entry &e = S.table[S.next];
    S.next = (S.next + 1) % kTable;
    e.key = key;
    e.used = 1;
    e.algo = chosen;
    e.math = math;
    e.ws = bytes;
    if (chosen < 0 && data != CUDNN_DATA_FLOAT)
        S.fallbacks++;
    if (chosen < 0) return no_algorithm(op, a, g, tensor_cores, data);
    *algo = chosen;
    *ws = bytes;
    return MPX_OK;
}

/* A pass's cuDNN setup for data of type `data`: descriptors, the cached algorithm (the
 * descriptor's math type set to the one it runs in) and the shared workspace. */
struct Plan {
    Descs d;
    int algo = 0;
    size_t ws_bytes = 0;
    void *ws = nullptr;
};

mpx_status plan_pass(State &S, int pass, const char *op, const mpx_conv2d_attr *a, const Geom &g,
                     int tensor_cores, cudnnDataType_t data, cudnnHandle_t h, Plan *p) {
    MPX_TRY(make_descs(op, a, g, tensor_cores, data, &p->d));
    MPX_TRY(pick_algo(S, pass, a, g, tensor_cores, data, h, p->d, &p->algo, &p->ws_bytes));
    return workspace(S, p->ws_bytes, &p->ws);
}

/* A 16-bit pass's cuDNN call failed with `st`: when cuDNN does not support it, the plan is
 * remembered as unusable (the next call of this pass and shape goes straight to FP32 data,
 * without building descriptors and reordering weights for a call that fails) and counted. */
mpx_status refused16(State &S, int pass, const mpx_conv2d_attr *a, const Geom &g,
                     cudnnDataType_t data, const char *what, cudnnStatus_t st) {
    const mpx_status r = cudnn_fail(kPass[pass], what, st);
    Entry *e = r == MPX_ERR_UNSUPPORTED ? find_entry(S, make_key(pass, a, g, 1, data)) : nullptr;
    if (e && e->algo >= 0) {
        e->algo = -1;
        S.fallbacks++;
    }
    return r;
}

/* Scratch freed at scope exit (stream-ordered). */
struct Scratch {
    void *p[4] = {nullptr, nullptr, nullptr, nullptr};
    ~Scratch() {
        for (void *q : p)
            mpx_cuda_scratch_free(q);
    }
};

/* The tensor's elements as FP32: its own data when F32, else decoded into scratch slot `slot`. */
mpx_status as_f32(const mpx_tensor *t, Scratch *s, int slot, const float **out) {
    if (t->dtype == MPX_F32) {
        *out = (const float *)t->data;
        return MPX_OK;
    }
    const size_t n = (size_t)mpx_tensor_numel(t);
    MPX_TRY(cuop_scratch(n * sizeof(float), &s->p[slot]));
    MPX_TRY(mpx_decode_cuda(t->dtype, t->data, (float *)s->p[slot], n));
    *out = (const float *)s->p[slot];
    return MPX_OK;
}

/* w (HWIO) as KRSC in `dt` (FP32, or w's own 16-bit format) in scratch slot `slot`. */
mpx_status weights_krsc(const char *op, const mpx_tensor *w, const Geom &g, mpx_dtype dt,
                        Scratch *s, int slot, const void **out) {
    const size_t n = (size_t)mpx_tensor_numel(w);
    MPX_TRY(cuop_scratch(n * mpx_dtype_size(dt), &s->p[slot]));
    unsigned grid = 0;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    hwio_to_krsc<<<grid, kLaunchThreads>>>(w->data, w->dtype, s->p[slot], dt, g.kh, g.kw, g.c,
                                           g.k, n);
    CUOP_LAUNCHED(op, "weights reorder", w);
    *out = s->p[slot];
    return MPX_OK;
}

/* Where cuDNN writes an output: the tensor itself when it is F32 and needs no bias, else FP32
 * scratch in slot `slot` (*direct = 0). */
mpx_status out_f32(const mpx_tensor *t, int with_bias, Scratch *s, int slot, float **out,
                   int *direct) {
    *direct = t->dtype == MPX_F32 && !with_bias;
    if (*direct) {
        *out = (float *)t->data;
        return MPX_OK;
    }
    MPX_TRY(cuop_scratch((size_t)mpx_tensor_numel(t) * sizeof(float), &s->p[slot]));
    *out = (float *)s->p[slot];
    return MPX_OK;
}

/* t = src (+ bias), rounded once into t's dtype. */
mpx_status finish(const char *op, const float *src, mpx_tensor *t, const mpx_tensor *b, int k) {
    const size_t n = (size_t)mpx_tensor_numel(t);
    unsigned grid = 0;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    bias_store<<<grid, kLaunchThreads>>>(src, t->data, t->dtype, b ? b->data : nullptr,
                                         b ? b->dtype : MPX_F32, k, n);
    CUOP_LAUNCHED(op, "output", t);
    return MPX_OK;
}

} // namespace

namespace {

/* cuDNN's name for a 16-bit storage format. */
cudnnDataType_t data16(mpx_dtype t) { return t == MPX_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

/* dw (HWIO) from src (KRSC in sdt): one rounding from FP32, or an exact copy of 16-bit values. */
mpx_status weights_hwio(const char *op, const void *src, mpx_dtype sdt, const Geom &g,
                        mpx_tensor *dw) {
    const size_t nw = (size_t)mpx_tensor_numel(dw);
    unsigned grid = 0;
    MPX_TRY(mpx_cuda_grid(nw, &grid));
    krsc_to_hwio<<<grid, kLaunchThreads>>>(src, sdt, dw->data, dw->dtype, g.kh, g.kw, g.c, g.k,
                                           nw);
    CUOP_LAUNCHED(op, "weight-gradient reorder", dw);
    return MPX_OK;
}

/* db (if any) = the column sums of dy. */
mpx_status bias_grad(const char *op, const Geom &g, const mpx_tensor *dy, mpx_tensor *db) {
    if (!db) return MPX_OK;
    const int64_t m = (int64_t)g.n * g.oh * g.ow;
    column_sum<<<(g.k + 127) / 128, 128>>>(dy->data, dy->dtype, m, g.k, db->data, db->dtype);
    CUOP_LAUNCHED(op, "bias-gradient sum", db);
    return MPX_OK;
}

/* The forward on 16-bit data: x, w and y all in the 16-bit format the operands are declared
 * exact in, and no bias. cuDNN then reads x as stored and writes y itself (FP32 compute: the
 * tensor cores' products of F16/BF16 values are exact, the sums FP32, y rounded once), which
 * saves decoding x into FP32 scratch and staging y. MPX_ERR_UNSUPPORTED when cuDNN has no usable
 * algorithm for it; the caller then takes the FP32 path. */
mpx_status forward16(State &S, const char *op, const mpx_conv2d_attr *a, const Geom &g,
                     cudnnHandle_t h, const mpx_tensor *x, const mpx_tensor *w, mpx_tensor *y) {
    const cudnnDataType_t data = data16(x->dtype);
    Plan p;
    MPX_TRY(plan_pass(S, MPX_CONV_FORWARD, op, a, g, 1, data, h, &p));
    Scratch s;
    const void *wk = nullptr;
    MPX_TRY(weights_krsc(op, w, g, x->dtype, &s, 0, &wk));
    const float one = 1.0f, zero = 0.0f;
    const cudnnStatus_t st =
        cudnnConvolutionForward(h, &one, p.d.x, x->data, p.d.w, wk, p.d.conv,
                                (cudnnConvolutionFwdAlgo_t)p.algo, p.ws, p.ws_bytes, &zero,
                                p.d.y, y->data);
    if (st != CUDNN_STATUS_SUCCESS)
        return refused16(S, MPX_CONV_FORWARD, a, g, data, "cudnnConvolutionForward", st);
    return MPX_OK;
}

/* Backward-data on 16-bit data: dy, w and dx in the declared 16-bit format — the gradient the
 * executor lets an op round itself (graph_exec.c: grad_direct). cuDNN reads dy as stored and
 * writes dx rounded once from its FP32 sums. MPX_ERR_UNSUPPORTED: no usable algorithm. */
mpx_status backward_data16(State &S, const char *op, const mpx_conv2d_attr *a, float scale,
                           const Geom &g, cudnnHandle_t h, const mpx_tensor *dy,
                           const mpx_tensor *w, mpx_tensor *dx) {
    const cudnnDataType_t data = data16(dy->dtype);
    Plan p;
    MPX_TRY(plan_pass(S, MPX_CONV_BACKWARD_DATA, op, a, g, 1, data, h, &p));
    Scratch s;
    const void *wk = nullptr;
    MPX_TRY(weights_krsc(op, w, g, w->dtype, &s, 0, &wk));
    const float zero = 0.0f;
    const cudnnStatus_t st =
        cudnnConvolutionBackwardData(h, &scale, p.d.w, wk, p.d.y, dy->data, p.d.conv,
                                     (cudnnConvolutionBwdDataAlgo_t)p.algo, p.ws, p.ws_bytes,
                                     &zero, p.d.x, dx->data);
    if (st != CUDNN_STATUS_SUCCESS)
        return refused16(S, MPX_CONV_BACKWARD_DATA, a, g, data, "cudnnConvolutionBackwardData", st);
    return MPX_OK;
}

/* Backward-weights on 16-bit data: x, dy and dw in the declared 16-bit format (a parameter
 * gradient the executor lets an op round itself). cuDNN writes the KRSC gradient rounded once
 * into 16-bit scratch; the reorder into HWIO copies those values exactly. The bias gradient is
 * the caller's. MPX_ERR_UNSUPPORTED: no usable algorithm. */
mpx_status backward_weights16(State &S, const char *op, const mpx_conv2d_attr *a, const Geom &g,
                              cudnnHandle_t h, const mpx_tensor *dy, const mpx_tensor *x,
                              mpx_tensor *dw) {
    const cudnnDataType_t data = data16(x->dtype);
    Plan p;
    MPX_TRY(plan_pass(S, MPX_CONV_BACKWARD_WEIGHTS, op, a, g, 1, data, h, &p));
    Scratch s;
    const size_t nw = (size_t)mpx_tensor_numel(dw);
    MPX_TRY(cuop_scratch(nw * mpx_dtype_size(dw->dtype), &s.p[0]));
    const float one = 1.0f, zero = 0.0f;
    const cudnnStatus_t st =
        cudnnConvolutionBackwardFilter(h, &one, p.d.x, x->data, p.d.y, dy->data, p.d.conv,
                                       (cudnnConvolutionBwdFilterAlgo_t)p.algo, p.ws, p.ws_bytes,
                                       &zero, p.d.w, s.p[0]);
    if (st != CUDNN_STATUS_SUCCESS)
        return refused16(S, MPX_CONV_BACKWARD_WEIGHTS, a, g, data, "cudnnConvolutionBackwardFilter",
                         st);
    return weights_hwio(op, s.p[0], dw->dtype, g, dw);
}

} // namespace

extern "C" int64_t mpx_cuda_conv16_fallbacks(mpx_cuda_ctx *ctx) {
    std::lock_guard<std::mutex> lock(ctx->conv->mutex);
    return ctx->conv->fallbacks;
}

extern "C" mpx_status mpx_conv2d_forward_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a,
                                              const mpx_tensor *x, const mpx_tensor *w,
                                              const mpx_tensor *b, mpx_tensor *y) {
    const char *op = kPass[MPX_CONV_FORWARD];
    Geom g = {};
    MPX_TRY(conv_check(op, a, "x", x, "w", w, "y", y, "b", b, &g));
    State &S = *ctx->conv;
    std::lock_guard<std::mutex> lock(S.mutex);
    cudnnHandle_t h = nullptr;
    MPX_TRY(get_handle(S, op, &h));
    const int tc = cuop_tensor_cores(ctx);
    const mpx_dtype low = mpx_cuda_operand_format(ctx);
    if (tc && !b && x->dtype == low && w->dtype == low && y->dtype == low) {
        mpx_status st = forward16(S, op, a, g, h, x, w, y);
        if (st != MPX_ERR_UNSUPPORTED) return st;
    }
    Plan p;
    MPX_TRY(plan_pass(S, MPX_CONV_FORWARD, op, a, g, tc, CUDNN_DATA_FLOAT, h, &p));
    Scratch s;
    const float *xf = nullptr;
    const void *wf = nullptr;
    float *yf = nullptr;
    int direct = 0;
    MPX_TRY(as_f32(x, &s, 0, &xf));
    MPX_TRY(weights_krsc(op, w, g, MPX_F32, &s, 1, &wf));
    MPX_TRY(out_f32(y, b != nullptr, &s, 2, &yf, &direct));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(op, cudnnConvolutionForward(h, &one, p.d.x, xf, p.d.w, wf, p.d.conv,
                                          (cudnnConvolutionFwdAlgo_t)p.algo, p.ws, p.ws_bytes,
                                          &zero, p.d.y, yf));
    if (!direct) MPX_TRY(finish(op, yf, y, b, g.k));
    return MPX_OK;
}

extern "C" mpx_status mpx_conv2d_backward_data_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a,
                                                    const mpx_tensor *dy, const mpx_tensor *w,
                                                    mpx_tensor *dx) {
    return mpx_conv2d_backward_data_scaled_cuda(ctx, a, 1.0f, dy, w, dx);
}

extern "C" mpx_status mpx_conv2d_backward_data_scaled_cuda(mpx_cuda_ctx *ctx,
                                                           const mpx_conv2d_attr *a, float scale,
                                                           const mpx_tensor *dy,
                                                           const mpx_tensor *w, mpx_tensor *dx) {
    const char *op = kPass[MPX_CONV_BACKWARD_DATA];
    MPX_TRY(cuop_expect_scale(op, scale));
    Geom g = {};
    MPX_TRY(conv_check(op, a, "dx", dx, "w", w, "dy", dy, nullptr, nullptr, &g));
    State &S = *ctx->conv;
    std::lock_guard<std::mutex> lock(S.mutex);
    cudnnHandle_t h = nullptr;
    MPX_TRY(get_handle(S, op, &h));
    const int tc = cuop_tensor_cores(ctx);
    const mpx_dtype low = mpx_cuda_operand_format(ctx);
    if (tc && dy->dtype == low && w->dtype == low && dx->dtype == low) {
        mpx_status st = backward_data16(S, op, a, scale, g, h, dy, w, dx);
        if (st != MPX_ERR_UNSUPPORTED) return st;
    }
    Plan p;
    MPX_TRY(plan_pass(S, MPX_CONV_BACKWARD_DATA, op, a, g, tc, CUDNN_DATA_FLOAT, h, &p));
    Scratch s;
    const float *dyf = nullptr;
    const void *wf = nullptr;
    float *dxf = nullptr;
    int direct = 0;
    MPX_TRY(as_f32(dy, &s, 0, &dyf));
    MPX_TRY(weights_krsc(op, w, g, MPX_F32, &s, 1, &wf));
    MPX_TRY(out_f32(dx, 0, &s, 2, &dxf, &direct));
    const float zero = 0.0f;
    CUDNN_TRY(op, cudnnConvolutionBackwardData(h, &scale, p.d.w, wf, p.d.y, dyf, p.d.conv,
                                               (cudnnConvolutionBwdDataAlgo_t)p.algo, p.ws,
                                               p.ws_bytes, &zero, p.d.x, dxf));
    if (!direct) MPX_TRY(finish(op, dxf, dx, nullptr, g.c));
    return MPX_OK;
}

extern "C" mpx_status mpx_conv2d_backward_weights_cuda(mpx_cuda_ctx *ctx, const mpx_conv2d_attr *a,
                                                       const mpx_tensor *dy, const mpx_tensor *x,
                                                       mpx_tensor *dw, mpx_tensor *db) {
    const char *op = kPass[MPX_CONV_BACKWARD_WEIGHTS];
    Geom g = {};
    MPX_TRY(conv_check(op, a, "x", x, "dw", dw, "dy", dy, "db", db, &g));
    State &S = *ctx->conv;
    std::lock_guard<std::mutex> lock(S.mutex);
    cudnnHandle_t h = nullptr;
    MPX_TRY(get_handle(S, op, &h));
    const int tc = cuop_tensor_cores(ctx);
    const mpx_dtype low = mpx_cuda_operand_format(ctx);
    if (tc && x->dtype == low && dy->dtype == low && dw->dtype == low) {
        mpx_status st = backward_weights16(S, op, a, g, h, dy, x, dw);
        if (st != MPX_ERR_UNSUPPORTED) return st == MPX_OK ? bias_grad(op, g, dy, db) : st;
    }
    Plan p;
    MPX_TRY(plan_pass(S, MPX_CONV_BACKWARD_WEIGHTS, op, a, g, tc, CUDNN_DATA_FLOAT, h, &p));
    Scratch s;
    const float *xf = nullptr, *dyf = nullptr;
    MPX_TRY(as_f32(x, &s, 0, &xf));
    MPX_TRY(as_f32(dy, &s, 1, &dyf));
    const size_t nw = (size_t)mpx_tensor_numel(dw);
    MPX_TRY(cuop_scratch(nw * sizeof(float), &s.p[2]));
    float *dwf = (float *)s.p[2];
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(op, cudnnConvolutionBackwardFilter(h, &one, p.d.x, xf, p.d.y, dyf, p.d.conv,
                                                 (cudnnConvolutionBwdFilterAlgo_t)p.algo, p.ws,
                                                 p.ws_bytes, &zero, p.d.w, dwf));
    MPX_TRY(weights_hwio(op, dwf, MPX_F32, g, dw));
    return bias_grad(op, g, dy, db);
}
