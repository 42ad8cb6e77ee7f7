/*
 * Activation-and-multiply against the CPU reference: every activation, both
 * halves, the interleaved SWIGLU_OAI layout, every dtype and path, odd
 * widths, strided rows with offsets, 0/1/many rows, split rows, both kernel
 * structures, fused == unfused, and the bad arguments.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};
static const char *const act_names[] = {"silu", "gelu", "gelu_tanh", "fatrelu", "swiglu_oai"};

/* The activations a test loop visits: the five, plus the second-half
 * variants of the first four (vLLM's mul_and_silu and friends). */
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

typedef struct act_case {
    oclf_activation act;
    oclf_dtype dtype;
    size_t rows, d;
    size_t pad;    /* extra elements per row (strided when > 0) */
    size_t offset; /* leading elements before row 0 */
    const oclf_choice *choice;
} act_case;

/* The context run_case calls on when set (else the harness's). */
static oclf_context *case_ctx;

/* Runs one case, checks it against the reference and that nothing outside
 * the output rows was written; returns the output rows packed (rows x d). */
static void *run_case(const act_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), d = c->d;
    const size_t is = 2 * d + c->pad, os = d + c->pad;
    const size_t ni = c->offset + c->rows * is + 1, no = c->offset + c->rows * os + 1;
    th_seed(c->rows * 131 + d * 7 + (size_t)c->act.kind * 3 + (size_t)c->act.act_on_second);
    /* SWIGLU_OAI inputs reach past the clamp limit on both sides. */
    const float span = c->act.kind == OCLF_ACT_SWIGLU_OAI ? 10.0f : 4.0f;
    void *x = th_random(dt, ni, -span, span);
    void *y = th_random(dt, no, -9.0f, 9.0f); /* sentinel contents */
    cl_mem mx = th_upload(x, ni * es), my = th_upload(y, no * es);
    oclf_buf bi = {mx, c->offset, c->pad ? is : 0}, bo = {my, c->offset, c->pad ? os : 0};
    cl_event ev = NULL;
    TH_OK(oclf_act_and_mul(case_ctx ? case_ctx : e->ctx, e->queue, dt, c->rows, d, bi, bo, &c->act,
                           c->choice, 0, NULL, &ev));
    /* An event exists even for zero rows, and completes. */
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    void *gx = malloc(ni * es), *gy = malloc(no * es);
    th_download(mx, gx, ni * es);
    th_download(my, gy, no * es);
    ck_assert_msg(memcmp(gx, x, ni * es) == 0, "act_and_mul wrote its input");

    double *want = malloc((c->rows * d + 1) * sizeof *want);
    oclf_ref_act_and_mul(dt, &c->act, c->rows, d, (char *)x + c->offset * es, is, want);
    size_t first = 0;
    double maxerr = 0;
    const char *got = (const char *)gy + c->offset * es;
    size_t bad = oclf_ref_compare(dt, got, os, want, c->rows, d, &first, &maxerr);
    ck_assert_msg(bad == 0,
                  "%s%s %s %zux%zu pad %zu path %d: %zu elements out of tolerance, first at %zu "
                  "(got %g want %g), max error %g",
                  act_names[c->act.kind], c->act.act_on_second ? " (second)" : "",
                  oclf_dtype_name(dt), c->rows, d, c->pad, c->choice ? (int)c->choice->path : 0,
                  bad, first, (double)oclf_ref_get(dt, got, (first / d) * os + first % d),
                  bad ? want[first] : 0.0, maxerr);
    for (size_t i = 0; i < no; i++) {
        size_t rel = i - c->offset;
        int inside = i >= c->offset && rel / os < c->rows && rel % os < d;
        if (!inside)
            ck_assert_msg(memcmp((char *)gy + i * es, (char *)y + i * es, es) == 0,
                          "act_and_mul: element %zu outside the output rows was written", i);
    }
    void *packed = malloc(c->rows * d * es + 1);
    for (size_t r = 0; r < c->rows; r++)
        memcpy((char *)packed + r * d * es, got + r * os * es, d * es);
    free(want);
    free(gx), free(gy), free(x), free(y);
    clReleaseMemObject(mx), clReleaseMemObject(my);
    return packed;
}

