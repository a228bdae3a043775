/* tile.h — FP32 tiles of tensors stored as F32, F16 or BF16, for the memory-bound operators
 * (batch-norm, ReLU, add) that take 16-bit storage as it is (backend.h: op_direct_io).
 *
 * A 16-bit input tile is decoded into the thread's buffer as it is loaded and a 16-bit output
 * tile is rounded to nearest even into storage as it is stored: the executor's decode and
 * commit (mpx_decode, mpx_cast's RNE loop) fused into the operator's own pass over memory. The
 * operator's FP32 arithmetic runs on the tile in one loop for every dtype, so its bits are those
 * of the FP32 path. F32 tensors are read and written in place. A tile is at most TILE elements
 * of one contiguous run: whole rows of C channels when C <= TILE, else a piece of one row.
 */
#ifndef MPX_OPS_TILE_H
#define MPX_OPS_TILE_H

#include <stdint.h>
#include <string.h>

#include "mpx/numerics.h"
#include "mpx/tensor.h"

enum { TILE = 2048 };

/* A run of an [M, C] matrix: rows [i0, i1), channels [j0, j1); contiguous in memory. */
typedef struct {
    int64_t i0, i1, j0, j1;
} tile_run;

/* How many runs cover rows [r0, r1) of an [M, C] matrix. */
static inline int64_t tile_count(int64_t r0, int64_t r1, int64_t c) {
    if (c <= 0 || r1 <= r0) return 0;
    if (c <= TILE) {
        const int64_t rows = TILE / c;
        return (r1 - r0 + rows - 1) / rows;
    }
    return (r1 - r0) * ((c + TILE - 1) / TILE);
}

/* Run k of those, in memory order. */
static inline tile_run tile_at(int64_t k, int64_t r0, int64_t r1, int64_t c) {
    tile_run t;
    if (c <= TILE) {
        const int64_t rows = TILE / c;
        t.i0 = r0 + k * rows;
        t.i1 = t.i0 + rows < r1 ? t.i0 + rows : r1;
        t.j0 = 0;
        t.j1 = c;
    } else {
        const int64_t per_row = (c + TILE - 1) / TILE;
        t.i0 = r0 + k / per_row;
        t.i1 = t.i0 + 1;
        t.j0 = (k % per_row) * TILE;
        t.j1 = t.j0 + TILE < c ? t.j0 + TILE : c;
    }
    return t;
}

/* The run's first element and its length. */
static inline int64_t tile_offset(const tile_run *t, int64_t c) { return t->i0 * c + t->j0; }
static inline int64_t tile_len(const tile_run *t) { return (t->i1 - t->i0) * (t->j1 - t->j0); }

/* n values of t from element `off` in FP32: t's own when F32, else decoded into buf. */
static inline const float *tile_load(const mpx_tensor *t, int64_t off, int64_t n, float *buf) {
    if (t->dtype == MPX_F32) return (const float *)t->data + off;
    mpx_decode16_block(t->dtype, (const uint16_t *)t->data + off, buf, (size_t)n);
    return buf;
}

/* n values of t from element `off` copied or decoded into dst. */
static inline void tile_load_into(const mpx_tensor *t, int64_t off, int64_t n, float *dst) {
    if (t->dtype == MPX_F32)
        memcpy(dst, (const float *)t->data + off, (size_t)n * sizeof *dst);
    else
        mpx_decode16_block(t->dtype, (const uint16_t *)t->data + off, dst, (size_t)n);
}

/* Where to compute t's FP32 values from element `off`: t's own when F32, else buf. */
static inline float *tile_dst(const mpx_tensor *t, int64_t off, float *buf) {
    return t->dtype == MPX_F32 ? (float *)t->data + off : buf;
}

/* Store what tile_dst gave: rounded to nearest even into t's 16-bit storage (F32: in place). */
static inline void tile_store(const mpx_tensor *t, int64_t off, int64_t n, const float *buf) {
    if (t->dtype != MPX_F32) mpx_encode16_block(t->dtype, buf, (uint16_t *)t->data + off, (size_t)n);
}

#endif
