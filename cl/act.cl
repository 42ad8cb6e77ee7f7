/*
 * Activation-and-multiply: out[t, i] = act(x) * y.
 *
 * Fused kernel: act_and_mul. Unfused building blocks: act_rows (activation
 * into an fp32 temporary) and mul_rows (temporary times the other half).
 *
 * The activation is a run-time argument rather than a -D option: one program
 * per (dtype, structure) serves all five, and the switch sits outside the
 * loops, so each loop is specialised and the branch costs nothing per element.
 *
 * Structures (OCLF_LAYOUT):
 *   0: each work-item streams one chunk of a row (`chunk` outputs, a
 *      multiple of VEC; `nsplit` chunks per row). A row is usually one
 *      chunk; the host splits rows only when there are too few of them to
 *      occupy the device (decode batches of a handful of tokens).
 *   1: a work-group per chunk of a row (a row, unless it is split as
 *      above, so a decode batch still spreads over the compute units),
 *      consecutive work-items on consecutive vectors.
 * Neither needs a barrier: every output depends on two inputs only.
 */

/* Every function here is OCLF_INLINE (cl/common.h), as the macros they
 * replaced were inlined: the loops are written once and called once per
 * activation with the activation a constant, which specialises each copy
 * only once it is inlined. */

/* Must match oclf_act in oclfuse.h. */
#define ACT_SILU 0
#define ACT_GELU 1
#define ACT_GELU_TANH 2
#define ACT_FATRELU 3
#define ACT_SWIGLU_OAI 4

/* This work-item's share of a row: outputs [begin, end) of row `row`, its
 * vectors from `lane` on, `nlanes` apart. */
typedef struct {
    ulong row;
    uint begin, end, lane, nlanes;
} act_share;

/* The share of the calling work-item; 0 for LAYOUT 0's work-items past the
 * last chunk (the grid is rounded up to the work-group size). */
OCLF_INLINE int act_share_get(ulong rows, uint d, uint chunk, uint nsplit, act_share *s)
{
#if OCLF_LAYOUT == 0
    const ulong gid = get_global_id(0);
    if (gid >= rows * nsplit)
        return 0;
    s->row = gid / nsplit;
    s->begin = (uint)(gid % nsplit) * chunk;
    s->lane = 0;
    s->nlanes = 1;
#elif OCLF_LAYOUT == 1
    (void)rows;
    const ulong grp = get_group_id(0);
    s->row = grp / nsplit;
    s->begin = (uint)(grp % nsplit) * chunk;
    s->lane = get_local_id(0);
    s->nlanes = OCLF_WGS;
#else
#error "OCLF_LAYOUT must be 0 or 1"
#endif
    s->end = min(d, s->begin + chunk);
    return 1;
}

/* erf_float / erf_floatv: cl/common.h. */

/* exp for the sigmoid-shaped activations (exp_float / exp_floatv): 2^k
 * times a degree-7 polynomial in r = x - k ln2 (|r| <= ln2/2; Cephes'
 * expf coefficients, ln2 split in two so r is exact), about 1 ulp. The
 * library exp of the CPU device here added range checks and a split
 * scaling that made SiLU's exp half again as many vector instructions,
 * which the 16-bit kernels (instruction-bound) paid in full. x is clamped
 * to [-88, 89] first, so 2^k is built from exponent bits alone: below, the
 * result is 0 as exp's would be (the scale's exponent field is 0); above
 * 88.38 it is +inf (k = 128 makes the field 255) where exp gives +inf from
 * 88.72 on, which no activation here can tell apart (a / (1 + e) is -0 or
 * NaN alike). A NaN becomes -88, and the activation stays NaN through its
 * numerator. */
#define ACT_EXP_BODY(T, IT, AS)                                                \
    {                                                                          \
        const T xc = fmin(fmax(x, -88.0f), 89.0f);                             \
        /* k = rint(x / ln2) by adding 1.5 * 2^23 (rint itself was a long    \
         * software sequence here); t's low bits hold k as an integer */      \
        const T t = fma(xc, (T)(1.44269504088896341f), (T)(12582912.0f));      \
        const T k = t - 12582912.0f;                                           \
        T r = fma(k, (T)(-0.693359375f), xc);                                  \
        r = fma(k, (T)(2.12194440e-4f), r);                                    \
        T p = (T)(1.9875691500e-4f);                                           \
        p = fma(p, r, (T)(1.3981999507e-3f));                                  \
        p = fma(p, r, (T)(8.3334519073e-3f));                                  \
        p = fma(p, r, (T)(4.1665795894e-2f));                                  \
        p = fma(p, r, (T)(1.6666665459e-1f));                                  \
        p = fma(p, r, (T)(5.0000001201e-1f));                                  \
        p = fma(p, r * r, r) + 1.0f;                                           \
        /* 2^k: k + 127 in the exponent field (as_int(t) is 0x4b400000 + k) */ \
        return p * AS((OCLF_CAT(as_, IT)(t) + (127 - 0x4b400000)) << 23);      \
    }
