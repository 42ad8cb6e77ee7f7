/*
 * The decode structure of fused attention (OCLF_STAGE 2, a GPU's default
 * for few query rows): attention_decode takes attention_fused's arguments
 * and computes the same result, split KV and the merge kernel included.
 * With OCLF_WGS 1 the file holds its one-work-item form instead (a CPU's
 * default, at the end of the file).
 *
 * A work-group takes OCLF_QR rows (query, query head of the KV group) of
 * one KV head of one sequence, in decode the KV group's query heads of the
 * sequence's one query, and one partition of its keys. OCLF_TPK
 * work-items share a key, each loading 16 bytes of its head a step (a
 * unit: 4 f32 or 8 16-bit elements; DEC_NC units where the head is wider
 * than OCLF_TPK units), so a group has OCLF_WGS / OCLF_TPK keys (slots) in
 * flight. Each work-item scores every key it loads against its slice of
 * every row's query (kept in local memory, where it costs no registers):
 * each K and V byte is read once per group. A key's partial dot products are summed
 * across its work-items (cl/subgroup.h: sub-group shuffles where the
 * device has them, else local memory); each slot keeps its own running
 * max, sum and accumulator per row (online softmax in registers), and the
 * slots merge once, at the end, through local memory. K and V are never
 * staged in local memory.
 *
 * `stage` holds OCLF_QR x DEC_DPU + max(OCLF_QR x OCLF_WGS, DEC_KS x
 * (DEC_DPU + 2)) floats: the rows' queries as the first slot read them
 * (read back at every key), then the local-memory reduction's scratch or
 * the merge's per-slot state;
 * `ltok` 4 + 2 OCLF_WGS longs: the sequence's extent, read from global
 * memory by one work-item for all, and where a chunk of keys' K and V rows
 * start, each key's resolved by one work-item for the slot's work-items
 * (block ids are the same for every work-item of a key).
 */
#include "subgroup.h"

#ifndef OCLF_TPK
#define OCLF_TPK 16 /* work-items per key, a power of two */
#endif
#ifndef OCLF_QR
#define OCLF_QR 4 /* rows (query, query head) a work-group scores against each key */
#endif
#ifndef OCLF_HD
#define OCLF_HD 128 /* head dim, compiled in */
#endif
#ifndef OCLF_DROP
#define OCLF_DROP 0 /* 1: dropout compiled in (then has_drop decides); 0: has_drop is ignored */
#endif

#if OCLF_DTYPE == 0
#define DEC_KE 4 /* elements in a 16-byte unit */
typedef float4 dec_unit;
#else
#define DEC_KE 8
typedef float8 dec_unit;
#endif
/* units in a head, units per work-item, keys per step, floats of a merged
 * accumulator */
#define DEC_NCH ((OCLF_HD + DEC_KE - 1) / DEC_KE)
#define DEC_NC ((DEC_NCH + OCLF_TPK - 1) / OCLF_TPK)
#define DEC_KS (OCLF_WGS / OCLF_TPK)
#define DEC_DPU (DEC_NC * OCLF_TPK * DEC_KE)

static inline float dec_hsum(dec_unit v)
{
#if DEC_KE == 4
    return (v.s0 + v.s1) + (v.s2 + v.s3);
#else
    return ((v.s0 + v.s1) + (v.s2 + v.s3)) + ((v.s4 + v.s5) + (v.s6 + v.s7));
#endif
}

#if OCLF_DTYPE != 0
/* A unit of 16-bit elements loaded as four 32-bit words (element 2i in the
 * low half of word i), widened to f32 without taking the words apart into
 * 16-bit lanes in the code the optimizer sees: a word masked or shifted
 * down to its low half, or a 16-bit vector, lets it split the one 16-byte
 * load into 16-bit ones (sm_90). f16: the converting load of a private
 * copy of the words (exact: subnormals, infinities and NaNs included);
 * bf16: each element moved to (or kept in) its word's high half, which is
 * its f32. */
static inline float8 dec_widen_unit(uint4 w)
{
#if OCLF_DTYPE == 1
    uint t[4];
    vstore4(w, 0, t);
    return vload_half8(0, (const private half *)t);
#else
    const float4 lo = as_float4(w << 16), hi = as_float4(w & 0xffff0000u);
    return (float8)(lo.s0, hi.s0, lo.s1, hi.s1, lo.s2, hi.s2, lo.s3, hi.s3);
#endif
}
#endif

