/* Descriptor of l2_topk for the benchmark and the tuner. */
#include "opdesc.h"

#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct l2_inst {
    oclf_dtype dtype;
    size_t nq, n, d, k;
    float *hq;
    void *hx;
    cl_mem q, x, dist, idx;
    /* A database larger than one buffer may be (CL_DEVICE_MAX_MEM_ALLOC_SIZE)
     * is searched as `shards` buffers by oclf_l2_topk_sharded, its results on
     * the host in hd/hi; x is then NULL. */
    size_t shards;
    oclf_l2_shard *sh;
    float *hd;
    int64_t *hi;
    /* With $OCLF_L2_SHARD_DEVICES = N, shard j lives on device j mod N of
     * the platform; devices other than the bench's own get an environment
     * of their own here. */
    size_t ndev;
    op_env *dev_env;
} l2_inst;

static void l2_destroy(void *p)
{
    l2_inst *in = p;
    if (!in)
        return;
    cl_mem mems[4] = {in->q, in->x, in->dist, in->idx};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (size_t j = 0; in->sh && j < in->shards; j++)
        if (in->sh[j].x.mem)
            clReleaseMemObject(in->sh[j].x.mem);
    for (size_t j = 1; in->dev_env && j < in->ndev; j++)
        op_env_close(&in->dev_env[j]);
    free(in->dev_env);
    free(in->sh), free(in->hd), free(in->hi);
    free(in->hq), free(in->hx);
    free(in);
}

/* The environments of the first `want` devices of the bench's platform
 * (entry 0 is the bench's own); fewer when the platform has fewer. */
static int l2_open_devices(const op_env *env, l2_inst *in, size_t want, char *err, size_t errlen)
{
    cl_device_id ids[16];
    cl_uint n = 0;
    if (clGetDeviceIDs(env->platform, CL_DEVICE_TYPE_ALL, 16, ids, &n) != CL_SUCCESS || !n)
        n = 1;
    in->ndev = want < n ? want : n;
    if (!(in->dev_env = calloc(in->ndev, sizeof *in->dev_env))) {
        snprintf(err, errlen, "out of host memory");
        return 0;
    }
    in->dev_env[0] = *env;
    size_t k = 1;
    for (cl_uint i = 0; i < n && k < in->ndev; i++) {
        if (ids[i] == env->device)
            continue;
        if (op_env_open_device(&in->dev_env[k], env->platform, ids[i], NULL, err, errlen) != 0) {
            in->ndev = k; /* what was opened is closed by l2_destroy */
            return 0;
        }
        k++;
    }
    in->ndev = k;
    return 1;
}

/* What the host merge of a sharded call costs: the lists a call gathers
 * (nq x k per shard) merged by oclf_l2_topk_merge, timed alone and said on
 * stderr beside the shard count, so its share of the call can be read off
 * the bench's time. */
static void l2_time_merge(const l2_inst *in)
{
    const size_t per = in->nq * in->k, all = per * in->shards;
    float *d = malloc(all * sizeof *d + 4), *od = malloc(per * sizeof *od + 4);
    int64_t *id = malloc(all * sizeof *id + 8), *oi = malloc(per * sizeof *oi + 8);
    const float **dl = calloc(in->shards, sizeof *dl);
    const int64_t **il = calloc(in->shards, sizeof *il);
    size_t *lk = calloc(in->shards, sizeof *lk);
    if (d && id && od && oi && dl && il && lk && per) {
        for (size_t j = 0; j < in->shards; j++) {
            dl[j] = d + j * per, il[j] = id + j * per, lk[j] = in->k;
            for (size_t q = 0; q < in->nq; q++)
                for (size_t t = 0; t < in->k; t++) {
                    /* each list sorted, the lists interleaved */
                    d[j * per + q * in->k + t] = (float)t + 0.5f * (float)j;
                    id[j * per + q * in->k + t] = (int64_t)(j * in->k + t);
                }
        }
        const int reps = 20;
        const double t0 = op_now_s();
        for (int r = 0; r < reps; r++)
            oclf_l2_topk_merge(in->nq, in->k, in->shards, dl, il, lk, od, oi);
        fprintf(stderr, "l2_topk: host merge of %zu lists of %zu x %zu: %.1f us a call\n",
                in->shards, in->nq, in->k, (op_now_s() - t0) / reps * 1e6);
    }
    free(d), free(id), free(od), free(oi), free(dl), free(il), free(lk);
}

