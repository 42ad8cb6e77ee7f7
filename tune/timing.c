/* Batched, interleaved timing and the statistics over its samples. */
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_REPS = 4096, BOOT = 2000 };

static double monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double (*clock_ns)(void) = monotonic_ns;

void tm_set_clock(double (*fn)(void)) { clock_ns = fn ? fn : monotonic_ns; }

static double now_ns(void) { return clock_ns(); }

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static cl_ulong profile(cl_event e, cl_profiling_info what, int *ok)
{
    cl_ulong v = 0;
    if (clGetEventProfilingInfo(e, what, sizeof v, &v, NULL) != CL_SUCCESS)
        *ok = 0;
    return v;
}

/* One batch of reps calls: host ns per call into *host, device ns per call
 * into *dev (<0 where profiling is unavailable). 0, or -1 when a call fails. */
static int batch(const op_env *env, const op_desc *op, void *inst, const oclf_choice *choice,
                 int reps, double *host, double *dev)
{
    cl_event mark = NULL, last = NULL;
    /* The marker's end is when the queue reached the batch on the device. */
    if (clEnqueueMarkerWithWaitList(env->queue, 0, NULL, &mark) != CL_SUCCESS)
        mark = NULL;
    int rc = 0;
    const double t0 = now_ns();
    for (int i = 0; i < reps && rc == 0; i++) {
        cl_event *ev = i == reps - 1 ? &last : NULL;
        if (op->run(env, inst, choice, ev) != OCLF_SUCCESS)
            rc = -1;
    }
    if (clFinish(env->queue) != CL_SUCCESS)
        rc = -1;
    *host = (now_ns() - t0) / reps;
    *dev = -1;
    if (rc == 0 && mark && last) {
        int ok = 1;
        const cl_ulong a = profile(mark, CL_PROFILING_COMMAND_END, &ok);
        const cl_ulong b = profile(last, CL_PROFILING_COMMAND_END, &ok);
        if (ok && b > a)
            *dev = (double)(b - a) / reps;
    }
    if (mark)
        clReleaseEvent(mark);
    if (last)
        clReleaseEvent(last);
    return rc;
}

/* xorshift64: the deterministic draws of the round order and of the
 * bootstrap resampling (the same samples give the same interval). */
static unsigned draw(uint64_t *s, int n)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (unsigned)(*s % (uint64_t)n);
}

/* Calls per sample so that one sample lasts plan->sample_ns. The last
 * batches of the final size (up to 2, the latest last) go to keep_host and
 * keep_dev, their count to *kept: samples like any other. Returns -1 when
 * a call fails, 1 when the first call was over cutoff_ns (that one call
 * is then the only sample), else 0. */
static int calibrate(const op_env *env, const op_desc *op, void *inst, const oclf_choice *choice,
                     const tm_plan *plan, double cutoff_ns, int *reps, double *per_call,
                     double *keep_host, double *keep_dev, int *kept)
{
    double host, dev;
    int r = 1, long_enough = 0;
    *kept = 0;
    for (int round = 0; round < 10; round++) {
        if (batch(env, op, inst, choice, r, &host, &dev) != 0)
            return -1;
        if (*kept == 2) {
            keep_host[0] = keep_host[1], keep_dev[0] = keep_dev[1];
            *kept = 1;
        }
        keep_host[*kept] = host, keep_dev[*kept] = dev;
        ++*kept;
        /* Plainly slower than the best so far, in a call long enough that
         * batching would change nothing: one sample says so. */
        if (cutoff_ns > 0 && round == 0 && host > cutoff_ns && host >= plan->sample_ns) {
            *reps = 1;
            *per_call = host;
            return 1;
        }
        const double span = host * r;
        /* Two batches in a row must last long enough: one slowed by a
         * passing stall of a shared machine would otherwise fix a batch
         * size whose later samples are a fraction of the target. */
        if (r >= MAX_REPS || (span >= 0.8 * plan->sample_ns && ++long_enough == 2))
            break;
        if (span >= 0.8 * plan->sample_ns)
            continue;
        long_enough = 0;
        /* Aim a little over the target: a short batch overstates the per-call
         * cost (one wait shared by fewer calls), so the first estimate is low. */
        double want = 1.2 * plan->sample_ns / (host > 1 ? host : 1);
        r = want > MAX_REPS ? MAX_REPS : want < r + 1 ? r + 1 : (int)want;
        *kept = 0; /* the next batch is of another size */
    }
    *reps = r;
    *per_call = host;
    return 0;
}

