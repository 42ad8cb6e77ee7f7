/*
 * Loss family: softmax cross-entropy, fused (one kernel per row block) or
 * unfused (its composition):
 *
 *   cross_entropy  fused:   ce_targets -> ce_fused [-> ce_reduce]
 *                  unfused: ce_targets -> ce_softmax -> ce_loss_rows
 *                           [-> ce_grad] [-> ce_reduce]
 *
 * ce_targets checks the targets on the device and counts the rows not
 * ignored (cl/loss.cl); the call reads its one flag back (blocking) once
 * the rest is queued, and every later kernel skips its writes when the
 * flag is set, so a bad target leaves every buffer untouched.
 *
 * Parameters: LAYOUT (0 row per work-item, 1 work-group per row), WGS
 * (work-group size, a power of two), VEC (vector width 1..16), all
 * compiled in, as the row structure of cl/common.h.
 *
 * With a work-group per row, ce_fused keeps the row's capped logits in
 * local memory between its statistics and its gradient (OCLF_CE_STAGE)
 * where the row fits in half the device's local memory (two groups of a
 * unit keep each other's latency covered), so the gradient pass reads no
 * logit from global memory: the row is read once and written once.
 */
#include "loss.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const oclf_param_spec loss_params[] = {OCLF_ROW_PARAM_SPECS};
enum { P_LAYOUT, P_WGS, P_VEC, NPARAMS };

typedef oclf_row_cfg loss_cfg;
OCLF_CFG_FITS(loss_cfg);

/* The first published layout ends with grad_output. */
#define CE_OPTIONS_FIRST_SIZE                                                                  \
    (offsetof(oclf_cross_entropy_options, grad_output) + sizeof(const oclf_buf *))

static void oclf_loss_heuristic(const oclf_context *ctx, oclf_dtype dtype,
                                const oclf_shape *shape, oclf_path path, oclf_params *out)
{
    (void)path;
    /* CPUs: a row per work-item, a few rows a group; GPUs: a group per row
     * (vocabularies are long rows). */
    oclf_row_heuristic(ctx, dtype, shape->dim[1], 4, 64, out);
}

/* ce_fused's staged row: cols f32 beside the group's reduction scratch,
 * where that fits in half the device's local memory; else 0. */
static size_t ce_stage_bytes(const oclf_context *ctx, const loss_cfg *cfg, oclf_path path,
                             size_t cols)
{
    if (path != OCLF_PATH_FUSED || cfg->layout != 1)
        return 0;
    const uint64_t need = (uint64_t)cols * 4, scratch = (uint64_t)cfg->wgs * 4;
    return need + scratch <= ctx->info.local_mem / 2 ? (size_t)need : 0;
}

static int path_kernels(oclf_path path, const char **names)
{
    if (path == OCLF_PATH_FUSED) {
        names[0] = "ce_fused";
        return 1;
    }
    names[0] = "ce_softmax";
    names[1] = "ce_grad";
    return 2;
}

