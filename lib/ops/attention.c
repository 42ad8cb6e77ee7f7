/*
 * Attention family: attention (packed varlen sequences, contiguous K/V).
 *
 *   fused:   attention_fused (blocks of keys staged in local memory, online
 *            softmax, every query head of a KV group per work-group)
 *   unfused: [attn_widen q, k, v] -> per sequence, query head and tile of
 *            queries: the GEMM library's Sgemm (scale Q K^T) -> attn_softmax
 *            -> Sgemm (P V) -> attn_store
 *
 * Fused parameters: WGS (rows per work-group), BK (keys per staged block),
 * VEC (dot-product width; head_dim is padded to it), ACC (rows' queries and
 * accumulators in private (0) or local (1) memory). The unfused path has
 * none: the GEMM library tunes itself.
 */
#include "../internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_MAX_D 256
/* Scores in one unfused tile: 16 MiB of f32. */
#define ATTN_TILE_SCORES ((size_t)1 << 22)
/* Work-group size of the unfused kernels. */
#define ATTN_ELEM_WGS 64

static const oclf_param_spec attn_params[] = {
    {"WGS", 1, OCLF_PARAM_MAX_WGS, 1, OCLF_PARAM_DEFINE},
    {"BK", 1, 64, 0, OCLF_PARAM_DEFINE},
    {"VEC", 1, 16, 1, OCLF_PARAM_DEFINE},
    {"ACC", 0, 1, 0, OCLF_PARAM_DEFINE},
};
enum { P_WGS, P_BK, P_VEC, P_ACC, P_COUNT };
_Static_assert(sizeof attn_params / sizeof attn_params[0] == P_COUNT, "one spec per parameter");

typedef struct attn_cfg {
    int wgs, bk, vec, acc, dp;
    char defines[OCLF_DEFINES_MAX];
} attn_cfg;
OCLF_CFG_FITS(attn_cfg);

static size_t pad_dim(size_t d, size_t vec) { return (d + vec - 1) / vec * vec; }

/* Local memory of the fused kernel: the staged K and V blocks (f32), then
 * with ACC 1 each row's query and accumulator at a stride of dp + 1 and
 * its block of scores. */
static size_t stage_bytes(size_t wgs, size_t bk, size_t dp, int acc)
{
    return (2 * bk * dp + (acc ? wgs * (2 * (dp + 1) + bk) : 0)) * sizeof(float);
}

/* shape: tokens (queries), Hq, Hk, head_dim */
static void oclf_attention_heuristic(const oclf_context *ctx, oclf_dtype dtype,
                                     const oclf_shape *shape, oclf_path path, oclf_params *out)
{
    (void)dtype;
    if (path == OCLF_PATH_UNFUSED)
        return;
    const uint64_t d = shape->dim[3] ? shape->dim[3] : 1;
    int vec = 1;
    while (vec < 16 && (uint64_t)vec * 2 <= d)
        vec *= 2;
    const size_t dp = pad_dim((size_t)d, (size_t)vec);
    int wgs, bk, acc;
    if (ctx->info.type & CL_DEVICE_TYPE_CPU) {
        /* A CPU runs a group's work-items one after another on one core:
         * few rows a group keep their queries and accumulators in cache,
         * and a long key block amortizes the two barriers per block. */
        wgs = 8;
        bk = 32;
        acc = 0;
        while (bk > 1 && stage_bytes((size_t)wgs, (size_t)bk, dp, acc) > ctx->info.local_mem / 2)
            bk /= 2;
    } else {
        /* A GPU: two lockstep widths of rows share each staged block, and
         * the rows live in local memory; blocks shrink to 8 keys, then the
         * group, until everything fits. */
        wgs = ctx->info.simd_width >= 32 ? (int)ctx->info.simd_width * 2 : 64;
        bk = 32;
        acc = 1;
        while ((size_t)wgs > ctx->info.max_wgs && wgs > 1)
            wgs /= 2;
        while (bk > 8 && stage_bytes((size_t)wgs, (size_t)bk, dp, acc) > ctx->info.local_mem)
            bk /= 2;
        while (wgs > 1 && stage_bytes((size_t)wgs, (size_t)bk, dp, acc) > ctx->info.local_mem)
            wgs /= 2;
        while (bk > 1 && stage_bytes((size_t)wgs, (size_t)bk, dp, acc) > ctx->info.local_mem)
            bk /= 2;
    }
    oclf_params_set(out, "WGS", wgs);
    oclf_params_set(out, "BK", bk);
    oclf_params_set(out, "VEC", vec);
    oclf_params_set(out, "ACC", acc);
}

