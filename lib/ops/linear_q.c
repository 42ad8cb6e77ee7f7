/*
 * Linear with a quantized weight: oclf_linear_q's entry and the weight's
 * checks, and oclf_qweight_convert (lin_qconvert: GGUF blocks rewritten as
 * INT8 or INT4 with f16 scales). The paths run in linear.c.
 */
#include "linear.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

void oclf_qweight_init(oclf_qweight *w)
{
    if (w)
        *w = (oclf_qweight)OCLF_QWEIGHT_INIT;
}

/* Bytes of one row of a quantized W of k weights. */
static size_t qrow_bytes(int fmt, size_t k)
{
    switch (fmt) {
    case OCLF_QFORMAT_INT8: return k;
    case OCLF_QFORMAT_INT4: return k / 2;
    case OCLF_QFORMAT_Q8_0: return k / 32 * 34;
    default: return k / 32 * 18;
    }
}

/* The weight of oclf_linear_q against the header's rules, into c->w,
 * c->qscale, c->qzero and c->q. */
/* The caller's weight description read into *out, its size checked as
 * every sized struct's. */
static oclf_status read_qweight(oclf_context *ctx, const char *op, const char *what,
                                const oclf_qweight *w, oclf_qweight *out)
{
    if (!w)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s is NULL", op, what);
    char name[64];
    snprintf(name, sizeof name, "%s: %s", op, what);
    return oclf_options_read(ctx, name, w, sizeof *out, out, sizeof *out, _Alignof(oclf_qweight));
}

static oclf_status check_qweight(oclf_context *ctx, const char *op, const char *what,
                                 const oclf_qweight *src, size_t n, size_t k, lin_call *c)
{
    oclf_qweight copy;
    oclf_status st = read_qweight(ctx, op, what, src, &copy);
    if (st != OCLF_SUCCESS)
        return st;
    const oclf_qweight *w = &copy;
    char nq[64], ns[64], nz[64];
    snprintf(nq, sizeof nq, "%s: %s.q", op, what);
    snprintf(ns, sizeof ns, "%s: %s.scale", op, what);
    snprintf(nz, sizeof nz, "%s: %s.zero", op, what);
    const int fmt = (int)w->format;
    if (fmt < OCLF_QFORMAT_INT8 || fmt >= OCLF_QFORMAT_COUNT_)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown weight format %d", op, fmt);
    static const char *const names[] = {"", "INT8", "INT4", "Q8_0", "Q4_0"};
    const int gguf = fmt >= OCLF_QFORMAT_Q8_0;
    unsigned g = w->group;
    if (gguf && g == 0)
        g = 32;
    const int group_ok = gguf ? g == 32
                              : (g == 32 || g == 64 || g == 128 || (fmt == OCLF_QFORMAT_INT8 && !g));
    if (!group_ok)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s does not take a group of %u (%s)", op,
                         names[fmt], w->group,
                         gguf ? "blocks are 32" : fmt == OCLF_QFORMAT_INT8 ? "0, 32, 64 or 128"
                                                                           : "32, 64 or 128");
    if (g && k % g)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: K = %zu is not a multiple of %s's group "
                                                     "of %u",
                         op, k, names[fmt], g);
    if (w->zero && fmt != OCLF_QFORMAT_INT4)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: %s is symmetric and takes no zero points", op, names[fmt]);
    if ((st = oclf_check_2d(ctx, nq, w->q, n, qrow_bytes(fmt, k), 1, &c->w)))
        return st;
    if (gguf) {
        if (w->scale.mem)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: %s carries its scales in its blocks; scale.mem must be NULL",
                             op, names[fmt]);
        /* the f16 d of every block sits at an even byte */
        if (c->w.offset % 2 || c->w.stride % 2)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: %s's q offset (%zu) and row stride (%zu) must be even", op,
                             names[fmt], c->w.offset, c->w.stride);
    } else {
        const int f32_ok = fmt == OCLF_QFORMAT_INT8 && !g;
        if (w->scale_dtype != OCLF_F16 && !(f32_ok && w->scale_dtype == OCLF_F32))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s%s takes %s scales, not dtype %d",
                             op, names[fmt], g ? " in groups" : " per channel",
                             f32_ok ? "f32 or f16" : "f16", (int)w->scale_dtype);
        const size_t es = oclf_dtype_size(w->scale_dtype);
        st = g ? oclf_check_2d(ctx, ns, w->scale, n, k / g, es, &c->qscale)
               : oclf_check_vector(ctx, ns, w->scale, n, es, &c->qscale);
        if (st)
            return st;
        if (!g)
            c->qscale.stride = 1; /* row r's one scale */
        if (w->zero &&
            (st = oclf_check_2d(ctx, nz, *w->zero, n, k / g, 1, &c->qzero)))
            return st;
    }
    c->q.fmt = fmt;
    c->q.group = g;
    c->q.zero = w->zero != NULL;
    c->q.sf32 = !gguf && w->scale_dtype == OCLF_F32;
    return OCLF_SUCCESS;
}

