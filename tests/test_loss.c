/*
 * Softmax cross-entropy against the fp64 reference: every dtype, path and
 * reduction with upstream gradients, ignore_index (some rows, every row),
 * label smoothing, softcap, z-loss, vocabularies of 1, 3 and 32001, 0 and 1
 * rows, strided rows with offsets, both row structures, fused against
 * unfused, a finite-difference check of the gradient, and the bad
 * arguments (a bad target named by its row, nothing written).
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): smaller shapes. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

enum { IGN_SOME, IGN_ALL, IGN_NONE };

typedef struct ce_case {
    oclf_dtype dtype;
    size_t rows, cols, pad, offset;
    int reduction;
    float ls, cap, zl;
    int grad, upstream, lse;
    int ignore;
    float range; /* logits uniform in [-range, range) */
    int masked;  /* every fifth logit of a row (never the target) is -inf */
    const oclf_choice *choice;
} ce_case;

typedef struct ce_result {
    float *loss;  /* [rows] for NONE, [1] otherwise */
    float *lse;   /* [rows] */
    double *grad; /* rows x cols, the device's gradient widened */
} ce_result;

static void free_result(ce_result *r) { free(r->loss), free(r->lse), free(r->grad); }

static int close_to(double got, double want, double atol, double rtol)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* The context run_case calls on when set (else the harness's). */
static oclf_context *case_ctx;

/* Runs one case and checks loss, LSE and gradient against the reference,
 * and that nothing outside the described elements was written. */
static ce_result run_case(const ce_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), stride = c->cols + c->pad;
    const size_t n = c->offset + c->rows * stride + 1;
    th_seed(c->rows * 131 + c->cols * 7 + (size_t)c->reduction * 3 + (size_t)dt);
    const float range = c->range > 0 ? c->range : 6.0f;
    void *x = th_random(dt, n, -range, range);
    int64_t *t = malloc((c->rows + 2) * sizeof *t);
    for (size_t r = 0; r < c->rows; r++) {
        t[r + 1] = (int64_t)(th_uniform(0.0f, 1.0f) * (float)c->cols) % (int64_t)c->cols;
        if (c->ignore == IGN_ALL || (c->ignore == IGN_SOME && r % 3 == 1))
            t[r + 1] = -100;
        for (size_t k = 2; c->masked && k < c->cols; k += 5)
            if ((int64_t)k != t[r + 1])
                oclf_ref_set(dt, x, c->offset + r * stride + k, -INFINITY);
    }
    const size_t nl = c->reduction == OCLF_REDUCTION_NONE ? c->rows : 1;
    float *up = malloc((c->rows + 2) * sizeof *up);
    for (size_t r = 0; r < c->rows + 2; r++)
        up[r] = th_uniform(0.5f, 1.5f);
    float *loss0 = malloc((c->rows + 3) * sizeof *loss0), *lse0 = malloc((c->rows + 3) * 4);
    for (size_t r = 0; r < c->rows + 3; r++)
        loss0[r] = lse0[r] = -7.0f; /* sentinels */

    cl_mem mx = th_upload(x, n * es), mt = th_upload(t, (c->rows + 2) * 8);
    cl_mem ml = th_upload(loss0, (c->rows + 3) * 4), mlse = th_upload(lse0, (c->rows + 3) * 4);
    cl_mem mu = th_upload(up, (c->rows + 2) * 4);
    oclf_buf bx = {mx, c->offset, c->pad ? stride : 0}, bt = {mt, 1, 0}, bl = {ml, 1, 0};
    oclf_buf blse = {mlse, 2, 0}, bu = {mu, 1, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    o.reduction = c->reduction;
    o.label_smoothing = c->ls;
    o.softcap = c->cap;
    o.z_loss = c->zl;
    o.compute_grad = c->grad;
    o.grad_output = c->upstream ? &bu : NULL;
    o.lse = c->lse ? &blse : NULL;
    cl_event ev = NULL;
    TH_OK(oclf_cross_entropy(case_ctx ? case_ctx : e->ctx, e->queue, dt, c->rows, c->cols, bx, bt,
                             bl, &o, c->choice, 0,
                             NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    void *gx = malloc(n * es);
    float *gl = malloc((c->rows + 3) * 4), *glse = malloc((c->rows + 3) * 4);
    th_download(mx, gx, n * es);
    th_download(ml, gl, (c->rows + 3) * 4);
    th_download(mlse, glse, (c->rows + 3) * 4);

    double *wl = malloc((c->rows + 1) * sizeof *wl), *wlse = malloc((c->rows + 1) * sizeof *wlse);
    double *wg = malloc((c->rows * c->cols + 1) * sizeof *wg), wred = 0;
    const size_t xs = c->pad ? stride : c->cols;
    oclf_ref_cross_entropy(dt, c->rows, c->cols, (char *)x + c->offset * es, xs, t + 1, -100,
                           c->reduction, c->ls, c->cap, c->zl, c->upstream ? up + 1 : NULL, wl,
                           wlse, &wred, wg);
    const char *dn = oclf_dtype_name(dt);
    /* Losses and the LSE are fp32 results whatever the dtype. */
    if (c->rows > 0) {
        if (c->reduction == OCLF_REDUCTION_NONE) {
            for (size_t r = 0; r < c->rows; r++)
                ck_assert_msg(close_to(gl[1 + r], wl[r], 1e-4, 1e-5),
                              "%s %zux%zu: loss row %zu %.9g, reference %.9g", dn, c->rows,
                              c->cols, r, (double)gl[1 + r], wl[r]);
        } else {
            ck_assert_msg(close_to(gl[1], wred, 1e-4, 1e-5),
                          "%s %zux%zu reduction %d: loss %.9g, reference %.9g", dn, c->rows,
                          c->cols, c->reduction, (double)gl[1], wred);
        }
    }
    for (size_t r = 0; r < c->rows + 3; r++) {
        const int in_loss = r >= 1 && r < 1 + (c->rows ? nl : 0);
        if (!in_loss)
            ck_assert_msg(gl[r] == -7.0f, "loss element %zu outside the output written", r);
        const int in_lse = c->lse && r >= 2 && r < 2 + c->rows;
        if (in_lse)
            ck_assert_msg(close_to(glse[r], wlse[r - 2], 1e-4, 1e-5),
                          "%s: lse row %zu %.9g, reference %.9g", dn, r - 2, (double)glse[r],
                          wlse[r - 2]);
        else
            ck_assert_msg(glse[r] == -7.0f, "lse element %zu written", r);
    }
    /* The gradient over the logits; everything else of the buffer as it was. */
    if (c->grad && c->rows) {
        size_t first = 0;
        double maxerr = 0;
        size_t bad = oclf_ref_compare(dt, (char *)gx + c->offset * es, xs, wg, c->rows, c->cols,
                                      &first, &maxerr);
        ck_assert_msg(bad == 0,
                      "%s %zux%zu pad %zu reduction %d: %zu gradient elements out of tolerance, "
                      "first at %zu (got %g want %g), max error %g",
                      dn, c->rows, c->cols, c->pad, c->reduction, bad, first,
                      (double)oclf_ref_get(dt, (char *)gx + c->offset * es,
                                           (first / c->cols) * xs + first % c->cols),
                      bad ? wg[first] : 0.0, maxerr);
    }
    for (size_t i = 0; i < n; i++) {
        const size_t rel = i - c->offset;
        const int inside = c->grad && i >= c->offset && rel / xs < c->rows && rel % xs < c->cols;
        if (!inside)
            ck_assert_msg(memcmp((char *)gx + i * es, (char *)x + i * es, es) == 0,
                          "%s: logits element %zu written", dn, i);
    }

    ce_result res = {NULL, NULL, NULL};
    res.loss = malloc((nl + 1) * 4);
    memcpy(res.loss, gl + 1, nl * 4);
    res.lse = malloc((c->rows + 1) * 4);
    memcpy(res.lse, glse + 2, c->rows * 4);
    res.grad = malloc((c->rows * c->cols + 1) * sizeof *res.grad);
    for (size_t r = 0; r < c->rows; r++)
        for (size_t k = 0; k < c->cols; k++)
            res.grad[r * c->cols + k] =
                oclf_ref_get(dt, (char *)gx + c->offset * es, r * xs + k);
    free(x), free(t), free(up), free(loss0), free(lse0), free(gx), free(gl), free(glse);
    free(wl), free(wlse), free(wg);
    clReleaseMemObject(mx), clReleaseMemObject(mt), clReleaseMemObject(ml);
    clReleaseMemObject(mlse), clReleaseMemObject(mu);
    return res;
}

static void check_case(const ce_case *c)
{
    ce_result r = run_case(c);
    free_result(&r);
}

/* dtype x path x reduction, strided rows with an offset, some rows
 * ignored, upstream gradients, the LSE. */
START_TEST(test_matrix)
{
    const oclf_dtype dt = dtypes[_i / 6];
    const oclf_choice ch = th_choice((_i / 3) % 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    ce_case c = {.dtype = dt, .rows = 7, .cols = th_quick() ? 77 : 769, .pad = 3, .offset = 5,
                 .reduction = _i % 3, .grad = 1, .upstream = 1, .lse = 1, .choice = &ch};
    check_case(&c);
    /* without the gradient the logits stay as they were */
    c.grad = 0;
    c.upstream = 0;
    check_case(&c);
}
END_TEST

/* Vocabularies not a multiple of any vector width, and tiny ones; 0 and 1
 * rows. */
START_TEST(test_shapes)
{
    static const size_t vocabs[] = {1, 3, 8, 32001};
    static const size_t rows[] = {0, 1, 5};
    const oclf_dtype dt = _i % 2 ? OCLF_BF16 : OCLF_F32;
    const oclf_choice ch = th_choice(_i / 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            if (th_quick() && vocabs[v] > 1000 && rows[r] > 1)
                continue;
            for (int red = 0; red < 3; red++) {
                ce_case c = {.dtype = dt, .rows = rows[r], .cols = vocabs[v], .reduction = red,
                             .grad = 1, .upstream = red != 1, .lse = 1, .choice = &ch};
                check_case(&c);
            }
        }
}
END_TEST

/* Label smoothing, softcap and z-loss, each alone and together. */
START_TEST(test_features)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const oclf_choice ch = th_choice(_i / 3 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    const float set[4][3] = {{0.1f, 0, 0}, {0, 30.0f, 0}, {0, 0, 1e-3f}, {0.2f, 15.0f, 1e-2f}};
    for (int k = 0; k < 4; k++)
        for (int red = 0; red < 3; red++) {
            ce_case c = {.dtype = dt, .rows = 6, .cols = th_quick() ? 130 : 1031, .pad = 1,
                         .reduction = red, .ls = set[k][0], .cap = set[k][1], .zl = set[k][2],
                         .grad = 1, .upstream = 1, .lse = 1, .range = set[k][1] > 0 ? 40.0f : 6.0f,
                         .choice = &ch};
            check_case(&c);
        }
}
END_TEST

/* Every row ignored: NONE zeros, SUM 0, MEAN NaN (PyTorch's 0/0); the
 * gradient is zero everywhere; the LSE is still written. Also every row
 * ignored but z-loss and smoothing asked: still nothing. */
START_TEST(test_all_ignored)
{
    const oclf_choice ch = th_choice(_i ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    for (int red = 0; red < 3; red++) {
        ce_case c = {.dtype = OCLF_F32, .rows = 4, .cols = 37, .reduction = red, .ls = 0.1f,
                     .zl = 1e-3f, .grad = 1, .upstream = 1, .lse = 1, .ignore = IGN_ALL,
                     .choice = &ch};
        ce_result r = run_case(&c);
        if (red == OCLF_REDUCTION_MEAN)
            ck_assert_msg(isnan(r.loss[0]), "mean over no rows: %g, expected NaN",
                          (double)r.loss[0]);
        else
            ck_assert_msg(r.loss[0] == 0.0f, "all ignored: loss %g", (double)r.loss[0]);
        for (size_t i = 0; i < c.rows * c.cols; i++)
            ck_assert_msg(r.grad[i] == 0.0, "all ignored: gradient element %zu is %g", i,
                          r.grad[i]);
        for (size_t i = 0; i < c.rows; i++)
            ck_assert_msg(isfinite(r.lse[i]) && r.lse[i] > 0, "lse of an ignored row");
        free_result(&r);
    }
}
END_TEST

/* Logits masked to -inf (padded vocabularies, constrained decoding): they
 * take no probability and get a zero gradient; without smoothing the loss
 * stays finite, with smoothing the mean of the logits is -inf and so is the
 * loss of every row not ignored (as PyTorch gives). Both paths, every
 * dtype, every reduction, both row structures. */
START_TEST(test_masked_logits)
{
    const oclf_dtype dt = dtypes[_i % 3];
    oclf_choice ch = th_choice(_i / 3 % 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", _i / 6);
    for (int smooth = 0; smooth < 2; smooth++)
        for (int red = 0; red < 3; red++) {
            ce_case c = {.dtype = dt, .rows = 6, .cols = th_quick() ? 131 : 1031, .pad = 1,
                         .reduction = red, .ls = smooth ? 0.1f : 0.0f, .zl = 1e-3f, .grad = 1,
                         .upstream = 1, .lse = 1, .masked = 1, .choice = &ch};
            ce_result r = run_case(&c);
            const size_t nl = red == OCLF_REDUCTION_NONE ? c.rows : 1;
            for (size_t i = 0; i < nl; i++) {
                const int ignored = red == OCLF_REDUCTION_NONE && i % 3 == 1;
                if (smooth && !ignored)
                    ck_assert_msg(isinf(r.loss[i]) && r.loss[i] > 0,
                                  "smoothing over -inf logits: loss %zu is %g, expected inf", i,
                                  (double)r.loss[i]);
                else
                    ck_assert_msg(isfinite(r.loss[i]), "masked logits: loss %zu is %g", i,
                                  (double)r.loss[i]);
            }
            for (size_t i = 0; i < c.rows * c.cols; i++)
                ck_assert_msg(isfinite(r.grad[i]), "masked logits: gradient %zu is %g", i,
                              r.grad[i]);
            free_result(&r);
        }
}
END_TEST

/* One row {1, -inf, 2, 0.5}, target 0, reduction none: 1.46437 (PyTorch's
 * F.cross_entropy), on both paths. */
START_TEST(test_masked_value)
{
    th_env *e = th_get();
    const float x[4] = {1.0f, -INFINITY, 2.0f, 0.5f};
    const int64_t t = 0;
    const double want = log(exp(1.0) + exp(2.0) + exp(0.5)) - 1.0;
    for (int p = 0; p < 2; p++) {
        const oclf_choice ch = th_choice(p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
        float loss = -7.0f;
        cl_mem mx = th_upload(x, sizeof x), mt = th_upload(&t, 8), ml = th_upload(&loss, 4);
        oclf_buf bx = {mx, 0, 0}, bt = {mt, 0, 0}, bl = {ml, 0, 0};
        oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
        o.reduction = OCLF_REDUCTION_NONE;
        TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, 1, 4, bx, bt, bl, &o, &ch, 0, NULL,
                                 NULL));
        th_download(ml, &loss, 4);
        ck_assert_msg(fabs(loss - want) < 1e-5, "path %d: loss %.7g, expected %.7g", p,
                      (double)loss, want);
        clReleaseMemObject(mx), clReleaseMemObject(mt), clReleaseMemObject(ml);
    }
}
END_TEST

/* Both row structures with vector widths that leave tails. */
START_TEST(test_structures)
{
    static const int cfg[][3] = {{0, 1, 1}, {0, 4, 8}, {0, 2, 16}, {1, 16, 4}, {1, 64, 1},
                                 {1, 32, 16}};
    const int k = _i / 2;
    oclf_choice ch = th_choice(_i % 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", cfg[k][0]);
    oclf_params_set(&ch.params, "WGS", cfg[k][1]);
    oclf_params_set(&ch.params, "VEC", cfg[k][2]);
    for (int d = 0; d < 3; d++) {
        ce_case c = {.dtype = dtypes[d], .rows = 9, .cols = th_quick() ? 203 : 2053, .pad = 2,
                     .offset = 1, .reduction = OCLF_REDUCTION_MEAN, .ls = 0.05f, .zl = 1e-4f,
                     .grad = 1, .upstream = 1, .lse = 1, .choice = &ch};
        check_case(&c);
    }
}
END_TEST

/* Both sides of the staged row's fit line: with a work-group per row,
 * ce_fused keeps a row's logits in local memory between its passes where
 * 4 bytes a logit and the group's scratch fit in half the device's local
 * memory (2 MiB here: 4096 and 4099 columns fit, 262145 and 262148 do
 * not), else reads the row
 * twice from global memory; each against the reference, gradient, softcap,
 * smoothing and z-loss on, rows offset and padded (the element-aligned
 * build) or packed at a multiple of the vector (the aligned one). */
START_TEST(test_row_on_chip)
{
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", 1);
    oclf_params_set(&ch.params, "WGS", 64);
    oclf_params_set(&ch.params, "VEC", 4);
    const int big = _i / 3;
    for (int packed = 0; packed < 2; packed++) {
        const size_t cols = big ? (packed ? 262148 : 262145) : (packed ? 4096 : 4099);
        ce_case c = {.dtype = dtypes[_i % 3], .rows = big ? 2 : 5,
                     .cols = cols, .pad = packed ? 0 : 3,
                     .offset = packed ? 0 : 1, .reduction = OCLF_REDUCTION_NONE, .ls = 0.05f,
                     .cap = 30.0f, .zl = 1e-4f, .grad = 1, .upstream = 1, .lse = 1,
                     .range = 8.0f, .choice = &ch};
        check_case(&c);
    }
}
END_TEST

/* The fused and unfused paths agree within the dtype's tolerance. */
START_TEST(test_fused_unfused)
{
    const oclf_dtype dt = dtypes[_i];
    const oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    for (int red = 0; red < 3; red++) {
        ce_case c = {.dtype = dt, .rows = 11, .cols = th_quick() ? 300 : 3001, .reduction = red,
                     .ls = 0.1f, .cap = 20.0f, .zl = 1e-3f, .grad = 1, .upstream = 1, .lse = 1,
                     .range = 25.0f, .choice = &f};
        ce_result a = run_case(&c);
        c.choice = &u;
        ce_result b = run_case(&c);
        const size_t nl = red == OCLF_REDUCTION_NONE ? c.rows : 1;
        for (size_t i = 0; i < nl; i++)
            ck_assert_msg(close_to(a.loss[i], b.loss[i], 1e-4, 1e-5), "loss %zu: %g vs %g", i,
                          (double)a.loss[i], (double)b.loss[i]);
        double atol, rtol;
        oclf_ref_tolerance(dt, &atol, &rtol);
        for (size_t i = 0; i < c.rows * c.cols; i++)
            ck_assert_msg(close_to(a.grad[i], b.grad[i], atol, rtol),
                          "gradient %zu: fused %g, unfused %g", i, a.grad[i], b.grad[i]);
        free_result(&a), free_result(&b);
    }
}
END_TEST

/* Sum and mean are the same bits on every call (no atomics). */
START_TEST(test_deterministic)
{
    ce_case c = {.dtype = OCLF_F32, .rows = th_quick() ? 40 : 300, .cols = 257,
                 .reduction = OCLF_REDUCTION_SUM, .grad = 0, .choice = NULL};
    ce_result a = run_case(&c), b = run_case(&c);
    ck_assert_msg(memcmp(a.loss, b.loss, 4) == 0, "two calls: %a vs %a", (double)a.loss[0],
                  (double)b.loss[0]);
    free_result(&a), free_result(&b);
}
END_TEST

/* The device's gradient against central differences of the device's own
 * mean loss (f32, small shape), and the reference's gradient against
 * central differences of the reference loss (fp64). */
START_TEST(test_finite_difference)
{
    th_env *e = th_get();
    const size_t T = 3, V = 11;
    th_seed(99);
    float *x = th_random(OCLF_F32, T * V, -3.0f, 3.0f);
    int64_t t[3] = {4, -100, 10};
    const float gup = 1.3f;
    cl_mem mx = th_upload(x, T * V * 4), mt = th_upload(t, sizeof t), ml = th_alloc(4);
    cl_mem mu = th_upload(&gup, 4);
    oclf_buf bx = {mx, 0, 0}, bt = {mt, 0, 0}, bl = {ml, 0, 0}, bu = {mu, 0, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    o.label_smoothing = 0.1f;
    o.softcap = 5.0f;
    o.z_loss = 0.01f;
    o.grad_output = &bu;
    o.compute_grad = 1;
    TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, T, V, bx, bt, bl, &o, NULL, 0, NULL,
                             NULL));
    float grad[33];
    th_download(mx, grad, sizeof grad);
    o.compute_grad = 0;
    const float h = 1e-2f;
    double ref_grad[33];
    oclf_ref_cross_entropy(OCLF_F32, T, V, x, V, t, -100, 2, 0.1, 5.0, 0.01, &gup, NULL, NULL,
                           NULL, ref_grad);
    for (size_t i = 0; i < T * V; i++) {
        float lp, lm;
        float *xp = malloc(T * V * 4);
        memcpy(xp, x, T * V * 4);
        xp[i] = x[i] + h;
        clEnqueueWriteBuffer(e->queue, mx, CL_TRUE, 0, T * V * 4, xp, 0, NULL, NULL);
        TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, T, V, bx, bt, bl, &o, NULL, 0,
                                 NULL, NULL));
        th_download(ml, &lp, 4);
        double rp, rm;
        oclf_ref_cross_entropy(OCLF_F32, T, V, xp, V, t, -100, 2, 0.1, 5.0, 0.01, NULL, NULL,
                               NULL, &rp, NULL);
        xp[i] = x[i] - h;
        clEnqueueWriteBuffer(e->queue, mx, CL_TRUE, 0, T * V * 4, xp, 0, NULL, NULL);
        TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, T, V, bx, bt, bl, &o, NULL, 0,
                                 NULL, NULL));
        th_download(ml, &lm, 4);
        oclf_ref_cross_entropy(OCLF_F32, T, V, xp, V, t, -100, 2, 0.1, 5.0, 0.01, NULL, NULL,
                               NULL, &rm, NULL);
        /* the perturbed logits are rounded to f32: divide by the step taken */
        const double step = (double)(x[i] + h) - (double)(x[i] - h);
        const double fd = gup * ((double)lp - (double)lm) / step;
        const double fd_ref = gup * (rp - rm) / step;
        ck_assert_msg(fabs(fd - grad[i]) <= 2e-3, "element %zu: gradient %g, differences %g", i,
                      (double)grad[i], fd);
        ck_assert_msg(fabs(fd_ref - ref_grad[i]) <= 1e-4 * (1 + fabs(ref_grad[i])),
                      "element %zu: reference gradient %g, reference differences %g", i,
                      ref_grad[i], fd_ref);
        free(xp);
    }
    free(x);
    clReleaseMemObject(mx), clReleaseMemObject(mt), clReleaseMemObject(ml), clReleaseMemObject(mu);
}
END_TEST

/* Rows on vector boundaries (every offset and row stride a multiple of the
 * vector width) run the aligned build of the kernels (OCLF_ALIGNED: one
 * wide access per vector on GPUs), any other placement the plain build;
 * both against the reference, fused and unfused, both structures. */
START_TEST(test_aligned_build)
{
    const oclf_dtype dt = dtypes[_i];
    for (int k = 0; k < TH_PLACES; k++)
        for (int p = 0; p < TH_STRUCTS; p++) {
            const oclf_choice ch = th_struct_choice(p);
            case_ctx = th_build_log_context();
            const ce_case c = {.dtype = dt, .rows = 5, .cols = 768, .pad = th_places[k].pad,
                               .offset = th_places[k].offset, .reduction = OCLF_REDUCTION_MEAN, .ls = 0.1f,
                               .grad = 1, .upstream = 1, .lse = 1, .choice = &ch};
            ce_result r = run_case(&c);
            free_result(&r);
            char what[96];
            snprintf(what, sizeof what, "%s offset %zu pad %zu", oclf_dtype_name(dt),
                     th_places[k].offset, th_places[k].pad);
            th_expect_build("loss.cl", p, th_places[k].aligned, what);
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem x, t, loss, lse, small;
    float *hx, hl[8], hlse[8];
    int64_t ht[4];
    size_t rows, cols;
} bad_env;

static bad_env bad_setup(void)
{
    bad_env b;
    b.rows = 4;
    b.cols = 64;
    b.hx = th_random(OCLF_F32, b.rows * b.cols, -1, 1);
    int64_t t[4] = {3, -100, 63, 0};
    memcpy(b.ht, t, sizeof t);
    for (int i = 0; i < 8; i++)
        b.hl[i] = b.hlse[i] = 5.0f + (float)i;
    b.x = th_upload(b.hx, b.rows * b.cols * 4);
    b.t = th_upload(b.ht, sizeof b.ht);
    b.loss = th_upload(b.hl, sizeof b.hl);
    b.lse = th_upload(b.hlse, sizeof b.hlse);
    b.small = th_upload(b.hl, 8);
    return b;
}

static void bad_check_untouched(bad_env *b)
{
    const size_t n = b->rows * b->cols * 4;
    void *got = malloc(n);
    float l[8];
    clFinish(th_get()->queue);
    th_download(b->x, got, n);
    ck_assert_msg(memcmp(got, b->hx, n) == 0, "a failing call wrote the logits");
    th_download(b->loss, l, sizeof l);
    ck_assert_msg(memcmp(l, b->hl, sizeof l) == 0, "a failing call wrote the loss");
    th_download(b->lse, l, sizeof l);
    ck_assert_msg(memcmp(l, b->hlse, sizeof l) == 0, "a failing call wrote the lse");
    free(got);
}

static void bad_free(bad_env *b)
{
    clReleaseMemObject(b->x), clReleaseMemObject(b->t), clReleaseMemObject(b->loss);
    clReleaseMemObject(b->lse), clReleaseMemObject(b->small);
    free(b->hx);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb = bad_setup();
    const size_t R = bb.rows, C = bb.cols;
    oclf_buf X = {bb.x, 0, 0}, Tg = {bb.t, 0, 0}, L = {bb.loss, 0, 0}, N = {NULL, 0, 0};
    oclf_buf Lse = {bb.lse, 0, 0}, S = {bb.small, 0, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    o.compute_grad = 1;
    o.lse = &Lse;
    o.reduction = OCLF_REDUCTION_NONE;

    ck_assert_int_eq(oclf_cross_entropy(NULL, e->queue, OCLF_F32, R, C, X, Tg, L, &o, NULL, 0,
                                        NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(oclf_cross_entropy(e->ctx, NULL, OCLF_F32, R, C, X, Tg, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, N, Tg, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "logits");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, N, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "targets");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, N, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "loss");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, 0, X, Tg, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "vocab is 0");
    oclf_buf strided = {bb.x, 0, C - 1};
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, strided, Tg, L, &o, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "stride");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, S, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "loss");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, S, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "targets");
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, (oclf_dtype)7, R, C, X, Tg, L, &o, NULL, 0, NULL,
                              NULL),
           OCLF_UNSUPPORTED, "dtype");
    /* overlaps */
    oclf_buf Lx = {bb.x, 0, 0};
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, Lx, &o, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "overlap");
    o.lse = &L;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "loss overlaps lse");
    o.lse = &S;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "lse");
    o.lse = &Lse;
    /* options */
    oclf_cross_entropy_options bad = o;
    bad.size = 3;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "options");
    bad = o;
    bad.label_smoothing = 1.5f;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "label_smoothing");
    bad.label_smoothing = NAN;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "label_smoothing");
    bad = o;
    bad.reduction = 7;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "reduction");
    bad = o;
    bad.z_loss = -1.0f;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "z_loss");
    bad = o;
    bad.softcap = INFINITY;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "softcap");
    bad = o;
    bad.compute_grad = 2;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "compute_grad");
    bad = o;
    bad.grad_output = &S; /* NONE needs [tokens] */
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &bad, NULL, 0, NULL,
                              NULL),
           OCLF_INVALID_ARGUMENT, "grad_output");
    oclf_choice ch = th_choice((oclf_path)9);
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "path");

    /* Bad targets, found on the device: the row named, nothing written, on
     * both paths and every reduction. */
    for (int p = 0; p < 2; p++)
        for (int red = 0; red < 3; red++) {
            ch = th_choice(p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
            o.reduction = red;
            int64_t t[4] = {3, -100, 64, 0}; /* row 2: target == vocab */
            clEnqueueWriteBuffer(e->queue, bb.t, CL_TRUE, 0, sizeof t, t, 0, NULL, NULL);
            cl_event ev = (cl_event)1;
            EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, &ch, 0,
                                      NULL, &ev),
                   OCLF_INVALID_ARGUMENT, "row 2");
            ck_assert_ptr_null(ev);
            ck_assert_ptr_nonnull(strstr(oclf_last_error(e->ctx), "64"));
            int64_t t2[4] = {3, -5, 700, 0}; /* rows 1 and 2: the first is named */
            clEnqueueWriteBuffer(e->queue, bb.t, CL_TRUE, 0, sizeof t2, t2, 0, NULL, NULL);
            EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, &ch, 0,
                                      NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "row 1");
        }
    /* a different ignore_index makes -100 a bad target */
    clEnqueueWriteBuffer(e->queue, bb.t, CL_TRUE, 0, sizeof bb.ht, bb.ht, 0, NULL, NULL);
    o.ignore_index = -1;
    EXPECT(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "row 1");
    o.ignore_index = -100;
    /* and the call goes on working; zero rows enqueue a marker */
    cl_event ev = NULL;
    TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, 0, C, X, Tg, L, &o, NULL, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    bad_check_untouched(&bb);
    o.compute_grad = 0;
    o.lse = NULL;
    TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, R, C, X, Tg, L, &o, NULL, 0, NULL, NULL));
    bad_free(&bb);
}
END_TEST

