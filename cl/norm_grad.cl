/*
 * Normalization backward family: the gradients of RMSNorm (optionally with
 * a residual stream's gradient added, which makes it add + RMSNorm's
 * backward) and of LayerNorm.
 *
 * Fused kernels: rms_norm_bwd, layer_norm_bwd (dx and the chunk partials of
 * dw and db, one read of x and dy from memory), then ng_reduce. Unfused
 * building blocks: ng_stats_rms / ng_stats_ln (row statistics into a
 * temporary), ng_colpart (chunk partials of dw and db, reading x and dy
 * again), ng_dx_rms / ng_dx_ln (dx alone), and the same ng_reduce.
 *
 * Determinism. dw and db must come out bit for bit the same whatever the
 * tuning (LAYOUT, WGS, VEC) and on every run, so every value they depend on
 * is computed in an order fixed by the shape alone:
 *  - the row statistics (ng_stats) always load 8 elements at a time into
 *    two sets of 8 sums, whatever OCLF_VEC is, and add the scalar tail and
 *    the lanes in a fixed order;
 *  - each column's partial over a chunk of NG_CHUNK rows is summed in row
 *    order by the one work-item that owns the column within its chunk
 *    (explicit fma, so no compiler choice differs between the vector body
 *    and the scalar tail);
 *  - ng_reduce adds the chunk partials of a column in chunk order.
 * No float atomics. dx itself depends on row reductions whose order follows
 * the tuning (it is only checked against tolerances).
 *
 * Operands are (pointer, element offset, row stride) with 64-bit offsets.
 * Statistics are float4 (k, dm, rstd, 0): xhat = ((x - k) - dm) * rstd,
 * where k is the row's first element for LayerNorm (a shift that keeps the
 * one-pass variance accurate for rows far from zero) and 0 for RMSNorm
 * (dm is 0 too, and xhat is x * rstd exactly).
 */

#include "row_reduce.h"

/* Rows per chunk of the dw/db partials: lib/ops/norm_grad.c has the same
 * constant (NG_CHUNK_ROWS) for the partial buffer's size. */
#define NG_CHUNK 32

/* 8 elements widened to fp32, independent of OCLF_VEC. */
#if OCLF_DTYPE == 0
#define NG_LD8(p) LDFV(8, p)
#elif OCLF_DTYPE == 1
#define NG_LD8(p) WIDEN_F16(8, LD16V(8, (p)))
#else
#define NG_LD8(p) WIDEN_BF16(8, LD16V(8, (p)))
#endif

/* A partial row in global fp32, OCLF_VEC at a time. */
#if OCLF_VEC == 1
#define NG_LDP(p, i) ((p)[(i)])
#define NG_STP(p, i, v) ((p)[(i)] = (v))
#else
#define NG_LDP(p, i) LDFV(OCLF_VEC, (p) + (i))
#define NG_STP(p, i, v) STFV(OCLF_VEC, (p) + (i), (v))
#endif

