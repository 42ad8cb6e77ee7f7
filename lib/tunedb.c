/*
 * Tuning database: loading (jansson), record matching, the per-context
 * lookup cache, checking and the locked, atomic merge-write the tuner uses.
 *
 * Document (format 1):
 *   {"format": 1, "records": [
 *     {"device": {"vendor", "name", "driver", "type", ...}, "op", "dtype",
 *      "shape": {<op's dims by name>}, "choice": {"path", "params": {..}},
 *      "alternatives": [{"path", "params", "time_ns"}],      (optional)
 *      "time_ns", "unfused_time_ns", "default_time_ns", "copy_gbps",
 *      "tuner", "date"}]}
 *
 * "alternatives" carries the best parameters of the path not chosen, so a
 * caller that forces a path still gets tuned parameters for it.
 *
 * The chain per context: context database, per-machine database, built-in
 * databases (the JSON files of tune/db, compiled in). Each file is parsed once into
 * compact records when the context first misses its lookup cache; the JSON
 * tree is dropped at once. Records of ops or dtypes this library does not
 * know are ignored (a newer library may have written them).
 */
/* flock() is BSD, not POSIX: glibc declares it under _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Built-in databases (the JSON files of tune/db; tools/embed_cl.py). */
extern const oclf_embedded_source oclf_embedded_dbs[];
extern const size_t oclf_embedded_db_count;

typedef struct tune_alt {
    oclf_path path;
    oclf_params params;
} tune_alt;

typedef struct tune_rec {
    char vendor[128], name[256], driver[128], type[16];
    oclf_op op;
    oclf_dtype dtype;
    uint64_t dim[4];
    tune_alt choice;
    tune_alt alt; /* alt.path == AUTO: none */
} tune_rec;

typedef struct tune_src {
    char label[64];
    char *file; /* path, or the built-in name */
    tune_rec *recs;
    size_t n;
} tune_src;

enum { CACHE_SLOTS = 256, CACHE_PROBE = 8, MAX_SOURCES = 8 };

typedef struct cache_entry {
    int used;
    oclf_op op;
    oclf_dtype dtype;
    oclf_path path;
    uint64_t dim[4];
    oclf_resolved r;
} cache_entry;

struct oclf_tune_cache {
    int loaded;
    tune_src src[MAX_SOURCES];
    int nsrc;
    cache_entry slot[CACHE_SLOTS];
};

/* ---- parsing ----------------------------------------------------------------*/

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

/* 1: usable; 0: for an op/dtype unknown here (ignored); -1: malformed. */
static int parse_record(json_t *j, tune_rec *r)
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
    const oclf_op_info *info = oclf_op_get(r->op);
    for (unsigned k = 0; k < info->ndims; k++) {
        json_t *v = json_object_get(shape, info->dims[k]);
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

/* Parses a whole document (text of `len` bytes from `file`). On failure
 * records "file:line:column: why" with oclf_fail and returns the status. */
static oclf_status parse_db(const oclf_context *ctx, const char *file, const char *text,
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
        int ok = parse_record(json_array_get(arr, i), &r[k]);
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
    oclf_status st = parse_db(NULL, "<memory>", text, len, &r, &n, &bad);
    free(r);
    if (records)
        *records = st == OCLF_SUCCESS ? n : 0;
    return st;
}

/* Reads a whole file. OCLF_IO_ERROR (ENOENT in *err_no) when it cannot. */
static oclf_status read_file(const oclf_context *ctx, const char *path, char **text, size_t *len,
                             int *err_no)
{
    *text = NULL, *len = 0, *err_no = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err_no = errno;
        return oclf_fail(ctx, OCLF_IO_ERROR, "tuning database %s: %s", path, strerror(errno));
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb)
            free(buf);
        buf = nb, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return oclf_fail(ctx, bad ? OCLF_IO_ERROR : OCLF_OUT_OF_RESOURCES,
                         "tuning database %s: cannot read", path);
    }
    *text = buf, *len = n;
    return OCLF_SUCCESS;
}

