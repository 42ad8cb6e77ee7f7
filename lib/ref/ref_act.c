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
