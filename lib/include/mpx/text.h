/* text.h — text data for BERT-style masked-language-model (MLM) pre-training: the corpus, a
 * WordPiece tokenizer learned from it, MLM examples and their batch loader.
 *
 *   - Corpus: every UTF-8 .txt (and WikiText .raw) file under a directory, recursively, or
 *     inside a .tar.gz read as a stream; documents sorted by path (bytes), checksummed.
 *     Default: ../shared/data/text-corpus.tar.gz beside the source tree.
 *   - Tokenizer: BERT's uncased basic tokenisation (clean, lower-case, split on whitespace and
 *     punctuation, CJK ideographs alone) then WordPiece (greedy longest match first, "##"
 *     continuations). The vocabulary is learned from the corpus at a fixed size by merging the
 *     most frequent adjacent pair (ties: smaller token bytes), saved as a BERT vocab.txt in a
 *     cache keyed by the corpus checksum and reused when it matches. Any BERT vocab.txt loads.
 *   - MLM: the corpus as one token stream cut into sequences [CLS] t1 .. t(T-2) [SEP]; every
 *     heldout_every-th sequence is held out; 15% of the ordinary tokens are predicted
 *     (80% -> [MASK], 10% -> a random token, 10% unchanged), drawn from stream MPX_RNG_MASKING
 *     keyed by (seed, epoch, sequence, position).
 *   - Loader: as mpx_loader (data.h): a background thread, prefetch, order per epoch from
 *     MPX_RNG_DATA_ORDER, resumable at an (epoch, batch) position, eval mode with a partial
 *     last batch. Batches are int32 ids, labels and attention mask, all [B, T].
 * Single-segment MLM: segment (token type) ids are all 0, so no buffer is produced for them.
 * data/README.md ("Text") describes the formats, the cache and every rule in detail.
 */
#ifndef MPX_TEXT_H
#define MPX_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/data.h"
#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- corpus ---- */

typedef struct {
    char path[1024]; /* the directory or archive read */
    int64_t n_docs;
    char **names;     /* [n_docs] path below the directory / inside the archive, sorted bytewise */
    int64_t *offsets; /* [n_docs + 1]: document d is text[offsets[d], offsets[d + 1]) */
    char *text;       /* the documents back to back (valid UTF-8), NUL-terminated */
    char sha256[65];  /* SHA-256 over every document in order: name, NUL, byte count in decimal,
                         NUL, bytes. Equal for a directory and an archive of the same files. */
} mpx_text_corpus;

/* Read a directory (recursively; hidden entries skipped) or a .tar.gz / .tgz / .tar. Files
 * ending .txt or .raw are documents, everything else is ignored. Invalid UTF-8 is
 * MPX_ERR_INPUT naming the file and the byte offset; a corpus without documents or without a
 * single word is MPX_ERR_INPUT naming the path (an archive's gzip CRC is checked). */
mpx_status mpx_text_corpus_read(const char *path, mpx_text_corpus *out);
/* Free and zero (safe on a zeroed struct). */
void mpx_text_corpus_free(mpx_text_corpus *c);

/* ---- tokenizer ---- */

enum { MPX_TOK_PAD, MPX_TOK_UNK, MPX_TOK_CLS, MPX_TOK_SEP, MPX_TOK_MASK, MPX_TOK_NSPECIAL };
/* "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]": ids 0..4 in a trained vocabulary. */
extern const char *const mpx_text_special_tokens[MPX_TOK_NSPECIAL];

typedef struct mpx_tokenizer mpx_tokenizer;

/* A tokenizer over a given vocabulary (id = index); it must hold the five special tokens
 * (anywhere) and no duplicate, empty or whitespace-containing token. */
mpx_status mpx_tokenizer_create(const char *const *tokens, int n, mpx_tokenizer **out);
/* Read / write a BERT vocab.txt: one token per line, id = line number (write: atomic). */
mpx_status mpx_tokenizer_load(const char *vocab_path, mpx_tokenizer **out);
mpx_status mpx_tokenizer_save(const mpx_tokenizer *t, const char *vocab_path);
void mpx_tokenizer_free(mpx_tokenizer *t);

