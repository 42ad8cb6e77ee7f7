/*
 * Descriptors of generated elementwise expressions for the benchmark and the
 * tuner: one per preset expression (the library's op "expr", its records
 * keyed by rows, cols and the expression's form, oclf_expr_form_id).
 *
 *   ew_softplus           y = log(exp(x) + 1)
 *   ew_add_relu_scale     y = relu(a + b) * s              s a scalar
 *   ew_bias_gelu_dropout  y = dropout(gelu(x + bias), p)   bias a row vector, p = 0.1
 *   ew_chain8             eight cheap operations in a chain
 *   ew_relu_mask          y = relu(x) and its mask m = x > 0 as bits
 *   ew_relu_mask_bwd      dx = m ? dy : 0                  m a bit matrix
 *   ew_dropout_bwd        dx = dropout(dy, p)              p = 0.1, the mask regenerated
 *
 * Every input and output but the bit matrices has the run's dtype; a bit
 * matrix counts cols / 8 bytes a row in the minimum traffic.
 */
#include "opdesc.h"

#include "ref.h"
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_IN = 3, MAX_OUT = 2 };

typedef double (*preset_ref)(double a, double b, double k, uint64_t n);

typedef struct preset {
    const char *source;
    int n_inputs;
    oclf_expr_kind kind[MAX_IN];
    const char *name[MAX_IN];
    float scalar; /* the value of the scalar input, if any */
    /* Output 0 from input 0's and input 1's element (0 when absent; a bit
     * as 1 or 0), the scalar and the element's dropout counter. */
    preset_ref ref;
    /* Outputs (a bits output's reference is nonzero where its bit is
     * set). */
    int n_outputs;
    oclf_expr_kind out_kind[MAX_OUT];
    const char *out_name[MAX_OUT];
    preset_ref ref1; /* output 1 */
} preset;

static const uint64_t SEED = 0x5eed;

