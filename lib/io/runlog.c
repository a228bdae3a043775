/* runlog.c — writing the HDF5 run file (docs/design.md §6): create, reopen for resume, append rows.
 *
 * Crash safety: the file is touched only inside a flush (mpx_runlog_flush, _eval, _stats,
 * _mark_stopped, and when RL_TRAIN_BUF training rows are waiting), which ends with
 * H5Fflush(GLOBAL); between flushes training rows wait in memory and no HDF5 call is made.
 * The file uses the earliest format that holds our datasets (library bounds EARLIEST..V18:
 * superblock version 0, which has no "file is open for writing" flag), so a process killed
 * outside a flush leaves a file that any HDF5 reader opens as it was at the last flush.
 *
 * Layout choices (all time series extendable along axis 0, H5S_UNLIMITED):
 *   /train members chunks of 1024 rows; /eval members 64 rows; /stats/step 64 rows;
 *   /stats [K,L] members chunks of [16, L]; /stats [K,L,83] histograms one step per chunk.
 * Only the histograms are compressed (shuffle + gzip level 1): they are mostly zero bins and
 * dominate the file (2 x L x 83 x 8 bytes per stats step), and each of their chunks is written
 * once. The other series are left uncompressed so a partly filled chunk keeps its size and is
 * rewritten in place at each flush (a compressed chunk that grows is moved, leaving dead space).
 *
 * A full disk: HDF5 1.10 does not recover from a failed write — the file is left half
 * updated, and a handle whose close failed makes the library crash in its exit handler. So
 * before each flush touches the file, the most it can grow by is reserved on disk beyond its
 * end (fallocate with KEEP_SIZE: readers see no change; what the flush did not use is given
 * back after it). A full disk then fails there, before any HDF5 call: MPX_ERR_IO, and the file
 * stays exactly as it was at the last flush. (On file systems without fallocate the
 * reservation is skipped.)
 *
 * Any failure is MPX_ERR_IO naming the file and dataset (with the system's reason, e.g.
 * "No space left on device"); the first error sticks: later calls return it without writing.
 */
#include "mpx/runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "h5util.h"
#include "mpx/runtime.h"
#include "runlog_schema.h"

enum {
    RL_TRAIN_BUF = 1024,      /* training rows buffered before a forced flush (one chunk) */
    RL_META_SLACK = 32 << 10, /* bytes reserved per flush for object headers, heaps, ... */
    RL_INDEX_SLACK = 8 << 10, /* per member gaining a chunk: index nodes, <= 3.2 KB each */
};

struct mpx_runlog {
    char *path;
    char *where; /* "run file 'PATH'", the prefix of every message */
    hid_t file;
    int fd; /* our own descriptor of the file, for reserving space (-1: cannot) */
    int n_layers;
    hid_t train[RL_N_TRAIN], eval[RL_N_EVAL], stats[RL_N_STATS];
    hsize_t n_train, n_eval, n_stats; /* rows in the file */
    double resumed_wall_s;            /* /train/wall_s of the last row a reopen kept */
    mpx_train_row *buf;               /* [RL_TRAIN_BUF] rows waiting for the next flush */
    int n_buf;
    unsigned char *scratch; /* one column of the buffer, or one stats row */
    mpx_status err;         /* the first error (sticky), and its message */
    char *err_msg;
};

/* ---- errors ---- */

static mpx_status stick(mpx_runlog *r, mpx_status st) {
    if (st != MPX_OK && r->err == MPX_OK) {
        r->err = st;
        r->err_msg = strdup(mpx_error_message());
    }
    return st;
}

static mpx_status check_alive(const mpx_runlog *r) {
    if (r->err == MPX_OK) return MPX_OK;
    return mpx_fail(r->err, "%s", r->err_msg ? r->err_msg : "run file: earlier error");
}

/* ---- allocation and teardown ---- */

