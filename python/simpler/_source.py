"""Source lines shipped with a sub callable, so a child's traceback shows them.

A function whose code's file a child process cannot read — defined in an interactive
session, a notebook cell, exec'd text, ``python -c`` — would show tracebacks without source
lines there. :func:`with_source` (called by ``HostWorker.register``) wraps such a function
with its file's lines as this process's :mod:`linecache` knows them; the sub worker loop
(``simpler._child``) unwraps it with :meth:`SourcedFunction.install`, which puts the lines
into the child's :mod:`linecache` under the original file name. Best effort: nothing is
shipped when the lines are unknown.

A module of its own (not ``_child``, which runs as ``__main__`` in the child), so the
pickled wrapper names the same class in both processes.
"""

from __future__ import annotations

import os
from typing import Any, Callable, List

__all__ = ["SourcedFunction", "with_source"]


class SourcedFunction:
    """A sub callable shipped with the source lines of the file that defined it, for a
    function whose file a child cannot read (defined in an interactive session, a notebook
    or exec'd text, ``__main__`` of ``python -c``): the child puts ``lines`` into
    :mod:`linecache` under ``filename``, so its tracebacks show the source lines.

    :func:`with_source` makes one in the parent (best effort: nothing is shipped when the
    lines are unknown); the sub loop unwraps it."""

    def __init__(self, fn: Callable[..., Any], filename: str, lines: List[str]) -> None:
        self.fn = fn
        self.filename = filename
        self.lines = lines

    def install(self) -> Callable[..., Any]:
        """Puts the lines into this process's :mod:`linecache`; returns the function."""
        import linecache

        if self.filename not in linecache.cache or not linecache.getlines(self.filename):
            size = sum(len(line) for line in self.lines)
            linecache.cache[self.filename] = (size, None, list(self.lines), self.filename)
        return self.fn


# The most source a registration ships (bytes): a notebook's cell, not a data file.
_MAX_SOURCE = 1 << 20


def with_source(fn: Any) -> Any:
    """``fn`` wrapped as a :class:`SourcedFunction` when its code's file is not a readable
    file and this process knows the file's lines (:mod:`linecache`, as IPython and
    ``inspect`` fill it); ``fn`` itself otherwise, or when anything goes wrong."""
    try:
        import linecache

        code = getattr(fn, "__code__", None)
        if code is None:
            return fn
        filename = code.co_filename
        if os.path.isfile(filename):
            return fn  # the child reads it as this process does
        lines = linecache.getlines(filename, getattr(fn, "__globals__", None))
        if not lines or sum(len(line) for line in lines) > _MAX_SOURCE:
            return fn
        return SourcedFunction(fn, filename, list(lines))
    except Exception:  # best effort: the function goes as it is
        return fn
