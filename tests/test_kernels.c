/*
 * Every kernel of every op on tiny shapes, driven through the op descriptors
 * (tune/opdesc.h), meant to run under oclgrind (tests/oclgrind_run.py):
 *
 * Optional second and third arguments restrict the run to one op and dtype.
 *
 *   test_kernels check     every op x dtype x kernel structure x path x shape,
 *                          each result verified against the CPU reference;
 *                          oclgrind's data-race, uninitialized-value and
 *                          memory checks watch every launch.
 *   test_kernels traffic   each op and dtype once fused and once unfused with
 *                          the traffic configuration, between "@@" marker
 *                          lines on stdout, so oclgrind's per-kernel global
 *                          load/store byte counts (--inst-counts) can be
 *                          attributed to the call.
 *
 * The rows of `cases` are indexed by the op list (lib/ops.def): an op that
 * lands later without its row here fails the run.
 */
#include "opdesc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The op list's rows, by index, and their names. */
enum {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) K_##ID,
#include "../lib/ops.def"
#undef OCLF_OP
    K_COUNT
};
static const char *const op_names[K_COUNT] = {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) [K_##ID] = #name,
#include "../lib/ops.def"
#undef OCLF_OP
};

typedef struct kcase {
    /* Small shapes with vector tails and several work-groups. */
    const char *shapes;
    /* Kernel structures, ';'-separated NAME=VALUE lists. */
    const char *configs;
    /* The configuration whose traffic is measured: every input read from
     * global memory once (LAYOUT 1 stages the row in local memory, and with
     * ROWS covering the shape's rows, weight and bias are loaded once). */
    const char *traffic_config;
    const char *traffic_shape;
    /* The unfused path runs another library's kernels (CLBlast's GEMM),
     * whose internal padding oclgrind's uninitialized-value check flags;
     * that path is checked for races and memory errors in a run of its own
     * (OCLF_KERNELS_EXTERNAL=1). */
    int external_unfused;
    /* 1: the fused traffic is held to the bound; 2: to exactly the
     * minimum; 0: reported only. */
    int traffic_bounded;
} kcase;

#define NORM_CONFIGS                                                                     \
    "LAYOUT=0,WGS=2,VEC=4,STAGE=0;LAYOUT=1,WGS=16,VEC=2,STAGE=0;LAYOUT=1,WGS=16,VEC=4,STAGE=1"
#define ROPE_CONFIGS                                                                     \
    "LAYOUT=0,WGS=2,VEC=4;LAYOUT=1,WGS=16,VEC=2;LAYOUT=0,WGS=4,VEC=1;"                     \
    "LAYOUT=1,WGS=8,VEC=4,STAGE=1,ROWS=2"
/* Staged: one work-group takes the shape's 4 tokens, so the weights, each
 * token's cos/sin row and each head leave global memory once. */
#define ROPE_TRAFFIC "LAYOUT=1,WGS=16,VEC=4,STAGE=1,ROWS=4"
#define NORM_TRAFFIC "LAYOUT=1,WGS=16,VEC=4,STAGE=1,ROWS=4"

