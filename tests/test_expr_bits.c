/*
 * Bit matrices in elementwise expressions (OCLF_EXPR_BITS): bits outputs
 * and inputs against an fp64 reference written here per case, on the fused
 * path with every VEC and several WGS and ROWS, on the unfused path, with
 * word tails, strided and offset operands, 0 and 1 rows, in place; dropout's
 * backward regenerating the forward's mask bit for bit on both paths, with
 * the mask also written as bits; finite differences of two backwards; bad
 * declarations and arguments with their statuses, outputs untouched.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): fewer cases. */

enum { X, M, B, NIN };

/* x: [rows, cols] of the case's dtype; m: a bit matrix; b: a row vector. */
static const oclf_expr_decl decl_in[NIN] = {
    {"x", OCLF_EXPR_MATRIX, OCLF_F32},
    {"m", OCLF_EXPR_BITS, OCLF_F32},
    {"b", OCLF_EXPR_ROW, OCLF_F32},
};

/* Written to every word and byte a run may not touch. */
#define SENTINEL_WORD 0xa5a5a5a5u
#define SENTINEL_BYTE 0x5a

/* One case: outputs y (a matrix of the case's dtype) and mo (bits), either
 * or both; the reference gives y and mo's value (nonzero sets the bit). */
typedef struct bcase {
    const char *src;
    int has_y, has_mo;
    void (*ref)(double x, double m, double b, double *y, double *mo);
} bcase;

static void r_relu_mask(double x, double m, double b, double *y, double *mo)
{
    (void)m, (void)b;
    *y = x < 0 ? 0 : x;
    *mo = x > 0;
}
static void r_masked(double x, double m, double b, double *y, double *mo)
{
    (void)b, (void)mo;
    *y = m != 0 ? x : 0;
}
static void r_mul_not(double x, double m, double b, double *y, double *mo)
{
    (void)b;
    *y = x * m;
    *mo = m == 0;
}
static void r_copy_bits(double x, double m, double b, double *y, double *mo)
{
    (void)x, (void)b, (void)y;
    *mo = m;
}
static void r_matrix_bits(double x, double m, double b, double *y, double *mo)
{
    (void)m, (void)b, (void)y;
    *mo = x;
}
static void r_bias(double x, double m, double b, double *y, double *mo)
{
    *y = (x + b < 0 ? 0 : x + b) * m;
    *mo = x + b > 0;
}

static const bcase cases[] = {
    {"y = relu(x); mo = x > 0;", 1, 1, r_relu_mask},
    {"y = m ? x : 0;", 1, 0, r_masked},
    {"y = x * m; mo = m == 0;", 1, 1, r_mul_not},
    {"mo = m;", 0, 1, r_copy_bits},
    {"mo = x;", 0, 1, r_matrix_bits},
    {"t = x + b; y = relu(t) * m; mo = t > 0;", 1, 1, r_bias},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

static size_t words_of(size_t cols) { return (cols + 31) / 32; }

static int bit_at(const uint32_t *w, size_t o, size_t s, size_t r, size_t c)
{
    return (int)(w[o + r * s + c / 32] >> (c % 32) & 1u);
}

/* The buffers of one case at one shape: x strided and offset (every 7th
 * element exactly 0), m strided and offset with random bits past cols
 * (which no run may read as elements), b packed, y and mo strided and
 * offset over sentinels. */
typedef struct bufs {
    oclf_dtype dt;
    size_t rows, cols, words;
    size_t xo, xs, mo, ms, yo, ys, oo, os;
    size_t nx, nm, ny, no;
    void *hx, *hb;
    uint32_t *hm;
    cl_mem x, m, b, y, out;
} bufs;

static void bufs_make(bufs *u, oclf_dtype dt, size_t rows, size_t cols)
{
    memset(u, 0, sizeof *u);
    u->dt = dt, u->rows = rows, u->cols = cols, u->words = words_of(cols);
    const size_t r1 = rows ? rows : 1, el = oclf_dtype_size(dt);
    u->xo = 2, u->xs = cols + 3;
    u->mo = 1, u->ms = u->words + 1;
    u->yo = 1, u->ys = cols + 1;
    u->oo = 3, u->os = u->words + 2;
    u->nx = u->xo + u->xs * r1;
    u->nm = u->mo + u->ms * r1;
    u->ny = u->yo + u->ys * r1;
    u->no = u->oo + u->os * r1;
    u->hx = th_random(dt, u->nx, -2, 2);
    for (size_t i = 0; i < u->nx; i += 7)
        oclf_ref_set(dt, u->hx, i, 0.0f);
    u->hb = th_random(dt, cols, -1, 1);
    u->hm = malloc(u->nm * sizeof *u->hm);
    for (size_t i = 0; i < u->nm; i++)
        u->hm[i] = (uint32_t)(th_uniform(0, 65536)) << 16 ^ (uint32_t)th_uniform(0, 65536);
    u->x = th_upload(u->hx, u->nx * el);
    u->m = th_upload(u->hm, u->nm * 4);
    u->b = th_upload(u->hb, cols * el);
    unsigned char *yfill = malloc(u->ny * el);
    memset(yfill, SENTINEL_BYTE, u->ny * el);
    u->y = th_upload(yfill, u->ny * el);
    free(yfill);
    uint32_t *ofill = malloc(u->no * 4);
    for (size_t i = 0; i < u->no; i++)
        ofill[i] = SENTINEL_WORD;
    u->out = th_upload(ofill, u->no * 4);
    free(ofill);
}

static void bufs_free(bufs *u)
{
    free(u->hx), free(u->hb), free(u->hm);
    clReleaseMemObject(u->x), clReleaseMemObject(u->m), clReleaseMemObject(u->b);
    clReleaseMemObject(u->y), clReleaseMemObject(u->out);
}

static oclf_expr *compile_case(const bcase *c, oclf_dtype dt)
{
    oclf_expr_decl in[NIN], out[2];
    memcpy(in, decl_in, sizeof in);
    in[X].dtype = in[B].dtype = dt;
    unsigned n = 0;
    if (c->has_y)
        out[n++] = (oclf_expr_decl){"y", OCLF_EXPR_MATRIX, dt};
    if (c->has_mo)
        out[n++] = (oclf_expr_decl){"mo", OCLF_EXPR_BITS, OCLF_F32};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(th_get()->ctx, c->src, in, NIN, out, n, &e));
    return e;
}

