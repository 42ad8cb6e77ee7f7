/*
 * The tuner's journal: one JSON line per measurement and per confirmation,
 * appended and flushed as each is made, beside the database
 * (`<db>.journal`). --resume reads the measurements back by key so an
 * interrupted run does not repeat them.
 */
#ifndef OCLF_JOURNAL_H
#define OCLF_JOURNAL_H

#include "oclfuse.h"

#include <jansson.h>
#include <stdio.h>

typedef struct journal {
    FILE *f;
    json_t *done; /* key -> {"ok", "time_ns"}: this run's and a resumed journal's */
} journal;

/* The outcome of the confirmation rule for one job. */
typedef struct confirmation {
    double win_ns, def_ns;      /* medians, measured interleaved */
    double ratio_lo, ratio_hi;  /* 95% bootstrap interval of win/def */
    double win_lo, win_hi;      /* 95% bootstrap interval of each median */
    double def_lo, def_hi;
    double p;                   /* one-sided Mann-Whitney U: win < def */
    int samples;                /* per side */
    int replaced;               /* the winner replaces the default */
    const char *why;
} confirmation;

/* Opens `path` for appending (resume) or afresh, creating its folder;
 * with resume, loads earlier measurements into j->done. */
void journal_open(journal *j, const char *path, int resume);
void journal_close(journal *j);
/* One measurement of a candidate; error: why it is wrong or failed (or NULL). */
void journal_add(journal *j, const char *key, oclf_path path, const oclf_params *params, int ok,
                 double time_ns, const char *error);
/* One confirmation: the winner's and the default's keys and the outcome. */
void journal_confirm(journal *j, const char *win_key, const char *def_key,
                     const confirmation *cf);

/* Shared with the records the tuner writes. */
json_t *params_json(const oclf_params *p);
const char *path_name(oclf_path p);

#endif
