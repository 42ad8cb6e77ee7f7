/*
 * The tuning database's merge-write (oclf_tuning_db_merge): records are
 * checked by the parser, merged by identity (device, op, dtype, shape) into
 * the file under an advisory lock, and the file replaced atomically.
 */
/* flock() is BSD, not POSIX: glibc declares it under _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1
#include "tunedb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
    oclf_enter(__func__);
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
        if (oclf_tunedb_parse_record(rec, &tmp) < 0) {
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

