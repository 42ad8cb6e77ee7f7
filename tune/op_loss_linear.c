/* Descriptor of linear + cross-entropy for the benchmark and the tuner: a
 * training step's loss head, per-row losses (reduction none) with grad_x and
 * grad_w, one target in 16 ignored. Verified on samples: a full fp64
 * reference of the bench shape (2048 x 2048 x 32000) is three products of
 * 1.3e11 multiply-adds, so the check takes a few tokens (their losses, LSE
 * and grad_x rows) and a few vocabulary rows (their grad_w rows, from the
 * device's LSE, itself checked on the sampled tokens). */
#include "opdesc.h"

#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LCE_SAMPLES 6

typedef struct lce_inst {
    oclf_dtype dtype;
    size_t t, h, v;
    void *hx, *hw;   /* host copies of x and W */
    int64_t *ht;     /* targets */
    cl_mem x, w, tg, loss, lse, gx, gw;
    size_t temp[3];  /* temporaries of the last run, per path */
} lce_inst;

static void lce_destroy(void *p)
{
    lce_inst *in = p;
    if (!in)
        return;
    cl_mem mems[] = {in->x, in->w, in->tg, in->loss, in->lse, in->gx, in->gw};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(in->hx), free(in->hw), free(in->ht);
    free(in);
}

static void *lce_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                        size_t errlen)
{
    lce_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->dtype = dt;
    in->t = s->d[0];
    in->h = s->d[1];
    in->v = s->d[2];
    const size_t es = oclf_dtype_size(dt);
    in->hx = malloc(in->t * in->h * es + 1);
    in->hw = malloc(in->v * in->h * es + 1);
    in->ht = malloc((in->t + 1) * sizeof *in->ht);
    if (!in->hx || !in->hw || !in->ht) {
        snprintf(err, errlen, "out of host memory");
        lce_destroy(in);
        return NULL;
    }
    /* Logits of a few units: x and W scaled by 1/sqrt(hidden). */
    const float a = 2.0f / sqrtf((float)in->h);
    op_fill_random(dt, in->hx, in->t * in->h, -1.0f, 1.0f, 3);
    op_fill_random(dt, in->hw, in->v * in->h, -a, a, 4);
    uint64_t state = 0x243F6A8885A308D3ull;
    for (size_t r = 0; r < in->t; r++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        in->ht[r] = r % 16 == 5 ? -100 : (int64_t)((state >> 33) % in->v);
    }
    if (!(in->x = op_upload(env, in->hx, in->t * in->h * es, err, errlen)) ||
        !(in->w = op_upload(env, in->hw, in->v * in->h * es, err, errlen)) ||
        !(in->tg = op_upload(env, in->ht, (in->t + 1) * sizeof *in->ht, err, errlen)) ||
        !(in->loss = op_upload(env, NULL, (in->t + 1) * sizeof(float), err, errlen)) ||
        !(in->lse = op_upload(env, NULL, (in->t + 1) * sizeof(float), err, errlen)) ||
        !(in->gx = op_upload(env, NULL, in->t * in->h * es + 1, err, errlen)) ||
        !(in->gw = op_upload(env, NULL, in->v * in->h * sizeof(float), err, errlen))) {
        lce_destroy(in);
        return NULL;
    }
    return in;
}

static oclf_status lce_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    lce_inst *in = p;
    oclf_buf x = {in->x, 0, 0}, w = {in->w, 0, 0}, t = {in->tg, 0, 0}, l = {in->loss, 0, 0};
    oclf_buf lse = {in->lse, 0, 0}, gx = {in->gx, 0, 0}, gw = {in->gw, 0, 0};
    oclf_cross_entropy_options o = OCLF_CROSS_ENTROPY_OPTIONS_INIT;
    o.reduction = OCLF_REDUCTION_NONE;
    o.lse = &lse;
    oclf_linear_cross_entropy_info info = OCLF_LINEAR_CROSS_ENTROPY_INFO_INIT;
    o.info = &info;
    const oclf_status st = oclf_linear_cross_entropy(env->ctx, env->queue, in->dtype, in->t, in->h,
                                                     in->v, x, w, t, l, &gx, &gw, &o, ch, 0, NULL,
                                                     ev);
    if (st == OCLF_SUCCESS && ch && (unsigned)ch->path < 3)
        in->temp[ch->path] = info.temp_bytes;
    return st;
}

static double lce_temp(const void *p, oclf_path path)
{
    const lce_inst *in = p;
    return (unsigned)path < 3 ? (double)in->temp[path] : 0;
}

