/*
 * Elementwise expressions: every operator and function against an fp64
 * reference written here per case, dtype mixes, broadcasts, strides, 0/1
 * rows, shared intermediates, both paths, Philox dropout (known answers,
 * exact masks, keep fraction), every source error with its position, bad
 * run arguments, and compiled objects reused across calls.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { X, Y, B, S, K, NIN };

/* x, y: [rows, cols]; b: row vector; s: column vector; k: scalar. */
static oclf_expr_decl decl[NIN] = {
    {"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"y", OCLF_EXPR_MATRIX, OCLF_F32},
    {"b", OCLF_EXPR_ROW, OCLF_F32},    {"s", OCLF_EXPR_COL, OCLF_F32},
    {"k", OCLF_EXPR_SCALAR, OCLF_F32},
};

typedef double (*ref_fn)(double x, double y, double b, double s, double k);

static double gelu(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }
static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

typedef struct xcase {
    const char *src;
    ref_fn ref;
} xcase;

static double r_add(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return x + y; }
static double r_sub_mul(double x, double y, double b, double s, double k) { (void)s; (void)k; return x - y * b; }
static double r_div(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return x / (fabs(y) + 1); }
static double r_neg(double x, double y, double b, double s, double k) { (void)y; (void)b; return -x * k + s; }
static double r_cmp(double x, double y, double b, double s, double k)
{
    (void)b; (void)s; (void)k;
    return (x < y) + 2 * (x <= y) + 4 * (x > y) + 8 * (x >= y) + 16 * (x == x) + 32 * (x != y);
}
static double r_sel(double x, double y, double b, double s, double k) { (void)s; (void)k; return x > 0 ? y : b; }
static double r_exp(double x, double y, double b, double s, double k) { (void)y; (void)b; (void)s; (void)k; return exp(x) + expm1(x); }
static double r_log(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return log(fabs(x) + 0.5) + log1p(fabs(y)); }
static double r_sqrt(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return sqrt(fabs(x)) + 1 / sqrt(fabs(y) + 0.25); }
static double r_tanh(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return tanh(x) + erf(y) + fabs(x - y); }
static double r_act(double x, double y, double b, double s, double k)
{
    (void)b; (void)s; (void)k;
    return sigm(x) + (y < 0 ? 0 : y) + x * sigm(x);
}
static double r_gelu(double x, double y, double b, double s, double k)
{
    (void)b; (void)s; (void)k;
    return gelu(x) + 0.5 * y * (1 + tanh(0.79788456080286536 * (y + 0.044715 * y * y * y)));
}
static double r_minmax(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return fmin(x, y) + 3 * fmax(x, y); }
static double r_pow(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return pow(fabs(x) + 0.1, y); }
static double r_clamp(double x, double y, double b, double s, double k) { (void)y; (void)b; (void)s; (void)k; return fmin(fmax(x, -0.5), 0.5); }
static double r_lit(double x, double y, double b, double s, double k) { (void)y; (void)b; (void)s; (void)k; return x * 3.0 + 0.1 + 0.25; }
static double r_dag(double x, double y, double b, double s, double k) { (void)b; (void)s; (void)k; return exp(x) + exp(x) * y; }
static double r_softplus(double x, double y, double b, double s, double k) { (void)y; (void)b; (void)s; (void)k; return log(exp(x) + 1); }

static const xcase cases[] = {
    {"out = x + y;", r_add},
    {"out = x - y * b;", r_sub_mul},
    {"out = x / (abs(y) + 1);", r_div},
    {"out = -x * k + s;", r_neg},
    {"out = (x < y) + 2*(x <= y) + 4*(x > y) + 8*(x >= y) + 16*(x == x) + 32*(x != y);", r_cmp},
    {"out = x > 0 ? y : b;", r_sel},
    {"out = exp(x) + expm1(x);", r_exp},
    {"out = log(abs(x) + 0.5) + log1p(abs(y));", r_log},
    {"out = sqrt(abs(x)) + rsqrt(abs(y) + 0.25);", r_sqrt},
    {"out = tanh(x) + erf(y) + abs(x - y);", r_tanh},
    {"out = sigmoid(x) + relu(y) + silu(x);", r_act},
    {"out = gelu(x) + gelu_tanh(y);", r_gelu},
    {"out = min(x, y) + 3 * max(x, y);", r_minmax},
    {"out = pow(abs(x) + 0.1, y);", r_pow},
    {"out = clamp(x, -0.5, 0.5);", r_clamp},
    {"out = x * 0x1.8p1 + 1e-1 + .25;", r_lit},
    {"# shared intermediate\nt = exp(x);\nout = t + t * y;", r_dag},
    {"out = log(exp(x) + 1);", r_softplus},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

/* 1: every operand packed at offset 0 (rows on vector boundaries where
 * cols is a multiple of the vector width); 0: x and out strided and offset
 * off every boundary. */
static int packed_layout;
/* The context check_case compiles on when set (else the harness's). */
static oclf_context *case_ctx;

/* Device buffers of one run: x, y strided and offset, b, s packed, out
 * strided (all packed under packed_layout); host copies of the stored
 * values. */
typedef struct bufs {
    size_t rows, cols, xs, ys, os, xo, yo, oo;
    void *hx, *hy, *hb, *hs;
    cl_mem x, y, b, s, out;
} bufs;

static void bufs_make(bufs *u, size_t rows, size_t cols, oclf_dtype dx, oclf_dtype dy, oclf_dtype dout)
{
    memset(u, 0, sizeof *u);
    u->rows = rows;
    u->cols = cols;
    u->xs = cols + 3, u->xo = 2;
    u->ys = cols, u->yo = 0;
    u->os = cols + 1, u->oo = 1;
    if (packed_layout)
        u->xs = u->os = cols, u->xo = u->oo = 0;
    size_t nx = u->xo + u->xs * (rows ? rows : 1), ny = u->ys * (rows ? rows : 1) + 1;
    u->hx = th_random(dx, nx, -2, 2);
    u->hy = th_random(dy, ny, -2, 2);
    u->hb = th_random(dx, cols, -2, 2);
    u->hs = th_random(dy, rows + 1, -2, 2);
    u->x = th_upload(u->hx, nx * oclf_dtype_size(dx));
    u->y = th_upload(u->hy, ny * oclf_dtype_size(dy));
    u->b = th_upload(u->hb, cols * oclf_dtype_size(dx));
    u->s = th_upload(u->hs, (rows + 1) * oclf_dtype_size(dy));
    size_t no = (u->oo + u->os * (rows ? rows : 1)) * oclf_dtype_size(dout);
    void *z = calloc(1, no);
    u->out = th_upload(z, no);
    free(z);
}

static void bufs_free(bufs *u)
{
    free(u->hx), free(u->hy), free(u->hb), free(u->hs);
    clReleaseMemObject(u->x), clReleaseMemObject(u->y), clReleaseMemObject(u->b);
    clReleaseMemObject(u->s), clReleaseMemObject(u->out);
}

static void args_of(const bufs *u, float k, oclf_expr_arg a[NIN])
{
    memset(a, 0, NIN * sizeof *a);
    a[X].buf = (oclf_buf){u->x, u->xo, u->xs};
    a[Y].buf = (oclf_buf){u->y, u->yo, u->ys};
    a[B].buf = (oclf_buf){u->b, 0, 0};
    a[S].buf = (oclf_buf){u->s, 0, 0};
    a[K].scalar = k;
}

static void check_case(const xcase *c, oclf_dtype dx, oclf_dtype dy, oclf_dtype dout, size_t rows,
                       size_t cols, const oclf_choice *choice)
{
    th_env *env = th_get();
    oclf_expr_decl in[NIN];
    memcpy(in, decl, sizeof in);
    in[X].dtype = in[B].dtype = dx;
    in[Y].dtype = in[S].dtype = dy;
    oclf_expr_decl out = {"out", OCLF_EXPR_MATRIX, dout};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(case_ctx ? case_ctx : env->ctx, c->src, in, NIN, &out, 1, &e));
    bufs u;
    bufs_make(&u, rows, cols, dx, dy, dout);
    const float k = 0.75f;
    oclf_expr_arg a[NIN];
    args_of(&u, k, a);
    oclf_buf ob = {u.out, u.oo, u.os};
    TH_OK(oclf_expr_run(e, env->queue, rows, cols, a, &ob, 1, 0, choice, 0, NULL, NULL));
    const size_t el = oclf_dtype_size(dout), nbytes = (u.oo + u.os * (rows ? rows : 1)) * el;
    unsigned char *got = malloc(nbytes);
    th_download(u.out, got, nbytes);
    double *ref = malloc((rows * cols + 1) * sizeof *ref);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++)
            ref[r * cols + j] = c->ref(oclf_ref_get(dx, u.hx, u.xo + r * u.xs + j),
                                       oclf_ref_get(dy, u.hy, u.yo + r * u.ys + j),
                                       oclf_ref_get(dx, u.hb, j), oclf_ref_get(dy, u.hs, r), k);
    size_t first = 0;
    double maxerr = 0;
    size_t bad = oclf_ref_compare(dout, got + u.oo * el, u.os, ref, rows, cols, &first, &maxerr);
    ck_assert_msg(bad == 0, "%s (%s,%s->%s, %zux%zu, path %d): %zu bad, first %zu, max err %g",
                  c->src, oclf_dtype_name(dx), oclf_dtype_name(dy), oclf_dtype_name(dout), rows,
                  cols, choice ? (int)choice->path : 0, bad, first, maxerr);
    /* Padding between rows and before the first is never written. */
    for (size_t r = 0; r < rows; r++)
        for (size_t j = cols; j < u.os; j++)
            for (size_t byte = 0; byte < el; byte++)
                ck_assert_int_eq(got[(u.oo + r * u.os + j) * el + byte], 0);
    for (size_t byte = 0; byte < u.oo * el; byte++)
        ck_assert_int_eq(got[byte], 0);
    free(got);
    free(ref);
    bufs_free(&u);
    oclf_expr_release(e);
}

