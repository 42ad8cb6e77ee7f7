/*
 * The gradient of activation-and-multiply against the fp64 reference and
 * against finite differences of the forward call: every activation, both
 * halves, the interleaved SWIGLU_OAI, every dtype and path, widths 1, 7,
 * 1001 and 5125, strided rows with offsets, 0/1/many rows, split rows, in
 * place (din == in), both kernel structures, fused == unfused, saturated
 * inputs, the aligned and the plain builds, and the bad arguments.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};
static const char *const act_names[] = {"silu", "gelu", "gelu_tanh", "fatrelu", "swiglu_oai"};

/* The five activations, then the second-half variants of the first four. */
#define NVARIANTS 9
static oclf_activation variant(int v)
{
    oclf_activation a;
    memset(&a, 0, sizeof a);
    a.kind = (oclf_act)(v < 5 ? v : v - 5);
    a.act_on_second = v >= 5;
    a.threshold = 0.25f;
    a.alpha = 1.702f;
    a.limit = 7.0f;
    return a;
}

typedef struct bwd_case {
    oclf_activation act;
    oclf_dtype dtype;
    size_t rows, d;
    size_t pad;    /* extra elements per row of every operand (strided when > 0) */
    size_t offset; /* leading elements before row 0 */
    int in_place;  /* din is exactly in */
    const oclf_choice *choice;
    size_t dout_shift; /* leading elements of dout's alone, after offset */
} bwd_case;

/* The context run_case calls on when set (else the harness's). */
static oclf_context *case_ctx;

/* Runs one case: din against the reference, dout (and in, unless in place)
 * unchanged, nothing written outside din's rows. Returns din's rows packed
 * (rows x 2d). */
