/* The op table's shared machinery: shapes, device, timing, copy bandwidth. */
#include "opdesc.h"

#include "ref.h"

#include <clblast_c.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One descriptor per row of the op list, named op_<name>; the expression
 * family has one per preset expression instead (tune/op_expr.c). A new
 * family adds its line here. */
#define OP_ONE(name) &op_##name,
#define OP_DESCS_norm OP_ONE
#define OP_DESCS_act OP_ONE
#define OP_DESCS_rope OP_ONE
#define OP_DESCS_l2topk OP_ONE
#define OP_DESCS_linear OP_ONE
#define OP_DESCS_attention OP_ONE
#define OP_DESCS_loss OP_ONE
#define OP_DESCS_loss_linear OP_ONE
#define OP_DESCS_norm_grad OP_ONE
#define OP_DESCS_expr(name) \
    &op_ew_softplus, &op_ew_add_relu_scale, &op_ew_bias_gelu_dropout, &op_ew_chain8, \
    &op_ew_relu_mask, &op_ew_relu_mask_bwd, &op_ew_dropout_bwd,
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) extern const op_desc op_##name;
#include "../lib/ops.def"
#undef OCLF_OP
extern const op_desc op_ew_softplus, op_ew_add_relu_scale, op_ew_bias_gelu_dropout, op_ew_chain8;
extern const op_desc op_ew_relu_mask, op_ew_relu_mask_bwd, op_ew_dropout_bwd;

const op_desc *const op_table[] = {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) OP_DESCS_##family(name)
#include "../lib/ops.def"
#undef OCLF_OP
    NULL,
};

const char *op_lib_op(const op_desc *op) { return op->lib_op ? op->lib_op : op->name; }

int op_list_next(const char **p, char *text, size_t n)
{
    if (!**p)
        return 0;
    const size_t len = strcspn(*p, ",");
    snprintf(text, n, "%.*s", (int)len, *p);
    *p += len + ((*p)[len] ? 1 : 0);
    return 1;
}

char *op_short_shapes(const op_desc *op)
{
    const char *list = op->bench_shapes;
    char *out = calloc(1, strlen(list) + 1), cheapest[128] = "";
    if (!out)
        return NULL;
    double least = INFINITY;
    char text[128];
    int taken = 0;
    for (const char *p = list; op_list_next(&p, text, sizeof text);) {
        op_shape shape;
        if (!op_parse_shape(op, text, &shape))
            continue;
        const double bytes = op->min_bytes(&shape, OCLF_F32);
        const double est = fmax(bytes / 10e9, op->flops ? op->flops(&shape) / 50e9 : 0);
        if (bytes < least) {
            least = bytes;
            snprintf(cheapest, sizeof cheapest, "%s", text);
        }
        if (est <= SHORT_CALL_S && taken < SHORT_MAX_SHAPES) {
            sprintf(out + strlen(out), "%s%s", *out ? "," : "", text);
            taken++;
        }
    }
    if (!*out)
        strcpy(out, cheapest); /* a shape of the list, so it fits */
    return out;
}

int op_params_same(const oclf_params *a, const oclf_params *b)
{
    if (a->count != b->count)
        return 0;
    for (unsigned i = 0; i < a->count; i++) {
        int64_t v;
        if (!oclf_params_get(b, a->item[i].name, &v) || v != a->item[i].value)
            return 0;
    }
    return 1;
}

const op_desc *op_find(const char *name)
{
    for (int i = 0; op_table[i]; i++)
        if (strcmp(op_table[i]->name, name) == 0)
            return op_table[i];
    return NULL;
}

int op_parse_shape(const op_desc *op, const char *text, op_shape *out)
{
    memset(out, 0, sizeof *out);
    const char *p = text;
    while (*p && out->ndims < OP_MAX_DIMS) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p)
            return 0;
        out->d[out->ndims++] = v;
        if (*end == 'x' || *end == 'X')
            p = end + 1;
        else if (*end == '\0')
            p = end;
        else
            return 0;
    }
    return *p == '\0' && out->ndims == op->ndims;
}