static mpx_status runlog_alloc(const char *path, int n_layers, mpx_runlog **out) {
    mpx_runlog *r = calloc(1, sizeof *r);
    size_t wlen = strlen(path) + 16;
    size_t scratch = (size_t)n_layers * MPX_HIST_BINS * sizeof(uint64_t);
    if (scratch < RL_TRAIN_BUF * sizeof(double)) scratch = RL_TRAIN_BUF * sizeof(double);
    if (!r || !(r->path = strdup(path)) || !(r->where = malloc(wlen)) ||
        !(r->buf = calloc(RL_TRAIN_BUF, sizeof *r->buf)) || !(r->scratch = malloc(scratch))) {
        if (r) {
            free(r->path);
            free(r->where);
            free(r->buf);
        }
        free(r);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory opening run file '%s'", path);
    }
    snprintf(r->where, wlen, "run file '%s'", path);
    r->file = -1;
    r->fd = -1;
    r->n_layers = n_layers;
    for (int i = 0; i < RL_N_TRAIN; i++) r->train[i] = -1;
    for (int i = 0; i < RL_N_EVAL; i++) r->eval[i] = -1;
    for (int i = 0; i < RL_N_STATS; i++) r->stats[i] = -1;
    *out = r;
    return MPX_OK;
}

/* Close every handle; returns H5Fclose's result (< 0 when the last write-back failed). */
static herr_t runlog_close_handles(mpx_runlog *r) {
    hid_t *all[3] = {r->train, r->eval, r->stats};
    const int n[3] = {RL_N_TRAIN, RL_N_EVAL, RL_N_STATS};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < n[s]; i++) {
            mpx_h5_close(all[s][i]);
            all[s][i] = -1;
        }
    herr_t rc = r->file >= 0 ? H5Fclose(r->file) : 0;
    r->file = -1;
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    return rc;
}

static void runlog_free(mpx_runlog *r) {
    free(r->path);
    free(r->where);
    free(r->buf);
    free(r->scratch);
    free(r->err_msg);
    free(r);
}

/* Earliest format (superblock 0, no open-for-writing flag; readable by HDF5 >= 1.8); closing
 * the file closes whatever is still open in it, so error paths cannot leave it half-open. */
