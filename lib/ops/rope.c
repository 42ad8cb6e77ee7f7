/*
 * Rotary embedding family: rotary_embedding, qk_norm_rope and the paged
 * KV-cache write.
 *
 *   rotary_embedding    one kernel (rotary_embedding); it has no unfused form
 *   rotary_embedding_backward
 *                       the same kernel built with OCLF_ROPE_INVERSE=1 (the
 *                       sines negated: the transpose rotation), the same
 *                       tuning space; no unfused form either
 *   qk_norm_rope        fused: qk_norm_rope
 *                       unfused: head_rms_norm -> rotary_embedding
 *   kv_cache_write      one kernel (kv_cache_write), in rope_kvcache.c
 *   qk_norm_rope_cache  fused: qk_norm_rope built with OCLF_CACHE_WRITE=1
 *                       unfused: head_rms_norm -> rotary_embedding ->
 *                       kv_cache_write
 *
 * The two cache calls dispatch as qk_norm_rope (their kernels are its
 * kernels, or sit in its program), so its tuning records apply.
 *
 * Parameters: LAYOUT (0 a (token, head) item per work-item, 1 a work-group
 * per item), WGS (work-group size, a power of two), VEC (vector width
 * 1..16), STAGE (1, with LAYOUT 1: a work-group per ROWS tokens that stages
 * weights, cos/sin rows and heads in local memory, so each is read from
 * global memory once), ROWS (tokens per staged work-group).
 */
#include "rope.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The row structure and the staged structure are compiled in; tokens per
 * staged group are a kernel argument. */
static const oclf_param_spec rope_params[] = {
    OCLF_ROW_PARAM_SPECS, {"STAGE", 0, 2, 0, OCLF_PARAM_DEFINE}, {"ROWS", 1, 1024, 0, OCLF_PARAM_ARG}};
_Static_assert(sizeof rope_params / sizeof rope_params[0] == OCLF_STAGED_ROW_NPARAMS,
               "the staged row parameters, in their order");

typedef struct rope_cfg {
    struct {
        int layout, wgs, vec;
    } row;
    int stage;
    int rpg; /* tokens per work-group when staged or packed */
    int hlanes; /* work-items per head when packed (STAGE 2) */
    char defines[OCLF_DEFINES_MAX];
} rope_cfg;
OCLF_CFG_FITS(rope_cfg);

/* The vector widths the item structure with LAYOUT 1 must avoid on a
 * device with split_tail_miscompile: in the fused kernel, 4 or more lanes
 * that leave a scalar tail in the rotary half; in the head norm of both
 * paths, 2 or more that leave one in the head (head_dim 37 with VEC 2:
 * every head after the first wrong, while a simulator runs it right). */
static int split_tail_vec(int vec, size_t hd, size_t rot, oclf_path path)
{
    return (path == OCLF_PATH_FUSED && vec >= 4 && (rot / 2) % (size_t)vec != 0) ||
           (vec >= 2 && hd % (size_t)vec != 0);
}

/* The packed structure's work-items per head (a power of two up to wgs):
 * enough for half a head in one vector each, so the NeoX rotation of a
 * whole head gives every work-item one vector pair and the norm two
 * vectors; no wider than the device's shuffle reduction where it has one,
 * so a head reduces within a sub-group. */
static size_t packed_lanes(const oclf_context *ctx, size_t hd, int vec, size_t wgs)
{
    const size_t want = (hd + 2 * (size_t)vec - 1) / (2 * (size_t)vec);
    size_t lanes = 1;
    while (lanes < want && lanes < wgs)
        lanes *= 2;
    if (ctx->info.subgroup_form != 0 && lanes > ctx->info.subgroup_width)
        lanes = ctx->info.subgroup_width;
    return lanes;
}

/* shape: tokens, heads rotated per token, head_dim, rot_dim */
static void oclf_rope_heuristic(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, oclf_params *out)
{
    (void)path;
    /* A token per work-item (CPU) or a head per work-group (GPU). A CPU
     * work-item then has all the token's heads (tens of KiB): 8 of them a
     * group cover a group's fixed cost and still leave hundreds of groups
     * to share out at prefill sizes. */
    oclf_row_heuristic(ctx, dtype, shape->dim[2], 8, 32, out);
    int64_t layout = 0, vec = 1;
    oclf_params_get(out, "LAYOUT", &layout);
    oclf_params_get(out, "VEC", &vec);
    while (ctx->info.split_tail_miscompile && layout == 1 &&
           split_tail_vec((int)vec, (size_t)shape->dim[2], (size_t)shape->dim[3],
                          OCLF_PATH_FUSED))
        vec /= 2;
    oclf_params_set(out, "VEC", vec);
    /* The staged structure runs a token's heads one after another in one
     * group; whether that beats a group per head is the tuner's call. */
    oclf_params_set(out, "STAGE", 0);
    oclf_params_set(out, "ROWS", 1);
    if (layout != 1)
        return;
    /* GPUs: the packed structure, a head per segment of a few work-items
     * (packed_lanes), 128 work-items a group (a whole number of warps or
     * wavefronts), and enough tokens a group that their heads fill whole
     * passes of its segments (heads 40 over 16 segments: 2 tokens, 5 passes)
     * while their cos/sin rows fit a quarter of local memory. */
    size_t wgs = 128;
    while (wgs > ctx->info.max_wgs && wgs > 1)
        wgs /= 2;
    const size_t lanes = packed_lanes(ctx, (size_t)shape->dim[2], (int)vec, wgs);
    const size_t segs = wgs / lanes, heads = shape->dim[1] ? (size_t)shape->dim[1] : 1;
    size_t a = segs, b = heads % segs;
    while (b) {
        const size_t r = a % b;
        a = b;
        b = r;
    }
    size_t rpg = segs / a;
    const size_t row = (size_t)shape->dim[3] * sizeof(float);
    while (rpg > 1 && rpg * row > ctx->info.local_mem / 4)
        rpg /= 2;
    oclf_params_set(out, "WGS", (int64_t)wgs);
    oclf_params_set(out, "STAGE", 2);
    oclf_params_set(out, "ROWS", (int64_t)rpg);
}

