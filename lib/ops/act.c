/*
 * Activation-and-multiply: oclf_act_and_mul and its gradient,
 * oclf_act_and_mul_backward.
 *
 *   act_and_mul            fused: act_and_mul
 *                          unfused: act_rows -> mul_rows (fp32 temporary)
 *   act_and_mul_backward   fused: act_and_mul_backward
 *                          unfused: act_grad_rows -> grad_x_rows -> grad_y_rows
 *                          (act and act' in two fp32 temporaries)
 *
 * Parameters: LAYOUT (0 a chunk of a row per work-item, 1 work-group per
 * row), WGS (work-group size, a power of two), VEC (vector width 1..16).
 */
#include "../internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A work-item's chunk is never shorter than this many outputs: below it the
 * per-work-item setup starts to show against the streaming. */
#define MIN_CHUNK 2048

/* The row structure, all compiled in. */
static const oclf_param_spec act_params[] = {OCLF_ROW_PARAM_SPECS};
enum { P_LAYOUT, P_WGS, P_VEC, P_COUNT };
_Static_assert(sizeof act_params / sizeof act_params[0] == P_COUNT, "one spec per parameter");

typedef oclf_row_cfg act_cfg;
OCLF_CFG_FITS(act_cfg);

static void oclf_act_heuristic(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                        oclf_path path, oclf_params *out)
{
    (void)path;
    /* Nothing to reduce: each work-item streams its own (part of a) row. */
    oclf_row_heuristic(ctx, dtype, shape->dim[1], 4, 64, out);
}

static oclf_status oclf_act_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                     const oclf_shape *shape, const oclf_resolved *r, int deep,
                                     oclf_op_cfg *out)
{
    (void)shape;
    static const char *const fused[] = {"act_and_mul"}, *const unfused[] = {"act_rows", "mul_rows"};
    static const char *const bfused[] = {"act_and_mul_backward"},
                             *const bunfused[] = {"act_grad_rows", "grad_x_rows", "grad_y_rows"};
    const int bwd = op == OCLF_OP_ACT_AND_MUL_BACKWARD, f = r->path == OCLF_PATH_FUSED;
    const char *const *names = bwd ? (f ? bfused : bunfused) : (f ? fused : unfused);
    const int n = f ? 1 : bwd ? 3 : 2;
    return oclf_row_validate(ctx, act_params, P_COUNT, dtype, r, deep, "act.cl", names, n, out);
}

const oclf_op_hooks oclf_act_hooks = {oclf_act_heuristic, oclf_act_validate};

/* The caller's activation, read into *a (its size checked as every sized
 * struct's), then checked. */
static oclf_status check_activation(oclf_context *ctx, const char *op,
                                    const oclf_activation *act, oclf_activation *a)
{
    if (!act)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: act is NULL", op);
    char what[64];
    snprintf(what, sizeof what, "%s: act", op);
    oclf_status st = oclf_options_read(ctx, what, act, sizeof *a, a, sizeof *a,
                                       _Alignof(oclf_activation));
    if (st != OCLF_SUCCESS)
        return st;
    if ((unsigned)a->kind >= OCLF_ACT_COUNT_)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown activation %d", op,
                         (int)a->kind);
    if (a->act_on_second != 0 && a->act_on_second != 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: act_on_second must be 0 or 1", op);
    if (a->kind == OCLF_ACT_SWIGLU_OAI) {
        if (a->act_on_second)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: act_on_second does not apply to the interleaved SWIGLU_OAI", op);
        if (!isfinite(a->alpha))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: SWIGLU_OAI alpha is not finite", op);
        if (!isfinite(a->limit) || a->limit < 0.0f)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: SWIGLU_OAI limit must be finite and >= 0", op);
    }
    if (a->kind == OCLF_ACT_FATRELU && !isfinite(a->threshold))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: FATRELU threshold is not finite", op);
    return OCLF_SUCCESS;
}

/* The aligned build (OCLF_ALIGNED) applies where every operand's rows start
 * on a vector boundary and so does a row's second half (d a multiple of
 * VEC); chunks already start on one (act_split). */
static int act_aligned(const act_cfg *cfg, size_t d, const oclf_operand *ops, unsigned n)
{
    return d % (size_t)cfg->vec == 0 && oclf_rows_aligned(cfg->vec, ops, n);
}

/* Rows split into parts when there are fewer rows than the device needs
 * to keep every compute unit streaming (a decode batch of 1-16 rows):
 * LAYOUT 0 wants a few work-items per unit, LAYOUT 1 a few work-groups, each
 * part at least MIN_CHUNK elements and (LAYOUT 1) a vector per work-item. */
