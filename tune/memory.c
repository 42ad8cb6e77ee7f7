/* Copies to compare ops with, the last-level cache, and shapes past it. */
#include "memory.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Plain copies in the shapes a GPU and a CPU like best (one vector per
 * work-item; a contiguous run of vectors per work-item). The best of them
 * is the bandwidth any streaming kernel on this device can hope for. Each
 * takes its element count, so any multiple of 64 bytes can be copied. */
static const char *copy_src =
    "kernel void copy4(global const float4 *a, global float4 *b, ulong n) {\n"
    "    size_t i = get_global_id(0); if (i < n) b[i] = a[i]; }\n"
    "kernel void copy16(global const float16 *a, global float16 *b, ulong n) {\n"
    "    size_t i = get_global_id(0); if (i < n) b[i] = a[i]; }\n"
    "kernel void copy_chunk(global const float16 *a, global float16 *b, ulong n, ulong chunk) {\n"
    "    size_t base = get_global_id(0) * chunk, end = min((size_t)(base + chunk), (size_t)n);\n"
    "    for (size_t i = base; i < end; i++) b[i] = a[i]; }\n";

enum { VARIANTS = 3, CHUNK_LOCAL = 4, MAX_PIECES = 8 };
static const char *const variant_names[VARIANTS] = {"copy4", "copy16", "copy_chunk"};
static const size_t variant_width[VARIANTS] = {16, 64, 64};

