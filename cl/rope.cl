/*
 * Rotary embedding and fused QK-norm + RoPE (SPEC §4).
 *
 * Fused kernel: qk_norm_rope. Building blocks: rotary_embedding (also the
 * public op) and head_rms_norm (the unfused norm half).
 *
 * Every kernel works on (token, head) items: OCLF_LAYOUT 0 gives one item
 * to each work-item (no barriers: what a CPU wants), OCLF_LAYOUT 1 a
 * work-group per item with the head's vectors spread over its work-items
 * and the sum of squares reduced through local memory (ROW_LANES, FOR_VEC_IN
 * and ROW_REDUCE of common.h, with the item in the place of the row). Each
 * item is straight-line code whose early returns are uniform within a
 * work-group, so no barrier sits inside a loop or behind a divergent branch.
 *
 * The rotation style (NeoX or GPT-J) and the position width are run-time
 * arguments tested outside the loops, so one program serves all of them;
 * the cache's storage type (OCLF_CDTYPE, which may differ from the heads')
 * is a build option because it sets the vector loads.
 *
 * A token whose position lies outside [0, max_pos) is skipped by every
 * kernel here, so its heads are left as they were and the cache is never
 * read outside its rows.
 */

#ifndef OCLF_CDTYPE
#define OCLF_CDTYPE OCLF_DTYPE
#endif

/* ---- cos/sin cache loads, in its own storage type ----------------------- */
#if OCLF_CDTYPE == 0
typedef float cstor_t;
#define LDC(p, i) ((p)[(i)])
#define CLOADV_(n, p, i) OCLF_CAT(vload, n)(0, (p) + (i))
#elif OCLF_CDTYPE == 1
typedef half cstor_t;
#define LDC(p, i) vload_half((i), (p))
/* Through ushortN, for the alignment reason given at LDV in common.h. */
#define CLOADV_(n, p, i)                                                       \
    OCLF_CAT(oclf_cload_half, n)((global const ushort *)((p) + (i)))
#define CLOAD_HALF_FN_(n)                                                      \
    inline OCLF_CAT(float, n) OCLF_CAT(oclf_cload_half, n)(global const ushort *p) \
    {                                                                          \
        OCLF_CAT(ushort, n) h = OCLF_CAT(vload, n)(0, p);                      \
        return OCLF_CAT(vload_half, n)(0, (private const half *)&h);           \
    }
CLOAD_HALF_FN_(2)
CLOAD_HALF_FN_(4)
CLOAD_HALF_FN_(8)
CLOAD_HALF_FN_(16)
#elif OCLF_CDTYPE == 2
typedef ushort cstor_t;
#define LDC(p, i) bf16_to_f32((p)[(i)])
#define CLOADV_(n, p, i)                                                       \
    OCLF_CAT(as_float, n)(OCLF_CAT(convert_uint, n)(OCLF_CAT(vload, n)(0, (p) + (i))) << 16)
#else
#error "unknown OCLF_CDTYPE"
#endif
/* CLOAD(n, p, i): n cache elements from i as floatn (n = 1: a float). */
#define CLOAD(n, p, i) OCLF_CAT(CLOAD_, n)(p, i)
#define CLOAD_1(p, i) LDC(p, i)
#define CLOAD_2(p, i) CLOADV_(2, p, i)
#define CLOAD_4(p, i) CLOADV_(4, p, i)
#define CLOAD_8(p, i) CLOADV_(8, p, i)
#define CLOAD_16(p, i) CLOADV_(16, p, i)

/* ---- GPT-J pairs inside one vector ---------------------------------------
 * A vector v = (x0, y0, x1, y1, ...) of VEC elements holds VEC/2 pairs; with
 * cos c and sin s of those pairs (half-width vectors),
 *   v' = v * dup(c) + swap(v) * dup(s) * (-1, 1, -1, 1, ...)
 * gives (x c - y s, y c + x s) for every pair without splitting the vector.
 * VEC 1 has no whole pair: the scalar pair loop does all the work. */
#if OCLF_VEC == 2
#define OCLF_HVEC 1
typedef float hfloatv;
#define DUP(c) ((floatv)((c), (c)))
#define SWAP(v) ((v).s10)
#define ALT ((floatv)(-1.0f, 1.0f))
#elif OCLF_VEC == 4
#define OCLF_HVEC 2
typedef float2 hfloatv;
#define DUP(c) ((c).s0011)
#define SWAP(v) ((v).s1032)
#define ALT ((floatv)(-1.0f, 1.0f, -1.0f, 1.0f))
#elif OCLF_VEC == 8
#define OCLF_HVEC 4
typedef float4 hfloatv;
#define DUP(c) ((c).s00112233)
#define SWAP(v) ((v).s10325476)
#define ALT ((floatv)(-1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f))
#elif OCLF_VEC == 16
#define OCLF_HVEC 8
typedef float8 hfloatv;
#define DUP(c) ((c).s0011223344556677)
#define SWAP(v) ((v).s1032547698badcfe)
#define ALT                                                                    \
    ((floatv)(-1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, \
              -1.0f, 1.0f, -1.0f, 1.0f))