oclf_status oclf_tuning_db_default_path(char *buf, size_t len)
{
    const char *base = getenv("XDG_DATA_HOME"), *suffix = "/oclfuse/tuning.json";
    if (!base || !*base) {
        base = getenv("HOME");
        suffix = "/.local/share/oclfuse/tuning.json";
    }
    if (!buf || !base || !*base)
        return oclf_fail(NULL, OCLF_IO_ERROR,
                         "neither XDG_DATA_HOME nor HOME is set: no per-machine database");
    if ((size_t)snprintf(buf, len, "%s%s", base, suffix) >= len)
        return oclf_fail(NULL, OCLF_IO_ERROR, "per-machine database path too long");
    return OCLF_SUCCESS;
}

oclf_status oclf_tuning_db_check(const char *path, size_t *records)
{
    if (!path)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "oclf_tuning_db_check: path is NULL");
    char *text;
    size_t len, n, bad;
    int e;
    tune_rec *r;
    oclf_status st = read_file(NULL, path, &text, &len, &e);
    if (st != OCLF_SUCCESS)
        return st;
    st = parse_db(NULL, path, text, len, &r, &n, &bad);
    free(text);
    free(r);
    if (st == OCLF_SUCCESS && bad)
        st = oclf_fail(NULL, OCLF_DB_ERROR, "tuning database %s: %zu malformed record(s)", path,
                       bad);
    if (st == OCLF_SUCCESS && records)
        *records = n;
    return st;
}

/* ---- the chain ----------------------------------------------------------------*/

static void add_source(oclf_context *ctx, struct oclf_tune_cache *tc, const char *label,
                       const char *file, const char *text, size_t len)
{
    if (tc->nsrc >= MAX_SOURCES)
        return;
    tune_src *s = &tc->src[tc->nsrc];
    size_t bad = 0;
    if (parse_db(ctx, file, text, len, &s->recs, &s->n, &bad) != OCLF_SUCCESS) {
        /* The error stays in oclf_last_error; the call goes on with the
         * next source. */
        atomic_fetch_add(&ctx->n_db_errors, 1);
        oclf_log(ctx, OCLF_LOG_WARN, "%s (%s) ignored: %s", label, file, oclf_last_error(ctx));
        return;
    }
    if (bad)
        oclf_log(ctx, OCLF_LOG_WARN, "%s %s: %zu malformed record(s) ignored", label, file, bad);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->file = malloc(strlen(file) + 1);
    if (!s->file) {
        free(s->recs);
        return;
    }
    strcpy(s->file, file);
    tc->nsrc++;
}

static void add_file(oclf_context *ctx, struct oclf_tune_cache *tc, const char *label,
                     const char *path, int must_exist)
{
    char *text;
    size_t len;
    int e;
    if (read_file(ctx, path, &text, &len, &e) != OCLF_SUCCESS) {
        if (must_exist || e != ENOENT)
            oclf_log(ctx, OCLF_LOG_WARN, "%s: %s", label, oclf_last_error(ctx));
        return;
    }
    add_source(ctx, tc, label, path, text, len);
    free(text);
}

/* Called with ctx->lock held. */
static struct oclf_tune_cache *tune_load(oclf_context *ctx)
{
    if (!ctx->tune) {
        ctx->tune = calloc(1, sizeof *ctx->tune);
        if (!ctx->tune)
            return NULL;
    }
    struct oclf_tune_cache *tc = ctx->tune;
    if (tc->loaded)
        return tc;
    tc->loaded = 1;
    if (ctx->no_tuning_db)
        return tc;
    if (ctx->tuning_db)
        add_file(ctx, tc, "context database", ctx->tuning_db, 1);
    char machine[4096];
    if (oclf_tuning_db_default_path(machine, sizeof machine) == OCLF_SUCCESS)
        add_file(ctx, tc, "per-machine database", machine, 0);
    for (size_t i = 0; i < oclf_embedded_db_count; i++)
        add_source(ctx, tc, "built-in database", oclf_embedded_dbs[i].name,
                   (const char *)oclf_embedded_dbs[i].data, oclf_embedded_dbs[i].size);
    return tc;
}

const char *oclf_tune_source_name(const oclf_context *ctx, int source)
{
    static _Thread_local char buf[4200];
    const struct oclf_tune_cache *tc = ctx->tune;
    if (!tc || source < 0 || source >= tc->nsrc)
        return "heuristic";
    snprintf(buf, sizeof buf, "%s %s", tc->src[source].label, tc->src[source].file);
    return buf;
}

