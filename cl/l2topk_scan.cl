/* L2 top-k: the register-block micro-kernel and the fused scan. */

/* ---- register block --------------------------------------------------------- */
/* The block is written out by the preprocessor: OCLF_QB x OCLF_RB named
 * accumulators, never a private array indexed in a loop, so the compiler
 * keeps them all in vector registers. */
#if OCLF_QB == 1
#define FOR_Q(M) M(0)
#define FOR_I(M, j) M(0, j)
#elif OCLF_QB == 2
#define FOR_Q(M) M(0) M(1)
#define FOR_I(M, j) M(0, j) M(1, j)
#elif OCLF_QB == 3
#define FOR_Q(M) M(0) M(1) M(2)
#define FOR_I(M, j) M(0, j) M(1, j) M(2, j)
#elif OCLF_QB == 4
#define FOR_Q(M) M(0) M(1) M(2) M(3)
#define FOR_I(M, j) M(0, j) M(1, j) M(2, j) M(3, j)
#else
#error "OCLF_QB must be 1, 2, 3 or 4"
#endif
#if OCLF_RB == 1
#define FOR_R(M) M(0)
#define FOR_IJ(M) FOR_I(M, 0)
#elif OCLF_RB == 2
#define FOR_R(M) M(0) M(1)
#define FOR_IJ(M) FOR_I(M, 0) FOR_I(M, 1)
#elif OCLF_RB == 3
#define FOR_R(M) M(0) M(1) M(2)
#define FOR_IJ(M) FOR_I(M, 0) FOR_I(M, 1) FOR_I(M, 2)
#elif OCLF_RB == 4
#define FOR_R(M) M(0) M(1) M(2) M(3)
#define FOR_IJ(M) FOR_I(M, 0) FOR_I(M, 1) FOR_I(M, 2) FOR_I(M, 3)
#elif OCLF_RB == 8
#define FOR_R(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define FOR_IJ(M) FOR_I(M, 0) FOR_I(M, 1) FOR_I(M, 2) FOR_I(M, 3) \
                  FOR_I(M, 4) FOR_I(M, 5) FOR_I(M, 6) FOR_I(M, 7)
#else
#error "OCLF_RB must be 1, 2, 3, 4 or 8"
#endif

#if OCLF_FORMULA == 0
/* direct: sum of (q - x)^2, exact to fp32 rounding of each term */
#define STEP(a, vq, vx) fma((vq) - (vx), (vq) - (vx), (a))
#else
/* expansion: the dot product here, |x|^2 beside it (NORM_*) */
#define STEP(a, vq, vx) fma((vq), (vx), (a))
#endif

