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
 * Three kernel structures, chosen at build time:
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
 *   packed (OCLF_STAGE 2, LAYOUT 1): several heads per work-group, a
 *     segment of OCLF_HLANES work-items per head (the GPU default).
 * Each kernel fills a rope_job with its arguments and hands it to the
 * structure's walk over its (token, head) items (rope_walk), which does one
 * item with rope_head: the rotation of one head (rotate_stored_head,
 * rotate_normed_head), the norm of one head (norm_head), and the cache
 * write of the cache-writing qk_norm_rope (cache_put_head). The kernel's
 * kind is a constant at every call, so each kernel keeps only its own code.
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
#define OCLF_ROPE_INVERSE 0 /* 1: every rotation turns the other way (the backward) */
#endif
/* The sine a rotation uses: -s turns x' = x c - y s, y' = y c + x s into
 * x' = x c + y s, y' = y c - x s. */
#if OCLF_ROPE_INVERSE
#define ROPE_SIN(s) (-(s))
#else
#define ROPE_SIN(s) (s)
#endif

#ifndef OCLF_CDTYPE
#define OCLF_CDTYPE OCLF_DTYPE /* storage type of the cos/sin cache (as OCLF_DTYPE) */
#endif
#ifndef OCLF_STAGE
#define OCLF_STAGE 0 /* kernel structure: 0 item, 1 staged, 2 packed */
#endif
#ifndef OCLF_CACHE_WRITE
#define OCLF_CACHE_WRITE 0 /* 1: qk_norm_rope also writes K and V into the paged cache */
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
/* LOADF(n, p, i): n fp32 elements of local memory from i (n = 1: a float). */
#define LOADF(n, p, i) OCLF_CAT(LOADF_, n)(p, i)
#define LOADF_1(p, i) ((p)[(i)])
#define LOADF_2(p, i) vload2(0, (p) + (i))
#define LOADF_4(p, i) vload4(0, (p) + (i))
#define LOADF_8(p, i) vload8(0, (p) + (i))
#define LOADF_16(p, i) vload16(0, (p) + (i))

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

/* Elements [0, gptj_vend(rot)) go by whole vectors (even starts, so whole
 * pairs); pairs from gptj_vend(rot) / 2 on go one at a time. */
static inline uint gptj_vend(uint rot)
{
#if OCLF_VEC == 1
    return 0u;
#else
    return rot / OCLF_VEC * OCLF_VEC;
#endif
}

#if OCLF_VEC > 1
/* The pairs of v rotated by their cos c and sin s. */
static inline floatv gptj_rotate(floatv v, hfloatv c, hfloatv s)
{
    return v * DUP(c) + SWAP(v) * (DUP(s) * ALT);
}
#endif

/* Position of token t; the int64 view is taken only when pos64 is set. */
static inline long token_position(global const int *pos, ulong po, uint pos64, ulong t)
{
    return pos64 ? ((global const long *)pos)[po + t] : (long)pos[po + t];
}

/* ---- where a head's cos/sin row and its values come from -----------------
 * The item structure reads the token's cos/sin row from the cache in its
 * storage type; the staged and packed structures from the fp32 copy they
 * staged in local memory. The norm kernels read a head's values and weights
 * from global memory, but in the staged structure, which keeps them in local
 * memory as fp32. */
#if OCLF_STAGE
typedef local const float *crow_t;
static inline floatv crow_v(crow_t c, uint j) { return LDV_F(c, j); }
static inline float crow_s(crow_t c, uint j) { return c[j]; }
#if OCLF_VEC > 1
static inline hfloatv crow_h(crow_t c, uint j) { return LOADF(OCLF_HVEC, c, j); }
#endif
#else
typedef global const cstor_t *crow_t;
static inline floatv crow_v(crow_t c, uint j) { return CLOAD(OCLF_VEC, c, j); }
static inline float crow_s(crow_t c, uint j) { return LDC(c, j); }
#if OCLF_VEC > 1
static inline hfloatv crow_h(crow_t c, uint j) { return CLOAD(OCLF_HVEC, c, j); }
#endif
#endif

