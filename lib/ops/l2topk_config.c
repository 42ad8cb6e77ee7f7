/* L2 top-k: kernel parameters (heuristic, checks, program, validate). */
#include "l2topk.h"

#include <stdio.h>
#include <string.h>

/* Parameters of the fused path, in the order of v[] in oclf_l2_config. QB
 * and RB are powers of two only, as the header lists them: the kernel
 * would also build 3, but the tuner never searches it and the header never
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
    {"TOPK", 0, 1, 0, OCLF_PARAM_DEFINE},
};
/* The unfused path's: its program is the fused default's (oclf_l2_config). */
static const oclf_param_spec l2_unfused_params[] = {
    {"FORMULA", 0, 1, 0, OCLF_PARAM_DEFINE},
    {"SLICES", 0, 1 << 20, 0, OCLF_PARAM_ARG},
    {"TILE", 0, INT64_MAX, 0, OCLF_PARAM_ARG},
};
#define L2_NPARAMS(spec) ((unsigned)(sizeof spec / sizeof spec[0]))

/* Local memory of the scan: the tile (QG x rows), the rows' and the
 * queries' norms, with QLOCAL the group's queries (QG x D floats) and with
 * XSTAGE a chunk of the tile's rows (rows x (XSTAGE + 1) floats). */
static uint64_t scan_local_bytes(uint64_t qg, uint64_t tr, uint64_t d, int qlocal, int xstage)
{
    return (qg * tr + tr + qg) * 4 + (qlocal ? qg * d * 4 : 0) +
           (xstage ? tr * ((uint64_t)xstage + 1) * 4 : 0);
}

/* TOPK 1: the scan's lists in local memory, per query k sorted entries and
 * a buffer of two tiles (8 bytes an entry), and the buffer's count. */
static uint64_t lists_local_bytes(uint64_t qg, uint64_t tr, uint64_t k)
{
    return qg * ((k + 2 * tr) * 8 + 4);
}

uint64_t oclf_l2_merge_cap(const oclf_context *ctx, uint64_t k)
{
    for (uint64_t round = 1024; round >= 32; round /= 2)
        if ((k + 2 * round) * 8 + 4 <= ctx->info.local_mem)
            return 2 * round;
    return 0;
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
     * of float8 spills and ran at half the speed here). GPUs: 8
     * accumulator floats, 1 x 2 of float4. Without a required work-group
     * size the compiler must leave room for 1024 work-items a group, and
     * AMD's (gfx90a, gfx1100) spilled the scan's registers to scratch from
     * 32 accumulators on; Intel's Xe-HPC compiler (SIMD32, 64 floats a
     * work-item) spilled 2 x 2 of float4 without the query copy
     * (tests/gpu_compile.py). Fewer rows per block also give a staged tile
     * (XSTAGE, below) more work-items. */
    int qb = cpu && nq >= 4 ? 2 : 1, rb = cpu ? (nq < 4 ? 4 : 2) : 2;
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
    int qlocal =
        !dev->local_is_global &&
        scan_local_bytes(qg, nrb * (uint64_t)rb, d, 1, xstage) <= dev->local_mem / 2;
    /* GPUs keep each (query, slice) list on chip (TOPK 1: see
     * cl/l2topk_select.cl) where the lists fit beside the scan's other local
     * memory, the tile shrinking (and then the query copy going) to make
     * room; otherwise, for a large k, the heaps in global memory. */
    int topk = 0;
    const uint64_t k = shape->dim[3] ? shape->dim[3] : 1;
    if (!cpu && !dev->local_is_global && shape->dim[1] <= L2_TOPK_MAX_ROWS &&
        oclf_l2_merge_cap(ctx, k)) {
        for (int ql = qlocal; ql >= 0 && !topk; ql--) {
            uint64_t r = nrb;
            while (r > (uint64_t)qb &&
                   scan_local_bytes(qg, r * (uint64_t)rb, d, ql, xstage) +
                           lists_local_bytes(qg, r * (uint64_t)rb, k) >
                       dev->local_mem)
                r /= 2;
            if (scan_local_bytes(qg, r * (uint64_t)rb, d, ql, xstage) +
                    lists_local_bytes(qg, r * (uint64_t)rb, k) <=
                dev->local_mem) {
                topk = 1;
                qlocal = ql;
                nrb = r;
                wgs = nqb * nrb;
            }
        }
    }
    oclf_params_set(out, "TOPK", topk);
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

