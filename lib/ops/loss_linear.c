/*
 * Linear + cross-entropy (family loss_linear): the loss of x W^T and its
 * gradients without holding the [tokens, vocab] logits.
 *
 *   fused (per chunk of CHUNK tokens, after one check of every target):
 *     oclf_linear  x_c W^T            -> logits_c   (temporary, the dtype)
 *     ce_fused     logits_c           -> loss rows, dZ_c over logits_c
 *     oclf_linear  dZ_c W             -> grad_x rows        (W as [K, N])
 *     lce_transpose dZ_c              -> dZ_c^T (f32)
 *     [lce_widen   x_c                -> f32, for f16/bf16]
 *     oclf_linear  dZ_c^T x_c (+ grad_w from earlier chunks) -> grad_w
 *   then ce_reduce for SUM and MEAN.
 *   unfused: the same with one chunk of every token and cross-entropy's
 *   unfused composition.
 *
 * The products are oclf_linear's fused GEMM kernels, so their own tuning
 * records serve them; this family's only parameter is CHUNK. The mean's
 * divisor is the count of rows not ignored over every token, which the
 * targets check computes before the first chunk, so each chunk's gradient
 * carries its final scale and the chunks' grad_w contributions are summed
 * in fp32 by the GEMM's residual epilogue (one rounding per chunk).
 */
#include "loss.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static const oclf_param_spec lce_params[] = {{"CHUNK", 1, INT_MAX, 0, OCLF_PARAM_ARG}};
enum { P_CHUNK, NPARAMS };

typedef struct lce_cfg {
    int64_t chunk;
} lce_cfg;
OCLF_CFG_FITS(lce_cfg);

/* The chunk whose logits are about the size of x: tokens / ceil(V / H),
 * rounded up to a power of two, at least 256; all the tokens where that
 * would make fewer than four chunks. Fewer rows starve the products: at
 * 256 x 2048 x 32000 in bf16 on a 2-core CPU, chunks of 64 took 2.03 s a
 * call, one chunk of 256 1.53 s, the unfused path 1.71 s. And each chunk
 * reads W twice and grad_w once more, which two or three chunks pay for
 * a saving of half or two thirds of the logits: at 512 x 512 x 2048, two
 * chunks of 256 ran 6-9% behind the unfused path in f16 and bf16. */
#define LCE_MIN_CHUNK 256
#define LCE_MIN_CHUNKS 4
static uint64_t lce_default_chunk(uint64_t tokens, uint64_t hidden, uint64_t vocab)
{
    if (!tokens)
        return 1;
    const uint64_t ratio = hidden ? (vocab + hidden - 1) / hidden : 1;
    const uint64_t want = ratio ? (tokens + ratio - 1) / ratio : tokens;
    uint64_t c = LCE_MIN_CHUNK;
    while (c < want && c < (uint64_t)INT_MAX / 2 + 1)
        c *= 2;
    return (tokens + c - 1) / c >= LCE_MIN_CHUNKS ? c : tokens;
}

static void oclf_loss_linear_heuristic(const oclf_context *ctx, oclf_dtype dtype,
                                       const oclf_shape *shape, oclf_path path,
                                       oclf_params *out)
{
    (void)ctx, (void)dtype;
    const uint64_t c = path == OCLF_PATH_UNFUSED
                           ? (shape->dim[0] ? shape->dim[0] : 1)
                           : lce_default_chunk(shape->dim[0], shape->dim[1], shape->dim[2]);
    oclf_params_set(out, "CHUNK", (int64_t)(c < INT_MAX ? c : INT_MAX));
}

/* The programs a call of this shape and chunk builds: cross-entropy's for
 * the chunk's rows, and the three products' (each resolved as the call
 * resolves it), so that their limits are checked where dispatch asks. */
