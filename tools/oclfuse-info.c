/*
 * oclfuse-info: the OpenCL platforms and devices with their fingerprints
 * (the key of tuning records), and for one device which tuning record, from
 * which database file, each op would use for a shape (or why it falls back
 * to the heuristic). With --params, the kernel parameters of each op as
 * data: one line per op, path and parameter, the parameters being those the
 * device's heuristic sets and those the tuner's search space tries, at the
 * op's test shape (the docs test checks that each op's page names them).
 */
#include "opdesc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: oclfuse-info [--platform P --device D] [--ops a,b] [--dtype f32]\n"
               "                    [--shape ROWSxCOLS] [--path auto|fused|unfused]\n"
               "                    [--params]\n"
               "Lists devices; with --shape, explains each op's tuning lookup on the chosen\n"
               "device (default: the first). --params prints each op's kernel parameters\n"
               "instead, a line each: op, path, parameter, the heuristic's value on this\n"
               "device at the op's test shape (- where only the tuner's space sets it).\n");
}

/* Adds the names of `p` not yet in names[0..*n). */
static void add_names(const oclf_params *p, char names[][OCLF_PARAM_NAME_MAX], int *n, int max)
{
    for (unsigned i = 0; i < p->count; i++) {
        int seen = 0;
        for (int j = 0; j < *n && !seen; j++)
            seen = strcmp(names[j], p->item[i].name) == 0;
        if (!seen && *n < max)
            snprintf(names[(*n)++], OCLF_PARAM_NAME_MAX, "%s", p->item[i].name);
    }
}

/* --params: for each op (a preset expression under its library op, once)
 * and path, the parameters the heuristic sets and the search space tries. */
