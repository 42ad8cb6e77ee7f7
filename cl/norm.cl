/*
 * Normalization family.
 *
 * Fused kernels, one launch each: rms_norm, add_rms_norm, layer_norm,
 * add_layer_norm. Unfused building blocks: add_rows, rms_stats, ln_stats,
 * norm_apply.
 *
 * Every kernel takes its operands as (pointer, element offset, row stride)
 * with 64-bit offsets, so row * stride never wraps, then (rows, rpg, cols):
 * rpg is the number of rows each work-group handles in LAYOUT 1.
 *
 * Staging (`stage_flag`): LAYOUT 1: the local buffer holds the row, then
 * the weight and the bias vectors in fp32. The row is read from global
 * memory once and later passes read it from local memory; weight and bias
 * are read once per work-group. LAYOUT 0: each work-item keeps its own row
 * in its part of the buffer (cols floats at local id * cols), weight and
 * bias stay in global memory. The staged row holds v - mu0, fp32, as the
 * statistics pass computed it, so the apply pass neither widens nor shifts
 * again: the fused kernel does less per element than statistics and apply
 * as two kernels (on a CPU, where the 16-bit norms are bound by vector
 * instructions, that is what fusing gains). Each work-item only ever reads
 * back the elements it wrote itself (FOR_VEC/FOR_TAIL visit the same indices
 * every time), so no barrier is needed around the staged data. Without
 * staging, later passes re-read the row, which a CPU serves from its caches.
 */

#include "row_reduce.h"

/* Copies this work-item's share of a vector into local memory. */
#define STAGE_VECTOR(src, dst)                                                 \
    do {                                                                       \
        if (staged_wb && (src)) {                                              \
            FOR_VEC(i, cols) STV_F(dst, i, LDV(src, i));                       \
            FOR_TAIL(i, cols) (dst)[i] = LD(src, i);                           \
        }                                                                      \
    } while (0)

/* y = ((v - mu0) - dm) * rstd * w + b over the row at `src` (or the staged
 * row), for every norm, computed as fma(fma(v - mu0, rstd, -dm * rstd), w, b):
 * two fused operations where five separate ones were (a CPU runs the 16-bit
 * norms at the rate of their vector instructions). v - mu0 stays exact for v
 * near mu0, and -dm * rstd is rounded once per row, so a row far from zero
 * keeps the accuracy of the shifted statistics. RMSNorm passes shifted = 0
 * and mu0 = 0: v * rstd * w. The unfused apply serves both norms (shifted =
 * 1, RMSNorm's zeros at run time): fma(v - 0, rstd, -0.0f) is v * rstd bit
 * for bit, so it matches the fused RMSNorm. Needs wp, bp, wst, bst, staged, stage in
 * scope. */
#define NORM_APPLY(src, dst, shifted, mu0, dm, rstd)                          \
    do {                                                                       \
        const float rs_ = (rstd), nb_ = -(dm) * rs_;                           \
        if (wp && bp)                                                          \
            NORM_APPLY_LOOPS_(src, dst, shifted, mu0, NORM_WB_);               \
        else if (wp)                                                           \
            NORM_APPLY_LOOPS_(src, dst, shifted, mu0, NORM_W_);                \
        else if (bp)                                                           \
            NORM_APPLY_LOOPS_(src, dst, shifted, mu0, NORM_B_);                \
        else                                                                   \
            NORM_APPLY_LOOPS_(src, dst, shifted, mu0, NORM_NONE_);             \
    } while (0)
/* The loops of NORM_APPLY for one case of weight and bias (AFFINE), so that
 * no loop tests for them per vector: the compiler did not take the tests out
 * of the fused kernels' loops by itself. */
#define NORM_APPLY_LOOPS_(src, dst, shifted, mu0, AFFINE)                      \
    do {                                                                       \
        FOR_VEC(i, cols) {                                                     \
            floatv v_ = staged ? LDV_F(stage, i) : LDV(src, i) - (mu0);        \
            v_ = NORM_SCALE_(shifted, v_, (floatv)rs_, (floatv)nb_);           \
            v_ = AFFINE(v_, staged_wb ? LDV_F(wst, i) : LDV(wp, i),            \
                        staged_wb ? LDV_F(bst, i) : LDV(bp, i));               \
            STV(dst, i, v_);                                                   \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            float v_ = staged ? stage[i] : LD(src, i) - (mu0);                 \
            v_ = NORM_SCALE_(shifted, v_, rs_, nb_);                           \
            v_ = AFFINE(v_, staged_wb ? wst[i] : LD(wp, i), staged_wb ? bst[i] : LD(bp, i)); \
            ST(dst, i, v_);                                                    \
        }                                                                      \
    } while (0)