static void *run_case(const bwd_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), d = c->d, w = 2 * d;
    /* dout's rows get a pad of their own, so its stride differs from in's */
    const size_t is = w + c->pad, gs = d + 2 * c->pad;
    const size_t go = c->offset + c->dout_shift;
    const size_t ni = c->offset + c->rows * is + 1, ng = go + c->rows * gs + 1;
    th_seed(c->rows * 131 + d * 7 + (size_t)c->act.kind * 3 + (size_t)c->act.act_on_second +
            (size_t)c->in_place * 11);
    /* SWIGLU_OAI inputs reach past the clamp limit on both sides. */
    const float span = c->act.kind == OCLF_ACT_SWIGLU_OAI ? 10.0f : 4.0f;
    void *x = th_random(dt, ni, -span, span);
    void *g = th_random(dt, ng, -2.0f, 2.0f);
    void *y = th_random(dt, ni, -9.0f, 9.0f); /* din's sentinel contents */
    cl_mem mx = th_upload(x, ni * es), mg = th_upload(g, ng * es);
    cl_mem my = c->in_place ? mx : th_upload(y, ni * es);
    oclf_buf bi = {mx, c->offset, c->pad ? is : 0}, bg = {mg, go, c->pad ? gs : 0};
    oclf_buf bo = {my, c->offset, c->pad ? is : 0};
    cl_event ev = NULL;
    TH_OK(oclf_act_and_mul_backward(case_ctx ? case_ctx : e->ctx, e->queue, dt, c->rows, d, bi, bg,
                                    bo, &c->act, c->choice, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    void *gx = malloc(ni * es), *gg = malloc(ng * es), *gy = malloc(ni * es);
    th_download(mg, gg, ng * es);
    th_download(my, gy, ni * es);
    ck_assert_msg(memcmp(gg, g, ng * es) == 0, "act_and_mul_backward wrote dout");
    if (!c->in_place) {
        th_download(mx, gx, ni * es);
        ck_assert_msg(memcmp(gx, x, ni * es) == 0, "act_and_mul_backward wrote in");
    }

    double *want = malloc((c->rows * w + 1) * sizeof *want);
    oclf_ref_act_and_mul_backward(dt, &c->act, c->rows, d, (char *)x + c->offset * es, is,
                                  (char *)g + go * es, gs, want);
    size_t first = 0;
    double maxerr = 0;
    const char *got = (const char *)gy + c->offset * es;
    size_t bad = oclf_ref_compare(dt, got, is, want, c->rows, w, &first, &maxerr);
    ck_assert_msg(bad == 0,
                  "%s%s %s %zux%zu pad %zu in place %d path %d: %zu elements out of tolerance, "
                  "first at %zu (got %g want %g), max error %g",
                  act_names[c->act.kind], c->act.act_on_second ? " (second)" : "",
                  oclf_dtype_name(dt), c->rows, d, c->pad, c->in_place,
                  c->choice ? (int)c->choice->path : 0, bad, first,
                  (double)oclf_ref_get(dt, got, (first / w) * is + first % w),
                  bad ? want[first] : 0.0, maxerr);
    /* Outside din's rows: the sentinels, or in place the input. */
    const void *before = c->in_place ? x : y;
    for (size_t i = 0; i < ni; i++) {
        size_t rel = i - c->offset;
        int inside = i >= c->offset && rel / is < c->rows && rel % is < w;
        if (!inside)
            ck_assert_msg(memcmp((char *)gy + i * es, (const char *)before + i * es, es) == 0,
                          "act_and_mul_backward: element %zu outside din's rows was written", i);
    }
    void *packed = malloc(c->rows * w * es + 1);
    for (size_t r = 0; r < c->rows; r++)
        memcpy((char *)packed + r * w * es, got + r * is * es, w * es);
    free(want);
    free(gx), free(gg), free(gy), free(x), free(g), free(y);
    clReleaseMemObject(mx), clReleaseMemObject(mg);
    if (!c->in_place)
        clReleaseMemObject(my);
    return packed;
}

/* Fused and unfused agree with each other (each with the reference too). */
static void fused_vs_unfused(bwd_case c)
{
    oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    if (c.choice)
        f.params = u.params = c.choice->params;
    c.choice = &f;
    void *rf = run_case(&c);
    c.choice = &u;
    void *ru = run_case(&c);
    const size_t n = c.rows * 2 * c.d;
    double *as_ref = malloc((n + 1) * sizeof *as_ref);
    for (size_t i = 0; i < n; i++)
        as_ref[i] = oclf_ref_get(c.dtype, ru, i);
    size_t bad = oclf_ref_compare(c.dtype, rf, 2 * c.d, as_ref, c.rows, 2 * c.d, NULL, NULL);
    ck_assert_msg(bad == 0, "%s %s %zux%zu: fused and unfused differ in %zu elements",
                  act_names[c.act.kind], oclf_dtype_name(c.dtype), c.rows, c.d, bad);
    free(as_ref);
    free(rf);
    free(ru);
}

/* Every activation variant x dtype (loop index), default parameters: odd
 * widths 1, 7, 1001, a wide one (13824: a single row is split across
 * work-items), 0/1/7/33 rows, packed and strided with offsets. */
START_TEST(test_matrix_default)
{
    const oclf_activation act = variant(_i % NVARIANTS);
    const oclf_dtype dt = dtypes[_i / NVARIANTS];
    static const size_t widths[] = {1, 7, 1001, 13824};
    static const size_t rows[] = {0, 1, 7, 33};
    for (size_t wi = 0; wi < 4; wi++) {
        for (size_t ri = 0; ri < 4; ri++) {
            const size_t d = widths[wi];
            if (d > 2000 && rows[ri] > 7)
                continue; /* the split single row is the point of the wide case */
            bwd_case c = {act, dt, rows[ri], d, (wi + ri) % 2 ? 3 : 0, (wi + ri) % 2 ? 5 : 0, 0,
                          NULL, 0};
            fused_vs_unfused(c);
        }
    }
}
END_TEST

/* din == in: the gradient replaces the saved input, on both paths (the
 * unfused one writes the activated half before the half it still reads
 * last: cl/act.cl). */
START_TEST(test_in_place)
{
    const oclf_activation act = variant(_i % NVARIANTS);
    const oclf_dtype dt = dtypes[_i / NVARIANTS];
    static const size_t shapes[][2] = {{1, 7}, {9, 1001}, {3, 77}};
    for (size_t si = 0; si < 3; si++) {
        bwd_case c = {act, dt, shapes[si][0], shapes[si][1], si == 1 ? 2 : 0, si == 2 ? 4 : 0, 1,
                      NULL, 0};
        fused_vs_unfused(c);
    }
}
END_TEST

/* The other kernel structure and vector widths 1, 2, 4, 8, so the
 * structure a GPU gets is right before a GPU runs it. */
START_TEST(test_structures)
{
    const int d = _i / NVARIANTS;
    const oclf_activation act = variant(_i % NVARIANTS);
    static const int configs[3][2][3] = {
        {{1, 64, 4}, {0, 8, 1}},
        {{1, 32, 8}, {0, 0, 0}},
        {{0, 4, 2}, {0, 0, 0}},
    };
    for (int k = 0; k < 2 && configs[d][k][1]; k++) {
        oclf_choice ch = th_choice(OCLF_PATH_AUTO);
        oclf_params_set(&ch.params, "LAYOUT", configs[d][k][0]);
        oclf_params_set(&ch.params, "WGS", configs[d][k][1]);
        oclf_params_set(&ch.params, "VEC", configs[d][k][2]);
        static const size_t ws[] = {7, 769, 5125}, rs[] = {1, 9, 3};
        for (size_t wi = 0; wi < 3; wi++) {
            bwd_case c = {act, dtypes[d], rs[wi], ws[wi], wi == 1 ? 2 : 0, 1, (int)(wi == 2),
                          &ch, 0};
            fused_vs_unfused(c);
        }
    }
}
END_TEST

/* L(in) = sum(w * act_and_mul(in)) has gradient act_and_mul_backward(in, w):
 * central differences of the forward call, in f32, on a small shape,
 * every activation variant (loop index), both paths. Inputs keep a step
 * away from FATRELU's threshold and SWIGLU_OAI's limits, where the
 * function has a kink. */
START_TEST(test_finite_differences)
{
    th_env *e = th_get();
    const oclf_activation act = variant(_i);
    enum { R = 2, D = 5, W = 2 * D };
    const float h = 1e-2f;
    float in[R * W], wt[R * D];
    th_seed(4242 + (uint64_t)_i);
    for (size_t i = 0; i < R * W; i++) {
        float v;
        do
            v = th_uniform(-3.0f, 3.0f);
        while (fabsf(v - act.threshold) < 4 * h);
        in[i] = v;
    }
    /* SWIGLU_OAI: gates (even) and ups (odd) past the limits, where their
     * gradients are 0 */
    if (act.kind == OCLF_ACT_SWIGLU_OAI)
        in[0] = 9.0f, in[3] = -8.5f, in[5] = 8.0f, in[W + 2] = 7.5f;
    for (size_t i = 0; i < R * D; i++)
        wt[i] = th_uniform(-1.0f, 1.0f);
    cl_mem mi = th_upload(in, sizeof in), mw = th_upload(wt, sizeof wt);
    cl_mem mo = th_alloc(sizeof wt), md = th_alloc(sizeof in);
    for (int p = OCLF_PATH_FUSED; p <= OCLF_PATH_UNFUSED; p++) {
        oclf_choice ch = th_choice((oclf_path)p);
        float grad[R * W];
        TH_OK(oclf_act_and_mul_backward(e->ctx, e->queue, OCLF_F32, R, D, (oclf_buf){mi, 0, 0},
                                        (oclf_buf){mw, 0, 0}, (oclf_buf){md, 0, 0}, &act, &ch, 0,
                                        NULL, NULL));
        th_download(md, grad, sizeof grad);
        for (size_t j = 0; j < R * W; j++) {
            double l[2];
            for (int side = 0; side < 2; side++) {
                float moved[R * W];
                memcpy(moved, in, sizeof in);
                moved[j] += side ? h : -h;
                float out[R * D];
                cl_mem mm = th_upload(moved, sizeof moved);
                TH_OK(oclf_act_and_mul(e->ctx, e->queue, OCLF_F32, R, D, (oclf_buf){mm, 0, 0},
                                       (oclf_buf){mo, 0, 0}, &act, &ch, 0, NULL, NULL));
                th_download(mo, out, sizeof out);
                clReleaseMemObject(mm);
                l[side] = 0;
                for (size_t i = 0; i < R * D; i++)
                    l[side] += (double)wt[i] * (double)out[i];
            }
            /* The step as the floats took it; the quotient's error is
             * h^2 f''' / 6 plus the forward's rounding over 2h, both far
             * below the tolerance. */
            const double fd = (l[1] - l[0]) / (double)(((in[j] + h) - (in[j] - h)));
            ck_assert_msg(fabs(fd - grad[j]) <= 2e-3 + 2e-3 * fabs(fd),
                          "%s%s path %d: d L / d in[%zu] = %g, finite differences %g",
                          act_names[act.kind], act.act_on_second ? " (second)" : "", p, j,
                          (double)grad[j], fd);
        }
    }
    clReleaseMemObject(mi), clReleaseMemObject(mw), clReleaseMemObject(mo),
        clReleaseMemObject(md);
}
END_TEST

/* Saturated inputs (|x| up to 1000, where exp overflows and GELU-tanh's
 * cubic would) give the reference's finite gradients, and 0 and -0 theirs. */
START_TEST(test_saturation)
{
    th_env *e = th_get();
    const float vals[] = {-1000.0f, -100.0f, -30.0f, -9.0f, -0.0f, 0.0f, 9.0f, 30.0f, 100.0f,
                          1000.0f};
    enum { D = sizeof vals / sizeof *vals };
    float in[2 * D], g[D];
    for (size_t i = 0; i < D; i++) {
        in[i] = vals[i];
        in[D + i] = 1.5f;
        g[i] = 0.75f;
    }
    for (int v = 0; v < NVARIANTS; v++) {
        oclf_activation act = variant(v);
        float src[2 * D];
        memcpy(src, in, sizeof in);
        if (act.act_on_second)
            for (size_t i = 0; i < D; i++)
                src[i] = in[D + i], src[D + i] = in[i];
        if (act.kind == OCLF_ACT_SWIGLU_OAI)
            for (size_t i = 0; i < D; i++)
                src[2 * i] = vals[i], src[2 * i + 1] = vals[D - 1 - i];
        double want[2 * D];
        oclf_ref_act_and_mul_backward(OCLF_F32, &act, 1, D, src, 2 * D, g, D, want);
        for (int p = OCLF_PATH_FUSED; p <= OCLF_PATH_UNFUSED; p++) {
            cl_mem mi = th_upload(src, sizeof src), mg = th_upload(g, sizeof g);
            cl_mem mo = th_alloc(sizeof in);
            oclf_choice ch = th_choice((oclf_path)p);
            TH_OK(oclf_act_and_mul_backward(e->ctx, e->queue, OCLF_F32, 1, D, (oclf_buf){mi, 0, 0},
                                            (oclf_buf){mg, 0, 0}, (oclf_buf){mo, 0, 0}, &act, &ch,
                                            0, NULL, NULL));
            float got[2 * D];
            th_download(mo, got, sizeof got);
            for (size_t i = 0; i < 2 * D; i++) {
                ck_assert_msg(isfinite(got[i]) && isfinite(want[i]),
                              "%s%s path %d: element %zu is %g (reference %g)", act_names[act.kind],
                              act.act_on_second ? " (second)" : "", p, i, (double)got[i], want[i]);
            }
            ck_assert_uint_eq(oclf_ref_compare(OCLF_F32, got, 2 * D, want, 1, 2 * D, NULL, NULL),
                              0);
            clReleaseMemObject(mi), clReleaseMemObject(mg), clReleaseMemObject(mo);
        }
    }
}
END_TEST

/* SWIGLU_OAI with NaN inputs: a NaN gate or a NaN up makes both gradients
 * of its pair NaN (the forward's output is NaN there), on every path,
 * vector width and dtype; the other pairs match the reference. Pairs 3 and
 * 10 have a NaN up, 5 and 17 a NaN gate, 12 both; 24 pairs put NaNs both in
 * full vectors and in a row's tail. */
START_TEST(test_oai_nan)
{
    th_env *e = th_get();
    const oclf_dtype dt = dtypes[_i];
    const size_t es = oclf_dtype_size(dt), D = 24, rows = 2;
    const oclf_activation act = variant(OCLF_ACT_SWIGLU_OAI);
    void *in = th_random(dt, rows * 2 * D, -10.0f, 10.0f), *g = th_random(dt, rows * D, -2, 2);
    static const size_t nan_up[] = {3, 10, 12}, nan_gate[] = {5, 17, 12};
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < 3; j++) {
            oclf_ref_set(dt, in, r * 2 * D + 2 * nan_up[j] + 1, NAN);
            oclf_ref_set(dt, in, r * 2 * D + 2 * nan_gate[j], NAN);
        }
    double *want = malloc(rows * 2 * D * sizeof *want);
    oclf_ref_act_and_mul_backward(dt, &act, rows, D, in, 2 * D, g, D, want);
    oclf_choice chs[4] = {th_choice(OCLF_PATH_FUSED), th_choice(OCLF_PATH_FUSED),
                          th_choice(OCLF_PATH_FUSED), th_choice(OCLF_PATH_UNFUSED)};
    oclf_params_set(&chs[1].params, "VEC", 1);
    oclf_params_set(&chs[2].params, "VEC", 8);
    void *got = malloc(rows * 2 * D * es);
    for (int c = 0; c < 4; c++) {
        cl_mem mi = th_upload(in, rows * 2 * D * es), mg = th_upload(g, rows * D * es);
        cl_mem mo = th_alloc(rows * 2 * D * es);
        TH_OK(oclf_act_and_mul_backward(e->ctx, e->queue, dt, rows, D, (oclf_buf){mi, 0, 0},
                                        (oclf_buf){mg, 0, 0}, (oclf_buf){mo, 0, 0}, &act, &chs[c],
                                        0, NULL, NULL));
        th_download(mo, got, rows * 2 * D * es);
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < D; i++) {
                const int nan_pair = i == 3 || i == 10 || i == 12 || i == 5 || i == 17;
                for (int h = 0; h < 2; h++) {
                    const size_t at = r * 2 * D + 2 * i + (size_t)h;
                    const double v = oclf_ref_get(dt, got, at);
                    ck_assert_msg(isnan(want[at]) == nan_pair,
                                  "reference: %s of pair %zu is %g", h ? "du" : "dg", i,
                                  want[at]);
                    ck_assert_msg(nan_pair ? isnan(v) : isfinite(v),
                                  "%s choice %d: %s of pair %zu (row %zu) is %g",
                                  oclf_dtype_name(dt), c, h ? "du" : "dg", i, r, v);
                }
            }
        ck_assert_uint_eq(oclf_ref_compare(dt, got, 2 * D, want, rows, 2 * D, NULL, NULL), 0);
        clReleaseMemObject(mi), clReleaseMemObject(mg), clReleaseMemObject(mo);
    }
    free(in), free(g), free(want), free(got);
}
END_TEST

