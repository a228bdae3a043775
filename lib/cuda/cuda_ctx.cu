/* cuda_ctx.cu — the CUDA operators' context (cuda.h: mpx_cuda_ctx): the states of conv.cu and
 * gemm.cu side by side with the format the GEMM-family operands are declared exact in, made empty
 * (handles come on first use), released and freed whole, so that its owner (the CUDA backend, or a
 * test) decides their lifetime.
 */
#include <new>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

extern "C" mpx_cuda_ctx *mpx_cuda_ctx_create(void) {
    mpx_cuda_ctx *ctx = new (std::nothrow) mpx_cuda_ctx{nullptr, nullptr, MPX_F32};
    if (ctx) {
        ctx->conv = cuop_conv_state_new();
        ctx->gemm = cuop_gemm_state_new();
    }
    if (!ctx || !ctx->conv || !ctx->gemm) {
        if (ctx) {
            cuop_conv_state_delete(ctx->conv);
            cuop_gemm_state_delete(ctx->gemm);
        }
        delete ctx;
        mpx_fail(MPX_ERR_NOMEM, "out of memory for the CUDA operators' context");
        return nullptr;
    }
    return ctx;
}

extern "C" mpx_status mpx_cuda_set_operand_format(mpx_cuda_ctx *ctx, mpx_dtype exact) {
    if (exact != MPX_F32 && exact != MPX_F16 && exact != MPX_BF16 && exact != MPX_TF32)
        return mpx_fail(MPX_ERR_INPUT,
                        "mpx_cuda_set_operand_format: %s is not f32, f16, bf16 or tf32",
                        mpx_dtype_name(exact));
    ctx->operand_format = exact;
    return MPX_OK;
}

extern "C" mpx_dtype mpx_cuda_operand_format(const mpx_cuda_ctx *ctx) {
    return ctx->operand_format;
}

extern "C" mpx_status mpx_cuda_ctx_release(mpx_cuda_ctx *ctx) {
    MPX_CUDA_TRY(cudaDeviceSynchronize());
    mpx_status conv = cuop_conv_release(ctx->conv), gemm = cuop_gemm_release(ctx->gemm);
    return conv != MPX_OK ? conv : gemm;
}

extern "C" mpx_status mpx_cuda_ctx_free(mpx_cuda_ctx *ctx) {
    if (!ctx) return MPX_OK;
    const mpx_status st = mpx_cuda_ctx_release(ctx);
    cuop_conv_state_delete(ctx->conv);
    cuop_gemm_state_delete(ctx->gemm);
    delete ctx;
    return st;
}
