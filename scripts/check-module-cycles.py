#!/usr/bin/env python3
"""Fails when modules import each other in a cycle.

Usage: check-module-cycles.py [CRATE_SRC_DIR...]   (no argument: every crates/*/src)
       check-module-cycles.py --python PACKAGE_DIR...
       check-module-cycles.py --self-test

A crate is read from its roots (`lib.rs`, `main.rs`, `bin/*.rs`) by following its `mod`
declarations, so `#[cfg(test)]` items and modules named `tests` are left out, and so are
comments. Cycles are looked for at every level: among the top-level modules of a crate and
among the children of each module. A module depends on a sibling (or on a sibling of one of
its ancestors) when it names it through a `crate::`, `super::` or `self::` path or a `use` of a
child, following the `use` and `pub use m::*` re-exports of the modules on the way
(`super::Name` re-exported by the parent with `use sibling::Name` is an edge to `sibling`).
Prints each cycle with the reference behind each edge and exits 1 if there is one (2 for
bad usage: an unknown option, a dir that is not a crate or a Python package).

With `--python`, the modules are those of a Python package dir (its subpackages' too, named
`pkg.sub.mod`), and a module depends on each module of the package it imports, relative or
absolute, wherever the import is (one inside a function hides a cycle, it does not break it),
except under `if TYPE_CHECKING:`.

`cycles()`, `graph_cycles()` and `report()` work on plain graphs ({node: {node it depends on:
the reference why}}), so another graph builder can reuse them.
"""

import ast
import glob
import os
import re
import sys
import tempfile

# A comment, a (raw, byte) string or a char literal.
TOKEN = re.compile(
    r"""//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?'(?:\\.|[^'\\])'""", re.S
)
TEST_ATTR = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]")
MOD = re.compile(
    r'(?:#\[path\s*=\s*"([^"]*)"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?\bmod\s+(\w+)\s*([;{])'
)
USE = re.compile(r"\buse\s+([^;]*);")
PATH = re.compile(r"\b(?:crate|super|self)(?:\s*::\s*\w+)+")
ITEM = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static(?:\s+mut)?|union|mod|macro_rules!)\s+(\w+)"
)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def strip(text: str) -> str:
    """`text` without comments; strings emptied unless they are plain file names."""

    def keep(m):
        s = m.group(0)
        if s.startswith("/"):
            return " "
        return s if re.fullmatch(r'"[\w./-]*"', s) else '""'

    return TOKEN.sub(keep, text)


