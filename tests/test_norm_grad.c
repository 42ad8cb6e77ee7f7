/*
 * RMSNorm and LayerNorm backward against the fp64 reference: every dtype and
 * path, widths of 1, 7, 64 and 4097, 0, 1, 3 and 100 rows (several chunks of
 * 32, the last partial), strided rows with offsets, weight absent, dw or db
 * alone, the residual gradient (add + RMSNorm), dx in place over dy and over
 * dres; dw and db bit for bit across tunings, runs and paths; central
 * differences of the fp64 forward; the bad arguments with nothing written.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): narrower rows. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};
static const float eps = 1e-5f;

enum { IN_PLACE_NONE, IN_PLACE_DY, IN_PLACE_DRES };

typedef struct ng_case {
    oclf_dtype dtype;
    int ln;
    size_t rows, cols, pad, offset;
    int weight, want_dw, want_db, dres, in_place;
    const oclf_choice *choice;
    int weight_at_0; /* the weight at offset 0 (else 1, off any vector boundary) */
} ng_case;

typedef struct ng_result {
    double *dx; /* rows x cols packed, the device's dx widened */
    float *dw, *db;
} ng_result;

static void free_result(ng_result *r) { free(r->dx), free(r->dw), free(r->db); }

/* Flips the sign of every other element, keeping magnitudes in [lo, hi):
 * rows whose elements are far from 0 keep RMSNorm's one-element rows
 * (dx = r g eps / (x^2 + eps)) well conditioned. */
static void alternate_signs(oclf_dtype dt, void *a, size_t n)
{
    for (size_t i = 1; i < n; i += 2)
        oclf_ref_set(dt, a, i, -oclf_ref_get(dt, a, i));
}

