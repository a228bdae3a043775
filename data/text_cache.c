/* text_cache.c — the vocabulary cache and the corpus as one token stream.
 *
 * A learned vocabulary lives in <cache_dir>/wordpiece-<size>-<key>/ with
 *   vocab.txt    the BERT format (one token per line, id = line number)
 *   SOURCE.txt   what it was learned from: corpus path and checksum, options, counts, time
 *   SHA256SUMS   sha256sum format, for vocab.txt
 * key = 16 hex digits of SHA-256("mpx-wordpiece <version>", corpus checksum, options), so a
 * changed corpus or size trains anew beside the old one. vocab.txt is renamed into place after
 * the other two are written, so its presence means the directory is complete; a vocab.txt
 * that fails its checksum is an error (delete the directory), never silently replaced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/fsutil.h"
#include "data/sha256.h"
#include "data/text_internal.h"
#include "mpx/runtime.h"
#include "mpx/text.h"

/* Bump when the tokenizer or the trainer changes what they produce: old caches are ignored. */
enum { TRAINER_VERSION = 2 }; /* 2: accents stripped, Unicode classes from utf8proc */

typedef struct {
    char cache[1024], dir[1100], vocab[1200], source[1200], sums[1200], lock[1100];
    char key[65];
    mpx_wordpiece_opts wp; /* defaults filled in */
} cache_paths;

static mpx_status resolve(const mpx_text_corpus *c, const mpx_text_opts *o, cache_paths *p) {
    int k = o && o->cache_dir ? snprintf(p->cache, sizeof p->cache, "%s", o->cache_dir)
                              : snprintf(p->cache, sizeof p->cache, "%s/text", mpx_data_cache_dir());
    if (k < 0 || k >= (int)sizeof p->cache)
        return mpx_fail(MPX_ERR_INPUT, "text cache directory path too long");
    p->wp.vocab_size = o && o->wordpiece.vocab_size ? o->wordpiece.vocab_size : 8192;
    p->wp.max_alphabet = o && o->wordpiece.max_alphabet ? o->wordpiece.max_alphabet : 1000;
    p->wp.min_frequency = o && o->wordpiece.min_frequency ? o->wordpiece.min_frequency : 2;
    char desc[256];
    int n = snprintf(desc, sizeof desc,
                     "mpx-wordpiece %d\ncorpus %s\nvocab_size %d\nmax_alphabet %d\n"
                     "min_frequency %d\n",
                     TRAINER_VERSION, c->sha256, p->wp.vocab_size, p->wp.max_alphabet,
                     p->wp.min_frequency);
    mpx_sha256 sha;
    mpx_sha256_init(&sha);
    mpx_sha256_update(&sha, desc, (size_t)n);
    mpx_sha256_final_hex(&sha, p->key);
    snprintf(p->dir, sizeof p->dir, "%s/wordpiece-%d-%.16s", p->cache, p->wp.vocab_size, p->key);
    snprintf(p->vocab, sizeof p->vocab, "%s/vocab.txt", p->dir);
    snprintf(p->source, sizeof p->source, "%s/SOURCE.txt", p->dir);
    snprintf(p->sums, sizeof p->sums, "%s/SHA256SUMS", p->dir);
    snprintf(p->lock, sizeof p->lock, "%s/.text.lock", p->cache);
    return MPX_OK;
}

/* vocab.txt checked against SHA256SUMS and SOURCE.txt's key, then loaded. */
static mpx_status load_cached(const cache_paths *p, mpx_tokenizer **out) {
    char *text;
    size_t n;
    char want[65], got[65], keyline[80];
    if (mpx_fs_file_size(p->sums) < 0 || mpx_fs_file_size(p->source) < 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "vocabulary cache '%s' lacks SHA256SUMS or SOURCE.txt (incomplete or "
                        "corrupt): delete the directory to learn the vocabulary again",
                        p->dir);
    MPX_TRY(mpx_fs_read_all(p->sums, &text, &n));
    int listed = mpx_sha256_manifest_lookup(text, "vocab.txt", want);
    free(text);
    MPX_TRY(mpx_sha256_file(p->vocab, got));
    if (!listed || strcmp(want, got) != 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "'%s' does not match its checksum in '%s' (sha256 %s, expected %s): the "
                        "cache is corrupt; delete '%s' to learn the vocabulary again",
                        p->vocab, p->sums, got, listed ? want : "(not listed)", p->dir);
    MPX_TRY(mpx_fs_read_all(p->source, &text, &n));
    snprintf(keyline, sizeof keyline, "\nkey %s\n", p->key);
    int match = strstr(text, keyline) != NULL;
    free(text);
    if (!match)
        return mpx_fail(MPX_ERR_INPUT,
                        "'%s' does not record key %s: the cache is corrupt; delete '%s' to learn "
                        "the vocabulary again",
                        p->source, p->key, p->dir);
    return mpx_tokenizer_load(p->vocab, out);
}

