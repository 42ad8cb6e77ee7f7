/*
 * The op list as data: each op's name and the dims the tuning database keys
 * its shape by, from lib/ops.def. Nothing here calls into an op, so the
 * database parser links it without the ops, and the ops without the parser.
 */
#include "internal.h"

#include <string.h>

static const oclf_op_key op_keys[] = {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) \
    [OCLF_OP_##ID] = {#name, ndims, {d0, d1, d2, d3}},
#include "ops.def"
#undef OCLF_OP
};
/* A row missing here would leave a NULL name for strcmp to read. */
_Static_assert(sizeof op_keys / sizeof op_keys[0] == OCLF_OP_COUNT_,
               "every op in ops.def has a key row");

const oclf_op_key *oclf_op_key_get(oclf_op op)
{
    return (unsigned)op < OCLF_OP_COUNT_ ? &op_keys[op] : NULL;
}

const char *oclf_op_name(oclf_op op)
{
    return (unsigned)op < OCLF_OP_COUNT_ ? op_keys[op].name : "unknown";
}

oclf_op oclf_op_from_name(const char *name)
{
    for (int i = 0; i < OCLF_OP_COUNT_; i++)
        if (name && strcmp(op_keys[i].name, name) == 0)
            return (oclf_op)i;
    return OCLF_OP_COUNT_;
}
