/* libFuzzer target for the expression parser and code generator: any bytes
 * give a graph or a "line:column: what" error, never a crash, a leak or an
 * out-of-bounds read; and no text of the source reaches the generated
 * OpenCL (every declared name holds a 'Q', which generated code never
 * spells, and statement names are never emitted). */
#include "expr/expr.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const oclf_expr_decl in[6] = {
        {"Qx", OCLF_EXPR_MATRIX, OCLF_F32}, {"Qy", OCLF_EXPR_MATRIX, OCLF_F16},
        {"Qb", OCLF_EXPR_ROW, OCLF_BF16},   {"Qs", OCLF_EXPR_COL, OCLF_F32},
        {"Qp", OCLF_EXPR_SCALAR, OCLF_F32}, {"Qm", OCLF_EXPR_BITS, OCLF_F32},
    };
    /* The second output a matrix or, with bit 1 of the first byte, bits. */
    static const oclf_expr_decl outs[2][2] = {
        {{"Qo", OCLF_EXPR_MATRIX, OCLF_F32}, {"Qr", OCLF_EXPR_MATRIX, OCLF_BF16}},
        {{"Qo", OCLF_EXPR_MATRIX, OCLF_F32}, {"Qr", OCLF_EXPR_BITS, OCLF_F32}}};
    const oclf_expr_decl *out = outs[size && (data[0] & 2) ? 1 : 0];
    /* An exact-size copy, so reading past `size` is caught. */
    char *src = malloc(size ? size : 1);
    if (!src)
        return 0;
    if (size)
        memcpy(src, data, size);
    static oclf_xgraph g;
    char err[256];
    const unsigned n_out = size && (data[0] & 1) ? 2 : 1;
    if (oclf_expr_parse(src, size, in, 6, out, n_out, &g, err, sizeof err) != 0) {
        /* "line:column: what" */
        const char *p = err;
        if (*p < '1' || *p > '9')
            __builtin_trap();
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p++ != ':' || *p < '1' || *p > '9')
            __builtin_trap();
        while (*p >= '0' && *p <= '9')
            p++;
        if (p[0] != ':' || p[1] != ' ' || !p[2])
            __builtin_trap();
        free(src);
        return 0;
    }
    oclf_xbuf canon = {0}, gen = {0};
    oclf_expr_canonical_form(&g, in, 6, out, &canon);
    oclf_expr_codegen(&g, in, 6, out, &gen);
    if ((canon.s && strchr(canon.s, 'Q')) || (gen.s && strchr(gen.s, 'Q')))
        __builtin_trap();
    free(canon.s);
    free(gen.s);
    free(src);
    return 0;
}
