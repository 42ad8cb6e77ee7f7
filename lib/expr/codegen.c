/*
 * Code generation for elementwise expressions: the canonical form (the
 * cache key) and the OpenCL source. Only generated identifiers (in<i>,
 * out<j>, v<k>, t<k>) and numbers re-printed from their parsed values reach
 * the source: nothing the caller wrote is copied into it.
 */
#include "expr.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oclf_xbuf_printf(oclf_xbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static const char *const kind_tag[] = {"m", "r", "c", "s", "b"};

/* Scalars and bit matrices carry no dtype. */
static int has_dtype(const oclf_expr_decl *d)
{
    return d->kind != OCLF_EXPR_SCALAR && d->kind != OCLF_EXPR_BITS;
}

int oclf_expr_has_bits(const oclf_expr_decl *inputs, unsigned n_inputs,
                       const oclf_expr_decl *outputs, unsigned n_outputs)
{
    for (unsigned i = 0; i < n_inputs; i++)
        if (inputs[i].kind == OCLF_EXPR_BITS)
            return 1;
    for (unsigned j = 0; j < n_outputs; j++)
        if (outputs[j].kind == OCLF_EXPR_BITS)
            return 1;
    return 0;
}

void oclf_expr_canonical_form(const oclf_xgraph *g, const oclf_expr_decl *inputs,
                              unsigned n_inputs, const oclf_expr_decl *outputs, oclf_xbuf *out)
{
    oclf_xbuf_printf(out, "in");
    for (unsigned i = 0; i < n_inputs; i++)
        oclf_xbuf_printf(out, "%c%s%s%s", i ? ',' : ':', kind_tag[inputs[i].kind],
                         has_dtype(&inputs[i]) ? "." : "",
                         has_dtype(&inputs[i]) ? oclf_dtype_name(inputs[i].dtype) : "");
    oclf_xbuf_printf(out, ";");
    for (int k = 0; k < g->n_nodes; k++) {
        const oclf_xnode *n = &g->node[k];
        if (n->op == XOP_INPUT)
            oclf_xbuf_printf(out, "n%d=in%d;", k, n->input);
        else if (n->op == XOP_CONST)
            oclf_xbuf_printf(out, "n%d=%a;", k, (double)n->value);
        else {
            oclf_xbuf_printf(out, "n%d=%s(", k, oclf_xop_name(n->op));
            for (int a = 0; a < oclf_xop_arity(n->op); a++)
                oclf_xbuf_printf(out, "%sn%d", a ? "," : "", n->a[a]);
            oclf_xbuf_printf(out, ");");
        }
    }
    oclf_xbuf_printf(out, "out");
    for (int j = 0; j < g->n_outputs; j++)
        oclf_xbuf_printf(out, "%cn%d.%s", j ? ',' : ':', g->output[j],
                         outputs[j].kind == OCLF_EXPR_BITS ? "bits"
                                                          : oclf_dtype_name(outputs[j].dtype));
}

static const char *ctype(oclf_dtype d)
{
    return d == OCLF_F32 ? "float" : d == OCLF_F16 ? "half" : "ushort";
}

static const char *decl_ctype(const oclf_expr_decl *d)
{
    return d->kind == OCLF_EXPR_BITS ? "uint" : ctype(d->dtype);
}

/* Where input i's element (r, c) lives. */
static void index_of(oclf_xbuf *b, const oclf_expr_decl *in, int i)
{
    switch (in->kind) {
    case OCLF_EXPR_MATRIX: oclf_xbuf_printf(b, "in%d_o + r * in%d_s + c", i, i); break;
    case OCLF_EXPR_BITS: oclf_xbuf_printf(b, "in%d_o + r * in%d_s + (c >> 5)", i, i); break;
    case OCLF_EXPR_ROW: oclf_xbuf_printf(b, "in%d_o + c", i); break;
    default: oclf_xbuf_printf(b, "in%d_o + r", i); break;
    }
}

/* words: the fused kernel over whole words, which loads each bits input's
 * word of the row once (wb<i>); elsewhere the word is read per element. */
static void emit_load(oclf_xbuf *b, const oclf_expr_decl *inputs, int i, int words)
{
    const oclf_expr_decl *in = &inputs[i];
    if (in->kind == OCLF_EXPR_SCALAR) {
        oclf_xbuf_printf(b, "in%d", i);
        return;
    }
    if (in->kind == OCLF_EXPR_BITS) {
        if (words) {
            oclf_xbuf_printf(b, "(float)((wb%d >> (uint)(c & 31)) & 1u)", i);
        } else {
            oclf_xbuf_printf(b, "(float)((in%d[", i);
            index_of(b, in, i);
            oclf_xbuf_printf(b, "] >> (uint)(c & 31)) & 1u)");
        }
        return;
    }
    if (in->dtype == OCLF_F32) {
        oclf_xbuf_printf(b, "in%d[", i);
        index_of(b, in, i);
        oclf_xbuf_printf(b, "]");
    } else if (in->dtype == OCLF_F16) {
        oclf_xbuf_printf(b, "vload_half(");
        index_of(b, in, i);
        oclf_xbuf_printf(b, ", in%d)", i);
    } else {
        oclf_xbuf_printf(b, "bf16_to_f32(in%d[", i);
        index_of(b, in, i);
        oclf_xbuf_printf(b, "])");
    }
}

static void emit_store(oclf_xbuf *b, oclf_dtype d, int j, const char *v)
{
    const char *idx = "out%d_o + r * out%d_s + c";
    char at[96];
    snprintf(at, sizeof at, idx, j, j);
    if (d == OCLF_F32)
        oclf_xbuf_printf(b, "        out%d[%s] = %s;\n", j, at, v);
    else if (d == OCLF_F16)
        oclf_xbuf_printf(b, "        vstore_half_rte(%s, %s, out%d);\n", v, at, j);
    else
        oclf_xbuf_printf(b, "        out%d[%s] = f32_to_bf16(%s);\n", j, at, v);
}

