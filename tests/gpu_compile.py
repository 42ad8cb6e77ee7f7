#!/usr/bin/env python3
"""Cross-compiles every program the library can build for a GPU.

usage: gpu_compile.py GPU_VARIANTS CL_DIR OUT_DIR

GPU_VARIANTS (tests/gpu_variants.c, run with OCLF_DEVICE_CLASS=gpu) lists
each distinct (source, options) pair, marked "default" where a GPU
heuristic default chooses it and "space" where only a point of the tuner's
search spaces offers it. Each is assembled as the library assembles it
(common.h, then the op file with its parts) and built by three vendors'
back ends:

  - clang with libclc's builtins, at -O0 to LLVM IR (once: it is the same
    for every target), where any function still only declared (not an
    LLVM intrinsic) is one the vendor's compiler would not find either: a
    plain `inline` helper without a body under C99 rules is the usual
    cause; then at -O3 to NVIDIA PTX (sm_80) and AMD assembly (gfx90a,
    gfx1100; gfx942 through clang-19 with libclc-19, where clang-19 is
    installed), which must build; PTX must declare no external function,
    and AMD's register report gives each kernel's VGPRs and spills;
  - NVIDIA's assembler, ptxas -v, on that PTX for sm_80 and sm_90 (PTX for
    sm_80 runs on sm_90, as the driver would compile it there): registers,
    spill bytes and shared memory per kernel;
  - Intel's offline compiler (ocloc, IGC) on the source for dg2-g10 (Arc),
    pvc (Data Center Max) and tgllp (Xe integrated) with the options the
    library passes: the SIMD width it chose, its registers, spills (its
    "spilled around N" warning) and the per-thread scratch and private
    memory of each kernel's zeinfo.

Programs built with cl/mma.h's native instruction form (-DOCLF_MMA=1:
inline PTX, what linear's matrix-unit structure gets on compute
capability 8.0 and newer) go to NVIDIA's back end alone.

The wavefront's matrix instruction of cl/mma.h (-DOCLF_MFMA=1, clang's
builtin) is built on its own for gfx90a and gfx942, where the emitted
code must hold v_mfma_f32_16x16x16 in f16 and bf16; the programs that
use it (linear's STAGE 4 on a CDNA device) go to those two back ends
alone, and their hot loop must hold the instruction (gpu_report's gate).
Likewise the sub-group's DPAS wrapper (-DOCLF_DPAS=1) through IGC for pvc,
whose code must hold dpas.

Each back end also gets the sub-group form its device would (SUBGROUP
below: what lib/device.c decides and passes among the device-quirk
options, which the list does not carry), so the native shuffles build.

A build error or an undefined function fails the suite, and so does a
kernel that spills on any back end: AMD VGPRs to scratch, ptxas spill
stores or loads, IGC spills. The search spaces must not offer such a point
(a spilled kernel moves its registers through memory, which defeats the
point of fusing). AMD SGPR spills, which land in VGPR lanes, are only
reported. Per-kernel figures go to OUT_DIR/report.tsv.

The GPU report (tests/gpu_report.py, docs/gpu-model.md): the machine code
of every GPU default (of every program with OCLF_GPU_REPORT_FULL=1) is
read for sm_90 and sm_80 (nvdisasm of ptxas's cubin), gfx942, gfx90a,
gfx1100 and, through ocloc disasm, pvc and dg2: registers, local memory,
spills, occupancy, the hot loop's global accesses by width, local-memory
instructions per FMA, the FMA share of the loop, and the model's
predicted fraction of HBM bandwidth or FP32 peak; written to
OUT_DIR/gpu-report.{tsv,json,txt}. Its gate (every miss and why in
OUT_DIR/gpu-gate.tsv) fails the suite on a miss
that tests/gpu_gate_known.tsv does not list, and names the listed ones
that no longer miss; OCLF_GPU_GATE_WRITE=1 writes the list from the run
instead (to remove what was fixed; a new miss is fixed, not listed).
OCLF_GPU_GATE_KNOWN=PATH reads (and writes) another list; OCLF_GPU_REPORT=0
leaves the report and the gate out.
nvdisasm, where not on PATH, comes from NVIDIA's wheel (pip download, into
OUT_DIR/../nvdisasm), libclc-19 from its Debian package (OUT_DIR/../clc19).

IGC is not a package this machine installs: its Debian packages are
downloaded (apt-get download) and unpacked under OUT_DIR/../igc, so its
OpenCL ICD is never registered; ocloc runs from there. Where the download
fails, or ptxas is not on PATH, that back end is skipped and the summary
says so.

What is compiled: by default every GPU default plus a fixed sample of the
search-space points (one in OCLF_GPU_COMPILE_SAMPLE, 8 unless set, 0 for
none, chosen by a hash of source and options, so the sample does not move
when other points come or go), every back end on each. OCLF_GPU_COMPILE_FULL=1
compiles every point. OCLF_GPU_COMPILE_QUICK=1 keeps one in eight of that
selection, for a short local run; OCLF_GPU_COMPILE_MATCH=TEXT only those
whose source name contains TEXT ("l2topk.cl": that file's programs;
"expr-": the generated expressions, which gpu_variants writes to
OUT_DIR/generated and lists by path). A source's `#include "part"` lines
are expanded as the library's loader expands them. Exits 77 (skip) without
clang-15/libclc.
"""
import concurrent.futures
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import gpu_report  # noqa: E402  (beside this file)

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
# gfx942 (MI300) needs a newer back end than clang-15 has (its closest
# CDNA3 target is gfx940): clang-19, with libclc-19's builtins unpacked
# beside the build (libclc-19 and libclc-15 cannot be installed together).
CLANG19 = shutil.which("clang-19")
GFX942 = ("amdgcn-gfx942", ["-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942", "-nogpulib"],
          "amdgcn--amdhsa.bc", True)
