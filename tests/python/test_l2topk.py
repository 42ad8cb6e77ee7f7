"""l2_topk (and its sharded form and merge) against NumPy: every database
dtype, both paths and precisions, k beyond N, an allowed mask, precomputed
norms."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, rand, value

FLT_MAX = np.finfo(np.float32).max


def ref(q, x, k, allowed=None):
    d = ((q[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    d = np.concatenate([d, np.full((len(q), max(k - len(x), 0)), np.inf)], axis=1)
    if allowed is not None:
        d[:, :len(x)][:, ~allowed] = np.inf
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    dist = np.take_along_axis(d, order, 1)
    idx = np.where(np.isfinite(dist), order, -1)
    return np.where(idx >= 0, dist, FLT_MAX), idx


def check(dist, idx, want_d, want_i, x, q):
    np.testing.assert_array_equal(idx, want_i)
    pad = want_i < 0
    np.testing.assert_array_equal(dist[pad], np.float32(FLT_MAX))
    # the expansion's error: about 1e-6 (|q|^2 + |x|^2)
    scale = (q.astype(np.float64) ** 2).sum(1).max(initial=0) + (x ** 2).sum(1).max(initial=0)
    np.testing.assert_allclose(dist[~pad], want_d[~pad], rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("nq,n,d,k", [(1, 1, 1, 1), (3, 50, 17, 5), (2, 9, 8, 12), (2, 0, 8, 3),
                                     (0, 5, 4, 2)])
def test_l2_topk(ctx, rng, dt, path, nq, n, d, k):
    q = rng.uniform(-1, 1, (nq, d)).astype(np.float32)
    x = rand(rng, (n, d), dt, -1.0, 1.0)
    dist, idx = oclfuse.l2_topk(q, x, k, path=path)
    assert dist.dtype == np.float32 and idx.dtype == np.int64 and dist.shape == (nq, k)
    xv = value(x, dt)
    check(dist, idx, *ref(q, xv, k), xv, q)


@pytest.mark.parametrize("dt", DTYPES)
def test_exact_and_mask_and_norms(queue, rng, dt):
    nq, n, d, k = 2, 40, 13, 6
    q = rng.uniform(-1, 1, (nq, d)).astype(np.float32)
    x = rand(rng, (n, d), dt, -1.0, 1.0)
    xv = value(x, dt)
    allowed = rng.random(n) < 0.2  # fewer allowed rows than k in some runs
    dist, idx = oclfuse.l2_topk(q, x, k, precision="exact", allowed=allowed)
    check(dist, idx, *ref(q, xv, k, allowed), xv, q)
    norms = (xv ** 2).sum(1).astype(np.float32)
    dx, dq = cla.to_device(queue, x), cla.to_device(queue, q)
    dn = cla.to_device(queue, norms)
    dist, idx = oclfuse.l2_topk(dq, dx, k, x_norms=dn)
    assert isinstance(dist, cla.Array)
    check(dist.get(), idx.get(), *ref(q, xv, k), xv, q)


def test_sharded_equals_single(queue, rng):
    nq, n, d, k = 3, 70, 9, 7
    q = rng.uniform(-1, 1, (nq, d)).astype(np.float32)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    want = oclfuse.l2_topk(q, x, k, path="fused")
    cut = [0, 25, 25, 70]  # one empty shard
    shards = [oclfuse.Shard(cla.to_device(queue, x[a:b]), a, path="fused")
              for a, b in zip(cut, cut[1:])]
    dist, idx = oclfuse.l2_topk_sharded(shards, q, k)
    np.testing.assert_array_equal(idx, want[1])
    np.testing.assert_array_equal(dist, want[0])


def test_merge(rng):
    a_d = np.array([[1.0, 3.0, FLT_MAX]], np.float32)
    a_i = np.array([[10, 30, -1]], np.int64)
    b_d = np.array([[2.0, 3.0]], np.float32)
    b_i = np.array([[20, 5]], np.int64)
    dist, idx = oclfuse.l2_topk_merge([(a_d, a_i), (b_d, b_i)], 6)
    np.testing.assert_array_equal(idx, [[10, 20, 5, 30, -1, -1]])
    np.testing.assert_array_equal(dist, np.array([[1, 2, 3, 3, FLT_MAX, FLT_MAX]], np.float32))