/* The value of operation node k from operand spellings a, b, c. */
static void emit_op(oclf_xbuf *o, const oclf_xnode *n, const char *a, const char *b, const char *c)
{
    switch (n->op) {
    case XOP_NEG: oclf_xbuf_printf(o, "-%s", a); break;
    case XOP_ADD: oclf_xbuf_printf(o, "%s + %s", a, b); break;
    case XOP_SUB: oclf_xbuf_printf(o, "%s - %s", a, b); break;
    case XOP_MUL: oclf_xbuf_printf(o, "%s * %s", a, b); break;
    case XOP_DIV: oclf_xbuf_printf(o, "%s / %s", a, b); break;
    case XOP_LT: oclf_xbuf_printf(o, "%s < %s ? 1.0f : 0.0f", a, b); break;
    case XOP_LE: oclf_xbuf_printf(o, "%s <= %s ? 1.0f : 0.0f", a, b); break;
    case XOP_GT: oclf_xbuf_printf(o, "%s > %s ? 1.0f : 0.0f", a, b); break;
    case XOP_GE: oclf_xbuf_printf(o, "%s >= %s ? 1.0f : 0.0f", a, b); break;
    case XOP_EQ: oclf_xbuf_printf(o, "%s == %s ? 1.0f : 0.0f", a, b); break;
    case XOP_NE: oclf_xbuf_printf(o, "%s != %s ? 1.0f : 0.0f", a, b); break;
    case XOP_SELECT: oclf_xbuf_printf(o, "%s != 0.0f ? %s : %s", a, b, c); break;
    case XOP_EXP: oclf_xbuf_printf(o, "exp(%s)", a); break;
    case XOP_LOG: oclf_xbuf_printf(o, "log(%s)", a); break;
    case XOP_LOG1P: oclf_xbuf_printf(o, "log1p(%s)", a); break;
    case XOP_EXPM1: oclf_xbuf_printf(o, "expm1(%s)", a); break;
    case XOP_SQRT: oclf_xbuf_printf(o, "sqrt(%s)", a); break;
    case XOP_RSQRT: oclf_xbuf_printf(o, "rsqrt(%s)", a); break;
    case XOP_ABS: oclf_xbuf_printf(o, "fabs(%s)", a); break;
    case XOP_TANH: oclf_xbuf_printf(o, "tanh(%s)", a); break;
    case XOP_ERF: oclf_xbuf_printf(o, "x_erf(%s)", a); break;
    case XOP_SIGMOID: oclf_xbuf_printf(o, "1.0f / (1.0f + exp(-%s))", a); break;
    /* relu keeps NaN, as frameworks do (fmax would drop it). */
    case XOP_RELU: oclf_xbuf_printf(o, "%s < 0.0f ? 0.0f : %s", a, a); break;
    case XOP_GELU: oclf_xbuf_printf(o, "0.5f * %s * (1.0f + x_erf(%s * 0.70710678118654752f))", a, a); break;
    case XOP_GELU_TANH:
        oclf_xbuf_printf(o, "0.5f * %s * (1.0f + tanh(0.79788456080286536f * (%s + 0.044715f * %s * %s * %s)))",
                         a, a, a, a, a);
        break;
    case XOP_SILU: oclf_xbuf_printf(o, "%s / (1.0f + exp(-%s))", a, a); break;
    case XOP_MIN: oclf_xbuf_printf(o, "fmin(%s, %s)", a, b); break;
    case XOP_MAX: oclf_xbuf_printf(o, "fmax(%s, %s)", a, b); break;
    case XOP_POW: oclf_xbuf_printf(o, "pow(%s, %s)", a, b); break;
    case XOP_CLAMP: oclf_xbuf_printf(o, "fmin(fmax(%s, %s), %s)", a, b, c); break;
    case XOP_DROPOUT: oclf_xbuf_printf(o, "x_dropout(%s, %s, seed, n, %du)", a, b, n->stream); break;
    default: oclf_xbuf_printf(o, "0.0f"); break;
    }
}

