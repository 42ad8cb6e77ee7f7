/* One tuning job (tune/tuner.h): compile ahead, verify and time each
 * candidate in the strategy's order, pick and confirm the winner. */
#include "tuner.h"
#include "timing.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double tuner_now(void) { return op_now_s(); }

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

/* ---- measuring and choosing --------------------------------------------------------*/

static void progress(tuner *t, const result *r, int done, int total)
{
    if (t->quiet)
        return;
    const double left = t->deadline - tuner_now();
    char eta[48] = ""; /* none without a budget (--max-candidates alone) */
    if (isfinite(left))
        snprintf(eta, sizeof eta, t->tty ? "  ETA %4.0fs" : "; %.0fs of budget left",
                 left > 0 ? left : 0);
    if (t->tty) {
        const int width = 30;
        const double frac = (double)t->jobs_done / (double)t->jobs_total +
                            (total ? (double)done / (double)total / (double)t->jobs_total : 0);
        int fill = (int)(frac * width);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %3.0f%% %-8s %-15s %-5s %-12s %d/%d%s ", bar, 100 * frac,
                t->first_pass ? "defaults" : "search", r->op->name, oclf_dtype_name(r->dtype),
                r->shape, done, total, eta);
        fflush(stderr);
    } else if (done == total) {
        fprintf(stderr, "%s%s %s %s: %d candidates measured, %d rejected%s\n",
                t->first_pass ? "defaults: " : "", r->op->name, oclf_dtype_name(r->dtype),
                r->shape, r->measured, r->failed, eta);
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
 * batched samples each, tune/timing.h). It replaces the default only on a
 * clear win (tm_clear_win): a one-sided Mann-Whitney U test says its
 * samples are smaller at p < CONFIRM_P, its median is more than TIE below
 * the default's, and the 95% intervals of the two medians do not overlap.
 * Otherwise the default, the heuristic's choice, stays: a record that
 * cannot show its choice is faster would only make dispatch follow noise
 * (a record from screening samples once sent add_rms_norm f16 83 x 5120 to
 * an unfused path 1.6 times slower than the fused default). Either way the
 * journal gets the medians, their intervals, the test's p, the interval of
 * their ratio, and why. */
#define CONFIRM_P 0.01
enum { CONFIRM_SAMPLES = 15 };

static const cand *confirm(tuner *t, const op_desc *op, void *inst, cand *win, cand *def)
{
    const oclf_choice *chs[2] = {&win->ch, &def->ch};
    tm_series s[2];
    /* Up to a second per side: all 15 samples for calls under a few ms,
     * at least 5 for slow ones. */
    const tm_plan plan = {fmax(t->min_time * 1e9 / 5, 2e6), CONFIRM_SAMPLES, 1,
                          fmax(4 * t->min_time * 1e9, 1e9), 5, 0};
    confirmation cf;
    memset(&cf, 0, sizeof cf);
    if (tm_measure(&t->env, op, inst, chs, 2, &plan, s, NULL) != 0) {
        cf.why = "a call failed while confirming";
        journal_confirm(&t->j, win->key, def->key, &cf);
        return def;
    }
    tm_verdict v;
    cf.replaced = tm_clear_win(s[0].host, s[0].n, s[1].host, s[1].n, CONFIRM_P, TIE, &v);
    cf.win_ns = v.a_med, cf.def_ns = v.b_med;
    cf.win_lo = v.a_lo, cf.win_hi = v.a_hi, cf.def_lo = v.b_lo, cf.def_hi = v.b_hi;
    cf.ratio_lo = v.ratio_lo, cf.ratio_hi = v.ratio_hi;
    cf.p = v.p;
    cf.samples = s[0].n;
    cf.why = v.why;
    journal_confirm(&t->j, win->key, def->key, &cf);
    /* The record carries the times measured side by side. */
    win->time_ns = cf.win_ns;
    def->time_ns = cf.def_ns;
    return cf.replaced ? win : def;
}

/* Measures one candidate (or takes it from the journal). best_ns: the
 * fastest candidate of the job so far (0: none yet). */
