/*
 * oclfuse-bench: fused against unfused, per op, dtype and shape, beside the
 * device's copy bandwidth measured in the same run.
 *
 * For each row: time of each path (median host time around the whole call),
 * achieved bandwidth = minimum bytes (inputs read once, outputs written once)
 * / time, that as a fraction of the copy kernel's bandwidth, and the
 * unfused/fused ratio. --json prints one object per op, dtype, shape, path.
 */
#include "opdesc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: oclfuse-bench [options]\n"
            "  --ops a,b,...       operations (default: all)\n"
            "  --dtypes f32,...    storage dtypes (default: f32)\n"
            "  --shapes S,S,...    shapes, read per op as below (default: each op's list)\n"
            "  --paths fused,unfused,auto   (default: fused,unfused)\n"
            "  --platform P --device D      index or name substring\n"
            "  --min-time SECONDS  time per path and shape, split over 5 rounds (default 1)\n"
            "  --json              JSON array instead of the table\n"
            "  --no-verify         skip the reference check before timing\n"
            "operations and their shapes:\n");
    for (int i = 0; op_table[i]; i++)
        fprintf(f, "  %-18s %s; default %s\n", op_table[i]->name, op_table[i]->shape_help,
                op_table[i]->bench_shapes);
}

typedef struct row {
    double time_ns[3]; /* by oclf_path; <0: not run */
} row;

static const char *path_names[3] = {"auto", "fused", "unfused"};

/* Rounds in which the paths of one shape take turns. */
#define ROUNDS 5


int main(int argc, char **argv)
{
    const char *ops = NULL, *dtypes = "f32", *shapes = NULL, *paths = "fused,unfused";
    const char *platform = NULL, *device = NULL;
    double min_time = 1.0;
    int json = 0, verify = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name, var)                                                 \
    if (strcmp(a, name) == 0) {                                        \
        if (!v) {                                                      \
            fprintf(stderr, "oclfuse-bench: %s needs a value\n", a);   \
            return 2;                                                  \
        }                                                              \
        var = v;                                                       \
        i++;                                                           \
        continue;                                                      \
    }
        OPT("--ops", ops)
        OPT("--dtypes", dtypes)
        OPT("--shapes", shapes)
        OPT("--paths", paths)
        OPT("--platform", platform)
        OPT("--device", device)
