/*
 * Elementwise expressions (generated kernels): oclf_expr_compile,
 * oclf_expr_run, oclf_expr_release.
 *
 *   fused: expr_fused            unfused: expr_node<k> per operation (fp32
 *                                temporaries), expr_leaves for outputs that
 *                                are inputs or numbers, expr_pack for bits
 *                                outputs (a work-item per 32-bit word)
 *
 * With a bit matrix among the declarations, expr_fused's work-items own
 * whole words (32 columns of ROWS rows) instead of VEC columns.
 *
 * Parameters: VEC (elements per work-item: 1, 2, 4, 8, 16), WGS (work-group
 * size, a power of two up to the device limit), ROWS (fused: rows per
 * work-item, row-vector inputs loaded once for them; a kernel argument).
 * One program per (canonical form, VEC) holds both paths.
 */
#include "../internal.h"
#include "../expr/expr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oclf_expr {
    oclf_context *ctx;
    unsigned n_inputs, n_outputs;
    oclf_expr_decl inputs[OCLF_EXPR_MAX_INPUTS], outputs[OCLF_EXPR_MAX_OUTPUTS];
    oclf_xgraph graph;
    char *key;    /* "expr:" + canonical form */
    char *source; /* generated OpenCL */
    uint64_t form; /* tuning key: oclf_expr_form_id */
    int vec, wgs; /* defaults for this device */
    int words;    /* a bit matrix is declared: fused work-items own 32-bit words */
    int packs;    /* a bits output: the unfused path ends with expr_pack */
};

static const char *const OP_COMPILE = "oclf_expr_compile", *const OP_RUN = "oclf_expr_run";

static void expr_free(oclf_expr *e)
{
    if (!e)
        return;
    free(e->key);
    free(e->source);
    free(e);
}

void oclf_expr_release(oclf_expr *expr) { expr_free(expr); }

const char *oclf_expr_canonical(const oclf_expr *expr) { return expr ? expr->key + 5 : ""; }

/* Defaults: a CPU work-item takes 16 neighbours (a 64-byte vector of
 * floats, fewer index divisions per element; with 4 a cheap chain ran at
 * half the copy bandwidth); on a GPU neighbours go to neighbouring
 * work-items, so each load instruction is coalesced. */
static void expr_defaults(const oclf_context *ctx, int *vec, int *wgs)
{
    if (ctx->info.type & CL_DEVICE_TYPE_CPU) {
        *vec = 16;
        *wgs = 64;
    } else {
        *vec = 1;
        *wgs = 256;
    }
    while ((size_t)*wgs > ctx->info.max_wgs && *wgs > 1)
        *wgs /= 2;
}

/* VEC is compiled in (one program per (form, VEC)); WGS and ROWS are only
 * the launch's, so tuning them compiles nothing. */
static const oclf_param_spec expr_params[] = {
    {"VEC", 1, 16, 1, OCLF_PARAM_DEFINE},
    {"WGS", 1, OCLF_PARAM_MAX_WGS, 1, OCLF_PARAM_ARG},
    {"ROWS", 1, 65536, 0, OCLF_PARAM_ARG},
};
enum { P_VEC, P_WGS, P_ROWS, P_COUNT };
_Static_assert(OCLF_NARGS(expr_params) == P_COUNT, "one spec per parameter");

typedef struct expr_cfg {
    int vec, wgs, rows;
    char defines[OCLF_DEFINES_MAX];
} expr_cfg;
OCLF_CFG_FITS(expr_cfg);

static void oclf_expr_heuristic(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, oclf_params *out)
{
    (void)dtype, (void)path;
    int vec, wgs;
    expr_defaults(ctx, &vec, &wgs);
    oclf_params_set(out, "VEC", vec);
    oclf_params_set(out, "WGS", wgs);
    /* A CPU work-item takes 4 rows where there are enough of them: its
     * index arithmetic (a 64-bit division) is paid once per 4 vectors, 3-5%
     * on 1024x1024 for the chain, softplus and bias + GELU + dropout. */
    const int cpu = (ctx->info.type & CL_DEVICE_TYPE_CPU) != 0;
    oclf_params_set(out, "ROWS", cpu && shape->dim[0] >= 64 ? 4 : 1);
}

