/*
 * Linear layer: y = epilogue(prologue(x) . W^T), x [m, k], y [m, n], W
 * [n, k] (OCLF_WKN 0) or [k, n] (OCLF_WKN 1).
 *
 * Fused kernels (one per build): linear_fused, a tiled GEMM, and with
 * OCLF_MV the matrix-vector shape linear_mv. Unfused building blocks
 * (OCLF_UNFUSED): lin_prep (prologue and widening to f32), lin_bias,
 * lin_res, lin_act, lin_store.
 *
 * Build options of the fused kernels:
 *   OCLF_MB x OCLF_NB  the register block: MB rows of x against NB output
 *                      columns (NK: NB rows of W, each a dot product over K
 *                      in VEC-wide vectors; KN: NB vectors of VEC columns,
 *                      an outer product per k).
 *   OCLF_WGM x OCLF_WGN  blocks per work-group. A group's tile is
 *                      TM = WGM * MB rows by TN = WGN * NB * CW columns
 *                      (CW = VEC for KN, else 1). Within a tile a lane's
 *                      columns are interleaved with its neighbours' (block
 *                      j of lane ln starts at j * WGN * CW + ln * CW), so
 *                      consecutive work-items read consecutive columns.
 *   OCLF_STAGE         0: every work-item reads its operands from global
 *                      memory (no barrier: what a CPU wants, where a
 *                      group's work-items share the W block through the
 *                      cache). 1: the group copies KC columns of K of its x
 *                      and W tiles into local memory, coalesced, then
 *                      every lane runs its block from there (GPUs).
 *                      2: matrix units (f16 and bf16): MB x NB fragments
 *                      of 16 x 8 per warp of 32, WGM x WGN warps a group,
 *                      KC (a multiple of 32) columns of K a stage, the
 *                      instruction form OCLF_MMA (cl/mma.h); a quantized W
 *                      staged as its integers with f32 scales beside; see
 *                      the kernel below.
 *                      4: the wavefront's matrix units (f16 and bf16):
 *                      MB x NB fragments of 16 x 16 per wavefront of 64,
 *                      WGM x WGN wavefronts a group, the instruction form
 *                      OCLF_MFMA (cl/mma.h); the same staging as 2.
 *                      3: register tiles (any dtype, f32 arithmetic): an
 *                      MB x NB tile of the product per work-item (MB, NB
 *                      multiples of 4), WGM x WGN work-items a group, KC
 *                      columns of K a stage in two local buffers read as
 *                      float4; VEC the global loads' width. See the kernel.
 *   OCLF_PRO           the prologue activation, where x is loaded (with
 *                      STAGE, once per element of a staged tile).
 *   OCLF_QW            0: W in the call's dtype. 1-4: a quantized W (NK
 *                      only; oclf_qformat's INT8, INT4, Q8_0, Q4_0) read as
 *                      bytes and dequantized at its load (q_ldv / q_ld),
 *                      with OCLF_QG the group (0: INT8 per output channel),
 *                      OCLF_QZ 1 for INT4 zero points and OCLF_QSF32 1 for
 *                      f32 scales (else f16). The kernels then take the
 *                      scale and zero-point arrays after all the others.
 * The epilogue is a run-time argument: it runs once per output.
 */

#define LIN_NONE 0
#define LIN_RELU 1
#define LIN_GELU 2
#define LIN_GELU_TANH 3
#define LIN_SILU 4

/* Activations over float or floatv operands (T); `a` must be a plain
 * variable. ReLU as `a < 0 ? 0 : a` lets NaN through. */
#define LACT_RELU(T, a) ((a) < 0.0f ? (T)(0.0f) : (a))
#define LACT_GELU(T, a) (0.5f * (a) * (1.0f + OCLF_CAT(erf_, T)((a) * 0.70710678118654752f)))
/* 0.5 a (1 + tanh z) == a sigmoid(2z), without the cancellation of 1 + tanh */
#define LACT_GELU_TANH(T, a)                                                   \
    ((a) / (1.0f + exp(-1.5957691216057308f * ((a) + 0.044715f * (a) * (a) * (a)))))
#define LACT_SILU(T, a) ((a) / (1.0f + exp(-(a))))

static inline float lin_act_run(float t, uint act)
{
    switch (act) {
    case LIN_RELU: return LACT_RELU(float, t);
    case LIN_GELU: return LACT_GELU(float, t);
    case LIN_GELU_TANH: return LACT_GELU_TANH(float, t);
    case LIN_SILU: return LACT_SILU(float, t);
    default: return t;
    }
}

/* ---- quantized weights ---------------------------------------------------
 * A row of W is handed over as its first byte (wp), its scales (sp) and its
 * zero points (zp); element c of the row, dequantized in fp32 by the
 * formulas of the header, is q_ld (one) or q_ldv (OCLF_VEC from c on, c a
 * multiple of OCLF_VEC, which divides the group: a vector never straddles
 * two scales). The integers widen to float exactly, so (q - z) is exact and
 * one rounding, the product with the scale, separates the weight used from
 * the fp64 reference's. */
#ifndef OCLF_QW
#define OCLF_QW 0
#endif
#ifndef OCLF_QG
#define OCLF_QG 32
#endif
#ifndef OCLF_QZ
#define OCLF_QZ 0
#endif
#ifndef OCLF_QSF32
#define OCLF_QSF32 0
#endif
#ifndef OCLF_QSCALE
#define OCLF_QSCALE 1
#endif
#if OCLF_QW
typedef uchar wstor_t;
/* The scale of element c: INT8 per output channel has one a row. */
#if OCLF_QG
#define Q_GROUP(c) ((c) / OCLF_QG)
#else
#define Q_GROUP(c) 0
#endif
/* One f16 scale from its bits. A scalar vload_half from global memory is a
 * software conversion on the CPU device here (some twenty integer
 * instructions, which bound the GGUF kernels); the language's own _Float16
 * conversion, where the device has it (common.h), is one vcvtph2ps. */
static inline float q_f16(ushort h)
{
#if OCLF_FLOAT16
    return (float)__builtin_astype(h, _Float16);
#else
    return vload_half(0, (private const half *)&h);
#endif
}
#if OCLF_QSF32
typedef float qsc_t;
#define QSC(p, i) ((p)[(i)])
#else
typedef ushort qsc_t; /* f16 bits */
#define QSC(p, i) q_f16((p)[(i)])
#endif
#define QARGS global const qsc_t *qs, ulong qso, ulong qss, global const uchar *qz, ulong qzo, ulong qzs
#define QROW_ARGS global const wstor_t *wp, global const qsc_t *sp, global const uchar *zp
/* GGUF blocks: 32 weights behind an f16 d, 34 (Q8_0) or 18 (Q4_0) bytes. */
#define QBLOCK_BYTES (OCLF_QW == 3 ? 34 : 18)
static inline float q_block_d(global const uchar *blk)
{
    return q_f16(*(global const ushort *)blk);
}

static inline float q_ld(QROW_ARGS, uint c)
{
#if OCLF_QW == 1
    return (float)(char)wp[c] * QSC(sp, Q_GROUP(c));
#elif OCLF_QW == 2
    const uchar b = wp[c >> 1];
    const float z = OCLF_QZ ? (float)zp[c / OCLF_QG] : 8.0f;
    return ((float)((c & 1) ? b >> 4 : b & 15) - z) * QSC(sp, c / OCLF_QG);
#elif OCLF_QW == 3
    global const uchar *blk = wp + (c >> 5) * 34;
    return (float)(char)blk[2 + (c & 31)] * q_block_d(blk);
#else
    global const uchar *blk = wp + (c >> 5) * 18;
    const uint j = (c & 31);
    const uchar b = blk[2 + (j & 15)];
    return ((float)(j < 16 ? b & 15 : b >> 4) - 8.0f) * q_block_d(blk);
#endif
}

#if OCLF_VEC == 1
#define q_ldv q_ld
#else
typedef OCLF_CAT(uchar, OCLF_VEC) ucharv;
typedef OCLF_CAT(char, OCLF_VEC) charv;
#define QCVT(v) OCLF_CAT(convert_float, OCLF_VEC)(v)
typedef OCLF_CAT(int, OCLF_VEC) intv;
#define QWIDEN(v) OCLF_CAT(convert_int, OCLF_VEC)(v)
#define QLOADU(p) OCLF_CAT(vload, OCLF_VEC)(0, (global const uchar *)(p))
#define QLOADS(p) OCLF_CAT(vload, OCLF_VEC)(0, (global const char *)(p))
/* INT4: OCLF_VEC / 2 bytes hold OCLF_VEC weights, low nibble first; the
 * nibbles are interleaved back into element order as bytes (one unpack
 * instruction on a CPU) before they widen. */
#if OCLF_VEC == 2
#define Q4_HALF uchar
#define Q4_INTERLEAVE(l, h) ((uchar2)((l), (h)))
#elif OCLF_VEC == 4
#define Q4_HALF uchar2
#define Q4_LOAD(p) vload2(0, (p))
#define Q4_INTERLEAVE(l, h) ((uchar4)((l).s0, (h).s0, (l).s1, (h).s1))
#elif OCLF_VEC == 8
#define Q4_HALF uchar4
#define Q4_LOAD(p) vload4(0, (p))
#define Q4_INTERLEAVE(l, h) ((uchar8)((l).s0, (h).s0, (l).s1, (h).s1, (l).s2, (h).s2, (l).s3, (h).s3))
#else
#define Q4_HALF uchar8
#define Q4_LOAD(p) vload8(0, (p))
#define Q4_INTERLEAVE(l, h)                                                    \
    ((uchar16)((l).s0, (h).s0, (l).s1, (h).s1, (l).s2, (h).s2, (l).s3, (h).s3, \
               (l).s4, (h).s4, (l).s5, (h).s5, (l).s6, (h).s6, (l).s7, (h).s7))
#endif
static inline floatv q_ldv(QROW_ARGS, uint c)
{
#if OCLF_QW == 1
    return QCVT(QLOADS(wp + c)) * QSC(sp, Q_GROUP(c));
#elif OCLF_QW == 2
#if OCLF_VEC == 2
    const uchar b = wp[c >> 1];
#else
    const Q4_HALF b = Q4_LOAD(wp + (c >> 1));
#endif
    const ucharv u = Q4_INTERLEAVE(b & (uchar)15, b >> (uchar)4);
    const float z = OCLF_QZ ? (float)zp[c / OCLF_QG] : 8.0f;
    return (QCVT(u) - z) * QSC(sp, c / OCLF_QG);
#elif OCLF_QW == 3
    global const uchar *blk = wp + (c >> 5) * 34;
    return QCVT(QLOADS(blk + 2 + (c & 31))) * q_block_d(blk);
#else
    /* A vector lies in one half of a block: the low nibbles of its bytes
     * (weights 0-15) or the high ones (16-31). */
    global const uchar *blk = wp + (c >> 5) * 18;
    const uint j = (c & 31);
    const ucharv b = QLOADU(blk + 2 + (j & 15));
    return (QCVT(j < 16 ? b & (uchar)15 : b >> (uchar)4) - 8.0f) * q_block_d(blk);
#endif
}
#endif /* OCLF_VEC */

/* The grouped kernels' pieces (OCLF_QG > 0): per group, the dot product of
 * x with the bare integers (q_rawv: q, or the nibble), then the group's
 * scale and zero point applied once to that partial sum:
 *   sum_c x_c (q_c - z) s = s (sum_c x_c q_c - z sum_c x_c),
 * the sum of x shared by every column. Formats without a zero point
 * (INT8, Q8_0) skip the second term. */
#define Q_HAS_Z (OCLF_QW == 2 || OCLF_QW == 4)
#if OCLF_VEC == 1
static inline float q_rawv(global const wstor_t *wp, uint c)
{
#if OCLF_QW == 1
    return (float)(char)wp[c];
#elif OCLF_QW == 2
    const uchar b = wp[c >> 1];
    return (float)((c & 1) ? b >> 4 : b & 15);
#elif OCLF_QW == 3
    return (float)(char)wp[(c >> 5) * 34 + 2 + (c & 31)];
#else
    const uint j = (c & 31);
    const uchar b = wp[(c >> 5) * 18 + 2 + (j & 15)];
    return (float)(j < 16 ? b & 15 : b >> 4);
#endif
}
#else
static inline floatv q_rawv(global const wstor_t *wp, uint c)
{
#if OCLF_QW == 1
    return QCVT(QLOADS(wp + c));
#elif OCLF_QW == 2
#if OCLF_VEC == 2
    const uchar b = wp[c >> 1];
#else
    const Q4_HALF b = Q4_LOAD(wp + (c >> 1));
#endif
    return QCVT(Q4_INTERLEAVE(b & (uchar)15, b >> (uchar)4));
#elif OCLF_QW == 3
    return QCVT(QLOADS(wp + (c >> 5) * 34 + 2 + (c & 31)));
#else
    const uint j = (c & 31);
    const ucharv b = QLOADU(wp + (c >> 5) * 18 + 2 + (j & 15));
    return QCVT(j < 16 ? b & (uchar)15 : b >> (uchar)4);
#endif
}
#endif
/* The 4-bit formats read OCLF_VEC bytes a step, 2 x OCLF_VEC weights: the
 * low nibbles widen into one vector and the high ones into another, with no
 * shuffle of the weights; x's two vectors are arranged to match instead,
 * once per row for every column. Byte t of a group's (INT4) or block's
 * (Q4_0) bytes: INT4 holds weights 2t and 2t + 1, whose x values are the
 * even and odd elements of x from 2t on; Q4_0 holds weights t and t + 16. */
