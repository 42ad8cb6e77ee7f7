/* Host-side storage conversions and the comparison used by every test. */
#include "ref.h"

#include <math.h>
#include <string.h>

uint16_t oclf_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float oclf_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t oclf_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
        float af;
        memcpy(&af, &a, 4);
        /* af * 2^24 is the subnormal mantissa; rint rounds to nearest even */
        uint32_t m = (uint32_t)rintf(af * 16777216.0f);
        return (uint16_t)(sign | m);
    }
    uint32_t mant = a & 0x7fffffu;
    uint32_t exp = (a >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

float oclf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
    if (exp == 0) {
        float f = (float)mant * (1.0f / 16777216.0f);
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float oclf_ref_get(oclf_dtype dtype, const void *base, size_t i)
{
    switch (dtype) {
    case OCLF_F32: return ((const float *)base)[i];
    case OCLF_F16: return oclf_f16_to_f32(((const uint16_t *)base)[i]);
    case OCLF_BF16: return oclf_bf16_to_f32(((const uint16_t *)base)[i]);
    default: return NAN;
    }
}

void oclf_ref_set(oclf_dtype dtype, void *base, size_t i, float v)
{
    switch (dtype) {
    case OCLF_F32: ((float *)base)[i] = v; break;
    case OCLF_F16: ((uint16_t *)base)[i] = oclf_f32_to_f16(v); break;
    case OCLF_BF16: ((uint16_t *)base)[i] = oclf_f32_to_bf16(v); break;
    default: break;
    }
}

float oclf_ref_round(oclf_dtype dtype, float v)
{
    uint16_t h;
    switch (dtype) {
    case OCLF_F16: h = oclf_f32_to_f16(v); return oclf_f16_to_f32(h);
    case OCLF_BF16: h = oclf_f32_to_bf16(v); return oclf_bf16_to_f32(h);
    default: return v;
    }
}

void oclf_ref_tolerance(oclf_dtype dtype, double *atol, double *rtol)
{
    switch (dtype) {
    case OCLF_F16: *atol = 2e-3, *rtol = 2e-3; break;
    case OCLF_BF16: *atol = 1e-2, *rtol = 1.6e-2; break;
    default: *atol = 1e-5, *rtol = 1e-5; break;
    }
}

size_t oclf_ref_compare(oclf_dtype dtype, const void *got, size_t gs, const double *ref,
                        size_t rows, size_t cols, size_t *first_bad, double *max_err)
{
    double atol, rtol, worst = 0;
    oclf_ref_tolerance(dtype, &atol, &rtol);
    size_t bad = 0;
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            double g = oclf_ref_get(dtype, got, r * gs + c), e = ref[r * cols + c];
            if (isnan(g) && isnan(e))
                continue;
            double err = fabs(g - e);
            if (!(err <= atol + rtol * fabs(e))) {
                if (bad == 0 && first_bad)
                    *first_bad = r * cols + c;
                bad++;
            }
            if (err > worst || isnan(err))
                worst = isnan(err) ? INFINITY : err;
        }
    }
    if (max_err)
        *max_err = worst;
    return bad;
}
