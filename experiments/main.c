/* main.c — the `mpx` command: dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "mpx/runtime.h"

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "info") == 0) {
        printf("mpx %s (%s)\n", mpx_version(), mpx_git_commit());
        printf("cpu features: %s\nthreads: %d\nblas: %s\n%s\n", mpx_cpu_features_str(),
               mpx_threads_get(), mpx_blas_info(), mpx_dnnl_info());
        return 0;
    }
    fprintf(stderr, "usage: mpx info\n");
    return 2;
}
