/*
 * Attention over a paged KV cache (oclf_attention_paged) against the fp64
 * reference of lib/ref/ref_attention.c: the cache is built on the host
 * (blocks handed out in a shuffled order, block-table entries past each
 * sequence's blocks and the unused blocks and slots filled with garbage),
 * and the reference gathers each sequence's first seq_lens[b] keys into
 * contiguous K and V and runs the contiguous reference with cu_seqlens_k
 * built from seq_lens. Decode, chunked prefill and mixed batches; empty and
 * 1-token sequences; rows that see no key; every option alone and
 * together; head dims 1 to 256; MHA, GQA and MQA; block sizes 1, 16 and
 * 256; split KV (PART) against no split; fused against unfused; q and o as
 * strided head views whose padding must stay bit for bit; every bad
 * argument, with and without the context's `validate` option.
 *
 * `test_attention_paged traffic` instead runs one decode call per dtype
 * and structure (staged, and the decode structure with the KV group's
 * query heads in one work-group) between "@@" marker lines for
 * tests/oclgrind_run.py's traffic mode: each must read the visible K and V
 * once per KV-head group. The decode structure (STAGE 2) is also forced
 * against the reference on any device, and the GPU default's build is
 * checked.
 */
#include "attention_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): fewer cases. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

/* ---- the paged cache built on the host ---------------------------------- */

/* 1: the cache's K and V planes and the output's rows start at element
 * offsets that are multiples of 8 (16 bytes for 16-bit elements), so a
 * head dim that is a multiple of the 16-byte unit lets the decode
 * structure take its aligned build; 0 (most cases): odd offsets. */
static int cache_aligned;
/* A context that logs its launches for the case (th_build_log_context), or
 * NULL for the suite's. */
static oclf_context *case_ctx;

/* What unused blocks, unused slots of used blocks and table entries past a
 * sequence's blocks hold. */
typedef enum garbage { GARBAGE_LARGE, GARBAGE_NAN } garbage;

typedef struct paged {
    oclf_dtype dt;
    size_t batch, hk, d, bs, nblocks, max_blocks;
    size_t bt_off, bt_stride; /* block table: row b at bt_off + b * bt_stride */
    size_t tq, tk, max_sq;
    int32_t *cuq, *seq, *cuk, *bt;
    size_t nbt;
    void *hcache; /* K then V in one buffer */
    size_t ncache, koff, voff;
    void *kc, *vc; /* the reference's contiguous K and V [tk, hk, d] */
    cl_mem mcache, mcuq, mseq, mbt;
} paged;

static size_t slot_index(const paged *p, size_t base, size_t block, size_t slot, size_t h)
{
    return base + ((block * p->bs + slot) * p->hk + h) * p->d;
}

