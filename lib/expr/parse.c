/*
 * Expression parser: tokens, a recursive-descent parse into one syntax tree
 * per statement, then lowering into a shared graph (oclf_xgraph) with name
 * resolution, cycle detection and constant checks. Every error names the
 * line and column of the token at fault.
 *
 * Grammar (lowest precedence first):
 *   program := { name '=' expr ';' }
 *   expr    := compare [ '?' expr ':' expr ]
 *   compare := sum { ('<' | '<=' | '>' | '>=' | '==' | '!=') sum }
 *   sum     := product { ('+' | '-') product }
 *   product := unary { ('*' | '/') unary }
 *   unary   := ('-' | '+') unary | primary
 *   primary := number | name | name '(' expr { ',' expr } ')' | '(' expr ')'
 * Spaces, tabs and line ends separate tokens; '#' starts a comment that
 * runs to the end of its line (so "#define" and "#pragma" lines are
 * comments: no text of the caller reaches the kernel).
 */
#include "expr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int arity;
} xops[XOP_COUNT_] = {
    [XOP_INPUT] = {"in", 0},        [XOP_CONST] = {"const", 0},   [XOP_NEG] = {"neg", 1},
    [XOP_ADD] = {"add", 2},         [XOP_SUB] = {"sub", 2},       [XOP_MUL] = {"mul", 2},
    [XOP_DIV] = {"div", 2},         [XOP_LT] = {"lt", 2},         [XOP_LE] = {"le", 2},
    [XOP_GT] = {"gt", 2},           [XOP_GE] = {"ge", 2},         [XOP_EQ] = {"eq", 2},
    [XOP_NE] = {"ne", 2},           [XOP_SELECT] = {"select", 3}, [XOP_EXP] = {"exp", 1},
    [XOP_LOG] = {"log", 1},         [XOP_LOG1P] = {"log1p", 1},   [XOP_EXPM1] = {"expm1", 1},
    [XOP_SQRT] = {"sqrt", 1},       [XOP_RSQRT] = {"rsqrt", 1},   [XOP_ABS] = {"abs", 1},
    [XOP_TANH] = {"tanh", 1},       [XOP_ERF] = {"erf", 1},       [XOP_SIGMOID] = {"sigmoid", 1},
    [XOP_RELU] = {"relu", 1},       [XOP_GELU] = {"gelu", 1},     [XOP_GELU_TANH] = {"gelu_tanh", 1},
    [XOP_SILU] = {"silu", 1},       [XOP_MIN] = {"min", 2},       [XOP_MAX] = {"max", 2},
    [XOP_POW] = {"pow", 2},         [XOP_CLAMP] = {"clamp", 3},   [XOP_DROPOUT] = {"dropout", 2},
};

const char *oclf_xop_name(oclf_xop op) { return (unsigned)op < XOP_COUNT_ ? xops[op].name : "?"; }
int oclf_xop_arity(oclf_xop op) { return (unsigned)op < XOP_COUNT_ ? xops[op].arity : 0; }

/* ---- syntax trees ---------------------------------------------------------- */

typedef struct anode {
    int kind; /* 0 number, 1 name, 2 operation */
    oclf_xop op;
    int kid[3];
    float value;
    int name, name_len; /* byte range of a name in the source */
    int line, col;
} anode;

typedef struct stmt {
    int name, name_len, line, col;
    int root;
    int state; /* 0 unresolved, 1 resolving, 2 done */
    int node;
} stmt;

typedef struct parser {
    const char *src;
    size_t len, pos;
    int line, col;
    /* current token */
    int tk; /* 'n' name, '0' number, 'e' end, or the operator character;
               'l' <=, 'g' >=, '=' ==... see next_token */
    int tk_line, tk_col;
    size_t tk_start, tk_len;
    float tk_value;
    anode *a;
    int na, cap;
    stmt st[OCLF_EXPR_MAX_STATEMENTS];
    int nst;
    int depth;
    char *err;
    size_t err_len;
    int failed;
    const oclf_expr_decl *inputs;
    unsigned n_inputs;
    oclf_xgraph *g;
} parser;

