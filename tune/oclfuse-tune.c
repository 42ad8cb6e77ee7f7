/*
 * oclfuse-tune: measures every op's candidates on one device and writes the
 * winners to a tuning database.
 *
 * Per (op, dtype, shape), a "job": the candidates are the heuristic default
 * and op->space() for each path (fused, and unfused where the op has one).
 * Each candidate is verified against the CPU reference before it is timed;
 * a wrong or failing one is journaled as such and never chosen. Timing is
 * tune/timing.h: batched samples (many calls per sample for short ones),
 * host time per call, so the unfused path pays for its launch gaps. Each
 * candidate is screened with a few samples.
 *
 * Choice, per path: the fastest candidate, except that any candidate within
 * TIE (3%) of it that is simpler wins; simpler = the heuristic default, then
 * the smaller work-group size, then the earlier point of op->space() (which
 * lists small before large). Across paths: the faster one, fused on a tie
 * (one launch, one pass over memory). A winner other than the default must
 * then pass the confirmation rule (confirm() below): measured again beside
 * the default, interleaved, it replaces the default only on a significant
 * (one-sided Mann-Whitney U, p < 0.01) win of more than TIE; the journal
 * records the test either way.
 *
 * Budget: --budget SECONDS for the whole run, shared evenly by the jobs not
 * yet done, so a job that finishes early leaves its time to the others.
 * Every measurement is appended to a journal beside the database as it is
 * made; --resume takes measurements from it instead of repeating them.
 * Ctrl-C stops after the current candidate and writes what is done.
 *
 * Compilation: each batch of candidates is compiled ahead of its timing by
 * running a one-row instance from several threads (the library is
 * thread-safe per context). On the 2-core CI machine this buys little; on
 * a many-core host the OpenCL compiler dominates a cold run.
 */
#include "journal.h"
#include "opdesc.h"
#include "records.h"
#include "timing.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TIE 0.03
enum { MAX_CAND = 512, BATCH = 8 };

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: oclfuse-tune [options]\n"
            "  --list               platforms and devices with index and fingerprint\n"
            "  --platform P --device D   index or name substring (default: first)\n"
            "  --ops a,b,...        operations (default: all)\n"
            "  --dtypes f32,...     storage dtypes (default: f32,f16,bf16)\n"
            "  --shapes S           preset (default, bench, llm), a comma list, or a file\n"
            "                       with one shape per line\n"
            "  --budget SECONDS     for the whole run (default 600)\n"
            "  --strategy exhaustive|random|anneal   (default random)\n"
            "  --min-time SECONDS   timing floor per candidate (default 0.05)\n"
            "  --db PATH            database to merge into (default: per-machine)\n"
            "  --resume             reuse measurements from PATH.journal\n"
            "  --quiet              only errors and the closing table\n");
}


/* ---- shapes --------------------------------------------------------------------*/

/* The shape list for one op: a preset name, a file, or the text itself.
 * Returned malloc'd as a comma list. */
static char *shape_list(const op_desc *op, const char *spec)
{
    const char *preset = !spec || strcmp(spec, "default") == 0 ? op->tune_shapes
                         : strcmp(spec, "bench") == 0           ? op->bench_shapes
                         : strcmp(spec, "llm") == 0
                             ? (op->llm_shapes ? op->llm_shapes : op->tune_shapes)
                             : NULL;
    if (preset)
        return strdup(preset);
    FILE *f = fopen(spec, "r");
    if (!f)
        return strdup(spec);
    char *out = calloc(1, 1), line[256];
    size_t len = 0;
    while (out && fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n#")] = '\0';
        if (!*line)
            continue;
        char *n = realloc(out, len + strlen(line) + 2);
        if (!n) {
            free(out);
            out = NULL;
            break;
        }
        out = n;
        len += (size_t)sprintf(out + len, "%s%s", len ? "," : "", line);
    }
    fclose(f);
    return out;
}

/* ---- candidates (tune/records.h; the journal: tune/journal.h) ---------------------*/

static int64_t param(const oclf_params *p, const char *name, int64_t dflt)
{
    int64_t v;
    return oclf_params_get(p, name, &v) ? v : dflt;
}

/* ---- parallel compile -------------------------------------------------------------*/

