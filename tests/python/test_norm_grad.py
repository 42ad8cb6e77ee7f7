"""rms_norm_backward (with dres: add_rms_norm's backward) and
layer_norm_backward against NumPy (fp64 from the stored inputs): every
dtype, both paths, odd widths, 0 and 1 rows, in place, dw and db bit for bit
across tunings, and the refused calls."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, value

SHAPES = [(0, 7), (1, 1), (3, 33), (70, 130)]


def ref_backward(x, dy, w, eps, ln, dres=None):
    """(dx, dw, db) in float64."""
    n = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True) if ln else 0.0
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xh = (x - mu) * rstd
    g = dy * (w if w is not None else 1.0)
    mg = g.mean(axis=-1, keepdims=True) if ln else 0.0
    dx = rstd * (g - mg - xh * (g * xh).sum(axis=-1, keepdims=True) / n)
    if dres is not None:
        dx = dx + dres
    return dx, (dy * xh).reshape(-1, n).sum(axis=0), dy.reshape(-1, n).sum(axis=0)


def grad_close(got, want, rows):
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * (1 + rows / 8))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_backward(ctx, rng, dt, path, shape):
    x, dy = rand(rng, shape, dt, 0.25, 2.0), rand(rng, shape, dt, -1.0, 1.0)
    w, dres = rand(rng, shape[1], dt, 0.5, 1.5), rand(rng, shape, dt, -1.0, 1.0)
    want = ref_backward(value(x, dt), value(dy, dt), value(w, dt), 1e-6, False)
    dx, dw = oclfuse.rms_norm_backward(x, dy, w, eps=1e-6, path=path)
    assert isinstance(dx, np.ndarray) and dx.dtype == x.dtype
    assert_close(dx, want[0], dt, "dx")
    grad_close(dw, want[1], shape[0])
    # add + RMSNorm: the residual's gradient added, in place over it
    want = ref_backward(value(x, dt), value(dy, dt), value(w, dt), 1e-6, False, value(dres, dt))
    dx, dw = oclfuse.rms_norm_backward(x, dy, w, eps=1e-6, dres=dres, dx=dres, path=path,
                                       weight_grad=False)
    assert dx is dres and dw is None
    assert_close(dres, want[0], dt, "dx over dres")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_backward(ctx, rng, dt, path, shape):
    x, dy = rand(rng, shape, dt, 5.0, 9.0), rand(rng, shape, dt, -1.0, 1.0)
    w = rand(rng, shape[1], dt, 0.5, 1.5)
    want = ref_backward(value(x, dt), value(dy, dt), value(w, dt), 1e-5, True)
    dx, dw, db = oclfuse.layer_norm_backward(x, dy, w, eps=1e-5, path=path)
    assert_close(dx, want[0], dt, "dx")
    grad_close(dw, want[1], shape[0])
    grad_close(db, want[2], shape[0])
    # no weight, in place over dy, no dw
    want = ref_backward(value(x, dt), value(dy, dt), None, 1e-5, True)
    out, dw, db = oclfuse.layer_norm_backward(x, dy, eps=1e-5, dx=dy, weight_grad=False,
                                              path=path)
    assert out is dy and dw is None
    assert_close(dy, want[0], dt, "dx over dy")
    grad_close(db, want[2], shape[0])


def test_deterministic_across_tunings(ctx, queue, rng):
    x = cla.to_device(queue, rand(rng, (100, 517), "f32"))
    dy = cla.to_device(queue, rand(rng, (100, 517), "f32", -1.0, 1.0))
    w = cla.to_device(queue, rand(rng, 517, "f32", 0.5, 1.5))
    got = []
    for path, params in [("fused", {"LAYOUT": 0, "WGS": 1, "VEC": 1}),
                         ("fused", {"LAYOUT": 0, "WGS": 4, "VEC": 16}),
                         ("fused", {"LAYOUT": 1, "WGS": 32, "VEC": 4}),
                         ("unfused", {"LAYOUT": 1, "WGS": 16, "VEC": 2})]:
        _, dw, db = oclfuse.layer_norm_backward(x, dy, w, path=path, params=params)
        got.append((dw.get().tobytes(), db.get().tobytes()))
    assert all(g == got[0] for g in got), "dw or db differ between tunings"


def test_refused(ctx, rng):
    x, dy = rand(rng, (4, 8), "f32"), rand(rng, (4, 8), "f32")
    with pytest.raises(oclfuse.OclfError) as e:
        oclfuse.layer_norm_backward(x, dy, eps=-1.0)
    assert e.value.status == oclfuse.INVALID_ARGUMENT and "eps" in str(e.value)
    with pytest.raises(ValueError):
        oclfuse.rms_norm_backward(x, dy[:2])
    with pytest.raises(TypeError):
        oclfuse.rms_norm_backward(x, dy.astype(np.float16))
