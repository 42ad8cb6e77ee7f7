/* L2 top-k: the fused path (scan, merge) and the merge launch both paths end in. */
#include "l2topk.h"

/* Largest single allocation the bound and the device allow. */
size_t oclf_l2_alloc_cap(const oclf_context *ctx, size_t bound)
{
    size_t cap = bound;
    if (ctx->info.max_alloc && ctx->info.max_alloc < cap)
        cap = (size_t)ctx->info.max_alloc;
    return cap;
}

/* Queries per chunk so that chunk x slices x k list entries of `entry`
 * bytes fit `budget`. */
static size_t heap_chunk(size_t nq, size_t slices, size_t k, size_t entry, size_t budget)
{
    size_t per_query = slices * k * entry;
    size_t c = budget / per_query;
    return c < nq ? c : nq;
}

oclf_status oclf_l2_merge_launch(oclf_chain *ch, oclf_program *prog, cl_mem hk, cl_mem hi,
                                 const l2_call *c, size_t q0, size_t qn, cl_uint nslices,
                                 const l2_cfg *cfg)
{
    cl_ulong nq = qn, dofs = c->dist.offset + q0 * c->dist.stride, ds = c->dist.stride;
    cl_ulong iofs = c->idx.offset + q0 * c->idx.stride, is = c->idx.stride;
    cl_uint k = (cl_uint)c->k;
    size_t wgs;
    oclf_status st;
    if (cfg->topk) {
        /* a work-group per query over its slices' sorted lists */
        cl_uint cap = (cl_uint)cfg->merge_cap;
        if ((st = oclf_l2_group(ch->ctx, prog, "l2_merge_lists", L2_MERGE_WGS,
                                L2_MERGE_LISTS_WGS, &wgs)))
            return st;
        oclf_arg a[] = {OCLF_ARG(hi),   OCLF_ARG(nslices),    OCLF_ARG(k),
                        OCLF_ARG(cap),  OCLF_ARG(c->dist.mem), OCLF_ARG(dofs),
                        OCLF_ARG(ds),   OCLF_ARG(c->idx.mem), OCLF_ARG(iofs),
                        OCLF_ARG(is),   OCLF_ARG_LOCAL((c->k + cfg->merge_cap) * 8),
                        OCLF_ARG_LOCAL(4)};
        return oclf_chain_launch(ch, prog, "l2_merge_lists", a, OCLF_NARGS(a), qn * wgs,
                                 wgs);
    }
    if ((st = oclf_l2_group(ch->ctx, prog, "l2_merge", L2_MERGE_WGS, 0, &wgs)))
        return st;
    oclf_arg a[] = {OCLF_ARG(hk),         OCLF_ARG(hi),   OCLF_ARG(nq),         OCLF_ARG(nslices),
                    OCLF_ARG(k),          OCLF_ARG(c->dist.mem), OCLF_ARG(dofs), OCLF_ARG(ds),
                    OCLF_ARG(c->idx.mem), OCLF_ARG(iofs), OCLF_ARG(is)};
    return oclf_chain_launch(ch, prog, "l2_merge", a, OCLF_NARGS(a),
                             oclf_round_up(qn, wgs), wgs);
}

