"""ctypes declarations of include/oclfuse.h: the only place that mirrors the C API.

A change to the header (a field, a function) is an edit here. The structs'
sizes and field offsets are compared with the C compiler's by the Python test
suite (tests/python/abi_layout.c), so a header change not made here fails a test.
"""
import ctypes
import ctypes.util
import os

c_size_t = ctypes.c_size_t
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_float = ctypes.c_float
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER

# OpenCL handles are opaque pointers; cl_uint is 32 bits, cl_device_type 64.
cl_handle = c_void_p
cl_uint = ctypes.c_uint32
cl_device_type = ctypes.c_uint64
c_enum = c_int

# enum oclf_status
SUCCESS = 0
INVALID_ARGUMENT = -1
UNSUPPORTED = -2
BUILD_FAILED = -3
OUT_OF_RESOURCES = -4
OPENCL_ERROR = -5
DB_ERROR = -6
IO_ERROR = -7

# enum oclf_dtype
F32, F16, BF16 = 0, 1, 2
# enum oclf_path
PATH_AUTO, PATH_FUSED, PATH_UNFUSED = 0, 1, 2
# enum oclf_act
ACT_SILU, ACT_GELU, ACT_GELU_TANH, ACT_FATRELU, ACT_SWIGLU_OAI = 0, 1, 2, 3, 4
# enum oclf_rope_style, oclf_index_type
ROPE_NEOX, ROPE_GPTJ = 0, 1
INT32, INT64 = 0, 1
# enum oclf_l2_precision
L2_FAST, L2_EXACT = 0, 1
# enum oclf_linear_act, oclf_weight_layout
LINEAR_NONE, LINEAR_RELU, LINEAR_GELU, LINEAR_GELU_TANH, LINEAR_SILU = 0, 1, 2, 3, 4
WEIGHT_NK, WEIGHT_KN = 0, 1
# enum oclf_qformat
QFORMAT_INT8, QFORMAT_INT4, QFORMAT_Q8_0, QFORMAT_Q4_0 = 1, 2, 3, 4
REDUCTION_NONE, REDUCTION_SUM, REDUCTION_MEAN = 0, 1, 2
# enum oclf_expr_kind
EXPR_MATRIX, EXPR_ROW, EXPR_COL, EXPR_SCALAR, EXPR_BITS = 0, 1, 2, 3, 4
# enum oclf_log_level
LOG_DEBUG, LOG_INFO, LOG_WARN = 0, 1, 2

MAX_PARAMS = 12
PARAM_NAME_MAX = 16

log_fn = ctypes.CFUNCTYPE(None, c_void_p, c_enum, c_char_p)


class oclf_context_options(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("kernel_dir", c_char_p),
        ("cache_dir", c_char_p),
        ("tuning_db", c_char_p),
        ("no_tuning_db", c_int),
        ("validate", c_int),
        ("log", log_fn),
        ("log_user", c_void_p),
    ]


class oclf_context_stats(ctypes.Structure):
    _fields_ = [("size", c_size_t)] + [(name, c_uint64) for name in (
        "programs_compiled", "programs_from_disk", "program_hits", "disk_cache_rejected",
        "kernels_enqueued", "tuning_lookups", "tuning_cache_hits", "tuning_db_errors")]


class oclf_param(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * PARAM_NAME_MAX), ("value", c_int64)]


class oclf_params(ctypes.Structure):
    _fields_ = [("count", c_uint), ("item", oclf_param * MAX_PARAMS)]


class oclf_choice(ctypes.Structure):
    _fields_ = [("path", c_enum), ("params", oclf_params)]


class oclf_tuning_decision(ctypes.Structure):
    _fields_ = [("heuristic", oclf_choice), ("decision", oclf_choice), ("from_record", c_int)]


class oclf_buf(ctypes.Structure):
    _fields_ = [("mem", cl_handle), ("offset", c_size_t), ("stride", c_size_t)]


class oclf_activation(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("kind", c_enum),
        ("act_on_second", c_int),
        ("threshold", c_float),
        ("alpha", c_float),
        ("limit", c_float),
    ]


class oclf_rope(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("style", c_enum),
        ("head_dim", c_size_t),
        ("rot_dim", c_size_t),
        ("positions", oclf_buf),
        ("pos_type", c_enum),
        ("cos_sin", oclf_buf),
        ("cache_dtype", c_enum),
        ("max_pos", c_size_t),
    ]


class oclf_heads(ctypes.Structure):
    _fields_ = [("buf", oclf_buf), ("count", c_size_t), ("head_stride", c_size_t)]


class oclf_l2_topk_options(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("precision", c_enum),
        ("max_temp_bytes", c_size_t),
        ("x_norms", POINTER(oclf_buf)),
        ("allowed", POINTER(oclf_buf)),
    ]