static const kcase cases[K_COUNT] = {
    [K_RMS_NORM] = {"5x77,2x8", NORM_CONFIGS, NORM_TRAFFIC, "4x200", 0, 1},
    [K_ADD_RMS_NORM] = {"5x77,2x8", NORM_CONFIGS, NORM_TRAFFIC, "4x200", 0, 1},
    [K_LAYER_NORM] = {"5x77,2x8", NORM_CONFIGS, NORM_TRAFFIC, "4x200", 0, 1},
    [K_ADD_LAYER_NORM] = {"5x77,2x8", NORM_CONFIGS, NORM_TRAFFIC, "4x200", 0, 1},
    /* nq x N x D x k: a k beyond N, query blocks with padding, several
     * slices, odd D; the queries read from global memory and from the
     * group's copy in local memory (QLOCAL), the latter with several query
     * blocks per group; row norms computed by every work-item and by the
     * first query block, or by a pass before the loop (XNORM). Traffic is
     * bounded with the norms summed in the loop (XNORM 1): with one query block
     * per group (QG == QB) each database row is loaded by one work-item,
     * which computes its norm in the same pass, and QLOCAL loads the
     * queries once; the heaps in global memory add a few percent. TOPK=1
     * keeps the lists in local memory (the whole group offering, sorting
     * and merging). */
    [K_L2_TOPK] = {"3x100x5x4,1x37x3x40",
     "SLICES=0;QB=1,RB=4,VEC=4,QG=4,WGS=16,SLICES=3,QLOCAL=0,XNORM=0;"
     "QB=2,RB=4,VEC=4,QG=4,WGS=8,SLICES=2,QLOCAL=0,XNORM=2;"
     "QB=2,RB=2,VEC=4,QG=6,WGS=12,SLICES=2,QLOCAL=1,XNORM=1;"
     "QB=2,RB=2,VEC=4,QG=6,WGS=12,SLICES=2,QLOCAL=1,XNORM=0,XSTAGE=16;"
     "QB=2,RB=2,VEC=4,QG=6,WGS=12,SLICES=3,QLOCAL=0,XNORM=0,TOPK=1",
     "QB=2,RB=4,VEC=4,QG=2,WGS=16,SLICES=1,QLOCAL=1,XNORM=1", "2x2048x32x4", 1, 1},
    /* m x n x k: tails in every dimension, several groups; the CPU block,
     * a KN-friendly block, staged tiles and the matrix-vector shape (NK;
     * a KN call runs the tiled kernel). Traffic: one staged work-group
     * covers the 4 x 32 output, so x and W leave global memory once, and
     * bias, residual and y once each: the minimum. */
    [K_LINEAR] = {"7x37x45,1x20x33",
     "MB=4,NB=4,VEC=16,WGM=2,WGN=1,STAGE=0,KC=16,MV=0;"
     "MB=2,NB=2,VEC=4,WGM=2,WGN=3,STAGE=0,KC=16,MV=0;"
     "MB=2,NB=2,VEC=4,WGM=4,WGN=4,STAGE=1,KC=16,MV=0;"
     "MB=2,NB=1,VEC=4,WGM=1,WGN=16,STAGE=0,KC=16,MV=1",
     "MB=2,NB=4,VEC=1,WGM=2,WGN=8,STAGE=1,KC=16,MV=0", "4x32x64", 1, 1},
    [K_ACT_AND_MUL] = {"5x77,2x8", "LAYOUT=0,WGS=2,VEC=4;LAYOUT=1,WGS=16,VEC=2",
     "LAYOUT=1,WGS=16,VEC=4", "4x200", 0, 1},
    /* tokens x nq x nk x nv x hd x R */
    [K_ROTARY_EMBEDDING] = {"3x2x1x1x20x12,2x1x2x1x37x18", ROPE_CONFIGS, ROPE_TRAFFIC,
     "4x2x1x1x32x32", 0, 1},
    [K_QK_NORM_ROPE] = {"3x2x1x1x20x12,2x1x2x1x37x18", ROPE_CONFIGS, ROPE_TRAFFIC, "4x2x1x1x32x32",
     0, 1},
    /* Every preset expression (each descriptor of op "expr"): whole vector
     * chunks with scalar tails, one work-item per element, several groups.
     * Both shapes hold 385 elements: the unfused temporaries of a call are
     * released at its end, and oclgrind's uninitialized-value plugin flagged
     * the elements of a new temporary beyond a freed smaller one (2x8 before
     * 5x77: elements 16 on) although every one was written first. */
    /* ROWS=4 in the traffic configuration covers the shape's rows, so the
     * bias of ew_bias_gelu_dropout is loaded once per column. */
    [K_EXPR] = {"5x77,1x385", "VEC=4,WGS=16;VEC=1,WGS=8,ROWS=3;VEC=16,WGS=4,ROWS=2",
     "VEC=4,WGS=16,ROWS=4", "4x200", 0, 2},
};

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

static int parse_params(const char *text, oclf_params *p)
{
    memset(p, 0, sizeof *p);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq)
            return -1;
        *eq = 0;
        if (oclf_params_set(p, t, strtoll(eq + 1, NULL, 10)) != OCLF_SUCCESS)
            return -1;
    }
    return 0;
}

typedef struct kept {
    const op_desc *op;
    void *inst;
} kept;
static kept keep[512];
static size_t nkeep;

