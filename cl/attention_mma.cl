/*
 * Prefill attention on matrix-unit fragments (STAGE 3): attention_mma,
 * with the arguments of attention_fused (attention.cl includes this file
 * in its place).
 *
 * A work-group takes OCLF_WGS query rows of one query head of one
 * sequence: OCLF_WGS / 16 warps of 32 work-items, each warp 16 rows. The
 * keys the group's rows can see go through local memory OCLF_BK at a time
 * (K as it lies, V transposed), and every warp computes
 *   S = Q K^T  as OCLF_BK / 8 fragments of 16 rows x 8 keys (f32),
 *   O += P V   as OCLF_HD / 8 fragments of 16 rows x 8 columns (f32),
 * with cl/mma.h's m16n8k16 product, its A operand Q (loaded once, into
 * registers or local memory: OCLF_FA_QL) and then P. The online softmax
 * runs on the S
 * fragments themselves: a lane holds two rows (g and g + 8) of them, and
 * the row's max over the four lanes that share it (the same g) comes from
 * two butterfly shuffles; the row sums stay per lane until the end. P is
 * rounded to the dtype into the A-fragment layout in registers: the C
 * elements of key fragments 2s and 2s + 1 are exactly the A elements of
 * key step s, so no data moves between lanes.
 *
 * Scores are scaled and masked, and where the build has OCLF_FA_SCORE go
 * through softcap and ALiBi (attn_score); a tile that every row of the
 * group sees whole needs no mask. With OCLF_FA_DROP dropout (attn_drop)
 * applies to each probability of P after it is counted in the row's sum.
 * Both are build options, set by the host from the call, so the common
 * build's tile loop holds neither tanh nor Philox. Sinks join each row's
 * sum at the end, before the output and the LSE, as in attention_fused.
 * The softmax runs in base 2 (scores times log2 e, exp2), the LSE is
 * converted back. Keys outside the group's visible range are never
 * loaded: the loop starts at the first visible key and ends at the last
 * (causal: a group stops at its last row's diagonal).
 *
 * Local layout (the layout of linear's matrix-unit structure): a K row
 * holds its head as words of two consecutive elements, and within each
 * run of 32 elements the words are permuted so that lane t = lane % 4 finds
 * its B-fragment words of two k16 steps at words 4t..4t+3 of the run (one
 * 16-byte local load): pair p of a run is word p / 4 of 16-byte group p % 4,
 * and the groups are swizzled by row (fa_group). V is stored transposed,
 * a row per column of the head holding its keys' pairs the same way, so
 * P V reads its B fragments alike. Rows are 16 words apart modulo 32
 * banks: the eight lanes of a 16-byte phase (two rows, four t) touch every
 * bank once.
 *
 * With OCLF_PAGED 1 the keys come from a paged cache (attention.cl's
 * attn_key_token): a tile's token addresses are resolved once into `ltok`,
 * and a key whose block lies outside the cache stages as zeros and is
 * masked. There is no split of the keys (PART): chunked prefill has rows
 * enough for the device.
 *
 * Every work-item of the group runs every loop the same number of times
 * (cl/mma.h's emulation synchronises the group in each product and
 * shuffle); rows past the sequence compute on zeros and store nothing.
 */
#include "mma.h"
#if OCLF_DTYPE == 0
#error "the matrix-unit structure takes f16 or bf16 operands"
#endif
#ifndef OCLF_HD
#error "the matrix-unit structure needs the head dim OCLF_HD"
#endif
#if OCLF_HD % 32 || OCLF_BK % 32 || OCLF_WGS % 16
#error "OCLF_HD and OCLF_BK must be multiples of 32, OCLF_WGS of 16"
#endif

#ifndef OCLF_FA_SCORE
#define OCLF_FA_SCORE 1 /* softcap and ALiBi compiled in (the call has either) */
#endif
#ifndef OCLF_FA_DROP
#define OCLF_FA_DROP 1 /* dropout compiled in (the call has it) */
#endif

