#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static th_env env;
static int ready;

static void die(const char *what, cl_int err)
{
    fprintf(stderr, "test setup: %s failed (%d)\n", what, (int)err);
    exit(getenv("OCLF_TEST_DEVICE_OPTIONAL") ? 77 : 1);
}

th_env *th_get(void)
{
    if (ready)
        return &env;
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(16, plats, &np);
    if (err != CL_SUCCESS || np == 0)
        die("clGetPlatformIDs (no OpenCL platform)", err);
    const char *want = getenv("OCLF_TEST_PLATFORM");
    for (cl_uint i = 0; i < np && !env.device; i++) {
        char name[256] = "";
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (want && *want && !strstr(name, want))
            continue;
        cl_device_id dev;
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) == CL_SUCCESS && nd) {
            env.platform = plats[i];
            env.device = dev;
        }
    }
    if (!env.device)
        die("finding a device", CL_DEVICE_NOT_FOUND);
    env.cl = clCreateContext(NULL, 1, &env.device, NULL, NULL, &err);
    if (!env.cl)
        die("clCreateContext", err);
    env.queue = clCreateCommandQueue(env.cl, env.device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (!env.queue)
        die("clCreateCommandQueue", err);
    oclf_status st = oclf_context_create(env.cl, env.device, NULL, &env.ctx);
    if (st != OCLF_SUCCESS) {
        fprintf(stderr, "%s\n", oclf_last_error(NULL));
        exit(1);
    }
    ready = 1;
    return &env;
}

void th_teardown(void)
{
    if (!ready)
        return;
    oclf_context_destroy(env.ctx);
    clReleaseCommandQueue(env.queue);
    clReleaseContext(env.cl);
    memset(&env, 0, sizeof env);
    ready = 0;
}

static uint64_t rng = 0x853c49e6748fea9bull;
void th_seed(uint64_t seed) { rng = seed * 0x9e3779b97f4a7c15ull + 1; }

float th_uniform(float lo, float hi)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

void *th_random(oclf_dtype dtype, size_t n, float lo, float hi)
{
    void *p = malloc(n * oclf_dtype_size(dtype) + 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        oclf_ref_set(dtype, p, i, th_uniform(lo, hi));
    return p;
}

cl_mem th_alloc(size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(th_get()->cl, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    ck_assert_msg(m && err == CL_SUCCESS, "clCreateBuffer(%zu) failed: %d", bytes, err);
    return m;
}

cl_mem th_upload(const void *host, size_t bytes)
{
    cl_mem m = th_alloc(bytes);
    if (bytes)
        ck_assert_int_eq(clEnqueueWriteBuffer(th_get()->queue, m, CL_TRUE, 0, bytes, host, 0,
                                              NULL, NULL), CL_SUCCESS);
    return m;
}

void th_download(cl_mem mem, void *host, size_t bytes)
{
    if (bytes)
        ck_assert_int_eq(clEnqueueReadBuffer(th_get()->queue, mem, CL_TRUE, 0, bytes, host, 0,
                                             NULL, NULL), CL_SUCCESS);
}

int th_quick(void)
{
    const char *q = getenv("OCLF_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

int th_platform_is(const char *what)
{
    char version[256] = "";
    if (clGetPlatformInfo(th_get()->platform, CL_PLATFORM_VERSION, sizeof version - 1, version,
                          NULL) != CL_SUCCESS)
        return 0;
    const size_t n = strlen(what);
    for (const char *p = version; *p; p++)
        if (strncasecmp(p, what, n) == 0)
            return 1;
    return 0;
}

oclf_choice th_choice(oclf_path path)
{
    oclf_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = path;
    return ch;
}

oclf_choice th_row_choice(oclf_path path, int layout, int wgs, int vec, int stage, int rows)
{
    oclf_choice ch = th_choice(path);
    oclf_params_set(&ch.params, "LAYOUT", layout);
    oclf_params_set(&ch.params, "WGS", wgs);
    oclf_params_set(&ch.params, "VEC", vec);
    oclf_params_set(&ch.params, "STAGE", stage);
    oclf_params_set(&ch.params, "ROWS", rows);
    return ch;
}

oclf_context *th_validate_context(void)
{
    th_env *e = th_get();
    oclf_context_options opt;
    oclf_context_options_init(&opt);
    opt.validate = 1;
    oclf_context *vctx = NULL;
    TH_OK(oclf_context_create(e->cl, e->device, &opt, &vctx));
    return vctx;
}

static char build_log[1 << 14];

static void keep_build(void *user, oclf_log_level level, const char *message)
{
    (void)user;
    const size_t used = strlen(build_log);
    if (level == OCLF_LOG_DEBUG && strncmp(message, "launch ", 7) == 0)
        snprintf(build_log + used, sizeof build_log - used, "%s\n", message);
}

oclf_context *th_build_log_context(void)
{
    th_env *e = th_get();
    oclf_context_options opt;
    oclf_context_options_init(&opt);
    opt.log = keep_build;
    oclf_context *lctx = NULL;
    TH_OK(oclf_context_create(e->cl, e->device, &opt, &lctx));
    th_builds_clear();
    return lctx;
}

const char *th_builds(void) { return build_log; }

void th_builds_clear(void) { build_log[0] = '\0'; }

int th_built(const char *source, const char *defines, int aligned)
{
    for (const char *line = build_log; *line;) {
        const char *end = strchr(line, '\n');
        const size_t len = end ? (size_t)(end - line) : strlen(line);
        char one[1024];
        snprintf(one, sizeof one, "%.*s", (int)len, line);
        if (strstr(one, source) && strstr(one, defines) &&
            (strstr(one, "OCLF_ALIGNED=1") != NULL) == aligned)
            return 1;
        line += len + (end ? 1 : 0);
    }
    return 0;
}

const th_place th_places[TH_PLACES] = {{0, 0, 1}, {16, 16, 1}, {1, 0, 0}, {0, 3, 0}};

oclf_choice th_struct_choice(int s)
{
    return th_row_choice(s % 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED, s / 2, 64, s / 2 ? 4 : 8, 0,
                         1);
}

void th_expect_build(const char *source, int s, int aligned, const char *what)
{
    char defs[64];
    snprintf(defs, sizeof defs, "-DOCLF_LAYOUT=%d -DOCLF_WGS=64 -DOCLF_VEC=%d", s / 2,
             s / 2 ? 4 : 8);
    ck_assert_msg(th_built(source, defs, aligned), "%s, structure %d: no %s build of %s with '%s':\n%s",
                  what, s, aligned ? "aligned" : "plain", source, defs, th_builds());
}

int th_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    th_teardown();
    return failed ? 1 : 0;
}
