"""Every README snippet holds for a new user: the fenced ```python, ```sh, ```bash and
```console blocks of README.md and of every examples/**/README.md are extracted and run as
written, in a copy of the repository's examples, headers and scripts in a temporary
directory, with the CLI and the Python package of the current build.

A block is run from the copy's root (the repository root, where every README's commands
start) unless a marker says otherwise. Markers are HTML comments on the lines right before a
block (docs/testing.md, "README snippets"):

- ``<!-- snippet: skip (reason) -->``: not run (an install, a build, Ray, a second host, a
  command that runs this suite); its syntax is still checked;
- ``<!-- snippet: fragment -->``: not runnable on its own (names defined elsewhere); its
  syntax is checked (``compile()`` for Python, ``bash -n`` for shell);
- ``<!-- snippet: env NAME=VALUE ... -->``: extra environment (smaller sizes);
- ``<!-- snippet: cwd PATH -->``: run from PATH, relative to the repository root;
- ``<!-- snippet: needs PROGRAM ... -->``: run only where each PROGRAM is on PATH.

Several directives share one comment separated by ``;``. A marker that names an unknown
directive, a skip without a reason, or a marker not right before a block is an error. A
runnable shell block may not install or build (``pip install``, ``cargo install``,
``cargo build``, ``maturin``): such a line needs the block marked ``skip``.

In the copy, ``target/release/simpler`` and ``target/release/simpler-example-data`` are the
current build's binaries ($SIMPLER_CLI, as scripts/test-python.sh sets it, and the binary
beside it), ``simpler`` on PATH is that CLI and ``python`` this interpreter.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
from conftest import REPO, simpler_cli

LANGS = {"python": "python", "sh": "sh", "bash": "sh", "console": "console"}
DIRECTIVES = ("skip", "fragment", "env", "cwd", "needs")
MARKER = re.compile(r"^\s*<!--\s*snippet:(?P<body>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
# Lines a runnable shell block may not hold: they install or build, which takes minutes and
# changes the machine; a block holding one must say so with a skip marker.
INSTALLS = re.compile(r"(^|[;&|(]\s*)(pip3?\s+install|python3?\s+-m\s+pip\s+install|"
                      r"cargo\s+(install|build)|maturin)\b")
# The copy holds these repository paths (a snippet's commands read them).
COPIED = ("README.md", "examples", "include", "scripts")
BLOCK_TIMEOUT_S = 180


class MarkerError(ValueError):
    """A snippet marker that cannot be honoured: names the README, the line and the fault."""


@dataclass
class Snippet:
    """One fenced block: its README, the 1-based line of its opening fence, its language
    (``python``, ``sh`` or ``console``), its code (dedented to the fence) and the markers'
    directives (directive name -> its argument text)."""

    readme: Path
    line: int
    lang: str
    code: str
    directives: Dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        readme = self.readme.relative_to(REPO) if self.readme.is_relative_to(REPO) else self.readme
        return f"{readme}:{self.line}"

    def shell(self) -> str:
        """The block as a shell script: a console block's ``$ `` commands (and their
        continuation lines), any other shell block as it is."""
        if self.lang != "console":
            return self.code
        out, cont = [], False
        for text in self.code.splitlines():
            if text.startswith("$ "):
                out.append(text[2:])
            elif cont:
                out.append(text)
            else:
                continue
            cont = text.endswith("\\")
        return "\n".join(out) + "\n"


def _split_directives(body: str, where: str) -> List[Tuple[str, str]]:
    """``skip (a; b); env A=1`` -> [("skip", "(a; b)"), ("env", "A=1")]: directives end at a
    ``;`` outside parentheses."""
    parts: List[Tuple[str, str]] = []
    current, depth = "", 0
    for ch in body + ";":
        if ch == ";" and depth == 0:
            if current.strip():
                name, _, arg = current.strip().partition(" ")
                parts.append((name, arg.strip()))
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            raise MarkerError(f"{where}: an unmatched `)` in the snippet marker")
        current += ch
    if depth:
        raise MarkerError(f"{where}: an unclosed `(` in the snippet marker")
    return parts


def parse_directives(body: str, where: str) -> Dict[str, str]:
    """``skip (why); env A=1`` -> {"skip": "why", "env": "A=1"}; MarkerError naming
    ``where`` for an unknown directive, a skip without a reason, or a bad argument."""
    found: Dict[str, str] = {}
    for name, arg in _split_directives(body, where):
        if name not in DIRECTIVES:
            known = ", ".join(DIRECTIVES)
            raise MarkerError(f"{where}: unknown snippet directive {name!r} (known: {known})")
        if name == "skip":
            if not (arg.startswith("(") and arg.endswith(")") and arg[1:-1].strip()):
                raise MarkerError(f"{where}: `skip` needs a reason in parentheses: skip (why)")
            arg = arg[1:-1].strip()
        elif name == "fragment" and arg:
            raise MarkerError(f"{where}: `fragment` takes no argument, got {arg!r}")
        elif name == "env":
            pairs = shlex.split(arg)
            if not pairs or any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", p) for p in pairs):
                raise MarkerError(f"{where}: `env` takes NAME=VALUE pairs, got {arg!r}")
        elif name in ("cwd", "needs") and not arg:
            raise MarkerError(f"{where}: `{name}` needs an argument")
        if name in found:
            raise MarkerError(f"{where}: directive {name!r} given twice")
        found[name] = arg
    if not found:
        raise MarkerError(f"{where}: an empty snippet marker")
    if "skip" in found and "fragment" in found:
        raise MarkerError(f"{where}: a block is either `skip` or `fragment`, not both")
    return found


def _closes(line: str, marks: str) -> bool:
    """Whether ``line`` closes a block opened by ``marks`` (the same character, as many or
    more, and nothing else)."""
    text = line.strip()
    return len(text) >= len(marks) and text == marks[0] * len(text)


def extract(readme: Path, text: Optional[str] = None) -> List[Snippet]:
    """The python/sh/bash/console blocks of one README, with their markers; MarkerError for
    a marker that is not right before a block (blank lines may lie between) or is bad."""
    lines = (readme.read_text(encoding="utf-8") if text is None else text).splitlines()
    snippets: List[Snippet] = []
    pending: Dict[str, str] = {}
    pending_at = 0
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        fence = FENCE.match(lines[i])
        if m:
            where = f"{readme}:{i + 1}"
            for name, arg in parse_directives(m.group("body"), where).items():
                if name in pending:
                    raise MarkerError(f"{where}: directive {name!r} given twice for one block")
                pending[name] = arg
            pending_at = pending_at or i + 1
            i += 1
            continue
        if fence:
            start, indent, marks = i, fence.group("indent"), fence.group("fence")
            lang = (fence.group("info").strip().split() or [""])[0].lower()
            body: List[str] = []
            i += 1
            while i < len(lines) and not _closes(lines[i], marks):
                text = lines[i]
                body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
                i += 1
            i += 1  # the closing fence
            if lang in LANGS:
                code = "\n".join(body) + "\n"
                snippets.append(Snippet(readme, start + 1, LANGS[lang], code, pending))
            elif pending:
                raise MarkerError(
                    f"{readme}:{pending_at}: a snippet marker before a ```{lang} block, "
                    "which is never run"
                )
            pending, pending_at = {}, 0
            continue
        if pending and lines[i].strip():
            raise MarkerError(f"{readme}:{pending_at}: a snippet marker not right before a block")
        i += 1
    if pending:
        raise MarkerError(f"{readme}:{pending_at}: a snippet marker at the end of the file")
    return snippets


def readmes() -> List[Path]:
    """README.md and every examples/**/README.md."""
    return [REPO / "README.md", *sorted((REPO / "examples").glob("**/README.md"))]


def collect() -> Tuple[List[Snippet], List[str]]:
    snippets: List[Snippet] = []
    errors: List[str] = []
    for readme in readmes():
        try:
            snippets += extract(readme)
        except MarkerError as err:
            errors.append(str(err))
    return snippets, errors


SNIPPETS, MARKER_ERRORS = collect()


def check_syntax(snippet: Snippet, tmp: Path) -> None:
    """compile() for Python, ``bash -n`` for shell: a fragment must at least parse."""
    if snippet.lang == "python":
        compile(snippet.code, snippet.id, "exec")
        return
    script = tmp / "snippet.sh"
    script.write_text(snippet.shell())
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, f"{snippet.id}: the shell block does not parse:\n{done.stderr}"


@dataclass
class Context:
    """The copy the blocks run in: its root, the PATH they see, and whether the current
    build's binaries were found (None, or why not)."""

    root: Path
    path: str
    missing: Optional[str]