static void act_split(const oclf_context *ctx, const act_cfg *cfg, size_t rows, size_t d,
                      cl_uint *chunk, cl_uint *nsplit)
{
    size_t parts = 1;
    const size_t units = ctx->info.compute_units ? ctx->info.compute_units : 1;
    const size_t want = units * 4 * (cfg->layout == 0 ? (size_t)cfg->wgs : 1);
    if (rows > 0 && rows < want) {
        parts = (want + rows - 1) / rows;
        size_t min_chunk = MIN_CHUNK;
        if (cfg->layout == 1 && min_chunk < (size_t)cfg->wgs * (size_t)cfg->vec)
            min_chunk = (size_t)cfg->wgs * (size_t)cfg->vec;
        const size_t most = (d + min_chunk - 1) / min_chunk;
        if (parts > most)
            parts = most;
        if (parts < 1)
            parts = 1;
    }
    size_t c = (d + parts - 1) / parts;
    c = oclf_round_up(c, (size_t)cfg->vec); /* chunks start on a vector boundary */
    *chunk = (cl_uint)c;
    *nsplit = (cl_uint)((d + c - 1) / c);
}

/* What both entry points check first: the call, the activation (read into
 * *a), d. */
static oclf_status check_act_call(oclf_context *ctx, const char *op, cl_command_queue queue,
                                  cl_uint num_events, const cl_event *wait_list,
                                  oclf_dtype dtype, cl_event *event, const oclf_activation *act,
                                  oclf_activation *a, size_t d)
{
    oclf_status st;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)) ||
        (st = check_activation(ctx, op, act, a)))
        return st;
    if (d == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: d is 0", op);
    /* Kernels index the 2d-wide input row with 32-bit element indices. */
    if (d > (size_t)INT_MAX - 64)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: d = %zu is not below 2^31", op, d);
    return OCLF_SUCCESS;
}

void oclf_activation_init(oclf_activation *act)
{
    if (act)
        *act = (oclf_activation)OCLF_ACTIVATION_INIT;
}

