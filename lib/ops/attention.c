/*
 * Attention family: attention (packed varlen sequences, contiguous K/V) and
 * attention_paged (the same over a paged KV cache, with split KV).
 *
 *   fused:   attention_fused (blocks of keys staged in local memory, online
 *            softmax, every query head of a KV group per work-group), or
 *            with STAGE 2 attention_decode (work-items sharing each key,
 *            16 bytes each a step, the KV group's query heads in registers),
 *            or with STAGE 3 attention_mma (prefill: S and O as matrix-unit
 *            fragments, a work-group per tile of query rows and query head)
 *            paged: the same kernel reading keys through the block table
 *            (OCLF_PAGED), with PART > 0 one work-group per partition of
 *            keys writing fp32 partials -> attention_merge
 *   unfused: [attn_widen q, k, v] -> per sequence, query head and tile of
 *            queries: the GEMM library's Sgemm (scale Q K^T) -> attn_softmax
 *            -> Sgemm (P V) -> attn_store
 *            paged: attn_gather K and V to packed f32 first
 *
 * Fused parameters: WGS (rows per work-group), BK (keys per staged block),
 * VEC (dot-product width; head_dim is padded to it), ACC (rows' queries and
 * accumulators in private (0) or local (1) memory), STAGE (K/V blocks
 * staged in local memory (1) or read by each row from global memory (0)),
 * PART (paged only: keys per split-KV partition, 0 none); with STAGE 2 (the
 * decode structure) QR (rows a work-group scores against each key) and
 * FILL (paged, PART 0: work-groups per compute unit the partitions aim for,
 * from the block table's reach; 0 no split). With STAGE 3 (attention_mma,
 * prefill on matrix-unit fragments, f16 and bf16, contiguous or paged K
 * and V, head dims that are multiples of 32 up to 128) WGS is the query rows of a
 * work-group (16 a warp of 32 work-items) and BK the keys of a tile (a
 * multiple of 32); VEC, ACC, PART and FILL mean nothing there (no split
 * of the keys). The unfused path has none: the GEMM library tunes itself.
 */
#include "attention.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split KV's partial outputs and LSEs: PART doubles until they fit. */
#define ATTN_SPLIT_TEMP ((size_t)64 << 20)

/* A GPU takes the decode structure up to this many query tokens: beyond,
 * the staged structure shares each K/V block among more rows. */
#define ATTN_DECODE_ROWS 64

/* Keys a tile of the matrix-unit structure takes by default. */
#define ATTN_MMA_BK 32

static const oclf_param_spec attn_params[] = {
    {"WGS", 1, OCLF_PARAM_MAX_WGS, 1, OCLF_PARAM_DEFINE},
    {"BK", 1, 64, 0, OCLF_PARAM_DEFINE},
    {"VEC", 1, 16, 1, OCLF_PARAM_DEFINE},
    {"ACC", 0, 1, 0, OCLF_PARAM_DEFINE},
    {"PART", 0, 1 << 24, 0, OCLF_PARAM_ARG},
    {"STAGE", 0, 3, 0, OCLF_PARAM_DEFINE},
    /* (compiled in with STAGE 2 only, so the other structures' programs
     * keep their options) */
    {"QR", 1, 64, 0, OCLF_PARAM_ARG},
    {"FILL", 0, 64, 0, OCLF_PARAM_ARG},
};
enum { P_WGS, P_BK, P_VEC, P_ACC, P_PART, P_STAGE, P_QR, P_FILL, P_COUNT };
_Static_assert(sizeof attn_params / sizeof attn_params[0] == P_COUNT, "one spec per parameter");

static size_t pad_dim(size_t d, size_t vec) { return (d + vec - 1) / vec * vec; }

/* Local memory of the fused kernel: the staged K and V blocks (f32, with
 * STAGE 1), then with ACC 1 each row's query and accumulator at a stride
 * of dp + 1 and its block of scores; one float at least, since a local
 * argument cannot be empty. */
static size_t stage_bytes(size_t wgs, size_t bk, size_t dp, int acc, int stage)
{
    const size_t n = (stage ? 2 * bk * dp : 0) + (acc ? wgs * (2 * (dp + 1) + bk) : 0);
    return (n ? n : 1) * sizeof(float);
}

/* The decode structure's work-items per key: enough for a head's 16-byte
 * units (one each), a power of two, within the sub-group width the
 * device's reduction form spans and the work-group. */
static int decode_tpk(const oclf_context *ctx, oclf_dtype dtype, size_t d, int wgs)
{
    const size_t ke = 16 / oclf_dtype_size(dtype), units = (d + ke - 1) / ke;
    size_t t = 1;
    while (t < units && t < ctx->info.subgroup_width && (int)t < wgs)
        t *= 2;
    return (int)t;
}

/* Local memory of the decode structure (cl/attention_decode.cl): the rows'
 * queries, then the local-memory reduction's QR floats a work-item or the
 * merge's state of each key slot (its max, sum and accumulator), whichever
 * is larger. */
