#!/usr/bin/env python3
"""What each vendor's compiler makes of a kernel, what that predicts, and
the gate that holds every GPU default to it.

usage: gpu_report.py GPU_VARIANTS CL_DIR OUT_DIR   the report of every GPU
                                                    default (tests/gpu_compile.py
                                                    with no space points)
       gpu_report.py --families OUT_DIR/gpu-report.json
                                                    a table per op family
       gpu_report.py --self-test                    the gate and the readers
                                                    on made-up code

tests/gpu_compile.py calls analyse() on the machine code it builds for the
GPU defaults (every program with OCLF_GPU_REPORT_FULL=1): NVIDIA SASS
(nvdisasm of ptxas's cubin, sm_90 and sm_80), AMD assembly (gfx942,
gfx90a, gfx1100) and Intel's (ocloc disasm of IGC's zebin, pvc and dg2).
Per kernel it finds the loops (a backward branch and the span from its
target; a loop's own body leaves out the loops nested in it), weighs them
as if each ran 8 times per iteration of the loop around it, takes the one
with the most weighted global bytes loaded as the memory loop and the one
with the most weighted FMA (or matrix) instructions as the compute loop,
and reads from the hot one (the memory loop of a memory-bound kernel, the
compute loop of an arithmetic-bound one): global
loads and stores by width, local-memory instructions per FMA, FMA share
of the loop's instructions. Occupancy comes from registers, local memory
and work-group size; the model (docs/gpu-model.md) turns both into a
predicted fraction of HBM bandwidth or of FP32 peak.

The gate: every memory-bound default has only 16-byte global accesses in
its hot loop on sm_90, gfx942 and pvc (8 bytes where the run of bytes a
work-item touches from one base is shorter than 16), no kernel spills,
and a memory-bound kernel keeps at least half of sm_90's warp slots. A
miss on tests/gpu_gate_known.tsv is reported; a miss not on it fails, and
an entry that no longer misses is named so that the list only shrinks.
"""
import json
import os
import re
import sys

# The targets whose machine code is read, as tests/gpu_compile.py names
# their rows, and the device each is modelled as.
REPORT_TARGETS = ["ptxas-sm_90", "ptxas-sm_80", "amdgcn-gfx942", "amdgcn-gfx90a",
                  "amdgcn-gfx1100", "igc-pvc", "igc-dg2-g10"]
GATE_WIDTH_TARGETS = ["ptxas-sm_90", "amdgcn-gfx942", "igc-pvc"]
GATE_OCCUPANCY_TARGET = "ptxas-sm_90"
GATE_OCCUPANCY_MIN = 0.5

# Per target, the device it is modelled as (docs/gpu-model.md names the
# public sources): units (SMs, CUs, Xe-cores), clock in GHz, HBM/GDDR
# bandwidth in GB/s, assumed loaded DRAM latency in ns, FP32 FMA lanes per
# cycle per unit at peak, f16/bf16 matrix peak in TFLOP/s, instructions
# issued per cycle per unit (in groups: warps, waves, hardware threads),
# local-memory bytes per cycle per unit, issue ports per unit (schedulers,
# SIMDs, EUs) and the groups one port needs to hide its latencies.
DEVICES = {
    "ptxas-sm_90": dict(name="H100 SXM", units=132, ghz=1.98, gbs=3350, lat_ns=600,
                        fma_lanes=128, matrix_tflops=989, issue=4, lds_bpc=128, ports=4,
                        hide=4, also="H200: 4800 GB/s"),
    "ptxas-sm_80": dict(name="A100 SXM 40GB", units=108, ghz=1.41, gbs=1555, lat_ns=600,
                        fma_lanes=64, matrix_tflops=312, issue=4, lds_bpc=128, ports=4, hide=4),
    "amdgcn-gfx942": dict(name="MI300X", units=304, ghz=2.1, gbs=5300, lat_ns=600,
                          fma_lanes=128, matrix_tflops=1307, issue=1, lds_bpc=128, ports=4,
                          hide=4),
    "amdgcn-gfx90a": dict(name="MI250X (one die)", units=110, ghz=1.7, gbs=1638, lat_ns=600,
                          fma_lanes=128, matrix_tflops=191.5, issue=1, lds_bpc=128, ports=4,
                          hide=4),
    "amdgcn-gfx1100": dict(name="RX 7900 XTX", units=96, ghz=2.5, gbs=960, lat_ns=600,
                           fma_lanes=128, matrix_tflops=123, issue=2, lds_bpc=128, ports=2,
                           hide=4),
    "igc-pvc": dict(name="Data Center GPU Max 1550", units=128, ghz=1.6, gbs=3277, lat_ns=600,
                    fma_lanes=128, matrix_tflops=839, issue=None, lds_bpc=128, ports=8, hide=4),
    "igc-dg2-g10": dict(name="Arc A770", units=32, ghz=2.1, gbs=560, lat_ns=600, fma_lanes=128,
                        matrix_tflops=138, issue=None, lds_bpc=64, ports=16, hide=4),
}


# ---------------------------------------------------------------------------
# Reading machine code: each reader gives {kernel: [instruction]} where an
# instruction is a dict: labels (defined just before it), op (mnemonic),
# branch (the label it may jump to, or None), and its class: kind in
# gload, gstore, lload, lstore, fma, matrix, other; width (bytes per
# work-item for memory), base and offset (for grouping runs), fma (FMA
# lane-ops per work-item: 2 for packed pairs).

def _ins(op, labels, branch=None, kind="other", width=0, base=None, offset=0, fma=0):
    return dict(op=op, labels=labels, branch=branch, kind=kind, width=width, base=base,
                offset=offset, fma=fma)


# Floating-point operations of one matrix instruction (for its whole warp,
# wave or hardware thread): 2 m n k of its shape, read from the mnemonic
# (NVIDIA HMMA.16816: m16 n8 k16; AMD v_mfma_..._32x32x8...: m32 n32 k8);
# an unknown shape counts as the m16n8k16 product.
SASS_MMA_SHAPES = {"16816": (16, 8, 16), "1688": (16, 8, 8), "884": (8, 8, 4),
                   "16832": (16, 8, 32)}


