/* test_runlog_kill.c — a run killed between flushes leaves a readable run file.
 *
 * For each kill point a child process creates a run file, logs training rows (flushing every
 * 5 steps, or never so that the 1024-row buffer forces a flush), statistics and evaluation
 * rows, then SIGKILLs itself with rows still buffered. The parent checks that `h5dump -H`
 * opens the file (an independent reader; skipped with a message when h5dump is missing),
 * that /train/step holds exactly the steps up to the last flush and /stats and /eval exactly
 * what was written, that the file exports, and that it can be resumed (reopened, appended to,
 * closed) — the real use after a crash.
 * Also: another process (this test run again with --export) exports a run file while this one
 * holds it open for writing, and sees exactly the flushed rows.
 */
#include <hdf5.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mpx/runlog.h"
#include "testutil.h"

enum { L = 4 };
static const mpx_layer_info g_layers[L] = {{"conv1", "conv2d", 432, 27},
                                           {"bn1", "batchnorm", 32, 0},
                                           {"fc", "linear", 170, 16},
                                           {"loss", "softmax_ce", 0, 0}};

typedef struct {
    const char *what;
    int flush_every; /* 0: never (the buffer of 1024 rows forces one) */
    int stats_step;  /* a statistics step (0: none) */
    int eval_step;   /* an evaluation step (0: none) */
    int kill_step;   /* raise(SIGKILL) after logging this step */
    int train_rows;  /* expected in the file: steps 1..train_rows */
    int stats_rows, eval_rows;
} scenario;

static const scenario g_cases[] = {
    {"before any flush", 5, 0, 0, 3, 0, 0, 0},
    {"two rows after a flush", 5, 0, 0, 7, 5, 0, 0},
    {"right after a flush", 5, 0, 0, 20, 20, 0, 0},
    {"right after a stats write", 5, 12, 0, 12, 12, 1, 0},
    {"two rows after a stats write", 5, 12, 0, 14, 12, 1, 0},
    {"right after an eval write", 5, 0, 13, 13, 13, 0, 1},
    {"after the forced flush of a full buffer", 0, 0, 0, 1030, 1024, 0, 0},
};

static mpx_runlog_meta make_meta(void) {
    mpx_runlog_meta m = {0};
    m.config = "[log]\nstats_every = 12\n";
    m.model = "kill";
    m.eval_metric = "top1";
    m.n_layers = L;
    m.layers = g_layers;
    return m;
}

static void fill_stats(mpx_layer_stats *s, int step) {
    memset(s, 0, L * sizeof *s);
    for (int l = 0; l < L; l++) {
        s[l].act.nonzero = (uint64_t)(step * 10 + l);
        s[l].act.hist[40] = (uint64_t)(step + l);
        s[l].wgrad.hist[MPX_HIST_ZERO] = (uint64_t)step;
        s[l].scale = 1024.0;
        s[l].layer_scale = 1.0;
    }
}

/* The child: log until kill_step, then die without closing anything. */
static void child(const char *path, const scenario *c) {
    mpx_runlog_meta meta = make_meta();
    mpx_runlog *r = NULL;
    mpx_layer_stats st[L];
    if (mpx_runlog_create(path, &meta, 1, &r) != MPX_OK) _exit(3);
    for (int i = 1;; i++) {
        mpx_train_row row = {.step = i,
                             .loss = 1.0f / (float)i,
                             .lr = 0.1f,
                             .loss_scale = 1024.0,
                             .wall_s = 0.01 * i};
        if (mpx_runlog_train(r, &row) != MPX_OK) _exit(4);
        if (c->flush_every && i % c->flush_every == 0 && mpx_runlog_flush(r) != MPX_OK) _exit(5);
        if (i == c->stats_step) {
            fill_stats(st, i);
            if (mpx_runlog_stats(r, i, st) != MPX_OK) _exit(6);
        }
        if (i == c->eval_step && mpx_runlog_eval(r, i, 0.5f, 0.25f) != MPX_OK) _exit(7);
        if (i == c->kill_step) raise(SIGKILL);
    }
}

static int64_t rows_of(hid_t f, const char *name) {
    hsize_t dims[3] = {0};
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t sp = H5Dget_space(d);
    if (H5Sget_simple_extent_ndims(sp) <= 3) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    return (int64_t)dims[0];
}

