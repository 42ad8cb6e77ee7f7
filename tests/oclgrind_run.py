#!/usr/bin/env python3
"""Runs a test program on oclgrind (the `oclgrind` wrapper, which preloads its
OpenCL runtime, so the same binaries run there) and judges the result.

  oclgrind_run.py check   EXE [ARGS]  data-race, uninitialized-value, memory
                                      and API checks; any report fails
  oclgrind_run.py traffic EXE PLUGIN  global load/store bytes per op call,
                                      counted by the oclgrind_traffic plugin,
                                      against the op's minimum
  oclgrind_run.py device[-N] EXE [ARGS]  oclgrind as a second device with a
                                      GPU's limits (N work-items a group, 256
                                      by default; 48 KiB local memory) and the
                                      GPU defaults (OCLF_DEVICE_CLASS=gpu)

Exit 77 (skip) when oclgrind is not installed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Fused kernels may move this much more than the op's minimum traffic.
TRAFFIC_SLACK = 1.05


def run(cmd, env):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    mode, exe, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not shutil.which("oclgrind"):
        print("oclgrind is not installed")
        return 77
    env = dict(os.environ)
    # Programs oclgrind built are cached apart from the POCL ones (the cache key
    # holds the device fingerprint anyway); without a cache folder given (a
    # run outside meson), none, rather than a folder in the working directory.
    base_cache = env.get("OCLF_CACHE_DIR", "")
    env["OCLF_CACHE_DIR"] = base_cache + "-oclgrind-" + mode if base_cache else ""
    env.pop("OCLF_TEST_PLATFORM", None)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "oclgrind.log")
        if mode == "check":
            # --uninitialized crashes oclgrind 21.10 inside its Uninitialized
            # plugin on optimized kernel IR (a memcpy in instructionExecuted);
            # at -O0 it runs, so the checked kernels are built unoptimized.
            # Paths through another library's kernels run again without it.
            base = ["oclgrind", "--data-races", "--check-api", "--build-options", "-O0",
                    "--log", log]
            env["OCLF_KERNELS_EXTERNAL"] = "0"
            r = run(base[:2] + ["--uninitialized"] + base[2:] + [exe, "check"] + args, env)
            reports = open(log, errors="replace").read() if os.path.exists(log) else ""
            if r.returncode == 0 and not reports.strip():
                if os.path.exists(log):
                    os.remove(log)
                sys.stdout.write(r.stdout)
                env["OCLF_KERNELS_EXTERNAL"] = "1"
                cmd = base + [exe, "check"] + args
            else:
                cmd = None
        elif mode == "traffic":
            plugin = os.path.abspath(args.pop(0))
            cmd = ["oclgrind", "--plugins", plugin, "--log", log, exe, "traffic"] + args
        elif mode == "device" or mode.startswith("device-"):
            wgs = mode[len("device-"):] if mode != "device" else "256"
            cmd = ["oclgrind", "--max-wgsize", wgs, "--local-mem-size", "49152",
                   "--check-api", "--log", log, exe] + args
            env["OCLF_TEST_QUICK"] = "1"
            # oclgrind calls itself both a CPU and a GPU, and the heuristics
            # test the CPU flag first: make them take the GPU's path.
            env["OCLF_DEVICE_CLASS"] = "gpu"
        else:
            print("unknown mode", mode)
            return 2
        if cmd:
            r = run(cmd, env)
            reports = open(log, errors="replace").read() if os.path.exists(log) else ""
    out = r.stdout
    if mode != "traffic":
        sys.stdout.write(out)
    if reports.strip():
        print("oclgrind reported:\n" + reports[:20000])
        return 1
    if r.returncode != 0:
        if mode == "traffic":
            sys.stdout.write(out[-20000:])
        print(f"exit status {r.returncode}")
        return 1
    if mode == "traffic":
        return traffic(out)
    return 0


def traffic(out):
    """Sums the global bytes of every kernel between '@@ begin' and '@@ end'."""
    calls = []
    cur = None
    for line in out.splitlines():
        if line.startswith("@@ begin"):
            f = line.split()
            kv = dict(x.split("=") for x in f[6:])
            cur = {"op": f[2], "dtype": f[3], "path": f[4], "shape": f[5],
                   "min": float(kv["min"]), "bounded": kv.get("bounded") in ("1", "2"),
                   "exact": kv.get("bounded") == "2",
                   "load": 0, "store": 0, "kernels": []}
        elif line.startswith("@@ end"):
            calls.append(cur)
            cur = None
        elif cur is not None:
            m = re.match(r"Global traffic for kernel '([\w?]+)': load (\d+) bytes, "
                         r"store (\d+) bytes", line)
            if m:
                cur["kernels"].append(m.group(1))
                cur["load"] += int(m.group(2))
                cur["store"] += int(m.group(3))
        elif line.startswith("FAIL"):
            print(line)
    by_key = {(c["op"], c["dtype"], c["path"]): c for c in calls}
    bad = 0
    print("Global memory traffic per call, counted by an oclgrind plugin, each op with its")
    print("traffic configuration (tests/test_kernels.c: the structure that stages in local")
    print("memory what it would otherwise re-read, so every input leaves global memory once).")
    print(f"ratio = moved / minimum (inputs read once, outputs written once); bound {TRAFFIC_SLACK}x.")
    print(f"{'op':16} {'dtype':5} {'shape':8} {'min B':>8} {'fused B':>8} {'ratio':>6} "
          f"{'unfused B':>9} {'ratio':>6} {'unf/fus':>7}")
    for (op, dt, path), c in sorted(by_key.items()):
        if path != "fused":
            continue
        moved = c["load"] + c["store"]
        bound = TRAFFIC_SLACK * c["min"]
        u = by_key.get((op, dt, "unfused"))
        umoved = u["load"] + u["store"] if u else float("nan")
        line = (f"{op:16} {dt:5} {c['shape']:8} {c['min']:8.0f} {moved:8d} {moved / c['min']:6.3f} "
                f"{umoved:9.0f} {umoved / c['min']:6.3f} "
                f"{umoved / moved if moved else 0:7.3f}")
        why = []
        if moved == 0:
            why.append("no global traffic counted")
        if not c["bounded"]:
            line += "  (reported, not bounded)"
        elif c["exact"] and moved != c["min"]:
            why.append(f"fused moves {moved}, not exactly the minimum")
        elif moved > bound:
            why.append(f"fused moves {moved} > bound {bound:.0f}")
        if c["bounded"] and u and not umoved > moved:
            why.append(f"unfused {umoved} does not exceed fused {moved}")
        if why:
            bad += 1
            line += "  FAIL: " + "; ".join(why)
        print(line)
    if not calls:
        print("no calls measured")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
