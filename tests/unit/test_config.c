/* test_config.c — the INI configuration: parsing, includes, overrides, validation messages,
 * getters, the resolved-text round trip, and hostile input.
 *
 * Error messages are the user interface here, so they are compared exactly (file:line, key,
 * value, reason). The reference for values is the fixture text itself; floats are compared
 * exactly because both sides come from strtod of the same text. The robustness loop mutates a
 * valid configuration 2000 times and requires MPX_OK or MPX_ERR_INPUT with a one-line message,
 * and a lossless round trip for every mutant that validates (ASan/UBSan catch the rest).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpx/config.h"
#include "testutil.h"

static const mpx_cfg_key k_schema[] = {
    {"model", "name", MPX_CFG_ENUM, "mlp", "mlp|cnn|lstm", 1, 0, "model family"},
    {"model", "hidden", MPX_CFG_INT, "64", NULL, 1, 4096, "hidden width"},
    {"model", "dropout", MPX_CFG_FLOAT, "0", NULL, 0, 1, "dropout probability"},
    {"data", "path", MPX_CFG_STRING, "", NULL, 1, 0, "dataset file"},
    {"data", "shuffle", MPX_CFG_BOOL, "true", NULL, 1, 0, "shuffle every epoch"},
    {"train", "steps", MPX_CFG_INT, "1000", NULL, 1, 1000000, "optimizer steps"},
    {"train", "lr", MPX_CFG_FLOAT, "0.1", NULL, 0, 10, "learning rate"},
    {"train", "batch", MPX_CFG_INT, "64", NULL, 1, 65536, "batch size"},
    {"train", "seed", MPX_CFG_INT, "0", NULL, 1, 0, "seed, any 64-bit integer"},
    {"precision", "mode", MPX_CFG_ENUM, "fp32", "fp32|fp16|bf16", 1, 0, "arithmetic"},
    {"precision", "scaling", MPX_CFG_ENUM, "none", "none|fixed|dynamic|adaptive|adaptive-quantile",
     1, 0, "loss scaling"},
    {"precision", "scale", MPX_CFG_FLOAT, "65536", NULL, 1, 0, "initial loss scale"},
    {"precision", "master_weights", MPX_CFG_BOOL, "on", NULL, 1, 0, "fp32 master weights"},
    {"log", "stats_every", MPX_CFG_INT, "100", NULL, 0, 100000, "statistics period"},
    {"log", "note", MPX_CFG_STRING, "", NULL, 1, 0, "free text"},
    /* A [model] key after other sections: the resolved text must still group it under [model]. */
    {"model", "init", MPX_CFG_ENUM, "he", "he|xavier", 1, 0, "weight init"},
};
static const size_t k_n = sizeof k_schema / sizeof k_schema[0];

static char g_dir[512]; /* tests/unit/data/config in the source tree */
static char g_tmp[512]; /* a fresh scratch directory */

/* Expect `s` == `code` and the message == `want` exactly. */
#define EXPECT_MSG(expr, code, want)                                                               \
    do {                                                                                           \
        mpx_status s_ = (expr);                                                                    \
        const char *m_ = mpx_error_message();                                                      \
        CHECK(s_ == (code) && strcmp(m_, (want)) == 0, "%s -> %s '%s'\n     want %s '%s'", #expr,  \
              mpx_status_name(s_), m_, mpx_status_name(code), (want));                             \
    } while (0)

/* REQUIRE for the void test functions: record the failure and leave the function. */
#define NEED(cond, ...)                                                                            \
    do {                                                                                           \
        CHECK(cond, __VA_ARGS__);                                                                  \
        if (!(cond)) return;                                                                       \
    } while (0)

/* Parse `text` then validate; the config is freed unless `out` is given. */
static mpx_status parse_validate(const char *text, const char *name, mpx_config **out) {
    mpx_config *cfg = NULL;
    mpx_status s = mpx_config_parse_string(text, name, g_dir, &cfg);
    if (s == MPX_OK) s = mpx_config_validate(cfg, k_schema, k_n);
    if (out && s == MPX_OK)
        *out = cfg;
    else
        mpx_config_free(cfg);
    return s;
}

static void write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) CHECK(0, "cannot write %s", path);
    if (f) fclose(f);
}

static void test_defaults(void) {
    mpx_config *cfg = NULL;
    CHECK_OK(mpx_config_new(&cfg));
    CHECK_OK(mpx_config_validate(cfg, k_schema, k_n));
    CHECK(mpx_cfg_int(cfg, "train.steps") == 1000, "default steps");
    CHECK(mpx_cfg_float(cfg, "train.lr") == 0.1, "default lr");
    CHECK(mpx_cfg_bool(cfg, "data.shuffle") == 1, "default shuffle");
    CHECK(mpx_cfg_bool(cfg, "precision.master_weights") == 1, "default master_weights (on)");
    CHECK(strcmp(mpx_cfg_str(cfg, "model.name"), "mlp") == 0, "default enum");
    CHECK(strcmp(mpx_cfg_str(cfg, "data.path"), "") == 0, "default empty string");
    CHECK(!mpx_cfg_is_set(cfg, "train.steps"), "default is not set");
    CHECK(strcmp(mpx_cfg_where(cfg, "train.steps"), "default") == 0, "where of a default");
    /* Keys missing from the schema (a bug in the caller) read as 0 / "". */
    CHECK(mpx_cfg_int(cfg, "train.nope") == 0 && strcmp(mpx_cfg_str(cfg, "nope.x"), "") == 0 &&
              mpx_cfg_int(cfg, "nodot") == 0,
          "unknown getters");
    CHECK(mpx_cfg_int(cfg, "train.lr") == 0, "int getter on a float key is 0");
    CHECK(mpx_cfg_float(cfg, "train.batch") == 64.0, "float getter on an int key converts");
    mpx_config_free(cfg);

    /* An empty file, a file of comments, a lone BOM: all valid, all defaults. */
    char path[1024];
    snprintf(path, sizeof path, "%s/empty.cfg", g_dir);
    CHECK_OK(mpx_config_load(path, &cfg));
    CHECK_OK(mpx_config_validate(cfg, k_schema, k_n));
    CHECK(mpx_cfg_int(cfg, "model.hidden") == 64, "empty file gives defaults");
    mpx_config_free(cfg);
    CHECK_OK(parse_validate("\xEF\xBB\xBF", "bom.cfg", NULL));
    CHECK_OK(parse_validate("; only\n  # comments\n\n\t\n", "c.cfg", NULL));
}

