/*
 * Normalization family against the CPU reference: every op, dtype and path,
 * odd widths, strided rows with offsets, 0/1/many rows, both kernel
 * structures, large-mean rows, fused == unfused, and the bad arguments.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): the same ops, dtypes, structures and paths on
 * small shapes (the oclgrind device run simulates every work-item). */

enum { RMS, ADD_RMS, LN, ADD_LN, NOPS };
static const char *const op_names[] = {"rms_norm", "add_rms_norm", "layer_norm", "add_layer_norm"};
static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};
static const size_t widths[] = {8, 768, 769, 5120, 5125, 8192, 16384};
static const size_t row_counts[] = {0, 1, 7, 83, 4096};

typedef struct norm_case {
    int op;
    oclf_dtype dtype;
    size_t rows, cols;
    size_t pad;    /* extra elements per row (strided when > 0) */
    size_t offset; /* leading elements before row 0 */
    int weight, bias;
    float center; /* added to every input value (large-mean rows) */
    const oclf_choice *choice;
} norm_case;

typedef struct norm_result {
    void *out;      /* the normalized rows, as stored */
    void *residual; /* add variants: the updated residual */
    size_t stride;
} norm_result;

/* The context run_case calls on when set (else the harness's). */
static oclf_context *case_ctx;

static size_t elems(const norm_case *c) { return c->offset + c->rows * (c->cols + c->pad) + 1; }

/* Runs one case on the device and checks it against the reference, the
 * residual bit for bit, and that padding and offsets were not written. */
