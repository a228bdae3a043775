/* test_text_corpus.c — reading a corpus and the vocabulary cache: a directory tree and a
 * .tar.gz of the same files give the same sorted documents and checksum (hidden and non-text
 * files ignored, the checksum recomputed here from its definition); invalid UTF-8 names the
 * file and byte offset; empty corpora are errors naming the path; the token stream equals the
 * documents encoded one by one; training twice gives identical vocab.txt bytes; the cache is
 * reused (no retraining), a changed corpus or size trains into its own directory, and a
 * corrupted vocab.txt is an error, not silently replaced. */
#include <stdlib.h>
#include <string.h>

#include "data/sha256.h"
#include "data/text_fixtures.h"
#include "mpx/text.h"
#include "testutil.h"

static char g_tmp[1024];

static const tf_file FILES[] = {
    {"b.txt", "Second file.\n"},
    {"a/z.txt", "Zed \xE2\x80\x94 the last letter\xE2\x80\x99s name.\n"},
    {"a/c.raw", " = Heading = \n raw text @-@ here \n"},
    {"sub/deep/d.txt", "deep"},
    {".hidden.txt", "never read"},
    {"a/.git/x.txt", "never read"},
    {"notes.md", "not a document"},
    {"._b.txt", "a macOS resource fork"},
};
enum { NFILES = sizeof FILES / sizeof FILES[0] };
static const char *const SORTED[] = {"a/c.raw", "a/z.txt", "b.txt", "sub/deep/d.txt"};
static const int SORTED_FROM[] = {2, 1, 0, 3};

static void path_in_tmp(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_tmp, name);
}

static void check_corpus(const mpx_text_corpus *c, const char *what) {
    REQUIRE_VOID(c->n_docs == 4, "%s: %lld documents, want 4", what, (long long)c->n_docs);
    mpx_sha256 sha;
    mpx_sha256_init(&sha);
    int64_t off = 0;
    for (int i = 0; i < 4; i++) {
        const char *text = FILES[SORTED_FROM[i]].text;
        size_t len = strlen(text);
        CHECK(strcmp(c->names[i], SORTED[i]) == 0, "%s: document %d is '%s', want '%s'", what, i,
              c->names[i], SORTED[i]);
        CHECK(c->offsets[i] == off && c->offsets[i + 1] == off + (int64_t)len &&
                  memcmp(c->text + off, text, len) == 0,
              "%s: document %d text or offsets", what, i);
        char size[32];
        snprintf(size, sizeof size, "%zu", len);
        mpx_sha256_update(&sha, SORTED[i], strlen(SORTED[i]) + 1);
        mpx_sha256_update(&sha, size, strlen(size) + 1);
        mpx_sha256_update(&sha, text, len);
        off += (int64_t)len;
    }
    char hex[65];
    mpx_sha256_final_hex(&sha, hex);
    CHECK(strcmp(hex, c->sha256) == 0, "%s: checksum %s, want %s", what, c->sha256, hex);
    CHECK(c->text[off] == '\0', "%s: text not NUL-terminated", what);
}

static void test_read(void) {
    char dir[1100], tgz[1100];
    path_in_tmp(dir, sizeof dir, "tree");
    path_in_tmp(tgz, sizeof tgz, "tree.tar.gz");
    REQUIRE_VOID(tf_write_dir(dir, FILES, NFILES), "cannot write the tree");
    tf_file reversed[NFILES];
    for (int i = 0; i < NFILES; i++) reversed[i] = FILES[NFILES - 1 - i];
    REQUIRE_VOID(tf_write_targz(tgz, reversed, NFILES), "cannot write the archive");
    mpx_text_corpus a, b;
    CHECK_OK(mpx_text_corpus_read(dir, &a));
    CHECK_OK(mpx_text_corpus_read(tgz, &b));
    check_corpus(&a, "directory");
    check_corpus(&b, "archive");
    mpx_text_corpus_free(&a);
    mpx_text_corpus_free(&b);
    mpx_text_corpus_free(&a); /* safe on a freed (zeroed) corpus */
}

static void expect_error(const char *path, const char *const *parts, int nparts) {
    mpx_text_corpus c;
    mpx_status st = mpx_text_corpus_read(path, &c);
    int ok = st == MPX_ERR_INPUT && c.n_docs == 0 && c.text == NULL;
    for (int i = 0; i < nparts; i++) ok = ok && strstr(mpx_error_message(), parts[i]);
    CHECK(ok, "reading '%s': %s -> '%s'", path, mpx_status_name(st), mpx_error_message());
    if (st == MPX_OK) mpx_text_corpus_free(&c);
}

