/*
 * Parameter sets (oclf_params): a choice's kernel parameters by name, as
 * callers, the tuner and the tuning database spell them. Below every layer
 * that reads or fills them (the database parser, dispatch, the ops).
 */
#include "internal.h"

#include <string.h>

/* Names itself in its own sentences instead of through oclf_enter: the
 * library fills parameter sets inside other entry points (heuristics,
 * dispatch laying a caller's parameters over them), whose later errors
 * must still carry the caller's entry point. */
oclf_status oclf_params_set(oclf_params *params, const char *name, int64_t value)
{
    if (!params || !name || !*name)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "oclf_params_set: params and name are required");
    size_t n = strlen(name);
    if (n >= OCLF_PARAM_NAME_MAX)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "oclf_params_set: name '%s' is longer than %d characters", name,
                         OCLF_PARAM_NAME_MAX - 1);
    for (unsigned i = 0; i < params->count && i < OCLF_MAX_PARAMS; i++) {
        if (strcmp(params->item[i].name, name) == 0) {
            params->item[i].value = value;
            return OCLF_SUCCESS;
        }
    }
    if (params->count >= OCLF_MAX_PARAMS)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "oclf_params_set: the set already holds %d parameters", OCLF_MAX_PARAMS);
    memcpy(params->item[params->count].name, name, n + 1);
    params->item[params->count].value = value;
    params->count++;
    return OCLF_SUCCESS;
}

int oclf_params_get(const oclf_params *params, const char *name, int64_t *value)
{
    if (!params || !name)
        return 0;
    for (unsigned i = 0; i < params->count && i < OCLF_MAX_PARAMS; i++) {
        if (strcmp(params->item[i].name, name) == 0) {
            if (value)
                *value = params->item[i].value;
            return 1;
        }
    }
    return 0;
}