#if OCLF_STAGE == 1
typedef local const float *hsrc_t;
static inline floatv hsrc_v(hsrc_t p, uint i) { return LDV_F(p, i); }
static inline float hsrc_s(hsrc_t p, uint i) { return p[i]; }
#else
typedef global const stor_t *hsrc_t;
static inline floatv hsrc_v(hsrc_t p, uint i) { return LDV(p, i); }
static inline float hsrc_s(hsrc_t p, uint i) { return LD(p, i); }
#endif

/* ---- one head ------------------------------------------------------------ */

/* The first `nrot` dims of head `hp` rotated in place by the cos/sin row
 * `cr` (NeoX halves or GPT-J pairs), this work-item's share. Pairs belong
 * to one work-item, so in-place is safe.
 * A NeoX vector pair computes both results before it stores either: a
 * store's narrowing to storage may stay a call in a GPU compiler's code (the
 * aligned f16 store does in one), and what lives across a call holds its
 * registers, so storing x' before computing y' kept x, y, c and s (four
 * vectors) live across the first store where the two results are enough.
 * The same values, stored in the same order; the registers this saves are
 * in docs/notes/2026-11-29-rope-inline.md. */
static inline void rotate_stored_head(global stor_t *hp, crow_t cr, uint nrot, uint neox,
                                      uint lane, uint nlanes)
{
    const uint hrot = nrot / 2;
    if (neox) {
        FOR_VEC_IN(j, 0, hrot) {
            const floatv x = LDV(hp, j), y = LDV(hp, j + hrot);
            const floatv c = crow_v(cr, j), s = ROPE_SIN(crow_v(cr, hrot + j));
            const floatv xr = x * c - y * s, yr = y * c + x * s; /* both first: see above */
            STV(hp, j, xr);
            STV(hp, j + hrot, yr);
        }
        FOR_TAIL_IN(j, 0, hrot) {
            const float x = LD(hp, j), y = LD(hp, j + hrot);
            const float c = crow_s(cr, j), s = ROPE_SIN(crow_s(cr, hrot + j));
            ST(hp, j, x * c - y * s);
            ST(hp, j + hrot, y * c + x * s);
        }
    } else {
#if OCLF_VEC > 1
        FOR_VEC_IN(i, 0, gptj_vend(nrot)) {
            const floatv v = LDV(hp, i);
            const hfloatv c = crow_h(cr, i / 2), s = ROPE_SIN(crow_h(cr, hrot + i / 2));
            STV(hp, i, gptj_rotate(v, c, s));
        }
#endif
        for (uint j = gptj_vend(nrot) / 2 + lane; j < hrot; j += nlanes) {
            const float x = LD(hp, 2 * j), y = LD(hp, 2 * j + 1);
            const float c = crow_s(cr, j), s = ROPE_SIN(crow_s(cr, hrot + j));
            ST(hp, 2 * j, x * c - y * s);
            ST(hp, 2 * j + 1, y * c + x * s);
        }
    }
}

/* Element i of a head normalized: (v * r) * w, the products head_rms_norm
 * takes. Without a weight (has_w 0) `wv` is the head itself and its value
 * is replaced by 1: both sides of the choice are safe to evaluate, so the
 * loops need no branch and the rotation is compiled once. */
static inline floatv normed_v(hsrc_t hv, hsrc_t wv, int has_w, float r, uint i)
{
    return hsrc_v(hv, i) * r * (has_w ? hsrc_v(wv, i) : VSPLAT(1.0f));
}
static inline float normed_s(hsrc_t hv, hsrc_t wv, int has_w, float r, uint i)
{
    return hsrc_s(hv, i) * r * (has_w ? hsrc_s(wv, i) : 1.0f);
}

/* A result stored into the head and, where `cp` is not null (a K head
 * going into the cache), from the same value into the cache. */
static inline void put_v(global stor_t *hp, global stor_t *cp, uint i, floatv v)
{
#if OCLF_ALIGNED && OCLF_DTYPE != 0 && OCLF_VEC > 1
    /* narrowed once for both stores: as two STVs, the second narrowing was
     * compiled again, not shared */
#if OCLF_DTYPE == 1
    const oclf_words_a w = oclf_narrow_f16_words(v);
#else
    const oclf_words_a w = oclf_narrow_bf16_words(v);
#endif
    *(global oclf_words_a *)(hp + i) = w;
    if (cp)
        *(global oclf_words_a *)(cp + i) = w;
#else
    STV(hp, i, v);
    if (cp)
        STV(cp, i, v);
#endif
}
static inline void put_s(global stor_t *hp, global stor_t *cp, uint i, float v)
{
    ST(hp, i, v);
    if (cp)
        ST(cp, i, v);
}

