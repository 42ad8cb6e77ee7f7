/*
 * Normalization backward family: rms_norm_backward (with the residual
 * stream's gradient, add + RMSNorm's backward) and layer_norm_backward,
 * fused or unfused (its composition):
 *
 *   rms_norm_backward    fused:   rms_norm_bwd -> ng_reduce
 *                        unfused: ng_stats_rms -> ng_colpart -> ng_dx_rms -> ng_reduce
 *   layer_norm_backward  fused:   layer_norm_bwd -> ng_reduce
 *                        unfused: ng_stats_ln -> ng_colpart -> ng_dx_ln -> ng_reduce
 *
 * (ng_colpart and ng_reduce only when dw or db is wanted.) dw and db come
 * from fp32 partial sums over fixed chunks of NG_CHUNK_ROWS rows and a
 * second kernel that adds the chunks in order, so they are bit for bit the
 * same on every run and for every tuning (cl/norm_grad.c says how); the
 * partials live in a temporary buffer per call.
 *
 * Parameters: LAYOUT (0: a chunk of rows per work-item; 1: a chunk per
 * work-group, a row at a time across the group), WGS (a power of two), VEC
 * (1..16), all compiled in, as the row structure of cl/common.h.
 */
#include "../internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* cl/norm_grad.cl's NG_CHUNK. */
#define NG_CHUNK_ROWS 32

static const oclf_param_spec ng_params[] = {OCLF_ROW_PARAM_SPECS};
enum { P_LAYOUT, P_WGS, P_VEC, NPARAMS };

typedef oclf_row_cfg ng_cfg;
OCLF_CFG_FITS(ng_cfg);

static void oclf_norm_grad_heuristic(const oclf_context *ctx, oclf_dtype dtype,
                                     const oclf_shape *shape, oclf_path path, oclf_params *out)
{
    (void)path;
    /* CPUs: a chunk per work-item, a few a group (chunks of 32 rows: 4096
     * rows are 128 chunks, 32 groups for the cores); GPUs: a group per
     * chunk, lanes across the row. */
    oclf_row_heuristic(ctx, dtype, shape->dim[1], 4, 64, out);
}

static int path_kernels(oclf_op op, oclf_path path, const char **names)
{
    const int ln = op == OCLF_OP_LAYER_NORM_BACKWARD;
    if (path == OCLF_PATH_FUSED) {
        names[0] = ln ? "layer_norm_bwd" : "rms_norm_bwd";
        return 1;
    }
    names[0] = ln ? "ng_dx_ln" : "ng_dx_rms";
    return 1;
}

static oclf_status oclf_norm_grad_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                           const oclf_shape *shape, const oclf_resolved *r,
                                           int deep, oclf_op_cfg *out)
{
    (void)shape;
    const char *names[1];
    const int n = path_kernels(op, r->path, names);
    return oclf_row_validate(ctx, ng_params, NPARAMS, dtype, r, deep, "norm_grad.cl", names, n,
                             out);
}

const oclf_op_hooks oclf_norm_grad_hooks = {oclf_norm_grad_heuristic, oclf_norm_grad_validate};

typedef struct ng_call {
    const char *op;
    int ln;
    oclf_dtype dtype;
    size_t rows, cols;
    oclf_buf x, dy, dx;
    const oclf_buf *w, *dw, *db, *dres;
    float eps;
} ng_call;

typedef struct ng_operands {
    oclf_operand x, dy, dx, w, dw, db, dres;
} ng_operands;

