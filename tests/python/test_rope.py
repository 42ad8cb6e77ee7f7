"""rotary_embedding and qk_norm_rope against NumPy: both styles, partial
rotary, int32/int64 positions, a cache dtype other than the heads', views of a
packed qkv, every dtype and path."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, stored, value


def cache(max_pos, rot, dt, base=10000.0):
    f = base ** (-np.arange(rot // 2) * 2.0 / rot)
    ang = np.arange(max_pos)[:, None] * f[None, :]
    return stored(np.concatenate([np.cos(ang), np.sin(ang)], axis=1), dt)


def rotate(h, pos, cs, style):
    """h [tokens, heads, hd] float64, cs [max_pos, R] float64."""
    out = h.copy()
    rot = cs.shape[1]
    c = cs[pos, :rot // 2][:, None, :]
    s = cs[pos, rot // 2:][:, None, :]
    if style == "neox":
        i, j = np.arange(rot // 2), np.arange(rot // 2) + rot // 2
    else:
        i, j = np.arange(0, rot, 2), np.arange(1, rot, 2)
    x, y = h[..., i], h[..., j]
    out[..., i] = x * c - y * s
    out[..., j] = y * c + x * s
    return out


def rms(h, w, eps):
    r = h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + eps)
    return r * w if w is not None else r


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("tokens,hd,rot", [(0, 8, 8), (1, 6, 6), (5, 34, 16)])
def test_rotary_embedding(ctx, rng, dt, path, style, tokens, hd, rot):
    max_pos = 40
    q, k = rand(rng, (tokens, 3, hd), dt), rand(rng, (tokens, 2, hd), dt)
    pos = rng.integers(0, max_pos, tokens).astype(np.int64)
    cs = cache(max_pos, rot, "f32")
    want_q = rotate(value(q, dt), pos, value(cs, "f32"), style)
    want_k = rotate(value(k, dt), pos, value(cs, "f32"), style)
    q2, k2 = oclfuse.rotary_embedding(q, pos, cs, k, style=style, path=path)
    assert q2 is q and k2 is k
    assert_close(q, want_q, dt, "q")
    assert_close(k, want_k, dt, "k")


@pytest.mark.parametrize("path", PATHS)
def test_rotary_views_of_packed_qkv(queue, rng, path):
    """q and k as views of one device qkv buffer: strided heads; V untouched."""
    tokens, nq, nk, nv, hd = 4, 2, 1, 1, 16
    qkv = rand(rng, (tokens, nq + nk + nv, hd), "bf16")
    pos = np.array([3, 0, 7, 1], np.int32)
    cs = cache(8, hd, "f16")
    d = cla.to_device(queue, qkv)
    dpos, dcs = cla.to_device(queue, pos), cla.to_device(queue, cs)
    oclfuse.rotary_embedding(d[:, :nq, :], dpos, dcs, d[:, nq:nq + nk, :], path=path)
    got = d.get()
    want = rotate(value(qkv[:, :nq + nk], "bf16"), pos, value(cs, "f16"), "neox")
    assert_close(got[:, :nq + nk], want, "bf16")
    np.testing.assert_array_equal(got[:, nq + nk:], qkv[:, nq + nk:])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_qk_norm_rope(ctx, rng, dt, path, style):
    tokens, nq, nk, nv, hd, rot, max_pos = 5, 3, 2, 1, 24, 16, 16
    qkv = rand(rng, (tokens, nq + nk + nv, hd), dt)
    qw, kw = rand(rng, hd, dt, 0.5, 1.5), rand(rng, hd, dt, 0.5, 1.5)
    pos = rng.integers(0, max_pos, tokens).astype(np.int32)
    cs = cache(max_pos, rot, dt)
    v = value(qkv, dt)
    want = v.copy()
    want[:, :nq] = rotate(rms(v[:, :nq], value(qw, dt), 1e-6), pos, value(cs, dt), style)
    want[:, nq:nq + nk] = rotate(rms(v[:, nq:nq + nk], value(kw, dt), 1e-6), pos,
                                 value(cs, dt), style)
    v_before = qkv[:, nq + nk:].copy()
    out = oclfuse.qk_norm_rope(qkv, pos, cs, nq=nq, nk=nk, q_weight=qw, k_weight=kw,
                               eps=1e-6, style=style, path=path)
    assert out is qkv
    assert_close(qkv, want, dt)
    np.testing.assert_array_equal(qkv[:, nq + nk:], v_before)


def test_position_out_of_range_left_unchanged(ctx, rng):
    q = rand(rng, (2, 1, 8), "f32")
    q0 = q.copy()
    pos = np.array([1, 99], np.int32)
    oclfuse.rotary_embedding(q, pos, cache(4, 8, "f32"))
    np.testing.assert_array_equal(q[1], q0[1])
    assert not np.array_equal(q[0], q0[0])
