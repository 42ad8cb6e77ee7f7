/*
 * Lists every OpenCL program the library can build for a GPU: for each op,
 * dtype, path and shape (the op's test shape and its benchmark shapes), the
 * heuristic default and every point of the tuner's search space, and the
 * heuristic defaults at the decoder layer's shapes (with the layer's rope
 * programs: a float cos/sin cache, the KV cache written), each
 * resolved as dispatch would (the point laid over the heuristic) and passed
 * to the op's deep validation with a program sink set, which records the
 * (source, options) pair instead of building it.
 *
 * Run with OCLF_DEVICE_CLASS=gpu, so the heuristics and limits are a GPU's.
 * Prints "source<TAB>options<TAB>kind" once per distinct program, kind
 * "default" where some shape's heuristic chooses it and "space" where only
 * a search space offers it; tests/gpu_compile.py cross-compiles them. Generated programs (expressions) are written to the
 * folder named by the first argument and listed by their path. Exits 1 when an op's deep validation accepts a
 * parameter set without naming its program: the kernel limits of such a
 * set would never be checked before launch.
 *
 * The ops that use a matrix unit (linear, linear_q from 17 rows, attention's
 * prefill) are listed twice: as for a GPU
 * without one, and as for one that has it (the device fact set as compute
 * capability 8.0 and newer sets it), whose defaults and points then name
 * the native instruction form (-DOCLF_MMA=1), which only NVIDIA's back end
 * compiles; linear and linear_q a third time on a device with the wavefront's
 * instruction (the fact CDNA 2 and 3 set), whose programs (-DOCLF_MFMA=1)
 * only the gfx90a and gfx942 back ends compile.
 */
#include "../lib/internal.h"
#include "../lib/ops/rope.h"
#include "opdesc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sink {
    char **lines;
    size_t n, cap;
    int got; /* programs recorded by the current validation */
    int is_default;          /* the current validation is a heuristic default's */
    unsigned char *defaults; /* per line: some heuristic default named it */
    const char *dir; /* where generated sources are written */
    char **keys;     /* generated programs' keys, by file number */
    size_t nkeys;
} sink;

/* A generated program's text in dir/expr-<n>.cl, one file per key; its
 * path goes to `path`. 0 on failure. */
static int generated_file(sink *s, const char *key, const char *text, char *path, size_t len)
{
    size_t i = 0;
    while (i < s->nkeys && strcmp(s->keys[i], key) != 0)
        i++;
    snprintf(path, len, "%s/expr-%zu.cl", s->dir, i);
    if (i < s->nkeys)
        return 1;
    char **grown = realloc(s->keys, (s->nkeys + 1) * sizeof *grown);
    if (!grown)
        return 0;
    s->keys = grown;
    if (!(s->keys[s->nkeys] = strdup(key)))
        return 0;
    s->nkeys++;
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    const int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static void record(void *user, const char *source, const char *generated, const char *options)
{
    sink *s = user;
    s->got++;
    char line[4608], path[4096];
    if (generated) {
        if (!generated_file(s, source, generated, path, sizeof path)) {
            fprintf(stderr, "gpu_variants: cannot write %s\n", path);
            return;
        }
        source = path;
    }
    snprintf(line, sizeof line, "%s\t%s", source, options);
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->lines[i], line) == 0) {
            s->defaults[i] |= s->is_default;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        char **grown = realloc(s->lines, cap * sizeof *grown);
        if (!grown)
            return;
        s->lines = grown;
        unsigned char *marks = realloc(s->defaults, cap);
        if (!marks)
            return;
        s->defaults = marks;
        s->cap = cap;
    }
    s->lines[s->n] = strdup(line);
    if (s->lines[s->n])
        s->defaults[s->n++] = (unsigned char)s->is_default;
}

/* One parameter set: dispatch's overlay on the heuristic, then the deep
 * validation. Returns 1 when the set was accepted without a program. */
static int visit(oclf_context *ctx, sink *s, oclf_op op, oclf_dtype dtype,
                 const oclf_shape *shape, oclf_path path, const oclf_params *point,
                 int is_default)
{
    s->got = 0;
    s->is_default = is_default;
    oclf_resolved r;
    oclf_status st =
        oclf_dispatch_check(ctx, op, oclf_op_hooks_get(op), dtype, shape, path, point, 1, &r);
    if (st == OCLF_SUCCESS && s->got == 0) {
        fprintf(stderr, "%s %s path %d: deep validation accepted a parameter set without "
                        "building its program\n",
                oclf_op_name(op), oclf_dtype_name(dtype), (int)path);
        return 1;
    }
    return 0;
}