static oclf_status expr_config(const oclf_context *ctx, const oclf_params *p, expr_cfg *cfg)
{
    int64_t v[P_COUNT];
    oclf_status st = oclf_params_read(ctx, expr_params, P_COUNT, p, v);
    if (st != OCLF_SUCCESS)
        return st;
    cfg->vec = (int)v[P_VEC];
    cfg->wgs = (int)v[P_WGS];
    cfg->rows = (int)v[P_ROWS];
    oclf_param_defines(cfg->defines, sizeof cfg->defines, expr_params, P_COUNT, v);
    return OCLF_SUCCESS;
}

/* The parameters alone: the program depends on the expression, which the
 * shape names only by its hash, so oclf_expr_run checks the built kernel's
 * work-group limit itself. */
static oclf_status oclf_expr_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                               const oclf_shape *shape, const oclf_resolved *r, int deep,
                               oclf_op_cfg *out)
{
    (void)op, (void)dtype, (void)shape, (void)deep;
    expr_cfg cfg;
    oclf_status st = expr_config(ctx, &r->params, &cfg);
    if (st == OCLF_SUCCESS && out)
        memcpy(out, &cfg, sizeof cfg);
    return st;
}

const oclf_op_hooks oclf_expr_hooks = {oclf_expr_heuristic, oclf_expr_validate};

/* The tuning key of a parsed expression: its canonical form with every
 * dtype taken as f32 (a record's dtype field carries the first output's),
 * hashed to 52 bits so that every JSON reader holds it exactly. */
static int form_of(const oclf_xgraph *g, const oclf_expr_decl *inputs, unsigned n_inputs,
                   const oclf_expr_decl *outputs, unsigned n_outputs, uint64_t *form)
{
    oclf_expr_decl in[OCLF_EXPR_MAX_INPUTS], out[OCLF_EXPR_MAX_OUTPUTS];
    for (unsigned i = 0; i < n_inputs; i++)
        in[i] = (oclf_expr_decl){NULL, inputs[i].kind, OCLF_F32};
    for (unsigned j = 0; j < n_outputs; j++)
        out[j] = (oclf_expr_decl){NULL, outputs[j].kind, OCLF_F32};
    oclf_xbuf b = {0};
    oclf_expr_canonical_form(g, in, n_inputs, out, &b);
    const int ok = !b.failed && b.s;
    if (ok) {
        oclf_hash h;
        oclf_hash_init(&h);
        oclf_hash_str(&h, b.s);
        *form = h.a & ((UINT64_C(1) << 52) - 1);
    }
    free(b.s);
    return ok;
}

oclf_status oclf_expr_form_id(const char *source, const oclf_expr_decl *inputs, unsigned n_inputs,
                              const oclf_expr_decl *outputs, unsigned n_outputs, uint64_t *form)
{
    oclf_enter(__func__);
    static const char *const OP = "oclf_expr_form_id";
    if (!source || !form)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: source or form is NULL", OP);
    oclf_xgraph *g = malloc(sizeof *g);
    if (!g)
        return oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", OP);
    char err[256];
    oclf_status st = OCLF_SUCCESS;
    if (oclf_expr_parse(source, strnlen(source, OCLF_EXPR_MAX_SOURCE + 1), inputs, n_inputs,
                        outputs, n_outputs, g, err, sizeof err))
        st = oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: %s", OP, err);
    else if (!form_of(g, inputs, n_inputs, outputs, n_outputs, form))
        st = oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", OP);
    free(g);
    return st;
}

/* One program per (expression, VEC, aligned): the work-group size is only
 * the launch's, so tuning it compiles nothing. OCLF_LANE_MUL64 picks the
 * vector Philox in 64-bit lanes (the device fact lane_mul64); OCLF_ALIGNED
 * the naturally aligned vector accesses (expr_aligned). */
