/* Attention over contiguous K and V (oclf_attention): its argument checks,
 * its offsets and its entry. */
#include "attention.h"

#include <stdlib.h>
#include <string.h>

static oclf_status check_args(oclf_context *ctx, oclf_dtype dtype, size_t batch, size_t d,
                              size_t tq, size_t tk, size_t max_sq, oclf_buf cuq, oclf_buf cuk,
                              oclf_heads q, oclf_heads k, oclf_heads v, oclf_heads o,
                              const oclf_attention_options *options, attn_call *c)
{
    memset(c, 0, sizeof *c);
    c->op = "attention";
    c->batch = batch, c->d = d, c->tq = tq, c->tk = tk;
    c->hk = k.count ? k.count : 1;
    oclf_status st;
    if ((st = oclf_attn_check_queries(ctx, dtype, max_sq, cuq, q, o, options, c)))
        return st;
    const size_t el = oclf_dtype_size(dtype);
    if ((st = oclf_attn_check_heads(ctx, c, "k", k, tk, el, &c->k)) ||
        (st = oclf_attn_check_heads(ctx, c, "v", v, tk, el, &c->v)))
        return st;
    if (k.count != v.count)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "attention: k has %zu heads and v %zu",
                         k.count, v.count);
    if ((st = oclf_check_vector(ctx, "attention: cu_seqlens_k", cuk, batch + 1, 4, &c->cuk)))
        return st;
    return oclf_attn_check_outputs(ctx, c);
}

/* Reads both offset arrays (blocking, after the wait list) into cu (2 x
 * (batch + 1)) and checks them against the contract. */
static oclf_status read_offsets(oclf_context *ctx, cl_command_queue queue, const attn_call *c,
                                cl_uint num_events, const cl_event *wait_list, int32_t *cu)
{
    const size_t n = c->batch + 1;
    cl_int err = clEnqueueReadBuffer(queue, c->cuq.mem, CL_TRUE, c->cuq.lo, n * 4, cu,
                                      num_events, wait_list, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, c->cuk.mem, CL_TRUE, c->cuk.lo, n * 4, cu + n,
                                  num_events, wait_list, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "reading cu_seqlens");
    oclf_status st = oclf_attn_check_offsets(ctx, c, "cu_seqlens_q", cu, c->max_sq, c->tq);
    return st ? st : oclf_attn_check_offsets(ctx, c, "cu_seqlens_k", cu + n, 0, c->tk);
}

oclf_status oclf_attention(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                           size_t batch, size_t head_dim, size_t total_q, size_t total_k,
                           size_t max_seqlen_q, oclf_buf cu_seqlens_q, oclf_buf cu_seqlens_k,
                           oclf_heads q, oclf_heads k, oclf_heads v, oclf_heads o,
                           const oclf_attention_options *options, const oclf_choice *choice,
                           cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    attn_call c;
    if ((st = oclf_check_call(ctx, "attention", queue, num_events, wait_list, dtype, event)) ||
        (st = check_args(ctx, dtype, batch, head_dim, total_q, total_k, max_seqlen_q,
                         cu_seqlens_q, cu_seqlens_k, q, k, v, o, options, &c)))
        return st;
    oclf_shape shape = {{total_q, c.hq, c.hk, head_dim}};
    oclf_resolved r;
    attn_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_ATTENTION, &oclf_attention_hooks, dtype, &shape,
                                     choice, &r)))
        return st;
    if (r.path == OCLF_PATH_FUSED) {
        if (r.has_cfg)
            memcpy(&cfg, &r.cfg, sizeof cfg);
        else if ((st = oclf_attn_config(ctx, dtype, &r.params, head_dim, 0, r.wgs_default, &cfg)))
            return st;
        if ((st = oclf_attn_mma_fallback(ctx, &c, &cfg)))
            return st;
    }
    if (batch == 0 || total_q == 0 || max_seqlen_q == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    int32_t *cu = NULL;
    if (ctx->validate || r.path == OCLF_PATH_UNFUSED) {
        if (!(cu = malloc(2 * (batch + 1) * sizeof *cu)))
            return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "attention: out of host memory");
        if ((st = read_offsets(ctx, queue, &c, num_events, wait_list, cu))) {
            free(cu);
            return st;
        }
    }
    if (r.path == OCLF_PATH_FUSED) {
        free(cu);
        return oclf_attn_run_fused(ctx, queue, &c, &cfg, num_events, wait_list, event);
    }
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = oclf_attn_run_unfused(ctx, &ch, &c, cu, NULL);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    free(cu);
    return st;
}