oclf_status oclf_linear_q(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype, size_t m,
                          size_t n, size_t k, oclf_buf x, const oclf_qweight *w, oclf_buf y,
                          oclf_linear_act prologue, const oclf_linear_epilogue *epilogue,
                          const oclf_choice *choice, cl_uint num_events, const cl_event *wait_list,
                          cl_event *event)
{
    oclf_status st;
    lin_call c;
    memset(&c, 0, sizeof c);
    const oclf_buf none = {NULL, 0, 0};
    if ((st = oclf_check_call(ctx, "linear_q", queue, num_events, wait_list, dtype, event)) ||
        (st = check_qweight(ctx, "linear_q", "w", w, n, k, &c)) ||
        (st = oclf_lin_check_args(ctx, dtype, m, n, k, x, prologue, none, OCLF_WEIGHT_NK, 1, y,
                                  epilogue, &c)))
        return st;
    const oclf_shape shape = {{m, n, k, LIN_QCODE(c.q.fmt, c.q.group)}};
    return oclf_lin_run(ctx, queue, OCLF_OP_LINEAR_Q, &c, &shape, choice, num_events, wait_list,
                        event);
}

oclf_status oclf_qweight_convert(oclf_context *ctx, cl_command_queue queue, size_t n, size_t k,
                                 const oclf_qweight *src_in, const oclf_qweight *dst_in,
                                 const oclf_choice *choice, cl_uint num_events,
                                 const cl_event *wait_list, cl_event *event)
{
    const char *op = "qweight_convert";
    oclf_status st;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, OCLF_F32, event)) ||
        (st = oclf_check_choice(ctx, op, choice)))
        return st;
    if (!src_in || !dst_in)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: src or dst is NULL", op);
    oclf_qweight src_copy, dst_copy;
    if ((st = read_qweight(ctx, op, "src", src_in, &src_copy)) ||
        (st = read_qweight(ctx, op, "dst", dst_in, &dst_copy)))
        return st;
    const oclf_qweight *src = &src_copy, *dst = &dst_copy;
    if (src->format != OCLF_QFORMAT_Q8_0 && src->format != OCLF_QFORMAT_Q4_0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: src must be Q8_0 or Q4_0 (format %d)", op, (int)src->format);
    const int fmt = src->format;
    const oclf_qformat want = fmt == OCLF_QFORMAT_Q8_0 ? OCLF_QFORMAT_INT8 : OCLF_QFORMAT_INT4;
    if (dst->format != want || dst->group != 32 || dst->scale_dtype != OCLF_F16 || dst->zero)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: %s converts into %s with group 32, f16 scales and no zero points",
                         op, fmt == OCLF_QFORMAT_Q8_0 ? "Q8_0" : "Q4_0",
                         want == OCLF_QFORMAT_INT8 ? "INT8" : "INT4");
    if (n > INT_MAX || k > INT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: N and K must be below 2^31", op);
    lin_call s, d;
    memset(&s, 0, sizeof s);
    memset(&d, 0, sizeof d);
    if ((st = check_qweight(ctx, op, "src", src, n, k, &s)) ||
        (st = check_qweight(ctx, op, "dst", dst, n, k, &d)))
        return st;
    if (oclf_overlap(&d.w, &s.w) || oclf_overlap(&d.qscale, &s.w) ||
        oclf_overlap(&d.w, &d.qscale))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: the arrays of src and dst overlap", op);
    const size_t blocks = k / 32;
    if (n * blocks == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    if (n * blocks > OCLF_MAX_LAUNCH_ITEMS - LIN_ELEM_WGS)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu blocks exceed the launch range", op,
                         n * blocks);
    oclf_program *prog;
    if ((st = oclf_lin_unfused_program(ctx, OCLF_F32, &s.q, &prog)))
        return st;
    cl_ulong wo = s.w.offset, ws = s.w.stride, qo = d.w.offset, qs = d.w.stride;
    cl_ulong so = d.qscale.offset, ss = d.qscale.stride;
    cl_uint rows = (cl_uint)n, nb = (cl_uint)blocks;
    oclf_arg a[] = {OCLF_ARG(s.w.mem), OCLF_ARG(wo),          OCLF_ARG(ws), OCLF_ARG(d.w.mem),
                    OCLF_ARG(qo),      OCLF_ARG(qs),          OCLF_ARG(d.qscale.mem),
                    OCLF_ARG(so),      OCLF_ARG(ss),          OCLF_ARG(rows), OCLF_ARG(nb)};
    return oclf_enqueue(ctx, queue, prog, "lin_qconvert", a, OCLF_NARGS(a),
                        oclf_round_up(n * blocks, LIN_ELEM_WGS), LIN_ELEM_WGS, num_events,
                        wait_list, event);
}
