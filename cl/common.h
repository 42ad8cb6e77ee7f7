/*
 * Shared OpenCL C for every operation: storage dtypes, vector widths and
 * work-group reductions. The host prepends this text to each op source, after
 * its -D options and the device-quirk defines (lib/device.c), so every name
 * here can be overridden per build; the #ifndef defaults let an op file be
 * compiled alone while it is being written.
 *
 * Storage dtypes (OCLF_DTYPE): 0 f32, 1 f16 (vload_half/vstore_half_rte, no
 * cl_khr_fp16 needed), 2 bf16 (ushort storage, upper half of a float).
 * All arithmetic is fp32; values are rounded to storage once, on store.
 */
#ifndef OCLF_COMMON_H
#define OCLF_COMMON_H

#ifndef OCLF_DTYPE
#define OCLF_DTYPE 0
#endif
#ifndef OCLF_VEC
#define OCLF_VEC 4
#endif
#ifndef OCLF_WGS
#define OCLF_WGS 64
#endif

#define OCLF_CAT_(a, b) a##b
#define OCLF_CAT(a, b) OCLF_CAT_(a, b)

/* A function every kernel that calls it must inline. Both IGC and AMD's
 * back end may keep a large `static inline` function called from more
 * than one kernel (or more than once) as a real call: its out-parameters
 * and private vectors then live in memory, or it is not specialised for
 * its constant arguments. Cross-entropy's row statistics spilled 10-26
 * registers on pvc that way; act_and_mul's loops took twice the
 * registers on gfx90a, and rope's walks kept their job struct in memory
 * on sm_90. */
#define OCLF_INLINE static inline __attribute__((always_inline))

/* ---- storage type ------------------------------------------------------- */
#if OCLF_DTYPE == 0
typedef float stor_t;
#elif OCLF_DTYPE == 1
typedef half stor_t; /* pointer type only: never loaded as a value */
#elif OCLF_DTYPE == 2
typedef ushort stor_t;
#else
#error "unknown OCLF_DTYPE"
#endif

/* bf16 -> f32 is exact: the bits go to the top half. */
static inline float bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }

/* f32 -> bf16 with round-to-nearest-even; NaN stays a quiet NaN (adding the
 * rounding bias to a NaN could carry it into infinity). */
