/*
 * The tuning questions tools ask (oclf_tuning_explain, oclf_tuning_resolve,
 * oclf_tuning_params_valid) for any op by name: the table of every op's
 * hooks, made from lib/ops.def, handed to dispatch's one decision
 * function. The only file that names every op family.
 */
#include "internal.h"

#include <string.h>

static const oclf_op_hooks *const op_hooks[] = {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) [OCLF_OP_##ID] = &oclf_##family##_hooks,
#include "ops.def"
#undef OCLF_OP
};
_Static_assert(sizeof op_hooks / sizeof op_hooks[0] == OCLF_OP_COUNT_,
               "every op in ops.def has its hooks");

const oclf_op_hooks *oclf_op_hooks_get(oclf_op op)
{
    return (unsigned)op < OCLF_OP_COUNT_ ? op_hooks[op] : NULL;
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
    oclf_enter(__func__);
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
    oclf_trace t = {buf, len, 0};
    buf[0] = '\0';
    oclf_resolved r;
    int record;
    oclf_dispatch_decide(ctx, op, op_hooks[op], dtype, &shape, path, &r, &record, &t);
    return OCLF_SUCCESS;
}

oclf_status oclf_tuning_resolve(oclf_context *ctx, const char *op_name, oclf_dtype dtype,
                                const uint64_t *dims, unsigned ndims, oclf_path path,
                                oclf_tuning_decision *out)
{
    oclf_enter(__func__);
    oclf_op op;
    oclf_shape shape;
    oclf_status st =
        out ? question(ctx, "oclf_tuning_resolve", op_name, dtype, dims, ndims, path, &op, &shape)
            : oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "oclf_tuning_resolve: out is NULL");
    if (st != OCLF_SUCCESS)
        return st;
    memset(out, 0, sizeof *out);
    oclf_resolved r;
    oclf_dispatch_heuristic(ctx, op_hooks[op], dtype, &shape, path, &r);
    out->heuristic.path = r.path;
    out->heuristic.params = r.params;
    oclf_dispatch_decide(ctx, op, op_hooks[op], dtype, &shape, path, &r, &out->from_record, NULL);
    out->decision.path = r.path;
    out->decision.params = r.params;
    return OCLF_SUCCESS;
}

int oclf_tuning_params_valid(oclf_context *ctx, const char *op_name, oclf_dtype dtype,
                             const uint64_t *dims, unsigned ndims, oclf_path path,
                             const oclf_params *params)
{
    oclf_enter(__func__);
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
    oclf_resolved r;
    return oclf_dispatch_check(ctx, op, op_hooks[op], dtype, &shape, path, params, 0, &r) ==
           OCLF_SUCCESS;
}