static const char prelude[] =
    "/* Generated elementwise expression. */\n"
    "/* Dropout through Philox4x32-10 (philox_first, cl/common.h). */\n"
    "static inline float x_dropout(float v, float p, ulong seed, ulong n, uint stream)\n"
    "{\n"
    "    const uint w = philox_first((uint4)((uint)n, (uint)(n >> 32), stream, 0u),\n"
    "                                (uint2)((uint)seed, (uint)(seed >> 32)));\n"
    "    const float u = philox_uniform(w);\n"
    "    return u >= p ? v / (1.0f - p) : 0.0f;\n"
    "}\n"
    "/* erf for single elements: the library's, but below 2^-14 x + x * c\n"
    " * with c = 2/sqrt(pi) - 1 (the next term, x^3 / 3 of it, is 1.4e-9 of\n"
    " * the result there) in one rounding. The CPU device's library erf lost\n"
    " * accuracy where x * c is subnormal: 1.6e-7 relative at x = 1.26e-38. */\n"
    "static inline float x_erf(float x)\n"
    "{\n"
    "    return fabs(x) < 0x1.0p-14f ? fma(x, 0.128379167f, x) : erf(x);\n"
    "}\n"
    "#if OCLF_VEC > 1\n"
    "/* Whole chunks of OCLF_VEC elements: vector loads that need only the\n"
    " * element's alignment, vector math, the same Philox per lane. */\n"
    "typedef OCLF_CAT(float, OCLF_VEC) xf;\n"
    "typedef OCLF_CAT(uint, OCLF_VEC) xu;\n"
    "typedef OCLF_CAT(int, OCLF_VEC) xi;\n"
    "typedef OCLF_CAT(ushort, OCLF_VEC) xh;\n"
    "typedef OCLF_CAT(ulong, OCLF_VEC) xl;\n"
    "#define XTOUL(u) OCLF_CAT(convert_ulong, OCLF_VEC)(u)\n"
    "#define XTOU(l) OCLF_CAT(convert_uint, OCLF_VEC)(l)\n"
    "/* A 64-bit lane's high half moved to its low half by a swizzle, not a\n"
    " * shift: x86 runs 512-bit shifts on the port that also multiplies. */\n"
    "#define XHI8(p) as_ulong8(as_uint16(p).s1133557799bbddff)\n"
    "#if OCLF_VEC == 2\n#define XHI(p) as_ulong2(as_uint4(p).s1133)\n"
    "#elif OCLF_VEC == 4\n#define XHI(p) as_ulong4(as_uint8(p).s11335577)\n"
    "#elif OCLF_VEC == 8\n#define XHI(p) XHI8(p)\n"
    "#else\n#define XHI(p) ((xl)(XHI8((p).lo), XHI8((p).hi)))\n#endif\n"
    "/* f32 vectors through LDFV/STFV (cl/common.h): one vector access where\n"
    " * the CPU device's vloadn/vstoren came out as pieces (a float16 store\n"
    " * as three moves, a float16 load added to a bias as eight two-lane\n"
    " * loads and adds). */\n"
    "/* OCLF_ALIGNED 1 (the host checked that every vector starts on a\n"
    " * multiple of OCLF_VEC elements): naturally aligned types, one wide\n"
    " * access per vector where GPU compilers split element-aligned ones. */\n"
    "#if OCLF_ALIGNED\n"
    "#define XLOAD(p) (*(global const xf *)(p))\n"
    "#define XSTORE(v, p) (*(global xf *)(p) = (v))\n"
    "#define XLOADU(p) OCLF_LD16A(p)\n"
    "#define XSTOREU(v, p) OCLF_ST16A((p), (v))\n"
    "#else\n"
    "#define XLOAD(p) LDFV(OCLF_VEC, (p))\n"
    "#define XSTORE(v, p) STFV(OCLF_VEC, (p), (v))\n"
    "#define XLOADU(p) LD16V(OCLF_VEC, (p))\n"
    "#define XSTOREU(v, p) ST16V(OCLF_VEC, (p), (v))\n"
    "#endif\n"
    "/* f16 vectors move as 16-bit bits and convert in registers\n"
    " * (WIDEN_F16/NARROW_F16): the CPU device's vload_halfN of a global\n"
    " * pointer was an aligned move that faulted at an odd element offset. */\n"
    "#define XLOADH(p) WIDEN_F16(OCLF_VEC, XLOADU(p))\n"
    "#define XSTOREH(v, p) XSTOREU(NARROW_F16(OCLF_VEC, (v)), (p))\n"
    "#define XBF16(h) OCLF_CAT(as_float, OCLF_VEC)(OCLF_CAT(convert_uint, OCLF_VEC)(h) << 16)\n"
    "static inline xh x_to_bf16(xf f)\n"
    "{\n"
    "    const xu u = OCLF_CAT(as_uint, OCLF_VEC)(f);\n"
    "    const xu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
    "    return OCLF_CAT(convert_ushort, OCLF_VEC)(select(r, (u >> 16) | 0x40u, (u & 0x7fffffffu) > 0x7f800000u));\n"
    "}\n"
    "#if OCLF_VEC == 2\n#define XLANES ((xu)(0, 1))\n"
    "#elif OCLF_VEC == 4\n#define XLANES ((xu)(0, 1, 2, 3))\n"
    "#elif OCLF_VEC == 8\n#define XLANES ((xu)(0, 1, 2, 3, 4, 5, 6, 7))\n"
    "#else\n#define XLANES ((xu)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))\n#endif\n"
    "/* exp of whole vectors: 2^k * e^r with k = round(x / ln 2) by adding\n"
    " * and removing 1.5 * 2^23 (round to nearest, and k's bits land in the\n"
    " * sum's low mantissa), r = x - k ln 2 (ln 2 in two parts), e^r by its\n"
    " * Taylor series to r^7 (|r| <= 0.347). 2^k is applied as two factors, so\n"
    " * k from -150 to 128 gives subnormal results, zero and infinity like the\n"
    " * library's exp; the argument is clamped there first. Within 1 ulp of the\n"
    " * exact value for normal results. No branch: a test of every lane\n"
    " * (any()) cost POCL more than the polynomial. */\n"
    "static inline xf x_exp_clamped_v(xf x)\n"
    "{\n"
    "    const xf t = fma(x, (xf)1.44269504f, (xf)12582912.0f);\n"
    "    const xf kf = t - 12582912.0f;\n"
    "    const xi k = OCLF_CAT(as_int, OCLF_VEC)(t) - 0x4b400000;\n"
    "    xf r = fma(-kf, (xf)0.693145752f, x);\n"
    "    r = fma(-kf, (xf)1.42860677e-06f, r);\n"
    "    xf p = (xf)(1.0f / 5040);\n"
    "    p = fma(p, r, (xf)(1.0f / 720));\n"
    "    p = fma(p, r, (xf)(1.0f / 120));\n"
    "    p = fma(p, r, (xf)(1.0f / 24));\n"
    "    p = fma(p, r, (xf)(1.0f / 6));\n"
    "    p = fma(p, r, (xf)0.5f);\n"
    "    p = fma(p, r, (xf)1.0f);\n"
    "    p = fma(p, r, (xf)1.0f);\n"
    "    const xi k1 = k >> 1;\n"
    "    return p * OCLF_CAT(as_float, OCLF_VEC)((k1 + 127) << 23) *\n"
    "           OCLF_CAT(as_float, OCLF_VEC)((k - k1 + 127) << 23);\n"
    "}\n"
    "static inline xf x_exp_v(xf x)\n"
    "{\n"
    "    /* fmin/fmax drop NaN: NaN lanes are put back at the end */\n"
    "    const xf e = x_exp_clamped_v(fmin(fmax(x, (xf)-104.0f), (xf)89.0f));\n"
    "    return select(e, x, isnan(x));\n"
    "}\n"
    "/* log1p of whole vectors with every lane in [0, 1] (or NaN): below 1/2,\n"
    " * 2 atanh(s) with s = t / (t + 2); from 1/2, ln 2 + 2 atanh(s) with\n"
    " * s = (t - 1) / (t + 3) (t - 1 is exact there), so |s| <= 1/5 and no\n"
    " * rounding of 1 + t: the series to s^11 is within 3 ulp. */\n"
    "static inline xf x_log1p01_v(xf t)\n"
    "{\n"
    "    const xf big = select((xf)0.0f, (xf)1.0f, t >= 0.5f);\n"
    "    const xf s = (t - big) / (t + 2.0f + big), z = s * s;\n"
    "    xf q = fma(z, (xf)(1.0f / 11), (xf)(1.0f / 9));\n"
    "    q = fma(z, q, (xf)(1.0f / 7));\n"
    "    q = fma(z, q, (xf)(1.0f / 5));\n"
    "    q = fma(z, q, (xf)(1.0f / 3));\n"
    "    q = fma(z, q, (xf)1.0f);\n"
    "    return fma(big, (xf)0.693145752f, fma(big, (xf)1.42860677e-06f, 2.0f * s * q));\n"
    "}\n"
    "/* log(exp(x) + 1), rewritten by the code generator as\n"
    " * max(x, 0) + log1p(exp(-|x|)): exp never overflows (log(exp(100) + 1)\n"
    " * is 100, not infinity) and no log of a sum rounded near 1: within 4 ulp\n"
    " * for normal results. The clamp at -104 only changes exp(-|x|) below the\n"
    " * smallest subnormal; NaN stays NaN through the select. */\n"
    "static inline xf x_softplus_v(xf x)\n"
    "{\n"
    "    const xf t = x_exp_clamped_v(fmax(-fabs(x), (xf)-104.0f));\n"
    "    return select(x, (xf)0.0f, x < 0.0f) + x_log1p01_v(t);\n"
    "}\n"
    "/* log of whole vectors: x = 2^e * m with m in [sqrt(1/2), sqrt(2)),\n"
    " * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series\n"
    " * to s^11 (within 3 ulp of the exact value). A CPU's log library ran\n"
    " * several times slower. Zero, negative, subnormal, infinite and NaN\n"
    " * lanes take the library's log. */\n"
    "static inline xf x_log_v(xf x)\n"
    "{\n"
    "    if (any(!(x >= FLT_MIN && x <= FLT_MAX)))\n"
    "        return log(x);\n"
    "    const xu b = OCLF_CAT(as_uint, OCLF_VEC)(x);\n"
    "    xf m = OCLF_CAT(as_float, OCLF_VEC)((b & 0x007fffffu) | 0x3f800000u);\n"
    "    xf e = OCLF_CAT(convert_float, OCLF_VEC)(OCLF_CAT(as_int, OCLF_VEC)(b >> 23) - 127);\n"
    "    const xf big = select((xf)0.0f, (xf)1.0f, m > 1.41421356f);\n"
    "    m = m * (1.0f - 0.5f * big);\n"
    "    e = e + big;\n"
    "    const xf s = (m - 1.0f) / (m + 1.0f), z = s * s;\n"
    "    xf q = fma(z, (xf)(1.0f / 11), (xf)(1.0f / 9));\n"
    "    q = fma(z, q, (xf)(1.0f / 7));\n"
    "    q = fma(z, q, (xf)(1.0f / 5));\n"
    "    q = fma(z, q, (xf)(1.0f / 3));\n"
    "    q = fma(z, q, (xf)1.0f);\n"
    "    /* ln 2 in two parts: e * hi is exact */\n"
    "    return fma(e, (xf)0.693145752f, fma(e, (xf)1.42860677e-06f, 2.0f * s * q));\n"
    "}\n"
    "/* erf of whole vectors: below 1, x + x * P(2x^2 - 1) with P the\n"
    " * polynomial of erf(x) / x - 1 (relative error under 8e-8); from 1 to 4,\n"
    " * 1 - q(2|x| - 5) with q erfc's polynomial (absolute error under 6e-8);\n"
    " * beyond 4, +-1 (erfc(4) < 1.6e-8). Both are Chebyshev interpolants at\n"
    " * degree 7 and 14; P's coefficients were rounded to float from the\n"
    " * highest down, each lower one refitted to what the rounding left.\n"
    " * Below 1, P is at most 0.16 in size, so its rounding errors reach the\n"
    " * result scaled down by that, and the last fma rounds once: x * P(u)\n"
    " * with P near 1 rounded twice and reached 1.4e-7. 2|x| - 5 is exact\n"
    " * (q's coefficients carry the 1/3^k of its interval): the rounded 2/3\n"
    " * and 5/3 of (2|x| - 5) / 3 moved the argument by up to 6e-8 and the\n"
    " * result by 1.05e-7 near 1. A CPU's erf library ran many times slower.\n"
    " * NaN stays NaN. */\n"
    "static inline xf x_erf_v(xf x)\n"
    "{\n"
    "    const xf a = fabs(x), u = fma(2.0f * x, x, (xf)-1.0f);\n"
    "    xf p = (xf)-7.55237863e-08f;\n"
    "    p = fma(p, u, (xf)1.23060545e-06f);\n"
    "    p = fma(p, u, (xf)-1.75369023e-05f);\n"
    "    p = fma(p, u, (xf)0.000217513283f);\n"
    "    p = fma(p, u, (xf)-0.00228548562f);\n"
    "    p = fma(p, u, (xf)0.0198524967f);\n"
    "    p = fma(p, u, (xf)-0.140536085f);\n"
    "    p = fma(p, u, (xf)-0.0345312618f);\n"
    "    const xf d = 2.0f * a - 5.0f;\n"
    "    xf q = (xf)-5.39426663e-11f;\n"
    "    q = fma(q, d, (xf)-5.95690997e-11f);\n"
    "    q = fma(q, d, (xf)3.82506959e-09f);\n"
    "    q = fma(q, d, (xf)-8.70977779e-09f);\n"
    "    q = fma(q, d, (xf)-7.90365391e-08f);\n"
    "    q = fma(q, d, (xf)5.28976557e-07f);\n"
    "    q = fma(q, d, (xf)-1.01171531e-06f);\n"
    "    q = fma(q, d, (xf)-4.38011239e-06f);\n"
    "    q = fma(q, d, (xf)4.37152958e-05f);\n"
    "    q = fma(q, d, (xf)-0.000190903636f);\n"
    "    q = fma(q, d, (xf)0.000538907188f);\n"
    "    q = fma(q, d, (xf)-0.00104397803f);\n"
    "    q = fma(q, d, (xf)0.0013614255f);\n"
    "    q = fma(q, d, (xf)-0.00108909013f);\n"
    "    q = fma(q, d, (xf)0.000406952022f);\n"
    "    const xf far = copysign(select(1.0f - q, (xf)1.0f, a >= 4.0f), x);\n"
    "    return select(far, fma(x, p, x), a < 1.0f);\n"
    "}\n"
    "static inline xf x_dropout_v(xf v, xf p, ulong seed, ulong n, uint stream)\n"
    "{\n"
    "#ifdef OCLF_LANE_MUL64\n"
    "    /* Each Philox word lives in the low half of a 64-bit lane: the\n"
    "     * 64-bit product of two values below 2^32 (x86: one vpmuludq per 8\n"
    "     * lanes) holds both halves of the 32x32-bit product, the next round\n"
    "     * reads its low half in place, and the masks before the products\n"
    "     * cost nothing (the instruction reads the low halves only). A round\n"
    "     * is two products, two swizzles and two three-way xors; 32-bit\n"
    "     * lanes took two more products and shuffles per round for the low\n"
    "     * words. Upper halves hold stale bits that no result reads. Counters\n"
    "     * n + lane carry into the high word through the 64-bit add. */\n"
    "    const xl ctr = (xl)(n) + XTOUL(XLANES);\n"
    "    xl c0 = ctr, c1 = ctr >> 32, c2 = (xl)(stream), c3 = (xl)(0);\n"
    "    uint k0 = (uint)seed, k1 = (uint)(seed >> 32);\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 10; i++) {\n"
    "        const xl p0 = (c0 & 0xFFFFFFFFul) * 0xD2511F53ul, p1 = (c2 & 0xFFFFFFFFul) * 0xCD9E8D57ul;\n"
    "        c0 = XHI(p1) ^ c1 ^ (ulong)k0;\n"
    "        c1 = p1;\n"
    "        c2 = XHI(p0) ^ c3 ^ (ulong)k1;\n"
    "        c3 = p0;\n"
    "        k0 += 0x9E3779B9u;\n"
    "        k1 += 0xBB67AE85u;\n"
    "    }\n"
    "    const xu w = XTOU(c0);\n"
    "#else\n"
    "    /* 32-bit lanes (GPUs: mul_hi is native, registers are 32 bits);\n"
    "     * counters n + lane, carrying into the high word */\n"
    "    const xu lo = (xu)((uint)n) + XLANES;\n"
    "    xu c0 = lo, c1 = (xu)((uint)(n >> 32)) + select((xu)0u, (xu)1u, lo < (xu)((uint)n));\n"
    "    xu c2 = (xu)(stream), c3 = (xu)(0u);\n"
    "    uint k0 = (uint)seed, k1 = (uint)(seed >> 32);\n"
    "    for (int i = 0; i < 10; i++) {\n"
    "        if (i) {\n"
    "            k0 += 0x9E3779B9u;\n"
    "            k1 += 0xBB67AE85u;\n"
    "        }\n"
    "        /* 64-bit products give both halves: a vector mul_hi of 32-bit\n"
    "         * lanes has no x86 instruction and went lane by lane. */\n"
    "        const xl p0 = XTOUL(c0) * 0xD2511F53ul, p1 = XTOUL(c2) * 0xCD9E8D57ul;\n"
    "        const xu lo0 = XTOU(p0), hi0 = XTOU(p0 >> 32);\n"
    "        const xu lo1 = XTOU(p1), hi1 = XTOU(p1 >> 32);\n"
    "        c0 = hi1 ^ c1 ^ k0;\n"
    "        c1 = lo1;\n"
    "        c2 = hi0 ^ c3 ^ k1;\n"
    "        c3 = lo0;\n"
    "    }\n"
    "    const xu w = c0;\n"
    "#endif\n"
    "    const xf u = OCLF_CAT(convert_float, OCLF_VEC)(w >> 8) * 0x1.0p-24f;\n"
    "    return select((xf)0.0f, v / (1.0f - p), u >= p);\n"
    "}\n"
    "#endif\n";

