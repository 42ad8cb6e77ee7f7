/*
 * The tuner's parts: one job (tune/job.c) measures the candidates of one
 * (op, dtype, shape) in the order a strategy (tune/strategies.c) gives and
 * picks the winner; tune/oclfuse-tune.c reads the command line and runs
 * the jobs; tune/journal.c and tune/records.c write what they found.
 */
#ifndef OCLF_TUNER_H
#define OCLF_TUNER_H

#include "journal.h"
#include "opdesc.h"
#include "records.h"

#include <signal.h>

/* Candidates within TIE of the fastest compete on simplicity. */
#define TIE 0.03
/* SEEDS: the most records' choices a job measures first (strategy_seed). */
enum { MAX_CAND = 512, BATCH = 8, SEEDS = 4 };

/* Set by SIGINT/SIGTERM: stop after the current candidate. */
extern volatile sig_atomic_t tuner_interrupted;
/* Monotonic seconds. */
double tuner_now(void);

typedef struct tuner {
    op_env env;
    const char *strategy;
    const char *db; /* the database written, read for seeds */
    double min_time;
    int max_candidates; /* per job, the defaults included (0: no limit) */
    int first_pass;     /* measuring every job's defaults (run_job's defaults_only) */
    int quiet, tty, threads;
    journal j;
    double deadline, start, copy_gbps;
    /* Mean seconds a batch took to compile ahead (warm), over the run, of
     * the defaults' batches [0] and of the search's [1]: a job starts a
     * batch past its defaults only when its share of the budget still
     * holds one (the search's mean once there is one: the defaults often
     * come from the disk cache, the search's points seldom), since a cold
     * compile takes seconds and a brief run's share per job can be less. */
    double warm_s[2];
    int warms[2];
    int jobs_total, jobs_done;
    /* What the device was opened with, to open it again where a candidate
     * left it unusable (a GPU's fault ends its context): env_lost is set
     * by run_job, which then abandons its job; the run reopens and goes
     * on. lose_at: the test seam OCLF_TUNE_LOSE_DEVICE=N treats the Nth
     * candidate verified as such a fault (0: never); verified counts. */
    const char *platform, *device;
    oclf_context_options opts;
    int env_lost, lose_at, verified;
} tuner;

/* ---- one job (tune/job.c) ---- */

/* Measures the candidates of (op, dt, shape) within the job's share of the
 * budget and t->max_candidates into c (MAX_CAND entries) and fills r with
 * the winners. defaults_only: the first pass, which measures the defaults
 * of both paths (into r->default_ns, r->unfused_default_ns) and chooses
 * nothing. */
void run_job(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape, result *r,
             cand *c, int defaults_only);

/* ---- strategies (tune/strategies.c) ---- */

/* "exhaustive", "random" or "anneal". */
int strategy_known(const char *name);
/* Drops the points of c[1..n) that are the default (c[0]) itself, then
 * marks as seeds (cand.seed) the candidates that are the choices of the
 * records nearest this shape in the database being written (this device,
 * op and dtype; at most SEEDS), appending those outside c[0..n) that the
 * library takes here; returns the new count (at most max). */
int strategy_seed(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape, cand *c,
                  int n, int max);
/* The order of measurement of c[0..n): the default (c[0]) first, the
 * first point of each other path, the seeds, then list order
 * (exhaustive) or a shuffle with the default's neighbours brought
 * forward. Returns how many leading entries a job measures whatever its
 * budget (the default and each other path's first point); *front: how
 * many lead before the search proper (those and the seeds). */
int strategy_order(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                   const cand *c, int n, int *order, int *front);
/* anneal: the next point to measure, a neighbour of c[cur] (one parameter
 * or the path changed), else any unmeasured point; -1 when none is left. */
int anneal_next(const cand *c, int n, int cur);
/* anneal: after measuring c[next], the new current point; cools *temp. */
int anneal_step(const cand *c, int cur, int next, double *temp);

#endif