static hid_t file_access_plist(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return fapl;
    if (H5Pset_libver_bounds(fapl, H5F_LIBVER_EARLIEST, H5F_LIBVER_V18) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

/* ---- disk space (see the top of the file) ---- */

/* Bytes a series member can grow by when it goes from n0 to n1 rows: its new chunks (a
 * compressed histogram chunk is at most its raw size plus deflate's framing) and room for a
 * split of its chunk index. */
static uint64_t growth(const mpx_runlog *r, const rl_dset *d, hsize_t n0, hsize_t n1) {
    uint64_t row = rl_type_size(d->type) * (d->rank >= 2 ? (uint64_t)r->n_layers : 1) *
                   (d->rank == 3 ? MPX_HIST_BINS : 1);
    uint64_t c = d->chunk, chunks = (n1 + c - 1) / c - (n0 + c - 1) / c;
    uint64_t chunk_bytes = c * row + (d->rank == 3 ? c * row / 64 + 256 : 0);
    return chunks ? chunks * chunk_bytes + RL_INDEX_SLACK : 0;
}

/* The most the next flush can add to the file when it also writes `stats` statistics rows
 * and `eval` evaluation rows, plus `extra` bytes of attributes or tables. */
static uint64_t flush_bound(const mpx_runlog *r, int stats, int eval, uint64_t extra) {
    uint64_t b = RL_META_SLACK + extra;
    for (int i = 0; i < RL_N_TRAIN; i++)
        b += growth(r, &rl_train[i], r->n_train, r->n_train + (hsize_t)r->n_buf);
    for (int i = 0; i < RL_N_EVAL; i++)
        b += growth(r, &rl_eval[i], r->n_eval, r->n_eval + (hsize_t)eval);
    for (int i = 0; i < RL_N_STATS; i++)
        b += growth(r, &rl_stats[i], r->n_stats, r->n_stats + (hsize_t)stats);
    return b;
}

/* Reserve `bytes` of disk beyond the end of the file (its size does not change). */
static mpx_status reserve(mpx_runlog *r, uint64_t bytes) {
    struct stat sb;
    int rc;
    if (r->fd < 0) return MPX_OK;
    if (fstat(r->fd, &sb) != 0) return mpx_fail(MPX_ERR_IO, "%s: %s", r->where, strerror(errno));
    do rc = fallocate(r->fd, FALLOC_FL_KEEP_SIZE, sb.st_size, (off_t)bytes);
    while (rc != 0 && errno == EINTR);
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) { /* this file system cannot */
        close(r->fd);
        r->fd = -1;
        return MPX_OK;
    }
    if (rc != 0)
        return mpx_fail(MPX_ERR_IO, "%s: reserving %llu bytes of disk for the next write: %s",
                        r->where, (unsigned long long)bytes, strerror(errno));
    return MPX_OK;
}

/* Give back the reserved space the flush did not use: truncating to the current size frees
 * the blocks beyond it. Failing to give it back costs only disk space, so it is not an error. */
static void release(mpx_runlog *r) {
    struct stat sb;
    if (r->fd < 0 || fstat(r->fd, &sb) != 0) return;
    if (ftruncate(r->fd, sb.st_size) != 0) return; /* only disk space is lost */
}

/* Our own descriptor of the file HDF5 has open, for reserve(). */
static mpx_status open_fd(mpx_runlog *r) {
    r->fd = open(r->path, O_RDWR | O_CLOEXEC);
    if (r->fd < 0) return mpx_fail(MPX_ERR_IO, "%s: %s", r->where, strerror(errno));
    return MPX_OK;
}

/* ---- creating ---- */

/* Dimensions of a series member with `rows` rows: [rows], [rows, L] or [rows, L, 83] (the
 * member's rank says how many of the three are used). */
static void series_dims(hsize_t rows, int n_layers, hsize_t *dims) {
    dims[0] = rows;
    dims[1] = (hsize_t)n_layers;
    dims[2] = MPX_HIST_BINS;
}

static mpx_status create_series(mpx_runlog *r, const rl_dset *d, hid_t *out) {
    mpx_status st = MPX_OK;
    hid_t sp = -1, dcpl = -1;
    hsize_t dims[3], maxdims[3], chunk[3];
    series_dims(0, r->n_layers, dims);
    series_dims(H5S_UNLIMITED, r->n_layers, maxdims);
    series_dims(d->chunk, r->n_layers, chunk);
    H5_TRY(sp = H5Screate_simple(d->rank, dims, maxdims), MPX_ERR_IO, "%s: shape of %s", r->where,
           d->path);
    H5_TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), MPX_ERR_IO, "%s: creating %s", r->where, d->path);
    H5_TRY(H5Pset_chunk(dcpl, d->rank, chunk), MPX_ERR_IO, "%s: chunks of %s", r->where, d->path);
    if (d->rank == 3 && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 &&
        H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0) {
        H5_TRY(H5Pset_shuffle(dcpl), MPX_ERR_IO, "%s: filters of %s", r->where, d->path);
        H5_TRY(H5Pset_deflate(dcpl, 1), MPX_ERR_IO, "%s: filters of %s", r->where, d->path);
    }
    H5_TRY(*out = H5Dcreate2(r->file, d->path, rl_file_type(d->type), sp, H5P_DEFAULT, dcpl,
                             H5P_DEFAULT),
           MPX_ERR_IO, "%s: creating %s", r->where, d->path);
    if (d->rank == 3) {
        MPX_TRY_FAIL(mpx_h5_attr_i32(*out, "bin_log2_lo", MPX_HIST_LOG2_LO, r->where));
        MPX_TRY_FAIL(mpx_h5_attr_i32(*out, "bin_log2_hi", MPX_HIST_LOG2_HI, r->where));
        MPX_TRY_FAIL(mpx_h5_attr_str(*out, "extra_bins", "zero,inf,nan", r->where));
    }
fail:
    mpx_h5_close(dcpl);
    mpx_h5_close(sp);
    return st;
}

/* A fixed-size [n] dataset of the layer table. */
static mpx_status write_column(mpx_runlog *r, const char *path, hid_t file_type, hid_t mem_type,
                               const void *data) {
    mpx_status st = MPX_OK;
    hid_t sp = -1, d = -1;
    hsize_t n = (hsize_t)r->n_layers;
    H5_TRY(sp = H5Screate_simple(1, &n, NULL), MPX_ERR_IO, "%s: shape of %s", r->where, path);
    H5_TRY(d = H5Dcreate2(r->file, path, file_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           MPX_ERR_IO, "%s: creating %s", r->where, path);
    H5_TRY(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), MPX_ERR_IO, "%s: writing %s",
           r->where, path);
fail:
    mpx_h5_close(d);
    mpx_h5_close(sp);
    return st;
}