def matrix_flops(op):
    if m := re.search(r"(\d+)x(\d+)x(\d+)", op):
        a, b, c = (int(v) for v in m.groups())
        return 2 * a * b * c
    for part in op.split("."):
        if part in SASS_MMA_SHAPES:
            a, b, c = SASS_MMA_SHAPES[part]
            return 2 * a * b * c
    return 2 * 16 * 8 * 16


SASS_WIDTH = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


def read_sass(text):
    """nvdisasm -c output: kernels start at `.text.NAME:`."""
    kernels, name, labels = {}, None, []
    for line in text.splitlines():
        if m := re.match(r"^\.text\.([A-Za-z_]\w*):", line):
            name, labels = m.group(1), []
            kernels[name] = []
            continue
        if name is None:
            continue
        if m := re.match(r"^(\.L_\w+):", line):
            labels.append(m.group(1))
            continue
        m = re.match(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?);", line)
        if not m:
            continue
        op, args = m.group(2), m.group(3)
        base_op, *mods = op.split(".")
        ins = _ins(op, labels)
        labels = []
        if base_op in ("BRA", "BRX", "JMP") and (t := re.search(r"`\((\.L_\w+)\)", args)):
            ins["branch"] = t.group(1)
        elif base_op in ("LDG", "STG", "LD", "ST") or (base_op in ("LDS", "STS")):
            width = 4
            for mod in mods:
                width = SASS_WIDTH.get(mod, width)
            # the address, not the memory descriptor: desc[UR12][R4.64+0x4]
            addr = re.search(r"(?<!desc)\[([^\]]+)\]", args)
            base, off = None, 0
            if addr:
                a = addr.group(1)
                if mo := re.match(r"(.*?)([+-]0x[0-9a-f]+)$", a):
                    a, off = mo.group(1), int(mo.group(2), 16)
                base = a
            local = base_op in ("LDS", "STS")
            load = base_op in ("LDG", "LD", "LDS")
            kind = ("l" if local else "g") + ("load" if load else "store")
            ins.update(kind=kind, width=width, base=base, offset=off)
        elif base_op in ("LDSM",):
            ins.update(kind="lload", width=16)
        elif base_op == "FFMA":
            ins.update(kind="fma", fma=1)
        elif base_op in ("HFMA2", "FFMA2"):
            ins.update(kind="fma", fma=2)
        elif base_op in ("HMMA", "IMMA", "HGMMA", "QGMMA", "DMMA", "BMMA"):
            ins.update(kind="matrix", mflops=matrix_flops(op))
        kernels[name].append(ins)
    return kernels


AMD_WIDTH = {"dwordx4": 16, "b128": 16, "dwordx3": 12, "b96": 12, "dwordx2": 8, "b64": 8,
             "dword": 4, "b32": 4, "ushort": 2, "sshort": 2, "short": 2, "u16": 2, "i16": 2,
             "b16": 2, "ubyte": 1, "sbyte": 1, "byte": 1, "u8": 1, "i8": 1, "b8": 1}


def _amd_width(op):
    parts = op.split("_")
    for p in reversed(parts):
        if p in AMD_WIDTH:
            return AMD_WIDTH[p]
        if p.startswith("d16"):
            return 2
    return 4


def read_amd(text):
    """clang's AMDGPU assembly: kernels start at `NAME:  ; @NAME` and end at
    s_endpgm; labels are .LBB*."""
    kernels, name, labels = {}, None, []
    for line in text.splitlines():
        if m := re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s+; @", line):
            name, labels = m.group(1), []
            kernels[name] = []
            continue
        if name is None:
            continue
        if m := re.match(r"^(\.LBB\w+):", line):
            labels.append(m.group(1))
            continue
        m = re.match(r"^\s+([a-z][a-z0-9_]*)\b\s*(.*)$", line)
        if not m or line.lstrip().startswith((";", ".")):
            continue
        op, args = m.group(1), m.group(2).split(";")[0]
        ins = _ins(op, labels)
        labels = []
        if op.startswith(("s_branch", "s_cbranch")) and (t := re.search(r"(\.LBB\w+)", args)):
            ins["branch"] = t.group(1)
        elif re.match(r"(global|flat|buffer)_(load|store)_", op):
            ops = [a.strip() for a in args.split(",")]
            base = ops[1] if len(ops) > 1 else None
            off = re.search(r"offset:(-?\d+)", args)
            kind = "gload" if "_load_" in op else "gstore"
            ins.update(kind=kind, width=_amd_width(op), base=base,
                       offset=int(off.group(1)) if off else 0)
        elif re.match(r"ds_(read|load|write|store)", op):
            w = _amd_width(op)
            if re.match(r"ds_(read|write|load|store)2", op):
                w *= 2
            kind = "lload" if re.match(r"ds_(read|load)", op) else "lstore"
            ins.update(kind=kind, width=w)
        elif re.match(r"v_(mfma|wmma|smfmac)", op):
            ins.update(kind="matrix", mflops=matrix_flops(op))
        elif re.match(r"v_pk_fma_f(32|16)|v_pk_mac_f16|v_dot2", op):
            ins.update(kind="fma", fma=2)
        elif re.match(r"v_(fma|fmac|mac|mad|fmamk|fmaak|madmk|madak)[a-z0-9_]*_f(32|16)", op) \
                or re.match(r"v_fma_mix", op):
            ins.update(kind="fma", fma=1)
        elif op == "s_endpgm":
            kernels[name].append(ins)
            name = None
            continue
        kernels[name].append(ins)
    return kernels


LSC_DSIZE = {"d8": 1, "d16": 2, "d32": 4, "d64": 8, "d8u32": 1, "d16u32": 2}