/* Every case with x in each dtype, y in the next one, out in x's; fused
 * and unfused. */
START_TEST(test_cases)
{
    const xcase *c = &cases[_i % NCASES];
    const oclf_dtype dx = dtypes[_i / NCASES], dy = dtypes[(_i / NCASES + 1) % 3];
    oclf_choice fused = th_choice(OCLF_PATH_FUSED), unfused = th_choice(OCLF_PATH_UNFUSED);
    check_case(c, dx, dy, dx, 5, 37, &fused);
    check_case(c, dx, dy, dx, 5, 37, &unfused);
}
END_TEST

/* Output dtypes differing from the inputs, 0 and 1 rows, widths below and
 * across the vector width, every VEC. */
START_TEST(test_shapes)
{
    const xcase *c = &cases[1]; /* x - y * b: two matrices and a row vector */
    static const size_t rows[] = {0, 1, 3}, cols[] = {1, 7, 33};
    static const int vecs[] = {1, 2, 4, 8, 16};
    for (int d = 0; d < 3; d++)
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t ci = 0; ci < 3; ci++) {
                oclf_choice ch = th_choice(ci == 1 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
                oclf_params_set(&ch.params, "VEC", vecs[(ri * 3 + ci + (size_t)d) % 5]);
                oclf_params_set(&ch.params, "ROWS", 1 + (int64_t)((ri + ci + (size_t)d) % 3));
                check_case(c, OCLF_F32, dtypes[d], dtypes[(d + 1) % 3], rows[ri], cols[ci], &ch);
            }
    check_case(&cases[3], OCLF_F16, OCLF_BF16, OCLF_F32, 9, 21, NULL); /* column vector, scalar */
    /* The defaults from 64 rows (a CPU's work-items take 4 rows each): 70
     * rows end in a partial block. */
    check_case(c, OCLF_F32, OCLF_F16, OCLF_F32, 70, 37, NULL);
}
END_TEST


/* Operands on vector boundaries (every matrix's offset and row stride, the
 * row vector's offset, a multiple of the vector width) run the aligned
 * build of the fused kernel (OCLF_ALIGNED: one wide access per vector on
 * GPUs), strided and offset ones the plain build; both against the
 * reference, with 16-bit and f32 operands mixed. */
START_TEST(test_aligned_build)
{
    const oclf_dtype dx = dtypes[_i], dy = dtypes[(_i + 1) % 3];
    /* VEC named: a device class whose default is 1 has no vectors to align */
    oclf_choice fused = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&fused.params, "VEC", 8);
    for (int packed = 0; packed < 2; packed++)
        for (size_t c = 0; c < NCASES; c += 5) {
            packed_layout = packed;
            case_ctx = th_build_log_context();
            check_case(&cases[c], dx, dy, dx, 5, 96, &fused);
            ck_assert_msg(th_built("launch expr_fused ", "-DOCLF_VEC=8", packed),
                          "%s (%s,%s) packed %d: no %s launch of the fused kernel:\n%s",
                          cases[c].src, oclf_dtype_name(dx), oclf_dtype_name(dy), packed,
                          packed ? "aligned" : "plain", th_builds());
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
            packed_layout = 0;
        }
}
END_TEST

/* Random123's published known answers for Philox4x32-10. */
START_TEST(test_philox_kat)
{
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        oclf_ref_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int w = 0; w < 4; w++)
            ck_assert_msg(out[w] == kat[i][6 + w], "vector %d word %d: %08x != %08x", i, w,
                          out[w], kat[i][6 + w]);
    }
}
END_TEST

/* The context run_dropout compiles in when set (else the harness's). */
static oclf_context *dropout_ctx;

/* Runs `src` (x: f32 matrix, p: scalar) on rows x cols and returns the
 * packed f32 output. */
static float *run_dropout(const char *src, size_t rows, size_t cols, const float *hx, float p,
                          uint64_t seed, uint64_t offset, const oclf_choice *choice)
{
    th_env *env = th_get();
    const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"p", OCLF_EXPR_SCALAR, OCLF_F32}};
    const oclf_expr_decl out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(dropout_ctx ? dropout_ctx : env->ctx, src, in, 2, &out, 1, &e));
    cl_mem x = th_upload(hx, rows * cols * sizeof(float)), y = th_alloc(rows * cols * sizeof(float));
    oclf_expr_arg a[2] = {{{x, 0, 0}, 0}, {{NULL, 0, 0}, p}};
    oclf_buf ob = {y, 0, 0};
    TH_OK(oclf_expr_run(e, env->queue, rows, cols, a, &ob, seed, offset, choice, 0, NULL, NULL));
    float *got = malloc(rows * cols * sizeof *got);
    th_download(y, got, rows * cols * sizeof(float));
    clReleaseMemObject(x);
    clReleaseMemObject(y);
    oclf_expr_release(e);
    return got;
}

/* The mask is the reference's, bit for bit, on both paths and every VEC,
 * with Philox in 64-bit lanes (a CPU's) and in 32-bit lanes (a GPU's, from
 * a context of the GPU class); two dropouts draw from two streams; the
 * offset shifts the counter. */