int op_lib_shape(const op_desc *op, const op_shape *shape, uint64_t *dims,
                 const char *const **names)
{
    if (op->lib_shape) {
        if (names)
            *names = op->lib_dim_names;
        return op->lib_shape(shape, dims);
    }
    if (names)
        *names = op->dim_names;
    for (int k = 0; k < shape->ndims; k++)
        dims[k] = shape->d[k];
    return shape->ndims;
}

void op_format_shape(const op_shape *s, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->ndims && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64, i ? "x" : "", s->d[i]);
}

int op_parse_dtype(const char *name, oclf_dtype *out)
{
    for (int d = 0; d < OCLF_DTYPE_COUNT_; d++)
        if (strcmp(name, oclf_dtype_name((oclf_dtype)d)) == 0) {
            *out = (oclf_dtype)d;
            return 1;
        }
    return 0;
}

/* An index ("1") or a case-sensitive substring of the name. */
static int matches(const char *want, unsigned index, const char *name)
{
    if (!want || !*want)
        return 1;
    char *end;
    unsigned long v = strtoul(want, &end, 10);
    if (*end == '\0')
        return v == index;
    return strstr(name, want) != NULL;
}

/* Calls visit for each platform (dev NULL) and then each of its devices,
 * in index order, until visit returns nonzero. -1 when there is no
 * platform, else visit's last result. */
typedef int (*device_visit)(void *user, cl_platform_id pl, cl_uint p, const char *pname,
                            cl_device_id dev, cl_uint d, const char *dname);
static int each_device(device_visit visit, void *user)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0)
        return -1;
    int r = 0;
    for (cl_uint p = 0; p < np && !r; p++) {
        char pname[256] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        if ((r = visit(user, plats[p], p, pname, NULL, 0, NULL)))
            break;
        cl_device_id devs[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && !r; d++) {
            char dname[256] = "";
            clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dname, dname, NULL);
            r = visit(user, plats[p], p, pname, devs[d], d, dname);
        }
    }
    return r;
}

/* The first device whose platform and device match (index or name). */
struct pick {
    const char *platform, *device;
    op_env *env;
};
static int pick_device(void *user, cl_platform_id pl, cl_uint p, const char *pname,
                       cl_device_id dev, cl_uint d, const char *dname)
{
    struct pick *pk = user;
    if (!dev || !matches(pk->platform, p, pname) || !matches(pk->device, d, dname))
        return 0;
    pk->env->platform = pl;
    pk->env->device = dev;
    return 1;
}

int op_env_open(op_env *env, const char *platform, const char *device, char *err, size_t errlen)
{
    return op_env_open_opts(env, platform, device, NULL, err, errlen);
}

int op_env_open_opts(op_env *env, const char *platform, const char *device,
                     const oclf_context_options *options, char *err, size_t errlen)
{
    memset(env, 0, sizeof *env);
    struct pick pk = {platform, device, env};
    if (each_device(pick_device, &pk) < 0) {
        snprintf(err, errlen, "no OpenCL platform found (is an ICD such as pocl-opencl-icd installed?)");
        return -1;
    }
    if (!env->device) {
        snprintf(err, errlen, "no OpenCL device matches platform '%s' device '%s'",
                 platform ? platform : "*", device ? device : "*");
        return -1;
    }
    return op_env_open_device(env, env->platform, env->device, options, err, errlen);
}

int op_env_open_device(op_env *env, cl_platform_id platform, cl_device_id device,
                       const oclf_context_options *options, char *err, size_t errlen)
{
    memset(env, 0, sizeof *env);
    env->platform = platform;
    env->device = device;
    cl_int e = CL_SUCCESS;
    env->cl = clCreateContext(NULL, 1, &env->device, NULL, NULL, &e);
    if (env->cl)
        env->queue = clCreateCommandQueue(env->cl, env->device, CL_QUEUE_PROFILING_ENABLE, &e);
    if (!env->cl || !env->queue) {
        snprintf(err, errlen, "cannot create an OpenCL context and queue (error %d)", (int)e);
        op_env_close(env);
        return -1;
    }
    if (oclf_context_create(env->cl, env->device, options, &env->ctx) != OCLF_SUCCESS) {
        snprintf(err, errlen, "%s", oclf_last_error(NULL)); /* names oclf_context_create */
        op_env_close(env);
        return -1;
    }
    return 0;
}

