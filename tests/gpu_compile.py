#!/usr/bin/env python3
"""Cross-compiles every program the library can build for a GPU.

usage: gpu_compile.py GPU_VARIANTS CL_DIR OUT_DIR

GPU_VARIANTS (tests/gpu_variants.c, run with OCLF_DEVICE_CLASS=gpu) lists
each distinct (source, options) pair: the GPU heuristic defaults and every
point of the tuner's search spaces. Each is assembled as the library
assembles it (common.h, then the op file with its parts) and compiled by clang with
libclc's builtins for the targets below:

  - at -O0 to LLVM IR (once: it is the same for every target), where any
    function still only declared (not an LLVM intrinsic) is one the
    vendor's compiler would not find either: a plain `inline` helper
    without a body under C99 rules is the usual cause;
  - at -O3 to each target's assembly, which must build; PTX must declare no
    external function, and AMD's register report gives each kernel's VGPR
    count and spills.

A build error or an undefined function fails the suite. Per-kernel VGPRs
and spills go to OUT_DIR/report.tsv. A variant whose VGPRs spill on an AMD
target fails the suite too: the search spaces must not offer it (a spilled
kernel moves its registers through scratch memory, which defeats the point
of fusing). SGPR spills, which land in VGPR lanes, are only reported.

OCLF_GPU_COMPILE_QUICK=1 compiles one variant in eight (the defaults
always), for a short local run; OCLF_GPU_COMPILE_MATCH=TEXT only those whose
source name contains TEXT ("l2topk.cl": that file's programs; "expr-": the
generated expressions, which gpu_variants writes to OUT_DIR/generated and
lists by path). A source's `#include "part"` lines are expanded as the
library's loader expands them. Exits 77 (skip) without clang-15/libclc.
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

CLANG = shutil.which("clang-15")
CLC = "/usr/lib/clc"
TARGETS = [
    # name, clang target flags, libclc builtins, assembly stats?
    ("nvptx64-sm_80", ["-target", "nvptx64-unknown-nvidiacl", "-march=sm_80"],
     "nvptx64--nvidiacl.bc", False),
    ("amdgcn-gfx90a", ["-target", "amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-nogpulib"],
     "amdgcn--amdhsa.bc", True),
    ("amdgcn-gfx1100", ["-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-nogpulib"],
     "amdgcn--amdhsa.bc", True),
]
DECLARE = re.compile(r"^declare .*@([A-Za-z0-9_.$]+)\(", re.M)


def clang(args, src, out):
    cmd = [CLANG, "-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header",
           "-Wno-everything"] + args + ["-o", out, src]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stderr


def amd_stats(asm):
    """{kernel: [vgprs, vgpr spills, sgpr spills, scratch bytes]} from the
    register report clang writes after each kernel's code and the spill
    counts of the kernel descriptors' metadata."""
    stats, name = {}, None
    for line in asm.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s+; @", line)
        if m:
            name = m.group(1)
            stats[name] = [0, 0, 0, 0]
        elif name and (m := re.match(r"; NumVgprs: (\d+)", line)):
            stats[name][0] = int(m.group(1))
        elif name and (m := re.match(r"; ScratchSize: (\d+)", line)):
            stats[name][3] = int(m.group(1))
    # In each kernel's metadata block the SGPR spills come before the
    # descriptor's symbol (NAME.kd), the VGPR spills after it.
    sgpr_spills, kd = 0, None
    for line in asm.splitlines():
        m = re.match(r"\s+\.(sgpr_spill_count|symbol|vgpr_spill_count):\s+(\S+)", line)
        if not m:
            continue
        key, value = m.groups()
        if key == "sgpr_spill_count":
            sgpr_spills = int(value)
        elif key == "symbol":
            kd = value[:-3] if value.endswith(".kd") else value
        elif kd in stats:
            stats[kd][1], stats[kd][2] = int(value), sgpr_spills
    return stats


def expand(cl_dir, name, depth):
    """The source as the library's loader assembles it: each line
    `#include "part"` replaced by the part, between #line markers."""
    with open(os.path.join(cl_dir, name)) as f:
        lines = f.read().split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r'#include "([^"]+)"', line)
        if m and depth < 4:
            out += [f'#line 1 "{m.group(1)}"', expand(cl_dir, m.group(1), depth + 1),
                    f'#line {i + 2} "{name}"']
        else:
            out.append(line)
    return "\n".join(out)


