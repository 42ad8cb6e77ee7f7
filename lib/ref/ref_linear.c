/* Reference linear layer: fp64 from the stored inputs. */
#include "ref.h"

#include <math.h>

double oclf_ref_linear_act(oclf_linear_act act, double t)
{
    switch (act) {
    case OCLF_LINEAR_NONE: return t;
    case OCLF_LINEAR_RELU: return t < 0.0 ? 0.0 : t;
    case OCLF_LINEAR_GELU: return 0.5 * t * (1.0 + erf(t / sqrt(2.0)));
    case OCLF_LINEAR_GELU_TANH:
        return 0.5 * t * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) *
                                     (t + 0.044715 * t * t * t)));
    case OCLF_LINEAR_SILU: return t / (1.0 + exp(-t));
    default: return NAN;
    }
}

void oclf_ref_linear(const oclf_ref_linear_args *a, double *y, double *scale)
{
    const oclf_dtype dt = a->dtype;
    for (size_t i = 0; i < a->m; i++)
        for (size_t j = 0; j < a->n; j++) {
            double acc = 0.0, s = 0.0;
            for (size_t c = 0; c < a->k; c++) {
                const double xv =
                    oclf_ref_linear_act(a->prologue, oclf_ref_get(dt, a->x, i * a->xs + c));
                const size_t wi = a->layout == OCLF_WEIGHT_NK ? j * a->ws + c : c * a->ws + j;
                const double p = xv * (a->wd ? a->wd[j * a->k + c] : oclf_ref_get(dt, a->w, wi));
                acc += p;
                s += fabs(p);
            }
            double t = (double)a->alpha * acc;
            double mag = fabs((double)a->alpha) * s;
            if (a->bias) {
                const double b = oclf_ref_get(dt, a->bias, j);
                t += b;
                mag += fabs(b);
            }
            double r = 0.0;
            if (a->residual) {
                r = (double)a->beta * oclf_ref_get(dt, a->residual, i * a->rs + j);
                mag += fabs(r);
            }
            if (a->residual_before_act)
                t += r;
            t = oclf_ref_linear_act(a->act, t);
            if (!a->residual_before_act)
                t += r;
            y[i * a->n + j] = t;
            if (scale)
                scale[i * a->n + j] = mag;
        }
}

size_t oclf_ref_linear_compare(oclf_dtype dtype, const void *got, size_t gs, const double *ref,
                               const double *scale, size_t rows, size_t cols, size_t *first_bad,
                               double *max_err)
{
    const double tol = dtype == OCLF_F32 ? 1e-5 : dtype == OCLF_F16 ? 2e-3 : 1.6e-2;
    size_t bad = 0;
    double worst = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const double g = oclf_ref_get(dtype, got, r * gs + c), w = ref[r * cols + c];
            if (isnan(w) && isnan(g))
                continue;
            const double err = fabs(g - w);
            if (!(err <= tol * (fabs(w) + scale[r * cols + c]))) {
                if (!bad && first_bad)
                    *first_bad = r * cols + c;
                bad++;
            }
            if (err > worst || isnan(err))
                worst = err;
        }
    if (max_err)
        *max_err = worst;
    return bad;
}

/* Bytes of one GGUF block and the f16 d at its start. */
static double gguf_d(const uint8_t *block)
{
    return oclf_f16_to_f32((uint16_t)(block[0] | (unsigned)block[1] << 8));
}

void oclf_ref_dequant(const oclf_ref_qweight *w, size_t n, size_t k, double *out)
{
    for (size_t r = 0; r < n; r++) {
        const uint8_t *q = w->q + r * w->qs;
        for (size_t c = 0; c < k; c++) {
            double v = 0.0;
            const size_t g = w->group ? c / w->group : 0;
            double s = 0.0;
            if (w->format == OCLF_QFORMAT_INT8 || w->format == OCLF_QFORMAT_INT4)
                s = oclf_ref_get(w->scale_dtype, w->scale, r * w->ss + (w->group ? g : 0));
            switch (w->format) {
            case OCLF_QFORMAT_INT8: v = (double)(int8_t)q[c] * s; break;
            case OCLF_QFORMAT_INT4: {
                const unsigned nib = c % 2 ? q[c / 2] >> 4 : q[c / 2] & 15u;
                const double z = w->zero ? (double)w->zero[r * w->zs + g] : 8.0;
                v = ((double)nib - z) * s;
                break;
            }
            case OCLF_QFORMAT_Q8_0: {
                const uint8_t *b = q + (c / 32) * 34;
                v = (double)(int8_t)b[2 + c % 32] * gguf_d(b);
                break;
            }
            case OCLF_QFORMAT_Q4_0: {
                const uint8_t *b = q + (c / 32) * 18;
                const size_t j = c % 32;
                const unsigned nib = j < 16 ? b[2 + j] & 15u : b[2 + j - 16] >> 4;
                v = ((double)nib - 8.0) * gguf_d(b);
                break;
            }
            default: break;
            }
            out[r * k + c] = v;
        }
    }
}