/* Runs case c on u's buffers and checks every output against the
 * reference, and every word and element outside them untouched. */
static void run_case(const bcase *c, oclf_expr *e, bufs *u, const oclf_choice *ch,
                     const char *label)
{
    th_env *env = th_get();
    oclf_expr_arg a[NIN];
    memset(a, 0, sizeof a);
    a[X].buf = (oclf_buf){u->x, u->xo, u->xs};
    a[M].buf = (oclf_buf){u->m, u->mo, u->ms};
    a[B].buf = (oclf_buf){u->b, 0, 0};
    oclf_buf ob[2];
    unsigned n = 0;
    if (c->has_y)
        ob[n++] = (oclf_buf){u->y, u->yo, u->ys};
    if (c->has_mo)
        ob[n++] = (oclf_buf){u->out, u->oo, u->os};
    TH_OK(oclf_expr_run(e, env->queue, u->rows, u->cols, a, ob, 7, 0, ch, 0, NULL, NULL));
    const size_t el = oclf_dtype_size(u->dt), rows = u->rows, cols = u->cols;
    unsigned char *gy = malloc(u->ny * el);
    uint32_t *go = malloc(u->no * 4);
    th_download(u->y, gy, u->ny * el);
    th_download(u->out, go, u->no * 4);
    double *ry = malloc((rows * cols + 1) * sizeof *ry);
    unsigned char *rbit = calloc(rows * cols + 1, 1);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            double yv = 0, mv = 0;
            c->ref(oclf_ref_get(u->dt, u->hx, u->xo + r * u->xs + j),
                   bit_at(u->hm, u->mo, u->ms, r, j), oclf_ref_get(u->dt, u->hb, j), &yv, &mv);
            ry[r * cols + j] = yv;
            rbit[r * cols + j] = mv != 0;
        }
    if (c->has_y) {
        size_t first = 0;
        double maxerr = 0;
        const size_t bad =
            oclf_ref_compare(u->dt, gy + u->yo * el, u->ys, ry, rows, cols, &first, &maxerr);
        ck_assert_msg(bad == 0, "%s [%s] %s %zux%zu: y: %zu bad, first %zu, max err %g", c->src,
                      label, oclf_dtype_name(u->dt), rows, cols, bad, first, maxerr);
    }
    /* y's padding and every element of y when the case has no y. */
    for (size_t i = 0; i < u->ny; i++) {
        const size_t r = i < u->yo ? 0 : (i - u->yo) / u->ys, j = i < u->yo ? 0 : (i - u->yo) % u->ys;
        const int inside = c->has_y && i >= u->yo && r < rows && j < cols;
        for (size_t byte = 0; byte < el && !inside; byte++)
            ck_assert_msg(gy[i * el + byte] == SENTINEL_BYTE, "%s [%s]: y element %zu written",
                          c->src, label, i);
    }
    /* mo: every bit of a row's words (0 past cols), sentinels elsewhere. */
    for (size_t i = 0; i < u->no; i++) {
        const size_t r = i < u->oo ? 0 : (i - u->oo) / u->os, w = i < u->oo ? 0 : (i - u->oo) % u->os;
        if (c->has_mo && i >= u->oo && r < rows && w < u->words) {
            uint32_t want = 0;
            for (size_t k = 0; k < 32 && w * 32 + k < cols; k++)
                want |= (uint32_t)rbit[r * cols + w * 32 + k] << k;
            ck_assert_msg(go[i] == want, "%s [%s] %s %zux%zu: mo row %zu word %zu: %08x != %08x",
                          c->src, label, oclf_dtype_name(u->dt), rows, cols, r, w, go[i], want);
        } else {
            ck_assert_msg(go[i] == SENTINEL_WORD, "%s [%s]: mo word %zu written (%08x)", c->src,
                          label, i, go[i]);
        }
    }
    free(gy), free(go), free(ry), free(rbit);
}

