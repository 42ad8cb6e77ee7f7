/*
 * Dispatch: decides the path and kernel parameters of one call.
 *
 * Order of precedence: an explicit path from the caller; parameters the
 * caller passes; the tuning database (when one is loaded); the op's
 * heuristic, which reads the device facts. Whatever is chosen is validated
 * by the op against the real shape and limits before anything launches.
 */
#include "internal.h"

#include <string.h>

static const char *const op_names[OCLF_OP_COUNT_] = {
    [OCLF_OP_RMS_NORM] = "rms_norm",
    [OCLF_OP_ADD_RMS_NORM] = "add_rms_norm",
    [OCLF_OP_LAYER_NORM] = "layer_norm",
    [OCLF_OP_ADD_LAYER_NORM] = "add_layer_norm",
    [OCLF_OP_ACT_AND_MUL] = "act_and_mul",
    [OCLF_OP_ROTARY_EMBEDDING] = "rotary_embedding",
    [OCLF_OP_QK_NORM_ROPE] = "qk_norm_rope",
};

const char *oclf_op_name(oclf_op op)
{
    return (unsigned)op < OCLF_OP_COUNT_ ? op_names[op] : "unknown";
}

void oclf_tune_cache_free(oclf_context *ctx) { (void)ctx; }

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

oclf_status oclf_dispatch_resolve(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                  const oclf_shape *shape, const oclf_choice *choice,
                                  oclf_heuristic_fn heuristic, oclf_resolved *out)
{
    memset(out, 0, sizeof *out);
    oclf_path path = choice ? choice->path : OCLF_PATH_AUTO;
    if (path != OCLF_PATH_AUTO && path != OCLF_PATH_FUSED && path != OCLF_PATH_UNFUSED)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown path %d", oclf_op_name(op),
                         (int)path);
    if (choice && choice->params.count > OCLF_MAX_PARAMS)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: params.count %u exceeds %d",
                         oclf_op_name(op), choice->params.count, OCLF_MAX_PARAMS);
    /* Fusion saves a pass over memory and launches on every device measured
     * so far, so it is the default until a tuning record says otherwise. */
    out->path = path == OCLF_PATH_AUTO ? OCLF_PATH_FUSED : path;
    heuristic(ctx, dtype, shape, out->path, &out->params);
    if (choice)
        return overlay(ctx, &out->params, &choice->params);
    return OCLF_SUCCESS;
}
