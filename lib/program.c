/*
 * Programs: source assembly, build, the in-memory cache (per context), the
 * on-disk binary cache (shared by processes), and pooled kernel objects.
 *
 * A program is identified by (source file, build options). The assembled
 * text is the device-quirk defines (as options), common.h, then the op file
 * with the parts it names in `#include "part"` lines expanded in place.
 * On disk a program is keyed by a hash of everything that could change the
 * binary: assembled source, options, device vendor/name, driver, platform
 * version, the device and driver UUIDs where cl_khr_device_uuid gives them
 * (a compiler can change under an unchanged driver version string) and the
 * file format version below.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


typedef struct kernel_pool {
    char name[64];
    cl_kernel *free;
    unsigned count, cap;
} kernel_pool;

struct oclf_program {
    oclf_program *next;
    char *source;  /* name of the .cl file */
    char *options;
    cl_program prog;
    int state; /* 0 building, 1 ready, -1 failed */
    pthread_mutex_t pool_lock;
    kernel_pool *pools;
    unsigned npools;
};

/* ---- sources ------------------------------------------------------------ */

oclf_status oclf_source_load(oclf_context *ctx, const char *name, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (ctx->kernel_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", ctx->kernel_dir, name);
        FILE *f = fopen(path, "rb");
        if (!f)
            return oclf_fail(ctx, OCLF_IO_ERROR, "cannot open kernel source %s: %s", path,
                             strerror(errno));
        char *buf = NULL;
        long n = -1;
        if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
            fclose(f);
            buf[n] = '\0';
            *text = buf;
            *len = (size_t)n;
            return OCLF_SUCCESS;
        }
        fclose(f);
        free(buf);
        return oclf_fail(ctx, OCLF_IO_ERROR, "cannot read kernel source %s", path);
    }
    for (size_t i = 0; i < oclf_embedded_source_count; i++) {
        if (strcmp(oclf_embedded_sources[i].name, name) == 0) {
            size_t n = oclf_embedded_sources[i].size;
            char *buf = malloc(n + 1);
            if (!buf)
                return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory");
            memcpy(buf, oclf_embedded_sources[i].data, n);
            buf[n] = '\0';
            *text = buf;
            *len = n;
            return OCLF_SUCCESS;
        }
    }
    return oclf_fail(ctx, OCLF_UNSUPPORTED, "no kernel source named %s is built in", name);
}

