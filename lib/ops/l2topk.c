/*
 * L2 distance + top-k.
 *
 *   fused:   l2_scan (distances in registers, candidate heaps per
 *            (query, slice)) -> l2_merge
 *   unfused: l2_q_norms -> per database tile: [l2_to_f32] -> [l2_x_norms]
 *            -> GEMM (-2 Q X^T) -> l2_tile_topk; then l2_merge
 *
 * Both paths keep k candidates per (query, slice) in global memory, so any
 * k <= N works on any device, and both end in the same merge kernel. Device
 * temporaries are bounded by options->max_temp_bytes: the fused path needs
 * only the heaps (queries are processed in chunks when they do not fit);
 * the unfused path adds a distance tile whose width follows from the bound.
 */
#include "../internal.h"

#include <clblast_c.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define HEAP_ENTRY_BYTES 12u /* uint key + int64 index */

/* Parameters of the fused path, in the order of v[] in l2_config. QB and
 * RB are powers of two only, as the header lists them: the kernel would
 * also build 3, but the tuner never searches it and the header never
 * promised it. */
static const oclf_param_spec l2_fused_params[] = {
    {"FORMULA", 0, 1, 0, OCLF_PARAM_DEFINE},
    {"SLICES", 0, 1 << 20, 0, OCLF_PARAM_ARG},
    {"QB", 1, 4, 1, OCLF_PARAM_DEFINE},
    {"RB", 1, 8, 1, OCLF_PARAM_DEFINE},
    {"VEC", 1, 16, 1, OCLF_PARAM_DEFINE},
    {"QG", 1, 4096, 0, OCLF_PARAM_ARG},
    {"WGS", 1, OCLF_PARAM_MAX_WGS, 0, OCLF_PARAM_ARG},
    {"QLOCAL", 0, 1, 0, OCLF_PARAM_DEFINE},
    {"XNORM", 0, 2, 0, OCLF_PARAM_DEFINE},
    {"XSTAGE", 0, 256, 0, OCLF_PARAM_DEFINE},
};
/* The unfused path's: its program is the fused default's (l2_config). */
static const oclf_param_spec l2_unfused_params[] = {
    {"FORMULA", 0, 1, 0, OCLF_PARAM_DEFINE},
    {"SLICES", 0, 1 << 20, 0, OCLF_PARAM_ARG},
    {"TILE", 0, INT64_MAX, 0, OCLF_PARAM_ARG},
};
#define L2_NPARAMS(spec) ((unsigned)(sizeof spec / sizeof spec[0]))

typedef struct l2_cfg {
    int formula, qb, rb, vec, qg, wgs, qlocal, xnorm, xstage;
    int64_t slices, tile;
    char defines[OCLF_DEFINES_MAX]; /* the program's */
} l2_cfg;
OCLF_CFG_FITS(l2_cfg);

/* Local memory of the scan: the tile (QG x rows), the rows' and the
 * queries' norms, with QLOCAL the group's queries (QG x D floats) and with
 * XSTAGE a chunk of the tile's rows (rows x (XSTAGE + 1) floats). */
static uint64_t scan_local_bytes(uint64_t qg, uint64_t tr, uint64_t d, int qlocal, int xstage)
{
    return (qg * tr + tr + qg) * 4 + (qlocal ? qg * d * 4 : 0) +
           (xstage ? tr * ((uint64_t)xstage + 1) * 4 : 0);
}