/* Local memory of a staged launch: the group's positions, then two weight
 * vectors, two cache rows and two heads of fp32 (cl/rope.cl, staged
 * structure). */
static size_t stage_bytes(size_t hd, size_t rot, size_t rpg)
{
    return rpg * sizeof(int64_t) + (4 * hd + 2 * rot) * sizeof(float);
}

/* The packed structure's: the group's cos/sin rows in fp32. */
static size_t packed_bytes(size_t rot, size_t rpg)
{
    return rpg * rot * sizeof(float);
}

static oclf_status rope_config(const oclf_context *ctx, oclf_op op, oclf_path path,
                               const oclf_params *p, size_t hd, size_t rot, rope_cfg *cfg)
{
    int64_t v[OCLF_STAGED_ROW_NPARAMS];
    oclf_status st = oclf_params_read(ctx, rope_params, OCLF_STAGED_ROW_NPARAMS, p, v);
    if (st != OCLF_SUCCESS)
        return st;
    /* The packed structure is a LAYOUT 1 form and the GPU heuristic's
     * default: LAYOUT 0 laid over it (a tuning record's or a caller's
     * partial parameters) takes the item structure, a token per work-item,
     * rather than failing on parameters the caller never set. */
    if (v[OCLF_P_STAGE] == 2 && v[OCLF_P_LAYOUT] == 0) {
        v[OCLF_P_STAGE] = 0;
        v[OCLF_P_ROWS] = 1;
    }
    const int64_t stage = v[OCLF_P_STAGE], rpg = v[OCLF_P_ROWS];
    cfg->row.layout = (int)v[OCLF_P_LAYOUT];
    cfg->row.wgs = (int)v[OCLF_P_WGS];
    cfg->row.vec = (int)v[OCLF_P_VEC];
    if (stage && cfg->row.layout != 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter STAGE = %lld needs LAYOUT = 1", (long long)stage);
    if (rpg > 1 && !stage)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter ROWS > 1 needs STAGE = 1 or 2");
    if (stage == 2 && packed_bytes(rot, (size_t)rpg) + (size_t)cfg->row.wgs * sizeof(float) >
                          ctx->info.local_mem)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "STAGE = 2: cos/sin rows of %zu floats for %lld tokens do not fit %llu "
                         "bytes of local memory",
                         rot, (long long)rpg, (unsigned long long)ctx->info.local_mem);
    /* A segment's shuffles need every lane of its sub-group present. */
    if (stage == 2 && ctx->info.subgroup_form != 0 &&
        (size_t)cfg->row.wgs < ctx->info.subgroup_width)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "STAGE = 2 needs WGS of at least the sub-group width %u on this device",
                         (unsigned)ctx->info.subgroup_width);
    if (stage == 1 && stage_bytes(hd, rot, (size_t)rpg) + (size_t)cfg->row.wgs * sizeof(float) >
                     ctx->info.local_mem)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "STAGE = 1: heads of %zu and cos/sin rows of %zu floats for %lld tokens do "
                         "not fit %llu bytes of local memory",
                         hd, rot, (long long)rpg, (unsigned long long)ctx->info.local_mem);
    if (ctx->info.split_tail_miscompile && op == OCLF_OP_QK_NORM_ROPE &&
        cfg->row.layout == 1 && !stage && split_tail_vec(cfg->row.vec, hd, rot, path))
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "VEC = %d with LAYOUT = 1, heads of %zu and a rotary half of %zu is "
                         "miscompiled by this device's compiler; take a VEC that divides both",
                         cfg->row.vec, hd, rot / 2);
    cfg->stage = (int)stage;
    cfg->rpg = (int)rpg;
    oclf_param_defines(cfg->defines, sizeof cfg->defines, rope_params, OCLF_STAGED_ROW_NPARAMS,
                       v);
    cfg->hlanes = 0;
    if (stage == 2) {
        cfg->hlanes = (int)packed_lanes(ctx, hd, cfg->row.vec, (size_t)cfg->row.wgs);
        const size_t len = strlen(cfg->defines);
        snprintf(cfg->defines + len, sizeof cfg->defines - len, " -DOCLF_HLANES=%d",
                 cfg->hlanes);
    }
    return OCLF_SUCCESS;
}

/* The build option that turns rotary_embedding's rotation into its
 * transpose, for the backward op; empty for every other. */
static const char *inverse_define(oclf_op op)
{
    return op == OCLF_OP_ROTARY_EMBEDDING_BACKWARD ? " -DOCLF_ROPE_INVERSE=1" : "";
}

