/*
 * oclfuse-layer: N Llama-style decoder layers (tools/layer.h) on the
 * library's calls alone: a prefill, then decode steps, each step timed,
 * held against the bytes a decode step must read (every weight, the KV
 * cache so far) over the device's copy bandwidth measured in the same run
 * (op_copy_gbps, tune/memory.h), and split per op from profiling events.
 *
 * Before the timed pass the prefill and the first decode step run once
 * (building or loading every program those shapes take); the hidden
 * states are then written back and the steps run again, timed.
 */
#include "layer.h"
#include "memory.h"
#include "opdesc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: oclfuse-layer [options]\n"
            "  --layers N          decoder layers (default 2)\n"
            "  --batch B           sequences (default 1)\n"
            "  --prefill P         prompt tokens per sequence, step 0 (default 128)\n"
            "  --decode D          decode steps, one token per sequence each (default 8)\n"
            "  --dtype f16|bf16|f32   activations (default f16)\n"
            "  --weights f16|int4  f16 (or dense): oclf_linear with weights of the\n"
            "                      activation dtype; int4: oclf_linear_q, INT4 in groups\n"
            "                      of 128 with f16 scales, no zero points (default f16)\n"
            "  --block-size N      paged KV cache tokens per block (default 16)\n"
            "  --hidden N --heads N --kv-heads N --head-dim N --mlp N\n"
            "                      sizes (default Llama-3-8B: 4096, 32, 8, 128, 14336)\n"
            "  --eps E             RMSNorm epsilon (default 1e-5)\n"
            "  --theta T           rotary base (default 500000)\n"
            "  --no-qk-norm        rotary_embedding + kv_cache_write instead of\n"
            "                      qk_norm_rope_cache (which applies a per-head RMSNorm,\n"
            "                      here with unit weights)\n"
            "  --o-residual        the output projection adds the residual in its\n"
            "                      epilogue, then rms_norm (default: add_rms_norm)\n"
            "  --path auto|fused|unfused   every call but attention_paged, which runs\n"
            "                      fused (its unfused path reads the metadata on the host)\n"
            "  --seed N            weights and inputs (default 1)\n"
            "  --repeat R          timed passes over every step; each step reports the pass\n"
            "                      of its median time (default 1)\n"
            "  --decode-only       never run the prefill (step 0): its buffers are not\n"
            "                      made and the cache holds zeros where the prompt's\n"
            "                      keys would be (a decode step reads the same bytes)\n"
            "  --gpu-table PATH    the sm_90 predictions per op (default: the installed\n"
            "                      layer-gpu-sm90.tsv, else the source tree's)\n"
            "  --gpu-programs      run steps 0 and 1 once and print each kernel launch\n"
            "                      (op, kind, kernel, source, options), no timing; with\n"
            "                      OCLF_DEVICE_CLASS=gpu the GPU defaults of the shapes\n"
            "  --platform P --device D      index or name substring\n"
            "  --json              one JSON object instead of the tables\n");
}

static int parse_size(const char *opt, const char *v, size_t *out, size_t min)
{
    char *end = NULL;
    const unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *end || x < min || v[0] == '-') {
        fprintf(stderr, "oclfuse-layer: %s takes an integer >= %zu\n", opt, min);
        return -1;
    }
    *out = (size_t)x;
    return 0;
}

static int by_wall(const void *a, const void *b)
{
    const double x = ((const layer_step_stats *)a)->wall_ns, y = ((const layer_step_stats *)b)->wall_ns;
    return (x > y) - (x < y);
}

typedef struct step_row {
    layer_step_stats st;
    size_t tokens;
    double bytes, roof_ms, frac, flops;
    double attn_share;        /* attention's share of the device time; <0 without */
    double gpu_ideal_ms;      /* sm_90: bytes / HBM (memory-bound ops), flops / peak */
    double gpu_pred_ms;       /* sm_90: the same over the table's fractions; <0: none */
} step_row;

/* ---- the kernel launches of a step, from the library's debug log -------- */
typedef struct launch {
    int op;
    size_t step;
    char kernel[96], source[256], options[1024];
} launch;

typedef struct launch_log {
    const layer_model *m;
    int on;
    size_t step;
    launch *v;
    size_t n, cap;
} launch_log;

