/*
 * The linear layer with quantized weights (oclf_linear_q) and the GGUF
 * rewrite (oclf_qweight_convert): hand-computed weights read back through
 * an identity x (bytes to outputs without the reference, so a misreading
 * shared by the reference and the kernels still shows), then every format
 * against the fp64 reference over the dequantized weight: INT8 per channel
 * (f32 and f16 scales) and in groups, INT4 with and without zero points,
 * Q8_0 and Q4_0 with negative and -0.0 block scales. Rows M = 0 to 128,
 * odd N, K of one group and of many, every activation dtype, strided rows
 * and offsets on every operand (the weight's bytes and scales too), every
 * prologue and epilogue, y in place on the residual, both paths and fused
 * against unfused, explicit kernel structures, non-finite scales, the
 * converted form against the original, and the bad arguments.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): fewer cases. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

/* A weight format as a call spells it. */
typedef struct qfmt {
    oclf_qformat format;
    unsigned group;
    oclf_dtype sdt; /* GGUF: not read, left at the zeroed struct's value */
    int zero;
} qfmt;

/* Q8_0 with group 32 and Q4_0 with group 0: both spellings the header allows. */
static const qfmt formats[] = {
    {OCLF_QFORMAT_INT8, 0, OCLF_F32, 0},   {OCLF_QFORMAT_INT8, 0, OCLF_F16, 0},
    {OCLF_QFORMAT_INT8, 32, OCLF_F16, 0},  {OCLF_QFORMAT_INT8, 64, OCLF_F16, 0},
    {OCLF_QFORMAT_INT8, 128, OCLF_F16, 0}, {OCLF_QFORMAT_INT4, 32, OCLF_F16, 0},
    {OCLF_QFORMAT_INT4, 32, OCLF_F16, 1},  {OCLF_QFORMAT_INT4, 64, OCLF_F16, 0},
    {OCLF_QFORMAT_INT4, 64, OCLF_F16, 1},  {OCLF_QFORMAT_INT4, 128, OCLF_F16, 0},
    {OCLF_QFORMAT_INT4, 128, OCLF_F16, 1}, {OCLF_QFORMAT_Q8_0, 32, OCLF_F32, 0},
    {OCLF_QFORMAT_Q4_0, 0, OCLF_F32, 0},
};
#define NFORMATS (int)(sizeof formats / sizeof *formats)
enum {
    F_INT8_G0_F32, F_INT8_G0_F16, F_INT8_G32, F_INT8_G64, F_INT8_G128, F_INT4_G32,
    F_INT4_G32_Z, F_INT4_G64, F_INT4_G64_Z, F_INT4_G128, F_INT4_G128_Z, F_Q8_0, F_Q4_0
};

static int is_gguf(const qfmt *f)
{
    return f->format == OCLF_QFORMAT_Q8_0 || f->format == OCLF_QFORMAT_Q4_0;
}

/* The K granularity: the group, a GGUF block, 1 for INT8 per channel. */
static size_t kgroup(const qfmt *f)
{
    return is_gguf(f) ? 32 : f->group ? f->group : 1;
}

static size_t q_row_bytes(const qfmt *f, size_t k)
{
    switch (f->format) {
    case OCLF_QFORMAT_INT8: return k;
    case OCLF_QFORMAT_INT4: return k / 2;
    case OCLF_QFORMAT_Q8_0: return k / 32 * 34;
    case OCLF_QFORMAT_Q4_0: return k / 32 * 18;
    default: return 0;
    }
}

static size_t scales_per_row(const qfmt *f, size_t k)
{
    return is_gguf(f) ? 0 : f->group ? k / f->group : 1;
}

static const char *fmt_name(const qfmt *f)
{
    /* two names may appear in one message */
    static _Thread_local char bufs[2][64];
    static _Thread_local int next;
    char *buf = bufs[next++ % 2];
    static const char *const names[] = {"?", "INT8", "INT4", "Q8_0", "Q4_0"};
    snprintf(buf, sizeof bufs[0], "%s/g%u%s%s", names[f->format < 5 ? f->format : 0], f->group,
             is_gguf(f) ? "" : f->sdt == OCLF_F32 ? "/f32" : "/f16", f->zero ? "/zero" : "");
    return buf;
}

static void put_f16(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* ---- a quantized weight on host and device ------------------------------ */

/* Once uploaded, w.zero points at zb: a qdev stays where it was uploaded. */
typedef struct qdev {
    qfmt f;
    size_t n, k;
    uint8_t *q; /* whole buffer: qoff bytes, n rows of qs bytes, a tail byte */
    size_t qn, qoff, qs;
    void *s; /* whole buffer in f.sdt: soff, n rows of ss, a tail */
    size_t sn, soff, ss;
    size_t svec_stride; /* per channel: the stride passed with the vector [N] */
    uint8_t *z; /* whole buffer: zoff, n rows of zs, a tail */
    size_t zn, zoff, zs;
    cl_mem mq, ms, mz;
    oclf_buf zb;
    oclf_qweight w;
} qdev;

static void qdev_upload(qdev *d)
{
    d->mq = th_upload(d->q, d->qn);
    d->ms = d->s ? th_upload(d->s, d->sn * oclf_dtype_size(d->f.sdt)) : NULL;
    d->mz = d->z ? th_upload(d->z, d->zn) : NULL;
    memset(&d->w, 0, sizeof d->w);
    d->w.format = d->f.format;
    d->w.group = d->f.group;
    d->w.q = (oclf_buf){d->mq, d->qoff, d->qs == q_row_bytes(&d->f, d->k) ? 0 : d->qs};
    d->w.scale = (oclf_buf){d->ms, d->soff,
                            !d->f.group ? d->svec_stride
                            : d->ss == scales_per_row(&d->f, d->k) ? 0 : d->ss};
    d->w.scale_dtype = d->f.sdt;
    d->zb = (oclf_buf){d->mz, d->zoff, d->zs == scales_per_row(&d->f, d->k) ? 0 : d->zs};
    d->w.zero = d->z ? &d->zb : NULL;
}

/* Random bytes everywhere (padding included, so a read of it shows), scales
 * of both signs near 1/127 (INT8, Q8_0) or 1/8 (INT4, Q4_0) so weights stay
 * near 1, zero points mostly 0..15 with some above 127 (read unsigned).
 * GGUF blocks: d of either sign, some -0.0 and +0.0. */
static qdev qdev_random(const qfmt *f, size_t n, size_t k, size_t qpad, size_t qoff, size_t spad,
                        size_t soff, uint64_t seed)
{
    qdev d;
    memset(&d, 0, sizeof d);
    d.f = *f;
    d.n = n;
    d.k = k;
    th_seed(seed);
    const size_t rb = q_row_bytes(f, k);
    d.qs = rb + qpad;
    d.qoff = qoff;
    d.qn = qoff + n * d.qs + 1;
    d.q = malloc(d.qn);
    for (size_t i = 0; i < d.qn; i++)
        d.q[i] = (uint8_t)th_uniform(0.0f, 256.0f);
    const int eight = f->format == OCLF_QFORMAT_INT8 || f->format == OCLF_QFORMAT_Q8_0;
    const float amp = eight ? 1.0f / 127 : 1.0f / 8;
    if (is_gguf(f)) {
        const size_t bb = f->format == OCLF_QFORMAT_Q8_0 ? 34 : 18;
        for (size_t r = 0; r < n; r++)
            for (size_t b = 0; b < k / 32; b++) {
                const float u = th_uniform(0.0f, 1.0f), mag = th_uniform(0.5f, 1.5f) * amp;
                const uint16_t h = u < 0.08f   ? 0x8000
                                   : u < 0.12f ? 0x0000
                                   : oclf_f32_to_f16(u < 0.56f ? -mag : mag);
                put_f16(d.q + qoff + r * d.qs + b * bb, h);
            }
        return d;
    }
    const size_t sc = scales_per_row(f, k);
    /* per channel the scales are a vector [N], whose stride oclf_buf ignores */
    d.ss = sc + (f->group ? spad : 0);
    d.svec_stride = f->group || !spad ? 0 : 1 + spad;
    d.soff = soff;
    d.sn = soff + n * d.ss + 1;
    d.s = malloc(d.sn * oclf_dtype_size(f->sdt));
    for (size_t i = 0; i < d.sn; i++) {
        const float mag = th_uniform(0.5f, 1.5f) * amp;
        oclf_ref_set(f->sdt, d.s, i, th_uniform(0.0f, 1.0f) < 0.5f ? -mag : mag);
    }
    if (f->zero) {
        d.zs = sc + spad;
        d.zoff = soff;
        d.zn = soff + n * d.zs + 1;
        d.z = malloc(d.zn);
        for (size_t i = 0; i < d.zn; i++)
            d.z[i] = (uint8_t)(th_uniform(0.0f, 1.0f) < 0.06f ? th_uniform(16.0f, 256.0f)
                                                               : th_uniform(0.0f, 16.0f));
    }
    return d;
}

static void qdev_free(qdev *d)
{
    free(d->q), free(d->s), free(d->z);
    if (d->mq)
        clReleaseMemObject(d->mq);
    if (d->ms)
        clReleaseMemObject(d->ms);
    if (d->mz)
        clReleaseMemObject(d->mz);
}

/* The reference's fp64 weight [n, k] from the host copy. */
static double *qdev_dequant(const qdev *d)
{
    double *out = malloc((d->n * d->k + 1) * sizeof *out);
    const size_t es = oclf_dtype_size(d->f.sdt);
    const oclf_ref_qweight rq = {
        .format = d->f.format,
        .group = d->f.group,
        .q = d->q + d->qoff,
        .qs = d->qs,
        .scale = d->s ? (const char *)d->s + d->soff * es : NULL,
        .scale_dtype = d->f.sdt,
        .ss = d->ss,
        .zero = d->z ? d->z + d->zoff : NULL,
        .zs = d->zs,
    };
    oclf_ref_dequant(&rq, d->n, d->k, out);
    return out;
}

/* ---- one call against the reference ------------------------------------- */

typedef struct qcase {
    oclf_dtype dtype;
    size_t m, n, k;
    qfmt f;
    oclf_linear_act prologue, act;
    int before, bias, res, inplace;
    float alpha, beta;
    size_t pad, offset;     /* x, y, residual, bias: extra elements per row and before row 0 */
    size_t qpad, qoff;      /* q: extra bytes per row and before row 0 */
    size_t spad, soff;      /* scales (elements) and zero points (bytes) alike */
    const oclf_choice *choice;
} qcase;

static qcase base_case(oclf_dtype dt, int fmt, size_t m, size_t n, size_t k)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.dtype = dt;
    c.f = formats[fmt];
    c.m = m;
    c.n = n;
    c.k = k;
    c.alpha = 1.0f;
    c.beta = 1.0f;
    return c;
}

