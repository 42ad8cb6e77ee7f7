"""linear against NumPy: both weight layouts, every dtype and path, the
prologue and each epilogue step in both orders, odd sizes, 0 and 1 rows,
K = 0, in place on the residual, strided device rows; refused calls."""
import math

import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, value

_erf = np.vectorize(math.erf, otypes=[np.float64])

ACTS = {
    "none": lambda t: t,
    "relu": lambda t: np.where(t < 0, 0.0, t),
    "gelu": lambda t: 0.5 * t * (1 + _erf(t / math.sqrt(2))),
    "gelu_tanh": lambda t: 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                  * (t + 0.044715 * t ** 3))),
    "silu": lambda t: t / (1 + np.exp(-t)),
}


def ref(x, w, layout="nk", bias=None, residual=None, prologue="none", act="none", alpha=1.0,
        beta=1.0, residual_before_act=False):
    """The epilogue of the header's oclf_linear_epilogue on float64 values."""
    wt = w.T if layout == "nk" else w
    t = alpha * (ACTS[prologue](x) @ wt)
    if bias is not None:
        t = t + bias
    if residual is not None and residual_before_act:
        t = ACTS[act](t + beta * residual)
    else:
        t = ACTS[act](t)
        if residual is not None:
            t = t + beta * residual
    return t


def weight(rng, n, k, dt, layout):
    return rand(rng, (n, k) if layout == "nk" else (k, n), dt, -1.0, 1.0)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("mnk", [(0, 5, 7), (1, 9, 33), (7, 37, 45), (19, 3, 1), (4, 6, 0)])
def test_linear(ctx, rng, dt, path, layout, mnk):
    m, n, k = mnk
    x = rand(rng, (m, k), dt, -1.0, 1.0)
    w = weight(rng, n, k, dt, layout)
    b = rand(rng, (n,), dt, -1.0, 1.0)
    r = rand(rng, (m, n), dt, -1.0, 1.0)
    y = oclfuse.linear(x, w, b, r, layout=layout, act="relu", residual_before_act=True,
                       path=path)
    assert y.shape == (m, n) and y.dtype == x.dtype
    want = ref(value(x, dt), value(w, dt), layout, value(b, dt), value(r, dt), act="relu",
               residual_before_act=True)
    assert_close(y, want, dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("act", list(ACTS))
def test_prologue_and_activation(ctx, rng, dt, path, act):
    m, n, k = 5, 11, 21
    x = rand(rng, (m, k), dt, -2.0, 2.0)
    w = weight(rng, n, k, dt, "nk")
    r = rand(rng, (m, n), dt)
    for before in (False, True):
        y = oclfuse.linear(x, w, None, r, prologue=act, act=act, alpha=0.5, beta=-1.5,
                           residual_before_act=before, path=path)
        want = ref(value(x, dt), value(w, dt), "nk", None, value(r, dt), prologue=act,
                   act=act, alpha=0.5, beta=-1.5, residual_before_act=before)
        assert_close(y, want, dt, f"{act}, residual_before_act={before}")


@pytest.mark.parametrize("path", PATHS)
def test_one_row_no_epilogue(ctx, rng, path):
    x = rand(rng, (13,), "f32")
    w = weight(rng, 10, 13, "f32", "kn")
    y = oclfuse.linear(x, w, layout="kn", path=path)
    assert y.shape == (10,)
    assert_close(y, value(x, "f32") @ value(w, "f32"), "f32")


@pytest.mark.parametrize("path", PATHS)
def test_in_place_on_residual_with_strided_rows(queue, rng, path):
    """y is the residual (a view with padded rows): computed in place; the
    padding and x stay as they were."""
    m, n, k, pad = 6, 17, 29, 3
    xb = rand(rng, (m, k + pad), "f16", -1.0, 1.0)
    rb = rand(rng, (m, n + pad), "f16", -1.0, 1.0)
    w = weight(rng, n, k, "f16", "nk")
    dx, dr, dw = (cla.to_device(queue, a) for a in (xb, rb, w))
    res = dr[:, :n]
    y = oclfuse.linear(dx[:, :k], dw, residual=res, out=res, act="silu", path=path)
    assert y is res
    got = dr.get()
    np.testing.assert_array_equal(got[:, n:], rb[:, n:])
    np.testing.assert_array_equal(dx.get(), xb)
    want = ref(value(xb[:, :k], "f16"), value(w, "f16"), residual=value(rb[:, :n], "f16"),
               act="silu")
    assert_close(got[:, :n], want, "f16")


def test_refused_calls_leave_buffers(queue, rng):
    x = rand(rng, (3, 8), "f32")
    w = weight(rng, 5, 8, "f32", "nk")
    dx, dw = cla.to_device(queue, x), cla.to_device(queue, w)
    host = np.zeros((3, 13), np.float32)  # y beside x in one buffer
    host[:, :8] = x
    both = cla.to_device(queue, host)
    dy = cla.zeros(queue, (3, 5), np.float32)

    def refused(status, words, xa=dx, ya=dy, **kw):
        with pytest.raises(oclfuse.OclfError) as err:
            oclfuse.linear(xa, dw, out=ya, **kw)
        e = err.value
        assert e.status == status, str(e)
        assert e.message.startswith("oclf_linear: "), e.message
        for word in words:
            assert word in e.message, f"{word!r} not in {e.message!r}"

    refused(oclfuse.INVALID_ARGUMENT, ["alpha"], alpha=float("nan"))
    refused(oclfuse.INVALID_ARGUMENT, ["epilogue activation 9"], act=9)
    refused(oclfuse.INVALID_ARGUMENT, ["prologue activation -1"], prologue=-1)
    refused(oclfuse.INVALID_ARGUMENT, ["weight layout 2"], layout=2)
    refused(oclfuse.INVALID_ARGUMENT, ["MB = 3"], path="fused", params={"MB": 3})
    refused(oclfuse.INVALID_ARGUMENT, ["KC = 24", "VEC = 16"], path="fused",
            params={"STAGE": 1, "VEC": 16, "KC": 24, "MV": 0})
    refused(oclfuse.INVALID_ARGUMENT, ["y overlaps"], xa=both[:, :8], ya=both[:, 8:])
    np.testing.assert_array_equal(dy.get(), 0)
    np.testing.assert_array_equal(dx.get(), x)
    np.testing.assert_array_equal(dw.get(), w)
    np.testing.assert_array_equal(both.get(), host)
