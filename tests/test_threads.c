/*
 * Several threads dispatch different ops concurrently, on one shared
 * oclf_context (each thread with its own queue) and on two contexts, each
 * verifying every result against the CPU reference (the op descriptors'
 * verify). Ops are taken from the descriptor table, so ops that land later
 * join without changes here.
 */
#include "opdesc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 4, REPS = 6 };

typedef struct job {
    op_env env; /* shares cl/ctx with others; its own queue */
    int index;
    int failures;
    char msg[512];
} job;

static void *worker(void *p)
{
    job *j = p;
    static const oclf_dtype dts[] = {OCLF_F32, OCLF_F16, OCLF_BF16};
    static const char *const shapes[] = {"7x769", "3x4096", "16x100"};
    int nops = 0;
    while (op_table[nops])
        nops++;
    for (int r = 0; r < REPS; r++) {
        const op_desc *op = op_table[(j->index + r) % nops];
        op_shape s;
        if (!op_parse_shape(op, shapes[(j->index + r) % 3], &s)) {
            /* ops with other dimension counts use their first bench shape */
            char first[128];
            snprintf(first, sizeof first, "%s", op->bench_shapes);
            char *comma = strchr(first, ',');
            if (comma)
                *comma = 0;
            if (!op_parse_shape(op, first, &s))
                continue;
        }
        char err[256];
        void *inst = op->create(&j->env, &s, dts[(j->index + r) % 3], err, sizeof err);
        if (!inst) {
            snprintf(j->msg, sizeof j->msg, "%s: %s", op->name, err);
            j->failures++;
            continue;
        }
        oclf_choice ch;
        memset(&ch, 0, sizeof ch);
        ch.path = (r & 1) && op->has_unfused ? OCLF_PATH_UNFUSED : OCLF_PATH_FUSED;
        if (!op->verify(&j->env, inst, &ch, err, sizeof err)) {
            snprintf(j->msg, sizeof j->msg, "%s: %s", op->name, err);
            j->failures++;
        }
        op->destroy(inst);
    }
    return NULL;
}

/* Runs THREADS workers; contexts[i % ncontexts] for worker i. */
static int run(op_env *base, oclf_context **contexts, int ncontexts)
{
    job jobs[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].env = *base;
        jobs[i].env.ctx = contexts[i % ncontexts];
        jobs[i].index = i;
        cl_int e;
        jobs[i].env.queue = clCreateCommandQueue(base->cl, base->device, 0, &e);
        if (!jobs[i].env.queue)
            return 1;
    }
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        clReleaseCommandQueue(jobs[i].env.queue);
        if (jobs[i].failures) {
            printf("thread %d (%d contexts): %d failures, last: %s\n", i, ncontexts,
                   jobs[i].failures, jobs[i].msg);
            failed++;
        }
    }
    return failed;
}

int main(void)
{
    op_env env;
    char err[512];
    if (op_env_open(&env, getenv("OCLF_TEST_PLATFORM"), NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    oclf_context *second = NULL;
    if (oclf_context_create(env.cl, env.device, NULL, &second) != OCLF_SUCCESS) {
        fprintf(stderr, "%s\n", oclf_last_error(NULL));
        return 1;
    }
    oclf_context *one[1] = {env.ctx}, *two[2] = {env.ctx, second};
    int failed = run(&env, one, 1);
    failed += run(&env, two, 2);
    oclf_context_destroy(second);
    op_env_close(&env);
    printf("%s\n", failed ? "FAILED" : "all threads verified their results");
    return failed ? 1 : 0;
}
