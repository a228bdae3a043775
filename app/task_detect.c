/* task_detect.c — object detection: SSD on procedural scenes (CIFAR-10 objects pasted on
 * textured backgrounds, exact boxes) or a Pascal VOC layout; metric mAP@0.5 (VOC07 11-point).
 *
 * Training batches carry SSD's augmentation (expand, IoU-constrained crop, flip); evaluation
 * decodes the predictions, runs per-class NMS and scores them with the VOC devkit protocol
 * (ssd.h). Ground-truth labels enter the loss as 1..classes (0 is background).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"
#include "mpx/ssd.h"
#include "task.h"

typedef struct {
    mpx_dataset objects_train, objects_eval; /* scenes: the pasted object pools */
    mpx_scenes *scenes_train, *scenes_eval;
    mpx_det_dataset voc_train, voc_eval;     /* voc */
    int num_classes, size;
    float mean[3], std[3];
    mpx_det_loader *loader;
    mpx_det_batch batch;
    int image, gt_boxes, gt_labels, conf, loc;
    int64_t priors_n;
    float *priors;
    float *boxes_host, *conf_host, *loc_host;
    int32_t *labels_host;
} detect;

static mpx_status det_open(run_task *t) {
    detect *d = mpx_calloc(1, sizeof *d);
    if (!d) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    t->impl = d;
    const mpx_data_cfg *c = &t->rc->data;
    d->size = c->resolution > 0 ? c->resolution : 128;
    for (int k = 0; k < 3; k++) {
        d->mean[k] = 0.5f;
        d->std[k] = 0.25f;
    }
    if (strcmp(c->dataset, "scenes") == 0) {
        mpx_cifar10_opts o = {c->cache_dir, c->shared_dir, 0, 0, 1};
        MPX_TRY(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &d->objects_train, NULL));
        MPX_TRY(mpx_cifar10_load(&o, MPX_SPLIT_TEST, &d->objects_eval, NULL));
        mpx_scene_config sc = mpx_scene_config_default(MPX_SPLIT_TRAIN, c->scenes_train);
        sc.size = d->size;
        sc.seed += t->rc->train.seed;
        MPX_TRY(mpx_scenes_create(&d->objects_train, &sc, &d->scenes_train));
        mpx_scene_config se = mpx_scene_config_default(MPX_SPLIT_TEST, c->scenes_eval);
        se.size = d->size;
        MPX_TRY(mpx_scenes_create(&d->objects_eval, &se, &d->scenes_eval));
        d->num_classes = d->objects_train.num_classes;
        t->n_train = c->scenes_train;
        t->n_eval = c->scenes_eval;
        snprintf(t->dataset, sizeof t->dataset, "scenes (CIFAR-10 objects, %dx%d)", d->size, d->size);
    } else {
        mpx_voc_opts vo = {d->size, NULL, 0, 0};
        MPX_TRY(mpx_voc_load(c->root, MPX_SPLIT_TRAIN, &vo, &d->voc_train, NULL));
        MPX_TRY(mpx_voc_load(c->root, MPX_SPLIT_TEST, &vo, &d->voc_eval, NULL));
        d->num_classes = d->voc_train.num_classes;
        t->n_train = d->voc_train.n;
        t->n_eval = d->voc_eval.n;
        mpx_det_dataset_channel_stats(&d->voc_train, d->mean, d->std);
        snprintf(t->dataset, sizeof t->dataset, "voc:%.200s", c->root);
    }
    return MPX_OK;
}

