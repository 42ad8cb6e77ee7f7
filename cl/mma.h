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
 * (The wavefront's and the sub-group's instructions further down have their
 * own options, OCLF_MFMA and OCLF_DPAS, with the same two kinds of form.)
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

/* ---- a wavefront's matrix instruction -----------------------------------
 * v_mfma_f32_16x16x16 (f16, and bf16 in its "_1k" form) of CDNA 2 and 3
 * (gfx90a, gfx942): D (16x16, f32) = A (16x16) B (16x16) + C over a
 * wavefront of 64 lanes. For lane l with i = l % 16 and q = l / 16:
 *   A: two 32-bit registers, four 16-bit elements of row i, columns (k)
 *      4q..4q+3 in order, the lower k in the low half: a[0] k = 4q, 4q+1;
 *      a[1] k = 4q+2, 4q+3.
 *   B: two registers, rows (k) 4q..4q+3 of column i, packed the same way.
 *   C, D: four floats, rows 4q..4q+3 of column i.
 * So a lane's A and B elements are consecutive in k: a row-major A tile
 * and a column-major B tile give each lane one 8-byte load.
 *
 *   OCLF_MFMA 0  emulation over groups of 64 work-items through local
 *               memory (every work-item of the work-group calls it);
 *   OCLF_MFMA 1  clang's builtin; the caller guarantees that work-items
 *               64k..64k+63 are one wavefront (gfx90a or newer: the bf16
 *               form needs CDNA 2).
 * The emulation sums in k order with fma and adds C last, as the m16n8k16
 * emulation above does, with the same consequence for exact inputs. */
#ifndef OCLF_MFMA
#define OCLF_MFMA 0 /* wavefront matrix instruction: 0 emulated, 1 clang's builtin (gfx90a+) */
#endif

/* Words of local memory the emulated 16x16x16 needs per group of 64. */
#define OCLF_MFMA_SCRATCH_WORDS (64 * 2 + 64 * 2)

#if OCLF_MFMA == 0
/* D = A B + C, emulated; scratch is this lane's group's
 * OCLF_MFMA_SCRATCH_WORDS words of local memory. */
