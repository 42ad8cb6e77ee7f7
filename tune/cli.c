/* The shared command-line parser of oclfuse-bench and oclfuse-tune. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int set_value(const char *prog, const cli_opt *o, const char *v)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_STRING:
        *(const char **)o->dst = v;
        return 0;
    case CLI_INT: {
        const long x = strtol(v, &end, 10);
        if (end == v || *end || errno || x < o->lo || x > o->hi) {
            if (o->hi == LONG_MAX)
                fprintf(stderr, "%s: %s takes a count of %ld or more (got '%s')\n", prog, o->name,
                        o->lo, v);
            else
                fprintf(stderr, "%s: %s takes %ld to %ld (got '%s')\n", prog, o->name, o->lo,
                        o->hi, v);
            return -1;
        }
        *(int *)o->dst = (int)x;
        return 0;
    }
    case CLI_DOUBLE: {
        const double x = strtod(v, &end);
        if (end == v || *end || errno || !(x >= (double)o->lo)) {
            fprintf(stderr, "%s: %s takes a number of %ld or more (got '%s')\n", prog, o->name,
                    o->lo, v);
            return -1;
        }
        *(double *)o->dst = x;
        return 0;
    }
    default:
        return -1;
    }
}

int cli_parse(const char *prog, int argc, char **argv, const cli_opt *opts, int n,
              void (*usage)(FILE *f))
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        const cli_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (strcmp(a, opts[k].name) == 0)
                o = &opts[k];
        if (!o) {
            fprintf(stderr, "%s: unknown option %s\n", prog, a);
            usage(stderr);
            return 2;
        }
        if (o->given)
            *o->given = 1;
        if (o->kind == CLI_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", prog, a);
            return 2;
        }
        if (set_value(prog, o, argv[++i]) != 0)
            return 2;
    }
    return -1;
}