# The sub-group form each back end's device gets from lib/device.c (the
# device-quirk options, which the variant list does not carry): warp
# shuffles in PTX, the wavefront's permute (wave64 on CDNA, wave32 on
# RDNA 3 as clang builds it), cl_intel_subgroups' shuffle at the width 16
# its kernels require. Only the programs that include cl/subgroup.h read
# them.
SUBGROUP = {
    "nvptx64-sm_80": ["-DOCLF_SUBGROUP_FORM=2", "-DOCLF_SUBGROUP_WIDTH=32"],
    "amdgcn-gfx90a": ["-DOCLF_SUBGROUP_FORM=3", "-DOCLF_SUBGROUP_WIDTH=64"],
    "amdgcn-gfx1100": ["-DOCLF_SUBGROUP_FORM=3", "-DOCLF_SUBGROUP_WIDTH=32"],
    "amdgcn-gfx942": ["-DOCLF_SUBGROUP_FORM=3", "-DOCLF_SUBGROUP_WIDTH=64"],
    "igc": ["-DOCLF_SUBGROUP_FORM=1", "-DOCLF_SUBGROUP_WIDTH=16", "-DOCLF_SUBGROUP_INTEL=1"],
}
DECLARE = re.compile(r"^declare .*@([A-Za-z0-9_.$]+)\(", re.M)
PTXAS = shutil.which("ptxas")
PTXAS_ARCHS = ["sm_80", "sm_90"]
IGC_DEVICES = ["dg2-g10", "pvc", "tgllp"]
# ocloc and the libraries it loads (Debian bookworm's names).
IGC_PACKAGES = ["intel-opencl-icd", "libigc1", "libigdfcl1", "libigdgmm12", "libopencl-clang14",
                "libllvm14", "libllvmspirvlib14", "libclang-cpp14"]
# Set by main() when ocloc runs: (path, environment).
OCLOC = None
# Set by main(): nvdisasm (PATH or the wheel unpacked beside the build) and
# libclc-19's folder, or None where they could not be had.
NVDISASM = None
CLC19 = None


# The OpenCL C version the library builds every program as (lib/device.c,
# OCLF_CL_STD_*): each back end here compiles as that version too.
CL_STD = "-cl-std=CL1.2"


def clang(args, src, out, compiler=None):
    cmd = [compiler or CLANG, "-x", "cl", CL_STD, "-Xclang", "-finclude-default-header",
           "-Wno-everything"] + args + ["-o", out, src]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stderr


def amd_agprs(asm):
    """{kernel: (AGPRs, VGPRs and AGPRs together)} where clang reports them
    (gfx90a and gfx942, whose one register file a lane holds both: the
    total is what bounds the waves a SIMD)."""
    out, name = {}, None
    for line in asm.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s+; @", line)
        if m:
            name = m.group(1)
        elif name and (m := re.match(r"; NumAgprs: (\d+)", line)):
            out[name] = (int(m.group(1)), out.get(name, (0, 0))[1])
        elif name and (m := re.match(r"; TotalNumVgprs: (\d+)", line)):
            out[name] = (out.get(name, (0, 0))[0], int(m.group(1)))
    return out


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


