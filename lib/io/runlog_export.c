/* runlog_export.c — reading a run file: TSV export for gnuplot/awk/pandas (`mpx export`) and
 * root attributes. The columns of each export are listed in runlog.h.
 *
 * Numbers: f32 values with %.9g and f64 values with %.17g (both read back exactly), integers
 * as integers, derived ratios (underflow rates, histogram percentages) with %.9g. Row counts
 * come from each series' step column (see runlog_schema.h). Statistics are read one step at
 * a time, so memory stays at one row of each dataset however long the run.
 *
 * The file is opened read-only without taking HDF5's file lock, so a run can be exported
 * while it is being written: the writer touches the file only inside its flushes.
 */
#include "mpx/runlog.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "h5util.h"
#include "runlog_schema.h"

typedef struct {
    char *where; /* "run file 'PATH'" */
    hid_t file;
    int64_t n_layers;
    char **names, **kinds;
    hid_t stats[RL_N_STATS]; /* opened by open_stats */
    int64_t n_steps;
    int64_t *steps; /* /stats/step */
} reader;

static void reader_close(reader *rd) {
    for (int i = 0; i < RL_N_STATS; i++) mpx_h5_close(rd->stats[i]);
    mpx_h5_close(rd->file);
    mpx_h5_free_strings(rd->names, rd->n_layers);
    mpx_h5_free_strings(rd->kinds, rd->n_layers);
    free(rd->steps);
    free(rd->where);
}

/* Open `path` read-only and check it is one of ours. */
static mpx_status reader_open(const char *path, reader *rd) {
    mpx_status st = MPX_OK;
    hid_t fapl = -1;
    htri_t ours;
    struct stat sb;
    memset(rd, 0, sizeof *rd);
    rd->file = -1;
    for (int i = 0; i < RL_N_STATS; i++) rd->stats[i] = -1;
    size_t wlen = strlen(path) + 16;
    if (!(rd->where = malloc(wlen)))
        return mpx_fail(MPX_ERR_NOMEM, "out of memory opening '%s'", path);
    snprintf(rd->where, wlen, "run file '%s'", path);
    if (stat(path, &sb) != 0) return mpx_fail(MPX_ERR_INPUT, "%s does not exist", rd->where);
    mpx_h5_quiet();
    H5_TRY(fapl = H5Pcreate(H5P_FILE_ACCESS), MPX_ERR_IO, "%s: file access properties", rd->where);
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
    H5_TRY(H5Pset_file_locking(fapl, 0, 1), MPX_ERR_IO, "%s: file access properties", rd->where);
#endif
    H5_TRY(rd->file = H5Fopen(path, H5F_ACC_RDONLY, fapl), MPX_ERR_INPUT,
           "%s is not an HDF5 file (or cannot be read)", rd->where);
    H5_TRY(ours = H5Aexists(rd->file, "mpx_version"), MPX_ERR_IO, "%s: root attributes", rd->where);
    if (!ours)
        st = mpx_fail(MPX_ERR_INPUT, "%s is not an mpx run file (no attribute mpx_version)",
                      rd->where);
fail:
    mpx_h5_close(fapl);
    return st;
}

/* ---- reading datasets ---- */

/* Open `d`, check its rank and trailing dimensions ([., L(, 83)]); *rows = its length. */
static mpx_status open_member(reader *rd, const rl_dset *d, hid_t *out, int64_t *rows) {
    mpx_status st = MPX_OK;
    hid_t sp = -1;
    hsize_t dims[3] = {0, 0, 0};
    htri_t exists;
    *out = -1;
    H5_TRY(exists = H5Lexists(rd->file, d->path, H5P_DEFAULT), MPX_ERR_INPUT,
           "%s has no dataset %s", rd->where, d->path);
    if (!exists) return mpx_fail(MPX_ERR_INPUT, "%s has no dataset %s", rd->where, d->path);
    H5_TRY(*out = H5Dopen2(rd->file, d->path, H5P_DEFAULT), MPX_ERR_INPUT, "%s: opening %s",
           rd->where, d->path);
    H5_TRY(sp = H5Dget_space(*out), MPX_ERR_IO, "%s: shape of %s", rd->where, d->path);
    int ok = H5Sget_simple_extent_ndims(sp) == d->rank;
    if (ok)
        H5_TRY(H5Sget_simple_extent_dims(sp, dims, NULL), MPX_ERR_IO, "%s: shape of %s", rd->where,
               d->path);
    if (d->rank >= 2) ok = ok && (int64_t)dims[1] == rd->n_layers;
    if (d->rank == 3) ok = ok && dims[2] == MPX_HIST_BINS;
    if (!ok) {
        st =
            mpx_fail(MPX_ERR_INPUT, "%s: %s does not have the shape of a run file with %lld layers",
                     rd->where, d->path, (long long)rd->n_layers);
        goto fail;
    }
    *rows = (int64_t)dims[0];
fail:
    mpx_h5_close(sp);
    if (st != MPX_OK) {
        mpx_h5_close(*out);
        *out = -1;
    }
    return st;
}