static inline ushort f32_to_bf16(float f)
{
    uint u = as_uint(f);
    if (f != f)
        return (ushort)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

/* ---- 16-bit conversions -------------------------------------------------
 * f16 widening is vload_half(N), which the CPU device here turns into
 * vcvtph2ps. Narrowing, where the device converts _Float16 vectors
 * (OCLF_HAS_FLOAT16 from lib/device.c) and the compiler has the type and
 * builtins (then OCLF_FLOAT16 is 1), is the language's own round-to-
 * nearest-even conversion, which CPUs with F16C run as one vcvtps2ph per
 * vector; elsewhere vstore_half(N)_rte. The CPU device here expands
 * vstore_half*_rte into some sixty integer instructions per vector, which
 * bound every f16 kernel that writes. Widening stays opaque on purpose: a
 * visible float-from-_Float16 conversion lets the optimizer move selects
 * and compares to _Float16 vectors, which the CPU has no instructions for
 * (act_and_mul f16 ran 4x slower, lane by lane). */
#if defined(OCLF_HAS_FLOAT16) && defined(__FLT16_MAX__) && defined(__has_builtin)
#if __has_builtin(__builtin_convertvector) && __has_builtin(__builtin_astype)
#define OCLF_FLOAT16 1
#endif
#endif
#ifndef OCLF_FLOAT16
#define OCLF_FLOAT16 0
#endif

/* Scalar load/store at element index i (64-bit). */
#if OCLF_DTYPE == 0
#define LD(p, i) ((p)[(i)])
#define ST(p, i, v) ((p)[(i)] = (v))
#elif OCLF_DTYPE == 1
#define LD(p, i) vload_half((i), (p))
#if OCLF_FLOAT16
#define ST(p, i, v) (((global _Float16 *)(p))[(i)] = (_Float16)(v))
#else
#define ST(p, i, v) vstore_half_rte((v), (i), (p))
#endif
#else
#define LD(p, i) bf16_to_f32((p)[(i)])
#define ST(p, i, v) ((p)[(i)] = f32_to_bf16(v))
#endif

/* Round a float through storage and back, for values the op must reuse
 * exactly as they were stored (add + norm computes on the rounded sum). */
#if OCLF_DTYPE == 0
#define ROUND_STOR(v) (v)
#elif OCLF_DTYPE == 1
/* `half` variables need cl_khr_fp16; a ushort holds the bits instead. */
static inline float oclf_round_half(float v)
{
    ushort h;
#if OCLF_FLOAT16
    h = __builtin_astype((_Float16)v, ushort);
#else
    vstore_half_rte(v, 0, (__private half *)&h);
#endif
    return vload_half(0, (__private const half *)&h);
}
#define ROUND_STOR(v) oclf_round_half(v)
#else
#define ROUND_STOR(v) bf16_to_f32(f32_to_bf16(v))
#endif

/* ---- vectors of 16-bit storage -------------------------------------------
 * LD16V(n, p) / ST16V(n, p, h): n ushorts at p as one ushortn, with one
 * vector access that assumes only the element's alignment, so any element
 * offset and row stride may use it. This is how libclc implements vloadn /
 * vstoren; the CPU device here instead splits vstoren of 16-bit elements
 * into n scalar stores (a ushort16 copy ran at a fifth of the speed of the
 * same copy through these types). */
typedef ushort2 oclf_ushort2_e __attribute__((aligned(2)));
typedef ushort4 oclf_ushort4_e __attribute__((aligned(2)));
typedef ushort8 oclf_ushort8_e __attribute__((aligned(2)));
typedef ushort16 oclf_ushort16_e __attribute__((aligned(2)));
#define LD16V(n, p) (*(global const OCLF_CAT(OCLF_CAT(oclf_ushort, n), _e) *)(p))
#define ST16V(n, p, h) (*(global OCLF_CAT(OCLF_CAT(oclf_ushort, n), _e) *)(p) = (h))
/* LDFV(n, p) / STFV(n, p, v): the same for n floats in global memory (the
 * f32 rows here and the generated expression kernels): the CPU device here
 * splits vstore16 of floats into four 16-byte stores, and a following
 * vload16 of the same row into 8-byte pieces, where this is one move. */
typedef float2 oclf_float2_e __attribute__((aligned(4)));
typedef float4 oclf_float4_e __attribute__((aligned(4)));
typedef float8 oclf_float8_e __attribute__((aligned(4)));
typedef float16 oclf_float16_e __attribute__((aligned(4)));
#define LDFV(n, p) (*(global const OCLF_CAT(OCLF_CAT(oclf_float, n), _e) *)(p))
#define STFV(n, p, v) (*(global OCLF_CAT(OCLF_CAT(oclf_float, n), _e) *)(p) = (v))

/* WIDEN_F16(n, h) / NARROW_F16(n, v): ushortn of f16 bits <-> floatn;
 * WIDEN_BF16(n, h) / NARROW_BF16(n, v) the same for bf16 bits. */
/* The vload_halfN/vstore_halfN conversions run on a private vector that
 * is naturally aligned: some compilers give vload_halfN on a global pointer
 * the alignment of a halfN (an aligned 16- or 32-byte move that faults at
 * an odd element offset). */
#if OCLF_FLOAT16
typedef _Float16 oclf_f16x2 __attribute__((ext_vector_type(2)));
typedef _Float16 oclf_f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 oclf_f16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 oclf_f16x16 __attribute__((ext_vector_type(16)));
#define OCLF_NARROW_F16_FN_(n)                                                 \
    static inline OCLF_CAT(ushort, n) OCLF_CAT(oclf_narrow_f16_, n)(OCLF_CAT(float, n) v) \
    {                                                                          \
        return __builtin_astype(__builtin_convertvector(v, OCLF_CAT(oclf_f16x, n)), \
                                OCLF_CAT(ushort, n));                          \
    }
#else
#define OCLF_NARROW_F16_FN_(n)                                                 \
    static inline OCLF_CAT(ushort, n) OCLF_CAT(oclf_narrow_f16_, n)(OCLF_CAT(float, n) v) \
    {                                                                          \
        OCLF_CAT(ushort, n) h;                                                 \
        OCLF_CAT(OCLF_CAT(vstore_half, n), _rte)(v, 0, (private half *)&h);    \
        return h;                                                              \
    }
#endif
#define OCLF_HALF_CVT_FN_(n)                                                   \
    static inline OCLF_CAT(float, n) OCLF_CAT(oclf_widen_f16_, n)(OCLF_CAT(ushort, n) h) \
    {                                                                          \
        return OCLF_CAT(vload_half, n)(0, (private const half *)&h);           \
    }                                                                          \
    OCLF_NARROW_F16_FN_(n)
OCLF_HALF_CVT_FN_(2)
OCLF_HALF_CVT_FN_(4)
OCLF_HALF_CVT_FN_(8)
OCLF_HALF_CVT_FN_(16)
#define WIDEN_F16(n, h) OCLF_CAT(oclf_widen_f16_, n)(h)
#define NARROW_F16(n, v) OCLF_CAT(oclf_narrow_f16_, n)(v)
#define WIDEN_BF16(n, h) OCLF_CAT(as_float, n)(OCLF_CAT(convert_uint, n)(h) << 16)
#define NARROW_BF16(n, v) OCLF_CAT(oclf_narrow_bf16_, n)(v)
/* f32 -> bf16 as f32_to_bf16, lane by lane. Instruction count matters here:
 * a CPU runs the bf16 kernels at the rate of their integer vector work, and
 * this narrowing was most of it. The NaN test is one unordered float compare
 * (f != f; no -cl-finite-math-only in any build) rather than a mask and an
 * integer compare; the quiet bit is set before the shift shared by both
 * results, so one select and one shift remain. */
#define OCLF_BF16_CVT_FN_(n)                                                   \
    static inline OCLF_CAT(ushort, n) OCLF_CAT(oclf_narrow_bf16_, n)(OCLF_CAT(float, n) f) \
    {                                                                          \
        const OCLF_CAT(uint, n) u = OCLF_CAT(as_uint, n)(f);                   \
        /* comparisons give -1/0 ints */                                       \
        const OCLF_CAT(int, n) nan = f != f;                                   \
        const OCLF_CAT(uint, n) r = u + 0x7fffu + ((u >> 16) & 1u);            \
        return OCLF_CAT(convert_ushort, n)(select(r, u | 0x00400000u, nan) >> 16); \
    }
OCLF_BF16_CVT_FN_(2)
OCLF_BF16_CVT_FN_(4)
OCLF_BF16_CVT_FN_(8)
OCLF_BF16_CVT_FN_(16)

/* ---- vectors of OCLF_VEC floats ---------------------------------------- */
/* Vector loads need only element alignment (vloadN, LD16V), so any offset
 * and row stride may use them; the tail of a row that is not a multiple of
 * VEC is handled by scalar code in each kernel. */
#if OCLF_VEC == 1
typedef float floatv;
#define VSUM(v) (v)
#define VSPLAT(s) ((float)(s))
#else
typedef OCLF_CAT(float, OCLF_VEC) floatv;
#define VSPLAT(s) ((floatv)(s))
#endif

#if OCLF_VEC == 2
#define VSUM(v) ((v).s0 + (v).s1)
#elif OCLF_VEC == 4
#define VSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#elif OCLF_VEC == 8
#define VSUM(v) ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
#elif OCLF_VEC == 16
#define VSUM(v) (VSUM8_((v).lo) + VSUM8_((v).hi))
#define VSUM8_(w) ((((w).s0 + (w).s1) + ((w).s2 + (w).s3)) + (((w).s4 + (w).s5) + ((w).s6 + (w).s7)))
#elif OCLF_VEC != 1
#error "OCLF_VEC must be 1, 2, 4, 8 or 16"
#endif

/* OCLF_ALIGNED 1: the host checked that every vector LDV and STV touch
 * starts at a multiple of OCLF_VEC elements (the offset and row stride of
 * each operand, and the kernel's own vector positions within a row), so the
 * vectors are naturally aligned. GPU compilers split an element-aligned
 * vector into 4- or 2-byte accesses; an aligned one is one access of up to
 * 16 bytes per 16 bytes. 0: element alignment, any offset and stride. */
#ifndef OCLF_ALIGNED
#define OCLF_ALIGNED 0
#endif
/* An aligned vector of 16-bit elements moves as 32-bit words: NVIDIA's
 * back end splits a ushort8 access into 2-byte ones, where a uint4 stays one
 * 16-byte access (OCLF_LD16A, OCLF_ST16A; the bits are reinterpreted, not
 * converted). */
#if OCLF_VEC == 2
typedef uint oclf_words_a;
#define OCLF_AS_WORDS(h) as_uint(h)
#elif OCLF_VEC == 4
typedef uint2 oclf_words_a;
#define OCLF_AS_WORDS(h) as_uint2(h)
#elif OCLF_VEC == 8
typedef uint4 oclf_words_a;
#define OCLF_AS_WORDS(h) as_uint4(h)
#elif OCLF_VEC == 16
typedef uint8 oclf_words_a;
#define OCLF_AS_WORDS(h) as_uint8(h)
#endif
#if OCLF_VEC > 1
#define OCLF_LD16A(p) OCLF_CAT(as_ushort, OCLF_VEC)(*(global const oclf_words_a *)(p))
#define OCLF_ST16A(p, h) (*(global oclf_words_a *)(p) = OCLF_AS_WORDS(h))
/* bf16 widened straight from the words, each word's low half then its high
 * half: widened through 16-bit lanes, the optimizer folds the word load
 * back into a 16-bit vector load, which NVIDIA's back end splits into
 * 8-byte pieces. */
#if OCLF_VEC == 2
#define OCLF_WORD_LANES(lo, hi) ((uint2)((lo), (hi)))
#elif OCLF_VEC == 4
#define OCLF_WORD_LANES(lo, hi) shuffle2((lo), (hi), (uint4)(0, 2, 1, 3))
#elif OCLF_VEC == 8
#define OCLF_WORD_LANES(lo, hi) shuffle2((lo), (hi), (uint8)(0, 4, 1, 5, 2, 6, 3, 7))
#else
#define OCLF_WORD_LANES(lo, hi) shuffle2((lo), (hi), (uint16)(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15))
#endif
static inline floatv oclf_widen_bf16_words(oclf_words_a w)
{
    return OCLF_CAT(as_float, OCLF_VEC)(OCLF_WORD_LANES(w << 16, w & 0xffff0000u));
}
/* The inverse, rounding as NARROW_BF16: even lanes into the low halves, odd
 * lanes into the high halves, never through 16-bit lanes (for the same
 * reason). */
static inline oclf_words_a oclf_narrow_bf16_words(floatv f)
{
    const OCLF_CAT(uint, OCLF_VEC) u = OCLF_CAT(as_uint, OCLF_VEC)(f);
    const OCLF_CAT(int, OCLF_VEC) nan = f != f;
    const OCLF_CAT(uint, OCLF_VEC) r =
        select(u + 0x7fffu + ((u >> 16) & 1u), u | 0x00400000u, nan) >> 16;
    return r.even | (r.odd << 16);
}
/* f16 the same way: the conversion's 16-bit lanes packed into words with
 * integer operations (stored through 16-bit lanes, NVIDIA's back end split
 * the 16-byte store into 8-byte ones). */
static inline oclf_words_a oclf_narrow_f16_words(floatv f)
{
    const OCLF_CAT(uint, OCLF_VEC) u =
        OCLF_CAT(convert_uint, OCLF_VEC)(NARROW_F16(OCLF_VEC, f));
    return u.even | (u.odd << 16);
}
#endif

/* LDV(p, i): OCLF_VEC elements starting at element i, widened to floatv.
 * STV(p, i, v): the inverse, rounding each element once. */
#if OCLF_VEC == 1
#define LDV(p, i) LD(p, i)
#define STV(p, i, v) ST(p, i, v)
#elif OCLF_ALIGNED && OCLF_DTYPE == 0
#define LDV(p, i) (*(global const floatv *)((p) + (i)))
#define STV(p, i, v) (*(global floatv *)((p) + (i)) = (v))
#elif OCLF_ALIGNED && OCLF_DTYPE == 1
#define LDV(p, i) WIDEN_F16(OCLF_VEC, OCLF_LD16A((p) + (i)))
#define STV(p, i, v) (*(global oclf_words_a *)((p) + (i)) = oclf_narrow_f16_words(v))
#elif OCLF_ALIGNED
#define LDV(p, i) oclf_widen_bf16_words(*(global const oclf_words_a *)((p) + (i)))
#define STV(p, i, v) (*(global oclf_words_a *)((p) + (i)) = oclf_narrow_bf16_words(v))
#elif OCLF_DTYPE == 0
#define LDV(p, i) LDFV(OCLF_VEC, (p) + (i))
#define STV(p, i, v) STFV(OCLF_VEC, (p) + (i), (v))
#elif OCLF_DTYPE == 1
#define LDV(p, i) WIDEN_F16(OCLF_VEC, LD16V(OCLF_VEC, (p) + (i)))
#define STV(p, i, v) ST16V(OCLF_VEC, (p) + (i), NARROW_F16(OCLF_VEC, (v)))
#else
#define LDV(p, i) WIDEN_BF16(OCLF_VEC, LD16V(OCLF_VEC, (p) + (i)))
#define STV(p, i, v) ST16V(OCLF_VEC, (p) + (i), NARROW_BF16(OCLF_VEC, (v)))
#endif

/* STV_ROUNDED(p, i, v): STV(p, i, v), giving back the stored elements
 * widened again (ROUNDV(v)) from the one narrowing the store needed. */
#if OCLF_DTYPE == 0
#define STV_ROUNDED(p, i, v) oclf_stv_rounded((p) + (i), (v))
static inline floatv oclf_stv_rounded(global stor_t *p, floatv v)
{
    STV(p, 0, v);
    return v;
}
#elif OCLF_VEC == 1
#define STV_ROUNDED(p, i, v) oclf_stv_rounded((p) + (i), (v))
static inline float oclf_stv_rounded(global stor_t *p, float v)
{
    ST(p, 0, v);
    return ROUND_STOR(v);
}
#else
#if OCLF_DTYPE == 1
#define OCLF_NARROWV_(v) NARROW_F16(OCLF_VEC, v)
#define OCLF_WIDENV_(h) WIDEN_F16(OCLF_VEC, h)
#else
#define OCLF_NARROWV_(v) NARROW_BF16(OCLF_VEC, v)
#define OCLF_WIDENV_(h) WIDEN_BF16(OCLF_VEC, h)
#endif
#define STV_ROUNDED(p, i, v) oclf_stv_rounded((p) + (i), (v))
static inline floatv oclf_stv_rounded(global stor_t *p, floatv v)
{
#if OCLF_ALIGNED && OCLF_DTYPE == 2
    const oclf_words_a w = oclf_narrow_bf16_words(v);
    *(global oclf_words_a *)p = w;
    return oclf_widen_bf16_words(w);
#else
    const OCLF_CAT(ushort, OCLF_VEC) h = OCLF_NARROWV_(v);
#if OCLF_ALIGNED
    /* packed into words as oclf_narrow_f16_words does, for the same reason */
    const OCLF_CAT(uint, OCLF_VEC) u = OCLF_CAT(convert_uint, OCLF_VEC)(h);
    *(global oclf_words_a *)p = u.even | (u.odd << 16);
#else
    ST16V(OCLF_VEC, p, h);
#endif
    return OCLF_WIDENV_(h);
#endif
}
#endif

/* Vectors of fp32 in any address space (a row staged in local memory for
 * its second pass, an unfused intermediate in global memory). */
#if OCLF_VEC == 1
#define LDV_F(p, i) ((p)[(i)])
#define STV_F(p, i, v) ((p)[(i)] = (v))
#else
#define LDV_F(p, i) OCLF_CAT(vload, OCLF_VEC)(0, (p) + (i))
#define STV_F(p, i, v) OCLF_CAT(vstore, OCLF_VEC)((v), 0, (p) + (i))
#endif

/* ROUNDV(v): each element rounded through storage and widened again. */
#if OCLF_DTYPE == 0 || OCLF_VEC == 1
#define ROUNDV(v) ROUND_STOR(v)
#elif OCLF_DTYPE == 1
#define ROUNDV(v) WIDEN_F16(OCLF_VEC, NARROW_F16(OCLF_VEC, (v)))
#else
#define ROUNDV(v) WIDEN_BF16(OCLF_VEC, NARROW_BF16(OCLF_VEC, (v)))
#endif

/* ---- erf (GELU in act.cl and linear.cl) --------------------------------- */
/* erf for GELU. The built-in erf of some compilers is not vectorized (on the
 * CPU device here exact GELU ran at a fifth of SiLU's speed); this one is
 * two minimax polynomials (N. Juffa's erff, about 1 ulp): a polynomial in
 * x^2 near 0, and 1 - exp(p(|x|)) beyond 0.927734375. Both are evaluated and
 * selected, so vectors need no branch; a NaN takes the first and stays NaN. */
#define OCLF_ERF_BODY(T)                                                       \
    {                                                                          \
        const T t = fabs(a), s = a * a;                                        \
        T r = fma((T)(-1.72853470e-5f), t, (T)(3.83197126e-4f));               \
        const T u = fma((T)(-3.88396438e-3f), t, (T)(2.42546219e-2f));         \
        r = fma(r, s, u);                                                      \
        r = fma(r, t, (T)(-1.06777877e-1f));                                   \
        r = fma(r, t, (T)(-6.34846687e-1f));                                   \
        r = fma(r, t, (T)(-1.28717512e-1f));                                   \
        r = fma(r, t, -t);                                                     \
        const T far = copysign(1.0f - exp(r), a);                              \
        T q = (T)(-5.96761703e-4f);                                            \
        q = fma(q, s, (T)(4.99119423e-3f));                                    \
        q = fma(q, s, (T)(-2.67681349e-2f));                                   \
        q = fma(q, s, (T)(1.12819925e-1f));                                    \
        q = fma(q, s, (T)(-3.76125336e-1f));                                   \
        q = fma(q, s, (T)(1.28379166e-1f));                                    \
        const T near = fma(q, a, a);                                           \
        return t > 0.927734375f ? far : near;                                  \
    }
static inline float erf_float(float a) OCLF_ERF_BODY(float)
#if OCLF_VEC > 1
static inline floatv erf_floatv(floatv a) OCLF_ERF_BODY(floatv)
#else
#define erf_floatv erf_float
#endif

/* ---- row structures ----------------------------------------------------- */
/* Row-wise kernels come in two structures chosen by OCLF_LAYOUT:
 *   0: one row per work-item. No barriers; each work-item streams its row
 *      with vector loads. Best where a work-group is a loop over work-items
 *      (CPU devices), where barriers split kernels into costly regions.
 *   1: one work-group per row. Consecutive work-items touch consecutive
 *      vectors (coalesced on GPUs) and reduce through local memory.
 * A kernel body is written once over (lane, nlanes): the loops below visit
 * this work-item's share of the row, and ROW_REDUCE combines the shares. */
#ifndef OCLF_LAYOUT
#define OCLF_LAYOUT 0
#endif
/* ROW_LANES declares this work-item's (lane, nlanes) within a row;
 * FOR_ROWS(row, nrows, rpg) visits the rows of this work-item (LAYOUT 0: its
 * one row) or of this work-group (LAYOUT 1: `rpg` consecutive rows, so data
 * shared by all rows, such as a staged weight vector, is loaded once per
 * group). The trip count is uniform across a work-group, so the barriers of
 * ROW_REDUCE inside the loop are reached by every work-item. */
#if OCLF_LAYOUT == 0
#define ROW_LANES const uint lane = 0, nlanes = 1
#define FOR_ROWS(row, nrows, rpg)                                              \
    for (ulong row = get_global_id(0); row < (nrows); row = (nrows))
#define ROW_REDUCE(v, scratch) (v)
#define ROW_BROADCAST(v, scratch) (v)
/* Staging needs a work-group per row; here it folds away at compile time. */
#define STAGED(flag) 0
#elif OCLF_LAYOUT == 1
#define ROW_LANES const uint lane = get_local_id(0), nlanes = OCLF_WGS
#define FOR_ROWS(row, nrows, rpg)                                              \
    for (ulong row = (ulong)get_group_id(0) * (rpg),                           \
               row##_end_ = (row + (rpg) < (nrows) ? row + (rpg) : (nrows));   \
         row < row##_end_; row++)
#define ROW_REDUCE(v, scratch) wg_sum((v), (scratch))
#define ROW_BROADCAST(v, scratch) wg_broadcast0((v), (scratch))
#define STAGED(flag) (flag)
#else
#error "OCLF_LAYOUT must be 0 or 1"
#endif
/* Whole vectors of this work-item's share, then the scalar tail. */
#define FOR_VEC(i, n) for (uint i = lane * OCLF_VEC; i + OCLF_VEC <= (n); i += nlanes * OCLF_VEC)
#define FOR_TAIL(i, n) for (uint i = ((n) / OCLF_VEC) * OCLF_VEC + lane; i < (n); i += nlanes)
/* The same over [a, b): ops that split a row into parts (a chunk of a row
 * per work-item, the rotated and the plain dims of a head). */
#define FOR_VEC_IN(i, a, b)                                                    \
    for (uint i = (a) + lane * OCLF_VEC; i + OCLF_VEC <= (b); i += nlanes * OCLF_VEC)
#define FOR_TAIL_IN(i, a, b)                                                   \
    for (uint i = (a) + ((b) - (a)) / OCLF_VEC * OCLF_VEC + lane; i < (b); i += nlanes)

/* ---- work-group reductions --------------------------------------------- */
/* Sum of one float per work-item across the work-group; every work-item gets
 * the total. `scratch` holds OCLF_WGS floats. Pairwise (tree) order keeps the
 * fp32 error at O(log n). The leading barrier makes back-to-back calls on
 * the same scratch safe. Work-group size must be OCLF_WGS, a power of two. */
static inline float wg_sum(float v, __local float *scratch)
{
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = OCLF_WGS / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
}

/* Work-item 0's v, to every work-item of the group. The barrier after the
 * store also orders global memory: whatever the group writes after this
 * call comes after every read of work-item 0 before it. The next wg_sum's
 * leading barrier keeps scratch[0] until everyone has read it. */
static inline float wg_broadcast0(float v, __local float *scratch)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        scratch[0] = v;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    return scratch[0];
}

/* Philox4x32-10 (Salmon et al., SC'11): the first word of the block for
 * counter c under key k, 10 rounds with the key bumped between. Dropout's
 * mask, in generated expressions and in attention, comes from it, so the
 * same seed gives the same mask on every path, structure and device. */
static inline uint philox_first(uint4 c, uint2 k)
{
    for (int i = 0; i < 10; i++) {
        if (i) {
            k.x += 0x9E3779B9u;
            k.y += 0xBB67AE85u;
        }
        const uint lo0 = 0xD2511F53u * c.x, hi0 = mul_hi(0xD2511F53u, c.x);
        const uint lo1 = 0xCD9E8D57u * c.z, hi1 = mul_hi(0xCD9E8D57u, c.z);
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c.x;
}

/* Philox's uniform in [0, 1): the top 24 bits of the word. */
static inline float philox_uniform(uint w) { return (float)(w >> 8) * 0x1.0p-24f; }

#endif /* OCLF_COMMON_H */
