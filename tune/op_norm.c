/* Descriptors of the normalization family for the benchmark and the tuner. */
#include "opdesc.h"

#include "ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RMS, ADD_RMS, LN, ADD_LN };

typedef struct norm_inst {
    int kind;
    oclf_dtype dtype;
    size_t rows, cols;
    void *hx, *hr, *hw, *hb; /* host copies of the inputs */
    double *want;            /* reference output, computed on first verify */
    cl_mem x, r, y, w, b;
} norm_inst;

static const float eps = 1e-5f;

static void norm_destroy(void *p)
{
    norm_inst *in = p;
    if (!in)
        return;
    cl_mem mems[5] = {in->x, in->r, in->y, in->w, in->b};
    for (int i = 0; i < 5; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(in->hx), free(in->hr), free(in->hw), free(in->hb), free(in->want);
    free(in);
}

static void *norm_create(int kind, const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                         size_t errlen)
{
    norm_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->kind = kind;
    in->dtype = dt;
    in->rows = s->d[0];
    in->cols = s->d[1];
    const size_t es = oclf_dtype_size(dt), n = in->rows * in->cols;
    in->hx = malloc(n * es + 1);
    in->hr = malloc(n * es + 1);
    in->hw = malloc(in->cols * es);
    in->hb = malloc(in->cols * es);
    if (!in->hx || !in->hr || !in->hw || !in->hb) {
        snprintf(err, errlen, "out of host memory for %zu x %zu", in->rows, in->cols);
        norm_destroy(in);
        return NULL;
    }
    op_fill_random(dt, in->hx, n, -2.0f, 2.0f, 1);
    op_fill_random(dt, in->hr, n, -2.0f, 2.0f, 2);
    op_fill_random(dt, in->hw, in->cols, 0.5f, 1.5f, 3);
    op_fill_random(dt, in->hb, in->cols, -0.5f, 0.5f, 4);
    if (!(in->x = op_upload(env, in->hx, n * es, err, errlen)) ||
        !(in->r = op_upload(env, in->hr, n * es, err, errlen)) ||
        !(in->y = op_upload(env, NULL, n * es, err, errlen)) ||
        !(in->w = op_upload(env, in->hw, in->cols * es, err, errlen)) ||
        !(in->b = op_upload(env, in->hb, in->cols * es, err, errlen))) {
        norm_destroy(in);
        return NULL;
    }
    return in;
}

static oclf_status norm_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    norm_inst *in = p;
    oclf_buf x = {in->x, 0, 0}, r = {in->r, 0, 0}, y = {in->y, 0, 0};
    oclf_buf w = {in->w, 0, 0}, b = {in->b, 0, 0};
    switch (in->kind) {
    case RMS:
        return oclf_rms_norm(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, &w, y, eps, ch,
                             0, NULL, ev);
    case ADD_RMS:
        return oclf_add_rms_norm(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, r, &w,
                                 eps, ch, 0, NULL, ev);
    case LN:
        return oclf_layer_norm(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, &w, &b, y,
                               eps, ch, 0, NULL, ev);
    default:
        return oclf_add_layer_norm(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, r, &w,
                                   &b, y, eps, ch, 0, NULL, ev);
    }
}

static int norm_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    norm_inst *in = p;
    const oclf_dtype dt = in->dtype;
    const size_t es = oclf_dtype_size(dt), n = in->rows * in->cols;
    const int add = in->kind == ADD_RMS || in->kind == ADD_LN;
    if (op_rewrite(env, in->x, in->hx, n * es) || op_rewrite(env, in->r, in->hr, n * es)) {
        snprintf(msg, len, "cannot restore the inputs");
        return 0;
    }
    oclf_status st = norm_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    /* The reference depends only on the inputs, so the tuner, which
     * verifies every candidate of a shape, computes it once. */
    const int fresh = !in->want;
    void *got = malloc(n * es + 1), *res = fresh ? malloc(n * es + 1) : NULL;
    double *want = fresh ? malloc((n + 1) * sizeof *want) : in->want;
    int ok = 0;
    if (got && (res || !fresh) && want &&
        op_download(env, in->kind == ADD_RMS ? in->x : in->y, got, n * es) == 0) {
        if (fresh)
            memcpy(res, in->hr, n * es);
        const void *src = in->hx;
        if (fresh && add) {
            oclf_ref_add_rows(dt, in->rows, in->cols, in->hx, in->cols, res, in->cols);
            src = res;
        }
        if (!fresh)
            ;
        else if (in->kind == RMS || in->kind == ADD_RMS)
            oclf_ref_rms_norm(dt, in->rows, in->cols, src, in->cols, in->hw, eps, want);
        else
            oclf_ref_layer_norm(dt, in->rows, in->cols, src, in->cols, in->hw, in->hb, eps, want);
        in->want = want;
        ok = op_compare(dt, got, in->cols, want, in->rows, in->cols, msg, len);
    } else {
        snprintf(msg, len, "cannot read the result back");
    }
    if (want != in->want)
        free(want);
    free(got), free(res);
    return ok;
}