/* Splits the database into the fewest even buffers of at most per_max
 * rows and says how many on stderr (stdout is the bench's table). */
static int l2_shard(const op_env *env, l2_inst *in, size_t per_max, char *err, size_t errlen)
{
    const size_t es = oclf_dtype_size(in->dtype);
    in->shards = (in->n + per_max - 1) / per_max;
    const size_t per = (in->n + in->shards - 1) / in->shards;
    in->sh = calloc(in->shards, sizeof *in->sh);
    in->hd = malloc(in->nq * in->k * sizeof *in->hd + 4);
    in->hi = malloc(in->nq * in->k * sizeof *in->hi + 8);
    if (!in->sh || !in->hd || !in->hi) {
        snprintf(err, errlen, "out of host memory");
        return 0;
    }
    for (size_t j = 0; j < in->shards; j++) {
        const size_t first = j * per, rows = first + per <= in->n ? per : in->n - first;
        const op_env *on = in->ndev ? &in->dev_env[j % in->ndev] : env;
        in->sh[j] = (oclf_l2_shard){on->ctx, on->queue, {NULL, 0, 0}, rows, in->dtype,
                                    (int64_t)first, NULL, NULL, NULL};
        if (!(in->sh[j].x.mem = op_upload(on, (const char *)in->hx + first * in->d * es,
                                          rows * in->d * es, err, errlen)))
            return 0;
    }
    if (in->ndev)
        fprintf(stderr, "l2_topk: %zu rows x %zu %s: %zu shards of <= %zu rows on %zu devices\n",
                in->n, in->d, oclf_dtype_name(in->dtype), in->shards, per, in->ndev);
    else
        fprintf(stderr, "l2_topk: %zu rows x %zu %s exceed one buffer: %zu shards of <= %zu rows\n",
                in->n, in->d, oclf_dtype_name(in->dtype), in->shards, per);
    l2_time_merge(in);
    return 1;
}

/* Shape: nq x N x D x k. */
static void *l2_create(const op_env *env, const op_shape *s, oclf_dtype dt, char *err,
                       size_t errlen)
{
    l2_inst *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    in->dtype = dt;
    in->nq = s->d[0];
    in->n = s->d[1];
    in->d = s->d[2];
    in->k = s->d[3];
    const size_t es = oclf_dtype_size(dt);
    in->hq = malloc(in->nq * in->d * 4 + 4);
    in->hx = malloc(in->n * in->d * es + 4);
    if (!in->hq || !in->hx) {
        snprintf(err, errlen, "out of host memory for a %zu x %zu database", in->n, in->d);
        l2_destroy(in);
        return NULL;
    }
    op_fill_random(OCLF_F32, in->hq, in->nq * in->d, -1.0f, 1.0f, 11);
    op_fill_random(dt, in->hx, in->n * in->d, -1.0f, 1.0f, 12);
    /* Rows per buffer: what the device allocates at most, or fewer when
     * $OCLF_L2_SHARD_BYTES asks (to exercise sharding on small shapes). */
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(env->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc,
                    NULL);
    const char *cap = getenv("OCLF_L2_SHARD_BYTES");
    if (cap && strtoull(cap, NULL, 10) && strtoull(cap, NULL, 10) < max_alloc)
        max_alloc = strtoull(cap, NULL, 10);
    const size_t row_bytes = in->d > 0 ? in->d * es : 1;
    const size_t per_max = max_alloc / row_bytes ? max_alloc / row_bytes : 1;
    /* $OCLF_L2_SHARD_DEVICES = N spreads the database over N devices of
     * the platform, at least one shard each. */
    const char *ndev = getenv("OCLF_L2_SHARD_DEVICES");
    size_t shard_rows = per_max;
    if (ndev && strtoul(ndev, NULL, 10) > 1 && in->n > 1) {
        if (!l2_open_devices(env, in, strtoul(ndev, NULL, 10), err, errlen)) {
            l2_destroy(in);
            return NULL;
        }
        const size_t even = (in->n + in->ndev - 1) / in->ndev;
        shard_rows = even < per_max ? even : per_max;
    }
    if ((in->n > shard_rows || in->ndev > 1) && !l2_shard(env, in, shard_rows, err, errlen)) {
        l2_destroy(in);
        return NULL;
    }
    if (!(in->q = op_upload(env, in->hq, in->nq * in->d * 4, err, errlen)) ||
        (!in->shards && !(in->x = op_upload(env, in->hx, in->n * in->d * es, err, errlen))) ||
        !(in->dist = op_upload(env, NULL, in->nq * in->k * 4, err, errlen)) ||
        !(in->idx = op_upload(env, NULL, in->nq * in->k * 8, err, errlen))) {
        l2_destroy(in);
        return NULL;
    }
    return in;
}

