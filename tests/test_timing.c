/*
 * The timing shared by the tuner and the benchmark: its statistics against
 * values worked out by hand, batched and interleaved sampling of stand-in
 * ops on a clock they advance themselves (so every count asserted here
 * holds on a loaded machine), and a decode-size call on the device.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "memory.h"
#include "opdesc.h"
#include "timing.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

START_TEST(median_odd_even)
{
    const double odd[5] = {5, 1, 4, 2, 3}, even[4] = {4, 1, 3, 2};
    ck_assert_double_eq(tm_median(odd, 5), 3);
    ck_assert_double_eq(tm_median(even, 4), 2.5);
    ck_assert_double_eq(odd[0], 5); /* left as it was */
}
END_TEST

/* U = 9 of 9 pairs, mean 4.5, variance 3*3*7/12: z = 4/sqrt(5.25). */
START_TEST(mwu_separated)
{
    const double a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    ck_assert_double_eq_tol(tm_mwu_less(a, 3, b, 3), 0.040428, 1e-5);
    ck_assert_double_eq_tol(tm_mwu_less(b, 3, a, 3), 1 - 0.040428, 1e-5);
    ck_assert_double_eq_tol(tm_mwu_differ(a, 3, b, 3), 2 * 0.040428, 1e-5);
}
END_TEST

/* Ties: U = 14.5, tied groups {1,1} {2,2} {3,3} {4,4} shrink the variance
 * to 20/12 * (10 - 24/72); z = 4 / sqrt(that). */
START_TEST(mwu_ties)
{
    const double a[4] = {1, 1, 2, 5}, b[5] = {2, 3, 3, 4, 4};
    ck_assert_double_eq_tol(tm_mwu_less(a, 4, b, 5), 0.159493, 1e-5);
    ck_assert_double_eq_tol(tm_mwu_differ(a, 4, b, 5), 0.318985, 1e-5);
    const double same[4] = {7, 7, 7, 7};
    ck_assert_double_eq(tm_mwu_differ(same, 4, same, 4), 1); /* no variance: no evidence */
}
END_TEST

START_TEST(ratio_interval)
{
    double a[15], b[15];
    for (int i = 0; i < 15; i++)
        b[i] = 100 + i, a[i] = 0.5 * b[i];
    double lo, hi;
    tm_ratio_ci(a, 15, b, 15, &lo, &hi);
    /* each resample draws a and b independently, so the interval is wide
     * around 0.5 but must contain it and stay inside the extreme ratios */
    ck_assert(lo <= 0.5 && hi >= 0.5);
    ck_assert(lo >= 50.0 / 114 && hi <= 57.0 / 100);
    tm_median_ci(b, 15, &lo, &hi);
    ck_assert(lo <= 107 && hi >= 107 && lo >= 100 && hi <= 114);
}
END_TEST

/* The machine's speed drifts 3x over the rounds; one path is always 10%
 * faster than the other in the same round. The paired ratio sees 0.9 and
 * nothing else; the ratio of the medians cannot. */
START_TEST(paired_ratio_cancels_drift)
{
    double a[15], b[15], lo, hi;
    for (int i = 0; i < 15; i++)
        b[i] = 100 * (1 + 2.0 * ((i * 7) % 15) / 14), a[i] = 0.9 * b[i];
    ck_assert_double_eq_tol(tm_paired_ratio(a, b, 15, &lo, &hi), 0.9, 1e-12);
    ck_assert_double_eq_tol(lo, 0.9, 1e-12);
    ck_assert_double_eq_tol(hi, 0.9, 1e-12);
    tm_ratio_ci(a, 15, b, 15, &lo, &hi);
    ck_assert(hi - lo > 0.2);
}
END_TEST

/* The rule that lets a tuned candidate replace the default: every part
 * of it decides one of these. */
