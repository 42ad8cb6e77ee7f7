/*
 * Normalization family (SPEC §1-2).
 *
 * Fused kernels, one launch each: rms_norm, add_rms_norm, layer_norm,
 * add_layer_norm. Unfused building blocks: add_rows, norm_stats, norm_apply.
 *
 * Every kernel takes its operands as (pointer, element offset, row stride)
 * with 64-bit offsets, so row * stride never wraps.
 *
 * Each fused kernel reads its inputs from global memory once when the row is
 * staged (`staged` != 0, LAYOUT 1): the first pass keeps the fp32 row in
 * local memory and later passes read it from there. Without staging, later
 * passes re-read the row, which a CPU serves from its caches.
 */

/* y = ((v - mu0) - dm) * rstd * w + b over the row at `src` (or the staged
 * row), for every norm: RMSNorm passes mu0 = dm = 0 and no bias, which the
 * compiler folds away. Needs `wp`, `bp`, `staged`, `stage` in scope. */
#define NORM_APPLY(src, dst, mu0, dm, rstd)                                         \
    do {                                                                       \
        FOR_VEC(i, cols) {                                                     \
            floatv v_ = (((staged ? LDV_F(stage, i) : LDV(src, i)) - (mu0)) - (dm)) * (rstd); \
            if (wp)                                                            \
                v_ *= LDV(wp, i);                                              \
            if (bp)                                                            \
                v_ += LDV(bp, i);                                              \
            STV(dst, i, v_);                                                   \
        }                                                                      \
        FOR_TAIL(i, cols) {                                                    \
            float v_ = (((staged ? stage[i] : LD(src, i)) - (mu0)) - (dm)) * (rstd); \
            if (wp)                                                            \
                v_ *= LD(wp, i);                                               \
            if (bp)                                                            \
                v_ += LD(bp, i);                                               \
            ST(dst, i, v_);                                                    \
        }                                                                      \
    } while (0)

/* y = x * rsqrt(mean(x^2) + eps) * w */
kernel void rms_norm(global const stor_t *x, ulong xo, ulong xs,
                     global stor_t *y, ulong yo, ulong ys,
                     global const stor_t *w, ulong wo,
                     ulong rows, uint cols, float eps,
                     local float *stage, uint stage_flag)
{
    local float scratch[OCLF_WGS];
    ROW_SETUP(rows);
    const uint staged = STAGED(stage_flag);
    global const stor_t *xr = x + xo + row * xs;
    global stor_t *yr = y + yo + row * ys;
    global const stor_t *wp = w ? w + wo : 0;

    floatv acc = VSPLAT(0.0f);
    float tacc = 0.0f;
    FOR_VEC(i, cols) {
        floatv v = LDV(xr, i);
        if (staged)
            STV_F(stage, i, v);
        acc += v * v;
    }
    FOR_TAIL(i, cols) {
        float v = LD(xr, i);
        if (staged)
            stage[i] = v;
        tacc += v * v;
    }
    const float ss = ROW_REDUCE(VSUM(acc) + tacc, scratch);
    const float r = rsqrt(ss / (float)cols + eps);
    global const stor_t *bp = 0;
    NORM_APPLY(xr, yr, 0.0f, 0.0f, r);
}

/* z = round(input + residual); residual <- z; input <- rms_norm(z) * w.
 * The norm is taken over the rounded z, exactly what the unfused pair sees. */
kernel void add_rms_norm(global stor_t *in, ulong io, ulong is,
                         global stor_t *res, ulong ro, ulong rs,
                         global const stor_t *w, ulong wo,
                         ulong rows, uint cols, float eps,
                         local float *stage, uint stage_flag)
{
    local float scratch[OCLF_WGS];
    ROW_SETUP(rows);
    const uint staged = STAGED(stage_flag);
    global stor_t *ir = in + io + row * is;
    global stor_t *rr = res + ro + row * rs;
    global const stor_t *wp = w ? w + wo : 0;

    floatv acc = VSPLAT(0.0f);
    float tacc = 0.0f;
    FOR_VEC(i, cols) {
        floatv z = ROUNDV(LDV(ir, i) + LDV(rr, i));
        STV(rr, i, z);
        if (staged)
            STV_F(stage, i, z);
        acc += z * z;
    }
    FOR_TAIL(i, cols) {
        float z = ROUND_STOR(LD(ir, i) + LD(rr, i));
        ST(rr, i, z);
        if (staged)
            stage[i] = z;
        tacc += z * z;
    }
    const float ss = ROW_REDUCE(VSUM(acc) + tacc, scratch);
    const float r = rsqrt(ss / (float)cols + eps);

    /* Without staging, z comes back from `residual`: this work-item wrote
     * exactly these elements above, so program order makes them visible. */
    global const stor_t *bp = 0;
    NORM_APPLY(rr, ir, 0.0f, 0.0f, r);
}

/* Mean and 1/sqrt(biased variance + eps) of the row at `src` (or of the
 * staged row). A rough mean mu0 first; then the deviations d = x - mu0 give
 * both a correction to the mean and the variance (the corrected two-pass
 * algorithm): var = mean(d^2) - mean(d)^2, where mean(d) is tiny, so a row
 * with a large mean loses nothing to cancellation, unlike E[x^2] - E[x]^2.
 * The mean is kept as mu0 + dm and applied as (x - mu0) - dm: x - mu0 is
 * exact for x near mu0, whereas a single fp32 mean near 1e4 would carry an
 * absolute error of 5e-4 into every output. */
