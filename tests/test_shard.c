/*
 * Sharded L2 top-k: one database split into shards on two devices (meson
 * runs this with POCL_DEVICES="pthread pthread") or, with the argument
 * "platforms", on two platforms (POCL and oclgrind, loaded side by side
 * through an ICD folder made here), compared bit for bit with one
 * oclf_l2_topk over the concatenated database and with the reference.
 *
 * The data are small integers, so every distance is an exact integer in
 * fp32 whatever formula or device computes it: equal bits are required, and
 * the many exact ties (within and across shards) test the order itself.
 */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct dev {
    cl_context cl;
    cl_command_queue queue;
    oclf_context *ctx;
    char platform[128];
} dev;

static dev devs[4];
static size_t ndevs;

/* Runs before the test runner: reports with printf, not ck_assert. */
static void dev_open(cl_platform_id p, cl_device_id d)
{
    dev *v = &devs[ndevs];
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0};
    v->cl = clCreateContext(props, 1, &d, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        printf("clCreateContext: %d\n", err);
        return;
    }
    v->queue = clCreateCommandQueue(v->cl, d, 0, &err);
    if (err != CL_SUCCESS) {
        printf("clCreateCommandQueue: %d\n", err);
        clReleaseContext(v->cl);
        return;
    }
    /* Heuristics only: a tuning record keyed by N could pick other
     * parameters for a shard than for the whole database. */
    oclf_context_options o;
    oclf_context_options_init(&o);
    o.no_tuning_db = 1;
    if (oclf_context_create(v->cl, d, &o, &v->ctx) != OCLF_SUCCESS) {
        printf("%s\n", oclf_last_error(NULL));
        clReleaseCommandQueue(v->queue);
        clReleaseContext(v->cl);
        return;
    }
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof v->platform, v->platform, NULL);
    ndevs++;
}

/* Two devices: the first two of the platform whose name has `first`, or of
 * `first` and `second` when `second` is given. Returns 0 when they are not
 * there. */
static int devs_open(const char *first, const char *second)
{
    cl_platform_id plats[8];
    cl_uint np = 0;
    if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS)
        return 0;
    const char *want[2] = {first, second ? second : first};
    for (int w = 0; w < 2; w++) {
        for (cl_uint i = 0; i < np && ndevs == (size_t)w; i++) {
            char name[128] = "";
            clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
            if (!strstr(name, want[w]))
                continue;
            cl_device_id ds[4];
            cl_uint nd = 0;
            if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 4, ds, &nd) != CL_SUCCESS)
                continue;
            size_t skip = (!second && w == 1 && nd > 1) ? 1 : 0;
            if (!second && w == 1 && nd == 1)
                printf("note: one device on %s; two contexts on it stand in for two devices\n",
                       name);
            dev_open(plats[i], ds[skip]);
        }
    }
    return ndevs == 2;
}

static void devs_close(void)
{
    for (size_t i = 0; i < ndevs; i++) {
        oclf_context_destroy(devs[i].ctx);
        clReleaseCommandQueue(devs[i].queue);
        clReleaseContext(devs[i].cl);
    }
    ndevs = 0;
}