static void test_load_includes(void) {
    char path[1024], want[8192];
    snprintf(path, sizeof path, "%s/main.cfg", g_dir);
    mpx_config *cfg = NULL;
    CHECK_OK(mpx_config_load(path, &cfg));
    NEED(cfg, "main.cfg did not load");
    CHECK_OK(mpx_config_validate(cfg, k_schema, k_n));
    CHECK(mpx_cfg_int(cfg, "train.steps") == 500, "main.cfg overrides the included steps");
    snprintf(want, sizeof want, "%s/main.cfg:5", g_dir);
    CHECK(strcmp(mpx_cfg_where(cfg, "train.steps"), want) == 0, "where steps: %s",
          mpx_cfg_where(cfg, "train.steps"));
    CHECK(mpx_cfg_int(cfg, "train.batch") == 32, "batch from sub/base.cfg");
    snprintf(want, sizeof want, "%s/sub/base.cfg:10", g_dir);
    CHECK(strcmp(mpx_cfg_where(cfg, "train.batch"), want) == 0, "where batch: %s",
          mpx_cfg_where(cfg, "train.batch"));
    CHECK(mpx_cfg_float(cfg, "train.lr") == 0.05, "lr");
    CHECK(strcmp(mpx_cfg_str(cfg, "model.name"), "cnn") == 0, "model.name");
    /* sub/base.cfg sets hidden = 128, then includes common.cfg (hidden = 96): later wins. */
    CHECK(mpx_cfg_int(cfg, "model.hidden") == 96, "include processed in place: %lld",
          (long long)mpx_cfg_int(cfg, "model.hidden"));
    snprintf(want, sizeof want, "%s/sub/common.cfg:4", g_dir);
    CHECK(strcmp(mpx_cfg_where(cfg, "model.hidden"), want) == 0, "where hidden: %s",
          mpx_cfg_where(cfg, "model.hidden"));
    /* Relative to sub/, not to main.cfg's directory (the decoy says 7). */
    CHECK(mpx_cfg_int(cfg, "log.stats_every") == 50, "include relative to the including file");
    CHECK(mpx_cfg_float(cfg, "model.dropout") == 0.25, "section resumes after an include");
    CHECK(strcmp(mpx_cfg_str(cfg, "data.path"), "/data/mnist") == 0, "comment stripped: '%s'",
          mpx_cfg_str(cfg, "data.path"));
    CHECK(mpx_cfg_bool(cfg, "data.shuffle") == 0, "shuffle = off");
    CHECK(strcmp(mpx_cfg_str(cfg, "precision.scaling"), "adaptive-quantile") == 0, "scaling");
    CHECK(strcmp(mpx_cfg_str(cfg, "precision.mode"), "fp16") == 0, "mode");
    CHECK(mpx_cfg_is_set(cfg, "precision.mode") && !mpx_cfg_is_set(cfg, "precision.scale"),
          "is_set");
    mpx_config_free(cfg);

    /* Loops, missing includes, missing files, directories. */
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/loop/a.cfg", g_dir);
    snprintf(b, sizeof b, "%s/loop/b.cfg", g_dir);
    snprintf(want, sizeof want, "%s:2: include loop: %s -> %s -> %s", b, a, b, a);
    EXPECT_MSG(mpx_config_load(a, &cfg), MPX_ERR_INPUT, want);
    CHECK(cfg == NULL, "no config on error");
    snprintf(path, sizeof path, "%s/missing_include.cfg", g_dir);
    snprintf(want, sizeof want,
             "%s:3: cannot open include '%s/nowhere/missing.cfg': No such file or directory", path,
             g_dir);
    EXPECT_MSG(mpx_config_load(path, &cfg), MPX_ERR_INPUT, want);
    snprintf(path, sizeof path, "%s/nope.cfg", g_dir);
    snprintf(want, sizeof want, "cannot open '%s': No such file or directory", path);
    EXPECT_MSG(mpx_config_load(path, &cfg), MPX_ERR_INPUT, want);
    snprintf(path, sizeof path, "%s/sub", g_dir);
    snprintf(want, sizeof want, "cannot open '%s': Is a directory", path);
    EXPECT_MSG(mpx_config_load(path, &cfg), MPX_ERR_INPUT, want);
    /* The same file by another name is still a loop (files are identified by inode). */
    snprintf(path, sizeof path, "%s/self.cfg", g_tmp);
    write_file(path, "include = ./self.cfg\n", 21);
    snprintf(want, sizeof want, "%s:1: include loop: %s -> %s/./self.cfg", path, path, g_tmp);
    EXPECT_MSG(mpx_config_load(path, &cfg), MPX_ERR_INPUT, want);
    /* A FIFO is refused at once instead of blocking on open. */
    snprintf(path, sizeof path, "%s/fifo", g_tmp);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    snprintf(want, sizeof want, "<string>:1: cannot open include '%s': not a regular file", path);
    char text[2048];
    snprintf(text, sizeof text, "include = %s\n", path);
    EXPECT_MSG(mpx_config_parse_string(text, NULL, NULL, &cfg), MPX_ERR_INPUT, want);
}