class oclf_l2_shard(ctypes.Structure):
    _fields_ = [
        ("ctx", c_void_p),
        ("queue", cl_handle),
        ("x", oclf_buf),
        ("n", c_size_t),
        ("dtype", c_enum),
        ("first_id", c_int64),
        ("x_norms", POINTER(oclf_buf)),
        ("allowed", POINTER(oclf_buf)),
        ("choice", POINTER(oclf_choice)),
    ]


class oclf_linear_epilogue(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("alpha", c_float),
        ("bias", POINTER(oclf_buf)),
        ("residual", POINTER(oclf_buf)),
        ("beta", c_float),
        ("residual_before_act", c_int),
        ("act", c_enum),
    ]


class oclf_qweight(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("format", c_enum),
        ("group", c_uint),
        ("q", oclf_buf),
        ("scale", oclf_buf),
        ("scale_dtype", c_enum),
        ("zero", POINTER(oclf_buf)),
    ]


class oclf_attention_options(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("scale", c_float),
        ("causal", c_int),
        ("window", c_int),
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("softcap", c_float),
        ("alibi_slopes", POINTER(oclf_buf)),
        ("sinks", POINTER(oclf_buf)),
        ("lse", POINTER(oclf_buf)),
        ("dropout_p", c_float),
        ("dropout_seed", c_uint64),
        ("dropout_offset", c_uint64),
    ]


class oclf_kv_cache(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("k", cl_handle),
        ("v", cl_handle),
        ("k_offset", c_size_t),
        ("v_offset", c_size_t),
        ("num_blocks", c_size_t),
        ("block_size", c_size_t),
        ("heads", c_size_t),
        ("head_dim", c_size_t),
    ]


class oclf_linear_cross_entropy_info(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("chunk_tokens", c_size_t), ("chunks", c_size_t),
                ("temp_bytes", c_size_t)]


class oclf_cross_entropy_options(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("ignore_index", c_int64),
        ("reduction", c_enum),
        ("label_smoothing", c_float),
        ("softcap", c_float),
        ("z_loss", c_float),
        ("lse", POINTER(oclf_buf)),
        ("compute_grad", c_int),
        ("grad_output", POINTER(oclf_buf)),
        ("max_temp_bytes", c_size_t),
        ("info", POINTER(oclf_linear_cross_entropy_info)),
    ]


class oclf_expr_decl(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("kind", c_enum), ("dtype", c_enum)]


class oclf_expr_arg(ctypes.Structure):
    _fields_ = [("buf", oclf_buf), ("scalar", c_float)]


# Every struct of the header, by its C name, for the layout test.
STRUCTS = {cls.__name__: cls for cls in (
    oclf_context_options, oclf_context_stats, oclf_params, oclf_choice, oclf_tuning_decision,
    oclf_buf,
    oclf_activation, oclf_rope, oclf_heads, oclf_l2_topk_options, oclf_l2_shard,
    oclf_linear_epilogue, oclf_qweight, oclf_attention_options, oclf_kv_cache, oclf_expr_decl,
    oclf_expr_arg, oclf_cross_entropy_options, oclf_linear_cross_entropy_info)}

P = POINTER
_ev = P(cl_handle)        # cl_event *: the optional event out
_wait = (cl_uint, P(cl_handle))  # num_events, wait_list
_status = c_enum

