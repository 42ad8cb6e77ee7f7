/* oclf_context: the caller's (cl_context, device), options, logging, stats. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oclf_context_options_init(oclf_context_options *options)
{
    if (options)
        *options = (oclf_context_options)OCLF_CONTEXT_OPTIONS_INIT;
}

static char *dup_or_null(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* The cache folder: the option, $OCLF_CACHE_DIR, $XDG_CACHE_HOME/oclfuse or
 * $HOME/.cache/oclfuse; "" (from the option or variable) disables it. */
static char *cache_dir_for(const char *opt)
{
    const char *v = opt ? opt : getenv("OCLF_CACHE_DIR");
    if (v)
        return *v ? dup_or_null(v) : NULL;
    const char *base = getenv("XDG_CACHE_HOME");
    const char *suffix = "/oclfuse";
    if (!base || !*base) {
        base = getenv("HOME");
        suffix = "/.cache/oclfuse";
    }
    if (!base || !*base)
        return NULL;
    size_t n = strlen(base) + strlen(suffix) + 1;
    char *d = malloc(n);
    if (d)
        snprintf(d, n, "%s%s", base, suffix);
    return d;
}

oclf_status oclf_context_create(cl_context context, cl_device_id device,
                                const oclf_context_options *options, oclf_context **out)
{
    oclf_enter(__func__);
    if (!out)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "oclf_context_create: out is NULL");
    *out = NULL;
    if (!context || !device)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "oclf_context_create: context and device must not be NULL");

    /* The device must belong to the context. */
    cl_uint ndev = 0;
    cl_int err = clGetContextInfo(context, CL_CONTEXT_NUM_DEVICES, sizeof ndev, &ndev, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(NULL, err, "oclf_context_create: clGetContextInfo");
    cl_device_id devs[64];
    if (ndev == 0 || ndev > 64 ||
        clGetContextInfo(context, CL_CONTEXT_DEVICES, ndev * sizeof *devs, devs, NULL) != CL_SUCCESS)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "oclf_context_create: cannot list the context's devices");
    int found = 0;
    for (cl_uint i = 0; i < ndev; i++)
        found |= devs[i] == device;
    if (!found)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "oclf_context_create: the device does not belong to the context");

    oclf_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "oclf_context_create: out of host memory");
    oclf_status st = oclf_device_query(NULL, device, &ctx->info);
    if (st != OCLF_SUCCESS) {
        free(ctx);
        return st;
    }
    oclf_device_fingerprint(&ctx->info, ctx->fingerprint, sizeof ctx->fingerprint);
    oclf_device_quirk_options(&ctx->info, ctx->quirk_options, sizeof ctx->quirk_options);

    oclf_context_options opt;
    if ((st = oclf_context_options_read(options, &opt))) {
        free(ctx);
        return st;
    }
    const oclf_context_options *o = &opt;
    const char *kdir = o->kernel_dir ? o->kernel_dir : getenv("OCLF_KERNEL_DIR");
    const char *db = o->tuning_db ? o->tuning_db : getenv("OCLF_TUNING_DB");
    ctx->kernel_dir = (kdir && *kdir) ? dup_or_null(kdir) : NULL;
    ctx->tuning_db = (db && *db) ? dup_or_null(db) : NULL;
    ctx->cache_dir = cache_dir_for(o->cache_dir);
    ctx->validate = o->validate;
    ctx->no_tuning_db = o->no_tuning_db;
    ctx->log = o->log;
    ctx->log_user = o->log_user;
    if ((kdir && *kdir && !ctx->kernel_dir) || (db && *db && !ctx->tuning_db)) {
        free(ctx->kernel_dir);
        free(ctx->tuning_db);
        free(ctx->cache_dir);
        free(ctx);
        return oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "oclf_context_create: out of host memory");
    }
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->built, NULL);

    clRetainContext(context);
    clRetainDevice(device);
    ctx->cl = context;
    ctx->device = device;
    *out = ctx;
    return OCLF_SUCCESS;
}

cl_device_type oclf_context_device_type(const oclf_context *ctx)
{
    if (!ctx)
        return 0;
    /* The heuristics test the CPU flag first (a simulator may claim both). */
    if (ctx->info.type & CL_DEVICE_TYPE_CPU)
        return CL_DEVICE_TYPE_CPU;
    if (ctx->info.type & CL_DEVICE_TYPE_GPU)
        return CL_DEVICE_TYPE_GPU;
    return CL_DEVICE_TYPE_ACCELERATOR;
}

void oclf_context_destroy(oclf_context *ctx)
{
    if (!ctx)
        return;
    oclf_programs_release(ctx);
    oclf_dispatch_free(ctx);
    oclf_tunedb_free(ctx);
    pthread_cond_destroy(&ctx->built);
    pthread_mutex_destroy(&ctx->lock);
    clReleaseDevice(ctx->device);
    clReleaseContext(ctx->cl);
    free(ctx->kernel_dir);
    free(ctx->cache_dir);
    free(ctx->tuning_db);
    free(ctx);
}

const char *oclf_context_fingerprint(const oclf_context *ctx)
{
    return ctx ? ctx->fingerprint : "";
}

oclf_status oclf_context_get_stats(const oclf_context *ctx, oclf_context_stats *out)
{
    oclf_enter(__func__);
    if (!ctx || !out)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "oclf_context_get_stats: NULL argument");
    /* A report: written up to the caller's size (a newer caller's larger
     * struct gets this library's counters). */
    const size_t size = out->size ? out->size : sizeof *out;
    if (size < sizeof size || size % _Alignof(oclf_context_stats))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "oclf_context_get_stats: out->size %zu is not the size of a layout of "
                         "this struct (a multiple of %zu, at least %zu)",
                         out->size, _Alignof(oclf_context_stats), sizeof size);
    oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
    s.programs_compiled = atomic_load(&ctx->n_compiled);
    s.programs_from_disk = atomic_load(&ctx->n_from_disk);
    s.program_hits = atomic_load(&ctx->n_hits);
    s.disk_cache_rejected = atomic_load(&ctx->n_rejected);
    s.kernels_enqueued = atomic_load(&ctx->n_enqueued);
    s.tuning_lookups = atomic_load(&ctx->n_tune_lookups);
    s.tuning_cache_hits = atomic_load(&ctx->n_tune_hits);
    s.tuning_db_errors = atomic_load(&ctx->n_db_errors);
    const size_t n = size < sizeof s ? size : sizeof s;
    memcpy((char *)out + sizeof size, (const char *)&s + sizeof size, n - sizeof size);
    return OCLF_SUCCESS;
}
