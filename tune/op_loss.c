/* Descriptor of the loss family (softmax cross-entropy) for the benchmark
 * and the tuner: mean reduction with the gradient written over the logits,
 * one target in 16 ignored. */
#include "opdesc.h"

#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ce_inst {
    oclf_dtype dtype;
    size_t rows, cols;
    void *hx;       /* host copy of the logits */
    int64_t *ht;    /* targets */
    double *want;   /* reference gradient, computed on first verify */
    double want_loss;
    cl_mem x, t, loss;
} ce_inst;

static void ce_destroy(void *p)
{
    ce_inst *in = p;
    if (!in)
        return;
    cl_mem mems[3] = {in->x, in->t, in->loss};
    for (int i = 0; i < 3; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(in->hx), free(in->ht), free(in->want);
    free(in);
}

static void *ce_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                       size_t errlen)
{
    ce_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->dtype = dt;
    in->rows = s->d[0];
    in->cols = s->d[1];
    const size_t es = oclf_dtype_size(dt), n = in->rows * in->cols;
    in->hx = malloc(n * es + 1);
    in->ht = malloc((in->rows + 1) * sizeof *in->ht);
    if (!in->hx || !in->ht) {
        snprintf(err, errlen, "out of host memory for %zu x %zu", in->rows, in->cols);
        ce_destroy(in);
        return NULL;
    }
    op_fill_random(dt, in->hx, n, -4.0f, 4.0f, 1);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (size_t r = 0; r < in->rows; r++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        in->ht[r] = r % 16 == 5 ? -100 : (int64_t)((state >> 33) % in->cols);
    }
    if (!(in->x = op_upload(env, in->hx, n * es, err, errlen)) ||
        !(in->t = op_upload(env, in->ht, (in->rows + 1) * sizeof *in->ht, err, errlen)) ||
        !(in->loss = op_upload(env, NULL, sizeof(float), err, errlen))) {
        ce_destroy(in);
        return NULL;
    }
    return in;
}

static oclf_status ce_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    ce_inst *in = p;
    oclf_buf x = {in->x, 0, 0}, t = {in->t, 0, 0}, l = {in->loss, 0, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    o.compute_grad = 1;
    return oclf_cross_entropy(env->ctx, env->queue, in->dtype, in->rows, in->cols, x, t, l, &o,
                              ch, 0, NULL, ev);
}

static int ce_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    ce_inst *in = p;
    const oclf_dtype dt = in->dtype;
    const size_t es = oclf_dtype_size(dt), n = in->rows * in->cols;
    if (op_rewrite(env, in->x, in->hx, n * es)) {
        snprintf(msg, len, "cannot restore the logits");
        return 0;
    }
    oclf_status st = ce_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    if (!in->want) {
        in->want = malloc((n + 1) * sizeof *in->want);
        if (!in->want) {
            snprintf(msg, len, "out of host memory");
            return 0;
        }
        oclf_ref_cross_entropy(dt, in->rows, in->cols, in->hx, in->cols, in->ht, -100, 2, 0.0,
                               0.0, 0.0, NULL, NULL, NULL, &in->want_loss, in->want);
    }
    float loss = 0;
    if (op_download(env, in->loss, &loss, sizeof loss)) {
        snprintf(msg, len, "cannot read the loss back");
        return 0;
    }
    double atol, rtol;
    oclf_ref_tolerance(OCLF_F32, &atol, &rtol);
    /* the loss is an fp32 mean of fp32 row losses */
    if (!(fabs(loss - in->want_loss) <= 1e-4 + 1e-4 * fabs(in->want_loss))) {
        snprintf(msg, len, "loss %.9g, reference %.9g", (double)loss, in->want_loss);
        return 0;
    }
    return op_verify_packed(env, in->x, dt, in->want, in->rows, in->cols, msg, len);
}

/* Every call waits on the host for its targets check (a read of one int),
 * so the bench must not enqueue it behind a held queue. */
static int ce_blocks(const void *p)
{
    (void)p;
    return 1;
}

/* The logits read twice (statistics, gradient), the gradient written once,
 * the targets read once. */
static double ce_bytes(const op_shape *s, oclf_dtype dt)
{
    const double rc = (double)s->d[0] * (double)s->d[1] * (double)oclf_dtype_size(dt);
    return 3 * rc + 8.0 * (double)s->d[0];
}

static int ce_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                    oclf_path path, oclf_params *out, int max)
{
    const uint64_t rows = s->d[0], cols = s->d[1];
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    const int n = op_row_space(&c, cols, 1, rows < 64 ? (size_t)rows : 64, 16, out, max);
    return op_gpu_vector_cap(env, dt, out, n);
}

/* LAYOUT 0 and 1 with vector tails (77 = 4 x 19 + 1), several groups.
 * Vectors of at most 4: oclgrind 21.10 marks the result of an 8- or
 * 16-lane select() (CE_ONLINE) as uninitialized, though each lane is
 * defined; the POCL suites cover those widths. */
static const op_kernel_check ce_check = {
    "5x77,2x8,3x1",
    "LAYOUT=0,WGS=2,VEC=4;LAYOUT=0,WGS=1,VEC=1;LAYOUT=1,WGS=16,VEC=2;LAYOUT=1,WGS=16,VEC=4",
    "LAYOUT=1,WGS=16,VEC=4", "4x200", 0, 0};

const op_desc op_cross_entropy = {
    .name = "cross_entropy",
    .shape_help = "TOKENSxVOCAB (rows x vocabulary size)",
    .ndims = 2,
    .dim_names = {"tokens", "vocab"},
    .bench_shapes = "4096x32000,1024x128256",
    .bench_full_shapes = "7x32001",
    .uncached_shape = "64x32000",
    .uncached_dim = 0,
    .tune_shapes = "4096x32000,1024x128256",
    .llm_shapes = "4096x32000,1024x128256,512x151936",
    .test_shape = "7x769",
    .has_unfused = 1,
    .create = ce_create,
    .run = ce_run,
    .verify = ce_verify,
    .min_bytes = ce_bytes,
    .flops = NULL,
    .destroy = ce_destroy,
    .blocks = ce_blocks,
    .space = ce_space,
    .kernel_check = &ce_check,
};