static oclf_status attn_config(const oclf_context *ctx, const oclf_params *p, size_t d,
                               attn_cfg *cfg)
{
    int64_t v[P_COUNT];
    memset(cfg, 0, sizeof *cfg);
    oclf_status st = oclf_params_read(ctx, attn_params, P_COUNT, p, v);
    if (st != OCLF_SUCCESS)
        return st;
    cfg->wgs = (int)v[P_WGS];
    cfg->bk = (int)v[P_BK];
    cfg->vec = (int)v[P_VEC];
    cfg->acc = (int)v[P_ACC];
    cfg->dp = (int)pad_dim(d ? d : 1, (size_t)cfg->vec);
    if (stage_bytes((size_t)cfg->wgs, (size_t)cfg->bk, (size_t)cfg->dp, cfg->acc) >
        ctx->info.local_mem)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "attention: BK = %d keys of %d floats (K and V)%s do not fit %llu "
                         "bytes of local memory",
                         cfg->bk, cfg->dp, cfg->acc ? " and WGS rows (ACC = 1)" : "",
                         (unsigned long long)ctx->info.local_mem);
    const int used = snprintf(cfg->defines, sizeof cfg->defines, "-DOCLF_DP=%d ", cfg->dp);
    oclf_param_defines(cfg->defines + used, sizeof cfg->defines - (size_t)used, attn_params,
                       P_COUNT, v);
    return OCLF_SUCCESS;
}

static oclf_status attn_program(oclf_context *ctx, oclf_dtype dtype, const char *defines,
                                oclf_program **prog)
{
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options(opts, sizeof opts, dtype, -1, defines);
    return oclf_program_get(ctx, "attention.cl", opts, prog);
}

static oclf_status oclf_attention_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                           const oclf_shape *shape, const oclf_resolved *r,
                                           int deep, oclf_op_cfg *out)
{
    (void)op;
    oclf_program *prog;
    oclf_status st;
    if (r->path == OCLF_PATH_UNFUSED) {
        if (out)
            memset(out, 0, sizeof(attn_cfg));
        if (!deep)
            return OCLF_SUCCESS;
        if ((st = attn_program(ctx, dtype, "-DOCLF_UNFUSED=1", &prog)))
            return st;
        static const char *const names[] = {"attn_widen", "attn_softmax", "attn_store"};
        return oclf_check_kernel_wgs(ctx, prog, names, OCLF_NARGS(names), ATTN_ELEM_WGS);
    }
    attn_cfg cfg;
    if ((st = attn_config(ctx, &r->params, (size_t)shape->dim[3], &cfg)))
        return st;
    if (out)
        memcpy(out, &cfg, sizeof cfg);
    if (!deep)
        return OCLF_SUCCESS;
    static const char *const fused[] = {"attention_fused"};
    if ((st = attn_program(ctx, dtype, cfg.defines, &prog)))
        return st;
    return oclf_check_kernel_wgs(ctx, prog, fused, 1, (size_t)cfg.wgs);
}

const oclf_op_hooks oclf_attention_hooks = {oclf_attention_heuristic, oclf_attention_validate};

void oclf_attention_options_init(oclf_attention_options *options)
{
    if (options)
        *options = (oclf_attention_options)OCLF_ATTENTION_OPTIONS_INIT;
}