/* Only in programs with bit matrices (the other programs' text, and so
 * their cache entries, stay as they were). */
static const char bits_prelude[] =
    "#if OCLF_VEC > 1\n"
    "/* A vector's nonzero lanes (NaN is nonzero) as bits, lane i at bit i:\n"
    " * a lane's bit by select, then an OR of the lanes into one word. */\n"
    "static inline uint x_bits_v(xf v)\n"
    "{\n"
    "    const xu m = select((xu)0u, (xu)1u << XLANES, v != 0.0f);\n"
    "#if OCLF_VEC == 16\n"
    "    /* neighbouring lanes ORed within 64-bit lanes, not by halves:\n"
    "     * oclgrind 21.10 took the halves (.lo, .hi) of a 16-lane vector for\n"
    "     * uninitialized values; lane by lane, ReLU with its mask in bf16\n"
    "     * took 21-23 ms on 4096x4096 against 13-18 on the CPU device) */\n"
    "    const ulong8 p = as_ulong8(m);\n"
    "    const uint8 m8 = convert_uint8(p | (p >> 32));\n"
    "#elif OCLF_VEC == 8\n"
    "    const uint8 m8 = m;\n"
    "#endif\n"
    "#if OCLF_VEC >= 8\n"
    "    const uint4 m4 = m8.lo | m8.hi;\n"
    "#elif OCLF_VEC == 4\n"
    "    const uint4 m4 = m;\n"
    "#endif\n"
    "#if OCLF_VEC >= 4\n"
    "    const uint2 m2 = m4.lo | m4.hi;\n"
    "#else\n"
    "    const uint2 m2 = m;\n"
    "#endif\n"
    "    return m2.x | m2.y;\n"
    "}\n"
    "/* OCLF_VEC bits of word w from bit sh on, as 1.0 or 0.0 per lane. */\n"
    "static inline xf x_unbits_v(uint w, uint sh)\n"
    "{\n"
    "    return select((xf)0.0f, (xf)1.0f, (((xu)(w) >> ((xu)(sh) + XLANES)) & 1u) != 0u);\n"
    "}\n"
    "#endif\n";

