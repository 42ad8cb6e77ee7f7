/*
 * Rotary embedding and fused QK-norm + RoPE against the CPU reference:
 * every dtype, NeoX and GPT-J pairs, partial rotary, the head sizes of the
 * issue (64, 80, 120, 128, 256) with R = hd, hd/2, hd/4 and 96 of 128, GQA
 * and MHA, int32 and int64 positions, an f32 cache under f16 heads, strided
 * tokens and heads, q and k as views of one qkv buffer, 0/1/many tokens,
 * positions out of range (left alone, or rejected under validation), both
 * kernel structures, fused == unfused, and the bad arguments. The backward
 * rotation (oclf_rotary_embedding_backward) goes through the same cases
 * as the forward against its own reference, undoes the forward, and
 * matches finite differences of the forward.
 *
 * Every check covers the whole buffer: computed elements against the
 * reference within tolerance, every other element (V heads, dims >= R of a
 * rotary head, padding, tokens with a bad position) bit for bit unchanged.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

/* ---- the rotation's inputs ---------------------------------------------- */

typedef struct rope_in {
    oclf_rope rope;    /* what the library gets */
    oclf_ref_rope ref; /* what the reference gets */
    int64_t *pos;
    void *cache;
    cl_mem mpos, mcache;
} rope_in;

/* A cache [max_pos, R] (row stride R + cpad, element offset coff) in cdt
 * and `tokens` positions in [0, max_pos), every 4th one out of range when
 * `bad` (below 0, at max_pos, far above). */
static rope_in make_rope(oclf_dtype cdt, size_t tokens, size_t hd, size_t R, int gptj, int pos64,
                         int bad)
{
    rope_in r;
    memset(&r, 0, sizeof r);
    const size_t max_pos = 61, cpad = 3, coff = 1, cs = R + cpad;
    const size_t ces = oclf_dtype_size(cdt);
    r.cache = calloc(coff + max_pos * cs + 1, ces);
    for (size_t p = 0; p < max_pos; p++)
        for (size_t j = 0; j < R / 2; j++) {
            double f = pow(10000.0, -2.0 * (double)j / (double)R);
            oclf_ref_set(cdt, r.cache, coff + p * cs + j, (float)cos((double)p * f));
            oclf_ref_set(cdt, r.cache, coff + p * cs + R / 2 + j, (float)sin((double)p * f));
        }
    r.pos = malloc((tokens + 1) * sizeof *r.pos);
    const int64_t bads[] = {-1, (int64_t)max_pos, (int64_t)1 << 40};
    for (size_t t = 0; t < tokens; t++) {
        r.pos[t] = (int64_t)(th_uniform(0.0f, 1.0f) * (float)max_pos) % (int64_t)max_pos;
        if (bad && t % 4 == 1)
            r.pos[t] = pos64 ? bads[(t / 4) % 3] : bads[(t / 4) % 2];
    }
    /* positions start one element into their buffer */
    const size_t psz = pos64 ? 8 : 4;
    char *hp = calloc(tokens + 1, psz);
    for (size_t t = 0; t < tokens; t++) {
        if (pos64)
            memcpy(hp + (t + 1) * 8, &r.pos[t], 8);
        else {
            int32_t v = (int32_t)r.pos[t];
            memcpy(hp + (t + 1) * 4, &v, 4);
        }
    }
    r.mpos = th_upload(hp, (tokens + 1) * psz);
    free(hp);
    r.mcache = th_upload(r.cache, (coff + max_pos * cs + 1) * ces);
    r.rope.style = gptj ? OCLF_ROPE_GPTJ : OCLF_ROPE_NEOX;
    r.rope.head_dim = hd;
    r.rope.rot_dim = R;
    r.rope.positions = (oclf_buf){r.mpos, 1, 0};
    r.rope.pos_type = pos64 ? OCLF_INT64 : OCLF_INT32;
    r.rope.cos_sin = (oclf_buf){r.mcache, coff, cs};
    r.rope.cache_dtype = cdt;
    r.rope.max_pos = max_pos;
    r.ref.gptj = gptj;
    r.ref.hd = hd;
    r.ref.rot = R;
    r.ref.pos = r.pos;
    r.ref.cache = (char *)r.cache + coff * ces;
    r.ref.cdtype = cdt;
    r.ref.cs = cs;
    r.ref.max_pos = max_pos;
    return r;
}

static void free_rope(rope_in *r)
{
    clReleaseMemObject(r->mpos), clReleaseMemObject(r->mcache);
    free(r->pos), free(r->cache);
}

static int pos_ok(const rope_in *r, size_t t)
{
    return r->pos[t] >= 0 && (uint64_t)r->pos[t] < r->rope.max_pos;
}

/* got vs want over n elements: where computed[i], within tolerance of
 * want[i]; elsewhere bit-identical to before. */
static void check_buffer(const char *what, oclf_dtype dt, const void *got, const void *before,
                         const double *want, const unsigned char *computed, size_t n)
{
    double atol, rtol;
    oclf_ref_tolerance(dt, &atol, &rtol);
    const size_t es = oclf_dtype_size(dt);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        int ok;
        if (computed[i]) {
            double g = oclf_ref_get(dt, got, i);
            ok = fabs(g - want[i]) <= atol + rtol * fabs(want[i]);
        } else {
            ok = memcmp((const char *)got + i * es, (const char *)before + i * es, es) == 0;
        }
        if (!ok && bad++ == 0)
            first = i;
    }
    ck_assert_msg(bad == 0,
                  "%s: %zu elements wrong, first at %zu (%s: got %g, want %g, before %g)", what,
                  bad, first, computed[first] ? "computed" : "must be unchanged",
                  (double)oclf_ref_get(dt, got, first), want[first],
                  (double)oclf_ref_get(dt, before, first));
}

/* ---- qk_norm_rope -------------------------------------------------------- */

typedef struct qk_case {
    oclf_dtype dt, cdt;
    int gptj, pos64, bad;
    size_t tokens, nq, nk, nv, hd, rot;
    size_t pad;     /* extra elements per token */
    int weights;
    const oclf_choice *choice;
    size_t off; /* the qkv buffer's leading elements (0: 2) */
} qk_case;
#define QK_OFF(c) ((c)->off ? (c)->off : 2)

/* POCL's compiler gets the item structure with LAYOUT 1 wrong (wrong
 * heads, stores past the buffer) where a vector loop leaves a scalar tail,
 * and NVIDIA's faults on it: the fused kernel with VEC >= 4 and a rotary
 * half VEC does not divide, and the head norm of both paths with VEC >= 2
 * and a head_dim VEC does not divide. The library refuses those
 * combinations on every device but the simulator. */
