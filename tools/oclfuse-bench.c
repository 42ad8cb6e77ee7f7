/*
 * oclfuse-bench: fused against unfused, per op, dtype and shape, beside the
 * device's copy bandwidth measured in the same run.
 *
 * For each row: time of each path (median over interleaved samples of
 * batched calls, tune/timing.h) with the spread of that median (the larger
 * side of its 95% bootstrap interval), achieved bandwidth = minimum bytes
 * (inputs read once, outputs written once) / time, that as a fraction of a
 * copy of the same bytes timed among the row's samples (%copy) and of the
 * DRAM copy measured once per run (%dram) (tune/memory.h), the
 * unfused/fused ratio, auto over the better
 * path (the median of per-round ratios, with its spread), and the host
 * cost of one call. Paths whose samples a Mann-Whitney U
 * test cannot tell apart (p >= 0.05) are marked "~" in the notes. --json
 * prints one object per op, dtype, shape, path instead of the table;
 * --json-file writes them to a file beside the table (tools/plot_bench.py
 * draws them).
 */
#include "cli.h"
#include "memory.h"
#include "opdesc.h"
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: oclfuse-bench [options]\n"
            "  --ops a,b,...       operations (default: all)\n"
            "  --dtypes f32,...    storage dtypes (default: f32,f16,bf16)\n"
            "  --shapes S,S,...    shapes, read per op as below (default: each op's list\n"
            "                      and its out-of-cache shape)\n"
            "  --full              each op's longer list (the slow shapes too)\n"
            "  --list-shapes       print the rows a run would take (op, dtype, shape, minimum\n"
            "                      bytes, whether past twice the last-level cache), run none\n"
            "  --paths fused,unfused,auto   (default: fused,unfused)\n"
            "  --platform P --device D      index or name substring\n"
            "  --min-time SECONDS  time per path and shape, split over the samples\n"
            "                      (default 0.5; 1 with --full, 0.2 with --short)\n"
            "  --short             each op's shapes of a short run (the first two whose\n"
            "                      call is estimated under 0.1 s, else its cheapest one)\n"
            "                      and its out-of-cache shape; a slow path 3 samples\n"
            "  --samples N         samples per path, interleaved between paths (default 15)\n"
            "  --json              JSON array instead of the table\n"
            "  --json-file FILE    the JSON array into FILE, the table still on stdout\n"
            "  --no-verify         skip the reference check before timing\n"
            "operations and their shapes:\n");
    for (int i = 0; op_table[i]; i++) {
        const op_desc *op = op_table[i];
        fprintf(f, "  %-18s %s; default %s", op->name, op->shape_help, op->bench_shapes);
        if (op->bench_full_shapes)
            fprintf(f, "; --full adds %s", op->bench_full_shapes);
        if (op->uncached_shape)
            fprintf(f, "; out of cache: %s with %s grown", op->uncached_shape,
                    op->dim_names[op->uncached_dim]);
        fprintf(f, "\n");
    }
    fprintf(f, "The out-of-cache shape's traffic exceeds twice the last-level cache in every\n"
               "dtype (the device's, or on a CPU the system's L3 where smaller).\n");
}

/* One path of a row: median host ns per call, its 95% interval, the
 * median device ns (event profiling; <0 without). */
typedef struct path_stat {
    double med, lo, hi, dev;
} path_stat;

/* Series index of the op's yardstick (another library's plain call), after
 * the three paths, and of the same-bytes copy. */
#define YARD 3
#define COPY 4
#define SERIES 5

typedef struct row {
    const tm_series *s[SERIES]; /* by oclf_path, then YARD, COPY; NULL: not run */
    path_stat p[SERIES];
    double call_us; /* host cost of one call of call_path; <0: not measured */
    int call_path;
    double copy_bytes; /* what the same-bytes copy moved */
    int auto_is_fused; /* dispatch runs the fused path's very call for auto */
} row;

static const char *path_names[SERIES] = {"auto", "fused", "unfused", "yardstick", "copy"};

/* Path `pi`'s bandwidth over the same-bytes copy's: the median of the
 * per-round ratios (the two ran side by side), scaled by the bytes each
 * moved (the copy's differ where the device had no room for all of them).
 * <0 without the copy. */
