"""The operations. Each takes pyopencl.array.Array operands (used in place,
asynchronously: the call's event is attached to every array it touched) or
NumPy arrays (copied to the device and the written ones copied back before
returning). The dtype is the arrays': float32, float16, or uint16 holding
bf16 (see to_bf16/from_bf16). Every operation also takes the keywords

  path      "auto" (default: tuning database, else heuristic), "fused", "unfused"
  params    kernel parameters by name, e.g. {"VEC": 4, "WGS": 64}
  ctx       an oclfuse.Context (default: one per queue's context and device)
  queue     a pyopencl.CommandQueue (default: the arrays', else the context's)
  wait_for  pyopencl events the call must wait for

and raises OclfError (status, sentence) when the library refuses the call.
"""
import ctypes

import numpy as np

from . import _capi as C
from ._core import (Call, buf, buf_ptr, check, context_for, lib, make_choice, matrix_shape,
                    oclf_dtype, same_dtype, version)

_ACTS = {"silu": C.ACT_SILU, "gelu": C.ACT_GELU, "gelu_tanh": C.ACT_GELU_TANH,
         "fatrelu": C.ACT_FATRELU, "swiglu_oai": C.ACT_SWIGLU_OAI}
_STYLES = {"neox": C.ROPE_NEOX, "gptj": C.ROPE_GPTJ}
_INDEX = {np.dtype(np.int32): C.INT32, np.dtype(np.int64): C.INT64}
_PRECISION = {"fast": C.L2_FAST, "exact": C.L2_EXACT}
_LINEAR_ACTS = {"none": C.LINEAR_NONE, "relu": C.LINEAR_RELU, "gelu": C.LINEAR_GELU,
                "gelu_tanh": C.LINEAR_GELU_TANH, "silu": C.LINEAR_SILU}
_LAYOUTS = {"nk": C.WEIGHT_NK, "kn": C.WEIGHT_KN}
_QFORMATS = {"int8": C.QFORMAT_INT8, "int4": C.QFORMAT_INT4, "q8_0": C.QFORMAT_Q8_0,
             "q4_0": C.QFORMAT_Q4_0}
_SCALE_DTYPES = {np.dtype(np.float32): C.F32, np.dtype(np.float16): C.F16}


def _lookup(table, key, what):
    if isinstance(key, int) and not isinstance(key, bool):
        return key  # the C enum value itself (lets tests pass bad values)
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"{what} must be one of {', '.join(table)}, not {key!r}") from None


def _start(arrays, ctx, queue, wait_for):
    return Call(arrays, ctx, queue, wait_for)


def _out_like(call, out, shape, dtype):
    """The caller's `out`, or a new array; (array, whether new)."""
    if out is not None:
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(shape)}")
        same_dtype(dtype, out=out)
        return out, False
    return call.new(shape, dtype), True


def rms_norm(x, weight=None, *, eps=1e-6, out=None, path=None, params=None, ctx=None,
             queue=None, wait_for=None):
    """out = x * rsqrt(mean(x^2) + eps) * weight, row by row over a 1-D or
    2-D x (rows may be strided, elements packed). `out` may be x (in place);
    default a new array. Returns out."""
    call = _start([x, weight, out], ctx, queue, wait_for)
    rows, cols = matrix_shape(x, "x")
    same_dtype(x.dtype, weight=weight)
    out, new = _out_like(call, out, x.shape, x.dtype)
    dx = call.dev(x, write=out is x)
    do = call.dev(out, write=True, init=not new)
    dw = call.dev(weight) if weight is not None else None
    call.run(lib.oclf_rms_norm, oclf_dtype(x.dtype), rows, cols, buf(dx), buf_ptr(dw), buf(do),
             eps, make_choice(path, params))
    return out


def add_rms_norm(x, residual, weight=None, *, eps=1e-6, path=None, params=None, ctx=None,
                 queue=None, wait_for=None):
    """vLLM's fused_add_rms_norm, in place: residual <- x + residual,
    x <- rms_norm(residual). Returns (x, residual)."""
    call = _start([x, residual, weight], ctx, queue, wait_for)
    rows, cols = matrix_shape(x, "x")
    same_dtype(x.dtype, residual=residual, weight=weight)
    dx, dr = call.dev(x, write=True), call.dev(residual, write=True)
    dw = call.dev(weight) if weight is not None else None
    call.run(lib.oclf_add_rms_norm, oclf_dtype(x.dtype), rows, cols, buf(dx), buf(dr),
             buf_ptr(dw), eps, make_choice(path, params))
    return x, residual


def layer_norm(x, weight=None, bias=None, *, eps=1e-5, out=None, path=None, params=None,
               ctx=None, queue=None, wait_for=None):
    """PyTorch's LayerNorm over the last axis of a 1-D or 2-D x (biased
    variance). `out` may be x; default a new array. Returns out."""
    call = _start([x, weight, bias, out], ctx, queue, wait_for)
    rows, cols = matrix_shape(x, "x")
    same_dtype(x.dtype, weight=weight, bias=bias)
    out, new = _out_like(call, out, x.shape, x.dtype)
    dx = call.dev(x, write=out is x)
    do = call.dev(out, write=True, init=not new)
    dw = call.dev(weight) if weight is not None else None
    db = call.dev(bias) if bias is not None else None
    call.run(lib.oclf_layer_norm, oclf_dtype(x.dtype), rows, cols, buf(dx), buf_ptr(dw),
             buf_ptr(db), buf(do), eps, make_choice(path, params))
    return out


def add_layer_norm(x, residual, weight=None, bias=None, *, eps=1e-5, out=None, path=None,
                   params=None, ctx=None, queue=None, wait_for=None):
    """residual <- x + residual; out <- layer_norm(residual). `out` may be x
    (then x is overwritten); default a new array. Returns (out, residual)."""
    call = _start([x, residual, weight, bias, out], ctx, queue, wait_for)
    rows, cols = matrix_shape(x, "x")
    same_dtype(x.dtype, residual=residual, weight=weight, bias=bias)
    out, new = _out_like(call, out, x.shape, x.dtype)
    dx = call.dev(x, write=out is x)
    dr = call.dev(residual, write=True)
    do = call.dev(out, write=True, init=not new)
    dw = call.dev(weight) if weight is not None else None
    db = call.dev(bias) if bias is not None else None
    call.run(lib.oclf_add_layer_norm, oclf_dtype(x.dtype), rows, cols, buf(dx), buf(dr),
             buf_ptr(dw), buf_ptr(db), buf(do), eps, make_choice(path, params))
    return out, residual


def _norm_backward_outputs(call, x, dy, dx, dres):
    """dx's array (a new one, or the caller's: it may be dy or dres, in
    place) and its device array."""
    if dx is not None and dx is not dy and dx is not dres:
        if tuple(dx.shape) != tuple(x.shape):
            raise ValueError(f"dx has shape {tuple(dx.shape)}, expected {tuple(x.shape)}")
        same_dtype(x.dtype, dx=dx)
    new = dx is None
    out = call.new(x.shape, x.dtype) if new else dx
    return out, call.dev(out, write=True, init=not new)


def _grad_vector(call, wanted, cols):
    """A new float32 [cols] output for dw or db, or (None, None)."""
    if not wanted:
        return None, None
    g = call.new((cols,), np.float32)
    return g, call.dev(g, write=True, init=False)


