/* The tuner's strategies: the order in which a job measures its
 * candidates (tune/tuner.h). */
#include "tuner.h"

#include <jansson.h>

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

/* The heuristic's parameters for (op, dt, shape, path), which the tuner
 * asks the library for (oclf_tuning_resolve); the last answer is kept, as
 * a job asks for the same one many times. */
static const oclf_params *heuristic(tuner *t, const op_desc *op, oclf_dtype dt,
                                    const op_shape *shape, oclf_path path)
{
    /* One answer per path: the seeding compares points of both paths in
     * turn, which would evict a single entry on every call. */
    static char cache_key[OCLF_PATH_UNFUSED + 1][160];
    static oclf_params dflt[OCLF_PATH_UNFUSED + 1];
    char key[160], text_shape[96];
    op_format_shape(shape, text_shape, sizeof text_shape);
    snprintf(key, sizeof key, "%s/%d/%s", op->name, (int)dt, text_shape);
    if (strcmp(key, cache_key[path]) != 0) {
        snprintf(cache_key[path], sizeof cache_key[path], "%s", key);
        memset(&dflt[path], 0, sizeof dflt[path]);
        uint64_t dims[OP_MAX_DIMS];
        const int nd = op_lib_shape(op, shape, dims, NULL);
        oclf_tuning_decision d;
        if (oclf_tuning_resolve(t->env.ctx, op_lib_op(op), dt, dims, (unsigned)nd, path, &d) ==
            OCLF_SUCCESS)
            dflt[path] = d.heuristic.params;
    }
    return &dflt[path];
}

/* Within one parameter (or the path) of the heuristic default. */
static int near_default(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                        const cand *c)
{
    cand dflt;
    memset(&dflt, 0, sizeof dflt);
    dflt.ch.path = OCLF_PATH_FUSED;
    dflt.ch.params = *heuristic(t, op, dt, shape, OCLF_PATH_FUSED);
    return dflt.ch.params.count > 0 && hamming(c, &dflt) <= 1;
}

int strategy_known(const char *name)
{
    return !strcmp(name, "exhaustive") || !strcmp(name, "random") || !strcmp(name, "anneal");
}

/* `over` laid over the heuristic's parameters of its path: what dispatch
 * runs for a record or a point (a record names only what it changes). */
static oclf_params effective(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                             oclf_path path, const oclf_params *over)
{
    oclf_params p = *heuristic(t, op, dt, shape, path);
    for (unsigned i = 0; i < over->count; i++)
        oclf_params_set(&p, over->item[i].name, over->item[i].value);
    return p;
}

/* One seed: a (path, params) of a record, in the order of the records'
 * distance to the job's shape. */
typedef struct seed {
    double distance;
    oclf_path path;
    oclf_params params;
} seed;

static int seed_cmp(const void *a, const void *b)
{
    const double x = ((const seed *)a)->distance, y = ((const seed *)b)->distance;
    return x < y ? -1 : x > y;
}

/* The records of the job's op and dtype on this device (vendor and name)
 * in the database being written, each path of each, nearest shape first
 * (log distance over the library's dims): what won at this shape in an
 * earlier run and at the shapes this run has tuned so far. */
static int read_seeds(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                      seed *out, int max)
{
    if (!t->db)
        return 0;
    json_error_t err;
    json_t *root = json_load_file(t->db, 0, &err);
    if (!root)
        return 0;
    char fp[1024];
    snprintf(fp, sizeof fp, "%s", oclf_context_fingerprint(t->env.ctx));
    char *vendor = fp, *name = strchr(fp, '|'), *end;
    if (name && (end = strchr(++name, '|')))
        *end = '\0', name[-1] = '\0';
    uint64_t dims[OP_MAX_DIMS];
    const char *const *names;
    const int nd = op_lib_shape(op, shape, dims, &names);
    json_t *recs = json_object_get(root, "records");
    int n = 0;
    for (size_t i = 0; i < json_array_size(recs); i++) {
        json_t *r = json_array_get(recs, i), *dev = json_object_get(r, "device"),
               *sh = json_object_get(r, "shape");
        const char *ro = json_string_value(json_object_get(r, "op")),
                   *rd = json_string_value(json_object_get(r, "dtype")),
                   *rv = json_string_value(json_object_get(dev, "vendor")),
                   *rn = json_string_value(json_object_get(dev, "name"));
        if (!ro || !rd || !rv || !rn || !name || strcmp(ro, op_lib_op(op)) ||
            strcmp(rd, oclf_dtype_name(dt)) || strcmp(rv, vendor) || strcmp(rn, name))
            continue;
        double distance = 0;
        for (int k = 0; k < nd; k++) {
            const json_int_t v = json_integer_value(json_object_get(sh, names[k]));
            distance += fabs(log2(v > 1 ? (double)v : 1) - log2(dims[k] > 1 ? (double)dims[k] : 1));
        }
        json_t *alts = json_object_get(r, "alternatives");
        for (size_t a = 0; a <= json_array_size(alts); a++) {
            json_t *ch = a == 0 ? json_object_get(r, "choice") : json_array_get(alts, a - 1);
            const char *path = json_string_value(json_object_get(ch, "path"));
            json_t *params = json_object_get(ch, "params");
            if (!path || (strcmp(path, "fused") && strcmp(path, "unfused")))
                continue;
            /* full: this one replaces the farthest, if it is nearer */
            int slot = n;
            if (n == max) {
                slot = 0;
                for (int j = 1; j < n; j++)
                    if (out[j].distance > out[slot].distance)
                        slot = j;
                if (out[slot].distance <= distance)
                    continue;
            }
            seed *s = &out[slot];
            memset(s, 0, sizeof *s);
            s->distance = distance;
            s->path = strcmp(path, "fused") == 0 ? OCLF_PATH_FUSED : OCLF_PATH_UNFUSED;
            const char *pn;
            json_t *pv;
            json_object_foreach(params, pn, pv)
                oclf_params_set(&s->params, pn, json_integer_value(pv));
            if (slot == n)
                n++;
        }
    }
    json_decref(root);
    qsort(out, (size_t)n, sizeof *out, seed_cmp);
    return n;
}

