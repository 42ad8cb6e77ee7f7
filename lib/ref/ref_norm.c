/* Reference normalization: fp64 accumulation, two-pass variance. */
#include "ref.h"

#include <math.h>

void oclf_ref_rms_norm(oclf_dtype dtype, size_t rows, size_t cols, const void *x, size_t xs,
                       const void *w, float eps, double *y)
{
    for (size_t r = 0; r < rows; r++) {
        double ss = 0;
        for (size_t c = 0; c < cols; c++) {
            double v = oclf_ref_get(dtype, x, r * xs + c);
            ss += v * v;
        }
        double inv = 1.0 / sqrt(ss / (double)cols + (double)eps);
        for (size_t c = 0; c < cols; c++)
            y[r * cols + c] = oclf_ref_get(dtype, x, r * xs + c) * inv *
                              (w ? oclf_ref_get(dtype, w, c) : 1.0);
    }
}

void oclf_ref_layer_norm(oclf_dtype dtype, size_t rows, size_t cols, const void *x, size_t xs,
                         const void *w, const void *b, float eps, double *y)
{
    for (size_t r = 0; r < rows; r++) {
        double s = 0, q = 0;
        for (size_t c = 0; c < cols; c++)
            s += oclf_ref_get(dtype, x, r * xs + c);
        double mean = s / (double)cols;
        for (size_t c = 0; c < cols; c++) {
            double d = oclf_ref_get(dtype, x, r * xs + c) - mean;
            q += d * d;
        }
        double inv = 1.0 / sqrt(q / (double)cols + (double)eps);
        for (size_t c = 0; c < cols; c++)
            y[r * cols + c] = (oclf_ref_get(dtype, x, r * xs + c) - mean) * inv *
                                  (w ? oclf_ref_get(dtype, w, c) : 1.0) +
                              (b ? oclf_ref_get(dtype, b, c) : 0.0);
    }
}

void oclf_ref_add_rows(oclf_dtype dtype, size_t rows, size_t cols, const void *in, size_t is,
                       void *res, size_t rs)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            /* fp32 sum, rounded once to storage: what the kernels store */
            float z = oclf_ref_get(dtype, in, r * is + c) + oclf_ref_get(dtype, res, r * rs + c);
            oclf_ref_set(dtype, res, r * rs + c, z);
        }
}
