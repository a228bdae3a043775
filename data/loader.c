/* loader.c — the image batch loader: the prefetch ring's worker (prefetch.c) fills batch slots
 * ahead of the caller (prefetch + 1 slots: the caller holds one, the worker fills the others).
 *
 * Which example fills which row of batch g is epoch_order.h's rule; example i's augmentation
 * comes from MPX_RNG_AUGMENT keyed by (epoch, i) (augment.c). A batch is therefore a pure
 * function of (seed, g): thread timing, prefetch depth and restarts cannot change it. The
 * worker allocates nothing per batch; image-folder decode buffers only grow. Errors travel from the worker to mpx_loader_next with their message.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "data/epoch_order.h"
#include "data/prefetch.h"
#include "mpx/data.h"

typedef struct {
    float *x;
    int32_t *y;
    int n;
} slot;

typedef struct { /* per decode thread (image folders) */
    uint8_t *pix;
    size_t cap;
    mpx_resample_scratch rs;
} scratch;

struct mpx_loader {
    mpx_loader_config cfg;
    const mpx_dataset *ds;
    const mpx_image_folder *folder;
    mpx_epoch_order order; /* its permutation is the worker's */
    int oh, ow, c;
    int nslots;
    slot *slots;
    scratch *scr; /* [cfg.threads] */
    mpx_prefetch *ring;
};

mpx_loader_config mpx_loader_config_train(int batch_size, uint64_t seed) {
    mpx_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = batch_size;
    c.seed = seed;
    c.shuffle = 1;
    c.drop_last = 1;
    for (int ch = 0; ch < MPX_DATA_MAX_CHANNELS; ch++) c.std[ch] = 1;
    c.prefetch = 2;
    c.threads = 1;
    return c;
}

mpx_loader_config mpx_loader_config_eval(int batch_size) {
    mpx_loader_config c = mpx_loader_config_train(batch_size, 0);
    c.shuffle = 0;
    c.drop_last = 0;
    return c;
}

/* One example into x (the image at `example` of the source, augmented for `epoch`). */
static mpx_status fill_one(mpx_loader *L, scratch *s, int64_t epoch, int64_t example, float *x) {
    mpx_augment a;
    if (L->ds) {
        const mpx_dataset *ds = L->ds;
        mpx_augment_draw(&L->cfg, ds->h, ds->w, epoch, example, &a);
        return mpx_augment_apply(&L->cfg, &a, mpx_dataset_image(ds, example), ds->h, ds->w, ds->c,
                                 L->oh, L->ow, x, &s->rs);
    }
    int h, w;
    MPX_TRY(mpx_image_folder_decode(L->folder, example, &s->pix, &s->cap, &h, &w));
    mpx_augment_draw(&L->cfg, h, w, epoch, example, &a);
    return mpx_augment_apply(&L->cfg, &a, s->pix, h, w, 3, L->oh, L->ow, x, &s->rs);
}

