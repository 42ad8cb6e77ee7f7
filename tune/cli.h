/*
 * The command line of oclfuse-bench and oclfuse-tune: one parser over a
 * table of options, so both tools take values, flags and numbers the same
 * way and say the same things about a wrong one.
 */
#ifndef OCLF_CLI_H
#define OCLF_CLI_H

#include <stdio.h>

typedef enum cli_kind {
    CLI_STRING, /* --name VALUE into a const char * */
    CLI_FLAG,   /* --name: the int set to 1 */
    CLI_INT,    /* --name N into an int, within [lo, hi] */
    CLI_DOUBLE  /* --name X into a double, at least lo */
} cli_kind;

typedef struct cli_opt {
    const char *name; /* "--ops" */
    cli_kind kind;
    void *dst;        /* const char **, int * or double *, by kind */
    long lo, hi;      /* CLI_INT's range; CLI_DOUBLE's lower bound is lo */
    int *given;       /* may be NULL: set to 1 when the option appears */
} cli_opt;

/* Reads argv against the n options. -1: go on; otherwise the status to exit
 * with: 0 after --help or -h (usage on stdout); 2 for an unknown option (a
 * line naming it, then usage, on stderr), a missing value or a number that
 * is not one or out of range (a line, on stderr); lines start with `prog`. */
int cli_parse(const char *prog, int argc, char **argv, const cli_opt *opts, int n,
              void (*usage)(FILE *f));

#endif