static oclf_status oclf_loss_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                      const oclf_shape *shape, const oclf_resolved *r, int deep,
                                      oclf_op_cfg *out)
{
    (void)op;
    const char *names[2];
    const int n = path_kernels(r->path, names);
    loss_cfg cfg;
    oclf_status st =
        oclf_row_validate(ctx, loss_params, NPARAMS, dtype, r, deep, "loss.cl", names, n,
                          (oclf_op_cfg *)&cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    /* the staged row's build where the shape takes it, for the
     * cross-compile suite's list (its aligned form: the common case) */
    if (st == OCLF_SUCCESS && deep && ce_stage_bytes(ctx, &cfg, r->path, shape->dim[1])) {
        char d[OCLF_DEFINES_MAX + 24];
        snprintf(d, sizeof d, "%s -DOCLF_CE_STAGE=1", cfg.defines);
        oclf_list_aligned_variant(ctx, "loss.cl", dtype, -1, d, cfg.vec);
    }
    return st;
}

const oclf_op_hooks oclf_loss_hooks = {oclf_loss_heuristic, oclf_loss_validate};

void oclf_cross_entropy_options_init(oclf_cross_entropy_options *options)
{
    if (options)
        *options = (oclf_cross_entropy_options)OCLF_CROSS_ENTROPY_OPTIONS_INIT;
}

typedef struct ce_operands {
    oclf_operand x, tg, loss, lse, gup;
} ce_operands;

oclf_status oclf_ce_options(oclf_context *ctx, const char *op,
                            const oclf_cross_entropy_options *options,
                            oclf_cross_entropy_options *o)
{
    oclf_status st;
    if ((st = oclf_options_read(ctx, "options", options, CE_OPTIONS_FIRST_SIZE, o, sizeof *o,
                                _Alignof(oclf_cross_entropy_options))))
        return st;
    if (!options) {
        o->ignore_index = -100;
        o->reduction = OCLF_REDUCTION_MEAN;
    }
    if (o->reduction != OCLF_REDUCTION_NONE && o->reduction != OCLF_REDUCTION_SUM &&
        o->reduction != OCLF_REDUCTION_MEAN)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: reduction %d is not NONE (0), SUM (1) or MEAN (2)", op,
                         (int)o->reduction);
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing <= 1.0f))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: label_smoothing %g is not in [0, 1]",
                         op, (double)o->label_smoothing);
    if (!isfinite(o->softcap))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: softcap (%g) must be finite", op,
                         (double)o->softcap);
    if (!(o->z_loss >= 0.0f) || !isfinite(o->z_loss))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: z_loss %g must be finite and >= 0",
                         op, (double)o->z_loss);
    if (o->compute_grad != 0 && o->compute_grad != 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: compute_grad must be 0 or 1", op);
    return OCLF_SUCCESS;
}

static oclf_status check_args(oclf_context *ctx, oclf_dtype dtype, size_t tokens, size_t vocab,
                              oclf_buf logits, oclf_buf targets, oclf_buf loss,
                              const oclf_cross_entropy_options *o, ce_operands *ops)
{
    const char *op = "cross_entropy";
    oclf_status st;
    if (vocab == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: vocab is 0", op);
    if (vocab >= UINT_MAX || tokens >= UINT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: tokens (%zu) and vocab (%zu) must be below %u", op, tokens, vocab,
                         UINT_MAX);
    memset(ops, 0, sizeof *ops);
    if ((st = oclf_check_2d(ctx, "cross_entropy: logits", logits, tokens, vocab,
                            oclf_dtype_size(dtype), &ops->x)) ||
        (st = oclf_check_vector(ctx, "cross_entropy: targets", targets, tokens, 8, &ops->tg)) ||
        (st = oclf_check_vector(ctx, "cross_entropy: loss", loss,
                                o->reduction == OCLF_REDUCTION_NONE ? tokens : 1, 4,
                                &ops->loss)))
        return st;
    if (o->lse &&
        (st = oclf_check_vector(ctx, "cross_entropy: lse", *o->lse, tokens, 4, &ops->lse)))
        return st;
    if (o->compute_grad && o->grad_output &&
        (st = oclf_check_vector(ctx, "cross_entropy: grad_output", *o->grad_output,
                                o->reduction == OCLF_REDUCTION_NONE ? tokens : 1, 4,
                                &ops->gup)))
        return st;
    /* Every operand against the logits and the outputs against the rest. */
    const struct {
        const oclf_operand *a, *b;
        int present;
        const char *what;
    } pairs[] = {
        {&ops->loss, &ops->x, 1, "loss overlaps logits"},
        {&ops->tg, &ops->x, 1, "targets overlap logits"},
        {&ops->lse, &ops->x, o->lse != NULL, "lse overlaps logits"},
        {&ops->gup, &ops->x, o->compute_grad && o->grad_output, "grad_output overlaps logits"},
        {&ops->loss, &ops->tg, 1, "loss overlaps targets"},
        {&ops->lse, &ops->tg, o->lse != NULL, "lse overlaps targets"},
        {&ops->loss, &ops->lse, o->lse != NULL, "loss overlaps lse"},
        {&ops->loss, &ops->gup, o->compute_grad && o->grad_output, "loss overlaps grad_output"},
        {&ops->lse, &ops->gup, o->lse && o->compute_grad && o->grad_output,
         "lse overlaps grad_output"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i].present && oclf_overlap(pairs[i].a, pairs[i].b))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s", op, pairs[i].what);
    return OCLF_SUCCESS;
}

oclf_status oclf_ce_kernels_get(oclf_context *ctx, const char *op, oclf_dtype dtype, size_t rows,
                                size_t cols, const oclf_operand *logits,
                                const oclf_choice *choice, oclf_ce_kernels *out)
{
    oclf_status st;
    oclf_shape shape = {{rows, cols, 0, 0}};
    oclf_resolved r;
    loss_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_CROSS_ENTROPY, &oclf_loss_hooks, dtype, &shape,
                                     choice, &r)) ||
        (st = oclf_row_config_resolved(ctx, loss_params, NPARAMS, &r, &cfg)))
        return st;
    const size_t local = (size_t)cfg.wgs;
    if ((cfg.layout == 0 && rows > OCLF_MAX_LAUNCH_ITEMS - local) ||
        (cfg.layout == 1 && rows > OCLF_MAX_LAUNCH_ITEMS / local))
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu rows exceed the launch range", op, rows);
    out->path = r.path;
    out->prog = NULL;
    out->stage = 0;
    if (rows == 0)
        return OCLF_SUCCESS;
    out->local = local;
    out->global = cfg.layout == 0 ? oclf_round_up(rows, local) : rows * local;
    out->stage = ce_stage_bytes(ctx, &cfg, r.path, cols);
    char opts[OCLF_OPTIONS_MAX], d[OCLF_DEFINES_MAX + 24];
    snprintf(d, sizeof d, "%s%s", cfg.defines, out->stage ? " -DOCLF_CE_STAGE=1" : "");
    oclf_program_options_aligned(opts, sizeof opts, dtype, -1, d,
                                 logits && oclf_rows_aligned(cfg.vec, logits, 1));
    return oclf_program_get(ctx, "loss.cl", opts, &out->prog);
}

