/*
 * L2 distance + top-k.
 *
 * Build options: OCLF_DTYPE (database storage), OCLF_VEC (vector width over
 * D), OCLF_QB x OCLF_RB (queries x database rows of the register block),
 * OCLF_FORMULA (0 direct sum of squared differences, 1 the expansion
 * |q|^2 + |x|^2 - 2 q.x), OCLF_QLOCAL (1: the scan reads the work-group's
 * queries from a copy in local memory), OCLF_XNORM (how the expansion gets
 * |x|^2: 0 every work-item sums its own rows in the distance loop; 1 those
 * of the first query block, for the others too; 2 a pass over each tile
 * before the loop), OCLF_XSTAGE (0, or the columns of a chunk of the tile's
 * rows staged in local memory), OCLF_TOPK (0 candidate heaps in global
 * memory, one work-item per list; 1 lists in local memory kept by the
 * whole work-group, merged by a work-group per query).
 *
 * The program is assembled from one file per concern, in this order (the
 * loader expands each #include line from the embedded sources):
 *   l2topk_select.cl   the candidate order, heaps, the merge kernels
 *   l2topk_norms.cl    |q|^2 and |x|^2 in the order both paths share
 *   l2topk_scan.cl     the register-block micro-kernel and the fused scan
 *   l2topk_unfused.cl  the kernels around the GEMM of the unfused path
 */

#ifndef OCLF_QB
#define OCLF_QB 4
#endif
#ifndef OCLF_RB
#define OCLF_RB 4
#endif
#ifndef OCLF_FORMULA
#define OCLF_FORMULA 1
#endif
#ifndef OCLF_QLOCAL
#define OCLF_QLOCAL 0
#endif
#ifndef OCLF_XNORM
#define OCLF_XNORM 1
#endif
#ifndef OCLF_TOPK
#define OCLF_TOPK 0
#endif

#include "l2topk_select.cl"
#include "l2topk_norms.cl"
#include "l2topk_scan.cl"
#include "l2topk_unfused.cl"
