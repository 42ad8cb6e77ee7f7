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
 */
#include "internal.h"

#include <string.h>

static const oclf_op_info op_info[] = {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) \
    [OCLF_OP_##ID] = {#name, ndims, {d0, d1, d2, d3}, oclf_##family##_heuristic, \
                      oclf_##family##_validate},
#include "ops.def"
#undef OCLF_OP
};
/* A row missing here would leave a NULL name for strcmp to read. */
_Static_assert(sizeof op_info / sizeof op_info[0] == OCLF_OP_COUNT_,
               "every op in ops.def has a dispatch row");

const oclf_op_info *oclf_op_get(oclf_op op)
{
    return (unsigned)op < OCLF_OP_COUNT_ ? &op_info[op] : NULL;
}

const char *oclf_op_name(oclf_op op)
{
    return (unsigned)op < OCLF_OP_COUNT_ ? op_info[op].name : "unknown";
}

oclf_op oclf_op_from_name(const char *name)
{
    for (int i = 0; i < OCLF_OP_COUNT_; i++)
        if (name && strcmp(op_info[i].name, name) == 0)
            return (oclf_op)i;
    return OCLF_OP_COUNT_;
}

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
static void heuristic(oclf_context *ctx, const oclf_op_info *info, oclf_dtype dtype,
                      const oclf_shape *shape, oclf_path path, oclf_resolved *out)
{
    memset(out, 0, sizeof *out);
    out->path = path == OCLF_PATH_AUTO ? OCLF_PATH_FUSED : path;
    info->heuristic(ctx, dtype, shape, out->path, &out->params);
}

/* A cache miss: the first record that validates, else the heuristic. */
static void decide(oclf_context *ctx, oclf_op op, oclf_dtype dtype, const oclf_shape *shape,
                   oclf_path path, oclf_resolved *out)
{
    const oclf_op_info *info = oclf_op_get(op);
    enum { MAXC = 8 };
    oclf_tune_candidate cand[MAXC];
    int n = oclf_tune_candidates(ctx, op, dtype, shape, path, cand, MAXC);
    for (int i = 0; i < n; i++) {
        /* A record's parameters lie over the heuristic's for its path, so a
         * record may name only what it changes (an empty set means "the
         * heuristic, on this path"). */
        oclf_resolved r;
        heuristic(ctx, info, dtype, shape, cand[i].r.path, &r);
        if (overlay(ctx, &r.params, &cand[i].r.params) == OCLF_SUCCESS &&
            info->validate(ctx, op, dtype, shape, &r, 1) == OCLF_SUCCESS) {
            *out = r;
            return;
        }
        /* A record that cannot launch here (tuned on a bigger device, for a
         * shape it does not fit) is skipped, never launched. */
        oclf_log(ctx, OCLF_LOG_INFO, "%s: tuning record %d of the %s skipped: %s",
                 info->name, cand[i].record, oclf_tune_source_name(ctx, cand[i].source),
                 oclf_last_error(ctx));
    }
    heuristic(ctx, info, dtype, shape, path, out);
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
    if (!oclf_op_get(op))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "unknown op %d", (int)op);
    if (!oclf_tune_cache_get(ctx, op, dtype, shape, path, out)) {
        decide(ctx, op, dtype, shape, path, out);
        oclf_tune_cache_put(ctx, op, dtype, shape, path, out);
    }
    if (choice)
        return overlay(ctx, &out->params, &choice->params);
    return OCLF_SUCCESS;
}
