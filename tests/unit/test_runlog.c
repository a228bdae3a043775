/* test_runlog.c — the HDF5 run file: schema, values, refusal to overwrite, export, resume.
 *
 * A run file with 3 layers, 10 training rows, 2 evaluation rows and 3 statistics steps built
 * from constructed values is read back through the HDF5 C API (the independent reference:
 * every dataset's shape, type, chunking and values, and the attributes), then exported, and
 * the TSV lines are compared with literal expected text. Values are exact (integers, dyadic
 * fractions), so comparisons are exact; a few are chosen to show the number formats
 * (0.1*3 in f64 prints 0.30000000000000004 with %.17g; 0.001f prints 0.00100000005 with %.9g).
 */
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/runlog.h"
#include "mpx/runtime.h"
#include "testutil.h"

enum { L = 3, T = 10, K = 3 };
static const int64_t g_stats_steps[K] = {4, 8, 10};

static const mpx_layer_info g_layers[L] = {
    {"conv1", "conv2d", 864, 27}, {"fc", "linear", 1290, 128}, {"loss", "softmax_ce", 0, 0}};

static mpx_runlog_meta make_meta(void) {
    mpx_runlog_meta m = {0};
    m.config = "[model]\nname = tiny\n[precision]\nmode = fp16\n";
    m.model = "tiny";
    m.dataset = "cifar10";
    m.precision = "fp16";
    m.scaling = "dynamic";
    m.device = "cpu";
    m.seed = 1234567890123LL; /* beyond 32 bits */
    m.threads = 2;
    m.eval_metric = "top1";
    m.n_layers = L;
    m.layers = g_layers;
    return m;
}

static mpx_train_row train_row(int i) { /* i = 1..T */
    mpx_train_row r = {0};
    r.step = i;
    r.loss = 2.5f - 0.125f * (float)i;
    r.lr = 0.0078125f * (float)i;
    r.loss_scale = i % 2 ? 65536.0 : 32768.0;
    r.skipped = i == 4;
    r.samples_per_s = 1000.25f + (float)i;
    r.wall_s = 0.1 * i;
    return r;
}

/* Statistics step k (0..K-1), layer l, tensor t (0 act, 1 weight): distinct counts, flushed =
 * nonzero / 4 (rate 0.25) except the loss layer's weight gradient, which is all zero. */
static void fill_cast(mpx_cast_stats *c, int k, int l, int t) {
    memset(c, 0, sizeof *c);
    int none = l == 2 && t == 1;
    c->nonzero = none ? 0 : (uint64_t)(400 * (k + 1) + 40 * l + 4 * t + 4);
    c->flushed = c->nonzero / 4;
    c->below_min = (uint64_t)(3000 + 100 * k + 10 * l + t);
    c->subnormal = (uint64_t)(4000 + 100 * k + 10 * l + t);
    c->overflow = (uint64_t)(5000 + 100 * k + 10 * l + t);
    c->nonfinite = (uint64_t)(6000 + 100 * k + 10 * l + t);
    uint64_t u = (uint64_t)((k + 1) * (l + 1));
    if (t == 0) { /* act: bin 2^-24 holds 3/4, zero 1/4 */
        c->hist[-24 - MPX_HIST_LOG2_LO] = 3 * u;
        c->hist[MPX_HIST_ZERO] = u;
    } else { /* weight: bins 2^-64 and 2^15 a quarter each, inf a half */
        c->hist[0] = u;
        c->hist[MPX_HIST_LOG2_HI - MPX_HIST_LOG2_LO] = u;
        c->hist[MPX_HIST_INF] = 2 * u;
    }
}

static void fill_stats(mpx_layer_stats *s, int k) {
    for (int l = 0; l < L; l++) {
        fill_cast(&s[l].act, k, l, 0);
        fill_cast(&s[l].wgrad, k, l, 1);
        s[l].scale = 1024.0 * (k + 1) * (l + 1);
        s[l].layer_scale = l == 1 ? 0.5 : 1.0;
        s[l].g_mean = 0.25f * (float)(k + 1);
        s[l].g_std = 0.5f + (float)l;
        s[l].g_min = -0.001f;
        s[l].g_max = 8.0f * (float)(l + 1);
        s[l].w_mean = -0.125f * (float)l;
        s[l].w_std = 0.0625f;
        s[l].w_min = -(float)(k + 1);
        s[l].w_max = (float)(k + 1);
    }
}