#define Q_PAIRS ((OCLF_QW == 2 || OCLF_QW == 4) && OCLF_VEC > 1)
#if Q_PAIRS
/* Written out lane by lane rather than as (a.even, b.even): the optimizer
 * makes the same shuffle of either, and oclgrind 21.10's uninitialized-value
 * check crashes on the concatenating shuffle that the swizzles are at -O0. */
#if OCLF_VEC == 2
#define Q_EVENS(a, b) ((float2)((a).s0, (b).s0))
#define Q_ODDS(a, b) ((float2)((a).s1, (b).s1))
#elif OCLF_VEC == 4
#define Q_EVENS(a, b) ((float4)((a).s0, (a).s2, (b).s0, (b).s2))
#define Q_ODDS(a, b) ((float4)((a).s1, (a).s3, (b).s1, (b).s3))
#elif OCLF_VEC == 8
#define Q_EVENS(a, b) ((float8)((a).s0, (a).s2, (a).s4, (a).s6, (b).s0, (b).s2, (b).s4, (b).s6))
#define Q_ODDS(a, b) ((float8)((a).s1, (a).s3, (a).s5, (a).s7, (b).s1, (b).s3, (b).s5, (b).s7))
#else
#define Q_EVENS(a, b)                                                          \
    ((float16)((a).s0, (a).s2, (a).s4, (a).s6, (a).s8, (a).sa, (a).sc, (a).se, \
               (b).s0, (b).s2, (b).s4, (b).s6, (b).s8, (b).sa, (b).sc, (b).se))
#define Q_ODDS(a, b)                                                           \
    ((float16)((a).s1, (a).s3, (a).s5, (a).s7, (a).s9, (a).sb, (a).sd, (a).sf, \
               (b).s1, (b).s3, (b).s5, (b).s7, (b).s9, (b).sb, (b).sd, (b).sf))
#endif
/* INT4 has two ways to pair x with the nibbles: arrange x's two vectors as
 * even and odd elements (Q4_XPERM 1: two permutes per row a step), or
 * interleave each column's low and high nibbles back into element order
 * (0: two byte unpacks per column a step). The cheaper is the one done for
 * fewer operands: rows (MB) or columns (NB) of the block. */
#define Q4_XPERM (OCLF_MB <= OCLF_NB)
/* The nibble vectors l and h (VEC lanes each, from VEC bytes) interleaved
 * back into element order: the first and the second VEC weights. Written
 * lane by lane, as Q_EVENS, for oclgrind. */
#if OCLF_VEC == 2
#define Q4_ILV_LO(l, h) ((uchar2)((l).s0, (h).s0))
#define Q4_ILV_HI(l, h) ((uchar2)((l).s1, (h).s1))
#elif OCLF_VEC == 4
#define Q4_ILV_LO(l, h) ((uchar4)((l).s0, (h).s0, (l).s1, (h).s1))
#define Q4_ILV_HI(l, h) ((uchar4)((l).s2, (h).s2, (l).s3, (h).s3))
#elif OCLF_VEC == 8
#define Q4_ILV_LO(l, h) ((uchar8)((l).s0, (h).s0, (l).s1, (h).s1, (l).s2, (h).s2, (l).s3, (h).s3))
#define Q4_ILV_HI(l, h) ((uchar8)((l).s4, (h).s4, (l).s5, (h).s5, (l).s6, (h).s6, (l).s7, (h).s7))
#else
#define Q4_ILV_LO(l, h)                                                        \
    ((uchar16)((l).s0, (h).s0, (l).s1, (h).s1, (l).s2, (h).s2, (l).s3, (h).s3, \
               (l).s4, (h).s4, (l).s5, (h).s5, (l).s6, (h).s6, (l).s7, (h).s7))
#define Q4_ILV_HI(l, h)                                                        \
    ((uchar16)((l).s8, (h).s8, (l).s9, (h).s9, (l).sa, (h).sa, (l).sb, (h).sb, \
               (l).sc, (h).sc, (l).sd, (h).sd, (l).se, (h).se, (l).sf, (h).sf))
#endif

/* The group's bytes from byte t (VEC of them), at wp's row. */
static inline ucharv q_bytes(global const wstor_t *wp, uint g0, uint t)
{
#if OCLF_QW == 2
    return QLOADU(wp + g0 / 2 + t);
#else
    return QLOADU(wp + (g0 / 32) * 18 + 2 + t);
#endif
}
#endif

/* The scale and zero point of the group that starts at element c. */
static inline float q_gscale(QROW_ARGS, uint c)
{
#if OCLF_QW >= 3
    return q_block_d(wp + (c >> 5) * QBLOCK_BYTES);
#else
    return QSC(sp, Q_GROUP(c));
#endif
}
static inline float q_gzero(global const uchar *zp, uint c)
{
#if OCLF_QZ
    return (float)zp[c / OCLF_QG];
#else
    return 8.0f;
#endif
}
#endif /* OCLF_QW */

#ifndef OCLF_UNFUSED

#ifndef OCLF_WKN
#define OCLF_WKN 0
#endif
#ifndef OCLF_MB
#define OCLF_MB 2
#endif
#ifndef OCLF_NB
#define OCLF_NB 2
#endif
#ifndef OCLF_WGM
#define OCLF_WGM 8
#endif
#ifndef OCLF_WGN
#define OCLF_WGN 1
#endif
#ifndef OCLF_STAGE
#define OCLF_STAGE 0
#endif
#ifndef OCLF_KC
#define OCLF_KC 16
#endif
#ifndef OCLF_PRO
#define OCLF_PRO 0
#endif
#ifndef OCLF_MV
#define OCLF_MV 0
#endif

#if OCLF_PRO == LIN_NONE
#define PRO(T, a) (a)
#elif OCLF_PRO == LIN_RELU
#define PRO(T, a) LACT_RELU(T, a)
#elif OCLF_PRO == LIN_GELU
#define PRO(T, a) LACT_GELU(T, a)
#elif OCLF_PRO == LIN_GELU_TANH
#define PRO(T, a) LACT_GELU_TANH(T, a)
#elif OCLF_PRO == LIN_SILU
#define PRO(T, a) LACT_SILU(T, a)
#else
#error "unknown OCLF_PRO"
#endif

#if OCLF_WKN
#define CW OCLF_VEC
#else
#define CW 1
#endif
#define TM (OCLF_WGM * OCLF_MB)
#define NSTEP (OCLF_WGN * CW)
#define TN (NSTEP * OCLF_NB)

/* ---- the register block, written out by the preprocessor -------------- */
/* MB x NB named accumulators, never a private array indexed in a loop, so
 * the compiler keeps them in vector registers. */
#define LIN_REP1(X) X(0)
#define LIN_REP2(X) X(0) X(1)
#define LIN_REP4(X) X(0) X(1) X(2) X(3)
#define LIN_REP8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define LIN_PREP1(X, j) X(0, j)
#define LIN_PREP2(X, j) X(0, j) X(1, j)
#define LIN_PREP4(X, j) X(0, j) X(1, j) X(2, j) X(3, j)
#define LIN_PREP8(X, j) X(0, j) X(1, j) X(2, j) X(3, j) X(4, j) X(5, j) X(6, j) X(7, j)
#define FOR_MJ(X, j) OCLF_CAT(LIN_PREP, OCLF_MB)(X, j)
#define LIN_QREP1(X) FOR_MJ(X, 0)
#define LIN_QREP2(X) FOR_MJ(X, 0) FOR_MJ(X, 1)
#define LIN_QREP4(X) FOR_MJ(X, 0) FOR_MJ(X, 1) FOR_MJ(X, 2) FOR_MJ(X, 3)
#define LIN_QREP8(X)                                                           \
    FOR_MJ(X, 0) FOR_MJ(X, 1) FOR_MJ(X, 2) FOR_MJ(X, 3)                        \
    FOR_MJ(X, 4) FOR_MJ(X, 5) FOR_MJ(X, 6) FOR_MJ(X, 7)
#define FOR_M(X) OCLF_CAT(LIN_REP, OCLF_MB)(X)
#define FOR_N(X) OCLF_CAT(LIN_REP, OCLF_NB)(X)
#define FOR_MN(X) OCLF_CAT(LIN_QREP, OCLF_NB)(X)

/* ---- epilogue ------------------------------------------------------------ */
#define EPI_ARGS                                                               \
    global const stor_t *bias, ulong bo, uint has_bias, global const stor_t *res, ulong ro, \
        ulong rs, uint has_res, global stor_t *y, ulong yo, ulong ys, float alpha, float beta, \
        uint act, uint before
#define EPI_PASS bias, bo, has_bias, res, ro, rs, has_res, y, yo, ys, alpha, beta, act, before

/* y[r, c] from its accumulated product. y may be the residual itself: the
 * residual element is read before the same work-item writes it. */
static inline void lin_store(float acc, uint r, uint c, EPI_ARGS)
{
    float t = alpha * acc;
    if (has_bias)
        t += LD(bias, bo + c);
    const float rv = has_res ? beta * LD(res, ro + (ulong)r * rs + c) : 0.0f;
    if (before)
        t += rv;
    t = lin_act_run(t, act);
    if (!before)
        t += rv;
    ST(y, yo + (ulong)r * ys + c, t);
}

/* The VEC columns of v from column c on, those below n. */
static inline void lin_store_vec(floatv v, uint r, uint c, uint n, EPI_ARGS)
{
    float t[OCLF_VEC];
    STV_F(t, 0, v);
    for (uint l = 0; l < OCLF_VEC; l++)
        if (c + l < n)
            lin_store(t[l], r, c + l, EPI_PASS);
}

/* VEC elements from column c of row p, those past n - 1 repeated from it
 * (their products are never stored). */
static inline floatv lin_ldv_edge(global const stor_t *p, uint c, uint n)
{
    float t[OCLF_VEC];
    for (uint l = 0; l < OCLF_VEC; l++)
        t[l] = LD(p, min(c + l, n - 1));
    return LDV_F(t, 0);
}

#if OCLF_QW
#if OCLF_WKN
#error "quantized weights are read along K (OCLF_WKN 0)"
#endif
/* a quantized W's scales and zero points come last, so that the host's
 * argument list for a plain W is the same list, shorter */
#define LIN_WARGS global const wstor_t *w, ulong wo, ulong ws
#define LIN_QTAIL , QARGS
#else
/* Dense W of f32 in a call of any dtype: linear_q's PRE strategy
 * dequantizes a tile of W into f32 (a 16-bit tile would round, overflow or
 * flush the weights before the fp32 product). */
#ifndef OCLF_WF32
#define OCLF_WF32 0
#endif
#if OCLF_WF32
#if OCLF_WKN
#error "an f32 W is read along K (OCLF_WKN 0)"
#endif
typedef float wel_t;
#define LDW(p, i) ((p)[(i)])
#if OCLF_VEC == 1
#define LDWV(p, i) ((p)[(i)])
#else
#define LDWV(p, i) LDFV(OCLF_VEC, (p) + (i))
#endif
#else
typedef stor_t wel_t;
#define LDW(p, i) LD(p, i)
#define LDWV(p, i) LDV(p, i)
#endif
#define LIN_WARGS global const wel_t *w, ulong wo, ulong ws
#define LIN_QTAIL
#endif
#define LIN_ARGS                                                               \
    global const stor_t *x, ulong xo, ulong xs, LIN_WARGS, EPI_ARGS, uint m, uint n,      \
        uint k LIN_QTAIL

/* This work-item's place: group (gm, gn), lane (lm, ln); rows m0.., its
 * columns nb + j * NSTEP (+ lanes of a vector for KN). Groups along M
 * vary fastest, so groups that run together share W's columns. */
#define LIN_PLACE                                                              \
    const uint lid = get_local_id(0);                                          \
    const uint ln = lid % OCLF_WGN, lm = lid / OCLF_WGN;                       \
    const uint ngm = (m + TM - 1) / TM, g = get_group_id(0);                   \
    const uint gm = g % ngm, gn = g / ngm;                                     \
    const uint m0 = gm * TM + lm * OCLF_MB;                                    \
    const uint nb = gn * TN + ln * CW

#define DECL_A(i, j) floatv a##i##_##j = VSPLAT(0.0f);
#define DECL_X(i) global const stor_t *xp##i = x + xo + (ulong)min(m0 + (i), m - 1) * xs;

#if !OCLF_WKN
/* ---- NK: dot products along K ------------------------------------------- */
/* W row `row` as block column j: its first element, and for a quantized W
 * its scales and zero points too. */
#if OCLF_QW
#define DECL_WROW(j, row)                                                      \
    const ulong wr##j = (ulong)(row);                                          \
    global const wstor_t *wp##j = w + wo + wr##j * ws;                         \
    global const qsc_t *sp##j = qs + qso + wr##j * qss;                        \
    global const uchar *zp##j = qz + qzo + wr##j * qzs;
