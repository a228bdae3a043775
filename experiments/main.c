/* main.c — the `mpx` command: dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpx/comm.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} g_cmds[] = {
    {"train", cmd_train, "train a model from a config; writes an HDF5 run file"},
    {"eval", cmd_eval, "evaluate a run's checkpoint"},
    {"export", cmd_export, "print a run file's contents as TSV (for gnuplot, awk, pandas)"},
    {"bench", cmd_bench, "measure step time, throughput, FLOP rate, memory, overheads"},
    {"info", cmd_info, "build, backends, devices, threads, BLAS; model sizes; memory plans"},
};
enum { N_CMDS = sizeof g_cmds / sizeof *g_cmds };

static void usage(FILE *f) {
    fprintf(f, "usage: mpx COMMAND [ARGS]   (mpx COMMAND --help for each)\n\n");
    for (int i = 0; i < N_CMDS; i++) fprintf(f, "  %-7s %s\n", g_cmds[i].name, g_cmds[i].what);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    for (int i = 0; i < N_CMDS; i++)
        if (strcmp(argv[1], g_cmds[i].name) == 0) {
            /* Under an MPI launcher every process is a rank of one run (comm.h). */
            mpx_status st = mpx_comm_init(&argc, &argv);
            if (st != MPX_OK) {
                fprintf(stderr, "mpx: %s\n", mpx_error_message());
                return EXIT_FAIL;
            }
            int rc = g_cmds[i].fn(argc - 1, argv + 1);
            /* A rank that failed alone would leave the others waiting in a reduction; a
             * divergence or a requested stop is reached by every rank together. */
            if (rc != EXIT_OK && rc != EXIT_DIVERGED && rc != EXIT_INTERRUPTED) mpx_comm_abort(rc);
            mpx_comm_finalize();
            return rc;
        }
    fprintf(stderr, "mpx: unknown command '%s' (train, eval, export, bench, info; see mpx --help)\n",
            argv[1]);
    return EXIT_USAGE;
}