int mpx_tokenizer_size(const mpx_tokenizer *t);
/* The token of id (NULL when out of range). */
const char *mpx_tokenizer_token(const mpx_tokenizer *t, int32_t id);
/* The id of a token, or -1. */
int32_t mpx_tokenizer_id(const mpx_tokenizer *t, const char *token);
/* The id of special token `which` (MPX_TOK_PAD .. MPX_TOK_MASK). */
int32_t mpx_tokenizer_special(const mpx_tokenizer *t, int which);
/* 1 when id is one of the five special tokens. */
int mpx_tokenizer_is_special(const mpx_tokenizer *t, int32_t id);

/* A growable id array; zero-initialise, free with mpx_token_buf_free. */
typedef struct {
    int32_t *ids;
    int64_t n, cap;
} mpx_token_buf;
void mpx_token_buf_free(mpx_token_buf *b);

/* Append the ids of UTF-8 text (no [CLS]/[SEP] added). A word that cannot be covered by the
 * vocabulary (an unknown character) or has more than 100 characters becomes one [UNK], as in
 * BERT. Invalid UTF-8 is MPX_ERR_INPUT naming the byte offset. */
mpx_status mpx_tokenizer_encode(const mpx_tokenizer *t, const char *text, size_t len,
                                mpx_token_buf *out);
/* Tokens joined by spaces with "##" continuations glued to the previous token (BERT's
 * convert_tokens_to_string); special tokens are skipped when skip_special, else written as
 * "[CLS]" etc. Caller frees *out. An id out of range is MPX_ERR_INPUT. */
mpx_status mpx_tokenizer_decode(const mpx_tokenizer *t, const int32_t *ids, int64_t n,
                                int skip_special, char **out);
/* The basic tokenisation of text as a string: its words (lower-cased, punctuation split off)
 * joined by single spaces. decode(encode(s)) == normalize(s) whenever no word of s is [UNK].
 * Caller frees *out. */
mpx_status mpx_text_normalize(const char *text, size_t len, char **out);

/* ---- learning the vocabulary ---- */

typedef struct {
    int vocab_size;    /* 0: 8192; all tokens, the 5 special ones included */
    int max_alphabet;  /* 0: 1000; characters kept (most frequent); rarer ones become [UNK] */
    int min_frequency; /* 0: 2; a pair seen fewer times in the corpus is never merged */
} mpx_wordpiece_opts;

typedef struct {
    int64_t words;        /* words counted (those of <= 100 characters) */
    int64_t unique_words; /* distinct words over the kept alphabet */
    int alphabet;         /* characters kept */
    int64_t merges;       /* merge steps */
    int vocab_size;       /* tokens learned, specials included (< requested when the corpus
                             runs out of pairs seen min_frequency times) */
    double count_s, merge_s; /* wall seconds counting words / merging */
} mpx_wordpiece_stats;

/* Learn a vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK]; the alphabet, each character alone
 * (sorted by code point) then as "##c" (not for punctuation/CJK, which are always words of one
 * character); then one token per merge until vocab_size. Words start as characters (the first
 * plain, the others "##c"); each step merges the adjacent pair with the highest count over
 * the corpus (ties: the smaller left token, then the smaller right token, by bytes) into the
 * concatenation without the right "##". Deterministic. `opts` and `stats` may be NULL. */
mpx_status mpx_wordpiece_train(const mpx_text_corpus *c, const mpx_wordpiece_opts *opts,
                               mpx_tokenizer **out, mpx_wordpiece_stats *stats);

/* ---- the corpus as a token stream, with the vocabulary cache ---- */

