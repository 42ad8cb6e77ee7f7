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
 * then pass the confirmation rule (confirm() in tune/job.c): measured again beside
 * the default, interleaved, it replaces the default only on a significant
 * (one-sided Mann-Whitney U, p < 0.01) win of more than TIE; the journal
 * records the test either way.
 *
 * Two passes. The first measures every job's defaults (the heuristic's
 * fused choice and the unfused path's heuristic default) within half the
 * budget, so a short budget sees as many shapes as it can before it
 * spends time searching any. The
 * second runs the jobs again in the order where a measurement is likeliest
 * to change a decision: by the ratio unfused/fused of those defaults,
 * smallest first (the shapes where the unfused path looked faster, which
 * only a confirmation can turn into a record, then those where the paths
 * are close), the ops without an unfused path last; the defaults come from
 * the journal. A job writes its record in the second pass only.
 *
 * Budget: --budget SECONDS for the whole run; in the second pass shared
 * evenly by the jobs not yet done, so a job that finishes early leaves its
 * time to the others. --max-candidates N bounds each job by a count
 * instead (the defaults always measured), and alone it sets no time limit:
 * what a run measures then does not depend on how fast the machine is.
 * Whatever its share, a job measures the default and each other path's
 * first point, so every record says which path won at its shape. The
 * search proper starts from the choices of the database's records at this
 * and the nearest shapes (the ones this run wrote so far included).
 * Every measurement is appended to a journal beside the database as it is
 * made; --resume takes measurements from it instead of repeating them.
 * Ctrl-C stops after the current candidate and writes what is done.
 *
 * Compilation: each batch of candidates is compiled ahead of its timing by
 * running a one-row instance from several threads (the library is
 * thread-safe per context). On the 2-core CI machine this buys little; on
 * a many-core host the OpenCL compiler dominates a cold run.
 *
 * Files: this one reads the command line, lists the jobs and merges each
 * finished job into the database; tune/job.c runs one job (compile ahead,
 * verify, time, choose, confirm); tune/strategies.c orders its candidates;
 * tune/journal.c and tune/records.c write the journal, the records and the
 * closing table.
 */
#include "cli.h"
#include "tuner.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t tuner_interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    tuner_interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: oclfuse-tune [options]\n"
            "  --list               platforms and devices with index and fingerprint\n"
            "  --platform P --device D   index or name substring (default: first)\n"
            "  --ops a,b,...        operations (default: all)\n"
            "  --dtypes f32,...     storage dtypes (default: f32,f16,bf16)\n"
            "  --shapes S           preset (default, bench, llm, layer: every shape of a\n"
            "                       Llama-3-8B decoder layer at decode 1 and 16 and\n"
            "                       prefill 512, short: the bench shapes of\n"
            "                       a short run, as oclfuse-bench --short), a comma list,\n"
            "                       or a file with one shape per line\n"
            "  --budget SECONDS     for the whole run (default 600, none with\n"
            "                       --max-candidates alone)\n"
            "  --max-candidates N   per job, the two paths' defaults included (default:\n"
            "                       no limit)\n"
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
    if (spec && strcmp(spec, "short") == 0)
        return op_short_shapes(op);
    /* "bench": every shape the benchmark knows, its --full ones included */
    if (spec && strcmp(spec, "bench") == 0) {
        const char *more = op->bench_full_shapes;
        char *all = malloc(strlen(op->bench_shapes) + (more ? strlen(more) + 1 : 0) + 1);
        if (all)
            sprintf(all, "%s%s%s", op->bench_shapes, more ? "," : "", more ? more : "");
        return all;
    }
    /* "layer": only the ops a decoder layer calls have shapes */
    if (spec && strcmp(spec, "layer") == 0)
        return strdup(op->layer_shapes ? op->layer_shapes : "");
    const char *preset = !spec || strcmp(spec, "default") == 0 ? op->tune_shapes
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

/* After a candidate left the device unusable: the job was abandoned; the
 * device is opened again for the jobs after it. 0 when it could be. */