static void check_file(const char *path, const scenario *c, int have_h5dump) {
    if (have_h5dump) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "h5dump -H '%s' >/dev/null 2>&1", path);
        int rc = system(cmd);
        CHECK(rc == 0, "%s: h5dump -H fails on the killed run's file (status %d)", c->what, rc);
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0, "%s: the killed run's file does not open", c->what);
    if (f < 0) return;
    int64_t n = rows_of(f, "/train/step");
    CHECK(n == c->train_rows, "%s: /train/step has %lld rows, want %d", c->what, (long long)n,
          c->train_rows);
    if (n == c->train_rows && n > 0) {
        int64_t *steps = calloc((size_t)n, sizeof *steps);
        hid_t d = H5Dopen2(f, "/train/step", H5P_DEFAULT);
        CHECK(steps && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps) >= 0,
              "%s: reading /train/step", c->what);
        for (int64_t i = 0; steps && i < n; i++)
            CHECK(steps[i] == i + 1, "%s: /train/step[%lld] = %lld", c->what, (long long)i,
                  (long long)steps[i]);
        H5Dclose(d);
        free(steps);
    }
    CHECK(rows_of(f, "/train/loss") == c->train_rows &&
              rows_of(f, "/train/wall_s") == c->train_rows,
          "%s: /train columns differ in length", c->what);
    CHECK(rows_of(f, "/stats/step") == c->stats_rows &&
              rows_of(f, "/stats/act_grad_hist") == c->stats_rows &&
              rows_of(f, "/stats/w_max") == c->stats_rows,
          "%s: /stats has %lld rows, want %d", c->what, (long long)rows_of(f, "/stats/step"),
          c->stats_rows);
    CHECK(rows_of(f, "/eval/step") == c->eval_rows, "%s: /eval has %lld rows, want %d", c->what,
          (long long)rows_of(f, "/eval/step"), c->eval_rows);
    H5Fclose(f);

    /* Our own reader exports it... */
    FILE *tf = tmpfile();
    if (tf) {
        mpx_status st = mpx_runlog_export(path, "train", NULL, tf);
        CHECK(st == MPX_OK, "%s: export: %s", c->what, mpx_error_message());
        CHECK(ftell(tf) > 0, "%s: empty export", c->what);
        fclose(tf);
    }
    /* ...and a resumed run continues it. */
    mpx_runlog_meta meta = make_meta();
    mpx_runlog *r = NULL;
    CHECK_OK(mpx_runlog_reopen(path, &meta, c->train_rows + 1, &r)); /* after its last row */
    if (!r) return;
    mpx_train_row row = {.step = c->train_rows + 1, .loss = 1.0f};
    CHECK_OK(mpx_runlog_train(r, &row));
    CHECK_OK(mpx_runlog_close(r));
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0 && rows_of(f, "/train/step") == c->train_rows + 1,
          "%s: the resumed file has %lld training rows, want %d", c->what,
          (long long)(f >= 0 ? rows_of(f, "/train/step") : -1), c->train_rows + 1);
    if (f >= 0) H5Fclose(f);
}

/* Export `path` (train) from a fresh process while this one has it open for writing. */
static void check_live_export(const char *dir) {
    char self[1024], path[1100], tsv[1100], cmd[4000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        printf("cannot find this executable: skipping the export of a live run\n");
        return;
    }
    self[n] = '\0';
    snprintf(path, sizeof path, "%s/live.h5", dir);
    snprintf(tsv, sizeof tsv, "%s/live.tsv", dir);
    mpx_runlog_meta meta = make_meta();
    mpx_runlog *r = NULL;
    CHECK_OK(mpx_runlog_create(path, &meta, 0, &r));
    if (!r) return;
    for (int i = 1; i <= 9; i++) {
        mpx_train_row row = {.step = i};
        CHECK_OK(mpx_runlog_train(r, &row));
        if (i == 7) CHECK_OK(mpx_runlog_flush(r)); /* rows 8 and 9 stay buffered */
    }
    snprintf(cmd, sizeof cmd, "'%s' --export '%s' > '%s'", self, path, tsv);
    int rc = system(cmd);
    CHECK(rc == 0, "exporting a live run from another process failed (status %d)", rc);
    FILE *f = fopen(tsv, "r");
    int lines = 0, ch;
    while (f && (ch = fgetc(f)) != EOF) lines += ch == '\n';
    if (f) fclose(f);
    CHECK(lines == 1 + 7, "the live export has %d lines, want a header and 7 rows", lines);
    CHECK_OK(mpx_runlog_close(r));
}

int main(int argc, char **argv) {
    char dir[1024], path[1100];
    if (argc == 3 && strcmp(argv[1], "--export") == 0) /* the other process of check_live_export */
        return mpx_runlog_export(argv[2], "train", NULL, stdout) == MPX_OK ? 0 : 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    mpx_test_tmpdir("runlog-kill", dir, sizeof dir);
    REQUIRE(dir[0], "no temporary directory");
    int have_h5dump = system("command -v h5dump >/dev/null 2>&1") == 0;
    if (!have_h5dump) printf("h5dump not found: skipping the h5dump -H checks\n");

    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++) {
        const scenario *c = &g_cases[i];
        snprintf(path, sizeof path, "%s/kill%zu.h5", dir, i);
        fflush(NULL); /* nothing buffered may be written twice by the child */
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork failed");
        if (pid == 0) child(path, c);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "%s: the child did not die by SIGKILL (status %d)", c->what, status);
        if (!WIFSIGNALED(status)) continue;
        check_file(path, c, have_h5dump);
        printf("killed %-40s train %4d stats %d eval %d: checked\n", c->what, c->train_rows,
               c->stats_rows, c->eval_rows);
    }

    check_live_export(dir);

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return mpx_test_done(__FILE__);
}