/* v * rstd - dm * rstd, or v * rstd for RMSNorm (`shifted` a constant 0:
 * fma(v, rstd, 0.0f) would not fold, since it turns -0 into +0). */
#define NORM_SCALE_(shifted, v, rstd, nb) ((shifted) ? fma((v), (rstd), (nb)) : (v) * (rstd))
/* v * w + b with either vector absent (null pointer: its operand is never
 * evaluated). */
#define NORM_WB_(v, W, B) fma((v), (W), (B))
#define NORM_W_(v, W, B) ((v) * (W))
#define NORM_B_(v, W, B) ((v) + (B))
#define NORM_NONE_(v, W, B) (v)

/* Common prologue: lanes, the staged row, weight/bias pointers and their
 * staged copies. `staged_wb` (weight and bias in local memory) needs a
 * work-group per row and folds away in LAYOUT 0. */
#define NORM_PROLOGUE(w, wo, b, bo)                                            \
    local float scratch[OCLF_WGS];                                             \
    ROW_LANES;                                                                 \
    const uint staged_wb = STAGED(stage_flag);                                 \
    local float *stage = stage_mem + NORM_STAGE_OFFSET_ * cols;                \
    global const stor_t *wp = (w) ? (w) + (wo) : 0;                            \
    global const stor_t *bp = (b) ? (b) + (bo) : 0;                            \
    local float *wst = stage_mem + cols, *bst = wst + (wp ? cols : 0);         \
    STAGE_VECTOR(wp, wst);                                                     \
    STAGE_VECTOR(bp, bst)
/* NORM_ROWS(BODY): BODY (the row loop) with `staged` in scope. In LAYOUT 0
 * it is a constant in each of two copies of the loop, so the unstaged one
 * has no staging code at all; LAYOUT 1 keeps one copy (barriers under a
 * branch are legal when it is uniform, but see STATS_KERNEL). */
#if OCLF_LAYOUT == 0
#define NORM_STAGE_OFFSET_ get_local_id(0)
#define NORM_ROWS(BODY)                                                        \
    do {                                                                       \
        if (stage_flag) {                                                      \
            const uint staged = 1;                                             \
            BODY;                                                              \
        } else {                                                               \
            const uint staged = 0;                                             \
            BODY;                                                              \
        }                                                                      \
    } while (0)
#else
#define NORM_STAGE_OFFSET_ 0
#define NORM_ROWS(BODY)                                                        \
    do {                                                                       \
        const uint staged = stage_flag;                                        \
        BODY;                                                                  \
    } while (0)
#endif

/* One pass over a row's values v (LOADV/LOADS at an index, with STORE_V and
 * STORE_S run on each value v and its shifted d = v - k): the shifted sums S = sum(v - k) and
 * Q = sum((v - k)^2), reduced over the row. RMSNorm takes k = 0 and only Q;
 * LayerNorm takes k near the row's mean (ROW_SHIFT), which makes the one
 * pass as accurate as two: mean = k + S/n and the biased variance
 * Q/n - (S/n)^2 cancel only as much as k is off the mean, not as much as
 * the mean is off zero (E[x^2] - E[x]^2 would lose all of a row near 1e4).
 * `want_s` is a compile-time constant, so RMSNorm has no second reduction.
 * In LAYOUT 0 the vectors of this work-item's share (FOR_VEC's indices) are
 * taken two at a time into two sets of sums: one set makes every vector wait
 * for the previous one's addition, and that latency, not the loads, bounded
 * the pass on a CPU. LAYOUT 1 (GPUs, where other work-items hide the
 * latency) keeps one set: the second one's registers made AMD's compiler
 * spill at VEC 16. */
