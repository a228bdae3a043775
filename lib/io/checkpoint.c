/* checkpoint.c — the checkpoint file (see checkpoint.h).
 *
 * Layout (little-endian): "MPXCKPT\0", u32 version, then records {u32 tag, u64 length,
 * payload}, then a final END record holding the FNV-1a 64 hash of every byte before it.
 * Readers check magic, version, every record's bounds and the hash before touching the graph.
 */
#include "mpx/checkpoint.h"
#include "mpx/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MAGIC[8] = {'M', 'P', 'X', 'C', 'K', 'P', 'T', '\0'};
enum { VERSION = 1 };
enum {
    TAG_META = 1,   /* model name (u32 len + bytes), step, loader epoch, loader batch */
    TAG_CONFIG,     /* config text */
    TAG_PARAM,      /* name (u32 len + bytes), numel (u64), floats */
    TAG_BUFFER,     /* name, numel, floats */
    TAG_OPT,        /* u32 n_state, i64 steps, then per param and state: floats */
    TAG_SCALER,     /* the mpx_scaler fields */
    TAG_NODES,      /* u32 n_nodes, mpx_node_state[n] */
    TAG_END = 0xE0D
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- writing ---- */

typedef struct {
    FILE *f;
    uint64_t hash;
    int err;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->err || n == 0) return;
    if (fwrite(p, 1, n, w->f) != n) w->err = errno ? errno : EIO;
    w->hash = fnv(w->hash, p, n);
}

static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(writer *w, const char *s) {
    uint32_t n = s ? (uint32_t)strlen(s) : 0;
    put_u32(w, n);
    put(w, s, n);
}
static void record(writer *w, uint32_t tag, uint64_t len) {
    put_u32(w, tag);
    put_u64(w, len);
}

/* Floats living in backend memory go through a host buffer. */
static void put_floats(writer *w, const mpx_graph *g, const float *src, int64_t n, float *host) {
    mpx_graph_download(g, host, src, (size_t)n * sizeof(float));
    put(w, host, (size_t)n * sizeof(float));
}

static int64_t largest_array(mpx_graph *g) {
    int64_t m = 1;
    for (int i = 0; i < mpx_graph_n_params(g); i++)
        if (mpx_graph_param(g, i)->numel > m) m = mpx_graph_param(g, i)->numel;
    for (int i = 0; i < mpx_graph_n_buffers(g); i++)
        if (mpx_graph_buffer(g, i)->numel > m) m = mpx_graph_buffer(g, i)->numel;
    return m;
}

mpx_status mpx_checkpoint_write(const char *path, const mpx_checkpoint_state *s) {
    mpx_graph *g = s->g;
    float *host = malloc((size_t)largest_array(g) * sizeof(float));
    if (!host) return mpx_fail(MPX_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
    mpx_fs_atomic af;
    mpx_status st = mpx_fs_atomic_open(&af, path);
    if (st != MPX_OK) {
        free(host);
        return mpx_fail_context(st, "checkpoint");
    }
    writer w = {af.f, 1469598103934665603ull, 0};
    put(&w, MAGIC, 8);
    put_u32(&w, VERSION);

    size_t mlen = s->model ? strlen(s->model) : 0;
    record(&w, TAG_META, 4 + mlen + 24);
    put_str(&w, s->model);
    put_u64(&w, (uint64_t)s->step);
    put_u64(&w, (uint64_t)s->loader.epoch);
    put_u64(&w, (uint64_t)s->loader.batch);

    size_t clen = s->config_text ? strlen(s->config_text) : 0;
    record(&w, TAG_CONFIG, clen);
    put(&w, s->config_text, clen);

    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        const mpx_param *p = mpx_graph_param(g, i);
        record(&w, TAG_PARAM, 4 + strlen(p->name) + 8 + (uint64_t)p->numel * 4);
        put_str(&w, p->name);
        put_u64(&w, (uint64_t)p->numel);
        put_floats(&w, g, p->master, p->numel, host);
    }
    for (int i = 0; i < mpx_graph_n_buffers(g); i++) {
        const mpx_buffer *b = mpx_graph_buffer(g, i);
        record(&w, TAG_BUFFER, 4 + strlen(b->name) + 8 + (uint64_t)b->numel * 4);
        put_str(&w, b->name);
        put_u64(&w, (uint64_t)b->numel);
        put_floats(&w, g, b->data, b->numel, host);
    }
    if (s->opt) {
        int ns = mpx_optimizer_n_state(s->opt);
        uint64_t len = 12;
        for (int i = 0; i < mpx_graph_n_params(g); i++) len += (uint64_t)ns * mpx_graph_param(g, i)->numel * 4;
        record(&w, TAG_OPT, len);
        put_u32(&w, (uint32_t)ns);
        put_u64(&w, (uint64_t)mpx_optimizer_steps(s->opt));
        for (int i = 0; i < mpx_graph_n_params(g); i++)
            for (int k = 0; k < ns; k++)
                put_floats(&w, g, mpx_optimizer_state(s->opt, i, k), mpx_graph_param(g, i)->numel,
                           host);
    }
    if (s->scaler) {
        record(&w, TAG_SCALER, sizeof(mpx_scaler));
        put(&w, s->scaler, sizeof(mpx_scaler));
    }
    int nn = mpx_graph_n_nodes(g);
    record(&w, TAG_NODES, 4 + (uint64_t)nn * sizeof(mpx_node_state));
    put_u32(&w, (uint32_t)nn);
    for (int i = 0; i < nn; i++) {
        mpx_node_state ns;
        memset(&ns, 0, sizeof ns);
        mpx_graph_get_node_state(g, i, &ns);
        put(&w, &ns, sizeof ns);
    }
    uint64_t hash = w.hash;
    record(&w, TAG_END, 8);
    put_u64(&w, hash);
    free(host);

    if (w.err) {
        mpx_fs_atomic_abort(&af);
        return mpx_fail(MPX_ERR_IO, "cannot write checkpoint '%s': %s (the previous one is intact)",
                        path, strerror(w.err));
    }
    st = mpx_fs_atomic_commit(&af);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "checkpoint");
}