#endif
/* Elements [0, GPTJ_VEND(rot)) go by whole vectors (even starts, so whole
 * pairs); pairs from GPTJ_VEND(rot) / 2 on go one at a time. */
#if OCLF_VEC == 1
#define GPTJ_VEND(rot) 0u
#else
#define GPTJ_VEND(rot) ((rot) / OCLF_VEC * OCLF_VEC)
#endif

/* ---- one item: the token's cache row, or skip the token ----------------- */
#if OCLF_LAYOUT == 0
#define ITEM_ID get_global_id(0)
#else
#define ITEM_ID get_group_id(0)
#endif
/* Position of token t; the int64 view is taken only when pos64 is set. */
#define ITEM_POSITION(t)                                                       \
    (pos64 ? ((global const long *)pos)[po + (t)] : (long)pos[po + (t)])

/* The rotation of one head `hp` (rot dims) with the cache row `cr`, on
 * values that LOADV/LOADS (vector, scalar at element index) produce, which
 * lets the fused kernel rotate normalized fp32 values that never went
 * through storage. Pairs belong to one work-item, so in-place is safe. */
#define ROTATE_HEAD(hp, cr, LOADV, LOADS)                                      \
    do {                                                                       \
        const uint half_ = rot / 2;                                            \
        if (neox) {                                                            \
            FOR_VEC_IN(j, 0, half_) {                                          \
                floatv x_ = LOADV(j), y_ = LOADV(j + half_);                   \
                floatv c_ = CLOAD(OCLF_VEC, cr, j), s_ = CLOAD(OCLF_VEC, cr, half_ + j); \
                STV(hp, j, x_ * c_ - y_ * s_);                                 \
                STV(hp, j + half_, y_ * c_ + x_ * s_);                         \
            }                                                                  \
            FOR_TAIL_IN(j, 0, half_) {                                         \
                float x_ = LOADS(j), y_ = LOADS(j + half_);                    \
                float c_ = LDC(cr, j), s_ = LDC(cr, half_ + j);                \
                ST(hp, j, x_ * c_ - y_ * s_);                                  \
                ST(hp, j + half_, y_ * c_ + x_ * s_);                          \
            }                                                                  \
        } else {                                                               \
            GPTJ_VECTORS(hp, cr, LOADV);                                       \
            for (uint j = GPTJ_VEND(rot) / 2 + lane; j < half_; j += nlanes) { \
                float x_ = LOADS(2 * j), y_ = LOADS(2 * j + 1);                \
                float c_ = LDC(cr, j), s_ = LDC(cr, half_ + j);                \
                ST(hp, 2 * j, x_ * c_ - y_ * s_);                              \
                ST(hp, 2 * j + 1, y_ * c_ + x_ * s_);                          \
            }                                                                  \
        }                                                                      \
    } while (0)

#if OCLF_VEC == 1
#define GPTJ_VECTORS(hp, cr, LOADV) (void)0
#else
#define GPTJ_VECTORS(hp, cr, LOADV)                                            \
    FOR_VEC_IN(i, 0, GPTJ_VEND(rot)) {                                         \
        floatv v_ = LOADV(i);                                                  \
        hfloatv c_ = CLOAD(OCLF_HVEC, cr, i / 2);                              \
        hfloatv s_ = CLOAD(OCLF_HVEC, cr, half_ + i / 2);                      \
        STV(hp, i, v_ * DUP(c_) + SWAP(v_) * (DUP(s_) * ALT));                 \
    }
#endif

/* 1 / sqrt(mean(h^2) + eps) over the hd elements of head `hp`. */
#define HEAD_RSTD(hp, out)                                                     \
    do {                                                                       \
        floatv q_ = VSPLAT(0.0f);                                              \
        float tq_ = 0.0f;                                                      \
        FOR_VEC_IN(i, 0, hd) {                                                 \
            floatv v_ = LDV(hp, i);                                            \
            q_ += v_ * v_;                                                     \
        }                                                                      \
        FOR_TAIL_IN(i, 0, hd) {                                                \
            float v_ = LD(hp, i);                                              \
            tq_ += v_ * v_;                                                    \
        }                                                                      \
        (out) = rsqrt(ROW_REDUCE(VSUM(q_) + tq_, scratch) / (float)hd + eps); \
    } while (0)

/* The (token, head) item of a packed qkv row that a work-item (LAYOUT 0)
 * or work-group (LAYOUT 1) handles: returns for items past the end and for
 * tokens whose position is outside the cache; else declares t, h, p, the
 * head `hp` and its norm weight `wp` (NULL: none). */
