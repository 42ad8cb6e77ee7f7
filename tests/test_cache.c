/*
 * Program cache: a second process that uses the same kernels does not invoke
 * the compiler; damaged cache files are rebuilt silently; OCLF_KERNEL_DIR
 * sources are used and keyed by their content.
 *
 * The parent never touches OpenCL: it runs this binary again as a child
 * (`--child CACHE_DIR`), which builds, runs and checks an op, then prints
 * its counters.
 */
#include "oclfuse.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char self[4096];

typedef struct counts {
    int rc;
    unsigned long long compiled, from_disk, hits, rejected;
} counts;

static int child(const char *cache_dir)
{
    cl_platform_id plat;
    cl_device_id dev;
    cl_int err;
    if (clGetPlatformIDs(1, &plat, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS)
        return 3;
    cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(cl, dev, 0, &err);
    oclf_context_options opt;
    oclf_context_options_init(&opt);
    opt.cache_dir = cache_dir;
    oclf_context *ctx;
    if (oclf_context_create(cl, dev, &opt, &ctx) != OCLF_SUCCESS)
        return 4;
    enum { R = 3, C = 100 };
    float hx[R * C], hy[R * C];
    for (int i = 0; i < R * C; i++)
        hx[i] = (float)((i * 37) % 11) - 5.0f;
    cl_mem x = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof hx, hx, &err);
    cl_mem y = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof hy, NULL, &err);
    oclf_buf bx = {x, 0, 0}, by = {y, 0, 0};
    int rc = 0;
    for (int rep = 0; rep < 2 && rc == 0; rep++) {
        oclf_status st =
            oclf_rms_norm(ctx, q, OCLF_F32, R, C, bx, NULL, by, 0.0f, NULL, 0, NULL, NULL);
        if (st != OCLF_SUCCESS) {
            fprintf(stderr, "child: %s\n", oclf_last_error(ctx));
            rc = 5;
        }
    }
    if (rc == 0 && clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof hy, hy, 0, NULL, NULL) == CL_SUCCESS) {
        for (int r = 0; r < R && rc == 0; r++) {
            double ms = 0;
            for (int c = 0; c < C; c++)
                ms += (double)hy[r * C + c] * hy[r * C + c];
            if (ms / C < 0.9999 || ms / C > 1.0001)
                rc = 6; /* a wrong kernel from a bad cache would show here */
        }
    }
    oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
    oclf_context_get_stats(ctx, &s);
    printf("%d %llu %llu %llu %llu\n", rc, (unsigned long long)s.programs_compiled,
           (unsigned long long)s.programs_from_disk, (unsigned long long)s.program_hits,
           (unsigned long long)s.disk_cache_rejected);
    clReleaseMemObject(x);
    clReleaseMemObject(y);
    oclf_context_destroy(ctx);
    clReleaseCommandQueue(q);
    clReleaseContext(cl);
    return rc;
}

static counts run_child(const char *dir)
{
    counts c = {-1, 0, 0, 0, 0};
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' --child '%s'", self, dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    int n = fscanf(p, "%d %llu %llu %llu %llu", &c.rc, &c.compiled, &c.from_disk, &c.hits,
                   &c.rejected);
    int status = pclose(p);
    ck_assert_msg(n == 5, "child printed no counters");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: rc %d", c.rc);
    return c;
}

static void make_temp_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/oclf-cache-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

/* Applies fn to every cached binary in dir; returns how many. */
static int for_each_bin(const char *dir, void (*fn)(const char *path))
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0) {
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            fn(path);
            n++;
        }
    }
    closedir(d);
    return n;
}

static void no_op(const char *path) { (void)path; }

static void truncate_half(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size / 2), 0);
}

static void scribble(const char *path)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 200, SEEK_SET); /* inside the payload: the checksum must catch it */
    fputs("not a program binary", f);
    fclose(f);
}

static void remove_file(const char *path) { unlink(path); }

static void cleanup(const char *dir)
{
    for_each_bin(dir, remove_file);
    rmdir(dir);
}

START_TEST(test_second_process_does_not_compile)
{
    char dir[4096];
    make_temp_dir(dir, sizeof dir);
    counts a = run_child(dir);
    ck_assert_msg(a.compiled >= 1, "the first process compiled nothing (%llu)", a.compiled);
    ck_assert_msg(a.hits >= 1, "the second call in a process missed the in-memory cache");
    ck_assert_int_ge(for_each_bin(dir, no_op), 1);
    counts b = run_child(dir);
    ck_assert_msg(b.compiled == 0, "the second process compiled %llu programs", b.compiled);
    ck_assert_msg(b.from_disk == a.compiled, "loaded %llu from disk, expected %llu", b.from_disk,
                  a.compiled);
    cleanup(dir);
}
END_TEST

START_TEST(test_damaged_files_are_rebuilt)
{
    void (*damage[2])(const char *) = {truncate_half, scribble};
    for (int k = 0; k < 2; k++) {
        char dir[4096];
        make_temp_dir(dir, sizeof dir);
        counts a = run_child(dir);
        ck_assert_int_ge(for_each_bin(dir, damage[k]), 1);
        counts b = run_child(dir); /* checks its own result */
        ck_assert_msg(b.rejected >= 1, "damage %d: no cache file was rejected", k);
        ck_assert_msg(b.compiled == a.compiled, "damage %d: rebuilt %llu of %llu", k, b.compiled,
                      a.compiled);
        counts c = run_child(dir); /* the rewritten files are good again */
        ck_assert_msg(c.compiled == 0 && c.rejected == 0, "damage %d: the rebuild was not cached",
                      k);
        cleanup(dir);
    }
}
END_TEST

START_TEST(test_no_cache_dir)
{
    counts a = run_child(""); /* "" disables the disk cache */
    counts b = run_child("");
    ck_assert(a.compiled >= 1 && b.compiled == a.compiled && b.from_disk == 0);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child(argv[2]);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    Suite *s = suite_create("cache");
    TCase *t = tcase_create("disk");
    tcase_set_timeout(t, 0);
    tcase_add_test(t, test_second_process_does_not_compile);
    tcase_add_test(t, test_damaged_files_are_rebuilt);
    tcase_add_test(t, test_no_cache_dir);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