static size_t decode_bytes(int wgs, int qr, int tpk, int ke, size_t d)
{
    const size_t slots = (size_t)(wgs / tpk), units = (d + (size_t)ke - 1) / (size_t)ke;
    const size_t dpu = (units + (size_t)tpk - 1) / (size_t)tpk * (size_t)tpk * (size_t)ke;
    const size_t red = (size_t)qr * (size_t)wgs, merge = slots * (dpu + 2);
    return ((size_t)qr * dpu + (red > merge ? red : merge)) * sizeof(float);
}

/* The matrix-unit structure keeps its query fragments in local memory
 * (OCLF_FA_QL) above this head dim: at 128 the accumulators (64 registers a
 * lane) and the query (32) left ptxas at 224 registers, one group of 8
 * warps an SM; with the query in local memory 168, three groups of 4. */
#define ATTN_MMA_QREG_MAX_D 64

/* Local memory of the matrix-unit structure (cl/attention_mma.cl, which
 * declares it in the kernel): a tile of K (bk rows of d / 2 words) and of
 * V transposed (d rows of bk / 2 words), each row padded to 16 words
 * modulo 32, above ATTN_MMA_QREG_MAX_D the query rows (wgs rows as K's),
 * and with the emulated instruction each warp's scratch. */
static size_t mma_bytes(size_t wgs, size_t bk, size_t d, int native)
{
    const size_t krow = d / 2 + (d / 2 % 32 == 0 ? 16 : 0);
    const size_t vrow = bk / 2 + (bk / 2 % 32 == 0 ? 16 : 0);
    const size_t ql = d > ATTN_MMA_QREG_MAX_D ? wgs * krow : 0;
    const size_t scratch = native ? 0 : wgs / 16 * (32 * 4 + 32 * 2 + 32);
    /* (and, paged, the tile's token addresses, a launch argument) */
    return (bk * krow + d * vrow + ql + scratch + 2 * bk) * 4;
}

/* The bytes of the fused kernels' local argument (the matrix-unit
 * structure's local memory is its own: one float stands in). */
static size_t cfg_local_bytes(const attn_cfg *c, size_t d)
{
    if (c->stage == 3)
        return sizeof(float);
    return c->stage == 2 ? decode_bytes(c->wgs, c->qr, c->tpk, c->ke, d)
                         : stage_bytes((size_t)c->wgs, (size_t)c->bk, (size_t)c->dp, c->acc,
                                       c->stage);
}

/* A GPU's staged structure (STAGE 1, ACC 1): two lockstep widths of rows
 * share each staged block, and the rows live in local memory; blocks
 * shrink to 8 keys, then the group, until everything fits. */
static void staged_gpu_defaults(const oclf_context *ctx, size_t dp, int *wgs_out, int *bk_out)
{
    int wgs = ctx->info.simd_width >= 32 ? (int)ctx->info.simd_width * 2 : 64, bk = 32;
    while ((size_t)wgs > ctx->info.max_wgs && wgs > 1)
        wgs /= 2;
    while (bk > 8 && stage_bytes((size_t)wgs, (size_t)bk, dp, 1, 1) > ctx->info.local_mem)
        bk /= 2;
    while (wgs > 1 && stage_bytes((size_t)wgs, (size_t)bk, dp, 1, 1) > ctx->info.local_mem)
        wgs /= 2;
    while (bk > 1 && stage_bytes((size_t)wgs, (size_t)bk, dp, 1, 1) > ctx->info.local_mem)
        bk /= 2;
    *wgs_out = wgs;
    *bk_out = bk;
}

