/* Argument checks shared by every op, and the enqueue helpers. */
#include "internal.h"

#include <clblast_c.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <stdio.h>
#include <string.h>

oclf_status oclf_check_dtype(const oclf_context *ctx, oclf_dtype dtype)
{
    if (oclf_dtype_size(dtype) == 0)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "unsupported dtype %d (expected f32, f16 or bf16)",
                         (int)dtype);
    return OCLF_SUCCESS;
}

oclf_status oclf_check_queue(const oclf_context *ctx, cl_command_queue queue, cl_uint num_events,
                             const cl_event *wait_list)
{
    if (!queue)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "queue is NULL");
    if ((num_events > 0) != (wait_list != NULL))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "num_events (%u) and wait_list disagree: both or neither", num_events);
    cl_context qctx = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "clGetCommandQueueInfo(queue)");
    if (qctx != ctx->cl)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "queue belongs to another cl_context than the oclf_context");
    return OCLF_SUCCESS;
}

oclf_status oclf_check_choice(const oclf_context *ctx, const char *op, const oclf_choice *choice)
{
    if (!choice)
        return OCLF_SUCCESS;
    if (choice->path != OCLF_PATH_AUTO && choice->path != OCLF_PATH_FUSED &&
        choice->path != OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown path %d", op,
                         (int)choice->path);
    if (choice->params.count > OCLF_MAX_PARAMS)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: params.count %u exceeds %d", op,
                         choice->params.count, OCLF_MAX_PARAMS);
    return OCLF_SUCCESS;
}

oclf_status oclf_check_call(const oclf_context *ctx, const char *op, cl_command_queue queue,
                            cl_uint num_events, const cl_event *wait_list, oclf_dtype dtype,
                            cl_event *event)
{
    oclf_enter(op);
    if (!ctx)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    if (event)
        *event = NULL;
    oclf_status st = oclf_check_queue(ctx, queue, num_events, wait_list);
    return st != OCLF_SUCCESS ? st : oclf_check_dtype(ctx, dtype);
}

oclf_status oclf_check_vector(const oclf_context *ctx, const char *what, oclf_buf buf, size_t n,
                              size_t elem, oclf_operand *out)
{
    buf.stride = 0;
    return oclf_check_2d(ctx, what, buf, n ? 1 : 0, n, elem, out);
}

oclf_status oclf_check_2d(const oclf_context *ctx, const char *what, oclf_buf buf, size_t rows,
                          size_t cols, size_t elem, oclf_operand *out)
{
    memset(out, 0, sizeof *out);
    if (!buf.mem)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: cl_mem is NULL", what);
    size_t stride = buf.stride ? buf.stride : cols;
    if (stride < cols)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: row stride %zu is less than the width %zu",
                         what, stride, cols);
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(buf.mem, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: not a valid buffer (%s)", what,
                         oclf_cl_error_name(err));
    out->mem = buf.mem;
    out->offset = buf.offset;
    out->stride = stride;
    if (rows == 0 || cols == 0)
        return OCLF_SUCCESS;
    /* last element index = offset + (rows-1)*stride + cols, checked for wrap */
    size_t span;
    if (__builtin_mul_overflow(rows - 1, stride, &span) || __builtin_add_overflow(span, cols, &span) ||
        __builtin_add_overflow(span, buf.offset, &span) ||
        __builtin_mul_overflow(span, elem, &span) || span > size)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: %zu rows x %zu cols (stride %zu, offset %zu, %zu-byte elements) do "
                         "not fit the buffer's %zu bytes",
                         what, rows, cols, stride, buf.offset, elem, size);
    out->lo = buf.offset * elem;
    out->hi = span;
    return OCLF_SUCCESS;
}

int oclf_overlap(const oclf_operand *a, const oclf_operand *b)
{
    return a->mem == b->mem && a->lo < a->hi && b->lo < b->hi && a->lo < b->hi && b->lo < a->hi;
}

/* 1 when one of c's blocks meets [x, y) (x < y < period): the block that
 * starts last before y ends last among those starting before y. */