/* The deep check builds the program with a cache of the heads' dtype (the
 * usual case); the cache type changes loads, not the work-group limit. */
static oclf_status oclf_rope_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                               const oclf_shape *shape, const oclf_resolved *r, int deep,
                               oclf_op_cfg *out)
{
    rope_cfg cfg;
    oclf_status st = rope_config(ctx, op, r->path, &r->params, shape->dim[2], shape->dim[3], &cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    if (st != OCLF_SUCCESS || !deep)
        return st;
    char defines[OCLF_DEFINES_MAX + 64], opts[OCLF_OPTIONS_MAX + 64];
    snprintf(defines, sizeof defines, "%s%s", cfg.defines, inverse_define(op));
    oclf_list_aligned_variant(ctx, "rope.cl", dtype, (int)dtype, defines, cfg.row.vec);
    oclf_program_options(opts, sizeof opts, dtype, (int)dtype, defines);
    oclf_program *prog;
    if ((st = oclf_program_get(ctx, "rope.cl", opts, &prog)))
        return st;
    static const char *const rot[] = {"rotary_embedding"}, *const fused[] = {"qk_norm_rope"};
    static const char *const unfused[] = {"head_rms_norm", "rotary_embedding"};
    const size_t wgs = (size_t)cfg.row.wgs;
    if (op == OCLF_OP_ROTARY_EMBEDDING || op == OCLF_OP_ROTARY_EMBEDDING_BACKWARD)
        return oclf_check_kernel_wgs(ctx, prog, rot, 1, wgs);
    return r->path == OCLF_PATH_FUSED ? oclf_check_kernel_wgs(ctx, prog, fused, 1, wgs)
                                      : oclf_check_kernel_wgs(ctx, prog, unfused, 2, wgs);
}

const oclf_op_hooks oclf_rope_hooks = {oclf_rope_heuristic, oclf_rope_validate};

void oclf_rope_init(oclf_rope *rope)
{
    if (rope)
        *rope = (oclf_rope)OCLF_ROPE_INIT;
}

/* The checked rope description. */
typedef struct rope_operands {
    oclf_rope rope; /* the caller's, as read */
    oclf_operand pos, cache;
    size_t psize; /* bytes per position */
} rope_operands;

/* Reads the caller's rope into o->rope (its size checked as every sized
 * struct's) and checks it; the caller goes on with o->rope. */
static oclf_status check_rope(oclf_context *ctx, const char *op, size_t tokens,
                              const oclf_rope *src, rope_operands *o)
{
    oclf_status st;
    if (!src)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: rope is NULL", op);
    memset(o, 0, sizeof *o);
    char what[64];
    snprintf(what, sizeof what, "%s: rope", op);
    if ((st = oclf_options_read(ctx, what, src, sizeof o->rope, &o->rope, sizeof o->rope,
                                _Alignof(oclf_rope))))
        return st;
    const oclf_rope *rope = &o->rope;
    if (oclf_dtype_size(rope->cache_dtype) == 0)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: unsupported cache dtype %d (expected f32, f16 or bf16)", op,
                         (int)rope->cache_dtype);
    if (rope->pos_type != OCLF_INT32 && rope->pos_type != OCLF_INT64)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: unsupported position type %d (expected int32 or int64)", op,
                         (int)rope->pos_type);
    if (rope->style != OCLF_ROPE_NEOX && rope->style != OCLF_ROPE_GPTJ)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown rotary style %d", op,
                         (int)rope->style);
    if (rope->head_dim == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: head_dim is 0", op);
    /* Kernels index a head with 32-bit element indices. */
    if (rope->head_dim > (size_t)INT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: head_dim %zu is not below 2^31", op,
                         rope->head_dim);
    if (rope->rot_dim == 0 || rope->rot_dim % 2 || rope->rot_dim > rope->head_dim)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: rot_dim %zu must be even, non-zero and at most head_dim %zu", op,
                         rope->rot_dim, rope->head_dim);
    if (rope->max_pos == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: max_pos is 0", op);
    o->psize = rope->pos_type == OCLF_INT64 ? 8 : 4;
    snprintf(what, sizeof what, "%s: positions", op);
    if ((st = oclf_check_vector(ctx, what, rope->positions, tokens, o->psize, &o->pos)))
        return st;
    snprintf(what, sizeof what, "%s: cos_sin", op);
    return oclf_check_2d(ctx, what, rope->cos_sin, rope->max_pos, rope->rot_dim,
                         oclf_dtype_size(rope->cache_dtype), &o->cache);
}

/* With ctx->validate: reads the positions (after the caller's wait list)
 * and names the first token outside [0, max_pos). */