static void emit_params(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs,
                        unsigned n_inputs, const oclf_expr_decl *outputs, int temps)
{
    for (unsigned i = 0; i < n_inputs; i++) {
        const oclf_expr_decl *in = &inputs[i];
        if (in->kind == OCLF_EXPR_SCALAR)
            oclf_xbuf_printf(b, "float in%u, ", i);
        else if (in->kind == OCLF_EXPR_MATRIX || in->kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "global const %s *restrict in%u, ulong in%u_o, ulong in%u_s, ",
                             decl_ctype(in), i, i, i);
        else
            oclf_xbuf_printf(b, "global const %s *restrict in%u, ulong in%u_o, ", ctype(in->dtype), i, i);
    }
    for (int j = 0; j < g->n_outputs; j++)
        oclf_xbuf_printf(b, "global %s *out%d, ulong out%d_o, ulong out%d_s, ",
                         decl_ctype(&outputs[j]), j, j, j);
    oclf_xbuf_printf(b, "ulong rows, ulong cols, ulong seed, ulong offset");
    if (!temps)
        oclf_xbuf_printf(b, ", ulong rpb");
    if (temps)
        for (int k = 0; k < g->n_nodes; k++)
            if (g->node[k].op > XOP_CONST)
                oclf_xbuf_printf(b, ", global float *t%d", k);
}

/* Each work-item computes VEC consecutive elements of one row; the last
 * one of a row stops at the row's end. */
#define LOOP_START                                                     \
    "{\n"                                                              \
    "    const ulong nch = (cols + OCLF_VEC - 1) / OCLF_VEC;\n"          \
    "    const ulong gid = get_global_id(0);\n"                          \
    "    if (gid >= rows * nch)\n"                                       \
    "        return;\n"                                                  \
    "    const ulong r = gid / nch, c0 = (gid - r * nch) * OCLF_VEC;\n"
#define LOOP_BODY                                                      \
    "    for (uint k = 0; k < OCLF_VEC; k++) {\n"                        \
    "        const ulong c = c0 + k;\n"                                  \
    "        if (c >= cols)\n"                                           \
    "            break;\n"                                               \
    "        const ulong n = r * cols + c + offset;\n"                   \
    "        (void)n;\n"
static const char loop_head[] = LOOP_START LOOP_BODY;
/* The fused kernel: a work-item takes VEC columns of `rpb` consecutive rows
 * (ROWS), loading row-vector inputs once for all of them, and first takes
 * a whole chunk as vectors when it can. */
static const char fused_head[] =
    "{\n"
    "    const ulong nch = (cols + OCLF_VEC - 1) / OCLF_VEC;\n"
    "    const ulong gid = get_global_id(0);\n"
    "    if (gid >= (rows + rpb - 1) / rpb * nch)\n"
    "        return;\n"
    "    const ulong rb = gid / nch, c0 = (gid - rb * nch) * OCLF_VEC;\n"
    "    const ulong r0 = rb * rpb, r1 = min(r0 + rpb, rows);\n"
    "#if OCLF_VEC > 1\n"
    "    if (c0 + OCLF_VEC <= cols) {\n"
    "        const ulong c = c0;\n";
