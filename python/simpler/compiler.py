"""Compiling C kernels and orchestrations into shared-library images.

:class:`KernelCompiler` is a thin wrapper of the native compiler (``simpler-toolchain``, the
one ``simpler build`` uses), so a source builds the same whichever tool compiles it::

    cc -std=c11 -O2 -shared -fPIC [extra flags] [-D__DAV_VEC__|-D__DAV_CUBE__] [-D...]
       -I <simpler include dir> [-I extra...] -o out.so src.c -lm

Kernels get ``-D__DAV_VEC__`` (``aiv``) or ``-D__DAV_CUBE__`` (``aic``); an orchestration
neither. ``$CC`` (default ``cc``) may be several words.

**Cache.** Every image is stored under the cache directory (``cache_dir``, else
``$SIMPLER_CACHE_DIR``, else ``$XDG_CACHE_HOME/simpler/kernels``, else
``~/.cache/simpler/kernels``) under the SHA-256 of: the compiler command and its
``--version`` banner, the flags, the source bytes, and the bytes of every header the source
includes (as ``cc -MM`` lists them). Editing a source or any header it includes, or changing
flags or compiler, misses; anything else hits without running the compiler again. Entries are
written atomically, so concurrent compilers never see half a file. See ``docs/toolchain.md``.

**Errors.** A rejected source raises :class:`~simpler.CompileError` whose ``file``, ``line``
and ``column`` locate the first error and whose message repeats the compiler's diagnostics; a
missing compiler raises :class:`~simpler.CompilerNotFoundError`.

**Headers.** The simpler headers (``simpler/kernel.h``, ``simpler/orchestration.h``) ship in
the package (:func:`include_dir`); ``$SIMPLER_INCLUDE_DIR`` overrides them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Union

from . import _native
from .errors import InvalidConfigError, UnsupportedError

__all__ = ["KernelCompiler", "include_dir"]

PathLike = Union[str, "os.PathLike[str]"]
_MARKER = Path("simpler") / "kernel.h"
_CORES = ("aic", "aiv")


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
    """The kernel cache directory the environment names."""
    return Path(_native.default_cache_dir())


def _compiler_command(cc: Union[str, Sequence[str], None]) -> List[str]:
    if cc is None or isinstance(cc, str):
        return list(_native.compiler_words(cc))
    words = [str(w) for w in cc]
    if not words or not words[0]:
        raise InvalidConfigError("the C compiler command is empty (check $CC)")
    return words


def _paths(dirs: Iterable[PathLike]) -> List[str]:
    return [os.fspath(d) for d in dirs]


class KernelCompiler:
    """Compiles kernels and orchestrations for the sim platform, with a content-hash cache.

    ``cc`` overrides ``$CC`` (a string of words, or a list of words); ``include_dirs`` are
    searched after the simpler headers; ``extra_flags`` follow the base flags of every
    compile; ``cache_dir`` overrides the default cache location. ``hits`` and ``misses``
    count cache lookups.
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
        self.include_dirs = [include_dir()] + [Path(d) for d in include_dirs]
        self.extra_flags = [str(f) for f in extra_flags]
        self._native = _native.KernelCompiler(
            self.cc,
            _paths(self.include_dirs),
            self.extra_flags,
            os.fspath(cache_dir) if cache_dir is not None else None,
        )
        self.cache_dir = Path(self._native.cache_dir)

    @property
    def hits(self) -> int:
        """Cache lookups that found an entry."""
        return self._native.hits

    @property
    def misses(self) -> int:
        """Cache lookups that did not (each one compiled the source)."""
        return self._native.misses

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
        if core not in _CORES:
            raise InvalidConfigError(f"core_type must be 'aic' or 'aiv', got {core_type!r}")
        return self._native.compile(
            os.fspath(source_path), core, [f"-D{d}" for d in defines], _paths(extra_include_dirs)
        )

    def compile_orchestration(
        self,
        runtime_name: Union[str, PathLike],
        source_path: Optional[PathLike] = None,
        *,
        extra_include_dirs: Iterable[PathLike] = (),
        defines: Iterable[str] = (),
    ) -> bytes:
        """Compiles an orchestration for ``runtime_name`` (``"tensormap_and_ringbuffer"`` or
        ``"host_build_graph"``: one library serves both, the runtime is chosen per run);
        ``compile_orchestration(source_path)`` is accepted too. Another runtime name raises
        ``InvalidConfigError`` listing them."""
        if source_path is None:
            runtime_name, source_path = "tensormap_and_ringbuffer", runtime_name
        _native.CallConfig(runtime=str(runtime_name))  # the host's names, or its error
        return self._native.compile(
            os.fspath(source_path), None, [f"-D{d}" for d in defines], _paths(extra_include_dirs)
        )

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
        """Compiles one C source into a shared library (cached) with ``flags`` after the base
        flags and ``include_dirs`` after the compiler's own; returns its bytes."""
        return self._native.compile(
            os.fspath(source_path), None, [str(f) for f in flags], _paths(include_dirs)
        )

    def cache_path(self, source_path: PathLike, flags: Sequence[str] = ()) -> Path:
        """Where the image of ``source_path`` compiled with ``flags`` is (or would be) cached."""
        return Path(
            self._native.cache_path(os.fspath(source_path), None, [str(f) for f in flags])
        )