static oclf_status validate_positions(oclf_context *ctx, const char *op, cl_command_queue queue,
                                      size_t tokens, const oclf_rope *rope,
                                      const rope_operands *o, cl_uint num_events,
                                      const cl_event *wait_list)
{
    if (!ctx->validate || tokens == 0)
        return OCLF_SUCCESS;
    void *host = malloc(tokens * o->psize);
    if (!host)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", op);
    cl_int err = clEnqueueReadBuffer(queue, rope->positions.mem, CL_TRUE, o->pos.lo,
                                     tokens * o->psize, host, num_events, wait_list, NULL);
    if (err != CL_SUCCESS) {
        free(host);
        return oclf_fail_cl(ctx, err, "reading positions to validate them");
    }
    oclf_status st = OCLF_SUCCESS;
    for (size_t t = 0; t < tokens; t++) {
        int64_t p = o->psize == 8 ? ((const int64_t *)host)[t] : ((const int32_t *)host)[t];
        if (p < 0 || (uint64_t)p >= rope->max_pos) {
            st = oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                           "%s: position %lld of token %zu is outside [0, max_pos = %zu)", op,
                           (long long)p, t, rope->max_pos);
            break;
        }
    }
    free(host);
    return st;
}

/* Kernel arguments both rope kernels share, in their order. */
typedef struct rope_args {
    cl_mem pos;
    cl_ulong po;
    cl_uint pos64;
    cl_mem cache;
    cl_ulong co, cs, max_pos, tokens;
    cl_uint hd, rot, neox;
} rope_args;

static rope_args make_rope_args(const oclf_rope *rope, const rope_operands *o, size_t tokens)
{
    rope_args a;
    a.pos = rope->positions.mem;
    a.po = rope->positions.offset;
    a.pos64 = rope->pos_type == OCLF_INT64;
    a.cache = o->cache.mem;
    a.co = o->cache.offset;
    a.cs = o->cache.stride;
    a.max_pos = rope->max_pos;
    a.tokens = tokens;
    a.hd = (cl_uint)rope->head_dim;
    a.rot = (cl_uint)rope->rot_dim;
    a.neox = rope->style == OCLF_ROPE_NEOX;
    return a;
}

/* Resolves the parameters, builds the program, sizes the launch. The
 * heads are hd elements with a rotary part of rot and a cos/sin cache of
 * cdtype; with cache_write the fused path's program is the one whose
 * qk_norm_rope also writes the KV cache. `name` names the call in errors. */
oclf_status oclf_rope_prepare(oclf_context *ctx, const char *name, oclf_op op, oclf_dtype dtype,
                              size_t tokens, size_t heads, size_t hd, size_t rot, oclf_dtype cdtype,
                              int cache_write, const oclf_operand *places, unsigned nplaces,
                              const oclf_choice *choice, oclf_resolved *r, oclf_program **prog,
                              rope_launch *l)
{
    oclf_shape shape = {{tokens, heads, hd, rot}};
    rope_cfg cfg;
    oclf_status st;
    if ((st = oclf_dispatch_resolve(ctx, op, &oclf_rope_hooks, dtype, &shape, choice, r)))
        return st;
    if (r->has_cfg)
        memcpy(&cfg, &r->cfg, sizeof cfg);
    else if ((st = rope_config(ctx, op, r->path, &r->params, hd, rot, &cfg)))
        return st;
    l->local = (size_t)cfg.row.wgs;
    l->layout = cfg.row.layout;
    l->items = cfg.stage == 2 ? (size_t)(cfg.row.wgs / cfg.hlanes) : 1;
    if (heads != 0 && tokens > OCLF_MAX_LAUNCH_ITEMS / heads / l->local)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu tokens exceed the launch range", name,
                         tokens);
    if (cfg.stage)
        l->global = (tokens + (size_t)cfg.rpg - 1) / (size_t)cfg.rpg * l->local;
    else if (cfg.row.layout == 0)
        l->global = oclf_round_up(tokens, l->local); /* a token per work-item */
    else
        l->global = tokens * heads * l->local;
    l->rpg = (cl_uint)cfg.rpg;
    /* unstaged kernels ignore the stage; a local argument cannot be empty */
    l->stage_size = cfg.stage == 1   ? stage_bytes(hd, rot, (size_t)cfg.rpg)
                    : cfg.stage == 2 ? packed_bytes(rot, (size_t)cfg.rpg)
                                     : sizeof(float);
    if (l->stage_size == 0)
        l->stage_size = sizeof(float);
    char defines[OCLF_DEFINES_MAX + 64], opts[OCLF_OPTIONS_MAX + 64];
    snprintf(defines, sizeof defines, "%s%s%s", cfg.defines,
             cache_write && r->path == OCLF_PATH_FUSED ? " -DOCLF_CACHE_WRITE=1" : "",
             inverse_define(op));
    /* Every head, weight and cache row on a vector boundary (the callers'
     * places, rot/2 among them): the aligned build, one wide access per
     * vector. */
    oclf_program_options_aligned(opts, sizeof opts, dtype, (int)cdtype, defines,
                                 oclf_rows_aligned(cfg.row.vec, places, nplaces));
    return oclf_program_get(ctx, "rope.cl", opts, prog);
}


/* The q and k views rotary_embedding works on. */
typedef struct rotary_views {
    cl_mem q, k; /* k may be NULL (nk 0) */
    cl_ulong qo, qts, qhs, ko, kts, khs;
    cl_uint nq, nk;
} rotary_views;

/* rotary_embedding's arguments, shared with the unfused qk_norm_rope:
 * written into a (room for ROTARY_MAX_ARGS), their count returned. */