void op_env_close(op_env *env)
{
    /* CLBlast (the l2_topk unfused path) caches programs per cl_context in
     * globals that outlive main(); emptying that cache before the context
     * goes keeps its release from running against a dead context at exit. */
    if (env->cl)
        CLBlastClearCache();
    oclf_context_destroy(env->ctx);
    if (env->queue)
        clReleaseCommandQueue(env->queue);
    if (env->cl)
        clReleaseContext(env->cl);
    memset(env, 0, sizeof *env);
}

int op_listed(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (end ? 1 : 0);
    }
    return 0;
}

/* One device's line: name and the library's fingerprint for it. */
static int print_device(void *user, cl_platform_id pl, cl_uint p, const char *pname,
                        cl_device_id dev, cl_uint d, const char *dname)
{
    (void)user, (void)pl;
    if (!dev) {
        printf("platform %u: %s\n", p, pname);
        return 0;
    }
    cl_int e;
    cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    oclf_context *ctx = NULL;
    if (cl)
        oclf_context_create(cl, dev, NULL, &ctx);
    printf("  device %u: %s\n    fingerprint: %s\n", d, dname,
           ctx ? oclf_context_fingerprint(ctx) : "(unavailable)");
    oclf_context_destroy(ctx);
    if (cl)
        clReleaseContext(cl);
    return 0;
}

int op_list_devices(const char *tool)
{
    if (each_device(print_device, NULL) < 0) {
        fprintf(stderr, "%s: no OpenCL platform\n", tool);
        return 1;
    }
    return 0;
}

double op_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void op_fill_random(oclf_dtype dtype, void *host, size_t n, float lo, float hi, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float u = (float)((s >> 40) * (1.0 / 16777216.0));
        oclf_ref_set(dtype, host, i, lo + (hi - lo) * u);
    }
}

cl_mem op_upload(const op_env *env, const void *host, size_t bytes, char *err, size_t errlen)
{
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(env->cl, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &e);
    if (!m) {
        snprintf(err, errlen, "cannot allocate %zu bytes on the device (error %d)", bytes, (int)e);
        return NULL;
    }
    if (host && bytes && op_rewrite(env, m, host, bytes) != 0) {
        snprintf(err, errlen, "cannot write %zu bytes to the device", bytes);
        clReleaseMemObject(m);
        return NULL;
    }
    return m;
}

int op_rewrite(const op_env *env, cl_mem mem, const void *host, size_t bytes)
{
    return clEnqueueWriteBuffer(env->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL) ==
                   CL_SUCCESS
               ? 0
               : -1;
}

int op_download(const op_env *env, cl_mem mem, void *host, size_t bytes)
{
    return clEnqueueReadBuffer(env->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL) ==
                   CL_SUCCESS
               ? 0
               : -1;
}

int op_is_gpu(const op_env *env)
{
    return oclf_context_device_type(env->ctx) == CL_DEVICE_TYPE_GPU;
}

int op_gpu_vector_cap(const op_env *env, oclf_dtype dtype, oclf_params *out, int n)
{
    if (!op_is_gpu(env))
        return n;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int64_t vec = 1;
        oclf_params_get(&out[i], "VEC", &vec);
        if (vec <= OP_GPU_MAX_VEC_FLOATS)
            out[kept++] = out[i];
    }
    return kept;
}

void op_point_check_init(op_point_check *c, const op_env *env, const op_desc *op,
                         const op_shape *shape, oclf_dtype dtype, oclf_path path)
{
    memset(c, 0, sizeof *c);
    c->env = env;
    c->op = op_lib_op(op);
    c->dtype = dtype;
    c->path = path;
    c->ndims = op_lib_shape(op, shape, c->dims, NULL);
}

