/* Public API basics: versions, statuses, parameter sets, context creation
 * and the per-thread last error. */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_version)
{
    ck_assert_uint_eq(oclf_version(), OCLF_VERSION_HEX);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", OCLF_VERSION_MAJOR, OCLF_VERSION_MINOR,
             OCLF_VERSION_PATCH);
    ck_assert_str_eq(oclf_version_string(), want);
    ck_assert_str_eq(OCLF_VERSION_STRING, want);
    /* header, library and meson's project() agree */
    const char *project = getenv("OCLF_PROJECT_VERSION");
    ck_assert_msg(project != NULL, "meson sets OCLF_PROJECT_VERSION");
    ck_assert_str_eq(oclf_version_string(), project);
}
END_TEST

START_TEST(test_status_and_dtype_names)
{
    ck_assert_str_eq(oclf_status_string(OCLF_SUCCESS), "OCLF_SUCCESS");
    ck_assert_str_eq(oclf_status_string(OCLF_DB_ERROR), "OCLF_DB_ERROR");
    ck_assert_str_eq(oclf_status_string((oclf_status)-99), "unknown oclf_status");
    ck_assert_str_eq(oclf_dtype_name(OCLF_BF16), "bf16");
    ck_assert_ptr_null(oclf_dtype_name((oclf_dtype)9));
    ck_assert_uint_eq(oclf_dtype_size(OCLF_F16), 2);
    ck_assert_uint_eq(oclf_dtype_size((oclf_dtype)9), 0);
}
END_TEST

START_TEST(test_params)
{
    oclf_params p;
    memset(&p, 0, sizeof p);
    int64_t v = 0;
    ck_assert_int_eq(oclf_params_set(&p, "WGS", 64), OCLF_SUCCESS);
    ck_assert_int_eq(oclf_params_set(&p, "WGS", 128), OCLF_SUCCESS); /* replaces */
    ck_assert_uint_eq(p.count, 1);
    ck_assert_int_eq(oclf_params_get(&p, "WGS", &v), 1);
    ck_assert_int_eq(v, 128);
    ck_assert_int_eq(oclf_params_get(&p, "VEC", &v), 0);
    ck_assert_int_eq(oclf_params_set(&p, "A_NAME_FAR_TOO_LONG", 1), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "longer"));
    for (int i = 0; i < OCLF_MAX_PARAMS - 1; i++) {
        char name[8];
        snprintf(name, sizeof name, "P%d", i);
        ck_assert_int_eq(oclf_params_set(&p, name, i), OCLF_SUCCESS);
    }
    ck_assert_int_eq(oclf_params_set(&p, "ONE_MORE", 1), OCLF_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_context_create_errors)
{
    th_env *e = th_get();
    oclf_context *c = (oclf_context *)1;
    ck_assert_int_eq(oclf_context_create(NULL, e->device, NULL, &c), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "NULL"));
    ck_assert_int_eq(oclf_context_create(e->cl, NULL, NULL, &c), OCLF_INVALID_ARGUMENT);
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, NULL, NULL), OCLF_INVALID_ARGUMENT);
    oclf_context_destroy(NULL); /* accepted */

    oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
    ck_assert_int_eq(oclf_context_get_stats(NULL, &s), OCLF_INVALID_ARGUMENT);
    ck_assert_int_eq(oclf_context_get_stats(e->ctx, &s), OCLF_SUCCESS);
    ck_assert(strchr(oclf_context_fingerprint(e->ctx), '|') != NULL);
}
END_TEST

/* A queue from another cl_context is rejected. */
/* Every program is built with correctly rounded f32 division where the
 * device offers it, and without the option where it does not (a build
 * option the device does not support may be refused). */
START_TEST(test_division_option)
{
    th_env *e = th_get();
    cl_device_fp_config fpc = 0;
    ck_assert_int_eq(clGetDeviceInfo(e->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fpc, &fpc, NULL),
                     CL_SUCCESS);
    const int offered = (fpc & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    oclf_context *ctx = th_build_log_context();
    float host[64];
    for (int i = 0; i < 64; i++)
        host[i] = (float)(i + 1);
    cl_mem m = th_upload(host, sizeof host);
    oclf_buf b = {m, 0, 0};
    th_builds_clear();
    cl_event ev = NULL;
    TH_OK(oclf_rms_norm(ctx, e->queue, OCLF_F32, 1, 64, b, NULL, b, 1e-6f, NULL, 0, NULL, &ev));
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    ck_assert_msg(strstr(th_builds(), "launch") != NULL, "no launch logged:\n%s", th_builds());
    ck_assert_msg((strstr(th_builds(), "-cl-fp32-correctly-rounded-divide-sqrt") != NULL) == offered,
                  "device %s correctly rounded division; launches:\n%s",
                  offered ? "offers" : "does not offer", th_builds());
    clReleaseMemObject(m);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(test_foreign_queue)
{
    th_env *e = th_get();
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(other, e->device, 0, &err);
    cl_mem m = th_alloc(64 * 4);
    oclf_buf b = {m, 0, 0};
    ck_assert_int_eq(oclf_rms_norm(e->ctx, q, OCLF_F32, 1, 64, b, NULL, b, 0, NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "another cl_context"));
    clReleaseMemObject(m);
    clReleaseCommandQueue(q);
    clReleaseContext(other);
}
END_TEST

/* The last error belongs to the thread that failed. */
static void *fail_in_thread(void *arg)
{
    th_env *e = arg;
    static int ok;
    oclf_rms_norm(e->ctx, e->queue, OCLF_F32, 1, 64, (oclf_buf){0}, NULL, (oclf_buf){0}, 0, NULL, 0,
                  NULL, NULL);
    ok = strstr(oclf_last_error(e->ctx), "cl_mem is NULL") != NULL;
    return ok ? &ok : NULL;
}

START_TEST(test_last_error_per_thread)
{
    th_env *e = th_get();
    cl_mem m = th_alloc(64 * 4);
    oclf_buf b = {m, 0, 0};
    ck_assert_int_eq(
        oclf_rms_norm(e->ctx, e->queue, OCLF_F32, 1, 0, b, NULL, b, 0, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "cols is 0"));
    pthread_t t;
    void *ret = NULL;
    pthread_create(&t, NULL, fail_in_thread, e);
    pthread_join(t, &ret);
    ck_assert_ptr_nonnull(ret);
    /* this thread's message is unchanged by the other thread's failure */
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "cols is 0"));
    ck_assert_str_eq(oclf_last_error((oclf_context *)&t), ""); /* no error for another context */
    clReleaseMemObject(m);
}
END_TEST