OCLF_INLINE float exp_float(float x) ACT_EXP_BODY(float, int, as_float)
#if OCLF_VEC > 1
OCLF_INLINE floatv exp_floatv(floatv x)
    ACT_EXP_BODY(floatv, OCLF_CAT(int, OCLF_VEC), OCLF_CAT(as_float, OCLF_VEC))
#else
#define exp_floatv exp_float
#endif

/* ACT_HALVES 1: the backward kernel works each vector in halves (floath,
 * half a vector; see grad_vec and oai_backward_span). Written over the whole
 * vector, each step of the arithmetic ran across all its lanes before the
 * next, so on a GPU, where a vector is its lanes' scalar registers, every
 * lane's intermediates were live at once: GELU's and SWIGLU_OAI's gradients
 * took 76 registers on sm_90 in f16 and 78 in bf16 (24 warps an SM); in
 * halves 56 (36 warps). That is structure 1, where throughput comes from
 * many resident work-items, which registers bound. Structure 0 keeps the
 * whole vector: there a CPU's work-item streams its chunk with vectors as
 * wide as its SIMD registers, and in halves the 16-bit backward took 1.2
 * (SiLU) to 1.9 (SWIGLU_OAI) times as long on the CPU device here. */
#if OCLF_LAYOUT == 1 && OCLF_VEC > 1
#define ACT_HALVES 1
#else
#define ACT_HALVES 0
#endif
#if OCLF_VEC == 2
typedef float floath;
#elif OCLF_VEC > 2
#if OCLF_VEC == 4
#define ACT_HALF_VEC 2
#elif OCLF_VEC == 8
#define ACT_HALF_VEC 4
#else
#define ACT_HALF_VEC 8
#endif
typedef OCLF_CAT(float, ACT_HALF_VEC) floath;
OCLF_INLINE floath exp_floath(floath x)
    ACT_EXP_BODY(floath, OCLF_CAT(int, ACT_HALF_VEC), OCLF_CAT(as_float, ACT_HALF_VEC))
OCLF_INLINE floath erf_floath(floath a) OCLF_ERF_BODY(floath)
#endif

/* The activations and their gradients, each written once and defined for
 * float (suffix _float), floatv (_floatv) and floath (_floath) operands by
 * ACT_FUNCTIONS(T, S): T the type, S the suffix. p0 is the FATRELU
 * threshold or SWIGLU_OAI's alpha, p1 SWIGLU_OAI's limit.
 *
 * act_S(act, a, p0): SILU, GELU, GELU_TANH or FATRELU of a; `act` is a
 * constant at every call, so the switch folds away and each loop is
 * specialised. GELU_TANH as a sigmoid: 0.5 a (1 + tanh z) == a sigmoid(2z)
 * has no 1 + tanh to cancel where tanh saturates short of -1 far below
 * zero.
 *
 * SWIGLU_OAI's halves, comparisons rather than fmin/clamp so that a NaN
 * passes through as in vLLM's kernel: oai_gate_S (the clamped gate),
 * oai_up_S (the clamped up), oai_glu_S(g, alpha) = g sigmoid(alpha g)
 * written as g / (1 + exp(-(g alpha))).
 *
 * Gradients: grad_S(act, a, p0, &g) gives act(a) and sets g = act'(a).
 * sigmoid_S(e, &m): s = 1 / (1 + e) for e = exp(-z), and m = 1 - s = e s;
 * 1 - s itself cancels where s is near 1 (its error was most of
 * GELU-tanh's f32 derivative error), e s overflows where e does, and there
 * s is below a half and 1 - s exact enough. GELU's Phi(a) + a phi(a):
 * exp_float sends -a^2/2 below -88 to 0, as it should. GELU_TANH: with
 * s = sigmoid(2u), u = k (a + c a^3), act = a s and
 * act' = s + 2 k a s (1 - s) (1 + 3 c a^2); s (1 - s) is 0 in fp32 well
 * before |a| = 16, so the polynomial factor takes a clamped there (its a^2
 * would otherwise overflow and turn 0 x inf into NaN).
 *
 * grad_oai_gate_S(gr, alpha, limit, &g): glu(g') of the raw gate gr and
 * g = d glu / d gr, with g' = min(gr, limit): 0 above the limit (the clamp
 * passes no gradient there; at the limit it does, as a clamp's gradient
 * does), written so that a NaN gate stays NaN. oai_up_pass_S: the up
 * clamp's gradient, 1 inside [-limit, limit], 0 outside, NaN for a NaN up
 * (inside no bound: its gradient is NaN, as its output is).
 * grad_oai_S(gr, u, go, alpha, limit, &du): both gradients of raw gates gr
 * and raw ups u given dout go: returns the gate's, sets du the up's. */