/* ---- argument checks ---------------------------------------------------- */

/* A checked head view. */
typedef struct attn_heads {
    oclf_operand op;
    oclf_blocks blocks;
    size_t hs; /* head stride */
} attn_heads;

typedef struct attn_call {
    oclf_dtype dtype;
    size_t batch, d, tq, tk, max_sq, hq, hk;
    attn_heads q, k, v, o;
    oclf_operand cuq, cuk, slopes, sinks, lse;
    int has_alibi, has_sinks, has_lse;
    float scale, cap;
    int64_t left, right; /* causal folded in; -1 unbounded */
} attn_call;

static oclf_status check_heads(oclf_context *ctx, const char *name, oclf_heads h, size_t tokens,
                               size_t d, size_t el, attn_heads *out)
{
    char what[64];
    snprintf(what, sizeof what, "attention: %s", name);
    return oclf_check_heads(ctx, what, h, tokens, d, el, &out->op, &out->blocks, &out->hs);
}

/* 1 when an output head view can share an element with another operand. */
static int heads_meet(const attn_heads *a, const attn_heads *b)
{
    return oclf_overlap(&a->op, &b->op) && !oclf_blocks_disjoint(&a->op, a->blocks, &b->op, b->blocks);
}

static oclf_status check_args(oclf_context *ctx, oclf_dtype dtype, size_t batch, size_t d,
                              size_t tq, size_t tk, size_t max_sq, oclf_buf cuq, oclf_buf cuk,
                              oclf_heads q, oclf_heads k, oclf_heads v, oclf_heads o,
                              const oclf_attention_options *options, attn_call *c)
{
    const char *op = "attention";
    memset(c, 0, sizeof *c);
    oclf_attention_options opt;
    oclf_status st;
    if ((st = oclf_options_read(ctx, "options", options, sizeof opt, &opt, sizeof opt,
                                _Alignof(oclf_attention_options))))
        return st;
    if (d == 0 || d > ATTN_MAX_D)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: head_dim %zu is not in 1..%d", op, d,
                         ATTN_MAX_D);
    if (tq > INT_MAX || tk > INT_MAX || batch > INT_MAX - 1)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: total_q (%zu), total_k (%zu) and batch (%zu) must be below 2^31", op,
                         tq, tk, batch);
    if (!isfinite(opt.scale) || !isfinite(opt.softcap))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: scale (%g) and softcap (%g) must be finite",
                         op, (double)opt.scale, (double)opt.softcap);
    if ((opt.causal != 0 && opt.causal != 1) || (opt.window != 0 && opt.window != 1))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: causal and window must be 0 or 1", op);
    if (opt.window && (opt.window_left < -1 || opt.window_right < -1))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: window sides (%lld, %lld) must be -1 (unbounded) or >= 0", op,
                         (long long)opt.window_left, (long long)opt.window_right);
    const size_t el = oclf_dtype_size(dtype);
    if ((st = check_heads(ctx, "q", q, tq, d, el, &c->q)) ||
        (st = check_heads(ctx, "k", k, tk, d, el, &c->k)) ||
        (st = check_heads(ctx, "v", v, tk, d, el, &c->v)) ||
        (st = check_heads(ctx, "o", o, tq, d, el, &c->o)))
        return st;
    if (q.count != o.count)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: q has %zu heads and o %zu", op, q.count,
                         o.count);
    if (k.count != v.count)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: k has %zu heads and v %zu", op, k.count,
                         v.count);
    if (q.count % k.count)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: Hq = %zu query heads is not a multiple of Hk = %zu KV heads", op,
                         q.count, k.count);
    if ((st = oclf_check_vector(ctx, "attention: cu_seqlens_q", cuq, batch + 1, 4, &c->cuq)) ||
        (st = oclf_check_vector(ctx, "attention: cu_seqlens_k", cuk, batch + 1, 4, &c->cuk)))
        return st;
    if (opt.alibi_slopes &&
        (st = oclf_check_vector(ctx, "attention: alibi_slopes", *opt.alibi_slopes, q.count, 4,
                                &c->slopes)))
        return st;
    if (opt.sinks &&
        (st = oclf_check_vector(ctx, "attention: sinks", *opt.sinks, q.count, 4, &c->sinks)))
        return st;
    if (opt.lse &&
        (st = oclf_check_2d(ctx, "attention: lse", *opt.lse, q.count, tq, 4, &c->lse)))
        return st;
    if (heads_meet(&c->o, &c->q) || heads_meet(&c->o, &c->k) || heads_meet(&c->o, &c->v))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: o overlaps q, k or v", op);
    const oclf_operand *ins[] = {&c->cuq, &c->cuk, &c->slopes, &c->sinks};
    for (int i = 0; i < 4; i++)
        if (oclf_overlap(&c->o.op, ins[i]) || (opt.lse && oclf_overlap(&c->lse, ins[i])))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: o or lse overlaps the offsets, slopes or sinks", op);
    if (opt.lse && (oclf_overlap(&c->lse, &c->o.op) || oclf_overlap(&c->lse, &c->q.op) ||
                    oclf_overlap(&c->lse, &c->k.op) || oclf_overlap(&c->lse, &c->v.op)))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: lse overlaps q, k, v or o", op);
    c->dtype = dtype;
    c->batch = batch, c->d = d, c->tq = tq, c->tk = tk, c->max_sq = max_sq;
    c->hq = q.count, c->hk = k.count;
    c->has_alibi = opt.alibi_slopes != NULL;
    c->has_sinks = opt.sinks != NULL;
    c->has_lse = opt.lse != NULL;
    c->scale = opt.scale != 0.0f ? opt.scale : (float)(1.0 / sqrt((double)d));
    c->cap = opt.softcap > 0.0f ? opt.softcap : 0.0f;
    c->left = opt.window ? opt.window_left : -1;
    c->right = opt.window ? opt.window_right : -1;
    /* causal keeps j <= diag: with a window, the tighter of the two right
     * sides, and every right side allowed here is -1 or >= 0 */
    if (opt.causal)
        c->right = 0;
    return OCLF_SUCCESS;
}

