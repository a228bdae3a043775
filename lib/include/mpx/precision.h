/* precision.h — the one precision policy: where every tensor lives.
 *
 * A run's `precision.mode` (fp32 | fp16 | bf16) and `precision.rounding` resolve into this
 * policy once; the graph and the optimizer ask it for the storage dtype of every tensor by its
 * role and nothing else in the engine branches on the mode. The MPT recipe (docs/papers.md §1):
 *   master weights, optimizer state, norm parameters, losses, saved statistics: FP32
 *   conv/linear working weights and their gradients, activations, activation gradients:
 *   the low-precision format, with FP32 accumulation inside every op.
 * The master-weights ablation (MPT §3.1) moves the masters of low-precision parameters into
 * the working format (`master_weights = 0`: the optimizer's result is rounded into storage),
 * and optionally the optimizer state too (`state_in_storage`).
 */
#ifndef MPX_PRECISION_H
#define MPX_PRECISION_H

#include <stdint.h>

#include "mpx/numerics.h"
#include "mpx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tf32: FP32 storage everywhere, with the operands of every convolution, linear layer and batched
 * matmul rounded to TF32 (RNE) and FP32 accumulation: what FP32 training on tensor cores
 * computes (A100/H100 "TF32 mode"). */
/* fp8: bf16's storage, with the operands of every convolution, linear layer and batched matmul
 * quantized to FP8 as they are read (E4M3 inputs and weights, E5M2 output gradients: the hybrid
 * format of Transformer Engine) under one of the recipes of mpx_fp8_cfg; FP32 accumulation. */
/* fixed16: FP32 storage and masters, with the same operands quantized to 16-bit fixed point
 * Q(16, fixed_frac) as they are read (fixed.h; Gupta et al. 2015), rounded to nearest even or
 * stochastically by `rounding`; FP32 accumulation. */
typedef enum {
    MPX_MODE_FP32 = 0,
    MPX_MODE_FP16,
    MPX_MODE_BF16,
    MPX_MODE_TF32,
    MPX_MODE_FP8,
    MPX_MODE_FIXED16
} mpx_precision_mode;

/* How fp8 mode scales the GEMM operands it quantizes (fp8.h has the rules):
 *   delayed  per-tensor scales from the amax history of the last `history` steps (Transformer
 *            Engine's DelayedScaling; max or most recent), updated after every step;
 *   current  per-tensor scales from the tensor's own amax (TE's Float8CurrentScaling);
 *   mxfp8    32-element blocks along each operand's rows with E8M0 scales (OCP MX; no tensor
 *            scale), `mx_rule` floor (the spec) or ceil (cuBLAS, TE);
 *   als      inputs and weights as `current`; output gradients cast with no scale of their own:
 *            the adaptive loss scale the 2019 rule gives each layer (precision.scaling =
 *            adaptive, with E5M2's u_min 2^-16 and u_max 57344) is their scale. */
typedef enum { MPX_FP8_DELAYED = 0, MPX_FP8_CURRENT, MPX_FP8_MXFP8, MPX_FP8_ALS } mpx_fp8_recipe;
typedef struct {
    mpx_fp8_recipe recipe;
    int margin;      /* scale = max / amax / 2^margin */
    int history;     /* delayed: amax history length (TE: amax_history_len) */
    int most_recent; /* delayed: 1 the newest amax, 0 the history's maximum (TE: amax_compute_algo) */
    int pow2;        /* per-tensor scales rounded down to a power of two */
    int mx_ceil;     /* mxfp8: 1 the round-up scale rule, 0 the OCP floor rule */
} mpx_fp8_cfg;

