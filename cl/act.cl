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

/* Must match oclf_act in oclfuse.h. */
#define ACT_SILU 0
#define ACT_GELU 1
#define ACT_GELU_TANH 2
#define ACT_FATRELU 3
#define ACT_SWIGLU_OAI 4

#if OCLF_LAYOUT == 0
#define ACT_SETUP                                                              \
    const ulong gid = get_global_id(0);                                        \
    if (gid >= rows * nsplit)                                                  \
        return;                                                                \
    const ulong row = gid / nsplit;                                            \
    const uint begin = (uint)(gid % nsplit) * chunk;                           \
    const uint end = min(d, begin + chunk);                                    \
    const uint lane = 0, nlanes = 1
#elif OCLF_LAYOUT == 1
#define ACT_SETUP                                                              \
    const ulong grp = get_group_id(0);                                         \
    const ulong row = grp / nsplit;                                            \
    const uint begin = (uint)(grp % nsplit) * chunk;                           \
    const uint end = min(d, begin + chunk);                                    \
    const uint lane = get_local_id(0), nlanes = OCLF_WGS
#else
#error "OCLF_LAYOUT must be 0 or 1"
#endif

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
static inline float exp_float(float x) ACT_EXP_BODY(float, int, as_float)
#if OCLF_VEC > 1
static inline floatv exp_floatv(floatv x)
    ACT_EXP_BODY(floatv, OCLF_CAT(int, OCLF_VEC), OCLF_CAT(as_float, OCLF_VEC))
#else
#define exp_floatv exp_float
#endif

/* Activations, each written once for float and floatv operands: `a` must be
 * a plain variable (it is evaluated more than once) and T its type. p0 is
 * the FATRELU threshold. */
#define F_SILU(T, a) ((a) / (1.0f + OCLF_CAT(exp_, T)(-(a))))
#define F_GELU(T, a) (0.5f * (a) * (1.0f + OCLF_CAT(erf_, T)((a) * 0.70710678118654752f)))
/* 0.5 a (1 + tanh z) == a sigmoid(2z); the sigmoid form has no 1 + tanh to
 * cancel where tanh saturates short of -1 far below zero. */
#define F_GELU_TANH(T, a)                                                      \
    ((a) / (1.0f + OCLF_CAT(exp_, T)(-1.5957691216057308f * ((a) + 0.044715f * (a) * (a) * (a)))))
#define F_FATRELU(T, a) ((a) > p0 ? (a) : (T)(0.0f))

/* SWIGLU_OAI halves, p0 = alpha, p1 = limit. Comparisons rather than
 * fmin/clamp, so a NaN passes through as in vLLM's kernel. The glu term is
 * g * sigmoid(alpha g) written as g / (1 + exp(-(g alpha))). */
#define OAI_GLU(T, g) ((g) / (1.0f + OCLF_CAT(exp_, T)(-((g) * p0))))
#define OAI_GATE(T, g) ((g) > p1 ? (T)(p1) : (g))
#define OAI_UP(T, u) ((u) > p1 ? (T)(p1) : (u) < -p1 ? (T)(-p1) : (u))

/* Interleaved rows: two vectors lo = in[2i .. 2i+VEC), hi = the next VEC
 * give VEC gates (even elements) and VEC ups (odd elements). */
#if OCLF_VEC == 1
#define EVENS(lo, hi) (lo)
#define ODDS(lo, hi) (hi)
#else
#define EVENS(lo, hi) ((floatv)((lo).even, (hi).even))
#define ODDS(lo, hi) ((floatv)((lo).odd, (hi).odd))
#endif

/* out = F(x) * y over this work-item's share of the row. */
#define FUSED_LOOPS(F)                                                         \
    do {                                                                       \
        FOR_VEC_IN(i, begin, end) {                                            \
            floatv a = LDV(xp, i), b = LDV(yp, i);                             \
            STV(op, i, F(floatv, a) * b);                                      \
        }                                                                      \
        FOR_TAIL_IN(i, begin, end) {                                           \
            float a = LD(xp, i), b = LD(yp, i);                                \
            ST(op, i, F(float, a) * b);                                        \
        }                                                                      \
    } while (0)