/* 0 exact (vendor + name + driver), 1 vendor + name, 2 vendor + type,
 * 3 type, 4 no match. */
static int device_level(const oclf_device_info *d, const tune_rec *r)
{
    const char *type = oclf_device_type_name(d->type);
    const int vendor = strcmp(r->vendor, d->vendor) == 0, name = strcmp(r->name, d->name) == 0;
    const int tmatch = strcmp(r->type, type) == 0;
    if (vendor && name && strcmp(r->driver, d->driver) == 0)
        return 0;
    if (vendor && name)
        return 1;
    if (vendor && tmatch)
        return 2;
    return tmatch ? 3 : 4;
}

/* Log-distance over dims, so 4096 vs 8192 weighs like 1 vs 2; a record in
 * the same power-of-two bucket on every dim sorts before any other. */
static double shape_distance(const oclf_shape *a, const uint64_t *b, unsigned ndims, int *same)
{
    double d = 0;
    *same = 1;
    for (unsigned k = 0; k < ndims; k++) {
        double x = log2((double)(a->dim[k] ? a->dim[k] : 1));
        double y = log2((double)(b[k] ? b[k] : 1));
        d += fabs(x - y);
        *same &= ceil(x) == ceil(y);
    }
    return d;
}

/* A dim named "form" identifies (an expression's canonical-form hash); it
 * does not measure: a record matches it exactly or not at all. */
static int identity_differs(const oclf_op_info *info, const uint64_t *dim, const oclf_shape *s)
{
    for (unsigned k = 0; k < info->ndims; k++)
        if (strcmp(info->dims[k], "form") == 0 && dim[k] != s->dim[k])
            return 1;
    return 0;
}

int oclf_tune_candidates(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, oclf_tune_candidate *out, int max)
{
    atomic_fetch_add(&ctx->n_tune_lookups, 1);
    pthread_mutex_lock(&ctx->lock);
    struct oclf_tune_cache *tc = tune_load(ctx);
    pthread_mutex_unlock(&ctx->lock);
    if (!tc)
        return 0;
    /* Sources never change once loaded, so they are read without the lock. */
    const unsigned ndims = oclf_op_get(op)->ndims;
    int n = 0;
    for (int s = 0; s < tc->nsrc; s++) {
        const int first = n;
        for (size_t i = 0; i < tc->src[s].n; i++) {
            const tune_rec *r = &tc->src[s].recs[i];
            if (r->op != op || r->dtype != dtype || identity_differs(oclf_op_get(op), r->dim, shape))
                continue;
            const tune_alt *a = &r->choice;
            if (path != OCLF_PATH_AUTO && a->path != path)
                a = r->alt.path == path ? &r->alt : NULL;
            int level = device_level(&ctx->info, r), same;
            if (!a || level > 3)
                continue;
            oclf_tune_candidate c;
            c.r.path = a->path;
            c.r.params = a->params;
            c.source = s;
            c.record = (int)i;
            c.level = level;
            c.distance = shape_distance(shape, r->dim, ndims, &same) + (same ? 0 : 1000);
            /* Insertion into this source's sorted run: level, then shape. */
            int pos = n;
            while (pos > first && (out[pos - 1].level > c.level ||
                                   (out[pos - 1].level == c.level &&
                                    out[pos - 1].distance > c.distance)))
                pos--;
            if (pos >= max)
                continue;
            int last = n < max ? n : max - 1;
            memmove(&out[pos + 1], &out[pos], (size_t)(last - pos) * sizeof *out);
            out[pos] = c;
            if (n < max)
                n++;
        }
    }
    return n;
}

/* ---- lookup cache -----------------------------------------------------------*/

static size_t cache_hash(oclf_op op, oclf_dtype dtype, const oclf_shape *s, oclf_path path)
{
    oclf_hash h;
    oclf_hash_init(&h);
    int k[3] = {(int)op, (int)dtype, (int)path};
    oclf_hash_update(&h, k, sizeof k);
    oclf_hash_update(&h, s->dim, sizeof s->dim);
    return (size_t)(h.a % CACHE_SLOTS);
}

