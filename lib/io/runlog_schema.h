/* runlog_schema.h — the run file's datasets (docs/design.md §6) as tables shared by the writer
 * (runlog.c) and the reader (runlog_export.c), so both use the same names, types and shapes.
 *
 * Three time series grow along their first axis: /train [T], /eval [E] and /stats [K] (with
 * [K, L] and [K, L, 83] members). In each table the `step` column comes LAST: it is written
 * after the other members of its series, so a series whose write failed part-way never shows
 * a step without its values; readers take the row count from `step`.
 * Chunks: 1024 rows for /train, 64 for /eval and /stats/step, 16 steps of [L] for the [K, L]
 * members, one step for the [K, L, 83] histograms (runlog.c says why).
 */
#ifndef MPX_IO_RUNLOG_SCHEMA_H
#define MPX_IO_RUNLOG_SCHEMA_H

#include <hdf5.h>
#include <stddef.h>

#include "mpx/stats.h"

typedef enum { RL_I64, RL_U8, RL_U64, RL_F32, RL_F64 } rl_type;

/* Where a /stats member's value lives in one mpx_layer_stats. */
typedef enum {
    RL_SRC_STEP,  /* the step itself ([K]) */
    RL_SRC_ACT,   /* a field of .act   (offset into mpx_cast_stats) */
    RL_SRC_WGRAD, /* a field of .wgrad (offset into mpx_cast_stats) */
    RL_SRC_LAYER  /* a field of mpx_layer_stats itself */
} rl_src;

typedef struct {
    const char *path;
    rl_type type;
    int rank;       /* 1: [N], 2: [N, L], 3: [N, L, 83] */
    unsigned chunk; /* rows per chunk (the writer's layout choice; see runlog.c) */
    rl_src src;     /* /stats only */
    size_t off;     /* /stats only */
} rl_dset;

enum { RL_TR_LOSS, RL_TR_LR, RL_TR_LOSS_SCALE, RL_TR_SKIPPED, RL_TR_SPS, RL_TR_WALL, RL_TR_STEP,
       RL_N_TRAIN };
static const rl_dset rl_train[RL_N_TRAIN] = {
    {"/train/loss", RL_F32, 1, 1024, RL_SRC_STEP, 0},
    {"/train/lr", RL_F32, 1, 1024, RL_SRC_STEP, 0},
    {"/train/loss_scale", RL_F64, 1, 1024, RL_SRC_STEP, 0},
    {"/train/skipped", RL_U8, 1, 1024, RL_SRC_STEP, 0},
    {"/train/samples_per_s", RL_F32, 1, 1024, RL_SRC_STEP, 0},
    {"/train/wall_s", RL_F64, 1, 1024, RL_SRC_STEP, 0},
    {"/train/step", RL_I64, 1, 1024, RL_SRC_STEP, 0},
};

enum { RL_EV_LOSS, RL_EV_METRIC, RL_EV_STEP, RL_N_EVAL };
static const rl_dset rl_eval[RL_N_EVAL] = {
    {"/eval/loss", RL_F32, 1, 64, RL_SRC_STEP, 0},
    {"/eval/metric", RL_F32, 1, 64, RL_SRC_STEP, 0},
    {"/eval/step", RL_I64, 1, 64, RL_SRC_STEP, 0},
};