START_TEST(clear_win_rule)
{
    double a[15], b[15];
    tm_verdict v;
    /* 20% faster, tight samples: a clear win */
    for (int i = 0; i < 15; i++)
        a[i] = 80 + 0.1 * i, b[i] = 100 + 0.1 * i;
    ck_assert(tm_clear_win(a, 15, b, 15, 0.01, 0.03, &v));
    ck_assert(v.a_hi < v.b_lo && v.p < 0.01);
    ck_assert_double_eq_tol(v.a_med, 80.7, 1e-9);
    /* the same samples: nothing to tell apart */
    ck_assert(!tm_clear_win(b, 15, b, 15, 0.01, 0.03, &v));
    ck_assert_str_eq(v.why, "win not significant at the measured noise");
    /* 1% faster every time: significant, not worth a record */
    for (int i = 0; i < 15; i++)
        a[i] = 0.99 * b[i];
    ck_assert(!tm_clear_win(a, 15, b, 15, 0.01, 0.03, &v));
    ck_assert_str_eq(v.why, "significant but within the tie margin");
    /* Most samples far lower, but six above most of the default's: the
     * test and the medians say win, the medians' intervals overlap (a
     * median of 15 such samples may well land on the high ones). */
    for (int i = 0; i < 15; i++)
        b[i] = 97 + i, a[i] = i < 9 ? 50 : 96 + i;
    ck_assert(!tm_clear_win(a, 15, b, 15, 0.05, 0.03, &v));
    ck_assert_msg(v.p < 0.05 && v.a_med < 0.97 * v.b_med, "p %g, medians %g %g", v.p, v.a_med,
                  v.b_med);
    ck_assert_str_eq(v.why, "the medians' intervals overlap");
}
END_TEST

/* The stand-in ops below take no time: each call advances this clock
 * (tm_set_clock) by what it stands for. */
static double fake_ns;
static double fake_clock(void) { return fake_ns; }

/* A call of 20 us: a sample of 2 ms batches it to 1.2 times the target (the
 * calibration aims a little over), every sample of that size. */
static int quick_calls;
static oclf_status quick_run(const op_env *env, void *inst, const oclf_choice *ch, cl_event *ev)
{
    (void)env, (void)inst, (void)ch, (void)ev;
    quick_calls++;
    fake_ns += 20e3;
    return OCLF_SUCCESS;
}

START_TEST(samples_sized_to_target)
{
    op_env env;
    char err[512];
    ck_assert_msg(op_env_open(&env, NULL, NULL, err, sizeof err) == 0, "%s", err);
    tm_set_clock(fake_clock);
    op_desc quick = {.name = "quick", .run = quick_run};
    oclf_choice a = {0}, b = {0};
    const oclf_choice *two[2] = {&a, &b};
    tm_series s[2];
    const tm_plan plan = {2e6, 7, 1, 0, 5, 0};
    quick_calls = 0;
    ck_assert_int_eq(tm_measure(&env, &quick, NULL, two, 2, &plan, s, NULL), 0);
    for (int c = 0; c < 2; c++) {
        ck_assert_int_eq(s[c].n, 7);
        ck_assert_int_eq(s[c].reps, 120);
        for (int i = 0; i < s[c].n; i++)
            ck_assert_double_eq_tol(s[c].host[i], 20e3, 1e-6);
    }
    /* per choice: a warm-up, calibration batches of 1, 120 and 120 calls,
     * then 7 rounds of an untimed and a timed batch */
    ck_assert_int_eq(quick_calls, 2 * (1 + 1 + 240 + 7 * 240));
    tm_set_clock(NULL);
    op_env_close(&env);
}
END_TEST

/* A 1x8192 rms_norm on the device: every choice gets every sample, and
 * device time, where profiling gives it, lies within the host span. (How
 * many calls a sample batches depends on how fast the device runs just
 * then; samples_sized_to_target checks the sizing on a fixed clock.) */
START_TEST(batched_samples)
{
    op_env env;
    char err[512];
    ck_assert_msg(op_env_open(&env, NULL, NULL, err, sizeof err) == 0, "%s", err);
    const op_desc *op = op_find("rms_norm");
    op_shape shape;
    ck_assert(op_parse_shape(op, "1x8192", &shape));
    void *inst = op->create(&env, &shape, OCLF_F32, err, sizeof err);
    ck_assert_msg(inst, "%s", err);
    oclf_choice fused = {0}, unfused = {0};
    fused.path = OCLF_PATH_FUSED;
    unfused.path = OCLF_PATH_UNFUSED;
    const oclf_choice *chs[2] = {&fused, &unfused};
    tm_series s[2];
    const tm_plan plan = {2e6, 7, 1, 0, 5, 0};
    int failed = -1;
    ck_assert_int_eq(tm_measure(&env, op, inst, chs, 2, &plan, s, &failed), 0);
    for (int c = 0; c < 2; c++) {
        ck_assert_int_eq(s[c].n, 7);
        ck_assert_int_ge(s[c].reps, 1);
        for (int i = 0; i < s[c].n; i++) {
            ck_assert(s[c].host[i] > 0);
            /* device time is a part of the host span, or absent */
            ck_assert(s[c].dev[i] < 0 || s[c].dev[i] <= 1.5 * s[c].host[i]);
        }
    }
    ck_assert(tm_call_us(&env, op, inst, &fused, 16, 3) > 0);
    ck_assert(tm_plain_launch_us(&env, 14, 16, 3) > 0);

    /* A failing call is reported with the choice it came from. */
    oclf_choice bad = {0};
    bad.path = OCLF_PATH_FUSED;
    oclf_params_set(&bad.params, "WGS", 3);
    oclf_params_set(&bad.params, "LAYOUT", 1);
    const oclf_choice *with_bad[2] = {&fused, &bad};
    ck_assert_int_eq(tm_measure(&env, op, inst, with_bad, 2, &plan, s, &failed), -1);
    ck_assert_int_eq(failed, 1);
    op->destroy(inst);
    op_env_close(&env);
}
END_TEST