static const char fused_tail[] =
    "    for (uint k = 0; k < OCLF_VEC; k++) {\n"
    "        const ulong c = c0 + k;\n"
    "        if (c >= cols)\n"
    "            break;\n";
static const char row_loop[] =
    "        for (ulong r = r0; r < r1; r++) {\n"
    "        const ulong n = r * cols + c + offset;\n"
    "        (void)n;\n";

/* Row-vector inputs do not change along a column: loaded before the rows. */
static int per_column(const oclf_xnode *n, const oclf_expr_decl *inputs)
{
    return n->op == XOP_INPUT && inputs[n->input].kind == OCLF_EXPR_ROW;
}

static void operand(char *buf, size_t len, const oclf_xgraph *g, const oclf_expr_decl *inputs,
                    int k, int fused)
{
    const oclf_xnode *n = &g->node[k];
    if (fused || n->op > XOP_CONST) {
        if (fused)
            snprintf(buf, len, "v%d", k);
        else
            snprintf(buf, len, "t%d[r * cols + c]", k);
        return;
    }
    if (n->op == XOP_CONST) {
        snprintf(buf, len, "%af", (double)n->value);
        return;
    }
    oclf_xbuf t = {0};
    emit_load(&t, inputs, n->input, 0);
    snprintf(buf, len, "%s", t.failed || !t.s ? "0.0f" : t.s);
    free(t.s);
}

/* The operand x when node k is log(exp(x) + 1) (either order of the sum):
 * the fused kernel computes it as max(x, 0) + log1p(exp(-|x|)), which
 * never overflows and is cheaper on vectors; else -1. */
static int softplus_arg(const oclf_xgraph *g, int k)
{
    const oclf_xnode *n = &g->node[k];
    if (n->op != XOP_LOG || g->node[n->a[0]].op != XOP_ADD)
        return -1;
    const oclf_xnode *s = &g->node[n->a[0]];
    for (int i = 0; i < 2; i++) {
        const oclf_xnode *e = &g->node[s->a[i]], *one = &g->node[s->a[1 - i]];
        if (e->op == XOP_EXP && one->op == XOP_CONST && one->value == 1.0f)
            return e->a[0];
    }
    return -1;
}

/* Nodes the fused kernel evaluates: those an output needs, through the
 * rewritten operations' own operands (a softplus needs x, not exp(x)). */
static void fused_needs(const oclf_xgraph *g, char need[OCLF_EXPR_MAX_NODES])
{
    memset(need, 0, OCLF_EXPR_MAX_NODES);
    for (int j = 0; j < g->n_outputs; j++)
        need[g->output[j]] = 1;
    for (int k = g->n_nodes - 1; k >= 0; k--) {
        if (!need[k])
            continue;
        const int sp = softplus_arg(g, k);
        if (sp >= 0)
            need[sp] = 1;
        else
            for (int a = 0; a < oclf_xop_arity(g->node[k].op); a++)
                need[g->node[k].a[a]] = 1;
    }
}

static void emit_value(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs, int k,
                       int fused)
{
    const oclf_xnode *n = &g->node[k];
    oclf_xbuf_printf(b, "        const float v%d = ", k);
    if (n->op == XOP_INPUT)
        emit_load(b, inputs, n->input, fused);
    else if (n->op == XOP_CONST)
        oclf_xbuf_printf(b, "%af", (double)n->value);
    else if (fused && softplus_arg(g, k) >= 0) {
        const int x = softplus_arg(g, k);
        oclf_xbuf_printf(b, "(v%d < 0.0f ? 0.0f : v%d) + log1p(exp(-fabs(v%d)))", x, x, x);
    } else {
        char s[3][160] = {"", "", ""};
        for (int a = 0; a < oclf_xop_arity(n->op); a++)
            operand(s[a], sizeof s[a], g, inputs, n->a[a], fused);
        /* Operands in parentheses: each is one value, whatever it spells. */
        char p[3][170];
        for (int a = 0; a < 3; a++)
            snprintf(p[a], sizeof p[a], "(%.160s)", s[a]);
        emit_op(b, n, p[0], p[1], p[2]);
    }
    oclf_xbuf_printf(b, ";\n");
}

/* ---- whole vectors (fused path, OCLF_VEC > 1) ---- */

static void emit_vload(oclf_xbuf *b, const oclf_expr_decl *inputs, int i)
{
    const oclf_expr_decl *in = &inputs[i];
    if (in->kind == OCLF_EXPR_SCALAR || in->kind == OCLF_EXPR_COL) {
        oclf_xbuf_printf(b, "(xf)(");
        emit_load(b, inputs, i, 1);
        oclf_xbuf_printf(b, ")");
        return;
    }
    if (in->kind == OCLF_EXPR_BITS) {
        oclf_xbuf_printf(b, "x_unbits_v(wb%d, (uint)(c & 31))", i);
        return;
    }
    const char *pre = in->dtype == OCLF_F32 ? "XLOAD(" : in->dtype == OCLF_F16 ? "XLOADH(" : "XBF16(XLOADU(";
    oclf_xbuf_printf(b, "%sin%d + (", pre, i);
    index_of(b, in, i);
    oclf_xbuf_printf(b, ")%s", in->dtype == OCLF_BF16 ? "))" : ")");
}

static void emit_vstore(oclf_xbuf *b, oclf_dtype d, int j, int k)
{
    const char *st = d == OCLF_F32 ? "XSTORE(v%d" : d == OCLF_F16 ? "XSTOREH(v%d" : "XSTOREU(x_to_bf16(v%d)";
    oclf_xbuf_printf(b, "        ");
    oclf_xbuf_printf(b, st, k);
    oclf_xbuf_printf(b, ", out%d + (out%d_o + r * out%d_s + c));\n", j, j, j);
}