void oclf_l2topk_heuristic(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                           oclf_path path, oclf_params *out)
{
    (void)dtype;
    const oclf_device_info *dev = &ctx->info;
    const uint64_t nq = shape->dim[0] ? shape->dim[0] : 1;
    oclf_params_set(out, "FORMULA", 1);
    oclf_params_set(out, "SLICES", 0);
    if (path == OCLF_PATH_UNFUSED) {
        oclf_params_set(out, "TILE", 0);
        return;
    }
    const int cpu = (dev->type & CL_DEVICE_TYPE_CPU) != 0;
    /* CPU (16 vector registers of 8 floats): below 4 queries the scan is
     * bound by reading the database, so one query against 4 rows of float16
     * vectors; from 4 queries on, 2 queries x 2 rows of float16 is the block
     * whose accumulators and operands fill the register file exactly (4 x 4
     * of float8 spills and ran at half the speed here). GPUs: at most 16
     * accumulator floats, 1 x 2 or 2 x 2 of float4. Without a required
     * work-group size the compiler must leave room for 1024 work-items a
     * group, and AMD's (gfx90a, gfx1100) spilled the scan's registers to
     * scratch from 32 accumulators on (tests/gpu_compile.py); fewer rows per
     * block also give a staged tile (XSTAGE, below) more work-items. */
    int qb = nq < 4 ? 1 : 2, rb = cpu ? (nq < 4 ? 4 : 2) : 2;
    /* Query groups of at most 32 (CPU) / 16 (GPU) queries, balanced so the
     * last group is not mostly padding. */
    uint64_t gmax = cpu ? 32 : 16;
    uint64_t ngq = (nq + gmax - 1) / gmax;
    uint64_t qg = (nq + ngq - 1) / ngq;
    qg = (qg + (uint64_t)qb - 1) / (uint64_t)qb * (uint64_t)qb;
    uint64_t nqb = qg / (uint64_t)qb;
    /* CPU: tiles of 16..64 rows keep a row block in L1 while every query
     * block of the group passes over it. GPU: ~128 work-items a group. */
    uint64_t want = cpu ? 64 : 128;
    uint64_t nrb = cpu ? (qb == 1 ? 16 : 8) : (want / nqb ? want / nqb : 1);
    uint64_t wgs = nqb * nrb;
    while (wgs > dev->max_wgs && nrb > 1) {
        nrb /= 2;
        wgs = nqb * nrb;
    }
    /* The group's queries copied to local memory (loaded once per
     * work-group instead of once per tile) where local memory is on-chip
     * and the kernel's, copy included, stays within half of it (the other
     * half leaves tuned records with larger groups or tiles room to
     * launch). Where local memory is ordinary cached memory the copy buys
     * nothing: on a CPU it ran level with reading the queries from global
     * memory at 10^6 rows and about 5% slower with the database in cache. */
    const uint64_t d = shape->dim[2] ? shape->dim[2] : 1;
    /* GPUs also stage the tile's rows in chunks of 32 columns (128 bytes of
     * f32), loaded by the whole group along each row (coalesced) instead of
     * by each work-item down its own rows; the tile shrinks until the scan
     * takes at most half of local memory. */
    int xstage = cpu || dev->local_is_global ? 0 : 32;
    while (xstage && nrb > 1 && scan_local_bytes(qg, nrb * (uint64_t)rb, d, 0, xstage) >
                                    dev->local_mem / 2) {
        nrb /= 2;
        wgs = nqb * nrb;
    }
    if (scan_local_bytes(qg, nrb * (uint64_t)rb, d, 0, xstage) > dev->local_mem / 2)
        xstage = 0;
    const int qlocal =
        !dev->local_is_global &&
        scan_local_bytes(qg, nrb * (uint64_t)rb, d, 1, xstage) <= dev->local_mem / 2;
    oclf_params_set(out, "QB", qb);
    oclf_params_set(out, "RB", rb);
    oclf_params_set(out, "VEC", cpu ? 16 : 4);
    oclf_params_set(out, "QG", (int64_t)qg);
    oclf_params_set(out, "WGS", (int64_t)wgs);
    oclf_params_set(out, "QLOCAL", qlocal);
    oclf_params_set(out, "XSTAGE", xstage);
    /* |x|^2 on CPUs by a plain pass over each tile ahead of the block loop,
     * which also brings the tile into cache (16 queries x 10^6 rows: 567-604
     * ms against 691-765 with the norms summed in the loop by the first
     * query block, and 1.5x slower again with every work-item summing); on
     * SIMT devices by every work-item inside the loop, so the database is
     * read once and no warp splits. */
    oclf_params_set(out, "XNORM", cpu ? 2 : 0);
}

