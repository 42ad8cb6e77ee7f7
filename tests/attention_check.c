#include "attention_check.h"

#include <math.h>
#include <string.h>

static void attn_out_layout(attn_out *r, oclf_dtype dt, size_t tq, size_t hq, size_t d,
                            size_t ooff, size_t ohs, size_t ots)
{
    memset(r, 0, sizeof *r);
    const size_t es = oclf_dtype_size(dt);
    r->dt = dt, r->tq = tq, r->hq = hq, r->d = d;
    r->ohs = ohs, r->ots = ots, r->ooff = ooff, r->on = r->ooff + tq * r->ots + 1;
    r->ho = th_random(dt, r->on, 5, 6);
    r->mo = th_upload(r->ho, r->on * es);
    r->loff = 2, r->lst = tq + 3, r->ln = r->loff + hq * r->lst + 1;
    r->hl = th_random(OCLF_F32, r->ln, 7, 8);
    r->ml = th_upload(r->hl, r->ln * 4);
}

void attn_out_make(attn_out *r, oclf_dtype dt, size_t tq, size_t hq, size_t d)
{
    attn_out_layout(r, dt, tq, hq, d, 5, d + 1, hq * (d + 1) + 2);
}

void attn_out_make_aligned(attn_out *r, oclf_dtype dt, size_t tq, size_t hq, size_t d)
{
    const size_t ohs = (d + 8 + 7) / 8 * 8;
    attn_out_layout(r, dt, tq, hq, d, 8, ohs, hq * ohs + 8);
}

oclf_heads attn_out_heads(const attn_out *r)
{
    return (oclf_heads){{r->mo, r->ooff, r->ots}, r->hq, r->ohs};
}

oclf_buf attn_out_lse(const attn_out *r) { return (oclf_buf){r->ml, r->loff, r->lst}; }

void attn_out_read(attn_out *r)
{
    const size_t es = oclf_dtype_size(r->dt);
    free(r->go), free(r->gl);
    r->go = malloc(r->on * es);
    r->gl = malloc(r->ln * 4);
    th_download(r->mo, r->go, r->on * es);
    th_download(r->ml, r->gl, r->ln * 4);
}

void attn_out_free(attn_out *r)
{
    free(r->ho), free(r->go), free(r->hl), free(r->gl);
    if (r->mo)
        clReleaseMemObject(r->mo);
    if (r->ml)
        clReleaseMemObject(r->ml);
    memset(r, 0, sizeof *r);
}

void attn_check_o_padding(const attn_out *r)
{
    const size_t es = oclf_dtype_size(r->dt), ooff = r->ooff, ots = r->ots, ohs = r->ohs;
    for (size_t i = 0; i < r->on; i++) {
        const int in_head = i >= ooff && (i - ooff) % ots < r->hq * ohs &&
                            (i - ooff) % ots % ohs < r->d && (i - ooff) / ots < r->tq;
        if (!in_head)
            ck_assert_msg(memcmp((char *)r->go + i * es, (char *)r->ho + i * es, es) == 0,
                          "o element %zu outside the heads was written", i);
    }
}

void attn_check_lse(const attn_out *r, int asked, const double *wl)
{
    const size_t loff = r->loff, lst = r->lst;
    if (!asked) {
        ck_assert_msg(memcmp(r->gl, r->hl, r->ln * 4) == 0, "lse written without being asked for");
        return;
    }
    size_t first = 0;
    double worst = 0;
    const size_t bad = oclf_ref_attention_lse_compare(r->dt, r->gl + loff, lst, r->tq, r->hq, wl,
                                                      &first, &worst);
    ck_assert_msg(bad == 0, "%zu LSE wrong, first %zu (want %g), max err %g", bad, first,
                  wl[first], worst);
    for (size_t i = 0; i < r->ln; i++)
        if (i < loff || (i - loff) % lst >= r->tq || (i - loff) / lst >= r->hq)
            ck_assert_msg(r->gl[i] == r->hl[i], "lse element %zu outside the rows was written", i);
}

void attn_check_no_key_rows(const attn_out *r, const double *wl)
{
    for (size_t t = 0; t < r->tq; t++)
        for (size_t h = 0; h < r->hq; h++)
            if (isinf(wl[h * r->tq + t]) && wl[h * r->tq + t] < 0)
                for (size_t i = 0; i < r->d; i++)
                    ck_assert_msg(oclf_ref_get(r->dt, r->go,
                                               r->ooff + t * r->ots + h * r->ohs + i) == 0.0f,
                                  "row (%zu, %zu) sees no key but is not 0", t, h);
}

void attn_result_keep(const attn_out *r, double *vmax, attn_result *res)
{
    const size_t tq = r->tq, hq = r->hq, d = r->d;
    res->tq = tq;
    res->o = malloc((tq * hq * d + 1) * sizeof *res->o);
    res->lse = malloc((hq * tq + 1) * sizeof *res->lse);
    for (size_t t = 0; t < tq; t++)
        for (size_t h = 0; h < hq; h++)
            for (size_t i = 0; i < d; i++)
                res->o[(t * hq + h) * d + i] =
                    oclf_ref_get(r->dt, r->go, r->ooff + t * r->ots + h * r->ohs + i);
    for (size_t h = 0; h < hq; h++)
        for (size_t t = 0; t < tq; t++)
            res->lse[h * tq + t] = r->gl[r->loff + h * r->lst + t];
    res->vmax = vmax;
}

void attn_result_free(attn_result *res)
{
    free(res->o), free(res->lse), free(res->vmax);
    memset(res, 0, sizeof *res);
}

double attn_tol(oclf_dtype dt) { return dt == OCLF_F32 ? 2e-5 : dt == OCLF_F16 ? 2e-3 : 1.6e-2; }

void attn_expect_same(oclf_dtype dt, size_t hq, size_t d, const attn_result *x,
                      const attn_result *y, const char *what)
{
    const double tol = attn_tol(dt);
    ck_assert_msg(x->tq == y->tq, "%s: %zu tokens vs %zu", what, x->tq, y->tq);
    for (size_t t = 0; t < x->tq; t++)
        for (size_t h = 0; h < hq; h++) {
            for (size_t i = 0; i < d; i++) {
                const size_t k = (t * hq + h) * d + i;
                ck_assert_msg(fabs(x->o[k] - y->o[k]) <= tol * (1 + x->vmax[t * hq + h]),
                              "%s: %g vs %g at token %zu head %zu elem %zu", what, x->o[k],
                              y->o[k], t, h, i);
            }
            const float a = x->lse[h * x->tq + t], b = y->lse[h * x->tq + t];
            ck_assert_msg(a == b || fabs((double)a - (double)b) <= tol, "%s: LSE %g vs %g", what,
                          a, b);
        }
}
