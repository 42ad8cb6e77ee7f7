/*
 * Matrix-unit and sub-group instructions, each with an exact emulation in
 * plain OpenCL C. This file is the only OpenCL C that names an instruction
 * of one device family; op code calls the functions below and never tests
 * which form it got.
 *
 * The form is a build option:
 *   OCLF_MMA 0  emulation: every work-item of a group of 32 ("lane" 0..31)
 *              publishes its fragment registers to local memory, the group
 *              synchronises, and each lane computes its own D elements.
 *              Every work-item of the work-group must call each function
 *              (they contain barriers), as every lane of a warp must call
 *              the instruction.
 *   OCLF_MMA 1  inline PTX (mma.sync, shfl.sync): compute capability 8.0
 *              or newer; the caller guarantees that lanes 32k..32k+31 of
 *              the work-group are one warp (a one-dimensional work-group
 *              whose size is a multiple of 32).
 *
 * Fragment layout of the m16n8k16 product D (16x8, f32) = A (16x16) B
 * (16x8) + C, for a lane with g = lane / 4 and t = lane % 4 (the layout the
 * instruction defines; the emulation reproduces it, so a kernel written
 * against it behaves the same on either form):
 *   A: four 32-bit registers, each two 16-bit elements, the lower column in
 *      the low half: a[0] row g cols 2t,2t+1; a[1] row g+8 cols 2t,2t+1;
 *      a[2] row g cols 2t+8,2t+9; a[3] row g+8 cols 2t+8,2t+9.
 *   B: two registers: b[0] rows (k) 2t,2t+1 of column g; b[1] rows 2t+8,
 *      2t+9 of column g, the lower row in the low half.
 *   C, D: four floats: c[0], c[1] row g cols 2t, 2t+1; c[2], c[3] row g+8
 *      cols 2t, 2t+1.
 *
 * The emulation sums the 16 products of a D element in k order in f32 with
 * fma and adds C last. Products of two 16-bit values are exact in f32, so
 * inputs whose partial sums are exact (small integers, say) give the same
 * bits on both forms; otherwise the two differ by the order and width of
 * the hardware's accumulation, within the op's tolerance.
 */
#ifndef OCLF_MMA_H
#define OCLF_MMA_H

#ifndef OCLF_MMA
#define OCLF_MMA 0 /* instruction form: 0 emulated, 1 inline PTX (sm_80+) */
#endif

#ifndef OCLF_ASM_GNU
#define OCLF_ASM_GNU 1 /* inline assembly spelled __asm__ (1, clang's OpenCL C) or asm (0) */
#endif
#if OCLF_ASM_GNU
#define OCLF_ASM __asm__ __volatile__
#else
#define OCLF_ASM asm volatile
#endif

/* Words of local memory the emulated m16n8k16 needs per group of 32
 * work-items (A and B fragments of every lane). */
#define OCLF_MMA_SCRATCH_WORDS (32 * 4 + 32 * 2)

/* 16-bit element `half_idx` (0 low, 1 high) of a packed register, widened
 * to f32; bf selects bf16 over f16. */
static inline float oclf_mma_elem(uint reg, uint half_idx, int bf)
{
    ushort bits = (ushort)(half_idx ? reg >> 16 : reg & 0xffffu);
    if (bf)
        return as_float(((uint)bits) << 16);
    /* f16 -> f32 by its fields: exact for every finite value */
    const uint e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
    float v = e == 0 ? (float)m * 0x1p-24f
            : e == 31 ? (m ? NAN : INFINITY) : as_float(((e + 112u) << 23) | (m << 13));
    return (bits & 0x8000u) ? -v : v;
}

#if OCLF_MMA == 0
/* D = A B + C, emulated; scratch is this lane's group's
 * OCLF_MMA_SCRATCH_WORDS words of local memory. */
