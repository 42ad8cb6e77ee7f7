"""cross_entropy and linear_cross_entropy against NumPy: every dtype and
path, each reduction with an upstream gradient, ignored rows, smoothing,
softcap and z-loss, the gradient in place over NumPy and device logits, a
bad target named by its row with nothing written, and linear +
cross-entropy's loss, gradients and chunking (max_temp)."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from oclfuse import _capi
from conftest import DTYPES, PATHS, assert_close, rand, round_to, value

needs_lib = pytest.mark.skipif(
    bool(_capi.missing("oclf_cross_entropy", "oclf_linear_cross_entropy")),
    reason="the loaded liboclfuse does not export the cross-entropy calls yet")


def ref_ce(z, t, ignore=-100, reduction="mean", ls=0.0, cap=0.0, zl=0.0, gup=None):
    """(loss, lse, grad) in float64, PyTorch's formulas."""
    z = np.asarray(z, np.float64)
    zc = cap * np.tanh(z / cap) if cap > 0 else z
    m = zc.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(zc - m).sum(axis=1, keepdims=True)))[:, 0]
    rows = np.arange(len(t))
    kept = t != ignore
    tt = np.where(kept, t, 0)
    nll = lse - zc[rows, tt]
    smooth = lse - zc.mean(axis=1)
    per = np.where(kept, (1 - ls) * nll + ls * smooth + zl * lse * lse, 0.0)
    count = kept.sum()
    if reduction == "none":
        loss, scale = per, np.ones(len(t))
    elif reduction == "sum":
        loss, scale = np.array([per.sum()]), np.ones(len(t))
    else:
        loss = np.array([per.sum() / count if count else np.nan])
        scale = np.full(len(t), 1.0 / count if count else 0.0)
    if gup is not None:
        scale = scale * (np.asarray(gup, np.float64) if reduction == "none" else float(gup))
    p = np.exp(zc - lse[:, None])
    onehot = np.zeros_like(z)
    onehot[rows[kept], tt[kept]] = 1 - ls
    d = p * (1 + 2 * zl * lse[:, None]) - onehot - ls / z.shape[1]
    if cap > 0:
        d = d * (1 - (zc / cap) ** 2)
    grad = np.where(kept[:, None], d * scale[:, None], 0.0)
    return loss, lse, grad


def targets(rng, t, v, ignore_every=3):
    tg = rng.integers(0, v, t).astype(np.int64)
    tg[1::ignore_every] = -100
    return tg


@needs_lib
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_cross_entropy(rng, dt, path, reduction):
    z = rand(rng, (9, 101), dt, -4, 4)
    t = targets(rng, 9, 101)
    gup = rng.uniform(0.5, 1.5, 9).astype(np.float32) if reduction == "none" else 0.75
    want_loss, want_lse, want_grad = ref_ce(value(z, dt), t, reduction=reduction, ls=0.1,
                                            cap=5.0, zl=1e-3, gup=gup)
    logits = z.copy()
    loss, lse = oclfuse.cross_entropy(logits, t, reduction=reduction, label_smoothing=0.1,
                                      softcap=5.0, z_loss=1e-3, grad=True, grad_output=gup,
                                      return_lse=True, path=path)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-4)
    assert_close(logits, want_grad, dt, "gradient over the logits")


@needs_lib
def test_cross_entropy_device_and_no_grad(rng, queue):
    z = rand(rng, (5, 33), "f32", -3, 3)
    t = targets(rng, 5, 33)
    dz = cla.to_device(queue, z)
    loss = oclfuse.cross_entropy(dz, t)
    np.testing.assert_allclose(loss.get(), ref_ce(z, t)[0], rtol=1e-5)
    np.testing.assert_array_equal(dz.get(), z)  # no gradient asked: untouched


@needs_lib
def test_cross_entropy_all_ignored(rng):
    z = rand(rng, (4, 10), "f32")
    logits = z.copy()
    loss = oclfuse.cross_entropy(logits, np.full(4, -100, np.int64), grad=True)
    assert np.isnan(loss[0])
    assert (logits == 0).all()