#define ROTARY_MAX_ARGS 24
static unsigned rotary_arglist(oclf_arg *a, const rotary_views *v, const rope_args *ra,
                               const rope_launch *l)
{
    const oclf_arg args[] = {
        OCLF_ARG(v->q),        OCLF_ARG(v->qo),      OCLF_ARG(v->qts),   OCLF_ARG(v->qhs),
        OCLF_ARG(v->nq),       OCLF_ARG(v->k),       OCLF_ARG(v->ko),    OCLF_ARG(v->kts),
        OCLF_ARG(v->khs),      OCLF_ARG(v->nk),      OCLF_ARG(ra->pos),  OCLF_ARG(ra->po),
        OCLF_ARG(ra->pos64),   OCLF_ARG(ra->cache),  OCLF_ARG(ra->co),   OCLF_ARG(ra->cs),
        OCLF_ARG(ra->max_pos), OCLF_ARG(ra->tokens), OCLF_ARG(ra->hd),   OCLF_ARG(ra->rot),
        OCLF_ARG(ra->neox),    OCLF_ARG(l->rpg),     OCLF_ARG_LOCAL(l->stage_size)};
    _Static_assert(sizeof args / sizeof args[0] <= ROTARY_MAX_ARGS, "room for the arguments");
    memcpy(a, args, sizeof args);
    return OCLF_NARGS(args);
}

/* oclf_rotary_embedding (ROTARY_EMBEDDING) and its backward
 * (ROTARY_EMBEDDING_BACKWARD): one set of checks and one kernel, whose
 * program the op picks (oclf_rope_prepare). */
static oclf_status rotary_run(oclf_context *ctx, oclf_op op_id, cl_command_queue queue,
                              oclf_dtype dtype, size_t tokens, const oclf_rope *rope,
                              oclf_heads q, const oclf_heads *k, const oclf_choice *choice,
                              cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *op = oclf_op_name(op_id);
    oclf_status st;
    rope_operands ro;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)) ||
        (st = check_rope(ctx, op, tokens, rope, &ro)))
        return st;
    rope = &ro.rope;
    const size_t hd = rope->head_dim, el = oclf_dtype_size(dtype);
    oclf_operand oq, ok;
    memset(&ok, 0, sizeof ok);
    oclf_blocks qb, kb;
    char what[64];
    snprintf(what, sizeof what, "%s: q", op);
    if ((st = oclf_check_heads(ctx, what, q, tokens, hd, el, &oq, &qb, NULL)))
        return st;
    if (k) {
        snprintf(what, sizeof what, "%s: k", op);
        if ((st = oclf_check_heads(ctx, what, *k, tokens, hd, el, &ok, &kb, NULL)))
            return st;
        /* heads, not each token's whole extent: interleaved q and k heads
         * share no element */
        if (oclf_overlap(&oq, &ok) && !oclf_blocks_disjoint(&oq, qb, &ok, kb))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: q and k overlap", op);
    }
    const oclf_operand *written[2] = {&oq, &ok};
    for (int i = 0; i < (k ? 2 : 1); i++)
        if (oclf_overlap(&ro.pos, written[i]) || oclf_overlap(&ro.cache, written[i]))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: positions or cos_sin overlaps %s", op, i ? "k" : "q");

    const size_t heads = q.count + (k ? k->count : 0);
    const size_t qhs = q.head_stride ? q.head_stride : hd;
    const size_t khs = k && k->head_stride ? k->head_stride : hd;
    const oclf_operand places[] = {oq, place_of(0, qhs), place_of(0, rope->rot_dim / 2),
                                   k ? ok : oq, place_of(0, khs)};
    oclf_resolved r;
    oclf_program *prog = NULL;
    rope_launch l;
    if ((st = oclf_rope_prepare(ctx, op, op_id, dtype, tokens, heads, hd, rope->rot_dim,
                                rope->cache_dtype, 0, places, OCLF_NARGS(places), choice, &r, &prog, &l)) ||
        (st = validate_positions(ctx, op, queue, tokens, rope, &ro, num_events, wait_list)))
        return st;
    if (tokens == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    rope_args ra = make_rope_args(rope, &ro, tokens);
    rotary_views v;
    v.q = oq.mem, v.qo = oq.offset, v.qts = oq.stride;
    v.qhs = q.head_stride ? q.head_stride : hd, v.nq = (cl_uint)q.count;
    v.k = k ? ok.mem : NULL, v.ko = ok.offset, v.kts = ok.stride;
    v.khs = k && k->head_stride ? k->head_stride : hd, v.nk = k ? (cl_uint)k->count : 0;
    oclf_arg a[ROTARY_MAX_ARGS];
    const unsigned na = rotary_arglist(a, &v, &ra, &l);
    return oclf_enqueue(ctx, queue, prog, "rotary_embedding", a, na, l.global, l.local,
                        num_events, wait_list, event);
}

oclf_status oclf_rotary_embedding(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                  size_t tokens, const oclf_rope *rope, oclf_heads q,
                                  const oclf_heads *k, const oclf_choice *choice,
                                  cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    return rotary_run(ctx, OCLF_OP_ROTARY_EMBEDDING, queue, dtype, tokens, rope, q, k, choice,
                      num_events, wait_list, event);
}

oclf_status oclf_rotary_embedding_backward(oclf_context *ctx, cl_command_queue queue,
                                           oclf_dtype dtype, size_t tokens, const oclf_rope *rope,
                                           oclf_heads dq, const oclf_heads *dk,
                                           const oclf_choice *choice, cl_uint num_events,
                                           const cl_event *wait_list, cl_event *event)
{
    return rotary_run(ctx, OCLF_OP_ROTARY_EMBEDDING_BACKWARD, queue, dtype, tokens, rope, dq, dk,
                      choice, num_events, wait_list, event);
}

