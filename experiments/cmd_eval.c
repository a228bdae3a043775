/* cmd_eval.c — `mpx eval RUN.h5|CHECKPOINT [--bootstrap N] [--units FILE.tsv]
 * [--detections FILE.tsv] [section.key=value ...]`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "mpx/run.h"

static void help(void) {
    printf("usage: mpx eval RUN.h5|CHECKPOINT [--bootstrap N] [--units FILE.tsv]\n"
           "                [--detections FILE.tsv] [section.key=value ...]\n"
           "\n"
           "Evaluate a run's checkpoint (RUN.ckpt beside RUN.h5) on its evaluation set, with the\n"
           "config stored in the checkpoint; overrides (e.g. train.eval_batches=10) apply on top.\n"
           "Prints: model, step, dataset, loss and metric.\n"
           "\n"
           "  --bootstrap N        resample the evaluation units N times with replacement (images;\n"
           "                       for BERT, sequences) and print the metric's and the loss's\n"
           "                       spread over them: units, <metric>_sd, <metric>_lo and _hi (5th\n"
           "                       and 95th percentiles), loss_sd/lo/hi (not for SSD). This is the\n"
           "                       held-out set's own sampling noise. Fixed resamples: the numbers\n"
           "                       repeat.\n"
           "  --units FILE         ResNet and BERT runs: write each unit's loss, correct predictions\n"
           "                       and predictions to FILE (TSV), for a paired bootstrap of two runs\n"
           "                       (experiments/eval_noise.py).\n"
           "  --detections FILE    SSD runs: write the detections and ground truth of the\n"
           "                       evaluation to FILE (TSV: kind, image, class, score, x0 y0 x1 y1,\n"
           "                       difficult), for an independent mAP (experiments/map_check.py).\n");
}

int cmd_eval(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    static const struct option opts[] = {{"bootstrap", required_argument, NULL, 'b'},
                                         {"detections", required_argument, NULL, 'd'},
                                         {"units", required_argument, NULL, 'u'},
                                         {NULL, 0, NULL, 0}};
    mpx_eval_opts eo = {0, NULL, NULL};
    cli_getopt_start();
    for (int c; (c = cli_getopt("eval", argc, argv, opts)) != -1;) {
        if (c == CLI_BAD) return EXIT_USAGE;
        if (c == 'd') eo.detections = optarg;
        if (c == 'u') eo.units = optarg;
        if (c == 'b') {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || end == optarg || n < 2 || n > 1000000)
                return cli_usage("eval", "--bootstrap '%s': expected a count of 2 to 1000000", optarg);
            eo.bootstrap = (int)n;
        }
    }
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
    mpx_status st =
        mpx_run_eval_checkpoint(ckpt, (const char *const *)argv + optind + 1, n_over, &eo, &r);
    if (st != MPX_OK) return cli_error("eval", st);
    printf("model\t%s\nstep\t%lld\ndataset\t%s\nloss\t%.6f\n%s\t%.6f\n", r.model, (long long)r.step,
           r.dataset, r.loss, r.metric_name, r.metric);
    if (eo.bootstrap > 0) {
        printf("resamples\t%d\nunits\t%lld\n%s_sd\t%.4f\n%s_lo\t%.4f\n%s_hi\t%.4f\n", eo.bootstrap,
               (long long)r.units, r.metric_name, r.metric_sd, r.metric_name, r.metric_lo,
               r.metric_name, r.metric_hi);
        if (!isnan(r.loss_sd))
            printf("loss_sd\t%.6f\nloss_lo\t%.6f\nloss_hi\t%.6f\n", r.loss_sd, r.loss_lo, r.loss_hi);
    }
    if (eo.units) printf("units_file\t%s\n", eo.units);
    if (eo.detections) printf("detections\t%s\n", eo.detections);
    return EXIT_OK;
}
