"""pip install . (README, "From Python"): meson-python builds the library
from a copy of the source tree into a fresh venv made with
--system-site-packages (Debian's PyOpenCL and NumPy), and the package, imported
from outside both trees, loads the liboclfuse.so.0 installed inside it and
computes rms_norm on the OpenCL device as NumPy does.

Usage: pip_install.py SOURCE_ROOT. Run with the interpreter that has PyOpenCL
(meson option python3). Exit 77 (skipped) when meson-python, venv/ensurepip,
PyOpenCL or NumPy is missing for it. OCLF_PIP_KEEP=1 keeps the temporary
folder (its path is printed).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The command README documents, plus --no-index (nothing may be fetched: the
# build backend and the run-time dependencies all come from Debian) and
# --no-cache-dir (no wheel left in the user's cache).
PIP_ARGS = ["install", "--no-build-isolation", "--no-index", "--no-cache-dir"]

CHECK = r"""
import os, sys
import numpy as np
import oclfuse
from oclfuse import _core

pkg = os.path.dirname(os.path.abspath(oclfuse.__file__))
lib = os.path.abspath(_core.lib._name)
print("package:", pkg)
print("library:", lib)
print("version:", oclfuse.version())
assert pkg.startswith(sys.prefix + os.sep), (pkg, sys.prefix)
assert lib == os.path.join(pkg, "liboclfuse.so.0"), lib
assert oclfuse.version() == sys.argv[1], (oclfuse.version(), sys.argv[1])

x = np.random.default_rng(0).standard_normal((3, 257)).astype(np.float32)
w = np.random.default_rng(1).standard_normal(257).astype(np.float32)
y = oclfuse.rms_norm(x, w, eps=1e-6)
x64 = x.astype(np.float64)
ref = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-6) * w
err = float(np.max(np.abs(y - ref)))
print("rms_norm max |err|:", err)
assert y.shape == x.shape and y.dtype == np.float32
assert np.allclose(y, ref, rtol=1e-5, atol=1e-5), err
print("ok")
"""


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


def project_version(root):
    with open(os.path.join(root, "meson.build")) as f:
        text = f.read()
    head = text[text.index("project("):]
    return head.split("version", 1)[1].split("'")[1]


def main():
    root = os.path.abspath(sys.argv[1])
    for mod, pkg in (("mesonpy", "python3-mesonpy"), ("venv", "python3-venv"),
                     ("ensurepip", "python3-venv"), ("numpy", "python3-numpy"),
                     ("pyopencl", "python3-pyopencl")):
        try:
            __import__(mod)
        except ImportError as e:
            skip(f"{e} for {sys.executable} (install {pkg})")

    tmp = tempfile.mkdtemp(prefix="oclfuse-pip-")
    keep = os.environ.get("OCLF_PIP_KEEP") == "1"
    try:
        # The copy: everything but build folders, git's and meson-python's
        # files, so the source tree is left as it was.
        src = os.path.join(tmp, "src")
        shutil.copytree(root, src, ignore=lambda d, names: [
            n for n in names
            if (d == root and (n.startswith("build") or n.startswith(".mesonpy")))
            or n in (".git", "__pycache__")])

        venv = os.path.join(tmp, "venv")
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        if r.returncode != 0:
            skip(f"{sys.executable} -m venv failed (install python3-venv)")
        vpy = os.path.join(venv, "bin", "python")

        # Neither the build's library nor the source package may stand in
        # for the installed ones; caches and tuning databases in tmp.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OCLF_", "OCLFUSE_", "PYTHON", "PIP_"))}
        env["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        env["XDG_DATA_HOME"] = os.path.join(tmp, "data")
        env["OCLF_CACHE_DIR"] = os.path.join(tmp, "program-cache")

        cmd = [vpy, "-m", "pip"] + PIP_ARGS + [src]
        print("+", " ".join(cmd), flush=True)
        r = subprocess.run(cmd, cwd=tmp, env=env)
        if r.returncode != 0:
            print(f"FAIL: pip install exited {r.returncode}")
            return 1
        print(f"venv and pip install: {time.monotonic() - t0:.1f} s", flush=True)

        # Run from an empty folder: the source copy is not on sys.path.
        run_dir = os.path.join(tmp, "elsewhere")
        os.mkdir(run_dir)
        r = subprocess.run([vpy, "-c", CHECK, project_version(root)], cwd=run_dir, env=env)
        if r.returncode != 0:
            print(f"FAIL: the installed package exited {r.returncode}")
            return 1
        return 0
    finally:
        if keep:
            print("kept:", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