/* Every operand's rows and the second halves on vector boundaries
 * (offsets, row strides and d multiples of the vector width) run the
 * aligned build of the kernels (OCLF_ALIGNED); any other placement, a d
 * that puts the second half off a boundary, or dout alone off one, the
 * plain build. Both against the reference, fused and unfused, both
 * structures, the plain and the interleaved layouts, and in place on
 * aligned rows. */
START_TEST(test_aligned_build)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const oclf_activation act = variant(_i / 3 ? OCLF_ACT_SWIGLU_OAI : OCLF_ACT_GELU);
    for (int k = 0; k <= TH_PLACES + 2; k++)
        for (int p = 0; p < TH_STRUCTS; p++) {
            const oclf_choice ch = th_struct_choice(p);
            /* past the shared placements: packed rows with d = 770 (the
             * second half and dout's rows off a boundary); dout alone 3
             * elements off one; aligned rows updated in place */
            const th_place odd = {0, 0, 0}, *pl = k < TH_PLACES ? &th_places[k] : &odd;
            const size_t d = k == TH_PLACES ? 770 : 768;
            const int aligned = k < TH_PLACES ? pl->aligned : k == TH_PLACES + 2;
            case_ctx = th_build_log_context();
            const bwd_case c = {act, dt, 5, d, pl->pad, pl->offset, k == TH_PLACES + 2, &ch,
                                k == TH_PLACES + 1 ? 3 : 0};
            free(run_case(&c));
            char what[128];
            snprintf(what, sizeof what, "%s d %zu offset %zu pad %zu dout shift %zu in place %d",
                     oclf_dtype_name(dt), d, pl->offset, pl->pad, c.dout_shift, c.in_place);
            th_expect_build("act.cl", p, aligned, what);
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem in, dout, din, small;
    void *hin, *hdout, *hdin;
    size_t rows, d;
} bad_env;