#define ACT_FUNCTIONS(T, S)                                                    \
    OCLF_INLINE T silu_##S(T a) { return a / (1.0f + exp_##S(-a)); }           \
    OCLF_INLINE T gelu_##S(T a)                                                \
    {                                                                          \
        return 0.5f * a * (1.0f + erf_##S(a * 0.70710678118654752f));          \
    }                                                                          \
    OCLF_INLINE T gelu_tanh_##S(T a)                                           \
    {                                                                          \
        return a / (1.0f + exp_##S(-1.5957691216057308f * (a + 0.044715f * a * a * a))); \
    }                                                                          \
    OCLF_INLINE T fatrelu_##S(T a, float threshold)                            \
    {                                                                          \
        return a > threshold ? a : (T)(0.0f);                                  \
    }                                                                          \
    OCLF_INLINE T act_##S(uint act, T a, float p0)                             \
    {                                                                          \
        switch (act) {                                                         \
        case ACT_SILU: return silu_##S(a);                                     \
        case ACT_GELU: return gelu_##S(a);                                     \
        case ACT_GELU_TANH: return gelu_tanh_##S(a);                           \
        default: return fatrelu_##S(a, p0);                                    \
        }                                                                      \
    }                                                                          \
    OCLF_INLINE T oai_glu_##S(T g, float alpha)                                \
    {                                                                          \
        return g / (1.0f + exp_##S(-(g * alpha)));                             \
    }                                                                          \
    OCLF_INLINE T oai_gate_##S(T g, float limit) { return g > limit ? (T)(limit) : g; } \
    OCLF_INLINE T oai_up_##S(T u, float limit)                                 \
    {                                                                          \
        return u > limit ? (T)(limit) : u < -limit ? (T)(-limit) : u;          \
    }                                                                          \
    OCLF_INLINE T sigmoid_##S(T e, T *m)                                       \
    {                                                                          \
        const T s = 1.0f / (1.0f + e);                                         \
        *m = e < 1.0f ? e * s : 1.0f - s;                                      \
        return s;                                                              \
    }                                                                          \
    OCLF_INLINE T grad_silu_##S(T a, T *g)                                     \
    {                                                                          \
        T m;                                                                   \
        const T s = sigmoid_##S(exp_##S(-a), &m);                              \
        const T f = a * s;                                                     \
        *g = s + f * m;                                                        \
        return f;                                                              \
    }                                                                          \
    OCLF_INLINE T grad_gelu_##S(T a, T *g)                                     \
    {                                                                          \
        const T p = 0.5f * (1.0f + erf_##S(a * 0.70710678118654752f));         \
        const T f = a * p;                                                     \
        *g = p + a * (0.39894228040143268f * exp_##S(-0.5f * a * a));          \
        return f;                                                              \
    }                                                                          \
    OCLF_INLINE T grad_gelu_tanh_##S(T a, T *g)                                \
    {                                                                          \
        T m;                                                                   \
        const T s =                                                            \
            sigmoid_##S(exp_##S(-1.5957691216057308f * (a + 0.044715f * a * a * a)), &m); \
        const T c = fmin(fmax(a, -16.0f), 16.0f);                              \
        const T f = a * s;                                                     \
        *g = s + (1.5957691216057308f * c) * (s * m) * (1.0f + 0.134145f * c * c); \
        return f;                                                              \
    }                                                                          \
    OCLF_INLINE T grad_fatrelu_##S(T a, float threshold, T *g)                 \
    {                                                                          \
        const T f = a > threshold ? a : (T)(0.0f);                             \
        *g = a > threshold ? (T)(1.0f) : (T)(0.0f);                            \
        return f;                                                              \
    }                                                                          \
    OCLF_INLINE T grad_##S(uint act, T a, float p0, T *g)                      \
    {                                                                          \
        switch (act) {                                                         \
        case ACT_SILU: return grad_silu_##S(a, g);                             \
        case ACT_GELU: return grad_gelu_##S(a, g);                             \
        case ACT_GELU_TANH: return grad_gelu_tanh_##S(a, g);                   \
        default: return grad_fatrelu_##S(a, p0, g);                            \
        }                                                                      \
    }                                                                          \
    OCLF_INLINE T grad_oai_gate_##S(T gr, float alpha, float limit, T *g)      \
    {                                                                          \
        const T gc = oai_gate_##S(gr, limit);                                  \
        T m;                                                                   \
        const T s = sigmoid_##S(exp_##S(-(gc * alpha)), &m);                   \
        const T f = gc * s;                                                    \
        *g = gr > limit ? (T)(0.0f) : s + alpha * f * m;                       \
        return f;                                                              \
    }                                                                          \
    OCLF_INLINE T oai_up_pass_##S(T u, float limit)                            \
    {                                                                          \
        return u > limit || u < -limit ? (T)(0.0f) : u == u ? (T)(1.0f) : (T)NAN; \
    }                                                                          \
    OCLF_INLINE T grad_oai_##S(T gr, T u, T go, float alpha, float limit, T *du) \
    {                                                                          \
        T g;                                                                   \
        const T f = grad_oai_gate_##S(gr, alpha, limit, &g);                   \
        *du = go * f * oai_up_pass_##S(u, limit);                              \
        return go * (oai_up_##S(u, limit) + 1.0f) * g;                         \
    }
ACT_FUNCTIONS(float, float)
ACT_FUNCTIONS(floatv, floatv)
#if OCLF_VEC == 2
#define grad_floath grad_float
#define grad_oai_floath grad_oai_float
#elif OCLF_VEC > 2
ACT_FUNCTIONS(floath, floath)
#endif

/* Interleaved rows: two vectors lo = in[2i .. 2i+VEC), hi = the next VEC
 * give VEC gates (the even elements) and VEC ups (the odd elements);
 * zip_lo / zip_hi put VEC gate and VEC up gradients back as the
 * interleaved pairs (dg0, du0, dg1, du1, ...), the low VEC, then the high;
 * zip_pairs(x, y) puts VEC/2 gate gradients x and VEC/2 up gradients y back
 * as one vector of such pairs. */
OCLF_INLINE floatv evens(floatv lo, floatv hi)
{
#if OCLF_VEC == 1
    (void)hi;
    return lo;
#else
    return (floatv)(lo.even, hi.even);
#endif
}
OCLF_INLINE floatv odds(floatv lo, floatv hi)
{
#if OCLF_VEC == 1
    (void)lo;
    return hi;
#else
    return (floatv)(lo.odd, hi.odd);
#endif
}
OCLF_INLINE floatv zip_lo(floatv x, floatv y)
{
#if OCLF_VEC == 1
    (void)y;
    return x;
#elif OCLF_VEC == 2
    return (floatv)(x.s0, y.s0);
#elif OCLF_VEC == 4
    return ((floatv)(x.lo, y.lo)).s0213;
#elif OCLF_VEC == 8
    return ((floatv)(x.lo, y.lo)).s04152637;
#else
    return ((floatv)(x.lo, y.lo)).s08192a3b4c5d6e7f;
#endif
}
OCLF_INLINE floatv zip_hi(floatv x, floatv y)
{
#if OCLF_VEC == 1
    (void)x;
    return y;
#elif OCLF_VEC == 2
    return (floatv)(x.s1, y.s1);
#elif OCLF_VEC == 4
    return ((floatv)(x.hi, y.hi)).s0213;
#elif OCLF_VEC == 8
    return ((floatv)(x.hi, y.hi)).s04152637;
#else
    return ((floatv)(x.hi, y.hi)).s08192a3b4c5d6e7f;
#endif
}

#if OCLF_VEC > 1
OCLF_INLINE floatv zip_pairs(floath x, floath y)
{
#if OCLF_VEC == 2
    return (floatv)(x, y);
#elif OCLF_VEC == 4
    return ((floatv)(x, y)).s0213;
#elif OCLF_VEC == 8
    return ((floatv)(x, y)).s04152637;
#else
    return ((floatv)(x, y)).s08192a3b4c5d6e7f;
#endif
}
#endif

/* VEC floats of an unfused fp32 temporary (packed rows of d). In the
 * aligned build d is a multiple of VEC, so every vector of a temporary is
 * naturally aligned: one 16-byte access a float4, where the element-aligned
 * vload splits into 4-byte ones on GPUs. */
OCLF_INLINE floatv ldv_tmp(global const float *p, uint i)
{
#if OCLF_ALIGNED && OCLF_VEC > 1
    return *(global const floatv *)(p + i);
#else
    return LDV_F(p, i);
#endif
}
OCLF_INLINE void stv_tmp(global float *p, uint i, floatv v)
{
#if OCLF_ALIGNED && OCLF_VEC > 1
    *(global floatv *)(p + i) = v;
#else
    STV_F(p, i, v);
#endif
}

/* A share's scalar tail. The aligned build has none: the host takes it only
 * where d is a multiple of OCLF_VEC, and chunks start on vector boundaries,
 * so every share ends on one. Left out there, its element accesses leave
 * the kernel's code too (a 2-byte store the compiler kept cost sm_90's
 * model a tenth of f16 act_and_mul's stores). */
#if OCLF_ALIGNED
#define ACT_TAIL(i, a, b) for (uint i = (b); i < (b); i++)
#else
#define ACT_TAIL(i, a, b) FOR_TAIL_IN(i, a, b)
#endif

/* The loops over a share: each takes the activation as a constant (see
 * act_S), so the kernels' switches give one specialised loop per case. */

/* out = act(x) * y */
OCLF_INLINE void fused_span(uint act, float p0, global const stor_t *xp,
                               global const stor_t *yp, global stor_t *op, act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) {
        /* y loaded after the activation's arithmetic, not before it: a
         * bf16 vector of 8 then no longer stays live through GELU's erf,
         * which took 66 registers on sm_90 (28 warps an SM), 59 now */
        const floatv f = act_floatv(act, LDV(xp, i), p0);
        STV(op, i, f * LDV(yp, i));
    }
    ACT_TAIL(i, s.begin, s.end) {
        const float a = LD(xp, i), b = LD(yp, i);
        ST(op, i, act_float(act, a, p0) * b);
    }
}

/* SWIGLU_OAI: out = (clamped up + 1) * glu(clamped gate) of the
 * interleaved row ir. */
OCLF_INLINE void oai_fused_span(float alpha, float limit, global const stor_t *ir,
                                   global stor_t *op, act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) {
        const floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
        const floatv g = oai_gate_floatv(evens(lo, hi), limit);
        const floatv u = oai_up_floatv(odds(lo, hi), limit);
        STV(op, i, (u + 1.0f) * oai_glu_floatv(g, alpha));
    }
    ACT_TAIL(i, s.begin, s.end) {
        const float g = oai_gate_float(LD(ir, 2 * i), limit);
        const float u = oai_up_float(LD(ir, 2 * i + 1), limit);
        ST(op, i, (u + 1.0f) * oai_glu_float(g, alpha));
    }
}

/* tmp = act(x) */
OCLF_INLINE void act_span(uint act, float p0, global const stor_t *xp, global float *tp,
                             act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) stv_tmp(tp, i, act_floatv(act, LDV(xp, i), p0));
    ACT_TAIL(i, s.begin, s.end) tp[i] = act_float(act, LD(xp, i), p0);
}

/* SWIGLU_OAI: tmp = glu(clamped gate) */
OCLF_INLINE void oai_act_span(float alpha, float limit, global const stor_t *ir,
                                 global float *tp, act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) {
        const floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
        stv_tmp(tp, i, oai_glu_floatv(oai_gate_floatv(evens(lo, hi), limit), alpha));
    }
    ACT_TAIL(i, s.begin, s.end)
        tp[i] = oai_glu_float(oai_gate_float(LD(ir, 2 * i), limit), alpha);
}

kernel void act_and_mul(global const stor_t *in, ulong io, ulong is,
                        global stor_t *out, ulong oo, ulong os,
                        ulong rows, uint d, uint act, uint second, float p0, float p1,
                        uint chunk, uint nsplit)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *xp = ir + (second ? d : 0); /* activated half */
    global const stor_t *yp = ir + (second ? 0 : d); /* multiplied half */
    global stor_t *op = out + oo + s.row * os;
    switch (act) {
    case ACT_SILU: fused_span(ACT_SILU, p0, xp, yp, op, s); break;
    case ACT_GELU: fused_span(ACT_GELU, p0, xp, yp, op, s); break;
    case ACT_GELU_TANH: fused_span(ACT_GELU_TANH, p0, xp, yp, op, s); break;
    case ACT_FATRELU: fused_span(ACT_FATRELU, p0, xp, yp, op, s); break;
    default: oai_fused_span(p0, p1, ir, op, s); break;
    }
}

/* ---- unfused building blocks ------------------------------------------- */

/* tmp[row, i] = act(x) in fp32 (SWIGLU_OAI: the glu term of the clamped
 * gate). `tmp` is packed rows x d. */
kernel void act_rows(global const stor_t *in, ulong io, ulong is, global float *tmp,
                     ulong rows, uint d, uint act, uint second, float p0, float p1,
                     uint chunk, uint nsplit)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *xp = ir + (second ? d : 0);
    global float *tp = tmp + s.row * d;
    switch (act) {
    case ACT_SILU: act_span(ACT_SILU, p0, xp, tp, s); break;
    case ACT_GELU: act_span(ACT_GELU, p0, xp, tp, s); break;
    case ACT_GELU_TANH: act_span(ACT_GELU_TANH, p0, xp, tp, s); break;
    case ACT_FATRELU: act_span(ACT_FATRELU, p0, xp, tp, s); break;
    default: oai_act_span(p0, p1, ir, tp, s); break;
    }
}

