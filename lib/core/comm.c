/* comm.c — mpx_comm on MPI (comm.h), or one rank without it.
 *
 * MPI joins only when a launcher started the process (Open MPI's OMPI_COMM_WORLD_SIZE, or the
 * PMI/PMIx variables of other launchers), so that a plain `mpx train` never initialises MPI (no
 * network probing, no extra threads) and behaves exactly as a build without it.
 */
#include "mpx/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MPX_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1, g_local = 0, g_joined = 0;
static char g_library[160] = "off: built without MPI";

#ifdef MPX_HAVE_MPI
static int launched_by_mpi(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                       "MPI_LOCALNRANKS", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static mpx_status mpi_fail(const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return mpx_fail(MPX_ERR_BACKEND, "MPI %s failed on rank %d: %s", what, g_rank, msg);
}

static MPI_Datatype mpi_type(mpx_comm_type t) {
    switch (t) {
    case MPX_COMM_F32: return MPI_FLOAT;
    case MPX_COMM_F64: return MPI_DOUBLE;
    case MPX_COMM_U64: return MPI_UINT64_T;
    case MPX_COMM_I64: return MPI_INT64_T;
    default: return MPI_UINT32_T;
    }
}

static MPI_Op mpi_op(mpx_comm_op op) {
    return op == MPX_COMM_MAX ? MPI_MAX : op == MPX_COMM_MIN ? MPI_MIN : MPI_SUM;
}
#endif

mpx_status mpx_comm_init(int *argc, char ***argv) {
#ifdef MPX_HAVE_MPI
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = '\0';
    if (!launched_by_mpi()) {
        snprintf(g_library, sizeof g_library, "%s (not started by mpirun: one rank)", version);
        return MPX_OK;
    }
    int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail("initialisation", rc);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &g_local);
        MPI_Comm_free(&node);
    }
    g_joined = 1;
    snprintf(g_library, sizeof g_library, "%s", version);
#else
    (void)argc, (void)argv;
#endif
    return MPX_OK;
}

void mpx_comm_finalize(void) {
#ifdef MPX_HAVE_MPI
    if (g_joined) MPI_Finalize();
#endif
    g_joined = 0;
    g_rank = 0;
    g_size = 1;
    g_local = 0;
}

int mpx_comm_rank(void) { return g_rank; }
int mpx_comm_size(void) { return g_size; }
int mpx_comm_local_rank(void) { return g_local; }
const char *mpx_comm_library(void) { return g_library; }

mpx_status mpx_comm_allreduce(void *buf, size_t n, mpx_comm_type type, mpx_comm_op op) {
    if (g_size == 1 || n == 0) return MPX_OK;
#ifdef MPX_HAVE_MPI
    for (size_t done = 0; done < n;) { /* MPI counts are ints */
        const size_t k = n - done < (size_t)1 << 30 ? n - done : (size_t)1 << 30;
        const size_t esz = type == MPX_COMM_F32 || type == MPX_COMM_U32 ? 4 : 8;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * esz, (int)k, mpi_type(type),
                               mpi_op(op), MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail("all-reduce", rc);
        done += k;
    }
    return MPX_OK;
#else
    (void)buf, (void)type, (void)op;
    return mpx_fail(MPX_ERR_INTERNAL, "mpx_comm_allreduce: %d ranks without MPI", g_size);
#endif
}

mpx_status mpx_comm_bcast(void *buf, size_t bytes, int root) {
    if (g_size == 1 || bytes == 0) return MPX_OK;
#ifdef MPX_HAVE_MPI
    for (size_t done = 0; done < bytes;) {
        const size_t k = bytes - done < (size_t)1 << 30 ? bytes - done : (size_t)1 << 30;
        int rc = MPI_Bcast((char *)buf + done, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail("broadcast", rc);
        done += k;
    }
    return MPX_OK;
#else
    (void)buf, (void)root;
    return mpx_fail(MPX_ERR_INTERNAL, "mpx_comm_bcast: %d ranks without MPI", g_size);
#endif
}

void mpx_comm_abort(int code) {
#ifdef MPX_HAVE_MPI
    if (g_joined && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)code;
#endif
}

mpx_status mpx_comm_barrier(void) {
    if (g_size == 1) return MPX_OK;
#ifdef MPX_HAVE_MPI
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MPX_OK : mpi_fail("barrier", rc);
#else
    return MPX_OK;
#endif
}