#define QK_HEAD_ITEM()                                                         \
    const uint nh = nq + nk;                                                   \
    ROW_LANES;                                                                 \
    const ulong row = ITEM_ID;                                                 \
    if (row >= tokens * nh)                                                    \
        return;                                                                \
    const ulong t = row / nh;                                                  \
    const uint h = (uint)(row % nh);                                           \
    const long p = ITEM_POSITION(t);                                           \
    if (p < 0 || (ulong)p >= max_pos)                                          \
        return;                                                                \
    global stor_t *hp = x + xo + t * ts + (ulong)h * hd;                       \
    global const stor_t *wp = h < nq ? (qw ? qw + qwo : 0) : (kw ? kw + kwo : 0)

/* ---- kernels ------------------------------------------------------------ */

/* q (nq heads) and k (nk heads, may be 0) rotated in place. Items are
 * (token, head) with the q heads first. */
kernel void rotary_embedding(global stor_t *q, ulong qo, ulong qts, ulong qhs, uint nq,
                             global stor_t *k, ulong ko, ulong kts, ulong khs, uint nk,
                             global const int *pos, ulong po, uint pos64,
                             global const cstor_t *cache, ulong co, ulong cs, ulong max_pos,
                             ulong tokens, uint hd, uint rot, uint neox)
{
    const uint nh = nq + nk;
    ROW_LANES;
    const ulong row = ITEM_ID;
    if (row >= tokens * nh)
        return;
    const ulong t = row / nh;
    const uint h = (uint)(row % nh);
    const long p = ITEM_POSITION(t);
    if (p < 0 || (ulong)p >= max_pos)
        return;
    global stor_t *hp =
        h < nq ? q + qo + t * qts + h * qhs : k + ko + t * kts + (h - nq) * khs;
    global const cstor_t *cr = cache + co + (ulong)p * cs;
#define LOAD_V(i) LDV(hp, (i))
#define LOAD_S(i) LD(hp, (i))
    ROTATE_HEAD(hp, cr, LOAD_V, LOAD_S);
#undef LOAD_V
#undef LOAD_S
}

/* Per-head RMSNorm of the nq Q and nk K heads of a packed qkv, in place:
 * the unfused path's first kernel. Tokens with a bad position are skipped
 * here too, so both paths leave them alone. */
kernel void head_rms_norm(global stor_t *x, ulong xo, ulong ts, uint nq, uint nk,
                          global const stor_t *qw, ulong qwo, global const stor_t *kw, ulong kwo,
                          float eps, global const int *pos, ulong po, uint pos64, ulong max_pos,
                          ulong tokens, uint hd)
{
    local float scratch[OCLF_WGS];
    QK_HEAD_ITEM();
    float r;
    HEAD_RSTD(hp, r);
    FOR_VEC_IN(i, 0, hd) {
        floatv v = LDV(hp, i) * r;
        if (wp)
            v *= LDV(wp, i);
        STV(hp, i, v);
    }
    FOR_TAIL_IN(i, 0, hd) {
        float v = LD(hp, i) * r;
        if (wp)
            v *= LD(wp, i);
        ST(hp, i, v);
    }
}

/* Fused: per-head RMSNorm, then the rotation of the normalized fp32 values
 * (re-read from the head and normalized again on the fly, so nothing is
 * rounded to storage in between), one store per element. */
kernel void qk_norm_rope(global stor_t *x, ulong xo, ulong ts, uint nq, uint nk,
                         global const stor_t *qw, ulong qwo, global const stor_t *kw, ulong kwo,
                         float eps, global const int *pos, ulong po, uint pos64,
                         global const cstor_t *cache, ulong co, ulong cs, ulong max_pos,
                         ulong tokens, uint hd, uint rot, uint neox)
{
    local float scratch[OCLF_WGS];
    QK_HEAD_ITEM();
    global const cstor_t *cr = cache + co + (ulong)p * cs;
    float r;
    HEAD_RSTD(hp, r);
#if OCLF_LAYOUT == 1
    /* The rotation writes elements other work-items read for the sum of
     * squares; the reduction's barriers fence local memory only. */
    barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    /* The same products as head_rms_norm: (v * r) * w. Without a weight
     * the loads come from the head itself and are replaced by 1: both
     * sides of the choice are safe to evaluate, so it needs no branch in
     * the loops and the rotation is compiled once. */
    global const stor_t *ws = wp ? wp : hp;
    const int has_w = wp != 0;
#define NORM_V(i) (LDV(hp, (i)) * r * (has_w ? LDV(ws, (i)) : VSPLAT(1.0f)))
#define NORM_S(i) (LD(hp, (i)) * r * (has_w ? LD(ws, (i)) : 1.0f))
    ROTATE_HEAD(hp, cr, NORM_V, NORM_S);
    FOR_VEC_IN(i, rot, hd) STV(hp, i, NORM_V(i));
    FOR_TAIL_IN(i, rot, hd) ST(hp, i, NORM_S(i));
#undef NORM_V
#undef NORM_S
}