/* out = tmp * y (SWIGLU_OAI: (clamped up + 1) * tmp). */
kernel void mul_rows(global const stor_t *in, ulong io, ulong is, global const float *tmp,
                     global stor_t *out, ulong oo, ulong os,
                     ulong rows, uint d, uint act, uint second, float p0, float p1,
                     uint chunk, uint nsplit)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    const uint lane = s.lane, nlanes = s.nlanes;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *yp = ir + (second ? 0 : d);
    global const float *tp = tmp + s.row * d;
    global stor_t *op = out + oo + s.row * os;
    if (act != ACT_SWIGLU_OAI) {
        FOR_VEC_IN(i, s.begin, s.end) STV(op, i, ldv_tmp(tp, i) * LDV(yp, i));
        ACT_TAIL(i, s.begin, s.end) ST(op, i, tp[i] * LD(yp, i));
        return;
    }
    FOR_VEC_IN(i, s.begin, s.end) {
        const floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
        const floatv u = oai_up_floatv(odds(lo, hi), p1);
        STV(op, i, (u + 1.0f) * ldv_tmp(tp, i));
    }
    ACT_TAIL(i, s.begin, s.end) {
        const float u = oai_up_float(LD(ir, 2 * i + 1), p1);
        ST(op, i, (u + 1.0f) * tp[i]);
    }
}