static mpx_status write_layers(mpx_runlog *r, const mpx_runlog_meta *meta) {
    mpx_status st = MPX_OK;
    int n = r->n_layers;
    hid_t str = -1;
    const char **names = calloc((size_t)n, sizeof *names),
               **kinds = calloc((size_t)n, sizeof *kinds);
    int64_t *params = calloc((size_t)n, sizeof *params),
            *fan_in = calloc((size_t)n, sizeof *fan_in);
    if (!names || !kinds || !params || !fan_in) {
        st = mpx_fail(MPX_ERR_NOMEM, "out of memory writing the layer table of %s", r->where);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        const mpx_layer_info *l = &meta->layers[i];
        names[i] = l->name ? l->name : "";
        kinds[i] = l->kind ? l->kind : "";
        params[i] = l->params;
        fan_in[i] = l->fan_in;
    }
    H5_TRY(str = mpx_h5_vlen_str(), MPX_ERR_IO, "%s: string type", r->where);
    MPX_TRY_FAIL(write_column(r, "/layers/name", str, str, names));
    MPX_TRY_FAIL(write_column(r, "/layers/kind", str, str, kinds));
    MPX_TRY_FAIL(write_column(r, "/layers/params", H5T_STD_I64LE, H5T_NATIVE_INT64, params));
    st = write_column(r, "/layers/fan_in", H5T_STD_I64LE, H5T_NATIVE_INT64, fan_in);
fail:
    mpx_h5_close(str);
    free(names);
    free(kinds);
    free(params);
    free(fan_in);
    return st;
}

