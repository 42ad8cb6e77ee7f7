/*
 * The linear layer against the CPU reference: both weight layouts, every
 * prologue and epilogue activation, both residual orders, alpha and beta,
 * every dtype and path, odd M/N/K (1, 7, 129, 1000), K = 0, M = 0, strided
 * rows with offsets on every operand, y in place on the residual, several
 * kernel structures (the CPU and GPU defaults, staged tiles, the
 * matrix-vector shape, the matrix-unit fragments of the warp and of the
 * wavefront in their emulated form, the register tiles),
 * fused against unfused, and the bad arguments.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Quick form (th_quick(), OCLF_TEST_QUICK=1: the GPU-defaults run and
 * tools/test.sh --quick): fewer cases. */

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

typedef struct lin_case {
    oclf_dtype dtype;
    size_t m, n, k;
    oclf_weight_layout layout;
    oclf_linear_act prologue, act;
    int before, bias, res, inplace;
    float alpha, beta;
    size_t pad, offset; /* extra elements per row and before row 0, every operand */
    const oclf_choice *choice;
    /* Inputs that are multiples of 1/64 in [-1, 1], whose products and sums
     * are exact in f32: y must be the reference rounded once, bit for bit. */
    int exact;
} lin_case;

/* The context cases run on: the test environment's unless a test sets its
 * own (a build-log context, to tell which build ran). */
static oclf_context *case_ctx;

/* Every element of a random buffer moved to the nearest multiple of 1/64. */
static void exactify(oclf_dtype dt, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        oclf_ref_set(dt, buf, i, (float)(round(oclf_ref_get(dt, buf, i) * 64.0) / 64.0));
}

static lin_case base_case(oclf_dtype dt, size_t m, size_t n, size_t k)
{
    lin_case c;
    memset(&c, 0, sizeof c);
    c.dtype = dt;
    c.m = m;
    c.n = n;
    c.k = k;
    c.alpha = 1.0f;
    c.beta = 1.0f;
    return c;
}

/* Runs one case, checks it against the reference and that nothing but y's
 * elements was written; returns y packed (m x n, dtype), or NULL for m = 0. */
static void *run_case(const lin_case *c, double **scale_out)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dtype;
    const size_t es = oclf_dtype_size(dt), m = c->m, n = c->n, k = c->k, p = c->pad;
    const size_t o = c->offset;
    const int kn = c->layout == OCLF_WEIGHT_KN;
    const size_t xs = k + p, ws = (kn ? n : k) + p, wr = kn ? k : n, ys = n + p;
    const size_t nx = o + m * xs + 1, nw = o + wr * ws + 1, ny = o + m * ys + 1, nb = o + n + 1;
    th_seed(m * 1009 + n * 101 + k * 7 + (size_t)c->prologue * 3 + (size_t)c->act * 5 +
            (size_t)c->before + (size_t)c->layout * 11);
    void *x = th_random(dt, nx, -2.0f, 2.0f), *w = th_random(dt, nw, -1.0f, 1.0f);
    void *b = th_random(dt, nb, -1.0f, 1.0f), *y = th_random(dt, ny, -3.0f, 3.0f);
    void *r = c->inplace ? y : th_random(dt, ny, -3.0f, 3.0f);
    if (c->exact) {
        exactify(dt, x, nx), exactify(dt, w, nw), exactify(dt, b, nb), exactify(dt, y, ny);
        if (!c->inplace)
            exactify(dt, r, ny);
    }
    cl_mem mx = th_upload(x, nx * es), mw = th_upload(w, nw * es), mb = th_upload(b, nb * es);
    cl_mem my = th_upload(y, ny * es), mr = c->inplace ? my : th_upload(r, ny * es);
    oclf_buf bx = {mx, o, p ? xs : 0}, bw = {mw, o, p ? ws : 0}, by = {my, o, p ? ys : 0};
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
    double *want = malloc((m * n + 1) * sizeof *want), *scale = malloc((m * n + 1) * sizeof *scale);
    oclf_ref_linear_args ra = {dt, m, n, k, (const char *)x + o * es, xs, c->prologue,
                               (const char *)w + o * es, ws, c->layout,
                               c->bias ? (const char *)b + o * es : NULL,
                               c->res ? (const char *)r + o * es : NULL, ys, c->alpha, c->beta,
                               c->before, c->act, NULL};
    oclf_ref_linear(&ra, want, scale);
    cl_event ev = NULL;
    TH_OK(oclf_linear(case_ctx ? case_ctx : e->ctx, e->queue, dt, m, n, k, bx, bw, by, c->layout,
                      c->prologue, &epi, c->choice, 0, NULL, &ev));
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
                  "%s %zux%zux%zu layout %d pro %d act %d before %d pad %zu inplace %d: %zu "
                  "elements out of tolerance, first (%zu, %zu): got %g want %g, max error %g",
                  oclf_dtype_name(dt), m, n, k, (int)c->layout, (int)c->prologue, (int)c->act,
                  c->before, p, c->inplace, bad, first / n, first % n,
                  (double)oclf_ref_get(dt, got, o + (first / n) * ys + first % n),
                  bad ? want[first] : 0.0, maxerr);
    for (size_t i = 0; c->exact && i < m * n; i++) {
        const double g = oclf_ref_get(dt, got, o + (i / n) * ys + i % n);
        const double r1 = oclf_ref_round(dt, (float)want[i]);
        ck_assert_msg(g == r1, "%s %zux%zux%zu exact inputs: (%zu, %zu) is %.9g, the rounded "
                      "reference %.9g", oclf_dtype_name(dt), m, n, k, i / n, i % n, g, r1);
    }
    /* every element outside y's rows is as it was (the residual's copy of it
     * when in place, which holds the same sentinel values) */
    for (size_t i = 0; i < ny; i++) {
        const int inside = i >= o && (i - o) / ys < m && (i - o) % ys < n;
        if (!inside)
            ck_assert_msg(memcmp((char *)got + i * es, (char *)y + i * es, es) == 0,
                          "element %zu outside y was written", i);
    }
    void *packed = NULL;
    if (m) {
        packed = malloc(m * n * es);
        for (size_t i = 0; i < m; i++)
            memcpy((char *)packed + i * n * es, (char *)got + (o + i * ys) * es, n * es);
    }
    free(got), free(want);
    if (scale_out)
        *scale_out = scale;
    else
        free(scale);
    free(x), free(w), free(b), free(y);
    if (!c->inplace)
        free(r), clReleaseMemObject(mr);
    clReleaseMemObject(mx), clReleaseMemObject(mw), clReleaseMemObject(mb), clReleaseMemObject(my);
    return packed;
}