static oclf_status lce_check_programs(oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                                      oclf_path path, uint64_t chunk)
{
    const uint64_t t = shape->dim[0], h = shape->dim[1], v = shape->dim[2];
    const uint64_t c = path == OCLF_PATH_UNFUSED || chunk > t ? t : chunk;
    if (c == 0 || h == 0 || v == 0)
        return OCLF_SUCCESS;
    oclf_ce_kernels k;
    const oclf_choice ce = {.path = path};
    const oclf_operand chunk_logits = {.stride = v}; /* as the call's temporary */
    oclf_status st =
        oclf_ce_kernels_get(ctx, "linear_cross_entropy", dtype, c, v, &chunk_logits, &ce, &k);
    const struct {
        oclf_dtype dt;
        oclf_shape s;
    } gemms[] = {
        {dtype, {{c, v, h, OCLF_WEIGHT_NK}}},    /* logits */
        {dtype, {{c, h, v, OCLF_WEIGHT_KN}}},    /* grad_x */
        {OCLF_F32, {{v, h, c, OCLF_WEIGHT_KN}}}, /* grad_w */
    };
    for (size_t i = 0; st == OCLF_SUCCESS && i < sizeof gemms / sizeof gemms[0]; i++) {
        oclf_resolved r;
        st = oclf_dispatch_check(ctx, OCLF_OP_LINEAR, &oclf_linear_hooks, gemms[i].dt,
                                 &gemms[i].s, OCLF_PATH_FUSED, NULL, 1, &r);
    }
    return st;
}

static oclf_status oclf_loss_linear_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                             const oclf_shape *shape, const oclf_resolved *r,
                                             int deep, oclf_op_cfg *out)
{
    (void)op;
    int64_t v[NPARAMS];
    oclf_status st = oclf_params_read(ctx, lce_params, NPARAMS, &r->params, v);
    if (st == OCLF_SUCCESS && deep)
        st = lce_check_programs(ctx, dtype, shape, r->path, (uint64_t)v[P_CHUNK]);
    if (st == OCLF_SUCCESS && out) {
        lce_cfg cfg = {v[P_CHUNK]};
        memcpy(out, &cfg, sizeof cfg);
    }
    return st;
}

const oclf_op_hooks oclf_loss_linear_hooks = {oclf_loss_linear_heuristic,
                                              oclf_loss_linear_validate};

typedef struct lce_operands {
    oclf_operand x, w, tg, loss, lse, gup, gx, gw;
} lce_operands;

static oclf_status check_args(oclf_context *ctx, oclf_dtype dtype, size_t tokens, size_t hidden,
                              size_t vocab, oclf_buf x, oclf_buf w, oclf_buf targets,
                              oclf_buf loss, const oclf_buf *grad_x, const oclf_buf *grad_w,
                              const oclf_cross_entropy_options *o, lce_operands *ops)
{
    const char *op = "linear_cross_entropy";
    oclf_status st;
    if (o->compute_grad)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: options.compute_grad must be 0: ask for the gradients with grad_x "
                         "and grad_w",
                         op);
    if (hidden == 0 || vocab == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: hidden (%zu) and vocab (%zu) must be "
                         "above 0", op, hidden, vocab);
    /* The GEMMs index rows and columns with 32-bit integers. */
    if (tokens > INT_MAX || hidden > INT_MAX || vocab > INT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: tokens (%zu), hidden (%zu) and vocab (%zu) must be below 2^31", op,
                         tokens, hidden, vocab);
    const size_t es = oclf_dtype_size(dtype);
    const size_t lrows = o->reduction == OCLF_REDUCTION_NONE ? tokens : 1;
    const int grads = grad_x || grad_w;
    memset(ops, 0, sizeof *ops);
    if ((st = oclf_check_2d(ctx, "linear_cross_entropy: x", x, tokens, hidden, es, &ops->x)) ||
        (st = oclf_check_2d(ctx, "linear_cross_entropy: w", w, vocab, hidden, es, &ops->w)) ||
        (st = oclf_check_vector(ctx, "linear_cross_entropy: targets", targets, tokens, 8,
                                &ops->tg)) ||
        (st = oclf_check_vector(ctx, "linear_cross_entropy: loss", loss, lrows, 4, &ops->loss)))
        return st;
    if (o->lse && (st = oclf_check_vector(ctx, "linear_cross_entropy: lse", *o->lse, tokens, 4,
                                          &ops->lse)))
        return st;
    if (grads && o->grad_output &&
        (st = oclf_check_vector(ctx, "linear_cross_entropy: grad_output", *o->grad_output,
                                lrows, 4, &ops->gup)))
        return st;
    if (grad_x && (st = oclf_check_2d(ctx, "linear_cross_entropy: grad_x", *grad_x, tokens,
                                      hidden, es, &ops->gx)))
        return st;
    if (grad_w && (st = oclf_check_2d(ctx, "linear_cross_entropy: grad_w", *grad_w, vocab,
                                      hidden, 4, &ops->gw)))
        return st;
    /* Each output against every other operand. */
    const struct {
        const oclf_operand *op;
        int present;
        const char *name;
    } all[] = {
        {&ops->loss, 1, "loss"},
        {&ops->lse, o->lse != NULL, "lse"},
        {&ops->gx, grad_x != NULL, "grad_x"},
        {&ops->gw, grad_w != NULL, "grad_w"},
        {&ops->x, 1, "x"},
        {&ops->w, 1, "w"},
        {&ops->tg, 1, "targets"},
        {&ops->gup, grads && o->grad_output, "grad_output"},
    };
    enum { N_OUTPUTS = 4, N_ALL = sizeof all / sizeof all[0] };
    for (int i = 0; i < N_OUTPUTS; i++)
        for (int j = i + 1; j < N_ALL; j++)
            if (all[i].present && all[j].present && oclf_overlap(all[i].op, all[j].op))
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s overlaps %s", op,
                                 all[i].name, all[j].name);
    return OCLF_SUCCESS;
}

