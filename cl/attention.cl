/*
 * Attention over sequences packed along tokens (FlashAttention's varlen
 * layout), with contiguous K and V.
 *
 * Fused (attention_fused): with STAGE 1 a work-group takes OCLF_WGS rows
 * of one KV head of one sequence, a row being a (query, query head of the
 * KV group) pair, so the Hq / Hk heads that read the same KV head share
 * every K/V block the group stages. With STAGE 0 (CPUs) its rows are
 * (query, query head) pairs over every head, each reading its own keys:
 * a block's tokens then stream through the cache with all their heads,
 * and the query heads of a KV group read each K/V element from L1 after
 * the first. Keys go through local memory OCLF_BK at a time, widened to
 * f32 and padded to OCLF_DP (head_dim rounded up to OCLF_VEC) with zeros,
 * so the dot products and the accumulator update are whole vectors with no
 * tail. Each row keeps its query, its accumulator and the running max and
 * sum in private memory (online softmax); a block rescales the accumulator
 * once, not once per key.
 *
 * With OCLF_ACC 1 the rows' queries, accumulators and block scores sit in
 * local memory after the K/V blocks instead.
 *
 * With STAGE 2 the program holds attention_decode (attention_decode.cl,
 * the decode structure for few query rows: on a GPU work-items sharing
 * each key, on a CPU at WGS 1 one work-item per query token) in place of
 * attention_fused, with the same arguments, and attention_merge; with
 * STAGE 3 attention_mma (attention_mma.cl, prefill on matrix-unit
 * fragments) the same way.
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
/* 2: the decode structure for few query rows (attention_decode.cl: on a
 * GPU work-items sharing each key, the KV group's query heads in
 * registers; at WGS 1, a CPU's default, one work-item per query token).
 * 1: K/V blocks staged in local memory, widened once for every row of the
 * group (a GPU, where rows are work-items running side by side). 0: each
 * row reads its keys and values straight from global memory with vector
 * loads, and the head dim OCLF_HD is compiled in (a CPU, where a group's
 * work-items run one after another on one core: a block the first row
 * read is in L1 for the next, and copying it into local memory element by
 * element cost more than the arithmetic). */
#ifndef OCLF_STAGE
#define OCLF_STAGE 1
#endif
/* vectors a padded head holds */
#define ATTN_NV (OCLF_DP / OCLF_VEC)
#define ATTN_RS (OCLF_DP + 1)
/* the staged K and V blocks at the start of `stage` */
#define ATTN_KV_FLOATS (OCLF_STAGE ? 2 * OCLF_BK * OCLF_DP : 0)
/* With rows in local memory, a block's scores join them there, the loops
 * over keys stay loops and those over the head dim unroll twice: fully
 * unrolled, the compiler keeps the query and the scores in registers
 * again (a GPU compiler of the cross-compile suite spilled 50 to 350 of
 * them at a head dim of 128), and four times, with the paged cache's
 * addressing beside it, spilled 2 VGPRs on gfx1100 at 16-wide vectors. */
#if OCLF_ACC
#define ATTN_KEY_LOOP _Pragma("unroll 1")
#define ATTN_DIM_LOOP _Pragma("unroll 2")
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

/* Elements [e, e + OCLF_VEC) of a head starting at element `row`, of
 * which the first n are real: one vector load where the whole vector is,
 * else element by element with zeros past n (a head dim that is no
 * multiple of the width; n is a constant where the head dim is compiled
 * in, and the branch folds away). */
static inline floatv attn_load(global const stor_t *p, ulong row, uint e, uint n)
{
    if (e + OCLF_VEC <= n)
        return LDV(p, row + e);
    float t[OCLF_VEC];
    for (uint x = 0; x < OCLF_VEC; x++)
        t[x] = e + x < n ? LD(p, row + e + x) : 0.0f;
    return LDV_F(t, 0);
}

/* The inverse for an output head of n elements: a vector store where the
 * whole vector is, else element by element; past n nothing is written. */