/* The rope programs a decoder layer builds that no op's own shapes reach:
 * 16-bit heads with a float cos/sin cache, and qk_norm_rope writing the KV
 * cache (qk_norm_rope_cache), each at the layer's shape with the heuristic
 * default and every row on a vector boundary. */
static void visit_layer_rope(oclf_context *ctx, sink *s, const oclf_shape *shape)
{
    const oclf_op ops[] = {OCLF_OP_ROTARY_EMBEDDING, OCLF_OP_QK_NORM_ROPE};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int dt = 0; dt < OCLF_DTYPE_COUNT_; dt++)
            for (int cache_write = 0; cache_write <= (ops[o] == OCLF_OP_QK_NORM_ROPE); cache_write++) {
                oclf_resolved r;
                oclf_program *prog = NULL;
                rope_launch l;
                s->is_default = 1;
                /* under the sink no program is built: the call records it
                 * and fails, which is all that is wanted here */
                (void)oclf_rope_prepare(ctx, "layer", ops[o], (oclf_dtype)dt, shape->dim[0],
                                        shape->dim[1], shape->dim[2], shape->dim[3], OCLF_F32,
                                        cache_write, NULL, 0, NULL, &r, &prog, &l);
            }
}

/* A generated op (expressions): its programs depend on the expression, not
 * on the shape, so each preset is compiled and run on its test shape under
 * the sink with the default and every point of its space; oclf_expr_run
 * hands its program to the sink. Returns 1 when a run named no program. */
static int visit_generated(op_env *env, sink *s, const op_desc *od, oclf_params *points, int max)
{
    op_shape osh;
    char err[512];
    if (!op_parse_shape(od, od->test_shape, &osh))
        return 1;
    int bad = 0;
    for (int dt = 0; dt < OCLF_DTYPE_COUNT_; dt++) {
        void *inst = od->create(env, &osh, (oclf_dtype)dt, err, sizeof err);
        if (!inst) {
            fprintf(stderr, "%s %s: %s\n", od->name, oclf_dtype_name((oclf_dtype)dt), err);
            return 1;
        }
        for (int path = OCLF_PATH_FUSED; path <= OCLF_PATH_UNFUSED; path++) {
            const int n = od->space(env, od, &osh, (oclf_dtype)dt, (oclf_path)path, points, max);
            for (int i = -1; i < n; i++) {
                oclf_choice ch;
                memset(&ch, 0, sizeof ch);
                ch.path = (oclf_path)path;
                if (i >= 0)
                    ch.params = points[i];
                s->got = 0;
                s->is_default = i < 0;
                od->run(env, inst, &ch, NULL);
                if (s->got == 0) {
                    fprintf(stderr, "%s %s path %d: a run listed no program: %s\n", od->name,
                            oclf_dtype_name((oclf_dtype)dt), path, oclf_last_error(env->ctx));
                    bad = 1;
                }
            }
        }
        od->destroy(inst);
    }
    return bad;
}

