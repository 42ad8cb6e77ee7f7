/*
 * The context (context.c) and its log (log.c).
 */
#ifndef OCLF_CONTEXT_H
#define OCLF_CONTEXT_H

#include "device.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct oclf_program oclf_program;
struct oclf_tunedb;
struct oclf_decisions;
/* source: a cl/ file name, or a generated program's key with its text in
 * `generated` (NULL for files). */
typedef void (*oclf_program_sink_fn)(void *user, const char *source, const char *generated,
                                     const char *options);

struct oclf_context {
    cl_context cl;
    cl_device_id device;
    oclf_device_info info;
    char fingerprint[600];
    char quirk_options[256];

    char *kernel_dir; /* NULL: embedded sources */
    char *cache_dir;  /* NULL: no disk cache */
    char *tuning_db;  /* NULL: none given */
    int no_tuning_db;
    int validate;
    oclf_log_fn log;
    void *log_user;

    oclf_program_sink_fn program_sink; /* see oclf_context_set_program_sink */
    void *program_sink_user;

    pthread_mutex_t lock; /* guards programs, tunedb, decisions */
    pthread_cond_t built; /* a program finished building */
    oclf_program *programs;
    struct oclf_tunedb *tunedb;       /* the loaded chain (tunedb.c) */
    struct oclf_decisions *decisions; /* the decision cache (dispatch.c) */

    atomic_uint_fast64_t n_compiled, n_from_disk, n_hits, n_rejected, n_enqueued;
    atomic_uint_fast64_t n_tune_lookups, n_tune_hits, n_db_errors;
};

/* Sends a line to the context's log callback, if any (log.c). */
OCLF_HIDDEN void oclf_log(const oclf_context *ctx, oclf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#endif