static oclf_status l2_config(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                             oclf_path path, const oclf_params *p, l2_cfg *cfg)
{
    const uint64_t d = shape->dim[2];
    int64_t v[L2_NPARAMS(l2_fused_params)];
    oclf_status st;
    memset(cfg, 0, sizeof *cfg);
    if (path == OCLF_PATH_UNFUSED) {
        if ((st = oclf_params_read(ctx, l2_unfused_params, L2_NPARAMS(l2_unfused_params), p, v)))
            return st;
        cfg->formula = (int)v[0];
        cfg->slices = v[1];
        cfg->tile = v[2];
        if (cfg->formula != 1)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "l2_topk: the unfused path computes the expansion only (FORMULA = 1)");
        /* Its norm, tile and merge kernels come from the program the fused
         * default builds for the same shape, so both paths share a build. */
        oclf_params hp = {0};
        l2_cfg fused;
        oclf_l2topk_heuristic(ctx, dtype, shape, OCLF_PATH_FUSED, &hp);
        if ((st = l2_config(ctx, dtype, shape, OCLF_PATH_FUSED, &hp, &fused)))
            return st;
        cfg->qb = fused.qb, cfg->rb = fused.rb, cfg->vec = fused.vec;
        cfg->qlocal = fused.qlocal, cfg->xnorm = fused.xnorm, cfg->xstage = fused.xstage;
        memcpy(cfg->defines, fused.defines, sizeof cfg->defines);
        return OCLF_SUCCESS;
    }
    if ((st = oclf_params_read(ctx, l2_fused_params, L2_NPARAMS(l2_fused_params), p, v)))
        return st;
    cfg->formula = (int)v[0];
    cfg->slices = v[1];
    if (v[9] && (v[9] % v[4] || (v[9] & (v[9] - 1))))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter XSTAGE = %lld is neither 0 nor a power of two that "
                         "VEC = %lld divides",
                         (long long)v[9], (long long)v[4]);
    if (v[5] % v[2])
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter QG = %lld is not a multiple of QB = %lld",
                         (long long)v[5], (long long)v[2]);
    const int64_t nqb = v[5] / v[2];
    if (v[6] % nqb || v[6] < v[5])
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter WGS = %lld must be a multiple of QG/QB = %lld and at "
                         "least QG = %lld",
                         (long long)v[6], (long long)nqb, (long long)v[5]);
    cfg->qb = (int)v[2];
    cfg->rb = (int)v[3];
    cfg->vec = (int)v[4];
    cfg->qg = (int)v[5];
    cfg->wgs = (int)v[6];
    cfg->qlocal = (int)v[7];
    cfg->xnorm = (int)v[8];
    cfg->xstage = (int)v[9];
    const uint64_t tr = (uint64_t)(cfg->wgs / nqb) * (uint64_t)cfg->rb;
    const uint64_t local = scan_local_bytes((uint64_t)cfg->qg, tr, d, 0, cfg->xstage);
    const uint64_t have = ctx->info.local_mem;
    if (local > have)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: QG = %d, WGS = %d, RB = %d need %llu bytes of local memory, the "
                         "device has %llu",
                         cfg->qg, cfg->wgs, cfg->rb, (unsigned long long)local,
                         (unsigned long long)have);
    if (cfg->qlocal && scan_local_bytes((uint64_t)cfg->qg, tr, d, 1, cfg->xstage) > have)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: QLOCAL = 1 copies QG = %d queries of D = %llu floats (%llu "
                         "bytes) to local memory, which with the tile's %llu bytes exceeds the "
                         "device's %llu; use QLOCAL = 0 or a smaller QG",
                         cfg->qg, (unsigned long long)d, (unsigned long long)(cfg->qg * d * 4),
                         (unsigned long long)local, (unsigned long long)have);
    oclf_param_defines(cfg->defines, sizeof cfg->defines, l2_fused_params,
                       L2_NPARAMS(l2_fused_params), v);
    return OCLF_SUCCESS;
}

/* The program a call with `cfg` runs (on either path: l2_config gives the
 * unfused path the fused default's program). */
static oclf_status l2_program(oclf_context *ctx, oclf_dtype dtype, const l2_cfg *cfg,
                              oclf_program **prog)
{
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options(opts, sizeof opts, dtype, -1, cfg->defines);
    return oclf_program_get(ctx, "l2topk.cl", opts, prog);
}

/* Work-group sizes of the launches (run_fused, run_unfused, merge_launch). */
#define L2_MERGE_WGS 8
#define L2_NORM_WGS 64
#define L2_TILE_WGS 8