/* The case on both paths, each against the reference, and fused against
 * unfused: within twice the dtype's tolerance of each other, relative to
 * the same magnitude as the reference check. */
static void both_paths(lin_case c)
{
    oclf_choice f = th_choice(OCLF_PATH_FUSED), u = th_choice(OCLF_PATH_UNFUSED);
    const oclf_choice *given = c.choice;
    c.choice = given ? given : &f;
    double *scale = NULL;
    void *rf = run_case(&c, &scale);
    c.choice = &u;
    void *ru = run_case(&c, NULL);
    const double tol = c.dtype == OCLF_F32 ? 2e-5 : c.dtype == OCLF_F16 ? 4e-3 : 3.2e-2;
    for (size_t i = 0; rf && ru && i < c.m * c.n; i++) {
        const double a = oclf_ref_get(c.dtype, rf, i), b = oclf_ref_get(c.dtype, ru, i);
        ck_assert_msg((isnan(a) && isnan(b)) || fabs(a - b) <= tol * (fabs(b) + scale[i]),
                      "%s %zux%zux%zu: fused %g and unfused %g differ at %zu",
                      oclf_dtype_name(c.dtype), c.m, c.n, c.k, a, b, i);
    }
    free(rf), free(ru), free(scale);
}

/* Every prologue (epilogue plain) and every epilogue activation in both
 * residual orders (prologue none), per dtype and layout, with bias and
 * residual, alpha and beta not 1. */