/* Appends text to the growing buffer *buf (length *len, capacity *cap). */
static int text_append(char **buf, size_t *len, size_t *cap, const char *text, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t want = (*len + n + 1) * 2;
        char *b = realloc(*buf, want);
        if (!b)
            return -1;
        *buf = b;
        *cap = want;
    }
    memcpy(*buf + *len, text, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

#define INCLUDE_DEPTH 4

/* Appends source `name` with each line `#include "part"` replaced by the
 * part's text (from the embedded sources or OCLF_KERNEL_DIR, like any
 * source), between #line markers so that build logs name the right file
 * and line. A family's kernel file can so be split into files of one
 * concern each while the device compiler, which has no path to the
 * embedded sources, sees one text. */
static oclf_status expand(oclf_context *ctx, const char *name, const char *text, int depth,
                          char **buf, size_t *len, size_t *cap)
{
    static const char directive[] = "#include \"";
    char mark[320];
    unsigned line = 1;
    oclf_status st = OCLF_SUCCESS;
    for (const char *p = text; *p && st == OCLF_SUCCESS; line++) {
        const char *eol = strchr(p, '\n');
        const size_t n = eol ? (size_t)(eol - p) + 1 : strlen(p);
        const char *q = p + sizeof directive - 1, *end;
        if (strncmp(p, directive, sizeof directive - 1) == 0 && (end = memchr(q, '"', n)) &&
            end - q > 0 && end - q < 256) {
            char part[256];
            memcpy(part, q, (size_t)(end - q));
            part[end - q] = '\0';
            char *body = NULL;
            size_t nb = 0;
            if (depth >= INCLUDE_DEPTH)
                return oclf_fail(ctx, OCLF_BUILD_FAILED,
                                 "kernel source %s: includes nest deeper than %d at %s", name,
                                 INCLUDE_DEPTH, part);
            if ((st = oclf_source_load(ctx, part, &body, &nb)))
                return st;
            snprintf(mark, sizeof mark, "#line 1 \"%s\"\n", part);
            if (text_append(buf, len, cap, mark, strlen(mark)) ||
                (st = expand(ctx, part, body, depth + 1, buf, len, cap)) ||
                snprintf(mark, sizeof mark, "\n#line %u \"%s\"\n", line + 1, name) < 0 ||
                text_append(buf, len, cap, mark, strlen(mark)))
                st = st ? st : oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory");
            free(body);
        } else if (text_append(buf, len, cap, p, n)) {
            st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory");
        }
        p += n;
    }
    return st;
}

/* common.h + op source (its parts expanded), with #line so build logs name
 * the right file. */
static oclf_status assemble(oclf_context *ctx, const char *name, const char *generated,
                            char **out)
{
    char *common = NULL, *body = NULL;
    size_t nc = 0, nb = 0;
    oclf_status st = oclf_source_load(ctx, "common.h", &common, &nc);
    if (st == OCLF_SUCCESS && generated) {
        nb = strlen(generated);
        if (!(body = malloc(nb + 1)))
            st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory");
        else
            memcpy(body, generated, nb + 1);
    } else if (st == OCLF_SUCCESS) {
        st = oclf_source_load(ctx, name, &body, &nb);
    }
    if (st == OCLF_SUCCESS) {
        size_t n = nc + nb + strlen(name) + 64, len = 0, cap = n;
        *out = malloc(n);
        if (*out) {
            snprintf(*out, n, "#line 1 \"common.h\"\n%s\n#line 1 \"%s\"\n", common, name);
            len = strlen(*out);
            st = generated ? (text_append(out, &len, &cap, body, nb)
                                  ? oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory")
                                  : OCLF_SUCCESS)
                           : expand(ctx, name, body, 0, out, &len, &cap);
            if (st != OCLF_SUCCESS) {
                free(*out);
                *out = NULL;
            }
        } else {
            st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory");
        }
    }
    free(common);
    free(body);
    return st;
}

/* ---- on-disk cache ------------------------------------------------------ */


static void cache_path(const oclf_context *ctx, const oclf_hash *key, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%016llx%016llx.bin", ctx->cache_dir, (unsigned long long)key->a,
             (unsigned long long)key->b);
}

/* Reads and verifies a cached binary; NULL when absent or damaged. */
static unsigned char *cache_read(oclf_context *ctx, const oclf_hash *key, size_t *size)
{
    char path[4096];
    cache_path(ctx, key, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *file = NULL, *data = NULL;
    const unsigned char *payload = NULL;
    size_t len = 0, psize = 0;
    const char *why = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0)
        why = "cannot stat";
    else if ((uint64_t)st.st_size > OCLF_CACHE_MAX_BYTES + sizeof(oclf_cache_header))
        why = "implausible size";
    else if (!(file = malloc((size_t)st.st_size + 1)))
        why = "out of host memory";
    else if ((len = fread(file, 1, (size_t)st.st_size, f)) != (size_t)st.st_size)
        why = "short read";
    else if ((why = oclf_cache_parse(file, len, key, &payload, &psize)) == NULL &&
             !(data = malloc(psize)))
        why = "out of host memory";
    fclose(f);
    if (why) {
        free(file);
        atomic_fetch_add(&ctx->n_rejected, 1);
        oclf_log(ctx, OCLF_LOG_WARN, "program cache file %s ignored (%s); rebuilding", path, why);
        return NULL;
    }
    memcpy(data, payload, psize);
    free(file);
    *size = psize;
    return data;
}

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