static double norm_bytes(int kind, const op_shape *s, oclf_dtype dt)
{
    /* rows x cols read and written once per tensor, plus weight (and bias) */
    const double rc = (double)s->d[0] * (double)s->d[1] * (double)oclf_dtype_size(dt);
    const double vec = (double)s->d[1] * (double)oclf_dtype_size(dt);
    switch (kind) {
    case RMS: return 2 * rc + vec;                /* x in, y out */
    case ADD_RMS: return 4 * rc + vec;            /* input, residual in; both out */
    case LN: return 2 * rc + 2 * vec;
    default: return 4 * rc + 2 * vec;             /* input, residual in; residual, out out */
    }
}

/* Both structures; work-group sizes up to the device limit; vector widths.
 * Points the op would reject are left out here, before compiling. */
static int norm_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                      oclf_path path, oclf_params *out, int max)
{
    const uint64_t rows = s->d[0], cols = s->d[1];
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    /* LAYOUT 0 with no more rows per group than there are rows */
    const op_stage_space sp = {.width = cols, .rows = rows, .l0_min = 1,
                               .l0_max = rows < 64 ? (size_t)rows : 64, .l1_min = 16,
                               .rows_need_stage = 0, .l0_stage = 1};
    const int n = op_staged_row_space(&c, &sp, out, max);
    if (!op_is_gpu(env))
        return n;
    /* LAYOUT 0 keeps two sets of row sums per work-item (cl/norm.cl): the
     * vector cap of kernels with several temporaries per element. LAYOUT 1
     * splits a row over the group and keeps one set, twice that; layer
     * norm's 16-lane vectors spilled on Intel's Xe-HPC in every dtype. */
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int64_t layout = 0, vec = 1;
        oclf_params_get(&out[i], "LAYOUT", &layout);
        oclf_params_get(&out[i], "VEC", &vec);
        if (vec <= (layout == 0 ? 1 : 2) * OP_GPU_MAX_VEC_FLOATS)
            out[kept++] = out[i];
    }
    return kept;
}

/* LAYOUT 0 and 1, staged and not; traffic with the row staged in local
 * memory and ROWS covering the shape's rows, so weight and bias are loaded
 * once per work-group. */
static const op_kernel_check norm_check = {
    "5x77,2x8",
    "LAYOUT=0,WGS=2,VEC=4,STAGE=0;LAYOUT=0,WGS=2,VEC=4,STAGE=1;LAYOUT=1,WGS=16,VEC=2,STAGE=0;"
    "LAYOUT=1,WGS=16,VEC=4,STAGE=1",
    "LAYOUT=1,WGS=16,VEC=4,STAGE=1,ROWS=4", "4x200", 0, 1};

#define NORM_DESC(sym, KIND, NAME, LAYER)                                                           \
    static void *sym##_create(const op_env *e, const op_shape *s, oclf_dtype d, char *err,  \
                              size_t n)                                                     \
    {                                                                                       \
        return norm_create(KIND, e, s, d, err, n);                                          \
    }                                                                                       \
    static double sym##_bytes(const op_shape *s, oclf_dtype d) { return norm_bytes(KIND, s, d); } \
    const op_desc op_##sym = {                                                              \
        .name = NAME,                                                                       \
        .shape_help = "ROWSxHIDDEN (rows x hidden size)",                                   \
        .ndims = 2,                                                                         \
        .dim_names = {"rows", "cols"},                                                      \
        .bench_shapes = "4096x4096,1x8192",                                                 \
        .bench_full_shapes = "83x5120",                                                     \
        .uncached_shape = "1024x8192",                                                      \
        .uncached_dim = 0,                                                                  \
        .tune_shapes = "4096x4096,256x4096,1x8192",                                         \
        .llm_shapes = "1x4096,32x4096,512x4096,1x8192,2048x8192",                           \
        .layer_shapes = LAYER,                                                              \
        .test_shape = "7x769",                                                              \
        .has_unfused = 1,                                                                   \
        .create = sym##_create,                                                             \
        .run = norm_run,                                                                    \
        .verify = norm_verify,                                                              \
        .min_bytes = sym##_bytes,                                                           \
        .flops = NULL,                                                                      \
        .destroy = norm_destroy,                                                            \
        .space = norm_space,                                                                \
        .kernel_check = &norm_check,                                                        \
    };

NORM_DESC(rms_norm, RMS, "rms_norm", "1x4096,16x4096,512x4096")
NORM_DESC(add_rms_norm, ADD_RMS, "add_rms_norm", "1x4096,16x4096,512x4096")
NORM_DESC(layer_norm, LN, "layer_norm", NULL)
NORM_DESC(add_layer_norm, ADD_LN, "add_layer_norm", NULL)