static mpx_status write_root_attrs(mpx_runlog *r, const mpx_runlog_meta *meta) {
    char utc[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const char *w = r->where;
    MPX_TRY(mpx_h5_attr_str(r->file, "mpx_version", mpx_version(), w));
    MPX_TRY(mpx_h5_attr_str(r->file, "git_commit", mpx_git_commit(), w));
    MPX_TRY(mpx_h5_attr_str(r->file, "created_utc", utc, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "config", meta->config, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "model", meta->model, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "dataset", meta->dataset, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "precision", meta->precision, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "scaling", meta->scaling, w));
    MPX_TRY(mpx_h5_attr_i64(r->file, "seed", meta->seed, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "device", meta->device, w));
    MPX_TRY(mpx_h5_attr_i32(r->file, "threads", meta->threads, w));
    MPX_TRY(mpx_h5_attr_str(r->file, "host", mpx_host_str(), w));
    MPX_TRY(mpx_h5_attr_str(r->file, "isa", meta->isa ? meta->isa : "", w));
    MPX_TRY(mpx_h5_attr_str(r->file, "cpu_paths", meta->cpu_paths ? meta->cpu_paths : "", w));
    MPX_TRY(mpx_h5_attr_str(r->file, "init_weights", meta->init_weights ? meta->init_weights : "",
                            w));
    return MPX_OK;
}

/* What creating the groups, attributes, layer table and empty series can take on disk. */
static uint64_t create_bound(const mpx_runlog_meta *meta) {
    uint64_t b = 2 * RL_META_SLACK + 2 * (meta->config ? strlen(meta->config) : 0);
    for (int i = 0; i < meta->n_layers; i++) {
        const mpx_layer_info *l = &meta->layers[i];
        b += 128 + 2 * ((l->name ? strlen(l->name) : 0) + (l->kind ? strlen(l->kind) : 0));
    }
    return b;
}

static mpx_status create_contents(mpx_runlog *r, const mpx_runlog_meta *meta) {
    mpx_status st = MPX_OK;
    static const char *const groups[] = {"/train", "/eval", "/layers", "/stats"};
    MPX_TRY(open_fd(r));
    MPX_TRY(reserve(r, create_bound(meta)));
    for (int i = 0; i < 4; i++) {
        hid_t g;
        H5_TRY(g = H5Gcreate2(r->file, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
               MPX_ERR_IO, "%s: creating group %s", r->where, groups[i]);
        mpx_h5_close(g);
    }
    MPX_TRY(write_root_attrs(r, meta));
    MPX_TRY(write_layers(r, meta));
    for (int i = 0; i < RL_N_TRAIN; i++) MPX_TRY(create_series(r, &rl_train[i], &r->train[i]));
    for (int i = 0; i < RL_N_EVAL; i++) MPX_TRY(create_series(r, &rl_eval[i], &r->eval[i]));
    for (int i = 0; i < RL_N_STATS; i++) MPX_TRY(create_series(r, &rl_stats[i], &r->stats[i]));
    MPX_TRY(mpx_h5_attr_str(r->eval[RL_EV_METRIC], "metric", meta->eval_metric, r->where));
    H5_TRY(H5Fflush(r->file, H5F_SCOPE_GLOBAL), MPX_ERR_IO, "%s: flushing to disk", r->where);
    release(r);
fail:
    return st;
}

static mpx_status check_meta(const char *path, const mpx_runlog_meta *meta) {
    if (!meta || meta->n_layers < 1 || !meta->layers)
        return mpx_fail(MPX_ERR_INPUT,
                        "run file '%s': the layer table is empty (a graph always "
                        "has at least its loss)",
                        path);
    return MPX_OK;
}

mpx_status mpx_runlog_create(const char *path, const mpx_runlog_meta *meta, int force,
                             mpx_runlog **out) {
    mpx_status st = MPX_OK;
    mpx_runlog *r = NULL;
    hid_t fapl = -1;
    struct stat sb;
    *out = NULL;
    MPX_TRY(check_meta(path, meta));
    if (!force && stat(path, &sb) == 0)
        return mpx_fail(MPX_ERR_INPUT, "run file '%s' exists; pass --force to overwrite", path);
    MPX_TRY(runlog_alloc(path, meta->n_layers, &r));
    mpx_h5_quiet();
    H5_TRY(fapl = file_access_plist(), MPX_ERR_IO, "%s: file access properties", r->where);
    /* EXCL without force: a file that appeared since the check above is still not overwritten. */
    H5_TRY(r->file = H5Fcreate(path, force ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT, fapl),
           MPX_ERR_IO, "cannot create %s", r->where);
    if ((st = create_contents(r, meta)) != MPX_OK) {
        runlog_close_handles(r);
        unlink(path); /* a half-made run file is worth nothing */
        goto fail;
    }
    *out = r;
    r = NULL;
fail:
    mpx_h5_close(fapl);
    if (r) {
        runlog_close_handles(r);
        runlog_free(r);
    }
    return st;
}

/* ---- reopening ---- */

/* Open one member of a series and check its rank and trailing dimensions; *rows = its length. */
static mpx_status open_series(mpx_runlog *r, const rl_dset *d, hid_t *out, hsize_t *rows) {
    mpx_status st = MPX_OK;
    hid_t sp = -1;
    hsize_t dims[3], want[3];
    H5_TRY(*out = H5Dopen2(r->file, d->path, H5P_DEFAULT), MPX_ERR_INPUT, "%s: no dataset %s",
           r->where, d->path);
    H5_TRY(sp = H5Dget_space(*out), MPX_ERR_IO, "%s: shape of %s", r->where, d->path);
    series_dims(0, r->n_layers, want);
    int ok = H5Sget_simple_extent_ndims(sp) == d->rank;
    if (ok)
        H5_TRY(H5Sget_simple_extent_dims(sp, dims, NULL), MPX_ERR_IO, "%s: shape of %s", r->where,
               d->path);
    for (int k = 1; ok && k < d->rank; k++) ok = dims[k] == want[k];
    if (!ok) {
        st = mpx_fail(MPX_ERR_INPUT, "%s: %s does not have the shape of a run file with %d layers",
                      r->where, d->path, r->n_layers);
        goto fail;
    }
    *rows = dims[0];
fail:
    mpx_h5_close(sp);
    return st;
}

/* Rows of a series to keep: the leading rows with step <= keep (steps only increase). */
static mpx_status rows_to_keep(mpx_runlog *r, hid_t step_dset, const char *name, hsize_t n,
                               int64_t keep, hsize_t *kept) {
    mpx_status st = MPX_OK;
    int64_t *steps = calloc(n ? n : 1, sizeof *steps);
    if (!steps) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading %s of %s", name, r->where);
    H5_TRY(H5Dread(step_dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps), MPX_ERR_IO,
           "%s: reading %s", r->where, name);
    hsize_t i = 0;
    while (i < n && steps[i] <= keep) i++;
    *kept = i;
fail:
    free(steps);
    return st;
}

/* Open all members of a series and cut each to its rows of step <= keep (`kept` rows), counted
 * on its step column (the last member; see runlog_schema.h). */
static mpx_status reopen_series(mpx_runlog *r, const rl_dset *ds, int n, hid_t *h, int64_t keep,
                                hsize_t *kept) {
    mpx_status st = MPX_OK;
    hsize_t rows[RL_N_STATS];
    for (int i = 0; i < n; i++) MPX_TRY_FAIL(open_series(r, &ds[i], &h[i], &rows[i]));
    MPX_TRY_FAIL(rows_to_keep(r, h[n - 1], ds[n - 1].path, rows[n - 1], keep, kept));
    for (int i = 0; i < n; i++) {
        hsize_t dims[3];
        series_dims(*kept, r->n_layers, dims);
        if (rows[i] < *kept) {
            st = mpx_fail(MPX_ERR_INPUT, "%s: %s has %llu rows but %s has %llu", r->where,
                          ds[i].path, (unsigned long long)rows[i], ds[n - 1].path,
                          (unsigned long long)rows[n - 1]);
            goto fail;
        }
        H5_TRY(H5Dset_extent(h[i], dims), MPX_ERR_IO, "%s: shrinking %s", r->where, ds[i].path);
    }
fail:
    return st;
}

/* One value of a [N] float64 dataset: row `row`. */
static mpx_status read_f64_at(mpx_runlog *r, hid_t d, const char *name, hsize_t row, double *v) {
    mpx_status st = MPX_OK;
    hid_t fs = -1, ms = -1;
    hsize_t start[1] = {row}, count[1] = {1};
    H5_TRY(fs = H5Dget_space(d), MPX_ERR_IO, "%s: shape of %s", r->where, name);
    H5_TRY(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), MPX_ERR_IO,
           "%s: selecting row %llu of %s", r->where, (unsigned long long)row, name);
    H5_TRY(ms = H5Screate_simple(1, count, NULL), MPX_ERR_IO, "%s: a row of %s", r->where, name);
    H5_TRY(H5Dread(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, v), MPX_ERR_IO, "%s: reading %s",
           r->where, name);
fail:
    mpx_h5_close(ms);
    mpx_h5_close(fs);
    return st;
}

static mpx_status check_layers(mpx_runlog *r, const mpx_runlog_meta *meta) {
    int64_t n = 0;
    char **names = NULL;
    MPX_TRY(mpx_h5_read_strings(r->file, "/layers/name", &n, &names, r->where));
    mpx_status st = MPX_OK;
    if (n != meta->n_layers) {
        st = mpx_fail(MPX_ERR_INPUT, "%s has %lld layers but the model has %d: not the same model",
                      r->where, (long long)n, meta->n_layers);
    } else {
        for (int64_t i = 0; i < n; i++) {
            const char *want = meta->layers[i].name ? meta->layers[i].name : "";
            if (strcmp(names[i], want) != 0) {
                st = mpx_fail(MPX_ERR_INPUT, "%s: layer %lld is '%s' but the model's is '%s'",
                              r->where, (long long)i, names[i], want);
                break;
            }
        }
    }
    mpx_h5_free_strings(names, n);
    return st;
}

mpx_status mpx_runlog_reopen(const char *path, const mpx_runlog_meta *meta, int64_t resume_step,
                             mpx_runlog **out) {
    mpx_status st = MPX_OK;
    mpx_runlog *r = NULL;
    hid_t fapl = -1;
    struct stat sb;
    htri_t ours, stopped;
    *out = NULL;
    MPX_TRY(check_meta(path, meta));
    if (stat(path, &sb) != 0)
        return mpx_fail(MPX_ERR_INPUT, "run file '%s' does not exist (nothing to resume)", path);
    MPX_TRY(runlog_alloc(path, meta->n_layers, &r));
    mpx_h5_quiet();
    H5_TRY(fapl = file_access_plist(), MPX_ERR_IO, "%s: file access properties", r->where);
    H5_TRY(r->file = H5Fopen(path, H5F_ACC_RDWR, fapl), MPX_ERR_INPUT,
           "%s cannot be opened as an HDF5 file for writing", r->where);
    MPX_TRY_FAIL(open_fd(r));
    /* Cutting the series rewrites headers and chunk indexes in place; the slack covers it. */
    MPX_TRY_FAIL(
        reserve(r, RL_META_SLACK + (RL_N_TRAIN + RL_N_EVAL + RL_N_STATS) * RL_INDEX_SLACK));
    H5_TRY(ours = H5Aexists(r->file, "mpx_version"), MPX_ERR_IO, "%s: root attributes", r->where);
    if (!ours) {
        st = mpx_fail(MPX_ERR_INPUT, "%s is not an mpx run file (no attribute mpx_version)",
                      r->where);
        goto fail;
    }
    if ((st = check_layers(r, meta)) != MPX_OK) goto fail;
    if ((st = reopen_series(r, rl_train, RL_N_TRAIN, r->train, resume_step - 1, &r->n_train)) ||
        (st = reopen_series(r, rl_eval, RL_N_EVAL, r->eval, resume_step, &r->n_eval)) ||
        (st = reopen_series(r, rl_stats, RL_N_STATS, r->stats, resume_step - 1, &r->n_stats)))
        goto fail;
    if (r->n_train > 0 &&
        (st = read_f64_at(r, r->train[RL_TR_WALL], rl_train[RL_TR_WALL].path, r->n_train - 1,
                          &r->resumed_wall_s)) != MPX_OK)
        goto fail;
    /* A resumed run is running again: an earlier stop reason no longer describes it. */
    H5_TRY(stopped = H5Aexists(r->file, "stopped"), MPX_ERR_IO, "%s: root attributes", r->where);
    if (stopped)
        H5_TRY(H5Adelete(r->file, "stopped"), MPX_ERR_IO, "%s: removing attribute 'stopped'",
               r->where);
    H5_TRY(H5Fflush(r->file, H5F_SCOPE_GLOBAL), MPX_ERR_IO, "%s: flushing to disk", r->where);
    release(r);
    *out = r;
    r = NULL;
fail:
    mpx_h5_close(fapl);
    if (r) {
        runlog_close_handles(r);
        runlog_free(r);
    }
    return st;
}

double mpx_runlog_resumed_wall_s(const mpx_runlog *r) { return r ? r->resumed_wall_s : 0.0; }

/* ---- appending ---- */

/* Append `rows` rows from `data` (memory layout [rows, L(, 83)]) to a series member that has
 * `row0` rows. */
static mpx_status append(mpx_runlog *r, hid_t d, const rl_dset *ds, hsize_t row0, hsize_t rows,
                         const void *data) {
    mpx_status st = MPX_OK;
    hid_t fs = -1, ms = -1;
    hsize_t dims[3], start[3] = {row0, 0, 0}, count[3];
    series_dims(row0 + rows, r->n_layers, dims);
    series_dims(rows, r->n_layers, count);
    H5_TRY(H5Dset_extent(d, dims), MPX_ERR_IO, "%s: extending %s", r->where, ds->path);
    H5_TRY(fs = H5Dget_space(d), MPX_ERR_IO, "%s: shape of %s", r->where, ds->path);
    H5_TRY(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), MPX_ERR_IO,
           "%s: selecting rows of %s", r->where, ds->path);
    H5_TRY(ms = H5Screate_simple(ds->rank, count, NULL), MPX_ERR_IO, "%s: rows of %s", r->where,
           ds->path);
    H5_TRY(H5Dwrite(d, rl_mem_type(ds->type), ms, fs, H5P_DEFAULT, data), MPX_ERR_IO,
           "%s: writing %s", r->where, ds->path);
fail:
    mpx_h5_close(ms);
    mpx_h5_close(fs);
    return st;
}