static void reset_outputs(bufs *u)
{
    const size_t el = oclf_dtype_size(u->dt);
    unsigned char *yfill = malloc(u->ny * el);
    memset(yfill, SENTINEL_BYTE, u->ny * el);
    th_env *env = th_get();
    clEnqueueWriteBuffer(env->queue, u->y, CL_TRUE, 0, u->ny * el, yfill, 0, NULL, NULL);
    free(yfill);
    uint32_t *ofill = malloc(u->no * 4);
    for (size_t i = 0; i < u->no; i++)
        ofill[i] = SENTINEL_WORD;
    clEnqueueWriteBuffer(env->queue, u->out, CL_TRUE, 0, u->no * 4, ofill, 0, NULL, NULL);
    free(ofill);
}

/* Each case in each dtype: cols 1, 31, 32, 33, 100, 1000 by rows 0, 1, 5;
 * fused with every VEC and three (WGS, ROWS) pairs, unfused with three VEC,
 * and the device's defaults (no choice: the GPU-defaults run takes the GPU
 * class's there). The quick run keeps VEC 1 and 16 and the defaults. */
START_TEST(test_cases)
{
    const bcase *c = &cases[_i % NCASES];
    const oclf_dtype dt = dtypes[_i / NCASES];
    oclf_expr *e = compile_case(c, dt);
    static const size_t colss[] = {1, 31, 32, 33, 100, 1000}, rowss[] = {0, 1, 5};
    static const int vecs[] = {1, 2, 4, 8, 16};
    static const int wr[][2] = {{64, 1}, {16, 3}, {1, 2}};
    for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++)
        for (size_t ri = 0; ri < sizeof rowss / sizeof *rowss; ri++) {
            bufs u;
            bufs_make(&u, dt, rowss[ri], colss[ci]);
            char label[64];
            for (int v = 0; v < 5; v++) {
                if (th_quick() && vecs[v] != 1 && vecs[v] != 16)
                    continue;
                for (int k = 0; k < 3; k++) {
                    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
                    oclf_params_set(&ch.params, "VEC", vecs[v]);
                    oclf_params_set(&ch.params, "WGS", wr[k][0]);
                    oclf_params_set(&ch.params, "ROWS", wr[k][1]);
                    snprintf(label, sizeof label, "fused VEC %d WGS %d ROWS %d", vecs[v], wr[k][0],
                             wr[k][1]);
                    run_case(c, e, &u, &ch, label);
                    reset_outputs(&u);
                }
                if (v % 2 == 0) {
                    oclf_choice ch = th_choice(OCLF_PATH_UNFUSED);
                    oclf_params_set(&ch.params, "VEC", vecs[v]);
                    oclf_params_set(&ch.params, "WGS", 16);
                    snprintf(label, sizeof label, "unfused VEC %d", vecs[v]);
                    run_case(c, e, &u, &ch, label);
                    reset_outputs(&u);
                }
            }
            run_case(c, e, &u, NULL, "defaults");
            reset_outputs(&u);
            oclf_choice unf = th_choice(OCLF_PATH_UNFUSED);
            run_case(c, e, &u, &unf, "unfused defaults");
            bufs_free(&u);
        }
    oclf_expr_release(e);
}
END_TEST

/* NaN is nonzero: its bit is set (and a comparison with NaN is 0). */
START_TEST(test_nan_bits)
{
    th_env *env = th_get();
    const size_t cols = 40;
    const oclf_expr_decl in = {"x", OCLF_EXPR_MATRIX, OCLF_F32};
    const oclf_expr_decl out[2] = {{"a", OCLF_EXPR_BITS, OCLF_F32}, {"g", OCLF_EXPR_BITS, OCLF_F32}};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "a = x; g = x > 0;", &in, 1, out, 2, &e));
    float hx[40];
    for (size_t i = 0; i < cols; i++)
        hx[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? 0.0f : -1.0f;
    cl_mem x = th_upload(hx, sizeof hx), ma = th_alloc(8), mg = th_alloc(8);
    const oclf_expr_arg a = {{x, 0, 0}, 0};
    for (int path = 1; path <= 2; path++) {
        oclf_choice ch = th_choice((oclf_path)path);
        const oclf_buf ob[2] = {{ma, 0, 0}, {mg, 0, 0}};
        TH_OK(oclf_expr_run(e, env->queue, 1, cols, &a, ob, 0, 0, &ch, 0, NULL, NULL));
        uint32_t ga[2], gg[2];
        th_download(ma, ga, 8);
        th_download(mg, gg, 8);
        for (size_t c = 0; c < cols; c++) {
            ck_assert_int_eq((int)(ga[c / 32] >> (c % 32) & 1u), c % 3 != 1);
            ck_assert_int_eq((int)(gg[c / 32] >> (c % 32) & 1u), 0);
        }
        ck_assert_uint_eq(ga[1] >> 8, 0);
    }
    clReleaseMemObject(x), clReleaseMemObject(ma), clReleaseMemObject(mg);
    oclf_expr_release(e);
}
END_TEST

/* In place: a bits output on the same words of a bits input, and a matrix
 * output on its input while expr_pack still reads that input (the unfused
 * path copies it aside first). */
