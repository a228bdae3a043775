/* task_mlm.c — masked-language modelling: a BERT encoder on a text corpus (text.h), metric the
 * accuracy of the predicted tokens on the held-out sequences.
 *
 * The corpus is tokenised with a WordPiece vocabulary learned from it (cached), cut into
 * sequences of data.seq_len tokens, 5% held out, 15% of the tokens chosen for prediction
 * (80/10/10). The held-out masks are fixed, so every evaluation scores the same positions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/text.h"
#include "task.h"

typedef struct {
    mpx_text_stream stream;
    mpx_mlm *mlm;
    mpx_mlm_loader *loader;
    mpx_mlm_batch batch;
    mpx_bert_io io;
    int32_t *pos_host; /* 0..T-1 per row */
    float *logits_host;
} mlm_task;

static mpx_status mlm_open(run_task *t) {
    mlm_task *d = mpx_calloc(1, sizeof *d);
    if (!d) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
    t->impl = d;
    const mpx_data_cfg *c = &t->rc->data;
    mpx_text_opts o;
    memset(&o, 0, sizeof o);
    o.corpus = c->root[0] ? c->root : NULL;
    char cache[1100];
    snprintf(cache, sizeof cache, "%s/text", c->cache_dir);
    o.cache_dir = cache;
    o.wordpiece.vocab_size = c->vocab_size;
    o.wordpiece.max_alphabet = 1000;
    o.wordpiece.min_frequency = 2;
    o.progress = 1;
    mpx_text_info info;
    MPX_TRY(mpx_text_load(&o, &d->stream, &info));
    mpx_mlm_config mc = mpx_mlm_config_default();
    mc.seq_len = c->seq_len;
    mc.mask_prob = c->mask_prob;
    MPX_TRY(mpx_mlm_create(d->stream.tok, d->stream.ids.ids, d->stream.ids.n, &mc, &d->mlm));
    t->n_train = mpx_mlm_count(d->mlm, MPX_SPLIT_TRAIN);
    t->n_eval = mpx_mlm_count(d->mlm, MPX_SPLIT_TEST);
    snprintf(t->dataset, sizeof t->dataset, "text:%.200s (%d-token WordPiece, %lld tokens)",
             info.corpus, mpx_tokenizer_size(d->stream.tok), (long long)info.n_tokens);
    if (t->n_train < t->rc->train.batch_size || t->n_eval < 1)
        return mpx_fail(MPX_ERR_INPUT, "data.root: the corpus makes %lld training and %lld held-out "
                        "sequences of %d tokens: too few for batch %d",
                        (long long)t->n_train, (long long)t->n_eval, c->seq_len, t->rc->train.batch_size);
    return MPX_OK;
}

static mpx_status mlm_build(run_task *t, mpx_graph *g) {
    mlm_task *d = t->impl;
    mpx_bert_cfg bc = t->rc->model.bert;
    bc.vocab = mpx_tokenizer_size(d->stream.tok);
    const int B = task_batch(t), T = t->rc->data.seq_len;
    MPX_TRY(mpx_bert_build(g, &bc, B, T, &d->io));
    if (!d->pos_host) {
        d->pos_host = mpx_calloc((size_t)B * T, sizeof(int32_t));
        d->logits_host = mpx_calloc((size_t)B * T * (size_t)bc.vocab, sizeof(float));
        if (!d->pos_host || !d->logits_host) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
        for (int i = 0; i < B * T; i++) d->pos_host[i] = i % T;
    }
    return MPX_OK;
}

static mpx_status mlm_start(run_task *t, mpx_loader_pos pos) {
    mlm_task *d = t->impl;
    mpx_mlm_loader_free(d->loader);
    d->loader = NULL;
    mpx_mlm_loader_config lc = mpx_mlm_loader_config_train(t->rc->train.batch_size, t->rc->train.seed);
    return mpx_mlm_loader_create(d->mlm, &lc, pos, &d->loader);
}

static mpx_status mlm_fetch(run_task *t) {
    mlm_task *d = t->impl;
    return mpx_mlm_loader_next(d->loader, &d->batch);
}

static mpx_status feed_batch(const mlm_task *d, mpx_graph *g, const mpx_mlm_batch *b) {
    int64_t n = (int64_t)b->batch_size * b->seq_len;
    MPX_TRY(mpx_graph_set_input(g, d->io.ids, b->ids, MPX_I32, n));
    MPX_TRY(mpx_graph_set_input(g, d->io.positions, d->pos_host, MPX_I32, n));
    MPX_TRY(mpx_graph_set_input(g, d->io.segments, b->segments, MPX_I32, n));
    MPX_TRY(mpx_graph_set_input(g, d->io.mask, b->attn, MPX_I32, n));
    return mpx_graph_set_input(g, d->io.labels, b->labels, MPX_I32, n);
}

