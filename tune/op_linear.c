/* Descriptor of the linear layer for the benchmark and the tuner. */
#include "opdesc.h"

#include "ref.h"

#include <clblast_c.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bench's layer: ResNet's relu(x W^T + b + r), W [N, K] as PyTorch
 * stores it: bias, residual and activation are all in the epilogue. */
typedef struct lin_inst {
    oclf_dtype dtype;
    size_t m, n, k;
    void *hx, *hw, *hb, *hr;
    cl_mem x, w, b, r, y;
    /* f32 copies of x and W for the yardstick (the GEMM library's plain
     * Sgemm) when the dtype is not f32; else x and w themselves. */
    cl_mem xf, wf, yf;
} lin_inst;

/* What an instance holds, released (the struct itself stays). */
static void lin_release(lin_inst *a)
{
    cl_mem all[] = {a->x, a->w, a->b, a->r, a->y, a->xf, a->wf, a->yf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(a->hx), free(a->hw), free(a->hb), free(a->hr);
}

static void lin_destroy(void *p)
{
    if (p)
        lin_release(p);
    free(p);
}

/* An f32 copy of n elements of host data in dtype. */
static cl_mem upload_f32(const op_env *env, oclf_dtype dt, const void *h, size_t n, char *err,
                         size_t errlen)
{
    float *f = malloc(n * 4 + 4);
    if (!f) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        f[i] = oclf_ref_get(dt, h, i);
    cl_mem m = op_upload(env, f, n * 4, err, errlen);
    free(f);
    return m;
}

static void *lin_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                        size_t errlen)
{
    lin_inst *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    a->dtype = dt;
    a->m = s->d[0];
    a->n = s->d[1];
    a->k = s->d[2];
    const size_t es = oclf_dtype_size(dt), nx = a->m * a->k, nw = a->n * a->k, ny = a->m * a->n;
    a->hx = malloc(nx * es + 4);
    a->hw = malloc(nw * es + 4);
    a->hb = malloc(a->n * es + 4);
    a->hr = malloc(ny * es + 4);
    if (!a->hx || !a->hw || !a->hb || !a->hr) {
        snprintf(err, errlen, "out of host memory for %zu x %zu x %zu", a->m, a->n, a->k);
        lin_destroy(a);
        return NULL;
    }
    op_fill_random(dt, a->hx, nx, -1.0f, 1.0f, 21);
    op_fill_random(dt, a->hw, nw, -1.0f, 1.0f, 22);
    op_fill_random(dt, a->hb, a->n, -1.0f, 1.0f, 23);
    op_fill_random(dt, a->hr, ny, -1.0f, 1.0f, 24);
    if (!(a->x = op_upload(env, a->hx, nx * es, err, errlen)) ||
        !(a->w = op_upload(env, a->hw, nw * es, err, errlen)) ||
        !(a->b = op_upload(env, a->hb, a->n * es, err, errlen)) ||
        !(a->r = op_upload(env, a->hr, ny * es, err, errlen)) ||
        !(a->y = op_upload(env, NULL, ny * es, err, errlen))) {
        lin_destroy(a);
        return NULL;
    }
    if (dt != OCLF_F32 && (!(a->xf = upload_f32(env, dt, a->hx, nx, err, errlen)) ||
                           !(a->wf = upload_f32(env, dt, a->hw, nw, err, errlen)) ||
                           !(a->yf = op_upload(env, NULL, ny * 4, err, errlen)))) {
        lin_destroy(a);
        return NULL;
    }
    return a;
}

static void lin_epilogue(lin_inst *a, oclf_buf *b, oclf_buf *r, oclf_linear_epilogue *e)
{
    *b = (oclf_buf){a->b, 0, 0};
    *r = (oclf_buf){a->r, 0, 0};
    oclf_linear_epilogue_init(e);
    e->bias = b;
    e->residual = r;
    e->residual_before_act = 1;
    e->act = OCLF_LINEAR_RELU;
}

