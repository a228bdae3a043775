/* fuzz_text.c — libFuzzer target: WordPiece vocabulary files and encoding of arbitrary bytes
 * (invalid UTF-8 included). The input's first half is a vocab file, the second the text. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "mpx/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t half = size / 2;
    char vocab[64];
    snprintf(vocab, sizeof vocab, "/tmp/mpx-fuzz-vocab-%d.txt", (int)getpid());
    FILE *f = fopen(vocab, "wb");
    if (!f) return 0;
    fwrite(data, 1, half, f);
    fclose(f);
    mpx_tokenizer *t = NULL;
    if (mpx_tokenizer_load(vocab, &t) == MPX_OK) {
        mpx_token_buf b = {0};
        (void)mpx_tokenizer_encode(t, (const char *)data + half, size - half, &b);
        mpx_token_buf_free(&b);
        mpx_tokenizer_free(t);
    }
    remove(vocab);
    return 0;
}
