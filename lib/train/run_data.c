/* run_data.c — open the training and evaluation data a run config names.
 *
 * cifar10 and fashion_mnist are loaded into memory (CIFAR converted into the cache once);
 * imagefolder stays on disk and is decoded by the loader; synthetic makes seeded random images
 * for benchmarks and says so in its name. Normalisation statistics come from the training set
 * itself (ImageNet's published ones for image folders), so a user's own copy works unchanged.
 */
#include <stdio.h>
#include <string.h>

#include "mpx/rng.h"
#include "run_internal.h"

static void subset(mpx_dataset *ds, int64_t n) {
    if (n > 0 && n < ds->n) ds->n = n;
}

static mpx_status make_synthetic(mpx_dataset *ds, int64_t n, int size, uint64_t seed) {
    MPX_TRY(mpx_dataset_alloc(ds, n, size, size, 3, 10));
    size_t pixels = (size_t)n * (size_t)size * (size_t)size * 3;
    for (size_t i = 0; i < pixels; i++)
        ds->images[i] = (uint8_t)(mpx_rand_u32(seed, MPX_RNG_TEST, i) & 0xff);
    for (int64_t i = 0; i < n; i++)
        ds->labels[i] = (int32_t)(mpx_rand_u32(seed ^ 0x5eed, MPX_RNG_TEST, (uint64_t)i) % 10);
    return MPX_OK;
}

mpx_status run_data_open(const mpx_run_cfg *rc, run_data *d) {
    memset(d, 0, sizeof *d);
    const mpx_data_cfg *c = &rc->data;
    if (strcmp(c->dataset, "cifar10") == 0) {
        mpx_cifar10_opts o = {c->cache_dir, c->shared_dir, 0, 0, 1};
        MPX_TRY(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &d->train, NULL));
        MPX_TRY(mpx_cifar10_load(&o, MPX_SPLIT_TEST, &d->eval, NULL));
        snprintf(d->name, sizeof d->name, "cifar10");
    } else if (strcmp(c->dataset, "fashion_mnist") == 0) {
        const char *dir = c->root[0] ? c->root : NULL;
        MPX_TRY(mpx_fashion_mnist_load(dir, MPX_SPLIT_TRAIN, &d->train));
        MPX_TRY(mpx_fashion_mnist_load(dir, MPX_SPLIT_TEST, &d->eval));
        snprintf(d->name, sizeof d->name, "fashion_mnist");
    } else if (strcmp(c->dataset, "imagefolder") == 0) {
        MPX_TRY(mpx_image_folder_open(c->root, "train", &d->train_folder));
        MPX_TRY(mpx_image_folder_open(c->root, "val", &d->eval_folder));
        snprintf(d->name, sizeof d->name, "imagefolder:%.200s", c->root);
    } else if (strcmp(c->dataset, "synthetic") == 0) {
        int size = c->resolution > 0 ? c->resolution : 32;
        MPX_TRY(make_synthetic(&d->train, 2048, size, rc->train.seed + 1));
        MPX_TRY(make_synthetic(&d->eval, 512, size, rc->train.seed + 2));
        snprintf(d->name, sizeof d->name, "synthetic (random images, no signal)");
    } else {
        return mpx_fail(MPX_ERR_INPUT, "data.dataset = %s: unknown dataset", c->dataset);
    }

    if (d->train_folder) {
        d->h = d->w = c->resolution;
        d->c = 3;
        d->num_classes = mpx_image_folder_num_classes(d->train_folder);
        const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
        memcpy(d->mean, mean, sizeof mean);
        memcpy(d->std, std, sizeof std);
        d->n_train = mpx_image_folder_count(d->train_folder);
        d->n_eval = mpx_image_folder_count(d->eval_folder);
        if (c->train_subset > 0 || c->eval_subset > 0)
            return mpx_fail(MPX_ERR_INPUT, "data.train_subset/eval_subset: not supported for imagefolder");
        return MPX_OK;
    }
    subset(&d->train, c->train_subset);
    subset(&d->eval, c->eval_subset);
    if (c->resolution && (c->resolution != d->train.h || c->resolution != d->train.w))
        return mpx_fail(MPX_ERR_INPUT,
                        "data.resolution = %d: %s images are %dx%d (resizing is for imagefolder)",
                        c->resolution, d->name, d->train.h, d->train.w);
    d->h = d->train.h;
    d->w = d->train.w;
    d->c = d->train.c;
    d->num_classes = d->train.num_classes;
    d->n_train = d->train.n;
    d->n_eval = d->eval.n;
    for (int k = 0; k < MPX_DATA_MAX_CHANNELS; k++) {
        d->mean[k] = 0;
        d->std[k] = 1;
    }
    if (c->normalize) mpx_dataset_channel_stats(&d->train, d->mean, d->std);
    return MPX_OK;
}

mpx_status run_data_loader(const mpx_run_cfg *rc, run_data *d, int train, mpx_loader_pos start,
                           mpx_loader **out) {
    const mpx_data_cfg *c = &rc->data;
    int batch = rc->train.batch_size;
    mpx_loader_config lc = train ? mpx_loader_config_train(batch, rc->train.seed)
                                 : mpx_loader_config_eval(batch);
    memcpy(lc.mean, d->mean, sizeof lc.mean);
    memcpy(lc.std, d->std, sizeof lc.std);
    lc.out_h = d->h;
    lc.out_w = d->w;
    if (train) {
        lc.flip = c->flip;
        if (d->train_folder)
            lc.random_resized_crop = 1;
        else
            lc.pad = c->crop_pad;
    }
    if (d->train_folder) {
        lc.threads = rc->train.threads > 0 ? rc->train.threads : 2;
        return mpx_loader_create_folder(train ? d->train_folder : d->eval_folder, &lc, start, out);
    }
    return mpx_loader_create(train ? &d->train : &d->eval, &lc, start, out);
}

void run_data_close(run_data *d) {
    mpx_dataset_free(&d->train);
    mpx_dataset_free(&d->eval);
    mpx_image_folder_free(d->train_folder);
    mpx_image_folder_free(d->eval_folder);
    memset(d, 0, sizeof *d);
}
