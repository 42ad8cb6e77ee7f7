/*
 * Rotary embedding and fused QK-norm + RoPE.
 *
 * Fused kernel: qk_norm_rope. Building blocks: rotary_embedding (also the
 * public op) and head_rms_norm (the unfused norm half). kv_cache_write
 * copies K and V heads into a paged cache (the public op, and the last
 * kernel of qk_norm_rope_cache's unfused path); built with
 * OCLF_CACHE_WRITE=1, qk_norm_rope also writes its rotated K heads and the
 * V heads into the cache itself (qk_norm_rope_cache's fused path).
 *
 * Two kernel structures, chosen at build time:
 *   item (OCLF_STAGE 0): OCLF_LAYOUT 0 gives each work-item one token and
 *     all its heads in turn (no barriers: what a CPU wants), OCLF_LAYOUT 1
 *     a work-group per (token, head) item with the head's vectors spread
 *     over its work-items and the sum of squares reduced through local
 *     memory (ROW_LANES, FOR_VEC_IN and ROW_REDUCE of common.h, with the
 *     item in the place of the row). Each item is straight-line code whose
 *     early returns are uniform within a work-group, so no barrier sits
 *     inside a loop or behind a divergent branch.
 *   staged (OCLF_STAGE 1, LAYOUT 1): a work-group per `rpg` tokens that
 *     visits all their heads and reads weights, cos/sin rows and heads from
 *     global memory once each (see the comment at that section).
 * Each kernel is written once, over macros each structure defines ("the
 * two structures" below).
 *
 * The rotation style (NeoX or GPT-J) and the position width are run-time
 * arguments tested outside the loops, so one program serves all of them;
 * the cache's storage type (OCLF_CDTYPE, which may differ from the heads')
 * is a build option because it sets the vector loads.
 *
 * A token whose position lies outside [0, max_pos) is skipped by every
 * kernel here, so its heads are left as they were and the cache is never
 * read outside its rows.
 *
 * Built with OCLF_ROPE_INVERSE=1, every rotation here turns the other way
 * (the sines change sign): rotary_embedding then applies the transpose of
 * the forward rotation, which is the gradient of the forward (and its
 * inverse), oclf_rotary_embedding_backward.
 */

#ifndef OCLF_ROPE_INVERSE
#define OCLF_ROPE_INVERSE 0
#endif
/* The sine a rotation uses: -s turns x' = x c - y s, y' = y c + x s into
 * x' = x c + y s, y' = y c - x s. */
#if OCLF_ROPE_INVERSE
#define ROPE_SIN(s) (-(s))
#else
#define ROPE_SIN(s) (s)
#endif

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
#define CLOADV_(n, p, i) WIDEN_F16(n, LD16V(n, (p) + (i)))
#elif OCLF_CDTYPE == 2
typedef ushort cstor_t;
#define LDC(p, i) bf16_to_f32((p)[(i)])
#define CLOADV_(n, p, i) WIDEN_BF16(n, LD16V(n, (p) + (i)))
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

/* The rotation of the first `nrot` dims of one head, on values that
 * LOADV/LOADS (vector, scalar at element index) produce, with cos/sin from
 * CV(n, j) (n cache elements from j as floatn) and CS(j), its results
 * stored by PUTV(i, v) / PUTS(i, v) (a vector, a scalar at element i). The
 * loaders let the fused kernel rotate normalized fp32 values that never
 * went through storage, and the staged kernels read the head and the
 * cache row from local memory; the stores let the cache-writing
 * qk_norm_rope store each result twice. Pairs belong to one work-item, so
 * in-place is safe. */
#define ROTATE_HEAD(nrot, LOADV, LOADS, CV, CS, PUTV, PUTS)                    \
    do {                                                                       \
        const uint half_ = (nrot) / 2;                                         \
        if (neox) {                                                            \
            FOR_VEC_IN(j, 0, half_) {                                          \
                floatv x_ = LOADV(j), y_ = LOADV(j + half_);                   \
                floatv c_ = CV(OCLF_VEC, j), s_ = ROPE_SIN(CV(OCLF_VEC, half_ + j)); \
                PUTV(j, x_ * c_ - y_ * s_);                                    \
                PUTV(j + half_, y_ * c_ + x_ * s_);                            \
            }                                                                  \
            FOR_TAIL_IN(j, 0, half_) {                                         \
                float x_ = LOADS(j), y_ = LOADS(j + half_);                    \
                float c_ = CS(j), s_ = ROPE_SIN(CS(half_ + j));                \
                PUTS(j, x_ * c_ - y_ * s_);                                    \
                PUTS(j + half_, y_ * c_ + x_ * s_);                            \
            }                                                                  \
        } else {                                                               \
            GPTJ_VECTORS(nrot, LOADV, CV, PUTV);                               \
            for (uint j = GPTJ_VEND(nrot) / 2 + lane; j < half_; j += nlanes) { \
                float x_ = LOADS(2 * j), y_ = LOADS(2 * j + 1);                \
                float c_ = CS(j), s_ = ROPE_SIN(CS(half_ + j));                \
                PUTS(2 * j, x_ * c_ - y_ * s_);                                \
                PUTS(2 * j + 1, y_ * c_ + x_ * s_);                            \
            }                                                                  \
        }                                                                      \
    } while (0)