/* ---- backward ------------------------------------------------------------
 * Given dout = dL/dout, the gradients of the forward's two halves:
 *   d(activated half) = dout * y * act'(x),   d(multiplied half) = dout * act(x).
 * act(x) is recomputed in fp32 from the stored input rather than kept from
 * the forward: reading x again costs less than storing and rereading an
 * activation the size of the output.
 *
 * Fused kernel: act_and_mul_backward. Unfused building blocks:
 * act_grad_rows (act and act' into two fp32 temporaries), then grad_x_rows
 * (the activated half's gradient), then grad_y_rows (the multiplied half's).
 * That order keeps in place right: grad_x_rows overwrites x but reads y,
 * and grad_y_rows reads only the temporaries and dout. In the fused kernel
 * each element's inputs are loaded before its gradients are stored, by the
 * same work-item, so din may be exactly in.
 *
 * The aligned build serves the backward as it does the forward (every
 * operand's offset and row stride, and d, multiples of VEC): its 16-bit
 * vectors move as 16-byte words (LDV, STV in cl/common.h) and its fp32
 * temporaries as aligned vectors (ldv_tmp, stv_tmp). */

/* act(a), and act'(a) in g, of a vector (in halves where ACT_HALVES). */
OCLF_INLINE floatv grad_vec(uint act, floatv a, float p0, floatv *g)
{
#if ACT_HALVES
    floath glo, ghi;
    const floath flo = grad_floath(act, a.lo, p0, &glo);
    const floath fhi = grad_floath(act, a.hi, p0, &ghi);
    *g = (floatv)(glo, ghi);
    return (floatv)(flo, fhi);
#else
    return grad_floatv(act, a, p0, g);
#endif
}