static int entry_is(const cache_entry *e, oclf_op op, oclf_dtype dtype, const oclf_shape *s,
                    oclf_path path)
{
    return e->used && e->op == op && e->dtype == dtype && e->path == path &&
           memcmp(e->dim, s->dim, sizeof e->dim) == 0;
}

int oclf_tune_cache_get(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                        oclf_path path, oclf_resolved *out)
{
    const size_t h = cache_hash(op, dtype, shape, path);
    int hit = 0;
    pthread_mutex_lock(&ctx->lock);
    if (ctx->tune) {
        for (int i = 0; i < CACHE_PROBE && !hit; i++) {
            const cache_entry *e = &ctx->tune->slot[(h + (size_t)i) % CACHE_SLOTS];
            if (entry_is(e, op, dtype, shape, path)) {
                *out = e->r;
                hit = 1;
            }
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    if (hit)
        atomic_fetch_add(&ctx->n_tune_hits, 1);
    return hit;
}

void oclf_tune_cache_put(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, const oclf_resolved *r)
{
    const size_t h = cache_hash(op, dtype, shape, path);
    pthread_mutex_lock(&ctx->lock);
    if (ctx->tune) { /* allocated by the search that preceded this */
        /* A free or matching slot in the probe window, else the home slot
         * is overwritten: a fixed table keeps steady state allocation-free
         * whatever number of shapes a caller runs. */
        cache_entry *dst = &ctx->tune->slot[h];
        for (int i = 0; i < CACHE_PROBE; i++) {
            cache_entry *e = &ctx->tune->slot[(h + (size_t)i) % CACHE_SLOTS];
            if (!e->used || entry_is(e, op, dtype, shape, path)) {
                dst = e;
                break;
            }
        }
        dst->used = 1;
        dst->op = op;
        dst->dtype = dtype;
        dst->path = path;
        memcpy(dst->dim, shape->dim, sizeof dst->dim);
        dst->r = *r;
    }
    pthread_mutex_unlock(&ctx->lock);
}

void oclf_tune_cache_free(oclf_context *ctx)
{
    if (!ctx || !ctx->tune)
        return;
    for (int s = 0; s < ctx->tune->nsrc; s++) {
        free(ctx->tune->src[s].recs);
        free(ctx->tune->src[s].file);
    }
    free(ctx->tune);
    ctx->tune = NULL;
}

/* ---- explain ------------------------------------------------------------------*/

static size_t append(char *buf, size_t len, size_t used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t len, size_t used, const char *fmt, ...)
{
    if (used >= len)
        return used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
    return n < 0 ? used : used + (size_t)n;
}

static size_t append_choice(char *buf, size_t len, size_t used, const oclf_resolved *r)
{
    used = append(buf, len, used, "%s", r->path == OCLF_PATH_UNFUSED ? "unfused" : "fused");
    for (unsigned i = 0; i < r->params.count; i++)
        used = append(buf, len, used, " %s=%lld", r->params.item[i].name,
                      (long long)r->params.item[i].value);
    return used;
}

oclf_status oclf_tuning_explain(oclf_context *ctx, const char *op_name, oclf_dtype dtype,
                                const uint64_t *dims, unsigned ndims, oclf_path path, char *buf,
                                size_t len)
{
    oclf_op op = oclf_op_from_name(op_name);
    if (!ctx || !buf || !len || op == OCLF_OP_COUNT_ || !oclf_dtype_name(dtype) ||
        (unsigned)path > OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "oclf_tuning_explain: unknown op '%s', dtype, path or NULL argument",
                         op_name ? op_name : "(null)");
    const oclf_op_info *info = oclf_op_get(op);
    if (ndims != info->ndims || !dims)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "oclf_tuning_explain: %s takes %u dims",
                         op_name, info->ndims);
    oclf_shape shape = {{0, 0, 0, 0}};
    for (unsigned k = 0; k < ndims; k++)
        shape.dim[k] = dims[k];
    static const char *const levels[] = {"exact device", "vendor+name", "vendor+type",
                                         "device type"};
    enum { MAXC = 8 };
    oclf_tune_candidate cand[MAXC];
    int n = oclf_tune_candidates(ctx, op, dtype, &shape, path, cand, MAXC);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        const tune_rec *r = &ctx->tune->src[cand[i].source].recs[cand[i].record];
        oclf_resolved full;
        memset(&full, 0, sizeof full);
        full.path = cand[i].r.path;
        info->heuristic(ctx, dtype, &shape, full.path, &full.params);
        for (unsigned k = 0; k < cand[i].r.params.count; k++)
            oclf_params_set(&full.params, cand[i].r.params.item[k].name,
                            cand[i].r.params.item[k].value);
        int ok = info->validate(ctx, op, dtype, &shape, &full, 1) == OCLF_SUCCESS;
        used = append(buf, len, used, "%s: %s record %d (%s match; tuned shape", 
                      ok ? "uses" : "skips", oclf_tune_source_name(ctx, cand[i].source),
                      cand[i].record, levels[cand[i].level]);
        for (unsigned k = 0; k < ndims; k++)
            used = append(buf, len, used, " %s=%llu", info->dims[k],
                          (unsigned long long)r->dim[k]);
        used = append(buf, len, used, "): ");
        used = append_choice(buf, len, used, &full);
        if (!ok)
            used = append(buf, len, used, " -- %s", oclf_last_error(ctx));
        used = append(buf, len, used, "\n");
        if (ok)
            return OCLF_SUCCESS;
    }
    oclf_resolved h;
    memset(&h, 0, sizeof h);
    h.path = path == OCLF_PATH_AUTO ? OCLF_PATH_FUSED : path;
    info->heuristic(ctx, dtype, &shape, h.path, &h.params);
    used = append(buf, len, used, "uses: heuristic (no usable tuning record): ");
    used = append_choice(buf, len, used, &h);
    append(buf, len, used, "\n");
    return OCLF_SUCCESS;
}

