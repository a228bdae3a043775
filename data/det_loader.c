/* det_loader.c — the detection batch loader, the same design as data/loader.c: the prefetch
 * ring's worker (prefetch.c) fills prefetch + 1 preallocated batch slots ahead of the caller.
 *
 * Which example fills which row of batch g is epoch_order.h's rule; example i's augmentation
 * comes from MPX_RNG_AUGMENT keyed by (epoch, i) (det_augment.c); a scene is a pure function
 * of its index (det_scenes.c). A batch is therefore a pure function of
 * (seed, g) whatever the thread timing, prefetch depth, thread count or restarts. Nothing is
 * allocated per batch: scratch buffers belong to the worker's threads and only grow.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/det_augment.h"
#include "data/det_scenes.h"
#include "data/epoch_order.h"
#include "data/prefetch.h"
#include "mpx/detect.h"

typedef struct {
    float *x, *boxes;
    int32_t *labels, *counts;
    uint8_t *difficult;
    int64_t *index;
    int n;
} slot;

typedef struct {    /* per OpenMP thread of the worker */
    uint8_t *image; /* a rendered scene [S, S, 3] */
    mpx_scene_scratch scene;
    mpx_det_aug_scratch aug;
    mpx_det_box boxes[MPX_DET_MAX_BOXES], out[MPX_DET_MAX_BOXES];
} scratch;

struct mpx_det_loader {
    mpx_det_loader_config cfg;
    const mpx_det_dataset *ds;
    const mpx_scenes *scenes;
    mpx_epoch_order order; /* its permutation is the worker's */
    int src_size, out_size;
    int nslots;
    slot *slots;
    scratch *scr; /* [cfg.threads] */
    mpx_prefetch *ring;
};

mpx_det_loader_config mpx_det_loader_config_train(int batch_size, uint64_t seed) {
    mpx_det_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = batch_size;
    c.seed = seed;
    c.shuffle = 1;
    c.drop_last = 1;
    c.expand = 1;
    c.expand_max = 4;
    c.crop = 1;
    c.flip = 1;
    for (int ch = 0; ch < 3; ch++) c.std[ch] = 1;
    c.prefetch = 2;
    c.threads = 1;
    return c;
}

mpx_det_loader_config mpx_det_loader_config_eval(int batch_size) {
    mpx_det_loader_config c = mpx_det_loader_config_train(batch_size, 0);
    c.shuffle = 0;
    c.drop_last = 0;
    c.expand = c.crop = c.flip = 0;
    return c;
}

/* Example `ex` of `epoch` into row j of the slot. */
static mpx_status fill_one(mpx_det_loader *L, scratch *s, int64_t epoch, int64_t ex, slot *sl,
                           int j) {
    const uint8_t *img;
    int count;
    if (L->ds) {
        img = mpx_det_dataset_image(L->ds, ex);
        count = L->ds->counts[ex];
        memcpy(s->boxes, L->ds->boxes + ex * MPX_DET_MAX_BOXES, (size_t)count * sizeof *s->boxes);
    } else {
        MPX_TRY(mpx_scenes_render_with(L->scenes, ex, s->image, s->boxes, &count, NULL, &s->scene));
        img = s->image;
    }
    mpx_det_augment a;
    mpx_det_augment_draw_unchecked(&L->cfg, L->src_size, s->boxes, count, epoch, ex, &a);
    int N = L->out_size, kept;
    MPX_TRY(mpx_det_augment_apply_with(&L->cfg, &a, img, L->src_size, s->boxes, count, N,
                                       sl->x + (size_t)j * N * N * 3, s->out, &kept, &s->aug));
    float *bx = sl->boxes + (size_t)j * MPX_DET_MAX_BOXES * 4;
    int32_t *lab = sl->labels + (size_t)j * MPX_DET_MAX_BOXES;
    uint8_t *dif = sl->difficult + (size_t)j * MPX_DET_MAX_BOXES;
    for (int k = 0; k < MPX_DET_MAX_BOXES; k++) {
        const mpx_det_box *b = &s->out[k];
        int on = k < kept;
        bx[4 * k] = on ? b->xmin : 0;
        bx[4 * k + 1] = on ? b->ymin : 0;
        bx[4 * k + 2] = on ? b->xmax : 0;
        bx[4 * k + 3] = on ? b->ymax : 0;
        lab[k] = on ? b->label : -1;
        dif[k] = (uint8_t)(on ? b->difficult : 0);
    }
    sl->counts[j] = kept;
    sl->index[j] = ex;
    return MPX_OK;
}