/* "launch K of S, options 'O', device options '...'" (lib/program.c),
 * recorded once per (step kind, op, kernel, source, options). */
static void on_log(void *user, oclf_log_level level, const char *msg)
{
    launch_log *L = user;
    if (!L->on || !L->m || level != OCLF_LOG_DEBUG || strncmp(msg, "launch ", 7) != 0)
        return;
    launch x;
    memset(&x, 0, sizeof x);
    x.op = layer_current_op(L->m);
    x.step = L->step;
    const char *k = msg + 7, *of = strstr(k, " of "), *op = of ? strstr(of, ", options '") : NULL;
    const char *oe = op ? strstr(op + 11, "', device options") : NULL;
    if (!oe || x.op < 0)
        return;
    snprintf(x.kernel, sizeof x.kernel, "%.*s", (int)(of - k), k);
    snprintf(x.source, sizeof x.source, "%.*s", (int)(op - of - 4), of + 4);
    snprintf(x.options, sizeof x.options, "%.*s", (int)(oe - op - 11), op + 11);
    for (size_t i = 0; i < L->n; i++)
        if (L->v[i].op == x.op && (L->v[i].step == 0) == (x.step == 0) &&
            !strcmp(L->v[i].kernel, x.kernel) && !strcmp(L->v[i].source, x.source) &&
            !strcmp(L->v[i].options, x.options))
            return;
    if (L->n == L->cap) {
        const size_t cap = L->cap ? 2 * L->cap : 32;
        launch *g = realloc(L->v, cap * sizeof *g);
        if (!g)
            return;
        L->v = g, L->cap = cap;
    }
    L->v[L->n++] = x;
}

/* ---- the sm_90 predictions per op (tools/layer-gpu-sm90.tsv) -------------
 * "#device" line: target, device, HBM GB/s, FP32 TFLOP/s, matrix TFLOP/s;
 * rows: op, kind, dtype, weights, kernel, source, options, bound, predicted,
 * of (HBM, FP32 or matrix), as tools/layer_gpu_table.py writes them from
 * the GPU report. */
typedef struct gpu_row {
    char op[32], kind[16], dtype[8], weights[8], kernel[96], of[16];
    double predicted;
} gpu_row;

typedef struct gpu_table {
    char path[1024], device[64];
    double hbm_gbps, fp32_tflops, matrix_tflops;
    gpu_row *rows;
    size_t n;
} gpu_table;

static int gpu_table_load(gpu_table *t, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    snprintf(t->path, sizeof t->path, "%s", path);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *fld[10];
        int nf = 0;
        for (char *p = line, *save = NULL, *tok; nf < 10 && (tok = strtok_r(p, "\t", &save));
             p = NULL)
            fld[nf++] = tok;
        if (nf == 6 && strcmp(fld[0], "#device") == 0) {
            snprintf(t->device, sizeof t->device, "%s (%s)", fld[2], fld[1]);
            t->hbm_gbps = strtod(fld[3], NULL);
            t->fp32_tflops = strtod(fld[4], NULL);
            t->matrix_tflops = strtod(fld[5], NULL);
            continue;
        }
        if (nf != 10 || line[0] == '#' || strcmp(fld[0], "op") == 0)
            continue;
        gpu_row *g = realloc(t->rows, (t->n + 1) * sizeof *g);
        if (!g)
            break;
        t->rows = g;
        gpu_row *r = &t->rows[t->n++];
        snprintf(r->op, sizeof r->op, "%s", fld[0]);
        snprintf(r->kind, sizeof r->kind, "%s", fld[1]);
        snprintf(r->dtype, sizeof r->dtype, "%s", fld[2]);
        snprintf(r->weights, sizeof r->weights, "%s", fld[3]);
        snprintf(r->kernel, sizeof r->kernel, "%s", fld[4]);
        r->predicted = strtod(fld[8], NULL);
        snprintf(r->of, sizeof r->of, "%s", fld[9]);
    }
    fclose(f);
    return t->hbm_gbps > 0 && t->fp32_tflops > 0 && t->matrix_tflops > 0 ? 0 : -1;
}

