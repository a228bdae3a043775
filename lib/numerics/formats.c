/* formats.c — scalar FP32 <-> FP16 / BF16 / FP8 conversions, rounding to TF32, and the table of
 * format facts.
 *
 * All conversions are exact IEEE round-to-nearest-even on integer bits (fp_bits.h), so they do
 * not depend on the FPU's rounding mode or on flush-to-zero settings.
 */
#include "mpx/numerics.h"

#include "lib/numerics/fp_bits.h"

uint16_t mpx_f32_to_f16(float x) { return (uint16_t)mpx_fp_encode(MPX_FP_F16, x, 0, 0, 0); }
float mpx_f16_to_f32(uint16_t h) { return mpx_fp_decode(MPX_FP_F16, h); }

uint16_t mpx_f32_to_bf16(float x) { return (uint16_t)mpx_fp_encode(MPX_FP_BF16, x, 0, 0, 0); }
float mpx_bf16_to_f32(uint16_t h) { return mpx_fp_decode(MPX_FP_BF16, h); }

uint8_t mpx_f32_to_e4m3(float x) { return (uint8_t)mpx_fp_encode(MPX_FP_E4M3, x, 0, 0, 0); }
float mpx_e4m3_to_f32(uint8_t v) { return mpx_fp_decode(MPX_FP_E4M3, v); }

uint8_t mpx_f32_to_e5m2(float x) { return (uint8_t)mpx_fp_encode(MPX_FP_E5M2, x, 0, 0, 0); }
float mpx_e5m2_to_f32(uint8_t v) { return mpx_fp_decode(MPX_FP_E5M2, v); }

float mpx_round_tf32(float x) { return mpx_fp_float(mpx_fp_tf32_rne_bits(mpx_fp_bits(x))); }

static const mpx_format_info g_formats[] = {
    [MPX_F32] = {"f32", 8, 23, 0x1.fffffep127, 0x1p-126, 0x1p-149, 1},
    [MPX_F16] = {"f16", 5, 10, 65504.0, 0x1p-14, 0x1p-24, 1},
    [MPX_BF16] = {"bf16", 8, 7, 0x1.fep127, 0x1p-126, 0x1p-133, 1},
    [MPX_F8_E4M3] = {"f8_e4m3", 4, 3, 448.0, 0x1p-6, 0x1p-9, 0},
    [MPX_F8_E5M2] = {"f8_e5m2", 5, 2, 57344.0, 0x1p-14, 0x1p-16, 1},
    [MPX_TF32] = {"tf32", 8, 10, 0x1.ffcp127, 0x1p-126, 0x1p-136, 1},
};

const mpx_format_info *mpx_format(mpx_dtype t) {
    switch (t) {
    case MPX_F32:
    case MPX_F16:
    case MPX_BF16:
    case MPX_F8_E4M3:
    case MPX_F8_E5M2:
    case MPX_TF32: return &g_formats[t];
    default: return 0;
    }
}

float mpx_round_to(mpx_dtype t, float x) {
    switch (t) {
    case MPX_F16: return mpx_f16_to_f32(mpx_f32_to_f16(x));
    case MPX_BF16: return mpx_bf16_to_f32(mpx_f32_to_bf16(x));
    case MPX_F8_E4M3: return mpx_e4m3_to_f32(mpx_f32_to_e4m3(x));
    case MPX_F8_E5M2: return mpx_e5m2_to_f32(mpx_f32_to_e5m2(x));
    case MPX_TF32: return mpx_round_tf32(x);
    default: return x;
    }
}

int mpx_hist_bin(float x) { return mpx_fp_hist_bin(mpx_fp_bits(x)); }
