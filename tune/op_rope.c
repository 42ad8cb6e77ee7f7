/* Descriptors of rotary_embedding, its backward and qk_norm_rope for the
 * benchmark and the tuner. Both work in place on a packed qkv [tokens, (nq + nk + nv) * hd]
 * with a cache of the heads' dtype, NeoX pairs and int32 positions;
 * rotary_embedding (and its backward, on the gradients) rotates the q and k
 * views of it. */
#include "opdesc.h"

#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROTARY, QK_NORM_ROPE, ROTARY_BACKWARD };

typedef struct rope_inst {
    int kind;
    oclf_dtype dtype;
    size_t tokens, nq, nk, nv, hd, rot, max_pos;
    void *hx, *hw, *hcache;
    int32_t *hpos;
    int64_t *pos64; /* the reference's view of the positions */
    double *want;   /* reference, computed on first verify */
    cl_mem x, w, cache, pos;
    oclf_rope rope;
} rope_inst;

static const float eps = 1e-6f;

static void rope_destroy(void *p)
{
    rope_inst *in = p;
    if (!in)
        return;
    cl_mem mems[4] = {in->x, in->w, in->cache, in->pos};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(in->hx), free(in->hw), free(in->hcache), free(in->hpos), free(in->pos64);
    free(in->want);
    free(in);
}

static void *rope_create(int kind, const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                         size_t errlen)
{
    rope_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->kind = kind;
    in->dtype = dt;
    in->tokens = s->d[0], in->nq = s->d[1], in->nk = s->d[2], in->nv = s->d[3];
    in->hd = s->d[4], in->rot = s->d[5];
    in->max_pos = 4096;
    const size_t es = oclf_dtype_size(dt);
    const size_t n = in->tokens * (in->nq + in->nk + in->nv) * in->hd;
    const size_t nc = in->max_pos * in->rot;
    in->hx = malloc(n * es + 1);
    in->hw = malloc(in->hd * es + 1);
    in->hcache = malloc(nc * es + 1);
    in->hpos = malloc(in->tokens * 4 + 4);
    in->pos64 = malloc(in->tokens * 8 + 8);
    if (!in->hx || !in->hw || !in->hcache || !in->hpos || !in->pos64) {
        snprintf(err, errlen, "out of host memory for %zu tokens", in->tokens);
        rope_destroy(in);
        return NULL;
    }
    op_fill_random(dt, in->hx, n, -2.0f, 2.0f, 1);
    /* Unit norm weights: the op runs in place call after call, and a
     * weight w scales its dim by w per call relative to the others, which
     * drove most of a head into subnormal floats within a few hundred
     * calls (qk_norm_rope f32 at 256 tokens ran 50x slower per token than
     * at 4096, a CPU's subnormal arithmetic). */
    op_fill_random(dt, in->hw, in->hd, 1.0f, 1.0f, 2);
    for (size_t p = 0; p < in->max_pos; p++)
        for (size_t j = 0; j < in->rot / 2; j++) {
            double f = pow(10000.0, -2.0 * (double)j / (double)in->rot);
            oclf_ref_set(dt, in->hcache, p * in->rot + j, (float)cos((double)p * f));
            oclf_ref_set(dt, in->hcache, p * in->rot + in->rot / 2 + j, (float)sin((double)p * f));
        }
    for (size_t t = 0; t < in->tokens; t++)
        in->pos64[t] = in->hpos[t] = (int32_t)((t * 2654435761u) % in->max_pos);
    if (!(in->x = op_upload(env, in->hx, n * es, err, errlen)) ||
        !(in->w = op_upload(env, in->hw, in->hd * es, err, errlen)) ||
        !(in->cache = op_upload(env, in->hcache, nc * es, err, errlen)) ||
        !(in->pos = op_upload(env, in->hpos, in->tokens * 4 + 4, err, errlen))) {
        rope_destroy(in);
        return NULL;
    }
    in->rope.style = OCLF_ROPE_NEOX;
    in->rope.head_dim = in->hd;
    in->rope.rot_dim = in->rot;
    in->rope.positions = (oclf_buf){in->pos, 0, 0};
    in->rope.pos_type = OCLF_INT32;
    in->rope.cos_sin = (oclf_buf){in->cache, 0, 0};
    in->rope.cache_dtype = dt;
    in->rope.max_pos = in->max_pos;
    return in;
}

