/*
 * Tuning database text -> records (format in tunedb.h). Pure: no I/O, no
 * context state, no call into the ops; the fuzzer links this file with
 * error.c and oplist.c alone.
 */
#include "tunedb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_path(const char *s, oclf_path *out)
{
    if (s && strcmp(s, "fused") == 0)
        return *out = OCLF_PATH_FUSED, 1;
    if (s && strcmp(s, "unfused") == 0)
        return *out = OCLF_PATH_UNFUSED, 1;
    return 0;
}

static int parse_alt(json_t *j, tune_alt *out)
{
    memset(out, 0, sizeof *out);
    json_t *params = json_object_get(j, "params");
    if (!json_is_object(j) || !parse_path(json_string_value(json_object_get(j, "path")), &out->path))
        return 0;
    if (params && !json_is_object(params))
        return 0;
    const char *key;
    json_t *v;
    json_object_foreach(params, key, v) {
        if (!json_is_integer(v) || oclf_params_set(&out->params, key, json_integer_value(v)))
            return 0;
    }
    return 1;
}

static void copy_str(char *dst, size_t len, json_t *j)
{
    const char *s = json_string_value(j);
    snprintf(dst, len, "%s", s ? s : "");
}

int oclf_tunedb_parse_record(json_t *j, tune_rec *r)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(j))
        return -1;
    const char *op = json_string_value(json_object_get(j, "op"));
    const char *dt = json_string_value(json_object_get(j, "dtype"));
    json_t *dev = json_object_get(j, "device"), *shape = json_object_get(j, "shape");
    if (!op || !dt || !json_is_object(dev) || !json_is_object(shape))
        return -1;
    if (!parse_alt(json_object_get(j, "choice"), &r->choice))
        return -1;
    json_t *alts = json_object_get(j, "alternatives");
    if (alts && !json_is_array(alts))
        return -1;
    size_t i;
    json_t *a;
    json_array_foreach(alts, i, a) {
        tune_alt t;
        if (!parse_alt(a, &t))
            return -1;
        if (t.path != r->choice.path)
            r->alt = t;
    }
    copy_str(r->vendor, sizeof r->vendor, json_object_get(dev, "vendor"));
    copy_str(r->name, sizeof r->name, json_object_get(dev, "name"));
    copy_str(r->driver, sizeof r->driver, json_object_get(dev, "driver"));
    copy_str(r->type, sizeof r->type, json_object_get(dev, "type"));
    r->op = oclf_op_from_name(op);
    r->dtype = OCLF_DTYPE_COUNT_;
    for (int d = 0; d < OCLF_DTYPE_COUNT_; d++)
        if (strcmp(dt, oclf_dtype_name((oclf_dtype)d)) == 0)
            r->dtype = (oclf_dtype)d;
    if (r->op == OCLF_OP_COUNT_ || r->dtype == OCLF_DTYPE_COUNT_)
        return 0;
    const oclf_op_key *key = oclf_op_key_get(r->op);
    for (unsigned k = 0; k < key->ndims; k++) {
        json_t *v = json_object_get(shape, key->dims[k]);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return -1;
        r->dim[k] = (uint64_t)json_integer_value(v);
    }
    return 1;
}

/* Line and column of the first `key` in the document, for an error about its
 * value: jansson keeps no positions for values, only for syntax errors. The
 * text is `len` bytes and not NUL-terminated (files are read as they are). */
static void find_key(const char *text, size_t len, const char *key, int *line, int *col)
{
    *line = 1, *col = 1;
    const size_t klen = strlen(key);
    const char *hit = NULL;
    for (size_t i = 0; text && i + klen <= len && !hit; i++)
        if (memcmp(text + i, key, klen) == 0)
            hit = text + i;
    if (!hit)
        return;
    for (const char *p = text; p < hit; p++) {
        if (*p == '\n')
            ++*line, *col = 1;
        else
            ++*col;
    }
}

oclf_status oclf_tunedb_parse(const oclf_context *ctx, const char *file, const char *text,
                              size_t len, tune_rec **recs, size_t *nrecs, size_t *malformed)
{
    *recs = NULL, *nrecs = 0, *malformed = 0;
    json_error_t e;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return oclf_fail(ctx, OCLF_DB_ERROR, "tuning database %s:%d:%d: %s", file, e.line,
                         e.column, e.text);
    int line, col;
    json_t *fmt = json_object_get(root, "format");
    json_t *arr = json_object_get(root, "records");
    oclf_status st = OCLF_SUCCESS;
    if (!json_is_object(root)) {
        st = oclf_fail(ctx, OCLF_DB_ERROR, "tuning database %s:1:1: not a JSON object", file);
    } else if (!fmt) {
        st = oclf_fail(ctx, OCLF_DB_ERROR,
                       "tuning database %s:1:1: no \"format\" member (this library reads 1)",
                       file);
    } else if (!json_is_integer(fmt) || json_integer_value(fmt) != 1) {
        find_key(text, len, "\"format\"", &line, &col);
        if (json_is_integer(fmt))
            st = oclf_fail(ctx, OCLF_DB_ERROR,
                           "tuning database %s:%d:%d: unknown format %lld (this library reads "
                           "format 1)",
                           file, line, col, (long long)json_integer_value(fmt));
        else
            st = oclf_fail(ctx, OCLF_DB_ERROR,
                           "tuning database %s:%d:%d: \"format\" is not a number", file, line,
                           col);
    } else if (!json_is_array(arr)) {
        find_key(text, len, "\"records\"", &line, &col);
        st = oclf_fail(ctx, OCLF_DB_ERROR, "tuning database %s:%d:%d: \"records\" is not an array",
                       file, line, col);
    }
    if (st != OCLF_SUCCESS) {
        json_decref(root);
        return st;
    }
    size_t n = json_array_size(arr);
    tune_rec *r = n ? malloc(n * sizeof *r) : NULL;
    if (n && !r) {
        json_decref(root);
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "tuning database %s: out of host memory",
                         file);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = oclf_tunedb_parse_record(json_array_get(arr, i), &r[k]);
        if (ok > 0)
            k++;
        else if (ok < 0)
            ++*malformed;
    }
    json_decref(root);
    *recs = r, *nrecs = k;
    return OCLF_SUCCESS;
}


oclf_status oclf_tunedb_parse_text(const char *text, size_t len, size_t *records)
{
    tune_rec *r;
    size_t n, bad;
    oclf_status st = oclf_tunedb_parse(NULL, "<memory>", text, len, &r, &n, &bad);
    free(r);
    if (records)
        *records = st == OCLF_SUCCESS ? n : 0;
    return st;
}

