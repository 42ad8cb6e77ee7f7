"""Bad arguments: the library's status and sentence reach the exception, and
a refused call leaves every buffer untouched; Python-side type errors."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from conftest import rand


def refused(status, words, fn, *args, **kw):
    with pytest.raises(oclfuse.OclfError) as err:
        fn(*args, **kw)
    e = err.value
    assert e.status == status, str(e)
    assert e.name == {oclfuse.INVALID_ARGUMENT: "OCLF_INVALID_ARGUMENT",
                      oclfuse.UNSUPPORTED: "OCLF_UNSUPPORTED",
                      oclfuse.OUT_OF_RESOURCES: "OCLF_OUT_OF_RESOURCES"}[status]
    for w in words:
        assert w in e.message, f"{w!r} not in {e.message!r}"
    assert str(e) == f"{e.name}: {e.message}"
    # The sentence names the public function that refused the call.
    assert e.message.startswith("oclf_"), e.message
    assert e.meaning and e.meaning != e.name
    return e


def test_bad_eps_leaves_buffers(queue, rng):
    x = rand(rng, (3, 16), "f32")
    dx, dy = cla.to_device(queue, x), cla.zeros(queue, (3, 16), np.float32)
    for eps in (-1.0, float("nan"), float("inf")):
        refused(oclfuse.INVALID_ARGUMENT, ["rms_norm", "eps"], oclfuse.rms_norm, dx, eps=eps,
                out=dy)
        refused(oclfuse.INVALID_ARGUMENT, ["eps"], oclfuse.layer_norm, dx, eps=eps, out=dy)
    np.testing.assert_array_equal(dy.get(), 0)
    np.testing.assert_array_equal(dx.get(), x)


def test_bad_kernel_parameters(ctx, rng):
    x = rand(rng, (2, 16), "f32")
    refused(oclfuse.INVALID_ARGUMENT, ["VEC = 3"], oclfuse.rms_norm, x, path="fused",
            params={"VEC": 3})
    refused(oclfuse.INVALID_ARGUMENT, ["WGS = 7", "power of two"], oclfuse.rms_norm, x,
            path="unfused", params={"WGS": 7})
    refused(oclfuse.INVALID_ARGUMENT, ["oclf_params_set", "longer than 15"], oclfuse.rms_norm,
            x, params={"A_VERY_LONG_PARAMETER": 1})


def test_overlap(queue, rng):
    """act_and_mul's output overlapping its input (views of one buffer)."""
    x = rand(rng, (2, 32), "f16")
    d = cla.to_device(queue, x)
    refused(oclfuse.INVALID_ARGUMENT, ["overlap"], oclfuse.act_and_mul, d[:, :32],
            out=d[:, 16:])
    np.testing.assert_array_equal(d.get(), x)
    # add_rms_norm with input and residual the same array
    refused(oclfuse.INVALID_ARGUMENT, ["overlap"], oclfuse.add_rms_norm, d, d)
    np.testing.assert_array_equal(d.get(), x)


def test_bad_activation_and_rope(ctx, rng):
    x = rand(rng, (2, 8), "f32")
    refused(oclfuse.INVALID_ARGUMENT, ["unknown activation 99"], oclfuse.act_and_mul, x, 99)
    refused(oclfuse.INVALID_ARGUMENT, ["act_on_second"], oclfuse.act_and_mul, x, "swiglu_oai",
            act_on_second=True)
    refused(oclfuse.INVALID_ARGUMENT, ["limit"], oclfuse.act_and_mul, x, "swiglu_oai",
            limit=-1.0)
    q = rand(rng, (2, 1, 8), "f32")
    cs = np.zeros((4, 3), np.float32)  # odd rot_dim
    refused(oclfuse.INVALID_ARGUMENT, ["rot"], oclfuse.rotary_embedding, q,
            np.zeros(2, np.int32), cs)


def test_validate_positions(queue, rng):
    """With the context's validate option a bad position is an error naming
    the token, and nothing is written."""
    c = oclfuse.Context(queue, validate=True)
    try:
        q = rand(rng, (2, 1, 8), "f32")
        q0 = q.copy()
        cs = np.ones((4, 8), np.float32)
        refused(oclfuse.INVALID_ARGUMENT, ["token 1"], oclfuse.rotary_embedding, q,
                np.array([0, 9], np.int64), cs, ctx=c)
        np.testing.assert_array_equal(q, q0)
    finally:
        c.close()


def test_l2_topk_errors(ctx, rng):
    q = rng.uniform(size=(2, 8)).astype(np.float32)
    x = rng.uniform(size=(10, 8)).astype(np.float32)
    refused(oclfuse.INVALID_ARGUMENT, ["k"], oclfuse.l2_topk, q, x, 0)
    refused(oclfuse.INVALID_ARGUMENT, ["EXACT"], oclfuse.l2_topk, q, x, 3, precision="exact",
            path="unfused")
    refused(oclfuse.OUT_OF_RESOURCES, ["max_temp_bytes"], oclfuse.l2_topk, q, x, 5,
            max_temp_bytes=16)
    refused(oclfuse.INVALID_ARGUMENT, ["merge"], oclfuse.l2_topk_merge,
            [(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.int64))], 0)


def test_expr_errors(ctx):
    e = refused(oclfuse.INVALID_ARGUMENT, ["1:9:"], oclfuse.Expr, "y = x + nope;",
                [("x", "matrix", "f32")], [("y", "matrix", "f32")])
    assert "nope" in e.message
    refused(oclfuse.INVALID_ARGUMENT, ["2:"], oclfuse.Expr, "y = x;\ny = x * 2;",
            [("x", "matrix", "f32")], [("y", "matrix", "f32")])


def test_python_side_errors(ctx, rng):
    with pytest.raises(TypeError, match="float64"):
        oclfuse.rms_norm(np.zeros((2, 4)))
    with pytest.raises(TypeError, match="weight"):
        oclfuse.rms_norm(np.zeros((2, 4), np.float32), np.zeros(4, np.float16))
    with pytest.raises(ValueError, match="out has shape"):
        oclfuse.rms_norm(np.zeros((2, 4), np.float32), out=np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="path"):
        oclfuse.rms_norm(np.zeros((2, 4), np.float32), path="fast")
    with pytest.raises(ValueError, match="act"):
        oclfuse.act_and_mul(np.zeros((2, 4), np.float32), "relu")
    with pytest.raises(ValueError, match="2d per row"):
        oclfuse.act_and_mul(np.zeros((2, 5), np.float32))


def test_bf16_helpers():
    f = np.array([1.0, -2.5, 3.14159, 1e-40, np.inf, -np.inf, np.nan, 65504.0,
                  1.00390625, 1.01171875], np.float32)
    b = oclfuse.to_bf16(f)
    assert b.dtype == np.uint16
    # ties to even: 1 + 2^-8 -> 1.0, 1 + 3 * 2^-8 -> 1 + 2^-6
    np.testing.assert_array_equal(b[[0, 1, 8, 9]], [0x3F80, 0xC020, 0x3F80, 0x3F82])
    back = oclfuse.from_bf16(b)
    assert np.isnan(back[6]) and np.isinf(back[4]) and back[5] == -np.inf
    np.testing.assert_allclose(back[:3], f[:3], rtol=2 ** -8)