static void test_errors(void) {
    char dir[1100], tgz[1100];
    /* invalid UTF-8: the file (or entry) and the byte offset */
    const tf_file bad[] = {{"good.txt", "fine text\n"}, {"sub/bad.txt", "abc\xC3("}};
    path_in_tmp(dir, sizeof dir, "bad");
    path_in_tmp(tgz, sizeof tgz, "bad.tar.gz");
    REQUIRE_VOID(tf_write_dir(dir, bad, 2) && tf_write_targz(tgz, bad, 2), "fixtures");
    expect_error(dir, (const char *[]){"'sub/bad.txt'", "UTF-8", "byte offset 3", dir}, 4);
    expect_error(tgz, (const char *[]){"entry 'sub/bad.txt'", "byte offset 3", tgz}, 3);
    /* an overlong encoding and a surrogate are invalid too */
    const tf_file overlong[] = {{"o.txt", "ok \xC0\xAF"}}, surrogate[] = {{"s.txt", "\xED\xB0\x80"}};
    path_in_tmp(dir, sizeof dir, "overlong");
    REQUIRE_VOID(tf_write_dir(dir, overlong, 1), "fixture");
    expect_error(dir, (const char *[]){"'o.txt'", "byte offset 3"}, 2);
    path_in_tmp(dir, sizeof dir, "surrogate");
    REQUIRE_VOID(tf_write_dir(dir, surrogate, 1), "fixture");
    expect_error(dir, (const char *[]){"'s.txt'", "byte offset 0"}, 2);

    /* empty: no directory entries, only non-documents, only whitespace */
    path_in_tmp(dir, sizeof dir, "empty");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    REQUIRE_VOID(system(cmd) == 0, "mkdir");
    expect_error(dir, (const char *[]){dir, "empty", "no .txt"}, 3);
    const tf_file md[] = {{"readme.md", "words"}}, blank[] = {{"a.txt", " \n\t\r\n"}, {"b.txt", ""}};
    path_in_tmp(dir, sizeof dir, "md");
    REQUIRE_VOID(tf_write_dir(dir, md, 1), "fixture");
    expect_error(dir, (const char *[]){dir, "empty"}, 2);
    path_in_tmp(dir, sizeof dir, "blank");
    REQUIRE_VOID(tf_write_dir(dir, blank, 2), "fixture");
    expect_error(dir, (const char *[]){dir, "no words"}, 2);
    path_in_tmp(tgz, sizeof tgz, "blank.tar.gz");
    REQUIRE_VOID(tf_write_targz(tgz, blank, 2), "fixture");
    expect_error(tgz, (const char *[]){tgz, "no words"}, 2);
    path_in_tmp(dir, sizeof dir, "does-not-exist");
    expect_error(dir, (const char *[]){dir, "not found"}, 2);
    path_in_tmp(dir, sizeof dir, "md/readme.md");
    expect_error(dir, (const char *[]){dir, "neither a directory nor a tar archive"}, 2);
}

/* ---- the stream and the cache ---- */

