/*
 * The op list as data (oplist.c, from ops.def) and the shapes the
 * tuning database keys by.
 */
#ifndef OCLF_OPLIST_H
#define OCLF_OPLIST_H

#include "program.h"

/* Op identifiers shared by dispatch, the tuning database, bench and tuner. */
typedef enum oclf_op {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) OCLF_OP_##ID,
#include "ops.def"
#undef OCLF_OP
    OCLF_OP_COUNT_
} oclf_op;

/* An op's name and the dims the tuning database keys its shape by. */
typedef struct oclf_op_key {
    const char *name;
    unsigned ndims;
    const char *dims[4];
} oclf_op_key;
/* NULL when op is not one. */
OCLF_HIDDEN const oclf_op_key *oclf_op_key_get(oclf_op op);
OCLF_HIDDEN const char *oclf_op_name(oclf_op op);
/* OCLF_OP_COUNT_ when unknown. */
OCLF_HIDDEN oclf_op oclf_op_from_name(const char *name);

/* A shape as the database keys it: up to 4 named extents. */
typedef struct oclf_shape {
    uint64_t dim[4];
} oclf_shape;
#endif