static void measure(tuner *t, const op_desc *op, void *inst, cand *c, result *r, double best_ns)
{
    json_t *e = json_object_get(t->j.done, c->key);
    if (e) {
        c->state = json_is_true(json_object_get(e, "ok")) ? 1 : -1;
        c->time_ns = json_real_value(json_object_get(e, "time_ns"));
    } else {
        char msg[512] = "";
        t->verified++;
        const int lose = t->lose_at > 0 && t->verified == t->lose_at;
        if (lose || !op->verify(&t->env, inst, &c->ch, msg, sizeof msg)) {
            c->state = -1;
            /* A candidate that faulted on a GPU leaves the context unusable:
             * every later call fails. Journaled as failed (a resumed run
             * skips it), it ends the job; the run opens the device again. */
            const cl_int fin = lose ? CL_OUT_OF_RESOURCES : clFinish(t->env.queue);
            char lost[640];
            snprintf(lost, sizeof lost, "left the device unusable, or found it so (clFinish: %d)%s%s",
                     fin, *msg ? ": " : "", msg);
            t->env_lost = fin != CL_SUCCESS;
            journal_add(&t->j, c->key, c->ch.path, &c->ch.params, 0, 0,
                        t->env_lost ? lost : msg);
        } else {
            /* Screening: a few batched samples, enough to rank candidates;
             * the winner is confirmed against the default afterwards. The
             * verification just ran the candidate on this instance, so no
             * warm-up; calls too long for 5 samples in 2 x min-time get 3,
             * and one call over twice the best so far ends it (tm_plan). */
            const oclf_choice *ch = &c->ch;
            tm_series s;
            const tm_plan plan = {t->min_time * 1e9 / 5, 5, 0, 2 * t->min_time * 1e9, 3,
                                  2 * best_ns};
            c->time_ns = tm_measure(&t->env, op, inst, &ch, 1, &plan, &s, NULL) == 0
                             ? tm_median(s.host, s.n)
                             : -1;
            c->state = c->time_ns > 0 ? 1 : -1;
            if (c->state < 0 && clFinish(t->env.queue) != CL_SUCCESS)
                t->env_lost = 1;
            journal_add(&t->j, c->key, c->ch.path, &c->ch.params, c->state > 0, c->time_ns,
                        c->state > 0 ? NULL : oclf_last_error(t->env.ctx));
        }
    }
    if (c->state > 0)
        r->measured++;
    else
        r->failed++;
}