#define ATTN_STORE_FN(name, T, STORE_VEC, STORE_ONE)                          \
    static inline void name(global T *p, ulong row, uint e, uint n, floatv v) \
    {                                                                         \
        if (e + OCLF_VEC <= n) {                                              \
            STORE_VEC(p, row + e, v);                                         \
            return;                                                           \
        }                                                                     \
        float t[OCLF_VEC];                                                    \
        STV_F(t, 0, v);                                                       \
        for (uint x = 0; e + x < n && x < OCLF_VEC; x++)                      \
            STORE_ONE(p, row + e + x, t[x]);                                  \
    }
ATTN_STORE_FN(attn_store_head, stor_t, STV, ST)

/* The same into an f32 temporary (split KV's partials), element by
 * element: written once a row and partition, and a 16-wide vector store
 * there spilled registers (9) on an Intel target of the cross-compile
 * suite (tgllp, bf16, head dim 40, the staged structure). */
static inline void attn_store_f32(global float *p, ulong row, uint e, uint n, floatv v)
{
    float t[OCLF_VEC];
    STV_F(t, 0, v);
    for (uint x = 0; e + x < n && x < OCLF_VEC; x++)
        p[row + e + x] = t[x];
}

/* The token of key j of a sequence whose keys start at token ks, or, paged,
 * its slot in the cache through the sequence's block-table row (-1 where
 * the block id lies outside the cache's nblk blocks: never read). */
static inline long attn_key_token(long j, long ks, global const int *bt, ulong btrow, uint bs,
                                  uint nblk)
{
#if OCLF_PAGED
    const int blk = bt[btrow + (ulong)(j / bs)];
    return blk >= 0 && (uint)blk < nblk ? (long)blk * bs + j % bs : -1;
#else
    return ks + j;
#endif
}

/* The keys [*jlo, *jhi] that query rows i0..i1 can see: the window
 * (left, right; -1 none) around each row's diagonal (shift), within the
 * partition p of `part` keys when the keys are split. */
static inline void attn_key_range(long i0, long i1, long sk, long shift, long left, long right,
                                  uint nparts, uint p, uint part, long *jlo, long *jhi)
{
    long lo = 0, hi = sk - 1;
    if (left >= 0)
        lo = max(lo, i0 + shift - left);
    if (right >= 0)
        hi = min(hi, i1 + shift + right);
    if (nparts > 1) {
        lo = max(lo, (long)p * part);
        hi = min(hi, (long)p * part + (long)part - 1);
    }
    *jlo = lo;
    *jhi = hi;
}

/* The arguments of both attention kernels (attention_fused here and
 * attention_decode of attention_decode.cl), which the host sets once. */
#define ATTENTION_KERNEL_ARGS                                                  \
    global const stor_t *q, ulong qo, ulong qts, ulong qhs, global const stor_t *k, ulong ko,  \
        ulong kts, ulong khs, global const stor_t *v, ulong vo, ulong vts, ulong vhs,          \
        global stor_t *o, ulong oo, ulong ots, ulong ohs, global const int *cuq, ulong cuqo,   \
        global const int *cuk, ulong cuko, uint nqb, uint hk, uint grp, uint d, uint total_q,  \
        uint total_k, uint max_sq, float scale, float cap, long left, long right,             \
        global const float *slopes, ulong slo, uint has_alibi, global const float *sinks,     \
        ulong sio, uint has_sinks, global float *lse, ulong lso, ulong lss, uint has_lse,      \
        global const int *bt, ulong bto, ulong bts, uint bs, uint nblk, uint part,            \
        uint nparts, global float *pout, global float *plse, float drop_p, ulong seed,        \
        ulong doff, uint has_drop, local float *stage, local long *ltok