static oclf_status l2_run(const op_env *env, void *p, const oclf_choice *ch, cl_event *ev)
{
    l2_inst *in = p;
    if (in->shards) {
        /* Blocking, merged on the host; the marker gives the caller its
         * event after the whole search. */
        for (size_t j = 0; j < in->shards; j++)
            in->sh[j].choice = ch;
        oclf_status st = oclf_l2_topk_sharded(in->sh, in->shards, in->nq, in->d, in->k, in->hq,
                                              in->d, in->hd, in->hi, NULL);
        if (st)
            return st;
        return ev && clEnqueueMarkerWithWaitList(env->queue, 0, NULL, ev) != CL_SUCCESS
                   ? OCLF_OPENCL_ERROR
                   : OCLF_SUCCESS;
    }
    oclf_buf q = {in->q, 0, 0}, x = {in->x, 0, 0}, d = {in->dist, 0, 0}, i = {in->idx, 0, 0};
    return oclf_l2_topk(env->ctx, env->queue, in->dtype, in->nq, in->n, in->d, in->k, q, x, d, i,
                        NULL, ch, 0, NULL, ev);
}

static int l2_blocks(const void *p) { return ((const l2_inst *)p)->shards != 0; }

/* The first and the last query against the reference (all queries would
 * cost nq x N x D in fp64 on the host): each returned distance within the
 * expansion's rounding error of the reference's at that rank, and each
 * returned row really at its distance. */
static int l2_verify(const op_env *env, void *p, const oclf_choice *ch, char *msg, size_t len)
{
    l2_inst *in = p;
    oclf_status st = l2_run(env, in, ch, NULL);
    if (st != OCLF_SUCCESS) {
        snprintf(msg, len, "%s: %s", oclf_status_string(st),
                 oclf_last_error(in->shards ? NULL : env->ctx));
        return 0;
    }
    if (in->nq == 0)
        return 1;
    float *gd = malloc(in->nq * in->k * 4 + 4);
    int64_t *gi = malloc(in->nq * in->k * 8 + 8);
    double *rd = malloc(in->k * sizeof *rd + 8), *all = malloc(in->n * sizeof *all + 8);
    int64_t *ri = malloc(in->k * 8 + 8);
    int ok = gd && gi && rd && all && ri;
    if (ok && in->shards) {
        memcpy(gd, in->hd, in->nq * in->k * 4);
        memcpy(gi, in->hi, in->nq * in->k * 8);
    } else if (ok) {
        ok = op_download(env, in->dist, gd, in->nq * in->k * 4) == 0 &&
             op_download(env, in->idx, gi, in->nq * in->k * 8) == 0;
    }
    if (!ok)
        snprintf(msg, len, "cannot read the result back");
    size_t qs[2] = {0, in->nq - 1};
    for (int t = 0; t < 2 && ok; t++) {
        const size_t qi = qs[t];
        const float *q = in->hq + qi * in->d;
        oclf_ref_l2_topk(in->dtype, 1, in->n, in->d, in->k, q, in->d, in->hx, in->d, rd, ri);
        oclf_ref_l2_dists(in->dtype, in->n, in->d, q, in->hx, in->d, all);
        double qq = 0, xmax = 0;
        for (size_t j = 0; j < in->d; j++)
            qq += (double)q[j] * q[j];
        xmax = (double)in->d; /* |x|^2 <= D for values in [-1, 1] */
        const double tol = 4e-6 * (qq + xmax) + 1e-5;
        for (size_t j = 0; j < in->k && ok; j++) {
            const float g = gd[qi * in->k + j];
            const int64_t id = gi[qi * in->k + j];
            if (ri[j] < 0) {
                ok = id == -1;
            } else {
                ok = fabs(g - rd[j]) <= tol + 1e-5 * rd[j] && id >= 0 && (size_t)id < in->n &&
                     fabs(all[id] - g) <= tol + 1e-5 * all[id];
            }
            if (!ok)
                snprintf(msg, len, "query %zu rank %zu: (%g, %lld), reference (%g, %lld)", qi, j,
                         (double)g, (long long)id, rd[j], (long long)ri[j]);
        }
    }
    free(gd), free(gi), free(rd), free(all), free(ri);
    return ok;
}