/* Column c of the buffered training rows, packed into r->scratch. */
static void train_column(mpx_runlog *r, int c) {
    for (int i = 0; i < r->n_buf; i++) {
        const mpx_train_row *t = &r->buf[i];
        switch (c) {
        case RL_TR_LOSS: ((float *)r->scratch)[i] = t->loss; break;
        case RL_TR_LR: ((float *)r->scratch)[i] = t->lr; break;
        case RL_TR_LOSS_SCALE: ((double *)r->scratch)[i] = t->loss_scale; break;
        case RL_TR_SKIPPED: r->scratch[i] = t->skipped; break;
        case RL_TR_SPS: ((float *)r->scratch)[i] = t->samples_per_s; break;
        case RL_TR_WALL: ((double *)r->scratch)[i] = t->wall_s; break;
        case RL_TR_STEP: ((int64_t *)r->scratch)[i] = t->step; break;
        }
    }
}

/* Write the buffered training rows and flush; the caller has reserved the space. */
static mpx_status write_and_flush(mpx_runlog *r) {
    mpx_status st = MPX_OK;
    if (r->n_buf > 0) {
        for (int c = 0; c < RL_N_TRAIN; c++) {
            train_column(r, c);
            if ((st = append(r, r->train[c], &rl_train[c], r->n_train, (hsize_t)r->n_buf,
                             r->scratch)) != MPX_OK)
                goto fail;
        }
        r->n_train += (hsize_t)r->n_buf;
        r->n_buf = 0;
    }
    H5_TRY(H5Fflush(r->file, H5F_SCOPE_GLOBAL), MPX_ERR_IO, "%s: flushing to disk", r->where);
    release(r);
fail:
    return stick(r, st);
}

