"""Runs the Python package's pytest suite; exit 77 (skipped) when PyOpenCL,
NumPy or pytest is missing for this interpreter."""
import os
import sys

try:
    import numpy  # noqa: F401
    import pyopencl  # noqa: F401
    import pytest
except ImportError as e:
    print(f"skipped: {e} (install python3-pyopencl python3-numpy python3-pytest)")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
# No cache folder in the source tree; -ra lists what was skipped and why.
# Arguments name test files of this folder to run alone (e.g. test_readme.py).
targets = [os.path.join(here, a) for a in sys.argv[1:]] or [here]
sys.exit(pytest.main(["-q", "-ra", "-p", "no:cacheprovider", "--rootdir", here] + targets))