static void case_weight(const qcase *c, qdev *d)
{
    *d = qdev_random(&c->f, c->n, c->k, c->qpad, c->qoff, c->spad, c->soff,
                     c->n * 131 + c->k * 17 + (uint64_t)c->f.format * 1009 + c->f.group +
                         c->qoff * 7 + (uint64_t)c->f.zero * 3);
    qdev_upload(d);
}

static const char *choice_name(const oclf_choice *ch)
{
    static _Thread_local char buf[160];
    if (!ch)
        return "auto";
    int used = snprintf(buf, sizeof buf, "%s", ch->path == OCLF_PATH_FUSED     ? "fused"
                                               : ch->path == OCLF_PATH_UNFUSED ? "unfused"
                                                                               : "auto");
    for (unsigned i = 0; i < ch->params.count && used < (int)sizeof buf; i++)
        used += snprintf(buf + used, sizeof buf - (size_t)used, "%s%s=%lld", i ? "," : " ",
                         ch->params.item[i].name, (long long)ch->params.item[i].value);
    return buf;
}

/* Runs one case with the weight `qw`, checks it against the reference and
 * that nothing but y's elements was written; returns y packed (m x n,
 * dtype), or NULL for m = 0. */
static void *run_with(const qcase *c, const qdev *qw, double **scale_out)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), m = c->m, n = c->n, k = c->k, p = c->pad;
    const size_t o = c->offset;
    const size_t xs = k + p, ys = n + p;
    const size_t nx = o + m * xs + 1, ny = o + m * ys + 1, nb = o + n + 1;
    th_seed(m * 1009 + n * 101 + k * 7 + (size_t)c->prologue * 3 + (size_t)c->act * 5 +
            (size_t)c->before + (size_t)dt * 13);
    void *x = th_random(dt, nx, -2.0f, 2.0f), *b = th_random(dt, nb, -1.0f, 1.0f);
    void *y = th_random(dt, ny, -3.0f, 3.0f);
    void *r = c->inplace ? y : th_random(dt, ny, -3.0f, 3.0f);
    cl_mem mx = th_upload(x, nx * es), mb = th_upload(b, nb * es), my = th_upload(y, ny * es);
    cl_mem mr = c->inplace ? my : th_upload(r, ny * es);
    oclf_buf bx = {mx, o, p ? xs : 0}, by = {my, o, p ? ys : 0};
    oclf_buf bb = {mb, o, 0}, br = {mr, o, p ? ys : 0};
    oclf_linear_epilogue epi;
    oclf_linear_epilogue_init(&epi);
    epi.alpha = c->alpha;
    epi.beta = c->beta;
    epi.act = c->act;
    epi.residual_before_act = c->before;
    epi.bias = c->bias ? &bb : NULL;
    epi.residual = c->res ? &br : NULL;
    /* the reference reads the residual before y is overwritten */
    double *wd = qdev_dequant(qw);
    double *want = malloc((m * n + 1) * sizeof *want), *scale = malloc((m * n + 1) * sizeof *scale);
    const oclf_ref_linear_args ra = {
        .dtype = dt, .m = m, .n = n, .k = k,
        .x = (const char *)x + o * es, .xs = xs, .prologue = c->prologue,
        .w = NULL, .ws = k, .layout = OCLF_WEIGHT_NK,
        .bias = c->bias ? (const char *)b + o * es : NULL,
        .residual = c->res ? (const char *)r + o * es : NULL, .rs = ys,
        .alpha = c->alpha, .beta = c->beta, .residual_before_act = c->before, .act = c->act,
        .wd = wd};
    oclf_ref_linear(&ra, want, scale);
    cl_event ev = NULL;
    TH_OK(oclf_linear_q(e->ctx, e->queue, dt, m, n, k, bx, &qw->w, by, c->prologue, &epi, c->choice,
                        0, NULL, &ev));
    ck_assert_ptr_nonnull(ev); /* even for zero rows */
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    void *got = malloc(ny * es);
    th_download(my, got, ny * es);
    size_t first = 0;
    double maxerr = 0;
    size_t bad = oclf_ref_linear_compare(dt, (const char *)got + o * es, ys, want, scale, m, n,
                                         &first, &maxerr);
    ck_assert_msg(bad == 0,
                  "%s %s %zux%zux%zu (%s) pro %d act %d before %d pad %zu qoff %zu qpad %zu "
                  "inplace %d: %zu elements out of tolerance, first (%zu, %zu): got %g want %g, "
                  "max error %g",
                  fmt_name(&qw->f), oclf_dtype_name(dt), m, n, k, choice_name(c->choice),
                  (int)c->prologue, (int)c->act, c->before, p, c->qoff, c->qpad, c->inplace, bad,
                  first / n, first % n,
                  (double)oclf_ref_get(dt, got, o + (first / n) * ys + first % n),
                  bad ? want[first] : 0.0, maxerr);
    /* every element outside y's rows is as it was (the residual's copy of it
     * when in place, which holds the same values) */
    for (size_t i = 0; i < ny; i++) {
        const int inside = i >= o && (i - o) / ys < m && (i - o) % ys < n;
        if (!inside)
            ck_assert_msg(memcmp((char *)got + i * es, (char *)y + i * es, es) == 0,
                          "%s %zux%zux%zu (%s): element %zu outside y was written",
                          fmt_name(&qw->f), m, n, k, choice_name(c->choice), i);
    }
    void *packed = NULL;
    if (m) {
        packed = malloc(m * n * es);
        for (size_t i = 0; i < m; i++)
            memcpy((char *)packed + i * n * es, (char *)got + (o + i * ys) * es, n * es);
    }
    free(got), free(want), free(wd);
    if (scale_out)
        *scale_out = scale;
    else
        free(scale);
    free(x), free(b), free(y);
    if (!c->inplace)
        free(r), clReleaseMemObject(mr);
    clReleaseMemObject(mx), clReleaseMemObject(mb), clReleaseMemObject(my);
    return packed;
}

/* Two results of one case within twice the dtype's tolerance of each other,
 * relative to the reference's magnitude. */
static void expect_close(const qcase *c, const void *a_, const void *b_, const double *scale,
                         const char *what)
{
    const double tol = c->dtype == OCLF_F32 ? 2e-5 : c->dtype == OCLF_F16 ? 4e-3 : 3.2e-2;
    for (size_t i = 0; a_ && b_ && i < c->m * c->n; i++) {
        const double a = oclf_ref_get(c->dtype, a_, i), b = oclf_ref_get(c->dtype, b_, i);
        ck_assert_msg((isnan(a) && isnan(b)) || fabs(a - b) <= tol * (fabs(b) + scale[i]),
                      "%s %s %zux%zux%zu: %s %g and %g differ at %zu", fmt_name(&c->f),
                      oclf_dtype_name(c->dtype), c->m, c->n, c->k, what, a, b, i);
    }
}

/* The case on both paths (the fused one with the case's choice, else the
 * default), each against the reference, and fused against unfused. */
static void both_paths(qcase c)
{
    oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    qdev qw;
    case_weight(&c, &qw);
    c.choice = c.choice ? c.choice : &f;
    double *scale = NULL;
    void *rf = run_with(&c, &qw, &scale);
    c.choice = &u;
    void *ru = run_with(&c, &qw, NULL);
    expect_close(&c, rf, ru, scale, "fused and unfused");
    free(rf), free(ru), free(scale);
    qdev_free(&qw);
}

/* The case with its own choice only, against the reference. */
static void one_path(const qcase *c)
{
    qdev qw;
    case_weight(c, &qw);
    free(run_with(c, &qw, NULL));
    qdev_free(&qw);
}

static oclf_choice parse_choice(const char *text)
{
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        *eq = 0;
        oclf_params_set(&ch.params, t, strtoll(eq + 1, NULL, 10));
    }
    return ch;
}

/* ---- hand-computed weights ---------------------------------------------- *
 * Each weight's integer as read by hand from its byte (the int8 value, or
 * the nibble a format's order assigns it), and the scale and zero point of
 * its 32 weights; x is the identity, so row m of y is column m of W and
 * every output is exact in f32. */

#define P8_BYTES                                                                               \
    0x00, 0x01, 0x02, 0x03, 0x7f, 0x7e, 0x80, 0x81, 0xff, 0xfe, 0x10, 0xf0, 0x40, 0xc0, 0x20,  \
        0xe0, 0x05, 0xfb, 0x11, 0xef, 0x33, 0xcd, 0x55, 0xab, 0x60, 0xa0, 0x08, 0xf8, 0x09,    \
        0xf7, 0x0a, 0xf6
#define P8_INTS                                                                                \
    0, 1, 2, 3, 127, 126, -128, -127, -1, -2, 16, -16, 64, -64, 32, -32, 5, -5, 17, -17, 51,   \
        -51, 85, -85, 96, -96, 8, -8, 9, -9, 10, -10
#define R8_BYTES                                                                               \
    0x7f, 0x80, 0x00, 0xff, 0x01, 0xfe, 0x02, 0xfd, 0x3f, 0xc1, 0x1f, 0xe1, 0x0f, 0xf1, 0x07,  \
        0xf9, 0x64, 0x9c, 0x32, 0xce, 0x19, 0xe7, 0x0c, 0xf4, 0x06, 0xfa, 0x03, 0xfd, 0x48,    \
        0xb8, 0x24, 0xdc
#define R8_INTS                                                                                \
    127, -128, 0, -1, 1, -2, 2, -3, 63, -63, 31, -31, 15, -15, 7, -7, 100, -100, 50, -50, 25,  \
        -25, 12, -12, 6, -6, 3, -3, 72, -72, 36, -36
/* 16 bytes, low nibble i and high nibble 15 - i */
#define A4_BYTES                                                                               \
    0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e,  \
        0x0f
/* INT4's order (weight 2i low nibble of byte i, 2i + 1 its high nibble) */
#define A4_INT4                                                                                \
    0, 15, 1, 14, 2, 13, 3, 12, 4, 11, 5, 10, 6, 9, 7, 8, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13,  \
        2, 14, 1, 15, 0
#define B4_BYTES                                                                               \
    0x08, 0x80, 0x88, 0x00, 0xff, 0x7f, 0xf7, 0x12, 0x21, 0x34, 0x43, 0x9a, 0xa9, 0x5c, 0xc5,  \
        0x6e