typedef struct warm_job {
    const op_env *env;
    const op_desc *op;
    void *inst;
    cand **list;
    int n;
    int next;
    pthread_mutex_t lock;
} warm_job;

static void *warm_worker(void *arg)
{
    warm_job *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        int i = w->next++;
        pthread_mutex_unlock(&w->lock);
        if (i >= w->n)
            return NULL;
        /* Failures are ignored: verification reports them properly. */
        w->op->run(w->env, w->inst, &w->list[i]->ch, NULL);
    }
}

static void warm(const op_env *env, const op_desc *op, void *small, cand **list, int n,
                 int threads)
{
    if (!small || n <= 0)
        return;
    warm_job w = {env, op, small, list, n, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t t[8];
    int nt = 0;
    for (; nt < threads && nt < 8; nt++)
        if (pthread_create(&t[nt], NULL, warm_worker, &w) != 0)
            break;
    if (nt == 0)
        warm_worker(&w);
    for (int i = 0; i < nt; i++)
        pthread_join(t[i], NULL);
    clFinish(env->queue);
}

/* ---- strategies ----------------------------------------------------------------------*/

static uint64_t rng = 0x2545f4914f6cdd1dull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* Number of parameters in which two candidates differ (paths count). */
static int hamming(const cand *a, const cand *b)
{
    int d = a->ch.path != b->ch.path;
    for (unsigned i = 0; i < a->ch.params.count; i++) {
        int64_t v;
        if (!oclf_params_get(&b->ch.params, a->ch.params.item[i].name, &v) ||
            v != a->ch.params.item[i].value)
            d++;
    }
    return d;
}

/* ---- one job ------------------------------------------------------------------------*/


typedef struct tuner {
    op_env env;
    const char *strategy;
    double min_time;
    int quiet, tty, threads;
    journal j;
    double deadline, start, copy_gbps;
    int jobs_total, jobs_done;
} tuner;

static void progress(tuner *t, const result *r, int done, int total)
{
    if (t->quiet)
        return;
    const double left = t->deadline - now_s();
    if (t->tty) {
        const int width = 30;
        const double frac = (double)t->jobs_done / (double)t->jobs_total +
                            (total ? (double)done / (double)total / (double)t->jobs_total : 0);
        int fill = (int)(frac * width);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %3.0f%% %-15s %-5s %-12s %d/%d  ETA %4.0fs ", bar, 100 * frac,
                r->op->name, oclf_dtype_name(r->dtype), r->shape, done, total,
                left > 0 ? left : 0);
        fflush(stderr);
    } else if (done == total) {
        fprintf(stderr, "%s %s %s: %d candidates measured, %d rejected; %.0fs of budget left\n",
                r->op->name, oclf_dtype_name(r->dtype), r->shape, r->measured, r->failed,
                left > 0 ? left : 0);
    }
}

/* Is a simpler than b (the tie rule)? */
static int simpler(const cand *a, const cand *b)
{
    if (a->is_default != b->is_default)
        return a->is_default;
    int64_t wa = param(&a->ch.params, "WGS", 0), wb = param(&b->ch.params, "WGS", 0);
    if (wa != wb)
        return wa < wb;
    return a->order < b->order;
}

/* The winner among candidates of `path` (AUTO: any path). */
static const cand *pick(const cand *c, int n, oclf_path path)
{
    const cand *fast = NULL;
    for (int i = 0; i < n; i++)
        if (c[i].state > 0 && (path == OCLF_PATH_AUTO || c[i].ch.path == path) &&
            (!fast || c[i].time_ns < fast->time_ns))
            fast = &c[i];
    if (!fast)
        return NULL;
    const cand *best = fast;
    for (int i = 0; i < n; i++)
        if (c[i].state > 0 && c[i].ch.path == fast->ch.path &&
            c[i].time_ns <= fast->time_ns * (1 + TIE) && simpler(&c[i], best))
            best = &c[i];
    return best;
}

/* The confirmation rule. A winner other than the default is measured again
 * beside the default, the two interleaved sample by sample (CONFIRM_SAMPLES
 * batched samples each, tune/timing.h). It replaces the default only when
 * a one-sided Mann-Whitney U test says its samples are smaller at
 * p < CONFIRM_P (significant at the noise the shape showed) and its median
 * is more than TIE below the default's (worth a record). Otherwise the
 * default stays. Either way the journal gets the medians, the test's p and
 * the bootstrap 95% interval of the ratio of medians, and why. */