START_TEST(test_in_place)
{
    th_env *env = th_get();
    const size_t rows = 3, cols = 70, words = 3, stride = 4;
    const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"m", OCLF_EXPR_BITS, OCLF_F32}};
    const oclf_expr_decl out[2] = {{"y", OCLF_EXPR_MATRIX, OCLF_F32}, {"mo", OCLF_EXPR_BITS, OCLF_F32}};
    oclf_expr *flip = NULL, *keep = NULL;
    /* mo in place on m: flips every bit; y in place on x, which expr_pack
     * reads for mo. */
    TH_OK(oclf_expr_compile(env->ctx, "y = x * m; mo = m == 0;", in, 2, out, 2, &flip));
    TH_OK(oclf_expr_compile(env->ctx, "y = x * 2; mo = x;", in, 1, out, 2, &keep));
    float *hx = th_random(OCLF_F32, rows * cols, -2, 2);
    for (size_t i = 0; i < rows * cols; i += 5)
        hx[i] = 0.0f;
    uint32_t hm[12];
    for (size_t i = 0; i < 12; i++)
        hm[i] = 0x9e3779b9u * (uint32_t)(i + 1);
    for (int path = 1; path <= 2; path++)
        for (int vec = 1; vec <= 16; vec *= 4) {
            oclf_choice ch = th_choice((oclf_path)path);
            oclf_params_set(&ch.params, "VEC", vec);
            cl_mem x = th_upload(hx, rows * cols * 4), m = th_upload(hm, sizeof hm);
            oclf_expr_arg a[2] = {{{x, 0, 0}, 0}, {{m, 1, stride}, 0}};
            oclf_buf ob[2] = {{x, 0, 0}, {m, 1, stride}};
            TH_OK(oclf_expr_run(flip, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL));
            float gx[210];
            uint32_t gm[12];
            th_download(x, gx, sizeof gx);
            th_download(m, gm, sizeof gm);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) {
                    const int bit = bit_at(hm, 1, stride, r, c);
                    ck_assert_msg(gx[r * cols + c] == (bit ? hx[r * cols + c] : 0.0f) ||
                                      (!bit && gx[r * cols + c] == 0.0f),
                                  "path %d VEC %d: y(%zu, %zu)", path, vec, r, c);
                    ck_assert_int_eq(bit_at(gm, 1, stride, r, c), !bit);
                }
            for (size_t r = 0; r < rows; r++) {
                ck_assert_uint_eq(gm[1 + r * stride + words - 1] >> (cols % 32), 0);
                if (r + 1 < rows) /* the word between rows */
                    ck_assert_uint_eq(gm[1 + r * stride + words], hm[1 + r * stride + words]);
            }
            ck_assert_uint_eq(gm[0], hm[0]);
            clReleaseMemObject(x), clReleaseMemObject(m);
            /* y = 2x in place on x while mo packs x's nonzeros. */
            x = th_upload(hx, rows * cols * 4);
            m = th_alloc(rows * words * 4);
            oclf_expr_arg a2[1] = {{{x, 0, 0}, 0}};
            oclf_buf ob2[2] = {{x, 0, 0}, {m, 0, 0}};
            TH_OK(oclf_expr_run(keep, env->queue, rows, cols, a2, ob2, 0, 0, &ch, 0, NULL, NULL));
            th_download(x, gx, sizeof gx);
            th_download(m, gm, rows * words * 4);
            for (size_t i = 0; i < rows * cols; i++) {
                ck_assert_msg(gx[i] == 2 * hx[i], "path %d VEC %d: y[%zu]", path, vec, i);
                ck_assert_int_eq(bit_at(gm, 0, words, i / cols, i % cols), hx[i] != 0.0f);
            }
            clReleaseMemObject(x), clReleaseMemObject(m);
        }
    free(hx);
    oclf_expr_release(flip), oclf_expr_release(keep);
}
END_TEST

/* ---- dropout's backward ---------------------------------------------- */

/* One run of `src` over rows x cols: inputs x (dt, strided by cols + 2), b
 * (dt row vector) and p (scalar); outputs as declared, y strided by cols + 1,
 * bits packed. */
typedef struct dio {
    oclf_dtype dt;
    size_t rows, cols;
    void *hx, *hb;
} dio;

static void run_dropout_expr(const dio *d, const char *src, const oclf_expr_decl *outs, unsigned nout,
                             const void *hx, float p, uint64_t seed, uint64_t offset,
                             const oclf_choice *ch, void *got_y, uint32_t *got_m)
{
    th_env *env = th_get();
    const oclf_expr_decl in[3] = {{"x", OCLF_EXPR_MATRIX, d->dt}, {"b", OCLF_EXPR_ROW, d->dt},
                                  {"p", OCLF_EXPR_SCALAR, OCLF_F32}};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(env->ctx, src, in, 3, outs, nout, &e));
    const size_t el = oclf_dtype_size(d->dt), rows = d->rows, cols = d->cols;
    const size_t words = words_of(cols);
    cl_mem x = th_upload(hx, rows * (cols + 2) * el), b = th_upload(d->hb, cols * el);
    cl_mem y = th_alloc(rows * (cols + 1) * el), m = th_alloc(rows * words * 4);
    oclf_expr_arg a[3] = {{{x, 0, cols + 2}, 0}, {{b, 0, 0}, 0}, {{NULL, 0, 0}, p}};
    oclf_buf ob[2];
    for (unsigned j = 0; j < nout; j++)
        ob[j] = outs[j].kind == OCLF_EXPR_BITS ? (oclf_buf){m, 0, 0} : (oclf_buf){y, 0, cols + 1};
    TH_OK(oclf_expr_run(e, env->queue, rows, cols, a, ob, seed, offset, ch, 0, NULL, NULL));
    if (got_y)
        th_download(y, got_y, rows * (cols + 1) * el);
    if (got_m)
        th_download(m, got_m, rows * words * 4);
    clReleaseMemObject(x), clReleaseMemObject(b), clReleaseMemObject(y), clReleaseMemObject(m);
    oclf_expr_release(e);
}