/* Fused and unfused agree with each other (and each with the reference). */
static void fused_vs_unfused(act_case c)
{
    oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    if (c.choice)
        f.params = u.params = c.choice->params;
    c.choice = &f;
    void *rf = run_case(&c);
    c.choice = &u;
    void *ru = run_case(&c);
    const size_t n = c.rows * c.d;
    double *as_ref = malloc((n + 1) * sizeof *as_ref);
    for (size_t i = 0; i < n; i++)
        as_ref[i] = oclf_ref_get(c.dtype, ru, i);
    size_t bad = oclf_ref_compare(c.dtype, rf, c.d, as_ref, c.rows, c.d, NULL, NULL);
    ck_assert_msg(bad == 0, "%s %s %zux%zu: fused and unfused differ in %zu elements",
                  act_names[c.act.kind], oclf_dtype_name(c.dtype), c.rows, c.d, bad);
    /* In f32 both round the same fp32 value once. */
    if (c.dtype == OCLF_F32)
        ck_assert_msg(memcmp(rf, ru, n * 4) == 0, "%s f32: fused and unfused not bit-identical",
                      act_names[c.act.kind]);
    free(as_ref);
    free(rf);
    free(ru);
}

/* Every activation variant x dtype (loop index) on the default parameters:
 * the widths of the issue (512, 13824, 5125) and a tiny one, 0/1/7/33 rows
 * (1 row of a wide d is split across work-items), packed and strided. */
START_TEST(test_matrix_default)
{
    const oclf_activation act = variant(_i % NVARIANTS);
    const oclf_dtype dt = dtypes[_i / NVARIANTS];
    static const size_t widths[] = {3, 512, 5125, 13824};
    static const size_t rows[] = {0, 1, 7, 33};
    for (size_t wi = 0; wi < 4; wi++) {
        for (size_t ri = 0; ri < 4; ri++) {
            const size_t d = widths[wi];
            act_case c = {act, dt, rows[ri], d, (d & 1) ? 3 : 0, (d & 1) ? 5 : 0, NULL};
            fused_vs_unfused(c);
        }
    }
}
END_TEST

/* The other kernel structure and vector widths 1, 2, 4, 8 on every device,
 * so the structure a GPU gets is right before a GPU runs it. Alternates are
 * few (each is a separate program build). */
START_TEST(test_structures)
{
    const int d = _i / NVARIANTS;
    const oclf_activation act = variant(_i % NVARIANTS);
    /* LAYOUT, WGS, VEC; f32 gets two, the 16-bit types one each. */
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
            act_case c = {act, dtypes[d], rs[wi], ws[wi], wi == 1 ? 2 : 0, 1, &ch};
            fused_vs_unfused(c);
        }
    }
}
END_TEST

/* Values the formulas treat specially: NaN propagates through every
 * activation (SWIGLU_OAI's clamps included), large |x| saturates without
 * producing NaN, FATRELU's threshold is strict (and NaN fails it). */
START_TEST(test_special_values)
{
    th_env *e = th_get();
    const float vals[] = {NAN, -100.0f, 100.0f, 0.25f, 0.0f, -0.0f, 7.0f, -7.5f, 8.0f};
    const size_t d = sizeof vals / sizeof *vals;
    float in[2 * sizeof vals / sizeof *vals];
    for (size_t i = 0; i < d; i++) {
        in[i] = vals[i];
        in[d + i] = 1.5f;
    }
    for (int v = 0; v < 5; v++) {
        oclf_activation act = variant(v);
        /* SWIGLU_OAI reads the interleaved pairs (vals[i], 1.5) instead. */
        float inter[2 * sizeof vals / sizeof *vals];
        for (size_t i = 0; i < d; i++)
            inter[2 * i] = vals[i], inter[2 * i + 1] = vals[d - 1 - i];
        const float *src = v == OCLF_ACT_SWIGLU_OAI ? inter : in;
        for (int p = OCLF_PATH_FUSED; p <= OCLF_PATH_UNFUSED; p++) {
            cl_mem mi = th_upload(src, sizeof in), mo = th_alloc(d * 4);
            oclf_choice ch = th_choice((oclf_path)p);
            TH_OK(oclf_act_and_mul(e->ctx, e->queue, OCLF_F32, 1, d, (oclf_buf){mi, 0, 0},
                                   (oclf_buf){mo, 0, 0}, &act, &ch, 0, NULL, NULL));
            float got[sizeof vals / sizeof *vals];
            th_download(mo, got, sizeof got);
            double want[sizeof vals / sizeof *vals];
            oclf_ref_act_and_mul(OCLF_F32, &act, 1, d, src, 2 * d, want);
            /* FATRELU's comparison sends NaN to 0, as vLLM's does. */
            if (v != OCLF_ACT_FATRELU)
                ck_assert_msg(isnan(got[0]), "%s: NaN input did not give NaN", act_names[v]);
            else
                ck_assert_msg(got[0] == 0.0f, "fatrelu: NaN input did not give 0");
            ck_assert_uint_eq(oclf_ref_compare(OCLF_F32, got, d, want, 1, d, NULL, NULL), 0);
            if (v == OCLF_ACT_FATRELU)
                ck_assert_msg(got[3] == 0.0f, "fatrelu: x == threshold must give 0");
            clReleaseMemObject(mi), clReleaseMemObject(mo);
        }
    }
}
END_TEST