/* Zero rows still hands back an event, after the caller's wait list. */
START_TEST(test_zero_rows_event)
{
    th_env *e = th_get();
    cl_mem m = th_alloc(64 * 4);
    oclf_buf b = {m, 0, 0};
    cl_int err;
    cl_event user = clCreateUserEvent(e->cl, &err), ev = NULL;
    TH_OK(oclf_layer_norm(e->ctx, e->queue, OCLF_F32, 0, 64, b, NULL, NULL, b, 1e-5f, NULL, 1,
                          &user, &ev));
    ck_assert_ptr_nonnull(ev);
    cl_int state = 0;
    clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
    ck_assert_int_ne(state, CL_COMPLETE); /* still waiting on the user event */
    clSetUserEventStatus(user, CL_COMPLETE);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    clReleaseEvent(user);
    clReleaseMemObject(m);
}
END_TEST

/* Kernels from a folder (OCLF_KERNEL_DIR / kernel_dir) instead of the
 * embedded copies; a folder without them is an I/O error with the path. */
START_TEST(test_kernel_dir)
{
    th_env *e = th_get();
    const char *src = getenv("OCLF_SOURCE_CL_DIR");
    ck_assert_msg(src != NULL, "meson sets OCLF_SOURCE_CL_DIR");
    oclf_context_options o;
    oclf_context_options_init(&o);
    o.kernel_dir = src;
    o.cache_dir = "";
    oclf_context *ctx;
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    float h[2 * 16];
    for (int i = 0; i < 32; i++)
        h[i] = (float)(i % 5) - 2.0f;
    cl_mem m = th_upload(h, sizeof h), y = th_alloc(sizeof h);
    oclf_buf bm = {m, 0, 0}, by = {y, 0, 0};
    ck_assert_int_eq(
        oclf_rms_norm(ctx, e->queue, OCLF_F32, 2, 16, bm, NULL, by, 0, NULL, 0, NULL, NULL),
        OCLF_SUCCESS);
    oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
    oclf_context_get_stats(ctx, &s);
    ck_assert_uint_ge(s.programs_compiled, 1);
    oclf_context_destroy(ctx);

    o.kernel_dir = "/nonexistent-oclfuse-kernels";
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    ck_assert_int_eq(
        oclf_rms_norm(ctx, e->queue, OCLF_F32, 2, 16, bm, NULL, by, 0, NULL, 0, NULL, NULL),
        OCLF_IO_ERROR);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(ctx), "/nonexistent-oclfuse-kernels"));
    oclf_context_destroy(ctx);
    clReleaseMemObject(m);
    clReleaseMemObject(y);
}
END_TEST

