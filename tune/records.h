/*
 * The tuner's candidates and results, and what it writes from them: the
 * database record of a finished job and the closing table.
 */
#ifndef OCLF_RECORDS_H
#define OCLF_RECORDS_H

#include "opdesc.h"

#include <jansson.h>

#define TUNER_NAME "oclfuse-tune " OCLF_VERSION_STRING

/* One candidate of a job: a choice and what measuring it gave. */
typedef struct cand {
    oclf_choice ch;
    int is_default;
    int order;      /* position in op->space(): smaller is simpler */
    int seed;       /* a nearby record's choice, measured early */
    int state;      /* 0 not measured, 1 measured, -1 wrong or failing */
    double time_ns;
    char key[512];
} cand;

/* A finished job: the winner, the best of each path, the default's time. */
typedef struct result {
    const op_desc *op;
    oclf_dtype dtype;
    char shape[64];
    int have;
    cand best, fused, unfused;
    double default_ns;         /* the fused default, what dispatch runs untuned */
    double unfused_default_ns; /* the unfused path's default (<0: none measured) */
    double bytes;
    int measured, failed;
} result;

/* "NAME=V NAME=V" */
void params_text(const oclf_params *p, char *buf, size_t len);
/* The database record for a finished job. */
json_t *make_record(const result *r, const op_shape *shape, double copy_gbps);
/* The table printed at the end of a run. */
void closing_table(const result *res, int n, double copy_gbps);

#endif