static mpx_status det_build(run_task *t, mpx_graph *g) {
    detect *d = t->impl;
    mpx_ssd_cfg sc = t->rc->model.ssd;
    if (sc.num_classes == 0) sc.num_classes = d->num_classes;
    if (sc.num_classes < d->num_classes)
        return mpx_fail(MPX_ERR_INPUT, "model.num_classes = %d but %s has %d classes", sc.num_classes,
                        t->dataset, d->num_classes);
    sc.image_size = d->size;
    const int B = task_batch(t);
    /* The first build sizes the default boxes; later builds (bench variants) reuse them. */
    int64_t cap = d->priors ? d->priors_n * 4 : 0;
    MPX_TRY(mpx_ssd_build(g, &sc, B, MPX_DET_MAX_BOXES, &d->image, &d->gt_boxes, &d->gt_labels,
                          &d->conf, &d->loc, &d->priors_n, d->priors, cap));
    if (!d->priors) {
        const int64_t P = d->priors_n, C = sc.num_classes + 1;
        d->priors = malloc((size_t)P * 4 * sizeof(float));
        d->boxes_host = malloc((size_t)B * MPX_DET_MAX_BOXES * 4 * sizeof(float));
        d->labels_host = malloc((size_t)B * MPX_DET_MAX_BOXES * sizeof(int32_t));
        d->conf_host = malloc((size_t)B * P * C * sizeof(float));
        d->loc_host = malloc((size_t)B * P * 4 * sizeof(float));
        if (!d->priors || !d->boxes_host || !d->labels_host || !d->conf_host || !d->loc_host)
            return mpx_fail(MPX_ERR_NOMEM, "out of memory");
        mpx_graph *tmp = mpx_graph_new(); /* the priors, computed once by a throwaway build */
        if (!tmp) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
        mpx_status st = mpx_ssd_build(tmp, &sc, B, MPX_DET_MAX_BOXES, NULL, NULL, NULL, NULL, NULL,
                                      NULL, d->priors, P * 4);
        mpx_graph_free(tmp);
        MPX_TRY(st);
    }
    return MPX_OK;
}

static mpx_det_loader_config loader_config(const run_task *t, int train) {
    const detect *d = t->impl;
    mpx_det_loader_config lc = train ? mpx_det_loader_config_train(t->rc->train.batch_size,
                                                                   t->rc->train.seed)
                                     : mpx_det_loader_config_eval(task_batch(t));
    lc.size = d->size;
    if (train) lc.flip = t->rc->data.flip;
    memcpy(lc.mean, d->mean, sizeof lc.mean);
    memcpy(lc.std, d->std, sizeof lc.std);
    return lc;
}

static mpx_status make_loader(run_task *t, int train, mpx_loader_pos start, mpx_det_loader **out) {
    detect *d = t->impl;
    mpx_det_loader_config lc = loader_config(t, train);
    if (d->scenes_train)
        return mpx_det_loader_create_scenes(train ? d->scenes_train : d->scenes_eval, &lc, start, out);
    return mpx_det_loader_create(train ? &d->voc_train : &d->voc_eval, &lc, start, out);
}

static mpx_status det_start(run_task *t, mpx_loader_pos pos) {
    detect *d = t->impl;
    mpx_det_loader_free(d->loader);
    d->loader = NULL;
    return make_loader(t, 1, pos, &d->loader);
}

static mpx_status det_fetch(run_task *t) {
    detect *d = t->impl;
    return mpx_det_loader_next(d->loader, &d->batch);
}

/* The batch's boxes with labels shifted to 1..classes (0 is background); -1 stays padding. */
static mpx_status feed_batch(detect *d, mpx_graph *g, const mpx_det_batch *b) {
    const int64_t nb = (int64_t)b->batch_size * MPX_DET_MAX_BOXES;
    memcpy(d->boxes_host, b->boxes, (size_t)nb * 4 * sizeof(float));
    for (int64_t i = 0; i < nb; i++) d->labels_host[i] = b->labels[i] < 0 ? -1 : b->labels[i] + 1;
    MPX_TRY(mpx_graph_set_input(g, d->image, b->x, MPX_F32, (int64_t)b->batch_size * b->size * b->size * 3));
    MPX_TRY(mpx_graph_set_input(g, d->gt_boxes, d->boxes_host, MPX_F32, nb * 4));
    return mpx_graph_set_input(g, d->gt_labels, d->labels_host, MPX_I32, nb);
}