#define ROW_MOMENTS(LOADV, LOADS, STORE_V, STORE_S, k, want_s, s_out, q_out)   \
    do {                                                                       \
        floatv s_ = VSPLAT(0.0f), q_ = VSPLAT(0.0f);                           \
        floatv s2_ = VSPLAT(0.0f), q2_ = VSPLAT(0.0f);                         \
        float ts_ = 0.0f, tq_ = 0.0f;                                          \
        const uint step_ = nlanes * OCLF_VEC;                                  \
        uint i_ = lane * OCLF_VEC;                                             \
        for (; ROW_MOMENTS_PAIRS_ && i_ + step_ + OCLF_VEC <= cols; i_ += 2 * step_) { \
            ROW_MOMENTS_V_(LOADV, STORE_V, k, i_, s_, q_);                     \
            ROW_MOMENTS_V_(LOADV, STORE_V, k, i_ + step_, s2_, q2_);           \
        }                                                                      \
        for (; i_ + OCLF_VEC <= cols; i_ += step_)                             \
            ROW_MOMENTS_V_(LOADV, STORE_V, k, i_, s_, q_);                     \
        FOR_TAIL(i, cols) {                                                    \
            const float v_ = LOADS(i);                                         \
            const float d_ = v_ - (k);                                         \
            STORE_S(i, v_, d_);                                                \
            ts_ += d_;                                                         \
            tq_ += d_ * d_;                                                    \
        }                                                                      \
        if (want_s)                                                            \
            (s_out) = ROW_REDUCE(VSUM(s_ + s2_) + ts_, scratch);               \
        (q_out) = ROW_REDUCE(VSUM(q_ + q2_) + tq_, scratch);                   \
    } while (0)
#define ROW_MOMENTS_PAIRS_ (OCLF_LAYOUT == 0)
/* One vector of ROW_MOMENTS at index i into the sums s, q. */
#define ROW_MOMENTS_V_(LOADV, STORE_V, k, i, s, q)                             \
    do {                                                                       \
        const floatv v_ = LOADV(i);                                            \
        const floatv d_ = v_ - (k);                                            \
        STORE_V(i, v_, d_);                                                    \
        (s) += d_;                                                             \
        (q) += d_ * d_;                                                        \
    } while (0)

/* Loaders and storers for ROW_MOMENTS: a row `src` read from global memory
 * and staged on the way; or z = round(input + residual) written back to the
 * residual and staged (MADD_STORE_V with MSTAGE_V, MADD_S with MRES_S).
 * `ir`, `rr`, `src` must be in scope. */
#define MLOAD_V(i) LDV(src, i)
#define MLOAD_S(i) LD(src, i)
#define MSTAGE_V(i, v, d)                                                      \
    do {                                                                       \
        if (staged)                                                            \
            STV_F(stage, i, d);                                                \
    } while (0)
#define MSTAGE_S(i, v, d)                                                      \
    do {                                                                       \
        if (staged)                                                            \
            stage[i] = (d);                                                    \
    } while (0)
#define MADD_V(i) ROUNDV(LDV(ir, i) + LDV(rr, i))
#define MADD_S(i) ROUND_STOR(LD(ir, i) + LD(rr, i))
/* MADD_V that also stores z to the residual, narrowing once (ROUNDV and a
 * separate store each narrowed: for bf16 the larger part of the pass). */
#define MADD_STORE_V(i) STV_ROUNDED(rr, i, LDV(ir, i) + LDV(rr, i))
#define MRES_S(i, v, d)                                                        \
    do {                                                                       \
        ST(rr, i, v);                                                          \
        MSTAGE_S(i, v, d);                                                     \
    } while (0)

/* The shift for ROW_MOMENTS: the mean of the row's first vector (or its
 * first value), read by lane 0 alone and shared, so every lane uses the
 * same shift and the row's first elements leave global memory once more at
 * most. Read before anything of the row is written: where the row is
 * written in place (the residual), the broadcast's barrier keeps every
 * lane's writes after lane 0's read. */
#define ROW_SHIFT(LOADV, LOADS, k_out)                                         \
    do {                                                                       \
        float k0_ = 0.0f;                                                      \
        if (lane == 0)                                                         \
            k0_ = OCLF_VEC > 1 && cols >= OCLF_VEC ? VSUM(LOADV(0)) / (float)OCLF_VEC \
                                                   : LOADS(0);                 \
        (k_out) = ROW_BROADCAST(k0_, scratch);                                 \
    } while (0)

/* (mu0, dm, rstd) for NORM_APPLY from ROW_MOMENTS' shifted sums. */
#define LN_FINISH(k, s, q, mu0_out, dm_out, rstd_out)                          \
    do {                                                                       \
        const float dm_ = (s) / (float)cols;                                   \
        const float var_ = (q) / (float)cols - dm_ * dm_;                      \
        (mu0_out) = (k);                                                       \
        (dm_out) = dm_;                                                        \
        (rstd_out) = rsqrt(fmax(var_, 0.0f) + eps);                            \
    } while (0)

/* LayerNorm statistics of the row at `src`, staging it on the way. The
 * mean is kept as mu0 + dm and applied as (x - mu0) - dm: x - mu0 is exact
 * for x near mu0, whereas a single fp32 mean near 1e4 would carry an
 * absolute error of 5e-4 into every output. */
