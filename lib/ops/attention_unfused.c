/* Attention: the unfused path (the GEMM library's Sgemm between the
 * scores' kernels), shared by both entry points. */
#include "attention.h"

#include <stdio.h>
#include <string.h>

/* Scores in one unfused tile: 16 MiB of f32. */
#define ATTN_TILE_SCORES ((size_t)1 << 22)

static oclf_status gemm(oclf_chain *ch, int trans_b, size_t m, size_t n, size_t kd, float alpha,
                        cl_mem a, size_t ao, size_t lda, cl_mem b, size_t bo, size_t ldb,
                        cl_mem cm, size_t ldc)
{
    return oclf_chain_sgemm(ch, "attention", trans_b, m, n, kd, alpha, a, ao, lda, b, bo, ldb, cm,
                            0, ldc);
}

static oclf_status widen(oclf_chain *ch, oclf_program *prog, const attn_heads *h, size_t heads,
                         size_t d, size_t tokens, cl_mem dst, gemm_view *out)
{
    cl_ulong so = h->op.offset, sts = h->op.stride, shs = h->hs, t = tokens;
    cl_uint nh = (cl_uint)heads, d32 = (cl_uint)d;
    oclf_arg a[] = {OCLF_ARG(h->op.mem), OCLF_ARG(so), OCLF_ARG(sts), OCLF_ARG(shs),
                    OCLF_ARG(nh),        OCLF_ARG(d32), OCLF_ARG(t),  OCLF_ARG(dst)};
    *out = (gemm_view){dst, 0, heads * d, d};
    return oclf_chain_launch(ch, prog, "attn_widen", a, OCLF_NARGS(a),
                             oclf_round_up(tokens * heads * d, ATTN_ELEM_WGS), ATTN_ELEM_WGS);
}

/* `kv`: the keys and values already as packed f32 (the paged path's
 * gathered copies), or NULL to read k and v (widened when 16-bit). */