oclf_status oclf_l2topk_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                 const oclf_shape *shape, const oclf_resolved *r, int deep,
                                 oclf_op_cfg *out)
{
    (void)op;
    l2_cfg cfg;
    oclf_program *prog;
    oclf_status st = l2_config(ctx, dtype, shape, r->path, &r->params, &cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    if (st != OCLF_SUCCESS || !deep ||
        (st = l2_program(ctx, dtype, &cfg, &prog)) != OCLF_SUCCESS)
        return st;
    /* A kernel's registers or local memory can lower its limit below the
     * device's; only the built kernel reports it. */
    static const char *const merge[] = {"l2_merge"}, *const scan[] = {"l2_scan"};
    static const char *const norms[] = {"l2_q_norms", "l2_x_norms", "l2_to_f32"};
    static const char *const tile[] = {"l2_tile_topk"};
    if ((st = oclf_check_kernel_wgs(ctx, prog, merge, 1, L2_MERGE_WGS)))
        return st;
    if (r->path == OCLF_PATH_FUSED)
        return oclf_check_kernel_wgs(ctx, prog, scan, 1, (size_t)cfg.wgs);
    if ((st = oclf_check_kernel_wgs(ctx, prog, norms, 3, L2_NORM_WGS)))
        return st;
    return oclf_check_kernel_wgs(ctx, prog, tile, 1, L2_TILE_WGS);
}

const oclf_op_hooks oclf_l2topk_hooks = {oclf_l2topk_heuristic, oclf_l2topk_validate};

typedef struct l2_call {
    oclf_dtype dtype;
    size_t nq, n, d, k;
    oclf_operand q, x, xn, allow, dist, idx;
    int has_xn, has_allow;
    size_t bound;
} l2_call;

static oclf_status check_args(oclf_context *ctx, oclf_dtype dtype, size_t nq, size_t n, size_t d,
                              size_t k, oclf_buf q, oclf_buf x, oclf_buf dist, oclf_buf idx,
                              const oclf_l2_topk_options *opt, l2_call *c)
{
    oclf_status st;
    memset(c, 0, sizeof *c);
    if (d == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: D is 0");
    if (k == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: k is 0");
    if (k > INT_MAX)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: k = %zu exceeds %d", k, INT_MAX);
    if (d > UINT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "l2_topk: D = %zu exceeds %u", d, UINT_MAX);
    if (opt && opt->precision != OCLF_L2_FAST && opt->precision != OCLF_L2_EXACT)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: unknown precision %d",
                         (int)opt->precision);
    if ((st = oclf_check_2d(ctx, "l2_topk: q", q, nq, d, 4, &c->q)) ||
        (st = oclf_check_2d(ctx, "l2_topk: x", x, n, d, oclf_dtype_size(dtype), &c->x)) ||
        (st = oclf_check_2d(ctx, "l2_topk: dist", dist, nq, k, 4, &c->dist)) ||
        (st = oclf_check_2d(ctx, "l2_topk: idx", idx, nq, k, 8, &c->idx)))
        return st;
    if (opt && opt->x_norms) {
        oclf_buf nb = *opt->x_norms;
        nb.stride = 0;
        if ((st = oclf_check_2d(ctx, "l2_topk: x_norms", nb, 1, n, 4, &c->xn)))
            return st;
        c->has_xn = 1;
    }
    if (opt && opt->allowed) {
        if ((st = oclf_check_vector(ctx, "l2_topk: allowed", *opt->allowed, (n + 7) / 8, 1,
                                    &c->allow)))
            return st;
        c->has_allow = 1;
    }
    if (oclf_overlap(&c->dist, &c->idx))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "l2_topk: dist and idx overlap");
    const oclf_operand *in[4] = {&c->q, &c->x, &c->xn, &c->allow};
    for (int i = 0; i < 4; i++)
        if (oclf_overlap(&c->dist, in[i]) || oclf_overlap(&c->idx, in[i]))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "l2_topk: an output (dist or idx) overlaps an input");
    c->dtype = dtype;
    c->nq = nq;
    c->n = n;
    c->d = d;
    c->k = k;
    c->bound = opt && opt->max_temp_bytes ? opt->max_temp_bytes : OCLF_L2_DEFAULT_MAX_TEMP;
    return OCLF_SUCCESS;
}

/* Largest single allocation the bound and the device allow. */
static size_t alloc_cap(const oclf_context *ctx, size_t bound)
{
    size_t cap = bound;
    if (ctx->info.max_alloc && ctx->info.max_alloc < cap)
        cap = (size_t)ctx->info.max_alloc;
    return cap;
}

/* Queries per chunk so that chunk x slices x k heap entries fit `budget`. */
static size_t heap_chunk(size_t nq, size_t slices, size_t k, size_t budget)
{
    size_t per_query = slices * k * HEAP_ENTRY_BYTES;
    size_t c = budget / per_query;
    return c < nq ? c : nq;
}

static oclf_status merge_launch(oclf_chain *ch, oclf_program *prog, cl_mem hk, cl_mem hi,
                                const l2_call *c, size_t q0, size_t qn, cl_uint nslices)
{
    cl_ulong nq = qn, dofs = c->dist.offset + q0 * c->dist.stride, ds = c->dist.stride;
    cl_ulong iofs = c->idx.offset + q0 * c->idx.stride, is = c->idx.stride;
    cl_uint k = (cl_uint)c->k;
    oclf_arg a[] = {OCLF_ARG(hk),         OCLF_ARG(hi),   OCLF_ARG(nq),         OCLF_ARG(nslices),
                    OCLF_ARG(k),          OCLF_ARG(c->dist.mem), OCLF_ARG(dofs), OCLF_ARG(ds),
                    OCLF_ARG(c->idx.mem), OCLF_ARG(iofs), OCLF_ARG(is)};
    return oclf_chain_launch(ch, prog, "l2_merge", a, OCLF_NARGS(a),
                             oclf_round_up(qn, L2_MERGE_WGS), L2_MERGE_WGS);
}