/* Reads both offset arrays (blocking, after the wait list) into cu (2 x
 * (batch + 1)) and checks them against the contract. */
static oclf_status read_offsets(oclf_context *ctx, cl_command_queue queue, const attn_call *c,
                                cl_uint num_events, const cl_event *wait_list, int32_t *cu)
{
    const size_t n = c->batch + 1;
    cl_int err = clEnqueueReadBuffer(queue, c->cuq.mem, CL_TRUE, c->cuq.lo, n * 4, cu,
                                      num_events, wait_list, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, c->cuk.mem, CL_TRUE, c->cuk.lo, n * 4, cu + n,
                                  num_events, wait_list, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "reading cu_seqlens");
    for (int s = 0; s < 2; s++) {
        const int32_t *a = cu + s * n;
        const char *name = s ? "cu_seqlens_k" : "cu_seqlens_q";
        const size_t total = s ? c->tk : c->tq;
        if (a[0] != 0)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "attention: %s[0] is %d, not 0", name,
                             (int)a[0]);
        for (size_t b = 0; b < c->batch; b++) {
            if (a[b + 1] < a[b])
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                                 "attention: %s decreases at sequence %zu (%d to %d)", name, b,
                                 (int)a[b], (int)a[b + 1]);
            if (!s && (size_t)(a[b + 1] - a[b]) > c->max_sq)
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                                 "attention: sequence %zu has %d queries, more than max_seqlen_q "
                                 "= %zu",
                                 b, (int)(a[b + 1] - a[b]), c->max_sq);
        }
        if ((size_t)a[c->batch] != total)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "attention: %s ends at %d, not at the %zu tokens given", name,
                             (int)a[c->batch], total);
    }
    return OCLF_SUCCESS;
}

/* ---- fused -------------------------------------------------------------- */