/* Elements [e0, e0 + DEC_KE) of the head at element `off`, zeros past the
 * head dim: for a whole unit one 16-byte load in the aligned build (the
 * host checked that every unit of K and V starts on 16 bytes), else
 * (and always for the query, whose rows the host does not check: the
 * `_elem` forms) an element-aligned vector load; a partial unit element by
 * element. The preprocessor makes the choice, not a run-time flag: where
 * both loads sat in one function under a flag, the optimizer merged them
 * into one load of the weaker alignment, which NVIDIA's back end split. */
static inline dec_unit dec_load_whole(global const stor_t *p, ulong at)
{
#if OCLF_ALIGNED && OCLF_DTYPE == 0
    return *(global const float4 *)(p + at);
#elif OCLF_ALIGNED
    return dec_widen_unit(*(global const uint4 *)(p + at));
#elif OCLF_DTYPE == 0
    return LDFV(4, p + at);
#else
    return dec_widen_unit(as_uint4(LD16V(8, p + at)));
#endif
}

static inline dec_unit dec_load_whole_elem(global const stor_t *p, ulong at)
{
#if OCLF_DTYPE == 0
    return LDFV(4, p + at);
#else
    return dec_widen_unit(as_uint4(LD16V(8, p + at)));
#endif
}

static inline dec_unit dec_load_part(global const stor_t *p, ulong off, uint e0)
{
#if OCLF_HD % DEC_KE
    /* (a head dim of whole units never gets here: e0 is a multiple of one) */
    float t[DEC_KE];
    _Pragma("unroll")
    for (uint x = 0; x < DEC_KE; x++)
        t[x] = e0 + x < OCLF_HD ? LD(p, off + e0 + x) : 0.0f;
    return OCLF_CAT(vload, DEC_KE)(0, t);
#else
    return (dec_unit)(0.0f);
#endif
}

static inline dec_unit dec_load(global const stor_t *p, ulong off, uint e0)
{
    if (e0 >= OCLF_HD)
        return (dec_unit)(0.0f);
    return e0 + DEC_KE <= OCLF_HD ? dec_load_whole(p, off + e0) : dec_load_part(p, off, e0);
}

static inline dec_unit dec_load_elem(global const stor_t *p, ulong off, uint e0)
{
    if (e0 >= OCLF_HD)
        return (dec_unit)(0.0f);
    return e0 + DEC_KE <= OCLF_HD ? dec_load_whole_elem(p, off + e0)
                                  : dec_load_part(p, off, e0);
}

/* A work-item's units of one head of K or V (unit c: elements from
 * (c OCLF_TPK + lane) DEC_KE, so neighbouring work-items read neighbouring
 * 16 bytes), zeros where `row` is -1 (a key not read). */
static inline void dec_load_head(dec_unit u[DEC_NC], global const stor_t *p, long row, uint lane)
{
    _Pragma("unroll")
    for (uint c = 0; c < DEC_NC; c++)
        u[c] = row >= 0 ? dec_load(p, (ulong)row, (c * OCLF_TPK + lane) * DEC_KE)
                        : (dec_unit)(0.0f);
}

/* The same for a query row, element-aligned. */
static inline void dec_load_query(dec_unit u[DEC_NC], global const stor_t *p, long row, uint lane)
{
    _Pragma("unroll")
    for (uint c = 0; c < DEC_NC; c++)
        u[c] = row >= 0 ? dec_load_elem(p, (ulong)row, (c * OCLF_TPK + lane) * DEC_KE)
                        : (dec_unit)(0.0f);
}

/* attn_key_token in 32-bit arithmetic (key indices stay below 2^31, which
 * the host checks): a 64-bit division by the block size a key cost a GPU
 * dozens of instructions and registers in the hot loop. */
static inline long dec_key_token(uint j, long ks, global const int *bt, ulong btrow, uint bs,
                                 uint nblk)
{
#if OCLF_PAGED
    const uint bi = j / bs;
    const int blk = bt[btrow + bi];
    return blk >= 0 && (uint)blk < nblk ? (long)blk * bs + (j - bi * bs) : -1;
#else
    return ks + (long)j;
#endif
}

/* This work-item's share of each row's dot product with one key, the
 * rows' queries read from local memory (`lq`: DEC_DPU floats a row, each
 * unit aligned to its size). */
