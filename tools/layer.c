/* Llama-style decoder layers on the library's calls (tools/layer.h). */
#include "layer.h"

#include "ref.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GROUP 128 /* INT4 group along K */

typedef struct dev_layer {
    cl_mem norm_in, norm_post;
    cl_mem w[4]; /* qkv, o, gate|up, down: dense weights or INT4 nibbles */
    cl_mem s[4]; /* INT4 scales (f16) */
    cl_mem kv;   /* K pool, then V pool */
    oclf_kv_cache cache;
    layer_host_weights host;
} dev_layer;

enum { W_QKV, W_O, W_GU, W_D };

struct layer_model {
    layer_config c;
    cl_context cl;
    cl_device_id device;
    cl_command_queue queue;
    oclf_context *ctx;
    int profiling;
    size_t es, qkvw, qw; /* element size, qkv width, Hq x hd */
    size_t steps, max_tokens, total_rows, max_blocks, num_blocks, max_pos;
    size_t *row0; /* first row of each step in x and in the per-row metadata */
    size_t wn[4], wk[4]; /* each weight's N and K */
    cl_mem x;            /* [total_rows, H]: every step's rows */
    cl_mem n, qkv, attn, ob, gu, act;
    cl_mem cos_sin, pos, slots, cu_q, seq_lens, block_table;
    float *inputs;    /* [total_rows, H], as stored */
    void *inputs_raw; /* the stored bytes */
    dev_layer *L;
    cl_event *events; /* a step's: layers x LAYER_OPS */
    int *event_op;
    int cur_op; /* layer_current_op */
};

void layer_config_default(layer_config *c)
{
    memset(c, 0, sizeof *c);
    c->hidden = 4096;
    c->q_heads = 32;
    c->kv_heads = 8;
    c->head_dim = 128;
    c->mlp = 14336;
    c->eps = 1e-5f;
    c->theta = 500000.0;
    c->layers = 2;
    c->batch = 1;
    c->prefill = 128;
    c->decode = 8;
    c->block_size = 16;
    c->dtype = OCLF_F16;
    c->int4 = 0;
    c->qk_norm = 1;
    c->o_residual = 0;
    c->path = OCLF_PATH_AUTO;
    c->seed = 1;
}

const char *layer_op_name(const layer_config *c, int op)
{
    switch (op) {
    case LAYER_OP_NORM_IN: return "rms_norm";
    case LAYER_OP_QKV: return "linear_qkv";
    case LAYER_OP_ROPE: return c->qk_norm ? "qk_norm_rope_cache" : "rotary_embedding";
    case LAYER_OP_CACHE: return c->qk_norm ? NULL : "kv_cache_write";
    case LAYER_OP_ATTN: return "attention_paged";
    case LAYER_OP_O: return "linear_o";
    case LAYER_OP_NORM_POST: return c->o_residual ? "rms_norm_post" : "add_rms_norm";
    case LAYER_OP_GATE_UP: return "linear_gate_up";
    case LAYER_OP_ACT: return "act_and_mul";
    case LAYER_OP_DOWN: return "linear_down";
    default: return NULL;
    }
}

/* ---- seeded generator: splitmix64 ----------------------------------------- */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_sym(rng *r) { return (float)((double)(rng_next(r) >> 40) * (2.0 / 16777216.0) - 1.0); }

/* An independent stream per (seed, layer, tensor). */
static rng rng_for(uint64_t seed, size_t layer, unsigned tensor)
{
    rng r = {seed * 0x2545f4914f6cdd1dull + 0x632be59bd9b4e019ull};
    r.s ^= rng_next(&r) + (uint64_t)layer * 0x9e3779b97f4a7c15ull;
    r.s ^= rng_next(&r) + (uint64_t)tensor * 0xc2b2ae3d27d4eb4full;
    (void)rng_next(&r);
    return r;
}

static void fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static cl_mem upload(layer_model *m, const void *host, size_t bytes, char *err, size_t len)
{
    cl_int e = CL_SUCCESS;
    cl_mem b = clCreateBuffer(m->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &e);
    if (!b)
        fail(err, len, "clCreateBuffer of %zu bytes failed (%d)", bytes, (int)e);
    return b;
}

static cl_mem alloc(layer_model *m, size_t bytes, char *err, size_t len)
{
    cl_int e = CL_SUCCESS;
    cl_mem b = clCreateBuffer(m->cl, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &e);
    if (!b)
        fail(err, len, "clCreateBuffer of %zu bytes failed (%d)", bytes, (int)e);
    return b;
}

