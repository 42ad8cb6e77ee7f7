"""Expr: generated elementwise kernels against NumPy, both paths, every
dtype; dropout's mask depends on (seed, offset) only."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, round_to, value


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_bias_act_scale(ctx, rng, dt, path):
    e = oclfuse.Expr("y = silu(x + bias) * s + c; z = max(x, 0) * rs;",
                     [("x", "matrix", dt), ("bias", "row", "f32"), ("s", "scalar"),
                      ("c", "col", dt), ("rs", "row", dt)],
                     [("y", "matrix", dt), ("z", "matrix", "f32")])
    assert "silu" in e.canonical
    rows, cols = 3, 37
    x, c = rand(rng, (rows, cols), dt), rand(rng, rows, dt)
    bias = rng.uniform(-1, 1, cols).astype(np.float32)
    rs = rand(rng, cols, dt)
    y, z = e({"x": x, "bias": bias, "s": 0.5, "c": c, "rs": rs}, path=path)
    xv = value(x, dt)
    t = xv + bias
    assert_close(y, t / (1 + np.exp(-t)) * 0.5 + value(c, dt)[:, None], dt, "y")
    assert_close(z, np.maximum(xv, 0) * value(rs, dt), "f32", "z")


def test_in_place_device(queue, rng):
    """In place on both paths; on the unfused one also where a second
    output's kernel reads the input after the first output overwrote it
    (the library reads a copy then)."""
    e = oclfuse.Expr("x2 = log1p(exp(x));", [("x", "matrix", np.float16)],
                     [("x2", "matrix", np.float16)])
    x = rand(rng, (4, 20), "f16")
    for path in ("unfused", "fused"):
        d = cla.to_device(queue, x)
        e([d], [d], path=path)
        assert_close(d.get(), np.log1p(np.exp(value(x, "f16"))), "f16")
    two = oclfuse.Expr("a = x * 2; b = x + 1;", [("x", "matrix", "f32")],
                       [("a", "matrix", "f32"), ("b", "matrix", "f32")])
    xf = rng.uniform(-1, 1, (4, 20)).astype(np.float32)
    for path in ("unfused", "fused"):
        d, other = cla.to_device(queue, xf), cla.empty(queue, xf.shape, np.float32)
        two([d], [d, other], path=path)
        np.testing.assert_array_equal(d.get(), xf * 2)
        np.testing.assert_array_equal(other.get(), xf + 1)


def test_dropout_mask(ctx, rng):
    e = oclfuse.Expr("y = dropout(x, p);", [("x", "matrix", "f32"), ("p", "scalar")],
                     [("y", "matrix", "f32")])
    x = np.ones((8, 128), np.float32)
    a = e([x, 0.25], seed=7)
    b = e([x, 0.25], seed=7, path="unfused")
    c = e([x, 0.25], seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    kept = a != 0
    np.testing.assert_allclose(a[kept], 1 / 0.75, rtol=1e-6)
    assert 0.6 < kept.mean() < 0.9


def test_bf16_rounding_once(ctx, rng):
    e = oclfuse.Expr("y = x * 3 + 1;", [("x", "matrix", "bf16")], [("y", "matrix", "bf16")])
    x = rand(rng, (2, 9), "bf16")
    y = e([x])
    np.testing.assert_array_equal(value(y, "bf16"), round_to(value(x, "bf16") * 3 + 1, "bf16"))


def test_bf16_helpers_match_library(ctx, rng):
    """to_bf16 rounds as the library does (f32 in, bf16 out, bit for bit) and
    from_bf16 widens as it does, over ties, subnormals, infinities and NaN."""
    f = np.concatenate([rng.standard_normal(500).astype(np.float32) * 1e3,
                        (np.arange(64, dtype=np.uint32) << 15 | 0x3F800000).view(np.float32),
                        np.array([1e-40, -1e-39, np.inf, -np.inf, 3.4e38, 0.0, -0.0],
                                 np.float32)]).reshape(1, -1)
    narrow = oclfuse.Expr("y = x;", [("x", "matrix", "f32")], [("y", "matrix", "bf16")])
    got = narrow([f])
    np.testing.assert_array_equal(got, oclfuse.to_bf16(f))
    widen = oclfuse.Expr("y = x;", [("x", "matrix", "bf16")], [("y", "matrix", "f32")])
    np.testing.assert_array_equal(widen([got]), oclfuse.from_bf16(got))


def test_form_id():
    """The tuning key ignores names, statement order and dtypes, and tells
    different computations apart; bad source is refused by name."""
    a = oclfuse.form_id("y = relu(x + b) * 2;", [("x", "matrix", "f32"), ("b", "row", "f32")],
                        [("y", "matrix", "f32")])
    b = oclfuse.form_id("out = relu(in + bias) * 2;",
                        [("in", "matrix", "f16"), ("bias", "row", "f32")],
                        [("out", "matrix", "bf16")])
    c = oclfuse.form_id("y = relu(x + b) * 3;", [("x", "matrix", "f32"), ("b", "row", "f32")],
                        [("y", "matrix", "f32")])
    assert a == b
    assert a != c
    assert 0 < a < 2 ** 52
    with pytest.raises(oclfuse.OclfError) as err:
        oclfuse.form_id("y = x +;", [("x", "matrix", "f32")], [("y", "matrix", "f32")])
    assert err.value.status == oclfuse.INVALID_ARGUMENT
    assert err.value.message.startswith("oclf_expr_form_id: ")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_bits_relu_mask(ctx, rng, dt, path):
    """A bits output and a bits input: ReLU with its mask, then the backward
    from the mask; the words as pack_bits lays them out, bits past cols 0."""
    fwd = oclfuse.Expr("y = relu(x); m = x > 0;", [("x", "matrix", dt)],
                       [("y", "matrix", dt), ("m", "bits")])
    bwd = oclfuse.Expr("dx = m ? dy : 0;", [("m", "bits"), ("dy", "matrix", dt)],
                       [("dx", "matrix", dt)])
    rows, cols = 5, 77
    x, dy = rand(rng, (rows, cols), dt), rand(rng, (rows, cols), dt)
    y, m = fwd([x], path=path)
    assert m.dtype == np.uint32 and m.shape == (rows, oclfuse.bit_words(cols))
    xv = value(x, dt)
    assert_close(y, np.maximum(xv, 0), dt, "y")
    np.testing.assert_array_equal(m, oclfuse.pack_bits(xv > 0))
    np.testing.assert_array_equal(oclfuse.unpack_bits(m, cols), xv > 0)
    assert not (m[:, -1] >> (cols % 32)).any()
    dx = bwd([m, dy], path=path)
    assert_close(dx, np.where(xv > 0, value(dy, dt), 0), dt, "dx")
    # Only bit matrices as operands: cols is given.
    inv = oclfuse.Expr("n = m == 0;", [("m", "bits")], [("n", "bits")])
    n = inv([m], cols=cols, path=path)
    np.testing.assert_array_equal(oclfuse.unpack_bits(n, cols), ~(xv > 0))


def test_bits_kinds(ctx):
    assert oclfuse.form_id("y = x > 0;", [("x", "matrix", "f32")], [("y", "bits")]) != \
        oclfuse.form_id("y = x > 0;", [("x", "matrix", "f32")], [("y", "matrix", "f32")])
    with pytest.raises(ValueError, match="kind must be one of matrix, bits"):
        oclfuse.Expr("y = x;", [("x", "matrix", "f32")], [("y", "row", "f32")])
    with pytest.raises(oclfuse.OclfError, match="dropout p must be a number or a scalar"):
        oclfuse.Expr("y = dropout(x, m);", [("x", "matrix", "f32"), ("m", "bits")],
                     [("y", "matrix", "f32")])


def test_dropout_backward_regenerates(ctx, rng):
    """dropout's backward is dropout(dy, p) with the forward's seed and
    offset: zero where the forward dropped, dy / (1 - p) where it kept, and
    the kept set is the one a bits output records."""
    p = 0.25
    fwd = oclfuse.Expr("y = dropout(x, p);", [("x", "matrix", "f32"), ("p", "scalar")],
                       [("y", "matrix", "f32")])
    mask = oclfuse.Expr("m = dropout(1, p) != 0;", [("p", "scalar")], [("m", "bits")])
    x = rng.uniform(0.5, 2, (4, 45)).astype(np.float32)
    dy = rng.uniform(-1, 1, (4, 45)).astype(np.float32)
    y = fwd([x, p], seed=11, offset=77)
    dx = fwd([dy, p], seed=11, offset=77, path="unfused")
    kept = y != 0
    np.testing.assert_array_equal(dx, np.where(kept, dy / np.float32(1 - p), 0))
    m = mask([p], rows=4, cols=45, seed=11, offset=77)
    np.testing.assert_array_equal(oclfuse.unpack_bits(m, 45), kept)