oclf_status oclf_ce_flag_create(oclf_context *ctx, const char *op, cl_mem *flag)
{
    cl_int err = CL_SUCCESS;
    cl_uint init[2] = {OCLF_CE_NO_ERROR, 0};
    *flag = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof init, init,
                           &err);
    if (!*flag || err != CL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "%s: clCreateBuffer(flag)", op);
        *flag = NULL;
        return oclf_fail_cl(ctx, err, what);
    }
    return OCLF_SUCCESS;
}

oclf_status oclf_ce_launch_targets(oclf_chain *ch, const oclf_ce_kernels *k, cl_mem targets,
                                   cl_ulong to, size_t rows, cl_uint cols, cl_long ignore,
                                   cl_mem flag)
{
    cl_ulong T = rows;
    oclf_arg a[] = {OCLF_ARG(targets), OCLF_ARG(to),     OCLF_ARG(T),
                    OCLF_ARG(cols),    OCLF_ARG(ignore), OCLF_ARG(flag)};
    return oclf_chain_launch(ch, k->prog, "ce_targets", a, OCLF_NARGS(a),
                             oclf_round_up(rows, 64), 0);
}

oclf_status oclf_ce_launch_rows(oclf_chain *ch, const oclf_ce_kernels *k, const oclf_ce_rows *r)
{
    oclf_status st;
    if (k->path == OCLF_PATH_FUSED) {
        oclf_arg a[] = {OCLF_ARG(r->x),     OCLF_ARG(r->xo),    OCLF_ARG(r->xs),
                        OCLF_ARG(r->tg),    OCLF_ARG(r->to),    OCLF_ARG(r->flag),
                        OCLF_ARG(r->gup),   OCLF_ARG(r->gupo),  OCLF_ARG(r->loss),
                        OCLF_ARG(r->losso), OCLF_ARG(r->lse),   OCLF_ARG(r->lseo),
                        OCLF_ARG(r->rows),  OCLF_ARG(r->cols),  OCLF_ARG(r->ignore),
                        OCLF_ARG(r->ls),    OCLF_ARG(r->cap),   OCLF_ARG(r->zl),
                        OCLF_ARG(r->flags), OCLF_ARG_LOCAL(k->stage)};
        return oclf_chain_launch(ch, k->prog, "ce_fused", a, OCLF_NARGS(a) - (k->stage ? 0 : 1),
                                 k->global, k->local);
    }
    /* The temporaries live until the kernels that use them complete. */
    cl_mem probs = NULL, stats = NULL;
    if ((st = oclf_temp_buffer(ch->ctx, (size_t)r->rows * r->cols * sizeof(float), &probs)) ||
        (st = oclf_temp_buffer(ch->ctx, (size_t)r->rows * 2 * sizeof(float), &stats)))
        goto done;
    {
        oclf_arg a[] = {OCLF_ARG(r->x),    OCLF_ARG(r->xo),    OCLF_ARG(r->xs),
                        OCLF_ARG(r->flag), OCLF_ARG(probs),    OCLF_ARG(stats),
                        OCLF_ARG(r->rows), OCLF_ARG(r->cols),  OCLF_ARG(r->cap)};
        if ((st = oclf_chain_launch(ch, k->prog, "ce_softmax", a, OCLF_NARGS(a), k->global,
                                    k->local)))
            goto done;
    }
    {
        oclf_arg a[] = {OCLF_ARG(r->x),     OCLF_ARG(r->xo),   OCLF_ARG(r->xs),
                        OCLF_ARG(r->tg),    OCLF_ARG(r->to),   OCLF_ARG(r->flag),
                        OCLF_ARG(stats),    OCLF_ARG(r->loss), OCLF_ARG(r->losso),
                        OCLF_ARG(r->lse),   OCLF_ARG(r->lseo), OCLF_ARG(r->rows),
                        OCLF_ARG(r->cols),  OCLF_ARG(r->ignore), OCLF_ARG(r->ls),
                        OCLF_ARG(r->cap),   OCLF_ARG(r->zl)};
        if ((st = oclf_chain_launch(ch, k->prog, "ce_loss_rows", a, OCLF_NARGS(a),
                                    oclf_round_up((size_t)r->rows, 64), 0)))
            goto done;
    }
    if (r->flags & OCLF_CE_GRAD) {
        oclf_arg a[] = {OCLF_ARG(r->x),    OCLF_ARG(r->xo),   OCLF_ARG(r->xs),
                        OCLF_ARG(r->tg),   OCLF_ARG(r->to),   OCLF_ARG(r->flag),
                        OCLF_ARG(probs),   OCLF_ARG(stats),   OCLF_ARG(r->gup),
                        OCLF_ARG(r->gupo), OCLF_ARG(r->rows), OCLF_ARG(r->cols),
                        OCLF_ARG(r->ignore), OCLF_ARG(r->ls), OCLF_ARG(r->cap),
                        OCLF_ARG(r->zl),   OCLF_ARG(r->flags)};
        st = oclf_chain_launch(ch, k->prog, "ce_grad", a, OCLF_NARGS(a), k->global, k->local);
    }
done:
    if (probs)
        clReleaseMemObject(probs);
    if (stats)
        clReleaseMemObject(stats);
    return st;
}

