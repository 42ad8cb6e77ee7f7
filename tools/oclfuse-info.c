/*
 * oclfuse-info: the OpenCL platforms and devices with their fingerprints
 * (the key of tuning records), and for one device which tuning record, from
 * which database file, each op would use for a shape (or why it falls back
 * to the heuristic).
 */
#include "opdesc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: oclfuse-info [--platform P --device D] [--ops a,b] [--dtype f32]\n"
               "                    [--shape ROWSxCOLS] [--path auto|fused|unfused]\n"
               "Lists devices; with --shape, explains each op's tuning lookup on the chosen\n"
               "device (default: the first).\n");
}

int main(int argc, char **argv)
{
    const char *platform = NULL, *device = NULL, *ops = NULL, *dtype = "f32", *shape = NULL,
               *path = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
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