/* Write the directory: vocab.txt under a temporary name, SOURCE.txt, SHA256SUMS, then the
 * rename that completes it. */
static mpx_status save(const cache_paths *p, const mpx_text_corpus *c, const mpx_tokenizer *t,
                       const mpx_wordpiece_stats *s) {
    char tmp[1300], hex[65], text[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", p->vocab);
    MPX_TRY(mpx_fs_mkdirs(p->dir));
    MPX_TRY(mpx_tokenizer_save(t, tmp));
    MPX_TRY(mpx_sha256_file(tmp, hex));
    int n = snprintf(text, sizeof text,
                     "mpx WordPiece vocabulary, trainer version %d\n"
                     "key %s\n"
                     "corpus %s\ncorpus_sha256 %s\ndocuments %lld\nbytes %lld\n"
                     "vocab_size %d (requested %d)\nmax_alphabet %d\nmin_frequency %d\n"
                     "alphabet %d\nwords %lld\nunique_words %lld\nmerges %lld\n"
                     "seconds %.2f (counting %.2f, merging %.2f)\n",
                     TRAINER_VERSION, p->key, c->path, c->sha256, (long long)c->n_docs,
                     (long long)c->offsets[c->n_docs], s->vocab_size, p->wp.vocab_size,
                     p->wp.max_alphabet, p->wp.min_frequency, s->alphabet, (long long)s->words,
                     (long long)s->unique_words, (long long)s->merges, s->count_s + s->merge_s,
                     s->count_s, s->merge_s);
    MPX_TRY(mpx_fs_write_atomic(p->source, text, (size_t)n));
    n = snprintf(text, sizeof text, "%s  vocab.txt\n", hex);
    MPX_TRY(mpx_fs_write_atomic(p->sums, text, (size_t)n));
    return mpx_fs_rename(tmp, p->vocab);
}

mpx_status mpx_text_tokenizer_prepare(const mpx_text_corpus *c, const mpx_text_opts *o,
                                      mpx_tokenizer **out, mpx_text_info *info) {
    *out = NULL;
    mpx_text_info scratch;
    if (!info) info = &scratch;
    cache_paths p;
    MPX_TRY(resolve(c, o, &p));
    snprintf(info->vocab_path, sizeof info->vocab_path, "%s", p.vocab);
    info->trained = 0;
    memset(&info->train, 0, sizeof info->train);
    double t0 = mpx_now();
    if (mpx_fs_file_size(p.vocab) < 0) {
        MPX_TRY(mpx_fs_mkdirs(p.cache));
        int fd;
        MPX_TRY(mpx_fs_lock(p.lock, &fd));
        mpx_status st = MPX_OK;
        if (mpx_fs_file_size(p.vocab) < 0) { /* nobody learned it while we waited */
            if (o && o->progress)
                fprintf(stderr, "mpx: learning a WordPiece vocabulary of %d from %s (one time)\n",
                        p.wp.vocab_size, c->path);
            st = mpx_wordpiece_train(c, &p.wp, out, &info->train);
            if (st == MPX_OK) st = save(&p, c, *out, &info->train);
            info->trained = st == MPX_OK;
            if (o && o->progress && st == MPX_OK)
                fprintf(stderr, "mpx: learned %d tokens in %.1f s -> %s\n",
                        info->train.vocab_size, mpx_now() - t0, p.vocab);
        }
        mpx_fs_unlock(fd);
        if (st != MPX_OK) {
            mpx_tokenizer_free(*out);
            *out = NULL;
            return st;
        }
    }
    if (!*out) MPX_TRY(load_cached(&p, out));
    info->vocab_s = mpx_now() - t0;
    return MPX_OK;
}

mpx_status mpx_text_encode_corpus(const mpx_tokenizer *t, const mpx_text_corpus *c,
                                  mpx_token_buf *out, int64_t *n_words, int64_t *n_unk) {
    /* Words repeat (3.4 M occurrences, ~40 k distinct): encode each distinct word once. */
    mpx_strtab seen = {0};
    mpx_token_buf memo = {0};
    int64_t *span = NULL, cap = 0, words = 0, unk = 0, first = out->n;
    int32_t unk_id = t->special[MPX_TOK_UNK];
    mpx_status st = MPX_OK;
    for (int64_t d = 0; d < c->n_docs && st == MPX_OK; d++) {
        mpx_word_iter it = mpx_word_iter_make(c->text + c->offsets[d],
                                              (size_t)(c->offsets[d + 1] - c->offsets[d]));
        mpx_word w;
        while (st == MPX_OK && mpx_word_next(&it, &w)) {
            words++;
            if (w.chars > MPX_WORD_MAX_CHARS) {
                st = mpx_token_buf_push(out, unk_id);
                continue;
            }
            int32_t id;
            int added;
            st = mpx_strtab_add(&seen, w.bytes, w.len, &id, &added);
            if (st == MPX_OK && added) {
                if (id >= cap) {
                    cap = cap ? 2 * cap : 4096;
                    int64_t *s2 = realloc(span, (size_t)cap * 2 * sizeof *span);
                    if (!s2) {
                        st = mpx_fail(MPX_ERR_NOMEM, "out of memory encoding the corpus");
                        break;
                    }
                    span = s2;
                }
                span[2 * id] = memo.n;
                st = mpx_tokenizer_encode_word(t, &w, &memo);
                span[2 * id + 1] = memo.n - span[2 * id];
            }
            for (int64_t k = 0; st == MPX_OK && k < span[2 * id + 1]; k++)
                st = mpx_token_buf_push(out, memo.ids[span[2 * id] + k]);
        }
    }
    for (int64_t i = first; i < out->n; i++) unk += out->ids[i] == unk_id;
    mpx_strtab_free(&seen);
    mpx_token_buf_free(&memo);
    free(span);
    if (n_words) *n_words = words;
    if (n_unk) *n_unk = unk;
    return st;
}

void mpx_text_stream_free(mpx_text_stream *s) {
    mpx_tokenizer_free(s->tok);
    mpx_token_buf_free(&s->ids);
    memset(s, 0, sizeof *s);
}

mpx_status mpx_text_load(const mpx_text_opts *o, mpx_text_stream *out, mpx_text_info *info) {
    memset(out, 0, sizeof *out);
    mpx_text_info scratch;
    if (!info) info = &scratch;
    memset(info, 0, sizeof *info);
    char path[1024];
    int k = o && o->corpus ? snprintf(path, sizeof path, "%s", o->corpus)
                           : snprintf(path, sizeof path, "%s/text-corpus.tar.gz",
                                      mpx_data_shared_dir());
    if (k < 0 || k >= (int)sizeof path) return mpx_fail(MPX_ERR_INPUT, "corpus path too long");
    double t0 = mpx_now();
    mpx_text_corpus c;
    MPX_TRY(mpx_text_corpus_read(path, &c));
    info->read_s = mpx_now() - t0;
    snprintf(info->corpus, sizeof info->corpus, "%s", c.path);
    memcpy(info->corpus_sha256, c.sha256, sizeof c.sha256);
    info->n_docs = c.n_docs;
    info->n_bytes = c.offsets[c.n_docs];
    mpx_status st = mpx_text_tokenizer_prepare(&c, o, &out->tok, info);
    if (st == MPX_OK) {
        double t1 = mpx_now();
        st = mpx_text_encode_corpus(out->tok, &c, &out->ids, &info->n_words, &info->n_unk);
        info->encode_s = mpx_now() - t1;
        info->n_tokens = out->ids.n;
    }
    mpx_text_corpus_free(&c);
    if (st != MPX_OK) mpx_text_stream_free(out);
    return st;
}