#if OCLF_QLOCAL
#define DECL_QP(i) __local const float *qp##i = lq + (qb * OCLF_QB + (i)) * d;
#else
#define DECL_QP(i) const __global float *qp##i = q + qo + min(qbase + (ulong)(i), nq - 1) * qs;
#endif
#define DECL_XP(j) const __global stor_t *xp##j = x + xo + min(rbase + (ulong)(j), r1 - 1) * xs;
#define DECL_ACC(i, j) floatv a##i##j = VSPLAT(0.0f);
#define LOAD_Q(i) const floatv vq##i = VLOADQ(qp##i + c);
#define LOAD_X(j) const floatv vx##j = LDV(xp##j, c);
#define DO_STEP(i, j) a##i##j = STEP(a##i##j, vq##i, vx##j);
#define DECL_SUM(i, j) float s##i##j = VSUM(a##i##j);
#define LOAD_QS(i) const float sq##i = qp##i[c];
#define LOAD_XS(j) const float sx##j = LD(xp##j, c);
#define DO_STEPS(i, j) s##i##j = STEP(s##i##j, sq##i, sx##j);
#define NONE(j)
#if OCLF_FORMULA == 0
/* the tile holds the keys */
#define STORE_TILE(i, j)                                                       \
    tile[(qb * OCLF_QB + (i)) * tr + rb * OCLF_RB + (j)] = dist_key(s##i##j);
#else
/* |x|^2 of the block's rows from the x vectors already in registers, in
 * x_norm's order, so the rows are read once; precomputed norms (has_xn)
 * replace it. The tile holds -2 q.x, which is exact, and phase 2 forms
 * (|q|^2 + |x|^2) + (-2 q.x), rounding once after the norms are added: the
 * value the unfused path forms from the GEMM's -2 q.x. */
#define NORM_DECL(j) floatv na##j = VSPLAT(0.0f);
#define NORM_STEP(j) na##j = fma(vx##j, vx##j, na##j);
#define NORM_SUM(j) float nx##j = VSUM(na##j);
#define NORM_STEPS(j) nx##j = fma(sx##j, sx##j, nx##j);
#define NORM_STORE(j) lxn[rb * OCLF_RB + (j)] = nx##j;
#define NORM_GIVEN(j)                                                          \
    lxn[rb * OCLF_RB + (j)] = xn[xno + min(rbase + (ulong)(j), r1 - 1)];
#define STORE_TILE(i, j)                                                       \
    tile[(qb * OCLF_QB + (i)) * tr + rb * OCLF_RB + (j)] = as_uint(-2.0f * s##i##j);
#endif
/* The register block's loop over D, with ND/NS/NSUM/NSS adding the rows'
 * norms (or NONE). */
#define BLOCK(ND, NS, NSUM, NSS)                                               \
    FOR_IJ(DECL_ACC)                                                           \
    FOR_R(ND)                                                                  \
    uint c = 0;                                                                \
    for (; c + OCLF_VEC <= d; c += OCLF_VEC) {                                 \
        FOR_Q(LOAD_Q)                                                          \
        FOR_R(LOAD_X)                                                          \
        FOR_IJ(DO_STEP)                                                        \
        FOR_R(NS)                                                              \
    }                                                                          \
    BLOCK_TAIL(NSUM, NSS)

/* The end of a register block from the column in `c` on: the vector sums,
 * the scalar columns, the tile's keys. */
#define BLOCK_TAIL(NSUM, NSS)                                                  \
    FOR_IJ(DECL_SUM)                                                           \
    FOR_R(NSUM)                                                                \
    for (; c < d; c++) {                                                       \
        FOR_Q(LOAD_QS)                                                         \
        FOR_R(LOAD_XS)                                                         \
        FOR_IJ(DO_STEPS)                                                       \
        FOR_R(NSS)                                                             \
    }                                                                          \
    FOR_IJ(STORE_TILE)

#ifndef OCLF_XSTAGE
#define OCLF_XSTAGE 0
#endif
#if OCLF_XSTAGE
/* XSTAGE: the tile's rows pass through local memory in chunks of
 * OCLF_XSTAGE columns, loaded by the whole work-group with consecutive
 * work-items on consecutive elements of a row (coalesced on a GPU, where a
 * work-item reading its own rows touches as many rows per load as the
 * warp has row blocks). The row stride in local memory is one float longer
 * than a chunk so that the row blocks' reads fall in different banks. The
 * accumulators live across the chunks and the sums run in BLOCK's order
 * (whole vectors in column order, VSUM, then the scalar tail, which is read
 * from global memory), so the keys and the norms are BLOCK's bits. */
#define XS_STRIDE (OCLF_XSTAGE + 1)
#if OCLF_VEC == 1
#define VLOADL(p) (*(p))
#else
#define VLOADL(p) OCLF_CAT(vload, OCLF_VEC)(0, (p))
#endif
#define LOAD_QC(i) const floatv vq##i = VLOADQ(qp##i + c0 + c);
#define LOAD_XL(j) const floatv vx##j = VLOADL(lx + (rb * OCLF_RB + (j)) * XS_STRIDE + c);
#define STAGED_BLOCK(ND, NS, NSUM, NSS)                                        \
    FOR_IJ(DECL_ACC)                                                           \
    FOR_R(ND)                                                                  \
    const uint dvec = d / OCLF_VEC * OCLF_VEC;                                 \
    for (uint c0 = 0; c0 < dvec; c0 += OCLF_XSTAGE) {                          \
        const uint dc = min((uint)OCLF_XSTAGE, dvec - c0);                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
        for (uint e = lid; e < tr * dc; e += wgs) {                            \
            const uint r = e / dc, cc = e - r * dc;                            \
            lx[r * XS_STRIDE + cc] = LD(x + xo + min(t0 + r, r1 - 1) * xs, c0 + cc); \
        }                                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
        if (active) {                                                          \
            for (uint c = 0; c < dc; c += OCLF_VEC) {                          \
                FOR_Q(LOAD_QC)                                                 \
                FOR_R(LOAD_XL)                                                 \
                FOR_IJ(DO_STEP)                                                \
                FOR_R(NS)                                                      \
            }                                                                  \
        }                                                                      \
    }                                                                          \
    if (active) {                                                              \
        FOR_R(DECL_XP)                                                         \
        uint c = dvec;                                                         \
        BLOCK_TAIL(NSUM, NSS)
/* (closed by the caller: it stores the norms, then ends the block) */
#endif

/*
 * Fused scan. Work-group (query group, database slice): `qg` queries (a
 * multiple of QB) against rows [slice * per, min(n, (slice + 1) * per)),
 * in tiles of tr = RB * (local size / (qg / QB)) rows:
 *   phase 1  each work-item computes one QB x RB register block of dot
 *            products (or, direct formula, distances) and stores them in
 *            the local tile; for the expansion, the rows' |x|^2 go to local
 *            memory beside it, computed in the same loop from the x vectors
 *            it loads anyway (XNORM, below);
 *   phase 2  work-item j < qg forms the keys of row j of the tile and folds
 *            them into its query's heap (TOPK 0), or the whole group offers
 *            them to the queries' lists in local memory (TOPK 1).
 * Global reads. Consecutive work-items share a row block and differ in query
 * block, so on caching devices a row block comes from memory once and the
 * other qg / QB - 1 loads of it hit the cache; with qg == QB every database
 * byte is loaded exactly once per query group. There is no separate pass
 * over the rows for their norms. The queries: with QLOCAL the group's
 * qg x D floats are copied to local memory once per work-group and every
 * tile reads them there; without it each work-item loads its QB queries
 * from global memory for every tile (cache hits, but loads all the same).
 * XNORM 2 instead sums |x|^2 in a pass over the tile's rows before the
 * block loop (x_norm itself): the rows are read twice, but the plain
 * streaming pass brings them into a CPU's cache for the loop. Who sums
 * |x|^2 in the loop otherwise: 1, the work-items of the first query block,
 * so the fma work is done once per row, as it suits devices that run a
 * group's work-items one after another (the others run the loop without
 * the extra accumulators); 0, every work-item, the first query block
 * storing, so no work-item's control flow differs from its neighbours' (SIMT
 * devices would otherwise run both loops). Either way the sum is x_norm's.
 * Work-group order: group id = slice * ngq + query group, so groups that run
 * together share a slice of the database in the last-level cache.
 * Lists: [query][slice][k], queries counted from the chunk's first; with
 * TOPK 1 they are packed entries in `hi`, sorted (hk is not used), and the
 * local `lists` hold qg lists of k + cap entries.
 */
__kernel void l2_scan(__global const float *q, ulong qo, ulong qs, __global const stor_t *x,
                      ulong xo, ulong xs, __global const float *xn, ulong xno, uint has_xn,
                      __global const uchar *allow, ulong ao, uint has_allow,
                      __global uint *hk, __global long *hi, ulong nq, ulong n, uint d, uint k,
                      uint qg, ulong per, uint nslices, __local uint *tile, __local float *lxn,
                      __local float *lqn, __local float *lq, __local float *lx,
                      __local ulong *lists, __local uint *lcnt, uint cap)
{
    const uint lid = get_local_id(0), wgs = get_local_size(0);
    const uint ngq = (uint)((nq + qg - 1) / qg);
    const uint group = get_group_id(0);
    const uint slice = group / ngq, qgi = group % ngq;
    const uint nqb = qg / OCLF_QB, nrb = wgs / nqb, tr = nrb * OCLF_RB;
    const ulong q0 = (ulong)qgi * qg;
    const uint qcount = (uint)min((ulong)qg, nq - q0);
    const ulong r0 = (ulong)slice * per, r1 = min(n, r0 + per);
    const uint qb = lid % nqb, rb = lid / nqb;
#if !OCLF_QLOCAL
    const ulong qbase = q0 + (ulong)qb * OCLF_QB;
#endif

#if OCLF_TOPK
    /* The group's lists, written to [query][slice][k] of hi (as packed
     * entries) at the end. */
    __global ulong *hl = (__global ulong *)hi + (q0 * nslices + slice) * k;
    lists_clear(lists, k + cap, qcount, lcnt, lid, wgs);
    if (r0 >= r1) {
        for (uint e = lid; e < qcount * k; e += wgs)
            hl[(ulong)(e / k) * nslices * k + e % k] = PACK_EMPTY;
        return; /* uniform across the work-group: no barrier is skipped by some */
    }
#else
    __global uint *myk = hk + ((q0 + lid) * nslices + slice) * k;
    __global long *myi = hi + ((q0 + lid) * nslices + slice) * k;
    uint rootk = KEY_EMPTY;
    long rooti = -1;
    if (lid < qcount)
        heap_clear(myk, myi, k);
    if (r0 >= r1)
        return; /* uniform across the work-group: no barrier is skipped by some */
#endif
#if OCLF_QLOCAL
    /* The group's queries, read from global memory once; the padding
     * queries of a short last group are zeros (their keys are never
     * folded). */
    for (uint e = lid; e < qg * d; e += wgs) {
        const uint r = e / d, c = e - r * d;
        lq[e] = r < qcount ? q[qo + (q0 + r) * qs + c] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#if OCLF_FORMULA == 1
#if OCLF_QLOCAL
    if (lid < qg)
        lqn[lid] = q_norm_local(lq + lid * d, d);
#else
    if (lid < qg)
        lqn[lid] = q_norm(q + qo + min(q0 + lid, nq - 1) * qs, d);
#endif
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

    for (ulong t0 = r0; t0 < r1; t0 += tr) {
#if OCLF_FORMULA == 1 && OCLF_XNORM == 2
        /* A pass over the tile's rows for their norms before the block
         * loop: it re-reads the tile, but as a plain stream that brings the
         * rows into a CPU's cache ahead of the compute-heavy loop (16
         * queries ran about 20% faster this way on POCL than with the norms
         * summed inside the loop). */
        for (uint r = lid; r < tr; r += wgs) {
            const ulong row = min(t0 + r, r1 - 1);
            lxn[r] = has_xn ? xn[xno + row] : x_norm(x + xo + row * xs, d);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        const ulong rbase = t0 + (ulong)rb * OCLF_RB;
        /* Work-items whose whole row block lies past the slice's end (its
         * last, short tile) compute nothing: phase 2 reads only the rows
         * that exist. */
        const int active = lid < nqb * nrb && rbase < r1;
#if OCLF_XSTAGE
        /* Every work-item takes part in the chunk loads and their barriers;
         * the query pointers are clamped, so they are valid for all. */
        {
            FOR_Q(DECL_QP)
#if OCLF_FORMULA == 1 && OCLF_XNORM != 2
            /* The norms are summed by every work-item (the loads are shared
             * anyway), stored by the first query block. */
            STAGED_BLOCK(NORM_DECL, NORM_STEP, NORM_SUM, NORM_STEPS)
                if (qb == 0) {
                    if (has_xn) {
                        FOR_R(NORM_GIVEN)
                    } else {
                        FOR_R(NORM_STORE)
                    }
                }
            }
#else
            STAGED_BLOCK(NONE, NONE, NONE, NONE)
            }
#endif
        }
#else
        if (active) {
            FOR_Q(DECL_QP)
            FOR_R(DECL_XP)
#if OCLF_FORMULA == 1 && OCLF_XNORM == 2
            BLOCK(NONE, NONE, NONE, NONE)
#elif OCLF_FORMULA == 1
            if ((OCLF_XNORM == 0 || qb == 0) && !has_xn) {
                BLOCK(NORM_DECL, NORM_STEP, NORM_SUM, NORM_STEPS)
                if (qb == 0) {
                    FOR_R(NORM_STORE)
                }
            } else {
                BLOCK(NONE, NONE, NONE, NONE)
                if (qb == 0) {
                    FOR_R(NORM_GIVEN)
                }
            }
#else
            BLOCK(NONE, NONE, NONE, NONE)
#endif
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
#if OCLF_TOPK
        /* The whole group offers the tile's keys, consecutive work-items
         * along a query's row of the tile; a flush when a buffer may not
         * hold the next tile (cap >= tr, host-checked). */
        {
            const uint cnt = (uint)min((ulong)tr, r1 - t0);
            for (uint e = lid; e < qcount * cnt; e += wgs) {
                const uint qq = e / cnt, t = e - qq * cnt;
#if OCLF_FORMULA == 1
                const uint key = dist_key((lqn[qq] + lxn[t]) + as_float(tile[qq * tr + t]));
#else
                const uint key = tile[qq * tr + t];
#endif
                if (ROW_ALLOWED(t0 + t))
                    list_offer(lists + qq * (k + cap), lcnt + qq, k, pack_entry(key, t0 + t));
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* one call site: the last tile's flush is the final one (each
             * inlined copy of the network's barrier loops adds to POCL's
             * work-group compile time) */
            lists_flush(lists, k + cap, qcount, lcnt, k,
                        t0 + tr >= r1 || lists_full(lcnt, qcount, cap - tr), lid, wgs);
        }
#else
        if (lid < qcount) {
            const uint cnt = (uint)min((ulong)tr, r1 - t0);
            __local const uint *row = tile + lid * tr;
            for (uint t = 0; t < cnt; t++) {
#if OCLF_FORMULA == 1
                const uint key = dist_key((lqn[lid] + lxn[t]) + as_float(row[t]));
#else
                const uint key = row[t];
#endif
                const long idx = (long)(t0 + t);
                if (kv_less(key, idx, rootk, rooti) && ROW_ALLOWED(t0 + t))
                    rootk = heap_sift(myk, myi, k, key, idx, &rooti);
            }
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#if OCLF_TOPK
    for (uint e = lid; e < qcount * k; e += wgs)
        hl[(ulong)(e / k) * nslices * k + e % k] = lists[e / k * (k + cap) + e % k];
#endif
}