/* ---- merge-write ---------------------------------------------------------------*/

static json_t *device_json(const oclf_context *ctx)
{
    const oclf_device_info *d = &ctx->info;
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:b}", "vendor", d->vendor, "name",
                     d->name, "driver", d->driver, "type", oclf_device_type_name(d->type),
                     "compute_units", (json_int_t)d->compute_units, "max_wgs",
                     (json_int_t)d->max_wgs, "local_mem", (json_int_t)d->local_mem, "fp16",
                     d->fp16);
}

/* Identity of a record: device, op, dtype and shape. NULL when malformed. */
static char *record_key(json_t *r)
{
    json_t *dev = json_object_get(r, "device");
    const char *op = json_string_value(json_object_get(r, "op"));
    const char *dt = json_string_value(json_object_get(r, "dtype"));
    json_t *shape = json_object_get(r, "shape");
    if (!json_is_object(dev) || !op || !dt || !json_is_object(shape))
        return NULL;
    char *sh = json_dumps(shape, JSON_COMPACT | JSON_SORT_KEYS);
    if (!sh)
        return NULL;
    const char *v = json_string_value(json_object_get(dev, "vendor"));
    const char *n = json_string_value(json_object_get(dev, "name"));
    const char *dr = json_string_value(json_object_get(dev, "driver"));
    const char *t = json_string_value(json_object_get(dev, "type"));
    size_t len = strlen(sh) + strlen(op) + strlen(dt) + 64 + (v ? strlen(v) : 0) +
                 (n ? strlen(n) : 0) + (dr ? strlen(dr) : 0) + (t ? strlen(t) : 0);
    char *k = malloc(len);
    if (k)
        snprintf(k, len, "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", v ? v : "", n ? n : "",
                 dr ? dr : "", t ? t : "", op, dt, sh);
    free(sh);
    return k;
}

/* Adds or replaces `rec` (borrowed) in `records` by identity. */
static int merge_one(json_t *records, json_t *keys, json_t *rec)
{
    char *k = record_key(rec);
    if (!k)
        return -1;
    json_t *idx = json_object_get(keys, k);
    int rc;
    if (idx) {
        rc = json_array_set(records, (size_t)json_integer_value(idx), rec);
    } else {
        rc = json_object_set_new(keys, k, json_integer(json_array_size(records)));
        if (rc == 0)
            rc = json_array_append(records, rec);
    }
    free(k);
    return rc;
}

