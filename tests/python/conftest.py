"""Shared fixtures and references for the Python package's tests: the
library's tolerances (docs/testing.md), storage conversions, and a context on
the first OpenCL device (POCL here)."""
import numpy as np
import pytest

import oclfuse

# (atol, rtol) per dtype: |got - ref| <= atol + rtol * |ref|
TOL = {"f32": (1e-5, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1e-2, 1.6e-2)}
DTYPES = list(TOL)
PATHS = ["fused", "unfused"]


@pytest.fixture(scope="session")
def ctx():
    c = oclfuse.default_context()
    yield c
    c.queue.finish()


@pytest.fixture(scope="session")
def queue(ctx):
    return ctx.queue


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def stored(values, dt):
    """float values -> the storage array of dtype name dt."""
    if dt == "bf16":
        return oclfuse.to_bf16(values)
    return np.asarray(values, dtype=oclfuse.storage_dtype(dt))


def value(a, dt):
    """storage array -> float64 values."""
    a = np.asarray(a)
    if dt == "bf16":
        return oclfuse.from_bf16(a).astype(np.float64)
    return a.astype(np.float64)


def rand(rng, shape, dt, lo=-2.0, hi=2.0):
    return stored(rng.uniform(lo, hi, shape), dt)


def assert_close(got, ref, dt, what="result"):
    atol, rtol = TOL[dt]
    g = value(got, dt)
    ref = np.asarray(ref, dtype=np.float64)
    assert g.shape == ref.shape, f"{what}: shape {g.shape}, expected {ref.shape}"
    bad = ~(np.abs(g - ref) <= atol + rtol * np.abs(ref))
    if bad.any():
        i = np.argwhere(bad)[0]
        pytest.fail(f"{what} ({dt}): {bad.sum()} of {bad.size} elements off; first at "
                    f"{tuple(i)}: got {g[tuple(i)]!r}, expected {ref[tuple(i)]!r}")


def round_to(values, dt):
    """values rounded to dt's storage, back as float64 (what a stored
    intermediate holds)."""
    return value(stored(values, dt), dt)
