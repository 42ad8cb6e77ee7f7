/*
 * The decode structure of fused attention (OCLF_STAGE 2, a GPU's default
 * for few query rows): attention_decode takes attention_fused's arguments
 * and computes the same result, split KV and the merge kernel included.
 *
 * A work-group takes OCLF_QR rows (query, query head of the KV group) of
 * one KV head of one sequence, in decode the KV group's query heads of the
 * sequence's one query, and one partition of its keys. OCLF_TPK
 * work-items share a key, each loading 16 bytes of its head a step (a
 * unit: 4 f32 or 8 16-bit elements; DEC_NC units where the head is wider
 * than OCLF_TPK units), so a group has OCLF_WGS / OCLF_TPK keys (slots) in
 * flight. Each work-item keeps its slice of every row's query in
 * registers and scores every key it loads against all of them: each K and
 * V byte is read once per group. A key's partial dot products are summed
 * across its work-items (cl/subgroup.h: sub-group shuffles where the
 * device has them, else local memory); each slot keeps its own running
 * max, sum and accumulator per row (online softmax in registers), and the
 * slots merge once, at the end, through local memory. K and V are never
 * staged in local memory.
 *
 * `stage` holds max(OCLF_QR x DEC_DPU, OCLF_QR x OCLF_WGS, DEC_KS x
 * (DEC_DPU + 2)) floats: the rows' queries as the first slot read them,
 * the local-memory reduction's scratch, then the merge's per-slot state;
 * `ltok` 4 + 2 DEC_KS longs: the sequence's extent and each step's key
 * slots, read from global memory by one work-item for all (block ids and
 * lengths are the same for every work-item of a key).
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
/* A unit of 16-bit elements as four 32-bit words (element 2i in the low
 * half of word i) widened to f32 in integer operations on the words:
 * converting the eight 16-bit lanes instead (vload_half of a private copy,
 * or a widening of ushort8) let a GPU compiler split the unit's one 16-byte
 * load into eight 2-byte loads (sm_90). f16 exactly: normals by their
 * fields, zeros and subnormals as m 2^-24, infinities and NaNs. */
static inline float4 dec_widen_words(uint4 h)
{
#if OCLF_DTYPE == 1
    const uint4 e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint4 bits = select(((e + 112u) << 23) | (m << 13), 0x7f800000u | (m << 13), e == 31u);
    bits = select(bits, as_uint4(convert_float4(m) * 0x1p-24f), e == 0u);
    return as_float4(bits | ((h & 0x8000u) << 16));
#else
    return as_float4(h << 16);
#endif
}

static inline float8 dec_widen_unit(uint4 w)
{
    const float4 lo = dec_widen_words(w & 0xffffu), hi = dec_widen_words(w >> 16);
    return (float8)(lo.s0, hi.s0, lo.s1, hi.s1, lo.s2, hi.s2, lo.s3, hi.s3);
}
#endif

/* Elements [e0, e0 + DEC_KE) of the head at element `off`, zeros past the
 * head dim: one 16-byte load where the unit is whole and `aligned` (the
 * host checked that every unit starts on 16 bytes: the aligned build),
 * else an element-aligned vector load or, for a partial unit, element by
 * element. */