static int blocks_meet(oclf_blocks c, size_t x, size_t y)
{
    size_t i = c.step ? (y - 1) / c.step : 0;
    if (i > c.count - 1)
        i = c.count - 1;
    return i * c.step + c.width > x;
}

/* The blocks stay within one period: (count - 1) * step + width <= s. */
static int blocks_fit(oclf_blocks c, size_t s)
{
    size_t ext;
    return c.count > 0 && !__builtin_mul_overflow(c.count - 1, c.step, &ext) &&
           !__builtin_add_overflow(ext, c.width, &ext) && ext <= s;
}

int oclf_blocks_disjoint(const oclf_operand *a, oclf_blocks ab, const oclf_operand *b,
                         oclf_blocks bb)
{
    if (a->mem != b->mem || ab.width == 0 || bb.width == 0)
        return 1;
    const size_t s = a->stride;
    if (s != b->stride || s == 0 || !blocks_fit(ab, s) || !blocks_fit(bb, s))
        return 0;
    if (bb.count > ab.count) { /* walk the smaller set */
        const oclf_operand *to = a;
        oclf_blocks tb = ab;
        a = b, ab = bb, b = to, bb = tb;
    }
    /* Place a's first block at 0 of the period; b's starts at delta. Each of
     * b's blocks starts below 2s, so it wraps past the period's end at most
     * once. */
    const size_t delta = b->offset >= a->offset ? (b->offset - a->offset) % s
                                                : (s - (a->offset - b->offset) % s) % s;
    for (size_t j = 0; j < bb.count; j++) {
        size_t lo = delta + j * bb.step;
        if (lo >= s)
            lo -= s;
        const size_t hi = lo + bb.width;
        if (hi <= s ? blocks_meet(ab, lo, hi)
                    : blocks_meet(ab, lo, s) || blocks_meet(ab, 0, hi - s))
            return 0;
    }
    return 1;
}

int oclf_same_range(const oclf_operand *a, const oclf_operand *b)
{
    return a->mem == b->mem && a->offset == b->offset && a->stride == b->stride;
}

/* Reads one parameter, checking it is present and within [lo, hi]. */
static oclf_status read_param(const oclf_context *ctx, const oclf_params *p, const char *name,
                              int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    if (!oclf_params_get(p, name, &v))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "kernel parameter %s is missing", name);
    if (v < lo || v > hi)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter %s = %lld is outside [%lld, %lld]", name, (long long)v,
                         (long long)lo, (long long)hi);
    *out = v;
    return OCLF_SUCCESS;
}

oclf_status oclf_params_read(const oclf_context *ctx, const oclf_param_spec *spec, unsigned n,
                             const oclf_params *p, int64_t *v)
{
    oclf_status st;
    for (unsigned i = 0; i < n; i++) {
        const int64_t hi =
            spec[i].hi == OCLF_PARAM_MAX_WGS ? (int64_t)ctx->info.max_wgs : spec[i].hi;
        if ((st = read_param(ctx, p, spec[i].name, spec[i].lo, hi, &v[i])))
            return st;
    }
    for (unsigned i = 0; i < n; i++) {
        if (!spec[i].pow2 || (v[i] & (v[i] - 1)) == 0)
            continue;
        if (spec[i].hi == OCLF_PARAM_MAX_WGS)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "kernel parameter %s = %lld is not a power of two", spec[i].name,
                             (long long)v[i]);
        /* A fixed range reads as its list: "1, 2, 4, 8 or 16". */
        char list[96] = "";
        size_t used = 0;
        for (int64_t x = spec[i].lo; x <= spec[i].hi && used < sizeof list; x *= 2) {
            const char *sep = !used ? "" : x * 2 > spec[i].hi ? " or " : ", ";
            int k = snprintf(list + used, sizeof list - used, "%s%lld", sep, (long long)x);
            used += k > 0 ? (size_t)k : 0;
        }
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "kernel parameter %s = %lld is not %s",
                         spec[i].name, (long long)v[i], list);
    }
    return OCLF_SUCCESS;
}