/* Writes atomically: a temporary file in the same folder, fsync, rename.
 * Failure is not an error of the call (the program is built); it is logged. */
static void cache_write(oclf_context *ctx, const oclf_hash *key, const unsigned char *data,
                        size_t size)
{
    char path[4096], tmp[4200];
    cache_path(ctx, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    if (mkdir_p(ctx->cache_dir) != 0) {
        oclf_log(ctx, OCLF_LOG_WARN, "program cache folder %s: %s", ctx->cache_dir,
                 strerror(errno));
        return;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        oclf_log(ctx, OCLF_LOG_WARN, "program cache %s: %s", tmp, strerror(errno));
        return;
    }
    oclf_cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, oclf_cache_magic, sizeof oclf_cache_magic);
    h.format = OCLF_CACHE_FORMAT;
    h.key_a = key->a;
    h.key_b = key->b;
    h.size = size;
    oclf_hash sum;
    oclf_hash_init(&sum);
    oclf_hash_update(&sum, data, size);
    h.sum_a = sum.a;
    h.sum_b = sum.b;
    FILE *f = fdopen(fd, "wb");
    int ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(data, 1, size, f) == size &&
             fflush(f) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (f)
        ok = (fclose(f) == 0) && ok;
    else
        close(fd);
    if (!ok || rename(tmp, path) != 0) {
        oclf_log(ctx, OCLF_LOG_WARN, "program cache %s not written: %s", path,
                 strerror(ok ? errno : saved));
        unlink(tmp);
    }
}

/* ---- build -------------------------------------------------------------- */

static oclf_status build_failed(oclf_context *ctx, cl_program prog, cl_int err, const char *name,
                                const char *options)
{
    char log[6144] = "";
    size_t n = 0;
    if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &n) ==
        CL_SUCCESS)
        log[n < sizeof log ? n : sizeof log - 1] = '\0';
    return oclf_fail(ctx, OCLF_BUILD_FAILED, "building %s with options '%s' failed (%s):\n%s",
                     name, options, oclf_cl_error_name(err), log);
}

