/*
 * Elementwise expressions: the parsed graph shared by the parser
 * (parse.c), the code generator (codegen.c) and the entry points
 * (ops/expr.c). Pure C: no OpenCL, no context, so the parser can be fuzzed
 * on its own.
 */
#ifndef OCLF_EXPR_H
#define OCLF_EXPR_H

#include "oclfuse.h"

#include <stddef.h>

#define OCLF_EXPR_MAX_SOURCE 16384
#define OCLF_EXPR_MAX_STATEMENTS 64
#define OCLF_EXPR_MAX_NODES 256
#define OCLF_EXPR_MAX_INPUTS 16
#define OCLF_EXPR_MAX_OUTPUTS 8
#define OCLF_EXPR_MAX_NAME 31
#define OCLF_EXPR_MAX_DEPTH 64

/* Node operations. Leaves first; the order is part of the canonical form. */
typedef enum oclf_xop {
    XOP_INPUT, XOP_CONST,
    XOP_NEG, XOP_ADD, XOP_SUB, XOP_MUL, XOP_DIV,
    XOP_LT, XOP_LE, XOP_GT, XOP_GE, XOP_EQ, XOP_NE, XOP_SELECT,
    XOP_EXP, XOP_LOG, XOP_LOG1P, XOP_EXPM1, XOP_SQRT, XOP_RSQRT, XOP_ABS, XOP_TANH,
    XOP_ERF, XOP_SIGMOID, XOP_RELU, XOP_GELU, XOP_GELU_TANH, XOP_SILU,
    XOP_MIN, XOP_MAX, XOP_POW, XOP_CLAMP, XOP_DROPOUT,
    XOP_COUNT_
} oclf_xop;

/* Canonical spelling of an operation ("add", "exp", ...). */
const char *oclf_xop_name(oclf_xop op);
/* Operands of an operation (0 for leaves). */
int oclf_xop_arity(oclf_xop op);

/* A node of the graph; operands always have smaller indices, so index
 * order is an evaluation order. */
typedef struct oclf_xnode {
    oclf_xop op;
    int a[3];      /* operand nodes */
    int input;     /* XOP_INPUT: index into the declared inputs */
    float value;   /* XOP_CONST */
    int stream;    /* XOP_DROPOUT: its counter stream, 0, 1, ... */
    int uses;      /* operations (not outputs) that read it */
} oclf_xnode;

/* A checked expression: only the nodes the outputs need, shared where
 * equal (dropouts excepted: each draws its own stream). */
typedef struct oclf_xgraph {
    int n_nodes;
    oclf_xnode node[OCLF_EXPR_MAX_NODES];
    int n_outputs;
    int output[OCLF_EXPR_MAX_OUTPUTS]; /* node of each output */
    int n_dropouts;
} oclf_xgraph;

/* Parses `source` against the declarations. 0 on success; else -1 with
 * "line:column: what" in err. Never reads past `len` bytes. */
int oclf_expr_parse(const char *source, size_t len, const oclf_expr_decl *inputs,
                    unsigned n_inputs, const oclf_expr_decl *outputs, unsigned n_outputs,
                    oclf_xgraph *g, char *err, size_t err_len);

/* Growable text for the canonical form and the generated source. */
typedef struct oclf_xbuf {
    char *s;
    size_t len, cap;
    int failed; /* out of memory */
} oclf_xbuf;
void oclf_xbuf_printf(oclf_xbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Canonical form: inputs' kinds and dtypes, nodes, outputs' dtypes; equal
 * for expressions that compute the same graph whatever their names. */
void oclf_expr_canonical_form(const oclf_xgraph *g, const oclf_expr_decl *inputs,
                              unsigned n_inputs, const oclf_expr_decl *outputs, oclf_xbuf *out);
/* 1 when a declaration is a bit matrix (OCLF_EXPR_BITS): the fused kernel
 * then works over whole 32-bit words. */
int oclf_expr_has_bits(const oclf_expr_decl *inputs, unsigned n_inputs,
                       const oclf_expr_decl *outputs, unsigned n_outputs);
/* 1 when node k is written to a bits output (the unfused path keeps its
 * fp32 temporary for expr_pack). */
int oclf_expr_bits_output_node(const oclf_xgraph *g, const oclf_expr_decl *outputs, int k);
/* OpenCL source: kernel expr_fused, kernels expr_node<k> for the unfused
 * path (one per operation), expr_leaves (outputs that are leaves) and,
 * with a bits output, expr_pack (every bits output's words). */
void oclf_expr_codegen(const oclf_xgraph *g, const oclf_expr_decl *inputs, unsigned n_inputs,
                       const oclf_expr_decl *outputs, oclf_xbuf *out);

#endif /* OCLF_EXPR_H */