START_TEST(test_dropout_exact)
{
    th_env *env = th_get();
    const size_t rows = 7, cols = 45;
    float *hx = th_random(OCLF_F32, rows * cols, 0.5f, 2);
    const uint64_t seed = 0x0123456789abcdefull, offset = 0xfffffffffffffff0ull; /* wraps */
    const char *src = "y = dropout(x, p) + dropout(x, 0.5);";
    static const int vecs[] = {1, 2, 4, 8, 16};
    oclf_context *gpu_class = NULL;
    const char *cls = getenv("OCLF_DEVICE_CLASS");
    char *saved = cls ? strdup(cls) : NULL;
    setenv("OCLF_DEVICE_CLASS", "gpu", 1);
    TH_OK(oclf_context_create(env->cl, env->device, NULL, &gpu_class));
    if (saved)
        setenv("OCLF_DEVICE_CLASS", saved, 1);
    else
        unsetenv("OCLF_DEVICE_CLASS");
    free(saved);
    for (int v = 0; v < 10; v++)
        for (int path = 1; path <= 2; path++) {
            dropout_ctx = v >= 5 ? gpu_class : NULL;
            oclf_choice ch = th_choice((oclf_path)path);
            oclf_params_set(&ch.params, "VEC", vecs[v % 5]);
            float *got = run_dropout(src, rows, cols, hx, 0.3f, seed, offset, &ch);
            for (size_t i = 0; i < rows * cols; i++) {
                const uint64_t n = i + offset;
                const double want = oclf_ref_dropout(hx[i], 0.3f, seed, n, 0) +
                                    oclf_ref_dropout(hx[i], 0.5f, seed, n, 1);
                ck_assert_msg(fabs(got[i] - want) <= 1e-5 * (1 + fabs(want)),
                              "element %zu (VEC %d, path %d, class %s): %g != %g", i, vecs[v % 5],
                              path, v >= 5 ? "gpu" : "device's", (double)got[i], want);
            }
            free(got);
        }
    dropout_ctx = NULL;
    oclf_context_destroy(gpu_class);
    /* Row 1 of a run at offset 0 is row 0 of a run at offset cols. */
    float *a = run_dropout("y = dropout(x, p);", 2, cols, hx, 0.5f, 9, 0, NULL);
    float *b = run_dropout("y = dropout(x, p);", 1, cols, hx + cols, 0.5f, 9, cols, NULL);
    ck_assert_int_eq(memcmp(a + cols, b, cols * sizeof(float)), 0);
    /* p = 0 is the identity. */
    float *c = run_dropout("y = dropout(x, p);", rows, cols, hx, 0.0f, 9, 0, NULL);
    ck_assert_int_eq(memcmp(c, hx, rows * cols * sizeof(float)), 0);
    free(a), free(b), free(c), free(hx);
}
END_TEST

/* A context created with `name` set to `value` in the environment (the
 * variable restored after). */
static oclf_context *ctx_with_env(const char *name, const char *value)
{
    th_env *env = th_get();
    const char *old = getenv(name);
    char *saved = old ? strdup(old) : NULL;
    setenv(name, value, 1);
    oclf_context *ctx = NULL;
    TH_OK(oclf_context_create(env->cl, env->device, NULL, &ctx));
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
    return ctx;
}

/* A built kernel that takes fewer work-items than the default WGS (32, as
 * Mesa's CPU device reports for these kernels): the default is lowered to
 * fit and the results are the reference's, in both device classes and on
 * both paths; a WGS the caller names above the limit fails, naming the
 * limit, with the entry point's name even on a context's first call. */
START_TEST(test_kernel_wgs_limit)
{
    th_env *env = th_get();
    const size_t rows = 70, cols = 45;
    float *hx = th_random(OCLF_F32, rows * cols, 0.5f, 5);
    const char *src = "y = dropout(x, p) * 2 + x;";
    const char *cls = getenv("OCLF_DEVICE_CLASS");
    char *saved = cls ? strdup(cls) : NULL;
    /* a cap that is not a positive integer is refused */
    static const char *const bad[] = {"0", "-32", "32x", "x"};
    for (int i = 0; i < 4; i++) {
        setenv("OCLF_KERNEL_WGS_CAP", bad[i], 1);
        oclf_context *none = NULL;
        ck_assert_int_eq(oclf_context_create(env->cl, env->device, NULL, &none),
                         OCLF_INVALID_ARGUMENT);
        ck_assert_ptr_null(none);
        ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "OCLF_KERNEL_WGS_CAP"));
    }
    unsetenv("OCLF_KERNEL_WGS_CAP");
    for (int c = 0; c < 2; c++) {
        setenv("OCLF_DEVICE_CLASS", c ? "gpu" : "cpu", 1);
        oclf_context *capped = ctx_with_env("OCLF_KERNEL_WGS_CAP", "32");
        /* first call: the caller's WGS 64 is over the limit */
        const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32},
                                      {"p", OCLF_EXPR_SCALAR, OCLF_F32}};
        const oclf_expr_decl out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
        oclf_expr *e = NULL;
        TH_OK(oclf_expr_compile(capped, src, in, 2, &out, 1, &e));
        cl_mem x = th_upload(hx, rows * cols * sizeof(float));
        cl_mem y = th_alloc(rows * cols * sizeof(float));
        oclf_expr_arg a[2] = {{{x, 0, 0}, 0}, {{NULL, 0, 0}, 0.25f}};
        oclf_buf ob = {y, 0, 0};
        oclf_choice big = th_choice(OCLF_PATH_AUTO);
        oclf_params_set(&big.params, "WGS", 64);
        ck_assert_int_eq(oclf_expr_run(e, env->queue, rows, cols, a, &ob, 3, 0, &big, 0, NULL,
                                       NULL),
                         OCLF_OUT_OF_RESOURCES);
        const char *msg = oclf_last_error(capped);
        ck_assert_msg(strncmp(msg, "oclf_expr_run: ", 15) == 0 &&
                          strstr(msg, "CL_KERNEL_WORK_GROUP_SIZE 32"),
                      "%s", msg);
        clReleaseMemObject(x);
        clReleaseMemObject(y);
        oclf_expr_release(e);
        dropout_ctx = capped;
        for (int path = 0; path <= 2; path++) {
            oclf_choice ch = th_choice((oclf_path)path);
            float *got = run_dropout(src, rows, cols, hx, 0.25f, 3, 0, &ch);
            for (size_t i = 0; i < rows * cols; i++) {
                const double want = oclf_ref_dropout(hx[i], 0.25f, 3, i, 0) * 2 + hx[i];
                ck_assert_msg(fabs(got[i] - want) <= 1e-5 * (1 + fabs(want)),
                              "element %zu (class %s, path %d): %g != %g", i, c ? "gpu" : "cpu",
                              path, (double)got[i], want);
            }
            free(got);
        }
        dropout_ctx = NULL;
        oclf_context_destroy(capped);
    }
    if (saved)
        setenv("OCLF_DEVICE_CLASS", saved, 1);
    else
        unsetenv("OCLF_DEVICE_CLASS");
    free(saved);
    free(hx);
}
END_TEST

/* Keep fraction within 5 standard deviations of 1 - p; kept values scaled
 * by exactly 1 / (1 - p). */
START_TEST(test_dropout_statistics)
{
    const size_t rows = 256, cols = 1024, n = rows * cols;
    float *hx = malloc(n * sizeof *hx);
    for (size_t i = 0; i < n; i++)
        hx[i] = 1.0f;
    static const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int t = 0; t < 3; t++) {
        const float p = ps[t];
        float *got = run_dropout("y = dropout(x, p);", rows, cols, hx, p, 1234 + (uint64_t)t, 0, NULL);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (got[i] != 0.0f) {
                kept++;
                ck_assert_msg(fabs(got[i] - 1.0 / (1.0 - p)) <= 1e-6 / (1.0 - p), "kept %g", (double)got[i]);
            }
        }
        const double q = 1.0 - p, sd = sqrt(p * q / (double)n);
        ck_assert_msg(fabs((double)kept / (double)n - q) <= 5 * sd, "p %g: kept %zu of %zu", (double)p,
                      kept, n);
        free(got);
    }
    free(hx);
}
END_TEST

typedef struct err_case {
    const char *src, *want;
} err_case;

