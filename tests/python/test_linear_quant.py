"""linear_q against NumPy: every quantized format (INT8 per channel with f32
and f16 scales and in groups, INT4 in groups of 32 and 128 with and without
zero points, GGUF Q8_0 and Q4_0), each activation dtype and path, the
prologue and epilogue, a 1-D x and packed 1-D q, strided device rows, in
place on the residual; qweight_convert against a NumPy conversion and its
results against the GGUF weight's; quantize_q8_0/quantize_q4_0 on known
blocks (ggml's rounding, negative and -0.0 scales) and round trips through
dequantize; refused calls with the library's sentence."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from oclfuse import _capi
from conftest import DTYPES, PATHS, assert_close, rand, value
from test_linear import ref

needs_lib = pytest.mark.skipif(
    bool(_capi.missing("oclf_linear_q", "oclf_qweight_convert")),
    reason="the loaded liboclfuse does not export oclf_linear_q, oclf_qweight_convert yet")

# (format, group, scale dtype, zero points): the weights of the format matrix
FORMATS = [
    ("int8", 0, np.float32, False),
    ("int8", 0, np.float16, False),
    ("int8", 32, np.float16, False),
    ("int4", 32, np.float16, False),
    ("int4", 32, np.float16, True),
    ("int4", 128, np.float16, False),
    ("int4", 128, np.float16, True),
    ("q8_0", 0, None, False),
    ("q4_0", 32, None, False),
]


def fid(f):
    return f"{f[0]}-g{f[1]}" + (f"-{np.dtype(f[2]).name}" if f[2] else "") + ("-z" if f[3] else "")


def qweight(rng, n, k, fmt, group, sdt, zero):
    """(q, scale, zero) of a random weight [N, K] in the format."""
    if fmt in ("q8_0", "q4_0"):
        w = rng.uniform(-1.0, 1.0, (n, k))
        w[0, :32] = 0.0  # an all-zero block: d = 0 (Q8_0), -0.0 (Q4_0)
        return (oclfuse.quantize_q8_0 if fmt == "q8_0" else oclfuse.quantize_q4_0)(w), None, None
    cols = k // group if group else 0
    shape = (n, cols) if group else (n,)
    # positive and negative scales, one of them zero
    s = (rng.uniform(0.002, 0.02, shape) * rng.choice([-1.0, 1.0], shape)).astype(sdt)
    s.flat[1] = 0.0
    if fmt == "int8":
        return rng.integers(-128, 128, (n, k), dtype=np.int8), s, None
    q = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    z = rng.integers(0, 16, (n, cols), dtype=np.uint8) if zero else None
    return q, s, z


def quant_ref(x, w, dt, **epilogue):
    return ref(value(x, dt), w, **epilogue)


@needs_lib
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("f", FORMATS, ids=fid)
def test_formats(ctx, rng, path, f):
    fmt, group, sdt, zero = f
    m, n, k = 7, 11, 256
    q, s, z = qweight(rng, n, k, fmt, group, sdt, zero)
    w = oclfuse.dequantize(q, s, format=fmt, k=k, group=group, zero=z)
    x = rand(rng, (m, k), "f32", -1.0, 1.0)
    b = rand(rng, (n,), "f32", -1.0, 1.0)
    r = rand(rng, (m, n), "f32", -1.0, 1.0)
    y = oclfuse.linear_q(x, q, s, format=fmt, group=group, zero=z, bias=b, residual=r,
                         act="silu", alpha=0.75, beta=-0.5, path=path)
    assert y.shape == (m, n) and y.dtype == np.float32
    assert_close(y, quant_ref(x, w, "f32", bias=value(b, "f32"), residual=value(r, "f32"),
                              act="silu", alpha=0.75, beta=-0.5), "f32")


@needs_lib
@pytest.mark.parametrize("dt", [d for d in DTYPES if d != "f32"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("f", [FORMATS[1], FORMATS[4], FORMATS[8]], ids=fid)
def test_dtypes(ctx, rng, dt, path, f):
    """16-bit activations, bias, residual and output; the prologue and the
    residual before the activation."""
    fmt, group, sdt, zero = f
    m, n, k = 5, 9, 128
    q, s, z = qweight(rng, n, k, fmt, group, sdt, zero)
    w = oclfuse.dequantize(q, s, format=fmt, k=k, group=group, zero=z)
    x = rand(rng, (m, k), dt, -1.0, 1.0)
    b = rand(rng, (n,), dt, -1.0, 1.0)
    r = rand(rng, (m, n), dt, -1.0, 1.0)
    y = oclfuse.linear_q(x, q, s, format=fmt, group=group, zero=z, bias=b, residual=r,
                         prologue="gelu", act="relu", residual_before_act=True, path=path)
    assert y.dtype == x.dtype
    assert_close(y, quant_ref(x, w, dt, bias=value(b, dt), residual=value(r, dt),
                              prologue="gelu", act="relu", residual_before_act=True), dt)


@needs_lib
@pytest.mark.parametrize("path", PATHS)
def test_one_row_and_packed_q(ctx, rng, path):
    """A 1-D x is one row (the matrix-vector shape); a 1-D q holds packed
    rows, N given or taken from its length."""
    n, k = 6, 64
    q, _, _ = qweight(rng, n, k, "q4_0", 32, None, False)
    x = rand(rng, (k,), "f32", -1.0, 1.0)
    w = oclfuse.dequantize(q, format="q4_0", k=k)
    for kw in ({}, {"n": n}):
        y = oclfuse.linear_q(x, q.reshape(-1), format="q4_0", path=path, **kw)
        assert y.shape == (n,)
        assert_close(y, value(x, "f32") @ w.T, "f32")


@needs_lib
@pytest.mark.parametrize("path", PATHS)
def test_strided_device_rows_in_place(queue, rng, path):
    """q, scale and zero rows padded on the device (views), x rows padded,
    y computed in place on the residual: the padding stays as it was."""
    m, n, k, g, pad = 4, 10, 128, 32, 6
    q, s, z = qweight(rng, n, k, "int4", g, np.float16, True)
    w = oclfuse.dequantize(q, s, format="int4", k=k, group=g, zero=z)
    x = rand(rng, (m, k + pad), "f16", -1.0, 1.0)
    r = rand(rng, (m, n + pad), "f16", -1.0, 1.0)

    def padded(a):
        p = np.full((a.shape[0], a.shape[1] + pad), 7, a.dtype)
        p[:, :a.shape[1]] = a
        return cla.to_device(queue, p)

    dq, ds, dz = padded(q), padded(s), padded(z)
    dx, dr = cla.to_device(queue, x), cla.to_device(queue, r)
    res = dr[:, :n]
    y = oclfuse.linear_q(dx[:, :k], dq[:, :k // 2], ds[:, :k // g], format="int4", group=g,
                         zero=dz[:, :k // g], residual=res, out=res, path=path)
    assert y is res
    got = dr.get()
    np.testing.assert_array_equal(got[:, n:], r[:, n:])
    assert_close(got[:, :n], quant_ref(x[:, :k], w, "f16", residual=value(r[:, :n], "f16")),
                 "f16")
    np.testing.assert_array_equal(dq.get()[:, :k // 2], q)


def convert_numpy(q, fmt, k):
    """The separate-array form of GGUF bytes, in NumPy: (q, f16 scale)."""
    n = q.shape[0]
    blocks = q.reshape(n, k // 32, -1)
    d = np.ascontiguousarray(blocks[..., :2]).view("<f2")[..., 0].astype(np.float16)
    body = blocks[..., 2:]
    if fmt == "q8_0":
        return body.reshape(n, k).view(np.int8), d
    nib = np.concatenate([body & 15, body >> 4], axis=-1).reshape(n, k)  # weights in order
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8), d


@needs_lib
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_convert(ctx, rng, fmt):
    n, k = 9, 128
    q, _, _ = qweight(rng, n, k, fmt, 32, None, False)
    qo, so = oclfuse.qweight_convert(q, format=fmt, k=k)
    wq, ws = convert_numpy(q, fmt, k)
    # a choice is taken (any path runs the one kernel), an unknown path refused
    qu, su = oclfuse.qweight_convert(q, format=fmt, k=k, path="unfused")
    np.testing.assert_array_equal(qu, qo)
    np.testing.assert_array_equal(su.view(np.uint16), so.view(np.uint16))
    assert qo.dtype == wq.dtype and so.dtype == np.float16
    np.testing.assert_array_equal(qo, wq)
    np.testing.assert_array_equal(so.view(np.uint16), ws.view(np.uint16))  # -0.0 kept
    to = "int8" if fmt == "q8_0" else "int4"
    np.testing.assert_array_equal(oclfuse.dequantize(qo, so, format=to, k=k, group=32),
                                  oclfuse.dequantize(q, format=fmt, k=k))
    x = rand(rng, (6, k), "f32", -1.0, 1.0)
    for path in PATHS:
        y = oclfuse.linear_q(x, q, format=fmt, path=path)
        y2 = oclfuse.linear_q(x, qo, so, format=to, group=32, path=path)
        if path == "unfused":  # both dequantize into the same f32 W, then one GEMM
            np.testing.assert_array_equal(y2, y)
        assert_close(y2, value(x, "f32") @ oclfuse.dequantize(q, format=fmt, k=k).T, "f32")


@needs_lib
def test_convert_device_arrays(queue, rng):
    """PyOpenCL in, PyOpenCL out; into caller's arrays."""
    n, k = 3, 64
    q, _, _ = qweight(rng, n, k, "q8_0", 32, None, False)
    dq = cla.to_device(queue, q)
    qo, so = oclfuse.qweight_convert(dq, format="q8_0", k=k)
    assert isinstance(qo, cla.Array) and isinstance(so, cla.Array)
    wq, ws = convert_numpy(q, "q8_0", k)
    np.testing.assert_array_equal(qo.get(), wq)
    mine = (cla.zeros(queue, (n, k), np.int8), cla.zeros(queue, (n, k // 32), np.float16))
    got = oclfuse.qweight_convert(dq, format="q8_0", k=k, q_out=mine[0], scale_out=mine[1])
    assert got[0] is mine[0] and got[1] is mine[1]
    np.testing.assert_array_equal(mine[1].get(), ws)


# ---------------------------------------------------------------------------
# The NumPy quantizers and dequantize


def test_quantize_q8_0_known_block():
    """amax 127 makes d = 1: ggml's roundf rounds halves away from zero."""
    x = np.zeros(32, np.float32)
    x[:6] = [127.0, 2.5, -2.5, 0.5, -0.5, 1.49]
    b = oclfuse.quantize_q8_0(x)
    assert b.shape == (1, 34) and b.dtype == np.uint8
    assert b[0, :2].view("<f2")[0] == 1.0
    np.testing.assert_array_equal(b[0, 2:8].view(np.int8), [127, 3, -3, 1, -1, 1])
    np.testing.assert_array_equal(b[0, 8:], 0)
    # an all-zero block: d = +0.0
    z = oclfuse.quantize_q8_0(np.zeros((2, 32)))
    np.testing.assert_array_equal(z, 0)


def test_quantize_q4_0_known_block():
    """max = 8 (the first value of the largest magnitude, positive) makes
    d = -1: nibble = min(15, int(8.5 - x)); weights j and j + 16 share byte j."""
    x = np.zeros(32, np.float32)
    x[:5] = [8.0, -8.0, 0.5, -0.5, 3.0]
    x[16:19] = [-1.0, 7.6, -7.4]
    b = oclfuse.quantize_q4_0(x)
    assert b.shape == (1, 18)
    assert b[0, :2].view("<f2")[0] == -1.0
    nib = np.concatenate([b[0, 2:] & 15, b[0, 2:] >> 4])
    want = np.full(32, 8)
    want[:5] = [0, 15, 8, 9, 5]
    want[16:19] = [9, 0, 15]
    np.testing.assert_array_equal(nib, want)
    # -8 and 8 both of the largest magnitude: the first (-8) sets d = +1
    y = np.zeros(32, np.float32)
    y[3], y[9] = -8.0, 8.0
    assert oclfuse.quantize_q4_0(y)[0, :2].view("<f2")[0] == 1.0
    # an all-zero block: d = -0.0 (bytes 00 80), every nibble 8
    z = oclfuse.quantize_q4_0(np.zeros(64))
    np.testing.assert_array_equal(z[0, :2], [0x00, 0x80])
    np.testing.assert_array_equal(z[0, 2:18], 0x88)
    np.testing.assert_array_equal(oclfuse.dequantize(z, format="q4_0", k=64), 0.0)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantize_round_trip(rng, fmt):
    """|dequantize(quantize(w)) - w| within half a step (Q8_0) or one step
    (Q4_0, whose -max side is clamped to 7 d) of each block's |d|, plus
    the f16 rounding of d."""
    n, k = 8, 256
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.01, 10, (n, 1))
    q = (oclfuse.quantize_q8_0 if fmt == "q8_0" else oclfuse.quantize_q4_0)(w)
    assert q.shape == (n, k // 32 * (34 if fmt == "q8_0" else 18))
    back = oclfuse.dequantize(q, format=fmt, k=k)
    d = np.abs(q.reshape(n, k // 32, -1)[..., :2].copy().view("<f2").astype(np.float64))
    step = 0.57 if fmt == "q8_0" else 1.01
    err = np.abs(back - w).reshape(n, k // 32, 32)
    assert (err <= step * d + 1e-12).all()
    # Q4_0's scale is negative where the largest magnitude is positive
    if fmt == "q4_0":
        blocks = w.reshape(n, k // 32, 32)
        big = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]
        sign = np.signbit(q.reshape(n, k // 32, -1)[..., :2].copy().view("<f2")[..., 0])
        np.testing.assert_array_equal(sign, big > 0)


def test_dequantize_formulas():
    """INT8 and INT4 by the header's formulas on a hand-made row."""
    q8 = np.array([[-128, -1, 0, 1, 127, 5]], np.int8)
    np.testing.assert_array_equal(
        oclfuse.dequantize(q8, np.array([0.5], np.float32), format="int8", k=6),
        [[-64.0, -0.5, 0.0, 0.5, 63.5, 2.5]])
    q4 = np.zeros((1, 16), np.uint8)
    q4[0, 0] = 0x3A  # weight 0 = 10 (low nibble), weight 1 = 3
    q4[0, 15] = 0xF0  # weight 30 = 0, weight 31 = 15
    s = np.array([[2.0]], np.float16)
    w = oclfuse.dequantize(q4, s, format="int4", k=32, group=32)
    assert (w[0, 0], w[0, 1], w[0, 30], w[0, 31]) == (4.0, -10.0, -16.0, 14.0)
    w = oclfuse.dequantize(q4, s, format="int4", k=32, group=32,
                           zero=np.array([[3]], np.uint8))
    assert (w[0, 0], w[0, 1], w[0, 2], w[0, 31]) == (14.0, 0.0, -6.0, 24.0)
    with pytest.raises(ValueError):
        oclfuse.dequantize(q4, s, format="int4", k=40, group=32)


# ---------------------------------------------------------------------------
# Refused calls


def refused(words, fn, *args, **kw):
    with pytest.raises(oclfuse.OclfError) as err:
        fn(*args, **kw)
    e = err.value
    assert e.status == oclfuse.INVALID_ARGUMENT, str(e)
    assert e.message.startswith("oclf_" + fn.__name__ + ": "), e.message
    for word in words:
        assert word in e.message, f"{word!r} not in {e.message!r}"


@needs_lib
def test_refused_calls_leave_buffers(queue, rng):
    n, k = 4, 64
    x = cla.to_device(queue, rand(rng, (3, k), "f32"))
    xk = cla.to_device(queue, rand(rng, (3, 40), "f32"))
    y = cla.zeros(queue, (3, n), np.float32)
    q8 = cla.to_device(queue, rng.integers(-128, 128, (n, k), dtype=np.int8))
    q4 = cla.to_device(queue, rng.integers(0, 256, (n, k // 2), dtype=np.uint8))
    s32 = cla.to_device(queue, np.ones((n, k // 32), np.float32))
    s16 = cla.to_device(queue, np.ones((n, k // 32), np.float16))
    z = cla.to_device(queue, np.zeros((n, k // 32), np.uint8))
    gguf = oclfuse.quantize_q8_0(rng.uniform(-1, 1, (n, k)))
    dg = cla.to_device(queue, gguf)
    lq = oclfuse.linear_q

    refused(["K = 40", "multiple", "group of 32"], lq, xk, q8[:, :40], s16[:, :1],
            format="int8", group=32, out=y)
    refused(["K = 40", "multiple"], lq, xk, dg, format="q8_0", out=y)
    refused(["group of 48"], lq, x, q8, s16, format="int8", group=48, out=y)
    refused(["group of 0"], lq, x, q4, s16, format="int4", group=0, out=y)
    refused(["f16 scales"], lq, x, q8, s32, format="int8", group=32, out=y)
    refused(["no zero points"], lq, x, q8, s16, format="int8", group=32, zero=z, out=y)
    refused(["scale.mem must be NULL"], lq, x, dg, s16, format="q8_0", out=y)
    refused(["unknown weight format 9"], lq, x, q4, s16, format=9, group=32, out=y)
    refused(["w.scale", "NULL"], lq, x, q8, None, format="int8", out=y)
    odd = cla.to_device(queue, np.zeros(gguf.size + 1, np.uint8))
    refused(["offset", "even"], lq, x, odd[1:], format="q8_0", n=n, out=y)
    refused(["epilogue activation 7"], lq, x, q8, s16, format="int8", group=32, act=7, out=y)
    np.testing.assert_array_equal(y.get(), 0)

    qc = oclfuse.qweight_convert
    refused(["K = 40"], qc, dg[:, :2 * 34], format="q8_0", k=40)
    refused(["Q8_0 or Q4_0", "format 1"], qc, q8, format="int8", k=k)
    np.testing.assert_array_equal(dg.get(), gguf)


def test_python_side_errors(ctx, rng):
    x = rand(rng, (2, 64), "f32")
    q = rng.integers(-128, 128, (3, 64), dtype=np.int8)
    s = np.ones(3, np.float16)
    with pytest.raises(ValueError, match="rows hold 64 bytes"):
        oclfuse.linear_q(x, q.view(np.uint8), np.ones((3, 2), np.float16), format="int4",
                         group=32)
    with pytest.raises(ValueError, match="scale has shape"):
        oclfuse.linear_q(x, q, np.ones((3, 2), np.float16), format="int8")
    with pytest.raises(TypeError, match="float16 or float32"):
        oclfuse.linear_q(x, q, s.astype(np.float64), format="int8")
    with pytest.raises(TypeError, match="uint8"):
        oclfuse.linear_q(x, q, np.ones((3, 2), np.float16), format="int4", group=32)
    with pytest.raises(ValueError, match="n is 4"):
        oclfuse.linear_q(x, q, s, format="int8", n=4)
    with pytest.raises(ValueError, match="format must be one of"):
        oclfuse.linear_q(x, q, s, format="int2")
    with pytest.raises(ValueError, match="K a multiple of 32"):
        oclfuse.quantize_q8_0(np.zeros((2, 40)))


def test_missing_symbol(ctx, rng, monkeypatch):
    """A library without oclf_linear_q: NotImplementedError naming it."""
    monkeypatch.setattr(_capi, "MISSING", _capi.MISSING | {"oclf_linear_q",
                                                           "oclf_qweight_convert"})
    x = rand(rng, (2, 32), "f32")
    q = oclfuse.quantize_q8_0(rng.uniform(-1, 1, (3, 32)))
    with pytest.raises(NotImplementedError, match="oclf_linear_q"):
        oclfuse.linear_q(x, q, format="q8_0")
    with pytest.raises(NotImplementedError, match="oclf_qweight_convert"):
        oclfuse.qweight_convert(q, format="q8_0", k=32)