/* 1 where the matrix-unit structure (STAGE 3) takes this head dim. */
static int mma_dim(size_t d) { return d && d % 32 == 0 && d <= 128; }

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
    int wgs, bk, acc, stage;
    if (ctx->info.type & CL_DEVICE_TYPE_CPU) {
        /* A CPU runs a group's work-items one after another on one core:
         * few rows a group keep their queries and accumulators in cache,
         * each reads its keys from L1 after the first (no staging), and a
         * long key block amortizes the barrier per block. */
        /* Few queries (decode) stream their keys from DRAM: a group takes
         * 32 rows, a query's heads over several KV heads, so a block's
         * tokens pass through the cache as longer runs of memory (1.6x the
         * bandwidth of 8 rows on the CPU here). Many queries (prefill)
         * reread keys that stay in cache: 8 rows a group keep each
         * group's working set small (1.3x faster than 32 there). */
        wgs = shape->dim[0] <= 64 ? 32 : 8;
        bk = 32;
        acc = 0;
        stage = 0;
        while (bk > 1 && stage_bytes((size_t)wgs, (size_t)bk, dp, acc, stage) > ctx->info.local_mem / 2)
            bk /= 2;
    } else {
        staged_gpu_defaults(ctx, dp, &wgs, &bk);
        acc = 1;
        stage = 1;
    }
    /* Few query rows on a GPU (decode, tokens standing for sequences):
     * the decode structure, 128 work-items (4 warps' worth of keys in
     * flight), 2 query heads of the KV group a group, and partitions of
     * the keys aimed at 4 groups a compute unit, so that one sequence
     * fills the device. Each row holds its query slice and accumulator in
     * registers: 4 rows spilled on gfx1100 (16-bit caches, head dim 128)
     * in the cross-compile suite, 2 build without spills everywhere; a
     * group of 4 heads then reads its K/V twice, the second time mostly
     * from L2. BK, VEC and ACC mean nothing to the decode kernel. */
    int qr = 1, fill = 0;
    const uint64_t grp = shape->dim[2] ? shape->dim[1] / shape->dim[2] : 1;
    if (!(ctx->info.type & CL_DEVICE_TYPE_CPU) && shape->dim[0] <= ATTN_DECODE_ROWS) {
        stage = 2;
        wgs = ctx->info.max_wgs >= 128 ? 128 : (int)ctx->info.max_wgs;
        qr = grp < 2 ? 1 : 2;
        fill = 4;
        vec = 1;
        bk = 1;
        acc = 0;
    }
    /* Few query rows on a CPU: the decode structure's one-work-item form
     * (WGS 1), a group's rows every query head of a query (as many as
     * keep its queries and accumulators within 32 KiB each, 64 at most),
     * so that each K and V element is loaded and widened once for its KV
     * group and a block's tokens stream through the cache with all their
     * heads, and partitions aimed at 8 groups a core, as the split below. */
    if ((ctx->info.type & CL_DEVICE_TYPE_CPU) && shape->dim[0] <= ATTN_DECODE_ROWS) {
        const uint64_t hq = shape->dim[1] ? shape->dim[1] : 1, cap = 8192 / d ? 8192 / d : 1;
        stage = 2;
        wgs = 1;
        qr = (int)(hq < cap ? hq : cap);
        qr = qr > 64 ? 64 : qr;
        fill = 8;
        vec = 1;
        bk = 1;
        acc = 0;
    }
    /* Prefill on a GPU whose matrix unit the library drives natively (the
     * fact linear's matrix-unit structure uses): f16 and bf16, head dims
     * the fragments tile. A group takes 128 query rows (8 warps of 16),
     * 64 where the query goes through local memory (so that three groups'
     * tiles fit an SM), and tiles of ATTN_MMA_BK keys, contiguous or paged
     * (chunked prefill: no split of the keys). */
    const int mrows = d > ATTN_MMA_QREG_MAX_D ? 64 : 128;
    if (!(ctx->info.type & CL_DEVICE_TYPE_CPU) && ctx->info.mma && dtype != OCLF_F32 &&
        shape->dim[0] > ATTN_DECODE_ROWS && mma_dim((size_t)d) &&
        ctx->info.max_wgs >= 2 * (size_t)mrows &&
        mma_bytes((size_t)mrows, ATTN_MMA_BK, (size_t)d, 1) <= ctx->info.local_mem) {
        stage = 3;
        wgs = mrows;
        bk = ATTN_MMA_BK;
        vec = 8;
        acc = 0;
        qr = 1;
        fill = 0;
    }
    oclf_params_set(out, "WGS", wgs);
    oclf_params_set(out, "BK", bk);
    oclf_params_set(out, "VEC", vec);
    oclf_params_set(out, "ACC", acc);
    oclf_params_set(out, "STAGE", stage);
    oclf_params_set(out, "QR", qr);
    oclf_params_set(out, "FILL", fill);
    /* Split KV where sequences x KV heads (tokens stand for sequences: a
     * decode batch has one each) leave the device short of work-groups: 8
     * a compute unit keep a CPU's cores and a GPU's schedulers busy. A
     * GPU's partitions are shorter, since its groups are many and small. */
    /* (oclf_attention ignores PART.) */
    int part = 0;
    if (stage != 2 && shape->dim[0] * shape->dim[2] <
        8 * (uint64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1))
        part = ctx->info.type & CL_DEVICE_TYPE_CPU ? 1024 : 512;
    oclf_params_set(out, "PART", part);
}

/* wgs_default: WGS is the heuristic's, not the caller's or a record's, so
 * it may give way (halve) where a BK that was asked for leaves its rows no
 * room in local memory. */