/* This rank's slice of the global training batch (task.h). */
static mpx_status mlm_feed(run_task *t, mpx_graph *g) {
    const mlm_task *d = t->impl;
    mpx_mlm_batch b = d->batch;
    const int off = task_shard(t), per = task_batch(t);
    const size_t e = (size_t)off * b.seq_len;
    b.ids += e, b.labels += e, b.attn += e, b.segments += e;
    b.n = b.n - off < 0 ? 0 : b.n - off < per ? b.n - off : per;
    b.batch_size = per;
    return feed_batch(d, g, &b);
}

static mpx_loader_pos mlm_position(const run_task *t) {
    const mlm_task *d = t->impl;
    return mpx_mlm_loader_position(d->loader);
}

/* Held-out masked-token loss (mean over predicted positions) and accuracy (argmax == label). */
static mpx_status mlm_evaluate(run_task *t, mpx_graph *g, double *loss, double *acc) {
    mlm_task *d = t->impl;
    mpx_mlm_loader *L;
    mpx_mlm_loader_config lc = mpx_mlm_loader_config_eval(task_batch(t), t->rc->train.seed);
    mpx_loader_pos start = {0, 0};
    MPX_TRY(mpx_mlm_loader_create(d->mlm, &lc, start, &L));
    int64_t nb = mpx_mlm_loader_batches_per_epoch(L), limit = task_eval_batches(t);
    if (limit > 0 && limit < nb) nb = limit;
    int64_t shape[3];
    mpx_graph_tensor_shape(g, d->io.logits, shape);
    const int64_t V = shape[2];
    double loss_sum = 0, correct = 0, count = 0;
    /* With a bootstrap or a units file: per sequence, the loss summed over its masked
     * tokens (from the logits, in double), its correct predictions and its masked tokens. */
    eval_units units = {0};
    const int keep = t->bootstrap > 0 || t->units;
    mpx_status st = MPX_OK;
    for (int64_t b = 0; b < nb && st == MPX_OK; b++) {
        mpx_mlm_batch batch;
        st = mpx_mlm_loader_next(L, &batch);
        if (st == MPX_OK) st = feed_batch(d, g, &batch);
        if (st == MPX_OK) st = mpx_graph_forward(g, 0);
        if (st == MPX_OK) st = mpx_graph_read(g, d->io.logits, d->logits_host);
        if (st != MPX_OK || batch.n_predict == 0) continue;
        loss_sum += (double)mpx_graph_loss(g) * (double)batch.n_predict;
        int64_t n = (int64_t)batch.batch_size * batch.seq_len;
        for (int64_t i = 0; i < n; i++) {
            if (batch.labels[i] < 0) continue;
            const float *row = d->logits_host + i * V;
            int64_t best = 0;
            for (int64_t k = 1; k < V; k++)
                if (row[k] > row[best]) best = k;
            correct += best == batch.labels[i];
        }
        count += (double)batch.n_predict;
        for (int64_t s = 0; keep && st == MPX_OK && s < batch.n; s++) {
            double l = 0, hits = 0, masked = 0;
            for (int64_t j = s * batch.seq_len; j < (s + 1) * batch.seq_len; j++) {
                if (batch.labels[j] < 0) continue;
                const float *row = d->logits_host + j * V;
                int64_t best = 0;
                for (int64_t k = 1; k < V; k++)
                    if (row[k] > row[best]) best = k;
                l += eval_row_xent(row, V, batch.labels[j]);
                hits += best == batch.labels[j];
                masked++;
            }
            if (masked > 0) st = eval_units_add(&units, l, hits, masked);
        }
    }
    mpx_mlm_loader_free(L);
    if (st == MPX_OK && keep)
        st = eval_units_report(&units, t->bootstrap, t->units, &t->boot, &t->boot_loss);
    eval_units_free(&units);
    if (st != MPX_OK) return mpx_fail_context(st, "evaluation");
    *loss = count > 0 ? loss_sum / count : NAN;
    *acc = count > 0 ? 100.0 * correct / count : NAN;
    return MPX_OK;
}

static void mlm_close(run_task *t) {
    mlm_task *d = t->impl;
    mpx_mlm_loader_free(d->loader);
    mpx_mlm_free(d->mlm);
    mpx_text_stream_free(&d->stream);
    free(d->pos_host);
    free(d->logits_host);
    free(d);
    t->impl = NULL;
}

const run_task_ops run_task_mlm = {"mlm", "mlm_acc", mlm_open, mlm_build, mlm_start, mlm_fetch,
                                   mlm_feed, mlm_position, mlm_evaluate, mlm_close};
