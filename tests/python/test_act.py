"""act_and_mul against NumPy: every activation, dtype and path, both operand
orders, odd widths, 0 and 1 rows, strided device rows."""
import math

import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, value

_erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTS = {
    "silu": lambda x: x * sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                  * (x + 0.044715 * x ** 3))),
    "fatrelu": lambda x: np.where(x > 0.25, x, 0.0),
}


def ref(x, act, act_on_second=False, alpha=1.702, limit=7.0):
    d = x.shape[-1] // 2
    if act == "swiglu_oai":
        g, u = x[..., 0::2], x[..., 1::2]
        g = np.minimum(g, limit)
        u = np.clip(u, -limit, limit)
        return (u + 1) * g * sigmoid(alpha * g)
    a, b = x[..., :d], x[..., d:]
    return a * ACTS[act](b) if act_on_second else ACTS[act](a) * b


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("act", list(ACTS) + ["swiglu_oai"])
@pytest.mark.parametrize("shape", [(0, 14), (1, 2), (3, 66), (2, 258)])
def test_act_and_mul(ctx, rng, dt, path, act, shape):
    x = rand(rng, shape, dt, -4.0, 4.0)
    y = oclfuse.act_and_mul(x, act, threshold=0.25, alpha=1.702, limit=3.0, path=path)
    assert y.shape == (shape[0], shape[1] // 2) and y.dtype == x.dtype
    assert_close(y, ref(value(x, dt), act, limit=3.0), dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_act_on_second(ctx, rng, dt, path):
    x = rand(rng, (4, 90), dt, -4.0, 4.0)
    for act in ("silu", "gelu"):
        y = oclfuse.act_and_mul(x, act, act_on_second=True, path=path)
        assert_close(y, ref(value(x, dt), act, act_on_second=True), dt, act)


@pytest.mark.parametrize("path", PATHS)
def test_strided_device_rows(queue, rng, path):
    rows, d, pad = 3, 21, 5
    xb = rand(rng, (rows, 2 * d + pad), "f16", -3.0, 3.0)
    ob = np.full((rows, d + pad), 7, np.float16)
    dx, do = cla.to_device(queue, xb), cla.to_device(queue, ob)
    oclfuse.act_and_mul(dx[:, :2 * d], "gelu_tanh", out=do[:, :d], path=path)
    got = do.get()
    np.testing.assert_array_equal(got[:, d:], ob[:, d:])
    assert_close(got[:, :d], ref(value(xb[:, :2 * d], "f16"), "gelu_tanh"), "f16")