/* Every parse error class, with its exact message. */
static void test_parse_errors(void) {
    mpx_config *cfg = NULL;
#define PARSE_ERR(text, want)                                                                      \
    EXPECT_MSG(mpx_config_parse_string(text, "t.cfg", g_dir, &cfg), MPX_ERR_INPUT, want)
    PARSE_ERR("[train\nsteps = 1\n", "t.cfg:1: unterminated section header '[train'");
    PARSE_ERR("[train]\n = 5\n", "t.cfg:2: empty key before '='");
    PARSE_ERR("[train]\n=\n", "t.cfg:2: empty key before '='");
    PARSE_ERR("[Train]\n", "t.cfg:1: invalid section name 'Train' (use a-z, 0-9, _)");
    PARSE_ERR("[]\n", "t.cfg:1: invalid section name '' (use a-z, 0-9, _)");
    PARSE_ERR("[train.x]\n", "t.cfg:1: invalid section name 'train.x' (use a-z, 0-9, _)");
    PARSE_ERR("[train] x\n", "t.cfg:1: unexpected text after ']': ' x'");
    PARSE_ERR("[train]\nSteps = 5\n", "t.cfg:2: invalid key 'Steps' (use a-z, 0-9, _)");
    PARSE_ERR("[train]\nmy key = 5\n", "t.cfg:2: invalid key 'my key' (use a-z, 0-9, _)");
    PARSE_ERR("\n\nsteps = 5\n[train]\n",
              "t.cfg:3: key 'steps' before any [section] (only include may appear there)");
    PARSE_ERR("[train]\njust words\n",
              "t.cfg:2: expected 'key = value' or '[section]', got 'just words'");
    PARSE_ERR("[train]\nsteps = 1\x01\n", "t.cfg:2: control character 0x01 in line");
    PARSE_ERR("[train]\nsteps = 1\r2\n", "t.cfg:2: control character 0x0d in line");
    PARSE_ERR("[train]\ninclude =\n", "t.cfg:2: include needs a path");
#undef PARSE_ERR
    char path[1024], want[8192];
    snprintf(want, sizeof want,
             "t.cfg:2: cannot open include '%s/nowhere.cfg': No such file or directory", g_dir);
    EXPECT_MSG(
        mpx_config_parse_string("[train]\ninclude = nowhere.cfg ; comment\n", "t.cfg", g_dir, &cfg),
        MPX_ERR_INPUT, want);
    CHECK(cfg == NULL, "no config on error");

    /* NUL bytes can only come from a file. */
    snprintf(path, sizeof path, "%s/nul.cfg", g_tmp);
    write_file(path, "[train]\nsteps = 1\0 2\n", 21);
    snprintf(want, sizeof want, "%s:2: NUL byte in line (not a text file?)", path);
    EXPECT_MSG(mpx_config_load(path, &cfg), MPX_ERR_INPUT, want);
}

static void test_comments_and_values(void) {
    mpx_config *cfg = NULL;
    EXPECT_MSG(parse_validate("[log]\nstats_every=5#x\n", "c.cfg", NULL), MPX_ERR_INPUT,
               "c.cfg:2: [log] stats_every = 5#x: not an integer");
    CHECK_OK(parse_validate("  ; indented comment\n# hash comment\n[log] ; trailing\n"
                            "note = a;b#c  ; inside a word they are text\n"
                            "stats_every = 5\t# tab before the comment\n",
                            "c.cfg", &cfg));
    NEED(cfg, "comment text did not parse");
    CHECK(strcmp(mpx_cfg_str(cfg, "log.note"), "a;b#c") == 0, "note '%s'",
          mpx_cfg_str(cfg, "log.note"));
    CHECK(mpx_cfg_int(cfg, "log.stats_every") == 5, "tab-separated comment");
    mpx_config_free(cfg);
    cfg = NULL;
    /* A ';' or '#' at the start of the value is a comment, with or without a space. */
    CHECK_OK(parse_validate("[log]\nnote = #x\n[data]\npath =;y\n", "c.cfg", &cfg));
    NEED(cfg, "comment-only values did not parse");
    CHECK(strcmp(mpx_cfg_str(cfg, "log.note"), "") == 0, "value '#x' is a comment");
    CHECK(strcmp(mpx_cfg_str(cfg, "data.path"), "") == 0, "value ';y' is a comment");
    CHECK(mpx_cfg_is_set(cfg, "log.note"), "an empty value is still set");
    mpx_config_free(cfg);
    cfg = NULL;
    /* Duplicates: the later wins and is the one named. */
    CHECK_OK(parse_validate("[train]\nsteps = 5\n[model]\n[train]\nsteps = 6\n", "d.cfg", &cfg));
    NEED(cfg, "duplicates did not parse");
    CHECK(mpx_cfg_int(cfg, "train.steps") == 6, "later duplicate wins");
    CHECK(strcmp(mpx_cfg_where(cfg, "train.steps"), "d.cfg:5") == 0, "where duplicate: %s",
          mpx_cfg_where(cfg, "train.steps"));
    mpx_config_free(cfg);
    cfg = NULL;
    /* Whitespace around names inside brackets and around '=' is trimmed. */
    CHECK_OK(parse_validate("[ train ]\n\t steps\t=\t 7 \t\n", "w.cfg", &cfg));
    NEED(cfg, "whitespace text did not parse");
    CHECK(mpx_cfg_int(cfg, "train.steps") == 7, "trimmed");
    mpx_config_free(cfg);
}

