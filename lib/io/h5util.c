/* h5util.c — HDF5 helpers for the run file: quiet errors with readable messages, scalar
 * attributes, string columns. See h5util.h. */
#include "h5util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H5MSG_CAP = 512 };

void mpx_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* H5E_WALK_UPWARD visits the innermost error (where it was detected) first. */
static herr_t innermost_cb(unsigned n, const H5E_error2_t *e, void *data) {
    if (n == 0 && e->desc) snprintf((char *)data, H5MSG_CAP, "%s", e->desc);
    return 0;
}

mpx_status mpx_h5_fail(mpx_status code, const char *fmt, ...) {
    char h5msg[H5MSG_CAP] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, h5msg);
    /* The POSIX driver's message is long ("file write failed: time = ..., errno = 28, error
     * message = 'No space left on device', buf = ..."): keep only the system's words. */
    const char *key = "error message = '";
    char *p = strstr(h5msg, key);
    if (p) {
        p += strlen(key);
        char *q = strchr(p, '\'');
        if (q) *q = '\0';
        memmove(h5msg, p, strlen(p) + 1);
    }
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (h5msg[0]) return mpx_fail(code, "%s: %s", text, h5msg);
    return mpx_fail(code, "%s", text);
}

void mpx_h5_close(hid_t id) {
    if (id < 0) return;
    switch (H5Iget_type(id)) {
    case H5I_FILE: H5Fclose(id); break;
    case H5I_GROUP: H5Gclose(id); break;
    case H5I_DATASET: H5Dclose(id); break;
    case H5I_DATASPACE: H5Sclose(id); break;
    case H5I_DATATYPE: H5Tclose(id); break;
    case H5I_ATTR: H5Aclose(id); break;
    case H5I_GENPROP_LST: H5Pclose(id); break;
    default: break;
    }
}

hid_t mpx_h5_vlen_str(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return t;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* Create (or replace) a scalar attribute and write one value of `mem_type`. */
static mpx_status attr_scalar(hid_t obj, const char *name, hid_t file_type, hid_t mem_type,
                              const void *value, const char *where) {
    mpx_status st = MPX_OK;
    hid_t sp = -1, a = -1;
    htri_t exists;
    H5_TRY(exists = H5Aexists(obj, name), MPX_ERR_IO, "%s: attribute '%s'", where, name);
    if (exists)
        H5_TRY(H5Adelete(obj, name), MPX_ERR_IO, "%s: replacing attribute '%s'", where, name);
    H5_TRY(sp = H5Screate(H5S_SCALAR), MPX_ERR_IO, "%s: attribute '%s'", where, name);
    H5_TRY(a = H5Acreate2(obj, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT), MPX_ERR_IO,
           "%s: creating attribute '%s'", where, name);
    H5_TRY(H5Awrite(a, mem_type, value), MPX_ERR_IO, "%s: writing attribute '%s'", where, name);
fail:
    mpx_h5_close(a);
    mpx_h5_close(sp);
    return st;
}

mpx_status mpx_h5_attr_str(hid_t obj, const char *name, const char *value, const char *where) {
    mpx_status st = MPX_OK;
    hid_t t = -1;
    const char *v = value ? value : "";
    H5_TRY(t = mpx_h5_vlen_str(), MPX_ERR_IO, "%s: string type", where);
    st = attr_scalar(obj, name, t, t, &v, where);
fail:
    mpx_h5_close(t);
    return st;
}

mpx_status mpx_h5_attr_i64(hid_t obj, const char *name, int64_t value, const char *where) {
    return attr_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, where);
}

mpx_status mpx_h5_attr_i32(hid_t obj, const char *name, int32_t value, const char *where) {
    return attr_scalar(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value, where);
}