def igc_setup(root):
    """ocloc from IGC's Debian packages unpacked under root (downloaded once
    per build folder): (ocloc, environment), or (None, why)."""
    ocloc = os.path.join(root, "usr", "bin", "ocloc")
    libs = [os.path.join(root, "usr", "lib", "x86_64-linux-gnu"),
            os.path.join(root, "usr", "lib", "llvm-14", "lib")]
    done = os.path.join(root, ".unpacked")
    if not os.path.exists(done):
        if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
            return None, "apt-get or dpkg-deb is missing"
        shutil.rmtree(root, ignore_errors=True)
        with tempfile.TemporaryDirectory() as debs:
            p = subprocess.run(["apt-get", "download"] + IGC_PACKAGES, cwd=debs,
                               capture_output=True, text=True)
            if p.returncode != 0:
                return None, "apt-get download failed: " + (p.stderr.strip().splitlines()
                                                           or ["?"])[-1]
            for deb in sorted(os.listdir(debs)):
                if deb.endswith(".deb"):
                    p = subprocess.run(["dpkg-deb", "-x", os.path.join(debs, deb), root],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        return None, f"dpkg-deb -x {deb} failed: {p.stderr.strip()}"
        open(done, "w").close()
    if not os.access(ocloc, os.X_OK):
        return None, f"{ocloc} is missing from the unpacked packages"
    # ocloc disasm loads IGA by its unversioned name
    iga = os.path.join(libs[0], "libiga64.so")
    if not os.path.exists(iga) and os.path.exists(iga + ".1"):
        os.symlink("libiga64.so.1", iga)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    return ocloc, env


def nvdisasm_setup(root):
    """nvdisasm: on PATH, else from NVIDIA's wheel (pip download, unpacked
    under root once): (path, None) or (None, why)."""
    found = shutil.which("nvdisasm")
    if found:
        return found, None
    done = os.path.join(root, ".unpacked")
    if not os.path.exists(done):
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                            root, "nvidia-cuda-nvdisasm"], capture_output=True, text=True)
        wheels = [w for w in os.listdir(root) if w.endswith(".whl")]
        if p.returncode != 0 or not wheels:
            return None, "pip download nvidia-cuda-nvdisasm failed: " + \
                ((p.stderr.strip().splitlines() or ["?"])[-1])
        import zipfile
        with zipfile.ZipFile(os.path.join(root, wheels[0])) as z:
            z.extractall(root)
        open(done, "w").close()
    for d, _, files in os.walk(root):
        if "nvdisasm" in files:
            path = os.path.join(d, "nvdisasm")
            os.chmod(path, 0o755)
            return path, None
    return None, "the nvdisasm wheel holds no nvdisasm"


def clc19_setup(root):
    """libclc-19's builtins (apt-get download, unpacked under root once):
    (folder, None) or (None, why)."""
    clc = os.path.join(root, "usr", "lib", "clc")
    done = os.path.join(root, ".unpacked")
    if not os.path.exists(done):
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        with tempfile.TemporaryDirectory() as debs:
            p = subprocess.run(["apt-get", "download", "libclc-19"], cwd=debs,
                               capture_output=True, text=True)
            debs_got = [d for d in os.listdir(debs) if d.endswith(".deb")]
            if p.returncode != 0 or not debs_got:
                return None, "apt-get download libclc-19 failed"
            p = subprocess.run(["dpkg-deb", "-x", os.path.join(debs, debs_got[0]), root],
                               capture_output=True, text=True)
            if p.returncode != 0:
                return None, f"dpkg-deb -x failed: {p.stderr.strip()}"
        open(done, "w").close()
    if not os.path.exists(os.path.join(clc, GFX942[2])):
        return None, f"{clc} has no {GFX942[2]}"
    return clc, None