static double of_copy(const row *r, int pi, double bytes, double *lo, double *hi)
{
    if (!r->s[COPY] || !r->s[pi])
        return -1;
    const int n = r->s[pi]->n < r->s[COPY]->n ? r->s[pi]->n : r->s[COPY]->n;
    const double scale = bytes / r->copy_bytes;
    const double q = scale * tm_paired_ratio(r->s[COPY]->host, r->s[pi]->host, n, lo, hi);
    *lo *= scale, *hi *= scale;
    return q;
}

/* Does dispatch give AUTO the very call it gives FUSED (the same path and
 * parameters, from a record or the heuristic)? Then the two time one
 * kernel, and whatever tells their samples apart is the machine. */
static int auto_runs_fused(const op_env *env, const op_desc *op, const op_shape *shape,
                           oclf_dtype dt)
{
    uint64_t dims[OP_MAX_DIMS];
    const int nd = op_lib_shape(op, shape, dims, NULL);
    oclf_tuning_decision a, f;
    if (nd <= 0 ||
        oclf_tuning_resolve(env->ctx, op_lib_op(op), dt, dims, (unsigned)nd, OCLF_PATH_AUTO,
                            &a) != OCLF_SUCCESS ||
        oclf_tuning_resolve(env->ctx, op_lib_op(op), dt, dims, (unsigned)nd, OCLF_PATH_FUSED,
                            &f) != OCLF_SUCCESS)
        return 0;
    return a.decision.path == OCLF_PATH_FUSED && f.decision.path == OCLF_PATH_FUSED &&
           op_params_same(&a.decision.params, &f.decision.params);
}

/* Significance for telling two paths apart (Mann-Whitney U, two-sided). */
#define ALPHA 0.05
/* auto is "auto~best" unless its per-round ratio to the best path is also
 * more than this far from 1: fifteen tight samples can separate two runs
 * of one kernel by 1% (act_and_mul_backward f16 4096x4096 read "1.01±1%,
 * auto slower" on an idle machine, where auto ran the kernel fused did),
 * and no dispatch decision is worth that little. */
#define AUTO_SAME 0.03

static void summarize(const tm_series *s, path_stat *p)
{
    p->med = tm_median(s->host, s->n);
    tm_median_ci(s->host, s->n, &p->lo, &p->hi);
    p->dev = s->dev[0] < 0 ? -1 : tm_median(s->dev, s->n);
}

/* "0.029 ±3%": the median and the larger side of its interval. */
static void fmt_time(char *buf, size_t len, const path_stat *p)
{
    const double spread = fmax(p->hi - p->med, p->med - p->lo) / p->med;
    snprintf(buf, len, "%.3f ±%.0f%%", p->med / 1e6, 100 * spread);
}

/* Can the samples of paths a and b be told apart? */
static int differ(const row *r, int a, int b)
{
    return tm_mwu_differ(r->s[a]->host, r->s[a]->n, r->s[b]->host, r->s[b]->n) < ALPHA;
}

/* The row as JSON objects to `jf` (when not NULL) and as a table line on
 * stdout (when `table`). */