static inline float ng_sum8(float8 v)
{
    const float4 b = v.lo + v.hi;
    const float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* (k, dm, rstd, 0) of the row at xr, in an order that depends on cols only:
 * two sets of 8 sums taking 8 elements in turn (so a step does not wait for
 * the previous one's addition), the scalar tail, then the lanes in a fixed
 * tree. 8 lanes rather than 16: four 16-float accumulators would crowd a
 * GPU's registers, and the pass is a small part of the row's work. */
static inline float4 ng_stats(global const stor_t *xr, uint cols, float eps, int ln)
{
    const float k = ln ? LD(xr, 0) : 0.0f;
    float8 s = (float8)(0.0f), q = (float8)(0.0f);
    float8 s2 = (float8)(0.0f), q2 = (float8)(0.0f);
    uint i = 0;
    for (; i + 16 <= cols; i += 16) {
        const float8 d = NG_LD8(xr + i) - k;
        const float8 e = NG_LD8(xr + i + 8) - k;
        s += d;
        q = fma(d, d, q);
        s2 += e;
        q2 = fma(e, e, q2);
    }
    if (i + 8 <= cols) {
        const float8 d = NG_LD8(xr + i) - k;
        s += d;
        q = fma(d, d, q);
        i += 8;
    }
    float ts = 0.0f, tq = 0.0f;
    for (; i < cols; i++) {
        const float d = LD(xr, i) - k;
        ts += d;
        tq = fma(d, d, tq);
    }
    const float n = (float)cols;
    const float sq = ng_sum8(q + q2) + tq;
    if (!ln)
        return (float4)(0.0f, 0.0f, rsqrt(sq / n + eps), 0.0f);
    const float dm = (ng_sum8(s + s2) + ts) / n;
    const float var = sq / n - dm * dm;
    return (float4)(k, dm, rsqrt(fmax(var, 0.0f) + eps), 0.0f);
}

/* xhat of x (a float or a floatv) under statistics st. */
#define NG_XHAT(xv, st) ((((xv) - (st).x) - (st).y) * (st).z)

/* One row: with g = dy * w and xhat as above,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) [+ dres]
 * (RMSNorm has no mean(g) term: its forward subtracts no mean), and, when
 * pw / pb are set, the chunk partials pw += dy * xhat, pb += dy (`first`:
 * the chunk's first row starts them from 0). NG_ROW_MEANS is the pass
 * that finds mean(g) and mean(g * xhat) (mg_, mgx_), NG_ROW_WRITE the pass
 * that writes. Every element of dx is written after this work-item read
 * its own dy and dres there, so dx may be dy or dres exactly. Needs lane,
 * nlanes, scratch, cols, xr, dyr, drr, dxr, wp, pw, pb in scope. */
#define NG_ROW_MEANS(LN, st)                                                   \
    floatv ag_ = VSPLAT(0.0f), agx_ = VSPLAT(0.0f);                            \
    float tg_ = 0.0f, tgx_ = 0.0f;                                             \
    FOR_VEC(i, cols) {                                                         \
        const floatv dyv = LDV(dyr, i);                                        \
        const floatv g = wp ? dyv * LDV(wp, i) : dyv;                          \
        const floatv xh = NG_XHAT(LDV(xr, i), st);                             \
        ag_ += g;                                                              \
        agx_ = fma(g, xh, agx_);                                               \
    }                                                                          \
    FOR_TAIL(i, cols) {                                                        \
        const float dyv = LD(dyr, i);                                          \
        const float g = wp ? dyv * LD(wp, i) : dyv;                            \
        const float xh = NG_XHAT(LD(xr, i), st);                               \
        tg_ += g;                                                              \
        tgx_ = fma(g, xh, tgx_);                                               \
    }                                                                          \
    const float mg_ = (LN) ? ROW_REDUCE(VSUM(ag_) + tg_, scratch) / (float)cols : 0.0f; \
    const float mgx_ = ROW_REDUCE(VSUM(agx_) + tgx_, scratch) / (float)cols
#define NG_ROW_WRITE(st, mg, mgx, first)                                       \
    do {                                                                       \
        const float rs_ = (st).z;                                              \
        FOR_VEC(i, cols) {                                                     \
            const floatv dyv = LDV(dyr, i);                                    \
            const floatv g = wp ? dyv * LDV(wp, i) : dyv;                      \
            const floatv xh = NG_XHAT(LDV(xr, i), st);                         \
            floatv d = fma(-xh, (floatv)(mgx), g - (mg)) * rs_;                \
            if (drr)                                                           \
                d += LDV(drr, i);                                              \
            STV(dxr, i, d);                                                    \
            if (pw)                                                            \
                NG_STP(pw, i, fma(dyv, xh, (first) ? VSPLAT(0.0f) : NG_LDP(pw, i))); \
            if (pb)                                                            \
                NG_STP(pb, i, dyv + ((first) ? VSPLAT(0.0f) : NG_LDP(pb, i))); \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            const float dyv = LD(dyr, i);                                      \
            const float g = wp ? dyv * LD(wp, i) : dyv;                        \
            const float xh = NG_XHAT(LD(xr, i), st);                           \
            float d = fma(-xh, (mgx), g - (mg)) * rs_;                         \
            if (drr)                                                           \
                d += LD(drr, i);                                               \
            ST(dxr, i, d);                                                     \
            if (pw)                                                            \
                pw[i] = fma(dyv, xh, (first) ? 0.0f : pw[i]);                  \
            if (pb)                                                            \
                pb[i] = dyv + ((first) ? 0.0f : pb[i]);                        \
        }                                                                      \
    } while (0)

/* LAYOUT 0's fused row: the statistics and the two means in one pass over
 * x, dy and w (ng_stats's sums, in its order, beside those of g and
 * g * (x - k), whose order does not matter: they only reach dx), then the
 * write. With S_g = sum(g) and S_gd = sum(g * (x - k)),
 * sum(g * xhat) = rstd * (S_gd - dm * S_g). */
static inline float4 ng_stats_means(global const stor_t *xr, global const stor_t *dyr,
                                    global const stor_t *wp, uint cols, float eps, int ln,
                                    float *mg, float *mgx)
{
    const float k = ln ? LD(xr, 0) : 0.0f;
    float8 s = (float8)(0.0f), q = (float8)(0.0f), s2 = (float8)(0.0f), q2 = (float8)(0.0f);
    float8 g1 = (float8)(0.0f), gd1 = (float8)(0.0f), g2 = (float8)(0.0f), gd2 = (float8)(0.0f);
    uint i = 0;
    for (; i + 16 <= cols; i += 16) {
        const float8 d = NG_LD8(xr + i) - k;
        const float8 e = NG_LD8(xr + i + 8) - k;
        const float8 ga = wp ? NG_LD8(dyr + i) * NG_LD8(wp + i) : NG_LD8(dyr + i);
        const float8 gb = wp ? NG_LD8(dyr + i + 8) * NG_LD8(wp + i + 8) : NG_LD8(dyr + i + 8);
        s += d;
        q = fma(d, d, q);
        s2 += e;
        q2 = fma(e, e, q2);
        g1 += ga;
        gd1 = fma(ga, d, gd1);
        g2 += gb;
        gd2 = fma(gb, e, gd2);
    }
    if (i + 8 <= cols) {
        const float8 d = NG_LD8(xr + i) - k;
        const float8 ga = wp ? NG_LD8(dyr + i) * NG_LD8(wp + i) : NG_LD8(dyr + i);
        s += d;
        q = fma(d, d, q);
        g1 += ga;
        gd1 = fma(ga, d, gd1);
        i += 8;
    }
    float ts = 0.0f, tq = 0.0f, tg = 0.0f, tgd = 0.0f;
    for (; i < cols; i++) {
        const float d = LD(xr, i) - k;
        const float g = wp ? LD(dyr, i) * LD(wp, i) : LD(dyr, i);
        ts += d;
        tq = fma(d, d, tq);
        tg += g;
        tgd = fma(g, d, tgd);
    }
    /* the statistics exactly as ng_stats computes them */
    const float n = (float)cols;
    const float sq = ng_sum8(q + q2) + tq;
    float dm = 0.0f, rstd;
    if (ln) {
        dm = (ng_sum8(s + s2) + ts) / n;
        const float var = sq / n - dm * dm;
        rstd = rsqrt(fmax(var, 0.0f) + eps);
    } else {
        rstd = rsqrt(sq / n + eps);
    }
    const float sg = ng_sum8(g1 + g2) + tg, sgd = ng_sum8(gd1 + gd2) + tgd;
    *mg = ln ? sg / n : 0.0f;
    *mgx = rstd * (sgd - dm * sg) / n;
    return (float4)(k, dm, rstd, 0.0f);
}

/* Fused: a chunk of NG_CHUNK rows per work-item (LAYOUT 0) or per
 * work-group (LAYOUT 1). part holds the chunk partials, chunk-major:
 * dw's at part[c * cols + j], db's at part[(nchunks + c) * cols + j].
 * LAYOUT 0 reads each row twice (ng_stats_means, NG_ROW_WRITE), from the
 * caches the second time. In LAYOUT 1 the statistics of the chunk's rows come first, a row per lane
 * (their order is fixed per row, so one lane computes a row's whole sum),
 * then the group takes the rows one after another, each lane the same
 * columns of every row, so it alone sums those columns' partials. */
#define NG_FUSED_KERNEL(name, LN)                                              \
    ROW_KERNEL void name(global const stor_t *x, ulong xo, ulong xs,           \
                     global const stor_t *dy, ulong dyo, ulong dys,            \
                     global const stor_t *w, ulong wo,                         \
                     global const stor_t *dres, ulong dro, ulong drs,          \
                     global stor_t *dx, ulong dxo, ulong dxs,                  \
                     global float *part, uint want_w, uint want_b,             \
                     ulong rows, uint cols, float eps)                         \
    {                                                                          \
        local float scratch[OCLF_WGS];                                         \
        NG_FUSED_LOCAL_;                                                       \
        ROW_LANES;                                                             \
        const ulong nch = (rows + NG_CHUNK - 1) / NG_CHUNK;                    \
        const ulong c = NG_CHUNK_ID_;                                          \
        if (c >= nch)                                                          \
            return;                                                            \
        const ulong r0 = c * NG_CHUNK;                                         \
        const uint nr = (uint)min(rows - r0, (ulong)NG_CHUNK);                 \
        global const stor_t *wp = w ? w + wo : 0;                              \
        global float *pw = want_w ? part + c * cols : 0;                       \
        global float *pb = want_b ? part + (nch + c) * cols : 0;               \
        NG_FUSED_STATS_(LN);                                                   \
        for (uint r = 0; r < nr; r++) {                                        \
            const ulong row = r0 + r;                                          \
            global const stor_t *xr = x + xo + row * xs;                       \
            global const stor_t *dyr = dy + dyo + row * dys;                   \
            global const stor_t *drr = dres ? dres + dro + row * drs : 0;      \
            global stor_t *dxr = dx + dxo + row * dxs;                         \
            NG_FUSED_ROW_(LN);                                                 \
        }                                                                      \
    }
#if OCLF_LAYOUT == 0
#define NG_FUSED_LOCAL_ (void)0
#define NG_CHUNK_ID_ get_global_id(0)
#define NG_FUSED_STATS_(LN) (void)0
#define NG_FUSED_ROW_(LN)                                                      \
    do {                                                                       \
        float mg, mgx;                                                         \
        const float4 st = ng_stats_means(xr, dyr, wp, cols, eps, LN, &mg, &mgx); \
        NG_ROW_WRITE(st, mg, mgx, r == 0);                                     \
    } while (0)
#else
#define NG_FUSED_LOCAL_ local float4 chunk_st[NG_CHUNK]
#define NG_CHUNK_ID_ get_group_id(0)
#define NG_FUSED_STATS_(LN)                                                    \
    do {                                                                       \
        for (uint r = lane; r < nr; r += nlanes)                               \
            chunk_st[r] = ng_stats(x + xo + (r0 + r) * xs, cols, eps, LN);     \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
    } while (0)
#define NG_FUSED_ROW_(LN)                                                      \
    do {                                                                       \
        const float4 st = chunk_st[r];                                         \
        NG_ROW_MEANS(LN, st);                                                  \
        NG_ROW_WRITE(st, mg_, mgx_, r == 0);                                   \
    } while (0)
#endif

NG_FUSED_KERNEL(rms_norm_bwd, 0)
NG_FUSED_KERNEL(layer_norm_bwd, 1)

/* dw[j] and db[j]: the chunk partials of column j added in chunk order
 * (none: 0). A work-item per column. */
ROW_KERNEL void ng_reduce(global const float *part, ulong nch, uint cols,
                      global float *dw, ulong dwo, global float *db, ulong dbo)
{
    const uint j = get_global_id(0);
    if (j >= cols)
        return;
    if (dw) {
        float s = 0.0f;
        for (ulong c = 0; c < nch; c++)
            s += part[c * cols + j];
        dw[dwo + j] = s;
    }
    if (db) {
        float s = 0.0f;
        for (ulong c = 0; c < nch; c++)
            s += part[(nch + c) * cols + j];
        db[dbo + j] = s;
    }
}

/* ---- unfused building blocks ------------------------------------------- */

/* stats[row] = ng_stats of the row, a work-item per row. */
#define NG_STATS_KERNEL(name, LN)                                              \
    ROW_KERNEL void name(global const stor_t *x, ulong xo, ulong xs,           \
                     global float4 *stats, ulong rows, uint cols, float eps)   \
    {                                                                          \
        const ulong row = get_global_id(0);                                    \
        if (row < rows)                                                        \
            stats[row] = ng_stats(x + xo + row * xs, cols, eps, LN);           \
    }
NG_STATS_KERNEL(ng_stats_rms, 0)
NG_STATS_KERNEL(ng_stats_ln, 1)

/* The chunk partials of one column, a work-item per (chunk, column): the
 * same sums in the same order as the fused kernels. */
ROW_KERNEL void ng_colpart(global const stor_t *x, ulong xo, ulong xs,
                       global const stor_t *dy, ulong dyo, ulong dys,
                       global const float4 *stats, global float *part,
                       uint want_w, uint want_b, ulong rows, uint cols)
{
    const ulong id = get_global_id(0);
    const ulong nch = (rows + NG_CHUNK - 1) / NG_CHUNK;
    if (id >= nch * cols)
        return;
    const ulong c = id / cols;
    const uint j = (uint)(id - c * cols);
    const ulong end = min(rows, c * NG_CHUNK + NG_CHUNK);
    float pw = 0.0f, pb = 0.0f;
    for (ulong row = c * NG_CHUNK; row < end; row++) {
        const float4 st = stats[row];
        const float dyv = LD(dy, dyo + row * dys + j);
        const float xh = NG_XHAT(LD(x, xo + row * xs + j), st);
        pw = fma(dyv, xh, pw);
        pb = dyv + pb;
    }
    if (want_w)
        part[c * cols + j] = pw;
    if (want_b)
        part[(nch + c) * cols + j] = pb;
}

/* dx alone, with the statistics from ng_stats_*: the row structure. */
#define NG_DX_KERNEL(name, LN)                                                 \
    ROW_KERNEL void name(global const stor_t *x, ulong xo, ulong xs,           \
                     global const stor_t *dy, ulong dyo, ulong dys,            \
                     global const stor_t *w, ulong wo,                         \
                     global const stor_t *dres, ulong dro, ulong drs,          \
                     global stor_t *dx, ulong dxo, ulong dxs,                  \
                     global const float4 *stats, ulong rows, uint rpg, uint cols) \
    {                                                                          \
        local float scratch[OCLF_WGS];                                         \
        ROW_LANES;                                                             \
        global const stor_t *wp = w ? w + wo : 0;                              \
        global float *pw = 0, *pb = 0;                                         \
        FOR_ROWS(row, rows, rpg) {                                             \
            global const stor_t *xr = x + xo + row * xs;                       \
            global const stor_t *dyr = dy + dyo + row * dys;                   \
            global const stor_t *drr = dres ? dres + dro + row * drs : 0;      \
            global stor_t *dxr = dx + dxo + row * dxs;                         \
            const float4 st = stats[row];                                      \
            NG_ROW_MEANS(LN, st);                                              \
            NG_ROW_WRITE(st, mg_, mgx_, 0);                                    \
        }                                                                      \
    }
NG_DX_KERNEL(ng_dx_rms, 0)
NG_DX_KERNEL(ng_dx_ln, 1)