static void fail_at(parser *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_at(parser *p, int line, int col, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = 1;
    int n = snprintf(p->err, p->err_len, "%d:%d: ", line, col);
    if (n < 0 || (size_t)n >= p->err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->err_len - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Shows a token in a message: names as written (up to the name limit),
 * anything else as one character. */
static void token_text(const parser *p, char *buf, size_t len)
{
    if (p->tk == 'e')
        snprintf(buf, len, "end of source");
    else if (p->tk == 'n' || p->tk == '0')
        snprintf(buf, len, "'%.*s'", (int)(p->tk_len > 32 ? 32 : p->tk_len), p->src + p->tk_start);
    else if (p->tk == 'l' || p->tk == 'g' || p->tk == 'q' || p->tk == 'x')
        snprintf(buf, len, "'%s'", p->tk == 'l' ? "<=" : p->tk == 'g' ? ">=" : p->tk == 'q' ? "==" : "!=");
    else if (p->tk >= 0x21 && p->tk < 0x7f)
        snprintf(buf, len, "'%c'", p->tk);
    else
        snprintf(buf, len, "byte 0x%02x", (unsigned)p->tk & 0xffu);
}

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_xdigit(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int peekc(const parser *p, size_t k) { return p->pos + k < p->len ? (unsigned char)p->src[p->pos + k] : -1; }

static void advance(parser *p, size_t k)
{
    for (size_t i = 0; i < k && p->pos < p->len; i++) {
        if (p->src[p->pos] == '\n') {
            p->line++;
            p->col = 1;
        } else {
            p->col++;
        }
        p->pos++;
    }
}

/* The extent of a number: decimal digits with an optional fraction and
 * exponent, or a C99 hex float (0x, hex digits, optional fraction, optional
 * binary exponent). 0 when malformed. */
static size_t number_extent(const parser *p)
{
    const int hex = peekc(p, 0) == '0' && (peekc(p, 1) == 'x' || peekc(p, 1) == 'X');
    int (*const is_mant)(int) = hex ? is_xdigit : is_digit;
    const int exp_mark = hex ? 'p' : 'e';
    size_t k = hex ? 2 : 0;
    int digits = 0;
    while (is_mant(peekc(p, k)))
        k++, digits++;
    if (peekc(p, k) == '.')
        for (k++; is_mant(peekc(p, k)); k++)
            digits++;
    if (!digits)
        return 0;
    if ((peekc(p, k) | 0x20) == exp_mark) { /* the exponent is decimal in both */
        k++;
        if (peekc(p, k) == '+' || peekc(p, k) == '-')
            k++;
        if (!is_digit(peekc(p, k)))
            return 0;
        while (is_digit(peekc(p, k)))
            k++;
    }
    /* "1x" or "2.5e3foo" is one bad token, not a number and a name. */
    if (is_alpha(peekc(p, k)) || is_digit(peekc(p, k)) || peekc(p, k) == '.')
        return 0;
    return k;
}

/* The signed decimal exponent from buf[i], saturated far beyond any
 * float's range. */
static long read_exponent(const char *buf, size_t n, size_t i)
{
    int sign = 1;
    long x = 0;
    if (i < n && (buf[i] == '+' || buf[i] == '-'))
        sign = buf[i++] == '-' ? -1 : 1;
    for (; i < n && is_digit(buf[i]); i++)
        if (x < 100000)
            x = x * 10 + (buf[i] - '0');
    return sign * x;
}

/* strtod in the C locale's spelling, written out so a caller's locale
 * (decimal comma) cannot change what a literal means. Decimal literals go
 * through strtod only after the separator is known to be '.': we convert
 * via a digits-and-exponent form that every locale reads the same. */
static double parse_number(const char *s, size_t n)
{
    char buf[128];
    if (n >= sizeof buf)
        n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (n > 1 && (buf[1] == 'x' || buf[1] == 'X')) {
        /* Hex float by hand: mantissa digits, then ldexp. */
        double m = 0.0;
        int e = 0;
        size_t i = 2;
        for (; i < n && is_xdigit(buf[i]); i++)
            m = m * 16.0 + (is_digit(buf[i]) ? buf[i] - '0' : (buf[i] | 0x20) - 'a' + 10);
        if (i < n && buf[i] == '.')
            for (i++; i < n && is_xdigit(buf[i]); i++, e -= 4)
                m = m * 16.0 + (is_digit(buf[i]) ? buf[i] - '0' : (buf[i] | 0x20) - 'a' + 10);
        if (i < n && (buf[i] | 0x20) == 'p')
            e += (int)read_exponent(buf, n, i + 1);
        return ldexp(m, e);
    }
    /* Decimal: digits and fraction as an integer mantissa string with an
     * adjusted exponent ("12.5e3" -> "125e2"), which has no separator. */
    char digits[160];
    size_t d = 0;
    long exp10 = 0;
    size_t i = 0;
    for (; i < n && is_digit(buf[i]); i++)
        if (d < 100)
            digits[d++] = buf[i];
        else
            exp10++;
    if (i < n && buf[i] == '.')
        for (i++; i < n && is_digit(buf[i]); i++)
            if (d < 100)
                digits[d++] = buf[i], exp10--;
    if (i < n && (buf[i] | 0x20) == 'e')
        exp10 += read_exponent(buf, n, i + 1);
    snprintf(digits + d, sizeof digits - d, "e%ld", exp10);
    return strtod(digits, NULL);
}

static void next_token(parser *p)
{
    for (;;) {
        int c = peekc(p, 0);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            advance(p, 1);
        else if (c == '#') /* comment to the end of the line */
            while (peekc(p, 0) != -1 && peekc(p, 0) != '\n')
                advance(p, 1);
        else
            break;
    }
    p->tk_line = p->line;
    p->tk_col = p->col;
    p->tk_start = p->pos;
    p->tk_len = 0;
    int c = peekc(p, 0);
    if (c == -1) {
        p->tk = 'e';
        return;
    }
    if (is_alpha(c)) {
        size_t k = 0;
        while (is_alpha(peekc(p, k)) || is_digit(peekc(p, k)))
            k++;
        p->tk = 'n';
        p->tk_len = k;
        advance(p, k);
        return;
    }
    if (is_digit(c) || (c == '.' && is_digit(peekc(p, 1)))) {
        size_t k = number_extent(p);
        if (!k) {
            size_t e = 0;
            while (is_alpha(peekc(p, e)) || is_digit(peekc(p, e)) || peekc(p, e) == '.')
                e++;
            p->tk = '0';
            p->tk_len = e;
            char t[40];
            token_text(p, t, sizeof t);
            fail_at(p, p->tk_line, p->tk_col, "malformed number %s", t);
            return;
        }
        p->tk = '0';
        p->tk_len = k;
        double v = parse_number(p->src + p->pos, k);
        if (!(fabs(v) <= (double)3.4028234663852886e38))
            fail_at(p, p->tk_line, p->tk_col, "number out of the float range");
        p->tk_value = (float)v;
        advance(p, k);
        return;
    }
    int two = peekc(p, 1) == '=';
    p->tk = c;
    if (two && (c == '<' || c == '>' || c == '=' || c == '!')) {
        p->tk = c == '<' ? 'l' : c == '>' ? 'g' : c == '=' ? 'q' : 'x';
        advance(p, 2);
        p->tk_len = 2;
        return;
    }
    if (!strchr("+-*/<>=?:;(),", c)) {
        char t[40];
        token_text(p, t, sizeof t);
        fail_at(p, p->tk_line, p->tk_col, "unexpected character %s", t);
    }
    p->tk_len = 1;
    advance(p, 1);
}

static int new_anode(parser *p, int kind)
{
    if (p->na >= p->cap) {
        fail_at(p, p->tk_line, p->tk_col, "expression too large");
        return 0;
    }
    anode *n = &p->a[p->na];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = p->tk_line;
    n->col = p->tk_col;
    n->kid[0] = n->kid[1] = n->kid[2] = -1;
    return p->na++;
}

static int op_node(parser *p, oclf_xop op, int line, int col, int a, int b, int c)
{
    int n = new_anode(p, 2);
    p->a[n].op = op;
    p->a[n].kid[0] = a;
    p->a[n].kid[1] = b;
    p->a[n].kid[2] = c;
    p->a[n].line = line;
    p->a[n].col = col;
    return n;
}

static void expect(parser *p, int tk, const char *what)
{
    if (p->failed)
        return;
    if (p->tk != tk) {
        char t[40];
        token_text(p, t, sizeof t);
        fail_at(p, p->tk_line, p->tk_col, "expected %s, found %s", what, t);
        return;
    }
    next_token(p);
}

static int parse_expr(parser *p);

static int lookup_fn(const char *s, size_t n)
{
    for (int op = XOP_EXP; op < XOP_COUNT_; op++)
        if (strlen(xops[op].name) == n && memcmp(xops[op].name, s, n) == 0)
            return op;
    return -1;
}

static int parse_primary(parser *p)
{
    if (p->failed)
        return 0;
    int line = p->tk_line, col = p->tk_col;
    if (p->tk == '0') {
        int n = new_anode(p, 0);
        p->a[n].value = p->tk_value;
        next_token(p);
        return n;
    }
    if (p->tk == '(') {
        next_token(p);
        int n = parse_expr(p);
        expect(p, ')', "')'");
        return n;
    }
    if (p->tk != 'n') {
        char t[40];
        token_text(p, t, sizeof t);
        fail_at(p, line, col, "expected a number, a name or '(', found %s", t);
        return 0;
    }
    size_t start = p->tk_start, len = p->tk_len;
    if (len > OCLF_EXPR_MAX_NAME) {
        fail_at(p, line, col, "name longer than %d characters", OCLF_EXPR_MAX_NAME);
        return 0;
    }
    next_token(p);
    if (p->tk != '(') {
        int n = new_anode(p, 1);
        p->a[n].name = (int)start;
        p->a[n].name_len = (int)len;
        p->a[n].line = line;
        p->a[n].col = col;
        return n;
    }
    int op = lookup_fn(p->src + start, len);
    if (op < 0) {
        fail_at(p, line, col, "unknown function '%.*s'", (int)len, p->src + start);
        return 0;
    }
    next_token(p);
    int kid[3] = {-1, -1, -1}, nargs = 0;
    if (p->tk != ')') {
        for (;;) {
            int e = parse_expr(p);
            if (p->failed)
                return 0;
            if (nargs < 3)
                kid[nargs] = e;
            nargs++;
            if (p->tk != ',')
                break;
            next_token(p);
        }
    }
    expect(p, ')', "',' or ')'");
    if (p->failed)
        return 0;
    if (nargs != xops[op].arity) {
        fail_at(p, line, col, "%s takes %d argument%s, not %d", xops[op].name, xops[op].arity,
                xops[op].arity == 1 ? "" : "s", nargs);
        return 0;
    }
    return op_node(p, (oclf_xop)op, line, col, kid[0], kid[1], kid[2]);
}

static int parse_unary(parser *p)
{
    if (p->failed)
        return 0;
    if (++p->depth > OCLF_EXPR_MAX_DEPTH) {
        fail_at(p, p->tk_line, p->tk_col, "nested more than %d deep", OCLF_EXPR_MAX_DEPTH);
        return 0;
    }
    int n;
    if (p->tk == '-' || p->tk == '+') {
        int neg = p->tk == '-', line = p->tk_line, col = p->tk_col;
        next_token(p);
        n = parse_unary(p);
        if (neg)
            n = op_node(p, XOP_NEG, line, col, n, -1, -1);
    } else {
        n = parse_primary(p);
    }
    p->depth--;
    return n;
}

/* The left-associative binary levels, loosest first: each token with the
 * operation it makes (token codes as next_token spells them). */
static const struct {
    const char *tokens;
    oclf_xop ops[6];
} levels[] = {
    {"<l>gqx", {XOP_LT, XOP_LE, XOP_GT, XOP_GE, XOP_EQ, XOP_NE}},
    {"+-", {XOP_ADD, XOP_SUB}},
    {"*/", {XOP_MUL, XOP_DIV}},
};
#define NLEVELS ((int)(sizeof levels / sizeof levels[0]))

static int parse_binary(parser *p, int level)
{
    if (level == NLEVELS)
        return parse_unary(p);
    int n = parse_binary(p, level + 1);
    for (;;) {
        if (p->failed || p->tk <= 0 || p->tk > 0x7f)
            return n;
        const char *t = strchr(levels[level].tokens, p->tk);
        if (!t)
            return n;
        const oclf_xop op = levels[level].ops[t - levels[level].tokens];
        int line = p->tk_line, col = p->tk_col;
        next_token(p);
        n = op_node(p, op, line, col, n, parse_binary(p, level + 1), -1);
    }
}

static int parse_expr(parser *p)
{
    if (p->failed)
        return 0;
    if (++p->depth > OCLF_EXPR_MAX_DEPTH) {
        fail_at(p, p->tk_line, p->tk_col, "nested more than %d deep", OCLF_EXPR_MAX_DEPTH);
        return 0;
    }
    int n = parse_binary(p, 0);
    if (!p->failed && p->tk == '?') {
        int line = p->tk_line, col = p->tk_col;
        next_token(p);
        int a = parse_expr(p);
        expect(p, ':', "':'");
        int b = parse_expr(p);
        n = op_node(p, XOP_SELECT, line, col, n, a, b);
    }
    p->depth--;
    return n;
}

/* ---- lowering into the graph -------------------------------------------- */

static int name_eq(const parser *p, int start, int len, const char *s)
{
    return s && strlen(s) == (size_t)len && memcmp(p->src + start, s, (size_t)len) == 0;
}

/* The graph node for (op, operands, value), shared with an equal one
 * (dropouts never: each is its own stream). */
static int graph_node(parser *p, const anode *at, oclf_xop op, const int *a, int input, float value)
{
    oclf_xgraph *g = p->g;
    if (op != XOP_DROPOUT) {
        for (int i = 0; i < g->n_nodes; i++) {
            const oclf_xnode *n = &g->node[i];
            if (n->op == op && n->input == input && n->a[0] == a[0] && n->a[1] == a[1] &&
                n->a[2] == a[2] && memcmp(&n->value, &value, sizeof value) == 0)
                return i;
        }
    }
    if (g->n_nodes >= OCLF_EXPR_MAX_NODES) {
        fail_at(p, at->line, at->col, "more than %d operations and operands", OCLF_EXPR_MAX_NODES);
        return 0;
    }
    oclf_xnode *n = &g->node[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->input = input;
    n->value = value;
    n->a[0] = a[0];
    n->a[1] = a[1];
    n->a[2] = a[2];
    return g->n_nodes++;
}

static int lower_stmt(parser *p, int s, int line, int col);

static int lower(parser *p, int ai)
{
    if (p->failed)
        return 0;
    const anode *at = &p->a[ai];
    int none[3] = {-1, -1, -1};
    if (at->kind == 0)
        return graph_node(p, at, XOP_CONST, none, -1, at->value);
    if (at->kind == 1) {
        for (unsigned i = 0; i < p->n_inputs; i++)
            if (name_eq(p, at->name, at->name_len, p->inputs[i].name))
                return graph_node(p, at, XOP_INPUT, none, (int)i, 0.0f);
        for (int s = 0; s < p->nst; s++)
            if (p->st[s].name_len == at->name_len &&
                memcmp(p->src + p->st[s].name, p->src + at->name, (size_t)at->name_len) == 0)
                return lower_stmt(p, s, at->line, at->col);
        fail_at(p, at->line, at->col, "unknown name '%.*s'", at->name_len, p->src + at->name);
        return 0;
    }
    int k[3] = {-1, -1, -1};
    for (int i = 0; i < xops[at->op].arity; i++)
        k[i] = lower(p, at->kid[i]);
    if (p->failed)
        return 0;
    if (at->op == XOP_DROPOUT) {
        /* p must be the same for every element: a literal or a scalar. */
        const oclf_xnode *pn = &p->g->node[k[1]];
        const anode *pa = &p->a[at->kid[1]];
        if (pn->op == XOP_CONST) {
            if (!(pn->value >= 0.0f && pn->value < 1.0f)) {
                fail_at(p, pa->line, pa->col, "dropout p must be in [0, 1)");
                return 0;
            }
        } else if (!(pn->op == XOP_INPUT && p->inputs[pn->input].kind == OCLF_EXPR_SCALAR)) {
            fail_at(p, pa->line, pa->col, "dropout p must be a number or a scalar input");
            return 0;
        }
    }
    return graph_node(p, at, at->op, k, -1, 0.0f);
}

static int lower_stmt(parser *p, int s, int line, int col)
{
    stmt *st = &p->st[s];
    if (st->state == 2)
        return st->node;
    if (st->state == 1) {
        fail_at(p, line, col, "'%.*s' depends on itself", st->name_len, p->src + st->name);
        return 0;
    }
    st->state = 1;
    int n = lower(p, st->root);
    st->state = 2;
    st->node = n;
    return n;
}

/* Post-order from the outputs, operands left to right: the numbering
 * depends on the graph alone, not on the order statements were written. */
static void visit(const oclf_xgraph *g, int k, int *remap, int *order, int *m)
{
    if (remap[k] >= 0)
        return;
    for (int a = 0; a < 3; a++)
        if (g->node[k].a[a] >= 0)
            visit(g, g->node[k].a[a], remap, order, m);
    remap[k] = *m;
    order[(*m)++] = k;
}

/* Keeps only what the outputs need, in evaluation order, numbers the
 * dropout streams and counts each node's readers. */
static void compact(oclf_xgraph *g)
{
    int remap[OCLF_EXPR_MAX_NODES], order[OCLF_EXPR_MAX_NODES], m = 0, streams = 0;
    for (int i = 0; i < g->n_nodes; i++)
        remap[i] = -1;
    for (int j = 0; j < g->n_outputs; j++)
        visit(g, g->output[j], remap, order, &m);
    oclf_xnode old[OCLF_EXPR_MAX_NODES];
    memcpy(old, g->node, (size_t)g->n_nodes * sizeof *old);
    for (int i = 0; i < m; i++) {
        oclf_xnode n = old[order[i]];
        for (int k = 0; k < 3; k++)
            if (n.a[k] >= 0)
                n.a[k] = remap[n.a[k]];
        n.uses = 0;
        if (n.op == XOP_DROPOUT)
            n.stream = streams++;
        g->node[i] = n;
    }
    g->n_nodes = m;
    g->n_dropouts = streams;
    for (int j = 0; j < g->n_outputs; j++)
        g->output[j] = remap[g->output[j]];
    for (int i = 0; i < m; i++)
        for (int k = 0; k < 3; k++)
            if (g->node[i].a[k] >= 0)
                g->node[g->node[i].a[k]].uses++;
}

static int valid_name(const char *s)
{
    if (!s || !is_alpha((unsigned char)s[0]))
        return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (!is_alpha((unsigned char)s[n]) && !is_digit((unsigned char)s[n]))
            return 0;
    return n <= OCLF_EXPR_MAX_NAME && lookup_fn(s, n) < 0;
}

/* Declarations are the caller's too: checked here so that the names the
 * source can use are exactly the valid, distinct ones. Errors at 1:1. */
static int check_decls(parser *p, const oclf_expr_decl *inputs, unsigned n_inputs,
                       const oclf_expr_decl *outputs, unsigned n_outputs)
{
    if (n_inputs > OCLF_EXPR_MAX_INPUTS || (n_inputs && !inputs)) {
        fail_at(p, 1, 1, n_inputs > OCLF_EXPR_MAX_INPUTS ? "more than 16 inputs" : "inputs is NULL");
        return -1;
    }
    if (n_outputs == 0 || n_outputs > OCLF_EXPR_MAX_OUTPUTS || !outputs) {
        fail_at(p, 1, 1, n_outputs == 0 ? "no outputs" : !outputs ? "outputs is NULL"
                                                                  : "more than 8 outputs");
        return -1;
    }
    for (unsigned i = 0; i < n_inputs + n_outputs; i++) {
        const oclf_expr_decl *d = i < n_inputs ? &inputs[i] : &outputs[i - n_inputs];
        const char *what = i < n_inputs ? "input" : "output";
        unsigned idx = i < n_inputs ? i : i - n_inputs;
        if (!valid_name(d->name)) {
            fail_at(p, 1, 1, "%s %u: name is not an identifier of up to %d characters (or is a function)",
                    what, idx, OCLF_EXPR_MAX_NAME);
            return -1;
        }
        if ((unsigned)d->kind > OCLF_EXPR_BITS ||
            (i >= n_inputs && d->kind != OCLF_EXPR_MATRIX && d->kind != OCLF_EXPR_BITS)) {
            fail_at(p, 1, 1, "%s '%s': bad kind %d", what, d->name, (int)d->kind);
            return -1;
        }
        if (d->kind != OCLF_EXPR_SCALAR && d->kind != OCLF_EXPR_BITS &&
            (unsigned)d->dtype >= OCLF_DTYPE_COUNT_) {
            fail_at(p, 1, 1, "%s '%s': bad dtype %d", what, d->name, (int)d->dtype);
            return -1;
        }
        for (unsigned j = 0; j < i; j++) {
            const oclf_expr_decl *e = j < n_inputs ? &inputs[j] : &outputs[j - n_inputs];
            if (strcmp(e->name, d->name) == 0) {
                fail_at(p, 1, 1, "'%s' is declared twice", d->name);
                return -1;
            }
        }
    }
    return 0;
}

int oclf_expr_parse(const char *source, size_t len, const oclf_expr_decl *inputs,
                    unsigned n_inputs, const oclf_expr_decl *outputs, unsigned n_outputs,
                    oclf_xgraph *g, char *err, size_t err_len)
{
    parser *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, err_len, "1:1: out of host memory");
        return -1;
    }
    p->src = source;
    p->len = len;
    p->line = p->col = 1;
    p->err = err;
    p->err_len = err_len;
    p->inputs = inputs;
    p->n_inputs = n_inputs;
    p->g = g;
    memset(g, 0, sizeof *g);
    if (err_len)
        err[0] = '\0';
    if (check_decls(p, inputs, n_inputs, outputs, n_outputs))
        goto done;
    if (len > OCLF_EXPR_MAX_SOURCE) {
        fail_at(p, 1, 1, "source longer than %d bytes", OCLF_EXPR_MAX_SOURCE);
        goto done;
    }
    p->cap = (int)len + 8;
    p->a = malloc((size_t)p->cap * sizeof *p->a);
    if (!p->a) {
        fail_at(p, 1, 1, "out of host memory");
        goto done;
    }
    /* Statements. */
    next_token(p);
    while (!p->failed && p->tk != 'e') {
        int line = p->tk_line, col = p->tk_col;
        if (p->tk != 'n') {
            char t[40];
            token_text(p, t, sizeof t);
            fail_at(p, line, col, "expected a statement 'name = expression;', found %s", t);
            break;
        }
        size_t start = p->tk_start, nlen = p->tk_len;
        if (nlen > OCLF_EXPR_MAX_NAME) {
            fail_at(p, line, col, "name longer than %d characters", OCLF_EXPR_MAX_NAME);
            break;
        }
        if (lookup_fn(source + start, nlen) >= 0) {
            fail_at(p, line, col, "'%.*s' is a function", (int)nlen, source + start);
            break;
        }
        for (unsigned i = 0; i < n_inputs; i++)
            if (name_eq(p, (int)start, (int)nlen, inputs[i].name))
                fail_at(p, line, col, "'%.*s' is an input", (int)nlen, source + start);
        for (int s = 0; s < p->nst; s++)
            if (p->st[s].name_len == (int)nlen &&
                memcmp(source + p->st[s].name, source + start, nlen) == 0)
                fail_at(p, line, col, "'%.*s' is assigned twice", (int)nlen, source + start);
        if (p->nst >= OCLF_EXPR_MAX_STATEMENTS)
            fail_at(p, line, col, "more than %d statements", OCLF_EXPR_MAX_STATEMENTS);
        if (p->failed)
            break;
        next_token(p);
        expect(p, '=', "'='");
        int root = parse_expr(p);
        expect(p, ';', "';'");
        if (p->failed)
            break;
        stmt *st = &p->st[p->nst++];
        st->name = (int)start;
        st->name_len = (int)nlen;
        st->line = line;
        st->col = col;
        st->root = root;
    }
    /* Every statement is checked, used or not; outputs pick the graph. */
    for (int s = 0; s < p->nst && !p->failed; s++)
        lower_stmt(p, s, p->st[s].line, p->st[s].col);
    for (unsigned j = 0; j < n_outputs && !p->failed; j++) {
        int found = -1;
        for (int s = 0; s < p->nst; s++)
            if (name_eq(p, p->st[s].name, p->st[s].name_len, outputs[j].name))
                found = s;
        if (found < 0)
            fail_at(p, p->line, p->col, "output '%s' has no statement", outputs[j].name);
        else
            g->output[g->n_outputs++] = p->st[found].node;
    }
    if (!p->failed)
        compact(g);
done:;
    int failed = p->failed;
    free(p->a);
    free(p);
    return failed ? -1 : 0;
}
