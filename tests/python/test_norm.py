"""rms_norm, add_rms_norm, layer_norm, add_layer_norm against NumPy (fp64 from
the stored inputs), every dtype, both paths, odd widths, 0 and 1 rows,
strided rows, in place."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, round_to, value

SHAPES = [(0, 7), (1, 1), (3, 33), (2, 130)]


def ref_rms(x, w, eps):
    r = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    return r * w if w is not None else r


def ref_ln(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    r = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    return r * (w if w is not None else 1) + (b if b is not None else 0)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm(ctx, rng, dt, path, shape):
    x, w = rand(rng, shape, dt), rand(rng, shape[1], dt)
    y = oclfuse.rms_norm(x, w, eps=1e-6, path=path)
    assert isinstance(y, np.ndarray) and y.dtype == x.dtype
    assert_close(y, ref_rms(value(x, dt), value(w, dt), 1e-6), dt)
    y = oclfuse.rms_norm(x, eps=1e-6, path=path)  # no weight
    assert_close(y, ref_rms(value(x, dt), None, 1e-6), dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm(ctx, rng, dt, path, shape):
    x = rand(rng, shape, dt, 5.0, 9.0)  # a mean far from 0
    w, b = rand(rng, shape[1], dt), rand(rng, shape[1], dt)
    y = oclfuse.layer_norm(x, w, b, eps=1e-5, path=path)
    assert_close(y, ref_ln(value(x, dt), value(w, dt), value(b, dt), 1e-5), dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_rms_norm(ctx, rng, dt, path, shape):
    x, r, w = rand(rng, shape, dt), rand(rng, shape, dt), rand(rng, shape[1], dt)
    z = round_to(value(x, dt) + value(r, dt), dt)
    x2, r2 = oclfuse.add_rms_norm(x, r, w, eps=1e-6, path=path)
    assert x2 is x and r2 is r  # in place, NumPy arrays written back
    assert_close(r, z, dt, "residual")
    assert_close(x, ref_rms(z, value(w, dt), 1e-6), dt, "normalized")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_layer_norm(ctx, rng, dt, path, shape):
    x, r = rand(rng, shape, dt), rand(rng, shape, dt)
    w, b = rand(rng, shape[1], dt), rand(rng, shape[1], dt)
    x0 = x.copy()
    z = round_to(value(x, dt) + value(r, dt), dt)
    out, r2 = oclfuse.add_layer_norm(x, r, w, b, eps=1e-5, path=path)
    assert r2 is r and out is not x
    np.testing.assert_array_equal(x, x0)  # input untouched when out is new
    assert_close(r, z, dt, "residual")
    assert_close(out, ref_ln(z, value(w, dt), value(b, dt), 1e-5), dt, "out")
    # out = x: the input is overwritten with the result
    x, r = x0.copy(), rand(rng, shape, dt)
    z = round_to(value(x, dt) + value(r, dt), dt)
    oclfuse.add_layer_norm(x, r, w, b, eps=1e-5, out=x, path=path)
    assert_close(x, ref_ln(z, value(w, dt), value(b, dt), 1e-5), dt, "in place")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_strided_device_rows(queue, rng, dt, path):
    """PyOpenCL views with a row stride beyond the width: only the view is
    read and written, the padding keeps its values."""
    rows, cols, pad = 4, 37, 11
    xb, yb = rand(rng, (rows, cols + pad), dt), rand(rng, (rows, cols + pad), dt)
    w = rand(rng, cols, dt)
    dx, dy = cla.to_device(queue, xb), cla.to_device(queue, yb)
    dw = cla.to_device(queue, w)
    out = oclfuse.rms_norm(dx[:, :cols], dw, eps=1e-6, out=dy[:, pad:], path=path)
    assert isinstance(out, cla.Array)
    got = dy.get()
    np.testing.assert_array_equal(got[:, :pad], yb[:, :pad])
    assert_close(got[:, pad:], ref_rms(value(xb[:, :cols], dt), value(w, dt), 1e-6), dt)
    np.testing.assert_array_equal(dx.get(), xb)


@pytest.mark.parametrize("dt", DTYPES)
def test_in_place_and_async(queue, rng, dt):
    """out = x on device arrays; the call's event is attached to the array, so
    the next PyOpenCL operation sees the result."""
    x = rand(rng, (5, 64), dt)
    d = cla.to_device(queue, x)
    oclfuse.rms_norm(d, out=d, eps=1e-6)
    assert d.events, "the call's event is attached to the array it wrote"
    assert_close(d.get(), ref_rms(value(x, dt), None, 1e-6), dt)


def test_fused_matches_unfused(ctx, rng):
    x = rand(rng, (6, 200), "f32")
    a = oclfuse.layer_norm(x, path="fused")
    b = oclfuse.layer_norm(x, path="unfused")
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_explicit_params(ctx, rng):
    x = rand(rng, (3, 100), "f32")
    for params in ({"LAYOUT": 0, "VEC": 1}, {"LAYOUT": 1, "WGS": 16, "VEC": 4}):
        y = oclfuse.rms_norm(x, path="fused", params=params)
        assert_close(y, ref_rms(value(x, "f32"), None, 1e-6), "f32", str(params))


def test_wait_for_and_event(queue, rng):
    """The call waits for `wait_for` (a user event holds it back) and its event
    is attached to the arrays it touched."""
    import pyopencl as cl
    x = rand(rng, (2, 32), "f32")
    d = cla.to_device(queue, x)
    d.finish()
    gate = cl.UserEvent(queue.context)
    oclfuse.rms_norm(d, out=d, wait_for=[gate])
    evt = d.events[-1]
    assert evt.command_execution_status != cl.command_execution_status.COMPLETE
    gate.set_status(cl.command_execution_status.COMPLETE)
    evt.wait()
    assert_close(d.get(), ref_rms(value(x, "f32"), None, 1e-6), "f32")
