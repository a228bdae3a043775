/* bert.c — a BERT encoder (Devlin et al. 2019) for masked-language modelling.
 *
 * Embeddings (token + position + segment, the sentence-pair layout of data/text_mlm.c) ->
 * layer-norm -> dropout; L post-LN layers of multi-head self-attention with the padding mask and a GELU
 * feed-forward; the MLM head (dense, GELU, layer-norm, a decoder sharing the token-embedding
 * matrix, plus a bias). Every Linear is a node of its own, so adaptive loss scaling gives each
 * its factor (docs/design.md §4); Q, K and V read the same hidden state, whose gradient is a branch
 * merge, as are the residual stream's fan-outs.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpx/models.h"

static const struct {
    const char *name;
    int layers, hidden, heads;
} g_presets[] = {{"bert_tiny", 2, 128, 2}, {"bert_mini", 4, 256, 4}, {"bert_small", 4, 512, 8},
                 {"bert_base", 12, 768, 12}};

int mpx_bert_preset(const char *arch, mpx_bert_cfg *c) {
    for (size_t i = 0; i < sizeof g_presets / sizeof *g_presets; i++) {
        if (strcmp(arch, g_presets[i].name) != 0) continue;
        memset(c, 0, sizeof *c);
        c->arch = g_presets[i].name;
        c->layers = g_presets[i].layers;
        c->hidden = g_presets[i].hidden;
        c->heads = g_presets[i].heads;
        c->ffn = 4 * g_presets[i].hidden;
        c->vocab = 8192;
        c->max_len = 512;
        c->type_vocab = 2;
        c->dropout = 0.1f;
        c->ln_eps = 1e-12f;
        c->init_std = 0.02f;
        return 0;
    }
    return -1;
}

typedef struct {
    mpx_graph *g;
    const mpx_bert_cfg *c;
    char buf[MPX_NAME_MAX];
} builder;

static const char *nm(builder *b, const char *prefix, const char *suffix) {
    snprintf(b->buf, sizeof b->buf, "%s%s", prefix, suffix);
    return b->buf;
}

/* A BERT linear: weight ~ N(0, init_std), bias 0. */
static int dense(builder *b, const char *prefix, const char *name, int x, int out) {
    int y = mpx_g_linear(b->g, nm(b, prefix, name), x, out, 1);
    if (y < 0) return y; /* the graph keeps the error; its parameters do not exist */
    char p[MPX_NAME_MAX + 16];
    snprintf(p, sizeof p, "%s%s.weight", prefix, name);
    mpx_g_set_init(b->g, p, (mpx_init){MPX_INIT_NORMAL, b->c->init_std});
    snprintf(p, sizeof p, "%s%s.bias", prefix, name);
    mpx_g_set_init(b->g, p, (mpx_init){MPX_INIT_CONST, 0.0f});
    return y;
}

/* [B, T, H] -> [B, A, T, D] */
static int heads(builder *b, const char *prefix, const char *name, int x, int batch, int t) {
    const mpx_bert_cfg *c = b->c;
    int64_t split[4] = {batch, t, c->heads, c->hidden / c->heads};
    static const int perm[4] = {0, 2, 1, 3};
    char s[MPX_NAME_MAX];
    snprintf(s, sizeof s, "%s%s.split", prefix, name);
    int y = mpx_g_reshape(b->g, s, x, 4, split);
    snprintf(s, sizeof s, "%s%s.heads", prefix, name);
    return mpx_g_permute(b->g, s, y, perm);
}

