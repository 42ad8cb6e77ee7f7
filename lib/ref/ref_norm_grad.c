/* Reference normalization backward: fp64 throughout, two-pass statistics. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

void oclf_ref_norm_backward(oclf_dtype dtype, int ln, size_t rows, size_t cols, const void *x,
                            size_t xs, const void *dy, size_t dys, const void *w,
                            const void *dres, size_t drs, float eps, double *dx, double *dw,
                            double *db)
{
    for (size_t c = 0; c < cols; c++) {
        if (dw)
            dw[c] = 0;
        if (db)
            db[c] = 0;
    }
    const double n = (double)cols;
    for (size_t r = 0; r < rows; r++) {
        double mean = 0, q = 0;
        if (ln) {
            for (size_t c = 0; c < cols; c++)
                mean += oclf_ref_get(dtype, x, r * xs + c);
            mean /= n;
        }
        for (size_t c = 0; c < cols; c++) {
            const double d = oclf_ref_get(dtype, x, r * xs + c) - mean;
            q += d * d;
        }
        const double rstd = 1.0 / sqrt(q / n + (double)eps);
        double sg = 0, sgx = 0;
        for (size_t c = 0; c < cols; c++) {
            const double wv = w ? oclf_ref_get(dtype, w, c) : 1.0;
            const double g = oclf_ref_get(dtype, dy, r * dys + c) * wv;
            const double xh = (oclf_ref_get(dtype, x, r * xs + c) - mean) * rstd;
            sg += g;
            sgx += g * xh;
        }
        const double mg = ln ? sg / n : 0.0, mgx = sgx / n;
        for (size_t c = 0; c < cols; c++) {
            const double wv = w ? oclf_ref_get(dtype, w, c) : 1.0;
            const double d = oclf_ref_get(dtype, dy, r * dys + c);
            const double xh = (oclf_ref_get(dtype, x, r * xs + c) - mean) * rstd;
            double v = rstd * (d * wv - mg - xh * mgx);
            if (dres)
                v += oclf_ref_get(dtype, dres, r * drs + c);
            if (dx)
                dx[r * cols + c] = v;
            if (dw)
                dw[c] += d * xh;
            if (db)
                db[c] += d;
        }
    }
}
