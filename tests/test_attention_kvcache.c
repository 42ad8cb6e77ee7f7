/*
 * The paged KV-cache write (oclf_kv_cache_write) and qk_norm_rope with the
 * cache write (oclf_qk_norm_rope_cache) against a CPU reference: every
 * dtype, head dims 1, 3, 80 and 128, block sizes 1, 16 and 256 with
 * shuffled slot mappings, padding slots (< 0) and slots beyond the cache,
 * strided head views, K and V as views of one packed qkv, 0, 1 and many
 * tokens, both paths and the kernel structures of the fused one, and the
 * bad arguments.
 *
 * The cache write copies storage elements, so the reference is a byte
 * copy and every check is bit for bit over whole buffers: the cache
 * buffer (with guard elements before K, between K and V and after V), the
 * head buffers and their padding.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): the same calls, dtypes and paths over fewer head
 * dims, block sizes and structures. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

/* ---- a paged cache in one buffer ------------------------------------------
 * [guard | K: nslots x heads x hd | gap | V: the same | guard], every
 * element random, so a write anywhere it should not go shows. */
typedef struct cache_buf {
    oclf_kv_cache kv;
    size_t n;       /* elements of the whole buffer */
    size_t es;
    void *host;     /* the contents before the call */
    cl_mem mem;
} cache_buf;

/* Elements before K, between K and V and after V: odd, or (cache_on_vectors)
 * multiples of 8. */
static int cache_on_vectors;
#define GUARD (cache_on_vectors ? 16u : 5u)
#define GAP (cache_on_vectors ? 8u : 3u)

static cache_buf make_cache(oclf_dtype dt, size_t num_blocks, size_t block_size, size_t heads,
                            size_t hd)
{
    cache_buf c;
    memset(&c, 0, sizeof c);
    const size_t part = num_blocks * block_size * heads * hd;
    c.es = oclf_dtype_size(dt);
    c.n = GUARD + part + GAP + part + GUARD;
    c.host = th_random(dt, c.n, -3.0f, 3.0f);
    c.mem = th_upload(c.host, c.n * c.es);
    c.kv.k = c.kv.v = c.mem;
    c.kv.k_offset = GUARD;
    c.kv.v_offset = GUARD + part + GAP;
    c.kv.num_blocks = num_blocks;
    c.kv.block_size = block_size;
    c.kv.heads = heads;
    c.kv.head_dim = hd;
    return c;
}

static void free_cache(cache_buf *c)
{
    clReleaseMemObject(c->mem);
    free(c->host);
}

/* The slots of `tokens` tokens: distinct slots of the cache in shuffled
 * order; with `holes`, every 5th token padding (-1 or -7) and, with
 * `beyond`, every 7th past the cache (its end, and far past it). */
static int64_t *make_slots(size_t tokens, size_t nslots, int holes, int beyond)
{
    int64_t *all = malloc((nslots + 1) * sizeof *all);
    for (size_t i = 0; i < nslots; i++)
        all[i] = (int64_t)i;
    for (size_t i = nslots; i > 1; i--) {
        size_t j = (size_t)(th_uniform(0.0f, 1.0f) * (float)i) % i;
        int64_t tmp = all[i - 1];
        all[i - 1] = all[j], all[j] = tmp;
    }
    int64_t *s = malloc((tokens + 1) * sizeof *s);
    for (size_t t = 0; t < tokens; t++) {
        s[t] = all[t % nslots];
        if (holes && t % 5 == 2)
            s[t] = t % 2 ? -1 : -7;
        if (beyond && t % 7 == 3)
            s[t] = t % 2 ? (int64_t)nslots : (int64_t)1 << 40;
    }
    free(all);
    return s;
}

/* Slots in a device buffer, one element into it (a non-zero offset). */
static cl_mem upload_slots(const int64_t *slots, size_t tokens, oclf_buf *b)
{
    int64_t *h = calloc(tokens + 2, sizeof *h);
    memcpy(h + 1, slots, tokens * sizeof *h);
    h[0] = h[tokens + 1] = 3; /* never read */
    cl_mem m = th_upload(h, (tokens + 2) * sizeof *h);
    free(h);
    *b = (oclf_buf){m, 1, 0};
    return m;
}

/* Into the host image `want` of a cache, what the write of token t's head
 * h from src_k / src_v (element pointers of heads of hd) puts there. */