static inline void dec_score(float s[OCLF_QR], local const float *lq, uint lane,
                             const dec_unit kv[DEC_NC])
{
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++) {
        local const dec_unit *qr = (local const dec_unit *)(lq + r * DEC_DPU) + lane;
        dec_unit dv = qr[0] * kv[0];
        _Pragma("unroll")
        for (uint c = 1; c < DEC_NC; c++)
            dv = fma(qr[c * OCLF_TPK], kv[c], dv);
        s[r] = dec_hsum(dv);
    }
}

/* The rows of the group: query index i (within the sequence), head h,
 * whether the row exists, and its ALiBi slope. */
typedef struct dec_row {
    long i;
    uint h;
    int active;
    float slope;
} dec_row;

/* One key's scores (already summed over its work-items) into each row's
 * running max m, sum l and accumulator of this slot; x[r] is the row's
 * masked, scaled score (-inf: not visible). The value is read only when
 * some row sees the key. */
static inline void dec_accumulate(float m[OCLF_QR], float l[OCLF_QR],
                                  dec_unit acc[OCLF_QR][DEC_NC], const float x[OCLF_QR],
                                  global const stor_t *v, long vrow, uint lane,
                                  const dec_row rw[OCLF_QR], long j, long qs, float drop_p,
                                  float dscale, ulong seed, ulong doff, uint has_drop)
{
    float bm = -INFINITY;
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++)
        bm = fmax(bm, x[r]);
    if (bm == -INFINITY)
        return;
    dec_unit vv[DEC_NC];
    dec_load_head(vv, v, vrow, lane);
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++) {
        if (x[r] == -INFINITY)
            continue;
        /* one exp a key: the new key's weight below the running max, or,
         * past it, the rescale of what came before (the key weighs 1) */
        float pk = 1.0f;
        if (x[r] > m[r]) {
            const float cm = exp(m[r] - x[r]);
            l[r] *= cm;
            _Pragma("unroll")
            for (uint c = 0; c < DEC_NC; c++)
                acc[r][c] *= cm;
            m[r] = x[r];
        } else {
            pk = exp(x[r] - m[r]);
        }
        l[r] += pk;
        if (OCLF_DROP && has_drop)
            pk = attn_drop(pk, drop_p, dscale, seed, doff, j, (ulong)(qs + rw[r].i), rw[r].h);
        _Pragma("unroll")
        for (uint c = 0; c < DEC_NC; c++)
            acc[r][c] = fma((dec_unit)(pk), vv[c], acc[r][c]);
    }
}

/* The sum over the slots of the merged accumulators' n elements from
 * element e (n 4 or DEC_KE; `la` holds DEC_DPU floats a slot, zeros past
 * the head dim). */
static inline float4 dec_slot_sum4(local const float *la, uint e)
{
    float4 u = (float4)(0.0f);
    _Pragma("unroll")
    for (uint s = 0; s < DEC_KS; s++)
        u += vload4(0, la + s * DEC_DPU + e);
    return u;
}

static inline dec_unit dec_slot_sum(local const float *la, uint e)
{
    dec_unit u = (dec_unit)(0.0f);
    _Pragma("unroll")
    for (uint s = 0; s < DEC_KS; s++)
        u += OCLF_CAT(vload, DEC_KE)(0, la + s * DEC_DPU + e);
    return u;
}

/* Four elements of a partial output row from element e (f32, rows of
 * OCLF_HD in a buffer the library allocates): one aligned 16-byte store
 * where the head dim is a multiple of four, so every group of four starts
 * on 16 bytes; element by element past the head dim. */
static inline void dec_store_partial(global float *p, ulong row, uint e, float4 u)
{
#if OCLF_HD % 4 == 0
    *(global float4 *)(p + row * OCLF_HD + e) = u;
#else
    float t[4];
    vstore4(u, 0, t);
    _Pragma("unroll")
    for (uint x = 0; x < 4; x++)
        if (e + x < OCLF_HD)
            p[row * OCLF_HD + e + x] = t[x];
#endif
}

/* A unit of the output at element `at` (its first element e of the head):
 * one 16-byte store in the aligned build (the host checked the output's
 * rows too), 16-bit elements narrowed into 32-bit words (through 16-bit
 * lanes NVIDIA's back end splits the store); element by element
 * otherwise. */
