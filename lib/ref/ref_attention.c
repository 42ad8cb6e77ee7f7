/* Reference attention: fp64 from the stored inputs, each score and mask
 * written as the contract states them, the whole row at once (no online
 * softmax, no blocking). */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

static double head_get(oclf_dtype dt, const oclf_ref_heads *h, size_t t, size_t head, size_t i)
{
    return oclf_ref_get(dt, h->base, h->off + t * h->ts + head * h->hs + i);
}

/* 1 when query i sees key j of a sequence of sq queries and sk keys. */
static int visible(const oclf_ref_attention_args *a, int64_t i, int64_t j, int64_t sq, int64_t sk)
{
    const int64_t diag = i + sk - sq;
    if (a->causal && j > diag)
        return 0;
    if (a->window && a->left >= 0 && j < diag - a->left)
        return 0;
    if (a->window && a->right >= 0 && j > diag + a->right)
        return 0;
    return 1;
}

int oclf_ref_attention_keep(const oclf_ref_attention_args *a, uint64_t t, size_t h, int64_t j)
{
    const uint64_t c23 = (uint64_t)h + a->dropout_offset;
    const uint32_t ctr[4] = {(uint32_t)j, (uint32_t)t, (uint32_t)c23, (uint32_t)(c23 >> 32)};
    const uint32_t key[2] = {(uint32_t)a->dropout_seed, (uint32_t)(a->dropout_seed >> 32)};
    uint32_t w[4];
    oclf_ref_philox4x32_10(ctr, key, w);
    return (double)(w[0] >> 8) * 0x1.0p-24 >= (double)a->dropout_p;
}

void oclf_ref_attention(const oclf_ref_attention_args *a, size_t total_q, double *o, double *lse,
                        double *vmax)
{
    const size_t d = a->d, g = a->hq / a->hk;
    const double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)d);
    for (size_t b = 0; b < a->batch; b++) {
        const int64_t q0 = a->cu_q[b], sq = a->cu_q[b + 1] - q0;
        const int64_t k0 = a->cu_k[b], sk = a->cu_k[b + 1] - k0;
        double *s = malloc(((size_t)sk + 1) * sizeof *s);
        for (size_t h = 0; h < a->hq; h++) {
            const size_t kh = h / g;
            double vm = sk ? 0.0 : 1.0;
            for (int64_t j = 0; j < sk; j++)
                for (size_t e = 0; e < d; e++)
                    vm = fmax(vm, fabs(head_get(a->dtype, &a->v, (size_t)(k0 + j), kh, e)));
            for (int64_t i = 0; i < sq; i++) {
                const size_t t = (size_t)(q0 + i);
                double m = -INFINITY;
                for (int64_t j = 0; j < sk; j++) {
                    s[j] = NAN;
                    if (!visible(a, i, j, sq, sk))
                        continue;
                    double dot = 0;
                    for (size_t e = 0; e < d; e++)
                        dot += head_get(a->dtype, &a->q, t, h, e) *
                               head_get(a->dtype, &a->k, (size_t)(k0 + j), kh, e);
                    double x = scale * dot;
                    if (a->softcap > 0.0f)
                        x = (double)a->softcap * tanh(x / (double)a->softcap);
                    if (a->alibi)
                        x -= (double)a->alibi[h] * fabs((double)(i + sk - sq - j));
                    s[j] = x;
                    m = fmax(m, x);
                }
                if (a->sinks)
                    m = fmax(m, (double)a->sinks[h]);
                double l = 0;
                if (m > -INFINITY) {
                    for (int64_t j = 0; j < sk; j++)
                        if (!isnan(s[j]))
                            l += exp(s[j] - m);
                    if (a->sinks)
                        l += exp((double)a->sinks[h] - m);
                }
                double *out = o + (t * a->hq + h) * d;
                /* dropout: the kept probabilities scaled, after the sum */
                const double dscale = 1.0 / (1.0 - (double)a->dropout_p);
                if (a->dropout_p > 0.0f)
                    for (int64_t j = 0; j < sk; j++)
                        if (!isnan(s[j]) && !oclf_ref_attention_keep(a, t, h, j))
                            s[j] = -INFINITY;
                for (size_t e = 0; e < d; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < sk; j++)
                        if (!isnan(s[j]))
                            acc += exp(s[j] - m) * head_get(a->dtype, &a->v, (size_t)(k0 + j), kh, e) *
                                   (a->dropout_p > 0.0f ? dscale : 1.0);
                    out[e] = l > 0 ? acc / l : 0.0;
                }
                if (lse)
                    lse[h * total_q + t] = l > 0 ? m + log(l) : -INFINITY;
                if (vmax) /* the tolerance's scale grows with dropout's */
                    vmax[t * a->hq + h] = a->dropout_p > 0.0f ? vm * dscale : vm;
            }
        }
        free(s);
    }
}

static double attention_tol(oclf_dtype dt)
{
    return dt == OCLF_F32 ? 2e-5 : dt == OCLF_F16 ? 2e-3 : 1.6e-2;
}

size_t oclf_ref_attention_compare(oclf_dtype dtype, const void *got, size_t off, size_t ts,
                                  size_t hs, size_t total_q, size_t hq, size_t d,
                                  const double *ref, const double *vmax, size_t *first_bad,
                                  double *max_err)
{
    const double tol = attention_tol(dtype);
    size_t bad = 0;
    double worst = 0;
    for (size_t t = 0; t < total_q; t++)
        for (size_t h = 0; h < hq; h++) {
            const double lim = tol * (1.0 + vmax[t * hq + h]);
            for (size_t e = 0; e < d; e++) {
                const double g = oclf_ref_get(dtype, got, off + t * ts + h * hs + e);
                const double err = fabs(g - ref[(t * hq + h) * d + e]);
                if (!(err <= lim)) {
                    if (!bad && first_bad)
                        *first_bad = (t * hq + h) * d + e;
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

size_t oclf_ref_attention_lse_compare(oclf_dtype dtype, const float *got, size_t ls,
                                      size_t total_q, size_t hq, const double *ref,
                                      size_t *first_bad, double *max_err)
{
    const double tol = attention_tol(dtype);
    size_t bad = 0;
    double worst = 0;
    for (size_t h = 0; h < hq; h++)
        for (size_t t = 0; t < total_q; t++) {
            const double g = got[h * ls + t], r = ref[h * total_q + t];
            double err = isinf(r) ? (g == r ? 0.0 : INFINITY) : fabs(g - r);
            if (isnan(err))
                err = INFINITY;
            if (!(err <= tol)) {
                if (!bad && first_bad)
                    *first_bad = h * total_q + t;
                bad++;
            }
            if (err > worst)
                worst = err;
        }
    if (max_err)
        *max_err = worst;
    return bad;
}