static void put_head(const cache_buf *c, void *want, int64_t slot, size_t h, const void *src_k,
                     const void *src_v)
{
    const oclf_kv_cache *kv = &c->kv;
    if (slot < 0 || (uint64_t)slot >= kv->num_blocks * kv->block_size)
        return;
    const size_t at = ((size_t)slot * kv->heads + h) * kv->head_dim;
    memcpy((char *)want + (kv->k_offset + at) * c->es, src_k, kv->head_dim * c->es);
    memcpy((char *)want + (kv->v_offset + at) * c->es, src_v, kv->head_dim * c->es);
}

/* The whole device buffer against `want`, byte for byte. */
static void check_same(const char *what, cl_mem mem, const void *want, size_t bytes, size_t es)
{
    unsigned char *got = malloc(bytes);
    th_download(mem, got, bytes);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes; i++)
        if (got[i] != ((const unsigned char *)want)[i] && bad++ == 0)
            first = i;
    ck_assert_msg(bad == 0, "%s: %zu bytes differ, the first in element %zu", what, bad,
                  first / es);
    free(got);
}

/* ---- kv_cache_write ----------------------------------------------------- */

typedef struct write_case {
    oclf_dtype dt;
    size_t tokens, heads, hd, block_size;
    int packed;    /* 1: k and v views of one packed qkv (after 3 Q heads) */
    size_t hpad;   /* else: elements between heads ... */
    size_t tpad;   /* ... and after each token's heads */
    int holes, beyond;
    size_t off;                 /* the heads' leading elements (0: 2) */
    const oclf_choice *choice;  /* the structure (NULL: the default) */
} write_case;

/* The context kv_cache_write runs on: the test device's, or a
 * build-logging one. */
static oclf_context *write_ctx;

static void run_write(const write_case *w)
{
    th_env *e = th_get();
    const oclf_dtype dt = w->dt;
    const size_t es = oclf_dtype_size(dt), hd = w->hd, H = w->heads, T = w->tokens;
    th_seed(T * 7919 + hd * 131 + w->block_size * 17 + H + (size_t)w->packed);
    /* room for every token twice over, at least two blocks */
    size_t nb = (2 * T + w->block_size - 1) / w->block_size;
    nb = nb < 2 ? 2 : nb;
    cache_buf c = make_cache(dt, nb, w->block_size, H, hd);
    int64_t *slots = make_slots(T, nb * w->block_size, w->holes, w->beyond);
    oclf_buf bs;
    cl_mem ms = upload_slots(slots, T, &bs);

    /* heads: packed qkv [T, (3 + 2H) hd + tpad], or k and v in buffers of
     * their own with padded heads and tokens */
    const size_t hs = w->packed ? hd : hd + w->hpad;
    const size_t ts = w->packed ? (3 + 2 * H) * hd + w->tpad : H * hs + w->tpad;
    const size_t off = w->off ? w->off : 2, n = off + T * ts + 3;
    void *hk = th_random(dt, n, -2.0f, 2.0f), *hv = th_random(dt, n, -2.0f, 2.0f);
    cl_mem mk = th_upload(hk, n * es), mv = w->packed ? mk : th_upload(hv, n * es);
    if (w->packed)
        clRetainMemObject(mk);
    const size_t ko = w->packed ? off + 3 * hd : off, vo = w->packed ? ko + H * hd : off;
    oclf_heads k = {{mk, ko, ts}, H, w->packed ? 0 : hs};
    oclf_heads v = {{mv, vo, ts}, H, w->packed ? 0 : hs};
    const void *vsrc = w->packed ? hk : hv;

    cl_event ev = NULL;
    TH_OK(oclf_kv_cache_write(write_ctx ? write_ctx : e->ctx, e->queue, dt, T, k, v, bs, &c.kv,
                              w->choice, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    void *want = malloc(c.n * es);
    memcpy(want, c.host, c.n * es);
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++)
            put_head(&c, want, slots[t], h, (const char *)hk + (ko + t * ts + h * hs) * es,
                     (const char *)vsrc + (vo + t * ts + h * hs) * es);
    char what[160];
    snprintf(what, sizeof what, "kv_cache_write %s T%zu H%zu hd%zu block %zu packed %d",
             oclf_dtype_name(dt), T, H, hd, w->block_size, w->packed);
    check_same(what, c.mem, want, c.n * es, es);
    /* the heads (and their padding) are only read */
    check_same(what, mk, hk, n * es, es);
    if (!w->packed)
        check_same(what, mv, hv, n * es, es);

    free(want), free(hk), free(hv), free(slots);
    clReleaseMemObject(mk), clReleaseMemObject(mv), clReleaseMemObject(ms);
    free_cache(&c);
}

/* dtype (loop index) x head dim x block size, strided and packed views,
 * padding slots and slots past the cache, 0, 1 and 37 tokens. */
START_TEST(test_write)
{
    const oclf_dtype dt = dtypes[_i];
    static const size_t hds[] = {1, 3, 80, 128};
    static const size_t blocks[] = {1, 16, 256};
    const size_t nhd = th_quick() ? 3 : 4, nblk = th_quick() ? 2 : 3;
    for (size_t hi = 0; hi < nhd; hi++)
        for (size_t bi = 0; bi < nblk; bi++) {
            const size_t hd = hds[hi], bsz = blocks[bi];
            write_case s = {dt, 37, 2, hd, bsz, 0, 3, 5, 1, 1, 0, NULL};
            run_write(&s);
            write_case p = {dt, 37, 3, hd, bsz, 1, 0, 7, 1, 0, 0, NULL};
            run_write(&p);
            write_case one = {dt, 1, 1, hd, bsz, 0, 1, 0, 0, 0, 0, NULL};
            run_write(&one);
        }
    write_case z = {dt, 0, 2, 64, 16, 0, 0, 0, 0, 0, 0, NULL};
    run_write(&z);
}
END_TEST

/* Heads and cache rows on vector boundaries (offsets and strides
 * multiples of 8, head_dim 128) copy through the aligned build (one
 * 16-byte unit per 16-bit vector of 8), heads off them through the plain
 * one; both bit for bit, in both row structures. */
START_TEST(test_write_aligned)
{
    const oclf_dtype dt = dtypes[_i];
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < TH_STRUCTS; p += 2) {
            const oclf_choice ch = th_struct_choice(p);
            write_ctx = th_build_log_context();
            cache_on_vectors = 1;
            write_case w = {dt, 9, 2, 128, 16, 0, 0, 0, 1, 0, k ? 2 : 16, &ch};
            run_write(&w);
            cache_on_vectors = 0;
            char what[64];
            snprintf(what, sizeof what, "kv_cache_write %s offset %d", oclf_dtype_name(dt),
                     k ? 2 : 16);
            th_expect_build("rope.cl", p, !k, what);
            oclf_context_destroy(write_ctx);
            write_ctx = NULL;
        }
}
END_TEST

