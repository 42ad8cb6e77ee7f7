/*
 * The tuning databases of a context: the chain (context database,
 * per-machine database, the built-in databases compiled in from tune/db),
 * each parsed once into compact records when the context first needs one
 * (the JSON tree is dropped at once), and the records that match a call,
 * in order of preference. Reads files; decides nothing: dispatch.c
 * validates the candidates and falls back to the heuristic.
 */
#include "tunedb.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Built-in databases (the JSON files of tune/db; tools/embed_cl.py). */
extern const oclf_embedded_source oclf_embedded_dbs[];
extern const size_t oclf_embedded_db_count;

typedef struct tune_src {
    char label[64];
    char *file; /* path, or the built-in name */
    tune_rec *recs;
    size_t n;
} tune_src;

enum { MAX_SOURCES = 8 };

struct oclf_tunedb {
    int loaded;
    tune_src src[MAX_SOURCES];
    int nsrc;
};

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


/* Without oclf_enter: the context's first op call reaches this while
 * loading the databases, and its later errors must still name that op. */
static oclf_status default_path(char *buf, size_t len)
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

oclf_status oclf_tuning_db_default_path(char *buf, size_t len)
{
    oclf_enter(__func__);
    return default_path(buf, len);
}

oclf_status oclf_tuning_db_check(const char *path, size_t *records)
{
    oclf_enter(__func__);
    if (!path)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "oclf_tuning_db_check: path is NULL");
    char *text;
    size_t len, n, bad;
    int e;
    tune_rec *r;
    oclf_status st = read_file(NULL, path, &text, &len, &e);
    if (st != OCLF_SUCCESS)
        return st;
    st = oclf_tunedb_parse(NULL, path, text, len, &r, &n, &bad);
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

static void add_source(oclf_context *ctx, struct oclf_tunedb *tc, const char *label,
                       const char *file, const char *text, size_t len)
{
    if (tc->nsrc >= MAX_SOURCES)
        return;
    tune_src *s = &tc->src[tc->nsrc];
    size_t bad = 0;
    if (oclf_tunedb_parse(ctx, file, text, len, &s->recs, &s->n, &bad) != OCLF_SUCCESS) {
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

static void add_file(oclf_context *ctx, struct oclf_tunedb *tc, const char *label,
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
static struct oclf_tunedb *tune_load(oclf_context *ctx)
{
    if (!ctx->tunedb) {
        ctx->tunedb = calloc(1, sizeof *ctx->tunedb);
        if (!ctx->tunedb)
            return NULL;
    }
    struct oclf_tunedb *tc = ctx->tunedb;
    if (tc->loaded)
        return tc;
    tc->loaded = 1;
    if (ctx->no_tuning_db)
        return tc;
    if (ctx->tuning_db)
        add_file(ctx, tc, "context database", ctx->tuning_db, 1);
    char machine[4096];
    if (default_path(machine, sizeof machine) == OCLF_SUCCESS)
        add_file(ctx, tc, "per-machine database", machine, 0);
    for (size_t i = 0; i < oclf_embedded_db_count; i++)
        add_source(ctx, tc, "built-in database", oclf_embedded_dbs[i].name,
                   (const char *)oclf_embedded_dbs[i].data, oclf_embedded_dbs[i].size);
    return tc;
}

const char *oclf_tune_source_name(const oclf_context *ctx, int source)
{
    static _Thread_local char buf[4200];
    const struct oclf_tunedb *tc = ctx->tunedb;
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
 * the same power-of-two bucket on every dim sorts before any other (and a
 * record of another layout after all of them: dim_differs). */
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

/* Whether the record's dim called `name` differs from the call's (0 when
 * the op has no such dim). A dim named "form" identifies (an expression's
 * canonical-form hash), and so does "qformat" (a quantized weight's
 * format); neither measures: a record matches it exactly or not at all. A dim named "layout" (linear's weight layout, 0 or 1)
 * names a kind, not a size: its values are equally near on the log scale,
 * so a record of the other layout at the call's very shape tied with the
 * call's own layout, and at a nearer shape beat it. A record of the other
 * layout is still taken, its parameters being valid for both, but only
 * after every record of the call's own. */
static int dim_differs(const oclf_op_key *key, const uint64_t *dim, const oclf_shape *s,
                       const char *name)
{
    for (unsigned k = 0; k < key->ndims; k++)
        if (strcmp(key->dims[k], name) == 0 && dim[k] != s->dim[k])
            return 1;
    return 0;
}

int oclf_tune_candidates(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, oclf_tune_candidate *out, int max)
{
    atomic_fetch_add(&ctx->n_tune_lookups, 1);
    pthread_mutex_lock(&ctx->lock);
    struct oclf_tunedb *tc = tune_load(ctx);
    pthread_mutex_unlock(&ctx->lock);
    if (!tc)
        return 0;
    /* Sources never change once loaded, so they are read without the lock. */
    const oclf_op_key *key = oclf_op_key_get(op);
    const unsigned ndims = key->ndims;
    int n = 0;
    for (int s = 0; s < tc->nsrc; s++) {
        const int first = n;
        for (size_t i = 0; i < tc->src[s].n; i++) {
            const tune_rec *r = &tc->src[s].recs[i];
            if (r->op != op || r->dtype != dtype || dim_differs(key, r->dim, shape, "form") ||
                dim_differs(key, r->dim, shape, "qformat"))
                continue;
            const tune_alt *a = &r->choice;
            if (path != OCLF_PATH_AUTO && a->path != path)
                a = r->alt.path == path ? &r->alt : NULL;
            int level = device_level(&ctx->info, r), same;
            if (!a || level > 3)
                continue;
            oclf_tune_candidate c;
            c.path = a->path;
            c.params = a->params;
            memcpy(c.dim, r->dim, sizeof c.dim);
            c.source = s;
            c.record = (int)i;
            c.level = level;
            c.distance = shape_distance(shape, r->dim, ndims, &same) + (same ? 0 : 1000) +
                         (dim_differs(key, r->dim, shape, "layout") ? 1e6 : 0);
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

void oclf_tunedb_free(oclf_context *ctx)
{
    if (!ctx || !ctx->tunedb)
        return;
    for (int s = 0; s < ctx->tunedb->nsrc; s++) {
        free(ctx->tunedb->src[s].recs);
        free(ctx->tunedb->src[s].file);
    }
    free(ctx->tunedb);
    ctx->tunedb = NULL;
}
