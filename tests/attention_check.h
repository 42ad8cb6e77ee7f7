/*
 * The output checks the attention suites (test_attention, test_attention_paged)
 * share. A call writes o as strided heads with padding between heads and
 * tokens, and the LSE as [hq, tq] rows with padding; both buffers start
 * filled with values no call produces (o in [5, 6), the LSE in [7, 8)), so
 * a stray write shows. After the call: the padding bit for bit as it was,
 * the LSE against the reference (or all of its buffer untouched when it was
 * not asked for), rows that see no key exactly 0, and the results kept for
 * comparisons between runs.
 */
#ifndef OCLF_TEST_ATTN_CHECK_H
#define OCLF_TEST_ATTN_CHECK_H

#include "harness.h"

typedef struct attn_out {
    oclf_dtype dt;
    size_t tq, hq, d;
    /* o: element i of head h of token t at ooff + t * ots + h * ohs + i, of on */
    size_t ooff, ots, ohs, on;
    /* LSE: head h, token t at loff + h * lst + t, of ln */
    size_t loff, lst, ln;
    void *ho, *go;  /* o as uploaded, as read back */
    float *hl, *gl; /* the LSE as uploaded, as read back */
    cl_mem mo, ml;
} attn_out;

/* o and the LSE of tq tokens of hq heads of d elements, filled and
 * uploaded (o's host data first, then the LSE's: th_random's order). */
void attn_out_make(attn_out *r, oclf_dtype dt, size_t tq, size_t hq, size_t d);
/* The same with every head starting on 16 bytes (offset, strides and head
 * stride multiples of 8 elements), gaps between heads kept. */
void attn_out_make_aligned(attn_out *r, oclf_dtype dt, size_t tq, size_t hq, size_t d);
/* o and the LSE as a call takes them. */
oclf_heads attn_out_heads(const attn_out *r);
oclf_buf attn_out_lse(const attn_out *r);
/* Reads both buffers back into go and gl. */
void attn_out_read(attn_out *r);
void attn_out_free(attn_out *r);

/* Every element of o outside the heads as uploaded. */
void attn_check_o_padding(const attn_out *r);
/* asked: the LSE within the tolerance of the reference's wl [hq, tq] and
 * every element outside its rows as uploaded; otherwise the whole buffer
 * as uploaded. */
void attn_check_lse(const attn_out *r, int asked, const double *wl);
/* A row whose reference LSE is -inf (no key and no sink): exactly 0, never
 * NaN. */
void attn_check_no_key_rows(const attn_out *r, const double *wl);

/* What a run leaves for comparisons between runs. */
typedef struct attn_result {
    double *o;  /* [tq, hq, d] as read back */
    float *lse; /* [hq, tq] */
    double *vmax;
    size_t tq;
} attn_result;

/* Fills *res from o and the LSE as read back; it takes vmax (the
 * reference's [tq, hq] max |v|, freed with it). */
void attn_result_keep(const attn_out *r, double *vmax, attn_result *res);
void attn_result_free(attn_result *res);

/* The tolerance between two runs of the same inputs. */
double attn_tol(oclf_dtype dt);
/* Two runs of the same inputs agree: o within attn_tol(dt) (1 + max |v|)
 * of x's row, the LSE equal or within attn_tol(dt). */
void attn_expect_same(oclf_dtype dt, size_t hq, size_t d, const attn_result *x,
                      const attn_result *y, const char *what);

#endif
