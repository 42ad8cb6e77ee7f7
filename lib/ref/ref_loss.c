/* Reference softmax cross-entropy: fp64 from the stored logits. */
#include "ref.h"

#include <math.h>

void oclf_ref_cross_entropy(oclf_dtype dtype, size_t rows, size_t cols, const void *x, size_t xs,
                            const int64_t *targets, int64_t ignore, int reduction, double eps,
                            double softcap, double zl, const float *gup, double *loss_rows,
                            double *lse_out, double *reduced, double *grad)
{
    double total = 0;
    size_t count = 0;
    for (size_t r = 0; r < rows; r++)
        count += targets[r] != ignore;
    for (size_t r = 0; r < rows; r++) {
        const int64_t t = targets[r];
        const int ignored = t == ignore;
        double m = -INFINITY, sz = 0;
        for (size_t c = 0; c < cols; c++) {
            double z = oclf_ref_get(dtype, x, r * xs + c);
            if (softcap > 0)
                z = softcap * tanh(z / softcap);
            if (z > m)
                m = z;
            sz += z;
        }
        double s = 0;
        for (size_t c = 0; c < cols; c++) {
            double z = oclf_ref_get(dtype, x, r * xs + c);
            if (softcap > 0)
                z = softcap * tanh(z / softcap);
            s += exp(z - m);
        }
        const double lse = m + log(s);
        double zt = 0;
        if (!ignored) {
            zt = oclf_ref_get(dtype, x, r * xs + (size_t)t);
            if (softcap > 0)
                zt = softcap * tanh(zt / softcap);
        }
        /* eps = 0 leaves the smoothing term out (a -inf logit makes sz -inf) */
        const double smooth = eps > 0 ? eps * (lse - sz / (double)cols) : 0.0;
        const double l = ignored ? 0.0 : (1 - eps) * (lse - zt) + smooth + zl * lse * lse;
        if (loss_rows)
            loss_rows[r] = l;
        if (lse_out)
            lse_out[r] = lse;
        total += l;
        if (!grad)
            continue;
        double g = ignored ? 0.0 : (gup ? gup[reduction == 0 ? r : 0] : 1.0);
        if (reduction == 2 && !ignored)
            g /= (double)count;
        for (size_t c = 0; c < cols; c++) {
            const double xv = oclf_ref_get(dtype, x, r * xs + c);
            double z = xv, dz = 1;
            if (softcap > 0) {
                z = softcap * tanh(xv / softcap);
                dz = 1 - (z / softcap) * (z / softcap);
            }
            const double p = exp(z - lse);
            const double d = p * (1 + 2 * zl * lse) - (!ignored && (size_t)t == c ? 1 - eps : 0) -
                             eps / (double)cols;
            grad[r * cols + c] = g * d * dz;
        }
    }
    if (reduced)
        *reduced = reduction == 2 ? (count ? total / (double)count : NAN) : total;
}
