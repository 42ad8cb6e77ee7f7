/*
 * Sharded L2 top-k: one database in pieces on any mix of contexts, devices
 * and platforms. Every shard runs oclf_l2_topk on its own queue into
 * temporaries of its own context; the call enqueues all of them (and their
 * reads back to the host) before it waits for any, then merges the
 * per-shard lists on the host. The merge is public (oclf_l2_topk_merge) so
 * that a caller that gathers lists itself, one per MPI rank, merges with the
 * same code.
 */
#include "internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The total order of oclf_l2_topk on returned entries: numbers ascending,
 * NaN after every number, then the smaller id. Returned distances are
 * clamped at +0, so -0 never meets +0 here. */
static int entry_before(float da, int64_t ia, float db, int64_t ib)
{
    const int na = isnan(da), nb = isnan(db);
    if (na != nb)
        return nb;
    if (!na && da != db)
        return da < db;
    return ia < ib;
}

/* One query's row of every list, merged by repeatedly taking the best
 * head: k x lists compares, which at k = 10 and a handful of shards is far
 * below the cost of reading the lists back. `head` is scratch of `lists`. */
static void merge_row(size_t qi, size_t k, size_t lists, const float *const *dists,
                      const int64_t *const *ids, const size_t *list_k, size_t *head,
                      float *dist, int64_t *idx)
{
    memset(head, 0, lists * sizeof *head);
    for (size_t e = 0; e < k; e++) {
        size_t best = lists;
        float bd = 0;
        int64_t bi = 0;
        for (size_t j = 0; j < lists; j++) {
            if (head[j] >= list_k[j])
                continue;
            const size_t at = qi * list_k[j] + head[j];
            /* Padding (id -1) is last in a list: the list is done. */
            if (ids[j][at] < 0)
                continue;
            if (best == lists || entry_before(dists[j][at], ids[j][at], bd, bi)) {
                best = j;
                bd = dists[j][at];
                bi = ids[j][at];
            }
        }
        if (best == lists) {
            for (; e < k; e++) {
                dist[qi * k + e] = FLT_MAX;
                idx[qi * k + e] = -1;
            }
            return;
        }
        head[best]++;
        dist[qi * k + e] = bd;
        idx[qi * k + e] = bi;
    }
}

oclf_status oclf_l2_topk_merge(size_t nq, size_t k, size_t lists, const float *const *dists,
                               const int64_t *const *ids, const size_t *list_k, float *dist,
                               int64_t *idx)
{
    static const char fn[] = "oclf_l2_topk_merge";
    oclf_enter(fn);
    if (k == 0)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: k is 0", fn);
    if (nq && (!dist || !idx))
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: dist or idx is NULL", fn);
    if (lists && (!dists || !ids || !list_k))
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: dists, ids or list_k is NULL", fn);
    for (size_t j = 0; j < lists; j++)
        if (list_k[j] && nq && (!dists[j] || !ids[j]))
            return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: list %zu has NULL arrays", fn,
                             j);
    size_t *head = malloc((lists ? lists : 1) * sizeof *head);
    if (!head)
        return oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", fn);
    for (size_t qi = 0; qi < nq; qi++)
        merge_row(qi, k, lists, dists, ids, list_k, head, dist, idx);
    free(head);
    return OCLF_SUCCESS;
}

/* Records "oclf_l2_topk_sharded: shard j: <the error just recorded>"; the
 * inner message is copied first, as it lives in the buffer being written. */
static oclf_status fail_shard(oclf_status st, size_t j, const char *inner)
{
    char why[512];
    snprintf(why, sizeof why, "%s", inner);
    return oclf_fail(NULL, st, "oclf_l2_topk_sharded: shard %zu: %s", j, why);
}

/* What one shard's search owns until the merge. */
typedef struct shard_run {
    cl_mem q, dist, idx;
    cl_event read[2];
    size_t k;      /* entries per query in this shard's list */
    float *hd;     /* host copies of the list */
    int64_t *hi;
} shard_run;

static void run_release(shard_run *r)
{
    for (int e = 0; e < 2; e++)
        if (r->read[e])
            clReleaseEvent(r->read[e]);
    if (r->q)
        clReleaseMemObject(r->q);
    if (r->dist)
        clReleaseMemObject(r->dist);
    if (r->idx)
        clReleaseMemObject(r->idx);
    free(r->hd);
    free(r->hi);
}

