#!/usr/bin/env python3
"""oclfuse-layer end to end on small layers: its JSON (every step, the bytes
a step reads = weights + KV so far, the roofline fraction = roofline time /
step time, the per-op shares adding up to the step) with dense and INT4
weights, the table, and the errors a user meets.

  layer_tool.py TOOL
"""
import json
import subprocess
import sys

failures = []
SMALL = ["--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
         "--mlp", "512", "--batch", "2", "--prefill", "5", "--decode", "3",
         "--block-size", "3"]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(tool, args):
    cmd = [tool] + args
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=300)
    sys.stderr.write(r.stderr)
    return r


def close(a, b, rel=2e-3, abs_=1e-3):
    return abs(a - b) <= abs_ + rel * abs(b)


def check_json(tool, weights, extra):
    r = run(tool, SMALL + ["--weights", weights, "--json"] + extra)
    check(r.returncode == 0, f"{weights}: exit 0")
    try:
        d = json.loads(r.stdout)
    except ValueError as e:
        check(False, f"{weights}: JSON parses ({e})")
        return
    steps = d["steps"]
    check(len(steps) == 4, f"{weights}: 4 steps")
    check(d["weights"] == ("int4" if weights == "int4" else "f32"), f"{weights}: weights named")
    check(d["copy_gbps"] > 0, f"{weights}: copy bandwidth measured")
    nk = (4 + 2 * 2) * 64 * 256 + 256 * 4 * 64 + 2 * 512 * 256 + 256 * 512
    want = 2 * (2 * 256 * 4 + (nk // 2 + nk // 128 * 2 if weights == "int4" else nk * 4))
    check(d["weight_bytes"] == want, f"{weights}: weight bytes {d['weight_bytes']} == {want}")
    for s in steps:
        i = s["step"]
        check(s["kind"] == ("prefill" if i == 0 else "decode"), f"step {i}: kind")
        check(s["tokens"] == (10 if i == 0 else 2), f"step {i}: tokens")
        kv = 2 * 2 * (5 + i) * 2 * 2 * 64 * 4
        check(s["kv_bytes"] == kv, f"step {i}: kv bytes {s['kv_bytes']} == {kv}")
        check(s["bytes"] == want + kv, f"step {i}: bytes = weights + kv")
        check(close(s["roofline_ms"], s["bytes"] / (d["copy_gbps"] * 1e9) * 1e3, 2e-3, 1e-4),
              f"step {i}: roofline = bytes / copy bandwidth")
        check(close(s["roofline_fraction"], s["roofline_ms"] / s["time_ms"], 2e-3, 1e-4),
              f"step {i}: fraction = roofline / time")
        check(close(s["tokens_per_s"], s["tokens"] / (s["time_ms"] / 1e3), 2e-3, 1e-2),
              f"step {i}: tokens/s")
        shares = s["op_share"]
        check(len(shares) == (10 if "--no-qk-norm" in extra else 9), f"step {i}: op count")
        check(all(v >= 0 for v in shares.values()) and close(sum(shares.values()), 1.0, 0, 2e-3),
              f"step {i}: shares add up to 1 ({sum(shares.values()):.4f})")


def main():
    tool = sys.argv[1]
    check_json(tool, "f16", ["--dtype", "f32"])
    check_json(tool, "int4", ["--dtype", "f32", "--no-qk-norm", "--o-residual"])
    r = run(tool, SMALL + ["--decode", "1", "--repeat", "3"])
    check(r.returncode == 0 and "prefill" in r.stdout and "roof ms" in r.stdout
          and "attention_paged" in r.stdout and "3 timed passes" in r.stdout, "table printed")
    sys.stdout.write(r.stdout)
    r = run(tool, ["--heads", "5", "--kv-heads", "2"])
    check(r.returncode == 2 and "multiple of kv heads" in r.stderr, "bad heads rejected")
    r = run(tool, ["--weights", "int4", "--mlp", "1000"])
    check(r.returncode == 2 and "multiples of the group" in r.stderr, "bad INT4 width rejected")
    r = run(tool, ["--batch", "0"])
    check(r.returncode == 2 and "--batch" in r.stderr, "batch 0 rejected")
    if failures:
        print(f"{len(failures)} failed: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
