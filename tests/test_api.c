/* Public API basics: versions, statuses, parameter sets, context creation
 * and the per-thread last error. */
#include "harness.h"

#include <pthread.h>
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

    oclf_context_stats s;
    ck_assert_int_eq(oclf_context_get_stats(NULL, &s), OCLF_INVALID_ARGUMENT);
    ck_assert_int_eq(oclf_context_get_stats(e->ctx, &s), OCLF_SUCCESS);
    ck_assert(strchr(oclf_context_fingerprint(e->ctx), '|') != NULL);
}
END_TEST

/* A queue from another cl_context is rejected. */
START_TEST(test_foreign_queue)
{
    th_env *e = th_get();
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(other, e->device, 0, &err);
    cl_mem m = th_alloc(64 * 4);
    oclf_buf b = {m, 0, 0};
    ck_assert_int_eq(oclf_rms_norm(e->ctx, q, OCLF_F32, 1, 64, b, b, NULL, 0, NULL, 0, NULL, NULL),
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
    oclf_rms_norm(e->ctx, e->queue, OCLF_F32, 1, 64, (oclf_buf){0}, (oclf_buf){0}, NULL, 0, NULL,
                  0, NULL, NULL);
    ok = strstr(oclf_last_error(e->ctx), "cl_mem is NULL") != NULL;
    return ok ? &ok : NULL;
}

START_TEST(test_last_error_per_thread)
{
    th_env *e = th_get();
    cl_mem m = th_alloc(64 * 4);
    oclf_buf b = {m, 0, 0};
    ck_assert_int_eq(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, 1, 0, b, b, NULL, 0, NULL, 0, NULL,
                                   NULL),
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
    TH_OK(oclf_layer_norm(e->ctx, e->queue, OCLF_F32, 0, 64, b, b, NULL, NULL, 1e-5f, NULL, 1,
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
    ck_assert_int_eq(oclf_rms_norm(ctx, e->queue, OCLF_F32, 2, 16, bm, by, NULL, 0, NULL, 0, NULL,
                                   NULL),
                     OCLF_SUCCESS);
    oclf_context_stats s;
    oclf_context_get_stats(ctx, &s);
    ck_assert_uint_ge(s.programs_compiled, 1);
    oclf_context_destroy(ctx);

    o.kernel_dir = "/nonexistent-oclfuse-kernels";
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    ck_assert_int_eq(oclf_rms_norm(ctx, e->queue, OCLF_F32, 2, 16, bm, by, NULL, 0, NULL, 0, NULL,
                                   NULL),
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
    suite_add_tcase(s, t);
    return th_run_suite(s);
}