static oclf_status run_fused(oclf_context *ctx, oclf_chain *ch, oclf_program *prog,
                             const l2_call *c, const l2_cfg *cfg)
{
    const size_t nqb = (size_t)(cfg->qg / cfg->qb);
    const size_t tr = (size_t)(cfg->wgs / (int)nqb) * (size_t)cfg->rb;
    const size_t ngq_all = (c->nq + (size_t)cfg->qg - 1) / (size_t)cfg->qg;
    size_t slices = (size_t)cfg->slices;
    if (c->n == 0) {
        slices = 0;
    } else {
        if (slices == 0) {
            /* Enough work-groups to load-balance every compute unit, but
             * no slice shorter than one tile. */
            size_t want = (size_t)ctx->info.compute_units * 8;
            slices = (want + ngq_all - 1) / ngq_all;
            size_t tiles = (c->n + tr - 1) / tr;
            if (slices > tiles)
                slices = tiles;
            if (slices < 1)
                slices = 1;
            /* fewer slices rather than chunking the queries */
            size_t fit = alloc_cap(ctx, c->bound) / (c->nq * c->k * HEAP_ENTRY_BYTES + 1);
            if (slices > fit)
                slices = fit ? fit : 1;
        }
        if (slices > c->n)
            slices = c->n;
    }
    /* rows per slice: whole tiles, so only the last tile of a slice is short */
    size_t per = 0;
    if (slices) {
        per = oclf_round_up((c->n + slices - 1) / slices, tr);
        slices = (c->n + per - 1) / per;
    }
    size_t heap_slices = slices ? slices : 1;
    size_t chunk = heap_chunk(c->nq, heap_slices, c->k, alloc_cap(ctx, c->bound) / 8 * 8);
    if (chunk == 0)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                         "l2_topk: max_temp_bytes = %zu cannot hold the %zu x %zu candidates of "
                         "one query (%u bytes each)",
                         c->bound, heap_slices, c->k, HEAP_ENTRY_BYTES);
    cl_mem hk = NULL, hi = NULL;
    oclf_status st;
    if ((st = oclf_temp_buffer(ctx, chunk * heap_slices * c->k * 4, &hk)) ||
        (st = oclf_temp_buffer(ctx, chunk * heap_slices * c->k * 8, &hi)))
        goto done;
    for (size_t q0 = 0; q0 < c->nq; q0 += chunk) {
        const size_t qn = c->nq - q0 < chunk ? c->nq - q0 : chunk;
        if (slices) {
            const size_t ngq = (qn + (size_t)cfg->qg - 1) / (size_t)cfg->qg;
            cl_ulong qo = c->q.offset + q0 * c->q.stride, qs = c->q.stride;
            cl_ulong xo = c->x.offset, xs = c->x.stride, xno = c->xn.offset;
            cl_ulong nq = qn, n = c->n, cper = per;
            cl_uint d = (cl_uint)c->d, k = (cl_uint)c->k, qg = (cl_uint)cfg->qg;
            cl_uint ns = (cl_uint)slices, has_xn = (cl_uint)c->has_xn;
            cl_mem xn = c->has_xn ? c->xn.mem : c->x.mem; /* never read without has_xn */
            cl_mem am = c->has_allow ? c->allow.mem : c->x.mem; /* likewise */
            cl_ulong ao = c->allow.offset;
            cl_uint has_allow = (cl_uint)c->has_allow;
            oclf_arg a[] = {OCLF_ARG(c->q.mem), OCLF_ARG(qo),  OCLF_ARG(qs),
                            OCLF_ARG(c->x.mem), OCLF_ARG(xo),  OCLF_ARG(xs),
                            OCLF_ARG(xn),       OCLF_ARG(xno), OCLF_ARG(has_xn),
                            OCLF_ARG(am),       OCLF_ARG(ao),  OCLF_ARG(has_allow),
                            OCLF_ARG(hk),       OCLF_ARG(hi),  OCLF_ARG(nq),
                            OCLF_ARG(n),        OCLF_ARG(d),   OCLF_ARG(k),
                            OCLF_ARG(qg),       OCLF_ARG(cper), OCLF_ARG(ns),
                            OCLF_ARG_LOCAL((size_t)cfg->qg * tr * 4),
                            OCLF_ARG_LOCAL(tr * 4),
                            OCLF_ARG_LOCAL((size_t)cfg->qg * 4),
                            /* the queries' copy; one float when unused */
                            OCLF_ARG_LOCAL(cfg->qlocal ? (size_t)cfg->qg * c->d * 4 : 4),
                            /* the rows' chunk; one float when unused */
                            OCLF_ARG_LOCAL(cfg->xstage ? tr * ((size_t)cfg->xstage + 1) * 4 : 4)};
            if ((st = oclf_chain_launch(ch, prog, "l2_scan", a, sizeof a / sizeof *a,
                                        ngq * slices * (size_t)cfg->wgs, (size_t)cfg->wgs)))
                goto done;
        }
        if ((st = merge_launch(ch, prog, hk, hi, c, q0, qn, (cl_uint)slices)))
            goto done;
    }
