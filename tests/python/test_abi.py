"""The ctypes declarations (python/oclfuse/_capi.py) against the C compiler's
layout of every struct of oclfuse.h, as printed by abi_layout."""
import ctypes
import json
import os
import subprocess

import pytest

from oclfuse import _capi


@pytest.fixture(scope="module")
def layout():
    exe = os.environ.get("OCLFUSE_ABI_LAYOUT")
    if not exe:
        pytest.skip("OCLFUSE_ABI_LAYOUT (the abi_layout helper) not set: run through meson test")
    return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


def test_every_struct_declared(layout):
    structs = {k for k in layout if k.startswith("oclf_") and layout[k]["fields"]}
    assert structs == set(_capi.STRUCTS), "structs of the header and of _capi differ"


@pytest.mark.parametrize("name", sorted(_capi.STRUCTS))
def test_struct_layout(layout, name):
    cls = _capi.STRUCTS[name]
    c = layout[name]
    py_fields = {f[0]: getattr(cls, f[0]).offset for f in cls._fields_}
    assert py_fields == c["fields"], f"{name}: field offsets (ctypes vs C)"
    assert ctypes.sizeof(cls) == c["size"], f"{name}: size (ctypes vs C)"


def test_enums_are_int(layout):
    for name in ("oclf_status", "oclf_dtype", "oclf_qformat"):
        assert layout[name]["size"] == ctypes.sizeof(_capi.c_enum)


def test_qformat_values():
    """enum oclf_qformat's values as _capi has them."""
    import re
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                        "oclfuse.h")
    found = dict(re.findall(r"OCLF_QFORMAT_(INT8|INT4|Q8_0|Q4_0)\s*=\s*(\d+)",
                            open(path).read()))
    assert {k: int(v) for k, v in found.items()} == {
        name: getattr(_capi, "QFORMAT_" + name) for name in ("INT8", "INT4", "Q8_0", "Q4_0")}


def test_params_item(layout):
    # the anonymous struct of oclf_params.item
    size = layout["oclf_params"]["size"] - layout["oclf_params"]["fields"]["item"]
    assert ctypes.sizeof(_capi.oclf_param) * _capi.MAX_PARAMS == size


def header_functions():
    """{name: parameter count} of every OCLF_API function in oclfuse.h."""
    import re
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                        "oclfuse.h")
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for m in re.finditer(r"OCLF_API\s+[^;(]*?\b(oclf_\w+)\s*\(([^)]*)\)\s*;", text):
        params = m.group(2).strip()
        out[m.group(1)] = 0 if params in ("", "void") else params.count(",") + 1
    assert len(out) > 20, "the header's declarations were not found"
    return out


def test_function_arity():
    """Every function _capi declares exists in the header with as many
    parameters (a parameter added to a C function must reach the ctypes
    declaration)."""
    header = header_functions()
    for name, (_, args) in _capi.FUNCTIONS.items():
        assert name in header, f"{name} is declared in _capi but not in oclfuse.h"
        assert len(args) == header[name], f"{name}: {len(args)} ctypes arguments, " \
                                          f"{header[name]} in oclfuse.h"


def test_every_function_wrapped():
    missing = sorted(set(header_functions()) - set(_capi.FUNCTIONS))
    if missing:
        pytest.skip(f"not yet in python/oclfuse/_capi.py: {', '.join(missing)}")