static void clear_row(mpx_det_loader *L, slot *sl, int j) {
    size_t per = (size_t)L->out_size * L->out_size * 3;
    memset(sl->x + (size_t)j * per, 0, per * sizeof(float));
    memset(sl->boxes + (size_t)j * MPX_DET_MAX_BOXES * 4, 0, MPX_DET_MAX_BOXES * 4 * sizeof(float));
    memset(sl->difficult + (size_t)j * MPX_DET_MAX_BOXES, 0, MPX_DET_MAX_BOXES);
    for (int k = 0; k < MPX_DET_MAX_BOXES; k++) sl->labels[(size_t)j * MPX_DET_MAX_BOXES + k] = -1;
    sl->counts[j] = 0;
    sl->index[j] = -1;
}

/* The ring's fill (prefetch.h): batch g into slot k, its examples in parallel. */
static mpx_status fill(void *owner, int k, int64_t g) {
    mpx_det_loader *L = owner;
    slot *sl = &L->slots[k];
    int64_t epoch;
    int B = L->cfg.batch_size, count = mpx_epoch_order_batch(&L->order, g, &epoch);
    sl->n = count;
    mpx_status status = MPX_OK;
    char msg[1024] = "";
    int failed = 0;
#pragma omp parallel for num_threads(L->cfg.threads) schedule(dynamic, 1) if (L->cfg.threads > 1)
    for (int j = 0; j < count; j++) {
        int stop;
#pragma omp atomic read
        stop = failed;
        if (stop) continue;
        int64_t ex = mpx_epoch_order_example(&L->order, g, j);
        mpx_status st = fill_one(L, &L->scr[omp_get_thread_num()], epoch, ex, sl, j);
        if (st != MPX_OK) {
#pragma omp critical(mpx_det_loader_error)
            if (!failed) {
                status = st;
                snprintf(msg, sizeof msg, "epoch %lld batch %lld: %s", (long long)epoch,
                         (long long)(g % L->order.bpe), mpx_error_message());
#pragma omp atomic write
                failed = 1;
            }
        }
    }
    if (status != MPX_OK) return mpx_fail(status, "%s", msg);
    for (int j = count; j < B; j++) clear_row(L, sl, j);
    return MPX_OK;
}

static int alloc_slot(slot *sl, int B, size_t per) {
    size_t nb = (size_t)B * MPX_DET_MAX_BOXES;
    sl->x = calloc((size_t)B * per, sizeof *sl->x);
    sl->boxes = calloc(nb * 4, sizeof *sl->boxes);
    sl->labels = calloc(nb, sizeof *sl->labels);
    sl->difficult = calloc(nb, 1);
    sl->counts = calloc((size_t)B, sizeof *sl->counts);
    sl->index = calloc((size_t)B, sizeof *sl->index);
    return sl->x && sl->boxes && sl->labels && sl->difficult && sl->counts && sl->index;
}