/* The ring's fill (prefetch.h): batch g into slot k, its examples decoded in parallel. */
static mpx_status fill(void *owner, int k, int64_t g) {
    mpx_loader *L = owner;
    slot *sl = &L->slots[k];
    int64_t epoch;
    int B = L->cfg.batch_size, count = mpx_epoch_order_batch(&L->order, g, &epoch);
    size_t per = (size_t)L->oh * L->ow * L->c;
    sl->n = count;
    mpx_status status = MPX_OK;
    char msg[1024] = "";
    int failed = 0;
#pragma omp parallel for num_threads(L->cfg.threads)                                               \
    schedule(dynamic, 1) if (L->folder && L->cfg.threads > 1)
    for (int j = 0; j < count; j++) {
        int stop;
#pragma omp atomic read
        stop = failed;
        if (stop) continue;
        int64_t ex = mpx_epoch_order_example(&L->order, g, j);
        sl->y[j] = L->ds ? L->ds->labels[ex] : mpx_image_folder_label(L->folder, ex);
        mpx_status st =
            fill_one(L, &L->scr[omp_get_thread_num()], epoch, ex, sl->x + (size_t)j * per);
        if (st != MPX_OK) {
#pragma omp critical(mpx_loader_error)
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
    memset(sl->x + (size_t)count * per, 0, (size_t)(B - count) * per * sizeof(float));
    for (int j = count; j < B; j++) sl->y[j] = -1;
    return MPX_OK;
}

static mpx_status create(const mpx_dataset *ds, const mpx_image_folder *folder,
                         const mpx_loader_config *cfg, mpx_loader_pos start, mpx_loader **out) {
    *out = NULL;
    int oh, ow, c = ds ? ds->c : 3;
    int64_t n = ds ? ds->n : mpx_image_folder_count(folder);
    MPX_TRY(mpx_augment_check_config(cfg, ds ? ds->h : 0, ds ? ds->w : 0, c, &oh, &ow));
    if (ds) MPX_TRY(mpx_dataset_validate(ds, "given to the loader"));
    if (n < 1 || n >= ((int64_t)1 << 32))
        return mpx_fail(MPX_ERR_INPUT, "loader: dataset of %lld examples (1 .. 2^32 - 1 supported)",
                        (long long)n);
    int64_t B = cfg->batch_size;
    mpx_epoch_order order;
    MPX_TRY(mpx_epoch_order_init(&order, "loader", "examples", n, cfg->batch_size, cfg->drop_last,
                                 cfg->shuffle, cfg->seed, start, 24));
    mpx_loader *L = calloc(1, sizeof *L);
    if (!L) {
        mpx_epoch_order_free(&order);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the loader");
    }
    L->cfg = *cfg;
    L->ds = ds;
    L->folder = folder;
    L->order = order;
    L->oh = oh;
    L->ow = ow;
    L->c = c;
    L->nslots = cfg->prefetch + 1;
    size_t per = (size_t)oh * ow * c;
    L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
    L->scr = calloc((size_t)cfg->threads, sizeof *L->scr);
    int ok = L->slots && L->scr;
    for (int i = 0; ok && i < L->nslots; i++) {
        L->slots[i].x = calloc((size_t)B * per, sizeof(float));
        L->slots[i].y = calloc((size_t)B, sizeof(int32_t));
        ok = L->slots[i].x && L->slots[i].y;
    }
    if (!ok) {
        mpx_loader_free(L);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %d loader batches of [%lld,%d,%d,%d]",
                        cfg->prefetch + 1, (long long)B, oh, ow, c);
    }
    mpx_status st = mpx_prefetch_start(L->nslots, L->order.start_g, fill, L, &L->ring);
    if (st != MPX_OK) {
        mpx_loader_free(L);
        return st;
    }
    *out = L;
    return MPX_OK;
}

mpx_status mpx_loader_create(const mpx_dataset *ds, const mpx_loader_config *cfg,
                             mpx_loader_pos start, mpx_loader **out) {
    return create(ds, NULL, cfg, start, out);
}

mpx_status mpx_loader_create_folder(const mpx_image_folder *f, const mpx_loader_config *cfg,
                                    mpx_loader_pos start, mpx_loader **out) {
    return create(NULL, f, cfg, start, out);
}

mpx_status mpx_loader_next(mpx_loader *L, mpx_batch *out) {
    int k;
    int64_t g;
    MPX_TRY(mpx_prefetch_next(L->ring, &k, &g));
    const slot *sl = &L->slots[k];
    out->x = sl->x;
    out->y = sl->y;
    out->n = sl->n;
    out->batch_size = L->cfg.batch_size;
    out->h = L->oh;
    out->w = L->ow;
    out->c = L->c;
    out->pos = mpx_epoch_order_pos(&L->order, g);
    return MPX_OK;
}

mpx_loader_pos mpx_loader_position(const mpx_loader *L) {
    return mpx_epoch_order_pos(&L->order, L->order.start_g + mpx_prefetch_consumed(L->ring));
}

int64_t mpx_loader_batches_per_epoch(const mpx_loader *L) { return L->order.bpe; }

void mpx_loader_free(mpx_loader *L) {
    if (!L) return;
    mpx_prefetch_stop(L->ring);
    for (int i = 0; L->slots && i < L->nslots; i++) {
        free(L->slots[i].x);
        free(L->slots[i].y);
    }
    for (int t = 0; L->scr && t < L->cfg.threads; t++) {
        free(L->scr[t].pix);
        mpx_resample_scratch_free(&L->scr[t].rs);
    }
    free(L->slots);
    free(L->scr);
    mpx_epoch_order_free(&L->order);
    free(L);
}