static oclf_status check_args(oclf_context *ctx, const ng_call *c, ng_operands *o)
{
    const char *op = c->op;
    const size_t el = oclf_dtype_size(c->dtype);
    oclf_status st;
    if ((st = oclf_check_norm_row(ctx, op, c->cols, c->eps)))
        return st;
    memset(o, 0, sizeof *o);
    char what[64];
#define CHECK2(field, buf, label)                                                             \
    do {                                                                                      \
        snprintf(what, sizeof what, "%s: %s", op, label);                                     \
        if ((st = oclf_check_2d(ctx, what, buf, c->rows, c->cols, el, &o->field)))            \
            return st;                                                                        \
    } while (0)
#define CHECKV(field, buf, elem, label)                                                       \
    do {                                                                                      \
        snprintf(what, sizeof what, "%s: %s", op, label);                                     \
        if ((st = oclf_check_vector(ctx, what, buf, c->cols, elem, &o->field)))               \
            return st;                                                                        \
    } while (0)
    CHECK2(x, c->x, "x");
    CHECK2(dy, c->dy, "dy");
    CHECK2(dx, c->dx, "dx");
    if (c->dres)
        CHECK2(dres, *c->dres, "dres");
    if (c->w)
        CHECKV(w, *c->w, el, "weight");
    if (c->dw)
        CHECKV(dw, *c->dw, sizeof(float), "dw");
    if (c->db)
        CHECKV(db, *c->db, sizeof(float), "db");
#undef CHECK2
#undef CHECKV
    /* dx is written element by element after its dy (and dres) element is
     * read by the same work-item, so it may be either exactly; x is read
     * again by other passes. */
    if (oclf_overlap(&o->dx, &o->x))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: dx overlaps x", op);
    if (oclf_overlap(&o->dx, &o->dy) && !oclf_same_range(&o->dx, &o->dy))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: dx overlaps dy without being the same range", op);
    if (c->dres && oclf_overlap(&o->dx, &o->dres) && !oclf_same_range(&o->dx, &o->dres))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: dx overlaps dres without being the same range", op);
    if (c->w && oclf_overlap(&o->w, &o->dx))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: weight overlaps dx", op);
    /* dw and db are written at the end, after every read of the others. */
    const struct {
        const oclf_operand *g;
        const oclf_buf *present;
        const char *name;
    } grads[2] = {{&o->dw, c->dw, "dw"}, {&o->db, c->db, "db"}};
    const struct {
        const oclf_operand *a;
        int present;
        const char *name;
    } others[] = {{&o->x, 1, "x"},         {&o->dy, 1, "dy"},
                  {&o->dx, 1, "dx"},       {&o->dres, c->dres != NULL, "dres"},
                  {&o->w, c->w != NULL, "weight"}};
    for (int g = 0; g < 2; g++) {
        if (!grads[g].present)
            continue;
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
            if (others[i].present && oclf_overlap(grads[g].g, others[i].a))
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s overlaps %s", op,
                                 grads[g].name, others[i].name);
    }
    if (c->dw && c->db && oclf_overlap(&o->dw, &o->db))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: dw overlaps db", op);
    return OCLF_SUCCESS;
}