void oclf_param_defines(char *buf, size_t len, const oclf_param_spec *spec, unsigned n,
                        const int64_t *v)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < n && used < len; i++) {
        if (spec[i].use != OCLF_PARAM_DEFINE)
            continue;
        int k = snprintf(buf + used, len - used, "%s-DOCLF_%s=%lld", used ? " " : "",
                         spec[i].name, (long long)v[i]);
        used += k > 0 ? (size_t)k : 0;
    }
}

void oclf_program_options(char *buf, size_t len, oclf_dtype dtype, int cdtype,
                          const char *defines)
{
    if (cdtype >= 0)
        snprintf(buf, len, "-DOCLF_DTYPE=%d -DOCLF_CDTYPE=%d %s", (int)dtype, cdtype, defines);
    else
        snprintf(buf, len, "-DOCLF_DTYPE=%d %s", (int)dtype, defines);
}

int oclf_rows_aligned(int vec, const oclf_operand *ops, unsigned n)
{
    if (vec <= 1)
        return 0;
    for (unsigned i = 0; i < n; i++)
        if (ops[i].offset % (size_t)vec || ops[i].stride % (size_t)vec)
            return 0;
    return 1;
}

void oclf_program_options_aligned(char *buf, size_t len, oclf_dtype dtype, int cdtype,
                                  const char *defines, int aligned)
{
    char d[OCLF_DEFINES_MAX + 24];
    snprintf(d, sizeof d, "%s%s", defines, aligned ? " -DOCLF_ALIGNED=1" : "");
    oclf_program_options(buf, len, dtype, cdtype, d);
}

void oclf_list_aligned_variant(oclf_context *ctx, const char *source, oclf_dtype dtype,
                               int cdtype, const char *defines, int vec)
{
    /* Only the cross-compile suite's list asks for it: a call checks the
     * plain build's limits, which the aligned one (the same kernels with
     * wider accesses) shares, and compiles the aligned build only where its
     * operands take it. With a sink the program is named, not built. */
    if (vec <= 1 || !ctx->program_sink)
        return;
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options_aligned(opts, sizeof opts, dtype, cdtype, defines, 1);
    oclf_program *prog;
    (void)oclf_program_get(ctx, source, opts, &prog);
}

size_t oclf_row_heuristic(const oclf_context *ctx, oclf_dtype dtype, uint64_t width,
                          size_t cpu_wgs, size_t gpu_min_wgs, oclf_params *out)
{
    const oclf_device_info *d = &ctx->info;
    if (d->type & CL_DEVICE_TYPE_CPU) {
        /* A CPU work-group is a loop over work-items: one row each with wide
         * vectors and no barrier streams at close to copy bandwidth, while a
         * local-memory tree reduction splits the kernel into regions. */
        oclf_params_set(out, "LAYOUT", 0);
        oclf_params_set(out, "WGS", (int64_t)cpu_wgs);
        oclf_params_set(out, "VEC", 16);
        return cpu_wgs;
    }
    /* GPUs: consecutive work-items on consecutive 16-byte vectors, enough of
     * them to cover the row in a few passes. */
    const int vec = dtype == OCLF_F32 ? 4 : 8;
    const uint64_t want = (width + (uint64_t)vec - 1) / (uint64_t)vec;
    /* never narrower than a warp or wavefront: the rest of its lanes idle */
    size_t wgs = gpu_min_wgs > d->simd_width ? gpu_min_wgs : d->simd_width;
    while (wgs < want && wgs < 256)
        wgs *= 2;
    while (wgs > d->max_wgs && wgs > 1)
        wgs /= 2;
    oclf_params_set(out, "LAYOUT", 1);
    oclf_params_set(out, "WGS", (int64_t)wgs);
    oclf_params_set(out, "VEC", vec);
    return wgs;
}