START_TEST(test_source_errors)
{
    th_env *env = th_get();
    static const err_case errs[] = {
        {"out = x + ;", "1:11: expected a number"},
        {"out = foo(x);", "1:7: unknown function 'foo'"},
        {"out = z;", "1:7: unknown name 'z'"},
        {"out = exp(x, y);", "1:7: exp takes 1 argument, not 2"},
        {"out = clamp(x);", "1:7: clamp takes 3 arguments, not 1"},
        {"t = x;", "1:7: output 'out' has no statement"},
        {"a = c + 1;\nc = a;\nout = a;", "2:5: 'a' depends on itself"},
        {"out = x $ y;", "1:9: unexpected character '$'"},
        {"out = 1.5e;", "1:7: malformed number"},
        {"out = 0x;", "1:7: malformed number"},
        {"out = 1e39;", "1:7: number out of the float range"},
        {"out = dropout(x, 1.5);", "1:18: dropout p must be in [0, 1)"},
        {"out = dropout(x, y);", "1:18: dropout p must be a number or a scalar input"},
        {"out = x;\nout = y;", "2:1: 'out' is assigned twice"},
        {"x = y;\nout = x;", "1:1: 'x' is an input"},
        {"out = x\n  + y", "2:6: expected ';'"},
        {"out x;", "1:5: expected '='"},
        {"exp = x;", "1:1: 'exp' is a function"},
        {"out = (x;", "1:9: expected ')'"},
        /* '#' to the end of a line is a comment, whatever follows it */
        {"# out = x;\nout = z; # z", "2:7: unknown name 'z'"},
        {"#define z x\nout = z;", "2:7: unknown name 'z'"},
    };
    oclf_expr_decl out = {"out", OCLF_EXPR_MATRIX, OCLF_F32};
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        oclf_expr *e = (oclf_expr *)&out; /* must come back NULL */
        oclf_status st = oclf_expr_compile(env->ctx, errs[i].src, decl, NIN, &out, 1, &e);
        ck_assert_msg(st == OCLF_INVALID_ARGUMENT, "%s: %s", errs[i].src, oclf_status_string(st));
        ck_assert_ptr_null(e);
        const char *msg = oclf_last_error(env->ctx);
        ck_assert_msg(strstr(msg, errs[i].want) && strstr(msg, "oclf_expr_compile"),
                      "%s: '%s' lacks '%s'", errs[i].src, msg, errs[i].want);
    }
    /* The limits. */
    char *big = malloc(40000);
    size_t n = (size_t)sprintf(big, "out = ");
    for (int i = 0; i < 100; i++)
        big[n++] = '(';
    big[n++] = 'x';
    for (int i = 0; i < 100; i++)
        big[n++] = ')';
    strcpy(big + n, ";");
    oclf_expr *e = NULL;
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, big, decl, NIN, &out, 1, &e), OCLF_INVALID_ARGUMENT,
                   "nested more than 64", ck_assert_ptr_null(e));
    n = (size_t)sprintf(big, "out = x");
    for (int i = 0; i < 300; i++)
        n += (size_t)sprintf(big + n, " + %d", i);
    strcpy(big + n, ";");
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, big, decl, NIN, &out, 1, &e), OCLF_INVALID_ARGUMENT,
                   "more than 256", ck_assert_ptr_null(e));
    n = 0;
    for (int i = 0; i < 65; i++)
        n += (size_t)sprintf(big + n, "t%d = x;\n", i);
    strcpy(big + n, "out = x;");
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, big, decl, NIN, &out, 1, &e), OCLF_INVALID_ARGUMENT,
                   "65:1: more than 64 statements", ck_assert_ptr_null(e));
    memset(big, ' ', 20000);
    strcpy(big + 20000, "out = x;");
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, big, decl, NIN, &out, 1, &e), OCLF_INVALID_ARGUMENT,
                   "source longer than 16384", ck_assert_ptr_null(e));
    free(big);
    /* Declarations. */
    oclf_expr_decl bad[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"x", OCLF_EXPR_ROW, OCLF_F32}};
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "out = x;", bad, 2, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "declared twice", ck_assert_ptr_null(e));
    bad[1].name = "2x";
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "out = x;", bad, 2, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "not an identifier", ck_assert_ptr_null(e));
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "out = x;", decl, NIN, &out, 0, &e),
                   OCLF_INVALID_ARGUMENT, "no outputs", ck_assert_ptr_null(e));
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, NULL, decl, NIN, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "source is NULL", ck_assert_ptr_null(e));
}
END_TEST

/* '#' starts a comment to the end of its line: preprocessor-looking lines
 * are comments too, and nothing of them reaches the program (the same
 * canonical form, hence the same program, as the source without them). */
START_TEST(test_comments)
{
    th_env *env = th_get();
    const oclf_expr_decl in = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL, *plain = NULL;
    TH_OK(oclf_expr_compile(env->ctx,
                            "#define x 1\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
                            "y = x * 2; # not 1 * 2\n  # y = 0;\n#",
                            &in, 1, &out, 1, &e));
    TH_OK(oclf_expr_compile(env->ctx, "y = x * 2;", &in, 1, &out, 1, &plain));
    ck_assert_str_eq(oclf_expr_canonical(e), oclf_expr_canonical(plain));
    const size_t rows = 3, cols = 21, n = rows * cols;
    float *hx = th_random(OCLF_F32, n, -2, 2), *got = malloc(n * sizeof *got);
    cl_mem x = th_upload(hx, n * sizeof *hx), y = th_alloc(n * sizeof *got);
    const oclf_expr_arg a = {{x, 0, 0}, 0};
    const oclf_buf ob = {y, 0, 0};
    TH_OK(oclf_expr_run(e, env->queue, rows, cols, &a, &ob, 0, 0, NULL, 0, NULL, NULL));
    th_download(y, got, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(got[i], hx[i] * 2);
    clReleaseMemObject(x), clReleaseMemObject(y);
    free(hx), free(got);
    oclf_expr_release(e);
    oclf_expr_release(plain);
}
END_TEST

/* Bad run arguments: a status, a sentence, and the output untouched. */
START_TEST(test_run_errors)
{
    th_env *env = th_get();
    const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"p", OCLF_EXPR_SCALAR, OCLF_F32}};
    const oclf_expr_decl out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "y = dropout(x * 2, p);", in, 2, &out, 1, &e));
    const size_t rows = 4, cols = 9, bytes = rows * cols * sizeof(float);
    float *hx = th_random(OCLF_F32, rows * cols, -1, 1), *sentinel = malloc(bytes), *got = malloc(bytes);
    for (size_t i = 0; i < rows * cols; i++)
        sentinel[i] = 42.0f;
    cl_mem x = th_upload(hx, bytes), y = th_upload(sentinel, bytes), small = th_alloc(bytes / 2);
    oclf_expr_arg a[2] = {{{x, 0, 0}, 0}, {{NULL, 0, 0}, 0.5f}};
    oclf_buf ob = {y, 0, 0};