static oclf_status expr_program(oclf_context *ctx, const oclf_expr *e, int vec, int aligned,
                                oclf_program **prog)
{
    char opts[64];
    snprintf(opts, sizeof opts, "-DOCLF_VEC=%d%s%s", vec,
             ctx->info.lane_mul64 ? " -DOCLF_LANE_MUL64=1" : "",
             aligned ? " -DOCLF_ALIGNED=1" : "");
    return oclf_program_get_generated(ctx, e->key, e->source, opts, prog);
}

/* The fused kernel's vectors start at columns that are multiples of vec:
 * they are naturally aligned where every matrix operand's offset and row
 * stride, and every row-vector input's offset, are multiples of vec too
 * (column vectors, scalars and bit matrices are read otherwise). */
static int expr_aligned(const oclf_expr *e, int vec, const oclf_operand *in,
                        const oclf_operand *out)
{
    if (vec <= 1)
        return 0;
    for (unsigned i = 0; i < e->n_inputs; i++) {
        const oclf_expr_kind k = e->inputs[i].kind;
        if ((k == OCLF_EXPR_MATRIX || k == OCLF_EXPR_ROW) &&
            !oclf_rows_aligned(vec, &in[i], 1))
            return 0;
    }
    for (unsigned j = 0; j < e->n_outputs; j++)
        if (e->outputs[j].kind == OCLF_EXPR_MATRIX && !oclf_rows_aligned(vec, &out[j], 1))
            return 0;
    return 1;
}

oclf_status oclf_expr_compile(oclf_context *ctx, const char *source, const oclf_expr_decl *inputs,
                              unsigned n_inputs, const oclf_expr_decl *outputs, unsigned n_outputs,
                              oclf_expr **out)
{
    oclf_enter(__func__);
    if (!ctx)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: ctx is NULL", OP_COMPILE);
    if (!out)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: out is NULL", OP_COMPILE);
    *out = NULL;
    if (!source)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: source is NULL", OP_COMPILE);
    oclf_expr *e = calloc(1, sizeof *e);
    if (!e)
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", OP_COMPILE);
    char err[256];
    size_t len = strnlen(source, OCLF_EXPR_MAX_SOURCE + 1);
    if (oclf_expr_parse(source, len, inputs, n_inputs, outputs, n_outputs, &e->graph, err,
                        sizeof err)) {
        expr_free(e);
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s", OP_COMPILE, err);
    }
    e->ctx = ctx;
    e->n_inputs = n_inputs;
    e->n_outputs = n_outputs;
    if (n_inputs)
        memcpy(e->inputs, inputs, n_inputs * sizeof *inputs);
    memcpy(e->outputs, outputs, n_outputs * sizeof *outputs);
    for (unsigned i = 0; i < n_inputs + n_outputs; i++) {
        oclf_expr_decl *d = i < n_inputs ? &e->inputs[i] : &e->outputs[i - n_inputs];
        d->name = NULL;
        /* The ignored dtype of scalars and bit matrices is kept as f32, the
         * dtype a tuning record of a bits first output carries. */
        if (d->kind == OCLF_EXPR_SCALAR || d->kind == OCLF_EXPR_BITS)
            d->dtype = OCLF_F32;
        if (i >= n_inputs && d->kind == OCLF_EXPR_BITS)
            e->packs = 1;
    }
    e->words = oclf_expr_has_bits(e->inputs, n_inputs, e->outputs, n_outputs);

    oclf_xbuf key = {0}, src = {0};
    oclf_xbuf_printf(&key, "expr:");
    oclf_expr_canonical_form(&e->graph, e->inputs, n_inputs, e->outputs, &key);
    oclf_expr_codegen(&e->graph, e->inputs, n_inputs, e->outputs, &src);
    e->key = key.s;
    e->source = src.s;
    if (key.failed || src.failed || !e->key || !e->source ||
        !form_of(&e->graph, e->inputs, n_inputs, e->outputs, n_outputs, &e->form)) {
        expr_free(e);
        return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", OP_COMPILE);
    }
    expr_defaults(ctx, &e->vec, &e->wgs);
    /* Build now, so the first run launches at once (a program sink only
     * lists it). */
    oclf_program *prog;
    /* the cross-compile suite's list names the aligned build too (a sink
     * lists programs and answers that none was built) */
    if (ctx->program_sink && e->vec > 1)
        (void)expr_program(ctx, e, e->vec, 1, &prog);
    oclf_status st = expr_program(ctx, e, e->vec, 0, &prog);
    if (st != OCLF_SUCCESS && !ctx->program_sink) {
        expr_free(e);
        return st;
    }
    *out = e;
    return OCLF_SUCCESS;
}

