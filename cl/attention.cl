/*
 * Attention over sequences packed along tokens (FlashAttention's varlen
 * layout), with contiguous K and V.
 *
 * Fused (attention_fused): a work-group takes OCLF_WGS rows of one KV head
 * of one sequence, a row being a (query, query head of the KV group) pair,
 * so the Hq / Hk heads that read the same KV head share every K/V block the
 * group stages. Keys go through local memory OCLF_BK at a time, widened to
 * f32 and padded to OCLF_DP (head_dim rounded up to OCLF_VEC) with zeros,
 * so the dot products and the accumulator update are whole vectors with no
 * tail. Each row keeps its query, its accumulator and the running max and
 * sum in private memory (online softmax); a block rescales the accumulator
 * once, not once per key.
 *
 * With OCLF_ACC 1 the rows' queries, accumulators and block scores sit in
 * local memory after the K/V blocks instead.
 *
 * With OCLF_PAGED 1 the keys come from a paged cache [blocks, block_size,
 * Hk, D]: `cuk` holds each sequence's key count (seq_lens) and key j of
 * sequence b lives in block block_tables[b][j / block_size]. The group
 * resolves a block's token addresses once into local memory, so the
 * staging loop reads them instead of dividing per element; a block id
 * outside the cache is never read (its keys stage as zeros).
 *
 * Split KV (nparts > 1): the group of partition p walks only the keys
 * [p part, (p + 1) part) and writes each row's normalized partial output
 * and its LSE (without the sinks) to fp32 temporaries; attention_merge
 * then weighs the partitions by their LSEs and adds the sinks once.
 *
 * Unfused: attn_widen (16-bit heads to packed f32 copies for the GEMM
 * library), attn_softmax (a tile of scores, scaled by the GEMM, to
 * probabilities in place, with softcap, ALiBi, mask, sinks, LSE and
 * dropout) and
 * attn_store (an f32 output tile rounded into o).
 *
 * Dropout (has_drop): attn_keep decides each (token, head, key) from
 * Philox4x32-10 as the header defines it; a row's sum and LSE count every
 * probability, its output only the kept ones, scaled by 1 / (1 - p).
 *
 * Mask bounds arrive resolved: `left` and `right` are the window's sides
 * with causal folded in (right 0), -1 for an unbounded side; query i of a
 * sequence with Sq queries and Sk keys keeps the keys j with
 * i + Sk - Sq - left <= j <= i + Sk - Sq + right.
 */
#ifndef OCLF_BK
#define OCLF_BK 16
#endif
#ifndef OCLF_DP
#define OCLF_DP OCLF_VEC
#endif
/* Where each row's query and accumulator live: 0 private memory (a CPU,
 * where it is the work-item's own cache-resident stack), 1 local memory
 * (a GPU, whose registers cannot hold two rows of 128 or 256 floats per
 * work-item without spilling), one row per work-item at an odd stride so
 * that neighbouring work-items start in different banks. */
#ifndef OCLF_ACC
#define OCLF_ACC 0
#endif
#ifndef OCLF_PAGED
#define OCLF_PAGED 0
#endif
#define ATTN_RS (OCLF_DP + 1)
/* With rows in local memory, a block's scores join them there, the loops
 * over keys stay loops and those over the head dim unroll 4 times: fully
 * unrolled, the compiler keeps the query and the scores in registers
 * again (a GPU compiler of the cross-compile suite spilled 50 to 350 of
 * them at a head dim of 128). */
#if OCLF_ACC
#define ATTN_KEY_LOOP _Pragma("unroll 1")
#define ATTN_DIM_LOOP _Pragma("unroll 4")
#else
#define ATTN_KEY_LOOP
#define ATTN_DIM_LOOP
#endif

/* One sequence's tokens, clamped so that offsets that break the contract
 * never lead outside the ranges the host checked. */
static inline void attn_seq(global const int *cu, ulong co, uint b, uint total, long *start,
                            long *len)
{
    const long s = clamp((long)cu[co + b], 0L, (long)total);
    const long e = clamp((long)cu[co + b + 1], s, (long)total);
    *start = s;
    *len = e - s;
}

/* The score of a visible key after softcap and ALiBi; -INFINITY when the
 * mask hides it. `diag` is i + Sk - Sq. */
static inline float attn_score(float x, long j, long diag, long left, long right, float cap,
                               float slope)
{
    if ((left >= 0 && j < diag - left) || (right >= 0 && j > diag + right))
        return -INFINITY;
    if (cap > 0.0f)
        x = cap * tanh(x / cap);
    return x - slope * (float)(diag > j ? diag - j : j - diag);
}