static oclf_status rope_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    rope_inst *in = p;
    const size_t ts = (in->nq + in->nk + in->nv) * in->hd;
    if (in->kind == QK_NORM_ROPE) {
        oclf_buf w = {in->w, 0, 0};
        return oclf_qk_norm_rope(env->ctx, env->queue, in->dtype, in->tokens, in->nq, in->nk,
                                 in->nv, &in->rope, (oclf_buf){in->x, 0, 0}, &w, &w, eps, ch, 0,
                                 NULL, ev);
    }
    oclf_heads q = {{in->x, 0, ts}, in->nq, 0}, k = {{in->x, in->nq * in->hd, ts}, in->nk, 0};
    if (in->kind == ROTARY_BACKWARD)
        return oclf_rotary_embedding_backward(env->ctx, env->queue, in->dtype, in->tokens,
                                              &in->rope, q, in->nk ? &k : NULL, ch, 0, NULL, ev);
    return oclf_rotary_embedding(env->ctx, env->queue, in->dtype, in->tokens, &in->rope, q,
                                 in->nk ? &k : NULL, ch, 0, NULL, ev);
}

static int rope_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    rope_inst *in = p;
    const oclf_dtype dt = in->dtype;
    const size_t es = oclf_dtype_size(dt), nh = in->nq + in->nk + in->nv;
    const size_t n = in->tokens * nh * in->hd;
    if (op_rewrite(env, in->x, in->hx, n * es)) {
        snprintf(msg, len, "cannot restore the inputs");
        return 0;
    }
    oclf_status st = rope_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    if (!in->want && (in->want = malloc((n + 1) * sizeof *in->want)) != NULL) {
        oclf_ref_rope r = {0, in->hd, in->rot, in->pos64, in->hcache, dt, in->rot, in->max_pos};
        if (in->kind == QK_NORM_ROPE)
            oclf_ref_qk_norm_rope(dt, in->tokens, in->nq, in->nk, in->nv, in->hx, nh * in->hd,
                                  in->hw, in->hw, eps, &r, in->want);
        else if (in->kind == ROTARY_BACKWARD)
            oclf_ref_rotary_backward(dt, in->tokens, in->nq + in->nk, in->hx, nh * in->hd,
                                     in->hd, &r, in->want);
        else /* every head of the row: V heads come back unchanged */
            oclf_ref_rotary(dt, in->tokens, in->nq + in->nk, in->hx, nh * in->hd, in->hd, &r,
                            in->want);
    }
    void *got = malloc(n * es + 1);
    int ok = 0;
    if (got && in->want && op_download(env, in->x, got, n * es) == 0) {
        /* qk_norm_rope: whole rows; rotary: the q and k heads of each token */
        const size_t cols = in->kind == QK_NORM_ROPE ? nh * in->hd : (in->nq + in->nk) * in->hd;
        ok = op_compare(dt, got, nh * in->hd, in->want, in->tokens, cols, msg, len);
    } else {
        snprintf(msg, len, "cannot read the result back");
    }
    free(got);
    return ok;
}

/* q and k heads read and written once; a cache row (R elements) and a
 * position per token; the two weights. */
static double rope_bytes(int kind, const op_shape *s, oclf_dtype dt)
{
    const double es = (double)oclf_dtype_size(dt), t = (double)s->d[0];
    const double qk = t * (double)(s->d[1] + s->d[2]) * (double)s->d[4] * es;
    return 2 * qk + t * ((double)s->d[5] * es + 4) + (kind == QK_NORM_ROPE ? 2 * s->d[4] * es : 0);
}

/* The library keys a rope call by the heads it rotates (q and k), not by
 * the packed row's layout. */
static int rope_lib_shape(const op_shape *s, uint64_t *dims)
{
    dims[0] = s->d[0];
    dims[1] = s->d[1] + s->d[2];
    dims[2] = s->d[4];
    dims[3] = s->d[5];
    return 4;
}