def elf_section(data, wanted):
    """The bytes of the ELF64 section named `wanted`, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3a)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]
    for name, _, _, _, off, size in heads:
        end = data.index(b"\0", names + name)
        if data[names + name:end].decode() == wanted:
            return data[off:off + size]
    return None


def zeinfo_stats(text):
    """{kernel: [grf registers, simd width, scratch bytes, private bytes,
    local (SLM) bytes]} from a zebin's .ze_info (YAML: kernels, each with
    its execution_env and per_thread_memory_buffers)."""
    stats, name, buf, in_kernels = {}, None, None, False
    for line in text.splitlines():
        if re.match(r"^\S", line):  # a top-level key (kernels_misc_info repeats the names)
            in_kernels, name = line.startswith("kernels:"), None
            continue
        if not in_kernels:
            continue
        if m := re.match(r"^  - name:\s+(\S+)", line):
            name = m.group(1)
            stats[name] = [0, 0, 0, 0, 0]
        elif name is None:
            continue
        elif m := re.match(r"^\s+slm_size:\s+(\d+)", line):
            stats[name][4] = int(m.group(1))
        elif m := re.match(r"^\s+grf_count:\s+(\d+)", line):
            stats[name][0] = int(m.group(1))
        elif m := re.match(r"^\s+simd_size:\s+(\d+)", line):
            stats[name][1] = int(m.group(1))
        elif m := re.match(r"^\s+- type:\s+(\w+)", line):
            buf = m.group(1)
        elif (m := re.match(r"^\s+size:\s+(\d+)", line)) and buf in ("scratch", "private"):
            stats[name][2 if buf == "scratch" else 3] += int(m.group(1))
            buf = None
    return stats


IGC_SPILL = re.compile(r"kernel (\w+)\s+compiled SIMD(\d+) allocated (\d+) regs and "
                       r"spilled around (\d+)")


def igc_disasm(zebin_path, device, tmp):
    """{kernel: assembly text} from ocloc disasm of a zebin ({} where IGA
    is not there)."""
    ocloc, env = OCLOC
    out = zebin_path + ".dis"
    # (the dump folder must exist, and be named with its trailing slash)
    os.makedirs(out, exist_ok=True)
    subprocess.run([ocloc, "disasm", "-file", zebin_path, "-device", device, "-dump", out + "/"],
                   capture_output=True, text=True, env=env)
    asm = {}
    if os.path.isdir(out):
        for name in os.listdir(out):
            if m := re.match(r"^\.text\.(\w+)\.asm$", name):
                with open(os.path.join(out, name), errors="replace") as f:
                    asm[m.group(1)] = f.read()
        shutil.rmtree(out, ignore_errors=True)
    return asm


def igc_build(src, options, device, tmp, base, disasm=False):
    """ocloc on one source for one device: (error or None, {kernel: [regs,
    simd, spills, scratch, private, slm]}, {kernel: assembly} where disasm)."""
    ocloc, env = OCLOC
    out = base + "-" + device
    cmd = [ocloc, "compile", "-file", src, "-device", device, "--format", "zebin",
           "-exclude_ir", "-options", f"{CL_STD} {options}", "-out_dir", tmp, "-output",
           os.path.basename(out), "-output_no_suffix"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log = p.stdout + p.stderr
    try:
        with open(out, "rb") as f:
            zebin = f.read()
    except OSError:
        zebin = None
    asm = igc_disasm(out, device, tmp) if disasm and zebin and p.returncode == 0 else {}
    for leftover in (out, out + ".spv"):
        if os.path.exists(leftover):
            os.remove(leftover)
    if p.returncode != 0 or not zebin:
        return log.strip()[-2000:] or f"ocloc exited {p.returncode}", {}, {}
    info = elf_section(zebin, ".ze_info")
    if info is None:
        return "ocloc wrote no .ze_info section", {}, {}
    stats = {k: [v[0], v[1], 0, v[2], v[3], v[4]]
             for k, v in zeinfo_stats(info.decode()).items()}
    for kernel, simd, regs, spilled in IGC_SPILL.findall(log):
        row = stats.setdefault(kernel, [int(regs), int(simd), 0, 0, 0, 0])
        row[2] = int(spilled)
    return None, stats, asm


def ptxas_stats(log):
    """{kernel: [registers, spill bytes (stores + loads), stack bytes,
    shared bytes]} from ptxas -v."""
    stats, name = {}, None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
            stats[name] = [0, 0, 0, 0]
        elif m := re.search(r"Function properties for (\w+)", line):
            # a called function's frame (not inlined) belongs to no kernel row
            name = m.group(1) if m.group(1) in stats else None
        elif name and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                                      r"(\d+) bytes spill loads", line)):
            stats[name][1] = int(m.group(2)) + int(m.group(3))
            stats[name][2] = int(m.group(1))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            stats[name][0] = int(m.group(1))
            if m := re.search(r"(\d+) bytes smem", line):
                stats[name][3] = int(m.group(1))
    return stats


# report.tsv: one row per kernel and target. regs: AMD VGPRs, PTX
# registers, IGC GRF registers; simd: IGC's SIMD width (0 elsewhere);
# spills: AMD VGPRs spilled, ptxas spill bytes (stores + loads), IGC's
# "spilled around" figure; scratch: AMD scratch, ptxas stack frame, IGC
# per-thread scratch (bytes); private: IGC per-thread private memory;
# shared: ptxas shared memory (bytes).
COLUMNS = ["source", "options", "target", "kernel", "regs", "simd", "spills", "sgpr_spills",
           "scratch", "private", "shared"]


def amd_lds(asm):
    """{kernel: LDS bytes per work-group} from clang's register report."""
    lds, name = {}, None
    for line in asm.splitlines():
        if m := re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s+; @", line):
            name = m.group(1)
        elif name and (m := re.match(r"; LDSByteSize: (\d+)", line)):
            lds[name] = int(m.group(1))
    return lds