/* A stand-in op whose call takes 20 ms and counts its calls: what a
 * screening measurement costs in calls. */
static int sleepy_calls;
static oclf_status sleepy_run(const op_env *env, void *inst, const oclf_choice *ch, cl_event *ev)
{
    (void)env, (void)inst, (void)ch, (void)ev;
    sleepy_calls++;
    fake_ns += 20e6;
    return OCLF_SUCCESS;
}

/* A call far longer than a sample: one choice is timed in its samples plus
 * at most two calls (the calibration's batches count as samples), a budget
 * too small for 5 samples gives min_samples, and a first call over the
 * cutoff ends the measurement with that one sample. With two choices,
 * interleaved, calibration counts for nothing. */
START_TEST(long_calls_few_runs)
{
    op_env env;
    char err[512];
    ck_assert_msg(op_env_open(&env, NULL, NULL, err, sizeof err) == 0, "%s", err);
    tm_set_clock(fake_clock);
    op_desc sleepy = {.name = "sleepy", .run = sleepy_run};
    oclf_choice a = {0}, b = {0};
    const oclf_choice *one[1] = {&a}, *two[2] = {&a, &b};
    tm_series s[2];
    /* 2 ms samples of 20 ms calls, 5 wanted in 40 ms: 3 */
    tm_plan plan = {2e6, 5, 0, 40e6, 3, 0};
    sleepy_calls = 0;
    ck_assert_int_eq(tm_measure(&env, &sleepy, NULL, one, 1, &plan, s, NULL), 0);
    ck_assert_int_eq(s[0].n, 3);
    ck_assert_int_eq(s[0].reps, 1);
    ck_assert_int_eq(sleepy_calls, 3);
    for (int i = 0; i < s[0].n; i++)
        ck_assert_double_eq_tol(s[0].host[i], 20e6, 1e-3);
    plan.cutoff_ns = 10e6;
    sleepy_calls = 0;
    ck_assert_int_eq(tm_measure(&env, &sleepy, NULL, one, 1, &plan, s, NULL), 0);
    ck_assert_int_eq(s[0].n, 1);
    ck_assert_int_eq(sleepy_calls, 1);
    ck_assert_double_eq_tol(s[0].host[0], 20e6, 1e-3);
    /* a cutoff above the call: measured in full */
    plan.cutoff_ns = 1e9;
    ck_assert_int_eq(tm_measure(&env, &sleepy, NULL, one, 1, &plan, s, NULL), 0);
    ck_assert_int_eq(s[0].n, 3);
    sleepy_calls = 0;
    ck_assert_int_eq(tm_measure(&env, &sleepy, NULL, two, 2, &plan, s, NULL), 0);
    ck_assert_int_eq(s[0].n, 3);
    ck_assert_int_eq(s[1].n, 3);
    /* each sample under a second follows an untimed batch (one call here) */
    ck_assert_int_eq(sleepy_calls, 2 * (2 + 2 * 3));
    tm_set_clock(NULL);
    op_env_close(&env);
}
END_TEST

/* A stand-in whose first call after the other choice is slow (caches
 * refilled after the other choice's data), later ones fast. */
static const oclf_choice *cold_last;
static oclf_status cold_run(const op_env *env, void *inst, const oclf_choice *ch, cl_event *ev)
{
    (void)env, (void)inst, (void)ev;
    fake_ns += ch == cold_last ? 2e6 : 30e6;
    cold_last = ch;
    return OCLF_SUCCESS;
}

