/* Attention over a paged KV cache (oclf_attention_paged): its argument
 * checks, its lengths and block tables, the unfused gather and its entry. */
#include "attention.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static oclf_status check_paged_args(oclf_context *ctx, oclf_dtype dtype, size_t batch, size_t tq,
                                    size_t max_sq, oclf_buf cuq, oclf_buf seq_lens, oclf_buf bt,
                                    size_t maxb, oclf_heads q, const oclf_kv_cache *cache,
                                    oclf_heads o, const oclf_attention_options *options,
                                    attn_call *c)
{
    memset(c, 0, sizeof *c);
    c->op = "attention_paged";
    c->paged = 1;
    oclf_status st;
    oclf_operand ck, cv;
    oclf_kv_cache kv;
    if ((st = oclf_check_kv_cache(ctx, "attention_paged: cache", cache, oclf_dtype_size(dtype),
                                  &ck, &cv, &kv)))
        return st;
    cache = &kv;
    if (maxb == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "attention_paged: max_blocks is 0");
    size_t reach;
    if (__builtin_mul_overflow(maxb, cache->block_size, &reach) || reach > INT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "attention_paged: max_blocks x block_size (%zu x %zu) must be below 2^31",
                         maxb, cache->block_size);
    c->batch = batch, c->d = cache->head_dim, c->tq = tq, c->tk = reach, c->hk = cache->heads;
    if ((st = oclf_attn_check_queries(ctx, dtype, max_sq, cuq, q, o, options, c)))
        return st;
    if ((st = oclf_check_vector(ctx, "attention_paged: seq_lens", seq_lens, batch, 4, &c->cuk)))
        return st;
    if (bt.stride && bt.stride < maxb)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "attention_paged: block_tables stride %zu is below max_blocks %zu",
                         bt.stride, maxb);
    if (!bt.stride)
        bt.stride = maxb;
    if ((st = oclf_check_2d(ctx, "attention_paged: block_tables", bt, batch, maxb, 4, &c->bt)))
        return st;
    /* The cache as two head views: a token is a slot, heads packed. */
    const size_t w = cache->heads * cache->head_dim;
    c->k = (attn_heads){ck, {cache->heads, cache->head_dim, cache->head_dim}, cache->head_dim};
    c->v = (attn_heads){cv, {cache->heads, cache->head_dim, cache->head_dim}, cache->head_dim};
    c->k.op.stride = c->v.op.stride = w;
    c->bts = bt.stride, c->bs = cache->block_size, c->nblk = cache->num_blocks, c->maxb = maxb;
    return oclf_attn_check_outputs(ctx, c);
}

/* The paged form of read_offsets: cu_seqlens_q, then seq_lens turned into
 * cumulative key offsets (cu + batch + 1), and into *slots the cache slot
 * of every key of every sequence in that order (for the unfused gather),
 * checking the lengths against the table's reach and each block id used
 * against the cache. *slots is malloc'ed (NULL when there are no keys). */