def rms_norm_backward(x, dy, weight=None, *, eps=1e-6, dres=None, dx=None, weight_grad=True,
                      path=None, params=None, ctx=None, queue=None, wait_for=None):
    """RMSNorm's backward over a 1-D or 2-D x (the forward's input) and dy
    (the gradient of its output): dx = r (dy w) - r^3/cols <dy w, x> x with
    r = 1/sqrt(mean(x^2) + eps), plus `dres` when given (add_rms_norm's
    backward: x is the sum z, dres the gradient of z from its other uses,
    and dx the gradient of both of the sum's inputs). dw (float32 [cols],
    bit for bit reproducible) is sum over rows of dy x r, when weight_grad.
    `dx` may be dy or dres (in place); default a new array. Returns
    (dx, dw or None)."""
    call = _start([x, dy, weight, dres, dx], ctx, queue, wait_for)
    rows, cols = matrix_shape(x, "x")
    same_dtype(x.dtype, dy=dy, weight=weight, dres=dres)
    for name, a in (("dy", dy), ("dres", dres)):
        if a is not None and tuple(a.shape) != tuple(x.shape):
            raise ValueError(f"{name} has shape {tuple(a.shape)}, expected {tuple(x.shape)}")
    d_x, d_dy = call.dev(x), call.dev(dy, write=dx is dy)
    d_dr = call.dev(dres, write=dx is dres) if dres is not None else None
    d_w = call.dev(weight) if weight is not None else None
    out, d_out = _norm_backward_outputs(call, x, dy, dx, dres)
    dw, d_dw = _grad_vector(call, weight_grad, cols)
    call.run(lib.oclf_rms_norm_backward, oclf_dtype(x.dtype), rows, cols, buf(d_x), buf(d_dy),
             buf_ptr(d_w), buf_ptr(d_dr), buf(d_out), buf_ptr(d_dw), eps,
             make_choice(path, params))
    return out, dw


def layer_norm_backward(x, dy, weight=None, *, eps=1e-5, dx=None, weight_grad=True,
                        bias_grad=True, path=None, params=None, ctx=None, queue=None,
                        wait_for=None):
    """LayerNorm's backward over a 1-D or 2-D x and dy: with g = dy w and
    xhat the normalized x, dx = rstd (g - mean(g) - xhat mean(g xhat));
    dw = sum over rows of dy xhat (weight_grad), db = sum over rows of dy
    (bias_grad), float32 [cols], bit for bit reproducible. `dx` may be dy
    (in place); default a new array. Returns (dx, dw or None, db or None)."""
    call = _start([x, dy, weight, dx], ctx, queue, wait_for)
    rows, cols = matrix_shape(x, "x")
    same_dtype(x.dtype, dy=dy, weight=weight)
    if tuple(dy.shape) != tuple(x.shape):
        raise ValueError(f"dy has shape {tuple(dy.shape)}, expected {tuple(x.shape)}")
    d_x, d_dy = call.dev(x), call.dev(dy, write=dx is dy)
    d_w = call.dev(weight) if weight is not None else None
    out, d_out = _norm_backward_outputs(call, x, dy, dx, None)
    dw, d_dw = _grad_vector(call, weight_grad, cols)
    db, d_db = _grad_vector(call, bias_grad, cols)
    call.run(lib.oclf_layer_norm_backward, oclf_dtype(x.dtype), rows, cols, buf(d_x), buf(d_dy),
             buf_ptr(d_w), buf(d_out), buf_ptr(d_dw), buf_ptr(d_db), eps,
             make_choice(path, params))
    return out, dw, db


def act_and_mul(x, act="silu", *, act_on_second=False, threshold=0.0, alpha=1.702, limit=7.0,
                out=None, path=None, params=None, ctx=None, queue=None, wait_for=None):
    """The gated MLP's elementwise step over x [rows, 2d]: out [rows, d] =
    act(x[:, :d]) * x[:, d:] (act_on_second: x[:, :d] * act(x[:, d:])).
    act: "silu", "gelu", "gelu_tanh", "fatrelu" (threshold), "swiglu_oai"
    (interleaved gate/up pairs; alpha, limit). Returns out."""
    call = _start([x, out], ctx, queue, wait_for)
    rows, width = matrix_shape(x, "x")
    if width % 2:
        raise ValueError(f"x rows hold {width} elements: act_and_mul takes 2d per row")
    d = width // 2
    shape = (d,) if x.ndim == 1 else (rows, d)
    out, new = _out_like(call, out, shape, x.dtype)
    a = C.init_struct(C.oclf_activation())
    a.kind = _lookup(_ACTS, act, "act")
    a.act_on_second, a.threshold, a.alpha, a.limit = int(act_on_second), threshold, alpha, limit
    dx, do = call.dev(x), call.dev(out, write=True, init=not new)
    call.run(lib.oclf_act_and_mul, oclf_dtype(x.dtype), rows, d, buf(dx), buf(do), ctypes.byref(a),
             make_choice(path, params))
    return out


def act_and_mul_backward(x, dout, act="silu", *, act_on_second=False, threshold=0.0, alpha=1.702,
                         limit=7.0, out=None, path=None, params=None, ctx=None, queue=None,
                         wait_for=None):
    """The gradient of act_and_mul: x is the forward's input [rows, 2d], dout
    the gradient of its output [rows, d]; returns din [rows, 2d], the
    gradient of x (laid out as x: the activated half's, then the other's;
    interleaved pairs for "swiglu_oai"). act(x) is recomputed, nothing of
    the forward is needed. `out` may be x itself (the gradient replaces the
    saved input); default a new array."""
    call = _start([x, dout, out], ctx, queue, wait_for)
    rows, width = matrix_shape(x, "x")
    if width % 2:
        raise ValueError(f"x rows hold {width} elements: act_and_mul_backward takes 2d per row")
    d = width // 2
    grows, gwidth = matrix_shape(dout, "dout")
    if (grows, gwidth) != (rows, d) or dout.ndim != x.ndim:
        raise ValueError(f"dout is {dout.shape}; x {x.shape} needs {(d,) if x.ndim == 1 else (rows, d)}")
    same_dtype(x.dtype, dout=dout)
    out, new = _out_like(call, out, x.shape, x.dtype)
    a = C.init_struct(C.oclf_activation())
    a.kind = _lookup(_ACTS, act, "act")
    a.act_on_second, a.threshold, a.alpha, a.limit = int(act_on_second), threshold, alpha, limit
    dx = call.dev(x, write=out is x)
    dg = call.dev(dout)
    do = call.dev(out, write=True, init=not new)
    call.run(_fn("oclf_act_and_mul_backward"), oclf_dtype(x.dtype), rows, d, buf(dx), buf(dg),
             buf(do), ctypes.byref(a), make_choice(path, params))
    return out


def _rope(call, positions, cos_sin, style, head_dim):
    r = C.init_struct(C.oclf_rope())
    r.style = _lookup(_STYLES, style, "style")
    r.head_dim = head_dim
    if cos_sin.ndim != 2:
        raise ValueError("cos_sin must be 2-D: [max_pos, rot_dim]")
    r.max_pos, r.rot_dim = cos_sin.shape
    try:
        r.pos_type = _INDEX[np.dtype(positions.dtype)]
    except KeyError:
        raise TypeError(f"positions must be int32 or int64, not {positions.dtype}") from None
    r.cache_dtype = oclf_dtype(cos_sin.dtype)
    r.positions = buf(call.dev(positions))
    r.cos_sin = buf(call.dev(cos_sin))
    return r


def _fn(name):
    """The library function `name`; NotImplementedError when the loaded
    library is older than this package and lacks it."""
    if name in C.MISSING:
        raise NotImplementedError(f"the loaded liboclfuse ({version()}) has no {name}")
    return getattr(lib, name)


