/*
 * Linear + cross-entropy against the fp64 reference: every dtype, both
 * paths, chunks of 1, 3 and more tokens than there are (a short last chunk
 * and a single one), max_temp shrinking the chunk, every reduction with
 * upstream gradients, smoothing, softcap and z-loss, ignored rows (some,
 * all), strided rows with offsets, each gradient alone, 0 and 1 tokens,
 * fused against unfused, run to run bit equality, a finite-difference check
 * of both gradients, and the bad arguments (nothing written).
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

enum { IGN_SOME, IGN_ALL, IGN_NONE };
#define SENTINEL (-7.0f)

typedef struct lce_case {
    oclf_dtype dtype;
    size_t t, h, v;
    size_t pad, offset; /* every 2-D operand's row padding and element offset */
    int reduction;
    float ls, cap, zl;
    int upstream, lse, want_gx, want_gw, ignore;
    oclf_path path;
    int64_t chunk;      /* 0: the default */
    size_t max_temp;
} lce_case;

typedef struct lce_out {
    float *loss, *lse;
    void *gx;     /* the whole grad_x buffer */
    float *gw;    /* the whole grad_w buffer */
    size_t gx_n, gw_n;
    oclf_linear_cross_entropy_info info;
} lce_out;

static void free_out(lce_out *o) { free(o->loss), free(o->lse), free(o->gx), free(o->gw); }

static int close_to(double got, double want, double atol, double rtol)
{
    if (isnan(want))
        return isnan(got);
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Tolerance of a gradient element, relative to the largest of the matrix:
 * its sums cancel, and each of its terms was rounded to the dtype. */
static double grad_tol(oclf_dtype dt)
{
    return dt == OCLF_F32 ? 2e-5 : dt == OCLF_F16 ? 4e-3 : 3e-2;
}

static void check_grad(const char *what, const lce_case *c, const double *want, size_t rows,
                       size_t cols, oclf_dtype dt, const void *got, size_t off, size_t stride)
{
    double big = 1e-6;
    for (size_t i = 0; i < rows * cols; i++)
        big = fmax(big, fabs(want[i]));
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < cols; k++) {
            const double g = oclf_ref_get(dt, got, off + r * stride + k), w = want[r * cols + k];
            ck_assert_msg(fabs(g - w) <= grad_tol(c->dtype) * big,
                          "%s %s %zux%zux%zu chunk %lld path %d: %s[%zu, %zu] = %.9g, "
                          "reference %.9g (largest %.3g)",
                          what, oclf_dtype_name(c->dtype), c->t, c->h, c->v, (long long)c->chunk,
                          (int)c->path, what, r, k, g, w, big);
        }
}