static double gelu(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

static double ref_softplus(double a, double b, double k, uint64_t n)
{
    (void)b, (void)k, (void)n;
    return log(exp(a) + 1.0);
}

static double ref_add_relu_scale(double a, double b, double k, uint64_t n)
{
    (void)n;
    return (a + b < 0 ? 0.0 : a + b) * k;
}

static double ref_bias_gelu_dropout(double a, double b, double k, uint64_t n)
{
    return oclf_ref_dropout(gelu(a + b), (float)k, SEED, n, 0);
}

static double ref_chain8(double a, double b, double k, uint64_t n)
{
    (void)b, (void)k, (void)n;
    const double t = fmin(fmax(a * 0.5 + 0.25, -1.0), 1.0) - 0.125;
    return (t < 0 ? 0.0 : t) * 2.0 + 1.0;
}

static const preset p_softplus = {"y = log(exp(x) + 1);", 1, {OCLF_EXPR_MATRIX}, {"x"}, 0,
                                  ref_softplus, 1, {OCLF_EXPR_MATRIX}, {"y"}, NULL};
static const preset p_add_relu_scale = {"y = relu(a + b) * s;",
                                        3,
                                        {OCLF_EXPR_MATRIX, OCLF_EXPR_MATRIX, OCLF_EXPR_SCALAR},
                                        {"a", "b", "s"},
                                        1.5f,
                                        ref_add_relu_scale, 1, {OCLF_EXPR_MATRIX}, {"y"}, NULL};
static const preset p_bias_gelu_dropout = {"y = dropout(gelu(x + bias), p);",
                                           3,
                                           {OCLF_EXPR_MATRIX, OCLF_EXPR_ROW, OCLF_EXPR_SCALAR},
                                           {"x", "bias", "p"},
                                           0.1f,
                                           ref_bias_gelu_dropout, 1, {OCLF_EXPR_MATRIX}, {"y"}, NULL};
static double ref_relu(double a, double b, double k, uint64_t n)
{
    (void)b, (void)k, (void)n;
    return a < 0 ? 0.0 : a;
}

static double ref_positive(double a, double b, double k, uint64_t n)
{
    (void)b, (void)k, (void)n;
    return a > 0;
}

static double ref_masked(double a, double b, double k, uint64_t n)
{
    (void)k, (void)n;
    return a != 0 ? b : 0.0;
}

static double ref_dropout(double a, double b, double k, uint64_t n)
{
    (void)b;
    return oclf_ref_dropout(a, (float)k, SEED, n, 0);
}

static const preset p_relu_mask = {"y = relu(x); m = x > 0;", 1, {OCLF_EXPR_MATRIX}, {"x"}, 0,
                                   ref_relu, 2, {OCLF_EXPR_MATRIX, OCLF_EXPR_BITS}, {"y", "m"},
                                   ref_positive};
static const preset p_relu_mask_bwd = {"dx = m ? dy : 0;", 2, {OCLF_EXPR_BITS, OCLF_EXPR_MATRIX},
                                       {"m", "dy"}, 0, ref_masked, 1, {OCLF_EXPR_MATRIX}, {"dx"},
                                       NULL};
static const preset p_dropout_bwd = {"dx = dropout(dy, p);", 2, {OCLF_EXPR_MATRIX, OCLF_EXPR_SCALAR},
                                     {"dy", "p"}, 0.1f, ref_dropout, 1, {OCLF_EXPR_MATRIX}, {"dx"},
                                     NULL};

/* mul, add, max, min, sub, relu, mul, add */
static const preset p_chain8 = {"y = relu(min(max(x * 0.5 + 0.25, -1), 1) - 0.125) * 2 + 1;", 1,
                                {OCLF_EXPR_MATRIX}, {"x"}, 0, ref_chain8, 1, {OCLF_EXPR_MATRIX}, {"y"}, NULL};

typedef struct expr_inst {
    const preset *p;
    oclf_dtype dtype;
    size_t rows, cols;
    oclf_expr *e;
    void *host[MAX_IN];
    cl_mem in[MAX_IN], out[MAX_OUT];
    double *want[MAX_OUT]; /* reference, computed on first verify */
} expr_inst;

static int n_outputs(const preset *p) { return p->n_outputs; }

static oclf_expr_kind out_kind(const preset *p, int j) { return p->out_kind[j]; }

static size_t bit_words(size_t cols) { return (cols + 31) / 32; }

/* Elements of an operand of kind k (32-bit words for bit matrices). */
static size_t kind_elems(oclf_expr_kind k, size_t rows, size_t cols)
{
    return k == OCLF_EXPR_MATRIX ? rows * cols
           : k == OCLF_EXPR_BITS ? rows * bit_words(cols)
           : k == OCLF_EXPR_ROW  ? cols
           : k == OCLF_EXPR_COL  ? rows
                                 : 0;
}

static size_t kind_elem_size(oclf_expr_kind k, oclf_dtype dt)
{
    return k == OCLF_EXPR_BITS ? 4 : oclf_dtype_size(dt);
}

static size_t input_elems(const preset *p, int i, size_t rows, size_t cols)
{
    return kind_elems(p->kind[i], rows, cols);
}

static void expr_destroy(void *v)
{
    expr_inst *x = v;
    if (!x)
        return;
    for (int i = 0; i < MAX_IN; i++) {
        if (x->in[i])
            clReleaseMemObject(x->in[i]);
        free(x->host[i]);
    }
    for (int j = 0; j < MAX_OUT; j++) {
        if (x->out[j])
            clReleaseMemObject(x->out[j]);
        free(x->want[j]);
    }
    oclf_expr_release(x->e);
    free(x);
}

static void decls(const preset *p, oclf_dtype dt, oclf_expr_decl *in, oclf_expr_decl *out)
{
    for (int i = 0; i < p->n_inputs; i++)
        in[i] = (oclf_expr_decl){p->name[i], p->kind[i], dt};
    for (int j = 0; j < n_outputs(p); j++)
        out[j] = (oclf_expr_decl){p->out_name[j], out_kind(p, j), dt};
}

/* A bit matrix's words from a xorshift stream (every bit pattern, the
 * bits past cols included). */
static void fill_bits(uint32_t *w, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        w[i] = (uint32_t)(s >> 16);
    }
}

