/*
 * Dispatch: decides the path and kernel parameters of one call.
 *
 * Order of precedence: an explicit path from the caller; the tuning records
 * that match (tunedb.c), each validated by the op before it is taken; the
 * op's heuristic, which reads the device facts; then the parameters the
 * caller passes, laid over whichever of those won. The op validates the
 * final set against the real shape and limits before anything launches.
 *
 * The decision without the caller's parameters depends only on (op, dtype,
 * shape, requested path), so it is cached in the context: the first call
 * of a shape searches and validates, every later one is a hash probe with
 * no JSON work and no allocation.
 *
 * One function decides (decide()); oclf_tuning_explain is that function
 * with a trace, and oclf_tuning_resolve its result as parameter sets, so
 * what they report is what a call does.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What dispatch calls of an op: its heuristic and its validator. */
typedef struct oclf_op_hooks {
    oclf_heuristic_fn heuristic;
    oclf_validate_fn validate;
} oclf_op_hooks;

static const oclf_op_hooks op_hooks[] = {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) \
    [OCLF_OP_##ID] = {oclf_##family##_heuristic, oclf_##family##_validate},
#include "ops.def"
#undef OCLF_OP
};
_Static_assert(sizeof op_hooks / sizeof op_hooks[0] == OCLF_OP_COUNT_,
               "every op in ops.def has dispatch hooks");

/* ---- the decision cache -------------------------------------------------------*/

enum { CACHE_SLOTS = 256, CACHE_PROBE = 8 };

typedef struct cache_entry {
    int used;
    oclf_op op;
    oclf_dtype dtype;
    oclf_path path;
    uint64_t dim[4];
    oclf_resolved r;
} cache_entry;

struct oclf_decisions {
    cache_entry slot[CACHE_SLOTS];
};

static size_t cache_hash(oclf_op op, oclf_dtype dtype, const oclf_shape *s, oclf_path path)
{
    oclf_hash h;
    oclf_hash_init(&h);
    int k[3] = {(int)op, (int)dtype, (int)path};
    oclf_hash_update(&h, k, sizeof k);
    oclf_hash_update(&h, s->dim, sizeof s->dim);
    return (size_t)(h.a % CACHE_SLOTS);
}

static int entry_is(const cache_entry *e, oclf_op op, oclf_dtype dtype, const oclf_shape *s,
                    oclf_path path)
{
    return e->used && e->op == op && e->dtype == dtype && e->path == path &&
           memcmp(e->dim, s->dim, sizeof e->dim) == 0;
}

/* 1 and *out on a hit. Takes ctx->lock. */
static int cache_get(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                     oclf_path path, oclf_resolved *out)
{
    const size_t h = cache_hash(op, dtype, shape, path);
    int hit = 0;
    pthread_mutex_lock(&ctx->lock);
    if (ctx->decisions) {
        for (int i = 0; i < CACHE_PROBE && !hit; i++) {
            const cache_entry *e = &ctx->decisions->slot[(h + (size_t)i) % CACHE_SLOTS];
            if (entry_is(e, op, dtype, shape, path)) {
                *out = e->r;
                hit = 1;
            }
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    if (hit)
        atomic_fetch_add(&ctx->n_tune_hits, 1);
    return hit;
}

/* Takes ctx->lock. Without memory for the table the decision is simply not
 * kept. */
static void cache_put(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                      oclf_path path, const oclf_resolved *r)
{
    const size_t h = cache_hash(op, dtype, shape, path);
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->decisions)
        ctx->decisions = calloc(1, sizeof *ctx->decisions);
    if (ctx->decisions) {
        /* A free or matching slot in the probe window, else the home slot
         * is overwritten: a fixed table keeps steady state allocation-free
         * whatever number of shapes a caller runs. */
        cache_entry *dst = &ctx->decisions->slot[h];
        for (int i = 0; i < CACHE_PROBE; i++) {
            cache_entry *e = &ctx->decisions->slot[(h + (size_t)i) % CACHE_SLOTS];
            if (!e->used || entry_is(e, op, dtype, shape, path)) {
                dst = e;
                break;
            }
        }
        dst->used = 1;
        dst->op = op;
        dst->dtype = dtype;
        dst->path = path;
        memcpy(dst->dim, shape->dim, sizeof dst->dim);
        dst->r = *r;
    }
    pthread_mutex_unlock(&ctx->lock);
}

void oclf_dispatch_free(oclf_context *ctx)
{
    if (!ctx)
        return;
    free(ctx->decisions);
    ctx->decisions = NULL;
}

/* ---- deciding -------------------------------------------------------------------*/

/* Overlays `over` on `base`: explicit parameters win over defaults. */
static oclf_status overlay(const oclf_context *ctx, oclf_params *base, const oclf_params *over)
{
    for (unsigned i = 0; i < over->count && i < OCLF_MAX_PARAMS; i++) {
        if (oclf_params_set(base, over->item[i].name, over->item[i].value) != OCLF_SUCCESS)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "too many kernel parameters (limit %d)",
                             OCLF_MAX_PARAMS);
    }
    return OCLF_SUCCESS;
}