/* Path and parameters of a run: the caller's, laid over the tuning record
 * for this expression (its form) and shape, else this device's defaults. */
static oclf_status run_config(oclf_context *ctx, const oclf_expr *e, size_t rows, size_t cols,
                              const oclf_choice *choice, oclf_path *path, expr_cfg *cfg,
                              int *wgs_default)
{
    const oclf_shape shape = {{rows, cols, e->form, 0}};
    oclf_resolved r;
    oclf_status st;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_EXPR, &oclf_expr_hooks, e->outputs[0].dtype,
                                     &shape, choice, &r)))
        return st;
    *path = r.path;
    *wgs_default = r.wgs_default;
    if (r.has_cfg) {
        memcpy(cfg, &r.cfg, sizeof *cfg);
        return OCLF_SUCCESS;
    }
    return expr_config(ctx, &r.params, cfg);
}

/* 32-bit words in a row of a bit matrix. */
static size_t bit_words(size_t cols) { return cols / 32 + (cols % 32 != 0); }

/* Elements of a row of a matrix declaration, and their size. */
static size_t row_elems(const oclf_expr_decl *d, size_t cols, size_t *elem)
{
    const int bits = d->kind == OCLF_EXPR_BITS;
    *elem = bits ? 4 : oclf_dtype_size(d->dtype);
    return bits ? bit_words(cols) : cols;
}

/* An input's checked operand; vectors are one row of cols or rows. */
static oclf_status check_input(oclf_context *ctx, const oclf_expr_decl *d, unsigned i,
                               const oclf_expr_arg *a, size_t rows, size_t cols,
                               oclf_operand *op)
{
    char what[64];
    snprintf(what, sizeof what, "%s: input %u", OP_RUN, i);
    const size_t el = oclf_dtype_size(d->dtype);
    switch (d->kind) {
    case OCLF_EXPR_MATRIX: return oclf_check_2d(ctx, what, a->buf, rows, cols, el, op);
    case OCLF_EXPR_BITS: return oclf_check_2d(ctx, what, a->buf, rows, bit_words(cols), 4, op);
    case OCLF_EXPR_ROW: {
        oclf_buf b = {a->buf.mem, a->buf.offset, 0};
        return oclf_check_2d(ctx, what, b, 1, cols, el, op);
    }
    case OCLF_EXPR_COL: {
        oclf_buf b = {a->buf.mem, a->buf.offset, 0};
        return oclf_check_2d(ctx, what, b, rows ? 1 : 0, rows, el, op);
    }
    default: memset(op, 0, sizeof *op); return OCLF_SUCCESS;
    }
}

/* 1 when, on the unfused path, a kernel reads `input` after a kernel has
 * written one of the outputs in `outs` (in place on it). Node kernels run
 * in node order, each reading its operands before writing; then the leaves
 * kernel and the packing kernel, each loading everything before it
 * stores. */