oclf_status oclf_attn_config(const oclf_context *ctx, oclf_dtype dtype, const oclf_params *p,
                             size_t d, int paged, int wgs_default, attn_cfg *cfg)
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
    cfg->stage = (int)v[P_STAGE];
    cfg->paged = paged;
    cfg->part = paged ? (size_t)v[P_PART] : 0;
    cfg->dp = (int)pad_dim(d ? d : 1, (size_t)cfg->vec);
    cfg->qr = (int)v[P_QR];
    cfg->fill = paged ? (int)v[P_FILL] : 0;
    cfg->ke = (int)(16 / oclf_dtype_size(dtype));
    cfg->tpk = decode_tpk(ctx, dtype, d ? d : 1, cfg->wgs);
    if (cfg->stage == 3) {
        const int native = ctx->info.mma;
        if (dtype == OCLF_F32 || !mma_dim(d))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "attention: STAGE = 3 (matrix units) takes f16 or bf16 and a head "
                             "dim that is a multiple of 32 up to 128 (got %s, %zu)",
                             oclf_dtype_name(dtype), d);
        if (cfg->wgs % 16 || cfg->bk % 32 || (size_t)cfg->wgs * 2 > ctx->info.max_wgs)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "attention: STAGE = 3 takes WGS a multiple of 16 (rows; twice as "
                             "many work-items, at most %zu) and BK a multiple of 32 (got %d, %d)",
                             ctx->info.max_wgs, cfg->wgs, cfg->bk);
        if (mma_bytes((size_t)cfg->wgs, (size_t)cfg->bk, d, native) > ctx->info.local_mem)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "attention: STAGE = 3 with WGS = %d and BK = %d needs %zu bytes of "
                             "local memory, the device has %llu",
                             cfg->wgs, cfg->bk,
                             mma_bytes((size_t)cfg->wgs, (size_t)cfg->bk, d, native),
                             (unsigned long long)ctx->info.local_mem);
        /* no split of the keys: chunked prefill has rows enough */
        cfg->part = 0;
        cfg->fill = 0;
        const int used = snprintf(cfg->defines, sizeof cfg->defines,
                                  "-DOCLF_HD=%zu -DOCLF_MMA=%d -DOCLF_STAGE=3 -DOCLF_WGS=%d "
                                  "-DOCLF_BK=%d -DOCLF_FA_QL=%d%s",
                                  d, native, cfg->wgs, cfg->bk, d > ATTN_MMA_QREG_MAX_D,
                                  paged ? " -DOCLF_PAGED=1" : "");
        return used > 0 && (size_t)used < sizeof cfg->defines
                   ? OCLF_SUCCESS
                   : oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "attention: options too long");
    }
    if (cfg->stage == 2) {
        if (cfg_local_bytes(cfg, d ? d : 1) > ctx->info.local_mem)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "attention: the decode structure's WGS = %d work-items and QR = "
                             "%d rows do not fit %llu bytes of local memory",
                             cfg->wgs, cfg->qr, (unsigned long long)ctx->info.local_mem);
        /* the head dim, the work-items per key and the rows are compiled
         * in; BK, VEC and ACC mean nothing here */
        const int used = snprintf(cfg->defines, sizeof cfg->defines,
                                  "-DOCLF_HD=%zu -DOCLF_TPK=%d -DOCLF_QR=%d%s -DOCLF_STAGE=2 "
                                  "-DOCLF_WGS=%d",
                                  d ? d : 1, cfg->tpk, cfg->qr, paged ? " -DOCLF_PAGED=1" : "",
                                  cfg->wgs);
        return used > 0 && (size_t)used < sizeof cfg->defines
                   ? OCLF_SUCCESS
                   : oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "attention: options too long");
    }
    while (wgs_default && cfg->wgs > 1 &&
           stage_bytes((size_t)cfg->wgs, (size_t)cfg->bk, (size_t)cfg->dp, cfg->acc, cfg->stage) >
               ctx->info.local_mem)
        v[P_WGS] = cfg->wgs /= 2;
    if (stage_bytes((size_t)cfg->wgs, (size_t)cfg->bk, (size_t)cfg->dp, cfg->acc, cfg->stage) >
        ctx->info.local_mem)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "attention: BK = %d keys of %d floats (K and V)%s do not fit %llu "
                         "bytes of local memory",
                         cfg->bk, cfg->dp, cfg->acc ? " and WGS rows (ACC = 1)" : "",
                         (unsigned long long)ctx->info.local_mem);
    /* PART is a kernel argument: only the compiled-in parameters go into
     * the program's options. */
    /* reading straight from global memory, the head dim is compiled in
     * (whole vectors, then a tail of known length) */
    char hd[32] = "";
    if (!cfg->stage)
        snprintf(hd, sizeof hd, " -DOCLF_HD=%zu", d ? d : 1);
    const int used = snprintf(cfg->defines, sizeof cfg->defines, "-DOCLF_DP=%d%s%s ", cfg->dp,
                              hd, paged ? " -DOCLF_PAGED=1" : "");
    oclf_param_defines(cfg->defines + used, sizeof cfg->defines - (size_t)used, attn_params,
                       P_COUNT, v);
    return OCLF_SUCCESS;
}

/* The program's options: the configuration's, and for the matrix-unit
 * structure whether softcap or ALiBi (score) and dropout (drop) are
 * compiled in: the common build's tile loop holds neither. The decode
 * structure compiles dropout in only where a call asks for it: its
 * generator's registers would cost every other call occupancy. */
static void mma_defines(char *out, size_t n, const attn_cfg *cfg, int score, int drop)
{
    if (cfg->stage == 3)
        snprintf(out, n, "%s -DOCLF_FA_SCORE=%d -DOCLF_FA_DROP=%d", cfg->defines, score, drop);
    else if (cfg->stage == 2 && drop)
        snprintf(out, n, "%s -DOCLF_DROP=1", cfg->defines);
    else
        snprintf(out, n, "%s", cfg->defines);
}

