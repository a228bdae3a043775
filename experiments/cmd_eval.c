/* cmd_eval.c — `mpx eval RUN.h5|CHECKPOINT [section.key=value ...]`. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "mpx/run.h"

static void help(void) {
    printf("usage: mpx eval RUN.h5|CHECKPOINT [section.key=value ...]\n"
           "\n"
           "Evaluate a run's checkpoint (RUN.ckpt beside RUN.h5) on its evaluation set, with the\n"
           "config stored in the checkpoint; overrides (e.g. train.eval_batches=10) apply on top.\n"
           "Prints: model, step, dataset, loss and metric.\n");
}

int cmd_eval(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    static const struct option opts[] = {{NULL, 0, NULL, 0}};
    cli_getopt_start();
    for (int c; (c = cli_getopt("eval", argc, argv, opts)) != -1;)
        if (c == CLI_BAD) return EXIT_USAGE;
    if (optind >= argc) return cli_usage("eval", "missing RUN.h5 or CHECKPOINT");
    char ckpt[4096];
    const char *arg = argv[optind];
    size_t n = strlen(arg);
    if (n > 3 && strcmp(arg + n - 3, ".h5") == 0)
        snprintf(ckpt, sizeof ckpt, "%.*s.ckpt", (int)(n - 3), arg);
    else
        snprintf(ckpt, sizeof ckpt, "%s", arg);
    if (access(ckpt, R_OK) != 0) {
        fprintf(stderr, "mpx eval: no checkpoint '%s'%s\n", ckpt,
                strcmp(ckpt, arg) ? " beside the run file" : "");
        return EXIT_USAGE;
    }
    const int n_over = argc - optind - 1;
    if (!cli_overrides_only("eval", n_over, argv + optind + 1)) return EXIT_USAGE;
    mpx_eval_result r;
    mpx_status st = mpx_run_eval_checkpoint(ckpt, (const char *const *)argv + optind + 1, n_over, &r);
    if (st != MPX_OK) return cli_error("eval", st);
    printf("model\t%s\nstep\t%lld\ndataset\t%s\nloss\t%.6f\n%s\t%.4f\n", r.model, (long long)r.step,
           r.dataset, r.loss, r.metric_name, r.metric);
    return EXIT_OK;
}
