/*
 * L2 top-k: the order of candidates and the lists that keep them.
 *
 * Ordering. Every candidate is a (key, index) pair compared
 * lexicographically, the index as an unsigned 64-bit value. The key is the
 * distance's bit pattern made monotonic: clamped distances are >= +0, so
 * setting the sign bit keeps their order; a NaN gets KEY_NAN, above +inf;
 * an empty slot gets KEY_EMPTY with index -1 (all ones as unsigned), above
 * everything. The order is total, so every top-k list in this file is the
 * unique k smallest of the candidates it has seen, whatever order they came
 * in: results do not depend on work-group scheduling.
 *
 * Lists are binary max-heaps in global memory (root = the current k-th
 * best), one per (query, database slice). A candidate is tested against the
 * root only, so the cost after the first few tiles is one compare per
 * distance; heaps live in global memory so any k <= N fits whatever the
 * device's local memory is.
 */

#define KEY_EMPTY 0xFFFFFFFFu
#define KEY_NAN 0xFFFFFFFEu

/* Distances are clamped at 0 (the expansion can go slightly negative);
 * `d > 0 ? d : 0` also turns -0 into +0 and leaves NaN to its own key. */
static inline uint dist_key(float d)
{
    if (isnan(d))
        return KEY_NAN;
    d = d > 0.0f ? d : 0.0f;
    return as_uint(d) | 0x80000000u;
}

static inline float key_dist(uint k)
{
    if (k == KEY_EMPTY)
        return FLT_MAX; /* FAISS's padding for k > N */
    if (k == KEY_NAN)
        return NAN;
    return as_float(k & 0x7fffffffu);
}

static inline bool kv_less(uint ka, long ia, uint kb, long ib)
{
    return ka < kb || (ka == kb && (ulong)ia < (ulong)ib);
}

/* Puts (key, idx) at the root of the max-heap of n entries, sifts it down,
 * and returns the new root (its index in *root_idx) from what the sift read
 * anyway. An entry's index is read only where its key ties or it moves up:
 * the heaps live in global memory and every byte of theirs is traffic. */
static inline uint heap_sift(__global uint *hk, __global long *hi, uint n, uint key, long idx,
                      long *root_idx)
{
    uint pos = 0, rootk = key;
    long rooti = idx;
    for (;;) {
        uint c = 2 * pos + 1;
        if (c >= n)
            break;
        uint ck = hk[c];
        if (c + 1 < n) {
            const uint rk = hk[c + 1];
            if (ck < rk || (ck == rk && (ulong)hi[c] < (ulong)hi[c + 1])) {
                c++;
                ck = rk;
            }
        }
        if (key > ck)
            break;
        const long ci = hi[c];
        if (key == ck && (ulong)idx >= (ulong)ci)
            break;
        hk[pos] = ck;
        hi[pos] = ci;
        if (pos == 0) {
            rootk = ck;
            rooti = ci;
        }
        pos = c;
    }
    hk[pos] = key;
    hi[pos] = idx;
    *root_idx = rooti;
    return rootk;
}

/* Whether database row r may be returned: bit r % 8 of byte r / 8 of the
 * caller's mask (has_allow 0: every row). Tested where a candidate meets
 * its heap, so a rejected row never displaces an allowed one. */
#define ROW_ALLOWED(r) (!has_allow || ((allow[ao + (r) / 8] >> ((r) % 8)) & 1))

static inline void heap_clear(__global uint *hk, __global long *hi, uint k)
{
    for (uint e = 0; e < k; e++) {
        hk[e] = KEY_EMPTY;
        hi[e] = -1;
    }
}

/*
 * Merge: one work-item per query folds the heaps of slices 1.. into slice
 * 0's heap, sorts it ascending in place (heapsort) and writes the outputs.
 * nslices == 0 (an empty database) writes padding only.
 */
__kernel void l2_merge(__global uint *hk, __global long *hi, ulong nq, uint nslices, uint k,
                       __global float *dist, ulong dofs, ulong ds, __global long *idx,
                       ulong iofs, ulong is)
{
    const ulong qi = get_global_id(0);
    if (qi >= nq)
        return;
    __global float *od = dist + dofs + qi * ds;
    __global long *oi = idx + iofs + qi * is;
    if (nslices == 0) {
        for (uint e = 0; e < k; e++) {
            od[e] = FLT_MAX;
            oi[e] = -1;
        }
        return;
    }
    __global uint *h0k = hk + qi * nslices * k;
    __global long *h0i = hi + qi * nslices * k;
    uint rootk = h0k[0];
    long rooti = h0i[0];
    for (uint s = 1; s < nslices; s++) {
        __global const uint *sk = h0k + (ulong)s * k;
        __global const long *si = h0i + (ulong)s * k;
        for (uint e = 0; e < k; e++) {
            const uint key = sk[e];
            const long id = si[e];
            if (kv_less(key, id, rootk, rooti))
                rootk = heap_sift(h0k, h0i, k, key, id, &rooti);
        }
    }
    /* heapsort: the root (largest) goes to the end of the shrinking heap */
    for (uint end = k - 1; end > 0; end--) {
        const uint key = h0k[end];
        const long id = h0i[end];
        h0k[end] = rootk;
        h0i[end] = rooti;
        rootk = heap_sift(h0k, h0i, end, key, id, &rooti);
    }
    for (uint e = 0; e < k; e++) {
        const uint key = h0k[e];
        od[e] = key_dist(key);
        oi[e] = key == KEY_EMPTY ? -1 : h0i[e];
    }
}