int op_point_valid(const op_point_check *c, const oclf_params *p)
{
    return oclf_tuning_params_valid(c->env->ctx, c->op, c->dtype, c->dims, (unsigned)c->ndims,
                                    c->path, p);
}

void op_space_add_valid(const op_point_check *c, oclf_params *out, int *n, int max,
                        const oclf_params *p)
{
    if (*n < max && op_point_valid(c, p))
        out[(*n)++] = *p;
}

int op_row_space(const op_point_check *c, uint64_t width, size_t l0_min, size_t l0_max,
                 size_t l1_min, oclf_params *out, int max)
{
    size_t max_wgs = 1;
    clGetDeviceInfo(c->env->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wgs, &max_wgs,
                    NULL);
    static const int vecs[] = {1, 2, 4, 8, 16};
    int n = 0;
    for (int layout = 0; layout <= 1; layout++)
        for (size_t wgs = 1; wgs <= max_wgs && wgs <= 1024; wgs *= 2) {
            if (layout == 0 ? (wgs < l0_min || wgs > l0_max) : wgs < l1_min)
                continue;
            for (int v = 0; v < 5; v++) {
                if ((uint64_t)vecs[v] > width ||
                    (layout == 1 && (uint64_t)wgs * (uint64_t)vecs[v] > width * 2))
                    continue; /* most work-items would idle */
                oclf_params p;
                memset(&p, 0, sizeof p);
                oclf_params_set(&p, "LAYOUT", layout);
                oclf_params_set(&p, "WGS", (int64_t)wgs);
                oclf_params_set(&p, "VEC", vecs[v]);
                op_space_add(out, &n, max, &p);
            }
        }
    return n;
}

int op_staged_row_space(const op_point_check *c, const op_stage_space *s, oclf_params *out,
                        int max)
{
    oclf_params *base = calloc((size_t)max, sizeof *base);
    if (!base)
        return 0;
    const int nb = op_row_space(c, s->width, s->l0_min, s->l0_max, s->l1_min, base, max);
    int n = 0;
    for (int i = 0; i < nb; i++) {
        int64_t layout = 0;
        oclf_params_get(&base[i], "LAYOUT", &layout);
        for (int stage = 0; stage <= (layout || s->l0_stage); stage++) {
            const int many = layout && s->rows >= 64 && (stage || !s->rows_need_stage);
            for (int rpg = 1; rpg <= (many ? 4 : 1); rpg *= 4) {
                oclf_params p = base[i];
                oclf_params_set(&p, "STAGE", stage);
                oclf_params_set(&p, "ROWS", rpg);
                op_space_add_valid(c, out, &n, max, &p);
            }
        }
    }
    free(base);
    return n;
}

void op_space_add(oclf_params *out, int *n, int max, const oclf_params *p)
{
    if (*n < max)
        out[(*n)++] = *p;
}

int op_compare(oclf_dtype dtype, const void *got, size_t ld, const double *want, size_t rows,
               size_t cols, char *msg, size_t len)
{
    size_t first = 0;
    double maxerr = 0;
    size_t bad = oclf_ref_compare(dtype, got, ld, want, rows, cols, &first, &maxerr);
    if (bad)
        snprintf(msg, len, "%zu elements out of tolerance (first %zu, max error %g)", bad, first,
                 maxerr);
    return bad == 0;
}

int op_verify_packed(const op_env *env, cl_mem out, oclf_dtype dtype, const double *want,
                     size_t rows, size_t cols, char *msg, size_t len)
{
    const size_t bytes = rows * cols * oclf_dtype_size(dtype);
    void *got = malloc(bytes + 1);
    int ok = 0;
    if (got && want && op_download(env, out, got, bytes) == 0) {
        ok = op_compare(dtype, got, cols, want, rows, cols, msg, len);
    } else {
        snprintf(msg, len, "cannot read the result back");
    }
    free(got);
    return ok;
}