static norm_result run_case(const norm_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), n = elems(c), stride = c->cols + c->pad;
    th_seed(c->rows * 131 + c->cols * 7 + (size_t)c->op);
    void *x = th_random(dt, n, c->center - 2.0f, c->center + 2.0f);
    void *res = th_random(dt, n, -2.0f, 2.0f);
    void *y = th_random(dt, n, -9.0f, 9.0f); /* sentinel contents */
    void *w = th_random(dt, c->cols, 0.5f, 1.5f);
    void *b = th_random(dt, c->cols, -0.5f, 0.5f);

    cl_mem mx = th_upload(x, n * es), mr = th_upload(res, n * es), my = th_upload(y, n * es);
    cl_mem mw = th_upload(w, c->cols * es), mb = th_upload(b, c->cols * es);
    oclf_buf bx = {mx, c->offset, c->pad ? stride : 0}, br = {mr, c->offset, stride};
    /* A vector's stride is ignored, so one below the width is accepted. */
    oclf_buf by = {my, c->offset, stride}, bw = {mw, 0, 1}, bb = {mb, 0, 1};
    const oclf_buf *pw = c->weight ? &bw : NULL, *pb = c->bias ? &bb : NULL;
    const float eps = 1e-5f;
    cl_event ev = NULL;
    oclf_context *ctx = case_ctx ? case_ctx : e->ctx;
    switch (c->op) {
    case RMS:
        TH_OK(oclf_rms_norm(ctx, e->queue, dt, c->rows, c->cols, bx, pw, by, eps, c->choice, 0,
                            NULL, &ev));
        break;
    case ADD_RMS:
        TH_OK(oclf_add_rms_norm(ctx, e->queue, dt, c->rows, c->cols, bx, br, pw, eps,
                                c->choice, 0, NULL, &ev));
        break;
    case LN:
        TH_OK(oclf_layer_norm(ctx, e->queue, dt, c->rows, c->cols, bx, pw, pb, by, eps, c->choice,
                              0, NULL, &ev));
        break;
    case ADD_LN:
        TH_OK(oclf_add_layer_norm(ctx, e->queue, dt, c->rows, c->cols, bx, br, pw, pb, by, eps,
                                  c->choice, 0, NULL, &ev));
        break;
    }
    /* An event exists even for zero rows, and completes. */
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    void *gx = malloc(n * es), *gr = malloc(n * es), *gy = malloc(n * es);
    th_download(mx, gx, n * es);
    th_download(mr, gr, n * es);
    th_download(my, gy, n * es);

    /* Reference, from the same stored inputs. */
    const int add = c->op == ADD_RMS || c->op == ADD_LN;
    double *want = malloc((c->rows * c->cols + 1) * sizeof *want);
    const size_t xs = c->pad ? stride : c->cols;
    const char *src = (const char *)x + c->offset * es;
    size_t src_stride = xs;
    if (add) {
        oclf_ref_add_rows(dt, c->rows, c->cols, (char *)x + c->offset * es, xs,
                          (char *)res + c->offset * es, stride);
        /* the residual is exactly round(input + residual), bit for bit */
        ck_assert_msg(memcmp(gr, res, n * es) == 0, "%s %s %zux%zu: residual differs",
                      op_names[c->op], oclf_dtype_name(dt), c->rows, c->cols);
        src = (const char *)res + c->offset * es;
        src_stride = stride;
    }
    if (c->op == RMS || c->op == ADD_RMS)
        oclf_ref_rms_norm(dt, c->rows, c->cols, src, src_stride, pw ? w : NULL, eps, want);
    else
        oclf_ref_layer_norm(dt, c->rows, c->cols, src, src_stride, pw ? w : NULL, pb ? b : NULL,
                            eps, want);

    /* Where the result lives: `input` for add_rms_norm, `out` otherwise. */
    void *got = c->op == ADD_RMS ? gx : gy;
    const size_t got_stride = c->op == ADD_RMS ? xs : stride;
    size_t first = 0;
    double maxerr = 0;
    size_t bad = oclf_ref_compare(dt, (char *)got + c->offset * es, got_stride, want, c->rows,
                                  c->cols, &first, &maxerr);
    ck_assert_msg(bad == 0,
                  "%s %s %zux%zu pad %zu: %zu elements out of tolerance, first at %zu "
                  "(got %g want %g), max error %g",
                  op_names[c->op], oclf_dtype_name(dt), c->rows, c->cols, c->pad, bad, first,
                  (double)oclf_ref_get(dt, (char *)got + c->offset * es,
                                       (first / c->cols) * got_stride + first % c->cols),
                  bad ? want[first] : 0.0, maxerr);

    /* Nothing outside the described elements was written. */
    void *written = c->op == ADD_RMS ? gx : gy;
    const void *before = c->op == ADD_RMS ? x : y;
    const size_t wstride = c->op == ADD_RMS ? xs : stride;
    for (size_t i = 0; i < n; i++) {
        size_t rel = i - c->offset;
        int inside = i >= c->offset && rel / wstride < c->rows && rel % wstride < c->cols;
        if (!inside)
            ck_assert_msg(memcmp((char *)written + i * es, (const char *)before + i * es, es) == 0,
                          "%s: element %zu outside the rows was written", op_names[c->op], i);
    }

    norm_result r = {malloc(n * es), add ? malloc(n * es) : NULL, got_stride};
    memcpy(r.out, got, n * es);
    if (add)
        memcpy(r.residual, gr, n * es);
    free(want);
    free(gx), free(gr), free(gy);
    free(x), free(res), free(y), free(w), free(b);
    clReleaseMemObject(mx), clReleaseMemObject(mr), clReleaseMemObject(my);
    clReleaseMemObject(mw), clReleaseMemObject(mb);
    return r;
}

static void free_result(norm_result *r)
{
    free(r->out);
    free(r->residual);
}

/* Fused and unfused agree with each other (and each with the reference). */
static void fused_vs_unfused(norm_case c)
{
    oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    if (c.choice)
        f.params = u.params = c.choice->params;
    c.choice = &f;
    norm_result rf = run_case(&c);
    c.choice = &u;
    norm_result ru = run_case(&c);
    const size_t es = oclf_dtype_size(c.dtype), n = c.rows * c.cols;
    double *as_ref = malloc((n + 1) * sizeof *as_ref);
    for (size_t r = 0; r < c.rows; r++)
        for (size_t k = 0; k < c.cols; k++)
            as_ref[r * c.cols + k] =
                oclf_ref_get(c.dtype, (char *)ru.out + c.offset * es, r * ru.stride + k);
    size_t bad = oclf_ref_compare(c.dtype, (char *)rf.out + c.offset * es, rf.stride, as_ref,
                                  c.rows, c.cols, NULL, NULL);
    ck_assert_msg(bad == 0, "%s %s %zux%zu: fused and unfused differ in %zu elements",
                  op_names[c.op], oclf_dtype_name(c.dtype), c.rows, c.cols, bad);
    free(as_ref);
    free_result(&rf);
    free_result(&ru);
}