static oclf_status run_fused(oclf_context *ctx, cl_command_queue queue, const attn_call *c,
                             const attn_cfg *cfg, cl_uint num_events, const cl_event *wait_list,
                             cl_event *event)
{
    const size_t g = c->hq / c->hk, wgs = (size_t)cfg->wgs;
    if (c->max_sq > (size_t)INT_MAX / g)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "attention: max_seqlen_q x Hq / Hk exceeds 2^31");
    const size_t nqb = (c->max_sq * g + wgs - 1) / wgs;
    size_t groups;
    if (__builtin_mul_overflow(nqb, c->batch * c->hk, &groups) ||
        groups > OCLF_MAX_LAUNCH_ITEMS / wgs)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "attention: %zu blocks of queries x %zu sequences x %zu KV heads exceed "
                         "the launch range",
                         nqb, c->batch, c->hk);
    oclf_program *prog;
    oclf_status st = attn_program(ctx, c->dtype, cfg->defines, &prog);
    if (st != OCLF_SUCCESS)
        return st;
    cl_ulong qo = c->q.op.offset, qts = c->q.op.stride, qhs = c->q.hs;
    cl_ulong ko = c->k.op.offset, kts = c->k.op.stride, khs = c->k.hs;
    cl_ulong vo = c->v.op.offset, vts = c->v.op.stride, vhs = c->v.hs;
    cl_ulong oo = c->o.op.offset, ots = c->o.op.stride, ohs = c->o.hs;
    cl_ulong cuqo = c->cuq.offset, cuko = c->cuk.offset;
    cl_uint nqb32 = (cl_uint)nqb, hk = (cl_uint)c->hk, g32 = (cl_uint)g, d = (cl_uint)c->d;
    cl_uint tq = (cl_uint)c->tq, tk = (cl_uint)c->tk;
    cl_uint msq = c->max_sq > UINT_MAX ? UINT_MAX : (cl_uint)c->max_sq;
    cl_long left = c->left, right = c->right;
    /* An absent optional operand is never read; o stands in for its handle. */
    cl_mem sl = c->has_alibi ? c->slopes.mem : c->o.op.mem, si = c->has_sinks ? c->sinks.mem : c->o.op.mem;
    cl_mem lm = c->has_lse ? c->lse.mem : c->o.op.mem;
    cl_ulong slo = c->slopes.offset, sio = c->sinks.offset, lso = c->lse.offset;
    cl_ulong lss = c->lse.stride;
    cl_uint ha = (cl_uint)c->has_alibi, hsk = (cl_uint)c->has_sinks, hl = (cl_uint)c->has_lse;
    oclf_arg a[] = {OCLF_ARG(c->q.op.mem), OCLF_ARG(qo),    OCLF_ARG(qts),   OCLF_ARG(qhs),
                    OCLF_ARG(c->k.op.mem), OCLF_ARG(ko),    OCLF_ARG(kts),   OCLF_ARG(khs),
                    OCLF_ARG(c->v.op.mem), OCLF_ARG(vo),    OCLF_ARG(vts),   OCLF_ARG(vhs),
                    OCLF_ARG(c->o.op.mem), OCLF_ARG(oo),    OCLF_ARG(ots),   OCLF_ARG(ohs),
                    OCLF_ARG(c->cuq.mem),  OCLF_ARG(cuqo),  OCLF_ARG(c->cuk.mem), OCLF_ARG(cuko),
                    OCLF_ARG(nqb32),       OCLF_ARG(hk),    OCLF_ARG(g32),   OCLF_ARG(d),
                    OCLF_ARG(tq),          OCLF_ARG(tk),    OCLF_ARG(msq),   OCLF_ARG(c->scale),
                    OCLF_ARG(c->cap),      OCLF_ARG(left),  OCLF_ARG(right), OCLF_ARG(sl),
                    OCLF_ARG(slo),         OCLF_ARG(ha),    OCLF_ARG(si),    OCLF_ARG(sio),
                    OCLF_ARG(hsk),         OCLF_ARG(lm),    OCLF_ARG(lso),   OCLF_ARG(lss),
                    OCLF_ARG(hl),
                    OCLF_ARG_LOCAL(stage_bytes((size_t)cfg->wgs, (size_t)cfg->bk,
                                                   (size_t)cfg->dp, cfg->acc))};
    return oclf_enqueue(ctx, queue, prog, "attention_fused", a, OCLF_NARGS(a), groups * wgs, wgs,
                        num_events, wait_list, event);
}