def compile_variant(job):
    idx, source, options, text, tmp, report = job
    src = os.path.join(tmp, f"v{idx}.cl")
    with open(src, "w") as f:
        f.write(text)
    defs = options.split()
    errors, rows, reports = [], [], []

    def row(target, kernel, regs=0, simd=0, spills=0, sgpr=0, scratch=0, private=0, shared=0):
        rows.append((source, options, target, kernel, regs, simd, spills, sgpr, scratch, private,
                     shared))

    def analyse(target, code_by_kernel, stats):
        for kernel, code in sorted(code_by_kernel.items()):
            if kernel in stats:
                try:
                    reports.append(gpu_report.analyse(source, options, target, kernel, code,
                                                      stats[kernel]))
                except Exception as e:  # a reader's bug must not hide the compile result
                    errors.append(f"{source} {options} [{target}]: gpu report of {kernel} "
                                  f"failed: {e!r}")

    targets = list(TARGETS) + ([GFX942] if CLC19 else [])
    # The native matrix-unit form (cl/mma.h, OCLF_MMA 1) is inline PTX:
    # NVIDIA's back end alone builds it.
    native_mma = "-DOCLF_MMA=1" in defs
    if native_mma:
        targets = [t for t in targets if t[0].startswith("nvptx")]
    # The wavefront's (OCLF_MFMA 1, clang's builtin) exists on CDNA 2 and
    # 3 alone: the gfx90a and gfx942 back ends.
    native_mfma = "-DOCLF_MFMA=1" in defs
    if native_mfma:
        targets = [t for t in targets if t[0] in MFMA_EXPECT]
    for ti, (name, flags, bc, stats) in enumerate(targets):
        compiler = CLANG19 if name == GFX942[0] else CLANG
        clc = CLC19 if name == GFX942[0] else CLC
        link = ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", os.path.join(clc, bc)]
        if ti == 0:
            # What is left undefined at -O0 is the same IR for every target.
            ll = os.path.join(tmp, f"v{idx}-{name}.ll")
            rc, err = clang(flags + link + defs + SUBGROUP[name] + ["-O0", "-S", "-emit-llvm"],
                            src, ll)
            if rc != 0:
                errors.append(f"{source} {options} [{name} -O0]: build failed\n"
                              f"{err.strip()[:2000]}")
                continue
            with open(ll) as f:
                undefined = sorted({d for d in DECLARE.findall(f.read())
                                    if not d.startswith("llvm.")})
            os.remove(ll)
            if undefined:
                errors.append(f"{source} {options} [-O0]: undefined {', '.join(undefined)}")
        asm = os.path.join(tmp, f"v{idx}-{name}.s")
        rc, err = clang(flags + link + defs + SUBGROUP[name] + ["-O3", "-S"], src, asm, compiler)
        if rc != 0:
            errors.append(f"{source} {options} [{name} -O3]: build failed\n{err.strip()[:2000]}")
            continue
        with open(asm) as f:
            code = f.read()
        if stats:
            amd = amd_stats(code)
            for kernel, (vgprs, vspill, sspill, scratch) in sorted(amd.items()):
                row(name, kernel, regs=vgprs, spills=vspill, sgpr=sspill, scratch=scratch)
            if report:
                lds = amd_lds(code)
                agprs = amd_agprs(code)
                analyse(name, gpu_report.read_amd(code),
                        {k: dict(regs=max(v[0], agprs.get(k, (0, 0))[1]), spills=v[1],
                                 scratch=v[3], lds=lds.get(k, 0), agprs=agprs.get(k, (0, 0))[0])
                         for k, v in amd.items()})
            os.remove(asm)
            continue
        externs = re.findall(r"^\s*\.extern\s+\.func\s+(?:\([^)]*\)\s*)?(\w+)", code, re.M)
        if externs:
            errors.append(f"{source} {options} [{name} -O3]: undefined {', '.join(externs)}")
        for arch in PTXAS_ARCHS if PTXAS else []:
            cubin = os.path.join(tmp, f"v{idx}-{arch}.cubin")
            p = subprocess.run([PTXAS, "-v", f"-arch={arch}", asm, "-o", cubin],
                               capture_output=True, text=True)
            sass = None
            if report and NVDISASM and p.returncode == 0 and os.path.exists(cubin):
                d = subprocess.run([NVDISASM, "-c", cubin], capture_output=True, text=True)
                sass = d.stdout if d.returncode == 0 else None
                if sass is None:
                    errors.append(f"{source} {options} [nvdisasm {arch}]: failed\n"
                                  f"{d.stderr.strip()[:2000]}")
            if os.path.exists(cubin):
                os.remove(cubin)
            if p.returncode != 0:
                errors.append(f"{source} {options} [ptxas {arch}]: failed\n"
                              f"{(p.stdout + p.stderr).strip()[:2000]}")
                continue
            nv = ptxas_stats(p.stderr + p.stdout)
            for kernel, (regs, spill, stack, shared) in sorted(nv.items()):
                row(f"ptxas-{arch}", kernel, regs=regs, spills=spill, scratch=stack,
                    shared=shared)
            if sass is not None:
                analyse(f"ptxas-{arch}", gpu_report.read_sass(sass),
                        {k: dict(regs=v[0], spills=v[1], scratch=v[2], shared=v[3])
                         for k, v in nv.items()})
        os.remove(asm)
    devices = [d for d in IGC_DEVICES if not os.environ.get("OCLF_GPU_REPORT_ONLY") or
               f"igc-{d}" in gpu_report.REPORT_TARGETS]
    for device in devices if OCLOC and not native_mma and not native_mfma else []:
        target = f"igc-{device}"
        want = report and target in gpu_report.REPORT_TARGETS
        err, stats, asm = igc_build(src, " ".join([options] + SUBGROUP["igc"]), device, tmp,
                                    os.path.join(tmp, f"v{idx}"), disasm=want)
        if err:
            errors.append(f"{source} {options} [igc {device}]: build failed\n{err}")
            continue
        for kernel, (regs, simd, spills, scratch, private, _) in sorted(stats.items()):
            row(target, kernel, regs=regs, simd=simd, spills=spills, scratch=scratch,
                private=private)
        if want:
            if not asm:
                errors.append(f"{source} {options} [igc {device}]: ocloc disasm gave no "
                              f"assembly")
            analyse(target, {k: gpu_report.read_igc(v) for k, v in asm.items()},
                    {k: dict(regs=v[0], simd=v[1], spills=v[2], scratch=v[3], grf=v[0],
                             slm=v[5]) for k, v in stats.items()})
    os.remove(src)
    return errors, rows, reports


