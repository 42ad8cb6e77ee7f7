/*
 * Loss family: softmax cross-entropy (PyTorch's F.cross_entropy).
 *
 * Every call starts with ce_targets, which checks the targets on the
 * device: the smallest row whose target is neither in [0, V) nor the
 * ignore index goes to err[0] (atomic_min over integers, so the result
 * does not depend on the order of the work-items), and err[1] counts the
 * rows not ignored (atomic_inc: exact). Every later kernel reads err[0]
 * first and writes nothing when a bad target was found, so a call with a
 * bad target leaves every buffer as it was.
 *
 * Fused: ce_fused, one launch, the row structure of cl/common.h (LAYOUT 0 a
 * row per work-item, 1 a work-group per row): pass 1 keeps a running max
 * and the sum of exp(z - max) per vector lane (online softmax), the sum of
 * the logits (label smoothing) and the target's logit; pass 2, when the
 * gradient is asked, writes it over the logits. Unfused: ce_softmax (the
 * probabilities into an f32 temporary, the LSE and the logits' sum into a
 * float2 per row), ce_loss_rows, ce_grad. Both end, for sum and mean, with
 * ce_reduce: one work-group sums the per-row losses in a fixed order.
 *
 * z = softcap > 0 ? softcap * tanh(x / softcap) : x is the logit the loss
 * sees. Per row, with p = softmax(z), lse = logsumexp(z), eps the label
 * smoothing, lambda the z-loss:
 *   loss = (1 - eps) (lse - z_t) + eps (lse - mean(z)) + lambda lse^2
 *   dloss/dz_c = p_c (1 + 2 lambda lse) - (1 - eps) [c = t] - eps / V
 * and dz/dx = 1 - (z / softcap)^2. Ignored rows have loss 0 and gradient 0.
 */

#define CE_NO_ERROR 0xffffffffu

#ifndef OCLF_CE_STAGE
#define OCLF_CE_STAGE 0 /* 1: ce_fused keeps the row's logits in local memory between its passes */
#endif
#if OCLF_CE_STAGE && OCLF_LAYOUT != 1
#error "OCLF_CE_STAGE needs a work-group per row (OCLF_LAYOUT 1)"
#endif
/* The staged row (OCLF_CE_STAGE): the capped logits z as f32, element c
 * at c. Each lane writes in pass 1 exactly the elements it reads back in
 * pass 2 (FOR_VEC and FOR_TAIL give it the same ones), so no barrier
 * separates the two; pass 2 then reads no logit from global memory and
 * computes no cap again. Without it these fold away. */
#if OCLF_CE_STAGE
#if OCLF_VEC == 1
#define CE_LSTV(p, i, v) ((p)[(i)] = (v))
#define CE_LLDV(p, i) ((p)[(i)])
#else
#define CE_LSTV(p, i, v) OCLF_CAT(vstore, OCLF_VEC)((v), 0, (p) + (i))
#define CE_LLDV(p, i) OCLF_CAT(vload, OCLF_VEC)(0, (p) + (i))
#endif
#define CE_STAGE_ARG , local float *zrow
#else
#define CE_STAGE_ARG
#endif

/* flags */
#define CE_GRAD 1u
#define CE_SUM 2u  /* the per-row losses are reduced (sum or mean) */
#define CE_MEAN 4u

static inline float ce_cap(float x, float cap) { return cap > 0.0f ? cap * tanh(x / cap) : x; }
static inline floatv ce_capv(floatv x, float cap)
{
    return cap > 0.0f ? (floatv)cap * tanh(x / (floatv)cap) : x;
}

/* Max of one float per work-item across the work-group (LAYOUT 1). */
static inline float ce_wg_max(float v, __local float *scratch)
{
#if OCLF_LAYOUT == 1
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = OCLF_WGS / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
#else
    (void)scratch;
    return v;
#endif
}

/* The largest component of a floatv, by halves (no component is indexed
 * at run time: oclgrind crashed on the optimized form of that). */
#define VMAX2_(v) fmax((v).s0, (v).s1)
#define VMAX4_(v) fmax(VMAX2_((v).lo), VMAX2_((v).hi))
#define VMAX8_(v) fmax(VMAX4_((v).lo), VMAX4_((v).hi))
#define VMAX16_(v) fmax(VMAX8_((v).lo), VMAX8_((v).hi))
#if OCLF_VEC == 1
#define VMAX(v) (v)
#else
#define VMAX(v) OCLF_CAT(OCLF_CAT(VMAX, OCLF_VEC), _)(v)
#endif

/* One element (or vector) of the online softmax: running max m, running
 * sum s of exp(z - m), one exp per element: e = exp(-|z - m|) is
 * exp(m - z) when z raises the max (s rescaled, plus 1) and exp(z - m)
 * otherwise. */