static void *expr_create(const preset *p, const op_env *env, const op_shape *s, oclf_dtype dt,
                         char *err, size_t errlen)
{
    expr_inst *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    x->p = p;
    x->dtype = dt;
    x->rows = s->d[0];
    x->cols = s->d[1];
    oclf_expr_decl in[MAX_IN], out[MAX_OUT];
    decls(p, dt, in, out);
    if (oclf_expr_compile(env->ctx, p->source, in, (unsigned)p->n_inputs, out,
                          (unsigned)n_outputs(p), &x->e) != OCLF_SUCCESS) {
        snprintf(err, errlen, "oclf_expr_compile: %s", oclf_last_error(env->ctx));
        expr_destroy(x);
        return NULL;
    }
    for (int i = 0; i < p->n_inputs; i++) {
        const size_t n = input_elems(p, i, x->rows, x->cols), es = kind_elem_size(p->kind[i], dt);
        if (p->kind[i] == OCLF_EXPR_SCALAR)
            continue;
        if (!(x->host[i] = malloc(n * es + 1))) {
            snprintf(err, errlen, "out of host memory");
            expr_destroy(x);
            return NULL;
        }
        if (p->kind[i] == OCLF_EXPR_BITS)
            fill_bits(x->host[i], n, 1 + (uint64_t)i);
        else
            op_fill_random(dt, x->host[i], n, -4.0f, 4.0f, 1 + (uint64_t)i);
        if (!(x->in[i] = op_upload(env, x->host[i], n * es, err, errlen))) {
            expr_destroy(x);
            return NULL;
        }
    }
    for (int j = 0; j < n_outputs(p); j++) {
        const oclf_expr_kind k = out_kind(p, j);
        const size_t bytes = kind_elems(k, x->rows, x->cols) * kind_elem_size(k, dt);
        if (!(x->out[j] = op_upload(env, NULL, bytes, err, errlen))) {
            expr_destroy(x);
            return NULL;
        }
    }
    return x;
}

static oclf_status expr_run(const op_env *env, void *v, const oclf_choice *ch, cl_event *ev)
{
    expr_inst *x = v;
    oclf_expr_arg a[MAX_IN];
    memset(a, 0, sizeof a);
    for (int i = 0; i < x->p->n_inputs; i++) {
        a[i].buf = (oclf_buf){x->in[i], 0, 0};
        a[i].scalar = x->p->scalar;
    }
    oclf_buf out[MAX_OUT];
    for (int j = 0; j < MAX_OUT; j++)
        out[j] = (oclf_buf){x->out[j], 0, 0};
    return oclf_expr_run(x->e, env->queue, x->rows, x->cols, a, out, SEED, 0, ch, 0, NULL, ev);
}

/* The value of input i at (r, c), 0 when there is none. */
static double input_at(const expr_inst *x, int i, size_t r, size_t c)
{
    if (i >= x->p->n_inputs)
        return 0;
    switch (x->p->kind[i]) {
    case OCLF_EXPR_MATRIX: return oclf_ref_get(x->dtype, x->host[i], r * x->cols + c);
    case OCLF_EXPR_BITS: {
        const uint32_t *w = x->host[i];
        return (double)(w[r * bit_words(x->cols) + c / 32] >> (c % 32) & 1u);
    }
    case OCLF_EXPR_ROW: return oclf_ref_get(x->dtype, x->host[i], c);
    case OCLF_EXPR_COL: return oclf_ref_get(x->dtype, x->host[i], r);
    default: return x->p->scalar;
    }
}

/* A bits output's words against the reference's nonzeros (bits past cols
 * 0); 1 when all match. */
