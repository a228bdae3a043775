/* task_classify.c — image classification: ResNets on CIFAR-10, Fashion-MNIST, an ImageNet-style
 * image folder, or seeded random images (benchmarks); metric top-1.
 *
 * CIFAR-10 and Fashion-MNIST are loaded into memory (CIFAR converted into the cache once);
 * image folders stay on disk and are decoded by the loader. Normalisation statistics come from
 * the training set itself (ImageNet's published ones for image folders), so a user's own copy
 * works unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/rng.h"
#include "task.h"

typedef struct {
    mpx_dataset train, eval;                      /* in-memory sources */
    mpx_image_folder *train_folder, *eval_folder; /* on-disk source */
    int h, w, c, num_classes;
    float mean[MPX_DATA_MAX_CHANNELS], std[MPX_DATA_MAX_CHANNELS];
    mpx_loader *loader;
    mpx_batch batch; /* the current training batch */
    int image, labels, logits; /* tensor ids (the same in every graph the task builds) */
    float *logits_host;
} classify;

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

static mpx_status cls_open(run_task *t) {
    classify *d = mpx_calloc(1, sizeof *d);
    if (!d) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    t->impl = d;
    const mpx_run_cfg *rc = t->rc;
    const mpx_data_cfg *c = &rc->data;
    if (strcmp(c->dataset, "cifar10") == 0) {
        mpx_cifar10_opts o = {c->cache_dir, c->shared_dir, 0, 0, 1};
        MPX_TRY(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &d->train, NULL));
        MPX_TRY(mpx_cifar10_load(&o, MPX_SPLIT_TEST, &d->eval, NULL));
        snprintf(t->dataset, sizeof t->dataset, "cifar10");
    } else if (strcmp(c->dataset, "fashion_mnist") == 0) {
        const char *dir = c->root[0] ? c->root : NULL;
        MPX_TRY(mpx_fashion_mnist_load(dir, MPX_SPLIT_TRAIN, &d->train));
        MPX_TRY(mpx_fashion_mnist_load(dir, MPX_SPLIT_TEST, &d->eval));
        snprintf(t->dataset, sizeof t->dataset, "fashion_mnist");
    } else if (strcmp(c->dataset, "imagefolder") == 0) {
        MPX_TRY(mpx_image_folder_open(c->root, "train", &d->train_folder));
        MPX_TRY(mpx_image_folder_open(c->root, "val", &d->eval_folder));
        snprintf(t->dataset, sizeof t->dataset, "imagefolder:%.200s", c->root);
    } else {
        int size = c->resolution > 0 ? c->resolution : 32;
        MPX_TRY(make_synthetic(&d->train, 2048, size, rc->train.seed + 1));
        MPX_TRY(make_synthetic(&d->eval, 512, size, rc->train.seed + 2));
        snprintf(t->dataset, sizeof t->dataset, "synthetic (random images, no signal)");
    }
    if (d->train_folder) {
        d->h = d->w = c->resolution;
        d->c = 3;
        d->num_classes = mpx_image_folder_num_classes(d->train_folder);
        const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
        memcpy(d->mean, mean, sizeof mean);
        memcpy(d->std, std, sizeof std);
        t->n_train = mpx_image_folder_count(d->train_folder);
        t->n_eval = mpx_image_folder_count(d->eval_folder);
        if (c->train_subset > 0 || c->eval_subset > 0)
            return mpx_fail(MPX_ERR_INPUT, "data.train_subset/eval_subset: not supported for imagefolder");
        return MPX_OK;
    }
    subset(&d->train, c->train_subset);
    subset(&d->eval, c->eval_subset);
    if (c->resolution && (c->resolution != d->train.h || c->resolution != d->train.w))
        return mpx_fail(MPX_ERR_INPUT,
                        "data.resolution = %d: %s images are %dx%d (resizing is for imagefolder)",
                        c->resolution, t->dataset, d->train.h, d->train.w);
    d->h = d->train.h;
    d->w = d->train.w;
    d->c = d->train.c;
    d->num_classes = d->train.num_classes;
    t->n_train = d->train.n;
    t->n_eval = d->eval.n;
    for (int k = 0; k < MPX_DATA_MAX_CHANNELS; k++) {
        d->mean[k] = 0;
        d->std[k] = 1;
    }
    if (c->normalize) mpx_dataset_channel_stats(&d->train, d->mean, d->std);
    return MPX_OK;
}

static mpx_status make_loader(run_task *t, int train, mpx_loader_pos start, mpx_loader **out) {
    classify *d = t->impl;
    const mpx_data_cfg *c = &t->rc->data;
    int batch = train ? t->rc->train.batch_size : task_batch(t);
    mpx_loader_config lc = train ? mpx_loader_config_train(batch, t->rc->train.seed)
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
        lc.threads = t->rc->train.threads > 0 ? t->rc->train.threads : 2;
        return mpx_loader_create_folder(train ? d->train_folder : d->eval_folder, &lc, start, out);
    }
    return mpx_loader_create(train ? &d->train : &d->eval, &lc, start, out);
}