#define LN_STATS(src, mu0_out, dm_out, rstd_out)                                      \
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

kernel void layer_norm(global const stor_t *x, ulong xo, ulong xs,
                       global stor_t *y, ulong yo, ulong ys,
                       global const stor_t *w, ulong wo,
                       global const stor_t *b, ulong bo,
                       ulong rows, uint cols, float eps,
                       local float *stage, uint stage_flag)
{
    local float scratch[OCLF_WGS];
    ROW_SETUP(rows);
    const uint staged = STAGED(stage_flag);
    global const stor_t *xr = x + xo + row * xs;
    global stor_t *yr = y + yo + row * ys;
    global const stor_t *wp = w ? w + wo : 0;
    global const stor_t *bp = b ? b + bo : 0;

    if (staged) {
        FOR_VEC(i, cols) STV_F(stage, i, LDV(xr, i));
        FOR_TAIL(i, cols) stage[i] = LD(xr, i);
    }
    float mu0, dm, rstd;
    LN_STATS(xr, mu0, dm, rstd);
    NORM_APPLY(xr, yr, mu0, dm, rstd);
}

/* residual <- round(input + residual); out <- layer_norm(residual) */
kernel void add_layer_norm(global const stor_t *in, ulong io, ulong is,
                           global stor_t *res, ulong ro, ulong rs,
                           global stor_t *y, ulong yo, ulong ys,
                           global const stor_t *w, ulong wo,
                           global const stor_t *b, ulong bo,
                           ulong rows, uint cols, float eps,
                           local float *stage, uint stage_flag)
{
    local float scratch[OCLF_WGS];
    ROW_SETUP(rows);
    const uint staged = STAGED(stage_flag);
    global const stor_t *ir = in + io + row * is;
    global stor_t *rr = res + ro + row * rs;
    global stor_t *yr = y + yo + row * ys;
    global const stor_t *wp = w ? w + wo : 0;
    global const stor_t *bp = b ? b + bo : 0;

    FOR_VEC(i, cols) {
        floatv z = ROUNDV(LDV(ir, i) + LDV(rr, i));
        STV(rr, i, z);
        if (staged)
            STV_F(stage, i, z);
    }
    FOR_TAIL(i, cols) {
        float z = ROUND_STOR(LD(ir, i) + LD(rr, i));
        ST(rr, i, z);
        if (staged)
            stage[i] = z;
    }
    float mu0, dm, rstd;
    LN_STATS(rr, mu0, dm, rstd);
    NORM_APPLY(rr, yr, mu0, dm, rstd);
}

/* ---- unfused building blocks ------------------------------------------- */

/* b <- round(a + b), row by row. */
kernel void add_rows(global const stor_t *a, ulong ao, ulong as,
                     global stor_t *b, ulong bo, ulong bs,
                     ulong rows, uint cols)
{
    ROW_SETUP(rows);
    global const stor_t *ar = a + ao + row * as;
    global stor_t *br = b + bo + row * bs;
    FOR_VEC(i, cols) STV(br, i, LDV(ar, i) + LDV(br, i));
    FOR_TAIL(i, cols) ST(br, i, LD(ar, i) + LD(br, i));
}

/* stats[row] = (mu0, dm, rstd, 0) as LN_STATS defines them; with rms != 0
 * the mean is 0 and rstd is 1/sqrt(mean(x^2) + eps). */
kernel void norm_stats(global const stor_t *x, ulong xo, ulong xs,
                       global float4 *stats, ulong rows, uint cols, float eps,
                       uint rms, local float *stage, uint stage_flag)
{
    local float scratch[OCLF_WGS];
    ROW_SETUP(rows);
    const uint staged = STAGED(stage_flag);
    global const stor_t *xr = x + xo + row * xs;
    if (staged) {
        FOR_VEC(i, cols) STV_F(stage, i, LDV(xr, i));
        FOR_TAIL(i, cols) stage[i] = LD(xr, i);
    }
    float mu0, dm, rstd;
    if (rms) {
        floatv q = VSPLAT(0.0f);
        float tq = 0.0f;
        FOR_VEC(i, cols) {
            floatv v = staged ? LDV_F(stage, i) : LDV(xr, i);
            q += v * v;
        }
        FOR_TAIL(i, cols) {
            float v = staged ? stage[i] : LD(xr, i);
            tq += v * v;
        }
        mu0 = dm = 0.0f;
        rstd = rsqrt(ROW_REDUCE(VSUM(q) + tq, scratch) / (float)cols + eps);
    } else {
        LN_STATS(xr, mu0, dm, rstd);
    }
    if (lane == 0)
        stats[row] = (float4)(mu0, dm, rstd, 0.0f);
}

/* y = ((x - mu0) - dm) * rstd * w + b with the row's stats from norm_stats. */
kernel void norm_apply(global const stor_t *x, ulong xo, ulong xs,
                       global const float4 *stats,
                       global stor_t *y, ulong yo, ulong ys,
                       global const stor_t *w, ulong wo,
                       global const stor_t *b, ulong bo,
                       ulong rows, uint cols)
{
    ROW_SETUP(rows);
    const uint staged = 0;
    local float *stage = 0;
    global const stor_t *xr = x + xo + row * xs;
    global stor_t *yr = y + yo + row * ys;
    global const stor_t *wp = w ? w + wo : 0;
    global const stor_t *bp = b ? b + bo : 0;
    const float4 st = stats[row];
    NORM_APPLY(xr, yr, st.x, st.y, st.z);
}
