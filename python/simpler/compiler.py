"""Compiling C kernels and orchestrations into shared-library images.

:class:`KernelCompiler` runs the system C compiler (``$CC``, default ``cc``) exactly as
``simpler build`` does::

    cc -std=c11 -O2 -shared -fPIC -I <simpler include dir> [-I extra...] [-D...] -o out.so src.c -lm

Kernels get ``-D__DAV_VEC__`` (``aiv``) or ``-D__DAV_CUBE__`` (``aic``), as upstream.

**Cache.** Every image is stored under the cache directory (``cache_dir``, else
``$SIMPLER_CACHE_DIR``, else ``$XDG_CACHE_HOME/simpler/kernels``, else
``~/.cache/simpler/kernels``) under the SHA-256 of: the compiler command and its
``--version`` banner, the flags, the source bytes, and the bytes of every header the source
includes (as ``cc -MM`` lists them). Editing a source or any header it includes, or changing
flags or compiler, misses; anything else hits without running the compiler again. Entries are
written atomically, so concurrent compilers never see half a file.

**Errors.** A rejected source raises :class:`~simpler.CompileError` whose ``file``, ``line``
and ``column`` locate the first error and whose message repeats the compiler's diagnostics; a
missing compiler raises :class:`~simpler.CompilerNotFoundError`.

**Headers.** The simpler headers (``simpler/kernel.h``, ``simpler/orchestration.h``) ship in
the package (:func:`include_dir`); ``$SIMPLER_INCLUDE_DIR`` overrides them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

from .errors import CompileError, CompilerNotFoundError, InvalidConfigError, UnsupportedError

__all__ = ["KernelCompiler", "include_dir"]

PathLike = Union[str, "os.PathLike[str]"]
_MARKER = Path("simpler") / "kernel.h"
_BASE_FLAGS = ("-std=c11", "-O2", "-shared", "-fPIC")
_CORE_DEFINES = {"aiv": "-D__DAV_VEC__", "aic": "-D__DAV_CUBE__"}
_CACHE_FORMAT = "simpler-kernel-cache-v1"
# gcc/clang: "path:line:col: error: msg" or "path:line: error: msg" (also "fatal error").
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:\s*(?P<msg>.*)$", re.M
)


def include_dir() -> Path:
    """The directory holding ``simpler/kernel.h``: ``$SIMPLER_INCLUDE_DIR``, else the copy
    inside the installed package, else the repository's ``include/`` (source checkouts)."""
    env = os.environ.get("SIMPLER_INCLUDE_DIR")
    if env:
        path = Path(env)
        if not (path / _MARKER).is_file():
            raise InvalidConfigError(f"SIMPLER_INCLUDE_DIR={env} does not contain {_MARKER}")
        return path
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parent.parent / "include"):
        if (candidate / _MARKER).is_file():
            return candidate
    raise InvalidConfigError(
        "the simpler C headers are missing from this installation (expected "
        f"{here / 'include' / _MARKER}); reinstall the package or set SIMPLER_INCLUDE_DIR"
    )