/* Validation: every class of error, exact messages, and the first error in file order. */
static void test_validation(void) {
#define BAD(text, want) EXPECT_MSG(parse_validate(text, "v.cfg", NULL), MPX_ERR_INPUT, want)
#define GOOD(text) CHECK_OK(parse_validate(text, "v.cfg", NULL))
    BAD("[optim]\n", "v.cfg:1: unknown section [optim]");
    BAD("[trian]\nsteps = 1\n", "v.cfg:1: unknown section [trian] (did you mean [train]?)");
    BAD("[train]\nstpes = 10\n", "v.cfg:2: [train] unknown key 'stpes' (did you mean 'steps'?)");
    BAD("[train]\nsteeps = 10\n", "v.cfg:2: [train] unknown key 'steeps' (did you mean 'steps'?)");
    BAD("[train]\nwhatever = 1\n", "v.cfg:2: [train] unknown key 'whatever'");
    BAD("[model]\nsteps = 1\n", "v.cfg:2: [model] unknown key 'steps'"); /* wrong section */
    /* INT */
    BAD("[train]\nsteps = 12abc\n", "v.cfg:2: [train] steps = 12abc: not an integer");
    BAD("[train]\nsteps =\n", "v.cfg:2: [train] steps = : not an integer");
    BAD("[train]\nsteps = 1e3\n", "v.cfg:2: [train] steps = 1e3: not an integer");
    BAD("[train]\nsteps = 10k\n", "v.cfg:2: [train] steps = 10k: not an integer");
    BAD("[train]\nsteps = 1.5\n", "v.cfg:2: [train] steps = 1.5: not an integer");
    BAD("[train]\nsteps = 0x10\n", "v.cfg:2: [train] steps = 0x10: not an integer");
    BAD("[train]\nsteps = - 5\n", "v.cfg:2: [train] steps = - 5: not an integer");
    BAD("[train]\nseed = 9223372036854775808\n",
        "v.cfg:2: [train] seed = 9223372036854775808: integer out of the 64-bit range");
    BAD("[train]\nseed = -9223372036854775809\n",
        "v.cfg:2: [train] seed = -9223372036854775809: integer out of the 64-bit range");
    BAD("[train]\nsteps = 0\n", "v.cfg:2: [train] steps = 0: outside the range [1, 1000000]");
    BAD("[train]\nsteps = 1000001\n",
        "v.cfg:2: [train] steps = 1000001: outside the range [1, 1000000]");
    GOOD("[train]\nsteps = 1000000\n");
    GOOD("[train]\nsteps = +1\n");
    mpx_config *cfg = NULL;
    CHECK_OK(parse_validate("[train]\nseed = -9223372036854775808\nbatch = 007\n", "v.cfg", &cfg));
    CHECK(cfg && mpx_cfg_int(cfg, "train.seed") == INT64_MIN, "INT64_MIN");
    CHECK(cfg && mpx_cfg_int(cfg, "train.batch") == 7, "leading zeros");
    mpx_config_free(cfg);
    cfg = NULL;
    /* FLOAT */
    BAD("[train]\nlr = fast\n", "v.cfg:2: [train] lr = fast: not a number");
    BAD("[train]\nlr = 0.1x\n", "v.cfg:2: [train] lr = 0.1x: not a number");
    BAD("[train]\nlr =\n", "v.cfg:2: [train] lr = : not a number");
    BAD("[precision]\nscale = inf\n", "v.cfg:2: [precision] scale = inf: not a finite number");
    BAD("[precision]\nscale = nan\n", "v.cfg:2: [precision] scale = nan: not a finite number");
    BAD("[precision]\nscale = 1e999\n", "v.cfg:2: [precision] scale = 1e999: not a finite number");
    BAD("[train]\nlr = -0.5\n", "v.cfg:2: [train] lr = -0.5: outside the range [0, 10]");
    BAD("[model]\ndropout = 1.0000001\n",
        "v.cfg:2: [model] dropout = 1.0000001: outside the range [0, 1]");
    GOOD("[model]\ndropout = 1\n");
    CHECK_OK(parse_validate("[train]\nlr = 1e-3\n[precision]\nscale = -2.5E+4\n", "v.cfg", &cfg));
    CHECK(cfg && mpx_cfg_float(cfg, "train.lr") == 1e-3, "lr 1e-3");
    CHECK(cfg && mpx_cfg_float(cfg, "precision.scale") == -2.5e4, "scale -2.5E+4");
    mpx_config_free(cfg);
    cfg = NULL;
    /* BOOL */
    BAD("[data]\nshuffle = maybe\n",
        "v.cfg:2: [data] shuffle = maybe: not a boolean (true/false, yes/no, on/off, 1/0)");
    BAD("[data]\nshuffle = True\n",
        "v.cfg:2: [data] shuffle = True: not a boolean (true/false, yes/no, on/off, 1/0)");
    static const char *const spell[] = {"true", "false", "yes", "no", "on", "off", "1", "0"};
    for (int i = 0; i < 8; i++) {
        char text[64];
        snprintf(text, sizeof text, "[data]\nshuffle = %s\n", spell[i]);
        CHECK_OK(parse_validate(text, "v.cfg", &cfg));
        CHECK(cfg && mpx_cfg_bool(cfg, "data.shuffle") == (i % 2 == 0), "bool %s", spell[i]);
        mpx_config_free(cfg);
        cfg = NULL;
    }
    /* ENUM */
    BAD("[precision]\nmode = fp12\n",
        "v.cfg:2: [precision] mode = fp12: not one of fp32|fp16|bf16");
    BAD("[precision]\nmode = fp\n", "v.cfg:2: [precision] mode = fp: not one of fp32|fp16|bf16");
    BAD("[precision]\nscaling = adaptive-\n",
        "v.cfg:2: [precision] scaling = adaptive-: not one of "
        "none|fixed|dynamic|adaptive|adaptive-quantile");
    GOOD("[precision]\nmode = bf16\nscaling = adaptive\n");
    /* First error in file order: a value overridden later counts at its last assignment. */
    BAD("[train]\nsteps = abc\nlr = x\nsteps = 7x\n", "v.cfg:3: [train] lr = x: not a number");
    GOOD("[train]\nsteps = abc\nsteps = 5\n");
    BAD("[train]\nlr = x\n[foo]\n", "v.cfg:2: [train] lr = x: not a number");
    char path[1024], want[8192];
    snprintf(path, sizeof path, "%s/first_error.cfg", g_dir);
    CHECK_OK(mpx_config_load(path, &cfg));
    snprintf(want, sizeof want,
             "%s/first_error_inc.cfg:3: [precision] mode = fp12: not one of "
             "fp32|fp16|bf16",
             g_dir);
    if (cfg) EXPECT_MSG(mpx_config_validate(cfg, k_schema, k_n), MPX_ERR_INPUT, want);
    mpx_config_free(cfg);
    cfg = NULL;
#undef BAD
#undef GOOD

    /* A broken schema is a bug: MPX_ERR_INTERNAL, naming the key. */
    mpx_config_new(&cfg);
    const mpx_cfg_key dup[] = {{"train", "steps", MPX_CFG_INT, "1", NULL, 1, 0, ""},
                               {"train", "steps", MPX_CFG_INT, "2", NULL, 1, 0, ""}};
    EXPECT_MSG(mpx_config_validate(cfg, dup, 2), MPX_ERR_INTERNAL,
               "config schema: [train] steps declared twice");
    const mpx_cfg_key bad_def[] = {{"train", "steps", MPX_CFG_INT, "many", NULL, 1, 0, ""}};
    EXPECT_MSG(mpx_config_validate(cfg, bad_def, 1), MPX_ERR_INTERNAL,
               "config schema: [train] steps default 'many': not an integer");
    const mpx_cfg_key no_choices[] = {{"train", "opt", MPX_CFG_ENUM, "sgd", NULL, 1, 0, ""}};
    EXPECT_MSG(mpx_config_validate(cfg, no_choices, 1), MPX_ERR_INTERNAL,
               "config schema: [train] opt: bad type, missing default or choices");
    mpx_config_free(cfg);
}