/* The fused head: the values of `hv` normalized (normed_v's arguments) and
 * their first `nrot` dims rotated by `cr`, the rest of the `thd` dims as
 * normalized, each stored once into `hp` (and `cp`). The values are
 * normalized again on the fly from the head, so nothing is rounded to
 * storage in between. */
static inline void rotate_normed_head(global stor_t *hp, global stor_t *cp, hsrc_t hv,
                                      hsrc_t wv, int has_w, float r, crow_t cr, uint nrot,
                                      uint thd, uint neox, uint lane, uint nlanes)
{
    const uint hrot = nrot / 2;
    if (neox) {
        FOR_VEC_IN(j, 0, hrot) {
            const floatv x = normed_v(hv, wv, has_w, r, j);
            const floatv y = normed_v(hv, wv, has_w, r, j + hrot);
            const floatv c = crow_v(cr, j), s = ROPE_SIN(crow_v(cr, hrot + j));
            const floatv xr = x * c - y * s, yr = y * c + x * s; /* both first, as above */
            put_v(hp, cp, j, xr);
            put_v(hp, cp, j + hrot, yr);
        }
        FOR_TAIL_IN(j, 0, hrot) {
            const float x = normed_s(hv, wv, has_w, r, j);
            const float y = normed_s(hv, wv, has_w, r, j + hrot);
            const float c = crow_s(cr, j), s = ROPE_SIN(crow_s(cr, hrot + j));
            put_s(hp, cp, j, x * c - y * s);
            put_s(hp, cp, j + hrot, y * c + x * s);
        }
    } else {
#if OCLF_VEC > 1
        FOR_VEC_IN(i, 0, gptj_vend(nrot)) {
            const floatv v = normed_v(hv, wv, has_w, r, i);
            const hfloatv c = crow_h(cr, i / 2), s = ROPE_SIN(crow_h(cr, hrot + i / 2));
            put_v(hp, cp, i, gptj_rotate(v, c, s));
        }
#endif
        for (uint j = gptj_vend(nrot) / 2 + lane; j < hrot; j += nlanes) {
            const float x = normed_s(hv, wv, has_w, r, 2 * j);
            const float y = normed_s(hv, wv, has_w, r, 2 * j + 1);
            const float c = crow_s(cr, j), s = ROPE_SIN(crow_s(cr, hrot + j));
            put_s(hp, cp, 2 * j, x * c - y * s);
            put_s(hp, cp, 2 * j + 1, y * c + x * s);
        }
    }
    FOR_VEC_IN(i, nrot, thd) put_v(hp, cp, i, normed_v(hv, wv, has_w, r, i));
    FOR_TAIL_IN(i, nrot, thd) put_s(hp, cp, i, normed_s(hv, wv, has_w, r, i));
}

/* head_rms_norm's head: the `thd` values of `hv` times r (and the weight). */
static inline void norm_head(global stor_t *hp, hsrc_t hv, hsrc_t wv, int has_w, float r,
                             uint thd, uint lane, uint nlanes)
{
    FOR_VEC_IN(i, 0, thd) {
        floatv v = hsrc_v(hv, i) * r;
        if (has_w)
            v *= hsrc_v(wv, i);
        STV(hp, i, v);
    }
    FOR_TAIL_IN(i, 0, thd) {
        float v = hsrc_s(hv, i) * r;
        if (has_w)
            v *= hsrc_s(wv, i);
        ST(hp, i, v);
    }
}

/* The sum of squares of the first n elements of head `hp`, this work-item's
 * share (n is the head dim, or 0 for a skipped token in the staged and
 * packed structures); with `keep` (local memory) the values are staged
 * there as fp32 on the way. */
