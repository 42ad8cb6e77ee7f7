/*
 * Dispatch (dispatch.c): (op, hooks, dtype, shape, choice) -> path,
 * parameters and the op's config; the hooks each op hands in.
 */
#ifndef OCLF_DISPATCH_H
#define OCLF_DISPATCH_H

#include "tunedb_chain.h"

/* An op's typed configuration (its own struct, parsed from the parameters
 * by its validate hook), kept beside the parameters so that a call served
 * by the decision cache parses nothing. Each op checks that its struct
 * fits. */
typedef union oclf_op_cfg {
    int64_t align;
    unsigned char bytes[256];
} oclf_op_cfg;
#define OCLF_CFG_FITS(type) \
    _Static_assert(sizeof(type) <= sizeof(oclf_op_cfg), #type " fits oclf_op_cfg")

typedef struct oclf_resolved {
    oclf_path path; /* FUSED or UNFUSED, never AUTO */
    oclf_params params;
    int has_cfg;     /* cfg is the op's config for exactly (path, params) */
    /* WGS is the heuristic's (no record, no caller named it): an op whose
     * built kernel takes fewer work-items may lower it instead of failing. */
    int wgs_default;
    oclf_op_cfg cfg;
} oclf_resolved;

/* Fills the heuristic parameters for (op, path) on this device and shape. */
typedef void (*oclf_heuristic_fn)(const oclf_context *ctx, oclf_dtype dtype,
                                  const oclf_shape *shape, oclf_path path, oclf_params *out);
/* Checks that `r` can launch for this shape on this device (recording why
 * not with oclf_fail) and, on success, writes the op's typed config into
 * *cfg (may be NULL). `deep`: also build the program and compare the
 * kernels' CL_KERNEL_WORK_GROUP_SIZE with the work-group size; dispatch asks
 * for it once per tuning record it takes, never in steady state. A config
 * checked here holds for every call of the shape: where a call's own
 * arguments matter (norm weights), the check assumes the most demanding. */
typedef oclf_status (*oclf_validate_fn)(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                        const oclf_shape *shape, const oclf_resolved *r,
                                        int deep, oclf_op_cfg *cfg);

/* What dispatch calls of an op, handed in by the op with each call. */
typedef struct oclf_op_hooks {
    oclf_heuristic_fn heuristic;
    oclf_validate_fn validate;
} oclf_op_hooks;
/* Each family's hooks (lib/ops/<family>.c), named by ops.def's column. */
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) \
    OCLF_HIDDEN extern const oclf_op_hooks oclf_##family##_hooks;
#include "ops.def"
#undef OCLF_OP
/* Any op's hooks (tuning.c, the table of every family); NULL when op is
 * not one. */
OCLF_HIDDEN const oclf_op_hooks *oclf_op_hooks_get(oclf_op op);

/* Decides the path and parameters of one call. Candidates, in order: the
 * tuning records that match (context, per-machine, built-in database; by
 * device match level, then shape distance), each validated by the op and
 * skipped when it cannot launch, then the heuristic. The caller's explicit
 * parameters are laid over the winner. The result per (op, dtype, shape,
 * path) is cached in the context with the op's typed config, so steady
 * state is one hash probe: out->has_cfg says the config came with it (never
 * when the caller passed parameters, which the op then parses). */
OCLF_HIDDEN oclf_status oclf_dispatch_resolve(oclf_context *ctx, oclf_op op,
                                              const oclf_op_hooks *hooks, oclf_dtype dtype,
                                              const oclf_shape *shape, const oclf_choice *choice,
                                              oclf_resolved *out);
/* Text a decision writes when asked to explain itself (truncated to len). */
typedef struct oclf_trace {
    char *buf;
    size_t len, used;
} oclf_trace;
/* The one decision (a cache miss): the first record that validates, else
 * the heuristic; *record is 1 when a record won. With `t`, says what it
 * takes and what it skips and why. */
OCLF_HIDDEN void oclf_dispatch_decide(oclf_context *ctx, oclf_op op, const oclf_op_hooks *hooks,
                                      oclf_dtype dtype, const oclf_shape *shape, oclf_path path,
                                      oclf_resolved *out, int *record, oclf_trace *t);
/* The heuristic's answer for `path` (AUTO: fused). */
OCLF_HIDDEN void oclf_dispatch_heuristic(oclf_context *ctx, const oclf_op_hooks *hooks,
                                         oclf_dtype dtype, const oclf_shape *shape,
                                         oclf_path path, oclf_resolved *out);
/* A parameter set as dispatch takes a tuning record: laid over the
 * heuristic for `path` (FUSED or UNFUSED; `point` may be NULL), then
 * validated by the op, with `deep` as the validate hook takes it. */
OCLF_HIDDEN oclf_status oclf_dispatch_check(oclf_context *ctx, oclf_op op,
                                            const oclf_op_hooks *hooks, oclf_dtype dtype,
                                            const oclf_shape *shape, oclf_path path,
                                            const oclf_params *point, int deep,
                                            oclf_resolved *r);
/* Drops the decision cache. */
OCLF_HIDDEN void oclf_dispatch_free(oclf_context *ctx);
#endif
