/* Descriptors of act_and_mul (SiLU-and-multiply) and its gradient,
 * act_and_mul_backward, for the benchmark and the tuner. */
#include "opdesc.h"

#include "ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct act_inst {
    oclf_dtype dtype;
    size_t rows, d;
    oclf_activation act;
    void *hin;
    void *hdout;  /* backward: the output gradient */
    double *want; /* reference, computed on first verify */
    cl_mem in, out;
    cl_mem dout, din; /* backward */
} act_inst;

static void act_destroy(void *p)
{
    act_inst *a = p;
    if (!a)
        return;
    if (a->in)
        clReleaseMemObject(a->in);
    if (a->out)
        clReleaseMemObject(a->out);
    if (a->dout)
        clReleaseMemObject(a->dout);
    if (a->din)
        clReleaseMemObject(a->din);
    free(a->hin), free(a->hdout), free(a->want);
    free(a);
}

static void *act_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                        size_t errlen)
{
    act_inst *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    a->dtype = dt;
    a->rows = s->d[0];
    a->d = s->d[1];
    a->act.kind = OCLF_ACT_SILU;
    const size_t es = oclf_dtype_size(dt), n = a->rows * 2 * a->d;
    if (!(a->hin = malloc(n * es + 1))) {
        snprintf(err, errlen, "out of host memory for %zu x %zu", a->rows, 2 * a->d);
        act_destroy(a);
        return NULL;
    }
    op_fill_random(dt, a->hin, n, -4.0f, 4.0f, 1);
    if (!(a->in = op_upload(env, a->hin, n * es, err, errlen)) ||
        !(a->out = op_upload(env, NULL, n / 2 * es, err, errlen))) {
        act_destroy(a);
        return NULL;
    }
    return a;
}

static oclf_status act_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    act_inst *a = p;
    return oclf_act_and_mul(env->ctx, env->queue, a->dtype, a->rows, a->d, (oclf_buf){a->in, 0, 0},
                            (oclf_buf){a->out, 0, 0}, &a->act, ch, 0, NULL, ev);
}

static int act_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    act_inst *a = p;
    const size_t n = a->rows * a->d;
    oclf_status st = act_run(env, a, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    if (!a->want && (a->want = malloc((n + 1) * sizeof *a->want)) != NULL)
        oclf_ref_act_and_mul(a->dtype, &a->act, a->rows, a->d, a->hin, 2 * a->d, a->want);
    return op_verify_packed(env, a->out, a->dtype, a->want, a->rows, a->d, msg, len);
}

/* rows x 2d read, rows x d written */
static double act_bytes(const op_shape *s, oclf_dtype dt)
{
    return 3.0 * (double)s->d[0] * (double)s->d[1] * (double)oclf_dtype_size(dt);
}

static int act_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                     oclf_path path, oclf_params *out, int max)
{
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    /* The activations keep several temporaries per element alive: wider
     * vectors spill on a GPU. */
    return op_gpu_vector_cap(env, dt, out, op_row_space(&c, s->d[1], 1, 64, 16, out, max));
}

static const op_kernel_check act_check = {
    "5x77,2x8", "LAYOUT=0,WGS=2,VEC=4;LAYOUT=1,WGS=16,VEC=2", "LAYOUT=1,WGS=16,VEC=4", "4x200", 0,
    1};

const op_desc op_act_and_mul = {
    .name = "act_and_mul",
    .shape_help = "ROWSxD (rows x output width; input rows are 2D wide), SiLU",
    .ndims = 2,
    .dim_names = {"rows", "d"},
    .bench_shapes = "4096x4096,1x13824",
    .bench_full_shapes = "7x5125",
    .uncached_shape = "1024x4096",
    .uncached_dim = 0,
    .tune_shapes = "4096x4096,256x13824,1x13824",
    .llm_shapes = "1x11008,32x11008,512x14336,1x13824,2048x13824",
    .layer_shapes = "1x14336,16x14336,512x14336",
    .test_shape = "7x769",
    .has_unfused = 1,
    .create = act_create,
    .run = act_run,
    .verify = act_verify,
    .min_bytes = act_bytes,
    .flops = NULL,
    .destroy = act_destroy,
    .space = act_space,
    .kernel_check = &act_check,
};

/* ---- act_and_mul_backward: SiLU, out of place (din beside in) ----------- */

static void *actb_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                         size_t errlen)
{
    act_inst *a = act_create(env, s, dt, err, errlen);
    if (!a)
        return NULL;
    const size_t es = oclf_dtype_size(dt), n = a->rows * a->d;
    if (!(a->hdout = malloc(n * es + 1))) {
        snprintf(err, errlen, "out of host memory for %zu x %zu", a->rows, a->d);
        act_destroy(a);
        return NULL;
    }
    op_fill_random(dt, a->hdout, n, -2.0f, 2.0f, 2);
    if (!(a->dout = op_upload(env, a->hdout, n * es, err, errlen)) ||
        !(a->din = op_upload(env, NULL, 2 * n * es, err, errlen))) {
        act_destroy(a);
        return NULL;
    }
    return a;
}

static oclf_status actb_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    act_inst *a = p;
    return oclf_act_and_mul_backward(env->ctx, env->queue, a->dtype, a->rows, a->d,
                                     (oclf_buf){a->in, 0, 0}, (oclf_buf){a->dout, 0, 0},
                                     (oclf_buf){a->din, 0, 0}, &a->act, ch, 0, NULL, ev);
}

static int actb_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    act_inst *a = p;
    const size_t n = a->rows * 2 * a->d;
    oclf_status st = actb_run(env, a, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    if (!a->want && (a->want = malloc((n + 1) * sizeof *a->want)) != NULL)
        oclf_ref_act_and_mul_backward(a->dtype, &a->act, a->rows, a->d, a->hin, 2 * a->d,
                                      a->hdout, a->d, a->want);
    if (!a->want) {
        snprintf(msg, len, "out of host memory");
        return 0;
    }
    return op_verify_packed(env, a->din, a->dtype, a->want, a->rows, 2 * a->d, msg, len);
}

/* in (rows x 2d) and dout (rows x d) read once, din (rows x 2d) written once */
static double actb_bytes(const op_shape *s, oclf_dtype dt)
{
    return 5.0 * (double)s->d[0] * (double)s->d[1] * (double)oclf_dtype_size(dt);
}

const op_desc op_act_and_mul_backward = {
    .name = "act_and_mul_backward",
    .shape_help = "ROWSxD (rows x forward output width; in and din rows are 2D wide), SiLU",
    .ndims = 2,
    .dim_names = {"rows", "d"},
    .bench_shapes = "4096x4096,1x13824",
    .bench_full_shapes = "7x5125",
    .uncached_shape = "1024x4096",
    .uncached_dim = 0,
    .tune_shapes = "4096x4096,256x13824,1x13824",
    .llm_shapes = "32x11008,512x14336,2048x13824",
    .test_shape = "7x769",
    .has_unfused = 1,
    .create = actb_create,
    .run = actb_run,
    .verify = actb_verify,
    .min_bytes = actb_bytes,
    .flops = NULL,
    .destroy = act_destroy,
    .space = act_space,
    .kernel_check = &act_check,
};