static oclf_status build(oclf_context *ctx, const char *name, const char *generated,
                         const char *options, cl_program *out)
{
    char *text = NULL;
    oclf_status st = assemble(ctx, name, generated, &text);
    if (st != OCLF_SUCCESS)
        return st;

    char full_opts[2048];
    snprintf(full_opts, sizeof full_opts, "%s %s", ctx->quirk_options, options);

    oclf_hash key;
    oclf_hash_init(&key);
    uint32_t fmt = OCLF_CACHE_FORMAT;
    oclf_hash_update(&key, &fmt, sizeof fmt);
    oclf_hash_str(&key, text);
    oclf_hash_str(&key, full_opts);
    oclf_hash_str(&key, ctx->info.vendor);
    oclf_hash_str(&key, ctx->info.name);
    oclf_hash_str(&key, ctx->info.driver);
    oclf_hash_str(&key, ctx->info.platform_version);
    if (ctx->info.has_uuid) {
        oclf_hash_update(&key, ctx->info.device_uuid, sizeof ctx->info.device_uuid);
        oclf_hash_update(&key, ctx->info.driver_uuid, sizeof ctx->info.driver_uuid);
    }

    cl_int err = CL_SUCCESS;
    cl_program prog = NULL;
    if (ctx->cache_dir) {
        size_t size = 0;
        unsigned char *bin = cache_read(ctx, &key, &size);
        if (bin) {
            const unsigned char *bins[1] = {bin};
            cl_int bstat = CL_SUCCESS;
            prog = clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, &size, bins, &bstat, &err);
            if (prog && err == CL_SUCCESS && bstat == CL_SUCCESS)
                err = clBuildProgram(prog, 1, &ctx->device, full_opts, NULL, NULL);
            free(bin);
            if (!prog || err != CL_SUCCESS || bstat != CL_SUCCESS) {
                /* Another driver version, or a file that verifies but the
                 * driver still rejects: rebuild from source and overwrite. */
                if (prog)
                    clReleaseProgram(prog);
                prog = NULL;
                atomic_fetch_add(&ctx->n_rejected, 1);
                oclf_log(ctx, OCLF_LOG_WARN, "cached binary for %s rejected by the driver (%s)",
                         name, oclf_cl_error_name(err != CL_SUCCESS ? err : bstat));
            } else {
                atomic_fetch_add(&ctx->n_from_disk, 1);
            }
        }
    }
    if (!prog) {
        const char *src = text;
        prog = clCreateProgramWithSource(ctx->cl, 1, &src, NULL, &err);
        if (!prog || err != CL_SUCCESS) {
            free(text);
            return oclf_fail_cl(ctx, err, "clCreateProgramWithSource");
        }
        atomic_fetch_add(&ctx->n_compiled, 1);
        err = clBuildProgram(prog, 1, &ctx->device, full_opts, NULL, NULL);
        if (err != CL_SUCCESS) {
            st = build_failed(ctx, prog, err, name, full_opts);
            clReleaseProgram(prog);
            free(text);
            return st;
        }
        if (ctx->cache_dir) {
            size_t size = 0;
            unsigned char *bin = NULL;
            if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) ==
                    CL_SUCCESS &&
                size > 0 && size <= OCLF_CACHE_MAX_BYTES && (bin = malloc(size)) != NULL &&
                clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
                cache_write(ctx, &key, bin, size);
            free(bin);
        }
    }
    free(text);
    /* which build of a source a call runs (its defines) */
    oclf_log(ctx, OCLF_LOG_DEBUG, "program %s ready, options '%s'", name, options);
    *out = prog;
    return OCLF_SUCCESS;
}

static void program_free(oclf_program *p)
{
    for (unsigned i = 0; i < p->npools; i++) {
        for (unsigned j = 0; j < p->pools[i].count; j++)
            clReleaseKernel(p->pools[i].free[j]);
        free(p->pools[i].free);
    }
    free(p->pools);
    if (p->prog)
        clReleaseProgram(p->prog);
    pthread_mutex_destroy(&p->pool_lock);
    free(p->source);
    free(p->options);
    free(p);
}

void oclf_context_set_program_sink(oclf_context *ctx, oclf_program_sink_fn fn, void *user)
{
    ctx->program_sink = fn;
    ctx->program_sink_user = user;
}

static oclf_status program_get(oclf_context *ctx, const char *source, const char *generated,
                               const char *options, oclf_program **out)
{
    *out = NULL;
    if (ctx->program_sink) {
        ctx->program_sink(ctx->program_sink_user, source, generated, options);
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: programs are being listed, not built",
                         source);
    }
    pthread_mutex_lock(&ctx->lock);
    for (;;) {
        oclf_program *p = ctx->programs;
        while (p && (strcmp(p->source, source) != 0 || strcmp(p->options, options) != 0))
            p = p->next;
        if (!p)
            break;
        if (p->state == 1) {
            pthread_mutex_unlock(&ctx->lock);
            atomic_fetch_add(&ctx->n_hits, 1);
            *out = p;
            return OCLF_SUCCESS;
        }
        /* Another thread is building it: wait rather than build twice. */
        pthread_cond_wait(&ctx->built, &ctx->lock);
    }
    oclf_program *p = calloc(1, sizeof *p);
    if (p) {
        size_t ns = strlen(source) + 1, no = strlen(options) + 1;
        p->source = malloc(ns);
        p->options = malloc(no);
        if (p->source && p->options) {
            memcpy(p->source, source, ns);
            memcpy(p->options, options, no);
        } else {
            free(p->source);
            free(p->options);
            free(p);
            p = NULL;
        }
    }
    if (!p) {
        pthread_mutex_unlock(&ctx->lock);
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "out of host memory");
    }
    pthread_mutex_init(&p->pool_lock, NULL);
    p->next = ctx->programs;
    ctx->programs = p;
    pthread_mutex_unlock(&ctx->lock);

    /* Built outside the lock, so threads compile different programs at once. */
    cl_program prog = NULL;
    oclf_status st = build(ctx, source, generated, options, &prog);

    pthread_mutex_lock(&ctx->lock);
    if (st == OCLF_SUCCESS) {
        p->prog = prog;
        p->state = 1;
    } else {
        /* Unlink so a later call may try again. */
        oclf_program **pp = &ctx->programs;
        while (*pp != p)
            pp = &(*pp)->next;
        *pp = p->next;
        program_free(p);
        p = NULL;
    }
    pthread_cond_broadcast(&ctx->built);
    pthread_mutex_unlock(&ctx->lock);
    *out = p;
    return st;
}