/* ---- unfused ------------------------------------------------------------ */

static oclf_status gemm(oclf_chain *ch, int trans_b, size_t m, size_t n, size_t kd, float alpha,
                        cl_mem a, size_t ao, size_t lda, cl_mem b, size_t bo, size_t ldb,
                        cl_mem cm, size_t ldc)
{
    return oclf_chain_sgemm(ch, "attention", trans_b, m, n, kd, alpha, a, ao, lda, b, bo, ldb, cm,
                            0, ldc);
}

/* Where the GEMMs read one operand's heads: the caller's f32 buffer as it
 * is, or its packed f32 copy. */
typedef struct gemm_view {
    cl_mem mem;
    size_t off, ts, hs;
} gemm_view;

static oclf_status widen(oclf_chain *ch, oclf_program *prog, const attn_heads *h, size_t heads,
                         size_t d, size_t tokens, cl_mem dst, gemm_view *out)
{
    cl_ulong so = h->op.offset, sts = h->op.stride, shs = h->hs, t = tokens;
    cl_uint nh = (cl_uint)heads, d32 = (cl_uint)d;
    oclf_arg a[] = {OCLF_ARG(h->op.mem), OCLF_ARG(so), OCLF_ARG(sts), OCLF_ARG(shs),
                    OCLF_ARG(nh),        OCLF_ARG(d32), OCLF_ARG(t),  OCLF_ARG(dst)};
    *out = (gemm_view){dst, 0, heads * d, d};
    return oclf_chain_launch(ch, prog, "attn_widen", a, OCLF_NARGS(a),
                             oclf_round_up(tokens * heads * d, ATTN_ELEM_WGS), ATTN_ELEM_WGS);
}