static int close_to(double got, double want, double atol, double rtol)
{
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* The context run_case calls on when set (else the harness's). */
static oclf_context *case_ctx;

/* Runs one case, checks dx, dw and db against the reference and that no
 * element outside the described ones was written; returns the results. */
static ng_result run_case(const ng_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), stride = c->cols + c->pad;
    const size_t n = c->offset + c->rows * stride + 1;
    th_seed(c->rows * 131 + c->cols * 7 + (size_t)dt * 3 + (size_t)c->ln);
    void *x = th_random(dt, n, 0.25f, 2.0f);
    alternate_signs(dt, x, n);
    void *dy = th_random(dt, n, -1.0f, 1.0f);
    void *w = th_random(dt, c->cols + 1, 0.5f, 1.5f);
    void *dres = th_random(dt, n, -1.0f, 1.0f);
    void *dx0 = th_random(dt, n, -9.0f, -8.0f); /* sentinels */
    float *g0 = malloc((c->cols + 2) * sizeof *g0);
    for (size_t i = 0; i < c->cols + 2; i++)
        g0[i] = -7.0f;

    cl_mem mx = th_upload(x, n * es), mdy = th_upload(dy, n * es);
    cl_mem mw = th_upload(w, (c->cols + 1) * es), mdr = th_upload(dres, n * es);
    cl_mem mdx = th_upload(dx0, n * es);
    cl_mem mdw = th_upload(g0, (c->cols + 2) * 4), mdb = th_upload(g0, (c->cols + 2) * 4);
    const size_t bs = c->pad ? stride : 0;
    oclf_buf bx = {mx, c->offset, bs}, bdy = {mdy, c->offset, bs};
    oclf_buf bw = {mw, c->weight_at_0 ? 0 : 1, 0};
    oclf_buf bdr = {mdr, c->offset, bs}, bdx = {mdx, c->offset, bs};
    oclf_buf bdw = {mdw, 1, 0}, bdb = {mdb, 1, 0};
    cl_mem out = mdx;
    const void *before = dx0; /* what dx's buffer held outside the rows */
    if (c->in_place == IN_PLACE_DY)
        bdx = bdy, out = mdy, before = dy;
    else if (c->in_place == IN_PLACE_DRES)
        bdx = bdr, out = mdr, before = dres;
    const oclf_buf *pw = c->weight ? &bw : NULL;
    const oclf_buf *pdw = c->want_dw ? &bdw : NULL, *pdb = c->want_db ? &bdb : NULL;
    if (c->ln)
        TH_OK(oclf_layer_norm_backward(case_ctx ? case_ctx : e->ctx, e->queue, dt, c->rows, c->cols,
                                       bx, bdy, pw, bdx, pdw, pdb, eps, c->choice, 0, NULL, NULL));
    else
        TH_OK(oclf_rms_norm_backward(case_ctx ? case_ctx : e->ctx, e->queue, dt, c->rows, c->cols,
                                     bx, bdy, pw, c->dres ? &bdr : NULL, bdx, pdw, eps, c->choice,
                                     0, NULL, NULL));
    void *got = malloc(n * es);
    float *gw = malloc((c->cols + 2) * 4), *gb = malloc((c->cols + 2) * 4);
    th_download(out, got, n * es);
    th_download(mdw, gw, (c->cols + 2) * 4);
    th_download(mdb, gb, (c->cols + 2) * 4);

    const size_t R = c->rows, C = c->cols;
    double *want = malloc((R * C + 1) * sizeof *want);
    double *ww = malloc(C * sizeof *ww), *wb = malloc(C * sizeof *wb);
    oclf_ref_norm_backward(dt, c->ln, R, C, (const char *)x + c->offset * es, stride,
                           (const char *)dy + c->offset * es, stride,
                           c->weight ? (const char *)w + (c->weight_at_0 ? 0 : es) : NULL,
                           c->dres ? (const char *)dres + c->offset * es : NULL, stride, eps,
                           want, ww, wb);
    ng_result res = {malloc((R * C + 1) * sizeof(double)), malloc(C * 4), malloc(C * 4)};
    double atol, rtol;
    oclf_ref_tolerance(dt, &atol, &rtol);
    for (size_t i = 0; i < n; i++) {
        const size_t rel = i - c->offset;
        const int inside = i >= c->offset && rel / stride < R && rel % stride < C;
        if (!inside) {
            ck_assert_msg(memcmp((const char *)got + i * es, (const char *)before + i * es, es) ==
                              0,
                          "element %zu outside the rows was written", i);
            continue;
        }
        const size_t r = rel / stride, col = rel % stride;
        const double g = oclf_ref_get(dt, got, i), v = want[r * C + col];
        res.dx[r * C + col] = g;
        ck_assert_msg(close_to(g, v, atol, rtol), "%s %s %zux%zu: dx[%zu][%zu] = %.9g, want %.9g",
                      c->ln ? "layer_norm" : "rms_norm", oclf_dtype_name(dt), R, C, r, col, g, v);
    }
    /* fp32 column sums of terms of size about 1 */
    for (int which = 0; which < 2; which++) {
        const float *gg = which ? gb : gw;
        const double *wv = which ? wb : ww;
        const int wanted = which ? c->want_db : c->want_dw;
        ck_assert_msg(gg[0] == -7.0f && gg[C + 1] == -7.0f, "written beside %s",
                      which ? "db" : "dw");
        for (size_t j = 0; j < C; j++) {
            if (!wanted) {
                ck_assert_msg(gg[j + 1] == -7.0f, "%s written though not wanted",
                              which ? "db" : "dw");
                continue;
            }
            ck_assert_msg(close_to(gg[j + 1], wv[j], 2e-5 * (1.0 + (double)R / 8.0), 1e-4),
                          "%s %s %zux%zu: %s[%zu] = %.9g, want %.9g",
                          c->ln ? "layer_norm" : "rms_norm", oclf_dtype_name(dt), R, C,
                          which ? "db" : "dw", j, (double)gg[j + 1], wv[j]);
        }
    }
    memcpy(res.dw, gw + 1, C * 4);
    memcpy(res.db, gb + 1, C * 4);
    free(got), free(gw), free(gb), free(want), free(ww), free(wb);
    free(x), free(dy), free(w), free(dres), free(dx0), free(g0);
    clReleaseMemObject(mx), clReleaseMemObject(mdy), clReleaseMemObject(mw);
    clReleaseMemObject(mdr), clReleaseMemObject(mdx), clReleaseMemObject(mdw);
    clReleaseMemObject(mdb);
    return res;
}

static void check_case(const ng_case *c)
{
    ng_result r = run_case(c);
    free_result(&r);
}

/* Every dtype, op and path over the widths and row counts. */
START_TEST(test_matrix)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const int ln = (_i / 3) % 2;
    const oclf_choice ch = th_choice(_i / 6 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    const size_t widths[] = {1, 7, 64, th_quick() ? 259 : 4097};
    const size_t rows[] = {0, 1, 3, 100};
    for (size_t wi = 0; wi < 4; wi++)
        for (size_t ri = 0; ri < 4; ri++) {
            /* strided with an offset on every other case */
            const int strided = (wi + ri) % 2;
            ng_case c = {.dtype = dt, .ln = ln, .rows = rows[ri], .cols = widths[wi],
                         .pad = strided ? 3 : 0, .offset = strided ? 5 : 0, .weight = 1,
                         .want_dw = 1, .want_db = ln, .choice = &ch};
            check_case(&c);
        }
}
END_TEST

/* Weight absent, one gradient alone, the residual gradient, in place. */
START_TEST(test_options)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const oclf_choice ch = th_choice(_i / 3 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    const size_t C = th_quick() ? 203 : 1029;
    const ng_case cases[] = {
        {.ln = 0, .rows = 37, .weight = 0, .want_dw = 1},
        {.ln = 1, .rows = 37, .weight = 0, .want_dw = 1, .want_db = 1},
        {.ln = 1, .rows = 33, .weight = 1, .want_db = 1},
        {.ln = 1, .rows = 33, .weight = 1, .want_dw = 1},
        {.ln = 1, .rows = 5, .weight = 1},
        {.ln = 0, .rows = 41, .weight = 1, .want_dw = 1, .dres = 1},
        {.ln = 0, .rows = 41, .weight = 1, .want_dw = 1, .dres = 1, .in_place = IN_PLACE_DY},
        {.ln = 0, .rows = 41, .weight = 1, .want_dw = 1, .dres = 1, .in_place = IN_PLACE_DRES},
        {.ln = 1, .rows = 41, .weight = 1, .want_dw = 1, .want_db = 1, .in_place = IN_PLACE_DY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ng_case c = cases[i];
        c.dtype = dt;
        c.cols = C;
        c.pad = 2;
        c.offset = 3;
        c.choice = &ch;
        check_case(&c);
    }
}
END_TEST

/* Both row structures with vector widths that leave tails. */
START_TEST(test_structures)
{
    static const int cfg[][3] = {{0, 1, 1}, {0, 4, 8}, {0, 2, 16}, {1, 16, 4}, {1, 64, 1},
                                 {1, 32, 16}};
    oclf_choice ch = th_choice(_i % 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", cfg[_i / 2][0]);
    oclf_params_set(&ch.params, "WGS", cfg[_i / 2][1]);
    oclf_params_set(&ch.params, "VEC", cfg[_i / 2][2]);
    for (int d = 0; d < 3; d++)
        for (int ln = 0; ln < 2; ln++) {
            ng_case c = {.dtype = dtypes[d], .ln = ln, .rows = 70, .cols = th_quick() ? 203 : 2053,
                         .pad = 2, .offset = 1, .weight = 1, .want_dw = 1, .want_db = ln,
                         .dres = !ln, .choice = &ch};
            check_case(&c);
        }
}
END_TEST

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* dw and db: the same bits for every tuning, on both paths and on a second
 * run; dx of the two paths within the dtype's tolerance. (The structures
 * are the CPU default and ones test_structures builds: no more programs to
 * compile.) */
START_TEST(test_deterministic)
{
    static const int cfg[][3] = {{0, 1, 1}, {0, 4, 16}, {0, 2, 16}, {1, 16, 4}, {1, 64, 1}};
    const oclf_dtype dt = dtypes[_i % 3];
    const int ln = _i / 3;
    ng_case c = {.dtype = dt, .ln = ln, .rows = 100, .cols = th_quick() ? 259 : 4097, .weight = 1,
                 .want_dw = 1, .want_db = ln, .pad = 1};
    oclf_choice f = th_choice(OCLF_PATH_FUSED);
    c.choice = &f;
    ng_result base = run_case(&c);
    ng_result again = run_case(&c);
    ck_assert_msg(same_bits(base.dw, again.dw, c.cols) && same_bits(base.db, again.db, c.cols),
                  "dw or db differ between two runs");
    free_result(&again);
    double atol, rtol;
    oclf_ref_tolerance(dt, &atol, &rtol);
    for (int p = 0; p < 2; p++)
        for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
            oclf_choice ch = th_choice(p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
            oclf_params_set(&ch.params, "LAYOUT", cfg[k][0]);
            oclf_params_set(&ch.params, "WGS", cfg[k][1]);
            oclf_params_set(&ch.params, "VEC", cfg[k][2]);
            c.choice = &ch;
            ng_result r = run_case(&c);
            for (size_t j = 0; j < c.cols; j++)
                ck_assert_msg(memcmp(&r.dw[j], &base.dw[j], 4) == 0 &&
                                  memcmp(&r.db[j], &base.db[j], 4) == 0,
                              "%s LAYOUT=%d WGS=%d VEC=%d: column %zu: dw %a db %a, default "
                              "fused dw %a db %a",
                              p ? "unfused" : "fused", cfg[k][0], cfg[k][1], cfg[k][2], j,
                              (double)r.dw[j], (double)r.db[j], (double)base.dw[j],
                              (double)base.db[j]);
            for (size_t i = 0; i < c.rows * c.cols; i++)
                ck_assert_msg(close_to(r.dx[i], base.dx[i], atol, rtol),
                              "dx %zu: %g, default fused %g", i, r.dx[i], base.dx[i]);
            free_result(&r);
        }
    free_result(&base);
}
END_TEST

/* sum(y * R) (+ sum(z * Q) for add + RMSNorm) of the fp64 forward. */
static double fd_loss(int kind, const float *a, const float *b, const float *w, const float *bias,
                      const double *R, const double *Q, size_t rows, size_t cols)
{
    double *y = malloc(rows * cols * sizeof *y), l = 0;
    float *z = malloc(rows * cols * sizeof *z);
    for (size_t i = 0; i < rows * cols; i++)
        z[i] = kind == 2 ? a[i] + b[i] : a[i];
    if (kind == 1)
        oclf_ref_layer_norm(OCLF_F32, rows, cols, z, cols, w, bias, eps, y);
    else
        oclf_ref_rms_norm(OCLF_F32, rows, cols, z, cols, w, eps, y);
    for (size_t i = 0; i < rows * cols; i++)
        l += y[i] * R[i] + (kind == 2 ? (double)z[i] * Q[i] : 0.0);
    free(y), free(z);
    return l;
}

/* Central differences of sum(y * dy) through the fp64 forward against the
 * device's dx, dw and db: RMSNorm (kind 0), LayerNorm (1), and add +
 * RMSNorm (2: x = a + b, dres = dL/dz), whose dx is the gradient of both
 * a and b. */
START_TEST(test_finite_difference)
{
    th_env *e = th_get();
    const int kind = _i;
    const size_t R = 3, C = 5, n = R * C;
    th_seed(77 + (uint64_t)kind);
    float *a = th_random(OCLF_F32, n, -2.0f, 2.0f), *b = th_random(OCLF_F32, n, -1.0f, 1.0f);
    float *w = th_random(OCLF_F32, C, 0.5f, 1.5f), *bias = th_random(OCLF_F32, C, -0.5f, 0.5f);
    float *dyf = th_random(OCLF_F32, n, -1.0f, 1.0f), *dzf = th_random(OCLF_F32, n, -1.0f, 1.0f);
    float *z = malloc(n * 4);
    double Rd[15], Qd[15];
    for (size_t i = 0; i < n; i++) {
        Rd[i] = dyf[i], Qd[i] = dzf[i];
        z[i] = kind == 2 ? a[i] + b[i] : a[i];
    }
    cl_mem mz = th_upload(z, n * 4), mdy = th_upload(dyf, n * 4), mw = th_upload(w, C * 4);
    cl_mem mdz = th_upload(dzf, n * 4), mdx = th_alloc(n * 4), mdw = th_alloc(C * 4);
    cl_mem mdb = th_alloc(C * 4);
    oclf_buf bz = {mz, 0, 0}, bdy = {mdy, 0, 0}, bw = {mw, 0, 0}, bdz = {mdz, 0, 0};
    oclf_buf bdx = {mdx, 0, 0}, bdw = {mdw, 0, 0}, bdb = {mdb, 0, 0};
    if (kind == 1)
        TH_OK(oclf_layer_norm_backward(e->ctx, e->queue, OCLF_F32, R, C, bz, bdy, &bw, bdx, &bdw,
                                       &bdb, eps, NULL, 0, NULL, NULL));
    else
        TH_OK(oclf_rms_norm_backward(e->ctx, e->queue, OCLF_F32, R, C, bz, bdy, &bw,
                                     kind == 2 ? &bdz : NULL, bdx, &bdw, eps, NULL, 0, NULL, NULL));
    float dx[15], dw[5], db[5];
    th_download(mdx, dx, sizeof dx);
    th_download(mdw, dw, sizeof dw);
    th_download(mdb, db, sizeof db);
    const float h = 1e-2f;
    /* every element of a, then of w, then of the bias (LayerNorm) */
    for (size_t k = 0; k < n + C + (kind == 1 ? C : 0); k++) {
        float *v = k < n ? &a[k] : k < n + C ? &w[k - n] : &bias[k - n - C];
        const float keep = *v;
        *v = keep + h;
        const float up = *v;
        const double lp = fd_loss(kind, a, b, w, bias, Rd, Qd, R, C);
        *v = keep - h;
        const float down = *v;
        const double lm = fd_loss(kind, a, b, w, bias, Rd, Qd, R, C);
        *v = keep;
        const double fd = (lp - lm) / ((double)up - (double)down);
        const double got = k < n ? dx[k] : k < n + C ? dw[k - n] : db[k - n - C];
        ck_assert_msg(fabs(fd - got) <= 2e-3 * (1.0 + fabs(fd)),
                      "kind %d, %s %zu: gradient %.7g, central differences %.7g", kind,
                      k < n ? "x" : k < n + C ? "weight" : "bias", k < n ? k : k < n + C ? k - n : k - n - C,
                      got, fd);
    }
    free(a), free(b), free(w), free(bias), free(dyf), free(dzf), free(z);
    clReleaseMemObject(mz), clReleaseMemObject(mdy), clReleaseMemObject(mw);
    clReleaseMemObject(mdz), clReleaseMemObject(mdx), clReleaseMemObject(mdw);
    clReleaseMemObject(mdb);
}
END_TEST

/* Rows on vector boundaries (every offset and row stride a multiple of the
 * vector width) run the aligned build of the kernels (OCLF_ALIGNED: one
 * wide access per vector on GPUs), any other placement the plain build;
 * both against the reference, fused and unfused, both structures. */
START_TEST(test_aligned_build)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const int ln = _i / 3;
    for (int k = 0; k < TH_PLACES; k++)
        for (int p = 0; p < TH_STRUCTS; p++) {
            const oclf_choice ch = th_struct_choice(p);
            case_ctx = th_build_log_context();
            const ng_case c = {dt,   ln, 5, 768, th_places[k].pad, th_places[k].offset,
                               1,    1,  ln, !ln, 0, &ch, 1};
            ng_result r = run_case(&c);
            free_result(&r);
            char what[96];
            snprintf(what, sizeof what, "%s offset %zu pad %zu", oclf_dtype_name(dt),
                     th_places[k].offset, th_places[k].pad);
            th_expect_build("norm_grad.cl", p, th_places[k].aligned, what);
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem x, dy, dx, w, dw, db, small;
    float *hx, *hdy, *hdx, hw[8], hg[16];
    size_t rows, cols;
} bad_env;

static bad_env bad_setup(void)
{
    bad_env b;
    b.rows = 4;
    b.cols = 8;
    const size_t n = b.rows * b.cols;
    b.hx = th_random(OCLF_F32, n, -1, 1);
    b.hdy = th_random(OCLF_F32, n, -1, 1);
    b.hdx = th_random(OCLF_F32, n, 3, 4);
    for (int i = 0; i < 8; i++)
        b.hw[i] = 1.0f + (float)i;
    for (int i = 0; i < 16; i++)
        b.hg[i] = 5.0f + (float)i;
    b.x = th_upload(b.hx, n * 4);
    b.dy = th_upload(b.hdy, n * 4);
    b.dx = th_upload(b.hdx, n * 4);
    b.w = th_upload(b.hw, sizeof b.hw);
    b.dw = th_upload(b.hg, sizeof b.hg);
    b.db = th_upload(b.hg, sizeof b.hg);
    b.small = th_upload(b.hg, 8);
    return b;
}

static void bad_check_untouched(bad_env *b)
{
    const size_t n = b->rows * b->cols * 4;
    float *got = malloc(n), g[16];
    clFinish(th_get()->queue);
    th_download(b->x, got, n);
    ck_assert_msg(memcmp(got, b->hx, n) == 0, "a failing call wrote x");
    th_download(b->dy, got, n);
    ck_assert_msg(memcmp(got, b->hdy, n) == 0, "a failing call wrote dy");
    th_download(b->dx, got, n);
    ck_assert_msg(memcmp(got, b->hdx, n) == 0, "a failing call wrote dx");
    th_download(b->dw, g, sizeof g);
    ck_assert_msg(memcmp(g, b->hg, sizeof g) == 0, "a failing call wrote dw");
    th_download(b->db, g, sizeof g);
    ck_assert_msg(memcmp(g, b->hg, sizeof g) == 0, "a failing call wrote db");
    th_download(b->small, g, 8);
    ck_assert_msg(memcmp(g, b->hg, 8) == 0, "a failing call wrote a small buffer");
    free(got);
}

static void bad_free(bad_env *b)
{
    clReleaseMemObject(b->x), clReleaseMemObject(b->dy), clReleaseMemObject(b->dx);
    clReleaseMemObject(b->w), clReleaseMemObject(b->dw), clReleaseMemObject(b->db);
    clReleaseMemObject(b->small);
    free(b->hx), free(b->hdy), free(b->hdx);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))
#define RMS(ctx, q, dt, rows, cols, x, dy, w, e_, dx, dw, dres, ch)                            \
    oclf_rms_norm_backward(ctx, q, dt, rows, cols, x, dy, w, dres, dx, dw, e_, ch, 0, NULL, NULL)
#define LN(ctx, q, dt, rows, cols, x, dy, w, e_, dx, dw, db, ch)                               \
    oclf_layer_norm_backward(ctx, q, dt, rows, cols, x, dy, w, dx, dw, db, e_, ch, 0, NULL, NULL)

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb = bad_setup();
    cl_command_queue q = e->queue;
    oclf_context *ctx = e->ctx;
    const size_t R = bb.rows, C = bb.cols;
    const oclf_dtype F = OCLF_F32;
    oclf_buf X = {bb.x, 0, 0}, DY = {bb.dy, 0, 0}, DX = {bb.dx, 0, 0}, W = {bb.w, 0, 0};
    oclf_buf DW = {bb.dw, 0, 0}, DB = {bb.db, 0, 0}, N = {NULL, 0, 0}, S = {bb.small, 0, 0};

    ck_assert_int_eq(RMS(NULL, q, F, R, C, X, DY, &W, eps, DX, &DW, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(RMS(ctx, NULL, F, R, C, X, DY, &W, eps, DX, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "queue");
    EXPECT(RMS(ctx, q, F, R, C, N, DY, &W, eps, DX, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "rms_norm_backward: x");
    EXPECT(LN(ctx, q, F, R, C, X, N, &W, eps, DX, &DW, &DB, NULL), OCLF_INVALID_ARGUMENT,
           "layer_norm_backward: dy");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, N, &DW, &DB, NULL), OCLF_INVALID_ARGUMENT,
           "layer_norm_backward: dx");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &N, eps, DX, &DW, &DB, NULL), OCLF_INVALID_ARGUMENT,
           "weight");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &N, &DB, NULL), OCLF_INVALID_ARGUMENT, "dw");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &N, NULL), OCLF_INVALID_ARGUMENT, "db");
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &N, NULL), OCLF_INVALID_ARGUMENT,
           "dres");
    EXPECT(RMS(ctx, q, F, R, 0, X, DY, &W, eps, DX, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "cols is 0");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, -1.0f, DX, &DW, &DB, NULL), OCLF_INVALID_ARGUMENT,
           "eps");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, NAN, DX, &DW, &DB, NULL), OCLF_INVALID_ARGUMENT, "eps");
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, INFINITY, DX, &DW, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "eps");
    EXPECT(RMS(ctx, q, (oclf_dtype)7, R, C, X, DY, &W, eps, DX, &DW, NULL, NULL),
           OCLF_UNSUPPORTED, "dtype");
    oclf_buf narrow = {bb.x, 0, C - 1};
    EXPECT(RMS(ctx, q, F, R, C, narrow, DY, &W, eps, DX, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "stride");
    /* small buffers */
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, eps, S, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "rms_norm_backward: dx");
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &S, eps, DX, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "weight");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &S, &DB, NULL), OCLF_INVALID_ARGUMENT, "dw");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &S, NULL), OCLF_INVALID_ARGUMENT, "db");
    oclf_buf late = {bb.dx, 1, 0};
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, eps, late, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "fit");
    oclf_buf dw_late = {bb.dw, 9, 0};
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, eps, DX, &dw_late, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dw");
    /* overlaps */
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, eps, X, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "dx overlaps x");
    /* dx one element past dy's start: the same buffer, not the same range */
    oclf_buf dx_on_dy = {bb.dy, 1, 0};
    EXPECT(RMS(ctx, q, F, R - 1, C, X, DY, &W, eps, dx_on_dy, &DW, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dx overlaps dy");
    oclf_buf dres_shift = {bb.dx, 0, 0}, dx2 = {bb.dx, 2, 0};
    EXPECT(RMS(ctx, q, F, R - 1, C, X, DY, &W, eps, dx2, &DW, &dres_shift, NULL),
           OCLF_INVALID_ARGUMENT, "dx overlaps dres");
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &DX, eps, DX, &DW, NULL, NULL), OCLF_INVALID_ARGUMENT,
           "weight overlaps dx");
    oclf_buf dw_on_dy = {bb.dy, 0, 0}, dw_on_w = {bb.w, 0, 0}, db_on_dw = {bb.dw, 4, 0};
    EXPECT(RMS(ctx, q, F, R, C, X, DY, &W, eps, DX, &dw_on_dy, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dw overlaps dy");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &dw_on_w, &DB, NULL), OCLF_INVALID_ARGUMENT,
           "dw overlaps weight");
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &db_on_dw, NULL), OCLF_INVALID_ARGUMENT,
           "dw overlaps db");
    oclf_buf db_on_x = {bb.x, 0, 0};
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &db_on_x, NULL), OCLF_INVALID_ARGUMENT,
           "db overlaps x");
    oclf_choice ch = th_choice((oclf_path)9);
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &DB, &ch), OCLF_INVALID_ARGUMENT,
           "path");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "WGS", 3);
    EXPECT(LN(ctx, q, F, R, C, X, DY, &W, eps, DX, &DW, &DB, &ch), OCLF_INVALID_ARGUMENT, "WGS");
    bad_free(&bb);
}
END_TEST

static Suite *norm_grad_suite(void)
{
    Suite *s = suite_create("norm_grad");
    TCase *t = tcase_create("norm_backward");
    tcase_add_loop_test(t, test_aligned_build, 0, 6);
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, test_matrix, 0, 12);
    tcase_add_loop_test(t, test_options, 0, 6);
    tcase_add_loop_test(t, test_structures, 0, 12);
    tcase_add_loop_test(t, test_deterministic, 0, 6);
    tcase_add_loop_test(t, test_finite_difference, 0, 3);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("bad_arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(norm_grad_suite()); }
