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

/* LDV_T(p, i) / STV_T(p, i, v): VEC floats of an unfused fp32 temporary
 * (packed rows of d). In the aligned build d is a multiple of VEC, so every
 * vector of the temporary is naturally aligned: one 16-byte access a float4,
 * where the element-aligned vload splits into 4-byte ones on GPUs. */
#if OCLF_ALIGNED && OCLF_VEC > 1
#define LDV_T(p, i) (*(global const floatv *)((p) + (i)))
#define STV_T(p, i, v) (*(global floatv *)((p) + (i)) = (v))
#else
#define LDV_T(p, i) LDV_F(p, i)
#define STV_T(p, i, v) STV_F(p, i, v)
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
            STV_T(tp, i, F(floatv, a));                                        \
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
            STV_T(tp, i, OAI_GLU(floatv, g));
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
        FOR_VEC_IN(i, begin, end) STV(op, i, LDV_T(tp, i) * LDV(yp, i));
        FOR_TAIL_IN(i, begin, end) ST(op, i, tp[i] * LD(yp, i));
        return;
    }
    FOR_VEC_IN(i, begin, end) {
        floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
        floatv u = ODDS(lo, hi);
        u = OAI_UP(floatv, u);
        STV(op, i, (u + 1.0f) * LDV_T(tp, i));
    }
    FOR_TAIL_IN(i, begin, end) {
        float u = LD(ir, 2 * i + 1);
        u = OAI_UP(float, u);
        ST(op, i, (u + 1.0f) * tp[i]);
    }
}

/* The backward kernels have no aligned build: with naturally aligned f16
 * vectors of 8, Intel's compiler spilled 2 registers of
 * act_and_mul_backward on Data Center Max (SIMD 32), so the backward call
 * always takes the plain build and the aligned program leaves them out. */
#if !OCLF_ALIGNED
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
 * same work-item, so din may be exactly in. */

/* GRAD_<ACT>(T, a, f, g): f = act(a), g = act'(a), for a float or floatv
 * `a` (a plain variable). */
/* SIGMOID_PAIR(T, e, s, m): with e = exp(-z), s = sigmoid(z) and
 * m = 1 - s = e s. 1 - s itself cancels where s is near 1 (its error was
 * most of GELU-tanh's f32 derivative error); e s overflows where e does,
 * and there s is below a half and 1 - s exact enough. */
#define SIGMOID_PAIR(T, e, s, m)                                               \
    const T s = 1.0f / (1.0f + (e));                                           \
    const T m = (e) < 1.0f ? (e) * s : 1.0f - s
#define GRAD_SILU(T, a, f, g)                                                  \
    do {                                                                       \
        const T e_ = OCLF_CAT(exp_, T)(-(a));                                  \
        SIGMOID_PAIR(T, e_, s_, m_);                                           \
        f = (a) * s_;                                                          \
        g = s_ + f * m_;                                                       \
    } while (0)
/* Phi(a) + a phi(a); exp_float sends -a^2/2 below -88 to 0, as it should. */
#define GRAD_GELU(T, a, f, g)                                                  \
    do {                                                                       \
        const T p_ = 0.5f * (1.0f + OCLF_CAT(erf_, T)((a) * 0.70710678118654752f)); \
        f = (a) * p_;                                                          \
        g = p_ + (a) * (0.39894228040143268f * OCLF_CAT(exp_, T)(-0.5f * (a) * (a))); \
    } while (0)
/* With s = sigmoid(2u), u = k (a + c a^3): act = a s, and
 * act' = s + 2 k a s (1 - s) (1 + 3 c a^2). s (1 - s) is 0 in fp32 well
 * before |a| = 16, so the polynomial factor takes a clamped there: its
 * a^2 would otherwise overflow and turn 0 x inf into NaN. */
#define GRAD_GELU_TANH(T, a, f, g)                                             \
    do {                                                                       \
        const T e_ = OCLF_CAT(exp_, T)(-1.5957691216057308f *                  \
                                       ((a) + 0.044715f * (a) * (a) * (a)));   \
        SIGMOID_PAIR(T, e_, s_, m_);                                           \
        const T c_ = fmin(fmax((a), -16.0f), 16.0f);                           \
        f = (a) * s_;                                                          \
        g = s_ + (1.5957691216057308f * c_) * (s_ * m_) * (1.0f + 0.134145f * c_ * c_); \
    } while (0)
#define GRAD_FATRELU(T, a, f, g)                                               \
    do {                                                                       \
        f = (a) > p0 ? (a) : (T)(0.0f);                                        \
        g = (a) > p0 ? (T)(1.0f) : (T)(0.0f);                                  \
    } while (0)
/* SWIGLU_OAI's gate term on the raw gate `gr`: f = glu(g'), g = d glu / d gr
 * with g' = min(gr, limit): 0 above the limit (the clamp passes no
 * gradient there; at the limit it does, as a clamp's gradient does), and
 * written so that a NaN gate stays NaN. */
