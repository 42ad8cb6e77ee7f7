/*
 * Faults the library must survive: a damaged, truncated or foreign program
 * cache file, a cache folder that cannot be made, a read-only cache folder,
 * a write that fails (a full disk: a 4 KiB tmpfs), and a temporary larger
 * than the device
 * can allocate. Every call still succeeds (or fails with the right status),
 * problems reach the log callback and nothing reaches stdout.
 */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct logbuf {
    char text[16384];
    int n;
} logbuf;

static void on_log(void *user, oclf_log_level level, const char *msg)
{
    logbuf *b = user;
    (void)level;
    size_t used = strlen(b->text);
    snprintf(b->text + used, sizeof b->text - used, "%s\n", msg);
    b->n++;
}

static oclf_context *make_ctx(const char *cache_dir, logbuf *lb)
{
    th_env *e = th_get();
    oclf_context_options o;
    oclf_context_options_init(&o);
    o.cache_dir = cache_dir;
    o.log = on_log;
    o.log_user = lb;
    oclf_context *ctx = NULL;
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    return ctx;
}

/* stdout goes to a file while a check runs; it must stay empty. */
static int saved_stdout = -1;
static char out_path[256];
static void capture_begin(void)
{
    fflush(stdout);
    if (getenv("OCLF_TEST_NO_CAPTURE"))
        return;
    snprintf(out_path, sizeof out_path, "/tmp/oclf-stdout-XXXXXX");
    int fd = mkstemp(out_path);
    ck_assert_int_ge(fd, 0);
    saved_stdout = dup(1);
    dup2(fd, 1);
    close(fd);
}
static void capture_end(void)
{
    fflush(stdout);
    if (saved_stdout < 0)
        return;
    dup2(saved_stdout, 1);
    close(saved_stdout);
    saved_stdout = -1;
    struct stat st;
    ck_assert_int_eq(stat(out_path, &st), 0);
    unlink(out_path);
    ck_assert_msg(st.st_size == 0, "the library wrote %lld bytes to stdout", (long long)st.st_size);
}

/* layer_norm of a 3 x 100 f32 or f16 tensor on ctx, checked loosely. */
static void run_op(oclf_context *ctx, oclf_dtype dt)
{
    th_env *e = th_get();
    enum { R = 3, C = 100 };
    void *x = th_random(dt, R * C, -2, 2);
    cl_mem mx = th_upload(x, R * C * oclf_dtype_size(dt)), my = th_alloc(R * C * 4);
    oclf_buf bx = {mx, 0, 0}, by = {my, 0, 0};
    oclf_status st =
        oclf_layer_norm(ctx, e->queue, dt, R, C, bx, NULL, NULL, by, 1e-5f, NULL, 0, NULL, NULL);
    ck_assert_msg(st == OCLF_SUCCESS, "%s", oclf_last_error(ctx));
    ck_assert_int_eq(clFinish(e->queue), CL_SUCCESS);
    double *want = malloc(R * C * sizeof *want);
    void *got = malloc(R * C * 4);
    th_download(my, got, R * C * oclf_dtype_size(dt));
    oclf_ref_layer_norm(dt, R, C, x, C, NULL, NULL, 1e-5f, want);
    size_t first = 0;
    double maxerr = 0;
    ck_assert_int_eq(oclf_ref_compare(dt, got, C, want, R, C, &first, &maxerr), 0);
    free(want), free(got), free(x);
    clReleaseMemObject(mx), clReleaseMemObject(my);
}

static oclf_context_stats stats(oclf_context *ctx)
{
    oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
    ck_assert_int_eq(oclf_context_get_stats(ctx, &s), OCLF_SUCCESS);
    return s;
}

static int for_each_bin(const char *dir, char paths[][512], int max)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *en;
    while ((en = readdir(d)) != NULL) {
        size_t len = strlen(en->d_name);
        if (len > 4 && strcmp(en->d_name + len - 4, ".bin") == 0 && n < max)
            snprintf(paths[n++], 512, "%s/%s", dir, en->d_name);
    }
    closedir(d);
    return n;
}

static void rm_dir(const char *dir)
{
    char paths[16][512];
    int n = for_each_bin(dir, paths, 16);
    for (int i = 0; i < n; i++)
        unlink(paths[i]);
    rmdir(dir);
}