#define B4_INT4                                                                                \
    8, 0, 0, 8, 8, 8, 0, 0, 15, 15, 15, 7, 7, 15, 2, 1, 1, 2, 4, 3, 3, 4, 10, 9, 9, 10, 12, 5,  \
        5, 12, 14, 6
/* Q4_0's order (weight j < 16 low nibble of byte j, j + 16 its high nibble) */
#define B4_Q40                                                                                 \
    8, 0, 8, 0, 15, 15, 7, 2, 1, 4, 3, 10, 9, 12, 5, 14, 0, 8, 8, 0, 15, 7, 15, 1, 2, 3, 4, 9,  \
        10, 5, 12, 6
/* 16 bytes, low nibble 15 - j and high nibble j */
#define C4_BYTES                                                                               \
    0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1,  \
        0xf0
#define C4_Q40                                                                                 \
    15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, \
        12, 13, 14, 15

typedef struct known_case {
    const char *name;
    qfmt f;
    size_t n, k;
    const uint8_t *q;     /* n packed rows */
    const float *scale;   /* n x (k / group, or 1) in f.sdt; NULL for GGUF */
    const uint8_t *zero;  /* n x k / group, or NULL */
    const int *ints;      /* n x k */
    const double *s32;    /* the scale (GGUF: d) of each run of 32 weights, row-major */
    const int *z32;       /* the zero point of each run of 32 weights; NULL: 0 (INT8, Q8_0) */
} known_case;

static const uint8_t kq_int8[] = {P8_BYTES, R8_BYTES};
static const int ki_int8[] = {P8_INTS, R8_INTS};
static const float ks_int8_g0[] = {0.5f, -0.25f};
static const double k32_int8_g0[] = {0.5, -0.25};
static const float ks_int8_g32[] = {0.25f, -3.0f};
static const double k32_int8_g32[] = {0.25, -3.0};

static const uint8_t kq_int4[] = {A4_BYTES, B4_BYTES};
static const int ki_int4[] = {A4_INT4, B4_INT4};
static const float ks_int4[] = {0.5f, -1.0f};
static const double k32_int4[] = {0.5, -1.0};
static const int kz_eight[] = {8, 8, 8, 8};

static const uint8_t kq_int4z[] = {A4_BYTES, B4_BYTES, B4_BYTES, A4_BYTES};
static const int ki_int4z[] = {A4_INT4, B4_INT4, B4_INT4, A4_INT4};
static const float ks_int4z[] = {2.0f, 0.5f, -0.25f, 1.0f};
static const double k32_int4z[] = {2.0, 0.5, -0.25, 1.0};
/* 200 tells an unsigned read from a signed one (-56) */
static const uint8_t kzb_int4z[] = {3, 200, 8, 15};
static const int kz_int4z[] = {3, 200, 8, 15};

/* d = -0.333251953125 (0xb555: both bytes matter, a big-endian read gives
 * another value), -0.0, and the smallest subnormal 2^-24 */
static const uint8_t kq_q80[] = {0x55, 0xb5, P8_BYTES, 0x00, 0x80, R8_BYTES,
                                 0x01, 0x00, R8_BYTES};
static const int ki_q80[] = {P8_INTS, R8_INTS, R8_INTS};
static const double k32_q80[] = {-0.333251953125, -0.0, 5.9604644775390625e-08};

/* rows of two blocks: d 0.25, -2.0; then -0.0, 0.333251953125 */
static const uint8_t kq_q40[] = {0x00, 0x34, C4_BYTES, 0x00, 0xc0, B4_BYTES,
                                 0x00, 0x80, B4_BYTES, 0x55, 0x35, C4_BYTES};
static const int ki_q40[] = {C4_Q40, B4_Q40, B4_Q40, C4_Q40};
static const double k32_q40[] = {0.25, -2.0, -0.0, 0.333251953125};
/* Q4_0's first block rewritten in INT4's order: bytes (w[2i] | w[2i+1] << 4) */
static const uint8_t kq_q40_as_int4[] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
                                         0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};

static const known_case known[] = {
    {"INT8 per channel, f32 scales", {OCLF_QFORMAT_INT8, 0, OCLF_F32, 0}, 2, 32, kq_int8,
     ks_int8_g0, NULL, ki_int8, k32_int8_g0, NULL},
    {"INT8 per channel, f16 scales", {OCLF_QFORMAT_INT8, 0, OCLF_F16, 0}, 2, 32, kq_int8,
     ks_int8_g0, NULL, ki_int8, k32_int8_g0, NULL},
    {"INT8 group 32", {OCLF_QFORMAT_INT8, 32, OCLF_F16, 0}, 1, 64, kq_int8, ks_int8_g32, NULL,
     ki_int8, k32_int8_g32, NULL},
    {"INT4 group 32", {OCLF_QFORMAT_INT4, 32, OCLF_F16, 0}, 1, 64, kq_int4, ks_int4, NULL,
     ki_int4, k32_int4, kz_eight},
    {"INT4 group 32, zero points", {OCLF_QFORMAT_INT4, 32, OCLF_F16, 1}, 2, 64, kq_int4z,
     ks_int4z, kzb_int4z, ki_int4z, k32_int4z, kz_int4z},
    {"Q8_0", {OCLF_QFORMAT_Q8_0, 32, OCLF_F16, 0}, 1, 96, kq_q80, NULL, NULL, ki_q80, k32_q80,
     NULL},
    {"Q4_0", {OCLF_QFORMAT_Q4_0, 32, OCLF_F16, 0}, 2, 64, kq_q40, NULL, NULL, ki_q40, k32_q40,
     kz_eight},
};
#define NKNOWN (int)(sizeof known / sizeof *known)

static double *known_weights(const known_case *kc)
{
    const size_t nk = kc->n * kc->k;
    double *w = malloc(nk * sizeof *w);
    for (size_t i = 0; i < nk; i++)
        w[i] = ((double)kc->ints[i] - (kc->z32 ? kc->z32[i / 32] : 0)) * kc->s32[i / 32];
    return w;
}

static void known_weight(const known_case *kc, qdev *out)
{
    qdev d;
    memset(&d, 0, sizeof d);
    d.f = kc->f;
    d.n = kc->n;
    d.k = kc->k;
    d.qs = q_row_bytes(&kc->f, kc->k);
    d.qn = kc->n * d.qs;
    d.q = malloc(d.qn);
    memcpy(d.q, kc->q, d.qn);
    if (kc->scale) {
        d.ss = scales_per_row(&kc->f, kc->k);
        d.sn = kc->n * d.ss;
        d.s = malloc(d.sn * 4);
        for (size_t i = 0; i < d.sn; i++)
            oclf_ref_set(kc->f.sdt, d.s, i, kc->scale[i]);
    }
    if (kc->zero) {
        d.zs = d.ss;
        d.zn = kc->n * d.zs;
        d.z = malloc(d.zn);
        memcpy(d.z, kc->zero, d.zn);
    }
    *out = d;
    qdev_upload(out);
}

/* y = I . W^T through the weight `qw` on every path given: row m of y must
 * be column m of the hand-computed W, exactly. */
static void expect_identity(const known_case *kc, const qdev *qw, const char *form)
{
    th_env *e = th_get();
    const size_t n = kc->n, k = kc->k, m = k;
    double *want = known_weights(kc);
    float *x = calloc(m * k, sizeof *x), *y = malloc(m * n * sizeof *y);
    for (size_t i = 0; i < m; i++)
        x[i * k + i] = 1.0f;
    for (size_t i = 0; i < m * n; i++)
        y[i] = NAN;
    cl_mem mx = th_upload(x, m * k * 4), my = th_upload(y, m * n * 4);
    const oclf_choice choices[] = {
        th_choice(OCLF_PATH_FUSED),
        th_choice(OCLF_PATH_UNFUSED),
        parse_choice("MB=2,NB=1,VEC=4,WGM=1,WGN=16,STAGE=0,KC=16,MV=1"),
    };
    const int nch = th_quick() ? 2 : (int)(sizeof choices / sizeof *choices);
    for (int c = 0; c < nch; c++) {
        TH_OK(oclf_linear_q(e->ctx, e->queue, OCLF_F32, m, n, k, (oclf_buf){mx, 0, 0}, &qw->w,
                            (oclf_buf){my, 0, 0}, OCLF_LINEAR_NONE, NULL, &choices[c], 0, NULL,
                            NULL));
        th_download(my, y, m * n * 4);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++)
                ck_assert_msg((double)y[i * n + j] == want[j * k + i],
                              "%s (%s, %s): weight (%zu, %zu) is %.9g, by hand %.9g", kc->name,
                              form, choice_name(&choices[c]), j, i, (double)y[i * n + j],
                              want[j * k + i]);
    }
    free(want), free(x), free(y);
    clReleaseMemObject(mx), clReleaseMemObject(my);
}

static void convert_into(const qdev *src, qdev *dst, int fmt_int4);

START_TEST(test_known)
{
    const known_case *kc = &known[_i];
    qdev qw;
    known_weight(kc, &qw);
    /* the reference reads the bytes as the hand does */
    double *want = known_weights(kc), *ref = qdev_dequant(&qw);
    for (size_t i = 0; i < kc->n * kc->k; i++)
        ck_assert_msg(ref[i] == want[i] && signbit(ref[i]) == signbit(want[i]),
                      "%s: the reference's weight %zu is %.9g, by hand %.9g", kc->name, i, ref[i],
                      want[i]);
    expect_identity(kc, &qw, "as stored");
    if (is_gguf(&kc->f)) {
        qdev conv;
        convert_into(&qw, &conv, kc->f.format == OCLF_QFORMAT_Q4_0);
        expect_identity(kc, &conv, "converted");
        if (kc->f.format == OCLF_QFORMAT_Q4_0)
            ck_assert_msg(memcmp(conv.q + conv.qoff, kq_q40_as_int4, 16) == 0,
                          "Q4_0's first block was not repacked into INT4's nibble order");
        qdev_free(&conv);
    }
    free(want), free(ref);
    qdev_free(&qw);
}
END_TEST

/* ---- every format against the reference --------------------------------- *
 * Each format is paired with one activation dtype (the three rotate over
 * the formats), and the cases run at few row counts: a program is built per
 * dtype, format, prologue and kernel structure (the default's depends on
 * M), so cases that share them compile once. */

static oclf_dtype fdt(int fmt) { return dtypes[fmt % 3]; }

/* K of one group and of many; INT8 per channel takes any K. */
static size_t k_one(const qfmt *f) { return f->group || is_gguf(f) ? kgroup(f) : 37; }
static size_t k_many(const qfmt *f)
{
    switch (kgroup(f)) {
    case 1: return 300;
    case 32: return is_gguf(f) ? 256 : 384;
    case 64: return 320;
    default: return 512;
    }
}

