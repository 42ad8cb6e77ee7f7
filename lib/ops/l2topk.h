/*
 * L2 distance + top-k, the host side: what its files share.
 *
 *   l2topk.c          the public entry and its argument checks
 *   l2topk_config.c   kernel parameters: heuristic, checks, program, validate
 *   l2topk_fused.c    the fused path (scan, merge) and the merge launch
 *   l2topk_gemm.c     the unfused path (norms, GEMM per tile, tile top-k)
 */
#ifndef OCLF_OPS_L2TOPK_H
#define OCLF_OPS_L2TOPK_H

#include "../internal.h"

#define HEAP_ENTRY_BYTES 12u /* uint key + int64 index */

typedef struct l2_cfg {
    int formula, qb, rb, vec, qg, wgs, qlocal, xnorm, xstage, topk;
    int64_t slices, tile;
    uint64_t scan_cap, merge_cap; /* TOPK 1: the buffers of the scan's and the merge's lists */
    char defines[OCLF_DEFINES_MAX]; /* the program's */
} l2_cfg;
OCLF_CFG_FITS(l2_cfg);

typedef struct l2_call {
    oclf_dtype dtype;
    size_t nq, n, d, k;
    oclf_operand q, x, xn, allow, dist, idx;
    int has_xn, has_allow;
    size_t bound;
} l2_call;

/* Work-group sizes of the launches (run_fused, run_unfused, merge_launch);
 * on GPUs the merge and tile launches widen to the lockstep width
 * (oclf_l2_group). */
#define L2_MERGE_WGS 8
#define L2_NORM_WGS 64
#define L2_TILE_WGS 8
/* TOPK 1: a work-group per query merges the slices' lists */
#define L2_MERGE_LISTS_WGS 256

/* TOPK 1 packs row indices in 32 bits, all ones meaning an empty slot. */
#define L2_TOPK_MAX_ROWS 0xFFFFFFFEull
/* TOPK 1: the slices x k entries the merge reads per query are kept below
 * this by taking fewer slices (the merge is one work-group per query). */
#define L2_MERGE_ENTRIES 65536u

OCLF_HIDDEN oclf_status oclf_l2_config(const oclf_context *ctx, oclf_dtype dtype,
                                       const oclf_shape *shape, oclf_path path,
                                       const oclf_params *p, l2_cfg *cfg);
/* TOPK 1: the merge's buffer (twice its rounds) for k candidates, as large
 * as local memory allows up to 2048 entries; 0 when 64 do not fit. */
OCLF_HIDDEN uint64_t oclf_l2_merge_cap(const oclf_context *ctx, uint64_t k);
/* The work-group size of a launch of `kernel` (one work-item per list):
 * `cpu_wgs` on CPUs, elsewhere `want` rounded up to the lockstep width,
 * which is the larger of the device's SIMD width and the built kernel's
 * preferred work-group size multiple, and at most the kernel's limit. */
OCLF_HIDDEN oclf_status oclf_l2_group(oclf_context *ctx, oclf_program *prog, const char *kernel,
                                      size_t cpu_wgs, size_t want, size_t *wgs);
OCLF_HIDDEN oclf_status oclf_l2_program(oclf_context *ctx, oclf_dtype dtype, const l2_cfg *cfg,
                                        oclf_program **prog);
OCLF_HIDDEN size_t oclf_l2_alloc_cap(const oclf_context *ctx, size_t bound);
OCLF_HIDDEN oclf_status oclf_l2_merge_launch(oclf_chain *ch, oclf_program *prog, cl_mem hk,
                                             cl_mem hi, const l2_call *c, size_t q0, size_t qn,
                                             cl_uint nslices, const l2_cfg *cfg);
OCLF_HIDDEN oclf_status oclf_l2_run_fused(oclf_context *ctx, oclf_chain *ch, oclf_program *prog,
                                          const l2_call *c, const l2_cfg *cfg);
OCLF_HIDDEN oclf_status oclf_l2_run_unfused(oclf_context *ctx, oclf_chain *ch,
                                            oclf_program *prog, const l2_call *c,
                                            const l2_cfg *cfg);

/* The family's hooks, shared by its parts (l2topk_config.c defines them). */
OCLF_HIDDEN void oclf_l2topk_heuristic(const oclf_context *ctx, oclf_dtype dtype,
                                       const oclf_shape *shape, oclf_path path, oclf_params *out);
OCLF_HIDDEN oclf_status oclf_l2topk_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                             const oclf_shape *shape, const oclf_resolved *r,
                                             int deep, oclf_op_cfg *cfg);

#endif