static oclf_status ng_run(oclf_context *ctx, cl_command_queue queue, const ng_call *c,
                          const oclf_choice *choice, cl_uint num_events,
                          const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    ng_operands o;
    if ((st = oclf_check_call(ctx, c->op, queue, num_events, wait_list, c->dtype, event)) ||
        (st = check_args(ctx, c, &o)))
        return st;

    const oclf_op opid = c->ln ? OCLF_OP_LAYER_NORM_BACKWARD : OCLF_OP_RMS_NORM_BACKWARD;
    oclf_shape shape = {{c->rows, c->cols, 0, 0}};
    oclf_resolved r;
    ng_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, opid, &oclf_norm_grad_hooks, c->dtype, &shape, choice,
                                     &r)) ||
        (st = oclf_row_config_resolved(ctx, ng_params, NPARAMS, &r, &cfg)))
        return st;
    const int want_grads = c->dw || c->db;
    if (c->rows == 0 && !want_grads)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    const size_t nch = (c->rows + NG_CHUNK_ROWS - 1) / NG_CHUNK_ROWS;
    const size_t local = (size_t)cfg.wgs;
    /* Launch sizes: fused, a chunk per work-item or per group; unfused, a
     * row per work-item or per group, and a work-item per chunk column. */
    size_t colpart_items;
    if ((cfg.layout == 0 && c->rows > OCLF_MAX_LAUNCH_ITEMS - local) ||
        (cfg.layout == 1 && c->rows > OCLF_MAX_LAUNCH_ITEMS / local) ||
        __builtin_mul_overflow(nch, c->cols, &colpart_items) ||
        colpart_items > OCLF_MAX_LAUNCH_ITEMS - 64)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu rows of %zu exceed the launch range",
                         c->op, c->rows, c->cols);

    /* Rows of the row-shaped operands on vector boundaries: the aligned
     * build (dw and db, fp32 sums, are not read as vectors of the dtype). */
    const oclf_operand rowwise[] = {o.x, o.dy, o.dx, o.w, o.dres};
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options_aligned(opts, sizeof opts, c->dtype, -1, cfg.defines,
                                 oclf_rows_aligned(cfg.vec, rowwise, OCLF_NARGS(rowwise)));
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, "norm_grad.cl", opts, &prog)))
        return st;

    cl_mem part = NULL, stats = NULL;
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    /* Partials: dw's plane, then db's (the plane offsets are fixed, so a
     * db alone still leaves room for dw's). */
    if (want_grads && (st = oclf_temp_buffer(ctx, (nch ? 2 * nch * c->cols : 1) * sizeof(float),
                                             &part)))
        goto done;

    cl_ulong xo = o.x.offset, xs = o.x.stride, dyo = o.dy.offset, dys = o.dy.stride;
    cl_ulong dxo = o.dx.offset, dxs = o.dx.stride;
    cl_mem wm = c->w ? c->w->mem : NULL, drm = c->dres ? c->dres->mem : NULL;
    cl_ulong wo = c->w ? o.w.offset : 0, dro = c->dres ? o.dres.offset : 0;
    cl_ulong drs = c->dres ? o.dres.stride : 0;
    cl_ulong rows = c->rows, nchunks = nch;
    cl_uint cols = (cl_uint)c->cols, want_w = c->dw != NULL, want_b = c->db != NULL;
    cl_uint rpg = 1;
    float eps = c->eps;

    if (c->rows > 0 && r.path == OCLF_PATH_FUSED) {
        const size_t global = cfg.layout == 0 ? oclf_round_up(nch, local) : nch * local;
        oclf_arg a[] = {OCLF_ARG(o.x.mem),  OCLF_ARG(xo),     OCLF_ARG(xs),   OCLF_ARG(o.dy.mem),
                        OCLF_ARG(dyo),      OCLF_ARG(dys),    OCLF_ARG(wm),   OCLF_ARG(wo),
                        OCLF_ARG(drm),      OCLF_ARG(dro),    OCLF_ARG(drs),  OCLF_ARG(o.dx.mem),
                        OCLF_ARG(dxo),      OCLF_ARG(dxs),    OCLF_ARG(part), OCLF_ARG(want_w),
                        OCLF_ARG(want_b),   OCLF_ARG(rows),   OCLF_ARG(cols), OCLF_ARG(eps)};
        if ((st = oclf_chain_launch(&ch, prog, c->ln ? "layer_norm_bwd" : "rms_norm_bwd", a,
                                    OCLF_NARGS(a), global, local)))
            goto done;
    } else if (c->rows > 0) {
        /* Unfused: statistics, the column partials (before dx, which may be
         * written over dy), then dx. */
        if ((st = oclf_temp_buffer(ctx, c->rows * 4 * sizeof(float), &stats)))
            goto done;
        {
            oclf_arg a[] = {OCLF_ARG(o.x.mem), OCLF_ARG(xo),   OCLF_ARG(xs),
                            OCLF_ARG(stats),   OCLF_ARG(rows), OCLF_ARG(cols),
                            OCLF_ARG(eps)};
            if ((st = oclf_chain_launch(&ch, prog, c->ln ? "ng_stats_ln" : "ng_stats_rms", a,
                                        OCLF_NARGS(a), oclf_round_up(c->rows, 64), 0)))
                goto done;
        }
        if (want_grads) {
            oclf_arg a[] = {OCLF_ARG(o.x.mem), OCLF_ARG(xo),     OCLF_ARG(xs),
                            OCLF_ARG(o.dy.mem), OCLF_ARG(dyo),   OCLF_ARG(dys),
                            OCLF_ARG(stats),   OCLF_ARG(part),   OCLF_ARG(want_w),
                            OCLF_ARG(want_b),  OCLF_ARG(rows),   OCLF_ARG(cols)};
            if ((st = oclf_chain_launch(&ch, prog, "ng_colpart", a, OCLF_NARGS(a),
                                        oclf_round_up(colpart_items, 64), 0)))
                goto done;
        }
        {
            const size_t global =
                cfg.layout == 0 ? oclf_round_up(c->rows, local) : c->rows * local;
            oclf_arg a[] = {OCLF_ARG(o.x.mem), OCLF_ARG(xo),     OCLF_ARG(xs),  OCLF_ARG(o.dy.mem),
                            OCLF_ARG(dyo),     OCLF_ARG(dys),    OCLF_ARG(wm),  OCLF_ARG(wo),
                            OCLF_ARG(drm),     OCLF_ARG(dro),    OCLF_ARG(drs), OCLF_ARG(o.dx.mem),
                            OCLF_ARG(dxo),     OCLF_ARG(dxs),    OCLF_ARG(stats), OCLF_ARG(rows),
                            OCLF_ARG(rpg),     OCLF_ARG(cols)};
            if ((st = oclf_chain_launch(&ch, prog, c->ln ? "ng_dx_ln" : "ng_dx_rms", a,
                                        OCLF_NARGS(a), global, local)))
                goto done;
        }
    }
    if (want_grads) {
        cl_mem dwm = c->dw ? c->dw->mem : NULL, dbm = c->db ? c->db->mem : NULL;
        cl_ulong dwo = c->dw ? o.dw.offset : 0, dbo = c->db ? o.db.offset : 0;
        oclf_arg a[] = {OCLF_ARG(part), OCLF_ARG(nchunks), OCLF_ARG(cols), OCLF_ARG(dwm),
                        OCLF_ARG(dwo),  OCLF_ARG(dbm),     OCLF_ARG(dbo)};
        st = oclf_chain_launch(&ch, prog, "ng_reduce", a, OCLF_NARGS(a),
                               oclf_round_up(c->cols, 64), 0);
    }