/* Sequence b has sq[b] queries and seq_lens[b] = sk[b] keys. */
static void paged_build(paged *p, oclf_dtype dt, size_t batch, size_t hk, size_t d, size_t bs,
                        const int *sq, const int *sk, garbage g)
{
    memset(p, 0, sizeof *p);
    p->dt = dt, p->batch = batch, p->hk = hk, p->d = d, p->bs = bs;
    const size_t es = oclf_dtype_size(dt);
    p->cuq = calloc(batch + 1, 4);
    p->cuk = calloc(batch + 1, 4);
    p->seq = calloc(batch + 1, 4);
    size_t used = 0, most = 0;
    for (size_t b = 0; b < batch; b++) {
        p->cuq[b + 1] = p->cuq[b] + sq[b];
        p->cuk[b + 1] = p->cuk[b] + sk[b];
        p->seq[b] = sk[b];
        const size_t nb = ((size_t)sk[b] + bs - 1) / bs;
        used += nb;
        most = nb > most ? nb : most;
        p->max_sq = (size_t)sq[b] > p->max_sq ? (size_t)sq[b] : p->max_sq;
    }
    p->tq = (size_t)p->cuq[batch], p->tk = (size_t)p->cuk[batch];
    p->max_blocks = most + 1;
    p->nblocks = used + 3;
    p->bt_off = 1, p->bt_stride = p->max_blocks + 2;
    p->nbt = p->bt_off + batch * p->bt_stride + 1;
    p->bt = malloc(p->nbt * 4 + 4);
    /* blocks in a shuffled order; entries that are not a sequence's blocks
     * are out of range (never read) */
    size_t *perm = malloc(p->nblocks * sizeof *perm);
    for (size_t i = 0; i < p->nblocks; i++)
        perm[i] = i;
    for (size_t i = p->nblocks - 1; i > 0; i--) {
        const size_t j = (size_t)th_uniform(0, (float)(i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    static const int32_t junk[] = {-1, INT32_MAX, -7, 1 << 20};
    for (size_t i = 0; i < p->nbt; i++)
        p->bt[i] = junk[i % 4];
    size_t next = 0;
    for (size_t b = 0; b < batch; b++) {
        const size_t nb = ((size_t)sk[b] + bs - 1) / bs;
        for (size_t j = 0; j < nb; j++)
            p->bt[p->bt_off + b * p->bt_stride + j] = (int32_t)perm[next++];
    }
    free(perm);
    /* the cache: garbage everywhere, then the sequences' keys */
    const size_t plane = p->nblocks * bs * hk * d;
    p->koff = 5, p->voff = p->koff + plane + 4;
    if (cache_aligned) /* both planes on 16 bytes */
        p->koff = 8, p->voff = (p->koff + plane + 4 + 7) / 8 * 8;
    p->ncache = p->voff + plane + 3;
    p->hcache = malloc(p->ncache * es + 1);
    for (size_t i = 0; i < p->ncache; i++)
        oclf_ref_set(dt, p->hcache, i,
                     g == GARBAGE_NAN ? NAN : (i % 2 ? 40.0f : -30.0f) + th_uniform(0, 1));
    p->kc = malloc(p->tk * hk * d * es + 1);
    p->vc = malloc(p->tk * hk * d * es + 1);
    for (size_t b = 0; b < batch; b++)
        for (size_t j = 0; j < (size_t)sk[b]; j++) {
            const size_t block = (size_t)p->bt[p->bt_off + b * p->bt_stride + j / bs];
            for (size_t h = 0; h < hk; h++) {
                const size_t c = ((size_t)p->cuk[b] + j) * hk * d + h * d;
                for (size_t e = 0; e < d; e++) {
                    const size_t ki = slot_index(p, p->koff, block, j % bs, h) + e;
                    const size_t vi = slot_index(p, p->voff, block, j % bs, h) + e;
                    oclf_ref_set(dt, p->hcache, ki, th_uniform(-1, 1));
                    oclf_ref_set(dt, p->hcache, vi, th_uniform(-1, 1));
                    memcpy((char *)p->kc + (c + e) * es, (char *)p->hcache + ki * es, es);
                    memcpy((char *)p->vc + (c + e) * es, (char *)p->hcache + vi * es, es);
                }
            }
        }
    p->mcache = th_upload(p->hcache, p->ncache * es);
    p->mcuq = th_upload(p->cuq, (batch + 1) * 4);
    p->mseq = th_upload(p->seq, (batch + 1) * 4);
    p->mbt = th_upload(p->bt, p->nbt * 4);
}

static oclf_kv_cache paged_cache(const paged *p)
{
    oclf_kv_cache c;
    memset(&c, 0, sizeof c);
    c.k = c.v = p->mcache;
    c.k_offset = p->koff, c.v_offset = p->voff;
    c.num_blocks = p->nblocks, c.block_size = p->bs, c.heads = p->hk, c.head_dim = p->d;
    return c;
}

static oclf_buf paged_table(const paged *p) { return (oclf_buf){p->mbt, p->bt_off, p->bt_stride}; }

static void paged_free(paged *p)
{
    free(p->cuq), free(p->cuk), free(p->seq), free(p->bt), free(p->hcache);
    free(p->kc), free(p->vc);
    cl_mem rel[] = {p->mcache, p->mcuq, p->mseq, p->mbt};
    for (int i = 0; i < 4; i++)
        if (rel[i])
            clReleaseMemObject(rel[i]);
    memset(p, 0, sizeof *p);
}

/* The cache and the table as uploaded: a call reads them only. */
static void paged_check_unchanged(const paged *p)
{
    const size_t es = oclf_dtype_size(p->dt);
    void *got = malloc(p->ncache * es + 1);
    th_download(p->mcache, got, p->ncache * es);
    ck_assert_msg(memcmp(got, p->hcache, p->ncache * es) == 0, "the call wrote the cache");
    free(got);
    int32_t *bt = malloc(p->nbt * 4 + 4);
    th_download(p->mbt, bt, p->nbt * 4);
    ck_assert_msg(memcmp(bt, p->bt, p->nbt * 4) == 0, "the call wrote the block table");
    free(bt);
}

/* ---- one case against the reference -------------------------------------- */

typedef struct pcase {
    oclf_dtype dt;
    size_t hq, hk, d, batch, bs;
    const int *sq, *sk; /* queries and seq_lens per sequence */
    int causal, window;
    int64_t left, right;
    float scale, softcap;
    int alibi, sinks, lse;
    float dropout;
    uint64_t seed, doff;
    oclf_path path;
    const oclf_params *params; /* NULL: the defaults */
    garbage g;
} pcase;

static void run_case(const pcase *c, attn_result *res)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dt;
    const size_t es = oclf_dtype_size(dt), d = c->d, hq = c->hq, hk = c->hk;
    paged p;
    paged_build(&p, dt, c->batch, hk, d, c->bs, c->sq, c->sk, c->g);
    const size_t tq = p.tq;

    /* q and o: strided head views with padding between heads and tokens */
    const size_t qhs = d + 2, qts = hq * qhs + 1, qoff = 3, qn = qoff + tq * qts + 1;
    void *hq_ = th_random(dt, qn, -1, 1);
    cl_mem mq = th_upload(hq_, qn * es);
    oclf_heads q = {{mq, qoff, qts}, hq, qhs};
    attn_out out;
    /* (the decode structure's aligned build wants the output's rows on 16
     * bytes too) */
    if (cache_aligned)
        attn_out_make_aligned(&out, dt, tq, hq, d);
    else
        attn_out_make(&out, dt, tq, hq, d);
    const oclf_heads o = attn_out_heads(&out);
    oclf_buf lse = attn_out_lse(&out);
    float *slopes = th_random(OCLF_F32, hq, 0.05f, 0.5f);
    float *sinks = th_random(OCLF_F32, hq, -1.0f, 2.0f);
    cl_mem msl = th_upload(slopes, hq * 4), msi = th_upload(sinks, hq * 4);
    oclf_buf bsl = {msl, 0, 0}, bsi = {msi, 0, 0};

    oclf_attention_options opt = OCLF_ATTENTION_OPTIONS_INIT;
    opt.scale = c->scale;
    opt.causal = c->causal;
    opt.window = c->window;
    opt.window_left = c->left;
    opt.window_right = c->right;
    opt.softcap = c->softcap;
    opt.alibi_slopes = c->alibi ? &bsl : NULL;
    opt.sinks = c->sinks ? &bsi : NULL;
    opt.lse = c->lse ? &lse : NULL;
    opt.dropout_p = c->dropout;
    opt.dropout_seed = c->seed, opt.dropout_offset = c->doff;
    oclf_choice ch = th_choice(c->path);
    if (c->params)
        ch.params = *c->params;
    const oclf_kv_cache cache = paged_cache(&p);
    cl_event ev = NULL;
    TH_OK(oclf_attention_paged(case_ctx ? case_ctx : e->ctx, e->queue, dt, c->batch, tq,
                               p.max_sq, p.max_blocks, (oclf_buf){p.mcuq, 0, 0},
                               (oclf_buf){p.mseq, 0, 0}, paged_table(&p), q, &cache, o, &opt,
                               &ch, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    attn_out_read(&out);

    oclf_ref_attention_args a;
    memset(&a, 0, sizeof a);
    a.dtype = dt, a.batch = c->batch, a.hq = hq, a.hk = hk, a.d = d;
    a.cu_q = p.cuq, a.cu_k = p.cuk;
    a.q = (oclf_ref_heads){hq_, qoff, qts, qhs};
    a.k = (oclf_ref_heads){p.kc, 0, hk * d, d};
    a.v = (oclf_ref_heads){p.vc, 0, hk * d, d};
    a.scale = c->scale, a.causal = c->causal, a.window = c->window;
    a.left = c->window ? c->left : -1, a.right = c->window ? c->right : -1;
    a.softcap = c->softcap;
    a.alibi = c->alibi ? slopes : NULL;
    a.sinks = c->sinks ? sinks : NULL;
    a.dropout_p = c->dropout, a.dropout_seed = c->seed, a.dropout_offset = c->doff;
    double *want = malloc((tq * hq * d + 1) * sizeof *want);
    double *wl = malloc((hq * tq + 1) * sizeof *wl), *vmax = malloc((tq * hq + 1) * sizeof *vmax);
    oclf_ref_attention(&a, tq, want, wl, vmax);
    size_t first = 0;
    double worst = 0;
    const size_t bad = oclf_ref_attention_compare(dt, out.go, out.ooff, out.ots, out.ohs, tq, hq,
                                                  d, want, vmax, &first, &worst);
    ck_assert_msg(bad == 0,
                  "%s %s d=%zu hq=%zu hk=%zu bs=%zu: %zu outputs wrong, first %zu (token %zu, "
                  "head %zu: want %g), max err %g",
                  oclf_dtype_name(dt), c->path == OCLF_PATH_UNFUSED ? "unfused" : "fused", d, hq,
                  hk, c->bs, bad, first, first / (hq * d), first / d % hq, want[first], worst);
    attn_check_o_padding(&out);
    attn_check_lse(&out, c->lse, wl);
    /* a row that sees no key and has no sink: exactly 0, never NaN */
    attn_check_no_key_rows(&out, wl);
    /* q, the cache and the table are only read */
    void *gq = malloc(qn * es);
    th_download(mq, gq, qn * es);
    ck_assert_msg(memcmp(gq, hq_, qn * es) == 0, "the call wrote q");
    free(gq);
    paged_check_unchanged(&p);
    if (res) {
        attn_result_keep(&out, vmax, res);
        vmax = NULL;
    }
    free(vmax), free(want), free(wl), free(hq_);
    attn_out_free(&out);
    free(slopes), free(sinks);
    cl_mem rel[] = {mq, msl, msi};
    for (int i = 0; i < 3; i++)
        clReleaseMemObject(rel[i]);
    paged_free(&p);
}

/* Runs *c on the inputs of seed `seed`, its results kept in *res. */
static void run_seeded(const pcase *c, uint64_t seed, attn_result *res)
{
    th_seed(seed);
    run_case(c, res);
}

/* Runs *c on the inputs of seed `seed` and expects what *first holds (a run
 * of the same inputs with another structure or path). */
static void expect_rerun_same(const pcase *c, uint64_t seed, const attn_result *first,
                              const char *what)
{
    attn_result r;
    run_seeded(c, seed, &r);
    attn_expect_same(c->dt, c->hq, c->d, first, &r, what);
    attn_result_free(&r);
}

/* A mixed batch in one call: decode (1 query), chunked prefill (the last
 * Sq of Sk keys), an empty sequence, a 1-token one, more queries than keys
 * (causal rows that see no key), queries without keys, a longer decode. */
static const int msq[] = {1, 5, 0, 1, 3, 2, 1};
static const int msk[] = {13, 20, 0, 1, 2, 0, 33};
#define MB 7

/* ---- each option alone and together -------------------------------------- */

static void option_set(int i, pcase *c)
{
    switch (i) {
    case 0: break;
    case 1: c->causal = 1; break;
    case 2: c->window = 1, c->left = 2, c->right = 1; break;
    case 3: c->window = 1, c->left = 3, c->right = -1; break;
    case 4: c->window = 1, c->left = -1, c->right = 0; break; /* causal as a window */
    case 5: c->softcap = 0.7f, c->scale = 2.0f; break;
    case 6: c->alibi = 1; break;
    case 7: c->sinks = 1; break;
    case 8: c->lse = 1; break;
    case 9: c->scale = 0.3f; break;
    case 10: /* everything */
        c->causal = 1, c->window = 1, c->left = 2, c->right = 3;
        c->softcap = 1.5f, c->alibi = 1, c->sinks = 1, c->lse = 1;
        break;
    case 11: c->causal = 1, c->sinks = 1, c->lse = 1; break; /* no-key rows get the sink */
    case 13: /* dropout: both words of the seed, an offset that carries */
        c->dropout = 0.3f, c->seed = 0x0123456789abcdefull, c->doff = 0xfffffffeull, c->lse = 1;
        break;
    case 14: { /* dropout across split KV's partitions, with sinks */
        static oclf_params split;
        split.count = 0;
        oclf_params_set(&split, "PART", 8);
        c->params = &split;
        c->causal = 1, c->sinks = 1, c->lse = 1;
        c->dropout = 0.5f, c->seed = 77, c->doff = 5;
        break;
    }
    default: c->causal = 1, c->window = 1, c->left = 0, c->right = 0, c->lse = 1; break;
    }
}
#define N_OPTION_SETS 15

START_TEST(test_options)
{
    for (int p = 0; p < 2; p++)
        for (size_t di = 0; di < 3; di++) {
            if (th_quick() && di > 0)
                continue;
            pcase c = {.dt = dtypes[di], .hq = 4, .hk = 2, .d = 24, .batch = MB, .bs = 4,
                       .sq = msq, .sk = msk, .path = p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
            option_set(_i, &c);
            run_case(&c, NULL);
        }
}
END_TEST

/* ---- shapes --------------------------------------------------------------- */

START_TEST(test_dims)
{
    static const size_t dims[] = {1, 3, 64, 80, 96, 128, 256};
    const size_t d = dims[_i];
    static const int sq[] = {1, 4, 1}, sk[] = {9, 7, 18};
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di > 0)
            continue;
        pcase c = {.dt = dtypes[di], .hq = 4, .hk = 1, .d = d, .batch = 3, .bs = 16, .sq = sq,
                   .sk = sk, .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED};
        run_case(&c, NULL);
        if (di == 0 || d == 80) {
            c.path = OCLF_PATH_UNFUSED;
            run_case(&c, NULL);
        }
    }
}
END_TEST

/* A block size asked for with the work-group size left to the heuristic:
 * where both do not fit local memory (the GPU class's rows at head dim 64
 * and 32 keys), the heuristic's WGS gives way rather than the call
 * failing. */
START_TEST(test_bk_with_default_wgs)
{
    static const int sq[] = {3, 1}, sk[] = {40, 70};
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "BK", 32);
    pcase c = {.dt = OCLF_F32, .hq = 8, .hk = 2, .d = 64, .batch = 2, .bs = 16, .sq = sq,
               .sk = sk, .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED, .params = &p};
    run_case(&c, NULL);
}
END_TEST

START_TEST(test_heads)
{
    /* MHA, GQA 4 (MQA), GQA 4 in two groups, GQA 8 (MQA), GQA 8 in two
     * groups, GQA 2 */
    static const size_t heads[][2] = {{3, 3}, {4, 1}, {8, 2}, {8, 1}, {16, 2}, {6, 3}};
    for (int p = 0; p < 2; p++) {
        pcase c = {.dt = OCLF_F32, .hq = heads[_i][0], .hk = heads[_i][1], .d = 16,
                   .batch = MB, .bs = 16, .sq = msq, .sk = msk, .causal = 1, .alibi = 1,
                   .lse = 1, .path = p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
        run_case(&c, NULL);
    }
}
END_TEST

START_TEST(test_block_sizes)
{
    static const size_t bss[] = {1, 16, 256};
    static const int sq[] = {1, 6, 0, 1}, sk[] = {300, 40, 0, 17};
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di > 0)
            continue;
        for (int p = 0; p < 2; p++) {
            pcase c = {.dt = dtypes[di], .hq = 4, .hk = 2, .d = 32, .batch = 4, .bs = bss[_i],
                       .sq = sq, .sk = sk, .causal = 1, .sinks = 1, .lse = 1,
                       .path = p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
            run_case(&c, NULL);
        }
    }
}
END_TEST

/* Decode only and chunked prefill only (the mixed batch is everywhere). */
START_TEST(test_decode_prefill)
{
    static const int dq[] = {1, 1, 1, 1, 1}, dk[] = {1, 50, 16, 17, 129};
    static const int pq[] = {16, 7, 3}, pk[] = {48, 7, 70};
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di > 0)
            continue;
        pcase c = {.dt = dtypes[di], .hq = 8, .hk = 2, .d = 64, .batch = 5, .bs = 16, .sq = dq,
                   .sk = dk, .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED};
        run_case(&c, NULL);
        pcase f = {.dt = dtypes[di], .hq = 8, .hk = 2, .d = 64, .batch = 3, .bs = 16, .sq = pq,
                   .sk = pk, .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED};
        run_case(&f, NULL);
    }
}
END_TEST

