/* L2 top-k: row norms, shared by the fused scan and the unfused path. */

/* ---- norms ---------------------------------------------------------------- */

#if OCLF_VEC == 1
#define VLOADQ(p) (*(p))
#else
#define VLOADQ(p) OCLF_CAT(vload, OCLF_VEC)(0, (p))
#endif

/* |x|^2 of one database row, for the unfused path. The fused scan computes
 * the same sum inside its register block from the vectors it loads anyway,
 * in this order (vector fma over whole VEC chunks, VSUM, scalar fma tail), so
 * duplicated rows get bit-identical norms on either path. */
static inline float x_norm(__global const stor_t *p, uint d)
{
    floatv a = VSPLAT(0.0f);
    uint c = 0;
    for (; c + OCLF_VEC <= d; c += OCLF_VEC) {
        floatv v = LDV(p, c);
        a = fma(v, v, a);
    }
    float s = VSUM(a);
    for (; c < d; c++) {
        float v = LD(p, c);
        s = fma(v, v, s);
    }
    return s;
}

/* |q|^2 of one query row, from global memory or from the scan's local copy:
 * one body, so both give the same bits. */
#define Q_NORM_BODY                                                            \
    floatv a = VSPLAT(0.0f);                                                   \
    uint c = 0;                                                                \
    for (; c + OCLF_VEC <= d; c += OCLF_VEC) {                                 \
        floatv v = VLOADQ(p + c);                                              \
        a = fma(v, v, a);                                                      \
    }                                                                          \
    float s = VSUM(a);                                                         \
    for (; c < d; c++) {                                                       \
        float v = p[c];                                                        \
        s = fma(v, v, s);                                                      \
    }                                                                          \
    return s;

static inline float q_norm(__global const float *p, uint d) { Q_NORM_BODY }
#if OCLF_QLOCAL
static inline float q_norm_local(__local const float *p, uint d) { Q_NORM_BODY }
#endif