static int rope_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                      oclf_path path, oclf_params *out, int max)
{
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    /* LAYOUT 0: a token (all its heads) per work-item, up to 64 tokens a
     * group; staged (positions, weights, cache rows and heads in local
     * memory), 4 tokens per group where there are tokens to spare */
    const op_stage_space sp = {.width = s->d[4], .rows = s->d[0], .l0_min = 1, .l0_max = 64,
                               .l1_min = 8, .rows_need_stage = 1};
    /* The staged qk_norm_rope keeps a head's vectors and its cos/sin in
     * flight: wider vectors spill on a GPU. */
    const int n = op_gpu_vector_cap(env, dt, out, op_staged_row_space(&c, &sp, out, max));
    if (!op_is_gpu(env))
        return n;
    /* A GPU gets LAYOUT 1 only. LAYOUT 0 hands a work-item every head of a
     * token, so a warp's loads are a token apart (uncoalesced), and its
     * bf16 qk_norm_rope spilled on Intel's Xe-HPC at VEC 2 as at 8. */
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int64_t layout = 0;
        oclf_params_get(&out[i], "LAYOUT", &layout);
        if (layout != 0)
            out[kept++] = out[i];
    }
    return kept;
}

/* tokens x nq x nk x nv x hd x R. Traffic, staged: one work-group takes
 * the shape's 4 tokens, so the weights, each token's cos/sin row and each
 * head leave global memory once. */
static const op_kernel_check rope_check = {
    "3x2x1x1x20x12,2x1x2x1x37x18",
    "LAYOUT=0,WGS=2,VEC=4;LAYOUT=1,WGS=16,VEC=2;LAYOUT=0,WGS=4,VEC=1;"
    "LAYOUT=1,WGS=8,VEC=4,STAGE=1,ROWS=2",
    "LAYOUT=1,WGS=16,VEC=4,STAGE=1,ROWS=4", "4x2x1x1x32x32", 0, 1};

#define ROPE_DESC(sym, KIND, NAME, UNFUSED, LAYER)                                                  \
    static void *sym##_create(const op_env *e, const op_shape *s, oclf_dtype d, char *err,  \
                              size_t n)                                                     \
    {                                                                                       \
        return rope_create(KIND, e, s, d, err, n);                                          \
    }                                                                                       \
    static double sym##_bytes(const op_shape *s, oclf_dtype d) { return rope_bytes(KIND, s, d); } \
    const op_desc op_##sym = {                                                              \
        .name = NAME,                                                                       \
        .shape_help = "TOKENSxNQxNKxNVxHDxR (heads of a packed qkv, head and rotary dims)", \
        .ndims = 6,                                                                         \
        .dim_names = {"tokens", "nq", "nk", "nv", "head_dim", "rot_dim"},                   \
        .bench_shapes = "4096x32x8x8x128x128,1x32x8x8x128x128",                             \
        .bench_full_shapes = "256x32x8x8x128x128",                                          \
        .uncached_shape = "1024x32x8x8x128x128",                                            \
        .uncached_dim = 0,                                                                  \
        .tune_shapes = "4096x32x8x8x128x128,256x32x8x8x128x128,1x32x8x8x128x128",           \
        .llm_shapes = "1x32x8x8x128x128,32x32x8x8x128x128,512x32x8x8x128x128,"              \
                      "2048x64x8x8x128x128,512x16x16x16x256x64",                            \
        .layer_shapes = LAYER,                                                              \
        .test_shape = "5x4x2x2x80x48",                                                      \
        .has_unfused = UNFUSED,                                                             \
        .create = sym##_create,                                                             \
        .run = rope_run,                                                                    \
        .verify = rope_verify,                                                              \
        .min_bytes = sym##_bytes,                                                           \
        .flops = NULL,                                                                      \
        .destroy = rope_destroy,                                                            \
        .space = rope_space,                                                                \
        .lib_shape = rope_lib_shape,                                                        \
        .lib_dim_names = {"tokens", "heads", "head_dim", "rot_dim"},                        \
        .kernel_check = &rope_check,                                                        \
    };

ROPE_DESC(rotary_embedding, ROTARY, "rotary_embedding", 0, NULL)
ROPE_DESC(rotary_embedding_backward, ROTARY_BACKWARD, "rotary_embedding_backward", 0, NULL)
ROPE_DESC(qk_norm_rope, QK_NORM_ROPE, "qk_norm_rope", 1,
          "1x32x8x8x128x128,16x32x8x8x128x128,512x32x8x8x128x128")