static inline void oclf_mfma_16x16x16_emul(float d[4], const uint a[2], const uint b[2],
                                           const float c[4], uint lane, int bf,
                                           __local uint *scratch)
{
    __local uint *sa = scratch;
    __local uint *sb = scratch + 64 * 2;
    sa[lane * 2 + 0] = a[0];
    sa[lane * 2 + 1] = a[1];
    sb[lane * 2 + 0] = b[0];
    sb[lane * 2 + 1] = b[1];
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint i = lane & 15u, q = lane >> 4;
    for (uint r = 0; r < 4; r++) {
        const uint row = 4 * q + r;
        float acc = 0.0f;
        for (uint k = 0; k < 16; k++) {
            /* A[row][k] sits in lane row + 16 (k / 4), B[k][i] in lane
             * i + 16 (k / 4); register (k % 4) / 2, half k % 2 in both */
            const uint word = (k >> 2) * 16 * 2 + ((k & 3u) >> 1);
            const float av = oclf_mma_elem(sa[row * 2 + word], k & 1u, bf);
            const float bv = oclf_mma_elem(sb[i * 2 + word], k & 1u, bf);
            acc = fma(av, bv, acc);
        }
        d[r] = acc + c[r];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#else
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

/* D = A B + C, bf16 A and B where bf, else f16. */
static inline void oclf_mfma_16x16x16(float d[4], const uint a[2], const uint b[2],
                                      const float c[4], uint lane, int bf,
                                      __local uint *scratch)
{
#if OCLF_MFMA == 1
    (void)lane;
    (void)scratch;
    const float4 cv = (float4)(c[0], c[1], c[2], c[3]);
    const float4 r =
        bf ? __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(as_short4((uint2)(a[0], a[1])),
                                                       as_short4((uint2)(b[0], b[1])), cv, 0,
                                                       0, 0)
           : __builtin_amdgcn_mfma_f32_16x16x16f16(as_half4((uint2)(a[0], a[1])),
                                                   as_half4((uint2)(b[0], b[1])), cv, 0, 0, 0);
    d[0] = r.x;
    d[1] = r.y;
    d[2] = r.z;
    d[3] = r.w;
#else
    oclf_mfma_16x16x16_emul(d, a, b, c, lane, bf, scratch);
#endif
}

static inline void oclf_mfma_16x16x16_f16(float d[4], const uint a[2], const uint b[2],
                                          const float c[4], uint lane, __local uint *scratch)
{
    oclf_mfma_16x16x16(d, a, b, c, lane, 0, scratch);
}

static inline void oclf_mfma_16x16x16_bf16(float d[4], const uint a[2], const uint b[2],
                                           const float c[4], uint lane, __local uint *scratch)
{
    oclf_mfma_16x16x16(d, a, b, c, lane, 1, scratch);
}

/* ---- a sub-group's matrix instruction ------------------------------------
 * DPAS through cl_intel_subgroup_matrix_multiply_accumulate, in the form
 * for devices whose sub-groups are 16 wide (Data Center GPU Max): D (8x16,
 * f32) = A (8x16) B (16x16) + C, over a sub-group of 16. For lane j:
 *   A: a[r] (r = 0..7), one 16-bit element: row r, column (k) j;
 *   B: b[i] (i = 0..7), two 16-bit elements of column j: k = 2i in the low
 *      half, 2i+1 in the high one;
 *   C, D: c[r], d[r]: row r, column j.
 *
 *   OCLF_DPAS 0  emulation over groups of 16 work-items through local
 *               memory (every work-item of the work-group calls it);
 *   OCLF_DPAS 1  the extension's function; the kernel must require
 *               sub-groups of 16 (intel_reqd_sub_group_size(16)) and
 *               work-items 16k..16k+15 are one sub-group.
 * A compiler that does not declare the function (IGC 1.0.12 of Debian 12
 * implements it, emitting dpas.8x8, but declares it nowhere) gets the
 * declaration below. */
#ifndef OCLF_DPAS
#define OCLF_DPAS 0 /* sub-group matrix instruction: 0 emulated, 1 the extension's function */
#endif

/* Words of local memory the emulated m8n16k16 needs per group of 16. */
#define OCLF_DPAS_SCRATCH_WORDS (16 * 8)

#if OCLF_DPAS == 0
/* D = A B + C, emulated; scratch is this lane's group's
 * OCLF_DPAS_SCRATCH_WORDS words of local memory. Only A crosses lanes: a
 * lane's B column and C, D elements are its own. */
static inline void oclf_dpas_m8n16k16_emul(float d[8], const ushort a[8], const uint b[8],
                                           const float c[8], uint lane, int bf,
                                           __local uint *scratch)
{
    for (int r = 0; r < 8; r++)
        scratch[lane * 8 + r] = a[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint r = 0; r < 8; r++) {
        float acc = 0.0f;
        for (uint k = 0; k < 16; k++) {
            const float av = oclf_mma_elem(scratch[k * 8 + r], 0, bf);
            const float bv = oclf_mma_elem(b[k >> 1], k & 1u, bf);
            acc = fma(av, bv, acc);
        }
        d[r] = acc + c[r];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#else
#ifndef cl_intel_subgroup_matrix_multiply_accumulate
float8 __attribute__((overloadable)) intel_sub_group_f16_f16_matrix_mad_k16(short8 a, int8 b,
                                                                            float8 acc);
float8 __attribute__((overloadable)) intel_sub_group_bf16_bf16_matrix_mad_k16(short8 a, int8 b,
                                                                              float8 acc);
#endif
static inline void oclf_dpas_m8n16k16_native(float d[8], const ushort a[8], const uint b[8],
                                             const float c[8], int bf)
{
    const short8 av = as_short8((ushort8)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
    const int8 bv = as_int8((uint8)(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]));
    const float8 cv = (float8)(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
    const float8 r = bf ? intel_sub_group_bf16_bf16_matrix_mad_k16(av, bv, cv)
                        : intel_sub_group_f16_f16_matrix_mad_k16(av, bv, cv);
    d[0] = r.s0;
    d[1] = r.s1;
    d[2] = r.s2;
    d[3] = r.s3;
    d[4] = r.s4;
    d[5] = r.s5;
    d[6] = r.s6;
    d[7] = r.s7;
}
#endif

/* D = A B + C, bf16 A and B where bf, else f16. */
static inline void oclf_dpas_m8n16k16(float d[8], const ushort a[8], const uint b[8],
                                      const float c[8], uint lane, int bf,
                                      __local uint *scratch)
{
#if OCLF_DPAS == 1
    (void)lane;
    (void)scratch;
    oclf_dpas_m8n16k16_native(d, a, b, c, bf);
#else
    oclf_dpas_m8n16k16_emul(d, a, b, c, lane, bf, scratch);
#endif
}

static inline void oclf_dpas_m8n16k16_f16(float d[8], const ushort a[8], const uint b[8],
                                          const float c[8], uint lane, __local uint *scratch)
{
    oclf_dpas_m8n16k16(d, a, b, c, lane, 0, scratch);
}

static inline void oclf_dpas_m8n16k16_bf16(float d[8], const ushort a[8], const uint b[8],
                                           const float c[8], uint lane, __local uint *scratch)
{
    oclf_dpas_m8n16k16(d, a, b, c, lane, 1, scratch);
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