/* This rank's slice of the global training batch (task.h). */
static mpx_status det_feed(run_task *t, mpx_graph *g) {
    detect *d = t->impl;
    mpx_det_batch b = d->batch;
    const int off = task_shard(t), per = task_batch(t);
    b.x += (size_t)off * b.size * b.size * 3;
    b.boxes += (size_t)off * MPX_DET_MAX_BOXES * 4;
    b.labels += (size_t)off * MPX_DET_MAX_BOXES;
    b.difficult += (size_t)off * MPX_DET_MAX_BOXES;
    b.counts += off;
    b.index += off;
    b.n = b.n - off < 0 ? 0 : b.n - off < per ? b.n - off : per;
    b.batch_size = per;
    return feed_batch(d, g, &b);
}

static mpx_loader_pos det_position(const run_task *t) {
    const detect *d = t->impl;
    return mpx_det_loader_position(d->loader);
}

/* The VOC07 mAP (percent) of a bootstrap resample of the evaluation images: image idx[k] of
 * the set becomes image k of the resample, with its detections and ground truth. */
typedef struct {
    const mpx_detection *dets;
    const mpx_voc_gt *gt;
    const int64_t *det_off, *gt_off; /* [images + 1]: each image's rows (rows are by image) */
    mpx_detection *rd;
    mpx_voc_gt *rg;
    int classes;
} det_resample;

static mpx_status det_map_stat(void *ctx, const int64_t *idx, int64_t n, double *value) {
    det_resample *r = ctx;
    int64_t nd = 0, ng = 0;
    for (int64_t k = 0; k < n; k++) {
        for (int64_t i = r->det_off[idx[k]]; i < r->det_off[idx[k] + 1]; i++) {
            r->rd[nd] = r->dets[i];
            r->rd[nd++].image = (int32_t)k;
        }
        for (int64_t i = r->gt_off[idx[k]]; i < r->gt_off[idx[k] + 1]; i++) {
            r->rg[ng] = r->gt[i];
            r->rg[ng++].image = (int32_t)k;
        }
    }
    mpx_voc_summary sum;
    MPX_TRY(mpx_voc_map(r->rd, nd, r->rg, ng, r->classes, 0.5f, NULL, NULL, &sum));
    *value = 100.0 * sum.map_11pt;
    return MPX_OK;
}

/* Row offsets per image of rows sorted by image (`image` at byte offset `field` of each
 * `size`-byte row): off[i] .. off[i + 1] are image i's. */
static void image_offsets(const void *rows, int64_t n, size_t size, size_t field, int64_t images,
                          int64_t *off) {
    int64_t j = 0;
    for (int64_t i = 0; i <= images; i++) {
        while (j < n && *(const int32_t *)((const char *)rows + j * size + field) < i) j++;
        off[i] = j;
    }
}

static mpx_status det_bootstrap(run_task *t, const mpx_detection *dets, int64_t n_det,
                                const mpx_voc_gt *gt, int64_t n_gt, int64_t images, int classes) {
    det_resample r = {dets, gt, NULL, NULL, NULL, NULL, classes};
    int64_t *det_off = malloc((size_t)(images + 1) * sizeof *det_off);
    int64_t *gt_off = malloc((size_t)(images + 1) * sizeof *gt_off);
    /* A resample repeats images: at most `images` times the largest image's rows. */
    int64_t most_d = 0, most_g = 0;
    mpx_status st = det_off && gt_off ? MPX_OK : mpx_fail(MPX_ERR_NOMEM, "out of memory");
    if (st == MPX_OK) {
        image_offsets(dets, n_det, sizeof *dets, offsetof(mpx_detection, image), images, det_off);
        image_offsets(gt, n_gt, sizeof *gt, offsetof(mpx_voc_gt, image), images, gt_off);
        for (int64_t i = 0; i < images; i++) {
            if (det_off[i + 1] - det_off[i] > most_d) most_d = det_off[i + 1] - det_off[i];
            if (gt_off[i + 1] - gt_off[i] > most_g) most_g = gt_off[i + 1] - gt_off[i];
        }
        r.det_off = det_off, r.gt_off = gt_off;
        r.rd = malloc((size_t)(images * most_d + 1) * sizeof *r.rd);
        r.rg = malloc((size_t)(images * most_g + 1) * sizeof *r.rg);
        if (!r.rd || !r.rg) st = mpx_fail(MPX_ERR_NOMEM, "out of memory");
    }
    if (st == MPX_OK) st = eval_bootstrap(images, t->bootstrap, det_map_stat, &r, &t->boot);
    free(r.rd);
    free(r.rg);
    free(det_off);
    free(gt_off);
    return st;
}

