/* comm.h — the processes of a data-parallel run and the reductions between them.
 *
 * mpx runs one process per rank (`mpirun -np N build/mpx train ...`); each trains on its slice
 * of every global batch, and the reductions below keep them one training: gradients summed,
 * the skip decision and the loss-scaling statistics reduced, so that every rank takes the same
 * decisions and holds the same weights. Built on MPI where the build found it (MPX_HAVE_MPI);
 * otherwise, and in a process not started by an MPI launcher, there is one rank and every
 * reduction is the identity. Reductions run on host memory and block until every rank has
 * contributed; all ranks must call them in the same order (the executor and the trainer do, as
 * they run the same graph on the same schedule).
 */
#ifndef MPX_COMM_H
#define MPX_COMM_H

#include <stddef.h>

#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MPX_COMM_SUM = 0, MPX_COMM_MAX, MPX_COMM_MIN } mpx_comm_op;
typedef enum { MPX_COMM_F32 = 0, MPX_COMM_F64, MPX_COMM_U64, MPX_COMM_I64, MPX_COMM_U32 } mpx_comm_type;

/* Join the run's processes when an MPI launcher started this one (its environment says so);
 * else, or without MPI in the build, stay one rank. Call once, before any other mpx_comm_*. */
mpx_status mpx_comm_init(int *argc, char ***argv);
/* Leave (MPI_Finalize); nothing without MPI. */
void mpx_comm_finalize(void);
/* This process's rank and the number of ranks (0 and 1 when alone). */
int mpx_comm_rank(void);
int mpx_comm_size(void);
/* This rank's index among the ranks on its machine (one GPU per process: its device). */
int mpx_comm_local_rank(void);
/* buf[0..n) reduced over the ranks with `op`, in place, the result on every rank. */
mpx_status mpx_comm_allreduce(void *buf, size_t n, mpx_comm_type type, mpx_comm_op op);
/* bytes at buf from rank `root` to every rank. */
mpx_status mpx_comm_bcast(void *buf, size_t bytes, int root);
/* Every rank waits for the others. */
mpx_status mpx_comm_barrier(void);
/* End every rank at once with `code` (MPI_Abort), for a rank that cannot go on while the others
 * would wait for it in a reduction; returns (does nothing) when alone. */
void mpx_comm_abort(int code);
/* The MPI library, e.g. "Open MPI v4.1.4", or why there is none ("off: built without MPI"). */
const char *mpx_comm_library(void);

#ifdef __cplusplus
}
#endif

#endif
