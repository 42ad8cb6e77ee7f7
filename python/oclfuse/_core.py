"""Library handle, errors, contexts, dtypes, and the per-call plumbing that
turns PyOpenCL and NumPy arrays into oclf_buf operands."""
import ctypes
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import _capi as C

lib = C.load()

STATUS_NAMES = {
    C.SUCCESS: "OCLF_SUCCESS",
    C.INVALID_ARGUMENT: "OCLF_INVALID_ARGUMENT",
    C.UNSUPPORTED: "OCLF_UNSUPPORTED",
    C.BUILD_FAILED: "OCLF_BUILD_FAILED",
    C.OUT_OF_RESOURCES: "OCLF_OUT_OF_RESOURCES",
    C.OPENCL_ERROR: "OCLF_OPENCL_ERROR",
    C.DB_ERROR: "OCLF_DB_ERROR",
    C.IO_ERROR: "OCLF_IO_ERROR",
}


class OclfError(Exception):
    """A call the library refused or failed: `status` (an int, one of the
    module's status constants), `name` ("OCLF_INVALID_ARGUMENT") and
    `message` (the library's sentence from oclf_last_error) and `meaning`
    (what the status means in general, from oclf_status_message)."""

    def __init__(self, status, message):
        self.status = status
        self.name = lib.oclf_status_string(status).decode()
        self.meaning = lib.oclf_status_message(status).decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


def check(status, ctx_ptr=None):
    """Raises OclfError for a status other than success, with the sentence the
    library left for this thread (for ctx_ptr, or the context-less one)."""
    if status != C.SUCCESS:
        raise OclfError(status, lib.oclf_last_error(ctx_ptr).decode(errors="replace"))


def version():
    """The loaded library's version string, "0.9.0"."""
    return lib.oclf_version_string().decode()


# ---------------------------------------------------------------------------
# dtypes: float32 and float16 as themselves, bf16 as uint16 storage.

_DTYPES = {np.dtype(np.float32): C.F32, np.dtype(np.float16): C.F16,
           np.dtype(np.uint16): C.BF16}
_DTYPE_NAMES = {"f32": C.F32, "float32": C.F32, "f16": C.F16, "float16": C.F16,
                "bf16": C.BF16, "bfloat16": C.BF16}
_STORAGE = {C.F32: np.dtype(np.float32), C.F16: np.dtype(np.float16),
            C.BF16: np.dtype(np.uint16)}


def oclf_dtype(dt):
    """The library's dtype for a NumPy dtype (uint16 is bf16 storage) or a name
    ("f32", "f16", "bf16")."""
    if isinstance(dt, str) and dt in _DTYPE_NAMES:
        return _DTYPE_NAMES[dt]
    try:
        return _DTYPES[np.dtype(dt)]
    except (KeyError, TypeError):
        raise TypeError(f"unsupported dtype {dt!r}: float32, float16 or uint16 (bf16 storage)")


def storage_dtype(dt):
    """The NumPy storage dtype of a dtype name or NumPy dtype."""
    return _STORAGE[oclf_dtype(dt)]


