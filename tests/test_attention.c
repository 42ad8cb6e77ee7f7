/*
 * Attention against the fp64 reference (lib/ref/ref_attention.c): every
 * mask and score option alone and together, head dims 1 to 256, MHA, GQA
 * and MQA, Sq != Sk, varlen batches with empty and 1-token sequences, rows
 * that see no key, q/k/v as views of one packed qkv, explicit kernel
 * structures, dropout's mask (through the reference, on both paths), fused
 * against unfused, and every bad argument.
 *
 * Every check covers the whole output buffers: computed elements within
 * the tolerance of the contract (tol (1 + max |v|) per row, LSE within tol),
 * every padding element bit for bit unchanged.
 */
#include "attention_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): fewer cases. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

typedef struct acase {
    oclf_dtype dt;
    size_t hq, hk, d, batch;
    const int *sq, *sk; /* per sequence */
    int causal, window;
    int64_t left, right;
    float scale, softcap;
    int alibi, sinks, lse;
    int packed; /* q, k, v as views of one qkv buffer (needs sq == sk) */
    int aligned; /* offsets and strides of q, k and v in whole 16-byte units */
    float dropout;
    uint64_t seed, doff;
    oclf_path path;
    const oclf_params *params; /* NULL: the defaults */
} acase;

/* Runs one case, checks it against the reference and the padding, and
 * fills *res (may be NULL). */