/* Rows and their second halves on vector boundaries (offsets, row strides
 * and d multiples of the vector width) run the aligned build of the kernels
 * (OCLF_ALIGNED), any other placement, or a d that puts the second half off
 * a boundary, the plain build; both against the reference, both paths and
 * structures, every activation's layout (plain and interleaved). */
START_TEST(test_aligned_build)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const oclf_activation act = variant(_i / 3 ? OCLF_ACT_SWIGLU_OAI : OCLF_ACT_SILU);
    for (int k = 0; k <= TH_PLACES; k++)
        for (int p = 0; p < TH_STRUCTS; p++) {
            const oclf_choice ch = th_struct_choice(p);
            /* k == TH_PLACES: packed rows, but d = 770 puts the second half
             * and the output rows off a boundary */
            const th_place odd = {0, 0, 0}, *pl = k < TH_PLACES ? &th_places[k] : &odd;
            const size_t d = k < TH_PLACES ? 768 : 770;
            case_ctx = th_build_log_context();
            const act_case c = {act, dt, 5, d, pl->pad, pl->offset, &ch};
            free(run_case(&c));
            char what[96];
            snprintf(what, sizeof what, "%s d %zu offset %zu pad %zu", oclf_dtype_name(dt), d,
                     pl->offset, pl->pad);
            th_expect_build("act.cl", p, pl->aligned, what);
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* GELU-tanh far below zero: 0.5 x (1 + tanh z) cancels where an f32 tanh
 * saturates above -1 and leaves about 6e-8 x y; x sigmoid(2z) does not. */
START_TEST(test_gelu_tanh_negative)
{
    th_env *e = th_get();
    const float xs[] = {-6.0f, -10.0f, -30.0f, -100.0f, -1000.0f};
    const size_t d = sizeof xs / sizeof *xs;
    float in[2 * sizeof xs / sizeof *xs];
    for (size_t i = 0; i < d; i++)
        in[i] = xs[i], in[d + i] = 900.0f / xs[i];
    oclf_activation act = variant(OCLF_ACT_GELU_TANH);
    double want[sizeof xs / sizeof *xs];
    oclf_ref_act_and_mul(OCLF_F32, &act, 1, d, in, 2 * d, want);
    for (int p = OCLF_PATH_FUSED; p <= OCLF_PATH_UNFUSED; p++) {
        cl_mem mi = th_upload(in, sizeof in), mo = th_alloc(d * 4);
        oclf_choice ch = th_choice((oclf_path)p);
        TH_OK(oclf_act_and_mul(e->ctx, e->queue, OCLF_F32, 1, d, (oclf_buf){mi, 0, 0},
                               (oclf_buf){mo, 0, 0}, &act, &ch, 0, NULL, NULL));
        float got[sizeof xs / sizeof *xs];
        th_download(mo, got, sizeof got);
        for (size_t i = 0; i < d; i++) {
            ck_assert_msg(fabs(want[i]) < 1e-6, "reference gelu_tanh(%g) * %g = %g, not ~0",
                          (double)xs[i], (double)in[d + i], want[i]);
            ck_assert_msg(fabs(got[i]) < 1e-6, "gelu_tanh(%g) * %g = %g on path %d, not ~0",
                          (double)xs[i], (double)in[d + i], (double)got[i], p);
        }
        clReleaseMemObject(mi), clReleaseMemObject(mo);
    }
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem in, out, small;
    void *hin, *hout;
    size_t rows, d;
} bad_env;

static void bad_check_untouched(bad_env *b)
{
    size_t ni = b->rows * 2 * b->d * 4, no = b->rows * b->d * 4;
    void *got = malloc(ni);
    clFinish(th_get()->queue);
    th_download(b->in, got, ni);
    ck_assert_msg(memcmp(got, b->hin, ni) == 0, "a failing call wrote `in`");
    th_download(b->out, got, no);
    ck_assert_msg(memcmp(got, b->hout, no) == 0, "a failing call wrote `out`");
    free(got);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

/* A work-group per row of 1024 work-items over 2^22 + 1 rows would ask for
 * more than 2^32 work-items, which some runtimes reject: the call is
 * refused before anything runs. */
START_TEST(test_launch_range)
{
    th_env *e = th_get();
    const size_t rows = ((size_t)1 << 22) + 1, d = 1;
    size_t max_wgs = 0;
    clGetDeviceInfo(e->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wgs, &max_wgs, NULL);
    if (max_wgs < 1024)
        return; /* the launch cannot be asked for on this device */
    float *x = th_random(OCLF_F32, rows * 2 * d, -1, 1), *y = th_random(OCLF_F32, rows * d, -1, 1);
    float *after = malloc(rows * d * sizeof *after);
    cl_mem mx = th_upload(x, rows * 2 * d * 4), my = th_upload(y, rows * d * 4);
    oclf_buf bx = {mx, 0, 0}, by = {my, 0, 0};
    oclf_activation act = {sizeof(oclf_activation), OCLF_ACT_SILU, 0, 0, 0, 0};
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", 1);
    oclf_params_set(&ch.params, "WGS", 1024);
    oclf_params_set(&ch.params, "VEC", 1);
    cl_event ev = NULL;
    TH_EXPECT_FAIL(
        oclf_act_and_mul(e->ctx, e->queue, OCLF_F32, rows, d, bx, by, &act, &ch, 0, NULL, &ev),
        OCLF_UNSUPPORTED, "launch range", {
            th_download(my, after, rows * d * 4);
            ck_assert(memcmp(after, y, rows * d * 4) == 0);
            ck_assert_ptr_null(ev);
        });
    free(x), free(y), free(after);
    clReleaseMemObject(mx), clReleaseMemObject(my);
}
END_TEST

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb;
    bb.rows = 4;
    bb.d = 32;
    bb.hin = th_random(OCLF_F32, bb.rows * 2 * bb.d, -1, 1);
    bb.hout = th_random(OCLF_F32, bb.rows * bb.d, -1, 1);
    bb.in = th_upload(bb.hin, bb.rows * 2 * bb.d * 4);
    bb.out = th_upload(bb.hout, bb.rows * bb.d * 4);
    bb.small = th_upload(bb.hin, 16);
    const size_t R = bb.rows, D = bb.d;
    oclf_buf I = {bb.in, 0, 0}, O = {bb.out, 0, 0}, S = {bb.small, 0, 0}, N = {NULL, 0, 0};
    oclf_activation silu = variant(OCLF_ACT_SILU), a;
    cl_command_queue q = e->queue;

    ck_assert_int_eq(oclf_act_and_mul(NULL, q, OCLF_F32, R, D, I, O, &silu, NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(oclf_act_and_mul(e->ctx, NULL, OCLF_F32, R, D, I, O, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "act is NULL");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, N, O, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "in");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, N, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "out");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, 0, I, O, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "d is 0");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, S, &silu, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "do not fit");
    /* `in` too small once padded rows are asked for (out fits) */
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, (oclf_buf){bb.in, 0, 3 * D}, O, &silu, NULL,
                            0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "act_and_mul: in: 4 rows");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, (oclf_buf){bb.in, 0, 2 * D - 1}, O, &silu,
                            NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "stride");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, 1, D, I, (oclf_buf){bb.in, D, 0}, &silu, NULL, 0,
                            NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlap");
    a = silu;
    a.kind = (oclf_act)9;
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "activation");
    a = variant(OCLF_ACT_SWIGLU_OAI);
    a.act_on_second = 1;
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "act_on_second");
    a = variant(OCLF_ACT_SWIGLU_OAI);
    a.limit = -1.0f;
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "limit");
    a = variant(OCLF_ACT_FATRELU);
    a.threshold = NAN;
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &a, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "threshold");
    EXPECT(oclf_act_and_mul(e->ctx, q, (oclf_dtype)7, R, D, I, O, &silu, NULL, 0, NULL, NULL),
           OCLF_UNSUPPORTED, "dtype");
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &silu, NULL, 1, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "num_events");
    oclf_choice ch = th_choice((oclf_path)9);
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "path");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "WGS", 48);
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "WGS");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "VEC", 3);
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "VEC");
    ch = th_choice(OCLF_PATH_UNFUSED);
    oclf_params_set(&ch.params, "LAYOUT", 2);
    EXPECT(oclf_act_and_mul(e->ctx, q, OCLF_F32, R, D, I, O, &silu, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "LAYOUT");
    /* zero rows with a valid call still succeeds after all the failures */
    TH_OK(oclf_act_and_mul(e->ctx, q, OCLF_F32, 0, D, I, O, &silu, NULL, 0, NULL, NULL));
    bad_check_untouched(&bb);
    clReleaseMemObject(bb.in), clReleaseMemObject(bb.out), clReleaseMemObject(bb.small);
    free(bb.hin), free(bb.hout);
}
END_TEST

static Suite *act_suite(void)
{
    Suite *s = suite_create("act");
    TCase *t = tcase_create("reference");
    tcase_add_loop_test(t, test_aligned_build, 0, 6);
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_matrix_default, 0, NVARIANTS * 3);
    tcase_add_loop_test(t, test_structures, 0, NVARIANTS * 3);
    tcase_add_test(t, test_special_values);
    tcase_add_test(t, test_gelu_tanh_negative);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_launch_range);
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(act_suite()); }