def to_bf16(a):
    """float32 values -> bf16 bit patterns (uint16), rounded to nearest even
    like the library; NaN stays NaN."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def from_bf16(a):
    """bf16 bit patterns (uint16) -> float32, exactly."""
    u = np.ascontiguousarray(a, dtype=np.uint16)
    return (u.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------
# Contexts

_DEVICE_CLASSES = {cl.device_type.GPU: "gpu", cl.device_type.CPU: "cpu",
                   cl.device_type.ACCELERATOR: "accelerator"}


def _opt(s):
    return None if s is None else str(s).encode()


class Context:
    """An oclf_context over a PyOpenCL (context, device).

    Context(queue) uses the queue's context and device and makes `queue` the
    default queue of calls; Context(context=..., device=...) makes a queue;
    Context() takes pyopencl.create_some_context(interactive=False) (which
    follows PYOPENCL_CTX). Keyword options are oclf_context_options'
    fields: kernel_dir, cache_dir, tuning_db, no_tuning_db, validate, and
    log, a callable(level, message) for the library's diagnostics.
    """

    def __init__(self, queue=None, *, context=None, device=None, kernel_dir=None,
                 cache_dir=None, tuning_db=None, no_tuning_db=False, validate=False,
                 log=None):
        if queue is not None:
            context, device = queue.context, queue.device
        else:
            if context is None:
                context = cl.create_some_context(interactive=False)
            if device is None:
                device = context.devices[0]
            queue = cl.CommandQueue(context, device)
        self.queue, self.cl_context, self.device = queue, context, device
        opts = C.init_struct(C.oclf_context_options())
        lib.oclf_context_options_init(ctypes.byref(opts))
        opts.kernel_dir, opts.cache_dir = _opt(kernel_dir), _opt(cache_dir)
        opts.tuning_db = _opt(tuning_db)
        opts.no_tuning_db, opts.validate = int(bool(no_tuning_db)), int(bool(validate))
        self._log = None
        if log is not None:
            # Kept on the object: the library calls it for the context's life.
            self._log = C.log_fn(lambda user, level, msg: log(int(level), msg.decode()))
            opts.log = self._log
        self._opts = opts  # the strings must outlive creation only, kept anyway
        ptr = ctypes.c_void_p()
        check(lib.oclf_context_create(context.int_ptr, device.int_ptr, ctypes.byref(opts),
                                      ctypes.byref(ptr)))
        self._ptr = ptr.value

    @property
    def ptr(self):
        """The oclf_context pointer (an int); ValueError once closed."""
        if not self._ptr:
            raise ValueError("oclfuse.Context is closed")
        return self._ptr

    def close(self):
        """Destroys the oclf_context after finishing the context's default
        queue (finish any other queue that used it first)."""
        if getattr(self, "_ptr", None):
            self.queue.finish()
            lib.oclf_context_destroy(self._ptr)
            self._ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may be gone already
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def fingerprint(self):
        """"vendor|name|driver|type" of the device."""
        return lib.oclf_context_fingerprint(self.ptr).decode()

    @property
    def device_class(self):
        """"gpu", "cpu" or "accelerator": the class the heuristics follow."""
        return _DEVICE_CLASSES.get(lib.oclf_context_device_type(self.ptr), "unknown")

    def stats(self):
        """oclf_context_stats as a dict."""
        s = C.init_struct(C.oclf_context_stats())
        check(lib.oclf_context_get_stats(self.ptr, ctypes.byref(s)), self.ptr)
        return {name: getattr(s, name) for name, _ in s._fields_ if name != "size"}


_lock = threading.Lock()
_by_device = {}
_default = None


def default_context():
    """The Context used by calls that name neither a context nor a queue nor a
    PyOpenCL array (NumPy arrays only): made on first use."""
    global _default
    with _lock:
        if _default is None:
            _default = Context()
            _by_device[_key(_default.queue)] = _default
        return _default


def _key(queue):
    return (queue.context.int_ptr, queue.device.int_ptr)


def context_for(queue):
    """The Context shared by calls on `queue`'s (context, device), made on
    first use and kept for the life of the process."""
    with _lock:
        ctx = _by_device.get(_key(queue))
        if ctx is None:
            ctx = _by_device[_key(queue)] = Context(queue)
        return ctx


# ---------------------------------------------------------------------------
# One call: operands, choice, events, copies back.

_PATHS = {None: C.PATH_AUTO, "auto": C.PATH_AUTO, "fused": C.PATH_FUSED,
          "unfused": C.PATH_UNFUSED}


def make_choice(path, params):
    """An oclf_choice pointer (or None for the default) from path ("auto",
    "fused", "unfused") and params ({"VEC": 4, ...})."""
    if path is None and not params:
        return None
    if path not in _PATHS:
        raise ValueError(f"path must be 'auto', 'fused' or 'unfused', not {path!r}")
    ch = C.init_struct(C.oclf_choice())
    ch.path = _PATHS[path]
    for name, value in (params or {}).items():
        # oclf_params_set has no context: its sentence is the context-less one.
        check(lib.oclf_params_set(ctypes.byref(ch.params), name.encode(), int(value)))
    return ctypes.pointer(ch)


def _is_dev(a):
    return isinstance(a, cla.Array)


class Call:
    """Collects the operands of one library call: NumPy arrays are copied to
    the device (once each, however often they appear) and the written ones
    copied back after the call; PyOpenCL arrays are used in place, their
    pending events waited for and the call's event attached to them."""

    def __init__(self, arrays, ctx=None, queue=None, wait_for=None):
        arrays = [a for a in arrays if a is not None and not np.isscalar(a)]
        dev = [a for a in arrays if _is_dev(a)]
        if queue is None:
            queue = next((a.queue for a in dev if a.queue is not None), None)
        if ctx is None:
            ctx = context_for(queue) if queue is not None else default_context()
        if queue is None:
            queue = ctx.queue
        self.ctx, self.queue = ctx, queue
        self.host = not dev  # NumPy in, NumPy out
        self._dev = {}       # id(host array) -> (host array, device array)
        self._written = []
        self._touched = []
        self._wait = list(wait_for or [])
        self._empty = None

    def dev(self, a, write=False, init=True):
        """The device array behind operand `a` (a PyOpenCL or NumPy array);
        `write`: the call writes it (copied back when a NumPy array);
        `init=False`: its contents need not be copied in (a new output)."""
        if _is_dev(a):
            if all(t is not a for t in self._touched):
                self._touched.append(a)
                self._wait.extend(a.events)
            return self._nonempty(a)
        if not isinstance(a, np.ndarray):
            raise TypeError(f"expected a pyopencl.array.Array or numpy.ndarray, not {type(a)}")
        got = self._dev.get(id(a))
        if got is None:
            d = (cla.to_device(self.queue, np.ascontiguousarray(a)) if init
                 else cla.empty(self.queue, a.shape, a.dtype))
            got = self._dev[id(a)] = (a, self._nonempty(d))
        if write and all(w[0] is not a for w in self._written):
            self._written.append(got)
        return got[1]

    def _nonempty(self, d):
        """An empty PyOpenCL array has no buffer, and the library wants a
        cl_mem even for 0 rows: give it a small placeholder."""
        if d.base_data is not None:
            return d
        if self._empty is None:
            self._empty = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, 64)
        return cla.Array(self.queue, d.shape, d.dtype, data=self._empty)

    def new(self, shape, dtype):
        """A new output: a NumPy array when the call's operands are NumPy
        arrays, else a PyOpenCL array on the call's queue."""
        if self.host:
            return np.empty(shape, dtype)
        return cla.empty(self.queue, shape, dtype)

    def wait_list(self):
        evs = [e.int_ptr for e in self._wait]
        return len(evs), (C.cl_handle * len(evs))(*evs) if evs else None

    def run(self, fn, *args):
        """Calls fn(ctx, queue, *args, num_events, wait_list, &event), raises
        on failure, then attaches the event or copies results back."""
        ev = C.cl_handle()
        n, wl = self.wait_list()
        check(fn(self.ctx.ptr, self.queue.int_ptr, *args, n, wl, ctypes.byref(ev)), self.ctx.ptr)
        self.finish(ev)

    def finish(self, ev):
        evt = cl.Event.from_int_ptr(ev.value, retain=False)
        for a in self._touched:
            a.add_event(evt)
        for host, d in self._written:
            d.add_event(evt)
            if host.size == 0:
                evt.wait()
            elif host.flags.c_contiguous and host.flags.writeable:
                d.get(queue=self.queue, ary=host)
            else:
                host[...] = d.get(queue=self.queue)
        self.event = evt