/* The yardstick: the GEMM library's plain Sgemm, y = x W^T, no epilogue. */
static oclf_status lin_yardstick(const op_env *env, lin_inst *a, cl_event *ev)
{
    cl_command_queue q = env->queue;
    cl_mem x = a->xf ? a->xf : a->x, w = a->wf ? a->wf : a->w, y = a->yf ? a->yf : a->y;
    CLBlastStatusCode s =
        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, a->m, a->n,
                     a->k, 1.0f, x, 0, a->k, w, 0, a->k, 0.0f, y, 0, a->n, &q, ev);
    return s == CLBlastSuccess ? OCLF_SUCCESS : OCLF_OPENCL_ERROR;
}

static oclf_status lin_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    lin_inst *a = p;
    int64_t yard = 0;
    if (ch && oclf_params_get(&ch->params, OP_YARDSTICK_PARAM, &yard) && yard)
        return lin_yardstick(env, a, ev);
    oclf_buf b, r;
    oclf_linear_epilogue e;
    lin_epilogue(a, &b, &r, &e);
    return oclf_linear(env->ctx, env->queue, a->dtype, a->m, a->n, a->k, (oclf_buf){a->x, 0, 0},
                       (oclf_buf){a->w, 0, 0}, (oclf_buf){a->y, 0, 0}, OCLF_WEIGHT_NK,
                       OCLF_LINEAR_NONE, &e, ch, 0, NULL, ev);
}

/* The first, a middle and the last row of y against the reference (all
 * of them would cost M x N x K in fp64 on the host), the weight read from
 * `wd` (fp64 [N, K]) when given, else from the instance's. */
static int lin_check_rows(const op_env *env, const lin_inst *a, const double *wd, char *msg,
                          size_t len)
{
    if (a->m == 0)
        return 1;
    const size_t es = oclf_dtype_size(a->dtype);
    void *got = malloc(a->m * a->n * es + 4);
    double *want = malloc(a->n * sizeof *want + 8), *scale = malloc(a->n * sizeof *scale + 8);
    int ok = got && want && scale && op_download(env, a->y, got, a->m * a->n * es) == 0;
    if (!ok)
        snprintf(msg, len, "cannot read the result back");
    const size_t rows[3] = {0, a->m / 2, a->m - 1};
    for (int t = 0; t < 3 && ok; t++) {
        const size_t i = rows[t];
        oclf_ref_linear_args r = {
            .dtype = a->dtype, .m = 1, .n = a->n, .k = a->k,
            .x = (const char *)a->hx + i * a->k * es, .xs = a->k,
            .prologue = OCLF_LINEAR_NONE, .w = a->hw, .ws = a->k, .layout = OCLF_WEIGHT_NK,
            .bias = a->hb, .residual = (const char *)a->hr + i * a->n * es, .rs = a->n,
            .alpha = 1.0f, .beta = 1.0f, .residual_before_act = 1, .act = OCLF_LINEAR_RELU,
            .wd = wd};
        oclf_ref_linear(&r, want, scale);
        size_t first = 0;
        double maxerr = 0;
        size_t bad = oclf_ref_linear_compare(a->dtype, (const char *)got + i * a->n * es, a->n,
                                             want, scale, 1, a->n, &first, &maxerr);
        if (bad) {
            ok = 0;
            snprintf(msg, len, "row %zu: %zu elements out of tolerance (first column %zu, max "
                               "error %g)",
                     i, bad, first, maxerr);
        }
    }
    free(got), free(want), free(scale);
    return ok;
}

static int lin_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    lin_inst *a = p;
    oclf_status st = lin_run(env, a, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    return lin_check_rows(env, a, NULL, msg, len);
}

/* x, W, bias and residual read once, y written once. */
static double lin_bytes(const op_shape *s, oclf_dtype dt)
{
    const double m = (double)s->d[0], n = (double)s->d[1], k = (double)s->d[2];
    return (m * k + n * k + n + 2 * m * n) * (double)oclf_dtype_size(dt);
}

static double lin_flops(const op_shape *s)
{
    return 2.0 * (double)s->d[0] * (double)s->d[1] * (double)s->d[2];
}

static int lin_lib_shape(const op_shape *s, uint64_t *dims);