static void print_row(const op_desc *op, const void *inst, const op_shape *shape,
                      const char *text, oclf_dtype dt, const row *r, double copy, double llc,
                      FILE *jf, int table, int *first)
{
    const double bytes = op->min_bytes(shape, dt);
    const int uncached = llc > 0 && bytes > 2 * llc;
    if (jf) {
        for (int pi = 0; pi < YARD + 1; pi++) {
            if (!r->s[pi])
                continue;
            const path_stat *p = &r->p[pi];
            fprintf(jf, "%s\n {\"op\": \"%s\", \"dtype\": \"%s\", \"shape\": {",
                    *first ? "" : ",", op->name, oclf_dtype_name(dt));
            *first = 0;
            for (int k = 0; k < shape->ndims; k++)
                fprintf(jf, "%s\"%s\": %llu", k ? ", " : "", op->dim_names[k],
                        (unsigned long long)shape->d[k]);
            fprintf(jf, "}, \"path\": \"%s\", \"time_ns\": %.0f, \"ci95_ns\": [%.0f, %.0f], "
                    "\"device_ns\": %.0f, \"samples\": %d, \"calls_per_sample\": %d, "
                    "\"min_bytes\": %.0f, \"gbps\": %.6g, \"copy_gbps\": %.3f",
                    path_names[pi], p->med, p->lo, p->hi, p->dev, r->s[pi]->n, r->s[pi]->reps,
                    bytes, bytes / p->med, copy);
            if (op->flops)
                fprintf(jf, ", \"gflops\": %.3f", op->flops(shape) / p->med);
            fprintf(jf, ", \"of_copy_dram\": %.6g", bytes / p->med / copy);
            double lo, hi;
            const double q = of_copy(r, pi, bytes, &lo, &hi);
            if (q >= 0)
                fprintf(jf, ", \"copy_same_bytes\": %.0f, \"copy_same_bytes_ns\": %.0f, "
                        "\"copy_same_bytes_gbps\": %.6g, \"of_copy_same_bytes\": %.6g, "
                        "\"of_copy_same_bytes_ci95\": [%.6g, %.6g]",
                        r->copy_bytes, r->p[COPY].med, r->copy_bytes / r->p[COPY].med, q, lo, hi);
            else
                fprintf(jf, ", \"copy_same_bytes\": null, \"copy_same_bytes_ns\": null, "
                        "\"copy_same_bytes_gbps\": null, \"of_copy_same_bytes\": null, "
                        "\"of_copy_same_bytes_ci95\": null");
            fprintf(jf, ", \"llc_bytes\": %.0f, \"out_of_cache\": %s", llc,
                    uncached ? "true" : "false");
            if (pi == r->call_path && r->call_us >= 0)
                fprintf(jf, ", \"call_us\": %.2f", r->call_us);
            if (pi == OCLF_PATH_AUTO)
                fprintf(jf, ", \"runs_fused\": %s", r->auto_is_fused ? "true" : "false");
            if (op->temp_bytes && pi < YARD)
                fprintf(jf, ", \"temp_bytes\": %.0f", op->temp_bytes(inst, (oclf_path)pi));
            fprintf(jf, "}");
        }
        fflush(jf);
    }
    if (!table)
        return;
    const row *R = r; /* short, for the table's many fields */
    const int F = OCLF_PATH_FUSED, U = OCLF_PATH_UNFUSED, A = OCLF_PATH_AUTO;
    char fs[32] = "-", us[32] = "-", rs[32] = "-", gs[32] = "-", ps[32] = "-", as[32] = "-",
         ab[32] = "-", cs[32] = "-", ks[32] = "-", ds[32] = "-", note[96] = "";
    int best = R->s[F] ? F : R->s[A] ? A : -1;
    if (R->s[F])
        fmt_time(fs, sizeof fs, &R->p[F]);
    if (R->s[U]) {
        fmt_time(us, sizeof us, &R->p[U]);
        if (best < 0 || R->p[U].med < R->p[best].med)
            best = U;
    }
    if (R->s[F] && R->s[U]) {
        snprintf(rs, sizeof rs, "%.2fx", R->p[U].med / R->p[F].med);
        if (!differ(R, F, U))
            snprintf(note, sizeof note, "fused~unfused ");
    }
    if (R->s[A]) {
        fmt_time(as, sizeof as, &R->p[A]);
        const int other = R->s[F] && R->s[U] ? (R->p[F].med < R->p[U].med ? F : U)
                          : R->s[F]         ? F
                          : R->s[U]         ? U
                                            : -1;
        if (other >= 0) {
            /* paired by round: auto and the other path ran side by side */
            double lo, hi;
            const int n = R->s[A]->n < R->s[other]->n ? R->s[A]->n : R->s[other]->n;
            const double q = tm_paired_ratio(R->s[A]->host, R->s[other]->host, n, &lo, &hi);
            snprintf(ab, sizeof ab, "%.2f±%.0f%%", q, 100 * fmax(hi - q, q - lo) / q);
            const size_t used = strlen(note);
            const int same = !differ(R, A, other) || fabs(q - 1) <= AUTO_SAME;
            snprintf(note + used, sizeof note - used, "%s",
                     R->auto_is_fused && other == F ? "auto=fused"
                     : same                         ? "auto~best"
                     : R->p[A].med > R->p[other].med ? "auto slower"
                                                     : "auto faster");
        }
    }
    if (best >= 0) {
        double lo, hi;
        const double q = of_copy(R, best, bytes, &lo, &hi);
        snprintf(gs, sizeof gs, "%.1f", bytes / R->p[best].med);
        if (q >= 0)
            snprintf(ps, sizeof ps, "%.0f%%", 100.0 * q);
        snprintf(ds, sizeof ds, "%.0f%%", 100.0 * bytes / R->p[best].med / copy);
    }
    if (R->s[COPY])
        snprintf(ks, sizeof ks, "%.1f", R->copy_bytes / R->p[COPY].med);
    {
        const size_t used = strlen(note);
        if (uncached)
            snprintf(note + used, sizeof note - used, "%sout of cache", used ? " " : "");
    }
    if (R->s[COPY] && R->copy_bytes < 0.99 * bytes) {
        const size_t used = strlen(note);
        snprintf(note + used, sizeof note - used, "%scopy %.0f MiB", used ? " " : "",
                 R->copy_bytes / 1048576);
    }
    if (R->call_us >= 0)
        snprintf(cs, sizeof cs, "%.2f", R->call_us);
    printf("%-20s %-5s %-20s %15s %15s %7s %7s %6s %9s %6s %15s %10s %7s  %s", op->name,
           oclf_dtype_name(dt), text, fs, us, rs, gs, ps, ks, ds, as, ab, cs, note);
    if (op->flops && best >= 0)
        printf("  %.1f GFLOP/s", op->flops(shape) / R->p[best].med);
    if (R->s[YARD]) {
        /* the yardstick's time and rate, and the fused path's speed-up on it */
        char ys[32];
        fmt_time(ys, sizeof ys, &R->p[YARD]);
        printf("  yardstick %s ms", ys);
        if (op->flops)
            printf(" %.1f GFLOP/s", op->flops(shape) / R->p[YARD].med);
        if (R->s[F])
            printf(", fused %.2fx", R->p[YARD].med / R->p[F].med);
    }
    if (op->temp_bytes && R->s[F] && R->s[U]) {
        /* the peak device memory each path's temporaries took */
        const double tf = op->temp_bytes(inst, OCLF_PATH_FUSED),
                     tu = op->temp_bytes(inst, OCLF_PATH_UNFUSED);
        printf("  temporaries fused %.1f MiB, unfused %.1f MiB", tf / 1048576, tu / 1048576);
        if (tf > 0)
            printf(" (1/%.1f)", tu / tf);
    }
    printf("\n");
    fflush(stdout);
}

