"""act_and_mul_backward and rotary_embedding_backward against NumPy: the
gradients taken by central differences of float64 forward formulas (not
the library's closed forms), every activation, dtype and path, in place,
the inverse rotation and its round trip, and refused arguments."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, stored, value
from test_act import ACTS, ref
from test_errors import refused
from test_rope import cache, rotate


def act_grad(x, g, act, act_on_second=False, limit=7.0):
    """d sum(g * act_and_mul(x)) / dx in float64: each output depends on one
    element of each half, so moving a whole half at once gives every
    element's derivative."""
    h = 1e-6
    out = np.zeros_like(x)
    d = x.shape[-1] // 2
    halves = ([np.s_[..., 0::2], np.s_[..., 1::2]] if act == "swiglu_oai"
              else [np.s_[..., :d], np.s_[..., d:]])
    for half in halves:
        up, down = x.copy(), x.copy()
        up[half] += h
        down[half] -= h
        fu = ref(up, act, act_on_second, limit=limit)
        fd = ref(down, act, act_on_second, limit=limit)
        out[half] = g * (fu - fd) / (2 * h)
    return out


def away_from_kinks(x, dt, act):
    """16-bit storage holds fatrelu's threshold (0.25) and the swiglu_oai
    limit used here (3) exactly, where the function has a kink and a
    difference quotient straddles it: such inputs move to 1."""
    v = value(x, dt)
    near = (np.abs(v - 0.25) < 1e-3) if act == "fatrelu" else (np.abs(np.abs(v) - 3.0) < 1e-3)
    if act in ("fatrelu", "swiglu_oai") and near.any():
        x = x.copy()
        x[near] = stored(np.ones(1), dt)[0]
    return x


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("act", list(ACTS) + ["swiglu_oai"])
@pytest.mark.parametrize("shape", [(0, 14), (1, 2), (3, 66), (2, 2002)])
def test_act_and_mul_backward(ctx, rng, dt, path, act, shape):
    x = away_from_kinks(rand(rng, shape, dt, -4.0, 4.0), dt, act)
    g = rand(rng, (shape[0], shape[1] // 2), dt, -2.0, 2.0)
    din = oclfuse.act_and_mul_backward(x, g, act, threshold=0.25, limit=3.0, path=path)
    assert din.shape == x.shape and din.dtype == x.dtype
    want = act_grad(value(x, dt), value(g, dt), act, limit=3.0)
    assert_close(din, want, dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_act_on_second_in_place(queue, rng, dt, path):
    """act_on_second, and din == x on the device (the saved input replaced)."""
    x = rand(rng, (4, 90), dt, -4.0, 4.0)
    g = rand(rng, (4, 45), dt, -2.0, 2.0)
    for act in ("gelu", "gelu_tanh"):
        want = act_grad(value(x, dt), value(g, dt), act, act_on_second=True)
        dx = cla.to_device(queue, x)
        got = oclfuse.act_and_mul_backward(dx, cla.to_device(queue, g), act, act_on_second=True,
                                           out=dx, path=path)
        assert got is dx
        assert_close(dx.get(), want, dt, act)


def test_act_backward_refused(queue, rng):
    x = rand(rng, (2, 64), "f32")
    with pytest.raises(ValueError):
        oclfuse.act_and_mul_backward(x, np.zeros((2, 31), np.float32))
    with pytest.raises(TypeError):
        oclfuse.act_and_mul_backward(x, np.zeros((2, 32), np.float16))
    # din over x shifted by one element: neither separate nor in place
    d = cla.to_device(queue, np.zeros((2, 80), np.float32))
    refused(oclfuse.INVALID_ARGUMENT, ["oclf_act_and_mul_backward", "din overlaps in"],
            oclfuse.act_and_mul_backward, d[:, :64],
            cla.to_device(queue, np.ascontiguousarray(x[:, :32])),
            out=d[:, 1:65])
    refused(oclfuse.INVALID_ARGUMENT, ["act_on_second"], oclfuse.act_and_mul_backward, x,
            np.zeros((2, 32), np.float32), "swiglu_oai", act_on_second=True)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("tokens,hd,rot", [(0, 8, 8), (1, 6, 6), (5, 34, 16)])
def test_rotary_embedding_backward(ctx, rng, dt, path, style, tokens, hd, rot):
    """The transpose rotation: rotate by -angle (sines negated)."""
    max_pos = 40
    q, k = rand(rng, (tokens, 3, hd), dt), rand(rng, (tokens, 2, hd), dt)
    pos = rng.integers(0, max_pos, tokens).astype(np.int64)
    cs = cache(max_pos, rot, "f32")
    inv = value(cs, "f32").copy()
    inv[:, rot // 2:] *= -1
    want_q = rotate(value(q, dt), pos, inv, style)
    want_k = rotate(value(k, dt), pos, inv, style)
    q2, k2 = oclfuse.rotary_embedding_backward(q, pos, cs, k, style=style, path=path)
    assert q2 is q and k2 is k
    assert_close(q, want_q, dt, "dq")
    assert_close(k, want_k, dt, "dk")


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_rotary_round_trip(ctx, rng, style):
    """backward(forward(q)) == q."""
    q = rand(rng, (6, 4, 64), "f32")
    pos = rng.integers(0, 50, 6).astype(np.int32)
    cs = cache(50, 48, "f32")
    rotated = oclfuse.rotary_embedding(q.copy(), pos, cs, style=style)
    got = oclfuse.rotary_embedding_backward(rotated, pos, cs, style=style)
    np.testing.assert_allclose(got, q, rtol=1e-5, atol=1e-5)


def test_rotary_backward_refused(ctx, rng):
    q = rand(rng, (2, 1, 8), "f32")
    refused(oclfuse.INVALID_ARGUMENT, ["oclf_rotary_embedding_backward", "rot"],
            oclfuse.rotary_embedding_backward, q, np.zeros(2, np.int32),
            np.zeros((4, 7), np.float32))