#define CONFIRM_P 0.01
enum { CONFIRM_SAMPLES = 15 };

static const cand *confirm(tuner *t, const op_desc *op, void *inst, cand *win, cand *def)
{
    const oclf_choice *chs[2] = {&win->ch, &def->ch};
    tm_series s[2];
    /* Up to a second per side: all 15 samples for calls under a few ms,
     * at least 5 for slow ones. */
    const tm_plan plan = {fmax(t->min_time * 1e9 / 5, 2e6), CONFIRM_SAMPLES, 1,
                          fmax(4 * t->min_time * 1e9, 1e9)};
    confirmation cf;
    memset(&cf, 0, sizeof cf);
    if (tm_measure(&t->env, op, inst, chs, 2, &plan, s, NULL) != 0) {
        cf.why = "a call failed while confirming";
        journal_confirm(&t->j, win->key, def->key, &cf);
        return def;
    }
    cf.win_ns = tm_median(s[0].host, s[0].n);
    cf.def_ns = tm_median(s[1].host, s[1].n);
    cf.samples = s[0].n;
    cf.p = tm_mwu_less(s[0].host, s[0].n, s[1].host, s[1].n);
    tm_ratio_ci(s[0].host, s[0].n, s[1].host, s[1].n, &cf.ratio_lo, &cf.ratio_hi);
    const double ratio = cf.win_ns / cf.def_ns;
    cf.replaced = cf.p < CONFIRM_P && ratio < 1 - TIE;
    cf.why = cf.replaced          ? "significant win beyond the tie margin"
             : cf.p >= CONFIRM_P ? "win not significant at the measured noise"
                                  : "significant but within the tie margin";
    journal_confirm(&t->j, win->key, def->key, &cf);
    /* The record carries the times measured side by side. */
    win->time_ns = cf.win_ns;
    def->time_ns = cf.def_ns;
    return cf.replaced ? win : def;
}

/* Measures one candidate (or takes it from the journal). */
static void measure(tuner *t, const op_desc *op, void *inst, cand *c, result *r)
{
    json_t *e = json_object_get(t->j.done, c->key);
    if (e) {
        c->state = json_is_true(json_object_get(e, "ok")) ? 1 : -1;
        c->time_ns = json_real_value(json_object_get(e, "time_ns"));
    } else {
        char msg[512] = "";
        if (!op->verify(&t->env, inst, &c->ch, msg, sizeof msg)) {
            c->state = -1;
            journal_add(&t->j, c->key, c->ch.path, &c->ch.params, 0, 0, msg);
        } else {
            /* Screening: a few batched samples, enough to rank candidates;
             * the winner is confirmed against the default afterwards. */
            const oclf_choice *ch = &c->ch;
            tm_series s;
            const tm_plan plan = {t->min_time * 1e9 / 5, 5, 1, 2 * t->min_time * 1e9};
            c->time_ns = tm_measure(&t->env, op, inst, &ch, 1, &plan, &s, NULL) == 0
                             ? tm_median(s.host, s.n)
                             : -1;
            c->state = c->time_ns > 0 ? 1 : -1;
            journal_add(&t->j, c->key, c->ch.path, &c->ch.params, c->state > 0, c->time_ns,
                        c->state > 0 ? NULL : oclf_last_error(t->env.ctx));
        }
    }
    if (c->state > 0)
        r->measured++;
    else
        r->failed++;
}

/* Within one parameter (or the path) of the heuristic default, which the
 * tuner learns through oclf_tuning_explain on its database-free context. */