static void test_override_and_set(void) {
    mpx_config *cfg = NULL;
    CHECK_OK(mpx_config_new(&cfg));
    NEED(cfg, "new");
    EXPECT_MSG(mpx_config_override(cfg, "trainsteps=5"), MPX_ERR_INPUT,
               "command line: 'trainsteps=5' is not section.key=value (missing '.')");
    EXPECT_MSG(mpx_config_override(cfg, "train.steps"), MPX_ERR_INPUT,
               "command line: 'train.steps' is not section.key=value (missing '=')");
    EXPECT_MSG(mpx_config_override(cfg, "steps=1.5"), MPX_ERR_INPUT,
               "command line: 'steps=1.5' is not section.key=value (missing '.')");
    EXPECT_MSG(mpx_config_override(cfg, "train.Steps=5"), MPX_ERR_INPUT,
               "command line: [train] invalid key 'Steps' (use a-z, 0-9, _)");
    EXPECT_MSG(mpx_config_override(cfg, ".steps=5"), MPX_ERR_INPUT,
               "command line: invalid section name '' (use a-z, 0-9, _)");
    EXPECT_MSG(mpx_config_override(cfg, "train.include=x.cfg"), MPX_ERR_INPUT,
               "command line: [train] include is not a key (only files include files)");
    EXPECT_MSG(mpx_config_override(cfg, "log.note=a ;b"), MPX_ERR_INPUT,
               "command line: [log] note = a ;b: a ';' or '#' at the start or after whitespace "
               "would begin a comment");
    EXPECT_MSG(mpx_config_set(cfg, "log", "note", "two\nlines", "test"), MPX_ERR_INPUT,
               "test: [log] note = two?lines: contains a control character");
    /* Before validation anything well-formed is stored; validation then names the override. */
    CHECK_OK(mpx_config_override(cfg, "train.stpes=5"));
    EXPECT_MSG(mpx_config_validate(cfg, k_schema, k_n), MPX_ERR_INPUT,
               "command line: [train] unknown key 'stpes' (did you mean 'steps'?)");
    mpx_config_free(cfg);
    cfg = NULL;

    char path[1024];
    snprintf(path, sizeof path, "%s/main.cfg", g_dir);
    CHECK_OK(mpx_config_load(path, &cfg));
    NEED(cfg, "main.cfg");
    CHECK_OK(mpx_config_override(cfg, "train.steps=42"));
    CHECK_OK(mpx_config_override(cfg, " precision.mode = bf16 "));
    CHECK_OK(mpx_config_set(cfg, "precision", "scale", "1024", "default for scale smoke"));
    CHECK_OK(mpx_config_validate(cfg, k_schema, k_n));
    CHECK(mpx_cfg_int(cfg, "train.steps") == 42, "override applied");
    CHECK(strcmp(mpx_cfg_where(cfg, "train.steps"), "command line") == 0, "override origin");
    CHECK(strcmp(mpx_cfg_str(cfg, "precision.mode"), "bf16") == 0, "trimmed override");
    CHECK(mpx_cfg_float(cfg, "precision.scale") == 1024, "set");
    CHECK(strcmp(mpx_cfg_where(cfg, "precision.scale"), "default for scale smoke") == 0,
          "set origin");
    /* With a schema remembered, a bad value is refused at once and the old one kept. */
    EXPECT_MSG(mpx_config_override(cfg, "train.steps=abc"), MPX_ERR_INPUT,
               "command line: [train] steps = abc: not an integer");
    EXPECT_MSG(mpx_config_override(cfg, "train.stpes=1"), MPX_ERR_INPUT,
               "command line: [train] unknown key 'stpes' (did you mean 'steps'?)");
    EXPECT_MSG(mpx_config_set(cfg, "precision", "mode", "fp8", "smoke"), MPX_ERR_INPUT,
               "smoke: [precision] mode = fp8: not one of fp32|fp16|bf16");
    CHECK(mpx_cfg_int(cfg, "train.steps") == 42 && mpx_cfg_is_set(cfg, "train.steps"),
          "refused override leaves the value");
    mpx_config_free(cfg);
}

