"""Generated elementwise kernels: an expression compiled once, run as one
kernel (or a kernel per operation on the unfused path)."""
import ctypes


from . import _capi as C
from ._core import Call, buf, check, default_context, lib, make_choice, oclf_dtype, storage_dtype

_KINDS = {"matrix": C.EXPR_MATRIX, "row": C.EXPR_ROW, "col": C.EXPR_COL,
          "scalar": C.EXPR_SCALAR, "bits": C.EXPR_BITS}
_OUTPUT_KINDS = ("matrix", "bits")


def bit_words(cols):
    """uint32 words in a row of a bit matrix of `cols` columns."""
    return (cols + 31) // 32


def pack_bits(mask):
    """A boolean [rows, cols] NumPy array as the library's bit matrix:
    uint32 [rows, bit_words(cols)], bit c % 32 (least significant first) of
    word c // 32 of its row; bits past cols 0."""
    import numpy as np
    m = np.asarray(mask, dtype=bool)
    rows, cols = m.shape
    padded = np.zeros((rows, bit_words(cols) * 32), dtype=bool)
    padded[:, :cols] = m
    b = np.packbits(padded.reshape(rows, -1, 8), axis=-1, bitorder="little")
    return np.ascontiguousarray(b.reshape(rows, -1)).view("<u4").astype(np.uint32)


def unpack_bits(words, cols):
    """The boolean [rows, cols] array of a bit matrix (uint32 [rows, words])."""
    import numpy as np
    w = np.ascontiguousarray(np.asarray(words, dtype="<u4"))
    bits = np.unpackbits(w.view(np.uint8).reshape(w.shape[0], -1, 1), axis=-1, bitorder="little")
    return bits.reshape(w.shape[0], -1)[:, :cols].astype(bool)


def _decls(items, what):
    """[(name, kind, dtype)] or {name: (kind, dtype)} -> names, kinds, dtypes."""
    if isinstance(items, dict):
        items = [(name,) + tuple(v) for name, v in items.items()]
    out = []
    for it in items:
        name, kind = it[0], it[1]
        dt = it[2] if len(it) > 2 else "f32"
        if kind not in _KINDS:
            raise ValueError(f"{what} {name!r}: kind must be one of {', '.join(_KINDS)}")
        if what == "output" and kind not in _OUTPUT_KINDS:
            raise ValueError(f"output {name!r}: kind must be one of {', '.join(_OUTPUT_KINDS)}")
        out.append((name, kind, dt))
    return out


def _decl_arrays(inputs, outputs):
    """The C declaration arrays of parsed declarations, and the encoded names
    they point into (keep them alive while the arrays are in use)."""
    ins = (C.oclf_expr_decl * max(len(inputs), 1))()
    outs = (C.oclf_expr_decl * max(len(outputs), 1))()
    names = []
    for arr, decls in ((ins, inputs), (outs, outputs)):
        for d, (name, kind, dt) in zip(arr, decls):
            names.append(name.encode())
            d.name, d.kind = names[-1], _KINDS[kind]
            d.dtype = C.F32 if kind in ("scalar", "bits") else oclf_dtype(dt)
    return ins, outs, names


def form_id(source, inputs, outputs):
    """The tuning key of an expression (the `form` dim of its records): a hash
    of its canonical form with dtypes left out, computed without a context.
    inputs/outputs as for Expr. Raises OclfError for bad source."""
    ins_d, outs_d = _decls(inputs, "input"), _decls(outputs, "output")
    ins, outs, _names = _decl_arrays(ins_d, outs_d)
    form = ctypes.c_uint64()
    check(lib.oclf_expr_form_id(source.encode(), ins, len(ins_d), outs, len(outs_d),
                                ctypes.byref(form)))
    return form.value


