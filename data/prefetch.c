/* prefetch.c — see prefetch.h. One mutex and two condition variables: `ready` when a slot is
 * filled, `freed` when the caller gives one back (or the ring stops). */
#include "data/prefetch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { SLOT_FREE, SLOT_READY, SLOT_HELD };

typedef struct {
    int state;
    int64_t g;
    mpx_status status;
    char msg[1024];
} ring_slot;

struct mpx_prefetch {
    mpx_prefetch_fill fill;
    void *owner;
    int nslots, held; /* held: the slot the caller has, -1 when none */
    int64_t start, consumed;
    ring_slot *slots;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t ready, freed;
    int stop;
};

static void *worker(void *arg) {
    mpx_prefetch *p = arg;
    for (int64_t s = 0;; s++) {
        const int k = (int)(s % p->nslots);
        ring_slot *sl = &p->slots[k];
        pthread_mutex_lock(&p->mu);
        while (!p->stop && sl->state != SLOT_FREE) pthread_cond_wait(&p->freed, &p->mu);
        const int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        sl->g = p->start + s;
        sl->status = p->fill(p->owner, k, sl->g);
        if (sl->status != MPX_OK) snprintf(sl->msg, sizeof sl->msg, "%s", mpx_error_message());
        pthread_mutex_lock(&p->mu);
        sl->state = SLOT_READY;
        pthread_cond_broadcast(&p->ready);
        pthread_mutex_unlock(&p->mu);
        if (sl->status != MPX_OK) break; /* the caller gets the error; nothing more to do */
    }
    return NULL;
}

mpx_status mpx_prefetch_start(int nslots, int64_t start, mpx_prefetch_fill fill, void *owner,
                              mpx_prefetch **out) {
    *out = NULL;
    mpx_prefetch *p = calloc(1, sizeof *p);
    if (!p || !(p->slots = calloc((size_t)nslots, sizeof *p->slots))) {
        free(p);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for the loader's batch ring");
    }
    p->fill = fill;
    p->owner = owner;
    p->nslots = nslots;
    p->held = -1;
    p->start = start;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready, NULL);
    pthread_cond_init(&p->freed, NULL);
    if (pthread_create(&p->thread, NULL, worker, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->ready);
        pthread_cond_destroy(&p->freed);
        free(p->slots);
        free(p);
        return mpx_fail(MPX_ERR_IO, "loader: cannot start the worker thread");
    }
    *out = p;
    return MPX_OK;
}

mpx_status mpx_prefetch_next(mpx_prefetch *p, int *slot, int64_t *g) {
    pthread_mutex_lock(&p->mu);
    if (p->held >= 0) {
        p->slots[p->held].state = SLOT_FREE;
        p->held = -1;
        pthread_cond_broadcast(&p->freed);
    }
    const int k = (int)(p->consumed % p->nslots);
    ring_slot *sl = &p->slots[k];
    while (sl->state != SLOT_READY) pthread_cond_wait(&p->ready, &p->mu);
    if (sl->status != MPX_OK) {
        const mpx_status st = sl->status;
        pthread_mutex_unlock(&p->mu);
        return mpx_fail(st, "%s", sl->msg);
    }
    sl->state = SLOT_HELD;
    p->held = k;
    p->consumed++;
    pthread_mutex_unlock(&p->mu);
    *slot = k;
    *g = sl->g;
    return MPX_OK;
}

int64_t mpx_prefetch_consumed(const mpx_prefetch *p) { return p->consumed; }

void mpx_prefetch_stop(mpx_prefetch *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->freed);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->ready);
    pthread_cond_destroy(&p->freed);
    free(p->slots);
    free(p);
}