def _heads(call, a, name, write=True):
    """oclf_heads of a [tokens, heads, head_dim] array (a 2-D array is one head
    per token): token stride, head count and head stride from its strides.
    `write`: the call writes these heads."""
    if a.ndim == 2:
        a3 = (a.shape[0], 1, a.shape[1])
    elif a.ndim == 3:
        a3 = a.shape
    else:
        raise ValueError(f"{name} must be [tokens, heads, head_dim] or [tokens, head_dim]")
    d = call.dev(a, write=write)
    h = C.init_struct(C.oclf_heads())
    h.buf = buf(d)
    h.count = a3[1]
    if a.ndim == 3:
        if d.strides[2] != d.dtype.itemsize:
            raise ValueError(f"{name}: the elements of a head must be packed")
        h.head_stride = d.strides[1] // d.dtype.itemsize if a3[1] > 1 else 0
    return h, a3


def rotary_embedding(q, positions, cos_sin, k=None, *, style="neox", path=None, params=None,
                     ctx=None, queue=None, wait_for=None):
    """Rotates q (and k) in place: [tokens, heads, head_dim] arrays (views of
    a packed qkv are fine), positions int32/int64 [tokens], cos_sin
    [max_pos, rot_dim] (cos half, then sin half; any storage dtype). style
    "neox" (rotate-half) or "gptj" (interleaved). Returns q, or (q, k)."""
    call = _start([q, k, positions, cos_sin], ctx, queue, wait_for)
    same_dtype(q.dtype, k=k)
    hq, shape = _heads(call, q, "q")
    hk = _heads(call, k, "k")[0] if k is not None else None
    r = _rope(call, positions, cos_sin, style, shape[2])
    call.run(lib.oclf_rotary_embedding, oclf_dtype(q.dtype), shape[0], ctypes.byref(r), hq,
             None if hk is None else ctypes.byref(hk), make_choice(path, params))
    return q if k is None else (q, k)


def rotary_embedding_backward(dq, positions, cos_sin, dk=None, *, style="neox", path=None,
                              params=None, ctx=None, queue=None, wait_for=None):
    """The gradient of rotary_embedding, in place: dq (and dk), the gradients
    of the rotated heads, become those of the heads before the rotation
    (the inverse rotation). Arguments as rotary_embedding's. Returns dq, or
    (dq, dk)."""
    call = _start([dq, dk, positions, cos_sin], ctx, queue, wait_for)
    same_dtype(dq.dtype, dk=dk)
    hq, shape = _heads(call, dq, "dq")
    hk = _heads(call, dk, "dk")[0] if dk is not None else None
    r = _rope(call, positions, cos_sin, style, shape[2])
    call.run(_fn("oclf_rotary_embedding_backward"), oclf_dtype(dq.dtype), shape[0],
             ctypes.byref(r), hq, None if hk is None else ctypes.byref(hk),
             make_choice(path, params))
    return dq if dk is None else (dq, dk)


def qk_norm_rope(qkv, positions, cos_sin, *, nq, nk, q_weight=None, k_weight=None, eps=1e-6,
                 style="neox", path=None, params=None, ctx=None, queue=None, wait_for=None):
    """Per-head RMSNorm then RoPE, in place, on a packed qkv [tokens, heads,
    head_dim]: the first nq heads are Q (q_weight), the next nk K (k_weight),
    the rest V (untouched). Returns qkv."""
    call = _start([qkv, positions, cos_sin, q_weight, k_weight], ctx, queue, wait_for)
    if qkv.ndim != 3:
        raise ValueError("qkv must be [tokens, heads, head_dim]")
    tokens, heads, head_dim = qkv.shape
    same_dtype(qkv.dtype, q_weight=q_weight, k_weight=k_weight)
    d = call.dev(qkv, write=True)
    if d.strides[1:] != (head_dim * d.dtype.itemsize, d.dtype.itemsize):
        raise ValueError("qkv: the heads of a token must be packed")
    r = _rope(call, positions, cos_sin, style, head_dim)
    qw = buf_ptr(call.dev(q_weight)) if q_weight is not None else None
    kw = buf_ptr(call.dev(k_weight)) if k_weight is not None else None
    call.run(lib.oclf_qk_norm_rope, oclf_dtype(qkv.dtype), tokens, nq, nk, max(heads - nq - nk, 0),
             ctypes.byref(r), buf(d), qw, kw, eps, make_choice(path, params))
    return qkv


def _kv_cache(call, k_cache, v_cache, write):
    """oclf_kv_cache of two packed [num_blocks, block_size, heads, head_dim]
    arrays (views of one buffer are fine)."""
    for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
        if a.ndim != 4:
            raise ValueError(f"{name} must be [num_blocks, block_size, heads, head_dim]")
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} "
                         "differ in shape")
    same_dtype(k_cache.dtype, v_cache=v_cache)
    c = C.init_struct(C.oclf_kv_cache())
    for name, a, field in (("k_cache", k_cache, "k"), ("v_cache", v_cache, "v")):
        d = call.dev(a, write=write)
        if not d.flags.c_contiguous:
            raise ValueError(f"{name} must be packed (C-contiguous)")
        b = buf(d, rows_stride=False)
        setattr(c, field, b.mem)
        setattr(c, field + "_offset", b.offset)
    c.num_blocks, c.block_size, c.heads, c.head_dim = k_cache.shape
    return c


def _index(call, a, name, dtype):
    """A device index array of `dtype` (int32 offsets and tables, int64
    slots): NumPy arrays are converted, device arrays must already be."""
    if isinstance(a, (list, tuple)) or (isinstance(a, np.ndarray) and a.dtype != dtype):
        a = np.asarray(a, dtype=dtype)
    if np.dtype(a.dtype) != np.dtype(dtype):
        raise TypeError(f"{name} must be {np.dtype(dtype)}, not {a.dtype}")
    return a, call.dev(a)


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _attention_options(call, scale, causal, window, softcap, alibi_slopes, sinks, lse,
                       dropout):
    """oclf_attention_options and the oclf_buf objects its pointers keep."""
    o = C.init_struct(C.oclf_attention_options())
    lib.oclf_attention_options_init(ctypes.byref(o))
    o.scale, o.causal, o.softcap = scale, int(causal), softcap
    o.dropout_p, o.dropout_seed, o.dropout_offset = dropout
    if window is not None:
        left, right = window
        o.window = 1
        o.window_left = -1 if left is None else left
        o.window_right = -1 if right is None else right
    keep = []
    for field, a in (("alibi_slopes", alibi_slopes), ("sinks", sinks), ("lse", lse)):
        if a is None:
            continue
        if np.dtype(a.dtype) != np.float32:
            raise TypeError(f"{field} must be float32, not {a.dtype}")
        p = buf_ptr(call.dev(a, write=field == "lse", init=field != "lse"))
        keep.append(p)
        setattr(o, field, p)
    return o, keep


def _max_seqlen(cu, given):
    if given is not None:
        return given
    h = _host(cu).astype(np.int64)
    return int(np.diff(h).max()) if h.size > 1 else 0


def attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, *, scale=0.0,
              causal=False, window=None, softcap=0.0, alibi_slopes=None, sinks=None,
              dropout_p=0.0, dropout_seed=0, dropout_offset=0, return_lse=False, out=None,
              path=None, params=None, ctx=None, queue=None, wait_for=None):
    """FlashAttention-style varlen attention: q [Tq, Hq, D], k and v [Tk, Hk,
    D] (Hq % Hk == 0: GQA, MQA; head views of a packed qkv are fine),
    cu_seqlens_q / cu_seqlens_k int32 [batch + 1] offsets from 0 (sequence b
    holds the tokens [cu[b], cu[b + 1])). max_seqlen_q: the most queries of a
    sequence (None: computed from cu_seqlens_q, which reads a device array).
    scale 0 means 1/sqrt(D); causal aligns bottom-right; window (left,
    right) keeps the keys within left before and right after the diagonal
    (-1 or None: unbounded); softcap > 0 caps scores with tanh; alibi_slopes
    and sinks float32 [Hq]; dropout_p in [0, 1) drops probabilities with
    the library's Philox mask for (dropout_seed, dropout_offset), the same on
    every path. Returns out [Tq, Hq, D] (default a new array), or (out, lse
    [Hq, Tq] float32, taken before dropout) with return_lse."""
    call = _start([q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, out], ctx, queue,
                  wait_for)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 3:
            raise ValueError(f"{name} must be [tokens, heads, head_dim]")
    same_dtype(q.dtype, k=k, v=v)
    tq, hq, d = q.shape
    if k.shape[2] != d or v.shape[2] != d:
        raise ValueError(f"q, k and v have head dims {d}, {k.shape[2]}, {v.shape[2]}")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    cu_seqlens_q, dcq = _index(call, cu_seqlens_q, "cu_seqlens_q", np.int32)
    cu_seqlens_k, dck = _index(call, cu_seqlens_k, "cu_seqlens_k", np.int32)
    batch = cu_seqlens_q.shape[0] - 1
    if cu_seqlens_k.shape[0] != batch + 1:
        raise ValueError("cu_seqlens_q and cu_seqlens_k hold different batch sizes")
    out, new = _out_like(call, out, q.shape, q.dtype)
    lse = call.new((hq, tq), np.float32) if return_lse else None
    opts, keep = _attention_options(call, scale, causal, window, softcap, alibi_slopes, sinks,
                                    lse, (dropout_p, dropout_seed, dropout_offset))
    hq_, _ = _heads(call, q, "q", write=False)
    hk_, _ = _heads(call, k, "k", write=False)
    hv_, _ = _heads(call, v, "v", write=False)
    do = call.dev(out, write=True, init=not new)
    ho_, _ = _heads(call, out, "out")
    call.run(_fn("oclf_attention"), oclf_dtype(q.dtype), batch, d, tq, k.shape[0],
             _max_seqlen(cu_seqlens_q, max_seqlen_q), buf(dcq), buf(dck), hq_, hk_, hv_, ho_,
             ctypes.byref(opts), make_choice(path, params))
    del keep, do
    return (out, lse) if return_lse else out


def attention_paged(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables,
                    max_seqlen_q=None, *, scale=0.0, causal=False, window=None, softcap=0.0,
                    alibi_slopes=None, sinks=None, dropout_p=0.0, dropout_seed=0,
                    dropout_offset=0, return_lse=False, out=None, path=None, params=None,
                    ctx=None, queue=None, wait_for=None):
    """Attention over a paged KV cache (decode, chunked prefill and mixed
    batches): q [Tq, Hq, D]; k_cache and v_cache [num_blocks, block_size,
    Hk, D] (packed); cu_seqlens_q int32 [batch + 1]; seq_lens int32 [batch]
    (sequence b's keys, the new tokens included: its queries are the last of
    them); block_tables int32 [batch, max_blocks] (rows may be strided).
    Options as attention(); params adds PART (keys per split-KV partition, 0:
    no split). Returns out, or (out, lse) with return_lse."""
    call = _start([q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, alibi_slopes,
                   sinks, out], ctx, queue, wait_for)
    if q.ndim != 3:
        raise ValueError("q must be [tokens, heads, head_dim]")
    same_dtype(q.dtype, k_cache=k_cache, v_cache=v_cache)
    tq, hq, d = q.shape
    cache = _kv_cache(call, k_cache, v_cache, write=False)
    if cache.head_dim != d:
        raise ValueError(f"q heads of {d} elements, cache heads of {cache.head_dim}")
    cu_seqlens_q, dcq = _index(call, cu_seqlens_q, "cu_seqlens_q", np.int32)
    seq_lens, dsl = _index(call, seq_lens, "seq_lens", np.int32)
    block_tables, dbt = _index(call, block_tables, "block_tables", np.int32)
    batch = seq_lens.shape[0]
    if cu_seqlens_q.shape[0] != batch + 1:
        raise ValueError(f"cu_seqlens_q holds {cu_seqlens_q.shape[0]} offsets for {batch} "
                         "sequences")
    if block_tables.ndim != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be [{batch}, max_blocks]")
    out, new = _out_like(call, out, q.shape, q.dtype)
    lse = call.new((hq, tq), np.float32) if return_lse else None
    opts, keep = _attention_options(call, scale, causal, window, softcap, alibi_slopes, sinks,
                                    lse, (dropout_p, dropout_seed, dropout_offset))
    hq_, _ = _heads(call, q, "q", write=False)
    do = call.dev(out, write=True, init=not new)
    ho_, _ = _heads(call, out, "out")
    call.run(_fn("oclf_attention_paged"), oclf_dtype(q.dtype), batch, tq,
             _max_seqlen(cu_seqlens_q, max_seqlen_q), block_tables.shape[1], buf(dcq), buf(dsl),
             buf(dbt), hq_, ctypes.byref(cache), ho_, ctypes.byref(opts),
             make_choice(path, params))
    del keep, do
    return (out, lse) if return_lse else out


def kv_cache_write(k, v, k_cache, v_cache, slot_mapping, *, path=None, params=None, ctx=None,
                   queue=None, wait_for=None):
    """Writes new K and V heads ([tokens, Hk, D], views fine) into a paged
    cache ([num_blocks, block_size, Hk, D] each): token t goes to slot
    slot_mapping[t] (int64; block s // block_size, position s % block_size;
    s < 0 skips the token). params: the copy's LAYOUT, WGS and VEC. Returns
    (k_cache, v_cache)."""
    call = _start([k, v, k_cache, v_cache, slot_mapping], ctx, queue, wait_for)
    same_dtype(k_cache.dtype, k=k, v=v)
    cache = _kv_cache(call, k_cache, v_cache, write=True)
    hk_, shape = _heads(call, k, "k", write=False)
    hv_, _ = _heads(call, v, "v", write=False)
    slot_mapping, dsm = _index(call, slot_mapping, "slot_mapping", np.int64)
    call.run(_fn("oclf_kv_cache_write"), oclf_dtype(k_cache.dtype), shape[0], hk_, hv_, buf(dsm),
             ctypes.byref(cache), make_choice(path, params))
    return k_cache, v_cache


def qk_norm_rope_cache(qkv, positions, cos_sin, slot_mapping, k_cache, v_cache, *, nq, nk,
                       q_weight=None, k_weight=None, eps=1e-6, style="neox", path=None,
                       params=None, ctx=None, queue=None, wait_for=None):
    """qk_norm_rope on a packed qkv [tokens, nq + nk + nv, head_dim], which
    also writes the rotated K heads and the V heads into a paged cache
    (k_cache, v_cache [num_blocks, block_size, nk, head_dim]; nv = nk) at
    slot_mapping (int64 [tokens], s < 0 skipped). Returns (qkv, k_cache,
    v_cache)."""
    call = _start([qkv, positions, cos_sin, slot_mapping, k_cache, v_cache, q_weight,
                   k_weight], ctx, queue, wait_for)
    if qkv.ndim != 3:
        raise ValueError("qkv must be [tokens, heads, head_dim]")
    tokens, heads, head_dim = qkv.shape
    same_dtype(qkv.dtype, q_weight=q_weight, k_weight=k_weight, k_cache=k_cache,
               v_cache=v_cache)
    d = call.dev(qkv, write=True)
    if d.strides[1:] != (head_dim * d.dtype.itemsize, d.dtype.itemsize):
        raise ValueError("qkv: the heads of a token must be packed")
    cache = _kv_cache(call, k_cache, v_cache, write=True)
    r = _rope(call, positions, cos_sin, style, head_dim)
    slot_mapping, dsm = _index(call, slot_mapping, "slot_mapping", np.int64)
    qw = buf_ptr(call.dev(q_weight)) if q_weight is not None else None
    kw = buf_ptr(call.dev(k_weight)) if k_weight is not None else None
    call.run(_fn("oclf_qk_norm_rope_cache"), oclf_dtype(qkv.dtype), tokens, nq, nk,
             max(heads - nq - nk, 0), ctypes.byref(r), buf(d), qw, kw, buf(dsm),
             ctypes.byref(cache), eps, make_choice(path, params))
    return qkv, k_cache, v_cache


