/* Descriptors of attention for the benchmark and the tuner: `batch`
 * sequences of SQ queries and SK keys each, packed q [B SQ, Hq, D], k and
 * v [B SK, Hk, D] in buffers of their own, causal mask (bottom-right), no
 * other option. attention_paged: the same keys and values in a paged cache
 * of blocks of BS slots, the blocks of all sequences shuffled over the
 * cache, one spare block and the unused slots of the last ones holding
 * other values. */
#include "opdesc.h"

#include "ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_inst {
    oclf_dtype dtype;
    size_t b, sq, sk, hq, hk, d, tq, tk;
    void *hq_, *hk_, *hv;
    int32_t *cuq, *cuk;
    double *want, *vmax; /* reference, computed on first verify */
    cl_mem q, k, v, o, mcq, mck;
    /* paged: blocks of bs slots, nbs a sequence, nblk in all */
    int paged;
    size_t bs, nbs, nblk;
    cl_mem kc, vc, mbt, mlen;
} attn_inst;

static void attn_destroy(void *p)
{
    attn_inst *in = p;
    if (!in)
        return;
    cl_mem mems[10] = {in->q, in->k, in->v, in->o, in->mcq, in->mck, in->kc, in->vc, in->mbt, in->mlen};
    for (int i = 0; i < 10; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(in->hq_), free(in->hk_), free(in->hv), free(in->cuq), free(in->cuk);
    free(in->want), free(in->vmax);
    free(in);
}

static void *attn_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                         size_t errlen)
{
    attn_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->dtype = dt;
    in->b = s->d[0], in->sq = s->d[1], in->sk = s->d[2], in->hq = s->d[3], in->hk = s->d[4];
    in->d = s->d[5];
    if (!in->hk || in->hq % in->hk) {
        snprintf(err, errlen, "Hq must be a multiple of Hk");
        attn_destroy(in);
        return NULL;
    }
    in->tq = in->b * in->sq, in->tk = in->b * in->sk;
    const size_t es = oclf_dtype_size(dt), nq = in->tq * in->hq * in->d;
    const size_t nk = in->tk * in->hk * in->d;
    in->hq_ = malloc(nq * es + 1), in->hk_ = malloc(nk * es + 1), in->hv = malloc(nk * es + 1);
    in->cuq = malloc((in->b + 1) * 4), in->cuk = malloc((in->b + 1) * 4);
    if (!in->hq_ || !in->hk_ || !in->hv || !in->cuq || !in->cuk) {
        snprintf(err, errlen, "out of host memory");
        attn_destroy(in);
        return NULL;
    }
    op_fill_random(dt, in->hq_, nq, -1.0f, 1.0f, 1);
    op_fill_random(dt, in->hk_, nk, -1.0f, 1.0f, 2);
    op_fill_random(dt, in->hv, nk, -1.0f, 1.0f, 3);
    for (size_t i = 0; i <= in->b; i++)
        in->cuq[i] = (int32_t)(i * in->sq), in->cuk[i] = (int32_t)(i * in->sk);
    if (!(in->q = op_upload(env, in->hq_, nq * es + 1, err, errlen)) ||
        !(in->k = op_upload(env, in->hk_, nk * es + 1, err, errlen)) ||
        !(in->v = op_upload(env, in->hv, nk * es + 1, err, errlen)) ||
        !(in->o = op_upload(env, in->hq_, nq * es + 1, err, errlen)) ||
        !(in->mcq = op_upload(env, in->cuq, (in->b + 1) * 4, err, errlen)) ||
        !(in->mck = op_upload(env, in->cuk, (in->b + 1) * 4, err, errlen))) {
        attn_destroy(in);
        return NULL;
    }
    return in;
}

/* The contiguous instance, then its keys and values copied into a paged
 * cache through a shuffled block table (the contiguous K and V stay on
 * the host only, for the reference). */