#define LN_STATS(mu0_out, dm_out, rstd_out)                                    \
    do {                                                                       \
        float lk_, ls_, lq_;                                                   \
        ROW_SHIFT(MLOAD_V, MLOAD_S, lk_);                                      \
        ROW_MOMENTS(MLOAD_V, MLOAD_S, MSTAGE_V, MSTAGE_S, lk_, 1, ls_, lq_);   \
        LN_FINISH(lk_, ls_, lq_, mu0_out, dm_out, rstd_out);                   \
    } while (0)

/* y = x * rsqrt(mean(x^2) + eps) * w */
#define RMS_NORM_ROWS_                                                         \
    FOR_ROWS(row, rows, rpg) {                                                 \
        global const stor_t *xr = x + xo + row * xs;                           \
        global stor_t *yr = y + yo + row * ys;                                 \
        global const stor_t *src = xr;                                         \
        float ss, unused;                                                      \
        ROW_MOMENTS(MLOAD_V, MLOAD_S, MSTAGE_V, MSTAGE_S, 0.0f, 0, unused, ss);\
        NORM_APPLY(xr, yr, 0, 0.0f, 0.0f, rsqrt(ss / (float)cols + eps));      \
    }
ROW_KERNEL void rms_norm(global const stor_t *x, ulong xo, ulong xs,
                     global stor_t *y, ulong yo, ulong ys,
                     global const stor_t *w, ulong wo,
                     ulong rows, uint rpg, uint cols, float eps,
                     local float *stage_mem, uint stage_flag)
{
    global const stor_t *b = 0;
    NORM_PROLOGUE(w, wo, b, 0);
    NORM_ROWS(RMS_NORM_ROWS_);
}

/* z = round(input + residual); residual <- z; input <- rms_norm(z) * w.
 * The norm is taken over the rounded z, exactly what the unfused pair sees.
 * Without staging, z comes back from `residual`: this work-item wrote
 * exactly those elements, so program order makes them visible. */
#define ADD_RMS_NORM_ROWS_                                                     \
    FOR_ROWS(row, rows, rpg) {                                                 \
        global stor_t *ir = in + io + row * is;                                \
        global stor_t *rr = res + ro + row * rs;                               \
        float ss, unused;                                                      \
        ROW_MOMENTS(MADD_STORE_V, MADD_S, MSTAGE_V, MRES_S, 0.0f, 0, unused, ss);\
        NORM_APPLY(rr, ir, 0, 0.0f, 0.0f, rsqrt(ss / (float)cols + eps));      \
    }
ROW_KERNEL void add_rms_norm(global stor_t *in, ulong io, ulong is,
                         global stor_t *res, ulong ro, ulong rs,
                         global const stor_t *w, ulong wo,
                         ulong rows, uint rpg, uint cols, float eps,
                         local float *stage_mem, uint stage_flag)
{
    global const stor_t *b = 0;
    NORM_PROLOGUE(w, wo, b, 0);
    NORM_ROWS(ADD_RMS_NORM_ROWS_);
}

#define LAYER_NORM_ROWS_                                                       \
    FOR_ROWS(row, rows, rpg) {                                                 \
        global const stor_t *xr = x + xo + row * xs;                           \
        global stor_t *yr = y + yo + row * ys;                                 \
        global const stor_t *src = xr;                                         \
        float mu0, dm, rstd;                                                   \
        LN_STATS(mu0, dm, rstd);                                               \
        NORM_APPLY(xr, yr, 1, mu0, dm, rstd);                                  \
    }
ROW_KERNEL void layer_norm(global const stor_t *x, ulong xo, ulong xs,
                       global stor_t *y, ulong yo, ulong ys,
                       global const stor_t *w, ulong wo,
                       global const stor_t *b, ulong bo,
                       ulong rows, uint rpg, uint cols, float eps,
                       local float *stage_mem, uint stage_flag)
{
    NORM_PROLOGUE(w, wo, b, bo);
    NORM_ROWS(LAYER_NORM_ROWS_);
}

/* residual <- round(input + residual); out <- layer_norm(residual) */
#define ADD_LAYER_NORM_ROWS_                                                   \
    FOR_ROWS(row, rows, rpg) {                                                 \
        global const stor_t *ir = in + io + row * is;                          \
        global stor_t *rr = res + ro + row * rs;                               \
        global stor_t *yr = y + yo + row * ys;                                 \
        float k, sum, sq, mu0, dm, rstd;                                       \
        ROW_SHIFT(MADD_V, MADD_S, k);                                          \
        ROW_MOMENTS(MADD_STORE_V, MADD_S, MSTAGE_V, MRES_S, k, 1, sum, sq);    \
        LN_FINISH(k, sum, sq, mu0, dm, rstd);                                  \
        NORM_APPLY(rr, yr, 1, mu0, dm, rstd);                                  \
    }