/* Explicit structures of the fused kernel without a split. */
START_TEST(test_structures)
{
    static const int cfg[][4] = {{1, 1, 1, 0}, {4, 3, 4, 0}, {16, 64, 16, 0},
                                 {2, 5, 2, 1}, {64, 8, 8, 1}};
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "WGS", cfg[_i][0]);
    oclf_params_set(&p, "BK", cfg[_i][1]);
    oclf_params_set(&p, "VEC", cfg[_i][2]);
    oclf_params_set(&p, "ACC", cfg[_i][3]);
    oclf_params_set(&p, "PART", 0);
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di > 0)
            continue;
        pcase c = {.dt = dtypes[di], .hq = 6, .hk = 2, .d = 20, .batch = MB, .bs = 4, .sq = msq,
                   .sk = msk, .causal = 1, .window = 1, .left = 4, .right = 0, .sinks = 1,
                   .lse = 1, .path = OCLF_PATH_FUSED, .params = &p};
        run_case(&c, NULL);
    }
}
END_TEST

/* ---- the decode structure (STAGE 2) --------------------------------------- */

/* STAGE 2 forced with WGS work-items, QR rows a group, and PART or FILL. */
static oclf_params decode_params(int wgs, int qr, int part, int fill)
{
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "STAGE", 2);
    oclf_params_set(&p, "WGS", wgs);
    oclf_params_set(&p, "QR", qr);
    oclf_params_set(&p, "PART", part);
    oclf_params_set(&p, "FILL", fill);
    return p;
}