done:
    if (hk)
        clReleaseMemObject(hk);
    if (hi)
        clReleaseMemObject(hi);
    return st;
}

static oclf_status gemm_fail(const oclf_context *ctx, CLBlastStatusCode s)
{
    return oclf_fail(ctx, s == CLBlastOpenCLOutOfResources || s == CLBlastOpenCLOutOfHostMemory ||
                                  s == CLBlastTempBufferAllocFailure
                              ? OCLF_OUT_OF_RESOURCES
                              : OCLF_OPENCL_ERROR,
                     "l2_topk: the GEMM library's Sgemm failed with status %d", (int)s);
}

/* -2 Q X_tile^T through the GEMM library. The tile is cleared after the
 * previous launch, and the GEMM, which takes no wait list, is ordered
 * after the clear by a barrier on the clear's event: on an out-of-order
 * queue nothing else orders the three. */
static oclf_status gemm_launch(oclf_chain *ch, size_t m, size_t n, size_t kd, cl_mem a,
                               size_t ao, size_t lda, cl_mem b, size_t bo, size_t ldb, cl_mem cm)
{
    /* C is cleared first: the GEMM computes alpha A B + beta C and 0 * NaN
     * from a previous tile would survive beta = 0 in some implementations. */
    const float zero = 0.0f;
    cl_event cleared = NULL;
    cl_int err = clEnqueueFillBuffer(ch->queue, cm, &zero, sizeof zero, 0, m * n * sizeof(float),
                                     ch->prev ? 1 : ch->num_events,
                                     ch->prev ? &ch->prev : ch->wait_list, &cleared);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ch->ctx, err, "clEnqueueFillBuffer(distance tile)");
    err = clEnqueueBarrierWithWaitList(ch->queue, 1, &cleared, NULL);
    clReleaseEvent(cleared);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ch->ctx, err, "clEnqueueBarrierWithWaitList");
    cl_event ev = NULL;
    cl_command_queue qu = ch->queue;
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes,
                                       m, n, kd, -2.0f, a, ao, lda, b, bo, ldb, 0.0f, cm, 0, n,
                                       &qu, &ev);
    if (s != CLBlastSuccess)
        return gemm_fail(ch->ctx, s);
    atomic_fetch_add(&ch->ctx->n_enqueued, 1);
    if (ch->prev)
        clReleaseEvent(ch->prev);
    ch->prev = ev;
    return OCLF_SUCCESS;
}

