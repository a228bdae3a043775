/* test_data_cifar10_real.c (slow) — convert the real ../shared/data/cifar10-jpg.tar.gz into a
 * temporary cache and check the official counts: 50000 training images (5000 per class, 1000
 * per class in each of the 5 batches), 10000 test images (1000 per class), the documented
 * record order, a checksummed second load without conversion, and loader throughput.
 * Skipped (77) when the archive is not there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpx/data.h"
#include "mpx/runtime.h"
#include "testutil.h"

int main(void) {
    char shared[1200], archive[1300], tmp[1024];
    mpx_test_source_path("../shared/data", shared, sizeof shared);
    snprintf(archive, sizeof archive, "%s/cifar10-jpg.tar.gz", shared);
    struct stat sb;
    if (stat(archive, &sb) != 0) {
        printf("skipped: %s not found\n", archive);
        return MPX_TEST_SKIP;
    }
    REQUIRE(mpx_test_tmpdir("data_cifar10_real", tmp, sizeof tmp)[0], "no temp dir");
    mpx_cifar10_opts o = {.cache_dir = tmp, .shared_dir = shared, .progress = 1};
    mpx_cifar10_info info;
    mpx_dataset train, test;
    double t0 = mpx_now();
    mpx_status st = mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &train, &info);
    double t_first = mpx_now() - t0;
    REQUIRE(st == MPX_OK, "load: %s", mpx_error_message());
    CHECK(info.converted && info.checksummed, "first load: converted %d checksummed %d",
          info.converted, info.checksummed);
    printf("conversion (one time, %d threads): %.2f s; first load incl. conversion %.2f s\n",
           mpx_threads_get(), info.convert_s, t_first);

    t0 = mpx_now();
    CHECK_OK(mpx_cifar10_load(&o, MPX_SPLIT_TEST, &test, &info));
    CHECK(!info.converted && info.checksummed,
          "second load converted again or skipped the manifest");
    printf("test split load (checksummed): %.2f s\n", mpx_now() - t0);
    t0 = mpx_now();
    mpx_dataset again;
    CHECK_OK(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &again, &info));
    printf("training split reload (checksummed, 150 MB): %.2f s\n", mpx_now() - t0);
    CHECK(!info.converted, "reload converted again");
    mpx_dataset_free(&again);

    CHECK(train.n == 50000 && test.n == 10000, "counts %lld / %lld", (long long)train.n,
          (long long)test.n);
    int64_t per[10] = {0}, per_test[10] = {0}, batch_per[5][10] = {{0}}, order = 0;
    for (int64_t i = 0; i < train.n; i++) {
        per[train.labels[i]]++;
        batch_per[i / 10000][train.labels[i]]++;
        order += train.labels[i] != i % 10;
    }
    for (int64_t i = 0; i < test.n; i++) {
        per_test[test.labels[i]]++;
        order += test.labels[i] != i % 10;
    }
    for (int k = 0; k < 10; k++) {
        CHECK(per[k] == 5000 && per_test[k] == 1000, "class %d: %lld train, %lld test", k,
              (long long)per[k], (long long)per_test[k]);
        for (int b = 0; b < 5; b++)
            CHECK(batch_per[b][k] == 1000, "batch %d class %d: %lld", b + 1, k,
                  (long long)batch_per[b][k]);
    }
    CHECK(order == 0, "%lld records out of the interleaved class order", (long long)order);
    /* Real photographs: per-channel statistics near the published CIFAR-10 values
     * (mean 0.491 0.482 0.447, std 0.247 0.243 0.262); 0.01 allows for the JPEG re-encoding. */
    float mean[3], std[3];
    mpx_dataset_channel_stats(&train, mean, std);
    const float ref_mean[3] = {0.4914f, 0.4822f, 0.4465f}, ref_std[3] = {0.2470f, 0.2435f, 0.2616f};
    for (int c = 0; c < 3; c++)
        CHECK(fabsf(mean[c] - ref_mean[c]) < 0.01f && fabsf(std[c] - ref_std[c]) < 0.01f,
              "channel %d: mean %.4f std %.4f", c, mean[c], std[c]);
    printf("channel mean %.4f %.4f %.4f, std %.4f %.4f %.4f\n", mean[0], mean[1], mean[2], std[0],
           std[1], std[2]);

    /* Loader throughput over one epoch: batch 128, pad-crop 4 + flip, normalised. */
    mpx_loader_config cfg = mpx_loader_config_train(128, 1);
    cfg.pad = 4;
    cfg.flip = 1;
    for (int c = 0; c < 3; c++) {
        cfg.mean[c] = mean[c];
        cfg.std[c] = std[c];
    }
    mpx_loader *L;
    mpx_loader_pos start = {0, 0};
    CHECK_OK(mpx_loader_create(&train, &cfg, start, &L));
    if (L) {
        t0 = mpx_now();
        int64_t bpe = mpx_loader_batches_per_epoch(L);
        double sum = 0;
        for (int64_t b = 0; b < bpe; b++) {
            mpx_batch batch;
            CHECK_OK(mpx_loader_next(L, &batch));
            sum += batch.x[0];
        }
        double dt = mpx_now() - t0;
        printf("loader: %lld batches of 128 in %.2f s (%.0f images/s) [checksum %.3f]\n",
               (long long)bpe, dt, bpe * 128 / dt, sum);
        mpx_loader_free(L);
    }
    mpx_dataset_free(&train);
    mpx_dataset_free(&test);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return mpx_test_done(__FILE__);
}