/* The heuristic's answer. Fusion saves a pass over memory and launches on
 * every device measured so far, so it is the default path until a tuning
 * record says otherwise. */
static void heuristic(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                      oclf_path path, oclf_resolved *out)
{
    memset(out, 0, sizeof *out);
    out->path = path == OCLF_PATH_AUTO ? OCLF_PATH_FUSED : path;
    op_hooks[op].heuristic(ctx, dtype, shape, out->path, &out->params);
}

/* `point` laid over the heuristic for `path` into *r, then validated by
 * the op (deep: building the program too). */
static oclf_status check(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                         oclf_path path, const oclf_params *point, int deep, oclf_resolved *r)
{
    heuristic(ctx, op, dtype, shape, path, r);
    oclf_status st = point ? overlay(ctx, &r->params, point) : OCLF_SUCCESS;
    return st != OCLF_SUCCESS ? st : op_hooks[op].validate(ctx, op, dtype, shape, r, deep);
}

oclf_status oclf_dispatch_check(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                const oclf_shape *shape, oclf_path path, const oclf_params *point,
                                int deep)
{
    if (!oclf_op_key_get(op) || (path != OCLF_PATH_FUSED && path != OCLF_PATH_UNFUSED))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "unknown op %d or path %d", (int)op,
                         (int)path);
    oclf_resolved r;
    return check(ctx, op, dtype, shape, path, point, deep, &r);
}

/* Text that decide() writes when asked to explain itself. */
typedef struct trace {
    char *buf;
    size_t len, used;
} trace;

static void say(trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(trace *t, const char *fmt, ...)
{
    if (!t || t->used >= t->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->used, t->len - t->used, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->used += (size_t)n;
}

static void say_choice(trace *t, const oclf_resolved *r)
{
    say(t, "%s", r->path == OCLF_PATH_UNFUSED ? "unfused" : "fused");
    for (unsigned i = 0; i < r->params.count; i++)
        say(t, " %s=%lld", r->params.item[i].name, (long long)r->params.item[i].value);
}

/* A cache miss: the first record that validates, else the heuristic.
 * *record is 1 when a record won. With `t`, says what it takes and skips. */
static void decide(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                   oclf_path path, oclf_resolved *out, int *record, trace *t)
{
    static const char *const levels[] = {"exact device", "vendor+name", "vendor+type",
                                         "device type"};
    const oclf_op_key *key = oclf_op_key_get(op);
    enum { MAXC = 8 };
    oclf_tune_candidate cand[MAXC];
    int n = oclf_tune_candidates(ctx, op, dtype, shape, path, cand, MAXC);
    for (int i = 0; i < n; i++) {
        /* A record's parameters lie over the heuristic's for its path, so a
         * record may name only what it changes (an empty set means "the
         * heuristic, on this path"). */
        oclf_resolved r;
        const int ok = check(ctx, op, dtype, shape, cand[i].path, &cand[i].params, 1, &r) ==
                       OCLF_SUCCESS;
        say(t, "%s: %s record %d (%s match; tuned shape", ok ? "uses" : "skips",
            oclf_tune_source_name(ctx, cand[i].source), cand[i].record, levels[cand[i].level]);
        for (unsigned k = 0; k < key->ndims; k++)
            say(t, " %s=%llu", key->dims[k], (unsigned long long)cand[i].dim[k]);
        say(t, "): ");
        say_choice(t, &r);
        if (!ok)
            say(t, " -- %s", oclf_last_error(ctx));
        say(t, "\n");
        if (ok) {
            *out = r;
            *record = 1;
            return;
        }
        /* A record that cannot launch here (tuned on a bigger device, for a
         * shape it does not fit) is skipped, never launched. */
        oclf_log(ctx, OCLF_LOG_INFO, "%s: tuning record %d of the %s skipped: %s", key->name,
                 cand[i].record, oclf_tune_source_name(ctx, cand[i].source),
                 oclf_last_error(ctx));
    }
    heuristic(ctx, op, dtype, shape, path, out);
    *record = 0;
    say(t, "uses: heuristic (no usable tuning record): ");
    say_choice(t, out);
    say(t, "\n");
}

oclf_status oclf_dispatch_resolve(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                  const oclf_shape *shape, const oclf_choice *choice,
                                  oclf_resolved *out)
{
    memset(out, 0, sizeof *out);
    oclf_path path = choice ? choice->path : OCLF_PATH_AUTO;
    if (path != OCLF_PATH_AUTO && path != OCLF_PATH_FUSED && path != OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown path %d", oclf_op_name(op),
                         (int)path);
    if (choice && choice->params.count > OCLF_MAX_PARAMS)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: params.count %u exceeds %d",
                         oclf_op_name(op), choice->params.count, OCLF_MAX_PARAMS);
    if (!oclf_op_key_get(op))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "unknown op %d", (int)op);
    if (!cache_get(ctx, op, dtype, shape, path, out)) {
        int record;
        decide(ctx, op, dtype, shape, path, out, &record, NULL);
        cache_put(ctx, op, dtype, shape, path, out);
    }
    if (choice)
        return overlay(ctx, &out->params, &choice->params);
    return OCLF_SUCCESS;
}