#if OCLF_VEC == 1
#define GPTJ_VECTORS(nrot, LOADV, CV, PUTV) (void)0
#else
#define GPTJ_VECTORS(nrot, LOADV, CV, PUTV)                                    \
    FOR_VEC_IN(i, 0, GPTJ_VEND(nrot)) {                                        \
        floatv v_ = LOADV(i);                                                  \
        hfloatv c_ = CV(OCLF_HVEC, i / 2);                                     \
        hfloatv s_ = ROPE_SIN(CV(OCLF_HVEC, half_ + i / 2));                   \
        PUTV(i, v_ * DUP(c_) + SWAP(v_) * (DUP(s_) * ALT));                    \
    }
#endif

/* Cache loaders for ROTATE_HEAD: the row `cr` in global memory, in its
 * storage type, or the staged fp32 row `lc` in local memory. */
#define CACHE_GV(n, j) CLOAD(n, cr, j)
#define CACHE_GS(j) LDC(cr, j)
#define CACHE_LV(n, j) LOADF(n, lc, j)
#define CACHE_LS(j) (lc[(j)])
/* LOADF(n, p, i): n fp32 elements of local memory from i (n = 1: a float). */
#define LOADF(n, p, i) OCLF_CAT(LOADF_, n)(p, i)
#define LOADF_1(p, i) ((p)[(i)])
#define LOADF_2(p, i) vload2(0, (p) + (i))
#define LOADF_4(p, i) vload4(0, (p) + (i))
#define LOADF_8(p, i) vload8(0, (p) + (i))
#define LOADF_16(p, i) vload16(0, (p) + (i))

/* The sum of squares of the first n of the hd elements of head `hp`, this
 * work-item's share (n is hd, or 0 for a skipped token in the staged
 * kernels); with `keep` (local memory) the values are staged there on the
 * way. */
#define HEAD_SUMSQ(hp, n, keep, out)                                           \
    do {                                                                       \
        floatv q_ = VSPLAT(0.0f);                                              \
        float tq_ = 0.0f;                                                      \
        FOR_VEC_IN(i, 0, (n)) {                                                \
            floatv v_ = LDV(hp, i);                                            \
            if (keep)                                                          \
                STV_F(keep, i, v_);                                            \
            q_ += v_ * v_;                                                     \
        }                                                                      \
        FOR_TAIL_IN(i, 0, (n)) {                                               \
            float v_ = LD(hp, i);                                              \
            if (keep)                                                          \
                (keep)[i] = v_;                                                \
            tq_ += v_ * v_;                                                    \
        }                                                                      \
        (out) = VSUM(q_) + tq_;                                                \
    } while (0)

/* 1 / sqrt(mean(h^2) + eps) of head `hp` (HEAD_SUMSQ's arguments). */
#define HEAD_RSTD(hp, n, keep, out)                                            \
    do {                                                                       \
        float ss_;                                                             \
        HEAD_SUMSQ(hp, n, keep, ss_);                                          \
        (out) = rsqrt(HEAD_REDUCE(ss_) / (float)hd + eps);                    \
    } while (0)

/* Position of token t; the int64 view is taken only when pos64 is set. */
#define TOKEN_POSITION(t)                                                      \
    (pos64 ? ((global const long *)pos)[po + (t)] : (long)pos[po + (t)])

/* ---- kernel arguments ---------------------------------------------------
 * Both structures take the same arguments (lib/ops/rope.c sets them once):
 * the item structure ignores `rpg` (tokens per staged group) and `stage`
 * (the staged structure's local memory). */
#define ROTARY_ARGS                                                            \
    global stor_t *q, ulong qo, ulong qts, ulong qhs, uint nq, global stor_t *k, ulong ko,     \
        ulong kts, ulong khs, uint nk, global const int *pos, ulong po, uint pos64,            \
        global const cstor_t *cache, ulong co, ulong cs, ulong max_pos, ulong tokens, uint hd, \
        uint rot, uint neox, uint rpg, local float *stage
#define HEAD_NORM_ARGS                                                         \
    global stor_t *x, ulong xo, ulong ts, uint nq, uint nk, global const stor_t *qw,          \
        ulong qwo, global const stor_t *kw, ulong kwo, float eps, global const int *pos,       \
        ulong po, uint pos64, ulong max_pos, ulong tokens, uint hd, uint rpg,                  \
        local float *stage
#define QK_NORM_ROPE_ARGS                                                      \
    global stor_t *x, ulong xo, ulong ts, uint nq, uint nk, global const stor_t *qw,          \
        ulong qwo, global const stor_t *kw, ulong kwo, float eps, global const int *pos,       \
        ulong po, uint pos64, global const cstor_t *cache, ulong co, ulong cs, ulong max_pos,  \
        ulong tokens, uint hd, uint rot, uint neox, uint rpg, local float *stage