/* The reduction's work-group: a power of two up to 256 within the device's
 * limit. */
static size_t reduce_wgs(const oclf_context *ctx)
{
    size_t w = 256;
    while (w > 1 && w > ctx->info.max_wgs)
        w /= 2;
    return w;
}

oclf_status oclf_ce_launch_reduce(oclf_chain *ch, const oclf_ce_kernels *k, cl_mem rows_loss,
                                  cl_mem flag, cl_mem out, cl_ulong oo, size_t rows, int mean)
{
    const size_t rw = reduce_wgs(ch->ctx);
    cl_ulong T = rows;
    cl_uint m = mean != 0;
    oclf_arg a[] = {OCLF_ARG(rows_loss), OCLF_ARG(flag), OCLF_ARG(out), OCLF_ARG(oo),
                    OCLF_ARG(T),         OCLF_ARG(m),    OCLF_ARG_LOCAL(rw * sizeof(float))};
    return oclf_chain_launch(ch, k->prog, "ce_reduce", a, OCLF_NARGS(a), rw, rw);
}

oclf_status oclf_ce_bad_target(oclf_context *ctx, cl_command_queue queue, const char *op,
                               cl_mem targets, size_t to, cl_uint row, size_t vocab,
                               int64_t ignore)
{
    /* One target, read for the message only. */
    cl_long t = 0;
    clEnqueueReadBuffer(queue, targets, CL_TRUE, (to + row) * sizeof(cl_long), sizeof t, &t, 0,
                        NULL, NULL);
    return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                     "%s: targets row %u: target %lld is outside [0, %zu) and is not "
                     "ignore_index (%lld); nothing was written",
                     op, row, (long long)t, vocab, (long long)ignore);
}

