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
 * Staging (`stage_flag`, LAYOUT 1): the local buffer holds the fp32 row,
 * then the weight and the bias vectors. The row is read from global memory
 * once and later passes read it from local memory; weight and bias are read
 * once per work-group. Each work-item only ever reads back the elements it
 * wrote itself (FOR_VEC/FOR_TAIL visit the same indices every time), so no
 * barrier is needed around the staged data. Without staging, later passes
 * re-read the row, which a CPU serves from its caches.
 */

/* Copies this work-item's share of a vector into local memory. */
#define STAGE_VECTOR(src, dst)                                                 \
    do {                                                                       \
        if (staged && (src)) {                                                 \
            FOR_VEC(i, cols) STV_F(dst, i, LDV(src, i));                       \
            FOR_TAIL(i, cols) (dst)[i] = LD(src, i);                           \
        }                                                                      \
    } while (0)

/* y = ((v - mu0) - dm) * rstd * w + b over the row at `src` (or the staged
 * row), for every norm: RMSNorm passes mu0 = dm = 0 and no bias, which the
 * compiler folds away. Needs wp, bp, wst, bst, staged, stage in scope. */
#define NORM_APPLY(src, dst, mu0, dm, rstd)                                    \
    do {                                                                       \
        FOR_VEC(i, cols) {                                                     \
            floatv v_ = (((staged ? LDV_F(stage, i) : LDV(src, i)) - (mu0)) - (dm)) * (rstd); \
            if (wp)                                                            \
                v_ *= staged ? LDV_F(wst, i) : LDV(wp, i);                     \
            if (bp)                                                            \
                v_ += staged ? LDV_F(bst, i) : LDV(bp, i);                     \
            STV(dst, i, v_);                                                   \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            float v_ = (((staged ? stage[i] : LD(src, i)) - (mu0)) - (dm)) * (rstd); \
            if (wp)                                                            \
                v_ *= staged ? wst[i] : LD(wp, i);                             \
            if (bp)                                                            \
                v_ += staged ? bst[i] : LD(bp, i);                             \
            ST(dst, i, v_);                                                    \
        }                                                                      \
    } while (0)

/* Common prologue: lanes, staging flag, weight/bias pointers and their
 * staged copies. */
#define NORM_PROLOGUE(w, wo, b, bo)                                            \
    local float scratch[OCLF_WGS];                                             \
    ROW_LANES;                                                                 \
    const uint staged = STAGED(stage_flag);                                    \
    global const stor_t *wp = (w) ? (w) + (wo) : 0;                            \
    global const stor_t *bp = (b) ? (b) + (bo) : 0;                            \
    local float *wst = stage + cols, *bst = wst + (wp ? cols : 0);             \
    STAGE_VECTOR(wp, wst);                                                     \
    STAGE_VECTOR(bp, bst)

/* Sum of squares of the row at `src` (staging it on the way). */
#define SUM_SQUARES(src, out)                                                  \
    do {                                                                       \
        floatv q_ = VSPLAT(0.0f);                                              \
        float tq_ = 0.0f;                                                      \
        FOR_VEC(i, cols) {                                                     \
            floatv v_ = LDV(src, i);                                           \
            if (staged)                                                        \
                STV_F(stage, i, v_);                                           \
            q_ += v_ * v_;                                                     \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            float v_ = LD(src, i);                                             \
            if (staged)                                                        \
                stage[i] = v_;                                                 \
            tq_ += v_ * v_;                                                    \
        }                                                                      \
        (out) = ROW_REDUCE(VSUM(q_) + tq_, scratch);                           \
    } while (0)

/* residual <- z = round(input + residual), staging z; returns sum of z^2. */
#define ADD_INTO_RESIDUAL(ir, rr, out)                                         \
    do {                                                                       \
        floatv q_ = VSPLAT(0.0f);                                              \
        float tq_ = 0.0f;                                                      \
        FOR_VEC(i, cols) {                                                     \
            floatv z_ = ROUNDV(LDV(ir, i) + LDV(rr, i));                       \
            STV(rr, i, z_);                                                    \
            if (staged)                                                        \
                STV_F(stage, i, z_);                                           \
            q_ += z_ * z_;                                                     \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            float z_ = ROUND_STOR(LD(ir, i) + LD(rr, i));                      \
            ST(rr, i, z_);                                                     \
            if (staged)                                                        \
                stage[i] = z_;                                                 \
            tq_ += z_ * z_;                                                    \
        }                                                                      \
        (out) = ROW_REDUCE(VSUM(q_) + tq_, scratch);                           \
    } while (0)