static oclf_status run_unfused(oclf_context *ctx, oclf_chain *ch, oclf_program *prog,
                               const l2_call *c, const l2_cfg *cfg)
{
    const int conv = c->dtype != OCLF_F32;
    size_t slices = cfg->slices ? (size_t)cfg->slices : (size_t)ctx->info.compute_units * 2;
    if (slices < 1)
        slices = 1;
    const size_t bound = c->bound, cap = alloc_cap(ctx, bound);
    /* Bytes the bound must cover for a chunk of cq queries and a tile of t
     * rows: heaps, query norms, the GEMM's A copy, and per row of the tile
     * the distance column (twice), the norm, and the X row (twice, plus the
     * f32 conversion for f16/bf16). */
    size_t per_row_x = 4 + 4 * c->d * (conv ? 3 : 2);
    size_t cq = c->nq;
    for (;;) {
        size_t fixed = cq * slices * c->k * HEAP_ENTRY_BYTES + cq * 4 + cq * c->d * 4 * 2;
        size_t t_min = c->n < 1024 ? c->n : 1024;
        if (fixed + t_min * (per_row_x + 8 * cq) <= bound || cq == 1)
            break;
        cq = (cq + 1) / 2;
    }
    size_t fixed = cq * slices * c->k * HEAP_ENTRY_BYTES + cq * 4 + cq * c->d * 4 * 2;
    size_t tile = 0;
    if (fixed < bound)
        tile = (bound - fixed) / (per_row_x + 8 * cq);
    if (tile > cap / (cq * 4))
        tile = cap / (cq * 4);
    if (conv && tile > cap / (c->d * 4))
        tile = cap / (c->d * 4);
    if (cfg->tile && (size_t)cfg->tile < tile)
        tile = (size_t)cfg->tile;
    if (tile > c->n)
        tile = c->n;
    if ((c->n > 0 && tile == 0) || cq * slices * c->k * HEAP_ENTRY_BYTES > cap)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                         "l2_topk: max_temp_bytes = %zu cannot hold one query's %zu x %zu "
                         "candidates and a distance tile",
                         bound, slices, c->k);
    if (slices > tile && tile > 0)
        slices = tile;

    cl_mem hk = NULL, hi = NULL, qn = NULL, xn = NULL, cm = NULL, xf = NULL;
    oclf_status st;
    if ((st = oclf_temp_buffer(ctx, cq * slices * c->k * 4, &hk)) ||
        (st = oclf_temp_buffer(ctx, cq * slices * c->k * 8, &hi)) ||
        (st = oclf_temp_buffer(ctx, c->nq * 4, &qn)) ||
        (st = oclf_temp_buffer(ctx, cq * tile * 4, &cm)) ||
        (!c->has_xn && (st = oclf_temp_buffer(ctx, tile * 4, &xn))) ||
        (conv && (st = oclf_temp_buffer(ctx, tile * c->d * 4, &xf))))
        goto done;
    cl_uint d = (cl_uint)c->d, k = (cl_uint)c->k;
    {
        cl_ulong qo = c->q.offset, qs = c->q.stride, rows = c->nq;
        oclf_arg a[] = {OCLF_ARG(c->q.mem), OCLF_ARG(qo), OCLF_ARG(qs), OCLF_ARG(rows),
                        OCLF_ARG(d), OCLF_ARG(qn)};
        if (c->nq && (st = oclf_chain_launch(ch, prog, "l2_q_norms", a, OCLF_NARGS(a),
                                             oclf_round_up(c->nq, L2_NORM_WGS), L2_NORM_WGS)))
            goto done;
    }
    for (size_t q0 = 0; q0 < c->nq; q0 += cq) {
        const size_t qc = c->nq - q0 < cq ? c->nq - q0 : cq;
        cl_uint ns = tile ? (cl_uint)slices : 0;
        for (size_t t0 = 0; t0 < c->n; t0 += tile) {
            const size_t tc = c->n - t0 < tile ? c->n - t0 : tile;
            cl_ulong xo = c->x.offset, xs = c->x.stride, r0 = t0, rows = tc;
            if (conv) {
                oclf_arg a[] = {OCLF_ARG(c->x.mem), OCLF_ARG(xo), OCLF_ARG(xs), OCLF_ARG(r0),
                                OCLF_ARG(rows), OCLF_ARG(d), OCLF_ARG(xf)};
                if ((st = oclf_chain_launch(ch, prog, "l2_to_f32", a, OCLF_NARGS(a),
                                            oclf_round_up(tc * c->d, L2_NORM_WGS), L2_NORM_WGS)))
                    goto done;
            }
            if (!c->has_xn) {
                oclf_arg a[] = {OCLF_ARG(c->x.mem), OCLF_ARG(xo), OCLF_ARG(xs), OCLF_ARG(r0),
                                OCLF_ARG(rows), OCLF_ARG(d), OCLF_ARG(xn)};
                if ((st = oclf_chain_launch(ch, prog, "l2_x_norms", a, OCLF_NARGS(a),
                                            oclf_round_up(tc, L2_NORM_WGS), L2_NORM_WGS)))
                    goto done;
            }
            if ((st = gemm_launch(ch, qc, tc, c->d, c->q.mem, c->q.offset + q0 * c->q.stride,
                                  c->q.stride, conv ? xf : c->x.mem,
                                  conv ? 0 : c->x.offset + t0 * c->x.stride,
                                  conv ? c->d : c->x.stride, cm)))
                goto done;
            cl_ulong cols = tc, ct0 = t0, nqc = qc, per = (tc + slices - 1) / slices;
            cl_ulong xno = c->has_xn ? c->xn.offset + t0 : 0;
            cl_uint first = t0 == 0;
            cl_mem xnm = c->has_xn ? c->xn.mem : xn;
            cl_ulong qno = q0; /* the query norms of this chunk */
            cl_mem am = c->has_allow ? c->allow.mem : cm; /* never read without has_allow */
            cl_ulong ao = c->allow.offset;
            cl_uint has_allow = (cl_uint)c->has_allow;
            oclf_arg a[] = {OCLF_ARG(cm),  OCLF_ARG(cols), OCLF_ARG(qn), OCLF_ARG(qno), OCLF_ARG(xnm),
                            OCLF_ARG(xno), OCLF_ARG(ct0),  OCLF_ARG(nqc),   OCLF_ARG(ns),
                            OCLF_ARG(per), OCLF_ARG(k),    OCLF_ARG(first), OCLF_ARG(hk),
                            OCLF_ARG(hi),  OCLF_ARG(am),   OCLF_ARG(ao),    OCLF_ARG(has_allow)};
            if ((st = oclf_chain_launch(ch, prog, "l2_tile_topk", a, OCLF_NARGS(a),
                                        oclf_round_up(qc * slices, L2_TILE_WGS), L2_TILE_WGS)))
                goto done;
        }
        if ((st = merge_launch(ch, prog, hk, hi, c, q0, qc, ns)))
            goto done;
    }