/* oclf_linear's fused kernels as the chain's next link. A failure is
 * reported as this call's, with the GEMM's own sentence after it. */
static oclf_status chain_gemm(oclf_chain *ch, oclf_dtype dtype, size_t m, size_t n, size_t k,
                              oclf_buf a, oclf_buf b, oclf_weight_layout layout, oclf_buf y,
                              const oclf_linear_epilogue *epi, const char *what)
{
    static const oclf_choice fused = {.path = OCLF_PATH_FUSED};
    cl_event ev = NULL;
    const oclf_status st =
        oclf_linear(ch->ctx, ch->queue, dtype, m, n, k, a, b, y, layout, OCLF_LINEAR_NONE, epi,
                    &fused, ch->prev ? 1 : ch->num_events, ch->prev ? &ch->prev : ch->wait_list,
                    &ev);
    oclf_enter("linear_cross_entropy");
    if (st != OCLF_SUCCESS) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", oclf_last_error(ch->ctx));
        return oclf_fail(ch->ctx, st, "linear_cross_entropy: the %s product failed: %s", what,
                         msg);
    }
    if (ch->prev)
        clReleaseEvent(ch->prev);
    ch->prev = ev;
    return OCLF_SUCCESS;
}

/* The bytes a call's temporaries take: per token of a chunk, and fixed. */
typedef struct lce_sizes {
    size_t per_token, fixed;
} lce_sizes;

static lce_sizes lce_temp_sizes(oclf_dtype dtype, size_t tokens, size_t hidden, size_t vocab,
                                int grad_w, int unfused, int reduced)
{
    const size_t es = oclf_dtype_size(dtype);
    lce_sizes s = {vocab * es, reduced ? tokens * sizeof(float) : 0};
    if (grad_w)
        s.per_token += vocab * sizeof(float) + (es < 4 ? hidden * sizeof(float) : 0);
    if (unfused)
        s.per_token += vocab * sizeof(float) + 2 * sizeof(float);
    return s;
}

/* The report's size (options->info, NULL: none), checked as an option
 * struct's: 0 the first layout, else a multiple of its alignment of at
 * least a size_t; a newer caller's larger struct gets this library's
 * fields. *bytes: what the call writes (the size field included). */