/* ---- qk_norm_rope_cache -------------------------------------------------- */

typedef struct qkc_case {
    oclf_dtype dt;
    size_t tokens, nq, nkv, hd, rot, block_size, pad;
    int gptj, bad_pos; /* every 4th position out of range */
    const oclf_choice *choice;
} qkc_case;

/* Runs qk_norm_rope on one copy of the qkv and qk_norm_rope_cache on
 * another with the same choice: the qkv must come back the same bit for
 * bit (the cache write changes nothing of the rope), the rope's Q and K
 * heads must match the CPU reference, and the cache must hold the K and V
 * heads of that qkv at the tokens' slots and be unchanged elsewhere. */
static void run_qkc(const qkc_case *q)
{
    th_env *e = th_get();
    const oclf_dtype dt = q->dt;
    const size_t es = oclf_dtype_size(dt), hd = q->hd, T = q->tokens;
    const size_t nq = q->nq, nk = q->nkv, nh = nq + 2 * nk;
    const size_t ts = nh * hd + q->pad, off = 1, n = off + T * ts + 2;
    th_seed(T * 31 + hd * 7 + q->rot + q->block_size * 3 + (size_t)q->gptj);

    /* the rotation: a cos/sin cache of max_pos rows, int64 positions */
    const size_t max_pos = 50, R = q->rot;
    void *cs = calloc(max_pos * R, es);
    for (size_t p = 0; p < max_pos; p++)
        for (size_t j = 0; j < R / 2; j++) {
            double f = pow(10000.0, -2.0 * (double)j / (double)R);
            oclf_ref_set(dt, cs, p * R + j, (float)cos((double)p * f));
            oclf_ref_set(dt, cs, p * R + R / 2 + j, (float)sin((double)p * f));
        }
    int64_t *pos = malloc((T + 1) * sizeof *pos);
    for (size_t t = 0; t < T; t++) {
        pos[t] = (int64_t)(th_uniform(0.0f, 1.0f) * (float)max_pos) % (int64_t)max_pos;
        if (q->bad_pos && t % 4 == 1)
            pos[t] = t % 8 == 1 ? -2 : (int64_t)max_pos;
    }
    cl_mem mcs = th_upload(cs, max_pos * R * es), mpos = th_upload(pos, (T + 1) * 8);
    oclf_rope rope = {sizeof(oclf_rope), q->gptj ? OCLF_ROPE_GPTJ : OCLF_ROPE_NEOX, hd, R,
                      {mpos, 0, 0}, OCLF_INT64, {mcs, 0, 0}, dt, max_pos};
    void *w = th_random(dt, 2 * hd, 0.5f, 1.0f);
    cl_mem mw = th_upload(w, 2 * hd * es);
    oclf_buf qw = {mw, 0, 0}, kw = {mw, hd, 0};

    size_t nb = (2 * T + q->block_size - 1) / q->block_size;
    nb = nb < 2 ? 2 : nb;
    cache_buf c = make_cache(dt, nb, q->block_size, nk, hd);
    int64_t *slots = make_slots(T, nb * q->block_size, 1, 1);
    oclf_buf bs;
    cl_mem ms = upload_slots(slots, T, &bs);

    void *x = th_random(dt, n, -2.0f, 2.0f);
    cl_mem ma = th_upload(x, n * es), mb = th_upload(x, n * es);
    const oclf_buf xa = {ma, off, ts}, xb = {mb, off, ts};
    TH_OK(oclf_qk_norm_rope(e->ctx, e->queue, dt, T, nq, nk, nk, &rope, xa, &qw, &kw, 1e-6f,
                            q->choice, 0, NULL, NULL));
    cl_event ev = NULL;
    TH_OK(oclf_qk_norm_rope_cache(e->ctx, e->queue, dt, T, nq, nk, nk, &rope, xb, &qw, &kw, bs,
                                  &c.kv, 1e-6f, q->choice, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    clFinish(e->queue);

    char what[200];
    snprintf(what, sizeof what,
             "qk_norm_rope_cache %s %s T%zu %zu+%zu+%zu hd%zu R%zu block %zu path %d",
             oclf_dtype_name(dt), q->gptj ? "gptj" : "neox", T, nq, nk, nk, hd, R, q->block_size,
             q->choice ? (int)q->choice->path : 0);
    void *ga = malloc(n * es);
    th_download(ma, ga, n * es);
    check_same(what, mb, ga, n * es, es);

    /* the plain call against the reference: Q and K heads of tokens with a
     * position in range within tolerance, everything else as it was */
    oclf_ref_rope rr = {q->gptj, hd, R, pos, cs, dt, R, max_pos};
    double *ref = malloc((T * nh * hd + 1) * sizeof *ref);
    oclf_ref_qk_norm_rope(dt, T, nq, nk, nk, (char *)x + off * es, ts, w, (char *)w + hd * es,
                          1e-6f, &rr, ref);
    double atol, rtol;
    oclf_ref_tolerance(dt, &atol, &rtol);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t t = (i - off) / ts, col = (i - off) % ts;
        const int rotated = i >= off && t < T && col < (nq + nk) * hd && pos[t] >= 0 &&
                            (uint64_t)pos[t] < max_pos;
        if (rotated) {
            const double want = ref[t * nh * hd + col], got = oclf_ref_get(dt, ga, i);
            bad += !(fabs(got - want) <= atol + rtol * fabs(want));
        } else {
            bad += memcmp((char *)ga + i * es, (char *)x + i * es, es) != 0;
        }
    }
    ck_assert_msg(bad == 0, "%s: %zu elements of qkv wrong", what, bad);

    /* the cache: the K and V heads of the rotated qkv at the slots */
    void *want = malloc(c.n * es);
    memcpy(want, c.host, c.n * es);
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < nk; h++) {
            const size_t kat = off + t * ts + (nq + h) * hd;
            put_head(&c, want, slots[t], h, (char *)ga + kat * es,
                     (char *)ga + (kat + nk * hd) * es);
        }
    check_same(what, c.mem, want, c.n * es, es);

    free(want), free(ref), free(ga), free(x), free(w), free(slots), free(pos), free(cs);
    clReleaseMemObject(ma), clReleaseMemObject(mb), clReleaseMemObject(mw);
    clReleaseMemObject(ms), clReleaseMemObject(mcs), clReleaseMemObject(mpos);
    free_cache(&c);
}

