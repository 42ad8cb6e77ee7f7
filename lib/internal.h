/*
 * Internal interfaces of liboclfuse: one header a layer, each including
 * the one below (error.h, device.h, context.h, program.h, oplist.h,
 * tunedb_chain.h, dispatch.h, launch.h); this file includes them all. A
 * file that needs only a lower layer may include its header alone. The
 * layers, bottom up:
 *
 *   error.c      statuses, the per-thread last error
 *   params.c     parameter sets (a choice's parameters by name)
 *   device.c     device facts, fingerprint, quirk defines (the only file that
 *                knows vendors)
 *   log.c        the context's log callback
 *   context.c    oclf_context: options, stats; creation and destruction
 *                (the only file that calls upward, to free what the layers
 *                above keep in the context)
 *   program.c    source assembly, build, in-memory and on-disk program
 *                caches, pooled kernels
 *   oplist.c     the op list as data (names, database dims) from ops.def
 *   tunedb_parse.c  tuning-database text -> records (pure)
 *   tunedb.c     the per-context chain of databases, record matching, check
 *   tunedb_write.c  the locked, atomic merge-write
 *   dispatch.c   (op, hooks, dtype, shape, choice) -> path + parameters +
 *                the op's config: the decision cache and the one decision
 *                function; calls the hooks the op hands in, never an op
 *   tuning.c     explain / resolve / parameter check for tools, by op name:
 *                the table of every family's hooks
 *   launch.c     argument checks shared by every op, kernel enqueue helpers
 *   ops/<op>.c   one file per operation family
 */
#ifndef OCLF_INTERNAL_H
#define OCLF_INTERNAL_H

#include "launch.h"

#endif /* OCLF_INTERNAL_H */