/* Read rows [row0, row0 + rows) of an open member into buf ([rows, L(, 83)], memory type). */
static mpx_status read_rows(reader *rd, hid_t h, const rl_dset *d, int64_t row0, int64_t rows,
                            void *buf) {
    mpx_status st = MPX_OK;
    hid_t fs = -1, ms = -1;
    hsize_t start[3] = {(hsize_t)row0, 0, 0};
    hsize_t count[3] = {(hsize_t)rows, (hsize_t)rd->n_layers, MPX_HIST_BINS};
    if (rows == 0) return MPX_OK;
    H5_TRY(fs = H5Dget_space(h), MPX_ERR_IO, "%s: shape of %s", rd->where, d->path);
    H5_TRY(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), MPX_ERR_IO,
           "%s: selecting rows of %s", rd->where, d->path);
    H5_TRY(ms = H5Screate_simple(d->rank, count, NULL), MPX_ERR_IO, "%s: rows of %s", rd->where,
           d->path);
    H5_TRY(H5Dread(h, rl_mem_type(d->type), ms, fs, H5P_DEFAULT, buf), MPX_ERR_IO, "%s: reading %s",
           rd->where, d->path);
fail:
    mpx_h5_close(ms);
    mpx_h5_close(fs);
    return st;
}

/* Read the first rows of 1-D members ds[0..n) into cols[i] (malloc'ed); *rows = the length
 * of the step column ds[n - 1]. */
static mpx_status read_series(reader *rd, const rl_dset *ds, int n, void **cols, int64_t *rows) {
    mpx_status st = MPX_OK;
    hid_t h[RL_N_TRAIN];
    int64_t len[RL_N_TRAIN];
    for (int i = 0; i < n; i++) h[i] = -1;
    for (int i = 0; i < n; i++) MPX_TRY_FAIL(open_member(rd, &ds[i], &h[i], &len[i]));
    *rows = len[n - 1];
    for (int i = 0; i < n; i++) {
        if (len[i] < *rows) {
            st = mpx_fail(MPX_ERR_INPUT, "%s: %s has %lld rows but %s has %lld", rd->where,
                          ds[i].path, (long long)len[i], ds[n - 1].path, (long long)*rows);
            goto fail;
        }
        if (!(cols[i] = calloc(*rows ? (size_t)*rows : 1, rl_type_size(ds[i].type)))) {
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading %s", ds[i].path);
            goto fail;
        }
        MPX_TRY_FAIL(read_rows(rd, h[i], &ds[i], 0, *rows, cols[i]));
    }
fail:
    for (int i = 0; i < n; i++) mpx_h5_close(h[i]);
    return st;
}

static mpx_status load_layers(reader *rd) {
    MPX_TRY(mpx_h5_read_strings(rd->file, "/layers/name", &rd->n_layers, &rd->names, rd->where));
    int64_t n_kinds = 0;
    MPX_TRY(mpx_h5_read_strings(rd->file, "/layers/kind", &n_kinds, &rd->kinds, rd->where));
    if (n_kinds != rd->n_layers) {
        mpx_h5_free_strings(rd->kinds, n_kinds);
        rd->kinds = NULL;
        return mpx_fail(MPX_ERR_INPUT, "%s: /layers/kind has %lld rows but /layers/name has %lld",
                        rd->where, (long long)n_kinds, (long long)rd->n_layers);
    }
    return MPX_OK;
}

/* Members a run file may lack: written since the lost-update statistics (a file from before
 * them exports everything else). */
/* Members that run files written before them lack: the update and FP8 statistics. */
static int optional_member(int i) {
    return i >= RL_ST_UPDATE_NONZERO && i <= RL_ST_WHATIF_LAST;
}