#define CE_ONLINE(m, s, z)                                                     \
    do {                                                                       \
        const __typeof__(m) e_ = exp(-fabs((z) - (m)));                        \
        (s) = select((s) + e_, (s) * e_ + 1.0f, (z) > (m));                    \
        (m) = fmax((m), (z));                                                  \
    } while (0)

/* Pass 1's logits kept for pass 2 (OCLF_CE_STAGE), and pass 2's z of
 * element (or vector) i: from there, else from the row in global memory. */
#if OCLF_CE_STAGE
#define CE_KEEPV(k, i, z) CE_LSTV((k), (i), (z))
#define CE_KEEP(k, i, z) ((k)[(i)] = (z))
#define CE_ZV(i) CE_LLDV(zrow, (i))
#define CE_Z(i) zrow[(i)]
#else
#define CE_KEEPV(k, i, z) ((void)0)
#define CE_KEEP(k, i, z) ((void)0)
#define CE_ZV(i) ce_capv(LDV(xr, (i)), cap)
#define CE_Z(i) ce_cap(LD(xr, (i)), cap)
#endif

/* The row's statistics: lse, the sum of the (capped) logits, and the
 * target's logit (0 when ignored); `keep` (the staged row, or null) gets
 * the capped logits. Every lane reads before the reductions' barriers, so
 * a later in-place write of the row comes after every read of pass 1. */
OCLF_INLINE void ce_row_stats(global const stor_t *xr, uint cols, float cap, long t,
                             int ignored, local float *keep, uint lane, uint nlanes,
                             local float *scratch, float *lse_out, float *sumz_out,
                             float *zt_out)
{
    floatv m = VSPLAT(-FLT_MAX), s = VSPLAT(0.0f), sz = VSPLAT(0.0f);
    float tm = -FLT_MAX, ts = 0.0f, tsz = 0.0f;
    (void)keep;
    FOR_VEC(i, cols) {
        const floatv z = ce_capv(LDV(xr, i), cap);
        if (keep)
            CE_KEEPV(keep, i, z);
        CE_ONLINE(m, s, z);
        sz += z;
    }
    FOR_TAIL(i, cols) {
        const float z = ce_cap(LD(xr, i), cap);
        if (keep)
            CE_KEEP(keep, i, z);
        CE_ONLINE(tm, ts, z);
        tsz += z;
    }
    *zt_out = ignored ? 0.0f : ce_cap(LD(xr, (uint)t), cap);
    const float lm = fmax(VMAX(m), tm);
    const float gm = ce_wg_max(lm, scratch);
    const float lsum = VSUM(s * exp(m - (floatv)gm)) + ts * exp(tm - gm);
    const float gs = ROW_REDUCE(lsum, scratch);
    *sumz_out = ROW_REDUCE(VSUM(sz) + tsz, scratch);
    *lse_out = gm + log(gs);
}

/* The row's loss (0 when ignored). The smoothing term is left out when
 * eps is 0, not multiplied by 0: a logit of -inf makes the row's mean -inf,
 * and 0 * inf would turn a finite loss into NaN. With eps > 0 such a row's
 * loss is +inf, as PyTorch's. */
static inline float ce_row_loss(int ignored, float lse, float sumz, float zt, uint cols,
                                float ls, float zl)
{
    if (ignored)
        return 0.0f;
    const float smooth = ls > 0.0f ? ls * (lse - sumz / (float)cols) : 0.0f;
    return (1.0f - ls) * (lse - zt) + smooth + zl * lse * lse;
}

/* The row's gradient scale: the upstream gradient (per row for reduction
 * none, the scalar otherwise; 1 when absent), over the count for mean; 0
 * for an ignored row. */
static inline float ce_row_scale(int ignored, global const float *gup, ulong gupo, ulong row,
                                 uint flags, uint count)
{
    if (ignored)
        return 0.0f;
    float g = gup ? gup[gupo + ((flags & CE_SUM) ? 0 : row)] : 1.0f;
    if (flags & CE_MEAN)
        g /= (float)count;
    return g;
}

/* dloss/dx for one logit x (or vector), from p = exp(z - lse). */
#define CE_GRAD_OF(x, z, p, onehot)                                            \
    ((p) * pz - (onehot) - smooth) * (cap > 0.0f ? 1.0f - ((z) / cap) * ((z) / cap) : 1.0f) * g