/* Mean and 1/sqrt(biased variance + eps) of the row at `src` (or of the
 * staged row). A rough mean mu0 first; then the deviations d = x - mu0 give
 * both a correction to the mean and the variance (the corrected two-pass
 * algorithm): var = mean(d^2) - mean(d)^2, where mean(d) is tiny, so a row
 * with a large mean loses nothing to cancellation, unlike E[x^2] - E[x]^2.
 * The mean is kept as mu0 + dm and applied as (x - mu0) - dm: x - mu0 is
 * exact for x near mu0, whereas a single fp32 mean near 1e4 would carry an
 * absolute error of 5e-4 into every output. */
#define LN_STATS(src, mu0_out, dm_out, rstd_out)                               \
    do {                                                                       \
        floatv s_ = VSPLAT(0.0f);                                              \
        float ts_ = 0.0f;                                                      \
        FOR_VEC(i, cols) s_ += (staged ? LDV_F(stage, i) : LDV(src, i));       \
        FOR_TAIL(i, cols) ts_ += (staged ? stage[i] : LD(src, i));             \
        const float mu0_ = ROW_REDUCE(VSUM(s_) + ts_, scratch) / (float)cols;  \
        floatv d_ = VSPLAT(0.0f), q_ = VSPLAT(0.0f);                           \
        float td_ = 0.0f, tq_ = 0.0f;                                          \
        FOR_VEC(i, cols) {                                                     \
            floatv e_ = (staged ? LDV_F(stage, i) : LDV(src, i)) - mu0_;       \
            d_ += e_;                                                          \
            q_ += e_ * e_;                                                     \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            float e_ = (staged ? stage[i] : LD(src, i)) - mu0_;                \
            td_ += e_;                                                         \
            tq_ += e_ * e_;                                                    \
        }                                                                      \
        const float dm_ = ROW_REDUCE(VSUM(d_) + td_, scratch) / (float)cols;   \
        const float var_ = ROW_REDUCE(VSUM(q_) + tq_, scratch) / (float)cols - dm_ * dm_; \
        (mu0_out) = mu0_;                                                      \
        (dm_out) = dm_;                                                        \
        (rstd_out) = rsqrt(fmax(var_, 0.0f) + eps);                            \
    } while (0)

/* Copies the row at `src` into the stage (LayerNorm's first pass). */
#define STAGE_ROW(src)                                                         \
    do {                                                                       \
        if (staged) {                                                          \
            FOR_VEC(i, cols) STV_F(stage, i, LDV(src, i));                     \
            FOR_TAIL(i, cols) stage[i] = LD(src, i);                           \
        }                                                                      \
    } while (0)

/* y = x * rsqrt(mean(x^2) + eps) * w */
kernel void rms_norm(global const stor_t *x, ulong xo, ulong xs,
                     global stor_t *y, ulong yo, ulong ys,
                     global const stor_t *w, ulong wo,
                     ulong rows, uint rpg, uint cols, float eps,
                     local float *stage, uint stage_flag)
{
    global const stor_t *b = 0;
    NORM_PROLOGUE(w, wo, b, 0);
    FOR_ROWS(row, rows, rpg) {
        global const stor_t *xr = x + xo + row * xs;
        global stor_t *yr = y + yo + row * ys;
        float ss;
        SUM_SQUARES(xr, ss);
        NORM_APPLY(xr, yr, 0.0f, 0.0f, rsqrt(ss / (float)cols + eps));
    }
}

/* z = round(input + residual); residual <- z; input <- rms_norm(z) * w.
 * The norm is taken over the rounded z, exactly what the unfused pair sees.
 * Without staging, z comes back from `residual`: this work-item wrote
 * exactly those elements, so program order makes them visible. */
kernel void add_rms_norm(global stor_t *in, ulong io, ulong is,
                         global stor_t *res, ulong ro, ulong rs,
                         global const stor_t *w, ulong wo,
                         ulong rows, uint rpg, uint cols, float eps,
                         local float *stage, uint stage_flag)
{
    global const stor_t *b = 0;
    NORM_PROLOGUE(w, wo, b, 0);
    FOR_ROWS(row, rows, rpg) {
        global stor_t *ir = in + io + row * is;
        global stor_t *rr = res + ro + row * rs;
        float ss;
        ADD_INTO_RESIDUAL(ir, rr, ss);
        NORM_APPLY(rr, ir, 0.0f, 0.0f, rsqrt(ss / (float)cols + eps));
    }
}