def _elem(a, nbytes):
    size = a.dtype.itemsize
    if nbytes % size:
        raise ValueError(f"array offset or stride {nbytes} bytes is not a multiple of its "
                         f"element size {size}")
    return nbytes // size


def buf(a, rows_stride=True):
    """oclf_buf for a device array: its cl_mem, element offset, and row stride
    (the first axis) for a 2-D array whose elements within a row are packed."""
    b = C.oclf_buf()
    b.mem = a.base_data.int_ptr if a.base_data is not None else None
    b.offset = _elem(a, a.offset)
    if a.ndim >= 2 and rows_stride:
        if a.strides[-1] != a.dtype.itemsize:
            raise ValueError("the last axis of an operand must be packed (stride = item size)")
        b.stride = _elem(a, a.strides[0]) if a.shape[0] > 1 else 0
    return b


def buf_ptr(a):
    return None if a is None else ctypes.pointer(buf(a))


def matrix_shape(a, name):
    """(rows, cols) of a 1-D (one row) or 2-D operand."""
    if a.ndim == 1:
        return 1, a.shape[0]
    if a.ndim == 2:
        return a.shape
    raise ValueError(f"{name} must be 1-D or 2-D, not {a.ndim}-D")


def same_dtype(dt, **arrays):
    for name, a in arrays.items():
        if a is not None and np.dtype(a.dtype) != np.dtype(dt):
            raise TypeError(f"{name} is {a.dtype}, the operation's dtype is {np.dtype(dt)}")