/* One point of the fused space, when the library takes it. */
static void lin_point(const op_point_check *c, oclf_params *out, int *n, int max, int mb, int nb,
                      int vec, int64_t wgm, int64_t wgn, int stage, int kc, int mv)
{
    oclf_params p;
    memset(&p, 0, sizeof p);
    oclf_params_set(&p, "MB", mb);
    oclf_params_set(&p, "NB", nb);
    oclf_params_set(&p, "VEC", vec);
    oclf_params_set(&p, "WGM", wgm);
    oclf_params_set(&p, "WGN", wgn);
    oclf_params_set(&p, "STAGE", stage);
    oclf_params_set(&p, "KC", kc);
    oclf_params_set(&p, "MV", mv);
    op_space_add_valid(c, out, n, max, &p);
}

/* The matrix-unit structure's tiles (STAGE 2: MB x NB fragments of 16 x 8
 * a warp, WGM x WGN warps, KC of K a stage), where the heuristic takes it
 * for the shape, i.e. where the device runs the instruction natively (its
 * emulation, which a forced STAGE 2 runs anywhere, is never worth timing):
 * 128 x 128 and 64 x 128 tiles of 8 warps, 128 x 64 of 4, K in 32 or 64. */
static void lin_mma_space(const op_env *env, const op_shape *s, oclf_dtype dt,
                          const op_point_check *chk, oclf_params *out, int *n, int max)
{
    uint64_t dims[4];
    lin_lib_shape(s, dims);
    oclf_tuning_decision d;
    int64_t stage = 0;
    if (oclf_tuning_resolve(env->ctx, "linear", dt, dims, 4, OCLF_PATH_FUSED, &d) != OCLF_SUCCESS ||
        !oclf_params_get(&d.heuristic.params, "STAGE", &stage) || stage != 2)
        return;
    static const int tiles[][4] = {{4, 4, 2, 4}, {2, 4, 2, 4}, {4, 4, 2, 2}, {2, 2, 2, 4}};
    for (int t = 0; t < 4; t++)
        for (int kc = 32; kc <= 64; kc += 32)
            lin_point(chk, out, n, max, tiles[t][0], tiles[t][1], 8, tiles[t][2], tiles[t][3], 2,
                      kc, 0);
}

/* The register-tiled structure's tiles (STAGE 3: MB x NB accumulators a
 * work-item, WGM x WGN work-items, KC of K a stage, loads of 4 elements),
 * a GPU's from 17 rows: 16 x 16 work-items of 8 x 8, 4 x 8 and 8 x 4
 * (128 x 128, 64 x 128, 128 x 64), K in 8 or 16: what no GPU compiler of
 * the cross-compile suite spilled. Tiles with mostly padding rows are left
 * out. */
static void lin_rt_space(const op_shape *s, const op_point_check *chk, oclf_params *out, int *n,
                         int max)
{
    const uint64_t m = s->d[0] ? s->d[0] : 1;
    static const int tiles[][4] = {{8, 8, 16, 16}, {4, 8, 16, 16}, {8, 4, 16, 16}};
    for (int t = 0; t < 3; t++) {
        if ((uint64_t)(tiles[t][0] * tiles[t][2]) > 2 * m)
            continue;
        for (int kc = 8; kc <= 16; kc += 8)
            lin_point(chk, out, n, max, tiles[t][0], tiles[t][1], 4, tiles[t][2], tiles[t][3],
                      3, kc, 0);
    }
}

/* The search space, pruned by a model before anything compiles rather than
 * walked at random: the register block comes first, and only blocks whose
 * accumulators and operands fit the register file are kept (a CPU: 32
 * vector registers of VEC = 16 floats; a GPU: what no GPU compiler
 * spilled, staged tiles of float4 with at most OP_GPU_STAGED_STEP_VECTORS
 * operand vectors a step, the matrix-vector shape at
 * OP_GPU_MAX_BLOCK_FLOATS accumulator floats), largest arithmetic intensity (MB x NB per MB + NB loads) first,
 * since the tuner screens candidates in order under its budget. For each
 * block, the group shapes that cover the shape without mostly idle work-
 * items, and staging only where local memory is the device's own (a GPU)
 * with K chunks of 16 and 32. Few rows (M <= 16) add the matrix-vector
 * shape with 64 or 256 lanes over K. The library's validation drops what
 * the device cannot run (group size, local memory, KC against VEC). */