static int layer(builder *b, int l, int x, int mask, int batch, int t) {
    const mpx_bert_cfg *c = b->c;
    char p[32];
    snprintf(p, sizeof p, "layer%d.", l);
    mpx_graph *g = b->g;
    int q = heads(b, p, "attn.q", dense(b, p, "attn.q", x, c->hidden), batch, t);
    int k = heads(b, p, "attn.k", dense(b, p, "attn.k", x, c->hidden), batch, t);
    int v = heads(b, p, "attn.v", dense(b, p, "attn.v", x, c->hidden), batch, t);
    int s = mpx_g_bmm(g, nm(b, p, "attn.scores"), q, k, 0, 1, 1.0f / sqrtf((float)(c->hidden / c->heads)));
    int pr = mpx_g_softmax(g, nm(b, p, "attn.probs"), s, mask, 1.0f);
    pr = mpx_g_dropout(g, nm(b, p, "attn.dropout"), pr, c->dropout);
    int ctx = mpx_g_bmm(g, nm(b, p, "attn.context"), pr, v, 0, 0, 1.0f);
    static const int perm[4] = {0, 2, 1, 3};
    ctx = mpx_g_permute(g, nm(b, p, "attn.merge"), ctx, perm);
    int64_t merged[3] = {batch, t, c->hidden};
    ctx = mpx_g_reshape(g, nm(b, p, "attn.merged"), ctx, 3, merged);
    int o = dense(b, p, "attn.out", ctx, c->hidden);
    o = mpx_g_dropout(g, nm(b, p, "attn.out.dropout"), o, c->dropout);
    x = mpx_g_add(g, nm(b, p, "attn.residual"), o, x);
    x = mpx_g_layernorm(g, nm(b, p, "attn.ln"), x, c->ln_eps);
    int f = dense(b, p, "ffn.in", x, c->ffn);
    f = mpx_g_gelu(g, nm(b, p, "ffn.gelu"), f);
    f = dense(b, p, "ffn.out", f, c->hidden);
    f = mpx_g_dropout(g, nm(b, p, "ffn.dropout"), f, c->dropout);
    x = mpx_g_add(g, nm(b, p, "ffn.residual"), f, x);
    return mpx_g_layernorm(g, nm(b, p, "ffn.ln"), x, c->ln_eps);
}

mpx_status mpx_bert_build(mpx_graph *g, const mpx_bert_cfg *c, int batch, int seq_len,
                          mpx_bert_io *io) {
    if (c->layers < 1 || c->hidden < 1 || c->heads < 1 || c->hidden % c->heads || c->vocab < 6 ||
        c->type_vocab < 1 || seq_len < 4 || seq_len > c->max_len)
        return mpx_fail(MPX_ERR_INPUT,
                        "bert: bad configuration (layers %d, hidden %d, heads %d, vocab %d, "
                        "segments %d, sequence %d of at most %d)",
                        c->layers, c->hidden, c->heads, c->vocab, c->type_vocab, seq_len, c->max_len);
    builder b = {g, c, {0}};
    int64_t bt[2] = {batch, seq_len};
    mpx_bert_io r;
    r.ids = mpx_g_input(g, "ids", MPX_INPUT_I32, 2, bt);
    r.positions = mpx_g_input(g, "positions", MPX_INPUT_I32, 2, bt);
    r.segments = mpx_g_input(g, "segments", MPX_INPUT_I32, 2, bt);
    r.mask = mpx_g_input(g, "mask", MPX_INPUT_I32, 2, bt);
    r.labels = mpx_g_input(g, "labels", MPX_INPUT_I32, 2, bt);
    mpx_init emb = {MPX_INIT_NORMAL, c->init_std};
    /* [B, T, H] each: token + position + segment, as BERT sums its three embeddings. */
    int x = mpx_g_add(g, "embeddings.sum", mpx_g_embedding(g, "embeddings.word", r.ids, c->vocab, c->hidden, emb),
                      mpx_g_embedding(g, "embeddings.position", r.positions, c->max_len, c->hidden, emb));
    x = mpx_g_add(g, "embeddings.sum_type", x,
                  mpx_g_embedding(g, "embeddings.token_type", r.segments, c->type_vocab, c->hidden, emb));
    x = mpx_g_layernorm(g, "embeddings.ln", x, c->ln_eps);
    x = mpx_g_dropout(g, "embeddings.dropout", x, c->dropout);
    for (int l = 0; l < c->layers; l++) x = layer(&b, l, x, r.mask, batch, seq_len);
    x = dense(&b, "mlm.", "dense", x, c->hidden);
    x = mpx_g_gelu(g, "mlm.gelu", x);
    x = mpx_g_layernorm(g, "mlm.ln", x, c->ln_eps);
    r.logits = mpx_g_linear_tied(g, "mlm.decoder", x, "embeddings.word.weight", 1);
    mpx_g_softmax_ce(g, "loss", r.logits, r.labels);
    if (io) *io = r;
    return mpx_graph_status(g);
}
