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
 * Lists, TOPK 0: binary max-heaps in global memory (root = the current
 * k-th best), one per (query, database slice), updated by one work-item
 * each. A candidate is tested against the root only, so the cost after the
 * first few tiles is one compare per distance; heaps live in global memory
 * so any k <= N fits whatever the device's local memory is. This is what a
 * CPU gets: a work-item is a thread there, and the heap is in its cache.
 *
 * Lists, TOPK 1 (GPUs): each list lives in local memory as k sorted entries
 * followed by a buffer of `cap` candidates; the whole work-group offers
 * candidates in parallel (a compare with the list's k-th entry, then an
 * append), and when a buffer may not hold another round the group sorts
 * every list with its buffer (a bitonic network in local memory) and keeps
 * the first k. An entry is one ulong, the key above the row index (rows
 * below 2^32 - 1, which the host checks), so one integer compare is the
 * order above and an empty slot is all ones. The lists leave the scan
 * sorted; the merge is one work-group per query doing the same over the
 * slices' lists.
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

#if OCLF_TOPK
/* ---- on-chip lists (TOPK 1) -------------------------------------------------- */

#define PACK_EMPTY 0xFFFFFFFFFFFFFFFFUL

static inline ulong pack_entry(uint key, ulong row) { return (ulong)key << 32 | (uint)row; }

/* Offers v to the list at l (k sorted entries, then the buffer) whose
 * buffer holds *cnt candidates: kept when it beats the k-th entry. The k-th
 * entry changes only in lists_flush, after a barrier, so concurrent offers
 * read it safely; the append position comes from a local atomic, and the
 * order the buffer is filled in does not matter (the sort below is over a
 * total order). */
static inline void list_offer(__local ulong *l, __local uint *cnt, uint k, ulong v)
{
    if (v < l[k - 1])
        l[k + atomic_inc(cnt)] = v;
}

/* Whether some of the nl buffers holds more than `room` candidates. Every
 * work-item reads the same counts (after a barrier), so the answer is
 * uniform across the work-group. */
static inline bool lists_full(__local const uint *cnt, uint nl, uint room)
{
    bool full = false;
    for (uint q = 0; q < nl; q++)
        full |= cnt[q] > room;
    return full;
}

/* With `want`, sorts each of the nl lists (list q at lists + q * stride)
 * with its buffer and keeps the first k, with the whole work-group; the
 * buffers are then empty. Without, changes nothing. Called by every
 * work-item after a barrier, with the same `want`; ends with a barrier.
 * The barriers are never under a branch (POCL's compiler rejects barriers
 * in conditional code even when the condition is uniform): without `want`
 * the network's loops run zero times. The network sorts the first P
 * entries, P the power of two at or above k plus the fullest buffer,
 * ascending in every block (its first step in a block compares mirrored
 * positions), so a position at or past a list's k + count, which holds
 * PACK_EMPTY or lies past the array, never has to move: those compares are
 * skipped. */
static inline void lists_flush(__local ulong *lists, uint stride, uint nl, __local uint *cnt,
                               uint k, bool want, uint lid, uint wgs)
{
    uint most = 0;
    for (uint q = 0; q < nl; q++)
        most = max(most, cnt[q]);
    most = want ? most : 0;
    uint p = 1;
    while (most && p < k + most)
        p <<= 1;
    const uint pairs = p / 2;
    for (uint size = 2; size <= p; size <<= 1) {
        for (uint s = size / 2; s > 0; s >>= 1) {
            for (uint e = lid; e < nl * pairs; e += wgs) {
                const uint q = e / pairs, i = e - q * pairs, j = i & (s - 1);
                const uint lo = (i - j) * 2 + j;
                const uint hi = s == size / 2 ? (i - j) * 2 + size - 1 - j : lo + s;
                if (hi < k + cnt[q]) {
                    __local ulong *l = lists + q * stride;
                    const ulong a = l[lo], b = l[hi];
                    if (b < a) {
                        l[lo] = b;
                        l[hi] = a;
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    for (uint e = lid; e < nl * most; e += wgs) {
        const uint q = e / most;
        lists[q * stride + k + (e - q * most)] = PACK_EMPTY;
    }
    if (lid < nl && most)
        cnt[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Empties nl lists and their counts (the caller's next barrier publishes
 * them). */
static inline void lists_clear(__local ulong *lists, uint stride, uint nl, __local uint *cnt,
                               uint lid, uint wgs)
{
    for (uint e = lid; e < nl * stride; e += wgs)
        lists[e] = PACK_EMPTY;
    if (lid < nl)
        cnt[lid] = 0;
}

/*
 * Merge of sorted lists: one work-group per query offers the nslices x k
 * entries its slices' lists hold, in rounds of cap / 2 (coalesced loads;
 * after the first lists almost every entry fails the compare), and flushes
 * whenever a buffer may not hold another round; then writes the outputs.
 * nslices == 0 (an empty database) writes padding only. Local memory: the
 * list (k + cap entries) and its count.
 */
__kernel void l2_merge_lists(__global const ulong *hl, uint nslices, uint k, uint cap,
                             __global float *dist, ulong dofs, ulong ds, __global long *idx,
                             ulong iofs, ulong is, __local ulong *list, __local uint *cnt)
{
    const uint lid = get_local_id(0), wgs = get_local_size(0);
    const ulong qi = get_group_id(0), total = (ulong)nslices * k;
    const uint step = cap / 2;
    __global const ulong *src = hl + qi * total;
    lists_clear(list, k + cap, 1, cnt, lid, wgs);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (ulong b = 0; b < total; b += step) {
        const ulong end = min(total, b + step);
        for (ulong e = b + lid; e < end; e += wgs)
            list_offer(list, cnt, k, src[e]);
        barrier(CLK_LOCAL_MEM_FENCE);
        lists_flush(list, k + cap, 1, cnt, k, end == total || lists_full(cnt, 1, cap - step),
                    lid, wgs);
    }
    __global float *od = dist + dofs + qi * ds;
    __global long *oi = idx + iofs + qi * is;
    for (uint e = lid; e < k; e += wgs) {
        const ulong v = list[e];
        const uint key = (uint)(v >> 32);
        od[e] = key_dist(key);
        oi[e] = key == KEY_EMPTY ? -1 : (long)(uint)v;
    }
}
#endif