#define GRAD_OAI_GATE(T, gr, f, g)                                             \
    do {                                                                       \
        const T gc_ = OAI_GATE(T, gr);                                         \
        const T e_ = OCLF_CAT(exp_, T)(-(gc_ * p0));                           \
        SIGMOID_PAIR(T, e_, s_, m_);                                           \
        f = gc_ * s_;                                                          \
        g = (gr) > p1 ? (T)(0.0f) : s_ + p0 * f * m_;                          \
    } while (0)
/* The up term's clamp gradient: 1 inside [-limit, limit], 0 outside, NaN
 * for a NaN up (inside no bound: its gradient is NaN, as its output is). */
#define OAI_UP_PASS(T, u) ((u) > p1 || (u) < -p1 ? (T)(0.0f) : (u) == (u) ? (T)(1.0f) : (T)NAN)

/* Two vectors of VEC gate and up gradients as the interleaved pairs
 * (dg0, du0, dg1, du1, ...): the low VEC elements, then the high. */
#if OCLF_VEC == 1
#define ZIP_LO(x, y) (x)
#define ZIP_HI(x, y) (y)
#elif OCLF_VEC == 2
#define ZIP_LO(x, y) ((floatv)((x).s0, (y).s0))
#define ZIP_HI(x, y) ((floatv)((x).s1, (y).s1))
#elif OCLF_VEC == 4
#define ZIP_LO(x, y) (((floatv)((x).lo, (y).lo)).s0213)
#define ZIP_HI(x, y) (((floatv)((x).hi, (y).hi)).s0213)
#elif OCLF_VEC == 8
#define ZIP_LO(x, y) (((floatv)((x).lo, (y).lo)).s04152637)
#define ZIP_HI(x, y) (((floatv)((x).hi, (y).hi)).s04152637)
#elif OCLF_VEC == 16
#define ZIP_LO(x, y) (((floatv)((x).lo, (y).lo)).s08192a3b4c5d6e7f)
#define ZIP_HI(x, y) (((floatv)((x).hi, (y).hi)).s08192a3b4c5d6e7f)
#endif

/* dx = dout * y * act'(x), dy = dout * act(x) over this work-item's share. */
#define BACKWARD_LOOPS(GRAD)                                                   \
    do {                                                                       \
        FOR_VEC_IN(i, begin, end) {                                            \
            floatv a = LDV(xp, i), b = LDV(yp, i), go = LDV(gp, i), f, g;      \
            GRAD(floatv, a, f, g);                                             \
            STV(dxp, i, go * b * g);                                           \
            STV(dyp, i, go * f);                                               \
        }                                                                      \
        FOR_TAIL_IN(i, begin, end) {                                           \
            float a = LD(xp, i), b = LD(yp, i), go = LD(gp, i), f, g;          \
            GRAD(float, a, f, g);                                              \
            ST(dxp, i, go * b * g);                                            \
            ST(dyp, i, go * f);                                                \
        }                                                                      \
    } while (0)

/* tmp = act(x), tmpd = act'(x) */
#define ACT_GRAD_LOOPS(GRAD)                                                   \
    do {                                                                       \
        FOR_VEC_IN(i, begin, end) {                                            \
            floatv a = LDV(xp, i), f, g;                                       \
            GRAD(floatv, a, f, g);                                             \
            STV_F(tp, i, f);                                                   \
            STV_F(tdp, i, g);                                                  \
        }                                                                      \
        FOR_TAIL_IN(i, begin, end) {                                           \
            float a = LD(xp, i), f, g;                                         \
            GRAD(float, a, f, g);                                              \
            tp[i] = f;                                                         \
            tdp[i] = g;                                                        \
        }                                                                      \
    } while (0)

#define BACKWARD_ARGS                                                          \
    global const stor_t *in, ulong io, ulong is, global const stor_t *dout, ulong go_, \
        ulong gs, global stor_t *din, ulong dio, ulong dis, ulong rows, uint d, uint act,  \
        uint second, float p0, float p1, uint chunk, uint nsplit