/* dx = dout * y * act'(x), dy = dout * act(x) */
OCLF_INLINE void backward_span(uint act, float p0, global const stor_t *xp,
                                  global const stor_t *yp, global const stor_t *gp,
                                  global stor_t *dxp, global stor_t *dyp, act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) {
        floatv g;
        const floatv f = grad_vec(act, LDV(xp, i), p0, &g);
        const floatv b = LDV(yp, i), go = LDV(gp, i);
        STV(dxp, i, go * b * g);
        STV(dyp, i, go * f);
    }
    ACT_TAIL(i, s.begin, s.end) {
        const float a = LD(xp, i), b = LD(yp, i), go = LD(gp, i);
        float g;
        const float f = grad_float(act, a, p0, &g);
        ST(dxp, i, go * b * g);
        ST(dyp, i, go * f);
    }
}

/* SWIGLU_OAI: the gate and up gradients of the interleaved row ir into the
 * interleaved row dr. Each of a position's two vectors holds VEC/2 whole
 * (gate, up) pairs, and its gradients are the same positions of dr: with
 * ACT_HALVES each is worked on its own. Both are loaded before either is
 * stored, as dr may be ir. */
OCLF_INLINE void oai_backward_span(float alpha, float limit, global const stor_t *ir,
                                      global const stor_t *gp, global stor_t *dr, act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) {
        const floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC), go = LDV(gp, i);