static oclf_status read_paged(oclf_context *ctx, cl_command_queue queue, const attn_call *c,
                              cl_uint num_events, const cl_event *wait_list, int32_t *cu,
                              int64_t **slots)
{
    const size_t n = c->batch + 1;
    *slots = NULL;
    int32_t *lens = malloc((c->batch ? c->batch : 1) * sizeof *lens);
    const size_t btn = c->batch * c->bts;
    int32_t *bt = malloc((btn ? btn : 1) * sizeof *bt);
    oclf_status st = OCLF_SUCCESS;
    if (!lens || !bt) {
        st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "attention_paged: out of host memory");
        goto done;
    }
    /* the table's rows are read whole, padding included: c->bt spans them */
    cl_int err = clEnqueueReadBuffer(queue, c->cuq.mem, CL_TRUE, c->cuq.lo, n * 4, cu, num_events,
                                     wait_list, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, c->cuk.mem, CL_TRUE, c->cuk.lo, c->batch * 4, lens,
                                  num_events, wait_list, NULL);
    if (err == CL_SUCCESS && c->bt.hi > c->bt.lo)
        err = clEnqueueReadBuffer(queue, c->bt.mem, CL_TRUE, c->bt.lo, c->bt.hi - c->bt.lo, bt,
                                  num_events, wait_list, NULL);
    if (err != CL_SUCCESS) {
        st = oclf_fail_cl(ctx, err, "reading cu_seqlens_q, seq_lens and block_tables");
        goto done;
    }
    if ((st = oclf_attn_check_offsets(ctx, c, "cu_seqlens_q", cu, c->max_sq, c->tq)))
        goto done;
    int32_t *cuk = cu + n;
    cuk[0] = 0;
    for (size_t b = 0; b < c->batch; b++) {
        if (lens[b] < 0 || (size_t)lens[b] > c->tk) {
            st = oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                           "attention_paged: sequence %zu has seq_lens %d, outside 0..%zu "
                           "(max_blocks x block_size)",
                           b, (int)lens[b], c->tk);
            goto done;
        }
        if ((int64_t)cuk[b] + lens[b] > INT_MAX) {
            st = oclf_fail(ctx, OCLF_UNSUPPORTED, "attention_paged: 2^31 keys or more in all");
            goto done;
        }
        cuk[b + 1] = cuk[b] + lens[b];
    }
    const size_t total = (size_t)cuk[c->batch];
    if (total && !(*slots = malloc(total * sizeof **slots))) {
        st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "attention_paged: out of host memory");
        goto done;
    }
    for (size_t b = 0; b < c->batch; b++)
        for (size_t blk = 0; blk * c->bs < (size_t)lens[b]; blk++) {
            const int32_t id = bt[b * c->bts + blk];
            if (id < 0 || (size_t)id >= c->nblk) {
                st = oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                               "attention_paged: sequence %zu reads block_tables[%zu][%zu] = %d, "
                               "outside the cache's %zu blocks",
                               b, b, blk, (int)id, c->nblk);
                goto done;
            }
            for (size_t j = blk * c->bs; j < (blk + 1) * c->bs && j < (size_t)lens[b]; j++)
                (*slots)[(size_t)cuk[b] + j] = (int64_t)id * (int64_t)c->bs + (int64_t)(j % c->bs);
        }
done:
    if (st != OCLF_SUCCESS) {
        free(*slots);
        *slots = NULL;
    }
    free(lens);
    free(bt);
    return st;
}

/* The paged unfused path: every sequence's keys gathered from the cache
 * into packed f32 K and V (in sequence order, so the cumulative lengths
 * index them as cu_seqlens_k would), then the contiguous unfused path. */