/* Interleaved samples shorter than this start after an untimed batch. */
#define WARM_SPAN_NS 1e9

int tm_measure(const op_env *env, const op_desc *op, void *inst, const oclf_choice *const *choices,
               int k, const tm_plan *plan, tm_series *out, int *failed)
{
    int samples = plan->samples < 1               ? 1
                  : plan->samples > TM_MAX_SAMPLES ? TM_MAX_SAMPLES
                                                   : plan->samples;
    if (k < 1 || k > TM_MAX_CHOICES) {
        if (failed)
            *failed = 0;
        return -1;
    }
    const int floor = plan->min_samples > 0 ? plan->min_samples : 5;
    int first = 0; /* samples already taken (one choice: from calibrating) */
    int c = 0, rc = -1;
    double call_ns[TM_MAX_CHOICES] = {0}; /* calibrated */
    for (; c < k; c++) {
        double kh[2], kd[2];
        int kept;
        memset(&out[c], 0, sizeof out[c]);
        for (int w = 0; w < plan->warmups; w++)
            if (op->run(env, inst, choices[c], NULL) != OCLF_SUCCESS)
                goto done;
        if (clFinish(env->queue) != CL_SUCCESS)
            goto done;
        const int cal = calibrate(env, op, inst, choices[c], plan, k == 1 ? plan->cutoff_ns : 0,
                                  &out[c].reps, &call_ns[c], kh, kd, &kept);
        if (cal < 0)
            goto done;
        if (cal == 1) {
            out[c].host[0] = kh[0], out[c].dev[0] = kd[0];
            out[c].n = 1;
            rc = 0;
            goto done;
        }
        if (k == 1) {
            for (int i = 0; i < kept && i < samples; i++)
                out[c].host[i] = kh[i], out[c].dev[i] = kd[i];
            first = out[c].n = kept < samples ? kept : samples;
        }
        const double sample = call_ns[c] * out[c].reps;
        if (plan->budget_ns > 0 && sample * samples > plan->budget_ns) {
            const int fit = (int)(plan->budget_ns / sample);
            samples = fit > floor ? fit : samples < floor ? samples : floor;
        }
    }
    /* Each round runs the choices in a fresh order. In a fixed order a
     * choice always follows the same other one and pays for what that one
     * left behind (dirty cache lines of its outputs to write back, a cold
     * program), a bias of several percent between two choices that run the
     * same kernel. Shuffled rounds spread it over all of them, and the
     * per-round paired ratios cancel it in their median. The untimed batch
     * below removes most of it for short calls; samples of a second or
     * more go without one, and for them the shuffle is what is left. The
     * shuffle is seeded, so a run is repeatable. */
    uint64_t seed = 0x2545f4914f6cdd1dull;
    int order[TM_MAX_CHOICES];
    for (int i = 0; i < k; i++)
        order[i] = i;
    for (int s = first; s < samples; s++) {
        for (int i = k - 1; i > 0; i--) {
            const int j = (int)draw(&seed, i + 1), tmp = order[i];
            order[i] = order[j], order[j] = tmp;
        }
        for (int i = 0; i < k; i++) {
            c = order[i];
            tm_series *t = &out[c];
            /* Interleaved samples start after an untimed batch of their
             * own: whichever path came right after the GEMM library's turn
             * paid for it (caches full of its temporaries, which it also
             * frees), and auto, next in each round, ran 4-8% behind the
             * same kernel as fused at 1 x 4096 x 4096 and 16 x 4096 x 4096
             * (fused first: the other way round). One untimed call was not
             * enough (still 1.05 and 1.06); a batch levels them (0.99-1.00
             * both ways round). That costs milliseconds, so samples of a
             * second or more go without. */
            double warm_host, warm_dev;
            if (k > 1 && t->reps * call_ns[c] < WARM_SPAN_NS &&
                batch(env, op, inst, choices[c], t->reps, &warm_host, &warm_dev) != 0)
                goto done;
            if (batch(env, op, inst, choices[c], t->reps, &t->host[s], &t->dev[s]) != 0)
                goto done;
            t->n = s + 1;
        }
    }
    rc = 0;
done:
    if (rc != 0 && failed)
        *failed = c < k ? c : 0;
    return rc;
}

double tm_median(const double *v, int n)
{
    if (n <= 0)
        return -1;
    double tmp[TM_MAX_SAMPLES];
    if (n > TM_MAX_SAMPLES)
        n = TM_MAX_SAMPLES;
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}