static int lin_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                     oclf_path path, oclf_params *out, int max)
{
    op_point_check chk;
    op_point_check_init(&chk, env, op, s, dt, path);
    int n = 0;
    if (path == OCLF_PATH_UNFUSED) {
        oclf_params p;
        memset(&p, 0, sizeof p);
        op_space_add_valid(&chk, out, &n, max, &p); /* no parameters: the GEMM library tunes itself */
        return n;
    }
    const int gpu = op_is_gpu(env);
    const uint64_t m = s->d[0] ? s->d[0] : 1;
    /* register blocks, in order of intensity */
    static const int blocks[][2] = {{4, 4}, {4, 8}, {8, 4}, {2, 8}, {8, 2}, {4, 2},
                                    {2, 4}, {2, 2}, {1, 8}, {1, 4}, {4, 1}, {2, 1}, {1, 2},
                                    {1, 1}};
    static const int vecs[] = {16, 8, 4, 2, 1};
    for (int b = 0; b < (int)(sizeof blocks / sizeof *blocks); b++) {
        const int mb = blocks[b][0], nb = blocks[b][1];
        if ((uint64_t)mb > m * 2 && mb > 1)
            continue; /* mostly padding rows */
        for (int v = 0; v < 5; v++) {
            const int vec = vecs[v];
            /* GPU: staged tiles in vectors of exactly OP_GPU_MAX_VEC_FLOATS
             * with at most OP_GPU_STAGED_STEP_VECTORS operands a step (2x2
             * of float4 at most: 16 accumulator floats), blocks of fewer
             * than the spill cap's floats left out (too little to do per
             * operand loaded); the matrix-vector shape in blocks of exactly
             * the cap's accumulator floats */
            const int staged_ok = vec == OP_GPU_MAX_VEC_FLOATS &&
                                  mb + nb <= OP_GPU_STAGED_STEP_VECTORS &&
                                  mb * nb * vec >= OP_GPU_MAX_BLOCK_FLOATS;
            const int mv_ok = mb * nb * vec == OP_GPU_MAX_BLOCK_FLOATS &&
                              vec <= OP_GPU_MAX_VEC_FLOATS;
            if (gpu ? !staged_ok && !mv_ok : (vec < 8 || mb * nb + mb + nb > 32))
                continue;
            if (!gpu) {
                /* no barriers: a group's work-items along M share the W block */
                const uint64_t blk = (m + (uint64_t)mb - 1) / (uint64_t)mb;
                for (uint64_t wgm = 1; wgm <= 64; wgm *= 4) {
                    if (wgm > blk && wgm > 1)
                        break;
                    lin_point(&chk, out, &n, max, mb, nb, vec, (int64_t)wgm, 1, 0, 16, 0);
                }
                continue;
            }
            static const int groups[][2] = {{8, 8}, {16, 16}};
            for (int g = 0; g < 2 && staged_ok; g++)
                for (int kc = 16; kc <= 32; kc += 16) {
                    const uint64_t wgm = (uint64_t)groups[g][0], wgn = (uint64_t)groups[g][1];
                    if (wgm * (uint64_t)mb > 2 * m && wgm > 1)
                        continue; /* mostly idle rows of work-items */
                    lin_point(&chk, out, &n, max, mb, nb, vec, (int64_t)wgm, (int64_t)wgn, 1, kc,
                              0);
                }
            if (m <= 16 && nb <= 2 && mv_ok)
                for (uint64_t wgn = 64; wgn <= 256; wgn *= 4)
                    lin_point(&chk, out, &n, max, mb, nb, vec, 1, (int64_t)wgn, 0, 16, 1);
        }
    }
    if (gpu && m > 16)
        lin_rt_space(s, &chk, out, &n, max);
    if (gpu && dt != OCLF_F32 && strcmp(op->name, "linear") == 0)
        lin_mma_space(env, s, dt, &chk, out, &n, max);
    return n;
}

/* The library keys records by the weight layout too; the bench's is NK. */
static int lin_lib_shape(const op_shape *s, uint64_t *dims)
{
    dims[0] = s->d[0];
    dims[1] = s->d[1];
    dims[2] = s->d[2];
    dims[3] = OCLF_WEIGHT_NK;
    return 4;
}