/* A populated cache folder with the f32 and f16 programs. */
static void populate(char *dir, size_t len, char paths[][512])
{
    snprintf(dir, len, "/tmp/oclf-faults-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    logbuf lb = {{0}, 0};
    oclf_context *ctx = make_ctx(dir, &lb);
    run_op(ctx, OCLF_F32);
    run_op(ctx, OCLF_F16);
    oclf_context_destroy(ctx);
    ck_assert_int_eq(for_each_bin(dir, paths, 16), 2);
}

START_TEST(test_truncated_file)
{
    char dir[64], paths[16][512];
    populate(dir, sizeof dir, paths);
    ck_assert_int_eq(truncate(paths[0], 10), 0); /* inside the header */
    ck_assert_int_eq(truncate(paths[1], 100), 0); /* inside the payload */
    logbuf lb = {{0}, 0};
    capture_begin();
    oclf_context *ctx = make_ctx(dir, &lb);
    run_op(ctx, OCLF_F32);
    run_op(ctx, OCLF_F16);
    capture_end();
    ck_assert_int_eq(stats(ctx).disk_cache_rejected, 2);
    ck_assert_int_eq(stats(ctx).programs_compiled, 2);
    ck_assert_msg(strstr(lb.text, "truncated"), "log: %s", lb.text);
    oclf_context_destroy(ctx);
    /* The rebuilt programs were written back whole. */
    lb.text[0] = 0;
    ctx = make_ctx(dir, &lb);
    run_op(ctx, OCLF_F32);
    ck_assert_int_eq(stats(ctx).programs_from_disk, 1);
    oclf_context_destroy(ctx);
    rm_dir(dir);
}
END_TEST

/* A file written for another device or options sits under this key's
 * name (copied from elsewhere): its header's key gives it away. */
START_TEST(test_foreign_file)
{
    char dir[64], paths[16][512];
    populate(dir, sizeof dir, paths);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.swap", paths[0]);
    ck_assert_int_eq(rename(paths[0], tmp), 0);
    ck_assert_int_eq(rename(paths[1], paths[0]), 0);
    ck_assert_int_eq(rename(tmp, paths[1]), 0);
    logbuf lb = {{0}, 0};
    capture_begin();
    oclf_context *ctx = make_ctx(dir, &lb);
    run_op(ctx, OCLF_F32);
    run_op(ctx, OCLF_F16);
    capture_end();
    ck_assert_int_eq(stats(ctx).disk_cache_rejected, 2);
    ck_assert_msg(strstr(lb.text, "key mismatch"), "log: %s", lb.text);
    oclf_context_destroy(ctx);
    rm_dir(dir);
}
END_TEST

/* mkdir fails (a path under a regular file: root ignores permissions, so a
 * read-only folder would not stop it). */
START_TEST(test_unwritable_folder)
{
    logbuf lb = {{0}, 0};
    capture_begin();
    oclf_context *ctx = make_ctx("/dev/null/oclf-cache", &lb);
    run_op(ctx, OCLF_F32);
    capture_end();
    ck_assert_int_eq(stats(ctx).programs_compiled, 1);
    ck_assert_msg(strstr(lb.text, "/dev/null/oclf-cache"), "log: %s", lb.text);
    oclf_context_destroy(ctx);
}
END_TEST

/* A cache folder mounted read-only (a read-only bind mount: root ignores
 * permission bits but not EROFS; elsewhere the case is skipped with a note).
 * The programs already there are loaded; a new one is built, its write
 * fails with a log line naming the error, and the call succeeds. */
START_TEST(test_readonly_folder)
{
    char dir[64], paths[16][512];
    populate(dir, sizeof dir, paths);
    /* The type is ignored for bind mounts, but given: NULL reads as a bad
     * pointer to memory checkers. */
    if (mount(dir, dir, "none", MS_BIND, NULL) != 0) {
        fprintf(stderr, "test_readonly_folder skipped: cannot bind-mount (%s)\n", strerror(errno));
        rm_dir(dir);
        return;
    }
    if (mount(dir, dir, "none", MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0) {
        fprintf(stderr, "test_readonly_folder skipped: cannot remount read-only (%s)\n",
                strerror(errno));
        umount(dir);
        rm_dir(dir);
        return;
    }
    /* The checks come after the unmount, so a failing one leaves no mount
     * behind (a failed check ends the test's process). */
    logbuf lb = {{0}, 0};
    capture_begin();
    oclf_context *ctx = make_ctx(dir, &lb);
    run_op(ctx, OCLF_F32);  /* from the folder */
    run_op(ctx, OCLF_BF16); /* built; not written */
    capture_end();
    const oclf_context_stats st = stats(ctx);
    oclf_context_destroy(ctx);
    umount(dir);
    const int files = for_each_bin(dir, paths, 16);
    rm_dir(dir);
    ck_assert_int_eq(st.programs_from_disk, 1);
    ck_assert_int_eq(st.programs_compiled, 1);
    ck_assert_msg(strstr(lb.text, strerror(EROFS)), "log: %s", lb.text);
    ck_assert_int_eq(files, 2);
}
END_TEST

/* A write that fails part way, as on a full disk: the cache folder is a
 * 4 KiB tmpfs (mounting needs root; elsewhere the case is skipped with a
 * note on stderr). RLIMIT_FSIZE would be the unprivileged way, but POCL
 * writes files of its own while it builds and fails under it. */
START_TEST(test_disk_full)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/oclf-faults-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    if (mount("tmpfs", dir, "tmpfs", 0, "size=4k") != 0) {
        fprintf(stderr, "test_disk_full skipped: cannot mount a tmpfs (%s)\n", strerror(errno));
        rmdir(dir);
        return;
    }
    logbuf lb = {{0}, 0};
    capture_begin();
    oclf_context *ctx = make_ctx(dir, &lb);
    run_op(ctx, OCLF_F32);
    capture_end();
    ck_assert_msg(strstr(lb.text, "not written"), "log: %s", lb.text);
    ck_assert_int_eq(stats(ctx).programs_compiled, 1);
    oclf_context_destroy(ctx);
    /* Nothing half-written was left behind. */
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *en; (en = readdir(d)) != NULL;)
        entries += en->d_name[0] != '.';
    closedir(d);
    umount(dir);
    rmdir(dir);
    ck_assert_int_eq(entries, 0);
}
END_TEST