#define UNTOUCHED                                                  \
    do {                                                           \
        th_download(y, got, bytes);                                \
        ck_assert_int_eq(memcmp(got, sentinel, bytes), 0);         \
    } while (0)
    a[1].scalar = 1.0f;
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, &ob, 0, 0, NULL, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "dropout p", UNTOUCHED);
    a[1].scalar = 0.5f;
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "VEC", 3);
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, &ob, 0, 0, &ch, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "VEC = 3", UNTOUCHED);
    ch = th_choice(OCLF_PATH_UNFUSED);
    oclf_params_set(&ch.params, "WGS", 48);
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, &ob, 0, 0, &ch, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "WGS = 48 is not a power of two", UNTOUCHED);
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_buf sb = {small, 0, 0};
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, &sb, 0, 0, NULL, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "output 0", UNTOUCHED);
    a[0].buf.mem = small;
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, &ob, 0, 0, NULL, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "input 0", UNTOUCHED);
    a[0].buf.mem = y; /* shifted by one element: overlaps without being in place */
    a[0].buf.offset = 1;
    oclf_expr_arg a2[2] = {{{y, 1, cols}, 0}, {{NULL, 0, 0}, 0.5f}};
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows - 1, cols, a2, &ob, 0, 0, NULL, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "overlaps input 0", UNTOUCHED);
    a[0].buf = (oclf_buf){x, 0, 0};
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, 0, a, &ob, 0, 0, NULL, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "cols is 0", UNTOUCHED);
    TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, NULL, 0, 0, NULL, 0, NULL, NULL),
                   OCLF_INVALID_ARGUMENT, "outputs is NULL", UNTOUCHED);
    /* A run reports under the context that compiled the expression, as
     * the header says; a NULL expression, having none, under NULL. */
    ck_assert_str_eq(oclf_last_error(NULL), "");
    ck_assert_ptr_nonnull(strstr(oclf_last_error(env->ctx), "oclf_expr_run: outputs is NULL"));
    ck_assert_int_eq(oclf_expr_run(NULL, env->queue, rows, cols, a, &ob, 0, 0, NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "expr is NULL"));
    ck_assert_str_eq(oclf_last_error(env->ctx), "");
    /* Zero rows: nothing written, an event still produced. */
    cl_event ev = NULL;
    TH_OK(oclf_expr_run(e, env->queue, 0, cols, a, &ob, 0, 0, NULL, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
    UNTOUCHED;
    /* In place (same elements, same dtype) is allowed. */
    oclf_expr_arg a3[2] = {{{y, 0, 0}, 0}, {{NULL, 0, 0}, 0.0f}};
    TH_OK(oclf_expr_run(e, env->queue, rows, cols, a3, &ob, 0, 0, NULL, 0, NULL, NULL));
    th_download(y, got, bytes);
    for (size_t i = 0; i < rows * cols; i++)
        ck_assert_float_eq(got[i], 84.0f);
    /* A name the operation does not use is ignored, as the header says:
     * "vec" is not VEC, so 3 is no error. */
    oclf_choice odd = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&odd.params, "vec", 3);
    TH_OK(oclf_expr_run(e, env->queue, rows, cols, a3, &ob, 0, 0, &odd, 0, NULL, NULL));
    th_download(y, got, bytes);
    for (size_t i = 0; i < rows * cols; i++)
        ck_assert_float_eq(got[i], 168.0f);
#undef UNTOUCHED
    clReleaseMemObject(x), clReleaseMemObject(y), clReleaseMemObject(small);
    free(hx), free(sentinel), free(got);
    oclf_expr_release(e);
}
END_TEST

/* ulps between a float and the exact value: the distance over the spacing
 * of floats at the exact value's magnitude. */
static double ulps(float got, double exact)
{
    int e;
    frexp(exact, &e);
    const double ulp = ldexp(1.0, (e - 24 < -149 ? -149 : e - 24));
    return fabs((double)got - exact) / ulp;
}

/* exp, log and softplus against the header's promises (exp and log within
 * 3 ulp, softplus within 4 in the fused kernel) through the vector code
 * (VEC 16), the scalar code (VEC 1) and, for exp and log, the unfused
 * kernel: exp at every 751st float from -87.3 to 88.7 (normal results),
 * log at every 997th positive normal float, softplus at every 751st float
 * from -80 to 100. */
START_TEST(test_exp_log_bound)
{
    static const struct {
        const char *src;
        int fn; /* 0 exp, 1 log, 2 softplus */
        float lo, hi;
        uint32_t step;
        double bound;
        int unfused;
    } fns[] = {{"y = exp(x);", 0, -87.3f, 88.7f, 751, 3, 1},
               {"y = log(x);", 1, 0x1.0p-126f, 0x1.fffffep127f, 997, 3, 1},
               {"y = log(exp(x) + 1);", 2, -80.0f, 100.0f, 751, 4, 0}};
    th_env *env = th_get();
    const size_t cols = 4096, cap = 8u << 20;
    float *hx = malloc(cap * sizeof *hx), *got = malloc(cap * sizeof *got);
    const oclf_expr_decl in = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        /* Every step-th float from lo up to hi. */
        size_t n = 0;
        for (float v = fns[f].lo; v < fns[f].hi && n < cap;) {
            hx[n++] = v;
            uint32_t bits;
            memcpy(&bits, &v, sizeof bits);
            /* toward +infinity: up for positive, down in magnitude for negative */
            if (v >= 0)
                bits += fns[f].step;
            else if ((bits & 0x7fffffffu) > fns[f].step)
                bits -= fns[f].step;
            else
                bits = 0;
            memcpy(&v, &bits, sizeof v);
        }
        ck_assert_uint_lt(n, cap);
        const size_t rows = (n + cols - 1) / cols;
        for (size_t i = n; i < rows * cols; i++)
            hx[i] = 1.0f;
        cl_mem x = th_upload(hx, rows * cols * sizeof *hx), y = th_alloc(rows * cols * sizeof *got);
        oclf_expr *e = NULL;
        TH_OK(oclf_expr_compile(env->ctx, fns[f].src, &in, 1, &out, 1, &e));
        const oclf_expr_arg a = {{x, 0, 0}, 0};
        const oclf_buf ob = {y, 0, 0};
        for (int v = 0; v < 3; v++) {
            if (v == 2 && !fns[f].unfused)
                continue;
            oclf_choice ch = th_choice(v == 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
            oclf_params_set(&ch.params, "VEC", v == 0 ? 16 : 1);
            TH_OK(oclf_expr_run(e, env->queue, rows, cols, &a, &ob, 0, 0, &ch, 0, NULL, NULL));
            th_download(y, got, rows * cols * sizeof *got);
            double worst = 0, worst_x = 0;
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) {
                const double xv = hx[i];
                const double want = fns[f].fn == 0 ? exp(xv)
                                    : fns[f].fn == 1 ? log(xv)
                                                     : (xv > 0 ? xv + log1p(exp(-xv)) : log1p(exp(xv)));
                if (fabs(want) < 0x1.0p-126 && fns[f].fn != 1)
                    continue; /* not a normal result */
                const double u = want == 0 ? fabs(got[i]) : ulps(got[i], want);
                if (u > worst)
                    worst = u, worst_x = xv;
                bad += !(u <= fns[f].bound);
            }
            ck_assert_msg(bad == 0, "%s VEC %d path %d: %zu of %zu beyond %g ulp, worst %.3g at x = %.9g",
                          fns[f].src, v == 0 ? 16 : 1, v == 2 ? 2 : 1, bad, n, fns[f].bound, worst,
                          worst_x);
        }
        oclf_expr_release(e);
        clReleaseMemObject(x), clReleaseMemObject(y);
    }
    free(hx), free(got);
}
END_TEST

/* Outputs in place on an input (the same elements, the same dtype) on both
 * paths and at VEC 1 and 16, where a later unfused kernel still reads the
 * input (a second output of it, an output that copies it) and where one
 * output copies an input that another overwrites in the same kernel.
 * Inputs are strided with an offset; the padding stays as it was. */