oclf_status oclf_program_get(oclf_context *ctx, const char *source, const char *options,
                             oclf_program **out)
{
    return program_get(ctx, source, NULL, options, out);
}

oclf_status oclf_program_get_generated(oclf_context *ctx, const char *key, const char *text,
                                       const char *options, oclf_program **out)
{
    return program_get(ctx, key, text, options, out);
}

void oclf_programs_release(oclf_context *ctx)
{
    oclf_program *p = ctx->programs;
    while (p) {
        oclf_program *next = p->next;
        program_free(p);
        p = next;
    }
    ctx->programs = NULL;
}

/* ---- kernel pool -------------------------------------------------------- */

static kernel_pool *find_pool(oclf_program *prog, const char *name)
{
    for (unsigned i = 0; i < prog->npools; i++)
        if (strcmp(prog->pools[i].name, name) == 0)
            return &prog->pools[i];
    return NULL;
}

void oclf_program_log_launch(const oclf_context *ctx, const oclf_program *prog,
                             const char *kernel)
{
    oclf_log(ctx, OCLF_LOG_DEBUG, "launch %s of %s, options '%s', device options '%s'", kernel,
             prog->source, prog->options, ctx->quirk_options);
}

oclf_status oclf_kernel_get(oclf_context *ctx, oclf_program *prog, const char *name,
                            cl_kernel *out)
{
    pthread_mutex_lock(&prog->pool_lock);
    kernel_pool *pool = find_pool(prog, name);
    if (pool && pool->count > 0) {
        *out = pool->free[--pool->count];
        pthread_mutex_unlock(&prog->pool_lock);
        return OCLF_SUCCESS;
    }
    pthread_mutex_unlock(&prog->pool_lock);
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(prog->prog, name, &err);
    if (!k || err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "clCreateKernel");
    *out = k;
    return OCLF_SUCCESS;
}

void oclf_kernel_put(oclf_program *prog, const char *name, cl_kernel kernel)
{
    pthread_mutex_lock(&prog->pool_lock);
    kernel_pool *pool = find_pool(prog, name);
    if (!pool && strlen(name) < sizeof pool->name) {
        kernel_pool *grown = realloc(prog->pools, (prog->npools + 1) * sizeof *grown);
        if (grown) {
            prog->pools = grown;
            pool = &grown[prog->npools++];
            memset(pool, 0, sizeof *pool);
            snprintf(pool->name, sizeof pool->name, "%s", name);
        }
    }
    if (pool && pool->count == pool->cap) {
        unsigned cap = pool->cap ? pool->cap * 2 : 4;
        cl_kernel *grown = realloc(pool->free, cap * sizeof *grown);
        if (grown) {
            pool->free = grown;
            pool->cap = cap;
        }
    }
    if (pool && pool->count < pool->cap) {
        pool->free[pool->count++] = kernel;
        kernel = NULL;
    }
    pthread_mutex_unlock(&prog->pool_lock);
    if (kernel) /* could not keep it */
        clReleaseKernel(kernel);
}