static inline dec_unit dec_load(global const stor_t *p, ulong off, uint e0, int aligned)
{
    if (e0 >= OCLF_HD)
        return (dec_unit)(0.0f);
    if (e0 + DEC_KE <= OCLF_HD) {
#if OCLF_DTYPE == 0
        return aligned ? *(global const float4 *)(p + off + e0) : LDFV(4, p + off + e0);
#else
        return dec_widen_unit(aligned ? *(global const uint4 *)(p + off + e0)
                                      : as_uint4(LD16V(8, p + off + e0)));
#endif
    }
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

/* A work-item's units of one head (unit c: elements from
 * (c OCLF_TPK + lane) DEC_KE, so neighbouring work-items read neighbouring
 * 16 bytes), zeros where `row` is -1 (a key not read). */
static inline void dec_load_head(dec_unit u[DEC_NC], global const stor_t *p, long row, uint lane,
                                 int aligned)
{
    _Pragma("unroll")
    for (uint c = 0; c < DEC_NC; c++)
        u[c] = row >= 0 ? dec_load(p, (ulong)row, (c * OCLF_TPK + lane) * DEC_KE, aligned)
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

/* This work-item's share of each row's dot product with one key. */
static inline void dec_score(float s[OCLF_QR], const dec_unit qv[OCLF_QR][DEC_NC],
                             const dec_unit kv[DEC_NC])
{
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++) {
        dec_unit dv = qv[r][0] * kv[0];
        _Pragma("unroll")
        for (uint c = 1; c < DEC_NC; c++)
            dv = fma(qv[r][c], kv[c], dv);
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
    dec_load_head(vv, v, vrow, lane, OCLF_ALIGNED);
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
        if (has_drop)
            pk = attn_drop(pk, drop_p, dscale, seed, doff, j, (ulong)(qs + rw[r].i), rw[r].h);
        _Pragma("unroll")
        for (uint c = 0; c < DEC_NC; c++)
            acc[r][c] = fma((dec_unit)(pk), vv[c], acc[r][c]);
    }
}

/* Row r's slots merged through local memory (every work-item calls it;
 * it has barriers), then written by the first slot's work-items: the
 * partition's normalized share and LSE with a split, else the output with
 * the sink added and the LSE. */
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
    if (slot != 0 || !rw.active)
        return;
    float ls = 0.0f;
    _Pragma("unroll")
    for (uint s = 0; s < DEC_KS; s++)
        ls += ll[s];
    dec_unit out[DEC_NC];
    _Pragma("unroll")
    for (uint c = 0; c < DEC_NC; c++) {
        out[c] = (dec_unit)(0.0f);
        _Pragma("unroll")
        for (uint s = 0; s < DEC_KS; s++)
            out[c] += OCLF_CAT(vload, DEC_KE)(0, la + s * DEC_DPU + (c * OCLF_TPK + lane) * DEC_KE);
    }
    const uint h = rw.h;
    if (nparts > 1) {
        const ulong row = ((ulong)p * total_q + (ulong)t) * hq + h;
        const float pinv = ls > 0.0f ? 1.0f / ls : 0.0f;
        _Pragma("unroll")
        for (uint c = 0; c < DEC_NC; c++) {
            float e[DEC_KE];
            OCLF_CAT(vstore, DEC_KE)(out[c] * pinv, 0, e);
            const uint e0 = (c * OCLF_TPK + lane) * DEC_KE;
            _Pragma("unroll")
            for (uint x = 0; x < DEC_KE && e0 + x < OCLF_HD; x++)
                pout[row * OCLF_HD + e0 + x] = e[x];
        }
        if (lane == 0)
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
    for (uint c = 0; c < DEC_NC; c++) {
        float e[DEC_KE];
        OCLF_CAT(vstore, DEC_KE)(out[c] * inv, 0, e);
        const uint e0 = (c * OCLF_TPK + lane) * DEC_KE;
        _Pragma("unroll")
        for (uint x = 0; x < DEC_KE && e0 + x < OCLF_HD; x++)
            ST(o, orow + e0 + x, e[x]);
    }
    if (has_lse && lane == 0)
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
    dec_unit qv[OCLF_QR][DEC_NC], acc[OCLF_QR][DEC_NC];
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
        dec_load_head(qv[r], q, qrow, lane, 0);
        _Pragma("unroll")
        for (uint c = 0; c < DEC_NC; c++) {
            if (slot == 0)
                OCLF_CAT(vstore, DEC_KE)(qv[r][c], 0, stage + r * DEC_DPU + (c * OCLF_TPK + lane) * DEC_KE);
            acc[r][c] = (dec_unit)(0.0f);
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++)
        _Pragma("unroll")
        for (uint c = 0; c < DEC_NC; c++)
            qv[r][c] = OCLF_CAT(vload, DEC_KE)(0, stage + r * DEC_DPU + (c * OCLF_TPK + lane) * DEC_KE);
    /* (the reductions below reuse `stage`) */
    barrier(CLK_LOCAL_MEM_FENCE);
    const float dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f;
    const ulong khead = kh * khs, vhead = kh * vhs;
    for (long j0 = jlo; j0 <= jhi; j0 += DEC_KS) {
        const long j = j0 + slot;
        /* each key's slot, resolved once for its work-items, in one of two
         * halves in turn: the barrier of the next step orders this step's
         * reads before the next write to the same half */
        local long *lt = ltok + 4 + (((j0 - jlo) / DEC_KS) & 1) * DEC_KS;
        if (lane == 0)
            lt[slot] = j <= jhi ? dec_key_token((uint)j, ks, bt, btrow, bs, nblk) : -1;
        barrier(CLK_LOCAL_MEM_FENCE);
        const long tok = lt[slot];
        dec_unit kv[DEC_NC];
        dec_load_head(kv, k, tok >= 0 ? (long)(ko + (ulong)tok * kts + khead) : -1, lane,
                      OCLF_ALIGNED);
        float x[OCLF_QR];
        dec_score(x, qv, kv);
        oclf_seg_sum_n(x, OCLF_QR, OCLF_TPK, lid, OCLF_WGS, stage);
        _Pragma("unroll")
        for (uint r = 0; r < OCLF_QR; r++)
            x[r] = tok >= 0 && rw[r].active ? attn_score(scale * x[r], j, rw[r].i + shift, left,
                                                         right, cap, rw[r].slope)
                                            : -INFINITY;
        dec_accumulate(m, l, acc, x, v, tok >= 0 ? (long)(vo + (ulong)tok * vts + vhead) : -1,
                       lane, rw, j, qs, drop_p, dscale, seed, doff, has_drop);
    }
    _Pragma("unroll")
    for (uint r = 0; r < OCLF_QR; r++)
        dec_finish(m[r], l[r], acc[r], rw[r], lid, qs + rw[r].i, hk * grp, p, nparts, total_q,
                   pout, plse, sinks, sio, has_sinks, o, oo, ots, ohs, lse, lso, lss, has_lse,
                   stage);
}