/* `in` and `din` are not restrict: they may be the same rows. */
kernel void act_and_mul_backward(BACKWARD_ARGS)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *gp = dout + go_ + row * gs;
    global stor_t *dr = din + dio + row * dis;
    global const stor_t *xp = ir + (second ? d : 0);
    global const stor_t *yp = ir + (second ? 0 : d);
    global stor_t *dxp = dr + (second ? d : 0);
    global stor_t *dyp = dr + (second ? 0 : d);
    switch (act) {
    case ACT_SILU: BACKWARD_LOOPS(GRAD_SILU); break;
    case ACT_GELU: BACKWARD_LOOPS(GRAD_GELU); break;
    case ACT_GELU_TANH: BACKWARD_LOOPS(GRAD_GELU_TANH); break;
    case ACT_FATRELU: BACKWARD_LOOPS(GRAD_FATRELU); break;
    default:
        FOR_VEC_IN(i, begin, end) {
            floatv lo = LDV(ir, 2 * i), hi = LDV(ir, 2 * i + OCLF_VEC);
            floatv gr = EVENS(lo, hi), u = ODDS(lo, hi), go = LDV(gp, i), f, g;
            GRAD_OAI_GATE(floatv, gr, f, g);
            const floatv dg = go * (OAI_UP(floatv, u) + 1.0f) * g;
            const floatv du = go * f * OAI_UP_PASS(floatv, u);
            STV(dr, 2 * i, ZIP_LO(dg, du));
            STV(dr, 2 * i + OCLF_VEC, ZIP_HI(dg, du));
        }
        FOR_TAIL_IN(i, begin, end) {
            float gr = LD(ir, 2 * i), u = LD(ir, 2 * i + 1), go = LD(gp, i), f, g;
            GRAD_OAI_GATE(float, gr, f, g);
            ST(dr, 2 * i, go * (OAI_UP(float, u) + 1.0f) * g);
            ST(dr, 2 * i + 1, go * f * OAI_UP_PASS(float, u));
        }
        break;
    }
}

/* Unfused, first: tmp = act(x) and tmpd = act'(x) in fp32, packed rows x d
 * (SWIGLU_OAI: glu of the clamped gate and its gradient in the raw gate). */
kernel void act_grad_rows(global const stor_t *in, ulong io, ulong is, global float *tmp,
                          global float *tmpd, ulong rows, uint d, uint act, uint second,
                          float p0, float p1, uint chunk, uint nsplit)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *xp = ir + (second ? d : 0);
    global float *tp = tmp + row * d, *tdp = tmpd + row * d;
    switch (act) {
    case ACT_SILU: ACT_GRAD_LOOPS(GRAD_SILU); break;
    case ACT_GELU: ACT_GRAD_LOOPS(GRAD_GELU); break;
    case ACT_GELU_TANH: ACT_GRAD_LOOPS(GRAD_GELU_TANH); break;
    case ACT_FATRELU: ACT_GRAD_LOOPS(GRAD_FATRELU); break;
    default:
        /* element by element: the gates are every other element */
        for (uint i = begin + lane; i < end; i += nlanes) {
            float gr = LD(ir, 2 * i), f, g;
            GRAD_OAI_GATE(float, gr, f, g);
            tp[i] = f;
            tdp[i] = g;
        }
        break;
    }
}

/* Unfused, second: dx = dout * y * tmpd (SWIGLU_OAI: the gate gradients,
 * dout * (clamped up + 1) * tmpd, into the even elements only). */
kernel void grad_x_rows(BACKWARD_ARGS, global const float *tmpd)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *gp = dout + go_ + row * gs;
    global stor_t *dr = din + dio + row * dis;
    global const float *tdp = tmpd + row * d;
    if (act == ACT_SWIGLU_OAI) {
        for (uint i = begin + lane; i < end; i += nlanes) {
            const float u = LD(ir, 2 * i + 1);
            ST(dr, 2 * i, LD(gp, i) * (OAI_UP(float, u) + 1.0f) * tdp[i]);
        }
        return;
    }
    global const stor_t *yp = ir + (second ? 0 : d);
    global stor_t *dxp = dr + (second ? d : 0);
    FOR_VEC_IN(i, begin, end) STV(dxp, i, LDV(gp, i) * LDV(yp, i) * LDV_F(tdp, i));
    FOR_TAIL_IN(i, begin, end) ST(dxp, i, LD(gp, i) * LD(yp, i) * tdp[i]);
}

/* Unfused, last: dy = dout * tmp (SWIGLU_OAI: the up gradients, dout * tmp
 * inside the up clamp, into the odd elements only). */
kernel void grad_y_rows(BACKWARD_ARGS, global const float *tmp)
{
    ACT_SETUP;
    global const stor_t *ir = in + io + row * is;
    global const stor_t *gp = dout + go_ + row * gs;
    global stor_t *dr = din + dio + row * dis;
    global const float *tp = tmp + row * d;
    if (act == ACT_SWIGLU_OAI) {
        for (uint i = begin + lane; i < end; i += nlanes) {
            const float u = LD(ir, 2 * i + 1);
            ST(dr, 2 * i + 1, LD(gp, i) * tp[i] * OAI_UP_PASS(float, u));
        }
        return;
    }
    global stor_t *dyp = dr + (second ? 0 : d);
    FOR_VEC_IN(i, begin, end) STV(dyp, i, LDV(gp, i) * LDV_F(tp, i));
    FOR_TAIL_IN(i, begin, end) ST(dyp, i, LD(gp, i) * tp[i]);
}
#endif /* !OCLF_ALIGNED */