def default_cache_dir() -> Path:
    env = os.environ.get("SIMPLER_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "simpler" / "kernels"


def _compiler_command(cc: Union[str, Sequence[str], None]) -> List[str]:
    if cc is None:
        cc = os.environ.get("CC") or "cc"
    words = shlex.split(cc) if isinstance(cc, str) else [str(w) for w in cc]
    if not words:
        raise InvalidConfigError("the C compiler command is empty (check $CC)")
    return words


def _parse_depfile(text: str) -> List[str]:
    """The prerequisites of a make rule printed by ``cc -MM`` (escaped spaces kept)."""
    body = text.replace("\\\n", " ")
    _, _, deps = body.partition(":")
    out, word, escaped = [], [], False
    for ch in deps:
        if escaped:
            word.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch.isspace():
            if word:
                out.append("".join(word))
                word = []
        else:
            word.append(ch)
    if word:
        out.append("".join(word))
    return out


class KernelCompiler:
    """Compiles kernels and orchestrations for the sim platform, with a content-hash cache.

    ``cc`` overrides ``$CC`` (a string split like a shell would, or a list of words);
    ``include_dirs`` are searched after the simpler headers; ``cache_dir`` overrides the
    default cache location. ``hits`` and ``misses`` count cache lookups.
    """

    def __init__(
        self,
        platform: str = "sim",
        *,
        cc: Union[str, Sequence[str], None] = None,
        cache_dir: Optional[PathLike] = None,
        include_dirs: Iterable[PathLike] = (),
        extra_flags: Iterable[str] = (),
    ) -> None:
        if platform not in ("sim", "a2a3sim"):
            raise UnsupportedError(f"platform {platform!r}: only the sim platform exists")
        self.platform = platform
        self.cc = _compiler_command(cc)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.include_dirs = [include_dir()] + [Path(d) for d in include_dirs]
        self.extra_flags = [str(f) for f in extra_flags]
        self.hits = 0
        self.misses = 0
        self._banner: Optional[str] = None
        self._lock = threading.Lock()

    # -- the upstream entry points ---------------------------------------------------------

    def compile_incore(
        self,
        source_path: PathLike,
        core_type: str = "aiv",
        *,
        extra_include_dirs: Iterable[PathLike] = (),
        defines: Iterable[str] = (),
        pto_isa_root: Optional[PathLike] = None,
    ) -> bytes:
        """Compiles an AICore kernel for ``core_type`` (``"aiv"`` or ``"aic"``); returns the
        shared-library image. ``pto_isa_root`` is accepted for upstream compatibility and
        unused: sim kernels are plain C."""
        del pto_isa_root
        core = str(getattr(core_type, "name", core_type)).lower()
        if core not in _CORE_DEFINES:
            raise InvalidConfigError(f"core_type must be 'aic' or 'aiv', got {core_type!r}")
        flags = [_CORE_DEFINES[core]] + [f"-D{d}" for d in defines]
        return self.compile(source_path, flags=flags, include_dirs=extra_include_dirs)

    def compile_orchestration(
        self,
        runtime_name: Union[str, PathLike],
        source_path: Optional[PathLike] = None,
        *,
        extra_include_dirs: Iterable[PathLike] = (),
        defines: Iterable[str] = (),
    ) -> bytes:
        """Compiles an orchestration for ``runtime_name`` (``"tensormap_and_ringbuffer"``);
        ``compile_orchestration(source_path)`` is accepted too."""
        if source_path is None:
            runtime_name, source_path = "tensormap_and_ringbuffer", runtime_name
        if runtime_name != "tensormap_and_ringbuffer":
            raise UnsupportedError(
                f"runtime {runtime_name!r}: only tensormap_and_ringbuffer exists"
            )
        flags = [f"-D{d}" for d in defines]
        return self.compile(source_path, flags=flags, include_dirs=extra_include_dirs)

    def get_orchestration_include_dirs(
        self, runtime: str = "tensormap_and_ringbuffer"
    ) -> List[str]:
        """Include directories an orchestration (or kernel) source needs."""
        del runtime
        return [str(d) for d in self.include_dirs]

    # -- the compiler ------------------------------------------------------------------------

    def compile(
        self,
        source_path: PathLike,
        *,
        flags: Sequence[str] = (),
        include_dirs: Iterable[PathLike] = (),
    ) -> bytes:
        """Compiles one C source into a shared library (cached); returns its bytes."""
        source = Path(source_path).resolve()
        if not source.is_file():
            raise CompileError(f"source file `{source}` does not exist", file=str(source))
        includes: List[str] = []
        for d in list(self.include_dirs) + [Path(d) for d in include_dirs]:
            includes += ["-I", str(Path(d).resolve())]
        args = list(_BASE_FLAGS) + list(self.extra_flags) + list(flags) + includes
        key = self._cache_key(source, args)
        entry = self.cache_dir / f"{key}.so"
        try:
            data = entry.read_bytes()
        except OSError:
            data = b""
        if data[:4] == b"\x7fELF":
            with self._lock:
                self.hits += 1
            return data
        with self._lock:
            self.misses += 1
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".so", dir=self.cache_dir)
        os.close(fd)
        try:
            self._run(self.cc + args + ["-o", tmp, str(source), "-lm"], source)
            data = Path(tmp).read_bytes()
            os.replace(tmp, entry)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return data

    def cache_path(self, source_path: PathLike, flags: Sequence[str] = ()) -> Path:
        """Where the image of ``source_path`` compiled with ``flags`` is (or would be) cached."""
        source = Path(source_path).resolve()
        includes: List[str] = []
        for d in self.include_dirs:
            includes += ["-I", str(Path(d).resolve())]
        args = list(_BASE_FLAGS) + list(self.extra_flags) + list(flags) + includes
        return self.cache_dir / f"{self._cache_key(source, args)}.so"

    def _run(self, argv: List[str], source: Path) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except FileNotFoundError as e:
            raise CompilerNotFoundError(
                f"cannot run the C compiler `{argv[0]}` (set $CC or pass cc=...)",
                cause=str(e),
                command=" ".join(self.cc),
            ) from e
        if done.returncode != 0:
            raise _compile_error(source, argv, done.stderr or done.stdout)
        return done

    def _compiler_banner(self) -> str:
        if self._banner is None:
            try:
                done = subprocess.run(self.cc + ["--version"], capture_output=True, text=True)
            except FileNotFoundError as e:
                raise CompilerNotFoundError(
                    f"cannot run the C compiler `{self.cc[0]}` (set $CC or pass cc=...)",
                    cause=str(e),
                    command=" ".join(self.cc),
                ) from e
            self._banner = (done.stdout or done.stderr).strip()
        return self._banner

    def _cache_key(self, source: Path, args: List[str]) -> str:
        deps = self._run(self.cc + args + ["-MM", str(source)], source).stdout
        h = hashlib.sha256()
        for part in [_CACHE_FORMAT, self._compiler_banner(), "\0".join(self.cc), "\0".join(args)]:
            h.update(part.encode())
            h.update(b"\0")
        h.update(source.read_bytes())
        # Headers by content (not path), so moving a checkout keeps its cache.
        for dep in sorted(set(_parse_depfile(deps)) - {str(source)}):
            try:
                h.update(Path(dep).read_bytes())
            except OSError:
                h.update(dep.encode())
            h.update(b"\0")
        return h.hexdigest()


def _compile_error(source: Path, argv: List[str], output: str) -> CompileError:
    details: Dict[str, object] = {"file": str(source), "line": None, "column": None}
    m = _DIAGNOSTIC.search(output)
    if m:
        details = {
            "file": m.group("file"),
            "line": int(m.group("line")),
            "column": int(m.group("col")) if m.group("col") else None,
        }
        where = f"{m.group('file')}:{m.group('line')}"
        if m.group("col"):
            where += f":{m.group('col')}"
        summary = f"{where}: error: {m.group('msg')}"
    else:
        summary = output.strip().splitlines()[-1] if output.strip() else "no diagnostics"
    message = f"failed to compile {source}\n{summary}\n--- compiler output ---\n{output.rstrip()}"
    return CompileError(
        message, stderr=output, command=" ".join(shlex.quote(a) for a in argv), **details
    )