static int hits_split_tail_quirk(const qk_case *c)
{
    if (!c->choice || th_platform_is("oclgrind"))
        return 0;
    int64_t layout = 0, vec = 1, stage = 0;
    oclf_params_get(&c->choice->params, "LAYOUT", &layout);
    oclf_params_get(&c->choice->params, "VEC", &vec);
    oclf_params_get(&c->choice->params, "STAGE", &stage);
    const int fused = c->choice->path == OCLF_PATH_FUSED;
    return layout == 1 && !stage &&
           ((fused && vec >= 4 && (c->rot / 2) % (size_t)vec != 0) ||
            (vec >= 2 && c->hd % (size_t)vec != 0));
}

/* Runs one case and checks the whole buffer; returns it as stored (NULL
 * where the device refuses the case's parameters, checked here). */
/* The context calls go to: the test device's, or a build-logging one. */
static oclf_context *case_ctx;
#define CASE_CTX (case_ctx ? case_ctx : e->ctx)

static void *run_qk(const qk_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dt;
    const size_t es = oclf_dtype_size(dt), hd = c->hd, nh = c->nq + c->nk + c->nv;
    const size_t ts = nh * hd + c->pad, off = QK_OFF(c), n = off + c->tokens * ts + 1;
    th_seed(c->tokens * 977 + hd * 31 + c->rot * 7 + (size_t)c->gptj + c->nq);
    rope_in r = make_rope(c->cdt, c->tokens, hd, c->rot, c->gptj, c->pos64, c->bad);
    void *x = th_random(dt, n, -2.0f, 2.0f);
    /* Weights up to 1 keep normalized values below 2 or so, where one
     * bf16 rounding between the unfused kernels stays inside the dtype's
     * tolerance. */
    void *qw = th_random(dt, hd, 0.5f, 1.0f), *kw = th_random(dt, hd, 0.5f, 1.0f);
    cl_mem mx = th_upload(x, n * es), mqw = th_upload(qw, hd * es), mkw = th_upload(kw, hd * es);
    /* A vector's stride is ignored, so one below the width is accepted. */
    oclf_buf bx = {mx, off, ts}, bqw = {mqw, 0, 1}, bkw = {mkw, 0, 1};
    cl_event ev = NULL;
    if (hits_split_tail_quirk(c)) {
        void *after = malloc(n * es);
        TH_EXPECT_FAIL(oclf_qk_norm_rope(CASE_CTX, e->queue, dt, c->tokens, c->nq, c->nk, c->nv,
                                         &r.rope, bx, c->weights ? &bqw : NULL,
                                         c->weights ? &bkw : NULL, 1e-6f, c->choice, 0, NULL, &ev),
                       OCLF_UNSUPPORTED, "miscompiled", {
                           th_download(mx, after, n * es);
                           ck_assert(memcmp(after, x, n * es) == 0);
                           ck_assert_ptr_null(ev);
                       });
        free(after), free(x), free(qw), free(kw);
        clReleaseMemObject(mx), clReleaseMemObject(mqw), clReleaseMemObject(mkw);
        free_rope(&r);
        return NULL;
    }
    TH_OK(oclf_qk_norm_rope(CASE_CTX, e->queue, dt, c->tokens, c->nq, c->nk, c->nv, &r.rope, bx,
                            c->weights ? &bqw : NULL, c->weights ? &bkw : NULL, 1e-6f, c->choice, 0,
                            NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    void *got = malloc(n * es);
    th_download(mx, got, n * es);

    double *ref = malloc((c->tokens * nh * hd + 1) * sizeof *ref);
    oclf_ref_qk_norm_rope(dt, c->tokens, c->nq, c->nk, c->nv, (char *)x + off * es, ts,
                          c->weights ? qw : NULL, c->weights ? kw : NULL, 1e-6f, &r.ref, ref);
    double *want = calloc(n, sizeof *want);
    unsigned char *computed = calloc(n, 1);
    for (size_t t = 0; t < c->tokens; t++)
        for (size_t i = 0; i < (c->nq + c->nk) * hd; i++) {
            want[off + t * ts + i] = ref[t * nh * hd + i];
            computed[off + t * ts + i] = pos_ok(&r, t);
        }
    char what[160];
    snprintf(what, sizeof what, "qk_norm_rope %s/%s %s T%zu %zu+%zu+%zu hd%zu R%zu pos%d path%d",
             oclf_dtype_name(dt), oclf_dtype_name(c->cdt), c->gptj ? "gptj" : "neox", c->tokens,
             c->nq, c->nk, c->nv, hd, c->rot, c->pos64 ? 64 : 32,
             c->choice ? (int)c->choice->path : 0);
    check_buffer(what, dt, got, x, want, computed, n);

    free(ref), free(want), free(computed);
    free(x), free(qw), free(kw);
    clReleaseMemObject(mx), clReleaseMemObject(mqw), clReleaseMemObject(mkw);
    free_rope(&r);
    return got;
}

static void qk_fused_vs_unfused(qk_case c)
{
    oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    if (c.choice)
        f.params = u.params = c.choice->params;
    c.choice = &f;
    void *gf = run_qk(&c);
    c.choice = &u;
    void *gu = run_qk(&c);
    if (!gf) {
        free(gu);
        return;
    }
    const size_t n = QK_OFF(&c) + c.tokens * ((c.nq + c.nk + c.nv) * c.hd + c.pad) + 1;
    double *as_ref = malloc(n * sizeof *as_ref);
    for (size_t i = 0; i < n; i++)
        as_ref[i] = oclf_ref_get(c.dt, gu, i);
    size_t bad = oclf_ref_compare(c.dt, gf, n, as_ref, 1, n, NULL, NULL);
    ck_assert_msg(bad == 0, "qk_norm_rope %s hd %zu R %zu: fused and unfused differ in %zu",
                  oclf_dtype_name(c.dt), c.hd, c.rot, bad);
    free(as_ref), free(gf), free(gu);
}

/* dtype x style (loop index), default parameters: every head size and
 * rotary split of the issue, GQA and MHA, 0/1/5 tokens. */
START_TEST(test_qk_matrix)
{
    const oclf_dtype dt = dtypes[_i / 2];
    const int gptj = _i % 2;
    static const size_t hds[] = {64, 80, 120, 128, 256};
    static const size_t heads[2][3] = {{32, 8, 8}, {3, 3, 3}};
    for (size_t hi = 0; hi < 5; hi++) {
        const size_t hd = hds[hi];
        size_t rots[4] = {hd, hd / 2, hd / 4, 0};
        if (hd == 128)
            rots[3] = 96;
        for (size_t ri = 0; ri < 4 && rots[ri]; ri++) {
            if (rots[ri] % 2)
                continue;
            for (size_t g = 0; g < 2; g++) {
                /* many tokens with MHA, one with the 48 heads of GQA */
                qk_case c = {dt, dt, gptj, (int)(hi % 2), 0, g ? 5 : 1,
                             heads[g][0], heads[g][1], heads[g][2], hd, rots[ri],
                             (hi % 2) ? 7 : 0, ri != 1, NULL, 0};
                qk_fused_vs_unfused(c);
            }
        }
    }
    qk_case z = {dt, dt, gptj, 0, 0, 0, 32, 8, 8, 128, 128, 0, 1, NULL, 0};
    qk_fused_vs_unfused(z);
}
END_TEST

/* ---- rotary_embedding ---------------------------------------------------- */

typedef struct rot_case {
    oclf_dtype dt, cdt;
    int gptj, pos64, bad;
    size_t tokens, nq, nk, hd, rot;
    int views;    /* 1: q and k are views of one qkv buffer (plus V heads);
                   * 2: q and k heads interleaved in one buffer (q0 k0 q1 k1 ..,
                   * head stride 2 hd; nq == nk) */
    size_t hpad;  /* separate buffers: extra elements between heads */
    int with_k;
    const oclf_choice *choice;
    int backward; /* oclf_rotary_embedding_backward instead */
    int on_vectors; /* offsets and token strides multiples of 8, else odd */
} rot_case;

static void run_rot(const rot_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dt;
    const size_t es = oclf_dtype_size(dt), hd = c->hd;
    th_seed(c->tokens * 131 + hd * 17 + c->rot + (size_t)c->views);
    rope_in r = make_rope(c->cdt, c->tokens, hd, c->rot, c->gptj, c->pos64, c->bad);
    /* q (and k) geometry */
    const int inter = c->views == 2;
    const size_t hs = inter ? 2 * hd : c->views ? hd : hd + c->hpad;
    const size_t nv = c->views == 1 ? 2 : 0;
    const int ov = c->on_vectors;
    const size_t qts = inter       ? 2 * c->nq * hd + (ov ? 0 : 3)
                       : c->views ? (c->nq + c->nk + nv) * hd + (ov ? 0 : 3)
                                  : c->nq * hs + (ov ? 0 : 5);
    const size_t kts = c->views ? qts : c->nk * hs + (ov ? 0 : 1);
    const size_t qoff = ov ? 16 : 1,
                 koff = inter ? qoff + hd : c->views ? qoff + c->nq * hd : ov ? 16 : 2;
    const size_t nqb = qoff + c->tokens * qts + 1, nkb = koff + c->tokens * kts + 1;
    void *hq = th_random(dt, nqb, -2.0f, 2.0f);
    void *hk = th_random(dt, nkb, -2.0f, 2.0f);
    cl_mem mq = th_upload(hq, nqb * es), mk = c->views ? mq : th_upload(hk, nkb * es);
    if (c->views)
        clRetainMemObject(mq);
    oclf_heads q = {{mq, qoff, qts}, c->nq, c->views == 1 ? 0 : hs};
    oclf_heads k = {{mk, koff, kts}, c->nk, c->views == 1 ? 0 : hs};
    cl_event ev = NULL;
    if (c->backward)
        TH_OK(oclf_rotary_embedding_backward(CASE_CTX, e->queue, dt, c->tokens, &r.rope, q,
                                             c->with_k ? &k : NULL, c->choice, 0, NULL, &ev));
    else
        TH_OK(oclf_rotary_embedding(CASE_CTX, e->queue, dt, c->tokens, &r.rope, q,
                                    c->with_k ? &k : NULL, c->choice, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    char what[160];
    snprintf(what, sizeof what, "rotary%s %s/%s %s T%zu nq%zu nk%zu hd%zu R%zu views%d k%d",
             c->backward ? " backward" : "", oclf_dtype_name(dt), oclf_dtype_name(c->cdt), c->gptj ? "gptj" : "neox", c->tokens,
             c->nq, c->nk, hd, c->rot, c->views, c->with_k);
    /* Expected buffers: the inputs, with the rotated dims of valid tokens
     * replaced by the reference. */
    const int nsets = c->with_k ? 2 : 1;
    void *gq = malloc(nqb * es), *gk = malloc(nkb * es);
    th_download(mq, gq, nqb * es);
    if (!c->views)
        th_download(mk, gk, nkb * es);
    void *bufs_before[2] = {hq, c->views ? hq : hk};
    void *bufs_got[2] = {gq, c->views ? gq : gk};
    const size_t nbuf[2] = {nqb, c->views ? nqb : nkb};
    double *want[2] = {calloc(nqb, sizeof(double)), calloc(nkb > nqb ? nkb : nqb, sizeof(double))};
    unsigned char *computed[2] = {calloc(nqb, 1), calloc(nkb > nqb ? nkb : nqb, 1)};
    for (int s = 0; s < nsets; s++) {
        const size_t nh = s ? c->nk : c->nq, ts = s ? kts : qts, o = s ? koff : qoff;
        const int b = c->views ? 0 : s; /* which buffer */
        double *ref = malloc((c->tokens * nh * hd + 1) * sizeof *ref);
        (c->backward ? oclf_ref_rotary_backward : oclf_ref_rotary)(
            dt, c->tokens, nh, (char *)bufs_before[b] + o * es, ts, hs, &r.ref, ref);
        for (size_t t = 0; t < c->tokens; t++)
            for (size_t h = 0; h < nh; h++)
                for (size_t i = 0; i < c->rot; i++) {
                    const size_t at = o + t * ts + h * hs + i;
                    want[b][at] = ref[(t * nh + h) * hd + i];
                    computed[b][at] = pos_ok(&r, t);
                }
        free(ref);
    }
    check_buffer(what, dt, bufs_got[0], bufs_before[0], want[0], computed[0], nbuf[0]);
    if (!c->views)
        check_buffer(what, dt, bufs_got[1], bufs_before[1], want[1], computed[1], nbuf[1]);
    for (int s = 0; s < 2; s++)
        free(want[s]), free(computed[s]);
    free(gq), free(gk), free(hq), free(hk);
    clReleaseMemObject(mq), clReleaseMemObject(mk);
    free_rope(&r);
}

/* The case forward, then backward (each on fresh inputs, against its own
 * reference). */
static void run_both(rot_case c)
{
    c.backward = 0;
    run_rot(&c);
    c.backward = 1;
    run_rot(&c);
}

/* dtype x style (loop index): q and k as views of a qkv buffer and as
 * separate buffers with padded heads, q alone, partial rotary, odd hd;
 * forward and backward. */
START_TEST(test_rotary)
{
    const oclf_dtype dt = dtypes[_i / 2];
    const int gptj = _i % 2;
    static const size_t shapes[][3] = {{128, 128, 0}, {128, 96, 0}, {80, 20, 0}, {120, 60, 0},
                                       {256, 64, 0},  {37, 18, 0}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const size_t hd = shapes[si][0], R = shapes[si][1];
        rot_case v = {dt, dt, gptj, (int)(si % 2), 0, 5, 8, 2, hd, R, 1, 0, 1, NULL, 0, 0};
        run_both(v);
        rot_case s = {dt, dt, gptj, (int)(si % 2 == 0), 0, 3, 4, 2, hd, R, 0, 3, 1, NULL, 0, 0};
        run_both(s);
        s.with_k = 0;
        s.tokens = 1;
        run_both(s);
        /* q and k heads interleaved in one buffer: the heads share no
         * element although each token's q extent covers k's heads */
        rot_case iv = {dt, dt, gptj, (int)(si % 2), 0, 5, 3, 3, hd, R, 2, 0, 1, NULL, 0, 0};
        run_both(iv);
    }
    rot_case z = {dt, dt, gptj, 0, 0, 0, 8, 2, 64, 64, 1, 0, 1, NULL, 0, 0};
    run_both(z);
}
END_TEST

/* f32 cache under f16 heads (the cache dtype differs from q/k's). */
START_TEST(test_mixed_cache)
{
    for (int gptj = 0; gptj < 2; gptj++) {
        rot_case v = {OCLF_F16, OCLF_F32, gptj, 1, 0, 5, 8, 2, 128, 96, 1, 0, 1, NULL, 0, 0};
        run_both(v);
        qk_case c = {OCLF_F16, OCLF_F32, gptj, 0, 0, 5, 4, 2, 2, 80, 40, 3, 1, NULL, 0};
        qk_fused_vs_unfused(c);
    }
}
END_TEST

/* The other kernel structures and vector widths 1, 2, 4, 8, on both ops:
 * LAYOUT, WGS, VEC, STAGE, ROWS. The staged ones take 1 and 2 tokens per
 * group over 3 tokens, so a group also ends short. */
START_TEST(test_structures)
{
    const int d = _i / 2, gptj = _i % 2;
    static const int configs[3][3][5] = {
        {{1, 64, 4, 0, 1}, {0, 4, 1, 0, 1}, {1, 16, 4, 1, 2}},
        {{1, 32, 8, 0, 1}, {1, 32, 2, 1, 1}, {0, 0, 0, 0, 0}},
        {{0, 8, 2, 0, 1}, {1, 8, 8, 1, 2}, {0, 0, 0, 0, 0}},
    };
    for (int k = 0; k < 3 && configs[d][k][1]; k++) {
        oclf_choice ch = th_choice(OCLF_PATH_AUTO);
        oclf_params_set(&ch.params, "LAYOUT", configs[d][k][0]);
        oclf_params_set(&ch.params, "WGS", configs[d][k][1]);
        oclf_params_set(&ch.params, "VEC", configs[d][k][2]);
        oclf_params_set(&ch.params, "STAGE", configs[d][k][3]);
        oclf_params_set(&ch.params, "ROWS", configs[d][k][4]);
        static const size_t shapes[][2] = {{64, 64}, {80, 20}, {128, 96}, {120, 120}, {256, 128}};
        for (size_t si = 0; si < 5; si++) {
            qk_case c = {dtypes[d], dtypes[d], gptj, (int)(si % 2), 0, 3, 4, 2, 1,
                         shapes[si][0], shapes[si][1], si, (int)(si != 2), &ch, 0};
            qk_fused_vs_unfused(c);
            rot_case r = {dtypes[d], dtypes[d], gptj, 0, 0, 3, 4, 2, shapes[si][0],
                          shapes[si][1], (int)(si % 2), 1, 1, &ch, 0, 0};
            run_both(r);
        }
    }
}
END_TEST

/* Heads on vector boundaries (token stride, head_dim and the rotary half
 * multiples of the vector width) run the aligned build of the kernels
 * (OCLF_ALIGNED: one wide access per vector on GPUs), a token stride off
 * them the plain build; both against the reference and each other, fused
 * and unfused, both structures. */
START_TEST(test_aligned_build)
{
    const oclf_dtype dt = dtypes[_i];
    /* offset, pad per token: both multiples of 8, or one of them not */
    static const size_t places[][2] = {{16, 0}, {16, 16}, {2, 0}, {16, 3}};
    for (int k = 0; k < 4; k++)
        for (int p = 0; p < TH_STRUCTS; p++) {
            const oclf_choice ch = th_struct_choice(p);
            const size_t off = places[k][0], pad = places[k][1];
            const int aligned = off % 8 == 0 && pad % 8 == 0;
            case_ctx = th_build_log_context();
            qk_case c = {dt, dt, p % 2, 0, 0, 5, 4, 2, 2, 128, 64, pad, 1, &ch, off};
            qk_fused_vs_unfused(c);
            char what[96];
            snprintf(what, sizeof what, "qk_norm_rope %s offset %zu pad %zu", oclf_dtype_name(dt),
                     off, pad);
            th_expect_build("rope.cl", p, aligned, what);
            th_builds_clear();
            /* rotary over separate q and k buffers, heads padded apart */
            if (k == 0 || k == 3) {
                rot_case r = {dt, dt, p % 2, 0, 0, 3, 4, 2, 128, 64, 0, pad, 1, &ch, 0, k == 0};
                run_both(r);
                snprintf(what, sizeof what, "rotary %s head pad %zu", oclf_dtype_name(dt), pad);
                th_expect_build("rope.cl", p, aligned, what);
            }
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* The packed structure (STAGE 2: several heads per work-group, a segment of
 * work-items per head), dtype x style (loop index): head counts that fill
 * whole passes of the group's segments and ones that leave the last pass
 * short, odd and partial head dims, 0, 1 and 5 tokens over 1 to 3 tokens a
 * group, tokens outside the cache, rows on and off vector boundaries (the
 * aligned and the plain build), fused against unfused and both against the
 * reference; rotary forward and backward over qkv views and over separate
 * padded buffers. */
START_TEST(test_packed)
{
    const int d = _i / 2, gptj = _i % 2;
    const oclf_dtype dt = dtypes[d];
    const int vec = dt == OCLF_F32 ? 4 : 8;
    /* tokens, rows per group, nq, nk, nv, hd, rot, pad, off, bad */
    static const size_t cases[][10] = {
        {5, 2, 32, 8, 8, 128, 128, 0, 16, 0}, /* 40 heads: whole passes */
        {5, 3, 3, 2, 1, 128, 64, 3, 2, 1},    /* 5 heads: short passes */
        {1, 1, 4, 2, 2, 37, 18, 0, 2, 0},     /* odd head_dim */
        {5, 2, 3, 3, 3, 80, 40, 8, 8, 1},     /* partial rotary, aligned */
        {0, 2, 4, 2, 2, 64, 64, 0, 16, 0},    /* no tokens */
        {3, 1, 2, 1, 1, 256, 128, 16, 16, 0}, /* wide heads */
    };
    for (int wgs = 32; wgs <= 64; wgs *= 2)
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            const size_t *c = cases[k];
            oclf_choice ch = th_row_choice(OCLF_PATH_AUTO, 1, wgs, vec, 2, (int)c[1]);
            qk_case q = {dt, dt, gptj, (int)(k % 2), (int)c[9], c[0], c[2], c[3], c[4], c[5],
                         c[6], c[7], (int)(k != 3), &ch, c[8]};
            qk_fused_vs_unfused(q);
            if (wgs == 64) {
                rot_case v = {dt, dt, gptj, (int)(k % 2), (int)c[9], c[0], c[2], c[3], c[5],
                              c[6], 1, 0, 1, &ch, 0, 0};
                run_both(v);
                rot_case sep = {dt, dt, gptj, 0, 0, c[0], c[2], c[3], c[5], c[6], 0, c[7],
                                1, &ch, 0, (int)(c[8] % 8 == 0)};
                run_both(sep);
            }
        }
}
END_TEST

/* On a device the library treats as a GPU the default of both ops is the
 * packed structure, and a call runs its build. */
START_TEST(test_packed_default)
{
    th_env *e = th_get();
    const char *was = getenv("OCLF_DEVICE_CLASS");
    char *saved = was ? strdup(was) : NULL;
    setenv("OCLF_DEVICE_CLASS", "gpu", 1);
    case_ctx = th_build_log_context();
    if (saved)
        setenv("OCLF_DEVICE_CLASS", saved, 1);
    else
        unsetenv("OCLF_DEVICE_CLASS");
    free(saved);
    const uint64_t dims[4] = {7, 48, 128, 128};
    static const char *const ops[] = {"qk_norm_rope", "rotary_embedding"};
    for (int o = 0; o < 2; o++) {
        oclf_tuning_decision dec;
        TH_OK(oclf_tuning_resolve(case_ctx, ops[o], OCLF_BF16, dims, 4, OCLF_PATH_AUTO, &dec));
        int64_t stage = -1, rows = -1;
        ck_assert(oclf_params_get(&dec.heuristic.params, "STAGE", &stage));
        ck_assert(oclf_params_get(&dec.heuristic.params, "ROWS", &rows));
        ck_assert_int_eq(stage, 2);
        /* 48 heads over 16 segments of 8 work-items: whole passes per token */
        ck_assert_int_eq(rows, 1);
    }
    th_builds_clear();
    qk_case c = {OCLF_BF16, OCLF_BF16, 0, 0, 0, 7, 32, 8, 8, 128, 128, 0, 1, NULL, 16};
    qk_fused_vs_unfused(c);
    ck_assert_msg(th_built("rope.cl", "-DOCLF_STAGE=2 -DOCLF_HLANES=8", 1),
                  "no packed build of rope.cl:\n%s", th_builds());
    /* LAYOUT 0 laid over that default (a record or a caller naming only
     * the layout) takes the item structure rather than failing */
    oclf_choice l0 = th_choice(OCLF_PATH_AUTO);
    oclf_params_set(&l0.params, "LAYOUT", 0);
    th_builds_clear();
    qk_case c0 = {OCLF_BF16, OCLF_BF16, 1, 0, 0, 3, 4, 2, 2, 64, 64, 0, 1, &l0, 16};
    qk_fused_vs_unfused(c0);
    ck_assert_msg(th_built("rope.cl", "-DOCLF_LAYOUT=0", 1) &&
                      !th_built("rope.cl", "-DOCLF_STAGE=2", 1) &&
                      !th_built("rope.cl", "-DOCLF_STAGE=2", 0),
                  "LAYOUT 0 over the packed default:\n%s", th_builds());
    (void)e;
    oclf_context_destroy(case_ctx);
    case_ctx = NULL;
}
END_TEST

/* A rotary half of 15 with 4-wide vectors over a work-group per head: the
 * combination POCL's compiler gets wrong and NVIDIA's faults on. On the simulator it
 * must be right; elsewhere it must be refused before anything runs. */
START_TEST(test_split_tail)
{
    oclf_choice ch = th_row_choice(OCLF_PATH_AUTO, 1, 16, 4, 0, 1);
    for (int gptj = 0; gptj < 2; gptj++) {
        qk_case c = {OCLF_F32, OCLF_F32, gptj, 0, 0, 40, 2, 1, 1, 32, 30, 0, 1, &ch, 0};
        qk_fused_vs_unfused(c);
    }
    /* An odd head_dim with VEC 2 (even rotary half): every head after the
     * first came back wrong on both paths there. */
    oclf_choice ch2 = th_row_choice(OCLF_PATH_AUTO, 1, 16, 2, 0, 1);
    qk_case odd = {OCLF_F32, OCLF_F32, 0, 0, 0, 2, 1, 2, 1, 37, 18, 0, 1, &ch2, 0};
    qk_fused_vs_unfused(odd);
}
END_TEST

/* Positions outside [0, max_pos): those tokens are left unchanged (the
 * checks above require it bit for bit), on every path and structure. */
START_TEST(test_bad_positions)
{
    const oclf_dtype dt = dtypes[_i];
    for (int pos64 = 0; pos64 < 2; pos64++) {
        qk_case c = {dt, dt, pos64, pos64, 1, 9, 4, 2, 2, 64, 64, 0, 1, NULL, 0};
        qk_fused_vs_unfused(c);
        oclf_choice ch = th_choice(OCLF_PATH_FUSED);
        oclf_params_set(&ch.params, "LAYOUT", 1);
        oclf_params_set(&ch.params, "WGS", 32);
        oclf_params_set(&ch.params, "VEC", 8);
        if (dt == OCLF_F16) { /* the one structure built for f16 above */
            c.choice = &ch;
            void *g = run_qk(&c);
            free(g);
        }
        rot_case r = {dt, dt, !pos64, pos64, 1, 9, 4, 2, 128, 64, 1, 0, 1, NULL, 0, 0};
        run_both(r);
        /* Staged, 4 tokens per group: bad tokens inside groups still pass
         * every barrier (WGS and VEC as built in test_structures). */
        static const int built[3][2] = {{16, 4}, {32, 2}, {8, 8}};
        oclf_choice sc = th_choice(OCLF_PATH_AUTO);
        oclf_params_set(&sc.params, "LAYOUT", 1);
        oclf_params_set(&sc.params, "WGS", built[_i][0]);
        oclf_params_set(&sc.params, "VEC", built[_i][1]);
        oclf_params_set(&sc.params, "STAGE", 1);
        oclf_params_set(&sc.params, "ROWS", 4);
        c.choice = &sc;
        qk_fused_vs_unfused(c);
        r.choice = &sc;
        run_both(r);
    }
}
END_TEST

/* backward(forward(x)) == x: the backward rotation undoes the forward one
 * on the device, dtype x style (loop index), q and k as qkv views with V
 * heads between, partial rotary and an odd head_dim, every 4th token's
 * position out of range (left alone both times, so bit for bit x). Two
 * roundings to storage lie between x and the result: twice the dtype's
 * tolerance. */
START_TEST(test_round_trip)
{
    th_env *e = th_get();
    const oclf_dtype dt = dtypes[_i / 2];
    const int gptj = _i % 2;
    static const size_t shapes[][2] = {{128, 128}, {128, 96}, {37, 18}, {64, 2}};
    for (size_t si = 0; si < 4; si++) {
        const size_t hd = shapes[si][0], R = shapes[si][1], T = 7, nq = 4, nk = 2, nv = 2;
        const size_t es = oclf_dtype_size(dt), ts = (nq + nk + nv) * hd + 3, n = 1 + T * ts + 1;
        th_seed(9001 + si * 13 + (size_t)_i);
        rope_in r = make_rope(dt, T, hd, R, gptj, (int)(si % 2), 1);
        void *x = th_random(dt, n, -2.0f, 2.0f);
        cl_mem m = th_upload(x, n * es);
        oclf_heads q = {{m, 1, ts}, nq, 0}, k = {{m, 1 + nq * hd, ts}, nk, 0};
        TH_OK(oclf_rotary_embedding(e->ctx, e->queue, dt, T, &r.rope, q, &k, NULL, 0, NULL, NULL));
        TH_OK(oclf_rotary_embedding_backward(e->ctx, e->queue, dt, T, &r.rope, q, &k, NULL, 0,
                                             NULL, NULL));
        void *got = malloc(n * es);
        th_download(m, got, n * es);
        double atol, rtol;
        oclf_ref_tolerance(dt, &atol, &rtol);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++) {
            const size_t t = (i - 1) / ts, col = (i - 1) % ts;
            /* rotated: dims < R of the q and k heads of a token in range */
            const int rotated = i >= 1 && t < T && col < (nq + nk) * hd && col % hd < R &&
                                pos_ok(&r, t);
            int ok;
            if (rotated) {
                const double g = oclf_ref_get(dt, got, i), w = oclf_ref_get(dt, x, i);
                ok = fabs(g - w) <= 2 * (atol + rtol * fabs(w));
            } else {
                ok = memcmp((char *)got + i * es, (char *)x + i * es, es) == 0;
            }
            if (!ok && bad++ == 0)
                first = i;
        }
        ck_assert_msg(bad == 0,
                      "%s %s hd %zu R %zu: backward(forward(x)) differs from x in %zu elements, "
                      "first at %zu (%g, was %g)",
                      oclf_dtype_name(dt), gptj ? "gptj" : "neox", hd, R, bad, first,
                      (double)oclf_ref_get(dt, got, first), (double)oclf_ref_get(dt, x, first));
        free(got), free(x);
        clReleaseMemObject(m);
        free_rope(&r);
    }
}
END_TEST

/* L(q, k) = sum(w * rotary(q, k)) has gradient rotary_backward(w): central
 * differences of the forward call in f32, for both styles, a partial
 * rotary head (hd 6, R 4) and a token out of range. */
START_TEST(test_finite_differences)
{
    th_env *e = th_get();
    for (int gptj = 0; gptj < 2; gptj++) {
        enum { T = 3, HD = 6, NQ = 1, NK = 1, N = T * (NQ + NK) * HD };
        th_seed(77 + (uint64_t)gptj);
        rope_in r = make_rope(OCLF_F32, T, HD, 4, gptj, 0, 1); /* token 1 out of range */
        float x[N], w[N], grad[N];
        for (size_t i = 0; i < N; i++)
            x[i] = th_uniform(-2.0f, 2.0f), w[i] = th_uniform(-1.0f, 1.0f);
        cl_mem mw = th_upload(w, sizeof w);
        oclf_heads gq = {{mw, 0, (NQ + NK) * HD}, NQ, 0}, gk = {{mw, NQ * HD, (NQ + NK) * HD}, NK, 0};
        TH_OK(oclf_rotary_embedding_backward(e->ctx, e->queue, OCLF_F32, T, &r.rope, gq, &gk,
                                             NULL, 0, NULL, NULL));
        th_download(mw, grad, sizeof grad);
        const float h = 0.125f; /* the rotation is linear: any step is exact but for rounding */
        for (size_t j = 0; j < N; j++) {
            double l[2];
            for (int side = 0; side < 2; side++) {
                float moved[N], out[N];
                memcpy(moved, x, sizeof x);
                moved[j] += side ? h : -h;
                cl_mem mm = th_upload(moved, sizeof moved);
                oclf_heads q = {{mm, 0, (NQ + NK) * HD}, NQ, 0},
                           k = {{mm, NQ * HD, (NQ + NK) * HD}, NK, 0};
                TH_OK(oclf_rotary_embedding(e->ctx, e->queue, OCLF_F32, T, &r.rope, q, &k, NULL,
                                            0, NULL, NULL));
                th_download(mm, out, sizeof out);
                clReleaseMemObject(mm);
                l[side] = 0;
                for (size_t i = 0; i < N; i++)
                    l[side] += (double)w[i] * (double)out[i];
            }
            const double fd = (l[1] - l[0]) / (2.0 * h);
            ck_assert_msg(fabs(fd - grad[j]) <= 1e-5 + 1e-5 * fabs(fd),
                          "%s: d L / d x[%zu] = %g, finite differences %g",
                          gptj ? "gptj" : "neox", j, (double)grad[j], fd);
        }
        clReleaseMemObject(mw);
        free_rope(&r);
    }
}
END_TEST

/* With validation on, the first bad token is named and nothing runs. */
START_TEST(test_validate)
{
    th_env *e = th_get();
    oclf_context *vctx = th_validate_context();
    for (int pos64 = 0; pos64 < 2; pos64++) {
        rope_in r = make_rope(OCLF_F32, 6, 64, 64, 0, pos64, 1); /* token 1 is bad */
        const size_t n = 6 * 3 * 64;
        void *x = th_random(OCLF_F32, n, -1, 1);
        cl_mem m = th_upload(x, n * 4);
        oclf_buf b = {m, 0, 0};
        oclf_status st = oclf_qk_norm_rope(vctx, e->queue, OCLF_F32, 6, 1, 1, 1, &r.rope, b, NULL,
                                           NULL, 1e-6f, NULL, 0, NULL, NULL);
        ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
        ck_assert_msg(strstr(oclf_last_error(vctx), "token 1 ") != NULL, "message: %s",
                      oclf_last_error(vctx));
        oclf_heads q = {b, 3, 0};
        st = oclf_rotary_embedding(vctx, e->queue, OCLF_F32, 6, &r.rope, q, NULL, NULL, 0, NULL,
                                   NULL);
        ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(oclf_last_error(vctx), "token 1 "));
        st = oclf_rotary_embedding_backward(vctx, e->queue, OCLF_F32, 6, &r.rope, q, NULL, NULL,
                                            0, NULL, NULL);
        ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
        ck_assert_msg(strstr(oclf_last_error(vctx), "rotary_embedding_backward") != NULL &&
                          strstr(oclf_last_error(vctx), "token 1 ") != NULL,
                      "message: %s", oclf_last_error(vctx));
        void *got = malloc(n * 4);
        th_download(m, got, n * 4);
        ck_assert_msg(memcmp(got, x, n * 4) == 0, "a rejected call wrote qkv");
        /* the same call on the good tokens alone goes through */
        TH_OK(oclf_qk_norm_rope(vctx, e->queue, OCLF_F32, 1, 1, 1, 1, &r.rope, b, NULL, NULL, 1e-6f,
                                NULL, 0, NULL, NULL));
        clFinish(e->queue);
        free(got), free(x);
        clReleaseMemObject(m);
        free_rope(&r);
    }
    oclf_context_destroy(vctx);
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem qkv, other;
    void *hqkv, *hother;
    size_t n;
} bad_env;

static void bad_check_untouched(bad_env *b)
{
    void *got = malloc(b->n * 4);
    clFinish(th_get()->queue);
    th_download(b->qkv, got, b->n * 4);
    ck_assert_msg(memcmp(got, b->hqkv, b->n * 4) == 0, "a failing call wrote qkv");
    th_download(b->other, got, b->n * 4);
    ck_assert_msg(memcmp(got, b->hother, b->n * 4) == 0, "a failing call wrote the k buffer");
    free(got);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    const size_t T = 4, hd = 16, nq = 2, nk = 1, nv = 1;
    bad_env bb;
    bb.n = T * (nq + nk + nv) * hd;
    bb.hqkv = th_random(OCLF_F32, bb.n, -1, 1);
    bb.hother = th_random(OCLF_F32, bb.n, -1, 1);
    bb.qkv = th_upload(bb.hqkv, bb.n * 4);
    bb.other = th_upload(bb.hother, bb.n * 4);
    rope_in r = make_rope(OCLF_F32, T, hd, hd, 0, 0, 0);
    cl_mem small = th_upload(bb.hqkv, 16);
    cl_command_queue q = e->queue;
    oclf_buf X = {bb.qkv, 0, 0}, S = {small, 0, 0};
    const oclf_rope *R = &r.rope;
    oclf_rope a;
    oclf_buf W = {bb.other, 0, 0};

#define QK(ctx_, dt_, rope_, buf_, nq_, nk_, nv_, qw_, eps_)                                       \
    oclf_qk_norm_rope(ctx_, q, dt_, T, nq_, nk_, nv_, rope_, buf_, qw_, NULL, eps_, NULL, 0, NULL, \
                      NULL)
    ck_assert_int_eq(QK(NULL, OCLF_F32, R, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(oclf_qk_norm_rope(e->ctx, NULL, OCLF_F32, T, nq, nk, nv, R, X, NULL, NULL, 1e-6f, NULL,
                             0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(QK(e->ctx, OCLF_F32, NULL, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "rope is NULL");
    EXPECT(QK(e->ctx, OCLF_F32, R, ((oclf_buf){NULL, 0, 0}), nq, nk, nv, NULL, 1e-6f),
           OCLF_INVALID_ARGUMENT, "qkv");
    /* head counts that do not fit the row: a token stride below 4 heads */
    EXPECT(QK(e->ctx, OCLF_F32, R, ((oclf_buf){bb.qkv, 0, 3 * hd}), nq, nk, nv, NULL, 1e-6f),
           OCLF_INVALID_ARGUMENT, "stride");
    /* more heads than the buffer holds */
    EXPECT(QK(e->ctx, OCLF_F32, R, X, nq, nk, nv + 1, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "do not fit");
    EXPECT(QK(e->ctx, OCLF_F32, R, X, 0, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT, "nq is 0");
    EXPECT(QK(e->ctx, OCLF_F32, R, X, nq, nk, nv, NULL, -1.0f), OCLF_INVALID_ARGUMENT, "eps");
    EXPECT(QK(e->ctx, OCLF_F32, R, X, nq, nk, nv, &S, 1e-6f), OCLF_INVALID_ARGUMENT, "q_weight");
    EXPECT(QK(e->ctx, OCLF_F32, R, X, nq, nk, nv, &X, 1e-6f), OCLF_INVALID_ARGUMENT,
           "weight overlaps");
    a = *R, a.rot_dim = hd - 1;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT, "rot_dim");
    a = *R, a.rot_dim = hd + 2;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT, "rot_dim");
    a = *R, a.rot_dim = 0;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT, "rot_dim");
    a = *R, a.head_dim = 0;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "head_dim is 0");
    a = *R, a.max_pos = 0;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "max_pos");
    a = *R, a.positions.mem = NULL;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "positions");
    a = *R, a.positions = S, a.pos_type = OCLF_INT64; /* 16 bytes for 4 int64 */
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "positions");
    a = *R, a.cos_sin.mem = NULL;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT, "cos_sin");
    a = *R, a.max_pos = 1000; /* a cache smaller than max_pos rows */
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "cos_sin");
    a = *R, a.cos_sin = (oclf_buf){bb.qkv, 0, 0}, a.max_pos = 2;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT,
           "cos_sin overlaps");
    EXPECT(QK(e->ctx, (oclf_dtype)7, R, X, nq, nk, nv, NULL, 1e-6f), OCLF_UNSUPPORTED, "dtype");
    a = *R, a.cache_dtype = (oclf_dtype)7;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_UNSUPPORTED, "cache dtype");
    a = *R, a.pos_type = (oclf_index_type)5;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_UNSUPPORTED,
           "position type");
    a = *R, a.style = (oclf_rope_style)4;
    EXPECT(QK(e->ctx, OCLF_F32, &a, X, nq, nk, nv, NULL, 1e-6f), OCLF_INVALID_ARGUMENT, "style");
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "VEC", 32);
    EXPECT(oclf_qk_norm_rope(e->ctx, q, OCLF_F32, T, nq, nk, nv, R, X, NULL, NULL, 1e-6f, &ch, 0,
                             NULL, NULL),
           OCLF_INVALID_ARGUMENT, "VEC");
    /* staging needs a work-group per token group; ROWS needs staging */
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", 0);
    oclf_params_set(&ch.params, "STAGE", 1);
    EXPECT(oclf_qk_norm_rope(e->ctx, q, OCLF_F32, T, nq, nk, nv, R, X, NULL, NULL, 1e-6f, &ch, 0,
                             NULL, NULL),
           OCLF_INVALID_ARGUMENT, "STAGE = 1 needs LAYOUT = 1");
    ch = th_choice(OCLF_PATH_UNFUSED);
    oclf_params_set(&ch.params, "LAYOUT", 1);
    oclf_params_set(&ch.params, "STAGE", 0);
    oclf_params_set(&ch.params, "ROWS", 4);
    EXPECT(oclf_qk_norm_rope(e->ctx, q, OCLF_F32, T, nq, nk, nv, R, X, NULL, NULL, 1e-6f, &ch, 0,
                             NULL, NULL),
           OCLF_INVALID_ARGUMENT, "ROWS > 1 needs STAGE = 1");
    (void)W;

    /* rotary_embedding: heads in two buffers */
    oclf_heads Q = {{bb.qkv, 0, 0}, 4, 0}, K = {{bb.other, 0, 0}, 4, 0};