#if OCLF_STAGE < 2
kernel void attention_fused(ATTENTION_KERNEL_ARGS)
{
    local float *lk = stage, *lv = stage + OCLF_BK * OCLF_DP;
#if OCLF_STAGE && OCLF_PAGED
    local float lmask[OCLF_BK]; /* 0, or -inf for a key not read */
#endif
    const uint lid = get_local_id(0);
    const ulong gid0 = get_group_id(0);
    const uint p = (uint)(gid0 % nparts);
    const ulong gid = gid0 / nparts;
#if OCLF_STAGE
    /* a group: rows of one KV head (its grp query heads) */
    const uint rpq = grp, qb = (uint)(gid % nqb), b = (uint)(gid / nqb / hk);
    const uint kh0 = (uint)((gid / nqb) % hk);
#else
    /* a group: rows of every query head, so that its rows together read
     * each staged token's heads where they lie side by side in memory */
    const uint rpq = hk * grp, qb = (uint)(gid % nqb), b = (uint)(gid / nqb);
    const uint kh0 = 0;
#endif
    long qs, sq, ks, sk;
    attn_seq(cuq, cuqo, b, total_q, &qs, &sq);
    const ulong btrow = bto + (ulong)b * bts; /* paged: the sequence's blocks */
#if OCLF_PAGED
    /* total_k is the block table's reach, max_blocks x block_size */
    ks = 0;
    sk = clamp((long)cuk[cuko + b], 0L, (long)total_k);
#else
    attn_seq(cuk, cuko, b, total_k, &ks, &sk);
#endif
    sq = min(sq, (long)max_sq);
    const long rows = sq * rpq, r0 = (long)qb * OCLF_WGS;
    /* the whole group leaves together, before any barrier */
    if (r0 >= rows)
        return;
    const long r = r0 + lid, shift = sk - sq;
    const int active = r < rows;
    const long i = active ? r / rpq : 0;
    const uint h = kh0 * grp + (active ? (uint)(r % rpq) : 0), kh = h / grp;
    const long t = qs + i;

    /* The keys any row of the group can see: blocks outside are skipped. */
    const long i0 = r0 / rpq, i1 = (min(r0 + OCLF_WGS, rows) - 1) / rpq;
    long jlo, jhi;
    attn_key_range(i0, i1, sk, shift, left, right, nparts, p, part, &jlo, &jhi);

#if OCLF_ACC
    local float *qv = stage + ATTN_KV_FLOATS + lid * ATTN_RS;
    local float *acc = qv + OCLF_WGS * ATTN_RS;
    local float *s = stage + ATTN_KV_FLOATS + 2 * OCLF_WGS * ATTN_RS + lid * OCLF_BK;
#define QV(c) LDV_F(qv, (c) * OCLF_VEC)
#define QV_SET(c, x) STV_F(qv, (c) * OCLF_VEC, (x))
#define ACCV(c) LDV_F(acc, (c) * OCLF_VEC)
#define ACC_SET(c, x) STV_F(acc, (c) * OCLF_VEC, (x))
#else
    /* whole vectors only, indexed by constants once the loops unroll, so
     * the compiler can keep the query and the accumulator in registers */
    floatv qv[ATTN_NV], acc[ATTN_NV];
#define QV(c) qv[c]
#define QV_SET(c, x) (qv[c] = (x))
#define ACCV(c) acc[c]
#define ACC_SET(c, x) (acc[c] = (x))
#endif
    const ulong qrow = qo + (ulong)t * qts + h * qhs;
    ATTN_DIM_LOOP
    for (uint c = 0; c < ATTN_NV; c++) {
        QV_SET(c, active ? attn_load(q, qrow, c * OCLF_VEC, d) : VSPLAT(0.0f));
        ACC_SET(c, VSPLAT(0.0f));
    }
    const float slope = has_alibi && active ? slopes[slo + h] : 0.0f;
    const float dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f;
    float m = -INFINITY, l = 0.0f;
    for (long j0 = jlo; j0 <= jhi; j0 += OCLF_BK) {
        const long nb = min((long)OCLF_BK, jhi - j0 + 1);
        /* With STAGE 0 the barrier stages nothing: it keeps the rows on the
         * same block, which the first of them brought into the cache. */
        barrier(CLK_LOCAL_MEM_FENCE);
#if OCLF_STAGE
#if OCLF_PAGED
        for (uint kk = lid; kk < OCLF_BK; kk += OCLF_WGS) {
            ltok[kk] = kk < nb ? attn_key_token(j0 + kk, ks, bt, btrow, bs, nblk) : -1;
            /* keys past the block or in a block past the cache are masked */
            lmask[kk] = ltok[kk] >= 0 ? 0.0f : -INFINITY;
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
#endif
        if (!active)
            continue;
#if !OCLF_ACC
        float s[OCLF_BK];
#endif
#if !OCLF_STAGE
        long ktok[OCLF_BK]; /* each key's token (slot), -1 when not read */
#endif
        float bm = -INFINITY;
        ATTN_KEY_LOOP
        for (uint kk = 0; kk < OCLF_BK; kk++) {
#if OCLF_STAGE
            floatv dv = VSPLAT(0.0f);
            ATTN_DIM_LOOP
            for (uint c = 0; c < ATTN_NV; c++)
                dv += QV(c) * LDV_F(lk + kk * OCLF_DP, c * OCLF_VEC);
#if OCLF_PAGED
            /* a key whose block lies past the cache was staged as zeros and
             * is masked (lmask), as the unstaged loop leaves it out; an add
             * rather than a select kept a bf16 point of the search space from
             * spilling on Xe integrated */
            const float x = attn_score(scale * VSUM(dv), j0 + kk, i + shift, left, right, cap,
                                       slope) +
                            lmask[kk];
#else
            const float x = kk < nb ? attn_score(scale * VSUM(dv), j0 + kk, i + shift, left,
                                                 right, cap, slope)
                                    : -INFINITY;
#endif
#else
            const long tok = kk < nb ? attn_key_token(j0 + kk, ks, bt, btrow, bs, nblk) : -1;
            ktok[kk] = tok;
            float x = -INFINITY;
            if (tok >= 0) {
                const ulong krow = ko + (ulong)tok * kts + kh * khs;
                floatv dv = VSPLAT(0.0f);
                for (uint c = 0; c < ATTN_NV; c++)
                    dv += QV(c) * attn_load(k, krow, c * OCLF_VEC, OCLF_HD);
                x = attn_score(scale * VSUM(dv), j0 + kk, i + shift, left, right, cap, slope);
            }
#endif
            s[kk] = x;
            bm = fmax(bm, x);
        }
        if (bm == -INFINITY)
            continue;
        const float mn = fmax(m, bm), cm = exp(m - mn);
        l *= cm;
        ATTN_DIM_LOOP
        for (uint c = 0; c < ATTN_NV; c++)
            ACC_SET(c, ACCV(c) * cm);
        ATTN_KEY_LOOP
        for (uint kk = 0; kk < OCLF_BK; kk++) {
            float pk = exp(s[kk] - mn);
            l += pk;
            if (has_drop && pk > 0.0f)
                pk = attn_drop(pk, drop_p, dscale, seed, doff, j0 + kk, (ulong)t, h);
#if OCLF_STAGE
            ATTN_DIM_LOOP
            for (uint c = 0; c < ATTN_NV; c++)
                ACC_SET(c, ACCV(c) + pk * LDV_F(lv + kk * OCLF_DP, c * OCLF_VEC));
#else
            /* a hidden or dropped key adds nothing: its value is not read */
            if (pk == 0.0f)
                continue;
            const ulong vrow = vo + (ulong)ktok[kk] * vts + kh * vhs;
            for (uint c = 0; c < ATTN_NV; c++)
                ACC_SET(c, ACCV(c) + pk * attn_load(v, vrow, c * OCLF_VEC, OCLF_HD));
#endif
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
        for (uint c = 0; c < ATTN_NV; c++)
            attn_store_f32(pout, row * d, c * OCLF_VEC, d, ACCV(c) * pinv);
        plse[row] = l > 0.0f ? m + log(l) : -INFINITY;
        return;
    }
    if (has_sinks) {
        const float sv = sinks[sio + h], mn = fmax(m, sv), cm = exp(m - mn);
        l = l * cm + exp(sv - mn);
        for (uint c = 0; c < ATTN_NV; c++)
            ACC_SET(c, ACCV(c) * cm);
        m = mn;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const ulong orow = oo + (ulong)t * ots + h * ohs;
    for (uint c = 0; c < ATTN_NV; c++)
        attn_store_head(o, orow, c * OCLF_VEC, d, ACCV(c) * inv);
    if (has_lse)
        lse[lso + h * lss + (ulong)t] = l > 0.0f ? m + log(l) : -INFINITY;
#undef QV
#undef QV_SET
#undef ACCV
#undef ACC_SET
}
#elif OCLF_STAGE == 3
#include "attention_mma.cl"
#else
#include "attention_decode.cl"
#endif

#if OCLF_STAGE != 3
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

#endif

/* (the decode and matrix-unit structures' programs hold the fused kernels
 * only) */
#if OCLF_STAGE < 2
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
#endif