/* Every schema key reads the same from `a` and `b`. */
static void check_same_values(const mpx_config *a, const mpx_config *b, const char *what) {
    for (size_t i = 0; i < k_n; i++) {
        char dotted[128];
        snprintf(dotted, sizeof dotted, "%s.%s", k_schema[i].section, k_schema[i].key);
        int same = 0;
        switch (k_schema[i].type) {
        case MPX_CFG_INT: same = mpx_cfg_int(a, dotted) == mpx_cfg_int(b, dotted); break;
        case MPX_CFG_FLOAT: same = mpx_cfg_float(a, dotted) == mpx_cfg_float(b, dotted); break;
        case MPX_CFG_BOOL: same = mpx_cfg_bool(a, dotted) == mpx_cfg_bool(b, dotted); break;
        default: same = strcmp(mpx_cfg_str(a, dotted), mpx_cfg_str(b, dotted)) == 0;
        }
        CHECK(same, "%s: %s differs after the round trip", what, dotted);
    }
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

static void test_resolved_text(void) {
    char path[1024], want[8192];
    snprintf(path, sizeof path, "%s/main.cfg", g_dir);
    mpx_config *cfg = NULL, *back = NULL;
    CHECK_OK(mpx_config_load(path, &cfg));
    NEED(cfg, "main.cfg");
    CHECK_OK(mpx_config_override(cfg, "train.steps=42"));
    CHECK_OK(mpx_config_set(cfg, "log", "note", "a;b#c", "the test"));
    CHECK_OK(mpx_config_validate(cfg, k_schema, k_n));
    char *text = mpx_config_resolved_text(cfg);
    NEED(text, "resolved text");
    CHECK(strncmp(text, "[model]\nname = cnn  ; ", 22) == 0, "starts with [model]:\n%s", text);
    CHECK(count(text, "[model]") == 1 && count(text, "[train]") == 1, "one header per section");
    CHECK(count(text, " = ") == (int)k_n, "one line per schema key");
    CHECK(strstr(text, "\ninit = he  ; default\n") != NULL, "model.init grouped, default");
    CHECK(strstr(text, "\nsteps = 42  ; command line\n") != NULL, "override origin");
    CHECK(strstr(text, "\nnote = a;b#c  ; the test\n") != NULL, "set origin");
    CHECK(strstr(text, "\npath = /data/mnist  ; ") != NULL, "comment stripped");
    snprintf(want, sizeof want, "\nhidden = 96  ; %s/sub/common.cfg:4\n", g_dir);
    CHECK(strstr(text, want) != NULL, "file origin");
    CHECK(strstr(text, "[log]\nstats_every = 50") != NULL, "log section");
    /* The text parses back to the same values (it must: it is stored in every run file). */
    CHECK_OK(mpx_config_parse_string(text, "resolved", NULL, &back));
    if (back) {
        CHECK_OK(mpx_config_validate(back, k_schema, k_n));
        check_same_values(cfg, back, "resolved text");
        CHECK(strcmp(mpx_cfg_where(back, "data.path"), "resolved:8") == 0, "reparsed origin %s",
              mpx_cfg_where(back, "data.path"));
    }
    free(text);
    mpx_config_free(back);
    mpx_config_free(cfg);

    /* Without a schema: the entries in the order first set, re-opening sections as needed. */
    CHECK_OK(mpx_config_parse_string("[b]\nx = 1\n[a]\ny = 2\n[b]\nz =\n", "t", NULL, &cfg));
    text = cfg ? mpx_config_resolved_text(cfg) : NULL;
    CHECK(text && strcmp(text, "[b]\nx = 1  ; t:2\n\n[a]\ny = 2  ; t:4\n\n[b]\nz =   ; t:6\n") == 0,
          "unvalidated resolved text:\n%s", text ? text : "(null)");
    free(text);
    mpx_config_free(cfg);
}

static void test_crlf_bom(void) {
    mpx_config *cfg = NULL;
    CHECK_OK(parse_validate("\xEF\xBB\xBF[train]\r\nsteps = 7\r\n\r\nlr = 0.5 ; x\r\n", "crlf.cfg",
                            &cfg));
    CHECK(cfg && mpx_cfg_int(cfg, "train.steps") == 7, "CRLF value");
    CHECK(cfg && mpx_cfg_float(cfg, "train.lr") == 0.5, "CRLF value with comment");
    CHECK(cfg && strcmp(mpx_cfg_where(cfg, "train.lr"), "crlf.cfg:4") == 0, "CRLF line count");
    mpx_config_free(cfg);
    cfg = NULL;
    /* A BOM anywhere but the start is not whitespace. */
    EXPECT_MSG(parse_validate("[train]\n\xEF\xBB\xBFsteps = 1\n", "b.cfg", NULL), MPX_ERR_INPUT,
               "b.cfg:2: invalid key '\xEF\xBB\xBFsteps' (use a-z, 0-9, _)");
    /* Files: BOM + CRLF in the includer and the included file, include path not "inc.cfg\r". */
    char path[1024];
    snprintf(path, sizeof path, "%s/inc.cfg", g_tmp);
    const char inc[] = "\xEF\xBB\xBF[data]\r\npath = x.h5\r\n";
    write_file(path, inc, sizeof inc - 1);
    snprintf(path, sizeof path, "%s/top.cfg", g_tmp);
    const char top[] = "\xEF\xBB\xBFinclude = inc.cfg\r\n[data]\r\nshuffle = no\r\n";
    write_file(path, top, sizeof top - 1);
    CHECK_OK(mpx_config_load(path, &cfg));
    if (cfg) {
        CHECK_OK(mpx_config_validate(cfg, k_schema, k_n));
        CHECK(strcmp(mpx_cfg_str(cfg, "data.path"), "x.h5") == 0, "included CRLF file");
        CHECK(mpx_cfg_bool(cfg, "data.shuffle") == 0, "CRLF file");
    }
    mpx_config_free(cfg);
}

/* Long lines, deep nesting, include bombs. */
static void test_limits(void) {
    mpx_config *cfg = NULL;
    /* A 1 MiB value parses (there is no line limit) and a huge key is clipped in messages. */
    size_t big = (size_t)1 << 20;
    char *text = malloc(big + 64);
    NEED(text, "malloc");
    strcpy(text, "[log]\nnote = ");
    size_t off = strlen(text);
    memset(text + off, 'x', big);
    strcpy(text + off + big, "\n");
    CHECK_OK(parse_validate(text, "long.cfg", &cfg));
    CHECK(cfg && strlen(mpx_cfg_str(cfg, "log.note")) == big, "1 MiB value kept whole");
    mpx_config_free(cfg);
    cfg = NULL;
    strcpy(text, "[log]\n");
    memset(text + 6, 'k', big);
    strcpy(text + 6 + big, " = 1\n");
    mpx_status s = parse_validate(text, "long.cfg", NULL);
    const char *m = mpx_error_message();
    CHECK(s == MPX_ERR_INPUT && strncmp(m, "long.cfg:2: [log] unknown key 'kkkk", 35) == 0 &&
              strstr(m, "...'") && strlen(m) < 200,
          "long key message: %.200s", m);
    free(text);

    /* At most 65536 distinct keys and sections: the header plus 65535 keys is the limit. */
    char *many_keys = malloc(65536 * 16);
    NEED(many_keys, "malloc");
    for (int extra = 0; extra < 2; extra++) {
        size_t at = (size_t)sprintf(many_keys, "[log]\n");
        for (int i = 0; i < 65535 + extra; i++)
            at += (size_t)sprintf(many_keys + at, "k%d = 1\n", i);
        mpx_status st = mpx_config_parse_string(many_keys, "many.cfg", NULL, &cfg);
        if (extra)
            EXPECT_MSG(st, MPX_ERR_INPUT,
                       "many.cfg:65537: more than 65536 distinct keys and sections");
        else
            CHECK(st == MPX_OK, "65536 entries: %s", mpx_error_message());
        mpx_config_free(cfg);
        cfg = NULL;
    }
    free(many_keys);

    /* 40 files, each including the next: 32 deep is fine, 33 is refused. */
    char path[1024], want[8192];
    for (int i = 0; i < 40; i++) {
        char body[64];
        if (i < 39)
            snprintf(body, sizeof body, "include = d%02d.cfg\n", i + 1);
        else
            snprintf(body, sizeof body, "[train]\nsteps = 9\n");
        snprintf(path, sizeof path, "%s/d%02d.cfg", g_tmp, i);
        write_file(path, body, strlen(body));
    }
    snprintf(path, sizeof path, "%s/d08.cfg", g_tmp);
    CHECK_OK(mpx_config_load(path, &cfg));
    CHECK(cfg && mpx_config_validate(cfg, k_schema, k_n) == MPX_OK &&
              mpx_cfg_int(cfg, "train.steps") == 9,
          "32 nested files");
    mpx_config_free(cfg);
    cfg = NULL;
    snprintf(path, sizeof path, "%s/d07.cfg", g_tmp);
    snprintf(want, sizeof want, "%s/d38.cfg:1: include '%s/d39.cfg' nested deeper than 32 files",
             g_tmp, g_tmp);
    EXPECT_MSG(mpx_config_load(path, &cfg), MPX_ERR_INPUT, want);

    /* An include bomb: 16 x 16 includes of a 70 kB file is 17.9 MB > the 16 MiB input cap. */
    size_t leaf = 70000;
    char *l2 = malloc(leaf + 32);
    NEED(l2, "malloc");
    strcpy(l2, "[log]\nnote = ");
    memset(l2 + strlen(l2), 'y', leaf);
    strcpy(l2 + 13 + leaf, "\n");
    snprintf(path, sizeof path, "%s/l2.cfg", g_tmp);
    write_file(path, l2, strlen(l2));
    free(l2);
    char many[512] = "";
    for (int i = 0; i < 16; i++) strcat(many, "include = l2.cfg\n");
    snprintf(path, sizeof path, "%s/l1.cfg", g_tmp);
    write_file(path, many, strlen(many));
    many[0] = '\0';
    for (int i = 0; i < 16; i++) strcat(many, "include = l1.cfg\n");
    snprintf(path, sizeof path, "%s/l0.cfg", g_tmp);
    write_file(path, many, strlen(many));
    s = mpx_config_load(path, &cfg);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(),
                                       "/l2.cfg': configuration larger than 16 MiB (all files and "
                                       "includes together)"),
          "include bomb: %s", mpx_error_message());
    snprintf(path, sizeof path, "%s/l1.cfg", g_tmp); /* 16 x 70 kB is fine */
    CHECK_OK(mpx_config_load(path, &cfg));
    mpx_config_free(cfg);
}

