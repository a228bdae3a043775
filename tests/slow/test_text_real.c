/* test_text_real.c (slow) — the text pipeline on the real corpus (the default
 * ../shared/data/text-corpus.tar.gz, 3.4 M words): learn the 8192-token WordPiece vocabulary
 * into a temporary cache and report the time, the number of sequences of 128 and the [UNK]
 * rate; load again from the cache (no training, the same stream); and time the MLM loader.
 * Skipped (77) when the archive is not there. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpx/runtime.h"
#include "mpx/text.h"
#include "testutil.h"

int main(void) {
    char archive[1300], tmp[1024];
    mpx_test_source_path("../shared/data/text-corpus.tar.gz", archive, sizeof archive);
    struct stat sb;
    if (stat(archive, &sb) != 0) {
        printf("skipped: %s not found\n", archive);
        return MPX_TEST_SKIP;
    }
    REQUIRE(mpx_test_tmpdir("text_real", tmp, sizeof tmp)[0], "no temp dir");
    mpx_text_opts o = {0}; /* the default corpus, vocabulary 8192 */
    o.cache_dir = tmp;
    o.progress = 1;
    mpx_text_stream s;
    mpx_text_info info;
    double t0 = mpx_now();
    REQUIRE(mpx_text_load(&o, &s, &info) == MPX_OK, "load: %s", mpx_error_message());
    double first = mpx_now() - t0;
    const mpx_wordpiece_stats *w = &info.train;
    printf("corpus: %lld documents, %.1f MB, %lld words; read + checksum %.2f s\n",
           (long long)info.n_docs, info.n_bytes / 1e6, (long long)info.n_words, info.read_s);
    printf("training (%d threads available): %.2f s = counting %.2f s (%lld words, %lld distinct, "
           "alphabet %d) + merging %.2f s (%lld merges); with saving %.2f s\n",
           mpx_threads_get(), w->count_s + w->merge_s, w->count_s, (long long)w->words,
           (long long)w->unique_words, w->alphabet, w->merge_s, (long long)w->merges,
           info.vocab_s);
    double unk_rate = (double)info.n_unk / (double)info.n_tokens;
    printf("encoding: %.2f s, %lld tokens (%.3f per word), [UNK] %lld = %.5f%%; first load "
           "%.2f s\n",
           info.encode_s, (long long)info.n_tokens, (double)info.n_tokens / info.n_words,
           (long long)info.n_unk, 100 * unk_rate, first);
    CHECK(info.trained && mpx_tokenizer_size(s.tok) == 8192 && w->vocab_size == 8192,
          "trained %d, %d tokens", info.trained, mpx_tokenizer_size(s.tok));
    /* every character of this corpus is in the alphabet (72 < max_alphabet 1000), so only
     * words of more than 100 characters can be [UNK]: the rate must be essentially zero */
    CHECK(unk_rate < 1e-5, "[UNK] rate %.6f", unk_rate);
    /* the task's budget: well under a minute on 2 cores */
    CHECK(w->count_s + w->merge_s < 60, "training took %.1f s", w->count_s + w->merge_s);

    const char *sample = "It is a truth universally acknowledged, that a single man in "
                         "possession of a good fortune, must be in want of a wife.";
    mpx_token_buf b = {0};
    char *dec;
    CHECK_OK(mpx_tokenizer_encode(s.tok, sample, strlen(sample), &b));
    CHECK_OK(mpx_tokenizer_decode(s.tok, b.ids, b.n, 0, &dec));
    printf("sample (%lld tokens):", (long long)b.n);
    for (int64_t i = 0; i < b.n; i++) printf(" %s", mpx_tokenizer_token(s.tok, b.ids[i]));
    printf("\n");
    char *norm;
    CHECK_OK(mpx_text_normalize(sample, strlen(sample), &norm));
    CHECK(dec && norm && strcmp(dec, norm) == 0, "round trip: '%s'", dec);
    free(dec);
    free(norm);
    mpx_token_buf_free(&b);

    /* from the cache: no training, the same stream */
    mpx_text_stream s2;
    mpx_text_info info2;
    t0 = mpx_now();
    CHECK_OK(mpx_text_load(&o, &s2, &info2));
    printf("second load (vocabulary from the cache, %.3f s): %.2f s\n", info2.vocab_s,
           mpx_now() - t0);
    CHECK(!info2.trained && s2.ids.n == s.ids.n &&
              memcmp(s2.ids.ids, s.ids.ids, (size_t)s.ids.n * sizeof(int32_t)) == 0,
          "second load retrained (%d) or encoded differently", info2.trained);
    mpx_text_stream_free(&s2);

    mpx_mlm *m = NULL;
    CHECK_OK(mpx_mlm_create(s.tok, s.ids.ids, s.ids.n, NULL, &m));
    REQUIRE(m, "mlm: %s", mpx_error_message());
    int64_t ntrain = mpx_mlm_count(m, MPX_SPLIT_TRAIN), ntest = mpx_mlm_count(m, MPX_SPLIT_TEST);
    printf("sequences of 128: %lld = %lld training + %lld held out (every 20th)\n",
           (long long)(ntrain + ntest), (long long)ntrain, (long long)ntest);
    CHECK(ntrain + ntest == (s.ids.n + 124) / 125 && ntest == (ntrain + ntest) / 20,
          "sequence counts");
    mpx_mlm_loader_config lc = mpx_mlm_loader_config_train(64, 1);
    mpx_mlm_loader *L = NULL;
    CHECK_OK(mpx_mlm_loader_create(m, &lc, (mpx_loader_pos){0, 0}, &L));
    if (L) {
        int64_t nb = mpx_mlm_loader_batches_per_epoch(L), predicted = 0, real = 0;
        t0 = mpx_now();
        for (int64_t k = 0; k < nb; k++) {
            mpx_mlm_batch bt;
            if (mpx_mlm_loader_next(L, &bt) != MPX_OK) break;
            predicted += bt.n_predict;
            for (int i = 0; i < bt.batch_size * bt.seq_len; i++) real += bt.attn[i];
        }
        double dt = mpx_now() - t0;
        printf("loader: one epoch of %lld batches of 64 x 128 in %.2f s (%.0f sequences/s); "
               "%.2f%% of real tokens predicted\n",
               (long long)nb, dt, nb * 64 / dt, 100.0 * predicted / real);
        mpx_mlm_loader_free(L);
    }
    mpx_mlm_free(m);
    mpx_text_stream_free(&s);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "cannot remove %s", tmp);
    return mpx_test_done(__FILE__);
}
