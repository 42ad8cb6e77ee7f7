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
 * One function decides (oclf_dispatch_decide); oclf_tuning_explain is that
 * function with a trace, and oclf_tuning_resolve its result as parameter
 * sets (lib/tuning.c), so what they report is what a call does.
 *
 * The op hands in its hooks (heuristic, validate) with each call, so this
 * file calls into no op: the ops call dispatch, dispatch calls tunedb.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
void oclf_dispatch_heuristic(oclf_context *ctx, const oclf_op_hooks *hooks, oclf_dtype dtype,
                             const oclf_shape *shape, oclf_path path, oclf_resolved *out)
{
    memset(out, 0, sizeof *out);
    out->path = path == OCLF_PATH_AUTO ? OCLF_PATH_FUSED : path;
    hooks->heuristic(ctx, dtype, shape, out->path, &out->params);
}

/* `point` laid over the heuristic for `path` into *r, then validated by
 * the op (deep: building the program too). */
oclf_status oclf_dispatch_check(oclf_context *ctx, oclf_op op, const oclf_op_hooks *hooks,
                                oclf_dtype dtype, const oclf_shape *shape, oclf_path path,
                                const oclf_params *point, int deep, oclf_resolved *r)
{
    oclf_dispatch_heuristic(ctx, hooks, dtype, shape, path, r);
    oclf_status st = point ? overlay(ctx, &r->params, point) : OCLF_SUCCESS;
    if (st == OCLF_SUCCESS)
        st = hooks->validate(ctx, op, dtype, shape, r, deep, &r->cfg);
    r->has_cfg = st == OCLF_SUCCESS;
    return st;
}

/* Appends to the trace of an explained decision (nothing without one). */
static void say(oclf_trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(oclf_trace *t, const char *fmt, ...)
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

static void say_choice(oclf_trace *t, const oclf_resolved *r)
{
    say(t, "%s", r->path == OCLF_PATH_UNFUSED ? "unfused" : "fused");
    for (unsigned i = 0; i < r->params.count; i++)
        say(t, " %s=%lld", r->params.item[i].name, (long long)r->params.item[i].value);
}

/* A built kernel may take fewer work-items than the device's limit (its
 * registers or local memory), which the heuristic cannot know: when the
 * op's deep check finds the heuristic's WGS above it, WGS is halved until
 * every kernel takes it (halving keeps a power of two, which some kernels'
 * reductions need; where WGS is compiled in, each check builds its own
 * program). Anything else the deep check rejects is left for the call to
 * report. */
static void fit_heuristic_wgs(oclf_context *ctx, oclf_op op, const oclf_op_hooks *hooks,
                              oclf_dtype dtype, const oclf_shape *shape, oclf_path path,
                              oclf_resolved *out)
{
    int64_t wgs = 0;
    if (!out->has_cfg || !oclf_params_get(&out->params, "WGS", &wgs))
        return;
    oclf_params p = {0};
    oclf_resolved r;
    for (int64_t w = wgs; w >= 1; w /= 2) {
        oclf_params_set(&p, "WGS", w);
        const oclf_status st = oclf_dispatch_check(ctx, op, hooks, dtype, shape, path, &p, 1, &r);
        if (st == OCLF_SUCCESS && w != wgs) {
            r.wgs_default = 1;
            *out = r;
            oclf_log(ctx, OCLF_LOG_INFO,
                     "%s: the heuristic's WGS %lld exceeds a kernel's limit; WGS %lld taken",
                     oclf_op_name(op), (long long)wgs, (long long)w);
        }
        if (st != OCLF_OUT_OF_RESOURCES)
            return;
    }
}

void oclf_dispatch_decide(oclf_context *ctx, oclf_op op, const oclf_op_hooks *hooks,
                          oclf_dtype dtype, const oclf_shape *shape, oclf_path path,
                          oclf_resolved *out, int *record, oclf_trace *t)
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
        const int ok = oclf_dispatch_check(ctx, op, hooks, dtype, shape, cand[i].path,
                                           &cand[i].params, 1, &r) == OCLF_SUCCESS;
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
    /* The heuristic's config, checked once here rather than on every
     * call; a heuristic the op rejects for this shape is left for the call
     * to reject with its own message. */
    oclf_dispatch_check(ctx, op, hooks, dtype, shape, path, NULL, 0, out);
    out->wgs_default = 1;
    fit_heuristic_wgs(ctx, op, hooks, dtype, shape, path, out);
    *record = 0;
    say(t, "uses: heuristic (no usable tuning record): ");
    say_choice(t, out);
    say(t, "\n");
}

oclf_status oclf_dispatch_resolve(oclf_context *ctx, oclf_op op, const oclf_op_hooks *hooks,
                                  oclf_dtype dtype, const oclf_shape *shape,
                                  const oclf_choice *choice, oclf_resolved *out)
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
        oclf_dispatch_decide(ctx, op, hooks, dtype, shape, path, out, &record, NULL);
        cache_put(ctx, op, dtype, shape, path, out);
    }
    if (choice && choice->params.count) {
        out->has_cfg = 0; /* the op parses the caller's parameters */
        int64_t w;
        if (oclf_params_get(&choice->params, "WGS", &w))
            out->wgs_default = 0;
        return overlay(ctx, &out->params, &choice->params);
    }
    return OCLF_SUCCESS;
}
