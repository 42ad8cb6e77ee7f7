/* The paged KV-cache write (oclf_kv_cache_write): K and V heads copied into
 * the cache's slots, in qk_norm_rope's program (lib/ops/rope.c). */
#include "rope.h"

#include <stdio.h>

void oclf_kv_cache_init(oclf_kv_cache *cache)
{
    if (cache)
        *cache = (oclf_kv_cache)OCLF_KV_CACHE_INIT;
}

oclf_status oclf_kv_cache_write(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                size_t tokens, oclf_heads k, oclf_heads v, oclf_buf slot_mapping,
                                const oclf_kv_cache *cache, const oclf_choice *choice,
                                cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *op = "kv_cache_write";
    oclf_status st;
    cache_operands c;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)) ||
        (st = oclf_rope_check_cache(ctx, op, dtype, tokens, slot_mapping, cache, &c)))
        return st;
    cache = &c.cache;
    const size_t hd = cache->head_dim, el = oclf_dtype_size(dtype);
    const oclf_heads *sets[2] = {&k, &v};
    oclf_operand ops[2];
    size_t hs[2];
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "v" : "k";
        if (sets[i]->count != cache->heads)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s has %zu heads, the cache %zu",
                             op, name, sets[i]->count, cache->heads);
        char what[64];
        oclf_blocks b;
        snprintf(what, sizeof what, "%s: %s", op, name);
        if ((st = oclf_check_heads(ctx, what, *sets[i], tokens, hd, el, &ops[i], &b, &hs[i])))
            return st;
        if (oclf_rope_overlaps_cache(&ops[i], &c))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s overlaps the cache", op, name);
        if (oclf_overlap(&ops[i], &c.slots))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s overlaps slot_mapping", op,
                             name);
    }

    /* No parameters of its own: the copy runs in the row structure
     * qk_norm_rope would take for these heads (its records, or the choice's
     * LAYOUT, WGS and VEC), from the same program. */
    oclf_resolved r;
    oclf_program *prog = NULL;
    rope_launch l;
    const oclf_operand places[] = {ops[0], place_of(0, hs[0]), ops[1], place_of(0, hs[1]),
                                   place_of(0, hd), place_of(c.ko, 0), place_of(c.vo, 0)};
    if ((st = oclf_rope_prepare(ctx, op, OCLF_OP_QK_NORM_ROPE, dtype, tokens, cache->heads, hd,
                                hd - hd % 2, dtype, 0, places, OCLF_NARGS(places), choice, &r,
                                &prog, &l)) ||
        (st = oclf_rope_validate_slots(ctx, op, queue, tokens, &c, num_events, wait_list)))
        return st;
    if (tokens == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    kv_views kv;
    kv.k = ops[0].mem, kv.ko = ops[0].offset, kv.kts = ops[0].stride, kv.khs = hs[0];
    kv.v = ops[1].mem, kv.vo = ops[1].offset, kv.vts = ops[1].stride, kv.vhs = hs[1];
    kv.heads = (cl_uint)cache->heads, kv.hd = (cl_uint)hd;
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = oclf_rope_launch_cache_write(&ch, op, prog, &l, tokens, &kv, &c);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    return st;
}