static oclf_status run_unfused(oclf_context *ctx, oclf_chain *ch, const attn_call *c,
                               const int32_t *cu)
{
    oclf_program *prog;
    oclf_status st = attn_program(ctx, c->dtype, "-DOCLF_UNFUSED=1", &prog);
    if (st != OCLF_SUCCESS)
        return st;
    const int32_t *cuq = cu, *cuk = cu + c->batch + 1;
    size_t max_sk = 0, max_sq = 0;
    for (size_t b = 0; b < c->batch; b++) {
        max_sk = (size_t)(cuk[b + 1] - cuk[b]) > max_sk ? (size_t)(cuk[b + 1] - cuk[b]) : max_sk;
        max_sq = (size_t)(cuq[b + 1] - cuq[b]) > max_sq ? (size_t)(cuq[b + 1] - cuq[b]) : max_sq;
    }
    /* A tile of queries whose scores fit the bound (one row at least). */
    size_t tile = max_sk ? ATTN_TILE_SCORES / max_sk : max_sq;
    tile = tile < 1 ? 1 : tile > max_sq ? max_sq : tile;
    const size_t cap = (size_t)ctx->info.max_alloc;
    const int conv = c->dtype != OCLF_F32;
    cl_mem qf = NULL, kf = NULL, vf = NULL, sc = NULL, ot = NULL;
    if (tile * (max_sk ? max_sk : 1) * 4 > cap || (conv && c->tq * c->hq * c->d * 4 > cap) ||
        (conv && c->tk * c->hk * c->d * 4 > cap)) {
        st = oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                       "attention: an unfused temporary exceeds the device's largest allocation");
        goto done;
    }
    gemm_view gq = {c->q.op.mem, c->q.op.offset, c->q.op.stride, c->q.hs};
    gemm_view gk = {c->k.op.mem, c->k.op.offset, c->k.op.stride, c->k.hs};
    gemm_view gv = {c->v.op.mem, c->v.op.offset, c->v.op.stride, c->v.hs};
    const float zero = 0.0f;
    if ((st = oclf_temp_buffer(ctx, tile * (max_sk ? max_sk : 1) * 4, &sc)) ||
        (st = oclf_temp_buffer(ctx, tile * c->d * 4, &ot)))
        goto done;
    /* The GEMMs compute alpha A B + 0 C: C starts cleared so that no stale
     * NaN of a fresh allocation can survive a multiplication by 0. */
    for (int i = 0; i < 2; i++) {
        cl_event ev = NULL;
        cl_int err = clEnqueueFillBuffer(ch->queue, i ? ot : sc, &zero, sizeof zero, 0,
                                         i ? tile * c->d * 4 : tile * (max_sk ? max_sk : 1) * 4,
                                         ch->prev ? 1 : ch->num_events,
                                         ch->prev ? &ch->prev : ch->wait_list, &ev);
        if (err != CL_SUCCESS) {
            st = oclf_fail_cl(ctx, err, "clEnqueueFillBuffer(attention tile)");
            goto done;
        }
        if (ch->prev)
            clReleaseEvent(ch->prev);
        ch->prev = ev;
    }
    if (conv && c->tk > 0) {
        if ((st = oclf_temp_buffer(ctx, c->tq * c->hq * c->d * 4, &qf)) ||
            (st = oclf_temp_buffer(ctx, c->tk * c->hk * c->d * 4, &kf)) ||
            (st = oclf_temp_buffer(ctx, c->tk * c->hk * c->d * 4, &vf)) ||
            (st = widen(ch, prog, &c->q, c->hq, c->d, c->tq, qf, &gq)) ||
            (st = widen(ch, prog, &c->k, c->hk, c->d, c->tk, kf, &gk)) ||
            (st = widen(ch, prog, &c->v, c->hk, c->d, c->tk, vf, &gv)))
            goto done;
    }
    const size_t g = c->hq / c->hk;
    for (size_t b = 0; b < c->batch; b++) {
        const size_t q0 = (size_t)cuq[b], sq = (size_t)(cuq[b + 1] - cuq[b]);
        const size_t k0 = (size_t)cuk[b], sk = (size_t)(cuk[b + 1] - cuk[b]);
        for (size_t h = 0; h < c->hq; h++) {
            const size_t kh = h / g;
            for (size_t i0 = 0; i0 < sq; i0 += tile) {
                const size_t rows = sq - i0 < tile ? sq - i0 : tile, t0 = q0 + i0;
                if (sk && (st = gemm(ch, 1, rows, sk, c->d, c->scale, gq.mem,
                                     gq.off + t0 * gq.ts + h * gq.hs, gq.ts, gk.mem,
                                     gk.off + k0 * gk.ts + kh * gk.hs, gk.ts, sc, sk)))
                    goto done;
                cl_uint rows32 = (cl_uint)rows, sk32 = (cl_uint)sk;
                cl_long i0l = (cl_long)i0, shift = (cl_long)sk - (cl_long)sq;
                cl_long left = c->left, right = c->right;
                cl_mem sl = c->has_alibi ? c->slopes.mem : sc, si = c->has_sinks ? c->sinks.mem : sc;
                cl_mem lm = c->has_lse ? c->lse.mem : sc;
                cl_ulong sli = c->slopes.offset + h, sii = c->sinks.offset + h;
                cl_ulong lsi = c->lse.offset + h * c->lse.stride + t0;
                cl_uint ha = (cl_uint)c->has_alibi, hs = (cl_uint)c->has_sinks;
                cl_uint hl = (cl_uint)c->has_lse;
                oclf_arg a[] = {OCLF_ARG(sc),   OCLF_ARG(rows32), OCLF_ARG(sk32), OCLF_ARG(i0l),
                                OCLF_ARG(shift), OCLF_ARG(c->cap), OCLF_ARG(left), OCLF_ARG(right),
                                OCLF_ARG(sl),   OCLF_ARG(sli),    OCLF_ARG(ha),   OCLF_ARG(si),
                                OCLF_ARG(sii),  OCLF_ARG(hs),     OCLF_ARG(lm),   OCLF_ARG(lsi),
                                OCLF_ARG(hl)};
                if ((st = oclf_chain_launch(ch, prog, "attn_softmax", a, OCLF_NARGS(a),
                                            oclf_round_up(rows, ATTN_ELEM_WGS), ATTN_ELEM_WGS)))
                    goto done;
                if (sk && (st = gemm(ch, 0, rows, c->d, sk, 1.0f, sc, 0, sk, gv.mem,
                                     gv.off + k0 * gv.ts + kh * gv.hs, gv.ts, ot, c->d)))
                    goto done;
                cl_uint d32 = (cl_uint)c->d, zero_out = sk == 0;
                cl_ulong oo = c->o.op.offset + t0 * c->o.op.stride + h * c->o.hs;
                cl_ulong ots = c->o.op.stride;
                oclf_arg s[] = {OCLF_ARG(ot),       OCLF_ARG(rows32), OCLF_ARG(d32),
                                OCLF_ARG(zero_out), OCLF_ARG(c->o.op.mem), OCLF_ARG(oo),
                                OCLF_ARG(ots)};
                if ((st = oclf_chain_launch(ch, prog, "attn_store", s, OCLF_NARGS(s),
                                            oclf_round_up(rows * c->d, ATTN_ELEM_WGS),
                                            ATTN_ELEM_WGS)))
                    goto done;
            }
        }
    }