kernel void ce_targets(global const long *tg, ulong to, ulong rows, uint cols, long ignore,
                       global uint *err)
{
    const ulong row = get_global_id(0);
    if (row >= rows)
        return;
    const long t = tg[to + row];
    if (t == ignore)
        return;
    if (t < 0 || t >= (long)cols)
        atomic_min(&err[0], (uint)row);
    else
        atomic_inc(&err[1]);
}

kernel void ce_fused(global stor_t *x, ulong xo, ulong xs,
                     global const long *tg, ulong to,
                     global const uint *err,
                     global const float *gup, ulong gupo,
                     global float *loss, ulong losso,
                     global float *lse_out, ulong lseo,
                     ulong rows, uint cols, long ignore,
                     float ls, float cap, float zl, uint flags CE_STAGE_ARG)
{
    local float scratch[OCLF_WGS];
    ROW_LANES;
    if (err[0] != CE_NO_ERROR)
        return;
    const uint count = err[1];
    FOR_ROWS(row, rows, 1) {
        global stor_t *xr = x + xo + row * xs;
        const long t = tg[to + row];
        const int ignored = t == ignore;
        float lse, sumz, zt;
#if OCLF_CE_STAGE
        ce_row_stats(xr, cols, cap, t, ignored, zrow, lane, nlanes, scratch, &lse, &sumz,
                     &zt);
#else
        ce_row_stats(xr, cols, cap, t, ignored, (local float *)0, lane, nlanes, scratch, &lse,
                     &sumz, &zt);
#endif
        if (lane == 0) {
            if (lse_out)
                lse_out[lseo + row] = lse;
            loss[losso + row] = ce_row_loss(ignored, lse, sumz, zt, cols, ls, zl);
        }
#if OCLF_LAYOUT == 1
        /* every lane's reads of the row (the target's logit among them)
         * before any lane's gradient store */
        barrier(CLK_GLOBAL_MEM_FENCE);
#endif
        if (flags & CE_GRAD) {
            const float g = ce_row_scale(ignored, gup, gupo, row, flags, count);
            const float pz = 1.0f + 2.0f * zl * lse;
            const float smooth = ls / (float)cols;
            const float hit = 1.0f - ls;
            FOR_VEC(i, cols) {
                if (!ignored && (ulong)t >= i && (ulong)t < i + OCLF_VEC) {
                    /* the target's vector, element by element (each
                     * element is still rounded once) */
                    for (uint k = i; k < i + OCLF_VEC; k++) {
                        const float z_ = CE_Z(k);
                        const float p_ = exp(z_ - lse);
                        ST(xr, k, CE_GRAD_OF(x, z_, p_, (ulong)t == k ? hit : 0.0f));
                    }
                } else {
                    const floatv z_ = CE_ZV(i);
                    const floatv p_ = exp(z_ - (floatv)lse);
                    STV(xr, i, CE_GRAD_OF(x, z_, p_, 0.0f));
                }
            }
            FOR_TAIL(i, cols) {
                const float z_ = CE_Z(i);
                const float p_ = exp(z_ - lse);
                const float oh_ = (!ignored && (ulong)t == i) ? hit : 0.0f;
                ST(xr, i, CE_GRAD_OF(x, z_, p_, oh_));
            }
        }
    }
}

/* ---- unfused building blocks ------------------------------------------- */

/* p = softmax(z) into an f32 [rows, cols] temporary; stats[row] = (lse,
 * sum of z). */
kernel void ce_softmax(global const stor_t *x, ulong xo, ulong xs,
                       global const uint *err,
                       global float *p, global float2 *stats,
                       ulong rows, uint cols, float cap)
{
    local float scratch[OCLF_WGS];
    ROW_LANES;
    if (err[0] != CE_NO_ERROR)
        return;
    FOR_ROWS(row, rows, 1) {
        global const stor_t *xr = x + xo + row * xs;
        global float *pr = p + row * cols;
        float lse, sumz, zt;
        ce_row_stats(xr, cols, cap, 0, 1, (local float *)0, lane, nlanes, scratch, &lse, &sumz,
                     &zt);
        (void)zt;
        FOR_VEC(i, cols) {
            const floatv z_ = ce_capv(LDV(xr, i), cap);
            STV_F(pr, i, exp(z_ - (floatv)lse));
        }
        FOR_TAIL(i, cols) pr[i] = exp(ce_cap(LD(xr, i), cap) - lse);
        if (lane == 0)
            stats[row] = (float2)(lse, sumz);
    }
}

/* The per-row losses and the LSE from ce_softmax's statistics and the
 * target's logit: one work-item a row. */