static cl_mem upload(const dev *v, const void *host, size_t bytes)
{
    cl_int err;
    const int copy = host && bytes;
    cl_mem m = clCreateBuffer(v->cl, CL_MEM_READ_WRITE | (copy ? CL_MEM_COPY_HOST_PTR : 0),
                              bytes ? bytes : 1, copy ? (void *)host : NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

/* Small integers, or with floats_ set uniform floats (to check that a
 * distance's bits do not depend on which device or platform sums it). */
static int floats_;
static float small_int(void)
{
    return floats_ ? th_uniform(-1.0f, 1.0f) : floorf(th_uniform(-3.0f, 4.0f));
}

typedef struct shard_case {
    oclf_dtype dt;
    size_t nq, d, k;
    size_t nshards;
    size_t rows[6];
    int mask, norms;
    size_t pad, off; /* extra elements per row, leading elements */
    const oclf_choice *choice; /* for the whole search and every shard */
} shard_case;

/* Splits a database of sum(rows) into the case's shards, alternating the
 * two devices, and compares with the whole database searched on device 0
 * and with the reference. */
static void run_shard_case(const shard_case *c)
{
    const size_t es = oclf_dtype_size(c->dt);
    size_t n = 0;
    for (size_t s = 0; s < c->nshards; s++)
        n += c->rows[s];
    const size_t xs = c->d + c->pad;
    float *q = malloc((c->nq * c->d + 1) * sizeof *q);
    for (size_t i = 0; i < c->nq * c->d; i++)
        q[i] = small_int();
    unsigned char *x = calloc(c->off + n * xs + 1, es);
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < c->d; i++)
            oclf_ref_set(c->dt, x, c->off + r * xs + i, small_int());
    /* Duplicates of rows across shard borders: ties the merge must break
     * by global id. */
    for (size_t r = 1; r < n; r += 5)
        memcpy(x + (c->off + r * xs) * es, x + (c->off + (r - 1) / 2 * xs) * es, c->d * es);
    uint8_t *mask = calloc(n / 8 + 2, 1);
    for (size_t r = 0; r < n; r++)
        if (!c->mask || (r * 2654435761u >> 5) % 3 != 0)
            mask[r / 8] |= (uint8_t)(1u << (r % 8));
    float *norms = malloc((n + 1) * sizeof *norms);
    for (size_t r = 0; r < n; r++) {
        double s = 0;
        for (size_t i = 0; i < c->d; i++) {
            double v = oclf_ref_get(c->dt, x, c->off + r * xs + i);
            s += v * v;
        }
        norms[r] = (float)s;
    }

    /* The whole database on device 0. */
    const dev *d0 = &devs[0];
    cl_mem wq = upload(d0, q, c->nq * c->d * sizeof(float));
    cl_mem wx = upload(d0, x, (c->off + n * xs) * es);
    cl_mem wd = upload(d0, NULL, c->nq * c->k * sizeof(float));
    cl_mem wi = upload(d0, NULL, c->nq * c->k * sizeof(cl_long));
    cl_mem wm = upload(d0, mask, n / 8 + 1);
    cl_mem wn = upload(d0, norms, n * sizeof(float));
    oclf_l2_topk_options o;
    oclf_l2_topk_options_init(&o);
    oclf_buf mb = {wm, 0, 0}, nb = {wn, 0, 0};
    o.allowed = c->mask ? &mb : NULL;
    o.x_norms = c->norms ? &nb : NULL;
    float *whole_d = malloc((c->nq * c->k + 1) * sizeof(float));
    int64_t *whole_i = malloc((c->nq * c->k + 1) * sizeof(int64_t));
    oclf_status st = oclf_l2_topk(d0->ctx, d0->queue, c->dt, c->nq, n, c->d, c->k,
                                  (oclf_buf){wq, 0, 0}, (oclf_buf){wx, c->off, xs},
                                  (oclf_buf){wd, 0, 0}, (oclf_buf){wi, 0, 0}, &o, c->choice, 0,
                                  NULL, NULL);
    ck_assert_msg(st == OCLF_SUCCESS, "whole: %s", oclf_last_error(d0->ctx));
    clEnqueueReadBuffer(d0->queue, wd, CL_TRUE, 0, c->nq * c->k * sizeof(float), whole_d, 0,
                        NULL, NULL);
    clEnqueueReadBuffer(d0->queue, wi, CL_TRUE, 0, c->nq * c->k * sizeof(cl_long), whole_i, 0,
                        NULL, NULL);

    /* The shards: each its own buffer, mask (re-based to the shard's first
     * row) and norms, on alternating devices. */
    oclf_l2_shard sh[6];
    cl_mem sx[6], sm[6], sn[6];
    oclf_buf smb[6], snb[6];
    size_t at = 0;
    for (size_t s = 0; s < c->nshards; s++) {
        const dev *v = &devs[s % 2];
        const size_t rs = c->rows[s];
        sx[s] = upload(v, x + (at * xs) * es, (c->off + rs * xs) * es);
        uint8_t *m = calloc(rs / 8 + 2, 1);
        for (size_t r = 0; r < rs; r++)
            if (mask[(at + r) / 8] >> ((at + r) % 8) & 1)
                m[r / 8] |= (uint8_t)(1u << (r % 8));
        sm[s] = upload(v, m, rs / 8 + 1);
        free(m);
        sn[s] = upload(v, norms + at, rs * sizeof(float));
        smb[s] = (oclf_buf){sm[s], 0, 0};
        snb[s] = (oclf_buf){sn[s], 0, 0};
        sh[s] = (oclf_l2_shard){v->ctx, v->queue, {sx[s], c->off, xs}, rs, c->dt,
                                (int64_t)at, c->norms ? &snb[s] : NULL,
                                c->mask ? &smb[s] : NULL, c->choice};
        at += rs;
    }
    float *sd = malloc((c->nq * c->k + 1) * sizeof(float));
    int64_t *si = malloc((c->nq * c->k + 1) * sizeof(int64_t));
    st = oclf_l2_topk_sharded(sh, c->nshards, c->nq, c->d, c->k, q, c->d, sd, si, NULL);
    ck_assert_msg(st == OCLF_SUCCESS, "sharded: %s", oclf_last_error(NULL));

    double *rd = malloc((c->nq * c->k + 1) * sizeof(double));
    int64_t *ri = malloc((c->nq * c->k + 1) * sizeof(int64_t));
    oclf_ref_l2_topk_allowed(c->dt, c->nq, n, c->d, c->k, q, c->d, x + c->off * es, xs,
                             c->mask ? mask : NULL, rd, ri);
    for (size_t e = 0; e < c->nq * c->k; e++) {
        ck_assert_msg(si[e] == whole_i[e] && memcmp(&sd[e], &whole_d[e], sizeof(float)) == 0,
                      "%s nq=%zu d=%zu k=%zu shards=%zu: entry %zu: sharded (%g, %lld), whole "
                      "(%g, %lld)",
                      oclf_dtype_name(c->dt), c->nq, c->d, c->k, c->nshards, e, sd[e],
                      (long long)si[e], whole_d[e], (long long)whole_i[e]);
        if (floats_)
            continue; /* the fp64 reference may order near-ties otherwise */
        ck_assert_msg(si[e] == ri[e] && (double)sd[e] == (ri[e] < 0 ? (double)FLT_MAX : rd[e]),
                      "entry %zu: sharded (%g, %lld), reference (%g, %lld)", e, sd[e],
                      (long long)si[e], rd[e], (long long)ri[e]);
    }

    for (size_t s = 0; s < c->nshards; s++) {
        clReleaseMemObject(sx[s]);
        clReleaseMemObject(sm[s]);
        clReleaseMemObject(sn[s]);
    }
    cl_mem all[] = {wq, wx, wd, wi, wm, wn};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        clReleaseMemObject(all[i]);
    free(q), free(x), free(mask), free(norms), free(whole_d), free(whole_i), free(sd), free(si),
        free(rd), free(ri);
}

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

START_TEST(sharded_equals_whole)
{
    th_seed(11 + (uint64_t)_i);
    const oclf_dtype dt = dtypes[_i];
    const shard_case cases[] = {
        /* uneven shards, an empty one, odd D, strided rows */
        {dt, 7, 13, 10, 4, {37, 0, 211, 5}, 0, 0, 3, 2, NULL},
        /* k beyond every row of all shards: padding after the last row */
        {dt, 3, 8, 40, 3, {9, 1, 17}, 0, 0, 0, 0, NULL},
        /* one query, one-row shards */
        {dt, 1, 5, 4, 6, {1, 1, 1, 1, 1, 1}, 0, 0, 1, 1, NULL},
        /* masks and norms per shard */
        {dt, 5, 16, 12, 3, {64, 129, 31}, 1, 1, 0, 0, NULL},
        {dt, 2, 7, 50, 2, {33, 20}, 1, 0, 2, 0, NULL},
        /* no queries */
        {dt, 0, 4, 3, 2, {5, 5}, 0, 0, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_shard_case(&cases[i]);
}
END_TEST

/* Float data with one explicit kernel choice on both devices: each
 * distance is summed alike everywhere, so the bits still agree (across
 * platforms too: both compile the same source without fast-math). */
START_TEST(float_data_one_choice)
{
    th_seed(23);
    oclf_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = OCLF_PATH_FUSED;
    static const struct {
        const char *name;
        int64_t v;
    } p[] = {{"FORMULA", 1}, {"QB", 1}, {"RB", 2}, {"VEC", 4}, {"QG", 4},
             {"WGS", 16}, {"SLICES", 0}, {"QLOCAL", 0}, {"XNORM", 0}};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        oclf_params_set(&ch.params, p[i].name, p[i].v);
    const shard_case c = {OCLF_F32, 5, 45, 9, 3, {300, 17, 250}, 1, 0, 0, 0, &ch};
    floats_ = 1;
    run_shard_case(&c);
    ch.params.item[0].value = 0; /* FORMULA 0: the direct sum */
    run_shard_case(&c);
    floats_ = 0;
}
END_TEST

/* Ids need not be contiguous or in shard order: a shard listed first may
 * hold the later ids, and gaps stay gaps. */
START_TEST(ids_out_of_order)
{
    th_seed(5);
    const size_t d = 4, nq = 3, k = 6, na = 10, nb = 7;
    float q[3 * 4], x[17 * 4];
    for (size_t i = 0; i < nq * d; i++)
        q[i] = small_int();
    for (size_t i = 0; i < (na + nb) * d; i++)
        x[i] = small_int();
    cl_mem a = upload(&devs[0], x, na * d * 4), b = upload(&devs[1], x + na * d, nb * d * 4);
    oclf_l2_shard sh[2] = {
        {devs[0].ctx, devs[0].queue, {a, 0, 0}, na, OCLF_F32, 1000, NULL, NULL, NULL},
        {devs[1].ctx, devs[1].queue, {b, 0, 0}, nb, OCLF_F32, 20, NULL, NULL, NULL},
    };
    float dist[3 * 6];
    int64_t idx[3 * 6];
    ck_assert_int_eq(oclf_l2_topk_sharded(sh, 2, nq, d, k, q, 0, dist, idx, NULL), OCLF_SUCCESS);
    double rd[3 * 6];
    int64_t ri[3 * 6];
    oclf_ref_l2_topk(OCLF_F32, nq, na + nb, d, k, q, d, x, d, rd, ri);
    /* The reference numbers rows 0..16; map to the shards' ids, then the
     * order of equal distances follows the new ids. */
    for (size_t qi = 0; qi < nq; qi++) {
        double all[17];
        oclf_ref_l2_dists(OCLF_F32, na + nb, d, q + qi * d, x, d, all);
        for (size_t e = 0; e < k; e++) {
            int64_t id = idx[qi * k + e];
            int64_t row = id >= 1000 ? id - 1000 : (int64_t)na + id - 20;
            ck_assert_msg(row >= 0 && row < 17, "id %lld", (long long)id);
            ck_assert(dist[qi * k + e] == (float)all[row]);
            ck_assert(dist[qi * k + e] == (float)rd[qi * k + e]);
            if (e) {
                float pd = dist[qi * k + e - 1];
                ck_assert(pd < dist[qi * k + e] || (pd == dist[qi * k + e] &&
                                                    idx[qi * k + e - 1] < id));
            }
        }
    }
    clReleaseMemObject(a);
    clReleaseMemObject(b);
}
END_TEST

/* The host merge against the reference merge (pool and sort) on lists with
 * ties across lists, NaN, padding and empty lists. */
START_TEST(merge_matches_reference)
{
    th_seed(77);
    enum { NQ = 9, L = 5, K = 12 };
    size_t lk[L] = {4, 0, 12, 1, 7};
    float *ld[L];
    int64_t *li[L];
    int64_t next = 0;
    for (size_t j = 0; j < L; j++) {
        ld[j] = malloc((NQ * lk[j] + 1) * sizeof(float));
        li[j] = malloc((NQ * lk[j] + 1) * sizeof(int64_t));
        for (size_t qi = 0; qi < NQ; qi++) {
            /* a sorted row: small integer distances (ties), ids rising
             * within equal distances, one NaN, then padding */
            size_t real = lk[j] ? (qi + j) % (lk[j] + 1) : 0;
            float dd = 0;
            for (size_t e = 0; e < lk[j]; e++) {
                size_t at = qi * lk[j] + e;
                if (e >= real) {
                    ld[j][at] = FLT_MAX;
                    li[j][at] = -1;
                    continue;
                }
                dd += floorf(th_uniform(0.0f, 2.0f));
                ld[j][at] = (qi % 3 == 0 && e + 1 == real) ? NAN : dd;
                li[j][at] = next++ * 7 % 101 + (int64_t)e * 1000 + (int64_t)j;
            }
        }
    }
    float od[NQ * K], rd[NQ * K];
    int64_t oi[NQ * K], ri[NQ * K];
    for (size_t k = 1; k <= K; k += 5) {
        ck_assert_int_eq(oclf_l2_topk_merge(NQ, k, L, (const float *const *)ld,
                                            (const int64_t *const *)li, lk, od, oi),
                         OCLF_SUCCESS);
        oclf_ref_l2_merge(NQ, k, L, (const float *const *)ld, (const int64_t *const *)li, lk,
                          rd, ri);
        for (size_t e = 0; e < NQ * k; e++)
            ck_assert_msg(oi[e] == ri[e] && memcmp(&od[e], &rd[e], sizeof(float)) == 0,
                          "k=%zu entry %zu: (%g, %lld) vs reference (%g, %lld)", k, e, od[e],
                          (long long)oi[e], rd[e], (long long)ri[e]);
    }
    for (size_t j = 0; j < L; j++)
        free(ld[j]), free(li[j]);
    ck_assert_int_eq(oclf_l2_topk_merge(NQ, 0, L, NULL, NULL, lk, od, oi), OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "k is 0"));
}
END_TEST

/* Each bad argument: its status, a sentence naming what (and which shard),
 * and outputs left as they were. */
START_TEST(bad_arguments)
{
    const size_t d = 4, n = 8;
    float xh[8 * 4] = {0}, q[4] = {1, 2, 3, 4};
    cl_mem a = upload(&devs[0], xh, sizeof xh), b = upload(&devs[1], xh, sizeof xh);
    oclf_l2_shard good[2] = {
        {devs[0].ctx, devs[0].queue, {a, 0, 0}, n, OCLF_F32, 0, NULL, NULL, NULL},
        {devs[1].ctx, devs[1].queue, {b, 0, 0}, n, OCLF_F32, (int64_t)n, NULL, NULL, NULL},
    };
    float dist[3];
    int64_t idx[3];
    oclf_l2_shard sh[2];
    oclf_l2_topk_options o;
#define EXPECT(call, status, word)                                                           \
    do {                                                                                      \
        for (int i_ = 0; i_ < 3; i_++)                                                        \
            dist[i_] = 42.0f, idx[i_] = 42;                                                   \
        oclf_status st_ = (call);                                                             \
        ck_assert_msg(st_ == (status), "%s: got %s", #call, oclf_status_string(st_));         \
        ck_assert_msg(strstr(oclf_last_error(NULL), (word)) != NULL, "'%s' lacks '%s'",       \
                      oclf_last_error(NULL), (word));                                         \
        for (int i_ = 0; i_ < 3; i_++)                                                        \
            ck_assert(dist[i_] == 42.0f && idx[i_] == 42);                                    \
        memcpy(sh, good, sizeof sh);                                                          \
        oclf_l2_topk_options_init(&o);                                                        \
    } while (0)
    memcpy(sh, good, sizeof sh);
    oclf_l2_topk_options_init(&o);
    EXPECT(oclf_l2_topk_sharded(NULL, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "no shards");
    EXPECT(oclf_l2_topk_sharded(sh, 0, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "no shards");
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, 0, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "d is 0");
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 0, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "k is 0");
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, NULL, 0, dist, idx, NULL),
           OCLF_INVALID_ARGUMENT, "NULL");
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 2, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "q_stride");
    sh[1].ctx = NULL;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 1: ctx");
    sh[0].queue = NULL;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 0: queue");
    sh[1].x.mem = NULL;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 1: x.mem");
    sh[1].queue = devs[0].queue;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 1: queue belongs");
    sh[0].x.mem = b;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 0: x.mem is not a buffer");
    sh[1].first_id = -1;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 1: ids");
    sh[1].first_id = 5;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shards 0 and 1 overlap");
    oclf_buf m = {a, 0, 0};
    o.allowed = &m;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, &o), OCLF_INVALID_ARGUMENT,
           "per shard");
    /* A shard oclf_l2_topk itself rejects: the buffer too small for n. */
    sh[1].n = 9;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_INVALID_ARGUMENT,
           "shard 1: ");
    sh[0].dtype = (oclf_dtype)7;
    EXPECT(oclf_l2_topk_sharded(sh, 2, 1, d, 3, q, 0, dist, idx, NULL), OCLF_UNSUPPORTED,
           "shard 0: ");