/* Open every /stats member (but a missing optional one) and read /stats/step. */
static mpx_status open_stats(reader *rd) {
    int64_t rows[RL_N_STATS];
    for (int i = 0; i < RL_N_STATS; i++) {
        rows[i] = -1;
        if (optional_member(i) && H5Lexists(rd->file, rl_stats[i].path, H5P_DEFAULT) <= 0) continue;
        MPX_TRY(open_member(rd, &rl_stats[i], &rd->stats[i], &rows[i]));
    }
    rd->n_steps = rows[RL_ST_STEP];
    for (int i = 0; i < RL_N_STATS; i++)
        if (rows[i] >= 0 && rows[i] < rd->n_steps)
            return mpx_fail(MPX_ERR_INPUT, "%s: %s has %lld rows but /stats/step has %lld",
                            rd->where, rl_stats[i].path, (long long)rows[i],
                            (long long)rd->n_steps);
    if (!(rd->steps = calloc(rd->n_steps ? (size_t)rd->n_steps : 1, sizeof *rd->steps)))
        return mpx_fail(MPX_ERR_NOMEM, "out of memory reading /stats/step");
    return read_rows(rd, rd->stats[RL_ST_STEP], &rl_stats[RL_ST_STEP], 0, rd->n_steps, rd->steps);
}

/* ---- selections ---- */