static void run_case(const acase *c, attn_result *res)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dt;
    const size_t es = oclf_dtype_size(dt), d = c->d, hq = c->hq, hk = c->hk;
    int32_t *cuq = calloc(c->batch + 1, 4), *cuk = calloc(c->batch + 1, 4);
    size_t max_sq = 0;
    for (size_t b = 0; b < c->batch; b++) {
        cuq[b + 1] = cuq[b] + c->sq[b];
        cuk[b + 1] = cuk[b] + c->sk[b];
        max_sq = (size_t)c->sq[b] > max_sq ? (size_t)c->sq[b] : max_sq;
    }
    const size_t tq = (size_t)cuq[c->batch], tk = (size_t)cuk[c->batch];

    /* inputs: one packed qkv, or three strided buffers with offsets */
    oclf_ref_heads rq, rk, rv;
    oclf_heads q, k, v;
    void *hin[3] = {NULL, NULL, NULL};
    cl_mem min[3] = {NULL, NULL, NULL};
    if (c->packed) {
        ck_assert_uint_eq(tq, tk);
        const size_t w = (hq + 2 * hk) * d + 3, off = 2, n = off + tq * w + 1;
        hin[0] = th_random(dt, n, -1, 1);
        min[0] = th_upload(hin[0], n * es);
        q = (oclf_heads){{min[0], off, w}, hq, d};
        k = (oclf_heads){{min[0], off + hq * d, w}, hk, d};
        v = (oclf_heads){{min[0], off + (hq + hk) * d, w}, hk, 0};
        rq = (oclf_ref_heads){hin[0], off, w, d};
        rk = (oclf_ref_heads){hin[0], off + hq * d, w, d};
        rv = (oclf_ref_heads){hin[0], off + (hq + hk) * d, w, d};
    } else {
        const size_t toks[3] = {tq, tk, tk}, heads[3] = {hq, hk, hk};
        oclf_heads *hv[3] = {&q, &k, &v};
        oclf_ref_heads *rh[3] = {&rq, &rk, &rv};
        for (int i = 0; i < 3; i++) {
            const size_t u = c->aligned ? 16 / es : 1; /* (the padding in 16-byte units) */
            const size_t hs = d + u * (size_t)i, ts = heads[i] * hs + u, off = u * (3 + (size_t)i);
            const size_t n = off + toks[i] * ts + 1;
            hin[i] = th_random(dt, n, -1, 1);
            min[i] = th_upload(hin[i], n * es);
            *hv[i] = (oclf_heads){{min[i], off, ts}, heads[i], hs};
            *rh[i] = (oclf_ref_heads){hin[i], off, ts, hs};
        }
    }
    /* output with padding between heads and tokens */
    attn_out out;
    attn_out_make(&out, dt, tq, hq, d);
    const oclf_heads o = attn_out_heads(&out);
    oclf_buf lse = attn_out_lse(&out);
    float *slopes = th_random(OCLF_F32, hq, 0.05f, 0.5f);
    float *sinks = th_random(OCLF_F32, hq, -1.0f, 2.0f);
    cl_mem msl = th_upload(slopes, hq * 4), msi = th_upload(sinks, hq * 4);
    oclf_buf bsl = {msl, 0, 0}, bsi = {msi, 0, 0};
    cl_mem mcq = th_upload(cuq, (c->batch + 1) * 4), mck = th_upload(cuk, (c->batch + 1) * 4);

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
    TH_OK(oclf_attention(e->ctx, e->queue, dt, c->batch, d, tq, tk, max_sq,
                         (oclf_buf){mcq, 0, 0}, (oclf_buf){mck, 0, 0}, q, k,
                         v, o, &opt, &ch, 0, NULL, NULL));
    attn_out_read(&out);

    oclf_ref_attention_args a;
    memset(&a, 0, sizeof a);
    a.dtype = dt, a.batch = c->batch, a.hq = hq, a.hk = hk, a.d = d;
    a.cu_q = cuq, a.cu_k = cuk, a.q = rq, a.k = rk, a.v = rv;
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
    size_t bad = oclf_ref_attention_compare(dt, out.go, out.ooff, out.ots, out.ohs, tq, hq, d, want,
                                            vmax, &first, &worst);
    ck_assert_msg(bad == 0,
                  "%s %s d=%zu hq=%zu hk=%zu: %zu outputs wrong, first %zu (want %g), max err %g",
                  oclf_dtype_name(dt), c->path == OCLF_PATH_UNFUSED ? "unfused" : "fused", d, hq,
                  hk, bad, first, want[first], worst);
    /* padding of o, and the whole of lse when not asked for */
    attn_check_o_padding(&out);
    attn_check_lse(&out, c->lse, wl);
    /* a row with no key and no sink: exactly 0 */
    attn_check_no_key_rows(&out, wl);
    if (res) {
        attn_result_keep(&out, vmax, res);
        vmax = NULL;
    }
    free(vmax), free(want), free(wl);
    attn_out_free(&out);
    free(slopes), free(sinks), free(cuq), free(cuk);
    for (int i = 0; i < 3; i++) {
        free(hin[i]);
        if (min[i])
            clReleaseMemObject(min[i]);
    }
    cl_mem rel[] = {msl, msi, mcq, mck};
    for (int i = 0; i < 4; i++)
        clReleaseMemObject(rel[i]);
}

/* A varlen batch: an empty sequence, a 1-token one, Sq < Sk, Sq > Sk (rows
 * that see no key under the causal mask), Sq = Sk, keys without queries. */
static const int vsq[] = {5, 0, 1, 7, 4, 0};
static const int vsk[] = {9, 3, 1, 3, 4, 0};
#define VB 6

/* ---- each option alone and together -------------------------------------- */