static void *attn_paged_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                               size_t errlen)
{
    if (!s->d[6]) {
        snprintf(err, errlen, "block size 0");
        return NULL;
    }
    attn_inst *in = attn_create(env, s, dt, err, errlen);
    if (!in)
        return NULL;
    clReleaseMemObject(in->k), clReleaseMemObject(in->v);
    in->k = in->v = NULL;
    in->paged = 1;
    in->bs = s->d[6];
    in->nbs = (in->sk + in->bs - 1) / in->bs;
    if (!in->nbs)
        in->nbs = 1;
    in->nblk = in->b * in->nbs + 1;
    const size_t es = oclf_dtype_size(dt), w = in->hk * in->d, slots = in->nblk * in->bs;
    int32_t *bt = malloc(in->b * in->nbs * 4), *lens = malloc((in->b ? in->b : 1) * 4);
    char *hkc = malloc(slots * w * es), *hvc = malloc(slots * w * es);
    attn_inst *ret = NULL;
    if (!bt || !lens || !hkc || !hvc) {
        snprintf(err, errlen, "out of host memory");
        goto done;
    }
    op_fill_random(dt, hkc, slots * w, -3.0f, 3.0f, 4);
    op_fill_random(dt, hvc, slots * w, -3.0f, 3.0f, 5);
    /* block ids 1.. in a fixed shuffle (block 0 stays spare) */
    const size_t used = in->b * in->nbs;
    for (size_t i = 0; i < used; i++)
        bt[i] = (int32_t)(i + 1);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = used; i > 1; i--) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        const size_t j = (size_t)(x >> 33) % i;
        const int32_t t = bt[i - 1];
        bt[i - 1] = bt[j], bt[j] = t;
    }
    for (size_t b = 0; b < in->b; b++) {
        lens[b] = (int32_t)in->sk;
        for (size_t j = 0; j < in->sk; j++) {
            const size_t slot = (size_t)bt[b * in->nbs + j / in->bs] * in->bs + j % in->bs;
            const size_t src = (b * in->sk + j) * w;
            memcpy(hkc + slot * w * es, (char *)in->hk_ + src * es, w * es);
            memcpy(hvc + slot * w * es, (char *)in->hv + src * es, w * es);
        }
    }
    if (!(in->kc = op_upload(env, hkc, slots * w * es, err, errlen)) ||
        !(in->vc = op_upload(env, hvc, slots * w * es, err, errlen)) ||
        !(in->mbt = op_upload(env, bt, used * 4, err, errlen)) ||
        !(in->mlen = op_upload(env, lens, (in->b ? in->b : 1) * 4, err, errlen)))
        goto done;
    ret = in;
done:
    free(bt), free(lens), free(hkc), free(hvc);
    if (!ret)
        attn_destroy(in);
    return ret;
}

static oclf_status attn_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    attn_inst *in = p;
    oclf_attention_options opt = OCLF_ATTENTION_OPTIONS_INIT;
    opt.causal = 1;
    oclf_heads q = {{in->q, 0, 0}, in->hq, 0}, k = {{in->k, 0, 0}, in->hk, 0};
    oclf_heads v = {{in->v, 0, 0}, in->hk, 0}, o = {{in->o, 0, 0}, in->hq, 0};
    if (in->paged) {
        oclf_kv_cache cache = OCLF_KV_CACHE_INIT;
        cache.k = in->kc, cache.v = in->vc;
        cache.num_blocks = in->nblk, cache.block_size = in->bs, cache.heads = in->hk;
        cache.head_dim = in->d;
        return oclf_attention_paged(env->ctx, env->queue, in->dtype, in->b, in->tq, in->sq, in->nbs,
                                    (oclf_buf){in->mcq, 0, 0}, (oclf_buf){in->mlen, 0, 0},
                                    (oclf_buf){in->mbt, 0, 0}, q, &cache, o, &opt, ch, 0, NULL, ev);
    }
    return oclf_attention(env->ctx, env->queue, in->dtype, in->b, in->d, in->tq, in->tk, in->sq,
                          (oclf_buf){in->mcq, 0, 0}, (oclf_buf){in->mck, 0, 0}, q, k, v, o, &opt,
                          ch, 0, NULL, ev);
}

static int attn_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    attn_inst *in = p;
    const oclf_dtype dt = in->dtype;
    const size_t es = oclf_dtype_size(dt), n = in->tq * in->hq * in->d;
    oclf_status st = attn_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    if (!in->want) {
        in->want = malloc((n + 1) * sizeof *in->want);
        in->vmax = malloc((in->tq * in->hq + 1) * sizeof *in->vmax);
        if (in->want && in->vmax) {
            oclf_ref_attention_args a;
            memset(&a, 0, sizeof a);
            a.dtype = dt, a.batch = in->b, a.hq = in->hq, a.hk = in->hk, a.d = in->d;
            a.cu_q = in->cuq, a.cu_k = in->cuk;
            a.q = (oclf_ref_heads){in->hq_, 0, in->hq * in->d, in->d};
            a.k = (oclf_ref_heads){in->hk_, 0, in->hk * in->d, in->d};
            a.v = (oclf_ref_heads){in->hv, 0, in->hk * in->d, in->d};
            a.causal = 1;
            a.left = a.right = -1;
            oclf_ref_attention(&a, in->tq, in->want, NULL, in->vmax);
        }
    }
    void *got = malloc(n * es + 1);
    int ok = 0;
    if (got && in->want && in->vmax && op_download(env, in->o, got, n * es) == 0) {
        size_t first = 0;
        double worst = 0;
        const size_t bad = oclf_ref_attention_compare(dt, got, 0, in->hq * in->d, in->d, in->tq,
                                                      in->hq, in->d, in->want, in->vmax, &first,
                                                      &worst);
        ok = bad == 0;
        if (!ok)
            snprintf(msg, len, "%zu elements out of tolerance, first %zu, largest error %g", bad,
                     first, worst);
    } else {
        snprintf(msg, len, "cannot read the result back");
    }
    free(got);
    return ok;
}