def compile_variant(job):
    idx, source, options, text, tmp = job
    src = os.path.join(tmp, f"v{idx}.cl")
    with open(src, "w") as f:
        f.write(text)
    defs = options.split()
    errors, rows = [], []
    for ti, (name, flags, bc, stats) in enumerate(TARGETS):
        link = ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", os.path.join(CLC, bc)]
        if ti == 0:
            # What is left undefined at -O0 is the same IR for every target.
            ll = os.path.join(tmp, f"v{idx}-{name}.ll")
            rc, err = clang(flags + link + defs + ["-O0", "-S", "-emit-llvm"], src, ll)
            if rc != 0:
                errors.append(f"{source} {options} [{name} -O0]: build failed\n"
                              f"{err.strip()[:2000]}")
                continue
            with open(ll) as f:
                undefined = sorted({d for d in DECLARE.findall(f.read())
                                    if not d.startswith("llvm.")})
            if undefined:
                errors.append(f"{source} {options} [-O0]: undefined {', '.join(undefined)}")
        asm = os.path.join(tmp, f"v{idx}-{name}.s")
        rc, err = clang(flags + link + defs + ["-O3", "-S"], src, asm)
        if rc != 0:
            errors.append(f"{source} {options} [{name} -O3]: build failed\n{err.strip()[:2000]}")
            continue
        if not stats:
            with open(asm) as f:
                externs = re.findall(r"^\s*\.extern\s+\.func\s+(?:\([^)]*\)\s*)?(\w+)",
                                     f.read(), re.M)
            if externs:
                errors.append(f"{source} {options} [{name} -O3]: undefined {', '.join(externs)}")
            continue
        if stats:
            with open(asm) as f:
                for kernel, (vgprs, vspill, sspill, scratch) in sorted(amd_stats(f.read()).items()):
                    rows.append((source, options, name, kernel, vgprs, vspill, sspill, scratch))
    return errors, rows


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    variants_bin, cl_dir, out_dir = sys.argv[1:]
    if not CLANG or not all(os.path.exists(os.path.join(CLC, t[2])) for t in TARGETS):
        print("gpu-compile: clang-15 or libclc-15 is missing; skipped")
        return 77
    env = dict(os.environ, OCLF_DEVICE_CLASS="gpu")
    generated = os.path.join(os.path.abspath(out_dir), "generated")
    os.makedirs(generated, exist_ok=True)
    # Generated programs (expressions) come back as paths into `generated`.
    p = subprocess.run([variants_bin, generated], capture_output=True, text=True, env=env)
    if p.returncode == 77:
        print(p.stderr.strip())
        return 77
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        print("gpu-compile: listing the variants failed", file=sys.stderr)
        return 1
    variants = [line.split("\t", 1) for line in p.stdout.splitlines() if "\t" in line]
    if os.environ.get("OCLF_GPU_COMPILE_QUICK") == "1":
        variants = variants[::8]
    # OCLF_GPU_COMPILE_MATCH=expr- compiles only the programs whose source
    # names contain the text ("l2topk.cl", or "expr-" for the generated expressions).
    match = os.environ.get("OCLF_GPU_COMPILE_MATCH")
    if match:
        variants = [v for v in variants if match in v[0]]
    with open(os.path.join(cl_dir, "common.h")) as f:
        common = f.read()
    bodies = {}
    os.makedirs(out_dir, exist_ok=True)
    errors, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for i, (source, options) in enumerate(variants):
            if source not in bodies:
                bodies[source] = expand(cl_dir, source, 0)
            text = f'#line 1 "common.h"\n{common}\n#line 1 "{source}"\n{bodies[source]}'
            jobs.append((i, source, options, text, tmp))
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for errs, rs in pool.map(compile_variant, jobs):
                errors += errs
                rows += rs
    with open(os.path.join(out_dir, "report.tsv"), "w") as f:
        f.write("source\toptions\ttarget\tkernel\tvgprs\tvgpr_spills\tsgpr_spills\tscratch\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\n")
    # VGPR spills go to scratch memory; SGPR spills go to VGPR lanes, cost
    # instructions only, and are reported in the file, not failed.
    spills = [r for r in rows if r[5]]
    for r in spills:
        errors.append(f"{r[0]} {r[1]} [{r[2]}]: kernel {r[3]} spills {r[5]} VGPRs to "
                      f"scratch memory; the search space must not offer it")
    most = max(rows, key=lambda r: r[4]) if rows else None
    print(f"gpu-compile: {len(variants)} programs x {len(TARGETS)} targets, "
          f"{len(rows)} AMD kernel builds, {len(spills)} spilling, {len(errors)} errors"
          + (f"; most VGPRs: {most[4]} ({most[3]}, {most[1]}, {most[2]})" if most else "")
          + f"; report: {os.path.join(out_dir, 'report.tsv')}")
    for e in errors[:40]:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