/* Forward y = dropout(x + b, p), then backward dx = dropout(dy, p) with the
 * same seed, offset and shape: dx is exactly 0 where y was dropped and
 * exactly dy / (1 - p) in fp32, rounded once to the dtype, where kept; the
 * kept set is the Philox reference's. The mask as bits from the forward
 * (m = dropout(1, p) != 0, a run of its own) and from the forward's own
 * draw (k = dropout(1, p); y = k != 0 ? (x + b) / (1 - p) : 0; m = k != 0,
 * whose y equals the forward's bit for bit) agrees with dx. Every pairing
 * of the forward's and the backward's paths. */
START_TEST(test_dropout_backward)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const size_t cols = _i / 3 ? 77 : 33, rows = 5;
    const float p = 0.3f;
    const uint64_t seed = 0xfeedface12345678ull, offset = 1000003;
    const size_t el = oclf_dtype_size(dt), ys = cols + 1, words = words_of(cols);
    dio d = {dt, rows, cols, NULL, NULL};
    /* x + b in [0.5, 3]: never 0, so a zero y is a dropped element. */
    void *hx = th_random(dt, rows * (cols + 2), 0.25f, 2);
    void *hdy = th_random(dt, rows * (cols + 2), -2, 2);
    for (size_t i = 0; i < rows * (cols + 2); i += 11)
        oclf_ref_set(dt, hdy, i, 1.0f); /* dy = 1 somewhere: dx = 1 / (1 - p) exactly */
    d.hb = th_random(dt, cols, 0.25f, 1);
    const oclf_expr_decl oy = {"y", OCLF_EXPR_MATRIX, dt}, om = {"m", OCLF_EXPR_BITS, OCLF_F32};
    const oclf_expr_decl both[2] = {oy, om};
    unsigned char *y = malloc(rows * ys * el), *dx = malloc(rows * ys * el),
                  *y2 = malloc(rows * ys * el);
    uint32_t *m1 = malloc(words * rows * 4), *m2 = malloc(words * rows * 4);
    for (int fp = 1; fp <= 2; fp++)
        for (int bp = 1; bp <= 2; bp++) {
            oclf_choice cf = th_choice((oclf_path)fp), cb = th_choice((oclf_path)bp);
            run_dropout_expr(&d, "y = dropout(x + b, p);", &oy, 1, hx, p, seed, offset, &cf, y, NULL);
            run_dropout_expr(&d, "dx = dropout(x, p);", &(oclf_expr_decl){"dx", OCLF_EXPR_MATRIX, dt},
                             1, hdy, p, seed, offset, &cb, dx, NULL);
            run_dropout_expr(&d, "m = dropout(1, p) != 0;", &om, 1, hx, p, seed, offset, &cb, NULL,
                             m1);
            run_dropout_expr(&d, "k = dropout(1, p); y = k != 0 ? (x + b) / (1 - p) : 0; m = k != 0;",
                             both, 2, hx, p, seed, offset, &cf, y2, m2);
            size_t kept = 0;
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) {
                    const float fy = oclf_ref_get(dt, y, r * ys + c);
                    const float fdx = oclf_ref_get(dt, dx, r * ys + c);
                    const float fdy = oclf_ref_get(dt, hdy, r * (cols + 2) + c);
                    const uint64_t n = r * cols + c + offset;
                    const int ref_kept = oclf_ref_dropout(1.0, p, seed, n, 0) != 0.0;
                    const int y_kept = fy != 0.0f;
                    ck_assert_msg(y_kept == ref_kept, "%s fwd %d: (%zu, %zu) kept %d, reference %d",
                                  oclf_dtype_name(dt), fp, r, c, y_kept, ref_kept);
                    if (y_kept) {
                        const float want = oclf_ref_round(dt, fdy / (1.0f - p));
                        ck_assert_msg(memcmp(&fdx, &want, sizeof want) == 0,
                                      "%s fwd %d bwd %d: dx(%zu, %zu) = %a, want %a (dy %a)",
                                      oclf_dtype_name(dt), fp, bp, r, c, (double)fdx,
                                      (double)want, (double)fdy);
                        kept++;
                    } else {
                        ck_assert_msg(fdx == 0.0f, "%s fwd %d bwd %d: dx(%zu, %zu) = %g, dropped",
                                      oclf_dtype_name(dt), fp, bp, r, c, (double)fdx);
                    }
                    ck_assert_int_eq(bit_at(m1, 0, words, r, c), y_kept);
                    ck_assert_int_eq(bit_at(m2, 0, words, r, c), y_kept);
                    ck_assert_msg(memcmp((char *)y2 + (r * ys + c) * el, (char *)y + (r * ys + c) * el,
                                         el) == 0,
                                  "%s fwd %d: y from the shared draw differs at (%zu, %zu)",
                                  oclf_dtype_name(dt), fp, r, c);
                }
            /* About 70% kept: neither all nor none. */
            ck_assert(kept > rows * cols / 2 && kept < rows * cols);
            for (size_t r = 0; r < rows; r++)
                ck_assert_uint_eq(m1[r * words + words - 1] >> (cols % 32), 0);
        }
    free(hx), free(hdy), free(d.hb), free(y), free(dx), free(y2), free(m1), free(m2);
}
END_TEST