/* q, k, v read once and o written once. */
static double attn_bytes(const op_shape *s, oclf_dtype dt)
{
    const double es = (double)oclf_dtype_size(dt), b = (double)s->d[0], d = (double)s->d[5];
    return es * d * b * (2.0 * (double)s->d[1] * (double)s->d[3] + 2.0 * (double)s->d[2] * (double)s->d[4]);
}

/* Two multiply-adds per visible (query, key, dim) and query head: the
 * causal mask's visible pairs only. */
static double attn_flops(const op_shape *s)
{
    const double sq = (double)s->d[1], sk = (double)s->d[2];
    double pairs = 0;
    for (double i = 0; i < sq; i++) {
        const double last = i + sk - sq; /* keys 0..last */
        pairs += last < 0 ? 0 : last + 1 > sk ? sk : last + 1;
    }
    return 4.0 * (double)s->d[0] * pairs * (double)s->d[3] * (double)s->d[5];
}

static int attn_lib_shape(const op_shape *s, uint64_t *dims)
{
    dims[0] = s->d[0] * s->d[1];
    dims[1] = s->d[3];
    dims[2] = s->d[4];
    dims[3] = s->d[5];
    return 4;
}

static int attn_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                      oclf_path path, oclf_params *out, int max)
{
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    int n = 0;
    if (path == OCLF_PATH_UNFUSED) {
        oclf_params p;
        memset(&p, 0, sizeof p);
        op_space_add_valid(&c, out, &n, max, &p); /* the GEMM library tunes itself */
        return n;
    }
    /* Rows in local memory on a GPU, whose registers would spill them. */
    const int acc = op_is_gpu(env);
    static const int wgs[] = {4, 8, 16, 32, 64}, bk[] = {8, 16, 32, 64}, vec[] = {4, 8, 16};
    int gpu_vec = 1;
    while (gpu_vec < 16 && (uint64_t)gpu_vec * 2 <= s->d[5])
        gpu_vec *= 2;
    /* Split KV (paged only): no split, or partitions that leave two or
     * more of them in the longest sequence. */
    static const int parts[] = {0, 256, 512, 1024, 2048};
    const int paged = op->ndims == 7;
    for (int pt = 0; pt < (paged ? 5 : 1); pt++)
        for (int w = 0; w < 5; w++)
            for (int b = 0; b < 4; b++)
                for (int v = 0; v < 3; v++) {
                    if (parts[pt] && (uint64_t)parts[pt] * 2 > s->d[2])
                        continue;
                    if ((uint64_t)vec[v] > s->d[5] * 2)
                        continue; /* the padding would be most of the work */
                    /* On a GPU the vector width stays the heuristic's (the
                     * widest power of two up to the head dim, at most 16), which
                     * the cross-compile suite (tests/gpu_compile.py) builds
                     * without spilling on every target; narrower vectors at head
                     * dim 64 spilled on the SIMD32 Intel target (float4 about 2
                     * registers, float8 about 6), and 64-key blocks on AMD. */
                    if (acc && (vec[v] != gpu_vec || bk[b] > 32))
                        continue;
                    oclf_params p;
                    memset(&p, 0, sizeof p);
                    oclf_params_set(&p, "WGS", wgs[w]);
                    oclf_params_set(&p, "BK", bk[b]);
                    oclf_params_set(&p, "VEC", vec[v]);
                    oclf_params_set(&p, "ACC", acc);
                    if (paged)
                        oclf_params_set(&p, "PART", parts[pt]);
                    /* a CPU tries both structures; a GPU stages (rows side by
                     * side in lockstep gain nothing from the cache's reuse) */
                    for (int st = acc; st < 2; st++) {
                        oclf_params_set(&p, "STAGE", st);
                        op_space_add_valid(&c, out, &n, max, &p);
                    }
                }
    if (!acc)
        return n;
    /* The matrix-unit prefill structure (STAGE 3), where the heuristic
     * takes it for the shape (the device runs the instruction natively; the
     * emulation is never worth timing): query rows a group and keys a tile
     * (64 keys took 255 registers at head dim 128, with spills beside
     * softcap or paging). */
    uint64_t dims[4];
    attn_lib_shape(s, dims);
    oclf_tuning_decision td;
    int64_t hstage = 0;
    if (oclf_tuning_resolve(env->ctx, paged ? "attention_paged" : "attention", dt, dims, 4,
                            OCLF_PATH_FUSED, &td) == OCLF_SUCCESS &&
        oclf_params_get(&td.heuristic.params, "STAGE", &hstage) && hstage == 3) {
        static const int mrows[] = {32, 64, 128};
        for (int w = 0; w < 3; w++) {
            oclf_params p;
            memset(&p, 0, sizeof p);
            oclf_params_set(&p, "WGS", mrows[w]);
            oclf_params_set(&p, "BK", 32);
            oclf_params_set(&p, "VEC", 8);
            oclf_params_set(&p, "ACC", 0);
            oclf_params_set(&p, "STAGE", 3);
            if (paged)
                oclf_params_set(&p, "PART", 0);
            op_space_add_valid(&c, out, &n, max, &p);
        }
    }
    /* A GPU's decode structure (STAGE 2): work-items a group, rows scored
     * together (up to the KV group; 4 rows spilled registers on gfx1100 in
     * the cross-compile suite, so 1 or 2), and (paged) the partitions'
     * target in work-groups a compute unit, 0 for none. BK, VEC and ACC
     * mean nothing to it and stay fixed. */
    static const int dwgs[] = {32, 64, 128, 256}, dqr[] = {1, 2}, fills[] = {0, 2, 4, 8, 16};
    const uint64_t grp = s->d[4] ? s->d[3] / s->d[4] : 1;
    for (int w = 0; w < 4; w++)
        for (int r = 0; r < 2; r++)
            for (int f = 0; f < (paged ? 5 : 1); f++) {
                if ((uint64_t)dqr[r] > grp && dqr[r] > 1)
                    continue;
                oclf_params p;
                memset(&p, 0, sizeof p);
                oclf_params_set(&p, "WGS", dwgs[w]);
                oclf_params_set(&p, "BK", 1);
                oclf_params_set(&p, "VEC", 1);
                oclf_params_set(&p, "ACC", 0);
                oclf_params_set(&p, "STAGE", 2);
                oclf_params_set(&p, "QR", dqr[r]);
                oclf_params_set(&p, "FILL", fills[f]);
                if (paged)
                    oclf_params_set(&p, "PART", 0);
                op_space_add_valid(&c, out, &n, max, &p);
            }
    return n;
}