kernel void layer_norm(global const stor_t *x, ulong xo, ulong xs,
                       global stor_t *y, ulong yo, ulong ys,
                       global const stor_t *w, ulong wo,
                       global const stor_t *b, ulong bo,
                       ulong rows, uint rpg, uint cols, float eps,
                       local float *stage, uint stage_flag)
{
    NORM_PROLOGUE(w, wo, b, bo);
    FOR_ROWS(row, rows, rpg) {
        global const stor_t *xr = x + xo + row * xs;
        global stor_t *yr = y + yo + row * ys;
        float mu0, dm, rstd;
        STAGE_ROW(xr);
        LN_STATS(xr, mu0, dm, rstd);
        NORM_APPLY(xr, yr, mu0, dm, rstd);
    }
}

/* residual <- round(input + residual); out <- layer_norm(residual) */
kernel void add_layer_norm(global const stor_t *in, ulong io, ulong is,
                           global stor_t *res, ulong ro, ulong rs,
                           global stor_t *y, ulong yo, ulong ys,
                           global const stor_t *w, ulong wo,
                           global const stor_t *b, ulong bo,
                           ulong rows, uint rpg, uint cols, float eps,
                           local float *stage, uint stage_flag)
{
    NORM_PROLOGUE(w, wo, b, bo);
    FOR_ROWS(row, rows, rpg) {
        global const stor_t *ir = in + io + row * is;
        global stor_t *rr = res + ro + row * rs;
        global stor_t *yr = y + yo + row * ys;
        float unused, mu0, dm, rstd;
        ADD_INTO_RESIDUAL(ir, rr, unused);
        LN_STATS(rr, mu0, dm, rstd);
        NORM_APPLY(rr, yr, mu0, dm, rstd);
    }
}

/* ---- unfused building blocks ------------------------------------------- */

/* b <- round(a + b), row by row. */
kernel void add_rows(global const stor_t *a, ulong ao, ulong as,
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
    kernel void name(global const stor_t *x, ulong xo, ulong xs,               \
                     global float4 *stats, ulong rows, uint rpg, uint cols,    \
                     float eps, local float *stage, uint stage_flag)           \
    {                                                                          \
        local float scratch[OCLF_WGS];                                         \
        ROW_LANES;                                                             \
        const uint staged = STAGED(stage_flag);                                \
        FOR_ROWS(row, rows, rpg) {                                             \
            global const stor_t *xr = x + xo + row * xs;                       \
            float mu0 = 0.0f, dm = 0.0f, rstd;                                 \
            COMPUTE;                                                           \
            if (lane == 0)                                                     \
                stats[row] = (float4)(mu0, dm, rstd, 0.0f);                    \
        }                                                                      \
    }

#define RMS_STATS_                                                             \
    float ss_;                                                                 \
    SUM_SQUARES(xr, ss_);                                                      \
    rstd = rsqrt(ss_ / (float)cols + eps)
#define LN_STATS_                                                              \
    STAGE_ROW(xr);                                                             \
    LN_STATS(xr, mu0, dm, rstd)

STATS_KERNEL(rms_stats, RMS_STATS_)
STATS_KERNEL(ln_stats, LN_STATS_)

/* y = ((x - mu0) - dm) * rstd * w + b with the row's stats from *_stats. */
kernel void norm_apply(global const stor_t *x, ulong xo, ulong xs,
                       global const float4 *stats,
                       global stor_t *y, ulong yo, ulong ys,
                       global const stor_t *w, ulong wo,
                       global const stor_t *b, ulong bo,
                       ulong rows, uint rpg, uint cols)
{
    ROW_LANES;
    const uint staged = 0;
    local float *stage = 0, *wst = 0, *bst = 0;
    global const stor_t *wp = w ? w + wo : 0;
    global const stor_t *bp = b ? b + bo : 0;
    FOR_ROWS(row, rows, rpg) {
        global const stor_t *xr = x + xo + row * xs;
        global stor_t *yr = y + yo + row * ys;
        const float4 st = stats[row];
        NORM_APPLY(xr, yr, st.x, st.y, st.z);
    }
}