/* The sm_90 time of one op of step s: its ideal time (bytes / HBM for a
 * memory-bound kernel, flops / the peak the table names for an
 * arithmetic-bound one) over the least fraction the table predicts for
 * the op's kernels (the whole op charged at its slowest kernel). 0 when
 * the table has the op, else -1. */
static int gpu_op_time(const gpu_table *t, const layer_config *c, const layer_model *m, size_t s,
                       int op, double *ideal_ms, double *pred_ms)
{
    const char *name = layer_op_name(c, op), *kind = s ? "decode" : "prefill";
    const char *dt = oclf_dtype_name(c->dtype), *w = c->int4 ? "int4" : "dense";
    const gpu_row *least = NULL;
    for (size_t i = 0; i < t->n; i++) {
        const gpu_row *r = &t->rows[i];
        if (!strcmp(r->op, name) && !strcmp(r->kind, kind) && !strcmp(r->dtype, dt) &&
            (!strcmp(r->weights, "-") || !strcmp(r->weights, w)) && r->predicted > 0 &&
            (!least || r->predicted < least->predicted))
            least = r;
    }
    if (!least)
        return -1;
    double ideal_s;
    if (!strcmp(least->of, "HBM"))
        ideal_s = layer_op_bytes(m, s, op) / (t->hbm_gbps * 1e9);
    else
        ideal_s = layer_op_flops(m, s, op) /
                  ((!strcmp(least->of, "matrix") ? t->matrix_tflops : t->fp32_tflops) * 1e12);
    *ideal_ms = ideal_s * 1e3;
    *pred_ms = ideal_s * 1e3 / least->predicted;
    return 0;
}