START_TEST(test_matrix)
{
    const oclf_dtype dt = dtypes[_i / 2];
    const oclf_weight_layout layout = (oclf_weight_layout)(_i % 2);
    for (int v = 0; v < 15; v++) {
        if (v % 3 != _i / 2) /* a third of the variants in each layout */
            continue;
        lin_case c = base_case(dt, 7, 13, 37);
        c.layout = layout;
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
}
END_TEST

/* Odd shapes with tails in every dimension, both layouts, f32. */
START_TEST(test_shapes)
{
    static const size_t shapes[][3] = {{1, 1000, 129}, {7, 129, 1000}, {129, 7, 1},
                                       {1, 1, 1},      {129, 129, 129}, {1000, 7, 7},
                                       {16, 33, 65},   {3, 1000, 7}};
    const size_t ns = sizeof shapes / sizeof *shapes;
    for (size_t s = 0; s < ns; s++) {
        if (th_quick() && s % 2)
            continue;
        lin_case c = base_case(OCLF_F32, shapes[s][0], shapes[s][1], shapes[s][2]);
        c.layout = (oclf_weight_layout)_i;
        c.bias = 1;
        c.res = s % 2;
        c.act = OCLF_LINEAR_GELU;
        both_paths(c);
    }
}
END_TEST

/* K = 0: y = epilogue(0); M = 0: nothing written, an event all the same. */
START_TEST(test_empty)
{
    for (int d = 0; d < 3; d++) {
        lin_case c = base_case(dtypes[d], 5, 9, 0);
        c.layout = (oclf_weight_layout)_i;
        c.bias = 1;
        c.res = 1;
        c.act = OCLF_LINEAR_SILU;
        c.before = d % 2;
        both_paths(c);
        c = base_case(dtypes[d], 0, 9, 5);
        c.layout = (oclf_weight_layout)_i;
        c.res = 1;
        both_paths(c);
    }
}
END_TEST

/* Strided rows with offsets on x, W, y, residual and bias; y in place on
 * the residual; every dtype. */
START_TEST(test_strides_inplace)
{
    const oclf_dtype dt = dtypes[_i / 2];
    for (int v = 0; v < 4; v++) {
        lin_case c = base_case(dt, 9, 21, 35);
        c.layout = (oclf_weight_layout)(_i % 2);
        c.bias = 1;
        c.res = 1;
        c.pad = v % 2 ? 3 : 0;
        c.offset = v % 2 ? 5 : 0;
        c.inplace = v >= 2;
        c.act = OCLF_LINEAR_RELU;
        c.before = v % 2;
        c.beta = 0.5f;
        both_paths(c);
    }
}
END_TEST

/* Kernel structures given in full: CPU-like blocks, tiny and odd vectors,
 * staged tiles with a K chunk that does not divide K, and the
 * matrix-vector shape, each for both layouts and every dtype, K = 0 too. */
static const char *const structures[] = {
    "MB=4,NB=4,VEC=16,WGM=16,WGN=1,STAGE=0,KC=16,MV=0",
    "MB=1,NB=1,VEC=1,WGM=1,WGN=1,STAGE=0,KC=16,MV=0",
    "MB=8,NB=2,VEC=4,WGM=2,WGN=3,STAGE=0,KC=16,MV=0",
    "MB=2,NB=2,VEC=4,WGM=8,WGN=8,STAGE=1,KC=16,MV=0",
    "MB=1,NB=4,VEC=2,WGM=4,WGN=16,STAGE=1,KC=32,MV=0",
    "MB=4,NB=1,VEC=8,WGM=3,WGN=5,STAGE=1,KC=8,MV=0",
    "MB=2,NB=2,VEC=4,WGM=1,WGN=32,STAGE=0,KC=16,MV=1",
    "MB=1,NB=1,VEC=1,WGM=1,WGN=8,STAGE=0,KC=16,MV=1",
};
#define NSTRUCT (int)(sizeof structures / sizeof *structures)

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

START_TEST(test_structures)
{
    const oclf_choice ch = parse_choice(structures[_i / 3]);
    for (int l = 0; l < 2; l++) {
        static const size_t shapes[][3] = {{13, 37, 45}, {1, 70, 129}, {3, 5, 3}, {2, 9, 0}};
        for (int s = 0; s < 4; s++) {
            lin_case c = base_case(dtypes[_i % 3], shapes[s][0], shapes[s][1], shapes[s][2]);
            c.layout = (oclf_weight_layout)l;
            c.bias = 1;
            c.res = 1;
            c.prologue = s == 0 ? OCLF_LINEAR_GELU_TANH : OCLF_LINEAR_NONE;
            c.act = OCLF_LINEAR_SILU;
            c.choice = &ch;
            both_paths(c);
        }
    }
}
END_TEST

/* The matrix-vector shape (MV 1), forced as a GPU would take it for
 * decode: M = 0, 1, 3 and 16 rows, odd N, every dtype, bias, residual,
 * alpha and beta, a prologue on odd M. Three structures: the GPU default
 * for 16-bit types (4 segments of 32 lanes, 4 x 2 blocks, 8-wide units), f32's
 * unit of 4 with one row, and a 2 x 1 block over 3 segments of 4 lanes with
 * 16-wide units. Each on the aligned build (K = 128, rows packed: every
 * unit starts on its own size), K = 69 (element-aligned, a tail of K past
 * the last unit) and K = 128 one element off (element-aligned). */
static const char *const mv_structures[] = {
    "MB=4,NB=2,VEC=8,WGM=4,WGN=32,STAGE=0,KC=16,MV=1",
    "MB=1,NB=2,VEC=4,WGM=4,WGN=16,STAGE=0,KC=16,MV=1",
    "MB=2,NB=1,VEC=16,WGM=3,WGN=4,STAGE=0,KC=16,MV=1",
};
#define NMV (int)(sizeof mv_structures / sizeof *mv_structures)

START_TEST(test_mv)
{
    const oclf_dtype dt = dtypes[_i % 3];
    const oclf_choice ch = parse_choice(mv_structures[_i / 3]);
    static const size_t ms[] = {0, 1, 3, 16};
    for (int a = 0; a < 4; a++)
        for (int v = 0; v < 3; v++) {
            lin_case c = base_case(dt, ms[a], v == 1 ? 37 : 9, v == 1 ? 69 : 128);
            c.offset = v == 2;
            c.bias = 1;
            c.res = 1;
            c.alpha = 0.75f;
            c.beta = 0.5f;
            c.prologue = a % 2 ? OCLF_LINEAR_GELU_TANH : OCLF_LINEAR_NONE;
            c.act = a == 2 ? OCLF_LINEAR_SILU : OCLF_LINEAR_NONE;
            c.choice = &ch;
            both_paths(c);
        }
}
END_TEST

/* The matrix-unit structure (STAGE 2), forced: on a device without matrix
 * units it runs cl/mma.h's emulation of the instruction, whose fragment
 * layout is the hardware's, so the tile loads, the fragment reads and the
 * epilogue on the accumulator fragments are checked here (and on a device
 * with them, the same cases check the native instruction); f16 and bf16,
 * both layouts, tails in M, N and K (1, 7, 17, 65, 130), every prologue
 * and epilogue, strides and offsets, y in place. Structures: a warp of
 * 1 x 2 fragments in 2 x 1 warps; 2 x 1 fragments in 1 x 2 warps with K in
 * chunks of 64; the sm_80+ default, 2 x 4 warps of 4 x 4. */
static const char *const mma_structures[] = {
    "MB=1,NB=2,VEC=8,WGM=2,WGN=1,STAGE=2,KC=32,MV=0",
    "MB=2,NB=1,VEC=8,WGM=1,WGN=2,STAGE=2,KC=64,MV=0",
    "MB=4,NB=4,VEC=8,WGM=2,WGN=4,STAGE=2,KC=32,MV=0",
};
#define NMMA (int)(sizeof mma_structures / sizeof *mma_structures)

/* The same cases on the wavefront's structure (STAGE 4, fragments of 16 x
 * 16 in wavefronts of 64, cl/mma.h's 16x16x16 emulated here): 1 x 1
 * fragments in 2 x 1 wavefronts; 2 x 1 in 1 x 2 with K in chunks of 64;
 * the CDNA default, 2 x 4 wavefronts of 4 x 2 (128 x 128). */
static const char *const mfma_structures[] = {
    "MB=1,NB=1,VEC=8,WGM=2,WGN=1,STAGE=4,KC=32,MV=0",
    "MB=2,NB=1,VEC=8,WGM=1,WGN=2,STAGE=4,KC=64,MV=0",
    "MB=4,NB=2,VEC=8,WGM=2,WGN=4,STAGE=4,KC=32,MV=0",
};
#define NMFMA (int)(sizeof mfma_structures / sizeof *mfma_structures)

/* One matrix-unit family: its structures (the last the default tile) and
 * the build option that names it. */
typedef struct mu_family {
    const char *const *structures;
    int n;
    const char *stage;
} mu_family;
static const mu_family mu_warp = {mma_structures, NMMA, "-DOCLF_STAGE=2"};
static const mu_family mu_wave = {mfma_structures, NMFMA, "-DOCLF_STAGE=4"};

static void mu_shapes(const mu_family *f, int _i)
{
    const oclf_dtype dt = _i % 2 ? OCLF_BF16 : OCLF_F16;
    const oclf_choice ch = parse_choice(f->structures[_i / 2]);
    static const size_t shapes[][3] = {{1, 7, 17}, {17, 65, 130}, {65, 130, 7},
                                       {130, 17, 65}, {7, 1, 1},   {33, 24, 64}};
    for (int s = 0; s < 6; s++) {
        if (s % 2) /* the emulation is slow on a CPU: half the shapes a run */
            continue;
        for (int l = 0; l < 2; l++) {
            lin_case c = base_case(dt, shapes[s][0], shapes[s][1], shapes[s][2]);
            c.layout = (oclf_weight_layout)l;
            c.bias = 1;
            c.res = s % 2;
            c.alpha = 0.75f;
            c.prologue = (oclf_linear_act)(s % OCLF_LINEAR_ACT_COUNT_);
            c.act = (oclf_linear_act)((s + 2) % OCLF_LINEAR_ACT_COUNT_);
            c.before = l;
            c.choice = &ch;
            both_paths(c);
        }
    }
}

/* Every prologue and epilogue (both residual orders), strides with offsets
 * and y in place, on the smallest matrix structure. */
static void mu_epilogues(const mu_family *f, int _i)
{
    const oclf_dtype dt = _i % 2 ? OCLF_BF16 : OCLF_F16;
    const oclf_choice ch = parse_choice(f->structures[0]);
    for (int v = 0; v < 15; v++) {
        if (v % 3 != _i / 2) /* a third of the variants in each layout */
            continue;
        lin_case c = base_case(dt, 19, 23, 45);
        c.layout = (oclf_weight_layout)((_i / 2) % 2);
        c.bias = 1;
        c.res = 1;
        c.alpha = 0.75f;
        c.beta = -1.25f;
        c.pad = v % 2 ? 3 : 0;
        c.offset = v % 2 ? 5 : 0;
        c.inplace = v % 4 == 3;
        if (v < 5) {
            c.prologue = (oclf_linear_act)v;
        } else {
            c.act = (oclf_linear_act)((v - 5) / 2);
            c.before = (v - 5) % 2;
        }
        c.choice = &ch;
        both_paths(c);
    }
}

/* Exact inputs through every matrix structure: y is the reference rounded
 * once, bit for bit, so every element reached the right fragment, lane and
 * accumulator; with rows on 16-byte boundaries (the aligned build, 16-byte
 * loads) and off them (offset 3), both checked to have run. */
static void mu_exact(const mu_family *f, int _i)
{
    const int nst = f->n;
    const oclf_dtype dt = _i % 2 ? OCLF_BF16 : OCLF_F16;
    const oclf_choice ch = parse_choice(f->structures[(_i / 2) % nst]);
    /* each structure in both layouts, one dtype each */
    const int layout = (_i + _i / 2) % 2;
    /* 256 x 136: interior tiles of every structure (copied a run a
     * work-item) beside edge tiles (word by word); the emulation is slow on
     * a CPU, so that shape goes to the largest structure's aligned build
     * alone, which alone has whole interior tiles of 128 x 128 */
    static const size_t shapes[][3] = {{7, 17, 64}, {64, 72, 96}, {256, 136, 72}};
    const int big = (_i / 2) % nst == nst - 1;
    for (int s = 0; s < 3; s++)
        for (int a = 0; a < 2; a++) {
            if (s == 2 && (!big || !a))
                continue;
            lin_case c = base_case(dt, shapes[s][0], shapes[s][1], shapes[s][2]);
            c.layout = (oclf_weight_layout)layout;
            c.exact = 1;
            c.bias = 1;
            c.res = 1;
            c.prologue = s % 2 ? OCLF_LINEAR_RELU : OCLF_LINEAR_NONE;
            c.act = s >= 2 ? OCLF_LINEAR_RELU : OCLF_LINEAR_NONE;
            c.offset = a ? 0 : 3;
            c.pad = a ? 8 : 0;
            c.choice = &ch;
            case_ctx = th_build_log_context();
            free(run_case(&c, NULL));
            /* rows on 16-byte boundaries where K (N for a KN W) is a multiple
             * of 8 or padded to one */
            const size_t wcols = layout ? c.n : c.k;
            const int aligned = a && (c.k + c.pad) % 8 == 0 && (wcols + c.pad) % 8 == 0;
            ck_assert_msg(th_built("linear.cl", f->stage, aligned),
                          "%s %zux%zux%zu: no %s build of the matrix structure ran:\n%s",
                          oclf_dtype_name(dt), c.m, c.n, c.k, aligned ? "aligned" : "plain",
                          th_builds());
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}

START_TEST(test_mma_shapes) { mu_shapes(&mu_warp, _i); }
END_TEST
START_TEST(test_mma_epilogues) { mu_epilogues(&mu_warp, _i); }
END_TEST
START_TEST(test_mma_exact) { mu_exact(&mu_warp, _i); }
END_TEST
START_TEST(test_mfma_shapes) { mu_shapes(&mu_wave, _i); }
END_TEST
START_TEST(test_mfma_epilogues) { mu_epilogues(&mu_wave, _i); }
END_TEST
START_TEST(test_mfma_exact) { mu_exact(&mu_wave, _i); }
END_TEST

/* The register-tiled structure (STAGE 3), forced: every dtype (f16 and
 * bf16 widened to f32 in the local tiles), both layouts, M, N and K that
 * are no multiples of the tile or the chunk (1, odd, K = 0), the prologue
 * applied where x is staged and the epilogue on the register tile.
 * Structures: 4 x 8 accumulators in 2 x 4 work-items with K in chunks of 8
 * (a tile of 8 x 32); 8 x 4 in 4 x 2 with 8-wide global loads (32 x 8);
 * the GPU default, 8 x 8 in 16 x 16 (128 x 128). */
static const char *const rt_structures[] = {
    "MB=4,NB=8,VEC=4,WGM=2,WGN=4,STAGE=3,KC=8,MV=0",
    "MB=8,NB=4,VEC=8,WGM=4,WGN=2,STAGE=3,KC=16,MV=0",
    "MB=8,NB=8,VEC=4,WGM=16,WGN=16,STAGE=3,KC=8,MV=0",
};
#define NRT (int)(sizeof rt_structures / sizeof *rt_structures)

START_TEST(test_rt_shapes)
{
    /* each structure in two dtypes, each dtype in two structures (every
     * prologue a program of its own: one prologue a structure and dtype) */
    const oclf_dtype dt = dtypes[(_i + _i / NRT) % 3];
    const oclf_choice ch = parse_choice(rt_structures[_i % NRT]);
    const oclf_linear_act pro = (oclf_linear_act)(1 + _i % (OCLF_LINEAR_ACT_COUNT_ - 1));
    static const size_t shapes[][3] = {{13, 37, 45}, {1, 70, 129}, {3, 5, 3},
                                       {2, 9, 0},    {33, 40, 17}, {130, 20, 33}};
    for (int s = 0; s < 6; s++)
        for (int l = 0; l < 2; l++) {
            if ((s + l) % 2 && th_quick())
                continue;
            lin_case c = base_case(dt, shapes[s][0], shapes[s][1], shapes[s][2]);
            c.layout = (oclf_weight_layout)l;
            c.bias = 1;
            c.res = s % 2;
            c.alpha = 0.75f;
            c.prologue = s % 2 ? pro : OCLF_LINEAR_NONE;
            c.act = (oclf_linear_act)((s + 2) % OCLF_LINEAR_ACT_COUNT_);
            c.before = l;
            c.choice = &ch;
            free(run_case(&c, NULL));
        }
}
END_TEST

/* Exact inputs (y is the reference rounded once, bit for bit: every
 * element reached the right local slot, lane and accumulator), with rows
 * on the VEC boundary (the aligned build's vector loads) and off it
 * (offset 3, element loads), each checked to have run; strides, offsets,
 * y in place on the residual, every dtype. Interior tiles (the vector
 * path) beside edge tiles. */
START_TEST(test_rt_exact)
{
    /* the two small structures, each in both layouts; f32, f16, bf16, f32 */
    const oclf_dtype dt = dtypes[_i % 3];
    const int st = _i % 2;
    const oclf_choice ch = parse_choice(rt_structures[st]);
    const int layout = _i / 2;
    static const size_t shapes[][3] = {{64, 72, 96}, {19, 23, 45}};
    for (int s = 0; s < 2; s++)
        for (int a = 0; a < 2; a++) {
            lin_case c = base_case(dt, shapes[s][0], shapes[s][1], shapes[s][2]);
            c.layout = (oclf_weight_layout)layout;
            c.exact = 1;
            c.bias = 1;
            c.res = 1;
            c.inplace = s;
            c.beta = s ? -1.0f : 1.0f;
            c.prologue = a ? OCLF_LINEAR_RELU : OCLF_LINEAR_NONE;
            c.act = s ? OCLF_LINEAR_RELU : OCLF_LINEAR_NONE;
            c.before = a;
            c.offset = a ? 8 : 3;
            c.pad = a ? 8 : 1;
            c.choice = &ch;
            case_ctx = th_build_log_context();
            free(run_case(&c, NULL));
            const int vec = st ? 8 : 4;
            const size_t wcols = layout ? c.n : c.k;
            const int aligned = a && (c.k + c.pad) % (size_t)vec == 0 &&
                                (wcols + c.pad) % (size_t)vec == 0;
            ck_assert_msg(th_built("linear.cl", "-DOCLF_STAGE=3", aligned),
                          "%s %zux%zux%zu: no %s build of the register-tiled structure ran:\n%s",
                          oclf_dtype_name(dt), c.m, c.n, c.k, aligned ? "aligned" : "plain",
                          th_builds());
            oclf_context_destroy(case_ctx);
            case_ctx = NULL;
        }
}
END_TEST

/* The GEMM library is asked for beta = 0: NaN already in y must not
 * survive (0 * NaN), on the path that lets it write y directly. */
START_TEST(test_nan_in_y)
{
    th_env *e = th_get();
    const size_t m = 5, n = 17, k = 9;
    float *x = th_random(OCLF_F32, m * k, -1, 1), *w = th_random(OCLF_F32, n * k, -1, 1);
    float *y = malloc(m * n * 4);
    for (size_t i = 0; i < m * n; i++)
        y[i] = NAN;
    cl_mem mx = th_upload(x, m * k * 4), mw = th_upload(w, n * k * 4), my = th_upload(y, m * n * 4);
    for (int p = OCLF_PATH_FUSED; p <= OCLF_PATH_UNFUSED; p++) {
        oclf_choice ch = th_choice((oclf_path)p);
        TH_OK(oclf_linear(e->ctx, e->queue, OCLF_F32, m, n, k, (oclf_buf){mx, 0, 0},
                          (oclf_buf){mw, 0, 0}, (oclf_buf){my, 0, 0}, OCLF_WEIGHT_NK,
                          OCLF_LINEAR_NONE, NULL, &ch, 0, NULL, NULL));
        float *got = malloc(m * n * 4);
        th_download(my, got, m * n * 4);
        for (size_t i = 0; i < m * n; i++)
            ck_assert_msg(isfinite(got[i]), "path %d: y[%zu] = %g", p, i, (double)got[i]);
        free(got);
        clEnqueueWriteBuffer(e->queue, my, CL_TRUE, 0, m * n * 4, y, 0, NULL, NULL);
    }
    free(x), free(w), free(y);
    clReleaseMemObject(mx), clReleaseMemObject(mw), clReleaseMemObject(my);
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

typedef struct bad_env {
    cl_mem x, w, y, b, small;
    float *hy;
} bad_env;

static void bad_check_untouched(bad_env *b)
{
    const size_t ny = 4 * 8;
    float got[4 * 8];
    clFinish(th_get()->queue);
    th_download(b->y, got, ny * 4);
    ck_assert_msg(memcmp(got, b->hy, ny * 4) == 0, "a failing call wrote y");
}

/* Every refusal names the public function first, whatever part of the call
 * (argument checks, dispatch, the parameters' validation) refused it. */
static void expect_linear_prefix(void)
{
    const char *msg = oclf_last_error(th_get()->ctx);
    ck_assert_msg(strncmp(msg, "oclf_linear: ", 13) == 0 && !strstr(msg + 13, "oclf_linear: "),
                  "'%s' does not start with 'oclf_linear: ' once", msg);
}

#define EXPECT(call, status, word) \
    TH_EXPECT_FAIL(call, status, word, (bad_check_untouched(&bb), expect_linear_prefix()))

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    bad_env bb;
    const size_t M = 4, N = 8, K = 16;
    float *hx = th_random(OCLF_F32, M * K, -1, 1), *hw = th_random(OCLF_F32, N * K, -1, 1);
    bb.hy = th_random(OCLF_F32, M * N, -1, 1);
    bb.x = th_upload(hx, M * K * 4);
    bb.w = th_upload(hw, N * K * 4);
    bb.y = th_upload(bb.hy, M * N * 4);
    bb.b = th_upload(hw, N * 4);
    bb.small = th_upload(hx, 16);
    oclf_buf X = {bb.x, 0, 0}, W = {bb.w, 0, 0}, Y = {bb.y, 0, 0};
    oclf_buf S = {bb.small, 0, 0}, Z = {NULL, 0, 0};
    oclf_buf Wkn = {bb.w, 0, N + 1}, Xnarrow = {bb.x, 0, K - 1}, Yonx = {bb.x, 3, 0};
    cl_command_queue q = e->queue;
    const oclf_linear_act P = OCLF_LINEAR_NONE;
    const oclf_weight_layout L = OCLF_WEIGHT_NK;
    oclf_linear_epilogue ep;
    oclf_linear_epilogue_init(&ep);
#define LIN(ctx_, q_, dt_, m_, n_, k_, x_, p_, w_, l_, y_, ep_, ch_, ne_)                     \
    oclf_linear(ctx_, q_, dt_, m_, n_, k_, x_, w_, y_, l_, p_, ep_, ch_, ne_, NULL, NULL)

    ck_assert_int_eq(LIN(NULL, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, NULL, 0),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(LIN(e->ctx, NULL, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, NULL, 1), OCLF_INVALID_ARGUMENT,
           "num_events");
    EXPECT(LIN(e->ctx, q, (oclf_dtype)5, M, N, K, X, P, W, L, Y, NULL, NULL, 0), OCLF_UNSUPPORTED,
           "dtype");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, 0, K, X, P, W, L, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT,
           "N is 0");
    EXPECT(LIN(e->ctx, q, OCLF_F32, (size_t)1 << 31, N, K, X, P, W, L, Y, NULL, NULL, 0),
           OCLF_UNSUPPORTED, "2^31");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, Z, P, W, L, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT,
           "linear: x");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, Z, L, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT,
           "linear: w");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Z, NULL, NULL, 0), OCLF_INVALID_ARGUMENT,
           "linear: y");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, S, P, W, L, Y, NULL, NULL, 0), OCLF_INVALID_ARGUMENT,
           "do not fit");
    /* W [N, K] fits as NK; read as KN with a stride of N + 1 it does not */
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, Wkn, OCLF_WEIGHT_KN, Y,
               NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT, "linear: w");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, Xnarrow, P, W, L, Y, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT, "stride");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, (oclf_linear_act)9, W, L, Y, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT, "prologue");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, (oclf_weight_layout)2, Y, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT, "layout");
    ep.act = (oclf_linear_act)7;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "epilogue activation");
    oclf_linear_epilogue_init(&ep);
    ep.residual_before_act = 2;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "residual_before_act");
    oclf_linear_epilogue_init(&ep);
    ep.alpha = INFINITY;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "finite");
    oclf_linear_epilogue_init(&ep);
    ep.beta = NAN;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "finite");
    oclf_linear_epilogue_init(&ep);
    ep.bias = &S; /* 4 floats for N = 8 */
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "linear: bias");
    oclf_linear_epilogue_init(&ep);
    ep.residual = &S;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "linear: residual");
    /* y over x, over W, over the bias; over the residual but not exactly it */
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Yonx, NULL, NULL, 0),
           OCLF_INVALID_ARGUMENT, "overlaps");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, W, NULL, NULL, 0), OCLF_INVALID_ARGUMENT,
           "overlaps");
    oclf_linear_epilogue_init(&ep);
    ep.bias = &Y;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, &ep, NULL, 0), OCLF_INVALID_ARGUMENT,
           "overlaps");
    oclf_linear_epilogue_init(&ep);
    oclf_buf shifted = {bb.y, 1, 0};
    oclf_buf smaller = {bb.y, 0, 0};
    ep.residual = &shifted;
    EXPECT(LIN(e->ctx, q, OCLF_F32, M - 1, N, K, X, P, W, L, smaller, &ep, NULL, 0),
           OCLF_INVALID_ARGUMENT, "residual");
    oclf_choice ch = th_choice((oclf_path)9);
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, &ch, 0), OCLF_INVALID_ARGUMENT,
           "path");
    /* kernel parameters: a bad value of each, and the combinations */
    static const char *const badp[][3] = {
        {"MB", "3", "MB"},         {"NB", "16", "NB"},       {"VEC", "5", "VEC"},
        {"WGM", "0", "WGM"},       {"STAGE", "2", "STAGE"},  {"KC", "2", "KC"},
        {"MV", "3", "MV"},         {"WGN", "100000", "WGN"},
    };
    for (size_t i = 0; i < sizeof badp / sizeof *badp; i++) {
        ch = th_choice(OCLF_PATH_FUSED);
        oclf_params_set(&ch.params, badp[i][0], strtoll(badp[i][1], NULL, 10));
        EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, &ch, 0),
               OCLF_INVALID_ARGUMENT, badp[i][2]);
    }
    ch = parse_choice("MB=2,NB=2,VEC=8,WGM=2,WGN=2,STAGE=1,KC=12,MV=0");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, &ch, 0), OCLF_INVALID_ARGUMENT,
           "KC = 12 is not a multiple");
    ch = parse_choice("MB=2,NB=4,VEC=4,WGM=2,WGN=2,STAGE=3,KC=16,MV=0");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, &ch, 0), OCLF_INVALID_ARGUMENT,
           "multiples of 4");
    ch = parse_choice("MB=2,NB=2,VEC=8,WGM=2,WGN=3,STAGE=0,KC=16,MV=1");
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, &ch, 0), OCLF_INVALID_ARGUMENT,
           "MV = 1 needs");
    ch = parse_choice("MB=8,NB=1,VEC=1,WGM=512,WGN=1,STAGE=1,KC=256,MV=0"); /* 4 MiB of x tile */
    EXPECT(LIN(e->ctx, q, OCLF_F32, M, N, K, X, P, W, L, Y, NULL, &ch, 0), OCLF_INVALID_ARGUMENT,
           "local memory");
    /* a valid call still works after all the failures, and M = 0 too */
    TH_OK(LIN(e->ctx, q, OCLF_F32, 0, N, K, X, P, W, L, Y, NULL, NULL, 0));
    bad_check_untouched(&bb);
