/*
 * Normalization family: rms_norm, add_rms_norm, layer_norm, add_layer_norm
 *, each fused (one kernel) or unfused (its composition):
 *
 *   rms_norm        fused: rms_norm             unfused: rms_stats -> norm_apply
 *   add_rms_norm    fused: add_rms_norm         unfused: add_rows -> rms_norm
 *   layer_norm      fused: layer_norm           unfused: ln_stats -> norm_apply
 *   add_layer_norm  fused: add_layer_norm       unfused: add_rows -> ln_stats -> norm_apply
 *
 * Parameters: LAYOUT (0 row per work-item, 1 work-group per row), WGS
 * (work-group size, a power of two), VEC (vector width 1..16), STAGE (1:
 * keep the row in local memory between passes, as fp32 shifted by the
 * statistics' shift; LAYOUT 1: the group's row, weight and bias; LAYOUT 0:
 * each work-item's own row), ROWS (rows per work-group in LAYOUT 1: staged
 * weights are loaded once per group, so more rows per group read them less
 * often).
 */
#include "../internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The row structure compiled in; staging and rows per group are kernel
 * arguments, so they cost no extra program. */
static const oclf_param_spec norm_params[] = {OCLF_STAGED_ROW_PARAM_SPECS(OCLF_PARAM_ARG)};

typedef struct norm_cfg {
    int layout, wgs, vec, stage, rows_per_group;
    char defines[OCLF_DEFINES_MAX];
} norm_cfg;
OCLF_CFG_FITS(norm_cfg);

static void oclf_norm_heuristic(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, oclf_params *out)
{
    (void)path;
    const oclf_device_info *d = &ctx->info;
    const uint64_t cols = shape->dim[1];
    /* CPUs: a few rows per group keep both cores busy down to small batches. */
    const size_t wgs = oclf_row_heuristic(ctx, dtype, cols, 4, 64, out);
    /* GPUs stage row + weight + bias when that leaves room for other groups.
     * CPUs do not stage: LAYOUT 0 staging (each work-item's row) cuts the
     * 16-bit apply pass's instructions (LayerNorm bf16 11.8 -> 10.9 cycles
     * per 16 elements by llvm-mca over the hot loops, f16 8.3 -> 7.3), but
     * timed on the CPU device here it helped layer_norm f16 by 3-10%, left
     * bf16 level and slowed rms_norm by 5-10% (the staged fp32 row doubles
     * what the apply pass reads back from cache): the tuner searches it. */
    const int stage = !(d->type & CL_DEVICE_TYPE_CPU) && !d->local_is_global &&
                      (3 * cols + wgs) * 4 <= d->local_mem / 2;
    oclf_params_set(out, "STAGE", stage);
    oclf_params_set(out, "ROWS", 1);
}

/* Local memory a staged launch needs: LAYOUT 1 the group's row, then weight
 * and bias; LAYOUT 0 a row per work-item (weight and bias stay global). */
static size_t stage_bytes(int layout, size_t wgs, size_t cols, int nvectors)
{
    return (layout == 0 ? wgs : 1 + (size_t)nvectors) * cols * sizeof(float);
}

static oclf_status norm_config(const oclf_context *ctx, const oclf_params *p, size_t cols,
                               int nvectors, norm_cfg *cfg)
{
    int64_t v[OCLF_STAGED_ROW_NPARAMS];
    oclf_status st = oclf_params_read(ctx, norm_params, OCLF_STAGED_ROW_NPARAMS, p, v);
    if (st != OCLF_SUCCESS)
        return st;
    const int64_t layout = v[OCLF_P_LAYOUT], wgs = v[OCLF_P_WGS];
    const int64_t stage = v[OCLF_P_STAGE], rpg = v[OCLF_P_ROWS];
    if (rpg > 1 && layout != 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "kernel parameter ROWS > 1 needs LAYOUT = 1");
    const uint64_t room = ctx->info.local_mem;
    if (stage && stage_bytes((int)layout, (size_t)wgs, cols, nvectors) + (uint64_t)wgs * 4 > room) {
        if (layout == 0)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "STAGE = 1: %lld rows of %zu floats (LAYOUT 0 stages a row per "
                             "work-item) do not fit %llu bytes of local memory",
                             (long long)wgs, cols, (unsigned long long)room);
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "STAGE = 1: a row of %zu floats and its weights do not fit %llu bytes of "
                         "local memory",
                         cols, (unsigned long long)room);
    }
    cfg->layout = (int)layout;
    cfg->wgs = (int)wgs;
    cfg->vec = (int)v[OCLF_P_VEC];
    cfg->stage = (int)stage;
    cfg->rows_per_group = (int)rpg;
    oclf_param_defines(cfg->defines, sizeof cfg->defines, norm_params, OCLF_STAGED_ROW_NPARAMS,
                       v);
    return OCLF_SUCCESS;
}