static lce_out run_case(const lce_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), T = c->t, H = c->h, V = c->v;
    const size_t hs = H + c->pad; /* every row stride */
    const size_t nx = c->offset + T * hs + 1, nw = c->offset + V * hs + 1;
    th_seed(T * 131 + H * 17 + V * 7 + (size_t)c->reduction * 3 + (size_t)dt);
    void *x = th_random(dt, nx, -1.0f, 1.0f);
    const float a = 3.0f / sqrtf((float)H);
    void *w = th_random(dt, nw, -a, a);
    int64_t *t = malloc((T + 2) * sizeof *t);
    for (size_t r = 0; r < T; r++) {
        t[r + 1] = (int64_t)(th_uniform(0.0f, 1.0f) * (float)V) % (int64_t)V;
        if (c->ignore == IGN_ALL || (c->ignore == IGN_SOME && r % 3 == 1))
            t[r + 1] = -100;
    }
    float *up = malloc((T + 2) * sizeof *up);
    for (size_t r = 0; r < T + 2; r++)
        up[r] = th_uniform(0.5f, 1.5f);
    lce_out o;
    memset(&o, 0, sizeof o);
    o.loss = malloc((T + 3) * 4), o.lse = malloc((T + 3) * 4);
    for (size_t r = 0; r < T + 3; r++)
        o.loss[r] = o.lse[r] = SENTINEL;
    o.gx_n = nx, o.gw_n = nw;
    o.gx = malloc(nx * es), o.gw = malloc(nw * 4);
    for (size_t i = 0; i < nx; i++)
        oclf_ref_set(dt, o.gx, i, SENTINEL);
    for (size_t i = 0; i < nw; i++)
        o.gw[i] = SENTINEL;

    cl_mem mx = th_upload(x, nx * es), mw = th_upload(w, nw * es);
    cl_mem mt = th_upload(t, (T + 2) * 8), mu = th_upload(up, (T + 2) * 4);
    cl_mem ml = th_upload(o.loss, (T + 3) * 4), mlse = th_upload(o.lse, (T + 3) * 4);
    cl_mem mgx = th_upload(o.gx, nx * es), mgw = th_upload(o.gw, nw * 4);
    const size_t st = c->pad ? hs : 0;
    oclf_buf bx = {mx, c->offset, st}, bw = {mw, c->offset, st}, bt = {mt, 1, 0};
    oclf_buf bl = {ml, 1, 0}, blse = {mlse, 2, 0}, bu = {mu, 1, 0};
    oclf_buf bgx = {mgx, c->offset, st}, bgw = {mgw, c->offset, st};
    oclf_cross_entropy_options opt = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    opt.reduction = c->reduction;
    opt.label_smoothing = c->ls;
    opt.softcap = c->cap;
    opt.z_loss = c->zl;
    opt.grad_output = c->upstream ? &bu : NULL;
    opt.lse = c->lse ? &blse : NULL;
    oclf_choice ch = th_choice(c->path);
    if (c->chunk)
        oclf_params_set(&ch.params, "CHUNK", c->chunk);
    opt.max_temp_bytes = c->max_temp;
    o.info = (oclf_linear_cross_entropy_info)OCLF_LINEAR_CROSS_ENTROPY_INFO_INIT;
    opt.info = &o.info;
    cl_event ev = NULL;
    TH_OK(oclf_linear_cross_entropy(e->ctx, e->queue, dt, T, H, V, bx, bw, bt, bl,
                                    c->want_gx ? &bgx : NULL, c->want_gw ? &bgw : NULL, &opt,
                                    &ch, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    th_download(ml, o.loss, (T + 3) * 4);
    th_download(mlse, o.lse, (T + 3) * 4);
    th_download(mgx, o.gx, nx * es);
    th_download(mgw, o.gw, nw * 4);

    if (T) {
        /* what the call says it used */
        ck_assert_uint_ge(o.info.chunk_tokens, 1);
        ck_assert_uint_eq(o.info.chunks, (T + o.info.chunk_tokens - 1) / o.info.chunk_tokens);
        if (c->max_temp)
            ck_assert_uint_le(o.info.temp_bytes, c->max_temp);
        if (c->path == OCLF_PATH_UNFUSED)
            ck_assert_uint_eq(o.info.chunks, 1);
        else if (c->chunk && !c->max_temp)
            ck_assert_uint_eq(o.info.chunk_tokens, (size_t)c->chunk < T ? (size_t)c->chunk : T);
    }

    double *wl = malloc((T + 1) * sizeof *wl), *wlse = malloc((T + 1) * sizeof *wlse), wred = 0;
    double *wgx = malloc((T * H + 1) * sizeof *wgx), *wgw = malloc((V * H + 1) * sizeof *wgw);
    ck_assert_int_eq(oclf_ref_linear_cross_entropy(
                         dt, T, H, V, (char *)x + c->offset * es, c->pad ? hs : H,
                         (char *)w + c->offset * es, c->pad ? hs : H, t + 1, -100, c->reduction,
                         c->ls, c->cap, c->zl, c->upstream ? up + 1 : NULL, wl, wlse, &wred, wgx,
                         wgw),
                     0);
    const char *dn = oclf_dtype_name(dt);
    const size_t nl = c->reduction == OCLF_REDUCTION_NONE ? T : 1;
    for (size_t r = 0; r < T + 3; r++) {
        const int in_loss = T && r >= 1 && r < 1 + nl;
        if (!in_loss)
            ck_assert_msg(o.loss[r] == SENTINEL, "loss element %zu written", r);
        else if (c->reduction == OCLF_REDUCTION_NONE)
            ck_assert_msg(close_to(o.loss[r], wl[r - 1], 1e-4, 1e-4),
                          "%s %zux%zux%zu: loss row %zu %.9g, reference %.9g", dn, T, H, V, r - 1,
                          (double)o.loss[r], wl[r - 1]);
        else
            ck_assert_msg(close_to(o.loss[r], wred, 1e-4, 1e-4),
                          "%s %zux%zux%zu reduction %d: loss %.9g, reference %.9g", dn, T, H, V,
                          c->reduction, (double)o.loss[r], wred);
        const int in_lse = c->lse && r >= 2 && r < 2 + T;
        if (in_lse)
            ck_assert_msg(close_to(o.lse[r], wlse[r - 2], 1e-4, 1e-5),
                          "%s: lse row %zu %.9g, reference %.9g", dn, r - 2, (double)o.lse[r],
                          wlse[r - 2]);
        else
            ck_assert_msg(o.lse[r] == SENTINEL, "lse element %zu written", r);
    }
    /* The gradients where asked, sentinels everywhere else. */
    const size_t ld = c->pad ? hs : H;
    if (c->want_gx && T)
        check_grad("grad_x", c, wgx, T, H, dt, o.gx, c->offset, ld);
    if (c->want_gw && T) {
        /* grad_w is f32 */
        check_grad("grad_w", c, wgw, V, H, OCLF_F32, o.gw, c->offset, ld);
    }
    for (size_t i = 0; i < nx; i++) {
        const int inside = c->want_gx && T && i >= c->offset && i < c->offset + T * ld &&
                           (i - c->offset) % ld < H;
        if (!inside)
            ck_assert_msg(oclf_ref_get(dt, o.gx, i) == SENTINEL, "grad_x element %zu written",
                          i);
    }
    for (size_t i = 0; i < nw; i++) {
        const int inside = c->want_gw && T && i >= c->offset && i < c->offset + V * ld &&
                           (i - c->offset) % ld < H;
        if (!inside)
            ck_assert_msg(o.gw[i] == SENTINEL, "grad_w element %zu written", i);
    }
    free(x), free(w), free(t), free(up), free(wl), free(wlse), free(wgx), free(wgw);
    cl_mem mems[] = {mx, mw, mt, mu, ml, mlse, mgx, mgw};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        clReleaseMemObject(mems[i]);
    return o;
}

static lce_case base_case(oclf_dtype dt)
{
    lce_case c;
    memset(&c, 0, sizeof c);
    c.dtype = dt;
    c.t = 7, c.h = 24, c.v = 77;
    c.reduction = OCLF_REDUCTION_MEAN;
    c.want_gx = c.want_gw = 1;
    c.path = OCLF_PATH_FUSED;
    c.ignore = IGN_SOME;
    return c;
}

/* Every dtype x path x chunk: 3 (a short last chunk), 1, 64 (one chunk). */
START_TEST(test_matrix)
{
    static const int64_t chunks[] = {3, 1, 64};
    lce_case c = base_case(dtypes[_i % 3]);
    c.chunk = chunks[(_i / 3) % 3];
    c.path = _i / 9 ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED;
    c.upstream = 1;
    c.lse = 1;
    lce_out o = run_case(&c);
    free_out(&o);
}
END_TEST

/* Reductions, options, strides, offsets and odd shapes. */
START_TEST(test_features)
{
    lce_case c = base_case(dtypes[_i % 3]);
    switch (_i / 3) {
    case 0:
        c.reduction = OCLF_REDUCTION_NONE, c.upstream = 1, c.chunk = 4;
        break;
    case 1:
        c.reduction = OCLF_REDUCTION_SUM, c.upstream = 1, c.ls = 0.1f, c.chunk = 2;
        break;
    case 2:
        c.cap = 3.0f, c.zl = 1e-3f, c.ls = 0.05f, c.chunk = 5, c.lse = 1;
        break;
    case 3:
        c.pad = 5, c.offset = 3, c.chunk = 3;
        break;
    case 4:
        c.t = 37, c.h = 33, c.v = 301, c.chunk = 16, c.ignore = IGN_NONE;
        break;
    default:
        c.t = 1, c.h = 1, c.v = 1;
        break;
    }
    lce_out o = run_case(&c);
    free_out(&o);
}
END_TEST

/* Each gradient alone, neither, 0 tokens. */
START_TEST(test_outputs)
{
    lce_case c = base_case(OCLF_F32);
    c.chunk = 3;
    switch (_i) {
    case 0:
        c.want_gw = 0;
        break;
    case 1:
        c.want_gx = 0;
        break;
    case 2:
        c.want_gx = c.want_gw = 0, c.lse = 1;
        break;
    default:
        c.t = 0;
        break;
    }
    lce_out o = run_case(&c);
    free_out(&o);
}
END_TEST

/* Every target ignored: the mean is NaN, both gradients zero. */
START_TEST(test_all_ignored)
{
    lce_case c = base_case(dtypes[_i]);
    c.ignore = IGN_ALL;
    c.chunk = 3;
    lce_out o = run_case(&c);
    ck_assert(isnan(o.loss[1]));
    for (size_t r = 0; r < c.t; r++)
        for (size_t k = 0; k < c.h; k++) {
            ck_assert(oclf_ref_get(c.dtype, o.gx, r * c.h + k) == 0.0f);
            ck_assert(o.gw[r * c.h + k] == 0.0f);
        }
    free_out(&o);
}
END_TEST

/* max_temp shrinks the chunk and bounds what the call holds; the unfused
 * path holds every token's logits and more. */
START_TEST(test_max_temp)
{
    lce_case c = base_case(dtypes[_i]);
    c.t = 20;
    c.path = OCLF_PATH_UNFUSED;
    lce_out u = run_case(&c);
    c.path = OCLF_PATH_FUSED;
    c.chunk = 64;
    const size_t es = oclf_dtype_size(c.dtype);
    const size_t per = c.v * es + c.v * 4 + (es < 4 ? c.h * 4 : 0);
    c.max_temp = c.t * 4 + 8 + 3 * per + per / 2; /* room for 3 tokens */
    lce_out f = run_case(&c);
    ck_assert_uint_eq(f.info.chunk_tokens, 3);
    ck_assert_uint_eq(f.info.chunks, 7);
    ck_assert_uint_lt(f.info.temp_bytes * 6, u.info.temp_bytes);
    free_out(&u), free_out(&f);
}
END_TEST

/* Without a record or CHUNK: the chunk whose logits are about the size of
 * x (tokens / ceil(vocab / hidden), rounded up to a power of two), never
 * under 256 tokens, where the products' rows would starve a GEMM, and one
 * chunk of every token where that would make fewer than four. */
START_TEST(test_default_chunk)
{
    static const struct {
        size_t t, h, v, chunk;
    } cases[] = {
        {1100, 8, 40, 256},  /* wants 220: the floor, five chunks */
        {2000, 8, 40, 512},  /* wants 400: four chunks */
        {600, 8, 40, 600},   /* three chunks of 256 would save too little */
        {100, 8, 40, 100},   /* fewer tokens than the floor */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lce_case c = base_case(OCLF_F32);
        c.t = cases[i].t, c.h = cases[i].h, c.v = cases[i].v;
        lce_out o = run_case(&c);
        ck_assert_uint_eq(o.info.chunk_tokens, cases[i].chunk);
        ck_assert_uint_eq(o.info.chunks, (c.t + cases[i].chunk - 1) / cases[i].chunk);
        free_out(&o);
    }
}
END_TEST

/* Fused against unfused, and a run against itself bit for bit. */
START_TEST(test_fused_unfused)
{
    lce_case c = base_case(dtypes[_i]);
    c.t = 29, c.chunk = 8, c.upstream = 1, c.reduction = OCLF_REDUCTION_SUM;
    lce_out f1 = run_case(&c), f2 = run_case(&c);
    c.path = OCLF_PATH_UNFUSED;
    lce_out u = run_case(&c);
    const size_t es = oclf_dtype_size(c.dtype);
    ck_assert(memcmp(f1.gx, f2.gx, f1.gx_n * es) == 0);
    ck_assert(memcmp(f1.gw, f2.gw, f1.gw_n * 4) == 0);
    ck_assert(memcmp(f1.loss, f2.loss, 4 * 4) == 0);
    ck_assert_msg(close_to(f1.loss[1], u.loss[1], 1e-4, 1e-5), "fused %.9g unfused %.9g",
                  (double)f1.loss[1], (double)u.loss[1]);
    double big = 1e-6;
    for (size_t i = 0; i < f1.gw_n; i++)
        big = fmax(big, fabs(u.gw[i] == SENTINEL ? 0 : u.gw[i]));
    for (size_t i = 0; i < f1.gw_n; i++)
        ck_assert_msg(fabs(f1.gw[i] - u.gw[i]) <= grad_tol(c.dtype) * big,
                      "grad_w element %zu: fused %.9g unfused %.9g", i, (double)f1.gw[i],
                      (double)u.gw[i]);
    free_out(&f1), free_out(&f2), free_out(&u);
}
END_TEST

/* d(sum loss)/dx and /dW by central differences of the call itself (f32,
 * smoothing, softcap and z-loss on). */
static double loss_of(cl_mem mx, cl_mem mw, cl_mem mt, size_t T, size_t H, size_t V,
                      const oclf_cross_entropy_options *o)
{
    th_env *e = th_get();
    cl_mem ml = th_alloc(4);
    oclf_buf bx = {mx, 0, 0}, bw = {mw, 0, 0}, bt = {mt, 0, 0}, bl = {ml, 0, 0};
    const oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    TH_OK(oclf_linear_cross_entropy(e->ctx, e->queue, OCLF_F32, T, H, V, bx, bw, bt, bl, NULL,
                                    NULL, o, &ch, 0, NULL, NULL));
    float l = 0;
    th_download(ml, &l, 4);
    clReleaseMemObject(ml);
    return l;
}

START_TEST(test_finite_difference)
{
    th_env *e = th_get();
    const size_t T = 5, H = 6, V = 11;
    th_seed(99);
    float *x = th_random(OCLF_F32, T * H, -1.0f, 1.0f), *w = th_random(OCLF_F32, V * H, -1, 1);
    int64_t t[5] = {3, -100, 0, 10, 7};
    cl_mem mx = th_upload(x, T * H * 4), mw = th_upload(w, V * H * 4), mt = th_upload(t, 40);
    cl_mem mgx = th_alloc(T * H * 4), mgw = th_alloc(V * H * 4), ml = th_alloc(4);
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    o.reduction = OCLF_REDUCTION_SUM;
    o.label_smoothing = 0.1f, o.softcap = 4.0f, o.z_loss = 0.01f;
    oclf_buf bx = {mx, 0, 0}, bw = {mw, 0, 0}, bt = {mt, 0, 0}, bl = {ml, 0, 0};
    oclf_buf bgx = {mgx, 0, 0}, bgw = {mgw, 0, 0};
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "CHUNK", 2);
    TH_OK(oclf_linear_cross_entropy(e->ctx, e->queue, OCLF_F32, T, H, V, bx, bw, bt, bl, &bgx,
                                    &bgw, &o, &ch, 0, NULL, NULL));
    float gx[30], gw[66];
    th_download(mgx, gx, sizeof gx);
    th_download(mgw, gw, sizeof gw);
    const float h = 1e-2f;
    for (int which = 0; which < 2; which++) {
        float *p = which ? w : x;
        cl_mem m = which ? mw : mx;
        const size_t n = which ? V * H : T * H;
        for (size_t i = 0; i < n; i += 3) {
            const float keep = p[i];
            p[i] = keep + h;
            clEnqueueWriteBuffer(e->queue, m, CL_TRUE, 0, n * 4, p, 0, NULL, NULL);
            const double lp = loss_of(mx, mw, mt, T, H, V, &o);
            p[i] = keep - h;
            clEnqueueWriteBuffer(e->queue, m, CL_TRUE, 0, n * 4, p, 0, NULL, NULL);
            const double lm = loss_of(mx, mw, mt, T, H, V, &o);
            p[i] = keep;
            clEnqueueWriteBuffer(e->queue, m, CL_TRUE, 0, n * 4, p, 0, NULL, NULL);
            const double fd = (lp - lm) / (2 * h), got = which ? gw[i] : gx[i];
            ck_assert_msg(fabs(fd - got) <= 2e-3 + 2e-2 * fabs(fd),
                          "%s[%zu]: %.6g, finite difference %.6g", which ? "grad_w" : "grad_x",
                          i, got, fd);
        }
    }
    free(x), free(w);
    cl_mem mems[] = {mx, mw, mt, mgx, mgw, ml};
    for (size_t i = 0; i < 6; i++)
        clReleaseMemObject(mems[i]);
}
END_TEST

