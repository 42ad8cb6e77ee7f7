/*
 * Attention, the host side: what its files share.
 *
 *   attention.c             parameters (heuristic, configuration, validation),
 *                           the checks both entry points share, the fused launch
 *   attention_contiguous.c  oclf_attention: contiguous K and V
 *   attention_paged.c       oclf_attention_paged: K and V in a paged cache
 *   attention_unfused.c     the unfused path both entries end in
 */
#ifndef OCLF_OPS_ATTENTION_H
#define OCLF_OPS_ATTENTION_H

#include "../internal.h"

#define ATTN_MAX_D 256
/* Work-group size of the unfused kernels. */
#define ATTN_ELEM_WGS 64

typedef struct attn_cfg {
    int wgs, bk, vec, acc, dp, paged, stage;
    /* STAGE 2: rows per group, work-items per key, elements per 16 bytes,
     * the partitions' target */
    int qr, tpk, ke, fill;
    size_t part;
    char defines[OCLF_DEFINES_MAX];
} attn_cfg;
OCLF_CFG_FITS(attn_cfg);

/* A checked head view. */
typedef struct attn_heads {
    oclf_operand op;
    oclf_blocks blocks;
    size_t hs; /* head stride */
} attn_heads;

typedef struct attn_call {
    const char *op; /* "attention" or "attention_paged", for messages */
    oclf_dtype dtype;
    /* tk: contiguous, the key tokens; paged, the block table's reach
     * (max_blocks x block_size), the most keys a sequence can have */
    size_t batch, d, tq, tk, max_sq, hq, hk;
    attn_heads q, k, v, o;
    /* cuk: contiguous, cu_seqlens_k; paged, seq_lens */
    oclf_operand cuq, cuk, slopes, sinks, lse;
    int has_alibi, has_sinks, has_lse, has_drop;
    float scale, cap, drop_p;
    uint64_t seed, doff;
    int64_t left, right; /* causal folded in; -1 unbounded */
    int paged;
    oclf_operand bt; /* block tables */
    size_t bts, bs, nblk, maxb;
} attn_call;

/* Where the GEMMs read one operand's heads: the caller's f32 buffer as it
 * is, or its packed f32 copy. */
typedef struct gemm_view {
    cl_mem mem;
    size_t off, ts, hs;
} gemm_view;

/* wgs_default: WGS is the heuristic's, not the caller's or a record's, so
 * it may give way (halve) where a BK that was asked for leaves its rows no
 * room in local memory. */
OCLF_HIDDEN oclf_status oclf_attn_config(const oclf_context *ctx, oclf_dtype dtype,
                                         const oclf_params *p, size_t d, int paged,
                                         int wgs_default, attn_cfg *cfg);
/* The staged structure in place of the matrix-unit one (STAGE 3) where
 * the call's options would make its native build spill. */
OCLF_HIDDEN oclf_status oclf_attn_mma_fallback(const oclf_context *ctx, const attn_call *c,
                                               attn_cfg *cfg);
OCLF_HIDDEN oclf_status oclf_attn_program(oclf_context *ctx, oclf_dtype dtype,
                                          const char *defines, oclf_program **prog);
OCLF_HIDDEN oclf_status oclf_attn_check_heads(oclf_context *ctx, const attn_call *c,
                                              const char *name, oclf_heads h, size_t tokens,
                                              size_t el, attn_heads *out);
/* What both entry points check the same way: options, the head dim,
 * sizes, q and o, the query offsets and the optional operands. c->op, d,
 * batch, tq and hk are set by the caller. */
OCLF_HIDDEN oclf_status oclf_attn_check_queries(oclf_context *ctx, oclf_dtype dtype, size_t max_sq,
                                                oclf_buf cuq, oclf_heads q, oclf_heads o,
                                                const oclf_attention_options *options,
                                                attn_call *c);
/* o and lse against everything else, once every operand is checked. */
OCLF_HIDDEN oclf_status oclf_attn_check_outputs(oclf_context *ctx, const attn_call *c);
/* Cumulative offsets `a` of batch + 1 entries, read on the host, against
 * the contract: from 0, non-decreasing, at most max_sq apart (0: no bound),
 * ending at total. `name` names the array in the message. */
OCLF_HIDDEN oclf_status oclf_attn_check_offsets(oclf_context *ctx, const attn_call *c,
                                                const char *name, const int32_t *a,
                                                size_t max_sq, size_t total);
OCLF_HIDDEN oclf_status oclf_attn_run_fused(oclf_context *ctx, cl_command_queue queue,
                                            const attn_call *c, const attn_cfg *cfg,
                                            cl_uint num_events, const cl_event *wait_list,
                                            cl_event *event);
/* `kv`: the keys and values already as packed f32 (the paged path's
 * gathered copies), or NULL to read k and v (widened when 16-bit). */
OCLF_HIDDEN oclf_status oclf_attn_run_unfused(oclf_context *ctx, oclf_chain *ch,
                                              const attn_call *c, const int32_t *cu,
                                              const gemm_view *kv);

#endif
