/*
 * Reductions across a segment of work-items: `width` consecutive
 * work-items of a one-dimensional work-group (a power of two, the segments
 * aligned to it), each holding n values. Where the device offers sub-group
 * shuffles (OCLF_SUBGROUP_FORM 1 to 3, decided in lib/device.c, the
 * instructions in cl/mma.h) and the segment fits the sub-group width the
 * form guarantees, the values move between registers; otherwise (form 0,
 * or a segment wider than that) through local memory with barriers, which
 * any device runs.
 *
 * Each is a butterfly: at step s a work-item adds its partner's (lid ^ s)
 * partial result to its own, and the two add the same two numbers, so
 * every work-item of a segment ends with the same bits (a kernel that
 * keeps per-work-item softmax state from a reduced score needs that).
 *
 * Every work-item of the work-group must call each function with the same
 * arguments but v (the local-memory form has barriers); `scratch` is the
 * function's own between calls: n x nitems floats of local memory, where
 * nitems is the work-group's size.
 */
#ifndef OCLF_SUBGROUP_H
#define OCLF_SUBGROUP_H

#ifndef OCLF_SUBGROUP_WIDTH
#define OCLF_SUBGROUP_WIDTH 32 /* work-items a shuffle reduction may span */
#endif
#include "mma.h"

/* Whether a segment of `width` work-items reduces through shuffles. */
static inline int oclf_seg_native(uint width)
{
    return OCLF_SUBGROUP_FORM != 0 && width <= OCLF_SUBGROUP_WIDTH;
}

/* The sums over each segment of v[0..n), in place. */
static inline void oclf_seg_sum_n(float *v, uint n, uint width, uint lid, uint nitems,
                                  local float *scratch)
{
#if OCLF_SUBGROUP_FORM
    if (oclf_seg_native(width)) {
        _Pragma("unroll")
        for (uint s = 1; s < width; s <<= 1)
            _Pragma("unroll")
            for (uint r = 0; r < n; r++)
                v[r] += oclf_sg_xor(v[r], s);
        return;
    }
#endif
    _Pragma("unroll")
    for (uint s = 1; s < width; s <<= 1) {
        _Pragma("unroll")
        for (uint r = 0; r < n; r++)
            scratch[r * nitems + lid] = v[r];
        barrier(CLK_LOCAL_MEM_FENCE);
        _Pragma("unroll")
        for (uint r = 0; r < n; r++)
            v[r] += scratch[r * nitems + (lid ^ s)];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* One value's sum over its segment. */
static inline float oclf_seg_sum(float v, uint width, uint lid, uint nitems,
                                 local float *scratch)
{
    oclf_seg_sum_n(&v, 1, width, lid, nitems, scratch);
    return v;
}

/* The sum of one float per work-item over a work-group of OCLF_WGS (a
 * power of two, at least OCLF_SUBGROUP_WIDTH), every work-item getting the
 * same bits: each sub-group's butterfly, then the OCLF_WGS /
 * OCLF_SUBGROUP_WIDTH partial sums through `scratch` (that many floats),
 * added in one order by every work-item. Native forms only. The leading
 * barrier lets the next call reuse `scratch` once every work-item has read
 * this one's partials; a work-group of one sub-group needs neither. */
#if OCLF_SUBGROUP_FORM
static inline float oclf_group_sum(float v, local float *scratch)
{
    _Pragma("unroll")
    for (uint s = 1; s < OCLF_SUBGROUP_WIDTH; s <<= 1)
        v += oclf_sg_xor(v, s);
#if OCLF_WGS > OCLF_SUBGROUP_WIDTH
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid % OCLF_SUBGROUP_WIDTH == 0)
        scratch[lid / OCLF_SUBGROUP_WIDTH] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    v = 0.0f;
    _Pragma("unroll")
    for (uint i = 0; i < OCLF_WGS / OCLF_SUBGROUP_WIDTH; i++)
        v += scratch[i];
#else
    (void)scratch;
#endif
    return v;
}
#endif

#endif