/* The decode structure against the reference: GQA 1, 4 and 8 (and QR rows
 * that split a group's heads), head dims of whole and partial 16-byte
 * units and wider than a sub-group's units (256), decode rows of odd
 * lengths with partial last blocks, a sequence of 1 key and one of none,
 * rows of 0 and 1 queries and a short chunk, split KV by PART and by FILL,
 * every option together and dropout, each dtype, the cache placed on 16
 * bytes (the aligned build) or not. */
START_TEST(test_decode_structure)
{
    static const struct {
        size_t hq, hk, d, bs;
        int wgs, qr, part, fill, opts;
    } cfg[] = {
        {2, 2, 128, 16, 128, 1, 0, 0, 1},  {8, 2, 64, 16, 64, 4, 0, 0, 10},
        {8, 1, 128, 16, 128, 8, 0, 0, 13}, {8, 1, 40, 4, 32, 8, 64, 0, 10},
        {4, 1, 20, 16, 64, 4, 0, 0, 11},   {8, 2, 128, 16, 128, 3, 0, 4, 10},
        {16, 2, 256, 16, 128, 8, 0, 0, 8}, {8, 1, 64, 16, 16, 8, 32, 0, 13},
    };
    static const int sq[] = {1, 1, 0, 1, 3, 1, 1}, sk[] = {1, 17, 40, 63, 9, 0, 200};
    const int i = _i / 2;
    cache_aligned = _i % 2;
    oclf_params p = decode_params(cfg[i].wgs, cfg[i].qr, cfg[i].part, cfg[i].fill);
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di != (size_t)i % 3)
            continue;
        pcase c = {.dt = dtypes[di], .hq = cfg[i].hq, .hk = cfg[i].hk, .d = cfg[i].d,
                   .batch = 7, .bs = cfg[i].bs, .sq = sq, .sk = sk, .lse = 1,
                   .path = OCLF_PATH_FUSED};
        option_set(cfg[i].opts, &c);
        c.params = &p;
        run_case(&c, NULL);
    }
    cache_aligned = 0;
}
END_TEST

/* The decode structure (aligned build or not) against the staged one
 * without a split, over a sequence long enough for FILL's partitions. */
START_TEST(test_decode_against_staged)
{
    static const int sq[] = {1, 1}, sk[] = {3001, 517};
    oclf_params dec = decode_params(128, 4, 0, 64), staged;
    memset(&staged, 0, sizeof staged);
    oclf_params_set(&staged, "STAGE", 1);
    oclf_params_set(&staged, "BK", 16);
    oclf_params_set(&staged, "ACC", 1);
    oclf_params_set(&staged, "PART", 0);
    const oclf_dtype dt = dtypes[_i];
    cache_aligned = 1;
    pcase c = {.dt = dt, .hq = 8, .hk = 2, .d = 64, .batch = 2, .bs = 16, .sq = sq, .sk = sk,
               .causal = 1, .sinks = 1, .lse = 1, .path = OCLF_PATH_FUSED};
    attn_result a;
    c.params = &staged;
    run_seeded(&c, 17, &a);
    c.params = &dec;
    expect_rerun_same(&c, 17, &a, "decode structure against the staged one");
    attn_result_free(&a);
    cache_aligned = 0;
}
END_TEST

/* The decode structure's one-work-item form (WGS 1, a CPU's default)
 * against the reference: rows over every head, QR taking a query's heads
 * whole (8: GQA 1, 4 and 8), a KV group in parts (3, 5: rows of one KV
 * head split between work-items) and rows of several queries (16, 12),
 * head dims of whole and partial 16-element vectors, decode rows of odd
 * lengths with partial last steps, a sequence of 1 key and one of none,
 * rows of 0 and 1 queries and a short chunk, split KV by PART and by FILL,
 * every option together and dropout, each dtype. */
START_TEST(test_decode_cpu_form)
{
    static const struct {
        size_t hq, hk, d, bs;
        int qr, part, fill, opts;
    } cfg[] = {
        {2, 2, 128, 16, 2, 0, 0, 1},  {8, 2, 64, 16, 8, 0, 0, 10}, {8, 1, 128, 16, 8, 0, 0, 13},
        {8, 1, 40, 4, 3, 64, 0, 10},  {4, 1, 20, 16, 5, 0, 0, 11}, {8, 2, 128, 16, 16, 0, 4, 10},
        {16, 2, 256, 16, 12, 0, 0, 8}, {8, 8, 64, 16, 8, 32, 0, 13},
    };
    static const int sq[] = {1, 1, 0, 1, 3, 1, 1}, sk[] = {1, 17, 40, 63, 9, 0, 200};
    oclf_params p = decode_params(1, cfg[_i].qr, cfg[_i].part, cfg[_i].fill);
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di != (size_t)_i % 3)
            continue;
        pcase c = {.dt = dtypes[di], .hq = cfg[_i].hq, .hk = cfg[_i].hk, .d = cfg[_i].d,
                   .batch = 7, .bs = cfg[_i].bs, .sq = sq, .sk = sk, .lse = 1,
                   .path = OCLF_PATH_FUSED};
        c.params = &p;
        option_set(cfg[_i].opts, &c);
        run_case(&c, NULL);
    }
}
END_TEST

/* Which build a decode call's defaults run: with OCLF_DEVICE_CLASS=gpu the
 * decode structure (its aligned build for a cache on 16 bytes, the plain
 * one otherwise), on a CPU its one-work-item form (one build for both). */
START_TEST(test_decode_default)
{
    const char *cls = getenv("OCLF_DEVICE_CLASS");
    const int gpu = cls && strcmp(cls, "gpu") == 0;
    static const int sq[] = {1, 1, 1}, sk[] = {70, 1, 33};
    for (int al = 0; al < 2; al++) {
        cache_aligned = al;
        case_ctx = th_build_log_context();
        pcase c = {.dt = dtypes[_i], .hq = 8, .hk = 2, .d = 64, .batch = 3, .bs = 16, .sq = sq,
                   .sk = sk, .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED};
        run_case(&c, NULL);
        if (gpu)
            ck_assert_msg(th_built("launch attention_decode ", "-DOCLF_STAGE=2", al),
                          "%s: the GPU default ran no %s decode build:\n%s",
                          oclf_dtype_name(dtypes[_i]), al ? "aligned" : "plain", th_builds());
        else
            ck_assert_msg(th_built("launch attention_decode ", "-DOCLF_STAGE=2 -DOCLF_WGS=1", 0),
                          "%s: the CPU default left its structure:\n%s",
                          oclf_dtype_name(dtypes[_i]), th_builds());
        oclf_context_destroy(case_ctx);
        case_ctx = NULL;
    }
    cache_aligned = 0;
}
END_TEST

/* ---- split KV -------------------------------------------------------------- */

/* PART 32 / 64 with BK dividing it against PART 0: each against the
 * reference, and against each other. Sequences shorter than a partition,
 * exactly one, and several with a partial last one. */