static void bad_check_untouched(bad_env *b)
{
    size_t ni = b->rows * 2 * b->d * 4, ng = b->rows * b->d * 4;
    void *got = malloc(ni);
    clFinish(th_get()->queue);
    th_download(b->in, got, ni);
    ck_assert_msg(memcmp(got, b->hin, ni) == 0, "a failing call wrote `in`");
    th_download(b->din, got, ni);
    ck_assert_msg(memcmp(got, b->hdin, ni) == 0, "a failing call wrote `din`");
    th_download(b->dout, got, ng);
    ck_assert_msg(memcmp(got, b->hdout, ng) == 0, "a failing call wrote `dout`");
    free(got);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb;
    bb.rows = 4;
    bb.d = 32;
    const size_t R = bb.rows, D = bb.d;
    bb.hin = th_random(OCLF_F32, R * 2 * D, -1, 1);
    bb.hdout = th_random(OCLF_F32, R * D, -1, 1);
    bb.hdin = th_random(OCLF_F32, R * 2 * D, -1, 1);
    bb.in = th_upload(bb.hin, R * 2 * D * 4);
    bb.dout = th_upload(bb.hdout, R * D * 4);
    bb.din = th_upload(bb.hdin, R * 2 * D * 4);
    bb.small = th_upload(bb.hin, 16);
    oclf_buf I = {bb.in, 0, 0}, G = {bb.dout, 0, 0}, O = {bb.din, 0, 0}, S = {bb.small, 0, 0};
    oclf_buf N = {NULL, 0, 0};
    oclf_activation silu = variant(OCLF_ACT_SILU), a;
    cl_command_queue q = e->queue;

    ck_assert_int_eq(
        oclf_act_and_mul_backward(NULL, q, OCLF_F32, R, D, I, G, O, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(oclf_act_and_mul_backward(e->ctx, NULL, OCLF_F32, R, D, I, G, O, &silu, NULL, 0, NULL,
                                     NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "act_and_mul_backward: act is NULL");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, N, G, O, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "in");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, N, O, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "dout");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, N, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "din");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, 0, I, G, O, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "d is 0");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, S, O, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "dout: 4 rows");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, S, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "din: 4 rows");
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, (oclf_buf){bb.dout, 0, D - 1}, O,
                                     &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "stride");
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G,
                                     (oclf_buf){bb.din, 0, 2 * D - 1}, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "stride");
    /* din over in, shifted by one element or with another stride: not in place */
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, 1, D, I, G, (oclf_buf){bb.in, 1, 0},
                                     &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "din overlaps in without being the same range");
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, 2, D / 2, I, G,
                                     (oclf_buf){bb.in, 0, 2 * D}, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "din overlaps in");
    /* dout inside in, inside din */
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, 1, D, I, (oclf_buf){bb.in, D, 0}, O,
                                     &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dout overlaps in");
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, 1, D, I, (oclf_buf){bb.din, 0, 0}, O,
                                     &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dout overlaps din");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, 1, D, I, I, I, &silu, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "dout overlaps in");
    a = silu;
    a.kind = (oclf_act)9;
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "act_and_mul_backward: unknown activation");
    a = variant(OCLF_ACT_SWIGLU_OAI);
    a.act_on_second = 1;
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "act_on_second");
    a = variant(OCLF_ACT_SWIGLU_OAI);
    a.alpha = INFINITY;
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "alpha");
    a = variant(OCLF_ACT_FATRELU);
    a.threshold = NAN;
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "threshold");
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, (oclf_dtype)7, R, D, I, G, O, &silu, NULL, 0, NULL,
                                     NULL),
           OCLF_UNSUPPORTED, "dtype");
    EXPECT(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &silu, NULL, 1, NULL, NULL),
        OCLF_INVALID_ARGUMENT, "num_events");
    oclf_choice ch = th_choice((oclf_path)9);
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "path");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "VEC", 3);
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "VEC");
    ch = th_choice(OCLF_PATH_UNFUSED);
    oclf_params_set(&ch.params, "WGS", 48);
    EXPECT(oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, R, D, I, G, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "WGS");
    /* zero rows with a valid call still succeeds after all the failures */
    TH_OK(
        oclf_act_and_mul_backward(e->ctx, q, OCLF_F32, 0, D, I, G, O, &silu, NULL, 0, NULL, NULL));
    bad_check_untouched(&bb);
    clReleaseMemObject(bb.in), clReleaseMemObject(bb.dout), clReleaseMemObject(bb.din);
    clReleaseMemObject(bb.small);
    free(bb.hin), free(bb.hdout), free(bb.hdin);
}
END_TEST

static Suite *act_backward_suite(void)
{
    Suite *s = suite_create("act_backward");
    TCase *t = tcase_create("reference");
    tcase_add_loop_test(t, test_aligned_build, 0, 6);
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_matrix_default, 0, NVARIANTS * 3);
    tcase_add_loop_test(t, test_in_place, 0, NVARIANTS * 3);
    tcase_add_loop_test(t, test_structures, 0, NVARIANTS * 3);
    tcase_add_loop_test(t, test_finite_differences, 0, NVARIANTS);
    tcase_add_test(t, test_saturation);
    tcase_add_loop_test(t, test_oai_nan, 0, 3);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(act_backward_suite()); }