/* m x n x k: tails in every dimension, several groups, and 40 rows, which
 * a GPU's defaults give the register-tiled structure; the CPU block, a
 * KN-friendly block, staged tiles, the matrix-vector shape (NK; a KN
 * call runs the tiled kernel) and register tiles. Traffic: one staged work-group covers the 4
 * x 32 output, so x and W leave global memory once, and bias, residual and
 * y once each: the minimum. */
static const op_kernel_check linear_check = {
    "7x37x45,1x20x33,40x20x17",
    "MB=4,NB=4,VEC=16,WGM=2,WGN=1,STAGE=0,KC=16,MV=0;"
    "MB=2,NB=2,VEC=4,WGM=2,WGN=3,STAGE=0,KC=16,MV=0;"
    "MB=2,NB=2,VEC=4,WGM=4,WGN=4,STAGE=1,KC=16,MV=0;"
    "MB=2,NB=1,VEC=4,WGM=1,WGN=16,STAGE=0,KC=16,MV=1;"
    "MB=4,NB=4,VEC=4,WGM=2,WGN=2,STAGE=3,KC=8,MV=0",
    "MB=2,NB=4,VEC=1,WGM=2,WGN=8,STAGE=1,KC=16,MV=0", "4x32x64", 1, 1};

const op_desc op_linear = {
    .name = "linear",
    .shape_help = "MxNxK (rows x outputs x inputs), W [N, K], relu(x W^T + bias + residual)",
    .ndims = 3,
    .dim_names = {"m", "n", "k"},
    .bench_shapes = "1x4096x4096,1024x1024x1024",
    .bench_full_shapes = "128x128x128,256x256x256,512x512x512,16x4096x4096,128x4096x11008,"
                         "2048x4096x4096",
    .uncached_shape = "1x4096x4096",
    .uncached_dim = 1,
    .tune_shapes = "128x128x128,256x256x256,1024x1024x1024,1x4096x4096,16x4096x4096",
    .llm_shapes = "1x4096x4096,16x4096x4096,128x4096x11008,2048x4096x4096",
    /* qkv (32 + 2 x 8 heads of 128), o, gate|up (2 x 14336), down */
    .layer_shapes = "1x6144x4096,1x4096x4096,1x28672x4096,1x4096x14336,16x6144x4096,"
                    "16x4096x4096,16x28672x4096,16x4096x14336,512x6144x4096,512x4096x4096,"
                    "512x28672x4096,512x4096x14336",
    .test_shape = "7x129x33",
    .has_unfused = 1,
    .yardstick = "the GEMM library's plain Sgemm (x W^T, no epilogue)",
    .create = lin_create,
    .run = lin_run,
    .verify = lin_verify,
    .min_bytes = lin_bytes,
    .flops = lin_flops,
    .destroy = lin_destroy,
    .space = lin_space,
    .lib_shape = lin_lib_shape,
    .lib_dim_names = {"m", "n", "k", "layout"},
    .kernel_check = &linear_check,
};

/* ---- linear_q: the same layer with a quantized W ------------------------ */
/* Shapes are MxNxKxF, F the weight format as the library keys it: format x
 * 1000 + group (1000 INT8 per channel, 1032 INT8 in groups of 32 (Q8_0
 * converted), 2032/2128 INT4 in groups of 32/128 (2032: Q4_0 converted),
 * 3032 Q8_0, 4032 Q4_0). The yardstick is oclf_linear over the same weight
 * dequantized into the call's dtype: in f16, the f16-weight layer the
 * quantized one replaces. */
typedef struct linq_inst {
    lin_inst dense; /* x, bias, residual, y; w and hw: the dequantized weight */
    int fmt;
    unsigned group;
    uint8_t *hq, *hs;  /* host q bytes and f16 scales (NULL for GGUF) */
    size_t qbytes, sbytes;
    double *wd;        /* the fp64 weight of the reference */
    cl_mem q, s;
} linq_inst;

static void linq_destroy(void *p)
{
    linq_inst *a = p;
    if (!a)
        return;
    if (a->q)
        clReleaseMemObject(a->q);
    if (a->s)
        clReleaseMemObject(a->s);
    free(a->hq), free(a->hs), free(a->wd);
    lin_release(&a->dense);
    free(a);
}