static double resampled_median(const double *v, int n, uint64_t *s)
{
    double r[TM_MAX_SAMPLES];
    for (int i = 0; i < n; i++)
        r[i] = v[draw(s, n)];
    return tm_median(r, n);
}

/* The 2.5% and 97.5% points of stat[0..BOOT). */
static void percentiles(double *stat, double *lo, double *hi)
{
    qsort(stat, BOOT, sizeof *stat, cmp_double);
    *lo = stat[BOOT / 40];
    *hi = stat[BOOT - 1 - BOOT / 40];
}

void tm_median_ci(const double *v, int n, double *lo, double *hi)
{
    if (n > TM_MAX_SAMPLES)
        n = TM_MAX_SAMPLES;
    static double stat[BOOT];
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int b = 0; b < BOOT; b++)
        stat[b] = resampled_median(v, n, &s);
    percentiles(stat, lo, hi);
}

void tm_ratio_ci(const double *a, int na, const double *b, int nb, double *lo, double *hi)
{
    if (na > TM_MAX_SAMPLES)
        na = TM_MAX_SAMPLES;
    if (nb > TM_MAX_SAMPLES)
        nb = TM_MAX_SAMPLES;
    static double stat[BOOT];
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < BOOT; i++)
        stat[i] = resampled_median(a, na, &s) / resampled_median(b, nb, &s);
    percentiles(stat, lo, hi);
}

double tm_paired_ratio(const double *a, const double *b, int n, double *lo, double *hi)
{
    if (n > TM_MAX_SAMPLES)
        n = TM_MAX_SAMPLES;
    double r[TM_MAX_SAMPLES];
    for (int i = 0; i < n; i++)
        r[i] = a[i] / b[i];
    tm_median_ci(r, n, lo, hi);
    return tm_median(r, n);
}

/* z of U for "a smaller than b": positive when a's ranks are low. */
static double mwu_z(const double *a, int na, const double *b, int nb)
{
    /* U counts pairs with a < b (ties count half); the tie correction
     * shrinks the variance by the tied groups of the pooled sample. */
    double u = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            u += a[i] < b[j] ? 1 : a[i] == b[j] ? 0.5 : 0;
    const int n = na + nb;
    double pooled[2 * TM_MAX_SAMPLES];
    memcpy(pooled, a, (size_t)na * sizeof *a);
    memcpy(pooled + na, b, (size_t)nb * sizeof *b);
    qsort(pooled, (size_t)n, sizeof *pooled, cmp_double);
    double ties = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && pooled[j] == pooled[i])
            j++;
        const double t = j - i;
        ties += t * t * t - t;
        i = j;
    }
    const double mean = 0.5 * na * nb;
    const double var = na * nb / 12.0 * ((n + 1) - ties / ((double)n * (n - 1)));
    if (var <= 0)
        return 0;
    const double d = u - mean;
    const double cc = d > 0 ? 0.5 : d < 0 ? -0.5 : 0; /* continuity */
    return (d - cc) / sqrt(var);
}

double tm_mwu_less(const double *a, int na, const double *b, int nb)
{
    if (na < 1 || nb < 1 || na > TM_MAX_SAMPLES || nb > TM_MAX_SAMPLES)
        return 1;
    return 0.5 * erfc(mwu_z(a, na, b, nb) / sqrt(2.0));
}

double tm_mwu_differ(const double *a, int na, const double *b, int nb)
{
    if (na < 1 || nb < 1 || na > TM_MAX_SAMPLES || nb > TM_MAX_SAMPLES)
        return 1;
    return erfc(fabs(mwu_z(a, na, b, nb)) / sqrt(2.0));
}

int tm_clear_win(const double *a, int na, const double *b, int nb, double p_max, double margin,
                 tm_verdict *v)
{
    v->a_med = tm_median(a, na);
    v->b_med = tm_median(b, nb);
    tm_median_ci(a, na, &v->a_lo, &v->a_hi);
    tm_median_ci(b, nb, &v->b_lo, &v->b_hi);
    tm_ratio_ci(a, na, b, nb, &v->ratio_lo, &v->ratio_hi);
    v->p = tm_mwu_less(a, na, b, nb);
    const int significant = v->p < p_max, beyond = v->a_med < (1 - margin) * v->b_med,
              apart = v->a_hi < v->b_lo;
    v->wins = significant && beyond && apart;
    v->why = v->wins        ? "significant win beyond the tie margin, intervals apart"
             : !significant ? "win not significant at the measured noise"
             : !beyond      ? "significant but within the tie margin"
                            : "the medians' intervals overlap";
    return v->wins;
}