/* Sample i of n spread over [0, count). */
static size_t sample_at(size_t i, size_t n, size_t count)
{
    return n <= 1 ? 0 : (size_t)((double)i * (double)(count - 1) / (double)(n - 1));
}

/* The stored logit z[t, v] (fp64 sum rounded to the dtype). */
static double logit(const lce_inst *in, size_t t, size_t v)
{
    double acc = 0;
    for (size_t k = 0; k < in->h; k++)
        acc += (double)oclf_ref_get(in->dtype, in->hx, t * in->h + k) *
               (double)oclf_ref_get(in->dtype, in->hw, v * in->h + k);
    return oclf_ref_round(in->dtype, (float)acc);
}

/* The stored gradient of logit z (reduction none, upstream 1). */
static double dlogit(const lce_inst *in, size_t t, size_t v, double z, double lse)
{
    if (in->ht[t] == -100)
        return 0;
    const double d = exp(z - lse) - ((size_t)in->ht[t] == v ? 1.0 : 0.0);
    return oclf_ref_round(in->dtype, (float)d);
}

static int lce_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    lce_inst *in = p;
    const oclf_dtype dt = in->dtype;
    const size_t es = oclf_dtype_size(dt), T = in->t, H = in->h, V = in->v;
    oclf_status st = lce_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    float *loss = malloc((T + 1) * sizeof *loss), *lse = malloc((T + 1) * sizeof *lse);
    void *gx = malloc(T * H * es + 1);
    float *gwrow = malloc(H * sizeof *gwrow);
    double *zrow = malloc(V * sizeof *zrow), *gxr = malloc(H * sizeof *gxr);
    double *scale = malloc(H * sizeof *scale);
    int ok = 0;
    if (!loss || !lse || !gx || !gwrow || !zrow || !gxr || !scale) {
        snprintf(msg, len, "out of host memory");
        goto out;
    }
    if (op_download(env, in->loss, loss, T * sizeof *loss) ||
        op_download(env, in->lse, lse, T * sizeof *lse) ||
        op_download(env, in->gx, gx, T * H * es)) {
        snprintf(msg, len, "cannot read the outputs back");
        goto out;
    }
    double atol, rtol;
    oclf_ref_tolerance(dt, &atol, &rtol);
    const size_t nt = T < LCE_SAMPLES ? T : LCE_SAMPLES;
    for (size_t i = 0; i < nt; i++) {
        const size_t t = sample_at(i, nt, T);
        double m = -INFINITY, s = 0;
        for (size_t v = 0; v < V; v++) {
            zrow[v] = logit(in, t, v);
            m = fmax(m, zrow[v]);
        }
        for (size_t v = 0; v < V; v++)
            s += exp(zrow[v] - m);
        const double want_lse = m + log(s);
        const double want_loss =
            in->ht[t] == -100 ? 0.0 : want_lse - zrow[(size_t)in->ht[t]];
        /* the loss and LSE are fp32 results of fp32 arithmetic over
         * logits of a few units */
        if (!(fabs(lse[t] - want_lse) <= 1e-4 + 1e-5 * fabs(want_lse)) ||
            !(fabs(loss[t] - want_loss) <= 1e-4 + 1e-5 * fabs(want_loss))) {
            snprintf(msg, len, "token %zu: loss %.9g lse %.9g, reference %.9g %.9g", t,
                     (double)loss[t], (double)lse[t], want_loss, want_lse);
            goto out;
        }
        for (size_t k = 0; k < H; k++)
            gxr[k] = scale[k] = 0;
        for (size_t v = 0; v < V; v++) {
            const double d = dlogit(in, t, v, zrow[v], want_lse);
            if (d == 0)
                continue;
            for (size_t k = 0; k < H; k++) {
                const double wv = oclf_ref_get(dt, in->hw, v * H + k);
                gxr[k] += d * wv;
                scale[k] += fabs(d * wv);
            }
        }
        for (size_t k = 0; k < H; k++) {
            const double got = oclf_ref_get(dt, gx, t * H + k);
            if (!(fabs(got - gxr[k]) <= atol * (scale[k] + 1e-6) + rtol * fabs(gxr[k]))) {
                snprintf(msg, len, "grad_x[%zu, %zu] = %.9g, reference %.9g", t, k, got, gxr[k]);
                goto out;
            }
        }
    }
    /* grad_w rows: every token's gradient at the sampled vocabulary rows,
     * from the device's LSE (checked above on the sampled tokens). */
    const size_t nv = V < LCE_SAMPLES ? V : LCE_SAMPLES;
    for (size_t i = 0; i < nv; i++) {
        const size_t v = sample_at(i, nv, V);
        for (size_t k = 0; k < H; k++)
            gxr[k] = scale[k] = 0;
        for (size_t t = 0; t < T; t++) {
            const double d = dlogit(in, t, v, logit(in, t, v), lse[t]);
            for (size_t k = 0; k < H; k++) {
                const double xv = oclf_ref_get(dt, in->hx, t * H + k);
                gxr[k] += d * xv;
                scale[k] += fabs(d * xv);
            }
        }
        cl_int err = clEnqueueReadBuffer(env->queue, in->gw, CL_TRUE, v * H * sizeof(float),
                                         H * sizeof(float), gwrow, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            snprintf(msg, len, "cannot read grad_w back");
            goto out;
        }
        for (size_t k = 0; k < H; k++)
            if (!(fabs(gwrow[k] - gxr[k]) <= atol * (scale[k] + 1e-6) + rtol * fabs(gxr[k]))) {
                snprintf(msg, len, "grad_w[%zu, %zu] = %.9g, reference %.9g", v, k,
                         (double)gwrow[k], gxr[k]);
                goto out;
            }
    }
    ok = 1;
