#!/usr/bin/env python3
"""Runs tests/test_kernels on Mesa's OpenCL implementation (rusticl) with its
llvmpipe CPU device, as a third implementation beside POCL and oclgrind.

  rusticl_run.py DIR CLASS EXE OP[:DTYPE] [OP[:DTYPE]...]

DIR is a folder of the build where Debian's mesa-opencl-icd is unpacked
(fetched with `apt-get download` when absent) and where an ICD folder of its
own names the unpacked library by absolute path: OCL_ICD_VENDORS points at
that folder for the child alone, so the package is never installed and POCL
stays every other test's device. CLASS is `cpu` or `gpu`
(OCLF_DEVICE_CLASS: the structures a GPU gets by default), or `check`:
`EXE check OP`, every structure of the op's kernel check. Otherwise each OP runs
`EXE defaults OP`: every dtype, fused and unfused, on the op's check shapes,
with the heuristic's parameters for the class, against the CPU reference
(OP:DTYPE: that dtype alone).

Exit 77 (skip) when rusticl cannot be had here, saying why, or when
OCLF_SKIP_RUSTICL=1.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

PACKAGE = "mesa-opencl-icd"
LIBDIR = "usr/lib/x86_64-linux-gnu"
LIBRARY = "libRusticlOpenCL.so.1"
# llvmpipe reports this while compiling any kernel that reads a kernel
# argument inside a branch (the fused norms' LAYOUT 0 copies of the row loop
# under `if (stage_flag)`). Every argument of ours is a scalar or a pointer at
# a fixed offset, so the offset it takes as uniform is uniform; the results
# are checked regardless.
KNOWN_WARNINGS = ("Treating load_kernel_arg in control flow as uniform",)


def skip(why):
    print("rusticl unavailable, skipped:", why)
    return 77


def unpack(root):
    """Downloads the package into a temporary folder and unpacks it at root."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        return "apt-get/dpkg-deb not found (not a Debian system)"
    with tempfile.TemporaryDirectory() as tmp:
        # apt drops privileges to _apt for downloads: let it write there.
        os.chmod(tmp, 0o777)
        r = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        debs = glob.glob(os.path.join(tmp, PACKAGE + "_*.deb"))
        if r.returncode != 0 or not debs:
            return f"apt-get download {PACKAGE} failed: {r.stdout.strip()[-400:]}"
        # Unpacked beside and renamed into place: the suite's tests may run
        # at once, and the first rename wins.
        part = tempfile.mkdtemp(dir=os.path.dirname(root), prefix="unpack-")
        r = subprocess.run(["dpkg-deb", "-x", debs[0], part], text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            shutil.rmtree(part, ignore_errors=True)
            return f"dpkg-deb -x failed: {r.stdout.strip()[-400:]}"
        try:
            os.rename(part, root)
        except OSError:
            shutil.rmtree(part, ignore_errors=True)
    return None


def prepare(base):
    """The environment that makes rusticl the only platform, or a reason."""
    os.makedirs(base, exist_ok=True)
    root = os.path.join(base, "root")
    lib = os.path.join(root, LIBDIR, LIBRARY)
    if not os.path.exists(lib):
        why = unpack(root)
        if why:
            return None, why
    if not os.path.exists(lib):
        return None, f"{PACKAGE} holds no {LIBRARY}"
    libdir = os.path.dirname(lib)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"]
                                       if env.get("LD_LIBRARY_PATH") else "")
    r = subprocess.run(["ldd", lib], env=env, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    missing = [ln.split()[0] for ln in r.stdout.splitlines() if "not found" in ln]
    if missing:
        return None, ("libraries it needs are not installed (tools/setup.sh installs them): " +
                      " ".join(sorted(set(missing))))
    # The OpenCL C library its compiler links every program with (libclc).
    if not glob.glob("/usr/lib/clc/spirv64-mesa3d-*.spv"):
        return None, "libclc's SPIR-V library (/usr/lib/clc/spirv64-mesa3d-.spv, libclc-15) is missing"
    vendors = os.path.join(base, "vendors")
    os.makedirs(vendors, exist_ok=True)
    with open(os.path.join(vendors, "rusticl.icd"), "w") as f:
        f.write(os.path.abspath(lib) + "\n")
    env["OCL_ICD_VENDORS"] = os.path.abspath(vendors)
    # Only the folder above: no library that the caller's environment names.
    env["OCL_ICD_FILENAMES"] = ""
    env["RUSTICL_ENABLE"] = "swrast"
    # llvmpipe's compiler takes most of the run: without LLVM's optimization
    # passes it took 40 s rather than 100 s for act_and_mul's kernel. What
    # is under test is what the front end makes of the kernels.
    env["GALLIVM_PERF"] = "nopt"
    # Mesa's shader cache inside the build, not in the home folder; a second
    # run skips the compiler.
    env["MESA_SHADER_CACHE_DIR"] = os.path.abspath(os.path.join(base, "shader-cache"))
    env["LP_NUM_THREADS"] = str(min(os.cpu_count() or 1, 4))
    env["OCLF_TEST_PLATFORM"] = "rusticl"
    env.pop("OCLF_TEST_DEVICE_OPTIONAL", None)
    cache = env.get("OCLF_CACHE_DIR", "")
    env["OCLF_CACHE_DIR"] = cache + "-rusticl" if cache else ""
    return env, None


def main():
    if len(sys.argv) < 5 or sys.argv[2] not in ("cpu", "gpu", "check"):
        print(__doc__)
        return 2
    base, cls, exe, ops = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if os.environ.get("OCLF_SKIP_RUSTICL", "0") != "0":
        return skip("OCLF_SKIP_RUSTICL is set")
    env, why = prepare(base)
    if why:
        return skip(why)
    env.pop("OCLF_DEVICE_CLASS", None)
    if cls != "check":
        env["OCLF_DEVICE_CLASS"] = cls
    failed = 0
    for op in ops:
        cmd = [exe, "check" if cls == "check" else "defaults"] + op.split(":", 1)
        print("+", " ".join(cmd), f"(OCLF_DEVICE_CLASS={env.get('OCLF_DEVICE_CLASS', '')})",
              flush=True)
        # Once, on a machine loaded by other builds, the platform listed no
        # device for one process while the next ones found it: try twice.
        for _ in range(2):
            r = subprocess.run(cmd, env=env, text=True, errors="replace",
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            sys.stdout.write(r.stdout)
            absent = "finding a device" in r.stdout or "no OpenCL platform" in r.stdout
            if not absent:
                break
        if absent:
            return skip("the rusticl platform listed no device")
        other = [ln for ln in r.stdout.splitlines()
                 if ln.startswith("MESA:") and not any(k in ln for k in KNOWN_WARNINGS)]
        if other:
            print(f"{op}: Mesa reported what this suite does not know:\n" + "\n".join(other))
            failed += 1
        if r.returncode != 0:
            print(f"{op}: exit status {r.returncode}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