typedef struct {
    const char *corpus;    /* directory or archive; NULL: <source>/../shared/data/text-corpus.tar.gz */
    const char *cache_dir; /* NULL: <source>/data/cache/text */
    mpx_wordpiece_opts wordpiece;
    int progress; /* 1: one line on stderr when training starts and ends */
} mpx_text_opts;

typedef struct {
    char corpus[1024];
    char corpus_sha256[65];
    char vocab_path[1200]; /* <cache_dir>/wordpiece-<size>-<key>/vocab.txt */
    int trained;           /* 1: this call learned the vocabulary; 0: read it from the cache */
    mpx_wordpiece_stats train; /* when trained */
    double read_s, vocab_s, encode_s; /* wall seconds: corpus, vocabulary (train or load), encode */
    int64_t n_docs, n_bytes;
    int64_t n_words;  /* basic-tokenizer words encoded */
    int64_t n_tokens; /* ids in the stream */
    int64_t n_unk;    /* of which [UNK] */
} mpx_text_info;

/* The vocabulary for corpus c: <cache_dir>/wordpiece-<size>-<key>/vocab.txt when it exists
 * (checked against the SHA256SUMS beside it), else learned and saved there (under a lock, so
 * concurrent callers train once). key = the first 16 hex digits of a SHA-256 over the corpus
 * checksum and the training options, so another corpus or size gets its own directory.
 * `info` may be NULL. */
mpx_status mpx_text_tokenizer_prepare(const mpx_text_corpus *c, const mpx_text_opts *opts,
                                      mpx_tokenizer **out, mpx_text_info *info);
/* Append every document's ids, in corpus order, back to back (no separator); *n_words and
 * *n_unk (may be NULL) count words and [UNK] ids. */
mpx_status mpx_text_encode_corpus(const mpx_tokenizer *t, const mpx_text_corpus *c,
                                  mpx_token_buf *out, int64_t *n_words, int64_t *n_unk);

typedef struct {
    mpx_tokenizer *tok;
    mpx_token_buf ids; /* the corpus as one stream */
} mpx_text_stream;

/* Read the corpus, prepare the vocabulary, encode. `opts` and `info` may be NULL. */
mpx_status mpx_text_load(const mpx_text_opts *opts, mpx_text_stream *out, mpx_text_info *info);
void mpx_text_stream_free(mpx_text_stream *s);

/* ---- masked-language-model examples ---- */

typedef struct {
    int seq_len;             /* T, [CLS] and two [SEP] included: T - 3 stream tokens per sequence */
    int heldout_every;       /* k: sequence s is held out when s % k == k - 1 (k = 20: 5%);
                                0: nothing held out */
    double mask_prob;        /* 0.15: each ordinary position is predicted with this probability */
    double mask_token_frac;  /* 0.8: of the predicted, replaced by [MASK] */
    double random_token_frac; /* 0.1: replaced by a random ordinary token; the rest unchanged */
} mpx_mlm_config;

/* T 128, held out every 20th, 0.15 / 0.8 / 0.1. */
mpx_mlm_config mpx_mlm_config_default(void);

typedef struct mpx_mlm mpx_mlm;

/* Sequences over a token stream (ids[n], borrowed: it and t must outlive the mlm). Sequence s
 * holds ids[s(T-3) .. min(n, (s+1)(T-3))); only the last may be short (then padded). */
mpx_status mpx_mlm_create(const mpx_tokenizer *t, const int32_t *ids, int64_t n,
                          const mpx_mlm_config *cfg, mpx_mlm **out);
void mpx_mlm_free(mpx_mlm *m);
int mpx_mlm_seq_len(const mpx_mlm *m);
const mpx_tokenizer *mpx_mlm_tokenizer(const mpx_mlm *m);
/* Sequences in a split: MPX_SPLIT_TRAIN, or MPX_SPLIT_TEST = the held-out ones. */
int64_t mpx_mlm_count(const mpx_mlm *m, mpx_split split);
/* The stream-wide sequence number of example i of a split. */
int64_t mpx_mlm_sequence(const mpx_mlm *m, mpx_split split, int64_t i);