#if !ACT_HALVES
        floatv du;
        const floatv dg = grad_oai_floatv(evens(lo, hi), odds(lo, hi), go, alpha, limit, &du);
        STV(dr, 2 * i, zip_lo(dg, du));
        STV(dr, 2 * i + OCLF_VEC, zip_hi(dg, du));
#else
        floath dulo, duhi;
        const floath dglo = grad_oai_floath(lo.even, lo.odd, go.lo, alpha, limit, &dulo);
        const floath dghi = grad_oai_floath(hi.even, hi.odd, go.hi, alpha, limit, &duhi);
        STV(dr, 2 * i, zip_pairs(dglo, dulo));
        STV(dr, 2 * i + OCLF_VEC, zip_pairs(dghi, duhi));
#endif
    }
    ACT_TAIL(i, s.begin, s.end) {
        float du;
        const float dg = grad_oai_float(LD(ir, 2 * i), LD(ir, 2 * i + 1), LD(gp, i), alpha,
                                        limit, &du);
        ST(dr, 2 * i, dg);
        ST(dr, 2 * i + 1, du);
    }
}

/* tmp = act(x), tmpd = act'(x) */
OCLF_INLINE void act_grad_span(uint act, float p0, global const stor_t *xp,
                                  global float *tp, global float *tdp, act_share s)
{
    const uint lane = s.lane, nlanes = s.nlanes;
    FOR_VEC_IN(i, s.begin, s.end) {
        floatv g;
        const floatv f = grad_floatv(act, LDV(xp, i), p0, &g);
        stv_tmp(tp, i, f);
        stv_tmp(tdp, i, g);
    }
    ACT_TAIL(i, s.begin, s.end) {
        float g;
        const float f = grad_float(act, LD(xp, i), p0, &g);
        tp[i] = f;
        tdp[i] = g;
    }
}

#define BACKWARD_ARGS                                                          \
    global const stor_t *in, ulong io, ulong is, global const stor_t *dout, ulong go_, \
        ulong gs, global stor_t *din, ulong dio, ulong dis, ulong rows, uint d, uint act,  \
        uint second, float p0, float p1, uint chunk, uint nsplit

/* `in` and `din` are not restrict: they may be the same rows. */
kernel void act_and_mul_backward(BACKWARD_ARGS)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *gp = dout + go_ + s.row * gs;
    global stor_t *dr = din + dio + s.row * dis;
    global const stor_t *xp = ir + (second ? d : 0);
    global const stor_t *yp = ir + (second ? 0 : d);
    global stor_t *dxp = dr + (second ? d : 0);
    global stor_t *dyp = dr + (second ? 0 : d);
    switch (act) {
    case ACT_SILU: backward_span(ACT_SILU, p0, xp, yp, gp, dxp, dyp, s); break;
    case ACT_GELU: backward_span(ACT_GELU, p0, xp, yp, gp, dxp, dyp, s); break;
    case ACT_GELU_TANH: backward_span(ACT_GELU_TANH, p0, xp, yp, gp, dxp, dyp, s); break;
    case ACT_FATRELU: backward_span(ACT_FATRELU, p0, xp, yp, gp, dxp, dyp, s); break;
    default: oai_backward_span(p0, p1, ir, gp, dr, s); break;
    }
}