/* The matrix-unit structure's build with softcap or ALiBi takes 255
 * registers at head dims above ATTN_MMA_QREG_MAX_D and spills with paging
 * or dropout beside them (ptxas, sm_90): where the instruction is native,
 * such calls run the staged structure with its GPU defaults instead. */
oclf_status oclf_attn_mma_fallback(const oclf_context *ctx, const attn_call *c, attn_cfg *cfg)
{
    if (cfg->stage != 3 || !ctx->info.mma || c->d <= ATTN_MMA_QREG_MAX_D ||
        !(c->cap > 0.0f || c->has_alibi))
        return OCLF_SUCCESS;
    int vec = 1, wgs, bk;
    while (vec < 16 && (size_t)vec * 2 <= c->d)
        vec *= 2;
    staged_gpu_defaults(ctx, pad_dim(c->d, (size_t)vec), &wgs, &bk);
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "WGS", wgs);
    oclf_params_set(&p, "BK", bk);
    oclf_params_set(&p, "VEC", vec);
    oclf_params_set(&p, "ACC", 1);
    oclf_params_set(&p, "STAGE", 1);
    oclf_params_set(&p, "PART", 0);
    return oclf_attn_config(ctx, c->dtype, &p, c->d, c->paged, 0, cfg);
}

static oclf_status attn_program_aligned(oclf_context *ctx, oclf_dtype dtype, const char *defines,
                                        int aligned, oclf_program **prog)
{
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options_aligned(opts, sizeof opts, dtype, -1, defines, aligned);
    return oclf_program_get(ctx, "attention.cl", opts, prog);
}

oclf_status oclf_attn_program(oclf_context *ctx, oclf_dtype dtype, const char *defines,
                              oclf_program **prog)
{
    return attn_program_aligned(ctx, dtype, defines, 0, prog);
}

static oclf_status oclf_attention_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                           const oclf_shape *shape, const oclf_resolved *r,
                                           int deep, oclf_op_cfg *out)
{
    oclf_program *prog;
    oclf_status st;
    const int paged = op == OCLF_OP_ATTENTION_PAGED;
    if (r->path == OCLF_PATH_UNFUSED) {
        if (out)
            memset(out, 0, sizeof(attn_cfg));
        if (!deep)
            return OCLF_SUCCESS;
        if ((st = oclf_attn_program(ctx, dtype, "-DOCLF_UNFUSED=1", &prog)))
            return st;
        static const char *const names[] = {"attn_widen", "attn_softmax", "attn_store",
                                            "attn_gather"};
        return oclf_check_kernel_wgs(ctx, prog, names, OCLF_NARGS(names), ATTN_ELEM_WGS);
    }
    attn_cfg cfg;
    if ((st = oclf_attn_config(ctx, dtype, &r->params, (size_t)shape->dim[3], paged,
                               r->wgs_default, &cfg)))
        return st;
    if (out)
        memcpy(out, &cfg, sizeof cfg);
    if (!deep)
        return OCLF_SUCCESS;
    static const char *const fused[] = {"attention_fused"}, *const decode[] = {"attention_decode"},
                             *const mma[] = {"attention_mma"}, *const merge[] = {"attention_merge"};
    /* (the build whose 16-byte units start on 16 bytes, named for the
     * cross-compile list, which takes the first build a check names; a
     * call takes it where its K and V allow) */
    /* (the matrix-unit structure's build without softcap, ALiBi and
     * dropout: the common one) */
    char defs[OCLF_DEFINES_MAX + 64];
    mma_defines(defs, sizeof defs, &cfg, 0, 0);
    if (cfg.stage >= 2)
        oclf_list_aligned_variant(ctx, "attention.cl", dtype, -1, defs, cfg.ke);
    if ((st = oclf_attn_program(ctx, dtype, defs, &prog)) ||
        (st = oclf_check_kernel_wgs(ctx, prog,
                                    cfg.stage == 3 ? mma : cfg.stage == 2 ? decode : fused, 1,
                                    (size_t)cfg.wgs * (cfg.stage == 3 ? 2 : 1))))
        return st;
    return cfg.part || cfg.fill ? oclf_check_kernel_wgs(ctx, prog, merge, 1, ATTN_ELEM_WGS)
                                : OCLF_SUCCESS;
}

const oclf_op_hooks oclf_attention_hooks = {oclf_attention_heuristic, oclf_attention_validate};

void oclf_attention_options_init(oclf_attention_options *options)
{
    if (options)
        *options = (oclf_attention_options)OCLF_ATTENTION_OPTIONS_INIT;
}

/* ---- argument checks shared by both entry points ---------------------- */

oclf_status oclf_attn_check_heads(oclf_context *ctx, const attn_call *c, const char *name,
                                  oclf_heads h, size_t tokens, size_t el, attn_heads *out)
{
    char what[64];
    snprintf(what, sizeof what, "%s: %s", c->op, name);
    return oclf_check_heads(ctx, what, h, tokens, c->d, el, &out->op, &out->blocks, &out->hs);
}