static int file_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        same = x == y;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_stream_and_cache(void) {
    char dir[1100], tgz[1100], cache[1100], cache2[1100];
    path_in_tmp(dir, sizeof dir, "synth");
    path_in_tmp(tgz, sizeof tgz, "synth.tgz");
    path_in_tmp(cache, sizeof cache, "cache");
    path_in_tmp(cache2, sizeof cache2, "cache2");
    char *t1 = tf_synthetic(7, 4000, 300, 14), *t2 = tf_synthetic(8, 3000, 300, 14);
    tf_file files[] = {{"one.txt", t1}, {"two/two.txt", t2}};
    REQUIRE_VOID(tf_write_dir(dir, files, 2) && tf_write_targz(tgz, files, 2), "fixtures");

    mpx_text_opts o = {0};
    o.corpus = dir;
    o.cache_dir = cache;
    o.wordpiece.vocab_size = 300;
    mpx_text_stream s1, s2, s3;
    mpx_text_info i1, i2, i3;
    CHECK_OK(mpx_text_load(&o, &s1, &i1));
    REQUIRE_VOID(s1.tok, "first load failed");
    CHECK(i1.trained == 1 && i1.train.vocab_size == 300 && mpx_tokenizer_size(s1.tok) == 300,
          "first load: trained %d, %d tokens", i1.trained, mpx_tokenizer_size(s1.tok));
    char want_dir[1200];
    snprintf(want_dir, sizeof want_dir, "%s/wordpiece-300-", cache);
    CHECK(strncmp(i1.vocab_path, want_dir, strlen(want_dir)) == 0 &&
              strcmp(i1.vocab_path + strlen(i1.vocab_path) - 10, "/vocab.txt") == 0,
          "vocab path '%s'", i1.vocab_path);
    CHECK(i1.n_docs == 2 && i1.n_words > 7000 && i1.n_unk == 0 && i1.n_tokens == s1.ids.n,
          "info: %lld docs %lld words %lld unk", (long long)i1.n_docs, (long long)i1.n_words,
          (long long)i1.n_unk);

    /* the stream = each document encoded on its own, back to back */
    mpx_token_buf want = {0};
    for (int f = 0; f < 2; f++)
        CHECK_OK(mpx_tokenizer_encode(s1.tok, files[f].text, strlen(files[f].text), &want));
    CHECK(want.n == s1.ids.n && memcmp(want.ids, s1.ids.ids, (size_t)want.n * 4) == 0,
          "stream of %lld ids differs from the documents encoded one by one (%lld)",
          (long long)s1.ids.n, (long long)want.n);
    mpx_token_buf_free(&want);

    /* second load, from the archive of the same files: same checksum, cache reused */
    o.corpus = tgz;
    CHECK_OK(mpx_text_load(&o, &s2, &i2));
    CHECK(i2.trained == 0 && strcmp(i1.vocab_path, i2.vocab_path) == 0 &&
              strcmp(i1.corpus_sha256, i2.corpus_sha256) == 0,
          "second load retrained (%d) or used '%s'", i2.trained, i2.vocab_path);
    CHECK(s2.ids.n == s1.ids.n && memcmp(s1.ids.ids, s2.ids.ids, (size_t)s1.ids.n * 4) == 0,
          "the cached vocabulary encodes differently");

    /* training again elsewhere: identical bytes */
    o.cache_dir = cache2;
    CHECK_OK(mpx_text_load(&o, &s3, &i3));
    CHECK(i3.trained == 1 && file_equal(i1.vocab_path, i3.vocab_path),
          "training twice gave different vocab.txt files");
    mpx_text_stream_free(&s3);

    /* a changed corpus (one more file) or another size: trained into its own directory */
    char more[1200];
    snprintf(more, sizeof more, "%s/three.txt", dir);
    REQUIRE_VOID(fx_write_file(more, "extra words here\n", 17), "fixture");
    o.corpus = dir;
    o.cache_dir = cache;
    CHECK_OK(mpx_text_load(&o, &s3, &i3));
    CHECK(i3.trained == 1 && strcmp(i3.vocab_path, i1.vocab_path) != 0 &&
              strcmp(i3.corpus_sha256, i1.corpus_sha256) != 0,
          "changed corpus: trained %d, '%s'", i3.trained, i3.vocab_path);
    mpx_text_stream_free(&s3);
    o.wordpiece.vocab_size = 250;
    CHECK_OK(mpx_text_load(&o, &s3, &i3));
    CHECK(i3.trained == 1 && mpx_tokenizer_size(s3.tok) == 250, "size 250: trained %d",
          i3.trained);
    mpx_text_stream_free(&s3);

    /* a corrupted vocab.txt is an error naming the cache */
    FILE *f = fopen(i1.vocab_path, "ab");
    REQUIRE_VOID(f, "cannot open '%s'", i1.vocab_path);
    fputs("extra\n", f);
    fclose(f);
    o.corpus = tgz;
    o.wordpiece.vocab_size = 300;
    mpx_status st = mpx_text_load(&o, &s3, &i3);
    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "corrupt") &&
              strstr(mpx_error_message(), "vocab.txt") && s3.tok == NULL,
          "corrupt cache: %s", mpx_error_message());
    mpx_text_stream_free(&s1);
    mpx_text_stream_free(&s2);
    free(t1);
    free(t2);
}

int main(void) {
    mpx_test_tmpdir("text-corpus", g_tmp, sizeof g_tmp);
    REQUIRE(g_tmp[0], "no temporary directory");
    test_read();
    test_errors();
    test_stream_and_cache();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    CHECK(system(cmd) == 0, "cannot remove %s", g_tmp);
    return mpx_test_done(__FILE__);
}