/* The public questions about a decision: (op name, dims) checked and made
 * a shape. `fn` names the entry point in the message. */
static oclf_status question(oclf_context *ctx, const char *fn, const char *op_name,
                            oclf_dtype dtype, const uint64_t *dims, unsigned ndims,
                            oclf_path path, oclf_op *op, oclf_shape *shape)
{
    *op = oclf_op_from_name(op_name);
    if (!ctx || *op == OCLF_OP_COUNT_ || !oclf_dtype_name(dtype) ||
        (unsigned)path > OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s: unknown op '%s', dtype, path or NULL argument", fn,
                         op_name ? op_name : "(null)");
    const oclf_op_key *key = oclf_op_key_get(*op);
    if (ndims != key->ndims || !dims)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: %s takes %u dims", fn, op_name,
                         key->ndims);
    memset(shape, 0, sizeof *shape);
    for (unsigned k = 0; k < ndims; k++)
        shape->dim[k] = dims[k];
    return OCLF_SUCCESS;
}

oclf_status oclf_tuning_explain(oclf_context *ctx, const char *op_name, oclf_dtype dtype,
                                const uint64_t *dims, unsigned ndims, oclf_path path, char *buf,
                                size_t len)
{
    oclf_op op;
    oclf_shape shape;
    if (!buf || !len)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "oclf_tuning_explain: unknown op '%s', dtype, path or NULL argument",
                         op_name ? op_name : "(null)");
    oclf_status st = question(ctx, "oclf_tuning_explain", op_name, dtype, dims, ndims, path,
                              &op, &shape);
    if (st != OCLF_SUCCESS)
        return st;
    trace t = {buf, len, 0};
    buf[0] = '\0';
    oclf_resolved r;
    int record;
    decide(ctx, op, dtype, &shape, path, &r, &record, &t);
    return OCLF_SUCCESS;
}

oclf_status oclf_tuning_resolve(oclf_context *ctx, const char *op_name, oclf_dtype dtype,
                                const uint64_t *dims, unsigned ndims, oclf_path path,
                                oclf_tuning_decision *out)
{
    oclf_op op;
    oclf_shape shape;
    oclf_status st = out ? question(ctx, "oclf_tuning_resolve", op_name, dtype, dims, ndims,
                                    path, &op, &shape)
                         : oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "oclf_tuning_resolve: out is NULL");
    if (st != OCLF_SUCCESS)
        return st;
    memset(out, 0, sizeof *out);
    oclf_resolved r;
    heuristic(ctx, op, dtype, &shape, path, &r);
    out->heuristic.path = r.path;
    out->heuristic.params = r.params;
    decide(ctx, op, dtype, &shape, path, &r, &out->from_record, NULL);
    out->decision.path = r.path;
    out->decision.params = r.params;
    return OCLF_SUCCESS;
}

int oclf_tuning_params_valid(oclf_context *ctx, const char *op_name, oclf_dtype dtype,
                             const uint64_t *dims, unsigned ndims, oclf_path path,
                             const oclf_params *params)
{
    oclf_op op;
    oclf_shape shape;
    if (question(ctx, "oclf_tuning_params_valid", op_name, dtype, dims, ndims, path, &op,
                 &shape) != OCLF_SUCCESS)
        return 0;
    if (path == OCLF_PATH_AUTO || (params && params->count > OCLF_MAX_PARAMS)) {
        oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                  "oclf_tuning_params_valid: path must be FUSED or UNFUSED and params.count at "
                  "most %d",
                  OCLF_MAX_PARAMS);
        return 0;
    }
    return oclf_dispatch_check(ctx, op, dtype, &shape, path, params, 0) == OCLF_SUCCESS;
}