def select(variants):
    """The variants this run compiles (see the module's docstring)."""
    if os.environ.get("OCLF_GPU_COMPILE_FULL") == "1":
        chosen = list(variants)
    else:
        every = int(os.environ.get("OCLF_GPU_COMPILE_SAMPLE") or 8)
        chosen = [v for v in variants
                  if v[2] == "default" or
                  (every > 0 and zlib.crc32(f"{v[0]}\t{v[1]}".encode()) % every == 0)]
    if os.environ.get("OCLF_GPU_COMPILE_QUICK") == "1":
        chosen = chosen[::8]
    # OCLF_GPU_COMPILE_MATCH=expr- compiles only the programs whose source
    # name and options contain the text ("l2topk.cl", "expr-" for the
    # generated expressions, or "PAGED=1 -DOCLF_WGS=32").
    match = os.environ.get("OCLF_GPU_COMPILE_MATCH")
    if match:
        chosen = [v for v in chosen if match in f"{v[0]} {v[1]}"]
    return chosen


# A kernel calling each wavefront matrix wrapper once, built with the
# native form: the instructions AMD's back ends must emit for it.
MFMA_CHECK = """
__kernel void mfma_check(__global const uint2 *A, __global const uint2 *B, __global float4 *D)
{
    const uint lane = get_local_id(0);
    uint a[2] = {A[lane].x, A[lane].y}, b[2] = {B[lane].x, B[lane].y};
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4], e[4];
    oclf_mfma_16x16x16_f16(d, a, b, c, lane, 0);
    oclf_mfma_16x16x16_bf16(e, a, b, d, lane, 0);
    D[lane] = (float4)(e[0], e[1], e[2], e[3]);
}
"""
MFMA_EXPECT = {"amdgcn-gfx90a": ["v_mfma_f32_16x16x16f16", "v_mfma_f32_16x16x16bf16_1k"],
               "amdgcn-gfx942": ["v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16_bf16"]}


def mfma_check(cl_dir, tmp):
    """Builds cl/mma.h's wavefront matrix wrappers in their native form for
    gfx90a and gfx942; returns (errors, summary lines)."""
    with open(os.path.join(cl_dir, "mma.h")) as f:
        text = f.read() + MFMA_CHECK
    src = os.path.join(tmp, "mfma_check.cl")
    with open(src, "w") as f:
        f.write(text)
    errors, lines = [], []
    targets = [t for t in TARGETS if t[0] in MFMA_EXPECT] + ([GFX942] if CLC19 else [])
    for name, flags, bc, _ in targets:
        compiler = CLANG19 if name == GFX942[0] else CLANG
        clc = CLC19 if name == GFX942[0] else CLC
        link = ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", os.path.join(clc, bc)]
        asm = os.path.join(tmp, f"mfma_check-{name}.s")
        rc, err = clang(flags + link + ["-DOCLF_MFMA=1", "-O3", "-S"], src, asm, compiler)
        if rc != 0:
            errors.append(f"mma.h -DOCLF_MFMA=1 [{name}]: build failed\n{err.strip()[:2000]}")
            continue
        with open(asm) as f:
            code = f.read()
        missing = [m for m in MFMA_EXPECT[name] if not re.search(rf"\b{m}\b", code)]
        if missing:
            errors.append(f"mma.h -DOCLF_MFMA=1 [{name}]: no {', '.join(missing)} in the code")
        else:
            lines.append(f"  {name}: the wavefront wrappers emit {', '.join(MFMA_EXPECT[name])}")
    return errors, lines


# The same for the sub-group's matrix wrappers (DPAS, sub-groups of 16).
DPAS_CHECK = """
__attribute__((intel_reqd_sub_group_size(16)))
__kernel void dpas_check(__global const ushort8 *A, __global const uint8 *B, __global float8 *D)
{
    const uint l = get_global_id(0);
    const ushort8 av = A[l];
    const uint8 bv = B[l];
    ushort a[8] = {av.s0, av.s1, av.s2, av.s3, av.s4, av.s5, av.s6, av.s7};
    uint b[8] = {bv.s0, bv.s1, bv.s2, bv.s3, bv.s4, bv.s5, bv.s6, bv.s7};
    float c[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, d[8], e[8];
    oclf_dpas_m8n16k16_f16(d, a, b, c, l & 15u, 0);
    oclf_dpas_m8n16k16_bf16(e, a, b, d, l & 15u, 0);
    D[l] = (float8)(e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
}
"""