# name: (restype, argtypes)
FUNCTIONS = {
    "oclf_version": (c_uint, ()),
    "oclf_version_string": (c_char_p, ()),
    "oclf_status_string": (c_char_p, (c_enum,)),
    "oclf_status_message": (c_char_p, (c_enum,)),
    "oclf_dtype_name": (c_char_p, (c_enum,)),
    "oclf_dtype_size": (c_size_t, (c_enum,)),
    "oclf_context_options_init": (None, (P(oclf_context_options),)),
    "oclf_context_create": (_status, (cl_handle, cl_handle, P(oclf_context_options),
                                      P(c_void_p))),
    "oclf_context_destroy": (None, (c_void_p,)),
    "oclf_context_device_type": (cl_device_type, (c_void_p,)),
    "oclf_last_error": (c_char_p, (c_void_p,)),
    "oclf_context_fingerprint": (c_char_p, (c_void_p,)),
    "oclf_context_get_stats": (_status, (c_void_p, P(oclf_context_stats))),
    "oclf_params_set": (_status, (P(oclf_params), c_char_p, c_int64)),
    "oclf_params_get": (c_int, (P(oclf_params), c_char_p, P(c_int64))),
    "oclf_tuning_db_default_path": (_status, (ctypes.c_char_p, c_size_t)),
    "oclf_tuning_db_check": (_status, (c_char_p, P(c_size_t))),
    "oclf_tuning_db_merge": (_status, (c_void_p, c_char_p, c_char_p)),
    "oclf_tuning_explain": (_status, (c_void_p, c_char_p, c_enum, P(c_uint64), c_uint, c_enum,
                                      c_char_p, c_size_t)),
    "oclf_tuning_resolve": (_status, (c_void_p, c_char_p, c_enum, P(c_uint64), c_uint, c_enum,
                                      P(oclf_tuning_decision))),
    "oclf_tuning_params_valid": (c_int, (c_void_p, c_char_p, c_enum, P(c_uint64), c_uint,
                                         c_enum, P(oclf_params))),
    "oclf_rms_norm": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, oclf_buf,
                                P(oclf_buf), oclf_buf, c_float, P(oclf_choice)) + _wait + (_ev,)),
    "oclf_add_rms_norm": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, oclf_buf,
                                    oclf_buf, P(oclf_buf), c_float, P(oclf_choice)) + _wait
                          + (_ev,)),
    "oclf_layer_norm": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, oclf_buf,
                                  P(oclf_buf), P(oclf_buf), oclf_buf, c_float, P(oclf_choice))
                        + _wait + (_ev,)),
    "oclf_add_layer_norm": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, oclf_buf,
                                      oclf_buf, P(oclf_buf), P(oclf_buf), oclf_buf, c_float,
                                      P(oclf_choice)) + _wait + (_ev,)),
    "oclf_rms_norm_backward": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t,
                                         oclf_buf, oclf_buf, P(oclf_buf), P(oclf_buf), oclf_buf,
                                         P(oclf_buf), c_float, P(oclf_choice)) + _wait
                               + (_ev,)),
    "oclf_layer_norm_backward": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t,
                                           oclf_buf, oclf_buf, P(oclf_buf), oclf_buf,
                                           P(oclf_buf), P(oclf_buf), c_float, P(oclf_choice))
                                 + _wait + (_ev,)),
    "oclf_activation_init": (None, (P(oclf_activation),)),
    "oclf_act_and_mul": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, oclf_buf,
                                   oclf_buf, P(oclf_activation), P(oclf_choice)) + _wait
                         + (_ev,)),
    "oclf_act_and_mul_backward": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t,
                                            oclf_buf, oclf_buf, oclf_buf, P(oclf_activation),
                                            P(oclf_choice)) + _wait + (_ev,)),
    "oclf_rope_init": (None, (P(oclf_rope),)),
    "oclf_rotary_embedding": (_status, (c_void_p, cl_handle, c_enum, c_size_t, P(oclf_rope),
                                        oclf_heads, P(oclf_heads), P(oclf_choice)) + _wait
                              + (_ev,)),
    "oclf_rotary_embedding_backward": (_status, (c_void_p, cl_handle, c_enum, c_size_t,
                                                 P(oclf_rope), oclf_heads, P(oclf_heads),
                                                 P(oclf_choice)) + _wait + (_ev,)),
    "oclf_qk_norm_rope": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, c_size_t,
                                    c_size_t, P(oclf_rope), oclf_buf, P(oclf_buf), P(oclf_buf),
                                    c_float, P(oclf_choice)) + _wait + (_ev,)),
    "oclf_l2_topk_options_init": (None, (P(oclf_l2_topk_options),)),
    "oclf_l2_topk": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, c_size_t,
                               c_size_t, oclf_buf, oclf_buf, oclf_buf, oclf_buf,
                               P(oclf_l2_topk_options), P(oclf_choice)) + _wait + (_ev,)),
    "oclf_l2_topk_sharded": (_status, (P(oclf_l2_shard), c_size_t, c_size_t, c_size_t, c_size_t,
                                       P(c_float), c_size_t, P(c_float), P(c_int64),
                                       P(oclf_l2_topk_options))),
    "oclf_l2_topk_merge": (_status, (c_size_t, c_size_t, c_size_t, P(P(c_float)),
                                     P(P(c_int64)), P(c_size_t), P(c_float), P(c_int64))),
    "oclf_linear_epilogue_init": (None, (P(oclf_linear_epilogue),)),
    "oclf_linear": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, c_size_t,
                              oclf_buf, oclf_buf, oclf_buf, c_enum, c_enum,
                              P(oclf_linear_epilogue), P(oclf_choice)) + _wait + (_ev,)),
    "oclf_qweight_init": (None, (P(oclf_qweight),)),
    "oclf_linear_q": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, c_size_t,
                                oclf_buf, P(oclf_qweight), oclf_buf, c_enum,
                                P(oclf_linear_epilogue), P(oclf_choice)) + _wait + (_ev,)),
    "oclf_qweight_convert": (_status, (c_void_p, cl_handle, c_size_t, c_size_t, P(oclf_qweight),
                                       P(oclf_qweight), P(oclf_choice)) + _wait + (_ev,)),
    "oclf_attention_options_init": (None, (P(oclf_attention_options),)),
    "oclf_attention": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, c_size_t,
                                 c_size_t, c_size_t, oclf_buf, oclf_buf, oclf_heads, oclf_heads,
                                 oclf_heads, oclf_heads, P(oclf_attention_options),
                                 P(oclf_choice)) + _wait + (_ev,)),
    "oclf_attention_paged": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, c_size_t,
                                       c_size_t, oclf_buf, oclf_buf, oclf_buf, oclf_heads,
                                       P(oclf_kv_cache), oclf_heads, P(oclf_attention_options),
                                       P(oclf_choice)) + _wait + (_ev,)),
    "oclf_kv_cache_init": (None, (P(oclf_kv_cache),)),
    "oclf_kv_cache_write": (_status, (c_void_p, cl_handle, c_enum, c_size_t, oclf_heads,
                                      oclf_heads, oclf_buf, P(oclf_kv_cache), P(oclf_choice))
                            + _wait + (_ev,)),
    "oclf_qk_norm_rope_cache": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t,
                                          c_size_t, c_size_t, P(oclf_rope), oclf_buf, P(oclf_buf),
                                          P(oclf_buf), oclf_buf, P(oclf_kv_cache), c_float,
                                          P(oclf_choice)) + _wait + (_ev,)),
    "oclf_cross_entropy_options_init": (None, (P(oclf_cross_entropy_options),)),
    "oclf_cross_entropy": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t, oclf_buf,
                                     oclf_buf, oclf_buf, P(oclf_cross_entropy_options),
                                     P(oclf_choice)) + _wait + (_ev,)),
    "oclf_linear_cross_entropy": (_status, (c_void_p, cl_handle, c_enum, c_size_t, c_size_t,
                                            c_size_t, oclf_buf, oclf_buf, oclf_buf, oclf_buf,
                                            P(oclf_buf), P(oclf_buf),
                                            P(oclf_cross_entropy_options), P(oclf_choice))
                                  + _wait + (_ev,)),
    "oclf_expr_compile": (_status, (c_void_p, c_char_p, P(oclf_expr_decl), c_uint,
                                    P(oclf_expr_decl), c_uint, P(c_void_p))),
    "oclf_expr_canonical": (c_char_p, (c_void_p,)),
    "oclf_expr_form_id": (_status, (c_char_p, P(oclf_expr_decl), c_uint, P(oclf_expr_decl), c_uint,
                                    P(c_uint64))),
    "oclf_expr_release": (None, (c_void_p,)),
    "oclf_expr_run": (_status, (c_void_p, cl_handle, c_size_t, c_size_t, P(oclf_expr_arg),
                                P(oclf_buf), c_uint64, c_uint64, P(oclf_choice)) + _wait
                      + (_ev,)),
}