/* Copies `name` from folder `from` to folder `to` (or writes `text`). */
static void put_file(const char *from, const char *to, const char *name, const char *text)
{
    char path[4096];
    char *buf = NULL;
    size_t n = 0;
    if (!text) {
        snprintf(path, sizeof path, "%s/%s", from, name);
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        buf = malloc(1 << 20);
        n = fread(buf, 1, 1 << 20, f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/%s", to, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(text ? text : buf, 1, text ? strlen(text) : n, f);
    fclose(f);
    free(buf);
}

/* One fused l2_topk call (3 queries, 40 rows of D 5, k 4) on a context
 * reading its kernels from `dir`; returns its status, the lists in d, i,
 * and on failure checks that the message holds `why`. */
static oclf_status l2_from_dir(const char *dir, const char *why, float *d, int64_t *i)
{
    th_env *e = th_get();
    oclf_context_options o;
    oclf_context_options_init(&o);
    o.kernel_dir = dir;
    o.cache_dir = "";
    oclf_context *ctx;
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    float q[3 * 5], x[40 * 5];
    for (int j = 0; j < 15; j++)
        q[j] = (float)(j % 4);
    for (int j = 0; j < 200; j++)
        x[j] = (float)(j * 7 % 9) - 4.0f;
    cl_mem mq = th_upload(q, sizeof q), mx = th_upload(x, sizeof x);
    cl_mem md = th_alloc(12 * 4), mi = th_alloc(12 * 8);
    oclf_buf bq = {mq, 0, 0}, bx = {mx, 0, 0}, bd = {md, 0, 0}, bi = {mi, 0, 0};
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_status st = oclf_l2_topk(ctx, e->queue, OCLF_F32, 3, 40, 5, 4, bq, bx, bd, bi, NULL, &ch,
                                  0, NULL, NULL);
    if (st == OCLF_SUCCESS) {
        th_download(md, d, 12 * 4);
        th_download(mi, i, 12 * 8);
    } else {
        ck_assert_msg(why && strstr(oclf_last_error(ctx), why), "%s", oclf_last_error(ctx));
    }
    clReleaseMemObject(mq), clReleaseMemObject(mx), clReleaseMemObject(md), clReleaseMemObject(mi);
    oclf_context_destroy(ctx);
    return st;
}

/* A kernel file's `#include "part"` lines are expanded by the loader from
 * the same place as the file: from a folder, the parts there give the
 * embedded sources' lists; a missing part is an I/O error naming it; a
 * file that includes itself stops at the nesting limit with a build
 * error, not a hang. */
START_TEST(test_kernel_parts)
{
    const char *src = getenv("OCLF_SOURCE_CL_DIR");
    ck_assert_msg(src != NULL, "meson sets OCLF_SOURCE_CL_DIR");
    char dir[] = "/tmp/oclfuse-parts-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const char *const files[] = {"common.h", "l2topk.cl", "l2topk_select.cl",
                                        "l2topk_norms.cl", "l2topk_scan.cl", "l2topk_unfused.cl"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++)
        put_file(src, dir, files[f], NULL);
    float d0[12], d1[12];
    int64_t i0[12], i1[12];
    ck_assert_int_eq(l2_from_dir(NULL, NULL, d0, i0), OCLF_SUCCESS);
    ck_assert_int_eq(l2_from_dir(dir, NULL, d1, i1), OCLF_SUCCESS);
    ck_assert(memcmp(d0, d1, sizeof d0) == 0 && memcmp(i0, i1, sizeof i0) == 0);

    char path[4096];
    snprintf(path, sizeof path, "%s/l2topk_scan.cl", dir);
    ck_assert_int_eq(remove(path), 0);
    ck_assert_int_eq(l2_from_dir(dir, "l2topk_scan.cl", d1, i1), OCLF_IO_ERROR);

    put_file(NULL, dir, "l2topk.cl", "#include \"l2topk.cl\"\n");
    ck_assert_int_eq(l2_from_dir(dir, "nest deeper", d1, i1), OCLF_BUILD_FAILED);

    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        remove(path);
    }
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Every status has its own sentence, beside its symbol name; a status the
 * names know must have a sentence too. */
START_TEST(test_status_messages)
{
    const char *seen[64];
    int n = 0;
    for (int v = 8; v >= -64; v--) {
        const oclf_status st = (oclf_status)v;
        const char *msg = oclf_status_message(st);
        ck_assert_ptr_nonnull(msg);
        if (strcmp(oclf_status_string(st), "unknown oclf_status") == 0) {
            ck_assert_str_eq(msg, "Unknown status.");
            continue;
        }
        ck_assert_msg(strlen(msg) > 8 && msg[strlen(msg) - 1] == '.',
                      "%s: '%s' is not a sentence", oclf_status_string(st), msg);
        ck_assert_str_ne(msg, "Unknown status.");
        for (int i = 0; i < n; i++)
            ck_assert_msg(strcmp(seen[i], msg) != 0, "%s repeats another status's sentence",
                          oclf_status_string(st));
        seen[n++] = msg;
    }
    ck_assert_int_eq(n, 8); /* OCLF_SUCCESS .. OCLF_IO_ERROR */
    ck_assert_str_eq(oclf_status_message(OCLF_SUCCESS), "The call succeeded.");
}
END_TEST

/* `var`: a caller's struct of a newer layout, one field past `type`,
 * zeroed, its size set. */
#define NEWER_LAYOUT(type, var)                                                               \
    struct {                                                                                  \
        type o;                                                                               \
        uint64_t newer_field;                                                                 \
    } var;                                                                                    \
    memset(&var, 0, sizeof var);                                                              \
    var.o.size = sizeof var

/* The options structs grow by their size field: a smaller (older) size
 * leaves the fields past it at their defaults, a zeroed struct is the first
 * layout, and a larger size is accepted only with a zero tail. */
START_TEST(test_context_options_size)
{
    th_env *e = th_get();
    float h[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    cl_mem m = th_upload(h, sizeof h), y = th_alloc(sizeof h);
    oclf_buf bm = {m, 0, 0}, by = {y, 0, 0};
    oclf_context *ctx;
#define NORM(c) oclf_rms_norm(c, e->queue, OCLF_F32, 1, 16, bm, NULL, by, 0, NULL, 0, NULL, NULL)

    oclf_context_options init = OCLF_CONTEXT_OPTIONS_INIT, o;
    oclf_context_options_init(&o);
    ck_assert_uint_eq(o.size, sizeof o);
    ck_assert_int_eq(memcmp(&o, &init, sizeof o), 0);

    /* kernel_dir within the caller's size is read (and fails the op) ... */
    o.kernel_dir = "/nonexistent-oclfuse-kernels";
    o.cache_dir = "";
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    ck_assert_int_eq(NORM(ctx), OCLF_IO_ERROR);
    oclf_context_destroy(ctx);
    /* ... and so it is with size 0 (a zeroed struct: the first layout) */
    o.size = 0;
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    ck_assert_int_eq(NORM(ctx), OCLF_IO_ERROR);
    oclf_context_destroy(ctx);
    /* a caller whose layout ends before kernel_dir: the default is used */
    o.size = offsetof(oclf_context_options, kernel_dir);
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    TH_OK(NORM(ctx));
    oclf_context_destroy(ctx);

    /* a newer caller's larger struct: its zero tail is fine, a set field
     * this library does not know is refused with a sentence */
    NEWER_LAYOUT(oclf_context_options, big);
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &big.o, &ctx), OCLF_SUCCESS);
    oclf_context_destroy(ctx);
    big.newer_field = 1;
    ctx = (oclf_context *)1;
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &big.o, &ctx), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "oclf_context_create: options.size"));
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "newer version"));
    o.size = 3; /* smaller than the size field itself */
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "options.size 3 is not the size"));
    o.size = offsetof(oclf_context_options, kernel_dir) + 4; /* ends inside kernel_dir */
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "not the size of a layout"));
#undef NORM
    clReleaseMemObject(m);
    clReleaseMemObject(y);
}
END_TEST

