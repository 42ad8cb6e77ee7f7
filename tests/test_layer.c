/*
 * The decoder layers of tools/layer.c (oclfuse-layer's own code) against an
 * fp64 host reference of the same layers, computed from the same weights
 * (the INT4 ones dequantized) and inputs: two small layers (hidden 256,
 * 4 q heads, 2 kv heads, head dim 64, MLP 512), batch 2, a prefill of 5
 * tokens then 3 decode steps over a paged cache of blocks of 3 tokens (a
 * sequence spans 3 blocks, its last one partial). The last layer's output
 * of every step is compared, each row within 1e-3 of its RMS in f32 (and
 * 3e-2 in f16, where every op rounds to 11 bits), with dense and INT4
 * weights, qk_norm_rope_cache and rotary + cache write, the residual in
 * add_rms_norm and in the output projection's epilogue.
 */
#include "harness.h"
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct variant {
    const char *name;
    oclf_dtype dtype;
    int int4, qk_norm, o_residual;
    double tol; /* max |got - ref| over the row's RMS */
} variant;

static const variant variants[] = {
    {"f32 dense, qk_norm_rope_cache, add_rms_norm", OCLF_F32, 0, 1, 0, 1e-3},
    {"f32 int4, qk_norm_rope_cache, add_rms_norm", OCLF_F32, 1, 1, 0, 1e-3},
    {"f32 dense, rotary + cache write, residual epilogue", OCLF_F32, 0, 0, 1, 1e-3},
    {"f32 int4, rotary + cache write, residual epilogue", OCLF_F32, 1, 0, 1, 1e-3},
    {"f16 dense, qk_norm_rope_cache, add_rms_norm", OCLF_F16, 0, 1, 0, 3e-2},
};

static layer_config small_config(const variant *v)
{
    layer_config c;
    layer_config_default(&c);
    c.hidden = 256;
    c.q_heads = 4;
    c.kv_heads = 2;
    c.head_dim = 64;
    c.mlp = 512;
    c.layers = 2;
    c.batch = 2;
    c.prefill = 5;
    c.decode = 3;
    c.block_size = 3;
    c.dtype = v->dtype;
    c.int4 = v->int4;
    c.qk_norm = v->qk_norm;
    c.o_residual = v->o_residual;
    c.seed = 7;
    c.keep_host = 1;
    return c;
}

/* ---- fp64 reference ------------------------------------------------------ */
typedef struct ref {
    const layer_config *c;
    const layer_model *m;
    size_t qkvw, qw, max_pos;
    double *k, *v; /* [layers][batch][max_pos][Hk hd] */
} ref;

/* y[n] = sum_k w[n, k] x[k] */
static void matvec(const float *w, size_t n, size_t k, const double *x, double *y)
{
    for (size_t i = 0; i < n; i++) {
        double acc = 0;
        for (size_t j = 0; j < k; j++)
            acc += (double)w[i * k + j] * x[j];
        y[i] = acc;
    }
}

static void rms(const double *x, size_t n, const float *w, double eps, double *y)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * r * (w ? (double)w[i] : 1.0);
}

static void rope(double *h, size_t hd, size_t p, double theta)
{
    for (size_t j = 0; j < hd / 2; j++) {
        const double ang = (double)p * pow(theta, -2.0 * (double)j / (double)hd);
        const double a = h[j], b = h[j + hd / 2];
        h[j] = a * cos(ang) - b * sin(ang);
        h[j + hd / 2] = b * cos(ang) + a * sin(ang);
    }
}