/* The detections and ground truth of an evaluation as one TSV table (mpx eval --detections). */
static mpx_status det_write(FILE *f, const mpx_detection *dets, int64_t n_det,
                            const mpx_voc_gt *gt, int64_t n_gt, int64_t images, int classes) {
    fprintf(f, "# mpx eval detections: %lld images, classes 0..%d; boxes x0 y0 x1 y1 in units of "
               "the image side; score empty on ground truth, difficult empty on detections\n",
            (long long)images, classes - 1);
    fprintf(f, "kind\timage\tclass\tscore\tx0\ty0\tx1\ty1\tdifficult\n");
    for (int64_t i = 0; i < n_det; i++) {
        const mpx_detection *d = &dets[i];
        fprintf(f, "det\t%d\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t\n", d->image, d->cls, d->score,
                d->box[0], d->box[1], d->box[2], d->box[3]);
    }
    for (int64_t i = 0; i < n_gt; i++) {
        const mpx_voc_gt *o = &gt[i];
        fprintf(f, "gt\t%d\t%d\t\t%.9g\t%.9g\t%.9g\t%.9g\t%d\n", o->image, o->cls, o->box[0],
                o->box[1], o->box[2], o->box[3], o->difficult);
    }
    return ferror(f) ? mpx_fail(MPX_ERR_IO, "writing the detections failed") : MPX_OK;
}

