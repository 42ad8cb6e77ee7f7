/* Reference activation-and-multiply: fp64 from the stored inputs. */
#include "ref.h"

#include <math.h>

static double act_one(const oclf_activation *a, double x)
{
    switch (a->kind) {
    case OCLF_ACT_SILU: return x / (1.0 + exp(-x));
    case OCLF_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case OCLF_ACT_GELU_TANH:
        /* x sigmoid(2z), equal to 0.5 x (1 + tanh z) without its cancellation */
        return x / (1.0 + exp(-2.0 * sqrt(2.0 / 3.14159265358979323846) *
                              (x + 0.044715 * x * x * x)));
    case OCLF_ACT_FATRELU: return x > (double)a->threshold ? x : 0.0;
    default: return NAN;
    }
}

void oclf_ref_act_and_mul(oclf_dtype dtype, const oclf_activation *act, size_t rows, size_t d,
                          const void *in, size_t is, double *out)
{
    const double alpha = act->alpha, limit = act->limit;
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < d; i++) {
            double v;
            if (act->kind == OCLF_ACT_SWIGLU_OAI) {
                double g = oclf_ref_get(dtype, in, r * is + 2 * i);
                double u = oclf_ref_get(dtype, in, r * is + 2 * i + 1);
                g = g > limit ? limit : g;
                u = u > limit ? limit : u < -limit ? -limit : u;
                v = (u + 1.0) * g / (1.0 + exp(-alpha * g));
            } else {
                double x = oclf_ref_get(dtype, in, r * is + i);
                double y = oclf_ref_get(dtype, in, r * is + d + i);
                v = act->act_on_second ? x * act_one(act, y) : act_one(act, x) * y;
            }
            out[r * d + i] = v;
        }
    }
}

/* act'(x), from the closed forms (not from act_one's code). */
static double act_slope(const oclf_activation *a, double x)
{
    const double pi = 3.14159265358979323846;
    switch (a->kind) {
    case OCLF_ACT_SILU: {
        const double s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 + x * (1.0 - s));
    }
    case OCLF_ACT_GELU:
        return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * pi);
    case OCLF_ACT_GELU_TANH: {
        /* d/dx 0.5 x (1 + tanh u), u = k (x + c x^3) */
        const double k = sqrt(2.0 / pi), u = k * (x + 0.044715 * x * x * x);
        const double t = tanh(u);
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x);
    }
    case OCLF_ACT_FATRELU: return x > (double)a->threshold ? 1.0 : 0.0;
    default: return NAN;
    }
}

void oclf_ref_act_and_mul_backward(oclf_dtype dtype, const oclf_activation *act, size_t rows,
                                   size_t d, const void *in, size_t is, const void *dout,
                                   size_t gs, double *din)
{
    const double alpha = act->alpha, limit = act->limit;
    for (size_t r = 0; r < rows; r++) {
        double *o = din + r * 2 * d;
        for (size_t i = 0; i < d; i++) {
            const double go = oclf_ref_get(dtype, dout, r * gs + i);
            if (act->kind == OCLF_ACT_SWIGLU_OAI) {
                const double g = oclf_ref_get(dtype, in, r * is + 2 * i);
                const double u = oclf_ref_get(dtype, in, r * is + 2 * i + 1);
                const double gc = g > limit ? limit : g;
                const double uc = u > limit ? limit : u < -limit ? -limit : u;
                const double s = 1.0 / (1.0 + exp(-alpha * gc));
                const double dglu = g > limit ? 0.0 : s + alpha * gc * s * (1.0 - s);
                o[2 * i] = go * (uc + 1.0) * dglu;
                /* the clamp passes no gradient outside [-limit, limit]; a NaN
                 * up is inside no bound, and its gradient is NaN */
                o[2 * i + 1] = isnan(u) ? NAN : (u > limit || u < -limit) ? 0.0 : go * gc * s;
            } else {
                const size_t xi = act->act_on_second ? d + i : i, yi = act->act_on_second ? i : d + i;
                const double x = oclf_ref_get(dtype, in, r * is + xi);
                const double y = oclf_ref_get(dtype, in, r * is + yi);
                o[xi] = go * y * act_slope(act, x);
                o[yi] = go * act_one(act, x);
            }
        }
    }
}