START_TEST(test_split)
{
    static const int part[][2] = {{32, 16}, {64, 32}, {64, 8}};
    static const int sq[] = {1, 1, 4, 0, 2, 1}, sk[] = {200, 31, 64, 0, 129, 1};
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di > 0)
            continue;
        oclf_params off, on;
        memset(&off, 0, sizeof off);
        memset(&on, 0, sizeof on);
        oclf_params_set(&off, "PART", 0);
        oclf_params_set(&off, "BK", part[_i][1]);
        oclf_params_set(&on, "PART", part[_i][0]);
        oclf_params_set(&on, "BK", part[_i][1]);
        for (int opts = 0; opts < 2; opts++) {
            pcase c = {.dt = dtypes[di], .hq = 4, .hk = 2, .d = 40, .batch = 6, .bs = 16,
                       .sq = sq, .sk = sk, .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED};
            if (opts) /* every option: the merge adds the sinks once */
                option_set(10, &c);
            attn_result a;
            c.params = &off;
            run_seeded(&c, 91 + (uint64_t)opts, &a);
            c.params = &on;
            expect_rerun_same(&c, 91 + (uint64_t)opts, &a, "PART 0 against a split");
            attn_result_free(&a);
        }
    }
}
END_TEST

/* One long sequence (3000 keys) decoded and prefilled, split and not, and
 * with the defaults (the heuristic's choice). */
START_TEST(test_long)
{
    static const int sq[] = {1, 4}, sk[] = {3000, 2999};
    oclf_params split, none;
    memset(&split, 0, sizeof split);
    memset(&none, 0, sizeof none);
    oclf_params_set(&split, "PART", 256);
    /* (16 keys: a GPU class's default rows of head dim 64 leave no room in
     * its 48 KiB of local memory for 32) */
    oclf_params_set(&split, "BK", 16);
    oclf_params_set(&none, "PART", 0);
    const oclf_dtype dt = th_quick() ? OCLF_F32 : OCLF_BF16;
    pcase c = {.dt = dt, .hq = 8, .hk = 2, .d = 64, .batch = 2, .bs = 16, .sq = sq, .sk = sk,
               .causal = 1, .sinks = 1, .lse = 1, .path = OCLF_PATH_FUSED};
    attn_result a;
    c.params = &split;
    run_seeded(&c, 5, &a);
    c.params = &none;
    expect_rerun_same(&c, 5, &a, "long: split against none");
    c.params = NULL;
    expect_rerun_same(&c, 5, &a, "long: split against the defaults");
    attn_result_free(&a);
}
END_TEST

/* ---- the matrix-unit structure (STAGE 3) ---------------------------------
 * Forced, so that it runs cl/mma.h's emulation here; chunked prefill (more
 * keys than queries, a sequence of one query, one without any), head dims
 * 64 and 128, both cache layouts' alignments, NaN in the unused slots, and
 * the options. Small: the emulation synchronises at every product. */
START_TEST(test_mma)
{
    static const int sq[] = {37, 1, 0, 9}, sk[] = {45, 20, 3, 60};
    /* WGS, BK, head dim, block size, option set, cache aligned, NaN garbage */
    static const int cfg[][7] = {{16, 64, 64, 16, 1, 1, 0}, {16, 32, 128, 8, 10, 0, 1},
                                 {32, 32, 64, 16, 13, 0, 0}};
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "STAGE", 3);
    oclf_params_set(&p, "WGS", cfg[_i][0]);
    oclf_params_set(&p, "BK", cfg[_i][1]);
    pcase c = {.dt = _i % 2 ? OCLF_BF16 : OCLF_F16, .hq = 4, .hk = 2, .d = (size_t)cfg[_i][2],
               .batch = 4, .bs = (size_t)cfg[_i][3], .sq = sq, .sk = sk,
               .g = cfg[_i][6] ? GARBAGE_NAN : GARBAGE_LARGE, .path = OCLF_PATH_FUSED};
    option_set(cfg[_i][4], &c);
    c.params = &p;
    cache_aligned = cfg[_i][5];
    run_case(&c, NULL);
    cache_aligned = 0;
}
END_TEST

/* ---- the paths against each other, garbage, zero work --------------------- */

START_TEST(test_fused_unfused)
{
    const oclf_dtype dt = dtypes[_i];
    pcase c = {.dt = dt, .hq = 4, .hk = 2, .d = 40, .batch = MB, .bs = 4, .sq = msq, .sk = msk,
               .causal = 1, .softcap = 2.0f, .alibi = 1, .sinks = 1, .lse = 1};
    attn_result f;
    c.path = OCLF_PATH_FUSED;
    run_seeded(&c, 77, &f);
    c.path = OCLF_PATH_UNFUSED;
    expect_rerun_same(&c, 77, &f, "fused against unfused");
    attn_result_free(&f);
}
END_TEST

/* Unused slots, unused blocks and the table's spare entries hold NaN: no
 * key past seq_lens[b] may reach a row (0 x NaN is NaN). */
START_TEST(test_nan_garbage)
{
    static const int sq[] = {1, 3, 2}, sk[] = {13, 30, 0};
    oclf_params split;
    memset(&split, 0, sizeof split);
    oclf_params_set(&split, "PART", 16);
    oclf_params_set(&split, "BK", 8);
    for (int v = 0; v < 3; v++) {
        pcase c = {.dt = dtypes[v == 2 ? 1 : 0], .hq = 4, .hk = 2, .d = 16, .batch = 3,
                   .bs = 8, .sq = sq, .sk = sk, .causal = 1, .lse = 1, .g = GARBAGE_NAN,
                   .path = v == 1 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED,
                   .params = v == 2 ? &split : NULL};
        run_case(&c, NULL);
    }
}
END_TEST