def linear(x, weight, bias=None, residual=None, *, layout="nk", prologue="none", act="none",
           alpha=1.0, beta=1.0, residual_before_act=False, out=None, path=None, params=None,
           ctx=None, queue=None, wait_for=None):
    """A linear layer with its prologue and epilogue in one GEMM:
    out [M, N] = epilogue(prologue(x) W^T) for x [M, K] (a 1-D x is one row)
    and weight [N, K] (layout "nk", PyTorch's nn.Linear.weight) or [K, N]
    (layout "kn": x W). prologue and act: "none", "relu", "gelu",
    "gelu_tanh", "silu". The epilogue, in order: t = alpha * acc; t += bias
    [N]; then residual_before_act: t += beta * residual [M, N], t = act(t);
    else t = act(t), t += beta * residual. `out` may be residual (in place);
    default a new array. Returns out."""
    call = _start([x, weight, bias, residual, out], ctx, queue, wait_for)
    m, k = matrix_shape(x, "x")
    lay = _lookup(_LAYOUTS, layout, "layout")
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D, not {weight.ndim}-D")
    n, wk = (weight.shape[1], weight.shape[0]) if lay == C.WEIGHT_KN else weight.shape
    if wk != k:
        raise ValueError(f"weight {tuple(weight.shape)} ({layout}) does not take x rows of {k}")
    same_dtype(x.dtype, weight=weight, bias=bias, residual=residual)
    shape = (n,) if x.ndim == 1 else (m, n)
    if residual is not None and tuple(residual.shape) != shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)}, expected {shape}")
    out, new = _out_like(call, out, shape, x.dtype)
    e = _epilogue(call, bias, residual, out, act, alpha, beta, residual_before_act)
    dx, dw = call.dev(x), call.dev(weight)
    do = call.dev(out, write=True, init=not new)
    call.run(lib.oclf_linear, oclf_dtype(x.dtype), m, n, k, buf(dx), buf(dw), buf(do), lay,
             _lookup(_LINEAR_ACTS, prologue, "prologue"), ctypes.byref(e),
             make_choice(path, params))
    return out


def _epilogue(call, bias, residual, out, act, alpha, beta, residual_before_act):
    """oclf_linear_epilogue of linear and linear_q, and the oclf_buf pointers it
    holds (kept by the caller until the call)."""
    e = C.init_struct(C.oclf_linear_epilogue())
    lib.oclf_linear_epilogue_init(ctypes.byref(e))
    e.alpha, e.beta = alpha, beta
    e.residual_before_act = int(residual_before_act)
    e.act = _lookup(_LINEAR_ACTS, act, "act")
    e.bias = buf_ptr(call.dev(bias)) if bias is not None else None
    e.residual = (buf_ptr(call.dev(residual, write=out is residual))
                  if residual is not None else None)
    return e


def _qformat(format):
    return _lookup(_QFORMATS, format.lower() if isinstance(format, str) else format, "format")


def _qlayout(fmt, group, k):
    """(bytes a row of q, scale columns, its group) of a weight of K columns,
    or None where the library refuses the format, group or K (its sentence
    says why). Scale columns: 0 for one scale a row, None for no scale array
    (GGUF)."""
    gguf = fmt in (C.QFORMAT_Q8_0, C.QFORMAT_Q4_0)
    if gguf:
        if group not in (0, 32) or k % 32:
            return None
        return (k // 32 * (34 if fmt == C.QFORMAT_Q8_0 else 18), None, 32)
    if fmt == C.QFORMAT_INT8 and group == 0:
        return (k, 0, 0)
    if fmt not in (C.QFORMAT_INT8, C.QFORMAT_INT4) or group not in (32, 64, 128) or k % group:
        return None
    return (k if fmt == C.QFORMAT_INT8 else k // 2, k // group, group)


def _qrows(q, n, row_bytes, name):
    """N of a quantized array q (2-D [N, row_bytes] bytes; 1-D: packed rows),
    checked against n where given (row_bytes None: not checked)."""
    if q.ndim == 2:
        rows = q.shape[0]
        if n is not None and n != rows:
            raise ValueError(f"{name} has {rows} rows, n is {n}")
        if row_bytes is not None and q.shape[1] != row_bytes:
            raise ValueError(f"{name} rows hold {q.shape[1]} bytes, the format takes "
                             f"{row_bytes} a row")
        return rows
    if q.ndim != 1:
        raise ValueError(f"{name} must be 2-D [N, row bytes] or 1-D, not {q.ndim}-D")
    if n is None:
        n = q.shape[0] // row_bytes if row_bytes else 1
    if row_bytes is not None and q.shape[0] != n * row_bytes:
        raise ValueError(f"{name} holds {q.shape[0]} bytes, {n} rows of the format take "
                         f"{n * row_bytes}")
    return n


def _qweight(call, fmt, group, q, scale, zero, n, k):
    """(oclf_qweight, N, what it points to) of device operands q, scale and
    zero, after the Python-side checks (dtypes, shapes) of a format, group
    and K the library takes; the library checks the rest and says why it
    refuses a format, group or K."""
    lay = _qlayout(fmt, group, k)
    if np.dtype(q.dtype) not in (np.dtype(np.uint8), np.dtype(np.int8)) or (
            np.dtype(q.dtype) == np.int8 and fmt != C.QFORMAT_INT8):
        raise TypeError(f"q must be uint8 bytes (int8 for INT8), not {q.dtype}")
    n = _qrows(q, n, lay and lay[0], "q")
    w = C.init_struct(C.oclf_qweight())
    w.format, w.group = fmt, group
    dq = call.dev(q)
    w.q = buf(dq) if q.ndim == 2 else buf(dq, rows_stride=False)
    if scale is not None:
        try:
            w.scale_dtype = _SCALE_DTYPES[np.dtype(scale.dtype)]
        except KeyError:
            raise TypeError(f"scale must be float16 or float32, not {scale.dtype}") from None
        if lay is not None and lay[1] is not None:
            want = (n,) if lay[1] == 0 else (n, lay[1])
            if tuple(scale.shape) != want:
                raise ValueError(f"scale has shape {tuple(scale.shape)}, expected {want}")
        w.scale = buf(call.dev(scale))
    keep = None
    if zero is not None:
        if np.dtype(zero.dtype) != np.uint8:
            raise TypeError(f"zero must be uint8, not {zero.dtype}")
        if lay is not None and lay[1] and tuple(zero.shape) != (n, lay[1]):
            raise ValueError(f"zero has shape {tuple(zero.shape)}, expected {(n, lay[1])}")
        keep = w.zero = buf_ptr(call.dev(zero))
    return w, n, keep


def linear_q(x, q, scale=None, *, format, n=None, group=0, zero=None, bias=None,
             residual=None, prologue="none", act="none", alpha=1.0, beta=1.0,
             residual_before_act=False, out=None, path=None, params=None, ctx=None, queue=None,
             wait_for=None):
    """linear with a quantized weight W [N, K], dequantized where the kernel
    loads it: out [M, N] = epilogue(prologue(x) W^T) for x [M, K] (a 1-D x
    is one row; K is x's). format and the arrays (see oclfuse.h, "Quantized
    weights", and dequantize for the formulas):

      "int8"  q int8 (or uint8) [N, K]; group 0: scale [N] float32 or
              float16, w = q s[n]; group 32, 64 or 128: scale float16
              [N, K/group].
      "int4"  q uint8 [N, K/2], weight 2i the low nibble of byte i, 2i + 1
              the high one; group 32, 64 or 128, scale float16 [N,
              K/group]; zero uint8 [N, K/group]: w = (q - z) s, without
              zero points w = (q - 8) s.
      "q8_0", "q4_0"  ggml's blocks of 32 as GGUF stores them, q uint8 [N,
              K/32 * 34] or [N, K/32 * 18] (scales inside; scale None).

    n: N, default q's rows (a 1-D q holds packed rows: N from its length).
    Python-side mistakes (dtypes, shapes) are TypeError/ValueError; the
    library's refusals (a group the format does not take, K not a multiple
    of the group, ...) OclfError with its sentence. Everything else as
    linear: prologue, act, alpha, bias [N], residual [M, N], beta,
    residual_before_act; `out` may be the residual. Returns out."""
    fmt = _qformat(format)
    call = _start([x, q, scale, zero, bias, residual, out], ctx, queue, wait_for)
    m, k = matrix_shape(x, "x")
    same_dtype(x.dtype, bias=bias, residual=residual)
    w, n, keep = _qweight(call, fmt, group, q, scale, zero, n, k)
    shape = (n,) if x.ndim == 1 else (m, n)
    if residual is not None and tuple(residual.shape) != shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)}, expected {shape}")
    out, new = _out_like(call, out, shape, x.dtype)
    e = _epilogue(call, bias, residual, out, act, alpha, beta, residual_before_act)
    dx = call.dev(x)
    do = call.dev(out, write=True, init=not new)
    call.run(_fn("oclf_linear_q"), oclf_dtype(x.dtype), m, n, k, buf(dx), ctypes.byref(w), buf(do),
             _lookup(_LINEAR_ACTS, prologue, "prologue"), ctypes.byref(e),
             make_choice(path, params))
    del keep
    return out