done:;
    cl_mem all[] = {qf, kf, vf, sc, ot};
    for (int i = 0; i < 5; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* freed by OpenCL once the launches finish */
    return st;
}

oclf_status oclf_attention(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                           size_t batch, size_t head_dim, size_t total_q, size_t total_k,
                           size_t max_seqlen_q, oclf_buf cu_seqlens_q, oclf_buf cu_seqlens_k,
                           oclf_heads q, oclf_heads k, oclf_heads v, oclf_heads o,
                           const oclf_attention_options *options, const oclf_choice *choice,
                           cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    attn_call c;
    if ((st = oclf_check_call(ctx, "attention", queue, num_events, wait_list, dtype, event)) ||
        (st = check_args(ctx, dtype, batch, head_dim, total_q, total_k, max_seqlen_q,
                         cu_seqlens_q, cu_seqlens_k, q, k, v, o, options, &c)))
        return st;
    oclf_shape shape = {{total_q, c.hq, c.hk, head_dim}};
    oclf_resolved r;
    attn_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_ATTENTION, &oclf_attention_hooks, dtype, &shape,
                                     choice, &r)))
        return st;
    if (r.path == OCLF_PATH_FUSED) {
        if (r.has_cfg)
            memcpy(&cfg, &r.cfg, sizeof cfg);
        else if ((st = attn_config(ctx, &r.params, head_dim, &cfg)))
            return st;
    }
    if (batch == 0 || total_q == 0 || max_seqlen_q == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    int32_t *cu = NULL;
    if (ctx->validate || r.path == OCLF_PATH_UNFUSED) {
        if (!(cu = malloc(2 * (batch + 1) * sizeof *cu)))
            return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "attention: out of host memory");
        if ((st = read_offsets(ctx, queue, &c, num_events, wait_list, cu))) {
            free(cu);
            return st;
        }
    }
    if (r.path == OCLF_PATH_FUSED) {
        free(cu);
        return run_fused(ctx, queue, &c, &cfg, num_events, wait_list, event);
    }
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = run_unfused(ctx, &ch, &c, cu);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    free(cu);
    return st;
}