oclf_status oclf_cross_entropy(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                               size_t tokens, size_t vocab, oclf_buf logits, oclf_buf targets,
                               oclf_buf loss, const oclf_cross_entropy_options *options,
                               const oclf_choice *choice, cl_uint num_events,
                               const cl_event *wait_list, cl_event *event)
{
    const char *op = "cross_entropy";
    oclf_status st;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)))
        return st;
    oclf_cross_entropy_options o;
    ce_operands ops;
    if ((st = oclf_ce_options(ctx, op, options, &o)) ||
        (st = check_args(ctx, dtype, tokens, vocab, logits, targets, loss, &o, &ops)))
        return st;
    oclf_ce_kernels k;
    if ((st = oclf_ce_kernels_get(ctx, op, dtype, tokens, vocab, &ops.x, choice, &k)))
        return st;
    if (tokens == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    const int reduced = o.reduction != OCLF_REDUCTION_NONE;
    cl_int err = CL_SUCCESS;
    cl_mem flag = NULL, rows_loss = NULL;
    if ((st = oclf_ce_flag_create(ctx, op, &flag)))
        return st;
    cl_event read_ev = NULL, last = NULL;
    cl_uint bad = OCLF_CE_NO_ERROR;
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);

    oclf_ce_rows rr = {
        .x = ops.x.mem, .xo = ops.x.offset, .xs = ops.x.stride,
        .tg = targets.mem, .to = ops.tg.offset, .flag = flag,
        .gup = o.compute_grad && o.grad_output ? o.grad_output->mem : NULL,
        .loss = ops.loss.mem, .losso = ops.loss.offset,
        .lse = o.lse ? o.lse->mem : NULL, .lseo = o.lse ? ops.lse.offset : 0,
        .rows = tokens, .cols = (cl_uint)vocab, .ignore = o.ignore_index,
        .ls = o.label_smoothing, .cap = o.softcap > 0.0f ? o.softcap : 0.0f, .zl = o.z_loss,
        .flags = (o.compute_grad ? OCLF_CE_GRAD : 0) | (reduced ? OCLF_CE_SUM : 0) |
                 (o.reduction == OCLF_REDUCTION_MEAN ? OCLF_CE_MEAN : 0)};
    rr.gupo = rr.gup ? ops.gup.offset : 0;
    if (reduced) {
        if ((st = oclf_temp_buffer(ctx, tokens * sizeof(float), &rows_loss)))
            goto done;
        rr.loss = rows_loss;
        rr.losso = 0;
    }
    if ((st = oclf_ce_launch_targets(&ch, &k, targets.mem, rr.to, tokens, rr.cols, rr.ignore,
                                     flag)))
        goto done;
    /* The flag's read waits for the check only; the rest is queued behind
     * it and skips its writes when the flag is set. */
    err = clEnqueueReadBuffer(queue, flag, CL_FALSE, 0, sizeof bad, &bad, 1, &ch.prev, &read_ev);
    if (err != CL_SUCCESS) {
        st = oclf_fail_cl(ctx, err, "cross_entropy: clEnqueueReadBuffer(flag)");
        goto done;
    }
    if ((st = oclf_ce_launch_rows(&ch, &k, &rr)))
        goto done;
    if (reduced && (st = oclf_ce_launch_reduce(&ch, &k, rows_loss, flag, loss.mem,
                                               ops.loss.offset, tokens,
                                               o.reduction == OCLF_REDUCTION_MEAN)))
        goto done;
done:
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? &last : NULL);
    if (read_ev) {
        clFlush(queue);
        err = clWaitForEvents(1, &read_ev);
        clReleaseEvent(read_ev);
        if (st == OCLF_SUCCESS && err != CL_SUCCESS)
            st = oclf_fail_cl(ctx, err, "cross_entropy: reading the targets check");
    }
    if (st == OCLF_SUCCESS && bad != OCLF_CE_NO_ERROR)
        st = oclf_ce_bad_target(ctx, queue, op, targets.mem, ops.tg.offset, bad, vocab,
                                o.ignore_index);
    if (st != OCLF_SUCCESS && last) {
        clReleaseEvent(last);
        last = NULL;
    }
    if (event)
        *event = last;
    else if (last)
        clReleaseEvent(last);
    if (rows_loss)
        clReleaseMemObject(rows_loss);
    clReleaseMemObject(flag);
    return st;
}