/* 1 when an output head view can share an element with another operand. */
static int heads_meet(const attn_heads *a, const attn_heads *b)
{
    return oclf_overlap(&a->op, &b->op) && !oclf_blocks_disjoint(&a->op, a->blocks, &b->op, b->blocks);
}

/* What both entry points check the same way: options, the head dim,
 * sizes, q and o, the query offsets and the optional operands. c->op, d,
 * batch, tq and hk are set by the caller. */
oclf_status oclf_attn_check_queries(oclf_context *ctx, oclf_dtype dtype, size_t max_sq,
                                    oclf_buf cuq, oclf_heads q, oclf_heads o,
                                    const oclf_attention_options *options, attn_call *c)
{
    const char *op = c->op;
    oclf_attention_options opt;
    oclf_status st;
    char what[64];
    /* the first layout ends before the dropout fields */
    if ((st = oclf_options_read(ctx, "options", options,
                                offsetof(oclf_attention_options, dropout_p), &opt, sizeof opt,
                                _Alignof(oclf_attention_options))))
        return st;
    if (c->d == 0 || c->d > ATTN_MAX_D)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: head_dim %zu is not in 1..%d", op, c->d,
                         ATTN_MAX_D);
    if (c->tq > INT_MAX || c->tk > INT_MAX || c->batch > INT_MAX - 1)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: total_q (%zu), the keys (%zu) and batch (%zu) must be below 2^31", op,
                         c->tq, c->tk, c->batch);
    if (!isfinite(opt.scale) || !isfinite(opt.softcap))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: scale (%g) and softcap (%g) must be finite",
                         op, (double)opt.scale, (double)opt.softcap);
    if (!(opt.dropout_p >= 0.0f && opt.dropout_p < 1.0f))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: dropout_p %g is not in [0, 1)", op,
                         (double)opt.dropout_p);
    if ((opt.causal != 0 && opt.causal != 1) || (opt.window != 0 && opt.window != 1))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: causal and window must be 0 or 1", op);
    if (opt.window && (opt.window_left < -1 || opt.window_right < -1))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: window sides (%lld, %lld) must be -1 (unbounded) or >= 0", op,
                         (long long)opt.window_left, (long long)opt.window_right);
    const size_t el = oclf_dtype_size(dtype);
    if ((st = oclf_attn_check_heads(ctx, c, "q", q, c->tq, el, &c->q)) ||
        (st = oclf_attn_check_heads(ctx, c, "o", o, c->tq, el, &c->o)))
        return st;
    if (q.count != o.count)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: q has %zu heads and o %zu", op, q.count,
                         o.count);
    if (q.count % c->hk)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: Hq = %zu query heads is not a multiple of Hk = %zu KV heads", op,
                         q.count, c->hk);
    snprintf(what, sizeof what, "%s: cu_seqlens_q", op);
    if ((st = oclf_check_vector(ctx, what, cuq, c->batch + 1, 4, &c->cuq)))
        return st;
    snprintf(what, sizeof what, "%s: alibi_slopes", op);
    if (opt.alibi_slopes &&
        (st = oclf_check_vector(ctx, what, *opt.alibi_slopes, q.count, 4, &c->slopes)))
        return st;
    snprintf(what, sizeof what, "%s: sinks", op);
    if (opt.sinks && (st = oclf_check_vector(ctx, what, *opt.sinks, q.count, 4, &c->sinks)))
        return st;
    snprintf(what, sizeof what, "%s: lse", op);
    if (opt.lse && (st = oclf_check_2d(ctx, what, *opt.lse, q.count, c->tq, 4, &c->lse)))
        return st;
    c->dtype = dtype;
    c->max_sq = max_sq;
    c->hq = q.count;
    c->has_alibi = opt.alibi_slopes != NULL;
    c->has_sinks = opt.sinks != NULL;
    c->has_lse = opt.lse != NULL;
    c->has_drop = opt.dropout_p > 0.0f;
    c->drop_p = opt.dropout_p;
    c->seed = opt.dropout_seed, c->doff = opt.dropout_offset;
    c->scale = opt.scale != 0.0f ? opt.scale : (float)(1.0 / sqrt((double)c->d));
    c->cap = opt.softcap > 0.0f ? opt.softcap : 0.0f;
    c->left = opt.window ? opt.window_left : -1;
    c->right = opt.window ? opt.window_right : -1;
    /* causal keeps j <= diag: with a window, the tighter of the two right
     * sides, and every right side allowed here is -1 or >= 0 */
    if (opt.causal)
        c->right = 0;
    return OCLF_SUCCESS;
}