/* Finite differences: for L = sum(dy * f(x)), dL/dx is the backward's dx.
 * relu's backward from its stored mask (dx = m ? dy : 0) and dropout's
 * from the regenerated one, on a small shape, against central differences
 * of the forward runs (x kept 0.05 away from relu's kink). */
START_TEST(test_finite_differences)
{
    th_env *env = th_get();
    const size_t rows = 3, cols = 37, n = rows * cols, words = words_of(cols);
    const float h = 1.0f / 64; /* exact steps: x +- h is exact for x below 2 */
    float *x = th_random(OCLF_F32, n, -2, 2), *dy = th_random(OCLF_F32, n, -1, 1);
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 0.05f)
            x[i] = 0.5f;
    float *xp = malloc(n * 4), *xm = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        xp[i] = x[i] + h, xm[i] = x[i] - h;
    const oclf_expr_decl in1 = {"x", OCLF_EXPR_MATRIX, OCLF_F32};
    const oclf_expr_decl in_p[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"p", OCLF_EXPR_SCALAR, OCLF_F32}};
    const oclf_expr_decl fo[2] = {{"y", OCLF_EXPR_MATRIX, OCLF_F32}, {"m", OCLF_EXPR_BITS, OCLF_F32}};
    const oclf_expr_decl bin[2] = {{"m", OCLF_EXPR_BITS, OCLF_F32}, {"dy", OCLF_EXPR_MATRIX, OCLF_F32}};
    const oclf_expr_decl bout = {"dx", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *fwd = NULL, *bwd = NULL, *dfwd = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "y = relu(x); m = x > 0;", &in1, 1, fo, 2, &fwd));
    TH_OK(oclf_expr_compile(env->ctx, "dx = m ? dy : 0;", bin, 2, &bout, 1, &bwd));
    TH_OK(oclf_expr_compile(env->ctx, "y = dropout(x, p);", in_p, 2, fo, 1, &dfwd));
    for (int path = 1; path <= 2; path++) {
        oclf_choice ch = th_choice((oclf_path)path);
        cl_mem bx = th_upload(x, n * 4), bxp = th_upload(xp, n * 4), bxm = th_upload(xm, n * 4);
        cl_mem bdy = th_upload(dy, n * 4), by = th_alloc(n * 4), bm = th_alloc(words * rows * 4);
        cl_mem byp = th_alloc(n * 4), bym = th_alloc(n * 4), bdx = th_alloc(n * 4);
        /* relu: forward with its mask, backward from the mask */
        oclf_expr_arg a = {{bx, 0, 0}, 0};
        oclf_buf ob[2] = {{by, 0, 0}, {bm, 0, 0}};
        TH_OK(oclf_expr_run(fwd, env->queue, rows, cols, &a, ob, 0, 0, &ch, 0, NULL, NULL));
        oclf_expr_arg ba[2] = {{{bm, 0, 0}, 0}, {{bdy, 0, 0}, 0}};
        const oclf_buf bo = {bdx, 0, 0};
        TH_OK(oclf_expr_run(bwd, env->queue, rows, cols, ba, &bo, 0, 0, &ch, 0, NULL, NULL));
        cl_mem scratch = th_alloc(words * rows * 4);
        oclf_expr_arg ap = {{bxp, 0, 0}, 0}, am = {{bxm, 0, 0}, 0};
        oclf_buf op[2] = {{byp, 0, 0}, {scratch, 0, 0}}, om[2] = {{bym, 0, 0}, {scratch, 0, 0}};
        TH_OK(oclf_expr_run(fwd, env->queue, rows, cols, &ap, op, 0, 0, &ch, 0, NULL, NULL));
        TH_OK(oclf_expr_run(fwd, env->queue, rows, cols, &am, om, 0, 0, &ch, 0, NULL, NULL));
        float *gdx = malloc(n * 4), *gp = malloc(n * 4), *gm = malloc(n * 4);
        th_download(bdx, gdx, n * 4), th_download(byp, gp, n * 4), th_download(bym, gm, n * 4);
        for (size_t i = 0; i < n; i++) {
            const double fd = (double)dy[i] * ((double)gp[i] - (double)gm[i]) / (2.0 * h);
            ck_assert_msg(fabs(fd - gdx[i]) <= 1e-5 * (1 + fabs(fd)), "relu path %d: %zu: %g vs %g",
                          path, i, fd, (double)gdx[i]);
        }
        /* dropout: the backward is the forward applied to dy */
        const float p = 0.4f;
        oclf_expr_arg dpa[2] = {{{bxp, 0, 0}, 0}, {{NULL, 0, 0}, p}};
        oclf_expr_arg dma[2] = {{{bxm, 0, 0}, 0}, {{NULL, 0, 0}, p}};
        oclf_expr_arg dba[2] = {{{bdy, 0, 0}, 0}, {{NULL, 0, 0}, p}};
        TH_OK(oclf_expr_run(dfwd, env->queue, rows, cols, dpa, op, 5, 9, &ch, 0, NULL, NULL));
        TH_OK(oclf_expr_run(dfwd, env->queue, rows, cols, dma, om, 5, 9, &ch, 0, NULL, NULL));
        const oclf_buf dxo = {bdx, 0, 0};
        TH_OK(oclf_expr_run(dfwd, env->queue, rows, cols, dba, &dxo, 5, 9, &ch, 0, NULL, NULL));
        th_download(bdx, gdx, n * 4), th_download(byp, gp, n * 4), th_download(bym, gm, n * 4);
        for (size_t i = 0; i < n; i++) {
            const double fd = (double)dy[i] * ((double)gp[i] - (double)gm[i]) / (2.0 * h);
            ck_assert_msg(fabs(fd - gdx[i]) <= 1e-5 * (1 + fabs(fd)), "dropout path %d: %zu: %g vs %g",
                          path, i, fd, (double)gdx[i]);
        }
        free(gdx), free(gp), free(gm);
        cl_mem all[] = {bx, bxp, bxm, bdy, by, bm, byp, bym, bdx, scratch};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            clReleaseMemObject(all[i]);
    }
    free(x), free(dy), free(xp), free(xm);
    oclf_expr_release(fwd), oclf_expr_release(bwd), oclf_expr_release(dfwd);
}
END_TEST