oclf_status oclf_enqueue(oclf_context *ctx, cl_command_queue queue, oclf_program *prog,
                         const char *name, const oclf_arg *args, unsigned nargs, size_t global,
                         size_t local, cl_uint num_events, const cl_event *wait_list,
                         cl_event *event)
{
    cl_kernel k = NULL;
    oclf_status st = oclf_kernel_get(ctx, prog, name, &k);
    if (st != OCLF_SUCCESS)
        return st;
    cl_int err = CL_SUCCESS;
    for (unsigned i = 0; i < nargs && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, i, args[i].size, args[i].value);
    if (err != CL_SUCCESS) {
        oclf_kernel_put(prog, name, k);
        return oclf_fail_cl(ctx, err, "clSetKernelArg");
    }
    err = clEnqueueNDRangeKernel(queue, k, 1, NULL, &global, local ? &local : NULL, num_events,
                                 wait_list, event);
    oclf_kernel_put(prog, name, k);
    if (err != CL_SUCCESS) {
        char what[128];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s, global %zu, local %zu)", name,
                 global, local);
        return oclf_fail_cl(ctx, err, what);
    }
    atomic_fetch_add(&ctx->n_enqueued, 1);
    oclf_program_log_launch(ctx, prog, name);
    return OCLF_SUCCESS;
}

void oclf_chain_begin(oclf_chain *c, oclf_context *ctx, cl_command_queue queue, cl_uint num_events,
                      const cl_event *wait_list)
{
    c->ctx = ctx;
    c->queue = queue;
    c->num_events = num_events;
    c->wait_list = wait_list;
    c->prev = NULL;
}

oclf_status oclf_chain_launch(oclf_chain *c, oclf_program *prog, const char *name,
                              const oclf_arg *args, unsigned nargs, size_t global, size_t local)
{
    cl_event ev = NULL;
    oclf_status st;
    if (c->prev)
        st = oclf_enqueue(c->ctx, c->queue, prog, name, args, nargs, global, local, 1, &c->prev,
                          &ev);
    else
        st = oclf_enqueue(c->ctx, c->queue, prog, name, args, nargs, global, local, c->num_events,
                          c->wait_list, &ev);
    if (st != OCLF_SUCCESS)
        return st;
    if (c->prev)
        clReleaseEvent(c->prev);
    c->prev = ev;
    return OCLF_SUCCESS;
}

void oclf_chain_end(oclf_chain *c, cl_event *event)
{
    if (event)
        *event = c->prev;
    else if (c->prev)
        clReleaseEvent(c->prev);
    c->prev = NULL;
}

oclf_status oclf_enqueue_marker(oclf_context *ctx, cl_command_queue queue, cl_uint num_events,
                                const cl_event *wait_list, cl_event *event)
{
    if (!event && num_events == 0)
        return OCLF_SUCCESS;
    cl_event ev = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(queue, num_events, wait_list, event ? &ev : NULL);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "clEnqueueMarkerWithWaitList");
    if (event)
        *event = ev;
    return OCLF_SUCCESS;
}

oclf_status oclf_temp_buffer(oclf_context *ctx, size_t bytes, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    if (bytes > ctx->info.max_alloc) {
        *out = NULL;
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                         "a temporary buffer of %zu bytes exceeds the device's largest allocation "
                         "(CL_DEVICE_MAX_MEM_ALLOC_SIZE %llu bytes)",
                         bytes, (unsigned long long)ctx->info.max_alloc);
    }
    *out = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    if (!*out || err != CL_SUCCESS) {
        *out = NULL;
        return oclf_fail_cl(ctx, err, "clCreateBuffer(temporary)");
    }
    return OCLF_SUCCESS;
}

oclf_status oclf_kernel_group_info(oclf_context *ctx, oclf_program *prog, const char *name,
                                   size_t *max_wgs, size_t *multiple)
{
    cl_kernel k;
    oclf_status st = oclf_kernel_get(ctx, prog, name, &k);
    if (st != OCLF_SUCCESS)
        return st;
    *max_wgs = *multiple = 0;
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE,
                                          sizeof *max_wgs, max_wgs, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                       sizeof *multiple, multiple, NULL);
    oclf_kernel_put(prog, name, k);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
    if (ctx->info.kernel_wgs_cap && *max_wgs > ctx->info.kernel_wgs_cap)
        *max_wgs = ctx->info.kernel_wgs_cap;
    return OCLF_SUCCESS;
}