START_TEST(test_empty)
{
    th_env *e = th_get();
    static const int sq[] = {0, 0}, sk[] = {5, 0};
    paged p;
    paged_build(&p, OCLF_F32, 2, 1, 4, 4, sq, sk, GARBAGE_LARGE);
    const oclf_kv_cache cache = paged_cache(&p);
    cl_mem m = th_alloc(64);
    oclf_heads h = {{m, 0, 0}, 1, 0};
    for (int pa = 0; pa < 2; pa++) {
        oclf_choice ch = th_choice(pa ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
        /* no sequences; sequences without queries (max_seqlen_q 0) */
        for (size_t batch = 0; batch < 3; batch += 2) {
            cl_event ev = NULL;
            TH_OK(oclf_attention_paged(e->ctx, e->queue, OCLF_F32, batch, 0, 0, p.max_blocks,
                                       (oclf_buf){p.mcuq, 0, 0}, (oclf_buf){p.mseq, 0, 0},
                                       paged_table(&p), h, &cache, h, NULL, &ch, 0, NULL, &ev));
            ck_assert_ptr_nonnull(ev);
            ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
            clReleaseEvent(ev);
        }
    }
    paged_check_unchanged(&p);
    clReleaseMemObject(m);
    paged_free(&p);
}
END_TEST

/* ---- bad arguments ------------------------------------------------------- */

typedef struct bad_env {
    paged p;
    cl_mem q, o, lse, small;
    void *hq, *ho;
    float *hl;
    size_t nq, no, nl;
} bad_env;

static void bad_check_untouched(bad_env *b)
{
    clFinish(th_get()->queue);
    void *got = malloc(b->no * 4 + b->nq * 4 + 4);
    th_download(b->o, got, b->no * 4);
    ck_assert_msg(memcmp(got, b->ho, b->no * 4) == 0, "a failing call wrote o");
    th_download(b->lse, got, b->nl * 4);
    ck_assert_msg(memcmp(got, b->hl, b->nl * 4) == 0, "a failing call wrote lse");
    th_download(b->q, got, b->nq * 4);
    ck_assert_msg(memcmp(got, b->hq, b->nq * 4) == 0, "a failing call wrote q");
    free(got);
    paged_check_unchanged(&b->p);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

/* Block ids outside [0, num_blocks) without `validate`: the fused kernel
 * reads no such block and leaves its keys out of the softmax, as if masked.
 * One query, K = 0 and V = 1 everywhere, two keys of one slot a block:
 * with the table {0, 99} only key 0 counts (o = 1, LSE 0; zeros read in
 * its place would give o = 0.5, LSE log 2); with {99, -1} no key counts (o
 * = 0, LSE -inf, as for a row that sees no key). The unfused path, which
 * reads the table on the host, rejects both calls and writes nothing. */
START_TEST(test_block_out_of_range)
{
    th_env *e = th_get();
    /* _i >= 3: the decode structure, unsplit and split */
    const oclf_dtype dt = dtypes[_i % 3];
    const size_t es = oclf_dtype_size(dt), d = 4;
    void *zeros = calloc(2 * d, es), *ones = malloc(2 * d * es), *sent = malloc(d * es);
    for (size_t i = 0; i < 2 * d; i++)
        oclf_ref_set(dt, ones, i, 1.0f);
    for (size_t i = 0; i < d; i++)
        oclf_ref_set(dt, sent, i, -7.0f);
    const int32_t cuq[2] = {0, 1}, lens[1] = {2};
    static const int32_t tables[2][2] = {{0, 99}, {99, -1}};
    cl_mem mq = th_upload(zeros, d * es), mk = th_upload(zeros, 2 * d * es);
    cl_mem mv = th_upload(ones, 2 * d * es), mcu = th_upload(cuq, sizeof cuq);
    cl_mem ml = th_upload(lens, sizeof lens);
    oclf_kv_cache kv = {.k = mk, .v = mv, .num_blocks = 2, .block_size = 1, .heads = 1,
                        .head_dim = d};
    const oclf_heads q = {{mq, 0, 0}, 1, 0};
    oclf_choice split = th_choice(OCLF_PATH_FUSED), whole = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&split.params, "PART", 1);
    if (_i >= 3) {
        whole.params = decode_params(32, 1, 0, 0);
        split.params = decode_params(32, 1, 1, 0);
    }
    const oclf_choice chs[] = {whole, split, th_choice(OCLF_PATH_UNFUSED)};
    for (int t = 0; t < 2; t++) {
        cl_mem mt = th_upload(tables[t], sizeof tables[t]);
        for (int c = 0; c < 3; c++) {
            const float lse0 = -7.0f;
            cl_mem mo = th_upload(sent, d * es), mlse = th_upload(&lse0, 4);
            const oclf_heads o = {{mo, 0, 0}, 1, 0};
            oclf_buf blse = {mlse, 0, 0};
            oclf_attention_options opt = OCLF_ATTENTION_OPTIONS_INIT;
            opt.lse = &blse;
            const oclf_status st = oclf_attention_paged(
                e->ctx, e->queue, dt, 1, 1, 1, 2, (oclf_buf){mcu, 0, 0}, (oclf_buf){ml, 0, 0},
                (oclf_buf){mt, 0, 0}, q, &kv, o, &opt, &chs[c], 0, NULL, NULL);
            char got[8 * 2];
            float lse;
            th_download(mo, got, d * es);
            th_download(mlse, &lse, 4);
            if (c == 2) {
                ck_assert_msg(st == OCLF_INVALID_ARGUMENT, "%s table %d unfused: %s",
                              oclf_dtype_name(dt), t, oclf_status_string(st));
                ck_assert_msg(strstr(oclf_last_error(e->ctx), "block_tables[0]") != NULL,
                              "unfused: '%s'", oclf_last_error(e->ctx));
                ck_assert_msg(memcmp(got, sent, d * es) == 0 && lse == -7.0f,
                              "unfused: a rejected call wrote its outputs");
            } else {
                ck_assert_msg(st == OCLF_SUCCESS, "%s: %s", oclf_dtype_name(dt),
                              oclf_last_error(e->ctx));
                for (size_t i = 0; i < d; i++)
                    ck_assert_msg(oclf_ref_get(dt, got, i) == (t ? 0.0f : 1.0f),
                                  "%s table %d choice %d: o[%zu] = %g", oclf_dtype_name(dt), t,
                                  c, i, (double)oclf_ref_get(dt, got, i));
                ck_assert_msg(t ? isinf(lse) && lse < 0 : fabsf(lse) < 1e-6f,
                              "%s table %d choice %d: lse %g", oclf_dtype_name(dt), t, c,
                              (double)lse);
            }
            clReleaseMemObject(mo), clReleaseMemObject(mlse);
        }
        clReleaseMemObject(mt);
    }
    clReleaseMemObject(mq), clReleaseMemObject(mk), clReleaseMemObject(mv);
    clReleaseMemObject(mcu), clReleaseMemObject(ml);
    free(zeros), free(ones), free(sent);
}
END_TEST

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    oclf_context *c = e->ctx;
    cl_command_queue qu = e->queue;
    /* 2 sequences: 1 query of 9 keys, 3 queries of 6 keys; Hq 4, Hk 2, D 8,
     * f32, blocks of 4 */
    static const int sq[] = {1, 3}, sk[] = {9, 6};
    const size_t T = 4, D = 8, HQ = 4, HK = 2;
    bad_env bb;
    th_seed(3);
    paged_build(&bb.p, OCLF_F32, 2, HK, D, 4, sq, sk, GARBAGE_LARGE);
    paged *p = &bb.p;
    bb.nq = T * HQ * D, bb.no = T * HQ * D, bb.nl = HQ * T;
    bb.hq = th_random(OCLF_F32, bb.nq, -1, 1);
    bb.ho = th_random(OCLF_F32, bb.no, -1, 1);
    bb.hl = th_random(OCLF_F32, bb.nl, -1, 1);
    bb.q = th_upload(bb.hq, bb.nq * 4);
    bb.o = th_upload(bb.ho, bb.no * 4);
    bb.lse = th_upload(bb.hl, bb.nl * 4);
    bb.small = th_alloc(8);
    float sl[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    cl_mem mslopes = th_upload(sl, sizeof sl);
    const oclf_kv_cache kv = paged_cache(p);
    oclf_heads q = {{bb.q, 0, 0}, HQ, 0}, o = {{bb.o, 0, 0}, HQ, 0};
    oclf_buf cq = {p->mcuq, 0, 0}, sl_ = {p->mseq, 0, 0}, bt = paged_table(p);
    oclf_buf lse = {bb.lse, 0, 0}, small = {bb.small, 0, 0}, slb = {mslopes, 0, 0};
    const size_t MX = p->max_blocks;
    oclf_attention_options opt = OCLF_ATTENTION_OPTIONS_INIT;
    opt.causal = 1;
    opt.lse = &lse;
    opt.alibi_slopes = &slb;
    oclf_attention_options bad;
    oclf_kv_cache kb;
#define CALL(ctx_, dt, q_, cache_, o_, cq_, sl__, bt_, mx, opts, ch)                               \
    oclf_attention_paged(ctx_, qu, dt, 2, T, 3, mx, cq_, sl__, bt_, q_, cache_, o_, opts, ch, 0,   \
                         NULL, NULL)

    /* the good call goes through (then o and lse are reset) */
    TH_OK(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &opt, NULL));
    clFinish(qu);
    clEnqueueWriteBuffer(qu, bb.o, CL_TRUE, 0, bb.no * 4, bb.ho, 0, NULL, NULL);
    clEnqueueWriteBuffer(qu, bb.lse, CL_TRUE, 0, bb.nl * 4, bb.hl, 0, NULL, NULL);

    ck_assert_int_eq(CALL(NULL, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &opt, NULL),
                     OCLF_INVALID_ARGUMENT);
    bad_check_untouched(&bb);
    EXPECT(CALL(c, (oclf_dtype)7, q, &kv, o, cq, sl_, bt, MX, &opt, NULL), OCLF_UNSUPPORTED,
           "dtype");
    /* the cache */
    EXPECT(CALL(c, OCLF_F32, q, NULL, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "cache");
    kb = kv, kb.head_dim = 0;
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "head_dim");
    kb = kv, kb.head_dim = 257;
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "head_dim");
    kb = kv, kb.num_blocks = 0;
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "num_blocks");
    kb = kv, kb.block_size = 0;
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "block_size");
    kb = kv, kb.heads = 0;
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "heads");
    kb = kv, kb.num_blocks = kv.num_blocks + 1; /* V runs past the buffer */
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "cache");
    kb = kv, kb.v_offset = kv.k_offset + D; /* K and V overlap */
    EXPECT(CALL(c, OCLF_F32, q, &kb, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "overlap");
    /* head counts and head dims: Hq % Hk, o's count, q's head stride below
     * the cache's head_dim (the call's head dim) */
    oclf_heads q3 = q, o3 = o;
    q3.count = 3, o3.count = 3;
    EXPECT(CALL(c, OCLF_F32, q3, &kv, o3, cq, sl_, bt, MX, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "multiple");
    oclf_heads o2 = o;
    o2.count = 2;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o2, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "heads");
    oclf_heads qh = q;
    qh.head_stride = D - 1;
    EXPECT(CALL(c, OCLF_F32, qh, &kv, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "head stride");
    oclf_heads oh = o;
    oh.head_stride = D - 1;
    EXPECT(CALL(c, OCLF_F32, q, &kv, oh, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "head stride");
    /* the block table: max_blocks 0, too small a buffer, a stride below
     * max_blocks; offsets and lengths too small */
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, 0, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "max_blocks");
    oclf_buf bts = bt;
    bts.offset = p->nbt - 2 * MX + 1;
    bts.stride = MX;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bts, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "block_tables");
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, small, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "block_tables");
    bts = bt;
    bts.stride = MX - 1;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bts, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "stride");
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, small, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "cu_seqlens_q");
    {
        cl_mem m = th_alloc(4);
        oclf_buf s1 = {m, 0, 0};
        EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, s1, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
               "seq_lens");
        clReleaseMemObject(m);
    }
    /* q and o too small */
    oclf_heads qs = q;
    qs.buf.mem = bb.small;
    EXPECT(CALL(c, OCLF_F32, qs, &kv, o, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "q");
    oclf_heads os = o;
    os.buf.offset = 1;
    EXPECT(CALL(c, OCLF_F32, q, &kv, os, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "o");
    /* overlaps: o on q, o on the cache (K, then V), o on the table and the
     * lengths; lse on o, on the cache, on q; slopes on lse */
    EXPECT(CALL(c, OCLF_F32, q, &kv, q, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    oclf_heads ok_ = {{p->mcache, p->koff, 0}, HQ, 0};
    EXPECT(CALL(c, OCLF_F32, q, &kv, ok_, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    oclf_heads ov = {{p->mcache, p->voff + 3, 0}, HQ, 0};
    EXPECT(CALL(c, OCLF_F32, q, &kv, ov, cq, sl_, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    {
        /* a table and lengths in o's buffer, past o's elements and then on them */
        const size_t n = bb.no + 64;
        void *h = calloc(n, 4);
        memcpy((char *)h + bb.no * 4, p->bt, 4 * (p->nbt < 64 ? p->nbt : 64));
        cl_mem m = th_upload(h, n * 4);
        oclf_heads om = {{m, 0, 0}, HQ, 0};
        oclf_buf btm = {m, bb.no - 1, p->bt_stride};
        EXPECT(CALL(c, OCLF_F32, q, &kv, om, cq, sl_, btm, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
               "overlaps");
        oclf_buf slm = {m, bb.no - 1, 0};
        EXPECT(CALL(c, OCLF_F32, q, &kv, om, cq, slm, bt, MX, &opt, NULL), OCLF_INVALID_ARGUMENT,
               "overlaps");
        clReleaseMemObject(m);
        free(h);
    }
    oclf_buf lo = {bb.o, 0, 0};
    bad = opt, bad.lse = &lo;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    oclf_buf lc = {p->mcache, p->voff, 0};
    bad = opt, bad.lse = &lc;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    oclf_buf lq = {bb.q, 0, 0};
    bad = opt, bad.lse = &lq;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    {
        /* lse on the block table's entries (a table in a buffer of its own
         * large enough for both) */
        int32_t *h = calloc(p->nbt + 64, 4);
        memcpy(h, p->bt, p->nbt * 4);
        cl_mem m = th_upload(h, (p->nbt + 64) * 4);
        oclf_buf btm = {m, p->bt_off, p->bt_stride}, lbt = {m, 2, 0};
        bad = opt, bad.lse = &lbt;
        EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, btm, MX, &bad, NULL),
               OCLF_INVALID_ARGUMENT, "overlaps");
        clReleaseMemObject(m);
        free(h);
    }
    bad = opt, bad.alibi_slopes = &lse;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "overlaps");
    bad = opt, bad.lse = &small;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "lse");
    /* options as oclf_attention's */
    bad = opt, bad.window = 1, bad.window_left = -2, bad.window_right = 0;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "window");
    bad = opt, bad.causal = 2;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "causal");
    bad = opt, bad.scale = INFINITY;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "finite");
    bad = opt, bad.size = 3;
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &bad, NULL), OCLF_INVALID_ARGUMENT,
           "options");
    /* kernel parameters: PART below 0 or above 2^24, BK out of range */
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "PART", (1 << 24) + 1);
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &opt, &ch), OCLF_INVALID_ARGUMENT,
           "PART");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "PART", -32);
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &opt, &ch), OCLF_INVALID_ARGUMENT,
           "PART");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "BK", 65);
    EXPECT(CALL(c, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &opt, &ch), OCLF_INVALID_ARGUMENT,
           "BK");

    /* data the host checks: under `validate` on the fused path, always on
     * the unfused one. A used block id out of range (each side), a length
     * beyond max_blocks x block_size. */
    oclf_context *vctx = th_validate_context();
    for (int i = 0; i < 3; i++) {
        int32_t *tb = malloc(p->nbt * 4 + 4);
        memcpy(tb, p->bt, p->nbt * 4);
        int32_t lens[2] = {p->seq[0], p->seq[1]};
        const char *word = "block_tables[1][1]";
        if (i == 0) /* sequence 1's second block (its keys 4..5 are used) */
            tb[p->bt_off + p->bt_stride + 1] = (int32_t)p->nblocks;
        else if (i == 1)
            tb[p->bt_off + p->bt_stride + 0] = -1, word = "block_tables[1][0]";
        else
            lens[1] = (int32_t)(MX * p->bs + 1), word = "seq_lens";
        cl_mem mt = th_upload(tb, p->nbt * 4), ml = th_upload(lens, sizeof lens);
        oclf_buf bbt = {mt, p->bt_off, p->bt_stride}, bl = {ml, 0, 0};
        for (int pa = 0; pa < 2; pa++) {
            oclf_choice pc = th_choice(pa ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
            oclf_context *cx = pa ? c : vctx;
            oclf_status st = CALL(cx, OCLF_F32, q, &kv, o, cq, bl, bbt, MX, &opt, &pc);
            ck_assert_msg(st == OCLF_INVALID_ARGUMENT, "case %d path %d: %s", i, pa,
                          oclf_status_string(st));
            const char *msg = oclf_last_error(cx);
            ck_assert_msg(strncmp(msg, "oclf_attention_paged", 20) == 0 &&
                              strstr(msg, "sequence 1") && strstr(msg, word),
                          "case %d path %d: message '%s' does not mention '%s'", i, pa, msg,
                          word);
            bad_check_untouched(&bb);
        }
        /* without `validate`, the fused path reads no data on the host and
         * never reads such a block: the call succeeds */
        if (i < 2) {
            oclf_choice pc = th_choice(OCLF_PATH_FUSED);
            TH_OK(CALL(c, OCLF_F32, q, &kv, o, cq, bl, bbt, MX, &opt, &pc));
            clFinish(qu);
            clEnqueueWriteBuffer(qu, bb.o, CL_TRUE, 0, bb.no * 4, bb.ho, 0, NULL, NULL);
            clEnqueueWriteBuffer(qu, bb.lse, CL_TRUE, 0, bb.nl * 4, bb.hl, 0, NULL, NULL);
        }
        clReleaseMemObject(mt), clReleaseMemObject(ml);
        free(tb);
    }
    /* the good call under `validate` passes */
    TH_OK(CALL(vctx, OCLF_F32, q, &kv, o, cq, sl_, bt, MX, &opt, NULL));
    clFinish(qu);
    oclf_context_destroy(vctx);
#undef CALL
    cl_mem rel[] = {bb.q, bb.o, bb.lse, bb.small, mslopes};
    for (int i = 0; i < 5; i++)
        clReleaseMemObject(rel[i]);
    free(bb.hq), free(bb.ho), free(bb.hl);
    paged_free(&bb.p);
}
END_TEST