/* Host-side checks of one shard, before anything is enqueued anywhere. */
static oclf_status check_shard(const oclf_l2_shard *s, size_t j)
{
    static const char fn[] = "oclf_l2_topk_sharded";
    if (!s->ctx)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: shard %zu: ctx is NULL", fn, j);
    if (!s->queue)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: shard %zu: queue is NULL", fn, j);
    if (s->n && !s->x.mem)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: shard %zu: x.mem is NULL", fn, j);
    if (s->first_id < 0 || (uint64_t)s->n > (uint64_t)INT64_MAX - (uint64_t)s->first_id)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "%s: shard %zu: ids first_id %lld .. + %zu rows leave 0..INT64_MAX", fn,
                         j, (long long)s->first_id, s->n);
    cl_context qc = NULL;
    cl_device_id qd = NULL;
    cl_int err = clGetCommandQueueInfo(s->queue, CL_QUEUE_CONTEXT, sizeof qc, &qc, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(s->queue, CL_QUEUE_DEVICE, sizeof qd, &qd, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: shard %zu: queue is not valid (%s)",
                         fn, j, oclf_cl_error_name(err));
    if (qc != s->ctx->cl || qd != s->ctx->device)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "%s: shard %zu: queue belongs to another context or device than ctx",
                         fn, j);
    if (s->n) {
        cl_context mc = NULL;
        err = clGetMemObjectInfo(s->x.mem, CL_MEM_CONTEXT, sizeof mc, &mc, NULL);
        if (err != CL_SUCCESS || mc != s->ctx->cl)
            return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                             "%s: shard %zu: x.mem is not a buffer of ctx's context", fn, j);
    }
    return OCLF_SUCCESS;
}

/* Global id ranges must be disjoint, or one row could come back twice. */
static oclf_status check_ids(const oclf_l2_shard *shards, size_t num_shards)
{
    for (size_t a = 0; a < num_shards; a++)
        for (size_t b = a + 1; b < num_shards; b++) {
            const oclf_l2_shard *s = &shards[a], *t = &shards[b];
            if (!s->n || !t->n)
                continue;
            if (s->first_id < t->first_id + (int64_t)t->n &&
                t->first_id < s->first_id + (int64_t)s->n)
                return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                                 "oclf_l2_topk_sharded: shards %zu and %zu overlap in global ids",
                                 a, b);
        }
    return OCLF_SUCCESS;
}

/* Enqueues shard j's search and the reads of its list; the temporaries
 * live in the shard's own context. */
static oclf_status launch_shard(const oclf_l2_shard *s, size_t j, size_t nq, size_t d, size_t k,
                                const float *q, size_t q_stride,
                                const oclf_l2_topk_options *options, shard_run *r)
{
    static const char fn[] = "oclf_l2_topk_sharded";
    /* A shard's list never needs more entries than the shard has rows; the
     * merge pads the tail. */
    r->k = s->n < k ? s->n : k;
    if (!r->k || !nq)
        return OCLF_SUCCESS;
    const size_t qbytes = ((nq - 1) * q_stride + d) * sizeof(float);
    r->hd = malloc(nq * r->k * sizeof *r->hd);
    r->hi = malloc(nq * r->k * sizeof *r->hi);
    if (!r->hd || !r->hi)
        return oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "%s: shard %zu: out of host memory", fn, j);
    cl_int err;
    r->q = clCreateBuffer(s->ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, qbytes, (void *)q,
                          &err);
    if (err == CL_SUCCESS)
        r->dist = clCreateBuffer(s->ctx->cl, CL_MEM_WRITE_ONLY, nq * r->k * sizeof(float), NULL,
                                 &err);
    if (err == CL_SUCCESS)
        r->idx = clCreateBuffer(s->ctx->cl, CL_MEM_WRITE_ONLY, nq * r->k * sizeof(cl_long), NULL,
                                &err);
    if (err != CL_SUCCESS) {
        oclf_status st = oclf_fail_cl(NULL, err, "clCreateBuffer");
        return oclf_fail(NULL, st, "%s: shard %zu: temporaries of %zu queries x %zu: %s", fn, j,
                         nq, r->k, oclf_cl_error_name(err));
    }
    /* options: read already by the caller (oclf_l2_topk_sharded) */
    oclf_l2_topk_options o = *options;
    o.x_norms = s->x_norms;
    o.allowed = s->allowed;
    oclf_status st = oclf_l2_topk(s->ctx, s->queue, s->dtype, nq, s->n, d, r->k,
                                  (oclf_buf){r->q, 0, q_stride}, s->x, (oclf_buf){r->dist, 0, 0},
                                  (oclf_buf){r->idx, 0, 0}, &o, s->choice, 0, NULL, NULL);
    oclf_enter(fn); /* again, after the nested public call */
    if (st)
        return fail_shard(st, j, oclf_last_error(s->ctx));
    err = clEnqueueReadBuffer(s->queue, r->dist, CL_FALSE, 0, nq * r->k * sizeof(float), r->hd,
                              0, NULL, &r->read[0]);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(s->queue, r->idx, CL_FALSE, 0, nq * r->k * sizeof(cl_long),
                                  r->hi, 0, NULL, &r->read[1]);
    if (err == CL_SUCCESS)
        err = clFlush(s->queue);
    if (err != CL_SUCCESS) {
        st = oclf_fail_cl(NULL, err, "clEnqueueReadBuffer");
        return oclf_fail(NULL, st, "%s: shard %zu: reading the list back: %s", fn, j,
                         oclf_cl_error_name(err));
    }
    return OCLF_SUCCESS;
}