/* Whether comma list `list` holds a shape of op whose 16-bit traffic is
 * past twice a last-level cache of `llc` bytes (the test op_uncached_shape
 * sizes its shape by). */
static int holds_uncached(const op_desc *op, const char *list, double llc)
{
    char text[128];
    for (const char *p = list; op_list_next(&p, text, sizeof text);) {
        op_shape shape;
        if (op_parse_shape(op, text, &shape) && op->min_bytes(&shape, OCLF_F16) > 2 * llc)
            return 1;
    }
    return 0;
}

/* The shapes of op's rows: `shapes` where given, else the op's list (or
 * `short_list`, --short's part of it), --full's shapes, then the
 * out-of-cache shape for a last-level cache of `llc` bytes unless the list
 * (before --full's shapes) already has a shape that large (a 4096x4096 operand is past twice a
 * 32 MiB cache, not a 260 MiB one). */
static void row_shapes(const op_desc *op, const char *shapes, int full, const char *short_list,
                       double llc, char *list, size_t len)
{
    if (shapes) {
        snprintf(list, len, "%s", shapes);
        return;
    }
    size_t used = (size_t)snprintf(list, len, "%s", short_list ? short_list : op->bench_shapes);
    /* decided on the list before --full's shapes, so --full only adds rows */
    const int add_uncached = used < len && llc > 0 && !holds_uncached(op, list, llc);
    if (full && op->bench_full_shapes && used < len)
        used += (size_t)snprintf(list + used, len - used, ",%s", op->bench_full_shapes);
    op_shape big;
    char text[128];
    if (add_uncached && used < len && op_uncached_shape(op, (uint64_t)llc, &big)) {
        op_format_shape(&big, text, sizeof text);
        snprintf(list + used, len - used, ",%s", text);
    }
}