def qweight_convert(q, *, format, k, n=None, q_out=None, scale_out=None, path=None, params=None,
                    ctx=None, queue=None, wait_for=None):
    """Rewrites a GGUF weight (q uint8 [N, K/32 * 34] for format "q8_0", [N,
    K/32 * 18] for "q4_0") on the device into the separate arrays linear_q
    also takes, the same values bit for bit: "q8_0" into "int8" group 32 (q
    int8 [N, K], scale float16 [N, K/32]), "q4_0" into "int4" group 32
    without zero points (q uint8 [N, K/2], scale float16 [N, K/32]). q_out
    and scale_out: arrays to write (default new ones). Returns (q_out,
    scale_out), to pass as linear_q(x, q_out, scale_out, format=..., group=32)."""
    fmt = _qformat(format)
    call = _start([q, q_out, scale_out], ctx, queue, wait_for)
    if fmt in (C.QFORMAT_Q8_0, C.QFORMAT_Q4_0):
        src, n, _ = _qweight(call, fmt, 0, q, None, None, n, k)
    else:  # the library's sentence on a source it does not convert
        src = C.init_struct(C.oclf_qweight())
        src.format, src.q = fmt, buf(call.dev(q))
        n = q.shape[0] if n is None else n
    to_int8 = fmt != C.QFORMAT_Q4_0
    shapes = ((n, k) if to_int8 else (n, k // 2), (n, k // 32))
    dtypes = (np.int8 if to_int8 else np.uint8, np.float16)
    outs = []
    for name, a, shp, dt in (("q_out", q_out, shapes[0], dtypes[0]),
                             ("scale_out", scale_out, shapes[1], dtypes[1])):
        if a is None:
            a = call.new(shp, dt)
        elif tuple(a.shape) != shp or np.dtype(a.dtype) != np.dtype(dt):
            raise ValueError(f"{name} must be {np.dtype(dt)} {shp}, not {a.dtype} "
                             f"{tuple(a.shape)}")
        outs.append(a)
    dst = C.init_struct(C.oclf_qweight())
    dst.format = C.QFORMAT_INT8 if to_int8 else C.QFORMAT_INT4
    dst.group, dst.scale_dtype = 32, C.F16
    dst.q = buf(call.dev(outs[0], write=True, init=False))
    dst.scale = buf(call.dev(outs[1], write=True, init=False))
    call.run(_fn("oclf_qweight_convert"), n, k, ctypes.byref(src), ctypes.byref(dst),
             make_choice(path, params))
    return tuple(outs)


# ---------------------------------------------------------------------------
# Quantized weights on the host, in NumPy: the header's formulas (a reference
# for linear_q) and ggml's reference quantizers for Q8_0 and Q4_0.

def _f16_bytes(b):
    """float64 values of little-endian f16 in the last axis' byte pairs."""
    return np.ascontiguousarray(b).view("<f2")[..., 0].astype(np.float64)


def dequantize(q, scale=None, *, format, k, group=0, zero=None):
    """W [N, K] as float64 from a quantized weight as linear_q takes it (NumPy
    or PyOpenCL arrays, read back), by the header's formulas:
    "int8": w = q s (s[n] with group 0, s[n, c / group] else); "int4": w =
    (q - z) s, z the zero point or 8; "q8_0": w = q d; "q4_0": w = (nibble
    - 8) d, d each block's f16. An infinite or NaN scale gives what the
    formula gives."""
    fmt = _qformat(format)
    q = _host(q)
    lay = _qlayout(fmt, group, k)
    if lay is None:
        raise ValueError(f"format {format!r} does not take group {group} with K = {k}")
    row_bytes, scols, g = lay
    q = q.reshape(-1, row_bytes) if q.ndim == 1 and row_bytes else q
    n = _qrows(q, None, row_bytes, "q")
    q = np.ascontiguousarray(q).view(np.uint8).reshape(n, row_bytes)
    with np.errstate(invalid="ignore", over="ignore"):
        if scols is None:  # GGUF: [N, blocks, bytes]
            blocks = q.reshape(n, k // 32, row_bytes * 32 // k if k else 0)
            d = _f16_bytes(blocks[..., :2])[..., None]
            body = blocks[..., 2:]
            if fmt == C.QFORMAT_Q8_0:
                w = body.view(np.int8).astype(np.float64) * d
            else:
                nib = np.concatenate([body & 15, body >> 4], axis=-1).astype(np.float64)
                w = (nib - 8.0) * d
            return w.reshape(n, k)
        if scale is None:
            raise ValueError("INT8 and INT4 weights take a scale array")
        s = _host(scale)
        if np.dtype(s.dtype) not in _SCALE_DTYPES:
            raise TypeError(f"scale must be float16 or float32, not {s.dtype}")
        want = (n,) if scols == 0 else (n, scols)
        if tuple(s.shape) != want:
            raise ValueError(f"scale has shape {tuple(s.shape)}, expected {want}")
        s = s.astype(np.float64)
        s = s[:, None] if scols == 0 else np.repeat(s, g, axis=1)
        if fmt == C.QFORMAT_INT8:
            return q.view(np.int8).astype(np.float64) * s
        nib = np.empty((n, k), np.float64)
        nib[:, 0::2] = q & 15
        nib[:, 1::2] = q >> 4
        z = 8.0
        if zero is not None:
            z = _host(zero)
            if tuple(z.shape) != (n, scols):
                raise ValueError(f"zero has shape {tuple(z.shape)}, expected {(n, scols)}")
            z = np.repeat(z.astype(np.float64), g, axis=1)
        return (nib - z) * s


def _gguf_blocks(w):
    """float32 [N, K/32, 32] blocks of a float array [N, K] (1-D: one row)."""
    w = np.asarray(w, dtype=np.float32)
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2 or w.shape[1] % 32:
        raise ValueError(f"w must be [N, K] with K a multiple of 32, not {w.shape}")
    return w.reshape(w.shape[0], w.shape[1] // 32, 32)


def _gguf_pack(d, body):
    """uint8 [N, K/32 * (2 + body bytes)]: each block's f16 d, then its body."""
    n, nb = d.shape
    out = np.empty((n, nb, 2 + body.shape[-1]), np.uint8)
    out[..., :2] = d.astype("<f2").view(np.uint8).reshape(n, nb, 2)
    out[..., 2:] = body
    return out.reshape(n, -1)


def quantize_q8_0(w):
    """ggml's quantize_row_q8_0_ref over each row of a float array w [N, K]
    (K a multiple of 32; 1-D: one row), in float32 as ggml: per block of 32,
    d = amax / 127, q = round(x / d) (half away from zero), d stored as f16.
    Returns the GGUF bytes, uint8 [N, K/32 * 34]."""
    x = _gguf_blocks(w)
    d = np.abs(x).max(axis=-1, initial=np.float32(0)) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    x0 = (x * inv[..., None]).astype(np.float64)  # exact: roundf's argument
    q = (np.sign(x0) * np.floor(np.abs(x0) + 0.5)).astype(np.int8)
    return _gguf_pack(d, q.view(np.uint8))


def quantize_q4_0(w):
    """ggml's quantize_row_q4_0_ref over each row of a float array w [N, K]
    (K a multiple of 32; 1-D: one row), in float32 as ggml: per block of 32,
    max the first value of the largest magnitude (its sign kept), d = max /
    -8 (negative for a positive max, -0.0 for an all-zero block), weight j
    stored as min(15, int(x / d + 8.5)), weights j and j + 16 in the low and
    high nibble of byte j. Returns the GGUF bytes, uint8 [N, K/32 * 18]."""
    x = _gguf_blocks(w)
    a = np.abs(x)
    amax = a.max(axis=-1, initial=np.float32(0))
    first = np.take_along_axis(x, a.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    mx = np.where(amax > 0, first, np.float32(0)).astype(np.float32)
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    x0 = (x * inv[..., None] + np.float32(8.5)).astype(np.float32)
    nib = np.minimum(15, np.trunc(x0).astype(np.int64)).astype(np.uint8)
    return _gguf_pack(d, nib[..., :16] | (nib[..., 16:] << 4))


def _l2_options(precision, max_temp_bytes, x_norms=None, allowed=None):
    o = C.init_struct(C.oclf_l2_topk_options())
    lib.oclf_l2_topk_options_init(ctypes.byref(o))
    o.precision = _lookup(_PRECISION, precision, "precision")
    o.max_temp_bytes = max_temp_bytes
    o.x_norms, o.allowed = x_norms, allowed
    return o


def pack_mask(allowed):
    """A boolean array of N rows -> the library's bitmask (bit i % 8 of byte
    i / 8), as uint8."""
    return np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")


def l2_topk(q, x, k, *, precision="fast", max_temp_bytes=0, x_norms=None, allowed=None,
            dist=None, idx=None, path=None, params=None, ctx=None, queue=None, wait_for=None):
    """The k rows of x [N, D] (f32, f16 or bf16 storage) nearest each query
    of q [nq, D] (float32) in squared L2 distance: (dist [nq, k] float32
    ascending, idx [nq, k] int64), padded with -1 / FLT_MAX beyond N.
    precision "fast" (expansion) or "exact" (direct sum); x_norms float32
    [N] precomputed |x|^2; allowed a uint8 bitmask (see pack_mask) or a
    boolean NumPy array [N]."""
    if allowed is not None and isinstance(allowed, np.ndarray) and allowed.dtype == bool:
        allowed = pack_mask(allowed)
    call = _start([q, x, x_norms, allowed, dist, idx], ctx, queue, wait_for)
    nq, d = matrix_shape(q, "q")
    n = x.shape[0] if x.ndim == 2 else 1
    if q.dtype != np.float32:
        raise TypeError(f"queries must be float32, not {q.dtype}")
    if x.shape[-1] != d:
        raise ValueError(f"x rows have {x.shape[-1]} elements, queries {d}")
    dist, new_d = _out_like(call, dist, (nq, k), np.float32)
    if idx is not None and idx.dtype != np.int64:
        raise TypeError(f"idx must be int64, not {idx.dtype}")
    idx, new_i = _out_like(call, idx, (nq, k), np.int64)
    nb = buf_ptr(call.dev(x_norms)) if x_norms is not None else None
    ab = buf_ptr(call.dev(allowed)) if allowed is not None else None
    o = _l2_options(precision, max_temp_bytes, nb, ab)
    dq, dx = call.dev(q), call.dev(x)
    dd = call.dev(dist, write=True, init=not new_d)
    di = call.dev(idx, write=True, init=not new_i)
    call.run(lib.oclf_l2_topk, oclf_dtype(x.dtype), nq, n, d, k, buf(dq), buf(dx), buf(dd),
             buf(di), ctypes.byref(o), make_choice(path, params))
    return dist, idx


class Shard:
    """One piece of a sharded database for l2_topk_sharded: x a
    pyopencl.array.Array [n, D] whose row i has global id first_id + i;
    optional x_norms, allowed, path and params as in l2_topk; ctx and queue
    default to those of x."""

    def __init__(self, x, first_id, *, x_norms=None, allowed=None, path=None, params=None,
                 ctx=None, queue=None):
        self.x, self.first_id = x, first_id
        self.x_norms, self.allowed = x_norms, allowed
        self.path, self.params = path, params
        self.queue = queue if queue is not None else x.queue
        self.ctx = ctx if ctx is not None else context_for(self.queue)


def l2_topk_sharded(shards, q, k, *, precision="fast", max_temp_bytes=0):
    """l2_topk over a database split into Shards (any mix of contexts and
    devices), as if it were one; q a NumPy float32 [nq, D]. Blocks; returns
    NumPy (dist [nq, k], idx [nq, k] global ids)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    nq, d = q.shape if q.ndim == 2 else (1, q.shape[0])
    arr = (C.oclf_l2_shard * len(shards))()
    keep = []
    for s, sh in zip(arr, shards):
        C.init_struct(s)
        for a in (sh.x, sh.x_norms, sh.allowed):
            if a is not None:
                a.finish()
        s.ctx, s.queue = sh.ctx.ptr, sh.queue.int_ptr
        s.x = buf(sh.x)
        s.n = sh.x.shape[0]
        s.dtype = oclf_dtype(sh.x.dtype)
        s.first_id = sh.first_id
        s.x_norms = buf_ptr(sh.x_norms)
        s.allowed = buf_ptr(sh.allowed)
        s.choice = make_choice(sh.path, sh.params)
        keep.append((s.x_norms, s.allowed, s.choice))
    dist = np.empty((nq, k), np.float32)
    idx = np.empty((nq, k), np.int64)
    fp = ctypes.POINTER(ctypes.c_float)
    ip = ctypes.POINTER(ctypes.c_int64)
    o = _l2_options(precision, max_temp_bytes)
    check(lib.oclf_l2_topk_sharded(arr, len(shards), nq, d, k, q.ctypes.data_as(fp), d,
                                   dist.ctypes.data_as(fp), idx.ctypes.data_as(ip),
                                   ctypes.byref(o)))
    return dist, idx


def l2_topk_merge(lists, k):
    """Merges candidate lists [(dist [nq, kj] float32, ids [nq, kj] int64),
    ...], each row sorted with padding (id -1) last and ids global, into the
    k first of their union: NumPy (dist [nq, k], idx [nq, k])."""
    ds = [np.ascontiguousarray(d_, dtype=np.float32) for d_, _ in lists]
    ids = [np.ascontiguousarray(i_, dtype=np.int64) for _, i_ in lists]
    nq = ds[0].shape[0] if ds else 0
    for d_, i_ in zip(ds, ids):
        if d_.shape != i_.shape or d_.ndim != 2 or d_.shape[0] != nq:
            raise ValueError("every list must hold dist and ids of the same [nq, k] shape")
    fp = ctypes.POINTER(ctypes.c_float)
    ip = ctypes.POINTER(ctypes.c_int64)
    dptr = (fp * len(ds))(*[a.ctypes.data_as(fp) for a in ds])
    iptr = (ip * len(ids))(*[a.ctypes.data_as(ip) for a in ids])
    ks = (ctypes.c_size_t * len(ds))(*[a.shape[1] for a in ds])
    dist = np.empty((nq, k), np.float32)
    idx = np.empty((nq, k), np.int64)
    check(lib.oclf_l2_topk_merge(nq, k, len(ds), dptr, iptr, ks, dist.ctypes.data_as(fp),
                                 idx.ctypes.data_as(ip)))
    return dist, idx


_REDUCTIONS = {"none": C.REDUCTION_NONE, "sum": C.REDUCTION_SUM, "mean": C.REDUCTION_MEAN}


def _ce_options(call, tokens, ignore_index, reduction, label_smoothing, softcap, z_loss, lse,
                grad_output, want_grad):
    """oclf_cross_entropy_options and the oclf_buf objects its pointers keep."""
    o = C.init_struct(C.oclf_cross_entropy_options())
    lib.oclf_cross_entropy_options_init(ctypes.byref(o))
    o.ignore_index = ignore_index
    o.reduction = _lookup(_REDUCTIONS, reduction, "reduction")
    o.label_smoothing, o.softcap, o.z_loss = label_smoothing, softcap, z_loss
    keep = []
    if lse is not None:
        keep.append(ctypes.pointer(buf(call.dev(lse, write=True, init=False))))
        o.lse = keep[-1]
    if grad_output is not None and want_grad:
        g = np.asarray(grad_output, np.float32) if not hasattr(grad_output, "queue") \
            else grad_output
        if np.isscalar(grad_output) or getattr(g, "ndim", 1) == 0:
            g = np.asarray([grad_output], np.float32)
        if np.dtype(g.dtype) != np.dtype(np.float32):
            raise TypeError(f"grad_output must be float32, not {g.dtype}")
        keep.append(ctypes.pointer(buf(call.dev(g))))
        o.grad_output = keep[-1]
    return o, keep


def _loss_out(call, reduction, tokens):
    return call.new((tokens,) if reduction in ("none", C.REDUCTION_NONE) else (1,), np.float32)


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  softcap=0.0, z_loss=0.0, grad=False, grad_output=None, return_lse=False,
                  path=None, params=None, ctx=None, queue=None, wait_for=None):
    """PyTorch's F.cross_entropy over logits [T, V] (rows may be strided)
    and int64 targets [T]: ignore_index, reduction "none" | "sum" | "mean",
    label_smoothing, softcap (> 0: cap * tanh(x / cap) first) and z_loss
    (lambda lse^2 per row). Returns loss (float32 [T] for "none", [1]
    otherwise), or (loss, lse [T] float32) with return_lse. grad=True
    overwrites logits with d(loss)/d(logits) times grad_output (a float32
    scalar for sum/mean, [T] for none; default 1), rounded once to their
    dtype: a NumPy logits array is updated in place. A target outside [0, V)
    that is not ignore_index raises OclfError naming its row, with nothing
    written."""
    call = _start([logits, targets], ctx, queue, wait_for)
    tokens, vocab = matrix_shape(logits, "logits")
    targets, dt = _index(call, targets, "targets", np.int64)
    loss = _loss_out(call, reduction, tokens)
    lse = call.new((tokens,), np.float32) if return_lse else None
    opts, keep = _ce_options(call, tokens, ignore_index, reduction, label_smoothing, softcap,
                             z_loss, lse, grad_output, grad)
    opts.compute_grad = int(bool(grad))
    dx = call.dev(logits, write=bool(grad))
    dl = call.dev(loss, write=True, init=False)
    call.run(_fn("oclf_cross_entropy"), oclf_dtype(logits.dtype), tokens, vocab, buf(dx),
             buf(dt), buf(dl), ctypes.byref(opts), make_choice(path, params))
    del keep
    return (loss, lse) if return_lse else loss


def linear_cross_entropy(x, w, targets, *, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, softcap=0.0, z_loss=0.0, grad_x=False,
                         grad_w=False, grad_output=None, return_lse=False, max_temp=0,
                         path=None, params=None, ctx=None, queue=None, wait_for=None):
    """cross_entropy(x W^T, targets) for x [T, H] and W [V, H] (nn.Linear's
    weight) without holding the [T, V] logits: tokens go through the GEMM in
    chunks (params CHUNK, within max_temp bytes of device temporaries; 0: no
    bound). grad_x / grad_w: True for new arrays, or arrays to write (grad_x
    [T, H] of x's dtype, grad_w [V, H] float32, accumulated in fp32).
    Returns a dict: "loss", "lse" (with return_lse), "grad_x", "grad_w" (when
    asked), and what the call used: "chunk_tokens", "chunks", "temp_bytes"."""
    call = _start([x, w, targets], ctx, queue, wait_for)
    tokens, hidden = matrix_shape(x, "x")
    vocab, wh = matrix_shape(w, "w")
    if wh != hidden:
        raise ValueError(f"x has {hidden} columns and w {wh}")
    same_dtype(x.dtype, w=w)
    targets, dt = _index(call, targets, "targets", np.int64)
    loss = _loss_out(call, reduction, tokens)
    lse = call.new((tokens,), np.float32) if return_lse else None
    outs = {}
    for name, want, shape, dtype in (("grad_x", grad_x, (tokens, hidden), x.dtype),
                                     ("grad_w", grad_w, (vocab, hidden), np.float32)):
        if want is True:
            outs[name] = call.new(shape, dtype)
        elif want is not False and want is not None:
            if tuple(want.shape) != shape or np.dtype(want.dtype) != np.dtype(dtype):
                raise ValueError(f"{name} must be {np.dtype(dtype)} {shape}, not {want.dtype} "
                                 f"{tuple(want.shape)}")
            outs[name] = want
    opts, keep = _ce_options(call, tokens, ignore_index, reduction, label_smoothing, softcap,
                             z_loss, lse, grad_output, bool(outs))
    ptrs = {k: ctypes.pointer(buf(call.dev(a, write=True, init=False))) for k, a in outs.items()}
    info = C.init_struct(C.oclf_linear_cross_entropy_info())
    opts.max_temp_bytes = max_temp
    opts.info = ctypes.pointer(info)
    call.run(_fn("oclf_linear_cross_entropy"), oclf_dtype(x.dtype), tokens, hidden, vocab,
             buf(call.dev(x)), buf(call.dev(w)), buf(dt),
             buf(call.dev(loss, write=True, init=False)), ptrs.get("grad_x"),
             ptrs.get("grad_w"), ctypes.byref(opts), make_choice(path, params))
    del keep
    result = {"loss": loss, "chunk_tokens": info.chunk_tokens, "chunks": info.chunks,
              "temp_bytes": info.temp_bytes}
    if return_lse:
        result["lse"] = lse
    result.update(outs)
    return result
