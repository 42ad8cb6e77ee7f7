#!/usr/bin/env python3
"""Fails when the files of lib/ call each other in a cycle.

Reads the static library's symbol table (nm): each object file's defined
and undefined symbols give an edge "file -> file that defines what it
uses". A strongly connected component of more than one file is a cycle;
the test prints the graph and every cycle. Usage: lib_deps.py liboclfuse.a
"""
import collections
import subprocess
import sys


def file_name(obj):
    # "lib_ops_norm.c.o" -> "lib/ops/norm.c" (meson flattens the path)
    name = obj[:-2] if obj.endswith(".o") else obj
    for prefix, folder in (("lib_ops_", "lib/ops/"), ("lib_expr_", "lib/expr/"), ("lib_", "lib/")):
        if name.startswith(prefix):
            return folder + name[len(prefix):]
    return name


def graph(archive):
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True, check=True).stdout
    defined, used = collections.defaultdict(set), collections.defaultdict(set)
    for line in out.splitlines():
        where, _, rest = line.rpartition(":")
        obj = file_name(where.split(":")[-1])
        fields = rest.split()
        if len(fields) == 3 and fields[1] in "TDRB":
            defined[obj].add(fields[2])
        elif len(fields) == 2 and fields[0] == "U":
            used[obj].add(fields[1])
    owner = {sym: obj for obj, syms in defined.items() for sym in syms}
    edges = collections.defaultdict(set)
    for obj, syms in used.items():
        for sym in syms:
            if sym in owner and owner[sym] != obj:
                edges[obj].add(owner[sym])
    return set(defined) | set(used), edges


def cycles(nodes, edges):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def main():
    nodes, edges = graph(sys.argv[1])
    for v in sorted(edges):
        print(v, "->", " ".join(sorted(edges[v])))
    found = cycles(nodes, edges)
    for c in found:
        print("cycle:", " <-> ".join(c), file=sys.stderr)
    if not any(n.startswith("lib/dispatch") for n in nodes):
        print("lib_deps: no lib/dispatch.c object in the archive", file=sys.stderr)
        return 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