out:
    free(loss), free(lse), free(gx), free(gwrow), free(zrow), free(gxr), free(scale);
    return ok;
}

/* Every call waits on the host for its targets check. */
static int lce_blocks(const void *p)
{
    (void)p;
    return 1;
}

/* x and W read, grad_x and grad_w written, once each. */
static double lce_bytes(const op_shape *s, oclf_dtype dt)
{
    const double es = (double)oclf_dtype_size(dt), t = (double)s->d[0], h = (double)s->d[1],
                 v = (double)s->d[2];
    return 2 * t * h * es + v * h * (es + 4) + 16 * t;
}

/* Three products of t x h x v. */
static double lce_flops(const op_shape *s)
{
    return 6.0 * (double)s->d[0] * (double)s->d[1] * (double)s->d[2];
}

static int lce_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                     oclf_path path, oclf_params *out, int max)
{
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    int n = 0;
    oclf_params p;
    if (path == OCLF_PATH_UNFUSED) {
        memset(&p, 0, sizeof p);
        oclf_params_set(&p, "CHUNK", (int64_t)(s->d[0] ? s->d[0] : 1));
        op_space_add_valid(&c, out, &n, max, &p);
        return n;
    }
    for (uint64_t chunk = 32; chunk <= 4096; chunk *= 2) {
        memset(&p, 0, sizeof p);
        oclf_params_set(&p, "CHUNK", (int64_t)chunk);
        op_space_add_valid(&c, out, &n, max, &p);
        if (chunk >= s->d[0])
            break;
    }
    return n;
}

/* Chunks of 3 and 64 tokens over 7 (a short last chunk, one of all), with
 * structures of cross-entropy's own check. Not its 8- and 16-wide vectors:
 * oclgrind 21.10 marks the result of an 8- or 16-lane select() as
 * uninitialized (the online softmax's rescale; written as a blend of the
 * two branches instead, the report goes away), and the lanes compute
 * right on every device here. */
static const op_kernel_check lce_check = {
    "7x24x77", "CHUNK=3,LAYOUT=0,WGS=2,VEC=4;CHUNK=64,LAYOUT=1,WGS=16,VEC=2",
    "CHUNK=3,LAYOUT=0,WGS=2,VEC=4", "7x24x77", 0, 0};

const op_desc op_linear_cross_entropy = {
    .name = "linear_cross_entropy",
    .shape_help = "TOKENSxHIDDENxVOCAB (tokens x hidden size x vocabulary size)",
    .ndims = 3,
    .dim_names = {"tokens", "hidden", "vocab"},
    .bench_shapes = "2048x2048x32000,256x2048x32000,512x512x2048",
    .bench_full_shapes = NULL,
    /* W (and grad_w) past twice the cache: the vocabulary grown */
    .uncached_shape = "256x2048x1000",
    .uncached_dim = 2,
    .tune_shapes = "2048x2048x32000",
    .llm_shapes = "2048x2048x32000,2048x4096x128256",
    .test_shape = "7x24x77",
    .has_unfused = 1,
    .create = lce_create,
    .run = lce_run,
    .verify = lce_verify,
    .min_bytes = lce_bytes,
    .flops = lce_flops,
    .destroy = lce_destroy,
    .blocks = lce_blocks,
    .space = lce_space,
    .kernel_check = &lce_check,
    .temp_bytes = lce_temp,
};