START_TEST(test_l2_options_size)
{
    th_env *e = th_get();
    /* 4 rows of 2, one query at row 2; a mask of zeros allows no row */
    float hx[8] = {0, 0, 1, 1, 2, 2, 3, 3}, hq[2] = {2, 2};
    unsigned char none = 0;
    cl_mem x = th_upload(hx, sizeof hx), q = th_upload(hq, sizeof hq),
           mask = th_upload(&none, 1), dist = th_alloc(2 * sizeof(float)),
           idx = th_alloc(2 * sizeof(cl_long));
    oclf_buf bx = {x, 0, 0}, bq = {q, 0, 0}, bm = {mask, 0, 0}, bd = {dist, 0, 0},
             bi = {idx, 0, 0};
    cl_long got[2];
#define TOPK(opt) \
    oclf_l2_topk(e->ctx, e->queue, OCLF_F32, 1, 4, 2, 2, bq, bx, bd, bi, opt, NULL, 0, NULL, NULL)

    oclf_l2_topk_options o = OCLF_L2_TOPK_OPTIONS_INIT;
    o.allowed = &bm;
    TH_OK(TOPK(&o)); /* the mask is read: nothing allowed, padding only */
    clFinish(e->queue);
    th_download(idx, got, sizeof got);
    ck_assert_int_eq(got[0], -1);
    o.size = offsetof(oclf_l2_topk_options, allowed); /* an older layout: no mask */
    TH_OK(TOPK(&o));
    clFinish(e->queue);
    th_download(idx, got, sizeof got);
    ck_assert_int_eq(got[0], 2);

    NEWER_LAYOUT(oclf_l2_topk_options, big);
    TH_OK(TOPK(&big.o));
    big.newer_field = 7;
    ck_assert_int_eq(TOPK(&big.o), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "oclf_l2_topk: options.size"));
    float hq2[2] = {2, 2};
    float hd[2];
    int64_t hi[2];
    oclf_l2_shard sh = {e->ctx, e->queue, bx, 4, OCLF_F32, 0, NULL, NULL, NULL};
    ck_assert_int_eq(oclf_l2_topk_sharded(&sh, 1, 1, 2, 2, hq2, 2, hd, hi, &big.o),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "oclf_l2_topk_sharded: options.size"));
    big.newer_field = 0;
    TH_OK(oclf_l2_topk_sharded(&sh, 1, 1, 2, 2, hq2, 2, hd, hi, &big.o));
    ck_assert_int_eq(hi[0], 2);
#undef TOPK
    clReleaseMemObject(x), clReleaseMemObject(q), clReleaseMemObject(mask);
    clReleaseMemObject(dist), clReleaseMemObject(idx);
}
END_TEST

/* The structs that grew a size field in 0.9: a size that is no layout's
 * (3 bytes) and a newer layout with a field set are refused with
 * OCLF_INVALID_ARGUMENT and a sentence naming the struct's size, before
 * anything is written; a newer layout whose extra bytes are zero runs. */
static void expect_size_refused(oclf_status st, const char *what, cl_mem out, const float *was,
                                size_t n)
{
    ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
    const char *msg = oclf_last_error(th_get()->ctx);
    ck_assert_msg(strstr(msg, what) != NULL, "'%s' does not name '%s'", msg, what);
    float now[16];
    ck_assert_uint_le(n, 16);
    th_download(out, now, n * sizeof(float));
    ck_assert_msg(memcmp(now, was, n * sizeof(float)) == 0, "%s: the output was written", what);
}

START_TEST(test_struct_sizes)
{
    th_env *e = th_get();
    const float sentinel[4] = {-7, -7, -7, -7};
    float got[4];

    /* the context's counters: a report, written up to the caller's size */
    oclf_context_stats st;
    memset(&st, 0xab, sizeof st);
    st.size = 3;
    ck_assert_int_eq(oclf_context_get_stats(e->ctx, &st), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "oclf_context_get_stats: out->size 3"));
    ck_assert_uint_eq(st.programs_compiled, 0xababababababababull);
    st.size = offsetof(oclf_context_stats, tuning_db_errors); /* an older layout */
    TH_OK(oclf_context_get_stats(e->ctx, &st));
    ck_assert_uint_ne(st.kernels_enqueued, 0xababababababababull);
    ck_assert_uint_eq(st.tuning_db_errors, 0xababababababababull);
    NEWER_LAYOUT(oclf_context_stats, bigst);
    bigst.newer_field = 5;
    TH_OK(oclf_context_get_stats(e->ctx, &bigst.o));
    ck_assert_uint_eq(bigst.newer_field, 5);
    ck_assert_uint_eq(bigst.o.kernels_enqueued, st.kernels_enqueued);

    /* act_and_mul: one row of d = 2, silu(x) * y */
    const float hin[4] = {1, 2, 3, 4};
    cl_mem min = th_upload(hin, sizeof hin), mout = th_upload(sentinel, sizeof sentinel);
    const oclf_buf bin = {min, 0, 0}, bout = {mout, 0, 0};
