/* text_fixtures.h — generated corpora for the text tests (header-only, static): a directory of
 * files, the same files as a .tar.gz (with fixtures.h's independent tar writer), and
 * synthetic English-like text from a seeded Zipf-like lexicon. */
#ifndef MPX_TEST_TEXT_FIXTURES_H
#define MPX_TEST_TEXT_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "mpx/rng.h"

typedef struct {
    const char *name; /* relative path, subdirectories allowed */
    const char *text;
} tf_file;

/* Write files under dir (creating subdirectories); 1 on success. */
static inline int tf_write_dir(const char *dir, const tf_file *f, int n) {
    for (int i = 0; i < n; i++) {
        char path[2048], cmd[2200];
        snprintf(path, sizeof path, "%s/%s", dir, f[i].name);
        char *slash = strrchr(path, '/');
        *slash = '\0';
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
        if (system(cmd) != 0) return 0;
        *slash = '/';
        if (!fx_write_file(path, f[i].text, strlen(f[i].text))) return 0;
    }
    return 1;
}

/* The same files in a .tar.gz, in the given order (directories not listed). */
static inline int tf_write_targz(const char *path, const tf_file *f, int n) {
    gzFile gz = gzopen(path, "wb");
    if (!gz) return 0;
    for (int i = 0; i < n; i++) fx_tar_add(gz, f[i].name, '0', f[i].text, strlen(f[i].text));
    fx_tar_end(gz);
    return gzclose(gz) == Z_OK;
}

/* `words` words of synthetic text (caller frees): a lexicon of `lex` words of 2..8 letters
 * over the first `letters` letters of the alphabet, drawn with a Zipf-like skew (index =
 * lex * u^3); about one word in 9 is capitalised, one in 7 followed by punctuation, one in 13
 * by a newline. ASCII only. */
static inline char *tf_synthetic(uint64_t seed, int words, int lex, int letters) {
    char(*lexicon)[9] = malloc((size_t)lex * sizeof *lexicon);
    uint64_t k = 0;
    for (int i = 0; i < lex; i++) {
        int len = 2 + (int)(mpx_rand_u32(seed, MPX_RNG_TEST, k++) % 7);
        for (int j = 0; j < len; j++)
            lexicon[i][j] = (char)('a' + mpx_rand_u32(seed, MPX_RNG_TEST, k++) % (uint32_t)letters);
        lexicon[i][len] = '\0';
    }
    char *out = malloc((size_t)words * 12 + 1), *p = out;
    static const char punct[] = ",.!?;:'";
    for (int w = 0; w < words; w++) {
        double u = mpx_rand_uniform(seed, MPX_RNG_TEST, k++);
        const char *s = lexicon[(int)(lex * u * u * u)];
        size_t len = strlen(s);
        memcpy(p, s, len);
        if (mpx_rand_u32(seed, MPX_RNG_TEST, k++) % 9 == 0) p[0] = (char)(p[0] - 'a' + 'A');
        p += len;
        if (mpx_rand_u32(seed, MPX_RNG_TEST, k++) % 7 == 0)
            *p++ = punct[mpx_rand_u32(seed, MPX_RNG_TEST, k++) % 7];
        *p++ = mpx_rand_u32(seed, MPX_RNG_TEST, k++) % 13 == 0 ? '\n' : ' ';
    }
    *p = '\0';
    free(lexicon);
    return out;
}

#endif