#define LOAD_W(j) const floatv vw##j = q_ldv(wp##j, sp##j, zp##j, c);
#define LOAD_WS(j) const float sw##j = q_ld(wp##j, sp##j, zp##j, c);
#else
#define DECL_WROW(j, row) global const wel_t *wp##j = w + wo + (ulong)(row) * ws;
#define LOAD_W(j) const floatv vw##j = LDWV(wp##j, c);
#define LOAD_WS(j) const float sw##j = LDW(wp##j, c);
#endif
#define DECL_W(j) DECL_WROW(j, min(nb + (j) * NSTEP, n - 1))
#define LOAD_X(i)                                                              \
    floatv vx##i = LDV(xp##i, c);                                              \
    vx##i = PRO(floatv, vx##i);
#define FMA_V(i, j) a##i##_##j = fma(vx##i, vw##j, a##i##_##j);
#define SUM(i, j) float s##i##_##j = VSUM(a##i##_##j);
#define LOAD_XS(i)                                                             \
    float sx##i = LD(xp##i, c);                                                \
    sx##i = PRO(float, sx##i);
#define FMA_S(i, j) s##i##_##j = fma(sx##i, sw##j, s##i##_##j);
#define STORE_S(i, j)                                                          \
    if (m0 + (i) < m && nb + (j) * NSTEP < n)                                  \
        lin_store(s##i##_##j, m0 + (i), nb + (j) * NSTEP, EPI_PASS);
#else
/* ---- KN: outer products, VEC columns per accumulator --------------------- */
#define LOAD_XK(i)                                                             \
    float sx##i = LD(xp##i, c);                                                \
    sx##i = PRO(float, sx##i);
#define LOAD_WK(j) const floatv vw##j = LDV(wr, nb + (j) * NSTEP);
#define LOAD_WK_EDGE(j) const floatv vw##j = lin_ldv_edge(wr, nb + (j) * NSTEP, n);
#define FMA_K(i, j) a##i##_##j = fma(VSPLAT(sx##i), vw##j, a##i##_##j);
#define STORE_V(i, j)                                                          \
    if (m0 + (i) < m)                                                          \
        lin_store_vec(a##i##_##j, m0 + (i), nb + (j) * NSTEP, n, EPI_PASS);
#endif

#if OCLF_MV
/* ---- matrix-vector shape (NK): decode --------------------------------- */
/* A group is WGM segments of WGN work-items; segment s computes the MB x NB
 * block of rows m0.. and columns nb + j (j < NB). Its lanes split K into
 * units, consecutive lanes on consecutive units of a W row (coalesced),
 * each unit one 16-byte load where the host found the rows aligned
 * (OCLF_ALIGNED): VEC elements of a dense W, 16 bytes of a quantized one
 * (INT4: 32 weights, INT8: 16; the GGUF blocks, 18 or 34 bytes, are read a
 * block a unit with narrower loads). The unit's x values are loaded once
 * for the NB columns (and stay in L1 for the other segments). A lane keeps
 * MB x NB partial sums; the segment adds them with a butterfly
 * (cl/subgroup.h: shuffles where the device offers them within the
 * segment, else local memory), and lane q of the segment stores output q.
 * A quantized W in groups has the scales (and zero points) of the group's
 * WGM x NB rows copied into local memory first (OCLF_QLOCAL, the host's
 * choice where they fit), so the unit loop reads only W and x from global
 * memory. Numerics: each unit's products are summed in fp32, a quantized
 * unit's with the bare (q - z), then scaled once per unit. */
#include "subgroup.h"
#if OCLF_WKN || OCLF_STAGE
#error "OCLF_MV needs OCLF_WKN 0 and OCLF_STAGE 0"
#endif
#ifndef OCLF_QLOCAL
#define OCLF_QLOCAL 0 /* 1: a grouped W's scales staged in local memory (linear_mv) */
#endif
#define NQ (OCLF_MB * OCLF_NB)
#define MV_WGS (OCLF_WGM * OCLF_WGN)
/* n-element dot products added to a: fused multiply-adds in element order */
#define MV_DOT2(x, w, a) fma((x).s1, (w).s1, fma((x).s0, (w).s0, (a)))
#define MV_DOT4(x, w, a) MV_DOT2((x).hi, (w).hi, MV_DOT2((x).lo, (w).lo, a))
#define MV_DOT8(x, w, a) MV_DOT4((x).hi, (w).hi, MV_DOT4((x).lo, (w).lo, a))
#define MV_DOT16(x, w, a) MV_DOT8((x).hi, (w).hi, MV_DOT8((x).lo, (w).lo, a))
#if OCLF_VEC == 1
#define MV_DOT(x, w, a) fma((x), (w), (a))
#else
#define MV_DOT(x, w, a) OCLF_CAT(MV_DOT, OCLF_VEC)(x, w, a)
#endif

#if OCLF_QW
#if OCLF_VEC != 8
#error "a quantized W's matrix-vector shape reads x in pieces of 8 (OCLF_VEC 8)"
#endif
/* weights a unit, and its pieces of 8 */
#define MV_UW (OCLF_QW == 1 ? 16 : 32)
#define MV_NP (MV_UW / 8)
/* 2^23 + n as a float's bits is the integer n exactly (n < 2^23): one OR
 * and one subtraction turn a nibble or byte into (n - z), where a
 * conversion instruction runs at a quarter of the FMA rate on some GPUs. */
#define MV_MAGIC 0x4B000000u
#define MV_MAGICF 8388608.0f
/* The 16 bytes of unit u of a row (INT8, INT4). */
static inline uint4 mv_unit(global const wstor_t *wp, uint u)
{
#if OCLF_ALIGNED
    return *(global const uint4 *)(wp + (ulong)u * 16);
#else
    return as_uint4(vload16(0, wp + (ulong)u * 16));
#endif
}
/* Weights 8p .. 8p + 7 of unit u, less z. INT4: word p, nibbles low first;
 * INT8: words 2p and 2p + 1, bytes as two's complement (the sign bit
 * flipped makes them n + 128); Q8_0/Q4_0: the block's own bytes. */
static inline float8 mv_piece(uint4 q, global const wstor_t *wp, uint u, uint p, float z)
{
#if OCLF_QW == 2
    const uint w = p == 0 ? q.s0 : p == 1 ? q.s1 : p == 2 ? q.s2 : q.s3;
    const uint8 n = ((uint8)(w) >> (uint8)(0, 4, 8, 12, 16, 20, 24, 28)) & 15u;
    return as_float8(n | MV_MAGIC) - (MV_MAGICF + z);
#elif OCLF_QW == 1
    const uint lo = (p == 0 ? q.s0 : q.s2) ^ 0x80808080u, hi = (p == 0 ? q.s1 : q.s3) ^ 0x80808080u;
    const uint8 n = ((uint8)(lo, lo, lo, lo, hi, hi, hi, hi) >> (uint8)(0, 8, 16, 24, 0, 8, 16, 24)) & 255u;
    return as_float8(n | MV_MAGIC) - (MV_MAGICF + 128.0f);
#else
    return q_rawv(wp, u * 32 + p * 8) - z;
#endif
}
#endif /* OCLF_QW */

#if OCLF_QW && OCLF_QG && OCLF_QW <= 2 && OCLF_QLOCAL
#define MV_LOCAL_ARG , local float *qsl
#else
#define MV_LOCAL_ARG
#endif

OCLF_SUBGROUP_KERNEL
kernel void linear_mv(LIN_ARGS MV_LOCAL_ARG)
{
    const uint lid = get_local_id(0), ln = lid % OCLF_WGN, seg = lid / OCLF_WGN;
    const uint ngm = (m + OCLF_MB - 1) / OCLF_MB, g = get_group_id(0);
    const uint m0 = (g % ngm) * OCLF_MB;
    const uint nb0 = (g / ngm) * (OCLF_WGM * OCLF_NB), nb = nb0 + seg * OCLF_NB;
    global const stor_t *xp[OCLF_MB];
    _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++)
        xp[i] = x + xo + (ulong)min(m0 + i, m - 1) * xs;
    float acc[NQ];
    _Pragma("unroll") for (uint q = 0; q < NQ; q++)
        acc[q] = 0.0f;
#if OCLF_QW
    global const wstor_t *wp[OCLF_NB];
    global const qsc_t *sp[OCLF_NB];
    global const uchar *zp[OCLF_NB];
    _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++) {
        const ulong r = min(nb + j, n - 1);
        wp[j] = w + wo + r * ws;
        sp[j] = qs + qso + r * qss;
        zp[j] = qz + qzo + r * qzs;
    }
#if OCLF_QG && OCLF_QW <= 2 && OCLF_QLOCAL
    /* The group's rows' scales (then zero points) as f32, row-major. */
    const uint ng = k / OCLF_QG, nr = OCLF_WGM * OCLF_NB;
    for (uint e = lid; e < nr * ng; e += MV_WGS) {
        const ulong r = min(nb0 + e / ng, n - 1);
        qsl[e] = QSC(qs + qso + r * qss, e % ng);
#if OCLF_QZ
        qsl[nr * ng + e] = (float)qz[qzo + r * qzs + e % ng];
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    local const float *sl = qsl + seg * OCLF_NB * ng;
#if OCLF_QZ
    local const float *zl = qsl + nr * ng + seg * OCLF_NB * ng;
#endif
#endif
#if !OCLF_QG
    float ch[OCLF_NB]; /* INT8's scale per output channel */
    _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++)
        ch[j] = QSC(sp[j], 0);
#endif
    const uint ku = k / MV_UW;
    for (uint u = ln; u < ku; u += OCLF_WGN) {
        const uint c = u * MV_UW;
        /* the NB units and their scales first, then a piece of 8 at a
         * time: x's MB pieces against every column's (a lane holds one
         * piece of x per row, not the unit's) */
        uint4 q[OCLF_NB];
        float s[OCLF_NB], z[OCLF_NB], part[NQ];
        _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++) {
#if OCLF_QW <= 2
            q[j] = mv_unit(wp[j], u);
#else
            q[j] = (uint4)(0);
#endif
#if OCLF_QW >= 3
            s[j] = q_block_d(wp[j] + (ulong)u * QBLOCK_BYTES);
            z[j] = OCLF_QW == 4 ? 8.0f : 0.0f;
#elif !OCLF_QG
            s[j] = 1.0f;
            z[j] = 0.0f;
#elif OCLF_QLOCAL
            s[j] = sl[j * ng + c / OCLF_QG];
#if OCLF_QZ
            z[j] = zl[j * ng + c / OCLF_QG];
#else
            z[j] = 8.0f;
#endif
#else
            s[j] = QSC(sp[j], c / OCLF_QG);
            z[j] = q_gzero(zp[j], c);
#endif
        }
        _Pragma("unroll") for (uint e = 0; e < NQ; e++)
            part[e] = 0.0f;
        _Pragma("unroll") for (uint p = 0; p < MV_NP; p++) {
            float8 xv[OCLF_MB];
            _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++) {
                const floatv t = LDV(xp[i], c + 8 * p);
                xv[i] = PRO(floatv, t);
            }
            _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++) {
                const float8 wv = mv_piece(q[j], wp[j], u, p, OCLF_QW == 1 ? 0.0f : z[j]);
                _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++)
                    part[i * OCLF_NB + j] = MV_DOT8(xv[i], wv, part[i * OCLF_NB + j]);
            }
        }
        _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++)
            _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++)
                acc[i * OCLF_NB + j] = fma(s[j], part[i * OCLF_NB + j], acc[i * OCLF_NB + j]);
    }
#if !OCLF_QG
    _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++)
        _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++)
            acc[i * OCLF_NB + j] *= ch[j];
#endif
    /* K past the last whole unit: INT8 per channel only (a group holds
     * whole units) */
    for (uint c = ku * MV_UW + ln; c < k; c += OCLF_WGN)
        _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++) {
            const float t = LD(xp[i], c), xe = PRO(float, t);
            _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++)
                acc[i * OCLF_NB + j] = fma(xe, q_ld(wp[j], sp[j], zp[j], c), acc[i * OCLF_NB + j]);
        }
#else
    global const wel_t *wp[OCLF_NB];
    _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++)
        wp[j] = w + wo + (ulong)min(nb + j, n - 1) * ws;
    const uint ku = k / OCLF_VEC;
    for (uint u = ln; u < ku; u += OCLF_WGN) {
        const uint c = u * OCLF_VEC;
        floatv xv[OCLF_MB];
        _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++) {
            const floatv t = LDV(xp[i], c);
            xv[i] = PRO(floatv, t);
        }
        _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++) {
            const floatv wv = LDWV(wp[j], c);
            _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++)
                acc[i * OCLF_NB + j] = MV_DOT(xv[i], wv, acc[i * OCLF_NB + j]);
        }
    }
    for (uint c = ku * OCLF_VEC + ln; c < k; c += OCLF_WGN)
        _Pragma("unroll") for (uint i = 0; i < OCLF_MB; i++) {
            const float t = LD(xp[i], c), xe = PRO(float, t);
            _Pragma("unroll") for (uint j = 0; j < OCLF_NB; j++)
                acc[i * OCLF_NB + j] = fma(xe, LDW(wp[j], c), acc[i * OCLF_NB + j]);
        }
#endif
#if OCLF_SUBGROUP_FORM && OCLF_WGN <= OCLF_SUBGROUP_WIDTH
    oclf_seg_sum_n(acc, NQ, OCLF_WGN, lid, MV_WGS, (local float *)0);