/* Unfused, first: tmp = act(x) and tmpd = act'(x) in fp32, packed rows x d
 * (SWIGLU_OAI: glu of the clamped gate and its gradient in the raw gate). */
kernel void act_grad_rows(global const stor_t *in, ulong io, ulong is, global float *tmp,
                          global float *tmpd, ulong rows, uint d, uint act, uint second,
                          float p0, float p1, uint chunk, uint nsplit)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *xp = ir + (second ? d : 0);
    global float *tp = tmp + s.row * d, *tdp = tmpd + s.row * d;
    switch (act) {
    case ACT_SILU: act_grad_span(ACT_SILU, p0, xp, tp, tdp, s); break;
    case ACT_GELU: act_grad_span(ACT_GELU, p0, xp, tp, tdp, s); break;
    case ACT_GELU_TANH: act_grad_span(ACT_GELU_TANH, p0, xp, tp, tdp, s); break;
    case ACT_FATRELU: act_grad_span(ACT_FATRELU, p0, xp, tp, tdp, s); break;
    default:
        /* element by element: the gates are every other element */
        for (uint i = s.begin + s.lane; i < s.end; i += s.nlanes) {
            float g;
            tp[i] = grad_oai_gate_float(LD(ir, 2 * i), p0, p1, &g);
            tdp[i] = g;
        }
        break;
    }
}

/* Unfused, second: dx = dout * y * tmpd (SWIGLU_OAI: the gate gradients,
 * dout * (clamped up + 1) * tmpd, into the even elements only). */
kernel void grad_x_rows(BACKWARD_ARGS, global const float *tmpd)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    const uint lane = s.lane, nlanes = s.nlanes;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *gp = dout + go_ + s.row * gs;
    global stor_t *dr = din + dio + s.row * dis;
    global const float *tdp = tmpd + s.row * d;
    if (act == ACT_SWIGLU_OAI) {
        for (uint i = s.begin + lane; i < s.end; i += nlanes) {
            const float u = LD(ir, 2 * i + 1);
            ST(dr, 2 * i, LD(gp, i) * (oai_up_float(u, p1) + 1.0f) * tdp[i]);
        }
        return;
    }
    global const stor_t *yp = ir + (second ? 0 : d);
    global stor_t *dxp = dr + (second ? d : 0);
    FOR_VEC_IN(i, s.begin, s.end) STV(dxp, i, LDV(gp, i) * LDV(yp, i) * ldv_tmp(tdp, i));
    ACT_TAIL(i, s.begin, s.end) ST(dxp, i, LD(gp, i) * LD(yp, i) * tdp[i]);
}

/* Unfused, last: dy = dout * tmp (SWIGLU_OAI: the up gradients, dout * tmp
 * inside the up clamp, into the odd elements only). */
kernel void grad_y_rows(BACKWARD_ARGS, global const float *tmp)
{
    act_share s;
    if (!act_share_get(rows, d, chunk, nsplit, &s))
        return;
    const uint lane = s.lane, nlanes = s.nlanes;
    global const stor_t *ir = in + io + s.row * is;
    global const stor_t *gp = dout + go_ + s.row * gs;
    global stor_t *dr = din + dio + s.row * dis;
    global const float *tp = tmp + s.row * d;
    if (act == ACT_SWIGLU_OAI) {
        for (uint i = s.begin + lane; i < s.end; i += nlanes) {
            const float u = LD(ir, 2 * i + 1);
            ST(dr, 2 * i + 1, LD(gp, i) * tp[i] * oai_up_pass_float(u, p1));
        }
        return;
    }
    global stor_t *dyp = dr + (second ? 0 : d);
    FOR_VEC_IN(i, s.begin, s.end) STV(dyp, i, LDV(gp, i) * ldv_tmp(tp, i));
    ACT_TAIL(i, s.begin, s.end) ST(dyp, i, LD(gp, i) * tp[i]);
}