static void emit_vvalue(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs, int k)
{
    const oclf_xnode *n = &g->node[k];
    oclf_xbuf_printf(b, "        const xf v%d = ", k);
    char a[16], bb[16], c[16];
    snprintf(a, sizeof a, "v%d", n->a[0]);
    snprintf(bb, sizeof bb, "v%d", n->a[1]);
    snprintf(c, sizeof c, "v%d", n->a[2]);
    /* Vector comparisons give -1 for true: select turns them into 1 or 0. */
    static const char *const cmp[] = {"<", "<=", ">", ">=", "==", "!="};
    switch (n->op) {
    case XOP_INPUT: emit_vload(b, inputs, n->input); break;
    case XOP_CONST: oclf_xbuf_printf(b, "(xf)(%af)", (double)n->value); break;
    case XOP_LT: case XOP_LE: case XOP_GT: case XOP_GE: case XOP_EQ: case XOP_NE:
        oclf_xbuf_printf(b, "select((xf)0.0f, (xf)1.0f, %s %s %s)", a, cmp[n->op - XOP_LT], bb);
        break;
    case XOP_SELECT: oclf_xbuf_printf(b, "select(%s, %s, %s != 0.0f)", c, bb, a); break;
    case XOP_RELU: oclf_xbuf_printf(b, "select(%s, (xf)0.0f, %s < 0.0f)", a, a); break;
    case XOP_EXP: oclf_xbuf_printf(b, "x_exp_v(%s)", a); break;
    case XOP_SIGMOID: oclf_xbuf_printf(b, "1.0f / (1.0f + x_exp_v(-%s))", a); break;
    case XOP_SILU: oclf_xbuf_printf(b, "%s / (1.0f + x_exp_v(-%s))", a, a); break;
    case XOP_LOG:
        if (softplus_arg(g, k) >= 0)
            oclf_xbuf_printf(b, "x_softplus_v(v%d)", softplus_arg(g, k));
        else
            oclf_xbuf_printf(b, "x_log_v(%s)", a);
        break;
    case XOP_ERF: oclf_xbuf_printf(b, "x_erf_v(%s)", a); break;
    case XOP_GELU:
        oclf_xbuf_printf(b, "0.5f * %s * (1.0f + x_erf_v(%s * 0.70710678118654752f))", a, a);
        break;
    case XOP_DROPOUT: oclf_xbuf_printf(b, "x_dropout_v(%s, %s, seed, n, %du)", a, bb, n->stream); break;
    default: {
        char p[3][24];
        snprintf(p[0], sizeof p[0], "(%s)", a);
        snprintf(p[1], sizeof p[1], "(%s)", bb);
        snprintf(p[2], sizeof p[2], "(%s)", c);
        emit_op(b, n, p[0], p[1], p[2]);
    }
    }
    oclf_xbuf_printf(b, ";\n");
}

/* The fused kernel of an expression with bit matrices: a work-item owns
 * whole 32-bit words, 32 columns of ROWS rows, so it alone writes each word
 * of a bits output; it reads each bits input's word of a row once. Whole
 * words go in VEC-wide vector pieces, a row's last partial word element by
 * element. */
static void emit_fused_words(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs,
                             unsigned n_inputs, const oclf_expr_decl *outputs, const char *need)
{
    oclf_xbuf_printf(b, "kernel void expr_fused(");
    emit_params(b, g, inputs, n_inputs, outputs, 0);
    oclf_xbuf_printf(b, ")\n"
                        "{\n"
                        "    const ulong nw = (cols + 31) / 32;\n"
                        "    const ulong gid = get_global_id(0);\n"
                        "    if (gid >= (rows + rpb - 1) / rpb * nw)\n"
                        "        return;\n"
                        "    const ulong rb = gid / nw, w = gid - rb * nw, c0 = w * 32;\n"
                        "    const ulong r0 = rb * rpb, r1 = min(r0 + rpb, rows);\n"
                        "    for (ulong r = r0; r < r1; r++) {\n");
    for (int k = 0; k < g->n_nodes; k++) {
        const oclf_xnode *n = &g->node[k];
        if (need[k] && n->op == XOP_INPUT && inputs[n->input].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "        const uint wb%d = in%d[in%d_o + r * in%d_s + w];\n",
                             n->input, n->input, n->input, n->input);
    }
    for (int j = 0; j < g->n_outputs; j++)
        if (outputs[j].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "        uint ob%d = 0u;\n", j);
    oclf_xbuf_printf(b, "#if OCLF_VEC > 1\n"
                        "        if (c0 + 32 <= cols) {\n"
                        "#pragma unroll\n"
                        "        for (uint k = 0; k < 32; k += OCLF_VEC) {\n"
                        "        const ulong c = c0 + k;\n"
                        "        const ulong n = r * cols + c + offset;\n"
                        "        (void)n;\n");
    for (int k = 0; k < g->n_nodes; k++)
        if (need[k])
            emit_vvalue(b, g, inputs, k);
    for (int j = 0; j < g->n_outputs; j++) {
        if (outputs[j].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "        ob%d |= x_bits_v(v%d) << k;\n", j, g->output[j]);
        else
            emit_vstore(b, outputs[j].dtype, j, g->output[j]);
    }
    oclf_xbuf_printf(b, "        }\n"
                        "        } else\n"
                        "#endif\n"
                        "        for (uint k = 0; k < 32 && c0 + k < cols; k++) {\n"
                        "        const ulong c = c0 + k;\n"
                        "        const ulong n = r * cols + c + offset;\n"
                        "        (void)n;\n");
    for (int k = 0; k < g->n_nodes; k++)
        if (need[k])
            emit_value(b, g, inputs, k, 1);
    for (int j = 0; j < g->n_outputs; j++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", g->output[j]);
        if (outputs[j].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "        ob%d |= (v%d != 0.0f ? 1u : 0u) << k;\n", j, g->output[j]);
        else
            emit_store(b, outputs[j].dtype, j, v);
    }
    oclf_xbuf_printf(b, "        }\n");
    for (int j = 0; j < g->n_outputs; j++)
        if (outputs[j].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "        out%d[out%d_o + r * out%d_s + w] = ob%d;\n", j, j, j, j);
    oclf_xbuf_printf(b, "    }\n}\n");
}

/* The unfused path's packing kernel: a work-item per word of every bits
 * output, reading 32 values from the operations' fp32 temporaries (or the
 * leaves themselves). */