static uint64_t linq_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random quantized bytes and scales of the format, a weight of magnitude
 * about 1/sqrt(K) per element so that y stays near 1 at any K. GGUF d
 * values take both signs, as ggml's quantizer writes them. */
static int linq_make(linq_inst *a, size_t n, size_t k)
{
    const int gguf = a->fmt >= OCLF_QFORMAT_Q8_0;
    const size_t row = a->fmt == OCLF_QFORMAT_INT8   ? k
                       : a->fmt == OCLF_QFORMAT_INT4 ? k / 2
                       : a->fmt == OCLF_QFORMAT_Q8_0 ? k / 32 * 34
                                                     : k / 32 * 18;
    const size_t groups = a->group ? k / a->group : 1;
    a->qbytes = n * row;
    a->sbytes = gguf ? 0 : n * groups * 2;
    a->hq = malloc(a->qbytes + 4);
    a->hs = gguf ? NULL : malloc(a->sbytes + 4);
    if (!a->hq || (!gguf && !a->hs))
        return 0;
    uint64_t s = 0x5eed0f0c1u + (uint64_t)a->fmt * 7919u + a->group;
    for (size_t i = 0; i < a->qbytes; i++)
        a->hq[i] = (uint8_t)(linq_next(&s) >> 56);
    const double amp = (a->fmt == OCLF_QFORMAT_INT8 || a->fmt == OCLF_QFORMAT_Q8_0 ? 1.0 / 64
                                                                                   : 1.0 / 4) /
                       sqrt((double)(k ? k : 1));
    const size_t nscales = gguf ? n * (k / 32) : n * groups;
    for (size_t i = 0; i < nscales; i++) {
        const double u = (double)(linq_next(&s) >> 11) / 9007199254740992.0;
        const float v = (float)(amp * (gguf ? 2 * u - 1 : 0.5 + u));
        const uint16_t h = oclf_f32_to_f16(v);
        uint8_t *dst = gguf ? a->hq + (i / (k / 32)) * row + (i % (k / 32)) * (row / (k / 32))
                            : a->hs + 2 * i;
        dst[0] = (uint8_t)(h & 0xff);
        dst[1] = (uint8_t)(h >> 8);
    }
    return 1;
}

static void *linq_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                         size_t errlen)
{
    linq_inst *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    const size_t m = s->d[0], n = s->d[1], k = s->d[2];
    a->fmt = (int)(s->d[3] / 1000);
    a->group = (unsigned)(s->d[3] % 1000);
    const int known = (a->fmt == OCLF_QFORMAT_INT8 &&
                       (a->group == 0 || a->group == 32 || a->group == 64 || a->group == 128)) ||
                      (a->fmt == OCLF_QFORMAT_INT4 &&
                       (a->group == 32 || a->group == 64 || a->group == 128)) ||
                      (a->fmt >= OCLF_QFORMAT_Q8_0 && a->fmt <= OCLF_QFORMAT_Q4_0 && a->group == 32);
    if (!known || (a->group && k % a->group)) {
        snprintf(err, errlen, "weight format %llu: not one of 1000, 1032, 1064, 1128, 2032, 2064, "
                              "2128, 3032, 4032, or K not a multiple of its group",
                 (unsigned long long)s->d[3]);
        free(a);
        return NULL;
    }
    op_shape dense = {3, {m, n, k}};
    lin_inst *d = lin_create(env, &dense, dt, err, errlen);
    if (!d) {
        free(a);
        return NULL;
    }
    a->dense = *d;
    free(d);
    a->wd = malloc(n * k * sizeof *a->wd + 8);
    if (!a->wd || !linq_make(a, n, k)) {
        snprintf(err, errlen, "out of host memory for %zu x %zu", n, k);
        linq_destroy(a);
        return NULL;
    }
    const oclf_ref_qweight rq = {(oclf_qformat)a->fmt, a->group, a->hq,
                                 a->qbytes / (n ? n : 1), a->hs, OCLF_F16,
                                 a->group ? k / a->group : 1, NULL, 0};
    oclf_ref_dequant(&rq, n, k, a->wd);
    /* the yardstick's dense weight: the dequantized one in the call's dtype */
    for (size_t i = 0; i < n * k; i++)
        oclf_ref_set(dt, a->dense.hw, i, (float)a->wd[i]);
    const size_t es = oclf_dtype_size(dt);
    if (op_rewrite(env, a->dense.w, a->dense.hw, n * k * es) != 0 ||
        !(a->q = op_upload(env, a->hq, a->qbytes, err, errlen)) ||
        (a->hs && !(a->s = op_upload(env, a->hs, a->sbytes, err, errlen)))) {
        if (!err[0])
            snprintf(err, errlen, "cannot write the weight to the device");
        linq_destroy(a);
        return NULL;
    }
    return a;
}