/* ---- traffic under oclgrind (tests/oclgrind_run.py traffic) --------------- */

/* One fused decode call per dtype: 2 sequences of 40 (a partial last
 * block) and 64 keys in blocks of 16, Hq 8, Hk 2, D 32. The minimum: the
 * visible K and V once (each KV-head group reads them once for all its
 * query heads), q read and o written once, offsets, lengths and the
 * blocks' table entries once per KV-head group. */
static int traffic(void)
{
    th_env *e = th_get();
    static const int sq[] = {1, 1}, sk[] = {40, 64};
    const size_t hq = 8, hk = 2, d = 32;
    oclf_params fp;
    memset(&fp, 0, sizeof fp);
    oclf_params_set(&fp, "PART", 0);
    oclf_params_set(&fp, "BK", 16);
    oclf_params_set(&fp, "WGS", 4);
    /* the structure that stages each block once for the group (a CPU's
     * rows reread it from L1 instead, which the simulator counts as
     * global traffic) */
    oclf_params_set(&fp, "STAGE", 1);
    for (size_t di = 0; di < 3; di++) {
        const oclf_dtype dt = dtypes[di];
        const size_t es = oclf_dtype_size(dt);
        paged p;
        paged_build(&p, dt, 2, hk, d, 16, sq, sk, GARBAGE_LARGE);
        const size_t tq = p.tq;
        void *hq_ = th_random(dt, tq * hq * d, -1, 1);
        cl_mem mq = th_upload(hq_, tq * hq * d * es), mo = th_alloc(tq * hq * d * es);
        oclf_heads q = {{mq, 0, 0}, hq, 0}, o = {{mo, 0, 0}, hq, 0};
        const oclf_kv_cache cache = paged_cache(&p);
        double blocks = 0;
        for (int b = 0; b < 2; b++)
            blocks += (sk[b] + 15) / 16;
        const double min = 2.0 * (double)p.tk * hk * d * es + 2.0 * tq * hq * d * es +
                           hk * (4.0 * (p.batch + 1) + 4.0 * p.batch + 4.0 * blocks);
        /* (fused only: the unfused composition is measured against it by
         * the op's descriptor in oclgrind-traffic) */
        /* pa 1: the decode structure with the KV group's 4 query heads in
         * one work-group; pa 2: its one-work-item form (a CPU's) with a
         * query's 8 heads in one */
        for (int pa = 0; pa < 3; pa++) {
            oclf_choice ch = th_choice(OCLF_PATH_FUSED);
            ch.params = pa == 2 ? decode_params(1, 8, 0, 0) : pa ? decode_params(32, 4, 0, 0) : fp;
            clFinish(e->queue);
            printf("@@ begin attention_paged%s %s fused 2x1x64x8x2x32 min=%.0f bounded=1\n",
                   pa == 2 ? "_decode_wgs1" : pa ? "_decode" : "", oclf_dtype_name(dt), min);
            fflush(stdout);
            oclf_status st = oclf_attention_paged(
                e->ctx, e->queue, dt, 2, tq, 1, p.max_blocks, (oclf_buf){p.mcuq, 0, 0},
                (oclf_buf){p.mseq, 0, 0}, paged_table(&p), q, &cache, o, NULL, &ch, 0, NULL, NULL);
            clFinish(e->queue);
            fflush(stdout);
            printf("@@ end\n");
            if (st != OCLF_SUCCESS)
                printf("FAIL attention_paged %s: %s\n", oclf_dtype_name(dt),
                       oclf_last_error(e->ctx));
            fflush(stdout);
            if (st != OCLF_SUCCESS)
                return 1;
        }
        free(hq_);
        clReleaseMemObject(mq), clReleaseMemObject(mo);
        paged_free(&p);
    }
    return 0;
}