void run_job(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape, result *r,
             cand *c, int defaults_only)
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
    /* The unfused path's own heuristic default comes first among its
     * points: it is the one measured whatever the budget, so a short run
     * compares the fused default with what a caller forcing unfused gets
     * untuned, and the record's alternative is never worse than that
     * (the first point of the unfused space was 3x slower than it at
     * rms_norm 4096x4096, and forcing unfused with such a record slowed
     * the call threefold). */
    if (op->has_unfused) {
        memset(&c[n], 0, sizeof c[n]);
        c[n].ch.path = OCLF_PATH_UNFUSED;
        c[n].order = -1;
        n++;
    }
    const oclf_path paths[2] = {OCLF_PATH_FUSED, OCLF_PATH_UNFUSED};
    static oclf_params space[MAX_CAND];
    for (int pi = 0; pi < (op->has_unfused ? 2 : 1); pi++) {
        int m = op->space(&t->env, op, shape, dt, paths[pi], space, MAX_CAND - n);
        for (int i = 0; i < m && n < MAX_CAND; i++, n++) {
            memset(&c[n], 0, sizeof c[n]);
            c[n].ch.path = paths[pi];
            c[n].ch.params = space[i];
            c[n].order = i;
        }
    }
    n = strategy_seed(t, op, dt, shape, c, n, MAX_CAND);
    for (int i = 0; i < n; i++) {
        char pt[256];
        params_text(&c[i].ch.params, pt, sizeof pt);
        snprintf(c[i].key, sizeof c[i].key, "%s|%s|%s|%s|%s|%s", fp, op->name,
                 oclf_dtype_name(dt), r->shape, path_name(c[i].ch.path),
                 c[i].is_default ? "default" : pt);
    }

    /* Order of measurement. The default always goes first: it is the
     * yardstick. It and each other path's first point are measured
     * whatever the job's share of the budget, so every record says which
     * path wins; then the seeds, then the search. */
    int *order = malloc((size_t)n * sizeof *order);
    int front = 1;
    const int mandatory = strategy_order(t, op, dt, shape, c, n, order, &front);
    const int anneal = strcmp(t->strategy, "anneal") == 0;

    const int left_jobs = t->jobs_total - t->jobs_done;
    const double job_end =
        tuner_now() + (t->deadline - tuner_now()) / (left_jobs > 0 ? left_jobs : 1);
    /* How many candidates this job measures at most (those taken from the
     * journal included): the defaults alone in the first pass; else
     * --max-candidates, never fewer than the defaults. */
    const int cap = defaults_only                        ? mandatory
                    : t->max_candidates <= 0             ? n
                    : t->max_candidates < mandatory      ? mandatory
                    : t->max_candidates < n              ? t->max_candidates
                                                         : n;
    int done = 0, cur = 0;
    double temp = 0.10; /* anneal: accepts a 10% worse point with p = 1/e at first */
    for (int oi = 0; oi < cap && !tuner_interrupted && !t->env_lost &&
                     (oi < mandatory || tuner_now() < job_end);) {
        /* The next batch: in list order, or the annealing walk once the
         * leading candidates (default, other paths, seeds) are measured. */
        cand *batch[BATCH];
        const int bmax = t->threads < BATCH ? t->threads : BATCH;
        int nb = 0;
        /* The defaults make a batch of their own: the search past them is
         * what the share of the budget decides on. */
        const int kind = oi >= mandatory;
        if (kind && tuner_now() + t->warm_s[t->warms[1] ? 1 : 0] > job_end)
            break;
        if (anneal && oi >= front) {
            const int pickc = anneal_next(c, n, cur);
            if (pickc < 0)
                break;
            batch[nb++] = &c[pickc];
            oi++;
        } else {
            while (nb < bmax && oi < cap && !(oi == mandatory && nb > 0))
                batch[nb++] = &c[order[oi++]];
        }
        const double warm_start = tuner_now();
        warm(&t->env, op, small, batch, nb, t->threads);
        if (small && clFinish(t->env.queue) != CL_SUCCESS) {
            /* A point of the batch faulted while it ran ahead (on a GPU the
             * context is then lost), and which one cannot be told: each
             * fresh point of the batch is journaled as failed, the job ends. */
            t->env_lost = 1;
            for (int b = 0; b < nb; b++)
                if (!json_object_get(t->j.done, batch[b]->key)) {
                    batch[b]->state = -1;
                    journal_add(&t->j, batch[b]->key, batch[b]->ch.path, &batch[b]->ch.params, 0,
                                0, "left the device unusable: in a batch that faulted while it "
                                   "ran ahead of timing");
                }
            break;
        }
        int fresh = 0; /* a batch all from the journal compiled nothing new */
        for (int b = 0; b < nb; b++)
            fresh |= !json_object_get(t->j.done, batch[b]->key);
        if (fresh) {
            t->warm_s[kind] = (t->warm_s[kind] * t->warms[kind] + (tuner_now() - warm_start)) /
                              (t->warms[kind] + 1);
            t->warms[kind]++;
        }
        /* A compiled batch is measured in full even past the job's share:
         * the compile, the dear part, is spent, and a screening costs a
         * few calls. */
        for (int b = 0; b < nb && done < cap && !tuner_interrupted && !t->env_lost; b++) {
            double best_ns = 0;
            for (int i = 0; i < n; i++)
                if (c[i].state > 0 && (best_ns == 0 || c[i].time_ns < best_ns))
                    best_ns = c[i].time_ns;
            measure(t, op, inst, batch[b], r, best_ns);
            done++;
            if (anneal && batch[b]->state > 0)
                cur = anneal_step(c, cur, (int)(batch[b] - c), &temp);
            progress(t, r, done, n);
        }
    }
    progress(t, r, n, n);
    free(order);

    r->default_ns = c[0].state > 0 ? c[0].time_ns : -1;
    r->unfused_default_ns = op->has_unfused && c[1].state > 0 ? c[1].time_ns : -1;
    if (defaults_only || t->env_lost) {
        op->destroy(inst);
        if (small)
            op->destroy(small);
        return;
    }
    const cand *f = pick(c, n, OCLF_PATH_FUSED), *u = pick(c, n, OCLF_PATH_UNFUSED);
    const cand *best = f;
    if (u && (!f || u->time_ns < f->time_ns))
        best = u;
    /* Screening alone never overrides the heuristic: a winner other than
     * the default is confirmed beside it, and an interrupted job keeps the
     * default. */
    if (best && !best->is_default && c[0].state > 0)
        best = tuner_interrupted ? &c[0] : confirm(t, op, inst, &c[best - c], &c[0]);
    r->default_ns = c[0].state > 0 ? c[0].time_ns : -1; /* as confirmed, where it was */
    op->destroy(inst);
    if (small)
        op->destroy(small);
    r->bytes = op->min_bytes(shape, dt);
    if (!best)
        return;
    r->have = 1;
    r->best = *best;
    if (best->ch.path == OCLF_PATH_FUSED)
        r->fused = *best; /* the fused time the record was chosen on */
    else if (f)
        r->fused = *f;
    if (u)
        r->unfused = *u;
}