/* The database read once dominates; queries in and results out besides. */
static double l2_bytes(const op_shape *s, oclf_dtype dt)
{
    return (double)s->d[1] * (double)s->d[2] * (double)oclf_dtype_size(dt) +
           (double)s->d[0] * (double)s->d[2] * 4 + (double)s->d[0] * (double)s->d[3] * 12;
}

static double l2_flops(const op_shape *s)
{
    return 2.0 * (double)s->d[0] * (double)s->d[1] * (double)s->d[2];
}

/* Fused: register blocks, vector widths, group sizes and both formulas;
 * with the expansion, the queries read from global memory or from a local
 * copy (QLOCAL, where the copy fits). The direct formula takes the copy
 * where the heuristic would (on-chip local memory, half of it): searching
 * it both ways there too would pass the tuner's 512 candidates and crowd
 * out the unfused path's. XNORM is the heuristic's (it follows from how the
 * device runs a group's work-items, not from the shape), and so is TOPK on
 * CPUs; GPUs keep the lists on chip wherever they fit beside the point's
 * other local memory (TOPK 1, as the heuristic does). Unfused: slices and
 * GEMM tile widths. */
static int l2_space(const op_env *env, const op_desc *op, const op_shape *s, oclf_dtype dt,
                    oclf_path path, oclf_params *out, int max)
{
    op_point_check chk;
    op_point_check_init(&chk, env, op, s, dt, path);
    int n = 0;
    if (path == OCLF_PATH_UNFUSED) {
        static const int64_t slices[] = {0, 2, 8}, tiles[] = {0, 16384, 65536};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                oclf_params p;
                memset(&p, 0, sizeof p);
                oclf_params_set(&p, "SLICES", slices[a]);
                oclf_params_set(&p, "TILE", tiles[b]);
                op_space_add_valid(&chk, out, &n, max, &p);
            }
        return n;
    }
    cl_ulong local_mem = 0;
    clGetDeviceInfo(env->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    cl_device_local_mem_type lmt = CL_LOCAL;
    clGetDeviceInfo(env->device, CL_DEVICE_LOCAL_MEM_TYPE, sizeof lmt, &lmt, NULL);
    const uint64_t nq = s->d[0] ? s->d[0] : 1, d = s->d[2] ? s->d[2] : 1;
    const int gpu = op_is_gpu(env);
    static const int qbs[] = {1, 2, 4}, rbs[] = {1, 2, 4, 8}, vecs[] = {4, 8, 16};
    static const int nrbs[] = {4, 8, 16, 32};
    for (int formula = 1; formula >= 0; formula--)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 3; c++)
                    for (int e = 0; e < 8; e++) {
                        const int ql = e % 2; /* QLOCAL */
                        const uint64_t qb = (uint64_t)qbs[a];
                        if (qb > nq && qb > 1)
                            continue;
                        uint64_t qg = nq < 32 ? nq : 32;
                        qg = (qg + qb - 1) / qb * qb;
                        const uint64_t wgs = qg / qb * (uint64_t)nrbs[e / 2];
                        const uint64_t tr = (uint64_t)nrbs[e / 2] * (uint64_t)rbs[b];
                        /* The direct formula takes the query copy where
                         * the heuristic would: the tile, row and query
                         * norms and the queries within half of on-chip
                         * local memory. */
                        const uint64_t base = (qg * tr + tr + qg) * 4, copy = qg * d * 4;
                        if (formula == 0 &&
                            ql != (lmt != CL_GLOBAL && base + copy <= local_mem / 2))
                            continue;
                        if (gpu && qb * (uint64_t)rbs[b] * (uint64_t)vecs[c] >
                                       OP_GPU_MAX_BLOCK_FLOATS)
                            continue;
                        /* GPUs: rows loaded through local memory in
                         * chunks of 64 columns (coalesced) or each by its
                         * own work-item. */
                        for (int xs = 0; xs <= (gpu ? 64 : 0); xs += 64) {
                            oclf_params p;
                            memset(&p, 0, sizeof p);
                            oclf_params_set(&p, "FORMULA", formula);
                            oclf_params_set(&p, "QB", (int64_t)qb);
                            oclf_params_set(&p, "RB", rbs[b]);
                            oclf_params_set(&p, "VEC", vecs[c]);
                            oclf_params_set(&p, "QG", (int64_t)qg);
                            oclf_params_set(&p, "WGS", (int64_t)wgs);
                            oclf_params_set(&p, "QLOCAL", ql);
                            oclf_params_set(&p, "XSTAGE", xs);
                            /* GPUs: the lists on chip where the op takes
                             * them (TOPK 1), else the heaps */
                            if (gpu) {
                                oclf_params_set(&p, "TOPK", 1);
                                if (!op_point_valid(&chk, &p))
                                    oclf_params_set(&p, "TOPK", 0);
                            }
                            op_space_add_valid(&chk, out, &n, max, &p);
                        }
                    }
    return n;
}