/* (inside a check run: the harness's helpers assert) */
START_TEST(test_traffic) { ck_assert_int_eq(traffic(), 0); }
END_TEST

static Suite *paged_suite(void)
{
    Suite *s = suite_create("attention_paged");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_options, 0, N_OPTION_SETS);
    tcase_add_test(t, test_bk_with_default_wgs);
    tcase_add_loop_test(t, test_dims, 0, 7);
    tcase_add_loop_test(t, test_heads, 0, 6);
    tcase_add_loop_test(t, test_block_sizes, 0, 3);
    tcase_add_test(t, test_decode_prefill);
    tcase_add_loop_test(t, test_structures, 0, 5);
    tcase_add_loop_test(t, test_split, 0, 3);
    tcase_add_test(t, test_long);
    tcase_add_loop_test(t, test_fused_unfused, 0, 3);
    tcase_add_test(t, test_nan_garbage);
    tcase_add_test(t, test_empty);
    tcase_add_loop_test(t, test_block_out_of_range, 0, 6);
    tcase_add_loop_test(t, test_decode_structure, 0, 16);
    tcase_add_loop_test(t, test_decode_against_staged, 0, 3);
    tcase_add_loop_test(t, test_decode_cpu_form, 0, 8);
    tcase_add_loop_test(t, test_decode_default, 0, 3);
    suite_add_tcase(s, t);
    TCase *mu = tcase_create("matrix_units");
    tcase_set_timeout(mu, 0);
    tcase_add_loop_test(mu, test_mma, 0, th_quick() ? 1 : 3);
    suite_add_tcase(s, mu);
    TCase *b = tcase_create("arguments");
    tcase_set_timeout(b, 0);
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "traffic") == 0) {
        Suite *s = suite_create("attention_paged traffic");
        TCase *t = tcase_create("traffic");
        tcase_set_timeout(t, 0);
        tcase_add_test(t, test_traffic);
        suite_add_tcase(s, t);
        return th_run_suite(s);
    }
    return th_run_suite(paged_suite());
}