/* dtype (loop index) x path x head dim and block size, NeoX and GPT-J,
 * positions out of range (those tokens' heads go to the cache unrotated,
 * as they stand), 0, 1 and 29 tokens. */
START_TEST(test_qk_cache)
{
    const oclf_dtype dt = dtypes[_i];
    static const size_t shapes[][3] = {{3, 2, 1}, {80, 40, 16}, {128, 128, 256}, {128, 96, 16}};
    for (int path = 0; path < 2; path++) {
        oclf_choice ch = th_choice(path ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
        for (size_t si = 0; si < (th_quick() ? 2 : sizeof shapes / sizeof *shapes); si++) {
            qkc_case c = {dt, 29, 4, 2, shapes[si][0], shapes[si][1], shapes[si][2], si % 2 ? 3 : 0,
                          (int)(si % 2), 1, &ch};
            run_qkc(&c);
        }
        qkc_case one = {dt, 1, 2, 1, 80, 80, 1, 0, 0, 0, &ch};
        run_qkc(&one);
        qkc_case zero = {dt, 0, 2, 1, 80, 80, 16, 0, 0, 0, &ch};
        run_qkc(&zero);
    }
}
END_TEST

/* The fused kernel in the other structures: a work-group per (token, head)
 * item, and staged groups of 2 tokens over 29 (a group ends short; bad
 * positions inside groups still reach every barrier). */
START_TEST(test_qk_cache_structures)
{
    const oclf_dtype dt = dtypes[_i];
    static const int configs[][5] = {{1, 16, 2, 0, 1}, {1, 8, 4, 1, 2}, {0, 4, 8, 0, 1}};
    for (size_t k = th_quick() ? 1 : 0; k < (th_quick() ? 2 : 3); k++) {
        oclf_choice ch = th_row_choice(OCLF_PATH_FUSED, configs[k][0], configs[k][1],
                                       configs[k][2], configs[k][3], configs[k][4]);
        for (int gptj = 0; gptj < 2; gptj++) {
            qkc_case c = {dt, 29, 2, 2, 80, 80, 16, 1, gptj, 1, &ch};
            run_qkc(&c);
        }
    }
}
END_TEST

/* The packed structure (STAGE 2: several heads per work-group), fused
 * and unfused, and kv_cache_write in its programs: head counts that fill whole passes of the group's segments
 * (40 over 8) and ones that do not (6), an odd head_dim, groups of 1 to 3
 * tokens ending short, positions out of range inside groups, 0 and 1
 * tokens. */
START_TEST(test_qk_cache_packed)
{
    const oclf_dtype dt = dtypes[_i];
    const int vec = dt == OCLF_F32 ? 4 : 8;
    /* tokens, nq, nkv, hd, rot, block, pad, WGS, ROWS */
    static const size_t cases[][9] = {
        {29, 4, 2, 80, 80, 16, 1, 64, 2}, {5, 32, 8, 128, 128, 16, 0, 64, 1},
        {7, 3, 1, 37, 18, 1, 0, 32, 3},   {1, 2, 1, 128, 96, 16, 3, 32, 2},
        {0, 2, 1, 80, 80, 16, 0, 64, 2},
    };
    for (int path = 0; path < 2; path++)
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            const size_t *c = cases[k];
            oclf_choice ch = th_row_choice(path ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED, 1,
                                           (int)c[7], vec, 2, (int)c[8]);
            qkc_case q = {dt, c[0], c[1], c[2], c[3], c[4], c[5], c[6], (int)(k % 2), 1, &ch};
            run_qkc(&q);
        }
    /* kv_cache_write in the packed programs: an item per segment, head
     * counts that leave a group's last segments without one, padding slots
     * and slots past the cache, aligned and plain builds */
    static const size_t hds[] = {3, 80, 128};
    for (int wgs = 32; wgs <= 64; wgs *= 2) {
        const oclf_choice ch = th_row_choice(OCLF_PATH_AUTO, 1, wgs, vec, 2, 1);
        for (size_t hi = 0; hi < 3; hi++) {
            write_case s = {dt, 37, 2, hds[hi], 16, 0, 3, 5, 1, 1, 0, &ch};
            run_write(&s);
            write_case p = {dt, 37, 3, hds[hi], 1, 1, 0, 7, 1, 0, 0, &ch};
            run_write(&p);
            write_case one = {dt, 1, 1, hds[hi], 16, 0, 1, 0, 0, 0, 0, &ch};
            run_write(&one);
        }
        cache_on_vectors = 1;
        write_case a = {dt, 9, 3, 128, 16, 0, 0, 0, 1, 0, 16, &ch};
        run_write(&a);
        cache_on_vectors = 0;
        write_case z = {dt, 0, 2, 64, 16, 0, 0, 0, 0, 0, 0, &ch};
        run_write(&z);
    }
}
END_TEST