/* Deterministic generator for the mutation loop (splitmix64). */
static uint64_t g_rng = 0x5eed;
static uint64_t rnd(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Start and length of line `k` (0-based, clamped) in buf[0..n). */
static void line_span(const char *buf, size_t n, size_t k, size_t *start, size_t *len) {
    size_t s = 0;
    for (size_t i = 0; i < k; i++) {
        const char *nl = memchr(buf + s, '\n', n - s);
        if (!nl) break;
        s = (size_t)(nl - buf) + 1;
    }
    const char *nl = memchr(buf + s, '\n', n - s);
    *start = s;
    *len = nl ? (size_t)(nl - buf) + 1 - s : n - s;
}

/* One random edit of buf (n bytes, capacity cap); returns the new length. */
static size_t mutate(char *buf, size_t n, size_t cap) {
    static const char interesting[] = "[]=;#\n\r .\0\xEF/a_Z\t";
    static const char *const inserts[] = {"include = sub/base.cfg\n",
                                          "include = main.cfg\n",
                                          "include = loop/a.cfg\n",
                                          "include = missing.cfg\n",
                                          "include = sub\n",
                                          "include =\n",
                                          "[train]\n",
                                          "[precision]\n",
                                          "steps = 99999999999999999999\n",
                                          "\xEF\xBB\xBF",
                                          "\r\n",
                                          "lr = inf\n"};
    size_t start, len;
    switch (rnd_below(7)) {
    case 0: /* flip a byte */
        if (n) buf[rnd_below(n)] = (char)rnd();
        return n;
    case 1: /* insert an interesting byte */
        if (n + 1 > cap) return n;
        start = rnd_below(n + 1);
        memmove(buf + start + 1, buf + start, n - start);
        buf[start] = interesting[rnd_below(sizeof interesting - 1)];
        return n + 1;
    case 2: /* duplicate a line */
        line_span(buf, n, rnd_below(24), &start, &len);
        if (n + len > cap) return n;
        memmove(buf + start + len, buf + start, n - start);
        return n + len;
    case 3: /* delete a line */
        line_span(buf, n, rnd_below(24), &start, &len);
        memmove(buf + start, buf + start + len, n - start - len);
        return n - len;
    case 4: /* truncate */ return rnd_below(n + 1);
    case 5: { /* insert a whole troublesome line */
        const char *ins = inserts[rnd_below(sizeof inserts / sizeof inserts[0])];
        size_t k = strlen(ins);
        line_span(buf, n, rnd_below(24), &start, &len);
        if (n + k > cap) return n;
        memmove(buf + start + k, buf + start, n - start);
        memcpy(buf + start, ins, k);
        return n + k;
    }
    default: /* cut a line in the middle */
        line_span(buf, n, rnd_below(24), &start, &len);
        if (len < 2) return n;
        size_t cut = 1 + rnd_below(len - 1);
        memmove(buf + start + cut, buf + start + len, n - start - len);
        return n - (len - cut);
    }
}

static void test_random_mutations(void) {
    static const char base[] = "; a valid configuration, mutated below\n"
                               "include = sub/base.cfg\n"
                               "[model]\n"
                               "name = lstm\n"
                               "hidden = 256\n"
                               "dropout = 0.1\n"
                               "init = xavier\n"
                               "[data]\n"
                               "path = /data/ptb.h5  ; comment\n"
                               "shuffle = yes\n"
                               "[train]\n"
                               "steps = 2000\n"
                               "lr = 1e-3\n"
                               "batch = 20\n"
                               "seed = -7\n"
                               "[precision]\n"
                               "mode = fp16\n"
                               "scaling = adaptive\n"
                               "scale = 1024\n"
                               "master_weights = off\n"
                               "[log]\n"
                               "stats_every = 10\n"
                               "note = a;b\n";
    enum { ITERS = 2000, CAP = 4096 };
    char buf[CAP + 1], path[1200];
    snprintf(path, sizeof path, "%s/mutant.cfg", g_tmp);
    int n_parsed = 0, n_valid = 0, n_bad = 0, n_nul = 0;
    long failures_before = mpx_test_failures;
    for (int it = 0; it < ITERS && mpx_test_failures == failures_before; it++) {
        size_t n = sizeof base - 1;
        memcpy(buf, base, n);
        int edits = 1 + (int)rnd_below(4);
        for (int e = 0; e < edits; e++) n = mutate(buf, n, CAP);
        buf[n] = '\0';
        mpx_config *cfg = NULL;
        mpx_status s;
        if (memchr(buf, '\0', n)) { /* a NUL can only reach the parser through a file */
            write_file(path, buf, n);
            s = mpx_config_load(path, &cfg);
            n_nul++;
        } else {
            s = mpx_config_parse_string(buf, "mutant.cfg", g_dir, &cfg);
        }
        if (s == MPX_OK) {
            n_parsed++;
            s = mpx_config_validate(cfg, k_schema, k_n);
        }
        CHECK(s == MPX_OK || s == MPX_ERR_INPUT, "iteration %d: %s: %s\n%s", it, mpx_status_name(s),
              mpx_error_message(), buf);
        if (s != MPX_OK) {
            n_bad++;
            const char *m = mpx_error_message();
            CHECK(*m && !strchr(m, '\n') && !strchr(m, '\r'), "iteration %d: message '%s'", it, m);
        } else {
            n_valid++;
            char *text = mpx_config_resolved_text(cfg);
            mpx_config *back = NULL;
            CHECK_OK(mpx_config_parse_string(text ? text : "", "resolved", NULL, &back));
            if (back) {
                CHECK_OK(mpx_config_validate(back, k_schema, k_n));
                check_same_values(cfg, back, "mutant");
            }
            mpx_config_free(back);
            free(text);
        }
        mpx_config_free(cfg);
    }
    printf("mutations: %d parsed, %d validated, %d rejected, %d through files (NUL bytes)\n",
           n_parsed, n_valid, n_bad, n_nul);
    /* The loop must exercise both outcomes, or it tests nothing. */
    CHECK(n_valid > ITERS / 20 && n_bad > ITERS / 20 && n_nul > 0, "mutation mix too one-sided");
}

int main(void) {
    mpx_test_source_path("tests/unit/data/config", g_dir, sizeof g_dir);
    mpx_test_tmpdir("config", g_tmp, sizeof g_tmp);
    REQUIRE(g_tmp[0], "no scratch directory");
    test_defaults();
    test_load_includes();
    test_parse_errors();
    test_comments_and_values();
    test_validation();
    test_override_and_set();
    test_resolved_text();
    test_crlf_bom();
    test_limits();
    test_random_mutations();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (mpx_test_failures == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return mpx_test_done(__FILE__);
}
