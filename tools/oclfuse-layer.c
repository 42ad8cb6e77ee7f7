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
} step_row;

int main(int argc, char **argv)
{
    layer_config c;
    layer_config_default(&c);
    const char *platform = NULL, *device = NULL;
    int json = 0;
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
    op_env env;
    if (op_env_open(&env, platform, device, err, sizeof err) != 0) {
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
    /* warm-up: the prefill's and a decode step's programs */
    const double t_warm = op_now_s();
    for (size_t s = 0; s < layer_steps(m) && s < 2; s++)
        if (layer_step(m, s, NULL, err, sizeof err)) {
            fprintf(stderr, "oclfuse-layer: warm-up: %s\n", err);
            rc = 1;
            goto out;
        }
    const double warm_s = op_now_s() - t_warm;
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
        for (size_t s = 0; s < steps; s++)
            if (layer_step(m, s, &runs[s * repeat + p], err, sizeof err)) {
                fprintf(stderr, "oclfuse-layer: %s\n", err);
                free(rows), free(runs);
                rc = 1;
                goto out;
            }
    }
    for (size_t s = 0; s < steps; s++) {
        step_row *r = &rows[s];
        layer_step_stats *st = runs + s * repeat;
        qsort(st, repeat, sizeof *st, by_wall);
        r->st = st[repeat / 2];
        r->tokens = layer_step_tokens(m, s);
        r->bytes = wbytes + layer_kv_bytes(m, s);
        r->roof_ms = r->bytes / (gbps * 1e9) * 1e3;
        r->frac = r->roof_ms / (r->st.wall_ns / 1e6);
        r->flops = layer_step_flops(m, s);
    }
    free(runs);

    if (json) {
        printf("{\"layers\": %zu, \"hidden\": %zu, \"q_heads\": %zu, \"kv_heads\": %zu, "
               "\"head_dim\": %zu, \"mlp\": %zu, \"batch\": %zu, \"prefill\": %zu, "
               "\"decode\": %zu, \"block_size\": %zu, \"dtype\": \"%s\", \"weights\": \"%s\", "
               "\"qk_norm\": %d, \"o_residual\": %d, \"path\": \"%s\", \"seed\": %llu, "
               "\"eps\": %g, \"theta\": %g, \"repeat\": %zu,\n",
               c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.mlp, c.batch, c.prefill,
               c.decode, c.block_size, dt, c.int4 ? "int4" : dt, c.qk_norm, c.o_residual,
               c.path == OCLF_PATH_AUTO ? "auto" : c.path == OCLF_PATH_FUSED ? "fused" : "unfused",
               (unsigned long long)c.seed, (double)c.eps, c.theta, repeat);
        printf(" \"device\": \"");
        for (const char *p = oclf_context_fingerprint(env.ctx); *p; p++)
            printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char)*p < 32 ? "?" : "%c", *p);
        printf("\", \"setup_s\": %.3f, \"warmup_s\": %.3f, \"copy_gbps\": %.3f, "
               "\"weight_bytes\": %.0f,\n \"steps\": [\n",
               make_s, warm_s, gbps, wbytes);
        for (size_t s = 0; s < steps; s++) {
            const step_row *r = &rows[s];
            printf("  {\"step\": %zu, \"kind\": \"%s\", \"tokens\": %zu, \"seq_len\": %zu, "
                   "\"time_ms\": %.4f, \"device_ms\": %.4f, \"tokens_per_s\": %.3f, "
                   "\"bytes\": %.0f, \"kv_bytes\": %.0f, \"roofline_ms\": %.4f, "
                   "\"roofline_fraction\": %.4f, \"gflops\": %.3f, \"op_share\": {",
                   s, s ? "decode" : "prefill", r->tokens, layer_step_seq_len(m, s),
                   r->st.wall_ns / 1e6, r->st.device_ns / 1e6,
                   (double)r->tokens / (r->st.wall_ns / 1e9), r->bytes, layer_kv_bytes(m, s),
                   r->roof_ms, r->frac, r->flops / r->st.wall_ns);
            int first = 1;
            for (int op = 0; op < LAYER_OPS; op++) {
                const char *name = layer_op_name(&c, op);
                if (!name)
                    continue;
                const double share =
                    r->st.device_ns > 0 && r->st.op_ns[op] >= 0 ? r->st.op_ns[op] / r->st.device_ns
                                                                : -1;
                printf("%s\"%s\": %.4f", first ? "" : ", ", name, share);
                first = 0;
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
        for (size_t s = 0; s < steps; s++) {
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
        printf("\n");
        for (size_t s = 0; s < steps; s++) {
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
            printf("\n");
        }
    }
    free(rows);
out:
    layer_model_destroy(m);
    op_env_close(&env);
    return rc;
}