/* Where the warps' query fragments live: 0 registers (loaded once), 1
 * local memory, each lane's own words stored once and read back with
 * 16-byte loads every tile (fewer registers, more local traffic). */
#ifndef OCLF_FA_QL
#define OCLF_FA_QL 0
#endif

#define FA_WARPS (OCLF_WGS / 16)
#define FA_ITEMS (32 * FA_WARPS)
/* k16 steps of Q K^T, key fragments of S, column fragments of O */
#define FA_KSTEPS (OCLF_HD / 16)
#define FA_NK (OCLF_BK / 8)
#define FA_ND (OCLF_HD / 8)
/* words of a K row and of a transposed V row (16 modulo 32) */
#define FA_KROW (OCLF_HD / 2 + (OCLF_HD / 2 % 32 == 0 ? 16 : 0))
#define FA_VROW (OCLF_BK / 2 + (OCLF_BK / 2 % 32 == 0 ? 16 : 0))
/* a tile's K runs (one key, 32 elements) and V pieces (two keys, 8
 * columns), and how many of each a work-item stages */
#define FA_KRUNS (OCLF_BK * (OCLF_HD / 32))
#define FA_VPIECES (OCLF_BK / 2 * (OCLF_HD / 8))
#define FA_KPER ((FA_KRUNS + FA_ITEMS - 1) / FA_ITEMS)
#define FA_VPER ((FA_VPIECES + FA_ITEMS - 1) / FA_ITEMS)
/* The kernel's loops over fragments: unrolled where the instruction is
 * native (the fragments then stay in registers); kept as loops in the
 * emulation, whose every product holds two barriers (unrolled, the CPU
 * compiler's work-item loops around them, and the copies of the score and
 * dropout code, grow with each fragment: minutes of compile time). */
#if OCLF_MMA
#define FA_UNROLL _Pragma("unroll")
#else
#define FA_UNROLL _Pragma("unroll 1")
#endif

/* The word of 16-byte group `grp` (0..3) of the run whose first word is
 * `base`, in local row `row`. */
static inline uint fa_group(uint row, uint base, uint grp)
{
    return base + 4u * (grp ^ ((row >> 1) & 3u));
}

/* Eight elements at p as bits, two a word: one 16-byte load in the aligned
 * build. */
static inline uint4 fa_ld16(global const ushort *p)
{
#if OCLF_ALIGNED
    return *(global const uint4 *)p;
#else
    return as_uint4(LD16V(8, p));
#endif
}

/* Elements i and i + 1 at p as one word, the first low. */
static inline uint fa_word(global const ushort *p, ulong i)
{
    return (uint)p[i] | ((uint)p[i + 1] << 16);
}

/* Two f32 values rounded to the dtype, one word, a low. */
static inline uint fa_pack(float a, float b) { return oclf_pack2_16(a, b, OCLF_DTYPE == 2); }

/* D = A B + D in the dtype's instruction. */
static inline void fa_mma(float d[4], const uint a[4], uint b0, uint b1, uint lane,
                          local uint *scratch)
{
    const uint b[2] = {b0, b1};
#if OCLF_DTYPE == 1
    oclf_mma_m16n8k16_f16(d, a, b, d, lane, scratch);
#else
    oclf_mma_m16n8k16_bf16(d, a, b, d, lane, scratch);
#endif
}

/* Keys [j0, j0 + BK) into kl (a row per key) and vl (a row per column of
 * the head), zeros for keys past jhi. kb and vb: element 0 of the
 * sequence's first key in k and v. */