static void emit_pack(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs,
                      unsigned n_inputs, const oclf_expr_decl *outputs)
{
    oclf_xbuf_printf(b, "kernel void expr_pack(");
    emit_params(b, g, inputs, n_inputs, outputs, 1);
    oclf_xbuf_printf(b, ")\n"
                        "{\n"
                        "    const ulong nw = (cols + 31) / 32;\n"
                        "    const ulong gid = get_global_id(0);\n"
                        "    if (gid >= rows * nw)\n"
                        "        return;\n"
                        "    const ulong r = gid / nw, w = gid - r * nw, c0 = w * 32;\n");
    for (int j = 0; j < g->n_outputs; j++)
        if (outputs[j].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "    uint ob%d = 0u;\n", j);
    oclf_xbuf_printf(b, "    for (uint k = 0; k < 32 && c0 + k < cols; k++) {\n"
                        "        const ulong c = c0 + k;\n");
    char done[OCLF_EXPR_MAX_NODES] = {0};
    for (int j = 0; j < g->n_outputs; j++) {
        const int k = g->output[j];
        if (outputs[j].kind != OCLF_EXPR_BITS)
            continue;
        if (g->node[k].op <= XOP_CONST) {
            if (!done[k])
                emit_value(b, g, inputs, k, 0);
            done[k] = 1;
            oclf_xbuf_printf(b, "        ob%d |= (v%d != 0.0f ? 1u : 0u) << k;\n", j, k);
        } else {
            oclf_xbuf_printf(b, "        ob%d |= (t%d[r * cols + c] != 0.0f ? 1u : 0u) << k;\n", j, k);
        }
    }
    oclf_xbuf_printf(b, "    }\n");
    /* Every word computed before any is stored: an output may be in place
     * on a bits input that another output copies. */
    for (int j = 0; j < g->n_outputs; j++)
        if (outputs[j].kind == OCLF_EXPR_BITS)
            oclf_xbuf_printf(b, "    out%d[out%d_o + r * out%d_s + w] = ob%d;\n", j, j, j, j);
    oclf_xbuf_printf(b, "}\n");
}

int oclf_expr_bits_output_node(const oclf_xgraph *g, const oclf_expr_decl *outputs, int k)
{
    for (int j = 0; j < g->n_outputs; j++)
        if (g->output[j] == k && outputs[j].kind == OCLF_EXPR_BITS)
            return 1;
    return 0;
}

static void emit_fused(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs,
                       unsigned n_inputs, const oclf_expr_decl *outputs, const char *need)
{
    oclf_xbuf_printf(b, "kernel void expr_fused(");
    emit_params(b, g, inputs, n_inputs, outputs, 0);
    oclf_xbuf_printf(b, ")\n%s", fused_head);
    for (int k = 0; k < g->n_nodes; k++)
        if (need[k] && per_column(&g->node[k], inputs))
            emit_vvalue(b, g, inputs, k);
    oclf_xbuf_printf(b, "%s", row_loop);
    for (int k = 0; k < g->n_nodes; k++)
        if (need[k] && !per_column(&g->node[k], inputs))
            emit_vvalue(b, g, inputs, k);
    for (int j = 0; j < g->n_outputs; j++)
        emit_vstore(b, outputs[j].dtype, j, g->output[j]);
    oclf_xbuf_printf(b, "        }\n        return;\n    }\n#endif\n%s", fused_tail);
    for (int k = 0; k < g->n_nodes; k++)
        if (need[k] && per_column(&g->node[k], inputs))
            emit_value(b, g, inputs, k, 1);
    oclf_xbuf_printf(b, "%s", row_loop);
    for (int k = 0; k < g->n_nodes; k++)
        if (need[k] && !per_column(&g->node[k], inputs))
            emit_value(b, g, inputs, k, 1);
    for (int j = 0; j < g->n_outputs; j++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", g->output[j]);
        emit_store(b, outputs[j].dtype, j, v);
    }
    oclf_xbuf_printf(b, "        }\n    }\n}\n");
}

/* Unfused: a kernel per operation, reading leaves from their buffers and
 * operations from their fp32 temporaries; bits outputs are left to
 * expr_pack, which reads their temporaries. */
static void emit_unfused(oclf_xbuf *b, const oclf_xgraph *g, const oclf_expr_decl *inputs,
                         unsigned n_inputs, const oclf_expr_decl *outputs)
{
    int leaf_outputs = 0;
    for (int k = 0; k < g->n_nodes; k++) {
        const oclf_xnode *n = &g->node[k];
        if (n->op <= XOP_CONST)
            continue;
        oclf_xbuf_printf(b, "kernel void expr_node%d(", k);
        emit_params(b, g, inputs, n_inputs, outputs, 1);
        oclf_xbuf_printf(b, ")\n%s", loop_head);
        emit_value(b, g, inputs, k, 0);
        if (n->uses || oclf_expr_bits_output_node(g, outputs, k))
            oclf_xbuf_printf(b, "        t%d[r * cols + c] = v%d;\n", k, k);
        for (int j = 0; j < g->n_outputs; j++) {
            char v[16];
            snprintf(v, sizeof v, "v%d", k);
            if (g->output[j] == k && outputs[j].kind != OCLF_EXPR_BITS)
                emit_store(b, outputs[j].dtype, j, v);
        }
        oclf_xbuf_printf(b, "    }\n}\n");
    }
    for (int j = 0; j < g->n_outputs; j++)
        leaf_outputs |= g->node[g->output[j]].op <= XOP_CONST && outputs[j].kind != OCLF_EXPR_BITS;
    if (leaf_outputs) {
        oclf_xbuf_printf(b, "kernel void expr_leaves(");
        emit_params(b, g, inputs, n_inputs, outputs, 1);
        oclf_xbuf_printf(b, ")\n%s", loop_head);
        /* Every load before any store: an output may be in place on an
         * input that another output copies. */
        char done[OCLF_EXPR_MAX_NODES] = {0};
        for (int j = 0; j < g->n_outputs; j++) {
            int k = g->output[j];
            if (outputs[j].kind == OCLF_EXPR_BITS)
                continue;
            if (g->node[k].op <= XOP_CONST && !done[k])
                emit_value(b, g, inputs, k, 0);
            done[k] = 1;
        }
        for (int j = 0; j < g->n_outputs; j++) {
            int k = g->output[j];
            if (g->node[k].op > XOP_CONST || outputs[j].kind == OCLF_EXPR_BITS)
                continue;
            char v[16];
            snprintf(v, sizeof v, "v%d", k);
            emit_store(b, outputs[j].dtype, j, v);
        }
        oclf_xbuf_printf(b, "    }\n}\n");
    }
}

void oclf_expr_codegen(const oclf_xgraph *g, const oclf_expr_decl *inputs, unsigned n_inputs,
                       const oclf_expr_decl *outputs, oclf_xbuf *b)
{
    oclf_xbuf_printf(b, "%s", prelude);
    const int words = oclf_expr_has_bits(inputs, n_inputs, outputs, (unsigned)g->n_outputs);
    if (words)
        oclf_xbuf_printf(b, "%s", bits_prelude);

    /* Fused: every node it needs once, in order, then every output. */
    char need[OCLF_EXPR_MAX_NODES];
    fused_needs(g, need);
    if (words)
        emit_fused_words(b, g, inputs, n_inputs, outputs, need);
    else
        emit_fused(b, g, inputs, n_inputs, outputs, need);
    emit_unfused(b, g, inputs, n_inputs, outputs);
    if (words)
        for (int j = 0; j < g->n_outputs; j++)
            if (outputs[j].kind == OCLF_EXPR_BITS) {
                emit_pack(b, g, inputs, n_inputs, outputs);
                break;
            }
}
