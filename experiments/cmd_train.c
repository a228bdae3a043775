/* cmd_train.c — `mpx train CONFIG [section.key=value ...] [--out FILE] [--force] [--resume CKPT]`.
 *
 * Resolves the config (file, includes, overrides), refuses to clobber an existing run file,
 * runs the driver and prints progress: a live line on a terminal, a plain line every
 * log.log_every steps otherwise, and every evaluation.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "mpx/comm.h"
#include "mpx/fsutil.h"
#include "mpx/run.h"

static void help(void) {
    printf("usage: mpx train CONFIG [section.key=value ...] [--out FILE] [--force] [--resume CKPT]\n"
           "\n"
           "Train the model CONFIG describes (INI: [model] [data] [train] [precision] [log]).\n"
           "Overrides like train.steps=100 apply after the file. Writes the run file FILE\n"
           "(default results/<arch>/<config name>.h5) and a checkpoint beside it (.ckpt).\n"
           "\n"
           "  --out FILE       run file to write\n"
           "  --force          overwrite an existing run file\n"
           "  --resume CKPT    continue from a checkpoint, appending to its run file\n"
           "  --help-config    list every config key with its default and meaning\n"
           "\n"
           "One process writes a run file at a time (a lock FILE.lock beside it): a second\n"
           "`mpx train` on it, --force included, stops with exit 2 naming the holder.\n"
           "SIGTERM or SIGINT: the step in progress finishes, a checkpoint is written, the run\n"
           "file is flushed (a second signal stops at once); --resume continues exactly.\n"
           "\n"
           "Exit status: 0 done, 1 failed, 2 bad input (config, data, files; a run file in\n"
           "use), 3 diverged (the loss or gradients stayed non-finite for\n"
           "train.max_nonfinite steps; the run file records it in its `stopped` attribute),\n"
           "4 stopped by SIGTERM/SIGINT with a checkpoint written (resume with --resume).\n");
}

static void help_config(void) {
    const char *section = "";
    for (size_t i = 0; i < mpx_run_schema_len; i++) {
        const mpx_cfg_key *k = &mpx_run_schema[i];
        if (strcmp(section, k->section) != 0) printf("%s[%s]\n", i ? "\n" : "", section = k->section);
        printf("  %-20s = %-10s ; %s%s%s%s\n", k->key, k->def[0] ? k->def : "\"\"", k->help,
               k->choices ? " (" : "", k->choices ? k->choices : "", k->choices ? ")" : "");
    }
}

typedef struct {
    int tty;
    int64_t log_every;
    int progress;
} printer;

static void fmt_eta(double s, char *buf, size_t cap) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, cap, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

static void on_report(const mpx_step_report *r, void *ctx) {
    printer *p = ctx;
    if (r->is_eval) {
        if (p->tty && p->progress >= 0) fprintf(stderr, "\r\033[K");
        fprintf(stderr, "eval  step %lld: loss %.4f  %s %.2f%%\n", (long long)(r->step + 1),
                r->eval_loss, r->metric_name ? r->metric_name : "metric", r->eval_metric);
        return;
    }
    if (p->progress < 0) return;
    int64_t done = r->step + 1;
    double eta = r->samples_per_s > 0 ? r->eta_s : -1;
    char eta_s[32];
    fmt_eta(eta, eta_s, sizeof eta_s);
    char line[256];
    snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  scale %g%s  %.1f samples/s  ETA %s",
             (long long)done, (long long)r->steps, r->loss, r->loss_scale,
             r->skipped ? " (skipped)" : "", r->samples_per_s, eta_s);
    if (p->tty && p->progress >= 0) {
        fprintf(stderr, "\r\033[K%s", line);
        if (done == r->steps) fputc('\n', stderr);
    } else if (p->progress > 0 || done % p->log_every == 0 || done == r->steps || r->step == 0) {
        fprintf(stderr, "%s\n", line);
    }
}

static void default_out(const char *config, const char *arch, char *buf, size_t cap) {
    const char *base = strrchr(config, '/');
    base = base ? base + 1 : config;
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, ".cfg") == 0) n -= 4;
    snprintf(buf, cap, "results/%s/%.*s.h5", arch, (int)n, base);
}

static void checkpoint_path(const char *out, char *buf, size_t cap) {
    size_t n = strlen(out);
    if (n > 3 && strcmp(out + n - 3, ".h5") == 0) n -= 3;
    snprintf(buf, cap, "%.*s.ckpt", (int)n, out);
}

/* SIGTERM (a batch scheduler's preemption) or SIGINT: stop after the step in progress. A second
 * one ends the process at once (SA_RESETHAND). */
