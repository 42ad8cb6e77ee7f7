#!/usr/bin/env python3
"""oclfuse-search-mpi end to end: 2 and 3 ranks against 1, bit for bit, on a
seeded synthetic database, an .fvecs and a .bvecs one (scored against ground
truth computed here), and the errors a user meets (truncated file, queries of
another dimension).

  mpi_search.py TOOL

Exit 77 (skip) when mpirun is not installed.
"""
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def mpirun(tool, np, args):
    cmd = ["mpirun", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-np", str(np), tool] + args
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=300)
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr)
    return r


def write_vecs(path, rows, fmt):
    with open(path, "wb") as f:
        for row in rows:
            f.write(struct.pack("<i", len(row)))
            f.write(struct.pack("<%d%s" % (len(row), fmt), *row))


def read_ivecs(path):
    data = open(path, "rb").read()
    out, at = [], 0
    while at < len(data):
        (k,) = struct.unpack_from("<i", data, at)
        out.append(list(struct.unpack_from("<%di" % k, data, at + 4)))
        at += 4 + 4 * k
    return out


def same_files(a, b):
    return os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()


def compare_ranks(tool, tmp, name, args, ranks=(2,)):
    """Runs with 1 rank and with each count in `ranks`; results must match."""
    out1 = os.path.join(tmp, name + "-1")
    r = mpirun(tool, 1, args + ["--out", out1 + ".ivecs", "--out-dist", out1 + ".fvecs"])
    check(r.returncode == 0, f"{name}: 1 rank runs")
    for np in ranks:
        outn = os.path.join(tmp, f"{name}-{np}")
        r = mpirun(tool, np, args + ["--out", outn + ".ivecs", "--out-dist", outn + ".fvecs"])
        check(r.returncode == 0, f"{name}: {np} ranks run")
        check(same_files(out1 + ".ivecs", outn + ".ivecs") and
              same_files(out1 + ".fvecs", outn + ".fvecs"),
              f"{name}: {np} ranks give the 1-rank ids and distances bit for bit")
    return out1


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = os.path.abspath(sys.argv[1])
    if not shutil.which("mpirun"):
        print("mpirun is not installed (Debian: openmpi-bin)")
        return 77
    # Two POCL devices, so two ranks search on two devices.
    os.environ.setdefault("POCL_DEVICES", "pthread pthread")
    with tempfile.TemporaryDirectory() as tmp:
        compare_ranks(tool, tmp, "synthetic", ["--synthetic", "3001,37", "--nq", "9", "-k", "10"],
                      ranks=(2, 3))
        # k beyond the rows of every rank: padding survives the merge.
        out = compare_ranks(tool, tmp, "tiny", ["--synthetic", "5,8", "--nq", "3", "-k", "7"],
                            ranks=(2, 3))
        ids = read_ivecs(out + ".ivecs")
        check(all(sorted(row[:5]) == [0, 1, 2, 3, 4] and row[5:] == [-1, -1] for row in ids),
              "tiny: 5 rows found, then padding -1")

        # .fvecs database, queries and ground truth computed here in fp64.
        rnd = random.Random(3)
        n, d, nq, k = 700, 24, 6, 5
        base = [[rnd.uniform(-1, 1) for _ in range(d)] for _ in range(n)]
        base = [list(struct.unpack("<%df" % d, struct.pack("<%df" % d, *row))) for row in base]
        queries = [[rnd.uniform(-1, 1) for _ in range(d)] for _ in range(nq)]
        queries = [list(struct.unpack("<%df" % d, struct.pack("<%df" % d, *r))) for r in queries]
        gt = []
        for qv in queries:
            dist = [(sum((a - b) ** 2 for a, b in zip(qv, row)), i) for i, row in enumerate(base)]
            gt.append([i for _, i in sorted(dist)[:k]])
        bpath, qpath, gpath = (os.path.join(tmp, f) for f in ("b.fvecs", "q.fvecs", "gt.ivecs"))
        write_vecs(bpath, base, "f")
        write_vecs(qpath, queries, "f")
        write_vecs(gpath, gt, "i")
        args = ["--base", bpath, "--queries", qpath, "-k", str(k), "--gt", gpath]
        out = compare_ranks(tool, tmp, "fvecs", args)
        check(read_ivecs(out + ".ivecs") == gt, "fvecs: ids equal the fp64 ground truth")
        r = mpirun(tool, 2, args)
        check("recall: 1-recall@5 1.0000, 5-recall@5 1.0000" in r.stdout,
              "fvecs: recall printed as 1 against the ground truth")

        # .bvecs database (bytes), f16 storage on the device.
        bb = os.path.join(tmp, "b.bvecs")
        write_vecs(bb, [[rnd.randrange(256) for _ in range(16)] for _ in range(301)], "B")
        compare_ranks(tool, tmp, "bvecs", ["--base", bb, "--nq", "4", "-k", "8", "--dtype", "f16"])

        # A truncated file: an error naming the file, no result written.
        cut = os.path.join(tmp, "cut.fvecs")
        open(cut, "wb").write(open(bpath, "rb").read()[:-7])
        res = os.path.join(tmp, "cut-out.ivecs")
        r = mpirun(tool, 2, ["--base", cut, "--queries", qpath, "--out", res])
        check(r.returncode != 0 and "cut.fvecs: truncated" in r.stderr and "rank 0" in r.stderr
              and not os.path.exists(res), "truncated .fvecs: an error naming file and rank")
        # A record whose dimension differs (read by the rank that holds it).
        bad = bytearray(open(bpath, "rb").read())
        struct.pack_into("<i", bad, (4 + 4 * d) * (n - 3), d + 1)
        badp = os.path.join(tmp, "bad.fvecs")
        open(badp, "wb").write(bytes(bad))
        r = mpirun(tool, 2, ["--base", badp, "--queries", qpath, "--out", res])
        check(r.returncode != 0 and f"record {n - 3} has dimension {d + 1}" in r.stderr
              and "rank 1" in r.stderr and not os.path.exists(res),
              "a record of another dimension: an error naming record and rank")
        # Queries of another dimension.
        q2 = os.path.join(tmp, "q2.fvecs")
        write_vecs(q2, [[0.0] * (d + 1)], "f")
        r = mpirun(tool, 2, ["--base", bpath, "--queries", q2, "--out", res])
        check(r.returncode != 0 and "dimension" in r.stderr and not os.path.exists(res),
              "queries of another dimension: an error, no result")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