static int read_after_write(const oclf_xgraph *g, const oclf_expr_decl *outputs, int input,
                            unsigned outs)
{
    const int leaves = g->n_nodes, pack = g->n_nodes + 1;
    int last_read = -1;
    for (int k = 0; k < g->n_nodes; k++) {
        const oclf_xnode *n = &g->node[k];
        for (int a = 0; n->op > XOP_CONST && a < oclf_xop_arity(n->op); a++) {
            const oclf_xnode *o = &g->node[n->a[a]];
            if (o->op == XOP_INPUT && o->input == input)
                last_read = k;
        }
    }
    for (int j = 0; j < g->n_outputs; j++) {
        const oclf_xnode *o = &g->node[g->output[j]];
        const int reader = outputs[j].kind == OCLF_EXPR_BITS ? pack : leaves;
        if (o->op == XOP_INPUT && o->input == input && reader > last_read)
            last_read = reader;
    }
    for (int j = 0; j < g->n_outputs; j++) {
        const int w = outputs[j].kind == OCLF_EXPR_BITS          ? pack
                      : g->node[g->output[j]].op > XOP_CONST ? g->output[j]
                                                              : leaves;
        if ((outs >> j & 1u) && w < last_read)
            return 1;
    }
    return 0;
}

/* Copies the rows of *op (after the caller's wait list) into a new buffer
 * and points *op at the copy: same stride, offset 0. */
static oclf_status copy_aside(oclf_context *ctx, cl_command_queue queue, oclf_operand *op,
                              size_t rows, size_t cols, size_t elem, cl_uint num_events,
                              const cl_event *wait_list, cl_mem *copy, cl_event *done)
{
    const size_t bytes = ((rows - 1) * op->stride + cols) * elem;
    oclf_status st = oclf_temp_buffer(ctx, bytes, copy);
    if (st)
        return st;
    cl_int err = clEnqueueCopyBuffer(queue, op->mem, *copy, op->offset * elem, 0, bytes, num_events,
                                     wait_list, done);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(*copy);
        *copy = NULL;
        return oclf_fail_cl(ctx, err, "clEnqueueCopyBuffer");
    }
    op->mem = *copy;
    op->offset = 0;
    return OCLF_SUCCESS;
}

static void release_copies(cl_mem *copy, cl_event *done, unsigned n_done)
{
    for (unsigned i = 0; i < OCLF_EXPR_MAX_INPUTS; i++)
        if (copy[i])
            clReleaseMemObject(copy[i]); /* freed once the launches finish */
    for (unsigned i = 0; i < n_done; i++)
        clReleaseEvent(done[i]);
}