#ifndef OCLF_STAGE
#define OCLF_STAGE 0
#endif
#ifndef OCLF_CACHE_WRITE
#define OCLF_CACHE_WRITE 0
#endif
#define SKIPPED_HEADS(t, h0, h1) (void)0
/* A head's sum of squares over the work-items that hold it; the packed
 * structure reduces within a head's segment instead. */
#define HEAD_REDUCE(v) ROW_REDUCE((v), scratch)
/* Whether the (token, head) item of the body is a real one: the packed
 * structure's last pass may have segments without a head. */
#define HEAD_LIVE 1
/* Kernel qualifiers: the packed structure's reductions may need the
 * sub-group width they were compiled for. */
#define ROPE_KERNEL kernel
/* 1 where the packed structure reduces a head by sub-group shuffles. */
#define PACKED_NATIVE 0

/* ---- the two structures --------------------------------------------------
 * Each kernel is written once, over:
 *   HEADS_PROLOGUE(wq, wk): the structure's start, with the q and k norm
 *     weights (NULL: none; the staged structure stages them);
 *     HEADS_PROLOGUE_UNWEIGHTED the same for a kernel that has none.
 *   FOR_HEADS(nh) { ... } END_HEADS: the body once per (token t, head h)
 *     item of this work-item or work-group, with `trot` and `thd` the
 *     rotary and head dims its loops run over and CACHE_V / CACHE_S
 *     reading the token's cos/sin row; FOR_NORMED_HEADS the same for the
 *     kernels that normalize heads (it may find their 1 / rms ahead).
 *   SKIPPED_HEADS(t, h0, h1): what a kernel does for heads [h0, h1) of a
 *     token whose position is outside the cache, in the item structure,
 *     which returns early for them (nothing, but in the cache-writing
 *     qk_norm_rope); the staged structure runs its body over 0 elements
 *     for them instead (`thd` 0).
 *   QK_HEAD(): in that body, head h of token t of a packed qkv as `hp`,
 *     its 1/rms as `r`, its values as `hv` and its norm weight as `wv`
 *     (read with VLD / SLD; `has_w` 0: no weight, and `wv` is the head). */

#if !OCLF_STAGE
/* ---- item structure ------------------------------------------------------
 * LAYOUT 0: one token per work-item, which visits its heads in turn. A
 * head is a few vectors, so a work-item per (token, head) spent as much on
 * finding its item (a 64-bit division), its position and its cache row as
 * on the head itself; per token those are paid once and the cos/sin row
 * stays in cache for every head.
 * LAYOUT 1: one (token, head) item per work-group. Items past the end and
 * tokens whose position is outside the cache return early, which is
 * uniform within the group. */
#define HEADS_PROLOGUE(wq, wk)                                                 \
    local float scratch[OCLF_WGS];                                             \
    ROW_LANES
#define HEADS_PROLOGUE_UNWEIGHTED HEADS_PROLOGUE(0, 0)

#if OCLF_LAYOUT == 0
#define FOR_TOKEN_HEADS_(nh, BATCH_START)                                      \
    {                                                                          \
        const ulong t = get_global_id(0);                                      \
        if (t >= tokens)                                                       \
            return;                                                            \
        const long p = TOKEN_POSITION(t);                                      \
        if (p < 0 || (ulong)p >= max_pos) {                                    \
            SKIPPED_HEADS(t, 0, (nh));                                         \
            return;                                                            \
        }                                                                      \
        const uint trot = rot, thd = hd;                                       \
        global const cstor_t *cr = cache + co + (ulong)p * cs;                 \
        for (uint h0_ = 0; h0_ < (nh); h0_ += RSTD_BATCH) {                    \
            const uint hend_ = min((uint)(nh), h0_ + RSTD_BATCH);              \
            BATCH_START;                                                       \
            for (uint h = h0_; h < hend_; h++) {
#define END_HEADS                                                              \
    }                                                                          \
    }                                                                          \
    }
#define FOR_HEADS(nh) FOR_TOKEN_HEADS_(nh, (void)0)
/* The heads' 1 / rms, RSTD_BATCH at a time: one head's sum, division and
 * square root form a chain of some 50 cycles of latency, which a head's
 * few vectors of work could not hide (a third of qk_norm_rope's time on a
 * CPU). Summed first and finished as one vector, a batch's chains overlap.
 * The arithmetic is HEAD_RSTD's, lane by lane. The batch is one float16
 * (the vload16/vstore16 below). */
#define RSTD_BATCH 16
#define FOR_NORMED_HEADS(nh)                                                   \
    FOR_TOKEN_HEADS_(nh, float rstd_[RSTD_BATCH]; do {                         \
        float ss_[RSTD_BATCH];                                                 \
        for (uint k_ = 0; k_ < RSTD_BATCH; k_++)                               \
            ss_[k_] = 0.0f;                                                    \
        for (uint h_ = h0_; h_ < hend_; h_++)                                  \
            HEAD_SUMSQ(x + xo + t * ts + (ulong)h_ * hd, hd, (local float *)0, \
                       ss_[h_ - h0_]);                                         \
        vstore16(rsqrt(vload16(0, ss_) / (float)hd + eps), 0, rstd_);         \
    } while (0))