class Expr:
    """Expr(source, inputs, outputs, ctx=None): compiles `source` (statements
    `name = expr;`, see the header for operators and functions).

    inputs: [(name, kind, dtype)] or {name: (kind, dtype)} with kind "matrix"
    [rows, cols], "row" [cols], "col" [rows], "scalar" (a float per run) or
    "bits" (a bit matrix: uint32 [rows, bit_words(cols)], see pack_bits; no
    dtype), dtype "f32"/"f16"/"bf16" or a NumPy dtype (uint16 is bf16);
    outputs: the same with kind "matrix" or "bits" (the bit set where the
    value is nonzero). Raises OclfError for bad source ("line:column:
    what")."""

    def __init__(self, source, inputs, outputs, ctx=None):
        self.ctx = ctx if ctx is not None else default_context()
        self.inputs = _decls(inputs, "input")
        self.outputs = _decls(outputs, "output")
        self._ptr = None
        ins, outs, _names = _decl_arrays(self.inputs, self.outputs)
        ptr = ctypes.c_void_p()
        check(lib.oclf_expr_compile(self.ctx.ptr, source.encode(), ins, len(self.inputs), outs,
                                    len(self.outputs), ctypes.byref(ptr)), self.ctx.ptr)
        self._ptr = ptr.value

    @property
    def canonical(self):
        """The expression's canonical form (names and order do not matter)."""
        return lib.oclf_expr_canonical(self._ptr).decode()

    def release(self):
        if getattr(self, "_ptr", None):
            lib.oclf_expr_release(self._ptr)
            self._ptr = None

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: modules may be gone already
            pass

    def __call__(self, inputs, outputs=None, *, rows=None, cols=None, seed=0, offset=0,
                 path=None, params=None, queue=None, wait_for=None):
        """Runs over rows x cols (default: the first matrix operand's shape;
        with bit matrices only, pass cols).
        inputs: {name: array or float} or a list in declared order; outputs
        likewise, or None for new arrays. Returns the output array, or a
        tuple of them in declared order when there are several."""
        if not self._ptr:
            raise ValueError("expression released")
        ins = self._by_name(inputs, self.inputs, "input")
        outs = self._by_name(outputs, self.outputs, "output") if outputs is not None else None
        arrays = [a for a in ins if not isinstance(a, (int, float))] + list(outs or [])
        call = Call(arrays, self.ctx, queue, wait_for)
        if rows is None or cols is None:
            decls = [d for d, a in zip(self.inputs, ins) if not isinstance(a, (int, float))]
            shaped = [(a, d[1]) for a, d in zip(arrays, decls + self.outputs)
                      if getattr(a, "ndim", 0) == 2 and d[1] in ("matrix", "bits")]
            first = next((a for a, kind in shaped if kind == "matrix"), None)
            if first is not None:
                rows, cols = first.shape if rows is None else (rows, first.shape[1])
            elif cols is not None and shaped:
                # a bit matrix's rows are its rows; its width in words is not cols
                rows = shaped[0][0].shape[0]
            else:
                raise ValueError("rows and cols are needed when no matrix operand is 2-D "
                                 "(cols, when every 2-D operand is a bit matrix)")
        args = (C.oclf_expr_arg * max(len(ins), 1))()
        for arg, a, (name, kind, _) in zip(args, ins, self.inputs):
            C.init_struct(arg)
            if kind == "scalar":
                arg.scalar = float(a)
            else:
                arg.buf = buf(call.dev(a), rows_stride=(kind in ("matrix", "bits")))
        if outs is None:
            outs = [call.new((rows, bit_words(cols)), "uint32") if kind == "bits"
                    else call.new((rows, cols), storage_dtype(dt))
                    for _, kind, dt in self.outputs]
            news = [True] * len(outs)
        else:
            news = [False] * len(outs)
        obufs = (C.oclf_buf * max(len(outs), 1))()
        for i, (a, new) in enumerate(zip(outs, news)):
            obufs[i] = buf(call.dev(a, write=True, init=not new))
        ev = C.cl_handle()
        n, wl = call.wait_list()
        check(lib.oclf_expr_run(self._ptr, call.queue.int_ptr, rows, cols, args, obufs, seed,
                                offset, make_choice(path, params), n, wl,
                                ctypes.byref(ev)), self.ctx.ptr)
        call.finish(ev)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def _by_name(given, decls, what):
        if isinstance(given, dict):
            missing = [d[0] for d in decls if d[0] not in given]
            extra = [k for k in given if k not in [d[0] for d in decls]]
            if missing or extra:
                raise ValueError(f"{what}s: missing {missing}, unknown {extra}")
            return [given[d[0]] for d in decls]
        given = list(given)
        if len(given) != len(decls):
            raise ValueError(f"{len(decls)} {what}s declared, {len(given)} given")
        return given