/* tmp = F(x) */
#define ACT_LOOPS(F)                                                           \
    do {                                                                       \
        FOR_VEC_IN(i, begin, end) {                                            \
            floatv a = LDV(xp, i);                                             \
            STV_F(tp, i, F(floatv, a));                                        \
        }                                                                      \
        FOR_TAIL_IN(i, begin, end) {                                           \
            float a = LD(xp, i);                                               \
            tp[i] = F(float, a);                                               \
        }                                                                      \
    } while (0)

kernel void act_and_mul(global const stor_t *in, ulong io, ulong is,
                        global stor_t *out, ulong oo, ulong os,
                        ulong rows, uint d, uint act, uint second, float p0, float p1,
                        uint chunk, uint nsplit)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *xp = ir + (second ? d : 0); /* activated half */
    global const stor_t *yp = ir + (second ? 0 : d); /* multiplied half */
    global stor_t *op = out + oo + row * os;
    switch (act) {
    case ACT_SILU: FUSED_LOOPS(F_SILU); break;
    case ACT_GELU: FUSED_LOOPS(F_GELU); break;
    case ACT_GELU_TANH: FUSED_LOOPS(F_GELU_TANH); break;
    case ACT_FATRELU: FUSED_LOOPS(F_FATRELU); break;
    default:
        FOR_VEC_IN(i, begin, end) {
            floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
            floatv g = EVENS(lo, hi), u = ODDS(lo, hi);
            g = OAI_GATE(floatv, g);
            u = OAI_UP(floatv, u);
            STV(op, i, (u + 1.0f) * OAI_GLU(floatv, g));
        }
        FOR_TAIL_IN(i, begin, end) {
            float g = LD(ir, 2 * i), u = LD(ir, 2 * i + 1);
            g = OAI_GATE(float, g);
            u = OAI_UP(float, u);
            ST(op, i, (u + 1.0f) * OAI_GLU(float, g));
        }
        break;
    }
}

/* ---- unfused building blocks ------------------------------------------- */

/* tmp[row, i] = act(x) in fp32 (SWIGLU_OAI: the glu term of the clamped
 * gate). `tmp` is packed rows x d. */
kernel void act_rows(global const stor_t *in, ulong io, ulong is, global float *tmp,
                     ulong rows, uint d, uint act, uint second, float p0, float p1,
                     uint chunk, uint nsplit)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *xp = ir + (second ? d : 0);
    global float *tp = tmp + row * d;
    switch (act) {
    case ACT_SILU: ACT_LOOPS(F_SILU); break;
    case ACT_GELU: ACT_LOOPS(F_GELU); break;
    case ACT_GELU_TANH: ACT_LOOPS(F_GELU_TANH); break;
    case ACT_FATRELU: ACT_LOOPS(F_FATRELU); break;
    default:
        FOR_VEC_IN(i, begin, end) {
            floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
            floatv g = EVENS(lo, hi);
            g = OAI_GATE(floatv, g);
            STV_F(tp, i, OAI_GLU(floatv, g));
        }
        FOR_TAIL_IN(i, begin, end) {
            float g = LD(ir, 2 * i);
            g = OAI_GATE(float, g);
            tp[i] = OAI_GLU(float, g);
        }
        break;
    }
}

/* out = tmp * y (SWIGLU_OAI: (clamped up + 1) * tmp). */
kernel void mul_rows(global const stor_t *in, ulong io, ulong is, global const float *tmp,
                     global stor_t *out, ulong oo, ulong os,
                     ulong rows, uint d, uint act, uint second, float p0, float p1,
                     uint chunk, uint nsplit)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *yp = ir + (second ? 0 : d);
    global const float *tp = tmp + row * d;
    global stor_t *op = out + oo + row * os;
    if (act != ACT_SWIGLU_OAI) {
        FOR_VEC_IN(i, begin, end) STV(op, i, LDV_F(tp, i) * LDV(yp, i));
        FOR_TAIL_IN(i, begin, end) ST(op, i, tp[i] * LD(yp, i));
        return;
    }
    FOR_VEC_IN(i, begin, end) {
        floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
        floatv u = ODDS(lo, hi);
        u = OAI_UP(floatv, u);
        STV(op, i, (u + 1.0f) * LDV_F(tp, i));
    }
    FOR_TAIL_IN(i, begin, end) {
        float u = LD(ir, 2 * i + 1);
        u = OAI_UP(float, u);
        ST(op, i, (u + 1.0f) * tp[i]);
    }
}