oclf_status oclf_fit_kernel_wgs(oclf_context *ctx, oclf_program *prog, const char *const *names,
                                int n, size_t *wgs, int lower)
{
    for (int i = 0; i < n; i++) {
        size_t kwgs, multiple;
        oclf_status st = oclf_kernel_group_info(ctx, prog, names[i], &kwgs, &multiple);
        if (st != OCLF_SUCCESS)
            return st;
        while (lower && *wgs > kwgs && *wgs > 1)
            *wgs /= 2;
        if (*wgs > kwgs)
            return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                             "WGS = %zu exceeds kernel %s's CL_KERNEL_WORK_GROUP_SIZE %zu", *wgs,
                             names[i], kwgs);
    }
    return OCLF_SUCCESS;
}

oclf_status oclf_check_kernel_wgs(oclf_context *ctx, oclf_program *prog, const char *const *names,
                                  int n, size_t wgs)
{
    return oclf_fit_kernel_wgs(ctx, prog, names, n, &wgs, 0);
}

oclf_status oclf_chain_sgemm(oclf_chain *c, const char *op, int trans_b, size_t m, size_t n,
                             size_t k, float alpha, cl_mem a, size_t ao, size_t lda, cl_mem b,
                             size_t bo, size_t ldb, cl_mem cm, size_t co, size_t ldc)
{
    if (c->prev || c->num_events) {
        cl_int err = clEnqueueBarrierWithWaitList(c->queue, c->prev ? 1 : c->num_events,
                                                  c->prev ? &c->prev : c->wait_list, NULL);
        if (err != CL_SUCCESS)
            return oclf_fail_cl(c->ctx, err, "clEnqueueBarrierWithWaitList");
    }
    cl_event ev = NULL;
    cl_command_queue qu = c->queue;
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                       trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k,
                                       alpha, a, ao, lda, b, bo, ldb, 0.0f, cm, co, ldc, &qu, &ev);
    if (s != CLBlastSuccess)
        return oclf_fail(c->ctx,
                         s == CLBlastOpenCLOutOfResources || s == CLBlastOpenCLOutOfHostMemory ||
                                 s == CLBlastTempBufferAllocFailure
                             ? OCLF_OUT_OF_RESOURCES
                             : OCLF_OPENCL_ERROR,
                         "%s: the GEMM library's Sgemm failed with status %d", op, (int)s);
    atomic_fetch_add(&c->ctx->n_enqueued, 1);
    if (c->prev)
        clReleaseEvent(c->prev);
    c->prev = ev;
    return OCLF_SUCCESS;
}

oclf_status oclf_check_kv_cache(const oclf_context *ctx, const char *what,
                                const oclf_kv_cache *src, size_t elem, oclf_operand *k,
                                oclf_operand *v, oclf_kv_cache *out)
{
    if (!src)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s is NULL", what);
    oclf_kv_cache *cache = out;
    oclf_status st = oclf_options_read(ctx, what, src, sizeof *cache, cache, sizeof *cache,
                                       _Alignof(oclf_kv_cache));
    if (st != OCLF_SUCCESS)
        return st;
    if (!cache->num_blocks || !cache->block_size || !cache->heads)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: num_blocks (%zu), block_size (%zu) and heads (%zu) must be above 0",
                         what, cache->num_blocks, cache->block_size, cache->heads);
    if (cache->head_dim == 0 || cache->head_dim > 256)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: head_dim %zu is not in 1..256", what,
                         cache->head_dim);
    size_t slots, width;
    /* Device indices are 64-bit, but slot numbers travel as int64 and the
     * kernels count tokens in 32 bits of a block: keep both in range. */
    if (__builtin_mul_overflow(cache->num_blocks, cache->block_size, &slots) ||
        slots > (size_t)INT64_MAX || cache->block_size > UINT_MAX ||
        __builtin_mul_overflow(cache->heads, cache->head_dim, &width))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %zu blocks of %zu slots overflow", what,
                         cache->num_blocks, cache->block_size);
    char name[96];
    snprintf(name, sizeof name, "%s k", what);
    if ((st = oclf_check_2d(ctx, name, (oclf_buf){cache->k, cache->k_offset, width}, slots, width,
                            elem, k)))
        return st;
    snprintf(name, sizeof name, "%s v", what);
    if ((st = oclf_check_2d(ctx, name, (oclf_buf){cache->v, cache->v_offset, width}, slots, width,
                            elem, v)))
        return st;
    if (oclf_overlap(k, v))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: K and V overlap", what);
    return OCLF_SUCCESS;
}

