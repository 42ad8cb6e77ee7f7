/*
 * Linear family, the host side: what its files share.
 *
 *   linear.c    parameters (heuristic, configuration, validation), the
 *               argument checks, the fused and unfused paths (dense and
 *               quantized W), oclf_linear
 *   linear_q.c  oclf_linear_q and its weight's checks, oclf_qweight_convert
 */
#ifndef OCLF_OPS_LINEAR_H
#define OCLF_OPS_LINEAR_H

#include "../internal.h"

/* Work-group size of the unfused elementwise kernels. */
#define LIN_ELEM_WGS 64

/* How a quantized W is read: the kernels' OCLF_QW defines. fmt 0: W in
 * the call's dtype. */
typedef struct lin_qkind {
    int fmt;         /* oclf_qformat, or 0 */
    unsigned group;  /* 32 for Q8_0/Q4_0; 0 for INT8 per channel */
    int zero, sf32;  /* INT4 zero points; f32 scales */
} lin_qkind;

/* The weight's format as a shape dim of linear_q (its "qformat"): the
 * format times 1000 plus the group, 1000 for INT8 per output channel, 2128
 * for INT4 in groups of 128, 4032 for Q4_0. Never 1 (KN) or 0 (NK), so the
 * heuristic, which reads dim 3 as linear's layout, sees NK. */
#define LIN_QCODE(fmt, group) ((uint64_t)(fmt) * 1000u + (uint64_t)(group))

/* A checked call. */
typedef struct lin_call {
    oclf_dtype dtype;
    size_t m, n, k;
    int wkn, prologue, has_bias, has_res, inplace;
    oclf_operand x, w, y, bias, res;
    float alpha, beta;
    cl_uint act, before;
    /* A quantized W: its kind, scales and zero points (w holds its bytes). */
    lin_qkind q;
    oclf_operand qscale, qzero;
    /* A quantized W's unfused path and PRE: w is a packed f32 tile
     * already. */
    int w_f32;
} lin_call;

/* The call's checks but for a quantized weight (quant 1: c's w, qscale,
 * qzero and q hold it, checked; `w` and `layout` unused). */
OCLF_HIDDEN oclf_status oclf_lin_check_args(oclf_context *ctx, oclf_dtype dtype, size_t m,
                                            size_t n, size_t k, oclf_buf x,
                                            oclf_linear_act prologue, oclf_buf w,
                                            oclf_weight_layout layout, int quant, oclf_buf y,
                                            const oclf_linear_epilogue *epi, lin_call *c);
/* Everything after the checks, shared by both entry points. */
OCLF_HIDDEN oclf_status oclf_lin_run(oclf_context *ctx, cl_command_queue queue, oclf_op op,
                                     const lin_call *c, const oclf_shape *shape,
                                     const oclf_choice *choice, cl_uint num_events,
                                     const cl_event *wait_list, cl_event *event);
/* The unfused program (lin_prep, lin_dequant, lin_qconvert, ...) for a
 * weight of kind q (NULL: dense). */
OCLF_HIDDEN oclf_status oclf_lin_unfused_program(oclf_context *ctx, oclf_dtype dtype,
                                                 const lin_qkind *q, oclf_program **prog);

#endif
