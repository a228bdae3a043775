/* test_runlog_full.c — a full disk while logging is MPX_ERR_IO naming the file, not a crash,
 * and the file keeps everything up to the last successful flush.
 *
 * Mounts a 2 MiB tmpfs (needs root; the test is skipped with a message when the mount is
 * refused), creates a run file on it and logs 10 training rows and one statistics step with
 * incompressible histograms (2 x 40 x 83 x 8 = 53 KB) per round until the disk is full. The
 * first failing call must return MPX_ERR_IO with a message naming the file and the system's
 * reason; later calls must return the same error, close must return it too and free
 * everything (ASan checks that), the process must exit cleanly (HDF5 1.10 crashes at exit
 * when a file's close failed), and the file must export exactly the rounds that succeeded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpx/rng.h"
#include "mpx/runlog.h"
#include "testutil.h"

enum { L = 40, MAX_STEPS = 100 };

static void fill_stats(mpx_layer_stats *s, int step) {
    memset(s, 0, L * sizeof *s);
    for (int l = 0; l < L; l++)
        for (int b = 0; b < MPX_HIST_BINS; b++) { /* random counts: gzip cannot shrink them */
            uint32_t w[4];
            mpx_philox((uint64_t)step, MPX_RNG_TEST, (uint64_t)(l * MPX_HIST_BINS + b), w);
            s[l].act.hist[b] = ((uint64_t)w[0] << 32) | w[1];
            s[l].wgrad.hist[b] = ((uint64_t)w[2] << 32) | w[3];
        }
}

int main(void) {
    char dir[1024], mnt[1100], path[1200];
    mpx_test_tmpdir("runlog-full", dir, sizeof dir);
    REQUIRE(dir[0], "no temporary directory");
    snprintf(mnt, sizeof mnt, "%s/fs", dir);
    int made = mkdir(mnt, 0700) == 0; /* not inside REQUIRE: it evaluates its condition twice */
    REQUIRE(made, "cannot make %s", mnt);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=2m") != 0) {
        printf("test_runlog_full: skipped: cannot mount a small tmpfs (needs root)\n");
        rmdir(mnt);
        rmdir(dir);
        return MPX_TEST_SKIP;
    }
    snprintf(path, sizeof path, "%s/run.h5", mnt);

    mpx_layer_info layers[L];
    char names[L][16];
    for (int l = 0; l < L; l++) {
        snprintf(names[l], sizeof names[l], "layer%d", l);
        layers[l] = (mpx_layer_info){names[l], "linear", 1000, 100};
    }
    mpx_runlog_meta meta = {.config = "", .model = "full", .n_layers = L, .layers = layers};
    mpx_runlog *r = NULL;
    CHECK_OK(mpx_runlog_create(path, &meta, 0, &r));
    static mpx_layer_stats st[L];
    mpx_status err = MPX_OK;
    int ok = 0; /* rounds fully written */
    char first_msg[2048] = "";
    for (int round = 0; r && round < MAX_STEPS && err == MPX_OK; round++) {
        for (int i = 0; i < 10 && err == MPX_OK; i++) {
            mpx_train_row row = {.step = round * 10 + i, .loss = 1.0f};
            err = mpx_runlog_train(r, &row);
        }
        fill_stats(st, round);
        if (err == MPX_OK) err = mpx_runlog_stats(r, round * 10 + 9, st);
        if (err == MPX_OK) ok++;
    }
    if (err != MPX_OK) snprintf(first_msg, sizeof first_msg, "%s", mpx_error_message());
    printf("disk full after %d rounds: %s\n", ok, first_msg);
    CHECK(err == MPX_ERR_IO, "a full disk gave %s, want MPX_ERR_IO (%d rounds)",
          mpx_status_name(err), ok);
    CHECK(ok >= 1, "not one round fitted on the disk: the test checks nothing about the file");
    CHECK(strstr(first_msg, path), "the message does not name the file: %s", first_msg);
    CHECK(strstr(first_msg, "No space left on device"), "the message does not give the reason: %s",
          first_msg);

    /* The error sticks: later calls repeat it and do not write. */
    if (r) {
        mpx_train_row row = {.step = 100000};
        mpx_status s1 = mpx_runlog_train(r, &row);
        CHECK(s1 == MPX_ERR_IO && strcmp(mpx_error_message(), first_msg) == 0,
              "train after the failure: %s: %s", mpx_status_name(s1), mpx_error_message());
        CHECK(mpx_runlog_eval(r, 100000, 1.0f, 1.0f) == MPX_ERR_IO, "eval after the failure");
        CHECK(mpx_runlog_flush(r) == MPX_ERR_IO, "flush after the failure");
        mpx_status sc = mpx_runlog_close(r);
        CHECK(sc == MPX_ERR_IO && strcmp(mpx_error_message(), first_msg) == 0,
              "close after the failure: %s: %s", mpx_status_name(sc), mpx_error_message());
    }

    /* The file holds exactly the rounds that succeeded (one header line per export). */
    static const char *const what[2] = {"train", "underflow"};
    const int want[2] = {1 + 10 * ok, 1 + L * ok};
    for (int w = 0; w < 2; w++) {
        FILE *tf = tmpfile();
        if (!tf) break;
        mpx_status se = mpx_runlog_export(path, what[w], NULL, tf);
        CHECK(se == MPX_OK, "export %s after the full disk: %s", what[w], mpx_error_message());
        rewind(tf);
        int lines = 0, ch;
        while ((ch = fgetc(tf)) != EOF) lines += ch == '\n';
        CHECK(lines == want[w], "export %s after the full disk: %d lines, want %d", what[w], lines,
              want[w]);
        fclose(tf);
    }

    if (umount2(mnt, MNT_DETACH) != 0) fprintf(stderr, "could not unmount %s\n", mnt);
    rmdir(mnt);
    rmdir(dir);
    return mpx_test_done(__FILE__);
}