int strategy_seed(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape, cand *c,
                  int n, int max)
{
    /* A point of the space that is a path's default itself is dropped: the
     * defaults lead the list (c[0] fused, then unfused's where the op has
     * one, both with no params) and are measured anyway, and at a second
     * or more a call a duplicate costs as much as a new point. */
    int defaults = 1;
    while (defaults < n && c[defaults].ch.params.count == 0 && c[defaults].order < 0)
        defaults++;
    int kept = defaults;
    for (int i = defaults; i < n; i++) {
        const oclf_params p = effective(t, op, dt, shape, c[i].ch.path, &c[i].ch.params);
        int dup = 0;
        for (int d = 0; d < defaults && !dup; d++)
            dup = c[d].ch.path == c[i].ch.path &&
                  op_params_same(&p, heuristic(t, op, dt, shape, c[d].ch.path));
        if (!dup)
            c[kept++] = c[i];
    }
    n = kept;
    static seed seeds[64];
    const int ns = read_seeds(t, op, dt, shape, seeds, 64);
    op_point_check chk;
    int taken = 0;
    for (int i = 0; i < ns && taken < SEEDS; i++) {
        const oclf_params want = effective(t, op, dt, shape, seeds[i].path, &seeds[i].params);
        int found = -1;
        for (int j = 0; j < n && found < 0; j++) {
            if (c[j].ch.path != seeds[i].path)
                continue;
            const oclf_params have = effective(t, op, dt, shape, c[j].ch.path, &c[j].ch.params);
            if (op_params_same(&have, &want))
                found = j;
        }
        if (found < 0 && n < max) {
            /* a point outside the pruned space: measured if the library takes it here */
            op_point_check_init(&chk, &t->env, op, shape, dt, seeds[i].path);
            if (!op_point_valid(&chk, &seeds[i].params))
                continue;
            memset(&c[n], 0, sizeof c[n]);
            c[n].ch.path = seeds[i].path;
            c[n].ch.params = seeds[i].params;
            c[n].order = n;
            found = n++;
        }
        if (found > 0 && !c[found].seed) { /* c[0], the default, goes first anyway */
            c[found].seed = 1;
            taken++;
        }
    }
    return n;
}

int strategy_order(tuner *t, const op_desc *op, oclf_dtype dt, const op_shape *shape,
                   const cand *c, int n, int *order, int *front)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    const int exhaustive = strcmp(t->strategy, "exhaustive") == 0;
    if (!exhaustive) {
        for (int i = n - 1; i > 1; i--) {
            int k = 1 + (int)rnd((unsigned)i);
            int tmp = order[i];
            order[i] = order[k], order[k] = tmp;
        }
    }
    /* Brought forward, in this order, each group keeping the order it had:
     * the first point of each other path (which path wins is what every
     * record must say, so both are measured whatever the budget), the
     * seeds (what won at this and nearby shapes), then, except for
     * exhaustive, the default's neighbours (one parameter or the path
     * away): under a short budget, where each new program costs seconds
     * of compiling, the neighbourhood of a good default is where the
     * likely wins are. */
    int pos = 1, mandatory = 1;
    for (int i = 1; i < n; i++) {
        int first = 1;
        for (int j = 0; j < order[i] && first; j++)
            first = c[j].ch.path != c[order[i]].ch.path;
        if (first && c[order[i]].ch.path != c[0].ch.path) {
            const int tmp = order[i];
            memmove(&order[pos + 1], &order[pos], (size_t)(i - pos) * sizeof *order);
            order[pos++] = tmp;
            mandatory++;
        }
    }
    for (int group = 0; group < (exhaustive ? 1 : 2); group++) {
        for (int i = pos; i < n; i++) {
            const cand *x = &c[order[i]];
            if (group == 0 ? x->seed : near_default(t, op, dt, shape, x)) {
                const int tmp = order[i];
                memmove(&order[pos + 1], &order[pos], (size_t)(i - pos) * sizeof *order);
                order[pos++] = tmp;
            }
        }
        if (group == 0)
            *front = pos;
    }
    return mandatory;
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