mpx_status mpx_h5_attr_read_text(hid_t obj, const char *name, char **value, const char *where) {
    mpx_status st = MPX_OK;
    hid_t a = -1, ft = -1, mt = -1;
    char *s = NULL, buf[64];
    htri_t exists;
    *value = NULL;
    H5_TRY(exists = H5Aexists(obj, name), MPX_ERR_IO, "%s: attribute '%s'", where, name);
    if (!exists) return mpx_fail(MPX_ERR_INPUT, "%s has no attribute '%s'", where, name);
    H5_TRY(a = H5Aopen(obj, name, H5P_DEFAULT), MPX_ERR_IO, "%s: opening attribute '%s'", where,
           name);
    H5_TRY(ft = H5Aget_type(a), MPX_ERR_IO, "%s: type of attribute '%s'", where, name);
    H5T_class_t cls = H5Tget_class(ft);
    if (cls == H5T_STRING) {
        htri_t var;
        H5_TRY(var = H5Tis_variable_str(ft), MPX_ERR_IO, "%s: attribute '%s'", where, name);
        H5_TRY(mt = H5Tcopy(H5T_C_S1), MPX_ERR_IO, "%s: attribute '%s'", where, name);
        /* HDF5 converts no string between character sets: read in the file's own. */
        H5_TRY(H5Tset_cset(mt, H5Tget_cset(ft)), MPX_ERR_IO, "%s: attribute '%s'", where, name);
        if (var) {
            char *v = NULL;
            H5_TRY(H5Tset_size(mt, H5T_VARIABLE), MPX_ERR_IO, "%s: attribute '%s'", where, name);
            H5_TRY(H5Aread(a, mt, &v), MPX_ERR_IO, "%s: reading attribute '%s'", where, name);
            s = strdup(v ? v : "");
            H5free_memory(v);
        } else {
            size_t n = H5Tget_size(ft);
            H5_TRY(H5Tset_size(mt, n + 1), MPX_ERR_IO, "%s: attribute '%s'", where,
                   name); /* +NUL */
            if ((s = calloc(n + 1, 1)))
                H5_TRY(H5Aread(a, mt, s), MPX_ERR_IO, "%s: reading attribute '%s'", where, name);
        }
    } else if (cls == H5T_INTEGER) {
        long long v;
        H5_TRY(H5Aread(a, H5T_NATIVE_LLONG, &v), MPX_ERR_IO, "%s: reading attribute '%s'", where,
               name);
        snprintf(buf, sizeof buf, "%lld", v);
        s = strdup(buf);
    } else if (cls == H5T_FLOAT) {
        double v;
        H5_TRY(H5Aread(a, H5T_NATIVE_DOUBLE, &v), MPX_ERR_IO, "%s: reading attribute '%s'", where,
               name);
        snprintf(buf, sizeof buf, "%.17g", v);
        s = strdup(buf);
    } else {
        st = mpx_fail(MPX_ERR_INPUT, "%s: attribute '%s' is not a string or a number", where, name);
        goto fail;
    }
    if (!s) {
        st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading attribute '%s'", name);
        goto fail;
    }
    *value = s;
    s = NULL;
fail:
    free(s);
    mpx_h5_close(mt);
    mpx_h5_close(ft);
    mpx_h5_close(a);
    return st;
}

void mpx_h5_free_strings(char **s, int64_t n) {
    if (!s) return;
    for (int64_t i = 0; i < n; i++) free(s[i]);
    free(s);
}

mpx_status mpx_h5_read_strings(hid_t file, const char *name, int64_t *n_out, char ***out,
                               const char *where) {
    mpx_status st = MPX_OK;
    hid_t d = -1, ft = -1, mt = -1, sp = -1;
    char **res = NULL, **v = NULL, *raw = NULL;
    int64_t n = 0;
    htri_t var;
    *out = NULL;
    *n_out = 0;
    H5_TRY(d = H5Dopen2(file, name, H5P_DEFAULT), MPX_ERR_INPUT, "%s: no dataset '%s'", where,
           name);
    H5_TRY(ft = H5Dget_type(d), MPX_ERR_IO, "%s: type of '%s'", where, name);
    H5_TRY(sp = H5Dget_space(d), MPX_ERR_IO, "%s: shape of '%s'", where, name);
    if (H5Tget_class(ft) != H5T_STRING || H5Sget_simple_extent_ndims(sp) != 1) {
        st = mpx_fail(MPX_ERR_INPUT, "%s: '%s' is not a 1-D string dataset", where, name);
        goto fail;
    }
    n = (int64_t)H5Sget_simple_extent_npoints(sp);
    size_t cap = n > 0 ? (size_t)n : 1;
    if (!(res = calloc(cap, sizeof *res)) || !(v = calloc(cap, sizeof *v))) {
        st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", name);
        goto fail;
    }
    H5_TRY(var = H5Tis_variable_str(ft), MPX_ERR_IO, "%s: type of '%s'", where, name);
    H5_TRY(mt = H5Tcopy(H5T_C_S1), MPX_ERR_IO, "%s: type of '%s'", where, name);
    /* HDF5 converts no string between character sets: read in the file's own. */
    H5_TRY(H5Tset_cset(mt, H5Tget_cset(ft)), MPX_ERR_IO, "%s: type of '%s'", where, name);
    if (var) {
        H5_TRY(H5Tset_size(mt, H5T_VARIABLE), MPX_ERR_IO, "%s: type of '%s'", where, name);
        H5_TRY(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), MPX_ERR_IO, "%s: reading '%s'",
               where, name);
        for (int64_t i = 0; i < n; i++) res[i] = strdup(v[i] ? v[i] : "");
        H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
    } else {
        size_t w = H5Tget_size(ft) + 1; /* +1: room for the NUL */
        H5_TRY(H5Tset_size(mt, w), MPX_ERR_IO, "%s: type of '%s'", where, name);
        if ((raw = calloc(cap, w)))
            H5_TRY(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw), MPX_ERR_IO,
                   "%s: reading '%s'", where, name);
        for (int64_t i = 0; raw && i < n; i++) res[i] = strdup(raw + (size_t)i * w);
    }
    for (int64_t i = 0; i < n; i++)
        if (!res[i]) {
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", name);
            goto fail;
        }
    *out = res;
    *n_out = n;
    res = NULL;
fail:
    mpx_h5_free_strings(res, n);
    free(v);
    free(raw);
    mpx_h5_close(sp);
    mpx_h5_close(mt);
    mpx_h5_close(ft);
    mpx_h5_close(d);
    return st;
}