/* Each format at one group of K and at many. */
START_TEST(test_formats)
{
    const qfmt *f = &formats[_i];
    qcase c = base_case(fdt(_i), _i, 3, 7, k_one(f));
    c.bias = _i % 2;
    c.act = _i % 2 ? OCLF_LINEAR_SILU : OCLF_LINEAR_NONE;
    both_paths(c);
    c = base_case(fdt(_i), _i, 3, 37, k_many(f));
    c.bias = 1;
    c.res = 1;
    c.act = OCLF_LINEAR_GELU_TANH;
    both_paths(c);
}
END_TEST

/* M = 0 (a marker, y untouched), 1, 3, 16, 17 and 128 rows, two formats each. */
START_TEST(test_rows)
{
    static const size_t ms[] = {0, 1, 3, 16, 17, 128};
    for (int j = 0; j < 2; j++) {
        const int fmt = (2 * _i + 7 * j) % NFORMATS;
        qcase c = base_case(fdt(fmt), fmt, ms[_i], 37,
                            kgroup(&formats[fmt]) == 1 ? 64 : 4 * kgroup(&formats[fmt]));
        c.bias = 1;
        c.res = j;
        c.act = OCLF_LINEAR_RELU;
        both_paths(c);
    }
}
END_TEST

/* Odd N: 1, 7, 37 and 129 outputs, three rows and one. */
START_TEST(test_cols)
{
    static const size_t ns[] = {1, 7, 37, 129};
    for (int j = 0; j < 3; j++) {
        if (th_quick() && j)
            continue;
        const int fmt = (3 * _i + 5 * j + 1) % NFORMATS;
        qcase c = base_case(fdt(fmt), fmt, j == 1 ? 1 : 3, ns[_i],
                            kgroup(&formats[fmt]) == 1 ? 45 : 2 * kgroup(&formats[fmt]));
        c.bias = j != 1;
        c.res = 1;
        both_paths(c);
    }
}
END_TEST

/* K = 0: y = epilogue(0), whatever the format. */
START_TEST(test_empty_k)
{
    static const int fmts[] = {F_INT8_G0_F32, F_INT4_G32_Z, F_Q4_0};
    qcase c = base_case(fdt(fmts[_i]), fmts[_i], 3, 9, 0);
    c.bias = 1;
    c.res = 1;
    c.act = OCLF_LINEAR_SILU;
    c.before = _i % 2;
    both_paths(c);
}
END_TEST

/* Every prologue (epilogue plain) and every epilogue activation in both
 * residual orders (prologue none), with bias, residual, alpha and beta not
 * 1; the formats rotate. */
START_TEST(test_epilogues)
{
    const int v = _i;
    const int fmt = (v * 5) % NFORMATS;
    const size_t g = kgroup(&formats[fmt]);
    qcase c = base_case(fdt(fmt), fmt, 3, 13, g == 1 ? 45 : 2 * g);
    c.bias = 1;
    c.res = 1;
    c.alpha = 0.75f;
    c.beta = -1.25f;
    if (v < 5) {
        c.prologue = (oclf_linear_act)v;
    } else {
        c.act = (oclf_linear_act)((v - 5) / 2);
        c.before = (v - 5) % 2;
    }
    both_paths(c);
}
END_TEST

/* Strided rows and offsets on x, y, residual and bias; q with a row stride
 * above its packed bytes and an offset (odd where the format allows it),
 * scales and zero points likewise (a per-channel scale vector with a stride
 * to ignore); y in place on the residual. */
START_TEST(test_strides_inplace)
{
    static const int fmts[] = {F_INT8_G0_F32, F_INT8_G64, F_INT4_G32_Z, F_INT4_G128,
                               F_Q8_0,        F_Q4_0,     F_INT8_G0_F16, F_INT4_G64_Z};
    const int fmt = fmts[_i];
    const int gguf = is_gguf(&formats[fmt]);
    for (int v = 0; v < 2; v++) {
        if (th_quick() && v)
            continue;
        qcase c = base_case(fdt(fmt), fmt, 3, 21,
                            kgroup(&formats[fmt]) == 1 ? 35 : 3 * kgroup(&formats[fmt]));
        c.bias = 1;
        c.res = 1;
        c.pad = 3;
        c.offset = 5;
        c.qpad = gguf ? 4 : 3 + (size_t)v;
        c.qoff = gguf ? 6 : 5;
        c.spad = 2;
        c.soff = 3 + (size_t)v;
        c.inplace = v;
        c.act = OCLF_LINEAR_RELU;
        c.before = v;
        c.beta = 0.5f;
        both_paths(c);
    }
}
END_TEST

/* Kernel structures given in full: the CPU block, tiny and odd blocks,
 * staged tiles whose K chunk is below, equal to and above a group of 32,
 * the matrix-vector shape with 16, 32 and 64 lanes, register tiles; each
 * with an INT8, an INT4 and a GGUF weight. The unstaged blocks scale a
 * group's partial sums by default (the library's QSCALE); one dequantizes
 * every weight. */
static const struct {
    const char *params;
    int fmts[3];
} structures[] = {
    {"MB=2,NB=8,VEC=16,WGM=16,WGN=1,STAGE=0,KC=16,MV=0", {F_INT8_G0_F32, F_INT4_G32_Z, F_Q4_0}},
    {"MB=1,NB=1,VEC=1,WGM=1,WGN=1,STAGE=0,KC=16,MV=0", {F_INT8_G32, F_INT4_G64, F_Q8_0}},
    {"MB=8,NB=2,VEC=4,WGM=2,WGN=3,STAGE=0,KC=16,MV=0,QSCALE=0", {F_INT8_G0_F16, F_INT4_G128_Z, F_Q4_0}},
    {"MB=2,NB=2,VEC=4,WGM=8,WGN=8,STAGE=1,KC=32,MV=0", {F_INT8_G64, F_INT4_G32, F_Q8_0}},
    {"MB=1,NB=4,VEC=2,WGM=4,WGN=16,STAGE=1,KC=16,MV=0", {F_INT8_G128, F_INT4_G64_Z, F_Q4_0}},
    {"MB=4,NB=1,VEC=8,WGM=3,WGN=5,STAGE=1,KC=8,MV=0", {F_INT8_G0_F32, F_INT4_G128, F_Q8_0}},
    {"MB=2,NB=2,VEC=16,WGM=2,WGN=4,STAGE=1,KC=64,MV=0", {F_INT8_G32, F_INT4_G32_Z, F_Q4_0}},
    {"MB=4,NB=1,VEC=4,WGM=1,WGN=16,STAGE=0,KC=16,MV=1", {F_INT8_G0_F16, F_INT4_G64, F_Q8_0}},
    {"MB=1,NB=2,VEC=16,WGM=1,WGN=64,STAGE=0,KC=16,MV=1", {F_INT8_G64, F_INT4_G128_Z, F_Q4_0}},
    {"MB=2,NB=4,VEC=8,WGM=1,WGN=32,STAGE=0,KC=16,MV=1", {F_INT8_G128, F_INT4_G32, F_Q8_0}},
    /* register tiles: W dequantized into the local tile as it is staged */
    {"MB=4,NB=8,VEC=4,WGM=2,WGN=4,STAGE=3,KC=8,MV=0", {F_INT8_G0_F32, F_INT4_G32_Z, F_Q4_0}},
    {"MB=8,NB=4,VEC=8,WGM=4,WGN=2,STAGE=3,KC=16,MV=0", {F_INT8_G32, F_INT4_G64, F_Q8_0}},
};
#define NSTRUCT (int)(sizeof structures / sizeof *structures)

START_TEST(test_structures)
{
    const oclf_choice ch = parse_choice(structures[_i].params);
    static const size_t shapes[][2] = {{13, 37}, {1, 70}, {3, 5}};
    for (int j = 0; j < 3; j++) {
        if (th_quick() && j == 2)
            continue;
        const int fmt = structures[_i].fmts[j];
        const size_t g = kgroup(&formats[fmt]);
        const int s = (_i + j) % 3;
        /* K of one group, of several, and (KC = 64 over groups of 32) with
         * a partial last chunk */
        const size_t k = g == 1 ? (s == 0 ? 45 : s == 1 ? 129 : 3) : g * (s == 1 ? 4 : s + 1);
        qcase c = base_case(dtypes[(_i + j) % 3], fmt, shapes[s][0], shapes[s][1], k);
        c.bias = 1;
        c.res = 1;
        c.prologue = s == 0 ? OCLF_LINEAR_GELU_TANH : OCLF_LINEAR_NONE;
        c.act = OCLF_LINEAR_SILU;
        c.choice = &ch;
        one_path(&c);
    }
}
END_TEST

/* The matrix-unit structures, forced: on a device without matrix units
 * they run cl/mma.h's emulation of the instruction (the warp's m16n8k16,
 * STAGE 2, and the wavefront's 16x16x16, STAGE 4), with W's runs
 * dequantized into the 16-bit operand tile. Every format in f16 and bf16
 * (one dtype a run, the other the next index), odd M and N beside tiles
 * that lie wholly inside x and W (copied a run a work-item: the
 * dequantizing fetch) and edge tiles (weight by weight), K of one group
 * and of several (INT8 per channel: odd K, a partial last chunk), bias,
 * residual, a prologue and an activation; each run checked to have built
 * the matrix structure for its format. The weights reach the products
 * rounded to the dtype, within the op's tolerance of the fp64 reference.
 * Structures: 1 x 2 fragments in 2 x 1 warps; 2 x 1 in 1 x 2 with K in
 * chunks of 64; the wavefront's 1 x 1 in 2 x 1 and 2 x 1 in 1 x 2. */
static const char *const mu_structures[] = {
    "MB=1,NB=2,VEC=8,WGM=2,WGN=1,STAGE=2,KC=32,MV=0",
    "MB=2,NB=1,VEC=8,WGM=1,WGN=2,STAGE=2,KC=64,MV=0",
    "MB=1,NB=1,VEC=8,WGM=2,WGN=1,STAGE=4,KC=32,MV=0",
    "MB=2,NB=1,VEC=8,WGM=1,WGN=2,STAGE=4,KC=64,MV=0",
};
#define NMU (int)(sizeof mu_structures / sizeof *mu_structures)

/* Whether one build of the case's context was linear.cl with all of the
 * given defines. */
static int built_with(const char *a, const char *b, const char *c)
{
    for (const char *line = th_builds(); *line;) {
        const char *end = strchr(line, '\n');
        const size_t len = end ? (size_t)(end - line) : strlen(line);
        char one[1024];
        snprintf(one, sizeof one, "%.*s", (int)len, line);
        if (strstr(one, "linear.cl") && strstr(one, a) && strstr(one, b) && strstr(one, c))
            return 1;
        line += len + (end ? 1 : 0);
    }
    return 0;
}