static mpx_status create(const mpx_det_dataset *ds, const mpx_scenes *scenes,
                         const mpx_det_loader_config *cfg, mpx_loader_pos start,
                         mpx_det_loader **out) {
    *out = NULL;
    int src = ds ? ds->size : mpx_scenes_config(scenes)->size, N;
    int64_t n = ds ? ds->n : mpx_scenes_config(scenes)->n;
    MPX_TRY(mpx_det_augment_check_config(cfg, src, &N));
    if (ds) MPX_TRY(mpx_det_dataset_validate(ds, "given to the detection loader"));
    if (n < 1 || n >= ((int64_t)1 << 28))
        return mpx_fail(MPX_ERR_INPUT, "detection loader: %lld examples (1 .. 2^28 - 1 supported)",
                        (long long)n);
    int64_t B = cfg->batch_size;
    mpx_epoch_order order;
    MPX_TRY(mpx_epoch_order_init(&order, "detection loader", "examples", n, cfg->batch_size,
                                 cfg->drop_last, cfg->shuffle, cfg->seed, start, 24));
    mpx_det_loader *L = calloc(1, sizeof *L);
    if (!L) {
        mpx_epoch_order_free(&order);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the detection loader");
    }
    L->cfg = *cfg;
    L->ds = ds;
    L->scenes = scenes;
    L->order = order;
    L->src_size = src;
    L->out_size = N;
    L->nslots = cfg->prefetch + 1;
    L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
    L->scr = calloc((size_t)cfg->threads, sizeof *L->scr);
    int ok = L->slots && L->scr;
    for (int i = 0; ok && i < L->nslots; i++)
        ok = alloc_slot(&L->slots[i], (int)B, (size_t)N * N * 3);
    for (int t = 0; ok && scenes && t < cfg->threads; t++)
        ok = (L->scr[t].image = malloc((size_t)src * src * 3)) != NULL;
    if (!ok) {
        mpx_det_loader_free(L);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %d detection batches of [%lld,%d,%d,3]",
                        cfg->prefetch + 1, (long long)B, N, N);
    }
    mpx_status st = mpx_prefetch_start(L->nslots, L->order.start_g, fill, L, &L->ring);
    if (st != MPX_OK) {
        mpx_det_loader_free(L);
        return st;
    }
    *out = L;
    return MPX_OK;
}

mpx_status mpx_det_loader_create(const mpx_det_dataset *ds, const mpx_det_loader_config *cfg,
                                 mpx_loader_pos start, mpx_det_loader **out) {
    return create(ds, NULL, cfg, start, out);
}

mpx_status mpx_det_loader_create_scenes(const mpx_scenes *s, const mpx_det_loader_config *cfg,
                                        mpx_loader_pos start, mpx_det_loader **out) {
    return create(NULL, s, cfg, start, out);
}

mpx_status mpx_det_loader_next(mpx_det_loader *L, mpx_det_batch *out) {
    int k;
    int64_t g;
    MPX_TRY(mpx_prefetch_next(L->ring, &k, &g));
    const slot *sl = &L->slots[k];
    out->x = sl->x;
    out->boxes = sl->boxes;
    out->labels = sl->labels;
    out->difficult = sl->difficult;
    out->counts = sl->counts;
    out->index = sl->index;
    out->n = sl->n;
    out->batch_size = L->cfg.batch_size;
    out->size = L->out_size;
    out->pos = mpx_epoch_order_pos(&L->order, g);
    return MPX_OK;
}

mpx_loader_pos mpx_det_loader_position(const mpx_det_loader *L) {
    return mpx_epoch_order_pos(&L->order, L->order.start_g + mpx_prefetch_consumed(L->ring));
}

int64_t mpx_det_loader_batches_per_epoch(const mpx_det_loader *L) { return L->order.bpe; }

void mpx_det_loader_free(mpx_det_loader *L) {
    if (!L) return;
    mpx_prefetch_stop(L->ring);
    for (int i = 0; L->slots && i < L->nslots; i++) {
        slot *sl = &L->slots[i];
        free(sl->x);
        free(sl->boxes);
        free(sl->labels);
        free(sl->difficult);
        free(sl->counts);
        free(sl->index);
    }
    for (int t = 0; L->scr && t < L->cfg.threads; t++) {
        free(L->scr[t].image);
        mpx_scene_scratch_free(&L->scr[t].scene);
        mpx_det_aug_scratch_free(&L->scr[t].aug);
    }
    free(L->slots);
    free(L->scr);
    mpx_epoch_order_free(&L->order);
    free(L);
}