/* One step over every layer; x [tokens, H] in place. */
static void ref_step(ref *R, size_t s, double *x)
{
    const layer_config *c = R->c;
    const size_t H = c->hidden, hd = c->head_dim, kvw = c->kv_heads * hd;
    const size_t T = layer_step_tokens(R->m, s), per = s == 0 ? c->prefill : 1;
    double *n = malloc(H * sizeof *n), *qkv = malloc(R->qkvw * sizeof *qkv);
    double *attn = malloc(T * R->qw * sizeof *attn), *o = malloc(H * sizeof *o);
    double *gu = malloc(2 * c->mlp * sizeof *gu), *a = malloc(c->mlp * sizeof *a);
    double *q = malloc(T * R->qw * sizeof *q), *sc = malloc(R->max_pos * sizeof *sc);
    ck_assert(n && qkv && attn && o && gu && a && q && sc);
    const double eps = (double)c->eps;
    for (size_t l = 0; l < c->layers; l++) {
        const layer_host_weights *w = layer_host(R->m, l);
        double *kl = R->k + l * c->batch * R->max_pos * kvw;
        double *vl = R->v + l * c->batch * R->max_pos * kvw;
        /* norm, qkv, per-head norm, rotary, the cache */
        for (size_t t = 0; t < T; t++) {
            const size_t b = t / per, p = s == 0 ? t % per : c->prefill + s - 1;
            rms(x + t * H, H, w->norm_in, eps, n);
            matvec(w->wqkv, R->qkvw, H, n, qkv);
            for (size_t h = 0; h < c->q_heads + c->kv_heads; h++) {
                double *hh = qkv + h * hd;
                if (c->qk_norm)
                    rms(hh, hd, NULL, eps, hh);
                rope(hh, hd, p, c->theta);
            }
            memcpy(q + t * R->qw, qkv, R->qw * sizeof *q);
            memcpy(kl + (b * R->max_pos + p) * kvw, qkv + R->qw, kvw * sizeof *qkv);
            memcpy(vl + (b * R->max_pos + p) * kvw, qkv + R->qw + kvw, kvw * sizeof *qkv);
        }
        /* attention: the query at position p sees the keys 0..p */
        for (size_t t = 0; t < T; t++) {
            const size_t b = t / per, p = s == 0 ? t % per : c->prefill + s - 1;
            for (size_t h = 0; h < c->q_heads; h++) {
                const size_t g = h / (c->q_heads / c->kv_heads);
                const double *qh = q + t * R->qw + h * hd;
                double mx = -INFINITY, sum = 0;
                for (size_t j = 0; j <= p; j++) {
                    const double *kh = kl + (b * R->max_pos + j) * kvw + g * hd;
                    double d = 0;
                    for (size_t e = 0; e < hd; e++)
                        d += qh[e] * kh[e];
                    sc[j] = d / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (size_t j = 0; j <= p; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                double *oh = attn + t * R->qw + h * hd;
                for (size_t e = 0; e < hd; e++)
                    oh[e] = 0;
                for (size_t j = 0; j <= p; j++) {
                    const double *vh = vl + (b * R->max_pos + j) * kvw + g * hd;
                    for (size_t e = 0; e < hd; e++)
                        oh[e] += sc[j] / sum * vh[e];
                }
            }
        }
        /* output projection and the residual, the MLP and the residual */
        for (size_t t = 0; t < T; t++) {
            double *xt = x + t * H;
            matvec(w->wo, H, R->qw, attn + t * R->qw, o);
            for (size_t i = 0; i < H; i++)
                xt[i] += o[i];
            rms(xt, H, w->norm_post, eps, n);
            matvec(w->wgu, 2 * c->mlp, H, n, gu);
            for (size_t i = 0; i < c->mlp; i++)
                a[i] = gu[i] / (1.0 + exp(-gu[i])) * gu[c->mlp + i];
            matvec(w->wd, H, c->mlp, a, o);
            for (size_t i = 0; i < H; i++)
                xt[i] += o[i];
        }
    }
    free(n), free(qkv), free(attn), free(o), free(gu), free(a), free(q), free(sc);
}

/* Every row of got within tol x its reference RMS; the worst ratio. */
static double check_rows(const variant *v, size_t s, const float *got, const double *want,
                         size_t rows, size_t cols)
{
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double ss = 0, e = 0;
        for (size_t i = 0; i < cols; i++) {
            const double w = want[r * cols + i];
            ss += w * w;
            e = fmax(e, fabs((double)got[r * cols + i] - w));
            ck_assert_msg(isfinite(got[r * cols + i]), "%s: step %zu row %zu col %zu: %g",
                          v->name, s, r, i, (double)got[r * cols + i]);
        }
        const double rel = e / sqrt(ss / (double)cols);
        ck_assert_msg(rel <= v->tol, "%s: step %zu row %zu: max error %.3g of the row's RMS %.3g",
                      v->name, s, r, rel, sqrt(ss / (double)cols));
        worst = fmax(worst, rel);
    }
    return worst;
}

static void run_pass(const variant *v, layer_model *m, ref *R, int pass)
{
    const layer_config *c = layer_model_config(m);
    char err[1024];
    const size_t H = c->hidden;
    memset(R->k, 0, c->layers * c->batch * R->max_pos * c->kv_heads * c->head_dim * sizeof *R->k);
    memset(R->v, 0, c->layers * c->batch * R->max_pos * c->kv_heads * c->head_dim * sizeof *R->v);
    double worst = 0;
    for (size_t s = 0; s < layer_steps(m); s++) {
        const size_t T = layer_step_tokens(m, s);
        layer_step_stats st;
        ck_assert_msg(layer_step(m, s, &st, err, sizeof err) == 0, "%s: %s", v->name, err);
        /* profiling: the ops' times add up to the step's */
        ck_assert(st.device_ns > 0);
        double sum = 0;
        for (int op = 0; op < LAYER_OPS; op++) {
            if (!layer_op_name(c, op))
                continue;
            ck_assert(st.op_ns[op] >= 0);
            sum += st.op_ns[op];
        }
        ck_assert_msg(fabs(sum - st.device_ns) <= 1e-6 * st.device_ns + 1, "%g vs %g", sum,
                      st.device_ns);
        float *got = malloc(T * H * sizeof *got);
        double *want = malloc(T * H * sizeof *want);
        ck_assert(got && want);
        const float *in = layer_input(m, s);
        for (size_t i = 0; i < T * H; i++)
            want[i] = in[i];
        ref_step(R, s, want);
        ck_assert(layer_read_hidden(m, s, got) == 0);
        worst = fmax(worst, check_rows(v, s, got, want, T, H));
        free(got), free(want);
    }
    fprintf(stderr, "layer: %s (pass %d): worst row error %.2g of its RMS\n", v->name, pass,
            worst);
}

START_TEST(test_reference)
{
    const variant *v = &variants[_i];
    th_env *env = th_get();
    layer_config c = small_config(v);
    layer_model *m = NULL;
    char err[1024];
    ck_assert_msg(layer_model_create(env->cl, env->device, env->queue, env->ctx, &c, &m, err,
                                     sizeof err) == 0,
                  "%s", err);
    /* the bytes a decode step reads */
    const double es = (double)oclf_dtype_size(c.dtype);
    const double nk[4] = {(double)(c.q_heads + 2 * c.kv_heads) * c.head_dim * c.hidden,
                          (double)c.hidden * c.q_heads * c.head_dim,
                          2.0 * c.mlp * c.hidden, (double)c.hidden * c.mlp};
    double per = 2.0 * c.hidden * es;
    for (int i = 0; i < 4; i++)
        per += c.int4 ? nk[i] / 2 + nk[i] / 128 * 2 : nk[i] * es;
    ck_assert(fabs(layer_weight_bytes(m) - per * c.layers) < 0.5);
    ck_assert(fabs(layer_kv_bytes(m, 2) - (double)c.layers * c.batch * (c.prefill + 2) * 2 *
                                              c.kv_heads * c.head_dim * es) < 0.5);
    /* each op's least bytes at a decode step: the weights and K/V above
     * plus every activation in and out once (and the rotary rows) */
    {
        const double T = (double)c.batch, H = (double)c.hidden, mlp = (double)c.mlp;
        const double qw = (double)(c.q_heads * c.head_dim), kvw = (double)(c.kv_heads * c.head_dim);
        const double qkvw = qw + 2 * kvw;
        const double rope = c.qk_norm ? qkvw + qw + 2 * kvw : 2 * (qw + kvw) + 4 * kvw;
        const double acts = 2 * H + (H + qkvw) + rope + 2 * qw + qw + (c.o_residual ? 2 : 1) * H +
                            (c.o_residual ? 2 : 4) * H + (H + 2 * mlp) + 3 * mlp + (mlp + 2 * H);
        const double want = layer_weight_bytes(m) + layer_kv_bytes(m, 2) +
                            c.layers * T * (acts * es + (double)c.head_dim * 4);
        double sum = 0, flops = 0;
        for (int op = 0; op < LAYER_OPS; op++) {
            ck_assert(layer_op_name(&c, op) ? layer_op_bytes(m, 2, op) > 0
                                            : layer_op_bytes(m, 2, op) == 0);
            sum += layer_op_bytes(m, 2, op);
            flops += layer_op_flops(m, 2, op);
        }
        ck_assert_msg(fabs(sum - want) < 0.5, "op bytes %.0f, want %.0f", sum, want);
        ck_assert(fabs(flops - layer_step_flops(m, 2)) < 0.5);
        ck_assert(fabs(layer_step_flops(m, 0) - (layer_op_flops(m, 0, LAYER_OP_QKV) +
                                                 layer_op_flops(m, 0, LAYER_OP_ATTN) +
                                                 layer_op_flops(m, 0, LAYER_OP_O) +
                                                 layer_op_flops(m, 0, LAYER_OP_GATE_UP) +
                                                 layer_op_flops(m, 0, LAYER_OP_DOWN))) < 0.5);
    }

    ref R = {&c, m, (c.q_heads + 2 * c.kv_heads) * c.head_dim, c.q_heads * c.head_dim,
             c.prefill + c.decode, NULL, NULL};
    const size_t kvn = c.layers * c.batch * R.max_pos * c.kv_heads * c.head_dim;
    R.k = malloc(kvn * sizeof *R.k);
    R.v = malloc(kvn * sizeof *R.v);
    ck_assert(R.k && R.v);
    run_pass(v, m, &R, 1);
    if (_i == 0) {
        /* a second pass over the same steps, as the tool's warm-up does */
        ck_assert_msg(layer_reset(m, err, sizeof err) == 0, "%s", err);
        run_pass(v, m, &R, 2);
    }
    free(R.k), free(R.v);
    layer_model_destroy(m);
}
END_TEST

START_TEST(test_bad_config)
{
    th_env *env = th_get();
    const variant v = {"bad", OCLF_F32, 1, 1, 0, 0};
    layer_config c = small_config(&v);
    layer_model *m = NULL;
    char err[256];
    c.mlp = 200; /* not a multiple of the INT4 group */
    ck_assert(layer_model_create(env->cl, env->device, env->queue, env->ctx, &c, &m, err,
                                 sizeof err) != 0);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, "multiples of the group") != NULL, "%s", err);
    c = small_config(&v);
    c.kv_heads = 3;
    ck_assert(layer_model_create(env->cl, env->device, env->queue, env->ctx, &c, &m, err,
                                 sizeof err) != 0);
    ck_assert_msg(strstr(err, "multiple of kv heads") != NULL, "%s", err);
}
END_TEST

static Suite *layer_suite(void)
{
    Suite *s = suite_create("layer");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_reference, 0, (int)(sizeof variants / sizeof *variants));
    tcase_add_test(t, test_bad_config);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return th_run_suite(layer_suite()); }