kernel void ce_loss_rows(global const stor_t *x, ulong xo, ulong xs,
                         global const long *tg, ulong to,
                         global const uint *err, global const float2 *stats,
                         global float *loss, ulong losso,
                         global float *lse_out, ulong lseo,
                         ulong rows, uint cols, long ignore, float ls, float cap, float zl)
{
    const ulong row = get_global_id(0);
    if (row >= rows || err[0] != CE_NO_ERROR)
        return;
    const long t = tg[to + row];
    const int ignored = t == ignore;
    const float2 st = stats[row];
    const float zt = ignored ? 0.0f : ce_cap(LD(x + xo + row * xs, (uint)t), cap);
    if (lse_out)
        lse_out[lseo + row] = st.x;
    loss[losso + row] = ce_row_loss(ignored, st.x, st.y, zt, cols, ls, zl);
}

/* The gradient over the logits from the probabilities. */
kernel void ce_grad(global stor_t *x, ulong xo, ulong xs,
                    global const long *tg, ulong to,
                    global const uint *err, global const float *p, global const float2 *stats,
                    global const float *gup, ulong gupo,
                    ulong rows, uint cols, long ignore, float ls, float cap, float zl,
                    uint flags)
{
    ROW_LANES;
    if (err[0] != CE_NO_ERROR)
        return;
    const uint count = err[1];
    FOR_ROWS(row, rows, 1) {
        global stor_t *xr = x + xo + row * xs;
        global const float *pr = p + row * cols;
        const long t = tg[to + row];
        const int ignored = t == ignore;
        const float lse = stats[row].x;
        const float g = ce_row_scale(ignored, gup, gupo, row, flags, count);
        const float pz = 1.0f + 2.0f * zl * lse;
        const float smooth = ls / (float)cols;
        const float hit = 1.0f - ls;
        for (uint i = lane; i < cols; i += nlanes) {
            const float z_ = ce_cap(LD(xr, i), cap);
            const float oh_ = (!ignored && (ulong)t == i) ? hit : 0.0f;
            ST(xr, i, CE_GRAD_OF(x, z_, pr[i], oh_));
        }
    }
}

/* out[0] = the sum of the per-row losses (mean: over err[1], NaN when it
 * is 0), by one work-group of a power-of-two size: each work-item sums a
 * strided share in row order, then a tree; the same order every run. */
kernel void ce_reduce(global const float *loss, global const uint *err, global float *out,
                      ulong outo, ulong rows, uint mean, local float *scratch)
{
    if (err[0] != CE_NO_ERROR)
        return;
    const uint lid = get_local_id(0), n = get_local_size(0);
    float s = 0.0f;
    for (ulong r = lid; r < rows; r += n)
        s += loss[r];
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = n / 2; h > 0; h >>= 1) {
        if (lid < h)
            scratch[lid] += scratch[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[outo] = mean ? (err[1] ? scratch[0] / (float)err[1] : NAN) : scratch[0];
}

/* ---- linear + cross-entropy: the weight gradient's operands ------------ */

/* dst[c * ds + r] = src[so + r * ss + c] in f32, for r < rows, c < cols: a
 * chunk's logit gradients [rows, cols] turned into the [cols, rows] left
 * operand of the weight-gradient product (dW = dZ^T x). Work-groups of 256
 * take 16 x 16 tiles through local memory, so both the reads and the
 * writes run along rows. A 1-D launch of (column tiles x row tiles) groups,
 * column tiles fastest. */
#define LCE_TILE 16
kernel void lce_transpose(global const stor_t *src, ulong so, ulong ss, uint rows, uint cols,
                          global float *dst, ulong ds)
{
    local float tile[LCE_TILE][LCE_TILE + 1];
    const uint lid = get_local_id(0), tx = lid & (LCE_TILE - 1), ty = lid / LCE_TILE;
    const uint ctiles = (cols + LCE_TILE - 1) / LCE_TILE;
    const uint g = get_group_id(0), gr = g / ctiles, gc = g - gr * ctiles;
    const uint r0 = gr * LCE_TILE, c0 = gc * LCE_TILE;
    if (r0 + ty < rows && c0 + tx < cols)
        tile[ty][tx] = LD(src + so + (ulong)(r0 + ty) * ss, c0 + tx);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c0 + ty < cols && r0 + tx < rows)
        dst[(ulong)(c0 + ty) * ds + r0 + tx] = tile[tx][ty];
}

/* dst[r * cols + c] = src[so + r * ss + c] in f32: a 16-bit chunk of x
 * widened for the f32 weight-gradient product. One work-item an element. */
kernel void lce_widen(global const stor_t *src, ulong so, ulong ss, uint rows, uint cols,
                      global float *dst)
{
    const ulong i = get_global_id(0);
    if (i >= (ulong)rows * cols)
        return;
    const ulong r = i / cols, c = i - r * cols;
    dst[i] = LD(src + so + r * ss, (uint)c);
}