static oclf_qweight linq_weight(const linq_inst *a)
{
    oclf_qweight w;
    memset(&w, 0, sizeof w);
    w.format = (oclf_qformat)a->fmt;
    w.group = a->group;
    w.q = (oclf_buf){a->q, 0, 0};
    w.scale = (oclf_buf){a->s, 0, 0};
    w.scale_dtype = OCLF_F16;
    return w;
}

static oclf_status linq_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    linq_inst *a = p;
    lin_inst *d = &a->dense;
    int64_t yard = 0;
    oclf_buf b, r;
    oclf_linear_epilogue e;
    lin_epilogue(d, &b, &r, &e);
    if (ch && oclf_params_get(&ch->params, OP_YARDSTICK_PARAM, &yard) && yard)
        return oclf_linear(env->ctx, env->queue, d->dtype, d->m, d->n, d->k, (oclf_buf){d->x, 0, 0},
                           (oclf_buf){d->w, 0, 0}, (oclf_buf){d->y, 0, 0}, OCLF_WEIGHT_NK,
                           OCLF_LINEAR_NONE, &e, NULL, 0, NULL, ev);
    const oclf_qweight w = linq_weight(a);
    return oclf_linear_q(env->ctx, env->queue, d->dtype, d->m, d->n, d->k, (oclf_buf){d->x, 0, 0},
                         &w, (oclf_buf){d->y, 0, 0}, OCLF_LINEAR_NONE, &e, ch, 0, NULL, ev);
}

/* As lin_verify, over the fp64 dequantized weight. */
static int linq_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    linq_inst *a = p;
    oclf_status st = linq_run(env, a, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st), oclf_last_error(env->ctx));
        return 0;
    }
    return lin_check_rows(env, &a->dense, a->wd, msg, len);
}

/* x, the weight's bytes (quants and scales), bias and residual read once,
 * y written once. */
static double linq_bytes(const op_shape *s, oclf_dtype dt)
{
    const double m = (double)s->d[0], n = (double)s->d[1], k = (double)s->d[2];
    const int fmt = (int)(s->d[3] / 1000);
    const unsigned g = (unsigned)(s->d[3] % 1000);
    const double per = fmt == OCLF_QFORMAT_INT8   ? 1.0
                       : fmt == OCLF_QFORMAT_INT4 ? 0.5
                       : fmt == OCLF_QFORMAT_Q8_0 ? 34.0 / 32
                                                  : 18.0 / 32;
    const double scales = fmt >= OCLF_QFORMAT_Q8_0 ? 0 : n * 2 * (g ? k / g : 1);
    return n * k * per + scales + (m * k + n + 2 * m * n) * (double)oclf_dtype_size(dt);
}

/* M = 1 and 7, tails along N, one and several groups along K, every
 * format; the traffic case runs one staged work-group over all 32 columns
 * of one row, so every weight byte and scale leaves global memory once. */
static const op_kernel_check linear_q_check = {
    "7x37x64x1000,1x20x64x1032,3x9x128x2032,5x11x256x2128,7x13x64x3032,2x37x96x4032",
    "MB=4,NB=4,VEC=16,WGM=2,WGN=1,STAGE=0,KC=16,MV=0,QSCALE=1;"
    "MB=2,NB=2,VEC=4,WGM=2,WGN=3,STAGE=0,KC=16,MV=0,QSCALE=0;"
    "MB=1,NB=2,VEC=2,WGM=3,WGN=1,STAGE=0,KC=16,MV=0,QSCALE=1;"
    "MB=2,NB=4,VEC=8,WGM=2,WGN=1,STAGE=0,KC=16,MV=0,QSCALE=0,PRE=1;"
    "MB=2,NB=2,VEC=4,WGM=4,WGN=4,STAGE=1,KC=16,MV=0,QSCALE=0;"
    "MB=2,NB=1,VEC=4,WGM=1,WGN=16,STAGE=0,KC=16,MV=1,QSCALE=0",
    "MB=1,NB=4,VEC=1,WGM=1,WGN=8,STAGE=1,KC=32,MV=0,QSCALE=0,PRE=0", "1x32x256x2032", 1, 1};