/* Example i of a split, masked for (seed, epoch), into ids, labels, attn and segments (T each):
 *   ids      [CLS] A.. [SEP] B.. [SEP] [PAD].., BERT's sentence-pair layout: the sequence's
 *            stream tokens cut in two halves, A the first ceil(len/2) (a one-token sequence has
 *            no B and no second [SEP]); predicted positions replaced as drawn
 *   labels   the original id at predicted positions, -1 elsewhere
 *   attn     1 for [CLS] .. the last [SEP], 0 for padding
 *   segments 0 for [CLS], A and its [SEP]; 1 for B and its [SEP]; 0 for padding
 * Position p of sequence s draws one Philox block (seed, MPX_RNG_MASKING,
 * epoch << 44 | s << 20 | p): word 0 decides whether it is predicted, word 1 how it is
 * replaced, word 2 the random token. Special tokens ([UNK] included) are never predicted.
 * *n_predict (may be NULL) = positions with a label. */
mpx_status mpx_mlm_example(const mpx_mlm *m, mpx_split split, int64_t i, uint64_t seed,
                           int64_t epoch, int32_t *ids, int32_t *labels, int32_t *attn,
                           int32_t *segments, int *n_predict);

/* ---- MLM batch loader ---- */

typedef struct {
    int batch_size;
    uint64_t seed;   /* order and masking */
    mpx_split split; /* MPX_SPLIT_TRAIN or MPX_SPLIT_TEST (held out) */
    int shuffle;     /* 1: a new permutation every epoch; 0: sequence order */
    int drop_last;   /* 1: floor(n/B) full batches per epoch; 0: ceil(n/B), the last partial */
    int fixed_masks; /* 1: every epoch is masked as epoch 0 (the same masks on every pass) */
    int prefetch;    /* batches prepared ahead, >= 1 */
} mpx_mlm_loader_config;

/* Training split, shuffled, drop_last, masks new every epoch, prefetch 2. */
mpx_mlm_loader_config mpx_mlm_loader_config_train(int batch_size, uint64_t seed);
/* Held-out split in order, every sequence once, the last batch partial, fixed masks. */
mpx_mlm_loader_config mpx_mlm_loader_config_eval(int batch_size, uint64_t seed);

typedef struct {
    const int32_t *ids;    /* [B, T] */
    const int32_t *labels; /* [B, T], -1 = not predicted */
    const int32_t *attn;   /* [B, T], 1 = real token, 0 = padding */
    const int32_t *segments; /* [B, T], segment (token type) 0 or 1; 0 for padding */
    int n;                 /* real rows (< B only for a partial last batch; other rows are
                              [PAD], label -1, attn 0) */
    int batch_size, seq_len;
    int64_t n_predict; /* labels != -1 in the batch */
    mpx_loader_pos pos;
} mpx_mlm_batch;

typedef struct mpx_mlm_loader mpx_mlm_loader;

/* A loader whose first batch is the one at `start` ({0, 0}: the beginning); `m` must outlive
 * it. All memory is allocated here; the worker thread starts. */
mpx_status mpx_mlm_loader_create(const mpx_mlm *m, const mpx_mlm_loader_config *cfg,
                                 mpx_loader_pos start, mpx_mlm_loader **out);
/* Wait for the next batch; valid until the next call or mpx_mlm_loader_free. */
mpx_status mpx_mlm_loader_next(mpx_mlm_loader *L, mpx_mlm_batch *out);
/* The position of the batch the next call returns (save it in checkpoints). */
mpx_loader_pos mpx_mlm_loader_position(const mpx_mlm_loader *L);
int64_t mpx_mlm_loader_batches_per_epoch(const mpx_mlm_loader *L);
/* Stop the worker and free everything. NULL is fine. */
void mpx_mlm_loader_free(mpx_mlm_loader *L);

#ifdef __cplusplus
}
#endif

#endif