def read_igc(text):
    """One kernel's ocloc disasm (.text.NAME.asm): labels L<offset>:,
    branches jmpi/goto/while/brc with label operands, LSC sends with the
    message in the trailing comment (load.ugm.d32x4.a64)."""
    out, labels = [], []
    for line in text.splitlines():
        if m := re.match(r"^(L\d+):", line):
            labels.append(m.group(1))
            continue
        m = re.match(r"^\s*(\([^)]*\)\s*)?([a-z][a-z0-9_.]*)\s+(.*)$", line)
        if not m:
            continue
        op, args = m.group(2), m.group(3)
        ins = _ins(op, labels)
        labels = []
        base_op = op.split(".")[0]
        if base_op in ("jmpi", "goto", "while", "brc", "brd", "join", "call", "ret", "halt"):
            targets = re.findall(r"\b(L\d+)\b", args)
            if base_op in ("jmpi", "while", "brc", "brd"):
                ins["branch"] = targets[0] if targets else None
            elif base_op == "goto" and targets:
                # goto JIP UIP: the jump is backward when UIP is (goto.b)
                ins["branch"] = targets[-1]
        elif base_op in ("send", "sendc", "sends", "sendsc"):
            msg = re.search(r"//.*?;\s*([a-z_]+)\.(ugm|slm|ugml|tgm)\.([a-z0-9x]+)", line)
            simd = re.search(r"\((\d+)\|M\d+\)", line)
            if msg:
                what, sfid, ds = msg.groups()
                md = re.match(r"(d8u32|d16u32|d8|d16|d32|d64)(?:x(\d+))?(t)?", ds)
                if md:
                    w = LSC_DSIZE[md.group(1)] * int(md.group(2) or 1)
                    if md.group(3):  # a block (transposed) message: wide by construction
                        w = 16
                    local = sfid == "slm"
                    if what.startswith("load"):
                        kind = "lload" if local else "gload"
                    elif what.startswith("store"):
                        kind = "lstore" if local else "gstore"
                    else:
                        kind = "other"
                    if kind != "other":
                        ins.update(kind=kind, width=w)
                        ins["simd"] = int(simd.group(1)) if simd else 0
        elif base_op in ("mad", "madm") and re.search(r":(f|hf|bf)\b", args):
            ins.update(kind="fma", fma=1)
        elif base_op in ("dpas", "dpasw"):
            ins.update(kind="matrix", mflops=matrix_flops(op))
        out.append(ins)
    return out


# ---------------------------------------------------------------------------
# Loops and the facts of one kernel.

def loop_spans(code):
    """[(start, end)] index spans [target, branch] of the backward
    branches; a branch to itself (the trailing `BRA self` of SASS) is no
    loop."""
    where = {}
    for i, ins in enumerate(code):
        for lab in ins["labels"]:
            where[lab] = i
    return sorted({(where[ins["branch"]], i) for i, ins in enumerate(code)
                   if ins.get("branch") in where and where[ins["branch"]] < i})


def own_bodies(code):
    """[(span, [instruction])]: each loop's own body, its span less the
    spans of the loops nested in it (a GEMM's k loop holds its tile-copy
    loops and, after them, the unrolled FMAs: those are the k loop's)."""
    spans = loop_spans(code)
    out = []
    for s in spans:
        inner = [o for o in spans if o != s and s[0] <= o[0] and o[1] <= s[1]]
        body = [code[i] for i in range(s[0], s[1] + 1)
                if not any(o[0] <= i <= o[1] for o in inner)]
        out.append((s, body))
    return out


# A static profile: each loop runs this many times per run of the loop
# around it, so a loop's instructions weigh TRIPS ** depth.
TRIPS = 8


def depth(span, spans):
    return sum(1 for o in spans if o != span and o[0] <= span[0] and span[1] <= o[1])


def runs(accesses):
    """Per access (index into accesses), the length in bytes of the run of
    contiguous bytes it belongs to: accesses of one kind from one base
    whose [offset, offset + width) intervals touch. None where the base is
    unknown."""
    out = [None] * len(accesses)
    groups = {}
    for i, a in enumerate(accesses):
        if a["base"] is not None:
            groups.setdefault((a["kind"], a["base"]), []).append(i)
    for idx in groups.values():
        idx.sort(key=lambda i: accesses[i]["offset"])
        start = 0
        while start < len(idx):
            end = start
            hi = accesses[idx[start]]["offset"] + accesses[idx[start]]["width"]
            while end + 1 < len(idx) and accesses[idx[end + 1]]["offset"] <= hi:
                end += 1
                hi = max(hi, accesses[idx[end]]["offset"] + accesses[idx[end]]["width"])
            length = hi - accesses[idx[start]]["offset"]
            for k in idx[start:end + 1]:
                out[k] = length
            start = end + 1
    return out


def loop_facts(code, span, body=None):
    if body is None:
        body = code[span[0]:span[1] + 1] if span else code
    g = [dict(i) for i in body if i["kind"] in ("gload", "gstore")]  # runs are per region
    r = runs(g)
    for a, length in zip(g, r):
        a["run"] = length
    widths = {"load": {}, "store": {}}
    for a in g:
        d = widths["load" if a["kind"] == "gload" else "store"]
        d[a["width"]] = d.get(a["width"], 0) + 1
    local = sum(1 for i in body if i["kind"] in ("lload", "lstore"))
    local_bytes = sum(i["width"] for i in body if i["kind"] in ("lload", "lstore"))
    fma = sum(1 for i in body if i["kind"] == "fma")
    fma_ops = sum(i["fma"] for i in body if i["kind"] == "fma")
    matrix = sum(1 for i in body if i["kind"] == "matrix")
    matrix_fl = sum(i.get("mflops", 0) for i in body if i["kind"] == "matrix")
    return dict(instructions=len(body), global_accesses=g, widths=widths,
                load_bytes=sum(a["width"] for a in g if a["kind"] == "gload"),
                store_bytes=sum(a["width"] for a in g if a["kind"] == "gstore"),
                local=local, local_bytes=local_bytes, fma=fma, fma_ops=fma_ops, matrix=matrix,
                matrix_flops=matrix_fl)