/* B x SQ x SK x Hq x Hk x D: Sq != Sk (rows without keys under the
 * causal mask), GQA and MQA, head dims with padding and one of 1; block
 * sizes that leave partial key blocks and several groups per head. */
static const op_kernel_check attn_check = {
    "2x5x7x4x2x20,1x6x3x3x1x3",
    "WGS=4,BK=4,VEC=4,ACC=0,STAGE=0;WGS=8,BK=3,VEC=1,ACC=0,STAGE=1;"
    "WGS=2,BK=16,VEC=16,ACC=0,STAGE=0;WGS=4,BK=5,VEC=2,ACC=1,STAGE=1;"
    "WGS=4,BK=5,VEC=8,ACC=1,STAGE=0;WGS=16,BK=1,VEC=1,ACC=0,STAGE=2,QR=3",
    "WGS=16,BK=16,VEC=4,ACC=0,STAGE=1", "1x16x16x2x1x32", 1, 0};

const op_desc op_attention = {
    .name = "attention",
    .shape_help = "BxSQxSKxHQxHKxD (sequences, queries and keys per sequence, query and KV "
                  "heads, head dim; causal)",
    .ndims = 6,
    .dim_names = {"batch", "seqlen_q", "seqlen_k", "q_heads", "kv_heads", "head_dim"},
    /* Llama-3-8B's heads (32 query, 8 KV, 128): causal prefills of one
     * 2048-token sequence and of four of 512, and a small one a short run
     * can afford */
    .bench_shapes = "1x2048x2048x32x8x128,4x512x512x32x8x128,1x512x512x32x8x128",
    .tune_shapes = "4x512x512x32x8x128,1x512x512x32x8x128,4x128x128x32x8x64",
    /* out of cache: decode-like rows (one query per sequence against 2048
     * keys), where K and V stream once and the arithmetic is light, more
     * sequences until they are past twice the cache. A prefill that large
     * would take seconds a call on a CPU; one sequence with more keys
     * leaves the fused kernel a work-group per KV head (8), which ran 1.7x
     * slower than 8 sequences of the same bytes on 2 cores. */
    .uncached_shape = "1x1x2048x32x8x128",
    .uncached_dim = 0,
    .test_shape = "2x9x11x4x2x40",
    .has_unfused = 1,
    .create = attn_create,
    .run = attn_run,
    .verify = attn_verify,
    .min_bytes = attn_bytes,
    .flops = attn_flops,
    .destroy = attn_destroy,
    .space = attn_space,
    .lib_shape = attn_lib_shape,
    .lib_dim_names = {"tokens", "q_heads", "kv_heads", "head_dim"},
    .kernel_check = &attn_check,
};