/* linear's space, each point with QSCALE, which only the unstaged tiled
 * kernel reads (0 elsewhere), and PRE 0; from 16 rows, the unstaged points
 * again with PRE 1 (the dense kernel over a dequantized tile of W). The
 * 4-bit pairs of nibble vectors need 2 x VEC to divide the group, which
 * the library's validation checks. */
static int linq_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                      oclf_path path, oclf_params *out, int max)
{
    oclf_params *base = malloc((size_t)(max > 0 ? max : 1) * sizeof *base);
    if (!base)
        return 0;
    const int nb = lin_space(env, op, s, dt, path, base, max);
    op_point_check chk;
    op_point_check_init(&chk, env, op, s, dt, path);
    int n = 0;
    for (int i = 0; i < nb; i++) {
        int64_t stage = 0, mv = 0;
        oclf_params_get(&base[i], "STAGE", &stage);
        oclf_params_get(&base[i], "MV", &mv);
        const int both = path == OCLF_PATH_FUSED && !stage && !mv;
        for (int q = both ? 2 : 0; q >= 0; q--) {
            if (q == 2 && s->d[0] < 16)
                continue;
            oclf_params p = base[i];
            if (path == OCLF_PATH_FUSED) {
                oclf_params_set(&p, "QSCALE", q == 1);
                oclf_params_set(&p, "PRE", q == 2);
            }
            op_space_add_valid(&chk, out, &n, max, &p);
        }
    }
    free(base);
    return n;
}

const op_desc op_linear_q = {
    .name = "linear_q",
    .shape_help = "MxNxKxF (rows x outputs x inputs x weight format: 1000 int8 per channel, "
                  "10GG int8 in groups of GG, 20GG int4 in groups of GG, 3032 Q8_0, 4032 Q4_0), "
                  "relu(x dequant(W)^T + bias + residual)",
    .ndims = 4,
    .dim_names = {"m", "n", "k", "qformat"},
    .bench_shapes = "1x4096x4096x1000,1x4096x4096x4032,1x4096x4096x2128,1x4096x4096x3032,"
                    "1x4096x4096x1032,1x4096x4096x2032",
    .bench_full_shapes = "1x11008x4096x1000,1x11008x4096x2128,1x11008x4096x3032,"
                         "1x11008x4096x4032,16x4096x4096x1000,16x4096x4096x2128,"
                         "16x4096x4096x3032,16x4096x4096x4032,512x4096x4096x1000,"
                         "512x4096x4096x2128,512x4096x4096x3032,512x4096x4096x4032",
    .uncached_shape = "1x4096x4096x2128",
    .uncached_dim = 1,
    .tune_shapes = "1x4096x4096x2128,1x4096x4096x4032,1x4096x4096x2032,16x4096x4096x2128",
    .llm_shapes = "1x4096x4096x2128,1x11008x4096x2128,16x4096x4096x2128,1x4096x4096x4032,"
                  "1x4096x4096x3032",
    /* the same products with INT4 weights in groups of 128 */
    .layer_shapes = "1x6144x4096x2128,1x4096x4096x2128,1x28672x4096x2128,1x4096x14336x2128,"
                    "16x6144x4096x2128,16x4096x4096x2128,16x28672x4096x2128,"
                    "16x4096x14336x2128,512x6144x4096x2128,512x4096x4096x2128,"
                    "512x28672x4096x2128,512x4096x14336x2128",
    .test_shape = "7x129x64x2032",
    .has_unfused = 1,
    .yardstick = "oclf_linear over the dequantized weight in the call's dtype",
    .create = linq_create,
    .run = linq_run,
    .verify = linq_verify,
    .min_bytes = linq_bytes,
    .flops = NULL,
    .destroy = linq_destroy,
    .space = linq_space,
    .kernel_check = &linear_q_check,
};
