/*
 * The row kernels' reduction (norm.cl and norm_grad.cl): ROW_REDUCE and
 * the kernel qualifier ROW_KERNEL that goes with it.
 */
#ifndef OCLF_ROW_REDUCE_H
#define OCLF_ROW_REDUCE_H

/* Row reductions (ROW_REDUCE) by sub-group shuffles where the device has
 * them and a work-group spans whole sub-groups (cl/subgroup.h: a butterfly
 * per sub-group, then its partial sums through local memory), else
 * common.h's local-memory tree; the kernels then carry the sub-group width
 * the shuffles were compiled for. */
#if OCLF_LAYOUT == 1 && OCLF_SUBGROUP_FORM != 0 && OCLF_WGS >= OCLF_SUBGROUP_WIDTH
#include "subgroup.h"
#undef ROW_REDUCE
#define ROW_REDUCE(v, scratch) oclf_group_sum((v), (scratch))
#define ROW_KERNEL kernel OCLF_SUBGROUP_KERNEL
#else
#define ROW_KERNEL kernel
#endif

#endif