mpx_status mpx_runlog_flush(mpx_runlog *r) {
    MPX_TRY(check_alive(r));
    mpx_h5_quiet();
    if (stick(r, reserve(r, flush_bound(r, 0, 0, 0))) != MPX_OK) return r->err;
    return write_and_flush(r);
}

mpx_status mpx_runlog_train(mpx_runlog *r, const mpx_train_row *row) {
    MPX_TRY(check_alive(r));
    r->buf[r->n_buf++] = *row;
    return r->n_buf == RL_TRAIN_BUF ? mpx_runlog_flush(r) : MPX_OK;
}

mpx_status mpx_runlog_eval(mpx_runlog *r, int64_t step, float loss, float metric) {
    MPX_TRY(check_alive(r));
    mpx_h5_quiet();
    if (stick(r, reserve(r, flush_bound(r, 0, 1, 0))) != MPX_OK) return r->err;
    const void *vals[RL_N_EVAL] = {
        [RL_EV_LOSS] = &loss, [RL_EV_METRIC] = &metric, [RL_EV_STEP] = &step};
    for (int c = 0; c < RL_N_EVAL; c++)
        if (stick(r, append(r, r->eval[c], &rl_eval[c], r->n_eval, 1, vals[c])) != MPX_OK)
            return r->err;
    r->n_eval++;
    return write_and_flush(r);
}