def required_width(run):
    """The width a hot-loop global access must have: 16 bytes, or 8 where
    the run it belongs to is known to be shorter than 16 bytes."""
    return 8 if run is not None and run < 16 else 16


def kernel_facts(code):
    """The loops of one kernel, each its own body (own_bodies), weighed by
    the static profile (TRIPS ** depth): the memory loop (most weighted
    global bytes loaded, then stored: the loads are what must be in
    flight), the compute loop (most weighted matrix instructions, then
    FMA + matrix instructions);
    ties go to the earlier loop. A kernel without loops is its own loop."""
    bodies = own_bodies(code)
    loops = [s for s, _ in bodies]
    facts = [loop_facts(code, s, b) for s, b in bodies] or [loop_facts(code, None)]
    spans = list(loops) or [None]
    weight = [TRIPS ** depth(sp, loops) for sp in loops] or [1]
    mem = max(range(len(facts)), key=lambda k: (facts[k]["load_bytes"] * weight[k],
                                                facts[k]["store_bytes"] * weight[k], -k))
    if not facts[mem]["global_accesses"] and loops:
        # No loop touches global memory (a work-item's element is read in
        # straight code; its loops are arithmetic helpers): the whole
        # kernel is the memory region.
        facts.append(loop_facts(code, None))
        spans.append(None)
        mem = len(facts) - 1
    # Matrix instructions first: a kernel that has them does its work in
    # their loop (AMD's epilogue of erf and exp, branchy after the
    # structurizer, forms nested backward branches that would outweigh a
    # k loop of 16 v_mfma by its FMAs).
    comp = max(range(len(weight)), key=lambda k: (facts[k]["matrix"] * weight[k],
                                                 (facts[k]["fma"] + facts[k]["matrix"])
                                                 * weight[k], facts[k]["local"], -k))
    whole = loop_facts(code, None)
    stores = [a for a in whole["global_accesses"] if a["kind"] == "gstore"]
    return dict(loops=len(loops), mem=facts[mem], comp=facts[comp], mem_span=spans[mem],
                comp_span=spans[comp], kernel_stores=stores, kernel_global=whole["global_accesses"])


# ---------------------------------------------------------------------------
# Occupancy.

def wgs_of(options):
    """The work-group size the options fix, else None."""
    o = dict(re.findall(r"-DOCLF_(\w+)=(\d+)", options))
    if "WGS" in o:
        # attention's matrix-unit structure (STAGE 3): WGS query rows, a
        # warp of 32 per 16
        return int(o["WGS"]) * (2 if o.get("STAGE") == "3" and "MMA" in o else 1)
    if "WGM" in o and "WGN" in o:
        # linear's matrix-unit structures: WGM x WGN warps of 32 (STAGE
        # 2), wavefronts of 64 (STAGE 4)
        lanes = {"2": 32, "4": 64}.get(o.get("STAGE"), 1)
        return int(o["WGM"]) * int(o["WGN"]) * lanes
    return None