START_TEST(test_in_place)
{
    static const struct {
        const char *src;
        unsigned n_out, on_x; /* outputs; which one is in place on x */
        int y_out;            /* the output in place on y, or -1 */
    } cases[] = {
        {"o0 = x * 2 + 1;", 1, 0, -1},
        {"o0 = x * 2; o1 = x + 1;", 2, 0, -1},
        {"o0 = x * 2; o1 = x + 1;", 2, 1, -1},
        {"o0 = x; o1 = exp(x);", 2, 1, -1},
        {"o0 = y; o1 = x;", 2, 0, 1},
    };
    th_env *env = th_get();
    const size_t rows = 5, cols = 37, stride = 41, off = 3, n = off + rows * stride;
    const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"y", OCLF_EXPR_MATRIX, OCLF_F32}};
    const oclf_expr_decl out[2] = {{"o0", OCLF_EXPR_MATRIX, OCLF_F32}, {"o1", OCLF_EXPR_MATRIX, OCLF_F32}};
    float *hx = th_random(OCLF_F32, n, -2, 2), *hy = th_random(OCLF_F32, n, -2, 2);
    float *got = malloc(n * sizeof *got);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        oclf_expr *e = NULL;
        TH_OK(oclf_expr_compile(env->ctx, cases[c].src, in, 2, out, cases[c].n_out, &e));
        for (int v = 0; v < 4; v++) {
            cl_mem x = th_upload(hx, n * sizeof *hx), y = th_upload(hy, n * sizeof *hy);
            cl_mem other = th_alloc(n * sizeof *got);
            const oclf_expr_arg a[2] = {{{x, off, stride}, 0}, {{y, off, stride}, 0}};
            oclf_buf ob[2];
            for (unsigned j = 0; j < cases[c].n_out; j++)
                ob[j] = (oclf_buf){j == cases[c].on_x ? x : (int)j == cases[c].y_out ? y : other, off,
                                   stride};
            oclf_choice ch = th_choice(v < 2 ? OCLF_PATH_FUSED : OCLF_PATH_UNFUSED);
            oclf_params_set(&ch.params, "VEC", v % 2 ? 16 : 1);
            TH_OK(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL));
            for (unsigned j = 0; j < cases[c].n_out; j++) {
                th_download(ob[j].mem, got, n * sizeof *got);
                const float *before = ob[j].mem == y ? hy : hx;
                for (size_t i = 0; i < n; i++) {
                    const size_t r = (i - off) / stride, col = (i - off) % stride;
                    double want = before[i]; /* padding: untouched */
                    if (i >= off && col < cols && ob[j].mem != other) {
                        const double xv = hx[i], yv = hy[i];
                        switch (c * 2 + j) {
                        case 0: want = (float)(xv * 2) + 1; break;
                        case 2: case 4: want = xv * 2; break;
                        case 3: case 5: want = xv + 1; break;
                        case 7: want = (float)exp(xv); break;
                        case 8: want = yv; break;
                        case 9: want = xv; break;
                        }
                    }
                    if (ob[j].mem == other)
                        continue; /* checked through the buffers in place */
                    const int ok = fabs(got[i] - want) <= 1e-6 * fabs(want) + 1e-7;
                    ck_assert_msg(ok, "%s, output %u, path %d VEC %d: element %zu (row %zu col %zu) is %g, want %g",
                                  cases[c].src, j, v < 2 ? 0 : 1, v % 2 ? 16 : 1, i, r, col,
                                  (double)got[i], want);
                }
            }
            /* The output not in place holds the other value. */
            for (unsigned j = 0; j < cases[c].n_out; j++) {
                if (ob[j].mem != other)
                    continue;
                th_download(other, got, n * sizeof *got);
                for (size_t r = 0; r < rows; r++)
                    for (size_t col = 0; col < cols; col++) {
                        const size_t i = off + r * stride + col;
                        const double xv = hx[i];
                        const double want = c == 3 ? xv : j == 1 ? xv + 1 : xv * 2;
                        ck_assert_msg(fabs(got[i] - want) <= 1e-6 * fabs(want) + 1e-7,
                                      "%s, output %u, path %d VEC %d: (%zu, %zu) is %g, want %g",
                                      cases[c].src, j, v < 2 ? 0 : 1, v % 2 ? 16 : 1, r, col,
                                      (double)got[i], want);
                    }
            }
            clReleaseMemObject(x), clReleaseMemObject(y), clReleaseMemObject(other);
        }
        oclf_expr_release(e);
    }
    free(hx), free(hy), free(got);
}
END_TEST

/* One object run many times with new scalars; names never reach the key:
 * the same graph under other names is the same program (no new build),
 * and two outputs share one intermediate. */
START_TEST(test_reuse_and_canonical)
{
    th_env *env = th_get();
    const oclf_expr_decl in1[2] = {{"secret_input", OCLF_EXPR_MATRIX, OCLF_F32}, {"k", OCLF_EXPR_SCALAR, OCLF_F32}};
    const oclf_expr_decl in2[2] = {{"a", OCLF_EXPR_MATRIX, OCLF_F32}, {"s", OCLF_EXPR_SCALAR, OCLF_F32}};
    const oclf_expr_decl o1[2] = {{"first", OCLF_EXPR_MATRIX, OCLF_F32}, {"second", OCLF_EXPR_MATRIX, OCLF_F16}};
    const oclf_expr_decl o2[2] = {{"u", OCLF_EXPR_MATRIX, OCLF_F32}, {"v", OCLF_EXPR_MATRIX, OCLF_F16}};
    oclf_expr *e1 = NULL, *e2 = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "hidden = relu(secret_input) * k;\nfirst = hidden + 1;\nsecond = hidden * hidden;",
                            in1, 2, o1, 2, &e1));
    oclf_context_stats before = OCLF_CONTEXT_STATS_INIT, after = OCLF_CONTEXT_STATS_INIT;
    TH_OK(oclf_context_get_stats(env->ctx, &before));
    TH_OK(oclf_expr_compile(env->ctx, "v = w * w; w = relu(a) * s; u = w + 1;", in2, 2, o2, 2, &e2));
    TH_OK(oclf_context_get_stats(env->ctx, &after));
    ck_assert_str_eq(oclf_expr_canonical(e1), oclf_expr_canonical(e2));
    ck_assert_ptr_null(strstr(oclf_expr_canonical(e1), "secret"));
    ck_assert_ptr_null(strstr(oclf_expr_canonical(e1), "hidden"));
    ck_assert_uint_eq(after.programs_compiled + after.programs_from_disk,
                      before.programs_compiled + before.programs_from_disk);
    const size_t rows = 3, cols = 11, n = rows * cols;
    float *hx = th_random(OCLF_F32, n, -2, 2), *g1 = malloc(n * 4);
    uint16_t *g2 = malloc(n * 2);
    cl_mem x = th_upload(hx, n * 4), y1 = th_alloc(n * 4), y2 = th_alloc(n * 2);
    for (int call = 0; call < 3; call++) {
        const float k = 0.5f + (float)call;
        oclf_expr_arg a[2] = {{{x, 0, 0}, 0}, {{NULL, 0, 0}, k}};
        oclf_buf ob[2] = {{y1, 0, 0}, {y2, 0, 0}};
        oclf_choice ch = th_choice(call == 1 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
        TH_OK(oclf_expr_run(call == 2 ? e2 : e1, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL));
        th_download(y1, g1, n * 4);
        th_download(y2, g2, n * 2);
        double r1[64], r2[64];
        for (size_t i = 0; i < n; i++) {
            float h = (hx[i] < 0 ? 0.0f : hx[i]) * k;
            r1[i] = (double)h + 1;
            r2[i] = (double)h * h;
        }
        ck_assert_uint_eq(oclf_ref_compare(OCLF_F32, g1, cols, r1, rows, cols, NULL, NULL), 0);
        ck_assert_uint_eq(oclf_ref_compare(OCLF_F16, g2, cols, r2, rows, cols, NULL, NULL), 0);
    }
    clReleaseMemObject(x), clReleaseMemObject(y1), clReleaseMemObject(y2);
    free(hx), free(g1), free(g2);
    oclf_expr_release(e1);
    oclf_expr_release(e2);
}
END_TEST


static double r1_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double r1_exp(double x) { return exp(x); }
static double r1_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Special and extreme values through the vector helpers (VEC 16: whole
 * chunks), the scalar code (VEC 1) and (but for softplus) the unfused
 * kernels: exp over- and underflows as the library's does, NaN and the
 * infinities pass through, and softplus stays finite where exp(x)
 * overflows (log(exp(100) + 1) is 100: the fused kernel computes it as
 * max(x, 0) + log1p(exp(-|x|)); the unfused one materializes exp(x)). */