START_TEST(test_matrix_units)
{
    const int fmt = _i % NFORMATS, st = _i / NFORMATS;
    const char *params = mu_structures[(st * 2 + _i % 2) % NMU];
    const oclf_choice ch = parse_choice(params);
    const size_t g = kgroup(&formats[fmt]);
    /* every shape has a whole interior tile of both small structures (32
     * x 16 and 32 x 32 at most) beside edge tiles */
    static const size_t shapes[][2] = {{33, 37}, {47, 33}};
    th_env *e = th_get();
    for (int d = 0; d < 2; d++) {
        const oclf_dtype dt = (d + _i) % 2 ? OCLF_BF16 : OCLF_F16;
        const size_t k = g == 1 ? (d ? 45 : 96) : g * (d ? 1 : 3);
        qcase c = base_case(dt, fmt, shapes[d][0], shapes[d][1], k);
        c.bias = 1;
        c.res = 1;
        c.alpha = 0.75f;
        c.prologue = d ? OCLF_LINEAR_GELU_TANH : OCLF_LINEAR_NONE;
        c.act = d ? OCLF_LINEAR_RELU : OCLF_LINEAR_SILU;
        c.before = d;
        c.choice = &ch;
        oclf_context *saved = e->ctx;
        e->ctx = th_build_log_context();
        one_path(&c);
        char qw[32], stage[32];
        snprintf(qw, sizeof qw, "-DOCLF_QW=%d ", (int)formats[fmt].format);
        snprintf(stage, sizeof stage, "-DOCLF_STAGE=%c", strstr(params, "STAGE=")[6]);
        ck_assert_msg(built_with(qw, stage, "-DOCLF_M"),
                      "%s %s (%s): no matrix-unit build of linear_q ran:\n%s",
                      fmt_name(&formats[fmt]), oclf_dtype_name(dt), params, th_builds());
        oclf_context_destroy(e->ctx);
        e->ctx = saved;
    }
}
END_TEST

/* Where the matrix-unit structure does not go: f32 activations, refused
 * with a status and a sentence (the library's default takes the FP32
 * structures there). */
START_TEST(test_matrix_units_refused)
{
    th_env *e = th_get();
    const qfmt *f = &formats[F_INT4_G32];
    qdev qw = qdev_random(f, 24, 64, 0, 0, 0, 0, 5);
    qdev_upload(&qw);
    const size_t m = 20, n = 24, k = 64;
    cl_mem mx = th_alloc(m * k * 4), my = th_alloc(m * n * 4);
    const oclf_buf bx = {mx, 0, 0}, by = {my, 0, 0};
    for (int v = 0; v < 2; v++) {
        const oclf_choice ch = parse_choice(v ? mu_structures[2] : mu_structures[0]);
        const oclf_status st = oclf_linear_q(e->ctx, e->queue, OCLF_F32, m, n, k, bx, &qw.w, by,
                                             OCLF_LINEAR_NONE, NULL, &ch, 0, NULL, NULL);
        ck_assert_int_eq(st, OCLF_INVALID_ARGUMENT);
        ck_assert_msg(strstr(oclf_last_error(e->ctx), "f16 or bf16"), "%s",
                      oclf_last_error(e->ctx));
    }
    clFinish(e->queue);
    clReleaseMemObject(mx), clReleaseMemObject(my);
    qdev_free(&qw);
}
END_TEST

/* The matrix-vector shape (MV 1), forced as a GPU would take it for
 * decode, for every format: M = 0, 1, 3 and 16, odd N, bias, residual and
 * a SiLU, a prologue on odd M; the GPU default block (4 segments of 32
 * lanes, 4 x 2) or 3 segments of 8 lanes of 2 x 1. Twice each:
 * rows packed from offset 0, which the INT8 and INT4 units and x's pieces
 * take as the aligned build (K = 4 groups; INT8 per channel K = 64), then
 * x, y and the residual one element off, W's bytes 2 off and the scales
 * one off (the element-aligned build; INT8 per channel at K = 69, a tail
 * past the last 16-byte unit). The grouped INT8 and INT4 stage their
 * scales (and zero points) in local memory. */
static const char *const mv_structures[] = {
    "MB=4,NB=2,VEC=8,WGM=4,WGN=32,STAGE=0,KC=16,MV=1",
    "MB=2,NB=1,VEC=8,WGM=3,WGN=8,STAGE=0,KC=16,MV=1",
};

START_TEST(test_mv)
{
    const int fmt = _i;
    const oclf_choice ch = parse_choice(mv_structures[_i % 2]);
    const size_t g = kgroup(&formats[fmt]);
    static const size_t ms[] = {0, 1, 3, 16};
    for (int a = 0; a < 4; a++)
        for (int v = 0; v < 2; v++) {
            const size_t k = g == 1 ? (v ? 69 : 64) : 4 * g;
            qcase c = base_case(dtypes[(_i + a) % 3], fmt, ms[a], v ? 37 : 9, k);
            c.offset = (size_t)v;
            c.qoff = 2 * (size_t)v;
            c.soff = (size_t)v;
            c.bias = 1;
            c.res = 1;
            c.prologue = a % 2 ? OCLF_LINEAR_GELU_TANH : OCLF_LINEAR_NONE;
            c.act = OCLF_LINEAR_SILU;
            c.choice = &ch;
            one_path(&c);
        }
}
END_TEST

/* The unfused path dequantizes W in tiles of rows whose f32 copy fits
 * 64 MiB: at K = 4096 a tile holds 4096 rows, so N = 4133 crosses a seam,
 * where the second tile's weight bytes, scales, zero points, bias,
 * residual and y start. */
START_TEST(test_unfused_tiles)
{
    const int fmt = _i ? F_Q8_0 : F_INT4_G128_Z;
    qcase c = base_case(_i ? OCLF_F16 : OCLF_F32, fmt, 2, 4133, 4096);
    c.bias = 1;
    c.res = 1;
    c.pad = 1;
    c.offset = 3;
    c.qoff = _i ? 2 : 1;
    c.qpad = 2;
    c.soff = 1;
    c.spad = 1;
    both_paths(c);
}
END_TEST

/* Scales are read as stored: a NaN scale gives a NaN row. An infinite one
 * over a group whose weights are all positive but one zero gives NaN by the
 * formula (0 x inf), and -inf where a kernel scales the group's partial sum
 * of bare integers once (QSCALE 1; x is all ones, so no lane of a vector
 * sum mixes signs): the header promises a non-finite output, either. The
 * other row is unaffected. */
START_TEST(test_nonfinite_scales)
{
    static const int fmts[] = {F_INT8_G0_F32, F_INT4_G32, F_INT4_G64_Z, F_Q8_0, F_Q4_0};
    th_env *e = th_get();
    const qfmt *f = &formats[fmts[_i]];
    const size_t n = 3, k = 128, g = f->group ? f->group : is_gguf(f) ? 32 : k;
    qdev qw = qdev_random(f, n, k, 0, 0, 0, 0, 99 + (uint64_t)_i);
    /* row 2, weights [0, g): q - z = 1..7 (positive), weight 5 exactly 0 */
    for (size_t c = 0; c < g; c++) {
        const unsigned v = c == 5 ? 0 : 1 + (unsigned)(c % 7);
        uint8_t *row = qw.q + 2 * qw.qs;
        switch (f->format) {
        case OCLF_QFORMAT_INT8: row[c] = (uint8_t)v; break;
        case OCLF_QFORMAT_Q8_0: row[2 + c] = (uint8_t)v; break;
        case OCLF_QFORMAT_INT4: {
            const unsigned z = f->zero ? qw.z[2 * qw.zs] % 8 : 8, nib = z + v;
            row[c / 2] = (uint8_t)(c % 2 ? (row[c / 2] & 15u) | nib << 4 : (row[c / 2] & 0xf0u) | nib);
            break;
        }
        default: {
            const size_t j = c % 16;
            row[2 + j] = (uint8_t)(c < 16 ? (row[2 + j] & 0xf0u) | (8 + v) : (row[2 + j] & 15u) | (8 + v) << 4);
            break;
        }
        }
    }
    if (f->zero)
        qw.z[2 * qw.zs] %= 8;
    if (is_gguf(f)) {
        /* row 1's last block: NaN */
        put_f16(qw.q + 1 * qw.qs + (k / 32 - 1) * (f->format == OCLF_QFORMAT_Q8_0 ? 34 : 18),
                0x7e00);
        put_f16(qw.q + 2 * qw.qs, 0xfc00);
    } else {
        oclf_ref_set(f->sdt, qw.s, 1 * qw.ss + qw.ss - 1, NAN);
        oclf_ref_set(f->sdt, qw.s, 2 * qw.ss, -INFINITY);
    }
    qdev_upload(&qw);
    double *wd = qdev_dequant(&qw);
    double want0 = 0, mag0 = 0;
    for (size_t c = 0; c < k; c++)
        want0 += wd[c], mag0 += fabs(wd[c]);
    ck_assert_msg(isnan(wd[2 * k - 1]) && isnan(wd[2 * k + 5]), "the reference does not give NaN weights");
    float *x = malloc(k * sizeof *x), y[3];
    for (size_t c = 0; c < k; c++)
        x[c] = 1.0f;
    cl_mem mx = th_upload(x, k * 4), my = th_alloc(n * 4);
    const oclf_choice chs[] = {
        th_choice(OCLF_PATH_FUSED),
        th_choice(OCLF_PATH_UNFUSED),
        parse_choice("MB=1,NB=1,VEC=4,WGM=1,WGN=16,STAGE=0,KC=16,MV=1"),
        parse_choice("MB=1,NB=2,VEC=4,WGM=2,WGN=4,STAGE=1,KC=32,MV=0"),
        /* the library's own parameter for scaling a group's partial sums */
        parse_choice("MB=1,NB=8,VEC=16,WGM=1,WGN=1,STAGE=0,KC=16,MV=0,QSCALE=1"),
    };
    char failures[1024] = "";
    size_t used = 0;
    for (int p = 0; p < 5; p++) {
        if (th_quick() && (p == 2 || p == 3))
            continue;
        TH_OK(oclf_linear_q(e->ctx, e->queue, OCLF_F32, 1, n, k, (oclf_buf){mx, 0, 0}, &qw.w,
                            (oclf_buf){my, 0, 0}, OCLF_LINEAR_NONE, NULL, &chs[p], 0, NULL, NULL));
        th_download(my, y, sizeof y);
        if (!(fabs(y[0] - want0) <= 1e-5 * (fabs(want0) + mag0) && isnan(y[1]) && !isfinite(y[2])) &&
            used < sizeof failures)
            used += (size_t)snprintf(failures + used, sizeof failures - used,
                                     "\n  %s: y is %g %g %g", choice_name(&chs[p]), (double)y[0],
                                     (double)y[1], (double)y[2]);
    }
    ck_assert_msg(!used, "%s: expected %g, NaN, not finite:%s", fmt_name(f), want0, failures);
    free(x), free(wd);
    clReleaseMemObject(mx), clReleaseMemObject(my);
    qdev_free(&qw);
}
END_TEST