/* ---- reading ---- */

typedef struct {
    const unsigned char *p;
    size_t n, off;
    const char *path;
} reader;

static int take(reader *r, void *dst, size_t n) {
    if (r->n - r->off < n) return -1;
    if (dst) memcpy(dst, r->p + r->off, n);
    r->off += n;
    return 0;
}

static mpx_status corrupt(const char *path, const char *what) {
    return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' is not usable: %s", path, what);
}

static mpx_status load_file(const char *path, unsigned char **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return mpx_fail(MPX_ERR_INPUT, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' is not a regular file", path);
    }
    long size = ftell(f);
    rewind(f);
    if (size < 20) {
        fclose(f);
        return corrupt(path, "too short to be a checkpoint");
    }
    unsigned char *buf = malloc((size_t)size);
    if (!buf) {
        fclose(f);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) {
        free(buf);
        return mpx_fail(MPX_ERR_IO, "cannot read checkpoint '%s'", path);
    }
    /* Magic, version and the final hash record, before anything is parsed. */
    uint32_t version, tag;
    uint64_t len, hash;
    memcpy(&version, buf + 8, 4);
    memcpy(&tag, buf + size - 20, 4);
    memcpy(&len, buf + size - 16, 8);
    memcpy(&hash, buf + size - 8, 8);
    mpx_status st = MPX_OK;
    if (memcmp(buf, MAGIC, 8) != 0) st = corrupt(path, "not an mpx checkpoint (bad magic)");
    else if (version != VERSION) st = corrupt(path, "unsupported version");
    else if (tag != TAG_END || len != 8) st = corrupt(path, "truncated (no end record)");
    else if (fnv(1469598103934665603ull, buf, (size_t)size - 20) != hash)
        st = corrupt(path, "checksum mismatch (the file is damaged)");
    if (st != MPX_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *n = (size_t)size - 20;
    return MPX_OK;
}

static int take_str(reader *r, char *buf, size_t cap) {
    uint32_t n;
    if (take(r, &n, 4) || n >= cap || take(r, buf, n)) return -1;
    buf[n] = '\0';
    return 0;
}

/* Walk the records, calling visit for each; stops at the first error. */
typedef mpx_status (*visit_fn)(reader *rec, uint32_t tag, void *ctx);

static mpx_status walk(const unsigned char *data, size_t n, const char *path, visit_fn fn, void *ctx) {
    reader r = {data, n, 12, path};
    while (r.off < r.n) {
        uint32_t tag;
        uint64_t len;
        if (take(&r, &tag, 4) || take(&r, &len, 8) || len > r.n - r.off)
            return corrupt(path, "a record runs past the end");
        reader rec = {r.p + r.off, (size_t)len, 0, path};
        MPX_TRY(fn(&rec, tag, ctx));
        r.off += (size_t)len;
    }
    return MPX_OK;
}

typedef struct {
    char model[256];
    int64_t step, epoch, batch;
    char *config;
} header;

static mpx_status visit_header(reader *r, uint32_t tag, void *ctx) {
    header *h = ctx;
    if (tag == TAG_META) {
        uint64_t v[3];
        if (take_str(r, h->model, sizeof h->model) || take(r, v, sizeof v))
            return corrupt(r->path, "bad metadata record");
        h->step = (int64_t)v[0];
        h->epoch = (int64_t)v[1];
        h->batch = (int64_t)v[2];
    } else if (tag == TAG_CONFIG) {
        free(h->config);
        h->config = malloc(r->n + 1);
        if (!h->config) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
        memcpy(h->config, r->p, r->n);
        h->config[r->n] = '\0';
    }
    return MPX_OK;
}

typedef struct {
    mpx_checkpoint_state *s;
    float *host;
    int params_seen, buffers_seen;
} restore;

static mpx_status read_array(reader *r, const char *want, int64_t numel, const mpx_graph *g,
                             float *dst, float *host) {
    char name[MPX_NAME_MAX + 1];
    uint64_t n;
    if (take_str(r, name, sizeof name) || take(r, &n, 8))
        return corrupt(r->path, "bad parameter record");
    if (strcmp(name, want) != 0 || (int64_t)n != numel)
        return mpx_fail(MPX_ERR_INPUT,
                        "checkpoint '%s' belongs to another model: it has '%s' [%llu] where this "
                        "model has '%s' [%lld]",
                        r->path, name, (unsigned long long)n, want, (long long)numel);
    if (take(r, host, (size_t)numel * 4)) return corrupt(r->path, "truncated array");
    mpx_graph_upload(g, dst, host, (size_t)numel * 4);
    return MPX_OK;
}

static mpx_status visit_restore(reader *r, uint32_t tag, void *ctx) {
    restore *x = ctx;
    mpx_graph *g = x->s->g;
    switch (tag) {
    case TAG_PARAM: {
        if (x->params_seen >= mpx_graph_n_params(g))
            return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' has more parameters than this model", r->path);
        mpx_param *p = mpx_graph_param(g, x->params_seen++);
        return read_array(r, p->name, p->numel, g, p->master, x->host);
    }
    case TAG_BUFFER: {
        if (x->buffers_seen >= mpx_graph_n_buffers(g))
            return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' has more buffers than this model", r->path);
        mpx_buffer *b = mpx_graph_buffer(g, x->buffers_seen++);
        return read_array(r, b->name, b->numel, g, b->data, x->host);
    }
    case TAG_OPT: {
        if (!x->s->opt) return MPX_OK;
        uint32_t ns;
        int64_t steps;
        if (take(r, &ns, 4) || take(r, &steps, 8) || (int)ns != mpx_optimizer_n_state(x->s->opt))
            return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' holds another optimizer's state", r->path);
        for (int i = 0; i < mpx_graph_n_params(g); i++)
            for (uint32_t k = 0; k < ns; k++) {
                size_t bytes = (size_t)mpx_graph_param(g, i)->numel * 4;
                if (take(r, x->host, bytes)) return corrupt(r->path, "truncated optimizer state");
                mpx_graph_upload(g, mpx_optimizer_state(x->s->opt, i, (int)k), x->host, bytes);
            }
        mpx_optimizer_set_steps(x->s->opt, steps);
        return MPX_OK;
    }
    case TAG_SCALER:
        if (!x->s->scaler) return MPX_OK;
        if (r->n != sizeof(mpx_scaler)) return corrupt(r->path, "bad scaler record");
        {
            mpx_scaler saved;
            take(r, &saved, sizeof saved);
            if (saved.cfg.method != x->s->scaler->cfg.method)
                return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' was written with scaling = %s, "
                                "the config says %s", r->path, mpx_scaling_name(saved.cfg.method),
                                mpx_scaling_name(x->s->scaler->cfg.method));
            /* Keep the config's knobs; restore the state. */
            saved.cfg = x->s->scaler->cfg;
            *x->s->scaler = saved;
        }
        return MPX_OK;
    case TAG_NODES: {
        uint32_t nn;
        if (take(r, &nn, 4) || (int)nn != mpx_graph_n_nodes(g))
            return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' belongs to another model (node count)", r->path);
        for (uint32_t i = 0; i < nn; i++) {
            mpx_node_state ns;
            if (take(r, &ns, sizeof ns)) return corrupt(r->path, "truncated node state");
            mpx_graph_set_node_state(g, (int)i, &ns);
        }
        return MPX_OK;
    }
    default: return MPX_OK;
    }
}

