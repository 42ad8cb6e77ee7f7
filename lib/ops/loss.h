/*
 * The loss family's shared parts: cross-entropy's launches, used by
 * oclf_cross_entropy (loss.c) over a whole logits matrix and by
 * oclf_linear_cross_entropy (loss_linear.c) over one chunk of tokens at a
 * time.
 */
#ifndef OCLF_OPS_LOSS_H
#define OCLF_OPS_LOSS_H

#include "../internal.h"

/* err[0] of the targets check when every target is good (cl/loss.cl). */
#define OCLF_CE_NO_ERROR 0xffffffffu
/* The kernels' flags: write the gradient; reduce the per-row losses; mean. */
enum { OCLF_CE_GRAD = 1, OCLF_CE_SUM = 2, OCLF_CE_MEAN = 4 };

/* One resolved cross-entropy: its path and program, and the launch shape
 * of its row kernels. */
typedef struct oclf_ce_kernels {
    oclf_path path;
    oclf_program *prog;
    size_t global, local;
    /* ce_fused's staged row (OCLF_CE_STAGE): its local-memory bytes, 0 when
     * the row is read from global memory twice */
    size_t stage;
} oclf_ce_kernels;

/* Resolves cross_entropy's path and parameters for rows x cols (`choice`
 * as a call's), checks the launch range and builds the program: its aligned
 * build (OCLF_ALIGNED) where the `logits` operand's rows start on vector
 * boundaries (NULL: the plain build). `op` names the caller in errors.
 * rows 0: resolved and checked, no program (NULL). */
OCLF_HIDDEN oclf_status oclf_ce_kernels_get(oclf_context *ctx, const char *op, oclf_dtype dtype,
                                            size_t rows, size_t cols,
                                            const oclf_operand *logits,
                                            const oclf_choice *choice, oclf_ce_kernels *out);

/* Reads the caller's options (NULL: PyTorch's defaults) into *o and checks
 * the fields both calls share: reduction, smoothing, softcap, z-loss. */
OCLF_HIDDEN oclf_status oclf_ce_options(oclf_context *ctx, const char *op,
                                        const oclf_cross_entropy_options *options,
                                        oclf_cross_entropy_options *o);

/* The flag buffer of the targets check: {OCLF_CE_NO_ERROR, 0}. */
OCLF_HIDDEN oclf_status oclf_ce_flag_create(oclf_context *ctx, const char *op, cl_mem *flag);

/* ce_targets over `rows` targets at element `to`: err[0] the first bad
 * row, err[1] the count of rows not ignored. */
OCLF_HIDDEN oclf_status oclf_ce_launch_targets(oclf_chain *ch, const oclf_ce_kernels *k,
                                               cl_mem targets, cl_ulong to, size_t rows,
                                               cl_uint cols, cl_long ignore, cl_mem flag);

/* One launch set over `rows` rows of logits: the per-row losses (and LSE)
 * and, with OCLF_CE_GRAD, the gradient over the logits. The rows' targets,
 * losses, LSE and upstream gradients start at their offsets (for reduction
 * none, the upstream gradient's row offset too); the mean's count is
 * err[1] of `flag`, whatever rows this set covers. */
typedef struct oclf_ce_rows {
    cl_mem x;
    cl_ulong xo, xs;
    cl_mem tg;
    cl_ulong to;
    cl_mem flag;
    cl_mem gup; /* NULL: 1 */
    cl_ulong gupo;
    cl_mem loss;
    cl_ulong losso;
    cl_mem lse; /* NULL: not written */
    cl_ulong lseo;
    cl_ulong rows;
    cl_uint cols;
    cl_long ignore;
    float ls, cap, zl;
    cl_uint flags;
} oclf_ce_rows;
OCLF_HIDDEN oclf_status oclf_ce_launch_rows(oclf_chain *ch, const oclf_ce_kernels *k,
                                            const oclf_ce_rows *r);

/* out[oo] = the sum (mean: over err[1]) of `rows` per-row losses, in a
 * fixed order. */
OCLF_HIDDEN oclf_status oclf_ce_launch_reduce(oclf_chain *ch, const oclf_ce_kernels *k,
                                              cl_mem rows_loss, cl_mem flag, cl_mem out,
                                              cl_ulong oo, size_t rows, int mean);

/* The error of a bad target found by the check: reads that one target for
 * the message. */
OCLF_HIDDEN oclf_status oclf_ce_bad_target(oclf_context *ctx, cl_command_queue queue,
                                           const char *op, cl_mem targets, size_t to,
                                           cl_uint row, size_t vocab, int64_t ignore);

#endif