done:;
    cl_mem all[] = {hk, hi, qn, xn, cm, xf};
    for (int i = 0; i < 6; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* freed by OpenCL once the launches finish */
    return st;
}

void oclf_l2_topk_options_init(oclf_l2_topk_options *options)
{
    if (options)
        *options = (oclf_l2_topk_options)OCLF_L2_TOPK_OPTIONS_INIT;
}

oclf_status oclf_l2_topk(oclf_context *ctx, cl_command_queue queue, oclf_dtype x_dtype, size_t nq,
                         size_t n, size_t d, size_t k, oclf_buf q, oclf_buf x, oclf_buf dist,
                         oclf_buf idx, const oclf_l2_topk_options *options,
                         const oclf_choice *choice, cl_uint num_events, const cl_event *wait_list,
                         cl_event *event)
{
    oclf_status st;
    l2_call c;
    oclf_l2_topk_options opt;
    if ((st = oclf_check_call(ctx, "l2_topk", queue, num_events, wait_list, x_dtype, event)) ||
        (st = oclf_l2_topk_options_read(ctx, options, &opt)) ||
        (st = check_args(ctx, x_dtype, nq, n, d, k, q, x, dist, idx, &opt, &c)))
        return st;
    options = &opt;

    const int exact = options && options->precision == OCLF_L2_EXACT;
    if (exact && choice && choice->path == OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: precision EXACT needs the direct formula, which only the fused "
                         "path computes");
    int64_t formula_asked = -1;
    if (choice)
        oclf_params_get(&choice->params, "FORMULA", &formula_asked);
    if (exact && formula_asked == 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: precision EXACT excludes FORMULA = 1 (the expansion)");

    oclf_shape shape = {{nq, n, d, k}};
    oclf_resolved r;
    /* The precision option asks dispatch for the fused path (the only one
     * with the direct formula), then narrows its formula. */
    oclf_choice fc;
    if (exact) {
        memset(&fc, 0, sizeof fc);
        if (choice)
            fc = *choice;
        fc.path = OCLF_PATH_FUSED;
        choice = &fc;
    }
    l2_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_L2_TOPK, &oclf_l2topk_hooks, x_dtype, &shape,
                                     choice, &r)))
        return st;
    if (exact) /* a program of its own: parsed here rather than cached */
        oclf_params_set(&r.params, "FORMULA", 0);
    if (r.has_cfg && !exact)
        memcpy(&cfg, &r.cfg, sizeof cfg);
    else if ((st = l2_config(ctx, x_dtype, &shape, r.path, &r.params, &cfg)))
        return st;
    if (nq == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    oclf_program *prog;
    if ((st = l2_program(ctx, x_dtype, &cfg, &prog)))
        return st;

    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = r.path == OCLF_PATH_FUSED ? run_fused(ctx, &ch, prog, &c, &cfg)
                                   : run_unfused(ctx, &ch, prog, &c, &cfg);
    if (st != OCLF_SUCCESS) {
        oclf_chain_end(&ch, NULL);
        return st;
    }
    oclf_chain_end(&ch, event);
    return OCLF_SUCCESS;
}