int main(int argc, char **argv)
{
    oclf_context_options opt;
    oclf_context_options_init(&opt);
    opt.no_tuning_db = 1;
    op_env env;
    char err[512];
    if (op_env_open_opts(&env, getenv("OCLF_TEST_PLATFORM"), NULL, &opt, err, sizeof err)) {
        fprintf(stderr, "gpu_variants: %s\n", err);
        return 77;
    }
    sink s = {0};
    s.dir = argc > 1 ? argv[1] : ".";
    oclf_context_set_program_sink(env.ctx, record, &s);
    int bad = 0;
    enum { MAXP = 4096 };
    oclf_params *points = malloc(MAXP * sizeof *points);
    for (int oi = 0, mu = 0; points && (op_table[oi] || mu < 2); oi++) {
        if (!op_table[oi]) {
            /* again, the ops with a matrix unit, on one: the warp's
             * (mu 1), then linear and linear_q on the wavefront's (mu 2) */
            mu++;
            oi = -1;
            env.ctx->info.mma = mu == 1;
            env.ctx->info.mfma = mu == 2;
            continue;
        }
        const op_desc *od = op_table[oi];
        const oclf_op op = oclf_op_from_name(op_lib_op(od));
        if (mu && op != OCLF_OP_LINEAR && op != OCLF_OP_LINEAR_Q && op != OCLF_OP_ATTENTION &&
            op != OCLF_OP_ATTENTION_PAGED)
            continue;
        if (mu == 2 && op != OCLF_OP_LINEAR && op != OCLF_OP_LINEAR_Q)
            continue;
        if (op == OCLF_OP_EXPR) {
            bad |= visit_generated(&env, &s, od, points, MAXP);
            continue;
        }
        /* The test and benchmark shapes with every point of the space,
         * then the decoder layer's shapes (oclfuse-layer's) with their
         * heuristic defaults only: those are the programs an inference
         * step builds. linear_q's listed shapes are decode's (the
         * matrix-vector shape); on a matrix unit it is listed instead at
         * its default structure from 17 rows for each kind of weight (INT8
         * per channel, INT4 in groups of 128, Q8_0, Q4_0), defaults only. */
        char shapes[2048];
        const int q_mu = mu && op == OCLF_OP_LINEAR_Q;
        const int nspaced = q_mu ? 0
                                 : snprintf(shapes, sizeof shapes, "%s,%s", od->test_shape,
                                            od->bench_shapes);
        if (q_mu)
            snprintf(shapes, sizeof shapes, "%s",
                     ";128x4096x4096x1000,;128x4096x4096x2128,;128x4096x4096x3032,"
                     ";128x4096x4096x4032");
        else if (od->layer_shapes)
            snprintf(shapes + nspaced, sizeof shapes - (size_t)nspaced, ",;%s",
                     od->layer_shapes);
        int layer = 0;
        for (char *save = NULL, *tok = strtok_r(shapes, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            if (tok[0] == ';') {
                layer = 1;
                tok++;
            }
            op_shape osh;
            if (!op_parse_shape(od, tok, &osh))
                continue;
            oclf_shape shape = {{0}};
            uint64_t dims[OP_MAX_DIMS] = {0};
            int nd = op_lib_shape(od, &osh, dims, NULL);
            for (int i = 0; i < nd && i < 4; i++)
                shape.dim[i] = dims[i];
            if (layer && op == OCLF_OP_QK_NORM_ROPE)
                visit_layer_rope(env.ctx, &s, &shape);
            for (int dt = 0; dt < OCLF_DTYPE_COUNT_; dt++) {
                for (int path = OCLF_PATH_FUSED; path <= OCLF_PATH_UNFUSED; path++) {
                    if (path == OCLF_PATH_UNFUSED && !od->has_unfused)
                        continue;
                    bad |= visit(env.ctx, &s, op, (oclf_dtype)dt, &shape, (oclf_path)path, NULL,
                                 1);
                    /* l2_topk's heuristic keeps the heaps in global memory
                     * (TOPK 0) where a k's lists do not fit on chip; the
                     * listed shapes' lists all fit, so the fallback is
                     * listed at their default blocks. */
                    oclf_params heaps = {0};
                    oclf_params_set(&heaps, "TOPK", 0);
                    if (op == OCLF_OP_L2_TOPK && path == OCLF_PATH_FUSED)
                        bad |= visit(env.ctx, &s, op, (oclf_dtype)dt, &shape, (oclf_path)path,
                                     &heaps, 1);
                    int n = layer ? 0
                                  : od->space(&env, od, &osh, (oclf_dtype)dt, (oclf_path)path,
                                              points, MAXP);
                    for (int i = 0; i < n; i++)
                        bad |= visit(env.ctx, &s, op, (oclf_dtype)dt, &shape, (oclf_path)path,
                                     &points[i], 0);
                }
            }
        }
    }
    for (size_t i = 0; i < s.n; i++) {
        printf("%s\t%s\n", s.lines[i], s.defaults[i] ? "default" : "space");
        free(s.lines[i]);
    }
    free(s.lines);
    free(s.defaults);
    for (size_t i = 0; i < s.nkeys; i++)
        free(s.keys[i]);
    free(s.keys);
    free(points);
    oclf_context_set_program_sink(env.ctx, NULL, NULL);
    op_env_close(&env);
    return bad || !points ? 1 : 0;
}
