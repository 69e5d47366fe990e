"""What the Ray children of one level-4 worker have in Ray's object store: :class:`DataPlane`
(per tensor, the ``ObjectRef`` holding its current content, and when that stops being valid),
its cache entries, and :func:`byte_range` (the bytes an array spans, for overlap checks).

It knows nothing of actors or children: it must not call an actor, and reaches Ray only to
``ray.put`` (through :func:`.spec._ray`, lazily).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .spec import _ray

__all__ = ["DataPlane", "byte_range"]


def byte_range(array: np.ndarray) -> Tuple[int, int]:
    """The bytes ``array`` spans: from its lowest to one past its highest (empty for an
    empty array)."""
    lo = hi = int(array.__array_interface__["data"][0])
    if array.size == 0:
        return lo, lo
    for n, s in zip(array.shape, array.strides):
        ext = (n - 1) * s
        if ext < 0:
            lo += ext
        else:
            hi += ext
    return lo, hi + array.itemsize


def _key(array: np.ndarray) -> Tuple[Any, ...]:
    return (
        int(array.__array_interface__["data"][0]),
        int(array.nbytes),
        array.dtype,
        tuple(array.shape),
        tuple(array.strides),
    )


@dataclass
class _Entry:
    lo: int
    hi: int
    sub_writes: int
    run: int
    ref: Any
    array: np.ndarray  # held so its memory (and address) is not reused while cached


class DataPlane:
    """What the Ray children of one level-4 worker sent or received, per tensor: the
    ``ObjectRef`` that holds a tensor's current content. Thread-safe (lane threads share it).

    An entry is the exact tensor (address, size, dtype, shape, strides); it is dropped when a
    task writes an overlapping byte range (:meth:`produced`, :meth:`wrote`) and at each
    level-4 run (:meth:`new_run`), and it is used only with the ``sub_writes`` value it was
    made with (a level-4 sub task that wrote something since may have changed it).
    ``puts`` counts ``ray.put`` calls, ``reuses`` the inputs served from an entry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: Dict[Tuple[Any, ...], _Entry] = {}
        self._pending: Dict[Tuple[Any, ...], Tuple[threading.Event, int, int]] = {}
        self._run = 0
        # Invalidations while puts are in flight, (sequence number, lo, hi): a put that an
        # overlapping one raced is returned but not cached.
        self._seq = 0
        self._log: List[Tuple[int, int, int]] = []
        self.puts = 0
        self.reuses = 0

    def input_ref(self, array: np.ndarray, sub_writes: int) -> Any:
        """The ``ObjectRef`` of ``array``'s content: the cached one when still valid, else a
        new ``ray.put`` (made once even when several lanes ask at the same time)."""
        key = _key(array)
        while True:
            with self._lock:
                e = self._entries.get(key)
                if e is not None and e.sub_writes == sub_writes and e.run == self._run:
                    self.reuses += 1
                    return e.ref
                pending = self._pending.get(key)
                if pending is None or pending[1] != sub_writes or pending[2] != self._run:
                    done = threading.Event()
                    self._pending[key] = (done, sub_writes, self._run)
                    run, start = self._run, self._seq
                    break
            pending[0].wait()
        try:
            ref = _ray().put(np.ascontiguousarray(array))
        except BaseException:
            with self._lock:
                if self._pending.get(key, (None,))[0] is done:
                    del self._pending[key]
            done.set()
            raise
        lo, hi = byte_range(array)
        with self._lock:
            self.puts += 1
            if self._pending.get(key, (None,))[0] is done:
                del self._pending[key]
            raced = any(seq > start and a < hi and lo < b for seq, a, b in self._log)
            if run == self._run and not raced:
                self._entries[key] = _Entry(lo, hi, sub_writes, run, ref, array)
            if not self._pending:
                self._log.clear()
        done.set()
        return ref

    def produced(self, array: np.ndarray, ref: Any, sub_writes: int) -> None:
        """A task wrote ``array``, and ``ref`` holds what it wrote: drop what overlaps it,
        then keep ``ref`` as that exact tensor's content."""
        lo, hi = byte_range(array)
        with self._lock:
            self._drop(lo, hi)
            self._entries[_key(array)] = _Entry(lo, hi, sub_writes, self._run, ref, array)

    def wrote(self, arrays: Sequence[np.ndarray]) -> None:
        """Tasks wrote ``arrays`` in this process: drop every entry overlapping them."""
        ranges = [byte_range(a) for a in arrays]
        with self._lock:
            for lo, hi in ranges:
                self._drop(lo, hi)

    def forget(self, refs: Sequence[Any]) -> None:
        """Drops the entries holding any of ``refs`` (objects Ray lost)."""
        gone = set(id(r) for r in refs)
        with self._lock:
            for key in [k for k, e in self._entries.items() if id(e.ref) in gone]:
                del self._entries[key]

    def new_run(self) -> None:
        """A level-4 run starts: nothing cached is valid any more."""
        with self._lock:
            self._run += 1
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _drop(self, lo: int, hi: int) -> None:
        if lo == hi:
            return
        self._seq += 1
        if self._pending:
            self._log.append((self._seq, lo, hi))
        for key in [k for k, e in self._entries.items() if e.lo < hi and lo < e.hi]:
            del self._entries[key]