int main(int argc, char **argv)
{
    layer_config c;
    layer_config_default(&c);
    const char *platform = NULL, *device = NULL, *table_path = NULL;
    int json = 0, list_programs = 0;
    size_t repeat = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        struct {
            const char *name;
            size_t *var;
            size_t min;
        } sizes[] = {{"--layers", &c.layers, 1},      {"--batch", &c.batch, 1},
                     {"--prefill", &c.prefill, 1},    {"--decode", &c.decode, 0},
                     {"--block-size", &c.block_size, 1}, {"--hidden", &c.hidden, 1},
                     {"--repeat", &repeat, 1},
                     {"--heads", &c.q_heads, 1},      {"--kv-heads", &c.kv_heads, 1},
                     {"--head-dim", &c.head_dim, 2},  {"--mlp", &c.mlp, 1}};
        int taken = 0;
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
            if (strcmp(a, sizes[k].name) == 0) {
                if (parse_size(a, v, sizes[k].var, sizes[k].min))
                    return 2;
                i++;
                taken = 1;
            }
        if (taken)
            continue;
        if (strcmp(a, "--seed") == 0 && v) {
            c.seed = strtoull(v, NULL, 0);
            i++;
        } else if (strcmp(a, "--eps") == 0 && v) {
            c.eps = strtof(v, NULL);
            i++;
        } else if (strcmp(a, "--theta") == 0 && v) {
            c.theta = strtod(v, NULL);
            i++;
        } else if (strcmp(a, "--dtype") == 0 && v) {
            if (!op_parse_dtype(v, &c.dtype)) {
                fprintf(stderr, "oclfuse-layer: --dtype takes f16, bf16 or f32\n");
                return 2;
            }
            i++;
        } else if (strcmp(a, "--weights") == 0 && v) {
            if (strcmp(v, "int4") == 0)
                c.int4 = 1;
            else if (strcmp(v, "f16") == 0 || strcmp(v, "dense") == 0)
                c.int4 = 0;
            else {
                fprintf(stderr, "oclfuse-layer: --weights takes f16 (dense) or int4\n");
                return 2;
            }
            i++;
        } else if (strcmp(a, "--path") == 0 && v) {
            if (strcmp(v, "auto") == 0)
                c.path = OCLF_PATH_AUTO;
            else if (strcmp(v, "fused") == 0)
                c.path = OCLF_PATH_FUSED;
            else if (strcmp(v, "unfused") == 0)
                c.path = OCLF_PATH_UNFUSED;
            else {
                fprintf(stderr, "oclfuse-layer: --path takes auto, fused or unfused\n");
                return 2;
            }
            i++;
        } else if (strcmp(a, "--platform") == 0 && v) {
            platform = v;
            i++;
        } else if (strcmp(a, "--device") == 0 && v) {
            device = v;
            i++;
        } else if (strcmp(a, "--gpu-table") == 0 && v) {
            table_path = v;
            i++;
        } else if (strcmp(a, "--gpu-programs") == 0) {
            list_programs = 1;
        } else if (strcmp(a, "--decode-only") == 0) {
            c.decode_only = 1;
        } else if (strcmp(a, "--no-qk-norm") == 0) {
            c.qk_norm = 0;
        } else if (strcmp(a, "--o-residual") == 0) {
            c.o_residual = 1;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "oclfuse-layer: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!(c.eps >= 0) || !isfinite(c.eps) || !(c.theta > 0) || !isfinite(c.theta)) {
        fprintf(stderr, "oclfuse-layer: --eps must be >= 0 and --theta > 0, both finite\n");
        return 2;
    }

    char err[1024];
    if (layer_config_check(&c, err, sizeof err)) {
        fprintf(stderr, "oclfuse-layer: %s\n", err);
        return 2;
    }
    if (c.decode_only && c.decode == 0) {
        fprintf(stderr, "oclfuse-layer: --decode-only needs --decode of 1 or more\n");
        return 2;
    }
    gpu_table table;
    memset(&table, 0, sizeof table);
    if (!list_programs) {
        const char *tries[] = {table_path, table_path ? NULL : LAYER_GPU_TABLE_INSTALLED,
                               table_path ? NULL : LAYER_GPU_TABLE_SOURCE};
        for (size_t k = 0; k < 3 && !table.n; k++)
            if (tries[k] && gpu_table_load(&table, tries[k]) != 0) {
                free(table.rows);
                memset(&table, 0, sizeof table);
            }
        if (table_path && !table.n) {
            fprintf(stderr, "oclfuse-layer: %s is not a GPU prediction table\n", table_path);
            return 2;
        }
    }
    launch_log launches;
    memset(&launches, 0, sizeof launches);
    oclf_context_options copt;
    oclf_context_options_init(&copt);
    copt.log = on_log;
    copt.log_user = &launches;
    op_env env;
    if (op_env_open_opts(&env, platform, device, &copt, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-layer: %s\n", err);
        return 1;
    }
    const char *dt = oclf_dtype_name(c.dtype);
    const char *wname = c.int4 ? "int4 (group 128, f16 scales)" : dt;
    if (!json) {
        printf("oclfuse-layer: %zu layers, hidden %zu, heads %zu/%zu x %zu, MLP %zu, batch %zu, "
               "prefill %zu, decode %zu\n",
               c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.mlp, c.batch, c.prefill,
               c.decode);
        printf("activations %s, weights %s, block size %zu, %s, %s, path %s\n", dt, wname,
               c.block_size, c.qk_norm ? "qk_norm_rope_cache (unit q/k norm weights)"
                                       : "rotary_embedding + kv_cache_write",
               c.o_residual ? "o-proj residual epilogue + rms_norm" : "add_rms_norm",
               c.path == OCLF_PATH_AUTO ? "auto" : c.path == OCLF_PATH_FUSED ? "fused" : "unfused");
        printf("device: %s\n", oclf_context_fingerprint(env.ctx));
        fflush(stdout);
    }
    layer_model *m = NULL;
    const double t_make = op_now_s();
    if (layer_model_create(env.cl, env.device, env.queue, env.ctx, &c, &m, err, sizeof err)) {
        fprintf(stderr, "oclfuse-layer: %s\n", err);
        op_env_close(&env);
        return 1;
    }
    const double make_s = op_now_s() - t_make;
    int rc = 0;
    const size_t first = c.decode_only ? 1 : 0; /* the first step that runs */
    /* warm-up: the prefill's and a decode step's programs (and, with
     * --gpu-programs, the record of their launches) */
    launches.m = m;
    launches.on = list_programs;
    const double t_warm = op_now_s();
    for (size_t s = first; s < layer_steps(m) && s < 2; s++)
        if ((launches.step = s), layer_step(m, s, NULL, err, sizeof err)) {
            fprintf(stderr, "oclfuse-layer: warm-up: %s\n", err);
            rc = 1;
            goto out;
        }
    const double warm_s = op_now_s() - t_warm;
    launches.on = 0;
    if (list_programs) {
        printf("op\tkind\tdtype\tweights\tkernel\tsource\toptions\n");
        for (size_t i = 0; i < launches.n; i++) {
            const launch *x = &launches.v[i];
            printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", layer_op_name(&c, x->op),
                   x->step ? "decode" : "prefill", dt, c.int4 ? "int4" : "dense", x->kernel,
                   x->source, x->options);
        }
        goto out;
    }
    if (layer_reset(m, err, sizeof err)) {
        fprintf(stderr, "oclfuse-layer: %s\n", err);
        rc = 1;
        goto out;
    }
    /* the same-run copy bandwidth: buffers of 256 MiB, beyond any cache */
    const double gbps = op_copy_gbps(&env);
    if (!(gbps > 0)) {
        fprintf(stderr, "oclfuse-layer: the copy kernel did not run\n");
        rc = 1;
        goto out;
    }
    const size_t steps = layer_steps(m);
    step_row *rows = calloc(steps, sizeof *rows);
    if (!rows) {
        rc = 1;
        goto out;
    }
    const double wbytes = layer_weight_bytes(m);
    /* `repeat` passes; each step keeps the pass of its median time */
    layer_step_stats *runs = calloc(steps * repeat, sizeof *runs);
    if (!runs) {
        free(rows);
        rc = 1;
        goto out;
    }
    for (size_t p = 0; p < repeat; p++) {
        if (p && layer_reset(m, err, sizeof err)) {
            fprintf(stderr, "oclfuse-layer: %s\n", err);
            free(rows), free(runs);
            rc = 1;
            goto out;
        }
        for (size_t s = first; s < steps; s++)
            if (layer_step(m, s, &runs[s * repeat + p], err, sizeof err)) {
                fprintf(stderr, "oclfuse-layer: %s\n", err);
                free(rows), free(runs);
                rc = 1;
                goto out;
            }
    }
    for (size_t s = first; s < steps; s++) {
        step_row *r = &rows[s];
        layer_step_stats *st = runs + s * repeat;
        qsort(st, repeat, sizeof *st, by_wall);
        r->st = st[repeat / 2];
        r->tokens = layer_step_tokens(m, s);
        r->bytes = wbytes + layer_kv_bytes(m, s);
        r->roof_ms = r->bytes / (gbps * 1e9) * 1e3;
        r->frac = r->roof_ms / (r->st.wall_ns / 1e6);
        r->flops = layer_step_flops(m, s);
        /* attention: the paged attention call (its kernels, a split decode's
         * merge included) and the cache write where it is its own launch */
        r->attn_share = -1;
        if (r->st.device_ns > 0 && r->st.op_ns[LAYER_OP_ATTN] >= 0)
            r->attn_share = (r->st.op_ns[LAYER_OP_ATTN] +
                             (layer_op_name(&c, LAYER_OP_CACHE) ? r->st.op_ns[LAYER_OP_CACHE] : 0)) /
                            r->st.device_ns;
        r->gpu_ideal_ms = r->gpu_pred_ms = -1;
        if (table.n) {
            double ideal = 0, pred = 0;
            int ok = 1;
            for (int op = 0; op < LAYER_OPS && ok; op++) {
                double i_ms = 0, p_ms = 0;
                if (!layer_op_name(&c, op))
                    continue;
                if (gpu_op_time(&table, &c, m, s, op, &i_ms, &p_ms) != 0)
                    ok = 0;
                ideal += i_ms, pred += p_ms;
            }
            if (ok)
                r->gpu_ideal_ms = ideal, r->gpu_pred_ms = pred;
        }
    }
    free(runs);

    if (json) {
        printf("{\"layers\": %zu, \"hidden\": %zu, \"q_heads\": %zu, \"kv_heads\": %zu, "
               "\"head_dim\": %zu, \"mlp\": %zu, \"batch\": %zu, \"prefill\": %zu, "
               "\"decode\": %zu, \"block_size\": %zu, \"dtype\": \"%s\", \"weights\": \"%s\", "
               "\"qk_norm\": %d, \"o_residual\": %d, \"path\": \"%s\", \"seed\": %llu, "
               "\"eps\": %g, \"theta\": %g, \"repeat\": %zu, \"decode_only\": %d,\n",
               c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.mlp, c.batch, c.prefill,
               c.decode, c.block_size, dt, c.int4 ? "int4" : dt, c.qk_norm, c.o_residual,
               c.path == OCLF_PATH_AUTO ? "auto" : c.path == OCLF_PATH_FUSED ? "fused" : "unfused",
               (unsigned long long)c.seed, (double)c.eps, c.theta, repeat, c.decode_only);
        printf(" \"device\": \"");
        for (const char *p = oclf_context_fingerprint(env.ctx); *p; p++)
            printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char)*p < 32 ? "?" : "%c", *p);
        printf("\", \"setup_s\": %.3f, \"warmup_s\": %.3f, \"copy_gbps\": %.3f, "
               "\"weight_bytes\": %.0f,\n",
               make_s, warm_s, gbps, wbytes);
        if (table.n)
            printf(" \"gpu_model\": {\"device\": \"%s\", \"hbm_gbps\": %g, \"fp32_tflops\": %g, "
                   "\"matrix_tflops\": %g, \"table\": \"%s\"},\n",
                   table.device, table.hbm_gbps, table.fp32_tflops, table.matrix_tflops,
                   table.path);
        else
            printf(" \"gpu_model\": null,\n");
        printf(" \"steps\": [\n");
        for (size_t s = first; s < steps; s++) {
            const step_row *r = &rows[s];
            printf("  {\"step\": %zu, \"kind\": \"%s\", \"tokens\": %zu, \"seq_len\": %zu, "
                   "\"time_ms\": %.4f, \"device_ms\": %.4f, \"tokens_per_s\": %.3f, "
                   "\"bytes\": %.0f, \"kv_bytes\": %.0f, \"roofline_ms\": %.4f, "
                   "\"roofline_fraction\": %.4f, \"gflops\": %.3f, \"attention_share\": %.4f, "
                   "\"gpu_ideal_ms\": %.6f, \"gpu_predicted_ms\": %.6f, "
                   "\"gpu_predicted_fraction\": %.4f, \"op_share\": {",
                   s, s ? "decode" : "prefill", r->tokens, layer_step_seq_len(m, s),
                   r->st.wall_ns / 1e6, r->st.device_ns / 1e6,
                   (double)r->tokens / (r->st.wall_ns / 1e9), r->bytes, layer_kv_bytes(m, s),
                   r->roof_ms, r->frac, r->flops / r->st.wall_ns, r->attn_share, r->gpu_ideal_ms,
                   r->gpu_pred_ms, r->gpu_pred_ms > 0 ? r->gpu_ideal_ms / r->gpu_pred_ms : -1.0);
            int lead = 1;
            for (int op = 0; op < LAYER_OPS; op++) {
                const char *name = layer_op_name(&c, op);
                if (!name)
                    continue;
                const double share =
                    r->st.device_ns > 0 && r->st.op_ns[op] >= 0 ? r->st.op_ns[op] / r->st.device_ns
                                                                : -1;
                printf("%s\"%s\": %.4f", lead ? "" : ", ", name, share);
                lead = 0;
            }
            printf("}, \"op_bytes\": {");
            lead = 1;
            for (int op = 0; op < LAYER_OPS; op++) {
                const char *name = layer_op_name(&c, op);
                if (!name)
                    continue;
                printf("%s\"%s\": %.0f", lead ? "" : ", ", name, layer_op_bytes(m, s, op));
                lead = 0;
            }
            printf("}}%s\n", s + 1 < steps ? "," : "");
        }
        printf(" ]}\n");
    } else {
        printf("setup %.1f s (weights on the device), warm-up %.1f s (steps 0 and 1 once), "
               "%zu timed pass%s%s\n",
               make_s, warm_s, repeat, repeat > 1 ? "es" : "",
               repeat > 1 ? " (each step: the pass of its median time)" : "");
        printf("copy bandwidth %.2f GB/s (same run: read + write bytes / time, 256 MiB "
               "buffers)\n",
               gbps);
        printf("weights %.1f MB (all layers, scales and norm weights included)\n", wbytes / 1e6);
        printf("bytes: every weight and the KV cache read so far; roofline = bytes / copy "
               "bandwidth (a decode step's bound; a prefill is bound by arithmetic)\n\n");
        printf("%4s %-7s %6s %7s %10s %10s %10s %10s %9s %7s %8s\n", "step", "kind", "tokens",
               "seq len", "time ms", "device ms", "tok/s", "MB read", "roof ms", "%roof",
               "GFLOP/s");
        for (size_t s = first; s < steps; s++) {
            const step_row *r = &rows[s];
            printf("%4zu %-7s %6zu %7zu %10.2f %10.2f %10.1f %10.1f %9.2f %6.1f%% %8.2f\n", s,
                   s ? "decode" : "prefill", r->tokens, layer_step_seq_len(m, s),
                   r->st.wall_ns / 1e6, r->st.device_ns / 1e6,
                   (double)r->tokens / (r->st.wall_ns / 1e9), r->bytes / 1e6, r->roof_ms,
                   100 * r->frac, r->flops / r->st.wall_ns);
        }
        printf("\nshare of each step's device time per op (%%, all layers; each op's end minus "
               "the previous op's end):\n%4s", "step");
        for (int op = 0; op < LAYER_OPS; op++)
            if (layer_op_name(&c, op))
                printf(" %*s", (int)(strlen(layer_op_name(&c, op)) > 7 ? strlen(layer_op_name(&c, op)) : 7),
                       layer_op_name(&c, op));
        printf(" %9s\n", "attention");
        for (size_t s = first; s < steps; s++) {
            const step_row *r = &rows[s];
            printf("%4zu", s);
            for (int op = 0; op < LAYER_OPS; op++) {
                const char *name = layer_op_name(&c, op);
                if (!name)
                    continue;
                const int w = (int)(strlen(name) > 7 ? strlen(name) : 7);
                if (r->st.device_ns > 0 && r->st.op_ns[op] >= 0)
                    printf(" %*.1f", w, 100 * r->st.op_ns[op] / r->st.device_ns);
                else
                    printf(" %*s", w, "-");
            }
            if (r->attn_share >= 0)
                printf(" %9.1f\n", 100 * r->attn_share);
            else
                printf(" %9s\n", "-");
        }
        printf("(attention: attention_paged, its merge included%s)\n\n",
               layer_op_name(&c, LAYER_OP_CACHE) ? ", and kv_cache_write" : "");
        if (table.n)
            printf("roofline fraction: measured here (bytes / copy bandwidth over the step's time) "
                   "beside the GPU model's prediction for %s, HBM %g GB/s, FP32 %g TFLOP/s, "
                   "f16/bf16 matrix %g TFLOP/s (predicted: each op's least bytes / HBM, or its "
                   "flops / the peak, over the fraction %s predicts for the slowest of the op's "
                   "GPU-default kernels)\n",
                   table.device, table.hbm_gbps, table.fp32_tflops, table.matrix_tflops,
                   table.path);
        else
            printf("roofline fraction: measured here; no GPU prediction table found "
                   "(--gpu-table)\n");
        printf("%4s %-7s %9s %14s %16s %16s %16s\n", "step", "kind", "attn %", "CPU %roof meas",
               "sm_90 ideal ms", "sm_90 pred ms", "sm_90 %roof pred");
        for (size_t s = first; s < steps; s++) {
            const step_row *r = &rows[s];
            char a[32] = "-", i_ms[32] = "-", p_ms[32] = "-", pf[32] = "-";
            if (r->attn_share >= 0)
                snprintf(a, sizeof a, "%.1f", 100 * r->attn_share);
            if (r->gpu_pred_ms > 0) {
                snprintf(i_ms, sizeof i_ms, "%.4g", r->gpu_ideal_ms);
                snprintf(p_ms, sizeof p_ms, "%.4g", r->gpu_pred_ms);
                snprintf(pf, sizeof pf, "%.1f%%", 100 * r->gpu_ideal_ms / r->gpu_pred_ms);
            }
            printf("%4zu %-7s %9s %13.1f%% %16s %16s %16s\n", s, s ? "decode" : "prefill", a,
                   100 * r->frac, i_ms, p_ms, pf);
        }
    }
    free(rows);
out:
    layer_model_destroy(m);
    op_env_close(&env);
    free(launches.v);
    free(table.rows);
    return rc;
}