/* The probability of packed query token t, query head h and key j scaled
 * for dropout: kept (times dscale = 1 / (1 - p)) or 0. */
static inline float attn_drop(float x, float p, float dscale, ulong seed, ulong off, long j,
                              ulong t, uint h)
{
    const ulong c23 = (ulong)h + off;
    const uint w = philox_first((uint4)((uint)j, (uint)t, (uint)c23, (uint)(c23 >> 32)),
                                (uint2)((uint)seed, (uint)(seed >> 32)));
    return philox_uniform(w) >= p ? x * dscale : 0.0f;
}

kernel void attention_fused(global const stor_t *q, ulong qo, ulong qts, ulong qhs,
                            global const stor_t *k, ulong ko, ulong kts, ulong khs,
                            global const stor_t *v, ulong vo, ulong vts, ulong vhs,
                            global stor_t *o, ulong oo, ulong ots, ulong ohs,
                            global const int *cuq, ulong cuqo, global const int *cuk, ulong cuko,
                            uint nqb, uint hk, uint grp, uint d, uint total_q, uint total_k,
                            uint max_sq, float scale, float cap, long left, long right,
                            global const float *slopes, ulong slo, uint has_alibi,
                            global const float *sinks, ulong sio, uint has_sinks,
                            global float *lse, ulong lso, ulong lss, uint has_lse,
                            global const int *bt, ulong bto, ulong bts, uint bs, uint nblk,
                            uint part, uint nparts, global float *pout, global float *plse,
                            float drop_p, ulong seed, ulong doff, uint has_drop,
                            local float *stage, local long *ltok)
{
    local float *lk = stage, *lv = stage + OCLF_BK * OCLF_DP;
    const uint lid = get_local_id(0);
    const ulong gid0 = get_group_id(0);
    const uint p = (uint)(gid0 % nparts);
    const ulong gid = gid0 / nparts;
    const uint qb = (uint)(gid % nqb), kh = (uint)((gid / nqb) % hk), b = (uint)(gid / nqb / hk);
    long qs, sq, ks, sk;
    attn_seq(cuq, cuqo, b, total_q, &qs, &sq);
#if OCLF_PAGED
    /* total_k is the block table's reach, max_blocks x block_size */
    ks = 0;
    sk = clamp((long)cuk[cuko + b], 0L, (long)total_k);
    const ulong btrow = bto + (ulong)b * bts;
#else
    attn_seq(cuk, cuko, b, total_k, &ks, &sk);
#endif
    sq = min(sq, (long)max_sq);
    const long rows = sq * grp, r0 = (long)qb * OCLF_WGS;
    /* the whole group leaves together, before any barrier */
    if (r0 >= rows)
        return;
    const long r = r0 + lid, shift = sk - sq;
    const int active = r < rows;
    const long i = active ? r / grp : 0;
    const uint h = kh * grp + (active ? (uint)(r % grp) : 0);
    const long t = qs + i;

    /* The keys any row of the group can see: blocks outside are skipped. */
    const long i0 = r0 / grp, i1 = (min(r0 + OCLF_WGS, rows) - 1) / grp;
    long jlo = 0, jhi = sk - 1;
    if (left >= 0)
        jlo = max(jlo, i0 + shift - left);
    if (right >= 0)
        jhi = min(jhi, i1 + shift + right);
    if (nparts > 1) {
        jlo = max(jlo, (long)p * part);
        jhi = min(jhi, (long)p * part + (long)part - 1);
    }

#if OCLF_ACC
    local float *qv = stage + 2 * OCLF_BK * OCLF_DP + lid * ATTN_RS;
    local float *acc = qv + OCLF_WGS * ATTN_RS;
    local float *s = stage + 2 * OCLF_BK * OCLF_DP + 2 * OCLF_WGS * ATTN_RS + lid * OCLF_BK;
#else
    float qv[OCLF_DP], acc[OCLF_DP];
#endif
    for (uint e = 0; e < OCLF_DP; e++) {
        qv[e] = active && e < d ? LD(q, qo + (ulong)t * qts + h * qhs + e) : 0.0f;
        acc[e] = 0.0f;
    }
    const float slope = has_alibi && active ? slopes[slo + h] : 0.0f;
    const float dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f;
    float m = -INFINITY, l = 0.0f;
    for (long j0 = jlo; j0 <= jhi; j0 += OCLF_BK) {
        const long nb = min((long)OCLF_BK, jhi - j0 + 1);
        barrier(CLK_LOCAL_MEM_FENCE);
#if OCLF_PAGED
        for (uint kk = lid; kk < OCLF_BK; kk += OCLF_WGS) {
            long tok = -1;
            if (kk < nb) {
                const long j = j0 + kk;
                const int blk = bt[btrow + (ulong)(j / bs)];
                if (blk >= 0 && (uint)blk < nblk)
                    tok = (long)blk * bs + j % bs;
            }
            ltok[kk] = tok;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        for (uint x = lid; x < OCLF_BK * OCLF_DP; x += OCLF_WGS) {
            const uint kk = x / OCLF_DP, e = x % OCLF_DP;
            float kx = 0.0f, vx = 0.0f;
#if OCLF_PAGED
            if (kk < nb && e < d && ltok[kk] >= 0) {
                const ulong tok = (ulong)ltok[kk];
#else
            if (kk < nb && e < d) {
                const ulong tok = (ulong)(ks + j0 + kk);
#endif
                kx = LD(k, ko + tok * kts + kh * khs + e);
                vx = LD(v, vo + tok * vts + kh * vhs + e);
            }
            lk[x] = kx;
            lv[x] = vx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!active)
            continue;
#if !OCLF_ACC
        float s[OCLF_BK];
#endif
        float bm = -INFINITY;
        ATTN_KEY_LOOP
        for (uint kk = 0; kk < OCLF_BK; kk++) {
            floatv dv = VSPLAT(0.0f);
            ATTN_DIM_LOOP
            for (uint e = 0; e < OCLF_DP; e += OCLF_VEC)
                dv += LDV_F(qv, e) * LDV_F(lk + kk * OCLF_DP, e);
            const float x = kk < nb ? attn_score(scale * VSUM(dv), j0 + kk, i + shift, left,
                                                 right, cap, slope)
                                    : -INFINITY;
            s[kk] = x;
            bm = fmax(bm, x);
        }
        if (bm == -INFINITY)
            continue;
        const float mn = fmax(m, bm), c = exp(m - mn);
        l *= c;
        ATTN_DIM_LOOP
        for (uint e = 0; e < OCLF_DP; e += OCLF_VEC)
            STV_F(acc, e, LDV_F(acc, e) * c);
        ATTN_KEY_LOOP
        for (uint kk = 0; kk < OCLF_BK; kk++) {
            float p = exp(s[kk] - mn);
            l += p;
            if (has_drop && p > 0.0f)
                p = attn_drop(p, drop_p, dscale, seed, doff, j0 + kk, (ulong)t, h);
            ATTN_DIM_LOOP
            for (uint e = 0; e < OCLF_DP; e += OCLF_VEC)
                STV_F(acc, e, LDV_F(acc, e) + p * LDV_F(lv + kk * OCLF_DP, e));
        }
        m = mn;
    }
    if (!active)
        return;
    if (nparts > 1) {
        /* a partition's share, normalized on its own; the merge adds the
         * sinks */
        const ulong row = ((ulong)p * total_q + (ulong)t) * (hk * grp) + h;
        const float pinv = l > 0.0f ? 1.0f / l : 0.0f;
        for (uint e = 0; e < d; e++)
            pout[row * d + e] = acc[e] * pinv;
        plse[row] = l > 0.0f ? m + log(l) : -INFINITY;
        return;
    }
    if (has_sinks) {
        const float sv = sinks[sio + h], mn = fmax(m, sv), c = exp(m - mn);
        l = l * c + exp(sv - mn);
        for (uint e = 0; e < OCLF_DP; e++)
            acc[e] *= c;
        m = mn;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (uint e = 0; e < d; e++)
        ST(o, oo + (ulong)t * ots + h * ohs + e, acc[e] * inv);
    if (has_lse)
        lse[lso + h * lss + (ulong)t] = l > 0.0f ? m + log(l) : -INFINITY;
}

/* Split KV's second step: row x = t Hq + h of every partition's partial
 * output, weighed by exp(lse_p - M), over the sum of the weights and the
 * sink's. A partition that saw no key (LSE -inf) weighs nothing and its
 * output is never read. */
kernel void attention_merge(global const float *pout, global const float *plse, uint nparts,
                            uint total_q, uint hq, uint d, global stor_t *o, ulong oo, ulong ots,
                            ulong ohs, global const float *sinks, ulong sio, uint has_sinks,
                            global float *lse, ulong lso, ulong lss, uint has_lse)
{
    const ulong x = get_global_id(0), rows = (ulong)total_q * hq;
    if (x >= rows)
        return;
    const ulong t = x / hq;
    const uint h = (uint)(x % hq);
    float m = has_sinks ? sinks[sio + h] : -INFINITY;
    for (uint p = 0; p < nparts; p++)
        m = fmax(m, plse[p * rows + x]);
    float l = 0.0f;
    if (m > -INFINITY) {
        for (uint p = 0; p < nparts; p++) {
            const float w = plse[p * rows + x];
            if (w > -INFINITY)
                l += exp(w - m);
        }
        if (has_sinks)
            l += exp(sinks[sio + h] - m);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (uint e = 0; e < d; e++) {
        float acc = 0.0f;
        for (uint p = 0; p < nparts; p++) {
            const float w = plse[p * rows + x];
            if (w > -INFINITY)
                acc += exp(w - m) * pout[(p * rows + x) * d + e];
        }
        ST(o, oo + t * ots + h * ohs + e, acc * inv);
    }
    if (has_lse)
        lse[lso + h * lss + t] = l > 0.0f ? m + log(l) : -INFINITY;
}

/* Paged keys to a packed f32 copy for the unfused path: token x of the
 * copy is the cache slot slots[x], every head and element of it. */
kernel void attn_gather(global const stor_t *src, ulong so, uint heads, uint d,
                        global const long *slots, ulong tokens, global float *dst)
{
    const ulong x = get_global_id(0), w = (ulong)heads * d;
    if (x >= tokens * w)
        return;
    const ulong t = x / w, r = x % w;
    dst[x] = LD(src, so + (ulong)slots[t] * w + r);
}

/* ---- unfused ------------------------------------------------------------ */

/* tokens x heads x d of a head view into packed f32 [tokens, heads, d]. */
kernel void attn_widen(global const stor_t *src, ulong so, ulong sts, ulong shs, uint heads,
                       uint d, ulong tokens, global float *dst)
{
    const ulong x = get_global_id(0);
    if (x >= tokens * heads * d)
        return;
    const ulong t = x / ((ulong)heads * d);
    const uint h = (uint)(x / d % heads), e = (uint)(x % d);
    dst[x] = LD(src, so + t * sts + h * shs + e);
}

/* Rows [i0, i0 + rows) of one query head's scores against its sequence's
 * sk keys (row stride sk, already scaled) become probabilities in place: a
 * row per work-item. The row's LSE goes to lse[lsi + row] when asked. */
kernel void attn_softmax(global float *sc, uint rows, uint sk, long i0, long shift, float cap,
                         long left, long right, global const float *slopes, ulong sli,
                         uint has_alibi, global const float *sinks, ulong sii, uint has_sinks,
                         global float *lse, ulong lsi, uint has_lse, ulong t0, uint head,
                         float drop_p, ulong seed, ulong doff, uint has_drop)
{
    const uint rr = get_global_id(0);
    if (rr >= rows)
        return;
    global float *row = sc + (ulong)rr * sk;
    const long diag = i0 + rr + shift;
    const float slope = has_alibi ? slopes[sli] : 0.0f;
    float m = has_sinks ? sinks[sii] : -INFINITY;
    for (uint j = 0; j < sk; j++) {
        const float x = attn_score(row[j], j, diag, left, right, cap, slope);
        row[j] = x;
        m = fmax(m, x);
    }
    float l = 0.0f;
    if (m > -INFINITY) {
        for (uint j = 0; j < sk; j++)
            l += exp(row[j] - m);
        if (has_sinks)
            l += exp(sinks[sii] - m);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f, dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f;
    for (uint j = 0; j < sk; j++) {
        float x = l > 0.0f ? exp(row[j] - m) * inv : 0.0f;
        if (has_drop && x > 0.0f)
            x = attn_drop(x, drop_p, dscale, seed, doff, j, t0 + rr, head);
        row[j] = x;
    }
    if (has_lse)
        lse[lsi + rr] = l > 0.0f ? m + log(l) : -INFINITY;
}

/* rows x d of a packed f32 tile (or zeros) into o's rows of one head. */
kernel void attn_store(global const float *tile, uint rows, uint d, uint zero, global stor_t *o,
                       ulong oo, ulong ots)
{
    const ulong x = get_global_id(0);
    if (x >= (ulong)rows * d)
        return;
    const ulong rr = x / d;
    const uint e = (uint)(x % d);
    ST(o, oo + rr * ots + e, zero ? 0.0f : tile[x]);
}