#define RL_CAST(src, field) src, offsetof(mpx_cast_stats, field)
#define RL_LAYER(field) RL_SRC_LAYER, offsetof(mpx_layer_stats, field)
enum {
    RL_ST_ACT_HIST, RL_ST_W_HIST,
    RL_ST_ACT_NONZERO, RL_ST_ACT_FLUSHED, RL_ST_ACT_BELOW_MIN, RL_ST_ACT_SUBNORMAL,
    RL_ST_ACT_OVERFLOW, RL_ST_ACT_NONFINITE,
    RL_ST_W_NONZERO, RL_ST_W_FLUSHED, RL_ST_W_BELOW_MIN, RL_ST_W_SUBNORMAL,
    RL_ST_W_OVERFLOW, RL_ST_W_NONFINITE,
    RL_ST_SCALE, RL_ST_LAYER_SCALE,
    RL_ST_G_MEAN, RL_ST_G_STD, RL_ST_G_MIN, RL_ST_G_MAX,
    RL_ST_W_MEAN, RL_ST_W_STD, RL_ST_W_MIN, RL_ST_W_MAX,
    RL_ST_UPDATE_NONZERO, RL_ST_UPDATE_LOST, RL_ST_UPDATE_ERROR,
    RL_ST_OPERAND_FIRST, RL_ST_OPERAND_LAST = RL_ST_OPERAND_FIRST + 17,
    RL_ST_WHATIF_FIRST, RL_ST_WHATIF_LAST = RL_ST_WHATIF_FIRST + 47,
    RL_ST_STEP, RL_N_STATS
};
static const rl_dset rl_stats[RL_N_STATS] = {
    {"/stats/act_grad_hist", RL_U64, 3, 1, RL_CAST(RL_SRC_ACT, hist)},
    {"/stats/weight_grad_hist", RL_U64, 3, 1, RL_CAST(RL_SRC_WGRAD, hist)},
    {"/stats/act_grad_nonzero", RL_U64, 2, 16, RL_CAST(RL_SRC_ACT, nonzero)},
    {"/stats/act_grad_flushed", RL_U64, 2, 16, RL_CAST(RL_SRC_ACT, flushed)},
    {"/stats/act_grad_below_min", RL_U64, 2, 16, RL_CAST(RL_SRC_ACT, below_min)},
    {"/stats/act_grad_subnormal", RL_U64, 2, 16, RL_CAST(RL_SRC_ACT, subnormal)},
    {"/stats/act_grad_overflow", RL_U64, 2, 16, RL_CAST(RL_SRC_ACT, overflow)},
    {"/stats/act_grad_nonfinite", RL_U64, 2, 16, RL_CAST(RL_SRC_ACT, nonfinite)},
    {"/stats/weight_grad_nonzero", RL_U64, 2, 16, RL_CAST(RL_SRC_WGRAD, nonzero)},
    {"/stats/weight_grad_flushed", RL_U64, 2, 16, RL_CAST(RL_SRC_WGRAD, flushed)},
    {"/stats/weight_grad_below_min", RL_U64, 2, 16, RL_CAST(RL_SRC_WGRAD, below_min)},
    {"/stats/weight_grad_subnormal", RL_U64, 2, 16, RL_CAST(RL_SRC_WGRAD, subnormal)},
    {"/stats/weight_grad_overflow", RL_U64, 2, 16, RL_CAST(RL_SRC_WGRAD, overflow)},
    {"/stats/weight_grad_nonfinite", RL_U64, 2, 16, RL_CAST(RL_SRC_WGRAD, nonfinite)},
    {"/stats/scale", RL_F64, 2, 16, RL_LAYER(scale)},
    {"/stats/layer_scale", RL_F64, 2, 16, RL_LAYER(layer_scale)},
    {"/stats/g_mean", RL_F32, 2, 16, RL_LAYER(g_mean)},
    {"/stats/g_std", RL_F32, 2, 16, RL_LAYER(g_std)},
    {"/stats/g_min", RL_F32, 2, 16, RL_LAYER(g_min)},
    {"/stats/g_max", RL_F32, 2, 16, RL_LAYER(g_max)},
    {"/stats/w_mean", RL_F32, 2, 16, RL_LAYER(w_mean)},
    {"/stats/w_std", RL_F32, 2, 16, RL_LAYER(w_std)},
    {"/stats/w_min", RL_F32, 2, 16, RL_LAYER(w_min)},
    {"/stats/w_max", RL_F32, 2, 16, RL_LAYER(w_max)},
    {"/stats/update_nonzero", RL_U64, 2, 16, RL_LAYER(update_nonzero)},
    {"/stats/update_lost", RL_F64, 2, 16, RL_LAYER(update_lost)},
    {"/stats/update_error", RL_F64, 2, 16, RL_LAYER(update_error)},
#define RL_OPERAND(k, name)                                                                            \
    {"/stats/operand_" name "_nonzero", RL_U64, 2, 16, RL_LAYER(operand[k].nonzero)},                      \
    {"/stats/operand_" name "_flushed", RL_U64, 2, 16, RL_LAYER(operand[k].flushed)},                      \
    {"/stats/operand_" name "_overflow", RL_U64, 2, 16, RL_LAYER(operand[k].overflow)},                    \
    {"/stats/operand_" name "_scale", RL_F64, 2, 16, RL_LAYER(operand_scale[k])},                   \
    {"/stats/operand_" name "_scale_lo", RL_F64, 2, 16, RL_LAYER(operand_scale_lo[k])},             \
    {"/stats/operand_" name "_scale_hi", RL_F64, 2, 16, RL_LAYER(operand_scale_hi[k])}
    RL_OPERAND(MPX_OPERAND_X, "x"), RL_OPERAND(MPX_OPERAND_W, "w"), RL_OPERAND(MPX_OPERAND_DY, "dy"),
#undef RL_OPERAND
#define RL_WHATIF(k, name)                                                                         \
    {"/stats/whatif_" name "_nonzero", RL_U64, 2, 16, RL_LAYER(whatif[k].nonzero)},                \
    {"/stats/whatif_" name "_flushed", RL_U64, 2, 16, RL_LAYER(whatif[k].flushed)},                \
    {"/stats/whatif_" name "_overflow", RL_U64, 2, 16, RL_LAYER(whatif[k].overflow)},              \
    {"/stats/whatif_" name "_scale", RL_F64, 2, 16, RL_LAYER(whatif_scale[k])},                     \
    {"/stats/whatif_" name "_scale_lo", RL_F64, 2, 16, RL_LAYER(whatif_scale_lo[k])},               \
    {"/stats/whatif_" name "_scale_hi", RL_F64, 2, 16, RL_LAYER(whatif_scale_hi[k])}
    RL_WHATIF(MPX_WHATIF_F16, "fp16"), RL_WHATIF(MPX_WHATIF_BF16, "bf16"),
    RL_WHATIF(MPX_WHATIF_E5M2, "e5m2"), RL_WHATIF(MPX_WHATIF_E5M2_CURRENT, "e5m2_current"),
    RL_WHATIF(MPX_WHATIF_E4M3_CURRENT, "e4m3_current"),
    RL_WHATIF(MPX_WHATIF_MXFP8_E5M2, "mxfp8_e5m2"), RL_WHATIF(MPX_WHATIF_MXFP4, "mxfp4"),
    RL_WHATIF(MPX_WHATIF_NVFP4, "nvfp4"),
#undef RL_WHATIF
    {"/stats/step", RL_I64, 1, 64, RL_SRC_STEP, 0},
};
#undef RL_CAST
#undef RL_LAYER

/* Element size in memory of an rl_type. */
static inline size_t rl_type_size(rl_type t) {
    return t == RL_U8 ? 1 : t == RL_F32 ? 4 : 8;
}

/* The type in the file (little-endian, fixed width: what h5py and pandas expect). */
static inline hid_t rl_file_type(rl_type t) {
    switch (t) {
    case RL_I64: return H5T_STD_I64LE;
    case RL_U8: return H5T_STD_U8LE;
    case RL_U64: return H5T_STD_U64LE;
    case RL_F32: return H5T_IEEE_F32LE;
    case RL_F64: return H5T_IEEE_F64LE;
    }
    return -1;
}

/* The matching type in memory. */
static inline hid_t rl_mem_type(rl_type t) {
    switch (t) {
    case RL_I64: return H5T_NATIVE_INT64;
    case RL_U8: return H5T_NATIVE_UINT8;
    case RL_U64: return H5T_NATIVE_UINT64;
    case RL_F32: return H5T_NATIVE_FLOAT;
    case RL_F64: return H5T_NATIVE_DOUBLE;
    }
    return -1;
}

#endif