static int verify_bits(const op_env *env, const expr_inst *x, int j, char *msg, size_t len)
{
    const size_t nw = bit_words(x->cols), n = x->rows * nw;
    uint32_t *got = malloc(n * sizeof *got + 1);
    if (!got || op_download(env, x->out[j], got, n * sizeof *got)) {
        free(got);
        snprintf(msg, len, "output %d: cannot read it back", j);
        return 0;
    }
    int ok = 1;
    for (size_t r = 0; r < x->rows && ok; r++)
        for (size_t w = 0; w < nw && ok; w++) {
            uint32_t want = 0;
            for (size_t k = 0; k < 32 && w * 32 + k < x->cols; k++)
                want |= (uint32_t)(x->want[j][r * x->cols + w * 32 + k] != 0) << k;
            if (got[r * nw + w] != want) {
                snprintf(msg, len, "output %d (bits): row %zu word %zu is %08x, not %08x", j, r,
                         w, got[r * nw + w], want);
                ok = 0;
            }
        }
    free(got);
    return ok;
}

static int expr_verify(const op_env *env, void *v, const oclf_choice *ch, char *msg, size_t len)
{
    expr_inst *x = v;
    const size_t n = x->rows * x->cols;
    /* Sentinel outputs, so a run that writes nothing cannot pass. */
    for (int j = 0; j < n_outputs(x->p); j++) {
        const oclf_expr_kind k = out_kind(x->p, j);
        const size_t bytes = kind_elems(k, x->rows, x->cols) * kind_elem_size(k, x->dtype);
        void *sentinel = malloc(bytes + 1);
        if (sentinel) {
            memset(sentinel, 0x7f, bytes);
            op_rewrite(env, x->out[j], sentinel, bytes);
            free(sentinel);
        }
    }
    oclf_status st = expr_run(env, x, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    for (int j = 0; j < n_outputs(x->p); j++) {
        const preset_ref ref = j ? x->p->ref1 : x->p->ref;
        if (!x->want[j] && (x->want[j] = malloc((n + 1) * sizeof *x->want[j])) != NULL)
            for (size_t r = 0; r < x->rows; r++)
                for (size_t c = 0; c < x->cols; c++)
                    x->want[j][r * x->cols + c] =
                        ref(input_at(x, 0, r, c), input_at(x, 1, r, c), x->p->scalar,
                            r * x->cols + c);
        if (!x->want[j]) {
            snprintf(msg, len, "out of host memory");
            return 0;
        }
        const int ok = out_kind(x->p, j) == OCLF_EXPR_BITS
                           ? verify_bits(env, x, j, msg, len)
                           : op_verify_packed(env, x->out[j], x->dtype, x->want[j], x->rows,
                                              x->cols, msg, len);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Each array input read once, each output written once; a bit matrix as
 * cols / 8 bytes a row. */
static double kind_bytes(oclf_expr_kind k, const op_shape *s, oclf_dtype dt)
{
    if (k == OCLF_EXPR_BITS)
        return (double)s->d[0] * (double)s->d[1] / 8;
    return (double)kind_elems(k, s->d[0], s->d[1]) * (double)oclf_dtype_size(dt);
}

static double expr_bytes(const preset *p, const op_shape *s, oclf_dtype dt)
{
    double bytes = 0;
    for (int i = 0; i < p->n_inputs; i++)
        bytes += kind_bytes(p->kind[i], s, dt);
    for (int j = 0; j < n_outputs(p); j++)
        bytes += kind_bytes(out_kind(p, j), s, dt);
    return bytes;
}

/* rows, cols and the form the library keys records by. */
static int expr_lib_shape(const preset *p, const op_shape *s, uint64_t *dims)
{
    oclf_expr_decl in[MAX_IN], out[MAX_OUT];
    decls(p, OCLF_F32, in, out);
    uint64_t form = 0;
    oclf_expr_form_id(p->source, in, (unsigned)p->n_inputs, out, (unsigned)n_outputs(p), &form);
    dims[0] = s->d[0];
    dims[1] = s->d[1];
    dims[2] = form;
    return 3;
}

/* VEC 1..16 by WGS 16..1024, on both paths; fused also with 8 rows per
 * work-item where there are 16 rows or more. The library's validation
 * drops what this device cannot take (a work-group over its limit). */
static int expr_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                      oclf_path path, oclf_params *out, int max)
{
    op_point_check c;
    op_point_check_init(&c, env, op, s, dt, path);
    const int max_rows = path == OCLF_PATH_FUSED && s->d[0] >= 16 ? 8 : 1;
    int n = 0;
    for (int vec = 1; vec <= 16; vec *= 2)
        for (int64_t wgs = 16; wgs <= 1024; wgs *= 2)
            for (int rows = 1; rows <= max_rows; rows *= 8) {
                oclf_params p;
                memset(&p, 0, sizeof p);
                oclf_params_set(&p, "VEC", vec);
                oclf_params_set(&p, "WGS", wgs);
                if (rows > 1)
                    oclf_params_set(&p, "ROWS", rows);
                op_space_add_valid(&c, out, &n, max, &p);
            }
    return op_gpu_vector_cap(env, dt, out, n);
}

/* Every preset: whole vector chunks with scalar tails, one work-item per
 * element, several groups. Both shapes hold 385 elements: the unfused
 * temporaries of a call are released at its end, and oclgrind's
 * uninitialized-value plugin flagged the elements of a new temporary beyond
 * a freed smaller one (2x8 before 5x77: elements 16 on) although every one
 * was written first. ROWS=4 in the traffic configuration covers the
 * shape's rows, so the bias of ew_bias_gelu_dropout is loaded once per
 * column; held to exactly the minimum. */
static const op_kernel_check expr_check = {
    "5x77,1x385", "VEC=4,WGS=16;VEC=1,WGS=8,ROWS=3;VEC=16,WGS=4,ROWS=2", "VEC=4,WGS=16,ROWS=4",
    "4x200", 0, 2};

/* The bit-matrix presets: the same shapes and structures; traffic on a
 * width of whole words, where the bytes written and read are exactly the
 * minimum's cols / 8 a row. */
static const op_kernel_check expr_bits_check = {
    "5x77,1x385", "VEC=4,WGS=16;VEC=1,WGS=8,ROWS=3;VEC=16,WGS=4,ROWS=2", "VEC=4,WGS=16,ROWS=4",
    "4x256", 0, 2};

/* UNFUSED 0: a single operation, whose unfused path is the same one
 * kernel (nothing to compare). */
#define EXPR_DESC(NAME, PRESET, HELP) EXPR_DESC_FULL(NAME, PRESET, HELP, expr_check, 1)
#define EXPR_DESC_FULL(NAME, PRESET, HELP, CHECK, UNFUSED)                                    \
    static void *NAME##_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err, \
                               size_t errlen)                                                 \
    {                                                                                         \
        return expr_create(&PRESET, env, s, dt, err, errlen);                                 \
    }                                                                                         \
    static double NAME##_bytes(const op_shape *s, oclf_dtype dt)                              \
    {                                                                                         \
        return expr_bytes(&PRESET, s, dt);                                                    \
    }                                                                                         \
    static int NAME##_lib_shape(const op_shape *s, uint64_t *dims)                            \
    {                                                                                         \
        return expr_lib_shape(&PRESET, s, dims);                                              \
    }                                                                                         \
    const op_desc op_##NAME = {                                                               \
        .name = #NAME,                                                                        \
        .lib_op = "expr",                                                                     \
        .shape_help = "ROWSxCOLS, " HELP,                                                     \
        .ndims = 2,                                                                           \
        .dim_names = {"rows", "cols"},                                                        \
        .bench_shapes = "4096x4096",                                                          \
        .uncached_shape = "1024x4096",                                                        \
        .uncached_dim = 0,                                                                    \
        .tune_shapes = "4096x4096,1x8192",                                                    \
        .test_shape = "5x77",                                                                 \
        .has_unfused = UNFUSED,                                                               \
        .create = NAME##_create,                                                              \
        .run = expr_run,                                                                      \
        .verify = expr_verify,                                                                \
        .min_bytes = NAME##_bytes,                                                            \
        .destroy = expr_destroy,                                                              \
        .space = expr_space,                                                                  \
        .lib_shape = NAME##_lib_shape,                                                        \
        .lib_dim_names = {"rows", "cols", "form"},                                            \
        .kernel_check = &CHECK,                                                               \
    }