def dpas_check(cl_dir, tmp):
    """Builds cl/mma.h's sub-group matrix wrappers in their native form for
    pvc with IGC; returns (errors, summary lines)."""
    if not OCLOC:
        return [], []
    with open(os.path.join(cl_dir, "mma.h")) as f:
        text = f.read() + DPAS_CHECK
    src = os.path.join(tmp, "dpas_check.cl")
    with open(src, "w") as f:
        f.write(text)
    err, _, asm = igc_build(src, "-DOCLF_DPAS=1", "pvc", tmp, os.path.join(tmp, "dpas_check"),
                            disasm=True)
    if err:
        return [f"mma.h -DOCLF_DPAS=1 [igc-pvc]: build failed\n{err}"], []
    code = "\n".join(asm.values())
    found = sorted(set(re.findall(r"\bdpas\.\d+x\d+", code)))
    if len(re.findall(r"\bdpas\.", code)) < 2:
        return [f"mma.h -DOCLF_DPAS=1 [igc-pvc]: fewer than two dpas in the code"], []
    return [], [f"  igc-pvc: the sub-group wrappers emit {', '.join(found)} (f16 and bf16)"]


def report_and_gate(reports, out_dir, cl_dir):
    """Writes the GPU report (OUT_DIR/gpu-report.{tsv,json,txt}), prints
    its summary and runs the gate against tests/gpu_gate_known.tsv: the
    errors of the new misses."""
    if not reports:
        return []
    for r in reports:
        r["source"] = os.path.basename(r["source"])
    tsv = gpu_report.write(reports, out_dir)
    with open(os.path.join(out_dir, "gpu-report.txt"), "w") as f:
        gpu_report.table(reports, f)
    print(f"gpu-report: {len(reports)} kernel rows on "
          f"{len({r['target'] for r in reports})} targets: {tsv} (and .json, .txt)")
    for target in gpu_report.REPORT_TARGETS:
        mine = [r for r in reports if r["target"] == target]
        mem = [r for r in mine if r["bound"] == "memory"]
        if not mine:
            continue
        wide = [r for r in mem if r["wide_fraction"] == 1.0]
        pred = sorted(r["predicted"] for r in mem)
        print(f"  {target}: {len(mine)} kernels, {len(mem)} memory-bound: {len(wide)} with only "
              f"16-byte hot-loop accesses; predicted HBM fraction median "
              f"{pred[len(pred) // 2] if pred else 0:.0%}")
    known_path = os.environ.get("OCLF_GPU_GATE_KNOWN") or os.path.join(
        os.path.dirname(os.path.abspath(cl_dir)), "tests", "gpu_gate_known.tsv")
    known = gpu_report.read_known(known_path)
    complete = not any(os.environ.get(v) for v in ("OCLF_GPU_COMPILE_QUICK",
                                                   "OCLF_GPU_COMPILE_MATCH"))
    # A partial run says fixed only of the programs it reported on.
    new, still, fixed = gpu_report.gate(reports, known, complete=complete)
    if os.environ.get("OCLF_GPU_GATE_WRITE") == "1":
        gpu_report.write_known(known_path, set(new) | set(still))
        print(f"gpu-gate: wrote {len(new) + len(still)} misses to {known_path}")
        return []
    with open(os.path.join(out_dir, "gpu-gate.tsv"), "w") as f:
        f.write("source\toptions\tkernel\ttarget\treason\tdetail\tlisted\n")
        for key, detail in sorted({**still, **new}.items()):
            f.write("\t".join(key) + f"\t{detail}\t{'known' if key in still else 'new'}\n")
    by = {}
    for key in still:
        by[(key[3], key[4])] = by.get((key[3], key[4]), 0) + 1
    print(f"gpu-gate: {len(still)} known misses, {len(new)} new, {len(fixed)} listed that no "
          f"longer miss{'' if complete else ' (partial run)'}; every miss and why: "
          f"{os.path.join(out_dir, 'gpu-gate.tsv')}")
    for (target, reason), n in sorted(by.items()):
        print(f"  known: {target} {reason}: {n}")
    for key in fixed[:40]:
        print(f"  no longer misses (remove from {os.path.basename(known_path)}): "
              f"{' | '.join(key)}")
    errors = []
    for key, detail in sorted(new.items()):
        errors.append(f"gpu-gate: new miss: {key[0]} {key[1]} [{key[3]}] kernel {key[2]}: "
                      f"{key[4]}: {detail}")
    return errors