/* --list-shapes: the rows a run would take, one a line. */
static void list_rows(const char *ops, const char *dtypes, const char *shapes, int full,
                      int short_run, double llc)
{
    printf("%-20s %-5s %-24s %14s  %s\n", "op", "dtype", "shape", "min bytes", "notes");
    for (int oi = 0; op_table[oi]; oi++) {
        const op_desc *op = op_table[oi];
        if (!op_listed(ops, op->name))
            continue;
        char list[1024];
        char *short_list = short_run && !shapes ? op_short_shapes(op) : NULL;
        row_shapes(op, shapes, full, short_list, llc, list, sizeof list);
        free(short_list);
        for (int d = 0; d < OCLF_DTYPE_COUNT_; d++) {
            const oclf_dtype dt = (oclf_dtype)d;
            if (!op_listed(dtypes, oclf_dtype_name(dt)))
                continue;
            char text[128];
            for (const char *p = list; op_list_next(&p, text, sizeof text);) {
                op_shape shape;
                if (!op_parse_shape(op, text, &shape))
                    continue;
                const double bytes = op->min_bytes(&shape, dt);
                printf("%-20s %-5s %-24s %14.0f  %s\n", op->name, oclf_dtype_name(dt), text, bytes,
                       llc > 0 && bytes > 2 * llc ? "out of cache" : "");
            }
        }
    }
}