oclf_status oclf_attn_run_unfused(oclf_context *ctx, oclf_chain *ch, const attn_call *c,
                                  const int32_t *cu, const gemm_view *kv)
{
    oclf_program *prog;
    oclf_status st = oclf_attn_program(ctx, c->dtype, "-DOCLF_UNFUSED=1", &prog);
    if (st != OCLF_SUCCESS)
        return st;
    const int32_t *cuq = cu, *cuk = cu + c->batch + 1;
    size_t max_sk = 0, max_sq = 0;
    for (size_t b = 0; b < c->batch; b++) {
        max_sk = (size_t)(cuk[b + 1] - cuk[b]) > max_sk ? (size_t)(cuk[b + 1] - cuk[b]) : max_sk;
        max_sq = (size_t)(cuq[b + 1] - cuq[b]) > max_sq ? (size_t)(cuq[b + 1] - cuq[b]) : max_sq;
    }
    /* A tile of queries whose scores fit the bound (one row at least). */
    size_t tile = max_sk ? ATTN_TILE_SCORES / max_sk : max_sq;
    tile = tile < 1 ? 1 : tile > max_sq ? max_sq : tile;
    const size_t cap = (size_t)ctx->info.max_alloc;
    const int conv = c->dtype != OCLF_F32;
    cl_mem qf = NULL, kf = NULL, vf = NULL, sc = NULL, ot = NULL;
    if (tile * (max_sk ? max_sk : 1) * 4 > cap || (conv && c->tq * c->hq * c->d * 4 > cap) ||
        (conv && !kv && c->tk * c->hk * c->d * 4 > cap)) {
        st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                       "%s: an unfused temporary exceeds the device's largest allocation", c->op);
        goto done;
    }
    gemm_view gq = {c->q.op.mem, c->q.op.offset, c->q.op.stride, c->q.hs};
    gemm_view gk = {c->k.op.mem, c->k.op.offset, c->k.op.stride, c->k.hs};
    gemm_view gv = {c->v.op.mem, c->v.op.offset, c->v.op.stride, c->v.hs};
    if (kv)
        gk = kv[0], gv = kv[1];
    const float zero = 0.0f;
    if ((st = oclf_temp_buffer(ctx, tile * (max_sk ? max_sk : 1) * 4, &sc)) ||
        (st = oclf_temp_buffer(ctx, tile * c->d * 4, &ot)))
        goto done;
    /* The GEMMs compute alpha A B + 0 C: C starts cleared so that no stale
     * NaN of a fresh allocation can survive a multiplication by 0. */
    for (int i = 0; i < 2; i++) {
        cl_event ev = NULL;
        cl_int err = clEnqueueFillBuffer(ch->queue, i ? ot : sc, &zero, sizeof zero, 0,
                                         i ? tile * c->d * 4 : tile * (max_sk ? max_sk : 1) * 4,
                                         ch->prev ? 1 : ch->num_events,
                                         ch->prev ? &ch->prev : ch->wait_list, &ev);
        if (err != CL_SUCCESS) {
            st = oclf_fail_cl(ctx, err, "clEnqueueFillBuffer(attention tile)");
            goto done;
        }
        if (ch->prev)
            clReleaseEvent(ch->prev);
        ch->prev = ev;
    }
    /* (paged: every key is in the gathered copies, and none means no GEMM) */
    if (conv && kv && max_sk > 0) {
        if ((st = oclf_temp_buffer(ctx, c->tq * c->hq * c->d * 4, &qf)) ||
            (st = widen(ch, prog, &c->q, c->hq, c->d, c->tq, qf, &gq)))
            goto done;
    } else if (conv && c->tk > 0) {
        if ((st = oclf_temp_buffer(ctx, c->tq * c->hq * c->d * 4, &qf)) ||
            (st = oclf_temp_buffer(ctx, c->tk * c->hk * c->d * 4, &kf)) ||
            (st = oclf_temp_buffer(ctx, c->tk * c->hk * c->d * 4, &vf)) ||
            (st = widen(ch, prog, &c->q, c->hq, c->d, c->tq, qf, &gq)) ||
            (st = widen(ch, prog, &c->k, c->hk, c->d, c->tk, kf, &gk)) ||
            (st = widen(ch, prog, &c->v, c->hk, c->d, c->tk, vf, &gv)))
            goto done;
    }
    const size_t g = c->hq / c->hk;
    for (size_t b = 0; b < c->batch; b++) {
        const size_t q0 = (size_t)cuq[b], sq = (size_t)(cuq[b + 1] - cuq[b]);
        const size_t k0 = (size_t)cuk[b], sk = (size_t)(cuk[b + 1] - cuk[b]);
        for (size_t h = 0; h < c->hq; h++) {
            const size_t kh = h / g;
            for (size_t i0 = 0; i0 < sq; i0 += tile) {
                const size_t rows = sq - i0 < tile ? sq - i0 : tile, t0 = q0 + i0;
                if (sk && (st = gemm(ch, 1, rows, sk, c->d, c->scale, gq.mem,
                                     gq.off + t0 * gq.ts + h * gq.hs, gq.ts, gk.mem,
                                     gk.off + k0 * gk.ts + kh * gk.hs, gk.ts, sc, sk)))
                    goto done;
                cl_uint rows32 = (cl_uint)rows, sk32 = (cl_uint)sk;
                cl_long i0l = (cl_long)i0, shift = (cl_long)sk - (cl_long)sq;
                cl_long left = c->left, right = c->right;
                cl_mem sl = c->has_alibi ? c->slopes.mem : sc, si = c->has_sinks ? c->sinks.mem : sc;
                cl_mem lm = c->has_lse ? c->lse.mem : sc;
                cl_ulong sli = c->slopes.offset + h, sii = c->sinks.offset + h;
                cl_ulong lsi = c->lse.offset + h * c->lse.stride + t0;
                cl_uint ha = (cl_uint)c->has_alibi, hs = (cl_uint)c->has_sinks;
                cl_uint hl = (cl_uint)c->has_lse, head = (cl_uint)h, hd = (cl_uint)c->has_drop;
                cl_ulong t0l = t0, seed = c->seed, doff = c->doff;
                oclf_arg a[] = {OCLF_ARG(sc),   OCLF_ARG(rows32), OCLF_ARG(sk32), OCLF_ARG(i0l),
                                OCLF_ARG(shift), OCLF_ARG(c->cap), OCLF_ARG(left), OCLF_ARG(right),
                                OCLF_ARG(sl),   OCLF_ARG(sli),    OCLF_ARG(ha),   OCLF_ARG(si),
                                OCLF_ARG(sii),  OCLF_ARG(hs),     OCLF_ARG(lm),   OCLF_ARG(lsi),
                                OCLF_ARG(hl),   OCLF_ARG(t0l),    OCLF_ARG(head), OCLF_ARG(c->drop_p),
                                OCLF_ARG(seed), OCLF_ARG(doff),   OCLF_ARG(hd)};
                if ((st = oclf_chain_launch(ch, prog, "attn_softmax", a, OCLF_NARGS(a),
                                            oclf_round_up(rows, ATTN_ELEM_WGS), ATTN_ELEM_WGS)))
                    goto done;
                if (sk && (st = gemm(ch, 0, rows, c->d, sk, 1.0f, sc, 0, sk, gv.mem,
                                     gv.off + k0 * gv.ts + kh * gv.hs, gv.ts, ot, c->d)))
                    goto done;
                cl_uint d32 = (cl_uint)c->d, zero_out = sk == 0;
                cl_ulong oo = c->o.op.offset + t0 * c->o.op.stride + h * c->o.hs;
                cl_ulong ots = c->o.op.stride;
                oclf_arg s[] = {OCLF_ARG(ot),       OCLF_ARG(rows32), OCLF_ARG(d32),
                                OCLF_ARG(zero_out), OCLF_ARG(c->o.op.mem), OCLF_ARG(oo),
                                OCLF_ARG(ots)};
                if ((st = oclf_chain_launch(ch, prog, "attn_store", s, OCLF_NARGS(s),
                                            oclf_round_up(rows * c->d, ATTN_ELEM_WGS),
                                            ATTN_ELEM_WGS)))
                    goto done;
            }
        }
    }
done:;
    cl_mem all[] = {qf, kf, vf, sc, ot};
    for (int i = 0; i < 5; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* freed by OpenCL once the launches finish */
    return st;
}

