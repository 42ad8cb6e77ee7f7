/* L2 top-k: the unfused path, norms and a GEMM per database tile. */
#include "l2topk.h"

#include <clblast_c.h>

static oclf_status gemm_fail(const oclf_context *ctx, CLBlastStatusCode s)
{
    return oclf_fail(ctx, s == CLBlastOpenCLOutOfResources || s == CLBlastOpenCLOutOfHostMemory ||
                                  s == CLBlastTempBufferAllocFailure
                              ? OCLF_OUT_OF_RESOURCES
                              : OCLF_OPENCL_ERROR,
                     "l2_topk: the GEMM library's Sgemm failed with status %d", (int)s);
}

/* -2 Q X_tile^T through the GEMM library. The tile is cleared after the
 * previous launch, and the GEMM, which takes no wait list, is ordered
 * after the clear by a barrier on the clear's event: on an out-of-order
 * queue nothing else orders the three. */
static oclf_status gemm_launch(oclf_chain *ch, size_t m, size_t n, size_t kd, cl_mem a,
                               size_t ao, size_t lda, cl_mem b, size_t bo, size_t ldb, cl_mem cm)
{
    /* C is cleared first: the GEMM computes alpha A B + beta C and 0 * NaN
     * from a previous tile would survive beta = 0 in some implementations. */
    const float zero = 0.0f;
    cl_event cleared = NULL;
    cl_int err = clEnqueueFillBuffer(ch->queue, cm, &zero, sizeof zero, 0, m * n * sizeof(float),
                                     ch->prev ? 1 : ch->num_events,
                                     ch->prev ? &ch->prev : ch->wait_list, &cleared);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ch->ctx, err, "clEnqueueFillBuffer(distance tile)");
    err = clEnqueueBarrierWithWaitList(ch->queue, 1, &cleared, NULL);
    clReleaseEvent(cleared);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ch->ctx, err, "clEnqueueBarrierWithWaitList");
    cl_event ev = NULL;
    cl_command_queue qu = ch->queue;
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes,
                                       m, n, kd, -2.0f, a, ao, lda, b, bo, ldb, 0.0f, cm, 0, n,
                                       &qu, &ev);
    if (s != CLBlastSuccess)
        return gemm_fail(ch->ctx, s);
    atomic_fetch_add(&ch->ctx->n_enqueued, 1);
    if (ch->prev)
        clReleaseEvent(ch->prev);
    ch->prev = ev;
    return OCLF_SUCCESS;
}