static inline void dec_store_out(global stor_t *o, ulong at, uint e, dec_unit u)
{
#if OCLF_ALIGNED
    /* (a head dim of whole units: every unit is whole) */
    if (OCLF_HD % DEC_KE == 0 || e + DEC_KE <= OCLF_HD) {
#if OCLF_DTYPE == 0
        *(global float4 *)(o + at) = u;
#elif OCLF_DTYPE == 1
        *(global uint4 *)(o + at) = as_uint4(NARROW_F16(8, u));
#else
        /* rounding as NARROW_BF16: even lanes into the low halves */
        const uint8 b = as_uint8(u);
        const uint8 r = select(b + 0x7fffu + ((b >> 16) & 1u), b | 0x00400000u, u != u) >> 16;
        *(global uint4 *)(o + at) = r.even | (r.odd << 16);
#endif
        return;
    }
#endif
    float t[DEC_KE];
    OCLF_CAT(vstore, DEC_KE)(u, 0, t);
    _Pragma("unroll")
    for (uint x = 0; x < DEC_KE; x++)
        if (e + x < OCLF_HD)
            ST(o, at + x, t[x]);
}

/* Row r's slots merged through local memory (every work-item calls it;
 * it has barriers), then written: the partition's normalized share and
 * LSE with a split, else the output with the sink added and the LSE. The
 * writes go to consecutive work-items, 16 consecutive bytes each, so a
 * sub-group's stores cover whole rows rather than every other 16 bytes. */
static inline void dec_finish(float m, float l, const dec_unit acc[DEC_NC], dec_row rw,
                              uint lid, long t, uint hq, uint p, uint nparts, uint total_q,
                              global float *pout, global float *plse, global const float *sinks,
                              ulong sio, uint has_sinks, global stor_t *o, ulong oo, ulong ots,
                              ulong ohs, global float *lse, ulong lso, ulong lss, uint has_lse,
                              local float *stage)
{
    const uint lane = lid % OCLF_TPK, slot = lid / OCLF_TPK;
    local float *lm = stage, *ll = stage + DEC_KS, *la = stage + 2 * DEC_KS;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0)
        lm[slot] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    float mm = -INFINITY;
    _Pragma("unroll")
    for (uint s = 0; s < DEC_KS; s++)
        mm = fmax(mm, lm[s]);
    const float w = m > -INFINITY ? exp(m - mm) : 0.0f;
    if (lane == 0)
        ll[slot] = l * w;
    _Pragma("unroll")
    for (uint c = 0; c < DEC_NC; c++)
        OCLF_CAT(vstore, DEC_KE)(acc[c] * w, 0, la + slot * DEC_DPU + (c * OCLF_TPK + lane) * DEC_KE);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!rw.active)
        return;
    float ls = 0.0f;
    _Pragma("unroll")
    for (uint s = 0; s < DEC_KS; s++)
        ls += ll[s];
    const uint h = rw.h;
    if (nparts > 1) {
        const ulong row = ((ulong)p * total_q + (ulong)t) * hq + h;
        const float pinv = ls > 0.0f ? 1.0f / ls : 0.0f;
        _Pragma("unroll")
        for (uint e = lid * 4; e < OCLF_HD; e += OCLF_WGS * 4)
            dec_store_partial(pout, row, e, dec_slot_sum4(la, e) * pinv);
        if (lid == 0)
            plse[row] = ls > 0.0f ? mm + log(ls) : -INFINITY;
        return;
    }
    float cm = 1.0f;
    if (has_sinks) {
        const float sv = sinks[sio + h], mn = fmax(mm, sv);
        cm = exp(mm - mn);
        ls = ls * cm + exp(sv - mn);
        mm = mn;
    }
    const float inv = ls > 0.0f ? cm / ls : 0.0f;
    const ulong orow = oo + (ulong)t * ots + h * ohs;
    _Pragma("unroll")
    for (uint e = lid * DEC_KE; e < OCLF_HD; e += OCLF_WGS * DEC_KE)
        dec_store_out(o, orow + e, e, dec_slot_sum(la, e) * inv);
    if (has_lse && lid == 0)
        lse[lso + h * lss + (ulong)t] = ls > 0.0f ? mm + log(ls) : -INFINITY;
}

/* The sequence of work-group b's rows, read by its first work-item into
 * ltok: the first query token, the query count (at most max_sq), the first
 * key token (paged: 0) and the key count. */
