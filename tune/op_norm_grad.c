/* Descriptors of the normalization backward family for the benchmark and
 * the tuner: the weight's gradient wanted (and the bias's for LayerNorm),
 * dx out of place. */
#include "opdesc.h"

#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ng_inst {
    int ln;
    oclf_dtype dtype;
    size_t rows, cols;
    void *hx, *hdy, *hw;  /* host copies of the inputs */
    double *want, *wdw, *wdb; /* reference dx, dw, db, computed on first verify */
    cl_mem x, dy, w, dx, dw, db;
} ng_inst;

static const float eps = 1e-5f;

static void ng_destroy(void *p)
{
    ng_inst *in = p;
    if (!in)
        return;
    cl_mem mems[6] = {in->x, in->dy, in->w, in->dx, in->dw, in->db};
    for (int i = 0; i < 6; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(in->hx), free(in->hdy), free(in->hw), free(in->want), free(in->wdw), free(in->wdb);
    free(in);
}

static void *ng_create(int ln, const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                       size_t errlen)
{
    ng_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->ln = ln;
    in->dtype = dt;
    in->rows = s->d[0];
    in->cols = s->d[1];
    const size_t es = oclf_dtype_size(dt), n = in->rows * in->cols;
    in->hx = malloc(n * es + 1);
    in->hdy = malloc(n * es + 1);
    in->hw = malloc(in->cols * es);
    if (!in->hx || !in->hdy || !in->hw) {
        snprintf(err, errlen, "out of host memory for %zu x %zu", in->rows, in->cols);
        ng_destroy(in);
        return NULL;
    }
    op_fill_random(dt, in->hx, n, -2.0f, 2.0f, 1);
    op_fill_random(dt, in->hdy, n, -1.0f, 1.0f, 2);
    op_fill_random(dt, in->hw, in->cols, 0.5f, 1.5f, 3);
    if (!(in->x = op_upload(env, in->hx, n * es, err, errlen)) ||
        !(in->dy = op_upload(env, in->hdy, n * es, err, errlen)) ||
        !(in->w = op_upload(env, in->hw, in->cols * es, err, errlen)) ||
        !(in->dx = op_upload(env, NULL, n * es, err, errlen)) ||
        !(in->dw = op_upload(env, NULL, in->cols * sizeof(float), err, errlen)) ||
        !(in->db = op_upload(env, NULL, in->cols * sizeof(float), err, errlen))) {
        ng_destroy(in);
        return NULL;
    }
    return in;
}

static oclf_status ng_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    ng_inst *in = p;
    oclf_buf x = {in->x, 0, 0}, dy = {in->dy, 0, 0}, w = {in->w, 0, 0}, dx = {in->dx, 0, 0};
    oclf_buf dw = {in->dw, 0, 0}, db = {in->db, 0, 0};
    if (in->ln)
        return oclf_layer_norm_backward(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, dy,
                                        &w, dx, &dw, &db, eps, ch, 0, NULL, ev);
    return oclf_rms_norm_backward(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, dy, &w,
                                  NULL, dx, &dw, eps, ch, 0, NULL, ev);
}

/* A column sum of rows fp32 terms of size about 1: the fp32 error grows
 * with the rows (chunks of 32 summed in order, then the chunks). */
static int check_grad(const float *got, const double *want, size_t rows, size_t cols,
                      const char *name, char *msg, size_t len)
{
    const double atol = 1e-5 * (32.0 + (double)rows / 32.0), rtol = 1e-4;
    for (size_t c = 0; c < cols; c++)
        if (!(fabs(got[c] - want[c]) <= atol + rtol * fabs(want[c]))) {
            snprintf(msg, len, "%s[%zu] = %.9g, reference %.9g", name, c, (double)got[c],
                     want[c]);
            return 0;
        }
    return 1;
}

