/* Reference for linear + cross-entropy (fp64 products of the stored
 * values). */
#include "ref.h"

#include <stdlib.h>

int oclf_ref_linear_cross_entropy(oclf_dtype dtype, size_t tokens, size_t hidden, size_t vocab,
                                  const void *x, size_t xs, const void *w, size_t ws,
                                  const int64_t *targets, int64_t ignore, int reduction,
                                  double eps, double softcap, double zl, const float *gup,
                                  double *loss_rows, double *lse, double *reduced,
                                  double *grad_x, double *grad_w)
{
    const size_t es = oclf_dtype_size(dtype);
    /* The logits as the device stores them: fp32 sums rounded once to the
     * dtype (the reference sums in fp64, then rounds). */
    void *z = malloc(tokens * vocab * es + 1);
    double *dz = (grad_x || grad_w) ? malloc((tokens * vocab + 1) * sizeof *dz) : NULL;
    if (!z || ((grad_x || grad_w) && !dz)) {
        free(z), free(dz);
        return -1;
    }
    for (size_t t = 0; t < tokens; t++)
        for (size_t v = 0; v < vocab; v++) {
            double acc = 0;
            for (size_t h = 0; h < hidden; h++)
                acc += (double)oclf_ref_get(dtype, x, t * xs + h) *
                       (double)oclf_ref_get(dtype, w, v * ws + h);
            oclf_ref_set(dtype, z, t * vocab + v, (float)acc);
        }
    oclf_ref_cross_entropy(dtype, tokens, vocab, z, vocab, targets, ignore, reduction, eps,
                           softcap, zl, gup, loss_rows, lse, reduced, dz);
    if (dz) {
        /* The gradient is stored over the logits, so the products read it
         * rounded to the dtype. */
        for (size_t i = 0; i < tokens * vocab; i++)
            dz[i] = oclf_ref_round(dtype, (float)dz[i]);
    }
    if (grad_x)
        for (size_t t = 0; t < tokens; t++)
            for (size_t h = 0; h < hidden; h++) {
                double acc = 0;
                for (size_t v = 0; v < vocab; v++)
                    acc += dz[t * vocab + v] * (double)oclf_ref_get(dtype, w, v * ws + h);
                grad_x[t * hidden + h] = acc;
            }
    if (grad_w)
        for (size_t v = 0; v < vocab; v++)
            for (size_t h = 0; h < hidden; h++) {
                double acc = 0;
                for (size_t t = 0; t < tokens; t++)
                    acc += dz[t * vocab + v] * (double)oclf_ref_get(dtype, x, t * xs + h);
                grad_w[v * hidden + h] = acc;
            }
    free(z), free(dz);
    return 0;
}