#else
    local float red[NQ * MV_WGS];
    oclf_seg_sum_n(acc, NQ, OCLF_WGN, lid, MV_WGS, red);
#endif
    /* every lane of the segment holds the sums: lane q stores output q */
    _Pragma("unroll") for (uint q = 0; q < NQ; q++) {
        const uint r = m0 + q / OCLF_NB, c = nb + q % OCLF_NB;
        if (q % OCLF_WGN == ln && r < m && c < n)
            lin_store(acc[q], r, c, EPI_PASS);
    }
}
#elif !OCLF_STAGE
/* ---- unstaged: operands from global memory, no barrier ------------------ */
kernel void linear_fused(LIN_ARGS)
{
    LIN_PLACE;
    if (m0 >= m || nb >= n)
        return;
    FOR_M(DECL_X)
    FOR_MN(DECL_A)
#if !OCLF_WKN
    FOR_N(DECL_W)
    uint c = 0;
#if OCLF_QW && OCLF_QG
    /* A quantized W in groups, a group at a time. OCLF_QSCALE 1: the
     * products with the bare integers summed per group, then the group's
     * scale and zero point applied once to each partial sum (fewest
     * operations per weight; twice the accumulators: few rows). 0: every
     * weight dequantized once, (q - z) s, and shared by the MB rows (many
     * rows). K is a multiple of the group and the group of VEC (x 2 for
     * the 4-bit pairs), so no tail follows. */
#define DECL_P(i, j) floatv p##i##_##j = VSPLAT(0.0f);
#define DECL_XG(i) floatv xg##i = VSPLAT(0.0f);
#define LOAD_GS(j)                                                             \
    const float gs##j = q_gscale(wp##j, sp##j, zp##j, g0);                     \
    const float gz##j = Q_HAS_Z ? q_gzero(zp##j, g0) : 0.0f;
#if OCLF_QSCALE
#define QT(i, j) p##i##_##j
#define DEQ(j, v) (v)
#else
#define QT(i, j) a##i##_##j
#define DEQ(j, v) (((v) - VSPLAT(gz##j)) * gs##j)
#endif
#if Q_HAS_Z
#define APPLY_G(i, j)                                                          \
    a##i##_##j = fma(VSPLAT(gs##j), fma(VSPLAT(-gz##j), xg##i, p##i##_##j), a##i##_##j);
#else
#define APPLY_G(i, j) a##i##_##j = fma(VSPLAT(gs##j), p##i##_##j, a##i##_##j);
#endif
#if Q_PAIRS
#if OCLF_QW == 2 && Q4_XPERM
#define LOAD_XQ(i)                                                             \
    floatv xv0##i = LDV(xp##i, g0 + 2 * t), xv1##i = LDV(xp##i, g0 + 2 * t + OCLF_VEC); \
    xv0##i = PRO(floatv, xv0##i);                                              \
    xv1##i = PRO(floatv, xv1##i);                                              \
    const floatv xa##i = Q_EVENS(xv0##i, xv1##i), xb##i = Q_ODDS(xv0##i, xv1##i);
#elif OCLF_QW == 2
#define LOAD_XQ(i)                                                             \
    floatv xa##i = LDV(xp##i, g0 + 2 * t), xb##i = LDV(xp##i, g0 + 2 * t + OCLF_VEC); \
    xa##i = PRO(floatv, xa##i);                                                \
    xb##i = PRO(floatv, xb##i);
#else
#define LOAD_XQ(i)                                                             \
    floatv xa##i = LDV(xp##i, g0 + t), xb##i = LDV(xp##i, g0 + 16 + t);        \
    xa##i = PRO(floatv, xa##i);                                                \
    xb##i = PRO(floatv, xb##i);
#endif
#define ACC_XG(i) xg##i += xa##i + xb##i;
#if OCLF_QW == 2 && !Q4_XPERM
#define LOAD_Q(j)                                                              \
    const ucharv qb##j = q_bytes(wp##j, g0, t);                                \
    const ucharv qn##j = qb##j & (uchar)15, qm##j = qb##j >> (uchar)4;         \
    const floatv ql##j = DEQ(j, QCVT(Q4_ILV_LO(qn##j, qm##j))),                \
                 qh##j = DEQ(j, QCVT(Q4_ILV_HI(qn##j, qm##j)));
#else
/* The bytes widen to 32-bit lanes first (one zero-extending load on a
 * CPU), then mask and shift there: three instructions fewer per two nibble
 * vectors than masking the bytes and widening each half. */
#define LOAD_Q(j)                                                              \
    const intv qb##j = QWIDEN(q_bytes(wp##j, g0, t));                          \
    const floatv ql##j = DEQ(j, QCVT(qb##j & 15)), qh##j = DEQ(j, QCVT(qb##j >> 4));
#endif
#define FMA_Q(i, j)                                                            \
    QT(i, j) = fma(xa##i, ql##j, QT(i, j));                                    \
    QT(i, j) = fma(xb##i, qh##j, QT(i, j));
#define Q_STEPS(v) (uint v = 0; v < OCLF_QG / 2; v += OCLF_VEC)
#else
#define LOAD_XQ(i) LOAD_X(i)
#define ACC_XG(i) xg##i += vx##i;
#define LOAD_Q(j) const floatv vq##j = DEQ(j, q_rawv(wp##j, c));
#define FMA_Q(i, j) QT(i, j) = fma(vx##i, vq##j, QT(i, j));
#define Q_STEPS(v) (c = g0; c < g0 + OCLF_QG; c += OCLF_VEC)
#endif
    for (uint g0 = 0; g0 < k; g0 += OCLF_QG) {
#if OCLF_QSCALE
        FOR_MN(DECL_P)
#if Q_HAS_Z
        FOR_M(DECL_XG)
#endif
#else
        FOR_N(LOAD_GS)
#endif
        for Q_STEPS(t) {
            FOR_M(LOAD_XQ)
#if OCLF_QSCALE && Q_HAS_Z
            FOR_M(ACC_XG)
#endif
            FOR_N(LOAD_Q)
            FOR_MN(FMA_Q)
        }
#if OCLF_QSCALE
        FOR_N(LOAD_GS)
        FOR_MN(APPLY_G)
#endif
    }
    c = k; /* no tail: K is a multiple of the group */
#else
    for (; c + OCLF_VEC <= k; c += OCLF_VEC) {
        FOR_M(LOAD_X)
        FOR_N(LOAD_W)
        FOR_MN(FMA_V)
    }
#endif
    FOR_MN(SUM)
    for (; c < k; c++) {
        FOR_M(LOAD_XS)
        FOR_N(LOAD_WS)
        FOR_MN(FMA_S)
    }
    FOR_MN(STORE_S)
#else
    global const stor_t *wr = w + wo;
    if (nb + (OCLF_NB - 1) * NSTEP + OCLF_VEC <= n) {
        for (uint c = 0; c < k; c++, wr += ws) {
            FOR_M(LOAD_XK)
            FOR_N(LOAD_WK)
            FOR_MN(FMA_K)
        }
    } else {
        for (uint c = 0; c < k; c++, wr += ws) {
            FOR_M(LOAD_XK)
            FOR_N(LOAD_WK_EDGE)
            FOR_MN(FMA_K)
        }
    }
    FOR_MN(STORE_V)
#endif
}

#elif OCLF_STAGE == 2 || OCLF_STAGE == 4
/* ---- matrix units: m16n8k16 fragments (cl/mma.h) -------------------------
 * A work-group of WGM x WGN warps (groups of 32 work-items, warp w at
 * (w % WGM, w / WGM)); a warp owns MB x NB fragments of the product, each
 * 16 rows by 8 columns, so a group's tile is TM = WGM * MB * 16 rows by
 * TN = WGN * NB * 8 columns. The group copies KC columns of K of its x and
 * W tiles at a time into local memory (two buffers: one barrier a chunk,
 * the next chunk written while warps still read the current one), 16 bytes
 * per global load; each lane then reads its A and B fragment registers with
 * 16-byte local loads and issues MB x NB products per 16 of K. The operands
 * stay in the call's dtype (f16 or bf16; a prologue's result is rounded to
 * it), the accumulators are f32, and the epilogue runs on each lane's
 * accumulator elements at their rows and columns (cl/mma.h's C layout).
 *
 * Local layout: a tile row (a row of x, a column of the product's W) holds
 * its KC elements as KC / 2 words of two consecutive-K elements, and within
 * each run of 32 of K the words are permuted so that one lane's fragment
 * words are adjacent: the word of K pair 2p (p = 0..15) is word p / 4 of
 * 16-byte group p % 4. Lane t = lane % 4 then finds in group t the pairs
 * 2t, 2t + 8, 2t + 16, 2t + 24: a[0] and a[2] (of row g) or b[0] and b[1]
 * (of column g) for both k16 steps of the run. Rows are LROW words apart,
 * LROW = 16 modulo 32, and group t of row r sits at slot t ^ ((r / 2) % 4)
 * of its run (mm_group), so the eight lanes of one 16-byte phase touch
 * every bank once both when they read fragments (two rows, four t) and
 * when they store groups (eight consecutive rows, one t).
 *
 * STAGE 4 is the same structure on the wavefront's 16x16x16 instruction
 * (oclf_mfma_16x16x16_*, OCLF_MFMA): "warps" are wavefronts of 64, a
 * fragment of the product is 16 x 16 (TN = WGN * NB * 16), and lane l
 * (i = l % 16, q = l / 16) needs pairs 2q, 2q + 1 (k 4q..4q+3) of a row for
 * one k16 step and 2q + 8, 2q + 9 for the next: a run's group q holds those
 * four words (mm_pair_of), so one 16-byte local load again gives a lane's
 * A (or B) registers of both steps. The staging, the swizzle and the
 * bounds are shared; only which pair lands in which word differs.
 *
 * A quantized W (OCLF_QW, NK) goes into the same W tile as its integers
 * q - z (|q - z| <= 255: exact in f16 and bf16): a work-item's run is 32
 * weights of one W row, inside one group or GGUF block since K chunks are
 * multiples of 32, read as bytes 8 at a time (q_rawv) and stored exactly
 * as a 16-bit W's run; edges convert weight by weight. Beside the tile,
 * one f32 scale per W row and run (mm_qscales). A fragment's two k16
 * products of a run are summed from zero and scaled once into the f32
 * accumulator (mm_chunk): s (sum x (q - z)), as the unstaged kernel's
 * QSCALE 1, so no weight is rounded to the dtype and a dequantized weight
 * past f16's range (or below its normals) reaches the product as it is. */
#include "mma.h"
#if OCLF_DTYPE == 0
#error "the matrix-unit structure takes f16 or bf16 operands"
#endif
#if OCLF_KC % 32
#error "OCLF_KC must be a multiple of 32 for the matrix-unit structure"
#endif
#if OCLF_WF32
#error "the matrix-unit structure reads W in the call's dtype or quantized"
#endif
#if OCLF_QW && OCLF_VEC != 8
#error "a quantized W's runs are dequantized 8 weights at a time (OCLF_VEC 8)"
#endif
#if OCLF_STAGE == 4
#define MM_WAVE 1
#define MM_LANES 64 /* work-items of one instruction */
#define MM_FN 16    /* columns of a product fragment */
#define MM_SCRATCH_WORDS OCLF_MFMA_SCRATCH_WORDS
#define MM_EMULATED (OCLF_MFMA == 0)
#else
#define MM_WAVE 0
#define MM_LANES 32
#define MM_FN 8
#define MM_SCRATCH_WORDS OCLF_MMA_SCRATCH_WORDS
#define MM_EMULATED (OCLF_MMA == 0)
#endif
#define MM_WARPS (OCLF_WGM * OCLF_WGN)
#define MM_WGS (MM_LANES * MM_WARPS)
#define MM_TM (OCLF_WGM * OCLF_MB * 16)
#define MM_TN (OCLF_WGN * OCLF_NB * MM_FN)
#define MM_LROW (OCLF_KC / 2 + (OCLF_KC / 2 % 32 == 0 ? 16 : 0))
/* The staging of a chunk. Where the group's tile lies inside x and W and
 * the chunk inside K (every chunk of an interior tile but a partial last
 * one), a work-item copies whole runs: the 32 elements of K of one tile row
 * (64 bytes: four 16-byte global loads), whose 16 words it rearranges in
 * registers into the four 16-byte groups of the local layout (four 16-byte
 * local stores). A KN W is copied in pieces of two K rows by 8 columns
 * (two 16-byte loads), paired into one word per column (eight 4-byte
 * stores). Everywhere else (edges, a partial chunk) the group copies word
 * by word with bounds checks and zero fill (mm_copy_edge). */
#define MM_RUNS_X (MM_TM * (OCLF_KC / 32))
#if !OCLF_WKN
#define MM_RUNS (MM_RUNS_X + MM_TN * (OCLF_KC / 32))
#define MM_WU 0
#else
#define MM_RUNS MM_RUNS_X
#define MM_WU (OCLF_KC / 2 * (MM_TN / 8))
#endif
/* runs and KN pieces per work-item; the registers that stage them */
#define MM_RPER ((MM_RUNS + MM_WGS - 1) / MM_WGS)
#define MM_WPER ((MM_WU + MM_WGS - 1) / MM_WGS)
#define MM_SREGS (4 * MM_RPER + 2 * MM_WPER)

#if OCLF_DTYPE == 1
#define MM_WIDEN(h) WIDEN_F16(8, h)
#define MM_NARROW(v) NARROW_F16(8, v)
#else
#define MM_WIDEN(h) WIDEN_BF16(8, h)
#define MM_NARROW(v) NARROW_BF16(8, v)
#endif

/* The word of 16-byte group `grp` (0..3) of a run, the run's first word
 * `base`, in tile row `row`: the groups are swizzled by row so that the
 * 16-byte stores of eight consecutive rows and the fragment reads of two
 * rows by four lanes each touch every bank once. */
static inline uint mm_group(uint row, uint base, uint grp)
{
    return base + 4u * (grp ^ ((row >> 1) & 3u));
}

/* The K pair (0..15) of a run that word `wd` (0..3) of its group `grp`
 * holds, and back: the group and word of pair p. Warp fragments: pairs
 * grp, grp + 4, grp + 8, grp + 12; wavefront fragments: 2 grp, 2 grp + 1,
 * 2 grp + 8, 2 grp + 9. */
static inline uint mm_pair_of(uint grp, uint wd)
{
    return MM_WAVE ? 8u * (wd >> 1) + 2u * grp + (wd & 1u) : 4u * wd + grp;
}
static inline uint mm_grp_of(uint p) { return MM_WAVE ? (p >> 1) & 3u : p & 3u; }
static inline uint mm_word_of(uint p) { return MM_WAVE ? (p & 1u) + 2u * (p >> 3) : p >> 2; }

/* W's parameters and their names: a quantized W brings its scales and
 * zero points along to where its runs are dequantized. */
#if OCLF_QW
#define MM_WREF global const uchar *w, ulong wo, ulong ws, QARGS
#define MM_WPASS(p) p, wo, ws, qs, qso, qss, qz, qzo, qzs
#else
#define MM_WREF global const ushort *w, ulong wo, ulong ws
#define MM_WPASS(p) p, wo, ws
#endif

/* Elements c..c+7 of a row at q as bits, two a word (the lower column
 * low): one 16-byte load in the aligned build. */
static inline uint4 mm_ld16(global const ushort *q)
{
#if OCLF_ALIGNED
    return *(global const uint4 *)q;
#else
    return as_uint4(LD16V(8, q));
#endif
}

/* The prologue on 8 elements of x, rounded back to the dtype (zeros stay
 * zeros: every activation maps 0 to 0). */
static inline uint4 mm_pro(uint4 h)
{
#if OCLF_PRO == LIN_NONE
    return h;
#else
    floatv v = MM_WIDEN(as_ushort8(h));
    v = PRO(floatv, v);
    return as_uint4(MM_NARROW(v));
#endif
}

#if OCLF_QW
/* A quantized W's 8 integers q - z of row `row` from column c (a multiple
 * of 8: inside one group and one half of a GGUF block) as bits of the
 * dtype, exact (|q - z| <= 255): what a 16-bit W's 16-byte load gives the
 * tile. The group's scale is applied to the products (mm_qscales). */
static inline uint4 mm_qld8(MM_WREF, uint row, uint c)
{
    global const uchar *wp = w + wo + (ulong)row * ws;
#if Q_HAS_Z
    const float z = q_gzero(qz + qzo + (ulong)row * qzs, c);
#else
    const float z = 0.0f;
#endif
    return as_uint4(MM_NARROW(q_rawv(wp, c) - z));
}

/* The integer q - z of weight c of a row (its bytes at wp, zero points
 * at zp). */
static inline float mm_qint(global const uchar *wp, global const uchar *zp, uint c)
{
#if OCLF_QW == 1
    return (float)(char)wp[c];
#elif OCLF_QW == 2
    const uchar b = wp[c >> 1];
    return (float)((c & 1) ? b >> 4 : b & 15) - q_gzero(zp, c);
#elif OCLF_QW == 3
    return (float)(char)wp[(c >> 5) * 34 + 2 + (c & 31)];
#else
    const uint j = c & 31;
    const uchar b = wp[(c >> 5) * 18 + 2 + (j & 15)];
    return (float)(j < 16 ? b & 15 : b >> 4) - 8.0f;
#endif
}

/* The integers of weights (r, c) and (r, c + 1) as one word of bits, zeros
 * outside W and K: the edge copy's. */
static inline uint mm_qpair(MM_WREF, uint r, uint c, uint n, uint k)
{
    if (r >= n)
        return 0u;
    global const uchar *wp = w + wo + (ulong)r * ws, *zp = qz + qzo + (ulong)r * qzs;
    const float a = c < k ? mm_qint(wp, zp, c) : 0.0f;
    const float b = c + 1 < k ? mm_qint(wp, zp, c + 1) : 0.0f;
    return as_uint4(MM_NARROW((float8)(a, b, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f))).s0;
}

/* The chunk's scales from column c0: one a W tile row and run of 32 of K
 * (its group's, its GGUF block's, or the row's for INT8 per channel), as
 * f32 at sl[row * (KC / 32) + run]; 0 outside W and K, whose integers are
 * zeros. */
static inline void mm_qscales(local float *sl, MM_WREF, uint n, uint k, uint tn0, uint c0,
                              uint lid)
{
#pragma unroll 1
    for (uint e = lid; e < MM_TN * (OCLF_KC / 32); e += MM_WGS) {
        const uint row = e / (OCLF_KC / 32), c = c0 + 32 * (e % (OCLF_KC / 32));
        float v = 0.0f;
        if (tn0 + row < n && c < k) {
            const ulong r = tn0 + row;
            v = q_gscale(w + wo + r * ws, qs + qso + r * qss, qz + qzo + r * qzs, c);
        }
        sl[e] = v;
    }
}

/* Run `e` of this chunk (x's runs first, then W's) into s[0..3]: x's four
 * 16-byte loads, or W's 32 weights dequantized 8 at a time. */
static inline void mm_fetch_run(uint4 s[4], uint e, global const ushort *x, ulong xo, ulong xs,
                                MM_WREF, uint tm0, uint tn0, uint c0)
{
    const int isx = e < MM_RUNS_X;
    const uint ei = isx ? e : e - MM_RUNS_X, row = ei / (OCLF_KC / 32);
    const uint c = c0 + 32 * (ei % (OCLF_KC / 32));
    if (isx) {
        global const ushort *q = x + xo + (ulong)(tm0 + row) * xs + c;
        for (uint i = 0; i < 4; i++)
            s[i] = mm_pro(mm_ld16(q + 8 * i));
    } else {
        for (uint i = 0; i < 4; i++)
            s[i] = mm_qld8(MM_WPASS(w), tn0 + row, c + 8 * i);
    }
}
#else
/* Run `e` of this chunk (x's runs first, then an NK W's) into s[0..3]: its
 * tile row and first column (c0 + 32 c32) read by four 16-byte loads. */
static inline void mm_fetch_run(uint4 s[4], uint e, global const ushort *x, ulong xo, ulong xs,
                                MM_WREF, uint tm0, uint tn0, uint c0)
{
    const int isx = e < MM_RUNS_X;
    const uint ei = isx ? e : e - MM_RUNS_X, row = ei / (OCLF_KC / 32);
    const uint c = c0 + 32 * (ei % (OCLF_KC / 32));
    global const ushort *q = isx ? x + xo + (ulong)(tm0 + row) * xs + c
                                 : w + wo + (ulong)(tn0 + row) * ws + c;
    for (uint i = 0; i < 4; i++)
        s[i] = isx ? mm_pro(mm_ld16(q + 8 * i)) : mm_ld16(q + 8 * i);
}
#endif

/* This work-item's runs (and KN pieces) of the chunk from column c0, an
 * interior one, into registers. */
static inline void mm_fetch(uint4 s[MM_SREGS], global const ushort *x, ulong xo, ulong xs,
                            MM_WREF, uint tm0, uint tn0, uint c0, uint lid)
{
#pragma unroll
    for (uint u = 0; u < MM_RPER; u++) {
        const uint e = lid + u * MM_WGS;
        if (e < MM_RUNS)
            mm_fetch_run(s + 4 * u, e, x, xo, xs, MM_WPASS(w), tm0, tn0, c0);
    }
#pragma unroll
    for (uint u = 0; u < MM_WPER; u++) {
        const uint e = lid + u * MM_WGS, kp = e / (MM_TN / 8), cb = e % (MM_TN / 8);
        if (e < MM_WU) {
            global const ushort *q = w + wo + (ulong)(c0 + 2 * kp) * ws + tn0 + 8 * cb;
            s[4 * MM_RPER + 2 * u] = mm_ld16(q);
            s[4 * MM_RPER + 2 * u + 1] = mm_ld16(q + ws);
        }
    }
}

/* The fetched runs and pieces into the local tiles xl [TM][LROW] and wl
 * [TN][LROW]: group g of a run is word g of each of its four pieces. */
static inline void mm_put(const uint4 s[MM_SREGS], local uint *xl, local uint *wl, uint lid)
{
#pragma unroll
    for (uint u = 0; u < MM_RPER; u++) {
        const uint e = lid + u * MM_WGS;
        if (e < MM_RUNS) {
            const int isx = e < MM_RUNS_X;
            const uint ei = isx ? e : e - MM_RUNS_X, row = ei / (OCLF_KC / 32);
            local uint *d = (isx ? xl : wl) + row * MM_LROW;
            const uint base = 16 * (ei % (OCLF_KC / 32));
            /* pair p of the run is word p % 4 of piece p / 4 */
            uint wds[16];
#pragma unroll
            for (uint i = 0; i < 4; i++) {
                wds[4 * i] = s[4 * u + i].s0;
                wds[4 * i + 1] = s[4 * u + i].s1;
                wds[4 * i + 2] = s[4 * u + i].s2;
                wds[4 * i + 3] = s[4 * u + i].s3;
            }
#pragma unroll
            for (uint gq = 0; gq < 4; gq++)
                *(local uint4 *)(d + mm_group(row, base, gq)) =
                    (uint4)(wds[mm_pair_of(gq, 0)], wds[mm_pair_of(gq, 1)],
                            wds[mm_pair_of(gq, 2)], wds[mm_pair_of(gq, 3)]);
        }
    }
#pragma unroll
    for (uint u = 0; u < MM_WPER; u++) {
        const uint e = lid + u * MM_WGS;
        if (e < MM_WU) {
            /* column 8 cb + i's word of K pair kp: row 2 kp low, 2 kp + 1
             * high; pair p of a run is word mm_word_of(p) of group
             * mm_grp_of(p) */
            const uint kp = e / (MM_TN / 8), cb = e % (MM_TN / 8), p = kp % 16;
            const uint base = 16 * (kp / 16);
            const uint8 lo = convert_uint8(as_ushort8(s[4 * MM_RPER + 2 * u]));
            const uint8 hi = convert_uint8(as_ushort8(s[4 * MM_RPER + 2 * u + 1]));
            const uint8 v = lo | (hi << 16u);
            local uint *d = wl + (8 * cb) * MM_LROW + mm_word_of(p);
            d[0 * MM_LROW + mm_group(0, base, mm_grp_of(p))] = v.s0;
            d[1 * MM_LROW + mm_group(1, base, mm_grp_of(p))] = v.s1;
            d[2 * MM_LROW + mm_group(2, base, mm_grp_of(p))] = v.s2;
            d[3 * MM_LROW + mm_group(3, base, mm_grp_of(p))] = v.s3;
            d[4 * MM_LROW + mm_group(4, base, mm_grp_of(p))] = v.s4;
            d[5 * MM_LROW + mm_group(5, base, mm_grp_of(p))] = v.s5;
            d[6 * MM_LROW + mm_group(6, base, mm_grp_of(p))] = v.s6;
            d[7 * MM_LROW + mm_group(7, base, mm_grp_of(p))] = v.s7;
        }
    }
}

/* Element (r, c) of a [rows, cols] matrix at p as bits; 0 outside it. */
static inline uint mm_elem(global const ushort *p, ulong o, ulong s, uint r, uint c, uint rows,
                           uint cols)
{
    return r < rows && c < cols ? p[o + (ulong)r * s + c] : 0u;
}

/* The chunk from column c0 of an edge tile or a partial chunk, word by
 * word with bounds checks: zeros outside x, W and K. */
static inline void mm_copy_edge(local uint *xl, local uint *wl, global const ushort *x, ulong xo,
                                ulong xs, MM_WREF, uint m, uint n, uint k, uint tm0, uint tn0,
                                uint c0, uint lid)
{
#pragma unroll 1
    for (uint e = lid; e < (MM_TM + MM_TN) * (OCLF_KC / 2); e += MM_WGS) {
        const int isx = e < MM_TM * (OCLF_KC / 2);
        const uint ei = isx ? e : e - MM_TM * (OCLF_KC / 2);
        const uint row = ei / (OCLF_KC / 2), pr = ei % (OCLF_KC / 2), c = c0 + 2 * pr;
        uint v;
        if (isx) {
            v = mm_elem(x, xo, xs, tm0 + row, c, m, k) | mm_elem(x, xo, xs, tm0 + row, c + 1, m, k)
                                                          << 16;
#if OCLF_PRO != LIN_NONE
            v = mm_pro((uint4)(v, 0u, 0u, 0u)).s0;
#endif
        } else {
#if OCLF_QW
            v = mm_qpair(MM_WPASS(w), tn0 + row, c, n, k);
#elif !OCLF_WKN
            v = mm_elem(w, wo, ws, tn0 + row, c, n, k) | mm_elem(w, wo, ws, tn0 + row, c + 1, n, k)
                                                          << 16;
#else
            v = mm_elem(w, wo, ws, c, tn0 + row, k, n) | mm_elem(w, wo, ws, c + 1, tn0 + row, k, n)
                                                          << 16;
#endif
        }
        /* pair pr: run pr / 16, pair p of the run in its group and word */
        const uint p = pr % 16;
        (isx ? xl : wl)[row * MM_LROW + mm_group(row, 16 * (pr / 16), mm_grp_of(p)) +
                        mm_word_of(p)] = v;
    }
}

#if MM_WAVE
/* D = A B + D for one 16x16x16 fragment pair in the dtype's instruction. */
static inline void mm_wstep(float d[4], const uint a[2], const uint b[2], uint lane,
                            local uint *scratch)
{
#if OCLF_DTYPE == 1
    oclf_mfma_16x16x16_f16(d, a, b, d, lane, scratch);
#else
    oclf_mfma_16x16x16_bf16(d, a, b, d, lane, scratch);
#endif
}

/* The wavefront's MB x NB fragments (16 x 16) over one chunk: xw and ww
 * are its first tile rows (of x and of W's columns). Lane i = lane % 16,
 * q = lane / 16 reads group q of row i of each fragment: its A (B) words
 * of the run's two k16 steps, one 16-byte load a fragment. Over a
 * quantized W's integer tile (OCLF_QW) each fragment's two k16 products of
 * a run are summed from zero, then scaled by the run's scale of the lane's
 * column (i16 of the fragment; sw: the wavefront's first tile row's
 * scales) into the accumulator; sw is unused otherwise. */
static inline void mm_chunk(float acc[OCLF_MB][OCLF_NB][4], const local uint *xw,
                            const local uint *ww, const local float *sw, uint lane,
                            local uint *scratch)
{
    const uint i16 = lane & 15u, q = lane >> 4;
    for (uint c32 = 0; c32 < OCLF_KC / 32; c32++) {
        /* rows i16 + 16 f share row i16's swizzle */
        const uint off = mm_group(i16, c32 * 16u, q);
        uint4 bw[OCLF_NB];
#if OCLF_QW
        float sc[OCLF_NB];
#endif
#pragma unroll
        for (uint j = 0; j < OCLF_NB; j++) {
            bw[j] = *(const local uint4 *)(ww + (j * 16 + i16) * MM_LROW + off);
#if OCLF_QW
            sc[j] = sw[(j * 16 + i16) * (OCLF_KC / 32) + c32];
#endif
        }
#pragma unroll
        for (uint i = 0; i < OCLF_MB; i++) {
            const uint4 av = *(const local uint4 *)(xw + (i * 16 + i16) * MM_LROW + off);
            const uint a0[2] = {av.s0, av.s1}, a1[2] = {av.s2, av.s3};
#pragma unroll
            for (uint j = 0; j < OCLF_NB; j++) {
                const uint b0[2] = {bw[j].s0, bw[j].s1}, b1[2] = {bw[j].s2, bw[j].s3};
#if OCLF_QW
                float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mm_wstep(p, a0, b0, lane, scratch);
                mm_wstep(p, a1, b1, lane, scratch);
#pragma unroll
                for (uint e = 0; e < 4; e++)
                    acc[i][j][e] = fma(sc[j], p[e], acc[i][j][e]);
#else
                mm_wstep(acc[i][j], a0, b0, lane, scratch);
                mm_wstep(acc[i][j], a1, b1, lane, scratch);
#endif
            }
        }
    }
}

/* The epilogue on one 16 x 16 accumulator fragment d whose tile starts at
 * row r0, column c0: element e is at row r0 + 4 q + e, column c0 + i. */
static inline void mm_store(float4 d, uint r0, uint c0, uint lane, uint m, uint n, EPI_ARGS)
{
    const uint r = r0 + 4 * (lane >> 4), c = c0 + (lane & 15u);
    if (c >= n)
        return;
    if (r < m)
        lin_store(d.s0, r, c, EPI_PASS);
    if (r + 1 < m)
        lin_store(d.s1, r + 1, c, EPI_PASS);
    if (r + 2 < m)
        lin_store(d.s2, r + 2, c, EPI_PASS);
    if (r + 3 < m)
        lin_store(d.s3, r + 3, c, EPI_PASS);
}
#else
/* D = A B + D for one fragment pair in the dtype's instruction. */
static inline void mm_step(float d[4], const uint a[4], const uint b[2], uint lane,
                           local uint *scratch)
{
#if OCLF_DTYPE == 1
    oclf_mma_m16n8k16_f16(d, a, b, d, lane, scratch);
#else
    oclf_mma_m16n8k16_bf16(d, a, b, d, lane, scratch);
#endif
}

/* The warp's MB x NB fragments over one chunk of the local tiles: xw and
 * ww are the warp's first tile rows (of x and of W's columns). Over a
 * quantized W's integer tile (OCLF_QW) each fragment's two k16 products of
 * a run are summed from zero, then scaled by the run's scales of the
 * lane's two columns (2 t and 2 t + 1 of the fragment: elements 0, 2 and
 * 1, 3; sw: the warp's first tile row's scales) into the accumulator; sw
 * is unused otherwise. */
static inline void mm_chunk(float acc[OCLF_MB][OCLF_NB][4], const local uint *xw,
                            const local uint *ww, const local float *sw, uint lane,
                            local uint *scratch)
{
    const uint g = lane >> 2, t = lane & 3u;
    for (uint c32 = 0; c32 < OCLF_KC / 32; c32++) {
        /* every row this lane reads (g, g + 8, in fragments of 16 or 8 rows
         * from a multiple of 16 or 8) has the swizzle of row g */
        const uint off = mm_group(g, c32 * 16u, t);
        /* the NB B fragments held, the A fragments one row of fragments at
         * a time: fewer live registers than holding all of A */
        uint4 bw[OCLF_NB];
#if OCLF_QW
        float2 sc[OCLF_NB];
#endif
#pragma unroll
        for (uint j = 0; j < OCLF_NB; j++) {
            bw[j] = *(const local uint4 *)(ww + (j * 8 + g) * MM_LROW + off);
#if OCLF_QW
            sc[j] = (float2)(sw[(j * 8 + 2 * t) * (OCLF_KC / 32) + c32],
                             sw[(j * 8 + 2 * t + 1) * (OCLF_KC / 32) + c32]);
#endif
        }
#pragma unroll
        for (uint i = 0; i < OCLF_MB; i++) {
            const uint4 alo = *(const local uint4 *)(xw + (i * 16 + g) * MM_LROW + off);
            const uint4 ahi = *(const local uint4 *)(xw + (i * 16 + g + 8) * MM_LROW + off);
            const uint a0[4] = {alo.s0, ahi.s0, alo.s1, ahi.s1};
            const uint a1[4] = {alo.s2, ahi.s2, alo.s3, ahi.s3};
#pragma unroll
            for (uint j = 0; j < OCLF_NB; j++) {
                const uint b0[2] = {bw[j].s0, bw[j].s1}, b1[2] = {bw[j].s2, bw[j].s3};
#if OCLF_QW
                float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mm_step(p, a0, b0, lane, scratch);
                mm_step(p, a1, b1, lane, scratch);
                acc[i][j][0] = fma(sc[j].s0, p[0], acc[i][j][0]);
                acc[i][j][1] = fma(sc[j].s1, p[1], acc[i][j][1]);
                acc[i][j][2] = fma(sc[j].s0, p[2], acc[i][j][2]);
                acc[i][j][3] = fma(sc[j].s1, p[3], acc[i][j][3]);
#else
                mm_step(acc[i][j], a0, b0, lane, scratch);
                mm_step(acc[i][j], a1, b1, lane, scratch);
#endif
            }
        }
    }
}

/* The epilogue on one accumulator fragment d whose tile starts at row r0,
 * column c0: element e is at row r0 + g + 8 (e / 2), column c0 + 2 t +
 * e % 2. By value, so the accumulators never leave registers. */
static inline void mm_store(float4 d, uint r0, uint c0, uint lane, uint m, uint n, EPI_ARGS)
{
    const uint r = r0 + (lane >> 2), c = c0 + 2 * (lane & 3u);
    if (r < m && c < n)
        lin_store(d.s0, r, c, EPI_PASS);
    if (r < m && c + 1 < n)
        lin_store(d.s1, r, c + 1, EPI_PASS);
    if (r + 8 < m && c < n)
        lin_store(d.s2, r + 8, c, EPI_PASS);
    if (r + 8 < m && c + 1 < n)
        lin_store(d.s3, r + 8, c + 1, EPI_PASS);
}
#endif

kernel __attribute__((reqd_work_group_size(MM_WGS, 1, 1))) void linear_fused(LIN_ARGS)
{
    local uint xl[2][MM_TM * MM_LROW] __attribute__((aligned(16)));
    local uint wl[2][MM_TN * MM_LROW] __attribute__((aligned(16)));
#if MM_EMULATED
    local uint scratch_all[MM_WARPS * MM_SCRATCH_WORDS];
#endif
#if OCLF_QW
    local float sl[2][MM_TN * (OCLF_KC / 32)];
#endif
    const uint lid = get_local_id(0), lane = lid % MM_LANES, warp = lid / MM_LANES;
    const uint wm = warp % OCLF_WGM, wn = warp / OCLF_WGM;
    const uint ngm = (m + MM_TM - 1) / MM_TM, grp = get_group_id(0);
    const uint tm0 = (grp % ngm) * MM_TM, tn0 = (grp / ngm) * MM_TN;
#if MM_EMULATED
    local uint *scratch = scratch_all + warp * MM_SCRATCH_WORDS;
#else
    local uint *scratch = 0;
#endif
#if OCLF_QW
    global const ushort *xb = (global const ushort *)x;
    global const uchar *wb = w;
#else
    global const ushort *xb = (global const ushort *)x, *wb = (global const ushort *)w;
#endif
    float acc[OCLF_MB][OCLF_NB][4];
#pragma unroll
    for (uint i = 0; i < OCLF_MB; i++)
#pragma unroll
        for (uint j = 0; j < OCLF_NB; j++)
#pragma unroll
            for (uint e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
    uint4 sr[MM_SREGS];
    const uint chunks = (k + OCLF_KC - 1) / OCLF_KC;
    /* the tile inside x and W: its chunks inside K copy whole runs */
    const int inner = tm0 + MM_TM <= m && tn0 + MM_TN <= n;
    if (inner && OCLF_KC <= k) {
        mm_fetch(sr, xb, xo, xs, MM_WPASS(wb), tm0, tn0, 0, lid);
        mm_put(sr, xl[0], wl[0], lid);
    } else {
        mm_copy_edge(xl[0], wl[0], xb, xo, xs, MM_WPASS(wb), m, n, k, tm0, tn0, 0, lid);
    }
#if OCLF_QW
    mm_qscales(sl[0], MM_WPASS(wb), n, k, tn0, 0, lid);
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint ch = 0; ch < chunks; ch++) {
        const uint cur = ch & 1u;
        const int more = ch + 1 < chunks;
        /* the next chunk fetched after this one's products: a warp that
         * finishes early loads while the others multiply, and the staged
         * pieces are not live across the products (152 registers at sm_90
         * with them, 128 without: two groups an SM rather than one) */
        mm_chunk(acc, xl[cur] + wm * (OCLF_MB * 16) * MM_LROW,
                 wl[cur] + wn * (OCLF_NB * MM_FN) * MM_LROW,
#if OCLF_QW
                 sl[cur] + wn * (OCLF_NB * MM_FN) * (OCLF_KC / 32),
#else
                 (const local float *)0,
#endif
                 lane, scratch);
        const uint c1 = (ch + 1) * OCLF_KC;
        if (more && inner && c1 + OCLF_KC <= k) {
            mm_fetch(sr, xb, xo, xs, MM_WPASS(wb), tm0, tn0, c1, lid);
            mm_put(sr, xl[cur ^ 1u], wl[cur ^ 1u], lid);
        } else if (more) {
            mm_copy_edge(xl[cur ^ 1u], wl[cur ^ 1u], xb, xo, xs, MM_WPASS(wb), m, n, k, tm0,
                         tn0, c1, lid);
        }
#if OCLF_QW
        if (more)
            mm_qscales(sl[cur ^ 1u], MM_WPASS(wb), n, k, tn0, c1, lid);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint r0 = tm0 + wm * (OCLF_MB * 16), c0 = tn0 + wn * (OCLF_NB * MM_FN);
#pragma unroll
    for (uint i = 0; i < OCLF_MB; i++)
#pragma unroll
        for (uint j = 0; j < OCLF_NB; j++)
            mm_store((float4)(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]),
                     r0 + 16 * i, c0 + MM_FN * j, lane, m, n, EPI_PASS);
}

#elif OCLF_STAGE == 3
/* ---- register tiles: an FP32 GEMM for devices without a matrix unit ------
 * A work-group of WGM x WGN work-items (lane lm = lid / WGN, ln = lid %
 * WGN); each holds an MB x NB tile of the product in registers (MB and NB
 * multiples of 4), so a group's tile is TM = WGM * MB rows by TN = WGN * NB
 * columns. A lane's rows come in runs of four, run i4 at rows
 * 4 (i4 WGM + lm) .. + 3 of the tile, and its columns the same way along
 * WGN: one float4 local load then gives four rows (or columns), and the
 * lanes of a warp read consecutive float4s, every bank once.
 *
 * The group copies KC columns of K of its x and W tiles at a time into
 * local memory, K-major (xl[kk][row], wl[kk][col]: x and an NK W
 * transposed as they are stored, a KN W as it is), in f32 whatever the
 * dtype, the prologue applied to x on the way. Global loads are VEC
 * elements wide (16 bytes: VEC 4 for f32, 8 for f16 and bf16), aligned ones
 * where the host found every row on a VEC boundary (OCLF_ALIGNED); edge
 * tiles and a partial last chunk load element by element with bounds
 * checks and zero fill. Two buffers: the next chunk is loaded into
 * registers before the current one's products and stored into the other
 * buffer after them, one barrier a chunk. Per k a lane does MB / 4 + NB / 4
 * float4 local loads for MB x NB FMAs (8 x 8: 4 loads, 64 FMAs).
 *
 * A quantized W (OCLF_QW) is dequantized to f32 as it is copied, a VEC
 * run of one row at a time (VEC divides the group), so each weight is
 * dequantized once per group tile. The epilogue runs on each accumulator
 * at its row and column. */
#if OCLF_MB % 4 || OCLF_NB % 4
#error "the register-tiled structure takes MB and NB multiples of 4"
#endif
#if OCLF_KC % OCLF_VEC
#error "OCLF_KC must be a multiple of OCLF_VEC"
#endif
#define RT_WGS (OCLF_WGM * OCLF_WGN)
#define RT_TM (OCLF_WGM * OCLF_MB)
#define RT_TN (OCLF_WGN * OCLF_NB)
/* a local row: one k of the tile's rows (columns), and 4 more, so that
 * the transposing stores of lanes at different k of one row spread over
 * more banks, while every lane's float4 stays on a 16-byte boundary */
#define RT_LDM (RT_TM + 4)
#define RT_LDN (RT_TN + 4)
/* VEC-wide pieces a chunk: x's along K; W's along K (NK) or N (KN) */
#define RT_XU (RT_TM * (OCLF_KC / OCLF_VEC))
#if !OCLF_WKN
#define RT_WU (RT_TN * (OCLF_KC / OCLF_VEC))
#else
#if RT_TN % OCLF_VEC
#error "the register-tiled structure's TN must be a multiple of OCLF_VEC for a KN W"
#endif
#define RT_WU (OCLF_KC * (RT_TN / OCLF_VEC))
#endif
/* pieces a work-item: the registers that carry the next chunk */
#define RT_XPER ((RT_XU + RT_WGS - 1) / RT_WGS)
#define RT_WPER ((RT_WU + RT_WGS - 1) / RT_WGS)
#if OCLF_QW
#define RT_WARGS LIN_WARGS, QARGS
#define RT_WPASS w, wo, ws, qs, qso, qss, qz, qzo, qzs
#else
#define RT_WARGS LIN_WARGS
#define RT_WPASS w, wo, ws
#endif

/* VEC elements of row r (of `rows`) of x from column c, the prologue
 * applied; `full`: the piece lies inside x (one vector load), else the
 * elements outside are zeros. */
static inline floatv rt_ldx(global const stor_t *x, ulong xo, ulong xs, uint r, uint c, uint rows,
                            uint k, int full)
{
    global const stor_t *p = x + xo + (ulong)min(r, rows - 1) * xs;
    floatv v;
    if (full) {
        v = LDV(p, c);
    } else {
        float t[OCLF_VEC];
        for (uint l = 0; l < OCLF_VEC; l++)
            t[l] = r < rows && c + l < k ? LD(p, c + l) : 0.0f;
        v = LDV_F(t, 0);
    }
    return PRO(floatv, v);
}

#if !OCLF_WKN
/* VEC weights of W's row r (of n) from column c, dequantized for OCLF_QW;
 * zeros outside W unless `full`. */
static inline floatv rt_ldw(RT_WARGS, uint r, uint c, uint n, uint k, int full)
{
    const ulong row = min(r, n - 1);
    float t[OCLF_VEC];
#if OCLF_QW
    global const wstor_t *wp = w + wo + row * ws;
    global const qsc_t *sp = qs + qso + row * qss;
    global const uchar *zp = qz + qzo + row * qzs;
    if (full)
        return q_ldv(wp, sp, zp, c);
    for (uint l = 0; l < OCLF_VEC; l++)
        t[l] = r < n && c + l < k ? q_ld(wp, sp, zp, c + l) : 0.0f;
#else
    global const wel_t *wp = w + wo + row * ws;
    if (full)
        return LDWV(wp, c);
    for (uint l = 0; l < OCLF_VEC; l++)
        t[l] = r < n && c + l < k ? LDW(wp, c + l) : 0.0f;
#endif
    return LDV_F(t, 0);
}
#else
/* VEC columns of a KN W's row kr (of k) from column c; zeros outside W
 * unless `full`. */
static inline floatv rt_ldw(RT_WARGS, uint kr, uint c, uint n, uint k, int full)
{
    global const stor_t *p = w + wo + (ulong)min(kr, k - 1) * ws;
    if (full)
        return LDV(p, c);
    float t[OCLF_VEC];
    for (uint l = 0; l < OCLF_VEC; l++)
        t[l] = kr < k && c + l < n ? LD(p, c + l) : 0.0f;
    return LDV_F(t, 0);
}
#endif

/* This work-item's pieces of the chunk from column c0 of K into registers.
 * Consecutive work-items take consecutive pieces of a row (coalesced). */
static inline void rt_fetch(floatv sx[RT_XPER], floatv sw[RT_WPER], global const stor_t *x,
                            ulong xo, ulong xs, RT_WARGS, uint m, uint n, uint k, uint tm0,
                            uint tn0, uint c0, uint lid)
{
    const int kin = c0 + OCLF_KC <= k;
    const int fx = kin && tm0 + RT_TM <= m, fw = kin && tn0 + RT_TN <= n;
#pragma unroll
    for (uint u = 0; u < RT_XPER; u++) {
        const uint e = lid + u * RT_WGS;
        if (RT_XU % RT_WGS == 0 || e < RT_XU) {
            const uint r = e / (OCLF_KC / OCLF_VEC), kv = e % (OCLF_KC / OCLF_VEC) * OCLF_VEC;
            sx[u] = rt_ldx(x, xo, xs, tm0 + r, c0 + kv, m, k, fx);
        }
    }
#pragma unroll
    for (uint u = 0; u < RT_WPER; u++) {
        const uint e = lid + u * RT_WGS;
        if (RT_WU % RT_WGS == 0 || e < RT_WU) {
#if !OCLF_WKN
            const uint r = e / (OCLF_KC / OCLF_VEC), kv = e % (OCLF_KC / OCLF_VEC) * OCLF_VEC;
            sw[u] = rt_ldw(RT_WPASS, tn0 + r, c0 + kv, n, k, fw);
#else
            const uint kr = e / (RT_TN / OCLF_VEC), cv = e % (RT_TN / OCLF_VEC) * OCLF_VEC;
            sw[u] = rt_ldw(RT_WPASS, c0 + kr, tn0 + cv, n, k, fw);
#endif
        }
    }
}

/* The fetched pieces into the local tiles xl [KC][LDM] and wl [KC][LDN]. */
static inline void rt_put(const floatv sx[RT_XPER], const floatv sw[RT_WPER], local float *xl,
                          local float *wl, uint lid)
{
#pragma unroll
    for (uint u = 0; u < RT_XPER; u++) {
        const uint e = lid + u * RT_WGS;
        if (RT_XU % RT_WGS == 0 || e < RT_XU) {
            const uint r = e / (OCLF_KC / OCLF_VEC), kv = e % (OCLF_KC / OCLF_VEC) * OCLF_VEC;
            float t[OCLF_VEC];
            STV_F(t, 0, sx[u]);
#pragma unroll
            for (uint l = 0; l < OCLF_VEC; l++)
                xl[(kv + l) * RT_LDM + r] = t[l];
        }
    }
#pragma unroll
    for (uint u = 0; u < RT_WPER; u++) {
        const uint e = lid + u * RT_WGS;
        if (RT_WU % RT_WGS == 0 || e < RT_WU) {
#if !OCLF_WKN
            const uint r = e / (OCLF_KC / OCLF_VEC), kv = e % (OCLF_KC / OCLF_VEC) * OCLF_VEC;
            float t[OCLF_VEC];
            STV_F(t, 0, sw[u]);
#pragma unroll
            for (uint l = 0; l < OCLF_VEC; l++)
                wl[(kv + l) * RT_LDN + r] = t[l];
#else
            const uint kr = e / (RT_TN / OCLF_VEC), cv = e % (RT_TN / OCLF_VEC) * OCLF_VEC;
            STV_F(wl + kr * RT_LDN, cv, sw[u]);
#endif
        }
    }
}

/* One chunk of products: per k, the lane's MB rows of x and NB columns of
 * W as float4s from local memory, then MB x NB FMAs into the register
 * tile (acc[i][j4]: row i, columns 4 j4 .. 4 j4 + 3 of the lane's). */
static inline void rt_chunk(float4 acc[OCLF_MB][OCLF_NB / 4], const local float *xl,
                            const local float *wl, uint lm, uint ln)
{
    /* Two k a trip, not the whole chunk: fully unrolled, AMD's scheduler
     * hoisted every local load of the chunk (gfx1100 spilled 283 registers
     * at 8 x 8, KC 16) and ptxas went past 128 registers (one group of
     * 256 an SM); two at a time keep 124 on sm_90 (8 x 8, KC 8: two
     * groups an SM) and spill on no target. */
#pragma unroll 2
    for (uint kk = 0; kk < OCLF_KC; kk++) {
        float4 b[OCLF_NB / 4];
#pragma unroll
        for (uint j4 = 0; j4 < OCLF_NB / 4; j4++)
            b[j4] = *(const local float4 *)(wl + kk * RT_LDN + (j4 * OCLF_WGN + ln) * 4);
#pragma unroll
        for (uint i4 = 0; i4 < OCLF_MB / 4; i4++) {
            const float4 a = *(const local float4 *)(xl + kk * RT_LDM + (i4 * OCLF_WGM + lm) * 4);
#pragma unroll
            for (uint j4 = 0; j4 < OCLF_NB / 4; j4++) {
                acc[4 * i4][j4] = fma((float4)(a.s0), b[j4], acc[4 * i4][j4]);
                acc[4 * i4 + 1][j4] = fma((float4)(a.s1), b[j4], acc[4 * i4 + 1][j4]);
                acc[4 * i4 + 2][j4] = fma((float4)(a.s2), b[j4], acc[4 * i4 + 2][j4]);
                acc[4 * i4 + 3][j4] = fma((float4)(a.s3), b[j4], acc[4 * i4 + 3][j4]);
            }
        }
    }
}

/* The epilogue on four accumulators of row r from column c, those inside y.
 * By value, so the accumulators never leave registers. */
static inline void rt_store(float4 v, uint r, uint c, uint m, uint n, EPI_ARGS)
{
    if (r >= m)
        return;
    if (c < n)
        lin_store(v.s0, r, c, EPI_PASS);
    if (c + 1 < n)
        lin_store(v.s1, r, c + 1, EPI_PASS);
    if (c + 2 < n)
        lin_store(v.s2, r, c + 2, EPI_PASS);
    if (c + 3 < n)
        lin_store(v.s3, r, c + 3, EPI_PASS);
}

kernel __attribute__((reqd_work_group_size(RT_WGS, 1, 1))) void linear_fused(LIN_ARGS)
{
    local float xl[2][OCLF_KC * RT_LDM] __attribute__((aligned(16)));
    local float wl[2][OCLF_KC * RT_LDN] __attribute__((aligned(16)));
    const uint lid = get_local_id(0), ln = lid % OCLF_WGN, lm = lid / OCLF_WGN;
    /* groups along M vary fastest: groups that run together share W */
    const uint ngm = (m + RT_TM - 1) / RT_TM, g = get_group_id(0);
    const uint tm0 = (g % ngm) * RT_TM, tn0 = (g / ngm) * RT_TN;
    float4 acc[OCLF_MB][OCLF_NB / 4];
#pragma unroll
    for (uint i = 0; i < OCLF_MB; i++)
#pragma unroll
        for (uint j4 = 0; j4 < OCLF_NB / 4; j4++)
            acc[i][j4] = (float4)(0.0f);
    floatv sx[RT_XPER], sw[RT_WPER];
    const uint chunks = (k + OCLF_KC - 1) / OCLF_KC;
    if (chunks) {
        rt_fetch(sx, sw, x, xo, xs, RT_WPASS, m, n, k, tm0, tn0, 0, lid);
        rt_put(sx, sw, xl[0], wl[0], lid);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint ch = 0; ch < chunks; ch++) {
        const uint cur = ch & 1u;
        const int more = ch + 1 < chunks;
        /* the next chunk's loads in flight during this one's products */
        if (more)
            rt_fetch(sx, sw, x, xo, xs, RT_WPASS, m, n, k, tm0, tn0, (ch + 1) * OCLF_KC, lid);
        rt_chunk(acc, xl[cur], wl[cur], lm, ln);
        /* the other buffer was last read before the previous barrier */
        if (more)
            rt_put(sx, sw, xl[cur ^ 1u], wl[cur ^ 1u], lid);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (uint i = 0; i < OCLF_MB; i++) {
        const uint r = tm0 + ((i / 4) * OCLF_WGM + lm) * 4 + i % 4;
#pragma unroll
        for (uint j4 = 0; j4 < OCLF_NB / 4; j4++)
            rt_store(acc[i][j4], r, tn0 + (j4 * OCLF_WGN + ln) * 4, m, n, EPI_PASS);
    }
}

#else
/* ---- staged: tiles of x and W through local memory ----------------------- */
/* x tile: TM rows of KC (+1: lanes reading different rows at one column hit
 * different banks). W tile, NK: TN rows of KC (+1); KN: KC rows of TN. Zeros
 * beyond K and outside the matrix, so every lane runs whole chunks. */
#if OCLF_QW
/* The staged tile's runs of a quantized W: QRUN weights from element c of a
 * row (c a multiple of QRUN), into dst. QRUN divides KC and every group, so
 * a run has one scale, read once where runs are whole groups of 32; for
 * Q4_0 such a run is a block, whose bytes hold both halves' nibbles and are
 * then read once. Past k (only INT8 per
 * channel has a K that is no multiple of the run): zeros. */
#if OCLF_KC % 32 == 0
#define QRUN 32
#elif OCLF_KC % 16 == 0
#define QRUN 16
#elif OCLF_KC % 8 == 0
#define QRUN 8
#else
#define QRUN 4
#endif
static inline void q_run(QROW_ARGS, uint c, uint k, local float *dst)
{
#if OCLF_QW == 1
    const float sc = QSC(sp, Q_GROUP(c));
    for (uint i = 0; i < QRUN; i++)
        dst[i] = c + i < k ? (float)(char)wp[c + i] * sc : 0.0f;
#elif OCLF_QW == 2
    const float sc = QSC(sp, Q_GROUP(c)), z = OCLF_QZ ? (float)zp[c / OCLF_QG] : 8.0f;
    for (uint i = 0; i < QRUN / 2; i++) {
        const uchar b = wp[(c >> 1) + i];
        dst[2 * i] = ((float)(b & 15) - z) * sc;
        dst[2 * i + 1] = ((float)(b >> 4) - z) * sc;
    }
#elif OCLF_QW == 3
    global const uchar *blk = wp + (c >> 5) * 34;
    const float d = q_block_d(blk);
    for (uint i = 0; i < QRUN; i++)
        dst[i] = (float)(char)blk[2 + (c & 31) + i] * d;
#else
    global const uchar *blk = wp + (c >> 5) * 18;
    const float d = q_block_d(blk);
#if QRUN == 32
    for (uint i = 0; i < 16; i++) {
        const uchar b = blk[2 + i];
        dst[i] = ((float)(b & 15) - 8.0f) * d;
        dst[16 + i] = ((float)(b >> 4) - 8.0f) * d;
    }
#else
    const uint j0 = c & 31;
    for (uint i = 0; i < QRUN; i++) {
        const uchar b = blk[2 + ((j0 + i) & 15)];
        dst[i] = ((float)(j0 + i < 16 ? b & 15 : b >> 4) - 8.0f) * d;
    }
#endif
#endif
}
#endif

#define XLS (OCLF_KC + 1)
#if !OCLF_WKN
#define WL_SIZE (TN * XLS)
#else
#define WL_SIZE (OCLF_KC * TN)
#endif
#if OCLF_KC % OCLF_VEC
#error "OCLF_KC must be a multiple of OCLF_VEC"
#endif
#define LOCAL_X(i) const local float *lx##i = xl + (lm * OCLF_MB + (i)) * XLS;
#define LDL(p) OCLF_CAT(vload, OCLF_VEC)(0, (p))
#if OCLF_VEC == 1
#undef LDL
#define LDL(p) (*(p))
#endif
kernel void linear_fused(LIN_ARGS)
{
    LIN_PLACE;
    local float xl[TM * XLS];
    local float wl[WL_SIZE];
    const uint wgs = OCLF_WGM * OCLF_WGN;
    const uint tm0 = gm * TM, tn0 = gn * TN;
    FOR_MN(DECL_A)
    FOR_M(LOCAL_X)
    for (uint c0 = 0; c0 < k; c0 += OCLF_KC) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint e = lid; e < TM * OCLF_KC; e += wgs) {
            const uint r = e / OCLF_KC, cc = e - r * OCLF_KC;
            float v = 0.0f;
            if (tm0 + r < m && c0 + cc < k) {
                v = LD(x, xo + (ulong)(tm0 + r) * xs + c0 + cc);
                v = PRO(float, v);
            }
            xl[r * XLS + cc] = v;
        }
#if !OCLF_WKN
#if OCLF_QW
        /* A run of QRUN weights of one row per work-item: its scale (and
         * zero point) read once, each byte once. */
        for (uint e = lid; e < TN * (OCLF_KC / QRUN); e += wgs) {
            const uint r = e / (OCLF_KC / QRUN), c = c0 + (e - r * (OCLF_KC / QRUN)) * QRUN;
            local float *dst = wl + r * XLS + (c - c0);
            if (tn0 + r < n && c < k) {
                const ulong row = tn0 + r;
                q_run(w + wo + row * ws, qs + qso + row * qss, qz + qzo + row * qzs, c, k, dst);
            } else {
                for (uint i = 0; i < QRUN; i++)
                    dst[i] = 0.0f;
            }
        }
#else
        for (uint e = lid; e < TN * OCLF_KC; e += wgs) {
            const uint r = e / OCLF_KC, cc = e - r * OCLF_KC;
            wl[r * XLS + cc] = tn0 + r < n && c0 + cc < k
                                   ? LDW(w, wo + (ulong)(tn0 + r) * ws + c0 + cc)
                                   : 0.0f;
        }
#endif
#else
        for (uint e = lid; e < OCLF_KC * TN; e += wgs) {
            const uint r = e / TN, cc = e - r * TN;
            wl[e] = c0 + r < k && tn0 + cc < n ? LD(w, wo + (ulong)(c0 + r) * ws + tn0 + cc)
                                                 : 0.0f;
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
#if !OCLF_WKN
#define LOCAL_W(j) const local float *lw##j = wl + ((j) * NSTEP + ln) * XLS;
#define LOAD_XL(i) const floatv vx##i = LDL(lx##i + c);
#define LOAD_WL(j) const floatv vw##j = LDL(lw##j + c);
        FOR_N(LOCAL_W)
        for (uint c = 0; c < OCLF_KC; c += OCLF_VEC) {
            FOR_M(LOAD_XL)
            FOR_N(LOAD_WL)
            FOR_MN(FMA_V)
        }
#else
#define LOAD_XLK(i) const float sx##i = lx##i[c];
#define LOAD_WLK(j) const floatv vw##j = LDL(wl + c * TN + (j) * NSTEP + ln * CW);
        for (uint c = 0; c < OCLF_KC; c++) {
            FOR_M(LOAD_XLK)
            FOR_N(LOAD_WLK)
            FOR_MN(FMA_K)
        }
#endif
    }
#if !OCLF_WKN
    FOR_MN(SUM)
    FOR_MN(STORE_S)
#else
    FOR_MN(STORE_V)
#endif
}
#endif /* OCLF_MV / OCLF_STAGE */

#else /* OCLF_UNFUSED */

/* ---- unfused building blocks: one element per work-item ----------------- */
/* Each works on a float matrix c (offset co, row stride cs): the GEMM's
 * output, y itself for f32 or a temporary. */
#define ELEM_SETUP                                                             \
    const ulong gid = get_global_id(0);                                        \
    if (gid >= (ulong)rows * cols)                                             \
        return;                                                                \
    const uint r = (uint)(gid / cols), j = (uint)(gid % cols);                 \
    global float *cp = cf + co + (ulong)r * cs + j

/* out [rows, cols] packed f32 = act(in), widened from storage. */
kernel void lin_prep(global const stor_t *in, ulong io, ulong is, global float *out, uint rows,
                     uint cols, uint act)
{
    const ulong gid = get_global_id(0);
    if (gid >= (ulong)rows * cols)
        return;
    const uint r = (uint)(gid / cols), j = (uint)(gid % cols);
    out[gid] = lin_act_run(LD(in, io + (ulong)r * is + j), act);
}

kernel void lin_bias(global float *cf, ulong co, ulong cs, uint rows, uint cols,
                     global const stor_t *bias, ulong bo)
{
    ELEM_SETUP;
    *cp += LD(bias, bo + j);
}

kernel void lin_res(global float *cf, ulong co, ulong cs, uint rows, uint cols,
                    global const stor_t *res, ulong ro, ulong rs, float beta)
{
    ELEM_SETUP;
    *cp += beta * LD(res, ro + (ulong)r * rs + j);
}

kernel void lin_act(global float *cf, ulong co, ulong cs, uint rows, uint cols, uint act)
{
    ELEM_SETUP;
    *cp = lin_act_run(*cp, act);
}

#if OCLF_QW
/* out [rows, cols] packed f32: rows of the quantized W dequantized (the
 * unfused path's weight, a tile of N at a time). */
kernel void lin_dequant(global const wstor_t *w, ulong wo, ulong ws, QARGS, global float *out,
                        uint rows, uint cols)
{
    const ulong gid = get_global_id(0);
    if (gid >= (ulong)rows * cols)
        return;
    /* the remainder as a product: a division and a remainder of the same
     * operands become a pair with a `freeze`, which oclgrind's
     * uninitialized-value check cannot run */
    const ulong r = gid / cols;
    const uint c = (uint)(gid - r * cols);
    out[gid] = q_ld(w + wo + r * ws, qs + qso + r * qss, qz + qzo + r * qzs, c);
}

/* out [rows, k] in the call's dtype: rows of the quantized W dequantized,
 * Q_SPAN weights a work-item in vectors of OCLF_VEC (the fused path's PRE
 * strategy: a tile of W dequantized once, then the dense tiled kernel over
 * it). A span of 16 weights a work-item ran at a third of this speed. */
#define Q_SPAN 256
kernel void lin_dequant_w(global const wstor_t *w, ulong wo, ulong ws, QARGS, global stor_t *out,
                          uint rows, uint k)
{
    const uint spans = (k + Q_SPAN - 1) / Q_SPAN;
    const ulong gid = get_global_id(0);
    if (gid >= (ulong)rows * spans)
        return;
    const ulong r = gid / spans;
    const uint c0 = (uint)(gid - r * spans) * Q_SPAN; /* not %: see lin_dequant */
    const uint end = min(c0 + Q_SPAN, k);
    global const wstor_t *wp = w + wo + r * ws;
    global const qsc_t *sp = qs + qso + r * qss;
    global const uchar *zp = qz + qzo + r * qzs;
    global stor_t *o = out + r * k;
    uint c = c0;
    for (; c + OCLF_VEC <= end; c += OCLF_VEC)
        STV(o, c, q_ldv(wp, sp, zp, c));
    for (; c < end; c++)
        ST(o, c, q_ld(wp, sp, zp, c));
}

#if OCLF_QW >= 3
/* One GGUF block per work-item into separate arrays: d to the f16 scale
 * [rows, blocks] as its bits; Q8_0's 32 bytes as they are, Q4_0's nibbles
 * in INT4's order (weight 2i in the low nibble of byte i). */
kernel void lin_qconvert(global const uchar *w, ulong wo, ulong ws, global uchar *q, ulong qo,
                         ulong qrs, global ushort *sc, ulong so, ulong ss, uint rows, uint blocks)
{
    const ulong gid = get_global_id(0);
    if (gid >= (ulong)rows * blocks)
        return;
    const ulong r = gid / blocks;
    const uint b = (uint)(gid - r * blocks); /* not %: see lin_dequant */
    global const uchar *blk = w + wo + r * ws + (ulong)b * QBLOCK_BYTES;
    sc[so + r * ss + b] = (ushort)(blk[0] | (blk[1] << 8));
#if OCLF_QW == 3
    global uchar *dst = q + qo + r * qrs + (ulong)b * 32;
    for (uint i = 0; i < 32; i++)
        dst[i] = blk[2 + i];
#else
    global uchar *dst = q + qo + r * qrs + (ulong)b * 16;
    for (uint i = 0; i < 16; i++) {
        /* weights 2i and 2i + 1 of the block: nibble j of GGUF is byte j % 16,
         * low for j < 16 */
        const uint e0 = 2 * i, e1 = 2 * i + 1;
        const uint n0 = e0 < 16 ? blk[2 + e0] & 15u : blk[2 + e0 - 16] >> 4;
        const uint n1 = e1 < 16 ? blk[2 + e1] & 15u : blk[2 + e1 - 16] >> 4;
        dst[i] = (uchar)(n0 | n1 << 4);
    }
#endif
}
#endif
#endif /* OCLF_QW */

/* y = c rounded to storage once. */
kernel void lin_store(global float *cf, ulong co, ulong cs, uint rows, uint cols,
                      global stor_t *y, ulong yo, ulong ys)
{
    ELEM_SETUP;
    ST(y, yo + (ulong)r * ys + j, *cp);
}
#endif /* OCLF_UNFUSED */