ROW_KERNEL void add_layer_norm(global const stor_t *in, ulong io, ulong is,
                           global stor_t *res, ulong ro, ulong rs,
                           global stor_t *y, ulong yo, ulong ys,
                           global const stor_t *w, ulong wo,
                           global const stor_t *b, ulong bo,
                           ulong rows, uint rpg, uint cols, float eps,
                           local float *stage_mem, uint stage_flag)
{
    NORM_PROLOGUE(w, wo, b, bo);
    NORM_ROWS(ADD_LAYER_NORM_ROWS_);
}

/* ---- unfused building blocks ------------------------------------------- */

/* b <- round(a + b), row by row. */
ROW_KERNEL void add_rows(global const stor_t *a, ulong ao, ulong as,
                     global stor_t *b, ulong bo, ulong bs,
                     ulong rows, uint rpg, uint cols)
{
    ROW_LANES;
    FOR_ROWS(row, rows, rpg) {
        global const stor_t *ar = a + ao + row * as;
        global stor_t *br = b + bo + row * bs;
        FOR_VEC(i, cols) STV(br, i, LDV(ar, i) + LDV(br, i));
        FOR_TAIL(i, cols) ST(br, i, LD(ar, i) + LD(br, i));
    }
}

/* stats[row] = (mu0, dm, rstd, 0) as LN_STATS defines them (ln_stats), or
 * (0, 0, 1/sqrt(mean(x^2) + eps), 0) (rms_stats). Two kernels rather than
 * one with a flag: barriers under a branch inside the row loop are legal
 * when the branch is uniform, but a CPU runtime that cannot prove it may
 * drop rows (seen here as rows whose statistics were never written). */
#define STATS_KERNEL(name, COMPUTE)                                            \
    ROW_KERNEL void name(global const stor_t *x, ulong xo, ulong xs,           \
                     global float4 *stats, ulong rows, uint rpg, uint cols,    \
                     float eps, local float *stage, uint stage_flag)           \
    {                                                                          \
        local float scratch[OCLF_WGS];                                         \
        ROW_LANES;                                                             \
        /* one pass: nothing would read a staged row back */                  \
        const uint staged = 0 * stage_flag;                                    \
        FOR_ROWS(row, rows, rpg) {                                             \
            global const stor_t *xr = x + xo + row * xs;                       \
            float mu0 = 0.0f, dm = 0.0f, rstd;                                 \
            COMPUTE;                                                           \
            if (lane == 0)                                                     \
                stats[row] = (float4)(mu0, dm, rstd, 0.0f);                    \
        }                                                                      \
    }

#define RMS_STATS_                                                             \
    global const stor_t *src = xr;                                             \
    float ss_, unused_;                                                        \
    ROW_MOMENTS(MLOAD_V, MLOAD_S, MSTAGE_V, MSTAGE_S, 0.0f, 0, unused_, ss_);  \
    rstd = rsqrt(ss_ / (float)cols + eps)
#define LN_STATS_                                                              \
    global const stor_t *src = xr;                                             \
    LN_STATS(mu0, dm, rstd)

STATS_KERNEL(rms_stats, RMS_STATS_)
STATS_KERNEL(ln_stats, LN_STATS_)

/* y = ((x - mu0) - dm) * rstd * w + b with the row's stats from *_stats. */
ROW_KERNEL void norm_apply(global const stor_t *x, ulong xo, ulong xs,
                       global const float4 *stats,
                       global stor_t *y, ulong yo, ulong ys,
                       global const stor_t *w, ulong wo,
                       global const stor_t *b, ulong bo,
                       ulong rows, uint rpg, uint cols)
{
    ROW_LANES;
    const uint staged = 0, staged_wb = 0;
    local float *stage = 0, *wst = 0, *bst = 0;
    global const stor_t *wp = w ? w + wo : 0;
    global const stor_t *bp = b ? b + bo : 0;
    FOR_ROWS(row, rows, rpg) {
        global const stor_t *xr = x + xo + row * xs;
        global stor_t *yr = y + yo + row * ys;
        const float4 st = stats[row];
        NORM_APPLY(xr, yr, 1, st.x, st.y, st.z);
    }
}