/* Write the standard run: train rows 1..10, stats at 4, 8, 10, eval at 5 and 10. */
static mpx_status write_run(const char *path, int force) {
    mpx_runlog_meta meta = make_meta();
    mpx_runlog *r = NULL;
    mpx_layer_stats st[L];
    MPX_TRY(mpx_runlog_create(path, &meta, force, &r));
    int k = 0;
    for (int i = 1; i <= T; i++) {
        mpx_train_row row = train_row(i);
        CHECK_OK(mpx_runlog_train(r, &row));
        if (k < K && g_stats_steps[k] == i) {
            fill_stats(st, k++);
            CHECK_OK(mpx_runlog_stats(r, i, st));
        }
        if (i == 5) CHECK_OK(mpx_runlog_eval(r, 5, 1.75f, 0.625f));
        if (i == 10) CHECK_OK(mpx_runlog_eval(r, 10, 1.5f, 0.71875f));
    }
    return mpx_runlog_close(r);
}

/* ---- reading back through the HDF5 C API ---- */

/* Check a dataset's type (class, size, signedness for integers; -1 = not an integer) and shape;
 * `series`: chunked and unlimited along axis 0 (other axes fixed). Returns 1 when all hold. */
static int check_dset(hid_t f, const char *path, H5T_class_t cls, size_t size, int is_signed,
                      int rank, const hsize_t *dims, int series) {
    long before = mpx_test_failures;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    CHECK(d >= 0, "%s missing", path);
    if (d < 0) return 0;
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    CHECK(H5Tget_class(t) == cls, "%s: type class %d, want %d", path, (int)H5Tget_class(t),
          (int)cls);
    if (cls == H5T_STRING) {
        CHECK(H5Tis_variable_str(t) > 0, "%s: not a variable-length string", path);
        CHECK(H5Tget_cset(t) == H5T_CSET_UTF8, "%s: not UTF-8", path);
    } else {
        CHECK(H5Tget_size(t) == size, "%s: size %zu, want %zu", path, H5Tget_size(t), size);
        CHECK(H5Tget_order(t) == H5T_ORDER_LE, "%s: not little-endian", path);
    }
    if (is_signed >= 0) CHECK((H5Tget_sign(t) == H5T_SGN_2) == is_signed, "%s: signedness", path);
    hsize_t got[3] = {0}, maxd[3] = {0};
    int r = H5Sget_simple_extent_ndims(sp);
    CHECK(r == rank, "%s: rank %d, want %d", path, r, rank);
    if (r == rank) {
        H5Sget_simple_extent_dims(sp, got, maxd);
        for (int i = 0; i < rank; i++)
            CHECK(got[i] == dims[i], "%s: dim %d is %llu, want %llu", path, i,
                  (unsigned long long)got[i], (unsigned long long)dims[i]);
        if (series) {
            CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED, "%s: not chunked", path);
            CHECK(maxd[0] == H5S_UNLIMITED, "%s: axis 0 not unlimited", path);
            for (int i = 1; i < rank; i++) CHECK(maxd[i] == dims[i], "%s: axis %d grows", path, i);
        }
    }
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(t);
    H5Dclose(d);
    return mpx_test_failures == before;
}

static void read_all(hid_t f, const char *path, hid_t mem, void *buf) {
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    CHECK(d >= 0 && H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "reading %s", path);
    if (d >= 0) H5Dclose(d);
}

static void check_str_attr(hid_t obj, const char *name, const char *want) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    CHECK(a >= 0, "attribute %s missing", name);
    if (a < 0) return;
    hid_t ft = H5Aget_type(a), mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5T_CSET_UTF8); /* HDF5 does not convert ASCII <-> UTF-8 */
    char *v = NULL;
    CHECK(H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) > 0,
          "attribute %s: not a variable-length string", name);
    CHECK(H5Aread(a, mt, &v) >= 0, "attribute %s unreadable", name);
    if (want)
        CHECK(v && strcmp(v, want) == 0, "attribute %s = '%s', want '%s'", name, v ? v : "", want);
    if (!want) /* created_utc: 2026-11-30T04:17:12Z */
        CHECK(v && strlen(v) == 20 && v[4] == '-' && v[10] == 'T' && v[13] == ':' && v[19] == 'Z',
              "attribute %s = '%s' is not ISO-8601 UTC", name, v ? v : "");
    H5free_memory(v);
    H5Tclose(mt);
    H5Tclose(ft);
    H5Aclose(a);
}

static void check_int_attr(hid_t obj, const char *name, size_t size, long long want) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    CHECK(a >= 0, "attribute %s missing", name);
    if (a < 0) return;
    hid_t ft = H5Aget_type(a);
    long long v = 0;
    CHECK(H5Tget_class(ft) == H5T_INTEGER && H5Tget_size(ft) == size,
          "attribute %s: not a %zu-byte integer", name, size);
    CHECK(H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0 && v == want, "attribute %s = %lld, want %lld",
          name, v, want);
    H5Tclose(ft);
    H5Aclose(a);
}