def occupancy_nvidia(arch, regs, shared, wgs):
    """(resident warps per SM, max warps, what limits it)."""
    max_warps, regfile = 64, 65536
    smem = 233472 if arch == "sm_90" else 167936
    warps = max(1, -(-wgs // 32))
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = (regfile // per_warp) // warps
    per_block = -(-(shared + 1024) // 128) * 128
    by_smem = smem // per_block if shared else 32
    by_threads = max_warps // warps
    blocks = min(by_regs, by_smem, by_threads, 32)
    limit = min((by_regs, "registers"), (by_smem, "local memory"), (by_threads, "work-group"),
                key=lambda x: x[0])[1]
    return blocks * warps, max_warps, limit


def occupancy_amd(target, vgprs, lds, wgs):
    """(waves per SIMD, max waves per SIMD, what limits it)."""
    if target == "amdgcn-gfx1100":
        wave, simds, max_waves, vgpr_file, gran, lds_cu = 32, 2, 16, 1536, 24, 65536
    else:
        wave, simds, max_waves, vgpr_file, gran, lds_cu = 64, 4, 8, 512, 8, 65536
    per = -(-max(vgprs, 1) // gran) * gran
    by_vgpr = min(max_waves, vgpr_file // per)
    waves_wg = max(1, -(-wgs // wave))
    if lds:
        wgs_cu = lds_cu // lds
        by_lds = wgs_cu * waves_wg / simds
    else:
        by_lds = max_waves
    waves = min(by_vgpr, by_lds)
    limit = "VGPRs" if by_vgpr <= by_lds else "local memory"
    # fractional where a work-group's waves are fewer than the SIMDs
    return round(waves, 2), max_waves, limit


def occupancy_intel(target, grf, simd, slm, wgs):
    """(hardware threads per EU, max threads per EU, what limits it)."""
    max_thr = 4 if grf > 128 else 8
    slm_core = 131072 if target == "igc-pvc" else 65536
    eus = DEVICES[target]["ports"]
    if slm and simd:
        threads_wg = max(1, -(-wgs // simd))
        by_slm = (slm_core // slm) * threads_wg / eus
        if by_slm < max_thr:
            return by_slm, 8, "local memory"
    return max_thr, 8, "GRF mode" if grf > 128 else "-"


# ---------------------------------------------------------------------------
# The model.

def bound_of(source, options, kernel):
    """'arithmetic' for the kernels that reuse each loaded value many times
    (a GEMM's tiles): attention_fused without paging (every key serves
    every query of a work-group) and attention_mma, linear_fused on its tiled path (not the
    matrix-vector one, MV 1) and l2_scan with more than one query a
    work-item (QB); 'memory' for every other kernel: each byte read once
    or a few times, so HBM bandwidth bounds it."""
    o = dict(re.findall(r"-DOCLF_(\w+)=(\d+)", options))
    name = os.path.basename(source)
    gemm = (kernel == "attention_fused" and o.get("PAGED") != "1") or \
        kernel == "attention_mma" or \
        (kernel == "linear_fused" and o.get("MV") != "1") or \
        (kernel == "l2_scan" and int(o.get("QB", "1")) > 1)
    return "arithmetic" if gemm and name in ("attention.cl", "linear.cl", "l2topk.cl") \
        else "memory"


def launch_local(options, kernel):
    """Local memory a kernel gets as an argument at launch, where its size
    follows from the options alone: attention_fused's stage (K/V blocks as
    f32 with STAGE 1; with ACC 1 each row's query, accumulator and scores)
    and, paged, its block of token addresses. The same sum as the
    library's stage_bytes (lib/ops/attention.c). Other kernels' launch
    local memory follows the shape (a row staged) and is not counted."""
    if kernel != "attention_fused":
        return 0
    o = {k: int(v) for k, v in re.findall(r"-DOCLF_(\w+)=(\d+)", options)}
    if "DP" not in o:
        return 0
    wgs, bk, dp = o.get("WGS", 1), o.get("BK", 1), o["DP"]
    n = (2 * bk * dp if o.get("STAGE") else 0) + (wgs * (2 * (dp + 1) + bk) if o.get("ACC")
                                                  else 0)
    toks = bk * 8 if o.get("PAGED") and o.get("STAGE") else 8
    return max(n, 1) * 4 + toks


def store_efficiency(accesses):
    """The sector efficiency of a kernel's global traffic: a store of w
    bytes in a run of R bytes per work-item writes w of every R bytes a
    warp spans, so each 32-byte sector takes R / w partial writes (cost
    R / w); a load costs its bytes. Useful bytes over cost, over every
    global access of the kernel's code (each counted once)."""
    useful = cost = 0.0
    for a in accesses:
        useful += a["width"]
        if a["kind"] == "gstore":
            run = a.get("run") or a["width"]
            cost += a["width"] / min(1.0, a["width"] / min(run, 32))
        else:
            cost += a["width"]
    return useful / cost if cost else 1.0


def predict(target, bound, f, lanes_resident, groups_per_port, lanes):
    """(predicted fraction, what it is a fraction of, the figures behind)."""
    d = DEVICES[target]
    if bound == "memory":
        m = f["mem"]
        per_lane = m["load_bytes"] or m["store_bytes"]
        need = d["gbs"] * 1e9 * d["lat_ns"] * 1e-9 / d["units"]
        have = lanes_resident * per_lane
        eff = store_efficiency(f["kernel_global"])
        frac = min(1.0, have / need) * eff if need else 0.0
        return frac, "HBM", dict(bytes_in_flight=have, bytes_needed=round(need),
                                 store_efficiency=round(eff, 3))
    c = f["comp"]
    hide = min(1.0, groups_per_port / d["hide"])
    # Intel: an Xe-core's EUs together issue as many lanes a cycle as it
    # has FP32 lanes (16 EUs x 8 on dg2, 8 x 16 on pvc).
    issue = d["issue"] if d["issue"] is not None else d["fma_lanes"] / max(lanes, 1)
    t_issue = c["instructions"] / issue
    t_local = lanes * c["local_bytes"] / d["lds_bpc"]
    t = max(t_issue, t_local, 1e-9)
    if c["matrix"]:
        # The loop's matrix flops over what the unit's matrix pipes do in
        # its cycles at the device's dense f16/bf16 peak (H100: 989 TFLOP/s
        # over 132 SMs at 1.98 GHz, 3784 a cycle an SM: one m16n8k16 HMMA
        # of 4096 about every cycle per SM, not one per scheduler).
        per_cycle = d["matrix_tflops"] * 1e12 / (d["units"] * d["ghz"] * 1e9)
        frac = min(1.0, c["matrix_flops"] / (t * per_cycle)) * hide
        return frac, "matrix", dict(issue_cycles=round(t_issue, 1),
                                    local_cycles=round(t_local, 1), latency_hiding=round(hide, 2))
    frac = min(1.0, lanes * c["fma_ops"] / t / d["fma_lanes"]) * hide
    return frac, "FP32", dict(issue_cycles=round(t_issue, 1), local_cycles=round(t_local, 1),
                              latency_hiding=round(hide, 2))


def analyse(source, options, target, kernel, code, stats):
    """One report row. stats: regs, spills, scratch, shared (NVIDIA), lds
    (AMD), occupancy (AMD compiler's), grf, simd, slm (Intel)."""
    f = kernel_facts(code)
    wgs = wgs_of(options)
    wgs_known = wgs is not None
    wgs = wgs or 256
    bound = bound_of(source, options, kernel)
    extra = launch_local(options, kernel)
    stats = dict(stats)
    for key in ("shared", "lds", "slm"):
        if key in stats or (key == "shared" and target.startswith("ptxas-")):
            stats[key] = stats.get(key, 0) + extra
    if target.startswith("ptxas-"):
        arch = target.split("-")[1]
        warps, maxw, limit = occupancy_nvidia(arch, stats["regs"], stats.get("shared", 0), wgs)
        occ, lanes = warps / maxw, 32
        resident, per_port = warps * 32, warps / DEVICES[target]["ports"]
        occ_text = f"{warps} warps/SM"
        local_mem = stats.get("shared", 0)
    elif target.startswith("amdgcn-"):
        waves, maxw, limit = occupancy_amd(target, stats["regs"], stats.get("lds", 0), wgs)
        lanes = 32 if target == "amdgcn-gfx1100" else 64
        occ = waves / maxw
        resident, per_port = waves * DEVICES[target]["ports"] * lanes, waves
        occ_text = f"{waves:g} waves/SIMD"
        local_mem = stats.get("lds", 0)
    else:
        thr, maxt, limit = occupancy_intel(target, stats.get("grf", 128), stats.get("simd", 0),
                                           stats.get("slm", 0), wgs)
        lanes = stats.get("simd") or 16
        occ = thr / maxt
        resident, per_port = thr * DEVICES[target]["ports"] * lanes, thr
        occ_text = f"SIMD{lanes} GRF{stats.get('grf', 128)} {thr:g} thr/EU"
        local_mem = stats.get("slm", 0)
    hot = f["mem"] if bound == "memory" else f["comp"]
    g = hot["global_accesses"]
    narrow = [a for a in g if a["width"] < required_width(a.get("run"))]
    wide = sum(1 for a in g if a["width"] >= 16)
    frac, of, why = predict(target, bound, f, resident, per_port, lanes)
    c = f["comp"]
    return dict(
        source=os.path.basename(source), options=options, target=target, kernel=kernel,
        bound=bound, regs=stats["regs"], local_mem=local_mem, spills=stats.get("spills", 0),
        scratch=stats.get("scratch", 0), wgs=wgs if wgs_known else None,
        occupancy=round(occ, 3), occupancy_text=occ_text, occupancy_limit=limit,
        loops=f["loops"], hot_instructions=hot["instructions"],
        loads={str(k): v for k, v in sorted(hot["widths"]["load"].items())},
        stores={str(k): v for k, v in sorted(hot["widths"]["store"].items())},
        wide_fraction=round(wide / len(g), 3) if g else None,
        narrow=[dict(kind=a["kind"][1:], width=a["width"], run=a.get("run")) for a in narrow],
        local_per_fma=round(c["local"] / c["fma"], 2) if c["fma"] else None,
        fma_fraction=round((c["fma"] + c["matrix"]) / c["instructions"], 3)
        if c["instructions"] else 0.0,
        compute_instructions=c["instructions"], compute_fma=c["fma"], compute_local=c["local"],
        matrix=c["matrix"], agprs=stats.get("agprs"), predicted=round(frac, 3),
        predicted_of=of, model=why)


# ---------------------------------------------------------------------------
# The gate.

def misses(rows):
    """{(source, options, kernel, target, reason): detail} for every row."""
    out = {}
    for r in rows:
        key = (r["source"], r["options"], r["kernel"], r["target"])
        if r["spills"]:
            out[key + ("spill",)] = f"{r['spills']} spilled"
        # a program built with the wavefront's instruction (-DOCLF_MFMA=1)
        # must issue it in its compute loop
        if "-DOCLF_MFMA=1" in r["options"] and r["target"].startswith("amdgcn-") \
                and not r["matrix"]:
            out[key + ("no-mfma",)] = "no v_mfma in the compute loop"
        if r["bound"] != "memory":
            continue
        if r["target"] in GATE_WIDTH_TARGETS:
            loads = [n for n in r["narrow"] if n["kind"] == "load"]
            stores = [n for n in r["narrow"] if n["kind"] == "store"]
            for kind, bad in (("narrow-load", loads), ("narrow-store", stores)):
                if bad:
                    ws = sorted({n["width"] for n in bad})
                    out[key + (kind,)] = (f"{len(bad)} hot-loop {kind[7:]}s of "
                                          f"{'/'.join(map(str, ws))} bytes")
        if r["target"] == GATE_OCCUPANCY_TARGET and r["occupancy"] < GATE_OCCUPANCY_MIN:
            out[key + ("occupancy",)] = (f"{r['occupancy_text']} ({r['occupancy']:.0%}, "
                                         f"limited by {r['occupancy_limit']})")
    return out


def read_known(path):
    known = set()
    if not os.path.exists(path):
        return known
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 5:
                known.add(tuple(parts))
    return known


def write_known(path, found):
    with open(path, "w") as f:
        f.write("# The gate's known misses (tests/gpu_report.py): source, options, kernel, "
                "target, reason.\n# A miss listed here is reported, not failed; the list only "
                "shrinks.\n")
        for key in sorted(found):
            f.write("\t".join(key) + "\n")


def gate(rows, known, complete=True):
    """(new misses, known misses, fixed entries): fixed only where the run
    covered the entry's program and target (complete: every default)."""
    found = misses(rows)
    new = {k: v for k, v in found.items() if k not in known}
    still = {k: v for k, v in found.items() if k in known}
    seen = {(r["source"], r["options"], r["kernel"], r["target"]) for r in rows}
    targets = {r["target"] for r in rows}
    fixed = sorted(k for k in known if k not in found and
                   (k[:4] in seen or (complete and k[3] in targets)))
    return new, still, fixed


# ---------------------------------------------------------------------------
# Output.

COLUMNS = ["source", "options", "target", "kernel", "bound", "regs", "local_mem", "spills",
           "scratch", "wgs", "occupancy", "occupancy_text", "occupancy_limit", "loops",
           "hot_instructions", "loads", "stores", "wide_fraction", "local_per_fma",
           "fma_fraction", "predicted", "predicted_of"]


def widths_text(d):
    return " ".join(f"{k}Bx{v}" for k, v in d.items()) or "-"


def write(rows, out_dir):
    tsv = os.path.join(out_dir, "gpu-report.tsv")
    with open(tsv, "w") as f:
        f.write("\t".join(COLUMNS) + "\n")
        for r in rows:
            vals = []
            for c in COLUMNS:
                v = r[c]
                if isinstance(v, dict):
                    v = widths_text(v)
                vals.append("-" if v is None else str(v))
            f.write("\t".join(vals) + "\n")
    with open(os.path.join(out_dir, "gpu-report.json"), "w") as f:
        json.dump(dict(devices=DEVICES, rows=rows), f, indent=1)
    return tsv


def table(rows, out=sys.stdout):
    """The facts and the prediction, one line per kernel and target."""
    print(f"{'kernel':<28} {'target':<15} {'regs':>4} {'local':>6} {'occupancy':<22} "
          f"{'hot-loop loads':<18} {'stores':<14} {'16B':>5} {'lds/fma':>7} {'fma%':>5} "
          f"{'predicted':>14}", file=out)
    program = None
    for r in rows:
        if (r["source"], r["options"]) != program:
            program = (r["source"], r["options"])
            print(f"\n{r['source']} {r['options'].replace('-DOCLF_', '').strip()}", file=out)
        prog = r["kernel"]
        print(f"{prog[:28]:<28} {r['target'][:15]:<15} {r['regs']:>4} {r['local_mem']:>6} "
              f"{r['occupancy_text'][:22]:<22} {widths_text(r['loads'])[:18]:<18} "
              f"{widths_text(r['stores'])[:14]:<14} "
              f"{'-' if r['wide_fraction'] is None else format(r['wide_fraction'], '.0%'):>5} "
              f"{'-' if r['local_per_fma'] is None else r['local_per_fma']:>7} "
              f"{r['fma_fraction']:>5.0%} {r['predicted']:>6.0%} of {r['predicted_of']:<6}",
              file=out)


def family_of(source):
    name = os.path.basename(source)
    return "expr (generated)" if name.startswith("expr-") else name[:-3]


def families(rows, targets=("ptxas-sm_90", "amdgcn-gfx942", "igc-pvc")):
    """A markdown table per op family (source file) and target: memory-
    bound kernels (how many have only 16-byte hot-loop accesses, the
    hot-loop widths seen, occupancy range, predicted HBM fraction median)
    and arithmetic-bound ones (local per FMA, FMA share, predicted FP32)."""
    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if xs else None

    out = ["| family | target | memory-bound kernels: only 16 B / all | hot-loop widths (B) "
           "| occupancy | predicted HBM (median, range) | arithmetic-bound: local/FMA, FMA "
           "share, predicted FP32 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    fams = sorted({family_of(r["source"]) for r in rows})
    for fam in fams:
        for t in targets:
            mine = [r for r in rows if family_of(r["source"]) == fam and r["target"] == t]
            if not mine:
                continue
            mem = [r for r in mine if r["bound"] == "memory"]
            ari = [r for r in mine if r["bound"] != "memory"]
            wide = sum(1 for r in mem if r["wide_fraction"] == 1.0)
            ws = sorted({int(w) for r in mem for w in list(r["loads"]) + list(r["stores"])})
            occ = [r["occupancy"] for r in mine]
            pred = [r["predicted"] for r in mem]
            a = "-"
            if ari:
                lpf = [r["local_per_fma"] for r in ari if r["local_per_fma"] is not None]
                a = (f"{len(ari)} kernels: {med(lpf) if lpf else '-'} local/FMA, "
                     f"{med([r['fma_fraction'] for r in ari]):.0%} FMA, "
                     f"{med([r['predicted'] for r in ari]):.0%} "
                     f"({min(r['predicted'] for r in ari):.0%}-"
                     f"{max(r['predicted'] for r in ari):.0%})")
            out.append(f"| {fam} | {t} | {wide} / {len(mem)} | {', '.join(map(str, ws)) or '-'} "
                       f"| {min(occ):.0%}-{max(occ):.0%} | "
                       + (f"{med(pred):.0%} ({min(pred):.0%}-{max(pred):.0%})" if pred else "-")
                       + f" | {a} |")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Self-test: the readers and the gate on made-up code.

SASS_SAMPLE = """
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   LDG.E R8, desc[UR12][R4.64+0x4] ;
        /*0020*/                   LDG.E R9, desc[UR12][R4.64+0x8] ;
        /*0030*/                   LDG.E R6, desc[UR12][R4.64] ;
        /*0040*/                   LDG.E R10, desc[UR12][R4.64+0xc] ;
        /*0050*/                   STS [R11+0x4], R8 ;
        /*0060*/                   FFMA R3, R8, R9, R3 ;
        /*0070*/              @!P0 BRA `(.L_x_1) ;
        /*0080*/                   STG.E.128 desc[UR12][R6.64+0x10], R8 ;
.L_x_2:
        /*0090*/                   BRA `(.L_x_2);
"""

AMD_SAMPLE = """
k:                                      ; @k
	s_load_dwordx2 s[0:1], s[4:5], 0x0
.LBB0_1:
	global_load_dwordx4 v[4:7], v[4:5], off
	ds_write2_b32 v1, v6, v7 offset0:2 offset1:3
	v_pk_fma_f32 v[4:5], v[0:1], v[0:1], v[4:5]
	s_cbranch_execnz .LBB0_1
	global_store_short v[0:1], v2, off
	s_endpgm
"""

IGC_SAMPLE = """
L0:
        send.ugm (1|M0)          r1       r127    null:0  0xFF000000            0x6228E500           {A@1,$0} // wr:1+0, rd:2; load.ugm.d32x32t.a32.ca.ca.bti[255]
L552:
        send.ugm (32|M0)         r16      r12     null:0  0x0            0x08803580           {A@1,$5} // wr:4+0, rd:8; load.ugm.d32.a64
        mad (32|M0)              r82.0<1>:f    r82.0<1;0>:f      r112.0<1;0>:f     r112.0<1>:f      {Compacted,F@2}
        send.slm (32|M0)         null     r26     r16:8   0x0            0x04003504           {I@1,$4} // wr:2+8, rd:0; store.slm.d32x4.a32
(W)     jmpi                                 L552
"""


def self_test():
    failures, total = [], [0]

    def check(what, cond):
        total[0] += 1
        if not cond:
            failures.append(what)

    k = read_sass(SASS_SAMPLE)["k"]
    f = kernel_facts(k)
    check("sass: one loop (the trailing BRA to itself is none)", f["loops"] == 1)
    check("sass: four 4-byte loads", f["mem"]["widths"]["load"] == {4: 4})
    check("sass: the four loads make one 16-byte run",
          [a["run"] for a in f["mem"]["global_accesses"]] == [16] * 4)
    check("sass: one FMA, one local store", f["comp"]["fma"] == 1 and f["comp"]["local"] == 1)
    check("sass: the 16-byte store after the loop is a kernel store, its address read",
          [(a["width"], a["base"], a["offset"]) for a in f["kernel_stores"]]
          == [(16, "R6.64", 16)])
    # A GEMM's k loop: a tile-copy loop nested in it, then the FMAs. The
    # FMAs are the k loop's own; the copy loop is the memory loop.
    nest = read_sass("""
.text.k:
.L_x_1:
        /*0000*/                   LDG.E.128 R8, desc[UR12][R4.64] ;
.L_x_2:
        /*0010*/                   LDG.E R9, desc[UR12][R2.64] ;
        /*0020*/                   STS [R11], R9 ;
        /*0030*/              @!P1 BRA `(.L_x_2) ;
        /*0040*/                   LDS R12, [R13] ;
        /*0050*/                   FFMA R3, R12, R9, R3 ;
        /*0060*/                   FFMA R5, R12, R9, R5 ;
        /*0070*/              @!P0 BRA `(.L_x_1) ;
""")["k"]
    fn = kernel_facts(nest)
    check("nested: the k loop's own body has the 2 FMAs and 1 local load, not the copy's",
          fn["loops"] == 2 and fn["comp"]["fma"] == 2 and fn["comp"]["local"] == 1
          and fn["comp"]["instructions"] == 5)
    check("nested: the memory loop is the copy loop (4 bytes x 8 trips over the k loop's 16)",
          fn["mem"]["load_bytes"] == 4)
    # A score loop nested in a row loop: 2 FMAs an iteration inside beat 3
    # outside, as the inner loop runs 8 times for each outer iteration.
    score = read_sass("""
.text.k:
.L_x_1:
        /*0000*/                   FFMA R3, R12, R9, R3 ;
        /*0010*/                   FFMA R4, R12, R9, R4 ;
        /*0020*/                   FFMA R5, R12, R9, R5 ;
.L_x_2:
        /*0030*/                   LDS R12, [R13] ;
        /*0040*/                   LDS R14, [R13+0x4] ;
        /*0050*/                   FFMA R3, R12, R14, R3 ;
        /*0060*/                   FFMA R6, R12, R14, R6 ;
        /*0070*/              @!P1 BRA `(.L_x_2) ;
        /*0080*/              @!P0 BRA `(.L_x_1) ;
""")["k"]
    fs = kernel_facts(score)
    check("nested: the inner score loop is the compute loop (2 local loads per 2 FMAs)",
          fs["comp"]["fma"] == 2 and fs["comp"]["local"] == 2)
    a = read_amd(AMD_SAMPLE)["k"]
    fa = kernel_facts(a)
    check("amd: one loop, a 16-byte load", fa["loops"] == 1 and
          fa["mem"]["widths"]["load"] == {16: 1})
    check("amd: packed FMA counts two lane-ops", fa["comp"]["fma_ops"] == 2)
    check("amd: the 2-byte store is a kernel store", [s["width"] for s in fa["kernel_stores"]]
          == [2])
    i = read_igc(IGC_SAMPLE)
    fi = kernel_facts(i)
    check("igc: one loop with a 4-byte load", fi["loops"] == 1 and
          fi["mem"]["widths"]["load"] == {4: 1})
    check("igc: SIMD32 mad is an FMA, SLM store is local",
          fi["comp"]["fma"] == 1 and fi["comp"]["local"] == 1)

    # The gate on a made-up report: a memory-bound kernel with only
    # 16-byte accesses and full occupancy passes; make its hot-loop load
    # scalar, or make it spill, and it fails as a new miss.
    def code(width):
        ops = {16: "LDG.E.128", 4: "LDG.E"}[width]
        return read_sass(f"""
.text.k:
.L_x_1:
        /*0000*/                   {ops} R8, desc[UR12][R4.64] ;
        /*0010*/                   STG.E.128 desc[UR12][R6.64], R8 ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
""")["k"]
    stats = dict(regs=32, spills=0, scratch=0, shared=0)
    good = analyse("x/norm.cl", "-DOCLF_WGS=256", "ptxas-sm_90", "k", code(16), stats)
    check("gate: 16-byte hot loop and 64 warps pass",
          good["occupancy"] == 1.0 and not misses([good]))
    new, _, _ = gate([good], set())
    check("gate: nothing new on a clean report", not new)
    scalar = analyse("x/norm.cl", "-DOCLF_WGS=256", "ptxas-sm_90", "k", code(4), stats)
    new, _, _ = gate([scalar], set())
    check("gate: a scalar hot-loop load is a new miss",
          [k[4] for k in new] == ["narrow-load"])
    new, still, _ = gate([scalar], set(new))
    check("gate: the same miss once listed is known, not new", not new and len(still) == 1)
    spill = analyse("x/norm.cl", "-DOCLF_WGS=256", "ptxas-sm_90", "k", code(16),
                    dict(stats, spills=8))
    new, _, _ = gate([spill], set())
    check("gate: a spill is a new miss", [k[4] for k in new] == ["spill"])
    fat = analyse("x/norm.cl", "-DOCLF_WGS=256", "ptxas-sm_90", "k", code(16),
                  dict(stats, regs=128))
    new, _, _ = gate([fat], set())
    check("gate: 128 registers (16 warps of 64) is an occupancy miss",
          [k[4] for k in new] == ["occupancy"])
    known = {("norm.cl", "-DOCLF_WGS=256", "k", "ptxas-sm_90", "narrow-load")}
    _, _, fixed = gate([good], known)
    check("gate: a listed miss that no longer misses is reported fixed", fixed == sorted(known))
    # Occupancy against the figures a GPU engineer reads off ptxas: 72
    # registers and 42 KB of local memory at 32 work-items make 5 warps.
    w, _, limit = occupancy_nvidia("sm_90", 72, 42 * 1024, 32)
    check(f"occupancy: 72 regs, 42 KB, WGS 32 on sm_90 -> 5 warps (got {w}, {limit})",
          w == 5 and limit == "local memory")
    for what in failures:
        print(f"FAIL {what}")
    print(f"{total[0] - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) == 3 and sys.argv[1] == "--families":
        with open(sys.argv[2]) as f:
            print(families(json.load(f)["rows"]))
        return 0
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    # The report of every GPU default: gpu_compile with no space points
    # and no Intel device the report does not read.
    os.environ.setdefault("OCLF_GPU_COMPILE_SAMPLE", "0")
    os.environ["OCLF_GPU_REPORT_ONLY"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_compile
    return gpu_compile.main()


if __name__ == "__main__":
    sys.exit(main())