static inline float head_sumsq(global const stor_t *hp, uint n, local float *keep, uint lane,
                               uint nlanes)
{
    floatv q = VSPLAT(0.0f);
    float tq = 0.0f;
    FOR_VEC_IN(i, 0, n) {
        const floatv v = LDV(hp, i);
        if (keep)
            STV_F(keep, i, v);
        q += v * v;
    }
    FOR_TAIL_IN(i, 0, n) {
        const float v = LD(hp, i);
        if (keep)
            keep[i] = v;
        tq += v * v;
    }
    return VSUM(q) + tq;
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

/* ---- kernel arguments and the job ----------------------------------------
 * Every structure takes the same arguments (lib/ops/rope.c sets them once):
 * the item structure ignores `rpg` (tokens per staged group) and `stage`
 * (the staged and packed structures' local memory). */
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
#if OCLF_CACHE_WRITE
/* The cache-writing qk_norm_rope's extra arguments, after the stage. */
#define CACHE_WRITE_ARGS                                                       \
    , global const long *slots, ulong so, ulong nslots, global stor_t *ck, ulong cko,          \
        global stor_t *cv, ulong cvo
#else
#define CACHE_WRITE_ARGS
#endif

/* What a kernel works on, for the structure's walk: a kernel leaves the
 * fields of the others' arguments zero. */
typedef struct rope_job {
    /* rotary_embedding: q (nq heads) and k (nk heads) */
    global stor_t *q, *k;
    ulong qo, qts, qhs, ko, kts, khs;
    /* the norm kernels: the packed qkv x and the norm weights, already at
     * their offsets (null: no weight) */
    global stor_t *x;
    ulong xo, ts;
    global const stor_t *qw, *kw;
    float eps;
    uint nq, nk, hd, rot, neox;
    global const int *pos;
    ulong po;
    uint pos64;
    global const cstor_t *cache;
    ulong co, cs, max_pos, tokens;
    uint rpg;
    local float *stage;
    /* the cache-writing qk_norm_rope's paged cache */
    global const long *slots;
    ulong so, nslots;
    global stor_t *ck, *cv;
    ulong cko, cvo;
} rope_job;

/* The kernel a walk serves. */
#define ROPE_ROTARY 0u /* rotary_embedding */
#define ROPE_NORM 1u   /* head_rms_norm */
#define ROPE_QK 2u     /* qk_norm_rope */

/* Head h's norm weight (q heads first), null where it has none. */
static inline global const stor_t *head_weight(const rope_job *j, uint h)
{
    return h < j->nq ? j->qw : j->kw;
}

/* Heads [h0, h1) of token t, whose position is outside the cache, in the
 * item structure, which returns early for them: the cache-writing
 * qk_norm_rope still puts the token's K and V heads into the cache as they
 * stand, as the unfused path (which writes the cache after the rope
 * kernels) leaves them; nothing elsewhere. The staged and packed structures
 * run their item over 0 elements instead (`thd` 0). */
static inline void skipped_heads(const rope_job *j, uint kind, ulong t, uint h0, uint h1,
                                 uint lane, uint nlanes)
{
#if OCLF_CACHE_WRITE
    if (kind == ROPE_QK)
        for (uint h = max(h0, j->nq); h < h1; h++)
            (void)cache_put_head(j->x, j->xo, j->ts, j->nq, j->nk, j->hd, t, h, j->slots, j->so,
                                 j->nslots, j->ck, j->cko, j->cv, j->cvo, 1, lane, nlanes);
#endif
}

#ifndef OCLF_HLANES
#define OCLF_HLANES 8 /* packed structure: work-items per head, a power of two dividing OCLF_WGS */
#endif
/* 1 where the packed structure reduces a head by sub-group shuffles. */
#if OCLF_STAGE == 2
#include "subgroup.h"
/* (the host refuses WGS below the sub-group width where there is a form) */
#define PACKED_NATIVE (OCLF_SUBGROUP_FORM != 0 && OCLF_HLANES <= OCLF_SUBGROUP_WIDTH)
#else
#define PACKED_NATIVE 0
#endif

/* One (token t, head h) item of kernel `kind`: `trot` and `thd` the rotary
 * and head dims its loops run over (0 for a token the staged and packed
 * structures skip), `cr` the token's cos/sin row; for the norm kernels `hv`
 * and `wv` the head's values and weight, `has_w` whether there is one, and
 * r the head's 1 / rms. `live` 0: a packed segment without an item, which
 * runs over 0 elements. */
static inline void rope_head(const rope_job *j, uint kind, ulong t, uint h, uint trot, uint thd,
                             crow_t cr, hsrc_t hv, hsrc_t wv, int has_w, float r, int live,
                             uint lane, uint nlanes)
{
    if (kind == ROPE_ROTARY) {
        global stor_t *const hp = h < j->nq ? j->q + j->qo + t * j->qts + h * j->qhs
                                            : j->k + j->ko + t * j->kts + (h - j->nq) * j->khs;
        rotate_stored_head(hp, cr, trot, j->neox, lane, nlanes);
        return;
    }
    global stor_t *const hp = j->x + j->xo + t * j->ts + (ulong)h * j->hd;
    if (kind == ROPE_NORM) {
        norm_head(hp, hv, wv, has_w, r, thd, lane, nlanes);
        return;
    }
#if OCLF_LAYOUT == 1 && !PACKED_NATIVE
    /* The rotation writes elements other work-items read for the sum of
     * squares; the reduction's barriers fence local memory only. (Reduced
     * by shuffles, every such read has already delivered its value into the
     * sum the writing work-item waits for.) */
    barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    global stor_t *cp = 0;
#if OCLF_CACHE_WRITE
    /* thd is 0 only for a staged token that is not rotated: its K head goes
     * to the cache as it is. Each result is stored into the head and, for a
     * K head with a slot, from the same value into the cache. */
    if (h >= j->nq && live)
        cp = cache_put_head(j->x, j->xo, j->ts, j->nq, j->nk, j->hd, t, h, j->slots, j->so,
                            j->nslots, j->ck, j->cko, j->cv, j->cvo, thd == 0, lane, nlanes);
#endif
    rotate_normed_head(hp, cp, hv, wv, has_w, r, cr, trot, thd, j->neox, lane, nlanes);
}

/* ---- the structures' walks -------------------------------------------------
 * rope_walk(j, kind, scratch) runs rope_head over the (token, head) items
 * of this work-item or work-group, the nq + nk heads of a token with the q
 * heads first; `scratch` is the kernel's local memory for the reductions
 * (OCLF_WGS floats). Each computes the head's 1 / rms for the norm kernels
 * before the item (the reduction of its sum of squares is where the
 * structures differ most). It is OCLF_INLINE: kept as a call, the job
 * struct went through memory (f16 aligned qk_norm_rope took 106 registers
 * on sm_90). */

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

#if OCLF_LAYOUT == 0
/* The heads' 1 / rms, RSTD_BATCH at a time: one head's sum, division and
 * square root form a chain of some 50 cycles of latency, which a head's
 * few vectors of work could not hide (a third of qk_norm_rope's time on a
 * CPU). Summed first and finished as one vector, a batch's chains overlap.
 * The arithmetic is head_rstd's, lane by lane. The batch is one float16
 * (the vload16/vstore16 below). */
#define RSTD_BATCH 16

/* 1 / rms of heads [h0, hend) of the token whose heads start at `xt` into
 * rstd[0, hend - h0). */
static inline void batch_rstd(float rstd[RSTD_BATCH], global const stor_t *xt, uint h0,
                              uint hend, uint hd, float eps)
{
    const uint lane = 0, nlanes = 1;
    float ss[RSTD_BATCH];
    for (uint k = 0; k < RSTD_BATCH; k++)
        ss[k] = 0.0f;
    for (uint h = h0; h < hend; h++)
        ss[h - h0] = head_sumsq(xt + (ulong)h * hd, hd, (local float *)0, lane, nlanes);
    vstore16(rsqrt(vload16(0, ss) / (float)hd + eps), 0, rstd);
}

OCLF_INLINE void rope_walk(const rope_job *j, uint kind, local float *scratch)
{
    ROW_LANES;
    const uint nh = j->nq + j->nk;
    const ulong t = get_global_id(0);
    if (t >= j->tokens)
        return;
    const long p = token_position(j->pos, j->po, j->pos64, t);
    if (p < 0 || (ulong)p >= j->max_pos) {
        skipped_heads(j, kind, t, 0, nh, lane, nlanes);
        return;
    }
    const crow_t cr = j->cache + j->co + (ulong)p * j->cs;
    global const stor_t *const xt = j->x + j->xo + t * j->ts;
    for (uint h0 = 0; h0 < nh; h0 += RSTD_BATCH) {
        const uint hend = min(nh, h0 + RSTD_BATCH);
        float rstd[RSTD_BATCH];
        if (kind != ROPE_ROTARY)
            batch_rstd(rstd, xt, h0, hend, j->hd, j->eps);
        for (uint h = h0; h < hend; h++) {
            global const stor_t *const hp = xt + (ulong)h * j->hd;
            global const stor_t *const wp = head_weight(j, h);
            rope_head(j, kind, t, h, j->rot, j->hd, cr, hp, wp ? wp : hp, wp != 0,
                      kind == ROPE_ROTARY ? 1.0f : rstd[h - h0], 1, lane, nlanes);
        }
    }
}
#else
/* 1 / sqrt(mean(h^2) + eps) of head `hp` over the group. */
static inline float head_rstd(global const stor_t *hp, uint hd, float eps,
                              local float *scratch, uint lane, uint nlanes)
{
    return rsqrt(ROW_REDUCE(head_sumsq(hp, hd, (local float *)0, lane, nlanes), scratch) /
                     (float)hd +
                 eps);
}

OCLF_INLINE void rope_walk(const rope_job *j, uint kind, local float *scratch)
{
    ROW_LANES;
    const uint nh = j->nq + j->nk;
    const ulong item = get_group_id(0);
    if (item >= j->tokens * nh)
        return;
    const ulong t = item / nh;
    const uint h = (uint)(item % nh);
    const long p = token_position(j->pos, j->po, j->pos64, t);
    if (p < 0 || (ulong)p >= j->max_pos) {
        skipped_heads(j, kind, t, h, h + 1, lane, nlanes);
        return;
    }
    const crow_t cr = j->cache + j->co + (ulong)p * j->cs;
    global const stor_t *const hp = j->x + j->xo + t * j->ts + (ulong)h * j->hd;
    global const stor_t *const wp = head_weight(j, h);
    const float r = kind == ROPE_ROTARY ? 1.0f : head_rstd(hp, j->hd, j->eps, scratch, lane, nlanes);
    rope_head(j, kind, t, h, j->rot, j->hd, cr, hp, wp ? wp : hp, wp != 0, r, 1, lane, nlanes);
}
#endif

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
 * group may have segments without an item (`live` 0), and they run the
 * item over 0 elements, so every work-item reaches every barrier.
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
#if OCLF_LAYOUT != 1 || OCLF_WGS % OCLF_HLANES != 0
#error "OCLF_STAGE 2 needs OCLF_LAYOUT 1 and OCLF_HLANES dividing OCLF_WGS"
#endif
#define PACKED_SEGMENTS (OCLF_WGS / OCLF_HLANES)
/* Kernel qualifiers: the packed structure's reductions may need the
 * sub-group width they were compiled for. */
#define ROPE_KERNEL kernel OCLF_SUBGROUP_KERNEL

/* The group's `ntok` cos/sin rows (tokens from t0) into `lcs` as fp32, all
 * work-items sharing the work; rows of tokens outside the cache are left. */
static inline void packed_stage_rows(local float *lcs, const rope_job *j, ulong t0, uint ntok,
                                     uint lid)
{
    const uint lane = lid, nlanes = OCLF_WGS, rot = j->rot;
    for (uint i = 0; i < ntok; i++) {
        const long p = token_position(j->pos, j->po, j->pos64, t0 + i);
        if (p < 0 || (ulong)p >= j->max_pos)
            continue;
        global const cstor_t *const cr = j->cache + j->co + (ulong)p * j->cs;
        local float *const lc = lcs + i * rot;
        FOR_VEC_IN(k, 0, rot) STV_F(lc, k, CLOAD(OCLF_VEC, cr, k));
        FOR_TAIL_IN(k, 0, rot) lc[k] = LDC(cr, k);
    }
}

OCLF_INLINE void rope_walk(const rope_job *j, uint kind, local float *scratch)
{
    const uint lid = get_local_id(0);
    const uint lane = lid % OCLF_HLANES, nlanes = OCLF_HLANES;
    const uint seg = lid / OCLF_HLANES;
    const ulong t0 = (ulong)get_group_id(0) * j->rpg;
    const uint ntok = (uint)min((ulong)j->rpg, j->tokens - t0);
    local float *const lcs = j->stage;
    packed_stage_rows(lcs, j, t0, ntok, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* one pass per PACKED_SEGMENTS items; the pass count is the group's */
    const uint nh = j->nq + j->nk;
    for (uint pass = 0, items = ntok * nh; pass * PACKED_SEGMENTS < items; pass++) {
        const uint it = pass * PACKED_SEGMENTS + seg;
        const int live = it < items;
        const uint ti = live ? it / nh : 0;
        const uint h = live ? it % nh : 0;
        const ulong t = t0 + ti;
        const long p = token_position(j->pos, j->po, j->pos64, t);
        const int in_cache = live && p >= 0 && (ulong)p < j->max_pos;
        const uint trot = in_cache ? j->rot : 0, thd = in_cache ? j->hd : 0;
        global const stor_t *const hp = j->x + j->xo + t * j->ts + (ulong)h * j->hd;
        global const stor_t *const wp = head_weight(j, h);
        const float r = kind == ROPE_ROTARY
                            ? 1.0f
                            : rsqrt(oclf_seg_sum(head_sumsq(hp, thd, (local float *)0, lane, nlanes),
                                                 OCLF_HLANES, lid, OCLF_WGS, scratch) /
                                        (float)j->hd +
                                    j->eps);
        rope_head(j, kind, t, h, trot, thd, lcs + ti * j->rot, hp, wp ? wp : hp, wp != 0, r, live,
                  lane, nlanes);
    }
}

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

/* The stage's parts (see above). */
static inline local float *staged_qw(local float *stage, uint rpg) { return stage + 2 * rpg; }
static inline local float *staged_kw(local float *stage, uint rpg, uint hd)
{
    return staged_qw(stage, rpg) + hd;
}
static inline local float *staged_rows(local float *stage, uint rpg, uint hd)
{
    return staged_kw(stage, rpg, hd) + hd;
}

/* n storage elements of `src` into local fp32 `dst`, this work-item's share;
 * nothing when src is null. */
static inline void stage_weight(global const stor_t *src, local float *dst, uint n, uint lane,
                                uint nlanes)
{
    if (src) {
        FOR_VEC_IN(i, 0, n) STV_F(dst, i, LDV(src, i));
        FOR_TAIL_IN(i, 0, n) dst[i] = LD(src, i);
    }
}

/* The norm kernels' weights into the stage, before the walk (whose first
 * token's staging barrier makes them visible). Called only by the kernels
 * that have weights, rather than skipped on a constant null pointer: Mesa
 * 22.3's OpenCL compiler aborted the process in clCreateKernel on the f16
 * form of that dead branch (a scalar vload_half from the null constant). */
static inline void stage_weights(const rope_job *j)
{
    ROW_LANES;
    stage_weight(j->qw, staged_qw(j->stage, j->rpg), j->hd, lane, nlanes);
    stage_weight(j->kw, staged_kw(j->stage, j->rpg, j->hd), j->hd, lane, nlanes);
}

OCLF_INLINE void rope_walk(const rope_job *j, uint kind, local float *scratch)
{
    ROW_LANES;
    local long *const lpos = (local long *)j->stage;
    local float *const lcs = staged_rows(j->stage, j->rpg, j->hd);
    local float *const lhs = lcs + 2 * j->rot;
    const ulong t0 = (ulong)get_group_id(0) * j->rpg;
    for (uint i = lane; i < j->rpg && t0 + i < j->tokens; i += nlanes)
        lpos[i] = token_position(j->pos, j->po, j->pos64, t0 + i);
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint nh = j->nq + j->nk, hd = j->hd;
    uint n = 0; /* the group's running head count */
    FOR_ROWS(t, j->tokens, j->rpg) {
        /* token t's cos/sin row, staged into the buffer of t's parity and
         * made visible to the group before its heads */
        const long p = lpos[t - t0];
        const int in_cache = p >= 0 && (ulong)p < j->max_pos;
        const uint trot = in_cache ? j->rot : 0, thd = in_cache ? hd : 0;
        global const cstor_t *const cr = j->cache + j->co + (in_cache ? (ulong)p : 0) * j->cs;
        local float *const lc = lcs + (uint)(t & 1) * j->rot;
        FOR_VEC_IN(i, 0, trot) STV_F(lc, i, CLOAD(OCLF_VEC, cr, i));
        FOR_TAIL_IN(i, 0, trot) lc[i] = LDC(cr, i);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint h = 0; h < nh; h++, n++) {
            /* the head staged into the buffer of the group's head count
             * while its sum of squares is taken; values and weights come
             * from there */
            global const stor_t *const hp = j->x + j->xo + t * j->ts + (ulong)h * hd;
            local float *const lh = lhs + (n & 1) * hd;
            const int has_w = head_weight(j, h) != 0;
            local const float *const lw =
                has_w ? (h < j->nq ? staged_qw(j->stage, j->rpg) : staged_kw(j->stage, j->rpg, hd))
                      : lh;
            const float r =
                kind == ROPE_ROTARY
                    ? 1.0f
                    : rsqrt(ROW_REDUCE(head_sumsq(hp, thd, lh, lane, nlanes), scratch) /
                                (float)hd +
                            j->eps);
            rope_head(j, kind, t, h, trot, thd, lc, lh, lw, has_w, r, 1, lane, nlanes);
        }
    }
}
#endif

#ifndef ROPE_KERNEL
#define ROPE_KERNEL kernel
#endif

/* ---- kernels ---------------------------------------------------------- */

/* q (nq heads) and k (nk heads, may be 0) rotated in place. Items are
 * (token, head) with the q heads first. */
ROPE_KERNEL void rotary_embedding(ROTARY_ARGS)
{
    local float scratch[OCLF_WGS];
    const rope_job j = {.q = q, .qo = qo, .qts = qts, .qhs = qhs, .k = k, .ko = ko, .kts = kts,
                        .khs = khs, .nq = nq, .nk = nk, .hd = hd, .rot = rot, .neox = neox,
                        .pos = pos, .po = po, .pos64 = pos64, .cache = cache, .co = co, .cs = cs,
                        .max_pos = max_pos, .tokens = tokens, .rpg = rpg, .stage = stage};
    rope_walk(&j, ROPE_ROTARY, scratch);
}

/* Per-head RMSNorm of the nq Q and nk K heads of a packed qkv, in place:
 * the unfused path's first kernel. Tokens with a bad position are skipped
 * here too, so both paths leave them alone. No cos/sin rows (rot 0, no
 * cache): nothing rotated, nothing of the cache read. */
ROPE_KERNEL void head_rms_norm(HEAD_NORM_ARGS)
{
    local float scratch[OCLF_WGS];
    const rope_job j = {.x = x, .xo = xo, .ts = ts, .qw = qw ? qw + qwo : 0,
                        .kw = kw ? kw + kwo : 0, .eps = eps, .nq = nq, .nk = nk, .hd = hd,
                        .pos = pos, .po = po, .pos64 = pos64, .max_pos = max_pos,
                        .tokens = tokens, .rpg = rpg, .stage = stage};
#if OCLF_STAGE == 1
    stage_weights(&j);
#endif
    rope_walk(&j, ROPE_NORM, scratch);
}

/* Fused: per-head RMSNorm, then the rotation of the normalized fp32 values,
 * one store per element. With OCLF_CACHE_WRITE each K head's rotated values
 * are stored into the cache as well, and its V head copied there, so the
 * new keys are written once. */
ROPE_KERNEL void qk_norm_rope(QK_NORM_ROPE_ARGS CACHE_WRITE_ARGS)
{
    local float scratch[OCLF_WGS];
    const rope_job j = {.x = x, .xo = xo, .ts = ts, .qw = qw ? qw + qwo : 0,
                        .kw = kw ? kw + kwo : 0, .eps = eps, .nq = nq, .nk = nk, .hd = hd,
                        .rot = rot, .neox = neox, .pos = pos, .po = po, .pos64 = pos64,
                        .cache = cache, .co = co, .cs = cs, .max_pos = max_pos,
                        .tokens = tokens, .rpg = rpg, .stage = stage
#if OCLF_CACHE_WRITE
                        , .slots = slots, .so = so, .nslots = nslots, .ck = ck, .cko = cko,
                        .cv = cv, .cvo = cvo
#endif
    };
#if OCLF_STAGE == 1
    stage_weights(&j);
#endif
    rope_walk(&j, ROPE_QK, scratch);
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
