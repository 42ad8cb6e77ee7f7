#!/usr/bin/python3
"""Charts of an oclfuse-bench JSON run (--json or --json-file).

The summary page (-o, default the JSON's name with .png): one line per op,
two panels. Memory-bound rows (below ARITH_INTENSITY flops per minimum byte)
show, per dtype, the fused and the unfused path as % of a copy of the same
bytes timed beside them (% of the DRAM copy for runs without it), the better
path's figure written beside it; arithmetic-bound rows show GFLOP/s of both
paths and of the op's yardstick (another library's plain call), on a log
scale. Each op is drawn at one shape: its out-of-cache shape where it has
one in that class, else its largest; the other shapes are on the detail
pages.

The detail pages (--detail): per op, one panel; per dtype and shape, the
fused, unfused (and auto) bandwidth with the 95% interval of each median, the
bandwidth of a copy of the same bytes timed beside them as a mark across the
group, and the DRAM copy of the same run as a line. Bar labels: % of the
same-bytes copy (% of the DRAM copy for runs without it).

PNG or SVG by each output's extension.

usage: tools/plot_bench.py BENCH.json [-o SUMMARY.png] [--detail DETAIL.png]
                           [--title TEXT]
"""
import argparse
import json
import math
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

PATHS = ["fused", "unfused", "auto"]
COLORS = {"fused": "#1f77b4", "unfused": "#ff7f0e", "auto": "#7f7f7f"}
COPY_COLOR = "#d62728"
SAME_COLOR = "#2ca02c"


def shape_text(shape):
    return "x".join(str(v) for v in shape.values())


def load(path):
    with (sys.stdin if path == "-" else open(path)) as f:
        rows = json.load(f)
    if not rows:
        raise SystemExit(f"plot_bench: {path} holds no results")
    return rows


def group(rows):
    """{op: {(dtype, shape): {path: row}}}, in the order of the run."""
    ops = {}
    for r in rows:
        key = (r["dtype"], shape_text(r["shape"]))
        ops.setdefault(r["op"], {}).setdefault(key, {})[r["path"]] = r
    return ops


def gbps_interval(r):
    """(low, high) bandwidth from the time's 95% interval."""
    lo_ns, hi_ns = r["ci95_ns"]
    return r["min_bytes"] / hi_ns, r["min_bytes"] / lo_ns


def of_copy(r, copy):
    """The bar's label: the same-bytes ratio where the run has it."""
    q = r.get("of_copy_same_bytes")
    return q if q is not None else r["gbps"] / copy


def same_bytes_gbps(g):
    """The group's same-bytes copy bandwidth (any path's row carries it), or None."""
    for r in g.values():
        if r.get("copy_same_bytes_gbps") is not None:
            return r["copy_same_bytes_gbps"]
    return None