# Environment variable naming the library file (or a folder holding it); the
# in-tree tests point it at the build folder.
LIBRARY_ENV = "OCLFUSE_LIBRARY"
SONAME = "liboclfuse.so.0"


def _candidates():
    env = os.environ.get(LIBRARY_ENV)
    if env:
        yield os.path.join(env, SONAME) if os.path.isdir(env) else env
        return  # an explicit choice is never silently replaced
    try:
        from . import _build_config  # written by meson install
        # relative (pip install .): the library lies in this package's folder
        yield os.path.join(os.path.dirname(os.path.abspath(__file__)), _build_config.LIBDIR, SONAME)
    except ImportError:
        pass
    found = ctypes.util.find_library("oclfuse")
    if found:
        yield found
    yield SONAME


# Functions of FUNCTIONS that the loaded library lacks (one older than this
# package): load() leaves them undeclared, and calling one raises
# NotImplementedError naming it (see missing()).
MISSING = set()


def missing(*names):
    """The names among `names` that the loaded library does not export."""
    return [n for n in names if n in MISSING]


def load():
    """The library with every function of FUNCTIONS it exports declared; the
    others are listed in MISSING."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append(f"{path}: {e}")
    else:
        raise OSError("liboclfuse not found (set %s to the library or its folder); tried: %s"
                      % (LIBRARY_ENV, "; ".join(tried)))
    for name, (res, args) in FUNCTIONS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            MISSING.add(name)
            continue
        fn.restype = res
        fn.argtypes = list(args)
    return lib


def init_struct(struct):
    """Zeroes, then sets a leading `size` field where the header has one."""
    ctypes.memset(ctypes.byref(struct), 0, ctypes.sizeof(struct))
    if any(f[0] == "size" for f in type(struct)._fields_):
        struct.size = ctypes.sizeof(struct)
    return struct