/* A checked qk_norm_rope call: the packed qkv, the weights, the rope. */
typedef struct qk_operands {
    rope_operands ro;
    oclf_operand x, qw, kw;
    size_t heads; /* nq + nk: the heads normalized and rotated */
} qk_operands;

static oclf_status check_qk(oclf_context *ctx, const char *op, oclf_dtype dtype, size_t tokens,
                            const oclf_rope *rope, oclf_buf qkv, size_t nq, size_t nk, size_t nv,
                            const oclf_buf *q_weight, const oclf_buf *k_weight, float eps,
                            qk_operands *o)
{
    oclf_status st;
    if ((st = check_rope(ctx, op, tokens, rope, &o->ro)))
        return st;
    rope = &o->ro.rope;
    if (!(eps >= 0.0f) || !isfinite(eps))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: eps must be finite and >= 0", op);
    if (nq == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: nq is 0", op);
    const size_t hd = rope->head_dim, el = oclf_dtype_size(dtype);
    size_t width;
    if (__builtin_add_overflow(nq, nk, &o->heads) || o->heads > UINT_MAX / 2 ||
        __builtin_add_overflow(o->heads, nv, &width) || __builtin_mul_overflow(width, hd, &width))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %zu + %zu + %zu heads of %zu overflow",
                         op, nq, nk, nv, hd);
    memset(&o->qw, 0, sizeof o->qw);
    memset(&o->kw, 0, sizeof o->kw);
    char what[64];
    snprintf(what, sizeof what, "%s: qkv", op);
    if ((st = oclf_check_2d(ctx, what, qkv, tokens, width, el, &o->x)))
        return st;
    snprintf(what, sizeof what, "%s: q_weight", op);
    if (q_weight && (st = oclf_check_vector(ctx, what, *q_weight, hd, el, &o->qw)))
        return st;
    snprintf(what, sizeof what, "%s: k_weight", op);
    if (k_weight && (st = oclf_check_vector(ctx, what, *k_weight, hd, el, &o->kw)))
        return st;
    if (oclf_overlap(&o->qw, &o->x) || oclf_overlap(&o->kw, &o->x))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: a weight overlaps qkv", op);
    if (oclf_overlap(&o->ro.pos, &o->x) || oclf_overlap(&o->ro.cache, &o->x))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: positions or cos_sin overlaps qkv", op);
    return OCLF_SUCCESS;
}

oclf_status oclf_rope_check_cache(oclf_context *ctx, const char *op, oclf_dtype dtype,
                                  size_t tokens, oclf_buf slot_mapping, const oclf_kv_cache *cache,
                                  cache_operands *c)
{
    oclf_status st;
    char what[64];
    snprintf(what, sizeof what, "%s: cache", op);
    if ((st = oclf_check_kv_cache(ctx, what, cache, oclf_dtype_size(dtype), &c->k, &c->v,
                                  &c->cache)))
        return st;
    cache = &c->cache;
    snprintf(what, sizeof what, "%s: slot_mapping", op);
    if ((st = oclf_check_vector(ctx, what, slot_mapping, tokens, sizeof(int64_t), &c->slots)))
        return st;
    if (oclf_overlap(&c->slots, &c->k) || oclf_overlap(&c->slots, &c->v))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: slot_mapping overlaps the cache", op);
    c->kmem = cache->k, c->vmem = cache->v;
    c->ko = cache->k_offset, c->vo = cache->v_offset, c->so = slot_mapping.offset;
    c->nslots = (cl_ulong)cache->num_blocks * cache->block_size;
    return OCLF_SUCCESS;
}

/* 1 when `a` shares a byte with the cache's K or V. */
int oclf_rope_overlaps_cache(const oclf_operand *a, const cache_operands *c)
{
    return oclf_overlap(a, &c->k) || oclf_overlap(a, &c->v);
}

/* With ctx->validate: reads the slots (after the caller's wait list) and
 * names the first token whose slot lies beyond the cache (negative slots
 * are padding, skipped by design). */
oclf_status oclf_rope_validate_slots(oclf_context *ctx, const char *op, cl_command_queue queue,
                                     size_t tokens, const cache_operands *c, cl_uint num_events,
                                     const cl_event *wait_list)
{
    if (!ctx->validate || tokens == 0)
        return OCLF_SUCCESS;
    int64_t *host = malloc(tokens * sizeof *host);
    if (!host)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", op);
    cl_int err = clEnqueueReadBuffer(queue, c->slots.mem, CL_TRUE, c->slots.lo,
                                     tokens * sizeof *host, host, num_events, wait_list, NULL);
    if (err != CL_SUCCESS) {
        free(host);
        return oclf_fail_cl(ctx, err, "reading slot_mapping to validate it");
    }
    oclf_status st = OCLF_SUCCESS;
    for (size_t t = 0; t < tokens; t++)
        if (host[t] >= 0 && (uint64_t)host[t] >= c->nslots) {
            st = oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                           "%s: slot %lld of token %zu is beyond the cache's %llu slots", op,
                           (long long)host[t], t, (unsigned long long)c->nslots);
            break;
        }
    free(host);
    return st;
}