/* One verified call; prints a line and returns 0 when right. */
static int one(const op_env *env, const op_desc *op, const char *shape_text, oclf_dtype dt,
               oclf_path path, const char *config, int traffic, int bounded)
{
    op_shape shape;
    char err[512] = "";
    if (!op_parse_shape(op, shape_text, &shape)) {
        printf("FAIL %s: bad shape %s\n", op->name, shape_text);
        return 1;
    }
    oclf_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = path;
    if (parse_params(config, &ch.params)) {
        printf("FAIL %s: bad config %s\n", op->name, config);
        return 1;
    }
    void *inst = op->create(env, &shape, dt, err, sizeof err);
    if (!inst) {
        printf("FAIL %s %s %s: %s\n", op->name, oclf_dtype_name(dt), shape_text, err);
        return 1;
    }
    const char *pname = path == OCLF_PATH_FUSED ? "fused" : "unfused";
    if (traffic) {
        clFinish(env->queue);
        printf("@@ begin %s %s %s %s min=%.0f bounded=%d\n", op->name, oclf_dtype_name(dt),
               pname, shape_text, op->min_bytes(&shape, dt), bounded);
        fflush(stdout);
    }
    int ok = op->verify(env, inst, &ch, err, sizeof err);
    clFinish(env->queue);
    fflush(stdout);
    if (traffic) {
        printf("@@ end\n");
        fflush(stdout);
    }
    /* Instances live until the end of the run: oclgrind 21.10's
     * uninitialized-value tracking keeps stale shadow state for an allocation
     * that reuses a freed one, and reported row 1 of a fresh temporary as
     * uninitialized after an earlier, smaller buffer was released. */
    if (!traffic && nkeep < sizeof keep / sizeof *keep)
        keep[nkeep++] = (kept){op, inst};
    else
        op->destroy(inst);
    if (!ok)
        printf("FAIL %s %s %s %s [%s]: %s\n", op->name, oclf_dtype_name(dt), pname, shape_text,
               config, err);
    return !ok;
}

/* One descriptor of the row `k`: every dtype, structure, shape and path
 * (or, for traffic, the traffic configuration); returns the failures. */
static int check_op(const op_env *env, const op_desc *op, const kcase *k, int traffic,
                    const char *ext, int argc, char **argv, int *runs)
{
    int failed = 0;
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
        if (argc > 3 && strcmp(argv[3], oclf_dtype_name(dtypes[d])) != 0)
            continue;
        if (traffic) {
            for (int p = 0; p < 1 + op->has_unfused; p++, ++*runs)
                failed += one(env, op, k->traffic_shape, dtypes[d],
                              p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED, k->traffic_config, 1,
                              k->traffic_bounded);
            continue;
        }
        char cfgs[512];
        snprintf(cfgs, sizeof cfgs, "%s", k->configs);
        char *s1 = NULL;
        for (char *cfg = strtok_r(cfgs, ";", &s1); cfg; cfg = strtok_r(NULL, ";", &s1)) {
            char shapes[256];
            snprintf(shapes, sizeof shapes, "%s", k->shapes);
            char *s2 = NULL;
            for (char *sh = strtok_r(shapes, ",", &s2); sh; sh = strtok_r(NULL, ",", &s2))
                for (int p = 0; p < 1 + op->has_unfused; p++) {
                    if (ext && k->external_unfused && (*ext == '1') != (p == 1))
                        continue;
                    ++*runs;
                    failed += one(env, op, sh, dtypes[d], p ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED,
                                  cfg, 0, 0);
                }
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    const int traffic = argc > 1 && strcmp(argv[1], "traffic") == 0;
    op_env env;
    char err[512];
    if (op_env_open(&env, getenv("OCLF_TEST_PLATFORM"), NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return getenv("OCLF_TEST_DEVICE_OPTIONAL") ? 77 : 1;
    }
    int failed = 0, runs = 0;
    /* unset: everything; "0": all but external unfused paths; "1": only those */
    const char *ext = getenv("OCLF_KERNELS_EXTERNAL");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const kcase *k = &cases[i];
        const char *name = op_names[i];
        if (!k->shapes) {
            printf("FAIL %s: no row in the kernel-check table\n", name);
            failed++;
            continue;
        }
        if (ext && *ext == '1' && !k->external_unfused)
            continue;
        if (argc > 2 && strcmp(argv[2], name) != 0)
            continue;
        /* Every descriptor that runs this op (one per preset expression). */
        int ndesc = 0;
        for (int oi = 0; op_table[oi]; oi++) {
            const op_desc *op = op_table[oi];
            if (strcmp(op_lib_op(op), name) != 0)
                continue;
            ndesc++;
            failed += check_op(&env, op, k, traffic, ext, argc, argv, &runs);
        }
        if (!ndesc) {
            printf("FAIL %s: no descriptor\n", name);
            failed++;
        }
    }
    for (size_t i = 0; i < nkeep; i++)
        keep[i].op->destroy(keep[i].inst);
    op_env_close(&env);
    printf("%d calls, %d failed\n", runs, failed);
    return failed ? 1 : 0;
}