#define ACT(a) oclf_act_and_mul(e->ctx, e->queue, OCLF_F32, 1, 2, bin, bout, a, NULL, 0, NULL, NULL)
    oclf_activation act;
    oclf_activation_init(&act);
    ck_assert_uint_eq(act.size, sizeof act);
    act.size = 3;
    expect_size_refused(ACT(&act), "oclf_act_and_mul: act.size 3", mout, sentinel, 2);
    NEWER_LAYOUT(oclf_activation, bigact);
    bigact.newer_field = 1;
    expect_size_refused(ACT(&bigact.o), "oclf_act_and_mul: act.size", mout, sentinel, 2);
    bigact.newer_field = 0;
    TH_OK(ACT(&bigact.o));
    clFinish(e->queue);
    th_download(mout, got, 2 * sizeof(float));
    ck_assert_float_eq_tol(got[0], 3.0f / (1.0f + expf(-1.0f)), 1e-5f);
#undef ACT

    /* linear: y = 2 x 3, the epilogue's size checked */
    const float two = 2, three = 3;
    cl_mem mx = th_upload(&two, 4), mw = th_upload(&three, 4), my = th_upload(sentinel, 4);
    const oclf_buf bx = {mx, 0, 0}, bw = {mw, 0, 0}, by = {my, 0, 0};
#define LIN(ep)                                                                             \
    oclf_linear(e->ctx, e->queue, OCLF_F32, 1, 1, 1, bx, bw, by, OCLF_WEIGHT_NK,             \
                OCLF_LINEAR_NONE, ep, NULL, 0, NULL, NULL)
    oclf_linear_epilogue ep = OCLF_LINEAR_EPILOGUE_INIT;
    ep.size = 3;
    expect_size_refused(LIN(&ep), "oclf_linear: epilogue.size 3", my, sentinel, 1);
    NEWER_LAYOUT(oclf_linear_epilogue, bigep);
    bigep.o.alpha = bigep.o.beta = 1;
    bigep.newer_field = 1;
    expect_size_refused(LIN(&bigep.o), "oclf_linear: epilogue.size", my, sentinel, 1);
    bigep.newer_field = 0;
    TH_OK(LIN(&bigep.o));
    clFinish(e->queue);
    th_download(my, got, 4);
    ck_assert_float_eq(got[0], 6.0f);
#undef LIN

    /* rotary_embedding: one head of 2 at position 0, cos 0 and sin 1 (a
     * quarter turn: (x, y) -> (-y, x)) */
    const float hq[2] = {1, 2}, cs[2] = {0, 1};
    const int32_t pos = 0;
    cl_mem mq = th_upload(hq, sizeof hq), mcs = th_upload(cs, sizeof cs), mpos = th_upload(&pos, 4);
    const oclf_heads qh = {{mq, 0, 0}, 1, 0};
    oclf_rope rope;
    oclf_rope_init(&rope);
    ck_assert_uint_eq(rope.size, sizeof rope);
    rope.head_dim = rope.rot_dim = 2, rope.max_pos = 1;
    rope.positions = (oclf_buf){mpos, 0, 0}, rope.cos_sin = (oclf_buf){mcs, 0, 0};
#define ROT(r) oclf_rotary_embedding(e->ctx, e->queue, OCLF_F32, 1, r, qh, NULL, NULL, 0, NULL, NULL)
    rope.size = 3;
    expect_size_refused(ROT(&rope), "oclf_rotary_embedding: rope.size 3", mq, hq, 2);
    rope.size = 0; /* 0: the first layout */
    TH_OK(ROT(&rope));
    clFinish(e->queue);
    th_download(mq, got, sizeof hq);
    ck_assert_float_eq(got[0], -2.0f);
    ck_assert_float_eq(got[1], 1.0f);
#undef ROT

    /* kv_cache_write: a head of 2 into a cache of one slot */
    const float kv[2] = {5, 6};
    const int64_t slot = 0;
    cl_mem mk = th_upload(kv, sizeof kv), mslot = th_upload(&slot, 8);
    cl_mem mck = th_upload(sentinel, 8), mcv = th_upload(sentinel, 8);
    const oclf_heads kh = {{mk, 0, 0}, 1, 0};
    oclf_kv_cache cache;
    oclf_kv_cache_init(&cache);
    ck_assert_uint_eq(cache.size, sizeof cache);
    cache.k = mck, cache.v = mcv;
    cache.num_blocks = cache.block_size = cache.heads = 1, cache.head_dim = 2;
#define KVW(c, ch)                                                                              \
    oclf_kv_cache_write(e->ctx, e->queue, OCLF_F32, 1, kh, kh, (oclf_buf){mslot, 0, 0}, c, ch, 0, \
                        NULL, NULL)
    cache.size = 3;
    expect_size_refused(KVW(&cache, NULL), "oclf_kv_cache_write: cache.size 3", mck, sentinel, 2);
    cache.size = sizeof cache;
    /* the choice: checked (an unknown path, a WGS that is no power of two),
     * then honoured */
    oclf_choice bad = th_choice((oclf_path)7);
    expect_size_refused(KVW(&cache, &bad), "unknown path", mck, sentinel, 2);
    oclf_choice rows = th_row_choice(OCLF_PATH_FUSED, 1, 2, 1, 0, 1);
    oclf_params_set(&rows.params, "WGS", 3);
    expect_size_refused(KVW(&cache, &rows), "WGS", mck, sentinel, 2);
    oclf_params_set(&rows.params, "WGS", 2);
    TH_OK(KVW(&cache, &rows));
    clFinish(e->queue);
    th_download(mcv, got, 8);
    ck_assert_float_eq(got[0], 5.0f);
    ck_assert_float_eq(got[1], 6.0f);