static int ng_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    ng_inst *in = p;
    const oclf_dtype dt = in->dtype;
    oclf_status st = ng_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    const size_t n = in->rows * in->cols;
    if (!in->want) {
        /* The reference depends only on the inputs: once per instance. */
        in->want = malloc((n + 1) * sizeof *in->want);
        in->wdw = malloc(in->cols * sizeof *in->wdw);
        in->wdb = malloc(in->cols * sizeof *in->wdb);
        if (!in->want || !in->wdw || !in->wdb) {
            free(in->want), free(in->wdw), free(in->wdb);
            in->want = in->wdw = in->wdb = NULL;
            snprintf(msg, len, "out of host memory");
            return 0;
        }
        oclf_ref_norm_backward(dt, in->ln, in->rows, in->cols, in->hx, in->cols, in->hdy,
                               in->cols, in->hw, NULL, 0, eps, in->want, in->wdw, in->wdb);
    }
    float *g = malloc(in->cols * sizeof *g);
    int ok = 0;
    if (!g)
        snprintf(msg, len, "out of host memory");
    else if (op_download(env, in->dw, g, in->cols * sizeof *g))
        snprintf(msg, len, "cannot read dw back");
    else if (check_grad(g, in->wdw, in->rows, in->cols, "dw", msg, len)) {
        if (!in->ln)
            ok = 1;
        else if (op_download(env, in->db, g, in->cols * sizeof *g))
            snprintf(msg, len, "cannot read db back");
        else
            ok = check_grad(g, in->wdb, in->rows, in->cols, "db", msg, len);
    }
    free(g);
    return ok && op_verify_packed(env, in->dx, dt, in->want, in->rows, in->cols, msg, len);
}

/* The least a backward call moves: x and dy read once, dx written once,
 * the weight read once and dw (and db) written once in fp32. */
static double ng_bytes(int ln, const op_shape *s, oclf_dtype dt)
{
    const double es = (double)oclf_dtype_size(dt);
    const double rc = (double)s->d[0] * (double)s->d[1] * es;
    return 3 * rc + (double)s->d[1] * (es + (ln ? 8.0 : 4.0));
}

/* Both structures; LAYOUT 0 with no more chunks (of 32 rows) per group
 * than there are chunks; vector widths up to the width. GPUs: LAYOUT 1
 * only. LAYOUT 0 runs a chunk of 32 rows on one work-item (4096 rows are
 * 128 work-items, far too few for a GPU), and its one-pass statistics
 * keep eight 8-float sums: the fused kernels spilled in every such point
 * on Xe-HPC (86-120) and in LayerNorm's on RDNA3, none in LAYOUT 1. */
static int ng_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                    oclf_path path, oclf_params *out, int max)
{
    const uint64_t chunks = (s->d[0] + 31) / 32, cols = s->d[1];
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    int n = op_row_space(&c, cols, 1, chunks < 64 ? (size_t)(chunks ? chunks : 1) : 64, 16, out,
                         max);
    if (!op_is_gpu(env))
        return n;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int64_t layout = 0;
        oclf_params_get(&out[i], "LAYOUT", &layout);
        if (layout == 1)
            out[kept++] = out[i];
    }
    return op_gpu_vector_cap(env, dt, out, kept);
}

/* LAYOUT 0 and 1 with vector tails (77 = 4 x 19 + 1), several chunks of 32
 * rows with a partial last one (70 rows), one row, a narrow row. */
static const op_kernel_check ng_check = {
    "70x77,2x8,1x3",
    "LAYOUT=0,WGS=2,VEC=4;LAYOUT=0,WGS=1,VEC=1;LAYOUT=1,WGS=16,VEC=2;LAYOUT=1,WGS=16,VEC=4",
    "LAYOUT=1,WGS=16,VEC=4", "4x200", 0, 0};

#define NG_DESC(sym, LN)                                                                   \
    static void *sym##_create(const op_env *e, const op_shape *s, oclf_dtype d, char *err, \
                              size_t n)                                                    \
    {                                                                                      \
        return ng_create(LN, e, s, d, err, n);                                             \
    }                                                                                      \
    static double sym##_bytes(const op_shape *s, oclf_dtype d) { return ng_bytes(LN, s, d); } \
    const op_desc op_##sym = {                                                             \
        .name = #sym,                                                                      \
        .shape_help = "ROWSxHIDDEN (rows x hidden size)",                                  \
        .ndims = 2,                                                                        \
        .dim_names = {"rows", "cols"},                                                     \
        .bench_shapes = "4096x4096,1x8192",                                                \
        .bench_full_shapes = "83x5120",                                                    \
        .uncached_shape = "1024x8192",                                                     \
        .uncached_dim = 0,                                                                 \
        .tune_shapes = "4096x4096,256x4096,1x8192",                                        \
        .llm_shapes = "512x4096,2048x8192",                                                \
        .test_shape = "70x769",                                                            \
        .has_unfused = 1,                                                                  \
        .create = sym##_create,                                                            \
        .run = ng_run,                                                                     \
        .verify = ng_verify,                                                               \
        .min_bytes = sym##_bytes,                                                          \
        .flops = NULL,                                                                     \
        .destroy = ng_destroy,                                                             \
        .space = ng_space,                                                                 \
        .kernel_check = &ng_check,                                                         \
    };

NG_DESC(rms_norm_backward, 0)
NG_DESC(layer_norm_backward, 1)
