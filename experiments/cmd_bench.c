/* cmd_bench.c — `mpx bench CONFIG`: placeholder until the benchmark driver lands. */
#include <stdio.h>

#include "cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mpx bench: not implemented yet\n");
    return EXIT_FAIL;
}