#undef KVW

    /* qweight_convert: one Q8_0 block (d = 1.0, quants 0..31) into INT8;
     * linear_q: the weight's size */
    unsigned char block[34] = {0x00, 0x3c};
    for (int i = 0; i < 32; i++)
        block[2 + i] = (unsigned char)i;
    unsigned char zeros[40] = {0};
    cl_mem msrc = th_upload(block, sizeof block), mdq = th_upload(zeros, 32),
           mds = th_upload(zeros, 2);
    oclf_qweight src = OCLF_QWEIGHT_INIT, dst = OCLF_QWEIGHT_INIT;
    src.format = OCLF_QFORMAT_Q8_0, src.group = 32, src.q = (oclf_buf){msrc, 0, 0};
    src.scale_dtype = OCLF_F16;
    dst.format = OCLF_QFORMAT_INT8, dst.group = 32, dst.q = (oclf_buf){mdq, 0, 0};
    dst.scale = (oclf_buf){mds, 0, 0}, dst.scale_dtype = OCLF_F16;
#define CONV(ch) oclf_qweight_convert(e->ctx, e->queue, 1, 32, &src, &dst, ch, 0, NULL, NULL)
    unsigned char out[32];
    src.size = 3;
    ck_assert_int_eq(CONV(NULL), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "oclf_qweight_convert: src.size 3"));
    src.size = sizeof src;
    ck_assert_int_eq(CONV(&bad), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "oclf_qweight_convert: unknown path"));
    th_download(mdq, out, 32);
    ck_assert_int_eq(memcmp(out, zeros, 32), 0);
    const oclf_choice unfused = th_choice(OCLF_PATH_UNFUSED);
    TH_OK(CONV(&unfused));
    clFinish(e->queue);
    th_download(mdq, out, 32);
    ck_assert_int_eq(memcmp(out, block + 2, 32), 0);
    dst.size = 3;
    const float xs[32] = {0};
    cl_mem mxq = th_upload(xs, sizeof xs);
    ck_assert_int_eq(oclf_linear_q(e->ctx, e->queue, OCLF_F32, 1, 1, 32, (oclf_buf){mxq, 0, 0},
                                   &dst, by, OCLF_LINEAR_NONE, NULL, NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "oclf_linear_q: w.size 3"));
#undef CONV

    clReleaseMemObject(min), clReleaseMemObject(mout), clReleaseMemObject(mx);
    clReleaseMemObject(mw), clReleaseMemObject(my), clReleaseMemObject(mq);
    clReleaseMemObject(mcs), clReleaseMemObject(mpos), clReleaseMemObject(mk);
    clReleaseMemObject(mslot), clReleaseMemObject(mck), clReleaseMemObject(mcv);
    clReleaseMemObject(msrc), clReleaseMemObject(mdq), clReleaseMemObject(mds);
    clReleaseMemObject(mxq);
}
END_TEST

/* linear_cross_entropy's temporaries bound and report travel in its
 * options: the bound is honoured (too small for one token: refused), the
 * report written, and a report of a size that is no layout's refused with
 * nothing written. */
START_TEST(test_linear_ce_options)
{
    th_env *e = th_get();
    const float hx[2] = {1, 2}, hw[6] = {1, 0, 0, 1, 1, 1};
    const int64_t tg = 2;
    const float was = -7;
    cl_mem mx = th_upload(hx, sizeof hx), mw = th_upload(hw, sizeof hw), mt = th_upload(&tg, 8);
    cl_mem ml = th_upload(&was, 4);
    const oclf_buf bx = {mx, 0, 0}, bw = {mw, 0, 0}, bt = {mt, 0, 0}, bl = {ml, 0, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    oclf_linear_cross_entropy_info info = OCLF_LINEAR_CROSS_ENTROPY_INFO_INIT;
    o.info = &info;
#define LCE()                                                                                  \
    oclf_linear_cross_entropy(e->ctx, e->queue, OCLF_F32, 1, 2, 3, bx, bw, bt, bl, NULL, NULL, \
                              &o, NULL, 0, NULL, NULL)
    info.size = 3;
    expect_size_refused(LCE(), "options.info->size 3", ml, &was, 1);
    ck_assert_uint_eq(info.chunks, 0);
    info.size = sizeof info;
    o.max_temp_bytes = 1;
    expect_size_refused(LCE(), "options.max_temp_bytes (1)", ml, &was, 1);
    o.max_temp_bytes = 0;
    TH_OK(LCE());
    clFinish(e->queue);
    ck_assert_uint_eq(info.chunks, 1);
    ck_assert_uint_eq(info.chunk_tokens, 1);
    ck_assert_uint_gt(info.temp_bytes, 0);
    float loss;
    th_download(ml, &loss, 4);
    /* logits (1, 2, 3), target 2: lse - 3 */
    ck_assert_float_eq_tol(loss, logf(expf(1) + expf(2) + expf(3)) - 3.0f, 1e-5f);
#undef LCE
    clReleaseMemObject(mx), clReleaseMemObject(mw), clReleaseMemObject(mt);
    clReleaseMemObject(ml);
}
END_TEST

/* Every public function that returns a status starts its sentence with its
 * own name, whatever check failed and wherever it is written. */
static void expect_prefix(oclf_status st, const oclf_context *ctx, const char *fn)
{
    ck_assert_msg(st != OCLF_SUCCESS, "%s: the bad call succeeded", fn);
    const char *msg = oclf_last_error(ctx);
    char want[64];
    snprintf(want, sizeof want, "%s: ", fn);
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "'%s' does not start with '%s'", msg,
                  want);
    ck_assert_msg(strstr(msg + strlen(want), want) == NULL, "'%s' names %s twice", msg, fn);
}