typedef enum norm_kind { K_RMS, K_ADD_RMS, K_LN, K_ADD_LN } norm_kind;

static const oclf_op kind_op[] = {
    [K_RMS] = OCLF_OP_RMS_NORM,
    [K_ADD_RMS] = OCLF_OP_ADD_RMS_NORM,
    [K_LN] = OCLF_OP_LAYER_NORM,
    [K_ADD_LN] = OCLF_OP_ADD_LAYER_NORM,
};

static norm_kind op_kind(oclf_op op)
{
    for (int k = 0; k < 4; k++)
        if (kind_op[k] == op)
            return (norm_kind)k;
    return K_RMS;
}

/* The kernels one path launches, for the work-group size check. */
static int path_kernels(norm_kind kind, oclf_path path, const char **names)
{
    static const char *const fused[] = {"rms_norm", "add_rms_norm", "layer_norm",
                                        "add_layer_norm"};
    if (path == OCLF_PATH_FUSED) {
        names[0] = fused[kind];
        return 1;
    }
    int n = 0;
    if (kind == K_ADD_RMS || kind == K_ADD_LN)
        names[n++] = "add_rows";
    if (kind == K_ADD_RMS) {
        names[n++] = "rms_norm";
        return n;
    }
    names[n++] = kind == K_RMS ? "rms_stats" : "ln_stats";
    names[n++] = "norm_apply";
    return n;
}

static oclf_status oclf_norm_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                               const oclf_shape *shape, const oclf_resolved *r, int deep,
                               oclf_op_cfg *out)
{
    norm_cfg cfg;
    /* Weights or not is unknown here: check staging room for both vectors,
     * which leaves room for fewer. */
    oclf_status st = norm_config(ctx, &r->params, (size_t)shape->dim[1], 2, &cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    if (st != OCLF_SUCCESS || !deep)
        return st;
    /* CL_DEVICE_MAX_WORK_GROUP_SIZE is an upper bound; a kernel's register
     * or local-memory use can lower its own limit, which only the built
     * kernel reports. */
    oclf_list_aligned_variant(ctx, "norm.cl", dtype, -1, cfg.defines, cfg.vec);
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options(opts, sizeof opts, dtype, -1, cfg.defines);
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, "norm.cl", opts, &prog)))
        return st;
    const char *names[3];
    int n = path_kernels(op_kind(op), r->path, names);
    return oclf_check_kernel_wgs(ctx, prog, names, n, (size_t)cfg.wgs);
}

const oclf_op_hooks oclf_norm_hooks = {oclf_norm_heuristic, oclf_norm_validate};

/* One call of any of the four, after the public wrappers. `x` is the input
 * (`input` for the add variants), `res` the residual, `y` the output. */
typedef struct norm_call {
    norm_kind kind;
    oclf_dtype dtype;
    size_t rows, cols;
    oclf_buf x, res, y;
    const oclf_buf *w, *b;
    float eps;
} norm_call;

typedef struct norm_operands {
    oclf_operand x, res, y, w, b;
} norm_operands;