#define ROT(q_, k_) \
    oclf_rotary_embedding(e->ctx, q, OCLF_F32, T, R, q_, k_, NULL, 0, NULL, NULL)
    oclf_heads h = Q;
    h.count = 0;
    EXPECT(ROT(h, &K), OCLF_INVALID_ARGUMENT, "head count is 0");
    h = K, h.count = 0;
    EXPECT(ROT(Q, &h), OCLF_INVALID_ARGUMENT, "head count is 0");
    h = Q, h.head_stride = hd - 1;
    EXPECT(ROT(h, &K), OCLF_INVALID_ARGUMENT, "head stride");
    h = Q, h.buf.stride = 3 * hd; /* 4 heads do not fit a 3-head token */
    EXPECT(ROT(h, &K), OCLF_INVALID_ARGUMENT, "stride");
    h = K, h.count = 5;
    EXPECT(ROT(Q, &h), OCLF_INVALID_ARGUMENT, "do not fit");
    h = Q, h.buf.mem = NULL;
    EXPECT(ROT(h, &K), OCLF_INVALID_ARGUMENT, "q");
    /* k one head into q's buffer, inside q's heads */
    h = Q, h.buf.offset = hd, h.count = 2, h.buf.stride = 4 * hd;
    oclf_heads h2 = Q;
    h2.count = 2, h2.buf.stride = 4 * hd;
    EXPECT(ROT(h2, &h), OCLF_INVALID_ARGUMENT, "q and k overlap");
    /* interleaved heads (q0 k0 q1 k1, head stride 2 hd) with k shifted
     * half a head: every k head meets a q head */
    h2 = Q, h2.count = 2, h2.head_stride = 2 * hd;
    h = h2, h.buf.offset = hd / 2;
    EXPECT(ROT(h2, &h), OCLF_INVALID_ARGUMENT, "q and k overlap");
    /* k's head reaches one element into the next token's q head */
    h2 = Q, h2.count = 1, h2.buf.stride = 3 * hd;
    h = h2, h.buf.offset = 2 * hd + 1;
    EXPECT(ROT(h2, &h), OCLF_INVALID_ARGUMENT, "q and k overlap");
    /* (disjoint column blocks of one buffer are accepted: test_rotary's
     * qkv views and interleaved heads) */
    a = *R, a.cos_sin = (oclf_buf){bb.other, 0, 0}, a.max_pos = 2;
    EXPECT(oclf_rotary_embedding(e->ctx, q, OCLF_F32, T, &a, Q, &K, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlaps k");
    EXPECT(oclf_rotary_embedding(e->ctx, q, (oclf_dtype)3, T, R, Q, &K, NULL, 0, NULL, NULL),
           OCLF_UNSUPPORTED, "dtype");

    /* the backward: the forward's checks, under its own name */
#define ROTB(rope_, q_, k_)                                                                    \
    oclf_rotary_embedding_backward(e->ctx, q, OCLF_F32, T, rope_, q_, k_, NULL, 0, NULL, NULL)
    ck_assert_int_eq(oclf_rotary_embedding_backward(NULL, q, OCLF_F32, T, R, Q, &K, NULL, 0, NULL,
                                                    NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(oclf_rotary_embedding_backward(e->ctx, NULL, OCLF_F32, T, R, Q, &K, NULL, 0, NULL,
                                          NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(ROTB(NULL, Q, &K), OCLF_INVALID_ARGUMENT, "rotary_embedding_backward: rope is NULL");
    a = *R, a.rot_dim = hd - 1;
    EXPECT(ROTB(&a, Q, &K), OCLF_INVALID_ARGUMENT, "rot_dim");
    a = *R, a.style = (oclf_rope_style)4;
    EXPECT(ROTB(&a, Q, &K), OCLF_INVALID_ARGUMENT, "style");
    h = Q, h.count = 0;
    EXPECT(ROTB(R, h, &K), OCLF_INVALID_ARGUMENT, "head count is 0");
    h = K, h.count = 5;
    EXPECT(ROTB(R, Q, &h), OCLF_INVALID_ARGUMENT, "do not fit");
    h = Q, h.buf.offset = hd, h.count = 2, h.buf.stride = 4 * hd;
    h2 = Q, h2.count = 2, h2.buf.stride = 4 * hd;
    EXPECT(ROTB(R, h2, &h), OCLF_INVALID_ARGUMENT, "q and k overlap");
    a = *R, a.cos_sin = (oclf_buf){bb.other, 0, 0}, a.max_pos = 2;
    EXPECT(ROTB(&a, Q, &K), OCLF_INVALID_ARGUMENT, "overlaps k");
    a = *R, a.cache_dtype = (oclf_dtype)7;
    EXPECT(ROTB(&a, Q, &K), OCLF_UNSUPPORTED, "cache dtype");
    EXPECT(oclf_rotary_embedding_backward(e->ctx, q, (oclf_dtype)3, T, R, Q, &K, NULL, 0, NULL,
                                          NULL),
           OCLF_UNSUPPORTED, "dtype");
    ch = th_choice(OCLF_PATH_AUTO);
    oclf_params_set(&ch.params, "VEC", 32);
    EXPECT(oclf_rotary_embedding_backward(e->ctx, q, OCLF_F32, T, R, Q, &K, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "VEC");
#undef ROTB
    bad_check_untouched(&bb);
#undef QK
#undef ROT
    clReleaseMemObject(bb.qkv), clReleaseMemObject(bb.other), clReleaseMemObject(small);
    free(bb.hqkv), free(bb.hother);
    free_rope(&r);
}
END_TEST

static Suite *rope_suite(void)
{
    Suite *s = suite_create("rope");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_qk_matrix, 0, 6);
    tcase_add_loop_test(t, test_rotary, 0, 6);
    tcase_add_test(t, test_mixed_cache);
    tcase_add_loop_test(t, test_structures, 0, 6);
    tcase_add_test(t, test_split_tail);
    tcase_add_loop_test(t, test_aligned_build, 0, 3);
    tcase_add_loop_test(t, test_bad_positions, 0, 3);
    tcase_add_loop_test(t, test_round_trip, 0, 6);
    tcase_add_test(t, test_finite_differences);
    tcase_add_test(t, test_validate);
    suite_add_tcase(s, t);
    TCase *p = tcase_create("packed");
    tcase_set_timeout(p, 0);
    tcase_add_loop_test(p, test_packed, 0, 6);
    tcase_add_test(p, test_packed_default);
    suite_add_tcase(s, p);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(rope_suite()); }