mpx_status mpx_runlog_stats(mpx_runlog *r, int64_t step, const mpx_layer_stats *layers) {
    MPX_TRY(check_alive(r));
    mpx_h5_quiet();
    if (stick(r, reserve(r, flush_bound(r, 1, 0, 0))) != MPX_OK) return r->err;
    for (int c = 0; c < RL_N_STATS; c++) {
        const rl_dset *d = &rl_stats[c];
        const void *row = &step;
        if (d->src != RL_SRC_STEP) {
            /* Gather this member's field of every layer into one [L(, 83)] row. */
            size_t elem = rl_type_size(d->type) * (d->rank == 3 ? MPX_HIST_BINS : 1);
            for (int l = 0; l < r->n_layers; l++) {
                const mpx_layer_stats *ls = &layers[l];
                const char *base = d->src == RL_SRC_ACT     ? (const char *)&ls->act
                                   : d->src == RL_SRC_WGRAD ? (const char *)&ls->wgrad
                                                            : (const char *)ls;
                memcpy(r->scratch + (size_t)l * elem, base + d->off, elem);
            }
            row = r->scratch;
        }
        if (stick(r, append(r, r->stats[c], d, r->n_stats, 1, row)) != MPX_OK) return r->err;
    }
    r->n_stats++;
    return write_and_flush(r);
}

mpx_status mpx_runlog_mark_stopped(mpx_runlog *r, const char *reason) {
    MPX_TRY(check_alive(r));
    mpx_h5_quiet();
    uint64_t extra = reason ? strlen(reason) : 0;
    if (stick(r, reserve(r, flush_bound(r, 0, 0, extra))) != MPX_OK) return r->err;
    if (stick(r, mpx_h5_attr_str(r->file, "stopped", reason, r->where)) != MPX_OK) return r->err;
    return write_and_flush(r);
}

mpx_status mpx_runlog_close(mpx_runlog *r) {
    if (!r) return MPX_OK;
    mpx_status st = r->err == MPX_OK ? mpx_runlog_flush(r) : check_alive(r);
    mpx_h5_quiet();
    herr_t rc = runlog_close_handles(r);
    if (st == MPX_OK && rc < 0) st = mpx_h5_fail(MPX_ERR_IO, "%s: closing", r->where);
    runlog_free(r);
    return st;
}
