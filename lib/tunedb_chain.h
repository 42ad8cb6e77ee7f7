/*
 * The per-context chain of tuning databases as the layers above read it
 * (tunedb.c; the records themselves are private to the database's files,
 * tunedb.h).
 */
#ifndef OCLF_TUNEDB_CHAIN_H
#define OCLF_TUNEDB_CHAIN_H

#include "oplist.h"

/* A candidate record for one call, with where it came from. */
typedef struct oclf_tune_candidate {
    oclf_path path;     /* FUSED or UNFUSED */
    oclf_params params; /* the record's, to lay over the heuristic's */
    uint64_t dim[4];    /* the shape it was tuned for */
    int source;         /* index in the context's chain */
    int record;         /* index in that source's records */
    int level;          /* device match: 0 exact .. 3 type only */
    double distance;    /* shape distance (log2 units) */
} oclf_tune_candidate;

/* Loads the chain once per context (reporting damaged files), then writes
 * up to `max` matching records for (op, dtype, shape, path) in order of
 * preference. `path` AUTO takes each record's choice; FUSED or UNFUSED takes
 * the record's choice or alternative for that path. */
OCLF_HIDDEN int oclf_tune_candidates(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                     const oclf_shape *shape, oclf_path path,
                                     oclf_tune_candidate *out, int max);
/* "per-machine database /x/tuning.json" for a candidate's source. */
OCLF_HIDDEN const char *oclf_tune_source_name(const oclf_context *ctx, int source);
/* Drops the loaded chain. */
OCLF_HIDDEN void oclf_tunedb_free(oclf_context *ctx);

/* Parses a tuning-database document held in memory (the fuzzing entry). */
OCLF_HIDDEN oclf_status oclf_tunedb_parse_text(const char *text, size_t len, size_t *records);
#endif