EXPR_DESC(ew_softplus, p_softplus, "y = log(exp(x) + 1)");
EXPR_DESC(ew_add_relu_scale, p_add_relu_scale, "y = relu(a + b) * s");
EXPR_DESC(ew_bias_gelu_dropout, p_bias_gelu_dropout, "y = dropout(gelu(x + bias), 0.1)");
EXPR_DESC(ew_chain8, p_chain8, "y = relu(min(max(x * 0.5 + 0.25, -1), 1) - 0.125) * 2 + 1");
EXPR_DESC_FULL(ew_relu_mask, p_relu_mask, "y = relu(x); m = x > 0 (m bits)", expr_bits_check, 1);
EXPR_DESC_FULL(ew_relu_mask_bwd, p_relu_mask_bwd, "dx = m ? dy : 0 (m bits)", expr_bits_check, 1);
EXPR_DESC_FULL(ew_dropout_bwd, p_dropout_bwd,
               "dx = dropout(dy, 0.1), the forward's mask regenerated", expr_check, 0);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Compiles softplus under fresh names (the same canonical form, so the
 * same program) and runs it once on 1 x 64 elements: milliseconds from the
 * compile call to the end of the run. */
static double first_launch(const op_env *env, oclf_context *ctx, int trial, cl_mem x, cl_mem y)
{
    char xn[16], yn[16], src[64];
    snprintf(xn, sizeof xn, "x%d", trial);
    snprintf(yn, sizeof yn, "y%d", trial);
    snprintf(src, sizeof src, "%s = log(exp(%s) + 1);", yn, xn);
    const oclf_expr_decl in = {xn, OCLF_EXPR_MATRIX, OCLF_F32}, out = {yn, OCLF_EXPR_MATRIX, OCLF_F32};
    oclf_expr *e = NULL;
    const double t0 = now_ms();
    if (oclf_expr_compile(ctx, src, &in, 1, &out, 1, &e) != OCLF_SUCCESS)
        return -1;
    const oclf_expr_arg a = {{x, 0, 0}, 0};
    const oclf_buf ob = {y, 0, 0};
    oclf_status st = oclf_expr_run(e, env->queue, 1, 64, &a, &ob, 0, 0, NULL, 0, NULL, NULL);
    clFinish(env->queue);
    const double t = now_ms() - t0;
    oclf_expr_release(e);
    return st == OCLF_SUCCESS ? t : -1;
}

int op_expr_first_launch_ms(const op_env *env, double *memory_ms, double *disk_ms)
{
    enum { TRIALS = 5 };
    cl_mem x = op_upload(env, NULL, 64 * sizeof(float), NULL, 0);
    cl_mem y = op_upload(env, NULL, 64 * sizeof(float), NULL, 0);
    double mem[TRIALS], disk[TRIALS];
    int ok = x && y && first_launch(env, env->ctx, 0, x, y) >= 0; /* builds or loads it */
    for (int t = 0; ok && t < TRIALS; t++) {
        oclf_context *fresh = NULL;
        ok = (mem[t] = first_launch(env, env->ctx, t + 1, x, y)) >= 0 &&
             oclf_context_create(env->cl, env->device, NULL, &fresh) == OCLF_SUCCESS &&
             (disk[t] = first_launch(env, fresh, t + 1, x, y)) >= 0;
        oclf_context_destroy(fresh);
    }
    if (x)
        clReleaseMemObject(x);
    if (y)
        clReleaseMemObject(y);
    if (!ok)
        return -1;
    *memory_ms = tm_median(mem, TRIALS);
    *disk_ms = tm_median(disk, TRIALS);
    return 0;
}
