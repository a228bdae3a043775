/* text_strtab.c — see text_internal.h: strings interned to dense ids with an open-addressing
 * hash table (FNV-1a, linear probing, load <= 1/2). Vocabularies and word counts use it. */
#include <stdlib.h>
#include <string.h>

#include "data/text_internal.h"

static uint32_t fnv1a(const char *s, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

void mpx_strtab_free(mpx_strtab *t) {
    free(t->bytes);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static size_t probe(const mpx_strtab *t, const char *s, size_t len, uint32_t h) {
    size_t mask = t->nslots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        int32_t id = t->slots[i];
        if (id < 0 || (t->hash[id] == h && t->len[id] == len &&
                       memcmp(t->bytes + t->off[id], s, len) == 0))
            return i;
    }
}

int32_t mpx_strtab_find(const mpx_strtab *t, const char *s, size_t len) {
    if (t->n == 0) return -1;
    return t->slots[probe(t, s, len, fnv1a(s, len))];
}

static mpx_status rehash(mpx_strtab *t, size_t nslots) {
    int32_t *slots = malloc(nslots * sizeof *slots);
    if (!slots) return mpx_fail(MPX_ERR_NOMEM, "out of memory for a string table of %zu", nslots);
    memset(slots, 0xFF, nslots * sizeof *slots);
    for (int32_t id = 0; id < t->n; id++) {
        size_t i = t->hash[id] & (nslots - 1);
        while (slots[i] >= 0) i = (i + 1) & (nslots - 1);
        slots[i] = id;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return MPX_OK;
}

static mpx_status grow(void **p, size_t elem, size_t want) {
    void *q = realloc(*p, want * elem);
    if (!q) return mpx_fail(MPX_ERR_NOMEM, "out of memory growing a string table to %zu", want);
    *p = q;
    return MPX_OK;
}

mpx_status mpx_strtab_add(mpx_strtab *t, const char *s, size_t len, int32_t *id, int *added) {
    if (added) *added = 0;
    if (t->nslots == 0) MPX_TRY(rehash(t, 1024));
    uint32_t h = fnv1a(s, len);
    size_t slot = probe(t, s, len, h);
    if (t->slots[slot] >= 0) {
        *id = t->slots[slot];
        return MPX_OK;
    }
    if (t->n == INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "string table: more than 2^31 - 1 distinct strings");
    if (t->n == t->cap) {
        int32_t cap = t->cap ? (t->cap > INT32_MAX / 2 ? INT32_MAX : 2 * t->cap) : 1024;
        MPX_TRY(grow((void **)&t->off, sizeof *t->off, (size_t)cap));
        MPX_TRY(grow((void **)&t->len, sizeof *t->len, (size_t)cap));
        MPX_TRY(grow((void **)&t->hash, sizeof *t->hash, (size_t)cap));
        t->cap = cap;
    }
    if (t->nbytes + len + 1 > t->capbytes) {
        size_t cap = t->capbytes ? 2 * t->capbytes : 16384;
        while (cap < t->nbytes + len + 1) cap *= 2;
        MPX_TRY(grow((void **)&t->bytes, 1, cap));
        t->capbytes = cap;
    }
    int32_t n = t->n;
    memcpy(t->bytes + t->nbytes, s, len);
    t->bytes[t->nbytes + len] = '\0';
    t->off[n] = t->nbytes;
    t->len[n] = (uint32_t)len;
    t->hash[n] = h;
    t->nbytes += len + 1;
    t->slots[slot] = n;
    t->n = n + 1;
    if ((size_t)t->n * 2 > t->nslots) MPX_TRY(rehash(t, t->nslots * 2));
    *id = n;
    if (added) *added = 1;
    return MPX_OK;
}