/* n values uniform in [lo, hi) of the dtype onto the device; their rounded
 * values into *keep when keep is not NULL. */
static cl_mem make_vector(layer_model *m, size_t n, float lo, float hi, rng *r, float **keep,
                          char *err, size_t len)
{
    void *h = malloc(n * m->es);
    float *k = keep ? malloc(n * sizeof *k) : NULL;
    cl_mem b = NULL;
    if (!h || (keep && !k)) {
        fail(err, len, "out of host memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const float v = lo + (hi - lo) * 0.5f * (rng_sym(r) + 1.0f);
        oclf_ref_set(m->c.dtype, h, i, v);
        if (k)
            k[i] = oclf_ref_get(m->c.dtype, h, i);
    }
    b = upload(m, h, n * m->es, err, len);
out:
    free(h);
    if (keep && b)
        *keep = k;
    else
        free(k);
    return b;
}

/* Weight i of layer l ([N, K], fan-in K): dense in the dtype, or INT4. */
static int make_weight(layer_model *m, size_t l, int i, char *err, size_t len)
{
    dev_layer *L = &m->L[l];
    const size_t n = m->wn[i], k = m->wk[i];
    const float a = (float)sqrt(3.0 / (double)k); /* uniform [-a, a): sd 1/sqrt(k) */
    rng r = rng_for(m->c.seed, l, 10 + (unsigned)i);
    float *keep = NULL;
    if (m->c.keep_host && !(keep = malloc(n * k * sizeof *keep))) {
        fail(err, len, "out of host memory");
        return -1;
    }
    float **slot = i == W_QKV ? &L->host.wqkv : i == W_O ? &L->host.wo
                 : i == W_GU  ? &L->host.wgu
                              : &L->host.wd;
    *slot = keep;
    if (!m->c.int4) {
        void *h = malloc(n * k * m->es);
        if (!h) {
            fail(err, len, "out of host memory");
            return -1;
        }
        for (size_t j = 0; j < n * k; j++) {
            oclf_ref_set(m->c.dtype, h, j, a * rng_sym(&r));
            if (keep)
                keep[j] = oclf_ref_get(m->c.dtype, h, j);
        }
        L->w[i] = upload(m, h, n * k * m->es, err, len);
        free(h);
        return L->w[i] ? 0 : -1;
    }
    /* INT4: w = (q - 8) s, q uniform in 0..15, so s = a / 8 spreads w over
     * [-a, a) as the dense weights; each group's scale jittered by +-25%. */
    const size_t groups = k / GROUP;
    uint8_t *q = malloc(n * k / 2);
    uint16_t *s = malloc(n * groups * sizeof *s);
    if (!q || !s) {
        free(q), free(s);
        fail(err, len, "out of host memory");
        return -1;
    }
    for (size_t row = 0; row < n; row++) {
        for (size_t g = 0; g < groups; g++) {
            const float sc = a / 8.0f * (1.0f + 0.25f * rng_sym(&r));
            const uint16_t hs = oclf_f32_to_f16(sc);
            const float sf = oclf_f16_to_f32(hs);
            s[row * groups + g] = hs;
            uint8_t *qb = q + row * (k / 2) + g * (GROUP / 2);
            for (size_t b = 0; b < GROUP / 2; b += 8) {
                uint64_t bits = rng_next(&r);
                for (size_t j = 0; j < 8; j++, bits >>= 8) {
                    qb[b + j] = (uint8_t)bits;
                    if (keep) {
                        float *w = keep + row * k + g * GROUP + 2 * (b + j);
                        w[0] = (float)((int)(bits & 15) - 8) * sf;
                        w[1] = (float)((int)((bits >> 4) & 15) - 8) * sf;
                    }
                }
            }
        }
    }
    L->w[i] = upload(m, q, n * k / 2, err, len);
    L->s[i] = L->w[i] ? upload(m, s, n * groups * sizeof *s, err, len) : NULL;
    free(q), free(s);
    return L->s[i] ? 0 : -1;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

size_t layer_steps(const layer_model *m) { return m->steps; }

size_t layer_step_tokens(const layer_model *m, size_t s)
{
    return s == 0 ? m->c.batch * m->c.prefill : m->c.batch;
}

size_t layer_step_seq_len(const layer_model *m, size_t s) { return m->c.prefill + s; }

const layer_config *layer_model_config(const layer_model *m) { return &m->c; }

const layer_host_weights *layer_host(const layer_model *m, size_t layer)
{
    return m->c.keep_host && layer < m->c.layers ? &m->L[layer].host : NULL;
}

const float *layer_input(const layer_model *m, size_t s)
{
    return m->inputs + m->row0[s] * m->c.hidden;
}

double layer_weight_bytes(const layer_model *m)
{
    double per = 2.0 * (double)m->c.hidden * (double)m->es; /* the two norms */
    for (int i = 0; i < 4; i++) {
        const double nk = (double)m->wn[i] * (double)m->wk[i];
        per += m->c.int4 ? nk / 2 + nk / GROUP * 2 : nk * (double)m->es;
    }
    return per * (double)m->c.layers;
}

double layer_kv_bytes(const layer_model *m, size_t s)
{
    return (double)m->c.layers * (double)m->c.batch * (double)layer_step_seq_len(m, s) * 2.0 *
           (double)(m->c.kv_heads * m->c.head_dim) * (double)m->es;
}

int layer_current_op(const layer_model *m) { return m->cur_op; }

static double weight_bytes(const layer_model *m, int i)
{
    const double nk = (double)m->wn[i] * (double)m->wk[i];
    return m->c.int4 ? nk / 2 + nk / GROUP * 2 : nk * (double)m->es;
}

double layer_op_bytes(const layer_model *m, size_t s, int op)
{
    const layer_config *c = &m->c;
    if (!layer_op_name(c, op))
        return 0;
    const double t = (double)layer_step_tokens(m, s), es = (double)m->es;
    const double H = (double)c->hidden, qw = (double)m->qw, qkvw = (double)m->qkvw;
    const double kvw = (double)(c->kv_heads * c->head_dim), mlp = (double)c->mlp;
    const double table = t * (double)c->head_dim * 4; /* a cos | sin row (f32) a token */
    double b = 0;
    switch (op) {
    case LAYER_OP_NORM_IN: b = (2 * t * H + H) * es; break;
    case LAYER_OP_QKV: b = weight_bytes(m, W_QKV) + t * (H + qkvw) * es; break;
    case LAYER_OP_ROPE:
        /* qk_norm: Q, K, V in, Q back in place, K and V into the cache;
         * rotary alone: Q and K in and out */
        b = (c->qk_norm ? t * (qkvw + qw + 2 * kvw) : 2 * t * (qw + kvw)) * es + table;
        break;
    case LAYER_OP_CACHE: b = 4 * t * kvw * es; break;
    case LAYER_OP_ATTN: b = layer_kv_bytes(m, s) / (double)c->layers + 2 * t * qw * es; break;
    case LAYER_OP_O:
        b = weight_bytes(m, W_O) + t * (qw + (c->o_residual ? 2 : 1) * H) * es;
        break;
    case LAYER_OP_NORM_POST: b = ((c->o_residual ? 2 : 4) * t * H + H) * es; break;
    case LAYER_OP_GATE_UP: b = weight_bytes(m, W_GU) + t * (H + 2 * mlp) * es; break;
    case LAYER_OP_ACT: b = 3 * t * mlp * es; break;
    case LAYER_OP_DOWN: b = weight_bytes(m, W_D) + t * (mlp + 2 * H) * es; break;
    default: return 0;
    }
    return b * (double)c->layers;
}

double layer_op_flops(const layer_model *m, size_t s, int op)
{
    const double t = (double)layer_step_tokens(m, s);
    const int w = op == LAYER_OP_QKV ? W_QKV : op == LAYER_OP_O ? W_O
                : op == LAYER_OP_GATE_UP ? W_GU : op == LAYER_OP_DOWN ? W_D : -1;
    double f = 0;
    if (w >= 0) {
        f = 2.0 * t * (double)m->wn[w] * (double)m->wk[w];
    } else if (op == LAYER_OP_ATTN) {
        const double p = (double)m->c.prefill;
        const double keys = s == 0 ? p * (p + 1) / 2 : (double)layer_step_seq_len(m, s);
        f = 4.0 * (double)m->qw * keys * (double)m->c.batch;
    }
    return f * (double)m->c.layers;
}

double layer_step_flops(const layer_model *m, size_t s)
{
    double params = 0;
    for (int i = 0; i < 4; i++)
        params += (double)m->wn[i] * (double)m->wk[i];
    const double t = (double)layer_step_tokens(m, s);
    /* keys seen per sequence, summed over its queries */
    const double p = (double)m->c.prefill;
    const double keys = s == 0 ? p * (p + 1) / 2 : (double)layer_step_seq_len(m, s);
    const double attn = 4.0 * (double)m->qw * keys * (double)m->c.batch;
    return (double)m->c.layers * (2.0 * t * params + attn);
}

int layer_config_check(const layer_config *c, char *err, size_t len)
{
    if (!c->hidden || !c->q_heads || !c->kv_heads || !c->head_dim || !c->mlp || !c->layers ||
        !c->batch || !c->prefill || !c->block_size) {
        fail(err, len, "hidden, heads, head dim, MLP, layers, batch, prefill and block size "
                       "must be positive");
        return -1;
    }
    if (c->q_heads % c->kv_heads) {
        fail(err, len, "q heads (%zu) must be a multiple of kv heads (%zu)", c->q_heads,
             c->kv_heads);
        return -1;
    }
    if (c->head_dim % 2 || c->head_dim > 256) {
        fail(err, len, "head dim (%zu) must be even and at most 256", c->head_dim);
        return -1;
    }
    if (oclf_dtype_size(c->dtype) == 0) {
        fail(err, len, "unknown dtype");
        return -1;
    }
    if (c->int4 && (c->hidden % GROUP || c->mlp % GROUP || (c->q_heads * c->head_dim) % GROUP)) {
        fail(err, len, "INT4 weights need hidden (%zu), MLP (%zu) and q heads x head dim (%zu) "
                       "to be multiples of the group, %d",
             c->hidden, c->mlp, c->q_heads * c->head_dim, GROUP);
        return -1;
    }
    return 0;
}

int layer_model_create(cl_context cl, cl_device_id device, cl_command_queue queue,
                       oclf_context *ctx, const layer_config *config, layer_model **out,
                       char *err, size_t len)
{
    *out = NULL;
    if (layer_config_check(config, err, len))
        return -1;
    layer_model *m = calloc(1, sizeof *m);
    if (!m) {
        fail(err, len, "out of host memory");
        return -1;
    }
    m->c = *config;
    const layer_config *c = &m->c;
    m->cl = cl, m->device = device, m->queue = queue, m->ctx = ctx;
    cl_command_queue_properties props = 0;
    clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    m->profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
    const size_t H = c->hidden, B = c->batch, hd = c->head_dim;
    m->es = oclf_dtype_size(c->dtype);
    m->qw = c->q_heads * hd;
    m->qkvw = (c->q_heads + 2 * c->kv_heads) * hd;
    m->steps = 1 + c->decode;
    m->max_tokens = c->decode_only ? B : B * (c->prefill > 1 ? c->prefill : 1);
    m->cur_op = -1;
    /* decode only: the prefill's rows are never made (step 0 has none) */
    m->total_rows = (c->decode_only ? 0 : B * c->prefill) + B * c->decode;
    m->max_pos = c->prefill + c->decode;
    m->max_blocks = (m->max_pos + c->block_size - 1) / c->block_size;
    m->num_blocks = B * m->max_blocks;
    m->wn[W_QKV] = m->qkvw, m->wk[W_QKV] = H;
    m->wn[W_O] = H, m->wk[W_O] = m->qw;
    m->wn[W_GU] = 2 * c->mlp, m->wk[W_GU] = H;
    m->wn[W_D] = H, m->wk[W_D] = c->mlp;
    m->row0 = calloc(m->steps, sizeof *m->row0);
    m->L = calloc(c->layers, sizeof *m->L);
    m->events = calloc(c->layers * LAYER_OPS, sizeof *m->events);
    m->event_op = calloc(c->layers * LAYER_OPS, sizeof *m->event_op);
    m->inputs = malloc(m->total_rows * H * sizeof *m->inputs);
    m->inputs_raw = malloc(m->total_rows * H * m->es);
    int32_t *pos = malloc(m->total_rows * sizeof *pos);
    int64_t *slots = malloc(m->total_rows * sizeof *slots);
    int32_t *cuq = malloc(m->steps * (B + 1) * sizeof *cuq);
    int32_t *lens = malloc(m->steps * B * sizeof *lens);
    int32_t *bt = malloc(m->num_blocks * sizeof *bt);
    float *cs = malloc(m->max_pos * hd * sizeof *cs);
    int rc = -1;
    if (!m->row0 || !m->L || !m->events || !m->event_op || !m->inputs || !m->inputs_raw ||
        !pos || !slots || !cuq || !lens || !bt || !cs) {
        fail(err, len, "out of host memory");
        goto out;
    }

    /* the block pool, shuffled among the sequences */
    rng r = rng_for(c->seed, 0, 1);
    for (size_t i = 0; i < m->num_blocks; i++)
        bt[i] = (int32_t)i;
    for (size_t i = m->num_blocks; i > 1; i--) {
        const size_t j = (size_t)(rng_next(&r) % i);
        const int32_t t = bt[i - 1];
        bt[i - 1] = bt[j], bt[j] = t;
    }
    /* per-step metadata */
    for (size_t s = 0, row = 0; s < m->steps; s++) {
        m->row0[s] = row;
        const size_t per = s == 0 ? (c->decode_only ? 0 : c->prefill) : 1;
        for (size_t b = 0; b <= B; b++)
            cuq[s * (B + 1) + b] = (int32_t)(b * per);
        for (size_t b = 0; b < B; b++) {
            lens[s * B + b] = (int32_t)layer_step_seq_len(m, s);
            for (size_t i = 0; i < per; i++, row++) {
                const size_t p = s == 0 ? i : c->prefill + s - 1;
                pos[row] = (int32_t)p;
                slots[row] = (int64_t)bt[b * m->max_blocks + p / c->block_size] *
                                 (int64_t)c->block_size +
                             (int64_t)(p % c->block_size);
            }
        }
    }
    /* the rotary table, [max_pos, hd]: cos | sin, NeoX frequencies */
    for (size_t p = 0; p < m->max_pos; p++)
        for (size_t j = 0; j < hd / 2; j++) {
            const double ang = (double)p * pow(c->theta, -2.0 * (double)j / (double)hd);
            cs[p * hd + j] = (float)cos(ang);
            cs[p * hd + hd / 2 + j] = (float)sin(ang);
        }
    /* the inputs: sd 1 */
    r = rng_for(c->seed, 0, 2);
    const float sq3 = (float)sqrt(3.0);
    for (size_t i = 0; i < m->total_rows * H; i++) {
        oclf_ref_set(c->dtype, m->inputs_raw, i, sq3 * rng_sym(&r));
        m->inputs[i] = oclf_ref_get(c->dtype, m->inputs_raw, i);
    }
    if (!(m->x = upload(m, m->inputs_raw, m->total_rows * H * m->es, err, len)) ||
        !(m->pos = upload(m, pos, m->total_rows * sizeof *pos, err, len)) ||
        !(m->slots = upload(m, slots, m->total_rows * sizeof *slots, err, len)) ||
        !(m->cu_q = upload(m, cuq, m->steps * (B + 1) * sizeof *cuq, err, len)) ||
        !(m->seq_lens = upload(m, lens, m->steps * B * sizeof *lens, err, len)) ||
        !(m->block_table = upload(m, bt, m->num_blocks * sizeof *bt, err, len)) ||
        !(m->cos_sin = upload(m, cs, m->max_pos * hd * sizeof *cs, err, len)))
        goto out;
    const size_t T = m->max_tokens;
    if (!(m->n = alloc(m, T * H * m->es, err, len)) ||
        !(m->qkv = alloc(m, T * m->qkvw * m->es, err, len)) ||
        !(m->attn = alloc(m, T * m->qw * m->es, err, len)) ||
        !(m->ob = alloc(m, T * H * m->es, err, len)) ||
        !(m->gu = alloc(m, T * 2 * c->mlp * m->es, err, len)) ||
        !(m->act = alloc(m, T * c->mlp * m->es, err, len)))
        goto out;
    const size_t pool = m->num_blocks * c->block_size * c->kv_heads * hd;
    for (size_t l = 0; l < c->layers; l++) {
        dev_layer *L = &m->L[l];
        rng rn = rng_for(c->seed, l, 3);
        if (!(L->norm_in = make_vector(m, H, 0.8f, 1.2f, &rn, c->keep_host ? &L->host.norm_in : NULL,
                                       err, len)) ||
            !(L->norm_post = make_vector(m, H, 0.8f, 1.2f, &rn,
                                         c->keep_host ? &L->host.norm_post : NULL, err, len)))
            goto out;
        for (int i = 0; i < 4; i++)
            if (make_weight(m, l, i, err, len))
                goto out;
        if (!(L->kv = alloc(m, 2 * pool * m->es, err, len)))
            goto out;
        L->cache.k = L->cache.v = L->kv;
        L->cache.k_offset = 0;
        L->cache.v_offset = pool;
        L->cache.num_blocks = m->num_blocks;
        L->cache.block_size = c->block_size;
        L->cache.heads = c->kv_heads;
        L->cache.head_dim = hd;
        /* zeros, so that nothing reads uninitialized memory */
        const float zero = 0;
        cl_int e = clEnqueueFillBuffer(queue, L->kv, &zero, 2, 0, 2 * pool * m->es, 0, NULL, NULL);
        if (e != CL_SUCCESS) {
            fail(err, len, "clEnqueueFillBuffer failed (%d)", (int)e);
            goto out;
        }
    }
    if (clFinish(queue) != CL_SUCCESS) {
        fail(err, len, "clFinish failed");
        goto out;
    }
    rc = 0;
out:
    free(pos), free(slots), free(cuq), free(lens), free(bt), free(cs);
    if (rc)
        layer_model_destroy(m);
    else
        *out = m;
    return rc;
}

static void release(cl_mem *b)
{
    if (*b)
        clReleaseMemObject(*b);
    *b = NULL;
}

void layer_model_destroy(layer_model *m)
{
    if (!m)
        return;
    if (m->queue)
        clFinish(m->queue);
    if (m->L)
        for (size_t l = 0; l < m->c.layers; l++) {
            dev_layer *L = &m->L[l];
            release(&L->norm_in), release(&L->norm_post), release(&L->kv);
            for (int i = 0; i < 4; i++)
                release(&L->w[i]), release(&L->s[i]);
            free(L->host.norm_in), free(L->host.norm_post), free(L->host.wqkv);
            free(L->host.wo), free(L->host.wgu), free(L->host.wd);
        }
    cl_mem *bufs[] = {&m->x,       &m->n,     &m->qkv,      &m->attn,     &m->ob,
                      &m->gu,      &m->act,   &m->cos_sin,  &m->pos,      &m->slots,
                      &m->cu_q,    &m->seq_lens, &m->block_table};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        release(bufs[i]);
    free(m->L), free(m->row0), free(m->events), free(m->event_op);
    free(m->inputs), free(m->inputs_raw);
    free(m);
}

int layer_reset(layer_model *m, char *err, size_t len)
{
    cl_int e = clEnqueueWriteBuffer(m->queue, m->x, CL_TRUE, 0,
                                    m->total_rows * m->c.hidden * m->es, m->inputs_raw, 0, NULL,
                                    NULL);
    if (e != CL_SUCCESS) {
        fail(err, len, "clEnqueueWriteBuffer failed (%d)", (int)e);
        return -1;
    }
    return 0;
}

int layer_read_hidden(layer_model *m, size_t s, float *out)
{
    const size_t n = layer_step_tokens(m, s) * m->c.hidden;
    void *raw = malloc(n * m->es);
    if (!raw)
        return -1;
    cl_int e = clEnqueueReadBuffer(m->queue, m->x, CL_TRUE, m->row0[s] * m->c.hidden * m->es,
                                   n * m->es, raw, 0, NULL, NULL);
    for (size_t i = 0; e == CL_SUCCESS && i < n; i++)
        out[i] = oclf_ref_get(m->c.dtype, raw, i);
    free(raw);
    return e == CL_SUCCESS ? 0 : -1;
}

/* A linear layer with weight i of layer l: dense or INT4. */
static oclf_status linear(layer_model *m, size_t l, int i, size_t rows, oclf_buf x, oclf_buf y,
                          const oclf_linear_epilogue *epi, const oclf_choice *ch, cl_event *ev)
{
    const dev_layer *L = &m->L[l];
    if (!m->c.int4)
        return oclf_linear(m->ctx, m->queue, m->c.dtype, rows, m->wn[i], m->wk[i], x,
                           (oclf_buf){L->w[i], 0, 0}, y, OCLF_WEIGHT_NK, OCLF_LINEAR_NONE, epi, ch,
                           0, NULL, ev);
    oclf_qweight w;
    memset(&w, 0, sizeof w);
    w.format = OCLF_QFORMAT_INT4;
    w.group = GROUP;
    w.q = (oclf_buf){L->w[i], 0, 0};
    w.scale = (oclf_buf){L->s[i], 0, 0};
    w.scale_dtype = OCLF_F16;
    w.zero = NULL;
    return oclf_linear_q(m->ctx, m->queue, m->c.dtype, rows, m->wn[i], m->wk[i], x, &w, y,
                         OCLF_LINEAR_NONE, epi, ch, 0, NULL, ev);
}

static uint64_t prof(cl_event e, cl_profiling_info what)
{
    cl_ulong t = 0;
    if (clGetEventProfilingInfo(e, what, sizeof t, &t, NULL) != CL_SUCCESS)
        return 0;
    return t;
}

int layer_step(layer_model *m, size_t s, layer_step_stats *stats, char *err, size_t len)
{
    const layer_config *c = &m->c;
    if (s >= m->steps) {
        fail(err, len, "step %zu of %zu", s, m->steps);
        return -1;
    }
    if (s == 0 && c->decode_only) {
        fail(err, len, "step 0, the prefill, does not run on a decode-only model");
        return -1;
    }
    const size_t H = c->hidden, B = c->batch, hd = c->head_dim, T = layer_step_tokens(m, s);
    const size_t r0 = m->row0[s];
    const oclf_buf x = {m->x, r0 * H, 0};
    const oclf_buf n = {m->n, 0, 0}, qkv = {m->qkv, 0, 0}, attn = {m->attn, 0, 0};
    const oclf_buf ob = {m->ob, 0, 0}, gu = {m->gu, 0, 0}, act = {m->act, 0, 0};
    const oclf_choice ch = {c->path, {0}};
    const oclf_choice fused = {OCLF_PATH_FUSED, {0}};
    oclf_rope rope;
    memset(&rope, 0, sizeof rope);
    rope.style = OCLF_ROPE_NEOX;
    rope.head_dim = hd;
    rope.rot_dim = hd;
    rope.positions = (oclf_buf){m->pos, r0, 0};
    rope.pos_type = OCLF_INT32;
    rope.cos_sin = (oclf_buf){m->cos_sin, 0, 0};
    rope.cache_dtype = OCLF_F32;
    rope.max_pos = m->max_pos;
    const oclf_buf slots = {m->slots, r0, 0};
    const oclf_buf cuq = {m->cu_q, s * (B + 1), 0}, lens = {m->seq_lens, s * B, 0};
    const oclf_buf bt = {m->block_table, 0, 0};
    const oclf_heads qh = {{m->qkv, 0, m->qkvw}, c->q_heads, hd};
    const oclf_heads kh = {{m->qkv, m->qw, m->qkvw}, c->kv_heads, hd};
    const oclf_heads vh = {{m->qkv, m->qw + c->kv_heads * hd, m->qkvw}, c->kv_heads, hd};
    const oclf_heads oh = {{m->attn, 0, m->qw}, c->q_heads, hd};
    oclf_attention_options ao;
    oclf_attention_options_init(&ao);
    ao.causal = 1;
    oclf_linear_epilogue res;
    oclf_linear_epilogue_init(&res);
    res.residual = &x;
    const oclf_activation silu = {sizeof(oclf_activation), OCLF_ACT_SILU, 0, 0, 0, 0};

    size_t ne = 0;
    cl_event start = NULL;
    const double t0 = now_ns();
    cl_int ce = clEnqueueMarkerWithWaitList(m->queue, 0, NULL, &start);
    if (ce != CL_SUCCESS) {
        fail(err, len, "clEnqueueMarkerWithWaitList failed (%d)", (int)ce);
        return -1;
    }
    oclf_status st = OCLF_SUCCESS;
    const char *what = "";
    size_t l = 0;
#define CALL(op, call)                                                     \
    do {                                                                   \
        m->event_op[ne] = (op);                                            \
        m->cur_op = (op);                                                  \
        st = (call);                                                       \
        m->cur_op = -1;                                                    \
        if (st != OCLF_SUCCESS) {                                          \
            what = layer_op_name(c, op);                                   \
            goto done;                                                     \
        }                                                                  \
        ne++;                                                              \
    } while (0)
    for (l = 0; l < c->layers; l++) {
        const dev_layer *L = &m->L[l];
        cl_event *ev = m->events;
        const oclf_buf w_in = {L->norm_in, 0, 0}, w_post = {L->norm_post, 0, 0};
        CALL(LAYER_OP_NORM_IN, oclf_rms_norm(m->ctx, m->queue, c->dtype, T, H, x, &w_in, n, c->eps,
                                             &ch, 0, NULL, &ev[ne]));
        CALL(LAYER_OP_QKV, linear(m, l, W_QKV, T, n, qkv, NULL, &ch, &ev[ne]));
        if (c->qk_norm) {
            CALL(LAYER_OP_ROPE,
                 oclf_qk_norm_rope_cache(m->ctx, m->queue, c->dtype, T, c->q_heads, c->kv_heads,
                                         c->kv_heads, &rope, qkv, NULL, NULL, slots, &L->cache,
                                         c->eps, &ch, 0, NULL, &ev[ne]));
        } else {
            CALL(LAYER_OP_ROPE, oclf_rotary_embedding(m->ctx, m->queue, c->dtype, T, &rope, qh,
                                                      &kh, &ch, 0, NULL, &ev[ne]));
            CALL(LAYER_OP_CACHE, oclf_kv_cache_write(m->ctx, m->queue, c->dtype, T, kh, vh, slots,
                                                     &L->cache, NULL, 0, NULL, &ev[ne]));
        }
        /* fused: the unfused path reads the metadata on the host */
        CALL(LAYER_OP_ATTN,
             oclf_attention_paged(m->ctx, m->queue, c->dtype, B, T, s == 0 ? c->prefill : 1,
                                  m->max_blocks, cuq, lens, bt, qh, &L->cache, oh, &ao, &fused, 0,
                                  NULL, &ev[ne]));
        if (c->o_residual) {
            CALL(LAYER_OP_O, linear(m, l, W_O, T, attn, x, &res, &ch, &ev[ne]));
            CALL(LAYER_OP_NORM_POST, oclf_rms_norm(m->ctx, m->queue, c->dtype, T, H, x, &w_post, ob,
                                                   c->eps, &ch, 0, NULL, &ev[ne]));
        } else {
            CALL(LAYER_OP_O, linear(m, l, W_O, T, attn, ob, NULL, &ch, &ev[ne]));
            CALL(LAYER_OP_NORM_POST, oclf_add_rms_norm(m->ctx, m->queue, c->dtype, T, H, ob, x,
                                                       &w_post, c->eps, &ch, 0, NULL, &ev[ne]));
        }
        CALL(LAYER_OP_GATE_UP, linear(m, l, W_GU, T, ob, gu, NULL, &ch, &ev[ne]));
        CALL(LAYER_OP_ACT, oclf_act_and_mul(m->ctx, m->queue, c->dtype, T, c->mlp, gu, act, &silu,
                                            &ch, 0, NULL, &ev[ne]));
        CALL(LAYER_OP_DOWN, linear(m, l, W_D, T, act, x, &res, &ch, &ev[ne]));
    }
#undef CALL
done:
    ce = clFinish(m->queue);
    const double t1 = now_ns();
    int rc = 0;
    if (st != OCLF_SUCCESS) {
        fail(err, len, "step %zu, layer %zu, %s: %s", s, l, what, oclf_last_error(m->ctx));
        rc = -1;
    } else if (ce != CL_SUCCESS) {
        fail(err, len, "step %zu: clFinish failed (%d)", s, (int)ce);
        rc = -1;
    }
    if (stats && rc == 0) {
        stats->wall_ns = t1 - t0;
        stats->device_ns = -1;
        for (int i = 0; i < LAYER_OPS; i++)
            stats->op_ns[i] = m->profiling ? 0 : -1;
        if (m->profiling && ne) {
            uint64_t prev = prof(start, CL_PROFILING_COMMAND_END);
            if (!prev)
                prev = prof(m->events[0], CL_PROFILING_COMMAND_START);
            const uint64_t first = prev;
            int ok = prev != 0;
            for (size_t i = 0; i < ne && ok; i++) {
                const uint64_t e = prof(m->events[i], CL_PROFILING_COMMAND_END);
                if (!e) {
                    ok = 0;
                    break;
                }
                stats->op_ns[m->event_op[i]] += e > prev ? (double)(e - prev) : 0.0;
                if (e > prev)
                    prev = e;
            }
            if (ok)
                stats->device_ns = (double)(prev - first);
            else
                for (int i = 0; i < LAYER_OPS; i++)
                    stats->op_ns[i] = -1;
        }
    }
    for (size_t i = 0; i < ne; i++)
        clReleaseEvent(m->events[i]);
    clReleaseEvent(start);
    return rc;
}