/* Weights outside the 16-bit range reach the fp32 products whole on every
 * path and structure: INT8 per channel, f32 scale 1000 and every int8 100
 * (w = 1e5, beyond f16's 65504), x = 2^-14; and scale 1e-7 (w = 1e-5, an f16
 * subnormal), x = 1. 128 rows make the CPU's default dequantize a tile of W
 * first (PRE); 4 rows with PRE asked for take the same strategy. The
 * matrix-unit structures (f16 and bf16), whose tile holds the integers and
 * whose scales stay f32, too. */
START_TEST(test_wide_weights)
{
    th_env *e = th_get();
    const oclf_dtype dt = dtypes[_i % 3];
    const int big = _i / 3;
    const size_t n = 1, k = 32, es = oclf_dtype_size(dt);
    const float scale = big ? 1000.0f : 1e-7f, xv = big ? 0x1p-14f : 1.0f;
    const double want = (double)k * (double)xv * 100.0 * (double)scale;
    qdev qw = qdev_random(&formats[F_INT8_G0_F32], n, k, 0, 0, 0, 0, 7);
    for (size_t c = 0; c < k; c++)
        qw.q[c] = 100;
    ((float *)qw.s)[0] = scale;
    qdev_upload(&qw);
    const oclf_choice chs[] = {
        th_choice(OCLF_PATH_FUSED),
        th_choice(OCLF_PATH_UNFUSED),
        parse_choice("MB=2,NB=4,VEC=8,WGM=2,WGN=1,STAGE=0,KC=16,MV=0,QSCALE=0,PRE=1"),
        parse_choice("MB=1,NB=2,VEC=4,WGM=2,WGN=4,STAGE=1,KC=32,MV=0,QSCALE=0,PRE=1"),
        parse_choice("MB=1,NB=2,VEC=4,WGM=2,WGN=4,STAGE=1,KC=32,MV=0,QSCALE=0,PRE=0"),
        parse_choice(mu_structures[0]),
        parse_choice(mu_structures[2]),
    };
    const double tol = dt == OCLF_F32 ? 1e-6 : dt == OCLF_F16 ? 1e-3 : 8e-3;
    for (size_t rows = 4; rows <= 128; rows += 124)
        for (size_t p = 0; p < sizeof chs / sizeof chs[0] - (dt == OCLF_F32 ? 2 : 0); p++) {
            void *x = malloc(rows * k * es), *y = malloc(rows * es);
            for (size_t i = 0; i < rows * k; i++)
                oclf_ref_set(dt, x, i, xv);
            cl_mem mx = th_upload(x, rows * k * es), my = th_alloc(rows * es);
            TH_OK(oclf_linear_q(e->ctx, e->queue, dt, rows, n, k, (oclf_buf){mx, 0, 0}, &qw.w,
                                (oclf_buf){my, 0, 0}, OCLF_LINEAR_NONE, NULL, &chs[p], 0, NULL,
                                NULL));
            th_download(my, y, rows * es);
            for (size_t r = 0; r < rows; r++) {
                const double got = oclf_ref_get(dt, y, r);
                ck_assert_msg(fabs(got - want) <= tol * want,
                              "%s, %zu rows (%s): y[%zu] = %g, expected %g", oclf_dtype_name(dt),
                              rows, choice_name(&chs[p]), r, got, want);
            }
            free(x), free(y);
            clReleaseMemObject(mx), clReleaseMemObject(my);
        }
    qdev_free(&qw);
}
END_TEST

/* ---- the GGUF rewrite --------------------------------------------------- */

/* The header's rewrite on the host: Q8_0 to INT8 group 32 (the int8 bytes,
 * d as the scale), Q4_0 to INT4 group 32 (weight j of a block to INT4's
 * nibble position, d as the scale), into arrays at the given offsets and
 * strides; bytes outside the ranges keep `fill`. */
static void host_convert(const qdev *src, uint8_t *q, size_t qoff, size_t qs, uint16_t *s,
                         size_t soff, size_t ss)
{
    const int q4 = src->f.format == OCLF_QFORMAT_Q4_0;
    const size_t bb = q4 ? 18 : 34;
    for (size_t r = 0; r < src->n; r++)
        for (size_t b = 0; b < src->k / 32; b++) {
            const uint8_t *blk = src->q + src->qoff + r * src->qs + b * bb;
            s[soff + r * ss + b] = (uint16_t)(blk[0] | (unsigned)blk[1] << 8);
            uint8_t *out = q + qoff + r * qs + b * (q4 ? 16 : 32);
            if (!q4) {
                memcpy(out, blk + 2, 32);
                continue;
            }
            for (int i = 0; i < 16; i++) {
                unsigned nib[2];
                for (int h = 0; h < 2; h++) {
                    const int j = 2 * i + h;
                    nib[h] = j < 16 ? blk[2 + j] & 15u : (unsigned)blk[2 + j - 16] >> 4;
                }
                out[i] = (uint8_t)(nib[0] | nib[1] << 4);
            }
        }
}

/* Converts `src` on the device into a new weight `dst` (offsets and padded
 * rows, filled with a sentinel first) and checks every byte of dst against
 * the host rewrite, the sentinel outside the ranges. dst's host copy is
 * what the device holds. */