/* Layers [*l0, *l1): all, or the one named `name`. */
static mpx_status select_layer(const reader *rd, const char *name, int64_t *l0, int64_t *l1) {
    *l0 = 0;
    *l1 = rd->n_layers;
    if (!name) return MPX_OK;
    for (int64_t i = 0; i < rd->n_layers; i++)
        if (strcmp(rd->names[i], name) == 0) {
            *l0 = i;
            *l1 = i + 1;
            return MPX_OK;
        }
    char list[512] = "";
    size_t used = 0;
    for (int64_t i = 0; i < rd->n_layers && i < 8; i++)
        used +=
            (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", rd->names[i]);
    return mpx_fail(MPX_ERR_INPUT, "%s has no layer '%s' (layers: %s%s; %lld in all)", rd->where,
                    name, list, rd->n_layers > 8 ? ", ..." : "", (long long)rd->n_layers);
}

/* Stats rows [*k0, *k1): all, or the one at `step` (< 0 = all). */
static mpx_status select_step(const reader *rd, int64_t step, int64_t *k0, int64_t *k1) {
    *k0 = 0;
    *k1 = rd->n_steps;
    if (step < 0) return MPX_OK;
    if (rd->n_steps == 0)
        return mpx_fail(MPX_ERR_INPUT, "%s has no statistics steps (asked for step %lld)",
                        rd->where, (long long)step);
    int64_t below = -1, above = -1; /* nearest recorded steps on either side */
    for (int64_t k = 0; k < rd->n_steps; k++) {
        int64_t s = rd->steps[k];
        if (s == step) {
            *k0 = k;
            *k1 = k + 1;
            return MPX_OK;
        }
        if (s < step && (below < 0 || s > rd->steps[below])) below = k;
        if (s > step && (above < 0 || s < rd->steps[above])) above = k;
    }
    char near[96];
    if (below >= 0 && above >= 0)
        snprintf(near, sizeof near, "%lld and %lld", (long long)rd->steps[below],
                 (long long)rd->steps[above]);
    else
        snprintf(near, sizeof near, "%lld", (long long)rd->steps[below >= 0 ? below : above]);
    return mpx_fail(MPX_ERR_INPUT, "%s has no statistics at step %lld (nearest: %s)", rd->where,
                    (long long)step, near);
}

/* ---- the exports ---- */

static mpx_status export_train(reader *rd, FILE *out) {
    void *c[RL_N_TRAIN] = {0};
    int64_t n = 0;
    mpx_status st = read_series(rd, rl_train, RL_N_TRAIN, c, &n);
    if (st == MPX_OK) {
        fprintf(out, "step\tloss\tlr\tloss_scale\tskipped\tsamples_per_s\twall_s\n");
        for (int64_t i = 0; i < n; i++)
            fprintf(out, "%" PRId64 "\t%.9g\t%.9g\t%.17g\t%u\t%.9g\t%.17g\n",
                    ((int64_t *)c[RL_TR_STEP])[i], ((float *)c[RL_TR_LOSS])[i],
                    ((float *)c[RL_TR_LR])[i], ((double *)c[RL_TR_LOSS_SCALE])[i],
                    ((uint8_t *)c[RL_TR_SKIPPED])[i], ((float *)c[RL_TR_SPS])[i],
                    ((double *)c[RL_TR_WALL])[i]);
    }
    for (int i = 0; i < RL_N_TRAIN; i++) free(c[i]);
    return st;
}

static mpx_status export_eval(reader *rd, FILE *out) {
    void *c[RL_N_EVAL] = {0};
    int64_t n = 0;
    mpx_status st = read_series(rd, rl_eval, RL_N_EVAL, c, &n);
    if (st == MPX_OK) {
        fprintf(out, "step\tloss\tmetric\n");
        for (int64_t i = 0; i < n; i++)
            fprintf(out, "%" PRId64 "\t%.9g\t%.9g\n", ((int64_t *)c[RL_EV_STEP])[i],
                    ((float *)c[RL_EV_LOSS])[i], ((float *)c[RL_EV_METRIC])[i]);
    }
    for (int i = 0; i < RL_N_EVAL; i++) free(c[i]);
    return st;
}

static mpx_status export_layers(reader *rd, const mpx_export_opts *o, FILE *out) {
    /* The layer table's numeric columns, read like 1-D series (their own length is L). */
    static const rl_dset cols[2] = {{"/layers/params", RL_I64, 1, 0, RL_SRC_STEP, 0},
                                    {"/layers/fan_in", RL_I64, 1, 0, RL_SRC_STEP, 0}};
    int64_t l0, l1, n = 0;
    MPX_TRY(select_layer(rd, o->layer, &l0, &l1));
    void *c[2] = {0};
    mpx_status st = read_series(rd, cols, 2, c, &n);
    if (st == MPX_OK && n != rd->n_layers)
        st = mpx_fail(MPX_ERR_INPUT, "%s: /layers/params has %lld rows but /layers/name has %lld",
                      rd->where, (long long)n, (long long)rd->n_layers);
    if (st == MPX_OK) {
        fprintf(out, "index\tname\tkind\tparams\tfan_in\n");
        for (int64_t l = l0; l < l1; l++)
            fprintf(out, "%" PRId64 "\t%s\t%s\t%" PRId64 "\t%" PRId64 "\n", l, rd->names[l],
                    rd->kinds[l], ((int64_t *)c[0])[l], ((int64_t *)c[1])[l]);
    }
    free(c[0]);
    free(c[1]);
    return st;
}

/* Read stats row k of the members first..last into bufs (one [L(, 83)] row each). */
static mpx_status read_stats_row(reader *rd, int first, int last, int64_t k, void **bufs) {
    for (int m = first; m <= last; m++) /* a member an older file lacks stays zero */
        if (rd->stats[m] >= 0)
            MPX_TRY(read_rows(rd, rd->stats[m], &rl_stats[m], k, 1, bufs[m - first]));
    return MPX_OK;
}

/* Allocate one stats row for each member first..last. */
static mpx_status alloc_stats_rows(const reader *rd, int first, int last, void **bufs) {
    for (int m = first; m <= last; m++) {
        size_t n = (size_t)rd->n_layers * (rl_stats[m].rank == 3 ? MPX_HIST_BINS : 1);
        if (!(bufs[m - first] = calloc(n ? n : 1, rl_type_size(rl_stats[m].type))))
            return mpx_fail(MPX_ERR_NOMEM, "out of memory reading %s", rl_stats[m].path);
    }
    return MPX_OK;
}

static mpx_status export_underflow(reader *rd, int64_t l0, int64_t l1, int64_t k0, int64_t k1,
                                   FILE *out) {
    enum { FIRST = RL_ST_ACT_NONZERO, LAST = RL_ST_W_NONFINITE, N = LAST - FIRST + 1 };
    static const char *const what[6] = {"nonzero",   "flushed",  "below_min",
                                        "subnormal", "overflow", "nonfinite"};
    void *b[N] = {0};
    mpx_status st = alloc_stats_rows(rd, FIRST, LAST, b);
    if (st == MPX_OK) {
        fputs("step\tlayer\tname\tkind", out);
        for (int t = 0; t < 2; t++) {
            for (int j = 0; j < 6; j++) fprintf(out, "\t%s_%s", t ? "weight" : "act", what[j]);
            fprintf(out, "\t%s_underflow_rate", t ? "weight" : "act");
        }
        fputc('\n', out);
    }
    for (int64_t k = k0; st == MPX_OK && k < k1; k++) {
        if ((st = read_stats_row(rd, FIRST, LAST, k, b)) != MPX_OK) break;
        for (int64_t l = l0; l < l1; l++) {
            fprintf(out, "%" PRId64 "\t%" PRId64 "\t%s\t%s", rd->steps[k], l, rd->names[l],
                    rd->kinds[l]);
            for (int t = 0; t < 2; t++) {
                uint64_t v[6];
                for (int j = 0; j < 6; j++) v[j] = ((uint64_t *)b[t * 6 + j])[l];
                for (int j = 0; j < 6; j++) fprintf(out, "\t%" PRIu64, v[j]);
                mpx_cast_stats cs = {.nonzero = v[0], .flushed = v[1]};
                fprintf(out, "\t%.9g", mpx_underflow_rate(&cs));
            }
            fputc('\n', out);
        }
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return st;
}

static mpx_status export_scale(reader *rd, int64_t l0, int64_t l1, int64_t k0, int64_t k1,
                               FILE *out) {
    enum { FIRST = RL_ST_SCALE, LAST = RL_ST_W_MAX, N = LAST - FIRST + 1 };
    void *b[N] = {0};
    mpx_status st = alloc_stats_rows(rd, FIRST, LAST, b);
    if (st == MPX_OK) {
        fputs("step\tlayer\tname", out);
        for (int m = FIRST; m <= LAST; m++)
            fprintf(out, "\t%s", rl_stats[m].path + strlen("/stats/"));
        fputc('\n', out);
    }
    for (int64_t k = k0; st == MPX_OK && k < k1; k++) {
        if ((st = read_stats_row(rd, FIRST, LAST, k, b)) != MPX_OK) break;
        for (int64_t l = l0; l < l1; l++) {
            fprintf(out, "%" PRId64 "\t%" PRId64 "\t%s", rd->steps[k], l, rd->names[l]);
            for (int m = FIRST; m <= LAST; m++) {
                if (rl_stats[m].type == RL_F64)
                    fprintf(out, "\t%.17g", ((double *)b[m - FIRST])[l]);
                else
                    fprintf(out, "\t%.9g", ((float *)b[m - FIRST])[l]);
            }
            fputc('\n', out);
        }
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return st;
}

/* What each step's optimizer update did to each layer's stored parameters (stats.h: update_*). */
static mpx_status export_updates(reader *rd, int64_t l0, int64_t l1, int64_t k0, int64_t k1,
                                 FILE *out) {
    enum { FIRST = RL_ST_UPDATE_NONZERO, LAST = RL_ST_UPDATE_ERROR, N = LAST - FIRST + 1 };
    if (rd->stats[FIRST] < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s has no lost-update statistics (%s): it was written "
                        "by an mpx from before them", rd->where, rl_stats[FIRST].path);
    void *b[N] = {0};
    mpx_status st = alloc_stats_rows(rd, FIRST, LAST, b);
    if (st == MPX_OK) fputs("step\tlayer\tname\tkind\tupdate_nonzero\tupdate_lost\tupdate_error\n", out);
    for (int64_t k = k0; st == MPX_OK && k < k1; k++) {
        if ((st = read_stats_row(rd, FIRST, LAST, k, b)) != MPX_OK) break;
        for (int64_t l = l0; l < l1; l++)
            fprintf(out, "%" PRId64 "\t%" PRId64 "\t%s\t%s\t%" PRIu64 "\t%.17g\t%.17g\n",
                    rd->steps[k], l, rd->names[l], rd->kinds[l], ((uint64_t *)b[0])[l],
                    ((double *)b[1])[l], ((double *)b[2])[l]);
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return st;
}

/* A scale range's columns: the smallest and largest scale and the spread log2(hi / lo) in
 * binades, from dataset rows lo and hi at layer l; "nan" from a file written before them. */
static void print_scale_range(FILE *out, const reader *rd, int m_lo, void *lo, void *hi,
                              int64_t l) {
    if (rd->stats[m_lo] < 0) {
        fputs("\tnan\tnan\tnan", out);
        return;
    }
    const double a = ((double *)lo)[l], b = ((double *)hi)[l];
    fprintf(out, "\t%.9g\t%.9g\t%.9g", a, b, a > 0 ? log2(b / a) : NAN);
}

/* What fp8 mode's operand casts did per layer (stats.h: fp8, operand_scale): for its input, weight
 * and output gradient, the nonzero, flushed and saturated counts, the scale and the range of the
 * scales its blocks or casts used. */
static mpx_status export_operands(reader *rd, int64_t l0, int64_t l1, int64_t k0, int64_t k1,
                             FILE *out) {
    enum { FIRST = RL_ST_OPERAND_FIRST, LAST = RL_ST_OPERAND_LAST, N = LAST - FIRST + 1, W = 6 };
    if (rd->stats[FIRST] < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s has no FP8 statistics (%s): it was written by an mpx "
                        "from before them", rd->where, rl_stats[FIRST].path);
    void *b[N] = {0};
    mpx_status st = alloc_stats_rows(rd, FIRST, LAST, b);
    static const char *const op[3] = {"x", "w", "dy"};
    if (st == MPX_OK)
        fputs("step\tlayer\tname\tkind\toperand\tnonzero\tflushed\tsaturated\tscale\tscale_lo\t"
              "scale_hi\tscale_spread\n", out);
    for (int64_t k = k0; st == MPX_OK && k < k1; k++) {
        if ((st = read_stats_row(rd, FIRST, LAST, k, b)) != MPX_OK) break;
        for (int64_t l = l0; l < l1; l++)
            for (int o = 0; o < 3; o++) {
                fprintf(out, "%" PRId64 "\t%" PRId64 "\t%s\t%s\t%s\t%" PRIu64 "\t%" PRIu64
                        "\t%" PRIu64 "\t%.9g", rd->steps[k], l, rd->names[l], rd->kinds[l], op[o],
                        ((uint64_t *)b[W * o])[l], ((uint64_t *)b[W * o + 1])[l],
                        ((uint64_t *)b[W * o + 2])[l], ((double *)b[W * o + 3])[l]);
                print_scale_range(out, rd, FIRST + W * o + 4, b[W * o + 4], b[W * o + 5], l);
                fputc('\n', out);
            }
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return st;
}

/* The what-if counts (stats.h: whatif): per layer and recipe, the nonzero, flushed and overflowed
 * values of its activation gradient as the recipe would cast it, the recipe's scale and the range
 * of its block scales. */
static mpx_status export_whatif(reader *rd, int64_t l0, int64_t l1, int64_t k0, int64_t k1,
                                FILE *out) {
    enum { FIRST = RL_ST_WHATIF_FIRST, LAST = RL_ST_WHATIF_LAST, N = LAST - FIRST + 1, W = 6 };
    if (rd->stats[FIRST] < 0)
        return mpx_fail(MPX_ERR_INPUT, "%s has no what-if statistics (%s): it was written by an "
                        "mpx from before them", rd->where, rl_stats[FIRST].path);
    void *b[N] = {0};
    mpx_status st = alloc_stats_rows(rd, FIRST, LAST, b);
    if (st == MPX_OK)
        fputs("step\tlayer\tname\tkind\trecipe\tnonzero\tflushed\toverflow\tunderflow_rate\tscale"
              "\tscale_lo\tscale_hi\tscale_spread\n", out);
    for (int64_t k = k0; st == MPX_OK && k < k1; k++) {
        if ((st = read_stats_row(rd, FIRST, LAST, k, b)) != MPX_OK) break;
        for (int64_t l = l0; l < l1; l++)
            for (int r = 0; r < MPX_WHATIF_N; r++) {
                if (rd->stats[FIRST + W * r] < 0) continue; /* a recipe newer than the file */
                const uint64_t nz = ((uint64_t *)b[W * r])[l], fl = ((uint64_t *)b[W * r + 1])[l];
                fprintf(out, "%" PRId64 "\t%" PRId64 "\t%s\t%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
                        "\t%.9g\t%.9g", rd->steps[k], l, rd->names[l], rd->kinds[l],
                        mpx_whatif_names[r], nz, fl, ((uint64_t *)b[W * r + 2])[l],
                        nz ? (double)fl / (double)nz : 0.0, ((double *)b[W * r + 3])[l]);
                print_scale_range(out, rd, FIRST + W * r + 4, b[W * r + 4], b[W * r + 5], l);
                fputc('\n', out);
            }
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return st;
}

static void print_hist(FILE *out, int64_t step, const char *layer, const char *name,
                       const char *tensor, const uint64_t *h) {
    uint64_t total = 0;
    for (int b = 0; b < MPX_HIST_BINS; b++) total += h[b];
    for (int b = 0; b < MPX_HIST_BINS; b++) {
        char bin[16];
        if (b == MPX_HIST_ZERO)
            snprintf(bin, sizeof bin, "zero");
        else if (b == MPX_HIST_INF)
            snprintf(bin, sizeof bin, "inf");
        else if (b == MPX_HIST_NAN)
            snprintf(bin, sizeof bin, "nan");
        else
            snprintf(bin, sizeof bin, "%d", MPX_HIST_LOG2_LO + b);
        double pct = total ? 100.0 * (double)h[b] / (double)total : 0.0;
        fprintf(out, "%" PRId64 "\t%s\t%s\t%s\t%s\t%" PRIu64 "\t%.9g\n", step, layer, name, tensor,
                bin, h[b], pct);
    }
}

static mpx_status export_hist(reader *rd, int64_t l0, int64_t l1, int64_t k0, int64_t k1,
                              int pooled, FILE *out) {
    enum { FIRST = RL_ST_ACT_HIST, LAST = RL_ST_W_HIST, N = LAST - FIRST + 1 };
    static const char *const tensor[N] = {"act_grad", "weight_grad"};
    void *b[N] = {0};
    uint64_t sum[MPX_HIST_BINS];
    mpx_status st = alloc_stats_rows(rd, FIRST, LAST, b);
    if (st == MPX_OK) fputs("step\tlayer\tname\ttensor\tbin\tcount\tpct\n", out);
    for (int64_t k = k0; st == MPX_OK && k < k1; k++) {
        if ((st = read_stats_row(rd, FIRST, LAST, k, b)) != MPX_OK) break;
        for (int t = 0; t < N; t++) {
            const uint64_t *h = b[t];
            if (pooled) {
                memset(sum, 0, sizeof sum);
                for (int64_t l = l0; l < l1; l++)
                    for (int j = 0; j < MPX_HIST_BINS; j++) sum[j] += h[l * MPX_HIST_BINS + j];
                print_hist(out, rd->steps[k], "all", "all", tensor[t], sum);
                continue;
            }
            for (int64_t l = l0; l < l1; l++) {
                char idx[24];
                snprintf(idx, sizeof idx, "%" PRId64, l);
                print_hist(out, rd->steps[k], idx, rd->names[l], tensor[t], h + l * MPX_HIST_BINS);
            }
        }
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return st;
}

/* One row describing the run: what it was and how it ended (for tables across runs).
 * samples_per_s is the median over the training rows after the first 5% (warm-up). */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static mpx_status export_summary(reader *rd, FILE *out) {
    /* from git_commit on newer than some run files: "-" where absent */
    static const char *const attrs[] = {"model",  "dataset",   "precision", "scaling",
                                        "seed",   "git_commit", "threads",  "host",
                                        "isa",    "init_weights", "cpu_paths"};
    enum { NA = sizeof attrs / sizeof *attrs };
    char *val[NA] = {0}, *stopped = NULL;
    void *tc[RL_N_TRAIN] = {0}, *ec[RL_N_EVAL] = {0};
    int64_t nt = 0, ne = 0;
    mpx_status st = MPX_OK;
    for (int i = 0; i < NA && st == MPX_OK; i++)
        if (i < 5 || H5Aexists(rd->file, attrs[i]) > 0)
            st = mpx_h5_attr_read_text(rd->file, attrs[i], &val[i], rd->where);
    if (st == MPX_OK && H5Aexists(rd->file, "stopped") > 0)
        st = mpx_h5_attr_read_text(rd->file, "stopped", &stopped, rd->where);
    if (st == MPX_OK) st = read_series(rd, rl_train, RL_N_TRAIN, tc, &nt);
    if (st == MPX_OK) st = read_series(rd, rl_eval, RL_N_EVAL, ec, &ne);
    if (st == MPX_OK) {
        int64_t skipped = 0, first = nt / 20;
        for (int64_t i = 0; i < nt; i++) skipped += ((uint8_t *)tc[RL_TR_SKIPPED])[i];
        float *sps = (float *)tc[RL_TR_SPS] + first, median = 0;
        if (nt - first > 0) {
            qsort(sps, (size_t)(nt - first), sizeof *sps, cmp_float);
            median = sps[(nt - first) / 2];
        }
        fprintf(out, "model\tdataset\tprecision\tscaling\tseed\tsteps\tfinal_loss\teval_step\t"
                     "eval_loss\tmetric\tskipped\tsamples_per_s\twall_s\tstopped\tgit_commit\t"
                     "threads\thost\tisa\tinit_weights\tcpu_paths\n");
        fprintf(out, "%s\t%s\t%s\t%s\t%s\t%" PRId64 "\t%.9g\t%" PRId64 "\t%.9g\t%.9g\t%" PRId64
                     "\t%.9g\t%.17g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
                val[0], val[1], val[2], val[3], val[4],
                nt ? ((int64_t *)tc[RL_TR_STEP])[nt - 1] + 1 : 0,
                nt ? ((float *)tc[RL_TR_LOSS])[nt - 1] : NAN,
                ne ? ((int64_t *)ec[RL_EV_STEP])[ne - 1] : 0,
                ne ? ((float *)ec[RL_EV_LOSS])[ne - 1] : NAN,
                ne ? ((float *)ec[RL_EV_METRIC])[ne - 1] : NAN, skipped, median,
                nt ? ((double *)tc[RL_TR_WALL])[nt - 1] : 0.0, stopped ? stopped : "-",
                val[5] ? val[5] : "-", val[6] ? val[6] : "-", val[7] ? val[7] : "-",
                val[8] && val[8][0] ? val[8] : "-", val[9] && val[9][0] ? val[9] : "-",
                val[10] && val[10][0] ? val[10] : "-");
    }
    for (int i = 0; i < NA; i++) free(val[i]);
    free(stopped);
    for (int i = 0; i < RL_N_TRAIN; i++) free(tc[i]);
    for (int i = 0; i < RL_N_EVAL; i++) free(ec[i]);
    return st;
}

/* Which options an export takes. */
static mpx_status check_opts(const char *what, const mpx_export_opts *o, int layer_ok, int step_ok,
                             int pooled_ok) {
    if (o->layer && !layer_ok)
        return mpx_fail(MPX_ERR_INPUT, "export '%s' has no per-layer rows: --layer does not apply",
                        what);
    if (o->step >= 0 && !step_ok)
        return mpx_fail(MPX_ERR_INPUT,
                        "export '%s' is not per statistics step: --step does not "
                        "apply (it selects a step of hist, underflow, scale, updates, fp8 or whatif)",
                        what);
    if (o->pooled && !pooled_ok)
        return mpx_fail(MPX_ERR_INPUT, "export '%s': pooling applies to hist only", what);
    return MPX_OK;
}

static int known_export(const char *what) {
    static const char *const names[] = {"train", "eval",    "layers", "hist",
                                        "underflow", "scale", "updates", "summary", "operands", "whatif"};
    for (int i = 0; i < 10; i++)
        if (strcmp(what, names[i]) == 0) return 1;
    return 0;
}

/* `what` is one of known_export's names. */
static mpx_status export_any(reader *rd, const char *what, const mpx_export_opts *o, FILE *out) {
    if (strcmp(what, "train") == 0) {
        MPX_TRY(check_opts(what, o, 0, 0, 0));
        return export_train(rd, out);
    }
    if (strcmp(what, "eval") == 0) {
        MPX_TRY(check_opts(what, o, 0, 0, 0));
        return export_eval(rd, out);
    }
    if (strcmp(what, "summary") == 0) {
        MPX_TRY(check_opts(what, o, 0, 0, 0));
        return export_summary(rd, out);
    }
    if (strcmp(what, "layers") == 0) {
        MPX_TRY(check_opts(what, o, 1, 0, 0));
        MPX_TRY(load_layers(rd));
        return export_layers(rd, o, out);
    }
    int hist = strcmp(what, "hist") == 0;
    MPX_TRY(check_opts(what, o, 1, 1, hist));
    MPX_TRY(load_layers(rd));
    int64_t l0, l1, k0, k1;
    MPX_TRY(select_layer(rd, o->layer, &l0, &l1));
    MPX_TRY(open_stats(rd));
    MPX_TRY(select_step(rd, o->step, &k0, &k1));
    if (hist) return export_hist(rd, l0, l1, k0, k1, o->pooled, out);
    if (strcmp(what, "underflow") == 0) return export_underflow(rd, l0, l1, k0, k1, out);
    if (strcmp(what, "updates") == 0) return export_updates(rd, l0, l1, k0, k1, out);
    if (strcmp(what, "operands") == 0) return export_operands(rd, l0, l1, k0, k1, out);
    if (strcmp(what, "whatif") == 0) return export_whatif(rd, l0, l1, k0, k1, out);
    return export_scale(rd, l0, l1, k0, k1, out);
}

mpx_status mpx_runlog_export(const char *path, const char *what, const mpx_export_opts *o,
                             FILE *out) {
    static const mpx_export_opts all = {NULL, -1, 0};
    if (!known_export(what))
        return mpx_fail(MPX_ERR_INPUT,
                        "unknown export '%s' (train, eval, layers, hist, underflow, "
                        "scale, updates or summary)",
                        what);
    reader rd;
    mpx_status st = reader_open(path, &rd);
    if (st == MPX_OK) st = export_any(&rd, what, o ? o : &all, out);
    if (st == MPX_OK && (fflush(out) != 0 || ferror(out)))
        st = mpx_fail(MPX_ERR_IO, "writing the '%s' export of %s failed", what, rd.where);
    reader_close(&rd);
    return st;
}

mpx_status mpx_runlog_read_attr(const char *path, const char *name, char **value) {
    reader rd;
    *value = NULL;
    mpx_status st = reader_open(path, &rd);
    if (st == MPX_OK) st = mpx_h5_attr_read_text(rd.file, name, value, rd.where);
    reader_close(&rd);
    return st;
}
