"""Source lines shipped with a sub callable, so a child's traceback shows them.

A function whose code's file a child process cannot read — defined in an interactive
session, a notebook cell, exec'd text, ``python -c`` — would show tracebacks without source
lines there, and cloudpickle names the file of any function it pickles by value
``<dynamic-code>``. :func:`with_source` (called by ``HostWorker.register``) wraps a function
with its file's name and, for a file a child cannot read, its lines as this process's
:mod:`linecache` knows them; the sub worker loop
(``simpler._child``) unwraps it with :meth:`SourcedFunction.install`, which puts the lines
into the child's :mod:`linecache` under the original file name. Best effort: nothing is
shipped when the lines are unknown.

A module of its own (not ``_child``, which runs as ``__main__`` in the child), so the
pickled wrapper names the same class in both processes.
"""

from __future__ import annotations

import os
from types import CodeType
from typing import Any, Callable, List, Optional

__all__ = ["SourcedFunction", "with_source"]


class SourcedFunction:
    """A sub callable shipped with the name of the file that defined it and, when a child
    cannot read that file, its lines. cloudpickle renames the file of every function it
    pickles by value (``__main__`` functions, lambdas, closures) to ``<dynamic-code>``;
    :meth:`install` gives the child's copy its original ``filename`` back and, with
    ``lines``, puts them into :mod:`linecache` under it, so the child's tracebacks show the
    source lines.

    :func:`with_source` makes one in the parent; the sub loop unwraps it."""

    def __init__(
        self, fn: Callable[..., Any], filename: str, lines: Optional[List[str]]
    ) -> None:
        self.fn = fn
        self.filename = filename
        self.lines = lines

    def install(self) -> Callable[..., Any]:
        """Restores the function's file name and puts the lines (if any) into this process's
        :mod:`linecache`; returns the function."""
        import linecache

        fn = self.fn
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename != self.filename:
            try:
                fn.__code__ = _renamed(code, self.filename)
            except (AttributeError, TypeError, ValueError):
                pass  # best effort: the traceback names <dynamic-code> then
        if self.lines and not linecache.getlines(self.filename):
            size = sum(len(line) for line in self.lines)
            linecache.cache[self.filename] = (size, None, list(self.lines), self.filename)
        return fn


def _renamed(code: CodeType, filename: str) -> CodeType:
    """``code`` and the code objects nested in it with ``co_filename`` = ``filename``."""
    consts = tuple(
        _renamed(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


# The most source a registration ships (bytes): a notebook's cell, not a data file.
_MAX_SOURCE = 1 << 20


def with_source(fn: Any) -> Any:
    """``fn`` wrapped as a :class:`SourcedFunction` — its code's file name, and the file's
    lines when that is no readable file and this process's :mod:`linecache` knows them (as
    IPython and ``inspect`` fill it) — or ``fn`` itself when it has no code or anything goes
    wrong."""
    try:
        import linecache

        code = getattr(fn, "__code__", None)
        if code is None:
            return fn
        filename = code.co_filename
        lines: Optional[List[str]] = None
        if not os.path.isfile(filename):
            known = linecache.getlines(filename, getattr(fn, "__globals__", None))
            if known and sum(len(line) for line in known) <= _MAX_SOURCE:
                lines = list(known)
        return SourcedFunction(fn, filename, lines)
    except Exception:  # best effort: the function goes as it is
        return fn