static oclf_status check_info(oclf_context *ctx, const char *op,
                              const oclf_linear_cross_entropy_info *info, size_t *bytes)
{
    *bytes = 0;
    if (!info)
        return OCLF_SUCCESS;
    size_t size = info->size ? info->size : sizeof *info;
    if (size < sizeof size || size % _Alignof(oclf_linear_cross_entropy_info))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: options.info->size %zu is not the size of a layout of this struct "
                         "(a multiple of %zu, at least %zu)",
                         op, info->size, _Alignof(oclf_linear_cross_entropy_info), sizeof size);
    *bytes = size < sizeof *info ? size : sizeof *info;
    return OCLF_SUCCESS;
}

oclf_status oclf_linear_cross_entropy(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                      size_t tokens, size_t hidden, size_t vocab, oclf_buf x,
                                      oclf_buf w, oclf_buf targets, oclf_buf loss,
                                      const oclf_buf *grad_x, const oclf_buf *grad_w,
                                      const oclf_cross_entropy_options *options,
                                      const oclf_choice *choice, cl_uint num_events,
                                      const cl_event *wait_list, cl_event *event)
{
    const char *op = "linear_cross_entropy";
    oclf_status st;
    if ((st = oclf_check_call(ctx, op, queue, num_events, wait_list, dtype, event)))
        return st;
    oclf_cross_entropy_options o;
    lce_operands ops;
    size_t info_size = 0;
    if ((st = oclf_ce_options(ctx, op, options, &o)) ||
        (st = check_info(ctx, op, o.info, &info_size)) ||
        (st = check_args(ctx, dtype, tokens, hidden, vocab, x, w, targets, loss, grad_x, grad_w,
                         &o, &ops)))
        return st;
    const size_t max_temp = o.max_temp_bytes;
    oclf_linear_cross_entropy_info done_info = {sizeof done_info, 0, 0, 0};
    if (o.info) /* what a call that fails from here on reports: nothing */
        memcpy((char *)o.info + sizeof(size_t), (const char *)&done_info + sizeof(size_t),
               info_size - sizeof(size_t));
    const oclf_shape shape = {{tokens, hidden, vocab, 0}};
    oclf_resolved r;
    if ((st = oclf_dispatch_resolve(ctx, OCLF_OP_LINEAR_CROSS_ENTROPY, &oclf_loss_linear_hooks,
                                     dtype, &shape, choice, &r)))
        return st;
    lce_cfg cfg;
    if (r.has_cfg)
        memcpy(&cfg, &r.cfg, sizeof cfg);
    else {
        oclf_op_cfg any;
        if ((st = oclf_loss_linear_validate(ctx, OCLF_OP_LINEAR_CROSS_ENTROPY, dtype, &shape, &r,
                                            0, &any)))
            return st;
        memcpy(&cfg, &any, sizeof cfg);
    }
    if (tokens == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);

    /* The chunk: the parameter, within max_temp and the device's largest
     * allocation (the unfused path takes every token or fails). */
    const int unfused = r.path == OCLF_PATH_UNFUSED;
    const int reduced = o.reduction != OCLF_REDUCTION_NONE;
    const int grads = grad_x || grad_w;
    const size_t es = oclf_dtype_size(dtype);
    const lce_sizes sz = lce_temp_sizes(dtype, tokens, hidden, vocab, grad_w != NULL, unfused,
                                        reduced);
    size_t chunk = unfused ? tokens : (size_t)cfg.chunk < tokens ? (size_t)cfg.chunk : tokens;
    if (max_temp) {
        if (max_temp < sz.fixed + sz.per_token * (unfused ? tokens : 1))
            return oclf_fail(ctx, unfused ? OCLF_OUT_OF_RESOURCES : OCLF_INVALID_ARGUMENT,
                             "%s: options.max_temp_bytes (%zu) holds no %s: %zu bytes needed", op,
                             max_temp, unfused ? "unfused call" : "chunk",
                             sz.fixed + sz.per_token * (unfused ? tokens : 1));
        const size_t fit = (max_temp - sz.fixed) / sz.per_token;
        chunk = chunk < fit ? chunk : fit;
    }
    if (!unfused) {
        /* Every chunk temporary must be one allocation. */
        const size_t widest = vocab * (grad_w ? sizeof(float) : es);
        const size_t fit = (size_t)(ctx->info.max_alloc / widest);
        if (fit == 0)
            return oclf_fail(ctx, OCLF_OUT_OF_RESOURCES,
                             "%s: one token's logits (%zu bytes) exceed the device's largest "
                             "allocation",
                             op, widest);
        chunk = chunk < fit ? chunk : fit;
    }
    if (grad_w && ctx->info.max_wgs < 256)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: the weight gradient's transpose needs work-groups of 256", op);
    const size_t nchunks = (tokens + chunk - 1) / chunk;

    oclf_ce_kernels k;
    /* Cross-entropy's row structure: the caller's LAYOUT, WGS and VEC where
     * given, else its own records and heuristic for the chunk's shape. */
    oclf_choice ce_choice = {.path = unfused ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED};
    static const char *const row_params[] = {"LAYOUT", "WGS", "VEC"};
    for (int i = 0; choice && i < 3; i++) {
        int64_t v;
        if (oclf_params_get(&choice->params, row_params[i], &v))
            oclf_params_set(&ce_choice.params, row_params[i], v);
    }
    /* the chunk's logits: a packed [chunk, vocab] temporary */
    const oclf_operand chunk_logits = {.stride = vocab};
    if ((st = oclf_ce_kernels_get(ctx, op, dtype, chunk, vocab, &chunk_logits, &ce_choice, &k)))
        return st;

    cl_mem flag = NULL, logits = NULL, dzt = NULL, xw = NULL, rows_loss = NULL;
    cl_event last = NULL;
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    if ((st = oclf_ce_flag_create(ctx, op, &flag)))
        return st;
    /* Every target first, and the whole count of rows not ignored (the
     * mean's divisor, which every chunk's gradient needs): the call waits
     * for it, so that a bad target stops it before any product runs. */
    const cl_long ignore = o.ignore_index;
    if ((st = oclf_ce_launch_targets(&ch, &k, targets.mem, ops.tg.offset, tokens,
                                     (cl_uint)vocab, ignore, flag)))
        goto done;
    {
        cl_uint bad = OCLF_CE_NO_ERROR;
        cl_int err =
            clEnqueueReadBuffer(queue, flag, CL_TRUE, 0, sizeof bad, &bad, 1, &ch.prev, NULL);
        if (err != CL_SUCCESS) {
            st = oclf_fail_cl(ctx, err, "linear_cross_entropy: reading the targets check");
            goto done;
        }
        if (bad != OCLF_CE_NO_ERROR) {
            st = oclf_ce_bad_target(ctx, queue, op, targets.mem, ops.tg.offset, bad, vocab,
                                    o.ignore_index);
            goto done;
        }
    }
    if ((st = oclf_temp_buffer(ctx, chunk * vocab * es, &logits)) ||
        (grad_w && (st = oclf_temp_buffer(ctx, chunk * vocab * sizeof(float), &dzt))) ||
        (grad_w && es < 4 && (st = oclf_temp_buffer(ctx, chunk * hidden * sizeof(float), &xw))) ||
        (reduced && (st = oclf_temp_buffer(ctx, tokens * sizeof(float), &rows_loss))))
        goto done;

    oclf_ce_rows rr = {
        .x = logits, .xo = 0, .xs = vocab, .tg = targets.mem, .flag = flag,
        .gup = grads && o.grad_output ? o.grad_output->mem : NULL,
        .lse = o.lse ? o.lse->mem : NULL, .cols = (cl_uint)vocab, .ignore = ignore,
        .ls = o.label_smoothing, .cap = o.softcap > 0.0f ? o.softcap : 0.0f, .zl = o.z_loss,
        .flags = (grads ? OCLF_CE_GRAD : 0) | (reduced ? OCLF_CE_SUM : 0) |
                 (o.reduction == OCLF_REDUCTION_MEAN ? OCLF_CE_MEAN : 0)};
    const size_t xs = ops.x.stride;
    for (size_t c0 = 0; c0 < tokens; c0 += chunk) {
        const size_t n = tokens - c0 < chunk ? tokens - c0 : chunk;
        const oclf_buf xc = {x.mem, ops.x.offset + c0 * xs, xs};
        const oclf_buf zc = {logits, 0, vocab};
        if ((st = chain_gemm(&ch, dtype, n, vocab, hidden, xc, w, OCLF_WEIGHT_NK, zc, NULL,
                             "logits")))
            goto done;
        rr.to = ops.tg.offset + c0;
        rr.rows = n;
        rr.loss = reduced ? rows_loss : loss.mem;
        rr.losso = reduced ? c0 : ops.loss.offset + c0;
        rr.lseo = o.lse ? ops.lse.offset + c0 : 0;
        rr.gupo = rr.gup ? ops.gup.offset + (reduced ? 0 : c0) : 0;
        if ((st = oclf_ce_launch_rows(&ch, &k, &rr)))
            goto done;
        if (grad_x) {
            const oclf_buf gxc = {grad_x->mem, ops.gx.offset + c0 * ops.gx.stride,
                                  ops.gx.stride};
            if ((st = chain_gemm(&ch, dtype, n, hidden, vocab, zc, w, OCLF_WEIGHT_KN, gxc, NULL,
                                 "grad_x")))
                goto done;
        }
        if (grad_w) {
            cl_ulong so = 0, ss = vocab, ds = n;
            cl_uint rows = (cl_uint)n, cols = (cl_uint)vocab;
            {
                oclf_arg a[] = {OCLF_ARG(logits), OCLF_ARG(so),   OCLF_ARG(ss), OCLF_ARG(rows),
                                OCLF_ARG(cols),   OCLF_ARG(dzt),  OCLF_ARG(ds)};
                const size_t groups = ((vocab + 15) / 16) * ((n + 15) / 16);
                if ((st = oclf_chain_launch(&ch, k.prog, "lce_transpose", a, OCLF_NARGS(a),
                                            groups * 256, 256)))
                    goto done;
            }
            oclf_buf xf = xc;
            if (es < 4) {
                cl_ulong xo = xc.offset, xss = xs;
                cl_uint hc = (cl_uint)hidden;
                oclf_arg a[] = {OCLF_ARG(x.mem), OCLF_ARG(xo), OCLF_ARG(xss), OCLF_ARG(rows),
                                OCLF_ARG(hc),    OCLF_ARG(xw)};
                if ((st = oclf_chain_launch(&ch, k.prog, "lce_widen", a, OCLF_NARGS(a),
                                            oclf_round_up(n * hidden, 64), 0)))
                    goto done;
                xf = (oclf_buf){xw, 0, hidden};
            }
            const oclf_buf dz = {dzt, 0, n};
            /* Chunks after the first add to what the earlier ones wrote:
             * the residual epilogue, in place, in fp32. */
            oclf_linear_epilogue epi;
            oclf_linear_epilogue_init(&epi);
            epi.residual = c0 ? grad_w : NULL;
            if ((st = chain_gemm(&ch, OCLF_F32, vocab, hidden, n, dz, xf, OCLF_WEIGHT_KN,
                                 *grad_w, &epi, "grad_w")))
                goto done;
        }
    }
    if (reduced && (st = oclf_ce_launch_reduce(&ch, &k, rows_loss, flag, loss.mem,
                                               ops.loss.offset, tokens,
                                               o.reduction == OCLF_REDUCTION_MEAN)))
        goto done;
    if (o.info) {
        done_info.chunk_tokens = chunk;
        done_info.chunks = nchunks;
        done_info.temp_bytes = sz.fixed + sz.per_token * chunk + 2 * sizeof(cl_uint);
        memcpy((char *)o.info + sizeof(size_t), (const char *)&done_info + sizeof(size_t),
               info_size - sizeof(size_t));
    }
done:
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? &last : NULL);
    if (event)
        *event = last;
    else if (last)
        clReleaseEvent(last);
    cl_mem temps[] = {flag, logits, dzt, xw, rows_loss};
    for (size_t i = 0; i < sizeof temps / sizeof temps[0]; i++)
        if (temps[i])
            clReleaseMemObject(temps[i]);
    return st;
}