/* Holds the queue behind a user event, so that the calls enqueued next wait
 * and none runs while the host is being timed: the enqueue loop then
 * measures the host path alone, not its contention with the device's
 * threads (on a CPU device they share the cores). NULL when that fails;
 * the measurement then runs unheld. */
static cl_event hold(const op_env *env)
{
    cl_int e = CL_SUCCESS;
    cl_event ue = clCreateUserEvent(env->cl, &e);
    if (!ue)
        return NULL;
    if (clEnqueueMarkerWithWaitList(env->queue, 1, &ue, NULL) != CL_SUCCESS) {
        clSetUserEventStatus(ue, CL_COMPLETE);
        clReleaseEvent(ue);
        return NULL;
    }
    return ue;
}

static cl_int release_and_finish(const op_env *env, cl_event ue)
{
    if (ue) {
        clSetUserEventStatus(ue, CL_COMPLETE);
        clReleaseEvent(ue);
    }
    return clFinish(env->queue);
}

double tm_call_us(const op_env *env, const op_desc *op, void *inst, const oclf_choice *choice,
                  int reps, int batches)
{
    double per[TM_MAX_SAMPLES];
    if (batches > TM_MAX_SAMPLES)
        batches = TM_MAX_SAMPLES;
    /* The first call takes the decision and fetches the program; the
     * steady state is what is measured. */
    if (op->run(env, inst, choice, NULL) != OCLF_SUCCESS || clFinish(env->queue) != CL_SUCCESS)
        return -1;
    for (int b = 0; b < batches; b++) {
        cl_event ue = hold(env);
        int rc = 0;
        const double t0 = now_ns();
        for (int i = 0; i < reps && rc == 0; i++)
            rc = op->run(env, inst, choice, NULL) != OCLF_SUCCESS;
        per[b] = (now_ns() - t0) / reps / 1e3;
        if (release_and_finish(env, ue) != CL_SUCCESS || rc)
            return -1;
    }
    return tm_median(per, batches);
}

double tm_plain_launch_us(const op_env *env, int nargs, int reps, int batches)
{
    /* touch(global int *a, int v1, ..., int v<nargs-1>) */
    char src[1024];
    int used = snprintf(src, sizeof src, "kernel void touch(global int *a");
    if (nargs < 1)
        nargs = 1;
    if (nargs > 32)
        nargs = 32;
    for (int i = 1; i < nargs; i++)
        used += snprintf(src + used, sizeof src - (size_t)used, ", int v%d", i);
    snprintf(src + used, sizeof src - (size_t)used, ") { a[0] = %s; }\n", nargs > 1 ? "v1" : "0");
    const char *text = src;
    double per[TM_MAX_SAMPLES], result = -1;
    if (batches > TM_MAX_SAMPLES)
        batches = TM_MAX_SAMPLES;
    cl_int e = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(env->cl, 1, &text, NULL, &e);
    cl_kernel kern = NULL;
    cl_mem buf = clCreateBuffer(env->cl, CL_MEM_READ_WRITE, sizeof(cl_int), NULL, &e);
    if (!prog || !buf || clBuildProgram(prog, 1, &env->device, "", NULL, NULL) != CL_SUCCESS ||
        !(kern = clCreateKernel(prog, "touch", &e)))
        goto out;
    const size_t global = 1;
    for (int b = -1; b < batches; b++) { /* b = -1 warms up */
        cl_event ue = hold(env);
        cl_int err = CL_SUCCESS;
        const double t0 = now_ns();
        for (cl_int i = 0; i < reps && err == CL_SUCCESS; i++) {
            err = clSetKernelArg(kern, 0, sizeof buf, &buf);
            for (cl_uint k = 1; k < (cl_uint)nargs && err == CL_SUCCESS; k++)
                err = clSetKernelArg(kern, k, sizeof i, &i);
            if (err == CL_SUCCESS)
                err = clEnqueueNDRangeKernel(env->queue, kern, 1, NULL, &global, NULL, 0, NULL,
                                             NULL);
        }
        if (b >= 0)
            per[b] = (now_ns() - t0) / reps / 1e3;
        if (release_and_finish(env, ue) != CL_SUCCESS || err != CL_SUCCESS)
            goto out;
    }
    result = tm_median(per, batches);
out:
    if (kern)
        clReleaseKernel(kern);
    if (prog)
        clReleaseProgram(prog);
    if (buf)
        clReleaseMemObject(buf);
    return result;
}
