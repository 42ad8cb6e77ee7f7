/*
 * L2 distance + top-k.
 *
 *   fused:   l2_scan (distances in registers, candidate heaps per
 *            (query, slice)) -> l2_merge
 *   unfused: l2_q_norms -> per database tile: [l2_to_f32] -> [l2_x_norms]
 *            -> GEMM (-2 Q X^T) -> l2_tile_topk; then l2_merge
 *
 * Both paths keep k candidates per (query, slice) in global memory, so any
 * k <= N works on any device, and both end in the same merge kernel. Device
 * temporaries are bounded by options->max_temp_bytes: the fused path needs
 * only the heaps (queries are processed in chunks when they do not fit);
 * the unfused path adds a distance tile whose width follows from the bound.
 */
#include "l2topk.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static oclf_status check_args(oclf_context *ctx, oclf_dtype dtype, size_t nq, size_t n, size_t d,
                              size_t k, oclf_buf q, oclf_buf x, oclf_buf dist, oclf_buf idx,
                              const oclf_l2_topk_options *opt, l2_call *c)
{
    oclf_status st;
    memset(c, 0, sizeof *c);
    if (d == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: D is 0");
    if (k == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: k is 0");
    if (k > INT_MAX)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: k = %zu exceeds %d", k, INT_MAX);
    if (d > UINT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "l2_topk: D = %zu exceeds %u", d, UINT_MAX);
    if (opt && opt->precision != OCLF_L2_FAST && opt->precision != OCLF_L2_EXACT)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: unknown precision %d",
                         (int)opt->precision);
    if ((st = oclf_check_2d(ctx, "l2_topk: q", q, nq, d, 4, &c->q)) ||
        (st = oclf_check_2d(ctx, "l2_topk: x", x, n, d, oclf_dtype_size(dtype), &c->x)) ||
        (st = oclf_check_2d(ctx, "l2_topk: dist", dist, nq, k, 4, &c->dist)) ||
        (st = oclf_check_2d(ctx, "l2_topk: idx", idx, nq, k, 8, &c->idx)))
        return st;
    if (opt && opt->x_norms) {
        oclf_buf nb = *opt->x_norms;
        nb.stride = 0;
        if ((st = oclf_check_2d(ctx, "l2_topk: x_norms", nb, 1, n, 4, &c->xn)))
            return st;
        c->has_xn = 1;
    }
    if (opt && opt->allowed) {
        if ((st = oclf_check_vector(ctx, "l2_topk: allowed", *opt->allowed, (n + 7) / 8, 1,
                                    &c->allow)))
            return st;
        c->has_allow = 1;
    }
    if (oclf_overlap(&c->dist, &c->idx))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: dist and idx overlap");
    const oclf_operand *in[4] = {&c->q, &c->x, &c->xn, &c->allow};
    for (int i = 0; i < 4; i++)
        if (oclf_overlap(&c->dist, in[i]) || oclf_overlap(&c->idx, in[i]))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "l2_topk: an output (dist or idx) overlaps an input");
    c->dtype = dtype;
    c->nq = nq;
    c->n = n;
    c->d = d;
    c->k = k;
    c->bound = opt && opt->max_temp_bytes ? opt->max_temp_bytes : OCLF_L2_DEFAULT_MAX_TEMP;
    return OCLF_SUCCESS;
}

void oclf_l2_topk_options_init(oclf_l2_topk_options *options)
{
    if (options)
        *options = (oclf_l2_topk_options)OCLF_L2_TOPK_OPTIONS_INIT;
}

oclf_status oclf_l2_topk(oclf_context *ctx, cl_command_queue queue, oclf_dtype x_dtype, size_t nq,
                         size_t n, size_t d, size_t k, oclf_buf q, oclf_buf x, oclf_buf dist,
                         oclf_buf idx, const oclf_l2_topk_options *options,
                         const oclf_choice *choice, cl_uint num_events, const cl_event *wait_list,
                         cl_event *event)
{
    oclf_status st;
    l2_call c;
    oclf_l2_topk_options opt;
    if ((st = oclf_check_call(ctx, "l2_topk", queue, num_events, wait_list, x_dtype, event)) ||
        (st = oclf_l2_topk_options_read(ctx, options, &opt)) ||
        (st = check_args(ctx, x_dtype, nq, n, d, k, q, x, dist, idx, &opt, &c)))
        return st;
    options = &opt;

    const int exact = options && options->precision == OCLF_L2_EXACT;
    if (exact && choice && choice->path == OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: precision EXACT needs the direct formula, which only the fused "
                         "path computes");
    int64_t formula_asked = -1;
    if (choice)
        oclf_params_get(&choice->params, "FORMULA", &formula_asked);
    if (exact && formula_asked == 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: precision EXACT excludes FORMULA = 1 (the expansion)");

    oclf_shape shape = {{nq, n, d, k}};
    oclf_resolved r;
    /* The precision option asks dispatch for the fused path (the only one
     * with the direct formula), then narrows its formula. */
    oclf_choice fc;
    if (exact) {
        memset(&fc, 0, sizeof fc);
        if (choice)
            fc = *choice;
        fc.path = OCLF_PATH_FUSED;
        choice = &fc;
    }
    l2_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_L2_TOPK, &oclf_l2topk_hooks, x_dtype, &shape,
                                     choice, &r)))
        return st;
    if (exact) /* a program of its own: parsed here rather than cached */
        oclf_params_set(&r.params, "FORMULA", 0);
    if (r.has_cfg && !exact)
        memcpy(&cfg, &r.cfg, sizeof cfg);
    else if ((st = oclf_l2_config(ctx, x_dtype, &shape, r.path, &r.params, &cfg)))
        return st;
    if (nq == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    oclf_program *prog;
    if ((st = oclf_l2_program(ctx, x_dtype, &cfg, &prog)))
        return st;

    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = r.path == OCLF_PATH_FUSED ? oclf_l2_run_fused(ctx, &ch, prog, &c, &cfg)
                                   : oclf_l2_run_unfused(ctx, &ch, prog, &c, &cfg);
    if (st != OCLF_SUCCESS) {
        oclf_chain_end(&ch, NULL);
        return st;
    }
    oclf_chain_end(&ch, event);
    return OCLF_SUCCESS;
}