/* kv_cache_write's launch over tokens x heads (token, head) items, as the
 * next link of a chain. */
oclf_status oclf_rope_launch_cache_write(oclf_chain *ch, const char *op, oclf_program *prog,
                                         const rope_launch *l, size_t tokens, const kv_views *v,
                                         const cache_operands *c)
{
    const size_t items = tokens * v->heads;
    if (items > OCLF_MAX_LAUNCH_ITEMS / l->local)
        return oclf_fail(ch->ctx, OCLF_UNSUPPORTED, "%s: %zu tokens exceed the launch range", op,
                         tokens);
    /* LAYOUT 0 an item per work-item, LAYOUT 1 l->items per work-group */
    const size_t global = l->layout == 0 ? oclf_round_up(items, l->local)
                                         : (items + l->items - 1) / l->items * l->local;
    cl_ulong ntok = tokens;
    oclf_arg a[] = {OCLF_ARG(v->k),      OCLF_ARG(v->ko),    OCLF_ARG(v->kts), OCLF_ARG(v->khs),
                    OCLF_ARG(v->v),      OCLF_ARG(v->vo),    OCLF_ARG(v->vts), OCLF_ARG(v->vhs),
                    OCLF_ARG(v->heads),  OCLF_ARG(v->hd),    OCLF_ARG(c->slots.mem),
                    OCLF_ARG(c->so),     OCLF_ARG(c->nslots), OCLF_ARG(ntok),
                    OCLF_ARG(c->kmem),   OCLF_ARG(c->ko),    OCLF_ARG(c->vmem), OCLF_ARG(c->vo)};
    return oclf_chain_launch(ch, prog, "kv_cache_write", a, OCLF_NARGS(a), global, l->local);
}

/* qk_norm_rope, and with `c` (qk_norm_rope_cache) the cache write: fused in
 * its kernel, or as a third kernel after the unfused two. */
static oclf_status run_qk(oclf_context *ctx, const char *op, cl_command_queue queue,
                          oclf_dtype dtype, size_t tokens, const oclf_rope *rope, size_t nq,
                          size_t nk, const oclf_buf *q_weight, const oclf_buf *k_weight, float eps,
                          const qk_operands *o, const cache_operands *c,
                          const oclf_choice *choice, cl_uint num_events,
                          const cl_event *wait_list, cl_event *event)
{
    const size_t hd = rope->head_dim;
    const oclf_operand places[] = {o->x,
                                   place_of(0, hd),
                                   place_of(0, rope->rot_dim / 2),
                                   place_of(q_weight ? q_weight->offset : 0, 0),
                                   place_of(k_weight ? k_weight->offset : 0, 0),
                                   place_of(c ? c->ko : 0, 0),
                                   place_of(c ? c->vo : 0, 0)};
    oclf_resolved r;
    oclf_program *prog = NULL;
    rope_launch l;
    oclf_status st;
    if ((st = oclf_rope_prepare(ctx, op, OCLF_OP_QK_NORM_ROPE, dtype, tokens, o->heads, hd,
                                rope->rot_dim, rope->cache_dtype, c != NULL, places,
                                OCLF_NARGS(places), choice, &r, &prog,
                                &l)) ||
        (st = validate_positions(ctx, op, queue, tokens, rope, &o->ro, num_events, wait_list)) ||
        (c && (st = oclf_rope_validate_slots(ctx, op, queue, tokens, c, num_events, wait_list))))
        return st;
    if (tokens == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    rope_args ra = make_rope_args(rope, &o->ro, tokens);
    const oclf_operand *ox = &o->x;
    cl_ulong xo = ox->offset, ts = ox->stride;
    cl_uint nq32 = (cl_uint)nq, nk32 = (cl_uint)nk;
    cl_mem qwm = q_weight ? q_weight->mem : NULL, kwm = k_weight ? k_weight->mem : NULL;
    cl_ulong qwo = q_weight ? q_weight->offset : 0, kwo = k_weight ? k_weight->offset : 0;

    if (r.path == OCLF_PATH_FUSED) {
        cache_operands none;
        memset(&none, 0, sizeof none);
        const cache_operands *cw = c ? c : &none;
        oclf_arg a[] = {OCLF_ARG(ox->mem),   OCLF_ARG(xo),     OCLF_ARG(ts),     OCLF_ARG(nq32),
                        OCLF_ARG(nk32),      OCLF_ARG(qwm),    OCLF_ARG(qwo),    OCLF_ARG(kwm),
                        OCLF_ARG(kwo),       OCLF_ARG(eps),    OCLF_ARG(ra.pos), OCLF_ARG(ra.po),
                        OCLF_ARG(ra.pos64),  OCLF_ARG(ra.cache), OCLF_ARG(ra.co), OCLF_ARG(ra.cs),
                        OCLF_ARG(ra.max_pos), OCLF_ARG(ra.tokens), OCLF_ARG(ra.hd),
                        OCLF_ARG(ra.rot),    OCLF_ARG(ra.neox), OCLF_ARG(l.rpg),
                        OCLF_ARG_LOCAL(l.stage_size),
                        /* the cache-writing kernel's (ignored without `c`) */
                        OCLF_ARG(cw->slots.mem), OCLF_ARG(cw->so), OCLF_ARG(cw->nslots),
                        OCLF_ARG(cw->kmem), OCLF_ARG(cw->ko), OCLF_ARG(cw->vmem),
                        OCLF_ARG(cw->vo)};
        return oclf_enqueue(ctx, queue, prog, "qk_norm_rope", a, OCLF_NARGS(a) - (c ? 0 : 7),
                            l.global, l.local, num_events, wait_list, event);
    }

    /* Unfused: the norm in place (rounded to storage, as a separate call
     * would leave it), then the public rotary kernel over the q and k views
     * of the same rows, then (qk_norm_rope_cache) the cache write of the
     * rotated K and the V heads. */
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    {
        oclf_arg a[] = {OCLF_ARG(ox->mem), OCLF_ARG(xo),     OCLF_ARG(ts),       OCLF_ARG(nq32),
                        OCLF_ARG(nk32),    OCLF_ARG(qwm),    OCLF_ARG(qwo),      OCLF_ARG(kwm),
                        OCLF_ARG(kwo),     OCLF_ARG(eps),    OCLF_ARG(ra.pos),   OCLF_ARG(ra.po),
                        OCLF_ARG(ra.pos64), OCLF_ARG(ra.max_pos), OCLF_ARG(ra.tokens),
                        OCLF_ARG(ra.hd), OCLF_ARG(l.rpg), OCLF_ARG_LOCAL(l.stage_size)};
        st = oclf_chain_launch(&ch, prog, "head_rms_norm", a, OCLF_NARGS(a), l.global, l.local);
    }
    if (st == OCLF_SUCCESS) {
        rotary_views v;
        v.q = ox->mem, v.qo = xo, v.qts = ts, v.qhs = hd, v.nq = nq32;
        v.k = nk ? ox->mem : NULL, v.ko = xo + nq * hd, v.kts = ts, v.khs = hd, v.nk = nk32;
        oclf_arg a[ROTARY_MAX_ARGS];
        const unsigned na = rotary_arglist(a, &v, &ra, &l);
        st = oclf_chain_launch(&ch, prog, "rotary_embedding", a, na, l.global, l.local);
    }
    if (st == OCLF_SUCCESS && c) {
        kv_views v;
        v.k = v.v = ox->mem;
        v.ko = xo + nq * hd, v.vo = xo + (nq + nk) * hd;
        v.kts = v.vts = ts, v.khs = v.vhs = hd;
        v.heads = nk32, v.hd = (cl_uint)hd;
        st = oclf_rope_launch_cache_write(&ch, op, prog, &l, tokens, &v, c);
    }
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    return st;
}

oclf_status oclf_qk_norm_rope(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                              size_t tokens, size_t nq, size_t nk, size_t nv,
                              const oclf_rope *rope, oclf_buf qkv, const oclf_buf *q_weight,
                              const oclf_buf *k_weight, float eps, const oclf_choice *choice,
                              cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *op = oclf_op_name(OCLF_OP_QK_NORM_ROPE);
    oclf_status st;
    qk_operands o;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)) ||
        (st = check_qk(ctx, op, dtype, tokens, rope, qkv, nq, nk, nv, q_weight, k_weight, eps,
                       &o)))
        return st;
    return run_qk(ctx, op, queue, dtype, tokens, &o.ro.rope, nq, nk, q_weight, k_weight, eps, &o,
                  NULL, choice, num_events, wait_list, event);
}