/* Weights by name: a parameter or buffer of the checkpoint goes to the graph's of the same name
 * (same size, else an error naming both); the others are skipped. */
typedef struct {
    mpx_graph *g;
    float *host;
    int params, buffers;
} weights;

static mpx_status visit_weights(reader *r, uint32_t tag, void *ctx) {
    weights *x = ctx;
    if (tag != TAG_PARAM && tag != TAG_BUFFER) return MPX_OK;
    char name[MPX_NAME_MAX + 1];
    uint64_t n;
    if (take_str(r, name, sizeof name) || take(r, &n, 8))
        return corrupt(r->path, "bad parameter record");
    const int is_param = tag == TAG_PARAM;
    const int count = is_param ? mpx_graph_n_params(x->g) : mpx_graph_n_buffers(x->g);
    for (int i = 0; i < count; i++) {
        const char *have = is_param ? mpx_graph_param(x->g, i)->name : mpx_graph_buffer(x->g, i)->name;
        if (strcmp(have, name) != 0) continue;
        int64_t numel = is_param ? mpx_graph_param(x->g, i)->numel : mpx_graph_buffer(x->g, i)->numel;
        if ((int64_t)n != numel)
            return mpx_fail(MPX_ERR_INPUT, "checkpoint '%s': '%s' has %llu values, this model's %lld",
                            r->path, name, (unsigned long long)n, (long long)numel);
        if (take(r, x->host, (size_t)numel * 4)) return corrupt(r->path, "truncated array");
        mpx_graph_upload(x->g, is_param ? mpx_graph_param(x->g, i)->master : mpx_graph_buffer(x->g, i)->data,
                         x->host, (size_t)numel * 4);
        if (is_param)
            x->params++;
        else
            x->buffers++;
        return MPX_OK;
    }
    return MPX_OK;
}

