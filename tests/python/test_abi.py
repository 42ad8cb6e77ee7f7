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
    for name in ("oclf_status", "oclf_dtype"):
        assert layout[name]["size"] == ctypes.sizeof(_capi.c_enum)


def test_params_item(layout):
    # the anonymous struct of oclf_params.item
    size = layout["oclf_params"]["size"] - layout["oclf_params"]["fields"]["item"]
    assert ctypes.sizeof(_capi.oclf_param) * _capi.MAX_PARAMS == size