oclf_status oclf_check_heads(const oclf_context *ctx, const char *what, oclf_heads h,
                             size_t tokens, size_t hd, size_t elem, oclf_operand *out,
                             oclf_blocks *blocks, size_t *head_stride)
{
    if (h.count == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: head count is 0", what);
    if (h.count > UINT_MAX / 2)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu heads per token", what, h.count);
    const size_t hs = h.head_stride ? h.head_stride : hd;
    if (hs < hd)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: head stride %zu is less than head_dim %zu",
                         what, hs, hd);
    size_t ext, packed;
    if (__builtin_mul_overflow(h.count - 1, hs, &ext) || __builtin_add_overflow(ext, hd, &ext) ||
        __builtin_mul_overflow(h.count, hs, &packed))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %zu heads of stride %zu overflow", what,
                         h.count, hs);
    oclf_buf b = h.buf;
    if (!b.stride)
        b.stride = packed;
    *blocks = (oclf_blocks){h.count, hs, hd};
    if (head_stride)
        *head_stride = hs;
    return oclf_check_2d(ctx, what, b, tokens, ext, elem, out);
}

oclf_status oclf_row_config(const oclf_context *ctx, const oclf_param_spec *spec, unsigned n,
                            const oclf_params *p, oclf_row_cfg *cfg)
{
    int64_t v[16];
    if (n > 16)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "too many kernel parameters (%u)", n);
    oclf_status st = oclf_params_read(ctx, spec, n, p, v);
    if (st != OCLF_SUCCESS)
        return st;
    cfg->layout = (int)v[0];
    cfg->wgs = (int)v[1];
    cfg->vec = (int)v[2];
    oclf_param_defines(cfg->defines, sizeof cfg->defines, spec, n, v);
    return OCLF_SUCCESS;
}

oclf_status oclf_row_config_resolved(const oclf_context *ctx, const oclf_param_spec *spec,
                                     unsigned n, const oclf_resolved *r, oclf_row_cfg *cfg)
{
    if (!r->has_cfg)
        return oclf_row_config(ctx, spec, n, &r->params, cfg);
    memcpy(cfg, &r->cfg, sizeof *cfg);
    return OCLF_SUCCESS;
}

oclf_status oclf_check_norm_row(const oclf_context *ctx, const char *op, size_t cols, float eps)
{
    if (cols == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: cols is 0", op);
    if (cols > UINT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: cols %zu exceeds %u", op, cols, UINT_MAX);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: eps must be finite and >= 0", op);
    return OCLF_SUCCESS;
}

OCLF_CFG_FITS(oclf_row_cfg);

oclf_status oclf_row_validate(oclf_context *ctx, const oclf_param_spec *spec, unsigned nspec,
                              oclf_dtype dtype, const oclf_resolved *r, int deep,
                              const char *source, const char *const *kernels, int n,
                              oclf_op_cfg *out)
{
    oclf_row_cfg cfg;
    oclf_status st = oclf_row_config(ctx, spec, nspec, &r->params, &cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    if (st != OCLF_SUCCESS || !deep)
        return st;
    oclf_list_aligned_variant(ctx, source, dtype, -1, cfg.defines, cfg.vec);
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options(opts, sizeof opts, dtype, -1, cfg.defines);
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, source, opts, &prog)))
        return st;
    return oclf_check_kernel_wgs(ctx, prog, kernels, n, (size_t)cfg.wgs);
}
