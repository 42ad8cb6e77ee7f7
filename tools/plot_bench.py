#!/usr/bin/python3
"""Bar chart of an oclfuse-bench JSON run (--json or --json-file): per op, one
panel; per dtype and shape, the fused, unfused (and auto) bandwidth with the
95% interval of each median, the bandwidth of a copy of the same bytes timed
beside them as a mark across the group, and the DRAM copy of the same run as
a line. Bar labels: % of the same-bytes copy (% of the DRAM copy for runs
without it). PNG or SVG by the output's extension.

usage: tools/plot_bench.py BENCH.json [-o OUT.png] [--title TEXT]
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
    ap.add_argument("-o", "--output", help="PNG or SVG (default: the JSON's name, .png)")
    ap.add_argument("--title", help="figure title")
    a = ap.parse_args(argv)
    out = a.output or (a.json.rsplit(".", 1)[0] if a.json != "-" else "bench") + ".png"
    plot(load(a.json), out, a.title)
    return out


if __name__ == "__main__":
    print(main())