oclf_status oclf_l2_run_unfused(oclf_context *ctx, oclf_chain *ch, oclf_program *prog,
                               const l2_call *c, const l2_cfg *cfg)
{
    const int conv = c->dtype != OCLF_F32;
    size_t slices = cfg->slices ? (size_t)cfg->slices : (size_t)ctx->info.compute_units * 2;
    if (slices < 1)
        slices = 1;
    const size_t bound = c->bound, cap = oclf_l2_alloc_cap(ctx, bound);
    /* Bytes the bound must cover for a chunk of cq queries and a tile of t
     * rows: heaps, query norms, the GEMM's A copy, and per row of the tile
     * the distance column (twice), the norm, and the X row (twice, plus the
     * f32 conversion for f16/bf16). */
    size_t per_row_x = 4 + 4 * c->d * (conv ? 3 : 2);
    {
        /* Slices are parallelism, not a contract: where one query's lists
         * and a minimal tile would not fit the caller's bound (a GPU's two
         * slices per compute unit are 264 lists on 132 units), fewer
         * slices, each scanning more of the tile. */
        const size_t t_min = c->n < 1024 ? c->n : 1024;
        while (slices > 1 && slices * c->k * HEAP_ENTRY_BYTES + 4 + c->d * 8 +
                                     t_min * (per_row_x + 8) > bound)
            slices = (slices + 1) / 2;
    }
    size_t cq = c->nq;
    for (;;) {
        size_t fixed = cq * slices * c->k * HEAP_ENTRY_BYTES + cq * 4 + cq * c->d * 4 * 2;
        size_t t_min = c->n < 1024 ? c->n : 1024;
        if (fixed + t_min * (per_row_x + 8 * cq) <= bound || cq == 1)
            break;
        cq = (cq + 1) / 2;
    }
    size_t fixed = cq * slices * c->k * HEAP_ENTRY_BYTES + cq * 4 + cq * c->d * 4 * 2;
    size_t tile = 0;
    if (fixed < bound)
        tile = (bound - fixed) / (per_row_x + 8 * cq);
    if (tile > cap / (cq * 4))
        tile = cap / (cq * 4);
    if (conv && tile > cap / (c->d * 4))
        tile = cap / (c->d * 4);
    if (cfg->tile && (size_t)cfg->tile < tile)
        tile = (size_t)cfg->tile;
    if (tile > c->n)
        tile = c->n;
    if ((c->n > 0 && tile == 0) || cq * slices * c->k * HEAP_ENTRY_BYTES > cap)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                         "l2_topk: max_temp_bytes = %zu cannot hold one query's %zu x %zu "
                         "candidates and a distance tile",
                         bound, slices, c->k);
    if (slices > tile && tile > 0)
        slices = tile;

    cl_mem hk = NULL, hi = NULL, qn = NULL, xn = NULL, cm = NULL, xf = NULL;
    oclf_status st;
    if ((st = oclf_temp_buffer(ctx, cq * slices * c->k * 4, &hk)) ||
        (st = oclf_temp_buffer(ctx, cq * slices * c->k * 8, &hi)) ||
        (st = oclf_temp_buffer(ctx, c->nq * 4, &qn)) ||
        (st = oclf_temp_buffer(ctx, cq * tile * 4, &cm)) ||
        (!c->has_xn && (st = oclf_temp_buffer(ctx, tile * 4, &xn))) ||
        (conv && (st = oclf_temp_buffer(ctx, tile * c->d * 4, &xf))))
        goto done;
    cl_uint d = (cl_uint)c->d, k = (cl_uint)c->k;
    size_t tile_wgs;
    if ((st = oclf_l2_group(ctx, prog, "l2_tile_topk", L2_TILE_WGS, 0, &tile_wgs)))
        goto done;
    {
        cl_ulong qo = c->q.offset, qs = c->q.stride, rows = c->nq;
        oclf_arg a[] = {OCLF_ARG(c->q.mem), OCLF_ARG(qo), OCLF_ARG(qs), OCLF_ARG(rows),
                        OCLF_ARG(d), OCLF_ARG(qn)};
        if (c->nq && (st = oclf_chain_launch(ch, prog, "l2_q_norms", a, OCLF_NARGS(a),
                                             oclf_round_up(c->nq, L2_NORM_WGS), L2_NORM_WGS)))
            goto done;
    }
    for (size_t q0 = 0; q0 < c->nq; q0 += cq) {
        const size_t qc = c->nq - q0 < cq ? c->nq - q0 : cq;
        cl_uint ns = tile ? (cl_uint)slices : 0;
        for (size_t t0 = 0; t0 < c->n; t0 += tile) {
            const size_t tc = c->n - t0 < tile ? c->n - t0 : tile;
            cl_ulong xo = c->x.offset, xs = c->x.stride, r0 = t0, rows = tc;
            if (conv) {
                oclf_arg a[] = {OCLF_ARG(c->x.mem), OCLF_ARG(xo), OCLF_ARG(xs), OCLF_ARG(r0),
                                OCLF_ARG(rows), OCLF_ARG(d), OCLF_ARG(xf)};
                if ((st = oclf_chain_launch(ch, prog, "l2_to_f32", a, OCLF_NARGS(a),
                                            oclf_round_up(tc * c->d, L2_NORM_WGS), L2_NORM_WGS)))
                    goto done;
            }
            if (!c->has_xn) {
                oclf_arg a[] = {OCLF_ARG(c->x.mem), OCLF_ARG(xo), OCLF_ARG(xs), OCLF_ARG(r0),
                                OCLF_ARG(rows), OCLF_ARG(d), OCLF_ARG(xn)};
                if ((st = oclf_chain_launch(ch, prog, "l2_x_norms", a, OCLF_NARGS(a),
                                            oclf_round_up(tc, L2_NORM_WGS), L2_NORM_WGS)))
                    goto done;
            }
            if ((st = gemm_launch(ch, qc, tc, c->d, c->q.mem, c->q.offset + q0 * c->q.stride,
                                  c->q.stride, conv ? xf : c->x.mem,
                                  conv ? 0 : c->x.offset + t0 * c->x.stride,
                                  conv ? c->d : c->x.stride, cm)))
                goto done;
            cl_ulong cols = tc, ct0 = t0, nqc = qc, per = (tc + slices - 1) / slices;
            cl_ulong xno = c->has_xn ? c->xn.offset + t0 : 0;
            cl_uint first = t0 == 0;
            cl_mem xnm = c->has_xn ? c->xn.mem : xn;
            cl_ulong qno = q0; /* the query norms of this chunk */
            cl_mem am = c->has_allow ? c->allow.mem : cm; /* never read without has_allow */
            cl_ulong ao = c->allow.offset;
            cl_uint has_allow = (cl_uint)c->has_allow;
            oclf_arg a[] = {OCLF_ARG(cm),  OCLF_ARG(cols), OCLF_ARG(qn), OCLF_ARG(qno), OCLF_ARG(xnm),
                            OCLF_ARG(xno), OCLF_ARG(ct0),  OCLF_ARG(nqc),   OCLF_ARG(ns),
                            OCLF_ARG(per), OCLF_ARG(k),    OCLF_ARG(first), OCLF_ARG(hk),
                            OCLF_ARG(hi),  OCLF_ARG(am),   OCLF_ARG(ao),    OCLF_ARG(has_allow)};
            if ((st = oclf_chain_launch(ch, prog, "l2_tile_topk", a, OCLF_NARGS(a),
                                        oclf_round_up(qc * slices, tile_wgs), tile_wgs)))
                goto done;
        }
        if ((st = oclf_l2_merge_launch(ch, prog, hk, hi, c, q0, qc, ns, cfg)))
            goto done;
    }
done:;
    cl_mem all[] = {hk, hi, qn, xn, cm, xf};
    for (int i = 0; i < 6; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* freed by OpenCL once the launches finish */
    return st;
}