static double now_ns(void) { return op_now_s() * 1e9; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static cl_program build_copies(const op_env *env)
{
    cl_int e = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(env->cl, 1, &copy_src, NULL, &e);
    if (prog && clBuildProgram(prog, 1, &env->device, "", NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(prog);
        prog = NULL;
    }
    return prog;
}

/* Sets a's and b's kernel for `bytes` (a multiple of 64) and the global
 * and local sizes of its launch. `chunk`: vectors a work-item of copy_chunk
 * copies. */
static int set_copy(cl_kernel k, int variant, cl_mem a, cl_mem b, size_t bytes, cl_ulong chunk,
                    size_t *global, size_t *local)
{
    const cl_ulong n = bytes / variant_width[variant];
    cl_int e = clSetKernelArg(k, 0, sizeof a, &a);
    e |= clSetKernelArg(k, 1, sizeof b, &b);
    e |= clSetKernelArg(k, 2, sizeof n, &n);
    if (variant == 2) {
        e |= clSetKernelArg(k, 3, sizeof chunk, &chunk);
        const size_t items = (size_t)((n + chunk - 1) / chunk);
        *global = (items + CHUNK_LOCAL - 1) / CHUNK_LOCAL * CHUNK_LOCAL;
        *local = CHUNK_LOCAL; /* few chunks a group, many groups */
    } else {
        *global = (size_t)n;
        *local = 0;
    }
    return e == CL_SUCCESS ? 0 : -1;
}

static int fill_zero(const op_env *env, cl_mem m, size_t bytes)
{
    const float zero = 0;
    return clEnqueueFillBuffer(env->queue, m, &zero, sizeof zero, 0, bytes, 0, NULL, NULL) ==
                   CL_SUCCESS
               ? 0
               : -1;
}

double op_copy_measure(const op_env *env, int *variant)
{
    const size_t bytes = (size_t)256 << 20;
    cl_int e = CL_SUCCESS;
    double best = -1;
    if (variant)
        *variant = 2;
    cl_program prog = build_copies(env);
    cl_mem a = NULL, b = NULL;
    if (!prog)
        goto out;
    a = clCreateBuffer(env->cl, CL_MEM_READ_WRITE, bytes, NULL, &e);
    b = clCreateBuffer(env->cl, CL_MEM_READ_WRITE, bytes, NULL, &e);
    if (!a || !b || fill_zero(env, a, bytes) || fill_zero(env, b, bytes) ||
        clFinish(env->queue) != CL_SUCCESS)
        goto out;
    for (int k = 0; k < VARIANTS; k++) {
        cl_kernel kern = clCreateKernel(prog, variant_names[k], &e);
        size_t global, local;
        if (!kern)
            continue;
        double times[7];
        int ok = set_copy(kern, k, a, b, bytes, 256, &global, &local) == 0;
        for (int r = 0; r < 7 && ok; r++) {
            const double t0 = now_ns();
            ok = clEnqueueNDRangeKernel(env->queue, kern, 1, NULL, &global, local ? &local : NULL,
                                        0, NULL, NULL) == CL_SUCCESS &&
                 clFinish(env->queue) == CL_SUCCESS;
            times[r] = now_ns() - t0;
        }
        if (ok) {
            qsort(times + 1, 6, sizeof *times, cmp_double); /* first run warms up */
            const double gbps = 2.0 * (double)bytes / times[1 + 3];
            if (gbps > best) {
                best = gbps;
                if (variant)
                    *variant = k;
            }
        }
        clReleaseKernel(kern);
    }
out:
    if (a)
        clReleaseMemObject(a);
    if (b)
        clReleaseMemObject(b);
    if (prog)
        clReleaseProgram(prog);
    return best;
}

double op_copy_gbps(const op_env *env) { return op_copy_measure(env, NULL); }

/* A copy split into pieces where one buffer would exceed the device's
 * largest allocation. */
struct op_copy {
    cl_program prog;
    int pieces;
    cl_mem a[MAX_PIECES], b[MAX_PIECES];
    cl_kernel k[MAX_PIECES];
    size_t global[MAX_PIECES], local, piece_bytes[MAX_PIECES];
    double bytes;
};

/* Releases every piece's kernel and buffers; the copy then has none. */
static void release_pieces(op_copy *c)
{
    for (int i = 0; i < c->pieces; i++) {
        if (c->k[i])
            clReleaseKernel(c->k[i]);
        if (c->a[i])
            clReleaseMemObject(c->a[i]);
        if (c->b[i])
            clReleaseMemObject(c->b[i]);
        c->k[i] = NULL, c->a[i] = c->b[i] = NULL;
    }
    c->pieces = 0;
}

void op_copy_destroy(op_copy *c)
{
    if (!c)
        return;
    release_pieces(c);
    if (c->prog)
        clReleaseProgram(c->prog);
    free(c);
}

/* The buffers and kernels of a copy of `half` bytes each way (a multiple
 * of 64); 0, or -1 with everything it made released. */
static int make_pieces(const op_env *env, op_copy *c, int variant, size_t half)
{
    cl_ulong max_alloc = 0;
    cl_uint units = 1;
    clGetDeviceInfo(env->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    clGetDeviceInfo(env->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    if (max_alloc < 64)
        max_alloc = half;
    const size_t per = (size_t)(max_alloc / 64 * 64);
    const int pieces = (int)((half + per - 1) / per);
    if (pieces > MAX_PIECES)
        return -1;
    int rc = 0;
    c->pieces = pieces;
    for (int i = 0; i < pieces && rc == 0; i++) {
        const size_t bytes = i < pieces - 1 ? per : half - per * (size_t)(pieces - 1);
        /* copy_chunk: enough chunks for every compute unit several times
         * over (a decode-size copy of a few KiB still spreads), at most 256
         * vectors (16 KiB) each */
        cl_ulong chunk = bytes / 64 / ((cl_ulong)units * 16);
        chunk = chunk < 1 ? 1 : chunk > 256 ? 256 : chunk;
        cl_int e = CL_SUCCESS;
        c->piece_bytes[i] = bytes;
        c->a[i] = clCreateBuffer(env->cl, CL_MEM_READ_WRITE, bytes, NULL, &e);
        c->b[i] = clCreateBuffer(env->cl, CL_MEM_READ_WRITE, bytes, NULL, &e);
        c->k[i] = clCreateKernel(c->prog, variant_names[variant], &e);
        rc = !c->a[i] || !c->b[i] || !c->k[i] || fill_zero(env, c->a[i], bytes) ||
                     fill_zero(env, c->b[i], bytes) ||
                     set_copy(c->k[i], variant, c->a[i], c->b[i], bytes, chunk, &c->global[i],
                              &c->local)
                 ? -1
                 : 0;
    }
    if (rc == 0 && clFinish(env->queue) != CL_SUCCESS)
        rc = -1;
    if (rc != 0) {
        clFinish(env->queue);
        release_pieces(c);
    }
    return rc;
}

op_copy *op_copy_create(const op_env *env, double bytes, double floor_bytes, int variant, char *err,
                        size_t errlen)
{
    if (variant < 0 || variant >= VARIANTS)
        variant = 2;
    op_copy *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    if (!(c->prog = build_copies(env))) {
        snprintf(err, errlen, "the copy kernels did not build");
        op_copy_destroy(c);
        return NULL;
    }
    size_t half = (size_t)((bytes / 2 + 63) / 64) * 64;
    if (half < 64)
        half = 64;
    while (make_pieces(env, c, variant, half) != 0) {
        const size_t less = half / 2 / 64 * 64;
        if (less < 64 || 2.0 * (double)less < floor_bytes) {
            snprintf(err, errlen, "no room on the device for a copy of %.0f MiB (2 x %.0f MiB)",
                     2.0 * (double)half / 1048576, (double)half / 1048576);
            op_copy_destroy(c);
            return NULL;
        }
        half = less;
    }
    c->bytes = 2.0 * (double)half;
    return c;
}

double op_copy_bytes(const op_copy *c) { return c->bytes; }
int op_copy_pieces(const op_copy *c) { return c->pieces; }
cl_mem op_copy_buffer(const op_copy *c, int piece, int dst)
{
    return piece < 0 || piece >= c->pieces ? NULL : dst ? c->b[piece] : c->a[piece];
}
size_t op_copy_piece_bytes(const op_copy *c, int piece)
{
    return piece < 0 || piece >= c->pieces ? 0 : c->piece_bytes[piece];
}

int op_copy_run(const op_env *env, op_copy *c, cl_event *event)
{
    for (int i = 0; i < c->pieces; i++) {
        cl_event *ev = event && i == c->pieces - 1 ? event : NULL;
        if (clEnqueueNDRangeKernel(env->queue, c->k[i], 1, NULL, &c->global[i],
                                   c->local ? &c->local : NULL, 0, NULL, ev) != CL_SUCCESS)
            return -1;
    }
    return 0;
}

static oclf_status pair_run(const op_env *env, void *inst, const oclf_choice *choice,
                            cl_event *event)
{
    op_pair *p = inst;
    if (choice == p->copy_choice)
        return op_copy_run(env, p->copy, event) == 0 ? OCLF_SUCCESS : OCLF_OPENCL_ERROR;
    return p->op->run(env, p->inst, choice, event);
}

/* tm_measure calls nothing but run(). */
const op_desc op_pair_desc = {.name = "op+copy", .run = pair_run};

/* "32768K" -> 33554432; 0 when unreadable. */
static uint64_t read_size(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    char unit = 0;
    const int got = fscanf(f, "%llu%c", &v, &unit);
    fclose(f);
    if (got < 1)
        return 0;
    const uint64_t scale = unit == 'K' || unit == 'k' ? 1024
                           : unit == 'M' || unit == 'm' ? 1024 * 1024
                           : unit == 'G' || unit == 'g' ? 1024ull * 1024 * 1024
                                                        : 1;
    return (uint64_t)v * scale;
}

uint64_t op_sysfs_l3_bytes(const char *cache_dir)
{
    uint64_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/index%d/level", cache_dir, i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        int level = 0;
        const int got = fscanf(f, "%d", &level);
        fclose(f);
        if (got != 1 || level != 3)
            continue;
        snprintf(path, sizeof path, "%s/index%d/size", cache_dir, i);
        const uint64_t size = read_size(path);
        if (size > best)
            best = size;
    }
    return best;
}

uint64_t op_llc_pick(uint64_t device_bytes, uint64_t l3_bytes, int is_cpu)
{
    if (!is_cpu || l3_bytes == 0)
        return device_bytes;
    if (device_bytes == 0)
        return l3_bytes;
    return l3_bytes < device_bytes ? l3_bytes : device_bytes;
}

uint64_t op_llc_bytes(const op_env *env, uint64_t *device_bytes, uint64_t *l3_bytes)
{
    cl_ulong dev = 0;
    cl_device_type type = 0;
    if (clGetDeviceInfo(env->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof dev, &dev, NULL) !=
        CL_SUCCESS)
        dev = 0;
    clGetDeviceInfo(env->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    const int cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    const uint64_t l3 = cpu ? op_sysfs_l3_bytes("/sys/devices/system/cpu/cpu0/cache") : 0;
    if (device_bytes)
        *device_bytes = dev;
    if (l3_bytes)
        *l3_bytes = l3;
    return op_llc_pick(dev, l3, cpu);
}

/* Minimum traffic of `s` in the narrowest storage dtype. */
static double narrowest_bytes(const op_desc *op, const op_shape *s)
{
    double least = -1;
    for (int d = 0; d < OCLF_DTYPE_COUNT_; d++) {
        const double b = op->min_bytes(s, (oclf_dtype)d);
        if (least < 0 || b < least)
            least = b;
    }
    return least;
}

int op_uncached_shape(const op_desc *op, uint64_t llc, op_shape *out)
{
    if (!op->uncached_shape || llc == 0 || !op_parse_shape(op, op->uncached_shape, out) ||
        op->uncached_dim < 0 || op->uncached_dim >= out->ndims)
        return 0;
    const uint64_t base = out->d[op->uncached_dim];
    const double target = 2.0 * (double)llc, unit = narrowest_bytes(op, out);
    /* traffic is a part that grows with the multiple plus one that does
     * not (a weight, a query), so at the multiple that fits the target
     * once per base's traffic the target is not yet exceeded: counting
     * up from there finds the first multiple that exceeds it */
    uint64_t m = unit > 0 ? (uint64_t)(target / unit) : 1;
    if (m < 1)
        m = 1;
    for (;; m++) {
        out->d[op->uncached_dim] = base * m;
        if (narrowest_bytes(op, out) > target)
            return 1;
    }
}