/* The option sets of test_options, by index. */
static void option_set(int i, acase *c)
{
    switch (i) {
    case 0: break;                                          /* none */
    case 1: c->causal = 1; break;
    case 2: c->window = 1, c->left = 2, c->right = 1; break; /* window, both sides */
    case 3: c->window = 1, c->left = 3, c->right = -1; break;
    case 4: c->window = 1, c->left = -1, c->right = 0; break; /* causal as a window */
    case 5: c->softcap = 0.7f, c->scale = 2.0f; break;       /* softcap bites */
    case 6: c->alibi = 1; break;
    case 7: c->sinks = 1; break;
    case 8: c->lse = 1; break;
    case 9: c->scale = 0.3f; break;
    case 10: /* everything: causal with a window, softcap, ALiBi, sinks, LSE */
        c->causal = 1, c->window = 1, c->left = 2, c->right = 3;
        c->softcap = 1.5f, c->alibi = 1, c->sinks = 1, c->lse = 1;
        break;
    case 11: c->causal = 1, c->sinks = 1, c->lse = 1; break; /* no-key rows get the sink */
    case 13: /* dropout: a seed with both words set, an offset that carries
              * into the counter's top word, the LSE before dropout */
        c->dropout = 0.3f, c->seed = 0x123456789abcdefull, c->doff = 0xfffffffeull, c->lse = 1;
        break;
    case 14: /* dropout with everything else */
        c->causal = 1, c->window = 1, c->left = 2, c->right = 3;
        c->softcap = 1.5f, c->alibi = 1, c->sinks = 1, c->lse = 1;
        c->dropout = 0.5f, c->seed = 42, c->doff = 7;
        break;
    default: c->causal = 1, c->window = 1, c->left = 0, c->right = 0, c->lse = 1; break;
    }
}
#define N_OPTION_SETS 15