static mpx_status cls_build(run_task *t, mpx_graph *g) {
    classify *d = t->impl;
    const int vgg = strcmp(t->rc->model.arch, "vgg") == 0;
    mpx_resnet_cfg rn = t->rc->model.resnet;
    mpx_vgg_cfg vc = t->rc->model.vgg;
    int classes = vgg ? vc.num_classes : rn.num_classes;
    if (classes == 0) classes = d->num_classes;
    if (classes < d->num_classes)
        return mpx_fail(MPX_ERR_INPUT, "model.num_classes = %d but %s has %d classes", classes,
                        t->dataset, d->num_classes);
    rn.num_classes = vc.num_classes = classes;
    if (vgg)
        MPX_TRY(mpx_vgg_build(g, &vc, task_batch(t), d->h, d->w, d->c, &d->image, &d->labels,
                              &d->logits));
    else
        MPX_TRY(mpx_resnet_build(g, &rn, task_batch(t), d->h, d->w, d->c, &d->image, &d->labels,
                                 &d->logits));
    if (!d->logits_host) {
        d->logits_host = mpx_calloc((size_t)task_batch(t) * (size_t)classes, sizeof(float));
        if (!d->logits_host) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    }
    return MPX_OK;
}

static mpx_status cls_start(run_task *t, mpx_loader_pos pos) {
    classify *d = t->impl;
    mpx_loader_free(d->loader);
    d->loader = NULL;
    return make_loader(t, 1, pos, &d->loader);
}

static mpx_status cls_fetch(run_task *t) {
    classify *d = t->impl;
    return mpx_loader_next(d->loader, &d->batch);
}

static mpx_status feed_batch(const classify *d, mpx_graph *g, const mpx_batch *b) {
    MPX_TRY(mpx_graph_set_input(g, d->image, b->x, MPX_F32,
                                (int64_t)b->batch_size * b->h * b->w * b->c));
    return mpx_graph_set_input(g, d->labels, b->y, MPX_I32, b->batch_size);
}

/* This rank's slice of the global training batch (task.h). */
static mpx_status cls_feed(run_task *t, mpx_graph *g) {
    const classify *d = t->impl;
    mpx_batch b = d->batch;
    const int off = task_shard(t), per = task_batch(t);
    b.x += (size_t)off * b.h * b.w * b.c;
    b.y += off;
    b.n = b.n - off < 0 ? 0 : b.n - off < per ? b.n - off : per;
    b.batch_size = per;
    return feed_batch(d, g, &b);
}

static mpx_loader_pos cls_position(const run_task *t) {
    const classify *d = t->impl;
    return mpx_loader_position(d->loader);
}

static mpx_status cls_evaluate(run_task *t, mpx_graph *g, double *loss, double *top1) {
    classify *d = t->impl;
    mpx_loader *L;
    mpx_loader_pos start = {0, 0};
    MPX_TRY(make_loader(t, 0, start, &L));
    int64_t nb = mpx_loader_batches_per_epoch(L), limit = task_eval_batches(t);
    if (limit > 0 && limit < nb) nb = limit;
    int64_t shape[2];
    mpx_graph_tensor_shape(g, d->logits, shape);
    const int classes = (int)shape[1];
    double loss_sum = 0, correct = 0, count = 0;
    /* With a bootstrap or a units file: each image's loss and hit, in evaluation order. */
    eval_units units = {0};
    const int keep = t->bootstrap > 0 || t->units;
    mpx_status st = MPX_OK;
    for (int64_t b = 0; b < nb && st == MPX_OK; b++) {
        mpx_batch batch;
        st = mpx_loader_next(L, &batch);
        if (st == MPX_OK) st = feed_batch(d, g, &batch);
        if (st == MPX_OK) st = mpx_graph_forward(g, 0);
        if (st == MPX_OK) st = mpx_graph_read(g, d->logits, d->logits_host);
        if (st != MPX_OK) break;
        /* The loss is the mean over the batch's real rows (padding rows carry label -1). */
        loss_sum += (double)mpx_graph_loss(g) * batch.n;
        for (int i = 0; i < batch.n; i++) {
            const float *row = d->logits_host + (size_t)i * classes;
            int best = 0;
            for (int k = 1; k < classes; k++)
                if (row[k] > row[best]) best = k;
            correct += best == batch.y[i];
            if (keep && st == MPX_OK)
                st = eval_units_add(&units, eval_row_xent(row, classes, batch.y[i]),
                                    best == batch.y[i], 1);
        }
        count += batch.n;
    }
    mpx_loader_free(L);
    if (st == MPX_OK && keep)
        st = eval_units_report(&units, t->bootstrap, t->units, &t->boot, &t->boot_loss);
    eval_units_free(&units);
    if (st != MPX_OK) return mpx_fail_context(st, "evaluation");
    *loss = count > 0 ? loss_sum / count : NAN;
    *top1 = count > 0 ? 100.0 * correct / count : NAN;
    return MPX_OK;
}

static void cls_close(run_task *t) {
    classify *d = t->impl;
    mpx_loader_free(d->loader);
    mpx_dataset_free(&d->train);
    mpx_dataset_free(&d->eval);
    mpx_image_folder_free(d->train_folder);
    mpx_image_folder_free(d->eval_folder);
    free(d->logits_host);
    free(d);
    t->impl = NULL;
}

const run_task_ops run_task_classify = {"classify", "top1", cls_open, cls_build, cls_start,
                                        cls_fetch, cls_feed, cls_position, cls_evaluate, cls_close};
