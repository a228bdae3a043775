/* cmd_export.c — `mpx export RUN.h5 WHAT [--layer NAME] [--step N] [--pooled]`: TSV on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpx/runlog.h"

static void help(void) {
    printf("usage: mpx export RUN.h5 WHAT [--layer NAME] [--step N] [--pooled]\n"
           "\n"
           "Print part of a run file as tab-separated values with one header line.\n"
           "WHAT:\n"
           "  train      step loss lr loss_scale skipped samples_per_s wall_s\n"
           "  eval       step loss metric\n"
           "  layers     index name kind params fan_in\n"
           "  underflow  per (stats step, layer): counts and underflow rate = flushed / nonzero\n"
           "             of the activation and weight gradients\n"
           "  scale      per (stats step, layer): S_prev, the layer's factor, g and w moments\n"
           "  updates    per (stats step, layer): elements with a nonzero optimizer update, the\n"
           "             fraction of them that left the stored weight unchanged (lost) and the\n"
           "             mean |stored change - update| / |update|\n"
           "  operands   per (stats step, layer, operand x|w|dy): the casts of the layer's GEMM\n"
           "             operands in precision.mode = fp8 or fixed16: nonzero, flushed,\n"
           "             saturated, the scale, the smallest and largest scale of its blocks\n"
           "             or casts and their spread (log2 of the ratio, binades)\n"
           "  whatif     per (stats step, layer, recipe): log.whatif's counts of the activation\n"
           "             gradient as each recipe would cast it, its underflow rate and scale,\n"
           "             and the range and spread of a block recipe's scales\n"
           "  hist       per (stats step, layer, tensor, bin): count and percent; bins are log2\n"
           "             binades k = [2^k, 2^(k+1)), k = -64..15, then zero, inf, nan\n"
           "  summary    one row: model dataset precision scaling seed steps final_loss eval_step\n"
           "             eval_loss metric skipped samples_per_s (median) wall_s stopped\n"
           "             git_commit threads host\n"
           "  --layer NAME   one layer only\n"
           "  --step N       one statistics step only\n"
           "  --pooled       hist: sum over the selected layers (the papers' pooled histogram)\n");
}

int cmd_export(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    mpx_export_opts o = {NULL, -1, 0};
    static const struct option opts[] = {{"layer", required_argument, NULL, 'l'},
                                         {"step", required_argument, NULL, 's'},
                                         {"pooled", no_argument, NULL, 'p'},
                                         {NULL, 0, NULL, 0}};
    cli_getopt_start();
    for (int c; (c = cli_getopt("export", argc, argv, opts)) != -1;) {
        if (c == CLI_BAD) return EXIT_USAGE;
        if (c == 'l') o.layer = optarg;
        if (c == 'p') o.pooled = 1;
        if (c == 's') {
            char *end;
            o.step = strtoll(optarg, &end, 10);
            if (*end || o.step < 0 || !optarg[0])
                return cli_usage("export", "--step '%s' is not a step number", optarg);
        }
    }
    if (argc - optind < 2) return cli_usage("export", "needs RUN.h5 and WHAT");
    if (argc - optind > 2) return cli_usage("export", "unexpected argument '%s'", argv[optind + 2]);
    const char *path = argv[optind], *what = argv[optind + 1];
    mpx_status st = mpx_runlog_export(path, what, &o, stdout);
    if (st != MPX_OK) return cli_error("export", st);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}