static oclf_status check_args(oclf_context *ctx, const norm_call *c, norm_operands *o)
{
    const char *op = oclf_op_name(kind_op[c->kind]);
    const size_t el = oclf_dtype_size(c->dtype);
    const int add = c->kind == K_ADD_RMS || c->kind == K_ADD_LN;
    oclf_status st;
    if ((st = oclf_check_norm_row(ctx, op, c->cols, c->eps)))
        return st;
    memset(o, 0, sizeof *o);
    char what[64];
#define CHECK(field, buf, nrows, label)                                                    \
    do {                                                                                  \
        snprintf(what, sizeof what, "%s: %s", op, label);                                 \
        if ((st = oclf_check_2d(ctx, what, buf, nrows, c->cols, el, &o->field)) != OCLF_SUCCESS) \
            return st;                                                                    \
    } while (0)
    CHECK(x, c->x, c->rows, add ? "input" : "in");
    if (add)
        CHECK(res, c->res, c->rows, "residual");
    if (c->kind != K_ADD_RMS)
        CHECK(y, c->y, c->rows, "out");
#undef CHECK
    snprintf(what, sizeof what, "%s: weight", op);
    if (c->w && (st = oclf_check_vector(ctx, what, *c->w, c->cols, el, &o->w)))
        return st;
    snprintf(what, sizeof what, "%s: bias", op);
    if (c->b && (st = oclf_check_vector(ctx, what, *c->b, c->cols, el, &o->b)))
        return st;

    if (add && oclf_overlap(&o->x, &o->res))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: input and residual overlap", op);
    if (c->kind != K_ADD_RMS) {
        if (oclf_overlap(&o->y, &o->x) && !oclf_same_range(&o->y, &o->x))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: out overlaps %s without being the same range", op,
                             add ? "input" : "in");
        if (add && oclf_overlap(&o->y, &o->res))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: out overlaps residual", op);
    }
    /* weight and bias are read by every row while rows are written. */
    const oclf_operand *written[2] = {add ? &o->res : &o->y, c->kind == K_ADD_RMS ? &o->x : &o->y};
    for (int i = 0; i < 2; i++) {
        if ((c->w && oclf_overlap(&o->w, written[i])) || (c->b && oclf_overlap(&o->b, written[i])))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: weight or bias overlaps a buffer the call writes", op);
    }
    return OCLF_SUCCESS;
}

