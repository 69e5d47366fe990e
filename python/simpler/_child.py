"""The program of a worker's child processes: ``python -m simpler._child``.

A :class:`~simpler.Worker` starts it (never by hand) for each chip of
``chip_isolation="process"`` (level 2 or 3) and for each sub worker, with its role and mailbox in the
environment (``SIMPLER_CHILD_*``) and the parent's ``sys.path`` as ``PYTHONPATH``, so
functions pickled by reference import here as they did in the parent.

* role ``chip``: the native chip server (``_native.serve_chip_child``) runs the chip until the
  parent says stop or dies.
* role ``sub``: the sub worker loop. It loads each registered function with cloudpickle and
  runs it as ``fn(args)``, ``args`` a :class:`MappedArgs`: the task's tensors as numpy arrays
  over the parent's shared memory (no copy: what the function writes, the parent sees) and
  its scalars as raw 64-bit ints (``args.scalar(i, dtype)`` decodes them). A function that
  raises fails its task with the formatted traceback; a function whose file the child cannot
  read arrives as a :class:`~simpler._source.SourcedFunction`, so that traceback still shows its lines.

The child ignores SIGINT: Ctrl-C interrupts the parent's wait, not the tasks in flight; every
child ends within milliseconds of its parent's death (its stdin pipe closes).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np

from . import _native
from ._source import SourcedFunction
from .types import DataType, TensorArgType, uint64_to_scalar

__all__ = ["MappedArgs", "main"]

ROLE_VARIABLE = "SIMPLER_CHILD_ROLE"


class MappedArgs:
    """A sub task's arguments, as its function ``fn(args)`` receives them.

    Tensors and scalars are numbered separately, each in the order the task's
    :class:`~simpler.TaskArgs` added them:

    * ``args[i]`` / ``args.tensor(i)``: the ``i``-th tensor, a numpy array over the parent's
      shared memory with the task's dtype, shape and strides (read-only when tagged
      ``INPUT``; what the function writes, the parent sees). Valid while the function runs:
      copy what must outlive the call. ``args.tag(i)`` is its :class:`~simpler.TensorArgType`.
    * ``args.scalar(i)``: the ``i``-th scalar's 64 raw bits, an unsigned int (upstream's):
      ``add_scalar(-3)`` arrives as ``2**64 - 3``, ``add_scalar(0.5)`` as the f32 bits
      ``1056964608``. ``args.scalar(i, dtype)`` (or ``args.scalar_as(i, dtype)``) decodes
      them for ``dtype`` — a :class:`~simpler.DataType`, a name (``"f32"``, ``"i64"``) or a
      numpy dtype (``np.float32``) — with :func:`~simpler.uint64_to_scalar`, the inverse of
      the encoding the parent used (:func:`~simpler.scalar_to_uint64`): ``-3`` for
      ``"i64"``, ``0.5`` for ``"f32"``. A float added without a dtype travels as ``f32``.
    * ``tensor_count()``, ``scalar_count()``, ``tensors``, ``scalars``; ``len(args)`` counts
      both.
    """

    def __init__(self, items: List[Any]) -> None:
        self._tensors: List[np.ndarray] = []
        self._tags: List[TensorArgType] = []
        self._scalars: List[int] = []
        for item in items:
            if isinstance(item, int):
                self._scalars.append(item)
                continue
            arr = np.asarray(item)
            if item.dtype == DataType.BFLOAT16:
                try:
                    arr = arr.view(DataType.BFLOAT16.to_numpy())
                except Exception:  # no ml_dtypes: the raw 16-bit words
                    pass
            self._tensors.append(arr)
            self._tags.append(TensorArgType(item.tag))

    def tensor(self, i: int) -> np.ndarray:
        """The ``i``-th tensor as a numpy array (see the class docs); ``IndexError`` past
        the last."""
        return self._tensors[i]

    def tag(self, i: int) -> TensorArgType:
        """The tag the ``i``-th tensor was added with."""
        return self._tags[i]

    def scalar(self, i: int, dtype: Any = None) -> Union[int, float]:
        """The ``i``-th scalar: its 64 raw bits as an unsigned int when ``dtype`` is ``None``;
        otherwise the value they carry for ``dtype`` (``"f32"``, ``np.int64``, a
        :class:`~simpler.DataType` ...), decoded by :func:`~simpler.uint64_to_scalar`.
        ``IndexError`` past the last scalar; ``ArgumentTypeError`` for an unknown dtype."""
        bits = self._scalars[i]
        return bits if dtype is None else uint64_to_scalar(bits, dtype)

    def scalar_as(self, i: int, dtype: Any) -> Union[int, float]:
        """``scalar(i, dtype)``: the ``i``-th scalar decoded for ``dtype``."""
        return uint64_to_scalar(self._scalars[i], dtype)

    def tensor_count(self) -> int:
        """How many tensors the task has."""
        return len(self._tensors)

    def scalar_count(self) -> int:
        """How many scalars the task has."""
        return len(self._scalars)

    @property
    def tensors(self) -> List[np.ndarray]:
        """Every tensor, in order (a new list)."""
        return list(self._tensors)

    @property
    def scalars(self) -> List[int]:
        """Every scalar's raw bits, in order (a new list)."""
        return list(self._scalars)

    def __getitem__(self, i: int) -> np.ndarray:
        return self._tensors[i]

    def __len__(self) -> int:
        return len(self._tensors) + len(self._scalars)

    def __repr__(self) -> str:
        return f"MappedArgs(tensors={len(self._tensors)}, scalars={len(self._scalars)})"


def _formatted(skip_own_frame: bool = False) -> str:
    """The traceback of the exception being handled; without this loop's frame when it was
    raised by the function the loop called."""
    kind, value, tb = sys.exc_info()
    if skip_own_frame and tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(kind, value, tb))


def _sub_loop() -> int:
    """Serves sub worker requests until Shutdown (see the module docs)."""
    import cloudpickle

    child = _native.SubChild.connect()
    functions: Dict[int, Callable[[MappedArgs], Any]] = {}
    names: Dict[int, str] = {}
    while True:
        request = child.next()
        error: Optional[str] = None
        if request.kind == "shutdown":
            return 0
        if request.kind == "register":
            try:
                fn = cloudpickle.loads(request.payload)
                if isinstance(fn, SourcedFunction):
                    fn = fn.install()
                functions[request.key] = fn
                names[request.key] = request.name or "?"
            except BaseException:
                error = f"cannot load `{request.name}` in sub worker {os.getpid()}:\n{_formatted()}"
        elif request.kind == "unregister":
            functions.pop(request.key, None)
            names.pop(request.key, None)
        elif request.kind == "run":
            fn = functions.get(request.key)
            if fn is None:
                error = f"callable {request.key} is not registered in this sub worker"
            else:
                args = MappedArgs(request.args)
                try:
                    fn(args)
                except BaseException:
                    error = _formatted(skip_own_frame=True)
                del args  # the arrays are valid only until the reply
        else:
            error = f"unknown request {request.kind!r}"
        child.reply(error)


def main() -> int:
    """The child's whole life; returns its exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    role = os.environ.get(ROLE_VARIABLE)
    if role == "chip":
        return int(_native.serve_chip_child())
    if role == "sub":
        return _sub_loop()
    print(
        f"simpler._child: {ROLE_VARIABLE}={role!r}: this program is a simpler worker's child "
        "process, started by a Worker(level=3, ...), not by hand",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