static int reopen_device(tuner *t, const char *what, int quiet)
{
    fprintf(stderr, "%soclfuse-tune: %s: a candidate left the device unusable; the job is "
            "abandoned (the journal names the candidate) and the device opened again\n",
            t->tty && !quiet ? "\n" : "", what);
    op_env_close(&t->env);
    t->env_lost = 0;
    char err[512];
    if (op_env_open_opts(&t->env, t->platform, t->device, &t->opts, err, sizeof err) != 0) {
        fprintf(stderr, "oclfuse-tune: cannot open the device again: %s\n", err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *ops = NULL, *dtypes = "f32,f16,bf16", *shapes = NULL, *platform = NULL,
               *device = NULL, *db = NULL, *strategy = "random";
    double budget = 600, min_time = 0.05;
    int resume = 0, quiet = 0, budget_given = 0, max_candidates = 0;
    int list = 0;
    const cli_opt cli[] = {
        {"--ops", CLI_STRING, &ops, 0, 0, NULL},
        {"--dtypes", CLI_STRING, &dtypes, 0, 0, NULL},
        {"--shapes", CLI_STRING, &shapes, 0, 0, NULL},
        {"--platform", CLI_STRING, &platform, 0, 0, NULL},
        {"--device", CLI_STRING, &device, 0, 0, NULL},
        {"--db", CLI_STRING, &db, 0, 0, NULL},
        {"--strategy", CLI_STRING, &strategy, 0, 0, NULL},
        {"--budget", CLI_DOUBLE, &budget, 0, 0, &budget_given},
        {"--max-candidates", CLI_INT, &max_candidates, 1, LONG_MAX, NULL},
        {"--min-time", CLI_DOUBLE, &min_time, 0, 0, NULL},
        {"--resume", CLI_FLAG, &resume, 0, 0, NULL},
        {"--quiet", CLI_FLAG, &quiet, 0, 0, NULL},
        {"--list", CLI_FLAG, &list, 0, 0, NULL},
    };
    const int rc_cli = cli_parse("oclfuse-tune", argc, argv, cli, (int)(sizeof cli / sizeof cli[0]),
                                 usage);
    if (rc_cli >= 0)
        return rc_cli;
    if (list)
        return op_list_devices("oclfuse-tune");
    if (!strategy_known(strategy)) {
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
    t.db = db;
    t.min_time = min_time;
    t.max_candidates = max_candidates;
    t.quiet = quiet;
    t.tty = isatty(2);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    t.threads = ncpu > 1 ? (int)(ncpu < 8 ? ncpu : 8) : 1;
    oclf_context_options opts;
    oclf_context_options_init(&opts);
    opts.no_tuning_db = 1; /* every candidate, the default included, as the heuristic has it */
    char err[512];
    t.platform = platform;
    t.device = device;
    t.opts = opts;
    const char *lose = getenv("OCLF_TUNE_LOSE_DEVICE");
    t.lose_at = lose ? atoi(lose) : 0;
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

    t.start = tuner_now();
    t.deadline = max_candidates && !budget_given ? INFINITY : t.start + budget;
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
    result *res = calloc((size_t)(nj > 0 ? nj : 1), sizeof *res);
    static cand c[MAX_CAND];
    /* First pass: every job's defaults, within half the budget: what it
     * measures becomes a record only in the second pass, so a first pass
     * that spent it all would leave nothing written. The budget is for the
     * whole run: once it is spent the remaining jobs keep what dispatch
     * already does for them (the heuristic). */
    const double first_end = t.start + (t.deadline - t.start) / 2;
    double *lean = calloc((size_t)(nj > 0 ? nj : 1), sizeof *lean);
    int *order = calloc((size_t)(nj > 0 ? nj : 1), sizeof *order);
    int reached = 0;
    t.first_pass = 1;
    t.jobs_total = nj;
    for (int i = 0; i < nj && !tuner_interrupted; i++) {
        if (i > 0 && tuner_now() >= first_end)
            break;
        result scratch;
        memset(&scratch, 0, sizeof scratch);
        scratch.op = jobs[i].op;
        scratch.dtype = jobs[i].dt;
        snprintf(scratch.shape, sizeof scratch.shape, "%s", jobs[i].text);
        run_job(&t, jobs[i].op, jobs[i].dt, &jobs[i].shape, &scratch, c, 1);
        t.jobs_done++;
        if (t.env_lost && reopen_device(&t, jobs[i].text, quiet) != 0) {
            rc = 1;
            break;
        }
        /* log(unfused / fused) of the defaults: below 0 where the unfused
         * path looked faster; ops without one (or a failed default) last. */
        lean[i] = scratch.default_ns > 0 && scratch.unfused_default_ns > 0
                      ? log(scratch.unfused_default_ns / scratch.default_ns)
                      : INFINITY;
        order[reached++] = i;
    }
    /* Second pass, in the order of lean (insertion sort: stable, and a
     * run has tens of jobs). */
    for (int a = 1; a < reached; a++) {
        const int v = order[a];
        int b = a;
        for (; b > 0 && lean[order[b - 1]] > lean[v]; b--)
            order[b] = order[b - 1];
        order[b] = v;
    }
    t.first_pass = 0;
    t.jobs_total = reached;
    t.jobs_done = 0;
    for (int k = 0; k < reached && !tuner_interrupted; k++) {
        const int i = order[k];
        if (k > 0 && tuner_now() >= t.deadline)
            break;
        result *r = &res[i];
        r->op = jobs[i].op;
        r->dtype = jobs[i].dt;
        snprintf(r->shape, sizeof r->shape, "%s", jobs[i].text);
        run_job(&t, jobs[i].op, jobs[i].dt, &jobs[i].shape, r, c, 0);
        t.jobs_done++;
        if (t.env_lost && reopen_device(&t, jobs[i].text, quiet) != 0) {
            rc = 1;
            break;
        }
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
    if (!tuner_interrupted && t.jobs_done < nj)
        fprintf(stderr, "%soclfuse-tune: budget spent; %d of %d jobs not tuned (%d with their "
                "defaults measured)\n",
                t.tty && !quiet ? "\n" : "", nj - t.jobs_done, nj, reached - t.jobs_done);
    free(lean);
    free(order);
    if (t.tty && !quiet)
        fprintf(stderr, "\n");
    if (tuner_interrupted)
        fprintf(stderr, "oclfuse-tune: interrupted; %d of %d jobs written to %s\n", t.jobs_done,
                nj, db);
    closing_table(res, nj, t.copy_gbps);
    printf("\n%d jobs in %.0f s; database %s\n", t.jobs_done, tuner_now() - t.start, db);
    free(res);
    free(jobs);
    journal_close(&t.j);
    op_env_close(&t.env);
    return rc;
}