static inline void oclf_mma_m16n8k16_emul(float d[4], const uint a[4], const uint b[2],
                                          const float c[4], uint lane, int bf,
                                          __local uint *scratch)
{
    __local uint *sa = scratch;
    __local uint *sb = scratch + 32 * 4;
    for (int i = 0; i < 4; i++)
        sa[lane * 4 + i] = a[i];
    sb[lane * 2 + 0] = b[0];
    sb[lane * 2 + 1] = b[1];
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        const uint row = g + 8 * (uint)(i >> 1);
        const uint col = 2 * t + (uint)(i & 1);
        float acc = 0.0f;
        for (uint k = 0; k < 16; k++) {
            /* the lane and register holding A[row][k] and B[k][col] */
            const uint a_lane = (row & 7) * 4 + ((k & 7) >> 1);
            const uint a_reg = (row >> 3) + 2 * (k >> 3);
            const uint b_lane = col * 4 + ((k & 7) >> 1);
            const uint b_reg = k >> 3;
            const float av = oclf_mma_elem(sa[a_lane * 4 + a_reg], k & 1, bf);
            const float bv = oclf_mma_elem(sb[b_lane * 2 + b_reg], k & 1, bf);
            acc = fma(av, bv, acc);
        }
        d[i] = acc + c[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

/* D = A B + C with f16 A and B. */
static inline void oclf_mma_m16n8k16_f16(float d[4], const uint a[4], const uint b[2],
                                         const float c[4], uint lane, __local uint *scratch)
{
#if OCLF_MMA == 1
    (void)lane;
    (void)scratch;
    OCLF_ASM("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    oclf_mma_m16n8k16_emul(d, a, b, c, lane, 0, scratch);
#endif
}

/* D = A B + C with bf16 A and B. */
static inline void oclf_mma_m16n8k16_bf16(float d[4], const uint a[4], const uint b[2],
                                          const float c[4], uint lane, __local uint *scratch)
{
#if OCLF_MMA == 1
    (void)lane;
    (void)scratch;
    OCLF_ASM("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    oclf_mma_m16n8k16_emul(d, a, b, c, lane, 1, scratch);
#endif
}

/* Two f32 values rounded to nearest even into one register of two 16-bit
 * elements, `lo` in the low half (an A-fragment word): f16, and bf16 with
 * bf set. One cvt.rn.{f16x2,bf16x2}.f32 natively (sm_80+); the emulation
 * rounds the same way in plain OpenCL C (NaN stays a NaN). */
static inline uint oclf_pack2_16(float lo, float hi, int bf)
{
#if OCLF_MMA == 1
    uint r;
    if (bf)
        OCLF_ASM("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        OCLF_ASM("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    if (bf) {
        uint a = as_uint(lo), b = as_uint(hi);
        a = lo != lo ? (a >> 16) | 0x40u : (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
        b = hi != hi ? (b >> 16) | 0x40u : (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        return (a & 0xffffu) | (b << 16);
    }
    ushort2 h;
    vstore_half2_rte((float2)(lo, hi), 0, (private half *)&h);
    return as_uint(h);
#endif
}

/* 2^x: ex2.approx natively (relative error about 2^-22), the library's
 * exp2 in the emulation. */
static inline float oclf_exp2(float x)
{
#if OCLF_MMA == 1
    float r;
    OCLF_ASM("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return exp2(x);
#endif
}

/* The value `v` of lane (lane ^ mask) within the group of 32, every lane
 * taking part; scratch is 32 words of local memory per group of 32. */
static inline float oclf_shfl_xor32(float v, uint mask, uint lane, __local float *scratch)
{
#if OCLF_MMA == 1
    (void)lane;
    (void)scratch;
    float r;
    OCLF_ASM("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=f"(r)
                 : "f"(v), "r"(mask));
    return r;
#else
    scratch[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float r = scratch[lane ^ (mask & 31u)];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
#endif
}

/* ---- sub-group shuffles ---------------------------------------------------
 * The value `v` of the work-item whose sub-group lane is (lane ^ mask), in
 * the native form OCLF_SUBGROUP_FORM names (lib/device.c decides it; the
 * reductions of cl/subgroup.h call this and never test the form):
 *   1  the shuffle extensions' function (cl_khr_subgroup_shuffle, or
 *      cl_intel_subgroups' spelling with OCLF_SUBGROUP_INTEL 1);
 *   2  a warp's butterfly shuffle (oclf_shfl_xor32 above, inline PTX);
 *   3  the wavefront's permute instruction (ds_bpermute through clang's
 *      builtin), the lane read from the wavefront's own lane count.
 * Every work-item of the sub-group must call it, as for the instructions.
 * Form 0 has none: its reductions go through local memory. */
#ifndef OCLF_SUBGROUP_FORM
#define OCLF_SUBGROUP_FORM 0 /* 0 local memory, 1 shuffle functions, 2 PTX, 3 permute */
#endif
#ifndef OCLF_SUBGROUP_INTEL
#define OCLF_SUBGROUP_INTEL 0 /* form 1 spelled as cl_intel_subgroups spells it */
#endif
/* OCLF_SUBGROUP_KERNEL before a kernel that reduces natively: with
 * cl_intel_subgroups the sub-group width is the compiler's choice per
 * kernel unless required, so it is required to be OCLF_SUBGROUP_WIDTH
 * (16: a width every Intel GPU offers, and twice the registers a work-item
 * of pvc's default SIMD32). */
#if OCLF_SUBGROUP_FORM == 1 && OCLF_SUBGROUP_INTEL
#define OCLF_SUBGROUP_KERNEL __attribute__((intel_reqd_sub_group_size(OCLF_SUBGROUP_WIDTH)))
#else
#define OCLF_SUBGROUP_KERNEL
#endif
#if OCLF_SUBGROUP_FORM == 1
#if OCLF_SUBGROUP_INTEL
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
static inline float oclf_sg_xor(float v, uint mask)
{
    return intel_sub_group_shuffle_xor(v, mask);
}
#else
#pragma OPENCL EXTENSION cl_khr_subgroup_shuffle : enable
static inline float oclf_sg_xor(float v, uint mask) { return sub_group_shuffle_xor(v, mask); }
#endif
#elif OCLF_SUBGROUP_FORM == 2
static inline float oclf_sg_xor(float v, uint mask)
{
    float r;
    OCLF_ASM("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
    return r;
}
#elif OCLF_SUBGROUP_FORM == 3
static inline float oclf_sg_xor(float v, uint mask)
{
    const uint lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return as_float(__builtin_amdgcn_ds_bpermute((int)((lane ^ mask) << 2), as_int(v)));
}
#endif

#endif