/* Rows (length of axis 0) of a series member in the file. */
static hsize_t series_rows(hid_t f, const char *path) {
    hsize_t dims[3] = {0};
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    if (d < 0) return (hsize_t)-1;
    hid_t sp = H5Dget_space(d);
    if (H5Sget_simple_extent_ndims(sp) <= 3) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    return dims[0];
}

static void check_contents(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE_VOID(f >= 0, "cannot open %s", path);

    /* Superblock version 0: no "open for writing" flag, the basis of the crash safety. */
    H5F_info2_t info;
    CHECK(H5Fget_info2(f, &info) >= 0 && info.super.version == 0, "superblock version %u, want 0",
          info.super.version);

    check_str_attr(f, "mpx_version", mpx_version());
    check_str_attr(f, "git_commit", mpx_git_commit());
    check_str_attr(f, "created_utc", NULL);
    check_str_attr(f, "config", "[model]\nname = tiny\n[precision]\nmode = fp16\n");
    check_str_attr(f, "model", "tiny");
    check_str_attr(f, "dataset", "cifar10");
    check_str_attr(f, "precision", "fp16");
    check_str_attr(f, "scaling", "dynamic");
    check_str_attr(f, "device", "cpu");
    check_int_attr(f, "seed", 8, 1234567890123LL);
    check_int_attr(f, "threads", 4, 2);

    /* /train */
    hsize_t t1[1] = {T};
    check_dset(f, "/train/step", H5T_INTEGER, 8, 1, 1, t1, 1);
    check_dset(f, "/train/loss", H5T_FLOAT, 4, -1, 1, t1, 1);
    check_dset(f, "/train/lr", H5T_FLOAT, 4, -1, 1, t1, 1);
    check_dset(f, "/train/loss_scale", H5T_FLOAT, 8, -1, 1, t1, 1);
    check_dset(f, "/train/skipped", H5T_INTEGER, 1, 0, 1, t1, 1);
    check_dset(f, "/train/samples_per_s", H5T_FLOAT, 4, -1, 1, t1, 1);
    check_dset(f, "/train/wall_s", H5T_FLOAT, 8, -1, 1, t1, 1);
    int64_t step[T];
    float loss[T], lr[T], sps[T];
    double ls[T], wall[T];
    uint8_t skipped[T];
    read_all(f, "/train/step", H5T_NATIVE_INT64, step);
    read_all(f, "/train/loss", H5T_NATIVE_FLOAT, loss);
    read_all(f, "/train/lr", H5T_NATIVE_FLOAT, lr);
    read_all(f, "/train/loss_scale", H5T_NATIVE_DOUBLE, ls);
    read_all(f, "/train/skipped", H5T_NATIVE_UINT8, skipped);
    read_all(f, "/train/samples_per_s", H5T_NATIVE_FLOAT, sps);
    read_all(f, "/train/wall_s", H5T_NATIVE_DOUBLE, wall);
    for (int i = 0; i < T; i++) {
        mpx_train_row w = train_row(i + 1);
        CHECK(step[i] == w.step && loss[i] == w.loss && lr[i] == w.lr && ls[i] == w.loss_scale &&
                  skipped[i] == w.skipped && sps[i] == w.samples_per_s && wall[i] == w.wall_s,
              "/train row %d differs", i);
    }

    /* /eval */
    hsize_t e1[1] = {2};
    check_dset(f, "/eval/step", H5T_INTEGER, 8, 1, 1, e1, 1);
    check_dset(f, "/eval/loss", H5T_FLOAT, 4, -1, 1, e1, 1);
    check_dset(f, "/eval/metric", H5T_FLOAT, 4, -1, 1, e1, 1);
    int64_t es[2];
    float el[2], em[2];
    read_all(f, "/eval/step", H5T_NATIVE_INT64, es);
    read_all(f, "/eval/loss", H5T_NATIVE_FLOAT, el);
    read_all(f, "/eval/metric", H5T_NATIVE_FLOAT, em);
    CHECK(es[0] == 5 && es[1] == 10 && el[0] == 1.75f && el[1] == 1.5f && em[0] == 0.625f &&
              em[1] == 0.71875f,
          "/eval values differ");
    hid_t d = H5Dopen2(f, "/eval/metric", H5P_DEFAULT);
    check_str_attr(d, "metric", "top1");
    H5Dclose(d);

    /* /layers */
    hsize_t l1[1] = {L};
    check_dset(f, "/layers/name", H5T_STRING, 0, -1, 1, l1, 0);
    check_dset(f, "/layers/kind", H5T_STRING, 0, -1, 1, l1, 0);
    check_dset(f, "/layers/params", H5T_INTEGER, 8, 1, 1, l1, 0);
    check_dset(f, "/layers/fan_in", H5T_INTEGER, 8, 1, 1, l1, 0);
    char *names[L] = {0}, *kinds[L] = {0};
    int64_t params[L], fan_in[L];
    hid_t vs = H5Tcopy(H5T_C_S1);
    H5Tset_size(vs, H5T_VARIABLE);
    H5Tset_cset(vs, H5T_CSET_UTF8);
    read_all(f, "/layers/name", vs, names);
    read_all(f, "/layers/kind", vs, kinds);
    read_all(f, "/layers/params", H5T_NATIVE_INT64, params);
    read_all(f, "/layers/fan_in", H5T_NATIVE_INT64, fan_in);
    for (int l = 0; l < L; l++) {
        CHECK(names[l] && kinds[l] && strcmp(names[l], g_layers[l].name) == 0 &&
                  strcmp(kinds[l], g_layers[l].kind) == 0 && params[l] == g_layers[l].params &&
                  fan_in[l] == g_layers[l].fan_in,
              "/layers row %d differs", l);
        H5free_memory(names[l]);
        H5free_memory(kinds[l]);
    }
    H5Tclose(vs);

    /* /stats */
    hsize_t k1[1] = {K}, k2[2] = {K, L}, k3[3] = {K, L, MPX_HIST_BINS};
    check_dset(f, "/stats/step", H5T_INTEGER, 8, 1, 1, k1, 1);
    int64_t ss[K];
    read_all(f, "/stats/step", H5T_NATIVE_INT64, ss);
    for (int k = 0; k < K; k++)
        CHECK(ss[k] == g_stats_steps[k], "/stats/step[%d] = %lld", k, (long long)ss[k]);

    mpx_layer_stats want[K][L];
    for (int k = 0; k < K; k++) fill_stats(want[k], k);
    static const char *const tensors[2] = {"act_grad", "weight_grad"};
    static const char *const counts[6] = {"nonzero",   "flushed",  "below_min",
                                          "subnormal", "overflow", "nonfinite"};
    for (int t = 0; t < 2; t++) {
        char p[64];
        snprintf(p, sizeof p, "/stats/%s_hist", tensors[t]);
        check_dset(f, p, H5T_INTEGER, 8, 0, 3, k3, 1);
        static uint64_t h[K][L][MPX_HIST_BINS];
        read_all(f, p, H5T_NATIVE_UINT64, h);
        for (int k = 0; k < K; k++)
            for (int l = 0; l < L; l++) {
                const mpx_cast_stats *c = t ? &want[k][l].wgrad : &want[k][l].act;
                CHECK(memcmp(h[k][l], c->hist, sizeof c->hist) == 0, "%s[%d,%d] differs", p, k, l);
            }
        hid_t hd = H5Dopen2(f, p, H5P_DEFAULT);
        check_int_attr(hd, "bin_log2_lo", 4, -64);
        check_int_attr(hd, "bin_log2_hi", 4, 15);
        check_str_attr(hd, "extra_bins", "zero,inf,nan");
        hid_t dcpl = H5Dget_create_plist(hd);
        hsize_t chunk[3] = {0};
        CHECK(H5Pget_chunk(dcpl, 3, chunk) == 3 && chunk[0] == 1 && chunk[1] == L &&
                  chunk[2] == MPX_HIST_BINS,
              "%s: chunk %llu x %llu x %llu, want one step", p, (unsigned long long)chunk[0],
              (unsigned long long)chunk[1], (unsigned long long)chunk[2]);
        H5Pclose(dcpl);
        H5Dclose(hd);
        for (int j = 0; j < 6; j++) {
            snprintf(p, sizeof p, "/stats/%s_%s", tensors[t], counts[j]);
            check_dset(f, p, H5T_INTEGER, 8, 0, 2, k2, 1);
            uint64_t v[K][L];
            read_all(f, p, H5T_NATIVE_UINT64, v);
            for (int k = 0; k < K; k++)
                for (int l = 0; l < L; l++) {
                    const mpx_cast_stats *c = t ? &want[k][l].wgrad : &want[k][l].act;
                    const uint64_t w[6] = {c->nonzero,   c->flushed,  c->below_min,
                                           c->subnormal, c->overflow, c->nonfinite};
                    CHECK(v[k][l] == w[j], "%s[%d,%d] = %llu, want %llu", p, k, l,
                          (unsigned long long)v[k][l], (unsigned long long)w[j]);
                }
        }
    }
    double sc[K][L], lsc[K][L];
    check_dset(f, "/stats/scale", H5T_FLOAT, 8, -1, 2, k2, 1);
    check_dset(f, "/stats/layer_scale", H5T_FLOAT, 8, -1, 2, k2, 1);
    read_all(f, "/stats/scale", H5T_NATIVE_DOUBLE, sc);
    read_all(f, "/stats/layer_scale", H5T_NATIVE_DOUBLE, lsc);
    static const char *const moments[8] = {"g_mean", "g_std", "g_min", "g_max",
                                           "w_mean", "w_std", "w_min", "w_max"};
    float mo[8][K][L];
    for (int m = 0; m < 8; m++) {
        char p[64];
        snprintf(p, sizeof p, "/stats/%s", moments[m]);
        check_dset(f, p, H5T_FLOAT, 4, -1, 2, k2, 1);
        read_all(f, p, H5T_NATIVE_FLOAT, mo[m]);
    }
    for (int k = 0; k < K; k++)
        for (int l = 0; l < L; l++) {
            const mpx_layer_stats *w = &want[k][l];
            const float wm[8] = {w->g_mean, w->g_std, w->g_min, w->g_max,
                                 w->w_mean, w->w_std, w->w_min, w->w_max};
            CHECK(sc[k][l] == w->scale && lsc[k][l] == w->layer_scale, "scale[%d,%d] differs", k,
                  l);
            for (int m = 0; m < 8; m++)
                CHECK(mo[m][k][l] == wm[m], "%s[%d,%d] = %g, want %g", moments[m], k, l,
                      (double)mo[m][k][l], (double)wm[m]);
        }

    /* Only histograms are compressed (shuffle + deflate); train is chunked by 1024 rows. */
    hid_t td = H5Dopen2(f, "/train/loss", H5P_DEFAULT), tp = H5Dget_create_plist(td);
    hsize_t tchunk = 0;
    CHECK(H5Pget_chunk(tp, 1, &tchunk) == 1 && tchunk == 1024, "/train chunk %llu",
          (unsigned long long)tchunk);
    CHECK(H5Pget_nfilters(tp) == 0, "/train/loss is filtered");
    H5Pclose(tp);
    H5Dclose(td);
    H5Fclose(f);
}

