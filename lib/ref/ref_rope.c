/* Reference rotary embedding and QK-norm + RoPE: fp64 from the stored
 * inputs and the stored cache. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rotates head h (hd doubles) by the cache row of position p; sign -1
 * turns the other way (the gradient of the rotation). */
static void rotate_by(double *h, const oclf_ref_rope *r, int64_t p, double sign)
{
    const size_t half = r->rot / 2, row = (size_t)p * r->cs;
    for (size_t j = 0; j < half; j++) {
        const size_t ix = r->gptj ? 2 * j : j, iy = r->gptj ? 2 * j + 1 : j + half;
        const double c = oclf_ref_get(r->cdtype, r->cache, row + j);
        const double s = sign * oclf_ref_get(r->cdtype, r->cache, row + half + j);
        const double x = h[ix], y = h[iy];
        h[ix] = x * c - y * s;
        h[iy] = y * c + x * s;
    }
}

static void rotate(double *h, const oclf_ref_rope *r, int64_t p) { rotate_by(h, r, p, 1.0); }

static int valid(const oclf_ref_rope *r, int64_t p) { return p >= 0 && (uint64_t)p < r->max_pos; }

static void rotary_dir(oclf_dtype dtype, size_t tokens, size_t nh, const void *x, size_t ts,
                       size_t hs, const oclf_ref_rope *r, double *y, double sign)
{
    for (size_t t = 0; t < tokens; t++)
        for (size_t h = 0; h < nh; h++) {
            double *o = y + (t * nh + h) * r->hd;
            for (size_t i = 0; i < r->hd; i++)
                o[i] = oclf_ref_get(dtype, x, t * ts + h * hs + i);
            if (valid(r, r->pos[t]))
                rotate_by(o, r, r->pos[t], sign);
        }
}

void oclf_ref_rotary(oclf_dtype dtype, size_t tokens, size_t nh, const void *x, size_t ts,
                     size_t hs, const oclf_ref_rope *r, double *y)
{
    rotary_dir(dtype, tokens, nh, x, ts, hs, r, y, 1.0);
}

void oclf_ref_rotary_backward(oclf_dtype dtype, size_t tokens, size_t nh, const void *x,
                              size_t ts, size_t hs, const oclf_ref_rope *r, double *y)
{
    rotary_dir(dtype, tokens, nh, x, ts, hs, r, y, -1.0);
}

void oclf_ref_qk_norm_rope(oclf_dtype dtype, size_t tokens, size_t nq, size_t nk, size_t nv,
                           const void *qkv, size_t ts, const void *qw, const void *kw, float eps,
                           const oclf_ref_rope *r, double *y)
{
    const size_t hd = r->hd, nh = nq + nk + nv;
    for (size_t t = 0; t < tokens; t++)
        for (size_t h = 0; h < nh; h++) {
            double *o = y + (t * nh + h) * hd;
            double ss = 0;
            for (size_t i = 0; i < hd; i++) {
                o[i] = oclf_ref_get(dtype, qkv, t * ts + h * hd + i);
                ss += o[i] * o[i];
            }
            if (h >= nq + nk || !valid(r, r->pos[t]))
                continue;
            const void *w = h < nq ? qw : kw;
            const double inv = 1.0 / sqrt(ss / (double)hd + (double)eps);
            for (size_t i = 0; i < hd; i++)
                o[i] *= inv * (w ? oclf_ref_get(dtype, w, i) : 1.0);
            rotate(o, r, r->pos[t]);
        }
}
