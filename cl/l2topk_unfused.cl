/* L2 top-k: the kernels around the GEMM of the unfused path. */

/* ---- unfused path ------------------------------------------------------------ */

/* out[r] = |q_r|^2 for rows of f32 queries. */
__kernel void l2_q_norms(__global const float *q, ulong qo, ulong qs, ulong rows, uint d,
                         __global float *out)
{
    const ulong r = get_global_id(0);
    if (r < rows)
        out[r] = q_norm(q + qo + r * qs, d);
}

/* out[r] = |x_r|^2 for database rows [r0, r0 + rows). */
__kernel void l2_x_norms(__global const stor_t *x, ulong xo, ulong xs, ulong r0, ulong rows,
                         uint d, __global float *out)
{
    const ulong r = get_global_id(0);
    if (r < rows)
        out[r] = x_norm(x + xo + (r0 + r) * xs, d);
}

/* Widens database rows [r0, r0 + rows) to a packed f32 tile for the GEMM. */
__kernel void l2_to_f32(__global const stor_t *x, ulong xo, ulong xs, ulong r0, ulong rows,
                        uint d, __global float *out)
{
    const ulong i = get_global_id(0);
    if (i >= rows * d)
        return;
    const ulong r = i / d, c = i % d;
    out[i] = LD(x, xo + (r0 + r) * xs + c);
}

/* Folds a tile of GEMM output (c[q][col] = -2 q.x, ld = cols) into the
 * per-(query, slice) heaps: work-item (q, s) takes columns
 * [s * per, (s + 1) * per) of the tile. `first` clears the heaps. */
__kernel void l2_tile_topk(__global const float *cm, ulong cols, __global const float *qn,
                           ulong qno, __global const float *xn, ulong xno, ulong t0, ulong nq, uint nslices,
                           ulong per, uint k, uint first, __global uint *hk, __global long *hi,
                           __global const uchar *allow, ulong ao, uint has_allow)
{
    const ulong gid = get_global_id(0);
    if (gid >= nq * nslices)
        return;
    const ulong qi = gid / nslices, s = gid % nslices;
    __global uint *myk = hk + gid * k;
    __global long *myi = hi + gid * k;
    if (first)
        heap_clear(myk, myi, k);
    uint rootk = myk[0];
    long rooti = myi[0];
    const ulong c0 = s * per, c1 = min(cols, c0 + per);
    const float qq = qn[qno + qi];
    __global const float *crow = cm + qi * cols;
    for (ulong c = c0; c < c1; c++) {
        const uint key = dist_key((qq + xn[xno + c]) + crow[c]);
        const long id = (long)(t0 + c);
        if (kv_less(key, id, rootk, rooti) && ROW_ALLOWED(t0 + c))
            rootk = heap_sift(myk, myi, k, key, id, &rooti);
    }
}