/* Interleaved samples measure each choice's steady state: without a
 * batch before each timed one, every batch began with the cold call and
 * read (30 + 2 (reps - 1)) / reps ms, about 6.7 ms. */
START_TEST(interleaved_batches_start_warm)
{
    op_env env;
    char err[512];
    ck_assert_msg(op_env_open(&env, NULL, NULL, err, sizeof err) == 0, "%s", err);
    tm_set_clock(fake_clock);
    op_desc cold = {.name = "cold", .run = cold_run};
    oclf_choice a = {0}, b = {0};
    const oclf_choice *two[2] = {&a, &b};
    tm_series s[2];
    const tm_plan plan = {10e6, 5, 0, 0, 5, 0};
    ck_assert_int_eq(tm_measure(&env, &cold, NULL, two, 2, &plan, s, NULL), 0);
    for (int c = 0; c < 2; c++) {
        ck_assert_int_gt(s[c].reps, 1);
        ck_assert_msg(tm_median(s[c].host, s[c].n) < 2.001e6, "choice %d: %.2f ms a call", c,
                      tm_median(s[c].host, s[c].n) / 1e6);
    }
    tm_set_clock(NULL);
    op_env_close(&env);
}
END_TEST

/* A stand-in op that only logs which choice each call ran (a marker keeps
 * the queue's event semantics), to check the order tm_measure runs them in. */
enum { LOG_MAX = 1 << 20 };
static unsigned char call_log[LOG_MAX];
static int call_count;
static const oclf_choice *logged_choices[3];

static oclf_status logging_run(const op_env *env, void *inst, const oclf_choice *choice,
                               cl_event *event)
{
    (void)inst;
    fake_ns += 10e3;
    for (int c = 0; c < 3; c++)
        if (choice == logged_choices[c] && call_count < LOG_MAX)
            call_log[call_count++] = (unsigned char)c;
    return clEnqueueMarkerWithWaitList(env->queue, 0, NULL, event) == CL_SUCCESS
               ? OCLF_SUCCESS
               : OCLF_OPENCL_ERROR;
}

/* In a fixed order one choice always follows the same other one and pays
 * for what it left behind: every round must run each choice once, and the
 * rounds must put each choice first at least once. */
START_TEST(rounds_shuffle_the_order)
{
    op_env env;
    char err[512];
    ck_assert_msg(op_env_open(&env, NULL, NULL, err, sizeof err) == 0, "%s", err);
    op_desc fake = *op_find("rms_norm");
    fake.run = logging_run;
    tm_set_clock(fake_clock);
    oclf_choice ch[3] = {{0}};
    const oclf_choice *chs[3];
    for (int c = 0; c < 3; c++)
        chs[c] = logged_choices[c] = &ch[c];
    tm_series s[3];
    const tm_plan plan = {2e5, 15, 1, 0, 0, 0};
    call_count = 0;
    ck_assert_int_eq(tm_measure(&env, &fake, NULL, chs, 3, &plan, s, NULL), 0);
    /* The samples are the log's tail: rounds of three choices, each an
     * untimed batch and then its timed one (calls this short go warm). */
    int tail = 0;
    for (int c = 0; c < 3; c++) {
        ck_assert_int_eq(s[c].n, 15);
        tail += 2 * s[c].n * s[c].reps;
    }
    ck_assert_int_le(tail, call_count);
    int at = call_count - tail, first_count[3] = {0}, orders_seen = 0, prev_order = -1;
    for (int round = 0; round < 15; round++) {
        int seen[3] = {0}, order = 0;
        for (int b = 0; b < 3; b++) {
            const int c = call_log[at];
            for (int i = 0; i < 2 * s[c].reps; i++)
                ck_assert_int_eq(call_log[at + i], c);
            at += 2 * s[c].reps;
            seen[c]++;
            order = order * 3 + c;
            if (b == 0)
                first_count[c]++;
        }
        ck_assert(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
        orders_seen += order != prev_order;
        prev_order = order;
    }
    for (int c = 0; c < 3; c++)
        ck_assert_int_gt(first_count[c], 0);
    ck_assert_int_gt(orders_seen, 3);
    /* More choices than the rounds can hold is refused. */
    const oclf_choice *many[TM_MAX_CHOICES + 1];
    for (int c = 0; c <= TM_MAX_CHOICES; c++)
        many[c] = &ch[0];
    ck_assert_int_eq(tm_measure(&env, &fake, NULL, many, TM_MAX_CHOICES + 1, &plan, s, NULL), -1);
    tm_set_clock(NULL);
    op_env_close(&env);
}
END_TEST

/* A made-up sysfs cache folder: index<i>/level and index<i>/size. */
static void cache_entry(const char *dir, int i, const char *level, const char *size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/index%d", dir, i);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/index%d/level", dir, i);
    FILE *f = fopen(path, "w");
    ck_assert(f);
    fprintf(f, "%s\n", level);
    fclose(f);
    snprintf(path, sizeof path, "%s/index%d/size", dir, i);
    ck_assert(f = fopen(path, "w"));
    fprintf(f, "%s\n", size);
    fclose(f);
}

