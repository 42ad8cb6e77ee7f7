/* Reference L2 top-k: all distances in fp64, then a full sort per query. */
#include "ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

typedef struct cand {
    double d;
    int64_t i;
} cand;

/* NaN after every number, then the smaller index. */
static int cand_cmp(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    int an = isnan(a->d), bn = isnan(b->d);
    if (an != bn)
        return an - bn;
    if (!an && a->d != b->d)
        return a->d < b->d ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

void oclf_ref_l2_dists(oclf_dtype dtype, size_t n, size_t d, const float *q, const void *x,
                       size_t xs, double *out)
{
    for (size_t r = 0; r < n; r++) {
        double s = 0;
        for (size_t c = 0; c < d; c++) {
            double t = (double)q[c] - (double)oclf_ref_get(dtype, x, r * xs + c);
            s += t * t;
        }
        out[r] = s;
    }
}

void oclf_ref_l2_topk_allowed(oclf_dtype dtype, size_t nq, size_t n, size_t d, size_t k,
                              const float *q, size_t qs, const void *x, size_t xs,
                              const uint8_t *allowed, double *dist, int64_t *idx)
{
    double *all = malloc((n + 1) * sizeof *all);
    cand *c = malloc((n + 1) * sizeof *c);
    for (size_t qi = 0; qi < nq; qi++) {
        oclf_ref_l2_dists(dtype, n, d, q + qi * qs, x, xs, all);
        size_t m = 0;
        for (size_t r = 0; r < n; r++)
            if (!allowed || (allowed[r / 8] >> (r % 8) & 1))
                c[m++] = (cand){all[r], (int64_t)r};
        qsort(c, m, sizeof *c, cand_cmp);
        for (size_t e = 0; e < k; e++) {
            dist[qi * k + e] = e < m ? c[e].d : (double)FLT_MAX;
            idx[qi * k + e] = e < m ? c[e].i : -1;
        }
    }
    free(all);
    free(c);
}

void oclf_ref_l2_topk(oclf_dtype dtype, size_t nq, size_t n, size_t d, size_t k, const float *q,
                      size_t qs, const void *x, size_t xs, double *dist, int64_t *idx)
{
    oclf_ref_l2_topk_allowed(dtype, nq, n, d, k, q, qs, x, xs, NULL, dist, idx);
}

void oclf_ref_l2_merge(size_t nq, size_t k, size_t lists, const float *const *dists,
                       const int64_t *const *ids, const size_t *list_k, float *dist,
                       int64_t *idx)
{
    size_t total = 0;
    for (size_t j = 0; j < lists; j++)
        total += list_k[j];
    cand *c = malloc((total + 1) * sizeof *c);
    for (size_t qi = 0; qi < nq; qi++) {
        size_t m = 0;
        for (size_t j = 0; j < lists; j++)
            for (size_t e = 0; e < list_k[j]; e++)
                if (ids[j][qi * list_k[j] + e] >= 0)
                    c[m++] = (cand){dists[j][qi * list_k[j] + e], ids[j][qi * list_k[j] + e]};
        qsort(c, m, sizeof *c, cand_cmp);
        for (size_t e = 0; e < k; e++) {
            dist[qi * k + e] = e < m ? (float)c[e].d : FLT_MAX;
            idx[qi * k + e] = e < m ? c[e].i : -1;
        }
    }
    free(c);
}