#undef LIN
    clReleaseMemObject(bb.x), clReleaseMemObject(bb.w), clReleaseMemObject(bb.y);
    clReleaseMemObject(bb.b), clReleaseMemObject(bb.small);
    free(hx), free(hw), free(bb.hy);
}
END_TEST

static Suite *linear_suite(void)
{
    Suite *s = suite_create("linear");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_matrix, 0, 6);
    tcase_add_loop_test(t, test_shapes, 0, 2);
    tcase_add_loop_test(t, test_empty, 0, 2);
    tcase_add_loop_test(t, test_strides_inplace, 0, 6);
    tcase_add_loop_test(t, test_structures, 0, th_quick() ? 3 : NSTRUCT * 3);
    tcase_add_test(t, test_nan_in_y);
    suite_add_tcase(s, t);
    TCase *mv = tcase_create("matrix_vector");
    tcase_set_timeout(mv, 0);
    tcase_add_loop_test(mv, test_mv, 0, th_quick() ? 3 : 3 * NMV);
    suite_add_tcase(s, mv);
    TCase *mu = tcase_create("matrix_units");
    tcase_set_timeout(mu, 0);
    /* The emulated fragments run every barrier of the instruction on a CPU:
     * the cases are chosen to cover each structure, layout, dtype and
     * edge once, not every combination. */
    tcase_add_loop_test(mu, test_mma_shapes, 0, th_quick() ? 2 : 2 * (NMMA - 1));
    tcase_add_loop_test(mu, test_mma_epilogues, 0, th_quick() ? 2 : 6);
    tcase_add_loop_test(mu, test_mma_exact, 0, 2 * NMMA);
    suite_add_tcase(s, mu);
    /* The wavefront's structure, emulated: the same coverage. Its cases
     * set every parameter, so under the GPU defaults
     * (OCLF_DEVICE_CLASS=gpu) they would repeat the plain run's programs:
     * that run, near its time limit on 2 cores, leaves them out. */
    const char *cls = getenv("OCLF_DEVICE_CLASS");
    if (!cls || strcmp(cls, "gpu") != 0) {
        TCase *wu = tcase_create("wavefront_units");
        tcase_set_timeout(wu, 0);
        tcase_add_loop_test(wu, test_mfma_shapes, 0, th_quick() ? 2 : 2 * (NMFMA - 1));
        tcase_add_loop_test(wu, test_mfma_epilogues, 0, th_quick() ? 2 : 6);
        tcase_add_loop_test(wu, test_mfma_exact, 0, 2 * NMFMA);
        suite_add_tcase(s, wu);
    }
    TCase *rt = tcase_create("register_tiles");
    tcase_set_timeout(rt, 0);
    tcase_add_loop_test(rt, test_rt_shapes, 0, th_quick() ? NRT : 2 * NRT);
    tcase_add_loop_test(rt, test_rt_exact, 0, th_quick() ? 2 : 4);
    suite_add_tcase(s, rt);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(linear_suite()); }
