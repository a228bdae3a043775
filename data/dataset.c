/* dataset.c — the in-memory image dataset: allocation, class names, validation, statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/data.h"

void mpx_dataset_free(mpx_dataset *ds) {
    if (!ds) return;
    if (ds->class_names)
        for (int k = 0; k < ds->num_classes; k++) free(ds->class_names[k]);
    free(ds->class_names);
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

mpx_status mpx_dataset_alloc(mpx_dataset *ds, int64_t n, int h, int w, int c, int num_classes) {
    memset(ds, 0, sizeof *ds);
    if (n < 0 || h <= 0 || w <= 0 || c <= 0 || c > MPX_DATA_MAX_CHANNELS || num_classes <= 0)
        return mpx_fail(MPX_ERR_INPUT, "dataset of %lld images %dx%dx%d, %d classes: bad size",
                        (long long)n, h, w, c, num_classes);
    size_t per = (size_t)h * (size_t)w * (size_t)c;
    ds->images = mpx_calloc((size_t)n, per);
    ds->labels = mpx_calloc((size_t)n, sizeof *ds->labels);
    ds->class_names = mpx_calloc((size_t)num_classes, sizeof *ds->class_names);
    ds->num_classes = num_classes;
    int ok = ds->images && ds->labels && ds->class_names;
    for (int k = 0; ok && k < num_classes; k++) {
        char name[16];
        snprintf(name, sizeof name, "%d", k);
        ok = (ds->class_names[k] = strdup(name)) != NULL;
    }
    if (!ok) {
        mpx_dataset_free(ds);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %lld images %dx%dx%d", (long long)n, h, w,
                        c);
    }
    ds->n = n;
    ds->h = h;
    ds->w = w;
    ds->c = c;
    return MPX_OK;
}

mpx_status mpx_dataset_set_class_names(mpx_dataset *ds, const char *const *names) {
    for (int k = 0; k < ds->num_classes; k++) {
        char *s = strdup(names[k]);
        if (!s) return mpx_fail(MPX_ERR_NOMEM, "out of memory for class name '%s'", names[k]);
        free(ds->class_names[k]);
        ds->class_names[k] = s;
    }
    return MPX_OK;
}

mpx_status mpx_dataset_validate(const mpx_dataset *ds, const char *what) {
    if (ds->n < 0 || ds->h <= 0 || ds->w <= 0 || ds->c <= 0 || ds->c > MPX_DATA_MAX_CHANNELS ||
        ds->num_classes <= 0 || (ds->n > 0 && (!ds->images || !ds->labels)))
        return mpx_fail(MPX_ERR_INPUT, "dataset %s: bad shape [%lld,%d,%d,%d] / %d classes", what,
                        (long long)ds->n, ds->h, ds->w, ds->c, ds->num_classes);
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->labels[i] < 0 || ds->labels[i] >= ds->num_classes)
            return mpx_fail(MPX_ERR_INPUT, "dataset %s: example %lld has label %d outside [0, %d)",
                            what, (long long)i, ds->labels[i], ds->num_classes);
    return MPX_OK;
}

void mpx_dataset_channel_stats(const mpx_dataset *ds, float *mean, float *std) {
    /* Integer sums are exact (pixels are bytes); double only for the final division. */
    uint64_t sum[MPX_DATA_MAX_CHANNELS] = {0}, sq[MPX_DATA_MAX_CHANNELS] = {0};
    size_t pixels = (size_t)ds->n * (size_t)ds->h * (size_t)ds->w;
    const uint8_t *p = ds->images;
    for (size_t i = 0; i < pixels; i++)
        for (int ch = 0; ch < ds->c; ch++, p++) {
            sum[ch] += *p;
            sq[ch] += (uint64_t)*p * *p;
        }
    for (int ch = 0; ch < ds->c; ch++) {
        double m = pixels ? (double)sum[ch] / (double)pixels : 0;
        double v = pixels ? (double)sq[ch] / (double)pixels - m * m : 0;
        mean[ch] = (float)(m / 255.0);
        std[ch] = (float)(sqrt(v > 0 ? v : 0) / 255.0);
    }
}