static oclf_status norm_run(oclf_context *ctx, cl_command_queue queue, const norm_call *c,
                            const oclf_choice *choice, cl_uint num_events,
                            const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    norm_operands o;
    if ((st = oclf_check_call(ctx, oclf_op_name(kind_op[c->kind]), queue, num_events, wait_list,
                              c->dtype, event)) ||
        (st = check_args(ctx, c, &o)))
        return st;

    oclf_shape shape = {{c->rows, c->cols, 0, 0}};
    oclf_resolved r;
    norm_cfg cfg;
    const int nvectors = (c->w != NULL) + (c->b != NULL);
    if ((st = oclf_dispatch_resolve(ctx, kind_op[c->kind], &oclf_norm_hooks, c->dtype, &shape,
                                     choice, &r)))
        return st;
    if (r.has_cfg)
        memcpy(&cfg, &r.cfg, sizeof cfg);
    else if ((st = norm_config(ctx, &r.params, c->cols, nvectors, &cfg)))
        return st;
    if (c->rows == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    if (cfg.layout == 0 && c->rows > OCLF_MAX_LAUNCH_ITEMS - (size_t)cfg.wgs)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu rows exceed the launch range",
                         oclf_op_name(kind_op[c->kind]), c->rows);
    if (cfg.layout == 1) {
        /* A group per ROWS rows; past the launch range each group takes
         * more of them (the kernels loop over a group's rows). */
        const size_t max_groups = OCLF_MAX_LAUNCH_ITEMS / (size_t)cfg.wgs;
        if ((c->rows + (size_t)cfg.rows_per_group - 1) / (size_t)cfg.rows_per_group > max_groups)
            cfg.rows_per_group = (int)((c->rows + max_groups - 1) / max_groups);
    }

    /* Rows of every operand on vector boundaries: the aligned build. */
    const oclf_operand all[] = {o.x, o.res, o.y, o.w, o.b};
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options_aligned(opts, sizeof opts, c->dtype, -1, cfg.defines,
                                 oclf_rows_aligned(cfg.vec, all, OCLF_NARGS(all)));
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, "norm.cl", opts, &prog)))
        return st;

    const size_t local = (size_t)cfg.wgs;
    const size_t groups = (c->rows + (size_t)cfg.rows_per_group - 1) / (size_t)cfg.rows_per_group;
    const size_t global = cfg.layout == 0 ? oclf_round_up(c->rows, local) : groups * local;
    cl_ulong xo = o.x.offset, xs = o.x.stride, ro = o.res.offset, rs = o.res.stride;
    cl_ulong yo = o.y.offset, ys = o.y.stride, rows = c->rows;
    cl_uint cols = (cl_uint)c->cols, staged = (cl_uint)cfg.stage;
    cl_uint rpg = (cl_uint)cfg.rows_per_group;
    cl_mem wm = c->w ? c->w->mem : NULL, bm = c->b ? c->b->mem : NULL;
    cl_ulong wo = c->w ? c->w->offset : 0, bo = c->b ? c->b->offset : 0;
    float eps = c->eps;
    const size_t stage_size =
        cfg.stage ? stage_bytes(cfg.layout, local, c->cols, nvectors) : sizeof(float);
    /* the statistics kernels stage nothing (one pass) */
    const size_t no_stage = sizeof(float);
    const cl_uint unstaged = 0;

    if (r.path == OCLF_PATH_FUSED) {
        oclf_arg a[20];
        unsigned n = 0;
        const char *kname = NULL;
        switch (c->kind) {
        case K_RMS:
        case K_LN:
            kname = c->kind == K_RMS ? "rms_norm" : "layer_norm";
            a[n++] = OCLF_ARG(o.x.mem), a[n++] = OCLF_ARG(xo), a[n++] = OCLF_ARG(xs);
            a[n++] = OCLF_ARG(o.y.mem), a[n++] = OCLF_ARG(yo), a[n++] = OCLF_ARG(ys);
            break;
        case K_ADD_RMS:
            kname = "add_rms_norm";
            a[n++] = OCLF_ARG(o.x.mem), a[n++] = OCLF_ARG(xo), a[n++] = OCLF_ARG(xs);
            a[n++] = OCLF_ARG(o.res.mem), a[n++] = OCLF_ARG(ro), a[n++] = OCLF_ARG(rs);
            break;
        case K_ADD_LN:
            kname = "add_layer_norm";
            a[n++] = OCLF_ARG(o.x.mem), a[n++] = OCLF_ARG(xo), a[n++] = OCLF_ARG(xs);
            a[n++] = OCLF_ARG(o.res.mem), a[n++] = OCLF_ARG(ro), a[n++] = OCLF_ARG(rs);
            a[n++] = OCLF_ARG(o.y.mem), a[n++] = OCLF_ARG(yo), a[n++] = OCLF_ARG(ys);
            break;
        }
        a[n++] = OCLF_ARG(wm), a[n++] = OCLF_ARG(wo);
        if (c->kind == K_LN || c->kind == K_ADD_LN)
            a[n++] = OCLF_ARG(bm), a[n++] = OCLF_ARG(bo);
        a[n++] = OCLF_ARG(rows), a[n++] = OCLF_ARG(rpg), a[n++] = OCLF_ARG(cols);
        a[n++] = OCLF_ARG(eps), a[n++] = OCLF_ARG_LOCAL(stage_size), a[n++] = OCLF_ARG(staged);
        return oclf_enqueue(ctx, queue, prog, kname, a, n, global, local, num_events, wait_list,
                            event);
    }

    /* Unfused: the same kernels a non-fusing library would launch. */
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    cl_mem stats = NULL;
    const int add = c->kind == K_ADD_RMS || c->kind == K_ADD_LN;
    /* For the add variants the normalized source is the updated residual. */
    cl_mem sm = add ? o.res.mem : o.x.mem;
    cl_ulong so = add ? ro : xo, ss = add ? rs : xs;
    if (add) {
        oclf_arg a[] = {OCLF_ARG(o.x.mem), OCLF_ARG(xo), OCLF_ARG(xs), OCLF_ARG(o.res.mem),
                        OCLF_ARG(ro), OCLF_ARG(rs), OCLF_ARG(rows), OCLF_ARG(rpg),
                        OCLF_ARG(cols)};
        if ((st = oclf_chain_launch(&ch, prog, "add_rows", a, OCLF_NARGS(a), global, local)))
            goto done;
    }
    if (c->kind == K_ADD_RMS) {
        oclf_arg a[] = {OCLF_ARG(sm),  OCLF_ARG(so),   OCLF_ARG(ss),   OCLF_ARG(o.x.mem),
                        OCLF_ARG(xo),  OCLF_ARG(xs),   OCLF_ARG(wm),   OCLF_ARG(wo),
                        OCLF_ARG(rows), OCLF_ARG(rpg), OCLF_ARG(cols), OCLF_ARG(eps),
                        OCLF_ARG_LOCAL(stage_size), OCLF_ARG(staged)};
        st = oclf_chain_launch(&ch, prog, "rms_norm", a, OCLF_NARGS(a), global, local);
        goto done;
    }
    if ((st = oclf_temp_buffer(ctx, c->rows * 4 * sizeof(float), &stats)))
        goto done;
    {
        const char *stats_kernel = c->kind == K_RMS ? "rms_stats" : "ln_stats";
        oclf_arg a[] = {OCLF_ARG(sm),   OCLF_ARG(so),   OCLF_ARG(ss),  OCLF_ARG(stats),
                        OCLF_ARG(rows), OCLF_ARG(rpg), OCLF_ARG(cols), OCLF_ARG(eps),
                        OCLF_ARG_LOCAL(no_stage), OCLF_ARG(unstaged)};
        if ((st = oclf_chain_launch(&ch, prog, stats_kernel, a, OCLF_NARGS(a), global, local)))
            goto done;
    }
    {
        cl_mem bias = c->kind == K_RMS ? NULL : bm;
        oclf_arg a[] = {OCLF_ARG(sm),  OCLF_ARG(so),  OCLF_ARG(ss),   OCLF_ARG(stats),
                        OCLF_ARG(o.y.mem), OCLF_ARG(yo), OCLF_ARG(ys), OCLF_ARG(wm),
                        OCLF_ARG(wo),  OCLF_ARG(bias), OCLF_ARG(bo),  OCLF_ARG(rows),
                        OCLF_ARG(rpg), OCLF_ARG(cols)};
        st = oclf_chain_launch(&ch, prog, "norm_apply", a, OCLF_NARGS(a), global, local);
    }
