/* checkpoint.h — everything a run needs to continue bit-identically, in one checksummed file.
 *
 * Master weights, batch-norm running statistics, optimizer state and step count, the scaler's
 * global state and every node's adaptive-scaling state, the data loader's position, the next
 * step, the model name and the resolved config. Written atomically (temporary file, fsync,
 * rename), so a crash while writing never destroys the previous checkpoint. Versioned; a file
 * that is not ours, is truncated, fails its checksum or belongs to another model is
 * MPX_ERR_INPUT naming the file and what is wrong.
 */
#ifndef MPX_CHECKPOINT_H
#define MPX_CHECKPOINT_H

#include <stdint.h>

#include "mpx/error.h"
#include "mpx/graph.h"
#include "mpx/optim.h"
#include "mpx/scaling.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the training data continues (the loader's epoch and batch; the run layer converts). */
typedef struct {
    int64_t epoch, batch;
} mpx_checkpoint_pos;

typedef struct {
    mpx_graph *g;
    mpx_optimizer *opt;         /* may be NULL (evaluation only) */
    mpx_scaler *scaler;         /* may be NULL (evaluation only) */
    int64_t step;               /* the next step to run */
    mpx_checkpoint_pos loader;  /* where the training loader continues */
    const char *config_text;    /* written */
    const char *model;          /* written; on read, must match */
    char *config_text_read;     /* on read: the stored config (malloc'ed, caller frees) */
} mpx_checkpoint_state;

mpx_status mpx_checkpoint_write(const char *path, const mpx_checkpoint_state *s);
/* Restore into s->g (and s->opt, s->scaler when given); the graph must be compiled with the
 * same architecture (parameter names and sizes are checked). */
mpx_status mpx_checkpoint_read(const char *path, mpx_checkpoint_state *s);
/* Initialise a compiled graph from another model's checkpoint (a pretrained trunk): every
 * parameter and buffer whose name the graph has is loaded (a size mismatch is an error), the
 * rest skipped; *params and *buffers (may be NULL) say how many were loaded. None loaded is
 * MPX_ERR_INPUT. Optimizer, scaler and step are not touched. */
mpx_status mpx_checkpoint_load_weights(const char *path, mpx_graph *g, int *params, int *buffers);
/* Read only the header: model, next step and the stored config (malloc'ed; caller frees). */
mpx_status mpx_checkpoint_peek(const char *path, char **model, int64_t *step, char **config_text);

#ifdef __cplusplus
}
#endif

#endif