mpx_status mpx_checkpoint_load_weights(const char *path, mpx_graph *g, int *params, int *buffers) {
    unsigned char *data;
    size_t n;
    MPX_TRY(load_file(path, &data, &n));
    weights x = {g, malloc((size_t)largest_array(g) * sizeof(float)), 0, 0};
    mpx_status st = x.host ? walk(data, n, path, visit_weights, &x)
                           : mpx_fail(MPX_ERR_NOMEM, "out of memory");
    if (st == MPX_OK && x.params == 0)
        st = mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' has no parameter of this model's names", path);
    free(x.host);
    free(data);
    if (st == MPX_OK) {
        if (params) *params = x.params;
        if (buffers) *buffers = x.buffers;
    }
    return st;
}

mpx_status mpx_checkpoint_peek(const char *path, char **model, int64_t *step, char **config_text) {
    unsigned char *data;
    size_t n;
    MPX_TRY(load_file(path, &data, &n));
    header h;
    memset(&h, 0, sizeof h);
    mpx_status st = walk(data, n, path, visit_header, &h);
    free(data);
    if (st == MPX_OK && !h.model[0]) st = corrupt(path, "no metadata record");
    if (st != MPX_OK) {
        free(h.config);
        return st;
    }
    if (model) *model = strdup(h.model);
    if (step) *step = h.step;
    if (config_text) *config_text = h.config;
    else free(h.config);
    return MPX_OK;
}

mpx_status mpx_checkpoint_read(const char *path, mpx_checkpoint_state *s) {
    unsigned char *data;
    size_t n;
    MPX_TRY(load_file(path, &data, &n));
    header h;
    memset(&h, 0, sizeof h);
    mpx_status st = walk(data, n, path, visit_header, &h);
    if (st == MPX_OK && s->model && strcmp(h.model, s->model) != 0)
        st = mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' holds model '%s', not '%s'", path, h.model,
                      s->model);
    restore x = {s, malloc((size_t)largest_array(s->g) * sizeof(float)), 0, 0};
    if (st == MPX_OK && !x.host) st = mpx_fail(MPX_ERR_NOMEM, "out of memory");
    if (st == MPX_OK) st = walk(data, n, path, visit_restore, &x);
    if (st == MPX_OK && (x.params_seen != mpx_graph_n_params(s->g) ||
                         x.buffers_seen != mpx_graph_n_buffers(s->g)))
        st = mpx_fail(MPX_ERR_INPUT, "checkpoint '%s' belongs to another model: %d of %d parameters",
                      path, x.params_seen, mpx_graph_n_params(s->g));
    free(x.host);
    free(data);
    if (st != MPX_OK) {
        free(h.config);
        return st;
    }
    s->step = h.step;
    s->loader.epoch = h.epoch;
    s->loader.batch = h.batch;
    s->config_text_read = h.config;
    return MPX_OK;
}