static int print_params(const char *platform, const char *device, const char *ops,
                        oclf_dtype dt)
{
    op_env env;
    char err[512];
    if (op_env_open(&env, platform, device, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-info: %s\n", err);
        return 1;
    }
    enum { MAXN = 64, MAXSPACE = 4096 };
    oclf_params *space = malloc(MAXSPACE * sizeof *space);
    if (!space) {
        op_env_close(&env);
        return 1;
    }
    int rc = 0;
    const char *done[64];
    int ndone = 0;
    for (int i = 0; op_table[i]; i++) {
        const op_desc *op = op_table[i];
        const char *lib = op_lib_op(op);
        if (!op_listed(ops, op->name) && !op_listed(ops, lib))
            continue;
        int seen = 0;
        for (int j = 0; j < ndone && !seen; j++)
            seen = strcmp(done[j], lib) == 0;
        if (seen || ndone == 64)
            continue;
        done[ndone++] = lib;
        op_shape s;
        if (!op_parse_shape(op, op->test_shape, &s)) {
            fprintf(stderr, "oclfuse-info: %s: bad test shape %s\n", op->name, op->test_shape);
            rc = 1;
            continue;
        }
        uint64_t dims[OP_MAX_DIMS];
        const int nd = op_lib_shape(op, &s, dims, NULL);
        for (oclf_path path = OCLF_PATH_FUSED; path <= OCLF_PATH_UNFUSED; path++) {
            if (path == OCLF_PATH_UNFUSED && !op->has_unfused)
                continue;
            oclf_tuning_decision d;
            if (oclf_tuning_resolve(env.ctx, lib, dt, dims, (unsigned)nd, path, &d) !=
                OCLF_SUCCESS) {
                fprintf(stderr, "oclfuse-info: %s: %s\n", lib, oclf_last_error(env.ctx));
                rc = 1;
                continue;
            }
            char names[MAXN][OCLF_PARAM_NAME_MAX];
            int n = 0;
            add_names(&d.heuristic.params, names, &n, MAXN);
            const int ns = op->space ? op->space(&env, op, &s, dt, path, space, MAXSPACE) : 0;
            for (int k = 0; k < ns; k++)
                add_names(&space[k], names, &n, MAXN);
            for (int k = 0; k < n; k++) {
                int64_t v;
                if (oclf_params_get(&d.heuristic.params, names[k], &v))
                    printf("%s\t%s\t%s\t%lld\n", lib, path == OCLF_PATH_FUSED ? "fused" : "unfused",
                           names[k], (long long)v);
                else
                    printf("%s\t%s\t%s\t-\n", lib, path == OCLF_PATH_FUSED ? "fused" : "unfused",
                           names[k]);
            }
        }
    }
    free(space);
    op_env_close(&env);
    return rc;
}

int main(int argc, char **argv)
{
    const char *platform = NULL, *device = NULL, *ops = NULL, *dtype = "f32", *shape = NULL,
               *path = "auto";
    int params = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--params") == 0) {
            params = 1;
            continue;
        }
        const char **dst = strcmp(a, "--platform") == 0 ? &platform
                           : strcmp(a, "--device") == 0 ? &device
                           : strcmp(a, "--ops") == 0    ? &ops
                           : strcmp(a, "--dtype") == 0  ? &dtype
                           : strcmp(a, "--shape") == 0  ? &shape
                           : strcmp(a, "--path") == 0   ? &path
                                                        : NULL;
        if (!dst || !v) {
            usage(strcmp(a, "--help") == 0 ? stdout : stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
        *dst = v;
        i++;
    }
    if (params) {
        oclf_dtype dt;
        if (!op_parse_dtype(dtype, &dt)) {
            fprintf(stderr, "oclfuse-info: unknown dtype %s\n", dtype);
            return 2;
        }
        return print_params(platform, device, ops, dt);
    }
    if (op_list_devices("oclfuse-info") != 0)
        return 1;
    char machine[4096];
    if (oclf_tuning_db_default_path(machine, sizeof machine) == OCLF_SUCCESS) {
        size_t n = 0;
        oclf_status st = oclf_tuning_db_check(machine, &n);
        printf("per-machine database: %s (%s)\n", machine,
               st == OCLF_SUCCESS ? "ok" : oclf_last_error(NULL));
        if (st == OCLF_SUCCESS)
            printf("  %zu records\n", n);
    }
    const char *env_db = getenv("OCLF_TUNING_DB");
    if (env_db && *env_db) {
        size_t n = 0;
        oclf_status st = oclf_tuning_db_check(env_db, &n);
        printf("OCLF_TUNING_DB: %s (%s, %zu records)\n", env_db,
               st == OCLF_SUCCESS ? "ok" : oclf_last_error(NULL), n);
    }
    if (!shape)
        return 0;

    oclf_dtype dt;
    if (!op_parse_dtype(dtype, &dt)) {
        fprintf(stderr, "oclfuse-info: unknown dtype %s\n", dtype);
        return 2;
    }
    oclf_path pth = strcmp(path, "fused") == 0     ? OCLF_PATH_FUSED
                    : strcmp(path, "unfused") == 0 ? OCLF_PATH_UNFUSED
                                                   : OCLF_PATH_AUTO;
    op_env env;
    char err[512];
    if (op_env_open(&env, platform, device, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-info: %s\n", err);
        return 1;
    }
    printf("\nlookup on %s, %s %s, path %s:\n", oclf_context_fingerprint(env.ctx), dtype, shape,
           path);
    int rc = 0;
    for (int i = 0; op_table[i]; i++) {
        const op_desc *op = op_table[i];
        if (!op_listed(ops, op->name))
            continue;
        op_shape s;
        if (!op_parse_shape(op, shape, &s)) {
            printf("%s: shape is %s\n", op->name, op->shape_help);
            continue;
        }
        uint64_t dims[OP_MAX_DIMS];
        const int nd = op_lib_shape(op, &s, dims, NULL);
        char text[8192];
        if (oclf_tuning_explain(env.ctx, op_lib_op(op), dt, dims, (unsigned)nd, pth, text,
                                sizeof text) != OCLF_SUCCESS) {
            printf("%s: %s\n", op->name, oclf_last_error(env.ctx));
            rc = 1;
            continue;
        }
        printf("%s:\n", op->name);
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            printf("  %s\n", line);
    }
    op_env_close(&env);
    return rc;
}