/* B x SQ x SK x Hq x Hk x D x BS: decode rows and a chunk of queries,
 * blocks of 1 and 4 slots and partial blocks, split KV with partitions
 * that end inside a key block and a block of the cache, the decode
 * structure split and not. The traffic: one decode row of a group of 4
 * query heads in the decode structure (the GPU default), K and V read
 * once. */
static const op_kernel_check attn_paged_check = {
    "2x3x19x4x2x20x4,1x1x9x3x1x3x1",
    "WGS=4,BK=4,VEC=4,ACC=0,PART=8,STAGE=0;WGS=8,BK=3,VEC=1,ACC=0,PART=0,STAGE=1;"
    "WGS=4,BK=5,VEC=2,ACC=1,PART=7,STAGE=1;WGS=4,BK=8,VEC=16,ACC=0,PART=0,STAGE=0;"
    "WGS=16,BK=1,VEC=1,ACC=0,PART=8,STAGE=2,QR=2,FILL=0;"
    "WGS=32,BK=1,VEC=1,ACC=0,PART=0,STAGE=2,QR=4,FILL=0",
    "WGS=32,BK=1,VEC=1,ACC=0,PART=0,STAGE=2,QR=4,FILL=0", "1x1x64x4x1x32x16", 1, 1};

/* q and o once, and the keys and values of the cache once each. */
static double attn_paged_bytes(const op_shape *s, oclf_dtype dt) { return attn_bytes(s, dt); }

const op_desc op_attention_paged = {
    .name = "attention_paged",
    .shape_help = "BxSQxSKxHQxHKxDxBS (sequences, queries (the last of the keys) and keys per "
                  "sequence, query and KV heads, head dim, slots per cache block; causal)",
    .ndims = 7,
    .dim_names = {"batch", "seqlen_q", "seqlen_k", "q_heads", "kv_heads", "head_dim",
                  "block_size"},
    /* Llama-3-8B's heads: one sequence of 2048 tokens (its cache fits a
     * CPU's L3), a decode batch of 16 sequences of 4096 tokens, one
     * sequence of 32768 (split KV), and a chunk of 256 queries at the end
     * of 2048 keys (chunked prefill) */
    .bench_shapes = "1x1x2048x32x8x128x16,16x1x4096x32x8x128x16,1x1x32768x32x8x128x16,"
                    "1x256x2048x32x8x128x16",
    /* decode of 1 and 16 sequences after a prefill of 512, and that prefill */
    .layer_shapes = "1x1x513x32x8x128x16,16x1x513x32x8x128x16,1x512x512x32x8x128x16",
    .tune_shapes = "16x1x4096x32x8x128x16,1x1x32768x32x8x128x16",
    /* decode streams the cache once: more sequences until it is out of
     * cache */
    .uncached_shape = "16x1x4096x32x8x128x16",
    .uncached_dim = 0,
    .test_shape = "2x3x21x4x2x40x4",
    .has_unfused = 1,
    .create = attn_paged_create,
    .run = attn_run,
    .verify = attn_verify,
    .min_bytes = attn_paged_bytes,
    .flops = attn_flops,
    .destroy = attn_destroy,
    .space = attn_space,
    .lib_shape = attn_lib_shape,
    .lib_dim_names = {"tokens", "q_heads", "kv_heads", "head_dim"},
    .kernel_check = &attn_paged_check,
};