def draw_panel(ax, op, groups, copy):
    paths = [p for p in PATHS if any(p in g for g in groups.values())]
    width = 0.8 / len(paths)
    top = copy
    for i, path in enumerate(paths):
        xs, ys, err, labels = [], [], [[], []], []
        for j, g in enumerate(groups.values()):
            r = g.get(path)
            if r is None:
                continue
            lo, hi = gbps_interval(r)
            xs.append(j + (i - (len(paths) - 1) / 2) * width)
            ys.append(r["gbps"])
            labels.append(of_copy(r, copy))
            err[0].append(max(r["gbps"] - lo, 0))
            err[1].append(max(hi - r["gbps"], 0))
            top = max(top, hi, r["gbps"])
        ax.bar(xs, ys, width, yerr=err, capsize=2, color=COLORS[path], label=path,
               error_kw={"elinewidth": 0.8, "ecolor": "#333333"})
        # % of copy above each bar's interval, clear of the error bar
        for x, y, up, q in zip(xs, ys, err[1], labels):
            ax.annotate(f"{100 * q:.0f}%", (x, y + up), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
    # each group's same-bytes copy across its bars, over them like the line
    for j, g in enumerate(groups.values()):
        same = same_bytes_gbps(g)
        if same is not None:
            ax.hlines(same, j - 0.45, j + 0.45, color=SAME_COLOR, linewidth=2, zorder=6,
                      label="copy of the same bytes")
            top = max(top, same)
    # drawn over the bars, so it shows where a bar passes it
    ax.axhline(copy, color=COPY_COLOR, linestyle="--", linewidth=1.5, zorder=5,
               label=f"DRAM copy, same run ({copy:.1f} GB/s)")
    ax.set_axisbelow(True)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{dt}\n{shape}" for dt, shape in groups], fontsize=8)
    ax.set_title(op, fontsize=11, fontweight="bold")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_xlabel("dtype, shape")
    ax.set_ylim(0, top * 1.18)
    ax.grid(axis="y", alpha=0.3)


# Flops per minimum byte from which a row counts as arithmetic-bound: about
# what a CPU core's vector units do per byte its memory delivers (two cores
# of AVX-512 FMAs near 185 GFLOP/s against 26 GB/s here is 7); GPUs sit
# higher, so a few rows counted arithmetic-bound here are memory-bound there.
ARITH_INTENSITY = 8.0
DTYPE_COLORS = {"f32": "#1f77b4", "f16": "#2ca02c", "bf16": "#9467bd"}


def summary_rows(rows):
    """([(op, shape, {dtype: {path: row}})] memory-bound,
    [...] arithmetic-bound): one shape per op and class, in run order."""
    by_op = {}
    for r in rows:
        key = shape_text(r["shape"])
        by_op.setdefault(r["op"], {}).setdefault(key, {}).setdefault(r["dtype"], {})[r["path"]] = r
    mem, ari = [], []
    for op, shapes in by_op.items():
        classes = {"mem": [], "ari": []}
        for shape, dtypes in shapes.items():
            any_row = next(iter(next(iter(dtypes.values())).values()))
            flops_per_byte = (any_row["gflops"] / any_row["gbps"]
                              if any_row.get("gflops") and any_row["gbps"] > 0 else 0.0)
            cls = "ari" if flops_per_byte >= ARITH_INTENSITY else "mem"
            classes[cls].append((any_row.get("out_of_cache", False), any_row["min_bytes"]
                                 if cls == "mem" else any_row["gflops"] * any_row["time_ns"],
                                 shape, dtypes))
        for cls, dest in (("mem", mem), ("ari", ari)):
            if classes[cls]:
                _, _, shape, dtypes = max(classes[cls], key=lambda c: (c[0], c[1]))
                dest.append((op, shape, dtypes))
    return mem, ari


def copy_share(r):
    """% of the same-bytes copy, else of the DRAM copy."""
    q = r.get("of_copy_same_bytes")
    return 100 * (q if q is not None else r["gbps"] / r["copy_gbps"])


def draw_summary_panel(ax, entries, value, xlabel, log=False, yardstick=False):
    dtypes = [d for d in DTYPE_COLORS if any(d in e[2] for e in entries)]
    n = len(entries)
    offsets = {d: (i - (len(dtypes) - 1) / 2) * 0.25 for i, d in enumerate(dtypes)}
    hi = 0
    for j, (op, shape, by_dtype) in enumerate(entries):
        y = n - 1 - j
        for d in dtypes:
            paths = by_dtype.get(d)
            if not paths:
                continue
            yy = y + offsets[d]
            got = {p: value(paths[p]) for p in ("fused", "unfused") if p in paths}
            got = {p: v for p, v in got.items() if v is not None and v > 0}
            if not got:
                continue
            c = DTYPE_COLORS[d]
            if len(got) == 2:
                ax.plot([got["unfused"], got["fused"]], [yy, yy], color=c, alpha=0.5, lw=1.5)
            if "fused" in got:
                ax.plot(got["fused"], yy, "o", color=c, ms=7)
            if "unfused" in got:
                ax.plot(got["unfused"], yy, "o", mfc="white", mec=c, ms=7, mew=1.5)
            if yardstick and "yardstick" in paths and value(paths["yardstick"]):
                ax.plot(value(paths["yardstick"]), yy, "|", color="black", ms=11, mew=2)
                hi = max(hi, value(paths["yardstick"]))
            best = max(got, key=got.get)
            hi = max(hi, got[best])
            text = f"{got[best]:.0f}{'%' if not log else ''}" + (" u" if best == "unfused" else "")
            ax.annotate(text, (max(got.values()), yy), xytext=(6, 0), textcoords="offset points",
                        va="center", fontsize=7.5, color=c)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{op}  {shape}" for op, shape, _ in reversed(entries)], fontsize=9)
    ax.set_ylim(-0.6, n - 0.4)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(right=max(hi, 1) * 2.2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    else:
        ax.set_xlim(0, max(hi * 1.15, 110))
        ax.axvline(100, color="#d62728", ls="--", lw=1)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    for y in range(n):
        if y % 2:
            ax.axhspan(y - 0.5, y + 0.5, color="#f2f2f2", zorder=0)


def plot_summary(rows, out, title=None):
    mem, ari = summary_rows(rows)
    copy = statistics.median(r["copy_gbps"] for r in rows)
    panels = [p for p in ((mem, "mem"), (ari, "ari")) if p[0]]
    tallest = max(len(p[0]) for p in panels)
    height = min(17.5, max(4.0, 0.42 * tallest + 2.4))
    fig, axes = plt.subplots(1, len(panels), squeeze=False, figsize=(18, height),
                             gridspec_kw={"width_ratios": [max(len(p[0]), 4) for p in panels]
                                          if len(panels) == 2 else [1]})
    for ax, (entries, cls) in zip(axes[0], panels):
        if cls == "mem":
            draw_summary_panel(ax, entries, copy_share,
                               "% of a copy of the same bytes (100%: the copy's speed)")
            ax.set_title("memory-bound rows: the better path's %copy written beside it",
                         fontsize=11, fontweight="bold")
        else:
            draw_summary_panel(ax, entries, lambda r: r.get("gflops"),
                               "GFLOP/s (log scale)", log=True, yardstick=True)
            ax.set_title(f"arithmetic-bound rows (>= {ARITH_INTENSITY:g} flops a byte): GFLOP/s",
                         fontsize=11, fontweight="bold")
    handles = [plt.Line2D([], [], ls="", marker="o", color=c, ms=7, label=d)
               for d, c in DTYPE_COLORS.items()]
    handles += [plt.Line2D([], [], ls="", marker="o", color="gray", ms=7, label="fused"),
                plt.Line2D([], [], ls="", marker="o", mfc="white", mec="gray", ms=7, mew=1.5,
                           label="unfused (\"u\": the better path)")]
    if ari:
        handles.append(plt.Line2D([], [], ls="", marker="|", color="black", ms=11, mew=2,
                                  label="yardstick (another library's call)"))
    h = fig.get_figheight()
    fig.suptitle(title or f"oclfuse-bench summary (DRAM copy in the same run: {copy:.1f} GB/s; "
                 "every shape: the detail pages)", fontsize=12, y=1 - 0.1 / h, va="top")
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.36 / h), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.62 / h))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot(rows, out, title=None):
    ops = group(rows)
    copy = statistics.median(r["copy_gbps"] for r in rows)
    n = len(ops)
    # panels side by side while the figure stays within about 22 inches
    widest = max(len(g) for g in ops.values())
    panel = max(4.5, 1.35 * widest + 1.5)
    ncols = max(1, min(n, 3, int(22 // panel)))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(ncols * panel, nrows * 3.8 + 1.2))
    for ax, (op, groups) in zip(axes.flat, ops.items()):
        draw_panel(ax, op, groups, copy)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    seen = {}
    for ax in list(axes.flat)[:n]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    # title, then legend, then the panels, placed in inches from the top so a
    # tall figure keeps them apart
    h = fig.get_figheight()
    fig.suptitle(title or "oclfuse-bench: minimum bytes moved / time (bar labels: % of the same-bytes copy)",
                 fontsize=12, y=1 - 0.12 / h, va="top")
    fig.legend(list(seen.values()), list(seen.keys()), loc="upper center", ncol=len(seen),
               bbox_to_anchor=(0.5, 1 - 0.45 / h), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.85 / h))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="oclfuse-bench --json output ('-': stdin)")
    ap.add_argument("-o", "--output",
                    help="the summary page, PNG or SVG (default: the JSON's name, .png)")
    ap.add_argument("--detail", help="the per-op panels too, into this PNG or SVG")
    ap.add_argument("--title", help="figure title")
    a = ap.parse_args(argv)
    out = a.output or (a.json.rsplit(".", 1)[0] if a.json != "-" else "bench") + ".png"
    rows = load(a.json)
    plot_summary(rows, out, a.title)
    if a.detail:
        plot(rows, a.detail, a.title)
        return out, a.detail
    return out


if __name__ == "__main__":
    print(main())