def _shim(path: Path, target: str) -> None:
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(target)} "$@"\n')
    path.chmod(0o755)


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Context:
    root = tmp_path_factory.mktemp("readme-snippets") / "repo"
    root.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(src, root / name)
    bin_dir = root / ".snippet-bin"
    bin_dir.mkdir()
    _shim(bin_dir / "python", sys.executable)
    _shim(bin_dir / "python3", sys.executable)
    release = root / "target" / "release"
    release.mkdir(parents=True)
    missing = None
    cli = simpler_cli()
    if cli is None:
        missing = "the simpler CLI is not built (cargo build -p simpler-cli, or set SIMPLER_CLI)"
    else:
        _shim(bin_dir / "simpler", cli)
        (release / "simpler").symlink_to(cli)
        data = Path(cli).with_name("simpler-example-data")
        if data.is_file():
            (release / "simpler-example-data").symlink_to(data)
        else:
            missing = f"{data} is not built (cargo build -p simpler-examples, the CLI's profile)"
    return Context(root, f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", missing)


def run_snippet(snippet: Snippet, ctx: Context, tmp: Path) -> subprocess.CompletedProcess:
    cwd = ctx.root / snippet.directives.get("cwd", ".")
    if not cwd.is_dir():
        raise MarkerError(f"{snippet.id}: `cwd {snippet.directives['cwd']}` is not a directory")
    env = dict(os.environ, PATH=ctx.path)
    for pair in shlex.split(snippet.directives.get("env", "")):
        name, _, value = pair.partition("=")
        env[name] = value
    if snippet.lang == "python":
        script = tmp / "snippet.py"
        script.write_text(snippet.code)
        cmd = [sys.executable, str(script)]
    else:
        script = tmp / "snippet.sh"
        script.write_text(snippet.shell())
        cmd = ["bash", "-e", "-o", "pipefail", str(script)]
    try:
        return subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as err:
        seen = [x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in
                (err.stdout, err.stderr)]
        pytest.fail(f"{snippet.id}: still running after {BLOCK_TIMEOUT_S} s\n{''.join(seen)}")


def install_lines(snippet: Snippet) -> List[str]:
    """The lines of a shell block that install or build."""
    if snippet.lang == "python":
        return []
    return [ln for ln in snippet.shell().splitlines() if INSTALLS.search(ln.split("#", 1)[0])]


def test_every_marker_is_valid():
    assert MARKER_ERRORS == []


def test_the_readmes_have_snippets():
    assert len(SNIPPETS) > 20
    readme = [s for s in SNIPPETS if s.readme == REPO / "README.md"]
    assert any(s.lang == "python" and not s.directives for s in readme)
    assert any(s.lang == "sh" and not s.directives for s in readme)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs_as_written(snippet: Snippet, context: Context, tmp_path: Path):
    check_syntax(snippet, tmp_path)
    if "fragment" in snippet.directives:
        return
    if "skip" in snippet.directives:
        pytest.skip(f"marked skip: {snippet.directives['skip']}")
    installs = install_lines(snippet)
    assert not installs, (
        f"{snippet.id}: a runnable block installs or builds ({installs}); "
        "mark it <!-- snippet: skip (why) --> or move those lines to a block of their own"
    )
    absent = [p for p in snippet.directives.get("needs", "").split() if shutil.which(p) is None]
    if absent:
        pytest.skip(f"marked needs: {', '.join(absent)} not on PATH")
    if context.missing and snippet.lang != "python":
        pytest.skip(context.missing)
    done = run_snippet(snippet, context, tmp_path)
    assert done.returncode == 0, (
        f"{snippet.id}: exit {done.returncode}\n--- block\n{snippet.code}--- stdout\n"
        f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )


# The extractor itself, on READMEs made here.


def _extract(text: str) -> Sequence[Snippet]:
    return extract(Path("/virtual/README.md"), text)


def test_markers_attach_to_the_next_block_only():
    got = _extract(
        "intro\n\n<!-- snippet: env SIZE=small; cwd examples -->\n\n```sh\necho hi\n```\n\n"
        "```python\nprint(1)\n```\n\n```c\nint x;\n```\n\n<!-- snippet: fragment -->\n"
        "~~~console\n$ ls \\\n  -l\noutput line\n~~~\n"
    )
    assert [(s.lang, s.line) for s in got] == [("sh", 5), ("python", 9), ("console", 18)]
    assert got[0].directives == {"env": "SIZE=small", "cwd": "examples"}
    marker = "<!-- snippet: skip (slow; really (minutes)); env A=1 -->"
    (skipped,) = _extract(f"{marker}\n```bash\nls\n```\n")
    assert skipped.directives == {"skip": "slow; really (minutes)", "env": "A=1"}
    assert got[1].directives == {}
    assert got[2].directives == {"fragment": ""}
    assert got[2].shell() == "ls \\\n  -l\n"


def test_an_indented_block_is_dedented_to_its_fence():
    (s,) = _extract("- item:\n\n  ```python\n  x = 1\n  print(x)\n  ```\n")
    assert s.code == "x = 1\nprint(x)\n"
    compile(s.code, "x", "exec")


@pytest.mark.parametrize(
    "text, fault",
    [
        ("<!-- snippet: skipp (x) -->\n```sh\nls\n```\n", "unknown snippet directive 'skipp'"),
        ("<!-- snippet: skip -->\n```sh\nls\n```\n", "needs a reason"),
        ("<!-- snippet: skip () -->\n```sh\nls\n```\n", "needs a reason"),
        ("<!-- snippet: env SIZE -->\n```sh\nls\n```\n", "NAME=VALUE"),
        ("<!-- snippet: fragment -->\ntext\n```sh\nls\n```\n", "not right before a block"),
        ("<!-- snippet: fragment -->\n```c\nint x;\n```\n", "never run"),
        ("```sh\nls\n```\n<!-- snippet: fragment -->\n", "end of the file"),
        ("<!-- snippet: skip (a); fragment -->\n```sh\nls\n```\n", "not both"),
        ("<!-- snippet: cwd a -->\n<!-- snippet: cwd b -->\n```sh\nls\n```\n", "given twice"),
        ("<!-- snippet: skip (a (b) -->\n```sh\nls\n```\n", "unclosed"),
    ],
)
def test_a_bad_marker_is_an_error_naming_its_line(text, fault):
    with pytest.raises(MarkerError, match=re.escape(fault)) as err:
        _extract(text)
    assert "/virtual/README.md:" in str(err.value)


def test_install_and_build_lines_are_found():
    s = _extract("```sh\npip install .\necho ok  # not pip install\ncargo build --release -p x\n"
                 "maturin develop\ncd x && cargo install y\n```\n")[0]
    assert install_lines(s) == ["pip install .", "cargo build --release -p x", "maturin develop",
                                "cd x && cargo install y"]