/* Mean MultiBox loss and mAP@0.5 (VOC07 11-point, in percent) over the evaluation set. */
static mpx_status det_evaluate(run_task *t, mpx_graph *g, double *loss, double *map) {
    detect *d = t->impl;
    mpx_det_loader *L;
    mpx_loader_pos start = {0, 0};
    MPX_TRY(make_loader(t, 0, start, &L));
    int64_t nb = mpx_det_loader_batches_per_epoch(L), limit = task_eval_batches(t);
    if (limit > 0 && limit < nb) nb = limit;
    int64_t cs[3];
    mpx_graph_tensor_shape(g, d->conf, cs);
    const int64_t B = cs[0], P = cs[1], C = cs[2];
    mpx_ssd_detect_attr da = mpx_ssd_detect_defaults();
    int64_t cap = B * da.top_k, n_det = 0, n_gt = 0, det_cap = 0, gt_cap = 0;
    mpx_detection *dets = NULL, *batch_dets = malloc((size_t)cap * sizeof *batch_dets);
    mpx_voc_gt *gt = NULL;
    double loss_sum = 0, images = 0;
    mpx_status st = batch_dets ? MPX_OK : mpx_fail(MPX_ERR_NOMEM, "out of memory");
    int32_t first = 0;
    for (int64_t b = 0; b < nb && st == MPX_OK; b++) {
        mpx_det_batch batch;
        st = mpx_det_loader_next(L, &batch);
        if (st == MPX_OK) st = feed_batch(d, g, &batch);
        if (st == MPX_OK) st = mpx_graph_forward(g, 0);
        if (st == MPX_OK) st = mpx_graph_read(g, d->conf, d->conf_host);
        if (st == MPX_OK) st = mpx_graph_read(g, d->loc, d->loc_host);
        if (st != MPX_OK) break;
        loss_sum += (double)mpx_graph_loss(g) * batch.n;
        images += batch.n;
        mpx_tensor ct = {MPX_F32, MPX_DEV_CPU, 3, {batch.n, P, C}, d->conf_host};
        mpx_tensor lt = {MPX_F32, MPX_DEV_CPU, 3, {batch.n, P, 4}, d->loc_host};
        mpx_tensor pt = {MPX_F32, MPX_DEV_CPU, 2, {P, 4}, d->priors};
        int64_t got = 0;
        st = mpx_ssd_detect(&da, &ct, &lt, &pt, first, batch_dets, cap, &got);
        if (st != MPX_OK) break;
        /* Detections and ground truth of the real rows, classes back to 0-based for mAP. */
        if (n_det + got > det_cap) {
            det_cap = 2 * (n_det + got);
            mpx_detection *p = realloc(dets, (size_t)det_cap * sizeof *p);
            if (!p) { st = mpx_fail(MPX_ERR_NOMEM, "out of memory"); break; }
            dets = p;
        }
        for (int64_t i = 0; i < got; i++) {
            dets[n_det] = batch_dets[i];
            dets[n_det++].cls -= 1;
        }
        for (int i = 0; i < batch.n; i++) {
            if (n_gt + MPX_DET_MAX_BOXES > gt_cap) {
                gt_cap = 2 * (n_gt + MPX_DET_MAX_BOXES);
                mpx_voc_gt *p = realloc(gt, (size_t)gt_cap * sizeof *p);
                if (!p) { st = mpx_fail(MPX_ERR_NOMEM, "out of memory"); break; }
                gt = p;
            }
            for (int k = 0; k < batch.counts[i]; k++) {
                const float *bx = batch.boxes + ((size_t)i * MPX_DET_MAX_BOXES + k) * 4;
                mpx_voc_gt *o = &gt[n_gt++];
                o->image = first + i;
                o->cls = batch.labels[i * MPX_DET_MAX_BOXES + k];
                memcpy(o->box, bx, sizeof o->box);
                o->difficult = batch.difficult[i * MPX_DET_MAX_BOXES + k];
            }
        }
        first += batch.n;
    }
    mpx_det_loader_free(L);
    if (st == MPX_OK) {
        mpx_voc_summary sum;
        st = mpx_voc_map(dets, n_det, gt, n_gt, (int)C - 1, 0.5f, NULL, NULL, &sum);
        *map = 100.0 * sum.map_11pt;
        *loss = images > 0 ? loss_sum / images : NAN;
        if (st == MPX_OK && t->bootstrap > 0)
            st = det_bootstrap(t, dets, n_det, gt, n_gt, first, (int)C - 1);
        if (st == MPX_OK && t->detections)
            st = det_write(t->detections, dets, n_det, gt, n_gt, first, (int)C - 1);
    }
    free(dets);
    free(batch_dets);
    free(gt);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "evaluation");
}

static void det_close(run_task *t) {
    detect *d = t->impl;
    mpx_det_loader_free(d->loader);
    mpx_scenes_free(d->scenes_train);
    mpx_scenes_free(d->scenes_eval);
    mpx_dataset_free(&d->objects_train);
    mpx_dataset_free(&d->objects_eval);
    mpx_det_dataset_free(&d->voc_train);
    mpx_det_dataset_free(&d->voc_eval);
    free(d->priors);
    free(d->boxes_host);
    free(d->labels_host);
    free(d->conf_host);
    free(d->loc_host);
    free(d);
    t->impl = NULL;
}

const run_task_ops run_task_detect = {"detect", "mAP", det_open, det_build, det_start, det_fetch,
                                      det_feed, det_position, det_evaluate, det_close};