/* nq x N x D x k: a k beyond N, query blocks with padding, several
 * slices, odd D; the queries read from global memory and from the group's
 * copy in local memory (QLOCAL), the latter with several query blocks per
 * group; row norms computed by every work-item and by the first query
 * block, or by a pass before the loop (XNORM). Traffic is bounded with the
 * norms summed in the loop (XNORM 1): with one query block per group (QG ==
 * QB) each database row is loaded by one work-item, which computes its norm
 * in the same pass, and QLOCAL loads the queries once; the heaps in global
 * memory add a few percent. TOPK=1 keeps the lists in local memory (the
 * whole group offering, sorting and merging). */
static const op_kernel_check l2_check = {
    "3x100x5x4,1x37x3x40",
    "SLICES=0;QB=1,RB=4,VEC=4,QG=4,WGS=16,SLICES=3,QLOCAL=0,XNORM=0;"
    "QB=2,RB=4,VEC=4,QG=4,WGS=8,SLICES=2,QLOCAL=0,XNORM=2;"
    "QB=2,RB=2,VEC=4,QG=6,WGS=12,SLICES=2,QLOCAL=1,XNORM=1;"
    "QB=2,RB=2,VEC=4,QG=6,WGS=12,SLICES=2,QLOCAL=1,XNORM=0,XSTAGE=16;"
    "QB=2,RB=2,VEC=4,QG=6,WGS=12,SLICES=3,QLOCAL=0,XNORM=0,TOPK=1",
    "QB=2,RB=4,VEC=4,QG=2,WGS=16,SLICES=1,QLOCAL=1,XNORM=1", "2x2048x32x4", 1, 1};

const op_desc op_l2_topk = {
    .name = "l2_topk",
    .shape_help = "NQxNxDxK (queries x database rows x dimension x k)",
    .ndims = 4,
    .dim_names = {"nq", "n", "d", "k"},
    .bench_shapes = "1x100000x768x10",
    /* the unfused path takes seconds a call at 10^6 rows */
    .bench_full_shapes = "1x1000000x768x10,16x1000000x768x10,100x1000000x768x10,"
                         "1024x100000x128x100",
    .uncached_shape = "1x100000x768x10",
    .uncached_dim = 1,
    .tune_shapes = "1x1000000x768x10,100x1000000x768x10,1024x100000x128x100",
    .test_shape = "7x1000x33x10",
    .has_unfused = 1,
    .create = l2_create,
    .run = l2_run,
    .verify = l2_verify,
    .min_bytes = l2_bytes,
    .flops = l2_flops,
    .destroy = l2_destroy,
    .blocks = l2_blocks,
    .space = l2_space,
    .kernel_check = &l2_check,
};
