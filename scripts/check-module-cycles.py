#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a cycle.

Usage: check-module-cycles.py CRATE_SRC_DIR...

A module's edges are the top-level modules it names through `crate::` paths outside its
tests and comments; a name re-exported at the crate root (`pub use m::Name`) counts as an
edge to `m`. Prints each cycle found and exits 1 if there is one.
"""

import os
import re
import sys


def module_graph(root: str) -> dict:
    lib = open(os.path.join(root, "lib.rs")).read()
    reexported = {}
    for m in re.finditer(r"pub use (\w+)::\{?([^;]*?)\}?;", lib, re.S):
        for name in re.split(r"[,\s]+", m.group(2)):
            if name.strip():
                reexported[name.strip().split("::")[-1]] = m.group(1)
    graph = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            parts = os.path.relpath(os.path.join(dirpath, f), root)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts == ["lib"] or "tests" in parts:
                continue
            text = re.split(r"#\[cfg\((?:all\()?test\b", open(os.path.join(dirpath, f)).read())[0]
            text = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
            deps = set()
            for m in re.finditer(r"crate::(\{[^}]*\}|\w+)", text):
                target = m.group(1)
                names = re.findall(r"\w+", target) if target.startswith("{") else [target]
                deps.update(reexported.get(n, n) for n in names)
            graph.setdefault(parts[0], set()).update(d for d in deps if d != parts[0])
    return {m: {d for d in deps if d in graph} for m, deps in graph.items()}


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    failed = False
    for root in sys.argv[1:]:
        for comp in cycles(module_graph(root)):
            print(f"error: modules of {root} import each other in a cycle: {' <-> '.join(comp)}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
