/*
 * The tuning database's records, shared by its parser (tunedb_parse.c), the
 * per-context chain (tunedb.c) and the merge-write (tunedb_write.c). Private
 * to those three files.
 *
 * Document (format 1):
 *   {"format": 1, "records": [
 *     {"device": {"vendor", "name", "driver", "type", ...}, "op", "dtype",
 *      "shape": {<op's dims by name>}, "choice": {"path", "params": {..}},
 *      "alternatives": [{"path", "params", "time_ns"}],      (optional)
 *      "time_ns", "unfused_time_ns", "default_time_ns", "copy_gbps",
 *      "tuner", "date"}]}
 *
 * "alternatives" carries the best parameters of the path not chosen, so a
 * caller that forces a path still gets tuned parameters for it. Records of
 * ops or dtypes this library does not know are ignored (a newer library may
 * have written them).
 */
#ifndef OCLF_TUNEDB_H
#define OCLF_TUNEDB_H

#include "internal.h"

#include <jansson.h>

typedef struct tune_alt {
    oclf_path path;
    oclf_params params;
} tune_alt;

typedef struct tune_rec {
    char vendor[128], name[256], driver[128], type[16];
    oclf_op op;
    oclf_dtype dtype;
    uint64_t dim[4];
    tune_alt choice;
    tune_alt alt; /* alt.path == AUTO: none */
} tune_rec;

/* One record: 1 usable; 0 for an op or dtype unknown here (ignored); -1
 * malformed. */
OCLF_HIDDEN int oclf_tunedb_parse_record(json_t *j, tune_rec *r);
/* Parses a whole document (text of `len` bytes from `file`, not
 * NUL-terminated) into malloc'd records. On failure records
 * "file:line:column: why" with oclf_fail and returns the status. */
OCLF_HIDDEN oclf_status oclf_tunedb_parse(const oclf_context *ctx, const char *file,
                                          const char *text, size_t len, tune_rec **recs,
                                          size_t *nrecs, size_t *malformed);

#endif