/* o and lse against everything else, once every operand is checked. */
oclf_status oclf_attn_check_outputs(oclf_context *ctx, const attn_call *c)
{
    const char *op = c->op;
    if (heads_meet(&c->o, &c->q) || heads_meet(&c->o, &c->k) || heads_meet(&c->o, &c->v))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: o overlaps q, %s", op,
                         c->paged ? "the cache" : "k or v");
    const oclf_operand *ins[] = {&c->cuq, &c->cuk, &c->slopes, &c->sinks, &c->bt};
    for (int i = 0; i < 5; i++)
        if (oclf_overlap(&c->o.op, ins[i]) || (c->has_lse && oclf_overlap(&c->lse, ins[i])))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: o or lse overlaps the offsets, %sslopes or sinks", op,
                             c->paged ? "lengths, block table, " : "");
    if (c->has_lse && (oclf_overlap(&c->lse, &c->o.op) || oclf_overlap(&c->lse, &c->q.op) ||
                       oclf_overlap(&c->lse, &c->k.op) || oclf_overlap(&c->lse, &c->v.op)))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: lse overlaps q, %s or o", op,
                         c->paged ? "the cache" : "k, v");
    return OCLF_SUCCESS;
}

/* Cumulative offsets `a` of batch + 1 entries, read on the host, against
 * the contract: from 0, non-decreasing, at most max_sq apart (0: no bound),
 * ending at total. `name` names the array in the message. */
oclf_status oclf_attn_check_offsets(oclf_context *ctx, const attn_call *c, const char *name,
                                    const int32_t *a, size_t max_sq, size_t total)
{
    if (a[0] != 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s[0] is %d, not 0", c->op, name,
                         (int)a[0]);
    for (size_t b = 0; b < c->batch; b++) {
        if (a[b + 1] < a[b])
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: %s decreases at sequence %zu (%d to %d)", c->op, name, b,
                             (int)a[b], (int)a[b + 1]);
        if (max_sq && (size_t)(a[b + 1] - a[b]) > max_sq)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: sequence %zu has %d queries, more than max_seqlen_q = %zu",
                             c->op, b, (int)(a[b + 1] - a[b]), max_sq);
    }
    if ((size_t)a[c->batch] != total)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: %s ends at %d, not at the %zu tokens given", c->op, name,
                         (int)a[c->batch], total);
    return OCLF_SUCCESS;
}

/* ---- fused -------------------------------------------------------------- */