/* ---- bad arguments: a status, a sentence, nothing written ---------------- */

typedef struct bad_env {
    size_t t, h, v;
    cl_mem x, w, tg, badtg, loss, gx, gw, small;
} bad_env;

static bad_env bad_setup(void)
{
    bad_env b = {6, 8, 10, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    th_seed(5);
    float *x = th_random(OCLF_F32, b.t * b.h, -1, 1), *w = th_random(OCLF_F32, b.v * b.h, -1, 1);
    int64_t t[6] = {1, 2, 3, -100, 4, 5}, bt[6] = {1, 2, 3, -100, 10, 5};
    b.x = th_upload(x, b.t * b.h * 4), b.w = th_upload(w, b.v * b.h * 4);
    b.tg = th_upload(t, sizeof t), b.badtg = th_upload(bt, sizeof bt);
    float s[80];
    for (int i = 0; i < 80; i++)
        s[i] = SENTINEL;
    b.loss = th_upload(s, 8 * 4), b.gx = th_upload(s, b.t * b.h * 4);
    b.gw = th_upload(s, b.v * b.h * 4), b.small = th_upload(s, 4);
    free(x), free(w);
    return b;
}

static void bad_untouched(const bad_env *b)
{
    float got[80];
    const struct {
        cl_mem m;
        size_t n;
    } outs[] = {{b->loss, 8}, {b->gx, b->t * b->h}, {b->gw, b->v * b->h}};
    for (int k = 0; k < 3; k++) {
        th_download(outs[k].m, got, outs[k].n * 4);
        for (size_t i = 0; i < outs[k].n; i++)
            ck_assert_msg(got[i] == SENTINEL, "output %d element %zu written", k, i);
    }
}

#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, bad_untouched(&bb))


/* The call with options->max_temp_bytes set to `mt` (opt copied). */
static oclf_status lce_call(oclf_context *ctx, cl_command_queue q, oclf_dtype dt, size_t t,
                            size_t h, size_t v, oclf_buf x, oclf_buf w, oclf_buf tg, oclf_buf l,
                            const oclf_buf *gx, const oclf_buf *gw,
                            const oclf_cross_entropy_options *opt, size_t mt,
                            const oclf_choice *ch)
{
    oclf_cross_entropy_options o;
    if (opt) {
        o = *opt;
        o.max_temp_bytes = mt;
    }
    return oclf_linear_cross_entropy(ctx, q, dt, t, h, v, x, w, tg, l, gx, gw, opt ? &o : NULL, ch,
                                     0, NULL, NULL);
}

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb = bad_setup();
    const size_t T = bb.t, H = bb.h, V = bb.v;
    oclf_buf X = {bb.x, 0, 0}, W = {bb.w, 0, 0}, Tg = {bb.tg, 0, 0}, L = {bb.loss, 0, 0};
    oclf_buf GX = {bb.gx, 0, 0}, GW = {bb.gw, 0, 0}, N = {NULL, 0, 0}, S = {bb.small, 0, 0};
    oclf_buf BT = {bb.badtg, 0, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    oclf_context *C = e->ctx;
    cl_command_queue Q = e->queue;
#define LCE(ctx, q, dt, t, h, v, x, w, tg, l, gx, gw, opt, mt, ch)                              \
    lce_call(ctx, q, dt, t, h, v, x, w, tg, l, gx, gw, opt, mt, ch)
    ck_assert_int_eq(LCE(NULL, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &o, 0, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(LCE(C, NULL, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, N, W, Tg, L, &GX, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "x");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, N, Tg, L, &GX, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "w");
    EXPECT(LCE(C, Q, OCLF_F32, T, 0, V, X, W, Tg, L, &GX, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "hidden");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, 0, X, W, Tg, L, &GX, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "vocab");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &S, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "grad_x");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &S, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "grad_w");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &X, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "overlaps");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GW, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "overlaps");
    oclf_buf GWonW = {bb.w, 0, 0};
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GWonW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "overlaps");
    EXPECT(LCE(C, Q, (oclf_dtype)7, T, H, V, X, W, Tg, L, &GX, &GW, &o, 0, NULL),
           OCLF_UNSUPPORTED, "dtype");
    oclf_cross_entropy_options g = o;
    g.compute_grad = 1;
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &g, 0, NULL),
           OCLF_INVALID_ARGUMENT, "compute_grad");
    g = o;
    g.reduction = 5;
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &g, 0, NULL),
           OCLF_INVALID_ARGUMENT, "reduction");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &o, 100, NULL),
           OCLF_INVALID_ARGUMENT, "max_temp");
    oclf_choice un = th_choice(OCLF_PATH_UNFUSED);
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &o, 500, &un),
           OCLF_OUT_OF_RESOURCES, "max_temp");
    oclf_choice zero = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&zero.params, "CHUNK", 0);
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, Tg, L, &GX, &GW, &o, 0, &zero),
           OCLF_INVALID_ARGUMENT, "CHUNK");
    /* a bad target, found on the device, named by its row */
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, BT, L, &GX, &GW, &o, 0, NULL),
           OCLF_INVALID_ARGUMENT, "row 4");
    EXPECT(LCE(C, Q, OCLF_F32, T, H, V, X, W, BT, L, &GX, &GW, &o, 0, &un),
           OCLF_INVALID_ARGUMENT, "row 4");
#undef LCE
    cl_mem mems[] = {bb.x, bb.w, bb.tg, bb.badtg, bb.loss, bb.gx, bb.gw, bb.small};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        clReleaseMemObject(mems[i]);
}
END_TEST

static Suite *loss_linear_suite(void)
{
    Suite *s = suite_create("loss_linear");
    TCase *t = tcase_create("linear_cross_entropy");
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, test_matrix, 0, 18);
    tcase_add_loop_test(t, test_features, 0, 18);
    tcase_add_loop_test(t, test_outputs, 0, 4);
    tcase_add_loop_test(t, test_all_ignored, 0, 3);
    tcase_add_loop_test(t, test_max_temp, 0, 3);
    tcase_add_test(t, test_default_chunk);
    tcase_add_loop_test(t, test_fused_unfused, 0, 3);
    tcase_add_test(t, test_finite_difference);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("bad_arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(loss_linear_suite()); }