static int near_default(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                        const cand *c)
{
    static char cache_key[128];
    static cand dflt;
    char key[128], text_shape[96];
    op_format_shape(shape, text_shape, sizeof text_shape);
    snprintf(key, sizeof key, "%s/%d/%s", op->name, (int)dt, text_shape);
    if (strcmp(key, cache_key) != 0) {
        snprintf(cache_key, sizeof cache_key, "%s", key);
        memset(&dflt, 0, sizeof dflt);
        dflt.ch.path = OCLF_PATH_FUSED;
        char text[2048];
        uint64_t dims[OP_MAX_DIMS];
        const int nd = op_lib_shape(op, shape, dims, NULL);
        if (oclf_tuning_explain(t->env.ctx, op_lib_op(op), dt, dims, (unsigned)nd, OCLF_PATH_FUSED,
                                text, sizeof text) == OCLF_SUCCESS) {
            /* "uses: heuristic (...): fused NAME=V NAME=V" */
            char *p = strstr(text, ": fused");
            for (p = p ? p + 7 : NULL; p && *p == ' ';) {
                char name[OCLF_PARAM_NAME_MAX];
                long long v;
                int used = 0;
                if (sscanf(p, " %15[A-Z_0-9]=%lld%n", name, &v, &used) != 2)
                    break;
                oclf_params_set(&dflt.ch.params, name, v);
                p += used;
            }
        }
    }
    return dflt.ch.params.count > 0 && hamming(c, &dflt) <= 1;
}

static void run_job(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                    result *r, cand *c)
{
    const char *fp = oclf_context_fingerprint(t->env.ctx);
    char err[512];
    void *inst = op->create(&t->env, shape, dt, err, sizeof err);
    if (!inst) {
        fprintf(stderr, "%soclfuse-tune: %s %s %s: %s\n", t->tty && !t->quiet ? "\n" : "",
                op->name, oclf_dtype_name(dt), r->shape, err);
        return;
    }
    op_shape one = *shape;
    one.d[0] = 1;
    void *small = op->create(&t->env, &one, dt, err, sizeof err);

    int n = 0;
    memset(&c[n], 0, sizeof c[n]);
    c[n].ch.path = OCLF_PATH_FUSED;
    c[n].is_default = 1;
    n++;
    const oclf_path paths[2] = {OCLF_PATH_FUSED, OCLF_PATH_UNFUSED};
    static oclf_params space[MAX_CAND];
    for (int pi = 0; pi < (op->has_unfused ? 2 : 1); pi++) {
        int m = op->space(&t->env, shape, dt, paths[pi], space, MAX_CAND - n);
        for (int i = 0; i < m && n < MAX_CAND; i++, n++) {
            memset(&c[n], 0, sizeof c[n]);
            c[n].ch.path = paths[pi];
            c[n].ch.params = space[i];
            c[n].order = i;
        }
    }
    for (int i = 0; i < n; i++) {
        char pt[256];
        params_text(&c[i].ch.params, pt, sizeof pt);
        snprintf(c[i].key, sizeof c[i].key, "%s|%s|%s|%s|%s|%s", fp, op->name,
                 oclf_dtype_name(dt), r->shape, path_name(c[i].ch.path),
                 c[i].is_default ? "default" : pt);
    }

    /* Order of measurement. The default always goes first: it is the
     * yardstick, and a timed-out job still records it. */
    int *order = malloc((size_t)n * sizeof *order);
    for (int i = 0; i < n; i++)
        order[i] = i;
    if (strcmp(t->strategy, "exhaustive") != 0) {
        for (int i = n - 1; i > 1; i--) {
            int k = 1 + (int)rnd((unsigned)i);
            int tmp = order[i];
            order[i] = order[k], order[k] = tmp;
        }
        /* Then the default's neighbours (one parameter or the path away)
         * before the rest: under a short budget, where each new program
         * costs seconds of compiling, the neighbourhood of a good default
         * is where the likely wins are. */
        int front = 1;
        for (int i = 1; i < n; i++) {
            if (near_default(t, op, dt, shape, &c[order[i]])) {
                int tmp = order[front];
                order[front++] = order[i], order[i] = tmp;
            }
        }
    }
    const int anneal = strcmp(t->strategy, "anneal") == 0;

    const int left_jobs = t->jobs_total - t->jobs_done;
    const double job_end = now_s() + (t->deadline - now_s()) / (left_jobs > 0 ? left_jobs : 1);
    int done = 0, cur = 0;
    double temp = 0.10; /* anneal: accepts a 10% worse point with p = 1/e at first */
    for (int oi = 0; oi < n && !interrupted && (oi == 0 || now_s() < job_end);) {
        /* The next batch: in list order, or the annealing walk. */
        cand *batch[BATCH];
        const int bmax = t->threads < BATCH ? t->threads : BATCH;
        int nb = 0;
        if (anneal && oi > 0) {
            /* A neighbour of the current point: one parameter or the path
             * changed; a random unmeasured point when none is left. */
            int pickc = -1;
            for (int tries = 0; tries < 4 * n && pickc < 0; tries++) {
                int k = (int)rnd((unsigned)n);
                if (c[k].state == 0 && hamming(&c[k], &c[cur]) <= 1)
                    pickc = k;
            }
            for (int k = 0; k < n && pickc < 0; k++)
                if (c[k].state == 0)
                    pickc = k;
            if (pickc < 0)
                break;
            batch[nb++] = &c[pickc];
            oi++;
        } else {
            while (nb < bmax && oi < n)
                batch[nb++] = &c[order[oi++]];
        }
        warm(&t->env, op, small, batch, nb, t->threads);
        for (int b = 0; b < nb && !interrupted && (done == 0 || now_s() < job_end); b++) {
            measure(t, op, inst, batch[b], r);
            done++;
            if (anneal && batch[b]->state > 0) {
                const double dt_rel = batch[b]->time_ns / c[cur].time_ns - 1;
                if (c[cur].state <= 0 || dt_rel < 0 || exp(-dt_rel / temp) > rnd(1000) / 1000.0)
                    cur = (int)(batch[b] - c);
                temp *= 0.95;
            }
            progress(t, r, done, n);
        }
    }
    progress(t, r, n, n);
    free(order);

    const cand *f = pick(c, n, OCLF_PATH_FUSED), *u = pick(c, n, OCLF_PATH_UNFUSED);
    const cand *best = f;
    if (u && (!f || u->time_ns * (1 + TIE) < f->time_ns))
        best = u;
    if (best && !best->is_default && c[0].state > 0 && !interrupted)
        best = confirm(t, op, inst, &c[best - c], &c[0]);
    op->destroy(inst);
    if (small)
        op->destroy(small);
    r->default_ns = c[0].state > 0 ? c[0].time_ns : -1;
    r->bytes = op->min_bytes(shape, dt);
    if (!best)
        return;
    r->have = 1;
    r->best = *best;
    if (f)
        r->fused = *f;
    if (u)
        r->unfused = *u;
}

