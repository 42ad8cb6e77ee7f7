#!/usr/bin/env python3
"""The GPU model's sm_90 predictions for the decoder layer's kernels
(tools/layer-gpu-sm90.tsv, read by oclfuse-layer), written from the GPU
report of the programs the layer launches, and checked against a fresh
report.

  layer_gpu_table.py launches LAUNCHES.tsv...
        prints the programs of the launch lists (oclfuse-layer --gpu-programs
        run with OCLF_DEVICE_CLASS=gpu) as tests/gpu_report.py's variant
        list: "source<TAB>options<TAB>default"
  layer_gpu_table.py DIR
        the same, with the lists named by OCLF_LAYER_LAUNCHES (colon
        separated): the form tests/gpu_report.py calls its variant lister in
  layer_gpu_table.py write REPORT.json LAUNCHES.tsv...
        the table on stdout: one row per launch of the lists, with the
        report's ptxas-sm_90 row of its (source, options, kernel)
  layer_gpu_table.py check TABLE REPORT.json
        every row of TABLE whose (source, options, kernel) the report has on
        ptxas-sm_90 must carry the report's bound, fraction and "of"; exit 1
        on a disagreement, 77 when the report has none of the table's
        programs (nothing to compare)

Making the table (docs/decoder-layer.md):
  OCLF_DEVICE_CLASS=gpu oclfuse-layer ... --gpu-programs > LAUNCHES.tsv   (each configuration)
  OCLF_LAYER_LAUNCHES=A.tsv:B.tsv python3 tests/gpu_report.py tools/layer_gpu_table.py cl OUT
  python3 tools/layer_gpu_table.py write OUT/gpu-report.json A.tsv B.tsv > tools/layer-gpu-sm90.tsv
"""
import json
import os
import sys

TARGET = "ptxas-sm_90"
COLUMNS = ["op", "kind", "dtype", "weights", "kernel", "source", "options", "bound",
           "predicted", "of"]


def read_launches(path):
    rows = []
    with open(path) as f:
        for line in f:
            fld = line.rstrip("\n").split("\t")
            if len(fld) == 7 and fld[0] != "op":
                rows.append(dict(zip(COLUMNS[:7], fld)))
    return rows


def report_rows(path):
    with open(path) as f:
        d = json.load(f)
    rows = {(r["source"], r["options"], r["kernel"]): r for r in d["rows"]
            if r["target"] == TARGET}
    return d["devices"][TARGET], rows


def device_line(dev):
    fp32 = dev["units"] * dev["ghz"] * dev["fma_lanes"] * 2 / 1000
    return f"#device\t{TARGET}\t{dev['name']}\t{dev['gbs']:g}\t{fp32:.1f}\t{dev['matrix_tflops']:g}"


def write(report, lists):
    dev, rows = report_rows(report)
    print("# The GPU model's predictions (docs/gpu-model.md) for the kernels the decoder "
          "layer launches on a GPU;")
    print("# written by tools/layer_gpu_table.py from the GPU report: do not edit by hand.")
    print("# #device: target, device, HBM GB/s, FP32 TFLOP/s, f16/bf16 matrix TFLOP/s")
    print(device_line(dev))
    print("\t".join(COLUMNS))
    missing, seen = [], set()
    for path in lists:
        for la in read_launches(path):
            key = (la["source"], la["options"], la["kernel"])
            line = tuple(la[c] for c in COLUMNS[:7])
            if line in seen:
                continue
            seen.add(line)
            r = rows.get(key)
            if not r:
                missing.append(" ".join(key))
                continue
            print("\t".join(list(line) + [r["bound"], f"{r['predicted']:.3f}",
                                          r["predicted_of"]]))
    for m in missing:
        print(f"layer_gpu_table: no {TARGET} row for {m}", file=sys.stderr)
    return 1 if missing else 0


def check(table, report):
    if not os.path.exists(report):
        print(f"layer_gpu_table: no report at {report}; nothing to compare")
        return 77
    dev, rows = report_rows(report)
    bad, same = [], 0
    with open(table) as f:
        lines = [ln.rstrip("\n") for ln in f]
    want_device = device_line(dev)
    for ln in lines:
        if ln.startswith("#device") and ln != want_device:
            bad.append(f"device line '{ln}' where the report gives '{want_device}'")
    for ln in lines:
        fld = ln.split("\t")
        if ln.startswith("#") or len(fld) != len(COLUMNS) or fld[0] == "op":
            continue
        t = dict(zip(COLUMNS, fld))
        r = rows.get((t["source"], t["options"], t["kernel"]))
        if not r:
            continue
        if (t["bound"], float(t["predicted"]), t["of"]) != \
                (r["bound"], round(r["predicted"], 3), r["predicted_of"]):
            bad.append(f"{t['op']} {t['kind']} {t['dtype']} {t['weights']} {t['kernel']}: table "
                       f"{t['bound']} {t['predicted']} of {t['of']}, report {r['bound']} "
                       f"{r['predicted']:.3f} of {r['predicted_of']} ({t['source']} "
                       f"{t['options']})")
        else:
            same += 1
    for b in bad:
        print("FAIL " + b)
    if bad:
        print(f"layer_gpu_table: {len(bad)} rows disagree with {report}: rewrite {table} "
              f"(layer_gpu_table.py write)")
        return 1
    if not same:
        print(f"layer_gpu_table: {report} has none of the table's programs; nothing to compare")
        return 77
    print(f"layer_gpu_table: {same} rows agree with {report}")
    return 0


def main():
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "launches":
        lists = a[1:]
    elif len(a) == 1 and os.path.isdir(a[0]):
        lists = [p for p in os.environ.get("OCLF_LAYER_LAUNCHES", "").split(":") if p]
    elif len(a) >= 3 and a[0] == "write":
        return write(a[1], a[2:])
    elif len(a) == 3 and a[0] == "check":
        return check(a[1], a[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    seen = set()
    for path in lists:
        for la in read_launches(path):
            key = (la["source"], la["options"])
            if key not in seen:
                seen.add(key)
                print(f"{la['source']}\t{la['options']}\tdefault")
    return 0 if seen else 1


if __name__ == "__main__":
    sys.exit(main())
