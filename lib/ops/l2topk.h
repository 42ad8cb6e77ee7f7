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
    int formula, qb, rb, vec, qg, wgs, qlocal, xnorm, xstage;
    int64_t slices, tile;
} l2_cfg;

typedef struct l2_call {
    oclf_dtype dtype;
    size_t nq, n, d, k;
    oclf_operand q, x, xn, allow, dist, idx;
    int has_xn, has_allow;
    size_t bound;
} l2_call;

/* Work-group sizes of the launches (run_fused, run_unfused, merge_launch). */
#define L2_MERGE_WGS 8
#define L2_NORM_WGS 64
#define L2_TILE_WGS 8

OCLF_HIDDEN oclf_status oclf_l2_config(const oclf_context *ctx, oclf_path path,
                                       const oclf_params *p, uint64_t d, l2_cfg *cfg);
OCLF_HIDDEN oclf_status oclf_l2_program(oclf_context *ctx, oclf_dtype dtype,
                                        const oclf_shape *shape, oclf_path path,
                                        const l2_cfg *cfg, oclf_program **prog);
OCLF_HIDDEN size_t oclf_l2_alloc_cap(const oclf_context *ctx, size_t bound);
OCLF_HIDDEN oclf_status oclf_l2_merge_launch(oclf_chain *ch, oclf_program *prog, cl_mem hk,
                                             cl_mem hi, const l2_call *c, size_t q0, size_t qn,
                                             cl_uint nslices);
OCLF_HIDDEN oclf_status oclf_l2_run_fused(oclf_context *ctx, oclf_chain *ch, oclf_program *prog,
                                          const l2_call *c, const l2_cfg *cfg);
OCLF_HIDDEN oclf_status oclf_l2_run_unfused(oclf_context *ctx, oclf_chain *ch,
                                            oclf_program *prog, const l2_call *c,
                                            const l2_cfg *cfg);

#endif
