"""The tuning database: where it lives, checking, merging, and what dispatch
would pick."""
import ctypes
import json

from . import _capi as C
from ._core import _PATHS, check, default_context, lib, make_choice, oclf_dtype


def tuning_db_default_path():
    """The per-machine database path ($XDG_DATA_HOME/oclfuse/tuning.json, else
    under $HOME/.local/share)."""
    b = ctypes.create_string_buffer(4096)
    check(lib.oclf_tuning_db_default_path(b, len(b)))
    return b.value.decode()


def tuning_db_check(path):
    """Parses a database file as dispatch would; returns its record count.
    OclfError OCLF_IO_ERROR (unreadable) or OCLF_DB_ERROR ("file:line:column")."""
    n = ctypes.c_size_t()
    check(lib.oclf_tuning_db_check(str(path).encode(), ctypes.byref(n)))
    return n.value


def tuning_db_merge(path, records, ctx=None):
    """Merges records (a JSON string, or a list of records / a database
    document as Python objects) into the database at `path`, under a lock,
    atomically. Records without "device" get the device of ctx."""
    text = records if isinstance(records, str) else json.dumps(records)
    ptr = ctx.ptr if ctx is not None else None
    check(lib.oclf_tuning_db_merge(ptr, str(path).encode(), text.encode()), ptr)


def tuning_explain(op, dtype, dims, path="auto", ctx=None):
    """Text: which record (from which file) dispatch would use for `op` (a name
    such as "rms_norm"), dtype, shape `dims` (in the op's order) and path,
    and the records it skipped and why."""
    ctx = ctx if ctx is not None else default_context()
    d = (ctypes.c_uint64 * max(len(dims), 1))(*dims)
    b = ctypes.create_string_buffer(1 << 16)
    if path not in _PATHS:
        raise ValueError(f"path must be 'auto', 'fused' or 'unfused', not {path!r}")
    check(lib.oclf_tuning_explain(ctx.ptr, op.encode(), oclf_dtype(dtype), d, len(dims),
                                  _PATHS[path], b, len(b)), ctx.ptr)
    return b.value.decode()


def _question(op, dtype, dims, path, ctx):
    ctx = ctx if ctx is not None else default_context()
    if path not in _PATHS:
        raise ValueError(f"path must be 'auto', 'fused' or 'unfused', not {path!r}")
    d = (ctypes.c_uint64 * max(len(dims), 1))(*dims)
    return ctx, d


def _params_dict(params):
    return {params.item[i].name.decode(): params.item[i].value for i in range(params.count)}


def tuning_resolve(op, dtype, dims, path="auto", ctx=None):
    """What dispatch decides for `op` at this dtype, shape and path, as data:
    {"heuristic": (path, {param: value}), "decision": (path, {...}),
    "from_record": bool}. The same decision tuning_explain prints."""
    ctx, d = _question(op, dtype, dims, path, ctx)
    out = C.oclf_tuning_decision()
    check(lib.oclf_tuning_resolve(ctx.ptr, op.encode(), oclf_dtype(dtype), d, len(dims),
                                  _PATHS[path], ctypes.byref(out)), ctx.ptr)
    names = {C.PATH_FUSED: "fused", C.PATH_UNFUSED: "unfused", C.PATH_AUTO: "auto"}
    return {"heuristic": (names[out.heuristic.path], _params_dict(out.heuristic.params)),
            "decision": (names[out.decision.path], _params_dict(out.decision.params)),
            "from_record": bool(out.from_record)}


def tuning_params_valid(op, dtype, dims, path, params, ctx=None):
    """(True, "") when dispatch would take kernel `params` ({"VEC": 4, ...})
    for `op` on `path` ("fused" or "unfused") at this shape, else (False,
    the library's reason)."""
    ctx, d = _question(op, dtype, dims, path, ctx)
    ch = make_choice(path, params)
    ok = lib.oclf_tuning_params_valid(ctx.ptr, op.encode(), oclf_dtype(dtype), d, len(dims),
                                      _PATHS[path], ctypes.byref(ch.contents.params))
    return (True, "") if ok else (False, lib.oclf_last_error(ctx.ptr).decode(errors="replace"))