oclf_status oclf_expr_run(const oclf_expr *e, cl_command_queue queue, size_t rows, size_t cols,
                          const oclf_expr_arg *inputs, const oclf_buf *outputs, uint64_t seed,
                          uint64_t offset, const oclf_choice *choice, cl_uint num_events,
                          const cl_event *wait_list, cl_event *event)
{
    oclf_enter(__func__);
    if (!e)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: expr is NULL", OP_RUN);
    oclf_context *ctx = e->ctx;
    oclf_status st;
    if ((st = oclf_check_call(ctx, OP_RUN, queue, num_events, wait_list, OCLF_F32, event)))
        return st;
    if (e->n_inputs && !inputs)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: inputs is NULL", OP_RUN);
    if (!outputs)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: outputs is NULL", OP_RUN);
    if (cols == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: cols is 0", OP_RUN);
    oclf_path path;
    expr_cfg cfg;
    int wgs_default = 0;
    if ((st = run_config(ctx, e, rows, cols, choice, &path, &cfg, &wgs_default)))
        return st;
    const int vec = cfg.vec, rpb = cfg.rows;
    size_t wgs = (size_t)cfg.wgs;

    oclf_operand in[OCLF_EXPR_MAX_INPUTS], out[OCLF_EXPR_MAX_OUTPUTS];
    unsigned in_place[OCLF_EXPR_MAX_INPUTS] = {0}; /* outputs in place on input i */
    for (unsigned i = 0; i < e->n_inputs; i++)
        if ((st = check_input(ctx, &e->inputs[i], i, &inputs[i], rows, cols, &in[i])))
            return st;
    for (unsigned j = 0; j < e->n_outputs; j++) {
        char what[64];
        snprintf(what, sizeof what, "%s: output %u", OP_RUN, j);
        size_t oel;
        const size_t ocols = row_elems(&e->outputs[j], cols, &oel);
        if ((st = oclf_check_2d(ctx, what, outputs[j], rows, ocols, oel, &out[j])))
            return st;
        for (unsigned k = 0; k < j; k++)
            if (oclf_overlap(&out[j], &out[k]))
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: output %u overlaps output %u",
                                 OP_RUN, j, k);
        /* In place is safe only element for element (word for word for
         * bit matrices): the same elements of a matrix input of the same
         * dtype, or the same words of a bits input, read before written by
         * the one work-item that owns them (the unfused path copies the
         * input aside when a later kernel still reads it). */
        for (unsigned i = 0; i < e->n_inputs; i++) {
            if (e->inputs[i].kind == OCLF_EXPR_SCALAR || !oclf_overlap(&out[j], &in[i]))
                continue;
            const oclf_expr_decl *di = &e->inputs[i], *dj = &e->outputs[j];
            const int same_kind = di->kind == dj->kind && di->dtype == dj->dtype;
            if (same_kind && (di->kind == OCLF_EXPR_MATRIX || di->kind == OCLF_EXPR_BITS) &&
                oclf_same_range(&out[j], &in[i])) {
                in_place[i] |= 1u << j;
                continue;
            }
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: output %u overlaps input %u",
                             OP_RUN, j, i);
        }
    }
    /* dropout p from a scalar is checked per call. */
    for (int k = 0; k < e->graph.n_nodes; k++) {
        const oclf_xnode *n = &e->graph.node[k];
        if (n->op != XOP_DROPOUT)
            continue;
        const oclf_xnode *pn = &e->graph.node[n->a[1]];
        if (pn->op == XOP_INPUT) {
            float p = inputs[pn->input].scalar;
            if (!(p >= 0.0f && p < 1.0f))
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                                 "%s: input %d (dropout p) = %g is outside [0, 1)", OP_RUN,
                                 pn->input, (double)p);
        }
    }
    /* Work-items a row: VEC columns each, or a 32-bit word each with bit
     * matrices (the fused kernel; the unfused node kernels keep VEC). */
    const size_t nch = (cols + (size_t)vec - 1) / (size_t)vec, nw = bit_words(cols);
    if (rows && (rows > SIZE_MAX / nch / 2 || rows > UINT64_MAX / cols / 2))
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: %zu x %zu exceeds the launch range", OP_RUN,
                         rows, cols);
    if (path == OCLF_PATH_UNFUSED && rows > SIZE_MAX / cols / sizeof(float))
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: temporaries of %zu x %zu floats", OP_RUN,
                         rows, cols);
    oclf_program *prog;
    static const char *const fused_kernel[] = {"expr_fused"};
    /* WGS is only the launch's here, so a default above the built kernel's
     * limit is lowered to fit with no rebuild; a named one must fit. */
    if ((st = expr_program(ctx, e, vec, path == OCLF_PATH_FUSED && expr_aligned(e, vec, in, out),
                           &prog)) ||
        (st = oclf_fit_kernel_wgs(ctx, prog, fused_kernel, 1, &wgs, wgs_default)))
        return st;
    if (rows == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    /* Unfused, an input that a later kernel reads after an output in place
     * on it was written is read from a copy of its rows instead. */
    cl_mem copy[OCLF_EXPR_MAX_INPUTS] = {0};
    cl_event copied[OCLF_EXPR_MAX_INPUTS];
    unsigned n_copied = 0;
    for (unsigned i = 0; i < e->n_inputs && path == OCLF_PATH_UNFUSED; i++) {
        if (!in_place[i] || !read_after_write(&e->graph, e->outputs, (int)i, in_place[i]))
            continue;
        size_t iel;
        const size_t icols = row_elems(&e->inputs[i], cols, &iel);
        if ((st = copy_aside(ctx, queue, &in[i], rows, icols, iel, num_events, wait_list,
                             &copy[i], &copied[n_copied])))
            break;
        n_copied++;
    }
    if (st) {
        release_copies(copy, copied, n_copied);
        return st;
    }

    /* Arguments in the generated order: inputs, outputs, shape, seed,
     * offset, then (unfused) a temporary per operation. */
    oclf_arg args[3 * OCLF_EXPR_MAX_INPUTS + 3 * OCLF_EXPR_MAX_OUTPUTS + 4 + OCLF_EXPR_MAX_NODES];
    cl_ulong ioff[OCLF_EXPR_MAX_INPUTS], istr[OCLF_EXPR_MAX_INPUTS];
    cl_ulong ooff[OCLF_EXPR_MAX_OUTPUTS], ostr[OCLF_EXPR_MAX_OUTPUTS];
    cl_mem temps[OCLF_EXPR_MAX_NODES] = {0};
    unsigned na = 0;
    for (unsigned i = 0; i < e->n_inputs; i++) {
        const oclf_expr_decl *d = &e->inputs[i];
        if (d->kind == OCLF_EXPR_SCALAR) {
            args[na++] = OCLF_ARG(inputs[i].scalar);
            continue;
        }
        ioff[i] = in[i].offset;
        istr[i] = in[i].stride;
        args[na++] = OCLF_ARG(in[i].mem);
        args[na++] = OCLF_ARG(ioff[i]);
        if (d->kind == OCLF_EXPR_MATRIX || d->kind == OCLF_EXPR_BITS)
            args[na++] = OCLF_ARG(istr[i]);
    }
    for (unsigned j = 0; j < e->n_outputs; j++) {
        ooff[j] = out[j].offset;
        ostr[j] = out[j].stride;
        args[na++] = OCLF_ARG(out[j].mem);
        args[na++] = OCLF_ARG(ooff[j]);
        args[na++] = OCLF_ARG(ostr[j]);
    }
    cl_ulong nrows = rows, ncols = cols, s = seed, o = offset;
    args[na++] = OCLF_ARG(nrows);
    args[na++] = OCLF_ARG(ncols);
    args[na++] = OCLF_ARG(s);
    args[na++] = OCLF_ARG(o);
    const size_t local = wgs, global = oclf_round_up(rows * nch, local);

    if (path == OCLF_PATH_FUSED) {
        const cl_ulong r = (cl_ulong)rpb;
        const size_t blocks = (rows + (size_t)rpb - 1) / (size_t)rpb;
        args[na++] = OCLF_ARG(r);
        return oclf_enqueue(ctx, queue, prog, "expr_fused", args, na,
                            oclf_round_up(blocks * (e->words ? nw : nch), local), local,
                            num_events, wait_list, event);
    }

    const oclf_xgraph *g = &e->graph;
    for (int k = 0; k < g->n_nodes && st == OCLF_SUCCESS; k++) {
        if (g->node[k].op <= XOP_CONST)
            continue;
        if (g->node[k].uses || oclf_expr_bits_output_node(g, e->outputs, k))
            st = oclf_temp_buffer(ctx, rows * cols * sizeof(float), &temps[k]);
        args[na++] = OCLF_ARG(temps[k]);
    }
    oclf_chain ch;
    if (n_copied)
        oclf_chain_begin(&ch, ctx, queue, n_copied, copied);
    else
        oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    int leaves = 0;
    for (int k = 0; k < g->n_nodes && st == OCLF_SUCCESS; k++) {
        if (g->node[k].op <= XOP_CONST)
            continue;
        char name[32];
        snprintf(name, sizeof name, "expr_node%d", k);
        st = oclf_chain_launch(&ch, prog, name, args, na, global, local);
    }
    for (int j = 0; j < g->n_outputs; j++)
        leaves |= g->node[g->output[j]].op <= XOP_CONST && e->outputs[j].kind != OCLF_EXPR_BITS;
    if (st == OCLF_SUCCESS && leaves)
        st = oclf_chain_launch(&ch, prog, "expr_leaves", args, na, global, local);
    if (st == OCLF_SUCCESS && e->packs)
        st = oclf_chain_launch(&ch, prog, "expr_pack", args, na, oclf_round_up(rows * nw, local),
                               local);
    for (int k = 0; k < g->n_nodes; k++)
        if (temps[k])
            clReleaseMemObject(temps[k]); /* freed once the launches finish */
    release_copies(copy, copied, n_copied);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    return st;
}