#undef EXPECT
    clReleaseMemObject(a);
    clReleaseMemObject(b);
}
END_TEST

/* Writes an ICD folder naming POCL's and oclgrind's runtimes so that one
 * process sees both platforms; 0 when either library is missing. */
static int icd_two_platforms(char *dir, size_t len)
{
    static const char *grind[] = {"/usr/lib/oclgrind/liboclgrind-rt-icd.so",
                                  "/usr/lib/x86_64-linux-gnu/liboclgrind-rt-icd.so",
                                  "/usr/local/lib/liboclgrind-rt-icd.so"};
    const char *g = NULL;
    for (size_t i = 0; i < sizeof grind / sizeof *grind && !g; i++)
        if (access(grind[i], R_OK) == 0)
            g = grind[i];
    FILE *pf = fopen("/etc/OpenCL/vendors/pocl.icd", "r");
    char pocl[512] = "";
    if (pf) {
        if (!fgets(pocl, sizeof pocl, pf))
            pocl[0] = 0;
        fclose(pf);
    }
    if (!g || !pocl[0]) {
        printf("note: %s is missing; the two-platform test needs POCL and oclgrind\n",
               g ? "POCL's ICD file" : "oclgrind's ICD runtime");
        return 0;
    }
    snprintf(dir, len, "/tmp/oclf-shard-icd-XXXXXX");
    if (!mkdtemp(dir))
        return 0;
    char path[600];
    snprintf(path, sizeof path, "%s/a-pocl.icd", dir);
    FILE *f = fopen(path, "w");
    fputs(pocl, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/b-oclgrind.icd", dir);
    f = fopen(path, "w");
    fprintf(f, "%s\n", g);
    fclose(f);
    return 1;
}

static void icd_remove(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/a-pocl.icd", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/b-oclgrind.icd", dir);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    const int platforms = argc > 1 && strcmp(argv[1], "platforms") == 0;
    char icd[64] = "";
    if (platforms) {
        /* Must be set before the ICD loader first looks for platforms. */
        if (!icd_two_platforms(icd, sizeof icd))
            return 77;
        setenv("OCL_ICD_VENDORS", icd, 1);
        if (!devs_open("Portable", "Oclgrind")) {
            printf("note: POCL or oclgrind did not load as a platform; skipped\n");
            icd_remove(icd);
            return 77;
        }
        printf("shards on %s and %s\n", devs[0].platform, devs[1].platform);
    } else if (!devs_open("", NULL)) {
        printf("no OpenCL device\n");
        return getenv("OCLF_TEST_DEVICE_OPTIONAL") ? 77 : 1;
    }
    Suite *s = suite_create(platforms ? "shard-platforms" : "shard");
    TCase *tc = tcase_create("shard");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, sharded_equals_whole, 0, platforms ? 1 : 3);
    tcase_add_test(tc, ids_out_of_order);
    tcase_add_test(tc, float_data_one_choice);
    if (!platforms) {
        tcase_add_test(tc, merge_matches_reference);
        tcase_add_test(tc, bad_arguments);
    }
    suite_add_tcase(s, tc);
    const int failed = th_run_suite(s);
    devs_close();
    if (icd[0])
        icd_remove(icd);
    return failed;
}