@needs_lib
def test_cross_entropy_bad_target(rng):
    z = rand(rng, (4, 10), "f32")
    logits = z.copy()
    with pytest.raises(oclfuse.OclfError) as e:
        oclfuse.cross_entropy(logits, np.array([1, 2, 10, 3], np.int64), grad=True)
    assert e.value.status == oclfuse.INVALID_ARGUMENT and "row 2" in str(e.value)
    np.testing.assert_array_equal(logits, z)


def ref_lce(x, w, t, dt, **kw):
    """The library's rounding: logits and their gradient stored in dt."""
    z = round_to(value(x, dt) @ value(w, dt).T, dt)
    loss, lse, dz = ref_ce(z, t, **kw)
    dz = round_to(dz, dt)
    return loss, lse, dz @ value(w, dt), dz.T @ value(x, dt)


def assert_grad(got, want, tol, what):
    big = max(np.abs(want).max(), 1e-6)
    err = np.abs(np.asarray(got, np.float64) - want).max()
    assert err <= tol * big, f"{what}: largest error {err:.3g} against {big:.3g}"


@needs_lib
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_linear_cross_entropy(rng, dt, path):
    T, H, V = 13, 24, 61
    x = rand(rng, (T, H), dt, -1, 1)
    w = rand(rng, (V, H), dt, -0.5, 0.5)
    t = targets(rng, T, V)
    want_loss, want_lse, want_gx, want_gw = ref_lce(x, w, t, dt, reduction="sum", ls=0.05)
    r = oclfuse.linear_cross_entropy(x, w, t, reduction="sum", label_smoothing=0.05,
                                     grad_x=True, grad_w=True, return_lse=True, path=path,
                                     params={"CHUNK": 4})
    np.testing.assert_allclose(r["loss"], want_loss, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r["lse"], want_lse, rtol=1e-5, atol=1e-4)
    tol = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}[dt]
    assert_grad(value(r["grad_x"], dt), want_gx, tol, "grad_x")
    assert_grad(r["grad_w"], want_gw, tol, "grad_w")
    if path == "fused":
        assert r["chunk_tokens"] == 4 and r["chunks"] == 4
    else:
        assert r["chunks"] == 1


@needs_lib
def test_linear_cross_entropy_max_temp(rng):
    T, H, V = 40, 16, 50
    x = rand(rng, (T, H), "f32", -1, 1)
    w = rand(rng, (V, H), "f32", -1, 1)
    t = targets(rng, T, V)
    full = oclfuse.linear_cross_entropy(x, w, t, grad_w=True, path="unfused")
    small = oclfuse.linear_cross_entropy(x, w, t, grad_w=True, max_temp=4096, path="fused")
    assert small["temp_bytes"] <= 4096 < full["temp_bytes"]
    assert small["chunks"] > 1
    np.testing.assert_allclose(small["loss"], full["loss"], rtol=1e-5)
    assert_grad(small["grad_w"], np.asarray(full["grad_w"], np.float64), 2e-5, "grad_w")


@needs_lib
def test_linear_cross_entropy_refusals(rng):
    x = rand(rng, (4, 8), "f32")
    w = rand(rng, (6, 8), "f32")
    with pytest.raises(ValueError):
        oclfuse.linear_cross_entropy(x, rand(rng, (6, 7), "f32"), np.zeros(4, np.int64))
    with pytest.raises(oclfuse.OclfError) as e:
        oclfuse.linear_cross_entropy(x, w, np.array([0, 1, 6, 2], np.int64), grad_x=True)
    assert "row 2" in str(e.value)
    with pytest.raises(oclfuse.OclfError) as e:
        oclfuse.linear_cross_entropy(x, w, np.zeros(4, np.int64), max_temp=16)
    assert e.value.status == oclfuse.INVALID_ARGUMENT and "max_temp" in str(e.value)
