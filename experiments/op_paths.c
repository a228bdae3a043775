/* op_paths.c — which implementation each op family runs per precision mode on the CPU backend,
 * in words, for `mpx info` and `mpx bench` (a benchmark is only read right knowing what it
 * timed).
 *
 * The GEMM family (conv2d, linear, linear_t, bmm) takes 16-bit storage where oneDNN multiplies
 * the format natively here (ops.h: mpx_gemm_lowp_path); batch-norm, ReLU and add take it on
 * every CPU (decoded and rounded tile by tile inside their pass); every other op, and the GEMM
 * family elsewhere, runs FP32 arithmetic on values decoded from storage by the executor.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpx/backend.h"
#include "mpx/ops.h"

const char *cli_op_path(mpx_precision_mode mode, int direct_io, char *buf, size_t cap) {
    char path[160];
    switch (mode) {
    case MPX_MODE_FP32:
        snprintf(buf, cap, "conv2d on oneDNN convolutions, linear and bmm on oneDNN sgemm");
        break;
    case MPX_MODE_TF32:
        snprintf(buf, cap, "as fp32, on GEMM operands rounded to TF32 first");
        break;
    case MPX_MODE_FP8:
        snprintf(buf, cap, "as bf16, on GEMM operands quantized to FP8 first (E4M3, E5M2 "
                           "gradients; emulated: decoded FP8 values in FP32 GEMMs)");
        break;
    case MPX_MODE_FIXED16:
        snprintf(buf, cap, "as fp32, on GEMM operands quantized to 16-bit fixed point first");
        break;
    case MPX_MODE_BF16:
    case MPX_MODE_FP16: {
        mpx_cpu_ctx *ctx = mpx_backend_cpu_ctx(mpx_backend_cpu());
        if (ctx)
            mpx_gemm_lowp_path(ctx, mode == MPX_MODE_BF16 ? MPX_BF16 : MPX_F16, path, sizeof path);
        else
            snprintf(path, sizeof path, "(unknown: %s)", mpx_error_message());
        if (!direct_io)
            snprintf(buf, cap,
                     "every op FP32 on decoded values (precision.direct_io = false; the GEMM "
                     "family could run %s, batch-norm, relu and add on 16-bit tiles)",
                     path);
        else
            snprintf(buf, cap,
                     "conv2d, linear, bmm %s; batch-norm, relu, add on 16-bit tiles; other ops "
                     "FP32 on decoded values",
                     path);
        break;
    }
    }
    return buf;
}

void cli_print_op_paths(FILE *f, const char *indent, mpx_precision_mode mode, int direct_io) {
    char buf[320];
    fprintf(f, "%s%s: %s\n", indent, mpx_precision_mode_name(mode),
            cli_op_path(mode, direct_io, buf, sizeof buf));
}