static inline void dec_sequence(local long *ltok, uint lid, uint b, global const int *cuq,
                                ulong cuqo, global const int *cuk, ulong cuko, uint total_q,
                                uint total_k, uint max_sq)
{
    if (lid == 0) {
        long qs, sq, ks, sk;
        attn_seq(cuq, cuqo, b, total_q, &qs, &sq);
#if OCLF_PAGED
        ks = 0;
        sk = clamp((long)cuk[cuko + b], 0L, (long)total_k);
#else
        attn_seq(cuk, cuko, b, total_k, &ks, &sk);
#endif
        ltok[0] = qs, ltok[1] = min(sq, (long)max_sq), ltok[2] = ks, ltok[3] = sk;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

#if OCLF_WGS > 1
kernel OCLF_SUBGROUP_KERNEL __attribute__((reqd_work_group_size(OCLF_WGS, 1, 1))) void
attention_decode(ATTENTION_KERNEL_ARGS)
{
    (void)d;
    const uint lid = get_local_id(0), lane = lid % OCLF_TPK, slot = lid / OCLF_TPK;
    const ulong gid0 = get_group_id(0);
    const uint p = (uint)(gid0 % nparts);
    const ulong gid = gid0 / nparts;
    const uint qb = (uint)(gid % nqb), kh = (uint)((gid / nqb) % hk), b = (uint)(gid / nqb / hk);
    /* The sequence's extent, read once for the group: ltok[0..4) */
    dec_sequence(ltok, lid, b, cuq, cuqo, cuk, cuko, total_q, total_k, max_sq);
    const long qs = ltok[0], sq = ltok[1], ks = ltok[2], sk = ltok[3];
    const ulong btrow = bto + (ulong)b * bts;
    const long rows = sq * grp, r0 = (long)qb * OCLF_QR, shift = sk - sq;
    /* the whole group leaves together, before any barrier */
    if (r0 >= rows)
        return;
    /* the keys any row of the group can see */
    const long i0 = r0 / grp, i1 = (min(r0 + OCLF_QR, rows) - 1) / grp;
    long jlo, jhi;
    attn_key_range(i0, i1, sk, shift, left, right, nparts, p, part, &jlo, &jhi);

    dec_row rw[OCLF_QR];
    dec_unit qv[DEC_NC], acc[OCLF_QR][DEC_NC];
    /* the rows' queries stay in local memory for the whole loop, read
     * back at each key (registers for them cost the occupancy), and the
     * reductions and the merge get the rest */
    local float *lq = stage, *scratch = stage + OCLF_QR * DEC_DPU;
    /* for a chunk of keys, where each key's K row starts (-1: not read),
     * then its V row */
    local long *ltab = ltok + 4;
    float m[OCLF_QR], l[OCLF_QR];
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++) {
        const long rr = r0 + r;
        rw[r].active = rr < rows;
        rw[r].i = rw[r].active ? rr / grp : 0;
        rw[r].h = kh * grp + (rw[r].active ? (uint)(rr % grp) : 0);
        rw[r].slope = has_alibi && rw[r].active ? slopes[slo + rw[r].h] : 0.0f;
        /* the first slot's work-items read the query from global memory
         * once for the group, the others take it from local memory */
        const long qrow = rw[r].active && slot == 0
                              ? (long)(qo + (ulong)(qs + rw[r].i) * qts + rw[r].h * qhs)
                              : -1;
        dec_load_query(qv, q, qrow, lane);
        _Pragma("unroll")
        for (uint c = 0; c < DEC_NC; c++) {
            if (slot == 0)
                *(local dec_unit *)(lq + r * DEC_DPU + (c * OCLF_TPK + lane) * DEC_KE) = qv[c];
            acc[r][c] = (dec_unit)(0.0f);
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f;
    const ulong khead = kh * khs, vhead = kh * vhs;
    /* Chunks of OCLF_WGS keys: each work-item resolves one key of the
     * chunk to where its K and V rows start (the block table read once a
     * key, and the 64-bit address arithmetic done, outside the loop that
     * reads K and V), then the slots step through the chunk. Key indices
     * stay below 2^31 (the host checks). */
    for (long cl0 = jlo; cl0 <= jhi; cl0 += OCLF_WGS) {
        const uint c0 = (uint)cl0;
        /* (the previous chunk's reads of ltab are done) */
        barrier(CLK_LOCAL_MEM_FENCE);
        const long tk = cl0 + lid <= jhi ? dec_key_token(c0 + lid, ks, bt, btrow, bs, nblk) : -1;
        ltab[lid] = tk >= 0 ? (long)(ko + (ulong)tk * kts + khead) : -1;
        ltab[OCLF_WGS + lid] = tk >= 0 ? (long)(vo + (ulong)tk * vts + vhead) : -1;
        barrier(CLK_LOCAL_MEM_FENCE);
        /* (one key a slot in flight: unrolled, the loop's registers cost
         * occupancy) */
        _Pragma("unroll 1")
        for (uint j1 = slot; j1 < OCLF_WGS; j1 += DEC_KS) {
            const long krow = ltab[j1], j = (long)(c0 + j1);
            dec_unit kv[DEC_NC];
            dec_load_head(kv, k, krow, lane);
            float x[OCLF_QR];
            dec_score(x, lq, lane, kv);
            oclf_seg_sum_n(x, OCLF_QR, OCLF_TPK, lid, OCLF_WGS, scratch);
            _Pragma("unroll")
            for (uint r = 0; r < OCLF_QR; r++)
                x[r] = krow >= 0 && rw[r].active ? attn_score(scale * x[r], j, rw[r].i + shift,
                                                              left, right, cap, rw[r].slope)
                                                 : -INFINITY;
            dec_accumulate(m, l, acc, x, v, ltab[OCLF_WGS + j1], lane, rw, j, qs, drop_p,
                           dscale, seed, doff, has_drop);
        }
    }
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++)
        dec_finish(m[r], l[r], acc[r], rw[r], lid, qs + rw[r].i, hk * grp, p, nparts, total_q,
                   pout, plse, sinks, sio, has_sinks, o, oo, ots, ohs, lse, lso, lss, has_lse,
                   scratch);
}
#else
/* ---- WGS 1: the CPU's form ------------------------------------------------
 * One work-item takes OCLF_QR consecutive rows of the (query, query head)
 * rows over every head, not one KV head's (in decode every head of one
 * sequence's query), and every key of its partition, DEC_BK keys a step.
 * For each key it walks the token's KV heads in memory order: a head's K
 * row is loaded and widened once, 16 elements a vector, and scored against
 * the rows of its KV group, then its V row added into them. A CPU core
 * runs a work-group's work-items one after another, so the GPU form's
 * work-items sharing a key would cost a local-memory reduction and
 * barriers a key; the fused structure's rows (STAGE 0) each widen every K
 * and V element again, resolve every key's block again and take one exp a
 * key, and one work-item a KV head reads 256-byte rows a token's heads
 * apart, which the CPU's prefetchers do not follow (measured slower than
 * STAGE 0). Here the cache streams through a block's tokens with all
 * their heads, a key's block-table entry is read once for every row, and
 * a step's exps are one 16-wide vector a row. */
#define DEC_CV 16 /* floats in a vector of the loop */
#define DEC_CN ((OCLF_HD + DEC_CV - 1) / DEC_CV)
#define DEC_BK 16 /* keys a step: one vector of scores a row */

static inline float dec_cpu_hsum(float16 v)
{
    const float8 a = v.lo + v.hi;
    const float4 b = a.lo + a.hi;
    const float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* Elements [e, e + DEC_CV) of the head at element `row`, widened, zeros
 * past the head dim (element by element where the vector is partial). */
static inline float16 dec_cpu_load(global const stor_t *p, ulong row, uint e)
{
    if (e + DEC_CV <= OCLF_HD) {
#if OCLF_DTYPE == 0
        return LDFV(16, p + row + e);
#elif OCLF_DTYPE == 1
        return WIDEN_F16(16, LD16V(16, p + row + e));
#else
        return WIDEN_BF16(16, LD16V(16, p + row + e));
#endif
    }
    float t[DEC_CV];
    for (uint x = 0; x < DEC_CV; x++)
        t[x] = e + x < OCLF_HD ? LD(p, row + e + x) : 0.0f;
    return vload16(0, t);
}

/* The inverse into the output (16-bit elements rounded once), nothing
 * past the head dim. */
static inline void dec_cpu_store(global stor_t *p, ulong row, uint e, float16 v)
{
    if (e + DEC_CV <= OCLF_HD) {
#if OCLF_DTYPE == 0
        STFV(16, p + row + e, v);
#elif OCLF_DTYPE == 1
        ST16V(16, p + row + e, NARROW_F16(16, v));
#else
        ST16V(16, p + row + e, NARROW_BF16(16, v));
#endif
        return;
    }
    float t[DEC_CV];
    vstore16(v, 0, t);
    for (uint x = 0; e + x < OCLF_HD && x < DEC_CV; x++)
        ST(p, row + e + x, t[x]);
}

kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
attention_decode(ATTENTION_KERNEL_ARGS)
{
    (void)d;
    (void)stage;
    (void)ltok;
    const ulong gid0 = get_group_id(0);
    const uint p = (uint)(gid0 % nparts);
    const ulong gid = gid0 / nparts;
    const uint qb = (uint)(gid % nqb), b = (uint)(gid / nqb), hq = hk * grp;
    long qs, sq, ks, sk;
    attn_seq(cuq, cuqo, b, total_q, &qs, &sq);
#if OCLF_PAGED
    ks = 0;
    sk = clamp((long)cuk[cuko + b], 0L, (long)total_k);
#else
    attn_seq(cuk, cuko, b, total_k, &ks, &sk);
#endif
    sq = min(sq, (long)max_sq);
    const ulong btrow = bto + (ulong)b * bts;
    const long rows = sq * hq, r0 = (long)qb * OCLF_QR, shift = sk - sq;
    if (r0 >= rows)
        return;
    const long i0 = r0 / hq, i1 = (min(r0 + OCLF_QR, rows) - 1) / hq;
    long jlo, jhi;
    attn_key_range(i0, i1, sk, shift, left, right, nparts, p, part, &jlo, &jhi);

    dec_row rw[OCLF_QR];
    uint rkh[OCLF_QR]; /* each row's KV head */
    float16 qv[OCLF_QR][DEC_CN], acc[OCLF_QR][DEC_CN];
    float m[OCLF_QR], l[OCLF_QR];
    for (uint r = 0; r < OCLF_QR; r++) {
        const long rr = r0 + r;
        rw[r].active = rr < rows;
        rw[r].i = rw[r].active ? rr / hq : 0;
        rw[r].h = rw[r].active ? (uint)(rr % hq) : 0;
        rkh[r] = rw[r].h / grp;
        rw[r].slope = has_alibi && rw[r].active ? slopes[slo + rw[r].h] : 0.0f;
        const ulong qrow = qo + (ulong)(qs + rw[r].i) * qts + rw[r].h * qhs;
        for (uint c = 0; c < DEC_CN; c++) {
            qv[r][c] = rw[r].active ? dec_cpu_load(q, qrow, c * DEC_CV) : (float16)(0.0f);
            acc[r][c] = (float16)(0.0f);
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const float dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f;
    uint cbi = UINT_MAX; /* (paged) the block whose id cblk holds */
    int cblk = -1;
    for (long j0 = jlo; j0 <= jhi; j0 += DEC_BK) {
        const uint nb = (uint)min((long)DEC_BK, jhi - j0 + 1);
        long ktok[DEC_BK]; /* each key's slot (token), -1: not read */
        float s[OCLF_QR][DEC_BK], bm[OCLF_QR];
        for (uint r = 0; r < OCLF_QR; r++)
            bm[r] = -INFINITY;
        for (uint kk = 0; kk < DEC_BK; kk++) {
            const long j = j0 + kk;
#if OCLF_PAGED
            long tok = -1;
            if (kk < nb) {
                /* a block's entry read once (where the key starts a block
                 * or the partition) */
                const uint bi = (uint)j / bs;
                if (bi != cbi) {
                    cbi = bi;
                    cblk = bt[btrow + bi];
                }
                tok = cblk >= 0 && (uint)cblk < nblk ? (long)cblk * bs + ((uint)j - bi * bs) : -1;
            }
#else
            const long tok = kk < nb ? ks + j : -1;
#endif
            ktok[kk] = tok;
            const ulong kt = ko + (ulong)max(tok, 0L) * kts;
            /* the KV head whose K row kv holds: loaded where the rows'
             * KV head changes, once for its group */
            float16 kv[DEC_CN];
            uint cur = UINT_MAX;
            for (uint r = 0; r < OCLF_QR; r++) {
                float x = -INFINITY;
                if (tok >= 0 && rw[r].active) {
                    if (rkh[r] != cur) {
                        cur = rkh[r];
                        _Pragma("unroll")
                        for (uint c = 0; c < DEC_CN; c++)
                            kv[c] = dec_cpu_load(k, kt + cur * khs, c * DEC_CV);
                    }
                    float16 dv = qv[r][0] * kv[0];
                    _Pragma("unroll")
                    for (uint c = 1; c < DEC_CN; c++)
                        dv += qv[r][c] * kv[c];
                    x = attn_score(scale * dec_cpu_hsum(dv), j, rw[r].i + shift, left, right,
                                   cap, rw[r].slope);
                }
                s[r][kk] = x;
                bm[r] = fmax(bm[r], x);
            }
        }
        /* each row's weights of the step, rescaling what came before once
         * (a row that sees none of the keys weighs them 0) */
        float pk[OCLF_QR][DEC_BK];
        for (uint r = 0; r < OCLF_QR; r++) {
            if (bm[r] == -INFINITY) {
                vstore16((float16)(0.0f), 0, pk[r]);
                continue;
            }
            const float mn = fmax(m[r], bm[r]), cm = exp(m[r] - mn);
            l[r] *= cm;
            _Pragma("unroll")
            for (uint c = 0; c < DEC_CN; c++)
                acc[r][c] *= cm;
            m[r] = mn;
            const float16 e = exp(vload16(0, s[r]) - mn);
            l[r] += dec_cpu_hsum(e);
            vstore16(e, 0, pk[r]);
            if (OCLF_DROP && has_drop)
                for (uint kk = 0; kk < nb; kk++)
                    if (pk[r][kk] > 0.0f)
                        pk[r][kk] = attn_drop(pk[r][kk], drop_p, dscale, seed, doff, j0 + kk,
                                              (ulong)(qs + rw[r].i), rw[r].h);
        }
        for (uint kk = 0; kk < nb; kk++) {
            if (ktok[kk] < 0)
                continue;
            const ulong vt = vo + (ulong)ktok[kk] * vts;
            float16 vv[DEC_CN];
            uint cur = UINT_MAX;
            for (uint r = 0; r < OCLF_QR; r++) {
                const float w = pk[r][kk];
                /* a key a row does not see (or dropped) adds nothing: a V
                 * row no row weighs is not read */
                if (w == 0.0f)
                    continue;
                if (rkh[r] != cur) {
                    cur = rkh[r];
                    _Pragma("unroll")
                    for (uint c = 0; c < DEC_CN; c++)
                        vv[c] = dec_cpu_load(v, vt + cur * vhs, c * DEC_CV);
                }
                _Pragma("unroll")
                for (uint c = 0; c < DEC_CN; c++)
                    acc[r][c] += w * vv[c];
            }
        }
    }
    for (uint r = 0; r < OCLF_QR; r++) {
        if (!rw[r].active)
            continue;
        const uint h = rw[r].h;
        const ulong t = (ulong)(qs + rw[r].i);
        if (nparts > 1) {
            /* the partition's share, normalized on its own; the merge adds
             * the sinks */
            const ulong row = ((ulong)p * total_q + t) * hq + h;
            const float pinv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            for (uint c = 0; c < DEC_CN; c++) {
                float tt[DEC_CV];
                vstore16(acc[r][c] * pinv, 0, tt);
                for (uint x = 0; c * DEC_CV + x < OCLF_HD && x < DEC_CV; x++)
                    pout[row * OCLF_HD + c * DEC_CV + x] = tt[x];
            }
            plse[row] = l[r] > 0.0f ? m[r] + log(l[r]) : -INFINITY;
            continue;
        }
        float mm = m[r], ls = l[r], cm = 1.0f;
        if (has_sinks) {
            const float sv = sinks[sio + h], mn = fmax(mm, sv);
            cm = exp(mm - mn);
            ls = ls * cm + exp(sv - mn);
            mm = mn;
        }
        const float inv = ls > 0.0f ? cm / ls : 0.0f;
        const ulong orow = oo + t * ots + h * ohs;
        for (uint c = 0; c < DEC_CN; c++)
            dec_cpu_store(o, orow, c * DEC_CV, acc[r][c] * inv);
        if (has_lse)
            lse[lso + h * lss + t] = ls > 0.0f ? mm + log(ls) : -INFINITY;
    }
}
#endif