/* ---- declarations and arguments -------------------------------------- */

/* Bits and matrices are different forms and canonical forms. */
START_TEST(test_forms)
{
    th_env *env = th_get();
    const oclf_expr_decl xm = {"x", OCLF_EXPR_MATRIX, OCLF_F32}, xb = {"x", OCLF_EXPR_BITS, OCLF_F32};
    const oclf_expr_decl ym = {"y", OCLF_EXPR_MATRIX, OCLF_F32}, yb = {"y", OCLF_EXPR_BITS, OCLF_F32};
    const oclf_expr_decl yb16 = {"y", OCLF_EXPR_BITS, OCLF_F16};
    uint64_t f[5];
    TH_OK(oclf_expr_form_id("y = x > 0;", &xm, 1, &ym, 1, &f[0]));
    TH_OK(oclf_expr_form_id("y = x > 0;", &xm, 1, &yb, 1, &f[1]));
    TH_OK(oclf_expr_form_id("y = x > 0;", &xb, 1, &ym, 1, &f[2]));
    TH_OK(oclf_expr_form_id("y = x > 0;", &xb, 1, &yb, 1, &f[3]));
    TH_OK(oclf_expr_form_id("y = x > 0;", &xm, 1, &yb16, 1, &f[4]));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < i; j++)
            ck_assert_msg(f[i] != f[j], "forms %d and %d are equal", i, j);
    ck_assert(f[4] == f[1]); /* a bits dtype is ignored */
    oclf_expr *a = NULL, *b = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "y = x > 0;", &xb, 1, &yb, 1, &a));
    TH_OK(oclf_expr_compile(env->ctx, "y = x > 0;", &xm, 1, &yb16, 1, &b));
    ck_assert_ptr_nonnull(strstr(oclf_expr_canonical(a), "in:b;"));
    ck_assert_ptr_nonnull(strstr(oclf_expr_canonical(a), "out:n2.bits"));
    ck_assert_ptr_nonnull(strstr(oclf_expr_canonical(b), "in:m.f32;"));
    ck_assert_ptr_nonnull(strstr(oclf_expr_canonical(b), "out:n2.bits"));
    oclf_expr_release(a), oclf_expr_release(b);
}
END_TEST

START_TEST(test_bad_declarations)
{
    th_env *env = th_get();
    const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"m", OCLF_EXPR_BITS, OCLF_F32}};
    oclf_expr_decl out = {"y", OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    /* A bit matrix is no dropout p. */
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "y = dropout(x, m);", in, 2, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "1:16: dropout p must be a number or a scalar input",
                   ck_assert_ptr_null(e));
    /* Outputs are matrices or bits, nothing else; kinds past BITS are bad. */
    out.kind = OCLF_EXPR_ROW;
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "y = x;", in, 2, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "output 'y': bad kind 1", ck_assert_ptr_null(e));
    out.kind = (oclf_expr_kind)5;
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "y = x;", in, 2, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "output 'y': bad kind 5", ck_assert_ptr_null(e));
    oclf_expr_decl bad_in[2] = {in[0], {"m", (oclf_expr_kind)5, OCLF_F32}};
    out.kind = OCLF_EXPR_BITS;
    TH_EXPECT_FAIL(oclf_expr_compile(env->ctx, "y = x;", bad_in, 2, &out, 1, &e),
                   OCLF_INVALID_ARGUMENT, "input 'm': bad kind 5", ck_assert_ptr_null(e));
    /* A bits dtype is ignored, even an invalid one. */
    out.dtype = (oclf_dtype)99;
    TH_OK(oclf_expr_compile(env->ctx, "y = x;", in, 2, &out, 1, &e));
    oclf_expr_release(e);
}
END_TEST