oclf_status oclf_qk_norm_rope_cache(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                    size_t tokens, size_t nq, size_t nk, size_t nv,
                                    const oclf_rope *rope, oclf_buf qkv,
                                    const oclf_buf *q_weight, const oclf_buf *k_weight,
                                    oclf_buf slot_mapping, const oclf_kv_cache *cache, float eps,
                                    const oclf_choice *choice, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event)
{
    const char *op = "qk_norm_rope_cache";
    oclf_status st;
    qk_operands o;
    cache_operands c;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)) ||
        (st = check_qk(ctx, op, dtype, tokens, rope, qkv, nq, nk, nv, q_weight, k_weight, eps,
                       &o)) ||
        (st = oclf_rope_check_cache(ctx, op, dtype, tokens, slot_mapping, cache, &c)))
        return st;
    rope = &o.ro.rope;
    cache = &c.cache;
    if (nk != cache->heads || nv != cache->heads)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: nk (%zu) and nv (%zu) must both be the cache's %zu heads", op, nk,
                         nv, cache->heads);
    if (cache->head_dim != rope->head_dim)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: the cache's head_dim %zu is not rope->head_dim %zu", op,
                         cache->head_dim, rope->head_dim);
    if (oclf_rope_overlaps_cache(&o.x, &c))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: the cache overlaps qkv", op);
    if (oclf_rope_overlaps_cache(&o.qw, &c) || oclf_rope_overlaps_cache(&o.kw, &c) ||
        oclf_rope_overlaps_cache(&o.ro.pos, &c) || oclf_rope_overlaps_cache(&o.ro.cache, &c))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: a weight, positions or cos_sin overlaps the cache", op);
    if (oclf_overlap(&c.slots, &o.x))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: slot_mapping overlaps qkv", op);
    return run_qk(ctx, op, queue, dtype, tokens, rope, nq, nk, q_weight, k_weight, eps, &o, &c,
                  choice, num_events, wait_list, event);
}
