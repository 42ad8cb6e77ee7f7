#!/usr/bin/env python3
"""oclfuse-layer end to end on small layers: its JSON (every step, the bytes
a step reads = weights + KV so far, the roofline fraction = roofline time /
step time, the per-op shares adding up to the step, the attention share,
the sm_90 predicted roofline fraction from a prediction table) with dense
and INT4 weights, the table, and the errors a user meets; then the
checked-in prediction table against the gpu-compile suite's report where
one exists.

  layer_tool.py TOOL [TABLE_SCRIPT TABLE REPORT.json]
"""
import json
import os
import subprocess
import sys
import tempfile

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
        attn = shares["attention_paged"] + shares.get("kv_cache_write", 0.0)
        check(0 < s["attention_share"] <= 1 and close(s["attention_share"], attn, 0, 2e-4),
              f"step {i}: attention share {s['attention_share']} = attention_paged "
              f"(+ kv_cache_write) share {attn:.4f}")
        check(set(s["op_bytes"]) == set(shares) and all(v > 0 for v in s["op_bytes"].values()),
              f"step {i}: bytes of every op")
    return d


# A made-up prediction table: every kernel of the default configuration's
# ops at `frac` of HBM (decode) and the GEMMs at `frac` of FP32 (prefill).
OPS = ["rms_norm", "linear_qkv", "qk_norm_rope_cache", "attention_paged", "linear_o",
       "add_rms_norm", "linear_gate_up", "act_and_mul", "linear_down"]


def made_up_table(path, frac, leave_out=None):
    with open(path, "w") as f:
        f.write("#device\tptxas-sm_90\tH100 SXM\t3350\t66.9\t989\n")
        f.write("op\tkind\tdtype\tweights\tkernel\tsource\toptions\tbound\tpredicted\tof\n")
        for op in OPS:
            if op == leave_out:
                continue
            for kind in ("decode", "prefill"):
                of = "FP32" if kind == "prefill" and op.startswith("linear") else "HBM"
                f.write(f"{op}\t{kind}\tf32\t-\tk\ts.cl\t-DX=1\tmemory\t{frac}\t{of}\n")
                # a second, faster kernel of the same op: the op is charged
                # at its slowest one
                f.write(f"{op}\t{kind}\tf32\t-\tk2\ts.cl\t-DX=2\tmemory\t1.0\t{of}\n")


def check_predicted(tool):
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "t.tsv")
        made_up_table(table, 0.4)
        r = run(tool, SMALL + ["--dtype", "f32", "--json", "--gpu-table", table])
        check(r.returncode == 0, "made-up table: exit 0")
        d = json.loads(r.stdout)
        g = d["gpu_model"]
        check(g is not None and g["hbm_gbps"] == 3350 and g["fp32_tflops"] == 66.9,
              "made-up table: device figures read")
        for s in d["steps"]:
            i, ob = s["step"], s["op_bytes"]
            if i == 0:
                want = (sum(v for k, v in ob.items() if not k.startswith("linear")) / 3350e9
                        + sum(4 * 2 * 5 * n * k for n, k in
                              ((512, 256), (256, 256), (1024, 256), (256, 512))) / 66.9e12) * 1e3
            else:
                want = sum(ob.values()) / 3350e9 * 1e3
            check(close(s["gpu_ideal_ms"], want, 1e-3, 1e-9),
                  f"step {i}: sm_90 ideal {s['gpu_ideal_ms']} ms = bytes / HBM (+ GEMM flops / "
                  f"FP32 peak) {want:.6f}")
            check(close(s["gpu_predicted_ms"], want / 0.4, 1e-3, 1e-9) and
                  close(s["gpu_predicted_fraction"], 0.4, 0, 2e-4),
                  f"step {i}: predicted at the slowest kernel's 40% "
                  f"({s['gpu_predicted_fraction']})")
        made_up_table(table, 0.4, leave_out="act_and_mul")
        r = run(tool, SMALL + ["--dtype", "f32", "--json", "--gpu-table", table])
        d = json.loads(r.stdout)
        check(r.returncode == 0 and all(s["gpu_predicted_fraction"] == -1 for s in d["steps"]),
              "an op the table lacks: no prediction")
        r = run(tool, SMALL + ["--dtype", "f32", "--decode", "1", "--gpu-table", table + "x"])
        check(r.returncode == 2 and "prediction table" in r.stderr, "a missing table rejected")
    # the checked-in table on its own configuration (f16, dense weights)
    r = run(tool, SMALL + ["--dtype", "f16", "--json"])
    d = json.loads(r.stdout)
    check(r.returncode == 0 and d["gpu_model"] is not None, "checked-in table found")
    for s in d["steps"]:
        check(0 < s["gpu_predicted_fraction"] <= 1 and
              s["gpu_predicted_ms"] >= s["gpu_ideal_ms"] > 0,
              f"step {s['step']}: sm_90 predicted fraction {s['gpu_predicted_fraction']} in (0, 1]")
    # decode only: no step 0, the same decode bytes
    r = run(tool, SMALL + ["--dtype", "f32", "--json", "--decode-only"])
    d2 = json.loads(r.stdout) if r.returncode == 0 else {"steps": []}
    check([s["step"] for s in d2["steps"]] == [1, 2, 3] and
          d2["steps"][0]["bytes"] == d["steps"][1]["bytes"] * 2,
          "--decode-only: decode steps only, their bytes unchanged")


def main():
    tool = sys.argv[1]
    check_json(tool, "f16", ["--dtype", "f32"])
    check_json(tool, "int4", ["--dtype", "f32", "--no-qk-norm", "--o-residual"])
    check_predicted(tool)
    r = run(tool, SMALL + ["--decode", "1", "--repeat", "3"])
    check(r.returncode == 0 and "prefill" in r.stdout and "roof ms" in r.stdout
          and "attention_paged" in r.stdout and "3 timed passes" in r.stdout
          and " attention\n" in r.stdout and "sm_90 %roof pred" in r.stdout
          and "CPU %roof meas" in r.stdout, "table printed")
    sys.stdout.write(r.stdout)
    r = run(tool, ["--heads", "5", "--kv-heads", "2"])
    check(r.returncode == 2 and "multiple of kv heads" in r.stderr, "bad heads rejected")
    r = run(tool, ["--weights", "int4", "--mlp", "1000"])
    check(r.returncode == 2 and "multiples of the group" in r.stderr, "bad INT4 width rejected")
    r = run(tool, ["--batch", "0"])
    check(r.returncode == 2 and "--batch" in r.stderr, "batch 0 rejected")
    if len(sys.argv) == 5:
        script, table, report = sys.argv[2:]
        r = subprocess.run([sys.executable, script, "check", table, report], text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        sys.stdout.write(r.stdout)
        check(r.returncode in (0, 77), "the prediction table agrees with the GPU report "
              "(or there is no report to compare)")
    if failures:
        print(f"{len(failures)} failed: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