START_TEST(test_error_prefix)
{
    th_env *e = th_get();
    oclf_context *c = e->ctx;
    cl_command_queue q = e->queue;
    cl_mem m = th_alloc(64 * 4);
    const oclf_buf b = {m, 0, 0}, nul = {NULL, 0, 0};
    oclf_context *out;
    oclf_context_stats stats = OCLF_CONTEXT_STATS_INIT;
    oclf_params p;
    memset(&p, 0, sizeof p);
    char text[64];
    const uint64_t dims[2] = {1, 64};
    oclf_activation act = {sizeof(oclf_activation), OCLF_ACT_SILU, 0, 0, 0, 0};
    oclf_rope rope;
    memset(&rope, 0, sizeof rope);
    rope.head_dim = 16, rope.rot_dim = 16, rope.max_pos = 1;
    rope.positions = b, rope.cos_sin = b;
    oclf_heads h = {nul, 1, 0};
    oclf_expr_decl in[] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}};
    oclf_expr_decl outs[] = {{"y", OCLF_EXPR_MATRIX, OCLF_F32}};
    oclf_expr *ex = NULL;
    TH_OK(oclf_expr_compile(c, "y = x + 1;", in, 1, outs, 1, &ex));
    oclf_expr_arg arg = {{m, 0, 0}, 0};
    float hd[1];
    int64_t hi[1];
    float hq[1] = {0};

    expect_prefix(oclf_context_create(NULL, e->device, NULL, &out), NULL, "oclf_context_create");
    expect_prefix(oclf_context_get_stats(c, NULL), c, "oclf_context_get_stats");
    expect_prefix(oclf_params_set(&p, "", 1), NULL, "oclf_params_set");
    expect_prefix(oclf_tuning_db_default_path(text, 2), NULL, "oclf_tuning_db_default_path");
    expect_prefix(oclf_tuning_db_check(NULL, NULL), NULL, "oclf_tuning_db_check");
    expect_prefix(oclf_tuning_db_merge(c, NULL, "[]"), c, "oclf_tuning_db_merge");
    expect_prefix(oclf_tuning_explain(c, "no_such_op", OCLF_F32, dims, 2, OCLF_PATH_AUTO, text,
                                      sizeof text),
                  c, "oclf_tuning_explain");
    oclf_tuning_decision dec;
    expect_prefix(oclf_tuning_resolve(c, "no_such_op", OCLF_F32, dims, 2, OCLF_PATH_AUTO, &dec),
                  c, "oclf_tuning_resolve");
    expect_prefix(oclf_tuning_resolve(c, "rms_norm", OCLF_F32, dims, 2, OCLF_PATH_AUTO, NULL), c,
                  "oclf_tuning_resolve");
    ck_assert(!oclf_tuning_params_valid(c, "rms_norm", OCLF_F32, dims, 3, OCLF_PATH_FUSED, &p));
    ck_assert_msg(strncmp(oclf_last_error(c), "oclf_tuning_params_valid: ", 26) == 0, "%s",
                  oclf_last_error(c));
    expect_prefix(oclf_rms_norm(c, q, OCLF_F32, 1, 64, nul, NULL, b, 0, NULL, 0, NULL, NULL), c,
                  "oclf_rms_norm");
    expect_prefix(oclf_rms_norm(c, q, OCLF_F32, 1, 0, b, NULL, b, 0, NULL, 0, NULL, NULL), c,
                  "oclf_rms_norm");
    expect_prefix(oclf_rms_norm(NULL, q, OCLF_F32, 1, 64, b, NULL, b, 0, NULL, 0, NULL, NULL), NULL,
                  "oclf_rms_norm");
    expect_prefix(oclf_add_rms_norm(c, NULL, OCLF_F32, 1, 64, b, b, NULL, 0, NULL, 0, NULL, NULL),
                  c, "oclf_add_rms_norm");
    expect_prefix(
        oclf_layer_norm(c, q, (oclf_dtype)9, 1, 64, b, NULL, NULL, b, 0, NULL, 0, NULL, NULL), c,
        "oclf_layer_norm");
    expect_prefix(
        oclf_add_layer_norm(c, q, OCLF_F32, 1, 64, b, b, NULL, NULL, b, -1, NULL, 0, NULL, NULL), c,
        "oclf_add_layer_norm");
    expect_prefix(oclf_act_and_mul(c, q, OCLF_F32, 1, 32, b, b, NULL, NULL, 0, NULL, NULL), c,
                  "oclf_act_and_mul");
    expect_prefix(oclf_act_and_mul(c, q, OCLF_F32, 1, 0, b, b, &act, NULL, 0, NULL, NULL), c,
                  "oclf_act_and_mul");
    expect_prefix(oclf_rotary_embedding(c, q, OCLF_F32, 1, &rope, h, NULL, NULL, 0, NULL, NULL),
                  c, "oclf_rotary_embedding");
    expect_prefix(oclf_qk_norm_rope(c, q, OCLF_F32, 1, 0, 0, 0, &rope, b, NULL, NULL, 1e-6f, NULL,
                                    0, NULL, NULL),
                  c, "oclf_qk_norm_rope");
    oclf_heads kvh = {b, 1, 0};
    expect_prefix(oclf_kv_cache_write(c, q, OCLF_F32, 1, kvh, kvh, b, NULL, NULL, 0, NULL, NULL), c,
                  "oclf_kv_cache_write");
    expect_prefix(oclf_qk_norm_rope_cache(c, q, OCLF_F32, 1, 1, 1, 1, &rope, b, NULL, NULL, b, NULL,
                                          1e-6f, NULL, 0, NULL, NULL),
                  c, "oclf_qk_norm_rope_cache");
    expect_prefix(oclf_l2_topk(c, q, OCLF_F32, 1, 4, 0, 1, b, b, b, b, NULL, NULL, 0, NULL, NULL),
                  c, "oclf_l2_topk");
    expect_prefix(oclf_l2_topk_sharded(NULL, 0, 1, 1, 1, hq, 1, hd, hi, NULL), NULL,
                  "oclf_l2_topk_sharded");
    /* a shard's own failure: the nested oclf_l2_topk's sentence follows */
    oclf_l2_shard sh = {c, q, b, 4, OCLF_F32, 0, NULL, NULL, NULL};
    oclf_choice bad = th_choice(OCLF_PATH_AUTO);
    bad.path = (oclf_path)7;
    sh.choice = &bad;
    expect_prefix(oclf_l2_topk_sharded(&sh, 1, 1, 1, 1, hq, 1, hd, hi, NULL), NULL,
                  "oclf_l2_topk_sharded");
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "shard 0: oclf_l2_topk: "));
    expect_prefix(oclf_l2_topk_merge(1, 0, 0, NULL, NULL, NULL, hd, hi), NULL,
                  "oclf_l2_topk_merge");
    /* linear: a bad argument; a kernel parameter refused once dispatch has
     * laid the call's parameters over the heuristic's (inside the call,
     * where filling a parameter set must not rename the call) */
    cl_mem ym = th_alloc(64 * 4);
    const oclf_buf yb = {ym, 0, 0};
    oclf_linear_epilogue epi;
    oclf_linear_epilogue_init(&epi);
    epi.act = (oclf_linear_act)9;
    expect_prefix(oclf_linear(c, q, OCLF_F32, 1, 0, 4, b, b, yb, OCLF_WEIGHT_NK, OCLF_LINEAR_NONE,
                              NULL, NULL, 0, NULL, NULL),
                  c, "oclf_linear");
    expect_prefix(oclf_linear(c, q, OCLF_F32, 1, 4, 4, b, b, yb, OCLF_WEIGHT_NK, OCLF_LINEAR_NONE,
                              &epi, NULL, 0, NULL, NULL),
                  c, "oclf_linear");
    oclf_choice mb3 = th_choice(OCLF_PATH_FUSED);
    TH_OK(oclf_params_set(&mb3.params, "MB", 3));
    expect_prefix(oclf_linear(c, q, OCLF_F32, 1, 4, 4, b, b, yb, OCLF_WEIGHT_NK, OCLF_LINEAR_NONE,
                              NULL, &mb3, 0, NULL, NULL),
                  c, "oclf_linear");
    ck_assert_ptr_nonnull(strstr(oclf_last_error(c), "MB = 3"));
    oclf_choice vec3 = th_choice(OCLF_PATH_FUSED);
    TH_OK(oclf_params_set(&vec3.params, "VEC", 3));
    expect_prefix(oclf_rms_norm(c, q, OCLF_F32, 1, 64, b, NULL, yb, 1e-6f, &vec3, 0, NULL, NULL), c,
                  "oclf_rms_norm");
    clReleaseMemObject(ym);
    oclf_expr *bad_ex;
    expect_prefix(oclf_expr_compile(c, "y = ;", in, 1, outs, 1, &bad_ex), c,
                  "oclf_expr_compile");
    expect_prefix(oclf_expr_run(NULL, q, 1, 1, &arg, &b, 0, 0, NULL, 0, NULL, NULL), NULL,
                  "oclf_expr_run");
    expect_prefix(oclf_expr_run(ex, q, 1, 0, &arg, &b, 0, 0, NULL, 0, NULL, NULL), c,
                  "oclf_expr_run");
    (void)stats;
    oclf_expr_release(ex);
    clReleaseMemObject(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api");
    TCase *t = tcase_create("api");
    tcase_set_timeout(t, 0);
    tcase_add_test(t, test_version);
    tcase_add_test(t, test_status_and_dtype_names);
    tcase_add_test(t, test_params);
    tcase_add_test(t, test_context_create_errors);
    tcase_add_test(t, test_foreign_queue);
    tcase_add_test(t, test_last_error_per_thread);
    tcase_add_test(t, test_zero_rows_event);
    tcase_add_test(t, test_kernel_dir);
    tcase_add_test(t, test_kernel_parts);
    tcase_add_test(t, test_status_messages);
    tcase_add_test(t, test_context_options_size);
    tcase_add_test(t, test_l2_options_size);
    tcase_add_test(t, test_error_prefix);
    tcase_add_test(t, test_division_option);
    tcase_add_test(t, test_struct_sizes);
    tcase_add_test(t, test_linear_ce_options);
    suite_add_tcase(s, t);
    return th_run_suite(s);
}