/* ---- validation ----------------------------------------------------------- */

/* A slot past the cache under `validate` is named and nothing runs; the
 * same call without it writes the others and nothing out of range
 * (test_write's `beyond` cases check the guard bytes). */
START_TEST(test_validate)
{
    th_env *e = th_get();
    oclf_context *vctx = th_validate_context();
    const size_t T = 4, H = 2, hd = 16, nq = 2, es = 4;
    cache_buf c = make_cache(OCLF_F32, 2, 4, H, hd);
    int64_t slots[4] = {5, -1, 8, 0}; /* 8 slots: token 2 is past them */
    oclf_buf bs;
    cl_mem ms = upload_slots(slots, T, &bs);
    const size_t n = T * (nq + 2 * H) * hd;
    void *x = th_random(OCLF_F32, n, -1, 1);
    cl_mem mx = th_upload(x, n * es);
    oclf_heads k = {{mx, nq * hd, (nq + 2 * H) * hd}, H, 0};
    oclf_heads v = {{mx, (nq + H) * hd, (nq + 2 * H) * hd}, H, 0};
    oclf_status st =
        oclf_kv_cache_write(vctx, e->queue, OCLF_F32, T, k, v, bs, &c.kv, NULL, 0, NULL, NULL);
    ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
    const char *msg = oclf_last_error(vctx);
    ck_assert_msg(strncmp(msg, "oclf_kv_cache_write: ", 21) == 0 && strstr(msg, "token 2 "),
                  "message: %s", msg);

    float *cs = calloc(8 * hd, sizeof *cs);
    for (size_t p = 0; p < 8; p++)
        for (size_t j = 0; j < hd / 2; j++)
            cs[p * hd + j] = 1.0f; /* cos 1, sin 0 */
    int64_t pos[4] = {0, 1, 2, 3};
    cl_mem mcs = th_upload(cs, 8 * hd * sizeof *cs), mpos = th_upload(pos, sizeof pos);
    oclf_rope rope = {sizeof(oclf_rope), OCLF_ROPE_NEOX, hd, hd, {mpos, 0, 0}, OCLF_INT64,
                      {mcs, 0, 0}, OCLF_F32, 8};
    for (int path = 0; path < 2; path++) {
        oclf_choice ch = th_choice(path ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
        st = oclf_qk_norm_rope_cache(vctx, e->queue, OCLF_F32, T, nq, H, H, &rope,
                                     (oclf_buf){mx, 0, 0}, NULL, NULL, bs, &c.kv, 1e-6f, &ch, 0,
                                     NULL, NULL);
        ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
        msg = oclf_last_error(vctx);
        ck_assert_msg(strncmp(msg, "oclf_qk_norm_rope_cache: ", 25) == 0 &&
                          strstr(msg, "token 2 "),
                      "message: %s", msg);
    }
    clFinish(e->queue);
    check_same("validate: qkv", mx, x, n * es, es);
    check_same("validate: cache", c.mem, c.host, c.n * es, es);
    /* the good tokens alone go through */
    TH_OK(oclf_kv_cache_write(vctx, e->queue, OCLF_F32, 2, k, v, bs, &c.kv, NULL, 0, NULL, NULL));
    clFinish(e->queue);
    free(x), free(cs);
    clReleaseMemObject(mx), clReleaseMemObject(ms), clReleaseMemObject(mcs);
    clReleaseMemObject(mpos);
    free_cache(&c);
    oclf_context_destroy(vctx);
}
END_TEST

/* ---- bad arguments: the specific status, a sentence that starts with the
 * call's name, every buffer untouched ------------------------------------- */

typedef struct bad_env {
    cl_mem x, cache, slots;
    void *hx, *hcache, *hslots;
    size_t nx, ncache, nslots_bytes;
    const char *prefix;
} bad_env;

static void bad_untouched(const bad_env *b)
{
    clFinish(th_get()->queue);
    check_same("rejected call: qkv", b->x, b->hx, b->nx * 4, 4);
    check_same("rejected call: cache", b->cache, b->hcache, b->ncache * 4, 4);
    check_same("rejected call: slots", b->slots, b->hslots, b->nslots_bytes, 8);
    const char *msg = oclf_last_error(th_get()->ctx);
    ck_assert_msg(strncmp(msg, b->prefix, strlen(b->prefix)) == 0, "'%s' does not start with '%s'",
                  msg, b->prefix);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_untouched(&bb))

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    cl_command_queue q = e->queue;
    const size_t T = 4, H = 2, hd = 16, nq = 2, nh = nq + 2 * H, bsz = 4, nblk = 2;
    const size_t part = nblk * bsz * H * hd;
    bad_env bb;
    bb.nx = T * nh * hd;
    bb.ncache = 2 * part + 8;
    bb.nslots_bytes = T * 8;
    bb.hx = th_random(OCLF_F32, bb.nx, -1, 1);
    bb.hcache = th_random(OCLF_F32, bb.ncache, -1, 1);
    int64_t hs[4] = {0, 3, -1, 6};
    bb.hslots = hs;
    bb.x = th_upload(bb.hx, bb.nx * 4);
    bb.cache = th_upload(bb.hcache, bb.ncache * 4);
    bb.slots = th_upload(hs, sizeof hs);
    const oclf_kv_cache C = {
        sizeof(oclf_kv_cache), bb.cache, bb.cache, 0, part + 8, nblk, bsz, H, hd};
    oclf_kv_cache a;
    const oclf_buf S = {bb.slots, 0, 0}, X = {bb.x, 0, 0};
    const oclf_heads K = {{bb.x, nq * hd, nh * hd}, H, 0}, V = {{bb.x, (nq + H) * hd, nh * hd}, H, 0};
    oclf_heads h;

    /* kv_cache_write */
    bb.prefix = "oclf_kv_cache_write: ";
#define KW(k_, v_, s_, c_)                                                                         \
    oclf_kv_cache_write(e->ctx, q, OCLF_F32, T, k_, v_, s_, c_, NULL, 0, NULL, NULL)
    EXPECT(KW(K, V, S, NULL), OCLF_INVALID_ARGUMENT, "cache is NULL");
    a = C, a.heads = 0;
    EXPECT(KW(K, V, S, &a), OCLF_INVALID_ARGUMENT, "heads");
    a = C, a.head_dim = 300;
    EXPECT(KW(K, V, S, &a), OCLF_INVALID_ARGUMENT, "head_dim");
    a = C, a.num_blocks = 100; /* more blocks than the buffer holds */
    EXPECT(KW(K, V, S, &a), OCLF_INVALID_ARGUMENT, "do not fit");
    a = C, a.v_offset = part - 3; /* K and V of the cache overlap */
    EXPECT(KW(K, V, S, &a), OCLF_INVALID_ARGUMENT, "K and V overlap");
    a = C, a.k = NULL;
    EXPECT(KW(K, V, S, &a), OCLF_INVALID_ARGUMENT, "cache k");
    h = K, h.count = H + 1;
    EXPECT(KW(h, V, S, &C), OCLF_INVALID_ARGUMENT, "k has 3 heads, the cache 2");
    h = V, h.count = 1;
    EXPECT(KW(K, h, S, &C), OCLF_INVALID_ARGUMENT, "v has 1 heads, the cache 2");
    h = K, h.head_stride = hd - 1;
    EXPECT(KW(h, V, S, &C), OCLF_INVALID_ARGUMENT, "head stride");
    h = V, h.buf.offset = bb.nx - 10; /* v past the end of its buffer */
    EXPECT(KW(K, h, S, &C), OCLF_INVALID_ARGUMENT, "do not fit");
    h = K, h.buf.mem = NULL;
    EXPECT(KW(h, V, S, &C), OCLF_INVALID_ARGUMENT, "k");
    /* k, then v, read out of the cache's own K or V */
    h = K, h.buf = (oclf_buf){bb.cache, 0, H * hd};
    EXPECT(KW(h, V, S, &C), OCLF_INVALID_ARGUMENT, "k overlaps the cache");
    h = V, h.buf = (oclf_buf){bb.cache, part + 8, H * hd};
    EXPECT(KW(K, h, S, &C), OCLF_INVALID_ARGUMENT, "v overlaps the cache");
    /* slots: too small a buffer, a NULL one, inside k, inside the cache */
    EXPECT(oclf_kv_cache_write(e->ctx, q, OCLF_F32, T + 1, K, V, S, &C, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "slot_mapping");
    EXPECT(KW(K, V, ((oclf_buf){NULL, 0, 0}), &C), OCLF_INVALID_ARGUMENT, "slot_mapping");
    EXPECT(KW(K, V, ((oclf_buf){bb.x, nq * hd / 2, 0}), &C), OCLF_INVALID_ARGUMENT,
           "k overlaps slot_mapping");
    EXPECT(KW(K, V, ((oclf_buf){bb.cache, 0, 0}), &C), OCLF_INVALID_ARGUMENT,
           "slot_mapping overlaps the cache");
    EXPECT(oclf_kv_cache_write(e->ctx, q, (oclf_dtype)5, T, K, V, S, &C, NULL, 0, NULL, NULL),
           OCLF_UNSUPPORTED, "dtype");
    EXPECT(oclf_kv_cache_write(e->ctx, NULL, OCLF_F32, T, K, V, S, &C, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    ck_assert_int_eq(oclf_kv_cache_write(NULL, q, OCLF_F32, T, K, V, S, &C, NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "oclf_kv_cache_write: ctx"));
#undef KW

    /* qk_norm_rope_cache */
    bb.prefix = "oclf_qk_norm_rope_cache: ";
    float cs[4 * 16] = {0};
    int64_t pos[4] = {0, 1, 2, 3};
    cl_mem mcs = th_upload(cs, sizeof cs), mpos = th_upload(pos, sizeof pos);
    const oclf_rope R = {sizeof(oclf_rope), OCLF_ROPE_NEOX, hd, hd, {mpos, 0, 0}, OCLF_INT64,
                         {mcs, 0, 0}, OCLF_F32, 4};
    oclf_rope r;
#define QC(rope_, x_, nk_, nv_, w_, s_, c_)                                                        \
    oclf_qk_norm_rope_cache(e->ctx, q, OCLF_F32, T, nq, nk_, nv_, rope_, x_, w_, NULL, s_, c_,     \
                            1e-6f, NULL, 0, NULL, NULL)
    EXPECT(QC(&R, X, H, H, NULL, S, NULL), OCLF_INVALID_ARGUMENT, "cache is NULL");
    EXPECT(QC(&R, X, H + 1, H - 1, NULL, S, &C), OCLF_INVALID_ARGUMENT, "nk (3) and nv (1)");
    a = C, a.heads = 1;
    EXPECT(QC(&R, X, H, H, NULL, S, &a), OCLF_INVALID_ARGUMENT, "cache's 1 heads");
    a = C, a.head_dim = 8;
    EXPECT(QC(&R, X, H, H, NULL, S, &a), OCLF_INVALID_ARGUMENT, "head_dim 8");
    a = C, a.num_blocks = 100;
    EXPECT(QC(&R, X, H, H, NULL, S, &a), OCLF_INVALID_ARGUMENT, "do not fit");
    a = C, a.v_offset = 5;
    EXPECT(QC(&R, X, H, H, NULL, S, &a), OCLF_INVALID_ARGUMENT, "K and V overlap");
    /* a cache of one slot in qkv's first token */
    a = C, a.k = a.v = bb.x, a.num_blocks = 1, a.block_size = 1, a.k_offset = 0;
    a.v_offset = H * hd;
    EXPECT(QC(&R, X, H, H, NULL, S, &a), OCLF_INVALID_ARGUMENT, "the cache overlaps qkv");
    r = R, r.cos_sin = (oclf_buf){bb.cache, 0, 0};
    EXPECT(QC(&r, X, H, H, NULL, S, &C), OCLF_INVALID_ARGUMENT, "overlaps the cache");
    EXPECT(QC(&R, X, H, H, &((oclf_buf){bb.cache, 4, 0}), S, &C), OCLF_INVALID_ARGUMENT,
           "overlaps the cache");
    EXPECT(QC(&R, ((oclf_buf){bb.x, 0, nh * hd - 8}), H, H, NULL, S, &C), OCLF_INVALID_ARGUMENT,
           "stride");
    EXPECT(QC(&R, X, H, H, NULL, ((oclf_buf){bb.slots, 1, 0}), &C), OCLF_INVALID_ARGUMENT,
           "slot_mapping");
    EXPECT(QC(&R, X, H, H, NULL, ((oclf_buf){bb.x, 8, 0}), &C), OCLF_INVALID_ARGUMENT,
           "slot_mapping overlaps qkv");
    EXPECT(QC(&R, X, H, H, NULL, ((oclf_buf){bb.cache, part, 0}), &C), OCLF_INVALID_ARGUMENT,
           "slot_mapping overlaps the cache");
    /* qk_norm_rope's own checks, under this call's name */
    EXPECT(QC(NULL, X, H, H, NULL, S, &C), OCLF_INVALID_ARGUMENT, "rope is NULL");
    r = R, r.rot_dim = 3;
    EXPECT(QC(&r, X, H, H, NULL, S, &C), OCLF_INVALID_ARGUMENT, "rot_dim");
    EXPECT(QC(&R, X, H, H, &X, S, &C), OCLF_INVALID_ARGUMENT, "weight overlaps");
#undef QC
    clReleaseMemObject(mcs), clReleaseMemObject(mpos);
    clReleaseMemObject(bb.x), clReleaseMemObject(bb.cache), clReleaseMemObject(bb.slots);
    free(bb.hx), free(bb.hcache);
}
END_TEST

static Suite *kvcache_suite(void)
{
    Suite *s = suite_create("kvcache");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_write, 0, 3);
    tcase_add_loop_test(t, test_write_aligned, 0, 3);
    tcase_add_loop_test(t, test_qk_cache, 0, 3);
    tcase_add_loop_test(t, test_qk_cache_structures, 0, 3);
    tcase_add_test(t, test_validate);
    suite_add_tcase(s, t);
    TCase *p = tcase_create("packed");
    tcase_set_timeout(p, 0);
    tcase_add_loop_test(p, test_qk_cache_packed, 0, 3);
    suite_add_tcase(s, p);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(kvcache_suite()); }