/* ---- export ---- */

/* Run an export into a temporary file; returns its text (malloc'ed) or NULL on error. */
static char *export_text(const char *path, const char *what, const char *layer, int64_t step,
                         int pooled, mpx_status *st) {
    FILE *tf = tmpfile();
    if (!tf) return NULL;
    mpx_export_opts o = {layer, step, pooled};
    *st = mpx_runlog_export(path, what, &o, tf);
    long n = ftell(tf);
    char *s = calloc((size_t)n + 1, 1);
    rewind(tf);
    if (s && fread(s, 1, (size_t)n, tf) != (size_t)n) s[0] = '\0';
    fclose(tf);
    return s;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* `line` (without newline) is a whole line of s. */
static int has_line(const char *s, const char *line) {
    size_t n = strlen(line);
    for (const char *p = s; (p = strstr(p, line)); p++)
        if ((p == s || p[-1] == '\n') && p[n] == '\n') return 1;
    return 0;
}

static void check_export(const char *path, const char *what, const char *layer, int64_t step,
                         int pooled, int lines, const char *const *want, int n_want) {
    mpx_status st;
    char *s = export_text(path, what, layer, step, pooled, &st);
    CHECK(st == MPX_OK, "export %s: %s", what, mpx_error_message());
    CHECK(s && count_lines(s) == lines,
          "export %s (layer %s, step %lld, pooled %d): %d lines, "
          "want %d",
          what, layer ? layer : "-", (long long)step, pooled, s ? count_lines(s) : -1, lines);
    for (int i = 0; s && i < n_want; i++)
        CHECK(has_line(s, want[i]), "export %s: no line '%s'", what, want[i]);
    free(s);
}

/* An export that must fail with MPX_ERR_INPUT and a message containing each of `words`. */
static void check_export_error(const char *path, const char *what, const char *layer, int64_t step,
                               int pooled, const char *w1, const char *w2) {
    mpx_status st;
    char *s = export_text(path, what, layer, step, pooled, &st);
    const char *m = mpx_error_message();
    CHECK(st == MPX_ERR_INPUT, "export %s (layer %s, step %lld): %s, want bad input", what,
          layer ? layer : "-", (long long)step, mpx_status_name(st));
    CHECK(strstr(m, w1) && (!w2 || strstr(m, w2)), "message '%s' lacks '%s' / '%s'", m, w1,
          w2 ? w2 : "");
    free(s);
}

static void check_exports(const char *path) {
    const char *train[] = {"step\tloss\tlr\tloss_scale\tskipped\tsamples_per_s\twall_s",
                           "3\t2.125\t0.0234375\t65536\t0\t1003.25\t0.30000000000000004",
                           "4\t2\t0.03125\t32768\t1\t1004.25\t0.40000000000000002"};
    check_export(path, "train", NULL, -1, 0, 1 + T, train, 3);
    const char *eval[] = {"step\tloss\tmetric", "5\t1.75\t0.625", "10\t1.5\t0.71875"};
    check_export(path, "eval", NULL, -1, 0, 3, eval, 3);
    const char *layers[] = {"index\tname\tkind\tparams\tfan_in", "0\tconv1\tconv2d\t864\t27",
                            "1\tfc\tlinear\t1290\t128", "2\tloss\tsoftmax_ce\t0\t0"};
    check_export(path, "layers", NULL, -1, 0, 1 + L, layers, 4);
    check_export(path, "layers", "fc", -1, 0, 2, layers + 2, 1);

    const char *uf[] = {
        "step\tlayer\tname\tkind\tact_nonzero\tact_flushed\tact_below_min\tact_subnormal\t"
        "act_overflow\tact_nonfinite\tact_underflow_rate\tweight_nonzero\tweight_flushed\t"
        "weight_below_min\tweight_subnormal\tweight_overflow\tweight_nonfinite\t"
        "weight_underflow_rate",
        "8\t1\tfc\tlinear\t844\t211\t3110\t4110\t5110\t6110\t0."
        "25\t848\t212\t3111\t4111\t5111\t6111\t0.25",
        "10\t2\tloss\tsoftmax_ce\t1284\t321\t3220\t4220\t5220\t6220\t0."
        "25\t0\t0\t3221\t4221\t5221\t6221\t0"};
    check_export(path, "underflow", NULL, -1, 0, 1 + K * L, uf, 3);
    check_export(path, "underflow", "fc", -1, 0, 1 + K, uf, 2);
    check_export(path, "underflow", NULL, 8, 0, 1 + L, uf, 2);
    check_export(path, "underflow", "fc", 8, 0, 2, uf, 2);

    const char *scale[] = {
        "step\tlayer\tname\tscale\tlayer_scale\tg_mean\tg_std\tg_min\tg_max\t"
        "w_mean\tw_std\tw_min\tw_max",
        "10\t1\tfc\t6144\t0.5\t0.75\t1.5\t-0.00100000005\t16\t-0.125\t0.0625\t-3\t3"};
    check_export(path, "scale", NULL, -1, 0, 1 + K * L, scale, 2);
    check_export(path, "scale", "fc", 10, 0, 2, scale, 2);

    const char *hist[] = {
        "step\tlayer\tname\ttensor\tbin\tcount\tpct", "4\t0\tconv1\tact_grad\t-24\t3\t75",
        "4\t0\tconv1\tact_grad\tzero\t1\t25",         "4\t0\tconv1\tact_grad\t-23\t0\t0",
        "10\t2\tloss\tweight_grad\tinf\t18\t50",      "10\t2\tloss\tweight_grad\t-64\t9\t25",
        "10\t2\tloss\tweight_grad\t15\t9\t25",        "8\t1\tfc\tweight_grad\tnan\t0\t0"};
    check_export(path, "hist", NULL, -1, 0, 1 + K * L * 2 * MPX_HIST_BINS, hist, 8);
    /* Pooled over all layers at step 4: act bin -24 holds 3 (1 + 2 + 3), zero 1 + 2 + 3. */
    const char *pooled[] = {
        "step\tlayer\tname\ttensor\tbin\tcount\tpct", "4\tall\tall\tact_grad\t-24\t18\t75",
        "4\tall\tall\tact_grad\tzero\t6\t25", "4\tall\tall\tweight_grad\tinf\t12\t50"};
    check_export(path, "hist", NULL, 4, 1, 1 + 2 * MPX_HIST_BINS, pooled, 4);
    const char *pooled_fc[] = {"8\tall\tall\tact_grad\t-24\t12\t75"};
    check_export(path, "hist", "fc", -1, 1, 1 + K * 2 * MPX_HIST_BINS, pooled_fc, 1);

    check_export_error(path, "hist", "nope", -1, 0, "'nope'", "conv1, fc, loss");
    check_export_error(path, "scale", NULL, 6, 0, "step 6", "4 and 8");
    check_export_error(path, "underflow", NULL, 99, 0, "step 99", "nearest: 10");
    check_export_error(path, "underflow", NULL, 0, 0, "step 0", "nearest: 4");
    check_export_error(path, "train", NULL, 4, 0, "--step", NULL);
    check_export_error(path, "eval", "fc", -1, 0, "--layer", NULL);
    check_export_error(path, "scale", NULL, -1, 1, "pool", NULL);
    check_export_error(path, "histogram", NULL, -1, 0, "unknown export 'histogram'", NULL);

    char *v = NULL;
    CHECK_OK(mpx_runlog_read_attr(path, "model", &v));
    CHECK(v && strcmp(v, "tiny") == 0, "model attribute '%s'", v ? v : "");
    free(v);
    CHECK_OK(mpx_runlog_read_attr(path, "seed", &v));
    CHECK(v && strcmp(v, "1234567890123") == 0, "seed attribute '%s'", v ? v : "");
    free(v);
    CHECK(mpx_runlog_read_attr(path, "stopped", &v) == MPX_ERR_INPUT && !v &&
              strstr(mpx_error_message(), "'stopped'"),
          "a missing attribute: %s", mpx_error_message());
}

/* ---- resume ---- */

/* Resume at step 10 of the standard run: /train and /stats keep steps < 10, /eval keeps the
 * evaluation at 10 (made after 10 steps, before a checkpoint at 10 would be written). */
static void check_reopen(const char *path) {
    mpx_runlog_meta meta = make_meta();
    mpx_runlog *r = NULL;
    CHECK_OK(mpx_runlog_reopen(path, &meta, 10, &r));
    if (!r) return;
    CHECK(mpx_runlog_resumed_wall_s(r) == train_row(9).wall_s,
          "the resumed clock starts at %g, want the kept row 9's %g", mpx_runlog_resumed_wall_s(r),
          train_row(9).wall_s);
    for (int i = 10; i <= 12; i++) {
        mpx_train_row row = train_row(i);
        row.loss = 9.0f; /* marks the resumed rows */
        CHECK_OK(mpx_runlog_train(r, &row));
    }
    mpx_layer_stats st[L];
    fill_stats(st, 2);
    CHECK_OK(mpx_runlog_stats(r, 12, st));
    CHECK_OK(mpx_runlog_eval(r, 12, 1.25f, 0.75f));
    CHECK_OK(mpx_runlog_mark_stopped(r, "diverged at step 12"));
    CHECK_OK(mpx_runlog_close(r));

    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE_VOID(f >= 0, "cannot open %s after resume", path);
    int64_t step[12] = {0}, ss[3] = {0}, es[3] = {0};
    float loss[12] = {0};
    CHECK(series_rows(f, "/train/step") == 12 && series_rows(f, "/train/wall_s") == 12,
          "resumed /train has %llu rows, want 12",
          (unsigned long long)series_rows(f, "/train/step"));
    read_all(f, "/train/step", H5T_NATIVE_INT64, step);
    read_all(f, "/train/loss", H5T_NATIVE_FLOAT, loss);
    for (int i = 0; i < 12; i++)
        CHECK(step[i] == i + 1 && loss[i] == (i < 9 ? train_row(i + 1).loss : 9.0f),
              "resumed /train row %d: step %lld loss %g", i, (long long)step[i], (double)loss[i]);
    hsize_t k2[2] = {3, L}, k3[3] = {3, L, MPX_HIST_BINS};
    CHECK(series_rows(f, "/stats/step") == 3, "resumed /stats has %llu rows",
          (unsigned long long)series_rows(f, "/stats/step"));
    check_dset(f, "/stats/weight_grad_hist", H5T_INTEGER, 8, 0, 3, k3, 1);
    check_dset(f, "/stats/g_max", H5T_FLOAT, 4, -1, 2, k2, 1);
    read_all(f, "/stats/step", H5T_NATIVE_INT64, ss);
    CHECK(ss[0] == 4 && ss[1] == 8 && ss[2] == 12, "resumed /stats/step %lld %lld %lld",
          (long long)ss[0], (long long)ss[1], (long long)ss[2]);
    CHECK(series_rows(f, "/eval/step") == 3 && series_rows(f, "/eval/metric") == 3,
          "resumed /eval has %llu rows, want 3", (unsigned long long)series_rows(f, "/eval/step"));
    read_all(f, "/eval/step", H5T_NATIVE_INT64, es);
    CHECK(es[0] == 5 && es[1] == 10 && es[2] == 12, "resumed /eval/step %lld %lld %lld",
          (long long)es[0], (long long)es[1], (long long)es[2]);
    check_str_attr(f, "stopped", "diverged at step 12");
    H5Fclose(f);

    /* Resuming again clears the stop reason; resuming at step 0 drops every row. */
    CHECK_OK(mpx_runlog_reopen(path, &meta, 0, &r));
    CHECK(mpx_runlog_resumed_wall_s(r) == 0, "no row kept, yet the clock resumes at %g",
          mpx_runlog_resumed_wall_s(r));
    CHECK_OK(mpx_runlog_close(r));
    char *v = NULL;
    CHECK(mpx_runlog_read_attr(path, "stopped", &v) == MPX_ERR_INPUT,
          "'stopped' survived a resume");
    free(v);
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(series_rows(f, "/train/step") == 0 && series_rows(f, "/stats/step") == 0 &&
              series_rows(f, "/stats/act_grad_hist") == 0 && series_rows(f, "/eval/loss") == 0,
          "resuming at step 0 left rows");
    H5Fclose(f);

    /* A different layer table is refused. */
    mpx_layer_info other[L] = {g_layers[0], {"fc2", "linear", 1290, 128}, g_layers[2]};
    meta.layers = other;
    CHECK(mpx_runlog_reopen(path, &meta, 100, &r) == MPX_ERR_INPUT && !r &&
              strstr(mpx_error_message(), "'fc2'"),
          "a renamed layer: %s", mpx_error_message());
    meta.n_layers = 2;
    CHECK(mpx_runlog_reopen(path, &meta, 100, &r) == MPX_ERR_INPUT && !r,
          "a shorter layer table: %s", mpx_error_message());
}

/* ---- files that are not ours ---- */

static void check_foreign(const char *dir) {
    char text[1100], foreign[1100], missing[1100], broken[1100];
    snprintf(text, sizeof text, "%s/notes.h5", dir);
    snprintf(foreign, sizeof foreign, "%s/foreign.h5", dir);
    snprintf(missing, sizeof missing, "%s/missing.h5", dir);
    snprintf(broken, sizeof broken, "%s/broken.h5", dir);
    FILE *t = fopen(text, "w");
    REQUIRE_VOID(t, "cannot write %s", text);
    fputs("this is not HDF5\n", t);
    fclose(t);
    hid_t f = H5Fcreate(foreign, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t one = 1;
    hid_t sp = H5Screate_simple(1, &one, NULL);
    hid_t g = H5Gcreate2(f, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(
        H5Dcreate2(f, "/train/step", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Gclose(g);
    H5Sclose(sp);
    H5Fclose(f);

    const char *paths[3] = {text, foreign, missing};
    const char *why[3] = {"not an HDF5 file", "not an mpx run file", "does not exist"};
    mpx_runlog_meta meta = make_meta();
    for (int i = 0; i < 3; i++) {
        mpx_status st = MPX_OK;
        char *s = export_text(paths[i], "train", NULL, -1, 0, &st);
        CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), paths[i]) &&
                  strstr(mpx_error_message(), why[i]),
              "export of %s: %s: %s", paths[i], mpx_status_name(st), mpx_error_message());
        free(s);
        mpx_runlog *r = NULL;
        CHECK(mpx_runlog_reopen(paths[i], &meta, 0, &r) == MPX_ERR_INPUT && !r &&
                  strstr(mpx_error_message(), paths[i]),
              "reopen of %s: %s", paths[i], mpx_error_message());
        char *v = NULL;
        CHECK(mpx_runlog_read_attr(paths[i], "model", &v) == MPX_ERR_INPUT && !v,
              "read_attr of %s: %s", paths[i], mpx_error_message());
    }

    /* A run file missing one dataset: the error names it. */
    CHECK_OK(write_run(broken, 0));
    f = H5Fopen(broken, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Ldelete(f, "/stats/g_std", H5P_DEFAULT) >= 0, "cannot delete /stats/g_std");
    H5Fclose(f);
    check_export_error(broken, "scale", NULL, -1, 0, "/stats/g_std", broken);
    check_export(broken, "train", NULL, -1, 0, 1 + T, NULL, 0);
}

int main(void) {
    char dir[1024], path[1100];
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the test provokes HDF5 errors on purpose */
    mpx_test_tmpdir("runlog", dir, sizeof dir);
    REQUIRE(dir[0], "no temporary directory");
    snprintf(path, sizeof path, "%s/run.h5", dir);

    CHECK_OK(write_run(path, 0));
    check_contents(path);

    /* Never overwrite without force; the file is untouched. */
    mpx_status st = write_run(path, 0);
    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), path) &&
              strstr(mpx_error_message(), "exists; pass --force to overwrite"),
          "overwrite without force: %s: %s", mpx_status_name(st), mpx_error_message());
    check_contents(path);
    check_exports(path);

    /* With force the file is made afresh (same contents, one created_utc later or equal). */
    CHECK_OK(write_run(path, 1));
    check_contents(path);

    check_reopen(path);
    check_foreign(dir);

    /* A missing directory is an I/O error naming the file. */
    snprintf(path, sizeof path, "%s/no/such/dir/run.h5", dir);
    mpx_runlog_meta meta = make_meta();
    mpx_runlog *r = NULL;
    st = mpx_runlog_create(path, &meta, 0, &r);
    CHECK(st == MPX_ERR_IO && !r && strstr(mpx_error_message(), path),
          "create in a missing "
          "directory: %s: %s",
          mpx_status_name(st), mpx_error_message());

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return mpx_test_done(__FILE__);
}