static volatile sig_atomic_t g_stop;
static void on_signal(int signo) { g_stop = signo; }

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return EXIT_OK;
    }
    const char *out = NULL, *resume = NULL;
    int force = 0;
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                         {"resume", required_argument, NULL, 'r'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"help-config", no_argument, NULL, 'c'},
                                         {NULL, 0, NULL, 0}};
    cli_getopt_start();
    for (int c; (c = cli_getopt("train", argc, argv, opts)) != -1;) {
        if (c == CLI_BAD) return EXIT_USAGE;
        if (c == 'c') {
            help_config();
            return EXIT_OK;
        }
        if (c == 'o') out = optarg;
        if (c == 'r') resume = optarg;
        if (c == 'f') force = 1;
    }
    if (optind >= argc) return cli_usage("train", "missing CONFIG");
    const char *config = argv[optind];
    char **overrides = argv + optind + 1;
    const int n_over = argc - optind - 1;
    if (!cli_overrides_only("train", n_over, overrides)) return EXIT_USAGE;

    mpx_config *cfg = NULL;
    mpx_run_cfg rc;
    mpx_status st = mpx_run_load(config, (const char *const *)overrides, n_over, &cfg, &rc);
    if (st != MPX_OK) {
        mpx_config_free(cfg);
        return cli_error("train", st);
    }
    /* Under mpirun: one rank of a data-parallel run; rank 0 owns the files and the output. */
    rc.train.ranks = mpx_comm_size();
    rc.train.rank = mpx_comm_rank();
    const int lead = rc.train.rank == 0;
    if (rc.train.batch_size % rc.train.ranks != 0) {
        mpx_config_free(cfg);
        fprintf(stderr, "mpx train: train.batch_size = %d is not a multiple of the %d ranks\n",
                rc.train.batch_size, rc.train.ranks);
        return EXIT_USAGE;
    }
    char out_buf[4096], ckpt[4096];
    if (!out && resume) {
        size_t n = strlen(resume);
        snprintf(out_buf, sizeof out_buf, "%.*s.h5",
                 (int)(n > 5 && strcmp(resume + n - 5, ".ckpt") == 0 ? n - 5 : n), resume);
        out = out_buf;
    } else if (!out) {
        default_out(config, rc.model.arch, out_buf, sizeof out_buf);
        out = out_buf;
    }
    checkpoint_path(out, ckpt, sizeof ckpt);
    if (lead && !resume && !force && access(out, F_OK) == 0) {
        mpx_config_free(cfg);
        fprintf(stderr, "mpx train: run file '%s' exists; pass --force to overwrite\n", out);
        return EXIT_USAGE;
    }
    st = lead ? mpx_fs_mkdirs_for(out) : MPX_OK;
    if (st != MPX_OK) {
        mpx_config_free(cfg);
        return cli_error("train", st);
    }
    char *resolved = mpx_config_resolved_text(cfg);
    mpx_config_free(cfg);
    printer pr = {isatty(fileno(stderr)), rc.log.log_every, rc.log.progress};
    mpx_train_opts o = {out, force, resume, ckpt, resolved, config, on_report, &pr, &g_stop};
    catch_stop_signals();
    mpx_train_result res;
    if (lead && rc.train.ranks > 1)
        fprintf(stderr, "mpx train: %s -> %s (%s, %s, %s scaling; %d ranks of batch %d, %s)\n",
                config, out, rc.model.arch, mpx_precision_mode_name(rc.precision.mode),
                mpx_scaling_name(rc.scaling.method), rc.train.ranks,
                rc.train.batch_size / rc.train.ranks, mpx_comm_library());
    else if (lead)
        fprintf(stderr, "mpx train: %s -> %s (%s, %s, %s scaling)\n", config, out, rc.model.arch,
                mpx_precision_mode_name(rc.precision.mode), mpx_scaling_name(rc.scaling.method));
    st = mpx_run_train(&rc, &o, &res);
    free(resolved);
    if (st == MPX_ERR_NUMERIC && res.stopped_early) {
        if (lead) fprintf(stderr, "mpx train: %s\n", mpx_error_message());
        return EXIT_DIVERGED;
    }
    if (st != MPX_OK) return cli_error("train", st);
    if (res.interrupted) {
        if (lead)
            fprintf(stderr, "mpx train: stopped by signal %d after step %lld; checkpoint '%s' written, "
                "continue with: mpx train %s --resume %s\n", res.interrupted,
                (long long)res.steps_done - 1, ckpt, config, ckpt);
        return EXIT_INTERRUPTED;
    }
    if (!lead) return EXIT_OK;
    if (resume && res.start_step == rc.train.steps) {
        printf("%s: already complete (checkpoint '%s' is at step %lld = train.steps); nothing "
               "to train\n", out, resume, (long long)res.start_step);
        return EXIT_OK;
    }
    printf("%s: %lld steps, final loss %.4f, metric %.2f%%, %lld skipped, %.1f samples/s\n", out,
           (long long)res.steps_done, res.final_loss, res.final_metric, (long long)res.skipped,
           res.samples_per_s);
    return EXIT_OK;
}