def item_end(text: str, i: int) -> int:
    """Index just past the item starting at `i`: its `;` or closing `}`, brackets balanced."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return j
            if depth == 0 and c == "}":
                return j + 1
        elif c == ";" and depth == 0:
            return j + 1
    return len(text)


def drop_tests(text: str) -> str:
    while m := TEST_ATTR.search(text):
        text = text[: m.start()] + " " + text[item_end(text, m.end()) :]
    return text


def expand(tree: str, prefix: tuple = ()) -> list:
    """The (path, name it binds) pairs of a use tree:
    `a::{b as c, self}` -> [((a, b), c), ((a,), a)]."""
    tree = tree.strip()
    if "{" not in tree:
        path, _, alias = re.sub(r"\s+as\s+", " as ", tree).partition(" as ")
        segs = prefix + tuple(s.strip() for s in path.split("::") if s.strip())
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        return [(segs, alias.strip() or segs[-1])] if segs else []
    head, body = tree.split("{", 1)
    prefix += tuple(s.strip() for s in head.split("::") if s.strip())
    out, depth, start, body = [], 0, 0, body.rsplit("}", 1)[0] + ","
    for i, c in enumerate(body):
        depth += (c == "{") - (c == "}")
        if c == "," and depth == 0:
            out += expand(body[start:i], prefix) if body[start:i].strip() else []
            start = i + 1
    return out


def mod_file(file: str, file_dir: str, child_dir: str, name: str, attr) -> str:
    """The file of `mod name;` declared in `file` (`#[path = attr]` if given)."""
    if attr:
        options = [os.path.join(file_dir, attr)]
    else:
        options = [os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name, "mod.rs")]
    for f in options:
        if os.path.exists(f):
            return f
    raise SystemExit(f"error: {file}: no file for `mod {name};` ({' or '.join(options)})")


class Crate:
    """The modules of one crate root: their code, imports and item names, keyed by path tuple."""

    def __init__(self, root_file: str):
        self.code, self.uses, self.globs, self.items, self.files = {}, {}, {}, {}, {}
        root_dir = os.path.dirname(root_file)
        self.load((), read(root_file), root_dir, root_dir, root_file)

    def load(self, path: tuple, text: str, child_dir: str, file_dir: str, file: str):
        """Records module `path`, the text of `file` (all of it, or an inline module's body),
        and, recursively, the modules it declares: their files lie in `child_dir`, or
        relative to `file_dir` with `#[path]`."""
        text, body, pos = drop_tests(strip(text)), [], 0
        while m := MOD.search(text, pos):
            attr, name, kind = m.groups()
            body.append(text[pos : m.start()])
            pos = item_end(text, m.end() - 1) if kind == "{" else m.end()
            if name == "tests":
                continue
            if kind == "{":
                inner = text[m.end() : pos - 1]
                self.load(path + (name,), inner, os.path.join(child_dir, name), child_dir, file)
                continue
            child = mod_file(file, file_dir, child_dir, name, attr)
            sub_dir = os.path.dirname(child) if attr else os.path.join(child_dir, name)
            self.load(path + (name,), read(child), sub_dir, os.path.dirname(child), child)
        body = "".join(body) + text[pos:]
        self.files[path] = file
        self.uses[path], self.globs[path] = {}, []
        for tree in USE.findall(body):
            for segs, alias in expand(tree):
                if alias == "*":
                    self.globs[path].append(segs[:-1])
                else:
                    self.uses[path][alias] = segs
        self.items[path] = set(ITEM.findall(body))
        self.code[path] = USE.sub(" ", body)

    def resolve(self, at: tuple, segs: tuple, seen: frozenset = frozenset()):
        """The module a path written in module `at` ends in (the module of its item), or None
        when it leaves the crate."""
        if not segs:
            return None
        if segs[0] == "crate":
            cur, rest = (), segs[1:]
        elif segs[0] in ("self", "super"):
            cur, rest = at, segs
            while rest and rest[0] in ("self", "super"):
                cur, rest = (cur[:-1] if rest[0] == "super" else cur), rest[1:]
        elif at + segs[:1] in self.code:
            cur, rest = at, segs
        elif segs[0] in self.uses[at] and (at, segs[0]) not in seen:
            return self.resolve(at, self.uses[at][segs[0]] + segs[1:], seen | {(at, segs[0])})
        else:
            return None
        while rest and cur + rest[:1] in self.code:
            cur, rest = cur + rest[:1], rest[1:]
        if not rest or (cur, rest[0]) in seen:
            return cur
        seen |= {(cur, rest[0])}
        if rest[0] in self.uses[cur]:
            return self.resolve(cur, self.uses[cur][rest[0]] + rest[1:], seen) or cur
        if rest[0] not in self.items[cur]:
            for g in self.globs[cur]:
                target = self.resolve(cur, g, seen)
                if target is not None and rest[0] in self.items[target] | set(self.uses[target]):
                    return self.resolve(target, ("self",) + rest, seen)
        return cur

    def references(self, path: tuple):
        """(text, target module) of each in-crate path that module `path` names."""
        named = [(m, tuple(re.split(r"\s*::\s*", m))) for m in PATH.findall(self.code[path])]
        named += [("use " + "::".join(s), s) for s in self.uses[path].values()]
        named += [("use " + "::".join(s) + "::*", s) for s in self.globs[path]]
        for text, segs in named:
            target = self.resolve(path, segs)
            if target is not None:
                yield re.sub(r"\s*::\s*", "::", text), target

    def graphs(self) -> dict:
        """For each module with children: {child: {sibling it depends on: a reference}}."""
        out = {}
        for path in self.code:
            if path:
                out.setdefault(path[:-1], {}).setdefault(path[-1], {})
        for path in self.code:
            for text, target in self.references(path):
                k = len(os.path.commonprefix([path, target]))
                if k < len(path) and k < len(target):
                    why = f"{os.path.relpath(self.files[path])}: {text}"
                    out[path[:k]][path[k]].setdefault(target[k], why)
        return out


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one node (Tarjan), each sorted; `graph` maps
    each node to the nodes it depends on (any iterable; other names are ignored)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
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


def crate_roots(src: str) -> list:
    """The crate roots of a source dir: lib.rs, main.rs, bin/*.rs, bin/*/main.rs."""
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs")]
    roots = [f for f in roots if os.path.exists(f)]
    roots += sorted(glob.glob(os.path.join(src, "bin", "*.rs")))
    roots += sorted(glob.glob(os.path.join(src, "bin", "*", "main.rs")))
    if not roots:
        print(f"error: {src} has no lib.rs, main.rs or bin/*.rs", file=sys.stderr)
        raise SystemExit(2)
    return roots


def graph_cycles(label: str, graph: dict) -> list:
    """(label, cycle, {(a, b): why a depends on b}) for each cycle of a graph whose edges map
    to a reference (`{node: {node it depends on: reference}}`)."""
    return [
        (label, comp, {(a, b): graph[a][b] for a in comp for b in comp if b in graph[a]})
        for comp in cycles(graph)
    ]


def rust_cycles(src: str) -> list:
    """The cycles of a crate source dir, at every level of each of its crate roots."""
    found = []
    for root in crate_roots(src):
        for parent, graph in Crate(root).graphs().items():
            where = "crate::" + "::".join(parent) if parent else "the crate root"
            found += graph_cycles(f"{os.path.relpath(root)} under {where}", graph)
    return found


def python_modules(pkg: str) -> dict:
    """{dotted name: file} of the modules of the Python package dir `pkg`, named from `pkg`'s
    own name (`simpler`, `simpler.remote.actor`); a `.pyi` stub with no `.py` beside it (a
    native module's) is a module that imports nothing."""
    mods, name = {}, os.path.basename(os.path.normpath(pkg))
    for dirpath, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if os.path.exists(os.path.join(dirpath, d, "__init__.py")))
        for f in sorted(files):
            stem, ext = os.path.splitext(f)
            if ext == ".py" or (ext == ".pyi" and stem + ".py" not in files):
                parts = os.path.relpath(os.path.join(dirpath, stem), pkg).split(os.sep)
                parts = [name] + [p for p in parts if p not in (".", "__init__")]
                mods[".".join(parts)] = os.path.join(dirpath, f)
    return mods


def runtime_imports(nodes):
    """The import statements among the AST `nodes` and everything nested in them (function
    bodies too), except the body of an `if TYPE_CHECKING:` (its `else` counts)."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in (
            getattr(node.test, "id", None),
            getattr(node.test, "attr", None),
        ):
            yield from runtime_imports(node.orelse)
        else:
            yield from runtime_imports(ast.iter_child_nodes(node))


def python_graph(pkg: str) -> dict:
    """{module: {module of the package it imports: the import}} of a Python package dir.
    `from m import n` is an edge to the module `m.n` when there is one, else to `m`;
    `import a.b.c` to the longest of `a.b.c`, `a.b`, `a` that is a module of the package."""
    mods = python_modules(pkg)

    def module_of(dotted: str):
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph = {}
    for mod, path in mods.items():
        graph[mod] = {}
        if path.endswith(".pyi"):
            continue
        package = mod.split(".")
        if os.path.basename(path) != "__init__.py":
            package.pop()
        for node in runtime_imports(ast.parse(read(path), path).body):
            if isinstance(node, ast.Import):
                targets = [module_of(a.name) for a in node.names]
            else:
                base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
                base = ".".join(p for p in (base, node.module) if p)
                names = [f"{base}.{a.name}" for a in node.names]
                targets = [module_of(n if n in mods else base) for n in names]
            for target in targets:
                if target is not None and target != mod:
                    why = f"{os.path.relpath(path)}:{node.lineno}: {ast.unparse(node)}"
                    graph[mod].setdefault(target, why)
    return graph


def python_cycles(pkg: str) -> list:
    """The cycles among the modules of a Python package dir."""
    return graph_cycles(f"the Python package {os.path.relpath(pkg)}", python_graph(pkg))


def report(found: list) -> bool:
    for label, comp, edges in found:
        print(f"error: modules of {label} import each other in a cycle: {' <-> '.join(comp)}")
        for (a, b), ref in sorted(edges.items()):
            print(f"    {a} -> {b}  ({ref})")
    return bool(found)


def self_test() -> int:
    files = {
        "lib.rs": "mod a; mod b; mod c; mod f; mod g; mod h; mod i;\n"
        + "pub use h::*;\n#[cfg(test)] mod tests;\n",
        "a.rs": "use crate::{b::{self as bee, x}, c};\npub fn z() {}\n",
        "b.rs": "pub fn x() { crate::a::z(); }\n",
        "c/mod.rs": "mod d;\nmod e;\npub(crate) use self::d::Thing;\n",
        "c/d.rs": "use super::e::f;\npub struct Thing;\n",
        "c/e.rs": "pub fn f() -> crate::c::Thing { todo!() }\n",
        "f.rs": (
            '// crate::g::y\npub fn x() { let _ = "crate::g::y"; }\n'
            "#[cfg(test)]\nfn t() { crate::g::y(); }\n#[cfg(test)]\nmod t2 { use crate::g; }\n"
        ),
        "g.rs": "pub fn y() { crate::f::x() }\n",
        "h.rs": "pub struct Hx;\nfn k() { crate::i::y() }\n",
        "i.rs": "pub fn y() -> crate::Hx { crate::Hx }\n",
        "tests.rs": "use crate::a::z;\nuse crate::f::x;\n",
    }
    with tempfile.TemporaryDirectory() as src:
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
            with open(os.path.join(src, name), "w") as out:
                out.write(text)
        got = sorted((label.split(" under ")[1], comp) for label, comp, _ in rust_cycles(src))
    root = "the crate root"
    want = [("crate::c", ["d", "e"]), (root, ["a", "b"]), (root, ["h", "i"])]
    if got != want:
        print(f"self-test failed: found {got}, expected {want}")
        return 1
    print("self-test passed: a<->b, h<->i (glob re-export), c::{d<->e} (parent re-export);")
    print("  f -> g only (f's references to g are in a comment, a string and test code)")
    return python_self_test()


def python_self_test() -> int:
    files = {
        "__init__.py": "from . import _native\nfrom .a import x\n",
        "_native.pyi": "def f() -> None: ...\n",
        "a.py": "from . import _native\nfrom .b import y\ndef x(): pass\n",
        "b.py": "def y():\n    from .a import x\n",
        "c.py": (
            "import typing\nif typing.TYPE_CHECKING:\n    from .d import z\nelse:\n    import os\n"
        ),
        "d.py": "from .c import *\nz = 1\n",
        "sub/__init__.py": "",
        "sub/e.py": "from ..f import w\n",
        "f.py": "import pkg.sub.e\nw = 1\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "pkg")
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(pkg, name)), exist_ok=True)
            with open(os.path.join(pkg, name), "w") as out:
                out.write(text)
        got = [comp for _, comp, _ in python_cycles(pkg)]
    want = [["pkg.a", "pkg.b"], ["pkg.f", "pkg.sub.e"]]
    if sorted(got) != want:
        print(f"python self-test failed: found {got}, expected {want}")
        return 1
    print("python self-test passed: a<->b (an import inside a function), f<->sub.e (`..f`,")
    print("  `import pkg.sub.e`); c -> d only under TYPE_CHECKING; `from . import _native` (a")
    print("  stub) is no edge to the package")
    return 0


def main(args: list) -> int:
    if args == ["--self-test"]:
        return self_test()
    if args[:1] == ["--python"]:
        if len(args) == 1:
            raise SystemExit("error: --python takes one or more Python package dirs")
        for pkg in args[1:]:
            if not os.path.isfile(os.path.join(pkg, "__init__.py")):
                print(f"error: {pkg} is not a Python package (no __init__.py)", file=sys.stderr)
                return 2
        return 1 if report([c for pkg in args[1:] for c in python_cycles(pkg)]) else 0
    unknown = [a for a in args if a.startswith("-")]
    if unknown:
        print(f"error: unknown option {unknown[0]} (see the docstring at the top)", file=sys.stderr)
        return 2
    if not args:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        args = sorted(glob.glob(os.path.join(repo, "crates", "*", "src")))
    found = [c for src in args for c in rust_cycles(src)]
    return 1 if report(found) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