START_TEST(l3_from_sysfs)
{
    char dir[] = "/tmp/oclf_cacheXXXXXX";
    ck_assert(mkdtemp(dir));
    ck_assert_uint_eq(op_sysfs_l3_bytes(dir), 0); /* no entries */
    cache_entry(dir, 0, "1", "32K");
    cache_entry(dir, 1, "1", "32K");
    cache_entry(dir, 2, "2", "512K");
    ck_assert_uint_eq(op_sysfs_l3_bytes(dir), 0); /* no level 3 */
    cache_entry(dir, 3, "3", "32768K");
    ck_assert_uint_eq(op_sysfs_l3_bytes(dir), 32ull << 20);
    cache_entry(dir, 4, "3", "260M"); /* the larger of two level-3 entries */
    ck_assert_uint_eq(op_sysfs_l3_bytes(dir), 260ull << 20);
    ck_assert_uint_eq(op_sysfs_l3_bytes("/nonexistent/cache"), 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(llc_pick_smaller_on_cpu)
{
    const uint64_t M = 1 << 20;
    ck_assert_uint_eq(op_llc_pick(32 * M, 260 * M, 1), 32 * M);
    ck_assert_uint_eq(op_llc_pick(260 * M, 32 * M, 1), 32 * M);
    ck_assert_uint_eq(op_llc_pick(0, 32 * M, 1), 32 * M);
    ck_assert_uint_eq(op_llc_pick(4 * M, 0, 1), 4 * M);
    /* the host's L3 says nothing of a GPU's cache */
    ck_assert_uint_eq(op_llc_pick(4 * M, 32 * M, 0), 4 * M);
    ck_assert_uint_eq(op_llc_pick(0, 0, 1), 0);
}
END_TEST

/* Narrowest dtype's minimum traffic of a shape. */
static double least_bytes(const op_desc *op, const op_shape *s)
{
    double least = -1;
    for (int d = 0; d < OCLF_DTYPE_COUNT_; d++) {
        const double b = op->min_bytes(s, (oclf_dtype)d);
        least = least < 0 || b < least ? b : least;
    }
    return least;
}

/* Every op has an out-of-cache shape; in every dtype its traffic exceeds
 * twice the cache, the next smaller multiple's does not in the narrowest,
 * and a bigger cache gets a bigger shape. rms_norm worked out by hand:
 * 1024 rows of 8192 in 16-bit move 32 MiB (in and out) plus the weight. */
START_TEST(uncached_shapes)
{
    const uint64_t M = 1 << 20, caches[2] = {32 * M, 260 * M};
    op_shape s;
    ck_assert(op_uncached_shape(op_find("rms_norm"), 32 * M, &s));
    ck_assert_uint_eq(s.d[0], 2048);
    ck_assert_uint_eq(s.d[1], 8192);
    ck_assert(op_uncached_shape(op_find("rms_norm"), 260 * M, &s));
    ck_assert_uint_eq(s.d[0], 17408);
    ck_assert(!op_uncached_shape(op_find("rms_norm"), 0, &s)); /* cache unknown */
    for (int i = 0; op_table[i]; i++) {
        const op_desc *op = op_table[i];
        ck_assert_msg(op->uncached_shape, "%s has no out-of-cache shape", op->name);
        op_shape base, grown[2];
        ck_assert(op_parse_shape(op, op->uncached_shape, &base));
        for (int c = 0; c < 2; c++) {
            ck_assert(op_uncached_shape(op, caches[c], &grown[c]));
            for (int d = 0; d < OCLF_DTYPE_COUNT_; d++)
                ck_assert_msg(op->min_bytes(&grown[c], (oclf_dtype)d) > 2.0 * (double)caches[c],
                              "%s %s", op->name, oclf_dtype_name((oclf_dtype)d));
            const int k = op->uncached_dim;
            ck_assert_uint_eq(grown[c].d[k] % base.d[k], 0);
            if (grown[c].d[k] > base.d[k]) {
                op_shape less = grown[c];
                less.d[k] -= base.d[k];
                ck_assert_msg(least_bytes(op, &less) <= 2.0 * (double)caches[c], "%s", op->name);
            }
            for (int j = 0; j < base.ndims; j++)
                ck_assert(j == k || grown[c].d[j] == base.d[j]);
        }
        ck_assert_msg(grown[1].d[op->uncached_dim] > grown[0].d[op->uncached_dim], "%s",
                      op->name);
    }
}
END_TEST

/* The same-bytes copy moves what it says (its destination holds its
 * source, rounded up to 64 bytes), takes its turns with an op's paths
 * behind op_pair_desc, and is refused where the device cannot hold it. */
START_TEST(same_bytes_copy)
{
    op_env env;
    char err[512];
    ck_assert_msg(op_env_open(&env, NULL, NULL, err, sizeof err) == 0, "%s", err);
    int variant = -1;
    ck_assert(op_copy_measure(&env, &variant) > 0);
    ck_assert(variant >= 0 && variant < 3);
    for (int v = 0; v < 3; v++) {
        const double want = 2.0 * 100000; /* 100000 each way: 1563 vectors of 64 */
        op_copy *c = op_copy_create(&env, want - 20, want, v, err, sizeof err);
        ck_assert_msg(c, "%s", err);
        ck_assert_int_eq(op_copy_pieces(c), 1);
        ck_assert_uint_eq(op_copy_piece_bytes(c, 0), 100032);
        ck_assert_double_eq(op_copy_bytes(c), 2.0 * 100032);
        unsigned char *src = malloc(100032), *dst = malloc(100032);
        for (size_t i = 0; i < 100032; i++)
            src[i] = (unsigned char)(i * 7 + v);
        ck_assert_int_eq(op_rewrite(&env, op_copy_buffer(c, 0, 0), src, 100032), 0);

        const op_desc *op = op_find("rms_norm");
        op_shape shape;
        ck_assert(op_parse_shape(op, "1x8192", &shape));
        void *inst = op->create(&env, &shape, OCLF_F32, err, sizeof err);
        ck_assert_msg(inst, "%s", err);
        oclf_choice fused = {0}, copy = {0};
        fused.path = OCLF_PATH_FUSED;
        op_pair pair = {op, inst, c, &copy};
        const oclf_choice *chs[2] = {&fused, &copy};
        tm_series s[2];
        const tm_plan plan = {1e6, 5, 1, 0, 5, 0};
        ck_assert_int_eq(tm_measure(&env, &op_pair_desc, &pair, chs, 2, &plan, s, NULL), 0);
        ck_assert_int_eq(s[0].n, 5);
        ck_assert_int_eq(s[1].n, 5);
        ck_assert_int_eq(op_download(&env, op_copy_buffer(c, 0, 1), dst, 100032), 0);
        ck_assert(memcmp(src, dst, 100032) == 0);
        op->destroy(inst);
        free(src), free(dst);
        op_copy_destroy(c);
    }
    /* far past the device's memory, with no room to shrink */
    cl_ulong mem = 0;
    clGetDeviceInfo(env.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    err[0] = '\0';
    ck_assert(!op_copy_create(&env, 64.0 * (double)mem, 64.0 * (double)mem, 0, err, sizeof err));
    ck_assert(strstr(err, "no room") != NULL);
    op_env_close(&env);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("timing");
    TCase *tc = tcase_create("timing");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, median_odd_even);
    tcase_add_test(tc, mwu_separated);
    tcase_add_test(tc, mwu_ties);
    tcase_add_test(tc, ratio_interval);
    tcase_add_test(tc, paired_ratio_cancels_drift);
    tcase_add_test(tc, clear_win_rule);
    tcase_add_test(tc, samples_sized_to_target);
    tcase_add_test(tc, batched_samples);
    tcase_add_test(tc, rounds_shuffle_the_order);
    tcase_add_test(tc, long_calls_few_runs);
    tcase_add_test(tc, interleaved_batches_start_warm);
    tcase_add_test(tc, l3_from_sysfs);
    tcase_add_test(tc, llc_pick_smaller_on_cpu);
    tcase_add_test(tc, uncached_shapes);
    tcase_add_test(tc, same_bytes_copy);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