START_TEST(test_special_values)
{
    static const float vals[] = {-INFINITY, -1e4f, -200, -104.5f, -103, -90, -87.5f, -20, -1, -1e-3f,
                                 -0.0f, 0, 1e-7f, 0.5f, 1, 20, 80, 88.5f, 88.75f, 89.5f, 100, 1e4f,
                                 INFINITY, NAN};
    static const struct {
        const char *src;
        double (*ref)(double);
        int unfused;
    } fns[] = {{"y = log(exp(x) + 1);", r1_softplus, 0}, {"y = log(1 + exp(x));", r1_softplus, 0},
               {"y = exp(x);", r1_exp, 1}, {"y = sigmoid(x);", r1_sigmoid, 1}};
    th_env *env = th_get();
    const size_t rows = 2, cols = 40, n = rows * cols, nv = sizeof vals / sizeof vals[0];
    float hx[2 * 40], got[2 * 40];
    for (size_t i = 0; i < n; i++)
        hx[i] = vals[(i * 7) % nv]; /* every value in a vector chunk and in the tail */
    cl_mem x = th_upload(hx, sizeof hx), y = th_alloc(sizeof got);
    const oclf_expr_decl in = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    const oclf_expr_arg a = {{x, 0, 0}, 0};
    const oclf_buf ob = {y, 0, 0};
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        oclf_expr *e = NULL;
        TH_OK(oclf_expr_compile(env->ctx, fns[f].src, &in, 1, &out, 1, &e));
        for (int v = 0; v < 3; v++) {
            oclf_choice ch = th_choice(v == 2 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED);
            oclf_params_set(&ch.params, "VEC", v == 0 ? 16 : 1);
            if (v == 2 && !fns[f].unfused)
                continue;
            TH_OK(oclf_expr_run(e, env->queue, rows, cols, &a, &ob, 0, 0, &ch, 0, NULL, NULL));
            th_download(y, got, sizeof got);
            for (size_t i = 0; i < n; i++) {
                const double want = (float)fns[f].ref((double)hx[i]);
                const int ok = isnan(want) ? isnan(got[i])
                               : isinf(want) ? got[i] == want
                                             : fabs(got[i] - want) <= 1e-5 + 1e-5 * fabs(want);
                ck_assert_msg(ok, "%s, path %d: x = %g gave %g, want %g", fns[f].src, v, (double)hx[i],
                              (double)got[i], want);
            }
        }
        oclf_expr_release(e);
    }
    clReleaseMemObject(x), clReleaseMemObject(y);
}
END_TEST

/* erf against the header's promise: within 1e-7 relative for normal
 * |x| < 1, 1e-7 absolute beyond, through the vector code (VEC 16 and 4:
 * whole chunks), the scalar code (VEC 1) and the unfused kernel. Every
 * 31st float from 2^-12 to 1, every 4099th below it, every 61st from 1 to
 * 8, each with both signs, and every float within 4096 of two points where
 * an earlier vector polynomial reached 1.3e-7 and 1.4e-7. */
static size_t erf_points(float *x, size_t cap)
{
    const uint32_t one = 0x3f800000u, eight = 0x41000000u, small = 0x39800000u, tiny = 0x00800000u;
    size_t n = 0;
#define PUT(b)                                                     \
    do {                                                           \
        uint32_t b_ = (b);                                         \
        float v_;                                                  \
        memcpy(&v_, &b_, sizeof v_);                               \
        if (n + 2 <= cap)                                          \
            x[n++] = v_, x[n++] = -v_;                             \
    } while (0)
    for (uint32_t b = tiny; b < small; b += 4099)
        PUT(b);
    for (uint32_t b = small; b < one; b += 31)
        PUT(b);
    for (uint32_t b = one; b < eight; b += 61)
        PUT(b);
    static const float worst[] = {0.5572461486f, 0.505f};
    for (size_t w = 0; w < 2; w++) {
        uint32_t c;
        memcpy(&c, &worst[w], sizeof c);
        for (uint32_t b = c - 4096; b < c + 4096; b++)
            PUT(b);
    }
#undef PUT
    return n;
}

START_TEST(test_erf_bound)
{
    th_env *env = th_get();
    const size_t cols = 4096, cap = 8u << 20;
    float *hx = malloc(cap * sizeof *hx);
    ck_assert_ptr_nonnull(hx);
    size_t n = erf_points(hx, cap);
    ck_assert_uint_lt(n, cap);
    const size_t rows = (n + cols - 1) / cols;
    for (size_t i = n; i < rows * cols; i++)
        hx[i] = 0.5f;
    float *got = malloc(rows * cols * sizeof *got);
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++)
        want[i] = erf((double)hx[i]);
    cl_mem x = th_upload(hx, rows * cols * sizeof *hx), y = th_alloc(rows * cols * sizeof *got);
    const oclf_expr_decl in = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "y = erf(x);", &in, 1, &out, 1, &e));
    const oclf_expr_arg a = {{x, 0, 0}, 0};
    const oclf_buf ob = {y, 0, 0};
    static const struct {
        oclf_path path;
        int vec;
    } forms[] = {{OCLF_PATH_FUSED, 16}, {OCLF_PATH_FUSED, 4}, {OCLF_PATH_FUSED, 1}, {OCLF_PATH_UNFUSED, 16}};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        oclf_choice ch = th_choice(forms[f].path);
        oclf_params_set(&ch.params, "VEC", forms[f].vec);
        TH_OK(oclf_expr_run(e, env->queue, rows, cols, &a, &ob, 0, 0, &ch, 0, NULL, NULL));
        th_download(y, got, rows * cols * sizeof *got);
        double worst = 0, worst_x = 0;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            const double err = fabs(got[i] - want[i]) / (fabs(hx[i]) < 1 ? fabs(want[i]) : 1.0);
            if (err > worst)
                worst = err, worst_x = hx[i];
            bad += !(err <= 1e-7);
        }
        ck_assert_msg(bad == 0, "erf, path %d VEC %d: %zu of %zu beyond 1e-7, worst %.3g at x = %.10g",
                      (int)forms[f].path, forms[f].vec, bad, n, worst, worst_x);
    }
    oclf_expr_release(e);
    clReleaseMemObject(x), clReleaseMemObject(y);
    free(hx), free(got), free(want);
}
END_TEST

/* Runs softplus-like `src` on 8 x 64 under `ctx`, checks it against
 * log(exp(x) + add) and returns how many kernels it enqueued. */
static uint64_t run_counting(oclf_context *ctx, const char *src, double add, const oclf_choice *ch)
{
    th_env *env = th_get();
    const size_t rows = 8, cols = 64, n = rows * cols;
    const oclf_expr_decl in = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(ctx, src, &in, 1, &out, 1, &e));
    float *hx = th_random(OCLF_F32, n, -3, 3), *got = malloc(n * sizeof *got);
    cl_mem x = th_upload(hx, n * 4), y = th_alloc(n * 4);
    oclf_context_stats before = OCLF_CONTEXT_STATS_INIT, after = OCLF_CONTEXT_STATS_INIT;
    TH_OK(oclf_context_get_stats(ctx, &before));
    const oclf_expr_arg a = {{x, 0, 0}, 0};
    const oclf_buf ob = {y, 0, 0};
    ck_assert_int_eq(oclf_expr_run(e, env->queue, rows, cols, &a, &ob, 0, 0, ch, 0, NULL, NULL),
                     OCLF_SUCCESS);
    TH_OK(oclf_context_get_stats(ctx, &after));
    th_download(y, got, n * 4);
    double ref[8 * 64];
    for (size_t i = 0; i < n; i++)
        ref[i] = log(exp((double)hx[i]) + add);
    ck_assert_uint_eq(oclf_ref_compare(OCLF_F32, got, cols, ref, rows, cols, NULL, NULL), 0);
    clReleaseMemObject(x), clReleaseMemObject(y);
    free(hx), free(got);
    oclf_expr_release(e);
    return after.kernels_enqueued - before.kernels_enqueued;
}

/* Tuning records for expressions: op "expr", keyed by rows, cols and the
 * form (oclf_expr_form_id: names and dtypes left out); a record applies to
 * its form only, and a caller's path still wins. */