static void convert_into(const qdev *src, qdev *dst, int to_int4)
{
    th_env *e = th_get();
    memset(dst, 0, sizeof *dst);
    dst->f = (qfmt){to_int4 ? OCLF_QFORMAT_INT4 : OCLF_QFORMAT_INT8, 32, OCLF_F16, 0};
    dst->n = src->n;
    dst->k = src->k;
    dst->qoff = 3;
    dst->qs = q_row_bytes(&dst->f, src->k) + 5;
    dst->qn = dst->qoff + dst->n * dst->qs + 7;
    dst->soff = 2;
    dst->ss = src->k / 32 + 1;
    dst->sn = dst->soff + dst->n * dst->ss + 3;
    dst->q = malloc(dst->qn);
    dst->s = malloc(dst->sn * 2);
    memset(dst->q, 0xa5, dst->qn);
    memset(dst->s, 0xa5, dst->sn * 2);
    uint8_t *wq = malloc(dst->qn);
    uint16_t *ws = malloc(dst->sn * 2);
    memcpy(wq, dst->q, dst->qn);
    memcpy(ws, dst->s, dst->sn * 2);
    host_convert(src, wq, dst->qoff, dst->qs, ws, dst->soff, dst->ss);
    qdev_upload(dst);
    cl_event ev = NULL;
    TH_OK(oclf_qweight_convert(e->ctx, e->queue, src->n, src->k, &src->w, &dst->w, NULL, 0, NULL,
                               &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    th_download(dst->mq, dst->q, dst->qn);
    th_download(dst->ms, dst->s, dst->sn * 2);
    for (size_t i = 0; i < dst->qn; i++)
        ck_assert_msg(dst->q[i] == wq[i], "%s to %s, %zux%zu: q byte %zu is 0x%02x, expected 0x%02x",
                      fmt_name(&src->f), fmt_name(&dst->f), src->n, src->k, i, dst->q[i], wq[i]);
    for (size_t i = 0; i < dst->sn; i++)
        ck_assert_msg(((uint16_t *)dst->s)[i] == ws[i],
                      "%s to %s, %zux%zu: scale %zu is 0x%04x, expected 0x%04x", fmt_name(&src->f),
                      fmt_name(&dst->f), src->n, src->k, i, ((uint16_t *)dst->s)[i], ws[i]);
    free(wq), free(ws);
}

/* Q8_0 and Q4_0 rewritten, then both forms through oclf_linear_q: the same
 * fp64 weight bit for bit (-0.0 blocks included), results within tolerance
 * of each other and of the reference on several structures. */
START_TEST(test_convert)
{
    const int fmt = _i ? F_Q4_0 : F_Q8_0;
    const qfmt *f = &formats[fmt];
    const size_t n = 7, k = 256;
    qdev src = qdev_random(f, n, k, 6, 4, 0, 0, 4242 + (uint64_t)_i);
    /* a -0.0 block, a negative one and a +0.0 one whatever the draw */
    const size_t bb = f->format == OCLF_QFORMAT_Q8_0 ? 34 : 18;
    put_f16(src.q + src.qoff, 0x8000);
    put_f16(src.q + src.qoff + src.qs + bb, oclf_f32_to_f16(-0.01f));
    put_f16(src.q + src.qoff + 2 * src.qs + 3 * bb, 0x0000);
    /* the other spelling of the block size than the rest of the suite uses */
    src.f.group = src.f.group ? 0 : 32;
    qdev_upload(&src);
    qdev dst;
    convert_into(&src, &dst, f->format == OCLF_QFORMAT_Q4_0);
    double *a = qdev_dequant(&src), *b = qdev_dequant(&dst);
    ck_assert_msg(memcmp(a, b, n * k * sizeof *a) == 0,
                  "%s: the rewritten weight's values differ from the original's", fmt_name(f));
    free(a), free(b);
    const oclf_choice chs[] = {
        th_choice(OCLF_PATH_FUSED),
        th_choice(OCLF_PATH_UNFUSED),
        parse_choice("MB=2,NB=2,VEC=4,WGM=8,WGN=8,STAGE=1,KC=32,MV=0"),
    };
    static const size_t ms[] = {1, 17, 16};
    for (int i = 0; i < 3; i++) {
        if (th_quick() && i > 1)
            continue;
        qcase c = base_case(dtypes[i % 3], fmt, ms[i], n, k);
        c.bias = 1;
        c.res = i % 2;
        c.act = OCLF_LINEAR_GELU;
        c.choice = &chs[i];
        double *scale = NULL;
        void *ra = run_with(&c, &src, &scale);
        void *rb = run_with(&c, &dst, NULL);
        expect_close(&c, ra, rb, scale, "original and rewritten");
        free(ra), free(rb), free(scale);
    }
    qdev_free(&src);
    qdev_free(&dst);
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

static cl_mem bad_y;
static float bad_hy[4 * 8];

static void check_y_untouched(void)
{
    float got[4 * 8];
    clFinish(th_get()->queue);
    th_download(bad_y, got, sizeof got);
    ck_assert_msg(memcmp(got, bad_hy, sizeof got) == 0, "a failing call wrote y");
}

/* Every refusal names the public function first, once. */
static void expect_prefix(const char *fn)
{
    const char *msg = oclf_last_error(th_get()->ctx);
    const size_t len = strlen(fn);
    ck_assert_msg(strncmp(msg, fn, len) == 0 && msg[len] == ':' && msg[len + 1] == ' ' &&
                      msg[len + 2] != 0 && !strstr(msg + len, fn),
                  "'%s' is not one sentence starting with '%s: '", msg, fn);
}

#define EXPECT(call, status)                                                                   \
    do {                                                                                       \
        oclf_status st_ = (call);                                                              \
        ck_assert_msg(st_ == (status), "line %d: %s: got %s, expected %s", __LINE__, #call,    \
                      oclf_status_string(st_), oclf_status_string(status));                    \
        expect_prefix("oclf_linear_q");                                                        \
        check_y_untouched();                                                                   \
    } while (0)

/* A valid weight of each form for M = 4, N = 8, K = 64 in buffers of
 * exactly the size the call reads, and a changed copy for each refusal. */
START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    cl_command_queue q = e->queue;
    const size_t M = 4, N = 8, K = 64;
    th_seed(7);
    float *hx = th_random(OCLF_F32, M * K, -1, 1);
    float *hy = th_random(OCLF_F32, M * N, -1, 1);
    memcpy(bad_hy, hy, sizeof bad_hy);
    uint8_t *bytes = malloc(8192);
    for (size_t i = 0; i < 8192; i++)
        bytes[i] = (uint8_t)th_uniform(0, 256);
    /* small f16 scales and d values, so the valid calls compute finite y */
    for (size_t i = 0; i < 4096; i++)
        put_f16(bytes + 2 * i, 0x2000 | (bytes[2 * i] & 0xff));
    cl_mem mx = th_upload(hx, M * K * 4);
    bad_y = th_upload(hy, M * N * 4);
    cl_mem q8 = th_upload(bytes, N * K), q4 = th_upload(bytes, N * K / 2);
    cl_mem qq8 = th_upload(bytes, N * 2 * 34), qq4 = th_upload(bytes, N * 2 * 18);
    cl_mem s16 = th_upload(bytes, N * 2 * 2), s16short = th_upload(bytes, N * 2 * 2 - 2);
    cl_mem sf32 = th_upload(bytes, N * 4), z = th_upload(bytes, N * 2);
    cl_mem big = th_upload(bytes, 8192), qshort = th_upload(bytes, N * K / 2 - 1);
    const oclf_buf X = {mx, 0, 0}, Y = {bad_y, 0, 0}, Znone = {NULL, 0, 0};
    oclf_buf zb = {z, 0, 0};
    const oclf_qweight int8g32 = {sizeof(oclf_qweight), OCLF_QFORMAT_INT8, 32, {q8, 0, 0},
                                  {s16, 0, 0}, OCLF_F16, NULL};
    const oclf_qweight int8g0 = {sizeof(oclf_qweight), OCLF_QFORMAT_INT8, 0, {q8, 0, 0},
                                 {sf32, 0, 0}, OCLF_F32, NULL};
    const oclf_qweight int4z = {sizeof(oclf_qweight), OCLF_QFORMAT_INT4, 32, {q4, 0, 0},
                                {s16, 0, 0}, OCLF_F16, &zb};
    const oclf_qweight q80 = {sizeof(oclf_qweight), OCLF_QFORMAT_Q8_0, 32, {qq8, 0, 0},
                              {NULL, 0, 0}, OCLF_F16, NULL};
    const oclf_qweight q40 = {sizeof(oclf_qweight), OCLF_QFORMAT_Q4_0, 0, {qq4, 0, 0}, {NULL, 0, 0},
                              OCLF_F16, NULL};
    oclf_qweight w;
#define LQ(ctx_, q_, dt_, m_, n_, k_, x_, w_, y_, ep_, ch_, ne_)                                   \
    oclf_linear_q(ctx_, q_, dt_, m_, n_, k_, x_, w_, y_, OCLF_LINEAR_NONE, ep_, ch_, ne_, NULL,    \
                  NULL)
#define CALL(w_) LQ(e->ctx, q, OCLF_F32, M, N, K, X, w_, Y, NULL, NULL, 0)

    /* the valid calls succeed, then y is put back */
    const oclf_qweight *valid[] = {&int8g32, &int8g0, &int4z, &q80, &q40};
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++)
        TH_OK(CALL(valid[i]));
    /* GGUF weights carry their scales: scale_dtype is not read */
    w = q40;
    w.scale_dtype = OCLF_BF16;
    TH_OK(CALL(&w));
    w = q80;
    w.scale_dtype = (oclf_dtype)7;
    TH_OK(CALL(&w));
    clEnqueueWriteBuffer(q, bad_y, CL_TRUE, 0, sizeof bad_hy, bad_hy, 0, NULL, NULL);

    /* handles and the statuses of oclf_linear */
    ck_assert_int_eq(LQ(NULL, q, OCLF_F32, M, N, K, X, &int8g32, Y, NULL, NULL, 0),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_msg(oclf_last_error(NULL)[0] != 0, "no sentence for a NULL context");
    EXPECT(LQ(e->ctx, NULL, OCLF_F32, M, N, K, X, &int8g32, Y, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &int8g32, Y, NULL, NULL, 1),
           OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, (oclf_dtype)5, M, N, K, X, &int8g32, Y, NULL, NULL, 0), OCLF_UNSUPPORTED);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, 0, K, X, &int8g32, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, (size_t)1 << 31, N, K, X, &int8g32, Y, NULL, NULL, 0),
           OCLF_UNSUPPORTED);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, Znone, &int8g32, Y, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &int8g32, Znone, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    oclf_linear_epilogue ep;
    oclf_linear_epilogue_init(&ep);
    ep.alpha = INFINITY;
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &int8g32, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT);
    oclf_choice ch = parse_choice("MB=2,NB=2,VEC=8,WGM=1,WGN=16,STAGE=1,KC=16,MV=1");
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &int8g32, Y, NULL, &ch, 0), OCLF_INVALID_ARGUMENT);

    /* the weight itself */
    EXPECT(CALL(NULL), OCLF_INVALID_ARGUMENT);
    static const int bad_formats[] = {0, OCLF_QFORMAT_COUNT_, 99};
    for (int i = 0; i < 3; i++) {
        w = int8g32;
        w.format = (oclf_qformat)bad_formats[i];
        EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    }
    w = int8g32;
    w.q.mem = NULL;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.scale.mem = NULL;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);

    /* groups the format does not take */
    const struct { const oclf_qweight *base; unsigned group; } bad_groups[] = {
        {&int4z, 16}, {&int4z, 0}, {&int4z, 256}, {&int8g32, 48}, {&int8g32, 16},
        {&int8g32, 256}, {&q40, 64}, {&q80, 16}, {&q80, 64},
    };
    for (size_t i = 0; i < sizeof bad_groups / sizeof *bad_groups; i++) {
        w = *bad_groups[i].base;
        w.group = bad_groups[i].group;
        EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    }
    /* K not a multiple of the group (every buffer large enough for it) */
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, 48, X, &int4z, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, 48, X, &q80, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, 48, X, &q40, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.group = 64;
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, 32, X, &w, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT);

    /* scale dtypes: f32 only per channel, bf16 and unknown ones nowhere */
    w = int8g32;
    w.scale = (oclf_buf){big, 0, 0};
    w.scale_dtype = OCLF_F32;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int4z;
    w.scale = (oclf_buf){big, 0, 0};
    w.scale_dtype = OCLF_F32;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g0;
    w.scale_dtype = OCLF_BF16;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.scale_dtype = OCLF_BF16;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int4z;
    w.scale_dtype = OCLF_BF16;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g0;
    w.scale_dtype = (oclf_dtype)7;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);

    /* buffers smaller than the ranges described */
    w = int8g32;
    w.scale.offset = 1;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.scale.mem = s16short;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.scale.stride = 3;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g0;
    w.scale.offset = 1;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.q.offset = 1;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int4z;
    w.q.mem = qshort;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int4z;
    w.q.stride = K / 2 + 1;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q80;
    w.q.offset = 2;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q40;
    w.q.stride = 38;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    oclf_buf zoff = {z, 1, 0}, zstride = {z, 0, 3};
    w = int4z;
    w.zero = &zoff;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int4z;
    w.zero = &zstride;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    oclf_buf znull = {NULL, 0, 0};
    w = int4z;
    w.zero = &znull;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    /* row strides below the packed rows */
    w = int8g32;
    w.q.stride = K - 1;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q80;
    w.q = (oclf_buf){big, 0, 66};
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = int8g32;
    w.scale.stride = 1;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);

    /* zero points only with INT4; scales never with GGUF */
    const oclf_qweight *nozero[] = {&int8g32, &int8g0, &q80, &q40};
    for (int i = 0; i < 4; i++) {
        w = *nozero[i];
        w.zero = &zb;
        EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    }
    w = q80;
    w.scale = (oclf_buf){s16, 0, 0};
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q40;
    w.scale = (oclf_buf){s16, 0, 0};
    w.scale_dtype = OCLF_F16;
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);

    /* GGUF rows hold f16 at even bytes (buffers large enough either way) */
    w = q40;
    w.q = (oclf_buf){big, 1, 0};
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q80;
    w.q = (oclf_buf){big, 1, 0};
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q80;
    w.q = (oclf_buf){big, 0, 69};
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);
    w = q40;
    w.q = (oclf_buf){big, 0, 37};
    EXPECT(CALL(&w), OCLF_INVALID_ARGUMENT);

    /* y over any part of the weight: q at bytes [0, 512) of `big`, the
     * scales at [1024, 1056), the zero points at [1536, 1552); y is 128
     * bytes */
    oclf_buf zbig = {big, 1536, 0};
    const oclf_qweight in_big = {sizeof(oclf_qweight), OCLF_QFORMAT_INT4, 32, {big, 0, 0},
                                 {big, 512, 0}, OCLF_F16, &zbig};
    const oclf_qweight in_big8 = {sizeof(oclf_qweight), OCLF_QFORMAT_INT8, 32, {big, 0, 0},
                                  {big, 512, 0}, OCLF_F16, NULL};
    const oclf_qweight in_big_q80 = {sizeof(oclf_qweight), OCLF_QFORMAT_Q8_0, 32, {big, 0, 0},
                                     {NULL, 0, 0}, OCLF_F16, NULL};
    const oclf_buf y_on_q = {big, 32, 0}, y_on_s = {big, 250, 0}, y_on_z = {big, 380, 0};
    const oclf_buf y_on_q80 = {big, 100, 0}, y_beside = {big, 600, 0};
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &in_big8, y_on_q, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &in_big8, y_on_s, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &in_big, y_on_z, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    EXPECT(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &in_big_q80, y_on_q80, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT);
    uint8_t *after = malloc(8192);
    th_download(big, after, 8192);
    ck_assert_msg(memcmp(after, bytes, 8192) == 0, "a refused y over the weight was written");
    free(after);
    /* y in the weight's buffer but beside every part of it is fine */
    TH_OK(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &in_big, y_beside, NULL, NULL, 0));
    TH_OK(LQ(e->ctx, q, OCLF_F32, M, N, K, X, &in_big_q80, y_beside, NULL, NULL, 0));

    /* M = 0 succeeds and writes nothing */
    cl_event ev = NULL;
    TH_OK(oclf_linear_q(e->ctx, q, OCLF_F32, 0, N, K, X, &int4z, Y, OCLF_LINEAR_NONE, NULL, NULL, 0,
                        NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
    check_y_untouched();
#undef CALL
#undef LQ
    clReleaseMemObject(mx), clReleaseMemObject(bad_y), clReleaseMemObject(q8);
    clReleaseMemObject(q4), clReleaseMemObject(qq8), clReleaseMemObject(qq4);
    clReleaseMemObject(s16), clReleaseMemObject(s16short), clReleaseMemObject(sf32);
    clReleaseMemObject(z), clReleaseMemObject(big), clReleaseMemObject(qshort);
    free(hx), free(hy), free(bytes);
}
END_TEST

/* oclf_qweight_convert's refusals leave both destination buffers as they
 * were. */
START_TEST(test_convert_bad_arguments)
{
    th_env *e = th_get();
    cl_command_queue q = e->queue;
    const size_t N = 4, K = 64;
    uint8_t *bytes = malloc(4096), *sentinel = malloc(4096), *got = malloc(4096);
    th_seed(11);
    for (size_t i = 0; i < 4096; i++)
        bytes[i] = (uint8_t)th_uniform(0, 256);
    memset(sentinel, 0xa5, 4096);
    cl_mem sq8 = th_upload(bytes, N * 2 * 34), sq4 = th_upload(bytes, N * 2 * 18);
    cl_mem dq = th_upload(sentinel, N * K), ds = th_upload(sentinel, N * 2 * 2);
    cl_mem dsshort = th_upload(sentinel, N * 2 * 2 - 2), ss16 = th_upload(bytes, N * 2 * 2);
    const oclf_qweight q80 = {sizeof(oclf_qweight), OCLF_QFORMAT_Q8_0, 32, {sq8, 0, 0},
                              {NULL, 0, 0}, OCLF_F16, NULL};
    const oclf_qweight q40 = {sizeof(oclf_qweight), OCLF_QFORMAT_Q4_0, 32, {sq4, 0, 0},
                              {NULL, 0, 0}, OCLF_F16, NULL};
    const oclf_qweight to8 = {sizeof(oclf_qweight), OCLF_QFORMAT_INT8, 32, {dq, 0, 0}, {ds, 0, 0},
                              OCLF_F16, NULL};
    const oclf_qweight to4 = {sizeof(oclf_qweight), OCLF_QFORMAT_INT4, 32, {dq, 0, 0}, {ds, 0, 0},
                              OCLF_F16, NULL};
    const oclf_qweight int8src = {sizeof(oclf_qweight), OCLF_QFORMAT_INT8, 32, {sq8, 0, 0},
                                  {ss16, 0, 0}, OCLF_F16, NULL};
    const oclf_qweight int4src = {sizeof(oclf_qweight), OCLF_QFORMAT_INT4, 32, {sq4, 0, 0},
                                  {ss16, 0, 0}, OCLF_F16, NULL};
    oclf_buf zb = {ss16, 0, 0};
    oclf_qweight s, d;
#define CONV(n_, k_, src_, dst_)                                                                   \
    oclf_qweight_convert(e->ctx, q, n_, k_, src_, dst_, NULL, 0, NULL, NULL)
#define EXPECT_CONV(call)                                                                      \
    do {                                                                                       \
        oclf_status st_ = (call);                                                              \
        ck_assert_msg(st_ == OCLF_INVALID_ARGUMENT, "line %d: %s: got %s", __LINE__, #call,    \
                      oclf_status_string(st_));                                                \
        expect_prefix("oclf_qweight_convert");                                                 \
        clFinish(q);                                                                           \
        th_download(dq, got, N * K);                                                           \
        ck_assert_msg(memcmp(got, sentinel, N * K) == 0, "line %d: dst q was written",        \
                      __LINE__);                                                               \
        th_download(ds, got, N * 2 * 2);                                                       \
        ck_assert_msg(memcmp(got, sentinel, N * 2 * 2) == 0, "line %d: dst scales were written", \
                      __LINE__);                                                               \
        th_download(sq8, got, N * 2 * 34);                                                     \
        ck_assert_msg(memcmp(got, bytes, N * 2 * 34) == 0, "line %d: Q8_0 src was written",    \
                      __LINE__);                                                               \
        th_download(sq4, got, N * 2 * 18);                                                     \
        ck_assert_msg(memcmp(got, bytes, N * 2 * 18) == 0, "line %d: Q4_0 src was written",    \
                      __LINE__);                                                               \
    } while (0)

    ck_assert_int_eq(oclf_qweight_convert(NULL, q, N, K, &q80, &to8, NULL, 0, NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    EXPECT_CONV(oclf_qweight_convert(e->ctx, NULL, N, K, &q80, &to8, NULL, 0, NULL, NULL));
    EXPECT_CONV(CONV(N, K, NULL, &to8));
    EXPECT_CONV(CONV(N, K, &q80, NULL));
    EXPECT_CONV(oclf_qweight_convert(e->ctx, q, N, K, &q80, &to8, NULL, 1, NULL, NULL));
    /* src not GGUF */
    EXPECT_CONV(CONV(N, K, &int8src, &to8));
    EXPECT_CONV(CONV(N, K, &int4src, &to4));
    s = q80;
    s.format = (oclf_qformat)9;
    EXPECT_CONV(CONV(N, K, &s, &to8));
    /* dst of another form */
    EXPECT_CONV(CONV(N, K, &q80, &to4));
    EXPECT_CONV(CONV(N, K, &q40, &to8));
    d = to8;
    d.group = 64;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to8;
    d.group = 0;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to8;
    d.scale_dtype = OCLF_F32;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to4;
    d.zero = &zb;
    EXPECT_CONV(CONV(N, K, &q40, &d));
    d = to8;
    d.format = OCLF_QFORMAT_Q8_0;
    d.scale.mem = NULL;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to8;
    d.scale.mem = NULL;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    /* K not a multiple of a block */
    EXPECT_CONV(CONV(N, 48, &q80, &to8));
    /* buffers too small: dst q, dst scales, src q */
    d = to8;
    d.q.offset = 1;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to8;
    d.scale.mem = dsshort;
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to4;
    d.scale.stride = 3;
    EXPECT_CONV(CONV(N, K, &q40, &d));
    s = q80;
    s.q.offset = 2;
    EXPECT_CONV(CONV(N, K, &s, &to8));
    /* a GGUF src at an odd byte (of a buffer large enough for it) */
    s = q40;
    s.q = (oclf_buf){sq8, 1, 0};
    EXPECT_CONV(CONV(N, K, &s, &to4));
    /* dst over src */
    d = to8;
    d.q = (oclf_buf){sq8, 0, 0};
    EXPECT_CONV(CONV(N, K, &q80, &d));
    d = to4;
    d.scale = (oclf_buf){sq4, 0, 0};
    EXPECT_CONV(CONV(N, K, &q40, &d));
    /* dst's scales over its own q */
    d = to8;
    d.scale = (oclf_buf){dq, 8, 0};
    EXPECT_CONV(CONV(N, K, &q80, &d));
    /* the valid calls after all the failures */
    TH_OK(CONV(N, K, &q80, &to8));
    TH_OK(CONV(N, K, &q40, &to4));
#undef EXPECT_CONV
#undef CONV
    clFinish(q);
    clReleaseMemObject(sq8), clReleaseMemObject(sq4), clReleaseMemObject(dq);
    clReleaseMemObject(ds), clReleaseMemObject(dsshort), clReleaseMemObject(ss16);
    free(bytes), free(sentinel), free(got);
}
END_TEST

static Suite *linear_quant_suite(void)
{
    Suite *s = suite_create("linear_quant");
    TCase *k = tcase_create("known");
    tcase_set_timeout(k, 0);
    tcase_add_loop_test(k, test_known, 0, NKNOWN);
    suite_add_tcase(s, k);
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_formats, 0, NFORMATS);
    tcase_add_loop_test(t, test_rows, 0, 6);
    tcase_add_loop_test(t, test_cols, 0, 4);
    tcase_add_loop_test(t, test_empty_k, 0, 3);
    tcase_add_loop_test(t, test_epilogues, 0, th_quick() ? 5 : 15);
    tcase_add_loop_test(t, test_strides_inplace, 0, th_quick() ? 4 : 8);
    tcase_add_loop_test(t, test_structures, 0, th_quick() ? 3 : NSTRUCT);
    tcase_add_loop_test(t, test_nonfinite_scales, 0, 5);
    tcase_add_loop_test(t, test_wide_weights, 0, 6);
    tcase_add_loop_test(t, test_unfused_tiles, 0, th_quick() ? 1 : 2);
    suite_add_tcase(s, t);
    TCase *mv = tcase_create("matrix_vector");
    tcase_set_timeout(mv, 0);
    tcase_add_loop_test(mv, test_mv, 0, th_quick() ? 4 : NFORMATS);
    suite_add_tcase(s, mv);
    TCase *mu = tcase_create("matrix_units");
    tcase_set_timeout(mu, 0);
    tcase_add_loop_test(mu, test_matrix_units, 0, 2 * NFORMATS);
    tcase_add_test(mu, test_matrix_units_refused);
    suite_add_tcase(s, mu);
    TCase *c = tcase_create("convert");
    tcase_set_timeout(c, 0);
    tcase_add_loop_test(c, test_convert, 0, 2);
    suite_add_tcase(s, c);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    tcase_add_test(b, test_convert_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(linear_quant_suite()); }