typedef enum {
    MPX_ROLE_ACTIVATION,  /* op outputs in the forward pass */
    MPX_ROLE_ACT_GRAD,    /* gradients of activations */
    MPX_ROLE_WEIGHT,      /* working copy of conv/linear weights and biases */
    MPX_ROLE_WEIGHT_GRAD, /* their gradients as the backward op writes them */
    MPX_ROLE_NORM_PARAM,  /* batch-norm / layer-norm gamma, beta (and their gradients) */
    MPX_ROLE_MASTER,      /* the master copy of a low-precision parameter (what the optimizer
                             updates): FP32, or the working format without master weights */
    MPX_ROLE_OPT_STATE,   /* optimizer state (momentum, Adam moments): FP32, or the working
                             format when the state is kept in storage */
    MPX_ROLE_UNSCALED_GRAD, /* unscaled, accumulated parameter gradients: FP32 */
    MPX_ROLE_REDUCTION,   /* losses, softmax probabilities, saved norm statistics */
    MPX_ROLE_COUNT
} mpx_tensor_role;

typedef struct {
    mpx_precision_mode mode;
    mpx_dtype low;            /* the low-precision format of this mode (F32 in fp32 and tf32
                                 runs) */
    mpx_dtype stats_format;   /* the format under/overflow counts refer to: `low`, or F16 in
                                 fp32 and tf32 runs (what FP16 storage would have done) */
    mpx_rounding rounding;    /* storage casts: RNE or stochastic */
    mpx_dtype gemm_round;     /* TF32 in tf32 mode: the format the executor rounds the GEMM
                                 family's operands to (RNE, on every backend); F32: none */
    uint64_t seed;            /* stochastic rounding seed */
    int tensor_cores;         /* 16-bit and tf32 modes: the GEMM family may run on units that
                                 read its operands exactly (tensor cores); 0: FP32 FMA math.
                                 1 after mpx_precision_init. No effect on the CPU. */
    int direct_io;            /* 16-bit modes: operators that can read and write 16-bit storage
                                 themselves get it (backend.h: direct_io); 0: FP32 views decoded
                                 into scratch and rounded on commit, as on the CPU. The same
                                 bits either way; 1 after mpx_precision_init. */
    int master_weights;       /* 1: FP32 master copies of low-precision parameters (the MPT
                                 recipe; 1 after mpx_precision_init); 0: the optimizer updates
                                 the stored weights, w <- round(w - lr u) under
                                 `update_rounding` */
    int state_in_storage;     /* 1: optimizer state rounded into `low` after every update; 0 */
    mpx_rounding update_rounding; /* the optimizer's roundings into `low` (the weights without
                                 masters, state in storage); `rounding` after
                                 mpx_precision_init. Stochastic here and RNE in `rounding` is
                                 the pure-BF16 recipe of Zamirai et al. 2020 */
    mpx_fp8_cfg fp8;          /* fp8 mode: the recipe (gemm_round is F8_E4M3 then) */
    int fixed_frac;           /* fixed16 mode: fraction bits f of Q(16, f) (14 after init) */
} mpx_precision;

/* mode_name: "fp32" | "fp16" | "bf16" | "tf32" | "fp8" | "fixed16"; rounding_name: "rne" |
 * "stochastic". */
int mpx_precision_init(mpx_precision *p, const char *mode_name, const char *rounding_name,
                       uint64_t seed);
/* The master-weights ablation: whether low-precision parameters keep FP32 masters, and whether
 * the optimizer state lives in the low format; -1 (nothing changed) when either asks for the
 * low format in a mode whose low format is F32. */
int mpx_precision_set_masters(mpx_precision *p, int master_weights, int state_in_storage);
mpx_dtype mpx_precision_dtype(const mpx_precision *p, mpx_tensor_role role);
/* How values of `role` are rounded into their dtype: update_rounding for what the optimizer
 * writes (MASTER, OPT_STATE), `rounding` for every other storage cast. */
mpx_rounding mpx_precision_rounding(const mpx_precision *p, mpx_tensor_role role);
/* 1 when the mode quantizes the GEMM family's operands as they are read (fp8, fixed16): the
 * executor then counts those casts per layer (stats.h: operand). */
int mpx_precision_quantizes_operands(const mpx_precision *p);
/* 1 when the operands' format is block-scaled (fp8 mode's MXFP8 recipe): how an operand is
 * quantized then depends on the dimension the GEMM reading it reduces (blocks run along it). */
int mpx_precision_blocks_operands(const mpx_precision *p);
const char *mpx_precision_mode_name(mpx_precision_mode m);

#ifdef __cplusplus
}
#endif

#endif