oclf_status oclf_l2_config(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                           oclf_path path, const oclf_params *p, l2_cfg *cfg)
{
    const uint64_t d = shape->dim[2], n = shape->dim[1], k = shape->dim[3];
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
         * default builds for the same shape, so both paths share a build;
         * its lists are the tile kernel's heaps whatever that program's
         * TOPK (the program holds the heap merge either way). */
        oclf_params hp = {0};
        l2_cfg fused;
        oclf_l2topk_heuristic(ctx, dtype, shape, OCLF_PATH_FUSED, &hp);
        if ((st = oclf_l2_config(ctx, dtype, shape, OCLF_PATH_FUSED, &hp, &fused)))
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
    cfg->topk = (int)v[10];
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
    if (!cfg->topk) {
        oclf_param_defines(cfg->defines, sizeof cfg->defines, l2_fused_params,
                           L2_NPARAMS(l2_fused_params), v);
        return OCLF_SUCCESS;
    }
    /* TOPK 1: the lists beside the rest, and the merge's list */
    cfg->scan_cap = 2 * tr;
    cfg->merge_cap = oclf_l2_merge_cap(ctx, k);
    const uint64_t all = scan_local_bytes((uint64_t)cfg->qg, tr, d, cfg->qlocal, cfg->xstage) +
                         lists_local_bytes((uint64_t)cfg->qg, tr, k);
    if (n > L2_TOPK_MAX_ROWS)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: TOPK = 1 keeps row indices in 32 bits, and N = %llu exceeds "
                         "%llu; use TOPK = 0",
                         (unsigned long long)n, (unsigned long long)L2_TOPK_MAX_ROWS);
    if (all > have || !cfg->merge_cap)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "l2_topk: TOPK = 1 keeps QG = %d lists of k = %llu candidates in local "
                         "memory, %llu bytes with the scan's other %llu, more than the device's "
                         "%llu; use TOPK = 0 or a smaller QG or tile",
                         cfg->qg, (unsigned long long)k, (unsigned long long)all,
                         (unsigned long long)(all - lists_local_bytes((uint64_t)cfg->qg, tr, k)),
                         (unsigned long long)have);
    oclf_param_defines(cfg->defines, sizeof cfg->defines, l2_fused_params,
                       L2_NPARAMS(l2_fused_params), v);
    return OCLF_SUCCESS;
}

/* The program a call with `cfg` runs (on either path: oclf_l2_config
 * gives the unfused path the fused default's program). */
oclf_status oclf_l2_program(oclf_context *ctx, oclf_dtype dtype, const l2_cfg *cfg,
                            oclf_program **prog)
{
    char opts[OCLF_OPTIONS_MAX];
    oclf_program_options(opts, sizeof opts, dtype, -1, cfg->defines);
    return oclf_program_get(ctx, "l2topk.cl", opts, prog);
}

oclf_status oclf_l2_group(oclf_context *ctx, oclf_program *prog, const char *kernel,
                          size_t cpu_wgs, size_t want, size_t *wgs)
{
    size_t kmax, multiple;
    oclf_status st = oclf_kernel_group_info(ctx, prog, kernel, &kmax, &multiple);
    if (st != OCLF_SUCCESS)
        return st;
    size_t w = cpu_wgs;
    if (!(ctx->info.type & CL_DEVICE_TYPE_CPU)) {
        /* a group narrower than the lockstep width leaves lanes idle */
        const size_t lane = multiple > ctx->info.simd_width ? multiple : ctx->info.simd_width;
        w = oclf_round_up(want > lane ? want : lane, lane);
        while (w > lane && w > kmax)
            w -= lane;
    }
    *wgs = w < kmax ? w : kmax;
    return OCLF_SUCCESS;
}

oclf_status oclf_l2topk_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                 const oclf_shape *shape, const oclf_resolved *r, int deep,
                                 oclf_op_cfg *out)
{
    (void)op;
    l2_cfg cfg;
    oclf_program *prog;
    oclf_status st = oclf_l2_config(ctx, dtype, shape, r->path, &r->params, &cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    if (st != OCLF_SUCCESS || !deep ||
        (st = oclf_l2_program(ctx, dtype, &cfg, &prog)) != OCLF_SUCCESS)
        return st;
    /* A kernel's registers or local memory can lower its limit below the
     * device's; only the built kernel reports it. The merge and tile
     * launches take their group size from the built kernel (oclf_l2_group),
     * within that limit. */
    static const char *const scan[] = {"l2_scan"};
    static const char *const norms[] = {"l2_q_norms", "l2_x_norms", "l2_to_f32"};
    size_t wgs;
    if ((st = oclf_l2_group(ctx, prog, cfg.topk ? "l2_merge_lists" : "l2_merge", L2_MERGE_WGS,
                            cfg.topk ? L2_MERGE_LISTS_WGS : 0, &wgs)))
        return st;
    if (r->path == OCLF_PATH_FUSED)
        return oclf_check_kernel_wgs(ctx, prog, scan, 1, (size_t)cfg.wgs);
    if ((st = oclf_check_kernel_wgs(ctx, prog, norms, 3, L2_NORM_WGS)))
        return st;
    return oclf_l2_group(ctx, prog, "l2_tile_topk", L2_TILE_WGS, 0, &wgs);
}

const oclf_op_hooks oclf_l2topk_hooks = {oclf_l2topk_heuristic, oclf_l2topk_validate};