oclf_status oclf_attn_run_fused(oclf_context *ctx, cl_command_queue queue, const attn_call *c,
                                const attn_cfg *cfg, cl_uint num_events, const cl_event *wait_list,
                                cl_event *event)
{
    const size_t g = c->hq / c->hk;
    /* work-items of a group: one a row, or a warp of 32 per 16 rows
     * (STAGE 3) */
    const size_t wgs = (size_t)cfg->wgs * (cfg->stage == 3 ? 2 : 1);
    /* rows of a query in one group: its heads of one KV head (STAGE 1 and
     * 2), all its heads (STAGE 0, whose groups span the KV heads), or one
     * query head (STAGE 3: a group per query head) */
    /* (the decode structure's one-work-item form, WGS 1, takes rows over
     * every head, as STAGE 0) */
    const int all_heads = !cfg->stage || (cfg->stage == 2 && cfg->wgs == 1);
    const size_t rpq = cfg->stage == 3 ? 1 : all_heads ? c->hq : g;
    const size_t kgroups = cfg->stage == 3 ? c->hq : all_heads ? 1 : c->hk;
    if (c->max_sq > (size_t)INT_MAX / rpq)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: max_seqlen_q x heads exceeds 2^31", c->op);
    /* rows a group takes: one a work-item, or QR scored together (STAGE 2) */
    const size_t grows = cfg->stage == 2 ? (size_t)cfg->qr : (size_t)cfg->wgs;
    const size_t nqb = (c->max_sq * rpq + grows - 1) / grows;
    /* Split KV: partitions of PART keys over the longest sequence the keys
     * allow, PART doubled until the partials fit their bound. */
    size_t part = cfg->part, nparts = 1;
    if (cfg->stage == 2 && !part && cfg->fill && c->paged) {
        /* FILL groups a compute unit: as many partitions of the block
         * table's reach as the sequences' groups leave short, each a
         * multiple of 64 keys and 256 at least (a partition's fixed cost,
         * its merge and its first rescales, stays small beside its keys). */
        const size_t want = (size_t)cfg->fill * (ctx->info.compute_units ? ctx->info.compute_units : 1);
        const size_t have = nqb * c->batch * kgroups;
        if (have < want && c->tk > 256) {
            const size_t n = (want + have - 1) / have;
            part = (c->tk + n - 1) / n;
            part = (part + 63) / 64 * 64;
            part = part < 256 ? 256 : part;
        }
    }

    const size_t row_floats = c->tq * c->hq * (c->d + 1);
    while (part && part < c->tk) {
        nparts = (c->tk + part - 1) / part;
        if (nparts * row_floats * 4 <= ATTN_SPLIT_TEMP || nparts == 1)
            break;
        part *= 2;
    }
    if (!part || part >= c->tk)
        nparts = 1;
    size_t groups;
    if (__builtin_mul_overflow(nqb, c->batch * kgroups, &groups) ||
        __builtin_mul_overflow(groups, nparts, &groups) ||
        groups > OCLF_MAX_LAUNCH_ITEMS / wgs)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: %zu blocks of queries x %zu sequences x %zu KV heads x %zu "
                         "partitions exceed the launch range",
                         c->op, nqb, c->batch, c->hk, nparts);
    /* The decode structure's aligned build: every 16-byte unit of K, V and
     * the output starts on 16 bytes; the matrix-unit structure's: every
     * unit of K and V (the offsets, strides and head dim in units). */
    const oclf_operand kv[] = {c->k.op, c->v.op,
                               {c->k.op.mem, c->k.hs, c->k.hs, 0, 0},
                               {c->v.op.mem, c->v.hs, c->v.hs, 0, 0},
                               {c->k.op.mem, c->d, c->d, 0, 0},
                               c->o.op,
                               {c->o.op.mem, c->o.hs, c->o.hs, 0, 0}};
    /* (The one-work-item form's loads need no alignment on a CPU: one
     * build serves every cache.) */
    const int aligned = (cfg->stage == 2 && cfg->wgs > 1 && oclf_rows_aligned(cfg->ke, kv, 7)) ||
                        (cfg->stage == 3 && oclf_rows_aligned(cfg->ke, kv, 5));
    oclf_program *prog;
    char defs[OCLF_DEFINES_MAX + 64];
    mma_defines(defs, sizeof defs, cfg, c->cap > 0.0f || c->has_alibi, c->has_drop);
    oclf_status st = attn_program_aligned(ctx, c->dtype, defs, aligned, &prog);
    if (st != OCLF_SUCCESS)
        return st;
    const char *kname = cfg->stage == 3   ? "attention_mma"
                        : cfg->stage == 2 ? "attention_decode"
                                          : "attention_fused";
    cl_mem pout = NULL, plse = NULL;
    if (nparts > 1 &&
        ((st = oclf_temp_buffer(ctx, nparts * c->tq * c->hq * c->d * 4, &pout)) ||
         (st = oclf_temp_buffer(ctx, nparts * c->tq * c->hq * 4, &plse))))
        goto done;
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
    cl_mem btm = c->paged ? c->bt.mem : c->o.op.mem;
    cl_ulong bto = c->bt.offset, bts = c->bts;
    cl_uint bs = (cl_uint)c->bs, nblk = c->nblk > UINT_MAX ? UINT_MAX : (cl_uint)c->nblk;
    cl_uint part32 = (cl_uint)(nparts > 1 ? part : 0), np32 = (cl_uint)nparts;
    cl_mem pom = pout ? pout : c->o.op.mem, plm = plse ? plse : c->o.op.mem;
    cl_ulong seed = c->seed, doff = c->doff;
    cl_uint hd = (cl_uint)c->has_drop;
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
                    OCLF_ARG(hl),          OCLF_ARG(btm),   OCLF_ARG(bto),   OCLF_ARG(bts),
                    OCLF_ARG(bs),          OCLF_ARG(nblk),  OCLF_ARG(part32), OCLF_ARG(np32),
                    OCLF_ARG(pom),         OCLF_ARG(plm),   OCLF_ARG(c->drop_p), OCLF_ARG(seed),
                    OCLF_ARG(doff),        OCLF_ARG(hd),
                    OCLF_ARG_LOCAL(cfg_local_bytes(cfg, c->d)),
                    OCLF_ARG_LOCAL((cfg->stage == 2 ? 4 + 2 * (size_t)cfg->wgs
                                    : c->paged && (cfg->stage == 1 || cfg->stage == 3)
                                        ? (size_t)cfg->bk
                                        : 1) *
                                   sizeof(cl_long))};
    if (nparts == 1) {
        st = oclf_enqueue(ctx, queue, prog, kname, a, OCLF_NARGS(a), groups * wgs,
                          wgs, num_events, wait_list, event);
        goto done;
    }
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = oclf_chain_launch(&ch, prog, kname, a, OCLF_NARGS(a), groups * wgs, wgs);
    if (st == OCLF_SUCCESS) {
        cl_uint hq32 = (cl_uint)c->hq;
        oclf_arg m[] = {OCLF_ARG(pout), OCLF_ARG(plse), OCLF_ARG(np32), OCLF_ARG(tq),
                        OCLF_ARG(hq32), OCLF_ARG(d), OCLF_ARG(c->o.op.mem), OCLF_ARG(oo),
                        OCLF_ARG(ots), OCLF_ARG(ohs), OCLF_ARG(si), OCLF_ARG(sio),
                        OCLF_ARG(hsk), OCLF_ARG(lm), OCLF_ARG(lso), OCLF_ARG(lss), OCLF_ARG(hl)};
        st = oclf_chain_launch(&ch, prog, "attention_merge", m, OCLF_NARGS(m),
                               oclf_round_up(c->tq * c->hq, ATTN_ELEM_WGS), ATTN_ELEM_WGS);
    }
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
done:
    if (pout)
        clReleaseMemObject(pout); /* freed by OpenCL once the launches finish */
    if (plse)
        clReleaseMemObject(plse);
    return st;
}
