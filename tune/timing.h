/*
 * Timing shared by oclfuse-bench and oclfuse-tune, built to hold for calls
 * of a few microseconds.
 *
 * A sample is a batch: `reps` calls enqueued back to back and waited for
 * once, its span divided by reps. The batch is sized so that a sample lasts
 * well above the host timer's resolution and the jitter of one launch and
 * one wait (tens of microseconds on a busy CPU device), so a decode-size
 * call is measured rather than the machinery around it. Each sample records
 * host time (what a caller issuing calls back to back sees, launch path and
 * the gaps between an unfused path's kernels included) and device time from
 * event profiling (a marker before the batch to the end of its last call),
 * where the queue has CL_QUEUE_PROFILING_ENABLE.
 *
 * Several choices are measured by interleaving: sample 1 of each, then
 * sample 2 of each, ..., so a slow spell of a shared machine lands on all
 * of them alike; each round shuffles their order, so none always runs
 * after the same other one. The samples then give medians, bootstrap confidence
 * intervals and a Mann-Whitney U test between two choices.
 */
#ifndef OCLF_TIMING_H
#define OCLF_TIMING_H

#include "opdesc.h"

enum { TM_MAX_SAMPLES = 64, TM_MAX_CHOICES = 8 };

typedef struct tm_plan {
    double sample_ns; /* a sample lasts at least this long (host time) */
    int samples;      /* samples per choice, at most TM_MAX_SAMPLES */
    int warmups;      /* untimed calls per choice before the first sample */
    /* Host time per choice the samples may take (0: no limit); calls so slow
     * that `samples` of them would exceed it get fewer samples, never
     * fewer than min_samples. */
    double budget_ns;
    /* The floor under budget_ns (0: 5). The tuner's screening takes 3: a
     * candidate of a call of hundreds of ms then costs a few calls, so a
     * job's share of the budget reaches more than a handful of them. */
    int min_samples;
    /* One choice only (0: none): a first batch slower than this per call
     * ends the measurement there, with that one sample. The tuner's
     * screening passes twice the best time so far, so a candidate that is
     * plainly losing costs one call, not a handful (an unfused
     * 2048 x 4096 x 4096 linear takes 8 s a call here). */
    double cutoff_ns;
} tm_plan;

typedef struct tm_series {
    int n;                       /* samples taken */
    int reps;                    /* calls per sample */
    double host[TM_MAX_SAMPLES]; /* ns per call, host span of the batch */
    double dev[TM_MAX_SAMPLES];  /* ns per call from event profiling; <0 when unavailable */
} tm_series;

/* Measures k choices (1 to TM_MAX_CHOICES) on one instance, interleaved
 * in an order shuffled per round, into out[0..k). Returns -1 when a call
 * fails (index of the failing choice in *failed) or k is out of range,
 * else 0.
 * With one choice there is nothing to interleave, so the last calibration
 * batches, already of the final size, count as its first samples: a call
 * that lasts longer than a sample is then timed in `samples` calls plus
 * one or two, not plus two more. */
int tm_measure(const op_env *env, const op_desc *op, void *inst, const oclf_choice *const *choices,
               int k, const tm_plan *plan, tm_series *out, int *failed);

/* The clock every measurement reads, in ns (NULL: CLOCK_MONOTONIC again).
 * Tests put a counter there that a stand-in op advances by a set amount
 * per call, so what they assert about batch sizes and sample counts holds
 * however loaded the machine is. Not thread-safe: set it before measuring. */
void tm_set_clock(double (*fn)(void));

/* Median of v[0..n) (v is left as it was). */
double tm_median(const double *v, int n);
/* 95% bootstrap interval of the median of v[0..n). */
void tm_median_ci(const double *v, int n, double *lo, double *hi);
/* 95% bootstrap interval of median(a) / median(b). */
void tm_ratio_ci(const double *a, int na, const double *b, int nb, double *lo, double *hi);
/* Median of a[i] / b[i] over samples taken side by side (sample i of both
 * in the same round), with its 95% bootstrap interval: a slow spell that
 * lasts a round cancels in the ratio, so this is steadier than the ratio of
 * the medians when the machine's speed drifts. */
double tm_paired_ratio(const double *a, const double *b, int n, double *lo, double *hi);
/* Mann-Whitney U test, normal approximation with tie and continuity
 * corrections: the one-sided p-value of "a tends to be smaller than b". */
double tm_mwu_less(const double *a, int na, const double *b, int nb);
/* The same, two-sided: "a and b differ". */
double tm_mwu_differ(const double *a, int na, const double *b, int nb);

/* Does a (a candidate's samples) beat b (the default's), measured side by
 * side, clearly enough to replace it? All three must hold: a one-sided
 * Mann-Whitney U test finds a smaller at p < p_max; a's median is more than
 * `margin` (a fraction) below b's; and the 95% bootstrap intervals of the
 * two medians do not overlap (a's upper end below b's lower end). The test
 * alone passes on 15 samples that straddle each other where a's are a
 * little lower in most rounds; the intervals say the medians themselves
 * are apart at the noise the samples show. The figures go to *v. */
typedef struct tm_verdict {
    double a_med, b_med, a_lo, a_hi, b_lo, b_hi; /* medians and their 95% intervals */
    double p;                                    /* one-sided U test, a < b */
    double ratio_lo, ratio_hi;                   /* 95% interval of a_med / b_med */
    int wins;                                    /* all three held */
    const char *why;                             /* which failed, or that all held */
} tm_verdict;
int tm_clear_win(const double *a, int na, const double *b, int nb, double p_max, double margin,
                 tm_verdict *v);

/* Host microseconds per call spent issuing `reps`-call batches of `choice`
 * (the enqueue loop alone; the wait is outside the clock): argument checks,
 * dispatch and the enqueues. The queue is held behind a user event while
 * the batch is issued, so no kernel competes with the host for the cores.
 * Median of `batches` batches; <0 on failure. */
double tm_call_us(const op_env *env, const op_desc *op, void *inst, const oclf_choice *choice,
                  int reps, int batches);
/* The same for a plain OpenCL launch of a one-work-item kernel of `nargs`
 * arguments (1 to 32), each set before every clEnqueueNDRangeKernel: the
 * floor a call is compared with. POCL copies every argument on each set
 * and launch, so the count matters (rms_norm's kernel takes 14). */
double tm_plain_launch_us(const op_env *env, int nargs, int reps, int batches);

#endif