START_TEST(test_options)
{
    const int set = _i;
    for (int p = 0; p < 2; p++)
        for (size_t di = 0; di < 3; di++) {
            if (th_quick() && di > 0)
                continue;
            acase c = {.dt = dtypes[di], .hq = 4, .hk = 2, .d = 24, .batch = VB, .sq = vsq,
                       .sk = vsk, .path = p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
            option_set(set, &c);
            run_case(&c, NULL);
        }
}
END_TEST

/* ---- head dims and head ratios ------------------------------------------- */

START_TEST(test_dims)
{
    static const size_t dims[] = {1, 3, 64, 80, 96, 128, 256};
    const size_t d = dims[_i];
    static const int sq[] = {3, 6}, sk[] = {5, 6};
    for (size_t di = 0; di < 3; di++) {
        if (th_quick() && di > 0)
            continue;
        acase c = {.dt = dtypes[di], .hq = 4, .hk = 1, .d = d, .batch = 2, .sq = sq, .sk = sk,
                   .causal = 1, .lse = 1, .path = OCLF_PATH_FUSED};
        run_case(&c, NULL);
        if (di == 0 || d == 80) {
            c.path = OCLF_PATH_UNFUSED;
            run_case(&c, NULL);
        }
    }
}
END_TEST

START_TEST(test_heads)
{
    /* MHA, GQA 4 (two groups), MQA with 5 query heads, GQA 2 */
    static const size_t heads[][2] = {{3, 3}, {8, 2}, {5, 1}, {6, 3}};
    for (int p = 0; p < 2; p++) {
        acase c = {.dt = OCLF_F32, .hq = heads[_i][0], .hk = heads[_i][1], .d = 16,
                   .batch = VB, .sq = vsq, .sk = vsk, .causal = 1, .alibi = 1, .lse = 1,
                   .path = p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
        run_case(&c, NULL);
    }
}
END_TEST

/* q, k and v as views of one packed qkv (self-attention, Sq = Sk). */
START_TEST(test_packed_qkv)
{
    static const int s[] = {6, 1, 0, 9};
    for (size_t di = 0; di < 3; di++)
        for (int p = 0; p < 2; p++) {
            acase c = {.dt = dtypes[di], .hq = 4, .hk = 2, .d = 32, .batch = 4, .sq = s,
                       .sk = s, .causal = 1, .packed = 1, .lse = 1,
                       .path = p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
            run_case(&c, NULL);
        }
}
END_TEST

/* Explicit structures: a block of one key, blocks that end inside the
 * sequence, one row a group, a group wider than a head group's rows, rows
 * in private and in local memory. */
START_TEST(test_structures)
{
    /* WGS, BK, VEC, ACC, STAGE */
    static const int cfg[][5] = {{1, 1, 1, 0, 1}, {4, 3, 4, 0, 1}, {16, 64, 16, 0, 1},
                                 {2, 5, 2, 1, 1}, {64, 8, 8, 1, 1}, {4, 3, 4, 0, 0},
                                 {8, 32, 16, 0, 0}, {2, 5, 2, 1, 0}};
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "WGS", cfg[_i][0]);
    oclf_params_set(&p, "BK", cfg[_i][1]);
    oclf_params_set(&p, "VEC", cfg[_i][2]);
    oclf_params_set(&p, "ACC", cfg[_i][3]);
    oclf_params_set(&p, "STAGE", cfg[_i][4]);
    for (size_t di = 0; di < 3; di++) {
        acase c = {.dt = dtypes[di], .hq = 6, .hk = 2, .d = 20, .batch = VB, .sq = vsq,
                   .sk = vsk, .causal = 1, .window = 1, .left = 4, .right = 0, .sinks = 1,
                   .lse = 1, .path = OCLF_PATH_FUSED, .params = &p};
        run_case(&c, NULL);
        /* dropout's mask does not depend on the structure */
        c.dropout = 0.25f, c.seed = 0xfeedull << 32 | 3, c.doff = 11;
        run_case(&c, NULL);
    }
}
END_TEST

/* The two paths against each other, within the same tolerances. */
START_TEST(test_fused_unfused)
{
    const oclf_dtype dt = dtypes[_i];
    acase c = {.dt = dt, .hq = 4, .hk = 2, .d = 40, .batch = VB, .sq = vsq, .sk = vsk,
               .causal = 1, .softcap = 2.0f, .alibi = 1, .sinks = 1, .lse = 1};
    attn_result f, u;
    c.path = OCLF_PATH_FUSED;
    th_seed(77); /* the same inputs for both */
    run_case(&c, &f);
    c.path = OCLF_PATH_UNFUSED;
    th_seed(77);
    run_case(&c, &u);
    attn_expect_same(dt, c.hq, c.d, &f, &u, "fused against unfused");
    attn_result_free(&f);
    attn_result_free(&u);
}
END_TEST

/* ---- the matrix-unit structure (STAGE 3) ---------------------------------
 * Forced here, where it runs cl/mma.h's emulation (the whole kernel: the
 * fragment loads, the tile loops, the softmax on the fragments). The
 * emulation synchronises the work-group at every product, so the cases are
 * small and each covers several things at once: f16 and bf16, head dims 64
 * and 128, GQA, a varlen batch whose sequences are no multiple of the
 * tiles (odd lengths, one row, none, more queries than keys), every option,
 * and K and V read by 16-byte loads (the aligned build) or element by
 * element. */
static const int msq[] = {37, 0, 1, 20, 9}, msk[] = {45, 3, 1, 20, 2};

START_TEST(test_mma)
{
    /* WGS (rows), BK, head dim, option set of test_options, aligned */
    static const int cfg[][5] = {{16, 32, 64, 1, 0}, {16, 32, 64, 0, 0}, {16, 32, 128, 10, 1},
                                 {64, 32, 64, 2, 0},  {16, 32, 128, 5, 0}, {16, 32, 64, 6, 0},
                                 {16, 32, 64, 7, 0},  {16, 64, 64, 11, 1}, {16, 32, 64, 14, 0},
                                 {32, 32, 64, 3, 0}};
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "STAGE", 3);
    oclf_params_set(&p, "WGS", cfg[_i][0]);
    oclf_params_set(&p, "BK", cfg[_i][1]);
    acase c = {.dt = _i % 2 ? OCLF_BF16 : OCLF_F16, .hq = 4, .hk = 2, .d = (size_t)cfg[_i][2],
               .batch = 5, .sq = msq, .sk = msk, .aligned = cfg[_i][4],
               .path = OCLF_PATH_FUSED, .params = &p};
    option_set(cfg[_i][3], &c);
    run_case(&c, NULL);
}
END_TEST

/* ---- zero work -------------------------------------------------------------*/

START_TEST(test_empty)
{
    th_env *e = th_get();
    int32_t zeros[3] = {0, 0, 0};
    cl_mem cu = th_upload(zeros, sizeof zeros), m = th_alloc(64);
    oclf_heads h = {{m, 0, 0}, 1, 0};
    oclf_buf b = {cu, 0, 0};
    for (int p = 0; p < 2; p++) {
        cl_event ev = NULL;
        oclf_choice ch = th_choice(p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
        /* no sequences, and sequences with no tokens */
        TH_OK(oclf_attention(e->ctx, e->queue, OCLF_F32, 0, 4, 0, 0, 0, b, b, h, h, h, h, NULL,
                             &ch, 0, NULL, &ev));
        ck_assert_ptr_nonnull(ev);
        ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
        clReleaseEvent(ev);
        TH_OK(oclf_attention(e->ctx, e->queue, OCLF_F32, 2, 4, 0, 0, 0, b, b, h, h, h, h, NULL,
                             &ch, 0, NULL, &ev));
        ck_assert_ptr_nonnull(ev);
        ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
        clReleaseEvent(ev);
    }
    clReleaseMemObject(cu), clReleaseMemObject(m);
}
END_TEST

/* ---- bad arguments ------------------------------------------------------- */

typedef struct bad_env {
    cl_mem qkv, o, lse, cuq, cuk, slopes, small;
    void *hqkv, *ho;
    float *hl;
    size_t nqkv, no, nl;
} bad_env;

static void bad_check_untouched(bad_env *b)
{
    clFinish(th_get()->queue);
    void *got = malloc(b->nqkv * 4);
    th_download(b->qkv, got, b->nqkv * 4);
    ck_assert_msg(memcmp(got, b->hqkv, b->nqkv * 4) == 0, "a failing call wrote qkv");
    th_download(b->o, got, b->no * 4);
    ck_assert_msg(memcmp(got, b->ho, b->no * 4) == 0, "a failing call wrote o");
    th_download(b->lse, got, b->nl * 4);
    ck_assert_msg(memcmp(got, b->hl, b->nl * 4) == 0, "a failing call wrote lse");
    free(got);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    oclf_context *c = e->ctx;
    cl_command_queue qu = e->queue;
    /* 2 sequences of 3 tokens; Hq 4, Hk 2, D 8, f32, packed qkv [6, 64] */
    const size_t T = 6, D = 8, HQ = 4, HK = 2, W = (HQ + 2 * HK) * D;
    bad_env bb;
    bb.nqkv = T * W, bb.no = T * HQ * D, bb.nl = HQ * T;
    bb.hqkv = th_random(OCLF_F32, bb.nqkv, -1, 1);
    bb.ho = th_random(OCLF_F32, bb.no, -1, 1);
    bb.hl = th_random(OCLF_F32, bb.nl, -1, 1);
    bb.qkv = th_upload(bb.hqkv, bb.nqkv * 4);
    bb.o = th_upload(bb.ho, bb.no * 4);
    bb.lse = th_upload(bb.hl, bb.nl * 4);
    const int32_t cu[3] = {0, 3, 6};
    bb.cuq = th_upload(cu, sizeof cu);
    bb.cuk = th_upload(cu, sizeof cu);
    float sl[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    bb.slopes = th_upload(sl, sizeof sl);
    bb.small = th_alloc(8);
    oclf_heads q = {{bb.qkv, 0, W}, HQ, 0}, k = {{bb.qkv, HQ * D, W}, HK, 0};
    oclf_heads v = {{bb.qkv, (HQ + HK) * D, W}, HK, 0}, o = {{bb.o, 0, 0}, HQ, 0};
    oclf_buf cq = {bb.cuq, 0, 0}, ck = {bb.cuk, 0, 0}, lse = {bb.lse, 0, 0};
    oclf_buf small = {bb.small, 0, 0}, slb = {bb.slopes, 0, 0};
    oclf_attention_options opt = OCLF_ATTENTION_OPTIONS_INIT;
    opt.lse = &lse;
    opt.alibi_slopes = &slb;
    oclf_attention_options bad;
#define CALL(dt, d, q_, k_, v_, o_, cq_, ck_, opts)                                           \
    oclf_attention(c, qu, dt, 2, d, T, T, 3, cq_, ck_, q_, k_, v_, o_, opts, NULL, 0, NULL, NULL)

    /* the good call goes through (then the buffers are reset) */
    TH_OK(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &opt));
    clFinish(qu);
    clEnqueueWriteBuffer(qu, bb.o, CL_TRUE, 0, bb.no * 4, bb.ho, 0, NULL, NULL);
    clEnqueueWriteBuffer(qu, bb.lse, CL_TRUE, 0, bb.nl * 4, bb.hl, 0, NULL, NULL);

    ck_assert_int_eq(oclf_attention(NULL, qu, OCLF_F32, 2, D, T, T, 3, cq, ck, q, k, v, o, NULL,
                                    NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    bad_check_untouched(&bb);
    EXPECT(CALL((oclf_dtype)7, D, q, k, v, o, cq, ck, &opt), OCLF_UNSUPPORTED, "dtype");
    EXPECT(CALL(OCLF_F32, 0, q, k, v, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "head_dim");
    EXPECT(CALL(OCLF_F32, 257, q, k, v, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "head_dim");
    /* Hq % Hk */
    oclf_heads k3 = k;
    k3.count = 3;
    const oclf_heads v3 = k3;
    EXPECT(CALL(OCLF_F32, D, q, k3, v3, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "multiple");
    oclf_heads v1 = v;
    v1.count = 1;
    EXPECT(CALL(OCLF_F32, D, q, k, v1, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "heads");
    oclf_heads o2 = o;
    o2.count = 2;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o2, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "heads");
    oclf_heads q0 = q;
    q0.count = 0;
    EXPECT(CALL(OCLF_F32, D, q0, k, v, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "head count");
    oclf_heads qh = q;
    qh.head_stride = D - 1;
    EXPECT(CALL(OCLF_F32, D, qh, k, v, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "head stride");
    oclf_heads qt = q;
    qt.buf.stride = HQ * D - 1;
    EXPECT(CALL(OCLF_F32, D, qt, k, v, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "stride");
    /* buffers too small: q, o, offsets, lse, slopes */
    oclf_heads qs = q;
    qs.buf.mem = bb.small;
    EXPECT(CALL(OCLF_F32, D, qs, k, v, o, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "q");
    oclf_heads os = o;
    os.buf.offset = 1;
    EXPECT(CALL(OCLF_F32, D, q, k, v, os, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "o");
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, small, ck, &opt), OCLF_INVALID_ARGUMENT, "cu_seqlens_q");
    oclf_buf cko = {bb.cuk, 1, 0};
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, cko, &opt), OCLF_INVALID_ARGUMENT, "cu_seqlens_k");
    bad = opt;
    bad.lse = &small;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "lse");
    bad = opt;
    bad.alibi_slopes = &small;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "alibi_slopes");
    bad = opt;
    bad.sinks = &small;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "sinks");
    /* outputs overlapping inputs: o on q's heads, o on k's, lse on q, o on
     * the offsets, lse on o */
    oclf_heads oq = {{bb.qkv, 0, W}, HQ, 0};
    EXPECT(CALL(OCLF_F32, D, q, k, v, oq, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "overlaps");
    oclf_heads ok = {{bb.qkv, HQ * D, W}, HQ, D / 2};
    ok.head_stride = D;
    ok.count = 2;
    oclf_heads q2 = {{bb.qkv, 0, W}, 2, 0};
    EXPECT(CALL(OCLF_F32, D, q2, k, v, ok, cq, ck, &opt), OCLF_INVALID_ARGUMENT, "overlaps");
    oclf_buf lq = {bb.qkv, 0, 0};
    bad = opt;
    bad.lse = &lq;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "overlaps");
    oclf_buf lo = {bb.o, 0, 0};
    bad = opt;
    bad.lse = &lo;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "overlaps");
    bad = opt;
    bad.alibi_slopes = &lse; /* slopes read from the LSE's own bytes */
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "overlaps");
    oclf_buf co = {bb.o, 0, 0};
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, co, ck, &opt), OCLF_INVALID_ARGUMENT, "overlaps");
    /* options: window sides, flags, scale, softcap, size */
    bad = opt;
    bad.window = 1, bad.window_left = -2, bad.window_right = 0;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "window");
    bad = opt;
    bad.window = 1, bad.window_left = 0, bad.window_right = -5;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "window");
    bad = opt;
    bad.causal = 2;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "causal");
    bad = opt;
    bad.window = -1;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "window");
    bad = opt;
    bad.scale = INFINITY;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "finite");
    bad = opt;
    bad.softcap = NAN;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "finite");
    const float bad_p[] = {1.0f, -0.25f, NAN};
    for (int i = 0; i < 3; i++) {
        bad = opt;
        bad.dropout_p = bad_p[i];
        EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "dropout_p");
    }
    bad = opt;
    bad.size = 3;
    EXPECT(CALL(OCLF_F32, D, q, k, v, o, cq, ck, &bad), OCLF_INVALID_ARGUMENT, "options");
    /* kernel parameters */
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "BK", 65);
    EXPECT(oclf_attention(c, qu, OCLF_F32, 2, D, T, T, 3, cq, ck, q, k, v, o, &opt, &ch, 0, NULL,
                          NULL),
           OCLF_INVALID_ARGUMENT, "BK");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "WGS", 3);
    EXPECT(oclf_attention(c, qu, OCLF_F32, 2, D, T, T, 3, cq, ck, q, k, v, o, &opt, &ch, 0, NULL,
                          NULL),
           OCLF_INVALID_ARGUMENT, "WGS");
    /* offsets the host checks: on the unfused path always, on the fused
     * path under `validate` */
    oclf_context *vctx = th_validate_context();
    static const int32_t bads[][3] = {{1, 3, 6}, {0, 2, 1}, {0, 3, 5}, {0, 0, 6}};
    static const char *const words[] = {"[0]", "decreases", "ends", "max_seqlen_q"};
    for (int i = 0; i < 4; i++) {
        cl_mem m = th_upload(bads[i], sizeof bads[i]);
        oclf_buf bcu = {m, 0, 0};
        for (int p = 0; p < 2; p++) {
            oclf_choice pc = th_choice(p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
            oclf_context *cx = p ? c : vctx;
            oclf_status st = oclf_attention(cx, qu, OCLF_F32, 2, D, T, T, 3, bcu, ck, q, k, v, o,
                                            &opt, &pc, 0, NULL, NULL);
            ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
            ck_assert_msg(strstr(oclf_last_error(cx), words[i]) != NULL, "message: %s",
                          oclf_last_error(cx));
            bad_check_untouched(&bb);
        }
        clReleaseMemObject(m);
    }
    oclf_context_destroy(vctx);
#undef CALL
    cl_mem rel[] = {bb.qkv, bb.o, bb.lse, bb.cuq, bb.cuk, bb.slopes, bb.small};
    for (int i = 0; i < 7; i++)
        clReleaseMemObject(rel[i]);
    free(bb.hqkv), free(bb.ho), free(bb.hl);
}
END_TEST

static Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_options, 0, N_OPTION_SETS);
    tcase_add_loop_test(t, test_dims, 0, 7);
    tcase_add_loop_test(t, test_heads, 0, 4);
    tcase_add_test(t, test_packed_qkv);
    tcase_add_loop_test(t, test_structures, 0, 8);
    tcase_add_loop_test(t, test_fused_unfused, 0, 3);
    tcase_add_test(t, test_empty);
    suite_add_tcase(s, t);
    TCase *mu = tcase_create("matrix_units");
    tcase_set_timeout(mu, 0);
    tcase_add_loop_test(mu, test_mma, 0, th_quick() ? 3 : 10);
    suite_add_tcase(s, mu);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(attention_suite()); }
