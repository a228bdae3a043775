/* precision.c — the precision policy: role -> storage dtype. */
#include "mpx/precision.h"

#include <string.h>

int mpx_precision_init(mpx_precision *p, const char *mode_name, const char *rounding_name,
                       uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->gemm_round = MPX_F32;
    if (strcmp(mode_name, "fp32") == 0) {
        p->mode = MPX_MODE_FP32;
        p->low = MPX_F32;
        p->stats_format = MPX_F16;
    } else if (strcmp(mode_name, "fp16") == 0) {
        p->mode = MPX_MODE_FP16;
        p->low = MPX_F16;
        p->stats_format = MPX_F16;
    } else if (strcmp(mode_name, "bf16") == 0) {
        p->mode = MPX_MODE_BF16;
        p->low = MPX_BF16;
        p->stats_format = MPX_BF16;
    } else if (strcmp(mode_name, "fp8") == 0) {
        p->mode = MPX_MODE_FP8;
        p->low = MPX_BF16;
        p->stats_format = MPX_BF16;
        p->gemm_round = MPX_F8_E4M3;
        p->fp8.history = 1024;
    } else if (strcmp(mode_name, "fixed16") == 0) {
        p->mode = MPX_MODE_FIXED16;
        p->low = MPX_F32;
        p->stats_format = MPX_F16;
        p->fixed_frac = 14;
    } else if (strcmp(mode_name, "tf32") == 0) {
        p->mode = MPX_MODE_TF32;
        p->low = MPX_F32;
        p->stats_format = MPX_F16;
        p->gemm_round = MPX_TF32;
    } else {
        return -1;
    }
    if (strcmp(rounding_name, "rne") == 0)
        p->rounding = MPX_ROUND_RNE;
    else if (strcmp(rounding_name, "stochastic") == 0)
        p->rounding = MPX_ROUND_STOCHASTIC;
    else
        return -1;
    p->update_rounding = p->rounding;
    p->seed = seed;
    p->tensor_cores = 1;
    p->direct_io = 1;
    p->master_weights = 1;
    return 0;
}

int mpx_precision_set_masters(mpx_precision *p, int master_weights, int state_in_storage) {
    if ((!master_weights || state_in_storage) && p->low == MPX_F32) return -1;
    p->master_weights = master_weights != 0;
    p->state_in_storage = state_in_storage != 0;
    return 0;
}

mpx_dtype mpx_precision_dtype(const mpx_precision *p, mpx_tensor_role role) {
    switch (role) {
    case MPX_ROLE_ACTIVATION:
    case MPX_ROLE_ACT_GRAD:
    case MPX_ROLE_WEIGHT:
    case MPX_ROLE_WEIGHT_GRAD: return p->low;
    case MPX_ROLE_MASTER: return p->master_weights ? MPX_F32 : p->low;
    case MPX_ROLE_OPT_STATE: return p->state_in_storage ? p->low : MPX_F32;
    case MPX_ROLE_NORM_PARAM:
    case MPX_ROLE_UNSCALED_GRAD:
    case MPX_ROLE_REDUCTION:
    case MPX_ROLE_COUNT: break;
    }
    return MPX_F32;
}

mpx_rounding mpx_precision_rounding(const mpx_precision *p, mpx_tensor_role role) {
    return role == MPX_ROLE_MASTER || role == MPX_ROLE_OPT_STATE ? p->update_rounding
                                                                  : p->rounding;
}

const char *mpx_precision_mode_name(mpx_precision_mode m) {
    switch (m) {
    case MPX_MODE_FP32: return "fp32";
    case MPX_MODE_FP16: return "fp16";
    case MPX_MODE_BF16: return "bf16";
    case MPX_MODE_TF32: return "tf32";
    case MPX_MODE_FP8: return "fp8";
    case MPX_MODE_FIXED16: return "fixed16";
    }
    return "?";
}

int mpx_precision_quantizes_operands(const mpx_precision *p) {
    return p->mode == MPX_MODE_FP8 || p->mode == MPX_MODE_FIXED16;
}

int mpx_precision_blocks_operands(const mpx_precision *p) {
    return p->mode == MPX_MODE_FP8 && p->fp8.recipe == MPX_FP8_MXFP8;
}
