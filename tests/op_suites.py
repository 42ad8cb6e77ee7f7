#!/usr/bin/env python3
"""Lists the op test suites for tests/meson.build, from the op list.

Every family of lib/ops.def (its third column) owns the test programs
tests/test_<family>.c and tests/test_<family>_<part>.c; a file
tests/<family>_check.c, where there is one, holds checks its suites share
and is compiled into each. Prints one line per suite, `name:file,file...` (the
source files, relative to tests/). Run at configure time, so a new family
in lib/ops.def or a new test file of a family becomes a suite on the next
`meson setup --reconfigure` (tools/build.sh runs one).

usage: op_suites.py OPS_DEF TESTS_DIR
"""
import os
import re
import sys


def families(ops_def):
    out = []
    for line in open(ops_def):
        m = re.match(r"OCLF_OP\(\s*\w+\s*,\s*\w+\s*,\s*(\w+)\s*,", line)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def main():
    ops_def, tests = sys.argv[1], sys.argv[2]
    fams = families(ops_def)
    if not fams:
        sys.exit(f"{ops_def}: no OCLF_OP rows")
    files = sorted(f for f in os.listdir(tests) if re.fullmatch(r"test_\w+\.c", f))
    seen = set()
    for fam in fams:
        shared = [f"{fam}_check.c"] if os.path.exists(os.path.join(tests, f"{fam}_check.c")) else []
        for f in files:
            name = f[len("test_"):-len(".c")]
            if name in seen or not (name == fam or name.startswith(fam + "_")):
                continue
            seen.add(name)
            print(name + ":" + ",".join([f] + shared))


if __name__ == "__main__":
    main()