#undef OPT
        if (strcmp(a, "--min-time") == 0 && v) {
            min_time = atof(v);
            i++;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--no-verify") == 0) {
            verify = 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "oclfuse-bench: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (ops) {
        for (const char *p = ops; *p;) {
            const char *end = strchr(p, ',');
            char name[64];
            size_t len = end ? (size_t)(end - p) : strlen(p);
            snprintf(name, sizeof name, "%.*s", (int)len, p);
            if (!op_find(name)) {
                fprintf(stderr, "oclfuse-bench: unknown op '%s' (see --help)\n", name);
                return 2;
            }
            p += len + (end ? 1 : 0);
        }
    }

    op_env env;
    char err[512];
    if (op_env_open(&env, platform, device, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-bench: %s\n", err);
        return 1;
    }
    const double copy = op_copy_gbps(&env);
    char devname[256] = "";
    clGetDeviceInfo(env.device, CL_DEVICE_NAME, sizeof devname, devname, NULL);
    if (json)
        printf("[");
    else
        printf("device: %s\ncopy bandwidth: %.1f GB/s\n\n%-15s %-5s %-22s %11s %11s %7s %8s %7s %8s\n",
               devname, copy, "op", "dtype", "shape", "fused ms", "unfused ms", "ratio", "GB/s",
               "%copy", "auto ms");
    int first = 1, failures = 0;
    for (int oi = 0; op_table[oi]; oi++) {
        const op_desc *op = op_table[oi];
        if (!op_listed(ops, op->name))
            continue;
        for (int d = 0; d < OCLF_DTYPE_COUNT_; d++) {
            const oclf_dtype dt = (oclf_dtype)d;
            if (!op_listed(dtypes, oclf_dtype_name(dt)))
                continue;
            const char *list = shapes ? shapes : op->bench_shapes;
            for (const char *p = list; *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                char text[128];
                snprintf(text, sizeof text, "%.*s", (int)len, p);
                p += len + (end ? 1 : 0);
                op_shape shape;
                if (!op_parse_shape(op, text, &shape)) {
                    if (!shapes || !json)
                        fprintf(stderr, "oclfuse-bench: %s: shape '%s' is not %s; skipped\n",
                                op->name, text, op->shape_help);
                    continue;
                }
                void *inst = op->create(&env, &shape, dt, err, sizeof err);
                if (!inst) {
                    fprintf(stderr, "oclfuse-bench: %s %s %s: %s\n", op->name,
                            oclf_dtype_name(dt), text, err);
                    failures++;
                    continue;
                }
                row r = {{-1, -1, -1}};
                int live[3] = {0, 0, 0};
                for (int pi = 0; pi < 3; pi++) {
                    if (!op_listed(paths, path_names[pi]) ||
                        (pi == OCLF_PATH_UNFUSED && !op->has_unfused))
                        continue;
                    oclf_choice ch;
                    memset(&ch, 0, sizeof ch);
                    ch.path = (oclf_path)pi;
                    if (verify && !op->verify(&env, inst, &ch, err, sizeof err)) {
                        fprintf(stderr, "oclfuse-bench: %s %s %s %s: wrong result: %s\n",
                                op->name, oclf_dtype_name(dt), text, path_names[pi], err);
                        failures++;
                        continue;
                    }
                    live[pi] = 1;
                }
                /* The paths take turns over several rounds and each keeps the
                 * median of its rounds, so a slow spell of a shared machine
                 * lands on every path alike rather than on whichever ran then. */
                double rounds[3][ROUNDS];
                for (int k = 0; k < ROUNDS; k++) {
                    for (int pi = 0; pi < 3; pi++) {
                        if (!live[pi])
                            continue;
                        oclf_choice ch;
                        memset(&ch, 0, sizeof ch);
                        ch.path = (oclf_path)pi;
                        /* warm once; a round then needs one call at least,
                         * so a slow shape costs ROUNDS calls, not 5x3 */
                        rounds[pi][k] = op_time_ns(&env, op, inst, &ch, min_time / ROUNDS, 1,
                                                   k == 0 ? 1 : 0);
                        if (rounds[pi][k] < 0) {
                            fprintf(stderr, "oclfuse-bench: %s %s %s %s failed: %s\n", op->name,
                                    oclf_dtype_name(dt), text, path_names[pi],
                                    oclf_last_error(env.ctx));
                            failures++;
                            live[pi] = 0;
                        }
                    }
                }
                for (int pi = 0; pi < 3; pi++) {
                    if (!live[pi])
                        continue;
                    r.time_ns[pi] = op_median(rounds[pi], ROUNDS);
                }
                const double bytes = op->min_bytes(&shape, dt);
                if (json) {
                    for (int pi = 0; pi < 3; pi++) {
                        if (r.time_ns[pi] < 0)
                            continue;
                        printf("%s\n {\"op\": \"%s\", \"dtype\": \"%s\", \"shape\": {", first ? "" : ",",
                               op->name, oclf_dtype_name(dt));
                        first = 0;
                        for (int k = 0; k < shape.ndims; k++)
                            printf("%s\"%s\": %llu", k ? ", " : "", op->dim_names[k],
                                   (unsigned long long)shape.d[k]);
                        const double gbps = bytes / r.time_ns[pi];
                        printf("}, \"path\": \"%s\", \"time_ns\": %.0f, \"min_bytes\": %.0f, "
                               "\"gbps\": %.3f, \"copy_gbps\": %.3f",
                               path_names[pi], r.time_ns[pi], bytes, gbps, copy);
                        if (op->flops)
                            printf(", \"gflops\": %.3f", op->flops(&shape) / r.time_ns[pi]);
                        printf("}");
                    }
                } else {
                    const double f = r.time_ns[OCLF_PATH_FUSED], u = r.time_ns[OCLF_PATH_UNFUSED];
                    const double a = r.time_ns[OCLF_PATH_AUTO];
                    const double best = f > 0 ? f : a;
                    char fs[32] = "-", us[32] = "-", rs[32] = "-", gs[32] = "-", ps[32] = "-",
                         as[32] = "-";
                    if (f > 0)
                        snprintf(fs, sizeof fs, "%.3f", f / 1e6);
                    if (u > 0)
                        snprintf(us, sizeof us, "%.3f", u / 1e6);
                    if (f > 0 && u > 0)
                        snprintf(rs, sizeof rs, "%.2fx", u / f);
                    if (a > 0)
                        snprintf(as, sizeof as, "%.3f", a / 1e6);
                    if (best > 0) {
                        snprintf(gs, sizeof gs, "%.1f", bytes / best);
                        snprintf(ps, sizeof ps, "%.0f%%", 100.0 * bytes / best / copy);
                    }
                    printf("%-15s %-5s %-22s %11s %11s %7s %8s %7s %8s", op->name,
                           oclf_dtype_name(dt), text, fs, us, rs, gs, ps, as);
                    if (op->flops && best > 0)
                        printf("  %.1f GFLOP/s", op->flops(&shape) / best);
                    printf("\n");
                    fflush(stdout);
                }
                op->destroy(inst);
            }
        }
    }
    if (json)
        printf("\n]\n");
    op_env_close(&env);
    return failures ? 1 : 0;
}