/* Waits for shard j's reads; NULL events (nothing enqueued) are done. */
static oclf_status wait_shard(size_t j, shard_run *r)
{
    for (int e = 0; e < 2; e++) {
        if (!r->read[e])
            continue;
        cl_int err = clWaitForEvents(1, &r->read[e]);
        if (err != CL_SUCCESS) {
            oclf_status st = oclf_fail_cl(NULL, err, "clWaitForEvents");
            return oclf_fail(NULL, st, "oclf_l2_topk_sharded: shard %zu: the search failed: %s",
                             j, oclf_cl_error_name(err));
        }
    }
    return OCLF_SUCCESS;
}

oclf_status oclf_l2_topk_sharded(const oclf_l2_shard *shards, size_t num_shards, size_t nq,
                                 size_t d, size_t k, const float *q, size_t q_stride,
                                 float *dist, int64_t *idx, const oclf_l2_topk_options *options)
{
    static const char fn[] = "oclf_l2_topk_sharded";
    oclf_enter(fn);
    if (!shards || !num_shards)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: no shards", fn);
    if (d == 0)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: d is 0", fn);
    if (k == 0)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: k is 0", fn);
    if (k > ((size_t)1 << 31))
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: k = %zu exceeds 2^31", fn, k);
    if (nq && (!q || !dist || !idx))
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: q, dist or idx is NULL", fn);
    if (q_stride == 0)
        q_stride = d;
    if (q_stride < d)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT, "%s: q_stride %zu is below d = %zu", fn,
                         q_stride, d);
    oclf_l2_topk_options opt;
    oclf_status st;
    if ((st = oclf_l2_topk_options_read(NULL, options, &opt)))
        return st;
    options = &opt;
    if (options->x_norms || options->allowed)
        return oclf_fail(NULL, OCLF_INVALID_ARGUMENT,
                         "%s: options.x_norms and options.allowed must be NULL (set them per "
                         "shard)",
                         fn);
    for (size_t j = 0; j < num_shards; j++)
        if ((st = check_shard(&shards[j], j)))
            return st;
    if ((st = check_ids(shards, num_shards)))
        return st;

    shard_run *run = calloc(num_shards, sizeof *run);
    const float **ld = malloc(num_shards * sizeof *ld);
    const int64_t **li = malloc(num_shards * sizeof *li);
    size_t *lk = malloc(num_shards * sizeof *lk);
    if (!run || !ld || !li || !lk) {
        st = oclf_fail(NULL, OCLF_OUT_OF_RESOURCES, "%s: out of host memory", fn);
        goto done;
    }
    /* Enqueue every shard before waiting on any: devices run side by side. */
    size_t launched = 0;
    for (; launched < num_shards && !st; launched++)
        st = launch_shard(&shards[launched], launched, nq, d, k, q, q_stride, options,
                          &run[launched]);
    /* Wait even after a failure: the shards already enqueued write into
     * temporaries this call releases. */
    for (size_t j = 0; j < launched; j++) {
        oclf_status w = wait_shard(j, &run[j]);
        if (!st)
            st = w;
    }
    if (st)
        goto done;
    for (size_t j = 0; j < num_shards; j++) {
        /* Lists come back with shard-local rows; make them global ids. */
        for (size_t e = 0; e < nq * run[j].k; e++)
            if (run[j].hi[e] >= 0)
                run[j].hi[e] += shards[j].first_id;
        ld[j] = run[j].hd;
        li[j] = run[j].hi;
        lk[j] = run[j].k;
    }
    st = oclf_l2_topk_merge(nq, k, num_shards, ld, li, lk, dist, idx);
done:
    if (run)
        for (size_t j = 0; j < num_shards; j++)
            run_release(&run[j]);
    free(run);
    free(ld);
    free(li);
    free(lk);
    return st;
}
