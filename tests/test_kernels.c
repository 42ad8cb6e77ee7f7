/*
 * Every kernel of every op on tiny shapes, driven through the op descriptors
 * (tune/opdesc.h), meant to run under oclgrind (tests/oclgrind_run.py):
 *
 * Optional second and third arguments restrict the run to one op and dtype
 * ("-op" as the second: every op but that one).
 *
 *   test_kernels check     every op x dtype x kernel structure x path x shape,
 *                          each result verified against the CPU reference;
 *                          oclgrind's data-race, uninitialized-value and
 *                          memory checks watch every launch.
 *   test_kernels defaults  every op x dtype x path x shape with no parameters
 *                          given, so each call runs the heuristic's structure
 *                          for the device (OCLF_DEVICE_CLASS=gpu: a GPU's):
 *                          one program per op, dtype and path, for devices
 *                          whose compiler is too slow for every structure.
 *   test_kernels traffic   each op and dtype once fused and once unfused with
 *                          the traffic configuration, between "@@" marker
 *                          lines on stdout, so oclgrind's per-kernel global
 *                          load/store byte counts (--inst-counts) can be
 *                          attributed to the call.
 *
 * What each op runs is its descriptor's kernel_check (tune/op_*.c); every
 * op of the list (lib/ops.def) must have a descriptor that has one, else
 * the run fails.
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
static int check_op(const op_env *env, const op_desc *op, const op_kernel_check *k, int traffic,
                    int defaults, const char *ext, int argc, char **argv, int *runs)
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
        char *s1 = NULL, none[] = "";
        for (char *cfg = defaults ? none : strtok_r(cfgs, ";", &s1); cfg;
             cfg = defaults ? NULL : strtok_r(NULL, ";", &s1)) {
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
    const int defaults = argc > 1 && strcmp(argv[1], "defaults") == 0;
    op_env env;
    char err[512];
    if (op_env_open(&env, getenv("OCLF_TEST_PLATFORM"), NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return getenv("OCLF_TEST_DEVICE_OPTIONAL") ? 77 : 1;
    }
    int failed = 0, runs = 0;
    /* unset: everything; "0": all but external unfused paths; "1": only those */
    const char *ext = getenv("OCLF_KERNELS_EXTERNAL");
    for (size_t i = 0; i < K_COUNT; i++) {
        const char *name = op_names[i];
        /* "a,b": those ops; "-a,b": every op but those */
        if (argc > 2) {
            const int except = argv[2][0] == '-';
            if (op_listed(argv[2] + except, name) == except)
                continue;
        }
        /* Every descriptor that runs this op (one per preset expression). */
        int ndesc = 0;
        for (int oi = 0; op_table[oi]; oi++) {
            const op_desc *op = op_table[oi];
            if (strcmp(op_lib_op(op), name) != 0)
                continue;
            ndesc++;
            const op_kernel_check *k = op->kernel_check;
            if (!k) {
                printf("FAIL %s: descriptor %s has no kernel check\n", name, op->name);
                failed++;
                continue;
            }
            if (ext && *ext == '1' && !k->external_unfused)
                continue;
            failed += check_op(&env, op, k, traffic, defaults, ext, argc, argv, &runs);
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