static oclf_status run_paged_unfused(oclf_context *ctx, oclf_chain *ch, const attn_call *c,
                                     const int32_t *cu, const int64_t *slots)
{
    const size_t total = (size_t)cu[2 * c->batch + 1], w = c->hk * c->d;
    if (total == 0)
        return oclf_attn_run_unfused(ctx, ch, c, cu, (gemm_view[2]){{c->k.op.mem, 0, w, c->d},
                                     {c->v.op.mem, 0, w, c->d}});
    oclf_program *prog;
    oclf_status st = oclf_attn_program(ctx, c->dtype, "-DOCLF_UNFUSED=1", &prog);
    if (st != OCLF_SUCCESS)
        return st;
    cl_mem ms = NULL, kf = NULL, vf = NULL;
    if (total * w * 4 > ctx->info.max_alloc) {
        st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                       "attention_paged: the gathered keys (%zu x %zu floats) exceed the device's "
                       "largest allocation",
                       total, w);
        goto done;
    }
    if ((st = oclf_temp_buffer(ctx, total * 8, &ms)) ||
        (st = oclf_temp_buffer(ctx, total * w * 4, &kf)) ||
        (st = oclf_temp_buffer(ctx, total * w * 4, &vf)))
        goto done;
    /* blocking: `slots` is the caller's host memory */
    cl_int err = clEnqueueWriteBuffer(ch->queue, ms, CL_TRUE, 0, total * 8, slots,
                                      ch->prev ? 1 : ch->num_events,
                                      ch->prev ? &ch->prev : ch->wait_list, NULL);
    if (err != CL_SUCCESS) {
        st = oclf_fail_cl(ctx, err, "clEnqueueWriteBuffer(attention_paged slots)");
        goto done;
    }
    cl_uint heads = (cl_uint)c->hk, d32 = (cl_uint)c->d;
    cl_ulong tokens = total;
    for (int i = 0; i < 2; i++) {
        const attn_heads *h = i ? &c->v : &c->k;
        cl_ulong so = h->op.offset;
        cl_mem dst = i ? vf : kf;
        oclf_arg a[] = {OCLF_ARG(h->op.mem), OCLF_ARG(so),     OCLF_ARG(heads), OCLF_ARG(d32),
                        OCLF_ARG(ms),        OCLF_ARG(tokens), OCLF_ARG(dst)};
        if ((st = oclf_chain_launch(ch, prog, "attn_gather", a, OCLF_NARGS(a),
                                    oclf_round_up(total * w, ATTN_ELEM_WGS), ATTN_ELEM_WGS)))
            goto done;
    }
    st = oclf_attn_run_unfused(ctx, ch, c, cu, (gemm_view[2]){{kf, 0, w, c->d}, {vf, 0, w, c->d}});
done:;
    cl_mem all[] = {ms, kf, vf};
    for (int i = 0; i < 3; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    return st;
}

oclf_status oclf_attention_paged(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                 size_t batch, size_t total_q, size_t max_seqlen_q,
                                 size_t max_blocks, oclf_buf cu_seqlens_q, oclf_buf seq_lens,
                                 oclf_buf block_tables, oclf_heads q, const oclf_kv_cache *cache,
                                 oclf_heads o, const oclf_attention_options *options,
                                 const oclf_choice *choice, cl_uint num_events,
                                 const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    attn_call c;
    if ((st = oclf_check_call(ctx, "attention_paged", queue, num_events, wait_list, dtype,
                              event)) ||
        (st = check_paged_args(ctx, dtype, batch, total_q, max_seqlen_q, cu_seqlens_q, seq_lens,
                               block_tables, max_blocks, q, cache, o, options, &c)))
        return st;
    oclf_shape shape = {{total_q, c.hq, c.hk, c.d}};
    oclf_resolved r;
    attn_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_ATTENTION_PAGED, &oclf_attention_hooks, dtype,
                                     &shape, choice, &r)))
        return st;
    if (r.path == OCLF_PATH_FUSED) {
        if (r.has_cfg)
            memcpy(&cfg, &r.cfg, sizeof cfg);
        else if ((st = oclf_attn_config(ctx, dtype, &r.params, c.d, 1, r.wgs_default, &cfg)))
            return st;
        if ((st = oclf_attn_mma_fallback(ctx, &c, &cfg)))
            return st;
    }
    if (batch == 0 || total_q == 0 || max_seqlen_q == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    int32_t *cu = NULL;
    int64_t *slots = NULL;
    if (ctx->validate || r.path == OCLF_PATH_UNFUSED) {
        if (!(cu = malloc(2 * (batch + 1) * sizeof *cu)))
            return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "attention_paged: out of host memory");
        if ((st = read_paged(ctx, queue, &c, num_events, wait_list, cu, &slots))) {
            free(cu);
            return st;
        }
    }
    if (r.path == OCLF_PATH_FUSED) {
        free(cu);
        free(slots);
        return oclf_attn_run_fused(ctx, queue, &c, &cfg, num_events, wait_list, event);
    }
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = run_paged_unfused(ctx, &ch, &c, cu, slots);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    free(cu);
    free(slots);
    return st;
}