static inline void fa_stage(local uint *kl, local uint *vl, global const ushort *k, ulong kb,
                            ulong kts, global const ushort *v, ulong vb, ulong vts, long j0,
                            long jhi, const local long *ltok, uint lid)
{
#pragma unroll
    for (uint u = 0; u < FA_KPER; u++) {
        const uint e = lid + u * FA_ITEMS;
        if (e < FA_KRUNS) {
            const uint row = e / (OCLF_HD / 32), c32 = e % (OCLF_HD / 32);
            uint4 p0 = (uint4)(0u), p1 = p0, p2 = p0, p3 = p0;
#if OCLF_PAGED
            if (ltok[row] >= 0) {
                global const ushort *q = k + kb + (ulong)ltok[row] * kts + 32 * c32;
#else
            if (j0 + row <= jhi) {
                global const ushort *q = k + kb + (ulong)(j0 + row) * kts + 32 * c32;
#endif
                p0 = fa_ld16(q);
                p1 = fa_ld16(q + 8);
                p2 = fa_ld16(q + 16);
                p3 = fa_ld16(q + 24);
            }
            /* group t of the run: pairs t, t + 4, t + 8, t + 12 */
            local uint *d = kl + row * FA_KROW;
            const uint base = 16 * c32;
            *(local uint4 *)(d + fa_group(row, base, 0)) = (uint4)(p0.s0, p1.s0, p2.s0, p3.s0);
            *(local uint4 *)(d + fa_group(row, base, 1)) = (uint4)(p0.s1, p1.s1, p2.s1, p3.s1);
            *(local uint4 *)(d + fa_group(row, base, 2)) = (uint4)(p0.s2, p1.s2, p2.s2, p3.s2);
            *(local uint4 *)(d + fa_group(row, base, 3)) = (uint4)(p0.s3, p1.s3, p2.s3, p3.s3);
        }
    }
#pragma unroll
    for (uint u = 0; u < FA_VPER; u++) {
        const uint e = lid + u * FA_ITEMS;
        if (e < FA_VPIECES) {
            /* keys 2 kp and 2 kp + 1, columns 8 cb .. 8 cb + 7 */
            const uint kp = e / (OCLF_HD / 8), cb = e % (OCLF_HD / 8);
            const long j = j0 + 2 * (long)kp;
            uint4 lo4 = (uint4)(0u), hi4 = lo4;
#if OCLF_PAGED
            const long t0 = ltok[2 * kp], t1 = ltok[2 * kp + 1];
#else
            const long t0 = j <= jhi ? j : -1, t1 = j + 1 <= jhi ? j + 1 : -1;
#endif
            if (t0 >= 0)
                lo4 = fa_ld16(v + vb + (ulong)t0 * vts + 8 * cb);
            if (t1 >= 0)
                hi4 = fa_ld16(v + vb + (ulong)t1 * vts + 8 * cb);
            /* column c's word: key 2 kp's element low, 2 kp + 1's high */
            const uint4 ev = (lo4 & 0xffffu) | (hi4 << 16u), od = (lo4 >> 16u) | (hi4 & 0xffff0000u);
            const uint8 w = (uint8)(ev.s0, od.s0, ev.s1, od.s1, ev.s2, od.s2, ev.s3, od.s3);
            /* pair p of its run of 32 keys: word p / 4 of group p % 4 */
            const uint p = kp % 16, base = 16 * (kp / 16);
            local uint *d = vl + (8 * cb) * FA_VROW + p / 4;
            d[0 * FA_VROW + fa_group(0, base, p % 4)] = w.s0;
            d[1 * FA_VROW + fa_group(1, base, p % 4)] = w.s1;
            d[2 * FA_VROW + fa_group(2, base, p % 4)] = w.s2;
            d[3 * FA_VROW + fa_group(3, base, p % 4)] = w.s3;
            d[4 * FA_VROW + fa_group(4, base, p % 4)] = w.s4;
            d[5 * FA_VROW + fa_group(5, base, p % 4)] = w.s5;
            d[6 * FA_VROW + fa_group(6, base, p % 4)] = w.s6;
            d[7 * FA_VROW + fa_group(7, base, p % 4)] = w.s7;
        }
    }
}

kernel void attention_mma(ATTENTION_KERNEL_ARGS)
{
    local uint kl[OCLF_BK * FA_KROW], vl[OCLF_HD * FA_VROW];
    const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32;
    const uint g = lane >> 2, t4 = lane & 3u;
#if OCLF_MMA
    /* (the native instructions take no scratch) */
    local uint *scr = kl;
    local float *sscr = (local float *)kl;
#else
    local uint mscratch[FA_WARPS * OCLF_MMA_SCRATCH_WORDS];
    local float sscratch[FA_WARPS * 32];
    local uint *scr = mscratch + warp * OCLF_MMA_SCRATCH_WORDS;
    local float *sscr = sscratch + warp * 32;
#endif
    const ulong gid = get_group_id(0);
    const uint hq = hk * grp, qb = (uint)(gid % nqb), h = (uint)((gid / nqb) % hq);
    const uint b = (uint)(gid / nqb / hq), kh = h / grp;
    long qs, sq, ks, sk;
    attn_seq(cuq, cuqo, b, total_q, &qs, &sq);
#if OCLF_PAGED
    /* total_k is the block table's reach; cuk holds the key counts */
    ks = 0;
    sk = clamp((long)cuk[cuko + b], 0L, (long)total_k);
    const ulong btrow = bto + (ulong)b * bts;
#else
    attn_seq(cuk, cuko, b, total_k, &ks, &sk);
#endif
    sq = min(sq, (long)max_sq);
    const long r0 = (long)qb * OCLF_WGS;
    /* the whole group leaves together, before any barrier */
    if (r0 >= sq)
        return;
    const long shift = sk - sq, i1 = min(r0 + OCLF_WGS, sq) - 1;
    long jlo, jhi;
    attn_key_range(r0, i1, sk, shift, left, right, 1, 0, 0, &jlo, &jhi);

    /* this lane's rows: g and g + 8 of its warp's 16 */
    const long ia = r0 + warp * 16 + g, ib = ia + 8;
    const int va = ia < sq, vb = ib < sq;
    global const ushort *qp = (global const ushort *)q;
    const ulong qra = qo + (ulong)(qs + ia) * qts + h * qhs, qrb = qra + 8 * qts;
#if OCLF_FA_QL
    /* group t of each run of rows g and g + 8: this lane's own words, read
     * back by this lane alone */
    local uint ql[OCLF_WGS * FA_KROW];
    local uint *qlw = ql + (warp * 16 + g) * FA_KROW;
FA_UNROLL
    for (uint c32 = 0; c32 < OCLF_HD / 32; c32++) {
        const uint c = 32 * c32 + 2 * t4, off = fa_group(g, 16 * c32, t4);
        *(local uint4 *)(qlw + off) =
            va ? (uint4)(fa_word(qp, qra + c), fa_word(qp, qra + c + 8),
                         fa_word(qp, qra + c + 16), fa_word(qp, qra + c + 24))
               : (uint4)(0u);
        *(local uint4 *)(qlw + 8 * FA_KROW + off) =
            vb ? (uint4)(fa_word(qp, qrb + c), fa_word(qp, qrb + c + 8),
                         fa_word(qp, qrb + c + 16), fa_word(qp, qrb + c + 24))
               : (uint4)(0u);
    }
#else
    uint qa[FA_KSTEPS][4];
FA_UNROLL
    for (uint s = 0; s < FA_KSTEPS; s++) {
        const uint c = 16 * s + 2 * t4;
        qa[s][0] = va ? fa_word(qp, qra + c) : 0u;
        qa[s][1] = vb ? fa_word(qp, qrb + c) : 0u;
        qa[s][2] = va ? fa_word(qp, qra + c + 8) : 0u;
        qa[s][3] = vb ? fa_word(qp, qrb + c + 8) : 0u;
    }
#endif
    float acc[FA_ND][4];
FA_UNROLL
    for (uint n = 0; n < FA_ND; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const long diag[2] = {ia + shift, ib + shift};
    const float slope = has_alibi ? slopes[slo + h] : 0.0f;
    const float dscale = has_drop ? 1.0f / (1.0f - drop_p) : 1.0f, scale2 = scale * M_LOG2E_F;
    const ulong kb = ko + (ulong)ks * kts + kh * khs, vbase = vo + (ulong)ks * vts + kh * vhs;
    global const ushort *kp = (global const ushort *)k, *vp = (global const ushort *)v;

    for (long j0 = jlo; j0 <= jhi; j0 += OCLF_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
#if OCLF_PAGED
        /* the tile's slots in the cache, -1 past the range or the cache */
        for (uint kk = lid; kk < OCLF_BK; kk += FA_ITEMS)
            ltok[kk] = j0 + kk <= jhi ? attn_key_token(j0 + kk, 0, bt, btrow, bs, nblk) : -1;
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        fa_stage(kl, vl, kp, kb, kts, vp, vbase, vts, j0, jhi, ltok, lid);
        barrier(CLK_LOCAL_MEM_FENCE);

        float s[FA_NK][4];
FA_UNROLL
        for (uint j = 0; j < FA_NK; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        FA_UNROLL
        for (uint c32 = 0; c32 < OCLF_HD / 32; c32++) {
            /* rows g of fragments that start at multiples of 8 share row
             * g's swizzle */
            const uint off = fa_group(g, 16 * c32, t4);
#if OCLF_FA_QL
            const uint4 alo = *(const local uint4 *)(qlw + off);
            const uint4 ahi = *(const local uint4 *)(qlw + 8 * FA_KROW + off);
            const uint a0[4] = {alo.s0, ahi.s0, alo.s1, ahi.s1};
            const uint a1[4] = {alo.s2, ahi.s2, alo.s3, ahi.s3};
#else
            const uint *a0 = qa[2 * c32], *a1 = qa[2 * c32 + 1];
#endif
            FA_UNROLL
            for (uint j = 0; j < FA_NK; j++) {
                const uint4 bw = *(const local uint4 *)(kl + (8 * j + g) * FA_KROW + off);
                fa_mma(s[j], a0, bw.s0, bw.s1, lane, scr);
                fa_mma(s[j], a1, bw.s2, bw.s3, lane, scr);
            }
        }

        /* A tile that every row of the group sees whole needs no mask;
         * else each row keeps the keys j0 + [klo, khi] of the tile */
        const long jend = j0 + OCLF_BK - 1;
        const int whole = jend <= jhi && (left < 0 || j0 >= i1 + shift - left) &&
                          (right < 0 || jend <= r0 + shift + right);
        int klo[2], khi[2];
FA_UNROLL
        for (uint r = 0; r < 2; r++) {
            const long lo = left >= 0 ? diag[r] - left : j0;
            const long hi = min(jhi, right >= 0 ? diag[r] + right : jhi);
            klo[r] = (int)clamp(lo - j0, 0L, (long)OCLF_BK);
            khi[r] = (int)clamp(hi - j0, -1L, (long)OCLF_BK - 1);
        }
        float mx[2] = {-INFINITY, -INFINITY};
FA_UNROLL
        for (uint j = 0; j < FA_NK; j++)
FA_UNROLL
            for (uint i = 0; i < 4; i++) {
                const int kk = (int)(8 * j + 2 * t4 + (i & 1u));
#if OCLF_FA_SCORE
                const long key = j0 + kk;
                float x = s[j][i] * scale;
                x = key > jhi ? -INFINITY
                              : attn_score(x, key, diag[i >> 1], left, right, cap, slope);
                x *= M_LOG2E_F;
#else
                float x = s[j][i] * scale2;
                if (!whole && (kk < klo[i >> 1] || kk > khi[i >> 1]))
                    x = -INFINITY;
#endif
#if OCLF_PAGED
                if (ltok[kk] < 0)
                    x = -INFINITY;
#endif
                s[j][i] = x;
                mx[i >> 1] = fmax(mx[i >> 1], x);
            }
        /* each row's max over its four lanes; its new running max */
        float base[2];
FA_UNROLL
        for (uint r = 0; r < 2; r++) {
            mx[r] = fmax(mx[r], oclf_shfl_xor32(mx[r], 1u, lane, sscr));
            mx[r] = fmax(mx[r], oclf_shfl_xor32(mx[r], 2u, lane, sscr));
            const float mn = fmax(m[r], mx[r]);
            /* a row that has seen no key yet keeps nothing to rescale, and
             * its probabilities are 0 (exp(-inf)) */
            const float cm = mn == -INFINITY ? 1.0f : oclf_exp2(m[r] - mn);
            base[r] = mn == -INFINITY ? 0.0f : mn;
            l[r] *= cm;
            m[r] = mn;
FA_UNROLL
            for (uint n = 0; n < FA_ND; n++) {
                acc[n][2 * r] *= cm;
                acc[n][2 * r + 1] *= cm;
            }
        }
        /* P into the A fragments of the key steps: fragment j's elements
         * are a[0], a[1] (j even) or a[2], a[3] (j odd) of step j / 2 */
        uint pa[FA_NK / 2][4];
FA_UNROLL
        for (uint j = 0; j < FA_NK; j++) {
            float pv[4];
FA_UNROLL
            for (uint i = 0; i < 4; i++) {
                float pk = oclf_exp2(s[j][i] - base[i >> 1]);
                l[i >> 1] += pk;
#if OCLF_FA_DROP
                if (has_drop && pk > 0.0f)
                    pk = attn_drop(pk, drop_p, dscale, seed, doff, j0 + 8 * j + 2 * t4 + (i & 1u),
                                   (ulong)(qs + (i < 2 ? ia : ib)), h);
#endif
                pv[i] = pk;
            }
            pa[j / 2][2 * (j & 1u)] = fa_pack(pv[0], pv[1]);
            pa[j / 2][2 * (j & 1u) + 1] = fa_pack(pv[2], pv[3]);
        }
        FA_UNROLL
        for (uint c32 = 0; c32 < OCLF_BK / 32; c32++) {
            const uint off = fa_group(g, 16 * c32, t4);
            FA_UNROLL
            for (uint n = 0; n < FA_ND; n++) {
                const uint4 bw = *(const local uint4 *)(vl + (8 * n + g) * FA_VROW + off);
                fa_mma(acc[n], pa[2 * c32], bw.s0, bw.s1, lane, scr);
                fa_mma(acc[n], pa[2 * c32 + 1], bw.s2, bw.s3, lane, scr);
            }
        }
    }

    /* the rows' sums over their four lanes, the sinks, the output */
    const float sv = has_sinks ? sinks[sio + h] * M_LOG2E_F : -INFINITY;
    float inv[2];
FA_UNROLL
    for (uint r = 0; r < 2; r++) {
        l[r] += oclf_shfl_xor32(l[r], 1u, lane, sscr);
        l[r] += oclf_shfl_xor32(l[r], 2u, lane, sscr);
        const float mn = fmax(m[r], sv);
        if (has_sinks && mn > -INFINITY) {
            const float cm = oclf_exp2(m[r] - mn);
            l[r] = l[r] * cm + oclf_exp2(sv - mn);
            m[r] = mn;
FA_UNROLL
            for (uint n = 0; n < FA_ND; n++) {
                acc[n][2 * r] *= cm;
                acc[n][2 * r + 1] *= cm;
            }
        }
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    const ulong ora = oo + (ulong)(qs + ia) * ots + h * ohs, orb = ora + 8 * ots;
FA_UNROLL
    for (uint n = 0; n < FA_ND; n++) {
        const uint c = 8 * n + 2 * t4;
        if (va) {
            ST(o, ora + c, acc[n][0] * inv[0]);
            ST(o, ora + c + 1, acc[n][1] * inv[0]);
        }
        if (vb) {
            ST(o, orb + c, acc[n][2] * inv[1]);
            ST(o, orb + c + 1, acc[n][3] * inv[1]);
        }
    }
    if (has_lse && t4 == 0) {
        if (va)
            lse[lso + h * lss + (ulong)(qs + ia)] =
                l[0] > 0.0f ? (m[0] + log2(l[0])) * M_LN2_F : -INFINITY;
        if (vb)
            lse[lso + h * lss + (ulong)(qs + ib)] =
                l[1] > 0.0f ? (m[1] + log2(l[1])) * M_LN2_F : -INFINITY;
    }
}