oclf_status oclf_l2_run_fused(oclf_context *ctx, oclf_chain *ch, oclf_program *prog,
                             const l2_call *c, const l2_cfg *cfg)
{
    const size_t nqb = (size_t)(cfg->qg / cfg->qb);
    const size_t tr = (size_t)(cfg->wgs / (int)nqb) * (size_t)cfg->rb;
    const size_t ngq_all = (c->nq + (size_t)cfg->qg - 1) / (size_t)cfg->qg;
    /* TOPK 1 packs key and row in 8 bytes (hi only); the heaps take 12 */
    const size_t entry = cfg->topk ? 8 : HEAP_ENTRY_BYTES;
    size_t slices = (size_t)cfg->slices;
    if (c->n == 0) {
        slices = 0;
    } else {
        if (slices == 0) {
            /* Enough work-groups to load-balance every compute unit, but
             * no slice shorter than one tile. */
            size_t want = (size_t)ctx->info.compute_units * 8;
            slices = (want + ngq_all - 1) / ngq_all;
            size_t tiles = (c->n + tr - 1) / tr;
            if (slices > tiles)
                slices = tiles;
            if (slices < 1)
                slices = 1;
            /* fewer slices rather than chunking the queries */
            size_t fit = oclf_l2_alloc_cap(ctx, c->bound) / (c->nq * c->k * entry + 1);
            if (slices > fit)
                slices = fit ? fit : 1;
            /* TOPK 1: the merge's work-group reads slices x k entries */
            if (cfg->topk && slices > L2_MERGE_ENTRIES / c->k)
                slices = L2_MERGE_ENTRIES / c->k > 1 ? L2_MERGE_ENTRIES / c->k : 1;
        }
        if (slices > c->n)
            slices = c->n;
    }
    /* rows per slice: whole tiles, so only the last tile of a slice is short */
    size_t per = 0;
    if (slices) {
        per = oclf_round_up((c->n + slices - 1) / slices, tr);
        slices = (c->n + per - 1) / per;
    }
    size_t heap_slices = slices ? slices : 1;
    size_t chunk =
        heap_chunk(c->nq, heap_slices, c->k, entry, oclf_l2_alloc_cap(ctx, c->bound) / 8 * 8);
    if (chunk == 0)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                         "l2_topk: max_temp_bytes = %zu cannot hold the %zu x %zu candidates of "
                         "one query (%zu bytes each)",
                         c->bound, heap_slices, c->k, entry);
    cl_mem hk = NULL, hi = NULL;
    oclf_status st;
    if ((!cfg->topk && (st = oclf_temp_buffer(ctx, chunk * heap_slices * c->k * 4, &hk))) ||
        (st = oclf_temp_buffer(ctx, chunk * heap_slices * c->k * 8, &hi)))
        goto done;
    for (size_t q0 = 0; q0 < c->nq; q0 += chunk) {
        const size_t qn = c->nq - q0 < chunk ? c->nq - q0 : chunk;
        if (slices) {
            const size_t ngq = (qn + (size_t)cfg->qg - 1) / (size_t)cfg->qg;
            cl_ulong qo = c->q.offset + q0 * c->q.stride, qs = c->q.stride;
            cl_ulong xo = c->x.offset, xs = c->x.stride, xno = c->xn.offset;
            cl_ulong nq = qn, n = c->n, cper = per;
            cl_uint d = (cl_uint)c->d, k = (cl_uint)c->k, qg = (cl_uint)cfg->qg;
            cl_uint ns = (cl_uint)slices, has_xn = (cl_uint)c->has_xn;
            cl_uint cap = (cl_uint)cfg->scan_cap;
            cl_mem hkm = cfg->topk ? hi : hk; /* TOPK 1 writes hi only */
            cl_mem xn = c->has_xn ? c->xn.mem : c->x.mem; /* never read without has_xn */
            cl_mem am = c->has_allow ? c->allow.mem : c->x.mem; /* likewise */
            cl_ulong ao = c->allow.offset;
            cl_uint has_allow = (cl_uint)c->has_allow;
            oclf_arg a[] = {OCLF_ARG(c->q.mem), OCLF_ARG(qo),  OCLF_ARG(qs),
                            OCLF_ARG(c->x.mem), OCLF_ARG(xo),  OCLF_ARG(xs),
                            OCLF_ARG(xn),       OCLF_ARG(xno), OCLF_ARG(has_xn),
                            OCLF_ARG(am),       OCLF_ARG(ao),  OCLF_ARG(has_allow),
                            OCLF_ARG(hkm),      OCLF_ARG(hi),  OCLF_ARG(nq),
                            OCLF_ARG(n),        OCLF_ARG(d),   OCLF_ARG(k),
                            OCLF_ARG(qg),       OCLF_ARG(cper), OCLF_ARG(ns),
                            OCLF_ARG_LOCAL((size_t)cfg->qg * tr * 4),
                            OCLF_ARG_LOCAL(tr * 4),
                            OCLF_ARG_LOCAL((size_t)cfg->qg * 4),
                            /* the queries' copy; one float when unused */
                            OCLF_ARG_LOCAL(cfg->qlocal ? (size_t)cfg->qg * c->d * 4 : 4),
                            /* the rows' chunk; one float when unused */
                            OCLF_ARG_LOCAL(cfg->xstage ? tr * ((size_t)cfg->xstage + 1) * 4 : 4),
                            /* TOPK 1: the lists and their counts; else unused */
                            OCLF_ARG_LOCAL(cfg->topk ? (size_t)cfg->qg * (c->k + cap) * 8 : 8),
                            OCLF_ARG_LOCAL((size_t)cfg->qg * 4), OCLF_ARG(cap)};
            if ((st = oclf_chain_launch(ch, prog, "l2_scan", a, OCLF_NARGS(a),
                                        ngq * slices * (size_t)cfg->wgs, (size_t)cfg->wgs)))
                goto done;
        }
        if ((st = oclf_l2_merge_launch(ch, prog, hk, hi, c, q0, qn, (cl_uint)slices, cfg)))
            goto done;
    }
done:
    if (hk)
        clReleaseMemObject(hk);
    if (hi)
        clReleaseMemObject(hi);
    return st;
}