oclf_status oclf_act_and_mul(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                             size_t rows, size_t d, oclf_buf in, oclf_buf out,
                             const oclf_activation *activation, const oclf_choice *choice,
                             cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *op = oclf_op_name(OCLF_OP_ACT_AND_MUL);
    oclf_status st;
    oclf_activation a;
    const oclf_activation *act = &a;
    if ((st = check_act_call(ctx, op, queue, num_events, wait_list, dtype, event, activation, &a,
                             d)))
        return st;
    const size_t el = oclf_dtype_size(dtype);
    oclf_operand oi, oo;
    char what[64];
    snprintf(what, sizeof what, "%s: in", op);
    if ((st = oclf_check_2d(ctx, what, in, rows, 2 * d, el, &oi)))
        return st;
    snprintf(what, sizeof what, "%s: out", op);
    if ((st = oclf_check_2d(ctx, what, out, rows, d, el, &oo)))
        return st;
    if (oclf_overlap(&oi, &oo))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: out overlaps in", op);

    oclf_shape shape = {{rows, d, 0, 0}};
    oclf_resolved r;
    act_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_ACT_AND_MUL, &oclf_act_hooks, dtype, &shape,
                                     choice, &r)) ||
        (st = oclf_row_config_resolved(ctx, act_params, P_COUNT, &r, &cfg)))
        return st;
    if (rows == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    cl_uint chunk, nsplit;
    act_split(ctx, &cfg, rows, d, &chunk, &nsplit);
    const size_t local = (size_t)cfg.wgs;
    if (rows > OCLF_MAX_LAUNCH_ITEMS / local / nsplit)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu rows exceed the launch range", op, rows);
    const size_t global =
        cfg.layout == 0 ? oclf_round_up(rows * nsplit, local) : rows * nsplit * local;

    /* Rows and the second half on vector boundaries: the aligned build. */
    const oclf_operand all[] = {oi, oo};
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options_aligned(opts, sizeof opts, dtype, -1, cfg.defines,
                                 act_aligned(&cfg, d, all, OCLF_NARGS(all)));
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, "act.cl", opts, &prog)))
        return st;

    cl_ulong io = oi.offset, is = oi.stride, oof = oo.offset, os = oo.stride, nrows = rows;
    cl_uint dd = (cl_uint)d, kind = (cl_uint)act->kind, second = (cl_uint)act->act_on_second;
    float p0 = act->kind == OCLF_ACT_FATRELU ? act->threshold : act->alpha;
    float p1 = act->limit;

    if (r.path == OCLF_PATH_FUSED) {
        oclf_arg a[] = {OCLF_ARG(oi.mem), OCLF_ARG(io),    OCLF_ARG(is),     OCLF_ARG(oo.mem),
                        OCLF_ARG(oof),    OCLF_ARG(os),    OCLF_ARG(nrows),  OCLF_ARG(dd),
                        OCLF_ARG(kind),   OCLF_ARG(second), OCLF_ARG(p0),    OCLF_ARG(p1),
                        OCLF_ARG(chunk),  OCLF_ARG(nsplit)};
        return oclf_enqueue(ctx, queue, prog, "act_and_mul", a, OCLF_NARGS(a), global, local,
                            num_events, wait_list, event);
    }

    /* Unfused: the activation into an fp32 temporary (so the result is still
     * rounded once), then the multiply. */
    if (rows > SIZE_MAX / d / sizeof(float))
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: temporary of %zu x %zu floats", op, rows, d);
    cl_mem tmp = NULL;
    if ((st = oclf_temp_buffer(ctx, rows * d * sizeof(float), &tmp)))
        return st;
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    {
        oclf_arg a[] = {OCLF_ARG(oi.mem), OCLF_ARG(io),   OCLF_ARG(is),     OCLF_ARG(tmp),
                        OCLF_ARG(nrows),  OCLF_ARG(dd),   OCLF_ARG(kind),   OCLF_ARG(second),
                        OCLF_ARG(p0),     OCLF_ARG(p1),   OCLF_ARG(chunk),  OCLF_ARG(nsplit)};
        st = oclf_chain_launch(&ch, prog, "act_rows", a, OCLF_NARGS(a), global, local);
    }
    if (st == OCLF_SUCCESS) {
        oclf_arg a[] = {OCLF_ARG(oi.mem), OCLF_ARG(io),     OCLF_ARG(is),    OCLF_ARG(tmp),
                        OCLF_ARG(oo.mem), OCLF_ARG(oof),    OCLF_ARG(os),    OCLF_ARG(nrows),
                        OCLF_ARG(dd),     OCLF_ARG(kind),   OCLF_ARG(second), OCLF_ARG(p0),
                        OCLF_ARG(p1),     OCLF_ARG(chunk),  OCLF_ARG(nsplit)};
        st = oclf_chain_launch(&ch, prog, "mul_rows", a, OCLF_NARGS(a), global, local);
    }
    clReleaseMemObject(tmp); /* freed by OpenCL once the launches finish */
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    return st;
}

oclf_status oclf_act_and_mul_backward(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                      size_t rows, size_t d, oclf_buf in, oclf_buf dout,
                                      oclf_buf din, const oclf_activation *activation,
                                      const oclf_choice *choice, cl_uint num_events,
                                      const cl_event *wait_list, cl_event *event)
{
    const char *op = oclf_op_name(OCLF_OP_ACT_AND_MUL_BACKWARD);
    oclf_status st;
    oclf_activation a;
    const oclf_activation *act = &a;
    if ((st = check_act_call(ctx, op, queue, num_events, wait_list, dtype, event, activation, &a,
                             d)))
        return st;
    const size_t el = oclf_dtype_size(dtype);
    oclf_operand oi, og, od;
    char what[64];
    snprintf(what, sizeof what, "%s: in", op);
    if ((st = oclf_check_2d(ctx, what, in, rows, 2 * d, el, &oi)))
        return st;
    snprintf(what, sizeof what, "%s: dout", op);
    if ((st = oclf_check_2d(ctx, what, dout, rows, d, el, &og)))
        return st;
    snprintf(what, sizeof what, "%s: din", op);
    if ((st = oclf_check_2d(ctx, what, din, rows, 2 * d, el, &od)))
        return st;
    /* In place is din == in exactly: every element's inputs are read before
     * its gradients are written, by the same work-item (cl/act.cl). */
    if (oclf_overlap(&oi, &od) && !oclf_same_range(&oi, &od))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: din overlaps in without being the same range", op);
    if (oclf_overlap(&og, &oi) || oclf_overlap(&og, &od))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: dout overlaps %s", op,
                         oclf_overlap(&og, &oi) ? "in" : "din");

    oclf_shape shape = {{rows, d, 0, 0}};
    oclf_resolved r;
    act_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_ACT_AND_MUL_BACKWARD, &oclf_act_hooks, dtype,
                                     &shape, choice, &r)) ||
        (st = oclf_row_config_resolved(ctx, act_params, P_COUNT, &r, &cfg)))
        return st;
    if (rows == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    cl_uint chunk, nsplit;
    act_split(ctx, &cfg, rows, d, &chunk, &nsplit);
    const size_t local = (size_t)cfg.wgs;
    if (rows > OCLF_MAX_LAUNCH_ITEMS / local / nsplit)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu rows exceed the launch range", op, rows);
    const size_t global =
        cfg.layout == 0 ? oclf_round_up(rows * nsplit, local) : rows * nsplit * local;
    const int fused = r.path == OCLF_PATH_FUSED;
    if (!fused && rows > SIZE_MAX / 2 / d / sizeof(float))
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: temporaries of %zu x %zu floats", op, rows,
                         d);

    /* Every operand's rows and the second halves on vector boundaries: the
     * aligned build, as the forward's. */
    const oclf_operand all[] = {oi, og, od};
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options_aligned(opts, sizeof opts, dtype, -1, cfg.defines,
                                 act_aligned(&cfg, d, all, OCLF_NARGS(all)));
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, "act.cl", opts, &prog)))
        return st;

    cl_ulong io = oi.offset, is = oi.stride, go = og.offset, gs = og.stride;
    cl_ulong dio = od.offset, dis = od.stride, nrows = rows;
    cl_uint dd = (cl_uint)d, kind = (cl_uint)act->kind, second = (cl_uint)act->act_on_second;
    float p0 = act->kind == OCLF_ACT_FATRELU ? act->threshold : act->alpha;
    float p1 = act->limit;
    /* the arguments the fused kernel takes, and the unfused ones lead with */
