/* The tuner's strategies: the order in which a job measures its
 * candidates (tune/tuner.h). */
#include "tuner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Within one parameter (or the path) of the heuristic default, which the
 * tuner asks the library for (oclf_tuning_resolve). */
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
        uint64_t dims[OP_MAX_DIMS];
        const int nd = op_lib_shape(op, shape, dims, NULL);
        oclf_tuning_decision d;
        if (oclf_tuning_resolve(t->env.ctx, op_lib_op(op), dt, dims, (unsigned)nd, OCLF_PATH_FUSED,
                                &d) == OCLF_SUCCESS)
            dflt.ch = d.heuristic;
    }
    return dflt.ch.params.count > 0 && hamming(c, &dflt) <= 1;
}

int strategy_known(const char *name)
{
    return !strcmp(name, "exhaustive") || !strcmp(name, "random") || !strcmp(name, "anneal");
}

void strategy_order(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                    const cand *c, int n, int *order)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    if (strcmp(t->strategy, "exhaustive") == 0)
        return;
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

int anneal_next(const cand *c, int n, int cur)
{
    int pickc = -1;
    for (int tries = 0; tries < 4 * n && pickc < 0; tries++) {
        int k = (int)rnd((unsigned)n);
        if (c[k].state == 0 && hamming(&c[k], &c[cur]) <= 1)
            pickc = k;
    }
    for (int k = 0; k < n && pickc < 0; k++)
        if (c[k].state == 0)
            pickc = k;
    return pickc;
}

int anneal_step(const cand *c, int cur, int next, double *temp)
{
    const double dt_rel = c[next].time_ns / c[cur].time_ns - 1;
    if (c[cur].state <= 0 || dt_rel < 0 || exp(-dt_rel / *temp) > rnd(1000) / 1000.0)
        cur = next;
    *temp *= 0.95;
    return cur;
}
