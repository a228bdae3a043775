/* arena.h — offline placement of buffers with known lifetimes into one arena.
 *
 * The graph knows, when it is compiled, every buffer a training step will touch and the
 * interval of steps (in execution order) during which each is live. Buffers whose intervals
 * do not overlap may share bytes. mpx_arena_plan assigns offsets (greedy, largest first,
 * lowest fitting offset) so that the step itself never allocates.
 */
#ifndef MPX_ARENA_H
#define MPX_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t size;      /* bytes (0: ignored, offset 0) */
    int first, last;  /* live interval, inclusive, in execution order */
    size_t offset;    /* out */
} mpx_arena_block;

/* Assigns every block's offset (aligned to `align`, a power of two) and returns the arena size. */
size_t mpx_arena_plan(mpx_arena_block *blocks, int n, size_t align);

#ifdef __cplusplus
}
#endif

#endif