/* NULL options: mean with ignore_index -100, no gradient. */
START_TEST(test_null_options)
{
    th_env *e = th_get();
    const size_t T = 3, V = 5;
    float x[15];
    for (int i = 0; i < 15; i++)
        x[i] = (float)(i % 5) * 0.5f;
    int64_t t[3] = {1, -100, 4};
    cl_mem mx = th_upload(x, sizeof x), mt = th_upload(t, sizeof t), ml = th_alloc(4);
    oclf_buf bx = {mx, 0, 0}, bt = {mt, 0, 0}, bl = {ml, 0, 0};
    TH_OK(oclf_cross_entropy(e->ctx, e->queue, OCLF_F32, T, V, bx, bt, bl, NULL, NULL, 0, NULL,
                             NULL));
    float got;
    th_download(ml, &got, 4);
    double want;
    oclf_ref_cross_entropy(OCLF_F32, T, V, x, V, t, -100, 2, 0, 0, 0, NULL, NULL, NULL, &want,
                           NULL);
    ck_assert_msg(close_to(got, want, 1e-5, 1e-5), "loss %g, reference %g", (double)got, want);
    /* a struct made by the _init function is the same */
    oclf_cross_entropy_options o;
    oclf_cross_entropy_options_init(&o);
    ck_assert_int_eq(o.ignore_index, -100);
    ck_assert_int_eq(o.reduction, OCLF_REDUCTION_MEAN);
    ck_assert_uint_eq(o.size, sizeof o);
    clReleaseMemObject(mx), clReleaseMemObject(mt), clReleaseMemObject(ml);
}
END_TEST

static Suite *loss_suite(void)
{
    Suite *s = suite_create("loss");
    TCase *t = tcase_create("cross_entropy");
    tcase_add_loop_test(t, test_aligned_build, 0, 3);
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, test_matrix, 0, 18);
    tcase_add_loop_test(t, test_shapes, 0, 4);
    tcase_add_loop_test(t, test_features, 0, 6);
    tcase_add_loop_test(t, test_all_ignored, 0, 2);
    tcase_add_loop_test(t, test_masked_logits, 0, 12);
    tcase_add_test(t, test_masked_value);
    tcase_add_loop_test(t, test_structures, 0, 12);
    tcase_add_loop_test(t, test_row_on_chip, 0, th_quick() ? 3 : 6);
    tcase_add_loop_test(t, test_fused_unfused, 0, 3);
    tcase_add_test(t, test_deterministic);
    tcase_add_test(t, test_finite_difference);
    tcase_add_test(t, test_null_options);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("bad_arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(loss_suite()); }