/* The full matrix on the device's default parameters: op x dtype (loop index),
 * every width and row count that fits a few million elements. */
START_TEST(test_matrix_default)
{
    const int op = _i % NOPS;
    const oclf_dtype dt = dtypes[_i / NOPS];
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        for (size_t ri = 0; ri < sizeof row_counts / sizeof *row_counts; ri++) {
            const size_t rows = row_counts[ri], cols = widths[wi];
            if (rows * cols > (size_t)4 << 20)
                continue;
            if (th_quick() && (rows > 7 || cols > 769))
                continue;
            norm_case c = {op, dt, rows, cols, (cols & 1) ? 3 : 0, (cols & 1) ? 5 : 0,
                           1, 1, 0.0f, NULL};
            fused_vs_unfused(c);
        }
    }
}
END_TEST

/* Rows on vector boundaries (every offset and row stride a multiple of the
 * vector width) run the aligned build of the kernels (OCLF_ALIGNED: one
 * wide access per vector on GPUs), any other offset or stride the plain
 * build; both against the reference, fused and unfused, both structures. */
START_TEST(test_aligned_build)
{
    const int op = _i % NOPS;
    const oclf_dtype dt = dtypes[_i / NOPS];
    for (int k = 0; k < TH_PLACES; k++)
        for (int p = 0; p < TH_STRUCTS; p++) {
            const oclf_choice ch = th_struct_choice(p);
            case_ctx = th_build_log_context();
            const th_place *pl = &th_places[k];
            const norm_case c = {op, dt, 5, 768, pl->pad, pl->offset, 1, 1, 0.0f, &ch};
            norm_result r = run_case(&c);
            free_result(&r);
            char what[96];
            snprintf(what, sizeof what, "%s %s offset %zu pad %zu", op_names[op],
                     oclf_dtype_name(dt), pl->offset, pl->pad);
            th_expect_build("norm.cl", p, pl->aligned, what);
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* Both kernel structures and several vector widths on every device, so the
 * structure a GPU gets is right before a GPU runs it. */
START_TEST(test_structures)
{
    /* Two programs per dtype beside the default; the vector widths differ by
     * dtype so that together they cover 1, 2, 4, 8 and 16. */
    const int d = (_i / NOPS) % 3;
    const int vec1[] = {4, 1, 8}, vec0[] = {1, 2, 4};
    const int configs[][5] = {
        /* LAYOUT, WGS, VEC, STAGE, ROWS (runtime: no extra program) */
        {1, 64, vec1[d], 0, 1}, {1, 64, vec1[d], 1, 3}, {0, 8, vec0[d], 0, 1},
        {0, 8, vec0[d], 1, 1}, /* each work-item's row staged */
    };
    const int op = _i % NOPS;
    const oclf_dtype dt = dtypes[d];
    static const size_t ws_full[] = {8, 769, 5125}, ws_quick[] = {8, 769, 133};
    static const size_t rs_full[] = {1, 7, 83}, rs_quick[] = {1, 3, 5};
    const size_t *ws = th_quick() ? ws_quick : ws_full, *rs = th_quick() ? rs_quick : rs_full;
    for (size_t k = 0; k < sizeof configs / sizeof *configs; k++) {
        oclf_choice ch = th_choice(OCLF_PATH_AUTO);
        oclf_params_set(&ch.params, "LAYOUT", configs[k][0]);
        oclf_params_set(&ch.params, "WGS", configs[k][1]);
        oclf_params_set(&ch.params, "VEC", configs[k][2]);
        oclf_params_set(&ch.params, "STAGE", configs[k][3]);
        oclf_params_set(&ch.params, "ROWS", configs[k][4]);
        for (size_t wi = 0; wi < 3; wi++) {
            norm_case c = {op, dt, rs[wi], ws[wi], 2, 1, wi != 1, wi != 2, 0.0f, &ch};
            fused_vs_unfused(c);
        }
    }
}
END_TEST

/* Built kernels that take fewer work-items (32) than the GPU heuristic's
 * WGS for a wide row: the decision lowers WGS to 32, rebuilding the
 * program (WGS is compiled in), and both paths match the reference. */
START_TEST(test_kernel_wgs_limit)
{
    th_env *e = th_get();
    const char *names[] = {"OCLF_DEVICE_CLASS", "OCLF_KERNEL_WGS_CAP"};
    const char *values[] = {"gpu", "32"};
    char *saved[2];
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        saved[i] = v ? strdup(v) : NULL;
        setenv(names[i], values[i], 1);
    }
    oclf_context *capped = NULL;
    TH_OK(oclf_context_create(e->cl, e->device, NULL, &capped));
    for (int i = 0; i < 2; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
    /* quick: a row of 261 still gets WGS 128 from the GPU heuristic */
    const size_t rows = th_quick() ? 3 : 7, cols = th_quick() ? 261 : 5125;
    for (int op = 0; op < NOPS; op++) {
        const uint64_t dims[2] = {rows, cols};
        for (int path = OCLF_PATH_FUSED; path <= OCLF_PATH_UNFUSED; path++) {
            oclf_tuning_decision d;
            TH_OK(oclf_tuning_resolve(capped, op_names[op], OCLF_F32, dims, 2, (oclf_path)path,
                                      &d));
            int64_t heur = 0, wgs = 0;
            ck_assert(oclf_params_get(&d.heuristic.params, "WGS", &heur));
            ck_assert(oclf_params_get(&d.decision.params, "WGS", &wgs));
            ck_assert_msg(heur > 32 && wgs == 32 && !d.from_record,
                          "%s path %d: heuristic WGS %lld, decision %lld", op_names[op], path,
                          (long long)heur, (long long)wgs);
        }
        case_ctx = capped;
        norm_case c = {op, OCLF_F32, rows, cols, 3, 5, 1, 1, 0.0f, NULL};
        fused_vs_unfused(c);
        case_ctx = NULL;
    }
    oclf_context_destroy(capped);
}
END_TEST

/* Rows with a mean far above their spread: E[x^2] - E[x]^2 in fp32 would
 * lose every digit here. */
START_TEST(test_large_mean)
{
    const oclf_dtype dt = dtypes[_i];
    const float center = dt == OCLF_F32 ? 1.0e4f : 1.0e3f;
    for (int op = LN; op <= ADD_LN; op++) {
        norm_case c = {op, dt, th_quick() ? 3 : 17, th_quick() ? 515 : 4099, 0, 0, 1, 1, center, NULL};
        fused_vs_unfused(c);
        oclf_choice ch = th_choice(OCLF_PATH_FUSED);
        oclf_params_set(&ch.params, "LAYOUT", 1);
        oclf_params_set(&ch.params, "WGS", 64);
        oclf_params_set(&ch.params, "VEC", (int[]){4, 1, 8}[_i]);
        oclf_params_set(&ch.params, "STAGE", 1);
        c.choice = &ch;
        norm_result r = run_case(&c);
        free_result(&r);
    }
}
END_TEST

/* In place: out == in for rms_norm and layer_norm. */
START_TEST(test_in_place)
{
    th_env *e = th_get();
    const size_t rows = 5, cols = 777;
    float *x = th_random(OCLF_F32, rows * cols, -3, 3);
    double *want = malloc(rows * cols * sizeof *want);
    for (int op = 0; op < 2; op++) {
        cl_mem m = th_upload(x, rows * cols * 4);
        oclf_buf b = {m, 0, 0};
        if (op == 0) {
            TH_OK(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, rows, cols, b, NULL, b, 1e-6f, NULL, 0,
                                NULL, NULL));
            oclf_ref_rms_norm(OCLF_F32, rows, cols, x, cols, NULL, 1e-6f, want);
        } else {
            TH_OK(oclf_layer_norm(e->ctx, e->queue, OCLF_F32, rows, cols, b, NULL, NULL, b, 1e-6f,
                                  NULL, 0, NULL, NULL));
            oclf_ref_layer_norm(OCLF_F32, rows, cols, x, cols, NULL, NULL, 1e-6f, want);
        }
        float *got = malloc(rows * cols * 4);
        th_download(m, got, rows * cols * 4);
        ck_assert_uint_eq(oclf_ref_compare(OCLF_F32, got, cols, want, rows, cols, NULL, NULL), 0);
        free(got);
        clReleaseMemObject(m);
    }
    free(x);
    free(want);
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem a, b, small, w;
    void *ha, *hb;
    size_t rows, cols;
} bad_env;

static bad_env bad_setup(void)
{
    bad_env b;
    b.rows = 4;
    b.cols = 64;
    b.ha = th_random(OCLF_F32, b.rows * b.cols, -1, 1);
    b.hb = th_random(OCLF_F32, b.rows * b.cols, -1, 1);
    b.a = th_upload(b.ha, b.rows * b.cols * 4);
    b.b = th_upload(b.hb, b.rows * b.cols * 4);
    b.small = th_upload(b.ha, 16);
    b.w = th_upload(b.ha, b.cols * 4);
    return b;
}

static void bad_check_untouched(bad_env *b)
{
    size_t n = b->rows * b->cols * 4;
    void *got = malloc(n);
    clFinish(th_get()->queue);
    th_download(b->a, got, n);
    ck_assert_msg(memcmp(got, b->ha, n) == 0, "a failing call wrote buffer a");
    th_download(b->b, got, n);
    ck_assert_msg(memcmp(got, b->hb, n) == 0, "a failing call wrote buffer b");
    free(got);
}

static void bad_free(bad_env *b)
{
    clReleaseMemObject(b->a), clReleaseMemObject(b->b), clReleaseMemObject(b->small);
    clReleaseMemObject(b->w);
    free(b->ha), free(b->hb);
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_check_untouched(&bb))

/* A work-group per row of 1024 work-items over 2^22 + 1 rows asks for
 * more than 2^32 work-items, past what some runtimes take: the groups take
 * two rows each instead, and every row is still normalized. */
START_TEST(test_launch_range)
{
    th_env *e = th_get();
    const size_t rows = ((size_t)1 << 22) + 1, cols = 1;
    size_t max_wgs = 0;
    clGetDeviceInfo(e->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wgs, &max_wgs, NULL);
    if (max_wgs < 1024 || th_quick())
        return; /* the shape cannot be asked for here, or is too long to simulate */
    float *x = malloc(rows * sizeof *x);
    for (size_t i = 0; i < rows; i++)
        x[i] = (i % 7) ? -2.0f : 3.0f;
    cl_mem mx = th_upload(x, rows * 4), my = th_alloc(rows * 4);
    oclf_buf bx = {mx, 0, 0}, by = {my, 0, 0};
    oclf_choice ch = th_row_choice(OCLF_PATH_FUSED, 1, 1024, 1, 0, 1);
    TH_OK(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, rows, cols, bx, NULL, by, 0.0f, &ch, 0, NULL,
                        NULL));
    float *y = malloc(rows * sizeof *y);
    th_download(my, y, rows * 4);
    size_t bad = 0;
    for (size_t i = 0; i < rows; i++)
        bad += y[i] != (x[i] < 0 ? -1.0f : 1.0f);
    ck_assert_msg(bad == 0, "%zu of %zu rows wrong", bad, rows);
    free(x), free(y);
    clReleaseMemObject(mx), clReleaseMemObject(my);
}
END_TEST

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb = bad_setup();
    const size_t R = bb.rows, C = bb.cols;
    oclf_buf A = {bb.a, 0, 0}, B = {bb.b, 0, 0}, S = {bb.small, 0, 0}, N = {NULL, 0, 0};
    oclf_buf W = {bb.w, 0, 0};
    oclf_buf strided = {bb.a, 0, C - 1};
    oclf_buf Ahalf = {bb.a, C, 0}; /* rows 1.. of a */

    /* NULL context: the detail goes to oclf_last_error(NULL). */
    ck_assert_int_eq(
        oclf_rms_norm(NULL, e->queue, OCLF_F32, R, C, A, NULL, B, 1e-5f, NULL, 0, NULL, NULL),
        OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));

    EXPECT(oclf_rms_norm(e->ctx, NULL, OCLF_F32, R, C, A, NULL, B, 1e-5f, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, N, NULL, B, 1e-5f, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "in");
    EXPECT(oclf_layer_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, NULL, N, 1e-5f, NULL, 0, NULL,
                           NULL),
           OCLF_INVALID_ARGUMENT, "out");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, 0, A, NULL, B, 1e-5f, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "cols is 0");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, strided, NULL, B, 1e-5f, NULL, 0, NULL,
                         NULL),
           OCLF_INVALID_ARGUMENT, "stride");
    EXPECT(oclf_add_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, S, NULL, 1e-5f, NULL, 0, NULL,
                             NULL),
           OCLF_INVALID_ARGUMENT, "do not fit");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, &S, B, 1e-5f, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "weight");
    EXPECT(oclf_add_rms_norm(e->ctx, e->queue, OCLF_F32, R / 2 + 1, C, A, Ahalf, NULL, 1e-5f, NULL,
                             0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlap");
    EXPECT(oclf_add_layer_norm(e->ctx, e->queue, OCLF_F32, R, C, A, A, NULL, NULL, B, 1e-5f, NULL,
                               0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlap");
    EXPECT(oclf_add_layer_norm(e->ctx, e->queue, OCLF_F32, R, C, B, A, NULL, NULL, A, 1e-5f, NULL,
                               0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "residual");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R / 2 + 1, C, A, NULL, Ahalf, 1e-5f, NULL, 0,
                         NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlap");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, B, &A, A, 1e-5f, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "weight or bias overlaps");
    /* a valid separate weight is accepted (the call after the failures works) */
    TH_OK(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, 0, C, B, &W, A, 1e-5f, NULL, 0, NULL, NULL));
    EXPECT(oclf_rms_norm(e->ctx, e->queue, (oclf_dtype)7, R, C, A, NULL, B, 1e-5f, NULL, 0, NULL,
                         NULL),
           OCLF_UNSUPPORTED, "dtype");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, B, NAN, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "eps");
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, B, 1e-5f, NULL, 1, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "num_events");

    oclf_choice ch = th_choice((oclf_path)9);
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, B, 1e-5f, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "path");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "WGS", 48);
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, B, 1e-5f, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "WGS");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "VEC", 3);
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, B, 1e-5f, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "VEC");
    /* LAYOUT 0 stages a row per work-item: refused where WGS rows of cols
     * floats exceed the device's local memory, taken where they fit */
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", 0);
    oclf_params_set(&ch.params, "WGS", 4);
    oclf_params_set(&ch.params, "STAGE", 1);
    {
        cl_ulong local_mem = 0;
        ck_assert_int_eq(clGetDeviceInfo(e->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem,
                                         &local_mem, NULL),
                         CL_SUCCESS);
        const uint64_t fits[2] = {R, C}, too_wide[2] = {R, local_mem / 16 + 1};
        ck_assert_msg(oclf_tuning_params_valid(e->ctx, "rms_norm", OCLF_F32, fits, 2,
                                               OCLF_PATH_FUSED, &ch.params),
                      "%s", oclf_last_error(e->ctx));
        ck_assert(!oclf_tuning_params_valid(e->ctx, "layer_norm", OCLF_BF16, too_wide, 2,
                                            OCLF_PATH_FUSED, &ch.params));
        ck_assert_msg(strstr(oclf_last_error(e->ctx), "LAYOUT 0 stages a row per work-item"),
                      "%s", oclf_last_error(e->ctx));
    }
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "LAYOUT", 0);
    oclf_params_set(&ch.params, "STAGE", 0); /* a GPU's default stages */
    oclf_params_set(&ch.params, "ROWS", 2);
    EXPECT(oclf_rms_norm(e->ctx, e->queue, OCLF_F32, R, C, A, NULL, B, 1e-5f, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "ROWS");
    bad_free(&bb);
}
END_TEST

static Suite *norm_suite(void)
{
    Suite *s = suite_create("norm");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_matrix_default, 0, NOPS * 3);
    tcase_add_loop_test(t, test_structures, 0, NOPS * 3);
    tcase_add_loop_test(t, test_aligned_build, 0, NOPS * 3);
    tcase_add_loop_test(t, test_large_mean, 0, 3);
    tcase_add_test(t, test_in_place);
    suite_add_tcase(s, t);
    TCase *k = tcase_create("kernel-limit");
    tcase_set_timeout(k, 0);
    tcase_add_test(k, test_kernel_wgs_limit);
    suite_add_tcase(s, k);
    TCase *l = tcase_create("launch");
    tcase_set_timeout(l, 600);
    tcase_add_test(l, test_launch_range);
    suite_add_tcase(s, l);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(norm_suite()); }