int main(int argc, char **argv)
{
    const char *ops = NULL, *dtypes = "f32,f16,bf16", *shapes = NULL, *platform = NULL,
               *device = NULL, *db = NULL, *strategy = "random";
    double budget = 600, min_time = 0.05;
    int resume = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name, var)                                                 \
    if (strcmp(a, name) == 0) {                                        \
        if (!v) {                                                      \
            fprintf(stderr, "oclfuse-tune: %s needs a value\n", a);    \
            return 2;                                                  \
        }                                                              \
        var = v;                                                       \
        i++;                                                           \
        continue;                                                      \
    }
        OPT("--ops", ops)
        OPT("--dtypes", dtypes)
        OPT("--shapes", shapes)
        OPT("--platform", platform)
        OPT("--device", device)
        OPT("--db", db)
        OPT("--strategy", strategy)
#undef OPT
        if (strcmp(a, "--budget") == 0 && v) {
            budget = atof(v);
            i++;
        } else if (strcmp(a, "--min-time") == 0 && v) {
            min_time = atof(v);
            i++;
        } else if (strcmp(a, "--resume") == 0) {
            resume = 1;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if (strcmp(a, "--list") == 0) {
            return op_list_devices("oclfuse-tune");
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "oclfuse-tune: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (strcmp(strategy, "exhaustive") && strcmp(strategy, "random") && strcmp(strategy, "anneal")) {
        fprintf(stderr, "oclfuse-tune: unknown strategy '%s'\n", strategy);
        return 2;
    }
    char dbpath[4096];
    if (!db) {
        if (oclf_tuning_db_default_path(dbpath, sizeof dbpath) != OCLF_SUCCESS) {
            fprintf(stderr, "oclfuse-tune: %s; pass --db\n", oclf_last_error(NULL));
            return 1;
        }
        db = dbpath;
    }

    static tuner t;
    t.strategy = strategy;
    t.min_time = min_time;
    t.quiet = quiet;
    t.tty = isatty(2);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    t.threads = ncpu > 1 ? (int)(ncpu < 8 ? ncpu : 8) : 1;
    oclf_context_options opts;
    oclf_context_options_init(&opts);
    opts.no_tuning_db = 1; /* every candidate, the default included, as the heuristic has it */
    char err[512];
    if (op_env_open_opts(&t.env, platform, device, &opts, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-tune: %s\n", err);
        return 1;
    }
    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s.journal", db);
    journal_open(&t.j, jpath, resume);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    t.start = now_s();
    t.deadline = t.start + budget;
    t.copy_gbps = op_copy_gbps(&t.env);
    if (!quiet)
        fprintf(stderr, "device: %s\ncopy bandwidth: %.1f GB/s\ndatabase: %s\n",
                oclf_context_fingerprint(t.env.ctx), t.copy_gbps, db);

    /* The job list. */
    typedef struct job {
        const op_desc *op;
        oclf_dtype dt;
        op_shape shape;
        char text[64];
    } job;
    job *jobs = NULL;
    int nj = 0, rc = 0;
    for (int oi = 0; op_table[oi]; oi++) {
        const op_desc *op = op_table[oi];
        if (!op_listed(ops, op->name))
            continue;
        char *list = shape_list(op, shapes);
        for (int d = 0; d < OCLF_DTYPE_COUNT_ && list; d++) {
            if (!op_listed(dtypes, oclf_dtype_name((oclf_dtype)d)))
                continue;
            for (char *p = list; *p;) {
                size_t len = strcspn(p, ",");
                char text[64];
                snprintf(text, sizeof text, "%.*s", (int)len, p);
                p += len + (p[len] ? 1 : 0);
                op_shape s;
                if (!op_parse_shape(op, text, &s)) {
                    fprintf(stderr, "oclfuse-tune: %s: shape '%s' is not %s; skipped\n",
                            op->name, text, op->shape_help);
                    continue;
                }
                job *nj2 = realloc(jobs, (size_t)(nj + 1) * sizeof *jobs);
                if (!nj2)
                    break;
                jobs = nj2;
                jobs[nj] = (job){op, (oclf_dtype)d, s, ""};
                snprintf(jobs[nj].text, sizeof jobs[nj].text, "%s", text);
                nj++;
            }
        }
        free(list);
    }
    if (nj == 0) {
        fprintf(stderr, "oclfuse-tune: nothing to tune (check --ops, --dtypes, --shapes)\n");
        rc = 2;
    }
    t.jobs_total = nj;
    result *res = calloc((size_t)(nj > 0 ? nj : 1), sizeof *res);
    static cand c[MAX_CAND];
    for (int i = 0; i < nj && !interrupted; i++) {
        /* The budget is for the whole run: once it is spent the remaining
         * jobs keep what dispatch already does for them (the heuristic). */
        if (i > 0 && now_s() >= t.deadline) {
            fprintf(stderr, "%soclfuse-tune: budget spent; %d of %d jobs not tuned\n",
                    t.tty && !quiet ? "\n" : "", nj - i, nj);
            break;
        }
        result *r = &res[i];
        r->op = jobs[i].op;
        r->dtype = jobs[i].dt;
        snprintf(r->shape, sizeof r->shape, "%s", jobs[i].text);
        run_job(&t, jobs[i].op, jobs[i].dt, &jobs[i].shape, r, c);
        t.jobs_done++;
        if (!r->have)
            continue;
        /* Merged per job, so an interrupted run keeps what it finished. */
        json_t *arr = json_pack("[o]", make_record(r, &jobs[i].shape, t.copy_gbps));
        char *text = json_dumps(arr, JSON_COMPACT);
        if (!text || oclf_tuning_db_merge(t.env.ctx, db, text) != OCLF_SUCCESS) {
            fprintf(stderr, "%soclfuse-tune: cannot write %s: %s\n", t.tty && !quiet ? "\n" : "",
                    db, oclf_last_error(t.env.ctx));
            rc = 1;
        }
        free(text);
        json_decref(arr);
    }
    if (t.tty && !quiet)
        fprintf(stderr, "\n");
    if (interrupted)
        fprintf(stderr, "oclfuse-tune: interrupted; %d of %d jobs written to %s\n", t.jobs_done,
                nj, db);
    closing_table(res, nj, t.copy_gbps);
    printf("\n%d jobs in %.0f s; database %s\n", t.jobs_done, now_s() - t.start, db);
    free(res);
    free(jobs);
    journal_close(&t.j);
    op_env_close(&t.env);
    return rc;
}
