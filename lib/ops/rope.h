/*
 * Rotary embedding family, the host side: what its files share.
 *
 *   rope.c          rotary_embedding (and backward), qk_norm_rope and
 *                   qk_norm_rope_cache: parameters, checks, launches, and
 *                   the cache helpers below
 *   rope_kvcache.c  kv_cache_write, in qk_norm_rope's program
 */
#ifndef OCLF_OPS_ROPE_H
#define OCLF_OPS_ROPE_H

#include "../internal.h"

#include <string.h>

/* The launch shape oclf_rope_prepare sizes, and the two trailing arguments
 * every rope kernel takes: tokens per staged group and the stage's size. */
typedef struct rope_launch {
    size_t global, local;
    int layout;
    size_t items; /* (token, head) items per work-group of kv_cache_write (LAYOUT 1) */
    cl_uint rpg;
    size_t stage_size;
} rope_launch;

/* A checked paged-cache write: the cache's K and V ranges, the slots, and
 * the number of slots (num_blocks x block_size). */
typedef struct cache_operands {
    oclf_kv_cache cache; /* the caller's, as read */
    oclf_operand k, v, slots;
    cl_mem kmem, vmem;
    cl_ulong ko, vo, so, nslots;
} cache_operands;

/* The K and V heads kv_cache_write copies. */
typedef struct kv_views {
    cl_mem k, v;
    cl_ulong ko, kts, khs, vo, vts, vhs;
    cl_uint heads, hd;
} kv_views;

/* A place for oclf_rope_prepare's alignment check: an offset and a stride
 * that must be multiples of the vector width for the aligned build (a
 * width such as head_dim or the rotary half goes in as a stride). */
static inline oclf_operand place_of(size_t offset, size_t stride)
{
    oclf_operand o;
    memset(&o, 0, sizeof o);
    o.offset = offset;
    o.stride = stride;
    return o;
}

/* Resolves the parameters, builds the program, sizes the launch (see
 * rope.c). */
OCLF_HIDDEN oclf_status oclf_rope_prepare(oclf_context *ctx, const char *name, oclf_op op,
                                          oclf_dtype dtype, size_t tokens, size_t heads, size_t hd,
                                          size_t rot, oclf_dtype cdtype, int cache_write,
                                          const oclf_operand *places, unsigned nplaces,
                                          const oclf_choice *choice, oclf_resolved *r,
                                          oclf_program **prog, rope_launch *l);
OCLF_HIDDEN oclf_status oclf_rope_check_cache(oclf_context *ctx, const char *op, oclf_dtype dtype,
                                              size_t tokens, oclf_buf slot_mapping,
                                              const oclf_kv_cache *cache, cache_operands *c);
/* 1 when `a` shares a byte with the cache's K or V. */
OCLF_HIDDEN int oclf_rope_overlaps_cache(const oclf_operand *a, const cache_operands *c);
/* With ctx->validate: every slot within the cache (negative: padding). */
OCLF_HIDDEN oclf_status oclf_rope_validate_slots(oclf_context *ctx, const char *op,
                                                 cl_command_queue queue, size_t tokens,
                                                 const cache_operands *c, cl_uint num_events,
                                                 const cl_event *wait_list);
/* kv_cache_write's launch over tokens x heads items, as the next link of a
 * chain. */
OCLF_HIDDEN oclf_status oclf_rope_launch_cache_write(oclf_chain *ch, const char *op,
                                                     oclf_program *prog, const rope_launch *l,
                                                     size_t tokens, const kv_views *v,
                                                     const cache_operands *c);

#endif