done:
    if (stats)
        clReleaseMemObject(stats); /* freed by OpenCL once the launches finish */
    if (st != OCLF_SUCCESS) {
        oclf_chain_end(&ch, NULL);
        return st;
    }
    oclf_chain_end(&ch, event);
    return OCLF_SUCCESS;
}

oclf_status oclf_rms_norm(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype, size_t rows,
                          size_t cols, oclf_buf in, const oclf_buf *weight, oclf_buf out, float eps,
                          const oclf_choice *choice, cl_uint num_events, const cl_event *wait_list,
                          cl_event *event)
{
    norm_call c = {K_RMS, dtype, rows, cols, in, {0}, out, weight, NULL, eps};
    return norm_run(ctx, queue, &c, choice, num_events, wait_list, event);
}

oclf_status oclf_add_rms_norm(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                              size_t rows, size_t cols, oclf_buf input, oclf_buf residual,
                              const oclf_buf *weight, float eps, const oclf_choice *choice,
                              cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    norm_call c = {K_ADD_RMS, dtype, rows, cols, input, residual, {0}, weight, NULL, eps};
    return norm_run(ctx, queue, &c, choice, num_events, wait_list, event);
}

oclf_status oclf_layer_norm(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                            size_t rows, size_t cols, oclf_buf in, const oclf_buf *weight,
                            const oclf_buf *bias, oclf_buf out, float eps,
                            const oclf_choice *choice, cl_uint num_events,
                            const cl_event *wait_list, cl_event *event)
{
    norm_call c = {K_LN, dtype, rows, cols, in, {0}, out, weight, bias, eps};
    return norm_run(ctx, queue, &c, choice, num_events, wait_list, event);
}

oclf_status oclf_add_layer_norm(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                size_t rows, size_t cols, oclf_buf input, oclf_buf residual,
                                const oclf_buf *weight, const oclf_buf *bias, oclf_buf out,
                                float eps, const oclf_choice *choice, cl_uint num_events,
                                const cl_event *wait_list, cl_event *event)
{
    norm_call c = {K_ADD_LN, dtype, rows, cols, input, residual, out, weight, bias, eps};
    return norm_run(ctx, queue, &c, choice, num_events, wait_list, event);
}