done:
    if (part)
        clReleaseMemObject(part); /* freed by OpenCL once the launches finish */
    if (stats)
        clReleaseMemObject(stats);
    if (st != OCLF_SUCCESS) {
        oclf_chain_end(&ch, NULL);
        return st;
    }
    oclf_chain_end(&ch, event);
    return OCLF_SUCCESS;
}

oclf_status oclf_rms_norm_backward(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                   size_t rows, size_t cols, oclf_buf x, oclf_buf dy,
                                   const oclf_buf *weight, const oclf_buf *dres, oclf_buf dx,
                                   const oclf_buf *dw, float eps, const oclf_choice *choice,
                                   cl_uint num_events, const cl_event *wait_list,
                                   cl_event *event)
{
    ng_call c = {"rms_norm_backward", 0, dtype, rows, cols, x, dy, dx, weight, dw, NULL, dres,
                 eps};
    return ng_run(ctx, queue, &c, choice, num_events, wait_list, event);
}

oclf_status oclf_layer_norm_backward(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                     size_t rows, size_t cols, oclf_buf x, oclf_buf dy,
                                     const oclf_buf *weight, oclf_buf dx, const oclf_buf *dw,
                                     const oclf_buf *db, float eps, const oclf_choice *choice,
                                     cl_uint num_events, const cl_event *wait_list,
                                     cl_event *event)
{
    ng_call c = {"layer_norm_backward", 1, dtype, rows, cols, x, dy, dx, weight, dw, db, NULL,
                 eps};
    return ng_run(ctx, queue, &c, choice, num_events, wait_list, event);
}