int main(int argc, char **argv)
{
    const char *ops = NULL, *dtypes = "f32,f16,bf16", *shapes = NULL,
               *paths = "fused,unfused";
    const char *platform = NULL, *device = NULL, *json_file = NULL;
    double min_time = -1; /* unset: 0.5, or 1 with --full */
    int samples = 15;
    int json = 0, no_verify = 0, full = 0, short_run = 0, list_only = 0;
    const cli_opt opts[] = {
        {"--ops", CLI_STRING, &ops, 0, 0, NULL},
        {"--dtypes", CLI_STRING, &dtypes, 0, 0, NULL},
        {"--shapes", CLI_STRING, &shapes, 0, 0, NULL},
        {"--paths", CLI_STRING, &paths, 0, 0, NULL},
        {"--platform", CLI_STRING, &platform, 0, 0, NULL},
        {"--device", CLI_STRING, &device, 0, 0, NULL},
        {"--json-file", CLI_STRING, &json_file, 0, 0, NULL},
        {"--samples", CLI_INT, &samples, 5, TM_MAX_SAMPLES, NULL},
        {"--min-time", CLI_DOUBLE, &min_time, 0, 0, NULL},
        {"--short", CLI_FLAG, &short_run, 0, 0, NULL},
        {"--json", CLI_FLAG, &json, 0, 0, NULL},
        {"--full", CLI_FLAG, &full, 0, 0, NULL},
        {"--list-shapes", CLI_FLAG, &list_only, 0, 0, NULL},
        {"--no-verify", CLI_FLAG, &no_verify, 0, 0, NULL},
    };
    const int rc = cli_parse("oclfuse-bench", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage);
    if (rc >= 0)
        return rc;
    const int verify = !no_verify;
    /* A short run is a first look in a quarter of an hour: 0.2 s a path, still
     * 15 interleaved samples of batched calls, and a path whose calls are
     * too slow for them 3 calls rather than 5 (an unfused paged decode
     * takes 2 s a call on two CPU cores). */
    if (min_time < 0)
        min_time = full ? 1.0 : short_run ? 0.2 : 0.5;
    const int min_samples = short_run ? 3 : 5;
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

    if (list_only) {
        op_env env;
        char err[512];
        if (op_env_open(&env, platform, device, err, sizeof err) != 0) {
            fprintf(stderr, "oclfuse-bench: %s\n", err);
            return 1;
        }
        uint64_t dev_cache, l3;
        const double llc = (double)op_llc_bytes(&env, &dev_cache, &l3);
        printf("last-level cache: %.0f bytes (the device reports %llu, the system's L3 %llu)\n",
               llc, (unsigned long long)dev_cache, (unsigned long long)l3);
        list_rows(ops, dtypes, shapes, full, short_run, llc);
        op_env_close(&env);
        return 0;
    }
    FILE *jf = json ? stdout : NULL;
    if (json_file && !json && !(jf = fopen(json_file, "w"))) {
        fprintf(stderr, "oclfuse-bench: cannot write %s\n", json_file);
        return 1;
    }
    const double run_start = op_now_s();
    op_env env;
    char err[512];
    if (op_env_open(&env, platform, device, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-bench: %s\n", err);
        if (jf && jf != stdout)
            fclose(jf);
        return 1;
    }
    int variant;
    const double copy = op_copy_measure(&env, &variant);
    uint64_t dev_cache, l3;
    const double llc = (double)op_llc_bytes(&env, &dev_cache, &l3);
    char devname[256] = "";
    clGetDeviceInfo(env.device, CL_DEVICE_NAME, sizeof devname, devname, NULL);
    /* What a plain OpenCL program pays to launch a kernel: the yardstick for
     * the host cost of a call (the "call us" column). */
    const double plain2_us = tm_plain_launch_us(&env, 2, 64, 9);
    const double plain14_us = tm_plain_launch_us(&env, 14, 64, 9);
    if (jf)
        fprintf(jf, "[");
    if (!json) {
        char l3s[48] = "not read";
        if (l3)
            snprintf(l3s, sizeof l3s, "%.0f MiB", (double)l3 / 1048576);
        printf("device: %s\nDRAM copy bandwidth: %.1f GB/s (256 MiB each way; %%dram)\n"
               "last-level cache: %.0f MiB (the device reports %.0f MiB, the system's L3 %s)\n"
               "plain kernel launch, host time: %.2f us "
               "with 2 arguments, %.2f us with 14 (each set, then clEnqueueNDRangeKernel)\n",
               devname, copy, llc / 1048576, (double)dev_cache / 1048576, l3s, plain2_us,
               plain14_us);
    }
    /* Expressions: what compiling one costs once its program is cached. */
    int any_expr = 0;
    for (int oi = 0; op_table[oi]; oi++)
        any_expr |= op_listed(ops, op_table[oi]->name) && strcmp(op_lib_op(op_table[oi]), "expr") == 0;
    double mem_ms, disk_ms;
    if (!json && any_expr && op_expr_first_launch_ms(&env, &mem_ms, &disk_ms) == 0)
        printf("expression compile to the end of its first run: %.3f ms with the program in the "
               "context, %.3f ms from the disk cache (new context)\n",
               mem_ms, disk_ms);
    if (!json)
        printf("\n%-20s %-5s %-20s %15s %15s %7s %7s %6s %9s %6s %15s %10s %7s  %s\n",
               "op", "dtype", "shape", "fused ms", "unfused ms", "ratio", "GB/s", "%copy",
               "copy GB/s", "%dram", "auto ms", "auto/best", "call us", "notes");
    int first = 1, failures = 0, ops_done = 0, ops_total = 0;
    for (int oi = 0; op_table[oi]; oi++)
        ops_total += op_listed(ops, op_table[oi]->name);
    for (int oi = 0; op_table[oi]; oi++) {
        const op_desc *op = op_table[oi];
        if (!op_listed(ops, op->name))
            continue;
        char *short_list = short_run && !shapes ? op_short_shapes(op) : NULL;
        /* Progress on stderr, an op at a time: a run takes minutes (a full
         * one, hours on some machines), and the table says nothing until
         * an op's first row is measured. */
        const double op_start = op_now_s();
        ops_done++;
        fprintf(stderr, "oclfuse-bench: %s (op %d of %d): %s\n", op->name, ops_done, ops_total,
                shapes ? shapes : short_list ? short_list : op->bench_shapes);
        for (int d = 0; d < OCLF_DTYPE_COUNT_; d++) {
            const oclf_dtype dt = (oclf_dtype)d;
            if (!op_listed(dtypes, oclf_dtype_name(dt)))
                continue;
            char list[1024];
            row_shapes(op, shapes, full, short_list, llc, list, sizeof list);
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
                /* The paths take turns, sample by sample (tune/timing.h), so
                 * a slow spell of a shared machine lands on every path alike. */
                const oclf_choice *chs[SERIES];
                oclf_choice choice[SERIES];
                int idx[SERIES], k = 0;
                for (int pi = 0; pi < 3; pi++) {
                    memset(&choice[pi], 0, sizeof choice[pi]);
                    choice[pi].path = (oclf_path)pi;
                    if (live[pi])
                        chs[k] = &choice[pi], idx[k++] = pi;
                }
                /* the yardstick takes its turns among the paths */
                memset(&choice[YARD], 0, sizeof choice[YARD]);
                if (op->yardstick) {
                    oclf_params_set(&choice[YARD].params, OP_YARDSTICK_PARAM, 1);
                    chs[k] = &choice[YARD], idx[k++] = YARD;
                }
                /* and so does a copy of the row's minimum bytes, so that
                 * %copy compares the op with a copy whose buffers sit in
                 * the same level of the memory as its operands; where the
                 * device has no room for all of it, a smaller one, but
                 * not below four times the cache, past which a copy
                 * streams from DRAM whatever its size */
                const double bytes = op->min_bytes(&shape, dt);
                memset(&choice[COPY], 0, sizeof choice[COPY]);
                op_pair pair = {op, inst, NULL, &choice[COPY]};
                if (k > 0 &&
                    !(pair.copy = op_copy_create(&env, bytes, llc > 0 ? 4 * llc : bytes, variant,
                                                 err, sizeof err)))
                    fprintf(stderr, "oclfuse-bench: %s %s %s: no same-bytes copy: %s\n",
                            op->name, oclf_dtype_name(dt), text, err);
                if (pair.copy)
                    chs[k] = &choice[COPY], idx[k++] = COPY;
                tm_series got[SERIES];
                row r;
                memset(&r, 0, sizeof r);
                r.copy_bytes = pair.copy ? op_copy_bytes(pair.copy) : 0;
                r.auto_is_fused = live[OCLF_PATH_AUTO] && auto_runs_fused(&env, op, &shape, dt);
                int failed = 0;
                const tm_plan plan = {min_time * 1e9 / samples, samples, 1, 3 * min_time * 1e9,
                                     min_samples, 0};
                if (k > 0 && tm_measure(&env, &op_pair_desc, &pair, chs, k, &plan, got, &failed) != 0) {
                    fprintf(stderr, "oclfuse-bench: %s %s %s %s failed: %s\n", op->name,
                            oclf_dtype_name(dt), text, path_names[idx[failed]],
                            idx[failed] == COPY ? "the copy did not enqueue"
                                                : oclf_last_error(env.ctx));
                    failures++;
                    k = 0;
                }
                for (int i = 0; i < k; i++) {
                    r.s[idx[i]] = &got[i];
                    summarize(&got[i], &r.p[idx[i]]);
                }
                /* Host cost of one call, the launch path alone: only where
                 * calls are short enough that a batch of them queues quickly. */
                const int cp = live[OCLF_PATH_AUTO] ? OCLF_PATH_AUTO : OCLF_PATH_FUSED;
                r.call_us = -1;
                r.call_path = cp;
                if (r.s[cp] && r.p[cp].med < 1e6 && !(op->blocks && op->blocks(inst)))
                    r.call_us = tm_call_us(&env, op, inst, &choice[cp], 64, 9);
                print_row(op, inst, &shape, text, dt, &r, copy, llc, jf, !json, &first);
                if (jf)
                    fflush(jf); /* a run cut short keeps the rows it finished */
                op_copy_destroy(pair.copy);
                op->destroy(inst);
            }
        }
        free(short_list);
        fprintf(stderr, "oclfuse-bench: %s done in %.0f s; %.0f s since the start\n", op->name,
                op_now_s() - op_start, op_now_s() - run_start);
    }
    if (jf) {
        fprintf(jf, "\n]\n");
        if (jf != stdout && fclose(jf) != 0) {
            fprintf(stderr, "oclfuse-bench: cannot write %s\n", json_file);
            failures++;
        }
    }
    op_env_close(&env);
    return failures ? 1 : 0;
}