#define BACKWARD_ARGLIST                                                                  \
    OCLF_ARG(oi.mem), OCLF_ARG(io), OCLF_ARG(is), OCLF_ARG(og.mem), OCLF_ARG(go),          \
        OCLF_ARG(gs), OCLF_ARG(od.mem), OCLF_ARG(dio), OCLF_ARG(dis), OCLF_ARG(nrows),     \
        OCLF_ARG(dd), OCLF_ARG(kind), OCLF_ARG(second), OCLF_ARG(p0), OCLF_ARG(p1),        \
        OCLF_ARG(chunk), OCLF_ARG(nsplit)

    if (fused) {
        oclf_arg a[] = {BACKWARD_ARGLIST};
        return oclf_enqueue(ctx, queue, prog, "act_and_mul_backward", a, OCLF_NARGS(a), global,
                            local, num_events, wait_list, event);
    }

    /* Unfused: act and act' into fp32 temporaries, then the activated half's
     * gradient, then the multiplied half's (the order in place needs). */
    cl_mem tmp = NULL, tmpd = NULL;
    if ((st = oclf_temp_buffer(ctx, rows * d * sizeof(float), &tmp)))
        return st;
    if ((st = oclf_temp_buffer(ctx, rows * d * sizeof(float), &tmpd))) {
        clReleaseMemObject(tmp);
        return st;
    }
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    {
        oclf_arg a[] = {OCLF_ARG(oi.mem), OCLF_ARG(io),     OCLF_ARG(is),    OCLF_ARG(tmp),
                        OCLF_ARG(tmpd),   OCLF_ARG(nrows),  OCLF_ARG(dd),    OCLF_ARG(kind),
                        OCLF_ARG(second), OCLF_ARG(p0),     OCLF_ARG(p1),    OCLF_ARG(chunk),
                        OCLF_ARG(nsplit)};
        st = oclf_chain_launch(&ch, prog, "act_grad_rows", a, OCLF_NARGS(a), global, local);
    }
    if (st == OCLF_SUCCESS) {
        oclf_arg a[] = {BACKWARD_ARGLIST, OCLF_ARG(tmpd)};
        st = oclf_chain_launch(&ch, prog, "grad_x_rows", a, OCLF_NARGS(a), global, local);
    }
    if (st == OCLF_SUCCESS) {
        oclf_arg a[] = {BACKWARD_ARGLIST, OCLF_ARG(tmp)};
        st = oclf_chain_launch(&ch, prog, "grad_y_rows", a, OCLF_NARGS(a), global, local);
    }
#undef BACKWARD_ARGLIST
    clReleaseMemObject(tmp); /* freed by OpenCL once the launches finish */
    clReleaseMemObject(tmpd);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    return st;
}