#define HEAD_R() (rstd_[h - h0_])
#else
#define FOR_HEADS(nh)                                                          \
    {                                                                          \
        const ulong item_ = get_group_id(0);                                   \
        if (item_ >= tokens * (nh))                                            \
            return;                                                            \
        const ulong t = item_ / (nh);                                          \
        const uint h = (uint)(item_ % (nh));                                   \
        const long p = TOKEN_POSITION(t);                                      \
        if (p < 0 || (ulong)p >= max_pos) {                                    \
            SKIPPED_HEADS(t, h, h + 1);                                        \
            return;                                                            \
        }                                                                      \
        const uint trot = rot, thd = hd;                                       \
        global const cstor_t *cr = cache + co + (ulong)p * cs;
#define END_HEADS }
#define FOR_NORMED_HEADS FOR_HEADS
#endif
#define CACHE_V CACHE_GV
#define CACHE_S CACHE_GS

/* Values and weights come from global memory; 1 / rms from the batch
 * (LAYOUT 0) or the group's reduction. */
#if OCLF_LAYOUT == 0
#define ITEM_RSTD(hp, r) const float r = HEAD_R()
#else
#define ITEM_RSTD(hp, r)                                                       \
    float r;                                                                   \
    HEAD_RSTD(hp, hd, (local float *)0, r)
#endif
#define QK_HEAD()                                                              \
    global stor_t *hp = x + xo + t * ts + (ulong)h * hd;                       \
    global const stor_t *wp = h < nq ? (qw ? qw + qwo : 0) : (kw ? kw + kwo : 0); \
    ITEM_RSTD(hp, r);                                                          \
    global const stor_t *const hv = hp, *const wv = wp ? wp : hp;              \
    const int has_w = wp != 0
#define VLD(p, i) LDV(p, (i))
#define SLD(p, i) LD(p, (i))

#elif OCLF_STAGE == 2
/* ---- packed structure: several heads per work-group (LAYOUT 1) -----------
 * A work-group of OCLF_WGS work-items is OCLF_WGS / OCLF_HLANES segments of
 * OCLF_HLANES consecutive work-items, a (token, head) item per segment at a
 * time. The host sizes a segment to the head (about one vector pair of the
 * rotation per work-item), so a head of 128 bf16 elements keeps 8 lanes busy
 * on both the norm and the rotation, where a work-group per head left most
 * of a warp or wavefront idle. The group takes `rpg` tokens, all their heads
 * (token-major), in passes of one item per segment; the host picks rpg so
 * that rpg x heads fills whole passes where it can. Only the last pass of a
 * group may have segments without an item (HEAD_LIVE 0), and they run the
 * body over 0 elements, so every work-item reaches every barrier.
 *
 * The group's cos/sin rows are staged once, as fp32, in `stage` (rpg rows of
 * rot floats; a token outside the cache leaves its row unwritten and
 * unread): each row is read from global memory once for all the heads of its
 * token. A head's sum of squares is reduced within its segment: by sub-group
 * shuffles where the device has them (cl/subgroup.h; segments are aligned
 * to and no wider than the sub-group), else through local memory with a
 * barrier per step, which every segment reaches together. Norm weights are
 * read from global memory, where every head after the first finds them in
 * cache. */
#include "subgroup.h"
#ifndef OCLF_HLANES
#define OCLF_HLANES 8 /* work-items per head: a power of two dividing OCLF_WGS */
#endif
#if OCLF_LAYOUT != 1 || OCLF_WGS % OCLF_HLANES != 0
#error "OCLF_STAGE 2 needs OCLF_LAYOUT 1 and OCLF_HLANES dividing OCLF_WGS"
#endif
#define PACKED_SEGMENTS (OCLF_WGS / OCLF_HLANES)
#undef PACKED_NATIVE
/* (the host refuses WGS below the sub-group width where there is a form) */
#define PACKED_NATIVE (OCLF_SUBGROUP_FORM != 0 && OCLF_HLANES <= OCLF_SUBGROUP_WIDTH)
#undef ROPE_KERNEL
#define ROPE_KERNEL kernel OCLF_SUBGROUP_KERNEL
#undef HEAD_REDUCE
#define HEAD_REDUCE(v) oclf_seg_sum((v), OCLF_HLANES, lid_, OCLF_WGS, scratch)
#undef HEAD_LIVE
#define HEAD_LIVE live_

/* The group's `ntok` cos/sin rows (tokens from t0) into `lcs` as fp32, all
 * work-items sharing the work; rows of tokens outside the cache are left. */
static inline void packed_stage_rows(local float *lcs, global const cstor_t *cache, ulong co,
                                     ulong cs, global const int *pos, ulong po, uint pos64,
                                     ulong max_pos, ulong t0, uint ntok, uint rot, uint lid)
{
    for (uint i = 0; i < ntok; i++) {
        const ulong t = t0 + i;
        const long p = TOKEN_POSITION(t);
        if (p < 0 || (ulong)p >= max_pos)
            continue;
        global const cstor_t *const cr = cache + co + (ulong)p * cs;
        local float *const lc = lcs + i * rot;
        const uint lane = lid, nlanes = OCLF_WGS;
        FOR_VEC_IN(j, 0, rot) STV_F(lc, j, CLOAD(OCLF_VEC, cr, j));
        FOR_TAIL_IN(j, 0, rot) lc[j] = LDC(cr, j);
    }
}

#define HEADS_PROLOGUE(wq, wk) HEADS_PROLOGUE_UNWEIGHTED
#define HEADS_PROLOGUE_UNWEIGHTED                                              \
    local float scratch[OCLF_WGS];                                             \
    const uint lid_ = get_local_id(0);                                         \
    const uint lane = lid_ % OCLF_HLANES, nlanes = OCLF_HLANES;                \
    const uint seg_ = lid_ / OCLF_HLANES;                                      \
    const ulong t0_ = (ulong)get_group_id(0) * rpg;                            \
    const uint ntok_ = (uint)min((ulong)rpg, tokens - t0_);                    \
    local float *const lcs = stage;                                            \
    packed_stage_rows(lcs, cache, co, cs, pos, po, pos64, max_pos, t0_, ntok_, rot, lid_); \
    barrier(CLK_LOCAL_MEM_FENCE)

/* One pass per PACKED_SEGMENTS items; the pass count is the group's. */
#define FOR_HEADS(nh)                                                          \
    for (uint pass_ = 0, items_ = ntok_ * (uint)(nh); pass_ * PACKED_SEGMENTS < items_; pass_++) { \
        const uint it_ = pass_ * PACKED_SEGMENTS + seg_;                       \
        const int live_ = it_ < items_;                                        \
        const uint ti_ = live_ ? it_ / (uint)(nh) : 0;                         \
        const uint h = live_ ? it_ % (uint)(nh) : 0;                           \
        const ulong t = t0_ + ti_;                                             \
        const long p = TOKEN_POSITION(t);                                      \
        const int in_cache = live_ && p >= 0 && (ulong)p < max_pos;            \
        const uint trot = in_cache ? rot : 0, thd = in_cache ? hd : 0;         \
        local const float *const lc = lcs + ti_ * rot;                         \
        {
#define END_HEADS                                                              \
    }                                                                          \
    }
#define FOR_NORMED_HEADS FOR_HEADS
#define CACHE_V CACHE_LV
#define CACHE_S CACHE_LS

/* Values and weights from global memory, 1 / rms from the segment. */
#define QK_HEAD()                                                              \
    global stor_t *hp = x + xo + t * ts + (ulong)h * hd;                       \
    global const stor_t *wp = h < nq ? (qw ? qw + qwo : 0) : (kw ? kw + kwo : 0); \
    float r;                                                                   \
    HEAD_RSTD(hp, thd, (local float *)0, r);                                   \
    global const stor_t *const hv = hp, *const wv = wp ? wp : hp;              \
    const int has_w = wp != 0
#define VLD(p, i) LDV(p, (i))
#define SLD(p, i) LD(p, (i))

#else
/* ---- staged structure: a work-group per `rpg` tokens (LAYOUT 1) ----------
 * The group visits every head of its tokens, so what heads share leaves
 * global memory once: the norm weights once per group, a token's cos/sin
 * row once per token, and (head_rms_norm, qk_norm_rope) each head once,
 * kept in fp32 for the pass after its sum of squares. This is the
 * structure that reaches the op's minimum traffic; the item structure
 * re-reads those from caches instead.
 *
 * Local memory `stage`: the group's rpg positions (long), then in floats
 * q weight [hd], k weight [hd], two cache rows [rot], two heads [hd]. The
 * positions go first so the longs sit at the buffer's aligned start, and
 * one staging pass reads each once. Rows and heads alternate between their
 * two buffers, so a buffer is rewritten only after a barrier that every
 * work-item reaches once done reading it (the next head's reduction, or
 * the next token's staging barrier): no barrier beyond those.
 *
 * A token whose position is outside the cache runs its loops over 0
 * elements rather than branching around them, so every work-item still
 * reaches every barrier and the token is left as it was. */
#if OCLF_LAYOUT != 1
#error "OCLF_STAGE needs OCLF_LAYOUT 1"
#endif

/* Copies n elements of a vector (storage) into local fp32, this work-item's
 * share; nothing when src is NULL. */
#define STAGE_WEIGHT(src, dst, n)                                              \
    do {                                                                       \
        if (src) {                                                             \
            FOR_VEC_IN(i, 0, (n)) STV_F(dst, i, LDV(src, i));                  \
            FOR_TAIL_IN(i, 0, (n)) (dst)[i] = LD(src, i);                      \
        }                                                                      \
    } while (0)

/* The stage's layout, the group's positions (visible to all after the
 * barrier; t0_ is the group's first token), the norm weights as wq_, wk_
 * and staged, and `n`, the group's running head count. */
#define HEADS_PROLOGUE(wq, wk)                                                 \
    HEADS_PROLOGUE_STAGE_;                                                     \
    global const stor_t *const wq_ = (wq), *const wk_ = (wk);                  \
    STAGE_WEIGHT(wq_, lqw, hd);                                                \
    STAGE_WEIGHT(wk_, lkw, hd);                                                \
    uint n = 0
/* Without norm weights no staging code at all, rather than STAGE_WEIGHT on a
 * constant null pointer: Mesa 22.3's OpenCL compiler aborted the process in
 * clCreateKernel on the f16 form of that dead branch (a scalar vload_half
 * from the null constant). */
#define HEADS_PROLOGUE_UNWEIGHTED                                              \
    HEADS_PROLOGUE_STAGE_;                                                     \
    uint n = 0
#define HEADS_PROLOGUE_STAGE_                                                  \
    local float scratch[OCLF_WGS];                                             \
    ROW_LANES;                                                                 \
    local long *const lpos = (local long *)stage;                              \
    local float *const lqw = stage + 2 * rpg, *const lkw = lqw + hd;           \
    local float *const lcs = lkw + hd, *const lhs = lcs + 2 * rot;             \
    const ulong t0_ = (ulong)get_group_id(0) * rpg;                            \
    for (uint i = lane; i < rpg && t0_ + i < tokens; i += nlanes)              \
        lpos[i] = TOKEN_POSITION(t0_ + i);                                     \
    barrier(CLK_LOCAL_MEM_FENCE)

/* Token t's cos/sin row is staged into the buffer of t's parity as `lc`
 * and made visible to the group before its heads. */
#define FOR_HEADS(nh)                                                          \
    FOR_ROWS(t, tokens, rpg) {                                                 \
        const long p = lpos[t - t0_];                                          \
        const int in_cache = p >= 0 && (ulong)p < max_pos;                     \
        const uint trot = in_cache ? rot : 0, thd = in_cache ? hd : 0;         \
        global const cstor_t *cr = cache + co + (in_cache ? (ulong)p : 0) * cs; \
        local float *const lc = lcs + (uint)(t & 1) * rot;                     \
        FOR_VEC_IN(i, 0, trot) STV_F(lc, i, CLOAD(OCLF_VEC, cr, i));           \
        FOR_TAIL_IN(i, 0, trot) lc[i] = LDC(cr, i);                            \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
        for (uint h = 0; h < (nh); h++, n++) {
#define END_HEADS                                                              \
    }                                                                          \
    }
#define FOR_NORMED_HEADS FOR_HEADS
#define CACHE_V CACHE_LV
#define CACHE_S CACHE_LS

/* The head is staged into the buffer of the group's head count as `lh`
 * while its sum of squares is taken; values and weights come from there. */
#define QK_HEAD()                                                              \
    global stor_t *hp = x + xo + t * ts + (ulong)h * hd;                       \
    local const float *const lw = h < nq ? (wq_ ? lqw : 0) : (wk_ ? lkw : 0);  \
    local float *const lh = lhs + (n & 1) * hd;                                \
    float r;                                                                   \
    HEAD_RSTD(hp, thd, lh, r);                                                 \
    local const float *const hv = lh, *const wv = lw ? lw : lh;                \
    const int has_w = lw != 0
#define VLD(p, i) LDV_F(p, (i))
#define SLD(p, i) ((p)[(i)])
#endif

/* ---- kernels ---------------------------------------------------------- */

/* q (nq heads) and k (nk heads, may be 0) rotated in place. Items are
 * (token, head) with the q heads first. */
ROPE_KERNEL void rotary_embedding(ROTARY_ARGS)
{
    HEADS_PROLOGUE_UNWEIGHTED; /* no norm weights */
    FOR_HEADS(nq + nk) {
        global stor_t *hp =
            h < nq ? q + qo + t * qts + h * qhs : k + ko + t * kts + (h - nq) * khs;
#define LOAD_V(i) LDV(hp, (i))
#define LOAD_S(i) LD(hp, (i))
#define PUT_V(i, v) STV(hp, (i), (v))
#define PUT_S(i, v) ST(hp, (i), (v))
        ROTATE_HEAD(trot, LOAD_V, LOAD_S, CACHE_V, CACHE_S, PUT_V, PUT_S);
#undef LOAD_V
#undef LOAD_S
#undef PUT_V
#undef PUT_S
    }
    END_HEADS
}

/* Per-head RMSNorm of the nq Q and nk K heads of a packed qkv, in place:
 * the unfused path's first kernel. Tokens with a bad position are skipped
 * here too, so both paths leave them alone. */
ROPE_KERNEL void head_rms_norm(HEAD_NORM_ARGS)
{
    /* no cos/sin rows: nothing rotated, nothing of the cache read */
    const uint rot = 0;
    global const cstor_t *const cache = 0;
    const ulong co = 0, cs = 0;
    HEADS_PROLOGUE(qw ? qw + qwo : 0, kw ? kw + kwo : 0);
    FOR_NORMED_HEADS(nq + nk) {
        QK_HEAD();
        FOR_VEC_IN(i, 0, thd) {
            floatv v = VLD(hv, i) * r;
            if (has_w)
                v *= VLD(wv, i);
            STV(hp, i, v);
        }
        FOR_TAIL_IN(i, 0, thd) {
            float v = SLD(hv, i) * r;
            if (has_w)
                v *= SLD(wv, i);
            ST(hp, i, v);
        }
    }
    END_HEADS
}

/* ---- the paged KV cache ---------------------------------------------------
 * K and V each [nslots, nk, hd] of the heads' storage type: slot s's head h
 * starts at (s * nk + h) * hd, the same offset in both (a block of
 * block_size slots is block_size consecutive slots, so the host passes
 * nslots = num_blocks * block_size and no division by the block size is
 * needed). A token whose slot is negative (padding) or at or beyond nslots
 * is not written. */

/* n storage elements from src to dst as they are (the cache takes the bits
 * the heads hold), this work-item's share. The aligned build (both heads
 * on vector boundaries) moves each vector of VEC elements as naturally
 * aligned 32-bit words, 16 bytes at VEC 8 in 16-bit storage or VEC 4 in
 * f32 (as 16-bit lanes, a GPU compiler splits the same vector into 2-byte
 * accesses). Elsewhere 16-bit pieces: any element offset may use them, and
 * no value is converted. */
#define STOR_USHORTS (OCLF_DTYPE == 0 ? 2u : 1u)
#if OCLF_ALIGNED && OCLF_VEC > 1
#if OCLF_DTYPE == 0
#define OCLF_COPY_WORDS OCLF_VEC
#elif OCLF_VEC == 2
#define OCLF_COPY_WORDS 1
#elif OCLF_VEC == 4
#define OCLF_COPY_WORDS 2
#elif OCLF_VEC == 8
#define OCLF_COPY_WORDS 4
#else
#define OCLF_COPY_WORDS 8
#endif
#if OCLF_COPY_WORDS == 1
typedef uint copy_unit_t;
#else
typedef OCLF_CAT(uint, OCLF_COPY_WORDS) copy_unit_t;
#endif
#endif
static inline void copy_head(global stor_t *dst, global const stor_t *src, uint n, uint lane,
                             uint nlanes)
{
#if OCLF_ALIGNED && OCLF_VEC > 1
    global uint *const dw = (global uint *)dst;
    global const uint *const sw = (global const uint *)src;
    const uint words = n * STOR_USHORTS / 2; /* n is a multiple of VEC here */
    for (uint i = lane * OCLF_COPY_WORDS; i + OCLF_COPY_WORDS <= words;
         i += nlanes * OCLF_COPY_WORDS)
        *(global copy_unit_t *)(dw + i) = *(global const copy_unit_t *)(sw + i);
#else
    global ushort *const d = (global ushort *)dst;
    global const ushort *const s = (global const ushort *)src;
    const uint m = n * STOR_USHORTS;
#if OCLF_VEC > 1
    FOR_VEC_IN(i, 0, m) ST16V(OCLF_VEC, d + i, LD16V(OCLF_VEC, s + i));
    FOR_TAIL_IN(i, 0, m) d[i] = s[i];
#else
    for (uint i = lane; i < m; i += nlanes)
        d[i] = s[i];
#endif
#endif
}

/* Where head kh of the token with slot `slot` goes: its element offset in
 * K (and in V), or CACHE_SKIP. */
#define CACHE_SKIP ((ulong)-1)
static inline ulong cache_offset(long slot, ulong nslots, uint nk, uint kh, uint hd)
{
    return slot < 0 || (ulong)slot >= nslots ? CACHE_SKIP : ((ulong)slot * nk + kh) * hd;
}

/* K head h (nq <= h < nq + nk) of token t of the packed qkv `x`: copies
 * its V head into the cache and, with copy_k, the K head as it is (a token
 * left unrotated). Returns the K head's place in the cache, for the
 * rotation to write; null where the token's slot is skipped. */
static inline global stor_t *cache_put_head(global stor_t *x, ulong xo, ulong ts, uint nq,
                                            uint nk, uint hd, ulong t, uint h,
                                            global const long *slots, ulong so, ulong nslots,
                                            global stor_t *ck, ulong cko, global stor_t *cv,
                                            ulong cvo, int copy_k, uint lane, uint nlanes)
{
    const ulong at = cache_offset(slots[so + t], nslots, nk, h - nq, hd);
    if (at == CACHE_SKIP)
        return 0;
    global stor_t *const kp = x + xo + t * ts + (ulong)h * hd;
    /* V head h - nq sits nk heads after K head h */
    copy_head(cv + cvo + at, kp + (ulong)nk * hd, hd, lane, nlanes);
    if (copy_k)
        copy_head(ck + cko + at, kp, hd, lane, nlanes);
    return ck + cko + at;
}

#if OCLF_CACHE_WRITE
/* The cache-writing qk_norm_rope's extra arguments, after the stage. */
#define CACHE_WRITE_ARGS                                                       \
    , global const long *slots, ulong so, ulong nslots, global stor_t *ck, ulong cko,          \
        global stor_t *cv, ulong cvo
/* A token the rotation skips still goes into the cache as it stands, as
 * the unfused path (which writes the cache after the rope kernels) leaves
 * it. */
#undef SKIPPED_HEADS
#define SKIPPED_HEADS(t, h0, h1)                                               \
    for (uint h_ = max((uint)(h0), nq); h_ < (uint)(h1); h_++)                 \
    (void)cache_put_head(x, xo, ts, nq, nk, hd, t, h_, slots, so, nslots, ck, cko, cv, cvo, 1, \
                         lane, nlanes)
#else
#define CACHE_WRITE_ARGS
#endif

/* Fused: per-head RMSNorm, then the rotation of the normalized fp32 values
 * (normalized again on the fly from the head, so nothing is rounded to
 * storage in between), one store per element. With OCLF_CACHE_WRITE each K
 * head's rotated values are stored into the cache as well, and its V head
 * copied there, so the new keys are written once. */
ROPE_KERNEL void qk_norm_rope(QK_NORM_ROPE_ARGS CACHE_WRITE_ARGS)
{
    HEADS_PROLOGUE(qw ? qw + qwo : 0, kw ? kw + kwo : 0);
    FOR_NORMED_HEADS(nq + nk) {
        QK_HEAD();
#if OCLF_LAYOUT == 1 && !PACKED_NATIVE
        /* The rotation writes elements other work-items read for the sum
         * of squares; the reduction's barriers fence local memory only.
         * (Reduced by shuffles, every such read has already delivered its
         * value into the sum the writing work-item waits for.) */
        barrier(CLK_GLOBAL_MEM_FENCE);
#endif
#if OCLF_CACHE_WRITE
        /* thd is 0 only for a staged token that is not rotated: its K head
         * goes to the cache as it is. Each result is stored into the head
         * and, for a K head with a slot, from the same value into the
         * cache. */
        global stor_t *const cp =
            h < nq || !HEAD_LIVE
                   ? 0
                   : cache_put_head(x, xo, ts, nq, nk, hd, t, h, slots, so, nslots, ck, cko, cv,
                                    cvo, thd == 0, lane, nlanes);
#define PUT_BOTH(store, type, i, v)                                            \
    do {                                                                       \
        const type w_ = (v);                                                   \
        store(hp, (i), w_);                                                    \
        if (cp)                                                                \
            store(cp, (i), w_);                                                \
    } while (0)
#define PUT_V(i, v) PUT_BOTH(STV, floatv, i, v)
#define PUT_S(i, v) PUT_BOTH(ST, float, i, v)
#else
#define PUT_V(i, v) STV(hp, (i), (v))
#define PUT_S(i, v) ST(hp, (i), (v))
#endif
        /* The same products as head_rms_norm: (v * r) * w. Without a
         * weight `wv` is the head itself and its values are replaced by 1:
         * both sides of the choice are safe to evaluate, so the loops need
         * no branch and the rotation is compiled once. */
#define NORM_V(i) (VLD(hv, (i)) * r * (has_w ? VLD(wv, (i)) : VSPLAT(1.0f)))
#define NORM_S(i) (SLD(hv, (i)) * r * (has_w ? SLD(wv, (i)) : 1.0f))
        ROTATE_HEAD(trot, NORM_V, NORM_S, CACHE_V, CACHE_S, PUT_V, PUT_S);
        FOR_VEC_IN(i, trot, thd) PUT_V(i, NORM_V(i));
        FOR_TAIL_IN(i, trot, thd) PUT_S(i, NORM_S(i));
#undef NORM_V
#undef NORM_S
#undef PUT_V
#undef PUT_S
#undef PUT_BOTH
    }
    END_HEADS
}

/* K and V heads [tokens, heads, hd] (any token and head strides) copied
 * into the cache at their tokens' slots: the public kv_cache_write.
 * LAYOUT 0 a (token, head) item per work-item, LAYOUT 1 a work-group per
 * item with the head's vectors spread over its work-items (coalesced on a
 * GPU), and in the packed programs (STAGE 2) an item per segment of
 * OCLF_HLANES work-items; the rope structures' other parameters do not
 * apply. */
kernel void kv_cache_write(global const stor_t *k, ulong ko, ulong kts, ulong khs,
                           global const stor_t *v, ulong vo, ulong vts, ulong vhs, uint heads,
                           uint hd, global const long *slots, ulong so, ulong nslots,
                           ulong tokens, global stor_t *ck, ulong cko, global stor_t *cv,
                           ulong cvo)
{
#if OCLF_LAYOUT == 0
    const ulong item = get_global_id(0);
    ROW_LANES;
#elif OCLF_STAGE == 2
    /* the packed programs: an item per segment */
    const ulong item = (ulong)get_group_id(0) * PACKED_SEGMENTS + get_local_id(0) / OCLF_HLANES;
    const uint lane = get_local_id(0) % OCLF_HLANES, nlanes = OCLF_HLANES;
#else
    const ulong item = get_group_id(0);
    ROW_LANES;
#endif
    if (item >= tokens * heads)
        return;
    const ulong t = item / heads;
    const uint h = (uint)(item % heads);
    const ulong at = cache_offset(slots[so + t], nslots, heads, h, hd);
    if (at == CACHE_SKIP)
        return;
    copy_head(ck + cko + at, k + ko + t * kts + h * khs, hd, lane, nlanes);
    copy_head(cv + cvo + at, v + vo + t * vts + h * vhs, hd, lane, nlanes);
}