/* Each refused run: its status and sentence, and no output touched. */
START_TEST(test_bad_runs)
{
    th_env *env = th_get();
    const size_t rows = 4, cols = 40, words = 2;
    const oclf_expr_decl in[2] = {{"x", OCLF_EXPR_MATRIX, OCLF_F32}, {"m", OCLF_EXPR_BITS, OCLF_F32}};
    const oclf_expr_decl out[2] = {{"y", OCLF_EXPR_MATRIX, OCLF_F32}, {"mo", OCLF_EXPR_BITS, OCLF_F32}};
    oclf_expr *e = NULL;
    TH_OK(oclf_expr_compile(env->ctx, "y = x * m; mo = x > 0;", in, 2, out, 2, &e));
    float *hx = th_random(OCLF_F32, rows * cols, -1, 1);
    float yfill[160];
    uint32_t ofill[16];
    for (size_t i = 0; i < 160; i++)
        yfill[i] = 7.0f;
    for (size_t i = 0; i < 16; i++)
        ofill[i] = SENTINEL_WORD;
    /* m as large as y, so that y over m fails on the overlap, not the size */
    cl_mem x = th_upload(hx, rows * cols * 4), m = th_upload(yfill, sizeof yfill);
    cl_mem y = th_upload(yfill, sizeof yfill), mo = th_upload(ofill, sizeof ofill);
    cl_mem small = th_upload(ofill, rows * words * 4 - 4);
#define UNTOUCHED                                                                      \
    do {                                                                               \
        float gy_[160];                                                                \
        uint32_t go_[16];                                                              \
        th_download(y, gy_, sizeof gy_);                                               \
        th_download(mo, go_, sizeof go_);                                              \
        ck_assert_int_eq(memcmp(gy_, yfill, sizeof gy_), 0);                           \
        ck_assert_int_eq(memcmp(go_, ofill, sizeof go_), 0);                           \
    } while (0)
    oclf_expr_arg a[2] = {{{x, 0, 0}, 0}, {{m, 0, 0}, 0}};
    oclf_buf ob[2] = {{y, 0, 0}, {small, 0, 0}};
    for (int path = 1; path <= 2; path++) {
        oclf_choice ch = th_choice((oclf_path)path);
        /* A bits output's buffer one word too small. */
        ob[1] = (oclf_buf){small, 0, 0};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "output 1: 4 rows x 2 cols", UNTOUCHED);
        /* Offset in words past the end. */
        ob[1] = (oclf_buf){mo, 9, 0};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "output 1", UNTOUCHED);
        /* A row stride below ceil(cols / 32) words. */
        ob[1] = (oclf_buf){mo, 0, 1};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "output 1: row stride 1 is less than the width 2",
                       UNTOUCHED);
        /* A bits input too small. */
        a[1].buf = (oclf_buf){small, 0, 0};
        ob[1] = (oclf_buf){mo, 0, 0};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "input 1: 4 rows x 2 cols", UNTOUCHED);
        a[1].buf = (oclf_buf){m, 0, 0};
        /* A bits output over a matrix input's bytes, and a matrix output
         * over a bits input's words: only bits on the same bits is in place. */
        ob[1] = (oclf_buf){x, 0, 0};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "output 1 overlaps input 0", UNTOUCHED);
        ob[1] = (oclf_buf){mo, 0, 0};
        ob[0] = (oclf_buf){m, 0, 0};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "output 0 overlaps input 1", UNTOUCHED);
        ob[0] = (oclf_buf){y, 0, 0};
        /* The bits output on the bits input shifted by a word. */
        a[1].buf = (oclf_buf){mo, 1, 0};
        TH_EXPECT_FAIL(oclf_expr_run(e, env->queue, rows, cols, a, ob, 0, 0, &ch, 0, NULL, NULL),
                       OCLF_INVALID_ARGUMENT, "output 1 overlaps input 1", UNTOUCHED);
        a[1].buf = (oclf_buf){m, 0, 0};
    }
    /* 0 rows: nothing written. */
    ob[1] = (oclf_buf){mo, 0, 0};
    TH_OK(oclf_expr_run(e, env->queue, 0, cols, a, ob, 0, 0, NULL, 0, NULL, NULL));
    UNTOUCHED;
#undef UNTOUCHED
    clReleaseMemObject(x), clReleaseMemObject(m), clReleaseMemObject(y);
    clReleaseMemObject(mo), clReleaseMemObject(small);
    free(hx);
    oclf_expr_release(e);
}
END_TEST

static Suite *expr_bits_suite(void)
{
    Suite *s = suite_create("expr_bits");
    TCase *t = tcase_create("kernels");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_cases, 0, (int)NCASES * 3);
    tcase_add_test(t, test_nan_bits);
    tcase_add_test(t, test_in_place);
    suite_add_tcase(s, t);
    TCase *d = tcase_create("dropout");
    tcase_set_timeout(d, 0);
    tcase_add_loop_test(d, test_dropout_backward, 0, 6);
    tcase_add_test(d, test_finite_differences);
    suite_add_tcase(s, d);
    TCase *b = tcase_create("errors");
    tcase_set_timeout(b, 0);
    tcase_add_test(b, test_forms);
    tcase_add_test(b, test_bad_declarations);
    tcase_add_test(b, test_bad_runs);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(expr_bits_suite()); }