/* mkdir -p of the folder holding `path`. */
static int make_parent(const char *path)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return -1;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void fsync_parent(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* makes the rename itself durable */
        close(fd);
    }
}

oclf_status oclf_tuning_db_merge(const oclf_context *ctx, const char *path,
                                 const char *records_json)
{
    if (!path || !records_json)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "oclf_tuning_db_merge: NULL argument");
    json_error_t e;
    json_t *in = json_loads(records_json, 0, &e);
    if (!in)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "oclf_tuning_db_merge: records:%d:%d: %s",
                         e.line, e.column, e.text);
    json_t *add = json_is_array(in) ? in : json_object_get(in, "records");
    if (!json_is_array(add)) {
        json_decref(in);
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "oclf_tuning_db_merge: expected an array of records");
    }
    size_t i;
    json_t *rec;
    json_array_foreach(add, i, rec) {
        if (json_is_object(rec) && !json_object_get(rec, "device") && ctx)
            json_object_set_new(rec, "device", device_json(ctx));
        tune_rec tmp;
        if (parse_record(rec, &tmp) < 0) {
            json_decref(in);
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "oclf_tuning_db_merge: record %zu is malformed (device, op, dtype, "
                             "shape, choice)",
                             i);
        }
    }

    oclf_status st = OCLF_SUCCESS;
    char lock[4200], tmp[4200];
    snprintf(lock, sizeof lock, "%s.lock", path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int lfd = -1;
    json_t *root = NULL, *keys = json_object();
    if (make_parent(path) != 0 || (lfd = open(lock, O_RDWR | O_CREAT, 0644)) < 0) {
        st = oclf_fail(ctx, OCLF_IO_ERROR, "tuning database %s: cannot create: %s", path,
                       strerror(errno));
        goto out;
    }
    /* The lock spans read-merge-write so a concurrent writer's records are
     * on disk before we read, and ours before it reads. */
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            st = oclf_fail(ctx, OCLF_IO_ERROR, "tuning database %s: flock: %s", lock,
                           strerror(errno));
            goto out;
        }
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!root) {
        struct stat sb;
        if (stat(path, &sb) == 0) {
            /* Damaged: kept aside for inspection rather than overwritten. */
            char aside[4300];
            snprintf(aside, sizeof aside, "%s.damaged-%ld", path, (long)time(NULL));
            if (rename(path, aside) != 0) {
                st = oclf_fail(ctx, OCLF_DB_ERROR, "tuning database %s:%d:%d: %s", path, e.line,
                               e.column, e.text);
                goto out;
            }
        }
        root = json_pack("{s:i, s:[]}", "format", 1, "records");
    }
    json_t *fmt = json_object_get(root, "format");
    json_t *records = json_object_get(root, "records");
    if (!json_is_integer(fmt) || json_integer_value(fmt) != 1 || !json_is_array(records)) {
        /* Never rewrite a format this library does not understand. */
        st = oclf_fail(ctx, OCLF_DB_ERROR,
                       "tuning database %s: not format 1; refusing to overwrite it", path);
        goto out;
    }
    json_array_foreach(records, i, rec) {
        char *k = record_key(rec);
        if (k)
            json_object_set_new(keys, k, json_integer((json_int_t)i));
        free(k);
    }
    json_array_foreach(add, i, rec) {
        if (merge_one(records, keys, rec) != 0) {
            st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "oclf_tuning_db_merge: out of memory");
            goto out;
        }
    }
    FILE *f = fopen(tmp, "w");
    if (!f || json_dumpf(root, f, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0 ||
        fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        st = oclf_fail(ctx, OCLF_IO_ERROR, "tuning database %s: cannot write: %s", tmp,
                       strerror(errno));
        if (f)
            fclose(f);
        unlink(tmp);
        goto out;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        st = oclf_fail(ctx, OCLF_IO_ERROR, "tuning database %s: cannot replace: %s", path,
                       strerror(errno));
        unlink(tmp);
        goto out;
    }
    fsync_parent(path);
out:
    if (lfd >= 0)
        close(lfd); /* releases the lock */
    json_decref(root);
    json_decref(keys);
    json_decref(in);
    return st;
}