/* An unfused layer_norm whose per-row statistics (16 bytes a row) exceed the
 * largest allocation: OCLF_OUT_OF_RESOURCES, nothing enqueued, and the
 * context keeps working. The input is one column of f16 in place, so the
 * operand buffer (2 bytes a row) is an eighth of that size and valid. */
START_TEST(test_out_of_resources)
{
    th_env *e = th_get();
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(e->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    const size_t rows = (size_t)(max_alloc / 16) + 1;
    cl_int err;
    cl_mem big = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, rows * 2, NULL, &err);
    ck_assert_msg(big && err == CL_SUCCESS, "clCreateBuffer(%zu): %d", rows * 2, err);
    oclf_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = OCLF_PATH_UNFUSED;
    oclf_buf b = {big, 0, 0};
    cl_event ev = NULL;
    oclf_status st = oclf_layer_norm(e->ctx, e->queue, OCLF_F16, rows, 1, b, NULL, NULL, b, 1e-5f,
                                     &ch, 0, NULL, &ev);
    ck_assert_msg(st == OCLF_OUT_OF_RESOURCES, "got %s: %s", oclf_status_string(st),
                  oclf_last_error(e->ctx));
    ck_assert_ptr_null(ev);
    ck_assert_msg(strstr(oclf_last_error(e->ctx), "MAX_MEM_ALLOC"), "%s",
                  oclf_last_error(e->ctx));
    clReleaseMemObject(big);
    run_op(e->ctx, OCLF_F32);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("faults");
    TCase *t = tcase_create("faults");
    tcase_set_timeout(t, 0);
    tcase_add_test(t, test_truncated_file);
    tcase_add_test(t, test_foreign_file);
    tcase_add_test(t, test_unwritable_folder);
    tcase_add_test(t, test_readonly_folder);
    tcase_add_test(t, test_disk_full);
    tcase_add_test(t, test_out_of_resources);
    suite_add_tcase(s, t);
    return th_run_suite(s);
}