START_TEST(test_tuning_record)
{
    th_env *env = th_get();
    const oclf_expr_decl x32 = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, y32 = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    const oclf_expr_decl u16 = {"u", OCLF_EXPR_MATRIX, OCLF_BF16}, v16 = {"v", OCLF_EXPR_MATRIX, OCLF_F16};
    uint64_t f1 = 0, f2 = 0, f3 = 0, f4 = 0;
    TH_OK(oclf_expr_form_id("y = log(exp(x) + 1);", &x32, 1, &y32, 1, &f1));
    TH_OK(oclf_expr_form_id("v = log(exp(u) + 1);", &u16, 1, &v16, 1, &f2));
    TH_OK(oclf_expr_form_id("y = log(exp(x) + 2);", &x32, 1, &y32, 1, &f3));
    ck_assert_uint_eq(f1, f2); /* names and dtypes do not matter */
    ck_assert_uint_ne(f1, f3);
    ck_assert_uint_lt(f1, UINT64_C(1) << 52);
    ck_assert_int_eq(oclf_expr_form_id("y = log(;", &x32, 1, &y32, 1, &f4), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "1:9:"));

    char path[] = "/tmp/oclf-expr-db-XXXXXX";
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    const char *type = oclf_context_device_type(env->ctx) == CL_DEVICE_TYPE_GPU ? "GPU" : "CPU";
    fprintf(f,
            "{\"format\": 1, \"records\": [{\"device\": {\"type\": \"%s\"}, \"op\": \"expr\", "
            "\"dtype\": \"f32\", \"shape\": {\"rows\": 8, \"cols\": 64, \"form\": %llu}, "
            "\"choice\": {\"path\": \"unfused\", \"params\": {\"VEC\": 2, \"WGS\": 16}}}]}\n",
            type, (unsigned long long)f1);
    fclose(f);
    oclf_context_options opt;
    oclf_context_options_init(&opt);
    opt.tuning_db = path;
    oclf_context *ctx = NULL;
    TH_OK(oclf_context_create(env->cl, env->device, &opt, &ctx));
    char text[4096];
    const uint64_t dims[3] = {8, 64, f1};
    TH_OK(oclf_tuning_explain(ctx, "expr", OCLF_F32, dims, 3, OCLF_PATH_AUTO, text, sizeof text));
    ck_assert_msg(strstr(text, "unfused") && strstr(text, "VEC=2"), "%s", text);
    /* softplus: the record's unfused path, a kernel per operation */
    ck_assert_uint_eq(run_counting(ctx, "y = log(exp(x) + 1);", 1, NULL), 3);
    /* another form: the record does not apply; fused */
    ck_assert_uint_eq(run_counting(ctx, "y = log(exp(x) + 2);", 2, NULL), 1);
    /* the caller's path wins over the record */
    const oclf_choice fused = th_choice(OCLF_PATH_FUSED);
    ck_assert_uint_eq(run_counting(ctx, "y = log(exp(x) + 1);", 1, &fused), 1);
    oclf_context_destroy(ctx);
    unlink(path);
}
END_TEST

/* A second context (what a second process sees: no programs in memory)
 * finds the program on disk under the same canonical form, whatever the
 * names; the first context built it once. */
START_TEST(test_reuse_across_contexts)
{
    th_env *env = th_get();
    char dir[] = "/tmp/oclf-expr-cache-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    oclf_context_options opt;
    oclf_context_options_init(&opt);
    opt.cache_dir = dir;
    opt.no_tuning_db = 1;
    oclf_context *a = NULL, *b = NULL;
    TH_OK(oclf_context_create(env->cl, env->device, &opt, &a));
    TH_OK(oclf_context_create(env->cl, env->device, &opt, &b));
    const oclf_expr_decl x = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, y = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    const oclf_expr_decl p = {"p", OCLF_EXPR_MATRIX, OCLF_F32}, q = {"q", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e1 = NULL, *e2 = NULL;
    oclf_context_stats sa = OCLF_CONTEXT_STATS_INIT, sb = OCLF_CONTEXT_STATS_INIT;
    TH_OK(oclf_expr_compile(a, "y = sqrt(abs(x)) * 3;", &x, 1, &y, 1, &e1));
    TH_OK(oclf_expr_compile(b, "q = sqrt(abs(p)) * 3;", &p, 1, &q, 1, &e2));
    TH_OK(oclf_context_get_stats(a, &sa));
    TH_OK(oclf_context_get_stats(b, &sb));
    ck_assert_uint_eq(sa.programs_compiled, 1);
    ck_assert_uint_eq(sb.programs_compiled, 0);
    ck_assert_uint_eq(sb.programs_from_disk, 1);
    oclf_expr_release(e1), oclf_expr_release(e2);
    oclf_context_destroy(a), oclf_context_destroy(b);
    /* Clean up the cache folder's files. */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The declaration limits, with their sentences. */
START_TEST(test_declaration_limits)
{
    th_env *env = th_get();
    oclf_expr_decl in[17], out[9];
    char names[26][8];
    for (int i = 0; i < 26; i++)
        snprintf(names[i], sizeof names[i], "n%d", i);
    for (int i = 0; i < 17; i++)
        in[i] = (oclf_expr_decl){names[i], OCLF_EXPR_MATRIX, OCLF_F32};
    for (int j = 0; j < 9; j++)
        out[j] = (oclf_expr_decl){names[17 + j], OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "n17 = n0;", in, 17, out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "1:1: more than 16 inputs", ck_assert_ptr_null(e));
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "n17 = n0;", in, 16, out, 9, &e),
                   OCLF_INVALID_ARGUMENT, "1:1: more than 8 outputs", ck_assert_ptr_null(e));
    /* 16 inputs and 8 outputs are within the limits. */
    char src[512];
    size_t n = 0;
    for (int j = 0; j < 8; j++)
        n += (size_t)snprintf(src + n, sizeof src - n, "n%d = n%d + n%d;\n", 17 + j, 2 * j, 2 * j + 1);
    TH_OK(oclf_expr_compile(env->ctx, src, in, 16, out, 8, &e));
    oclf_expr_release(e);
    /* Names: 31 characters, not 32. */
    const char *n31 = "abcdefghijklmnopqrstuvwxyz01234", *n32 = "abcdefghijklmnopqrstuvwxyz012345";
    oclf_expr_decl d31 = {n31, OCLF_EXPR_MATRIX, OCLF_F32}, d32 = {n32, OCLF_EXPR_MATRIX, OCLF_F32};
    snprintf(src, sizeof src, "n17 = %s;", n31);
    TH_OK(oclf_expr_compile(env->ctx, src, &d31, 1, out, 1, &e));
    oclf_expr_release(e);
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "n17 = n0;", &d32, 1, out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "not an identifier of up to 31", ck_assert_ptr_null(e));
    snprintf(src, sizeof src, "n17 = n0;\n  %s = 1;", n32);
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, src, in, 1, out, 1, &e), OCLF_INVALID_ARGUMENT,
                   "2:3: name longer than 31", ck_assert_ptr_null(e));
}
END_TEST

static Suite *expr_suite(void)
{
    Suite *s = suite_create("expr");
    TCase *t = tcase_create("kernels");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_cases, 0, (int)NCASES * 3);
    tcase_add_loop_test(t, test_aligned_build, 0, 3);
    tcase_add_test(t, test_shapes);
    tcase_add_test(t, test_special_values);
    tcase_add_test(t, test_philox_kat);
    tcase_add_test(t, test_dropout_exact);
    tcase_add_test(t, test_kernel_wgs_limit);
    tcase_add_test(t, test_dropout_statistics);
    tcase_add_test(t, test_reuse_and_canonical);
    suite_add_tcase(s, t);
    TCase *acc = tcase_create("accuracy");
    tcase_set_timeout(acc, 0);
    tcase_add_test(acc, test_erf_bound);
    tcase_add_test(acc, test_in_place);
    tcase_add_test(acc, test_exp_log_bound);
    suite_add_tcase(s, acc);
    TCase *r = tcase_create("reuse");
    tcase_set_timeout(r, 0);
    tcase_add_test(r, test_tuning_record);
    tcase_add_test(r, test_reuse_across_contexts);
    suite_add_tcase(s, r);
    TCase *b = tcase_create("errors");
    tcase_add_test(b, test_source_errors);
    tcase_add_test(b, test_comments);
    tcase_add_test(b, test_run_errors);
    tcase_add_test(b, test_declaration_limits);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(expr_suite()); }
