#!/usr/bin/env python3
"""Every kernel parameter an op takes is named on its doc page.

`oclfuse-info --params` prints, per op of lib/ops.def and path, the
parameters the device's heuristic sets and the tuner's search space tries
(the library's and the tuner's own data). The op's page is the one its row
of README.md's op table links (the row of `oclf_<op>`, or of
`oclf_<op>_run` for expressions); each parameter must appear there as a
word. Also fails on an op of lib/ops.def without a README row.

usage: doc_params.py SOURCE_ROOT OCLFUSE_INFO
"""
import os
import re
import subprocess
import sys


def readme_pages(root):
    """{call name: doc path} from README.md's op table."""
    pages = {}
    for line in open(os.path.join(root, "README.md"), encoding="utf-8"):
        if not line.startswith("| `oclf_"):
            continue
        cells = line.split("|")
        link = re.search(r"\]\(([^)]+)\)", cells[3]) if len(cells) > 3 else None
        if not link:
            continue
        for call in re.findall(r"`(oclf_\w+)`", cells[1]):
            pages[call] = link.group(1)
    return pages


def ops_def_names(root):
    names = []
    for line in open(os.path.join(root, "lib", "ops.def"), encoding="utf-8"):
        m = re.match(r"OCLF_OP\(\s*\w+\s*,\s*(\w+)\s*,", line)
        if m:
            names.append(m.group(1))
    return names


def main():
    root, info = sys.argv[1], sys.argv[2]
    r = subprocess.run([info, "--params"], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit(1)
    params = {}
    for line in r.stdout.splitlines():
        op, path, name, _ = line.split("\t")
        params.setdefault(op, set()).add(name)
    pages = readme_pages(root)
    failures = []
    for op in ops_def_names(root):
        page = pages.get(f"oclf_{op}") or pages.get(f"oclf_{op}_run")
        if not page:
            failures.append(f"{op}: no row of README.md's op table links its page")
            continue
        if op not in params:
            failures.append(f"{op}: oclfuse-info --params printed nothing for it")
            continue
        text = open(os.path.join(root, page), encoding="utf-8").read()
        missing = sorted(p for p in params[op] if not re.search(rf"\b{p}\b", text))
        if missing:
            failures.append(f"{op}: {page} does not name {', '.join(missing)}")
    for f in failures:
        print(f)
    print(f"doc_params: {len(params)} ops, {sum(len(v) for v in params.values())} parameters, "
          f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