def main():
    global OCLOC, NVDISASM, CLC19
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    variants_bin, cl_dir, out_dir = sys.argv[1:]
    if not CLANG or not all(os.path.exists(os.path.join(CLC, t[2])) for t in TARGETS):
        print("gpu-compile: clang-15 or libclc-15 is missing; skipped")
        return 77
    started = time.monotonic()
    env = dict(os.environ, OCLF_DEVICE_CLASS="gpu")
    out_dir = os.path.abspath(out_dir)
    generated = os.path.join(out_dir, "generated")
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
    variants = [line.split("\t") for line in p.stdout.splitlines() if line.count("\t") == 2]
    if not variants:
        print("gpu-compile: gpu_variants listed no programs", file=sys.stderr)
        return 1
    chosen = select(variants)
    skipped = []
    if not PTXAS:
        skipped.append("ptxas is not on PATH: the NVIDIA assembler step is skipped")
    ocloc, why = igc_setup(os.path.join(os.path.dirname(out_dir), "igc"))
    if ocloc:
        OCLOC = (ocloc, why)
    else:
        skipped.append(f"IGC could not be fetched ({why}): the Intel step is skipped")
    report_all = os.environ.get("OCLF_GPU_REPORT_FULL") == "1"
    report_none = os.environ.get("OCLF_GPU_REPORT") == "0"
    NVDISASM, why = nvdisasm_setup(os.path.join(os.path.dirname(out_dir), "nvdisasm"))
    if not NVDISASM and PTXAS:
        skipped.append(f"nvdisasm could not be had ({why}): no NVIDIA rows in the GPU report")
    if CLANG19:
        CLC19, why = clc19_setup(os.path.join(os.path.dirname(out_dir), "clc19"))
        if not CLC19:
            skipped.append(f"libclc-19 could not be had ({why}): gfx942 is skipped")
    else:
        skipped.append("clang-19 is not installed (tools/setup.sh): gfx942 is skipped")
    for line in skipped:
        print(f"gpu-compile: {line}")
    with open(os.path.join(cl_dir, "common.h")) as f:
        common = f.read()
    bodies = {}
    errors, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for i, (source, options, _) in enumerate(chosen):
            if source not in bodies:
                bodies[source] = expand(cl_dir, source, 0)
            text = f'#line 1 "common.h"\n{common}\n#line 1 "{source}"\n{bodies[source]}'
            jobs.append((i, source, options, text, tmp,
                         not report_none and (report_all or chosen[i][2] == "default")))
        reports = []
        mfma_errors, mfma_lines = mfma_check(cl_dir, tmp)
        errors += mfma_errors
        dpas_errors, dpas_lines = dpas_check(cl_dir, tmp)
        errors += dpas_errors
        mfma_lines += dpas_lines
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for errs, rs, rep in pool.map(compile_variant, jobs):
                errors += errs
                rows += rs
                reports += rep
    report = os.path.join(out_dir, "report.tsv")
    with open(report, "w") as f:
        f.write("\t".join(COLUMNS) + "\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\n")
    # AMD SGPR spills go to VGPR lanes, cost instructions only, and are
    # reported in the file, not failed; every other spill goes to memory.
    spills = [r for r in rows if r[6]]
    for r in spills:
        errors.append(f"{r[0]} {r[1]} [{r[2]}]: kernel {r[3]} spills ({r[6]}); the search "
                      f"space must not offer it")
    errors += report_and_gate(reports, out_dir, cl_dir)
    targets = [t[0] for t in TARGETS] + ([GFX942[0]] if CLC19 else []) + \
        [f"ptxas-{a}" for a in PTXAS_ARCHS if PTXAS] + \
        [f"igc-{d}" for d in IGC_DEVICES if OCLOC and (not os.environ.get(
            "OCLF_GPU_REPORT_ONLY") or f"igc-{d}" in gpu_report.REPORT_TARGETS)]
    ndefault = sum(1 for v in chosen if v[2] == "default")
    print(f"gpu-compile: {len(chosen)} of {len(variants)} programs ({ndefault} GPU defaults, "
          f"{len(chosen) - ndefault} space points"
          f"{'' if os.environ.get('OCLF_GPU_COMPILE_FULL') == '1' else '; OCLF_GPU_COMPILE_FULL=1 compiles all'})"
          f" x {len(targets)} targets ({', '.join(targets)}): {len(rows)} kernel builds, "
          f"{len(spills)} spilling, {len(errors)} errors, {time.monotonic() - started:.0f} s; "
          f"report: {report}")
    for target in targets:
        mine = [r for r in rows if r[2] == target]
        if mine:
            regs = [r[4] for r in mine]
            simd = sorted({r[5] for r in mine if r[5]})
            print(f"  {target}: registers {min(regs)}..{max(regs)}"
                  + (f", SIMD {'/'.join(map(str, simd))}" if simd else ""))
    for line in mfma_lines:
        print(line)
    for e in errors[:40]:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
