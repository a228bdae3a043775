/* cmd_info.c — `mpx info [CONFIG [section.key=value ...]]`: the build, the machine, model sizes;
 * with a CONFIG, what that run builds and its memory plan. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpx/comm.h"
#include "mpx/backend.h"
#include "mpx/numerics.h"
#include "mpx/run.h"
#include "mpx/runtime.h"

static void help(void) {
    printf("usage: mpx info [CONFIG [section.key=value ...]]\n"
           "\n"
           "Without CONFIG: version, backends compiled, CUDA devices, threads, BLAS and oneDNN\n"
           "(with the kernel OpenBLAS chose, and a warning when it lacks the CPU's vector\n"
           "units), CPU features used, which implementation each op family runs per precision\n"
           "mode on the CPU (16-bit GEMMs native where oneDNN has them here), and the parameter\n"
           "count of every ResNet preset (1000 classes). With CONFIG: the data, model size,\n"
           "FLOPs per step and the memory plan of that run.\n");
}

static void build_info(void) {
    printf("mpx %s (commit %s)\n", mpx_version(), mpx_git_commit());
    printf("backends:      cpu%s\n", mpx_backend_cuda_built() ? ", cuda (compiled)" : "");
    if (mpx_backend_cuda_built()) {
        const mpx_backend *cuda = mpx_backend_get(MPX_DEV_CUDA);
        printf("cuda devices:  %s\n", cuda ? "available" : mpx_error_message());
    }
    printf("threads:       %d (of %d cores)\n", mpx_threads_get(), omp_get_num_procs());
    printf("cpu features:  %s\n", mpx_cpu_features_str());
    const char *conv = mpx_convert_impl(), *conv_bf16 = mpx_convert_impl_bf16();
    if (strcmp(conv, conv_bf16) == 0)
        printf("convert:       %s\n", conv);
    else
        printf("convert:       %s (bf16: %s)\n", conv, conv_bf16);
    printf("sr rounding:   %s\n", mpx_stochastic_impl());
    printf("blas:          %s\n", mpx_blas_info());
    if (mpx_blas_warning()) printf("warning:       %s\n", mpx_blas_warning());
    printf("dnn:           %s\n", mpx_dnnl_info());
    if (mpx_comm_size() > 1)
        printf("mpi:           %s, rank %d of %d\n", mpx_comm_library(), mpx_comm_rank(),
               mpx_comm_size());
    else
        printf("mpi:           %s\n", mpx_comm_library());
    printf("cpu op paths:\n");
    static const mpx_precision_mode modes[] = {MPX_MODE_FP32, MPX_MODE_TF32, MPX_MODE_BF16,
                                               MPX_MODE_FP16};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        cli_print_op_paths(stdout, "  ", modes[i], 1);
}

static void model_sizes(void) {
    static const char *const archs[] = {"resnet18", "resnet34", "resnet50", "resnet101",
                                        "resnet20", "resnet56", "resnet110"};
    printf("\nparameters (1000 classes for ImageNet ResNets, 10 for CIFAR ResNets):\n");
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        mpx_resnet_cfg c;
        mpx_resnet_preset(archs[i], &c);
        int cifar = c.stem == MPX_STEM_CIFAR;
        if (cifar) c.num_classes = 10;
        mpx_graph *g = mpx_graph_new();
        mpx_status st = g ? mpx_resnet_build(g, &c, 1, cifar ? 32 : 224, cifar ? 32 : 224, 3, NULL,
                                             NULL, NULL)
                          : MPX_ERR_NOMEM;
        if (st == MPX_OK)
            printf("  %-10s %12lld\n", archs[i], (long long)mpx_graph_param_count(g));
        else
            printf("  %-10s error: %s\n", archs[i], mpx_error_message());
        mpx_graph_free(g);
    }
}

int cmd_info(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    static const struct option opts[] = {{NULL, 0, NULL, 0}};
    cli_getopt_start();
    for (int c; (c = cli_getopt("info", argc, argv, opts)) != -1;)
        if (c == CLI_BAD) return EXIT_USAGE;
    if (optind >= argc) {
        build_info();
        model_sizes();
        return EXIT_OK;
    }
    mpx_config *cfg = NULL;
    mpx_run_cfg rc;
    const int n_over = argc - optind - 1;
    if (!cli_overrides_only("info", n_over, argv + optind + 1)) return EXIT_USAGE;
    mpx_status st =
        mpx_run_load(argv[optind], (const char *const *)argv + optind + 1, n_over, &cfg, &rc);
    mpx_config_free(cfg);
    if (st != MPX_OK) return cli_error("info", st);
    mpx_threads_set(rc.train.threads);
    build_info();
    printf("\n");
    st = mpx_run_describe(&rc, stdout);
    return st == MPX_OK ? EXIT_OK : cli_error("info", st);
}
