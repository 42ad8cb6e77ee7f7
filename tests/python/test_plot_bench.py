"""tools/plot_bench.py on a made-up run (every label and the copy marks in the
SVG's text), oclfuse-bench --json-file end to end on a tiny shape (the
same-bytes copy's fields), and the rows a default run takes (an
out-of-cache shape for every op)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import plot_bench  # noqa: E402


def row(op, dtype, path, ns, shape=None, copy=2.5, same=None):
    b = 1e6
    r = {"op": op, "dtype": dtype, "shape": shape or {"rows": 4, "cols": 64}, "path": path,
         "time_ns": ns, "ci95_ns": [ns * 0.9, ns * 1.2], "min_bytes": b, "gbps": b / ns,
         "copy_gbps": copy}
    if same is not None:  # a same-bytes copy of `same` GB/s
        r.update({"copy_same_bytes": b, "copy_same_bytes_ns": b / same,
                  "copy_same_bytes_gbps": same, "of_copy_same_bytes": b / ns / same})
    return r


def test_chart(tmp_path):
    # rms_norm f32 with a same-bytes copy of 4 GB/s: 3 and 1 GB/s are 75% and 25% of it;
    # the other rows, without one, are labelled against the DRAM copy's 2.5 GB/s
    rows = [row("rms_norm", "f32", "fused", 1e6 / 3.0, same=4.0),
            row("rms_norm", "f32", "unfused", 1e6, same=4.0),
            row("rms_norm", "bf16", "fused", 1e6 / 2.0),
            row("l2_topk", "f32", "fused", 1e6 / 1.5, {"nq": 1, "n": 10, "d": 4, "k": 2})]
    src = tmp_path / "run.json"
    src.write_text(json.dumps(rows))
    summary, svg = plot_bench.main([str(src), "-o", str(tmp_path / "summary.svg"),
                                    "--detail", str(tmp_path / "chart.svg")])
    text = open(svg).read()
    for label in ("rms_norm", "l2_topk", "bandwidth (GB/s)", "dtype, shape",
                  "DRAM copy, same run (2.5 GB/s)", "copy of the same bytes", "fused", "unfused",
                  "75%", "25%", "80%", "60%", "1x10x4x2", "4x64"):
        assert label in text, label
    for label in ("120%", "40%"):  # the f32 rows' % of the DRAM copy: not shown
        assert label not in text, label
    png = plot_bench.main([str(src)])
    assert png == str(tmp_path / "run.png")  # the summary page alone
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_summary(tmp_path):
    # memory-bound: rms_norm f32 fused 3 GB/s, unfused 1 GB/s against a 4 GB/s same-bytes
    # copy (75% and 25%); arithmetic-bound: a GEMM row of 1e9 flops per 1e6 bytes (1000
    # flops a byte) at 2 GFLOP/s fused, 0.5 unfused and 1 for the yardstick
    rows = [row("rms_norm", "f32", "fused", 1e6 / 3.0, same=4.0),
            row("rms_norm", "f32", "unfused", 1e6, same=4.0),
            row("rms_norm", "f32", "fused", 1e6 / 2.0, {"rows": 1, "cols": 64}, same=4.0)]
    for path, ns in (("fused", 5e8), ("unfused", 2e9), ("yardstick", 1e9)):
        r = row("linear", "f16", path, ns, {"m": 512, "n": 512, "k": 512})
        r["gflops"] = 1e9 / ns
        rows.append(r)
    mem, ari = plot_bench.summary_rows(rows)
    # one shape per op and class: rms_norm's larger one
    assert [(op, shape) for op, shape, _ in mem] == [("rms_norm", "4x64")]
    assert [(op, shape) for op, shape, _ in ari] == [("linear", "512x512x512")]
    src = tmp_path / "run.json"
    src.write_text(json.dumps(rows))
    svg = plot_bench.main([str(src), "-o", str(tmp_path / "summary.svg")])
    text = open(svg).read()
    for label in ("rms_norm  4x64", "linear  512x512x512", "75%", "GFLOP/s (log scale)",
                  "memory-bound rows", "arithmetic-bound rows", "yardstick", "f32", "f16"):
        assert label in text, label
    assert "25%" not in text  # only the better path's figure is written


def test_bench_json_file(tmp_path):
    bench = os.environ.get("OCLFUSE_BENCH")
    if not bench:
        pytest.skip("OCLFUSE_BENCH (oclfuse-bench) not set: run through meson test")
    out = tmp_path / "b.json"
    r = subprocess.run([bench, "--ops", "rms_norm", "--shapes", "3x64", "--min-time", "0.02",
                        "--samples", "5", "--json-file", str(out)],
                       capture_output=True, text=True, check=True)
    assert "rms_norm" in r.stdout and "copy bandwidth" in r.stdout  # the table still printed
    rows = json.loads(out.read_text())
    assert {x["path"] for x in rows} == {"fused", "unfused"}
    assert all(x["copy_gbps"] > 0 and x["gbps"] > 0 for x in rows)
    for x in rows:
        # rms_norm 3x64 f32 moves 3*64*4 in, as much out and a 64-float weight: 1792
        # bytes, 896 each way, a whole number of 64-byte vectors, so the copy moves as
        # much; half that in 16-bit, still whole vectors
        want = 1792 if x["dtype"] == "f32" else 896
        assert x["min_bytes"] == want and x["copy_same_bytes"] == want
        assert x["copy_same_bytes_ns"] > 0
        # (6 digits; the time to the nanosecond)
        assert x["copy_same_bytes_gbps"] == pytest.approx(want / x["copy_same_bytes_ns"],
                                                          rel=1e-3)
        lo, hi = x["of_copy_same_bytes_ci95"]
        assert 0 < lo <= x["of_copy_same_bytes"] <= hi
        assert x["of_copy_dram"] == pytest.approx(want / x["time_ns"] / x["copy_gbps"],
                                                  rel=2e-3, abs=6e-5)
        assert x["out_of_cache"] is False and x["llc_bytes"] >= 0
    assert "%copy" in r.stdout and "%dram" in r.stdout
    png, detail = plot_bench.main([str(out), "-o", str(tmp_path / "b.png"),
                                   "--detail", str(tmp_path / "d.png")])
    assert os.path.getsize(png) > 10000 and os.path.getsize(detail) > 10000


def test_default_rows_past_the_cache():
    bench = os.environ.get("OCLFUSE_BENCH")
    if not bench:
        pytest.skip("OCLFUSE_BENCH (oclfuse-bench) not set: run through meson test")
    r = subprocess.run([bench, "--list-shapes", "--dtypes", "f16,bf16"], capture_output=True,
                       text=True, check=True)
    lines = r.stdout.splitlines()
    llc = float(lines[0].split(":")[1].split()[0])
    if llc == 0:
        pytest.skip("the device reports no last-level cache")
    rows = [ln.split() for ln in lines[2:]]
    ops = {x[0] for x in rows}
    # every op has a row past twice the cache in each dtype, and the notes agree
    # with the bytes
    for op in ops:
        for dt in ("f16", "bf16"):
            assert any(x[0] == op and x[1] == dt and float(x[3]) > 2 * llc for x in rows), (op, dt)
    for x in rows:
        assert (float(x[3]) > 2 * llc) == (x[-1] == "cache"), x
    # --full only adds rows
    full = subprocess.run([bench, "--list-shapes", "--dtypes", "f16,bf16", "--full"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert set(lines) < set(full)


def test_auto_row_says_when_it_runs_the_fused_call(tmp_path):
    bench = os.environ.get("OCLFUSE_BENCH")
    if not bench:
        pytest.skip("OCLFUSE_BENCH (oclfuse-bench) not set: run through meson test")
    # an empty per-machine database: auto and fused both take the heuristic's call
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    env.pop("OCLF_TUNING_DB", None)
    r = subprocess.run([bench, "--ops", "rms_norm", "--shapes", "3x64", "--dtypes", "f32",
                        "--paths", "fused,unfused,auto", "--min-time", "0.02", "--samples", "5",
                        "--json"], capture_output=True, text=True, check=True, env=env)
    rows = json.loads(r.stdout)
    assert [x["runs_fused"] for x in rows if x["path"] == "auto"] == [True]
    assert all("runs_fused" not in x for x in rows if x["path"] != "auto")


def test_short_run_takes_at_most_two_cheap_shapes():
    bench = os.environ.get("OCLFUSE_BENCH")
    if not bench:
        pytest.skip("OCLFUSE_BENCH (oclfuse-bench) not set: run through meson test")
    rows = [ln.split() for ln in subprocess.run(
        [bench, "--list-shapes", "--short", "--dtypes", "f32"], capture_output=True, text=True,
        check=True).stdout.splitlines()[2:]]
    ops = {x[0] for x in rows}
    assert "linear_q" in ops and "linear_cross_entropy" in ops
    for op in ops:
        cheap = [x for x in rows if x[0] == op and x[-1] != "cache"]
        assert 1 <= len([x for x in rows if x[0] == op]) <= 3 and len(cheap) <= 2, op
